/* neuron_parse_core_range (a device's isolation id) and
 * neuron_format_cores (NEURON_RT_VISIBLE_CORES): never crash; a range
 * formats to itself. */
#include "hw/neuron_sysfs.h"
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 64)
        return 0;
    char s[65];
    memcpy(s, data, size);
    s[size] = '\0';
    int a, b;
    if (neuron_parse_core_range(s, &a, &b) != 0)
        return 0;
    if (a < 0 || b < a || b - a > 4096)
        abort();
    int *cores = cr_malloc((size_t)(b - a + 1) * sizeof(int));
    for (int c = b; c >= a; c--)
        cores[b - c] = c;
    cr_buf_t out = {0};
    neuron_format_cores(cores, (size_t)(b - a + 1), &out);
    char want[48];
    if (a == b)
        snprintf(want, sizeof(want), "%d", a);
    else
        snprintf(want, sizeof(want), "%d-%d", a, b);
    if (strcmp(out.s, want) != 0)
        abort();
    int x, y;
    if (neuron_parse_core_range(out.s, &x, &y) != 0 || x != a || y != b)
        abort();
    cr_buf_free(&out);
    free(cores);
    return 0;
}
