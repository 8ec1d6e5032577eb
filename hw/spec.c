/* The hardware spec loader (the sim backend's input): a YAML or JSON file
 * that describes one node exactly as the node description does
 * (docs/node-description.md).
 *
 * libfyaml's event parser turns the text into jansson values while we note
 * where each value was written. hw_node_from_json then checks the schema and
 * names a bad value by its path ("devices[3].memory"); we walk that path
 * through the notes to tell the person the line and column to fix. */
#include "hw.h"
#include <libfyaml.h>
#include <stdio.h>
#include <sys/stat.h>

/* A spec describes one node: a few kilobytes. The caps keep a wrong file
 * (or a hostile one) from costing gigabytes once it is a node. */
#define SPEC_MAX_BYTES (8u << 20)
#define SPEC_MAX_DEPTH 64
#define SPEC_MAX_DEVICES 4096

typedef struct pos {
    int line, col; /* 1-based; 0 when libfyaml gave no mark */
} pos_t;

/* Where a value was written, mirroring the jansson tree. */
typedef struct pnode pnode_t;
struct pnode {
    pos_t at;           /* the value */
    pos_t key;          /* its key, when it sits in a mapping */
    char *name;         /* that key; NULL in a sequence */
    size_t src, srclen; /* a plain scalar's text in the input (for hints) */
    CR_VEC(pnode_t) kids;
};

/* A mapping or sequence being built. `pn` points into the parent's kids,
 * which stay put: only the innermost open container grows. */
typedef struct frame {
    json_t *val; /* borrowed: its parent (or the builder) holds it */
    pnode_t *pn;
    bool map;
    char *key; /* the key waiting for its value; NULL when none */
    pos_t key_at;
    json_t *merges; /* values of "<<" keys, applied at the mapping's end */
    char *anchor;
} frame_t;

typedef struct anchor {
    char *name;
    json_t *val;
} anchor_t;

typedef struct builder {
    const char *name, *data;
    const char *what; /* "hardware spec", "SKU file": for messages */
    json_t *root;
    pnode_t proot;
    CR_VEC(frame_t) stack;
    CR_VEC(anchor_t) anchors;
    int ndocs;
    char *err;
} builder_t;

__attribute__((format(printf, 3, 4))) static int fail_at(builder_t *b, pos_t at, const char *fmt,
                                                         ...)
{
    if (b->err)
        return CR_EPARSE;
    va_list ap;
    va_start(ap, fmt);
    char tmp[1024];
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    b->err = cr_asprintf("%s:%d:%d: %s", b->name, at.line ? at.line : 1, at.col ? at.col : 1, tmp);
    return CR_EPARSE;
}

static pos_t mark_pos(const struct fy_mark *m, pos_t fallback)
{
    if (!m)
        return fallback;
    return (pos_t){m->line + 1, m->column + 1};
}

static void pnode_fini(pnode_t *p)
{
    for (size_t i = 0; i < p->kids.n; i++)
        pnode_fini(&p->kids.v[i]);
    CR_VEC_FREE(&p->kids);
    CR_FREE(p->name);
}

static void builder_fini(builder_t *b)
{
    for (size_t i = 0; i < b->stack.n; i++) {
        free(b->stack.v[i].key);
        free(b->stack.v[i].anchor);
        json_decref(b->stack.v[i].merges);
    }
    CR_VEC_FREE(&b->stack);
    for (size_t i = 0; i < b->anchors.n; i++) {
        free(b->anchors.v[i].name);
        json_decref(b->anchors.v[i].val);
    }
    CR_VEC_FREE(&b->anchors);
    json_decref(b->root);
    pnode_fini(&b->proot);
    free(b->err);
}

/* ---- scalars: the YAML 1.2 core schema, minus what JSON cannot hold ---- */

static bool is_word(const char *s, const char *const *words)
{
    for (; *words; words++)
        if (strcmp(s, *words) == 0)
            return true;
    return false;
}

static size_t skip_digits(const char *s, size_t i)
{
    while (s[i] >= '0' && s[i] <= '9')
        i++;
    return i;
}

/* [-+]?(digits(.digits*)?|.digits)([eE][-+]?digits)? with a '.' or an
 * exponent (else it is an integer). */
static bool is_float(const char *s)
{
    size_t i = (*s == '-' || *s == '+') ? 1 : 0, d0 = i;
    bool frac = false;
    i = skip_digits(s, i);
    size_t nint = i - d0;
    if (s[i] == '.') {
        size_t f0 = ++i;
        i = skip_digits(s, i);
        if (nint == 0 && i == f0)
            return false;
        frac = true;
    } else if (nint == 0) {
        return false;
    }
    bool exp = false;
    if (s[i] == 'e' || s[i] == 'E') {
        size_t k = i + 1;
        if (s[k] == '-' || s[k] == '+')
            k++;
        size_t e0 = k;
        k = skip_digits(s, k);
        if (k == e0)
            return false;
        i = k;
        exp = true;
    }
    return s[i] == '\0' && (frac || exp);
}

static bool is_int(const char *s, int *base, const char **digits)
{
    static const struct {
        const char *prefix;
        int base;
        const char *alphabet;
    } forms[] = {
        {"0x", 16, "0123456789abcdefABCDEF"},
        {"0o", 8, "01234567"},
    };
    for (size_t f = 0; f < CR_ARRAY_SIZE(forms); f++) {
        if (cr_str_has_prefix(s, forms[f].prefix) && s[2] &&
            strspn(s + 2, forms[f].alphabet) == strlen(s + 2)) {
            *base = forms[f].base;
            *digits = s + 2;
            return true;
        }
    }
    const char *p = (*s == '-' || *s == '+') ? s + 1 : s;
    *base = 10;
    *digits = s;
    return *p && strspn(p, "0123456789") == strlen(p);
}

/* A plain scalar becomes null, a boolean or a number when it reads as
 * one; anything quoted, or tagged !!str, stays a string. NULL: not UTF-8. */
static json_t *scalar_to_json(const char *s, size_t len, bool plain)
{
    static const char *const nulls[] = {"~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    char tmp[80];
    if (!plain || len >= sizeof(tmp))
        return json_stringn(s, len);
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    if (len == 0 || is_word(tmp, nulls))
        return json_null();
    if (is_word(tmp, trues))
        return json_true();
    if (is_word(tmp, falses))
        return json_false();
    int base;
    const char *digits;
    if (is_int(tmp, &base, &digits)) {
        errno = 0;
        char *end;
        long long v = strtoll(digits, &end, base);
        if (errno == 0 && *end == '\0')
            return json_integer(v);
        /* too large for 64 bits: still a number, which the schema rejects
         * with "out of range" rather than "found a string" */
        if (base == 10)
            return json_real(strtod(tmp, NULL));
        return json_stringn(s, len);
    }
    if (is_float(tmp)) {
        double v = strtod(tmp, NULL);
        json_t *j = json_real(v); /* NULL for inf: keep the text */
        return j ? j : json_stringn(s, len);
    }
    return json_stringn(s, len);
}

static bool tag_forces_string(struct fy_token *tag)
{
    if (!tag)
        return false;
    size_t len;
    const char *t = fy_token_get_text(tag, &len);
    if (!t)
        return false;
    return (len == 1 && t[0] == '!') || (len == 21 && memcmp(t, "tag:yaml.org,2002:str", 21) == 0);
}

/* ---- building the tree ---- */

static frame_t *top(builder_t *b)
{
    return b->stack.n ? &b->stack.v[b->stack.n - 1] : NULL;
}

static const pnode_t *find_kid(const pnode_t *p, const char *name)
{
    for (size_t i = 0; i < p->kids.n; i++)
        if (p->kids.v[i].name && strcmp(p->kids.v[i].name, name) == 0)
            return &p->kids.v[i];
    return NULL;
}

/* Takes a key for the open mapping f. */
static int take_key(builder_t *b, frame_t *f, const char *s, size_t len, pos_t at)
{
    if (memchr(s, '\0', len))
        return fail_at(b, at, "a key must not contain a NUL character");
    char *key = cr_strndup(s, len);
    json_t *probe = json_string(key);
    if (!probe) {
        free(key);
        return fail_at(b, at, "a key must be valid UTF-8");
    }
    json_decref(probe);
    if (strcmp(key, "<<") != 0 && json_object_get(f->val, key)) {
        const pnode_t *first = find_kid(f->pn, key);
        int e = fail_at(b, at,
                        "duplicate key '%s' (first written at line %d, column %d); a key "
                        "may appear once in a mapping",
                        key, first ? first->key.line : 0, first ? first->key.col : 0);
        free(key);
        return e;
    }
    f->key = key;
    f->key_at = at;
    return 0;
}

/* Places v (a new reference, taken in all cases) where the parser is: the
 * root, the value of the waiting key, or the next item of a sequence.
 * Returns the note for it, or NULL on error. */
static pnode_t *place(builder_t *b, json_t *v, pos_t at)
{
    frame_t *f = top(b);
    if (!f) {
        if (b->root) {
            json_decref(v);
            fail_at(b, at, "a spec holds one node: a second one starts here");
            return NULL;
        }
        b->root = v;
        b->proot.at = at;
        return &b->proot;
    }
    pnode_t *kid = CR_VEC_PUSH(&f->pn->kids);
    kid->at = at;
    if (!f->map) {
        json_array_append_new(f->val, v);
        return kid;
    }
    kid->name = f->key;
    kid->key = f->key_at;
    f->key = NULL;
    if (!kid->at.line)
        kid->at = kid->key;
    if (strcmp(kid->name, "<<") == 0) {
        if (!f->merges)
            f->merges = json_array();
        json_array_append_new(f->merges, v);
    } else {
        json_object_set_new(f->val, kid->name, v);
    }
    return kid;
}

static void keep_anchor(builder_t *b, struct fy_token *anchor, json_t *v)
{
    if (!anchor)
        return;
    size_t len;
    const char *t = fy_token_get_text(anchor, &len);
    if (!t)
        return;
    anchor_t *a = CR_VEC_PUSH(&b->anchors);
    a->name = cr_strndup(t, len);
    a->val = json_incref(v);
}

static char *anchor_name(struct fy_token *anchor)
{
    size_t len;
    const char *t = anchor ? fy_token_get_text(anchor, &len) : NULL;
    return t ? cr_strndup(t, len) : NULL;
}

/* YAML merge keys: `<<: *base` (or a list of them) adds the keys the
 * mapping does not state itself; earlier sources win over later ones. */
static int apply_merges(builder_t *b, frame_t *f)
{
    if (!f->merges)
        return 0;
    const pnode_t *mp = find_kid(f->pn, "<<");
    size_t i;
    json_t *src;
    json_array_foreach(f->merges, i, src)
    {
        json_t *list = src;
        if (json_is_object(src)) {
            list = json_array();
            json_array_append(list, src);
        } else {
            json_incref(list);
        }
        size_t k;
        json_t *m;
        int err = 0;
        json_array_foreach(list, k, m)
        {
            if (!json_is_object(m)) {
                err = fail_at(b, mp ? mp->at : f->pn->at,
                              "a merge key (<<) takes a mapping or a list of mappings");
                break;
            }
            const char *key;
            json_t *val;
            json_object_foreach(m, key, val)
            {
                if (!json_object_get(f->val, key))
                    json_object_set(f->val, key, val);
            }
        }
        json_decref(list);
        if (err)
            return err;
    }
    return 0;
}

static int on_start(builder_t *b, struct fy_event *ev, bool map, pos_t at)
{
    frame_t *f = top(b);
    if (f && f->map && !f->key)
        return fail_at(b, at, "a key must be a plain string, not a %s", map ? "mapping" : "list");
    if (b->stack.n >= SPEC_MAX_DEPTH)
        return fail_at(b, at, "nested deeper than %d levels; a node description is flat",
                       SPEC_MAX_DEPTH);
    json_t *v = map ? json_object() : json_array();
    pnode_t *pn = place(b, v, at);
    if (!pn)
        return CR_EPARSE;
    frame_t *nf = CR_VEC_PUSH(&b->stack);
    nf->val = v;
    nf->pn = pn;
    nf->map = map;
    nf->anchor = anchor_name(map ? ev->mapping_start.anchor : ev->sequence_start.anchor);
    return 0;
}

static int on_end(builder_t *b)
{
    frame_t *f = top(b);
    int err = f->map ? apply_merges(b, f) : 0;
    if (!err && f->anchor) {
        anchor_t *a = CR_VEC_PUSH(&b->anchors);
        a->name = f->anchor;
        a->val = json_incref(f->val);
        f->anchor = NULL;
    }
    free(f->key);
    free(f->anchor);
    json_decref(f->merges);
    b->stack.n--;
    return err;
}

/* The value of a single-quoted scalar from its text between the quotes:
 * '' is a quote, and a run of white space holding line breaks folds to a
 * space (one break) or to one newline fewer than it holds. Done here
 * because libfyaml 0.7.12 leaks when it formats one with eight or more ''
 * (found by fuzz_spec). */
static void single_quoted(const char *r, size_t n, cr_buf_t *out)
{
    cr_buf_append(out, "", 0);
    for (size_t i = 0; i < n;) {
        if (r[i] == '\'' && i + 1 < n && r[i + 1] == '\'') {
            cr_buf_append(out, "'", 1);
            i += 2;
            continue;
        }
        if (!strchr(" \t\r\n", r[i])) {
            cr_buf_append(out, r + i, 1);
            i++;
            continue;
        }
        size_t j = i;
        int breaks = 0;
        for (; j < n && strchr(" \t\r\n", r[j]); j++)
            breaks += r[j] == '\n' || (r[j] == '\r' && (j + 1 >= n || r[j + 1] != '\n'));
        if (breaks == 0)
            cr_buf_append(out, r + i, j - i);
        else if (breaks == 1)
            cr_buf_append(out, " ", 1);
        else
            for (int k = 1; k < breaks; k++)
                cr_buf_append(out, "\n", 1);
        i = j;
    }
}

/* Places the scalar s (a key or a value) in the tree. */
static int scalar_value(builder_t *b, struct fy_event *ev, pos_t at, const char *s, size_t len,
                        enum fy_scalar_style style, const struct fy_mark *m0,
                        const struct fy_mark *m1)
{
    bool plain = style == FYSS_PLAIN && !tag_forces_string(ev->scalar.tag);
    /* libfyaml marks a quoted scalar after its opening quote: show the quote */
    if ((style == FYSS_SINGLE_QUOTED || style == FYSS_DOUBLE_QUOTED) && at.col > 1)
        at.col--;
    frame_t *f = top(b);
    if (f && f->map && !f->key) {
        if (!at.line)
            at = f->pn->at;
        return take_key(b, f, s, len, at);
    }
    if (memchr(s, '\0', len))
        return fail_at(b, at.line ? at : (f ? f->key_at : at),
                       "a value must not contain a NUL character");
    json_t *v = scalar_to_json(s, len, plain);
    if (!v)
        return fail_at(b, at.line ? at : (f ? f->key_at : at), "text is not valid UTF-8");
    pnode_t *pn = place(b, v, at);
    if (!pn)
        return CR_EPARSE;
    if (plain && m0 && m1 && m1->input_pos > m0->input_pos) {
        pn->src = m0->input_pos;
        pn->srclen = m1->input_pos - m0->input_pos;
    }
    keep_anchor(b, ev->scalar.anchor, v);
    return 0;
}

static int on_scalar(builder_t *b, struct fy_event *ev, pos_t at)
{
    size_t len = 0;
    enum fy_scalar_style style = fy_token_scalar_style(ev->scalar.value);
    const struct fy_mark *m0 = fy_event_start_mark(ev), *m1 = fy_event_end_mark(ev);
    cr_buf_t sq = {0};
    const char *s;
    if (style == FYSS_SINGLE_QUOTED && m0 && m1 && m0->input_pos <= m1->input_pos) {
        single_quoted(b->data + m0->input_pos, m1->input_pos - m0->input_pos, &sq);
        s = sq.s;
        len = sq.len;
    } else {
        s = fy_token_get_text(ev->scalar.value, &len);
    }
    if (!s) {
        s = "";
        len = 0;
    }
    int err = scalar_value(b, ev, at, s, len, style, m0, m1);
    cr_buf_free(&sq);
    return err;
}

static int on_alias(builder_t *b, struct fy_event *ev, pos_t at)
{
    size_t len = 0;
    const char *s = fy_token_get_text(ev->alias.anchor, &len);
    if (!s)
        return fail_at(b, at, "an alias without a name");
    /* libfyaml marks an alias after its '*': show the '*' */
    if (at.col > 1)
        at.col--;
    frame_t *f = top(b);
    if (f && f->map && !f->key)
        return fail_at(b, at, "an alias (*%.*s) cannot be a key", (int)len, s);
    for (size_t i = b->anchors.n; i-- > 0;) {
        const anchor_t *a = &b->anchors.v[i];
        if (strlen(a->name) == len && memcmp(a->name, s, len) == 0)
            return place(b, json_incref(a->val), at) ? 0 : CR_EPARSE;
    }
    return fail_at(b, at, "alias *%.*s names no anchor (&%.*s) written before it", (int)len, s,
                   (int)len, s);
}

static void diag_sink(struct fy_diag *diag, void *user, const char *buf, size_t len)
{
    CR_UNUSED(diag);
    CR_UNUSED(user);
    CR_UNUSED(buf);
    CR_UNUSED(len);
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t a = strlen(s), n = strlen(suffix);
    return a >= n && strcmp(s + a - n, suffix) == 0;
}

/* Length of the UTF-8 sequence at s (at most n bytes), 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    static const struct {
        unsigned char lead_lo, lead_hi; /* first byte range */
        unsigned char next_lo, next_hi; /* second byte range */
        size_t len;
    } forms[] = {
        /* the well-formed sequences of Unicode 3.9, table 3-7 */
        {0x00, 0x7f, 0, 0, 1},       {0xc2, 0xdf, 0x80, 0xbf, 2}, {0xe0, 0xe0, 0xa0, 0xbf, 3},
        {0xe1, 0xec, 0x80, 0xbf, 3}, {0xed, 0xed, 0x80, 0x9f, 3}, {0xee, 0xef, 0x80, 0xbf, 3},
        {0xf0, 0xf0, 0x90, 0xbf, 4}, {0xf1, 0xf3, 0x80, 0xbf, 4}, {0xf4, 0xf4, 0x80, 0x8f, 4},
    };
    for (size_t f = 0; f < CR_ARRAY_SIZE(forms); f++) {
        if (s[0] < forms[f].lead_lo || s[0] > forms[f].lead_hi)
            continue;
        size_t len = forms[f].len;
        if (len > n)
            return 0;
        if (len > 1 && (s[1] < forms[f].next_lo || s[1] > forms[f].next_hi))
            return 0;
        for (size_t k = 2; k < len; k++)
            if (s[k] < 0x80 || s[k] > 0xbf)
                return 0;
        return len;
    }
    return 0;
}

/* A spec is UTF-8 text without control characters. Checked before
 * parsing: libfyaml 0.7.12 can loop forever on some invalid sequences
 * (found by fuzz_spec: "% b\xed"). */
static int check_utf8(builder_t *b, size_t len)
{
    const unsigned char *s = (const unsigned char *)b->data;
    pos_t at = {1, 1};
    for (size_t i = 0; i < len;) {
        size_t k = utf8_len(s + i, len - i);
        if (!k)
            return fail_at(b, at,
                           "not UTF-8 text (byte 0x%02x); a spec is a YAML or JSON text "
                           "file",
                           s[i]);
        /* YAML's printable set: no C0 controls but tab and line breaks */
        if ((s[i] < 0x20 && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') || s[i] == 0x7f)
            return fail_at(b, at,
                           "control character 0x%02x; a spec may hold tabs and line "
                           "breaks, but no other control characters",
                           s[i]);
        if (s[i] == '\n') {
            at.line++;
            at.col = 1;
        } else {
            at.col++;
        }
        i += k;
    }
    return 0;
}

/* Runs the parser over the whole input into b->root. */
static int parse(builder_t *b, size_t len)
{
    struct fy_diag_cfg dc;
    fy_diag_cfg_default(&dc);
    dc.fp = NULL;
    dc.output_fn = diag_sink; /* libfyaml must never print: we report */
    dc.colorize = false;
    struct fy_diag *diag = fy_diag_create(&dc);
    if (!diag)
        return CR_ENOMEM;
    fy_diag_set_collect_errors(diag, true);
    bool json = has_suffix(b->name, ".json");
    struct fy_parse_cfg cfg = {
        .flags = FYPCF_QUIET | (json ? FYPCF_JSON_FORCE : FYPCF_JSON_NONE),
        .diag = diag,
    };
    int err = 0;
    struct fy_parser *p = fy_parser_create(&cfg);
    if (!p) {
        err = CR_ENOMEM;
        goto out_diag;
    }
    if (fy_parser_set_string(p, b->data, len) != 0) {
        err = fail_at(b, (pos_t){1, 1}, "the parser refused the input");
        goto out_parser;
    }
    pos_t last = {1, 1};
    struct fy_event *ev;
    while (!err && (ev = fy_parser_parse(p))) {
        pos_t at = mark_pos(fy_event_start_mark(ev), (pos_t){0, 0});
        if (at.line)
            last = at;
        switch (ev->type) {
        case FYET_DOCUMENT_START:
            if (++b->ndocs > 1)
                err = fail_at(b, at.line ? at : last, "%s: a second document starts here",
                              strcmp(b->what, "hardware spec") == 0 ? "a spec holds one node"
                                                                    : "one document per file");
            break;
        case FYET_MAPPING_START:
        case FYET_SEQUENCE_START:
            err = on_start(b, ev, ev->type == FYET_MAPPING_START, at.line ? at : last);
            break;
        case FYET_MAPPING_END:
        case FYET_SEQUENCE_END:
            err = on_end(b);
            break;
        case FYET_SCALAR:
            err = on_scalar(b, ev, at);
            break;
        case FYET_ALIAS:
            err = on_alias(b, ev, at.line ? at : last);
            break;
        default:
            break;
        }
        fy_parser_event_free(p, ev);
    }
    if (!err && fy_parser_get_stream_error(p)) {
        void *it = NULL;
        struct fy_diag_error *de = fy_diag_errors_iterate(diag, &it);
        if (de)
            err = fail_at(b, (pos_t){de->line > 0 ? de->line : 1, de->column > 0 ? de->column : 1},
                          "%s syntax error: %s", json ? "JSON" : "YAML", de->msg ? de->msg : "?");
        else
            err = fail_at(b, last, "%s syntax error", json ? "JSON" : "YAML");
    }
out_parser:
    fy_parser_destroy(p);
out_diag:
    fy_diag_destroy(diag);
    return err;
}

/* ---- schema errors back to positions ---- */

/* The note for the path hw_node_from_json named ("devices[3].memory",
 * "labels.corral.io/rack": keys may hold dots, so the longest key that
 * fits wins). Stops at the deepest note it can follow: a missing key is
 * shown at its mapping. *whole says whether the path was followed to the
 * end. */
static const pnode_t *lookup(const pnode_t *root, const char *path, bool *whole)
{
    const pnode_t *cur = root;
    const char *p = path;
    while (*p) {
        if (*p == '[') {
            char *end;
            errno = 0;
            unsigned long i = strtoul(p + 1, &end, 10);
            if (errno || *end != ']' || i >= cur->kids.n || cur->kids.v[i].name)
                break;
            cur = &cur->kids.v[i];
            p = end + 1;
            continue;
        }
        if (*p == '.' && p != path)
            p++;
        const pnode_t *best = NULL;
        size_t bestlen = 0;
        /* the mapping's own keys, then those it merged from `<<` sources */
        const pnode_t *scopes[64];
        size_t ns = 0;
        scopes[ns++] = cur;
        const pnode_t *mk = find_kid(cur, "<<");
        if (mk) {
            if (mk->kids.n && mk->kids.v[0].name)
                scopes[ns++] = mk;
            else
                for (size_t i = 0; i < mk->kids.n && ns < CR_ARRAY_SIZE(scopes); i++)
                    scopes[ns++] = &mk->kids.v[i];
        }
        for (size_t s = 0; s < ns && !best; s++) {
            for (size_t i = 0; i < scopes[s]->kids.n; i++) {
                const pnode_t *k = &scopes[s]->kids.v[i];
                size_t n = k->name ? strlen(k->name) : 0;
                if (k->name && n >= bestlen && strncmp(p, k->name, n) == 0 &&
                    (p[n] == '\0' || p[n] == '.' || p[n] == '[')) {
                    best = k;
                    bestlen = n;
                }
            }
        }
        if (!best)
            break;
        cur = best;
        p += bestlen;
    }
    *whole = *p == '\0';
    return cur;
}

static int schema_error(builder_t *b, const hw_json_error_t *je)
{
    bool whole;
    const pnode_t *pn = lookup(&b->proot, je->path, &whole);
    pos_t at = pn->at.line ? pn->at : pn->key;
    /* a wrong key is shown at the key, not at its value */
    if (whole && pn->key.line &&
        (cr_str_has_prefix(je->msg, "unknown field") ||
         strstr(je->msg, "is not a valid label key")))
        at = pn->key;
    /* `compute_capability: 9.0` is a number to YAML: say how to write it */
    char hint[96] = "";
    if (whole && pn->srclen && pn->srclen < 64 && cr_str_has_prefix(je->msg, "expected a string"))
        snprintf(hint, sizeof(hint), "; write it in quotes: \"%.*s\"", (int)pn->srclen,
                 b->data + pn->src);
    if (je->path[0])
        return fail_at(b, at, "%s: %s%s", je->path, je->msg, hint);
    return fail_at(b, at, "%s%s", je->msg, hint);
}

int hw_yaml_check_buffer(const char *name, const char *what, const char *data, size_t len,
                         hw_yaml_check_fn check, void *ctx, char **errmsg)
{
    builder_t b = {.name = name, .data = data, .what = what};
    int err;
    if (errmsg)
        *errmsg = NULL;
    if (len > SPEC_MAX_BYTES) {
        b.err = cr_asprintf("%s: %zu bytes is too large for a %s (at most %u MiB)", name, len, what,
                            SPEC_MAX_BYTES >> 20);
        err = CR_E2BIG;
        goto out;
    }
    if ((err = check_utf8(&b, len)) || (err = parse(&b, len)))
        goto out;
    hw_json_error_t je;
    memset(&je, 0, sizeof(je));
    if (check(b.root, ctx, &je) != 0)
        err = schema_error(&b, &je);
out:
    if (err && !b.err)
        b.err = cr_asprintf("%s: %s", name, cr_strerror(err));
    if (err && errmsg) {
        *errmsg = b.err;
        b.err = NULL;
    }
    builder_fini(&b);
    return err;
}

/* ---- what the schema alone does not say: a spec is written by hand ---- */

__attribute__((format(printf, 3, 4))) static int spec_fail(hw_json_error_t *je, const char *path,
                                                           const char *fmt, ...)
{
    cr_strlcpy(je->path, path, sizeof(je->path));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(je->msg, sizeof(je->msg), fmt, ap);
    va_end(ap);
    return CR_ESCHEMA;
}

/* Edit distance of two short names, capped: enough to suggest a backend. */
static size_t distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b), row[32];
    if (na >= CR_ARRAY_SIZE(row) || nb >= CR_ARRAY_SIZE(row))
        return SIZE_MAX;
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

static int check_backend(const cr_device_t *d, size_t i, hw_json_error_t *je)
{
    if (!d->backend[0] || hw_component_find(d->backend))
        return 0;
    const cr_accel_component_t *const *all;
    size_t n = hw_components(&all);
    cr_buf_t names = {0};
    const char *near = NULL;
    size_t best = 3; /* suggest only a name at most two edits away */
    for (size_t k = 0; k < n; k++) {
        cr_buf_printf(&names, "%s%s", k ? ", " : "", all[k]->name);
        size_t dist = distance(d->backend, all[k]->name);
        if (dist < best) {
            best = dist;
            near = all[k]->name;
        }
    }
    char path[64], hint[64] = "";
    snprintf(path, sizeof(path), "devices[%zu].backend", i);
    if (near)
        snprintf(hint, sizeof(hint), "did you mean '%s'? ", near);
    int err = spec_fail(je, path,
                        "unknown backend '%s'; %sexpected one of: %s (or leave it out for a "
                        "generic device the sim backend isolates)",
                        d->backend, hint, names.s ? names.s : "");
    cr_buf_free(&names);
    return err;
}

/* A device's or NIC's NUMA node: -1 (unknown) or one of cpu.numa_nodes. */
static int check_numa(const cr_node_t *node, int numa, const char *path, hw_json_error_t *je)
{
    if (numa == -1)
        return 0;
    if (numa < 0)
        return spec_fail(je, path,
                         "NUMA node %d is out of range; write a node of cpu.numa_nodes, or -1 "
                         "(or leave it out) when it is unknown",
                         numa);
    for (size_t k = 0; k < node->numa.n; k++)
        if (node->numa.v[k].id == numa)
            return 0;
    if (node->numa.n == 0)
        return spec_fail(je, path,
                         "NUMA node %d is out of range: the spec lists no cpu.numa_nodes; "
                         "describe them, or leave numa out",
                         numa);
    cr_buf_t ids = {0};
    for (size_t k = 0; k < node->numa.n; k++)
        cr_buf_printf(&ids, "%s%d", k ? ", " : "", node->numa.v[k].id);
    int err = spec_fail(je, path, "NUMA node %d is out of range: the spec's cpu.numa_nodes are %s",
                        numa, ids.s);
    cr_buf_free(&ids);
    return err;
}

static bool is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A label key as Kubernetes writes one: NAME or PREFIX/NAME, NAME 1 to 63
 * letters, digits, '-', '_' and '.' that begins and ends with a letter or
 * digit, PREFIX a DNS subdomain (lowercase, at most 253 characters).
 * Selectors and placement domains name nodes by these keys. Returns NULL
 * when k is one, else why not. */
static const char *label_key_problem(const char *k)
{
    const char *slash = strchr(k, '/');
    const char *name = slash ? slash + 1 : k;
    if (slash) {
        size_t plen = (size_t)(slash - k);
        if (plen == 0)
            return "the prefix before '/' is empty";
        if (plen > 253)
            return "the prefix before '/' is longer than 253 characters";
        size_t run = 0;
        for (size_t i = 0; i <= plen; i++) {
            char c = i < plen ? k[i] : '.';
            if (c == '.') {
                if (run == 0 || k[i - 1] == '-')
                    return "the prefix before '/' must be a DNS subdomain (parts of lowercase "
                           "letters, digits and '-' between dots, each beginning and ending "
                           "with a letter or digit)";
                if (run > 63)
                    return "a part of the prefix before '/' is longer than 63 characters";
                run = 0;
                continue;
            }
            bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c == '-' && run > 0);
            if (!ok)
                return "the prefix before '/' must be a DNS subdomain (parts of lowercase "
                       "letters, digits and '-' between dots, each beginning and ending with a "
                       "letter or digit)";
            run++;
        }
        if (strchr(name, '/'))
            return "a key holds at most one '/'";
    }
    size_t n = strlen(name);
    if (n == 0)
        return slash ? "the name after '/' is empty" : "it is empty";
    if (n > 63)
        return "the name is longer than 63 characters";
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(name[i]) && name[i] != '-' && name[i] != '_' && name[i] != '.')
            return "the name may hold only letters, digits, '-', '_' and '.'";
    if (!is_alnum(name[0]) || !is_alnum(name[n - 1]))
        return "the name must begin and end with a letter or digit";
    return NULL;
}

/* Checks a loaded spec for what would go wrong later: a backend no
 * component has, a NUMA node the spec does not describe, a label key a
 * selector could not name. */
static int spec_validate(const cr_node_t *node, hw_json_error_t *je)
{
    char path[320];
    for (size_t k = 0; k < node->numa.n; k++)
        for (size_t m = 0; m < k; m++)
            if (node->numa.v[m].id == node->numa.v[k].id) {
                snprintf(path, sizeof(path), "cpu.numa_nodes[%zu].id", k);
                return spec_fail(je, path,
                                 "NUMA node %d is listed twice (also cpu.numa_nodes[%zu])",
                                 node->numa.v[k].id, m);
            }
    int err;
    for (size_t i = 0; i < node->devices.n; i++) {
        const cr_device_t *d = &node->devices.v[i];
        if ((err = check_backend(d, i, je)))
            return err;
        snprintf(path, sizeof(path), "devices[%zu].numa", i);
        if ((err = check_numa(node, d->numa, path, je)))
            return err;
        if (d->memory_numa < -1) {
            snprintf(path, sizeof(path), "devices[%zu].memory_numa", i);
            return spec_fail(je, path,
                             "NUMA node %d is out of range; -1 (or leave it out) when "
                             "the device's memory is no NUMA node of its own",
                             d->memory_numa);
        }
    }
    for (size_t i = 0; i < node->nics.n; i++) {
        snprintf(path, sizeof(path), "nics[%zu].numa", i);
        if ((err = check_numa(node, node->nics.v[i].numa, path, je)))
            return err;
    }
    for (size_t i = 0; i < node->labels.n; i++) {
        const char *why = label_key_problem(node->labels.v[i].key);
        if (why) {
            snprintf(path, sizeof(path), "labels.%s", node->labels.v[i].key);
            return spec_fail(je, path,
                             "'%s' is not a valid label key: %s; a key is NAME or "
                             "PREFIX/NAME as in Kubernetes (e.g. rack, corral.io/rack)",
                             node->labels.v[i].key, why);
        }
    }
    return 0;
}

static int spec_check(const json_t *root, void *ctx, hw_json_error_t *je)
{
    if (!root || json_is_null(root)) {
        snprintf(je->msg, sizeof(je->msg),
                 "the spec is empty; expected a mapping of node fields such as id, hostname, "
                 "cpu, memory and devices");
        return CR_ESCHEMA;
    }
    if (!json_is_object(root)) {
        snprintf(je->msg, sizeof(je->msg),
                 "a hardware spec must be a mapping of node fields (id, hostname, cpu, memory, "
                 "devices, ...), found %s",
                 hw_json_kind(root));
        return CR_ESCHEMA;
    }
    const json_t *devs = json_object_get(root, "devices");
    if (json_array_size(devs) > SPEC_MAX_DEVICES) {
        snprintf(je->path, sizeof(je->path), "devices");
        snprintf(je->msg, sizeof(je->msg), "%zu devices; a node holds at most %d",
                 json_array_size(devs), SPEC_MAX_DEVICES);
        return CR_ESCHEMA;
    }
    int err = hw_node_from_json(root, ctx, je);
    return err ? err : spec_validate(ctx, je);
}

int hw_spec_load_buffer(const char *name, const char *data, size_t len, cr_node_t *node,
                        char **errmsg)
{
    return hw_yaml_check_buffer(name, "hardware spec", data, len, spec_check, node, errmsg);
}

int hw_yaml_check_file(const char *path, const char *what, hw_yaml_check_fn check, void *ctx,
                       char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    FILE *fp = fopen(path, "rb");
    int err = 0;
    char *buf = NULL;
    size_t len = 0;
    if (!fp) {
        err = -errno;
        goto out_msg;
    }
    struct stat st;
    if (fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
        err = -EISDIR;
        goto out_close;
    }
    /* read at most one byte past the cap: enough to know it is too large,
     * whatever st_size says (pipes, /proc) */
    size_t cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            buf = cr_realloc(buf, cap + 1);
        }
        size_t want = cap - len;
        if (len + want > (size_t)SPEC_MAX_BYTES + 1)
            want = (size_t)SPEC_MAX_BYTES + 1 - len;
        size_t got = fread(buf + len, 1, want, fp);
        len += got;
        if (got < want || len > SPEC_MAX_BYTES)
            break;
    }
    if (ferror(fp)) {
        err = CR_EIO;
        goto out_close;
    }
    fclose(fp);
    fp = NULL;
    if (len > SPEC_MAX_BYTES) {
        if (errmsg)
            *errmsg = cr_asprintf("%s: larger than %u MiB: too large for a %s", path,
                                  SPEC_MAX_BYTES >> 20, what);
        err = CR_E2BIG;
        goto out_free;
    }
    buf[len] = '\0';
    err = hw_yaml_check_buffer(path, what, buf, len, check, ctx, errmsg);
    goto out_free;
out_close:
    if (err == CR_EIO && errmsg)
        *errmsg = cr_asprintf("cannot read %s: %s", path, strerror(EIO));
    fclose(fp);
out_msg:
    if (err && errmsg && !*errmsg)
        *errmsg = cr_asprintf("cannot read %s: %s", path, strerror(-err));
out_free:
    free(buf);
    return err;
}

int hw_spec_load(const char *path, cr_node_t *node, char **errmsg)
{
    return hw_yaml_check_file(path, "hardware spec", spec_check, node, errmsg);
}
