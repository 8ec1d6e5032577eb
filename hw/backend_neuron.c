/* The AWS Neuron backend: Inferentia and Trainium devices.
 *
 * The driver makes one sysfs directory per device,
 * /sys/devices/virtual/neuron_device/neuronN, with core_count and
 * connected_devices (its NeuronLink neighbours). Devices are numbered in
 * PCI address order, so neuronN is the N-th Neuron PCI function. The
 * schedulable resource is the NeuronCore: device N's cores are numbered
 * after those of devices 0..N-1, which is how NEURON_RT_VISIBLE_CORES
 * counts them. */
#include "hw.h"
#include "neuron_sysfs.h"
#include <stdio.h>
#include <strings.h>

#define NEURON_PCI_VENDOR 0x1d0f
#define NEURON_SYSFS "/sys/devices/virtual/neuron_device"

static const char *const vars[] = {"NEURON_RT_VISIBLE_CORES", NULL};

/* Per SKU: device memory, and the logical NeuronCore size the runtime uses
 * by default (Trainium2 fuses 2 physical cores into one logical core
 * unless NEURON_LOGICAL_NC_CONFIG=1; core_count counts physical ones). */
static const struct sku_row {
    const char *sku;
    int memory_gib;
    int lnc;
} sku_rows[] = {
    {"Inferentia", 8, 1},
    {"Inferentia2", 32, 1},
    {"Trainium", 32, 1},
    {"Trainium2", 96, 2},
};

static const struct sku_row *sku_find(const char *sku)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(sku_rows); i++)
        if (strcmp(sku_rows[i].sku, sku) == 0)
            return &sku_rows[i];
    return NULL;
}

/* N for "neuronN", else -1. */
static int device_number(const char *name)
{
    int64_t v;
    if (strncmp(name, "neuron", 6) != 0 || name[6] < '0' || name[6] > '9' ||
        cr_parse_i64(name + 6, 10, &v) != 0 || v >= NEURON_MAX_DEVICES)
        return -1;
    return (int)v;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The Neuron PCI functions in address order (cr_list_dir sorts). */
static void list_neuron_pci(const cr_hw_env_t *env, char ***out, size_t *nout)
{
    CR_VEC(char *) v = {0};
    char **names;
    size_t n;
    if (cr_list_dir(env->root, "/sys/bus/pci/devices", &names, &n) == 0) {
        for (size_t i = 0; i < n; i++) {
            char path[300];
            uint64_t vendor, device;
            snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", names[i]);
            if (cr_read_u64(env->root, path, 16, &vendor) != 0 || vendor != NEURON_PCI_VENDOR)
                continue;
            snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/device", names[i]);
            const char *sku = cr_read_u64(env->root, path, 16, &device) == 0 && device <= 0xffff
                                  ? cr_accel_sku_by_pci(NEURON_PCI_VENDOR, (uint16_t)device)
                                  : NULL;
            if (sku && sku_find(sku))
                *CR_VEC_PUSH(&v) = cr_strdup(names[i]);
        }
        cr_free_strv(names, n);
    }
    *out = v.v;
    *nout = v.n;
}

typedef struct ndev {
    int number;   /* N of neuronN */
    int node_idx; /* index in node->devices, -1 when left out */
    int nconn;
    int conn[NEURON_MAX_DEVICES];
    bool conn_ok;
} ndev_t;

static void add_device(const cr_hw_env_t *env, cr_node_t *node, ndev_t *nd, const char *bdf,
                       int ncores)
{
    char path[300], name[96] = "";
    uint64_t vendor = 0, device = 0;
    int64_t numa = -1;
    const char *sku = NULL;
    if (bdf) {
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", bdf);
        cr_read_u64(env->root, path, 16, &vendor);
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/device", bdf);
        cr_read_u64(env->root, path, 16, &device);
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bdf);
        if (cr_read_i64(env->root, path, 10, &numa) != 0)
            numa = -1;
        if (device <= 0xffff)
            sku = cr_accel_sku_by_pci((uint16_t)vendor, (uint16_t)device);
    }
    snprintf(path, sizeof(path), NEURON_SYSFS "/neuron%d/info/architecture/device_name",
             nd->number);
    cr_read_file(env->root, path, name, sizeof(name));
    if (!sku && name[0])
        sku = cr_accel_sku_by_name(name);
    const struct sku_row *row = sku ? sku_find(sku) : NULL;

    cr_device_t *d = cr_node_add_device(node);
    nd->node_idx = d->index;
    cr_strlcpy(d->backend, "neuron", sizeof(d->backend));
    cr_strlcpy(d->vendor, "AWS", sizeof(d->vendor));
    cr_strlcpy(d->resource, "neuron_cores", sizeof(d->resource));
    if (sku)
        cr_strlcpy(d->sku, sku, sizeof(d->sku));
    cr_strlcpy(d->product, name[0] ? name : (sku ? sku : "Neuron device"), sizeof(d->product));
    if (bdf)
        cr_strlcpy(d->pci, bdf, sizeof(d->pci));
    d->pci_vendor = (uint16_t)vendor;
    d->pci_device = (uint16_t)device;
    d->numa = numa >= 0 ? (int)numa : -1;
    d->memory = row ? (uint64_t)row->memory_gib << 30 : 0;
    d->compute_units = ncores;
    d->cores = ncores;
    d->vendor_index = nd->number;
    d->health = CR_HEALTH_OK;
    char serial[96];
    snprintf(path, sizeof(path), NEURON_SYSFS "/neuron%d/info/serial_number", nd->number);
    if (cr_read_file(env->root, path, serial, sizeof(serial)) == 0 && serial[0])
        cr_strlcpy(d->uuid, serial, sizeof(d->uuid));
}

/* Logical NeuronCores per physical ones for a device of this SKU. */
static int lnc_for(const cr_hw_env_t *env, cr_node_t *node, const char *sku)
{
    const struct sku_row *row = sku_find(sku);
    int lnc = row ? row->lnc : 1;
    const char *v = cr_hw_getenv(env, "NEURON_LOGICAL_NC_CONFIG");
    int64_t x;
    if (v && lnc > 1) {
        if (cr_parse_i64(v, 10, &x) == 0 && (x == 1 || x == 2))
            lnc = (int)x;
        else
            cr_node_warn(node, "neuron: NEURON_LOGICAL_NC_CONFIG=%s: expected 1 or 2; using %d", v,
                         lnc);
    }
    return lnc;
}

/* NeuronLink domains: each group of devices the links connect. */
static void add_domains(cr_node_t *node, const ndev_t *devs, size_t n)
{
    int *comp = cr_malloc((n ? n : 1) * sizeof(int));
    for (size_t i = 0; i < n; i++)
        comp[i] = (int)i;
    /* union by the links the node now holds; n is small (<= 64) */
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < n; k++) {
                if (devs[i].node_idx < 0 || devs[k].node_idx < 0 || comp[k] <= comp[i] ||
                    !hw_node_find_link(node, devs[i].node_idx, devs[k].node_idx))
                    continue;
                comp[k] = comp[i];
                changed = true;
            }
    }
    int ndom = 0;
    for (size_t c = 0; c < n; c++) {
        size_t members = 0;
        for (size_t i = 0; i < n; i++)
            members += devs[i].node_idx >= 0 && comp[i] == (int)c;
        if (members < 2)
            continue;
        char name[32];
        snprintf(name, sizeof(name), "neuronlink%d", ndom++);
        cr_domain_t *d = cr_node_add_domain(node, "neuron-ring", name);
        for (size_t i = 0; i < n; i++)
            if (devs[i].node_idx >= 0 && comp[i] == (int)c)
                cr_domain_add_member(d, devs[i].node_idx);
    }
    free(comp);
}

static int probe(const cr_hw_env_t *env, cr_node_t *node)
{
    char **names;
    size_t nnames;
    if (cr_list_dir(env->root, NEURON_SYSFS, &names, &nnames) != 0)
        return 0; /* no driver, no devices */
    int numbers[NEURON_MAX_DEVICES];
    size_t n = 0;
    for (size_t i = 0; i < nnames && n < NEURON_MAX_DEVICES; i++) {
        int num = device_number(names[i]);
        if (num >= 0)
            numbers[n++] = num;
    }
    cr_free_strv(names, nnames);
    if (n == 0)
        return 0;
    qsort(numbers, n, sizeof(int), cmp_int);

    char **bdfs;
    size_t nbdf;
    list_neuron_pci(env, &bdfs, &nbdf);
    bool pci_ok = nbdf == n;
    if (nbdf && !pci_ok)
        cr_node_warn(node,
                     "neuron: %zu Neuron devices in %s%s but %zu Neuron PCI functions in "
                     "%s/sys/bus/pci/devices: expected one per device; PCI addresses left out",
                     n, env->root, NEURON_SYSFS, nbdf, env->root);

    ndev_t *devs = cr_calloc(n, sizeof(ndev_t));
    int *ncores = cr_calloc(n, sizeof(int)), typical = 0;
    for (size_t i = 0; i < n; i++) {
        char path[300], buf[64];
        devs[i].number = numbers[i];
        devs[i].node_idx = -1;
        snprintf(path, sizeof(path), NEURON_SYSFS "/neuron%d/core_count", devs[i].number);
        int err = cr_read_file(env->root, path, buf, sizeof(buf));
        if (err == 0)
            err = neuron_parse_core_count(buf, &ncores[i]);
        if (err) {
            cr_node_warn(node,
                         "neuron: %s%s: expected a NeuronCore count from 1 to %d (%s); "
                         "device neuron%d left out",
                         env->root, path, NEURON_MAX_CORES_PER_DEVICE, cr_strerror(err),
                         devs[i].number);
            ncores[i] = -1;
        } else if (!typical) {
            typical = ncores[i];
        }
    }
    int next_core = 0;
    for (size_t i = 0; i < n; i++) {
        ndev_t *nd = &devs[i];
        char path[300], buf[256];
        if (ncores[i] < 0) {
            /* its cores still hold numbers: count it like the others */
            next_core += typical;
            continue;
        }
        add_device(env, node, nd, pci_ok ? bdfs[i] : NULL, ncores[i]);
        cr_device_t *d = &node->devices.v[nd->node_idx];
        int lnc = lnc_for(env, node, d->sku), cores = ncores[i];
        if (cores % lnc == 0)
            cores /= lnc;
        d->cores = cores;
        if (cores == 1)
            snprintf(d->isolation_id, sizeof(d->isolation_id), "%d", next_core);
        else
            snprintf(d->isolation_id, sizeof(d->isolation_id), "%d-%d", next_core,
                     next_core + cores - 1);
        next_core += cores;

        snprintf(path, sizeof(path), NEURON_SYSFS "/neuron%d/connected_devices", nd->number);
        int err = cr_read_file(env->root, path, buf, sizeof(buf));
        if (err == -ENOENT)
            continue; /* an older driver: no link information */
        int nc = err ? err : neuron_parse_connected(buf, nd->conn, NEURON_MAX_DEVICES);
        if (nc < 0) {
            cr_node_warn(node,
                         "neuron: %s%s: expected device ids separated by \", \" such as "
                         "\"12, 3, 4, 1\" (%s); NeuronLinks of neuron%d left out",
                         env->root, path, cr_strerror(nc), nd->number);
            continue;
        }
        nd->nconn = nc;
        nd->conn_ok = true;
    }
    cr_free_strv(bdfs, nbdf);
    free(ncores);

    for (size_t i = 0; i < n; i++) {
        if (devs[i].node_idx < 0 || !devs[i].conn_ok)
            continue;
        for (int c = 0; c < devs[i].nconn; c++) {
            const ndev_t *peer = NULL;
            for (size_t k = 0; k < n; k++)
                if (devs[k].number == devs[i].conn[c])
                    peer = &devs[k];
            if (!peer || peer == &devs[i]) {
                cr_node_warn(node,
                             "neuron: %s%s/neuron%d/connected_devices names device %d, "
                             "which %s: that link left out",
                             env->root, NEURON_SYSFS, devs[i].number, devs[i].conn[c],
                             peer ? "is the device itself" : "does not exist");
                continue;
            }
            if (peer->node_idx < 0 || hw_node_find_link(node, devs[i].node_idx, peer->node_idx))
                continue;
            cr_node_add_link(node, devs[i].node_idx, peer->node_idx, CR_LINK_NEURONLINK, 1, 0);
        }
    }
    add_domains(node, devs, n);
    free(devs);
    return 0;
}

/* Uses only the node description: the cores are the devices' isolation
 * ids. A worker given no device gets an empty list, so that it sees no
 * NeuronCore at all. */
static int isolate(const cr_hw_env_t *env, const cr_node_t *node, const int *devs, size_t ndevs,
                   cr_envlist_t *out)
{
    CR_UNUSED(env);
    CR_VEC(int) cores = {0};
    int err = 0;
    for (size_t i = 0; i < ndevs && !err; i++) {
        int a, b;
        err = neuron_parse_core_range(node->devices.v[devs[i]].isolation_id, &a, &b);
        for (int c = a; !err && c <= b; c++)
            *CR_VEC_PUSH(&cores) = c;
    }
    if (!err) {
        cr_buf_t val = {0};
        neuron_format_cores(cores.v, cores.n, &val);
        err = cr_envlist_set(out, "NEURON_RT_VISIBLE_CORES", val.s);
        cr_buf_free(&val);
    }
    CR_VEC_FREE(&cores);
    return err == CR_EPARSE ? CR_EINVAL : err;
}

const cr_accel_component_t hw_backend_neuron = {
    .abi_version = CR_ACCEL_ABI_VERSION,
    .name = "neuron",
    .resource = "neuron_cores",
    .isolation_vars = vars,
    .priority = 50,
    .probe = probe,
    .isolate = isolate,
};
