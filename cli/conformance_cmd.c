/* corral conformance: corral's view of this node's accelerators against the
 * vendors' own tools and runtimes, on real hardware (docs/hardware.md,
 * "Conformance on real hardware").
 *
 * Per backend present (or the one --backend names), in this order:
 *   discovery  what corral found against the vendor's tool, where installed
 *              (nvidia-smi --query-gpu for nvidia; amd-smi, xpu-smi,
 *              tpu-info, neuron-ls and hl-smi in conformance_vendors.c)
 *   isolation  a child process given `corral hw --isolate`'s environment
 *              for one device sees exactly that device: through PyTorch
 *              when it has the runtime, else the vendor's library
 *              (libcuda's cuDeviceGetCount and cuDeviceGetUuid)
 *   topology   the device pairs against the vendor's matrix
 *              (nvidia-smi topo -m: NV# cells against corral's links;
 *              neuron-ls's connected_to against corral's NeuronLinks)
 *   telemetry  every device's telemetry read
 *   versions   the driver and runtime versions, recorded
 * Every mismatch is a FAIL line saying what each side said. A check that
 * cannot run here is SKIP with why; nothing is passed off as verified: a
 * machine without accelerators, or one read from a fixture (CORRAL_SYSFS_ROOT,
 * CORRAL_NVML_LIBRARY, a spec), verifies nothing and says so.
 *
 * Exit: 0 all checks run passed on real hardware, 1 a check failed,
 * 2 usage, 77 nothing could be verified (no accelerator, not real
 * hardware, or every check skipped). */
#include "cli.h"
#include "conformance.h"
#include "hw/nvml_api.h"
#include "hw/topo.h"
#include <dlfcn.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_NOT_VERIFIED 77

static const char usage_text[] =
    "usage: corral conformance [--backend NAME] [--json | --junit FILE]\n";

static const char *const result_names[] = {"PASS", "FAIL", "SKIP", "INFO"};

void conf_add(conf_report_t *r, const char *backend, const char *name, conf_result_t res,
              const char *fmt, ...)
{
    conf_check_t *c = CR_VEC_PUSH(&r->checks);
    memset(c, 0, sizeof(*c));
    cr_strlcpy(c->backend, backend, sizeof(c->backend));
    cr_strlcpy(c->name, name, sizeof(c->name));
    c->result = res;
    va_list ap;
    va_start(ap, fmt);
    char buf[1024];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    c->detail = cr_strdup(buf);
    fprintf(r->quiet ? stderr : stdout, "%s: %s %s: %s\n", result_names[res], backend, name, buf);
}

/* ---- running the vendors' tools ---- */

bool conf_have_tool(const char *tool)
{
    const char *path = getenv("PATH");
    if (!path)
        return false;
    char *p = cr_strdup(path), *save = NULL;
    bool found = false;
    for (char *d = strtok_r(p, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char full[1024];
        snprintf(full, sizeof(full), "%s/%s", d, tool);
        found = access(full, X_OK) == 0;
    }
    free(p);
    return found;
}

int conf_run_tool(const char *cmd, cr_buf_t *out)
{
    FILE *fp = popen(cmd, "r");
    if (!fp)
        return -errno;
    char buf[4096];
    size_t n, total = 0;
    bool big = false;
    cr_buf_append(out, "", 0);
    while ((n = fread(buf, 1, sizeof(buf), fp)) > 0) {
        if (total + n > CONF_TOOL_OUTPUT_MAX) {
            big = true; /* read on to the end, keeping nothing more */
            continue;
        }
        cr_buf_append(out, buf, n);
        total += n;
    }
    int st = pclose(fp);
    if (big)
        return CR_E2BIG;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : CR_EVENDOR;
}

/* ---- nvidia: nvidia-smi --query-gpu ---- */

typedef struct smi_gpu {
    int index;
    char uuid[96], name[96], pci[20], driver[32];
    uint64_t memory_mib;
} smi_gpu_t;

static char *trim_field(char *s)
{
    while (*s == ' ')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* One CSV line "0, GPU-..., NVIDIA H100 80GB HBM3, 81559, 00000000:18:00.0, 550.54.15". */
static int parse_smi_line(const char *line, smi_gpu_t *g)
{
    char buf[512], *fields[6];
    cr_strlcpy(buf, line, sizeof(buf));
    int n = 0;
    char *p = buf;
    while (n < 6) {
        fields[n++] = p;
        char *comma = strchr(p, ',');
        if (!comma)
            break;
        *comma = '\0';
        p = comma + 1;
    }
    if (n != 6)
        return CR_EPARSE;
    memset(g, 0, sizeof(*g));
    int64_t v;
    if (cr_parse_i64(trim_field(fields[0]), 10, &v) != 0 || v < 0 || v > 4096)
        return CR_EPARSE;
    g->index = (int)v;
    cr_strlcpy(g->uuid, trim_field(fields[1]), sizeof(g->uuid));
    cr_strlcpy(g->name, trim_field(fields[2]), sizeof(g->name));
    if (cr_parse_i64(trim_field(fields[3]), 10, &v) != 0 || v < 0)
        return CR_EPARSE;
    g->memory_mib = (uint64_t)v;
    if (hw_nvidia_normalize_busid(trim_field(fields[4]), g->pci, sizeof(g->pci)) != 0)
        return CR_EPARSE;
    cr_strlcpy(g->driver, trim_field(fields[5]), sizeof(g->driver));
    return 0;
}

static const cr_device_t *gpu_by_index(const cr_node_t *n, int index)
{
    for (size_t i = 0; i < n->devices.n; i++)
        if (strcmp(n->devices.v[i].backend, "nvidia") == 0 && n->devices.v[i].parent < 0 &&
            n->devices.v[i].vendor_index == index)
            return &n->devices.v[i];
    return NULL;
}

static size_t count_gpus(const cr_node_t *n)
{
    size_t k = 0;
    for (size_t i = 0; i < n->devices.n; i++)
        k += strcmp(n->devices.v[i].backend, "nvidia") == 0 && n->devices.v[i].parent < 0;
    return k;
}

static void nvidia_discovery(conf_report_t *r, const cr_node_t *n)
{
    if (!conf_have_tool("nvidia-smi")) {
        conf_add(r, "nvidia", "discovery", R_SKIP,
                 "nvidia-smi is not on PATH: nothing to compare with");
        return;
    }
    cr_buf_t out = {0};
    int err = conf_run_tool("nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,"
                            "driver_version --format=csv,noheader,nounits 2>&1",
                            &out);
    if (err) {
        conf_add(r, "nvidia", "discovery", R_FAIL, "nvidia-smi --query-gpu failed: %.200s", out.s);
        cr_buf_free(&out);
        return;
    }
    size_t seen = 0, bad = 0;
    for (char *line = out.s, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (!*trim_field(line))
            continue;
        smi_gpu_t g;
        if (parse_smi_line(line, &g) != 0) {
            conf_add(r, "nvidia", "discovery", R_FAIL,
                     "nvidia-smi printed '%.120s': not index, "
                     "uuid, name, memory, bus id, driver",
                     line);
            bad++;
            continue;
        }
        seen++;
        const cr_device_t *d = gpu_by_index(n, g.index);
        if (!d) {
            conf_add(r, "nvidia", "discovery", R_FAIL,
                     "nvidia-smi shows GPU %d (%s); corral has none", g.index, g.pci);
            bad++;
            continue;
        }
        uint64_t mib = d->memory >> 20;
        struct {
            bool ok;
            const char *what, *smi, *ours;
        } cmp[] = {
            {strcmp(d->uuid, g.uuid) == 0, "UUID", g.uuid, d->uuid},
            {strcmp(d->pci, g.pci) == 0, "PCI address", g.pci, d->pci},
            {strcmp(d->product, g.name) == 0, "name", g.name, d->product},
            {!d->driver[0] || strcmp(d->driver, g.driver) == 0, "driver", g.driver, d->driver},
        };
        for (size_t k = 0; k < CR_ARRAY_SIZE(cmp); k++)
            if (!cmp[k].ok) {
                conf_add(r, "nvidia", "discovery", R_FAIL,
                         "GPU %d: %s: nvidia-smi says %s, corral %s", g.index, cmp[k].what,
                         cmp[k].smi, cmp[k].ours);
                bad++;
            }
        if (mib + 1 < g.memory_mib || mib > g.memory_mib + 1) {
            conf_add(r, "nvidia", "discovery", R_FAIL,
                     "GPU %d: memory: nvidia-smi says %llu MiB, corral %llu MiB", g.index,
                     (unsigned long long)g.memory_mib, (unsigned long long)mib);
            bad++;
        }
        if (!r->driver[0])
            cr_strlcpy(r->driver, g.driver, sizeof(r->driver));
    }
    if (seen != count_gpus(n)) {
        conf_add(r, "nvidia", "discovery", R_FAIL, "nvidia-smi shows %zu GPUs, corral %zu", seen,
                 count_gpus(n));
        bad++;
    }
    if (!bad)
        conf_add(r, "nvidia", "discovery", R_PASS,
                 "%zu GPUs: UUID, name, PCI address, memory and driver as nvidia-smi says", seen);
    cr_buf_free(&out);
}

/* ---- nvidia: nvidia-smi topo -m ---- */

/* Drops the terminal escapes (underline, bold) nvidia-smi puts in its
 * header. */
static void strip_escapes(char *s)
{
    char *w = s;
    for (char *p = s; *p; p++) {
        if (*p == '\x1b') {
            while (*p && *p != 'm')
                p++;
            if (!*p)
                break;
            continue;
        }
        *w++ = *p;
    }
    *w = '\0';
}

static void nvidia_topology(conf_report_t *r, const cr_node_t *n)
{
    if (!conf_have_tool("nvidia-smi")) {
        conf_add(r, "nvidia", "topology", R_SKIP, "nvidia-smi is not on PATH");
        return;
    }
    cr_buf_t out = {0};
    if (conf_run_tool("nvidia-smi topo -m 2>&1", &out) != 0) {
        conf_add(r, "nvidia", "topology", R_FAIL, "nvidia-smi topo -m failed: %.200s", out.s);
        cr_buf_free(&out);
        return;
    }
    strip_escapes(out.s);
    size_t pairs = 0, bad = 0, pcie_differ = 0;
    for (char *line = out.s, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        int row;
        if (sscanf(line, "GPU%d", &row) != 1 || strncmp(line, "GPU", 3) != 0)
            continue;
        char *save = NULL, *tok = strtok_r(line, " \t", &save);
        for (int col = 0; (tok = strtok_r(NULL, " \t", &save)) && col < (int)count_gpus(n); col++) {
            if (col <= row)
                continue;
            const cr_device_t *a = gpu_by_index(n, row), *b = gpu_by_index(n, col);
            if (!a || !b)
                continue;
            int count = 0;
            cr_link_kind_t k = hw_topo_pair(n, a->index, b->index, &count);
            char ours[16];
            hw_topo_symbol(k, count, ours, sizeof(ours));
            pairs++;
            bool smi_nv = strncmp(tok, "NV", 2) == 0, our_nv = strncmp(ours, "NV", 2) == 0;
            if (smi_nv || our_nv) {
                if (strcmp(tok, ours) != 0) {
                    conf_add(r, "nvidia", "topology", R_FAIL,
                             "GPU%d-GPU%d: nvidia-smi topo -m says %s, corral %s", row, col, tok,
                             ours);
                    bad++;
                }
            } else if (strcmp(tok, ours) != 0) {
                conf_add(r, "nvidia", "topology", R_INFO,
                         "GPU%d-GPU%d: nvidia-smi says %s, corral %s (PCIe class; recorded)", row,
                         col, tok, ours);
                pcie_differ++;
            }
        }
    }
    if (!pairs)
        conf_add(r, "nvidia", "topology", count_gpus(n) > 1 ? R_FAIL : R_SKIP,
                 "no GPU pairs read from nvidia-smi topo -m");
    else if (!bad)
        conf_add(
            r, "nvidia", "topology", R_PASS,
            "%zu GPU pairs: every NV# of nvidia-smi topo -m is corral's NVLink (%zu PCIe cells "
            "differ)",
            pairs, pcie_differ);
    cr_buf_free(&out);
}

/* ---- isolation: a child given the environment sees one device ---- */

/* libcuda's types, as cuda.h declares them (CUresult int, CUdevice int,
 * CUuuid 16 bytes). */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_uuid_fn)(unsigned char *, int);
typedef int (*cu_version_fn)(int *);

/* In the child: count and first UUID as "N GPU-xxxxxxxx-..." and the
 * driver API version, on fd. */
static void cuda_child(const cr_envlist_t *env, int fd)
{
    for (size_t i = 0; i < env->vars.n; i++)
        setenv(env->vars.v[i].key, env->vars.v[i].value, 1);
    void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    char line[256] = "nolib";
    if (dl) {
        cu_init_fn init = (cu_init_fn)dlsym(dl, "cuInit");
        cu_count_fn count = (cu_count_fn)dlsym(dl, "cuDeviceGetCount");
        cu_get_fn get = (cu_get_fn)dlsym(dl, "cuDeviceGet");
        cu_uuid_fn uuid = (cu_uuid_fn)dlsym(dl, "cuDeviceGetUuid");
        cu_version_fn ver = (cu_version_fn)dlsym(dl, "cuDriverGetVersion");
        int n = -1, dev = 0, v = 0;
        unsigned char u[16] = {0};
        if (init && count && get && uuid && init(0) == 0 && count(&n) == 0) {
            if (n > 0 && get(&dev, 0) == 0)
                uuid(u, dev);
            if (ver)
                ver(&v);
            snprintf(line, sizeof(line),
                     "%d GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x "
                     "%d",
                     n, u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
                     u[12], u[13], u[14], u[15], v);
        } else {
            snprintf(line, sizeof(line), "noinit");
        }
    }
    ssize_t w = write(fd, line, strlen(line));
    (void)w;
    _exit(0);
}

int conf_run_with_env(const cr_envlist_t *env, const char *const *unset, char *const argv[],
                      cr_buf_t *out)
{
    int fds[2];
    cr_buf_append(out, "", 0);
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        for (size_t i = 0; unset && unset[i]; i++)
            unsetenv(unset[i]);
        for (size_t i = 0; i < env->vars.n; i++)
            setenv(env->vars.v[i].key, env->vars.v[i].value, 1);
        dup2(fds[1], 1);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    char buf[4096];
    ssize_t got;
    size_t total = 0;
    while ((got = read(fds[0], buf, sizeof(buf))) > 0 || (got < 0 && errno == EINTR)) {
        if (got > 0 && total + (size_t)got <= CONF_CHILD_OUTPUT_MAX) {
            cr_buf_append(out, buf, (size_t)got);
            total += (size_t)got;
        } /* past the bound: read on to the end, keeping nothing more */
    }
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *conf_python(void)
{
    const char *p = getenv("CORRAL_CONFORMANCE_PYTHON");
    return p && *p ? p : "python3";
}

/* PyTorch, when installed with CUDA: the device count and device 0's UUID
 * it sees under env. */
static void torch_isolation(conf_report_t *r, const cr_envlist_t *env, const char *want)
{
    static const char script[] =
        "import sys\n"
        "try:\n"
        "    import torch\n"
        "except Exception as e:\n"
        "    print('noimport', e); sys.exit(0)\n"
        "if not torch.cuda.is_available():\n"
        "    print('nocuda'); sys.exit(0)\n"
        "p = torch.cuda.get_device_properties(0)\n"
        "print(torch.cuda.device_count(), str(getattr(p, 'uuid', '')), torch.version.cuda)\n";
    char *const argv[] = {(char *)conf_python(), "-c", (char *)script, NULL};
    const cr_accel_component_t *c = hw_component_find("nvidia");
    cr_buf_t buf = {0};
    int rc = conf_run_with_env(env, c ? c->isolation_vars : NULL, argv, &buf);
    char out[512];
    cr_strlcpy(out, buf.s ? buf.s : "", sizeof(out));
    out[strcspn(out, "\n")] = '\0';
    cr_buf_free(&buf);
    int count = -1;
    char uuid[96] = "", ver[32] = "";
    if (rc != 0 || !out[0])
        conf_add(r, "nvidia", "isolation", R_SKIP,
                 "no %s to ask PyTorch (exit %d; CORRAL_CONFORMANCE_PYTHON names another)",
                 conf_python(), rc);
    else if (strncmp(out, "noimport", 8) == 0 || strcmp(out, "nocuda") == 0)
        conf_add(r, "nvidia", "isolation", R_SKIP, "PyTorch with CUDA is not installed (%s)", out);
    else if (sscanf(out, "%d %95s %31s", &count, uuid, ver) < 2)
        conf_add(r, "nvidia", "isolation", R_FAIL, "PyTorch said '%s'", out);
    else {
        /* torch prints the UUID without its GPU- prefix */
        char full[100];
        snprintf(full, sizeof(full), "%s%s", strncmp(uuid, "GPU-", 4) ? "GPU-" : "", uuid);
        if (count == 1 && strcmp(full, want) == 0)
            conf_add(r, "nvidia", "isolation", R_PASS,
                     "PyTorch (CUDA %s) under corral's environment sees exactly %s", ver, want);
        else
            conf_add(r, "nvidia", "isolation", R_FAIL,
                     "PyTorch sees %d devices, the first %s; want 1, %s", count, full, want);
    }
}

static void nvidia_isolation(conf_report_t *r, const cr_node_t *n)
{
    int dev = -1;
    for (size_t i = 0; i < n->devices.n && dev < 0; i++)
        if (strcmp(n->devices.v[i].backend, "nvidia") == 0 && n->devices.v[i].parent < 0 &&
            !n->devices.v[i].mig_enabled && n->devices.v[i].uuid[0])
            dev = (int)i;
    if (dev < 0) {
        conf_add(r, "nvidia", "isolation", R_SKIP, "no whole GPU with a UUID to isolate");
        return;
    }
    hw_options_t o = {0};
    cr_envlist_t env = {0};
    char *msg = NULL;
    if (hw_isolate(&o, n, &dev, 1, &env, &msg) != 0) {
        conf_add(r, "nvidia", "isolation", R_FAIL, "corral hw --isolate %d: %s", dev,
                 msg ? msg : "?");
        free(msg);
        return;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        conf_add(r, "nvidia", "isolation", R_SKIP, "pipe: %s", strerror(errno));
        cr_envlist_free(&env);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        cuda_child(&env, fds[1]);
    }
    close(fds[1]);
    char buf[256] = "";
    ssize_t got = pid > 0 ? read(fds[0], buf, sizeof(buf) - 1) : -1;
    close(fds[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    buf[got > 0 ? got : 0] = '\0';
    const char *want = n->devices.v[dev].uuid;
    int count = -1, version = 0;
    char uuid[96] = "";
    if (strcmp(buf, "nolib") == 0 || got <= 0)
        conf_add(r, "nvidia", "isolation", R_SKIP,
                 "no CUDA driver library (libcuda.so.1) to ask: isolation not verified");
    else if (strcmp(buf, "noinit") == 0)
        conf_add(r, "nvidia", "isolation", R_FAIL, "cuInit failed under CUDA_VISIBLE_DEVICES=%s",
                 cr_envlist_get(&env, "CUDA_VISIBLE_DEVICES"));
    else if (sscanf(buf, "%d %95s %d", &count, uuid, &version) != 3)
        conf_add(r, "nvidia", "isolation", R_FAIL, "the CUDA child said '%s'", buf);
    else if (count != 1 || strcmp(uuid, want) != 0)
        conf_add(r, "nvidia", "isolation", R_FAIL,
                 "under CUDA_VISIBLE_DEVICES=%s CUDA sees %d devices, the first %s; want 1, %s",
                 cr_envlist_get(&env, "CUDA_VISIBLE_DEVICES"), count, uuid, want);
    else
        conf_add(r, "nvidia", "isolation", R_PASS,
                 "under corral's environment for device %d CUDA sees exactly it (%s)", dev, want);
    if (version > 0)
        snprintf(r->runtime, sizeof(r->runtime), "CUDA driver API %d.%d", version / 1000,
                 version % 1000 / 10);
    torch_isolation(r, &env, want);
    cr_envlist_free(&env);
}

/* ---- every backend: telemetry and versions ---- */

static void telemetry_check(conf_report_t *r, const cr_node_t *n, const char *backend)
{
    const cr_accel_component_t *c = hw_component_find(backend);
    if (!c || !c->telemetry) {
        conf_add(r, backend, "telemetry", R_SKIP, "the backend reads no telemetry");
        return;
    }
    cr_hw_env_t env = {.root = "/"};
    size_t ok = 0, tried = 0;
    for (size_t i = 0; i < n->devices.n; i++) {
        if (strcmp(n->devices.v[i].backend, backend) != 0)
            continue;
        cr_telemetry_t t;
        memset(&t, 0, sizeof(t));
        tried++;
        int err = c->telemetry(&env, n, (int)i, &t);
        if (err)
            conf_add(r, backend, "telemetry", R_FAIL, "device %zu: %s", i, cr_strerror(err));
        else
            ok++;
    }
    if (tried && ok == tried)
        conf_add(r, backend, "telemetry", R_PASS, "%zu devices read", ok);
}

static void versions(conf_report_t *r, const cr_node_t *n, const char *backend)
{
    for (size_t i = 0; i < n->devices.n; i++)
        if (strcmp(n->devices.v[i].backend, backend) == 0) {
            if (!r->sku[0])
                cr_strlcpy(r->sku, n->devices.v[i].sku, sizeof(r->sku));
            if (!r->driver[0])
                cr_strlcpy(r->driver, n->devices.v[i].driver, sizeof(r->driver));
            break;
        }
    conf_add(r, backend, "versions", R_INFO, "SKU %s, driver %s, runtime %s",
             r->sku[0] ? r->sku : "?", r->driver[0] ? r->driver : "unknown",
             r->runtime[0] ? r->runtime : "unknown");
}

/* ---- output ---- */

static void xml_text(FILE *fp, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", fp);
            break;
        case '>':
            fputs("&gt;", fp);
            break;
        case '&':
            fputs("&amp;", fp);
            break;
        case '"':
            fputs("&quot;", fp);
            break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t')
                fputc(*s, fp);
        }
    }
}

static int write_junit(const conf_report_t *r, const char *path)
{
    FILE *fp = fopen(path, "w");
    if (!fp) {
        fprintf(stderr, "corral conformance: cannot write %s: %s\n", path, strerror(errno));
        return CLI_FAIL;
    }
    size_t fails = 0, skips = 0;
    for (size_t i = 0; i < r->checks.n; i++) {
        fails += r->checks.v[i].result == R_FAIL;
        skips += r->checks.v[i].result == R_SKIP || !r->real;
    }
    fprintf(fp, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(fp,
            "<testsuite name=\"corral-conformance\" tests=\"%zu\" failures=\"%zu\" "
            "skipped=\"%zu\">\n",
            r->checks.n, fails, skips);
    for (size_t i = 0; i < r->checks.n; i++) {
        const conf_check_t *c = &r->checks.v[i];
        fprintf(fp, "  <testcase classname=\"%s\" name=\"%s\">", c->backend, c->name);
        if (c->result == R_FAIL) {
            fputs("<failure message=\"", fp);
            xml_text(fp, c->detail);
            fputs("\"/>", fp);
        } else if (c->result == R_SKIP || !r->real) {
            fputs("<skipped message=\"", fp);
            xml_text(fp, r->real ? c->detail : r->why_not_real);
            fputs("\"/>", fp);
        }
        fputs("<system-out>", fp);
        xml_text(fp, c->detail);
        fputs("</system-out></testcase>\n", fp);
    }
    fprintf(fp, "</testsuite>\n");
    return fclose(fp) == 0 ? CLI_OK : CLI_FAIL;
}

static json_t *report_json(const conf_report_t *r, bool verified)
{
    json_t *o = json_object(), *a = json_array();
    json_object_set_new(o, "schema", json_string("corral.conformance/v1"));
    json_object_set_new(o, "verified", json_boolean(verified));
    json_object_set_new(o, "real_hardware", json_boolean(r->real));
    if (!r->real)
        json_object_set_new(o, "why_not_real", json_string(r->why_not_real));
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%Y-%m-%d", &tm);
    json_object_set_new(o, "date", json_string(date));
    json_object_set_new(o, "sku", json_string(r->sku));
    json_object_set_new(o, "driver", json_string(r->driver));
    json_object_set_new(o, "runtime", json_string(r->runtime));
    struct utsname u;
    if (uname(&u) == 0)
        json_object_set_new(o, "kernel", json_string(u.release));
    for (size_t i = 0; i < r->checks.n; i++) {
        const conf_check_t *c = &r->checks.v[i];
        json_t *x = json_object();
        json_object_set_new(x, "backend", json_string(c->backend));
        json_object_set_new(x, "check", json_string(c->name));
        json_object_set_new(x, "result", json_string(result_names[c->result]));
        json_object_set_new(x, "detail", json_string(c->detail));
        json_array_append_new(a, x);
    }
    json_object_set_new(o, "checks", a);
    return o;
}

/* ---- the command ---- */

static int usage(const char *why)
{
    if (why)
        fprintf(stderr, "corral conformance: %s\n", why);
    fputs(usage_text, stderr);
    return CLI_USAGE;
}

/* Why this run reads no real hardware, or NULL. */
static const char *not_real(void)
{
    const char *root = getenv("CORRAL_SYSFS_ROOT");
    if (root && *root && strcmp(root, "/") != 0)
        return "CORRAL_SYSFS_ROOT is set: the devices come from a recorded tree, not this "
               "machine";
    if (getenv("CORRAL_NVML_LIBRARY") && *getenv("CORRAL_NVML_LIBRARY"))
        return "CORRAL_NVML_LIBRARY is set: NVML is not the driver's";
    if (getenv("CORRAL_HWLOC_XML") && *getenv("CORRAL_HWLOC_XML"))
        return "CORRAL_HWLOC_XML is set: the host topology is a recording";
    return NULL;
}

int cli_conformance(int argc, char **argv)
{
    static const char help[] =
        "Checks this node's accelerators against the vendors' tools and runtimes.\n"
        "  --backend NAME  only that backend (nvidia, amd, tpu, neuron, gaudi, intel)\n"
        "  --json          the report as JSON on stdout (check lines on stderr)\n"
        "  --junit FILE    the report as JUnit XML in FILE as well\n"
        "Exit: 0 verified, 1 a mismatch, 77 nothing verified (no accelerator, or not\n"
        "real hardware). docs/hardware.md, \"Conformance on real hardware\".\n";
    const char *backend = NULL, *junit = NULL;
    bool as_json = false;
    const cli_opt_t opts[] = {
        CLI_STR("backend", &backend),
        CLI_FLAG("json", &as_json),
        CLI_STR("junit", &junit),
        CLI_END,
    };
    int first = cli_parse_opts("corral conformance", opts, argc, argv, usage_text, help, false);
    if (first < 0)
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    optind = first;
    if (optind < argc)
        return usage("unexpected argument");
    if (as_json && junit)
        return usage("--json and --junit go one at a time");
    if (backend && !hw_component_find(backend)) {
        fprintf(stderr,
                "corral conformance: no backend '%s' (built in: nvidia, amd, intel, "
                "tpu, neuron, gaudi)\n",
                backend);
        return CLI_USAGE;
    }
    cr_node_t *n = NULL;
    if (cli_discover(NULL, NULL, &n) != 0)
        return CLI_FAIL;
    conf_report_t r = {0};
    r.quiet = as_json;
    const char *why = not_real();
    r.real = why == NULL;
    if (why)
        cr_strlcpy(r.why_not_real, why, sizeof(r.why_not_real));
    /* the backends present, in device order */
    const char *present[16];
    size_t np = 0;
    for (size_t i = 0; i < n->devices.n && np < CR_ARRAY_SIZE(present); i++) {
        bool dup = false;
        for (size_t k = 0; k < np; k++)
            dup |= strcmp(present[k], n->devices.v[i].backend) == 0;
        if (!dup && (!backend || strcmp(backend, n->devices.v[i].backend) == 0))
            present[np++] = n->devices.v[i].backend;
    }
    FILE *msg = as_json ? stderr : stdout;
    if (!np) {
        if (backend)
            fprintf(msg, "corral conformance: no %s device on this machine: nothing verified\n",
                    backend);
        else
            fprintf(msg, "corral conformance: no accelerator on this machine: nothing verified\n");
    }
    if (!r.real)
        fprintf(msg, "corral conformance: not real hardware (%s): nothing verified\n", why);
    for (size_t b = 0; b < np; b++) {
        const char *be = present[b];
        r.sku[0] = r.driver[0] = r.runtime[0] = '\0';
        if (strcmp(be, "nvidia") == 0) {
            nvidia_discovery(&r, n);
            nvidia_isolation(&r, n);
            nvidia_topology(&r, n);
        } else {
            if (!conf_vendor_checks(&r, n, be)) {
                conf_add(&r, be, "discovery", R_SKIP, "no vendor tool known to compare with");
                conf_add(&r, be, "topology", R_SKIP, "no vendor matrix compared for %s", be);
            }
            conf_isolation_checks(&r, n, be);
            conf_vendor_versions(&r, be);
        }
        telemetry_check(&r, n, be);
        versions(&r, n, be);
    }
    size_t fails = 0, passes = 0;
    for (size_t i = 0; i < r.checks.n; i++) {
        fails += r.checks.v[i].result == R_FAIL;
        passes += r.checks.v[i].result == R_PASS;
    }
    bool verified = r.real && np && passes && !fails;
    int rc = fails ? CLI_FAIL : verified ? CLI_OK : EXIT_NOT_VERIFIED;
    if (as_json) {
        json_t *j = report_json(&r, verified);
        cli_print_json(j);
        json_decref(j);
    } else {
        printf("corral conformance: %zu passed, %zu failed, %zu checks in all; %s\n", passes, fails,
               r.checks.n, verified ? "verified on this machine" : "not verified");
    }
    if (junit && write_junit(&r, junit) != CLI_OK)
        rc = CLI_FAIL;
    for (size_t i = 0; i < r.checks.n; i++)
        free(r.checks.v[i].detail);
    CR_VEC_FREE(&r.checks);
    hw_node_free(n);
    return rc;
}
