/* hw/host.c: host topology through hwloc on the fixture machines (their
 * hwloc.xml, facts from tests/fixtures/hw/MACHINES.md), bad input, and this
 * machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "fixture.h"
#include <errno.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/stat.h>

#define GiB (1ull << 30)

typedef struct probe {
    fixture_env_t f;
    cr_hw_env_t env;
    cr_node_t *node;
} probe_t;

/* Opens a fixture; the node gets one device per PCI address given (as a
 * vendor backend would add them) before the host probe runs. */
static void probe_fixture(probe_t *p, const char *machine, const char *const *pcis)
{
    fixture_open(&p->f, machine);
    p->env = (cr_hw_env_t){.root = p->f.root, .getenv = fixture_getenv, .getenv_ctx = &p->f};
    p->node = hw_node_new();
    for (size_t i = 0; pcis && pcis[i]; i++) {
        cr_device_t *d = cr_node_add_device(p->node);
        cr_strlcpy(d->pci, pcis[i], sizeof(d->pci));
        cr_strlcpy(d->backend, "test", sizeof(d->backend));
    }
    assert_int_equal(hw_host_probe(&p->env, p->node), 0);
}

static void probe_close(probe_t *p)
{
    hw_node_free(p->node);
    fixture_close(&p->f);
}

static const cr_nic_t *nic(const cr_node_t *n, const char *name)
{
    for (size_t i = 0; i < n->nics.n; i++)
        if (strcmp(n->nics.v[i].name, name) == 0)
            return &n->nics.v[i];
    fail_msg("no NIC %s", name);
    return NULL;
}

static const cr_domain_t *domain(const cr_node_t *n, const char *kind, const char *name)
{
    for (size_t i = 0; i < n->domains.n; i++)
        if (strcmp(n->domains.v[i].kind, kind) == 0 && strcmp(n->domains.v[i].name, name) == 0)
            return &n->domains.v[i];
    return NULL;
}

static int count_parts(const char *path)
{
    int n = *path ? 1 : 0;
    for (; *path; path++)
        n += *path == '/';
    return n;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The path without its last part (the endpoint): where a device hangs. */
static void parent_path(const char *path, char *out, size_t size)
{
    cr_strlcpy(out, path, size);
    char *slash = strrchr(out, '/');
    if (slash)
        *slash = '\0';
}

static void test_dgx_host(void **state)
{
    probe_t p;
    probe_fixture(&p, "dgx-h100", NULL);
    cr_node_t *n = p.node;
    assert_int_equal(n->warnings.n, 0);
    assert_string_equal(n->cpu.model, "Intel(R) Xeon(R) Platinum 8480C");
    assert_int_equal(n->cpu.sockets, 2);
    assert_int_equal(n->cpu.cores, 112);
    assert_int_equal(n->cpu.threads, 224);
    assert_int_equal(n->numa.n, 2);
    assert_int_equal(n->numa.v[0].id, 0);
    assert_string_equal(n->numa.v[0].cpus, "0-55,112-167");
    assert_int_equal(n->numa.v[0].memory, 1024 * GiB);
    assert_int_equal(n->numa.v[1].id, 1);
    assert_string_equal(n->numa.v[1].cpus, "56-111,168-223");
    assert_int_equal(n->memory, 2048 * GiB);

    /* the eight compute NICs of a DGX H100, one per GPU (NVIDIA DGX H100
     * user guide, "Network Modules": port, GPU, interface, RDMA device),
     * and the management Ethernet */
    assert_int_equal(n->nics.n, 9);
    static const struct {
        const char *name, *pci, *rdma;
        int numa;
        uint64_t speed;
    } want[] = {
        {"ibp24s0", "0000:18:00.0", "mlx5_0", 0, 400000},
        {"ibp64s0", "0000:40:00.0", "mlx5_3", 0, 400000},
        {"ibp79s0", "0000:4f:00.0", "mlx5_4", 0, 400000},
        {"ibp94s0", "0000:5e:00.0", "mlx5_5", 0, 400000},
        {"ibp154s0", "0000:9a:00.0", "mlx5_6", 1, 400000},
        {"ibp192s0", "0000:c0:00.0", "mlx5_9", 1, 400000},
        {"ibp206s0", "0000:ce:00.0", "mlx5_10", 1, 400000},
        {"ibp220s0", "0000:dc:00.0", "mlx5_11", 1, 400000},
        {"eno1", "0000:03:00.0", "", 0, 10000},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(want); i++) {
        const cr_nic_t *x = nic(n, want[i].name);
        assert_string_equal(x->pci, want[i].pci);
        assert_int_equal(x->numa, want[i].numa);
        assert_int_equal(x->speed_mbps, want[i].speed);
        assert_int_equal(x->rdma, want[i].rdma[0] != '\0');
        assert_string_equal(x->rdma_device, want[i].rdma);
        assert_true(cr_str_has_prefix(x->pci_path, "hb"));
        assert_true(ends_with(x->pci_path, want[i].pci));
    }
    /* no devices: no NUMA domains */
    assert_int_equal(n->domains.n, 0);
    probe_close(&p);
}

static void test_dgx_devices(void **state)
{
    static const char *const pcis[] = {"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0",
                                       "0000:9d:00.0", "0000:df:00.0", NULL};
    probe_t p;
    probe_fixture(&p, "dgx-h100", pcis);
    cr_node_t *n = p.node;
    const cr_device_t *g0 = &n->devices.v[0], *g1 = &n->devices.v[1], *g2 = &n->devices.v[2],
                      *g4 = &n->devices.v[3], *g7 = &n->devices.v[4];
    assert_int_equal(g0->numa, 0);
    assert_string_equal(g0->cpus, "0-55,112-167");
    assert_int_equal(g4->numa, 1);
    assert_string_equal(g4->cpus, "56-111,168-223");
    /* each GPU's own compute NIC, behind its PCIe switch (the user guide's
     * GPU column: GPU 0 ibp24s0, 1 ibp64s0, 2 ibp79s0, 4 ibp154s0, 7 ibp220s0) */
    assert_string_equal(g0->nic, "ibp24s0");
    assert_string_equal(g1->nic, "ibp64s0");
    assert_string_equal(g2->nic, "ibp79s0");
    assert_string_equal(g4->nic, "ibp154s0");
    assert_string_equal(g7->nic, "ibp220s0");

    /* hb<N>, root port, switch upstream port, downstream port, device */
    assert_true(cr_str_has_prefix(g0->pci_path, "hb"));
    assert_true(ends_with(g0->pci_path, "/0000:1b:00.0"));
    assert_int_equal(count_parts(g0->pci_path), 5);
    /* GPU 0 and its NIC are below one switch: they meet at its upstream
     * port, one downstream port each; GPU 1 is below another */
    char a[160], b[160], c[160];
    parent_path(g0->pci_path, a, sizeof(a));
    parent_path(g1->pci_path, b, sizeof(b));
    parent_path(nic(n, "ibp24s0")->pci_path, c, sizeof(c));
    parent_path(a, a, sizeof(a));
    parent_path(b, b, sizeof(b));
    parent_path(c, c, sizeof(c));
    assert_string_not_equal(a, b);
    assert_string_equal(a, c);
    assert_int_not_equal(strncmp(g0->pci_path, g2->pci_path, 3), 0);

    const cr_domain_t *d0 = domain(n, "numa", "numa0"), *d1 = domain(n, "numa", "numa1");
    assert_non_null(d0);
    assert_non_null(d1);
    assert_int_equal(d0->nmembers, 3);
    assert_int_equal(d0->members[0], 0);
    assert_int_equal(d0->members[2], 2);
    assert_int_equal(d1->nmembers, 2);
    assert_int_equal(d1->members[0], 3);
    probe_close(&p);
}

/* hwloc's NUMA node wins over a backend's; a device hwloc does not know is
 * left as the backend described it. */
static void test_numa_authoritative(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "pcie-a100");
    cr_hw_env_t env = {.root = f.root, .getenv = fixture_getenv, .getenv_ctx = &f};
    cr_node_t *n = hw_node_new();
    cr_device_t *d = cr_node_add_device(n);
    cr_strlcpy(d->pci, "0000:17:00.0", sizeof(d->pci));
    d->numa = 1;
    d = cr_node_add_device(n);
    cr_strlcpy(d->pci, "0000:ee:00.0", sizeof(d->pci));
    d->numa = 1;
    d = cr_node_add_device(n);
    cr_strlcpy(d->pci, "0000:b1:00.0", sizeof(d->pci));
    d = cr_node_add_device(n); /* not PCI (a TPU chip over VFIO-less transport, say) */
    assert_int_equal(hw_host_probe(&env, n), 0);
    assert_int_equal(n->devices.v[0].numa, 0);
    assert_string_equal(n->devices.v[0].cpus, "0-31,64-95");
    assert_string_equal(n->devices.v[0].nic, "ens1f0");
    assert_int_equal(n->devices.v[1].numa, 1);
    assert_string_equal(n->devices.v[1].pci_path, "");
    assert_string_equal(n->devices.v[1].cpus, "");
    assert_string_equal(n->devices.v[1].nic, "");
    /* GPU 2 on NUMA 1: the only NIC, across the CPU interconnect */
    assert_int_equal(n->devices.v[2].numa, 1);
    assert_string_equal(n->devices.v[2].nic, "ens1f0");
    assert_int_equal(n->devices.v[3].numa, -1);
    assert_string_equal(n->devices.v[3].pci_path, "");
    /* GPU 0 and GPU 2 each on their own host bridge, no switch */
    assert_int_equal(count_parts(n->devices.v[0].pci_path), 3);
    assert_int_not_equal(strncmp(n->devices.v[0].pci_path, n->devices.v[2].pci_path, 3), 0);
    /* numa1 lists the unknown device (backend said 1) and GPU 2 */
    const cr_domain_t *d1 = domain(n, "numa", "numa1");
    assert_non_null(d1);
    assert_int_equal(d1->nmembers, 2);
    assert_int_equal(n->cpu.threads, 128);
    const cr_nic_t *x = nic(n, "ens1f0");
    assert_true(x->rdma);
    assert_string_equal(x->rdma_device, "mlx5_0");
    assert_int_equal(x->speed_mbps, 100000);
    hw_node_free(n);
    fixture_close(&f);
}

static void test_trn1(void **state)
{
    static const char *const pcis[] = {"0000:10:1c.0", "0000:90:1d.0", "0000:a0:1f.0", NULL};
    probe_t p;
    probe_fixture(&p, "trn1-32xlarge", pcis);
    cr_node_t *n = p.node;
    assert_int_equal(n->cpu.threads, 128);
    assert_int_equal(n->nics.n, 9);
    assert_false(nic(n, "ens32")->rdma);
    assert_string_equal(nic(n, "efa0")->rdma_device, "rdmap16s27");
    assert_string_equal(nic(n, "efa7")->pci, "0000:c0:1b.0");
    assert_int_equal(nic(n, "efa7")->numa, 1);
    /* class 0x0880 devices are kept (not one of hwloc's "important" classes) */
    assert_int_equal(n->devices.v[0].numa, 0);
    assert_string_equal(n->devices.v[0].nic, "efa0");
    assert_int_equal(count_parts(n->devices.v[0].pci_path), 2);
    assert_int_equal(n->devices.v[1].numa, 1);
    assert_string_equal(n->devices.v[1].nic, "efa4");
    assert_string_equal(n->devices.v[2].nic, "efa5");
    probe_close(&p);
}

static void test_tpu_and_amd(void **state)
{
    static const char *const tpu[] = {"0000:00:04.0", "0000:00:06.0", NULL};
    probe_t p;
    probe_fixture(&p, "tpu-v6e-4x4-w0", tpu);
    assert_int_equal(p.node->cpu.threads, 180);
    assert_int_equal(p.node->numa.v[1].memory, 360 * GiB);
    assert_int_equal(p.node->devices.v[0].numa, 0);
    assert_int_equal(p.node->devices.v[1].numa, 1);
    assert_string_equal(p.node->devices.v[1].cpus, "45-89,135-179");
    assert_string_equal(p.node->devices.v[1].nic, "eth0");
    assert_int_equal(nic(p.node, "eth0")->speed_mbps, 200000);
    probe_close(&p);

    static const char *const mi[] = {"0000:85:00.0", "0000:05:00.0", NULL};
    probe_fixture(&p, "mi300x-8", mi);
    assert_string_equal(p.node->cpu.model, "AMD EPYC 9654 96-Core Processor");
    assert_int_equal(p.node->cpu.threads, 384);
    assert_int_equal(p.node->cpu.cores, 192);
    assert_string_equal(p.node->devices.v[0].nic, "ib4");
    assert_string_equal(p.node->devices.v[1].nic, "ib0");
    assert_int_equal(p.node->nics.n, 8);
    probe_close(&p);
}

static void test_cpu_only(void **state)
{
    probe_t p;
    probe_fixture(&p, "cpu-only", NULL);
    cr_node_t *n = p.node;
    assert_int_equal(n->warnings.n, 0);
    assert_int_equal(n->cpu.sockets, 1);
    assert_int_equal(n->cpu.cores, 8);
    assert_int_equal(n->cpu.threads, 16);
    assert_int_equal(n->numa.n, 1);
    assert_string_equal(n->numa.v[0].cpus, "0-15");
    assert_int_equal(n->memory, 64 * GiB);
    assert_int_equal(n->nics.n, 1);
    assert_string_equal(n->nics.v[0].name, "eno1");
    assert_string_equal(n->nics.v[0].pci, "0000:00:1f.6");
    assert_string_equal(n->nics.v[0].pci_path, "hb0/0000:00:1f.6");
    assert_int_equal(n->nics.v[0].speed_mbps, 1000);
    assert_false(n->nics.v[0].rdma);
    assert_int_equal(n->domains.n, 0);
    probe_close(&p);
}

/* Through the whole discovery: the host part lands in the node. */
static void test_discover_fixture(void **state)
{
    fixture_env_t f;
    fixture_open(&f, "gaudi2-8");
    hw_options_t o = fixture_options(&f);
    cr_node_t *n = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &n, &msg), 0);
    assert_string_equal(n->hostname, "gaudi2-01");
    assert_int_equal(n->cpu.threads, 160);
    assert_int_equal(n->memory, 1024 * GiB);
    assert_int_equal(nic(n, "eth0")->speed_mbps, 100000);
    hw_node_free(n);
    fixture_close(&f);
}

static void make_dir(const char *path)
{
    assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* A truncated, an empty and a missing XML: one warning naming the file,
 * an empty host part, no crash. */
static void test_bad_xml(void **state)
{
    char dir[] = "/tmp/corral-test-host-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char src[1200], trunc[256], empty[256], missing[256];
    snprintf(src, sizeof(src), "%s/tests/fixtures/hw/dgx-h100/hwloc.xml", CORRAL_SOURCE_DIR);
    char *xml = NULL;
    size_t len = 0;
    assert_int_equal(cr_read_file_alloc("/", src, &xml, &len), 0);
    snprintf(trunc, sizeof(trunc), "%s/truncated.xml", dir);
    /* cut before the first object: the document is open and unfinished.
     * (Cut inside the objects, Debian's hwloc 2.9 leaks the ones it had
     * built on its error path, which LeakSanitizer reports; that is
     * hwloc's, not a thing corral could free.) */
    char *obj = strstr(xml, "<object");
    assert_non_null(obj);
    *obj = '\0';
    write_file(trunc, xml);
    free(xml);
    snprintf(empty, sizeof(empty), "%s/empty.xml", dir);
    write_file(empty, "");
    snprintf(missing, sizeof(missing), "%s/missing.xml", dir);
    const char *files[] = {trunc, empty, missing, trunc /* again: from the cache */};
    for (size_t i = 0; i < CR_ARRAY_SIZE(files); i++) {
        fixture_env_t f;
        fixture_open(&f, "dgx-h100");
        fixture_setenv(&f, "CORRAL_HWLOC_XML", files[i]);
        cr_hw_env_t env = {.root = f.root, .getenv = fixture_getenv, .getenv_ctx = &f};
        cr_node_t *n = hw_node_new();
        cr_device_t *d = cr_node_add_device(n);
        cr_strlcpy(d->pci, "0000:1b:00.0", sizeof(d->pci));
        assert_int_equal(hw_host_probe(&env, n), 0);
        assert_int_equal(n->warnings.n, 1);
        assert_non_null(strstr(n->warnings.v[0], files[i]));
        assert_int_equal(n->cpu.threads, 0);
        assert_int_equal(n->numa.n, 0);
        assert_int_equal(n->nics.n, 0);
        assert_int_equal(n->memory, 0);
        assert_string_equal(n->devices.v[0].pci_path, "");
        assert_int_equal(n->domains.n, 0);
        hw_node_free(n);
        fixture_close(&f);
    }
    unlink(trunc);
    unlink(empty);
    rmdir(dir);
}

/* A root without a recorded sysfs and no XML (an empty machine, a
 * vendor-only fixture): no host part, and nothing suspicious about it.
 * A NIC speed that is not a number: one warning naming the file. */
static void test_bad_root_and_speed(void **state)
{
    char dir[] = "/tmp/corral-test-host-XXXXXX";
    assert_non_null(mkdtemp(dir));
    fixture_env_t f = {0};
    cr_hw_env_t env = {.root = dir, .getenv = fixture_getenv, .getenv_ctx = &f};
    cr_node_t *n = hw_node_new();
    assert_int_equal(hw_host_probe(&env, n), 0);
    assert_int_equal(n->warnings.n, 0);
    assert_int_equal(n->cpu.threads, 0);
    assert_int_equal(n->nics.n, 0);
    hw_node_free(n);

    char p[512];
    const char *parts[] = {"sys", "sys/class", "sys/class/net", "sys/class/net/eno1"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(parts); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, parts[i]);
        make_dir(p);
    }
    snprintf(p, sizeof(p), "%s/sys/class/net/eno1/speed", dir);
    write_file(p, "fast\n");
    fixture_open(&f, "cpu-only");
    n = hw_node_new();
    assert_int_equal(hw_host_probe(&env, n), 0);
    assert_int_equal(n->warnings.n, 1);
    assert_non_null(strstr(n->warnings.v[0], "/sys/class/net/eno1/speed"));
    assert_non_null(strstr(n->warnings.v[0], "fast"));
    assert_int_equal(n->nics.n, 1);
    assert_int_equal(n->nics.v[0].speed_mbps, 0);
    assert_int_equal(n->cpu.threads, 16);
    hw_node_free(n);
    /* -1: a link that is down, unknown but not suspicious */
    write_file(p, "-1\n");
    n = hw_node_new();
    assert_int_equal(hw_host_probe(&env, n), 0);
    assert_int_equal(n->warnings.n, 0);
    assert_int_equal(n->nics.v[0].speed_mbps, 0);
    hw_node_free(n);
    fixture_close(&f);
    unlink(p);
    for (size_t i = CR_ARRAY_SIZE(parts); i-- > 0;) {
        snprintf(p, sizeof(p), "%s/%s", dir, parts[i]);
        rmdir(p);
    }
    rmdir(dir);
}

/* This thread's effective capabilities (the host probe leaves CAP_SYS_ADMIN
 * out while hwloc reads PCI config space, then must put it back). */
static void effective_caps(uint32_t out[2])
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
    assert_int_equal(syscall(SYS_capget, &h, d), 0);
    out[0] = d[0].effective;
    out[1] = d[1].effective;
}

/* Writes text to dir/rel, making the directories on the way. */
static void put(const char *dir, const char *rel, const char *text)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    for (char *s = p + strlen(dir) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        make_dir(p);
        *s = '/';
    }
    write_file(p, text);
}

static void remove_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A recorded Linux tree under the root (HWLOC_FSROOT): 1 package, 2 cores
 * of 2 threads (0,2 and 1,3), one NUMA node of 1 GiB. hwloc's own
 * HWLOC_FSROOT is put back afterwards. */
static void test_fsroot(void **state)
{
    char dir[] = "/tmp/corral-test-host-XXXXXX";
    assert_non_null(mkdtemp(dir));
    put(dir, "sys/devices/system/cpu/online", "0-3\n");
    for (int c = 0; c < 4; c++) {
        char rel[128];
        static const char *const files[][2] = {{"physical_package_id", "0\n"},
                                               {"core_siblings", "f\n"}};
        for (size_t i = 0; i < CR_ARRAY_SIZE(files); i++) {
            snprintf(rel, sizeof(rel), "sys/devices/system/cpu/cpu%d/topology/%s", c, files[i][0]);
            put(dir, rel, files[i][1]);
        }
        snprintf(rel, sizeof(rel), "sys/devices/system/cpu/cpu%d/topology/core_id", c);
        put(dir, rel, c % 2 ? "1\n" : "0\n");
        snprintf(rel, sizeof(rel), "sys/devices/system/cpu/cpu%d/topology/thread_siblings", c);
        put(dir, rel, c % 2 ? "a\n" : "5\n");
    }
    put(dir, "sys/devices/system/node/online", "0\n");
    put(dir, "sys/devices/system/node/node0/cpumap", "f\n");
    put(dir, "sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:        1048576 kB\n");
    uint32_t caps_before[2], caps_after[2];
    effective_caps(caps_before);
    const char *before = getenv("HWLOC_FSROOT");
    char *saved = before ? cr_strdup(before) : NULL;
    fixture_env_t f = {0};
    cr_hw_env_t env = {.root = dir, .getenv = fixture_getenv, .getenv_ctx = &f};
    cr_node_t *n = hw_node_new();
    assert_int_equal(hw_host_probe(&env, n), 0);
    assert_int_equal(n->warnings.n, 0);
    assert_int_equal(n->cpu.sockets, 1);
    assert_int_equal(n->cpu.cores, 2);
    assert_int_equal(n->cpu.threads, 4);
    assert_int_equal(n->numa.n, 1);
    assert_string_equal(n->numa.v[0].cpus, "0-3");
    assert_int_equal(n->memory, GiB);
    effective_caps(caps_after);
    assert_int_equal(caps_after[0], caps_before[0]);
    assert_int_equal(caps_after[1], caps_before[1]);
    const char *after = getenv("HWLOC_FSROOT");
    if (saved)
        assert_string_equal(after, saved);
    else
        assert_null(after);
    free(saved);
    hw_node_free(n);
    remove_tree(dir);
}

/* This machine, through hwloc's Linux backend. */
static void test_this_machine(void **state)
{
    uint32_t caps_before[2], caps_after[2];
    effective_caps(caps_before);
    fixture_env_t f = {0}; /* an empty environment: no CORRAL_HWLOC_XML */
    cr_hw_env_t env = {.root = "/", .getenv = fixture_getenv, .getenv_ctx = &f};
    cr_node_t *n = hw_node_new();
    assert_int_equal(hw_host_probe(&env, n), 0);
    effective_caps(caps_after);
    assert_int_equal(caps_after[0], caps_before[0]);
    assert_int_equal(caps_after[1], caps_before[1]);
    assert_int_equal(n->warnings.n, 0);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    int allowed = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
    /* hwloc counts the CPUs this process may use; without a cpuset
     * restriction that is every online CPU */
    assert_true(n->cpu.threads == online || n->cpu.threads == allowed);
    assert_true(n->cpu.cores >= 1 && n->cpu.cores <= n->cpu.threads);
    assert_true(n->cpu.sockets >= 1 && n->cpu.sockets <= n->cpu.cores);
    assert_true(n->numa.n >= 1);
    assert_true(n->memory > 0);
    uint64_t sum = 0;
    for (size_t i = 0; i < n->numa.n; i++) {
        assert_true(n->numa.v[i].cpus[0] != '\0');
        sum += n->numa.v[i].memory;
    }
    /* memory the kernel left outside every NUMA node (hot-added on some
     * VMs) still counts for the node: MemTotal is the floor */
    assert_true(n->memory >= sum);
    FILE *mi = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    assert_non_null(mi);
    assert_int_equal(fscanf(mi, "MemTotal: %llu kB", &kb), 1);
    fclose(mi);
    assert_int_equal(n->memory, sum > kb * 1024 ? sum : kb * 1024);
    for (size_t i = 0; i < n->nics.n; i++) {
        assert_true(n->nics.v[i].pci[0] != '\0');
        assert_true(ends_with(n->nics.v[i].pci_path, n->nics.v[i].pci));
    }
    /* the second probe comes from the cache and says the same */
    cr_node_t *again = hw_node_new();
    assert_int_equal(hw_host_probe(&env, again), 0);
    assert_int_equal(again->cpu.threads, n->cpu.threads);
    assert_int_equal(again->nics.n, n->nics.n);
    hw_node_free(again);
    hw_node_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dgx_host),           cmocka_unit_test(test_dgx_devices),
        cmocka_unit_test(test_numa_authoritative), cmocka_unit_test(test_trn1),
        cmocka_unit_test(test_tpu_and_amd),        cmocka_unit_test(test_cpu_only),
        cmocka_unit_test(test_discover_fixture),   cmocka_unit_test(test_bad_xml),
        cmocka_unit_test(test_bad_root_and_speed), cmocka_unit_test(test_fsroot),
        cmocka_unit_test(test_this_machine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
