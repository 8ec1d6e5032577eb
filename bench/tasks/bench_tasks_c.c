/* bench/tasks (C): actor calls from C (include/corral/tasks.h) beside the
 * floor they are held to, measured in the same run (issue 15,
 * "Performance"): from C, actor calls sync within 2x the Unix-socket
 * ping-pong round trip, async at least 200,000 calls/s.
 *
 *   bench_tasks_c SYNC ASYNC ROUNDS
 *     1. the floor: a raw Unix-socket ping-pong between this process and
 *        a forked child, 64 bytes each way, SYNC round trips after 200
 *        warm-ups (both unpinned, as the owner and its actor are);
 *     2. an actor of class Echo leased from the head of CORRAL_HOME (this
 *        program is its own worker): SYNC calls, each
 *        corral_actor_call + corral_get of 64 bytes, after 200 warm-ups;
 *     3. async: ASYNC calls of 8 bytes submitted, then every ref got;
 *        ROUNDS times, the median reported.
 *   Prints "pingpong P50_US MEAN_US", "actor_sync P50_US MEAN_US",
 *   "actor_async CALLS_PER_S" (bench/tasks/c.sh turns them into figures)
 *   and "actor_async_cpu OWNER_US ACTOR_US": CPU time per async call.
 * Timing: CLOCK_MONOTONIC around each round trip (nearest-rank median);
 * around the whole batch for async. */
#include <corral/tasks.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WARM 200
#define MSG 64

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
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
    printf("%s %.2f %.2f\n", what, v[(n - 1) / 2], sum / (double)n);
    fflush(stdout);
}

static int full(int fd, char *b, size_t n, int wr)
{
    size_t k = 0;
    while (k < n) {
        ssize_t r = wr ? write(fd, b + k, n - k) : read(fd, b + k, n - k);
        if (r <= 0)
            return -1;
        k += (size_t)r;
    }
    return 0;
}

static int pingpong(long n, double *v)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return perror("socketpair"), 1;
    pid_t pid = fork();
    char buf[MSG] = {0};
    if (pid == 0) {
        close(sv[0]);
        while (full(sv[1], buf, MSG, 0) == 0 && full(sv[1], buf, MSG, 1) == 0)
            ;
        _exit(0);
    }
    close(sv[1]);
    for (long i = 0; i < WARM + n; i++) {
        double t0 = now_us();
        if (full(sv[0], buf, MSG, 1) || full(sv[0], buf, MSG, 0))
            return fprintf(stderr, "ping-pong broke\n"), 1;
        if (i >= WARM)
            v[i - WARM] = now_us() - t0;
    }
    close(sv[0]);
    waitpid(pid, NULL, 0);
    return 0;
}

static int echo_new(const void *args, size_t len, void **state, corral_result_t *res)
{
    *state = NULL;
    return 0;
}

static int echo_ping(void *state, const void *args, size_t len, corral_result_t *res)
{
    return corral_result_set(res, args, len);
}

static double cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* the actor's own CPU time so far, microseconds (8 bytes) */
static int echo_cpu(void *state, const void *args, size_t len, corral_result_t *res)
{
    double us = cpu_us();
    return corral_result_set(res, &us, sizeof(us));
}

static const corral_method_def_t echo_methods[] = {
    {"ping", echo_ping}, {"cpu", echo_cpu}, {NULL, NULL}};

static double actor_cpu(corral_tasks_t *t, corral_actor_t *a)
{
    corral_ref_t *r;
    const void *d;
    double us = 0;
    if (corral_actor_call(t, a, "cpu", NULL, 0, &r) == 0 && corral_get(t, r, 60000, &d, NULL) == 0)
        memcpy(&us, d, sizeof(us));
    corral_ref_free(r);
    return us;
}

int main(int argc, char **argv)
{
    corral_worker_register_class("Echo", echo_new, echo_methods, NULL);
    if (corral_worker_is_leased())
        return corral_worker_main();
    long nsync = argc > 1 ? atol(argv[1]) : 20000;
    long nasync = argc > 2 ? atol(argv[2]) : 200000;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (nsync < 1 || nasync < 1 || rounds < 1)
        return fprintf(stderr, "usage: bench_tasks_c SYNC ASYNC ROUNDS\n"), 2;

    corral_tasks_t *t;
    char *why = NULL;
    if (corral_tasks_init(NULL, &t, &why))
        return fprintf(stderr, "bench_tasks_c: %s\n", why), 1;
    corral_actor_t *a;
    if (corral_actor_create(t, "Echo", NULL, 0, NULL, &a))
        return fprintf(stderr, "bench_tasks_c: %s\n", corral_tasks_errmsg()), 1;
    char msg[MSG];
    memset(msg, 'x', sizeof(msg));
    /* the ping-pong and the actor take turns: a load that comes and goes
     * on the machine falls on both */
    long half_n = nsync / 2 > 0 ? nsync / 2 : 1;
    double *pp = calloc((size_t)half_n * 2, sizeof(double));
    double *v = calloc((size_t)half_n * 2, sizeof(double));
    for (int half = 0; half < 2; half++) {
        if (pingpong(half_n, pp + half * half_n))
            return 1;
        for (long i = 0; i < WARM + half_n; i++) {
            corral_ref_t *r;
            double t0 = now_us();
            if (corral_actor_call(t, a, "ping", msg, sizeof(msg), &r) ||
                corral_get(t, r, 60000, NULL, NULL))
                return fprintf(stderr, "bench_tasks_c: %s\n", corral_tasks_errmsg()), 1;
            double dt = now_us() - t0;
            corral_ref_free(r);
            if (i >= WARM)
                v[half * half_n + i - WARM] = dt;
        }
    }
    report("pingpong", pp, half_n * 2);
    report("actor_sync", v, half_n * 2);
    free(pp);
    free(v);

    corral_ref_t **refs = calloc((size_t)nasync, sizeof(*refs));
    double *rates = calloc((size_t)rounds, sizeof(double));
    int64_t k = 7;
    double own0 = cpu_us(), act0 = actor_cpu(t, a);
    for (int r = 0; r < rounds; r++) {
        double t0 = now_us();
        for (long i = 0; i < nasync; i++)
            if (corral_actor_call(t, a, "ping", &k, sizeof(k), &refs[i]))
                return fprintf(stderr, "bench_tasks_c: %s\n", corral_tasks_errmsg()), 1;
        for (long i = 0; i < nasync; i++) {
            if (corral_get(t, refs[i], 60000, NULL, NULL))
                return fprintf(stderr, "bench_tasks_c: %s\n", corral_ref_error(refs[i])), 1;
            corral_ref_free(refs[i]);
        }
        rates[r] = (double)nasync / ((now_us() - t0) * 1e-6);
    }
    qsort(rates, (size_t)rounds, sizeof(double), cmp);
    printf("actor_async %.0f\n", rates[(rounds - 1) / 2]);
    /* CPU time per async call, which the machine's load moves much less
     * than the wall clock: the owner (both its threads) and the actor */
    double calls = (double)nasync * rounds;
    double own = cpu_us() - own0, act = actor_cpu(t, a) - act0;
    printf("actor_async_cpu %.3f %.3f\n", own / calls, act / calls);
    corral_actor_free(a);
    corral_tasks_shutdown(t);
    free(refs);
    free(rates);
    return 0;
}
