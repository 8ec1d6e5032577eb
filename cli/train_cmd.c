/* corral train: an unchanged torch.distributed / JAX script as N workers,
 * one per device, gang-placed in one placement group (a TPU slice, an
 * interconnect domain), rank variables set by the head, restarted whole
 * after a failure (docs/train.md). All on libcorral: the group is created
 * (and waited for), the job submitted into it with `distributed`, its
 * output followed with "[rank N]" prefixes, the group removed at the end. */
#include "cli.h"
#include <corral/corral.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static const char train_usage[] =
    "usage: corral train [--workers N] [--resources-per-worker 'GPU=1'] [--tpu-topology 4x4 "
    "--accelerator-type TPU-V6E] [--placement PACK|SPREAD|STRICT_PACK|STRICT_SPREAD] "
    "[--domain LABEL] [--max-failures K] [--checkpoint-dir DIR] [--env K=V]... [--cwd DIR] "
    "[--env-policy all|none|K1,K2] [--queue] -- CMD [ARG...]\n"
    "\n"
    "Runs an unchanged torch.distributed or JAX script as one rank per device: reserves a\n"
    "placement group, sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, JAX_* per\n"
    "rank, follows every rank's output ('[rank N] '), restarts the whole gang after a failure,\n"
    "and prints a summary. The group is removed at the end, on Ctrl-C, and by the head when\n"
    "this command dies or loses its connection.\n"
    "\n"
    "  --workers N                 ranks (default: one per device of that kind in the cluster,\n"
    "                              or one per chip of --tpu-topology)\n"
    "  --resources-per-worker R    each rank's resources (default GPU=1)\n"
    "  --tpu-topology AxB          ranks on the hosts of one TPU slice of that topology;\n"
    "                              --accelerator-type TPU-V6E narrows the slice's kind\n"
    "  --placement S, --domain L   how the ranks spread over nodes, a label they share\n"
    "  --max-failures K            gang restarts allowed (default 0)\n"
    "  --checkpoint-dir DIR        CORRAL_CHECKPOINT_DIR for every rank (relative: the caller's)\n"
    "  --env K=V, --env-policy P, --cwd DIR   as corral run's: the caller's environment and\n"
    "                              directory by default\n"
    "  --queue, --wait-for-nodes   wait for nodes to join when the cluster could never hold\n"
    "                              the ranks (else refused at once with the reason)\n"
    "\n"
    "See docs/train.md.\n";

#define MAX_ENV 64
#define TAIL_LINES 10

/* "4x4" -> 16, "2x2x2" -> 8; 0 when malformed */
static unsigned topo_chips(const char *t)
{
    unsigned n = 1, dims = 0;
    const char *p = t;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 256)
            return 0;
        n *= (unsigned)v;
        dims++;
        if (*end == 'x')
            end++;
        else if (*end)
            return 0;
        p = end;
    }
    return dims >= 2 && dims <= 3 && n <= 4096 ? n : 0;
}

/* Whether path (absolute) is the corral home or under it (as given or
 * with its links resolved): what a root agent's workers do not see. */
static bool inside_home(const char *path)
{
    char home[PATH_MAX], real[PATH_MAX];
    if (cr_home_path(home, sizeof(home)) < 0)
        return false;
    const char *roots[2] = {home, realpath(home, real) ? real : NULL};
    for (int i = 0; i < 2; i++) {
        size_t n = roots[i] ? strlen(roots[i]) : 0;
        if (n && !strncmp(path, roots[i], n) && (path[n] == '/' || !path[n]))
            return true;
    }
    return false;
}

/* "GPU=1,CPU=2" -> its first name and amount */
static bool first_resource(const char *res, char *name, size_t size, double *amount)
{
    const char *eq = strchr(res, '=');
    if (!eq || eq == res || (size_t)(eq - res) >= size)
        return false;
    snprintf(name, size, "%.*s", (int)(eq - res), res);
    char *end;
    *amount = strtod(eq + 1, &end);
    return end != eq + 1 && *amount > 0;
}

static void tail_of(void *arg, unsigned worker, int stream, const char *data, size_t len)
{
    cr_buf_append(arg, data, len);
}

/* The last lines of a rank's output, for the failure report. */
static void print_tail(corral_t *c, const char *job_id, unsigned rank)
{
    cr_buf_t b = {0};
    if (corral_job_logs(c, job_id, (int)rank, tail_of, &b) < 0 || !b.len) {
        cr_buf_free(&b);
        return;
    }
    const char *start = b.s + b.len;
    int lines = 0;
    while (start > b.s && lines <= TAIL_LINES)
        if (*--start == '\n' && start + 1 < b.s + b.len)
            lines++;
    if (*start == '\n')
        start++;
    fprintf(stderr, "corral train: the last lines of rank %u:\n", rank);
    for (const char *p = start, *nl; p < b.s + b.len; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(b.s + b.len - p));
        if (!nl)
            nl = b.s + b.len;
        fprintf(stderr, "  | %.*s\n", (int)(nl - p), p);
    }
    cr_buf_free(&b);
}

/* The head's words for a job ("worker 2 exited with code 1") in train's
 * ("rank 2 ..."): a rank is what a train user knows. malloc'ed. */
static char *ranks_said(const char *reason)
{
    cr_buf_t b = {0};
    const char *p = reason;
    for (const char *w; (w = strstr(p, "worker ")) != NULL; p = w + 7) {
        bool digit = w[7] >= '0' && w[7] <= '9';
        cr_buf_printf(&b, "%.*s%s", (int)(w - p), p, digit ? "rank " : "worker ");
    }
    cr_buf_printf(&b, "%s", p);
    return b.s ? b.s : cr_strdup("");
}

static int usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "corral train: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", train_usage);
    return CLI_USAGE;
}

typedef struct train_env {
    const char *v[MAX_ENV + 2];
    size_t n;
} train_env_t;

static int opt_env(void *dst, const char *name, const char *arg)
{
    train_env_t *e = dst;
    if (!strchr(arg, '=') || arg[0] == '=')
        return usage("--env: expected K=V, got '%s'", arg);
    if (e->n == MAX_ENV)
        return usage("--env: at most 64, got another: '%s'", arg);
    e->v[e->n++] = arg;
    return 0;
}

int cli_train(int argc, char **argv)
{
    unsigned workers = 0, max_failures = 0;
    const char *res = NULL, *topo = NULL, *accel = NULL, *domain = NULL, *ckpt = NULL;
    const char *cwd_s = NULL, *env_policy = NULL, *placement = NULL;
    train_env_t te = {.n = 0};
    corral_strategy_t strategy = CORRAL_PACK;
    bool have_strategy = false, queue = false, wait_nodes = false;
    const cli_opt_t opts[] = {
        CLI_UINT("workers", &workers, 1, 4096),
        CLI_STR("resources-per-worker", &res),
        CLI_STR("tpu-topology", &topo),
        CLI_STR("accelerator-type", &accel),
        CLI_STR("placement", &placement),
        CLI_STR("domain", &domain),
        CLI_UINT("max-failures", &max_failures, 0, 1000),
        CLI_STR("checkpoint-dir", &ckpt),
        CLI_CALL("env", opt_env, &te),
        CLI_FLAG("queue", &queue),
        CLI_STR("cwd", &cwd_s),
        CLI_STR("env-policy", &env_policy),
        CLI_FLAG("wait-for-nodes", &wait_nodes),
        CLI_END,
    };
    /* options stop at the command, whose own options are its */
    int first = cli_parse_opts("corral train", opts, argc, argv, train_usage, NULL, true);
    if (first < 0)
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    optind = first;
    queue |= wait_nodes;
    if (topo && !topo_chips(topo))
        return usage("--tpu-topology: expected AxB or AxBxC (e.g. 4x4), got '%s'", topo);
    if (placement) {
        if (corral_strategy_parse(placement, &strategy) < 0)
            return usage("--placement: expected PACK, SPREAD, STRICT_PACK or STRICT_SPREAD, "
                         "got '%s'",
                         placement);
        have_strategy = true;
    }
    const char **env = te.v;
    size_t nenv = te.n;
    if (optind >= argc)
        return usage("%s", "no command: give it after --");
    if (accel && !topo)
        return usage("%s", "--accelerator-type goes with --tpu-topology");
    if (ckpt) { /* before anything is reserved */
        char *abs = cli_abs_path("corral train", "--checkpoint-dir", ckpt);
        bool bad = !abs || inside_home(abs);
        if (abs && bad)
            fprintf(stderr,
                    "corral train: --checkpoint-dir %s is inside the corral home, which a root "
                    "agent hides from its workers (docs/workers.md): give a directory outside it\n",
                    abs);
        free(abs);
        if (bad)
            return CLI_FAIL;
    }
    corral_t *c;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "corral train: no head answers: %s\n", why ? why : "?");
        free(why);
        return CLI_FAIL;
    }
    char resbuf[64];
    char sel[160] = "";
    if (topo) { /* a TPU slice: one worker per chip, on hosts of one slice */
        if (!res)
            res = "TPU=1";
        if (!workers)
            workers = topo_chips(topo);
        if (!domain)
            domain = "corral.io/tpu-slice-name";
        snprintf(sel, sizeof(sel), "corral.io/tpu-slice-topology=%s", topo);
        if (accel)
            snprintf(sel + strlen(sel), sizeof(sel) - strlen(sel), ",corral.io/accelerator-type=%s",
                     accel);
    }
    if (!res)
        res = "GPU=1";
    if (!workers) { /* one per device of that kind in the cluster */
        char name[32];
        double per;
        corral_status_t st;
        if (!first_resource(res, name, sizeof(name), &per) || corral_status(c, &st) < 0) {
            fprintf(stderr,
                    "corral train: cannot count the cluster's devices for '%s'; give "
                    "--workers\n",
                    res);
            corral_disconnect(c);
            return CLI_FAIL;
        }
        for (size_t i = 0; i < st.nres; i++)
            if (strcmp(st.res[i].name, name) == 0)
                workers = (unsigned)(st.res[i].total / per);
        corral_status_free(&st);
        if (!workers) {
            fprintf(stderr, "corral train: the cluster has no %s; give --resources-per-worker\n",
                    name);
            corral_disconnect(c);
            return CLI_FAIL;
        }
    }
    snprintf(resbuf, sizeof(resbuf), "%s", res);
    corral_bundle_spec_t *b = cr_calloc(workers, sizeof(*b));
    for (unsigned i = 0; i < workers; i++)
        b[i].resources = resbuf;
    char pgname[64];
    snprintf(pgname, sizeof(pgname), "train-%d-%lld", (int)getpid(), (long long)time(NULL));
    corral_pg_spec_t ps = {.name = pgname,
                           .bundles = b,
                           .nbundles = workers,
                           .strategy = have_strategy ? strategy : CORRAL_PACK,
                           .selector = sel[0] ? sel : NULL,
                           .domain = domain,
                           .wait_for_nodes = queue,
                           /* made for this run: removed by the head if this command dies */
                           .bound = CORRAL_PG_BOUND_ALWAYS};
    int64_t t0 = cr_mono_ms();
    corral_pg_t pg = {0};
    /* caught from before the group exists, so that none is left behind */
    struct sigaction old_int, old_term;
    cli_catch_interrupts(&old_int, &old_term);
    int rc = CLI_FAIL, err = corral_pg_create(c, &ps, &pg);
    free(b);
    if (err < 0) {
        fprintf(stderr, "corral train: cannot reserve %u rank(s) of %s: %s\n", workers, res,
                corral_errmsg(c));
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        corral_disconnect(c);
        return CLI_FAIL;
    }
    if (!strcmp(pg.state, "PENDING") || !strcmp(pg.state, "PREPARING")) {
        corral_pg_free(&pg);
        memset(&pg, 0, sizeof(pg));
        if ((err = cli_wait_pg(c, "corral train", pgname, &pg)) < 0) {
            if (err == -EINTR)
                fprintf(stderr, "corral train: interrupted while waiting: removing group %s\n",
                        pgname);
            else if (err != CR_ENOENT)
                fprintf(stderr, "corral train: %s\n", corral_errmsg(c));
            goto out_pg;
        }
    }
    if (strcmp(pg.state, "CREATED") != 0) {
        fprintf(stderr, "corral train: the reservation is %s: %s\n", pg.state, pg.reason);
        goto out_pg;
    }
    char *ckenv = NULL, *ckabs = NULL;
    if (ckpt) { /* the caller's relative path, wherever the ranks run */
        if (!(ckabs = cli_abs_path("corral train", "--checkpoint-dir", ckpt)))
            goto out_pg;
        env[nenv++] = ckenv = cr_asprintf("CORRAL_CHECKPOINT_DIR=%s", ckabs);
        free(ckabs);
    }
    env[nenv] = NULL;
    cli_strv_t wenv;
    char *cwd = NULL;
    if (cli_worker_env("corral train", env_policy, env, nenv, &wenv)) {
        free(ckenv);
        goto out_pg;
    }
    if (!(cwd = cli_abs_path("corral train", "--cwd", cwd_s))) {
        cli_strv_free(&wenv);
        free(ckenv);
        goto out_pg;
    }
    corral_job_spec_t js = {.name = "train",
                            .argv = (const char *const *)&argv[optind],
                            .env = wenv.v.v,
                            .env_whole = 1,
                            .cwd = cwd,
                            .num_workers = workers,
                            .restart = max_failures ? CORRAL_RESTART_GANG : CORRAL_RESTART_NONE,
                            .max_restarts = max_failures,
                            .placement_group = pgname,
                            .distributed = 1,
                            .bound = 1};
    char *job_id = NULL;
    err = corral_submit(c, &js, &job_id);
    free(ckenv);
    free(cwd);
    cli_strv_free(&wenv);
    if (err < 0) {
        fprintf(stderr, "corral train: %s\n", corral_errmsg(c));
        goto out_pg;
    }
    cli_stopper_t stp = {.cmd = "corral train", .job_id = job_id};
    corral_set_tick(c, cli_stop_on_interrupt, &stp);
    outputs_t o = {.n = workers, .prefix = true, .label = "rank "};
    o.out = cr_calloc(o.n + 1, sizeof(*o.out));
    o.err = cr_calloc(o.n + 1, sizeof(*o.err));
    corral_set_log_dropped(c, cli_on_dropped, &o);
    err = corral_job_logs_follow_all(c, job_id, -1, cli_on_follow, &o);
    corral_set_tick(c, NULL, NULL);
    cli_stopper_fini(&stp);
    for (size_t i = 0; i < o.n; i++) { /* partial last lines */
        if (o.out[i].len)
            printf("[rank %zu] %s\n", i, o.out[i].s);
        if (o.err[i].len)
            fprintf(stderr, "[rank %zu] %s\n", i, o.err[i].s);
        cr_buf_free(&o.out[i]);
        cr_buf_free(&o.err[i]);
    }
    free(o.out);
    free(o.err);
    corral_job_t job;
    if (err < 0 || corral_wait(c, job_id, -1, &job) < 0) {
        fprintf(stderr, "corral train: %s\n", corral_errmsg(c));
        free(job_id);
        goto out_pg;
    }
    /* the summary */
    cr_buf_t nodes = {0}, devs = {0};
    for (size_t i = 0; i < job.nworkers; i++) {
        const corral_worker_t *w = &job.workers[i];
        if (!nodes.s || !strstr(nodes.s, w->node_id))
            cr_buf_printf(&nodes, "%s%s", nodes.len ? "," : "", w->node_id);
        cr_buf_printf(&devs, "%s%s[%s]", i ? " " : "", w->node_id, w->devices);
    }
    fprintf(stderr,
            "corral train: job %s %s: %zu rank(s) on %s; devices %s; %u restart(s); %.1f s\n",
            job.job_id, corral_job_state_name(job.state), job.nworkers, nodes.s ? nodes.s : "-",
            devs.s ? devs.s : "-", job.restarts, (double)(cr_mono_ms() - t0) / 1000.0);
    cr_buf_free(&nodes);
    cr_buf_free(&devs);
    if (job.state == CORRAL_JOB_SUCCEEDED) {
        rc = CLI_OK;
    } else {
        char *said = ranks_said(job.reason);
        fprintf(stderr, "corral train: %s\n", said);
        free(said);
        /* the rank the head's reason names ("worker N ..."), else the first failed */
        int failing = -1;
        const char *wn = strstr(job.reason, "worker ");
        if (wn && wn[7] >= '0' && wn[7] <= '9' && strtoul(wn + 7, NULL, 10) < job.nworkers)
            failing = (int)strtoul(wn + 7, NULL, 10);
        for (size_t i = 0; i < job.nworkers; i++) {
            const corral_worker_t *w = &job.workers[i];
            fprintf(stderr, "  rank %zu on %s: %s", i, w->node_id, w->state);
            if (w->signal)
                fprintf(stderr, " (signal %d)", w->signal);
            else if (!strcmp(w->state, "EXITED"))
                fprintf(stderr, " (exit code %d)", w->exit_code);
            fprintf(stderr, "\n");
            if (failing < 0 && strcmp(w->state, "STOPPED") &&
                (w->signal || w->exit_code || !strcmp(w->state, "FAILED")))
                failing = (int)i;
        }
        if (failing >= 0)
            print_tail(c, job_id, (unsigned)failing);
        rc = job.exit_code ? (job.exit_code & 0xff ? job.exit_code & 0xff : 1) : 1;
    }
    corral_job_free(&job);
    free(job_id);
out_pg:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (corral_pg_remove(c, pgname) < 0)
        fprintf(stderr, "corral train: removing group %s: %s\n", pgname, corral_errmsg(c));
    corral_pg_free(&pg);
    corral_disconnect(c);
    return rc;
}
