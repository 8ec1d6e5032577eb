/* tpu_pod_type_parse: never crashes; an accepted pod type formats back to
 * its canonical spelling, which parses to the same chip count. */
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
    tpu_pod_type_t p;
    if (tpu_pod_type_parse(s, &p) != 0)
        return 0;
    if (!p.gen || p.chips <= 0 || p.chips > p.count)
        abort();
    char back[48];
    tpu_pod_type_format(p.gen, p.chips, back, sizeof(back));
    tpu_pod_type_t q;
    if (tpu_pod_type_parse(back, &q) != 0 || q.gen != p.gen || q.chips != p.chips)
        abort();
    tpu_topology_t t;
    if (tpu_topology_for_chips(p.gen, p.chips, &t) == 0 &&
        (tpu_topology_chips(&t) != p.chips || !tpu_topology_is_valid(p.gen, &t)))
        abort();
    return 0;
}
