/* corral hw: what accelerators this node has, how to isolate them, and
 * what looks wrong. */
#include "cli.h"
#include <stdio.h>

static const char usage_line[] =
    "usage: corral hw [--json] [--spec FILE] [--root DIR] [--isolate LIST] [--check]\n"
    "       corral hw --check SPEC\n";

static const char help[] =
    "\n"
    "  --json          print the node description (schema corral.node/v1)\n"
    "  --spec FILE     describe the simulated node of a hardware spec (YAML or JSON)\n"
    "  --root DIR      read /sys, /dev and /proc under DIR (also CORRAL_SYSFS_ROOT)\n"
    "  --isolate LIST  the environment a worker given devices LIST (e.g. 0,3 or 0-3)\n"
    "                  would get, one VAR=VALUE a line (or JSON with --json)\n"
    "  --check         list what is suspicious; exit 1 when anything is\n"
    "  --check SPEC    validate the hardware spec SPEC: print ok, or each error as\n"
    "                  FILE:LINE:COL and what to fix, and exit 1\n";

static void usage(FILE *fp)
{
    fputs(usage_line, fp);
}

/* "0,3", "0-3", "" (no devices) */
static int parse_devlist(const char *s, int **out, size_t *n, char *why, size_t whysize)
{
    uint64_t bits[16];
    size_t pos = 0;
    int count = cr_cpulist_parse(s, bits, 1024, &pos);
    if (count < 0) {
        snprintf(why, whysize,
                 "bad device list '%s' at offset %zu: expected indices such as "
                 "0,3 or 0-3",
                 s, pos);
        return count;
    }
    *out = cr_calloc((size_t)count + 1, sizeof(int));
    *n = 0;
    for (int i = 0; i < 1024; i++)
        if (bits[i / 64] & (1ull << (i % 64)))
            (*out)[(*n)++] = i;
    return 0;
}

static void print_node(const cr_node_t *n)
{
    char mem[32];
    printf("node %s (%s)%s\n", n->id, n->hostname,
           n->simulated ? "  [simulated: described by a hardware spec, not discovered]" : "");
    if (n->devices.n == 0) {
        printf("no accelerators found\n");
    } else {
        printf("%-4s %-10s %-9s %-13s %-4s %-8s %-6s %-9s %s\n", "IDX", "TYPE", "MEMORY", "PCI",
               "NUMA", "NIC", "RES", "HEALTH", "ISOLATION ID");
        for (size_t i = 0; i < n->devices.n; i++) {
            const cr_device_t *d = &n->devices.v[i];
            char numa[16];
            cli_format_bytes(d->memory, mem, sizeof(mem));
            if (d->numa >= 0)
                snprintf(numa, sizeof(numa), "%d", d->numa);
            else
                snprintf(numa, sizeof(numa), "-");
            char part[24] = "";
            if (d->partition >= 0)
                snprintf(part, sizeof(part), "  partition %d", d->partition);
            printf("%-4d %-10s %-9s %-13s %-4s %-8s %-6s %-9s %s%s%s%s\n", d->index,
                   d->sku[0]       ? d->sku
                   : d->product[0] ? d->product
                                   : "?",
                   mem, d->pci[0] ? d->pci : "-", numa, d->nic[0] ? d->nic : "-", d->resource,
                   hw_health_name(d->health), d->isolation_id[0] ? d->isolation_id : "-",
                   d->mig_profile[0] ? "  MIG " : "", d->mig_profile, part);
        }
    }
    cli_format_bytes(n->memory, mem, sizeof(mem));
    printf("\nhost: %s%s%d sockets, %d cores, %d threads, %zu NUMA nodes, %s memory\n",
           n->cpu.model, n->cpu.model[0] ? ", " : "", n->cpu.sockets, n->cpu.cores, n->cpu.threads,
           n->numa.n, mem);
    for (size_t i = 0; i < n->numa.n; i++) {
        cli_format_bytes(n->numa.v[i].memory, mem, sizeof(mem));
        printf("  numa %d: cpus %s, %s\n", n->numa.v[i].id, n->numa.v[i].cpus, mem);
    }
    for (size_t i = 0; i < n->nics.n; i++) {
        const cr_nic_t *x = &n->nics.v[i];
        char speed[32];
        if (x->speed_mbps)
            snprintf(speed, sizeof(speed), "%llu Mb/s", (unsigned long long)x->speed_mbps);
        else
            snprintf(speed, sizeof(speed), "speed unknown");
        printf("  nic %s: pci %s, numa %d, %s%s%s\n", x->name, x->pci[0] ? x->pci : "-", x->numa,
               speed, x->rdma ? ", RDMA " : "", x->rdma ? x->rdma_device : "");
    }
    printf("resources:");
    for (size_t i = 0; i < n->resources.n; i++) {
        const cr_resource_t *r = &n->resources.v[i];
        if (strcmp(r->name, "memory") == 0) {
            char mem2[32];
            cli_format_bytes((uint64_t)(r->amount / CR_QTY_ONE), mem2, sizeof(mem2));
            printf(" memory=%s", mem2);
        } else if (r->amount % CR_QTY_ONE == 0)
            printf(" %s=%lld", r->name, (long long)(r->amount / CR_QTY_ONE));
        else
            printf(" %s=%.4g", r->name, (double)r->amount / CR_QTY_ONE);
    }
    printf("\nlabels:\n");
    for (size_t i = 0; i < n->labels.n; i++)
        printf("  %s=%s\n", n->labels.v[i].key, n->labels.v[i].value);
    if (n->warnings.n) {
        printf("warnings (corral hw --check):\n");
        for (size_t i = 0; i < n->warnings.n; i++)
            printf("  %s\n", n->warnings.v[i]);
    }
}

int cli_hw(int argc, char **argv)
{
    bool json = false, do_check = false;
    const char *spec = NULL, *root = NULL, *isolate = NULL;
    const cli_opt_t opts[] = {
        CLI_FLAG("json", &json),      CLI_STR("spec", &spec),       CLI_STR("root", &root),
        CLI_STR("isolate", &isolate), CLI_FLAG("check", &do_check), CLI_END,
    };
    int first = cli_parse_opts("corral hw", opts, argc, argv, usage_line, help, false);
    if (first < 0)
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    /* `corral hw --check SPEC`: the spec to validate */
    if (do_check && !spec && !root && first == argc - 1)
        spec = argv[first++];
    if (first < argc) {
        fprintf(stderr, "corral hw: unexpected argument '%s'\n", argv[first]);
        usage(stderr);
        return CLI_USAGE;
    }
    if (spec && root) {
        fprintf(stderr, "corral hw: --spec and --root exclude each other\n");
        usage(stderr);
        return CLI_USAGE;
    }
    int *devs = NULL;
    size_t ndevs = 0;
    if (isolate) {
        char why[256];
        if (parse_devlist(isolate, &devs, &ndevs, why, sizeof(why))) {
            fprintf(stderr, "corral hw: %s\n", why);
            return CLI_USAGE;
        }
    }
    cr_node_t *node;
    if (cli_discover(spec, root, &node)) {
        free(devs);
        return CLI_FAIL;
    }
    int rc = CLI_OK;
    if (isolate) {
        hw_options_t o = {.root = root, .spec_path = spec};
        cr_envlist_t env = {0};
        char *msg = NULL;
        int err = hw_isolate(&o, node, devs, ndevs, &env, &msg);
        if (err) {
            fprintf(stderr, "corral hw: %s\n", msg ? msg : cr_strerror(err));
            rc = CLI_FAIL;
        } else if (json) {
            json_t *j = json_object();
            for (size_t i = 0; i < env.vars.n; i++)
                json_object_set_new(j, env.vars.v[i].key, json_string(env.vars.v[i].value));
            cli_print_json(j);
            json_decref(j);
        } else {
            for (size_t i = 0; i < env.vars.n; i++)
                printf("%s=%s\n", env.vars.v[i].key, env.vars.v[i].value);
            if (env.vars.n == 0)
                fprintf(stderr, "corral hw: no variable is needed: the devices given are all "
                                "the node has, or it has none\n");
        }
        free(msg);
        cr_envlist_free(&env);
    } else if (do_check) {
        for (size_t i = 0; i < node->warnings.n; i++)
            printf("%s\n", node->warnings.v[i]);
        if (node->warnings.n)
            rc = CLI_FAIL;
        else if (spec)
            printf("ok: %s is a valid hardware spec (node %s, %zu devices)\n", spec, node->id,
                   node->devices.n);
        else
            printf("ok: nothing suspicious on %s (%zu devices)\n", node->id, node->devices.n);
    } else if (json) {
        json_t *j = hw_node_to_json(node);
        cli_print_json(j);
        json_decref(j);
    } else {
        print_node(node);
    }
    free(devs);
    hw_node_free(node);
    return rc;
}
