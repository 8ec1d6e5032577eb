/* Placement groups created and removed per second through libcorral
 * (issue 4, "Performance"): one client, one connection, a group of one
 * bundle created (waiting until CREATED) and removed, in a loop for the
 * given seconds, against the head at CORRAL_HOME/session_latest.
 *   bench_runtime_pg SECONDS [RESOURCES]
 * Prints "pg_cycles N" and "pg_seconds S" on stdout; then, for the same
 * time, the round trips of a request that changes nothing (PgList of no
 * groups): "rt_calls N", "rt_seconds S", the transport's floor. */
#include <corral/corral.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 3;
    const char *res = argc > 2 ? argv[2] : "GPU=1";
    corral_t *c;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "bench_runtime_pg: %s\n", why ? why : "cannot connect");
        return 1;
    }
    corral_bundle_spec_t b = {.resources = res};
    char name[32];
    snprintf(name, sizeof(name), "bench-%d", (int)getpid());
    corral_pg_spec_t spec = {.name = name, .bundles = &b, .nbundles = 1, .wait = 1};
    long n = 0;
    double t0 = now_s(), t;
    do {
        corral_pg_t pg;
        if (corral_pg_create(c, &spec, &pg) < 0) {
            fprintf(stderr, "bench_runtime_pg: create: %s\n", corral_errmsg(c));
            return 1;
        }
        if (strcmp(pg.state, "CREATED") != 0) {
            fprintf(stderr, "bench_runtime_pg: group %s: %s\n", pg.state, pg.reason);
            return 1;
        }
        if (corral_pg_remove(c, pg.pg_id) < 0) {
            fprintf(stderr, "bench_runtime_pg: remove: %s\n", corral_errmsg(c));
            return 1;
        }
        corral_pg_free(&pg);
        n++;
        t = now_s();
    } while (t - t0 < secs);
    printf("pg_cycles %ld\npg_seconds %.3f\n", n, t - t0);
    n = 0;
    t0 = now_s();
    do {
        corral_pg_t *v;
        size_t nv;
        if (corral_pg_list(c, &v, &nv) < 0) {
            fprintf(stderr, "bench_runtime_pg: list: %s\n", corral_errmsg(c));
            return 1;
        }
        corral_pg_list_free(v, nv);
        n++;
        t = now_s();
    } while (t - t0 < secs);
    printf("rt_calls %ld\nrt_seconds %.3f\n", n, t - t0);
    corral_disconnect(c);
    return 0;
}
