/* PLACEHOLDER: the sim backend is being written; this stands in so the tree builds. */
#include "hw.h"

static const char *const vars[] = {NULL};

static int probe(const cr_hw_env_t *env, cr_node_t *node)
{
    CR_UNUSED(env);
    CR_UNUSED(node);
    return 0;
}

static int isolate(const cr_hw_env_t *env, const cr_node_t *node, const int *devs, size_t ndevs,
                   cr_envlist_t *out)
{
    CR_UNUSED(env);
    CR_UNUSED(node);
    CR_UNUSED(devs);
    CR_UNUSED(ndevs);
    CR_UNUSED(out);
    return CR_ENOSYS;
}

const cr_accel_component_t hw_backend_sim = {
    .abi_version = CR_ACCEL_ABI_VERSION,
    .name = "sim",
    .resource = "sim",
    .isolation_vars = vars,
    .priority = 50,
    .probe = probe,
    .isolate = isolate,
};
