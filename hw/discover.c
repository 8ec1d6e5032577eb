/* Discovery: run every backend (or the sim backend for a spec), add the
 * host topology, then derive the labels, resources and warnings every node
 * carries. Backend failures turn that backend off with a warning; the node
 * is still described. */
#include "hw.h"
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *default_getenv(void *ctx, const char *name)
{
    CR_UNUSED(ctx);
    return getenv(name);
}

void hw_env_from_opts(const hw_options_t *o, cr_hw_env_t *env)
{
    env->getenv = o->getenv ? o->getenv : default_getenv;
    env->getenv_ctx = o->getenv_ctx;
    env->root = o->root;
    if (!env->root || !*env->root)
        env->root = env->getenv(env->getenv_ctx, "CORRAL_SYSFS_ROOT");
    if (!env->root || !*env->root)
        env->root = "/";
    env->spec_path = o->spec_path;
}

static bool is_real_root(const char *root)
{
    return strcmp(root, "/") == 0;
}

static void set_identity(const cr_hw_env_t *env, cr_node_t *node)
{
    if (!node->hostname[0]) {
        char buf[128];
        if (!is_real_root(env->root)) {
            if (cr_read_file(env->root, "/etc/hostname", buf, sizeof(buf)) == 0 && buf[0])
                cr_strlcpy(node->hostname, buf, sizeof(node->hostname));
        } else if (gethostname(buf, sizeof(buf)) == 0) {
            buf[sizeof(buf) - 1] = '\0';
            cr_strlcpy(node->hostname, buf, sizeof(node->hostname));
        }
        if (!node->hostname[0])
            cr_strlcpy(node->hostname, "localhost", sizeof(node->hostname));
    }
    const char *id = env->getenv(env->getenv_ctx, "CORRAL_NODE_ID");
    if (id && *id)
        cr_strlcpy(node->id, id, sizeof(node->id));
    if (!node->id[0])
        cr_strlcpy(node->id, node->hostname, sizeof(node->id));
}

/* The accelerator type of the node: the SKU most of its schedulable
 * devices have (ties: the first seen). */
static const char *main_sku(const cr_node_t *node)
{
    const char *best = NULL;
    size_t bestn = 0;
    for (size_t i = 0; i < node->devices.n; i++) {
        const char *s = node->devices.v[i].sku;
        if (!*s)
            continue;
        size_t n = 0;
        for (size_t k = 0; k < node->devices.n; k++)
            n += strcmp(node->devices.v[k].sku, s) == 0;
        if (n > bestn) {
            best = s;
            bestn = n;
        }
    }
    return best;
}

/* A physical GPU in MIG mode is not schedulable itself: its instances are. */
static bool is_schedulable(const cr_node_t *node, size_t i)
{
    const cr_device_t *d = &node->devices.v[i];
    if (d->parent < 0 && d->mig_enabled) {
        for (size_t k = 0; k < node->devices.n; k++)
            if (node->devices.v[k].parent == (int)i)
                return false;
    }
    return true;
}

static bool has_resource(const cr_node_t *node, const char *name)
{
    for (size_t i = 0; i < node->resources.n; i++)
        if (strcmp(node->resources.v[i].name, name) == 0)
            return true;
    return false;
}

static void derive(const cr_hw_env_t *env, cr_node_t *node, bool from_spec)
{
    set_identity(env, node);
    cr_node_set_label(node, "corral.io/node-id", node->id);
    const char *sku = main_sku(node);
    if (sku && !cr_node_get_label(node, "corral.io/accelerator-type"))
        cr_node_set_label(node, "corral.io/accelerator-type", sku);
    static const struct {
        size_t off;
        const char *label;
    } plat[] = {
        {offsetof(cr_platform_t, provider), "corral.io/provider"},
        {offsetof(cr_platform_t, region), "corral.io/region"},
        {offsetof(cr_platform_t, zone), "corral.io/zone"},
        {offsetof(cr_platform_t, rack), "corral.io/rack"},
        {offsetof(cr_platform_t, market), "corral.io/market"},
        {offsetof(cr_platform_t, instance_type), "corral.io/instance-type"},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(plat); i++) {
        const char *v = (const char *)&node->platform + plat[i].off;
        if (*v && !cr_node_get_label(node, plat[i].label))
            cr_node_set_label(node, plat[i].label, v);
    }
    if (node->simulated)
        cr_node_set_label(node, "corral.io/simulated", "true");

    /* A spec states its resources; discovery derives them. */
    if (!from_spec || node->resources.n == 0) {
        if (!has_resource(node, "CPU") && node->cpu.threads > 0)
            cr_node_add_resource(node, "CPU", (int64_t)node->cpu.threads * CR_QTY_ONE);
        if (!has_resource(node, "memory") && node->memory > 0)
            cr_node_add_resource(node, "memory", (int64_t)node->memory * CR_QTY_ONE);
        CR_VEC(const char *) seen = {0};
        for (size_t i = 0; i < node->devices.n; i++) {
            const cr_device_t *d = &node->devices.v[i];
            if (!d->resource[0] || has_resource(node, d->resource))
                continue;
            bool dup = false;
            for (size_t k = 0; k < seen.n; k++)
                dup |= strcmp(seen.v[k], d->resource) == 0;
            if (!dup)
                *CR_VEC_PUSH(&seen) = d->resource;
        }
        for (size_t r = 0; r < seen.n; r++) {
            int64_t amount = 0;
            for (size_t i = 0; i < node->devices.n; i++) {
                const cr_device_t *d = &node->devices.v[i];
                if (strcmp(d->resource, seen.v[r]) != 0 || !is_schedulable(node, i) ||
                    d->health == CR_HEALTH_UNHEALTHY)
                    continue;
                amount += (d->cores > 0 ? d->cores : 1) * CR_QTY_ONE;
            }
            cr_node_add_resource(node, seen.v[r], amount);
        }
        CR_VEC_FREE(&seen);
    }
    hw_node_sort_labels(node);
}

/* What --check reports beyond what backends said. */
static void check(const cr_hw_env_t *env, cr_node_t *node)
{
    const cr_accel_component_t *const *cs;
    size_t nc = hw_components(&cs);
    for (size_t c = 0; c < nc; c++) {
        bool used = false;
        for (size_t i = 0; i < node->devices.n; i++)
            used |= strcmp(node->devices.v[i].backend, cs[c]->name) == 0;
        if (!used)
            continue;
        for (const char *const *v = cs[c]->isolation_vars; *v; v++) {
            const char *val = env->getenv(env->getenv_ctx, *v);
            if (val)
                cr_node_warn(node,
                             "%s=%s is set in corral's own environment: workers would inherit "
                             "it; unset it before starting corral",
                             *v, val);
        }
    }
    for (size_t i = 0; i < node->devices.n; i++) {
        const cr_device_t *d = &node->devices.v[i];
        if (d->mig_enabled && d->parent < 0)
            cr_node_warn(node,
                         "device %d (%s) has MIG mode on: only its MIG instances are "
                         "schedulable",
                         d->index, d->sku[0] ? d->sku : d->product);
        if (d->health == CR_HEALTH_UNHEALTHY || d->health == CR_HEALTH_DEGRADED)
            cr_node_warn(node, "device %d (%s) is %s%s%s", d->index,
                         d->sku[0] ? d->sku : d->product, hw_health_name(d->health),
                         d->health_reason[0] ? ": " : "", d->health_reason);
    }
}

int hw_discover(const hw_options_t *opts, cr_node_t **out, char **errmsg)
{
    cr_hw_env_t env;
    hw_env_from_opts(opts, &env);
    *out = NULL;
    if (errmsg)
        *errmsg = NULL;
    struct stat st;
    if (!env.spec_path && !is_real_root(env.root) &&
        (stat(env.root, &st) != 0 || !S_ISDIR(st.st_mode))) {
        if (errmsg)
            *errmsg = cr_asprintf("root %s is not a directory; point CORRAL_SYSFS_ROOT at a "
                                  "recorded machine tree or unset it",
                                  env.root);
        return CR_ENOENT;
    }
    if (!opts->no_plugins)
        hw_plugins_load(&env);
    cr_node_t *node = hw_node_new();
    /* day-zero SKU rows first: every backend names its devices with them */
    hw_skus_load(&env, node, NULL);

    if (env.spec_path) {
        cr_node_t *sim = NULL;
        int err = hw_backend_sim.probe(&env, (sim = hw_node_new()));
        if (err) {
            /* the sim backend leaves its message as the node's last warning */
            if (errmsg)
                *errmsg = sim->warnings.n ? cr_strdup(sim->warnings.v[sim->warnings.n - 1])
                                          : cr_asprintf("%s: %s", env.spec_path, cr_strerror(err));
            hw_node_free(sim);
            hw_node_free(node);
            return err;
        }
        hw_node_free(node);
        node = sim;
        derive(&env, node, true);
        check(&env, node);
        *out = node;
        return 0;
    }

    const cr_accel_component_t *const *cs;
    size_t nc = hw_components(&cs);
    for (size_t c = 0; c < nc; c++) {
        if (cs[c] == &hw_backend_sim)
            continue;
        cr_node_t *part = NULL;
        char why[512];
        int err = hw_probe_component(cs[c], &env, &part, why, sizeof(why));
        if (err) {
            cr_node_warn(node, "backend %s off: %s", cs[c]->name, why);
            continue;
        }
        hw_node_merge(node, part);
        hw_node_free(part);
    }
    hw_platform_probe(&env, node);
    if (!opts->no_host) {
        int err = hw_host_probe(&env, node);
        if (err)
            cr_node_warn(node, "host topology incomplete: %s", cr_strerror(err));
    }
    derive(&env, node, false);
    check(&env, node);
    *out = node;
    return 0;
}

/* Whether devs[0..ndevs) (valid, distinct) is one of the node's module
 * sets, by the members of its "module-set" domains. */
static bool is_module_set(const cr_node_t *node, const int *devs, size_t ndevs)
{
    for (size_t i = 0; i < node->domains.n; i++) {
        const cr_domain_t *d = &node->domains.v[i];
        if (strcmp(d->kind, "module-set") != 0 || d->nmembers != ndevs)
            continue;
        size_t hit = 0;
        for (size_t k = 0; k < ndevs; k++)
            for (size_t m = 0; m < d->nmembers; m++)
                hit += d->members[m] == devs[k];
        if (hit == ndevs)
            return true;
    }
    return false;
}

int hw_isolate_rules(const cr_node_t *node, const int *devs, size_t ndevs, char **why)
{
    *why = NULL;
    if (ndevs < 2)
        return 0;
    for (size_t k = 0; k < ndevs; k++) {
        const cr_device_t *d = &node->devices.v[devs[k]];
        if (d->parent >= 0 && d->mig_profile[0]) {
            /* NVIDIA MIG user guide, "CUDA Device Enumeration" */
            *why = cr_asprintf("device %d is a MIG instance (%s): CUDA shows a process one MIG "
                               "instance and none beside other GPUs, so a worker gets it alone",
                               devs[k], d->mig_profile);
            return CR_EINVAL;
        }
    }
    bool in_set = false;
    for (size_t i = 0; i < node->domains.n && !in_set; i++)
        if (strcmp(node->domains.v[i].kind, "module-set") == 0)
            for (size_t m = 0; m < node->domains.v[i].nmembers; m++)
                in_set |= node->domains.v[i].members[m] == devs[0];
    if (in_set && !is_module_set(node, devs, ndevs)) {
        cr_buf_t sets = {0};
        cr_buf_append(&sets, "", 0);
        for (size_t i = 0; i < node->domains.n; i++)
            if (strcmp(node->domains.v[i].kind, "module-set") == 0)
                cr_buf_printf(&sets, "%s%s", sets.len ? ", " : "", node->domains.v[i].name);
        *why = cr_asprintf("devices of %s run together in one process only as one of the "
                           "vendor's module sets (%s); give one device or one whole set",
                           node->devices.v[devs[0]].backend, sets.s);
        cr_buf_free(&sets);
        return CR_EINVAL;
    }
    return 0;
}

int hw_isolate(const hw_options_t *opts, const cr_node_t *node, const int *devs, size_t ndevs,
               cr_envlist_t *out, char **errmsg)
{
    cr_hw_env_t env;
    hw_env_from_opts(opts, &env);
    if (errmsg)
        *errmsg = NULL;
    for (size_t i = 0; i < ndevs; i++) {
        if (devs[i] < 0 || (size_t)devs[i] >= node->devices.n) {
            if (errmsg)
                *errmsg = node->devices.n
                              ? cr_asprintf("device %d does not exist: this node has devices 0 "
                                            "to %zu",
                                            devs[i], node->devices.n - 1)
                              : cr_asprintf("device %d does not exist: this node has no "
                                            "accelerators",
                                            devs[i]);
            return CR_ENODEV;
        }
        for (size_t k = 0; k < i; k++)
            if (devs[k] == devs[i]) {
                if (errmsg)
                    *errmsg = cr_asprintf("device %d is named twice", devs[i]);
                return CR_EINVAL;
            }
    }
    char *why;
    int rc = hw_isolate_rules(node, devs, ndevs, &why);
    if (rc) {
        if (errmsg)
            *errmsg = why;
        else
            free(why);
        return rc;
    }
    /* every backend present on the node isolates, even with no device
     * given, so that a worker never sees devices it was not given */
    int *sub = cr_calloc(ndevs ? ndevs : 1, sizeof(int));
    int err = 0;
    for (size_t i = 0; i < node->devices.n && !err; i++) {
        const char *b = node->devices.v[i].backend;
        bool first = true;
        for (size_t k = 0; k < i; k++)
            first &= strcmp(node->devices.v[k].backend, b) != 0;
        if (!first)
            continue;
        const cr_accel_component_t *c = hw_component_find(b);
        if (!c) {
            if (errmsg)
                *errmsg = cr_asprintf("no backend '%s' is loaded to isolate device %zu", b, i);
            err = CR_ENOSYS;
            break;
        }
        size_t ns = 0;
        for (size_t k = 0; k < ndevs; k++)
            if (strcmp(node->devices.v[devs[k]].backend, b) == 0)
                sub[ns++] = devs[k];
        err = c->isolate(&env, node, sub, ns, out);
        if (err && errmsg)
            *errmsg =
                cr_asprintf("backend %s could not isolate the devices: %s", b, cr_strerror(err));
    }
    free(sub);
    return err;
}
