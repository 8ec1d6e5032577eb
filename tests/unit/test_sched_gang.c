/* sched/gang.c: a gang's rank order and per-rank environment, against the
 * values torchrun, JAX and torch_xla's TPU launcher set (cited per test). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "sched/gang.h"
#include "base/base.h"
#include <stdio.h>

static const char *get(const cr_envlist_t *e, const char *k)
{
    const char *v = cr_envlist_get(e, k);
    if (!v)
        fail_msg("%s is not set", k);
    return v;
}

static void env_of(const sched_gang_t *g, int rank, cr_envlist_t *e)
{
    memset(e, 0, sizeof(*e));
    assert_int_equal(sched_gang_env(g, rank, e), 0);
}

static void test_order_contiguous(void **state)
{
    /* a SPREAD group over two nodes alternates them: slots 0,2 on A, 1,3 on
     * B; ranks must be contiguous per node (torchrun: RANK = group base +
     * LOCAL_RANK), so A gets ranks 0,1 and B 2,3 */
    sched_gang_slot_t s[4] = {
        {.node = 7, .addr = "10.0.0.1", .slice_worker = -1, .first_dev = 0, .ndevs = 1},
        {.node = 9, .addr = "10.0.0.2", .slice_worker = -1, .first_dev = 0, .ndevs = 1},
        {.node = 7, .addr = "10.0.0.1", .slice_worker = -1, .first_dev = 1, .ndevs = 1},
        {.node = 9, .addr = "10.0.0.2", .slice_worker = -1, .first_dev = 1, .ndevs = 1},
    };
    int order[4];
    sched_gang_order(s, 4, order);
    assert_int_equal(order[0], 0);
    assert_int_equal(order[1], 2);
    assert_int_equal(order[2], 1);
    assert_int_equal(order[3], 3);

    /* inside a node, by device: LOCAL_RANK i has the node's i-th device */
    sched_gang_slot_t t[3] = {
        {.node = 1, .slice_worker = -1, .first_dev = 5, .ndevs = 1},
        {.node = 1, .slice_worker = -1, .first_dev = 2, .ndevs = 1},
        {.node = 1, .slice_worker = -1, .first_dev = 3, .ndevs = 1},
    };
    sched_gang_order(t, 3, order);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 2);
    assert_int_equal(order[2], 0);
}

static void test_order_slice_worker_id(void **state)
{
    /* hosts that joined in the order w2, w0, w3, w1: ranks follow each
     * host's corral.io/tpu-slice-worker-id, never the join order */
    static const int wid[4] = {2, 0, 3, 1};
    sched_gang_slot_t s[8];
    for (int i = 0; i < 8; i++)
        s[i] = (sched_gang_slot_t){
            .node = 100 + i % 4, .slice_worker = wid[i % 4], .first_dev = i / 4, .ndevs = 1};
    int order[8];
    sched_gang_order(s, 8, order);
    for (int r = 0; r < 8; r++) {
        assert_int_equal(s[order[r]].slice_worker, r / 2);
        assert_int_equal(s[order[r]].first_dev, r % 2);
    }
    /* one node without a worker id: join order for all */
    s[3].slice_worker = -1;
    s[7].slice_worker = -1;
    sched_gang_order(s, 8, order);
    assert_int_equal(s[order[0]].node, 100);
    assert_int_equal(s[order[2]].node, 101);
}

/* a gang of n in rank order on nodes of `per` workers each */
static void fill(sched_gang_slot_t *s, int n, int per, const char *const *addrs)
{
    for (int i = 0; i < n; i++)
        s[i] = (sched_gang_slot_t){.node = i / per,
                                   .addr = addrs[i / per],
                                   .slice_worker = i / per,
                                   .first_dev = i % per,
                                   .ndevs = 1};
}

static void test_torchrun_contract(void **state)
{
    static const char *const addrs[] = {"10.0.0.1", "10.0.0.2"};
    sched_gang_slot_t s[4];
    fill(s, 4, 2, addrs);
    sched_gang_t g = {.slots = s,
                      .n = 4,
                      .run_id = "17",
                      .master_port = 29500,
                      .jax_port = 29501,
                      .restart_count = 2,
                      .max_restarts = 3};
    cr_envlist_t e;
    env_of(&g, 3, &e);
    /* the names and values LocalElasticAgent._start_workers sets
     * (torch/distributed/elastic/agent/server/local_elastic_agent.py) for
     * the second worker of the second node of a 2x2 run, role "default" */
    assert_string_equal(get(&e, "RANK"), "3");
    assert_string_equal(get(&e, "LOCAL_RANK"), "1");
    assert_string_equal(get(&e, "GROUP_RANK"), "1");
    assert_string_equal(get(&e, "ROLE_RANK"), "3");
    assert_string_equal(get(&e, "ROLE_NAME"), "default");
    assert_string_equal(get(&e, "LOCAL_WORLD_SIZE"), "2");
    assert_string_equal(get(&e, "WORLD_SIZE"), "4");
    assert_string_equal(get(&e, "GROUP_WORLD_SIZE"), "2");
    assert_string_equal(get(&e, "ROLE_WORLD_SIZE"), "4");
    assert_string_equal(get(&e, "MASTER_ADDR"), "10.0.0.1");
    assert_string_equal(get(&e, "MASTER_PORT"), "29500");
    assert_string_equal(get(&e, "TORCHELASTIC_RESTART_COUNT"), "2");
    assert_string_equal(get(&e, "TORCHELASTIC_MAX_RESTARTS"), "3");
    assert_string_equal(get(&e, "TORCHELASTIC_RUN_ID"), "17");
    assert_string_equal(get(&e, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
    /* torch/distributed/run.py: 1 thread when nproc_per_node > 1 */
    assert_string_equal(get(&e, "OMP_NUM_THREADS"), "1");
    /* JAX: the coordinator on rank 0's node, its own port */
    assert_string_equal(get(&e, "JAX_COORDINATOR_ADDRESS"), "10.0.0.1:29501");
    assert_string_equal(get(&e, "JAX_PROCESS_ID"), "3");
    assert_string_equal(get(&e, "JAX_NUM_PROCESSES"), "4");
    assert_null(cr_envlist_get(&e, "TPU_WORKER_ID"));
    cr_envlist_free(&e);

    /* what the job sets itself stays; one process per node: no OMP default */
    cr_envlist_t job = {0};
    cr_envlist_set(&job, "OMP_NUM_THREADS", "8");
    cr_envlist_set(&job, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0");
    g.job_env = &job;
    env_of(&g, 0, &e);
    assert_null(cr_envlist_get(&e, "OMP_NUM_THREADS"));
    assert_null(cr_envlist_get(&e, "TORCH_NCCL_ASYNC_ERROR_HANDLING"));
    cr_envlist_free(&e);
    cr_envlist_free(&job);
    g.job_env = NULL;
    fill(s, 2, 1, addrs);
    g.n = 2;
    env_of(&g, 1, &e);
    assert_null(cr_envlist_get(&e, "OMP_NUM_THREADS"));
    assert_string_equal(get(&e, "GROUP_WORLD_SIZE"), "2");
    cr_envlist_free(&e);
    assert_int_equal(sched_gang_env(&g, 2, &e), CR_EINVAL);
}

static void test_tpu_mesh(void **state)
{
    /* a v6e-16 (4x4) run one process per chip: 4 hosts of 4 chips. The
     * values torch_xla's configure_topology() (torch_xla/_internal/tpu.py)
     * gives local rank 1 of worker 2: chips per process 1,1,1; process
     * bounds = host bounds 2,2,1 times chips per host 2,2,1 = 4,4,1; task
     * id 2 * 4 + 1; every host's 4 ports from 8476; its own port 8477 */
    static const char *const addrs[] = {"h0", "h1", "h2", "h3"};
    sched_gang_slot_t s[16];
    fill(s, 16, 4, addrs);
    sched_gang_t g = {.slots = s,
                      .n = 16,
                      .run_id = "5",
                      .master_port = 1,
                      .jax_port = 2,
                      .tpu = true,
                      .tpu_topology = "4x4"};
    cr_envlist_t e;
    env_of(&g, 9, &e);
    assert_string_equal(get(&e, "TPU_WORKER_ID"), "2");
    assert_string_equal(get(&e, "TPU_WORKER_HOSTNAMES"), "h0,h1,h2,h3");
    assert_string_equal(get(&e, "TPU_CHIPS_PER_PROCESS_BOUNDS"), "1,1,1");
    assert_string_equal(get(&e, "TPU_PROCESS_BOUNDS"), "4,4,1");
    assert_string_equal(get(&e, "TPU_CHIPS_PER_HOST_BOUNDS"), "1,1,1");
    assert_string_equal(get(&e, "TPU_HOST_BOUNDS"), "4,4,1");
    assert_string_equal(get(&e, "CLOUD_TPU_TASK_ID"), "9");
    assert_string_equal(get(&e, "TPU_PROCESS_PORT"), "8477");
    assert_string_equal(get(&e, "TPU_PROCESS_ADDRESSES"),
                        "h0:8476,h0:8477,h0:8478,h0:8479,h1:8476,h1:8477,h1:8478,h1:8479,"
                        "h2:8476,h2:8477,h2:8478,h2:8479,h3:8476,h3:8477,h3:8478,h3:8479");
    cr_envlist_free(&e);

    /* a v5p-16 (2x2x2): two hosts of 2x2x1; bounds are the slice in chips */
    fill(s, 8, 4, addrs);
    g.n = 8;
    g.tpu_topology = "2x2x2";
    env_of(&g, 4, &e);
    assert_string_equal(get(&e, "TPU_PROCESS_BOUNDS"), "2,2,2");
    assert_string_equal(get(&e, "CLOUD_TPU_TASK_ID"), "4");
    assert_string_equal(get(&e, "TPU_PROCESS_PORT"), "8476");
    cr_envlist_free(&e);

    /* one process per host (4 chips each): no mesh variables, libtpu's
     * multi-host defaults from TPU_WORKER_ID / TPU_WORKER_HOSTNAMES */
    for (int i = 0; i < 4; i++)
        s[i] = (sched_gang_slot_t){
            .node = i, .addr = addrs[i], .slice_worker = i, .first_dev = 0, .ndevs = 4};
    g.n = 4;
    g.tpu_topology = "4x4";
    env_of(&g, 3, &e);
    assert_string_equal(get(&e, "TPU_WORKER_ID"), "3");
    assert_null(cr_envlist_get(&e, "TPU_PROCESS_BOUNDS"));
    assert_null(cr_envlist_get(&e, "CLOUD_TPU_TASK_ID"));
    cr_envlist_free(&e);

    /* part of a slice (8 of 16 chips): the processes cannot be its mesh */
    fill(s, 8, 4, addrs);
    g.n = 8;
    env_of(&g, 0, &e);
    assert_null(cr_envlist_get(&e, "TPU_PROCESS_BOUNDS"));
    cr_envlist_free(&e);
}

static void test_addr_local_only(void **state)
{
    assert_true(sched_addr_is_local_only("127.0.0.1"));
    assert_true(sched_addr_is_local_only("0.0.0.0"));
    assert_true(sched_addr_is_local_only("::1"));
    assert_true(sched_addr_is_local_only(""));
    assert_true(sched_addr_is_local_only(NULL));
    assert_false(sched_addr_is_local_only("10.0.0.1"));
    assert_false(sched_addr_is_local_only("host-a"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_contiguous),  cmocka_unit_test(test_order_slice_worker_id),
        cmocka_unit_test(test_torchrun_contract), cmocka_unit_test(test_tpu_mesh),
        cmocka_unit_test(test_addr_local_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
