/* libcorral (include/corral/corral.h): a synchronous client of the head.
 *
 * Why a private libuv loop rather than blocking sockets: the handshake,
 * framing, validation and write queue already live in net/conn.c on a
 * libuv loop, tested there; reusing them means a client speaks exactly
 * what the head's listener expects, with no second implementation of the
 * HMAC handshake. Each call sends one request and runs the private loop
 * until the answer (or the connection's end) arrives, so the API stays
 * blocking and the loop never runs between calls. */
#include <corral/corral.h>
#include "client/client_int.h"
#include "net/net.h"
#include "net/tls.h"
#include <fcntl.h>
#include "sched/sched.h"
#include <ctype.h>
#include <errno.h>
#include <sys/stat.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* Called for each answer to the pending request; returns 1 when it was
 * the last one. */
typedef int (*answer_fn)(corral_t *c, const Corral__Envelope *e, void *arg);
/* Called with the one answer to request i of a batch (call_many). */
typedef void (*item_fn)(corral_t *c, const Corral__Envelope *e, void *arg, size_t i);

struct corral {
    uv_loop_t loop;
    int timeout_ms; /* each call's: CORRAL_CALL_TIMEOUT_MS, or that variable */
    cr_net_t *net;
    cr_conn_t *conn;
    bool ready, closed, net_done;
    int close_err;
    uint64_t want; /* the request id answers are awaited for */
    answer_fn fn;
    void *arg;
    bool done, timed_out, interrupted;
    /* a batch (call_many): requests want .. want + nitems - 1 */
    size_t nitems, nleft;
    item_fn ifn;
    int *item_err;       /* 1 until answered, then 0 or the head's error */
    uv_timer_t timer;    /* bounds each call: a wedged head does not hang us */
    corral_tick_fn tick; /* following calls: asked every TICK_MS whether to end */
    void *tick_arg;
    corral_log_dropped_fn dropped; /* corral_set_log_dropped */
    int log_fd;                    /* corral_set_log_fd; -1 none */
    bool following_logs;           /* a logs call is running: log_fd applies */
    void *dropped_arg;
    int err;
    char msg[512];
    char why[320]; /* the connection's handshake failure in words (cr_conn_why) */
};

static void set_msg(corral_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_msg(corral_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
    va_end(ap);
}

static void on_ready(cr_conn_t *conn, void *data)
{
    corral_t *c = data;
    c->ready = true;
}

static void on_message(cr_conn_t *conn, const Corral__Envelope *e, void *data)
{
    corral_t *c = data;
    if (c->nitems) {
        if (c->done || e->reply_to < c->want || e->reply_to - c->want >= c->nitems)
            return;
        size_t i = (size_t)(e->reply_to - c->want);
        if (c->item_err[i] != 1)
            return; /* answered already */
        c->item_err[i] = 0;
        if (e->body_case == CORRAL__ENVELOPE__BODY_ERROR) {
            c->item_err[i] = e->error->code < 0 ? e->error->code : CR_EIO;
            if (!c->err) { /* the first refusal is the batch's message */
                c->err = c->item_err[i];
                set_msg(c, "%s", e->error->message ? e->error->message : cr_strerror(c->err));
            }
        } else {
            c->ifn(c, e, c->arg, i);
        }
        if (--c->nleft == 0)
            c->done = true;
        return;
    }
    if (c->done || e->reply_to != c->want)
        return; /* an answer to nothing we wait for */
    if (e->body_case == CORRAL__ENVELOPE__BODY_ERROR) {
        c->err = e->error->code < 0 ? e->error->code : CR_EIO;
        set_msg(c, "%s", e->error->message ? e->error->message : cr_strerror(c->err));
        c->done = true;
        return;
    }
    if (c->fn(c, e, c->arg))
        c->done = true;
}

static void on_close(cr_conn_t *conn, int err, void *data)
{
    corral_t *c = data;
    c->closed = true;
    c->close_err = err ? err : -ECONNRESET;
    snprintf(c->why, sizeof(c->why), "%s", cr_conn_why(conn));
    c->conn = NULL;
}

static void net_done(void *data)
{
    corral_t *c = data;
    c->net_done = true;
}

/* A file of the session session_latest names, once the corral home and
 * the link have been checked (base/trust.c): NULL and why when not. dir
 * (4096 bytes, "" at first) keeps the session found, so the socket and the
 * token come from the same one, checked once. */
static char *session_file(char *dir, const char *name, char *why, size_t size)
{
    char home[4096];
    if (!dir[0] && cr_home_path(home, sizeof(home)) < 0) {
        snprintf(why, size, "CORRAL_HOME is too long");
        return NULL;
    }
    if (!dir[0] && cr_session_latest(home, dir, 4096, why, size) < 0) {
        dir[0] = '\0';
        return NULL;
    }
    return cr_asprintf("%s/%s", dir, name);
}

static void teardown(corral_t *c)
{
    if (c->net) {
        cr_net_close(c->net, net_done, c);
        c->net = NULL;
        while (!c->net_done && uv_run(&c->loop, UV_RUN_ONCE))
            ;
    }
    uv_close((uv_handle_t *)&c->timer, NULL);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    uv_loop_close(&c->loop);
    free(c);
}

/* TLS to a head over TCP: CORRAL_TLS_FINGERPRINT pins its certificate,
 * else CORRAL_TLS_CA verifies it (docs/cluster.md "TLS"). A Unix socket
 * never runs TLS, and nothing of libssl is loaded for one. 0, or an error
 * with c->msg set. */
static int tls_config(corral_t *c, const char *addr, cr_net_config_t *cfg,
                      uint8_t pin[CR_TLS_FP_LEN], char **ca)
{
    if (addr[0] == '/' || addr[0] == '.' || cr_str_has_prefix(addr, "unix:"))
        return 0;
    const char *fp = getenv("CORRAL_TLS_FINGERPRINT"), *cafile = getenv("CORRAL_TLS_CA");
    if (fp && fp[0]) {
        if (cr_tls_fp_parse(fp, pin) < 0) {
            set_msg(c,
                    "CORRAL_TLS_FINGERPRINT: expected sha256: and 64 hex digits (as corral start "
                    "--head prints it), got '%.100s'",
                    fp);
            return CR_EINVAL;
        }
        cfg->tls_pin = pin;
    } else if (cafile && cafile[0]) {
        size_t len;
        int fd = open(cafile, O_RDONLY | O_CLOEXEC);
        int err = fd < 0 ? -errno : cr_read_fd_alloc(fd, ca, &len);
        if (fd >= 0)
            close(fd);
        if (err < 0) {
            set_msg(c, "CORRAL_TLS_CA: cannot read %s: %s", cafile, cr_strerror(err));
            return err;
        }
        cfg->tls_ca_pem = *ca;
    }
    return 0;
}

int corral_connect(const char *address, const char *token_path, corral_t **out, char **errmsg)
{
    *out = NULL;
    if (errmsg)
        *errmsg = NULL;
    char *addr = NULL, *tok = NULL, why[1024] = "", session[4096] = "";
    if (!address || !address[0])
        address = getenv("CORRAL_ADDRESS");
    addr = address && address[0] ? cr_strdup(address)
                                 : session_file(session, "corrald.sock", why, sizeof(why));
    if (!token_path || !token_path[0])
        token_path = getenv("CORRAL_TOKEN_FILE");
    /* inside a worker: its job credential, which its agent gave it in
     * place of the cluster token (a token file named explicitly wins) */
    const char *job_token = getenv("CORRAL_JOB_TOKEN");
    bool use_job = !(token_path && token_path[0]) && job_token && job_token[0];
    if (addr && !use_job)
        tok = token_path && token_path[0] ? cr_strdup(token_path)
                                          : session_file(session, "token", why, sizeof(why));

    corral_t *c = cr_calloc(1, sizeof(*c));
    c->log_fd = -1;
    c->timeout_ms = CORRAL_CALL_TIMEOUT_MS;
    const char *tv = getenv("CORRAL_CALL_TIMEOUT_MS");
    int64_t tms;
    if (tv && *tv && cr_parse_i64(tv, 0, &tms) == 0 && tms >= 100 && tms <= 3600000)
        c->timeout_ms = (int)tms;
    uv_loop_init(&c->loop);
    uv_timer_init(&c->loop, &c->timer);
    uint8_t token[CR_TOKEN_LEN];
    cr_job_scope_t scope;
    char name[64];
    int err = 0;
    if (!addr || (!tok && !use_job)) { /* no session: no head, said once here */
        err = CR_ENOENT;
        set_msg(c, "%s", why);
        goto fail;
    }
    if (use_job) {
        err = cr_job_token_parse(job_token, &scope, token);
        if (err < 0) {
            set_msg(c, "CORRAL_JOB_TOKEN is malformed (expected job:ID:INDEX:ATTEMPT:64 hex "
                       "digits, as the agent sets it for a worker); unset it to use a token file");
            goto fail;
        }
        tok = cr_asprintf("CORRAL_JOB_TOKEN (job %s)", scope.job_id);
    } else {
        struct stat tst;
        /* no token file: no head, said once here (the reader would warn too) */
        err = lstat(tok, &tst) < 0 ? -errno : cr_token_read(tok, token);
        if (err == -ENOENT && !(token_path && token_path[0])) {
            set_msg(c, "no head is running (no %s); start one with 'corral start --head'", tok);
            goto fail;
        }
        if (err < 0) {
            set_msg(c,
                    "cannot read the cluster token %s: %s (is a head running? corral start --head)",
                    tok, cr_strerror(err));
            goto fail;
        }
    }
    snprintf(name, sizeof(name), "libcorral:%d", (int)getpid());
    cr_net_config_t cfg = {.token = token, .name = name, .job = use_job ? &scope : NULL};
    /* TLS only over TCP, and only then is the shim (and libssl) loaded */
    uint8_t pin[CR_TLS_FP_LEN];
    char *ca = NULL;
    if ((err = tls_config(c, addr, &cfg, pin, &ca)) < 0)
        goto fail;
    cr_net_callbacks_t cb = {.on_ready = on_ready, .on_message = on_message, .on_close = on_close};
    c->net = cr_net_new(&c->loop, &cfg, &cb, c);
    memset(token, 0, sizeof(token));
    free(ca);
    if (!c->net) {
        err = CR_EINVAL;
        set_msg(c, "cannot set up the transport%s",
                cfg.tls_pin || cfg.tls_ca_pem ? " (TLS: see above)" : "");
        goto fail;
    }
    err = cr_net_connect(c->net, addr, CORRAL__ROLE__ROLE_CLIENT, &c->conn);
    if (err < 0) {
        set_msg(c, "cannot connect to %s: %s", addr, cr_strerror(err));
        goto fail;
    }
    while (!c->ready && !c->closed && uv_run(&c->loop, UV_RUN_ONCE))
        ;
    if (!c->ready) {
        err = c->close_err ? c->close_err : CR_EIO;
        if (err == -EPROTO || (err == CR_EACCES && strstr(c->why, "TLS")))
            set_msg(c, "cannot connect to the head at %s: %s", addr, c->why);
        else if (err == CR_EACCES)
            set_msg(c, "the head at %s refused the token in %s", addr, tok);
        else if (c->why[0])
            set_msg(c, "cannot connect to the head at %s: %s (%s)", addr, cr_strerror(err), c->why);
        else
            set_msg(c, "cannot connect to the head at %s: %s", addr, cr_strerror(err));
        goto fail;
    }
    free(addr);
    free(tok);
    *out = c;
    return 0;
fail:
    if (errmsg)
        *errmsg = cr_strdup(c->msg);
    free(addr);
    free(tok);
    teardown(c);
    return err;
}

void corral_disconnect(corral_t *c)
{
    if (c)
        teardown(c);
}

const char *corral_errmsg(const corral_t *c)
{
    return c ? c->msg : "";
}

static void on_timeout(uv_timer_t *t)
{
    corral_t *c = t->data;
    c->timed_out = true;
    if (c->conn) /* a late answer must not be taken for the next call's */
        cr_conn_close(c->conn, CR_EAGAIN);
}

#define TICK_MS 100

/* Raw chunks of stdout straight to log_fd, during a logs call only. */
static int pick_log_fd(void *arg, const Corral__LogChunk *ch)
{
    corral_t *c = arg;
    return c->following_logs && ch->stream == CORRAL__LOG_STREAM__LOG_STDOUT ? c->log_fd : -1;
}

void corral_set_log_fd(corral_t *c, int fd)
{
    c->log_fd = fd;
    if (c->conn)
        cr_conn_set_raw_fd(c->conn, fd >= 0 ? pick_log_fd : NULL, c);
}

void corral_set_log_dropped(corral_t *c, corral_log_dropped_fn fn, void *arg)
{
    c->dropped = fn;
    c->dropped_arg = arg;
}

void corral_set_tick(corral_t *c, corral_tick_fn fn, void *arg)
{
    c->tick = fn;
    c->tick_arg = arg;
}

static void on_tick(uv_timer_t *t)
{
    corral_t *c = t->data;
    if (c->tick && c->tick(c->tick_arg))
        c->interrupted = true;
}

static int call_ex(corral_t *c, Corral__Envelope *e, answer_fn fn, void *arg, bool follow);

/* Sends e and runs the loop until fn says the answer is complete, or
 * CORRAL_CALL_TIMEOUT_MS pass (then the connection is closed). */
static int call(corral_t *c, Corral__Envelope *e, answer_fn fn, void *arg)
{
    return call_ex(c, e, fn, arg, false);
}

/* follow: no time limit (the answers may take as long as a job runs),
 * the tick asked every TICK_MS instead; -EINTR when it says stop. A
 * following request ended early leaves the head sending answers to an
 * id no longer awaited, which on_message drops. */
static int call_ex(corral_t *c, Corral__Envelope *e, answer_fn fn, void *arg, bool follow)
{
    c->msg[0] = '\0';
    if (!c->conn || c->closed) {
        set_msg(c, "the connection to the head is closed");
        return -ENOTCONN;
    }
    e->id = cr_conn_next_id(c->conn);
    c->want = e->id;
    c->fn = fn;
    c->arg = arg;
    c->done = false;
    c->err = 0;
    int err = cr_conn_send(c->conn, e);
    if (err < 0) {
        set_msg(c, "cannot send %s: %s", cr_msg_name(e->body_case), cr_strerror(err));
        return err;
    }
    c->timed_out = c->interrupted = false;
    c->timer.data = c;
    /* the loop's clock stood still since its last call, which may be long
     * ago: a timer counted from it would fire at once */
    uv_update_time(&c->loop);
    if (follow)
        uv_timer_start(&c->timer, on_tick, TICK_MS, TICK_MS);
    else
        uv_timer_start(&c->timer, on_timeout, (uint64_t)c->timeout_ms, 0);
    while (!c->done && !c->closed && !c->interrupted && uv_run(&c->loop, UV_RUN_ONCE))
        ;
    uv_timer_stop(&c->timer);
    if (!c->done && c->interrupted) {
        c->want = 0; /* what still comes for it is dropped */
        set_msg(c, "interrupted");
        return -EINTR;
    }
    if (!c->done && c->timed_out) {
        set_msg(c, "no answer from the head to %s within %d ms", cr_msg_name(e->body_case),
                c->timeout_ms);
        return CR_EAGAIN;
    }
    if (!c->done) {
        set_msg(c, "the head closed the connection: %s", cr_strerror(c->close_err));
        return c->close_err ? c->close_err : CR_EIO;
    }
    return c->err;
}

/* Sends the n requests in one write, then runs the loop until each has
 * its one answer (fn for an answer, errs[i] the head's error for a
 * refusal), or CORRAL_CALL_TIMEOUT_MS pass. Returns 0 when every request
 * was answered without an error, else the first error (the transport's,
 * or the first refusal, its message in c->msg); errs[i] is 0 or request
 * i's error (the transport's for those never answered). */
static int call_many(corral_t *c, Corral__Envelope **es, size_t n, item_fn fn, void *arg, int *errs)
{
    c->msg[0] = '\0';
    for (size_t i = 0; i < n; i++)
        errs[i] = -ENOTCONN;
    if (n == 0)
        return 0;
    if (!c->conn || c->closed) {
        set_msg(c, "the connection to the head is closed");
        return -ENOTCONN;
    }
    c->err = 0;
    c->done = false;
    c->timed_out = c->interrupted = false;
    c->item_err = errs;
    c->ifn = fn;
    c->arg = arg;
    int err = 0;
    cr_net_hold(c->net);
    for (size_t i = 0; i < n && !err; i++) {
        es[i]->id = cr_conn_next_id(c->conn);
        if (i == 0)
            c->want = es[i]->id;
        if (es[i]->id != c->want + i) { /* ids are consecutive: they index the batch */
            err = CR_EIO;
            set_msg(c, "request ids are not consecutive");
            break;
        }
        err = cr_conn_send(c->conn, es[i]);
        if (err < 0)
            set_msg(c, "cannot send %s: %s", cr_msg_name(es[i]->body_case), cr_strerror(err));
        else
            errs[i] = 1;
        c->nitems = i + 1;
    }
    cr_net_flush(c->net);
    c->nleft = 0;
    for (size_t i = 0; i < c->nitems; i++)
        c->nleft += errs[i] == 1;
    c->done = c->nleft == 0;
    c->timer.data = c;
    uv_update_time(&c->loop); /* as call_ex */
    uv_timer_start(&c->timer, on_timeout, (uint64_t)c->timeout_ms, 0);
    while (!c->done && !c->closed && uv_run(&c->loop, UV_RUN_ONCE))
        ;
    uv_timer_stop(&c->timer);
    int lost = c->timed_out ? CR_EAGAIN : c->close_err ? c->close_err : CR_EIO;
    for (size_t i = 0; i < c->nitems; i++)
        if (errs[i] == 1)
            errs[i] = lost;
    c->nitems = 0;
    c->item_err = NULL;
    if (err < 0)
        return err;
    if (!c->done && c->timed_out) {
        set_msg(c, "no answer from the head to %zu of %zu %s within %d ms", c->nleft, n,
                cr_msg_name(es[0]->body_case), c->timeout_ms);
        return CR_EAGAIN;
    }
    if (!c->done) {
        set_msg(c, "the head closed the connection: %s", cr_strerror(c->close_err));
        return lost;
    }
    return c->err;
}

static int expect(corral_t *c, const Corral__Envelope *e, Corral__Envelope__BodyCase want)
{
    if (e->body_case == want)
        return 0;
    c->err = CR_EPARSE;
    set_msg(c, "unexpected answer %s", cr_msg_name(e->body_case));
    return CR_EPARSE;
}

/* ---- jobs ---- */

static const char *const job_state_names[] = {"UNKNOWN",   "PENDING", "PLACING", "RUNNING",
                                              "SUCCEEDED", "FAILED",  "STOPPED"};

const char *corral_job_state_name(corral_job_state_t s)
{
    return (unsigned)s < CR_ARRAY_SIZE(job_state_names) ? job_state_names[s] : "UNKNOWN";
}

int corral_job_state_is_final(corral_job_state_t s)
{
    return s == CORRAL_JOB_SUCCEEDED || s == CORRAL_JOB_FAILED || s == CORRAL_JOB_STOPPED;
}

static const char *const worker_state_names[] = {"UNKNOWN", "STARTING", "RUNNING", "EXITED",
                                                 "FAILED",  "STOPPED",  "LOST"};

static int got_submitted(corral_t *c, const Corral__Envelope *e, void *arg)
{
    if (expect(c, e, CORRAL__ENVELOPE__BODY_JOB_SUBMITTED) == 0)
        *(char **)arg = cr_strdup(e->job_submitted->job_id);
    return 1;
}

void cr__quantities_free(Corral__Quantity **q, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(q[i]->name);
        free(q[i]);
        q[i] = NULL;
    }
}

int cr__parse_resources(const char *s, Corral__Quantity **q, size_t *n, char *msg, size_t size)
{
    *n = 0;
    if (!s || !s[0])
        return 0;
    char *dup = cr_strdup(s), *save = NULL;
    int err = 0;
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        sched_err_t se = {0};
        int64_t v;
        if (!eq || eq == t) {
            snprintf(msg, size, "resources: expected NAME=AMOUNT, got '%s'", t);
            err = CR_EINVAL;
            break;
        }
        *eq = '\0';
        const char *known = sched_resource_suggest(t, strlen(t));
        if (known) {
            snprintf(msg, size, "resources: unknown resource '%s': did you mean %s?", t, known);
            err = CR_EINVAL;
            break;
        }
        if (sched_parse_qty(eq + 1, strlen(eq + 1), &v, &se) < 0) {
            snprintf(msg, size, "resources: %s=%s: %s", t, eq + 1, se.msg);
            err = CR_EINVAL;
            break;
        }
        if (*n == SCHED_REQ_MAX) {
            snprintf(msg, size, "resources: at most %d names", SCHED_REQ_MAX);
            err = CR_EINVAL;
            break;
        }
        q[*n] = cr_calloc(1, sizeof(**q));
        corral__quantity__init(q[*n]);
        q[*n]->name = cr_strdup(t);
        q[*n]->amount = v;
        (*n)++;
    }
    free(dup);
    if (err < 0) {
        cr__quantities_free(q, *n);
        *n = 0;
    }
    return err;
}

static int parse_resources(corral_t *c, const char *s, Corral__Quantity **q, size_t *n)
{
    return cr__parse_resources(s, q, n, c->msg, sizeof(c->msg));
}

int corral_submit(corral_t *c, const corral_job_spec_t *spec, char **job_id)
{
    *job_id = NULL;
    c->msg[0] = '\0';
    if (!spec->argv || !spec->argv[0]) {
        set_msg(c, "a job needs a command");
        return CR_EINVAL;
    }
    Corral__WorkerSpec ws = CORRAL__WORKER_SPEC__INIT;
    Corral__JobSpec js = CORRAL__JOB_SPEC__INIT;
    Corral__JobSubmit sub = CORRAL__JOB_SUBMIT__INIT;
    Corral__Quantity *q[SCHED_REQ_MAX];
    size_t nq = 0, nenv = 0, nargv = 0;
    while (spec->argv[nargv])
        nargv++;
    while (spec->env && spec->env[nenv])
        nenv++;
    Corral__KeyValue *kv = cr_calloc(nenv + 1, sizeof(*kv));
    Corral__KeyValue **kvp = cr_calloc(nenv + 1, sizeof(*kvp));
    char **keys = cr_calloc(nenv + 1, sizeof(*keys));
    int err = parse_resources(c, spec->resources, q, &nq);
    for (size_t i = 0; i < nenv && err == 0; i++) {
        const char *eq = strchr(spec->env[i], '=');
        if (!eq || eq == spec->env[i]) {
            set_msg(c, "environment: expected K=V, got '%s'", spec->env[i]);
            err = CR_EINVAL;
            break;
        }
        corral__key_value__init(&kv[i]);
        keys[i] = cr_strndup(spec->env[i], (size_t)(eq - spec->env[i]));
        kv[i].key = keys[i];
        kv[i].value = (char *)eq + 1;
        kvp[i] = &kv[i];
    }
    if (err == 0) {
        ws.argv = (char **)spec->argv;
        ws.n_argv = nargv;
        ws.env = kvp;
        ws.n_env = nenv;
        ws.cwd = (char *)(spec->cwd ? spec->cwd : "");
        ws.env_whole = spec->env_whole != 0;
        ws.resources = q;
        ws.n_resources = nq;
        js.name = (char *)(spec->name ? spec->name : "");
        js.worker = &ws;
        js.num_workers = spec->num_workers ? spec->num_workers : 1;
        js.grace_ms = spec->grace_ms;
        js.restart = (Corral__RestartPolicy)spec->restart; /* same values */
        js.max_restarts = spec->max_restarts;
        js.backoff_ms = spec->backoff_ms;
        js.strategy = (Corral__Strategy)spec->strategy; /* same values */
        js.selector = (char *)(spec->selector ? spec->selector : "");
        js.domain = (char *)(spec->domain ? spec->domain : "");
        js.placement_group = (char *)(spec->placement_group ? spec->placement_group : "");
        js.bundle_index = spec->placement_group && spec->has_bundle ? (int)spec->bundle_index : -1;
        js.distributed = spec->distributed != 0;
        js.wait_for_nodes = spec->wait_for_nodes != 0;
        sub.bound = spec->bound != 0;
        js.bind =
            spec->bind == CORRAL_BIND_NONE ? CORRAL__BIND__BIND_NONE : CORRAL__BIND__BIND_CLOSEST;
        sub.spec = &js;
        Corral__Envelope e = CORRAL__ENVELOPE__INIT;
        e.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMIT;
        e.job_submit = &sub;
        err = call(c, &e, got_submitted, job_id);
        if (err < 0) {
            free(*job_id);
            *job_id = NULL;
        }
    }
    cr__quantities_free(q, nq);
    for (size_t i = 0; i < nenv; i++)
        free(keys[i]);
    free(keys);
    free(kv);
    free(kvp);
    return err;
}

static void job_from_info(corral_job_t *j, const Corral__JobInfo *in)
{
    memset(j, 0, sizeof(*j));
    j->job_id = cr_strdup(in->job_id);
    j->name = cr_strdup(in->name);
    j->state = (unsigned)in->state < CR_ARRAY_SIZE(job_state_names) ? (corral_job_state_t)in->state
                                                                    : CORRAL_JOB_UNKNOWN;
    j->reason = cr_strdup(in->reason);
    j->exit_code = in->exit_code;
    j->submitted_ms = in->submitted_ms;
    j->finished_ms = in->finished_ms;
    cr_buf_t cmd = {0};
    if (in->spec && in->spec->worker)
        for (size_t i = 0; i < in->spec->worker->n_argv; i++)
            cr_buf_printf(&cmd, "%s%s", i ? " " : "", in->spec->worker->argv[i]);
    j->command = cmd.s ? cmd.s : cr_strdup("");
    j->restarts = in->restarts;
    j->queue_position = in->queue_position;
    j->parent_job = cr_strdup(in->parent_job ? in->parent_job : "");
    if (in->spec) {
        j->max_restarts = in->spec->max_restarts;
        j->restart = (unsigned)in->spec->restart <= CORRAL_RESTART_GANG
                         ? (corral_restart_t)in->spec->restart
                         : CORRAL_RESTART_NONE;
    }
    j->nworkers = in->n_workers;
    j->workers = cr_calloc(in->n_workers + 1, sizeof(*j->workers));
    for (size_t i = 0; i < in->n_workers; i++) {
        const Corral__WorkerStatus *s = in->workers[i];
        corral_worker_t *w = &j->workers[i];
        w->index = s->worker_index;
        w->worker_id = cr_strdup(s->worker_id);
        w->node_id = cr_strdup(s->node_id);
        w->state = (unsigned)s->state < CR_ARRAY_SIZE(worker_state_names)
                       ? worker_state_names[s->state]
                       : "UNKNOWN";
        w->pid = s->pid;
        w->exit_code = s->exit_code;
        w->signal = s->signal;
        w->attempt = s->attempt;
        w->output_lost = s->output_lost;
        w->reason = cr_strdup(s->reason);
        cr_buf_t d = {0};
        for (size_t k = 0; k < s->n_devices; k++)
            cr_buf_printf(&d, "%s%u", k ? "," : "", s->devices[k]);
        w->devices = d.s ? d.s : cr_strdup("");
    }
}

void corral_job_free(corral_job_t *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->nworkers; i++) {
        free(j->workers[i].worker_id);
        free(j->workers[i].node_id);
        free(j->workers[i].devices);
        free(j->workers[i].reason);
    }
    free(j->workers);
    free(j->job_id);
    free(j->name);
    free(j->reason);
    free(j->command);
    free(j->parent_job);
    memset(j, 0, sizeof(*j));
}

void corral_job_list_free(corral_job_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        corral_job_free(&v[i]);
    free(v);
}

static int got_info(corral_t *c, const Corral__Envelope *e, void *arg)
{
    if (expect(c, e, CORRAL__ENVELOPE__BODY_JOB_INFO) == 0)
        job_from_info(arg, e->job_info);
    return 1;
}

static int job_status(corral_t *c, const char *job_id, uint32_t wait_ms, corral_job_t *out)
{
    memset(out, 0, sizeof(*out));
    Corral__JobStatusRequest r = CORRAL__JOB_STATUS_REQUEST__INIT;
    r.job_id = (char *)job_id;
    r.wait_ms = wait_ms;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_STATUS;
    e.job_status = &r;
    int err = call(c, &e, got_info, out);
    if (err < 0)
        corral_job_free(out);
    return err;
}

int corral_job_status(corral_t *c, const char *job_id, corral_job_t *out)
{
    return job_status(c, job_id, 0, out);
}

/* the longest the head is asked to hold one request: well under the
 * call's own timeout (at most half of it) */
#define WAIT_SLICE_MS 10000

int corral_wait(corral_t *c, const char *job_id, int timeout_ms, corral_job_t *out)
{
    int64_t deadline = cr_mono_ms() + timeout_ms;
    unsigned pause_us = 2000;
    for (;;) {
        int64_t slice = c->timeout_ms / 2 < WAIT_SLICE_MS ? c->timeout_ms / 2 : WAIT_SLICE_MS;
        int64_t left = timeout_ms < 0 ? slice : deadline - cr_mono_ms();
        uint32_t wait = left <= 0 ? 0 : left > slice ? (uint32_t)slice : (uint32_t)left;
        int64_t asked = cr_mono_ms();
        int err = job_status(c, job_id, wait, out);
        if (err < 0 || corral_job_state_is_final(out->state))
            return err;
        if (timeout_ms >= 0 && cr_mono_ms() >= deadline) {
            set_msg(c, "job %s is still %s", job_id, corral_job_state_name(out->state));
            return CR_EAGAIN;
        }
        corral_job_free(out);
        if (cr_mono_ms() - asked >= wait)
            continue; /* the head held the request for the whole wait */
        /* answered early without the end: a head that does not hold
         * requests; poll, quick for short jobs, cheap for long ones */
        usleep(pause_us);
        if (pause_us < 50000)
            pause_us *= 2;
    }
}

static int got_ack(corral_t *c, const Corral__Envelope *e, void *arg)
{
    expect(c, e, CORRAL__ENVELOPE__BODY_ACK);
    return 1;
}

int corral_stop(corral_t *c, const char *job_id, unsigned grace_ms)
{
    Corral__JobStop r = CORRAL__JOB_STOP__INIT;
    r.job_id = (char *)job_id;
    r.grace_ms = grace_ms;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_STOP;
    e.job_stop = &r;
    return call(c, &e, got_ack, NULL);
}

typedef struct list_out {
    corral_job_t *v;
    size_t n;
    corral_page_t *page;
} list_out_t;

/* A page's continuation: "" (the last page) as NULL. */
static void page_out(corral_page_t *p, const char *token, uint32_t remaining)
{
    p->next_token = token && token[0] ? cr_strdup(token) : NULL;
    p->remaining = remaining;
}

static int got_list(corral_t *c, const Corral__Envelope *e, void *arg)
{
    list_out_t *o = arg;
    if (expect(c, e, CORRAL__ENVELOPE__BODY_JOB_LIST_REPLY) < 0)
        return 1;
    const Corral__JobListReply *r = e->job_list_reply;
    o->v = cr_calloc(r->n_jobs + 1, sizeof(*o->v));
    for (size_t i = 0; i < r->n_jobs; i++)
        job_from_info(&o->v[i], r->jobs[i]);
    o->n = r->n_jobs;
    page_out(o->page, r->continue_token, r->remaining);
    return 1;
}

int corral_job_list_page(corral_t *c, const corral_job_state_t *states, size_t n_states,
                         corral_page_t *page, corral_job_t **out, size_t *n)
{
    list_out_t o = {.page = page};
    page->next_token = NULL;
    page->remaining = 0;
    Corral__JobList r = CORRAL__JOB_LIST__INIT;
    Corral__JobState st[8];
    if (n_states > CR_ARRAY_SIZE(st)) {
        set_msg(c, "at most %zu states to list", CR_ARRAY_SIZE(st));
        return CR_EINVAL;
    }
    for (size_t i = 0; i < n_states; i++)
        st[i] = (Corral__JobState)states[i]; /* the same numbers */
    r.states = st;
    r.n_states = n_states;
    r.limit = page->limit;
    r.continue_token = (char *)(page->continue_token ? page->continue_token : "");
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_LIST;
    e.job_list = &r;
    int err = call(c, &e, got_list, &o);
    if (err < 0) {
        corral_job_list_free(o.v, o.n);
        free(page->next_token);
        page->next_token = NULL;
        o.v = NULL;
        o.n = 0;
    }
    *out = o.v;
    *n = o.n;
    return err;
}

/* Appends m items of size sz at b to *v (n of them so far); frees b. */
static void *append_items(void *v, size_t n, void *b, size_t m, size_t sz)
{
    v = cr_realloc(v, (n + m + 1) * sz);
    memcpy((char *)v + n * sz, b, m * sz);
    free(b);
    return v;
}

/* A whole listing, page after page: fetch one page (its items as an array
 * of sz-byte items), drop frees such an array. On an error nothing is
 * kept; else *out is an array (never NULL) of *n items. */
typedef int (*page_fetch_fn)(corral_t *c, void *ctx, corral_page_t *p, void **v, size_t *m);
typedef void (*page_drop_fn)(void *v, size_t n);

static int page_all(corral_t *c, size_t sz, page_fetch_fn fetch, void *ctx, page_drop_fn drop,
                    void **out, size_t *n)
{
    void *all = NULL;
    size_t nall = 0;
    char *token = NULL;
    int err;
    do {
        corral_page_t p = {.continue_token = token};
        void *v = NULL;
        size_t m = 0;
        err = fetch(c, ctx, &p, &v, &m);
        free(token);
        token = p.next_token;
        if (err < 0)
            break;
        all = append_items(all, nall, v, m, sz);
        nall += m;
        if (token && !m) { /* a head that pages always gives one */
            set_msg(c, "the head sent an empty page with a continue token");
            err = CR_EPARSE;
            break;
        }
    } while (token);
    free(token);
    if (err < 0) {
        drop(all, nall);
        all = NULL;
        nall = 0;
    } else if (!all) {
        all = cr_calloc(1, sz);
    }
    *out = all;
    *n = nall;
    return err;
}

static int fetch_jobs(corral_t *c, void *ctx, corral_page_t *p, void **v, size_t *m)
{
    (void)ctx;
    corral_job_t *x = NULL;
    int err = corral_job_list_page(c, NULL, 0, p, &x, m);
    *v = x;
    return err;
}

static void drop_jobs(void *v, size_t n)
{
    corral_job_list_free(v, n);
}

int corral_job_list(corral_t *c, corral_job_t **out, size_t *n)
{
    void *v;
    int err = page_all(c, sizeof(**out), fetch_jobs, NULL, drop_jobs, &v, n);
    *out = v;
    return err;
}

typedef struct logs_cb {
    corral_log_fn fn;
    void *arg;
    corral_job_t *job; /* with_job: the job as it ended, from the eof */
    int *ended;        /* set when the eof carried it */
} logs_cb_t;

static int got_chunk(corral_t *c, const Corral__Envelope *e, void *arg)
{
    logs_cb_t *l = arg;
    if (expect(c, e, CORRAL__ENVELOPE__BODY_LOG_CHUNK) < 0)
        return 1;
    const Corral__LogChunk *ch = e->log_chunk;
    if (ch->dropped && c->dropped)
        c->dropped(c->dropped_arg, ch->worker_index, ch->stream, ch->dropped, ch->worker_log_max);
    if (ch->data.len)
        l->fn(l->arg, ch->worker_index, ch->stream, (const char *)ch->data.data, ch->data.len);
    if (ch->eof && ch->job && l->job && !*l->ended) {
        job_from_info(l->job, ch->job);
        *l->ended = 1;
    }
    return ch->eof;
}

static int job_logs(corral_t *c, const char *job_id, int worker_index, corral_log_fn fn, void *arg,
                    bool follow, bool whole, corral_job_t *job, int *ended)
{
    logs_cb_t l = {fn, arg, job, ended};
    Corral__JobLogs r = CORRAL__JOB_LOGS__INIT;
    r.job_id = (char *)job_id;
    r.worker_index = worker_index;
    r.follow = follow;
    r.whole = whole;
    r.with_job = job != NULL;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_LOGS;
    e.job_logs = &r;
    c->following_logs = true;
    int err = call_ex(c, &e, got_chunk, &l, follow);
    c->following_logs = false;
    if (err < 0 && ended && *ended) { /* the eof came, then the call failed after all */
        corral_job_free(job);
        *ended = 0;
    }
    return err;
}

int corral_job_logs(corral_t *c, const char *job_id, int worker_index, corral_log_fn fn, void *arg)
{
    return job_logs(c, job_id, worker_index, fn, arg, false, false, NULL, NULL);
}

int corral_job_logs_follow(corral_t *c, const char *job_id, int worker_index, corral_log_fn fn,
                           void *arg)
{
    return job_logs(c, job_id, worker_index, fn, arg, true, false, NULL, NULL);
}

int corral_job_logs_follow_all(corral_t *c, const char *job_id, int worker_index, corral_log_fn fn,
                               void *arg)
{
    return job_logs(c, job_id, worker_index, fn, arg, true, true, NULL, NULL);
}

int corral_job_logs_follow_end(corral_t *c, const char *job_id, int worker_index, corral_log_fn fn,
                               void *arg, corral_job_t *job, int *ended)
{
    *ended = 0;
    return job_logs(c, job_id, worker_index, fn, arg, true, true, job, ended);
}

/* ---- the cluster ---- */

static double units(const char *name, int64_t amount)
{
    return (double)amount / (double)CR_QTY_ONE;
}

static void res_from(corral_resource_t **out, size_t *n, Corral__Quantity **tot, size_t nt,
                     Corral__Quantity **fr, size_t nf, Corral__Quantity **rf, size_t nr)
{
    *out = cr_calloc(nt + 1, sizeof(**out));
    *n = nt;
    for (size_t i = 0; i < nt; i++) {
        (*out)[i].name = cr_strdup(tot[i]->name);
        (*out)[i].total = units(tot[i]->name, tot[i]->amount);
        for (size_t k = 0; k < nf; k++)
            if (strcmp(fr[k]->name, tot[i]->name) == 0)
                (*out)[i].free = units(fr[k]->name, fr[k]->amount);
        (*out)[i].reported_free = NAN;
        for (size_t k = 0; k < nr; k++)
            if (strcmp(rf[k]->name, tot[i]->name) == 0)
                (*out)[i].reported_free = units(rf[k]->name, rf[k]->amount);
    }
}

static const char *const node_state_names[] = {"UNKNOWN", "ALIVE", "SUSPECT", "DEAD"};

static void node_from(corral_node_t *n, const Corral__NodeInfo *ni)
{
    n->node_id = cr_strdup(ni->node_id);
    n->address = cr_strdup(ni->address);
    n->state = cr_strdup((unsigned)ni->state < CR_ARRAY_SIZE(node_state_names)
                             ? node_state_names[ni->state]
                             : "UNKNOWN");
    res_from(&n->res, &n->nres, ni->total, ni->n_total, ni->free, ni->n_free, ni->reported_free,
             ni->n_reported_free);
    n->labels = cr_calloc(ni->n_labels + 1, sizeof(*n->labels));
    n->nlabels = ni->n_labels;
    for (size_t k = 0; k < ni->n_labels; k++)
        n->labels[k] = cr_asprintf("%s=%s", ni->labels[k]->key, ni->labels[k]->value);
}

static int got_status(corral_t *c, const Corral__Envelope *e, void *arg)
{
    corral_status_t *s = arg;
    if (expect(c, e, CORRAL__ENVELOPE__BODY_CLUSTER_STATUS) < 0)
        return 1;
    const Corral__ClusterStatus *r = e->cluster_status;
    s->head_address = cr_strdup(r->head_address);
    s->pending_jobs = r->pending_jobs;
    s->running_jobs = r->running_jobs;
    res_from(&s->res, &s->nres, r->total, r->n_total, r->free, r->n_free, NULL, 0);
    s->nodes = cr_calloc(r->n_nodes + 1, sizeof(*s->nodes));
    s->nnodes = r->n_nodes;
    for (size_t i = 0; i < r->n_nodes; i++)
        node_from(&s->nodes[i], r->nodes[i]);
    s->holders = cr_calloc(r->n_holders + 1, sizeof(*s->holders));
    s->nholders = r->n_holders;
    s->holders_not_listed = r->holders_not_listed;
    for (size_t i = 0; i < r->n_holders; i++) {
        const Corral__Holder *h = r->holders[i];
        struct corral_holder *o = &s->holders[i];
        o->kind = cr_strdup(h->kind);
        o->id = cr_strdup(h->id);
        o->name = cr_strdup(h->name);
        o->state = cr_strdup(h->state);
        o->reason = cr_strdup(h->reason);
        o->queue_position = h->queue_position;
        o->held = cr_strdup(h->held);
        o->group = cr_strdup(h->group);
        o->jobs = h->jobs;
    }
    return 1;
}

static void res_free(corral_resource_t *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(r[i].name);
    free(r);
}

static void node_fini(corral_node_t *n)
{
    free(n->node_id);
    free(n->address);
    free(n->state);
    res_free(n->res, n->nres);
    for (size_t k = 0; k < n->nlabels; k++)
        free(n->labels[k]);
    free(n->labels);
}

void corral_node_list_free(corral_node_t *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        node_fini(&v[i]);
    free(v);
}

typedef struct node_out {
    corral_node_t *v;
    size_t n;
    corral_page_t *page;
} node_out_t;

static int got_node_list(corral_t *c, const Corral__Envelope *e, void *arg)
{
    node_out_t *o = arg;
    if (expect(c, e, CORRAL__ENVELOPE__BODY_NODE_LIST_REPLY) < 0)
        return 1;
    const Corral__NodeListReply *r = e->node_list_reply;
    o->v = cr_calloc(r->n_nodes + 1, sizeof(*o->v));
    for (size_t i = 0; i < r->n_nodes; i++)
        node_from(&o->v[i], r->nodes[i]);
    o->n = r->n_nodes;
    page_out(o->page, r->continue_token, r->remaining);
    return 1;
}

int corral_node_list_page(corral_t *c, corral_page_t *page, corral_node_t **out, size_t *n)
{
    node_out_t o = {.page = page};
    page->next_token = NULL;
    page->remaining = 0;
    Corral__NodeList r = CORRAL__NODE_LIST__INIT;
    r.limit = page->limit;
    r.continue_token = (char *)(page->continue_token ? page->continue_token : "");
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_NODE_LIST;
    e.node_list = &r;
    int err = call(c, &e, got_node_list, &o);
    if (err < 0) {
        corral_node_list_free(o.v, o.n);
        free(page->next_token);
        page->next_token = NULL;
        o.v = NULL;
        o.n = 0;
    }
    *out = o.v;
    *n = o.n;
    return err;
}

static int fetch_nodes(corral_t *c, void *ctx, corral_page_t *p, void **v, size_t *m)
{
    (void)ctx;
    corral_node_t *x = NULL;
    int err = corral_node_list_page(c, p, &x, m);
    *v = x;
    return err;
}

static void drop_nodes(void *v, size_t n)
{
    corral_node_list_free(v, n);
}

int corral_node_list(corral_t *c, corral_node_t **out, size_t *n)
{
    void *v;
    int err = page_all(c, sizeof(**out), fetch_nodes, NULL, drop_nodes, &v, n);
    *out = v;
    return err;
}

void corral_status_free(corral_status_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nnodes; i++)
        node_fini(&s->nodes[i]);
    free(s->nodes);
    for (size_t i = 0; i < s->nholders; i++) {
        struct corral_holder *h = &s->holders[i];
        free(h->kind);
        free(h->id);
        free(h->name);
        free(h->state);
        free(h->reason);
        free(h->held);
        free(h->group);
    }
    free(s->holders);
    res_free(s->res, s->nres);
    free(s->head_address);
    memset(s, 0, sizeof(*s));
}

int corral_status(corral_t *c, corral_status_t *out)
{
    memset(out, 0, sizeof(*out));
    Corral__StatusRequest r = CORRAL__STATUS_REQUEST__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_STATUS_REQUEST;
    e.status_request = &r;
    int err = call(c, &e, got_status, out);
    if (err < 0)
        corral_status_free(out);
    return err;
}

typedef struct ev_out {
    corral_event_t *v;
    size_t n;
    corral_page_t *page;
} ev_out_t;

static void event_from(corral_event_t *o, const Corral__Event *ev)
{
    o->seq = ev->seq;
    o->time_ms = ev->time_ms;
    o->kind = cr_strdup(ev->kind);
    o->job_id = cr_strdup(ev->job_id);
    o->node_id = cr_strdup(ev->node_id);
    o->message = cr_strdup(ev->message);
}

static int got_events(corral_t *c, const Corral__Envelope *e, void *arg)
{
    ev_out_t *o = arg;
    if (expect(c, e, CORRAL__ENVELOPE__BODY_EVENT_LIST) < 0)
        return 1;
    const Corral__EventList *r = e->event_list;
    o->v = cr_calloc(r->n_events + 1, sizeof(*o->v));
    o->n = r->n_events;
    for (size_t i = 0; i < r->n_events; i++)
        event_from(&o->v[i], r->events[i]);
    page_out(o->page, r->continue_token, r->remaining);
    return 1;
}

void corral_events_free(corral_event_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].kind);
        free(v[i].job_id);
        free(v[i].node_id);
        free(v[i].message);
    }
    free(v);
}

int corral_events_page(corral_t *c, uint64_t since_seq, unsigned newest, corral_page_t *page,
                       corral_event_t **out, size_t *n)
{
    ev_out_t o = {.page = page};
    page->next_token = NULL;
    page->remaining = 0;
    Corral__EventsRequest r = CORRAL__EVENTS_REQUEST__INIT;
    r.since_seq = since_seq;
    r.limit = newest;
    r.page_limit = page->limit;
    r.continue_token = (char *)(page->continue_token ? page->continue_token : "");
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_EVENTS_REQUEST;
    e.events_request = &r;
    int err = call(c, &e, got_events, &o);
    if (err < 0) {
        corral_events_free(o.v, o.n);
        free(page->next_token);
        page->next_token = NULL;
        o.v = NULL;
        o.n = 0;
    }
    *out = o.v;
    *n = o.n;
    return err;
}

typedef struct events_ask {
    uint64_t since_seq;
    unsigned limit;
} events_ask_t;

static int fetch_events(corral_t *c, void *ctx, corral_page_t *p, void **v, size_t *m)
{
    const events_ask_t *a = ctx;
    corral_event_t *x = NULL;
    int err = corral_events_page(c, a->since_seq, a->limit, p, &x, m);
    *v = x;
    return err;
}

static void drop_events(void *v, size_t n)
{
    corral_events_free(v, n);
}

int corral_events(corral_t *c, uint64_t since_seq, unsigned limit, corral_event_t **out, size_t *n)
{
    events_ask_t a = {since_seq, limit};
    void *v;
    int err = page_all(c, sizeof(**out), fetch_events, &a, drop_events, &v, n);
    *out = v;
    return err;
}

typedef struct ev_follow {
    corral_event_fn fn;
    void *arg;
} ev_follow_t;

static void event_free(corral_event_t *v)
{
    free(v->kind);
    free(v->job_id);
    free(v->node_id);
    free(v->message);
}

static int got_event(corral_t *c, const Corral__Envelope *e, void *arg)
{
    ev_follow_t *f = arg;
    corral_event_t ev;
    if (e->body_case == CORRAL__ENVELOPE__BODY_EVENT_LIST) {
        for (size_t i = 0; i < e->event_list->n_events; i++) {
            event_from(&ev, e->event_list->events[i]);
            f->fn(f->arg, &ev);
            event_free(&ev);
        }
        return 0;
    }
    if (expect(c, e, CORRAL__ENVELOPE__BODY_EVENT) < 0)
        return 1;
    event_from(&ev, e->event);
    f->fn(f->arg, &ev);
    event_free(&ev);
    return 0; /* for as long as the connection lives */
}

int corral_events_follow(corral_t *c, uint64_t since_seq, corral_event_fn fn, void *arg)
{
    ev_follow_t f = {fn, arg};
    Corral__EventsRequest r = CORRAL__EVENTS_REQUEST__INIT;
    r.since_seq = since_seq;
    r.follow = true;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_EVENTS_REQUEST;
    e.events_request = &r;
    return call_ex(c, &e, got_event, &f, true);
}

int corral_shutdown(corral_t *c)
{
    Corral__Shutdown r = CORRAL__SHUTDOWN__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_SHUTDOWN;
    e.shutdown = &r;
    return call(c, &e, got_ack, NULL);
}

static int got_shutdown_reply(corral_t *c, const Corral__Envelope *e, void *arg)
{
    if (expect(c, e, CORRAL__ENVELOPE__BODY_SHUTDOWN_REPLY) == 0 && arg)
        *(unsigned *)arg = e->shutdown_reply->agents;
    return 1;
}

int corral_shutdown_cluster(corral_t *c, int keep_head, unsigned *nagents)
{
    unsigned n = 0;
    Corral__Shutdown r = CORRAL__SHUTDOWN__INIT;
    r.agents = true;
    r.keep_head = keep_head != 0;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_SHUTDOWN;
    e.shutdown = &r;
    int err = call(c, &e, got_shutdown_reply, &n);
    if (nagents)
        *nagents = n;
    return err;
}

/* ---- placement ---- */

static const char *const strategy_names[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};

const char *corral_strategy_name(corral_strategy_t s)
{
    return (unsigned)s < CR_ARRAY_SIZE(strategy_names) ? strategy_names[s] : "UNKNOWN";
}

int corral_strategy_parse(const char *name, corral_strategy_t *out)
{
    char up[32];
    size_t n = 0;
    for (; name && name[n] && n + 1 < sizeof(up); n++)
        up[n] = name[n] == '-' ? '_' : (char)toupper((unsigned char)name[n]);
    up[n] = '\0';
    for (size_t i = 0; name && !name[n] && i < CR_ARRAY_SIZE(strategy_names); i++)
        if (strcmp(up, strategy_names[i]) == 0) {
            *out = (corral_strategy_t)i;
            return 0;
        }
    return CR_EINVAL;
}

/* ---- placement groups ---- */

void cr__pg_create_free(Corral__PgCreate *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_bundles; i++) {
        cr__quantities_free(r->bundles[i]->resources, r->bundles[i]->n_resources);
        free(r->bundles[i]->resources);
        free(r->bundles[i]->selector);
        free(r->bundles[i]);
    }
    free(r->bundles);
    free(r->name);
    free(r->selector);
    free(r->domain);
    free(r);
}

Corral__PgCreate *cr__pg_create_build(const corral_pg_spec_t *spec, char *msg, size_t size)
{
    if (!spec->nbundles || !spec->bundles) {
        snprintf(msg, size, "a placement group needs at least one bundle");
        return NULL;
    }
    if ((unsigned)spec->strategy >= CR_ARRAY_SIZE(strategy_names)) {
        snprintf(msg, size, "unknown strategy %d", (int)spec->strategy);
        return NULL;
    }
    Corral__PgCreate *r = cr_calloc(1, sizeof(*r));
    corral__pg_create__init(r);
    r->name = cr_strdup(spec->name ? spec->name : "");
    r->selector = cr_strdup(spec->selector ? spec->selector : "");
    r->domain = cr_strdup(spec->domain ? spec->domain : "");
    r->strategy = (Corral__Strategy)spec->strategy; /* same values */
    r->wait = spec->wait != 0;
    r->wait_for_nodes = spec->wait_for_nodes != 0;
    r->bound = (unsigned)spec->bound <= CORRAL_PG_BOUND_ALWAYS ? (Corral__PgBound)spec->bound
                                                               : CORRAL__PG_BOUND__BOUND_NONE;
    r->bundles = cr_calloc(spec->nbundles, sizeof(*r->bundles));
    for (size_t i = 0; i < spec->nbundles; i++) {
        const corral_bundle_spec_t *bs = &spec->bundles[i];
        Corral__Bundle *b = cr_calloc(1, sizeof(*b));
        corral__bundle__init(b);
        b->resources = cr_calloc(SCHED_REQ_MAX, sizeof(*b->resources));
        b->selector = cr_strdup(bs->selector ? bs->selector : "");
        r->bundles[r->n_bundles++] = b;
        char why[256] = "";
        if (cr__parse_resources(bs->resources, b->resources, &b->n_resources, why, sizeof(why)) <
            0) {
            snprintf(msg, size, "bundle %zu: %s", i, why);
            goto fail;
        }
        if (b->n_resources == 0) {
            snprintf(msg, size, "bundle %zu asks for no resource (give e.g. 'GPU=1,CPU=2')", i);
            goto fail;
        }
        for (size_t k = 0; k < b->n_resources; k++)
            if (b->resources[k]->amount == 0) {
                snprintf(msg, size, "bundle %zu: %s=0 reserves nothing", i, b->resources[k]->name);
                goto fail;
            }
    }
    return r;
fail:
    cr__pg_create_free(r);
    return NULL;
}

int corral_pg_spec_check(const corral_pg_spec_t *spec, char *why, size_t size)
{
    Corral__PgCreate *r = cr__pg_create_build(spec, why, size);
    cr__pg_create_free(r);
    return r ? 0 : CR_EINVAL;
}

static const char *const pg_state_names[] = {"UNKNOWN", "PENDING", "PREPARING",
                                             "CREATED", "REMOVED", "INFEASIBLE"};

static void pg_from(corral_pg_t *p, const Corral__PgInfo *in)
{
    memset(p, 0, sizeof(*p));
    p->pg_id = cr_strdup(in->pg_id);
    p->name = cr_strdup(in->name);
    p->state =
        (unsigned)in->state < CR_ARRAY_SIZE(pg_state_names) ? pg_state_names[in->state] : "UNKNOWN";
    p->reason = cr_strdup(in->reason);
    p->strategy = (unsigned)in->strategy < CR_ARRAY_SIZE(strategy_names)
                      ? (corral_strategy_t)in->strategy
                      : CORRAL_PACK;
    p->domain = cr_strdup(in->domain);
    p->queue_position = in->queue_position;
    p->nbundles = in->n_bundles;
    p->bundles = cr_calloc(in->n_bundles + 1, sizeof(*p->bundles));
    for (size_t i = 0; i < in->n_bundles; i++) {
        const Corral__Bundle *b = in->bundles[i];
        corral_bundle_t *o = &p->bundles[i];
        cr_buf_t res = {0};
        for (size_t k = 0; k < b->n_resources; k++) {
            char q[48];
            sched_format_qty(strcmp(b->resources[k]->name, "memory") == 0 ? SCHED_R_MEMORY : -1,
                             b->resources[k]->amount, q, sizeof(q));
            cr_buf_printf(&res, "%s%s=%s", k ? "," : "", b->resources[k]->name, q);
        }
        o->resources = res.s ? res.s : cr_strdup("");
        o->selector = cr_strdup(b->selector);
    }
    for (size_t k = 0; k < in->n_placements; k++) {
        const Corral__BundlePlacement *pl = in->placements[k];
        if (pl->bundle_index >= in->n_bundles)
            continue;
        corral_bundle_t *o = &p->bundles[pl->bundle_index];
        free(o->node_id);
        free(o->devices);
        o->placed = 1;
        o->node_id = cr_strdup(pl->node_id);
        cr_buf_t d = {0};
        for (size_t i = 0; i < pl->n_devices; i++)
            cr_buf_printf(&d, "%s%u", i ? "," : "", pl->devices[i]);
        o->devices = d.s ? d.s : cr_strdup("");
    }
    for (size_t i = 0; i < in->n_bundles; i++) {
        if (!p->bundles[i].node_id)
            p->bundles[i].node_id = cr_strdup("");
        if (!p->bundles[i].devices)
            p->bundles[i].devices = cr_strdup("");
    }
}

void corral_pg_free(corral_pg_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->nbundles; i++) {
        free(p->bundles[i].resources);
        free(p->bundles[i].selector);
        free(p->bundles[i].node_id);
        free(p->bundles[i].devices);
    }
    free(p->bundles);
    free(p->pg_id);
    free(p->name);
    free(p->reason);
    free(p->domain);
    memset(p, 0, sizeof(*p));
}

void corral_pg_list_free(corral_pg_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        corral_pg_free(&v[i]);
    free(v);
}

static int got_pg_created(corral_t *c, const Corral__Envelope *e, void *arg)
{
    if (expect(c, e, CORRAL__ENVELOPE__BODY_PG_CREATED) < 0)
        return 1;
    if (!e->pg_created->pg) {
        c->err = CR_EPARSE;
        set_msg(c, "PgCreated carries no group");
        return 1;
    }
    pg_from(arg, e->pg_created->pg);
    return 1;
}

int corral_pg_create(corral_t *c, const corral_pg_spec_t *spec, corral_pg_t *out)
{
    memset(out, 0, sizeof(*out));
    c->msg[0] = '\0';
    Corral__PgCreate *r = cr__pg_create_build(spec, c->msg, sizeof(c->msg));
    if (!r)
        return CR_EINVAL;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_CREATE;
    e.pg_create = r;
    int err = call(c, &e, got_pg_created, out);
    cr__pg_create_free(r);
    if (err < 0)
        corral_pg_free(out);
    return err;
}

typedef struct pg_many {
    corral_pg_t *out;
    int *errs;
} pg_many_t;

/* An answer in a batch that is not the one asked for: errs[i], and for
 * the batch's first error c->err and the message. */
static void item_unexpected(corral_t *c, const Corral__Envelope *e, int *errs, size_t i)
{
    errs[i] = CR_EPARSE;
    if (!c->err) {
        c->err = CR_EPARSE;
        set_msg(c, "unexpected answer %s", cr_msg_name(e->body_case));
    }
}

static void got_pg_item(corral_t *c, const Corral__Envelope *e, void *arg, size_t i)
{
    pg_many_t *m = arg;
    if (e->body_case == CORRAL__ENVELOPE__BODY_PG_CREATED && e->pg_created->pg)
        pg_from(&m->out[i], e->pg_created->pg);
    else /* a PgCreated without its group is as unexpected as another answer */
        item_unexpected(c, e, m->errs, i);
}

int corral_pg_create_many(corral_t *c, const corral_pg_spec_t *specs, size_t n, corral_pg_t *out,
                          int *errs)
{
    memset(out, 0, n * sizeof(*out));
    int *own = errs ? NULL : cr_calloc(n + 1, sizeof(*own));
    if (!errs)
        errs = own;
    c->msg[0] = '\0';
    Corral__PgCreate **rs = cr_calloc(n + 1, sizeof(*rs));
    Corral__Envelope *es = cr_calloc(n + 1, sizeof(*es));
    Corral__Envelope **ep = cr_calloc(n + 1, sizeof(*ep));
    int err = 0;
    for (size_t i = 0; i < n && !err; i++) {
        char why[256];
        rs[i] = cr__pg_create_build(&specs[i], why, sizeof(why));
        if (!rs[i]) {
            set_msg(c, "group %zu: %s", i, why);
            err = CR_EINVAL;
            break;
        }
        corral__envelope__init(&es[i]);
        es[i].body_case = CORRAL__ENVELOPE__BODY_PG_CREATE;
        es[i].pg_create = rs[i];
        ep[i] = &es[i];
    }
    if (err) { /* nothing sent */
        for (size_t i = 0; i < n; i++)
            errs[i] = CR_EINVAL;
    } else {
        pg_many_t m = {.out = out, .errs = errs};
        err = call_many(c, ep, n, got_pg_item, &m, errs);
    }
    for (size_t i = 0; i < n; i++) {
        if (rs[i])
            cr__pg_create_free(rs[i]);
        if (errs[i])
            corral_pg_free(&out[i]);
    }
    free(rs);
    free(es);
    free(ep);
    free(own);
    return err;
}

static void got_ack_item(corral_t *c, const Corral__Envelope *e, void *arg, size_t i)
{
    if (e->body_case != CORRAL__ENVELOPE__BODY_ACK)
        item_unexpected(c, e, arg, i);
}

int corral_pg_remove_many(corral_t *c, const char *const *ids_or_names, size_t n, int *errs)
{
    int *own = errs ? NULL : cr_calloc(n + 1, sizeof(*own));
    if (!errs)
        errs = own;
    Corral__PgRemove *rs = cr_calloc(n + 1, sizeof(*rs));
    Corral__Envelope *es = cr_calloc(n + 1, sizeof(*es));
    Corral__Envelope **ep = cr_calloc(n + 1, sizeof(*ep));
    for (size_t i = 0; i < n; i++) {
        corral__pg_remove__init(&rs[i]);
        rs[i].pg_id = "";
        rs[i].name = (char *)ids_or_names[i];
        corral__envelope__init(&es[i]);
        es[i].body_case = CORRAL__ENVELOPE__BODY_PG_REMOVE;
        es[i].pg_remove = &rs[i];
        ep[i] = &es[i];
    }
    int err = call_many(c, ep, n, got_ack_item, errs, errs);
    free(rs);
    free(es);
    free(ep);
    free(own);
    return err;
}

typedef struct pg_out {
    corral_pg_t *v;
    size_t n;
    corral_page_t *page;
} pg_out_t;

static int got_pg_list(corral_t *c, const Corral__Envelope *e, void *arg)
{
    pg_out_t *o = arg;
    if (expect(c, e, CORRAL__ENVELOPE__BODY_PG_LIST_REPLY) < 0)
        return 1;
    const Corral__PgListReply *r = e->pg_list_reply;
    o->v = cr_calloc(r->n_groups + 1, sizeof(*o->v));
    for (size_t i = 0; i < r->n_groups; i++)
        pg_from(&o->v[i], r->groups[i]);
    o->n = r->n_groups;
    page_out(o->page, r->continue_token, r->remaining);
    return 1;
}

int corral_pg_list_page(corral_t *c, corral_page_t *page, corral_pg_t **out, size_t *n)
{
    pg_out_t o = {.page = page};
    page->next_token = NULL;
    page->remaining = 0;
    Corral__PgList r = CORRAL__PG_LIST__INIT;
    r.limit = page->limit;
    r.continue_token = (char *)(page->continue_token ? page->continue_token : "");
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_LIST;
    e.pg_list = &r;
    int err = call(c, &e, got_pg_list, &o);
    if (err < 0) {
        corral_pg_list_free(o.v, o.n);
        free(page->next_token);
        page->next_token = NULL;
        o.v = NULL;
        o.n = 0;
    }
    *out = o.v;
    *n = o.n;
    return err;
}

static int fetch_pgs(corral_t *c, void *ctx, corral_page_t *p, void **v, size_t *m)
{
    (void)ctx;
    corral_pg_t *x = NULL;
    int err = corral_pg_list_page(c, p, &x, m);
    *v = x;
    return err;
}

static void drop_pgs(void *v, size_t n)
{
    corral_pg_list_free(v, n);
}

int corral_pg_list(corral_t *c, corral_pg_t **out, size_t *n)
{
    void *v;
    int err = page_all(c, sizeof(**out), fetch_pgs, NULL, drop_pgs, &v, n);
    *out = v;
    return err;
}

int corral_pg_remove(corral_t *c, const char *id_or_name)
{
    /* the head matches the text against groups' ids and names alike */
    Corral__PgRemove r = CORRAL__PG_REMOVE__INIT;
    r.pg_id = "";
    r.name = (char *)id_or_name;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_REMOVE;
    e.pg_remove = &r;
    return call(c, &e, got_ack, NULL);
}
