/* An agent's /metrics (docs/metrics.md): its node's devices, read from
 * each backend's telemetry op at scrape time, labelled with the job and
 * worker this agent started on them. Served by web/ on the agent's loop,
 * to the cluster token only (Prometheus sends it: Authorization: Bearer,
 * a credentials_file), /healthz to anyone. */
#include "agent/agent.h"
#include "net/tls.h"
#include "web/web.h"
#include <stdio.h>

typedef struct metrics_ctx {
    const cr_node_t *node;
    const hw_options_t *hwo;
    const agent_t *const *agent; /* the agent may come and go: read through it */
} metrics_ctx_t;

static metrics_ctx_t mctx; /* one agent per process */

static bool holder(void *ctx, int dev, const char **job, const char **wk)
{
    const agent_t *a = ctx;
    return agent_device_holder(a, dev, job, wk);
}

void agent_device_metrics(cr_buf_t *b, const cr_node_t *node, const hw_options_t *hwo,
                          const agent_t *a)
{
    web_device_metrics(b, node, hwo, holder, (void *)a);
}

static void get_metrics(void *ctx, const web_req_t *rq, web_out_t *out)
{
    metrics_ctx_t *m = ctx;
    const char *l[] = {"node", m->node->id, "simulated", m->node->simulated ? "true" : "false"};
    web_prom_family(&out->body, "corral_agent_up", "gauge", "1 while the agent serves metrics");
    web_prom_sample(&out->body, "corral_agent_up", l, 2, 1);
    web_prom_family(&out->body, "corral_agent_workers", "gauge", "workers this agent runs");
    web_prom_sample(&out->body, "corral_agent_workers", l, 2,
                    *m->agent ? (double)agent_running(*m->agent) : 0);
    /* job output this agent forwarded to the head (docs/protocol.md "Raw
     * log chunks"): in raw chunks, and of those by sendfile */
    cr_raw_stats_t rs;
    cr_net_raw_stats(&rs);
    web_prom_family(&out->body, "corral_output_raw_bytes_total", "counter",
                    "job output sent and received in raw log chunks (docs/protocol.md)");
    const char *rl[][4] = {{"node", m->node->id, "way", "sent"},
                           {"node", m->node->id, "way", "received"}};
    web_prom_sample(&out->body, "corral_output_raw_bytes_total", rl[0], 2, (double)rs.sent);
    web_prom_sample(&out->body, "corral_output_raw_bytes_total", rl[1], 2, (double)rs.received);
    web_prom_family(&out->body, "corral_output_sendfile_bytes_total", "counter",
                    "of the raw bytes sent, those sent by sendfile(2) from the worker's file");
    web_prom_sample(&out->body, "corral_output_sendfile_bytes_total", l, 1, (double)rs.sent_kernel);
    agent_device_metrics(&out->body, m->node, m->hwo, *m->agent);
    out->type = "text/plain; version=0.0.4; charset=utf-8";
}

static void get_health(void *ctx, const web_req_t *rq, web_out_t *out)
{
    out->type = "text/plain";
    cr_buf_printf(&out->body, "ok\n");
}

int agent_metrics_tls(const char *dir, const char *node_id, const char *tls_cert,
                      const char *tls_key, const char *name, char **cert, char **key, char *path,
                      size_t psize, char *why, size_t size)
{
    *cert = *key = NULL;
    if (tls_cert || tls_key) { /* --tls-cert/--tls-key: the user's, as the head reads its own */
        if (!tls_cert || !tls_key) {
            snprintf(why, size, "--tls-cert and --tls-key go together");
            return CR_EINVAL;
        }
        snprintf(path, psize, "%s", tls_cert);
        int err = cr_tls_read_pem(tls_cert, false, cert, why, size);
        if (err == 0 && (err = cr_tls_read_pem(tls_key, true, key, why, size)) < 0) {
            free(*cert);
            *cert = NULL;
        }
        return err;
    }
    char cn[200], what[600];
    snprintf(cn, sizeof(cn), "corral agent %.128s", node_id);
    snprintf(path, psize, "%s/metrics.crt", dir);
    int err = cr_tls_own_cert(dir, "metrics", cn, name, cert, key, what, sizeof(what), why, size);
    if (err == 0 && what[0])
        fprintf(stderr, "corrald: metrics: %s\n", what);
    return err;
}

web_t *agent_metrics_start(uv_loop_t *loop, const cr_node_t *node, const hw_options_t *hwo,
                           const agent_t *const *agent, const char *host, int port,
                           const uint8_t token[CR_TOKEN_LEN], const char *cert, const char *key,
                           char *why, size_t size)
{
    mctx = (metrics_ctx_t){.node = node, .hwo = hwo, .agent = agent};
    web_config_t wc = {.loop = loop,
                       .who = "metrics",
                       .host = host,
                       .port = (uint16_t)port,
                       .token = token,
                       .tls_cert_pem = cert,
                       .tls_key_pem = key};
    web_t *w = web_new(&wc, why, size);
    if (!w)
        return NULL;
    web_route_add(w, &(web_route_t){"GET", "/metrics", 0, get_metrics, &mctx});
    web_route_add(w, &(web_route_t){"GET", "/healthz", WEB_PUBLIC, get_health, &mctx});
    if (web_listen(w, why, size) < 0) {
        web_free(w);
        return NULL;
    }
    return w;
}
