/* The parsers of the vendors' tools' outputs (cli/conformance_parse.c):
 * the first byte picks the tool, the rest is what it printed. Never
 * crashes, never keeps more than CONF_VDEV_MAX devices or CONF_VDEV_LINKS
 * peers, always says why when it refuses, and what it accepts is in range. */
#include "cli/conformance.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*parse_fn)(const char *, conf_vdevs_t *, char *, size_t);

/* tpu-env: a value that fits, or nothing */
static int tpu_env(const char *text, conf_vdevs_t *out, char *why, size_t len)
{
    (void)out;
    char v[16];
    memset(v, 0x5a, sizeof(v));
    if (conf_tpu_env_value(text, "TOPOLOGY", v, sizeof(v)) && !memchr(v, '\0', sizeof(v)))
        abort();
    snprintf(why, len, "-");
    return 0;
}

/* the isolation probe's line and sycl-ls: strings terminated, counts in range */
static void probe_ok(const conf_probe_t *p)
{
    if (!memchr(p->why, '\0', sizeof(p->why)) || !memchr(p->runtime, '\0', sizeof(p->runtime)) ||
        !memchr(p->ids, '\0', sizeof(p->ids)) || p->count < -1 || p->count > CONF_VDEV_MAX)
        abort();
}

static int probe(const char *text, conf_vdevs_t *out, char *why, size_t len)
{
    (void)out;
    conf_probe_t p;
    int err = conf_parse_probe(text, &p, why, len);
    probe_ok(&p);
    if (!err && !p.skip && p.count < 0)
        abort();
    return err;
}

static int sycl(const char *text, conf_vdevs_t *out, char *why, size_t len)
{
    (void)out;
    conf_probe_t p;
    int err = conf_parse_sycl_ls(text, &p, why, len);
    probe_ok(&p);
    if (err || p.count < 0 || strchr(p.runtime, '\n'))
        abort();
    return 0;
}

static int amd_version(const char *text, conf_vdevs_t *out, char *why, size_t len)
{
    (void)out;
    conf_amd_versions_t v;
    int err = conf_parse_amd_smi_version(text, &v, why, len);
    if (!memchr(v.rocm, '\0', sizeof(v.rocm)) || !memchr(v.library, '\0', sizeof(v.library)) ||
        !memchr(v.amdgpu, '\0', sizeof(v.amdgpu)) || strpbrk(v.rocm, " \n"))
        abort();
    return err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const parse_fn parsers[] = {conf_parse_neuron_ls,
                                       conf_parse_hl_smi,
                                       conf_parse_xpu_smi,
                                       conf_parse_amd_smi_list,
                                       conf_parse_amd_smi_static,
                                       conf_parse_tpu_info,
                                       tpu_env,
                                       conf_parse_rocm_smi_bus,
                                       conf_parse_amd_smi_topology,
                                       probe,
                                       sycl,
                                       amd_version};
    if (size < 1 || size > 65536)
        return 0;
    char *s = malloc(size);
    if (!s)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    size_t which = data[0] % (sizeof(parsers) / sizeof(parsers[0]));
    conf_vdevs_t v = {0};
    char why[256] = "";
    if (parsers[which] == conf_parse_amd_smi_static ||
        parsers[which] == conf_parse_amd_smi_topology) {
        /* it names devices amd-smi list found: give it some */
        for (int i = 0; i < 4; i++)
            CR_VEC_PUSH(&v)->index = i;
    }
    int err = parsers[which](s, &v, why, sizeof(why));
    if (err && (err != CR_EPARSE || !why[0]))
        abort();
    if (v.n > CONF_VDEV_MAX)
        abort();
    for (size_t i = 0; i < v.n; i++) {
        const conf_vdev_t *d = &v.v[i];
        if (d->nlinks > CONF_VDEV_LINKS || d->nlinks < -1 || d->index < -1 || d->index > 4096)
            abort();
        if (memchr(d->pci, '\0', sizeof(d->pci)) == NULL ||
            memchr(d->name, '\0', sizeof(d->name)) == NULL)
            abort();
        if (d->pci[0] && strlen(d->pci) != 12)
            abort();
    }
    CR_VEC_FREE(&v);
    free(s);
    return 0;
}
