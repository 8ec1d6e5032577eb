/* libFuzzer target: the habanalabs attribute parsers (hw/gaudi_sysfs.c)
 * and the PCI address check (hw/pci_attr.c), each fed the input as a
 * file's trimmed contents. */
#include "hw/gaudi_sysfs.h"
#include "hw/pci_attr.h"
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *s = cr_strndup((const char *)data, size);
    cr_strtrim(s);
    char why[160];
    int id = -1;
    if (hw_gaudi_parse_module_id(s, &id, why, sizeof(why)) == 0 &&
        (id < 0 || id > HW_GAUDI_MODULE_MAX))
        __builtin_trap();
    const hw_gaudi_type_t *t;
    if (hw_gaudi_parse_device_type(s, &t, why, sizeof(why)) == 0 &&
        (!t || strcmp(t->device_type, s) != 0 || !hw_gaudi_fabric_find(s, 8)))
        __builtin_trap();
    cr_health_t h;
    if (hw_gaudi_parse_status(s, &h, why, sizeof(why)) != 0 && h != CR_HEALTH_UNKNOWN)
        __builtin_trap();
    if (hw_pci_addr_valid(s) && strlen(s) != 12)
        __builtin_trap();
    free(s);
    return 0;
}
