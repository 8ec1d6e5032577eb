/* corrald: the head (--head: the control service and the local agent of
 * one node, on one libuv loop, head/) or an agent that joins a head
 * (--address HEAD:PORT, agent/). Its options, this node's description
 * with --resources and --labels applied, and which role to start
 * (DESIGN.md "Runtime", docs/runtime.md, docs/cluster.md). */
#include "agent/agent.h"
#include "head/head.h"
#include "web/web.h"
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>

static const char usage_line[] =
    "usage: corrald --head [--hw-spec FILE] [--resources 'K=V,...'] [--labels 'k=v,...'] "
    "[--port N] [--listen ADDR] [--node-ip IP] [--token-file F] [--heartbeat-ms N] "
    "[--suspect-after-ms N] "
    "[--dead-after-ms N] [--tls | --no-tls] [--tls-cert F --tls-key F] "
    "[--dashboard-port N|any|0] [--dashboard-host IP|off] "
    "[--keep-finished-jobs N] [--keep-finished-for DURATION] [--keep-events N] "
    "[--max-frame BYTES] [--log-file PATH] [--worker-log-max BYTES] [--block]\n"
    "       corrald --address HEAD:PORT [--token-file F] [--hw-spec FILE] [--node-ip IP] "
    "[--node-id ID] [--resources ...] [--labels ...] [--tls-fingerprint sha256:HEX | "
    "--tls-ca F] [--metrics-port N|any] [--metrics-host IP] [--tls-cert F --tls-key F] "
    "[--log-file PATH] [--worker-log-max BYTES] "
    "[--keep-finished-jobs N] [--keep-finished-for DURATION]\n";

static cr_node_t *node; /* this node, as discovered */
static hw_options_t hwo;

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
    if (strlen(k) >= sizeof(node->resources.v[0].name)) {
        fprintf(stderr, "corrald: --resources: name '%s' is too long\n", k);
        return CR_EINVAL;
    }
    for (size_t i = 0; i < node->resources.n; i++)
        if (strcmp(node->resources.v[i].name, k) == 0) {
            node->resources.v[i].amount = q;
            return 0;
        }
    cr_resource_t *r = CR_VEC_PUSH(&node->resources);
    snprintf(r->name, sizeof(r->name), "%s", k);
    r->amount = q;
    return 0;
}

static int set_label(const char *k, const char *v)
{
    for (size_t i = 0; i < node->labels.n; i++)
        if (strcmp(node->labels.v[i].key, k) == 0) {
            free(node->labels.v[i].value);
            node->labels.v[i].value = cr_strdup(v);
            return 0;
        }
    cr_kv_t *kv = CR_VEC_PUSH(&node->labels);
    kv->key = cr_strdup(k);
    kv->value = cr_strdup(v);
    return 0;
}

static void usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "corrald: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage_line);
}

/* "90" (seconds), "90s", "15m", "24h", "7d" into milliseconds. */
static int parse_duration(const char *opt, const char *s, int64_t *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    int64_t unit = 1000;
    if (*end && !end[1])
        unit = *end == 's'   ? 1000
               : *end == 'm' ? 60000
               : *end == 'h' ? 3600000
               : *end == 'd' ? 86400000
                             : 0;
    if (!s[0] || end == s || v < 1 || v > 36500LL * 86400 || !unit || (*end && end[1])) {
        fprintf(stderr,
                "corrald: %s: expected a duration such as 90s, 15m, 24h or 7d, got '%s'\n%s", opt,
                s, usage_line);
        return 2;
    }
    *out = (int64_t)v * unit;
    return 0;
}

/* "64M", "4MiB", "1G", "1048576" (bytes) into bytes, at least
 * CR_WORKER_LOG_MAX_MIN; "0": unbounded (CR_WORKER_LOG_UNBOUNDED). */
static int parse_log_max(const char *opt, const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    const char *rest = shift ? end + 1 : end;
    if (shift && (!strcmp(rest, "iB") || !strcmp(rest, "B")))
        rest += strlen(rest);
    bool ok = s[0] >= '0' && s[0] <= '9' && end != s && !*rest && v < (1ull << 40) &&
              (v == 0 || (v << shift) >= CR_WORKER_LOG_MAX_MIN);
    if (!ok) {
        fprintf(stderr,
                "corrald: %s: expected a size of at least 1M such as 64M or 1G (0: unbounded), "
                "got '%s'\n%s",
                opt, s, usage_line);
        return 2;
    }
    *out = v ? v << shift : CR_WORKER_LOG_UNBOUNDED;
    return 0;
}

/* --dashboard-port, --metrics-port: a port, "any" (the kernel's choice:
 * 0) or, where off is allowed, 0 (off: -1). */
static int parse_port(const char *opt, const char *s, bool zero_off, int *out)
{
    if (!strcmp(s, "any")) {
        *out = 0;
        return 0;
    }
    char *end;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || v < (zero_off ? 0 : 1) || v > 65535) {
        fprintf(stderr, "corrald: %s: expected a port 1..65535%s or 'any', got '%s'\n%s", opt,
                zero_off ? ", 0 (off)" : "", s, usage_line);
        return 2;
    }
    *out = v == 0 ? -1 : (int)v;
    return 0;
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

int main(int argc, char **argv)
{
    /* Every unit of work opens and releases an SQLite savepoint, which
     * frees and allocates again memory at the top of the heap: with
     * glibc's default 128 KiB trim threshold each release gave the pages
     * back (brk) and the next unit faulted them in again, a third of the
     * head's time under a stream of placement groups. */
    /* Streamed output (head/follow.c, agent/join.c) moves 256 KiB
     * messages, up to 4 MiB of them queued per follower and freed as they
     * are written: with the threshold at 4 MiB the heap's top went back
     * and forth (page faults, a fifth of the head's time forwarding a
     * remote worker's output); 16 MiB keeps a few streams' worth. */
    mallopt(M_TRIM_THRESHOLD, 16 << 20);
    mallopt(M_TOP_PAD, 1 << 20);
    /* Setting those fixes glibc's mmap threshold at 128 KiB, so every
     * 256 KiB message was mapped, zeroed and unmapped again: a third of
     * the head's time following a job (perf: page faults, clear_page).
     * From the heap. */
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
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
        {"max-frame", required_argument, 0, 'M'},
        {"keep-finished-jobs", required_argument, 0, 'J'},
        {"keep-finished-for", required_argument, 0, 'G'},
        {"keep-events", required_argument, 0, 'E'},
        {"log-file", required_argument, 0, 'F'},
        {"worker-log-max", required_argument, 0, 'W'},
        {"block", no_argument, 0, 'b'},
        {"tls", no_argument, 0, 'T'},
        {"no-tls", no_argument, 0, 'N'},
        {"tls-cert", required_argument, 0, 'C'},
        {"tls-key", required_argument, 0, 'K'},
        {"tls-fingerprint", required_argument, 0, 'P'},
        {"tls-ca", required_argument, 0, 'A'},
        {"dashboard-port", required_argument, 0, 'D'},
        {"dashboard-host", required_argument, 0, 'O'},
        {"metrics-port", required_argument, 0, 'Q'},
        {"metrics-host", required_argument, 0, 'm'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *spec = NULL, *resources = NULL, *labels = NULL, *token_file = NULL;
    agent_opts_t ao = {0};
    bool head = false;
    uint32_t port = 0;
    int opt, rc = 1;
    head_opts_t ho = {.heartbeat_ms = 1000,
                      .suspect_ms = 3000,
                      .dead_ms = 10000,
                      .dashboard_port = WEB_DEFAULT_PORT};
    bool dashboard_given = false;
    ao.metrics_port = -1;
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
            ho.listen = optarg;
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
        case 'T':
            ho.tls = 1;
            break;
        case 'N':
            ho.tls = -1;
            break;
        case 'C': /* the head's, or an agent's for its /metrics */
            ho.tls_cert = ao.tls_cert = optarg;
            break;
        case 'K':
            ho.tls_key = ao.tls_key = optarg;
            break;
        case 'P':
            ao.tls_fingerprint = optarg;
            break;
        case 'A':
            ao.tls_ca = optarg;
            break;
        case 'D':
            if (parse_port("--dashboard-port", optarg, true, &ho.dashboard_port))
                return 2;
            dashboard_given = true;
            break;
        case 'O':
            if (!strcmp(optarg, "off") || !strcmp(optarg, "0"))
                ho.dashboard_port = -1, dashboard_given = true;
            else
                ho.dashboard_host = optarg;
            break;
        case 'Q':
            if (parse_port("--metrics-port", optarg, false, &ao.metrics_port))
                return 2;
            break;
        case 'm':
            ao.metrics_host = optarg;
            break;
        case 'b':
            break; /* corrald always runs in the foreground; corral start detaches it */
        case 'p':
            if (parse_u32("--port", optarg, 0, 65535, &port))
                return 2;
            break;
        case 'B':
            if (parse_u32("--heartbeat-ms", optarg, 10, 600000, &ho.heartbeat_ms))
                return 2;
            break;
        case 'S':
            if (parse_u32("--suspect-after-ms", optarg, 10, 3600000, &ho.suspect_ms))
                return 2;
            break;
        case 'X':
            if (parse_u32("--dead-after-ms", optarg, 10, 3600000, &ho.dead_ms))
                return 2;
            break;
        case 'M': /* above the largest message corral sends whole (256 KiB of output) */
            if (parse_u32("--max-frame", optarg, 1u << 19, 1u << 30, &ho.max_frame))
                return 2;
            break;
        case 'J':
            if (parse_u32("--keep-finished-jobs", optarg, 1, 100000000, &ho.keep_finished))
                return 2;
            ao.keep_finished = ho.keep_finished; /* an agent: its files of finished workers */
            break;
        case 'G':
            if (parse_duration("--keep-finished-for", optarg, &ho.keep_finished_ms))
                return 2;
            ao.keep_finished_ms = ho.keep_finished_ms;
            break;
        case 'E':
            if (parse_u32("--keep-events", optarg, 100, 100000000, &ho.keep_events))
                return 2;
            break;
        case 'F':
            ho.log_file = ao.log_file = optarg;
            break;
        case 'W':
            if (parse_log_max("--worker-log-max", optarg, &ho.worker_log_max))
                return 2;
            ao.worker_log_max = ho.worker_log_max;
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
    if (head ? (ao.tls_fingerprint || ao.tls_ca) : ho.tls != 0) {
        usage_error("%s", head ? "--tls-fingerprint and --tls-ca are an agent's (--address)"
                               : "--tls and --no-tls are the head's (an agent's TLS to the head "
                                 "follows the head: --tls-fingerprint or --tls-ca)");
        return 2;
    }
    /* the head serves /metrics with its dashboard; an agent's own server
     * is --metrics-port, and its certificate is for that server only */
    if (head ? (ao.metrics_port >= 0 || ao.metrics_host)
             : ((ao.metrics_host || ao.tls_cert || ao.tls_key) && ao.metrics_port < 0)) {
        usage_error("%s", head ? "--metrics-port and --metrics-host are an agent's: the head "
                                 "serves /metrics with its dashboard (--dashboard-port, "
                                 "--dashboard-host)"
                               : "--metrics-host, --tls-cert and --tls-key of an agent are for "
                                 "its /metrics: give --metrics-port too");
        return 2;
    }
    if (!head && (!ao.tls_cert != !ao.tls_key)) {
        usage_error("%s", "--tls-cert and --tls-key go together");
        return 2;
    }
    if ((ao.tls_fingerprint && ao.tls_ca) || (ho.tls < 0 && (ho.tls_cert || ho.tls_key))) {
        usage_error("%s", ao.tls_fingerprint ? "give --tls-fingerprint or --tls-ca, not both"
                                             : "--no-tls excludes --tls-cert and --tls-key");
        return 2;
    }
    if (ho.suspect_ms < ho.heartbeat_ms || ho.dead_ms <= ho.suspect_ms) {
        fprintf(stderr,
                "corrald: expected --heartbeat-ms <= --suspect-after-ms < --dead-after-ms, got "
                "%u, %u, %u\n%s",
                ho.heartbeat_ms, ho.suspect_ms, ho.dead_ms, usage_line);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    hwo.spec_path = spec;
    char *msg = NULL;
    if (hw_discover(&hwo, &node, &msg) < 0) {
        fprintf(stderr, "corrald: %s\n", msg ? msg : "discovery failed");
        free(msg);
        goto out;
    }
    if (resources && parse_kv_list(resources, "resources", set_resource) < 0)
        goto out;
    if (labels && parse_kv_list(labels, "labels", set_label) < 0)
        goto out;
    if (labels)
        hw_node_sort_labels(node);
    if (ao.head) {
        ao.token_file = token_file;
        ao.node = node;
        ao.hwo = &hwo;
        rc = agent_main(&ao);
        goto out;
    }

    ho.node = node;
    ho.hwo = &hwo;
    ho.port = port;
    ho.token_file = token_file;
    ho.node_ip = ao.node_ip;
    /* the default port may be taken (another head on this machine): then
     * no dashboard, said; a port given is required */
    ho.dashboard_required = dashboard_given || ho.dashboard_host;
    rc = head_main(&ho);
out:
    hw_node_free(node);
    return rc;
}
