/* corral run: one job, a gang of workers, now (docs/runtime.md). */
#include "cli.h"
#include <corral/corral.h>
#include <getopt.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static const char run_usage[] =
    "usage: corral run [--gpus N | --tpus N | --resources 'TPU=4,CPU=2'] [--workers N] "
    "[--env K=V]... [--name NAME] [--max-restarts N [--restart worker|gang]] "
    "[--placement PACK|SPREAD|STRICT_PACK|STRICT_SPREAD] [--label-selector SEL] [--domain KEY] "
    "[--pg GROUP [--bundle I]] [--bind closest|none] [--cwd DIR] [--env-policy all|none|K1,K2] "
    "[--queue] [--detach] -- CMD [ARG...]\n"
    "\n"
    "Runs CMD as a job: a gang of --workers identical workers, placed together, and waits for\n"
    "it, streaming each worker's output ('[i] ' before each line with several workers).\n"
    "Exits with the job's exit code. Give the command and its arguments as separate words.\n"
    "\n"
    "  --gpus N, --tpus N     N GPUs (TPU chips) for each worker, not in all: --gpus 1\n"
    "                         --workers 8 asks for 8 GPUs; added to --resources (--gpus 2\n"
    "                         --resources CPU=8: GPU=2,CPU=8 for each worker)\n"
    "  --resources R          each worker's resources, 'GPU=2,CPU=8,memory=64GiB' (default\n"
    "                         CPU=1); memory takes Ki/Mi/Gi/Ti, KiB..TiB, KB/MB/GB/TB; names\n"
    "                         are case-sensitive (GPU, TPU, CPU, memory, HPU, neuron_cores)\n"
    "  --workers N            the gang's size (default 1), placed all or nothing\n"
    "  --env K=V              a variable for the workers, over the caller's (repeatable)\n"
    "  --env-policy P         what of the caller's environment the workers get: all (the\n"
    "                         default), none, or a list of names K1,K2\n"
    "  --cwd DIR              where the workers start (default: the caller's directory; a\n"
    "                         relative DIR is the caller's; on other nodes it must exist)\n"
    "  --name NAME            the job's name (default: the command)\n"
    "  --max-restarts N       restarts allowed (default 0); --restart worker|gang|none says\n"
    "                         what restarts (default gang)\n"
    "  --placement S          PACK (default), SPREAD, STRICT_PACK or STRICT_SPREAD over nodes\n"
    "  --label-selector SEL   only nodes whose labels match ('k=v,k2 in (a,b)')\n"
    "  --domain KEY           all workers on nodes sharing one value of label KEY\n"
    "  --pg GROUP [--bundle I]  run in a placement group (its bundle I)\n"
    "  --bind closest|none    worker threads on the cores near their devices (default) or not\n"
    "  --queue, --wait-for-nodes  accept a gang the alive nodes could never hold and wait for\n"
    "                         nodes to join (else it is refused at once with the reason)\n"
    "  --detach               print the job id and return; 'corral job' follows it\n"
    "\n"
    "While the job waits its reason and its place in the queue are shown. Ctrl-C or SIGTERM\n"
    "stops the job, and so does the head when this command dies or loses its connection\n"
    "(unless --detach). See docs/runtime.md.\n";

static const char submit_usage[] =
    "usage: corral job submit [corral run's options, but --no-wait for --detach] -- CMD [ARG...]\n"
    "\n"
    "Submits CMD as a job (a driver script, say: its tasks and actors belong to it) and\n"
    "follows its output until it ends, exiting with its exit code, as 'ray job submit'\n"
    "does. Unlike corral run the job is not bound to this command: Ctrl-C, or this command\n"
    "dying, stops the following, not the job ('corral job logs -f JOB' follows it again,\n"
    "'corral job stop JOB' stops it). The options are corral run's ('corral run --help').\n"
    "\n"
    "  --no-wait              print the job id and return at once\n";

/* Each worker's output. Followed while it is written (JobLogs follow):
 * with one worker it is passed on as it comes; with several each line is
 * prefixed "[N] " and a partial line is held until its newline (or the
 * end, when it gets one), so lines of different workers never mix. A
 * head that cannot follow gets the old way: gathered at the end. */

static void on_log(void *arg, unsigned worker, int stream, const char *data, size_t len)
{
    outputs_t *o = arg;
    if (worker >= o->n)
        return;
    cr_buf_append(stream ? &o->err[worker] : &o->out[worker], data, len);
}

static void format_mib(uint64_t bytes, char *buf, size_t size)
{
    if (bytes % (1u << 20) == 0)
        snprintf(buf, size, "%llu MiB", (unsigned long long)(bytes >> 20));
    else
        snprintf(buf, size, "%.1f MiB", (double)bytes / (1u << 20));
}

void cli_on_dropped(void *arg, unsigned worker, int stream, uint64_t dropped, uint64_t log_max)
{
    char d[32], m[32];
    snprintf(d, sizeof(d), "%.1f MiB", (double)dropped / (1u << 20));
    format_mib(log_max, m, sizeof(m));
    fflush(stdout);
    if (log_max)
        fprintf(stderr,
                "[corral: %s of earlier %s of worker %u dropped: each worker keeps its last %s "
                "(--worker-log-max)]\n",
                d, stream ? "stderr output" : "output", worker, m);
    else
        fprintf(stderr, "[corral: %s of earlier %s of worker %u dropped (--worker-log-max)]\n", d,
                stream ? "stderr output" : "output", worker);
}

/* Followed output: whole lines out now, the partial one held. */
void cli_on_follow(void *arg, unsigned worker, int stream, const char *data, size_t len)
{
    outputs_t *o = arg;
    FILE *fp = stream ? stderr : stdout;
    if (worker >= o->n)
        return;
    if (!o->prefix) { /* as it came: one write(2), no copy through stdio's buffer */
        fflush(fp);
        int fd = fileno(fp);
        while (len) {
            ssize_t w = write(fd, data, len);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) { /* a non-blocking stdout, or an error stdio will report */
                fwrite(data, 1, len, fp);
                fflush(fp);
                return;
            }
            data += w;
            len -= (size_t)w;
        }
        return;
    }
    cr_buf_t *b = stream ? &o->err[worker] : &o->out[worker];
    cr_buf_append(b, data, len);
    const char *p = b->s, *end = b->s + b->len, *nl;
    while (p < end && (nl = memchr(p, '\n', (size_t)(end - p)))) {
        fprintf(fp, "[%s%u] %.*s\n", o->label ? o->label : "", worker, (int)(nl - p), p);
        p = nl + 1;
    }
    size_t used = (size_t)(p - b->s);
    if (used) {
        memmove(b->s, p, b->len - used);
        b->len -= used;
        b->s[b->len] = '\0';
    }
    fflush(fp);
}

#define PIPE_WANT (1 << 20) /* cli_follow_to_stdout: the stdout pipe asked for */

void cli_follow_to_stdout(corral_t *c, bool prefix)
{
    struct stat st;
    if (prefix || fstat(STDOUT_FILENO, &st) < 0 || !S_ISFIFO(st.st_mode))
        return;
    /* a pipe of 64 KiB (Linux's default) wakes its reader, and this
     * process, every 64 KiB; 1 MiB (pipe-max-size's default, allowed
     * without privilege) sixteen times less often. Only ever grown; a
     * refusal (a pipe or a user at its limit) leaves it as it was. */
    int have = fcntl(STDOUT_FILENO, F_GETPIPE_SZ);
    if (have >= 0 && have < PIPE_WANT)
        (void)fcntl(STDOUT_FILENO, F_SETPIPE_SZ, PIPE_WANT);
    fflush(stdout);
    corral_set_log_fd(c, STDOUT_FILENO);
}

/* The tick of the follow: Ctrl-C stops the job, through a second
 * connection (the first is busy following), and the follow goes on to
 * the job's end so that its last output and exit code are shown. */
int cli_stop_on_interrupt(void *arg)
{
    cli_stopper_t *st = arg;
    cli_watch_pending(st);
    if (!cli_interrupted() || st->sent)
        return 0;
    if (st->leave_running) { /* corral job submit: the job is not this command's */
        st->left = true;
        fprintf(stderr,
                "%s: signal %d: no longer following job %s, which goes on ('corral job logs -f %s' "
                "follows it, 'corral job stop %s' stops it)\n",
                st->cmd, cli_interrupted(), st->job_id, st->job_id, st->job_id);
        return 1;
    }
    st->sent = true;
    fprintf(stderr, "%s: signal %d: stopping job %s\n", st->cmd, cli_interrupted(), st->job_id);
    corral_t *c2;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c2, &why) < 0) {
        fprintf(stderr, "%s: cannot stop job %s: %s\n", st->cmd, st->job_id, why ? why : "");
        free(why);
        return 1; /* stop following rather than wait unseen */
    }
    if (corral_stop(c2, st->job_id, 0) < 0)
        fprintf(stderr, "%s: %s\n", st->cmd, corral_errmsg(c2));
    corral_disconnect(c2);
    return 0;
}

static void print_prefixed(FILE *fp, const cr_buf_t *b, unsigned index, bool prefix)
{
    if (!b->len)
        return;
    if (!prefix) {
        fwrite(b->s, 1, b->len, fp);
        return;
    }
    const char *p = b->s, *end = b->s + b->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        fprintf(fp, "[%u] %.*s\n", index, (int)len, p);
        p += len + (nl ? 1 : 0);
    }
}

/* --resources as given, --gpus and --tpus added to it (per worker) */
typedef struct run_opts {
    const char *cmd, *usage; /* "corral run" or "corral job submit" */
    char res[256];
    unsigned gpus, tpus, workers;
    int nres;
    CR_VEC(const char *) env;
} run_opts_t;

static int parse_count(const run_opts_t *r, const char *opt, const char *s, unsigned *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || v < 1 || v > 4096) {
        fprintf(stderr, "%s: %s: expected a count from 1 to 4096, got '%s'\n%s", r->cmd, opt, s,
                r->usage);
        return CLI_USAGE;
    }
    *out = (unsigned)v;
    return 0;
}

/* The way of a head without following: wait for the end (Ctrl-C stops
 * the job), then print what was recorded. */
static int wait_then_print(corral_t *c, const char *job_id, outputs_t *o, corral_job_t *job)
{
    bool stop_sent = false;
    int err;
    while ((err = corral_wait(c, job_id, 100, job)) == CR_EAGAIN) {
        corral_job_free(job);
        if (cli_interrupted() && !stop_sent) {
            fprintf(stderr, "corral run: signal %d: stopping job %s\n", cli_interrupted(), job_id);
            if (corral_stop(c, job_id, 0) < 0)
                fprintf(stderr, "corral run: %s\n", corral_errmsg(c));
            stop_sent = true;
        }
    }
    if (err < 0) {
        fprintf(stderr, "corral run: job %s: %s\n", job_id, corral_errmsg(c));
        return err;
    }
    if (corral_job_logs(c, job_id, -1, on_log, o) < 0)
        fprintf(stderr, "corral run: logs of job %s: %s\n", job_id, corral_errmsg(c));
    fflush(stdout);
    for (size_t i = 0; i < o->n; i++) {
        print_prefixed(stdout, &o->out[i], (unsigned)i, o->prefix);
        fflush(stdout);
        print_prefixed(stderr, &o->err[i], (unsigned)i, o->prefix);
        o->out[i].len = o->err[i].len = 0;
    }
    return 0;
}

static int opt_count(void *dst, const char *name, const char *arg)
{
    run_opts_t *r = dst;
    return parse_count(r, name[0] == 'g' ? "--gpus" : "--tpus", arg,
                       name[0] == 'g' ? &r->gpus : &r->tpus)
               ? CLI_USAGE
               : 0;
}

static int opt_resources(void *dst, const char *name, const char *arg)
{
    run_opts_t *r = dst;
    snprintf(r->res, sizeof(r->res), "%s", arg);
    r->nres++;
    return 0;
}

/* Whether resources text names resource name ("GPU=2,CPU=8" has GPU). */
static bool names_resource(const char *res, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = res; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        while (*p == ' ')
            p++;
        if (!strncmp(p, name, n) && (p[n] == '=' || p[n] == ' '))
            return true;
    }
    return false;
}

/* --gpus/--tpus onto --resources: NULL, or the conflict to say. */
static const char *combine_resources(run_opts_t *r)
{
    if (r->nres > 1)
        return "give --resources once (a list: 'GPU=2,CPU=8')";
    const struct {
        unsigned n;
        const char *name, *opt;
    } dev[] = {{r->gpus, "GPU", "--gpus"}, {r->tpus, "TPU", "--tpus"}};
    for (size_t i = 0; i < CR_ARRAY_SIZE(dev); i++) {
        if (!dev[i].n)
            continue;
        if (names_resource(r->res, dev[i].name))
            return dev[i].name[0] == 'G' ? "--gpus and a GPU in --resources: give one of them"
                                         : "--tpus and a TPU in --resources: give one of them";
        size_t len = strlen(r->res);
        snprintf(r->res + len, sizeof(r->res) - len, "%s%s=%u", len ? "," : "", dev[i].name,
                 dev[i].n);
    }
    return NULL;
}

static int opt_workers(void *dst, const char *name, const char *arg)
{
    run_opts_t *r = dst;
    return parse_count(r, "--workers", arg, &r->workers);
}

static int opt_env(void *dst, const char *name, const char *arg)
{
    run_opts_t *r = dst;
    if (!strchr(arg, '=') || arg[0] == '=') {
        fprintf(stderr, "%s: --env: expected K=V, got '%s'\n%s", r->cmd, arg, r->usage);
        return CLI_USAGE;
    }
    *CR_VEC_PUSH(&r->env) = arg;
    return 0;
}

static bool one_of(const char *arg, const char *words)
{
    return cli_one_of(words, arg, strlen(arg));
}

static int run_or_submit(const char *cmd, const char *usage, bool submit, int argc, char **argv)
{
    run_opts_t ro = {.cmd = cmd, .usage = usage, .res = "", .workers = 1};
    const char *name = NULL, *restart = NULL, *placement = NULL, *bind_s = NULL;
    unsigned max_restarts = 0, bundle = ~0u;
    int rc = CLI_FAIL;
    bool detach = false, queue = false;
    corral_strategy_t strategy = CORRAL_PACK;
    corral_bind_t bind = CORRAL_BIND_CLOSEST;
    const char *selector = NULL, *domain = NULL, *pg = NULL;
    const char *cwd_s = NULL, *env_policy = NULL;
    const cli_opt_t opts[] = {
        CLI_CALL("gpus", opt_count, &ro),
        CLI_CALL("tpus", opt_count, &ro),
        CLI_CALL("resources", opt_resources, &ro),
        CLI_CALL("workers", opt_workers, &ro),
        CLI_CALL("env", opt_env, &ro),
        CLI_STR("name", &name),
        CLI_FLAG(submit ? "no-wait" : "detach", &detach),
        CLI_FLAG("queue", &queue),
        CLI_FLAG("wait-for-nodes", &queue),
        CLI_UINT("max-restarts", &max_restarts, 0, 1000),
        CLI_STR("restart", &restart),
        CLI_STR("placement", &placement),
        CLI_STR("label-selector", &selector),
        CLI_STR("domain", &domain),
        CLI_STR("pg", &pg),
        CLI_UINT("bundle", &bundle, 0, 100000),
        CLI_STR("bind", &bind_s),
        CLI_STR("cwd", &cwd_s),
        CLI_STR("env-policy", &env_policy),
        CLI_END,
    };
    /* options stop at the command, whose own options are its */
    int first = cli_parse_opts(cmd, opts, argc, argv, usage, NULL, true);
    if (first < 0) {
        CR_VEC_FREE(&ro.env);
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    }
    optind = first;
    const char *bad = NULL, *got = NULL;
    if (restart && !one_of(restart, "worker,gang,none"))
        bad = "--restart: expected worker, gang or none", got = restart;
    else if (placement && corral_strategy_parse(placement, &strategy) < 0)
        bad = "--placement: expected PACK, SPREAD, STRICT_PACK or STRICT_SPREAD", got = placement;
    else if (bind_s && !one_of(bind_s, "closest,none"))
        bad = "--bind: expected closest or none", got = bind_s;
    if (bad) {
        fprintf(stderr, "%s: %s, got '%s'\n%s", cmd, bad, got, usage);
        CR_VEC_FREE(&ro.env);
        return CLI_USAGE;
    }
    if (bind_s)
        bind = strcmp(bind_s, "none") ? CORRAL_BIND_CLOSEST : CORRAL_BIND_NONE;
    bool has_strategy = placement != NULL, has_bundle = bundle != ~0u;
    if (!has_bundle)
        bundle = 0;
    char *res = ro.res;
    const char *conflict = combine_resources(&ro);
    if (conflict)
        ;
    else if (has_bundle && !pg)
        conflict = "--bundle needs --pg GROUP";
    else if (pg && (has_strategy || domain))
        conflict = "--pg runs in the group's placement: no --placement or --domain with it";
    else if (optind >= argc)
        conflict = "no command given";
    if (conflict) {
        fprintf(stderr, "%s: %s\n%s", cmd, conflict, usage);
        CR_VEC_FREE(&ro.env);
        return CLI_USAGE;
    }
    /* the workers' environment: the caller's (by --env-policy), --env on top */
    cli_strv_t wenv;
    if (cli_worker_env(cmd, env_policy, ro.env.v, ro.env.n, &wenv)) {
        fprintf(stderr, "%s", usage);
        CR_VEC_FREE(&ro.env);
        return CLI_USAGE;
    }
    char *cwd = cli_abs_path(cmd, "--cwd", cwd_s);
    if (!cwd) {
        cli_strv_free(&wenv);
        CR_VEC_FREE(&ro.env);
        return CLI_FAIL;
    }

    corral_t *c;
    char *why = NULL, *job_id = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "%s: %s\n", cmd, why ? why : "cannot connect");
        free(why);
        free(cwd);
        cli_strv_free(&wenv);
        CR_VEC_FREE(&ro.env);
        return CLI_FAIL;
    }
    corral_job_spec_t spec = {.name = name,
                              .argv = (const char *const *)(argv + optind),
                              .env = wenv.v.v,
                              .env_whole = 1,
                              .cwd = cwd,
                              .resources = res[0] ? res : NULL,
                              .num_workers = ro.workers,
                              .max_restarts = max_restarts,
                              .strategy = strategy,
                              .selector = selector,
                              .domain = domain,
                              .placement_group = pg,
                              .has_bundle = has_bundle,
                              .bundle_index = bundle,
                              .bind = bind,
                              .wait_for_nodes = queue,
                              /* the head stops it if this command is gone first */
                              .bound = !detach && !submit};
    /* with restarts allowed the gang restarts unless told otherwise */
    if (!restart)
        spec.restart = max_restarts ? CORRAL_RESTART_GANG : CORRAL_RESTART_NONE;
    else
        spec.restart = !strcmp(restart, "worker") ? CORRAL_RESTART_WORKER
                       : !strcmp(restart, "gang") ? CORRAL_RESTART_GANG
                                                  : CORRAL_RESTART_NONE;
    /* caught from before the submission, so that no signal can leave the
     * job running unseen */
    struct sigaction old_int, old_term;
    cli_catch_interrupts(&old_int, &old_term);
    if (corral_submit(c, &spec, &job_id) < 0) {
        fprintf(stderr, "%s: %s\n", cmd, corral_errmsg(c));
        goto out;
    }
    if (detach) {
        printf("%s\n", job_id);
        rc = CLI_OK;
        goto out;
    }
    if (submit)
        fprintf(stderr,
                "%s: job %s submitted; following its output until it ends (Ctrl-C stops "
                "following, not the job)\n",
                cmd, job_id);
    corral_job_t job;
    int err;
    outputs_t o = {.n = ro.workers, .prefix = ro.workers > 1};
    o.out = cr_calloc(o.n + 1, sizeof(*o.out));
    o.err = cr_calloc(o.n + 1, sizeof(*o.err));
    cli_stopper_t st = {.cmd = cmd, .job_id = job_id, .leave_running = submit};
    corral_set_tick(c, cli_stop_on_interrupt, &st);
    corral_set_log_dropped(c, cli_on_dropped, &o);
    cli_follow_to_stdout(c, o.prefix);
    int ended = 0; /* the follow's end brought the job: no corral_wait */
    err = corral_job_logs_follow_end(c, job_id, -1, cli_on_follow, &o, &job, &ended);
    corral_set_tick(c, NULL, NULL);
    cli_stopper_fini(&st);
    if (submit && (st.left || err == CR_ENOSYS)) {
        /* the job goes on: no wait, no stop */
        if (!st.left)
            fprintf(stderr, "%s: this head cannot follow output: 'corral job logs %s' shows it\n",
                    cmd, job_id);
        rc = CLI_OK;
        err = 1;
    } else if (err == CR_ENOSYS) { /* a head that cannot follow: the output at the end */
        err = wait_then_print(c, job_id, &o, &job);
    } else {
        if (err < 0) {
            fprintf(stderr, "%s: output of job %s: %s\n", cmd, job_id, corral_errmsg(c));
        }
        for (size_t i = 0; i < o.n; i++) { /* partial last lines */
            print_prefixed(stdout, &o.out[i], (unsigned)i, o.prefix);
            fflush(stdout);
            print_prefixed(stderr, &o.err[i], (unsigned)i, o.prefix);
        }
        err = err < 0 ? err : ended ? 0 : corral_wait(c, job_id, -1, &job);
        if (err < 0)
            fprintf(stderr, "%s: job %s: %s\n", cmd, job_id, corral_errmsg(c));
    }
    for (size_t i = 0; i < o.n; i++) {
        cr_buf_free(&o.out[i]);
        cr_buf_free(&o.err[i]);
    }
    free(o.out);
    free(o.err);
    if (err)
        goto out;
    if (job.state != CORRAL_JOB_SUCCEEDED)
        fprintf(stderr, "%s: job %s %s: %s\n", cmd, job_id, corral_job_state_name(job.state),
                job.reason);
    rc = job.state == CORRAL_JOB_SUCCEEDED ? 0 : job.exit_code ? job.exit_code & 0xff : CLI_FAIL;
    corral_job_free(&job);
out:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    free(job_id);
    corral_disconnect(c);
    free(cwd);
    cli_strv_free(&wenv);
    CR_VEC_FREE(&ro.env);
    return rc;
}

int cli_run(int argc, char **argv)
{
    return run_or_submit("corral run", run_usage, false, argc, argv);
}

int cli_job_submit(int argc, char **argv)
{
    return run_or_submit("corral job submit", submit_usage, true, argc, argv);
}
