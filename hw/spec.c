/* PLACEHOLDER: the YAML/JSON spec loader is being written. */
#include "hw.h"

int hw_spec_load_buffer(const char *name, const char *data, size_t len, cr_node_t *node,
                        char **errmsg)
{
    CR_UNUSED(data);
    CR_UNUSED(len);
    CR_UNUSED(node);
    *errmsg = cr_asprintf("%s: spec loading not built yet", name);
    return CR_ENOSYS;
}

int hw_spec_load(const char *path, cr_node_t *node, char **errmsg)
{
    return hw_spec_load_buffer(path, "", 0, node, errmsg);
}
