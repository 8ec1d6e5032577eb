/* The sim backend: a node described by a hardware spec file instead of
 * discovered. Its devices keep the backend they would have on real
 * hardware ("nvidia", "tpu", ...), so isolation runs that backend's code
 * and a worker sees the same variables it would on that machine. Devices
 * a spec gives no backend (generic custom accelerators) belong to "sim"
 * and are isolated here with CORRAL_VISIBLE_DEVICES. */
#include "hw.h"
#include <stdio.h>

/* "sim" has no variable of its own for `corral hw --check` to look for:
 * CORRAL_VISIBLE_DEVICES is corral's, and corral itself may run under it. */
static const char *const vars[] = {NULL};

static int probe(const cr_hw_env_t *env, cr_node_t *node)
{
    if (!env->spec_path) {
        cr_node_warn(node, "the sim backend needs a hardware spec file (corral hw --spec FILE)");
        return CR_EINVAL;
    }
    char *msg = NULL;
    int err = hw_spec_load(env->spec_path, node, &msg);
    if (err) {
        /* hw_discover shows the last warning as the reason: the whole
         * message, not cut to cr_node_warn's line length */
        *CR_VEC_PUSH(&node->warnings) =
            msg ? msg : cr_asprintf("%s: %s", env->spec_path, cr_strerror(err));
        return err;
    }
    /* a spec may leave out what the backend would say itself */
    for (size_t i = 0; i < node->devices.n; i++) {
        cr_device_t *d = &node->devices.v[i];
        if (!d->backend[0])
            cr_strlcpy(d->backend, "sim", sizeof(d->backend));
        const cr_accel_component_t *c = hw_component_find(d->backend);
        if (!d->resource[0] && c && c != &hw_backend_sim)
            cr_strlcpy(d->resource, c->resource, sizeof(d->resource));
    }
    node->simulated = true;
    cr_node_set_label(node, "corral.io/simulated", "true");
    return 0;
}

static int isolate(const cr_hw_env_t *env, const cr_node_t *node, const int *devs, size_t ndevs,
                   cr_envlist_t *out)
{
    CR_UNUSED(env);
    return cr_isolate_ids(out, "CORRAL_VISIBLE_DEVICES", node, devs, ndevs);
}

const cr_accel_component_t hw_backend_sim = {
    .abi_version = CR_ACCEL_ABI_VERSION,
    .name = "sim",
    .resource = "sim",
    .isolation_vars = vars,
    .priority = 0, /* last: it only runs for a spec, never in discovery */
    .probe = probe,
    .isolate = isolate,
};
