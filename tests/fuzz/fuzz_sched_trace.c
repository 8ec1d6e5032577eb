/* Fuzz the trace loader, then schedule each stream's request once on a
 * small mixed cluster: never crash, never break the state's invariants,
 * and every release gives back exactly what was taken. */
#include "sched/sched_int.h"
#include <assert.h>

/* libfyaml 0.7.12 leaks a buffer on some malformed documents (inside the
 * library, after our last call): not ours to fix, so not ours to report. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libfyaml.so\n";
}

static const char cluster[] =
    "nodes:\n"
    "  - {count: 3, cpus: 16, memory: 64Gi, resource: GPU, devices: 8, island: 4, numa: 2,\n"
    "     name: 'g{i}', labels: {rack: 'r{i%2}'}}\n"
    "  - {slices: 2, topology: 2x4, devices: 4, resource: TPU, cpus: 8, name: 't{s}-{w}',\n"
    "     accelerator_type: v6e-8, slice_name: 's{s}'}\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sched_cluster_t *c;
    char *err = NULL;
    if (!c && sched_cluster_load("c.yaml", cluster, sizeof(cluster) - 1, &c, &err))
        abort();
    sched_trace_t tr;
    if (sched_trace_load("fuzz.yaml", (const char *)data, size, c, &tr, &err) == 0) {
        uint64_t empty = sched_cluster_digest(c);
        sched_rng_t rng = {tr.seed};
        sched_config_t cfg = {.top_k = 2};
        uint64_t ids[64];
        size_t n = 0;
        for (size_t i = 0; i < tr.streams.n && n < 64; i++) {
            sched_result_t out;
            sched_schedule(c, &cfg, &tr.streams.v[i].req, &rng, &out);
            if (out.status == SCHED_OK)
                ids[n++] = out.placement;
            else
                assert(out.reason[0]);
            char msg[200];
            assert(sched_cluster_check(c, msg, sizeof(msg)) == 0);
        }
        while (n)
            assert(sched_release(c, ids[--n]) == 0);
        assert(sched_cluster_digest(c) == empty);
        sched_trace_fini(&tr);
    } else {
        assert(err && *err);
    }
    free(err);
    return 0;
}
