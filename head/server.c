/* corrald --head (docs/runtime.md): the head's set-up, the callbacks of
 * its loop (connections, signals, the tick) and its tear-down. The core
 * that the fuzzing harness shares (head_core_init/fini) is the head less
 * its session, token, listeners and signals.
 *
 * The watch (head.h) is filled here: what nodes.c and pgs.c tell the
 * modules above them. */
#include "head/head.h"
#include "head/follow.h"
#include "head/waiters.h"
#include "web/web.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ----------------------------------------------------------- the watch */

static void watch_node_lost(node_t *n, const char *why)
{
    jobs_node_lost(n, why);
    pgs_node_lost(n);
}

static void watch_group_created(pg_t *g)
{
    try_pending();
}

static void watch_retry(void)
{
    try_pending();
    pgs_try_pending();
}

static void watch_committed(bool ok)
{
    jobs_committed(ok); /* first: a job of the turn may be in a group of the turn */
    pgs_committed(ok);
}

static int watch_resync(void)
{
    return jobs_resync();
}

static const head_watch_t watch = {.node_lost = watch_node_lost,
                                   .node_disconnected = pgs_conn_closed,
                                   .group_removed = jobs_group_removed,
                                   .group_created = watch_group_created,
                                   .retry = watch_retry,
                                   .committed = watch_committed,
                                   .resync = watch_resync};

/* ------------------------------------------------------ the loop's work */

static void on_tick(uv_timer_t *t)
{
    head_store_retry();
    head_batch();
    nodes_tick();
    pgs_tick();
    jobs_tick();
    jobs_retention(cr_wall_ms());
    events_retention();
}

void head_conn_closed(cr_conn_t *c)
{
    cr_waiters_drop_conn(c);
    nodes_conn_closed(c);
    follow_conn_closed(c);
    pgs_client_gone(c);
    jobs_client_gone(c);
}

static void on_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    head_handle(c, e);
}

static void on_drain(cr_conn_t *c, void *data)
{
    follow_conn_drained(c);
}

static void on_ready(cr_conn_t *c, void *data)
{
    cr_debug("%s %s connected", cr_role_name(cr_conn_role(c)), cr_conn_peer(c));
}

static void on_close(cr_conn_t *c, int err, void *data)
{
    if (err && err != CR_EACCES)
        cr_info("connection %s closed: %s", cr_conn_peer(c), cr_strerror(err));
    else if (err == CR_EACCES)
        cr_warn("connection %s refused: bad token", cr_conn_peer(c));
    head_batch();
    head_conn_closed(c);
}

static void on_signal(uv_signal_t *h, int signum)
{
    begin_shutdown(signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* --------------------------------------------------------------- core */

int head_core_init(const head_core_t *c)
{
    D.node = c->node;
    D.hwo = *c->hwo;
    D.heartbeat_ms = c->heartbeat_ms ? c->heartbeat_ms : 1000;
    D.suspect_ms = c->suspect_ms ? c->suspect_ms : 3000;
    D.dead_ms = c->dead_ms ? c->dead_ms : 10000;
    D.watch = watch;
    D.cluster = sched_cluster_new();
    char why[256];
    if (!(D.self = node_add_local(D.node, why, sizeof(why))) ||
        sched_cluster_finalize(D.cluster) < 0) {
        fprintf(stderr, "%s: the scheduler cannot represent this node: %s\n", c->who, why);
        return CR_EINVAL;
    }
    D.scfg = (sched_config_t){.top_k = 1, .spread_threshold_pct = 50};
    D.rng.s = c->seed;
    return 0;
}

int head_core_open(const head_core_t *c, const char *dbpath)
{
    char err[CR_STATE_ERRMSG_MAX];
    int e = cr_state_open(dbpath, &D.st, err, sizeof(err));
    if (e < 0) {
        fprintf(stderr, "%s: %s\n", c->who, err);
        return e;
    }
    node_record(D.self);
    return 0;
}

void head_core_start(const head_core_t *c)
{
    agent_config_t ac = {.loop = &D.loop,
                         .node = D.node,
                         .hwo = &D.hwo,
                         .logs = D.logs,
                         .socket = D.sock,
                         .head_address = D.sock,
                         .net = D.net,
                         .session_id = D.session_id[0] ? D.session_id : NULL,
                         .ops = {.started = workers_local_started, .exited = workers_local_exited},
                         .refuse_start = c->refuse_start,
                         .output_max = D.worker_log_max};
    D.agent = agent_new(&ac);
    follow_init(&D.loop, &head_follow_ops, NULL);
    uv_timer_init(&D.loop, &D.tick);
    uint32_t every = D.heartbeat_ms / 2 < 100 ? D.heartbeat_ms / 2 : 100;
    uv_timer_start(&D.tick, on_tick, every ? every : 10, every ? every : 10);
}

void head_core_stop(void)
{
    head_batch_fini(); /* a turn's writes not yet committed */
    follow_fini();
    agent_free(D.agent);
    D.agent = NULL;
    jobs_free();
    pgs_free();
}

void head_core_fini(void)
{
    if (D.st)
        cr_state_close(D.st);
    D.st = NULL;
    nodes_free();
    sched_cluster_free(D.cluster);
    D.cluster = NULL;
}

/* ------------------------------------------------------------ the head */

/* Listens on the session's socket and on TCP (the dead head's port when
 * its session is taken over and no port is given), and writes address
 * and corrald.pid into the session. */
static int listen_all(uint32_t port, bool tls)
{
    int e;
    if ((e = cr_net_listen_unix(D.net, D.sock)) < 0) {
        fprintf(stderr, "corrald: cannot listen on %s: %s\n", D.sock, cr_strerror(e));
        return e;
    }
    if (D.reused && port == 0) { /* the dead head's port: its agents reconnect there */
        char *af = cr_asprintf("%s/address", D.session);
        FILE *fp = fopen(af, "r");
        char line[128];
        if (fp && fgets(line, sizeof(line), fp)) {
            const char *colon = strrchr(line, ':');
            port = colon ? (uint32_t)strtoul(colon + 1, NULL, 10) : 0;
        }
        if (fp)
            fclose(fp);
        free(af);
        if (!port || cr_net_listen_tcp_tls(D.net, D.listen, (int)port, &D.port, tls) != 0)
            port = 0;
        else
            goto listening;
    }
    if ((e = cr_net_listen_tcp_tls(D.net, D.listen, (int)port, &D.port, tls)) < 0) {
        fprintf(stderr, "corrald: cannot listen on %s:%u: %s\n", D.listen ? D.listen : "127.0.0.1",
                port, cr_strerror(e));
        return e;
    }
listening:
    /* what it really listens on, which corral start prints (the address
     * file holds where a local peer reaches it) */
    fprintf(stderr, "corrald: listening on %s%s%s:%d%s\n",
            D.listen && strchr(D.listen, ':') ? "[" : "", D.listen ? D.listen : "127.0.0.1",
            D.listen && strchr(D.listen, ':') ? "]" : "", D.port, tls ? " (TLS)" : "");
    D.address = cr_asprintf(
        "%s:%d", D.listen && strcmp(D.listen, "0.0.0.0") ? D.listen : "127.0.0.1", D.port);
    char *text = cr_asprintf("%s\n", D.address), *pidtext = cr_asprintf("%d\n", (int)getpid());
    e = session_write("address", text);
    if (e == 0)
        e = session_write("corrald.pid", pidtext);
    free(text);
    free(pidtext);
    return e;
}

/* Raises the soft open-file limit to the hard one: a head holds a socket
 * per agent and client, and a soft limit of 1024 (or the 19,000 that
 * stopped bench/cluster) is far below what a large cluster needs.
 * Workers of the head's own node inherit it, as they inherit the head's
 * other limits. Says so on stderr (corral start passes the line on) and
 * puts the words in buf for the "started" event. */
static void raise_nofile(char *buf, size_t size)
{
    struct rlimit rl;
    buf[0] = '\0';
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    rlim_t want = rl.rlim_max;
    if (want == RLIM_INFINITY) { /* the kernel's own cap then: fs.nr_open */
        FILE *fp = fopen("/proc/sys/fs/nr_open", "r");
        unsigned long long v = 0;
        if (fp && fscanf(fp, "%llu", &v) == 1 && v > 0)
            want = (rlim_t)v;
        if (fp)
            fclose(fp);
        if (want == RLIM_INFINITY)
            want = 1048576; /* the kernel's default fs.nr_open (fs/file.c sysctl_nr_open) */
    }
    unsigned long long was = (unsigned long long)rl.rlim_cur;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= want) {
        snprintf(buf, size, "open-file limit %llu", was);
        return;
    }
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        snprintf(buf, size, "open-file limit %llu (raising it to the hard limit %llu failed: %s)",
                 was, (unsigned long long)want, strerror(errno));
        cr_warn("%s", buf);
    } else {
        snprintf(buf, size, "open-file limit raised from %llu to %llu (the hard limit)", was,
                 (unsigned long long)want);
    }
    fprintf(stderr, "corrald: %s\n", buf);
}

/* A damaged state.db (and its -wal and -shm) moved to
 * state.db.damaged-<time> for inspection: the start is refused, and the
 * next one begins with an empty state instead of failing again. */
static void move_aside(const char *dbpath)
{
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
    char *to = cr_asprintf("%s.damaged-%s", dbpath, stamp);
    if (rename(dbpath, to) < 0) {
        fprintf(stderr, "corrald: cannot move %s aside to %s: %s; move it yourself\n", dbpath, to,
                strerror(errno));
        free(to);
        return;
    }
    static const char *const parts[] = {"-wal", "-shm"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(parts); i++) {
        char *from = cr_asprintf("%s%s", dbpath, parts[i]),
             *dst = cr_asprintf("%s%s", to, parts[i]);
        rename(from, dst); /* absent is fine */
        free(from);
        free(dst);
    }
    fprintf(stderr,
            "corrald: the damaged state database was moved aside to %s for inspection; the "
            "next start begins a new session with an empty state (the jobs it recorded are "
            "forgotten) unless you put a good copy back as %s first\n",
            to, dbpath);
    cr_warn("state: %s is damaged: moved aside to %s", dbpath, to);
    free(to);
}

int head_main(const head_opts_t *o)
{
    int rc = 1;
    D.listen = o->listen;
    D.node_ip = o->node_ip;
    head_core_t core = {.who = "corrald",
                        .node = o->node,
                        .hwo = o->hwo,
                        .heartbeat_ms = o->heartbeat_ms,
                        .suspect_ms = o->suspect_ms,
                        .dead_ms = o->dead_ms,
                        .seed = (uint64_t)getpid()};
    if (head_core_init(&core) < 0)
        goto out;
    D.keep_finished = o->keep_finished;
    D.keep_finished_ms = o->keep_finished_ms;
    D.keep_events = o->keep_events;
    D.worker_log_max = !o->worker_log_max                             ? CR_WORKER_LOG_MAX_DEFAULT
                       : o->worker_log_max == CR_WORKER_LOG_UNBOUNDED ? 0
                                                                      : o->worker_log_max;
    /* the session once the node is known (a bad spec does not move
     * session_latest); an unwritable CORRAL_HOME is still reported at start */
    if (session_make() < 0)
        goto out;
    if (cr_log_use_file(o->log_file, D.logs) < 0)
        goto out;
    char nofile[160];
    raise_nofile(nofile, sizeof(nofile));
    char *dbpath = cr_asprintf("%s/state.db", D.session);
    int e = head_core_open(&core, dbpath);
    if (e == CR_EPARSE)
        move_aside(dbpath);
    free(dbpath);
    if (e < 0)
        goto out;
    uint8_t token[CR_TOKEN_LEN];
    if (session_token(o->token_file, token) < 0)
        goto out;

    char *tls_cert = NULL, *tls_key = NULL;
    bool tls, dash_tls = o->dashboard_port >= 0 && !web_is_loopback(o->dashboard_host);
    if (session_tls(o, dash_tls, &tls_cert, &tls_key, &tls) < 0)
        goto out;

    uv_loop_init(&D.loop);
    char name[160];
    snprintf(name, sizeof(name), "corrald:%.128s:%d", node_name(), (int)getpid());
    cr_net_config_t nc = {.token = token,
                          .name = name,
                          .max_frame = o->max_frame,
                          .tls_cert_pem = tls ? tls_cert : NULL,
                          .tls_key_pem = tls ? tls_key : NULL,
                          /* agents' beats read in batches, at most one turn a
                           * millisecond (docs/cluster.md "Membership") */
                          .batch_ms = 1};
    cr_net_callbacks_t cb = {
        .on_ready = on_ready, .on_message = on_message, .on_close = on_close, .on_drain = on_drain};
    D.net = cr_net_new(&D.loop, &nc, &cb, NULL);
    if (!D.net) {
        fprintf(stderr, "corrald: cannot set up the transport\n");
        goto loop_out;
    }
    if (listen_all(o->port, tls) < 0)
        goto loop_out;
    head_core_start(&core);
    char *cert_file = o->tls_cert ? cr_strdup(o->tls_cert) : cr_asprintf("%s/tls.crt", D.session);
    e = o->dashboard_port < 0
            ? 0
            : head_web_start(o->dashboard_host, o->dashboard_port, token,
                             dash_tls ? tls_cert : NULL, dash_tls ? tls_key : NULL, cert_file);
    free(cert_file);
    if (e < 0) {
        if (o->dashboard_required)
            goto loop_out;
        fprintf(stderr, "corrald: no dashboard (give --dashboard-port PORT, or any)\n");
    }
    memset(token, 0, sizeof(token));
    uv_signal_init(&D.loop, &D.sig_term);
    uv_signal_init(&D.loop, &D.sig_int);
    uv_signal_start(&D.sig_term, on_signal, SIGTERM);
    uv_signal_start(&D.sig_int, on_signal, SIGINT);
    head_event("started", "head on %s%s: %zu device(s), socket %s, tcp %s%s%s", node_name(),
               D.node->simulated ? " (simulated)" : "", D.node->devices.n, D.sock, D.address,
               nofile[0] ? ", " : "", nofile);
    fprintf(stderr, "corrald: head %s serving %s and %s\n", node_name(), D.sock, D.address);
    if (D.reused)
        recover();

    uv_run(&D.loop, UV_RUN_DEFAULT);
    rc = 0;
    goto done;

loop_out:
    if (D.net) {
        cr_net_close(D.net, NULL, NULL);
        D.net = NULL;
    }
done:
    memset(token, 0, sizeof(token));
    head_web_stop();
    if (tls_key)
        cr_wipe(tls_key, strlen(tls_key));
    free(tls_key);
    free(tls_cert);
    head_core_stop();
    uv_run(&D.loop, UV_RUN_DEFAULT); /* close callbacks of released workers */
    if (uv_loop_close(&D.loop) != 0)
        cr_warn("loop closed with handles left");
out:
    if (D.st && rc == 0)
        head_event("stopped", "clean exit");
    if (D.sock && rc != 0)
        unlink(D.sock);
    if (rc == 0 && D.session) { /* a clean exit: the next head starts a new session */
        char *pidf = cr_asprintf("%s/corrald.pid", D.session);
        unlink(pidf);
        free(pidf);
    }
    head_core_fini();
    free(D.session);
    free(D.logs);
    free(D.sock);
    free(D.address);
    return rc;
}
