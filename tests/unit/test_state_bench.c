/* The workload of bench/state/run.sh, and a test that it does what it
 * says. Without arguments (as ctest runs it) it runs a small workload and
 * checks every row it wrote; with arguments it is the benchmark's driver:
 *
 *   test_state_bench setup PATH JOBS       JOBS jobs of GANG workers each
 *   test_state_bench transitions PATH N    N small transactions: one job
 *                                          and its GANG workers change state
 *   test_state_bench events PATH N         N event appends, one per commit
 *   test_state_bench nodes PATH N          N nodes node-00000.. (setup)
 *   test_state_bench heartbeats PATH N R   R transactions, each recording a
 *                                          heartbeat of all N nodes
 *
 * bench/state/run.sh times these from outside and the sqlite3 tool doing
 * the same statements (see docs/state.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "base/base.h"
#include "head/state.h"
#include <stdio.h>
#include <unistd.h>

#define GANG 8

/* the cycle of states a transition goes through, the same in the
 * benchmark's SQL script for the sqlite3 tool */
static const cr_job_state_t job_cycle[] = {CR_JOB_PLACING, CR_JOB_RUNNING};
static const cr_worker_state_t worker_cycle[] = {CR_WORKER_STARTING, CR_WORKER_RUNNING};

static cr_state_t *open_or_die(const char *path)
{
    char err[CR_STATE_ERRMSG_MAX];
    cr_state_t *st;
    int rc = cr_state_open(path, &st, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return st;
}

static int die(cr_state_t *st, int rc)
{
    fprintf(stderr, "%s: %s\n", cr_err_name(rc), cr_state_errmsg(st));
    exit(1);
}

static void setup(cr_state_t *st, long jobs)
{
    int rc;
    if ((rc = cr_state_begin(st)))
        die(st, rc);
    for (long i = 0; i < jobs; i++) {
        cr_state_job_t j = {.name = "bench",
                            .spec_json = "{\"workers\":8,\"command\":[\"true\"]}",
                            .state = CR_JOB_PENDING,
                            .restart_policy = CR_RESTART_GANG};
        int64_t id;
        if ((rc = cr_state_job_create(st, &j, 0, &id)))
            die(st, rc);
        for (int k = 0; k < GANG; k++) {
            cr_state_worker_t w = {
                .job_id = id, .index = k, .node_id = "node-0", .state = CR_WORKER_PENDING};
            if ((rc = cr_state_worker_create(st, &w, 0)))
                die(st, rc);
        }
    }
    if ((rc = cr_state_commit(st)))
        die(st, rc);
}

/* Transition i moves job (i % jobs) + 1 and its workers to the i-th state
 * of the cycle, at time i. */
static void transitions(cr_state_t *st, long jobs, long n)
{
    int rc;
    for (long i = 0; i < n; i++) {
        int64_t id = i % jobs + 1;
        size_t c = (size_t)i % CR_ARRAY_SIZE(job_cycle);
        if ((rc = cr_state_begin(st)) ||
            (rc = cr_state_job_set_state(st, id, job_cycle[c], NULL, i)))
            die(st, rc);
        for (int k = 0; k < GANG; k++)
            if ((rc = cr_state_worker_set_state(st, id, k, worker_cycle[c], i)))
                die(st, rc);
        if ((rc = cr_state_commit(st)))
            die(st, rc);
    }
}

static void events(cr_state_t *st, long n)
{
    for (long i = 0; i < n; i++) {
        cr_state_event_t e = {.time_ms = i,
                              .kind = "started",
                              .job_id = i % 100 + 1,
                              .node_id = "node-0",
                              .message = "worker 3 started, pid 12345"};
        int rc = cr_state_event_append(st, &e, NULL);
        if (rc)
            die(st, rc);
    }
}

static void nodes(cr_state_t *st, long n)
{
    char desc[512];
    memset(desc, 'd', sizeof(desc) - 1);
    desc[sizeof(desc) - 1] = '\0';
    int rc;
    if ((rc = cr_state_begin(st)))
        die(st, rc);
    for (long i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof(id), "node-%05ld", i);
        cr_state_node_t nd = {.id = id,
                              .incarnation = 1,
                              .address = "127.0.0.1:7000",
                              .state = CR_NODE_ALIVE,
                              .desc_json = desc};
        if ((rc = cr_state_node_put(st, &nd, 0)))
            die(st, rc);
    }
    if ((rc = cr_state_commit(st)))
        die(st, rc);
}

/* Round r records time r + 1 for every node, in one transaction: how a
 * head would persist membership once per heartbeat period. */
static void heartbeats(cr_state_t *st, long n, long rounds)
{
    int rc;
    for (long r = 0; r < rounds; r++) {
        if ((rc = cr_state_begin(st)))
            die(st, rc);
        for (long i = 0; i < n; i++) {
            char id[32];
            snprintf(id, sizeof(id), "node-%05ld", i);
            if ((rc = cr_state_node_heartbeat(st, id, r + 1)))
                die(st, rc);
        }
        if ((rc = cr_state_commit(st)))
            die(st, rc);
    }
}

static void test_workload(void **state)
{
    char dir[] = "/tmp/corral-state-bench-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/state.db", dir);
    cr_state_t *st = open_or_die(path);
    const long jobs = 5, n = 13;
    setup(st, jobs);
    transitions(st, jobs, n);
    events(st, 40);
    nodes(st, 30);
    heartbeats(st, 30, 3);
    /* transitions 0..12 over 5 jobs: job k last moved at the largest i
     * with i % 5 == k - 1 */
    for (long k = 1; k <= jobs; k++) {
        long last = -1;
        for (long i = 0; i < n; i++)
            if (i % jobs + 1 == k)
                last = i;
        cr_state_job_t j;
        assert_int_equal(cr_state_job_get(st, k, &j), 0);
        assert_int_equal(j.state, job_cycle[last % 2]);
        assert_int_equal(j.updated_ms, last);
        cr_state_job_free(&j);
        cr_state_worker_t *w;
        size_t nw;
        assert_int_equal(cr_state_worker_list(st, k, NULL, &w, &nw), 0);
        assert_int_equal(nw, GANG);
        for (size_t x = 0; x < nw; x++) {
            assert_int_equal(w[x].state, worker_cycle[last % 2]);
            assert_int_equal(w[x].updated_ms, last);
        }
        cr_state_worker_list_free(w, nw);
    }
    cr_state_event_t *ev;
    size_t ne;
    assert_int_equal(cr_state_event_list(st, 0, 0, &ev, &ne), 0);
    assert_int_equal(ne, 40);
    assert_int_equal(ev[39].time_ms, 39);
    cr_state_event_list_free(ev, ne);
    cr_state_node_t *nv;
    size_t nn;
    assert_int_equal(cr_state_node_list(st, &nv, &nn), 0);
    assert_int_equal(nn, 30);
    assert_string_equal(nv[29].id, "node-00029");
    for (size_t i = 0; i < nn; i++)
        assert_int_equal(nv[i].last_heartbeat_ms, 3);
    cr_state_node_list_free(nv, nn);
    cr_state_close(st);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv)
{
    if (argc == 1) {
        const struct CMUnitTest tests[] = {cmocka_unit_test(test_workload)};
        return cmocka_run_group_tests(tests, NULL, NULL);
    }
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s setup|transitions|events|nodes PATH N | heartbeats PATH N R\n",
                argv[0]);
        return 2;
    }
    long n = atol(argv[3]);
    cr_state_t *st = open_or_die(argv[2]);
    int64_t jobs = 0;
    if (strcmp(argv[1], "setup") == 0) {
        setup(st, n);
    } else if (strcmp(argv[1], "transitions") == 0) {
        cr_state_job_t *v;
        size_t nj;
        if (cr_state_job_list(st, false, &v, &nj))
            die(st, CR_EIO);
        jobs = (int64_t)nj;
        cr_state_job_list_free(v, nj);
        if (jobs == 0) {
            fprintf(stderr, "no jobs in %s: run setup first\n", argv[2]);
            return 1;
        }
        transitions(st, jobs, n);
    } else if (strcmp(argv[1], "events") == 0) {
        events(st, n);
    } else if (strcmp(argv[1], "nodes") == 0) {
        nodes(st, n);
    } else if (strcmp(argv[1], "heartbeats") == 0 && argc == 5) {
        heartbeats(st, n, atol(argv[4]));
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    cr_state_close(st);
    return 0;
}
