/* libFuzzer target: the KFD topology `properties` format and its node and
 * memory-bank views (hw/kfd.c). */
#include "hw/amd_kfd.h"
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[256];
    hw_kfd_props_t p = {0};
    if (hw_kfd_props_parse((const char *)data, size, &p, why, sizeof(why)) == 0) {
        uint64_t v;
        for (size_t i = 0; i < p.n; i++)
            if (!hw_kfd_props_get(&p, p.v[i].key, &v) || strlen(p.v[i].key) >= HW_KFD_KEY_MAX)
                __builtin_trap();
    } else if (!memchr(why, '\0', sizeof(why))) {
        __builtin_trap();
    }
    hw_kfd_props_free(&p);
    hw_kfd_node_t n;
    if (hw_kfd_node_parse((const char *)data, size, &n, why, sizeof(why)) == 0 &&
        n.simd_count > 0 && n.simd_per_cu == 0)
        __builtin_trap(); /* a GPU must be sizable */
    hw_kfd_membank_t b;
    hw_kfd_membank_parse((const char *)data, size, &b, why, sizeof(why));
    return 0;
}
