/* Canonical accelerator types: one table, one row per fact. Names follow
 * what ML engineers already use (Ray's accelerator type names). Adding a
 * chip is adding a row; no code branches on a model.
 *
 * Day-zero SKUs: rows can also come from YAML files in a directory
 * ($CORRAL_SKU_DIR, else $CORRAL_CONF/skus.d, else /etc/corral/skus.d),
 * loaded at the start of discovery (hw_skus_load) and consulted before
 * the built-in rows, so a vendor names a new chip without a new corral.
 * docs/vendor-checklist.md, "A new SKU without a rebuild". */
#include "hw.h"
#include <dirent.h>
#include <stdio.h>
#include <strings.h>

static const struct pci_row {
    uint16_t vendor, device;
    const char *sku;
} pci_rows[] = {
    /* NVIDIA */
    {0x10de, 0x2330, "H100"}, /* H100 SXM5 80GB */
    {0x10de, 0x2331, "H100"}, /* H100 PCIe */
    {0x10de, 0x2321, "H100"}, /* H100 NVL */
    {0x10de, 0x2324, "H800"},
    {0x10de, 0x2335, "H200"}, /* H200 SXM 141GB */
    {0x10de, 0x233b, "H200"}, /* H200 NVL */
    {0x10de, 0x2342, "GH200"},
    {0x10de, 0x2901, "B200"},
    {0x10de, 0x20b0, "A100-40G"}, /* A100 SXM4 40GB */
    {0x10de, 0x20f1, "A100-40G"}, /* A100 PCIe 40GB */
    {0x10de, 0x20b2, "A100-80G"}, /* A100 SXM4 80GB */
    {0x10de, 0x20b5, "A100-80G"}, /* A100 PCIe 80GB */
    {0x10de, 0x20b3, "A100-64G"},
    {0x10de, 0x2236, "A10"},
    {0x10de, 0x2237, "A10G"},
    {0x10de, 0x27b8, "L4"},
    {0x10de, 0x26b5, "L40"},
    {0x10de, 0x26b9, "L40S"},
    {0x10de, 0x1eb8, "T4"},
    {0x10de, 0x1db1, "V100"},
    {0x10de, 0x1db4, "V100"},
    {0x10de, 0x1db5, "V100"},
    {0x10de, 0x1db6, "V100"},
    /* AMD: every Instinct id of Ray's amd_product_dict
     * (python/ray/_private/accelerators/amd_gpu.py) */
    {0x1002, 0x74a1, "MI300X"},
    {0x1002, 0x74a9, "MI300X-HF"},
    {0x1002, 0x74a2, "MI308X"},
    {0x1002, 0x74a0, "MI300A"},
    {0x1002, 0x74a5, "MI325X"},
    {0x1002, 0x75a0, "MI350X"},
    {0x1002, 0x75a3, "MI355X"},
    {0x1002, 0x740c, "MI250"}, /* Ray: AMD-Instinct-MI250X-MI250 */
    {0x1002, 0x7408, "MI250X"},
    {0x1002, 0x740f, "MI210"},
    {0x1002, 0x738c, "MI100"},
    {0x1002, 0x66a1, "MI50"},
    /* Google TPU */
    {0x1ae0, 0x0027, "TPU-V3"}, /* v2 and v3 share this id */
    {0x1ae0, 0x005e, "TPU-V4"},
    {0x1ae0, 0x0063, "TPU-V5LITEPOD"},
    {0x1ae0, 0x0062, "TPU-V5P"},
    {0x1ae0, 0x006f, "TPU-V6E"},
    {0x1ae0, 0x0076, "TPU-V7X"},
    /* AWS Neuron */
    {0x1d0f, 0x7064, "Inferentia"},
    {0x1d0f, 0x7164, "Inferentia2"},
    {0x1d0f, 0x7264, "Trainium"},
    {0x1d0f, 0x7364, "Trainium2"},
    /* Intel Gaudi (Habana Labs) */
    {0x1da3, 0x1000, "Gaudi"},
    {0x1da3, 0x1020, "Gaudi2"},
    {0x1da3, 0x1060, "Gaudi3"},
    /* Intel GPUs */
    {0x8086, 0x0bd5, "Intel-GPU-Max-1550"},
    {0x8086, 0x0bda, "Intel-GPU-Max-1100"},
    {0x8086, 0x56c0, "Intel-Flex-170"},
    {0x8086, 0x56a0, "Intel-Arc-A770"},
};

/* Product names as vendor tools print them. A row matches when both of its
 * substrings (the second may be NULL) occur, case-insensitively; the first
 * matching row wins, so more specific rows come first. */
static const struct name_row {
    const char *a, *b;
    const char *sku;
} name_rows[] = {
    /* NVML's names: "NVIDIA GB200", "NVIDIA B300 SXM6 AC", "NVIDIA RTX PRO
     * 6000 Blackwell Server Edition"; a GB row before its B row, whose name
     * it contains */
    {"GH200", NULL, "GH200"},
    {"GB300", NULL, "GB300"},
    {"GB200", NULL, "GB200"},
    {"B300", NULL, "B300"},
    {"B200", NULL, "B200"},
    {"RTX PRO 6000", "Blackwell", "RTX-PRO-6000-Blackwell"},
    {"H200", NULL, "H200"},
    {"H100", NULL, "H100"},
    {"H800", NULL, "H800"},
    {"A100", "80G", "A100-80G"},
    {"A100", "40G", "A100-40G"},
    {"A100", NULL, "A100"},
    {"A10G", NULL, "A10G"},
    {"L40S", NULL, "L40S"},
    {"L40", NULL, "L40"},
    {"L4", NULL, "L4"},
    {"A10", NULL, "A10"},
    {"T4", NULL, "T4"},
    {"V100", NULL, "V100"},
    {"MI300X-HF", NULL, "MI300X-HF"},
    {"MI300X", NULL, "MI300X"},
    {"MI308X", NULL, "MI308X"},
    {"MI300A", NULL, "MI300A"},
    {"MI325X", NULL, "MI325X"},
    {"MI350X", NULL, "MI350X"},
    {"MI355X", NULL, "MI355X"},
    {"MI250X", NULL, "MI250X"},
    {"MI250", NULL, "MI250"},
    {"MI210", NULL, "MI210"},
    {"MI100", NULL, "MI100"},
    {"v6e", NULL, "TPU-V6E"},
    {"v5p", NULL, "TPU-V5P"},
    {"v5litepod", NULL, "TPU-V5LITEPOD"},
    {"v5e", NULL, "TPU-V5LITEPOD"},
    {"v4", NULL, "TPU-V4"},
    {"v7x", NULL, "TPU-V7X"},
    {"Trainium3", NULL, "Trainium3"},
    {"Trainium2", NULL, "Trainium2"},
    {"Trainium", NULL, "Trainium"},
    {"trn3", NULL, "Trainium3"},
    {"trn2", NULL, "Trainium2"},
    {"trn1", NULL, "Trainium"},
    {"Inferentia2", NULL, "Inferentia2"},
    {"inf2", NULL, "Inferentia2"},
    {"Inferentia", NULL, "Inferentia"},
    {"HL-225", NULL, "Gaudi2"},
    {"Gaudi3", NULL, "Gaudi3"},
    {"HL-325", NULL, "Gaudi3"},
    {"Gaudi2", NULL, "Gaudi2"},
    {"Gaudi", NULL, "Gaudi"},
    {"Max 1550", NULL, "Intel-GPU-Max-1550"},
    {"Max 1100", NULL, "Intel-GPU-Max-1100"},
};

/* Other names of canonical types: Ray's accelerator type names
 * (python/ray/_private/accelerators/amd_gpu.py's amd_product_dict and
 * python/ray/util/accelerators/accelerators.py), accepted in selectors and
 * labels. A family name (Ray's "Intel-GAUDI" for every Gaudi) stands for
 * several types, ','-separated. */
static const struct alias_row {
    const char *alias, *skus;
} alias_rows[] = {
    {"AMD-Instinct-MI50", "MI50"},
    {"AMD-Instinct-MI100", "MI100"},
    {"AMD-Instinct-MI210", "MI210"},
    {"AMD-Instinct-MI250X", "MI250X"},
    {"AMD-Instinct-MI250X-MI250", "MI250"},
    {"AMD-Instinct-MI300A", "MI300A"},
    {"AMD-Instinct-MI300X-OAM", "MI300X"},
    {"AMD-Instinct-MI300X-HF", "MI300X-HF"},
    {"AMD-Instinct-MI308X-OAM", "MI308X"},
    {"AMD-Instinct-MI308X", "MI308X"}, /* Ray's AMD_INSTINCT_MI308x constant */
    {"AMD-Instinct-MI325X-OAM", "MI325X"},
    {"AMD-Instinct-MI350X-OAM", "MI350X"},
    {"AMD-Instinct-MI355X-OAM", "MI355X"},
    {"Intel-GAUDI", "Gaudi,Gaudi2,Gaudi3"},
    {"aws-neuron-core", "Inferentia,Inferentia2,Trainium,Trainium2,Trainium3"},
};

/* ---- rows loaded from SKU files ---- */

typedef struct loaded_sku {
    char *sku;
    CR_VEC(char *) aliases;
    CR_VEC(uint32_t) pci; /* vendor << 16 | device */
    CR_VEC(char *) names; /* product-name substrings */
} loaded_sku_t;

static struct {
    CR_VEC(loaded_sku_t) rows;
    char *dir; /* the directory they came from */
} loaded;

static void row_fini(loaded_sku_t *r)
{
    free(r->sku);
    cr_free_strv(r->aliases.v, r->aliases.n);
    cr_free_strv(r->names.v, r->names.n);
    CR_VEC_FREE(&r->pci);
}

static void loaded_free(void)
{
    for (size_t i = 0; i < loaded.rows.n; i++)
        row_fini(&loaded.rows.v[i]);
    CR_VEC_FREE(&loaded.rows);
    free(loaded.dir);
    loaded.dir = NULL;
}

const char *cr_accel_sku_by_pci(uint16_t vendor, uint16_t device)
{
    uint32_t key = (uint32_t)vendor << 16 | device;
    for (size_t i = 0; i < loaded.rows.n; i++)
        for (size_t k = 0; k < loaded.rows.v[i].pci.n; k++)
            if (loaded.rows.v[i].pci.v[k] == key)
                return loaded.rows.v[i].sku;
    for (size_t i = 0; i < CR_ARRAY_SIZE(pci_rows); i++)
        if (pci_rows[i].vendor == vendor && pci_rows[i].device == device)
            return pci_rows[i].sku;
    return NULL;
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    return false;
}

const char *cr_accel_sku_by_name(const char *product)
{
    if (!product)
        return NULL;
    for (size_t i = 0; i < loaded.rows.n; i++)
        for (size_t k = 0; k < loaded.rows.v[i].names.n; k++)
            if (contains_ci(product, loaded.rows.v[i].names.v[k]))
                return loaded.rows.v[i].sku;
    for (size_t i = 0; i < CR_ARRAY_SIZE(name_rows); i++)
        if (contains_ci(product, name_rows[i].a) &&
            (!name_rows[i].b || contains_ci(product, name_rows[i].b)))
            return name_rows[i].sku;
    return NULL;
}

/* ---- canonical names and aliases ---- */

static bool is_canonical(const char *name)
{
    for (size_t i = 0; i < loaded.rows.n; i++)
        if (strcmp(loaded.rows.v[i].sku, name) == 0)
            return true;
    for (size_t i = 0; i < CR_ARRAY_SIZE(pci_rows); i++)
        if (strcmp(pci_rows[i].sku, name) == 0)
            return true;
    for (size_t i = 0; i < CR_ARRAY_SIZE(name_rows); i++)
        if (strcmp(name_rows[i].sku, name) == 0)
            return true;
    return false;
}

/* The built-in tables' copy of the type p[0..len). */
static const char *table_sku(const char *p, size_t len)
{
    for (size_t k = 0; k < CR_ARRAY_SIZE(name_rows); k++)
        if (strlen(name_rows[k].sku) == len && strncmp(name_rows[k].sku, p, len) == 0)
            return name_rows[k].sku;
    for (size_t k = 0; k < CR_ARRAY_SIZE(pci_rows); k++)
        if (strlen(pci_rows[k].sku) == len && strncmp(pci_rows[k].sku, p, len) == 0)
            return pci_rows[k].sku;
    return NULL;
}

size_t hw_sku_expand(const char *name, const char **out, size_t max)
{
    if (!name || !*name || !max)
        return 0;
    if (is_canonical(name)) {
        out[0] = name;
        return 1;
    }
    for (size_t i = 0; i < loaded.rows.n; i++)
        for (size_t k = 0; k < loaded.rows.v[i].aliases.n; k++)
            if (strcmp(loaded.rows.v[i].aliases.v[k], name) == 0) {
                out[0] = loaded.rows.v[i].sku;
                return 1;
            }
    for (size_t i = 0; i < CR_ARRAY_SIZE(alias_rows); i++) {
        if (strcmp(alias_rows[i].alias, name) != 0)
            continue;
        /* the row's types as pointers into the name tables, which live on */
        size_t n = 0;
        const char *p = alias_rows[i].skus;
        while (*p && n < max) {
            size_t len = strcspn(p, ",");
            const char *t = table_sku(p, len);
            if (t)
                out[n++] = t;
            p += len + (p[len] == ',');
        }
        return n;
    }
    return 0;
}

const char *hw_sku_canonical(const char *name)
{
    const char *one[2];
    return hw_sku_expand(name, one, 2) == 1 ? one[0] : NULL;
}

/* ---- SKU files ---- */

#define SKU_MAX_ROWS 4096

static int sku_fail(hw_json_error_t *je, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int sku_fail(hw_json_error_t *je, const char *path, const char *fmt, ...)
{
    cr_strlcpy(je->path, path, sizeof(je->path));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(je->msg, sizeof(je->msg), fmt, ap);
    va_end(ap);
    return CR_ESCHEMA;
}

/* A label value: what a selector can name (letters, digits, - _ .). */
static bool is_type_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 31)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.'))
            return false;
    return true;
}

static int parse_pci_id(const char *s, uint32_t *out)
{
    unsigned v, d;
    char tail;
    if (strlen(s) != 9 || sscanf(s, "%4x:%4x%c", &v, &d, &tail) != 2)
        return CR_EPARSE;
    *out = v << 16 | d;
    return 0;
}

/* Strings of a list field; CR_ESCHEMA with je at the bad item. */
static int str_list(const json_t *row, const char *key, size_t idx, hw_json_error_t *je,
                    const json_t **out)
{
    char path[96];
    snprintf(path, sizeof(path), "skus[%zu].%s", idx, key);
    const json_t *v = json_object_get(row, key);
    *out = v;
    if (!v)
        return 0;
    if (!json_is_array(v))
        return sku_fail(je, path, "expected a list of strings, found %s", hw_json_kind(v));
    size_t i;
    const json_t *it;
    json_array_foreach(v, i, it)
    {
        if (!json_is_string(it)) {
            snprintf(path, sizeof(path), "skus[%zu].%s[%zu]", idx, key, i);
            return sku_fail(je, path, "expected a string, found %s", hw_json_kind(it));
        }
    }
    return 0;
}

typedef struct sku_ctx {
    CR_VEC(loaded_sku_t) rows; /* what this file adds, kept only when it is all good */
} sku_ctx_t;

static void rows_free(sku_ctx_t *x)
{
    for (size_t i = 0; i < x->rows.n; i++)
        row_fini(&x->rows.v[i]);
    CR_VEC_FREE(&x->rows);
}

static int sku_check(const json_t *root, void *ctx, hw_json_error_t *je)
{
    sku_ctx_t *x = ctx;
    if (!root || json_is_null(root))
        return sku_fail(je, "", "the file is empty; expected 'skus:' and a list of SKUs");
    if (!json_is_object(root))
        return sku_fail(je, "", "expected a mapping with 'skus:', found %s", hw_json_kind(root));
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)root, key, v)
    {
        if (strcmp(key, "skus") != 0)
            return sku_fail(je, key, "unknown field '%s'; expected: skus", key);
    }
    const json_t *skus = json_object_get(root, "skus");
    if (!json_is_array(skus))
        return sku_fail(je, "skus", "expected a list of SKUs, found %s",
                        skus ? hw_json_kind(skus) : "nothing");
    if (json_array_size(skus) > SKU_MAX_ROWS)
        return sku_fail(je, "skus", "%zu SKUs; a file holds at most %d", json_array_size(skus),
                        SKU_MAX_ROWS);
    size_t idx;
    const json_t *row;
    json_array_foreach(skus, idx, row)
    {
        char path[96];
        snprintf(path, sizeof(path), "skus[%zu]", idx);
        if (!json_is_object(row))
            return sku_fail(je, path, "expected a mapping (sku, pci, names, aliases), found %s",
                            hw_json_kind(row));
        json_object_foreach((json_t *)row, key, v)
        {
            static const char *const fields[] = {"sku", "pci", "names", "aliases"};
            bool ok = false;
            for (size_t k = 0; k < CR_ARRAY_SIZE(fields); k++)
                ok |= strcmp(key, fields[k]) == 0;
            if (!ok) {
                snprintf(path, sizeof(path), "skus[%zu].%s", idx, key);
                return sku_fail(
                    je, path, "unknown field '%s'; expected one of: sku, pci, names, aliases", key);
            }
        }
        const char *sku = json_string_value(json_object_get(row, "sku"));
        snprintf(path, sizeof(path), "skus[%zu].sku", idx);
        if (!sku) {
            if (!json_object_get(row, "sku"))
                snprintf(path, sizeof(path), "skus[%zu]", idx);
            return sku_fail(je, path,
                            "expected 'sku:', the canonical type name (the label value), such as "
                            "MI450X");
        }
        if (!is_type_name(sku))
            return sku_fail(
                je, path, "'%s' is not a type name: 1 to 31 letters, digits, '-', '_' or '.'", sku);
        const json_t *pci, *names, *aliases;
        int err = str_list(row, "pci", idx, je, &pci);
        if (!err)
            err = str_list(row, "names", idx, je, &names);
        if (!err)
            err = str_list(row, "aliases", idx, je, &aliases);
        if (err)
            return err;
        if (!json_array_size(pci) && !json_array_size(names)) {
            snprintf(path, sizeof(path), "skus[%zu]", idx);
            return sku_fail(je, path,
                            "SKU %s says nothing to recognise it by: give 'pci:' (vendor:device "
                            "ids such as \"1002:75b0\") or 'names:' (product-name substrings)",
                            sku);
        }
        loaded_sku_t *r = CR_VEC_PUSH(&x->rows);
        memset(r, 0, sizeof(*r));
        r->sku = cr_strdup(sku);
        size_t i;
        const json_t *it;
        json_array_foreach(pci, i, it)
        {
            uint32_t id;
            if (parse_pci_id(json_string_value(it), &id) != 0) {
                snprintf(path, sizeof(path), "skus[%zu].pci[%zu]", idx, i);
                return sku_fail(je, path,
                                "expected a PCI vendor:device id of 4 hex digits each, such as "
                                "\"1002:75b0\"");
            }
            *CR_VEC_PUSH(&r->pci) = id;
        }
        json_array_foreach(names, i, it)
        {
            if (!*json_string_value(it)) {
                snprintf(path, sizeof(path), "skus[%zu].names[%zu]", idx, i);
                return sku_fail(je, path, "an empty name would match every product");
            }
            *CR_VEC_PUSH(&r->names) = cr_strdup(json_string_value(it));
        }
        json_array_foreach(aliases, i, it)
        {
            if (!is_type_name(json_string_value(it))) {
                snprintf(path, sizeof(path), "skus[%zu].aliases[%zu]", idx, i);
                return sku_fail(je, path,
                                "'%s' is not a type name: 1 to 31 letters, digits, '-', '_' or '.'",
                                json_string_value(it));
            }
            *CR_VEC_PUSH(&r->aliases) = cr_strdup(json_string_value(it));
        }
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

const char *hw_skus_dir(const cr_hw_env_t *env, char *buf, size_t size)
{
    const char *d = cr_hw_getenv(env, "CORRAL_SKU_DIR");
    if (d && *d)
        return d;
    const char *conf = cr_hw_getenv(env, "CORRAL_CONF");
    snprintf(buf, size, "%s/skus.d", conf && *conf ? conf : "/etc/corral");
    return buf;
}

int hw_skus_load(const cr_hw_env_t *env, cr_node_t *warn_to, size_t *nrows)
{
    char buf[1024];
    const char *dir = hw_skus_dir(env, buf, sizeof(buf));
    loaded_free();
    if (nrows)
        *nrows = 0;
    DIR *dp = opendir(dir);
    if (!dp)
        return 0; /* no directory: the built-in table only */
    CR_VEC(char *) files = {0};
    struct dirent *de;
    while ((de = readdir(dp)))
        if (de->d_name[0] != '.' &&
            (has_suffix(de->d_name, ".yaml") || has_suffix(de->d_name, ".yml") ||
             has_suffix(de->d_name, ".json")))
            *CR_VEC_PUSH(&files) = cr_asprintf("%s/%s", dir, de->d_name);
    closedir(dp);
    if (files.n)
        qsort(files.v, files.n, sizeof(char *), cmp_str);
    int bad = 0;
    for (size_t i = 0; i < files.n; i++) {
        sku_ctx_t x = {0};
        char *msg = NULL;
        int err = hw_yaml_check_file(files.v[i], "SKU file", sku_check, &x, &msg);
        if (err) {
            /* a bad file adds nothing; the others and the built-in rows stay */
            if (warn_to)
                cr_node_warn(warn_to, "SKU file skipped: %s", msg ? msg : cr_strerror(err));
            else
                cr_warn("SKU file skipped: %s", msg ? msg : cr_strerror(err));
            free(msg);
            rows_free(&x);
            bad = bad ? bad : err;
            continue;
        }
        for (size_t k = 0; k < x.rows.n; k++)
            *CR_VEC_PUSH(&loaded.rows) = x.rows.v[k];
        CR_VEC_FREE(&x.rows);
    }
    cr_free_strv(files.v, files.n);
    loaded.dir = cr_strdup(dir);
    if (nrows)
        *nrows = loaded.rows.n;
    return bad;
}

int hw_skus_check_buffer(const char *name, const char *data, size_t len, size_t *nrows,
                         char **errmsg)
{
    sku_ctx_t x = {0};
    int err = hw_yaml_check_buffer(name, "SKU file", data, len, sku_check, &x, errmsg);
    if (nrows)
        *nrows = err ? 0 : x.rows.n;
    rows_free(&x);
    return err;
}
