/* Parser for the KFD topology's `properties` files. The kernel writes one
 * "<key> <value>" pair a line with %u or %llu, so anything else (a sign, a
 * hex digit, a missing value) means the file is not what we think it is,
 * and the device it describes is better left off than guessed at. */
#include "amd_kfd.h"
#include <stddef.h>
#include <stdio.h>

static bool is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

void hw_kfd_props_free(hw_kfd_props_t *p)
{
    CR_VEC_FREE(p);
}

bool hw_kfd_props_get(const hw_kfd_props_t *p, const char *key, uint64_t *out)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->v[i].key, key) == 0) {
            *out = p->v[i].value;
            return true;
        }
    return false;
}

/* One line (without its newline): blank, or "<key><blanks><digits><blanks>". */
static int parse_line(const char *s, size_t n, unsigned lineno, hw_kfd_props_t *out, char *why,
                      size_t whysize)
{
    size_t i = 0;
    while (i < n && is_blank(s[i]))
        i++;
    if (i == n)
        return 0;
    size_t k0 = i;
    while (i < n && is_key_char(s[i]))
        i++;
    size_t klen = i - k0;
    if (klen == 0 || klen >= HW_KFD_KEY_MAX || i == n || !is_blank(s[i])) {
        snprintf(why, whysize,
                 "line %u: expected '<key> <unsigned number>' with a lower-case "
                 "key of at most %d characters",
                 lineno, HW_KFD_KEY_MAX - 1);
        return CR_EPARSE;
    }
    while (i < n && is_blank(s[i]))
        i++;
    uint64_t v = 0;
    size_t d0 = i;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned digit = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - digit) / 10) {
            snprintf(why, whysize, "line %u: value of '%.*s' does not fit in 64 bits", lineno,
                     (int)klen, s + k0);
            return CR_EPARSE;
        }
        v = v * 10 + digit;
    }
    size_t dlen = i - d0;
    while (i < n && is_blank(s[i]))
        i++;
    if (dlen == 0 || i != n) {
        snprintf(why, whysize, "line %u: expected an unsigned decimal number after '%.*s'", lineno,
                 (int)klen, s + k0);
        return CR_EPARSE;
    }
    for (size_t e = 0; e < out->n; e++)
        if (strlen(out->v[e].key) == klen && memcmp(out->v[e].key, s + k0, klen) == 0) {
            snprintf(why, whysize, "line %u: key '%.*s' appears twice", lineno, (int)klen, s + k0);
            return CR_EPARSE;
        }
    if (out->n == HW_KFD_MAX_KEYS) {
        snprintf(why, whysize, "line %u: more than %d keys", lineno, HW_KFD_MAX_KEYS);
        return CR_EPARSE;
    }
    hw_kfd_kv_t *kv = CR_VEC_PUSH(out);
    memcpy(kv->key, s + k0, klen);
    kv->key[klen] = '\0';
    kv->value = v;
    return 0;
}

int hw_kfd_props_parse(const char *text, size_t len, hw_kfd_props_t *out, char *why, size_t whysize)
{
    if (memchr(text, '\0', len)) {
        snprintf(why, whysize, "contains a NUL byte; expected text");
        return CR_EPARSE;
    }
    unsigned lineno = 1;
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        int err = parse_line(text + pos, end - pos, lineno, out, why, whysize);
        if (err)
            return err;
        pos = end + 1;
        lineno++;
    }
    return 0;
}

/* ---- typed views: one row per key, which nodes need it, its range ---- */

enum { OPTIONAL = 0, REQUIRED = 1, REQUIRED_GPU = 2 };

typedef struct field {
    const char *key;
    size_t off; /* of a uint64_t in the view */
    int need;
    uint64_t min, max;
    size_t present; /* offset of a bool set when the key was there, or 0 */
} field_t;

/* clang-format off */
#define NODE_F(k, need, lo, hi) {#k, offsetof(hw_kfd_node_t, k), need, lo, hi, 0}
static const field_t node_fields[] = {
    NODE_F(cpu_cores_count, OPTIONAL, 0, UINT32_MAX),
    NODE_F(simd_count, REQUIRED, 0, UINT32_MAX),
    /* CUs = simd_count / simd_per_cu: a GPU without it cannot be sized */
    NODE_F(simd_per_cu, REQUIRED_GPU, 1, 64),
    NODE_F(vendor_id, REQUIRED_GPU, 0, 0xffff),
    NODE_F(device_id, REQUIRED_GPU, 0, 0xffff),
    /* (bus << 8) | devfn */
    NODE_F(location_id, REQUIRED_GPU, 0, 0xffff),
    NODE_F(domain, OPTIONAL, 0, UINT32_MAX),
    {"drm_render_minor", offsetof(hw_kfd_node_t, drm_render_minor), OPTIONAL, 0, UINT32_MAX,
     offsetof(hw_kfd_node_t, has_drm_render_minor)},
    NODE_F(gfx_target_version, OPTIONAL, 0, UINT32_MAX),
    NODE_F(num_xcc, OPTIONAL, 0, 1024),
    NODE_F(unique_id, OPTIONAL, 0, UINT64_MAX),
    NODE_F(hive_id, OPTIONAL, 0, UINT64_MAX),
};

#define LINK_F(k, need) {#k, offsetof(hw_kfd_iolink_t, k), need, 0, UINT32_MAX, 0}
static const field_t iolink_fields[] = {
    LINK_F(type, REQUIRED),
    LINK_F(node_from, REQUIRED),
    LINK_F(node_to, REQUIRED),
    LINK_F(weight, REQUIRED),
    LINK_F(min_bandwidth, OPTIONAL),
    LINK_F(max_bandwidth, OPTIONAL),
};
/* clang-format on */

static const field_t membank_fields[] = {
    {"heap_type", offsetof(hw_kfd_membank_t, heap_type), OPTIONAL, 0, UINT32_MAX, 0},
    {"size_in_bytes", offsetof(hw_kfd_membank_t, size_in_bytes), REQUIRED, 0, UINT64_MAX, 0},
};

static int fill(const hw_kfd_props_t *p, const field_t *f, size_t nf, void *view, bool gpu,
                char *why, size_t whysize)
{
    for (size_t i = 0; i < nf; i++) {
        uint64_t v;
        bool need = f[i].need == REQUIRED || (f[i].need == REQUIRED_GPU && gpu);
        if (!hw_kfd_props_get(p, f[i].key, &v)) {
            if (need) {
                snprintf(why, whysize, "key '%s' is missing%s", f[i].key,
                         f[i].need == REQUIRED_GPU ? " (a GPU node has it)" : "");
                return CR_EPARSE;
            }
            continue;
        }
        /* the range matters only where the value is used */
        if ((need || f[i].need == OPTIONAL) && (v < f[i].min || v > f[i].max)) {
            snprintf(why, whysize, "'%s %llu' is out of range; expected %llu to %llu", f[i].key,
                     (unsigned long long)v, (unsigned long long)f[i].min,
                     (unsigned long long)f[i].max);
            return CR_EPARSE;
        }
        *(uint64_t *)((char *)view + f[i].off) = v;
        if (f[i].present)
            *(bool *)((char *)view + f[i].present) = true;
    }
    return 0;
}

static int parse_view(const char *text, size_t len, const field_t *f, size_t nf, void *view,
                      size_t viewsize, bool (*is_gpu)(const hw_kfd_props_t *), char *why,
                      size_t whysize)
{
    hw_kfd_props_t p = {0};
    memset(view, 0, viewsize);
    int err = hw_kfd_props_parse(text, len, &p, why, whysize);
    if (!err)
        err = fill(&p, f, nf, view, is_gpu && is_gpu(&p), why, whysize);
    hw_kfd_props_free(&p);
    return err;
}

/* A node with SIMDs is a GPU (CPU nodes report simd_count 0). */
static bool node_is_gpu(const hw_kfd_props_t *p)
{
    uint64_t simd = 0;
    return hw_kfd_props_get(p, "simd_count", &simd) && simd > 0;
}

int hw_kfd_node_parse(const char *text, size_t len, hw_kfd_node_t *out, char *why, size_t whysize)
{
    return parse_view(text, len, node_fields, CR_ARRAY_SIZE(node_fields), out, sizeof(*out),
                      node_is_gpu, why, whysize);
}

int hw_kfd_iolink_parse(const char *text, size_t len, hw_kfd_iolink_t *out, char *why,
                        size_t whysize)
{
    return parse_view(text, len, iolink_fields, CR_ARRAY_SIZE(iolink_fields), out, sizeof(*out),
                      NULL, why, whysize);
}

int hw_kfd_membank_parse(const char *text, size_t len, hw_kfd_membank_t *out, char *why,
                         size_t whysize)
{
    return parse_view(text, len, membank_fields, CR_ARRAY_SIZE(membank_fields), out, sizeof(*out),
                      NULL, why, whysize);
}

int hw_amd_ras_parse(const char *text, size_t len, uint64_t *ue, uint64_t *ce, char *why,
                     size_t whysize)
{
    bool have_ue = false, have_ce = false;
    size_t line = 0;
    for (size_t i = 0; i < len;) {
        size_t end = i;
        while (end < len && text[end] != '\n')
            end++;
        line++;
        char key[8], num[24];
        size_t k = 0, n = 0, j = i;
        while (j < end && text[j] != ':' && k + 1 < sizeof(key))
            key[k++] = text[j++];
        key[k] = '\0';
        if (j == i && end == i) { /* an empty line (the last newline) */
            i = end + 1;
            continue;
        }
        if (j >= end || text[j] != ':') {
            snprintf(why, whysize, "line %zu: expected 'KEY: COUNT'", line);
            return CR_EPARSE;
        }
        j++;
        while (j < end && text[j] == ' ')
            j++;
        while (j < end && n + 1 < sizeof(num) && text[j] >= '0' && text[j] <= '9')
            num[n++] = text[j++];
        num[n] = '\0';
        if (!n || j != end || n > 19) {
            snprintf(why, whysize, "line %zu (%s): expected a decimal count", line, key);
            return CR_EPARSE;
        }
        uint64_t v = strtoull(num, NULL, 10);
        if (strcmp(key, "ue") == 0)
            *ue = v, have_ue = true;
        else if (strcmp(key, "ce") == 0)
            *ce = v, have_ce = true;
        i = end + 1;
    }
    if (!have_ue || !have_ce) {
        snprintf(why, whysize, "no '%s:' line", have_ue ? "ce" : "ue");
        return CR_EPARSE;
    }
    return 0;
}
