/* neuron_parse_connected (sysfs connected_devices): never crashes, never
 * writes past max; accepted ids are in range and distinct. */
#include "hw/neuron_sysfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 512)
        return 0;
    char s[513];
    memcpy(s, data, size);
    s[size] = '\0';
    int ids[8];
    int n = neuron_parse_connected(s, ids, 8);
    if (n < 0)
        return 0;
    if (n > 8)
        abort();
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= NEURON_MAX_DEVICES)
            abort();
        for (int k = 0; k < i; k++)
            if (ids[k] == ids[i])
                abort();
    }
    return 0;
}
