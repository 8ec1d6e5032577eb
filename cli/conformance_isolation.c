/* corral conformance, isolation for AMD, Intel GPU, TPU, Neuron and Gaudi:
 * does the vendor's runtime honour the environment `corral hw --isolate`
 * gives a worker? For one device (the second, or the only one) and for two
 * (the first two) when the node has them, a child is run under exactly
 * that environment (the backend's isolation variables of the parent
 * removed first) and asked, through the backend's framework, what it
 * sees; the count, and the PCI addresses where the runtime tells them,
 * are held against the devices chosen.
 *
 *   amd     PyTorch built for ROCm (torch.version.hip): torch.cuda's count
 *           and each device's PCI domain, bus and device. amd-smi and
 *           rocm-smi are not asked: they read the driver through the
 *           management library, not through HIP or ROCr, where
 *           HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES act.
 *   intel   PyTorch's torch.xpu (with intel_extension_for_pytorch when
 *           installed): the count; else sycl-ls, whose Level Zero devices
 *           are what the Level Zero driver leaves under ZE_AFFINITY_MASK.
 *           xpu-smi is not asked: ZE_AFFINITY_MASK acts on Level Zero's
 *           core API, not on Sysman.
 *   tpu     JAX: jax.devices('tpu'). tpu-info lists the chips from their
 *           device files, not through libtpu, so it does not stand in.
 *   neuron  torch-neuronx's torch_xla: the runtime's device count, one per
 *           NeuronCore of NEURON_RT_VISIBLE_CORES. neuron-ls reads the
 *           driver, not the runtime (libnrt) that the variable configures.
 *   gaudi   habana_frameworks.torch.hpu's device count. hl-smi reads the
 *           driver through HLML; HABANA_VISIBLE_MODULES is the framework's.
 * The interpreter is CORRAL_CONFORMANCE_PYTHON, else python3. A probe
 * prints one line "CORRAL-PROBE ok RUNTIME COUNT IDS" (IDS: PCI addresses
 * joined by commas, "-" when the runtime tells none) or "CORRAL-PROBE skip
 * WHY". */
#include "cli.h"
#include "conformance.h"

static const char amd_script[] =
    "import sys\n"
    "def say(*a):\n"
    "    print('CORRAL-PROBE', *a); sys.exit(0)\n"
    "try:\n"
    "    import torch\n"
    "except Exception as e:\n"
    "    say('skip', 'PyTorch is not installed (%s: %.100s)' % (type(e).__name__, e))\n"
    "hip = getattr(torch.version, 'hip', None)\n"
    "if not hip:\n"
    "    say('skip', 'this PyTorch is not built for ROCm (torch.version.hip is None)')\n"
    "n = torch.cuda.device_count()\n"
    "ids = []\n"
    "for i in range(n):\n"
    "    p = torch.cuda.get_device_properties(i)\n"
    "    if getattr(p, 'pci_bus_id', None) is None:\n"
    "        ids = None\n"
    "        break\n"
    "    ids.append('%04x:%02x:%02x.0' % (getattr(p, 'pci_domain_id', 0), p.pci_bus_id,\n"
    "                                     getattr(p, 'pci_device_id', 0)))\n"
    "say('ok', 'HIP-' + str(hip).replace(' ', '_'), n, ','.join(ids) if ids else '-')\n";

static const char intel_script[] =
    "import sys\n"
    "def say(*a):\n"
    "    print('CORRAL-PROBE', *a); sys.exit(0)\n"
    "try:\n"
    "    import torch\n"
    "except Exception as e:\n"
    "    say('skip', 'PyTorch is not installed (%s: %.100s)' % (type(e).__name__, e))\n"
    "try:\n"
    "    import intel_extension_for_pytorch\n"
    "except Exception:\n"
    "    pass\n"
    "if not hasattr(torch, 'xpu') or not torch.xpu.is_available():\n"
    "    say('skip', 'this PyTorch has no XPU device (torch.xpu.is_available() is false)')\n"
    "v = getattr(torch.version, 'xpu', None) or torch.__version__\n"
    "say('ok', 'torch.xpu-' + str(v).replace(' ', '_'), torch.xpu.device_count(), '-')\n";

static const char tpu_script[] =
    "import sys\n"
    "def say(*a):\n"
    "    print('CORRAL-PROBE', *a); sys.exit(0)\n"
    "try:\n"
    "    import jax\n"
    "except Exception as e:\n"
    "    say('skip', 'JAX is not installed (%s: %.100s)' % (type(e).__name__, e))\n"
    "try:\n"
    "    ds = jax.devices('tpu')\n"
    "except Exception as e:\n"
    "    say('skip', 'JAX has no TPU backend (%s)' % type(e).__name__)\n"
    "say('ok', 'jax-' + jax.__version__, len(ds), '-')\n";

static const char neuron_script[] = "import sys\n"
                                    "def say(*a):\n"
                                    "    print('CORRAL-PROBE', *a); sys.exit(0)\n"
                                    "try:\n"
                                    "    import torch_xla\n"
                                    "    import torch_xla.runtime as xr\n"
                                    "except Exception as e:\n"
                                    "    say('skip', 'torch-neuronx (torch_xla) is not installed "
                                    "(%s: %.100s)' % (type(e).__name__, e))\n"
                                    "try:\n"
                                    "    import torch_neuronx\n"
                                    "    v = 'torch-neuronx-' + torch_neuronx.__version__\n"
                                    "except Exception:\n"
                                    "    v = 'torch_xla-' + torch_xla.__version__\n"
                                    "say('ok', v, xr.global_runtime_device_count(), '-')\n";

static const char gaudi_script[] =
    "import sys\n"
    "def say(*a):\n"
    "    print('CORRAL-PROBE', *a); sys.exit(0)\n"
    "try:\n"
    "    import habana_frameworks.torch.hpu as hthpu\n"
    "except Exception as e:\n"
    "    say('skip', 'habana_frameworks.torch is not installed (%s: %.100s)' % (type(e).__name__, "
    "e))\n"
    "if not hthpu.is_available():\n"
    "    say('skip', 'habana_frameworks.torch.hpu.is_available() is false')\n"
    "import habana_frameworks.torch as ht\n"
    "v = getattr(ht, '__version__', '?')\n"
    "say('ok', 'habana_frameworks.torch-' + str(v), hthpu.device_count(), '-')\n";

typedef struct iso_backend {
    const char *backend;
    const char *framework; /* as lines name it */
    const char *script;
    const char *fallback_why; /* why the vendor's tool does not stand in; NULL: sycl-ls does */
} iso_backend_t;

static const iso_backend_t backends[] = {
    {"amd", "PyTorch", amd_script,
     "amd-smi and rocm-smi read the driver, not through HIP or ROCr: they do not honour "
     "HIP_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES"},
    {"intel", "PyTorch", intel_script, NULL},
    {"tpu", "JAX", tpu_script,
     "tpu-info lists chips from their device files, not through libtpu: it does not honour "
     "TPU_VISIBLE_CHIPS"},
    {"neuron", "torch_xla", neuron_script,
     "neuron-ls reads the driver, not the Neuron runtime: it does not honour "
     "NEURON_RT_VISIBLE_CORES"},
    {"gaudi", "habana_frameworks.torch", gaudi_script,
     "hl-smi reads the driver through HLML: it does not honour HABANA_VISIBLE_MODULES"},
};

/* The environment as "A=x B=y", for lines. */
static void env_text(const cr_envlist_t *env, char *out, size_t size)
{
    out[0] = '\0';
    size_t w = 0;
    for (size_t i = 0; i < env->vars.n && w < size; i++)
        w += (size_t)snprintf(out + w, size - w, "%s%s=%s", i ? " " : "", env->vars.v[i].key,
                              env->vars.v[i].value);
    if (!env->vars.n)
        cr_strlcpy(out, "(nothing set)", size);
}

/* The NeuronCores a NEURON_RT_VISIBLE_CORES value names ("0-3,8"); -1 bad. */
static int count_cores(const char *v)
{
    int total = 0;
    while (v && *v) {
        char *end;
        long a = strtol(v, &end, 10), b = a;
        if (end == v || a < 0)
            return -1;
        if (*end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q || b < a)
                return -1;
        }
        if (b > 65535 || total > 65535)
            return -1; /* more NeuronCores than any instance has */
        total += (int)(b - a + 1);
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        v = end;
    }
    return total;
}

/* sycl-ls under env. */
static int sycl_ls(const cr_envlist_t *env, const char *const *unset, conf_probe_t *s)
{
    char *const argv[] = {"sycl-ls", NULL};
    cr_buf_t out = {0};
    int rc = conf_run_with_env(env, unset, argv, &out);
    char why[128];
    if (rc == 0)
        conf_parse_sycl_ls(out.s, s, why, sizeof(why));
    cr_buf_free(&out);
    return rc;
}

/* The devices of the backend that a worker can be given: node indices. */
static size_t candidates(const cr_node_t *n, const char *be, int *out, size_t max)
{
    size_t k = 0;
    for (size_t i = 0; i < n->devices.n && k < max; i++)
        if (strcmp(n->devices.v[i].backend, be) == 0)
            out[k++] = (int)i;
    return k;
}

/* One subset: false when the check stops here (the probe cannot run). */
static bool check_subset(conf_report_t *r, const cr_node_t *n, const iso_backend_t *b,
                         const int *devs, size_t k)
{
    const cr_accel_component_t *c = hw_component_find(b->backend);
    const char *const *unset = c ? c->isolation_vars : NULL;
    char which[64] = "";
    for (size_t i = 0; i < k; i++)
        snprintf(which + strlen(which), sizeof(which) - strlen(which), "%s%d", i ? "," : "",
                 devs[i]);
    hw_options_t o = {0};
    cr_envlist_t env = {0};
    char *msg = NULL;
    if (hw_isolate(&o, n, devs, k, &env, &msg) != 0) {
        conf_add(r, b->backend, "isolation", R_FAIL, "corral hw --isolate %s: %s", which,
                 msg ? msg : "?");
        free(msg);
        cr_envlist_free(&env);
        return true;
    }
    char envs[512];
    env_text(&env, envs, sizeof(envs));
    char *const argv[] = {(char *)conf_python(), "-c", (char *)b->script, NULL};
    cr_buf_t out = {0};
    int rc = conf_run_with_env(&env, unset, argv, &out);
    conf_probe_t s;
    char why[256] = "";
    int perr = rc == 0 ? conf_parse_probe(out.s, &s, why, sizeof(why)) : CR_EPARSE;
    const char *framework = b->framework;
    bool go_on = true;
    if (rc == 127 || rc < 0) {
        memset(&s, 0, sizeof(s));
        s.skip = true;
        snprintf(s.why, sizeof(s.why), "no %s to run (CORRAL_CONFORMANCE_PYTHON names another)",
                 conf_python());
    } else if (rc != 0) {
        conf_add(r, b->backend, "isolation", R_FAIL, "%s %s: the %s probe under %s exited %d",
                 k == 1 ? "device" : "devices", which, framework, envs, rc);
        goto done;
    } else if (perr != 0) {
        conf_add(r, b->backend, "isolation", R_FAIL, "%s %s: the %s probe under %s: %s",
                 k == 1 ? "device" : "devices", which, framework, envs, why);
        goto done;
    }
    if (s.skip && !b->fallback_why) { /* intel: sycl-ls through Level Zero */
        char first[256];
        cr_strlcpy(first, s.why, sizeof(first));
        if (!conf_have_tool("sycl-ls")) {
            conf_add(r, b->backend, "isolation", R_SKIP,
                     "%s; sycl-ls is not on PATH either: isolation not verified", first);
            go_on = false;
            goto done;
        }
        if ((rc = sycl_ls(&env, unset, &s)) != 0) {
            conf_add(r, b->backend, "isolation", R_FAIL, "%s %s: sycl-ls under %s exited %d",
                     k == 1 ? "device" : "devices", which, envs, rc);
            goto done;
        }
        framework = "sycl-ls (Level Zero)";
    }
    if (s.skip) {
        conf_add(r, b->backend, "isolation", R_SKIP, "%s; %s: isolation not verified", s.why,
                 b->fallback_why);
        go_on = false;
        goto done;
    }
    if (!r->runtime[0])
        cr_strlcpy(r->runtime, s.runtime, sizeof(r->runtime));
    int want = (int)k;
    if (strcmp(b->backend, "neuron") == 0)
        want = count_cores(cr_envlist_get(&env, "NEURON_RT_VISIBLE_CORES"));
    char pcis[1024] = "";
    for (size_t i = 0; i < k; i++)
        snprintf(pcis + strlen(pcis), sizeof(pcis) - strlen(pcis), "%s%s", i ? "," : "",
                 n->devices.v[devs[i]].pci);
    bool neuron = strcmp(b->backend, "neuron") == 0;
    const char *unit = neuron      ? want == 1 ? "NeuronCore" : "NeuronCores"
                       : want == 1 ? "device"
                                   : "devices";
    const char *label = k == 1 ? "device" : "devices";
    if (s.count != want)
        conf_add(r, b->backend, "isolation", R_FAIL, "%s %s: under %s %s sees %d; want %d %s (%s)",
                 label, which, envs, framework, s.count, want, unit, pcis);
    else if (s.ids[0] && strcasecmp(s.ids, pcis) != 0)
        conf_add(r, b->backend, "isolation", R_FAIL, "%s %s: under %s %s sees %s; want %s", label,
                 which, envs, framework, s.ids, pcis);
    else if (s.ids[0])
        conf_add(r, b->backend, "isolation", R_PASS,
                 "%s %s: under %s %s (%s) sees exactly %d %s (%s)", label, which, envs, framework,
                 s.runtime, want, unit, s.ids);
    else
        conf_add(r, b->backend, "isolation", R_PASS,
                 "%s %s: under %s %s (%s) sees exactly %d %s (count only: it tells no PCI "
                 "address)",
                 label, which, envs, framework, s.runtime, want, unit);
done:
    cr_buf_free(&out);
    cr_envlist_free(&env);
    return go_on;
}

void conf_isolation_checks(conf_report_t *r, const cr_node_t *n, const char *backend)
{
    const iso_backend_t *b = NULL;
    for (size_t i = 0; i < CR_ARRAY_SIZE(backends); i++)
        if (strcmp(backends[i].backend, backend) == 0)
            b = &backends[i];
    if (!b) {
        conf_add(r, backend, "isolation", R_SKIP, "no runtime known to ask for %s", backend);
        return;
    }
    int cand[2];
    size_t nc = candidates(n, backend, cand, 2);
    if (!nc) {
        conf_add(r, backend, "isolation", R_SKIP, "no %s device to isolate", backend);
        return;
    }
    int one = cand[nc > 1 ? 1 : 0];
    if (check_subset(r, n, b, &one, 1) && nc > 1)
        check_subset(r, n, b, cand, 2);
}
