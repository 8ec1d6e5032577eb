/* bench/runtime floor: plain posix_spawn, what corral's launch is compared
 * with.
 *
 *   bench_runtime_spawn gang N PROG [ARG...]   start N copies at once, wait
 *                                              for all; exit 0 if all did
 *   bench_runtime_spawn seq N PROG [ARG...]    spawn+wait N times in a row
 *                                              (after 5 warm-ups); prints
 *                                              "N SECONDS PER_SECOND"
 *
 * The gang's timing is taken by the caller (bash's $EPOCHREALTIME before
 * this program, each worker's own start stamp), the same way as for
 * `corral run`, so both sides pay for starting their launcher. */
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

static int spawn(char **argv, pid_t *pid)
{
    int rc = posix_spawn(pid, argv[0], NULL, NULL, argv, environ);
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

static int run_seq(int n, char **argv)
{
    pid_t pid;
    for (int i = 0; i < 5; i++)
        if (spawn(argv, &pid) != 0 || reap(pid) != 0)
            return -1;
    double t0 = now_s();
    for (int i = 0; i < n; i++)
        if (spawn(argv, &pid) != 0 || reap(pid) != 0)
            return -1;
    double dt = now_s() - t0;
    printf("%d %.6f %.1f\n", n, dt, (double)n / dt);
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
