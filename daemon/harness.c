/* A socketless head for fuzz targets and unit tests (daemon/harness.h).
 * The set-up and the tear-down follow main.c's for --head, less the
 * session directory, the token, the listeners and the signals. */
#include "daemon/harness.h"
#include "daemon/follow.h"
#include "daemon/waiters.h"
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static char *spec_copy;
static bool tick_on;

static void on_tick(uv_timer_t *t)
{
    nodes_tick();
    pgs_tick();
}

/* as main.c's */
static void started_local(void *arg, const agent_started_t *s)
{
    wk_t *w = worker_find(s->worker_id);
    if (w && w->node == D.self)
        worker_started(w, s);
}

static void exited_local(void *arg, const Corral__WorkerReport *r)
{
    wk_t *w = worker_find(r->worker_id);
    if (w && w->node == D.self)
        worker_ended(w, r);
}

int head_harness_init(const char *spec_path, const char *dir)
{
    memset(&D, 0, sizeof(D));
    D.heartbeat_ms = 1000;
    D.suspect_ms = 3000;
    D.dead_ms = 10000;
    spec_copy = cr_strdup(spec_path);
    D.hwo.spec_path = spec_copy;
    char *msg = NULL;
    if (hw_discover(&D.hwo, &D.node, &msg) < 0) {
        fprintf(stderr, "head harness: %s\n", msg ? msg : "discovery failed");
        free(msg);
        head_harness_fini();
        return CR_EINVAL;
    }
    D.cluster = sched_cluster_new();
    char why[256];
    if (!(D.self = node_add_local(D.node, why, sizeof(why))) ||
        sched_cluster_finalize(D.cluster) < 0) {
        fprintf(stderr, "head harness: the scheduler cannot represent this node: %s\n", why);
        head_harness_fini();
        return CR_EINVAL;
    }
    D.scfg = (sched_config_t){.top_k = 1, .spread_threshold_pct = 50};
    D.rng.s = 1; /* deterministic, unlike main.c's pid */

    D.session = cr_strdup(dir);
    D.logs = cr_asprintf("%s/logs", dir);
    if (mkdir(D.logs, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "head harness: cannot create %s: %s\n", D.logs, strerror(errno));
        head_harness_fini();
        return -errno;
    }
    char *dbpath = cr_asprintf("%s/state.db", dir);
    const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(sfx); i++) {
        char *p = cr_asprintf("%s%s", dbpath, sfx[i]);
        unlink(p);
        free(p);
    }
    char err[CR_STATE_ERRMSG_MAX];
    int e = cr_state_open(dbpath, &D.st, err, sizeof(err));
    free(dbpath);
    if (e < 0) {
        fprintf(stderr, "head harness: %s\n", err);
        head_harness_fini();
        return e;
    }
    node_record(D.self);

    uv_loop_init(&D.loop);
    agent_config_t ac = {.loop = &D.loop,
                         .node = D.node,
                         .hwo = &D.hwo,
                         .logs = D.logs,
                         .socket = NULL,
                         .ops = {.started = started_local, .exited = exited_local},
                         .refuse_start = HEAD_HARNESS_REFUSAL};
    D.agent = agent_new(&ac);
    follow_init(&D.loop, &head_follow_ops, NULL);
    uv_timer_init(&D.loop, &D.tick);
    uv_timer_start(&D.tick, on_tick, 100, 100);
    tick_on = true;
    return 0;
}

void head_harness_conn_closed(cr_conn_t *c)
{
    nodes_conn_closed(c);
    follow_conn_closed(c);
    pgs_client_gone(c);
}

/* as main.c's */
static void on_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    head_handle(c, e);
}

static void on_close(cr_conn_t *c, int err, void *data)
{
    cr_waiters_drop_conn(c);
    head_batch();
    head_harness_conn_closed(c);
}

int head_harness_listen(const char *path, const uint8_t token[CR_TOKEN_LEN])
{
    cr_net_config_t nc = {.token = token, .name = "harness-head"};
    cr_net_callbacks_t cb = {.on_message = on_message, .on_close = on_close};
    if (!(D.net = cr_net_new(&D.loop, &nc, &cb, NULL)))
        return CR_EINVAL;
    return cr_net_listen_unix(D.net, path);
}

void head_harness_run(void)
{
    uv_run(&D.loop, UV_RUN_NOWAIT);
}

static void close_left(uv_handle_t *h, void *arg)
{
    /* what the head leaves open for the process's end (the shutdown's
     * forcing timer, a static) */
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

void head_harness_fini(void)
{
    if (tick_on) {
        if (D.net)
            cr_net_close(D.net, NULL, NULL);
        D.net = NULL;
        uv_run(&D.loop, UV_RUN_NOWAIT); /* the connections' on_close */
        head_batch_fini();
        follow_fini();
        agent_free(D.agent);
        D.agent = NULL;
        jobs_free();
        pgs_free();
        uv_timer_stop(&D.tick);
        uv_close((uv_handle_t *)&D.tick, NULL);
        uv_run(&D.loop, UV_RUN_DEFAULT); /* close callbacks of released workers */
        uv_walk(&D.loop, close_left, NULL);
        uv_run(&D.loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&D.loop) != 0)
            cr_warn("head harness: loop closed with handles left");
        head_batch_forget();
        tick_on = false;
    }
    if (D.st)
        cr_state_close(D.st);
    nodes_free();
    sched_cluster_free(D.cluster);
    hw_node_free(D.node);
    free(D.session);
    free(D.logs);
    free(spec_copy);
    spec_copy = NULL;
    memset(&D, 0, sizeof(D));
}
