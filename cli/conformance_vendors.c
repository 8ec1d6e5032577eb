/* corral conformance for AMD, Intel GPU, TPU, Neuron and Gaudi: each
 * vendor's own tool, when it is on PATH, is run and what it lists is held
 * against the devices corral discovered. Every difference is a FAIL line
 * naming the device, the fact, and what each side says.
 *
 *   amd     amd-smi list --json: count, PCI address (domain, bus, device),
 *           partition index; amd-smi static --asic --json: product name;
 *           without amd-smi, rocm-smi --showbus --json: the GPUs' addresses;
 *           topology: amd-smi topology --json's XGMI pairs
 *   intel   xpu-smi discovery -j: cards (distinct PCI addresses), names
 *   tpu     tpu-info's TPU Chips table: chip count, device numbers, type;
 *           topology: the slice against the GCE metadata server's
 *   neuron  neuron-ls --json-output: count, PCI address, NeuronCores per
 *           device; topology: connected_to against corral's NeuronLinks
 *   gaudi   hl-smi -Q index,module_id,bus_id,name -f csv,noheader: count,
 *           PCI address, module id, name
 * The formats and their sources: tests/fixtures/vendor-tools/README.md. */
#include "cli.h"
#include "conformance.h"
#include <ctype.h>

#define WHY 256

static size_t count_backend(const cr_node_t *n, const char *be)
{
    size_t k = 0;
    for (size_t i = 0; i < n->devices.n; i++)
        k += strcmp(n->devices.v[i].backend, be) == 0;
    return k;
}

/* The distinct PCI addresses of a backend's devices (cards: an Intel card
 * in FLAT hierarchy is several devices at one address). */
static size_t count_pcis(const cr_node_t *n, const char *be)
{
    size_t k = 0;
    for (size_t i = 0; i < n->devices.n; i++) {
        const cr_device_t *d = &n->devices.v[i];
        if (strcmp(d->backend, be) != 0 || !d->pci[0])
            continue;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(n->devices.v[j].backend, be) == 0 &&
                   strcmp(n->devices.v[j].pci, d->pci) == 0;
        k += !seen;
    }
    return k;
}

static const cr_device_t *by_pci(const cr_node_t *n, const char *be, const char *pci)
{
    for (size_t i = 0; i < n->devices.n; i++)
        if (strcmp(n->devices.v[i].backend, be) == 0 && strcmp(n->devices.v[i].pci, pci) == 0)
            return &n->devices.v[i];
    return NULL;
}

static const cr_device_t *by_vendor_index(const cr_node_t *n, const char *be, int index)
{
    for (size_t i = 0; i < n->devices.n; i++)
        if (strcmp(n->devices.v[i].backend, be) == 0 && n->devices.v[i].vendor_index == index)
            return &n->devices.v[i];
    return NULL;
}

/* Names compared without case, trademark signs and punctuation: xpu-smi's
 * "Intel(R) Data Center GPU Max 1100" is corral's "Intel Data Center GPU
 * Max 1100". */
static void name_key(const char *s, char *out, size_t size)
{
    size_t w = 0;
    for (; *s && w + 1 < size; s++) {
        if (*s == '(' && (strncasecmp(s, "(r)", 3) == 0 || strncasecmp(s, "(tm)", 4) == 0)) {
            s += s[2] == ')' ? 2 : 3;
            continue;
        }
        if (isalnum((unsigned char)*s))
            out[w++] = (char)tolower((unsigned char)*s);
    }
    out[w] = '\0';
}

static bool same_name(const char *a, const char *b)
{
    char ka[96], kb[96];
    name_key(a, ka, sizeof(ka));
    name_key(b, kb, sizeof(kb));
    return strcmp(ka, kb) == 0;
}

/* Runs cmd and parses its output with parse; false (with a FAIL or SKIP
 * line said) when there is nothing to compare. */
static bool run_and_parse(conf_report_t *r, const char *be, const char *tool, const char *cmd,
                          int (*parse)(const char *, conf_vdevs_t *, char *, size_t),
                          conf_vdevs_t *out)
{
    if (!conf_have_tool(tool)) {
        conf_add(r, be, "discovery", R_SKIP, "%s is not on PATH: nothing to compare with", tool);
        return false;
    }
    cr_buf_t buf = {0};
    char why[WHY] = "";
    int err = conf_run_tool(cmd, &buf);
    if (err) {
        /* the command as a person would type it: without the redirection */
        const char *redir = strstr(cmd, " 2>");
        int shown = redir ? (int)(redir - cmd) : (int)strlen(cmd);
        const char *said = buf.s ? buf.s : "";
        if (err == CR_E2BIG)
            conf_add(r, be, "discovery", R_FAIL, "%.*s printed more than %u bytes", shown, cmd,
                     CONF_TOOL_OUTPUT_MAX);
        else if (err == CR_EVENDOR)
            conf_add(r, be, "discovery", R_FAIL, "%.*s exited non-zero%s%.200s", shown, cmd,
                     *said ? ": " : "", said);
        else
            conf_add(r, be, "discovery", R_FAIL, "%.*s could not be run: %s", shown, cmd,
                     cr_strerror(err));
        cr_buf_free(&buf);
        return false;
    }
    err = parse(buf.s, out, why, sizeof(why));
    cr_buf_free(&buf);
    if (err) {
        conf_add(r, be, "discovery", R_FAIL, "%s", why);
        return false;
    }
    return true;
}

static void count_check(conf_report_t *r, const char *be, const char *tool, size_t theirs,
                        size_t ours, const char *what, size_t *bad)
{
    if (theirs == ours)
        return;
    conf_add(r, be, "discovery", R_FAIL, "%s shows %zu %s, corral %zu", tool, theirs, what, ours);
    (*bad)++;
}

/* ---- neuron ---- */

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static void list_ints(const int *v, int n, char *out, size_t size)
{
    size_t w = 0;
    out[0] = '\0';
    for (int i = 0; i < n && w + 8 < size; i++)
        w += (size_t)snprintf(out + w, size - w, "%s%d", i ? "," : "", v[i]);
    if (n == 0)
        snprintf(out, size, "none");
}

static void neuron_checks(conf_report_t *r, const cr_node_t *n)
{
    conf_vdevs_t v = {0};
    if (!run_and_parse(r, "neuron", "neuron-ls", "neuron-ls --json-output 2>/dev/null",
                       conf_parse_neuron_ls, &v)) {
        if (conf_have_tool("neuron-ls"))
            conf_add(r, "neuron", "discovery", R_INFO,
                     "Neuron 2.34 and later print JSON with --output-format json instead of "
                     "--json-output; that format is not read yet");
        conf_add(r, "neuron", "topology", R_SKIP, "no neuron-ls output to compare with");
        goto out;
    }
    size_t bad = 0, links_bad = 0, peers = 0;
    for (size_t i = 0; i < v.n; i++) {
        const conf_vdev_t *x = &v.v[i];
        const cr_device_t *d = by_vendor_index(n, "neuron", x->index);
        if (!d) {
            conf_add(r, "neuron", "discovery", R_FAIL,
                     "neuron-ls shows device %d (%s); corral has none", x->index, x->pci);
            bad++;
            continue;
        }
        if (strcmp(d->pci, x->pci) != 0) {
            conf_add(r, "neuron", "discovery", R_FAIL,
                     "device %d: PCI address: neuron-ls says %s, corral %s", x->index, x->pci,
                     d->pci);
            bad++;
        }
        if (d->cores != x->id) {
            conf_add(r, "neuron", "discovery", R_FAIL,
                     "device %d: NeuronCores: neuron-ls says %d (nc_count), corral %d", x->index,
                     x->id, d->cores);
            bad++;
        }
        /* topology: connected_to against corral's NeuronLinks of d */
        int theirs[CONF_VDEV_LINKS], ours[CONF_VDEV_LINKS], nt = 0, no = 0;
        for (int k = 0; k < x->nlinks; k++)
            theirs[nt++] = x->links[k];
        for (size_t k = 0; k < n->links.n && no < CONF_VDEV_LINKS; k++) {
            const cr_link_t *l = &n->links.v[k];
            if (l->kind != CR_LINK_NEURONLINK || (l->a != d->index && l->b != d->index))
                continue;
            int other = l->a == d->index ? l->b : l->a;
            ours[no++] = n->devices.v[other].vendor_index;
        }
        qsort(theirs, (size_t)nt, sizeof(int), cmp_int);
        qsort(ours, (size_t)no, sizeof(int), cmp_int);
        peers += (size_t)nt;
        if (nt != no || memcmp(theirs, ours, (size_t)nt * sizeof(int)) != 0) {
            char a[256], b[256];
            list_ints(theirs, nt, a, sizeof(a));
            list_ints(ours, no, b, sizeof(b));
            conf_add(r, "neuron", "topology", R_FAIL,
                     "device %d: neuron-ls connects it to %s, corral to %s", x->index, a, b);
            links_bad++;
        }
    }
    count_check(r, "neuron", "neuron-ls", v.n, count_backend(n, "neuron"), "devices", &bad);
    if (!bad)
        conf_add(r, "neuron", "discovery", R_PASS,
                 "%zu devices: PCI address and NeuronCores as neuron-ls says", v.n);
    if (!links_bad)
        conf_add(r, "neuron", "topology", R_PASS,
                 "%zu devices: every device's NeuronLink peers are neuron-ls's connected_to (%zu "
                 "in all)",
                 v.n, peers);
out:
    CR_VEC_FREE(&v);
}

/* ---- gaudi ---- */

static void gaudi_checks(conf_report_t *r, const cr_node_t *n)
{
    conf_vdevs_t v = {0};
    if (!run_and_parse(r, "gaudi", "hl-smi",
                       "hl-smi -Q index,module_id,bus_id,name -f csv,noheader 2>&1",
                       conf_parse_hl_smi, &v))
        goto out;
    size_t bad = 0;
    for (size_t i = 0; i < v.n; i++) {
        const conf_vdev_t *x = &v.v[i];
        const cr_device_t *d = by_pci(n, "gaudi", x->pci);
        if (!d) {
            conf_add(r, "gaudi", "discovery", R_FAIL,
                     "hl-smi shows device %d at %s (module %d); corral has none there", x->index,
                     x->pci, x->id);
            bad++;
            continue;
        }
        if (d->vendor_index != x->id) {
            conf_add(r, "gaudi", "discovery", R_FAIL, "%s: module id: hl-smi says %d, corral %d",
                     x->pci, x->id, d->vendor_index);
            bad++;
        }
        if (!same_name(d->product, x->name)) {
            conf_add(r, "gaudi", "discovery", R_FAIL, "%s: name: hl-smi says %s, corral %s", x->pci,
                     x->name, d->product);
            bad++;
        }
    }
    count_check(r, "gaudi", "hl-smi", v.n, count_backend(n, "gaudi"), "devices", &bad);
    if (!bad)
        conf_add(r, "gaudi", "discovery", R_PASS,
                 "%zu devices: PCI address, module id and name as hl-smi says", v.n);
out:
    CR_VEC_FREE(&v);
    conf_add(r, "gaudi", "topology", R_SKIP,
             "hl-smi's port listings are not compared with corral's RoCE links yet");
}

/* ---- intel ---- */

static void intel_checks(conf_report_t *r, const cr_node_t *n)
{
    conf_vdevs_t v = {0};
    if (!run_and_parse(r, "intel", "xpu-smi", "xpu-smi discovery -j 2>/dev/null",
                       conf_parse_xpu_smi, &v))
        goto out;
    size_t bad = 0;
    for (size_t i = 0; i < v.n; i++) {
        const conf_vdev_t *x = &v.v[i];
        const cr_device_t *d = by_pci(n, "intel", x->pci);
        if (!d) {
            conf_add(r, "intel", "discovery", R_FAIL,
                     "xpu-smi shows device %d at %s (%s); corral has none there", x->index, x->pci,
                     x->name);
            bad++;
        } else if (x->name[0] && !same_name(d->product, x->name)) {
            conf_add(r, "intel", "discovery", R_FAIL, "%s: name: xpu-smi says %s, corral %s",
                     x->pci, x->name, d->product);
            bad++;
        }
    }
    count_check(r, "intel", "xpu-smi", v.n, count_pcis(n, "intel"), "cards", &bad);
    if (!bad)
        conf_add(r, "intel", "discovery", R_PASS,
                 "%zu cards: PCI address and name as xpu-smi says (corral: %zu devices on them)",
                 v.n, count_backend(n, "intel"));
out:
    CR_VEC_FREE(&v);
    conf_add(r, "intel", "topology", R_SKIP,
             "xpu-smi topology -m is not compared with corral's links yet");
}

/* ---- amd ---- */

/* amdkfd ORs a partition's index into location_id's low bits (the
 * function), so amd-smi may give partition k the address ....:.k; the GPU
 * is domain, bus and device. */
static bool same_gpu(const char *a, const char *b)
{
    return strlen(a) >= 10 && strncmp(a, b, 10) == 0;
}

/* Older ROCm without amd-smi: rocm-smi's PCI Bus of each card. A card
 * is a GPU here (how rocm-smi lists partitions is not recorded), so the
 * GPUs are compared as sets of addresses, without partitions or names. */
static void rocm_smi_checks(conf_report_t *r, const cr_node_t *n)
{
    conf_vdevs_t v = {0};
    if (!run_and_parse(r, "amd", "rocm-smi", "rocm-smi --showbus --json 2>/dev/null",
                       conf_parse_rocm_smi_bus, &v))
        goto out;
    size_t bad = 0, gpus = 0;
    for (size_t i = 0; i < v.n; i++) {
        bool found = false;
        for (size_t k = 0; k < n->devices.n && !found; k++)
            found = strcmp(n->devices.v[k].backend, "amd") == 0 &&
                    same_gpu(n->devices.v[k].pci, v.v[i].pci);
        if (!found) {
            conf_add(r, "amd", "discovery", R_FAIL,
                     "rocm-smi shows card%d at %s; corral has no GPU there", v.v[i].index,
                     v.v[i].pci);
            bad++;
        }
    }
    for (size_t k = 0; k < n->devices.n; k++) {
        const cr_device_t *d = &n->devices.v[k];
        if (strcmp(d->backend, "amd") != 0)
            continue;
        bool first = true, listed = false;
        for (size_t j = 0; j < k && first; j++)
            first = !(strcmp(n->devices.v[j].backend, "amd") == 0 &&
                      same_gpu(n->devices.v[j].pci, d->pci));
        if (!first)
            continue; /* another partition of a GPU already looked at */
        gpus++;
        for (size_t i = 0; i < v.n && !listed; i++)
            listed = same_gpu(d->pci, v.v[i].pci);
        if (!listed) {
            conf_add(r, "amd", "discovery", R_FAIL, "corral has a GPU at %s; rocm-smi shows none",
                     d->pci);
            bad++;
        }
    }
    if (!bad)
        conf_add(r, "amd", "discovery", R_PASS,
                 "%zu GPUs: PCI addresses as rocm-smi --showbus says (amd-smi is not installed: "
                 "partitions and names not compared)",
                 gpus);
out:
    CR_VEC_FREE(&v);
}

/* The corral device amd-smi's entry x is (GPU address and partition). */
static const cr_device_t *amd_device(const cr_node_t *n, const conf_vdev_t *x)
{
    for (size_t k = 0; k < n->devices.n; k++) {
        const cr_device_t *e = &n->devices.v[k];
        if (strcmp(e->backend, "amd") == 0 && same_gpu(e->pci, x->pci) &&
            (e->partition < 0 ? 0 : e->partition) == x->id)
            return e;
    }
    return NULL;
}

/* amd-smi topology's XGMI pairs against corral's xGMI links (same-GPU
 * partitions' ones included), in amd-smi's GPU numbers. */
static void amd_topology(conf_report_t *r, const cr_node_t *n, conf_vdevs_t *v)
{
    cr_buf_t out = {0};
    char why[WHY] = "";
    if (conf_run_tool("amd-smi topology --json 2>/dev/null", &out) != 0) {
        conf_add(r, "amd", "topology", R_SKIP, "amd-smi topology --json failed: not compared");
        cr_buf_free(&out);
        return;
    }
    int err = conf_parse_amd_smi_topology(out.s, v, why, sizeof(why));
    cr_buf_free(&out);
    if (err) {
        conf_add(r, "amd", "topology", R_FAIL, "%s", why);
        return;
    }
    size_t bad = 0, pairs = 0;
    for (size_t i = 0; i < v->n; i++) {
        const conf_vdev_t *x = &v->v[i];
        const cr_device_t *d = amd_device(n, x);
        if (!d || x->nlinks < 0)
            continue; /* discovery said so */
        int theirs[CONF_VDEV_LINKS], ours[CONF_VDEV_LINKS], nt = 0, no = 0;
        /* only peers both sides know: one missing on either is discovery's FAIL */
        for (int k = 0; k < x->nlinks; k++)
            for (size_t m = 0; m < v->n; m++)
                if (v->v[m].index == x->links[k] && amd_device(n, &v->v[m])) {
                    theirs[nt++] = x->links[k];
                    break;
                }
        for (size_t k = 0; k < n->links.n && no < CONF_VDEV_LINKS; k++) {
            const cr_link_t *l = &n->links.v[k];
            if ((l->kind != CR_LINK_XGMI && l->kind != CR_LINK_XGMI_SAME_GPU) ||
                (l->a != d->index && l->b != d->index))
                continue;
            const cr_device_t *o = &n->devices.v[l->a == d->index ? l->b : l->a];
            for (size_t m = 0; m < v->n; m++)
                if (amd_device(n, &v->v[m]) == o && no < CONF_VDEV_LINKS)
                    ours[no++] = v->v[m].index;
        }
        qsort(theirs, (size_t)nt, sizeof(int), cmp_int);
        qsort(ours, (size_t)no, sizeof(int), cmp_int);
        pairs += (size_t)nt;
        if (nt != no || memcmp(theirs, ours, (size_t)nt * sizeof(int)) != 0) {
            char a[256], b[256];
            list_ints(theirs, nt, a, sizeof(a));
            list_ints(ours, no, b, sizeof(b));
            conf_add(r, "amd", "topology", R_FAIL,
                     "GPU %d (%s): amd-smi shows XGMI to GPUs %s, corral xGMI links to %s",
                     x->index, x->pci, a, b);
            bad++;
        }
    }
    if (!bad)
        conf_add(r, "amd", "topology", R_PASS,
                 "%zu devices: every XGMI pair of amd-smi topology is a corral xGMI link (%zu "
                 "in all)",
                 v->n, pairs / 2);
}

static void amd_checks(conf_report_t *r, const cr_node_t *n)
{
    conf_vdevs_t v = {0};
    if (!conf_have_tool("amd-smi") && conf_have_tool("rocm-smi")) {
        rocm_smi_checks(r, n);
        conf_add(r, "amd", "topology", R_SKIP, "no amd-smi: the xGMI links are not compared");
        goto out;
    }
    if (!run_and_parse(r, "amd", "amd-smi", "amd-smi list --json 2>/dev/null",
                       conf_parse_amd_smi_list, &v)) {
        conf_add(r, "amd", "topology", R_SKIP, "no amd-smi list to compare with");
        goto out;
    }
    /* the names, from amd-smi static; an amd-smi without --asic leaves them */
    cr_buf_t st = {0};
    char why[WHY] = "";
    bool names = conf_run_tool("amd-smi static --asic --json 2>/dev/null", &st) == 0;
    if (names && conf_parse_amd_smi_static(st.s, &v, why, sizeof(why)) != 0) {
        conf_add(r, "amd", "discovery", R_FAIL, "%s", why);
        names = false;
    } else if (!names) {
        conf_add(r, "amd", "discovery", R_INFO,
                 "amd-smi static --asic --json failed: product names not compared");
    }
    cr_buf_free(&st);
    size_t bad = 0, parts = 0;
    for (size_t i = 0; i < v.n; i++) {
        const conf_vdev_t *x = &v.v[i];
        const cr_device_t *d = amd_device(n, x);
        parts += x->id > 0;
        if (!d) {
            conf_add(r, "amd", "discovery", R_FAIL,
                     "amd-smi shows GPU %d at %s, partition %d; corral has none there", x->index,
                     x->pci, x->id);
            bad++;
            continue;
        }
        if (names && x->name[0] && !same_name(d->product, x->name)) {
            conf_add(r, "amd", "discovery", R_FAIL, "GPU %d (%s): name: amd-smi says %s, corral %s",
                     x->index, x->pci, x->name, d->product);
            bad++;
        }
    }
    count_check(r, "amd", "amd-smi", v.n, count_backend(n, "amd"), "GPUs and partitions", &bad);
    if (!bad)
        conf_add(r, "amd", "discovery", R_PASS,
                 "%zu devices (%s): PCI address, partition%s as amd-smi says", v.n,
                 parts ? "partitioned" : "no partitions", names ? " and name" : "");
    amd_topology(r, n, &v);
out:
    CR_VEC_FREE(&v);
}

/* ---- tpu ---- */

/* The slice corral put this host in against the GCE metadata server's
 * accelerator-type, tpu-env's TOPOLOGY and agent-worker-number (the keys
 * Ray's and PyTorch/XLA's TPU support read). On GKE corral's slice comes
 * from the variables the TPU device plugin sets, so this holds them to
 * what Google's control plane says about the VM. */
static void tpu_slice_check(conf_report_t *r, const cr_node_t *n)
{
    const cr_domain_t *slice = NULL;
    for (size_t i = 0; i < n->domains.n && !slice; i++)
        if (strcmp(n->domains.v[i].kind, "tpu-slice") == 0)
            slice = &n->domains.v[i];
    if (!slice) {
        conf_add(r, "tpu", "topology", R_SKIP, "corral put this host in no slice");
        return;
    }
    static const char *const keys[] = {"accelerator-type", "tpu-env", "agent-worker-number"};
    char *val[3];
    const char *root = getenv("CORRAL_SYSFS_ROOT");
    cr_hw_env_t env = {.root = root && *root ? root : "/"};
    /* a diagnostic run can wait longer than the probe's 300 ms */
    int err = hw_gce_attributes(&env, keys, val, 3, 10000);
    if (err == CR_ENODEV) {
        conf_add(r, "tpu", "topology", R_SKIP,
                 "not a GCE VM, or CORRAL_GCE_METADATA=off: slice %s not compared with the "
                 "metadata server's",
                 slice->name);
        return;
    }
    size_t bad = 0;
    char topo[32] = "";
    bool have_topo = val[1] && conf_tpu_env_value(val[1], "TOPOLOGY", topo, sizeof(topo));
    char ours_worker[16];
    snprintf(ours_worker, sizeof(ours_worker), "%d", slice->worker_id);
    struct {
        const char *what, *theirs, *ours;
    } cmp[] = {
        {"accelerator type (accelerator-type)", val[0], slice->accelerator_type},
        {"topology (tpu-env TOPOLOGY)", have_topo ? topo : NULL, slice->topology},
        {"worker id (agent-worker-number)", val[2], ours_worker},
    };
    size_t compared = 0;
    for (size_t i = 0; i < CR_ARRAY_SIZE(cmp); i++) {
        if (!cmp[i].theirs) {
            conf_add(r, "tpu", "topology", R_INFO, "the metadata server gives no %s", cmp[i].what);
            continue;
        }
        compared++;
        if (strcasecmp(cmp[i].theirs, cmp[i].ours) != 0) {
            conf_add(r, "tpu", "topology", R_FAIL,
                     "slice %s: %s: the metadata server says %s, corral %s", slice->name,
                     cmp[i].what, cmp[i].theirs, cmp[i].ours[0] ? cmp[i].ours : "none");
            bad++;
        }
    }
    if (err == CR_EIO && !compared) {
        conf_add(r, "tpu", "topology", R_FAIL,
                 "the GCE metadata server did not answer: slice %s not compared", slice->name);
        bad++;
    } else if (!compared) {
        conf_add(r, "tpu", "topology", R_SKIP,
                 "the metadata server gives none of accelerator-type, tpu-env TOPOLOGY, "
                 "agent-worker-number");
    } else if (!bad) {
        conf_add(r, "tpu", "topology", R_PASS,
                 "slice %s: %s, %s, worker %d as the GCE metadata server says", slice->name,
                 slice->accelerator_type, slice->topology, slice->worker_id);
    }
    for (size_t i = 0; i < 3; i++)
        free(val[i]);
}

static void tpu_checks(conf_report_t *r, const cr_node_t *n)
{
    conf_vdevs_t v = {0};
    if (!run_and_parse(r, "tpu", "tpu-info", "tpu-info 2>/dev/null", conf_parse_tpu_info, &v))
        goto out;
    size_t bad = 0;
    for (size_t i = 0; i < v.n; i++) {
        const conf_vdev_t *x = &v.v[i];
        const cr_device_t *d = by_vendor_index(n, "tpu", x->index);
        if (!d) {
            conf_add(r, "tpu", "discovery", R_FAIL, "tpu-info shows chip %d; corral has none",
                     x->index);
            bad++;
            continue;
        }
        /* corral's product is "TPU v6e"; tpu-info's type "TPU v6e chip" */
        const char *gen = strncmp(d->product, "TPU ", 4) == 0 ? d->product + 4 : d->product;
        if (strcasecmp(gen, x->name) != 0) {
            conf_add(r, "tpu", "discovery", R_FAIL, "chip %d: type: tpu-info says %s, corral %s",
                     x->index, x->name, gen);
            bad++;
        }
    }
    count_check(r, "tpu", "tpu-info", v.n, count_backend(n, "tpu"), "chips", &bad);
    if (!bad)
        conf_add(r, "tpu", "discovery", R_PASS,
                 "%zu chips: device numbers and type as tpu-info says", v.n);
out:
    CR_VEC_FREE(&v);
    tpu_slice_check(r, n);
}

bool conf_vendor_checks(conf_report_t *r, const cr_node_t *n, const char *backend)
{
    static const struct {
        const char *backend;
        void (*checks)(conf_report_t *, const cr_node_t *);
    } table[] = {
        {"amd", amd_checks},       {"intel", intel_checks}, {"tpu", tpu_checks},
        {"neuron", neuron_checks}, {"gaudi", gaudi_checks},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(table); i++)
        if (strcmp(table[i].backend, backend) == 0) {
            table[i].checks(r, n);
            return true;
        }
    return false;
}

/* ---- versions the tools report ---- */

static void amd_versions(conf_report_t *r)
{
    if (!conf_have_tool("amd-smi"))
        return;
    cr_buf_t out = {0};
    conf_amd_versions_t v;
    char why[WHY];
    if (conf_run_tool("amd-smi version --json 2>/dev/null", &out) != 0)
        conf_add(r, "amd", "versions", R_INFO, "amd-smi version --json failed: not recorded");
    else if (conf_parse_amd_smi_version(out.s, &v, why, sizeof(why)) != 0)
        conf_add(r, "amd", "versions", R_INFO, "amd-smi version: %s", why);
    else {
        conf_add(r, "amd", "versions", R_INFO,
                 "amd-smi says ROCm %s, amdgpu %s, AMD SMI library %s", v.rocm[0] ? v.rocm : "?",
                 v.amdgpu[0] ? v.amdgpu : "?", v.library[0] ? v.library : "?");
        if (!r->runtime[0] && v.rocm[0])
            snprintf(r->runtime, sizeof(r->runtime), "ROCm-%s", v.rocm);
    }
    cr_buf_free(&out);
}

/* hl-smi -Q driver_version: one line a device, the same on each. */
static void gaudi_versions(conf_report_t *r)
{
    if (!conf_have_tool("hl-smi"))
        return;
    cr_buf_t out = {0};
    if (conf_run_tool("hl-smi -Q driver_version -f csv,noheader 2>/dev/null", &out) == 0) {
        char first[64];
        size_t n = strcspn(out.s, "\r\n");
        snprintf(first, sizeof(first), "%.*s", (int)(n < sizeof(first) ? n : sizeof(first) - 1),
                 out.s);
        bool printable = first[0] != '\0';
        for (const char *p = first; *p; p++)
            printable &= isprint((unsigned char)*p) != 0;
        if (printable)
            conf_add(r, "gaudi", "versions", R_INFO, "hl-smi says driver %s", first);
        else
            conf_add(r, "gaudi", "versions", R_INFO, "hl-smi -Q driver_version printed nothing");
    } else {
        conf_add(r, "gaudi", "versions", R_INFO, "hl-smi -Q driver_version failed: not recorded");
    }
    cr_buf_free(&out);
}

void conf_vendor_versions(conf_report_t *r, const char *backend)
{
    if (strcmp(backend, "amd") == 0)
        amd_versions(r);
    else if (strcmp(backend, "gaudi") == 0)
        gaudi_versions(r);
}
