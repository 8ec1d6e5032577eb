/* The Google TPU backend.
 *
 * Chips: /dev/accelN (v2 to v4 and some v5p images) or VFIO groups
 * /dev/vfio/N whose PCI function has vendor 0x1ae0 (v5e, v5p, v6e). The
 * slice this host belongs to comes from the variables GKE sets
 * (TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY, TPU_WORKER_ID, TPU_NAME,
 * TPU_WORKER_HOSTNAMES), else, on a GCE VM only, from the metadata server.
 * The slice geometry (valid shapes, chip coordinates) is hw/tpu_topology.c.
 *
 * Fixture trees hold regular empty files where a real machine has
 * character devices under /dev: a chip is any /dev entry of the right name
 * that is not a directory, which is true of both. Directories are skipped:
 * NVIDIA's and Intel's drivers make /dev/accel/ a directory of their own
 * nodes. */
#include "hw.h"
#include "tpu.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TPU_PCI_VENDOR 0x1ae0
#define TPU_MAX_CHIPS_PER_HOST 64

/* What libtpu reads to run on part of a host: TPU_VISIBLE_CHIPS names the
 * chips; the bounds say their shape and that this process is alone.
 * libtpu, JAX's own multi-process tests and PyTorch/XLA use the
 * TPU_CHIPS_PER_PROCESS_BOUNDS / TPU_PROCESS_BOUNDS names; Ray sets the
 * older TPU_CHIPS_PER_HOST_BOUNDS / TPU_HOST_BOUNDS names, which libtpu
 * still accepts. corral sets both, with the same values. */
static const char *const vars[] = {"TPU_VISIBLE_CHIPS",  "TPU_CHIPS_PER_PROCESS_BOUNDS",
                                   "TPU_PROCESS_BOUNDS", "TPU_CHIPS_PER_HOST_BOUNDS",
                                   "TPU_HOST_BOUNDS",    NULL};

/* Bounds per number of chips given, for a worker that has part of a host
 * and runs alone (a multi-process gang on a slice gets the mesh variables
 * of sched/gang.c instead). One chip 1,1,1 and two chips 1,2,1 are Ray's
 * values too (python/ray/_private/accelerators/tpu.py). Four chips of an
 * 8-chip host are corral's own: Ray sets only TPU_VISIBLE_CHIPS there and
 * leaves the bounds to libtpu, whose default for a v5e/v6e host is its
 * whole 2x4; corral says the 4 chips are one 2x2 block in a process of
 * its own (2,2,1 / 1,1,1), the recipe of JAX issue 14977 for running two
 * processes of 4 chips on one host. A worker with the whole host gets no
 * variable at all. */
static const struct bounds_row {
    size_t chips;
    const char *chips_bounds, *process_bounds;
} bounds_rows[] = {
    {1, "1,1,1", "1,1,1"},
    {2, "1,2,1", "1,1,1"},
    {4, "2,2,1", "1,1,1"},
};

/* ---- the GCE metadata server: only on a GCE VM, never in tests ---- */

#define GCE_DEFAULT_ADDR "169.254.169.254"
#define GCE_DEFAULT_PORT 80
#define GCE_BUDGET_MS 300 /* for all requests of one probe together */
#define GCE_MAX_REPLY 65536

typedef struct gce {
    bool allowed, dead;
    struct sockaddr_in addr;
    struct timespec deadline;
} gce_t;

static bool is_gce_vm(const cr_hw_env_t *env)
{
    char buf[128];
    return cr_read_file(env->root, "/sys/class/dmi/id/product_name", buf, sizeof(buf)) == 0 &&
           cr_str_has_prefix(buf, "Google");
}

/* CORRAL_GCE_METADATA: unset or "on": the metadata server; "off": never;
 * "A.B.C.D:PORT": that address instead (tests run a stand-in server). */
static void gce_init(const cr_hw_env_t *env, gce_t *g)
{
    memset(g, 0, sizeof(*g));
    const char *v = cr_hw_getenv(env, "CORRAL_GCE_METADATA");
    if (v && strcmp(v, "off") == 0)
        return;
    if (!is_gce_vm(env))
        return;
    g->addr.sin_family = AF_INET;
    g->addr.sin_port = htons(GCE_DEFAULT_PORT);
    inet_pton(AF_INET, GCE_DEFAULT_ADDR, &g->addr.sin_addr);
    if (v && *v && strcmp(v, "on") != 0) {
        char host[64];
        const char *colon = strrchr(v, ':');
        int64_t port;
        if (!colon || (size_t)(colon - v) >= sizeof(host) ||
            cr_parse_i64(colon + 1, 10, &port) != 0 || port <= 0 || port > 65535)
            return;
        memcpy(host, v, (size_t)(colon - v));
        host[colon - v] = '\0';
        if (inet_pton(AF_INET, host, &g->addr.sin_addr) != 1)
            return;
        g->addr.sin_port = htons((uint16_t)port);
    }
    g->allowed = true;
    clock_gettime(CLOCK_MONOTONIC, &g->deadline);
    g->deadline.tv_nsec += (long)GCE_BUDGET_MS * 1000000L;
    g->deadline.tv_sec += g->deadline.tv_nsec / 1000000000L;
    g->deadline.tv_nsec %= 1000000000L;
}

static int ms_left(const gce_t *g)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms =
        (g->deadline.tv_sec - now.tv_sec) * 1000L + (g->deadline.tv_nsec - now.tv_nsec) / 1000000L;
    return ms > 0 ? (int)ms : 0;
}

static bool wait_fd(const gce_t *g, int fd, short events)
{
    for (;;) {
        int ms = ms_left(g);
        if (ms <= 0)
            return false;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, ms);
        if (r > 0)
            return true;
        if (r == 0 || errno != EINTR)
            return false;
    }
}

/* GET /computeMetadata/v1/instance/attributes/<key>: the body of a 200
 * reply (malloc'ed, trimmed) or NULL. After one failure to reach the
 * server, no more requests are made. */
static char *gce_get(gce_t *g, const char *key)
{
    if (!g->allowed || g->dead)
        return NULL;
    char *body = NULL;
    cr_buf_t reply = {0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto out_dead;
    if (connect(fd, (struct sockaddr *)&g->addr, sizeof(g->addr)) != 0) {
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (errno != EINPROGRESS || !wait_fd(g, fd, POLLOUT) ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0)
            goto out_dead;
    }
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET /computeMetadata/v1/instance/attributes/%s HTTP/1.0\r\n"
                     "Host: metadata.google.internal\r\nMetadata-Flavor: Google\r\n"
                     "Connection: close\r\n\r\n",
                     key);
    for (int off = 0; off < n;) {
        if (!wait_fd(g, fd, POLLOUT))
            goto out_dead;
        ssize_t w = send(fd, req + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            goto out_dead;
        off += w > 0 ? (int)w : 0;
    }
    for (;;) {
        char tmp[4096];
        if (!wait_fd(g, fd, POLLIN))
            goto out_dead;
        ssize_t r = recv(fd, tmp, sizeof(tmp), 0);
        if (r == 0)
            break;
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            goto out_dead;
        }
        if (reply.len + (size_t)r > GCE_MAX_REPLY)
            goto out_close;
        cr_buf_append(&reply, tmp, (size_t)r);
    }
    if (reply.s && (cr_str_has_prefix(reply.s, "HTTP/1.0 200") ||
                    cr_str_has_prefix(reply.s, "HTTP/1.1 200"))) {
        char *sep = strstr(reply.s, "\r\n\r\n");
        if (sep) {
            body = cr_strdup(sep + 4);
            cr_strtrim(body);
            if (!*body)
                CR_FREE(body);
        }
    }
    goto out_close;
out_dead:
    cr_debug("tpu: GCE metadata server unreachable: %s", key);
    g->dead = true;
out_close:
    if (fd >= 0)
        close(fd);
    cr_buf_free(&reply);
    return body;
}

int hw_gce_attributes(const cr_hw_env_t *env, const char *const *keys, char **values, size_t n,
                      int budget_ms)
{
    gce_t g;
    gce_init(env, &g);
    for (size_t i = 0; i < n; i++)
        values[i] = NULL;
    if (!g.allowed)
        return CR_ENODEV;
    clock_gettime(CLOCK_MONOTONIC, &g.deadline);
    g.deadline.tv_sec += budget_ms / 1000;
    g.deadline.tv_nsec += (long)(budget_ms % 1000) * 1000000L;
    g.deadline.tv_sec += g.deadline.tv_nsec / 1000000000L;
    g.deadline.tv_nsec %= 1000000000L;
    for (size_t i = 0; i < n; i++)
        values[i] = gce_get(&g, keys[i]);
    return g.dead ? CR_EIO : 0;
}

/* The value of KEY in the tpu-env attribute ("KEY: 'value'" lines). */
static char *tpu_env_value(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > kl + 2 && strncmp(line, key, kl) == 0 && line[kl] == ':') {
            const char *q = memchr(line + kl, '\'', len - kl);
            const char *q2 = q ? memchr(q + 1, '\'', len - (size_t)(q + 1 - line)) : NULL;
            if (q2)
                return cr_strndup(q + 1, (size_t)(q2 - q - 1));
        }
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

/* worker-network-endpoints: "unknown:unknown:10.0.0.2,..." -> "10.0.0.2,..." */
static char *endpoints_to_hosts(const char *text)
{
    cr_buf_t b = {0};
    cr_buf_append(&b, "", 0);
    const char *p = text;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *last = p;
        for (size_t i = 0; i < len; i++)
            if (p[i] == ':')
                last = p + i + 1;
        cr_buf_printf(&b, "%s%.*s", b.len ? "," : "", (int)(len - (size_t)(last - p)), last);
        p = end ? end + 1 : p + len;
    }
    return b.s;
}

/* ---- the slice this host belongs to ---- */

enum { F_TYPE, F_TOPOLOGY, F_WORKER, F_NAME, F_HOSTS, F_COUNT };

static const struct field_row {
    const char *var;      /* the GKE variable */
    const char *gce_key;  /* the metadata attribute */
    const char *gce_name; /* how a message names where a metadata value came from */
} fields[F_COUNT] = {
    [F_TYPE] = {"TPU_ACCELERATOR_TYPE", "accelerator-type", "GCE metadata accelerator-type"},
    [F_TOPOLOGY] = {"TPU_TOPOLOGY", "tpu-env", "GCE metadata tpu-env TOPOLOGY"},
    [F_WORKER] = {"TPU_WORKER_ID", "agent-worker-number", "GCE metadata agent-worker-number"},
    [F_NAME] = {"TPU_NAME", "instance-id", "GCE metadata instance-id"},
    [F_HOSTS] = {"TPU_WORKER_HOSTNAMES", "worker-network-endpoints",
                 "GCE metadata worker-network-endpoints"},
};

typedef struct slice_src {
    char *val[F_COUNT];
    const char *src[F_COUNT]; /* the variable or metadata key it came from */
} slice_src_t;

static void slice_src_fini(slice_src_t *s)
{
    for (int i = 0; i < F_COUNT; i++)
        CR_FREE(s->val[i]);
}

/* GKE's variables; on a GCE VM without them, the metadata server. */
static void slice_src_read(const cr_hw_env_t *env, cr_node_t *node, slice_src_t *s)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < F_COUNT; i++) {
        const char *v = cr_hw_getenv(env, fields[i].var);
        if (v && *v) {
            s->val[i] = cr_strdup(v);
            s->src[i] = fields[i].var;
        }
    }
    if (s->val[F_TYPE])
        return;
    gce_t g;
    gce_init(env, &g);
    if (!g.allowed)
        return;
    for (int i = 0; i < F_COUNT; i++) {
        if (s->val[i])
            continue;
        char *v = gce_get(&g, fields[i].gce_key);
        if (v && i == F_TOPOLOGY) {
            char *t = tpu_env_value(v, "TOPOLOGY");
            free(v);
            v = t;
        } else if (v && i == F_HOSTS) {
            char *h = endpoints_to_hosts(v);
            free(v);
            v = h;
        }
        if (v && *v) {
            s->val[i] = v;
            s->src[i] = fields[i].gce_name;
        } else {
            free(v);
        }
    }
    if (g.dead && !s->val[F_TYPE])
        cr_node_warn(node,
                     "tpu: the GCE metadata server did not answer within %d ms: this host's TPU "
                     "slice is unknown; set TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY, TPU_WORKER_ID and "
                     "TPU_NAME, or CORRAL_GCE_METADATA=off",
                     GCE_BUDGET_MS);
}

/* ---- the chips of this host ---- */

typedef struct chip {
    int order;    /* N of /dev/accelN or of /dev/vfio/N: the host's chip order */
    char pci[20]; /* "" when not known */
} chip_t;

typedef CR_VEC(chip_t) chip_vec_t;

static int cmp_chip(const void *a, const void *b)
{
    const chip_t *x = a, *y = b;
    return (x->order > y->order) - (x->order < y->order);
}

/* N for a name "<prefix>N" (digits only after the prefix), else -1. */
static int name_index(const char *name, const char *prefix)
{
    size_t pl = strlen(prefix);
    int64_t v;
    if (strncmp(name, prefix, pl) != 0 || !name[pl] || name[pl] == '+' || name[pl] == '-' ||
        name[pl] == ' ' || cr_parse_i64(name + pl, 10, &v) != 0 || v < 0 || v > 1000000)
        return -1;
    return (int)v;
}

static bool is_google_pci(const cr_hw_env_t *env, const char *bdf)
{
    char path[256];
    uint64_t vendor;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", bdf);
    return cr_read_u64(env->root, path, 16, &vendor) == 0 && vendor == TPU_PCI_VENDOR;
}

/* /dev/accelN: the PCI function is /sys/class/accel/accelN/device. */
static void find_accel_chips(const cr_hw_env_t *env, chip_vec_t *chips)
{
    char **names;
    size_t n;
    if (cr_list_dir(env->root, "/dev", &names, &n) != 0)
        return;
    for (size_t i = 0; i < n && chips->n < TPU_MAX_CHIPS_PER_HOST; i++) {
        char path[300];
        int idx = name_index(names[i], "accel");
        snprintf(path, sizeof(path), "/dev/%s", names[i]);
        if (idx < 0 || cr_path_is_dir(env->root, path))
            continue;
        char bdf[64] = "";
        snprintf(path, sizeof(path), "/sys/class/accel/%s/device", names[i]);
        if (cr_readlink_base(env->root, path, bdf, sizeof(bdf)) == 0 && !is_google_pci(env, bdf))
            continue; /* another vendor's accel device */
        chip_t *c = CR_VEC_PUSH(chips);
        c->order = idx;
        cr_strlcpy(c->pci, bdf, sizeof(c->pci));
    }
    cr_free_strv(names, n);
}

/* /dev/vfio/N whose IOMMU group holds a Google PCI function. */
static void find_vfio_chips(const cr_hw_env_t *env, chip_vec_t *chips)
{
    char **names;
    size_t n;
    if (cr_list_dir(env->root, "/dev/vfio", &names, &n) != 0)
        return;
    for (size_t i = 0; i < n && chips->n < TPU_MAX_CHIPS_PER_HOST; i++) {
        char path[300];
        int group = name_index(names[i], "");
        snprintf(path, sizeof(path), "/dev/vfio/%s", names[i]);
        if (group < 0 || cr_path_is_dir(env->root, path))
            continue;
        char **devs;
        size_t nd;
        snprintf(path, sizeof(path), "/sys/kernel/iommu_groups/%d/devices", group);
        if (cr_list_dir(env->root, path, &devs, &nd) != 0)
            continue;
        for (size_t k = 0; k < nd; k++) {
            if (!is_google_pci(env, devs[k]))
                continue;
            chip_t *c = CR_VEC_PUSH(chips);
            c->order = group;
            cr_strlcpy(c->pci, devs[k], sizeof(c->pci));
            break;
        }
        cr_free_strv(devs, nd);
    }
    cr_free_strv(names, n);
}

/* A Google PCI function that is a TPU chip rather than, say, the gVNIC:
 * a processing accelerator (class 0x12) or a TPU device id. */
static bool is_tpu_function(const cr_hw_env_t *env, const char *bdf)
{
    char path[300];
    uint64_t v;
    if (!is_google_pci(env, bdf))
        return false;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", bdf);
    if (cr_read_u64(env->root, path, 16, &v) == 0 && (v >> 16) == 0x12)
        return true;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/device", bdf);
    return cr_read_u64(env->root, path, 16, &v) == 0 && v <= 0xffff && tpu_gen_by_pci((uint16_t)v);
}

/* Chips whose /dev/accelN has no class link: the TPU PCI functions in
 * address order, which is the order the driver numbers them in. */
static void fill_missing_pci(const cr_hw_env_t *env, chip_t *chips, size_t n)
{
    bool missing = false;
    for (size_t i = 0; i < n; i++)
        missing |= !chips[i].pci[0];
    char **names;
    size_t nn;
    if (!missing || cr_list_dir(env->root, "/sys/bus/pci/devices", &names, &nn) != 0)
        return;
    size_t next = 0;
    for (size_t k = 0; k < nn && next < n; k++) {
        if (!is_tpu_function(env, names[k]))
            continue;
        if (!chips[next].pci[0])
            cr_strlcpy(chips[next].pci, names[k], sizeof(chips[next].pci));
        next++;
    }
    cr_free_strv(names, nn);
}

/* ---- the slice, validated ---- */

typedef struct slice {
    const tpu_gen_t *gen;
    tpu_pod_type_t pod;
    tpu_topology_t topo;
    char pod_str[32], topo_str[32];
    int worker_id, worker_count, host_chips;
    char **hosts;
    size_t nhosts;
} slice_t;

static void slice_fini(slice_t *s)
{
    cr_free_strv(s->hosts, s->nhosts);
    s->hosts = NULL;
    s->nhosts = 0;
}

/* Splits "a,b,c" into trimmed, non-empty names. */
static void split_hosts(const char *list, char ***out, size_t *n)
{
    CR_VEC(char *) v = {0};
    const char *p = list;
    while (p && *p) {
        const char *end = strchr(p, ',');
        char *h = cr_strndup(p, end ? (size_t)(end - p) : strlen(p));
        cr_strtrim(h);
        if (*h)
            *CR_VEC_PUSH(&v) = h;
        else
            free(h);
        p = end ? end + 1 : NULL;
    }
    *out = v.v;
    *n = v.n;
}

/* Checks what the environment says about the slice against the tables and
 * the chips found. Returns true when the slice is usable; otherwise one
 * warning said why. Host names that disagree are dropped alone. */
static bool slice_check(const slice_src_t *src, const tpu_gen_t *pci_gen, size_t nchips,
                        cr_node_t *node, slice_t *s)
{
    memset(s, 0, sizeof(*s));
    char valid[512];
    const char *type = src->val[F_TYPE], *topo = src->val[F_TOPOLOGY];
    if (!type && !topo)
        return false; /* not part of a described slice: chips only */

    if (topo && tpu_topology_parse(topo, &s->topo) != 0) {
        cr_node_warn(node,
                     "tpu: %s=%s is not a TPU topology: expected AxB or AxBxC such as 4x4 "
                     "or 2x2x2; no slice described",
                     src->src[F_TOPOLOGY], topo);
        return false;
    }
    if (type) {
        int err = tpu_pod_type_parse(type, &s->pod);
        if (err) {
            cr_node_warn(node,
                         "tpu: %s=%s is not a TPU pod type: expected <generation>-<count> "
                         "such as v6e-16 or v5p-16%s; no slice described",
                         src->src[F_TYPE], type,
                         err == CR_EINVAL ? " (the count of a v2/v3/v4/v5p/v7x pod type counts "
                                            "TensorCores, 2 per chip, so it is even)"
                                          : "");
            return false;
        }
        s->gen = s->pod.gen;
    } else {
        /* a topology alone: the generation comes from the chips */
        if (!pci_gen) {
            cr_node_warn(node,
                         "tpu: %s=%s is set but TPU_ACCELERATOR_TYPE is not and the chips' "
                         "generation is unknown; no slice described",
                         src->src[F_TOPOLOGY], topo);
            return false;
        }
        s->gen = pci_gen;
        s->pod.gen = pci_gen;
        s->pod.chips = tpu_topology_chips(&s->topo);
    }
    if (pci_gen && pci_gen != s->gen && pci_gen->pci_device != s->gen->pci_device) {
        cr_node_warn(node,
                     "tpu: %s=%s names a %s slice but this host's chips are %s; no slice "
                     "described",
                     src->src[F_TYPE], type, s->gen->name, pci_gen->name);
        return false;
    }
    if (!topo && tpu_topology_for_chips(s->gen, s->pod.chips, &s->topo) != 0) {
        tpu_topology_nearest(s->gen, s->pod.chips, valid, sizeof(valid));
        cr_node_warn(node,
                     "tpu: %s=%s has %d chips, which no %s slice shape has (nearest: %s); "
                     "no slice described",
                     src->src[F_TYPE], type, s->pod.chips, s->gen->name, valid);
        return false;
    }
    tpu_topology_format(&s->topo, s->topo_str, sizeof(s->topo_str));
    if (!tpu_topology_is_valid(s->gen, &s->topo)) {
        tpu_topology_nearest(s->gen, tpu_topology_chips(&s->topo), valid, sizeof(valid));
        cr_node_warn(node,
                     "tpu: %s=%s is not a %s slice shape Google offers (nearest: %s); no slice "
                     "described",
                     topo ? src->src[F_TOPOLOGY] : "topology", s->topo_str, s->gen->name, valid);
        return false;
    }
    if (tpu_topology_chips(&s->topo) != s->pod.chips) {
        cr_node_warn(node,
                     "tpu: %s=%s has %d chips but %s=%s has %d: expected the same number; "
                     "no slice described",
                     src->src[F_TOPOLOGY], s->topo_str, tpu_topology_chips(&s->topo),
                     src->src[F_TYPE], type, s->pod.chips);
        return false;
    }
    tpu_pod_type_format(s->gen, s->pod.chips, s->pod_str, sizeof(s->pod_str));
    tpu_topology_t host;
    if (tpu_host_bounds(s->gen, &s->topo, (int)nchips, &host) != 0) {
        /* the host sizes the slice has: 4-chip blocks, or one host of all */
        char sizes[64] = "";
        int all = tpu_topology_chips(&s->topo);
        tpu_topology_t h;
        if (all > 4 && tpu_host_bounds(s->gen, &s->topo, 4, &h) == 0)
            snprintf(sizes, sizeof(sizes), "4");
        if (tpu_host_bounds(s->gen, &s->topo, all, &h) == 0)
            snprintf(sizes + strlen(sizes), sizeof(sizes) - strlen(sizes), "%s%d%s",
                     sizes[0] ? " (one of several hosts) or " : "", all,
                     sizes[0] ? " (the only host)" : "");
        cr_node_warn(node,
                     "tpu: this host has %zu TPU chips but a host of a %s slice (%s) has %s; "
                     "no slice described",
                     nchips, s->pod_str, s->topo_str, sizes[0] ? sizes : "4");
        return false;
    }
    s->host_chips = (int)nchips;
    s->worker_count = tpu_worker_count(s->gen, &s->topo, s->host_chips);

    const char *wid = src->val[F_WORKER];
    int64_t w = 0;
    if (!wid && s->worker_count > 1) {
        cr_node_warn(node,
                     "tpu: TPU_WORKER_ID is not set: expected this host's index (0 to %d) in "
                     "the %d-host slice %s; no slice described",
                     s->worker_count - 1, s->worker_count, s->topo_str);
        return false;
    }
    if (wid && (cr_parse_i64(wid, 10, &w) != 0 || w < 0 || w >= s->worker_count)) {
        cr_node_warn(node,
                     "tpu: %s=%s: expected an integer from 0 to %d (a %s slice has %d "
                     "hosts); no slice described",
                     src->src[F_WORKER], wid, s->worker_count - 1, s->pod_str, s->worker_count);
        return false;
    }
    s->worker_id = (int)w;

    if (src->val[F_HOSTS]) {
        split_hosts(src->val[F_HOSTS], &s->hosts, &s->nhosts);
        if ((int)s->nhosts != s->worker_count) {
            cr_node_warn(node,
                         "tpu: %s has %zu host names but a %s slice has %d hosts: expected "
                         "one name per host; host names left out",
                         src->src[F_HOSTS], s->nhosts, s->pod_str, s->worker_count);
            slice_fini(s);
        }
    }
    if (!src->val[F_NAME] && s->worker_count > 1)
        cr_node_warn(node,
                     "tpu: TPU_NAME is not set: the %d hosts of this %s slice cannot be "
                     "told apart from another slice's; set TPU_NAME",
                     s->worker_count, s->pod_str);
    return true;
}

static int probe(const cr_hw_env_t *env, cr_node_t *node)
{
    chip_vec_t chips = {0};
    find_accel_chips(env, &chips);
    if (chips.n == 0)
        find_vfio_chips(env, &chips);
    if (chips.n == 0)
        return 0;
    qsort(chips.v, chips.n, sizeof(chip_t), cmp_chip);
    fill_missing_pci(env, chips.v, chips.n);

    const tpu_gen_t *pci_gen = NULL;
    size_t first = node->devices.n;
    for (size_t i = 0; i < chips.n; i++) {
        const chip_t *c = &chips.v[i];
        uint64_t vendor = 0, device = 0;
        int64_t numa = -1;
        char path[300];
        if (c->pci[0]) {
            snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", c->pci);
            cr_read_u64(env->root, path, 16, &vendor);
            snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/device", c->pci);
            if (cr_read_u64(env->root, path, 16, &device) != 0 || device > 0xffff) {
                cr_node_warn(node,
                             "tpu: %s%s: expected a PCI device id such as 0x006f; the "
                             "chip's generation comes from the slice instead",
                             env->root, path);
                device = 0;
            }
            snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", c->pci);
            if (cr_read_i64(env->root, path, 10, &numa) != 0)
                numa = -1;
        }
        const tpu_gen_t *g = device ? tpu_gen_by_pci((uint16_t)device) : NULL;
        if (g && !pci_gen)
            pci_gen = g;
        cr_device_t *d = cr_node_add_device(node);
        cr_strlcpy(d->backend, "tpu", sizeof(d->backend));
        cr_strlcpy(d->vendor, "Google", sizeof(d->vendor));
        cr_strlcpy(d->resource, "TPU", sizeof(d->resource));
        cr_strlcpy(d->pci, c->pci, sizeof(d->pci));
        d->pci_vendor = (uint16_t)vendor;
        d->pci_device = (uint16_t)device;
        d->numa = numa >= 0 ? (int)numa : -1;
        d->vendor_index = (int)i;
        snprintf(d->isolation_id, sizeof(d->isolation_id), "%zu", i);
        d->health = CR_HEALTH_OK;
        const char *sku = device ? cr_accel_sku_by_pci((uint16_t)vendor, (uint16_t)device) : NULL;
        if (sku)
            cr_strlcpy(d->sku, sku, sizeof(d->sku));
        if (g) {
            if (!sku)
                cr_strlcpy(d->sku, g->sku, sizeof(d->sku));
            snprintf(d->product, sizeof(d->product), "TPU %s", g->name);
            d->memory = (uint64_t)g->hbm_gib << 30;
            d->compute_units = g->cores_per_chip;
        }
    }

    slice_src_t src;
    slice_src_read(env, node, &src);
    slice_t s;
    bool ok = slice_check(&src, pci_gen, chips.n, node, &s);
    if (ok) {
        for (size_t i = 0; i < chips.n; i++) {
            cr_device_t *d = &node->devices.v[first + i];
            if (!d->sku[0] || !pci_gen) {
                /* the chip's PCI id said nothing: the slice names the generation */
                cr_strlcpy(d->sku, s.gen->sku, sizeof(d->sku));
                snprintf(d->product, sizeof(d->product), "TPU %s", s.gen->name);
                d->memory = (uint64_t)s.gen->hbm_gib << 30;
                d->compute_units = s.gen->cores_per_chip;
            }
            tpu_chip_coords(s.gen, &s.topo, s.host_chips, s.worker_id, (int)i, d->coords);
            d->ncoords = s.topo.ndims;
        }
        for (size_t i = 0; i < chips.n; i++)
            for (size_t k = i + 1; k < chips.n; k++)
                if (tpu_coords_adjacent(node->devices.v[first + i].coords,
                                        node->devices.v[first + k].coords))
                    cr_node_add_link(node, (int)(first + i), (int)(first + k), CR_LINK_ICI, 1, 0);
        cr_domain_t *dom =
            cr_node_add_domain(node, "tpu-slice", src.val[F_NAME] ? src.val[F_NAME] : "");
        cr_strlcpy(dom->accelerator_type, s.pod_str, sizeof(dom->accelerator_type));
        cr_strlcpy(dom->topology, s.topo_str, sizeof(dom->topology));
        dom->worker_id = s.worker_id;
        dom->worker_count = s.worker_count;
        for (size_t i = 0; i < s.nhosts; i++)
            cr_domain_add_host(dom, s.hosts[i]);
        for (size_t i = 0; i < chips.n; i++)
            cr_domain_add_member(dom, (int)(first + i));
        char buf[32];
        if (src.val[F_NAME])
            cr_node_set_label(node, "corral.io/tpu-slice-name", src.val[F_NAME]);
        snprintf(buf, sizeof(buf), "%d", s.worker_id);
        cr_node_set_label(node, "corral.io/tpu-slice-worker-id", buf);
        cr_node_set_label(node, "corral.io/tpu-slice-topology", s.topo_str);
        cr_node_set_label(node, "corral.io/tpu-slice-pod-type", s.pod_str);
    }
    slice_fini(&s);
    slice_src_fini(&src);
    CR_VEC_FREE(&chips);
    return 0;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Uses only the node description, so that it works the same for a
 * simulated TPU host. */
static int isolate(const cr_hw_env_t *env, const cr_node_t *node, const int *devs, size_t ndevs,
                   cr_envlist_t *out)
{
    CR_UNUSED(env);
    size_t nhost = 0;
    for (size_t i = 0; i < node->devices.n; i++)
        nhost += strcmp(node->devices.v[i].backend, "tpu") == 0;
    if (ndevs == nhost)
        return 0; /* the whole host: libtpu's defaults are right */
    const struct bounds_row *b = NULL;
    for (size_t i = 0; i < CR_ARRAY_SIZE(bounds_rows); i++)
        if (bounds_rows[i].chips == ndevs)
            b = &bounds_rows[i];
    if (!b && ndevs > 0)
        return CR_EINVAL; /* libtpu runs on 1, 2 or 4 chips of a host, or all of them */
    int *sorted = cr_calloc(ndevs ? ndevs : 1, sizeof(int));
    memcpy(sorted, devs, ndevs * sizeof(int));
    qsort(sorted, ndevs, sizeof(int), cmp_int);
    cr_buf_t list = {0};
    cr_buf_append(&list, "", 0);
    for (size_t i = 0; i < ndevs; i++)
        cr_buf_printf(&list, "%s%s", i ? "," : "", node->devices.v[sorted[i]].isolation_id);
    int err = cr_envlist_set(out, "TPU_VISIBLE_CHIPS", list.s);
    if (!err && b) {
        err = cr_envlist_set(out, "TPU_CHIPS_PER_PROCESS_BOUNDS", b->chips_bounds);
        err = err ? err : cr_envlist_set(out, "TPU_PROCESS_BOUNDS", b->process_bounds);
        err = err ? err : cr_envlist_set(out, "TPU_CHIPS_PER_HOST_BOUNDS", b->chips_bounds);
        err = err ? err : cr_envlist_set(out, "TPU_HOST_BOUNDS", b->process_bounds);
    }
    cr_buf_free(&list);
    free(sorted);
    return err;
}

const cr_accel_component_t hw_backend_tpu = {
    .abi_version = CR_ACCEL_ABI_VERSION,
    .name = "tpu",
    .resource = "TPU",
    .isolation_vars = vars,
    .priority = 50,
    .probe = probe,
    .isolate = isolate,
};
