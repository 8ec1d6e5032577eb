/* corral run: one job, a gang of workers, now (docs/runtime.md). */
#include "cli.h"
#include <corral/corral.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>

static const char run_usage[] =
    "usage: corral run [--gpus N | --tpus N | --resources 'TPU=4,CPU=2'] [--workers N] "
    "[--env K=V]... [--name NAME] [--max-restarts N [--restart worker|gang]] "
    "[--placement PACK|SPREAD|STRICT_PACK|STRICT_SPREAD] [--label-selector SEL] [--domain KEY] "
    "[--pg GROUP [--bundle I]] [--bind closest|none] [--detach] -- CMD [ARG...]\n";

/* Each worker's output. Followed while it is written (JobLogs follow):
 * with one worker it is passed on as it comes; with several each line is
 * prefixed "[N] " and a partial line is held until its newline (or the
 * end, when it gets one), so lines of different workers never mix. A
 * head that cannot follow gets the old way: gathered at the end. */

/* Ctrl-C (or SIGTERM) while waiting stops the job rather than leaving it
 * running behind the user's back (corral run and corral train). */
static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig)
{
    interrupted = sig;
}

void cli_catch_interrupts(struct sigaction *old_int, struct sigaction *old_term)
{
    struct sigaction sa = {.sa_handler = on_interrupt};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, old_int);
    sigaction(SIGTERM, &sa, old_term);
}

static void on_log(void *arg, unsigned worker, int stream, const char *data, size_t len)
{
    outputs_t *o = arg;
    if (worker >= o->n)
        return;
    cr_buf_append(stream ? &o->err[worker] : &o->out[worker], data, len);
}

/* Followed output: whole lines out now, the partial one held. */
void cli_on_follow(void *arg, unsigned worker, int stream, const char *data, size_t len)
{
    outputs_t *o = arg;
    FILE *fp = stream ? stderr : stdout;
    if (worker >= o->n)
        return;
    if (!o->prefix) {
        fwrite(data, 1, len, fp);
        fflush(fp);
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

/* The tick of the follow: Ctrl-C stops the job, through a second
 * connection (the first is busy following), and the follow goes on to
 * the job's end so that its last output and exit code are shown. */
int cli_stop_on_interrupt(void *arg)
{
    cli_stopper_t *st = arg;
    if (!interrupted || st->sent)
        return 0;
    st->sent = true;
    fprintf(stderr, "%s: signal %d: stopping job %s\n", st->cmd, (int)interrupted, st->job_id);
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

static int parse_count(const char *opt, const char *s, unsigned *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || v < 1 || v > 4096) {
        fprintf(stderr, "corral run: %s: expected a count from 1 to 4096, got '%s'\n%s", opt, s,
                run_usage);
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
        if (interrupted && !stop_sent) {
            fprintf(stderr, "corral run: signal %d: stopping job %s\n", (int)interrupted, job_id);
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

int cli_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"gpus", required_argument, 0, 'g'},
        {"tpus", required_argument, 0, 't'},
        {"resources", required_argument, 0, 'r'},
        {"workers", required_argument, 0, 'w'},
        {"env", required_argument, 0, 'e'},
        {"name", required_argument, 0, 'n'},
        {"detach", no_argument, 0, 'd'},
        {"max-restarts", required_argument, 0, 'm'},
        {"restart", required_argument, 0, 'R'},
        {"placement", required_argument, 0, 'P'},
        {"label-selector", required_argument, 0, 'S'},
        {"domain", required_argument, 0, 'D'},
        {"pg", required_argument, 0, 'G'},
        {"bundle", required_argument, 0, 'B'},
        {"bind", required_argument, 0, 'b'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    char res[256] = "";
    const char *name = NULL;
    unsigned workers = 1, count, max_restarts = 0;
    const char *restart = NULL;
    int nres = 0, opt, rc = CLI_FAIL;
    bool detach = false, has_strategy = false, has_bundle = false;
    corral_strategy_t strategy = CORRAL_PACK;
    corral_bind_t bind = CORRAL_BIND_CLOSEST;
    const char *selector = NULL, *domain = NULL, *pg = NULL;
    unsigned bundle = 0;
    CR_VEC(const char *) env = {0};
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (opt) {
        case 'g':
        case 't':
            if (parse_count(opt == 'g' ? "--gpus" : "--tpus", optarg, &count)) {
                CR_VEC_FREE(&env);
                return CLI_USAGE;
            }
            snprintf(res, sizeof(res), "%s=%u", opt == 'g' ? "GPU" : "TPU", count);
            nres++;
            break;
        case 'r':
            snprintf(res, sizeof(res), "%s", optarg);
            nres++;
            break;
        case 'w':
            if (parse_count("--workers", optarg, &workers)) {
                CR_VEC_FREE(&env);
                return CLI_USAGE;
            }
            break;
        case 'e':
            if (!strchr(optarg, '=') || optarg[0] == '=') {
                fprintf(stderr, "corral run: --env: expected K=V, got '%s'\n%s", optarg, run_usage);
                CR_VEC_FREE(&env);
                return CLI_USAGE;
            }
            *CR_VEC_PUSH(&env) = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 'd':
            detach = true;
            break;
        case 'm': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (!optarg[0] || *end || v < 0 || v > 1000) {
                fprintf(stderr, "corral run: --max-restarts: expected 0 to 1000, got '%s'\n%s",
                        optarg, run_usage);
                CR_VEC_FREE(&env);
                return CLI_USAGE;
            }
            max_restarts = (unsigned)v;
            break;
        }
        case 'R':
            if (strcmp(optarg, "worker") && strcmp(optarg, "gang") && strcmp(optarg, "none")) {
                fprintf(stderr,
                        "corral run: --restart: expected worker, gang or none, got '%s'\n%s",
                        optarg, run_usage);
                CR_VEC_FREE(&env);
                return CLI_USAGE;
            }
            restart = optarg;
            break;
        case 'P':
            if (corral_strategy_parse(optarg, &strategy) < 0) {
                fprintf(stderr,
                        "corral run: --placement: expected PACK, SPREAD, STRICT_PACK or "
                        "STRICT_SPREAD, got '%s'\n%s",
                        optarg, run_usage);
                CR_VEC_FREE(&env);
                return CLI_USAGE;
            }
            has_strategy = true;
            break;
        case 'S':
            selector = optarg;
            break;
        case 'D':
            domain = optarg;
            break;
        case 'G':
            pg = optarg;
            break;
        case 'B': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (!optarg[0] || *end || v < 0 || v > 100000) {
                fprintf(stderr, "corral run: --bundle: expected a bundle index, got '%s'\n%s",
                        optarg, run_usage);
                CR_VEC_FREE(&env);
                return CLI_USAGE;
            }
            bundle = (unsigned)v;
            has_bundle = true;
            break;
        }
        case 'b':
            if (strcmp(optarg, "closest") && strcmp(optarg, "none")) {
                fprintf(stderr, "corral run: --bind: expected closest or none, got '%s'\n%s",
                        optarg, run_usage);
                CR_VEC_FREE(&env);
                return CLI_USAGE;
            }
            bind = strcmp(optarg, "none") ? CORRAL_BIND_CLOSEST : CORRAL_BIND_NONE;
            break;
        case 'h':
            fputs(run_usage, stdout);
            CR_VEC_FREE(&env);
            return CLI_OK;
        default:
            fprintf(stderr, "corral run: unknown or incomplete option '%s'\n%s", argv[optind - 1],
                    run_usage);
            CR_VEC_FREE(&env);
            return CLI_USAGE;
        }
    }
    const char *conflict = NULL;
    if (nres > 1)
        conflict = "give one of --gpus, --tpus, --resources";
    else if (has_bundle && !pg)
        conflict = "--bundle needs --pg GROUP";
    else if (pg && (has_strategy || domain))
        conflict = "--pg runs in the group's placement: no --placement or --domain with it";
    else if (optind >= argc)
        conflict = "no command given";
    if (conflict) {
        fprintf(stderr, "corral run: %s\n%s", conflict, run_usage);
        CR_VEC_FREE(&env);
        return CLI_USAGE;
    }
    *CR_VEC_PUSH(&env) = NULL;

    corral_t *c;
    char *why = NULL, *job_id = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "corral run: %s\n", why ? why : "cannot connect");
        free(why);
        CR_VEC_FREE(&env);
        return CLI_FAIL;
    }
    corral_job_spec_t spec = {.name = name,
                              .argv = (const char *const *)(argv + optind),
                              .env = env.v,
                              .resources = res[0] ? res : NULL,
                              .num_workers = workers,
                              .max_restarts = max_restarts,
                              .strategy = strategy,
                              .selector = selector,
                              .domain = domain,
                              .placement_group = pg,
                              .has_bundle = has_bundle,
                              .bundle_index = bundle,
                              .bind = bind};
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
        fprintf(stderr, "corral run: %s\n", corral_errmsg(c));
        goto out;
    }
    if (detach) {
        printf("%s\n", job_id);
        rc = CLI_OK;
        goto out;
    }
    corral_job_t job;
    int err;
    outputs_t o = {.n = workers, .prefix = workers > 1};
    o.out = cr_calloc(o.n + 1, sizeof(*o.out));
    o.err = cr_calloc(o.n + 1, sizeof(*o.err));
    cli_stopper_t st = {.cmd = "corral run", .job_id = job_id};
    corral_set_tick(c, cli_stop_on_interrupt, &st);
    err = corral_job_logs_follow(c, job_id, -1, cli_on_follow, &o);
    corral_set_tick(c, NULL, NULL);
    if (err == CR_ENOSYS) { /* a head that cannot follow: the output at the end */
        err = wait_then_print(c, job_id, &o, &job);
    } else {
        if (err < 0) {
            fprintf(stderr, "corral run: output of job %s: %s\n", job_id, corral_errmsg(c));
        }
        for (size_t i = 0; i < o.n; i++) { /* partial last lines */
            print_prefixed(stdout, &o.out[i], (unsigned)i, o.prefix);
            fflush(stdout);
            print_prefixed(stderr, &o.err[i], (unsigned)i, o.prefix);
        }
        err = err < 0 ? err : corral_wait(c, job_id, -1, &job);
        if (err < 0)
            fprintf(stderr, "corral run: job %s: %s\n", job_id, corral_errmsg(c));
    }
    for (size_t i = 0; i < o.n; i++) {
        cr_buf_free(&o.out[i]);
        cr_buf_free(&o.err[i]);
    }
    free(o.out);
    free(o.err);
    if (err < 0)
        goto out;
    if (job.state != CORRAL_JOB_SUCCEEDED)
        fprintf(stderr, "corral run: job %s %s: %s\n", job_id, corral_job_state_name(job.state),
                job.reason);
    rc = job.state == CORRAL_JOB_SUCCEEDED ? 0 : job.exit_code ? job.exit_code & 0xff : CLI_FAIL;
    corral_job_free(&job);
out:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    free(job_id);
    corral_disconnect(c);
    CR_VEC_FREE(&env);
    return rc;
}
