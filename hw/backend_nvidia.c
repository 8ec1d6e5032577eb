/* The nvidia backend: NVIDIA GPUs through NVML, opened at run time with
 * dlopen (libnvidia-ml.so.1, or CORRAL_NVML_LIBRARY), never linked.
 *
 * With NVML: name, UUID, PCI address, memory, compute capability, MIG mode
 * and MIG instances (each its own device), NVLink peers (direct bridges
 * and NVSwitch fabrics), ECC and row-remapping health, driver version, the
 * fabric clique, and telemetry. Without it (no library, no driver, NVML
 * refusing to start): the GPUs on the PCI bus under the root prefix, with
 * what /proc/driver/nvidia says of them. When both are there and disagree
 * on the count, the node says so.
 *
 * The probe calls foreign code, so it asks the registry to run it in a
 * child process (CR_ACCEL_F_PROBE_ISOLATED): an NVML that crashes or hangs
 * turns this backend off, never the caller. isolate() reads only the node
 * description, so it also isolates simulated nodes. */
#include "hw.h"
#include "nvml_api.h"
#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>

#define DEFAULT_NVML "libnvidia-ml.so.1"
#define PCI_DEVICES "/sys/bus/pci/devices"
#define NVIDIA_VENDOR 0x10de

static const char *const vars[] = {"CUDA_VISIBLE_DEVICES", NULL};

/* ---- tables: one row per fact ---- */

/* PCI classes a GPU has: VGA controller, 3D controller. */
static const uint32_t gpu_classes[] = {0x0300, 0x0302};

/* Streaming multiprocessors per board, by PCI device id: NVML reports the
 * SM count of MIG instances only. */
static const struct {
    uint16_t device;
    int sms;
} sm_rows[] = {
    {0x2330, 132}, {0x2331, 114}, {0x2321, 132}, {0x2324, 132}, {0x2335, 132}, {0x233b, 132},
    {0x2342, 132}, {0x2901, 148}, {0x20b0, 108}, {0x20b2, 108}, {0x20b3, 108}, {0x20b5, 108},
    {0x20f1, 108}, {0x2236, 72},  {0x2237, 80},  {0x27b8, 58},  {0x26b5, 142}, {0x26b9, 142},
    {0x1eb8, 40},  {0x1db1, 80},  {0x1db4, 80},  {0x1db5, 80},  {0x1db6, 80},
};

/* One direction of one NVLink, GB/s, by NVLink version. */
static const struct {
    unsigned version;
    double gbps;
} nvlink_rows[] = {{1, 20.0}, {2, 25.0}, {3, 25.0}, {4, 25.0}, {5, 50.0}};
#define NVLINK_DEFAULT_GBPS 25.0

/* What an NVML error on a device query says about the device's health:
 * UNKNOWN means "says nothing" (the query is just not available). Codes
 * not listed make the device degraded. */
static const struct {
    nvmlReturn_t code;
    cr_health_t health;
    const char *name;
} err_rows[] = {
    {NVML_ERROR_UNINITIALIZED, CR_HEALTH_DEGRADED, "NVML not initialized"},
    {NVML_ERROR_INVALID_ARGUMENT, CR_HEALTH_DEGRADED, "invalid argument"},
    {NVML_ERROR_NOT_SUPPORTED, CR_HEALTH_UNKNOWN, "not supported"},
    {NVML_ERROR_NO_PERMISSION, CR_HEALTH_UNKNOWN, "no permission"},
    {NVML_ERROR_NOT_FOUND, CR_HEALTH_UNKNOWN, "not found"},
    {NVML_ERROR_INSUFFICIENT_POWER, CR_HEALTH_UNHEALTHY, "insufficient power"},
    {NVML_ERROR_DRIVER_NOT_LOADED, CR_HEALTH_UNHEALTHY, "driver not loaded"},
    {NVML_ERROR_TIMEOUT, CR_HEALTH_DEGRADED, "timeout"},
    {NVML_ERROR_IRQ_ISSUE, CR_HEALTH_UNHEALTHY, "interrupt problem"},
    {NVML_ERROR_CORRUPTED_INFOROM, CR_HEALTH_UNHEALTHY, "corrupted infoROM"},
    {NVML_ERROR_GPU_IS_LOST, CR_HEALTH_UNHEALTHY, "GPU is lost"},
    {NVML_ERROR_RESET_REQUIRED, CR_HEALTH_UNHEALTHY, "GPU reset required"},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, CR_HEALTH_UNHEALTHY,
     "NVML and kernel driver versions differ"},
    {NVML_ERROR_NO_DATA, CR_HEALTH_UNKNOWN, "no data"},
    {NVML_ERROR_UNKNOWN, CR_HEALTH_UNHEALTHY, "unknown error"},
};

/* ---- the library ---- */

typedef struct nvml {
    void *dl;
#define CR__NVML_FIELD(ret, name, params, req) ret(*name) params;
    CR_NVML_FUNCS(CR__NVML_FIELD)
#undef CR__NVML_FIELD
} nvml_t;

static const struct {
    const char *name;
    size_t off;
    bool required;
} syms[] = {
#define CR__NVML_ROW(ret, name, params, req) {#name, offsetof(nvml_t, name), req},
    CR_NVML_FUNCS(CR__NVML_ROW)
#undef CR__NVML_ROW
};

static const char *nvml_strerror(const nvml_t *nv, nvmlReturn_t r)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(err_rows); i++)
        if (err_rows[i].code == r)
            return err_rows[i].name;
    if (nv && nv->nvmlErrorString) {
        const char *s = nv->nvmlErrorString(r);
        if (s)
            return s;
    }
    return "NVML error";
}

static const char *nvml_path(const cr_hw_env_t *env)
{
    const char *p = cr_hw_getenv(env, "CORRAL_NVML_LIBRARY");
    return p && *p ? p : DEFAULT_NVML;
}

static void nvml_close(nvml_t *nv)
{
    if (nv->dl)
        dlclose(nv->dl);
    memset(nv, 0, sizeof(*nv));
}

/* Opens the library and resolves its functions. On failure why says what
 * was missing. */
static int nvml_open(const char *path, nvml_t *nv, char *why, size_t whysize)
{
    memset(nv, 0, sizeof(*nv));
    nv->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!nv->dl) {
        const char *e = dlerror();
        snprintf(why, whysize, "%s", e ? e : "dlopen failed");
        return CR_ENOLIB;
    }
    for (size_t i = 0; i < CR_ARRAY_SIZE(syms); i++) {
        void *f = dlsym(nv->dl, syms[i].name);
        if (!f && syms[i].required) {
            snprintf(why, whysize, "%s has no %s: not an NVML library, or one too old", path,
                     syms[i].name);
            nvml_close(nv);
            return CR_ENOLIB;
        }
        memcpy((char *)nv + syms[i].off, &f, sizeof(f));
    }
    return 0;
}

/* ---- text parsers (exported for tests and fuzzing) ---- */

/* Reads up to maxdigits hex digits; at least one. */
static bool take_hex(const char **p, int maxdigits, unsigned *out)
{
    unsigned v = 0;
    int n = 0;
    for (; n < maxdigits; n++) {
        char c = (*p)[0];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            break;
        v = v * 16 + (unsigned)d;
        (*p)++;
    }
    *out = v;
    return n > 0 && !isxdigit((unsigned char)(*p)[0]);
}

int hw_nvidia_normalize_busid(const char *in, char *out, size_t outsize)
{
    unsigned dom = 0, bus, dev, fn;
    const char *p = in;
    /* with or without a domain: count the colons */
    int colons = 0;
    for (const char *q = in; *q; q++)
        colons += *q == ':';
    if (colons == 2 && !(take_hex(&p, 8, &dom) && *p++ == ':'))
        return CR_EPARSE;
    if (colons < 1 || colons > 2)
        return CR_EPARSE;
    if (!(take_hex(&p, 2, &bus) && *p++ == ':' && take_hex(&p, 2, &dev) && *p++ == '.' &&
          take_hex(&p, 1, &fn) && *p == '\0'))
        return CR_EPARSE;
    if (dom > 0xffff || dev > 0x1f || fn > 7)
        return CR_EPARSE;
    snprintf(out, outsize, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    return 0;
}

/* The version is the first token after "Kernel Module" on the NVRM line
 * that is digits and dots ("550.54.15"); the open module's line puts
 * "for x86_64" in between. */
int hw_nvidia_parse_version(const char *text, char *out, size_t outsize)
{
    const char *line = strstr(text, "NVRM version:");
    if (!line || outsize == 0)
        return CR_EPARSE;
    const char *eol = strchr(line, '\n');
    if (!eol)
        eol = line + strlen(line);
    const char *p = strstr(line, "Kernel Module");
    if (!p || p > eol)
        return CR_EPARSE;
    p += strlen("Kernel Module");
    while (p < eol) {
        while (p < eol && (*p == ' ' || *p == '\t'))
            p++;
        size_t n = 0;
        bool dots = false, ok = true;
        for (; p + n < eol && p[n] != ' ' && p[n] != '\t'; n++) {
            dots |= p[n] == '.';
            ok &= (p[n] >= '0' && p[n] <= '9') || (p[n] == '.' && n > 0 && p[n - 1] != '.');
        }
        if (n && ok && dots && p[n - 1] != '.') {
            if (n >= outsize)
                return CR_EPARSE;
            memcpy(out, p, n);
            out[n] = '\0';
            return 0;
        }
        p += n;
    }
    return CR_EPARSE;
}

int hw_nvidia_parse_information(const char *text, hw_nvidia_info_t *out)
{
    memset(out, 0, sizeof(*out));
    out->minor = -1;
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[256];
        size_t n = len < sizeof(line) - 1 ? len : sizeof(line) - 1;
        memcpy(line, p, n);
        line[n] = '\0';
        p += len + (eol ? 1 : 0);
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        char *key = cr_strtrim(line), *val = cr_strtrim(colon + 1);
        if (strcmp(key, "Model") == 0) {
            cr_strlcpy(out->model, val, sizeof(out->model));
        } else if (strcmp(key, "GPU UUID") == 0) {
            /* unprivileged readers see "GPU-????????-..." */
            if (!strchr(val, '?'))
                cr_strlcpy(out->uuid, val, sizeof(out->uuid));
        } else if (strcmp(key, "Bus Location") == 0) {
            if (hw_nvidia_normalize_busid(val, out->bus, sizeof(out->bus)) != 0)
                out->bus[0] = '\0';
        } else if (strcmp(key, "Device Minor") == 0) {
            int64_t v;
            if (cr_parse_i64(val, 10, &v) == 0 && v >= 0 && v < 4096)
                out->minor = (int)v;
        }
    }
    return out->model[0] || out->uuid[0] ? 0 : CR_EPARSE;
}

/* ---- what the PCI bus says (the fallback, and the count check) ---- */

typedef struct pci_gpu {
    char pci[20];
    uint16_t device;
    int numa;
} pci_gpu_t;
typedef CR_VEC(pci_gpu_t) pci_list_t;

static bool is_gpu_class(uint64_t cls)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(gpu_classes); i++)
        if ((cls >> 8) == gpu_classes[i])
            return true;
    return false;
}

/* The file as a person finds it: under the root prefix. */
static void shown_path(const cr_hw_env_t *env, const char *path, char *out, size_t size)
{
    if (cr_path_join(out, size, env->root, path) != 0)
        cr_strlcpy(out, path, size);
}

/* Reads one hex id file of a PCI device. A malformed file of an NVIDIA
 * device is a node warning naming it (node NULL: only logged at debug
 * level, for files of devices that may not be ours), and the device is
 * skipped. */
static bool read_pci_hex(const cr_hw_env_t *env, cr_node_t *node, const char *dev, const char *file,
                         const char *example, uint64_t max, uint64_t *out)
{
    char path[PATH_MAX], shown[PATH_MAX];
    snprintf(path, sizeof(path), PCI_DEVICES "/%s/%s", dev, file);
    int err = cr_read_u64(env->root, path, 16, out);
    if (err == CR_ENOENT)
        return false;
    if (!err && *out <= max)
        return true;
    shown_path(env, path, shown, sizeof(shown));
    if (node)
        cr_node_warn(node, "nvidia: %s: expected a PCI %s such as %s; device skipped", shown, file,
                     example);
    else
        cr_debug("nvidia: %s: expected a PCI %s such as %s", shown, file, example);
    return false;
}

static int read_numa(const cr_hw_env_t *env, cr_node_t *node, const char *pci)
{
    char path[PATH_MAX], shown[PATH_MAX];
    int64_t v;
    snprintf(path, sizeof(path), PCI_DEVICES "/%s/numa_node", pci);
    int err = cr_read_i64(env->root, path, 10, &v);
    if (err == CR_ENOENT)
        return -1;
    if (err || v < -1 || v > 4095) {
        shown_path(env, path, shown, sizeof(shown));
        cr_node_warn(node, "nvidia: %s: expected a NUMA node number or -1; NUMA node unknown",
                     shown);
        return -1;
    }
    return (int)v;
}

static void scan_pci(const cr_hw_env_t *env, cr_node_t *node, pci_list_t *out)
{
    char **names;
    size_t n;
    if (cr_list_dir(env->root, PCI_DEVICES, &names, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        uint64_t vendor, device, cls;
        char pci[20];
        if (hw_nvidia_normalize_busid(names[i], pci, sizeof(pci)) != 0)
            continue;
        if (!read_pci_hex(env, NULL, names[i], "vendor", "0x10de", 0xffff, &vendor) ||
            vendor != NVIDIA_VENDOR)
            continue;
        if (!read_pci_hex(env, node, names[i], "class", "0x030200", 0xffffff, &cls) ||
            !is_gpu_class(cls))
            continue;
        if (!read_pci_hex(env, node, names[i], "device", "0x2330", 0xffff, &device))
            continue;
        pci_gpu_t *g = CR_VEC_PUSH(out);
        cr_strlcpy(g->pci, pci, sizeof(g->pci));
        g->device = (uint16_t)device;
        g->numa = read_numa(env, node, names[i]);
    }
    cr_free_strv(names, n);
}

static const pci_gpu_t *pci_find(const pci_list_t *l, const char *pci)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].pci, pci) == 0)
            return &l->v[i];
    return NULL;
}

static void proc_driver_version(const cr_hw_env_t *env, cr_node_t *node, char *out, size_t size)
{
    static const char path[] = "/proc/driver/nvidia/version";
    char *text = NULL, shown[PATH_MAX];
    size_t len;
    if (cr_read_file_alloc(env->root, path, &text, &len) != 0)
        return;
    if (hw_nvidia_parse_version(text, out, size) != 0) {
        shown_path(env, path, shown, sizeof(shown));
        cr_node_warn(node,
                     "nvidia: %s: expected a line 'NVRM version: ... Kernel Module "
                     "<version> ...'; driver version unknown",
                     shown);
    }
    free(text);
}

static void proc_information(const cr_hw_env_t *env, cr_node_t *node, const char *pci,
                             hw_nvidia_info_t *info)
{
    char path[PATH_MAX], shown[PATH_MAX], *text = NULL;
    size_t len;
    memset(info, 0, sizeof(*info));
    info->minor = -1;
    snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%s/information", pci);
    if (cr_read_file_alloc(env->root, path, &text, &len) != 0)
        return;
    if (hw_nvidia_parse_information(text, info) != 0) {
        shown_path(env, path, shown, sizeof(shown));
        cr_node_warn(node, "nvidia: %s: expected 'Model:' and 'GPU UUID:' lines; ignored", shown);
    }
    free(text);
}

/* ---- filling devices ---- */

static int sm_count(uint16_t device)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(sm_rows); i++)
        if (sm_rows[i].device == device)
            return sm_rows[i].sms;
    return 0;
}

static double nvlink_gbps(unsigned version)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(nvlink_rows); i++)
        if (nvlink_rows[i].version == version)
            return nvlink_rows[i].gbps;
    return NVLINK_DEFAULT_GBPS;
}

static void set_identity(cr_device_t *d)
{
    cr_strlcpy(d->backend, "nvidia", sizeof(d->backend));
    cr_strlcpy(d->vendor, "NVIDIA", sizeof(d->vendor));
    cr_strlcpy(d->resource, "GPU", sizeof(d->resource));
}

static void set_sku(cr_device_t *d)
{
    const char *sku = cr_accel_sku_by_pci(d->pci_vendor, d->pci_device);
    if (!sku)
        sku = cr_accel_sku_by_name(d->product);
    if (sku)
        cr_strlcpy(d->sku, sku, sizeof(d->sku));
}

/* Keeps the worst health seen and the reason for it. */
static void worsen(cr_device_t *d, cr_health_t h, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void worsen(cr_device_t *d, cr_health_t h, const char *fmt, ...)
{
    if (h <= d->health)
        return;
    d->health = h;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->health_reason, sizeof(d->health_reason), fmt, ap);
    va_end(ap);
}

/* An NVML call on a device failed: what that says about the device.
 * Returns true when the failure matters (the caller then stops using the
 * value). */
static bool call_failed(const nvml_t *nv, cr_device_t *d, const char *what, nvmlReturn_t r)
{
    cr_health_t h = CR_HEALTH_DEGRADED;
    for (size_t i = 0; i < CR_ARRAY_SIZE(err_rows); i++)
        if (err_rows[i].code == r)
            h = err_rows[i].health;
    if (h == CR_HEALTH_UNKNOWN)
        return false;
    worsen(d, h, "%s: %s", what, nvml_strerror(nv, r));
    return true;
}

/* ECC, retired pages and row remapping: the memory's health. */
static void check_memory_health(const nvml_t *nv, nvmlDevice_t h, cr_device_t *d)
{
    nvmlReturn_t r;
    if (nv->nvmlDeviceGetTotalEccErrors) {
        unsigned long long n = 0;
        r = nv->nvmlDeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                            NVML_VOLATILE_ECC, &n);
        if (r == NVML_SUCCESS && n > 0)
            worsen(d, CR_HEALTH_UNHEALTHY, "%llu uncorrected ECC errors since the driver loaded",
                   n);
        else if (r != NVML_SUCCESS)
            call_failed(nv, d, "ECC error count", r);
    }
    if (nv->nvmlDeviceGetRetiredPagesPendingStatus) {
        nvmlEnableState_t pending = NVML_FEATURE_DISABLED;
        r = nv->nvmlDeviceGetRetiredPagesPendingStatus(h, &pending);
        if (r == NVML_SUCCESS && pending == NVML_FEATURE_ENABLED)
            worsen(d, CR_HEALTH_DEGRADED, "retired memory pages pending: reset the GPU");
        else if (r != NVML_SUCCESS)
            call_failed(nv, d, "retired pages", r);
    }
    if (nv->nvmlDeviceGetRemappedRows) {
        unsigned corr = 0, unc = 0, pending = 0, failed = 0;
        r = nv->nvmlDeviceGetRemappedRows(h, &corr, &unc, &pending, &failed);
        if (r == NVML_SUCCESS && failed)
            worsen(d, CR_HEALTH_UNHEALTHY, "memory row remapping failed");
        else if (r == NVML_SUCCESS && pending)
            worsen(d, CR_HEALTH_DEGRADED, "memory row remapping pending: reset the GPU");
        else if (r != NVML_SUCCESS)
            call_failed(nv, d, "remapped rows", r);
    }
}

/* "NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb"; else from the slices. */
static void mig_profile(const char *name, const nvmlDeviceAttributes_t *a, bool have_attr,
                        char *out, size_t size)
{
    const char *m = strstr(name, " MIG ");
    if (m && m[5]) {
        cr_strlcpy(out, m + 5, size);
        return;
    }
    if (have_attr)
        snprintf(out, size, "%ug.%llugb", a->gpuInstanceSliceCount, (a->memorySizeMB + 512) / 1024);
}

typedef struct gpu {
    nvmlDevice_t h;
    int dev; /* node index */
    char pci[20];
    int switch_links;  /* active links to NVSwitches */
    uint64_t switches; /* bit i: reaches switch i */
    unsigned nvlink_version;
} gpu_t;

typedef struct probe_ctx {
    const cr_hw_env_t *env;
    const nvml_t *nv;
    cr_node_t *node;
    const pci_list_t *bus;
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    gpu_t *gpus;
    size_t ngpus;
    CR_VEC(char *) switches; /* PCI addresses of NVSwitches seen */
} probe_ctx_t;

static void add_gpu(probe_ctx_t *c, unsigned index, nvmlDevice_t h)
{
    const nvml_t *nv = c->nv;
    cr_device_t d;
    memset(&d, 0, sizeof(d));
    d.numa = -1;
    d.parent = -1;
    d.partition = -1;
    d.memory_numa = -1;
    d.vendor_index = (int)index;
    d.health = CR_HEALTH_OK;
    set_identity(&d);
    cr_strlcpy(d.driver, c->driver, sizeof(d.driver));
    nvmlReturn_t r = nv->nvmlDeviceGetName(h, d.product, sizeof(d.product));
    if (r != NVML_SUCCESS) {
        d.product[0] = '\0';
        call_failed(nv, &d, "name", r);
    }
    r = nv->nvmlDeviceGetUUID(h, d.uuid, sizeof(d.uuid));
    if (r != NVML_SUCCESS) {
        d.uuid[0] = '\0';
        call_failed(nv, &d, "UUID", r);
    }
    nvmlPciInfo_t pci;
    memset(&pci, 0, sizeof(pci));
    r = nv->nvmlDeviceGetPciInfo_v3(h, &pci);
    if (r == NVML_SUCCESS) {
        pci.busId[sizeof(pci.busId) - 1] = '\0';
        if (hw_nvidia_normalize_busid(pci.busId, d.pci, sizeof(d.pci)) != 0) {
            cr_node_warn(c->node,
                         "nvidia: GPU %u: NVML gave PCI bus id '%s', expected "
                         "DDDDDDDD:BB:DD.F; PCI address unknown",
                         index, pci.busId);
            d.pci[0] = '\0';
        }
        d.pci_vendor = (uint16_t)(pci.pciDeviceId & 0xffff);
        d.pci_device = (uint16_t)(pci.pciDeviceId >> 16);
    } else {
        call_failed(nv, &d, "PCI info", r);
    }
    /* a GPU whose memory the OS shows as a NUMA node (Grace Hopper and
     * Blackwell over C2C); NOT_SUPPORTED on PCIe-attached GPUs */
    unsigned numa_id;
    if (nv->nvmlDeviceGetNumaNodeId && nv->nvmlDeviceGetNumaNodeId(h, &numa_id) == NVML_SUCCESS &&
        numa_id < 4096)
        d.memory_numa = (int)numa_id;
    nvmlMemory_t mem;
    r = nv->nvmlDeviceGetMemoryInfo(h, &mem);
    if (r == NVML_SUCCESS)
        d.memory = mem.total;
    else
        call_failed(nv, &d, "memory info", r);
    if (nv->nvmlDeviceGetCudaComputeCapability) {
        int major = 0, minor = 0;
        r = nv->nvmlDeviceGetCudaComputeCapability(h, &major, &minor);
        if (r == NVML_SUCCESS && major >= 0 && major < 100 && minor >= 0 && minor < 100)
            snprintf(d.compute_capability, sizeof(d.compute_capability), "%d.%d", major, minor);
        else if (r != NVML_SUCCESS)
            call_failed(nv, &d, "compute capability", r);
    }
    nvmlDeviceAttributes_t attr;
    if (nv->nvmlDeviceGetAttributes_v2 && nv->nvmlDeviceGetAttributes_v2(h, &attr) == 0)
        d.compute_units = (int)attr.multiprocessorCount;
    if (!d.compute_units)
        d.compute_units = sm_count(d.pci_device);
    if (nv->nvmlDeviceGetMigMode) {
        unsigned cur = 0, pending = 0;
        if (nv->nvmlDeviceGetMigMode(h, &cur, &pending) == NVML_SUCCESS)
            d.mig_enabled = cur == NVML_DEVICE_MIG_ENABLE;
    }
    const pci_gpu_t *bus = d.pci[0] ? pci_find(c->bus, d.pci) : NULL;
    if (bus)
        d.numa = bus->numa;
    set_sku(&d);
    check_memory_health(nv, h, &d);

    cr_device_t *nd = cr_node_add_device(c->node);
    int idx = nd->index;
    *nd = d;
    nd->index = idx;
    gpu_t *g = &c->gpus[c->ngpus++];
    g->h = h;
    g->dev = idx;
    cr_strlcpy(g->pci, d.pci, sizeof(g->pci));
}

static void add_mig_instances(probe_ctx_t *c, const gpu_t *g)
{
    const nvml_t *nv = c->nv;
    unsigned max = 0;
    if (!nv->nvmlDeviceGetMaxMigDeviceCount || !nv->nvmlDeviceGetMigDeviceHandleByIndex ||
        nv->nvmlDeviceGetMaxMigDeviceCount(g->h, &max) != NVML_SUCCESS)
        return;
    for (unsigned j = 0; j < max && j < 64; j++) {
        nvmlDevice_t m;
        nvmlReturn_t r = nv->nvmlDeviceGetMigDeviceHandleByIndex(g->h, j, &m);
        if (r == NVML_ERROR_NOT_FOUND)
            continue;
        if (r != NVML_SUCCESS) {
            cr_node_warn(c->node, "nvidia: device %d: MIG instance %u: %s; left out", g->dev, j,
                         nvml_strerror(nv, r));
            continue;
        }
        cr_device_t d = c->node->devices.v[g->dev];
        d.parent = g->dev;
        d.mig_enabled = false;
        d.vendor_index = -1;
        /* the instance keeps its GPU's health: memory errors reach it too */
        d.compute_units = 0;
        d.memory = 0;
        if (nv->nvmlDeviceGetName(m, d.product, sizeof(d.product)) != NVML_SUCCESS)
            d.product[0] = '\0';
        r = nv->nvmlDeviceGetUUID(m, d.uuid, sizeof(d.uuid));
        if (r != NVML_SUCCESS) {
            d.uuid[0] = '\0';
            call_failed(nv, &d, "MIG UUID", r);
        }
        nvmlMemory_t mem;
        if (nv->nvmlDeviceGetMemoryInfo(m, &mem) == NVML_SUCCESS)
            d.memory = mem.total;
        nvmlDeviceAttributes_t attr;
        memset(&attr, 0, sizeof(attr));
        bool have_attr = nv->nvmlDeviceGetAttributes_v2 &&
                         nv->nvmlDeviceGetAttributes_v2(m, &attr) == NVML_SUCCESS;
        if (have_attr) {
            d.compute_units = (int)attr.multiprocessorCount;
            if (!d.memory)
                d.memory = attr.memorySizeMB << 20;
        }
        mig_profile(d.product, &attr, have_attr, d.mig_profile, sizeof(d.mig_profile));
        /* a MIG instance is named by its UUID only: CUDA indices do not
         * reach MIG instances */
        cr_strlcpy(d.isolation_id, d.uuid, sizeof(d.isolation_id));
        cr_device_t *nd = cr_node_add_device(c->node);
        int idx = nd->index;
        *nd = d;
        nd->index = idx;
    }
}

static int switch_id(probe_ctx_t *c, const char *pci)
{
    for (size_t i = 0; i < c->switches.n; i++)
        if (strcmp(c->switches.v[i], pci) == 0)
            return (int)i;
    if (c->switches.n == 64)
        return -1;
    *CR_VEC_PUSH(&c->switches) = cr_strdup(pci);
    return (int)c->switches.n - 1;
}

static int gpu_by_pci(const probe_ctx_t *c, const char *pci)
{
    for (size_t i = 0; i < c->ngpus; i++)
        if (c->gpus[i].pci[0] && strcmp(c->gpus[i].pci, pci) == 0)
            return (int)i;
    return -1;
}

static int uf_find(int *p, int x)
{
    while (p[x] != x)
        x = p[x] = p[p[x]];
    return x;
}

static void uf_union(int *p, int a, int b)
{
    a = uf_find(p, a);
    b = uf_find(p, b);
    if (a != b)
        p[a > b ? a : b] = a < b ? a : b;
}

/* NVLink: per GPU, who is at the other end of each active link. Direct
 * peers become nvlink links with their link count; GPUs that reach the
 * same NVSwitches become nvswitch pairs with the smaller of their switch
 * link counts (what nvidia-smi topo -m prints as NV18 on a DGX H100). */
static void probe_nvlink(probe_ctx_t *c)
{
    const nvml_t *nv = c->nv;
    size_t n = c->ngpus;
    if (!nv->nvmlDeviceGetNvLinkState || !nv->nvmlDeviceGetNvLinkRemotePciInfo_v2 || n == 0)
        return;
    int *direct = cr_calloc(n * n, sizeof(int));
    for (size_t i = 0; i < n; i++) {
        gpu_t *g = &c->gpus[i];
        for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
            nvmlEnableState_t active = NVML_FEATURE_DISABLED;
            nvmlReturn_t r = nv->nvmlDeviceGetNvLinkState(g->h, l, &active);
            if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                break; /* no NVLink, or past the last link */
            if (r != NVML_SUCCESS || active != NVML_FEATURE_ENABLED)
                continue;
            /* The remote's PCI address names a GPU peer or a switch; a
             * switch whose address NVML does not give is "the unnamed
             * switch", which joins all such GPUs in one fabric. */
            nvmlPciInfo_t rp;
            memset(&rp, 0, sizeof(rp));
            char remote[20] = "";
            if (nv->nvmlDeviceGetNvLinkRemotePciInfo_v2(g->h, l, &rp) == NVML_SUCCESS) {
                rp.busId[sizeof(rp.busId) - 1] = '\0';
                if (hw_nvidia_normalize_busid(rp.busId, remote, sizeof(remote)) != 0)
                    remote[0] = '\0';
            }
            int peer = remote[0] ? gpu_by_pci(c, remote) : -1;
            nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
            if (!nv->nvmlDeviceGetNvLinkRemoteDeviceType ||
                nv->nvmlDeviceGetNvLinkRemoteDeviceType(g->h, l, &type) != NVML_SUCCESS)
                type = peer >= 0   ? NVML_NVLINK_DEVICE_TYPE_GPU
                       : remote[0] ? NVML_NVLINK_DEVICE_TYPE_SWITCH
                                   : NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
            if (!g->nvlink_version && nv->nvmlDeviceGetNvLinkVersion) {
                unsigned v = 0;
                if (nv->nvmlDeviceGetNvLinkVersion(g->h, l, &v) == NVML_SUCCESS)
                    g->nvlink_version = v;
            }
            if (type == NVML_NVLINK_DEVICE_TYPE_GPU && peer >= 0 && (size_t)peer != i) {
                direct[i * n + (size_t)peer]++;
            } else if (type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
                int s = switch_id(c, remote[0] ? remote : "?");
                g->switch_links++;
                if (s >= 0)
                    g->switches |= 1ull << s;
            }
        }
    }
    /* GPUs on one switch fabric: those that share a switch, transitively */
    int *fabric = cr_calloc(n, sizeof(int));
    for (size_t i = 0; i < n; i++)
        fabric[i] = (int)i;
    for (size_t i = 0; i < n; i++)
        for (size_t k = i + 1; k < n; k++)
            if (c->gpus[i].switches & c->gpus[k].switches)
                uf_union(fabric, (int)i, (int)k);
    for (size_t i = 0; i < n; i++) {
        for (size_t k = i + 1; k < n; k++) {
            const gpu_t *a = &c->gpus[i], *b = &c->gpus[k];
            double gbps = nvlink_gbps(a->nvlink_version ? a->nvlink_version : b->nvlink_version);
            int nd = direct[i * n + k] > direct[k * n + i] ? direct[i * n + k] : direct[k * n + i];
            if (nd > 0) {
                cr_node_add_link(c->node, a->dev, b->dev, CR_LINK_NVLINK, nd, nd * gbps);
            } else if (a->switch_links && b->switch_links &&
                       uf_find(fabric, (int)i) == uf_find(fabric, (int)k)) {
                int cnt = a->switch_links < b->switch_links ? a->switch_links : b->switch_links;
                cr_node_add_link(c->node, a->dev, b->dev, CR_LINK_NVSWITCH, cnt, cnt * gbps);
            }
        }
    }
    free(fabric);
    free(direct);
}

/* One "nvlink-island" domain per connected component of NVLink links. */
static void add_islands(cr_node_t *node)
{
    size_t n = node->devices.n;
    if (!n)
        return;
    int *p = cr_calloc(n, sizeof(int));
    bool *linked = cr_calloc(n, sizeof(bool));
    for (size_t i = 0; i < n; i++)
        p[i] = (int)i;
    for (size_t i = 0; i < node->links.n; i++) {
        const cr_link_t *l = &node->links.v[i];
        if (l->kind != CR_LINK_NVLINK && l->kind != CR_LINK_NVSWITCH)
            continue;
        uf_union(p, l->a, l->b);
        linked[l->a] = linked[l->b] = true;
    }
    int island = 0;
    for (size_t root = 0; root < n; root++) {
        if (!linked[root] || uf_find(p, (int)root) != (int)root)
            continue;
        char name[32];
        snprintf(name, sizeof(name), "nvlink%d", island++);
        cr_domain_t *d = cr_node_add_domain(node, "nvlink-island", name);
        for (size_t i = 0; i < n; i++)
            if (linked[i] && uf_find(p, (int)i) == (int)root)
                cr_domain_add_member(d, (int)i);
    }
    free(linked);
    free(p);
}

/* The NVLink clique a fabric manager put the GPUs in (multi-node NVLink,
 * e.g. an NVL72 rack): "<cluster uuid>.<clique id>", as a label and a
 * domain. */
static void add_clique(probe_ctx_t *c)
{
    const nvml_t *nv = c->nv;
    if (!nv->nvmlDeviceGetGpuFabricInfo)
        return;
    char first[64] = "";
    int first_dev = -1;
    cr_domain_t *dom = NULL;
    for (size_t i = 0; i < c->ngpus; i++) {
        nvmlGpuFabricInfo_t fi;
        memset(&fi, 0, sizeof(fi));
        if (nv->nvmlDeviceGetGpuFabricInfo(c->gpus[i].h, &fi) != NVML_SUCCESS ||
            fi.state != NVML_GPU_FABRIC_STATE_COMPLETED || fi.status != NVML_SUCCESS)
            continue;
        const unsigned char *u = fi.clusterUuid;
        char clique[64];
        snprintf(clique, sizeof(clique),
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x.%u", u[0],
                 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                 u[14], u[15], fi.cliqueId);
        if (!first[0]) {
            cr_strlcpy(first, clique, sizeof(first));
            first_dev = c->gpus[i].dev;
            cr_node_set_label(c->node, "corral.io/nvlink-clique", clique);
            dom = cr_node_add_domain(c->node, "nvlink-clique", clique);
        } else if (strcmp(first, clique) != 0) {
            cr_node_warn(c->node,
                         "nvidia: device %d is in NVLink clique %s, device %d in %s; "
                         "labelled with the first",
                         c->gpus[i].dev, clique, first_dev, first);
            continue;
        }
        /* dom points into node->domains, which nothing else grows here */
        cr_domain_add_member(dom, c->gpus[i].dev);
    }
}

static int cmp_pci(const void *a, const void *b)
{
    return strcmp(((const gpu_t *)a)->pci, ((const gpu_t *)b)->pci);
}

/* What goes into CUDA_VISIBLE_DEVICES: the UUID (stable, order-free), or
 * with CORRAL_CUDA_VISIBLE_BY=index the CUDA index, which under
 * CUDA_DEVICE_ORDER=PCI_BUS_ID is the GPU's rank in PCI address order. */
static void set_isolation_ids(const cr_hw_env_t *env, cr_node_t *node, gpu_t *gpus, size_t n)
{
    const char *by = cr_hw_getenv(env, "CORRAL_CUDA_VISIBLE_BY");
    bool by_index = by && strcmp(by, "index") == 0;
    if (by && *by && !by_index && strcmp(by, "uuid") != 0)
        cr_node_warn(node, "CORRAL_CUDA_VISIBLE_BY=%s: expected uuid or index; using uuid", by);
    gpu_t *sorted = cr_calloc(n ? n : 1, sizeof(gpu_t));
    if (n)
        memcpy(sorted, gpus, n * sizeof(gpu_t));
    qsort(sorted, n, sizeof(gpu_t), cmp_pci);
    for (size_t rank = 0; rank < n; rank++) {
        cr_device_t *d = &node->devices.v[sorted[rank].dev];
        if (by_index || !d->uuid[0])
            snprintf(d->isolation_id, sizeof(d->isolation_id), "%zu", rank);
        else
            cr_strlcpy(d->isolation_id, d->uuid, sizeof(d->isolation_id));
    }
    free(sorted);
}

/* The GPUs NVML described against those on the PCI bus. */
static void check_count(const cr_hw_env_t *env, cr_node_t *node, const probe_ctx_t *c)
{
    if (!cr_path_is_dir(env->root, PCI_DEVICES) || c->bus->n == c->ngpus)
        return;
    cr_buf_t missing = {0};
    cr_buf_append(&missing, "", 0);
    for (size_t i = 0; i < c->bus->n; i++)
        if (gpu_by_pci(c, c->bus->v[i].pci) < 0)
            cr_buf_printf(&missing, "%s%s", missing.len ? ", " : "", c->bus->v[i].pci);
    cr_node_warn(node,
                 "nvidia: NVML describes %zu GPUs but the PCI bus has %zu NVIDIA GPUs%s%s%s: a GPU "
                 "may have fallen off the bus or be bound to another driver, or this container "
                 "was given only some of them",
                 c->ngpus, c->bus->n, missing.len ? " (not seen by NVML: " : "", missing.s,
                 missing.len ? ")" : "");
    cr_buf_free(&missing);
}

static int probe_nvml(const cr_hw_env_t *env, const nvml_t *nv, cr_node_t *node,
                      const pci_list_t *bus)
{
    unsigned count = 0;
    nvmlReturn_t r = nv->nvmlDeviceGetCount_v2(&count);
    if (r != NVML_SUCCESS) {
        cr_node_warn(node, "nvidia: nvmlDeviceGetCount failed: %s; GPUs described from sysfs",
                     nvml_strerror(nv, r));
        return CR_EVENDOR;
    }
    if (count > 1024) {
        cr_node_warn(node,
                     "nvidia: NVML reports %u GPUs, more than the 1024 expected; GPUs "
                     "described from sysfs",
                     count);
        return CR_EVENDOR;
    }
    probe_ctx_t c = {.env = env, .nv = nv, .node = node, .bus = bus};
    if (!nv->nvmlSystemGetDriverVersion ||
        nv->nvmlSystemGetDriverVersion(c.driver, sizeof(c.driver)) != NVML_SUCCESS)
        proc_driver_version(env, node, c.driver, sizeof(c.driver));
    c.driver[sizeof(c.driver) - 1] = '\0';
    c.gpus = cr_calloc(count ? count : 1, sizeof(gpu_t));
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t h;
        r = nv->nvmlDeviceGetHandleByIndex_v2(i, &h);
        if (r != NVML_SUCCESS) {
            cr_node_warn(node, "nvidia: NVML GPU %u: %s; left out", i, nvml_strerror(nv, r));
            continue;
        }
        add_gpu(&c, i, h);
    }
    probe_nvlink(&c);
    add_islands(node);
    add_clique(&c);
    set_isolation_ids(env, node, c.gpus, c.ngpus);
    size_t ngpus = c.ngpus;
    for (size_t i = 0; i < ngpus; i++)
        if (node->devices.v[c.gpus[i].dev].mig_enabled)
            add_mig_instances(&c, &c.gpus[i]);
    check_count(env, node, &c);
    for (size_t i = 0; i < c.switches.n; i++)
        free(c.switches.v[i]);
    CR_VEC_FREE(&c.switches);
    free(c.gpus);
    return 0;
}

/* Without NVML: the PCI bus and /proc/driver/nvidia. */
static void probe_sysfs(const cr_hw_env_t *env, cr_node_t *node, const pci_list_t *bus)
{
    char driver[64] = "";
    proc_driver_version(env, node, driver, sizeof(driver));
    const char *by = cr_hw_getenv(env, "CORRAL_CUDA_VISIBLE_BY");
    bool by_index = by && strcmp(by, "index") == 0;
    for (size_t i = 0; i < bus->n; i++) {
        hw_nvidia_info_t info;
        proc_information(env, node, bus->v[i].pci, &info);
        cr_device_t *d = cr_node_add_device(node);
        set_identity(d);
        cr_strlcpy(d->pci, bus->v[i].pci, sizeof(d->pci));
        d->pci_vendor = NVIDIA_VENDOR;
        d->pci_device = bus->v[i].device;
        d->numa = bus->v[i].numa;
        if (info.model[0])
            cr_strlcpy(d->product, info.model, sizeof(d->product));
        else
            snprintf(d->product, sizeof(d->product), "NVIDIA GPU [10de:%04x]", d->pci_device);
        cr_strlcpy(d->uuid, info.uuid, sizeof(d->uuid));
        cr_strlcpy(d->driver, driver, sizeof(d->driver));
        d->compute_units = sm_count(d->pci_device);
        /* NVML and CUDA (PCI_BUS_ID order) both number GPUs in PCI order */
        d->vendor_index = (int)i;
        if (by_index || !d->uuid[0])
            snprintf(d->isolation_id, sizeof(d->isolation_id), "%zu", i);
        else
            cr_strlcpy(d->isolation_id, d->uuid, sizeof(d->isolation_id));
        set_sku(d);
    }
}

/* Whether there may be anything for probe() to find, cheaply and in the
 * caller (the registry forks for the probe only when there is, issue 18):
 * a library named in CORRAL_NVML_LIBRARY, the driver's /dev/nvidiactl or
 * /proc/driver/nvidia, or an NVIDIA function on the PCI bus, all under
 * the root prefix. On a machine with none of them NVML has no device to
 * report and the PCI scan finds none: the probe's answer is known. */
bool hw_nvidia_present(const cr_hw_env_t *env)
{
    const char *lib = cr_hw_getenv(env, "CORRAL_NVML_LIBRARY");
    if ((lib && *lib) || cr_path_exists(env->root, "/dev/nvidiactl") ||
        cr_path_exists(env->root, "/proc/driver/nvidia"))
        return true;
    char **names;
    size_t n;
    if (cr_list_dir(env->root, PCI_DEVICES, &names, &n) != 0)
        return false;
    bool found = false;
    for (size_t i = 0; i < n && !found; i++) {
        uint64_t vendor;
        found = read_pci_hex(env, NULL, names[i], "vendor", "0x10de", 0xffff, &vendor) &&
                vendor == NVIDIA_VENDOR;
    }
    cr_free_strv(names, n);
    return found;
}

static int probe(const cr_hw_env_t *env, cr_node_t *node)
{
    pci_list_t bus = {0};
    scan_pci(env, node, &bus);
    const char *path = nvml_path(env);
    nvml_t nv;
    char why[512];
    int err = nvml_open(path, &nv, why, sizeof(why));
    if (err) {
        if (bus.n)
            cr_node_warn(node,
                         "nvidia: NVML not loadable (%s); %zu GPU%s described from sysfs "
                         "only: memory, NVLink and health unknown",
                         why, bus.n, bus.n == 1 ? "" : "s");
        else
            cr_info("nvidia: NVML not loadable (%s) and no NVIDIA GPU on the PCI bus", why);
    } else {
        nvmlReturn_t r = nv.nvmlInit_v2();
        if (r != NVML_SUCCESS) {
            if (bus.n)
                cr_node_warn(node,
                             "nvidia: nvmlInit failed: %s; %zu GPU%s described from "
                             "sysfs only",
                             nvml_strerror(&nv, r), bus.n, bus.n == 1 ? "" : "s");
            else
                cr_info("nvidia: nvmlInit failed: %s", nvml_strerror(&nv, r));
            err = CR_EVENDOR;
        } else {
            err = probe_nvml(env, &nv, node, &bus);
            nv.nvmlShutdown();
        }
        nvml_close(&nv);
    }
    if (err)
        probe_sysfs(env, node, &bus);
    CR_VEC_FREE(&bus);
    return 0;
}

/* ---- isolation: from the node description only ---- */

static int isolate(const cr_hw_env_t *env, const cr_node_t *node, const int *devs, size_t ndevs,
                   cr_envlist_t *out)
{
    cr_buf_t b = {0};
    cr_buf_append(&b, "", 0);
    int err = 0;
    for (size_t i = 0; i < ndevs; i++) {
        if (devs[i] < 0 || (size_t)devs[i] >= node->devices.n) {
            err = CR_ENODEV;
            goto out_free;
        }
        const cr_device_t *d = &node->devices.v[devs[i]];
        char id[96];
        if (d->isolation_id[0])
            cr_strlcpy(id, d->isolation_id, sizeof(id));
        else if (d->uuid[0])
            cr_strlcpy(id, d->uuid, sizeof(id));
        else if (d->vendor_index >= 0)
            snprintf(id, sizeof(id), "%d", d->vendor_index);
        else {
            /* a described node without ids: the position among its GPUs */
            int rank = 0;
            for (int k = 0; k < devs[i]; k++)
                rank += strcmp(node->devices.v[k].backend, d->backend) == 0 &&
                        node->devices.v[k].parent < 0;
            snprintf(id, sizeof(id), "%d", rank);
        }
        if (strchr(id, ',')) {
            err = CR_EINVAL;
            goto out_free;
        }
        cr_buf_printf(&b, "%s%s", i ? "," : "", id);
    }
    err = cr_envlist_set(out, "CUDA_VISIBLE_DEVICES", b.s);
    if (!err)
        err = cr_envlist_set(out, "CUDA_DEVICE_ORDER", "PCI_BUS_ID");
out_free:
    cr_buf_free(&b);
    return err;
}

/* ---- telemetry: in this process, with NVML kept open between calls ---- */

static struct {
    pthread_mutex_t lock;
    nvml_t nv;
    bool ready;
    char path[PATH_MAX];
    /* XID errors: one event set for the process, each GPU registered at
     * its first read, the last XID of each since then */
    nvmlEventSet_t events;
    bool no_events;
    struct {
        nvmlDevice_t h;
        int64_t last; /* -1: the GPU refused the registration */
    } xid[64];
    size_t nxid;
} tel = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void events_close(void)
{
    if (tel.events && tel.nv.nvmlEventSetFree)
        tel.nv.nvmlEventSetFree(tel.events);
    tel.events = NULL;
    tel.no_events = false;
    tel.nxid = 0;
}

static int telemetry_nvml(const cr_hw_env_t *env, const nvml_t **out)
{
    const char *path = nvml_path(env);
    if (tel.ready && strcmp(tel.path, path) == 0) {
        *out = &tel.nv;
        return 0;
    }
    if (tel.ready) {
        events_close();
        tel.nv.nvmlShutdown();
        nvml_close(&tel.nv);
        tel.ready = false;
    }
    char why[512];
    int err = nvml_open(path, &tel.nv, why, sizeof(why));
    if (err) {
        cr_debug("nvidia telemetry: %s", why);
        return err;
    }
    nvmlReturn_t r = tel.nv.nvmlInit_v2();
    if (r != NVML_SUCCESS) {
        cr_debug("nvidia telemetry: nvmlInit: %s", nvml_strerror(&tel.nv, r));
        nvml_close(&tel.nv);
        return CR_EVENDOR;
    }
    cr_strlcpy(tel.path, path, sizeof(tel.path));
    tel.ready = true;
    *out = &tel.nv;
    return 0;
}

static int find_handle(const nvml_t *nv, const char *uuid, nvmlDevice_t *h)
{
    if (nv->nvmlDeviceGetHandleByUUID)
        return nv->nvmlDeviceGetHandleByUUID(uuid, h) == NVML_SUCCESS ? 0 : CR_ENODEV;
    unsigned count = 0;
    if (nv->nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS)
        return CR_EVENDOR;
    for (unsigned i = 0; i < count; i++) {
        char u[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        if (nv->nvmlDeviceGetHandleByIndex_v2(i, h) == NVML_SUCCESS &&
            nv->nvmlDeviceGetUUID(*h, u, sizeof(u)) == NVML_SUCCESS && strcmp(u, uuid) == 0)
            return 0;
    }
    return CR_ENODEV;
}

/* The last XID error of GPU h since this process first read it (0: none),
 * as DCGM_FI_DEV_XID_ERRORS: NVML reports XIDs only as events, so the
 * GPU is registered in the process's event set at its first read and the
 * set is drained (never waited on: timeout 0) at each read. -1 where the
 * driver has no events or the GPU refuses them. */
static int64_t read_xid(const nvml_t *nv, nvmlDevice_t h)
{
    if (tel.no_events || !nv->nvmlEventSetCreate || !nv->nvmlDeviceRegisterEvents ||
        !nv->nvmlEventSetWait_v2)
        return -1;
    if (!tel.events && nv->nvmlEventSetCreate(&tel.events) != NVML_SUCCESS) {
        tel.events = NULL;
        tel.no_events = true;
        return -1;
    }
    size_t k = 0;
    while (k < tel.nxid && tel.xid[k].h != h)
        k++;
    if (k == tel.nxid) {
        if (k == CR_ARRAY_SIZE(tel.xid))
            return -1;
        tel.xid[k].h = h;
        tel.xid[k].last = nv->nvmlDeviceRegisterEvents(h, nvmlEventTypeXidCriticalError,
                                                       tel.events) == NVML_SUCCESS
                              ? 0
                              : -1;
        tel.nxid++;
    }
    nvmlEventData_t ev;
    for (int i = 0; i < 256 && nv->nvmlEventSetWait_v2(tel.events, &ev, 0) == NVML_SUCCESS; i++)
        for (size_t j = 0; j < tel.nxid; j++)
            if (ev.eventType == nvmlEventTypeXidCriticalError && tel.xid[j].h == ev.device &&
                tel.xid[j].last >= 0)
                tel.xid[j].last = (int64_t)ev.eventData;
    return tel.xid[k].last;
}

/* The volatile ECC counters (since the driver loaded), which DCGM exports
 * as DCGM_FI_DEV_ECC_SBE_VOL_TOTAL and _DBE_: a GPU without ECC, or with
 * it off, answers NOT_SUPPORTED and the counts stay unknown. */
static void read_ecc_counts(const nvml_t *nv, nvmlDevice_t h, cr_telemetry_t *out)
{
    if (!nv->nvmlDeviceGetTotalEccErrors)
        return;
    unsigned long long n;
    if (nv->nvmlDeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
                                        &n) == NVML_SUCCESS)
        out->ecc_corrected = (int64_t)n;
    if (nv->nvmlDeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
                                        &n) == NVML_SUCCESS)
        out->ecc_uncorrected = (int64_t)n;
}

static int telemetry(const cr_hw_env_t *env, const cr_node_t *node, int dev, cr_telemetry_t *out)
{
    out->utilization_pct = -1;
    out->memory_used = 0;
    out->power_w = -1;
    out->temperature_c = -1;
    out->health = CR_HEALTH_UNKNOWN;
    if (node->simulated)
        return CR_ENOSYS;
    if (dev < 0 || (size_t)dev >= node->devices.n)
        return CR_ENODEV;
    const cr_device_t *src = &node->devices.v[dev];
    if (strcmp(src->backend, "nvidia") != 0)
        return CR_EINVAL;
    if (!src->uuid[0])
        return CR_ENODEV;
    pthread_mutex_lock(&tel.lock);
    const nvml_t *nv;
    nvmlDevice_t h;
    int err = telemetry_nvml(env, &nv);
    if (err)
        goto out_unlock;
    err = find_handle(nv, src->uuid, &h);
    if (err)
        goto out_unlock;
    cr_device_t d; /* scratch for the health verdict */
    memset(&d, 0, sizeof(d));
    d.health = CR_HEALTH_OK;
    nvmlUtilization_t u;
    nvmlReturn_t r;
    if (nv->nvmlDeviceGetUtilizationRates) {
        r = nv->nvmlDeviceGetUtilizationRates(h, &u);
        if (r == NVML_SUCCESS && u.gpu <= 100)
            out->utilization_pct = u.gpu;
        else if (r != NVML_SUCCESS)
            call_failed(nv, &d, "utilization", r);
    }
    nvmlMemory_t mem;
    r = nv->nvmlDeviceGetMemoryInfo(h, &mem);
    if (r == NVML_SUCCESS)
        out->memory_used = mem.used;
    else
        call_failed(nv, &d, "memory info", r);
    unsigned v;
    if (nv->nvmlDeviceGetPowerUsage) {
        r = nv->nvmlDeviceGetPowerUsage(h, &v);
        if (r == NVML_SUCCESS)
            out->power_w = v / 1000.0;
        else
            call_failed(nv, &d, "power", r);
    }
    if (nv->nvmlDeviceGetTemperature) {
        r = nv->nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU, &v);
        if (r == NVML_SUCCESS)
            out->temperature_c = v;
        else
            call_failed(nv, &d, "temperature", r);
    }
    if (src->parent < 0) {
        check_memory_health(nv, h, &d);
        read_ecc_counts(nv, h, out);
        out->xid_last = read_xid(nv, h);
    }
    out->health = d.health;
out_unlock:
    pthread_mutex_unlock(&tel.lock);
    return err;
}

const cr_accel_component_t hw_backend_nvidia = {
    .abi_version = CR_ACCEL_ABI_VERSION,
    .name = "nvidia",
    .resource = "GPU",
    .isolation_vars = vars,
    .priority = 50,
    .flags = CR_ACCEL_F_PROBE_ISOLATED,
    .probe = probe,
    .isolate = isolate,
    .telemetry = telemetry,
};
