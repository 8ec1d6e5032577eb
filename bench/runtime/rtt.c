/* bench/runtime: a read-only request's round trip beside its floor (issue
 * 18, "Requests near the socket's round trip").
 *
 *   bench_runtime_rtt floor N CPU_A CPU_B
 *       the floor: a raw Unix-socket ping-pong between this process
 *       (pinned to CPU_A) and a forked child (pinned to CPU_B; -1 leaves a
 *       side unpinned), a 64-byte message each way, N round trips after
 *       100 warm-ups; prints "floor N P50_US MEAN_US"
 *   bench_runtime_rtt head N CPU [job|status]
 *       through libcorral on one connection to the head of CORRAL_HOME
 *       (this process pinned to CPU, the caller pins the head): N
 *       read-only requests after 100 warm-ups, `job` a JobStatus of a job
 *       that exists (the newest in the job list), `status` the cluster
 *       status; prints "head N P50_US MEAN_US"
 *
 * 64 bytes is about the size of a JobStatus request; the floor moves no
 * less than the request does. Timing: CLOCK_MONOTONIC around each round
 * trip, nearest-rank median. */
#include <corral/corral.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WARM 100

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static void pin(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof(s), &s) != 0)
        perror("bench_runtime_rtt: sched_setaffinity");
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, long n)
{
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += v[i];
    qsort(v, (size_t)n, sizeof(*v), cmp);
    printf("%s %ld %.2f %.2f\n", what, n, v[(n - 1) / 2], sum / (double)n);
}

static int full_io(int fd, char *b, size_t len, int wr)
{
    size_t at = 0;
    while (at < len) {
        ssize_t k = wr ? write(fd, b + at, len - at) : read(fd, b + at, len - at);
        if (k <= 0)
            return -1;
        at += (size_t)k;
    }
    return 0;
}

static int floor_rtt(long n, int cpu_a, int cpu_b)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("bench_runtime_rtt: socketpair");
        return 1;
    }
    char msg[64] = {1};
    pid_t pid = fork();
    if (pid == 0) {
        pin(cpu_b);
        close(sv[0]);
        while (full_io(sv[1], msg, sizeof(msg), 0) == 0 && full_io(sv[1], msg, sizeof(msg), 1) == 0)
            ;
        _exit(0);
    }
    pin(cpu_a);
    close(sv[1]);
    double *v = malloc((size_t)n * sizeof(*v));
    for (long i = -WARM; i < n; i++) {
        double t0 = now_us();
        if (full_io(sv[0], msg, sizeof(msg), 1) || full_io(sv[0], msg, sizeof(msg), 0)) {
            fprintf(stderr, "bench_runtime_rtt: the ping-pong child went away\n");
            return 1;
        }
        if (i >= 0)
            v[i] = now_us() - t0;
    }
    close(sv[0]);
    waitpid(pid, NULL, 0);
    report("floor", v, n);
    free(v);
    return 0;
}

static int head_rtt(long n, int cpu, const char *kind)
{
    pin(cpu);
    corral_t *c;
    char *err = NULL;
    if (corral_connect(NULL, NULL, &c, &err) != 0) {
        fprintf(stderr, "bench_runtime_rtt: %s\n", err ? err : "cannot connect");
        return 1;
    }
    bool status = strcmp(kind, "status") == 0;
    char *job = NULL;
    if (!status) {
        corral_job_t *v;
        size_t k;
        if (corral_job_list(c, &v, &k) != 0 || k == 0) {
            fprintf(stderr,
                    "bench_runtime_rtt: `job` needs a job on the head: corral run -- true\n");
            return 1;
        }
        job = strdup(v[k - 1].job_id);
        corral_job_list_free(v, k);
    }
    double *v = malloc((size_t)n * sizeof(*v));
    for (long i = -WARM; i < n; i++) {
        double t0 = now_us();
        int e;
        if (status) {
            corral_status_t s;
            e = corral_status(c, &s);
            if (!e)
                corral_status_free(&s);
        } else {
            corral_job_t j;
            e = corral_job_status(c, job, &j);
            if (!e)
                corral_job_free(&j);
        }
        if (e) {
            fprintf(stderr, "bench_runtime_rtt: request failed: %d\n", e);
            return 1;
        }
        if (i >= 0)
            v[i] = now_us() - t0;
    }
    report("head", v, n);
    free(v);
    free(job);
    corral_disconnect(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "floor") == 0)
        return floor_rtt(atol(argv[2]), atoi(argv[3]), atoi(argv[4]));
    if (argc >= 4 && strcmp(argv[1], "head") == 0)
        return head_rtt(atol(argv[2]), atoi(argv[3]), argc > 4 ? argv[4] : "job");
    fprintf(stderr, "usage: bench_runtime_rtt floor N CPU_A CPU_B | head N CPU [job|status]\n");
    return 2;
}
