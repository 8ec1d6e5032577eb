/* agent/launch: real workers on a real libuv loop. Each test starts
 * processes, reads what they saw from their log files and checks how they
 * ended. Nodes are simulated (tests/unit/data/launch_*.json). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "agent/agent.h"
#include "agent/launch.h"
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CPUS 4096

/* ---- helpers ---- */

typedef struct rec {
    int count;
    cr_worker_exit_t exit;
    uint64_t at_ms;
    int64_t at_wall_us;
} rec_t;

static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000;
}

static void on_exit_rec(cr_worker_t *w, const cr_worker_exit_t *e, void *arg)
{
    rec_t *r = arg;
    r->count++;
    r->exit = *e;
    r->at_ms = now_ms();
    r->at_wall_us = cr_wall_us();
}

static void tick(uv_timer_t *t)
{
    CR_UNUSED(t);
}

/* Runs the loop until done(ctx) or timeout_ms; returns done(ctx). */
static bool run_until(uv_loop_t *loop, bool (*done)(void *), void *ctx, int timeout_ms)
{
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, tick, 5, 5);
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    bool ok;
    while (!(ok = done(ctx)) && now_ms() < end)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return ok;
}

typedef struct recs {
    rec_t *r;
    int n;
} recs_t;

static bool all_exited(void *ctx)
{
    recs_t *rs = ctx;
    for (int i = 0; i < rs->n; i++)
        if (rs->r[i].count == 0)
            return false;
    return true;
}

static bool one_exited(void *ctx)
{
    return ((rec_t *)ctx)->count > 0;
}

static bool never(void *ctx)
{
    CR_UNUSED(ctx);
    return false;
}

static void loop_finish(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

static cr_node_t *load_node(const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/unit/data/%s", CORRAL_SOURCE_DIR, name);
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    assert_non_null(j);
    cr_node_t *node = hw_node_new();
    hw_json_error_t err;
    int rc = hw_node_from_json(j, node, &err);
    if (rc)
        fprintf(stderr, "%s: %s: %s\n", path, err.path, err.msg);
    assert_int_equal(rc, 0);
    json_decref(j);
    return node;
}

static char *make_tmpdir(void)
{
    char *d = cr_strdup("/tmp/corral-test-launch-XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static void remove_tmpdir(char *d)
{
    DIR *dir = opendir(d);
    assert_non_null(dir);
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *p = cr_asprintf("%s/%s", d, e->d_name);
        unlink(p);
        free(p);
    }
    closedir(dir);
    rmdir(d);
    free(d);
}

static char *slurp(const char *path)
{
    char *s = NULL;
    size_t len;
    if (cr_read_file_alloc("/", path, &s, &len) != 0)
        return NULL;
    return s;
}

/* A worker that ran `env`: its log as KEY=VALUE pairs. */
static void read_env_log(const char *path, cr_envlist_t *env)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char line[8192];
    while (fgets(line, sizeof(line), fp)) {
        line[strcspn(line, "\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        cr_envlist_set(env, line, eq + 1);
    }
    fclose(fp);
}

static void assert_env(const cr_envlist_t *env, const char *key, const char *want)
{
    const char *got = cr_envlist_get(env, key);
    if (!want) {
        if (got)
            fail_msg("%s is set to '%s', expected unset", key, got);
        return;
    }
    if (!got)
        fail_msg("%s is not set, expected '%s'", key, want);
    if (strcmp(got, want) != 0)
        fail_msg("%s is '%s', expected '%s'", key, got, want);
}

/* The CPUs this process may use, as a bitmap and a cpulist. */
static void own_cpus(uint64_t *bits, cr_buf_t *list)
{
    cpu_set_t *set = CPU_ALLOC(MAX_CPUS);
    size_t size = CPU_ALLOC_SIZE(MAX_CPUS);
    assert_int_equal(sched_getaffinity(0, size, set), 0);
    memset(bits, 0, MAX_CPUS / 8);
    for (int c = 0; c < MAX_CPUS; c++)
        if (CPU_ISSET_S(c, size, set))
            bits[c / 64] |= 1ull << (c % 64);
    CPU_FREE(set);
    cr_buf_append(list, "", 0);
    cr_cpulist_format(bits, MAX_CPUS, list);
}

/* own CPUs & cpulist s, as a cpulist ("" when empty) */
static char *own_and(const char *s)
{
    uint64_t own[MAX_CPUS / 64], other[MAX_CPUS / 64];
    cr_buf_t b = {0}, out = {0};
    own_cpus(own, &b);
    size_t pos;
    assert_true(cr_cpulist_parse(s, other, MAX_CPUS, &pos) >= 0);
    for (int k = 0; k < MAX_CPUS / 64; k++)
        other[k] &= own[k];
    cr_buf_append(&out, "", 0);
    cr_cpulist_format(other, MAX_CPUS, &out);
    cr_buf_free(&b);
    return out.s;
}

/* "Cpus_allowed_list:\t0-1" from a worker that printed /proc/self/status */
static char *allowed_list(const char *log)
{
    char *s = slurp(log);
    assert_non_null(s);
    char *p = strstr(s, "Cpus_allowed_list:");
    assert_non_null(p);
    p += strlen("Cpus_allowed_list:");
    p += strspn(p, " \t");
    char *r = cr_strndup(p, strcspn(p, "\n"));
    free(s);
    return r;
}

/* Gone: no such process, or a zombie nobody has reaped yet (it runs no
 * more code either way). */
static bool pid_gone(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if (cr_read_file("/", path, buf, sizeof(buf)) != 0)
        return true;
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

static bool gone_wait(int pid, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    while (!pid_gone(pid)) {
        if (now_ms() > end)
            return false;
        usleep(2000);
    }
    return true;
}

/* Reads a pid a worker wrote into dir/name, waiting for it. */
typedef struct pidfile {
    char path[1200];
    int pid;
} pidfile_t;

static bool pidfile_ready(void *ctx)
{
    pidfile_t *p = ctx;
    char buf[32];
    int64_t v;
    if (cr_read_file("/", p->path, buf, sizeof(buf)) != 0 || cr_parse_i64(buf, 10, &v) != 0)
        return false;
    p->pid = (int)v;
    return true;
}

static cr_worker_spec_t base_spec(const char *const *argv, const char *dir, const char *wid)
{
    cr_worker_spec_t s = {.argv = argv, .log_dir = dir, .job_id = "job-1", .worker_id = wid};
    return s;
}

/* ---- the environment ---- */

/* Eight workers on a simulated 8-GPU node, one GPU each. */
static void test_gang_env_dgx(void **state)
{
    cr_node_t *node = load_node("launch_dgx8.json");
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    cr_envlist_t job = {0};
    cr_envlist_set(&job, "FOO", "bar baz");
    cr_envlist_set(&job, "CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"); /* isolation wins */
    const char *argv[] = {"/usr/bin/env", NULL};
    rec_t rec[8] = {0};
    cr_worker_t *w[8];
    int devs[8];
    char wid[8][16];
    uint64_t own[MAX_CPUS / 64];
    cr_buf_t ownlist = {0};
    own_cpus(own, &ownlist);
    for (int i = 0; i < 8; i++) {
        devs[i] = i;
        snprintf(wid[i], sizeof(wid[i]), "w%d", i);
        cr_worker_spec_t s = base_spec(argv, dir, wid[i]);
        s.env = &job;
        s.node = node;
        s.devs = &devs[i];
        s.ndevs = 1;
        s.worker_index = i;
        s.agent_socket = "/tmp/corral/agent.sock";
        char *why = NULL;
        int rc = cr_worker_start(&loop, &s, on_exit_rec, &rec[i], &w[i], &why);
        if (rc)
            fail_msg("worker %d: %s", i, why);
        assert_null(why);
        assert_true(cr_worker_pid(w[i]) > 0);
        /* closest binding: the device's CPUs that exist here, else none
         * and a warning saying so */
        char *expect = own_and(node->devices.v[i].cpus);
        assert_string_equal(cr_worker_cpus(w[i]), expect);
        if (expect[0])
            assert_null(cr_worker_warning(w[i]));
        else
            assert_non_null(strstr(cr_worker_warning(w[i]), "none of the CPUs local"));
        free(expect);
    }
    recs_t rs = {rec, 8};
    assert_true(run_until(&loop, all_exited, &rs, 5000));
    for (int i = 0; i < 8; i++) {
        assert_int_equal(rec[i].count, 1);
        assert_int_equal(rec[i].exit.code, 0);
        assert_int_equal(rec[i].exit.signal, 0);
        assert_false(cr_worker_is_running(w[i]));
        cr_envlist_t seen = {0};
        read_env_log(cr_worker_stdout_path(w[i]), &seen);
        const cr_device_t *d = &node->devices.v[i];
        char idx[8], nic[16], ucx[16];
        snprintf(idx, sizeof(idx), "%d", i);
        snprintf(nic, sizeof(nic), "=ib%d", i / 2);
        snprintf(ucx, sizeof(ucx), "mlx5_%d:1", i / 2);
        assert_env(&seen, "CUDA_VISIBLE_DEVICES", d->isolation_id);
        assert_env(&seen, "CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        assert_env(&seen, "CORRAL_ACCELERATOR_IDS", d->isolation_id);
        assert_env(&seen, "CORRAL_NODE_ID", "sim-dgx-01");
        assert_env(&seen, "CORRAL_JOB_ID", "job-1");
        assert_env(&seen, "CORRAL_WORKER_ID", wid[i]);
        assert_env(&seen, "CORRAL_WORKER_INDEX", idx);
        assert_env(&seen, "CORRAL_AGENT_SOCKET", "/tmp/corral/agent.sock");
        assert_env(&seen, "NCCL_SOCKET_IFNAME", nic);
        assert_env(&seen, "UCX_NET_DEVICES", ucx);
        assert_env(&seen, "FOO", "bar baz");
        /* the agent's own environment stays out unless asked for */
        assert_non_null(getenv("PATH"));
        assert_env(&seen, "PATH", NULL);
        for (int k = 0; k < i; k++) /* distinct GPUs */
            assert_string_not_equal(d->isolation_id, node->devices.v[k].isolation_id);
        cr_envlist_free(&seen);
        cr_worker_release(w[i]);
    }
    loop_finish(&loop);
    cr_buf_free(&ownlist);
    cr_envlist_free(&job);
    remove_tmpdir(dir);
    hw_node_free(node);
}

/* Several devices, the job's own NIC choice, the agent's environment. */
static void test_env_multi_device(void **state)
{
    cr_node_t *node = load_node("launch_dgx8.json");
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"env", NULL}; /* found through PATH */
    int devs_a[] = {3, 1, 2}, devs_b[] = {4, 5};
    cr_envlist_t job_b = {0};
    cr_envlist_set(&job_b, "NCCL_SOCKET_IFNAME", "eth");
    /* the submitter's token file is not passed on: the worker gets its job credential */
    cr_envlist_set(&job_b, "CORRAL_TOKEN_FILE", "/somewhere/token");
    /* the agent's own settings are not the worker's (issue 12), its PATH is */
    setenv("CORRAL_TEST_FROM_AGENT", "yes", 1);
    rec_t rec[3] = {0};
    cr_worker_t *w[3];

    cr_worker_spec_t a = base_spec(argv, dir, "a");
    a.node = node;
    a.devs = devs_a;
    a.ndevs = 3;
    a.inherit_env = true;
    assert_int_equal(cr_worker_start(&loop, &a, on_exit_rec, &rec[0], &w[0], NULL), 0);
    cr_worker_spec_t b = base_spec(argv, dir, "b");
    b.node = node;
    b.devs = devs_b;
    b.ndevs = 2;
    b.env = &job_b;
    b.inherit_env = true;
    b.head_address = "/run/head.sock";
    b.job_token = "job:7:1:0:00";
    assert_int_equal(cr_worker_start(&loop, &b, on_exit_rec, &rec[1], &w[1], NULL), 0);
    /* no devices: every backend still hides all of its devices */
    cr_worker_spec_t c = base_spec(argv, dir, "c");
    c.node = node;
    c.inherit_env = true;
    assert_int_equal(cr_worker_start(&loop, &c, on_exit_rec, &rec[2], &w[2], NULL), 0);
    assert_string_equal(cr_worker_cpus(w[2]), "");
    recs_t rs = {rec, 3};
    assert_true(run_until(&loop, all_exited, &rs, 5000));

    cr_envlist_t seen = {0};
    read_env_log(cr_worker_stdout_path(w[0]), &seen);
    const cr_device_t *d = node->devices.v;
    char *ids = cr_asprintf("%s,%s,%s", d[3].isolation_id, d[1].isolation_id, d[2].isolation_id);
    char *sorted = cr_asprintf("%s,%s,%s", d[1].isolation_id, d[2].isolation_id, d[3].isolation_id);
    const char *cvd = cr_envlist_get(&seen, "CUDA_VISIBLE_DEVICES");
    assert_non_null(cvd);
    assert_true(strcmp(cvd, ids) == 0 || strcmp(cvd, sorted) == 0);
    assert_env(&seen, "CORRAL_ACCELERATOR_IDS", ids);
    assert_env(&seen, "NCCL_SOCKET_IFNAME", "=ib1,ib0"); /* devices 3 and 2 share ib1 */
    assert_env(&seen, "UCX_NET_DEVICES", "mlx5_1:1,mlx5_0:1");
    assert_env(&seen, "CORRAL_TEST_FROM_AGENT", NULL);
    assert_env(&seen, "PATH", getenv("PATH"));
    assert_env(&seen, "CORRAL_JOB_TOKEN", NULL);
    cr_envlist_free(&seen);

    read_env_log(cr_worker_stdout_path(w[1]), &seen);
    assert_env(&seen, "NCCL_SOCKET_IFNAME", "eth"); /* the job's choice stands */
    assert_env(&seen, "UCX_NET_DEVICES", "mlx5_2:1");
    assert_env(&seen, "CORRAL_TOKEN_FILE", NULL);
    assert_env(&seen, "CORRAL_ADDRESS", "/run/head.sock");
    assert_env(&seen, "CORRAL_JOB_TOKEN", "job:7:1:0:00");
    cr_envlist_free(&seen);

    read_env_log(cr_worker_stdout_path(w[2]), &seen);
    assert_env(&seen, "CUDA_VISIBLE_DEVICES", "");
    assert_env(&seen, "CORRAL_ACCELERATOR_IDS", "");
    assert_env(&seen, "NCCL_SOCKET_IFNAME", NULL);
    cr_envlist_free(&seen);

    unsetenv("CORRAL_TEST_FROM_AGENT");
    for (int i = 0; i < 3; i++)
        cr_worker_release(w[i]);
    loop_finish(&loop);
    free(ids);
    free(sorted);
    cr_envlist_free(&job_b);
    remove_tmpdir(dir);
    hw_node_free(node);
}

/* A TPU host: one chip per worker, and two chips for one more. */
static void test_tpu_env(void **state)
{
    cr_node_t *node = load_node("launch_tpu4.json");
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"/usr/bin/env", NULL};
    static const struct {
        int devs[2];
        size_t n;
        const char *chips, *per_process;
    } rows[] = {
        {{0}, 1, "0", "1,1,1"}, {{1}, 1, "1", "1,1,1"},      {{2}, 1, "2", "1,1,1"},
        {{3}, 1, "3", "1,1,1"}, {{2, 3}, 2, "2,3", "1,2,1"},
    };
    enum { N = CR_ARRAY_SIZE(rows) };
    rec_t rec[N] = {0};
    cr_worker_t *w[N];
    for (size_t i = 0; i < N; i++) {
        char wid[16];
        snprintf(wid, sizeof(wid), "t%zu", i);
        cr_worker_spec_t s = base_spec(argv, dir, wid);
        s.node = node;
        s.devs = rows[i].devs;
        s.ndevs = rows[i].n;
        s.worker_index = (int)i;
        char *why = NULL;
        if (cr_worker_start(&loop, &s, on_exit_rec, &rec[i], &w[i], &why))
            fail_msg("%s", why);
    }
    recs_t rs = {rec, N};
    assert_true(run_until(&loop, all_exited, &rs, 5000));
    for (size_t i = 0; i < N; i++) {
        cr_envlist_t seen = {0};
        read_env_log(cr_worker_stdout_path(w[i]), &seen);
        assert_env(&seen, "TPU_VISIBLE_CHIPS", rows[i].chips);
        assert_env(&seen, "TPU_CHIPS_PER_PROCESS_BOUNDS", rows[i].per_process);
        assert_env(&seen, "TPU_PROCESS_BOUNDS", "1,1,1");
        assert_env(&seen, "CORRAL_ACCELERATOR_IDS", rows[i].chips);
        assert_env(&seen, "CORRAL_NODE_ID", "sim-v6e-w0");
        assert_env(&seen, "NCCL_SOCKET_IFNAME", "=eth0");
        assert_env(&seen, "UCX_NET_DEVICES", "eth0"); /* not RDMA: the netdev */
        assert_env(&seen, "CUDA_VISIBLE_DEVICES", NULL);
        cr_envlist_free(&seen);
        cr_worker_release(w[i]);
    }
    loop_finish(&loop);
    remove_tmpdir(dir);
    hw_node_free(node);
}

/* A node of several vendors: the worker sees the devices it was given of
 * each, and none of a vendor it was given nothing of. */
static void test_env_mixed_vendors(void **state)
{
    static const char desc[] =
        "{\"schema\": \"corral.node/v1\", \"id\": \"sim-mixed\", \"hostname\": \"sim-mixed\", "
        "\"devices\": ["
        "{\"index\": 0, \"backend\": \"nvidia\", \"resource\": \"GPU\", \"vendor_index\": 0, "
        "\"isolation_id\": \"GPU-aa\"},"
        "{\"index\": 1, \"backend\": \"nvidia\", \"resource\": \"GPU\", \"vendor_index\": 1, "
        "\"isolation_id\": \"GPU-bb\"},"
        "{\"index\": 2, \"backend\": \"gaudi\", \"resource\": \"HPU\", \"vendor_index\": 0, "
        "\"isolation_id\": \"5\"},"
        "{\"index\": 3, \"backend\": \"neuron\", \"resource\": \"neuron_cores\", "
        "\"vendor_index\": 0, \"isolation_id\": \"0-1\", \"cores\": 2}]}";
    json_error_t jerr;
    json_t *j = json_loads(desc, 0, &jerr);
    assert_non_null(j);
    cr_node_t *node = hw_node_new();
    hw_json_error_t herr;
    assert_int_equal(hw_node_from_json(j, node, &herr), 0);
    json_decref(j);
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"/usr/bin/env", NULL};
    int devs[] = {1, 2};
    rec_t rec = {0};
    cr_worker_t *w;
    cr_worker_spec_t s = base_spec(argv, dir, "m");
    s.node = node;
    s.devs = devs;
    s.ndevs = 2;
    char *why = NULL;
    if (cr_worker_start(&loop, &s, on_exit_rec, &rec, &w, &why))
        fail_msg("%s", why);
    assert_true(run_until(&loop, one_exited, &rec, 3000));
    cr_envlist_t seen = {0};
    read_env_log(cr_worker_stdout_path(w), &seen);
    assert_env(&seen, "CUDA_VISIBLE_DEVICES", "GPU-bb");
    assert_env(&seen, "HABANA_VISIBLE_MODULES", "5");
    assert_env(&seen, "NEURON_RT_VISIBLE_CORES", "");
    assert_env(&seen, "CORRAL_ACCELERATOR_IDS", "GPU-bb,5");
    assert_env(&seen, "CORRAL_NODE_ID", "sim-mixed");
    cr_envlist_free(&seen);
    cr_worker_release(w);
    loop_finish(&loop);
    remove_tmpdir(dir);
    hw_node_free(node);
}

/* ---- CPU binding ---- */

static void test_affinity(void **state)
{
    uint64_t own[MAX_CPUS / 64];
    cr_buf_t ownlist = {0};
    own_cpus(own, &ownlist);
    if (!(own[0] & 2)) {
        cr_buf_free(&ownlist);
        skip(); /* needs CPU 1 */
    }
    cr_node_t *node = load_node("launch_dgx8.json");
    cr_strlcpy(node->devices.v[0].cpus, "1", sizeof(node->devices.v[0].cpus));
    cr_strlcpy(node->devices.v[1].cpus, "0-55", sizeof(node->devices.v[1].cpus));
    cr_strlcpy(node->devices.v[2].cpus, "4000-4010", sizeof(node->devices.v[2].cpus));
    cr_strlcpy(node->devices.v[3].cpus, "", sizeof(node->devices.v[3].cpus));
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"/bin/cat", "/proc/self/status", NULL};
    char *and055 = own_and("0-55");
    static const struct {
        int dev;
        cr_bind_mode_t bind;
        bool warns;
    } rows[] = {
        {0, CR_BIND_CLOSEST, false}, /* "1" */
        {1, CR_BIND_CLOSEST, false}, /* "0-55": the ones that exist here */
        {2, CR_BIND_CLOSEST, true},  /* none exist: unbound, one warning */
        {3, CR_BIND_CLOSEST, false}, /* unknown: unbound, nothing to say */
        {0, CR_BIND_NONE, false},
    };
    const char *expect[] = {"1", and055, ownlist.s, ownlist.s, ownlist.s};
    enum { N = CR_ARRAY_SIZE(rows) };
    rec_t rec[N] = {0};
    cr_worker_t *w[N];
    for (size_t i = 0; i < N; i++) {
        char wid[16];
        snprintf(wid, sizeof(wid), "c%zu", i);
        cr_worker_spec_t s = base_spec(argv, dir, wid);
        s.node = node;
        s.devs = &rows[i].dev;
        s.ndevs = 1;
        s.bind = rows[i].bind;
        assert_int_equal(cr_worker_start(&loop, &s, on_exit_rec, &rec[i], &w[i], NULL), 0);
        assert_int_equal(cr_worker_warning(w[i]) != NULL, rows[i].warns);
        /* the loop thread has its own CPUs back */
        uint64_t after[MAX_CPUS / 64];
        cr_buf_t al = {0};
        own_cpus(after, &al);
        assert_string_equal(al.s, ownlist.s);
        cr_buf_free(&al);
    }
    assert_non_null(strstr(cr_worker_warning(w[2]), "4000-4010"));
    recs_t rs = {rec, N};
    assert_true(run_until(&loop, all_exited, &rs, 5000));
    for (size_t i = 0; i < N; i++) {
        char *got = allowed_list(cr_worker_stdout_path(w[i]));
        if (strcmp(got, expect[i]) != 0)
            fail_msg("worker %zu: Cpus_allowed_list %s, expected %s", i, got, expect[i]);
        free(got);
        cr_worker_release(w[i]);
    }
    loop_finish(&loop);
    free(and055);
    cr_buf_free(&ownlist);
    remove_tmpdir(dir);
    hw_node_free(node);
}

static void test_bind_mode_names(void **state)
{
    cr_bind_mode_t m = CR_BIND_NONE;
    assert_int_equal(cr_bind_mode_parse("closest", &m), 0);
    assert_int_equal(m, CR_BIND_CLOSEST);
    assert_int_equal(cr_bind_mode_parse("none", &m), 0);
    assert_int_equal(m, CR_BIND_NONE);
    assert_int_equal(cr_bind_mode_parse("socket", &m), CR_EINVAL);
    assert_int_equal(cr_bind_mode_parse(NULL, &m), CR_EINVAL);
    assert_string_equal(cr_bind_mode_name(CR_BIND_CLOSEST), "closest");
    cr_worker_spec_t s = {0};
    assert_int_equal(s.bind, CR_BIND_CLOSEST); /* the default */
}

/* ---- stopping ---- */

/* A worker that ignores SIGTERM, with a grandchild that does too: both are
 * gone once the grace period is over, and the callback comes once. */
static void test_stop_ignores_term(void **state)
{
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"/bin/sh", "-c",
                          "trap '' TERM; sleep 30 & echo $! > gc.pid; wait; wait; wait", NULL};
    rec_t rec = {0};
    cr_worker_t *w;
    cr_worker_spec_t s = base_spec(argv, dir, "s");
    s.cwd = dir;
    assert_int_equal(cr_worker_start(&loop, &s, on_exit_rec, &rec, &w, NULL), 0);
    pidfile_t gc = {0};
    snprintf(gc.path, sizeof(gc.path), "%s/gc.pid", dir);
    assert_true(run_until(&loop, pidfile_ready, &gc, 3000));
    assert_false(pid_gone(gc.pid));
    uint64_t t0 = now_ms();
    assert_int_equal(cr_worker_stop(w, 300), 0);
    assert_false(run_until(&loop, one_exited, &rec, 150)); /* still in its grace period */
    assert_true(cr_worker_is_running(w));
    assert_true(run_until(&loop, one_exited, &rec, 3000));
    assert_true(rec.at_ms - t0 >= 290);
    assert_true(rec.at_ms - t0 < 2000);
    assert_int_equal(rec.exit.signal, SIGKILL);
    assert_true(rec.exit.stopped);
    assert_true(rec.exit.killed);
    assert_true(gone_wait(cr_worker_pid(w), 1000));
    assert_true(gone_wait(gc.pid, 1000));
    /* stopping it again is a no-op: no second callback */
    assert_int_equal(cr_worker_stop(w, 0), 0);
    run_until(&loop, never, NULL, 50);
    assert_int_equal(rec.count, 1);
    cr_worker_release(w);
    loop_finish(&loop);
    remove_tmpdir(dir);
}

static bool pid_stopped(void *ctx)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", *(int *)ctx);
    if (cr_read_file("/", path, buf, sizeof(buf)) != 0)
        return false;
    const char *p = strrchr(buf, ')'); /* the state follows the command name */
    return p && p[1] == ' ' && p[2] == 'T';
}

/* Pins the SIGCONT that follows SIGTERM (agent/launch.c cr_worker_stop):
 * a worker left stopped (SIGSTOP, as Ctrl-Z or a debugger leaves it) runs
 * its SIGTERM handler once it is stopped, and ends with the code that
 * handler gives, not with SIGKILL when the grace period is over. */
static void test_stop_stopped_worker(void **state)
{
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"/bin/sh", "-c", "trap 'exit 7' TERM; kill -STOP $$; exit 3", NULL};
    rec_t rec = {0};
    cr_worker_t *w;
    cr_worker_spec_t s = base_spec(argv, dir, "t");
    assert_int_equal(cr_worker_start(&loop, &s, on_exit_rec, &rec, &w, NULL), 0);
    int pid = cr_worker_pid(w);
    assert_true(run_until(&loop, pid_stopped, &pid, 3000));
    assert_int_equal(cr_worker_stop(w, 20000), 0);
    assert_true(run_until(&loop, one_exited, &rec, 15000));
    assert_int_equal(rec.exit.signal, 0);
    assert_int_equal(rec.exit.code, 7);
    assert_true(rec.exit.stopped);
    cr_worker_release(w);
    loop_finish(&loop);
    remove_tmpdir(dir);
}

/* The leader leaves at SIGTERM, a grandchild ignoring it stays: the stop
 * waits for the grace period, then kills what is left of the group. */
static void test_stop_group_drains(void **state)
{
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"/bin/sh", "-c",
                          "(trap '' TERM; exec sleep 30) & echo $! > gc.pid; exec sleep 30", NULL};
    rec_t rec = {0};
    cr_worker_t *w;
    cr_worker_spec_t s = base_spec(argv, dir, "d");
    s.cwd = dir;
    assert_int_equal(cr_worker_start(&loop, &s, on_exit_rec, &rec, &w, NULL), 0);
    pidfile_t gc = {0};
    snprintf(gc.path, sizeof(gc.path), "%s/gc.pid", dir);
    assert_true(run_until(&loop, pidfile_ready, &gc, 3000));
    usleep(50000); /* let the subshell set its trap and exec */
    uint64_t t0 = now_ms();
    int64_t t0_us = cr_wall_us();
    assert_int_equal(cr_worker_stop(w, 1500), 0);
    assert_true(run_until(&loop, one_exited, &rec, 5000));
    assert_true(rec.at_ms - t0 >= 1490);
    assert_int_equal(rec.exit.signal, SIGTERM); /* how the leader ended */
    /* its end is when the leader's exit was seen (sleep leaves at SIGTERM),
     * not when the drain was over: a gang's first failure is told by it */
    assert_true(rec.exit.ended_us >= t0_us);
    assert_true(rec.at_wall_us - rec.exit.ended_us >= 1000000);
    assert_true(rec.exit.killed);
    assert_true(gone_wait(gc.pid, 1000));
    cr_worker_release(w);
    loop_finish(&loop);
    remove_tmpdir(dir);
}

/* A worker that honours SIGTERM ends at once, without SIGKILL. */
static void test_stop_graceful(void **state)
{
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"sleep", "30", NULL};
    rec_t rec = {0};
    cr_worker_t *w;
    cr_worker_spec_t s = base_spec(argv, dir, "g");
    assert_int_equal(cr_worker_start(&loop, &s, on_exit_rec, &rec, &w, NULL), 0);
    uint64_t t0 = now_ms();
    assert_int_equal(cr_worker_stop(w, 10000), 0);
    assert_true(run_until(&loop, one_exited, &rec, 3000));
    assert_true(rec.at_ms - t0 < 1000);
    assert_int_equal(rec.exit.signal, SIGTERM);
    assert_true(rec.exit.stopped);
    assert_false(rec.exit.killed);
    cr_worker_release(w);
    loop_finish(&loop);
    remove_tmpdir(dir);
}

/* What a worker leaves behind in its group when it exits is killed. */
static void test_leftovers_killed(void **state)
{
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"/bin/sh", "-c", "sleep 30 & echo $! > gc.pid; exit 0", NULL};
    rec_t rec = {0};
    cr_worker_t *w;
    cr_worker_spec_t s = base_spec(argv, dir, "l");
    s.cwd = dir;
    assert_int_equal(cr_worker_start(&loop, &s, on_exit_rec, &rec, &w, NULL), 0);
    assert_true(run_until(&loop, one_exited, &rec, 3000));
    assert_int_equal(rec.exit.code, 0);
    assert_false(rec.exit.stopped);
    pidfile_t gc = {0};
    snprintf(gc.path, sizeof(gc.path), "%s/gc.pid", dir);
    assert_true(pidfile_ready(&gc));
    assert_true(gone_wait(gc.pid, 1000));
    cr_worker_release(w);
    loop_finish(&loop);
    remove_tmpdir(dir);
}

/* Releasing a running worker kills it without a callback. */
static void test_release_running(void **state)
{
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"sleep", "30", NULL};
    rec_t rec = {0};
    cr_worker_t *w;
    cr_worker_spec_t s = base_spec(argv, dir, "r");
    assert_int_equal(cr_worker_start(&loop, &s, on_exit_rec, &rec, &w, NULL), 0);
    int pid = cr_worker_pid(w);
    cr_worker_release(w);
    uint64_t t0 = now_ms();
    loop_finish(&loop); /* returns once the worker is reaped and freed */
    assert_true(now_ms() - t0 < 2000);
    assert_int_equal(rec.count, 0);
    assert_true(pid_gone(pid));
    remove_tmpdir(dir);
}

/* ---- how workers end, what they write ---- */

static void release_in_cb(cr_worker_t *w, const cr_worker_exit_t *e, void *arg)
{
    on_exit_rec(w, e, arg);
    cr_worker_release(w);
}

static void test_exit_codes_and_signals(void **state)
{
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    static const struct {
        const char *script;
        int code, sig;
    } rows[] = {
        {"exit 0", 0, 0},
        {"exit 3", 3, 0},
        {"exit 255", 255, 0},
        {"kill -USR1 $$", 0, SIGUSR1},
        {"kill -KILL $$", 0, SIGKILL},
    };
    enum { N = CR_ARRAY_SIZE(rows) };
    rec_t rec[N] = {0};
    for (size_t i = 0; i < N; i++) {
        const char *argv[] = {"/bin/sh", "-c", rows[i].script, NULL};
        char wid[16];
        snprintf(wid, sizeof(wid), "e%zu", i);
        cr_worker_spec_t s = base_spec(argv, dir, wid);
        cr_worker_t *w;
        assert_int_equal(cr_worker_start(&loop, &s, release_in_cb, &rec[i], &w, NULL), 0);
    }
    recs_t rs = {rec, N};
    assert_true(run_until(&loop, all_exited, &rs, 5000));
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(rec[i].count, 1);
        assert_int_equal(rec[i].exit.code, rows[i].code);
        assert_int_equal(rec[i].exit.signal, rows[i].sig);
        assert_false(rec[i].exit.stopped);
    }
    loop_finish(&loop);
    remove_tmpdir(dir);
}

static void test_exec_failure(void **state)
{
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    char *notexec = cr_asprintf("%s/plain-file", dir);
    FILE *fp = fopen(notexec, "w");
    assert_non_null(fp);
    fputs("not a program\n", fp);
    fclose(fp);
    static const struct {
        const char *cmd;
        int err;
        const char *msg;
    } rows[] = {
        {"corral-no-such-command-7f3a", -ENOENT,
         "exec failed: No such file or directory: cannot run 'corral-no-such-command-7f3a' (not "
         "found in the worker's PATH)"},
        {"/nonexistent/bin/worker", -ENOENT,
         "exec failed: No such file or directory: cannot run '/nonexistent/bin/worker'"},
        {"echo hi there", -ENOENT,
         "exec failed: No such file or directory: cannot run 'echo hi there' (not found in the "
         "worker's PATH); did you quote the whole command? give the command and its arguments "
         "as separate words, or run it with sh -c"},
        {NULL, -EACCES, "exec failed: Permission denied: cannot run '"},
    };
    rec_t rec = {0};
    for (size_t i = 0; i < CR_ARRAY_SIZE(rows); i++) {
        const char *argv[] = {rows[i].cmd ? rows[i].cmd : notexec, NULL};
        char wid[16];
        snprintf(wid, sizeof(wid), "x%zu", i);
        cr_worker_spec_t s = base_spec(argv, dir, wid);
        cr_worker_t *w = NULL;
        char *why = NULL;
        uint64_t t0 = now_ms();
        assert_int_equal(cr_worker_start(&loop, &s, on_exit_rec, &rec, &w, &why), rows[i].err);
        assert_true(now_ms() - t0 < 1000);
        assert_null(w);
        assert_non_null(why);
        if (rows[i].cmd)
            assert_string_equal(why, rows[i].msg);
        else /* the temporary path follows */
            assert_true(strncmp(why, rows[i].msg, strlen(rows[i].msg)) == 0);
        free(why);
        /* and the worker's error log says so, for `corral job logs` */
        char *errlog = cr_asprintf("%s/%s.err", dir, wid);
        char *text = slurp(errlog);
        assert_non_null(text);
        assert_non_null(strstr(text, rows[i].msg));
        free(text);
        free(errlog);
    }
    loop_finish(&loop);
    assert_int_equal(rec.count, 0);
    free(notexec);
    remove_tmpdir(dir);
}

static void test_bad_spec(void **state)
{
    cr_node_t *node = load_node("launch_dgx8.json");
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"/bin/true", NULL};
    const char *none[] = {NULL};
    int dev9 = 9;
    cr_worker_spec_t s[6];
    for (int i = 0; i < 6; i++)
        s[i] = base_spec(argv, dir, "b");
    s[0].worker_id = "../escape";
    s[1].cwd = "/nonexistent/dir";
    s[2].log_dir = "/nonexistent/logs";
    s[3].node = node;
    s[3].devs = &dev9;
    s[3].ndevs = 1;
    s[4].argv = none;
    s[5].cwd = "/etc/hostname";
    static const struct {
        int err;
        const char *msg;
    } want[] = {
        {CR_EINVAL, "bad worker id '../escape'"},
        {-ENOENT, "working directory /nonexistent/dir: No such file or directory"},
        {-ENOENT, "log file /nonexistent/logs/b.out: No such file or directory"},
        {CR_ENODEV, "device 9 does not exist on node sim-dgx-01"},
        {CR_EINVAL, "no command given"},
        {-ENOTDIR, "working directory /etc/hostname: Not a directory"},
    };
    for (int i = 0; i < 6; i++) {
        cr_worker_t *w = NULL;
        char *why = NULL;
        assert_int_equal(cr_worker_start(&loop, &s[i], on_exit_rec, NULL, &w, &why), want[i].err);
        assert_null(w);
        assert_non_null(why);
        if (!strstr(why, want[i].msg))
            fail_msg("case %d: '%s' does not say '%s'", i, why, want[i].msg);
        free(why);
    }
    loop_finish(&loop);
    remove_tmpdir(dir);
    hw_node_free(node);
}

/* stdout and stderr land in their own files, appended across starts, and
 * the working directory is the one asked for. */
static void test_logs(void **state)
{
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const char *argv[] = {"/bin/sh", "-c", "echo out-$CORRAL_WORKER_INDEX; pwd; echo err >&2",
                          NULL};
    for (int run = 0; run < 2; run++) {
        rec_t rec = {0};
        cr_worker_t *w;
        cr_worker_spec_t s = base_spec(argv, dir, "log");
        s.cwd = "/";
        s.worker_index = run;
        assert_int_equal(cr_worker_start(&loop, &s, on_exit_rec, &rec, &w, NULL), 0);
        assert_true(run_until(&loop, one_exited, &rec, 3000));
        assert_int_equal(rec.exit.code, 0);
        char *want_out = cr_asprintf("%s/log.out", dir);
        assert_string_equal(cr_worker_stdout_path(w), want_out);
        free(want_out);
        /* the descriptors it was given, once: the files at its paths,
         * write-only and appending (the agent bounds through them) */
        const char *paths[2] = {cr_worker_stdout_path(w), cr_worker_stderr_path(w)};
        for (int st = 0; st < 2; st++) {
            int fd = cr_worker_take_log_fd(w, st);
            assert_true(fd > 2);
            assert_int_equal(cr_worker_take_log_fd(w, st), -1);
            struct stat a, b;
            assert_int_equal(fstat(fd, &a), 0);
            assert_int_equal(stat(paths[st], &b), 0);
            assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
            assert_int_equal(fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND), O_WRONLY | O_APPEND);
            close(fd);
        }
        cr_worker_release(w);
    }
    char *p = cr_asprintf("%s/log.out", dir);
    char *out = slurp(p);
    free(p);
    p = cr_asprintf("%s/log.err", dir);
    char *err = slurp(p);
    free(p);
    assert_non_null(out);
    assert_non_null(err);
    assert_string_equal(out, "out-0\n/\nout-1\n/\n");
    assert_string_equal(err, "err\nerr\n");
    free(out);
    free(err);
    /* a worker sees no descriptor of the agent's beyond 0, 1 and 2, even
     * one without O_CLOEXEC, while another worker is watched (a pidfd) */
    int stray = open("/dev/null", O_RDONLY);
    assert_true(stray > 2);
    const char *sleeper[] = {"sleep", "30", NULL};
    const char *lsfd[] = {"/bin/ls", "/proc/self/fd", NULL};
    rec_t srec = {0}, lrec = {0};
    cr_worker_t *sw, *lw;
    cr_worker_spec_t ss = base_spec(sleeper, dir, "sleeper");
    cr_worker_spec_t ls = base_spec(lsfd, dir, "fds");
    assert_int_equal(cr_worker_start(&loop, &ss, on_exit_rec, &srec, &sw, NULL), 0);
    assert_int_equal(cr_worker_start(&loop, &ls, on_exit_rec, &lrec, &lw, NULL), 0);
    assert_true(run_until(&loop, one_exited, &lrec, 3000));
    char *fds = slurp(cr_worker_stdout_path(lw));
    assert_non_null(fds);
    assert_string_equal(fds, "0\n1\n2\n3\n"); /* 3: ls reading the directory */
    free(fds);
    close(stray);
    cr_worker_release(lw);
    cr_worker_release(sw);
    /* no log directory: output goes nowhere, the worker still runs */
    rec_t rec = {0};
    cr_worker_t *w;
    cr_worker_spec_t s = base_spec(argv, NULL, "quiet");
    assert_int_equal(cr_worker_start(&loop, &s, on_exit_rec, &rec, &w, NULL), 0);
    assert_null(cr_worker_stdout_path(w));
    assert_true(run_until(&loop, one_exited, &rec, 3000));
    assert_int_equal(rec.exit.code, 0);
    cr_worker_release(w);
    loop_finish(&loop);
    remove_tmpdir(dir);
}

/* The spare files in dir, as inode numbers (at most 16): how many. */
static int spare_inodes(const char *dir, ino_t *ino)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, ".spare-", 7) == 0) {
            struct stat sb;
            char *p = cr_asprintf("%s/%s", dir, e->d_name);
            assert_int_equal(lstat(p, &sb), 0);
            free(p);
            assert_true(n < 16);
            ino[n++] = sb.st_ino;
        }
    closedir(d);
    return n;
}

static ino_t ino_of(const char *dir, const char *name)
{
    struct stat sb;
    char *p = cr_asprintf("%s/%s", dir, name);
    assert_int_equal(lstat(p, &sb), 0);
    free(p);
    return sb.st_ino;
}

static bool has_ino(const ino_t *v, int n, ino_t x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return true;
    return false;
}

/* Runs worker wid of argv with its logs in dir (fresh: a first attempt)
 * to its end. */
static void run_logged(uv_loop_t *loop, const char *dir, const char *wid, bool fresh)
{
    const char *argv[] = {"/bin/sh", "-c", "echo out-$CORRAL_WORKER_ID; echo err >&2", NULL};
    rec_t rec = {0};
    cr_worker_t *w;
    cr_worker_spec_t s = base_spec(argv, dir, wid);
    s.log_fresh = fresh;
    assert_int_equal(cr_worker_start(loop, &s, on_exit_rec, &rec, &w, NULL), 0);
    assert_true(run_until(loop, one_exited, &rec, 3000));
    assert_int_equal(rec.exit.code, 0);
    cr_worker_release(w);
}

/* cr_envlist_merge gives what cr_envlist_set of each variable in turn
 * gives (a later one wins, the order of first appearance kept), small and
 * large (its table), and leaves out a bad name or a NULL value with
 * CR_EINVAL. */
static void test_envlist_merge(void **state)
{
    CR_UNUSED(state);
    for (int big = 0; big < 2; big++) {
        int n = big ? 5000 : 6;
        cr_envlist_t a = {0}, b = {0}, src = {0};
        for (int i = 0; i < n; i += 2) { /* dst: the even names */
            char k[32], v[32];
            snprintf(k, sizeof(k), "K%d", i);
            snprintf(v, sizeof(v), "dst%d", i);
            cr_envlist_set(&a, k, v);
            cr_envlist_set(&b, k, v);
        }
        for (int i = 0; i < n; i++) { /* src: all, some twice (pushed as a spec's are) */
            for (int rep = 0; rep < 1 + (i % 3 == 0); rep++) {
                cr_kv_t *kv = CR_VEC_PUSH(&src.vars);
                kv->key = cr_asprintf("K%d", i);
                kv->value = cr_asprintf("src%d-%d", i, rep);
            }
        }
        for (size_t i = 0; i < src.vars.n; i++)
            cr_envlist_set(&a, src.vars.v[i].key, src.vars.v[i].value);
        assert_int_equal(cr_envlist_merge(&b, &src), 0);
        assert_int_equal(a.vars.n, b.vars.n);
        assert_int_equal(b.vars.n, (size_t)n);
        for (size_t i = 0; i < a.vars.n; i++) {
            assert_string_equal(a.vars.v[i].key, b.vars.v[i].key);
            assert_string_equal(a.vars.v[i].value, b.vars.v[i].value);
        }
        assert_string_equal(cr_envlist_get(&b, "K0"), "src0-1");
        cr_envlist_free(&a);
        cr_envlist_free(&b);
        cr_envlist_free(&src);
    }
    cr_envlist_t d = {0}, bad = {0};
    cr_envlist_set(&d, "A", "1");
    for (int i = 0; i < 20; i++) { /* past the few that are scanned: the table's path */
        char k[16];
        snprintf(k, sizeof(k), "Z%d", i);
        cr_envlist_set(&d, k, "z");
    }
    const char *keys[] = {"B", "", "C=D", "E"};
    for (size_t i = 0; i < 4; i++) {
        cr_kv_t *kv = CR_VEC_PUSH(&bad.vars);
        kv->key = cr_strdup(keys[i]);
        kv->value = i == 3 ? NULL : cr_strdup("v");
    }
    assert_int_equal(cr_envlist_merge(&d, &bad), CR_EINVAL);
    assert_int_equal(d.vars.n, 22);
    assert_string_equal(cr_envlist_get(&d, "B"), "v");
    assert_null(cr_envlist_get(&d, "E"));
    assert_int_equal(cr_envlist_merge(&d, NULL), 0);
    cr_envlist_free(&d);
    cr_envlist_free(&bad);
}

/* Spare log files: none before a first worker says where logs go; then
 * fill makes 8 there, and a first attempt's two files are two of
 * them, renamed into place (the same inodes), with the worker's output; a name already there is
 * emptied as before (its spare kept); a later attempt appends and takes none; a new directory drops
 * the old one's spares and removes those a gone process left there; drop removes them all. */
static void test_log_spares(void **state)
{
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    ino_t sp[16];
    cr_worker_spares_fill();
    assert_int_equal(cr_worker_spares(), 0); /* no directory yet */
    run_logged(&loop, dir, "a", true);
    assert_int_equal(spare_inodes(dir, sp), 0);
    cr_worker_spares_fill();
    assert_int_equal(cr_worker_spares(), 8);
    assert_int_equal(spare_inodes(dir, sp), 8);

    run_logged(&loop, dir, "b", true);
    assert_int_equal(cr_worker_spares(), 6);
    assert_true(has_ino(sp, 8, ino_of(dir, "b.out")));
    assert_true(has_ino(sp, 8, ino_of(dir, "b.err")));
    char *p = cr_asprintf("%s/b.out", dir);
    char *out = slurp(p);
    free(p);
    assert_string_equal(out, "out-b\n");
    free(out);

    /* c.out is there already (an earlier head's job of the same id) */
    p = cr_asprintf("%s/c.out", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("old output\n", f);
    fclose(f);
    ino_t old = ino_of(dir, "c.out");
    run_logged(&loop, dir, "c", true);
    assert_int_equal(ino_of(dir, "c.out"), old);
    out = slurp(p);
    assert_string_equal(out, "out-c\n");
    free(out);
    assert_int_equal(cr_worker_spares(), 5); /* c.err took one */
    run_logged(&loop, dir, "c", false);      /* a second attempt appends */
    out = slurp(p);
    free(p);
    assert_string_equal(out, "out-c\nout-c\n");
    free(out);
    assert_int_equal(cr_worker_spares(), 5);

    /* another directory, with a spare a gone process left and one of a
     * live process (this one's parent) */
    char *dir2 = make_tmpdir();
    int gone = 0;
    for (int pid = 4000000; pid > 300000 && !gone; pid -= 7919)
        if (kill(pid, 0) < 0 && errno == ESRCH)
            gone = pid;
    assert_true(gone > 0);
    char *stale = cr_asprintf("%s/.spare-%d-3", dir2, gone);
    char *live = cr_asprintf("%s/.spare-%d-3", dir2, (int)getppid());
    assert_true(close(open(stale, O_WRONLY | O_CREAT, 0644)) == 0);
    assert_true(close(open(live, O_WRONLY | O_CREAT, 0644)) == 0);
    run_logged(&loop, dir2, "d", true);
    assert_int_equal(cr_worker_spares(), 0);
    assert_int_equal(spare_inodes(dir, sp), 0); /* the old directory's: removed */
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(access(live, F_OK), 0);
    cr_worker_spares_fill();
    assert_int_equal(spare_inodes(dir2, sp), 9); /* 8 and the live one's */
    cr_worker_spares_drop();
    assert_int_equal(cr_worker_spares(), 0);
    assert_int_equal(spare_inodes(dir2, sp), 1);
    free(stale);
    free(live);
    loop_finish(&loop);
    remove_tmpdir(dir2);
    remove_tmpdir(dir);
}

static size_t files_in(const char *d)
{
    DIR *dir = opendir(d);
    assert_non_null(dir);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(dir)))
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

/* A worker's output files in dir, new, modified at mtime (0: now). */
static void touch_worker(const char *dir, const char *id, time_t mtime)
{
    for (int x = 0; x < 2; x++) {
        char *p = cr_asprintf("%s/%s.%s", dir, id, x ? "err" : "out");
        assert_true(close(open(p, O_WRONLY | O_CREAT | O_EXCL, 0644)) == 0);
        struct timespec ts[2] = {{.tv_sec = mtime}, {.tv_sec = mtime}};
        if (mtime)
            assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
        free(p);
    }
}

/* An agent's files of finished workers over its count go a batch (512
 * workers) a sweep, the oldest first; a sweep that removed a whole batch
 * says the next is due soon (agent_keep_behind: 100 ms, not a second),
 * so workers that end faster than a batch a second do not pile up. */
static void test_keep_catches_up(void **state)
{
    CR_UNUSED(state);
    char *dir = make_tmpdir();
    time_t t0 = time(NULL) - 1000; /* ended in the last 1,000 s, a second apart */
    for (int i = 0; i < 600; i++) {
        char id[32];
        snprintf(id, sizeof(id), "job%d-w0", i);
        touch_worker(dir, id, t0 + i);
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    const agent_t *none = NULL;
    agent_keep_t *k = agent_keep_new(&loop, dir, &none, 10, 24 * 3600 * 1000LL);
    int64_t now = cr_wall_ms();
    assert_int_equal(agent_keep_sweep(k, now), 512);
    assert_true(agent_keep_behind(k));
    assert_int_equal(files_in(dir), 2 * 88);
    char first[96];
    snprintf(first, sizeof(first), "%s/job511-w0.out", dir); /* the oldest went */
    assert_int_equal(access(first, F_OK), -1);
    snprintf(first, sizeof(first), "%s/job512-w0.out", dir);
    assert_int_equal(access(first, F_OK), 0);
    assert_int_equal(agent_keep_sweep(k, now), 78);
    assert_false(agent_keep_behind(k));
    assert_int_equal(files_in(dir), 2 * 10);
    assert_int_equal(agent_keep_sweep(k, now), 0);
    agent_keep_free(k);
    loop_finish(&loop);
    remove_tmpdir(dir);
}

static bool worker_files(const char *dir, const char *id)
{
    char *p = cr_asprintf("%s/%s.out", dir, id);
    bool there = access(p, F_OK) == 0;
    free(p);
    return there;
}

/* A worker that ends again (a restart on this node appends to the same
 * files) counts once, at its newest end: found among the ids kept through
 * their table, also after many came and went (its deletions keep every
 * other id findable). */
static void test_keep_restart_counts_once(void **state)
{
    CR_UNUSED(state);
    char *dir = make_tmpdir();
    uv_loop_t loop;
    uv_loop_init(&loop);
    const agent_t *none = NULL;
    agent_keep_t *k = agent_keep_new(&loop, dir, &none, 3, 24 * 3600 * 1000LL);
    int64_t t = cr_wall_ms();
    const char *ids[] = {"jobA-w0", "jobB-w0", "jobC-w0", "jobD-w0"};
    for (int i = 0; i < 4; i++)
        touch_worker(dir, ids[i], 0);
    agent_keep_ended(k, ids[0], t);
    agent_keep_ended(k, ids[1], t + 1);
    agent_keep_ended(k, ids[2], t + 2);
    agent_keep_ended(k, ids[0], t + 3); /* A again: 3 workers, not 4 */
    assert_int_equal(agent_keep_sweep(k, t + 4), 0);
    agent_keep_ended(k, ids[3], t + 5);
    assert_int_equal(agent_keep_sweep(k, t + 6), 1); /* the oldest end now: B's */
    assert_false(worker_files(dir, ids[1]));
    assert_true(worker_files(dir, ids[0]));
    assert_true(worker_files(dir, ids[2]));
    assert_true(worker_files(dir, ids[3]));
    agent_keep_free(k);

    /* many: 3,000 end, the oldest swept a batch at a time down to 100;
     * then each of those ends again, some twice, and they still count
     * 100 (an id the table lost would count twice and one would go) */
    remove_tmpdir(dir);
    dir = make_tmpdir();
    k = agent_keep_new(&loop, dir, &none, 100, 24 * 3600 * 1000LL);
    char id[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(id, sizeof(id), "job%d-w%d", i / 4, i % 4);
        agent_keep_ended(k, id, t + i);
    }
    size_t gone = 0;
    for (int i = 0; i < 8; i++)
        gone += agent_keep_sweep(k, t + 3000);
    assert_int_equal(gone, 2900);
    for (int again = 0; again < 2; again++)
        for (int i = 2900; i < 3000; i += again ? 7 : 1) {
            snprintf(id, sizeof(id), "job%d-w%d", i / 4, i % 4);
            agent_keep_ended(k, id, t + 4000 + again * 1000 + i);
        }
    assert_int_equal(agent_keep_sweep(k, t + 6000), 0);
    agent_keep_ended(k, "job750-w0", t + 7000); /* one more than 100: one goes */
    assert_int_equal(agent_keep_sweep(k, t + 7001), 1);
    assert_int_equal(agent_keep_sweep(k, t + 7002), 0);
    agent_keep_free(k);
    loop_finish(&loop);
    remove_tmpdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gang_env_dgx),
        cmocka_unit_test(test_envlist_merge),
        cmocka_unit_test(test_env_multi_device),
        cmocka_unit_test(test_tpu_env),
        cmocka_unit_test(test_env_mixed_vendors),
        cmocka_unit_test(test_affinity),
        cmocka_unit_test(test_bind_mode_names),
        cmocka_unit_test(test_stop_ignores_term),
        cmocka_unit_test(test_stop_stopped_worker),
        cmocka_unit_test(test_stop_group_drains),
        cmocka_unit_test(test_stop_graceful),
        cmocka_unit_test(test_leftovers_killed),
        cmocka_unit_test(test_release_running),
        cmocka_unit_test(test_exit_codes_and_signals),
        cmocka_unit_test(test_exec_failure),
        cmocka_unit_test(test_bad_spec),
        cmocka_unit_test(test_logs),
        cmocka_unit_test(test_log_spares),
        cmocka_unit_test(test_keep_catches_up),
        cmocka_unit_test(test_keep_restart_counts_once),
    };
    int failed = cmocka_run_group_tests_name("pidfd", tests, NULL, NULL);
    /* again on the path of kernels without pidfd_open: SIGCHLD */
    setenv("CORRAL_TEST_NO_PIDFD", "1", 1);
    failed += cmocka_run_group_tests_name("sigchld", tests, NULL, NULL);
    return failed;
}
