/* An external accelerator backend for a made-up vendor, "examplenpu": what
 * a vendor writes to add an accelerator to corral without touching corral
 * (docs/vendor-checklist.md walks through it).
 *
 * The driver publishes one directory per NPU:
 *     /sys/class/example_npu/npu<N>/uuid        "NPU-..."
 *     /sys/class/example_npu/npu<N>/memory      bytes
 *     /sys/class/example_npu/npu<N>/numa_node   -1 or a NUMA node
 *     /sys/class/example_npu/npu<N>/utilization percent (optional, telemetry)
 * and a worker is limited to some NPUs with EXAMPLE_VISIBLE_NPUS=<N>,<N>.
 *
 * Build: a shared object that includes only <corral/accel.h> and exports
 * the one symbol `corral_accel_component`; put it (or its directory) on
 * CORRAL_PLUGIN_PATH. The cr_node_* functions come from the corral process
 * that loads it. */
#include <corral/accel.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef EXAMPLE_NAME
#define EXAMPLE_NAME "examplenpu"
#endif

#define CLASS_DIR "/sys/class/example_npu"

/* Every file is read under env->root, so tests run against a recorded tree. */
static int read_line(const cr_hw_env_t *env, const char *rel, char *buf, size_t size)
{
    char path[4096];
    const char *root = env->root && strcmp(env->root, "/") != 0 ? env->root : "";
    if ((size_t)snprintf(path, sizeof(path), "%s%s", root, rel) >= sizeof(path))
        return -ENAMETOOLONG;
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -errno;
    size_t n = fread(buf, 1, size - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    while (n && isspace((unsigned char)buf[n - 1]))
        buf[--n] = '\0';
    return 0;
}

static int parse_long(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

/* "npu<N>" -> N, else -1 */
static int npu_number(const char *name)
{
    long long n;
    if (strncmp(name, "npu", 3) != 0 || parse_long(name + 3, 0, 1023, &n) != 0)
        return -1;
    return (int)n;
}

static int by_number(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static int probe(const cr_hw_env_t *env, cr_node_t *node)
{
    /* the environment only through the getter corral gives us */
    const char *off = cr_hw_getenv(env, "EXAMPLE_NPU_DISABLE");
    if (off && *off && strcmp(off, "0") != 0)
        return 0;

    char dirpath[4096];
    const char *root = env->root && strcmp(env->root, "/") != 0 ? env->root : "";
    snprintf(dirpath, sizeof(dirpath), "%s%s", root, CLASS_DIR);
    DIR *d = opendir(dirpath);
    if (!d)
        return 0; /* no driver loaded: no NPUs, not an error */
    int nums[1024];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < sizeof(nums) / sizeof(nums[0])) {
        int k = npu_number(e->d_name);
        if (k >= 0)
            nums[n++] = k;
    }
    closedir(d);
    qsort(nums, n, sizeof(nums[0]), by_number);

    for (size_t i = 0; i < n; i++) {
        char rel[256], uuid[96], mem[32], numa[16];
        long long bytes, node_numa;
        snprintf(rel, sizeof(rel), CLASS_DIR "/npu%d/uuid", nums[i]);
        int err = read_line(env, rel, uuid, sizeof(uuid));
        snprintf(rel, sizeof(rel), CLASS_DIR "/npu%d/memory", nums[i]);
        if (!err)
            err = read_line(env, rel, mem, sizeof(mem));
        if (err) {
            cr_node_warn(node, "%s: %s: skipping npu%d", rel, strerror(-err), nums[i]);
            continue;
        }
        if (parse_long(mem, 0, (long long)1 << 50, &bytes) != 0) {
            cr_node_warn(node, "%s: expected a number of bytes, found '%s': skipping npu%d", rel,
                         mem, nums[i]);
            continue;
        }
        snprintf(rel, sizeof(rel), CLASS_DIR "/npu%d/numa_node", nums[i]);
        if (read_line(env, rel, numa, sizeof(numa)) != 0 ||
            parse_long(numa, -1, 4095, &node_numa) != 0)
            node_numa = -1; /* optional: unknown */

        cr_device_t *dev = cr_node_add_device(node);
        snprintf(dev->backend, sizeof(dev->backend), "%s", EXAMPLE_NAME);
        snprintf(dev->vendor, sizeof(dev->vendor), "Example");
        snprintf(dev->resource, sizeof(dev->resource), "NPU");
        snprintf(dev->sku, sizeof(dev->sku), "EXAMPLE-N1");
        snprintf(dev->product, sizeof(dev->product), "Example NPU N1");
        snprintf(dev->uuid, sizeof(dev->uuid), "%s", uuid);
        snprintf(dev->isolation_id, sizeof(dev->isolation_id), "%d", nums[i]);
        dev->vendor_index = nums[i];
        dev->memory = (uint64_t)bytes;
        dev->numa = (int)node_numa;
        dev->health = CR_HEALTH_OK;
    }
    return 0;
}

#ifndef EXAMPLE_NO_ISOLATE
/* Only the node description: no files, no vendor library. */
static int isolate(const cr_hw_env_t *env, const cr_node_t *node, const int *devs, size_t ndevs,
                   cr_envlist_t *out)
{
    (void)env;
    /* corral's helper for the common case: ids joined with ',' */
    return cr_isolate_ids(out, "EXAMPLE_VISIBLE_NPUS", node, devs, ndevs);
}
#endif

static int telemetry(const cr_hw_env_t *env, const cr_node_t *node, int dev, cr_telemetry_t *out)
{
    char rel[256], buf[32];
    long long pct;
    out->utilization_pct = -1;
    out->power_w = -1;
    out->temperature_c = -1;
    out->memory_used = 0;
    out->health = node->devices.v[dev].health;
    snprintf(rel, sizeof(rel), CLASS_DIR "/npu%d/utilization", node->devices.v[dev].vendor_index);
    if (read_line(env, rel, buf, sizeof(buf)) == 0 && parse_long(buf, 0, 100, &pct) == 0)
        out->utilization_pct = (double)pct;
    return 0;
}

static const char *const isolation_vars[] = {"EXAMPLE_VISIBLE_NPUS", NULL};

#ifdef EXAMPLE_NO_SYMBOL
#define COMPONENT_SYMBOL corral_accel_component_misspelled
#else
#define COMPONENT_SYMBOL corral_accel_component
#endif

__attribute__((visibility("default"))) const cr_accel_component_t COMPONENT_SYMBOL = {
#ifdef EXAMPLE_WRONG_ABI
    .abi_version = CR_ACCEL_ABI_VERSION + 1,
#else
    .abi_version = CR_ACCEL_ABI_VERSION,
#endif
    .name = EXAMPLE_NAME,
    .resource = "NPU",
    .isolation_vars = isolation_vars,
    .priority = 40,
    .flags = 0, /* set CR_ACCEL_F_PROBE_ISOLATED when probe calls a vendor library */
    .probe = probe,
#ifndef EXAMPLE_NO_ISOLATE
    .isolate = isolate,
#endif
    .telemetry = telemetry,
};
