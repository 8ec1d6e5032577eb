/* A stand-in NVML for tests: the functions corral's nvidia backend uses,
 * answering from a JSON description of a machine (the file named by the
 * environment variable CORRAL_NVML_STUB, e.g. tests/fixtures/hw/dgx-h100/
 * nvml.json), so the backend runs without a GPU.
 *
 * Besides the machine, the description can make the library misbehave,
 * so tests prove the backend survives it:
 *   "fail":  {"nvmlDeviceGetMemoryInfo": "GPU_IS_LOST",      every device
 *             "nvmlDeviceGetUUID@3": 15}                     device 3 only
 *   "crash": "nvmlDeviceGetNvLinkState"   raise SIGSEGV in that function
 *   "hang":  "nvmlDeviceGetName@2"        never return from it
 *   "visible_devices": 7                  report only the first 7 GPUs
 * A device's "xid_events": [13, 31] are the XID errors an event set it is
 * registered in delivers, once each, in order (nvmlEventSetWait_v2).
 * Error codes are NVML's numbers or their names without NVML_ERROR_.
 *
 * The device keys are documented in docs/hardware.md. The
 * prototypes come from hw/nvml_api.h, so a signature that drifts from the
 * backend's view fails to compile. */
#include "hw/nvml_api.h"
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define STUB_DECL(ret, name, params, req) EXPORT ret name params;
CR_NVML_FUNCS(STUB_DECL)
#undef STUB_DECL

#define MAX_DEVS 64
#define MAX_MIGS 8

struct nvmlDevice_st {
    json_t *j;
    char tag[16]; /* "3" for GPU 3, "3.1" for its MIG instance 1 */
    bool mig;
    struct nvmlDevice_st *migs[MAX_MIGS];
    unsigned nmigs;
};

static struct {
    int refs;
    json_t *root;
    struct nvmlDevice_st devs[MAX_DEVS];
    struct nvmlDevice_st migs[MAX_DEVS][MAX_MIGS];
    unsigned ndevs;
} st;

static const struct {
    const char *name;
    nvmlReturn_t code;
    const char *text;
} codes[] = {
    {"SUCCESS", NVML_SUCCESS, "Success"},
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED, "Uninitialized"},
    {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
    {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
    {"NOT_FOUND", NVML_ERROR_NOT_FOUND, "Not Found"},
    {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
    {"TIMEOUT", NVML_ERROR_TIMEOUT, "Timeout"},
    {"CORRUPTED_INFOROM", NVML_ERROR_CORRUPTED_INFOROM, "Corrupted infoROM"},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
    {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED, "GPU requires restart"},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH,
     "RM has detected an NVML/RM version mismatch"},
    {"NO_DATA", NVML_ERROR_NO_DATA, "No data"},
    {"UNKNOWN", NVML_ERROR_UNKNOWN, "Unknown Error"},
};

static nvmlReturn_t code_of(const json_t *v)
{
    if (json_is_integer(v))
        return (nvmlReturn_t)json_integer_value(v);
    const char *s = json_string_value(v);
    if (s)
        for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
            if (strcmp(codes[i].name, s) == 0)
                return codes[i].code;
    return NVML_ERROR_UNKNOWN;
}

/* "fn" matches every call of fn, "fn@tag" only the device with that tag. */
static bool names_call(const char *entry, const char *fn, const struct nvmlDevice_st *d)
{
    size_t n = strlen(fn);
    if (strncmp(entry, fn, n) != 0)
        return false;
    if (entry[n] == '\0')
        return true;
    return entry[n] == '@' && d && strcmp(entry + n + 1, d->tag) == 0;
}

/* Every function starts here: crash, hang or fail as the description says. */
static nvmlReturn_t enter(const char *fn, const struct nvmlDevice_st *d)
{
    if (!st.root)
        return NVML_ERROR_UNINITIALIZED;
    const char *crash = json_string_value(json_object_get(st.root, "crash"));
    if (crash && names_call(crash, fn, d)) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        signal(SIGSEGV, SIG_DFL); /* past any sanitizer's handler: die of it */
        raise(SIGSEGV);
    }
    const char *hang = json_string_value(json_object_get(st.root, "hang"));
    if (hang && names_call(hang, fn, d))
        for (;;)
            pause();
    json_t *fail = json_object_get(st.root, "fail");
    const char *key;
    json_t *v;
    json_object_foreach(fail, key, v)
    {
        if (names_call(key, fn, d))
            return code_of(v);
    }
    return NVML_SUCCESS;
}

#define ENTER(d)                                                                                   \
    do {                                                                                           \
        nvmlReturn_t r_ = enter(__func__, (d));                                                    \
        if (r_ != NVML_SUCCESS)                                                                    \
            return r_;                                                                             \
    } while (0)

static bool valid(const struct nvmlDevice_st *d)
{
    if (!d || !st.root)
        return false;
    for (unsigned i = 0; i < st.ndevs; i++) {
        if (d == &st.devs[i])
            return true;
        for (unsigned k = 0; k < st.devs[i].nmigs; k++)
            if (d == st.devs[i].migs[k])
                return true;
    }
    return false;
}

#define DEVICE(d)                                                                                  \
    do {                                                                                           \
        if (!valid(d))                                                                             \
            return st.root ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;               \
        ENTER(d);                                                                                  \
    } while (0)

static json_int_t num(const json_t *j, const char *key, json_int_t dflt)
{
    json_t *v = json_object_get(j, key);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

static const char *str(const json_t *j, const char *key)
{
    return json_string_value(json_object_get(j, key));
}

static nvmlReturn_t copy_str(const char *s, char *buf, unsigned len)
{
    if (!s)
        return NVML_ERROR_NOT_SUPPORTED;
    if (strlen(s) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

/* "0000:18:00.0" -> NVML's forms of it */
static nvmlReturn_t fill_pci(const char *s, unsigned devid, nvmlPciInfo_t *p)
{
    unsigned dom, bus, dev, fn;
    if (!s || sscanf(s, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
        return NVML_ERROR_UNKNOWN;
    memset(p, 0, sizeof(*p));
    p->domain = dom;
    p->bus = bus;
    p->device = dev;
    p->pciDeviceId = devid;
    snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "%04X:%02X:%02X.%X", dom, bus, dev, fn);
    snprintf(p->busId, sizeof(p->busId), "%08X:%02X:%02X.%X", dom, bus, dev, fn);
    return NVML_SUCCESS;
}

static void reset(void)
{
    json_decref(st.root);
    memset(&st, 0, sizeof(st));
}

nvmlReturn_t nvmlInit_v2(void)
{
    if (st.refs > 0) {
        st.refs++;
        return NVML_SUCCESS;
    }
    const char *path = getenv("CORRAL_NVML_STUB");
    if (!path || !*path) {
        fprintf(stderr, "nvml_stub: CORRAL_NVML_STUB names no machine description\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    json_error_t je;
    st.root = json_load_file(path, 0, &je);
    if (!st.root) {
        fprintf(stderr, "nvml_stub: %s:%d: %s\n", path, je.line, je.text);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    json_t *devs = json_object_get(st.root, "devices");
    size_t n = json_array_size(devs);
    json_int_t visible = num(st.root, "visible_devices", (json_int_t)n);
    if (visible >= 0 && (size_t)visible < n)
        n = (size_t)visible;
    for (size_t i = 0; i < n && i < MAX_DEVS; i++) {
        struct nvmlDevice_st *d = &st.devs[st.ndevs++];
        d->j = json_array_get(devs, i);
        snprintf(d->tag, sizeof(d->tag), "%zu", i);
        json_t *migs = json_object_get(d->j, "mig");
        for (size_t k = 0; k < json_array_size(migs) && k < MAX_MIGS; k++) {
            struct nvmlDevice_st *m = &st.migs[i][k];
            m->j = json_array_get(migs, k);
            m->mig = true;
            snprintf(m->tag, sizeof(m->tag), "%zu.%zu", i, k);
            d->migs[d->nmigs++] = m;
        }
    }
    nvmlReturn_t r = enter(__func__, NULL);
    if (r != NVML_SUCCESS) {
        reset();
        return r;
    }
    st.refs = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
    if (st.refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (--st.refs == 0)
        reset();
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (codes[i].code == r)
            return codes[i].text;
    return "Unknown Error";
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int len)
{
    ENTER(NULL);
    return copy_str(str(st.root, "driver_version"), version, len);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    ENTER(NULL);
    *count = st.ndevs;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev)
{
    if (!st.root)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= st.ndevs)
        return NVML_ERROR_INVALID_ARGUMENT;
    ENTER(&st.devs[index]);
    *dev = &st.devs[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev)
{
    ENTER(NULL);
    for (unsigned i = 0; i < st.ndevs; i++) {
        const char *u = str(st.devs[i].j, "uuid");
        if (u && strcmp(u, uuid) == 0) {
            *dev = &st.devs[i];
            return NVML_SUCCESS;
        }
        for (unsigned k = 0; k < st.devs[i].nmigs; k++) {
            u = str(st.devs[i].migs[k]->j, "uuid");
            if (u && strcmp(u, uuid) == 0) {
                *dev = st.devs[i].migs[k];
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int len)
{
    DEVICE(dev);
    return copy_str(str(dev->j, "name"), name, len);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int len)
{
    DEVICE(dev);
    return copy_str(str(dev->j, "uuid"), uuid, len);
}

static unsigned parse_devid(const json_t *j)
{
    const char *s = str(j, "pci_device_id");
    return s ? (unsigned)strtoul(s, NULL, 16) : 0;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
    DEVICE(dev);
    if (dev->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    return fill_pci(str(dev->j, "pci"), parse_devid(dev->j), pci);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem)
{
    DEVICE(dev);
    const json_t *t = json_object_get(dev->j, "telemetry");
    mem->total = (unsigned long long)num(dev->j, "memory_mib", 0) << 20;
    mem->used = (unsigned long long)num(t, "memory_used_mib", 0) << 20;
    mem->free = mem->total > mem->used ? mem->total - mem->used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t dev, int *major, int *minor)
{
    DEVICE(dev);
    const char *cc = str(dev->j, "cc");
    if (!cc || sscanf(cc, "%d.%d", major, minor) != 2)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* Like the real library: attributes of MIG instances only. */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t dev, nvmlDeviceAttributes_t *attr)
{
    DEVICE(dev);
    if (!dev->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(attr, 0, sizeof(*attr));
    attr->multiprocessorCount = (unsigned)num(dev->j, "sm_count", 0);
    attr->gpuInstanceSliceCount = (unsigned)num(dev->j, "gi_slices", 1);
    attr->computeInstanceSliceCount = (unsigned)num(dev->j, "ci_slices", 1);
    attr->memorySizeMB = (unsigned long long)num(dev->j, "memory_mib", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int *current, unsigned int *pending)
{
    DEVICE(dev);
    if (dev->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    json_t *m = json_object_get(dev->j, "mig_mode");
    if (!m)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = json_is_true(m) ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned int *count)
{
    DEVICE(dev);
    if (dev->mig || !json_object_get(dev->j, "mig_mode"))
        return NVML_ERROR_NOT_SUPPORTED;
    *count = 7;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned int index,
                                                 nvmlDevice_t *mig)
{
    DEVICE(dev);
    if (dev->mig || !json_is_true(json_object_get(dev->j, "mig_mode")))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= dev->nmigs)
        return NVML_ERROR_NOT_FOUND;
    *mig = dev->migs[index];
    return NVML_SUCCESS;
}

/* "nvlinks": [{"type": "gpu"|"switch", "pci": "...", "count": N}, ...]:
 * links are numbered in that order; the rest up to 18 are inactive. */
static nvmlReturn_t link_entry(nvmlDevice_t dev, unsigned link, const json_t **out)
{
    json_t *links = json_object_get(dev->j, "nvlinks");
    if (dev->mig || !links)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned base = 0;
    size_t i;
    json_t *e;
    *out = NULL;
    json_array_foreach(links, i, e)
    {
        unsigned n = (unsigned)num(e, "count", 1);
        if (link < base + n) {
            *out = e;
            break;
        }
        base += n;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned int link,
                                      nvmlEnableState_t *active)
{
    DEVICE(dev);
    const json_t *e;
    nvmlReturn_t r = link_entry(dev, link, &e);
    if (r == NVML_SUCCESS)
        *active = e ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return r;
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t dev, unsigned int link, unsigned int *version)
{
    DEVICE(dev);
    const json_t *e;
    nvmlReturn_t r = link_entry(dev, link, &e);
    if (r == NVML_SUCCESS)
        *version = (unsigned)num(dev->j, "nvlink_version", 4);
    return r;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t dev, unsigned int link,
                                                 nvmlPciInfo_t *pci)
{
    DEVICE(dev);
    const json_t *e;
    nvmlReturn_t r = link_entry(dev, link, &e);
    if (r != NVML_SUCCESS)
        return r;
    if (!e)
        return NVML_ERROR_INVALID_ARGUMENT;
    return fill_pci(str(e, "pci"), 0, pci);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t dev, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t *type)
{
    DEVICE(dev);
    const json_t *e;
    nvmlReturn_t r = link_entry(dev, link, &e);
    if (r != NVML_SUCCESS)
        return r;
    if (!e)
        return NVML_ERROR_INVALID_ARGUMENT;
    const char *t = str(e, "type");
    *type = t && strcmp(t, "switch") == 0 ? NVML_NVLINK_DEVICE_TYPE_SWITCH
            : t && strcmp(t, "gpu") == 0  ? NVML_NVLINK_DEVICE_TYPE_GPU
                                          : NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, nvmlMemoryErrorType_t type,
                                         nvmlEccCounterType_t counter, unsigned long long *count)
{
    DEVICE(dev);
    json_t *ecc = json_object_get(dev->j, "ecc");
    if (dev->mig || !ecc)
        return NVML_ERROR_NOT_SUPPORTED;
    static const char *const keys[2][2] = {
        {"corrected_volatile", "corrected_aggregate"},
        {"uncorrected_volatile", "uncorrected_aggregate"},
    };
    if (type < 0 || type > 1 || counter < 0 || counter > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned long long)num(ecc, keys[type][counter], 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, nvmlEnableState_t *pending)
{
    DEVICE(dev);
    json_t *ecc = json_object_get(dev->j, "ecc");
    if (dev->mig || !ecc)
        return NVML_ERROR_NOT_SUPPORTED;
    *pending = json_is_true(json_object_get(ecc, "retired_pages_pending"));
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failed)
{
    DEVICE(dev);
    json_t *ecc = json_object_get(dev->j, "ecc");
    if (dev->mig || !ecc)
        return NVML_ERROR_NOT_SUPPORTED;
    *corr = (unsigned)num(ecc, "remapped_rows_corrected", 0);
    *unc = (unsigned)num(ecc, "remapped_rows_uncorrected", 0);
    *pending = json_is_true(json_object_get(ecc, "remap_pending"));
    *failed = json_is_true(json_object_get(ecc, "remap_failed"));
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t dev, nvmlGpuFabricInfo_t *info)
{
    DEVICE(dev);
    json_t *f = json_object_get(dev->j, "fabric");
    if (dev->mig || !f)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof(*info));
    const char *u = str(f, "cluster_uuid");
    for (size_t i = 0, k = 0; u && u[i] && k < NVML_GPU_FABRIC_UUID_LEN; i++) {
        unsigned b;
        if (u[i] == '-')
            continue;
        if (sscanf(u + i, "%2x", &b) != 1)
            break;
        info->clusterUuid[k++] = (unsigned char)b;
        i++;
    }
    info->cliqueId = (unsigned)num(f, "clique", 0);
    info->status = NVML_SUCCESS;
    info->state = (nvmlGpuFabricState_t)num(f, "state", NVML_GPU_FABRIC_STATE_COMPLETED);
    return NVML_SUCCESS;
}

/* "numa_id": the NUMA node of a C2C GPU's memory; absent: NOT_SUPPORTED,
 * as NVML answers for PCIe GPUs */
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t dev, unsigned int *node)
{
    DEVICE(dev);
    json_t *v = json_object_get(dev->j, "numa_id");
    if (dev->mig || !json_is_integer(v))
        return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned)json_integer_value(v);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *util)
{
    DEVICE(dev);
    json_t *t = json_object_get(dev->j, "telemetry");
    if (dev->mig || !t)
        return NVML_ERROR_NOT_SUPPORTED;
    util->gpu = (unsigned)num(t, "gpu_util", 0);
    util->memory = (unsigned)num(t, "mem_util", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int *milliwatts)
{
    DEVICE(dev);
    json_t *t = json_object_get(dev->j, "telemetry");
    if (dev->mig || !t)
        return NVML_ERROR_NOT_SUPPORTED;
    *milliwatts = (unsigned)num(t, "power_mw", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, nvmlTemperatureSensors_t sensor,
                                      unsigned int *celsius)
{
    DEVICE(dev);
    json_t *t = json_object_get(dev->j, "telemetry");
    if (dev->mig || !t || sensor != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_NOT_SUPPORTED;
    *celsius = (unsigned)num(t, "temperature_c", 0);
    return NVML_SUCCESS;
}

/* ---- events: a device's "xid_events", delivered once each per set ---- */

struct nvmlEventSet_st {
    struct nvmlDevice_st *devs[MAX_DEVS];
    size_t next[MAX_DEVS]; /* the next of each device's xid_events */
    unsigned n;
};

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    ENTER(NULL);
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof(**set));
    return *set ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types,
                                      nvmlEventSet_t set)
{
    DEVICE(dev);
    if (!set || types != nvmlEventTypeXidCriticalError)
        return types & ~nvmlEventTypeXidCriticalError ? NVML_ERROR_NOT_SUPPORTED
                                                      : NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < set->n; i++)
        if (set->devs[i] == dev)
            return NVML_SUCCESS;
    if (set->n == MAX_DEVS)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    set->devs[set->n++] = dev;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    ENTER(NULL);
    (void)timeoutms; /* nothing comes later: none now is a timeout */
    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < set->n; i++) {
        json_t *x = json_object_get(set->devs[i]->j, "xid_events");
        if (set->next[i] < json_array_size(x)) {
            memset(data, 0, sizeof(*data));
            data->device = set->devs[i];
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData =
                (unsigned long long)json_integer_value(json_array_get(x, set->next[i]++));
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    ENTER(NULL);
    free(set);
    return NVML_SUCCESS;
}
