/* PLACEHOLDER: topology queries are being written. */
#include "hw.h"

cr_link_kind_t hw_topo_pair(const cr_node_t *node, int a, int b, int *count)
{
    const cr_link_t *l = hw_node_find_link(node, a, b);
    if (count)
        *count = l ? l->count : 0;
    return l ? l->kind : CR_LINK_CPU;
}
