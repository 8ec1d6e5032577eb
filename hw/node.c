/* The node description: construction, the cr_node_add_* calls backends
 * use, and merging one backend's findings into the node. */
#include "hw.h"
#include <stdio.h>

cr_node_t *hw_node_new(void)
{
    cr_node_t *n = cr_calloc(1, sizeof(*n));
    return n;
}

void hw_domain_fini(cr_domain_t *d)
{
    CR_FREE(d->members);
    d->nmembers = 0;
    cr_free_strv(d->hosts, d->nhosts);
    d->hosts = NULL;
    d->nhosts = 0;
}

static void kv_fini(cr_kv_t *kv)
{
    CR_FREE(kv->key);
    CR_FREE(kv->value);
}

void hw_node_free(cr_node_t *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->addresses.n; i++)
        free(n->addresses.v[i]);
    CR_VEC_FREE(&n->addresses);
    for (size_t i = 0; i < n->labels.n; i++)
        kv_fini(&n->labels.v[i]);
    CR_VEC_FREE(&n->labels);
    CR_VEC_FREE(&n->numa);
    CR_VEC_FREE(&n->devices);
    CR_VEC_FREE(&n->links);
    for (size_t i = 0; i < n->domains.n; i++)
        hw_domain_fini(&n->domains.v[i]);
    CR_VEC_FREE(&n->domains);
    CR_VEC_FREE(&n->nics);
    CR_VEC_FREE(&n->resources);
    for (size_t i = 0; i < n->warnings.n; i++)
        free(n->warnings.v[i]);
    CR_VEC_FREE(&n->warnings);
    free(n);
}

const char *cr_hw_getenv(const cr_hw_env_t *env, const char *name)
{
    if (env && env->getenv)
        return env->getenv(env->getenv_ctx, name);
    return getenv(name);
}

cr_device_t *cr_node_add_device(cr_node_t *node)
{
    cr_device_t *d = CR_VEC_PUSH(&node->devices);
    d->index = (int)(node->devices.n - 1);
    d->numa = -1;
    d->parent = -1;
    d->partition = -1;
    d->memory_numa = -1;
    d->vendor_index = -1;
    return d;
}

int cr_node_add_link(cr_node_t *node, int a, int b, cr_link_kind_t kind, int count,
                     double bandwidth_gbps)
{
    if (a == b || a < 0 || b < 0 || (size_t)a >= node->devices.n || (size_t)b >= node->devices.n ||
        (unsigned)kind >= CR_LINK_KIND_COUNT)
        return CR_EINVAL;
    if (a > b) {
        int t = a;
        a = b;
        b = t;
    }
    cr_link_t *l = CR_VEC_PUSH(&node->links);
    l->a = a;
    l->b = b;
    l->kind = kind;
    l->count = count;
    l->bandwidth_gbps = bandwidth_gbps;
    return 0;
}

cr_domain_t *cr_node_add_domain(cr_node_t *node, const char *kind, const char *name)
{
    cr_domain_t *d = CR_VEC_PUSH(&node->domains);
    cr_strlcpy(d->kind, kind, sizeof(d->kind));
    cr_strlcpy(d->name, name, sizeof(d->name));
    d->worker_id = -1;
    return d;
}

void cr_domain_add_member(cr_domain_t *d, int device)
{
    d->members = cr_realloc(d->members, (d->nmembers + 1) * sizeof(int));
    d->members[d->nmembers++] = device;
}

void cr_domain_add_host(cr_domain_t *d, const char *host)
{
    d->hosts = cr_realloc(d->hosts, (d->nhosts + 1) * sizeof(char *));
    d->hosts[d->nhosts++] = cr_strdup(host);
}

int cr_node_set_label(cr_node_t *node, const char *key, const char *value)
{
    if (!key || !*key || !value)
        return CR_EINVAL;
    /* a Ray type name as the type label: corral's canonical name is kept */
    if (strcmp(key, "corral.io/accelerator-type") == 0) {
        const char *canon = hw_sku_canonical(value);
        if (canon)
            value = canon;
    }
    for (size_t i = 0; i < node->labels.n; i++) {
        if (strcmp(node->labels.v[i].key, key) == 0) {
            free(node->labels.v[i].value);
            node->labels.v[i].value = cr_strdup(value);
            return 0;
        }
    }
    cr_kv_t *kv = CR_VEC_PUSH(&node->labels);
    kv->key = cr_strdup(key);
    kv->value = cr_strdup(value);
    return 0;
}

const char *cr_node_get_label(const cr_node_t *node, const char *key)
{
    for (size_t i = 0; i < node->labels.n; i++)
        if (strcmp(node->labels.v[i].key, key) == 0)
            return node->labels.v[i].value;
    return NULL;
}

static int cmp_label(const void *a, const void *b)
{
    return strcmp(((const cr_kv_t *)a)->key, ((const cr_kv_t *)b)->key);
}

void hw_node_sort_labels(cr_node_t *node)
{
    if (node->labels.n)
        qsort(node->labels.v, node->labels.n, sizeof(cr_kv_t), cmp_label);
}

void cr_node_add_resource(cr_node_t *node, const char *name, int64_t amount)
{
    for (size_t i = 0; i < node->resources.n; i++) {
        if (strcmp(node->resources.v[i].name, name) == 0) {
            node->resources.v[i].amount += amount;
            return;
        }
    }
    cr_resource_t *r = CR_VEC_PUSH(&node->resources);
    cr_strlcpy(r->name, name, sizeof(r->name));
    r->amount = amount;
}

void cr_node_warn(cr_node_t *node, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    *CR_VEC_PUSH(&node->warnings) = cr_strdup(line);
}

/* Whether key=value may be set: a name, without '=', and a value. */
static bool kv_ok(const char *key, const char *value)
{
    return key && *key && !strchr(key, '=') && value;
}

/* value as env's variable i, or, when i is past the end, as a new last
 * variable key; i then. */
static size_t kv_put(cr_envlist_t *env, size_t i, const char *key, const char *value)
{
    if (i < env->vars.n) {
        free(env->vars.v[i].value);
        env->vars.v[i].value = cr_strdup(value);
        return i;
    }
    cr_kv_t *kv = CR_VEC_PUSH(&env->vars);
    kv->key = cr_strdup(key);
    kv->value = cr_strdup(value);
    return env->vars.n - 1;
}

int cr_envlist_set(cr_envlist_t *env, const char *key, const char *value)
{
    if (!kv_ok(key, value))
        return CR_EINVAL;
    size_t i = 0;
    while (i < env->vars.n && strcmp(env->vars.v[i].key, key) != 0)
        i++;
    kv_put(env, i, key, value);
    return 0;
}

/* The slot of key in an open-addressed table of cap (a power of two)
 * slots holding dst's indices + 1 (0: free): the one holding key, or the
 * free one where it goes. */
static size_t key_slot(const size_t *slot, size_t cap, const cr_envlist_t *dst, const char *key)
{
    size_t i = (size_t)cr_hash_str(key) & (cap - 1);
    while (slot[i] && strcmp(dst->vars.v[slot[i] - 1].key, key) != 0)
        i = (i + 1) & (cap - 1);
    return i;
}

int cr_envlist_merge(cr_envlist_t *dst, const cr_envlist_t *src)
{
    if (!src || !src->vars.n)
        return 0;
    size_t total = dst->vars.n + src->vars.n;
    if (total <= 16) { /* a few: scanning costs less than a table */
        int err = 0;
        for (size_t i = 0; i < src->vars.n; i++)
            if (cr_envlist_set(dst, src->vars.v[i].key, src->vars.v[i].value) < 0)
                err = CR_EINVAL;
        return err;
    }
    size_t cap = 32;
    while (cap < 2 * total)
        cap *= 2;
    size_t *slot = cr_calloc(cap, sizeof(*slot));
    for (size_t i = 0; i < dst->vars.n; i++) {
        size_t k = key_slot(slot, cap, dst, dst->vars.v[i].key);
        if (!slot[k]) /* (a name twice in dst: cr_envlist_set finds the first) */
            slot[k] = i + 1;
    }
    int err = 0;
    for (size_t i = 0; i < src->vars.n; i++) {
        const char *key = src->vars.v[i].key, *value = src->vars.v[i].value;
        if (!kv_ok(key, value)) {
            err = CR_EINVAL;
            continue;
        }
        size_t k = key_slot(slot, cap, dst, key);
        slot[k] = kv_put(dst, slot[k] ? slot[k] - 1 : dst->vars.n, key, value) + 1;
    }
    free(slot);
    return err;
}

int cr_isolate_ids(cr_envlist_t *out, const char *var, const cr_node_t *node, const int *devs,
                   size_t ndevs)
{
    cr_buf_t b = {0};
    cr_buf_append(&b, "", 0);
    int err = 0;
    for (size_t i = 0; i < ndevs && !err; i++) {
        if (devs[i] < 0 || (size_t)devs[i] >= node->devices.n) {
            err = CR_ENODEV;
            break;
        }
        const cr_device_t *d = &node->devices.v[devs[i]];
        if (strchr(d->isolation_id, ','))
            err = CR_EINVAL;
        else if (d->isolation_id[0])
            cr_buf_printf(&b, "%s%s", i ? "," : "", d->isolation_id);
        else
            cr_buf_printf(&b, "%s%d", i ? "," : "", d->index);
    }
    if (!err)
        err = cr_envlist_set(out, var, b.s);
    cr_buf_free(&b);
    return err;
}

const char *cr_envlist_get(const cr_envlist_t *env, const char *key)
{
    for (size_t i = 0; i < env->vars.n; i++)
        if (strcmp(env->vars.v[i].key, key) == 0)
            return env->vars.v[i].value;
    return NULL;
}

void cr_envlist_free(cr_envlist_t *env)
{
    for (size_t i = 0; i < env->vars.n; i++)
        kv_fini(&env->vars.v[i]);
    CR_VEC_FREE(&env->vars);
}

int hw_device_find(const cr_node_t *node, const char *backend, int vendor_index)
{
    for (size_t i = 0; i < node->devices.n; i++)
        if (strcmp(node->devices.v[i].backend, backend) == 0 &&
            node->devices.v[i].vendor_index == vendor_index)
            return (int)i;
    return -1;
}

const cr_link_t *hw_node_find_link(const cr_node_t *node, int a, int b)
{
    if (a > b) {
        int t = a;
        a = b;
        b = t;
    }
    for (size_t i = 0; i < node->links.n; i++)
        if (node->links.v[i].a == a && node->links.v[i].b == b)
            return &node->links.v[i];
    return NULL;
}

void hw_node_merge(cr_node_t *dst, cr_node_t *src)
{
    int base = (int)dst->devices.n;
    for (size_t i = 0; i < src->devices.n; i++) {
        cr_device_t *d = CR_VEC_PUSH(&dst->devices);
        *d = src->devices.v[i];
        d->index = base + (int)i;
        if (d->parent >= 0)
            d->parent += base;
    }
    for (size_t i = 0; i < src->links.n; i++) {
        cr_link_t *l = CR_VEC_PUSH(&dst->links);
        *l = src->links.v[i];
        l->a += base;
        l->b += base;
    }
    for (size_t i = 0; i < src->domains.n; i++) {
        cr_domain_t *d = CR_VEC_PUSH(&dst->domains);
        *d = src->domains.v[i];
        for (size_t m = 0; m < d->nmembers; m++)
            d->members[m] += base;
    }
    src->domains.n = 0;
    for (size_t i = 0; i < src->labels.n; i++)
        cr_node_set_label(dst, src->labels.v[i].key, src->labels.v[i].value);
    for (size_t i = 0; i < src->resources.n; i++)
        cr_node_add_resource(dst, src->resources.v[i].name, src->resources.v[i].amount);
    for (size_t i = 0; i < src->warnings.n; i++)
        *CR_VEC_PUSH(&dst->warnings) = src->warnings.v[i];
    src->warnings.n = 0;
    for (size_t i = 0; i < src->nics.n; i++)
        *CR_VEC_PUSH(&dst->nics) = src->nics.v[i];
    if (src->simulated)
        dst->simulated = true;
    src->devices.n = src->links.n = src->nics.n = 0;
}

static const char *const health_names[] = {"unknown", "ok", "degraded", "unhealthy"};

const char *hw_health_name(cr_health_t h)
{
    return (unsigned)h < CR_ARRAY_SIZE(health_names) ? health_names[h] : "unknown";
}

void hw_telemetry_init(cr_telemetry_t *t)
{
    memset(t, 0, sizeof(*t));
    t->utilization_pct = t->power_w = t->temperature_c = -1;
    t->health = CR_HEALTH_UNKNOWN;
    t->ecc_corrected = t->ecc_uncorrected = t->xid_last = -1;
}

int hw_health_parse(const char *s, cr_health_t *out)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(health_names); i++)
        if (strcmp(s, health_names[i]) == 0) {
            *out = (cr_health_t)i;
            return 0;
        }
    return CR_EPARSE;
}

static const char *const link_names[CR_LINK_KIND_COUNT] = {
    [CR_LINK_NVLINK] = "nvlink",
    [CR_LINK_NVSWITCH] = "nvswitch",
    [CR_LINK_XGMI_SAME_GPU] = "xgmi-same-gpu",
    [CR_LINK_XGMI] = "xgmi",
    [CR_LINK_ICI] = "ici",
    [CR_LINK_NEURONLINK] = "neuronlink",
    [CR_LINK_ROCE] = "roce",
    [CR_LINK_PCIE_SWITCH] = "pcie-switch",
    [CR_LINK_PCIE_MULTI] = "pcie-multi-switch",
    [CR_LINK_PCIE_HOSTBRIDGE] = "pcie-hostbridge",
    [CR_LINK_NUMA] = "numa",
    [CR_LINK_CPU] = "cpu-interconnect",
};

const char *hw_link_kind_name(cr_link_kind_t k)
{
    return (unsigned)k < CR_LINK_KIND_COUNT ? link_names[k] : "unknown";
}

int hw_link_kind_parse(const char *s, cr_link_kind_t *out)
{
    for (int i = 0; i < CR_LINK_KIND_COUNT; i++)
        if (strcmp(s, link_names[i]) == 0) {
            *out = (cr_link_kind_t)i;
            return 0;
        }
    return CR_EPARSE;
}
