/* corral pg create|list|remove: placement groups, sets of bundles
 * reserved together for jobs to run in later (docs/runtime.md). */
#include "cli.h"
#include <corral/corral.h>
#include <stdio.h>

static const char pg_usage[] =
    "usage: corral pg create NAME --bundles 'GPU=1,CPU=1;GPU=1' "
    "[--strategy PACK|SPREAD|STRICT_PACK|STRICT_SPREAD] [--label-selector SEL] [--domain KEY] "
    "[--no-wait] [--detach] [--queue] [--json] | list [--json] | remove NAME|ID\n"
    "\n"
    "Placement groups: bundles of resources reserved together, for jobs to run in (corral run\n"
    "--pg). create waits until the group is CREATED, saying why while it waits, and its place\n"
    "in the queue; a group the alive nodes could never hold is refused unless --queue. If\n"
    "create is interrupted (Ctrl-C, SIGTERM) or loses the head while it waits, the group is\n"
    "removed, unless --detach; once CREATED it stays until corral pg remove.\n"
    "  --no-wait        return once queued (the group stays, as with --detach)\n"
    "  --detach         while waiting, the group outlives this command\n"
    "  --bundles B      bundles separated by ';', each as --resources takes them\n"
    "  --strategy S     PACK (default), SPREAD, STRICT_PACK, STRICT_SPREAD\n"
    "  --label-selector SEL, --domain KEY   which nodes, one value of a label for all\n";

static json_t *pg_json(const corral_pg_t *p)
{
    json_t *o = json_object(), *bs = json_array();
    json_object_set_new(o, "pg_id", json_string(p->pg_id));
    json_object_set_new(o, "name", json_string(p->name));
    json_object_set_new(o, "state", json_string(p->state));
    json_object_set_new(o, "reason", json_string(p->reason));
    json_object_set_new(o, "strategy", json_string(corral_strategy_name(p->strategy)));
    json_object_set_new(o, "domain", json_string(p->domain));
    json_object_set_new(o, "queue_position", json_integer(p->queue_position));
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

/* The ID and NAME columns as wide as the widest value shown (at least
 * the header's), so that long names keep the columns lined up. */
typedef struct pg_widths {
    int id, name;
} pg_widths_t;

static pg_widths_t pg_widths(const corral_pg_t *v, size_t n)
{
    pg_widths_t w = {.id = 2, .name = 4};
    for (size_t i = 0; i < n; i++) {
        int a = (int)strlen(v[i].pg_id), b = (int)strlen(cli_esc(v[i].name));
        w.id = a > w.id ? a : w.id;
        w.name = b > w.name ? b : w.name;
    }
    return w;
}

static void pg_print_row(const corral_pg_t *p, pg_widths_t w)
{
    printf("%-*s  %-*s  %-10s %-13s ", w.id, p->pg_id, w.name, cli_esc(p->name), p->state,
           corral_strategy_name(p->strategy));
    for (size_t i = 0; i < p->nbundles; i++) {
        const corral_bundle_t *b = &p->bundles[i];
        printf("%s{%s}", i ? " " : "", b->resources);
        if (b->placed)
            printf("@%s%s%s", cli_esc(b->node_id), b->devices[0] ? ":" : "", b->devices);
    }
    if (p->queue_position)
        printf("  %u%s in queue:", p->queue_position, cli_ordinal(p->queue_position));
    printf("%s%s\n", p->reason[0] ? "  " : "", cli_esc(p->reason));
}

static void pg_print_header(pg_widths_t w)
{
    printf("%-*s  %-*s  %-10s %-13s %s\n", w.id, "ID", w.name, "NAME", "STATE", "STRATEGY",
           "BUNDLES");
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
    const char *bundles = NULL, *strategy = NULL;
    corral_pg_spec_t spec = {.wait = 1};
    bool json = false, no_wait = false, queue = false, detach = false;
    const cli_opt_t opts[] = {
        CLI_STR("bundles", &bundles),
        CLI_STR("strategy", &strategy),
        CLI_STR("label-selector", &spec.selector),
        CLI_STR("domain", &spec.domain),
        CLI_FLAG("no-wait", &no_wait),
        CLI_FLAG("detach", &detach),
        CLI_FLAG("queue", &queue),
        CLI_FLAG("wait-for-nodes", &queue),
        CLI_FLAG("json", &json),
        CLI_END,
    };
    int first = cli_parse_opts("corral pg create", opts, argc, argv, pg_usage, NULL, false);
    if (first < 0)
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (strategy && corral_strategy_parse(strategy, &spec.strategy) < 0) {
        fprintf(stderr,
                "corral pg create: --strategy: expected PACK, SPREAD, STRICT_PACK or "
                "STRICT_SPREAD, got '%s'\n%s",
                strategy, pg_usage);
        return CLI_USAGE;
    }
    spec.wait = !no_wait;
    spec.wait_for_nodes = queue;
    /* removed by the head if this command is gone before the group is
     * created (killed, lost its connection), unless it outlives it */
    spec.bound = no_wait || detach ? CORRAL_PG_BOUND_NONE : CORRAL_PG_BOUND_UNTIL_CREATED;
    if (first + 1 != argc || !bundles) {
        fprintf(stderr, "corral pg create: %s\n%s",
                first >= argc      ? "no group name given"
                : first + 1 < argc ? "one group name, please"
                                   : "--bundles is required",
                pg_usage);
        return CLI_USAGE;
    }
    spec.name = argv[first];
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
    bool wait = spec.wait;
    spec.wait = 0; /* queued at once, then waited for here, saying why */
    struct sigaction old_int, old_term;
    cli_catch_interrupts(&old_int, &old_term);
    int err = corral_pg_create(c, &spec, &pg);
    if (err == 0 && wait && (!strcmp(pg.state, "PENDING") || !strcmp(pg.state, "PREPARING"))) {
        corral_pg_free(&pg);
        err = cli_wait_pg(c, "corral pg create", spec.name, &pg);
        if (err == -EINTR && detach)
            fprintf(stderr,
                    "corral pg create: interrupted; group %s stays PENDING (--detach; corral pg "
                    "remove %s removes it)\n",
                    spec.name, spec.name);
        else if (err == -EINTR && corral_pg_remove(c, spec.name) == 0)
            fprintf(stderr, "corral pg create: interrupted: group %s removed\n", spec.name);
        else if (err == -EINTR)
            fprintf(stderr, "corral pg create: interrupted; removing group %s: %s\n", spec.name,
                    corral_errmsg(c));
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (err < 0) {
        if (err != -EINTR && err != CR_ENOENT)
            fprintf(stderr, "corral pg create: %s\n", corral_errmsg(c));
        goto out;
    }
    if (json) {
        json_t *o = pg_json(&pg);
        cli_print_json(o);
        json_decref(o);
    } else {
        pg_widths_t w = pg_widths(&pg, 1);
        pg_print_header(w);
        pg_print_row(&pg, w);
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
    const char *sub = remove ? "remove" : "list";
    bool json = false;
    const cli_opt_t opts[] = {
        CLI_FLAG("json", &json),
        CLI_END,
    };
    /* remove prints nothing to format: no --json */
    int first = cli_parse_opts(remove ? "corral pg remove" : "corral pg list", opts + remove, argc,
                               argv, pg_usage, NULL, false);
    if (first < 0)
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (argc - first != (remove ? 1 : 0)) {
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
        if (corral_pg_remove(c, argv[first]) < 0) {
            fprintf(stderr, "corral pg remove: %s\n", corral_errmsg(c));
            goto out;
        }
        printf("placement group %s removed\n", argv[first]);
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
            pg_widths_t w = pg_widths(v, n);
            pg_print_header(w);
            for (size_t i = 0; i < n; i++)
                pg_print_row(&v[i], w);
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
