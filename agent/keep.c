/* Retention of a joined agent's own output files (docs/workers.md "Output
 * files"): a remote agent writes each worker's output into its logs/ and
 * forwards it to the head, which keeps its copy and removes it with the
 * job (head/retention.c). The agent's files of a finished worker are kept
 * as the head keeps finished jobs (--keep-finished-jobs,
 * --keep-finished-for, the same defaults), counted in workers: the files
 * of the newest `keep` finished workers, each for `keep_ms` after it
 * ended; the rest are removed. They are what is left of output the head
 * never received (output_lost), so they stay as long as the head keeps
 * the job's record. Files left by an earlier agent process are found at
 * start, aged by their modification time. A worker running again (a
 * restart on this node appends to the same files) is never touched. */
#include "agent/agent.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEEP_EVERY_MS 1000
#define KEEP_BATCH 512 /* workers' files removed per sweep at most: a turn stays short */
/* after a sweep that removed a whole batch (more are over): the next one
 * this soon, so the files kept stay at their bound while workers end
 * faster than a batch a second, as the head's retention does */
#define KEEP_BEHIND_MS 100

typedef struct kept {
    char *worker_id;
    int64_t ended_ms; /* wall clock */
} kept_t;

/* The ids in the vector, for agent_keep_ended's look for an earlier end of
 * the same worker: an open-addressed table of pointers to the vector's
 * strings (linear probing, deletion by backward shift), at most half
 * full. Without it that look compared the id with every one kept: 50 us
 * a worker's end at the default 10,000. */
typedef struct idset {
    const char **slot;
    size_t cap, n; /* cap: 0 or a power of two */
} idset_t;

struct agent_keep {
    uv_timer_t timer;
    const agent_t *const *agent;
    char *logs;
    uint32_t keep;
    int64_t keep_ms;
    CR_VEC(kept_t) v; /* oldest end first */
    idset_t ids;      /* v's worker ids */
    bool behind;      /* the last sweep dropped a whole batch */
};

/* The slot holding id, or the free one where it would go (cap > 0). */
static size_t idset_at(const idset_t *s, const char *id)
{
    size_t i = (size_t)cr_hash_str(id) & (s->cap - 1);
    while (s->slot[i] && strcmp(s->slot[i], id) != 0)
        i = (i + 1) & (s->cap - 1);
    return i;
}

static bool idset_has(const idset_t *s, const char *id)
{
    return s->cap && s->slot[idset_at(s, id)];
}

/* id: a string the vector owns, which stays put while it is there */
static void idset_add(idset_t *s, const char *id)
{
    if (2 * (s->n + 1) > s->cap) {
        idset_t g = {.cap = s->cap ? 2 * s->cap : 64, .n = s->n};
        g.slot = cr_calloc(g.cap, sizeof(*g.slot));
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i])
                g.slot[idset_at(&g, s->slot[i])] = s->slot[i];
        free(s->slot);
        *s = g;
    }
    size_t i = idset_at(s, id);
    if (!s->slot[i]) {
        s->slot[i] = id;
        s->n++;
    }
}

static void idset_del(idset_t *s, const char *id)
{
    if (!s->cap)
        return;
    size_t i = idset_at(s, id), mask = s->cap - 1;
    if (!s->slot[i])
        return;
    s->slot[i] = NULL;
    s->n--;
    /* the entries after the hole in its run move back into it unless
     * their home slot lies cyclically in (hole, their slot] */
    for (size_t j = (i + 1) & mask; s->slot[j]; j = (j + 1) & mask) {
        size_t h = (size_t)cr_hash_str(s->slot[j]) & mask;
        if (i <= j ? (h > i && h <= j) : (h > i || h <= j))
            continue;
        s->slot[i] = s->slot[j];
        s->slot[j] = NULL;
        i = j;
    }
}

static void on_closed(uv_handle_t *h)
{
    agent_keep_t *k = h->data;
    for (size_t i = 0; i < k->v.n; i++)
        free(k->v.v[i].worker_id);
    CR_VEC_FREE(&k->v);
    free(k->ids.slot);
    free(k->logs);
    free(k);
}

/* Removes <logs>/<worker_id>.out and .err: files of this directory by
 * name (the directory is the agent's own, checked private at start;
 * unlinkat does not follow a link). */
static void remove_files(const agent_keep_t *k, int dfd, const char *worker_id)
{
    static const char *const ext[] = {"out", "err"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(ext); i++) {
        char *name = cr_asprintf("%s.%s", worker_id, ext[i]);
        if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
            cr_warn("output retention: %s/%s: %s", k->logs, name, strerror(errno));
        free(name);
    }
}

static bool running(const agent_keep_t *k, const char *worker_id)
{
    return *k->agent && agent_log_path(*k->agent, worker_id, 0);
}

size_t agent_keep_sweep(agent_keep_t *k, int64_t now_ms)
{
    size_t over = k->v.n > k->keep ? k->v.n - k->keep : 0, drop = 0, gone = 0;
    /* the oldest end first: those over the count, then those too old */
    while (drop < k->v.n && drop < KEEP_BATCH &&
           (drop < over || now_ms - k->v.v[drop].ended_ms > k->keep_ms))
        drop++;
    k->behind = drop == KEEP_BATCH;
    if (!drop)
        return 0;
    int dfd = open(k->logs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    for (size_t i = 0; i < drop; i++) {
        if (dfd >= 0 && !running(k, k->v.v[i].worker_id)) {
            remove_files(k, dfd, k->v.v[i].worker_id);
            gone++;
        }
        idset_del(&k->ids, k->v.v[i].worker_id);
        free(k->v.v[i].worker_id);
    }
    if (dfd >= 0)
        close(dfd);
    else
        cr_warn("output retention: %s: %s", k->logs, strerror(errno));
    memmove(k->v.v, k->v.v + drop, (k->v.n - drop) * sizeof(*k->v.v));
    k->v.n -= drop;
    if (gone)
        cr_info("output retention: the files of %zu finished worker(s) removed (keeping %u, each "
                "for %lld s)",
                gone, k->keep, (long long)(k->keep_ms / 1000));
    return gone;
}

bool agent_keep_behind(const agent_keep_t *k)
{
    return k->behind;
}

static void on_timer(uv_timer_t *t)
{
    agent_keep_t *k = t->data;
    agent_keep_sweep(k, cr_wall_ms());
    if (k->behind)
        uv_timer_start(t, on_timer, KEEP_BEHIND_MS, KEEP_EVERY_MS);
}

static void forget(agent_keep_t *k, const char *worker_id)
{
    if (!idset_has(&k->ids, worker_id))
        return; /* the common case: its first end */
    for (size_t i = 0; i < k->v.n; i++)
        if (strcmp(k->v.v[i].worker_id, worker_id) == 0) {
            idset_del(&k->ids, k->v.v[i].worker_id);
            free(k->v.v[i].worker_id);
            memmove(k->v.v + i, k->v.v + i + 1, (k->v.n - i - 1) * sizeof(*k->v.v));
            k->v.n--;
            return;
        }
}

void agent_keep_ended(agent_keep_t *k, const char *worker_id, int64_t ended_ms)
{
    if (!k || !worker_id || !worker_id[0] || strchr(worker_id, '/'))
        return;
    forget(k, worker_id); /* an earlier end of the same worker: this one counts */
    size_t at = k->v.n;   /* ends come in order, almost: keep the vector sorted */
    while (at > 0 && k->v.v[at - 1].ended_ms > ended_ms)
        at--;
    CR_VEC_PUSH(&k->v);
    memmove(k->v.v + at + 1, k->v.v + at, (k->v.n - 1 - at) * sizeof(*k->v.v));
    k->v.v[at] = (kept_t){.worker_id = cr_strdup(worker_id), .ended_ms = ended_ms};
    idset_add(&k->ids, k->v.v[at].worker_id);
}

static int by_end(const void *a, const void *b)
{
    const kept_t *x = a, *y = b;
    return x->ended_ms < y->ended_ms ? -1 : x->ended_ms > y->ended_ms;
}

static int by_id(const void *a, const void *b)
{
    return strcmp(((const kept_t *)a)->worker_id, ((const kept_t *)b)->worker_id);
}

/* The output files an earlier agent process left in logs/: regular files
 * of ours named <worker>.out or .err, each worker aged by its newer file. */
static void scan(agent_keep_t *k)
{
    DIR *d = cr_opendir_nofollow(k->logs);
    if (!d)
        return;
    int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || (strcmp(e->d_name + n - 4, ".out") && strcmp(e->d_name + n - 4, ".err")))
            continue;
        struct stat sb;
        if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode) ||
            sb.st_uid != geteuid())
            continue;
        int64_t ms = (int64_t)sb.st_mtim.tv_sec * 1000 + sb.st_mtim.tv_nsec / 1000000;
        *CR_VEC_PUSH(&k->v) = (kept_t){.worker_id = cr_strndup(e->d_name, n - 4), .ended_ms = ms};
    }
    closedir(d);
    if (!k->v.n)
        return;
    /* one entry per worker (its .out and .err), the newer time */
    qsort(k->v.v, k->v.n, sizeof(*k->v.v), by_id);
    size_t w = 0;
    for (size_t i = 0; i < k->v.n; i++) {
        if (w && strcmp(k->v.v[w - 1].worker_id, k->v.v[i].worker_id) == 0) {
            if (k->v.v[i].ended_ms > k->v.v[w - 1].ended_ms)
                k->v.v[w - 1].ended_ms = k->v.v[i].ended_ms;
            free(k->v.v[i].worker_id);
            continue;
        }
        k->v.v[w++] = k->v.v[i];
    }
    k->v.n = w;
    qsort(k->v.v, k->v.n, sizeof(*k->v.v), by_end);
    for (size_t i = 0; i < k->v.n; i++)
        idset_add(&k->ids, k->v.v[i].worker_id);
}

agent_keep_t *agent_keep_new(uv_loop_t *loop, const char *logs, const agent_t *const *agent,
                             uint32_t keep, int64_t keep_ms)
{
    agent_keep_t *k = cr_calloc(1, sizeof(*k));
    k->logs = cr_strdup(logs);
    k->agent = agent;
    k->keep = keep ? keep : AGENT_KEEP_FINISHED_DEFAULT;
    k->keep_ms = keep_ms > 0 ? keep_ms : AGENT_KEEP_FINISHED_MS_DEFAULT;
    scan(k);
    uv_timer_init(loop, &k->timer);
    k->timer.data = k;
    uv_timer_start(&k->timer, on_timer, KEEP_EVERY_MS, KEEP_EVERY_MS);
    return k;
}

void agent_keep_free(agent_keep_t *k)
{
    if (k && !uv_is_closing((uv_handle_t *)&k->timer))
        uv_close((uv_handle_t *)&k->timer, on_closed);
}
