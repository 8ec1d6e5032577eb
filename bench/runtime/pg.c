/* Placement groups created and removed per second through libcorral
 * (issue 4, "Performance"), against the head at CORRAL_HOME/session_latest,
 * one client on one connection, for the given seconds:
 *   bench_runtime_pg SECONDS [RESOURCES] [BATCH]
 * BATCH 1 (the default): a group of one bundle created (waiting until
 * CREATED) and removed, one after the other, each a round trip.
 * BATCH N > 1: as Ray's own benchmark of placement groups does
 * (placement_group() returns at once; the groups are waited on together,
 * then removed): N groups created with corral_pg_create_many (every one
 * waited on until CREATED), then removed with corral_pg_remove_many; a
 * cycle is one group created and removed. RESOURCES must then fit N
 * groups at once (e.g. CPU=0.01).
 * Prints "pg_cycles N" and "pg_seconds S" on stdout; then, for the same
 * time, the round trips of a request that changes nothing (PgList of no
 * groups): "rt_calls N", "rt_seconds S", the transport's floor.
 *   bench_runtime_pg queue N RESOURCES
 * leaves N groups of one bundle of RESOURCES queued (not waited on, one
 * write), each of which must be PENDING: a deep queue of groups for
 * bench/runtime/queue.sh; prints "queued N". */
#include <corral/corral.h>
#include <stdbool.h>
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

/* one group at a time; false on an error (said on stderr) */
static bool cycle_one(corral_t *c, const corral_pg_spec_t *spec)
{
    corral_pg_t pg;
    if (corral_pg_create(c, spec, &pg) < 0) {
        fprintf(stderr, "bench_runtime_pg: create: %s\n", corral_errmsg(c));
        return false;
    }
    if (strcmp(pg.state, "CREATED") != 0) {
        fprintf(stderr, "bench_runtime_pg: group %s: %s\n", pg.state, pg.reason);
        corral_pg_free(&pg);
        return false;
    }
    if (corral_pg_remove(c, pg.pg_id) < 0) {
        fprintf(stderr, "bench_runtime_pg: remove: %s\n", corral_errmsg(c));
        corral_pg_free(&pg);
        return false;
    }
    corral_pg_free(&pg);
    return true;
}

/* n groups at once, then their removal at once */
static bool cycle_many(corral_t *c, const corral_pg_spec_t *specs, size_t n, corral_pg_t *pgs,
                       const char **ids)
{
    bool ok = true;
    if (corral_pg_create_many(c, specs, n, pgs, NULL) < 0) {
        fprintf(stderr, "bench_runtime_pg: create: %s\n", corral_errmsg(c));
        ok = false;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (pgs[i].pg_id)
            ids[k++] = pgs[i].pg_id;
        if (ok && pgs[i].state && strcmp(pgs[i].state, "CREATED") != 0) {
            fprintf(stderr, "bench_runtime_pg: group %s: %s\n", pgs[i].state, pgs[i].reason);
            ok = false;
        }
    }
    if (corral_pg_remove_many(c, ids, k, NULL) < 0) {
        fprintf(stderr, "bench_runtime_pg: remove: %s\n", corral_errmsg(c));
        ok = false;
    }
    for (size_t i = 0; i < n; i++)
        corral_pg_free(&pgs[i]);
    return ok;
}

/* A connection to the head of CORRAL_HOME, NULL (said why) when there is
 * none. */
static corral_t *connect_head(void)
{
    corral_t *c;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "bench_runtime_pg: %s\n", why ? why : "cannot connect");
        free(why);
        return NULL;
    }
    return c;
}

/* n groups of res left queued: every one must be PENDING */
static int queue_many(long n, const char *res)
{
    if (n < 1 || n > 1000000) {
        fprintf(stderr, "bench_runtime_pg: queue N: N from 1 to 1000000\n");
        return 2;
    }
    corral_t *c = connect_head();
    if (!c)
        return 1;
    corral_bundle_spec_t b = {.resources = res};
    corral_pg_spec_t *specs = calloc((size_t)n, sizeof(*specs));
    corral_pg_t *pgs = calloc((size_t)n, sizeof(*pgs));
    for (long i = 0; i < n; i++)
        specs[i] = (corral_pg_spec_t){.bundles = &b, .nbundles = 1};
    int rc = corral_pg_create_many(c, specs, (size_t)n, pgs, NULL) < 0;
    if (rc)
        fprintf(stderr, "bench_runtime_pg: create: %s\n", corral_errmsg(c));
    long pending = 0;
    for (long i = 0; i < n; i++) {
        pending += pgs[i].state && !strcmp(pgs[i].state, "PENDING");
        corral_pg_free(&pgs[i]);
    }
    if (!rc && pending != n) {
        fprintf(stderr, "bench_runtime_pg: %ld of %ld groups are PENDING\n", pending, n);
        rc = 1;
    }
    free(specs);
    free(pgs);
    corral_disconnect(c);
    if (!rc)
        printf("queued %ld\n", n);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "queue"))
        return queue_many(argc > 2 ? atol(argv[2]) : 0, argc > 3 ? argv[3] : "GPU=1");
    double secs = argc > 1 ? atof(argv[1]) : 3;
    const char *res = argc > 2 ? argv[2] : "GPU=1";
    long batch = argc > 3 ? atol(argv[3]) : 1;
    if (batch < 1 || batch > 100000) {
        fprintf(stderr, "usage: bench_runtime_pg SECONDS [RESOURCES] [BATCH 1..100000]\n");
        return 2;
    }
    corral_t *c = connect_head();
    if (!c)
        return 1;
    corral_bundle_spec_t b = {.resources = res};
    char name[32];
    snprintf(name, sizeof(name), "bench-%d", (int)getpid());
    corral_pg_spec_t spec = {
        .name = batch == 1 ? name : NULL, .bundles = &b, .nbundles = 1, .wait = 1};
    corral_pg_spec_t *specs = calloc((size_t)batch, sizeof(*specs));
    corral_pg_t *pgs = calloc((size_t)batch, sizeof(*pgs));
    const char **ids = calloc((size_t)batch, sizeof(*ids));
    for (long i = 0; i < batch; i++)
        specs[i] = spec; /* unnamed: the head names each */
    long n = 0;
    double t0 = now_s(), t;
    do {
        if (batch == 1 ? !cycle_one(c, &spec) : !cycle_many(c, specs, (size_t)batch, pgs, ids))
            return 1;
        n += batch;
        t = now_s();
    } while (t - t0 < secs);
    free(specs);
    free(pgs);
    free(ids);
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
