/* corrald: the head (--head: the control service and the local agent of
 * one node, on one libuv loop) or an agent that joins a head (--address
 * HEAD:PORT). Options, the session directory, the token, the listeners
 * (DESIGN.md "Runtime", docs/runtime.md, docs/cluster.md). */
#include "daemon/daemon.h"
#include "daemon/follow.h"
#include "daemon/waiters.h"
#include <getopt.h>
#include <malloc.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char usage_line[] =
    "usage: corrald --head [--hw-spec FILE] [--resources 'K=V,...'] [--labels 'k=v,...'] "
    "[--port N] [--listen ADDR] [--node-ip IP] [--token-file F] [--heartbeat-ms N] "
    "[--suspect-after-ms N] "
    "[--dead-after-ms N] [--block]\n"
    "       corrald --address HEAD:PORT [--token-file F] [--hw-spec FILE] [--node-ip IP] "
    "[--node-id ID] [--resources ...] [--labels ...]\n";

static void on_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    head_handle(c, e);
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
    cr_waiters_drop_conn(c);
    head_batch();
    nodes_conn_closed(c);
    follow_conn_closed(c);
    pgs_client_gone(c);
}

static void on_signal(uv_signal_t *h, int signum)
{
    begin_shutdown(signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_tick(uv_timer_t *t)
{
    head_batch();
    nodes_tick();
    pgs_tick();
}

/* --------------------------------------------------------------- startup */

static int parse_kv_list(const char *s, const char *what, int (*fn)(const char *k, const char *v))
{
    char *dup = cr_strdup(s), *save = NULL;
    int err = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok) {
            fprintf(stderr, "corrald: --%s: expected K=V, got '%s'\n", what, tok);
            err = CR_EINVAL;
            break;
        }
        *eq = '\0';
        if ((err = fn(tok, eq + 1)) < 0)
            break;
    }
    free(dup);
    return err;
}

static int set_resource(const char *k, const char *v)
{
    int64_t q;
    sched_err_t se;
    if (sched_parse_qty(v, strlen(v), &q, &se) < 0) {
        fprintf(stderr, "corrald: --resources: %s=%s: %s\n", k, v, se.msg);
        return CR_EINVAL;
    }
    if (strlen(k) >= sizeof(D.node->resources.v[0].name)) {
        fprintf(stderr, "corrald: --resources: name '%s' is too long\n", k);
        return CR_EINVAL;
    }
    for (size_t i = 0; i < D.node->resources.n; i++)
        if (strcmp(D.node->resources.v[i].name, k) == 0) {
            D.node->resources.v[i].amount = q;
            return 0;
        }
    cr_resource_t *r = CR_VEC_PUSH(&D.node->resources);
    snprintf(r->name, sizeof(r->name), "%s", k);
    r->amount = q;
    return 0;
}

static int set_label(const char *k, const char *v)
{
    for (size_t i = 0; i < D.node->labels.n; i++)
        if (strcmp(D.node->labels.v[i].key, k) == 0) {
            free(D.node->labels.v[i].value);
            D.node->labels.v[i].value = cr_strdup(v);
            return 0;
        }
    cr_kv_t *kv = CR_VEC_PUSH(&D.node->labels);
    kv->key = cr_strdup(k);
    kv->value = cr_strdup(v);
    return 0;
}

/* Whether pid runs; a zombie does not (nobody may reap a head that died). */
static bool pid_alive(int pid)
{
    char state = 0;
    return kill(pid, 0) == 0 && agent_proc_stat(pid, &state) != 0 && state != 'Z';
}

/* When session_latest names the session of a head that died (its
 * corrald.pid names no live process; a clean exit removes the file) and
 * holds its state.db, this head takes it over, token included. */
static bool reuse_session(const char *home)
{
    char *link = cr_asprintf("%s/session_latest", home);
    char target[512];
    ssize_t len = readlink(link, target, sizeof(target) - 1);
    free(link);
    if (len <= 0 || memchr(target, '/', (size_t)len))
        return false;
    target[len] = '\0';
    char *dir = cr_asprintf("%s/%s", home, target);
    char *pidf = cr_asprintf("%s/corrald.pid", dir), *db = cr_asprintf("%s/state.db", dir);
    FILE *fp = fopen(pidf, "r");
    int pid = 0;
    if (fp) {
        if (fscanf(fp, "%d", &pid) != 1)
            pid = 0;
        fclose(fp);
    }
    bool reuse = pid > 0 && !pid_alive(pid) && access(db, R_OK | W_OK) == 0;
    free(pidf);
    free(db);
    if (!reuse) {
        free(dir);
        return false;
    }
    D.session = dir;
    D.reused = true;
    D.logs = cr_asprintf("%s/logs", D.session);
    D.sock = cr_asprintf("%s/corrald.sock", D.session);
    if (mkdir(D.logs, 0700) < 0 && errno != EEXIST)
        fprintf(stderr, "corrald: cannot create %s: %s\n", D.logs, strerror(errno));
    unlink(D.sock); /* the dead head's */
    fprintf(stderr, "corrald: taking over the session %s of a head that died (pid %d)\n", D.session,
            pid);
    return true;
}

/* $CORRAL_HOME/session_<time>_<pid>/ with logs/, and session_latest
 * pointing at it (or the session of a head that died, reuse_session). Any failure here is reported
 * now, not at the first job. */
static int make_session(void)
{
    const char *home = corral_home();
    if (!home)
        return CR_EIO;
    if (reuse_session(home))
        return 0;
    char stamp[64];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%d_%H-%M-%S", &tm);
    D.session = cr_asprintf("%s/session_%s_%d", home, stamp, (int)getpid());
    if (mkdir(D.session, 0700) < 0) {
        fprintf(stderr,
                "corrald: cannot create the session directory %s: %s (set CORRAL_HOME to a "
                "writable directory)\n",
                D.session, strerror(errno));
        return -errno;
    }
    D.logs = cr_asprintf("%s/logs", D.session);
    if (mkdir(D.logs, 0700) < 0) {
        fprintf(stderr, "corrald: cannot create %s: %s\n", D.logs, strerror(errno));
        return -errno;
    }
    D.sock = cr_asprintf("%s/corrald.sock", D.session);
    if (strlen(D.sock) >= 108) {
        fprintf(stderr,
                "corrald: the socket path %s is too long for a Unix socket; use a shorter "
                "CORRAL_HOME\n",
                D.sock);
        return CR_E2BIG;
    }
    /* the link is replaced atomically: a client never finds it missing */
    char *tmp = cr_asprintf("%s/.session_latest.%d", home, (int)getpid());
    char *link = cr_asprintf("%s/session_latest", home);
    const char *base = strrchr(D.session, '/') + 1;
    int err = 0;
    unlink(tmp);
    if (symlink(base, tmp) < 0 || rename(tmp, link) < 0) {
        fprintf(stderr, "corrald: cannot point %s at %s: %s\n", link, base, strerror(errno));
        err = -errno;
        unlink(tmp);
    }
    free(tmp);
    free(link);
    return err;
}

static int write_file(const char *name, const char *text)
{
    char *path = cr_asprintf("%s/%s", D.session, name);
    FILE *fp = fopen(path, "w");
    int err = 0;
    if (!fp || fputs(text, fp) < 0) {
        fprintf(stderr, "corrald: cannot write %s: %s\n", path, strerror(errno));
        err = CR_EIO;
    }
    if (fp && fclose(fp) != 0 && !err) {
        fprintf(stderr, "corrald: cannot write %s: %s\n", path, strerror(errno));
        err = CR_EIO;
    }
    free(path);
    return err;
}

static void usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "corrald: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage_line);
}

static int parse_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || v < (long)lo || v > (long)hi) {
        fprintf(stderr, "corrald: %s: expected %u..%u, got '%s'\n%s", opt, lo, hi, s, usage_line);
        return 2;
    }
    *out = (uint32_t)v;
    return 0;
}

static void agent_started_local(void *arg, const agent_started_t *s)
{
    wk_t *w = worker_find(s->worker_id);
    if (w && w->node == D.self)
        worker_started(w, s);
}

static void agent_exited_local(void *arg, const Corral__WorkerReport *r)
{
    wk_t *w = worker_find(r->worker_id);
    if (!w || w->node != D.self)
        return;
    head_batch();
    worker_ended(w, r);
}

static bool loopback(const char *host)
{
    return !host || strcmp(host, "127.0.0.1") == 0 || strcmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0;
}

int main(int argc, char **argv)
{
    /* Every unit of work opens and releases an SQLite savepoint, which
     * frees and allocates again memory at the top of the heap: with
     * glibc's default 128 KiB trim threshold each release gave the pages
     * back (brk) and the next unit faulted them in again, a third of the
     * head's time under a stream of placement groups. */
    mallopt(M_TRIM_THRESHOLD, 4 << 20);
    mallopt(M_TOP_PAD, 1 << 20);
    static const struct option opts[] = {
        {"head", no_argument, 0, 'H'},
        {"address", required_argument, 0, 'a'},
        {"hw-spec", required_argument, 0, 's'},
        {"resources", required_argument, 0, 'r'},
        {"labels", required_argument, 0, 'l'},
        {"port", required_argument, 0, 'p'},
        {"listen", required_argument, 0, 'L'},
        {"token-file", required_argument, 0, 't'},
        {"node-ip", required_argument, 0, 'i'},
        {"node-id", required_argument, 0, 'n'},
        {"heartbeat-ms", required_argument, 0, 'B'},
        {"suspect-after-ms", required_argument, 0, 'S'},
        {"dead-after-ms", required_argument, 0, 'X'},
        {"block", no_argument, 0, 'b'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *spec = NULL, *resources = NULL, *labels = NULL, *token_file = NULL;
    agent_opts_t ao = {0};
    bool head = false;
    uint32_t port = 0;
    int opt, rc = 1;
    D.heartbeat_ms = 1000;
    D.suspect_ms = 3000;
    D.dead_ms = 10000;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case 'H':
            head = true;
            break;
        case 'a':
            ao.head = optarg;
            break;
        case 's':
            spec = optarg;
            break;
        case 'r':
            resources = optarg;
            break;
        case 'l':
            labels = optarg;
            break;
        case 'L':
            D.listen = optarg;
            break;
        case 't':
            token_file = optarg;
            break;
        case 'i':
            ao.node_ip = optarg;
            break;
        case 'n':
            ao.node_id = optarg;
            break;
        case 'b':
            break; /* corrald always runs in the foreground; corral start detaches it */
        case 'p':
            if (parse_u32("--port", optarg, 0, 65535, &port))
                return 2;
            break;
        case 'B':
            if (parse_u32("--heartbeat-ms", optarg, 10, 600000, &D.heartbeat_ms))
                return 2;
            break;
        case 'S':
            if (parse_u32("--suspect-after-ms", optarg, 10, 3600000, &D.suspect_ms))
                return 2;
            break;
        case 'X':
            if (parse_u32("--dead-after-ms", optarg, 10, 3600000, &D.dead_ms))
                return 2;
            break;
        case 'h':
            fputs(usage_line, stdout);
            return 0;
        default:
            usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
            return 2;
        }
    }
    if (head == !!ao.head || optind < argc) {
        usage_error("%s", optind < argc ? "unexpected arguments"
                                        : "give --head (a head) or --address HEAD:PORT (an agent)");
        return 2;
    }
    if (D.suspect_ms < D.heartbeat_ms || D.dead_ms <= D.suspect_ms) {
        fprintf(stderr,
                "corrald: expected --heartbeat-ms <= --suspect-after-ms < --dead-after-ms, got "
                "%u, %u, %u\n%s",
                D.heartbeat_ms, D.suspect_ms, D.dead_ms, usage_line);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    D.hwo.spec_path = spec;
    char *msg = NULL;
    if (hw_discover(&D.hwo, &D.node, &msg) < 0) {
        fprintf(stderr, "corrald: %s\n", msg ? msg : "discovery failed");
        free(msg);
        goto out;
    }
    if (resources && parse_kv_list(resources, "resources", set_resource) < 0)
        goto out;
    if (labels && parse_kv_list(labels, "labels", set_label) < 0)
        goto out;
    if (labels)
        hw_node_sort_labels(D.node);
    if (ao.head) {
        ao.token_file = token_file;
        rc = agent_main(&ao);
        goto out;
    }

    D.node_ip = ao.node_ip;
    D.cluster = sched_cluster_new();
    char why[256];
    if (!(D.self = node_add_local(D.node, why, sizeof(why))) ||
        sched_cluster_finalize(D.cluster) < 0) {
        fprintf(stderr, "corrald: the scheduler cannot represent this node: %s\n", why);
        goto out;
    }
    D.scfg = (sched_config_t){.top_k = 1, .spread_threshold_pct = 50};
    D.rng.s = (uint64_t)getpid();

    /* the session once the node is known (a bad spec does not move
     * session_latest); an unwritable CORRAL_HOME is still reported at start */
    if (make_session() < 0)
        goto out;
    char *logfile = cr_asprintf("%s/corrald.log", D.logs);
    if (cr_log_set_file(logfile) < 0)
        fprintf(stderr, "corrald: cannot log to %s; logging to stderr\n", logfile);
    free(logfile);

    char *dbpath = cr_asprintf("%s/state.db", D.session);
    char err[CR_STATE_ERRMSG_MAX];
    int e = cr_state_open(dbpath, &D.st, err, sizeof(err));
    free(dbpath);
    if (e < 0) {
        fprintf(stderr, "corrald: %s\n", err);
        goto out;
    }
    node_record(D.self);

    uint8_t token[CR_TOKEN_LEN];
    char *tokpath = cr_asprintf("%s/token", D.session);
    if (token_file) { /* the cluster's token, given: the session gets a copy */
        e = cr_token_read(token_file, token);
        if (e == 0)
            e = cr_token_write(tokpath, token);
    } else if (D.reused) { /* clients of the dead head keep their token */
        e = cr_token_read(tokpath, token);
    } else {
        e = cr_token_generate(token);
        if (e == 0)
            e = cr_token_write(tokpath, token);
    }
    if (e < 0) {
        fprintf(stderr, "corrald: cannot %s the token %s: %s%s\n",
                token_file || D.reused ? "read" : "write", token_file ? token_file : tokpath,
                cr_strerror(e), D.reused ? " (remove session_latest to start a new session)" : "");
        free(tokpath);
        goto out;
    }
    if (!loopback(D.listen) && !token_file)
        fprintf(stderr,
                "corrald: warning: listening on %s with a generated token; copy %s to each "
                "agent's machine (--token-file), or give the head one with --token-file\n",
                D.listen, tokpath);
    free(tokpath);

    uv_loop_init(&D.loop);
    char name[160];
    snprintf(name, sizeof(name), "corrald:%.128s:%d", node_name(), (int)getpid());
    cr_net_config_t nc = {.token = token, .name = name};
    cr_net_callbacks_t cb = {.on_ready = on_ready, .on_message = on_message, .on_close = on_close};
    D.net = cr_net_new(&D.loop, &nc, &cb, NULL);
    memset(token, 0, sizeof(token));
    if (!D.net) {
        fprintf(stderr, "corrald: cannot set up the transport\n");
        goto loop_out;
    }
    if ((e = cr_net_listen_unix(D.net, D.sock)) < 0) {
        fprintf(stderr, "corrald: cannot listen on %s: %s\n", D.sock, cr_strerror(e));
        goto loop_out;
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
        if (port && cr_net_listen_tcp(D.net, D.listen, (int)port, &D.port) == 0)
            goto listening;
        port = 0;
    }
    if ((e = cr_net_listen_tcp(D.net, D.listen, (int)port, &D.port)) < 0) {
        fprintf(stderr, "corrald: cannot listen on %s:%u: %s\n", D.listen ? D.listen : "127.0.0.1",
                port, cr_strerror(e));
        goto loop_out;
    }
listening:
    D.address = cr_asprintf(
        "%s:%d", D.listen && strcmp(D.listen, "0.0.0.0") ? D.listen : "127.0.0.1", D.port);
    char *text = cr_asprintf("%s\n", D.address), *pidtext = cr_asprintf("%d\n", (int)getpid());
    e = write_file("address", text);
    if (e == 0)
        e = write_file("corrald.pid", pidtext);
    free(text);
    free(pidtext);
    if (e < 0)
        goto loop_out;
    agent_config_t ac = {.loop = &D.loop,
                         .node = D.node,
                         .hwo = &D.hwo,
                         .logs = D.logs,
                         .socket = D.sock,
                         .ops = {.started = agent_started_local, .exited = agent_exited_local}};
    D.agent = agent_new(&ac);
    uv_signal_init(&D.loop, &D.sig_term);
    uv_signal_init(&D.loop, &D.sig_int);
    uv_signal_start(&D.sig_term, on_signal, SIGTERM);
    uv_signal_start(&D.sig_int, on_signal, SIGINT);
    follow_init(&D.loop, &head_follow_ops, NULL);
    uv_timer_init(&D.loop, &D.tick);
    uint32_t every = D.heartbeat_ms / 2 < 100 ? D.heartbeat_ms / 2 : 100;
    uv_timer_start(&D.tick, on_tick, every ? every : 10, every ? every : 10);
    event("started", NULL, "head on %s%s: %zu device(s), socket %s, tcp %s", node_name(),
          D.node->simulated ? " (simulated)" : "", D.node->devices.n, D.sock, D.address);
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
    head_batch_fini(); /* a turn's writes not yet committed */
    follow_fini();
    agent_free(D.agent);
    D.agent = NULL;
    jobs_free();
    pgs_free();
    uv_run(&D.loop, UV_RUN_DEFAULT); /* close callbacks of released workers */
    if (uv_loop_close(&D.loop) != 0)
        cr_warn("loop closed with handles left");
out:
    if (D.st) {
        if (rc == 0)
            event("stopped", NULL, "clean exit");
        cr_state_close(D.st);
    }
    if (D.sock && rc != 0)
        unlink(D.sock);
    if (rc == 0 && D.session) { /* a clean exit: the next head starts a new session */
        char *pidf = cr_asprintf("%s/corrald.pid", D.session);
        unlink(pidf);
        free(pidf);
    }
    nodes_free();
    sched_cluster_free(D.cluster);
    hw_node_free(D.node);
    free(D.session);
    free(D.logs);
    free(D.sock);
    free(D.address);
    return rc;
}
