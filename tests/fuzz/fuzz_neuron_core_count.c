/* neuron_parse_core_count (sysfs core_count): never crashes; accepts only
 * counts in range. */
#include "hw/neuron_sysfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 64)
        return 0;
    char s[65];
    memcpy(s, data, size);
    s[size] = '\0';
    int v = -1;
    if (neuron_parse_core_count(s, &v) == 0 && (v < 1 || v > NEURON_MAX_CORES_PER_DEVICE))
        abort();
    return 0;
}
