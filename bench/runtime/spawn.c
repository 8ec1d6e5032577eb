/* bench/runtime floor: plain posix_spawn, what corral's launch is compared
 * with.
 *
 *   bench_runtime_spawn gang N PROG [ARG...]   start N copies at once, wait
 *                                              for all; exit 0 if all did
 *   bench_runtime_spawn seq N PROG [ARG...]    spawn+wait N times in a row
 *                                              (after 5 warm-ups); prints
 *                                              "N SECONDS PER_SECOND P50_MS"
 *   bench_runtime_spawn seq N --setsid PROG... the same, each child in a
 *                                              session of its own, as
 *                                              corral's workers are
 *   bench_runtime_spawn seq N --quiet PROG...  each child's stdout to
 *                                              /dev/null (a command that
 *                                              prints, as corral status);
 *                                              before or after --setsid
 *
 * The sequential mode is also how bench/runtime/run.sh starts `corral run
 * -- true` and `srun -n1 true` (PROG), so that the floor and its peers pay
 * the same for being started (a bash loop's fork of bash costs more than
 * posix_spawn) and run in the same kind of session (with the kernel's
 * autogroup a session is a CPU-share unit; run.sh puts this program in a
 * session of its own with setsid -w).
 *
 * The gang's timing is taken by the caller (bash's $EPOCHREALTIME before
 * this program, each worker's own start stamp), the same way as for
 * `corral run`, so both sides pay for starting their launcher. */
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

#define MAX_PROCS 256

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static posix_spawnattr_t *attr;             /* --setsid */
static posix_spawn_file_actions_t *actions; /* --quiet */

static int spawn(char **argv, pid_t *pid)
{
    int rc = posix_spawnp(pid, argv[0], actions, attr, argv, environ);
    if (rc != 0)
        fprintf(stderr, "bench_runtime_spawn: %s: %s\n", argv[0], strerror(rc));
    return rc == 0 ? 0 : -1;
}

/* 0 when the child exited 0; says which one did not otherwise. */
static int reap(pid_t pid)
{
    int st = 0;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bench_runtime_spawn: child %d ended with status 0x%x\n", (int)pid, st);
        return -1;
    }
    return 0;
}

static int run_gang(int n, char **argv)
{
    pid_t pid[MAX_PROCS];
    int started = 0, rc = 0;
    for (; started < n; started++)
        if (spawn(argv, &pid[started]) != 0) {
            rc = -1;
            break;
        }
    for (int i = 0; i < started; i++)
        if (reap(pid[i]) != 0)
            rc = -1;
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run_seq(int n, char **argv)
{
    pid_t pid;
    posix_spawnattr_t at;
    posix_spawn_file_actions_t fa;
    for (; argv[0] && argv[0][0] == '-'; argv++) {
        if (strcmp(argv[0], "--setsid") == 0 && !attr) {
            posix_spawnattr_init(&at);
            posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
            attr = &at;
        } else if (strcmp(argv[0], "--quiet") == 0 && !actions) {
            posix_spawn_file_actions_init(&fa);
            posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
            actions = &fa;
        } else {
            fprintf(stderr, "bench_runtime_spawn: seq: unknown option %s (--setsid, --quiet)\n",
                    argv[0]);
            return -1;
        }
    }
    if (!argv[0])
        return -1;
    for (int i = 0; i < 5; i++)
        if (spawn(argv, &pid) != 0 || reap(pid) != 0)
            return -1;
    double *lat = calloc((size_t)n, sizeof(*lat));
    if (!lat)
        return -1;
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        double t = now_s();
        if (spawn(argv, &pid) != 0 || reap(pid) != 0) {
            free(lat);
            return -1;
        }
        lat[i] = now_s() - t;
    }
    double dt = now_s() - t0;
    qsort(lat, (size_t)n, sizeof(*lat), cmp_double);
    double p50 = n % 2 ? lat[n / 2] : (lat[n / 2 - 1] + lat[n / 2]) / 2;
    printf("%d %.6f %.1f %.3f\n", n, dt, (double)n / dt, p50 * 1e3);
    free(lat);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 3 ? atoi(argv[2]) : 0;
    bool gang = argc > 3 && strcmp(argv[1], "gang") == 0;
    if (n < 1 || (gang && n > MAX_PROCS) || (!gang && strcmp(argv[1], "seq") != 0)) {
        fprintf(stderr, "usage: bench_runtime_spawn gang|seq N PROG [ARG...] (gang: N <= %d)\n",
                MAX_PROCS);
        return 2;
    }
    int rc = gang ? run_gang(n, argv + 3) : run_seq(n, argv + 3);
    return rc == 0 ? 0 : 1;
}
