/* The HTTP server (web.h) on the caller's libuv loop: libmicrohttpd in
 * its external-polling mode with epoll, so the loop watches one
 * descriptor (libmicrohttpd's epoll set) with a uv_poll and runs
 * MHD_run when it is readable or when libmicrohttpd's timeout is due.
 * Every handler thus runs on the loop's thread, between the daemon's own
 * callbacks: it reads the daemon's state as any other callback does,
 * without locks (DESIGN.md "Runtime": no other threads).
 *
 * A stream (Server-Sent Events) that has nothing to send suspends its
 * connection; a timer resumes the suspended ones every STREAM_POLL_MS to
 * ask them again. */
#include "web/web_int.h"
#include <arpa/inet.h>
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

#define STREAM_POLL_MS 250
#define MAX_CONNECTIONS 256
#define CONNECTION_TIMEOUT_S 30

struct web_stream {
    web_stream_t *next, **prev;
    web_t *w;
    struct MHD_Connection *conn;
    bool suspended;
    web_stream_fn fn;
    void *ctx;
    void (*ctx_free)(void *ctx);
};

static void run(web_t *w);

static void on_poll(uv_poll_t *h, int status, int events)
{
    run(h->data);
}

static void on_timer(uv_timer_t *t)
{
    web_t *w = t->data;
    for (web_stream_t *s = w->streams; s; s = s->next)
        if (s->suspended) {
            s->suspended = false;
            MHD_resume_connection(s->conn);
        }
    run(w);
}

/* MHD_run, then the timer set to libmicrohttpd's next timeout (or the
 * stream poll while a stream waits). */
static void run(web_t *w)
{
    if (!w->mhd)
        return;
    MHD_run(w->mhd);
    MHD_UNSIGNED_LONG_LONG to = 0;
    uint64_t ms = 1000;
    if (MHD_get_timeout(w->mhd, &to) == MHD_YES)
        ms = to < 1000 ? (uint64_t)to : 1000;
    for (web_stream_t *s = w->streams; s; s = s->next)
        if (s->suspended && ms > STREAM_POLL_MS)
            ms = STREAM_POLL_MS;
    uv_timer_start(w->timer, on_timer, ms, 0);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    web_stream_t *s = cls;
    ssize_t n = s->fn(s->ctx, buf, max);
    if (n < 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n == 0 && !s->suspended) { /* nothing now: asked again after STREAM_POLL_MS */
        s->suspended = true;
        MHD_suspend_connection(s->conn);
    }
    return n;
}

static void stream_free(void *cls)
{
    web_stream_t *s = cls;
    if (s->suspended) /* only at web_free: every one was resumed before the stop */
        s->suspended = false;
    *s->prev = s->next;
    if (s->next)
        s->next->prev = s->prev;
    if (s->ctx_free)
        s->ctx_free(s->ctx);
    free(s);
}

typedef struct collect {
    web_in_t *in;
} collect_t;

/* libmicrohttpd leaves the URL as sent (unescape below does nothing):
 * the path is decoded segment by segment by route.c, so that "a%2Fb" is
 * one segment; the query's keys and values are decoded here. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *uri)
{
    return strlen(uri);
}

typedef struct args {
    web_in_t *in;
    char *arena; /* the decoded keys and values */
    size_t used, size;
} args_t;

static const char *decoded(args_t *a, const char *s)
{
    size_t n = strlen(s);
    if (a->used + n + 1 > a->size || !web_decode(s, n, a->arena + a->used, a->size - a->used, true))
        return NULL;
    const char *out = a->arena + a->used;
    a->used += strlen(out) + 1;
    return out;
}

static enum MHD_Result on_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                              const char *value)
{
    args_t *a = cls;
    const char *k = key ? decoded(a, key) : NULL, *v = value ? decoded(a, value) : "";
    if (k && v && a->in->nquery < WEB_MAX_QUERY) /* what does not decode is left out */
        a->in->query[a->in->nquery++] = (web_kv_t){k, v};
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    web_t *w = cls;
    if (!*con_cls) { /* the headers: answer once the (empty) body is in */
        *con_cls = w;
        return MHD_YES;
    }
    if (*upload_size) { /* no route takes a body: it is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    web_in_t in = {.method = method, .path = url};
    in.authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    in.cookie = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Cookie");
    char arena[4096];
    args_t args = {.in = &in, .arena = arena, .size = sizeof(arena)};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, on_arg, &args);
    web_out_t out = {0};
    web_dispatch(w, &in, &out);
    struct MHD_Response *r;
    if (out.stream) {
        web_stream_t *s = cr_calloc(1, sizeof(*s));
        s->w = w;
        s->conn = conn;
        s->fn = out.stream;
        s->ctx = out.stream_ctx;
        s->ctx_free = out.stream_free;
        out.stream_ctx = NULL;
        s->next = w->streams;
        s->prev = &w->streams;
        if (w->streams)
            w->streams->prev = &s->next;
        w->streams = s;
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s, stream_free);
    } else {
        r = MHD_create_response_from_buffer(out.body.len, out.body.len ? out.body.s : (void *)"",
                                            MHD_RESPMEM_MUST_COPY);
    }
    if (!r) {
        web_out_fini(&out);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", out.type ? out.type : "text/plain");
    MHD_add_response_header(r, "Cache-Control", out.cache ? out.cache : "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    if (out.status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"corral\"");
    if (out.location[0])
        MHD_add_response_header(r, "Location", out.location);
    if (out.cookie[0])
        MHD_add_response_header(r, "Set-Cookie", out.cookie);
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)out.status, r);
    MHD_destroy_response(r);
    web_out_fini(&out);
    return ok;
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    cr_debug("%s: libmicrohttpd: %s", ((web_t *)cls)->who, line);
}

/* TLS 1.3 only, as the cluster's TCP connections (docs/protocol.md "TLS") */
#define TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3"

int web_listen(web_t *w, char *why, size_t size)
{
    bool tls = w->tls_cert != NULL;
    if (!tls && !web_is_loopback(w->host)) {
        snprintf(why, size,
                 "%s: refusing to serve on %s: off loopback the %s serves only HTTPS, and "
                 "it has no certificate; serve on 127.0.0.1 and reach it through an SSH "
                 "tunnel (ssh -L %d:127.0.0.1:%d)",
                 w->who, w->host, w->who, w->cfg.port ? w->cfg.port : WEB_DEFAULT_PORT,
                 w->cfg.port ? w->cfg.port : WEB_DEFAULT_PORT);
        return CR_EACCES;
    }
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(why, size,
                 "%s: this libmicrohttpd has no TLS (HTTPS) support; install Debian's "
                 "libmicrohttpd12 (built with GnuTLS) or serve on 127.0.0.1",
                 w->who);
        return CR_EINVAL;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (tls)
        flags |= MHD_USE_TLS;
    const char *host = strcmp(w->host, "localhost") ? w->host : "127.0.0.1";
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)w->cfg.port);
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)w->cfg.port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(why, size, "%s: '%s' is not an IP address", w->who, w->host);
        return CR_EINVAL;
    }
    /* TLS adds its key, certificate and versions to the same options */
    struct MHD_OptionItem tlsopt[] = {
        {tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, w->tls_key},
        {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, w->tls_cert},
        {tls ? MHD_OPTION_HTTPS_PRIORITIES : MHD_OPTION_END, 0, (void *)TLS_PRIORITIES},
        {MHD_OPTION_END, 0, NULL},
    };
    errno = 0;
    w->mhd = MHD_start_daemon(
        flags, (uint16_t)w->cfg.port, NULL, NULL, on_request, w, MHD_OPTION_SOCK_ADDR, &ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)CONNECTION_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
        MHD_OPTION_EXTERNAL_LOGGER, on_log, w, MHD_OPTION_UNESCAPE_CALLBACK, unescape, w,
        MHD_OPTION_ARRAY, tlsopt, MHD_OPTION_END);
    if (!w->mhd && tls && errno != EADDRINUSE) {
        snprintf(why, size,
                 "%s: cannot serve HTTPS on %s:%d: the certificate or key was refused (PEM, the "
                 "key matching the certificate?) or the address cannot be bound (%s)",
                 w->who, w->host, w->cfg.port, strerror(errno ? errno : EINVAL));
        return CR_EINVAL;
    }
    if (!w->mhd) {
        snprintf(why, size,
                 "%s: cannot listen on %s:%d (in use? --dashboard-port, or 0 for "
                 "off)",
                 w->who, w->host, w->cfg.port);
        return CR_EIO;
    }
    const union MHD_DaemonInfo *fd = MHD_get_daemon_info(w->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    const union MHD_DaemonInfo *port = MHD_get_daemon_info(w->mhd, MHD_DAEMON_INFO_BIND_PORT);
    w->port = port ? port->port : w->cfg.port;
    w->poll = cr_calloc(1, sizeof(*w->poll));
    w->timer = cr_calloc(1, sizeof(*w->timer));
    uv_poll_init(w->cfg.loop, w->poll, fd->epoll_fd);
    uv_timer_init(w->cfg.loop, w->timer);
    w->poll->data = w->timer->data = w;
    uv_poll_start(w->poll, UV_READABLE, on_poll);
    /* the server does not keep the loop alive: the daemon's loop ends when
     * its own work is done, and web_free closes these after */
    uv_unref((uv_handle_t *)w->poll);
    uv_unref((uv_handle_t *)w->timer);
    run(w);
    return 0;
}

int web_port(const web_t *w)
{
    return w->port;
}

static void on_closed(uv_handle_t *h)
{
    free(h);
}

void web_free(web_t *w)
{
    if (!w)
        return;
    if (w->mhd) {
        for (web_stream_t *s = w->streams; s; s = s->next)
            if (s->suspended) { /* libmicrohttpd must not stop with one suspended */
                s->suspended = false;
                MHD_resume_connection(s->conn);
            }
        MHD_run(w->mhd);
        MHD_stop_daemon(w->mhd); /* ends the streams: stream_free */
        w->mhd = NULL;
    }
    if (w->poll) {
        uv_poll_stop(w->poll);
        uv_close((uv_handle_t *)w->poll, on_closed);
    }
    if (w->timer) {
        uv_timer_stop(w->timer);
        uv_close((uv_handle_t *)w->timer, on_closed);
    }
    memset(w->token, 0, sizeof(w->token));
    memset(w->login, 0, sizeof(w->login));
    if (w->tls_key)
        cr_wipe(w->tls_key, strlen(w->tls_key));
    free(w->tls_key);
    free(w->tls_cert);
    CR_VEC_FREE(&w->routes);
    free(w->who);
    free(w->host);
    free(w);
}
