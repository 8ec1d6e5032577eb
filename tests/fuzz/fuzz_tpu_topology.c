/* tpu_topology_parse: never crashes; what it accepts formats back to the
 * same string, and its geometry holds for every generation. */
#include "hw/tpu.h"
#include "base/base.h"
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 64)
        return 0;
    char s[65];
    memcpy(s, data, size);
    s[size] = '\0';
    tpu_topology_t t;
    if (tpu_topology_parse(s, &t) != 0)
        return 0;
    char back[32];
    tpu_topology_format(&t, back, sizeof(back));
    if (strcmp(back, s) != 0)
        abort();
    size_t n;
    const tpu_gen_t *gens = tpu_gens(&n);
    for (size_t i = 0; i < n; i++) {
        bool valid = tpu_topology_is_valid(&gens[i], &t);
        int workers = tpu_worker_count(&gens[i], &t, 0);
        if (!valid || workers <= 0)
            continue;
        tpu_topology_t h;
        if (tpu_host_bounds(&gens[i], &t, 0, &h) != 0)
            abort();
        int per = tpu_topology_chips(&h);
        for (int c = 0; c < per; c++) {
            int co[TPU_MAX_DIMS];
            if (tpu_chip_coords(&gens[i], &t, 0, workers - 1, c, co) != 0)
                abort();
            for (int d = 0; d < TPU_MAX_DIMS; d++)
                if (co[d] < 0 || co[d] >= t.dims[d])
                    abort();
        }
    }
    return 0;
}
