/* Fuzz the cluster-file loader (YAML/JSON, templates, counts, slices):
 * never crash; a loaded cluster passes its own invariant check. */
#include "sched/sched_int.h"
#include <assert.h>

/* libfyaml 0.7.12 leaks a buffer on some malformed documents (inside the
 * library, after our last call): not ours to fix, so not ours to report. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libfyaml.so\n";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sched_cluster_t *c = NULL;
    char *err = NULL;
    if (sched__cluster_load("fuzz.yaml", (const char *)data, size, 2000, &c, &err) == 0) {
        char msg[200];
        assert(c && c->nnodes > 0 && c->nnodes <= 2000);
        assert(sched_cluster_check(c, msg, sizeof(msg)) == 0);
    } else {
        assert(!c && err && *err);
    }
    free(err);
    sched_cluster_free(c);
    return 0;
}
