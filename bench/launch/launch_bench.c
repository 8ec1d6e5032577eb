/* bench/launch driver: time from "start N workers" to all N running, for
 * corral's launcher (agent/launch.c on a libuv loop, a simulated 8-GPU
 * node, isolation variables, CPU binding, log files) against plain
 * posix_spawn of the same N processes (the floor) and posix_spawn with
 * POSIX_SPAWN_SETSID (the same process model as corral's: a session per
 * worker), the three taking turns within each round. Running means the
 * worker's main() wrote its byte to a FIFO the driver reads.
 *
 *   bench_launch READY NODE.json [RUNS=50] [WORKERS=8] [BIND=closest|none]
 *
 * Prints `figure NAME VALUE UNIT` and `ratio NAME VALUE` lines. */
#include "agent/launch.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MAX_WORKERS 64

static double now_ms(void)
{
    return (double)uv_hrtime() / 1e6;
}

/* Blocks until n bytes came through the FIFO (one per running worker). */
static int wait_ready(int fd, int n)
{
    char buf[MAX_WORKERS];
    while (n > 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, 5000);
        if (pr < 0 && errno == EINTR)
            continue; /* SIGCHLD: libuv has a handler for it */
        if (pr <= 0) {
            fprintf(stderr, "bench_launch: %d workers did not say they run within 5 s\n", n);
            return -1;
        }
        ssize_t r = read(fd, buf, (size_t)n);
        if (r < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (r > 0)
            n -= (int)r;
    }
    return 0;
}

/* The floor: posix_spawn of n workers; with setsid, each in a session of
 * its own as corral's are (on kernels with sched_autogroup_enabled a new
 * session also makes a new scheduler group, which has a cost). */
static int run_floor(const char *ready, const char *fifo, int fd, int n, bool setsid, double *ms)
{
    pid_t pid[MAX_WORKERS];
    char *argv[] = {(char *)ready, (char *)fifo, NULL};
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    if (setsid)
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    double t0 = now_ms();
    for (int i = 0; i < n; i++)
        if (posix_spawn(&pid[i], ready, NULL, &attr, argv, environ) != 0) {
            perror("posix_spawn");
            return -1;
        }
    int rc = wait_ready(fd, n);
    *ms = now_ms() - t0;
    posix_spawnattr_destroy(&attr);
    for (int i = 0; i < n; i++) {
        int st = 0;
        waitpid(pid[i], &st, 0);
        if (st != 0) {
            fprintf(stderr, "bench_launch: posix_spawn worker %d ended with status 0x%x\n", i, st);
            rc = -1;
        }
    }
    if (rc)
        fprintf(stderr, "bench_launch: the posix_spawn round failed\n");
    return rc;
}

static cr_bind_mode_t bind_mode = CR_BIND_CLOSEST;

typedef struct gang {
    int exited, failed;
} gang_t;

static void on_exit_cb(cr_worker_t *w, const cr_worker_exit_t *e, void *arg)
{
    gang_t *g = arg;
    g->exited++;
    if (e->code != 0 || e->signal != 0) {
        fprintf(stderr, "bench_launch: corral worker pid %d ended with code %d signal %d\n",
                cr_worker_pid(w), (int)e->code, e->signal);
        g->failed++;
    }
    cr_worker_release(w);
}

static int run_corral(uv_loop_t *loop, const cr_node_t *node, const char *ready, const char *fifo,
                      const char *logdir, int fd, int n, double *ms)
{
    static const int devs[MAX_WORKERS] = {0, 1, 2, 3, 4, 5, 6, 7};
    const char *argv[] = {ready, fifo, NULL};
    char wid[MAX_WORKERS][16];
    gang_t g = {0};
    double t0 = now_ms();
    for (int i = 0; i < n; i++) {
        snprintf(wid[i], sizeof(wid[i]), "w%d", i);
        cr_worker_spec_t s = {
            .argv = argv,
            .inherit_env = true,
            .node = node,
            .devs = &devs[i % 8],
            .ndevs = 1,
            .job_id = "bench",
            .worker_id = wid[i],
            .worker_index = i,
            .log_dir = logdir,
            .bind = bind_mode,
        };
        cr_worker_t *w;
        char *why = NULL;
        if (cr_worker_start(loop, &s, on_exit_cb, &g, &w, &why) != 0) {
            fprintf(stderr, "bench_launch: worker %d: %s\n", i, why);
            free(why);
            return -1;
        }
    }
    int rc = wait_ready(fd, n);
    *ms = now_ms() - t0;
    while (g.exited < n)
        uv_run(loop, UV_RUN_ONCE);
    if (rc)
        fprintf(stderr, "bench_launch: the corral round failed\n");
    return rc ? rc : g.failed ? -1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* nearest-rank percentile of a sorted array */
static double pct(const double *v, int n, double p)
{
    int k = (int)ceil(p / 100.0 * n);
    return v[k < 1 ? 0 : k - 1];
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_launch READY NODE.json [RUNS] [WORKERS] [closest|none]\n");
        return 2;
    }
    const char *ready = argv[1];
    int runs = argc > 3 ? atoi(argv[3]) : 50, n = argc > 4 ? atoi(argv[4]) : 8;
    if (runs < 1 || n < 1 || n > MAX_WORKERS ||
        (argc > 5 && cr_bind_mode_parse(argv[5], &bind_mode)))
        return 2;
    cr_log_set_level(CR_LOG_ERROR);
    json_error_t jerr;
    json_t *j = json_load_file(argv[2], 0, &jerr);
    if (!j) {
        fprintf(stderr, "bench_launch: %s: %s\n", argv[2], jerr.text);
        return 1;
    }
    cr_node_t *node = hw_node_new();
    hw_json_error_t herr;
    if (hw_node_from_json(j, node, &herr) != 0) {
        fprintf(stderr, "bench_launch: %s: %s: %s\n", argv[2], herr.path, herr.msg);
        return 1;
    }
    json_decref(j);
    /* Spread the simulated GPUs over the CPUs this machine has, so that
     * every worker really is bound (the description's 112 cores are not
     * here); the node's own cpulists would leave half the workers unbound. */
    cpu_set_t own;
    CPU_ZERO(&own);
    sched_getaffinity(0, sizeof(own), &own);
    int cpus[CPU_SETSIZE], ncpus = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &own))
            cpus[ncpus++] = c;
    for (size_t i = 0; i < node->devices.n && ncpus > 1; i++)
        snprintf(node->devices.v[i].cpus, sizeof(node->devices.v[i].cpus), "%d",
                 cpus[i % (size_t)ncpus]);

    char dir[] = "/tmp/corral-bench-launch-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char fifo[64], logdir[64];
    snprintf(fifo, sizeof(fifo), "%s/ready", dir);
    snprintf(logdir, sizeof(logdir), "%s/logs", dir);
    if (mkfifo(fifo, 0600) != 0 || mkdir(logdir, 0700) != 0) {
        perror("mkfifo");
        return 1;
    }
    /* a writer of our own keeps the FIFO from reading EOF between workers */
    int fd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    int keep = open(fifo, O_WRONLY | O_CLOEXEC);
    uv_loop_t loop;
    uv_loop_init(&loop);
    /* arms: 0 corral, 1 posix_spawn, 2 posix_spawn + setsid; their order
     * rotates from one round to the next */
    enum { ARMS = 3 };
    double *ms[ARMS], *gap[ARMS];
    for (int a = 0; a < ARMS; a++) {
        ms[a] = calloc((size_t)runs, sizeof(double));
        gap[a] = calloc((size_t)runs, sizeof(double));
    }
    int rc = 0;
    for (int r = -3; r < runs && !rc; r++) { /* 3 warm-up rounds */
        double t[ARMS] = {0};
        for (int k = 0; k < ARMS && !rc; k++) {
            int a = (k + r + 3) % ARMS;
            rc = a == 0 ? run_corral(&loop, node, ready, fifo, logdir, fd, n, &t[0])
                        : run_floor(ready, fifo, fd, n, a == 2, &t[a]);
        }
        for (int a = 0; r >= 0 && a < ARMS; a++) {
            ms[a][r] = t[a];
            gap[a][r] = t[0] - t[a];
        }
    }
    if (!rc) {
        for (int a = 0; a < ARMS; a++) {
            qsort(ms[a], (size_t)runs, sizeof(double), cmp_double);
            qsort(gap[a], (size_t)runs, sizeof(double), cmp_double);
        }
        static const char *arm[ARMS] = {"corral", "posix_spawn", "posix_spawn_setsid"};
        char name[64];
        snprintf(name, sizeof(name), "launch_gang%d%s", n,
                 bind_mode == CR_BIND_NONE ? "_unbound" : "");
        for (int a = 0; a < ARMS; a++) {
            printf("figure %s_%s_p50 %.3f ms\n", name, arm[a], pct(ms[a], runs, 50));
            printf("figure %s_%s_p99 %.3f ms\n", name, arm[a], pct(ms[a], runs, 99));
        }
        for (int a = 1; a < ARMS; a++) {
            printf("figure %s_over_%s_p50 %.3f ms\n", name, arm[a], pct(gap[a], runs, 50));
            printf("figure %s_over_%s_p99 %.3f ms\n", name, arm[a], pct(gap[a], runs, 99));
            printf("ratio %s_corral_vs_%s_p50 %.2f\n", name, arm[a],
                   pct(ms[0], runs, 50) / pct(ms[a], runs, 50));
            printf("ratio %s_corral_vs_%s_p99 %.2f\n", name, arm[a],
                   pct(ms[0], runs, 99) / pct(ms[a], runs, 99));
        }
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    close(fd);
    close(keep);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_launch: could not remove %s\n", dir);
    for (int a = 0; a < ARMS; a++) {
        free(ms[a]);
        free(gap[a]);
    }
    hw_node_free(node);
    return rc ? 1 : 0;
}
