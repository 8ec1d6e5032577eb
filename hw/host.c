/* Host topology through hwloc: CPUs, NUMA nodes and their memory, NICs,
 * and where each accelerator sits (NUMA node, local CPUs, PCI path, nearest
 * NIC). corral does not re-parse what hwloc parses; it loads hwloc once per
 * process and source, keeping only the object types it reads.
 *
 * The source is, in order: the XML file named by CORRAL_HWLOC_XML (the
 * fixture machines' recordings), the tree under env->root when it is not
 * "/" (hwloc's HWLOC_FSROOT, as hwloc-gather-topology records it), else
 * this machine.
 *
 * pci_path, which hw/topo.c compares part by part:
 *
 *     hb<N>/<bridge busid>/.../<device busid>
 *
 * hb<N> names the host bridge above the device: N counts host bridges in
 * hwloc's logical order from 0 (so two devices below one host bridge share
 * "hb<N>", and the numbers are dense). Then every PCI bridge from the top
 * down (root port, switch upstream port, switch downstream port, ...) by
 * its busid "dddd:bb:ss.f", and last the device's own busid. Example, a
 * GPU below a PCIe switch:
 *     hb1/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0
 * A device hwloc finds directly on a root bus: "hb0/0000:00:04.0". A device
 * not below a host bridge gets no path (""). NICs get the same kind of
 * path. */
#include "hw.h"
#include <errno.h>
#include <hwloc.h>
#include <pthread.h>
#include <linux/capability.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---------------- loading, once per process and source ---------------- */

typedef struct host_topo {
    char *source;          /* "xml:PATH", "fsroot:ROOT" or "this" */
    hwloc_topology_t topo; /* NULL when it could not be loaded */
    char *error;           /* why not, naming the file; NULL: nothing to load */
} host_topo_t;

/* Loaded topologies live as long as the process: discovery may run several
 * times (tests, a daemon re-describing its node) and hwloc's load is the
 * expensive part. hwloc objects are read-only once loaded. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static CR_VEC(host_topo_t *) cache; /* entries never move or go away */

/* hwloc loads every plugin in its directory at the first topology init
 * (OpenCL, GL, libpciaccess, libxml2 and what they link: milliseconds).
 * corral needs none: the Linux component reads PCI from sysfs itself and
 * the built-in XML parser reads hwloc's XML. hwloc reads this only from
 * the process environment, so it is set there, once, unless the operator
 * set it. */
static void blacklist_plugins(void)
{
    setenv("HWLOC_PLUGINS_BLACKLIST",
           "hwloc_gl,hwloc_opencl,hwloc_pci,hwloc_xml_libxml,"
           "hwloc_cuda,hwloc_nvml,hwloc_rsmi,hwloc_levelzero",
           0);
}

/* Only what corral reads: NUMA nodes, packages, cores and PUs (hwloc always
 * keeps Machine, NUMA and PU), the PCI tree, and network/OpenFabrics OS
 * devices. No caches, groups, misc or memory-side caches. PCI devices are
 * all kept: an accelerator of class 0x0880 (Trainium) is not one of
 * hwloc's "important" classes. Bridges without devices below are dropped. */
static const struct {
    hwloc_obj_type_t type;
    enum hwloc_type_filter_e filter;
} type_filters[] = {
    {HWLOC_OBJ_PACKAGE, HWLOC_TYPE_FILTER_KEEP_ALL},
    {HWLOC_OBJ_CORE, HWLOC_TYPE_FILTER_KEEP_ALL},
    {HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT},
    {HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL},
    {HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT},
};

static void set_filters(hwloc_topology_t t)
{
    hwloc_topology_set_all_types_filter(t, HWLOC_TYPE_FILTER_KEEP_NONE);
    for (size_t i = 0; i < CR_ARRAY_SIZE(type_filters); i++)
        hwloc_topology_set_type_filter(t, type_filters[i].type, type_filters[i].filter);
    /* The x86 CPUID backend adds cache and model details the Linux
     * backend already gives or corral does not use; it costs ~1.5 ms. */
    hwloc_topology_set_components(t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
}

/* hwloc's Linux backend reads 256 bytes of config space of every PCI
 * function, for the link speed in the PCIe capability, which corral does
 * not use; everything it does use (ids, class, header type, bridge bus
 * numbers) lies in the 64-byte standard header. The kernel hands a reader
 * without CAP_SYS_ADMIN just that header ("several chips lock up trying to
 * read undefined config space", pci-sysfs.c), and each config access is a
 * trap under a hypervisor: 1.7 ms against 0.45 ms per function on the
 * benchmark machine (docs/benchmarks.md). So while hwloc reads this
 * machine, CAP_SYS_ADMIN is left out of this thread's effective set, and
 * put back after: it stays in the permitted set. Nothing changes for a
 * process that does not hold it. */
typedef struct caps {
    struct __user_cap_header_struct h;
    struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
    bool dropped;
} caps_t;

static void drop_sys_admin(caps_t *c)
{
    c->dropped = false;
    c->h = (struct __user_cap_header_struct){.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    if (syscall(SYS_capget, &c->h, c->d) != 0)
        return;
    unsigned i = CAP_TO_INDEX(CAP_SYS_ADMIN);
    uint32_t bit = CAP_TO_MASK(CAP_SYS_ADMIN);
    if (!(c->d[i].effective & bit))
        return;
    struct __user_cap_data_struct less[_LINUX_CAPABILITY_U32S_3];
    memcpy(less, c->d, sizeof(less));
    less[i].effective &= ~bit;
    c->dropped = syscall(SYS_capset, &c->h, less) == 0;
}

static void restore_sys_admin(caps_t *c)
{
    if (c->dropped && syscall(SYS_capset, &c->h, c->d) != 0)
        cr_warn("could not take CAP_SYS_ADMIN back after reading the host topology: %s",
                strerror(errno));
}

/* Loads one source; on failure returns NULL and *error says why (left
 * NULL when the source holds no topology at all). */
static hwloc_topology_t load(const char *xml, const char *fsroot, char **error)
{
    hwloc_topology_t t = NULL;
    char *old_fsroot = NULL;
    bool set_fsroot = false;

    if (xml && access(xml, R_OK) != 0) {
        *error = cr_asprintf("CORRAL_HWLOC_XML=%s: cannot read it (%s); no host topology", xml,
                             strerror(errno));
        return NULL;
    }
    if (fsroot && !cr_path_is_dir(fsroot, "/sys/devices/system/cpu")) {
        /* a tree that recorded no host topology (a vendor-only fixture, an
         * empty machine) is not a fault of the machine: say so quietly */
        cr_info("%s/sys/devices/system/cpu is missing: no host topology under this root "
                "(record one with hwloc-gather-topology, or set CORRAL_HWLOC_XML)",
                fsroot);
        return NULL;
    }
    blacklist_plugins();
    if (hwloc_topology_init(&t) != 0) {
        *error = cr_asprintf("hwloc could not start (%s); no host topology", strerror(errno));
        return NULL;
    }
    set_filters(t);
    if (xml && hwloc_topology_set_xml(t, xml) != 0) {
        *error = cr_asprintf("CORRAL_HWLOC_XML=%s: not a hwloc XML topology (%s); no host "
                             "topology",
                             xml, strerror(errno));
        goto out_destroy;
    }
    if (fsroot) {
        /* hwloc takes a Linux root only from its environment variable; it
         * is read while loading, under cache_lock, and put back after. */
        const char *o = getenv("HWLOC_FSROOT");
        old_fsroot = o ? cr_strdup(o) : NULL;
        setenv("HWLOC_FSROOT", fsroot, 1);
        set_fsroot = true;
    }
    caps_t caps = {.dropped = false};
    if (!xml && !fsroot)
        drop_sys_admin(&caps);
    int err = hwloc_topology_load(t);
    int saved = errno;
    restore_sys_admin(&caps);
    if (set_fsroot) {
        if (old_fsroot)
            setenv("HWLOC_FSROOT", old_fsroot, 1);
        else
            unsetenv("HWLOC_FSROOT");
        free(old_fsroot);
    }
    if (err != 0) {
        if (xml)
            *error = cr_asprintf("CORRAL_HWLOC_XML=%s: hwloc could not load it (%s): expected "
                                 "hwloc's XML topology, as lstopo --of xml writes it; no host "
                                 "topology",
                                 xml, strerror(saved));
        else
            *error = cr_asprintf("hwloc could not read the topology under %s (%s); no host "
                                 "topology",
                                 fsroot ? fsroot : "/", strerror(saved));
        goto out_destroy;
    }
    if (hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU) <= 0) {
        if (xml)
            *error = cr_asprintf("CORRAL_HWLOC_XML=%s: hwloc found no CPU in it; no host "
                                 "topology",
                                 xml);
        else
            *error =
                cr_asprintf("hwloc found no CPU under %s; no host topology", fsroot ? fsroot : "/");
        goto out_destroy;
    }
    return t;

out_destroy:
    hwloc_topology_destroy(t);
    return NULL;
}

/* The cached topology for a source, loading it the first time. Returns the
 * entry: topo NULL when it could not be loaded, with error saying why, or
 * error NULL when the source holds no topology to load. */
static const host_topo_t *get_topology(const cr_hw_env_t *env)
{
    const char *xml = cr_hw_getenv(env, "CORRAL_HWLOC_XML");
    const char *root = env && env->root && *env->root ? env->root : "/";
    const char *fsroot = NULL;
    char *source;
    if (xml && *xml)
        source = cr_asprintf("xml:%s", xml);
    else if (strcmp(root, "/") != 0)
        source = cr_asprintf("fsroot:%s", (fsroot = root));
    else
        source = cr_strdup("this");
    if (!(xml && *xml))
        xml = NULL;

    pthread_mutex_lock(&cache_lock);
    host_topo_t *h = NULL;
    for (size_t i = 0; i < cache.n && !h; i++)
        if (strcmp(cache.v[i]->source, source) == 0)
            h = cache.v[i];
    if (h) {
        free(source);
    } else {
        char *error = NULL;
        hwloc_topology_t t = load(xml, fsroot, &error);
        h = cr_calloc(1, sizeof(*h));
        *CR_VEC_PUSH(&cache) = h;
        h->source = source;
        h->topo = t;
        h->error = error;
    }
    pthread_mutex_unlock(&cache_lock);
    return h;
}

/* ---------------- reading the topology ---------------- */

static void cpulist_of(hwloc_const_bitmap_t set, char *buf, size_t size)
{
    buf[0] = '\0';
    if (set && !hwloc_bitmap_iszero(set))
        hwloc_bitmap_list_snprintf(buf, size, set);
}

/* NUMA node and local CPUs of an I/O object: those of its first non-I/O
 * ancestor (the package or machine its host bridge hangs from). numa is -1
 * when that ancestor spans several NUMA nodes. */
static void locality(hwloc_topology_t t, hwloc_obj_t o, int *numa, char *cpus, size_t size)
{
    hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(t, o);
    *numa = -1;
    cpus[0] = '\0';
    if (!a)
        return;
    if (a->nodeset && hwloc_bitmap_weight(a->nodeset) == 1)
        *numa = hwloc_bitmap_first(a->nodeset);
    cpulist_of(a->cpuset, cpus, size);
}

static void busid(hwloc_obj_t o, char *buf, size_t size)
{
    snprintf(buf, size, "%04x:%02x:%02x.%01x", o->attr->pcidev.domain, o->attr->pcidev.bus,
             o->attr->pcidev.dev, o->attr->pcidev.func);
}

static bool is_host_bridge(hwloc_obj_t o)
{
    return o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

/* Position of host bridge hb among all host bridges, in logical order. */
static int host_bridge_index(hwloc_topology_t t, hwloc_obj_t hb)
{
    int n = 0;
    for (hwloc_obj_t b = hwloc_get_next_bridge(t, NULL); b; b = hwloc_get_next_bridge(t, b)) {
        if (b == hb)
            return n;
        n += is_host_bridge(b);
    }
    return -1;
}

/* The path described at the top of this file; "" when o is not below a
 * host bridge or the path does not fit. */
static void pci_path(hwloc_topology_t t, hwloc_obj_t o, char *out, size_t size)
{
    hwloc_obj_t chain[32];
    size_t n = 0;
    hwloc_obj_t hb = NULL;
    out[0] = '\0';
    for (hwloc_obj_t p = o; p && n < CR_ARRAY_SIZE(chain); p = p->parent) {
        if (is_host_bridge(p)) {
            hb = p;
            break;
        }
        if (p->type != HWLOC_OBJ_BRIDGE && p->type != HWLOC_OBJ_PCI_DEVICE)
            return;
        chain[n++] = p;
    }
    if (!hb)
        return;
    cr_buf_t b = {0};
    cr_buf_printf(&b, "hb%d", host_bridge_index(t, hb));
    while (n--) {
        char id[24];
        busid(chain[n], id, sizeof(id));
        cr_buf_printf(&b, "/%s", id);
    }
    if (b.len < size)
        memcpy(out, b.s, b.len + 1);
    cr_buf_free(&b);
}

static void fill_cpu(hwloc_topology_t t, cr_node_t *node)
{
    int pkgs = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
    int cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    int pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    node->cpu.threads = pus;
    node->cpu.cores = cores > 0 ? cores : pus;
    node->cpu.sockets = pkgs > 0 ? pkgs : 1;
    const char *model = NULL;
    hwloc_obj_t pkg = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    if (pkg)
        model = hwloc_obj_get_info_by_name(pkg, "CPUModel");
    if (!model)
        model = hwloc_obj_get_info_by_name(hwloc_get_root_obj(t), "CPUModel");
    if (model)
        cr_strlcpy(node->cpu.model, model, sizeof(node->cpu.model));
}

static void fill_numa(hwloc_topology_t t, cr_node_t *node)
{
    uint64_t total = 0;
    int n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)i);
        cr_numa_t *m = CR_VEC_PUSH(&node->numa);
        m->id = (int)o->os_index;
        cpulist_of(o->cpuset, m->cpus, sizeof(m->cpus));
        m->memory = o->attr->numanode.local_memory;
        total += m->memory;
    }
    if (total == 0)
        total = hwloc_get_root_obj(t)->total_memory;
    node->memory = total;
}

/* Memory that the kernel did not attach to a NUMA node (hot-added on some
 * VMs) is missing from hwloc's sum; /proc/meminfo's MemTotal counts it.
 * The larger of the two is the node's memory. */
static void fill_memtotal(const cr_hw_env_t *env, cr_node_t *node)
{
    char *text = NULL;
    if (cr_read_file_alloc(env->root, "/proc/meminfo", &text, NULL) != 0)
        return;
    const char *p = strstr(text, "MemTotal:");
    unsigned long long kb;
    if (p && sscanf(p, "MemTotal: %llu kB", &kb) == 1 && kb * 1024 > node->memory)
        node->memory = kb * 1024;
    free(text);
}

/* Link speed in Mb/s from root/sys/class/net/<name>/speed; 0 when unknown.
 * A link that is down reads as -1 or fails with EINVAL: unknown, not
 * suspicious. Anything else that is not a number is. */
static uint64_t nic_speed(const cr_hw_env_t *env, cr_node_t *node, const char *name)
{
    char path[128], buf[64];
    const char *root = env && env->root ? env->root : "/";
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", name);
    if (cr_read_file(root, path, buf, sizeof(buf)) != 0)
        return 0;
    int64_t v;
    if (cr_parse_i64(buf, 10, &v) != 0) {
        cr_node_warn(node, "%s%s: expected the link speed in Mb/s, got '%s'; speed of %s unknown",
                     strcmp(root, "/") ? root : "", path, buf, name);
        return 0;
    }
    return v > 0 ? (uint64_t)v : 0;
}

static cr_nic_t *find_nic(cr_node_t *node, const char *name)
{
    for (size_t i = 0; i < node->nics.n; i++)
        if (strcmp(node->nics.v[i].name, name) == 0)
            return &node->nics.v[i];
    return NULL;
}

/* One NIC per network OS device on a PCI function; RDMA when an
 * OpenFabrics OS device sits on the same function. */
static void fill_nics(const cr_hw_env_t *env, hwloc_topology_t t, cr_node_t *node)
{
    for (hwloc_obj_t o = hwloc_get_next_osdev(t, NULL); o; o = hwloc_get_next_osdev(t, o)) {
        if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK || !o->name || !o->parent ||
            o->parent->type != HWLOC_OBJ_PCI_DEVICE)
            continue;
        hwloc_obj_t pci = o->parent;
        cr_nic_t *nic = find_nic(node, o->name);
        if (!nic) {
            nic = CR_VEC_PUSH(&node->nics);
            cr_strlcpy(nic->name, o->name, sizeof(nic->name));
            nic->speed_mbps = nic_speed(env, node, o->name);
        }
        char cpus[8];
        busid(pci, nic->pci, sizeof(nic->pci));
        pci_path(t, pci, nic->pci_path, sizeof(nic->pci_path));
        locality(t, pci, &nic->numa, cpus, sizeof(cpus));
        for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
            if (c->type == HWLOC_OBJ_OS_DEVICE &&
                c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && c->name) {
                nic->rdma = true;
                cr_strlcpy(nic->rdma_device, c->name, sizeof(nic->rdma_device));
                break;
            }
        }
    }
}

/* How many leading parts of two pci_paths are equal. */
static int shared_parts(const char *a, const char *b)
{
    if (!*a || !*b)
        return 0;
    int n = 0;
    for (;; a++, b++) {
        bool enda = *a == '/' || !*a, endb = *b == '/' || !*b;
        if (enda && endb) {
            n++;
            if (!*a || !*b)
                return n;
            continue;
        }
        if (*a != *b)
            return n;
    }
}

/* The nearest NIC: the longest shared PCI path, then the same NUMA node,
 * then RDMA, then speed; the first listed on a tie. */
static const cr_nic_t *nearest_nic(const cr_node_t *node, const char *path, int numa)
{
    const cr_nic_t *best = NULL;
    long best_key[4] = {0};
    for (size_t i = 0; i < node->nics.n; i++) {
        const cr_nic_t *n = &node->nics.v[i];
        long key[4] = {shared_parts(path, n->pci_path), numa >= 0 && n->numa == numa, n->rdma,
                       (long)n->speed_mbps};
        int cmp = 0;
        for (size_t k = 0; k < CR_ARRAY_SIZE(key) && !cmp; k++)
            cmp = (key[k] > best_key[k]) - (key[k] < best_key[k]);
        if (!best || cmp > 0) {
            best = n;
            memcpy(best_key, key, sizeof(key));
        }
    }
    return best;
}

static void annotate_devices(hwloc_topology_t t, cr_node_t *node)
{
    for (size_t i = 0; i < node->devices.n; i++) {
        cr_device_t *d = &node->devices.v[i];
        if (!d->pci[0])
            continue;
        hwloc_obj_t o = hwloc_get_pcidev_by_busidstring(t, d->pci);
        if (!o)
            continue;
        int numa;
        char cpus[sizeof(d->cpus)];
        locality(t, o, &numa, cpus, sizeof(cpus));
        if (numa >= 0)
            d->numa = numa;
        if (cpus[0])
            cr_strlcpy(d->cpus, cpus, sizeof(d->cpus));
        pci_path(t, o, d->pci_path, sizeof(d->pci_path));
        const cr_nic_t *nic = nearest_nic(node, d->pci_path, d->numa);
        if (nic)
            cr_strlcpy(d->nic, nic->name, sizeof(d->nic));
    }
}

static bool has_domain(const cr_node_t *node, const char *kind, const char *name)
{
    for (size_t i = 0; i < node->domains.n; i++)
        if (strcmp(node->domains.v[i].kind, kind) == 0 &&
            strcmp(node->domains.v[i].name, name) == 0)
            return true;
    return false;
}

/* One "numa" domain per NUMA node that has devices. */
static void add_numa_domains(cr_node_t *node)
{
    for (size_t m = 0; m < node->numa.n; m++) {
        int id = node->numa.v[m].id;
        char name[32];
        snprintf(name, sizeof(name), "numa%d", id);
        if (has_domain(node, "numa", name))
            continue;
        cr_domain_t *dom = NULL;
        for (size_t i = 0; i < node->devices.n; i++) {
            if (node->devices.v[i].numa != id)
                continue;
            if (!dom)
                dom = cr_node_add_domain(node, "numa", name);
            cr_domain_add_member(dom, (int)i);
        }
    }
}

int hw_host_probe(const cr_hw_env_t *env, cr_node_t *node)
{
    const host_topo_t *h = get_topology(env);
    if (!h->topo) {
        if (h->error)
            cr_node_warn(node, "%s", h->error);
        return 0;
    }
    fill_cpu(h->topo, node);
    fill_numa(h->topo, node);
    fill_memtotal(env, node);
    fill_nics(env, h->topo, node);
    annotate_devices(h->topo, node);
    add_numa_domains(node);
    return 0;
}
