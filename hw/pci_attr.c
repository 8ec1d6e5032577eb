/* PCI attribute files under a root prefix. */
#include "pci_attr.h"
#include <stdio.h>

bool hw_pci_addr_valid(const char *s)
{
    /* dddd:bb:dd.f */
    static const char shape[] = "xxxx:xx:xx.x";
    if (strlen(s) != sizeof(shape) - 1)
        return false;
    for (size_t i = 0; shape[i]; i++) {
        if (shape[i] != 'x') {
            if (s[i] != shape[i])
                return false;
        } else if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
            return false;
        }
    }
    /* device 0x00-0x1f, function 0-7 */
    return s[8] <= '1' && s[11] <= '7';
}

static const struct attr_row {
    const char *file;
    uint64_t max;
    const char *expected;
} attr_rows[] = {
    {"vendor", 0xffff, "a 16-bit hex PCI vendor id such as 0x1002"},
    {"device", 0xffff, "a 16-bit hex PCI device id such as 0x74a1"},
    {"class", 0xffffff, "a 24-bit hex PCI class such as 0x120000"},
};

int hw_pci_attr_read(const char *root, const char *addr, hw_pci_attr_t *out, char *why,
                     size_t whysize)
{
    uint64_t v[CR_ARRAY_SIZE(attr_rows)];
    char path[256];
    memset(out, 0, sizeof(*out));
    out->numa = -1;
    for (size_t i = 0; i < CR_ARRAY_SIZE(attr_rows); i++) {
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/%s", addr, attr_rows[i].file);
        int err = cr_read_u64(root, path, 16, &v[i]);
        if (!err && v[i] > attr_rows[i].max)
            err = CR_ERANGE;
        if (err) {
            snprintf(why, whysize, "%s: %s; expected %s", path, cr_strerror(err),
                     attr_rows[i].expected);
            return err;
        }
    }
    out->vendor = (uint16_t)v[0];
    out->device = (uint16_t)v[1];
    out->class_code = (uint32_t)v[2];
    /* numa_node is absent on single-node kernels and -1 when unknown */
    int64_t numa;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", addr);
    int err = cr_read_i64(root, path, 10, &numa);
    if (err == -ENOENT)
        return 0;
    if (!err && (numa < -1 || numa > 4095))
        err = CR_ERANGE;
    if (err) {
        snprintf(why, whysize, "%s: %s; expected a NUMA node number or -1", path, cr_strerror(err));
        return err;
    }
    out->numa = (int)numa;
    return 0;
}
