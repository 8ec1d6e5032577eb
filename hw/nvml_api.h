/* The part of NVML's C ABI that corral's nvidia backend uses, declared by
 * us from NVIDIA's public NVML API reference (types, return codes, struct
 * layouts and function signatures), so that corral builds without the CUDA
 * toolkit and opens libnvidia-ml.so.1 at run time with dlopen.
 *
 * The stand-in NVML the tests build (tests/stubs/nvml_stub.c) implements
 * the same functions against these declarations, so a layout mistake here
 * would show up there only if the real library disagreed: keep every
 * struct exactly as documented, one field per documented member.
 *
 * Also declared here: the backend's text parsers for /proc/driver/nvidia,
 * exported for the unit and fuzz tests. */
#ifndef CORRAL_HW_NVML_API_H
#define CORRAL_HW_NVML_API_H

#include <stddef.h>
#include <stdint.h>

/* ---- return codes (nvmlReturn_t) ---- */
typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_UNKNOWN = 999,
};

/* ---- handles and small enums ---- */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef int nvmlEnableState_t; /* 0 disabled, 1 enabled */
enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 };
enum { NVML_DEVICE_MIG_DISABLE = 0, NVML_DEVICE_MIG_ENABLE = 1 };
typedef int nvmlMemoryErrorType_t;
enum { NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };
typedef int nvmlEccCounterType_t;
enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 };
typedef int nvmlTemperatureSensors_t;
enum { NVML_TEMPERATURE_GPU = 0 };
typedef int nvmlIntNvLinkDeviceType_t;
enum {
    NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF,
};
typedef unsigned char nvmlGpuFabricState_t;
enum {
    NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0,
    NVML_GPU_FABRIC_STATE_NOT_STARTED = 1,
    NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2,
    NVML_GPU_FABRIC_STATE_COMPLETED = 3,
};

/* ---- sizes ---- */
#define NVML_NVLINK_MAX_LINKS 18
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_GPU_FABRIC_UUID_LEN 16

/* ---- structs (documented layouts) ---- */
typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId; /* device id << 16 | vendor id */
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "00000000:18:00.0" */
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
    unsigned long long total, free, used; /* bytes */
} nvmlMemory_t;

typedef struct nvmlUtilization_st {
    unsigned int gpu;    /* percent of time a kernel ran */
    unsigned int memory; /* percent of time memory was read or written */
} nvmlUtilization_t;

/* nvmlDeviceGetAttributes_v2: documented for MIG device handles. */
typedef struct nvmlDeviceAttributes_st {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

/* nvmlDeviceGetGpuFabricInfo (the first, unversioned layout). */
typedef struct nvmlGpuFabricInfo_st {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

/* ---- events (NVML's "Event Handling Methods") ---- */
typedef struct nvmlEventSet_st *nvmlEventSet_t;
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL
typedef struct nvmlEventData_st {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData; /* the XID, for nvmlEventTypeXidCriticalError */
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

/* ---- the functions, as X(return type, name, parameters, required) ----
 * Required ones must resolve or the library is refused; the others are
 * looked up and used when the driver has them. */
/* clang-format off */
#define CR_NVML_FUNCS(X)                                                                           \
    X(nvmlReturn_t, nvmlInit_v2, (void), 1)                                                        \
    X(nvmlReturn_t, nvmlShutdown, (void), 1)                                                       \
    X(nvmlReturn_t, nvmlDeviceGetCount_v2, (unsigned int *count), 1)                               \
    X(nvmlReturn_t, nvmlDeviceGetHandleByIndex_v2, (unsigned int index, nvmlDevice_t *dev), 1)     \
    X(nvmlReturn_t, nvmlDeviceGetName, (nvmlDevice_t dev, char *name, unsigned int len), 1)        \
    X(nvmlReturn_t, nvmlDeviceGetUUID, (nvmlDevice_t dev, char *uuid, unsigned int len), 1)        \
    X(nvmlReturn_t, nvmlDeviceGetPciInfo_v3, (nvmlDevice_t dev, nvmlPciInfo_t *pci), 1)            \
    X(nvmlReturn_t, nvmlDeviceGetMemoryInfo, (nvmlDevice_t dev, nvmlMemory_t *mem), 1)             \
    X(nvmlReturn_t, nvmlSystemGetDriverVersion, (char *version, unsigned int len), 0)              \
    X(nvmlReturn_t, nvmlDeviceGetCudaComputeCapability,                                            \
      (nvmlDevice_t dev, int *major, int *minor), 0)                                               \
    X(nvmlReturn_t, nvmlDeviceGetAttributes_v2,                                                    \
      (nvmlDevice_t dev, nvmlDeviceAttributes_t *attr), 0)                                         \
    X(nvmlReturn_t, nvmlDeviceGetMigMode,                                                          \
      (nvmlDevice_t dev, unsigned int *current, unsigned int *pending), 0)                         \
    X(nvmlReturn_t, nvmlDeviceGetMaxMigDeviceCount, (nvmlDevice_t dev, unsigned int *count), 0)    \
    X(nvmlReturn_t, nvmlDeviceGetMigDeviceHandleByIndex,                                           \
      (nvmlDevice_t dev, unsigned int index, nvmlDevice_t *mig), 0)                                \
    X(nvmlReturn_t, nvmlDeviceGetNvLinkState,                                                      \
      (nvmlDevice_t dev, unsigned int link, nvmlEnableState_t *active), 0)                         \
    X(nvmlReturn_t, nvmlDeviceGetNvLinkVersion,                                                    \
      (nvmlDevice_t dev, unsigned int link, unsigned int *version), 0)                             \
    X(nvmlReturn_t, nvmlDeviceGetNvLinkRemotePciInfo_v2,                                           \
      (nvmlDevice_t dev, unsigned int link, nvmlPciInfo_t *pci), 0)                                \
    X(nvmlReturn_t, nvmlDeviceGetNvLinkRemoteDeviceType,                                           \
      (nvmlDevice_t dev, unsigned int link, nvmlIntNvLinkDeviceType_t *type), 0)                   \
    X(nvmlReturn_t, nvmlDeviceGetTotalEccErrors,                                                   \
      (nvmlDevice_t dev, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,                 \
       unsigned long long *count), 0)                                                              \
    X(nvmlReturn_t, nvmlDeviceGetRetiredPagesPendingStatus,                                        \
      (nvmlDevice_t dev, nvmlEnableState_t *pending), 0)                                           \
    X(nvmlReturn_t, nvmlDeviceGetRemappedRows,                                                     \
      (nvmlDevice_t dev, unsigned int *corr, unsigned int *unc, unsigned int *pending,             \
       unsigned int *failed), 0)                                                                   \
    X(nvmlReturn_t, nvmlDeviceGetGpuFabricInfo,                                                    \
      (nvmlDevice_t dev, nvmlGpuFabricInfo_t *info), 0)                                            \
    X(nvmlReturn_t, nvmlDeviceGetNumaNodeId, (nvmlDevice_t dev, unsigned int *node), 0)            \
    X(nvmlReturn_t, nvmlDeviceGetUtilizationRates,                                                 \
      (nvmlDevice_t dev, nvmlUtilization_t *util), 0)                                              \
    X(nvmlReturn_t, nvmlDeviceGetPowerUsage, (nvmlDevice_t dev, unsigned int *milliwatts), 0)      \
    X(nvmlReturn_t, nvmlDeviceGetTemperature,                                                      \
      (nvmlDevice_t dev, nvmlTemperatureSensors_t sensor, unsigned int *celsius), 0)               \
    X(nvmlReturn_t, nvmlDeviceGetHandleByUUID, (const char *uuid, nvmlDevice_t *dev), 0)           \
    X(nvmlReturn_t, nvmlEventSetCreate, (nvmlEventSet_t *set), 0)                                  \
    X(nvmlReturn_t, nvmlDeviceRegisterEvents,                                                      \
      (nvmlDevice_t dev, unsigned long long types, nvmlEventSet_t set), 0)                         \
    X(nvmlReturn_t, nvmlEventSetWait_v2,                                                           \
      (nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms), 0)                      \
    X(nvmlReturn_t, nvmlEventSetFree, (nvmlEventSet_t set), 0)                                     \
    X(const char *, nvmlErrorString, (nvmlReturn_t r), 0)
/* clang-format on */

/* ---- /proc/driver/nvidia text (hw/backend_nvidia.c) ---- */
/* The driver version from /proc/driver/nvidia/version ("NVRM version:
 * NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..."). Returns 0 or
 * CR_EPARSE. */
int hw_nvidia_parse_version(const char *text, char *out, size_t outsize);
/* What /proc/driver/nvidia/gpus/<busid>/information says of one GPU. */
typedef struct hw_nvidia_info {
    char model[96];
    char uuid[96];
    char bus[20]; /* normalized "0000:18:00.0", "" absent */
    int minor;    /* /dev/nvidiaN, -1 absent */
} hw_nvidia_info_t;
/* Parses "Key: value" lines; unknown keys are ignored. Returns 0 when the
 * text had at least a model or a UUID, else CR_EPARSE. */
int hw_nvidia_parse_information(const char *text, hw_nvidia_info_t *out);
/* "00000000:18:00.0", "0000:18:00.0" or "18:00.0" to "0000:18:00.0";
 * returns 0 or CR_EPARSE. */
int hw_nvidia_normalize_busid(const char *in, char *out, size_t outsize);

#endif
