/* Intel Gaudi through the habanalabs driver's sysfs class: the accel class
 * (/sys/class/accel/accel<n>/device/, shared with other accel drivers, so
 * only PCI vendor 0x1da3 counts) or, on older drivers, /sys/class/habanalabs.
 * A module id is the device's slot on the board; HABANA_VISIBLE_MODULES
 * names devices by it, so devices are listed in module order. The
 * all-to-all RoCE fabric of an HLS box is a fact from a table keyed on
 * device type and module count (hw/gaudi_sysfs.c). */
#include "gaudi_sysfs.h"
#include "hw.h"
#include "pci_attr.h"
#include <stdio.h>

#define HABANA_PCI_VENDOR 0x1da3
#define WHY_SIZE 320

static const char *const vars[] = {"HABANA_VISIBLE_MODULES", NULL};

static const struct class_row {
    const char *dir, *prefix;
} classes[] = {
    {"/sys/class/accel", "accel"},
    {"/sys/class/habanalabs", "hl"},
};

/* snprintf for messages, where cutting a long path short is fine */
static void say(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, size, fmt, ap);
    va_end(ap);
}

typedef struct module {
    char pci[20];
    int id;
    const hw_gaudi_type_t *type;
    hw_pci_attr_t attr;
    cr_health_t health;
    char reason[96];
} module_t;

typedef CR_VEC(module_t) module_vec_t;

static bool is_class_entry(const char *name, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0 || !name[n])
        return false;
    for (const char *p = name + n; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* Reads one attribute; on failure why is the whole warning. */
static int read_attr(const char *root, const char *dev, const char *attr, char *buf, size_t size,
                     const char *expected, char *why)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dev, attr);
    int err = cr_read_file(root, path, buf, size);
    if (err)
        say(why, WHY_SIZE, "%s: %s; expected %s", path, cr_strerror(err), expected);
    return err;
}

/* Fills m from the attributes under dev; on failure why is the warning. */
static int read_module(const char *root, const char *dev, module_t *m, char *why)
{
    char buf[64], inner[160], path[256];
    memset(m, 0, sizeof(*m));
    int err = read_attr(root, dev, "device_type", buf, sizeof(buf), "a Gaudi device type", why);
    if (!err && (err = hw_gaudi_parse_device_type(buf, &m->type, inner, sizeof(inner))))
        say(why, WHY_SIZE, "%s/device_type: '%s' is unknown; %s", dev, buf, inner);
    if (!err)
        err = read_attr(root, dev, "module_id", buf, sizeof(buf), "a module id", why);
    if (!err && (err = hw_gaudi_parse_module_id(buf, &m->id, inner, sizeof(inner))))
        say(why, WHY_SIZE, "%s/module_id: '%s': %s", dev, buf, inner);
    if (!err)
        err = read_attr(root, dev, "pci_addr", m->pci, sizeof(m->pci), "a PCI address", why);
    if (!err && !hw_pci_addr_valid(m->pci)) {
        say(why, WHY_SIZE, "%s/pci_addr: '%s'; expected a PCI address like 0000:19:00.0", dev,
            m->pci);
        err = CR_EPARSE;
    }
    if (!err)
        err = hw_pci_attr_read(root, m->pci, &m->attr, why, WHY_SIZE);
    if (err)
        return err;
    /* status only grades health: the device stays listed whatever it says */
    snprintf(path, sizeof(path), "%s/status", dev);
    if (cr_read_file(root, path, buf, sizeof(buf)) != 0) {
        m->health = CR_HEALTH_UNKNOWN;
        cr_strlcpy(m->reason, "status is unreadable", sizeof(m->reason));
    } else if (hw_gaudi_parse_status(buf, &m->health, inner, sizeof(inner)) != 0) {
        say(m->reason, sizeof(m->reason), "status '%s' is not one corral knows", buf);
        say(why, WHY_SIZE, "%s: '%s'; %s; health unknown", path, buf, inner);
        return 1; /* kept, with a warning */
    } else if (m->health != CR_HEALTH_OK) {
        say(m->reason, sizeof(m->reason), "status: %s", buf);
    }
    return 0;
}

static int cmp_module(const void *a, const void *b)
{
    return ((const module_t *)a)->id - ((const module_t *)b)->id;
}

/* Collects every habanalabs device once; returns how many functions the
 * driver has (usable or not), which decides the box's fabric. */
static size_t collect(const cr_hw_env_t *env, cr_node_t *node, module_vec_t *mods)
{
    CR_VEC(char *) seen = {0};
    char why[WHY_SIZE], dev[192], buf[32];
    for (size_t c = 0; c < CR_ARRAY_SIZE(classes); c++) {
        char **names;
        size_t n;
        if (cr_list_dir(env->root, classes[c].dir, &names, &n) != 0)
            continue;
        for (size_t i = 0; i < n; i++) {
            if (!is_class_entry(names[i], classes[c].prefix))
                continue;
            snprintf(dev, sizeof(dev), "%s/%s/device", classes[c].dir, names[i]);
            uint64_t vendor;
            char vpath[224];
            snprintf(vpath, sizeof(vpath), "%s/vendor", dev);
            if (cr_read_u64(env->root, vpath, 16, &vendor) != 0 || vendor != HABANA_PCI_VENDOR)
                continue; /* another accel driver's device */
            /* the same device under both classes counts once */
            if (cr_readlink_base(env->root, dev, buf, sizeof(buf)) != 0)
                snprintf(buf, sizeof(buf), "%s", names[i]);
            bool dup = false;
            for (size_t k = 0; k < seen.n; k++)
                dup |= strcmp(seen.v[k], buf) == 0;
            if (dup)
                continue;
            *CR_VEC_PUSH(&seen) = cr_strdup(buf);
            module_t m;
            int err = read_module(env->root, dev, &m, why);
            for (size_t k = 0; err >= 0 && k < mods->n; k++)
                if (mods->v[k].id == m.id) {
                    say(why, WHY_SIZE,
                        "%s/module_id: module %d is also %s's; expected "
                        "one device per module id",
                        dev, m.id, mods->v[k].pci);
                    err = CR_EEXIST;
                }
            if (err < 0) {
                cr_node_warn(node, "gaudi: %s; %s is off", why, names[i]);
                continue;
            }
            if (err > 0)
                cr_node_warn(node, "gaudi: %s", why);
            *CR_VEC_PUSH(mods) = m;
        }
        cr_free_strv(names, n);
    }
    size_t functions = seen.n;
    for (size_t k = 0; k < seen.n; k++)
        free(seen.v[k]);
    CR_VEC_FREE(&seen);
    return functions;
}

static void add_fabric(cr_node_t *node, const module_vec_t *mods, size_t functions)
{
    if (!mods->n)
        return;
    for (size_t i = 1; i < mods->n; i++)
        if (mods->v[i].type != mods->v[0].type)
            return; /* a mixed box is no HLS box we know */
    const hw_gaudi_fabric_t *f = hw_gaudi_fabric_find(mods->v[0].type->device_type, functions);
    if (!f)
        return;
    for (size_t a = 0; a < mods->n; a++)
        for (size_t b = a + 1; b < mods->n; b++)
            cr_node_add_link(node, (int)a, (int)b, CR_LINK_ROCE, f->ports_per_pair,
                             f->ports_per_pair * f->gbps_per_port);
}

/* The module sets one process may use together (Intel Gaudi docs,
 * "Multiple Workloads on a Single Docker": only 2-Gaudi sets 0,1 2,3 4,5
 * 6,7 and 4-Gaudi sets 0,1,2,3 4,5,6,7 are supported, besides the whole
 * box of eight), by module id. A set is offered when all its modules are
 * on the node. */
static const struct module_set {
    const char *name;
    int first, count;
} module_sets[] = {
    {"modules 0-1", 0, 2}, {"modules 2-3", 2, 2}, {"modules 4-5", 4, 2}, {"modules 6-7", 6, 2},
    {"modules 0-3", 0, 4}, {"modules 4-7", 4, 4}, {"modules 0-7", 0, 8},
};

static void add_module_sets(cr_node_t *node, size_t first_dev, const module_vec_t *mods)
{
    for (size_t s = 0; s < CR_ARRAY_SIZE(module_sets); s++) {
        const struct module_set *ms = &module_sets[s];
        int at[8];
        int found = 0;
        for (int id = ms->first; id < ms->first + ms->count; id++)
            for (size_t i = 0; i < mods->n; i++)
                if (mods->v[i].id == id)
                    at[found++] = (int)(first_dev + i);
        if (found != ms->count)
            continue;
        cr_domain_t *d = cr_node_add_domain(node, "module-set", ms->name);
        for (int k = 0; k < found; k++)
            cr_domain_add_member(d, at[k]);
    }
}

static int probe(const cr_hw_env_t *env, cr_node_t *node)
{
    size_t first_dev = node->devices.n;
    module_vec_t mods = {0};
    size_t functions = collect(env, node, &mods);
    if (mods.n)
        qsort(mods.v, mods.n, sizeof(module_t), cmp_module);
    char driver[32] = "";
    if (cr_read_file(env->root, "/sys/module/habanalabs/version", driver, sizeof(driver)) != 0)
        driver[0] = '\0';
    for (size_t i = 0; i < mods.n; i++) {
        const module_t *m = &mods.v[i];
        const char *sku = cr_accel_sku_by_pci(m->attr.vendor, m->attr.device);
        cr_device_t *d = cr_node_add_device(node);
        cr_strlcpy(d->backend, "gaudi", sizeof(d->backend));
        cr_strlcpy(d->vendor, "Intel", sizeof(d->vendor));
        cr_strlcpy(d->resource, "HPU", sizeof(d->resource));
        cr_strlcpy(d->sku, sku ? sku : "", sizeof(d->sku));
        cr_strlcpy(d->product, m->type->product, sizeof(d->product));
        cr_strlcpy(d->pci, m->pci, sizeof(d->pci));
        d->pci_vendor = m->attr.vendor;
        d->pci_device = m->attr.device;
        d->numa = m->attr.numa;
        d->memory = m->type->memory;
        d->compute_units = m->type->tpcs;
        snprintf(d->isolation_id, sizeof(d->isolation_id), "%d", m->id);
        d->vendor_index = m->id;
        cr_strlcpy(d->driver, driver, sizeof(d->driver));
        d->health = m->health;
        cr_strlcpy(d->health_reason, m->reason, sizeof(d->health_reason));
    }
    add_fabric(node, &mods, functions);
    add_module_sets(node, first_dev, &mods);
    CR_VEC_FREE(&mods);
    return 0;
}

static int isolate(const cr_hw_env_t *env, const cr_node_t *node, const int *devs, size_t ndevs,
                   cr_envlist_t *out)
{
    return cr_isolate_ids(out, "HABANA_VISIBLE_MODULES", node, devs, ndevs);
}

/* Health as the driver sees it now; the rest is not in sysfs. */
static int telemetry(const cr_hw_env_t *env, const cr_node_t *node, int dev, cr_telemetry_t *out)
{
    if (dev < 0 || (size_t)dev >= node->devices.n || !node->devices.v[dev].pci[0])
        return CR_ENODEV;
    char path[96], buf[64], why[128];
    out->utilization_pct = out->power_w = out->temperature_c = -1;
    out->memory_used = 0;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/status", node->devices.v[dev].pci);
    if (cr_read_file(env->root, path, buf, sizeof(buf)) != 0 ||
        hw_gaudi_parse_status(buf, &out->health, why, sizeof(why)) != 0)
        out->health = CR_HEALTH_UNKNOWN;
    return 0;
}

const cr_accel_component_t hw_backend_gaudi = {
    .abi_version = CR_ACCEL_ABI_VERSION,
    .name = "gaudi",
    .resource = "HPU",
    .isolation_vars = vars,
    .priority = 50,
    .probe = probe,
    .isolate = isolate,
    .telemetry = telemetry,
};
