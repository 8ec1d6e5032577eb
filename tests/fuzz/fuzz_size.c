/* Fuzz the size parser of specs ("80Gi", "512 MiB", "1.5T") and the strict
 * integer parsers used on sysfs values. */
#include "hw/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = cr_strndup((const char *)data, size);
    uint64_t u;
    int64_t i;
    hw_parse_size(s, &u);
    cr_parse_u64(s, 0, &u);
    cr_parse_u64(s, 16, &u);
    cr_parse_i64(s, 10, &i);
    free(s);
    return 0;
}
