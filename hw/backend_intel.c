/* Intel GPUs (Data Center GPU Max and Flex, Arc) through DRM sysfs:
 * /sys/class/drm/card<n>/device is the PCI function, vendor 0x8086 with a
 * display class (0x03). Level Zero numbers the GPUs it sees; with
 * ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 it numbers them in PCI address order.
 *
 * The device hierarchy follows Intel's recommendation: FLAT, Level Zero's
 * default, in which each stack (tile) of a card is a root device, so a
 * Max 1550 (two stacks) is two devices (Intel oneAPI GPU Optimization
 * Guide, "Exposing the Device Hierarchy": "The FLAT mode is the default
 * mode ... The recommendation is to use FLAT mode"). CORRAL_INTEL_HIERARCHY=
 * COMPOSITE makes one card one device instead. A device's isolation id is
 * its Level Zero index in that hierarchy (stacks of the cards before it
 * counted), and workers get ZE_AFFINITY_MASK with ZE_FLAT_DEVICE_HIERARCHY
 * set to the hierarchy the ids are in.
 *
 * Integrated graphics is counted in that order (Level Zero sees it too) but
 * not listed: Intel's IGD is always bus 0, device 2, function 0, and it
 * shares host memory rather than being an accelerator to schedule. */
#include "hw.h"
#include "pci_attr.h"
#include <stdio.h>

#define INTEL_PCI_VENDOR 0x8086
#define PCI_BASE_CLASS_DISPLAY 0x03
#define INTEL_IGD_ADDRESS "0000:00:02.0"
#define WHY_SIZE 320

static const char *const vars[] = {"ZE_AFFINITY_MASK", "ZE_ENABLE_PCI_ID_DEVICE_ORDER",
                                   "ZE_FLAT_DEVICE_HIERARCHY", NULL};

/* What sysfs does not say: the product name, Xe-core and stack count per
 * PCI id (Max 1550: two stacks of 64 Xe cores; Max 1100: one of 56). */
static const struct model_row {
    uint16_t device;
    const char *product;
    int xe_cores, stacks;
} models[] = {
    {0x0bd5, "Intel Data Center GPU Max 1550", 128, 2},
    {0x0bda, "Intel Data Center GPU Max 1100", 56, 1},
    {0x56c0, "Intel Data Center GPU Flex 170", 32, 1},
    {0x56a0, "Intel Arc A770 Graphics", 32, 1},
};

static const struct model_row *model_of(uint16_t device)
{
    for (size_t k = 0; k < CR_ARRAY_SIZE(models); k++)
        if (models[k].device == device)
            return &models[k];
    return NULL;
}

/* FLAT (the default) or COMPOSITE, from CORRAL_INTEL_HIERARCHY. */
static bool flat_wanted(const cr_hw_env_t *env, cr_node_t *node)
{
    const char *h = cr_hw_getenv(env, "CORRAL_INTEL_HIERARCHY");
    if (!h || !*h || strcmp(h, "FLAT") == 0)
        return true;
    if (strcmp(h, "COMPOSITE") == 0)
        return false;
    if (node)
        cr_node_warn(node, "CORRAL_INTEL_HIERARCHY=%s: expected FLAT or COMPOSITE; using FLAT", h);
    return true;
}

typedef struct card {
    char name[32]; /* "card1" */
    char pci[20];
    hw_pci_attr_t attr;
    char why[WHY_SIZE]; /* set when the card is off */
} card_t;

typedef CR_VEC(card_t) card_vec_t;

static bool is_card(const char *name)
{
    if (strncmp(name, "card", 4) != 0 || !name[4])
        return false;
    for (const char *p = name + 4; *p; p++)
        if (*p < '0' || *p > '9')
            return false; /* connectors: card0-DP-1 */
    return true;
}

static int cmp_card(const void *a, const void *b)
{
    return strcmp(((const card_t *)a)->pci, ((const card_t *)b)->pci);
}

/* Local memory: the i915 backport's card<n>/lmem_total_bytes, else the xe
 * driver's tile<k>/physical_vram_size_bytes summed over tiles; mainline
 * i915 publishes neither (memory stays 0, unknown). */
static int read_memory(const char *root, const card_t *c, uint64_t *out, char *why)
{
    char path[256];
    *out = 0;
    snprintf(path, sizeof(path), "/sys/class/drm/%s/lmem_total_bytes", c->name);
    int err = cr_read_u64(root, path, 10, out);
    if (err != -ENOENT) {
        if (err)
            snprintf(why, WHY_SIZE, "%s: %s; expected a size in bytes", path, cr_strerror(err));
        return err;
    }
    char dir[128], **names;
    size_t n;
    snprintf(dir, sizeof(dir), "/sys/bus/pci/devices/%s", c->pci);
    if (cr_list_dir(root, dir, &names, &n) != 0)
        return 0;
    err = 0;
    for (size_t i = 0; i < n && !err; i++) {
        uint64_t v;
        if (strncmp(names[i], "tile", 4) != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s/physical_vram_size_bytes", dir, names[i]);
        err = cr_read_u64(root, path, 10, &v);
        if (err == -ENOENT) {
            err = 0;
            continue;
        }
        if (err)
            snprintf(why, WHY_SIZE, "%s: %s; expected a size in bytes", path, cr_strerror(err));
        else
            *out += v;
    }
    cr_free_strv(names, n);
    return err;
}

static void collect(const char *root, card_vec_t *cards)
{
    char **names;
    size_t n;
    if (cr_list_dir(root, "/sys/class/drm", &names, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        char link[160], pci[32];
        if (!is_card(names[i]))
            continue;
        snprintf(link, sizeof(link), "/sys/class/drm/%s/device", names[i]);
        if (cr_readlink_base(root, link, pci, sizeof(pci)) != 0 || !hw_pci_addr_valid(pci))
            continue; /* not a PCI device (virtual display, USB) */
        card_t c = {0};
        cr_strlcpy(c.name, names[i], sizeof(c.name));
        cr_strlcpy(c.pci, pci, sizeof(c.pci));
        /* vendor decides whether the card is ours at all: a card whose
         * vendor cannot be read is nobody's to warn about */
        char vpath[96];
        uint64_t vendor;
        snprintf(vpath, sizeof(vpath), "/sys/bus/pci/devices/%s/vendor", pci);
        if (cr_read_u64(root, vpath, 16, &vendor) != 0 || vendor != INTEL_PCI_VENDOR)
            continue;
        if (hw_pci_attr_read(root, pci, &c.attr, c.why, sizeof(c.why)) == 0 &&
            (c.attr.class_code >> 16) != PCI_BASE_CLASS_DISPLAY)
            continue;
        *CR_VEC_PUSH(cards) = c;
    }
    cr_free_strv(names, n);
}

static int probe(const cr_hw_env_t *env, cr_node_t *node)
{
    card_vec_t cards = {0};
    collect(env->root, &cards);
    if (cards.n)
        qsort(cards.v, cards.n, sizeof(card_t), cmp_card);
    bool flat = flat_wanted(env, node);
    int ze_index = 0; /* Level Zero's index of the card's first device */
    for (size_t i = 0; i < cards.n; i++) {
        card_t *c = &cards.v[i];
        uint64_t memory = 0;
        const struct model_row *m = c->why[0] ? NULL : model_of(c->attr.device);
        int stacks = flat && m ? m->stacks : 1;
        int first = ze_index;
        ze_index += stacks;
        if (!c->why[0] && strcmp(c->pci, INTEL_IGD_ADDRESS) == 0)
            continue;
        if (c->why[0] || read_memory(env->root, c, &memory, c->why) != 0) {
            cr_node_warn(node, "intel: %s; %s (GPU %d) is off", c->why, c->name, first);
            continue;
        }
        const char *sku = cr_accel_sku_by_pci(c->attr.vendor, c->attr.device);
        char path[128], drv[32] = "", ver[32] = "";
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver", c->pci);
        if (cr_readlink_base(env->root, path, drv, sizeof(drv)) == 0) {
            snprintf(path, sizeof(path), "/sys/module/%s/version", drv);
            if (cr_read_file(env->root, path, ver, sizeof(ver)) != 0)
                ver[0] = '\0';
        }
        for (int k = 0; k < stacks; k++) {
            cr_device_t *d = cr_node_add_device(node);
            cr_strlcpy(d->backend, "intel", sizeof(d->backend));
            cr_strlcpy(d->vendor, "Intel", sizeof(d->vendor));
            cr_strlcpy(d->resource, "GPU", sizeof(d->resource));
            cr_strlcpy(d->sku, sku ? sku : "", sizeof(d->sku));
            if (m && stacks > 1)
                snprintf(d->product, sizeof(d->product), "%s (stack %d)", m->product, k);
            else if (m)
                cr_strlcpy(d->product, m->product, sizeof(d->product));
            else
                snprintf(d->product, sizeof(d->product), "Intel GPU 8086:%04x", c->attr.device);
            cr_strlcpy(d->pci, c->pci, sizeof(d->pci));
            d->pci_vendor = c->attr.vendor;
            d->pci_device = c->attr.device;
            d->numa = c->attr.numa;
            /* each stack has its own memory (the guide's "Memory in FLAT Mode") */
            d->memory = memory / (uint64_t)stacks;
            d->compute_units = m ? m->xe_cores / stacks : 0;
            d->partition = stacks > 1 ? k : -1;
            snprintf(d->isolation_id, sizeof(d->isolation_id), "%d", first + k);
            d->vendor_index = first + k;
            cr_strlcpy(d->driver, ver, sizeof(d->driver));
            d->health = CR_HEALTH_OK;
        }
    }
    CR_VEC_FREE(&cards);
    return 0;
}

/* The ids are in the hierarchy discovery used: FLAT when a card was split
 * into stacks, else the one asked for (with one stack per card, the two
 * number devices alike). */
static int isolate(const cr_hw_env_t *env, const cr_node_t *node, const int *devs, size_t ndevs,
                   cr_envlist_t *out)
{
    bool flat = flat_wanted(env, NULL);
    for (size_t i = 0; i < node->devices.n; i++)
        if (strcmp(node->devices.v[i].backend, "intel") == 0 && node->devices.v[i].partition >= 0)
            flat = true;
    int err = cr_isolate_ids(out, "ZE_AFFINITY_MASK", node, devs, ndevs);
    if (!err)
        err = cr_envlist_set(out, "ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1");
    if (!err)
        err = cr_envlist_set(out, "ZE_FLAT_DEVICE_HIERARCHY", flat ? "FLAT" : "COMPOSITE");
    return err;
}

const cr_accel_component_t hw_backend_intel = {
    .abi_version = CR_ACCEL_ABI_VERSION,
    .name = "intel",
    .resource = "GPU",
    .isolation_vars = vars,
    .priority = 50,
    .probe = probe,
    .isolate = isolate,
};
