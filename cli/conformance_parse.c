/* The vendors' tools' outputs, parsed for corral conformance (no I/O).
 * The formats, and the documentation or source each follows, are listed in
 * tests/fixtures/vendor-tools/README.md. Every parser bounds what it keeps
 * (CONF_VDEV_MAX devices, CONF_VDEV_LINKS peers, fixed-size strings) and
 * says which field was not what it expected. */
#include "conformance.h"
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

static int fail(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return CR_EPARSE;
}

/* "0000:18:00.0", "00000000:18:00.0" (nvidia-smi's width) or "18:00.0"
 * (no domain: 0000) into "0000:18:00.0". */
static int norm_bdf(const char *s, char out[20])
{
    unsigned dom = 0, bus, dev, fn;
    char tail;
    int colons = 0;
    for (const char *p = s; *p; p++)
        colons += *p == ':';
    if (strlen(s) > 24)
        return CR_EPARSE;
    if (colons == 2) {
        if (sscanf(s, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4)
            return CR_EPARSE;
    } else if (colons == 1) {
        if (sscanf(s, "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3)
            return CR_EPARSE;
    } else {
        return CR_EPARSE;
    }
    if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
        return CR_EPARSE;
    snprintf(out, 20, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    return 0;
}

static conf_vdev_t *push(conf_vdevs_t *out)
{
    if (out->n >= CONF_VDEV_MAX)
        return NULL;
    conf_vdev_t *v = CR_VEC_PUSH(out);
    v->index = v->id = -1;
    return v;
}

/* An integer member, as a JSON integer or a string of one ("-1"). */
static bool json_int(json_t *o, const char *key, long long *out)
{
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_string(v)) {
        int64_t x;
        if (cr_parse_i64(json_string_value(v), 10, &x) == 0) {
            *out = x;
            return true;
        }
    }
    return false;
}

static json_t *load(const char *text, const char *tool, char *why, size_t len)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        fail(why, len, "%s printed no JSON (line %d: %s)", tool, je.line, je.text);
    return j;
}

int conf_parse_neuron_ls(const char *text, conf_vdevs_t *out, char *why, size_t len)
{
    json_t *j = load(text, "neuron-ls --json-output", why, len);
    if (!j)
        return CR_EPARSE;
    int err = 0;
    if (!json_is_array(j)) {
        err = fail(why, len, "neuron-ls --json-output: not an array of devices");
        goto out;
    }
    size_t i;
    json_t *o;
    json_array_foreach(j, i, o)
    {
        long long dev, nc;
        json_t *bdf = json_object_get(o, "bdf"), *to = json_object_get(o, "connected_to");
        if (!json_is_object(o) || !json_int(o, "neuron_device", &dev) || dev < 0 || dev > 4096) {
            err = fail(why, len, "neuron-ls entry %zu: no neuron_device number", i);
            goto out;
        }
        if (!json_int(o, "nc_count", &nc) || nc < 0 || nc > 4096) {
            err = fail(why, len, "neuron-ls device %lld: no nc_count", dev);
            goto out;
        }
        conf_vdev_t *v = push(out);
        if (!v) {
            err = fail(why, len, "neuron-ls lists more than %d devices", CONF_VDEV_MAX);
            goto out;
        }
        v->index = (int)dev;
        v->id = (int)nc;
        if (!json_is_string(bdf) || norm_bdf(json_string_value(bdf), v->pci) != 0) {
            err = fail(why, len, "neuron-ls device %lld: bdf is not a PCI address", dev);
            goto out;
        }
        if (json_is_null(to) || !to) {
            v->nlinks = -1;
        } else if (json_is_array(to)) {
            size_t k;
            json_t *peer;
            json_array_foreach(to, k, peer)
            {
                if (!json_is_integer(peer) || json_integer_value(peer) < 0 ||
                    json_integer_value(peer) > 4096 || v->nlinks >= CONF_VDEV_LINKS) {
                    err = fail(why, len,
                               "neuron-ls device %lld: connected_to is not a list of at most %d "
                               "device numbers",
                               dev, CONF_VDEV_LINKS);
                    goto out;
                }
                v->links[v->nlinks++] = (int)json_integer_value(peer);
            }
        } else {
            err = fail(why, len, "neuron-ls device %lld: connected_to is neither a list nor null",
                       dev);
            goto out;
        }
    }
out:
    json_decref(j);
    return err;
}

/* The next CSV field of *p (up to ',' or the end), trimmed. */
static char *next_field(char **p)
{
    if (!*p)
        return NULL;
    char *s = *p, *comma = strchr(s, ',');
    if (comma) {
        *comma = '\0';
        *p = comma + 1;
    } else {
        *p = NULL;
    }
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

int conf_parse_hl_smi(const char *text, conf_vdevs_t *out, char *why, size_t len)
{
    char *copy = cr_strdup(text), *save = NULL;
    int err = 0, lineno = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        char shown[81];
        cr_strlcpy(shown, line, sizeof(shown)); /* the fields are cut out of line */
        char *p = line, *f[4];
        int nf = 0;
        while (nf < 4 && (f[nf] = next_field(&p)))
            nf++;
        if (nf == 1 && !*f[0])
            continue; /* a blank line */
        int64_t index, module;
        char bdf[20];
        if (nf != 4 || p || cr_parse_i64(f[0], 10, &index) != 0 || index < 0 || index > 4096 ||
            cr_parse_i64(f[1], 10, &module) != 0 || module < 0 || module > 4096 ||
            norm_bdf(f[2], bdf) != 0 || !*f[3]) {
            err = fail(why, len, "hl-smi line %d ('%s'): not index, module_id, bus_id, name",
                       lineno, shown);
            break;
        }
        conf_vdev_t *v = push(out);
        if (!v) {
            err = fail(why, len, "hl-smi lists more than %d devices", CONF_VDEV_MAX);
            break;
        }
        v->index = (int)index;
        v->id = (int)module;
        memcpy(v->pci, bdf, sizeof(bdf));
        cr_strlcpy(v->name, f[3], sizeof(v->name));
    }
    free(copy);
    return err;
}

int conf_parse_xpu_smi(const char *text, conf_vdevs_t *out, char *why, size_t len)
{
    json_t *j = load(text, "xpu-smi discovery -j", why, len);
    if (!j)
        return CR_EPARSE;
    int err = 0;
    json_t *list = json_object_get(j, "device_list");
    if (!json_is_array(list)) {
        err = fail(why, len, "xpu-smi discovery -j: no device_list array");
        goto out;
    }
    size_t i;
    json_t *o;
    json_array_foreach(list, i, o)
    {
        long long id;
        json_t *bdf = json_object_get(o, "pci_bdf_address"),
               *name = json_object_get(o, "device_name");
        if (!json_is_object(o) || !json_int(o, "device_id", &id) || id < 0 || id > 4096) {
            err = fail(why, len, "xpu-smi device_list[%zu]: no device_id", i);
            goto out;
        }
        conf_vdev_t *v = push(out);
        if (!v) {
            err = fail(why, len, "xpu-smi lists more than %d devices", CONF_VDEV_MAX);
            goto out;
        }
        v->index = (int)id;
        if (!json_is_string(bdf) || norm_bdf(json_string_value(bdf), v->pci) != 0) {
            err = fail(why, len, "xpu-smi device %lld: pci_bdf_address is not a PCI address", id);
            goto out;
        }
        if (json_is_string(name))
            cr_strlcpy(v->name, json_string_value(name), sizeof(v->name));
    }
out:
    json_decref(j);
    return err;
}

int conf_parse_amd_smi_list(const char *text, conf_vdevs_t *out, char *why, size_t len)
{
    json_t *j = load(text, "amd-smi list --json", why, len);
    if (!j)
        return CR_EPARSE;
    int err = 0;
    if (!json_is_array(j)) {
        err = fail(why, len, "amd-smi list --json: not an array of GPUs");
        goto out;
    }
    size_t i;
    json_t *o;
    json_array_foreach(j, i, o)
    {
        long long gpu, part = 0;
        json_t *bdf = json_object_get(o, "bdf"), *p = json_object_get(o, "partition_id");
        if (!json_is_object(o) || !json_int(o, "gpu", &gpu) || gpu < 0 || gpu > 4096) {
            err = fail(why, len, "amd-smi list entry %zu: no gpu number", i);
            goto out;
        }
        /* "N/A" where the GPU has no partitions (amdsmi_commands.py) */
        if (p && !(json_is_string(p) && strcmp(json_string_value(p), "N/A") == 0) &&
            (!json_int(o, "partition_id", &part) || part < 0 || part > 64)) {
            err = fail(why, len, "amd-smi GPU %lld: partition_id is neither a number nor N/A", gpu);
            goto out;
        }
        conf_vdev_t *v = push(out);
        if (!v) {
            err = fail(why, len, "amd-smi lists more than %d GPUs", CONF_VDEV_MAX);
            goto out;
        }
        v->index = (int)gpu;
        v->id = (int)part;
        if (!json_is_string(bdf) || norm_bdf(json_string_value(bdf), v->pci) != 0) {
            err = fail(why, len, "amd-smi GPU %lld: bdf is not a PCI address", gpu);
            goto out;
        }
    }
out:
    json_decref(j);
    return err;
}

int conf_parse_amd_smi_static(const char *text, conf_vdevs_t *devs, char *why, size_t len)
{
    json_t *j = load(text, "amd-smi static --asic --json", why, len);
    if (!j)
        return CR_EPARSE;
    int err = 0;
    if (!json_is_array(j)) {
        err = fail(why, len, "amd-smi static --asic --json: not an array of GPUs");
        goto out;
    }
    size_t i;
    json_t *o;
    json_array_foreach(j, i, o)
    {
        long long gpu;
        json_t *name = json_object_get(json_object_get(o, "asic"), "market_name");
        if (!json_is_object(o) || !json_int(o, "gpu", &gpu)) {
            err = fail(why, len, "amd-smi static entry %zu: no gpu number", i);
            goto out;
        }
        if (!json_is_string(name)) {
            err = fail(why, len, "amd-smi static GPU %lld: no asic.market_name", gpu);
            goto out;
        }
        for (size_t k = 0; k < devs->n; k++)
            if (devs->v[k].index == gpu)
                cr_strlcpy(devs->v[k].name, json_string_value(name), sizeof(devs->v[k].name));
    }
out:
    json_decref(j);
    return err;
}

/* tpu-info draws its tables with rich: a row is "│ /dev/vfio/0 │ TPU v6e
 * chip │ 1 │ 1052 │" (or with spaces for the inner rules, as Google's page
 * shows it). The box characters are multi-byte; anything that is not
 * printable ASCII separates words. */
int conf_parse_tpu_info(const char *text, conf_vdevs_t *out, char *why, size_t len)
{
    char *copy = cr_strdup(text), *save = NULL;
    int err = 0;
    bool in_chips = false;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        for (char *p = line; *p; p++)
            if (!isprint((unsigned char)*p) || *p == '|')
                *p = ' ';
        char *words[8], *wsave = NULL;
        int nw = 0;
        for (char *w = strtok_r(line, " ", &wsave); w && nw < 8; w = strtok_r(NULL, " ", &wsave))
            words[nw++] = w;
        if (nw == 0)
            continue;
        if (nw >= 2 && strcmp(words[0], "TPU") == 0 && strcmp(words[1], "Chips") == 0) {
            in_chips = true;
            continue;
        }
        if (nw >= 2 && strcmp(words[0], "TPU") == 0) { /* the next table's title */
            in_chips = false;
            continue;
        }
        if (!in_chips || strncmp(words[0], "/dev/", 5) != 0)
            continue;
        int64_t idx;
        const char *num = words[0] + strlen(words[0]);
        while (num > words[0] && isdigit((unsigned char)num[-1]))
            num--;
        bool path_ok = (strncmp(words[0], "/dev/accel", 10) == 0 && num == words[0] + 10) ||
                       (strncmp(words[0], "/dev/vfio/", 10) == 0 && num == words[0] + 10);
        if (!path_ok || !*num || cr_parse_i64(num, 10, &idx) != 0 || idx < 0 || idx > 4096 ||
            nw < 4 || strcmp(words[1], "TPU") != 0 || strcmp(words[3], "chip") != 0) {
            err = fail(why, len,
                       "tpu-info's TPU Chips row for '%.40s': not a /dev/accelN or /dev/vfio/N "
                       "path followed by 'TPU <type> chip'",
                       words[0]);
            break;
        }
        conf_vdev_t *v = push(out);
        if (!v) {
            err = fail(why, len, "tpu-info lists more than %d chips", CONF_VDEV_MAX);
            break;
        }
        v->index = (int)idx;
        cr_strlcpy(v->name, words[2], sizeof(v->name));
    }
    free(copy);
    return err;
}

bool conf_tpu_env_value(const char *text, const char *key, char *out, size_t size)
{
    size_t kl = strlen(key);
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *p = line, *stop = line + len;
        while (p < stop && (*p == ' ' || *p == '\t'))
            p++;
        if ((size_t)(stop - p) > kl && strncmp(p, key, kl) == 0 && p[kl] == ':') {
            p += kl + 1;
            while (p < stop && (*p == ' ' || *p == '\t'))
                p++;
            const char *v = p, *ve = stop;
            if (p < stop && (*p == '\'' || *p == '"')) {
                const char *q = memchr(p + 1, *p, (size_t)(stop - p - 1));
                if (!q)
                    return false;
                v = p + 1;
                ve = q;
            } else {
                while (ve > v && (ve[-1] == ' ' || ve[-1] == '\r' || ve[-1] == '\t'))
                    ve--;
            }
            if (ve == v || (size_t)(ve - v) >= size)
                return false;
            memcpy(out, v, (size_t)(ve - v));
            out[ve - v] = '\0';
            return true;
        }
        line = end ? end + 1 : NULL;
    }
    return false;
}

int conf_parse_rocm_smi_bus(const char *text, conf_vdevs_t *out, char *why, size_t len)
{
    json_t *j = load(text, "rocm-smi --showbus --json", why, len);
    if (!j)
        return CR_EPARSE;
    int err = 0;
    if (!json_is_object(j)) {
        err = fail(why, len, "rocm-smi --showbus --json: not an object of cards");
        goto out;
    }
    const char *key;
    json_t *o;
    json_object_foreach(j, key, o)
    {
        int64_t card;
        if (strncmp(key, "card", 4) != 0)
            continue; /* "system" */
        json_t *bus = json_object_get(o, "PCI Bus");
        if (cr_parse_i64(key + 4, 10, &card) != 0 || card < 0 || card > 4096 ||
            !json_is_object(o)) {
            err = fail(why, len, "rocm-smi: '%.40s' is not a card", key);
            goto out;
        }
        conf_vdev_t *v = push(out);
        if (!v) {
            err = fail(why, len, "rocm-smi lists more than %d cards", CONF_VDEV_MAX);
            goto out;
        }
        v->index = (int)card;
        if (!json_is_string(bus) || norm_bdf(json_string_value(bus), v->pci) != 0) {
            err = fail(why, len, "rocm-smi %s: \"PCI Bus\" is not a PCI address", key);
            goto out;
        }
    }
out:
    json_decref(j);
    return err;
}

int conf_parse_amd_smi_topology(const char *text, conf_vdevs_t *devs, char *why, size_t len)
{
    json_t *j = load(text, "amd-smi topology --json", why, len);
    if (!j)
        return CR_EPARSE;
    int err = 0;
    if (!json_is_array(j)) {
        err = fail(why, len, "amd-smi topology --json: not an array of GPUs");
        goto out;
    }
    for (size_t k = 0; k < devs->n; k++)
        devs->v[k].nlinks = -1; /* not in the matrix */
    size_t i;
    json_t *o;
    json_array_foreach(j, i, o)
    {
        long long gpu;
        json_t *types = json_object_get(o, "link_type");
        if (!json_is_object(o) || !json_int(o, "gpu", &gpu)) {
            err = fail(why, len, "amd-smi topology entry %zu: no gpu number", i);
            goto out;
        }
        if (!json_is_object(types)) {
            err = fail(why, len, "amd-smi topology GPU %lld: no link_type", gpu);
            goto out;
        }
        conf_vdev_t *v = NULL;
        for (size_t k = 0; k < devs->n && !v; k++)
            if (devs->v[k].index == gpu)
                v = &devs->v[k];
        if (!v)
            continue; /* the comparison says a GPU is missing */
        v->nlinks = 0;
        const char *key;
        json_t *t;
        json_object_foreach(types, key, t)
        {
            int64_t peer;
            if (strncmp(key, "gpu_", 4) != 0 || cr_parse_i64(key + 4, 10, &peer) != 0 || peer < 0 ||
                peer > 4096 || !json_is_string(t)) {
                err = fail(why, len, "amd-smi topology GPU %lld: link_type '%.40s' is not gpu_N",
                           gpu, key);
                goto out;
            }
            if (strcmp(json_string_value(t), "XGMI") != 0)
                continue;
            if (v->nlinks >= CONF_VDEV_LINKS) {
                err = fail(why, len, "amd-smi topology GPU %lld: more than %d XGMI peers", gpu,
                           CONF_VDEV_LINKS);
                goto out;
            }
            v->links[v->nlinks++] = (int)peer;
        }
    }
out:
    json_decref(j);
    return err;
}

/* ---- the isolation probes (conformance_isolation.c) ---- */

#define PROBE_TAG "CORRAL-PROBE "

int conf_parse_probe(const char *text, conf_probe_t *out, char *why, size_t len)
{
    memset(out, 0, sizeof(*out));
    out->count = -1;
    const char *p = text;
    while (p && strncmp(p, PROBE_TAG, strlen(PROBE_TAG)) != 0) {
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    if (!p)
        return fail(why, len, "no line starting '%s'", PROBE_TAG);
    p += strlen(PROBE_TAG);
    size_t n = strcspn(p, "\n");
    if (strncmp(p, "skip ", 5) == 0) {
        out->skip = true;
        size_t w = n - 5 < sizeof(out->why) - 1 ? n - 5 : sizeof(out->why) - 1;
        memcpy(out->why, p + 5, w);
        out->why[w] = '\0';
        return 0;
    }
    char line[1400];
    if (n >= sizeof(line))
        return fail(why, len, "the probe's line is longer than %zu bytes", sizeof(line) - 1);
    memcpy(line, p, n);
    line[n] = '\0';
    char ids[1024], extra;
    int count;
    if (sscanf(line, "ok %63s %d %1023s %c", out->runtime, &count, ids, &extra) != 3 || count < 0 ||
        count > CONF_VDEV_MAX)
        return fail(why, len, "'%.120s' is not 'ok RUNTIME COUNT IDS'", line);
    out->count = count;
    if (strcmp(ids, "-") != 0)
        cr_strlcpy(out->ids, ids, sizeof(out->ids));
    return 0;
}

int conf_parse_sycl_ls(const char *text, conf_probe_t *out, char *why, size_t len)
{
    (void)why;
    (void)len;
    memset(out, 0, sizeof(*out));
    cr_strlcpy(out->runtime, "sycl-ls", sizeof(out->runtime));
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        char buf[512];
        size_t k = n < sizeof(buf) - 1 ? n : sizeof(buf) - 1;
        memcpy(buf, line, k);
        buf[k] = '\0';
        if (buf[0] == '[' && strstr(buf, "level_zero:gpu")) {
            if (!out->count) {
                char *open = strrchr(buf, '['), *close = open ? strchr(open, ']') : NULL;
                if (open && open != buf && close && close - open > 1 && close - open < 40)
                    snprintf(out->runtime, sizeof(out->runtime), "Level-Zero-%.*s",
                             (int)(close - open - 1), open + 1);
            }
            if (out->count < CONF_VDEV_MAX)
                out->count++;
        }
        line = end ? end + 1 : NULL;
    }
    return 0;
}

static void version_member(json_t *o, const char *key, char *out, size_t size)
{
    const char *v = json_string_value(json_object_get(o, key));
    out[0] = '\0';
    if (v && strcmp(v, "N/A") != 0 && !strpbrk(v, " \t\n"))
        cr_strlcpy(out, v, size);
}

int conf_parse_amd_smi_version(const char *text, conf_amd_versions_t *out, char *why, size_t len)
{
    memset(out, 0, sizeof(*out));
    json_t *j = load(text, "amd-smi version --json", why, len);
    if (!j)
        return CR_EPARSE;
    json_t *o = json_is_array(j) ? json_array_get(j, 0) : j;
    int err = 0;
    if (!json_is_object(o))
        err = fail(why, len, "amd-smi version --json: not an object (or an array of one)");
    else {
        version_member(o, "rocm_version", out->rocm, sizeof(out->rocm));
        version_member(o, "amdsmi_library_version", out->library, sizeof(out->library));
        version_member(o, "amdgpu_version", out->amdgpu, sizeof(out->amdgpu));
    }
    json_decref(j);
    return err;
}
