/* bench/sched: 10,000 nodes (the fleet-10k GPU node: 8 H100 in one NVLink
 * island, 2 NUMA nodes, a rack label per 32 nodes) join a cluster view in
 * use one at a time, with a single-bundle decision (GPU=1,CPU=16,
 * memory=128Gi, hybrid policy, kept placed) after every 100 joins. Timed:
 * sched_cluster_add and the decisions (which take the joined nodes in);
 * building the node descriptions is not. For comparison, the same nodes
 * added before sched_cluster_finalize. Prints `figure` lines; the join
 * figure is the median of 5 runs. */
#include "sched/sched.h"
#include "hw/hw.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NODES 10000
static int EVERY = 100; /* joins between decisions (argv[1]) */
#define RUNS 5

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static cr_node_t **nodes;

static void make_nodes(void)
{
    nodes = calloc(NODES, sizeof(*nodes));
    for (int i = 0; i < NODES; i++) {
        char name[32], labels[96], msg[160];
        snprintf(name, sizeof(name), "gpu-%d", i);
        snprintf(labels, sizeof(labels), "corral.io/zone=us-central1-a,corral.io/rack=rack-%d",
                 i / 32);
        sched_node_spec_t sp = {.name = name,
                                .cpus = 224,
                                .memory = 2ull << 40,
                                .resource = "GPU",
                                .sku = "H100",
                                .ndev = 8,
                                .island = 8,
                                .numa = 2,
                                .labels = labels};
        nodes[i] = hw_node_new();
        if (sched_make_node(&sp, nodes[i], msg, sizeof(msg))) {
            fprintf(stderr, "bench_sched_join: %s\n", msg);
            exit(1);
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One run: returns the milliseconds, *placed the decisions that placed. */
static double join_run(int *placed)
{
    sched_cluster_t *c = sched_cluster_new();
    sched_cluster_finalize(c);
    sched_bundle_t b;
    memset(&b, 0, sizeof(b));
    sched_err_t e;
    if (sched_parse_resources(&c->res, "GPU=1,CPU=16,memory=128Gi", &b.req, &e))
        exit(1);
    sched_request_t r = {.nbundles = 1, .bundles = &b, .policy = SCHED_HYBRID, .domain_key = -1};
    sched_config_t cfg = {.top_k = 1};
    sched_rng_t rng = {1};
    char msg[160];
    *placed = 0;
    double t0 = now_ms();
    for (int i = 0; i < NODES; i++) {
        if (sched_cluster_add(c, nodes[i], msg, sizeof(msg))) {
            fprintf(stderr, "bench_sched_join: %s\n", msg);
            exit(1);
        }
        if ((i + 1) % EVERY == 0) {
            sched_result_t out;
            sched_schedule(c, &cfg, &r, &rng, &out);
            *placed += out.status == SCHED_OK;
        }
    }
    double ms = now_ms() - t0;
    if (sched_cluster_check(c, msg, sizeof(msg)) || c->nnodes != NODES) {
        fprintf(stderr, "bench_sched_join: the view is wrong after the joins: %s\n", msg);
        exit(1);
    }
    sched_cluster_free(c);
    return ms;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        EVERY = atoi(argv[1]) > 0 ? atoi(argv[1]) : 100;
    make_nodes();
    double t[RUNS];
    int placed = 0;
    for (int k = 0; k < RUNS; k++)
        t[k] = join_run(&placed);
    qsort(t, RUNS, sizeof(double), cmp_double);
    printf("# %d nodes joining one at a time, a decision every %d joins (%d placed), "
           "median of %d runs (min %.1f, max %.1f ms)\n",
           NODES, EVERY, placed, RUNS, t[0], t[RUNS - 1]);
    if (EVERY != 100) {
        printf("join_10k_every_%d_ms %.1f ms\n", EVERY, t[RUNS / 2]);
        return 0;
    }
    printf("figure sched_join_10k_ms %.1f ms\n", t[RUNS / 2]);
    printf("figure sched_join_per_node_us %.2f us\n", t[RUNS / 2] * 1e3 / NODES);

    char msg[160];
    double t0 = now_ms();
    sched_cluster_t *c = sched_cluster_new();
    for (int i = 0; i < NODES; i++)
        sched_cluster_add(c, nodes[i], msg, sizeof(msg));
    sched_cluster_finalize(c);
    printf("figure sched_build_10k_ms %.1f ms\n", now_ms() - t0);
    sched_cluster_free(c);
    for (int i = 0; i < NODES; i++)
        hw_node_free(nodes[i]);
    free(nodes);
    return 0;
}
