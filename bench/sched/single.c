/* bench/sched: single-bundle decisions alone, for a profiler. Loads a
 * cluster file, fills 60% of its GPUs with GPU=1,CPU=16,memory=128Gi
 * (hybrid policy, top_k 1, as `corral sim --bench` does), then makes N
 * decisions (argv[2], default 100000), each followed by the release of a
 * random live placement. No clock is read inside the loop, so that
 * callgrind counts a decision's instructions and cache misses and
 * nothing else (see timed_decision); with --instr-atstart=no the fill
 * runs natively:
 *   valgrind --tool=callgrind --cache-sim=yes --instr-atstart=no \
 *     --toggle-collect=timed_decision bench_sched_single CLUSTER.yaml 20000
 * (bench/sched/run.sh with SCHED_CALLGRIND=1). Prints the decisions that
 * placed and the state's digest (equal inputs and code that decides the
 * same, equal digest). WARM decisions and releases (argv[3], default 0)
 * run first, simulated but not counted, so that cache misses are counted
 * in the steady state rather than from a cold cache.
 * Usage: bench_sched_single CLUSTER.yaml [N [WARM]] */
#include "sched/sched.h"
#include <stdio.h>
#include <stdlib.h>
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_START_INSTRUMENTATION
#endif

/* The timed calls, not inlined, so that callgrind can collect them alone
 * (--toggle-collect=timed_decision, --toggle-collect=timed_release): the
 * fill before them goes through sched_schedule too. */
__attribute__((noinline)) static void timed_decision(sched_cluster_t *c, const sched_config_t *cfg,
                                                     const sched_request_t *r, sched_rng_t *rng,
                                                     sched_result_t *out)
{
    sched_schedule(c, cfg, r, rng, out);
}

__attribute__((noinline)) static void timed_release(sched_cluster_t *c, uint64_t id)
{
    sched_release(c, id);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_sched_single CLUSTER.yaml [N]\n");
        return 2;
    }
    long n = argc > 2 ? atol(argv[2]) : 100000;
    long warm = argc > 3 ? atol(argv[3]) : 0;
    char *err = NULL;
    sched_cluster_t *c = NULL;
    if (sched_cluster_load(argv[1], NULL, 0, &c, &err)) {
        fprintf(stderr, "bench_sched_single: %s\n", err);
        free(err);
        return 1;
    }
    sched_err_t e;
    sched_bundle_t b = {0};
    sched_parse_resources(&c->res, "GPU=1,CPU=16,memory=128Gi", &b.req, &e);
    sched_request_t r1 = {.nbundles = 1, .bundles = &b, .domain_key = -1, .affinity_node = -1};
    sched_config_t cfg = {.top_k = 1};
    sched_rng_t rng = {1};
    size_t nlive;
    uint64_t *live = sched_fill_gpus(c, &cfg, &r1, &rng, 60, &nlive);
    /* under `valgrind --tool=callgrind --instr-atstart=no` the fill above
     * runs at native speed */
    CALLGRIND_START_INSTRUMENTATION;
    long placed = 0;
    /* warm-up: decisions and releases the simulated caches see but
     * --toggle-collect does not count, so that the counts are those of
     * the steady state, not of the first pass over a cold cache */
    for (long i = 0; i < warm; i++) {
        sched_result_t out;
        sched_schedule(c, &cfg, &r1, &rng, &out);
        placed += out.status == SCHED_OK;
        size_t k = (size_t)(sched_rng_next(&rng) % (nlive ? nlive : 1));
        if (nlive) {
            sched_release(c, live[k]);
            live[k] = out.status == SCHED_OK ? out.placement : live[--nlive];
        }
    }
    for (long i = 0; i < n; i++) {
        sched_result_t out;
        timed_decision(c, &cfg, &r1, &rng, &out);
        placed += out.status == SCHED_OK;
        size_t k = (size_t)(sched_rng_next(&rng) % (nlive ? nlive : 1));
        if (nlive) {
            timed_release(c, live[k]);
            live[k] = out.status == SCHED_OK ? out.placement : live[--nlive];
        }
    }
    printf("decisions %ld placed %ld nodes %zu digest %016llx\n", warm + n, placed, c->nnodes,
           (unsigned long long)sched_cluster_digest(c));
    free(live);
    sched_cluster_free(c);
    return 0;
}
