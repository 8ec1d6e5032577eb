/* The node description as JSON (schema: docs/node-description.md).
 * Fixed struct fields are described once in tables and converted both ways
 * by the same code, so output and input cannot drift apart. */
#include "hw.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>

enum fkind { F_STR, F_INT, F_U64, F_MEM, F_U16HEX, F_BOOL, F_HEALTH, F_REAL, F_LINKKIND };

typedef struct field {
    const char *name;
    enum fkind kind;
    size_t off, size;
} field_t;

/* clang-format would break each brace-initializer macro over four lines */
/* clang-format off */
#define FS(T, m) {#m, F_STR, offsetof(T, m), sizeof(((T *)0)->m)}
#define FI(T, m) {#m, F_INT, offsetof(T, m), sizeof(int)}
#define FU(T, m) {#m, F_U64, offsetof(T, m), sizeof(uint64_t)}
#define FM(T, m) {#m, F_MEM, offsetof(T, m), sizeof(uint64_t)}
#define FX(T, m) {#m, F_U16HEX, offsetof(T, m), sizeof(uint16_t)}
#define FB(T, m) {#m, F_BOOL, offsetof(T, m), sizeof(bool)}
#define FH(T, m) {#m, F_HEALTH, offsetof(T, m), sizeof(cr_health_t)}
#define FR(T, m) {#m, F_REAL, offsetof(T, m), sizeof(double)}
#define FK(T, m) {#m, F_LINKKIND, offsetof(T, m), sizeof(cr_link_kind_t)}
/* clang-format on */

static const field_t device_fields[] = {
    FI(cr_device_t, index),         FS(cr_device_t, backend),
    FS(cr_device_t, vendor),        FS(cr_device_t, resource),
    FS(cr_device_t, sku),           FS(cr_device_t, product),
    FS(cr_device_t, uuid),          FS(cr_device_t, pci),
    FS(cr_device_t, pci_path),      FX(cr_device_t, pci_vendor),
    FX(cr_device_t, pci_device),    FI(cr_device_t, numa),
    FS(cr_device_t, cpus),          FS(cr_device_t, nic),
    FM(cr_device_t, memory),        FI(cr_device_t, compute_units),
    FI(cr_device_t, cores),         FS(cr_device_t, compute_capability),
    FS(cr_device_t, isolation_id),  FI(cr_device_t, vendor_index),
    FS(cr_device_t, driver),        FH(cr_device_t, health),
    FS(cr_device_t, health_reason), FI(cr_device_t, parent),
    FB(cr_device_t, mig_enabled),   FS(cr_device_t, mig_profile),
    FI(cr_device_t, partition),     FI(cr_device_t, memory_numa),
};

static const field_t link_fields[] = {
    FI(cr_link_t, a),
    FI(cr_link_t, b),
    FK(cr_link_t, kind),
    FI(cr_link_t, count),
    FR(cr_link_t, bandwidth_gbps),
};

static const field_t nic_fields[] = {
    FS(cr_nic_t, name),       FS(cr_nic_t, pci),  FS(cr_nic_t, pci_path),    FI(cr_nic_t, numa),
    FU(cr_nic_t, speed_mbps), FB(cr_nic_t, rdma), FS(cr_nic_t, rdma_device),
};

static const field_t numa_fields[] = {
    FI(cr_numa_t, id),
    FS(cr_numa_t, cpus),
    FM(cr_numa_t, memory),
};

static const field_t platform_fields[] = {
    FS(cr_platform_t, provider), FS(cr_platform_t, region), FS(cr_platform_t, zone),
    FS(cr_platform_t, rack),     FS(cr_platform_t, market), FS(cr_platform_t, instance_type),
    FS(cr_platform_t, k8s_node),
};

static const field_t domain_fields[] = {
    FS(cr_domain_t, kind),     FS(cr_domain_t, name),      FS(cr_domain_t, accelerator_type),
    FS(cr_domain_t, topology), FI(cr_domain_t, worker_id), FI(cr_domain_t, worker_count),
};

/* ---------------- output ---------------- */

static void fields_to_json(json_t *o, const void *base, const field_t *f, size_t n)
{
    const char *p = base;
    for (size_t i = 0; i < n; i++) {
        const void *v = p + f[i].off;
        json_t *j = NULL;
        switch (f[i].kind) {
        case F_STR:
            j = json_string((const char *)v);
            break;
        case F_INT:
            j = json_integer(*(const int *)v);
            break;
        case F_U64:
        case F_MEM:
            j = json_integer((json_int_t) * (const uint64_t *)v);
            break;
        case F_U16HEX: {
            char hex[8];
            snprintf(hex, sizeof(hex), "0x%04x", *(const uint16_t *)v);
            j = json_string(hex);
            break;
        }
        case F_BOOL:
            j = json_boolean(*(const bool *)v);
            break;
        case F_HEALTH:
            j = json_string(hw_health_name(*(const cr_health_t *)v));
            break;
        case F_REAL:
            j = json_real(*(const double *)v);
            break;
        case F_LINKKIND:
            j = json_string(hw_link_kind_name(*(const cr_link_kind_t *)v));
            break;
        }
        json_object_set_new(o, f[i].name, j);
    }
}

static json_t *qty_to_json(int64_t amount)
{
    if (amount % CR_QTY_ONE == 0)
        return json_integer(amount / CR_QTY_ONE);
    return json_real((double)amount / CR_QTY_ONE);
}

static json_t *strv_to_json(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

json_t *hw_node_to_json(const cr_node_t *n)
{
    json_t *o = json_object();
    json_object_set_new(o, "schema", json_string("corral.node/v1"));
    json_object_set_new(o, "id", json_string(n->id));
    json_object_set_new(o, "hostname", json_string(n->hostname));
    json_object_set_new(o, "simulated", json_boolean(n->simulated));
    json_object_set_new(o, "addresses", strv_to_json(n->addresses.v, n->addresses.n));
    json_t *labels = json_object();
    for (size_t i = 0; i < n->labels.n; i++)
        json_object_set_new(labels, n->labels.v[i].key, json_string(n->labels.v[i].value));
    json_object_set_new(o, "labels", labels);
    json_t *plat = json_object();
    fields_to_json(plat, &n->platform, platform_fields, CR_ARRAY_SIZE(platform_fields));
    json_object_set_new(o, "platform", plat);

    json_t *cpu = json_object();
    json_object_set_new(cpu, "model", json_string(n->cpu.model));
    json_object_set_new(cpu, "sockets", json_integer(n->cpu.sockets));
    json_object_set_new(cpu, "cores", json_integer(n->cpu.cores));
    json_object_set_new(cpu, "threads", json_integer(n->cpu.threads));
    json_t *numa = json_array();
    for (size_t i = 0; i < n->numa.n; i++) {
        json_t *x = json_object();
        fields_to_json(x, &n->numa.v[i], numa_fields, CR_ARRAY_SIZE(numa_fields));
        json_array_append_new(numa, x);
    }
    json_object_set_new(cpu, "numa_nodes", numa);
    json_object_set_new(o, "cpu", cpu);
    json_object_set_new(o, "memory", json_integer((json_int_t)n->memory));

    json_t *res = json_object();
    for (size_t i = 0; i < n->resources.n; i++)
        json_object_set_new(res, n->resources.v[i].name, qty_to_json(n->resources.v[i].amount));
    json_object_set_new(o, "resources", res);

    json_t *devs = json_array();
    for (size_t i = 0; i < n->devices.n; i++) {
        const cr_device_t *d = &n->devices.v[i];
        json_t *x = json_object();
        fields_to_json(x, d, device_fields, CR_ARRAY_SIZE(device_fields));
        json_t *c = json_array();
        for (int k = 0; k < d->ncoords && k < 3; k++)
            json_array_append_new(c, json_integer(d->coords[k]));
        json_object_set_new(x, "coords", c);
        json_array_append_new(devs, x);
    }
    json_object_set_new(o, "devices", devs);

    json_t *links = json_array();
    for (size_t i = 0; i < n->links.n; i++) {
        json_t *x = json_object();
        fields_to_json(x, &n->links.v[i], link_fields, CR_ARRAY_SIZE(link_fields));
        json_array_append_new(links, x);
    }
    json_object_set_new(o, "links", links);

    json_t *doms = json_array();
    for (size_t i = 0; i < n->domains.n; i++) {
        const cr_domain_t *d = &n->domains.v[i];
        json_t *x = json_object();
        fields_to_json(x, d, domain_fields, CR_ARRAY_SIZE(domain_fields));
        json_t *m = json_array();
        for (size_t k = 0; k < d->nmembers; k++)
            json_array_append_new(m, json_integer(d->members[k]));
        json_object_set_new(x, "members", m);
        json_object_set_new(x, "hosts", strv_to_json(d->hosts, d->nhosts));
        json_array_append_new(doms, x);
    }
    json_object_set_new(o, "domains", doms);

    json_t *nics = json_array();
    for (size_t i = 0; i < n->nics.n; i++) {
        json_t *x = json_object();
        fields_to_json(x, &n->nics.v[i], nic_fields, CR_ARRAY_SIZE(nic_fields));
        json_array_append_new(nics, x);
    }
    json_object_set_new(o, "nics", nics);
    json_object_set_new(o, "warnings", strv_to_json(n->warnings.v, n->warnings.n));
    return o;
}

/* ---------------- input ---------------- */

typedef struct pctx {
    hw_json_error_t *err;
    char path[256];
} pctx_t;

__attribute__((format(printf, 2, 3))) static int fail(pctx_t *c, const char *fmt, ...)
{
    if (c->err) {
        cr_strlcpy(c->err->path, c->path, sizeof(c->err->path));
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err->msg, sizeof(c->err->msg), fmt, ap);
        va_end(ap);
    }
    return CR_ESCHEMA;
}

/* Pushes ".key" or "[i]" onto the path; returns the old length to pop to. */
static size_t push_key(pctx_t *c, const char *key)
{
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof(c->path) - old, "%s%s", old ? "." : "", key);
    return old;
}

static size_t push_idx(pctx_t *c, size_t i)
{
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof(c->path) - old, "[%zu]", i);
    return old;
}

static void pop(pctx_t *c, size_t old)
{
    c->path[old] = '\0';
}

const char *hw_json_kind(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "a mapping";
    case JSON_ARRAY:
        return "a list";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* "80Gi", "512 MiB", "1.5T" or a plain number of bytes. */
int hw_parse_size(const char *s, uint64_t *out)
{
    char *end;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return CR_EPARSE;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0)
        return CR_EPARSE;
    while (isspace((unsigned char)*end))
        end++;
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {
        {"", 1},
        {"B", 1},
        {"K", 1e3},
        {"KB", 1e3},
        {"Ki", 1024.0},
        {"KiB", 1024.0},
        {"M", 1e6},
        {"MB", 1e6},
        {"Mi", 1048576.0},
        {"MiB", 1048576.0},
        {"G", 1e9},
        {"GB", 1e9},
        {"Gi", 1073741824.0},
        {"GiB", 1073741824.0},
        {"T", 1e12},
        {"TB", 1e12},
        {"Ti", 1099511627776.0},
        {"TiB", 1099511627776.0},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(units); i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            double b = v * units[i].mult;
            if (b > 1.8e19 || b != floor(b))
                return CR_ERANGE;
            *out = (uint64_t)b;
            return 0;
        }
    }
    return CR_EPARSE;
}

static int field_from_json(pctx_t *c, void *base, const field_t *f, const json_t *j)
{
    char *p = (char *)base + f->off;
    switch (f->kind) {
    case F_STR:
        if (!json_is_string(j))
            return fail(c, "expected a string, found %s", hw_json_kind(j));
        if (json_string_length(j) >= f->size)
            return fail(c, "string too long (at most %zu characters)", f->size - 1);
        cr_strlcpy(p, json_string_value(j), f->size);
        return 0;
    case F_INT:
        if (!json_is_integer(j))
            return fail(c, "expected a whole number, found %s", hw_json_kind(j));
        if (json_integer_value(j) < -1000000000 || json_integer_value(j) > 1000000000)
            return fail(c, "number out of range");
        *(int *)p = (int)json_integer_value(j);
        return 0;
    case F_U64:
    case F_MEM:
        if (json_is_integer(j)) {
            if (json_integer_value(j) < 0)
                return fail(c, "expected a number of at least 0");
            *(uint64_t *)p = (uint64_t)json_integer_value(j);
            return 0;
        }
        if (f->kind == F_MEM && json_is_string(j)) {
            if (hw_parse_size(json_string_value(j), (uint64_t *)p) == 0)
                return 0;
            return fail(c, "expected a size such as 80Gi, 512MiB or a number of bytes, found '%s'",
                        json_string_value(j));
        }
        return fail(c, "expected a whole number, found %s", hw_json_kind(j));
    case F_U16HEX: {
        uint64_t v;
        if (json_is_integer(j) && json_integer_value(j) >= 0 && json_integer_value(j) <= 0xffff) {
            *(uint16_t *)p = (uint16_t)json_integer_value(j);
            return 0;
        }
        if (json_is_string(j) && cr_parse_u64(json_string_value(j), 16, &v) == 0 && v <= 0xffff) {
            *(uint16_t *)p = (uint16_t)v;
            return 0;
        }
        return fail(c, "expected a 16-bit PCI id such as \"0x10de\"");
    }
    case F_BOOL:
        if (!json_is_boolean(j))
            return fail(c, "expected true or false, found %s", hw_json_kind(j));
        *(bool *)p = json_is_true(j);
        return 0;
    case F_HEALTH:
        if (!json_is_string(j) || hw_health_parse(json_string_value(j), (cr_health_t *)p))
            return fail(c, "expected one of unknown, ok, degraded, unhealthy");
        return 0;
    case F_REAL:
        if (!json_is_number(j) || !isfinite(json_number_value(j)) || json_number_value(j) < 0)
            return fail(c, "expected a number of at least 0");
        *(double *)p = json_number_value(j);
        return 0;
    case F_LINKKIND:
        if (!json_is_string(j) || hw_link_kind_parse(json_string_value(j), (cr_link_kind_t *)p)) {
            cr_buf_t b = {0};
            for (int k = 0; k < CR_LINK_KIND_COUNT; k++)
                cr_buf_printf(&b, "%s%s", k ? ", " : "", hw_link_kind_name((cr_link_kind_t)k));
            int e = fail(c, "expected a link kind: one of %s", b.s);
            cr_buf_free(&b);
            return e;
        }
        return 0;
    }
    return CR_EINVAL;
}

/* Reads obj's keys into base by the table; keys in `extra` are left for
 * the caller; any other key is an error naming what is allowed. */
static int fields_from_json(pctx_t *c, const json_t *obj, void *base, const field_t *f, size_t n,
                            const char *const *extra)
{
    if (!json_is_object(obj))
        return fail(c, "expected a mapping, found %s", hw_json_kind(obj));
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val)
    {
        size_t old = push_key(c, key);
        const field_t *hit = NULL;
        for (size_t i = 0; i < n; i++)
            if (strcmp(f[i].name, key) == 0)
                hit = &f[i];
        bool is_extra = false;
        for (size_t i = 0; extra && extra[i]; i++)
            if (strcmp(extra[i], key) == 0)
                is_extra = true;
        if (!hit && !is_extra) {
            cr_buf_t b = {0};
            for (size_t i = 0; i < n; i++)
                cr_buf_printf(&b, "%s%s", i ? ", " : "", f[i].name);
            for (size_t i = 0; extra && extra[i]; i++)
                cr_buf_printf(&b, ", %s", extra[i]);
            int e = fail(c, "unknown field '%s'; expected one of: %s", key, b.s);
            cr_buf_free(&b);
            return e;
        }
        if (hit) {
            int e = field_from_json(c, base, hit, val);
            if (e)
                return e;
        }
        pop(c, old);
    }
    return 0;
}

static int array_of(pctx_t *c, const json_t *obj, const char *key, const json_t **out)
{
    *out = json_object_get(obj, key);
    if (!*out)
        return 0;
    if (!json_is_array(*out)) {
        size_t old = push_key(c, key);
        int e = fail(c, "expected a list, found %s", hw_json_kind(*out));
        pop(c, old);
        return e;
    }
    return 0;
}

static int strv_from_json(pctx_t *c, const json_t *a, char ***v, size_t *n)
{
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x)
    {
        if (!json_is_string(x)) {
            size_t old = push_idx(c, i);
            int e = fail(c, "expected a string, found %s", hw_json_kind(x));
            pop(c, old);
            return e;
        }
        *v = cr_realloc(*v, (*n + 1) * sizeof(char *));
        (*v)[(*n)++] = cr_strdup(json_string_value(x));
    }
    return 0;
}

static int qty_from_json(pctx_t *c, const json_t *j, int64_t *out)
{
    if (!json_is_number(j))
        return fail(c, "expected a number, found %s", hw_json_kind(j));
    /* whole numbers exactly: a node's memory in bytes is past 2^53 / 10000 */
    if (json_is_integer(j)) {
        json_int_t w = json_integer_value(j);
        if (w < 0 || w > INT64_MAX / CR_QTY_ONE)
            return fail(c, "expected a quantity between 0 and %lld", INT64_MAX / CR_QTY_ONE);
        *out = (int64_t)w * CR_QTY_ONE;
        return 0;
    }
    double v = json_number_value(j);
    if (!isfinite(v) || v < 0 || v > 1e12)
        return fail(c, "expected a quantity between 0 and 1e12");
    double q = v * CR_QTY_ONE;
    /* llround of a q in [0, 1e16] without libm: `corral`, which links
     * this file, then loads libc alone (one library less to map at each
     * start) */
    int64_t r = (int64_t)q;
    if (q - (double)r >= 0.5)
        r++;
    if (fabs(q - (double)r) > 1e-6)
        return fail(c, "quantity %g has more than 4 decimal places", v);
    *out = r;
    return 0;
}

static int parse_devices(pctx_t *c, const json_t *a, cr_node_t *node)
{
    static const char *const extra[] = {"coords", NULL};
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x)
    {
        size_t old = push_idx(c, i);
        cr_device_t *d = cr_node_add_device(node);
        int e = fields_from_json(c, x, d, device_fields, CR_ARRAY_SIZE(device_fields), extra);
        if (e)
            return e;
        if (d->index != (int)i) {
            push_key(c, "index");
            return fail(c, "device index %d does not match its position %zu", d->index, i);
        }
        const json_t *co = json_object_get(x, "coords");
        if (co) {
            size_t o2 = push_key(c, "coords");
            if (!json_is_array(co) || json_array_size(co) > 3)
                return fail(c, "expected a list of at most 3 whole numbers");
            size_t k;
            json_t *v;
            json_array_foreach(co, k, v)
            {
                if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                    json_integer_value(v) > 65535)
                    return fail(c, "expected a list of at most 3 whole numbers from 0 to 65535");
                d->coords[k] = (int)json_integer_value(v);
            }
            d->ncoords = (int)json_array_size(co);
            pop(c, o2);
        }
        if (d->parent >= (int)i) {
            push_key(c, "parent");
            return fail(c, "parent %d must name an earlier device", d->parent);
        }
        pop(c, old);
    }
    return 0;
}

static int parse_links(pctx_t *c, const json_t *a, cr_node_t *node)
{
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x)
    {
        size_t old = push_idx(c, i);
        cr_link_t l = {.count = 1};
        int e = fields_from_json(c, x, &l, link_fields, CR_ARRAY_SIZE(link_fields), NULL);
        if (e)
            return e;
        if (!json_object_get(x, "a") || !json_object_get(x, "b") || !json_object_get(x, "kind"))
            return fail(c, "a link needs a, b and kind");
        if (cr_node_add_link(node, l.a, l.b, l.kind, l.count, l.bandwidth_gbps))
            return fail(c, "a and b must be two different device indices below %zu",
                        node->devices.n);
        pop(c, old);
    }
    return 0;
}

static int parse_domains(pctx_t *c, const json_t *a, cr_node_t *node)
{
    static const char *const extra[] = {"members", "hosts", NULL};
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x)
    {
        size_t old = push_idx(c, i);
        cr_domain_t *d = cr_node_add_domain(node, "", "");
        int e = fields_from_json(c, x, d, domain_fields, CR_ARRAY_SIZE(domain_fields), extra);
        if (e)
            return e;
        if (!d->kind[0])
            return fail(c, "a domain needs a kind (nvlink-island, numa, tpu-slice, ...)");
        const json_t *m;
        if ((e = array_of(c, x, "members", &m)))
            return e;
        size_t k;
        json_t *v;
        if (m) {
            json_array_foreach(m, k, v)
            {
                if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                    (size_t)json_integer_value(v) >= node->devices.n) {
                    push_key(c, "members");
                    push_idx(c, k);
                    return fail(c, "expected a device index below %zu", node->devices.n);
                }
                cr_domain_add_member(d, (int)json_integer_value(v));
            }
        }
        const json_t *h;
        if ((e = array_of(c, x, "hosts", &h)))
            return e;
        if (h) {
            size_t o2 = push_key(c, "hosts");
            if ((e = strv_from_json(c, h, &d->hosts, &d->nhosts)))
                return e;
            pop(c, o2);
        }
        pop(c, old);
    }
    return 0;
}

static int parse_cpu(pctx_t *c, const json_t *cpu, cr_node_t *node)
{
    static const char *const keys[] = {"model", "sockets", "cores", "threads", "numa_nodes", NULL};
    if (!json_is_object(cpu))
        return fail(c, "expected a mapping, found %s", hw_json_kind(cpu));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)cpu, key, v)
    {
        size_t old = push_key(c, key);
        bool known = false;
        for (size_t i = 0; keys[i]; i++)
            known |= strcmp(keys[i], key) == 0;
        if (!known)
            return fail(c,
                        "unknown field '%s'; expected one of: model, sockets, cores, threads, "
                        "numa_nodes",
                        key);
        if (strcmp(key, "model") == 0) {
            if (!json_is_string(v) || json_string_length(v) >= sizeof(node->cpu.model))
                return fail(c, "expected a string of at most 95 characters");
            cr_strlcpy(node->cpu.model, json_string_value(v), sizeof(node->cpu.model));
        } else if (strcmp(key, "numa_nodes") == 0) {
            if (!json_is_array(v))
                return fail(c, "expected a list, found %s", hw_json_kind(v));
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x)
            {
                size_t o2 = push_idx(c, i);
                cr_numa_t *nm = CR_VEC_PUSH(&node->numa);
                nm->id = (int)i;
                int e = fields_from_json(c, x, nm, numa_fields, CR_ARRAY_SIZE(numa_fields), NULL);
                if (e)
                    return e;
                if (nm->cpus[0]) {
                    uint64_t bits[64];
                    size_t pos = 0;
                    if (cr_cpulist_parse(nm->cpus, bits, 4096, &pos) < 0) {
                        push_key(c, "cpus");
                        return fail(
                            c, "malformed cpulist '%s' at offset %zu (expected e.g. 0-55,112-167)",
                            nm->cpus, pos);
                    }
                }
                pop(c, o2);
            }
        } else {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
                return fail(c, "expected a whole number of at least 0");
            int iv = (int)json_integer_value(v);
            if (strcmp(key, "sockets") == 0)
                node->cpu.sockets = iv;
            else if (strcmp(key, "cores") == 0)
                node->cpu.cores = iv;
            else
                node->cpu.threads = iv;
        }
        pop(c, old);
    }
    return 0;
}

int hw_node_from_json(const json_t *j, cr_node_t *node, hw_json_error_t *err)
{
    pctx_t c = {.err = err};
    static const char *const keys[] = {
        "schema", "id",        "hostname", "simulated", "addresses", "labels", "platform", "cpu",
        "memory", "resources", "devices",  "links",     "domains",   "nics",   "warnings", NULL};
    if (err)
        memset(err, 0, sizeof(*err));
    if (!json_is_object(j))
        return fail(&c, "a node description must be a mapping, found %s", hw_json_kind(j));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)j, key, v)
    {
        bool known = false;
        for (size_t i = 0; keys[i]; i++)
            known |= strcmp(keys[i], key) == 0;
        if (!known) {
            size_t old = push_key(&c, key);
            cr_buf_t b = {0};
            for (size_t i = 0; keys[i]; i++)
                cr_buf_printf(&b, "%s%s", i ? ", " : "", keys[i]);
            int e = fail(&c, "unknown field '%s'; expected one of: %s", key, b.s);
            cr_buf_free(&b);
            pop(&c, old);
            return e;
        }
    }
    int e = 0;
    size_t old;
#define STRFIELD(name, dst)                                                                        \
    if ((v = json_object_get(j, name))) {                                                          \
        old = push_key(&c, name);                                                                  \
        if (!json_is_string(v) || json_string_length(v) >= sizeof(dst))                            \
            return fail(&c, "expected a string of at most %zu characters", sizeof(dst) - 1);       \
        cr_strlcpy(dst, json_string_value(v), sizeof(dst));                                        \
        pop(&c, old);                                                                              \
    }
    STRFIELD("id", node->id);
    STRFIELD("hostname", node->hostname);
#undef STRFIELD
    if ((v = json_object_get(j, "schema"))) {
        old = push_key(&c, "schema");
        if (!json_is_string(v) || strcmp(json_string_value(v), "corral.node/v1") != 0)
            return fail(&c, "expected \"corral.node/v1\"");
        pop(&c, old);
    }
    if ((v = json_object_get(j, "simulated"))) {
        old = push_key(&c, "simulated");
        if (!json_is_boolean(v))
            return fail(&c, "expected true or false");
        node->simulated = json_is_true(v);
        pop(&c, old);
    }
    const json_t *a;
    if ((e = array_of(&c, j, "addresses", &a)))
        return e;
    if (a) {
        old = push_key(&c, "addresses");
        if ((e = strv_from_json(&c, a, &node->addresses.v, &node->addresses.n)))
            return e;
        node->addresses.cap = node->addresses.n;
        pop(&c, old);
    }
    if ((v = json_object_get(j, "labels"))) {
        old = push_key(&c, "labels");
        if (!json_is_object(v))
            return fail(&c, "expected a mapping of key: value, found %s", hw_json_kind(v));
        const char *lk;
        json_t *lv;
        json_object_foreach(v, lk, lv)
        {
            size_t o2 = push_key(&c, lk);
            if (!json_is_string(lv))
                return fail(&c, "a label value must be a string (quote numbers), found %s",
                            hw_json_kind(lv));
            if (!*lk)
                return fail(&c, "a label key must not be empty");
            cr_node_set_label(node, lk, json_string_value(lv));
            pop(&c, o2);
        }
        pop(&c, old);
    }
    if ((v = json_object_get(j, "platform"))) {
        old = push_key(&c, "platform");
        if ((e = fields_from_json(&c, v, &node->platform, platform_fields,
                                  CR_ARRAY_SIZE(platform_fields), NULL)))
            return e;
        pop(&c, old);
    }
    if ((v = json_object_get(j, "cpu"))) {
        old = push_key(&c, "cpu");
        if ((e = parse_cpu(&c, v, node)))
            return e;
        pop(&c, old);
    }
    if ((v = json_object_get(j, "memory"))) {
        field_t mf = {"memory", F_MEM, offsetof(cr_node_t, memory), sizeof(uint64_t)};
        old = push_key(&c, "memory");
        if ((e = field_from_json(&c, node, &mf, v)))
            return e;
        pop(&c, old);
    }
    if ((v = json_object_get(j, "resources"))) {
        old = push_key(&c, "resources");
        if (!json_is_object(v))
            return fail(&c, "expected a mapping of resource: quantity, found %s", hw_json_kind(v));
        const char *rk;
        json_t *rv;
        json_object_foreach(v, rk, rv)
        {
            size_t o2 = push_key(&c, rk);
            int64_t q = 0;
            if (!*rk || strlen(rk) >= sizeof(((cr_resource_t *)0)->name))
                return fail(&c, "a resource name must have 1 to 31 characters");
            if ((e = qty_from_json(&c, rv, &q)))
                return e;
            cr_node_add_resource(node, rk, q);
            pop(&c, o2);
        }
        pop(&c, old);
    }
    if ((e = array_of(&c, j, "devices", &a)))
        return e;
    if (a) {
        old = push_key(&c, "devices");
        if ((e = parse_devices(&c, a, node)))
            return e;
        pop(&c, old);
    }
    if ((e = array_of(&c, j, "links", &a)))
        return e;
    if (a) {
        old = push_key(&c, "links");
        if ((e = parse_links(&c, a, node)))
            return e;
        pop(&c, old);
    }
    if ((e = array_of(&c, j, "domains", &a)))
        return e;
    if (a) {
        old = push_key(&c, "domains");
        if ((e = parse_domains(&c, a, node)))
            return e;
        pop(&c, old);
    }
    if ((e = array_of(&c, j, "nics", &a)))
        return e;
    if (a) {
        old = push_key(&c, "nics");
        size_t i;
        json_t *x;
        json_array_foreach(a, i, x)
        {
            size_t o2 = push_idx(&c, i);
            cr_nic_t *nic = CR_VEC_PUSH(&node->nics);
            nic->numa = -1;
            if ((e = fields_from_json(&c, x, nic, nic_fields, CR_ARRAY_SIZE(nic_fields), NULL)))
                return e;
            pop(&c, o2);
        }
        pop(&c, old);
    }
    if ((e = array_of(&c, j, "warnings", &a)))
        return e;
    if (a) {
        old = push_key(&c, "warnings");
        if ((e = strv_from_json(&c, a, &node->warnings.v, &node->warnings.n)))
            return e;
        node->warnings.cap = node->warnings.n;
        pop(&c, old);
    }
    return 0;
}
