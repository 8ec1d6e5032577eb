/* The real client of bench/abuse/run.sh: one libcorral connection to the
 * head at CORRAL_HOME/session_latest (its Unix socket), made before the
 * load starts, then COUNT cluster-status requests (StatusRequest: nodes,
 * resources, job counts), one at a time, PAUSE_US apart, each timed on
 * CLOCK_MONOTONIC around the whole call:
 *   bench_abuse_client COUNT PAUSE_US [GO_FILE [STOP_FILE]]
 * With GO_FILE, the connection is made first and the requests start once
 * that file exists (so the load can start between the two); with
 * STOP_FILE, they go on past COUNT until that file exists (the load has
 * ended), at most 100 times COUNT in all. Prints each
 * latency in microseconds on a line of stdout; a failed request is said
 * on stderr and exits 1. */
#include <corral/corral.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_abuse_client COUNT PAUSE_US [GO_FILE [STOP_FILE]]\n");
        return 2;
    }
    long count = atol(argv[1]), pause_us = atol(argv[2]);
    corral_t *c;
    char *msg = NULL;
    if (corral_connect(NULL, NULL, &c, &msg) < 0) {
        fprintf(stderr, "bench_abuse_client: %s\n", msg ? msg : "cannot connect");
        free(msg);
        return 1;
    }
    if (argc > 3)
        for (int i = 0; i < 30000 && access(argv[3], F_OK) != 0; i++)
            usleep(1000);
    const char *stop = argc > 4 ? argv[4] : NULL;
    for (long i = 0; i < 100 * count && (i < count || (stop && access(stop, F_OK) != 0)); i++) {
        corral_status_t s;
        double t0 = now_us();
        int err = corral_status(c, &s);
        double t1 = now_us();
        if (err < 0) {
            fprintf(stderr, "bench_abuse_client: request %ld: %s\n", i, corral_errmsg(c));
            corral_disconnect(c);
            return 1;
        }
        corral_status_free(&s);
        printf("%.1f\n", t1 - t0);
        if (pause_us > 0)
            usleep((useconds_t)pause_us);
    }
    corral_disconnect(c);
    return 0;
}
