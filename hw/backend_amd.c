/* AMD Instinct and Radeon GPUs through the KFD topology in sysfs
 * (/sys/class/kfd/kfd/topology/nodes/N), the same source ROCr and HIP
 * enumerate from, so a device's index here is its HIP index: the position
 * of its node among the KFD nodes that have SIMDs (CPU nodes have none).
 * xGMI links come from the nodes' io_links, hives from hive_id, memory from
 * mem_banks, the product name from the DRM render node's PCI device.
 * Workers are isolated with HIP_VISIBLE_DEVICES (and ROCR_VISIBLE_DEVICES
 * when CORRAL_AMD_ROCR_VISIBLE=1). */
#include "amd_kfd.h"
#include "hw.h"
#include "pci_attr.h"
#include <inttypes.h>
#include <stdio.h>

#define KFD_NODES "/sys/class/kfd/kfd/topology/nodes"
#define WHY_SIZE 320

static const char *const vars[] = {"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", NULL};

typedef struct gpu {
    unsigned kfd_node;
    int hip_index;
    int dev;       /* index in node->devices, -1 while off */
    int partition; /* index within its physical GPU, -1 when not partitioned */
    hw_kfd_node_t p;
    CR_VEC(hw_kfd_iolink_t) xgmi;
} gpu_t;

typedef CR_VEC(gpu_t) gpu_vec_t;

static int cmp_uint(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

/* Node ids in numeric order ("10" after "9"), the order KFD numbers them. */
static int list_node_ids(const char *root, const char *dir, unsigned **ids, size_t *n)
{
    char **names;
    size_t nn;
    int err = cr_list_dir(root, dir, &names, &nn);
    if (err)
        return err;
    *ids = cr_calloc(nn ? nn : 1, sizeof(unsigned));
    *n = 0;
    for (size_t i = 0; i < nn; i++) {
        uint64_t v;
        if (cr_parse_u64(names[i], 10, &v) == 0 && v <= UINT32_MAX)
            (*ids)[(*n)++] = (unsigned)v;
    }
    cr_free_strv(names, nn);
    qsort(*ids, *n, sizeof(unsigned), cmp_uint);
    return 0;
}

typedef int (*parse_fn)(const char *text, size_t len, void *out, char *why, size_t whysize);

/* Reads and parses one properties file; on failure why is the whole
 * warning: the file and what was expected in it. */
static int read_props(const char *root, const char *path, parse_fn parse, void *out, char *why)
{
    char *text = NULL, inner[256];
    size_t len = 0;
    int err = cr_read_file_alloc(root, path, &text, &len);
    if (err) {
        snprintf(why, WHY_SIZE, "%s: %s; expected KFD '<key> <value>' lines", path,
                 cr_strerror(err));
        return err;
    }
    err = parse(text, len, out, inner, sizeof(inner));
    if (err)
        snprintf(why, WHY_SIZE, "%s: %s", path, inner);
    free(text);
    return err;
}

static int parse_node(const char *t, size_t n, void *o, char *w, size_t ws)
{
    return hw_kfd_node_parse(t, n, o, w, ws);
}

static int parse_link(const char *t, size_t n, void *o, char *w, size_t ws)
{
    return hw_kfd_iolink_parse(t, n, o, w, ws);
}

static int parse_bank(const char *t, size_t n, void *o, char *w, size_t ws)
{
    return hw_kfd_membank_parse(t, n, o, w, ws);
}

/* Sums the node's memory banks. A node without mem_banks has unknown
 * memory (0); a bank that does not parse turns the device off. */
static int read_memory(const char *root, unsigned id, uint64_t *total, char *why)
{
    char dir[128], path[192];
    unsigned *banks;
    size_t nb;
    *total = 0;
    snprintf(dir, sizeof(dir), KFD_NODES "/%u/mem_banks", id);
    if (list_node_ids(root, dir, &banks, &nb) != 0)
        return 0;
    int err = 0;
    for (size_t i = 0; i < nb && !err; i++) {
        hw_kfd_membank_t b;
        snprintf(path, sizeof(path), "%s/%u/properties", dir, banks[i]);
        err = read_props(root, path, parse_bank, &b, why);
        if (!err)
            *total += b.size_in_bytes;
    }
    free(banks);
    return err;
}

static int read_xgmi(const char *root, gpu_t *g, char *why)
{
    char dir[128], path[192];
    unsigned *links;
    size_t nl;
    snprintf(dir, sizeof(dir), KFD_NODES "/%u/io_links", g->kfd_node);
    if (list_node_ids(root, dir, &links, &nl) != 0)
        return 0;
    int err = 0;
    for (size_t i = 0; i < nl && !err; i++) {
        hw_kfd_iolink_t l;
        snprintf(path, sizeof(path), "%s/%u/properties", dir, links[i]);
        err = read_props(root, path, parse_link, &l, why);
        if (!err && l.type == HW_KFD_IOLINK_XGMI)
            *CR_VEC_PUSH(&g->xgmi) = l;
    }
    free(links);
    return err;
}

/* "gfx942" from 90402: major*10000 + minor*100 + stepping, the last two
 * in hex as LLVM names targets (gfx90a). */
static void gfx_name(uint64_t v, char *out, size_t size)
{
    snprintf(out, size, "gfx%u%x%x", (unsigned)(v / 10000), (unsigned)(v / 100 % 100),
             (unsigned)(v % 100));
}

/* Partitions (CPX, DPX, ... on MI300-class GPUs) are KFD nodes of one PCI
 * device: amdkfd ORs the partition's node id into location_id (low bits
 * of the PCI function field; the kernel's own comment in
 * kfd_topology_add_device(): "On multi-partition nodes, node id =
 * location_id[31:28]" in some releases). The GPU function of amdgpu is .0,
 * so nodes that share domain, bus and device number are partitions of one
 * GPU, numbered by those bits. */
static uint64_t pci_key(const hw_kfd_node_t *p)
{
    return p->domain << 16 | (p->location_id & 0xfff8);
}

static int partition_of(const hw_kfd_node_t *p)
{
    uint64_t hi = (p->location_id >> 28) & 0xf;
    return hi ? (int)hi : (int)(p->location_id & 7);
}

static int add_device(const cr_hw_env_t *env, cr_node_t *node, gpu_t *g, uint64_t memory,
                      const char *driver, char *why)
{
    const hw_kfd_node_t *p = &g->p;
    char pci[20];
    snprintf(pci, sizeof(pci), "%04x:%02x:%02x.%x", (unsigned)p->domain,
             (unsigned)(p->location_id >> 8) & 0xff, (unsigned)(p->location_id >> 3) & 0x1f,
             g->partition >= 0 ? 0u : (unsigned)p->location_id & 7);
    hw_pci_attr_t attr = {.numa = -1};
    char path[160];
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", pci);
    if (cr_path_is_dir(env->root, path)) {
        int err = hw_pci_attr_read(env->root, pci, &attr, why, WHY_SIZE);
        if (err)
            return err;
    }
    /* the marketing name amdgpu reads from the board's FRU, when it has one */
    char product[96] = "";
    if (p->has_drm_render_minor) {
        snprintf(path, sizeof(path), "/sys/class/drm/renderD%u/device/product_name",
                 (unsigned)p->drm_render_minor);
        if (cr_read_file(env->root, path, product, sizeof(product)) != 0)
            product[0] = '\0';
    }
    const char *sku = cr_accel_sku_by_pci((uint16_t)p->vendor_id, (uint16_t)p->device_id);
    cr_device_t *d = cr_node_add_device(node);
    g->dev = d->index;
    cr_strlcpy(d->backend, "amd", sizeof(d->backend));
    cr_strlcpy(d->vendor, "AMD", sizeof(d->vendor));
    cr_strlcpy(d->resource, "GPU", sizeof(d->resource));
    cr_strlcpy(d->sku, sku ? sku : "", sizeof(d->sku));
    if (product[0]) {
        cr_strlcpy(d->product, product, sizeof(d->product));
    } else {
        char gfx[16];
        gfx_name(p->gfx_target_version, gfx, sizeof(gfx));
        snprintf(d->product, sizeof(d->product), "AMD %s", sku ? sku : gfx);
    }
    /* partitions share their GPU's unique_id: the UUID names the partition */
    if (p->unique_id && g->partition >= 0)
        snprintf(d->uuid, sizeof(d->uuid), "GPU-%016" PRIx64 "-p%d", p->unique_id, g->partition);
    else if (p->unique_id)
        snprintf(d->uuid, sizeof(d->uuid), "GPU-%016" PRIx64, p->unique_id);
    d->partition = g->partition;
    cr_strlcpy(d->pci, pci, sizeof(d->pci));
    d->pci_vendor = (uint16_t)p->vendor_id;
    d->pci_device = (uint16_t)p->device_id;
    d->numa = attr.numa;
    d->memory = memory;
    d->compute_units = (int)(p->simd_count / p->simd_per_cu);
    snprintf(d->isolation_id, sizeof(d->isolation_id), "%d", g->hip_index);
    d->vendor_index = g->hip_index;
    cr_strlcpy(d->driver, driver, sizeof(d->driver));
    d->health = CR_HEALTH_OK;
    return 0;
}

static gpu_t *find_gpu(gpu_vec_t *gpus, uint64_t kfd_node)
{
    for (size_t i = 0; i < gpus->n; i++)
        if (gpus->v[i].kfd_node == kfd_node && gpus->v[i].dev >= 0)
            return &gpus->v[i];
    return NULL;
}

/* One link per pair of GPUs on the fabric. KFD lists each direction on its
 * own node; min_bandwidth is one link's, max_bandwidth all of the pair's,
 * so their ratio is the number of links. */
static void add_links(cr_node_t *node, gpu_vec_t *gpus)
{
    for (size_t i = 0; i < gpus->n; i++) {
        gpu_t *g = &gpus->v[i];
        if (g->dev < 0)
            continue;
        for (size_t k = 0; k < g->xgmi.n; k++) {
            const hw_kfd_iolink_t *l = &g->xgmi.v[k];
            gpu_t *h = find_gpu(gpus, l->node_to);
            if (!h || h == g || hw_node_find_link(node, g->dev, h->dev))
                continue;
            uint64_t count = 1;
            if (l->min_bandwidth && l->max_bandwidth >= l->min_bandwidth)
                count = (l->max_bandwidth + l->min_bandwidth / 2) / l->min_bandwidth;
            /* partitions of one GPU talk over its on-package fabric */
            bool same = g->partition >= 0 && h->partition >= 0 && pci_key(&g->p) == pci_key(&h->p);
            cr_node_add_link(node, g->dev, h->dev, same ? CR_LINK_XGMI_SAME_GPU : CR_LINK_XGMI,
                             (int)count, (double)l->max_bandwidth / 1000.0);
        }
    }
}

static void add_hives(cr_node_t *node, const gpu_vec_t *gpus)
{
    for (size_t i = 0; i < gpus->n; i++) {
        const gpu_t *g = &gpus->v[i];
        bool first = g->dev >= 0 && g->p.hive_id != 0;
        for (size_t k = 0; k < i && first; k++)
            first = !(gpus->v[k].dev >= 0 && gpus->v[k].p.hive_id == g->p.hive_id);
        if (!first)
            continue;
        size_t members = 0;
        for (size_t k = i; k < gpus->n; k++)
            members += gpus->v[k].dev >= 0 && gpus->v[k].p.hive_id == g->p.hive_id;
        if (members < 2)
            continue;
        char name[32];
        snprintf(name, sizeof(name), "hive-%016" PRIx64, g->p.hive_id);
        cr_domain_t *d = cr_node_add_domain(node, "xgmi-hive", name);
        for (size_t k = i; k < gpus->n; k++)
            if (gpus->v[k].dev >= 0 && gpus->v[k].p.hive_id == g->p.hive_id)
                cr_domain_add_member(d, gpus->v[k].dev);
    }
}

/* Whether a node whose properties did not parse is a GPU: its gpu_id is
 * non-zero. Returns false when even that cannot be told. */
static bool node_kind_known(const char *root, unsigned id, bool *is_gpu)
{
    char path[128];
    uint64_t gpu_id;
    snprintf(path, sizeof(path), KFD_NODES "/%u/gpu_id", id);
    if (cr_read_u64(root, path, 10, &gpu_id) != 0)
        return false;
    *is_gpu = gpu_id != 0;
    return true;
}

/* What a KFD node is, as far as the first pass could tell. */
enum kind { K_CPU, K_GPU, K_GPU_OFF, K_UNKNOWN };

typedef struct kfd_entry {
    unsigned id;
    enum kind kind;
    hw_kfd_node_t p;
    char why[WHY_SIZE];
} kfd_entry_t;

/* Whether some readable GPU node has an xGMI link to node id: xGMI joins
 * GPUs only, so id is a GPU. */
static bool xgmi_peer_of(const char *root, const kfd_entry_t *e, size_t n, unsigned id)
{
    for (size_t i = 0; i < n; i++) {
        if (e[i].kind != K_GPU)
            continue;
        gpu_t g = {.kfd_node = e[i].id};
        char why[WHY_SIZE];
        bool hit = false;
        if (read_xgmi(root, &g, why) == 0)
            for (size_t k = 0; k < g.xgmi.n && !hit; k++)
                hit = g.xgmi.v[k].node_to == id;
        CR_VEC_FREE(&g.xgmi);
        if (hit)
            return true;
    }
    return false;
}

/* A node whose properties and gpu_id cannot be read still has a kind that
 * decides every later GPU's HIP index. amdkfd numbers the CPU nodes of
 * the CRAT table first and adds GPU nodes after them
 * (kfd_topology_init(), then kfd_topology_add_device() per GPU, in
 * drivers/gpu/drm/amd/amdkfd/kfd_topology.c), so a node after a GPU is a
 * GPU and a node before a CPU is a CPU; a node an xGMI link reaches is a
 * GPU. Only a node between the last CPU and the first GPU that nothing
 * links to stays unknown. */
static void resolve_kinds(const char *root, kfd_entry_t *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (e[i].kind != K_UNKNOWN)
            continue;
        bool gpu_before = false, cpu_after = false;
        for (size_t k = 0; k < i; k++)
            gpu_before |= e[k].kind == K_GPU || e[k].kind == K_GPU_OFF;
        for (size_t k = i + 1; k < n; k++)
            cpu_after |= e[k].kind == K_CPU;
        if (gpu_before || xgmi_peer_of(root, e, n, e[i].id))
            e[i].kind = K_GPU_OFF;
        else if (cpu_after)
            e[i].kind = K_CPU;
    }
}

static int probe(const cr_hw_env_t *env, cr_node_t *node)
{
    unsigned *ids;
    size_t nids;
    if (!cr_path_is_dir(env->root, KFD_NODES) ||
        list_node_ids(env->root, KFD_NODES, &ids, &nids) != 0)
        return 0; /* no amdkfd: no AMD GPU */
    char driver[32] = "";
    if (cr_read_file(env->root, "/sys/module/amdgpu/version", driver, sizeof(driver)) != 0)
        driver[0] = '\0';
    kfd_entry_t *e = cr_calloc(nids ? nids : 1, sizeof(*e));
    char path[128];
    for (size_t i = 0; i < nids; i++) {
        e[i].id = ids[i];
        snprintf(path, sizeof(path), KFD_NODES "/%u/properties", ids[i]);
        if (read_props(env->root, path, parse_node, &e[i].p, e[i].why) == 0) {
            e[i].kind = e[i].p.simd_count ? K_GPU : K_CPU;
            continue;
        }
        bool is_gpu;
        if (!node_kind_known(env->root, ids[i], &is_gpu))
            e[i].kind = K_UNKNOWN;
        else if (is_gpu)
            e[i].kind = K_GPU_OFF;
        else {
            e[i].kind = K_CPU;
            cr_node_warn(node, "amd: %s; CPU node skipped", e[i].why);
        }
    }
    resolve_kinds(env->root, e, nids);

    gpu_vec_t gpus = {0};
    char why[WHY_SIZE];
    int hip_index = 0;
    for (size_t i = 0; i < nids; i++) {
        if (e[i].kind == K_UNKNOWN) {
            /* every later GPU's HIP index depends on this node's kind */
            cr_node_warn(node,
                         "amd: %s; GPUs from KFD node %u on are off because their HIP index is "
                         "unknown",
                         e[i].why, ids[i]);
            break;
        }
        if (e[i].kind == K_CPU)
            continue;
        if (e[i].kind == K_GPU_OFF) {
            cr_node_warn(node, "amd: %s; GPU %d is off", e[i].why, hip_index);
            hip_index++;
            continue;
        }
        gpu_t *g = CR_VEC_PUSH(&gpus);
        g->kfd_node = ids[i];
        g->hip_index = hip_index++;
        g->dev = -1;
        g->p = e[i].p;
        g->partition = -1;
        for (size_t k = 0; k < nids; k++)
            if (k != i && e[k].kind == K_GPU && pci_key(&e[k].p) == pci_key(&g->p))
                g->partition = partition_of(&g->p);
        uint64_t memory;
        if (read_memory(env->root, ids[i], &memory, why) != 0 ||
            read_xgmi(env->root, g, why) != 0 || add_device(env, node, g, memory, driver, why) != 0)
            cr_node_warn(node, "amd: %s; GPU %d is off", why, g->hip_index);
    }
    add_links(node, &gpus);
    add_hives(node, &gpus);
    for (size_t i = 0; i < gpus.n; i++)
        CR_VEC_FREE(&gpus.v[i].xgmi);
    CR_VEC_FREE(&gpus);
    free(e);
    free(ids);
    return 0;
}

static void join_ids(const cr_node_t *node, const int *devs, size_t ndevs, bool relative,
                     cr_buf_t *out)
{
    cr_buf_append(out, "", 0);
    for (size_t i = 0; i < ndevs; i++) {
        if (relative)
            cr_buf_printf(out, "%s%zu", i ? "," : "", i);
        else
            cr_buf_printf(out, "%s%s", i ? "," : "", node->devices.v[devs[i]].isolation_id);
    }
}

/* With ROCR_VISIBLE_DEVICES set, ROCr hides the other GPUs first and HIP
 * then numbers the rest from 0, so HIP_VISIBLE_DEVICES must count within
 * what ROCr left (the same ids in both would hide devices again). */
static int isolate(const cr_hw_env_t *env, const cr_node_t *node, const int *devs, size_t ndevs,
                   cr_envlist_t *out)
{
    const char *rocr = cr_hw_getenv(env, "CORRAL_AMD_ROCR_VISIBLE");
    bool with_rocr = rocr && strcmp(rocr, "1") == 0;
    cr_buf_t ids = {0}, hip = {0};
    join_ids(node, devs, ndevs, false, &ids);
    join_ids(node, devs, ndevs, with_rocr, &hip);
    int err = cr_envlist_set(out, "HIP_VISIBLE_DEVICES", hip.s);
    if (!err && with_rocr)
        err = cr_envlist_set(out, "ROCR_VISIBLE_DEVICES", ids.s);
    cr_buf_free(&ids);
    cr_buf_free(&hip);
    return err;
}

/* ---- telemetry: what amdgpu publishes on the PCI device ---- */

static double read_scaled(const char *root, const char *path, double scale)
{
    int64_t v;
    if (cr_read_i64(root, path, 10, &v) != 0 || v < 0)
        return -1;
    return (double)v / scale;
}

/* The hottest sensor that matters: hwmon's "junction" (the die, what
 * MI300 reports), else "edge", else temp1. Millidegrees in the file. */
static double read_temperature(const char *root, const char *hwmon)
{
    static const char *const prefer[] = {"junction", "edge"};
    char path[256], label[32];
    for (size_t p = 0; p < CR_ARRAY_SIZE(prefer); p++)
        for (int t = 1; t <= 4; t++) {
            snprintf(path, sizeof(path), "%s/temp%d_label", hwmon, t);
            if (cr_read_file(root, path, label, sizeof(label)) == 0 &&
                strcmp(label, prefer[p]) == 0) {
                snprintf(path, sizeof(path), "%s/temp%d_input", hwmon, t);
                return read_scaled(root, path, 1000.0);
            }
        }
    snprintf(path, sizeof(path), "%s/temp1_input", hwmon);
    return read_scaled(root, path, 1000.0);
}

/* RAS error counts (hw_amd_ras_parse): the sum over the device's blocks
 * (umc is the memory; gfx, sdma, mmhub, xgmi_wafl, ... the rest). A kernel
 * or board without RAS has no ras/ folder: the counts stay unknown. */
static void read_ras(const char *root, const char *dir, cr_telemetry_t *out)
{
    char path[256], buf[256], why[96];
    char **names;
    size_t n;
    snprintf(path, sizeof(path), "%s/ras", dir);
    if (cr_list_dir(root, path, &names, &n) != 0)
        return;
    uint64_t ue_sum = 0, ce_sum = 0;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(names[i]);
        if (l < 10 || strcmp(names[i] + l - 10, "_err_count") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/ras/%s", dir, names[i]);
        uint64_t ue, ce;
        if (cr_read_file(root, path, buf, sizeof(buf)) != 0 ||
            hw_amd_ras_parse(buf, strlen(buf), &ue, &ce, why, sizeof(why)) != 0) {
            cr_debug("amd telemetry: %s: unreadable", path);
            continue;
        }
        ue_sum += ue, ce_sum += ce, any = true;
    }
    cr_free_strv(names, n);
    if (any) {
        out->ecc_uncorrected = (int64_t)ue_sum;
        out->ecc_corrected = (int64_t)ce_sum;
    }
}

static int telemetry(const cr_hw_env_t *env, const cr_node_t *node, int dev, cr_telemetry_t *out)
{
    if (dev < 0 || (size_t)dev >= node->devices.n || !node->devices.v[dev].pci[0])
        return CR_ENODEV;
    const cr_device_t *d = &node->devices.v[dev];
    char dir[96], path[256];
    out->utilization_pct = out->power_w = out->temperature_c = -1;
    out->memory_used = 0;
    out->health = d->health;
    snprintf(dir, sizeof(dir), "/sys/bus/pci/devices/%s", d->pci);
    snprintf(path, sizeof(path), "%s/gpu_busy_percent", dir);
    out->utilization_pct = read_scaled(env->root, path, 1.0);
    uint64_t used;
    snprintf(path, sizeof(path), "%s/mem_info_vram_used", dir);
    if (cr_read_u64(env->root, path, 10, &used) == 0)
        out->memory_used = used;
    char **names;
    size_t n;
    snprintf(path, sizeof(path), "%s/hwmon", dir);
    if (cr_list_dir(env->root, path, &names, &n) == 0) {
        if (n) {
            char hwmon[192];
            snprintf(hwmon, sizeof(hwmon), "%s/hwmon/%s", dir, names[0]);
            out->temperature_c = read_temperature(env->root, hwmon);
            /* microwatts; older kernels average, newer (MI300) report input */
            snprintf(path, sizeof(path), "%s/power1_average", hwmon);
            out->power_w = read_scaled(env->root, path, 1e6);
            snprintf(path, sizeof(path), "%s/power1_input", hwmon);
            if (out->power_w < 0)
                out->power_w = read_scaled(env->root, path, 1e6);
        }
        cr_free_strv(names, n);
    }
    read_ras(env->root, dir, out);
    return 0;
}

const cr_accel_component_t hw_backend_amd = {
    .abi_version = CR_ACCEL_ABI_VERSION,
    .name = "amd",
    .resource = "GPU",
    .isolation_vars = vars,
    .priority = 50,
    .probe = probe,
    .isolate = isolate,
    .telemetry = telemetry,
};
