/* Fuzz the TPU topology parser: never crash; a parsed topology has 2 or 3
 * dimensions whose product is its chip count. */
#include "sched/sched.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = cr_strndup((const char *)data, size);
    sched_tpu_topo_t t;
    sched_err_t err;
    if (sched_parse_tpu_topology(s, &t, &err) == 0) {
        int chips = 1;
        for (int i = 0; i < t.ndims; i++)
            chips *= t.dims[i];
        assert(t.ndims >= 2 && t.ndims <= 3 && chips == t.chips && chips <= 65536);
    } else {
        assert(err.pos >= 0 && (size_t)err.pos <= strlen(s));
    }
    free(s);
    return 0;
}
