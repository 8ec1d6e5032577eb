/* corral job list|status|stop, corral status, corral nodes, corral events:
 * what the head knows, for people or, with --json, for programs. */
#include "cli.h"
#include <corral/corral.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <time.h>

static const char job_usage[] =
    "usage: corral job list [--json] [--limit N [--continue TOKEN]] | status JOB [--json] | "
    "stop JOB [--grace MS] | logs [-f] JOB [--worker I] [--no-prefix] | "
    "submit [RUN OPTIONS] [--no-wait] -- CMD [ARG...]\n"
    "\n"
    "  submit        a job not bound to this command (a driver script, say): follows its\n"
    "                output to its end; Ctrl-C leaves it running ('corral job submit --help')\n"
    "  list          every job: JOB, STATE, EXIT (once ended), WORKERS, AGE, NODES, NAME,\n"
    "                REASON (why a PENDING job waits); --limit N: one page of N, oldest\n"
    "                first, and the command that shows the next (--continue TOKEN)\n"
    "  status JOB    one job and its workers: node, pid, devices, state, exit code, reason\n"
    "  stop JOB      stop it (SIGTERM, SIGKILL after --grace MS) and wait until it has ended\n"
    "  logs JOB      its output so far; -f follows until it ends; --worker I one worker's;\n"
    "                with several workers each line starts with its worker, '[1] ', as in\n"
    "                corral run (--no-prefix: the output as written)\n"
    "  --json        the same as JSON\n";
static const char status_usage[] =
    "usage: corral status [--json]\n"
    "\n"
    "The head, its nodes, each resource's total, used and free; what waits (pending jobs and\n"
    "groups, their place in the queue and why) and what holds resources (each running job and\n"
    "each group, with the jobs running in it).\n";
static const char nodes_usage[] = "usage: corral nodes [--json]\n"
                                  "\n"
                                  "The nodes of the cluster, their state, resources and labels.\n";
static const char events_usage[] =
    "usage: corral events [-f] [--json] [--limit N]\n"
    "\n"
    "What happened and why (submitted, placed, pending, exited, node lost, ...).\n"
    "  -f           go on printing new events until interrupted\n"
    "  --limit N    the last N events; --limit 0 (the default) means every event the head\n"
    "               still has\n"
    "  --json       one JSON object per event\n";

static corral_t *connect_or_say(const char *cmd)
{
    corral_t *c;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "corral %s: %s\n", cmd, why ? why : "cannot connect");
        free(why);
        return NULL;
    }
    return c;
}

/* Parses [--json] and those of --limit, --grace, --worker, --follow (-f)
 * given a destination; the positional arguments are left in
 * argv[optind..]. 0, -1 after --help, or CLI_USAGE. */
/* "42s", "7m", "3h", "2d" */
static void format_age(int64_t ms, char *buf, size_t size)
{
    int64_t s = ms < 0 ? 0 : ms / 1000;
    if (s < 120)
        snprintf(buf, size, "%llds", (long long)s);
    else if (s < 7200)
        snprintf(buf, size, "%lldm", (long long)(s / 60));
    else if (s < 172800)
        snprintf(buf, size, "%lldh", (long long)(s / 3600));
    else
        snprintf(buf, size, "%lldd", (long long)(s / 86400));
}

/* The queue view, as squeue's: EXIT only for jobs that ended, the nodes
 * of their workers, and for a pending job why it waits. */
static void print_job_table(const corral_job_t *v, size_t n)
{
    int64_t now = cr_wall_ms();
    printf("%-6s %-10s %-5s %-7s %-5s %-20s %-12s %s\n", "JOB", "STATE", "EXIT", "WORKERS", "AGE",
           "NODES", "NAME", "REASON");
    for (size_t i = 0; i < n; i++) {
        const corral_job_t *j = &v[i];
        bool ended = j->state == CORRAL_JOB_SUCCEEDED || j->state == CORRAL_JOB_FAILED ||
                     j->state == CORRAL_JOB_STOPPED;
        char exit_s[16] = "", age[16];
        if (ended)
            snprintf(exit_s, sizeof(exit_s), "%d", j->exit_code);
        format_age(now - j->submitted_ms, age, sizeof(age));
        cr_buf_t nodes = {0};
        for (size_t k = 0; k < j->nworkers; k++) {
            const char *id = j->workers[k].node_id;
            if (!id || !id[0])
                continue;
            bool seen = false;
            for (size_t q = 0; q < k && !seen; q++)
                seen = j->workers[q].node_id && !strcmp(j->workers[q].node_id, id);
            if (!seen)
                cr_buf_printf(&nodes, "%s%s", nodes.len ? "," : "", id);
        }
        printf("%-6s %-10s %-5s %-7zu %-5s %-20s %-12s %s\n", j->job_id,
               corral_job_state_name(j->state), exit_s, j->nworkers, age,
               cli_esc(nodes.len ? nodes.s : "-"), cli_esc(j->name),
               cli_esc(j->state == CORRAL_JOB_PENDING && j->reason ? j->reason : ""));
        cr_buf_free(&nodes);
    }
}

static int parse_common(int argc, char **argv, const char *usage, bool *json, unsigned *limit,
                        const char **cont, unsigned *grace, unsigned *worker, bool *follow,
                        bool *no_prefix)
{
    cli_opt_t t[8];
    size_t n = 0;
    t[n++] = (cli_opt_t)CLI_FLAG("json", json);
    if (limit)
        t[n++] = (cli_opt_t)CLI_UINT("limit", limit, 0, 100000000);
    if (cont)
        t[n++] = (cli_opt_t)CLI_STR("continue", cont);
    if (grace)
        t[n++] = (cli_opt_t)CLI_UINT("grace", grace, 0, 100000000);
    if (worker)
        t[n++] = (cli_opt_t)CLI_UINT("worker", worker, 0, 100000000);
    if (follow)
        t[n++] = (cli_opt_t)CLI_FLAG1('f', "follow", follow);
    if (no_prefix)
        t[n++] = (cli_opt_t)CLI_FLAG("no-prefix", no_prefix);
    t[n] = (cli_opt_t)CLI_END;
    int first = cli_parse_opts("corral", t, argc, argv, usage, NULL, false);
    if (first < 0)
        return first == CLI_OPTS_HELP ? -1 : CLI_USAGE;
    optind = first;
    return 0;
}

static const char *const restart_names[] = {
    [CORRAL_RESTART_NONE] = "none",
    [CORRAL_RESTART_WORKER] = "worker",
    [CORRAL_RESTART_GANG] = "gang",
};

static json_t *job_json(const corral_job_t *j)
{
    json_t *o = json_object(), *ws = json_array();
    json_object_set_new(o, "job_id", json_string(j->job_id));
    json_object_set_new(o, "name", json_string(j->name));
    json_object_set_new(o, "state", json_string(corral_job_state_name(j->state)));
    json_object_set_new(o, "reason", json_string(j->reason));
    json_object_set_new(o, "queue_position", json_integer(j->queue_position));
    json_object_set_new(o, "parent_job", json_string(j->parent_job ? j->parent_job : ""));
    json_object_set_new(o, "exit_code", json_integer(j->exit_code));
    json_object_set_new(o, "submitted_ms", json_integer(j->submitted_ms));
    json_object_set_new(o, "finished_ms", json_integer(j->finished_ms));
    json_object_set_new(o, "restarts", json_integer(j->restarts));
    json_object_set_new(o, "max_restarts", json_integer(j->max_restarts));
    json_object_set_new(o, "restart_policy", json_string(restart_names[j->restart]));
    if (j->command[0])
        json_object_set_new(o, "command", json_string(j->command));
    for (size_t i = 0; i < j->nworkers; i++) {
        const corral_worker_t *w = &j->workers[i];
        json_t *x = json_object();
        json_object_set_new(x, "index", json_integer(w->index));
        json_object_set_new(x, "worker_id", json_string(w->worker_id));
        json_object_set_new(x, "node_id", json_string(w->node_id));
        json_object_set_new(x, "state", json_string(w->state));
        json_object_set_new(x, "pid", json_integer(w->pid));
        json_object_set_new(x, "exit_code", json_integer(w->exit_code));
        json_object_set_new(x, "signal", json_integer(w->signal));
        json_object_set_new(x, "restarts", json_integer(w->attempt));
        json_object_set_new(x, "devices", json_string(w->devices));
        json_object_set_new(x, "reason", json_string(w->reason));
        json_object_set_new(x, "output_lost", json_integer((json_int_t)w->output_lost));
        json_array_append_new(ws, x);
    }
    json_object_set_new(o, "workers", ws);
    return o;
}

static void job_print(const corral_job_t *j)
{
    printf("job %s (%s): %s", j->job_id, cli_esc(j->name), corral_job_state_name(j->state));
    if (corral_job_state_is_final(j->state))
        printf(", exit code %d", j->exit_code);
    printf("%s%s\n", j->reason[0] ? ": " : "", cli_esc(j->reason));
    if (j->command[0])
        printf("  command: %s\n", cli_esc(j->command));
    if (j->parent_job && j->parent_job[0])
        printf("  parent job: %s (submitted by its worker; stopped when it ends)\n",
               cli_esc(j->parent_job));
    if (j->max_restarts || j->restarts)
        printf("  restarts: %u of %u (restart %s)\n", j->restarts, j->max_restarts,
               restart_names[j->restart]);
    for (size_t i = 0; i < j->nworkers; i++) {
        const corral_worker_t *w = &j->workers[i];
        printf("  worker %u  %-8s pid %-7d devices [%s]", w->index, w->state, w->pid, w->devices);
        if (!strcmp(w->state, "EXITED"))
            printf(w->signal ? "  signal %d" : "  exit %d", w->signal ? w->signal : w->exit_code);
        if (w->attempt)
            printf("  restarted %u time(s)", w->attempt);
        printf("%s%s\n", w->reason[0] ? "  " : "", cli_esc(w->reason));
        if (w->output_lost) {
            char b[32];
            cli_format_bytes(w->output_lost, b, sizeof(b));
            printf("    output lost: %s (%llu bytes) its agent wrote never reached the head\n", b,
                   (unsigned long long)w->output_lost);
        }
    }
}

int cli_job(int argc, char **argv)
{
    if (argc < 2) {
        fputs(job_usage, stderr);
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(job_usage, stdout);
        return CLI_OK;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "submit")) /* corral run's options: run_cmd.c */
        return cli_job_submit(argc - 1, argv + 1);
    bool json = false;
    unsigned grace = 0, worker = ~0u, limit = 0;
    const char *cont = NULL;
    bool follow = false;
    bool no_prefix = false;
    int r = parse_common(argc - 1, argv + 1, job_usage, &json, &limit, &cont, &grace, &worker,
                         &follow, &no_prefix);
    if (r)
        return r < 0 ? CLI_OK : r;
    int npos = argc - 1 - optind;
    char **pos = argv + 1 + optind;
    bool is_list = !strcmp(sub, "list"), is_status = !strcmp(sub, "status"),
         is_stop = !strcmp(sub, "stop"), is_logs = !strcmp(sub, "logs");
    bool known = is_list || is_status || is_stop || is_logs;
    bool paged = limit || cont;
    if (!known || npos != (is_list ? 0 : 1) || (follow && !is_logs) || (paged && !is_list) ||
        (cont && !limit)) {
        fprintf(stderr, "corral job: %s\n%s",
                !known               ? "unknown subcommand"
                : follow && !is_logs ? "-f goes with logs only"
                : paged && !is_list  ? "--limit and --continue go with list only"
                : cont && !limit     ? "--continue goes with --limit N"
                                     : "wrong number of arguments",
                job_usage);
        return CLI_USAGE;
    }
    corral_t *c = connect_or_say("job");
    if (!c)
        return CLI_FAIL;
    int rc = CLI_FAIL;
    if (is_list) {
        corral_job_t *v;
        size_t n;
        /* every page, or with --limit the one asked for */
        corral_page_t page = {.limit = limit, .continue_token = cont};
        if ((paged ? corral_job_list_page(c, NULL, 0, &page, &v, &n) : corral_job_list(c, &v, &n)) <
            0) {
            fprintf(stderr, "corral job list: %s\n", corral_errmsg(c));
            goto out;
        }
        if (json) {
            json_t *a = json_array();
            for (size_t i = 0; i < n; i++)
                json_array_append_new(a, job_json(&v[i]));
            cli_print_json(a);
            json_decref(a);
        } else {
            print_job_table(v, n);
        }
        if (page.next_token)
            fprintf(stderr,
                    "corral job list: %u more; the next page: corral job list --limit %u "
                    "--continue %s\n",
                    page.remaining, limit, page.next_token);
        free(page.next_token);
        corral_job_list_free(v, n);
    } else if (is_status) {
        corral_job_t j;
        if (corral_job_status(c, pos[0], &j) < 0) {
            fprintf(stderr, "corral job status: %s\n", corral_errmsg(c));
            goto out;
        }
        /* a driver's tasks and actors: the lease jobs its workers made */
        json_t *leases = cli_job_leases(c, &j);
        if (json) {
            json_t *o = job_json(&j);
            /* a view the CLI gathers (the owners' leases): only when there
             * are some, so the shape is the API's otherwise (docs/api.md) */
            if (leases && json_array_size(leases))
                json_object_set(o, "leases", leases);
            cli_print_json(o);
            json_decref(o);
        } else {
            job_print(&j);
            if (leases && json_array_size(leases)) {
                printf("  tasks and actors (the workers it leased, corral list shows more):\n");
                size_t i;
                json_t *l;
                json_array_foreach(leases, i, l)
                {
                    printf("    job %-6s %-10s %-24s node %-12s pid %lld\n",
                           json_string_value(json_object_get(l, "job_id")),
                           json_string_value(json_object_get(l, "state")),
                           cli_esc(json_string_value(json_object_get(l, "name"))),
                           cli_esc(json_string_value(json_object_get(l, "node"))),
                           (long long)json_integer_value(json_object_get(l, "pid")));
                }
            }
        }
        json_decref(leases);
        corral_job_free(&j);
    } else if (is_logs) {
        int w = worker == ~0u ? -1 : (int)worker;
        corral_job_t j;
        if (corral_job_status(c, pos[0], &j) < 0) {
            fprintf(stderr, "corral job logs: %s\n", corral_errmsg(c));
            goto out;
        }
        /* several workers: each line with its worker, as corral run shows them */
        outputs_t o = {.n = j.nworkers, .prefix = w < 0 && j.nworkers > 1 && !no_prefix};
        corral_job_free(&j);
        o.out = cr_calloc(o.n + 1, sizeof(*o.out));
        o.err = cr_calloc(o.n + 1, sizeof(*o.err));
        corral_set_log_dropped(c, cli_on_dropped, &o);
        cli_follow_to_stdout(c, o.prefix);
        int err = follow ? corral_job_logs_follow(c, pos[0], w, cli_on_follow, &o)
                         : corral_job_logs(c, pos[0], w, cli_on_follow, &o);
        for (size_t i = 0; i < o.n; i++) { /* the partial last lines */
            if (o.out[i].len)
                printf("[%zu] %s\n", i, o.out[i].s);
            if (o.err[i].len)
                fprintf(stderr, "[%zu] %s\n", i, o.err[i].s);
            cr_buf_free(&o.out[i]);
            cr_buf_free(&o.err[i]);
        }
        free(o.out);
        free(o.err);
        if (err < 0) {
            fprintf(stderr, "corral job logs: %s\n", corral_errmsg(c));
            goto out;
        }
    } else {
        if (corral_stop(c, pos[0], grace) < 0) {
            fprintf(stderr, "corral job stop: %s\n", corral_errmsg(c));
            goto out;
        }
        corral_job_t j;
        if (corral_wait(c, pos[0], -1, &j) == 0) {
            printf("job %s %s\n", j.job_id, corral_job_state_name(j.state));
            corral_job_free(&j);
        }
    }
    rc = CLI_OK;
out:
    corral_disconnect(c);
    return rc;
}

static json_t *res_json(const corral_resource_t *r, size_t n)
{
    json_t *o = json_object();
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_object();
        json_object_set_new(x, "total", json_real(r[i].total));
        json_object_set_new(x, "free", json_real(r[i].free));
        json_object_set_new(x, "used", json_real(r[i].total - r[i].free));
        if (!isnan(r[i].reported_free))
            json_object_set_new(x, "reported_free", json_real(r[i].reported_free));
        json_object_set_new(o, r[i].name, x);
    }
    return o;
}

/* The agent's own count is shown only where it differs from the head's. */
static void res_print(const corral_resource_t *r, size_t n)
{
    bool differ = false;
    for (size_t i = 0; i < n; i++)
        differ |= !isnan(r[i].reported_free) && r[i].reported_free != r[i].free;
    printf("  %-14s %12s %12s %12s%s\n", "RESOURCE", "TOTAL", "USED", "FREE",
           differ ? "   AGENT FREE" : "");
    for (size_t i = 0; i < n; i++) {
        char t[32], u[32], f[32], a[32] = "";
        bool bytes = strstr(r[i].name, "memory") != NULL;
        if (bytes) {
            cli_format_bytes((uint64_t)r[i].total, t, sizeof(t));
            cli_format_bytes((uint64_t)(r[i].total - r[i].free), u, sizeof(u));
            cli_format_bytes((uint64_t)r[i].free, f, sizeof(f));
        } else {
            snprintf(t, sizeof(t), "%g", r[i].total);
            snprintf(u, sizeof(u), "%g", r[i].total - r[i].free);
            snprintf(f, sizeof(f), "%g", r[i].free);
        }
        if (differ && !isnan(r[i].reported_free)) {
            if (bytes && r[i].reported_free >= 0)
                cli_format_bytes((uint64_t)r[i].reported_free, a, sizeof(a));
            else
                snprintf(a, sizeof(a), "%g", r[i].reported_free);
        }
        printf("  %-14s %12s %12s %12s", cli_esc(r[i].name), t, u, f);
        if (differ)
            printf(" %12s", a);
        putchar('\n');
    }
}

static json_t *node_json(const corral_node_t *n)
{
    json_t *o = json_object(), *l = json_array();
    json_object_set_new(o, "node_id", json_string(n->node_id));
    json_object_set_new(o, "state", json_string(n->state));
    json_object_set_new(o, "address", json_string(n->address));
    json_object_set_new(o, "resources", res_json(n->res, n->nres));
    for (size_t i = 0; i < n->nlabels; i++)
        json_array_append_new(l, json_string(n->labels[i]));
    json_object_set_new(o, "labels", l);
    return o;
}

/* What waits, then what holds resources, each attributed to a job or a
 * group (squeue's REASON, ray status's pending demands). */
static void holders_print(const corral_status_t *s)
{
    bool any = false;
    for (size_t i = 0; i < s->nholders; i++) {
        const struct corral_holder *h = &s->holders[i];
        if (strcmp(h->state, "PENDING"))
            continue;
        if (!any)
            printf("pending:\n");
        any = true;
        char pos[32] = "";
        if (h->queue_position)
            snprintf(pos, sizeof(pos), ", %u%s in queue", h->queue_position,
                     cli_ordinal(h->queue_position));
        printf("  %s %s (%s)%s: %s\n", h->kind, h->id, cli_esc(h->name), pos,
               cli_esc(h->reason[0] ? h->reason : "queued"));
    }
    any = false;
    for (size_t i = 0; i < s->nholders; i++) {
        const struct corral_holder *h = &s->holders[i];
        if (!h->held[0])
            continue;
        if (!any)
            printf("held:\n");
        any = true;
        if (!strcmp(h->kind, "group")) {
            printf("  %s by group %s (%s), %s, %u job(s) running in it\n", h->held,
                   cli_esc(h->name), h->id, h->state, h->jobs);
            for (size_t k = 0; k < s->nholders; k++) /* what runs on what it holds */
                if (!strcmp(s->holders[k].kind, "job") && !strcmp(s->holders[k].group, h->name))
                    printf("    job %s (%s), %s, in it\n", s->holders[k].id,
                           cli_esc(s->holders[k].name), s->holders[k].state);
        } else
            printf("  %s by job %s (%s), %s\n", h->held, h->id, cli_esc(h->name), h->state);
    }
    if (!any)
        printf("held: nothing\n");
    if (s->holders_not_listed)
        printf("and %u more job(s) and group(s) not listed here (the oldest 100 of each kind are): "
               "'corral job list' and 'corral pg list' show them all\n",
               s->holders_not_listed);
}

static json_t *holders_json(const corral_status_t *s)
{
    json_t *a = json_array();
    for (size_t i = 0; i < s->nholders; i++) {
        const struct corral_holder *h = &s->holders[i];
        json_t *o = json_object();
        json_object_set_new(o, "kind", json_string(h->kind));
        json_object_set_new(o, "id", json_string(h->id));
        json_object_set_new(o, "name", json_string(h->name));
        json_object_set_new(o, "state", json_string(h->state));
        json_object_set_new(o, "reason", json_string(h->reason));
        json_object_set_new(o, "queue_position", json_integer(h->queue_position));
        json_object_set_new(o, "held", json_string(h->held));
        json_object_set_new(o, "group", json_string(h->group));
        if (!strcmp(h->kind, "group"))
            json_object_set_new(o, "jobs", json_integer(h->jobs));
        json_array_append_new(a, o);
    }
    return a;
}

static int status_or_nodes(int argc, char **argv, bool nodes)
{
    const char *usage = nodes ? nodes_usage : status_usage, *cmd = nodes ? "nodes" : "status";
    bool json = false;
    int r = parse_common(argc, argv, usage, &json, NULL, NULL, NULL, NULL, NULL, NULL);
    if (r)
        return r < 0 ? CLI_OK : r;
    if (optind < argc) {
        fprintf(stderr, "corral %s: unexpected argument '%s'\n%s", cmd, argv[optind], usage);
        return CLI_USAGE;
    }
    corral_t *c = connect_or_say(cmd);
    if (!c)
        return CLI_FAIL;
    corral_status_t s = {0};
    /* corral nodes pages through the NodeList answer (any number of
     * nodes); status has them in its one answer */
    if ((nodes ? corral_node_list(c, &s.nodes, &s.nnodes) : corral_status(c, &s)) < 0) {
        fprintf(stderr, "corral %s: %s\n", cmd, corral_errmsg(c));
        corral_disconnect(c);
        return CLI_FAIL;
    }
    if (json) {
        json_t *o = json_object(), *ns = json_array();
        for (size_t i = 0; i < s.nnodes; i++)
            json_array_append_new(ns, node_json(&s.nodes[i]));
        if (nodes) {
            cli_print_json(ns);
            json_decref(ns);
        } else {
            json_object_set_new(o, "head_address", json_string(s.head_address));
            json_object_set_new(o, "nodes", ns);
            json_object_set_new(o, "resources", res_json(s.res, s.nres));
            json_object_set_new(o, "pending_jobs", json_integer(s.pending_jobs));
            json_object_set_new(o, "running_jobs", json_integer(s.running_jobs));
            json_object_set_new(o, "holders", holders_json(&s));
            json_object_set_new(o, "holders_not_listed", json_integer(s.holders_not_listed));
            cli_print_json(o);
        }
        json_decref(o);
    } else {
        if (!nodes)
            printf("head %s: %zu node(s), %u job(s) running, %u pending\n", s.head_address,
                   s.nnodes, s.running_jobs, s.pending_jobs);
        for (size_t i = 0; i < s.nnodes; i++) {
            printf("node %s  %s\n", cli_esc(s.nodes[i].node_id), s.nodes[i].state);
            res_print(s.nodes[i].res, s.nodes[i].nres);
            if (nodes)
                for (size_t k = 0; k < s.nodes[i].nlabels; k++)
                    printf("  label %s\n", cli_esc(s.nodes[i].labels[k]));
        }
        if (!nodes)
            holders_print(&s);
    }
    if (nodes) {
        corral_node_list_free(s.nodes, s.nnodes);
        s.nodes = NULL;
        s.nnodes = 0;
    }
    corral_status_free(&s);
    corral_disconnect(c);
    return CLI_OK;
}

int cli_status(int argc, char **argv)
{
    return status_or_nodes(argc, argv, false);
}

int cli_nodes(int argc, char **argv)
{
    return status_or_nodes(argc, argv, true);
}

static json_t *event_json(const corral_event_t *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "seq", json_integer((json_int_t)e->seq));
    json_object_set_new(o, "time_ms", json_integer(e->time_ms));
    json_object_set_new(o, "kind", json_string(e->kind));
    json_object_set_new(o, "job_id", json_string(e->job_id));
    json_object_set_new(o, "node_id", json_string(e->node_id));
    json_object_set_new(o, "message", json_string(e->message));
    return o;
}

static void event_print(const corral_event_t *e)
{
    char when[32];
    time_t t = (time_t)(e->time_ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof(when), "%H:%M:%S", &tm);
    printf("%s.%03d  %-10s %-4s %s\n", when, (int)(e->time_ms % 1000), e->kind, e->job_id,
           cli_esc(e->message));
}

/* Following: one line per event, JSON lines with --json. */
static void on_event(void *arg, const corral_event_t *e)
{
    if (*(bool *)arg) {
        json_t *o = event_json(e);
        char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (s)
            puts(s);
        free(s);
        json_decref(o);
    } else {
        event_print(e);
    }
    fflush(stdout);
}

int cli_events(int argc, char **argv)
{
    bool json = false, follow = false;
    unsigned limit = 0;
    int r = parse_common(argc, argv, events_usage, &json, &limit, NULL, NULL, NULL, &follow, NULL);
    if (r)
        return r < 0 ? CLI_OK : r;
    if (optind < argc) {
        fprintf(stderr, "corral events: unexpected argument '%s'\n%s", argv[optind], events_usage);
        return CLI_USAGE;
    }
    corral_t *c = connect_or_say("events");
    if (!c)
        return CLI_FAIL;
    corral_event_t *v;
    size_t n;
    if (corral_events(c, 0, limit, &v, &n) < 0) {
        fprintf(stderr, "corral events: %s\n", corral_errmsg(c));
        corral_disconnect(c);
        return CLI_FAIL;
    }
    if (follow) { /* the ones so far as lines too, then each new one until killed */
        for (size_t i = 0; i < n; i++)
            on_event(&json, &v[i]);
        uint64_t last = n ? v[n - 1].seq : 0;
        corral_events_free(v, n);
        int err = corral_events_follow(c, last, on_event, &json);
        fprintf(stderr, "corral events: %s\n", corral_errmsg(c));
        corral_disconnect(c);
        return err < 0 ? CLI_FAIL : CLI_OK;
    }
    json_t *a = json ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        if (a)
            json_array_append_new(a, event_json(&v[i]));
        else
            event_print(&v[i]);
    }
    if (a) {
        cli_print_json(a);
        json_decref(a);
    }
    corral_events_free(v, n);
    corral_disconnect(c);
    return CLI_OK;
}
