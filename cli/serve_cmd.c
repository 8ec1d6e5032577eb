/* corral serve (docs/serve.md): OpenAI-compatible endpoints from replicas
 * of an inference engine placed on the cluster.
 *
 * `serve deploy FILE` starts the deployment's router, a process of its own
 * on this machine (`corral serve router`, detached, its state in
 * CORRAL_HOME/serve/NAME/). The router process holds the HTTP server
 * (serve/router.c) and, on its main thread, the replica manager: one job
 * per replica (a distributed gang, so that its worker 0 gets a port from
 * its node's agent as MASTER_PORT), the engine started through
 * `corral serve exec`, which fills {host} and {port} and says where it
 * listens on its stdout; the manager reads that from the job's output,
 * health-checks it and tells the router. A replica whose process dies is
 * restarted by the head (the gang's restart policy) or, once its job is
 * over, submitted again. status, list, logs and delete talk to the router
 * (its admin token in state.json, 0600) and to the head. */
#include "cli.h"
#include "net/tls.h"
#include "serve/serve.h"
#include <corral/corral.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ENDPOINT_TAG "corral-serve-endpoint "

static const char usage_text[] =
    "usage: corral serve deploy FILE [--api-key-file F] [--port N] [--wait]\n"
    "       corral serve status [NAME] [--json]\n"
    "       corral serve list\n"
    "       corral serve logs NAME [--model ID] [--replica N]\n"
    "       corral serve delete NAME\n"
    "\n"
    "Deploys the models of FILE (docs/serve.md) as replicas on the cluster behind one\n"
    "OpenAI-compatible router (/v1/models, /v1/chat/completions, /v1/completions,\n"
    "/v1/embeddings, /metrics) on router.host:router.port (loopback by default).\n"
    "  --api-key-file F   keys clients must send (Authorization: Bearer KEY), one a line\n"
    "  --port N           the router's port instead of the file's (0: any free one)\n"
    "  --wait             return once every model has its initial replicas ready\n"
    "A deploy of a name that runs is a rolling update: each changed model's replicas are\n"
    "replaced one at a time (a new one ready, then the old one drained and stopped).\n";

/* ---- the state directory ---- */

static int state_dir(const char *name, char *out, size_t size, bool create)
{
    char home[4096], why[1024];
    if (cr_home_path(home, sizeof(home)) < 0)
        return CR_E2BIG;
    char base[4200];
    snprintf(base, sizeof(base), "%s/serve", home);
    if (create && (cr_mkdir_private(home, why, sizeof(why)) < 0 ||
                   cr_mkdir_private(base, why, sizeof(why)) < 0)) {
        fprintf(stderr, "corral serve: %s\n", why);
        return CR_EACCES;
    }
    if (snprintf(out, size, "%s/%s", base, name ? name : "") >= (int)size)
        return CR_E2BIG;
    if (create && name && cr_mkdir_private(out, why, sizeof(why)) < 0) {
        fprintf(stderr, "corral serve: %s\n", why);
        return CR_EACCES;
    }
    return 0;
}

/* state.json of deployment name: NULL when there is none (said unless quiet). */
static json_t *state_read(const char *name, bool quiet)
{
    char dir[4300], path[4400], why[1024];
    if (state_dir(name, dir, sizeof(dir), false) < 0)
        return NULL;
    snprintf(path, sizeof(path), "%s/state.json", dir);
    char *data = NULL;
    size_t len = 0;
    if (cr_read_private(path, &data, &len, why, sizeof(why)) < 0) {
        if (!quiet)
            fprintf(stderr,
                    "corral serve: no deployment '%s' runs here (%s); `corral serve list` "
                    "lists them\n",
                    name, why);
        return NULL;
    }
    json_t *j = json_loadb(data, len, 0, NULL);
    free(data);
    if (!json_is_object(j) && !quiet)
        fprintf(stderr, "corral serve: %s is not a deployment's state; remove it\n", path);
    return j;
}

/* Whether pid is the router of this state: alive, ours, and started with
 * this state directory on its command line (pids are reused). */
static bool router_alive(const json_t *st)
{
    int pid = (int)json_integer_value(json_object_get(st, "pid"));
    const char *dir = json_string_value(json_object_get(st, "dir"));
    if (pid <= 1 || !dir)
        return false;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat sb;
    char buf[8192];
    ssize_t n = fstat(fd, &sb) == 0 && sb.st_uid == geteuid() ? read(fd, buf, sizeof(buf) - 1) : -1;
    close(fd);
    if (n <= 0)
        return false;
    bool is_router = false, has_dir = false;
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1) {
        buf[n] = '\0';
        is_router |= strcmp(buf + i, "router") == 0;
        has_dir |= strcmp(buf + i, dir) == 0;
    }
    return is_router && has_dir;
}

/* GET path from the router with its admin token: the body, malloc'ed. */
static char *router_get(const json_t *st, const char *path, int *status)
{
    const char *host = json_string_value(json_object_get(st, "host"));
    unsigned port = (unsigned)json_integer_value(json_object_get(st, "port"));
    /* a TLS router answers its admin calls on a plain loopback listener */
    if (json_integer_value(json_object_get(st, "admin_port")) > 0) {
        host = "127.0.0.1";
        port = (unsigned)json_integer_value(json_object_get(st, "admin_port"));
    }
    const char *tok = json_string_value(json_object_get(st, "admin_token"));
    if (!host || !tok)
        return NULL;
    serve_upstream_t *u = cr_malloc(sizeof(*u));
    char *out = NULL;
    if (serve_upstream_connect(u, host, port, 2000) == 0) {
        /* the admin token travels as a header: one request line of our own */
        char hdr[160];
        snprintf(hdr, sizeof(hdr), "X-Corral-Admin: %.64s\r\n", tok);
        if (serve_upstream_request(u, "GET", path, host, NULL, hdr, NULL, 0, 10000) == 0) {
            *status = u->status;
            cr_buf_t b = {0};
            char tmp[4096];
            ssize_t n;
            while ((n = serve_upstream_read(u, tmp, sizeof(tmp), 10000)) > 0)
                cr_buf_append(&b, tmp, (size_t)n);
            out = b.s ? b.s : cr_strdup("");
        }
    }
    serve_upstream_close(u);
    free(u);
    return out;
}

static const char *scheme_of(const json_t *st)
{
    const char *s = json_string_value(json_object_get(st, "scheme"));
    return s && strcmp(s, "https") == 0 ? "https" : "http";
}

/* ---- the replica manager (in the router process) ---- */

typedef struct slot {
    char *job_id;
    unsigned attempt;
    bool have_ep;
    char host[64];
    unsigned port;
    char node[64];
    int64_t next_check_ms;
    bool draining;
    bool roll_out; /* replaced by the surge slot once that is ready and this is idle */
    unsigned gen;  /* the file's version it was started from */
} slot_t;

/* A rolling update (a redeploy of a changed file): one replica at a time,
 * a new one is started in the spare slot (index target, the router has
 * max_replicas + 1), and once it is ready the oldest is drained, stopped
 * and the new one takes its slot; autoscaling waits meanwhile. */
typedef struct mstate {
    slot_t slots[SERVE_MAX_REPLICAS + 1];
    unsigned target;
    unsigned gen;
    bool rolling;
    int64_t high_since, low_since; /* autoscaling: since when load was above/below target */
} mstate_t;

static volatile sig_atomic_t stop_flag;
static void on_stop(int sig)
{
    CR_UNUSED(sig);
    stop_flag = 1;
}

static char self_exe[4096];

typedef struct logscan {
    unsigned attempt;
    char host[64];
    unsigned port;
    bool found;
    cr_buf_t line;
} logscan_t;

static void scan_line(logscan_t *ls, const char *s)
{
    unsigned a, p;
    char h[64];
    if (strncmp(s, ENDPOINT_TAG, strlen(ENDPOINT_TAG)) == 0 &&
        sscanf(s + strlen(ENDPOINT_TAG), "%u %63s %u", &a, h, &p) == 3 && a == ls->attempt &&
        p > 0 && p < 65536) {
        snprintf(ls->host, sizeof(ls->host), "%s", h);
        ls->port = p;
        ls->found = true;
    }
}

static void on_log(void *arg, unsigned worker, int stream, const char *data, size_t len)
{
    logscan_t *ls = arg;
    if (worker != 0 || stream != 0)
        return;
    for (size_t i = 0; i < len; i++) {
        if (data[i] == '\n') {
            if (ls->line.s)
                scan_line(ls, ls->line.s);
            ls->line.len = 0;
            if (ls->line.s)
                ls->line.s[0] = '\0';
        } else if (ls->line.len < 512) {
            cr_buf_append(&ls->line, data + i, 1);
        }
    }
}

static int submit_replica(corral_t *c, const serve_config_t *cfg, const serve_model_t *m, size_t mi,
                          size_t i, char **job_id)
{
    CR_UNUSED(mi);
    CR_VEC(const char *) argv = {0};
    *CR_VEC_PUSH(&argv) = self_exe;
    *CR_VEC_PUSH(&argv) = "serve";
    *CR_VEC_PUSH(&argv) = "exec";
    *CR_VEC_PUSH(&argv) = "--model-source";
    *CR_VEC_PUSH(&argv) = m->model_source;
    *CR_VEC_PUSH(&argv) = "--";
    for (size_t k = 0; k < m->ncommand; k++)
        *CR_VEC_PUSH(&argv) = m->command[k];
    *CR_VEC_PUSH(&argv) = NULL;
    char name[200], sel[200] = "";
    snprintf(name, sizeof(name), "serve:%s:%s:%zu", cfg->name, m->model_id, i);
    if (m->accelerator_type[0])
        snprintf(sel, sizeof(sel), "corral.io/accelerator-type=%s", m->accelerator_type);
    if (m->topology[0])
        snprintf(sel + strlen(sel), sizeof(sel) - strlen(sel), "%scorral.io/tpu-slice-topology=%s",
                 sel[0] ? "," : "", m->topology);
    corral_job_spec_t spec = {
        .name = name,
        .argv = argv.v,
        .resources = m->resources,
        .num_workers = m->bundles.n ? (unsigned)m->bundles.n : 1,
        .restart = CORRAL_RESTART_GANG,
        .max_restarts = 1000, /* the head's most; then the job fails and a new one is submitted */
        .backoff_ms = 100,
        .selector = sel[0] ? sel : NULL,
        .domain = m->topology[0] ? "corral.io/tpu-slice-name" : NULL,
        .distributed = 1,
        .wait_for_nodes = 1,
        .grace_ms = 5000,
    };
    corral_strategy_parse(m->strategy, &spec.strategy);
    int err = corral_submit(c, &spec, job_id);
    CR_VEC_FREE(&argv);
    return err;
}

/* One pass over model mi's replicas. */
static void manage_model(corral_t *c, serve_router_t *r, const serve_config_t *cfg, size_t mi,
                         mstate_t *ms)
{
    const serve_model_t *m = &cfg->models.v[mi];
    int64_t now = cr_mono_ms();
    char note[256] = "";
    if (ms->rolling) {
        int old = -1;
        for (unsigned i = 0; i < ms->target && old < 0; i++)
            if (ms->slots[i].job_id && ms->slots[i].gen != ms->gen)
                old = (int)i;
        unsigned sp = ms->target; /* the spare slot */
        if (old < 0) {
            ms->rolling = false;
            fprintf(stderr, "corral serve: %s: rolling update done\n", m->model_id);
        } else if (sp <= m->max_replicas && sp < SERVE_MAX_REPLICAS) {
            slot_t *S = &ms->slots[sp];
            snprintf(note, sizeof(note), "rolling update: replacing replica %d", old);
            if (!S->job_id) {
                if (submit_replica(c, cfg, m, mi, sp, &S->job_id) == 0) {
                    S->gen = ms->gen;
                    S->attempt = 0;
                    S->have_ep = false;
                    serve_router_set_replica(r, mi, sp, NULL, 0, SERVE_REPLICA_STARTING, S->job_id,
                                             "");
                } else {
                    snprintf(note, sizeof(note), "rolling update: %s", corral_errmsg(c));
                    S->job_id = NULL;
                }
            } else if (serve_router_replica_state(r, mi, sp) == SERVE_REPLICA_READY) {
                slot_t *o = &ms->slots[old];
                serve_router_set_replica(r, mi, (size_t)old, NULL, 0, SERVE_REPLICA_DRAINING, NULL,
                                         NULL);
                if (serve_router_replica_ongoing(r, mi, (size_t)old) == 0) {
                    corral_stop(c, o->job_id, 0);
                    fprintf(stderr, "corral serve: %s: replica %d (job %s) replaced by job %s\n",
                            m->model_id, old, o->job_id, S->job_id);
                    free(o->job_id);
                    *o = *S; /* the new one takes the slot */
                    memset(S, 0, sizeof(*S));
                    serve_router_set_replica(r, mi, (size_t)old, o->host, o->port,
                                             SERVE_REPLICA_READY, o->job_id, o->node);
                    serve_router_set_replica(r, mi, sp, NULL, 0, SERVE_REPLICA_NONE, "", "");
                }
            }
        }
    }
    /* autoscaling on ongoing (and queued) requests per ready replica */
    unsigned ready = 0, ongoing = 0;
    for (unsigned i = 0; i < ms->target; i++) {
        if (serve_router_replica_state(r, mi, i) == SERVE_REPLICA_READY)
            ready++;
        ongoing += serve_router_replica_ongoing(r, mi, i);
    }
    unsigned queued = serve_router_queued(r, mi);
    double load = ready ? (double)(ongoing + queued) / ready : (queued ? 1e9 : 0);
    if (ms->rolling) {
        ms->high_since = ms->low_since = 0;
    } else if (ms->target == 0 && queued > 0 && m->max_replicas > 0) {
        ms->target = 1; /* scale from zero: the first request waits for it */
    } else if (load > m->target_ongoing_requests && ready == ms->target &&
               ms->target < m->max_replicas) {
        ms->low_since = 0;
        if (!ms->high_since)
            ms->high_since = now;
        if (now - ms->high_since >= (int64_t)(m->upscale_delay_s * 1000)) {
            ms->target++;
            ms->high_since = 0;
        }
    } else if (load < m->target_ongoing_requests * 0.5 && ms->target > m->min_replicas &&
               (ms->target > 1 || ongoing + queued == 0)) {
        ms->high_since = 0;
        if (!ms->low_since)
            ms->low_since = now;
        if (now - ms->low_since >= (int64_t)(m->downscale_delay_s * 1000)) {
            ms->slots[ms->target - 1].draining = true;
            ms->low_since = 0;
        }
    } else {
        ms->high_since = ms->low_since = 0;
    }
    for (unsigned i = 0; i < SERVE_MAX_REPLICAS && i <= m->max_replicas; i++) {
        slot_t *s = &ms->slots[i];
        if (i >= ms->target && !s->job_id)
            continue;
        if (s->draining) { /* graceful: no new requests, stopped once idle */
            serve_router_set_replica(r, mi, i, NULL, 0, SERVE_REPLICA_DRAINING, s->job_id, s->node);
            if (serve_router_replica_ongoing(r, mi, i) == 0) {
                if (s->job_id)
                    corral_stop(c, s->job_id, 0);
                CR_FREE(s->job_id);
                s->draining = s->have_ep = false;
                serve_router_set_replica(r, mi, i, NULL, 0, SERVE_REPLICA_NONE, "", "");
                if (ms->target == i + 1)
                    ms->target--;
            }
            continue;
        }
        if (!s->job_id) {
            int err = submit_replica(c, cfg, m, mi, i, &s->job_id);
            s->gen = ms->gen;
            if (err) {
                snprintf(note, sizeof(note), "replica %u cannot be placed: %s", i,
                         corral_errmsg(c));
                s->job_id = NULL;
                continue;
            }
            s->attempt = 0;
            s->have_ep = false;
            serve_router_set_replica(r, mi, i, NULL, 0, SERVE_REPLICA_STARTING, s->job_id, "");
            continue;
        }
        corral_job_t j = {0};
        if (corral_job_status(c, s->job_id, &j) < 0) {
            snprintf(note, sizeof(note), "replica %u: job %s: %s", i, s->job_id, corral_errmsg(c));
            continue;
        }
        if (corral_job_state_is_final(j.state)) {
            fprintf(stderr, "corral serve: replica %u of %s (job %s) ended: %s %s; replacing it\n",
                    i, m->model_id, s->job_id, corral_job_state_name(j.state), j.reason);
            serve_router_set_replica(r, mi, i, NULL, 0, SERVE_REPLICA_DOWN, s->job_id, "");
            CR_FREE(s->job_id);
            corral_job_free(&j);
            continue;
        }
        if (j.state != CORRAL_JOB_RUNNING || j.nworkers == 0 ||
            strcmp(j.workers[0].state, "RUNNING") != 0) {
            if (j.state == CORRAL_JOB_PENDING && !note[0])
                snprintf(note, sizeof(note), "replica %u pending: %s", i,
                         j.reason[0] ? j.reason : "waiting to be placed");
            if (s->have_ep)
                serve_router_set_replica(r, mi, i, NULL, 0, SERVE_REPLICA_DOWN, s->job_id, "");
            s->have_ep = false;
            corral_job_free(&j);
            continue;
        }
        if (!s->have_ep || j.workers[0].attempt != s->attempt) {
            logscan_t ls = {.attempt = j.workers[0].attempt};
            if (corral_job_logs(c, s->job_id, 0, on_log, &ls) == 0 && ls.line.s)
                scan_line(&ls, ls.line.s); /* a last line without its newline */
            cr_buf_free(&ls.line);
            if (ls.found) {
                s->have_ep = true;
                s->attempt = ls.attempt;
                snprintf(s->host, sizeof(s->host), "%s", ls.host);
                s->port = ls.port;
                snprintf(s->node, sizeof(s->node), "%s", j.workers[0].node_id);
                serve_router_set_replica(r, mi, i, s->host, s->port, SERVE_REPLICA_STARTING,
                                         s->job_id, s->node);
                s->next_check_ms = 0;
            } else if (s->have_ep) { /* restarted: not there yet */
                s->have_ep = false;
                serve_router_set_replica(r, mi, i, NULL, 0, SERVE_REPLICA_STARTING, s->job_id,
                                         j.workers[0].node_id);
            }
        }
        corral_job_free(&j);
        if (!s->have_ep || now < s->next_check_ms)
            continue;
        s->next_check_ms = now + (int64_t)(m->health_check_period_s * 1000);
        serve_replica_state_t st = serve_router_replica_state(r, mi, i);
        int tmo = (int)(m->health_check_timeout_s * 1000);
        bool ok = serve_upstream_healthy(s->host, s->port, m->health, tmo > 2000 ? 2000 : tmo);
        if (ok && st != SERVE_REPLICA_READY) {
            fprintf(stderr, "corral serve: replica %u of %s ready at %s:%u (job %s, node %s)\n", i,
                    m->model_id, s->host, s->port, s->job_id, s->node);
            serve_router_set_replica(r, mi, i, s->host, s->port, SERVE_REPLICA_READY, s->job_id,
                                     s->node);
        } else if (!ok && st == SERVE_REPLICA_READY &&
                   serve_router_replica_ongoing(r, mi, i) == 0) {
            /* a busy replica is never taken out for a slow health check */
            serve_router_set_replica(r, mi, i, s->host, s->port, SERVE_REPLICA_STARTING, s->job_id,
                                     s->node);
        } else if (!ok && st == SERVE_REPLICA_DOWN) {
            serve_router_set_replica(r, mi, i, s->host, s->port, SERVE_REPLICA_STARTING, s->job_id,
                                     s->node);
        }
    }
    serve_router_set_note(r, mi, note);
}

/* the router's TLS, for state.json: its certificate's pin ("" without
 * TLS), where the certificate is, and its plain loopback admin port */
static char tls_pin[80], tls_cert_path[4400];
static unsigned admin_port;

static int write_state(const char *dir, const serve_config_t *cfg, const char *cfgpath,
                       const char *host, unsigned port, const char *token, const char *status)
{
    json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:s,s:i,s:s,s:s,s:s,s:i}", "name", cfg->name, "config",
                          cfgpath, "host", host, "port", (int)port, "admin_token", token, "pid",
                          (int)getpid(), "dir", dir, "status", status, "scheme",
                          tls_pin[0] ? "https" : "http", "admin_port", (int)admin_port);
    if (tls_pin[0]) {
        json_object_set_new(j, "tls_fingerprint", json_string(tls_pin));
        json_object_set_new(j, "tls_cert", json_string(tls_cert_path));
    }
    char *s = json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    char path[4400], why[1024];
    snprintf(path, sizeof(path), "%s/state.json", dir);
    int err = cr_write_private(path, s, strlen(s), why, sizeof(why));
    if (err)
        fprintf(stderr, "corral serve: %s\n", why);
    free(s);
    return err;
}

static char **read_keys(const char *path)
{
    char *data = NULL, why[1024];
    size_t len = 0;
    if (cr_read_private(path, &data, &len, why, sizeof(why)) < 0) {
        fprintf(stderr, "corral serve: --api-key-file: %s (it must be yours, mode 0600)\n", why);
        return NULL;
    }
    CR_VEC(char *) v = {0};
    for (char *save = NULL, *line = strtok_r(data, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\r' || line[n - 1] == ' '))
            line[--n] = '\0';
        if (n && line[0] != '#')
            *CR_VEC_PUSH(&v) = cr_strdup(line);
    }
    free(data);
    if (!v.n) {
        fprintf(stderr, "corral serve: %s holds no key (one a line)\n", path);
        return NULL;
    }
    *CR_VEC_PUSH(&v) = NULL;
    return v.v;
}

static bool same_model(const serve_model_t *a, const serve_model_t *b)
{
    if (a->ncommand != b->ncommand || strcmp(a->model_source, b->model_source) != 0 ||
        strcmp(a->resources, b->resources) != 0 ||
        strcmp(a->accelerator_type, b->accelerator_type) || strcmp(a->topology, b->topology) != 0 ||
        strcmp(a->strategy, b->strategy) != 0 || a->bundles.n != b->bundles.n ||
        strcmp(a->health, b->health) != 0)
        return false;
    for (size_t i = 0; i < a->ncommand; i++)
        if (strcmp(a->command[i], b->command[i]) != 0)
            return false;
    return true;
}

/* A `serve deploy` of a running name leaves the file's path in
 * DIR/redeploy: the new file replaces cfg (returned) and each model whose
 * engine, source or resources changed rolls; what the router itself holds
 * (the models, their limits, its address) must stay, else the answer in
 * DIR/redeploy.result says to delete first. */
static serve_config_t *maybe_redeploy(const char *dir, serve_config_t *cfg, mstate_t *ms)
{
    char path[4400], rp[4400], why[1024];
    snprintf(path, sizeof(path), "%s/redeploy", dir);
    snprintf(rp, sizeof(rp), "%s/redeploy.result", dir);
    char *file = NULL;
    size_t len = 0;
    if (cr_read_private(path, &file, &len, why, sizeof(why)) < 0)
        return cfg;
    unlink(path);
    serve_config_t *n = NULL;
    char *msg = NULL;
    if (serve_config_load(file, &n, &msg) < 0) {
        char *res = cr_asprintf("error: %s\n", msg);
        cr_write_private(rp, res, strlen(res), why, sizeof(why));
        free(res);
        free(msg);
        free(file);
        return cfg;
    }
    const char *bad = NULL;
    if (strcmp(n->name, cfg->name) != 0 || n->models.n != cfg->models.n)
        bad = "the name or the list of models changed";
    else if (strcmp(n->router_host, cfg->router_host) != 0 || n->router_port != cfg->router_port ||
             n->upstream_keepalive != cfg->upstream_keepalive ||
             strcmp(n->tls_cert_file, cfg->tls_cert_file) != 0 ||
             strcmp(n->tls_key_file, cfg->tls_key_file) != 0)
        bad = "the router's address, upstream_keepalive or TLS files changed";
    for (size_t k = 0; !bad && k < n->models.n; k++) {
        const serve_model_t *a = &cfg->models.v[k], *b = &n->models.v[k];
        if (strcmp(a->model_id, b->model_id) != 0 ||
            a->max_ongoing_requests != b->max_ongoing_requests ||
            a->max_queued_requests != b->max_queued_requests ||
            a->max_replicas != b->max_replicas || a->prefix_affinity != b->prefix_affinity ||
            a->imbalanced_threshold != b->imbalanced_threshold ||
            a->match_rate_threshold != b->match_rate_threshold)
            bad = "a model_id, max_ongoing_requests, max_queued_requests, replicas.max or "
                  "request_router changed";
    }
    if (bad) {
        char *res = cr_asprintf("error: %s: a rolling update changes engines, sources and "
                                "resources only; `corral serve delete %s`, then deploy\n",
                                bad, cfg->name);
        cr_write_private(rp, res, strlen(res), why, sizeof(why));
        free(res);
        serve_config_free(n);
        free(file);
        return cfg;
    }
    size_t nroll = 0;
    for (size_t k = 0; k < n->models.n; k++)
        if (!same_model(&cfg->models.v[k], &n->models.v[k])) {
            ms[k].gen++;
            ms[k].rolling = true;
            nroll++;
        }
    fprintf(stderr, "corral serve: redeploy of %s: %zu model(s) to roll\n", file, nroll);
    if (!nroll)
        cr_write_private(rp, "done\n", 5, why, sizeof(why));
    free(file);
    serve_config_free(cfg);
    return n;
}

/* The router's certificate and key (PEM, malloc'ed) when it runs TLS: the
 * file's router.tls_cert_file and tls_key_file; else, off loopback, a
 * self-signed one made now (net/'s TLS shim, as the head's) and kept in
 * DIR (0600), whose SHA-256 clients pin. On loopback without files: none
 * (plain HTTP). Off loopback without TLS the router does not start. */
static int router_tls(const serve_config_t *cfg, const char *dir, bool loopback, char **cert,
                      char **key)
{
    char why[1024];
    size_t len;
    *cert = *key = NULL;
    tls_pin[0] = '\0';
    if (loopback && !cfg->tls_cert_file[0])
        return 0;
    const cr_tls_ops_t *ops = cr_tls_load(why, sizeof(why));
    if (cfg->tls_cert_file[0]) {
        if (cr_read_private(cfg->tls_cert_file, cert, &len, why, sizeof(why)) < 0 ||
            cr_read_private(cfg->tls_key_file, key, &len, why, sizeof(why)) < 0) {
            fprintf(stderr, "corral serve: router.tls_cert_file/tls_key_file: %s\n", why);
            goto fail;
        }
        snprintf(tls_cert_path, sizeof(tls_cert_path), "%s", cfg->tls_cert_file);
    } else {
        if (!ops || ops->selfsigned(cfg->router_host, cert, key, why, sizeof(why)) != 0) {
            fprintf(stderr,
                    "corral serve: the router listens on %s, off loopback, and so needs TLS, but "
                    "no certificate could be made (%s); give router.tls_cert_file and "
                    "tls_key_file, or listen on 127.0.0.1\n",
                    cfg->router_host, why);
            goto fail;
        }
        char kp[4400];
        snprintf(tls_cert_path, sizeof(tls_cert_path), "%s/tls.crt", dir);
        snprintf(kp, sizeof(kp), "%s/tls.key", dir);
        if (cr_write_private(tls_cert_path, *cert, strlen(*cert), why, sizeof(why)) < 0 ||
            cr_write_private(kp, *key, strlen(*key), why, sizeof(why)) < 0) {
            fprintf(stderr, "corral serve: %s\n", why);
            goto fail;
        }
    }
    uint8_t fp[CR_TLS_FP_LEN];
    if (!ops || ops->fingerprint(*cert, strlen(*cert), fp, why, sizeof(why)) != 0) {
        fprintf(stderr, "corral serve: the router's certificate: %s\n", ops ? why : "no TLS shim");
        goto fail;
    }
    int k = snprintf(tls_pin, sizeof(tls_pin), "sha256:");
    for (size_t i = 0; i < CR_TLS_FP_LEN; i++)
        k += snprintf(tls_pin + k, sizeof(tls_pin) - (size_t)k, "%02x", fp[i]);
    fprintf(stderr, "corral serve: TLS on %s with certificate %s (%s)\n", cfg->router_host, tls_pin,
            tls_cert_path);
    return 0;
fail:
    free(*cert);
    free(*key);
    *cert = *key = NULL;
    tls_pin[0] = '\0';
    return CR_EINVAL;
}

/* corral serve router FILE DIR [--api-key-file F] [--port N]: the router
 * process (started detached by deploy). */
static int cmd_router(int argc, char **argv)
{
    const char *keyfile = NULL;
    unsigned port = 65536;
    const cli_opt_t opts[] = {CLI_STR("api-key-file", &keyfile), CLI_UINT("port", &port, 0, 65535),
                              CLI_END};
    int i = cli_parse_opts("corral serve router", opts, argc, argv, usage_text, NULL, false);
    if (i < 0)
        return i == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (argc - i != 2)
        return CLI_USAGE;
    const char *cfgpath = argv[i], *dir = argv[i + 1];
    serve_config_t *cfg = NULL;
    char *msg = NULL;
    if (serve_config_load(cfgpath, &cfg, &msg) < 0) {
        fprintf(stderr, "corral serve: %s\n", msg);
        free(msg);
        return CLI_FAIL;
    }
    if (!keyfile && cfg->api_key_file[0])
        keyfile = cfg->api_key_file;
    char **keys = keyfile ? read_keys(keyfile) : NULL;
    if (keyfile && !keys) {
        serve_config_free(cfg);
        return CLI_FAIL;
    }
    bool loopback =
        strncmp(cfg->router_host, "127.", 4) == 0 || strcmp(cfg->router_host, "::1") == 0;
    if (!loopback && !keys)
        fprintf(stderr,
                "corral serve: warning: the router listens on %s without an API key "
                "(--api-key-file); anyone who reaches it may use the models\n",
                cfg->router_host);
    char *cert = NULL, *key = NULL;
    if (router_tls(cfg, dir, loopback, &cert, &key) < 0) {
        serve_config_free(cfg);
        return CLI_FAIL;
    }
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    self_exe[n > 0 ? n : 0] = '\0';
    unsigned char rnd[16];
    char token[33];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd)) {
        fprintf(stderr, "corral serve: cannot read /dev/urandom\n");
        return CLI_FAIL;
    }
    close(fd);
    for (size_t k = 0; k < sizeof(rnd); k++)
        snprintf(token + 2 * k, 3, "%02x", rnd[k]);
    corral_t *c = NULL;
    if (corral_connect(NULL, NULL, &c, &msg) < 0) {
        fprintf(stderr, "corral serve: cannot reach the head: %s\n", msg);
        free(msg);
        return CLI_FAIL;
    }
    serve_router_opts_t ro = {.port = port <= 65535 ? port : 0,
                              .api_keys = (const char *const *)keys,
                              .admin_token = token,
                              .tls_cert_pem = cert,
                              .tls_key_pem = key};
    if (port == 0)
        ro.port = 0;
    serve_router_t *r = NULL;
    serve_config_t tmp = *cfg;
    if (port == 0)
        tmp.router_port = 0;
    int serr = serve_router_start(&tmp, &ro, &r, &msg);
    if (key)
        explicit_bzero(key, strlen(key));
    free(key);
    free(cert);
    if (serr < 0) {
        fprintf(stderr, "corral serve: %s\n", msg);
        free(msg);
        corral_disconnect(c);
        return CLI_FAIL;
    }
    admin_port = tls_pin[0] ? serve_router_admin_port(r) : 0;
    struct sigaction sa = {.sa_handler = on_stop};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    write_state(dir, cfg, cfgpath, cfg->router_host, serve_router_port(r), token, "running");
    fprintf(stderr, "corral serve: %s listening on %s:%u\n", cfg->name, cfg->router_host,
            serve_router_port(r));
    mstate_t *ms = cr_calloc(cfg->models.n, sizeof(*ms));
    for (size_t k = 0; k < cfg->models.n; k++)
        ms[k].target = cfg->models.v[k].initial_replicas;
    bool rolled = false;
    while (!stop_flag) {
        char dpath[4400];
        snprintf(dpath, sizeof(dpath), "%s/delete", dir);
        if (access(dpath, F_OK) == 0)
            break;
        cfg = maybe_redeploy(dir, cfg, ms);
        for (size_t k = 0; k < cfg->models.n && !stop_flag; k++)
            manage_model(c, r, cfg, k, &ms[k]);
        bool rolling = false;
        for (size_t k = 0; k < cfg->models.n; k++)
            rolling |= ms[k].rolling;
        if (rolled && !rolling) {
            char rp[4400], why[512];
            snprintf(rp, sizeof(rp), "%s/redeploy.result", dir);
            cr_write_private(rp, "done\n", 5, why, sizeof(why));
        }
        rolled = rolling;
        usleep(100000);
    }
    fprintf(stderr, "corral serve: %s stopping: draining the router, stopping the replicas\n",
            cfg->name);
    /* graceful drain: no new requests are sent to replicas; wait (bounded)
     * for the ongoing ones */
    for (size_t k = 0; k < cfg->models.n; k++)
        for (size_t x = 0; x < serve_router_nreplicas(r, k); x++)
            serve_router_set_replica(r, k, x, NULL, 0, SERVE_REPLICA_DRAINING, NULL, NULL);
    for (int t = 0; t < 300; t++) {
        unsigned busy = 0;
        for (size_t k = 0; k < cfg->models.n; k++)
            for (size_t x = 0; x < serve_router_nreplicas(r, k); x++)
                busy += serve_router_replica_ongoing(r, k, x);
        if (!busy)
            break;
        usleep(100000);
    }
    for (size_t k = 0; k < cfg->models.n; k++)
        for (size_t x = 0; x <= SERVE_MAX_REPLICAS; x++)
            if (ms[k].slots[x].job_id)
                corral_stop(c, ms[k].slots[x].job_id, 0);
    /* and wait for them to end (their grace period), so that a deleted
     * deployment holds no devices */
    for (size_t k = 0; k < cfg->models.n; k++)
        for (size_t x = 0; x <= SERVE_MAX_REPLICAS; x++)
            if (ms[k].slots[x].job_id) {
                corral_job_t j = {0};
                if (corral_wait(c, ms[k].slots[x].job_id, 15000, &j) == 0)
                    corral_job_free(&j);
                free(ms[k].slots[x].job_id);
            }
    free(ms);
    serve_router_stop(r);
    corral_disconnect(c);
    char path[4400];
    snprintf(path, sizeof(path), "%s/state.json", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/delete", dir);
    unlink(path);
    for (size_t k = 0; keys && keys[k]; k++)
        free(keys[k]);
    free(keys);
    serve_config_free(cfg);
    return CLI_OK;
}

/* corral serve exec --model-source S -- ENGINE...: a replica's worker. */
static int cmd_exec(int argc, char **argv)
{
    const char *src = "";
    const cli_opt_t opts[] = {CLI_STR("model-source", &src), CLI_END};
    int i = cli_parse_opts("corral serve exec", opts, argc, argv, usage_text, NULL, true);
    if (i < 0)
        return i == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (i < argc && strcmp(argv[i], "--") == 0)
        i++;
    if (i >= argc) {
        fprintf(stderr, "corral serve exec: no engine command\n");
        return CLI_USAGE;
    }
    const char *host = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    const char *attempt = getenv("CORRAL_RESTART_COUNT"), *rank = getenv("RANK");
    if (!host || !port) {
        fprintf(stderr, "corral serve exec: no MASTER_ADDR/MASTER_PORT: run by `corral serve "
                        "deploy` only\n");
        return CLI_FAIL;
    }
    char **av = cr_calloc((size_t)(argc - i + 1), sizeof(char *));
    for (int k = i; k < argc; k++)
        av[k - i] = serve_subst(argv[k], src, host, port);
    if (!rank || strcmp(rank, "0") == 0) {
        printf(ENDPOINT_TAG "%s %s %s\n", attempt ? attempt : "0", host, port);
        fflush(stdout);
    }
    execvp(av[0], av);
    fprintf(stderr, "corral serve exec: cannot run %s: %s\n", av[0], strerror(errno));
    return 127;
}

static int cmd_deploy(int argc, char **argv)
{
    const char *keyfile = NULL;
    unsigned port = 65536;
    bool wait = false;
    const cli_opt_t opts[] = {CLI_STR("api-key-file", &keyfile), CLI_UINT("port", &port, 0, 65535),
                              CLI_FLAG("wait", &wait), CLI_END};
    int i = cli_parse_opts("corral serve deploy", opts, argc, argv, usage_text, NULL, false);
    if (i < 0)
        return i == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (argc - i != 1) {
        fprintf(stderr, "corral serve deploy: give one deployment file\n%s", usage_text);
        return CLI_USAGE;
    }
    char *cfgpath = cli_abs_path("corral serve deploy", "the file", argv[i]);
    if (!cfgpath)
        return CLI_USAGE;
    serve_config_t *cfg = NULL;
    char *msg = NULL;
    if (serve_config_load(cfgpath, &cfg, &msg) < 0) {
        fprintf(stderr, "corral serve deploy: %s\n", msg);
        free(msg);
        free(cfgpath);
        return CLI_USAGE;
    }
    /* the head must be there before anything starts */
    corral_t *c = NULL;
    if (corral_connect(NULL, NULL, &c, &msg) < 0) {
        fprintf(stderr, "corral serve deploy: cannot reach the head: %s (`corral start --head`)\n",
                msg);
        free(msg);
        goto fail;
    }
    corral_disconnect(c);
    json_t *old = state_read(cfg->name, true);
    if (old && router_alive(old)) {
        /* a rolling update: the router takes the file and answers when done */
        const char *odir = json_string_value(json_object_get(old, "dir"));
        char rq[4400], rp[4400], why[1024];
        snprintf(rq, sizeof(rq), "%s/redeploy", odir);
        snprintf(rp, sizeof(rp), "%s/redeploy.result", odir);
        unlink(rp);
        int rc = CLI_FAIL;
        if (cr_write_private(rq, cfgpath, strlen(cfgpath), why, sizeof(why)) < 0) {
            fprintf(stderr, "corral serve deploy: %s\n", why);
        } else {
            cli_waitline_t wl;
            cli_waitline_init(&wl, "corral serve deploy", "the rolling update");
            for (int t = 0; t < 6000; t++) {
                char *res = NULL;
                size_t rlen = 0;
                if (cr_read_private(rp, &res, &rlen, why, sizeof(why)) == 0) {
                    cli_waitline_done(&wl);
                    if (strncmp(res, "done", 4) == 0) {
                        printf("corral serve: %s updated (rolling)\n", cfg->name);
                        rc = CLI_OK;
                    } else {
                        fprintf(stderr, "corral serve deploy: %s", res);
                    }
                    free(res);
                    unlink(rp);
                    break;
                }
                if (!router_alive(old)) {
                    cli_waitline_done(&wl);
                    fprintf(stderr,
                            "corral serve deploy: the router ended (its log: %s/router.log)\n",
                            odir);
                    break;
                }
                cli_waitline_show(&wl, "replicas being replaced one at a time", 0);
                usleep(100000);
            }
        }
        json_decref(old);
        serve_config_free(cfg);
        free(cfgpath);
        return rc;
    }
    json_decref(old);
    char dir[4300];
    if (state_dir(cfg->name, dir, sizeof(dir), true) < 0)
        goto fail;
    char path[4400];
    snprintf(path, sizeof(path), "%s/state.json", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/delete", dir);
    unlink(path);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    char portbuf[16];
    snprintf(portbuf, sizeof(portbuf), "%u", port);
    pid_t pid = fork();
    if (pid < 0) {
        perror("corral serve deploy: fork");
        goto fail;
    }
    if (pid == 0) {
        setsid();
        snprintf(path, sizeof(path), "%s/router.log", dir);
        char why[512];
        int fd = cr_open_private(path, O_WRONLY | O_CREAT | O_APPEND, why, sizeof(why));
        int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || nul < 0)
            _exit(126);
        dup2(nul, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        const char *av[12];
        int k = 0;
        av[k++] = self;
        av[k++] = "serve";
        av[k++] = "router";
        if (keyfile) {
            av[k++] = "--api-key-file";
            av[k++] = keyfile;
        }
        if (port <= 65535) {
            av[k++] = "--port";
            av[k++] = portbuf;
        }
        av[k++] = cfgpath;
        av[k++] = dir;
        av[k] = NULL;
        execv(self, (char **)av);
        _exit(127);
    }
    /* wait for it to listen (or to fail) */
    json_t *st = NULL;
    for (int t = 0; t < 600 && !st; t++) {
        int wst;
        if (waitpid(pid, &wst, WNOHANG) == pid) {
            snprintf(path, sizeof(path), "%s/router.log", dir);
            fprintf(stderr, "corral serve deploy: the router exited; its log (%s) says:\n", path);
            FILE *f = fopen(path, "r");
            char line[1024];
            while (f && fgets(line, sizeof(line), f))
                fputs(line, stderr);
            if (f)
                fclose(f);
            goto fail;
        }
        st = state_read(cfg->name, true);
        if (!st)
            usleep(50000);
    }
    if (!st) {
        fprintf(stderr, "corral serve deploy: the router did not start in 30 s\n");
        goto fail;
    }
    printf("corral serve: %s at %s://%s:%d/v1 (router pid %d); `corral serve status %s`\n",
           cfg->name, scheme_of(st), json_string_value(json_object_get(st, "host")),
           (int)json_integer_value(json_object_get(st, "port")), (int)pid, cfg->name);
    if (json_string_value(json_object_get(st, "tls_fingerprint")))
        printf("corral serve: TLS with the certificate %s (%s); clients trust it with "
               "curl --cacert %s, or pin its fingerprint\n",
               json_string_value(json_object_get(st, "tls_fingerprint")),
               json_string_value(json_object_get(st, "tls_cert")),
               json_string_value(json_object_get(st, "tls_cert")));
    fflush(stdout);
    int rc = CLI_OK;
    if (wait) { /* every model's initial replicas ready */
        cli_waitline_t wl;
        cli_waitline_init(&wl, "corral serve deploy", "replicas");
        for (;;) {
            int status = 0;
            char *body = router_get(st, "/-/status", &status);
            json_t *j = body ? json_loads(body, 0, NULL) : NULL;
            free(body);
            bool all = j != NULL;
            char reason[256] = "starting";
            size_t mi;
            json_t *mj;
            json_array_foreach(json_object_get(j, "models"), mi, mj)
            {
                size_t ready = 0, ri;
                json_t *rj;
                json_array_foreach(json_object_get(mj, "replicas"), ri, rj) ready +=
                    strcmp(json_string_value(json_object_get(rj, "state")), "READY") == 0;
                const char *note = json_string_value(json_object_get(mj, "note"));
                if (mi < cfg->models.n && ready < cfg->models.v[mi].initial_replicas) {
                    all = false;
                    snprintf(reason, sizeof(reason), "%s: %zu of %u ready%s%s",
                             cfg->models.v[mi].model_id, ready, cfg->models.v[mi].initial_replicas,
                             note && note[0] ? "; " : "", note ? note : "");
                }
            }
            json_decref(j);
            if (all)
                break;
            if (!router_alive(st)) {
                fprintf(stderr, "corral serve deploy: the router ended (its log: %s/router.log)\n",
                        dir);
                rc = CLI_FAIL;
                break;
            }
            cli_waitline_show(&wl, reason, 0);
            usleep(200000);
        }
        cli_waitline_done(&wl);
        if (rc == CLI_OK)
            printf("corral serve: %s ready\n", cfg->name);
    }
    json_decref(st);
    serve_config_free(cfg);
    free(cfgpath);
    return rc;
fail:
    serve_config_free(cfg);
    free(cfgpath);
    return CLI_FAIL;
}

static void print_status(const json_t *st, const json_t *j)
{
    printf("%s: %s://%s:%d/v1 (router pid %d)\n", json_string_value(json_object_get(st, "name")),
           scheme_of(st), json_string_value(json_object_get(st, "host")),
           (int)json_integer_value(json_object_get(j, "port")),
           (int)json_integer_value(json_object_get(st, "pid")));
    size_t mi;
    json_t *m;
    json_array_foreach(json_object_get(j, "models"), mi, m)
    {
        const char *note = json_string_value(json_object_get(m, "note"));
        printf("  model %s: queued %d, requests %lld, errors %lld, rejected %lld%s%s\n",
               cli_esc(json_string_value(json_object_get(m, "model_id"))),
               (int)json_integer_value(json_object_get(m, "queued")),
               (long long)json_integer_value(json_object_get(m, "requests")),
               (long long)json_integer_value(json_object_get(m, "errors")),
               (long long)json_integer_value(json_object_get(m, "rejected")),
               note && note[0] ? "\n    pending: " : "", note ? cli_esc(note) : "");
        printf("    %-3s %-9s %-22s %-8s %-12s %7s %9s\n", "#", "STATE", "ENDPOINT", "JOB", "NODE",
               "ONGOING", "REQUESTS");
        size_t ri;
        json_t *r;
        json_array_foreach(json_object_get(m, "replicas"), ri, r)
        {
            char ep[96];
            snprintf(ep, sizeof(ep), "%s:%d", json_string_value(json_object_get(r, "host")),
                     (int)json_integer_value(json_object_get(r, "port")));
            printf("    %-3zu %-9s %-22s %-8s %-12s %7d %9lld\n", ri,
                   json_string_value(json_object_get(r, "state")), ep,
                   cli_esc(json_string_value(json_object_get(r, "job"))),
                   cli_esc(json_string_value(json_object_get(r, "node"))),
                   (int)json_integer_value(json_object_get(r, "ongoing")),
                   (long long)json_integer_value(json_object_get(r, "requests")));
        }
    }
}

static json_t *live_status(const char *name, json_t **stp)
{
    json_t *st = state_read(name, false);
    if (!st)
        return NULL;
    if (!router_alive(st)) {
        fprintf(stderr,
                "corral serve: the router of '%s' is not running (pid %d ended); its log "
                "is in %s/router.log\n",
                name, (int)json_integer_value(json_object_get(st, "pid")),
                json_string_value(json_object_get(st, "dir")));
        json_decref(st);
        return NULL;
    }
    int status = 0;
    char *body = router_get(st, "/-/status", &status);
    json_t *j = body && status == 200 ? json_loads(body, 0, NULL) : NULL;
    free(body);
    if (!j) {
        fprintf(stderr, "corral serve: the router of '%s' did not answer its status\n", name);
        json_decref(st);
        return NULL;
    }
    *stp = st;
    return j;
}

typedef CR_VEC(char *) names_t;
static int list_names(names_t *out)
{
    char dir[4300];
    if (state_dir(NULL, dir, sizeof(dir), false) < 0)
        return CLI_FAIL;
    char cmd[4400];
    snprintf(cmd, sizeof(cmd), "%s", dir);
    DIR *d = opendir(cmd);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            *CR_VEC_PUSH(out) = cr_strdup(e->d_name);
    closedir(d);
    return 0;
}

static int cmd_status(int argc, char **argv, bool list)
{
    bool js = false;
    const cli_opt_t opts[] = {CLI_FLAG("json", &js), CLI_END};
    int i = cli_parse_opts("corral serve status", opts, argc, argv, usage_text, NULL, false);
    if (i < 0)
        return i == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    names_t names = {0};
    if (i < argc)
        *CR_VEC_PUSH(&names) = cr_strdup(argv[i]);
    else
        list_names(&names);
    int rc = CLI_OK;
    json_t *all = json_array();
    for (size_t k = 0; k < names.n; k++) {
        json_t *st = NULL, *j;
        if (list) {
            st = state_read(names.v[k], true);
            if (st && router_alive(st))
                printf("%-20s %s://%s:%d/v1  router pid %d  file %s\n", cli_esc(names.v[k]),
                       scheme_of(st), json_string_value(json_object_get(st, "host")),
                       (int)json_integer_value(json_object_get(st, "port")),
                       (int)json_integer_value(json_object_get(st, "pid")),
                       cli_esc(json_string_value(json_object_get(st, "config"))));
            json_decref(st);
            continue;
        }
        j = live_status(names.v[k], &st);
        if (!j) {
            rc = i < argc ? CLI_FAIL : rc;
            continue;
        }
        if (js) {
            json_object_set(j, "name", json_object_get(st, "name"));
            json_array_append(all, j);
        } else {
            print_status(st, j);
        }
        json_decref(j);
        json_decref(st);
    }
    if (js && !list)
        cli_print_json(i < argc ? json_array_get(all, 0) ? json_array_get(all, 0) : json_null()
                                : all);
    json_decref(all);
    for (size_t k = 0; k < names.n; k++)
        free(names.v[k]);
    CR_VEC_FREE(&names);
    return rc;
}

static void print_piece(void *arg, unsigned w, int stream, const char *data, size_t len)
{
    CR_UNUSED(arg);
    CR_UNUSED(w);
    fwrite(data, 1, len, stream ? stderr : stdout);
}

static int cmd_logs(int argc, char **argv)
{
    const char *model = NULL;
    unsigned rep = 0;
    const cli_opt_t opts[] = {CLI_STR("model", &model), CLI_UINT("replica", &rep, 0, 100000),
                              CLI_END};
    int i = cli_parse_opts("corral serve logs", opts, argc, argv, usage_text, NULL, false);
    if (i < 0)
        return i == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (argc - i != 1) {
        fprintf(stderr, "corral serve logs: give the deployment's name\n");
        return CLI_USAGE;
    }
    json_t *st = NULL, *j = live_status(argv[i], &st);
    if (!j)
        return CLI_FAIL;
    const char *job = NULL;
    size_t mi;
    json_t *m;
    json_array_foreach(json_object_get(j, "models"), mi, m)
    {
        if (model && strcmp(model, json_string_value(json_object_get(m, "model_id"))) != 0)
            continue;
        json_t *r = json_array_get(json_object_get(m, "replicas"), rep);
        job = json_string_value(json_object_get(r, "job"));
        break;
    }
    int rc = CLI_FAIL;
    if (!job || !job[0]) {
        fprintf(stderr, "corral serve logs: no replica %u%s%s (yet); `corral serve status %s`\n",
                rep, model ? " of " : "", model ? model : "", argv[i]);
    } else {
        corral_t *c = NULL;
        char *msg = NULL;
        if (corral_connect(NULL, NULL, &c, &msg) < 0) {
            fprintf(stderr, "corral serve logs: %s\n", msg);
            free(msg);
        } else {
            if (corral_job_logs(c, job, -1, print_piece, NULL) == 0)
                rc = CLI_OK;
            else
                fprintf(stderr, "corral serve logs: job %s: %s\n", job, corral_errmsg(c));
            corral_disconnect(c);
        }
    }
    json_decref(j);
    json_decref(st);
    return rc;
}

static int cmd_delete(int argc, char **argv)
{
    const cli_opt_t opts[] = {CLI_END};
    int i = cli_parse_opts("corral serve delete", opts, argc, argv, usage_text, NULL, false);
    if (i < 0)
        return i == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (argc - i != 1) {
        fprintf(stderr, "corral serve delete: give the deployment's name\n");
        return CLI_USAGE;
    }
    json_t *st = state_read(argv[i], false);
    if (!st)
        return CLI_FAIL;
    const char *dir = json_string_value(json_object_get(st, "dir"));
    if (!router_alive(st)) {
        fprintf(stderr, "corral serve delete: the router of '%s' was not running; state removed\n",
                argv[i]);
        char path[4400];
        snprintf(path, sizeof(path), "%s/state.json", dir);
        unlink(path);
        json_decref(st);
        return CLI_OK;
    }
    /* the router drains and stops its replicas when it sees the file: no
     * signal to a pid */
    char path[4400], why[512];
    snprintf(path, sizeof(path), "%s/delete", dir);
    if (cr_write_private(path, "", 0, why, sizeof(why)) < 0) {
        fprintf(stderr, "corral serve delete: %s\n", why);
        json_decref(st);
        return CLI_FAIL;
    }
    int rc = CLI_FAIL;
    for (int t = 0; t < 900; t++) {
        if (!router_alive(st)) {
            rc = CLI_OK;
            break;
        }
        usleep(100000);
    }
    if (rc == CLI_OK)
        printf("corral serve: %s deleted (replicas drained and stopped)\n", argv[i]);
    else
        fprintf(stderr, "corral serve delete: the router did not stop in 90 s; see %s/router.log\n",
                dir);
    json_decref(st);
    return rc;
}

int cli_serve(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[1];
    if (strcmp(sub, "deploy") == 0)
        return cmd_deploy(argc - 1, argv + 1);
    if (strcmp(sub, "status") == 0)
        return cmd_status(argc - 1, argv + 1, false);
    if (strcmp(sub, "list") == 0)
        return cmd_status(argc - 1, argv + 1, true);
    if (strcmp(sub, "logs") == 0)
        return cmd_logs(argc - 1, argv + 1);
    if (strcmp(sub, "delete") == 0)
        return cmd_delete(argc - 1, argv + 1);
    if (strcmp(sub, "router") == 0)
        return cmd_router(argc - 1, argv + 1);
    if (strcmp(sub, "exec") == 0)
        return cmd_exec(argc - 1, argv + 1);
    fprintf(stderr, "corral serve: unknown subcommand '%s'\n%s", sub, usage_text);
    return CLI_USAGE;
}
