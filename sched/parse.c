/* Parsers for what people type: resource requests, quantities, label
 * selectors and TPU topologies. Every error names the byte it stopped at. */
#include "sched.h"
#include "hw/hw.h"
#include "hw/tpu.h"
#include <ctype.h>
#include <stdio.h>
#include <strings.h>

static int fail(sched_err_t *err, int pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(sched_err_t *err, int pos, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        err->pos = pos;
    }
    return CR_EPARSE;
}

/* "expected X" plus what was found instead, or that the input ended. */
static int fail_found(sched_err_t *err, const char *s, size_t i, size_t len, const char *what)
{
    if (i < len)
        return fail(err, (int)i, "%s, found '%c'", what, s[i]);
    return fail(err, (int)i, "%s at the end", what);
}

/* ---- resources ---- */

static const struct {
    const char *name;
    bool unit;
} predefined[SCHED_R_PREDEFINED] = {
    [SCHED_R_CPU] = {"CPU", false},
    [SCHED_R_MEMORY] = {"memory", false},
    [SCHED_R_GPU] = {"GPU", true},
    [SCHED_R_TPU] = {"TPU", true},
    [SCHED_R_NEURON_CORES] = {"neuron_cores", true},
    [SCHED_R_HPU] = {"HPU", true},
};

void sched_resources_init(sched_syms_t *res)
{
    sched_syms_init(res);
    for (int i = 0; i < SCHED_R_PREDEFINED; i++)
        sched_syms_intern(res, predefined[i].name, strlen(predefined[i].name));
}

bool sched_resource_is_unit(int rid)
{
    return rid >= 0 && rid < SCHED_R_PREDEFINED && predefined[rid].unit;
}

const char *sched_resource_suggest(const char *name, size_t len)
{
    for (int i = 0; i < SCHED_R_PREDEFINED; i++) {
        const char *p = predefined[i].name;
        if (strlen(p) == len && strncasecmp(p, name, len) == 0 && memcmp(p, name, len) != 0)
            return p;
    }
    return NULL;
}

static const struct {
    const char *suffix;
    int64_t mult;
} suffixes[] = {
    {"Ki", 1LL << 10},
    {"Mi", 1LL << 20},
    {"Gi", 1LL << 30},
    {"Ti", 1LL << 40},
    {"Pi", 1LL << 50},
    {"Ei", 1LL << 60},
    {"k", 1000LL},
    {"K", 1000LL},
    {"M", 1000000LL},
    {"G", 1000000000LL},
    {"T", 1000000000000LL},
    {"P", 1000000000000000LL},
    {"E", 1000000000000000000LL},
    /* the forms people type for memory: 64GiB, 512MB */
    {"KiB", 1LL << 10},
    {"MiB", 1LL << 20},
    {"GiB", 1LL << 30},
    {"TiB", 1LL << 40},
    {"PiB", 1LL << 50},
    {"EiB", 1LL << 60},
    {"kB", 1000LL},
    {"KB", 1000LL},
    {"MB", 1000000LL},
    {"GB", 1000000000LL},
    {"TB", 1000000000000LL},
    {"PB", 1000000000000000LL},
    {"EB", 1000000000000000000LL},
};

static int parse_qty_at(const char *s, size_t len, int base, int64_t *out, sched_err_t *err)
{
    size_t i = 0;
    while (i < len && s[i] == ' ')
        i++;
    while (len > i && s[len - 1] == ' ')
        len--;
    if (i == len)
        return fail(err, base + (int)i, "expected a quantity");
    if (s[i] == '-')
        return fail(err, base + (int)i, "negative quantity");
    if (!isdigit((unsigned char)s[i]))
        return fail(err, base + (int)i, "expected a number, found '%c'", s[i]);
    size_t start = i;
    int64_t whole = 0;
    for (; i < len && isdigit((unsigned char)s[i]); i++) {
        if (whole > (INT64_MAX / CR_QTY_ONE - 9) / 10)
            return fail(err, base + (int)start, "quantity too large");
        whole = whole * 10 + (s[i] - '0');
    }
    int64_t frac = 0;
    if (i < len && s[i] == '.') {
        i++;
        int nd = 0;
        if (i >= len || !isdigit((unsigned char)s[i]))
            return fail(err, base + (int)i, "expected a digit after '.'");
        for (; i < len && isdigit((unsigned char)s[i]); i++, nd++) {
            if (nd >= 4) {
                if (s[i] != '0')
                    return fail(err, base + (int)i,
                                "more than 4 decimal places (the resolution is 0.0001)");
                continue;
            }
            frac = frac * 10 + (s[i] - '0');
        }
        for (; nd < 4; nd++)
            frac *= 10;
    }
    int64_t mult = 1;
    if (i < len) {
        size_t k;
        for (k = 0; k < CR_ARRAY_SIZE(suffixes); k++) {
            size_t sl = strlen(suffixes[k].suffix);
            if (len - i == sl && memcmp(s + i, suffixes[k].suffix, sl) == 0)
                break;
        }
        if (k == CR_ARRAY_SIZE(suffixes))
            return fail(err, base + (int)i,
                        "unexpected '%c' in quantity (suffixes: Ki..Ei, KiB..EiB, k M G T P E, "
                        "kB KB MB GB TB PB EB)",
                        s[i]);
        mult = suffixes[k].mult;
    }
    int64_t fixed = whole * CR_QTY_ONE + frac;
    if (fixed > INT64_MAX / mult)
        return fail(err, base + (int)start, "quantity too large");
    *out = fixed * mult;
    return 0;
}

int sched_parse_qty(const char *s, size_t len, int64_t *out, sched_err_t *err)
{
    return parse_qty_at(s, len, 0, out, err);
}

int sched_check_unit_qty(int rid, int64_t qty, char *msg, size_t msgsize)
{
    if (!sched_resource_is_unit(rid))
        return 0;
    const char *name = predefined[rid].name;
    if (rid == SCHED_R_TPU) {
        if (qty != 1 * CR_QTY_ONE && qty != 2 * CR_QTY_ONE && qty != 4 * CR_QTY_ONE &&
            qty != 8 * CR_QTY_ONE) {
            snprintf(msg, msgsize, "TPU requests per host must be 1, 2, 4 or 8 chips");
            return CR_EINVAL;
        }
        return 0;
    }
    if (qty > CR_QTY_ONE && qty % CR_QTY_ONE != 0) {
        snprintf(msg, msgsize,
                 "%s above 1 must be a whole number (a fraction below 1 shares one device)", name);
        return CR_EINVAL;
    }
    if (qty > (int64_t)SCHED_MAX_DEV * CR_QTY_ONE) {
        snprintf(msg, msgsize, "%s above %d devices on one node", name, SCHED_MAX_DEV);
        return CR_EINVAL;
    }
    return 0;
}

static bool is_name_char(char ch)
{
    return isalnum((unsigned char)ch) || ch == '_' || ch == '-' || ch == '.' || ch == '/';
}

int sched_parse_resources(sched_syms_t *res, const char *s, sched_resreq_t *out, sched_err_t *err)
{
    memset(out, 0, sizeof(*out));
    if (err)
        err->pos = -1, err->msg[0] = '\0';
    size_t i = 0, len = strlen(s);
    while (i < len && s[i] == ' ')
        i++;
    if (i == len)
        return 0;
    for (;;) {
        while (i < len && s[i] == ' ')
            i++;
        size_t ns = i;
        if (i < len && !(isalpha((unsigned char)s[i]) || s[i] == '_'))
            return fail(err, (int)i, "expected a resource name, found '%c'", s[i]);
        while (i < len && is_name_char(s[i]))
            i++;
        if (i == ns)
            return fail(err, (int)i, "expected a resource name");
        size_t ne = i;
        while (i < len && s[i] == ' ')
            i++;
        if (i >= len || s[i] != '=')
            return fail_found(err, s, i, len, "expected '=' after the resource name");
        i++;
        size_t qs = i;
        while (i < len && s[i] != ',')
            i++;
        int64_t q;
        int rc = parse_qty_at(s + qs, i - qs, (int)qs, &q, err);
        if (rc)
            return rc;
        if (ne - ns >= 32)
            return fail(err, (int)ns, "resource name longer than 31 characters");
        int rid = sched_syms_find(res, s + ns, ne - ns);
        const char *known = rid < 0 ? sched_resource_suggest(s + ns, ne - ns) : NULL;
        if (known)
            return fail(err, (int)ns, "unknown resource '%.*s': did you mean %s?", (int)(ne - ns),
                        s + ns, known);
        if (rid < 0) {
            if (res->n >= SCHED_MAX_RES)
                return fail(err, (int)ns, "too many distinct resource names (at most %d)",
                            SCHED_MAX_RES);
            rid = sched_syms_intern(res, s + ns, ne - ns);
        }
        for (int k = 0; k < out->n; k++)
            if (out->id[k] == rid)
                return fail(err, (int)ns, "resource '%s' given twice", res->str[rid]);
        char msg[128];
        if (sched_check_unit_qty(rid, q, msg, sizeof(msg)))
            return fail(err, (int)qs + (s[qs] == ' '), "%s", msg);
        if (q > 0) {
            if (out->n == SCHED_REQ_MAX)
                return fail(err, (int)ns, "more than %d resources in one request", SCHED_REQ_MAX);
            out->id[out->n] = (uint8_t)rid;
            out->qty[out->n] = q;
            out->n++;
        }
        if (i == len)
            return 0;
        i++; /* ',' */
        if (i == len)
            return fail(err, (int)i, "expected a resource after ','");
    }
}

void sched_format_qty(int rid, int64_t q, char *buf, size_t size)
{
    if (rid == SCHED_R_MEMORY && q % CR_QTY_ONE == 0) {
        int64_t b = q / CR_QTY_ONE;
        static const char *bin[] = {"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
        for (int k = 0; k < 6; k++) {
            int64_t m = 1LL << (10 * (6 - k));
            if (b >= m && b % m == 0) {
                snprintf(buf, size, "%lld%s", (long long)(b / m), bin[k]);
                return;
            }
        }
    }
    if (q % CR_QTY_ONE == 0) {
        snprintf(buf, size, "%lld", (long long)(q / CR_QTY_ONE));
        return;
    }
    char tmp[8];
    snprintf(tmp, sizeof(tmp), "%04lld", (long long)(q % CR_QTY_ONE));
    for (int k = 3; k > 0 && tmp[k] == '0'; k--)
        tmp[k] = '\0';
    snprintf(buf, size, "%lld.%s", (long long)(q / CR_QTY_ONE), tmp);
}

void sched_format_resources(const sched_syms_t *res, const sched_resreq_t *r, cr_buf_t *out)
{
    for (int k = 0; k < r->n; k++) {
        char q[48];
        sched_format_qty(r->id[k], r->qty[k], q, sizeof(q));
        cr_buf_printf(out, "%s%s=%s", k ? "," : "", sched_syms_name(res, r->id[k]), q);
    }
    if (!r->n)
        cr_buf_printf(out, "(nothing)");
}

/* ---- selectors ---- */

static bool is_label_char(char ch)
{
    return isalnum((unsigned char)ch) || ch == '_' || ch == '-' || ch == '.' || ch == '/';
}

static size_t skip_sp(const char *s, size_t i, size_t len)
{
    while (i < len && isspace((unsigned char)s[i]))
        i++;
    return i;
}

static bool word_at(const char *s, size_t i, size_t len, const char *w)
{
    size_t n = strlen(w);
    return i + n <= len && memcmp(s + i, w, n) == 0 && (i + n == len || !is_label_char(s[i + n]));
}

static int parse_value(sched_syms_t *labels, const char *s, size_t *ip, size_t len, int32_t *out,
                       sched_err_t *err)
{
    size_t i = skip_sp(s, *ip, len), vs = i;
    while (i < len && is_label_char(s[i]))
        i++;
    if (i == vs)
        return fail_found(err, s, i, len, "expected a label value");
    if (i - vs > 255)
        return fail(err, (int)vs, "label value longer than 255 characters");
    *out = sched_syms_intern(labels, s + vs, i - vs);
    *ip = i;
    return 0;
}

/* Values of corral.io/accelerator-type name canonical types: a Ray type
 * name becomes corral's ("AMD-Instinct-MI300X-OAM" is MI300X), and a
 * family name all of its types ("Intel-GAUDI": k=v becomes k in (Gaudi,
 * Gaudi2, Gaudi3), k!=v k notin (...)), so Ray users' selectors work. */
static int canon_types(sched_syms_t *labels, sched_term_t *t, int pos, sched_err_t *err)
{
    if (strcmp(labels->str[t->key], "corral.io/accelerator-type") != 0 || !t->nvals)
        return 0;
    int32_t vals[SCHED_SEL_VALS];
    int n = 0;
    for (int k = 0; k < t->nvals; k++) {
        const char *types[SCHED_SEL_VALS];
        size_t nt = hw_sku_expand(labels->str[t->vals[k]], types, SCHED_SEL_VALS);
        if (!nt) {
            if (n == SCHED_SEL_VALS)
                return fail(err, pos, "more than %d accelerator types in one term", SCHED_SEL_VALS);
            vals[n++] = t->vals[k]; /* a type corral does not know: as written */
            continue;
        }
        for (size_t j = 0; j < nt; j++) {
            int32_t v = sched_syms_intern(labels, types[j], strlen(types[j]));
            bool dup = false;
            for (int m = 0; m < n; m++)
                dup |= vals[m] == v;
            if (dup)
                continue;
            if (n == SCHED_SEL_VALS)
                return fail(err, pos, "more than %d accelerator types in one term", SCHED_SEL_VALS);
            vals[n++] = v;
        }
    }
    if (n > 1 && t->op == SCHED_OP_EQ)
        t->op = SCHED_OP_IN;
    else if (n > 1 && t->op == SCHED_OP_NE)
        t->op = SCHED_OP_NOTIN;
    memcpy(t->vals, vals, (size_t)n * sizeof(vals[0]));
    t->nvals = (uint8_t)n;
    return 0;
}

static bool val_in(const sched_term_t *t, int32_t v)
{
    for (int k = 0; k < t->nvals; k++)
        if (t->vals[k] == v)
            return true;
    return false;
}

/* Whether the terms on one key can all hold at once. */
static bool key_satisfiable(const sched_selector_t *sel, int32_t key)
{
    bool need = false, forbid = false, have_set = false;
    int32_t set[SCHED_SEL_VALS];
    int nset = 0;
    for (int i = 0; i < sel->n; i++) {
        const sched_term_t *t = &sel->t[i];
        if (t->key != key)
            continue;
        if (t->op == SCHED_OP_NOTEXISTS)
            forbid = true;
        if (t->op == SCHED_OP_EXISTS || t->op == SCHED_OP_EQ || t->op == SCHED_OP_IN)
            need = true;
        if (t->op == SCHED_OP_EQ || t->op == SCHED_OP_IN) {
            if (!have_set) {
                memcpy(set, t->vals, t->nvals * sizeof(int32_t));
                nset = t->nvals;
                have_set = true;
            } else {
                int m = 0;
                for (int k = 0; k < nset; k++)
                    if (val_in(t, set[k]))
                        set[m++] = set[k];
                nset = m;
            }
        }
    }
    if (need && forbid)
        return false;
    if (!have_set)
        return true;
    for (int i = 0; i < sel->n; i++) {
        const sched_term_t *t = &sel->t[i];
        if (t->key != key || (t->op != SCHED_OP_NE && t->op != SCHED_OP_NOTIN))
            continue;
        int m = 0;
        for (int k = 0; k < nset; k++)
            if (!val_in(t, set[k]))
                set[m++] = set[k];
        nset = m;
    }
    return nset > 0;
}

int sched_parse_selector(sched_syms_t *labels, const char *s, sched_selector_t *out,
                         sched_err_t *err)
{
    memset(out, 0, sizeof(*out));
    if (err)
        err->pos = -1, err->msg[0] = '\0';
    size_t len = strlen(s), i = skip_sp(s, 0, len);
    if (i == len)
        return 0;
    for (;;) {
        i = skip_sp(s, i, len);
        size_t ts = i;
        if (out->n == SCHED_SEL_MAX)
            return fail(err, (int)i, "more than %d terms in one selector", SCHED_SEL_MAX);
        sched_term_t *t = &out->t[out->n];
        bool neg = false;
        if (i < len && s[i] == '!') {
            neg = true;
            i = skip_sp(s, i + 1, len);
        }
        size_t ks = i;
        while (i < len && is_label_char(s[i]))
            i++;
        if (i == ks)
            return fail_found(err, s, i, len, "expected a label key");
        if (i - ks > 255)
            return fail(err, (int)ks, "label key longer than 255 characters");
        t->key = sched_syms_intern(labels, s + ks, i - ks);
        i = skip_sp(s, i, len);
        if (neg) {
            t->op = SCHED_OP_NOTEXISTS;
        } else if (i + 1 < len && s[i] == '!' && s[i + 1] == '=') {
            t->op = SCHED_OP_NE;
            i += 2;
        } else if (i < len && s[i] == '=') {
            t->op = SCHED_OP_EQ;
            i += (i + 1 < len && s[i + 1] == '=') ? 2 : 1;
        } else if (word_at(s, i, len, "in") || word_at(s, i, len, "notin")) {
            t->op = s[i] == 'i' ? SCHED_OP_IN : SCHED_OP_NOTIN;
            i = skip_sp(s, i + (t->op == SCHED_OP_IN ? 2 : 5), len);
            if (i >= len || s[i] != '(')
                return fail(err, (int)i, "expected '(' after '%s'",
                            t->op == SCHED_OP_IN ? "in" : "notin");
            i++;
            for (;;) {
                if (t->nvals == SCHED_SEL_VALS)
                    return fail(err, (int)i, "more than %d values in one list", SCHED_SEL_VALS);
                int rc = parse_value(labels, s, &i, len, &t->vals[t->nvals], err);
                if (rc)
                    return rc;
                t->nvals++;
                i = skip_sp(s, i, len);
                if (i < len && s[i] == ',') {
                    i++;
                    continue;
                }
                if (i < len && s[i] == ')') {
                    i++;
                    break;
                }
                return fail(err, (int)i, "expected ',' or ')' in the value list");
            }
        } else if (word_at(s, i, len, "exists")) {
            t->op = SCHED_OP_EXISTS;
            i += 6;
        } else {
            t->op = SCHED_OP_EXISTS;
        }
        if (t->op == SCHED_OP_EQ || t->op == SCHED_OP_NE) {
            int rc = parse_value(labels, s, &i, len, &t->vals[0], err);
            if (rc)
                return rc;
            t->nvals = 1;
        }
        int rc = canon_types(labels, t, (int)ts, err);
        if (rc)
            return rc;
        out->n++;
        if (!key_satisfiable(out, t->key))
            return fail(err, (int)ts,
                        "selector can never match: this term contradicts an "
                        "earlier one on '%s'",
                        labels->str[t->key]);
        i = skip_sp(s, i, len);
        if (i == len)
            return 0;
        if (s[i] != ',')
            return fail(err, (int)i, "expected ',' between terms, found '%c'", s[i]);
        i++;
    }
}

void sched_format_selector(const sched_syms_t *labels, const sched_selector_t *sel, cr_buf_t *out)
{
    static const char *ops[] = {"=", "!=", " in ", " notin ", "", ""};
    for (int i = 0; i < sel->n; i++) {
        const sched_term_t *t = &sel->t[i];
        cr_buf_printf(out, "%s%s%s%s", i ? "," : "", t->op == SCHED_OP_NOTEXISTS ? "!" : "",
                      sched_syms_name(labels, t->key), ops[t->op]);
        if (t->op == SCHED_OP_IN || t->op == SCHED_OP_NOTIN) {
            cr_buf_printf(out, "(");
            for (int k = 0; k < t->nvals; k++)
                cr_buf_printf(out, "%s%s", k ? "," : "", sched_syms_name(labels, t->vals[k]));
            cr_buf_printf(out, ")");
        } else if (t->op == SCHED_OP_EQ || t->op == SCHED_OP_NE) {
            cr_buf_printf(out, "%s", sched_syms_name(labels, t->vals[0]));
        }
    }
}

/* ---- TPU topologies ---- */

/* The syntax is hw/tpu_topology.c's (one parser for discovery and
 * scheduling); the scheduler keeps its own, smaller limits. */
int sched_parse_tpu_topology(const char *s, sched_tpu_topo_t *out, sched_err_t *err)
{
    memset(out, 0, sizeof(*out));
    tpu_topology_t t;
    size_t pos;
    const char *why;
    if (tpu_topology_parse_at(s, &t, &pos, &why))
        return fail(err, (int)pos, "%s", why);
    int64_t chips = 1;
    for (int d = 0; d < t.ndims; d++) {
        if (t.dims[d] > 256)
            return fail(err, 0, "dimension larger than 256");
        out->dims[d] = t.dims[d];
        chips *= t.dims[d];
    }
    if (chips > 65536)
        return fail(err, 0, "more than 65536 chips");
    out->ndims = t.ndims;
    out->chips = (int)chips;
    return 0;
}

bool sched_tpu_submesh(int k, int *dx, int *dy)
{
    static const int shapes[][3] = {{1, 1, 1}, {2, 1, 2}, {4, 2, 2}, {8, 2, 4}};
    for (size_t i = 0; i < CR_ARRAY_SIZE(shapes); i++)
        if (shapes[i][0] == k) {
            *dx = shapes[i][1];
            *dy = shapes[i][2];
            return true;
        }
    return false;
}

bool sched_bundle_same(const sched_bundle_t *a, const sched_bundle_t *b)
{
    if (a->req.n != b->req.n || a->sel.n != b->sel.n)
        return false;
    for (int k = 0; k < a->req.n; k++)
        if (a->req.id[k] != b->req.id[k] || a->req.qty[k] != b->req.qty[k])
            return false;
    for (int k = 0; k < a->sel.n; k++) {
        const sched_term_t *x = &a->sel.t[k], *y = &b->sel.t[k];
        if (x->key != y->key || x->op != y->op || x->nvals != y->nvals ||
            memcmp(x->vals, y->vals, x->nvals * sizeof(x->vals[0])))
            return false;
    }
    return true;
}
