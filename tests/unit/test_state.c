/* head/state: every call, all-or-nothing transactions, crash durability
 * (a child SIGKILLed while committing), and the failures an operator
 * meets: unwritable directory, read-only file, full disk, newer schema,
 * damaged file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include "base/base.h"
#include "head/state.h"
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct tdir {
    char dir[64];
    char db[128];
} tdir_t;

static void tdir_make(tdir_t *t)
{
    cr_strlcpy(t->dir, "/tmp/corral-state-XXXXXX", sizeof(t->dir));
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->db, sizeof(t->db), "%s/state.db", t->dir);
}

static void tdir_remove(tdir_t *t)
{
    char cmd[128];
    chmod(t->dir, 0700);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    assert_int_equal(system(cmd), 0);
}

static cr_state_t *open_ok(const char *path)
{
    char err[CR_STATE_ERRMSG_MAX] = "";
    cr_state_t *st = NULL;
    int rc = cr_state_open(path, &st, err, sizeof(err));
    if (rc)
        fail_msg("open %s: %s: %s", path, cr_err_name(rc), err);
    assert_non_null(st);
    return st;
}

static int64_t sql_int(cr_state_t *st, const char *sql)
{
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(cr__state_db(st), sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

static void sql_exec(cr_state_t *st, const char *sql)
{
    char *e = NULL;
    int rc = sqlite3_exec(cr__state_db(st), sql, NULL, NULL, &e);
    if (rc != SQLITE_OK)
        fail_msg("%s: %s", sql, e);
}

static int64_t new_job(cr_state_t *st, const char *name, int64_t now)
{
    cr_state_job_t j = {.name = (char *)name,
                        .spec_json = "{\"workers\":2}",
                        .state = CR_JOB_PENDING,
                        .restart_policy = CR_RESTART_GANG,
                        .max_restarts = 3};
    int64_t id = 0;
    assert_int_equal(cr_state_job_create(st, &j, now, &id), 0);
    assert_true(id > 0);
    return id;
}

static void new_worker(cr_state_t *st, int64_t job, int index, const char *node, int64_t now)
{
    cr_state_worker_t w = {
        .job_id = job, .index = index, .node_id = (char *)node, .state = CR_WORKER_PENDING};
    assert_int_equal(cr_state_worker_create(st, &w, now), 0);
}

/* ---- the database ---- */

static void test_open_settings_generation(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    assert_int_equal(cr_state_generation(st), 1);
    assert_string_equal(cr_state_path(st), t.db);
    assert_string_equal(cr_state_errmsg(st), "");
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(cr__state_db(st), "PRAGMA journal_mode", -1, &s, NULL), 0);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "wal");
    sqlite3_finalize(s);
    assert_int_equal(sql_int(st, "PRAGMA synchronous"), 1); /* NORMAL */
    assert_int_equal(sql_int(st, "PRAGMA foreign_keys"), 1);
    assert_int_equal(sql_int(st, "SELECT version FROM schema_version"), CR_STATE_SCHEMA_VERSION);
    assert_int_equal(cr_state_check(st), 0);
    cr_state_close(st);
    st = open_ok(t.db);
    assert_int_equal(cr_state_generation(st), 2);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM schema_version"), 1);
    cr_state_close(st);
    cr_state_close(NULL);
    char err[CR_STATE_ERRMSG_MAX];
    assert_int_equal(cr_state_open("", &st, err, sizeof(err)), CR_EINVAL);
    assert_null(st);
    tdir_remove(&t);
}

static void test_names(void **state)
{
    assert_string_equal(cr_job_state_name(CR_JOB_SUCCEEDED), "SUCCEEDED");
    assert_string_equal(cr_node_state_name(CR_NODE_SUSPECT), "SUSPECT");
    assert_string_equal(cr_worker_state_name(CR_WORKER_LOST), "LOST");
    assert_string_equal(cr_pg_state_name(CR_PG_PREPARED), "PREPARED");
    assert_string_equal(cr_pg_strategy_name(CR_PG_STRICT_SPREAD), "STRICT_SPREAD");
    assert_string_equal(cr_restart_policy_name(CR_RESTART_WORKER), "worker");
    assert_string_equal(cr_job_state_name((cr_job_state_t)42), "UNKNOWN");
    cr_job_state_t js;
    assert_int_equal(cr_job_state_parse("PLACING", &js), 0);
    assert_int_equal(js, CR_JOB_PLACING);
    assert_int_equal(cr_job_state_parse("placing", &js), CR_EINVAL);
    cr_pg_strategy_t ps;
    assert_int_equal(cr_pg_strategy_parse("STRICT_PACK", &ps), 0);
    assert_int_equal(ps, CR_PG_STRICT_PACK);
    assert_int_equal(cr_pg_strategy_parse(NULL, &ps), CR_EINVAL);
    assert_true(cr_job_state_is_final(CR_JOB_STOPPED));
    assert_false(cr_job_state_is_final(CR_JOB_RUNNING));
}

/* The head forks workers: none of them may inherit the database's file
 * descriptors (the file, -wal, -shm). */
static void test_fds_close_on_exec(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    new_job(st, "j", 1); /* the -wal and -shm files are open now */
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    struct dirent *e;
    int seen = 0;
    while ((e = readdir(d))) {
        char link[300], target[256];
        snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(link, target, sizeof(target) - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        if (!cr_str_has_prefix(target, t.dir))
            continue;
        seen++;
        int flags = fcntl(atoi(e->d_name), F_GETFD);
        if (flags < 0 || !(flags & FD_CLOEXEC))
            fail_msg("%s is open without FD_CLOEXEC", target);
    }
    closedir(d);
    assert_true(seen >= 2); /* state.db and state.db-wal at least */
    cr_state_close(st);
    tdir_remove(&t);
}

/* ---- nodes ---- */

static void test_nodes(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    cr_state_node_t n = {.id = "node-b",
                         .incarnation = 1,
                         .address = "127.0.0.1:7000",
                         .state = CR_NODE_ALIVE,
                         .desc_json = "{\"gpus\":8}",
                         .last_heartbeat_ms = 100};
    assert_int_equal(cr_state_node_put(st, &n, 100), 0);
    n.id = "node-a";
    n.desc_json = NULL;
    assert_int_equal(cr_state_node_put(st, &n, 101), 0);
    /* the node rejoins: a new incarnation replaces the record */
    n.id = "node-b";
    n.incarnation = 2;
    n.address = "127.0.0.2:7000";
    assert_int_equal(cr_state_node_put(st, &n, 150), 0);
    assert_int_equal(cr_state_node_set_state(st, "node-b", CR_NODE_SUSPECT, 160), 0);
    assert_int_equal(cr_state_node_heartbeat(st, "node-b", 170), 0);

    cr_state_node_t g;
    assert_int_equal(cr_state_node_get(st, "node-b", &g), 0);
    assert_string_equal(g.id, "node-b");
    assert_int_equal(g.incarnation, 2);
    assert_string_equal(g.address, "127.0.0.2:7000");
    assert_int_equal(g.state, CR_NODE_SUSPECT);
    assert_null(g.desc_json); /* replaced by the second put */
    assert_int_equal(g.last_heartbeat_ms, 170);
    assert_int_equal(g.updated_ms, 160);
    cr_state_node_free(&g);

    cr_state_node_t *v;
    size_t cnt;
    assert_int_equal(cr_state_node_list(st, &v, &cnt), 0);
    assert_int_equal(cnt, 2);
    assert_string_equal(v[0].id, "node-a");
    assert_string_equal(v[1].id, "node-b");
    cr_state_node_list_free(v, cnt);

    assert_int_equal(cr_state_node_get(st, "node-z", &g), CR_ENOENT);
    assert_non_null(strstr(cr_state_errmsg(st), "node node-z"));
    assert_non_null(strstr(cr_state_errmsg(st), t.db));
    assert_int_equal(cr_state_node_set_state(st, "node-z", CR_NODE_DEAD, 1), CR_ENOENT);
    assert_int_equal(cr_state_node_heartbeat(st, "node-z", 1), CR_ENOENT);
    assert_int_equal(cr_state_node_set_state(st, "node-a", (cr_node_state_t)7, 1), CR_EINVAL);
    n.id = NULL;
    assert_int_equal(cr_state_node_put(st, &n, 1), CR_EINVAL); /* the key is NOT NULL */
    assert_int_equal(cr_state_node_delete(st, "node-a"), 0);
    assert_int_equal(cr_state_node_delete(st, "node-a"), CR_ENOENT);
    assert_int_equal(cr_state_node_list(st, &v, &cnt), 0);
    assert_int_equal(cnt, 1);
    cr_state_node_list_free(v, cnt);
    cr_state_close(st);
    tdir_remove(&t);
}

/* ---- jobs and workers ---- */

static void test_jobs(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    int64_t a = new_job(st, "train", 1000);
    int64_t b = new_job(st, NULL, 1001);
    assert_true(b > a);
    assert_int_equal(
        cr_state_job_set_state(st, a, CR_JOB_FAILED, "worker 1 exited with code 3", 1100), 0);
    assert_int_equal(cr_state_job_set_restarts(st, a, 2, 1101), 0);

    cr_state_job_t j;
    assert_int_equal(cr_state_job_get(st, a, &j), 0);
    assert_int_equal(j.id, a);
    assert_string_equal(j.name, "train");
    assert_string_equal(j.spec_json, "{\"workers\":2}");
    assert_int_equal(j.state, CR_JOB_FAILED);
    assert_string_equal(j.reason, "worker 1 exited with code 3");
    assert_int_equal(j.restart_policy, CR_RESTART_GANG);
    assert_int_equal(j.max_restarts, 3);
    assert_int_equal(j.restarts, 2);
    assert_int_equal(j.created_ms, 1000);
    assert_int_equal(j.updated_ms, 1101);
    cr_state_job_free(&j);
    assert_int_equal(cr_state_job_get(st, b, &j), 0);
    assert_null(j.name);
    assert_null(j.reason);
    cr_state_job_free(&j);

    cr_state_job_t *v;
    size_t n;
    assert_int_equal(cr_state_job_list(st, false, &v, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(v[0].id, a);
    assert_int_equal(v[1].id, b);
    cr_state_job_list_free(v, n);
    assert_int_equal(cr_state_job_list(st, true, &v, &n), 0); /* a failed: not active */
    assert_int_equal(n, 1);
    assert_int_equal(v[0].id, b);
    cr_state_job_list_free(v, n);

    /* bad values never reach the file */
    cr_state_job_t bad = {
        .spec_json = "{}", .state = CR_JOB_PENDING, .restart_policy = (cr_restart_policy_t)9};
    int64_t id;
    assert_int_equal(cr_state_job_create(st, &bad, 1, &id), CR_EINVAL);
    bad.restart_policy = CR_RESTART_NONE;
    bad.max_restarts = -1;
    assert_int_equal(cr_state_job_create(st, &bad, 1, &id), CR_EINVAL);
    bad.max_restarts = 0;
    bad.spec_json = NULL;
    assert_int_equal(cr_state_job_create(st, &bad, 1, &id), CR_EINVAL);
    assert_int_equal(cr_state_job_set_restarts(st, a, -1, 1), CR_EINVAL);
    assert_int_equal(cr_state_job_set_state(st, 999, CR_JOB_RUNNING, NULL, 1), CR_ENOENT);
    assert_non_null(strstr(cr_state_errmsg(st), "job 999"));
    assert_int_equal(cr_state_job_get(st, 999, &j), CR_ENOENT);

    /* a deleted job takes its workers along, and its id is never reused */
    new_worker(st, b, 0, "n1", 1);
    assert_int_equal(cr_state_job_delete(st, b), 0);
    assert_int_equal(cr_state_job_delete(st, b), CR_ENOENT);
    cr_state_worker_t *w;
    assert_int_equal(cr_state_worker_list(st, 0, NULL, &w, &n), 0);
    assert_int_equal(n, 0);
    assert_null(w);
    assert_true(new_job(st, "next", 2000) > b);
    cr_state_close(st);
    tdir_remove(&t);
}

static void test_workers(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    int64_t a = new_job(st, "a", 1), b = new_job(st, "b", 1);
    new_worker(st, a, 1, "n1", 10);
    new_worker(st, a, 0, "n2", 10);
    new_worker(st, b, 0, "n1", 10);
    cr_state_worker_t w = {.job_id = a, .index = 0, .state = CR_WORKER_PENDING};
    assert_int_equal(cr_state_worker_create(st, &w, 1), CR_EEXIST);
    assert_non_null(strstr(cr_state_errmsg(st), "worker 0 of job"));
    w.job_id = 4242; /* no such job: the foreign key says so */
    assert_int_equal(cr_state_worker_create(st, &w, 1), CR_ENOENT);
    w.job_id = a;
    w.index = -1;
    assert_int_equal(cr_state_worker_create(st, &w, 1), CR_EINVAL);

    cr_state_worker_t u = {.job_id = a,
                           .index = 1,
                           .node_id = "n3",
                           .devices = "2,3",
                           .pid = 4321,
                           .pgid = 4321,
                           .start_time = 123456789,
                           .state = CR_WORKER_EXITED,
                           .exit_code = 0,
                           .exit_signal = 9,
                           .restarts = 1,
                           .stdout_path = "/tmp/o",
                           .stderr_path = "/tmp/e",
                           .output_lost = 5000000000ull};
    assert_int_equal(cr_state_worker_update(st, &u, 50), 0);
    assert_int_equal(cr_state_worker_set_state(st, a, 0, CR_WORKER_RUNNING, 60), 0);
    u.index = 7;
    assert_int_equal(cr_state_worker_update(st, &u, 50), CR_ENOENT);
    assert_int_equal(cr_state_worker_set_state(st, a, 7, CR_WORKER_RUNNING, 60), CR_ENOENT);

    cr_state_worker_t g;
    assert_int_equal(cr_state_worker_get(st, a, 1, &g), 0);
    assert_int_equal(g.job_id, a);
    assert_int_equal(g.index, 1);
    assert_string_equal(g.node_id, "n3");
    assert_string_equal(g.devices, "2,3");
    assert_int_equal(g.pid, 4321);
    assert_int_equal(g.pgid, 4321);
    assert_int_equal(g.start_time, 123456789);
    assert_int_equal(g.state, CR_WORKER_EXITED);
    assert_int_equal(g.exit_signal, 9);
    assert_int_equal(g.restarts, 1);
    assert_string_equal(g.stdout_path, "/tmp/o");
    assert_string_equal(g.stderr_path, "/tmp/e");
    assert_true(g.output_lost == 5000000000ull);
    assert_int_equal(g.updated_ms, 50);
    cr_state_worker_free(&g);
    assert_int_equal(cr_state_worker_get(st, a, 0, &g), 0);
    assert_int_equal(g.state, CR_WORKER_RUNNING);
    assert_null(g.devices);
    cr_state_worker_free(&g);
    assert_int_equal(cr_state_worker_get(st, a, 5, &g), CR_ENOENT);

    cr_state_worker_t *v;
    size_t n;
    assert_int_equal(cr_state_worker_list(st, a, NULL, &v, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(v[0].index, 0);
    assert_int_equal(v[1].index, 1);
    cr_state_worker_list_free(v, n);
    assert_int_equal(cr_state_worker_list(st, 0, "n1", &v, &n), 0);
    assert_int_equal(n, 1); /* a's worker 1 moved to n3 */
    assert_int_equal(v[0].job_id, b);
    cr_state_worker_list_free(v, n);
    assert_int_equal(cr_state_worker_list(st, 0, NULL, &v, &n), 0);
    assert_int_equal(n, 3);
    cr_state_worker_list_free(v, n);
    cr_state_close(st);
    tdir_remove(&t);
}

/* ---- placement groups ---- */

static void test_pgs(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    cr_state_bundle_t b[3] = {{.index = 0, .resources_json = "{\"GPU\":4}"},
                              {.index = 1, .resources_json = "{\"GPU\":4}"},
                              {.index = 2, .resources_json = "{\"CPU\":1}", .node_id = "n9"}};
    cr_state_pg_t pg = {.name = "slice",
                        .strategy = CR_PG_STRICT_SPREAD,
                        .state = CR_PG_PENDING,
                        .bundles = b,
                        .n_bundles = 3};
    int64_t id = 0, id2 = 0;
    assert_int_equal(cr_state_pg_create(st, &pg, 500, &id), 0);
    assert_true(id > 0);
    assert_int_equal(cr_state_pg_create(st, &pg, 501, &id2), CR_EEXIST); /* same name */
    assert_non_null(strstr(cr_state_errmsg(st), "already taken"));
    pg.name = NULL;
    b[1].index = 5;
    assert_int_equal(cr_state_pg_create(st, &pg, 501, &id2), CR_EINVAL);
    b[1].index = 1;
    b[2].resources_json = NULL; /* fails on the last bundle: no group is left behind */
    assert_int_equal(cr_state_pg_create(st, &pg, 501, &id2), CR_EINVAL);
    cr_state_pg_t *v;
    size_t n;
    assert_int_equal(cr_state_pg_list(st, &v, &n), 0);
    assert_int_equal(n, 1);
    cr_state_pg_list_free(v, n);
    b[2].resources_json = "{}";
    pg.n_bundles = 0;
    assert_int_equal(cr_state_pg_create(st, &pg, 502, &id2), 0);

    assert_int_equal(cr_state_pg_set_bundle(st, id, 0, "n1", "0,1,2,3", 510), 0);
    assert_int_equal(cr_state_pg_set_bundle(st, id, 1, "n2", "4,5,6,7", 511), 0);
    assert_int_equal(cr_state_pg_set_bundle(st, id, 3, "n2", NULL, 512), CR_ENOENT);
    assert_int_equal(cr_state_pg_set_bundle(st, 9999, 0, "n2", NULL, 512), CR_ENOENT);
    assert_int_equal(cr_state_pg_set_state(st, id, CR_PG_CREATED, 520), 0);
    assert_int_equal(cr_state_pg_set_state(st, 9999, CR_PG_CREATED, 520), CR_ENOENT);

    cr_state_pg_t g;
    assert_int_equal(cr_state_pg_get_by_name(st, "slice", &g), 0);
    assert_int_equal(g.id, id);
    assert_string_equal(g.name, "slice");
    assert_int_equal(g.strategy, CR_PG_STRICT_SPREAD);
    assert_int_equal(g.state, CR_PG_CREATED);
    assert_int_equal(g.created_ms, 500);
    assert_int_equal(g.updated_ms, 520);
    assert_int_equal(g.n_bundles, 3);
    assert_string_equal(g.bundles[0].node_id, "n1");
    assert_string_equal(g.bundles[1].devices, "4,5,6,7");
    assert_string_equal(g.bundles[2].node_id, "n9");
    assert_null(g.bundles[2].devices);
    assert_string_equal(g.bundles[2].resources_json, "{\"CPU\":1}");
    cr_state_pg_free(&g);
    assert_int_equal(cr_state_pg_get(st, id2, &g), 0);
    assert_null(g.name);
    assert_int_equal(g.n_bundles, 0);
    cr_state_pg_free(&g);
    assert_int_equal(cr_state_pg_get_by_name(st, "nope", &g), CR_ENOENT);
    assert_int_equal(cr_state_pg_get_by_name(st, NULL, &g), CR_EINVAL);
    assert_int_equal(cr_state_pg_get(st, 9999, &g), CR_ENOENT);

    assert_int_equal(cr_state_pg_list(st, &v, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(v[0].n_bundles, 3);
    assert_int_equal(v[1].n_bundles, 0);
    cr_state_pg_list_free(v, n);
    assert_int_equal(cr_state_pg_delete(st, id), 0);
    assert_int_equal(cr_state_pg_delete(st, id), CR_ENOENT);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM bundles"), 0);
    cr_state_close(st);
    tdir_remove(&t);
}

/* ---- events ---- */

static void test_events(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    int64_t job = new_job(st, "j", 1);
    int64_t ids[5];
    for (int i = 0; i < 5; i++) {
        cr_state_event_t e = {.time_ms = 100 + i,
                              .kind = i % 2 ? "started" : "placed",
                              .job_id = i < 3 ? job : 0,
                              .node_id = i == 4 ? "n1" : NULL,
                              .pg_id = i == 2 ? 77 : 0,
                              .message = i == 3 ? NULL : "hello"};
        assert_int_equal(cr_state_event_append(st, &e, &ids[i]), 0);
        if (i)
            assert_true(ids[i] > ids[i - 1]);
    }
    cr_state_event_t bad = {.time_ms = 1, .kind = NULL};
    assert_int_equal(cr_state_event_append(st, &bad, NULL), CR_EINVAL);

    cr_state_event_t *v;
    size_t n;
    assert_int_equal(cr_state_event_list(st, 0, 0, &v, &n), 0);
    assert_int_equal(n, 5);
    assert_int_equal(v[0].id, ids[0]);
    assert_int_equal(v[0].time_ms, 100);
    assert_string_equal(v[0].kind, "placed");
    assert_int_equal(v[0].job_id, job);
    assert_null(v[0].node_id);
    assert_int_equal(v[2].pg_id, 77);
    assert_string_equal(v[3].message, "");
    assert_int_equal(v[3].job_id, 0);
    assert_string_equal(v[4].node_id, "n1");
    cr_state_event_list_free(v, n);
    assert_int_equal(cr_state_event_list(st, ids[1], 2, &v, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(v[0].id, ids[2]);
    assert_int_equal(v[1].id, ids[3]);
    cr_state_event_list_free(v, n);
    assert_int_equal(cr_state_event_list(st, ids[4], 0, &v, &n), 0);
    assert_int_equal(n, 0);
    cr_state_event_list_free(v, n);

    /* a job's own events (ids 0..2), its newest after an id, oldest
     * first, read through the index on the job (the plan says so) */
    assert_int_equal(cr_state_event_list_job(st, job, 0, 0, true, &v, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(v[0].id, ids[0]);
    assert_int_equal(v[2].id, ids[2]);
    cr_state_event_list_free(v, n);
    assert_int_equal(cr_state_event_list_job(st, job, 0, 2, true, &v, &n), 0);
    assert_int_equal(n, 2); /* the newest 2 */
    assert_int_equal(v[0].id, ids[1]);
    assert_int_equal(v[1].id, ids[2]);
    cr_state_event_list_free(v, n);
    assert_int_equal(cr_state_event_list_job(st, job, ids[1], 0, true, &v, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(v[0].id, ids[2]);
    cr_state_event_list_free(v, n);
    assert_int_equal(cr_state_event_list_job(st, job, 0, 2, false, &v, &n), 0);
    assert_int_equal(n, 2); /* the oldest 2 (a stream's next) */
    assert_int_equal(v[0].id, ids[0]);
    assert_int_equal(v[1].id, ids[1]);
    cr_state_event_list_free(v, n);
    assert_int_equal(cr_state_event_list_job(st, job + 1, 0, 0, true, &v, &n), 0);
    assert_int_equal(n, 0);
    cr_state_event_list_free(v, n);
    sqlite3_stmt *plan;
    assert_int_equal(sqlite3_prepare_v2(cr__state_db(st),
                                        "EXPLAIN QUERY PLAN SELECT id FROM events WHERE job_id = 1 "
                                        "AND id > 0 ORDER BY id DESC LIMIT 5",
                                        -1, &plan, NULL),
                     SQLITE_OK);
    bool indexed = false;
    while (sqlite3_step(plan) == SQLITE_ROW)
        indexed |= strstr((const char *)sqlite3_column_text(plan, 3), "INDEX events_job") != NULL;
    sqlite3_finalize(plan);
    assert_true(indexed);

    /* the k-th newest, for a listing of the newest k; counted after an id */
    int64_t kth;
    size_t cnt;
    assert_int_equal(cr_state_event_newest(st, 1, &kth), 0);
    assert_int_equal(kth, ids[4]);
    assert_int_equal(cr_state_event_newest(st, 3, &kth), 0);
    assert_int_equal(kth, ids[2]);
    assert_int_equal(cr_state_event_newest(st, 6, &kth), 0);
    assert_int_equal(kth, 0); /* fewer than 6 */
    assert_int_equal(cr_state_event_newest(st, 0, &kth), 0);
    assert_int_equal(kth, 0);
    assert_int_equal(cr_state_event_count(st, ids[1], &cnt), 0);
    assert_int_equal(cnt, 3);
    assert_int_equal(cr_state_event_count(st, 0, &cnt), 0);
    assert_int_equal(cnt, 5);

    /* a removed job's events go through the same index (retention), the
     * others stay */
    assert_int_equal(sqlite3_prepare_v2(cr__state_db(st),
                                        "EXPLAIN QUERY PLAN DELETE FROM events WHERE job_id = 1",
                                        -1, &plan, NULL),
                     SQLITE_OK);
    indexed = false;
    while (sqlite3_step(plan) == SQLITE_ROW)
        indexed |= strstr((const char *)sqlite3_column_text(plan, 3), "INDEX events_job") != NULL;
    sqlite3_finalize(plan);
    assert_true(indexed);
    assert_int_equal(cr_state_event_delete_job(st, job + 1), 0);
    assert_int_equal(cr_state_event_count(st, 0, &cnt), 0);
    assert_int_equal(cnt, 5);
    assert_int_equal(cr_state_event_delete_job(st, job), 0);
    assert_int_equal(cr_state_event_list(st, 0, 0, &v, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(v[0].id, ids[3]);
    assert_int_equal(v[1].id, ids[4]);
    cr_state_event_list_free(v, n);

    /* trimmed ids are never handed out again (a client reading
     * list-since(id) must not miss or repeat one) */
    assert_int_equal(cr_state_event_trim(st, ids[4]), 0);
    assert_int_equal(cr_state_event_list(st, 0, 0, &v, &n), 0);
    assert_int_equal(n, 0);
    cr_state_close(st);
    st = open_ok(t.db);
    cr_state_event_t e = {.time_ms = 200, .kind = "restarted", .message = "m"};
    int64_t next;
    assert_int_equal(cr_state_event_append(st, &e, &next), 0);
    assert_true(next > ids[4]);
    cr_state_close(st);
    tdir_remove(&t);
}

/* ---- transactions ---- */

static void test_transaction_commit_and_rollback(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    int64_t job = new_job(st, "gang", 1);
    new_worker(st, job, 0, "n1", 1);
    new_worker(st, job, 1, "n1", 1);

    /* the job and its workers change state together */
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_begin(st), 0); /* nested: part of the outer one */
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_RUNNING, "placed", 10), 0);
    assert_int_equal(cr_state_commit(st), 0); /* the inner: nothing committed yet */
    assert_int_equal(cr_state_worker_set_state(st, job, 0, CR_WORKER_RUNNING, 10), 0);
    assert_int_equal(cr_state_worker_set_state(st, job, 1, CR_WORKER_RUNNING, 10), 0);
    /* a read that finds nothing dooms nothing */
    cr_state_job_t j;
    assert_int_equal(cr_state_job_get(st, 777, &j), CR_ENOENT);
    assert_int_equal(cr_state_commit(st), 0);
    assert_int_equal(cr_state_commit(st), CR_EINVAL);
    assert_int_equal(cr_state_job_get(st, job, &j), 0);
    assert_int_equal(j.state, CR_JOB_RUNNING);
    cr_state_job_free(&j);

    /* an explicit rollback undoes everything since begin */
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_STOPPED, "stop", 20), 0);
    cr_state_event_t e = {.time_ms = 20, .kind = "stopped", .job_id = job, .message = "x"};
    assert_int_equal(cr_state_event_append(st, &e, NULL), 0);
    cr_state_rollback(st);
    cr_state_rollback(st); /* harmless without a transaction */
    /* an inner rollback dooms the outer transaction */
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_STOPPED, "inner", 21), 0);
    cr_state_rollback(st);
    assert_int_not_equal(cr_state_commit(st), 0);
    assert_int_equal(cr_state_job_get(st, job, &j), 0);
    assert_int_equal(j.state, CR_JOB_RUNNING);
    cr_state_job_free(&j);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM events"), 0);

    /* pins the inner commit's answer (head/state.c cr_state_commit): a
     * write that failed inside a nested transaction fails the inner commit
     * with its error, so its caller does not answer it as done */
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_begin(st), 0);
    cr_state_worker_t dup = {.job_id = job, .index = 0, .state = CR_WORKER_PENDING};
    assert_int_equal(cr_state_worker_create(st, &dup, 22), CR_EEXIST);
    assert_int_equal(cr_state_commit(st), CR_EEXIST);
    assert_int_equal(cr_state_commit(st), CR_EEXIST);

    /* the injected fault (cr_state_fault_commit): the next outer commit
     * fails as on a file made read-only, with that message, and rolls back */
    cr_state_fault_commit(st, 1, SQLITE_READONLY);
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_STOPPED, "faulted", 23), 0);
    assert_int_equal(cr_state_commit(st), CR_EACCES);
    assert_non_null(strstr(cr_state_errmsg(st), "read-only"));
    assert_int_equal(cr_state_job_get(st, job, &j), 0);
    assert_int_equal(j.state, CR_JOB_RUNNING);
    cr_state_job_free(&j);

    /* closing with an open transaction rolls it back */
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_FAILED, "x", 30), 0);
    cr_state_close(st);
    st = open_ok(t.db);
    assert_int_equal(cr_state_job_get(st, job, &j), 0);
    assert_int_equal(j.state, CR_JOB_RUNNING);
    cr_state_job_free(&j);
    cr_state_close(st);
    tdir_remove(&t);
}

/* A failure in the middle (a constraint violation) leaves nothing of the
 * transaction, even the writes that succeeded before it and after it. */
static void test_transaction_all_or_nothing(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    int64_t job = new_job(st, "gang", 1);
    new_worker(st, job, 0, "n1", 1);
    new_worker(st, job, 1, "n2", 1);
    int64_t jobs_before = sql_int(st, "SELECT count(*) FROM jobs");

    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_RUNNING, "all started", 10), 0);
    assert_int_equal(cr_state_worker_set_state(st, job, 0, CR_WORKER_RUNNING, 10), 0);
    int64_t other = new_job(st, "other", 10);
    cr_state_event_t e = {.time_ms = 10, .kind = "started", .job_id = job, .message = "m"};
    assert_int_equal(cr_state_event_append(st, &e, NULL), 0);
    /* the injected failure: worker 1 exists already */
    cr_state_worker_t dup = {.job_id = job, .index = 1, .state = CR_WORKER_RUNNING};
    assert_int_equal(cr_state_worker_create(st, &dup, 10), CR_EEXIST);
    /* the transaction is doomed: later writes are refused with that error */
    assert_int_equal(cr_state_worker_set_state(st, job, 1, CR_WORKER_RUNNING, 10), CR_EEXIST);
    assert_int_equal(cr_state_commit(st), CR_EEXIST);
    assert_non_null(strstr(cr_state_errmsg(st), "worker 1 of job"));

    cr_state_job_t j;
    assert_int_equal(cr_state_job_get(st, job, &j), 0);
    assert_int_equal(j.state, CR_JOB_PENDING);
    assert_null(j.reason);
    assert_int_equal(j.updated_ms, 1);
    cr_state_job_free(&j);
    assert_int_equal(cr_state_job_get(st, other, &j), CR_ENOENT);
    cr_state_worker_t w;
    assert_int_equal(cr_state_worker_get(st, job, 0, &w), 0);
    assert_int_equal(w.state, CR_WORKER_PENDING);
    cr_state_worker_free(&w);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM jobs"), jobs_before);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM events"), 0);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM workers"), 2);

    /* the same with a failing placement group (a savepoint inside the
     * transaction) and a failing update of a missing row */
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_PLACING, NULL, 20), 0);
    cr_state_bundle_t b = {.index = 0, .resources_json = NULL};
    cr_state_pg_t pg = {.name = "p", .strategy = CR_PG_PACK, .bundles = &b, .n_bundles = 1};
    int64_t pgid;
    assert_int_equal(cr_state_pg_create(st, &pg, 20, &pgid), CR_EINVAL);
    assert_int_equal(cr_state_commit(st), CR_EINVAL);
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_PLACING, NULL, 20), 0);
    assert_int_equal(cr_state_worker_set_state(st, job, 9, CR_WORKER_RUNNING, 20), CR_ENOENT);
    assert_int_equal(cr_state_commit(st), CR_ENOENT);
    assert_int_equal(cr_state_job_get(st, job, &j), 0);
    assert_int_equal(j.state, CR_JOB_PENDING);
    cr_state_job_free(&j);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM pgs"), 0);

    /* the handle works normally afterwards */
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_RUNNING, NULL, 30), 0);
    assert_int_equal(cr_state_check(st), 0);
    cr_state_close(st);
    tdir_remove(&t);
}

/* ---- crash durability ---- */

#define CRASH_WORKERS 2

/* The child: commits a job, its workers and an event per transaction and
 * reports each id through the pipe only once cr_state_commit returned. */
static void __attribute__((noreturn)) crash_child(const char *path, int fd)
{
    char err[CR_STATE_ERRMSG_MAX];
    cr_state_t *st;
    if (cr_state_open(path, &st, err, sizeof(err)) != 0)
        _exit(3);
    for (int64_t i = 0;; i++) {
        cr_state_job_t j = {.name = "crash",
                            .spec_json = "{\"workers\":2}",
                            .state = CR_JOB_PENDING,
                            .restart_policy = CR_RESTART_WORKER};
        int64_t id;
        if (cr_state_begin(st) || cr_state_job_create(st, &j, i, &id))
            _exit(4);
        for (int k = 0; k < CRASH_WORKERS; k++) {
            cr_state_worker_t w = {.job_id = id,
                                   .index = k,
                                   .node_id = "n1",
                                   .pid = 1000 + k,
                                   .state = CR_WORKER_RUNNING};
            if (cr_state_worker_create(st, &w, i))
                _exit(5);
        }
        cr_state_event_t e = {.time_ms = i, .kind = "started", .job_id = id, .message = "ok"};
        if (cr_state_job_set_state(st, id, CR_JOB_RUNNING, NULL, i) ||
            cr_state_event_append(st, &e, NULL) || cr_state_commit(st))
            _exit(6);
        if (write(fd, &id, sizeof(id)) != sizeof(id))
            _exit(7);
    }
}

static void test_crash_durability(void **state)
{
    tdir_t t;
    tdir_make(&t);
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    srand(seed);
    int64_t last_acked = 0;
    size_t total_acked = 0;
    for (int round = 0; round < 6; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            crash_child(t.db, p[1]);
        }
        close(p[1]);
        /* a random moment: from before the first commit to well into the
         * stream of them */
        struct timespec ts = {0, (long)(rand() % 150) * 1000000L + (rand() % 1000) * 1000L};
        nanosleep(&ts, NULL);
        assert_int_equal(kill(pid, SIGKILL), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFSIGNALED(status))
            fail_msg("round %d (seed %u): the child exited with %d before the kill", round, seed,
                     WEXITSTATUS(status));
        CR_VEC(int64_t) acked = {0};
        int64_t id;
        while (read(p[0], &id, sizeof(id)) == sizeof(id))
            *CR_VEC_PUSH(&acked) = id;
        close(p[0]);

        cr_state_t *st = open_ok(t.db);
        assert_int_equal(cr_state_check(st), 0);
        for (size_t i = 0; i < acked.n; i++) {
            cr_state_job_t j;
            if (cr_state_job_get(st, acked.v[i], &j) != 0)
                fail_msg("round %d (seed %u): acknowledged job %lld lost", round, seed,
                         (long long)acked.v[i]);
            assert_int_equal(j.state, CR_JOB_RUNNING);
            cr_state_job_free(&j);
            assert_true(acked.v[i] > last_acked);
            last_acked = acked.v[i];
        }
        /* every job in the file, acknowledged or caught between commit and
         * report, is whole: all its workers, its state, its event */
        cr_state_job_t *jobs;
        size_t n;
        assert_int_equal(cr_state_job_list(st, false, &jobs, &n), 0);
        assert_true(n >= total_acked + acked.n);
        for (size_t i = 0; i < n; i++) {
            cr_state_worker_t *w;
            size_t nw;
            assert_int_equal(jobs[i].state, CR_JOB_RUNNING);
            assert_int_equal(cr_state_worker_list(st, jobs[i].id, NULL, &w, &nw), 0);
            assert_int_equal(nw, CRASH_WORKERS);
            cr_state_worker_list_free(w, nw);
        }
        assert_int_equal(sql_int(st, "SELECT count(*) FROM events"), n);
        total_acked += acked.n;
        cr_state_job_list_free(jobs, n);
        CR_VEC_FREE(&acked);
        cr_state_close(st);
    }
    /* the rounds must have exercised something */
    assert_true(total_acked > 0);
    tdir_remove(&t);
}

/* ---- what the operator meets ---- */

/* Runs open(path) as an unprivileged user when we are root (root ignores
 * file modes), in a child; returns its code and message. */
static int open_as_user(const char *path, char *msg, size_t len)
{
    cr_state_t *st = NULL;
    if (geteuid() != 0) {
        int rc = cr_state_open(path, &st, msg, len);
        cr_state_close(st);
        return rc;
    }
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        int rc = 99;
        memset(msg, 0, len);
        if (setgid(65534) == 0 && setuid(65534) == 0) {
            rc = cr_state_open(path, &st, msg, len);
            cr_state_close(st);
        }
        if (write(p[1], &rc, sizeof(rc)) != sizeof(rc) || write(p[1], msg, len) != (ssize_t)len)
            _exit(1);
        _exit(0);
    }
    close(p[1]);
    int rc = 0;
    assert_int_equal(read(p[0], &rc, sizeof(rc)), sizeof(rc));
    assert_int_equal(read(p[0], msg, len), (ssize_t)len);
    close(p[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_not_equal(rc, 99);
    return rc;
}

static void test_unwritable_directory(void **state)
{
    tdir_t t;
    tdir_make(&t);
    char msg[CR_STATE_ERRMSG_MAX];
    /* a directory the user cannot write: a new database cannot be made */
    assert_int_equal(chmod(t.dir, 0555), 0);
    assert_int_equal(open_as_user(t.db, msg, sizeof(msg)), CR_EACCES);
    assert_non_null(strstr(msg, t.db));
    assert_non_null(strstr(msg, "not writable"));
    assert_non_null(strstr(msg, t.dir));
    /* a directory that is not there */
    char missing[200];
    snprintf(missing, sizeof(missing), "%s/nope/state.db", t.dir);
    cr_state_t *st;
    assert_int_equal(cr_state_open(missing, &st, msg, sizeof(msg)), CR_ENOENT);
    assert_null(st);
    assert_non_null(strstr(msg, "does not exist"));
    tdir_remove(&t);
}

static void test_readonly_file(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    new_job(st, "kept", 1);
    cr_state_close(st);
    char msg[CR_STATE_ERRMSG_MAX];
    assert_int_equal(chmod(t.dir, 0777), 0);
    assert_int_equal(chmod(t.db, 0444), 0);
    assert_int_equal(open_as_user(t.db, msg, sizeof(msg)), CR_EACCES);
    assert_non_null(strstr(msg, t.db));
    assert_non_null(strstr(msg, "read-only"));
    /* a writable file in a directory where the -wal file cannot be made */
    if (geteuid() == 0) {
        assert_int_equal(chmod(t.db, 0666), 0);
        assert_int_equal(chmod(t.dir, 0755), 0);
        int rc = open_as_user(t.db, msg, sizeof(msg));
        assert_int_equal(rc, CR_EACCES);
        assert_non_null(strstr(msg, t.dir));
    }
    /* nothing was lost by the refusals */
    assert_int_equal(chmod(t.dir, 0700), 0);
    assert_int_equal(chmod(t.db, 0600), 0);
    st = open_ok(t.db);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM jobs"), 1);
    cr_state_close(st);
    tdir_remove(&t);
}

static void test_disk_full(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    char sql[96];
    snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %lld",
             (long long)sql_int(st, "PRAGMA page_count") + 4);
    sql_exec(st, sql);
    char big[3000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_state_job_t j = {.name = "big", .spec_json = big, .state = CR_JOB_PENDING};
    int64_t id, last = 0;
    int rc = 0, acked = 0;
    for (int i = 0; i < 100 && rc == 0; i++) {
        rc = cr_state_job_create(st, &j, i, &id);
        if (rc == 0) {
            acked++;
            last = id;
        }
    }
    assert_int_equal(rc, CR_ENOSPC);
    assert_true(acked > 0);
    assert_non_null(strstr(cr_state_errmsg(st), t.db));
    assert_non_null(strstr(cr_state_errmsg(st), "disk is full"));
    /* in a transaction: the whole of it is refused */
    j.spec_json = "{}";
    assert_int_equal(cr_state_begin(st), 0);
    rc = 0;
    for (int i = 0; i < 200 && rc == 0; i++)
        rc = cr_state_event_append(
            st, &(cr_state_event_t){.time_ms = i, .kind = "k", .message = big}, NULL);
    assert_int_equal(rc, CR_ENOSPC);
    assert_int_equal(cr_state_job_create(st, &j, 1, &id), CR_ENOSPC);
    assert_int_equal(cr_state_commit(st), CR_ENOSPC);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM events"), 0);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM jobs"), acked);
    assert_int_equal(cr_state_check(st), 0);
    /* once space is back, writes work again and nothing acknowledged is gone */
    sql_exec(st, "PRAGMA max_page_count = 1000000");
    assert_int_equal(cr_state_job_create(st, &j, 1, &id), 0);
    assert_true(id > last);
    cr_state_close(st);
    st = open_ok(t.db);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM jobs"), acked + 1);
    assert_int_equal(cr_state_check(st), 0);
    cr_state_close(st);
    tdir_remove(&t);
}

/* A real full file system: a small tmpfs in a private mount namespace
 * (root only; skipped otherwise). The disk fills while jobs are written;
 * the next open says so at once. Runs in a child so the mount never leaks; exit 0 is a pass, 77
 * a skip, anything else a failure described on stderr. */
#define CHILD_CHECK(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #cond);                      \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

static void __attribute__((noreturn)) real_disk_full_child(const char *dir)
{
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", dir, "tmpfs", 0, "size=2m") != 0)
        _exit(77);
    char path[128], err[CR_STATE_ERRMSG_MAX];
    snprintf(path, sizeof(path), "%s/state.db", dir);
    cr_state_t *st;
    CHILD_CHECK(cr_state_open(path, &st, err, sizeof(err)) == 0);
    char big[4000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_state_job_t j = {.name = "big", .spec_json = big, .state = CR_JOB_PENDING};
    int64_t id;
    int rc = 0, acked = 0;
    for (int i = 0; i < 3000 && rc == 0; i++)
        if ((rc = cr_state_job_create(st, &j, i, &id)) == 0)
            acked++;
    if (rc != CR_ENOSPC)
        fprintf(stderr, "got %s: %s\n", cr_err_name(rc), cr_state_errmsg(st));
    CHILD_CHECK(rc == CR_ENOSPC);
    CHILD_CHECK(strstr(cr_state_errmsg(st), "disk is full") != NULL);
    CHILD_CHECK(acked > 10);
    cr_state_close(st);
    rc = cr_state_open(path, &st, err, sizeof(err));
    if (rc != CR_ENOSPC)
        fprintf(stderr, "open on a full disk: %s: %s\n", cr_err_name(rc), err);
    CHILD_CHECK(rc == CR_ENOSPC);
    CHILD_CHECK(st == NULL);
    CHILD_CHECK(strstr(err, path) != NULL);
    CHILD_CHECK(strstr(err, "disk is full") != NULL);
    /* space back (a 4 MiB file system now): everything acknowledged is
     * there and the file is sound */
    CHILD_CHECK(mount("tmpfs", dir, "tmpfs", MS_REMOUNT, "size=4m") == 0);
    CHILD_CHECK(cr_state_open(path, &st, err, sizeof(err)) == 0);
    CHILD_CHECK(cr_state_check(st) == 0);
    cr_state_job_t *v;
    size_t n;
    CHILD_CHECK(cr_state_job_list(st, false, &v, &n) == 0);
    CHILD_CHECK(n == (size_t)acked);
    cr_state_job_list_free(v, n);
    cr_state_close(st);
    umount(dir);
    _exit(0);
}

static void test_real_disk_full(void **state)
{
    if (geteuid() != 0)
        skip();
    tdir_t t;
    tdir_make(&t);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        real_disk_full_child(t.dir);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    tdir_remove(&t);
    if (WEXITSTATUS(status) == 77)
        skip();
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* Another process holding the write lock: the call waits for the busy
 * timeout, then says who to suspect; nothing half-done is left. */
static void test_locked_by_another_process(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    int64_t job = new_job(st, "j", 1);
    sqlite3_busy_timeout(cr__state_db(st), 50); /* not 5 s in a test */
    sqlite3 *other;
    assert_int_equal(sqlite3_open(t.db, &other), SQLITE_OK);
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", 0, 0, 0), SQLITE_OK);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_RUNNING, NULL, 2), CR_EAGAIN);
    assert_non_null(strstr(cr_state_errmsg(st), "another process holds it locked"));
    /* a transaction starts in SQLite at its first write (issue 18): that
     * write fails, and so does the commit, with the same error */
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_RUNNING, NULL, 2), CR_EAGAIN);
    assert_int_equal(cr_state_commit(st), CR_EAGAIN);
    assert_non_null(strstr(cr_state_errmsg(st), "another process holds it locked"));
    assert_int_equal(sqlite3_exec(other, "COMMIT", 0, 0, 0), SQLITE_OK);
    sqlite3_close(other);
    cr_state_job_t j;
    assert_int_equal(cr_state_job_get(st, job, &j), 0);
    assert_int_equal(j.state, CR_JOB_PENDING);
    cr_state_job_free(&j);
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_RUNNING, NULL, 3), 0);
    assert_int_equal(cr_state_commit(st), 0);
    cr_state_close(st);
    tdir_remove(&t);
}

/* A transaction that touches no table costs SQLite nothing, one that only
 * reads takes no write lock (head turns that serve a status or a heartbeat
 * that changes nothing, issue 18): meanwhile another connection may
 * write; its first write takes the write lock, so another writer then
 * waits. */
static void test_read_only_transaction_takes_no_lock(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    int64_t job = new_job(st, "j", 1);
    sqlite3 *other;
    assert_int_equal(sqlite3_open(t.db, &other), SQLITE_OK);
    sqlite3_busy_timeout(other, 50);
    /* a turn that touches no table: nothing in SQLite at all */
    assert_int_equal(cr_state_begin(st), 0);
    assert_true(cr_state_in_transaction(st));
    assert_true(sqlite3_get_autocommit(cr__state_db(st)));
    assert_int_equal(cr_state_commit(st), 0);
    assert_false(cr_state_in_transaction(st));
    /* one that reads: a read snapshot, no write lock */
    assert_int_equal(cr_state_begin(st), 0);
    cr_state_job_t j;
    assert_int_equal(cr_state_job_get(st, job, &j), 0);
    cr_state_job_free(&j);
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE; COMMIT", 0, 0, 0), SQLITE_OK);
    assert_int_equal(cr_state_commit(st), 0);
    assert_true(sqlite3_get_autocommit(cr__state_db(st)));
    /* a write opens it in SQLite: now the other writer is locked out */
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, job, CR_JOB_RUNNING, NULL, 2), 0);
    assert_false(sqlite3_get_autocommit(cr__state_db(st)));
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", 0, 0, 0), SQLITE_BUSY);
    assert_int_equal(cr_state_commit(st), 0);
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE; COMMIT", 0, 0, 0), SQLITE_OK);
    sqlite3_close(other);
    cr_state_close(st);
    tdir_remove(&t);
}

static void test_newer_schema_refused(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    sql_exec(st, "UPDATE schema_version SET version = 99");
    cr_state_close(st);
    char msg[CR_STATE_ERRMSG_MAX];
    assert_int_equal(cr_state_open(t.db, &st, msg, sizeof(msg)), CR_ESCHEMA);
    assert_null(st);
    assert_non_null(strstr(msg, t.db));
    char newer[64];
    snprintf(newer, sizeof(newer), "schema version 99, newer than this corral's %d",
             CR_STATE_SCHEMA_VERSION);
    assert_non_null(strstr(msg, newer));
    /* the refusal changed nothing: back at its version it opens as the third time */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(t.db, &db), SQLITE_OK);
    char back[64];
    snprintf(back, sizeof(back), "UPDATE schema_version SET version = %d", CR_STATE_SCHEMA_VERSION);
    assert_int_equal(sqlite3_exec(db, back, 0, 0, 0), 0);
    sqlite3_close(db);
    st = open_ok(t.db);
    assert_int_equal(cr_state_generation(st), 2);
    cr_state_close(st);
    tdir_remove(&t);
}

/* A state.db of schema version 1 (before workers.output_lost) is migrated
 * at open: its workers keep their rows with output_lost 0, and the column
 * then holds what is written, across a reopen (a head restart). */
static void test_migration_adds_output_lost(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    int64_t a = new_job(st, "a", 1);
    new_worker(st, a, 0, "n1", 10);
    cr_state_close(st);
    sqlite3 *db; /* back to version 1, as an older corral left it */
    assert_int_equal(sqlite3_open(t.db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "ALTER TABLE workers DROP COLUMN output_lost;"
                                  "UPDATE schema_version SET version = 1",
                                  0, 0, 0),
                     SQLITE_OK);
    sqlite3_close(db);
    st = open_ok(t.db);
    assert_int_equal(sql_int(st, "SELECT version FROM schema_version"), CR_STATE_SCHEMA_VERSION);
    cr_state_worker_t g;
    assert_int_equal(cr_state_worker_get(st, a, 0, &g), 0);
    assert_string_equal(g.node_id, "n1");
    assert_true(g.output_lost == 0);
    g.output_lost = 123456;
    assert_int_equal(cr_state_worker_update(st, &g, 20), 0);
    cr_state_worker_free(&g);
    cr_state_close(st);
    st = open_ok(t.db);
    assert_int_equal(cr_state_worker_get(st, a, 0, &g), 0);
    assert_true(g.output_lost == 123456);
    cr_state_worker_free(&g);
    cr_state_close(st);
    tdir_remove(&t);
}

/* The WAL frames (pages) the commits since the file was opened wrote:
 * what a commit costs, page for page (docs/benchmarks.md). */
static long wal_frames(const tdir_t *t)
{
    char wal[160];
    snprintf(wal, sizeof(wal), "%s-wal", t->db);
    struct stat sb;
    assert_int_equal(stat(wal, &sb), 0);
    return sb.st_size <= 32 ? 0 : (long)((sb.st_size - 32) / (4096 + 24));
}

/* A run's commits write only the pages they change (issue 18): a job's
 * state change rewrites no index of it, and a worker that stays on its
 * node rewrites no page of the node index; a move to another node still
 * does, and an update of a missing worker is still refused. A version 2
 * file loses the job state index at open. */
static void test_run_commits_write_few_pages(void **state)
{
    tdir_t t;
    tdir_make(&t);
    cr_state_t *st = open_ok(t.db);
    assert_int_equal(sql_int(st, "PRAGMA page_size"), 4096);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_state'"),
                     0);
    int64_t a = new_job(st, "a", 1);
    new_worker(st, a, 0, NULL, 1);
    cr_state_worker_t w = {.job_id = a,
                           .index = 0,
                           .node_id = "n1",
                           .devices = "0",
                           .pid = 100,
                           .pgid = 100,
                           .start_time = 5,
                           .state = CR_WORKER_RUNNING,
                           .stdout_path = "/x/a.out",
                           .stderr_path = "/x/a.err"};
    cr_state_event_t ev = {.kind = "running", .job_id = a, .message = "m"};
    /* the start: the worker's node set (its index row added) */
    long f0 = wal_frames(&t);
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, a, CR_JOB_RUNNING, NULL, 2), 0);
    assert_int_equal(cr_state_worker_update(st, &w, 2), 0);
    assert_int_equal(cr_state_event_append(st, &ev, NULL), 0);
    assert_int_equal(cr_state_commit(st), 0);
    long start = wal_frames(&t) - f0;
    /* the end on the same node: the jobs, workers and events leaves, the
     * events' sequence and the leaf of the index of a job's events (a
     * job credential's listing reads through it: migration 4), nothing
     * of another index */
    w.state = CR_WORKER_EXITED;
    w.exit_code = 3;
    ev.kind = "failed";
    f0 = wal_frames(&t);
    assert_int_equal(cr_state_begin(st), 0);
    assert_int_equal(cr_state_job_set_state(st, a, CR_JOB_FAILED, "exit 3", 3), 0);
    assert_int_equal(cr_state_worker_update(st, &w, 3), 0);
    assert_int_equal(cr_state_event_append(st, &ev, NULL), 0);
    assert_int_equal(cr_state_commit(st), 0);
    assert_int_equal(wal_frames(&t) - f0, 5);
    assert_int_equal(start, 6); /* the same and the node index */
    cr_state_worker_t g;
    assert_int_equal(cr_state_worker_get(st, a, 0, &g), 0);
    assert_string_equal(g.node_id, "n1");
    assert_int_equal(g.exit_code, 3);
    assert_int_equal(g.state, CR_WORKER_EXITED);
    cr_state_worker_free(&g);
    /* a move to another node is written whole */
    w.node_id = "n2";
    w.state = CR_WORKER_RUNNING;
    assert_int_equal(cr_state_worker_update(st, &w, 4), 0);
    assert_int_equal(cr_state_worker_get(st, a, 0, &g), 0);
    assert_string_equal(g.node_id, "n2");
    assert_int_equal(g.state, CR_WORKER_RUNNING);
    cr_state_worker_free(&g);
    cr_state_worker_t *v = NULL;
    size_t n = 0;
    assert_int_equal(cr_state_worker_list(st, 0, "n2", &v, &n), 0);
    assert_int_equal(n, 1);
    cr_state_worker_list_free(v, n);
    assert_int_equal(cr_state_worker_list(st, 0, "n1", &v, &n), 0);
    assert_int_equal(n, 0);
    cr_state_worker_list_free(v, n);
    /* no such worker: refused, on either statement */
    w.index = 7;
    assert_int_equal(cr_state_worker_update(st, &w, 5), CR_ENOENT);
    w.node_id = NULL;
    assert_int_equal(cr_state_worker_update(st, &w, 5), CR_ENOENT);
    cr_state_close(st);
    /* a version 2 file, with its index on the jobs' state */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(t.db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE INDEX jobs_state ON jobs (state);"
                                  "UPDATE schema_version SET version = 2",
                                  0, 0, 0),
                     SQLITE_OK);
    sqlite3_close(db);
    st = open_ok(t.db);
    assert_int_equal(sql_int(st, "SELECT version FROM schema_version"), CR_STATE_SCHEMA_VERSION);
    assert_int_equal(sql_int(st, "SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_state'"),
                     0);
    /* and from version 3 on, a job's events by the job (version 4) */
    assert_int_equal(sql_int(st, "SELECT count(*) FROM sqlite_schema WHERE name = 'events_job'"),
                     1);
    cr_state_job_t *jv = NULL;
    assert_int_equal(cr_state_job_list(st, true, &jv, &n), 0);
    assert_int_equal(n, 0); /* a is FAILED: not active */
    cr_state_job_list_free(jv, n);
    cr_state_close(st);
    tdir_remove(&t);
}

/* A migration that fails half-way leaves the file as it was: still at
 * its old version, none of the new tables. */
static void test_failed_migration_changes_nothing(void **state)
{
    tdir_t t;
    tdir_make(&t);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(t.db, &db), SQLITE_OK);
    /* version 0, and a table in the way of step 1 (after its first tables) */
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE schema_version (version INTEGER NOT NULL);"
                                  "INSERT INTO schema_version VALUES (0);"
                                  "CREATE TABLE workers (x INTEGER)",
                                  0, 0, 0),
                     SQLITE_OK);
    sqlite3_close(db);
    char msg[CR_STATE_ERRMSG_MAX];
    cr_state_t *st;
    assert_int_equal(cr_state_open(t.db, &st, msg, sizeof(msg)), CR_ESCHEMA);
    assert_non_null(strstr(msg, "migrating the schema to version 1"));
    assert_non_null(strstr(msg, "workers"));
    assert_int_equal(sqlite3_open(t.db, &db), SQLITE_OK);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT (SELECT version FROM schema_version), "
                                        "(SELECT count(*) FROM sqlite_master WHERE name IN "
                                        "('jobs', 'nodes', 'head'))",
                                        -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(s, 0), 0);
    assert_int_equal(sqlite3_column_int(s, 1), 0);
    sqlite3_finalize(s);
    /* without the obstacle, the same file migrates */
    assert_int_equal(sqlite3_exec(db, "DROP TABLE workers", 0, 0, 0), SQLITE_OK);
    sqlite3_close(db);
    st = open_ok(t.db);
    assert_int_equal(sql_int(st, "SELECT version FROM schema_version"), CR_STATE_SCHEMA_VERSION);
    new_job(st, "after", 1);
    cr_state_close(st);
    tdir_remove(&t);
}

static void test_foreign_database_refused(void **state)
{
    tdir_t t;
    tdir_make(&t);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(t.db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE photos (id INTEGER)", 0, 0, 0), 0);
    sqlite3_close(db);
    char msg[CR_STATE_ERRMSG_MAX];
    cr_state_t *st;
    assert_int_equal(cr_state_open(t.db, &st, msg, sizeof(msg)), CR_ESCHEMA);
    assert_non_null(strstr(msg, "not a corral state database"));
    tdir_remove(&t);
}

static void test_corrupt_file(void **state)
{
    tdir_t t;
    tdir_make(&t);
    /* not a database at all */
    FILE *fp = fopen(t.db, "w");
    assert_non_null(fp);
    for (int i = 0; i < 8192; i++)
        fputc('x', fp);
    fclose(fp);
    char msg[CR_STATE_ERRMSG_MAX];
    cr_state_t *st;
    assert_int_equal(cr_state_open(t.db, &st, msg, sizeof(msg)), CR_EPARSE);
    assert_null(st);
    assert_non_null(strstr(msg, t.db));
    assert_non_null(strstr(msg, "damaged"));
    assert_int_equal(unlink(t.db), 0);

    /* a database whose events table is damaged (the header is fine) */
    st = open_ok(t.db);
    char text[400];
    memset(text, 'e', sizeof(text) - 1);
    text[sizeof(text) - 1] = '\0';
    assert_int_equal(cr_state_begin(st), 0);
    for (int i = 0; i < 200; i++)
        assert_int_equal(
            cr_state_event_append(
                st, &(cr_state_event_t){.time_ms = i, .kind = "k", .message = text}, NULL),
            0);
    assert_int_equal(cr_state_commit(st), 0);
    int64_t root = sql_int(st, "SELECT rootpage FROM sqlite_master WHERE name = 'events'");
    int64_t psize = sql_int(st, "PRAGMA page_size");
    cr_state_close(st); /* checkpoints: everything is in the main file */
    int fd = open(t.db, O_WRONLY);
    assert_true(fd >= 0);
    char junk[512];
    memset(junk, 0xa5, sizeof(junk));
    assert_int_equal(pwrite(fd, junk, sizeof(junk), (root - 1) * psize), sizeof(junk));
    close(fd);
    /* the quick check at open finds it: the open is refused, not the
     * first call that happens to read the page */
    assert_int_equal(cr_state_open(t.db, &st, msg, sizeof(msg)), CR_EPARSE);
    assert_null(st);
    assert_non_null(strstr(msg, t.db));
    assert_non_null(strstr(msg, "quick_check"));
    assert_non_null(strstr(msg, "damaged"));
    tdir_remove(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_settings_generation),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_fds_close_on_exec),
        cmocka_unit_test(test_nodes),
        cmocka_unit_test(test_jobs),
        cmocka_unit_test(test_workers),
        cmocka_unit_test(test_pgs),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_transaction_commit_and_rollback),
        cmocka_unit_test(test_transaction_all_or_nothing),
        cmocka_unit_test(test_crash_durability),
        cmocka_unit_test(test_unwritable_directory),
        cmocka_unit_test(test_readonly_file),
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_real_disk_full),
        cmocka_unit_test(test_locked_by_another_process),
        cmocka_unit_test(test_read_only_transaction_takes_no_lock),
        cmocka_unit_test(test_newer_schema_refused),
        cmocka_unit_test(test_foreign_database_refused),
        cmocka_unit_test(test_failed_migration_changes_nothing),
        cmocka_unit_test(test_migration_adds_output_lost),
        cmocka_unit_test(test_run_commits_write_few_pages),
        cmocka_unit_test(test_corrupt_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
