/* corral pg create|list|remove: placement groups, sets of bundles
 * reserved together for jobs to run in later (docs/runtime.md). */
#include "cli.h"
#include <corral/corral.h>
#include <getopt.h>
#include <stdio.h>

static const char pg_usage[] =
    "usage: corral pg create NAME --bundles 'GPU=1,CPU=1;GPU=1' "
    "[--strategy PACK|SPREAD|STRICT_PACK|STRICT_SPREAD] [--label-selector SEL] [--domain KEY] "
    "[--no-wait] [--json] | list [--json] | remove NAME|ID\n";

static json_t *pg_json(const corral_pg_t *p)
{
    json_t *o = json_object(), *bs = json_array();
    json_object_set_new(o, "pg_id", json_string(p->pg_id));
    json_object_set_new(o, "name", json_string(p->name));
    json_object_set_new(o, "state", json_string(p->state));
    json_object_set_new(o, "reason", json_string(p->reason));
    json_object_set_new(o, "strategy", json_string(corral_strategy_name(p->strategy)));
    json_object_set_new(o, "domain", json_string(p->domain));
    for (size_t i = 0; i < p->nbundles; i++) {
        const corral_bundle_t *b = &p->bundles[i];
        json_t *x = json_object();
        json_object_set_new(x, "index", json_integer((json_int_t)i));
        json_object_set_new(x, "resources", json_string(b->resources));
        json_object_set_new(x, "selector", json_string(b->selector));
        json_object_set_new(x, "node_id", b->placed ? json_string(b->node_id) : json_null());
        json_t *d = json_array();
        for (const char *s = b->devices; *s;) {
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s)
                break;
            json_array_append_new(d, json_integer(v));
            s = *end == ',' ? end + 1 : end;
        }
        json_object_set_new(x, "devices", d);
        json_array_append_new(bs, x);
    }
    json_object_set_new(o, "bundles", bs);
    return o;
}

static void pg_print_row(const corral_pg_t *p)
{
    printf("%-10s %-16s %-10s %-13s ", p->pg_id, p->name, p->state,
           corral_strategy_name(p->strategy));
    for (size_t i = 0; i < p->nbundles; i++) {
        const corral_bundle_t *b = &p->bundles[i];
        printf("%s{%s}", i ? " " : "", b->resources);
        if (b->placed)
            printf("@%s%s%s", b->node_id, b->devices[0] ? ":" : "", b->devices);
    }
    printf("%s%s\n", p->reason[0] ? "  " : "", p->reason);
}

static void pg_print_header(void)
{
    printf("%-10s %-16s %-10s %-13s %s\n", "ID", "NAME", "STATE", "STRATEGY", "BUNDLES");
}

/* "GPU=1,CPU=1;GPU=1" to bundle specs pointing into text (modified). */
static int split_bundles(char *text, corral_bundle_spec_t **out, size_t *n)
{
    CR_VEC(corral_bundle_spec_t) v = {0};
    char *save = NULL;
    for (char *t = strtok_r(text, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
        while (*t == ' ')
            t++;
        if (!*t)
            continue;
        corral_bundle_spec_t *b = CR_VEC_PUSH(&v);
        b->resources = t;
        b->selector = NULL;
    }
    *out = v.v;
    *n = v.n;
    return v.n ? 0 : CR_EINVAL;
}

static int pg_create(int argc, char **argv)
{
    static const struct option opts[] = {
        {"bundles", required_argument, 0, 'b'},
        {"strategy", required_argument, 0, 's'},
        {"label-selector", required_argument, 0, 'S'},
        {"domain", required_argument, 0, 'D'},
        {"no-wait", no_argument, 0, 'n'},
        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *bundles = NULL;
    corral_pg_spec_t spec = {.wait = 1};
    bool json = false;
    int opt;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            bundles = optarg;
            break;
        case 's':
            if (corral_strategy_parse(optarg, &spec.strategy) < 0) {
                fprintf(stderr,
                        "corral pg create: --strategy: expected PACK, SPREAD, STRICT_PACK or "
                        "STRICT_SPREAD, got '%s'\n%s",
                        optarg, pg_usage);
                return CLI_USAGE;
            }
            break;
        case 'S':
            spec.selector = optarg;
            break;
        case 'D':
            spec.domain = optarg;
            break;
        case 'n':
            spec.wait = 0;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            fputs(pg_usage, stdout);
            return CLI_OK;
        default:
            fprintf(stderr, "corral pg create: unknown or incomplete option '%s'\n%s",
                    argv[optind - 1], pg_usage);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc || !bundles) {
        fprintf(stderr, "corral pg create: %s\n%s",
                optind >= argc      ? "no group name given"
                : optind + 1 < argc ? "one group name, please"
                                    : "--bundles is required",
                pg_usage);
        return CLI_USAGE;
    }
    spec.name = argv[optind];
    char *text = cr_strdup(bundles);
    corral_bundle_spec_t *bv = NULL;
    if (split_bundles(text, &bv, &spec.nbundles) < 0) {
        fprintf(stderr, "corral pg create: --bundles: no bundle in '%s'\n%s", bundles, pg_usage);
        free(text);
        free(bv);
        return CLI_USAGE;
    }
    spec.bundles = bv;
    int rc = CLI_FAIL;
    char bad[256];
    if (corral_pg_spec_check(&spec, bad, sizeof(bad)) < 0) {
        fprintf(stderr, "corral pg create: %s\n%s", bad, pg_usage);
        rc = CLI_USAGE;
        goto out_free;
    }
    corral_t *c;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "corral pg create: %s\n", why ? why : "cannot connect");
        free(why);
        goto out_free;
    }
    corral_pg_t pg;
    int err = corral_pg_create(c, &spec, &pg);
    if (err < 0) {
        fprintf(stderr, "corral pg create: %s\n", corral_errmsg(c));
        goto out;
    }
    if (json) {
        json_t *o = pg_json(&pg);
        cli_print_json(o);
        json_decref(o);
    } else {
        pg_print_header();
        pg_print_row(&pg);
    }
    rc = strcmp(pg.state, "INFEASIBLE") == 0 ? CLI_FAIL : CLI_OK;
    if (rc != CLI_OK && !json)
        fprintf(stderr, "corral pg create: group %s is infeasible: %s\n", pg.name, pg.reason);
    corral_pg_free(&pg);
out:
    corral_disconnect(c);
out_free:
    free(text);
    free(bv);
    return rc;
}

static int pg_list_or_remove(int argc, char **argv, bool remove)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *sub = remove ? "remove" : "list";
    bool json = false;
    int opt;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (opt == 'h') {
            fputs(pg_usage, stdout);
            return CLI_OK;
        }
        if (opt != 'j' || remove) { /* remove prints nothing to format */
            fprintf(stderr, "corral pg %s: unknown or incomplete option '%s'\n%s", sub,
                    argv[optind - 1], pg_usage);
            return CLI_USAGE;
        }
        json = true;
    }
    if (argc - optind != (remove ? 1 : 0)) {
        fprintf(stderr, "corral pg %s: %s\n%s", sub,
                remove ? "give one group, by name or id" : "unexpected argument", pg_usage);
        return CLI_USAGE;
    }
    corral_t *c;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "corral pg %s: %s\n", sub, why ? why : "cannot connect");
        free(why);
        return CLI_FAIL;
    }
    int rc = CLI_FAIL;
    if (remove) {
        if (corral_pg_remove(c, argv[optind]) < 0) {
            fprintf(stderr, "corral pg remove: %s\n", corral_errmsg(c));
            goto out;
        }
        printf("placement group %s removed\n", argv[optind]);
    } else {
        corral_pg_t *v;
        size_t n;
        if (corral_pg_list(c, &v, &n) < 0) {
            fprintf(stderr, "corral pg list: %s\n", corral_errmsg(c));
            goto out;
        }
        if (json) {
            json_t *a = json_array();
            for (size_t i = 0; i < n; i++)
                json_array_append_new(a, pg_json(&v[i]));
            cli_print_json(a);
            json_decref(a);
        } else {
            pg_print_header();
            for (size_t i = 0; i < n; i++)
                pg_print_row(&v[i]);
        }
        corral_pg_list_free(v, n);
    }
    rc = CLI_OK;
out:
    corral_disconnect(c);
    return rc;
}

int cli_pg(int argc, char **argv)
{
    if (argc < 2) {
        fputs(pg_usage, stderr);
        return CLI_USAGE;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
        fputs(pg_usage, stdout);
        return CLI_OK;
    }
    if (!strcmp(sub, "create"))
        return pg_create(argc - 1, argv + 1);
    if (!strcmp(sub, "list"))
        return pg_list_or_remove(argc - 1, argv + 1, false);
    if (!strcmp(sub, "remove"))
        return pg_list_or_remove(argc - 1, argv + 1, true);
    fprintf(stderr, "corral pg: unknown subcommand '%s'\n%s", sub, pg_usage);
    return CLI_USAGE;
}
