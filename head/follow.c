/* Following job output and events for clients (head/follow.h).
 *
 * Why reading the files rather than a pipe from each worker: the workers
 * write straight into their log files (agent/launch.c), which survive a
 * head restart and serve JobLogs without follow, and a follower that
 * reads slowly never slows a worker: it falls behind in the file, not in
 * the worker's pipe.
 *
 * The pace is the client's (docs/runtime.md "Following output and
 * events"): a pump sends a follower what its files gained while its
 * connection's write queue is under QUEUE_HIGH, and the connection's
 * drain (every queued byte written: follow_conn_drained) pumps it again
 * at once. So a follower that reads at pipe speed gets pipe speed, one
 * that stops reading holds at most QUEUE_HIGH bytes of the head's memory,
 * and nothing is read from a file for it meanwhile. The timer (every
 * FOLLOW_PERIOD_MS, running only while someone follows) is left for
 * tailing: a follower that is caught up looks again for what was
 * written since, one fstat per followed file.
 *
 * To a client that takes raw log chunks (docs/protocol.md "Raw log
 * chunks"), a chunk is its header frame and the file's bytes read right
 * after it into the write buffer: no protobuf copy here or at the client. */
#include "head/follow.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK (1024 * 1024)   /* bytes per LogChunk */
#define TAIL_MAX (8u << 20)   /* a first look starts at most this far from the end */
#define QUEUE_HIGH (4u << 20) /* bytes queued to a follower before it waits for the drain */
#define SOCK_BUF (2 << 20)    /* the send buffer asked for a follower's socket */

typedef struct fstream {
    char *path;       /* the file followed now; NULL none yet */
    uint64_t offset;  /* bytes of it sent */
    bool seen;        /* a first file was looked at (offset applies to it only) */
    uint64_t skipped; /* holes passed and not told yet (no chunk followed) */
} fstream_t;

typedef struct follower {
    struct follower *next;
    cr_conn_t *conn;
    uint64_t req_id;
    char *job_id;   /* NULL: an events follower */
    int worker;     /* -1 every worker */
    uint64_t start; /* the requested offset, for each first file */
    bool whole;     /* from byte 0 however long a first file is */
    bool with_job;  /* the eof carries the JobInfo */
    int n;          /* workers known */
    int rr;         /* the worker read first at the next pump */
    fstream_t (*fs)[2];
    uint64_t seq; /* events: the last one sent */
    bool dead;    /* ended; freed by the next sweep */
} follower_t;

static struct {
    uv_loop_t *loop;
    uv_timer_t *timer;
    uv_check_t *soon; /* follow_pump_soon: once, after this turn's reads */
    uv_idle_t *again; /* pump_logs: a follower with more to send and room */
    follow_ops_t ops;
    void *arg;
    follower_t *list;
    size_t count;
    int pumping;        /* follow_pump on the stack: frees wait for its sweep */
    uint64_t relayed;   /* bytes follow_relay sent (follow_relayed) */
    uint8_t buf[CHUNK]; /* one loop, one read at a time */
} F;

static void timer_closed(uv_handle_t *h)
{
    free(h);
}

static void on_timer(uv_timer_t *t)
{
    follow_pump();
}

static void on_soon(uv_check_t *h)
{
    uv_check_stop(h);
    follow_pump();
}

static void on_again(uv_idle_t *h)
{
    uv_idle_stop(h);
    follow_pump();
}

void follow_pump_soon(void)
{
    if (F.soon && F.list)
        uv_check_start(F.soon, on_soon);
}

void follow_init(uv_loop_t *loop, const follow_ops_t *ops, void *arg)
{
    memset(&F, 0, sizeof(F));
    F.loop = loop;
    F.ops = *ops;
    F.arg = arg;
    F.timer = cr_malloc(sizeof(*F.timer));
    uv_timer_init(loop, F.timer);
    F.soon = cr_malloc(sizeof(*F.soon));
    uv_check_init(loop, F.soon);
    F.again = cr_malloc(sizeof(*F.again));
    uv_idle_init(loop, F.again);
}

static void follower_free(follower_t *f)
{
    for (int i = 0; i < f->n; i++) {
        free(f->fs[i][0].path);
        free(f->fs[i][1].path);
    }
    free(f->fs);
    free(f->job_id);
    free(f);
}

/* Frees the followers that ended, stops the timer when none is left. */
static void sweep(void)
{
    if (F.pumping)
        return;
    for (follower_t **p = &F.list; *p;) {
        follower_t *f = *p;
        if (f->dead) {
            *p = f->next;
            follower_free(f);
            F.count--;
        } else {
            p = &f->next;
        }
    }
    if (!F.list && F.timer)
        uv_timer_stop(F.timer);
}

void follow_fini(void)
{
    if (F.list && !F.pumping)
        follow_pump(); /* what the last workers wrote, and the eofs of jobs now final */
    for (follower_t *f = F.list; f; f = f->next)
        f->dead = true;
    F.pumping = 0;
    sweep();
    if (F.timer) {
        uv_timer_stop(F.timer);
        uv_close((uv_handle_t *)F.timer, timer_closed);
        F.timer = NULL;
    }
    if (F.soon) {
        uv_check_stop(F.soon);
        uv_close((uv_handle_t *)F.soon, timer_closed);
        F.soon = NULL;
    }
    if (F.again) {
        uv_idle_stop(F.again);
        uv_close((uv_handle_t *)F.again, timer_closed);
        F.again = NULL;
    }
}

size_t follow_count(void)
{
    return F.count;
}

/* output: a LogChunk with data (cr_conn_send_output: not held behind
 * the turn's commit). */
static bool send_env_as(follower_t *f, Corral__Envelope *a, bool output)
{
    a->reply_to = f->req_id;
    int err = output ? cr_conn_send_output(f->conn, a) : cr_conn_send(f->conn, a);
    if (err < 0) {
        cr_warn("follow: answer to %s: %s; no longer following", cr_conn_peer(f->conn),
                cr_strerror(err));
        f->dead = true;
        return false;
    }
    return true;
}

static bool send_env(follower_t *f, Corral__Envelope *a)
{
    return send_env_as(f, a, false);
}

static bool send_chunk(follower_t *f, int worker, int stream, uint64_t off, const uint8_t *data,
                       size_t len, bool eof, uint64_t dropped)
{
    Corral__LogChunk ch = CORRAL__LOG_CHUNK__INIT;
    ch.job_id = f->job_id;
    ch.worker_index = (uint32_t)(worker < 0 ? 0 : worker);
    ch.stream = stream ? CORRAL__LOG_STREAM__LOG_STDERR : CORRAL__LOG_STREAM__LOG_STDOUT;
    ch.offset = off;
    ch.data.data = (uint8_t *)data;
    ch.data.len = len;
    ch.eof = eof;
    ch.dropped = dropped;
    ch.worker_log_max = dropped && F.ops.log_max ? F.ops.log_max(F.arg) : 0;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
    a.log_chunk = &ch;
    return send_env_as(f, &a, len > 0);
}

static void send_eof_with(void *ctx, const Corral__JobInfo *info)
{
    follower_t *f = ctx;
    Corral__LogChunk ch = CORRAL__LOG_CHUNK__INIT;
    ch.job_id = f->job_id;
    ch.worker_index = (uint32_t)(f->worker < 0 ? 0 : f->worker);
    ch.eof = true;
    /* the job without its workers' environment: the caller's whole one
     * when corral run submitted it (about 2 KiB, most of the answer),
     * which a follower that sent it has and none reads back */
    Corral__JobInfo brief;
    Corral__JobSpec spec;
    Corral__WorkerSpec worker;
    ch.job = (Corral__JobInfo *)cr_msg_job_info_brief(info, &brief, &spec, &worker);
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
    a.log_chunk = &ch;
    a.reply_to = f->req_id;
    int err = cr_conn_send(f->conn, &a);
    if (err == CR_E2BIG || err == CR_EINVAL)
        return; /* the job does not fit in a frame (or did not validate): the
                 * plain eof follows, and the JobStatus the client then asks
                 * gets the reason */
    if (err < 0)
        cr_warn("follow: answer to %s: %s; no longer following", cr_conn_peer(f->conn),
                cr_strerror(err));
    f->dead = true;
}

/* The follow's last answer: the job with it when asked and still known. */
static void send_eof(follower_t *f)
{
    if (f->with_job && F.ops.job_info)
        F.ops.job_info(F.arg, f->job_id, send_eof_with, f);
    if (!f->dead)
        send_chunk(f, f->worker, 0, 0, NULL, 0, true, 0);
    f->dead = true;
}

/* Whether more may be sent to f now. A connection that takes raw chunks
 * by sendfile (cr_conn_set_sendfile, set for every follower) gets them so
 * only while nothing is queued to it: once its socket is full, the rest
 * of a chunk is read into the queue, and the next ones would be too,
 * copied where the drain would let them go by reference. Others take
 * chunks while the queue is under QUEUE_HIGH. */
static bool has_room(follower_t *f)
{
    size_t queued = cr_conn_queued(f->conn);
    return cr_conn_can_sendfile(f->conn) ? queued == 0 : queued < QUEUE_HIGH;
}

/* Whether the bytes from off of a file of size bounded to keep may go
 * raw: they are read into the write buffer with no check after, so a
 * bound must not punch them meanwhile. It punches only what is older than
 * the last keep bytes; within the newest half of those, the worker would
 * have to write keep / 2 (32 MiB by default) during one chunk's read.
 * Further behind, the read-and-check way (cr_output_punched) sends them. */
static bool raw_ok(follower_t *f, uint64_t keep, uint64_t size, uint64_t off)
{
    return cr_conn_can_send_raw(f->conn) && (!keep || size - off <= keep / 2);
}

/* The header of a raw chunk to f, the answer to its request; its bytes
 * go after it (cr_conn_send_log_file from a file, cr_conn_send_log_bytes
 * from memory). */
static void raw_chunk_header(follower_t *f, int worker, int stream, uint64_t off, uint64_t dropped,
                             Corral__LogChunk *ch, Corral__Envelope *a)
{
    const Corral__LogChunk ch0 = CORRAL__LOG_CHUNK__INIT;
    const Corral__Envelope a0 = CORRAL__ENVELOPE__INIT;
    *ch = ch0;
    ch->job_id = f->job_id;
    ch->worker_index = (uint32_t)(worker < 0 ? 0 : worker);
    ch->stream = stream ? CORRAL__LOG_STREAM__LOG_STDERR : CORRAL__LOG_STREAM__LOG_STDOUT;
    ch->offset = off;
    ch->dropped = dropped;
    ch->worker_log_max = dropped && F.ops.log_max ? F.ops.log_max(F.arg) : 0;
    *a = a0;
    a->body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
    a->log_chunk = ch;
    a->reply_to = f->req_id;
}

/* After a raw chunk's send: false, the follower ended (said), when it
 * failed. */
static bool raw_chunk_sent(follower_t *f, int err)
{
    if (err < 0) {
        cr_warn("follow: answer to %s: %s; no longer following", cr_conn_peer(f->conn),
                cr_strerror(err));
        f->dead = true;
        return false;
    }
    return true;
}

/* One chunk the raw way (cr_conn_send_log_file); false when the follower
 * ended. */
static bool send_raw_chunk(follower_t *f, int worker, int stream, int fd, uint64_t off, size_t len,
                           uint64_t dropped)
{
    Corral__LogChunk ch;
    Corral__Envelope a;
    raw_chunk_header(f, worker, stream, off, dropped, &ch, &a);
    size_t copied;
    return raw_chunk_sent(f, cr_conn_send_log_file(f->conn, &a, fd, off, len, true, &copied));
}

/* Sends what s->path gained since s->offset, up to *budget bytes.
 * Returns false when the follower ended (a send failed); *left says
 * whether bytes are left in the file. */
static bool read_file(follower_t *f, int worker, int stream, bool first, size_t *budget, bool *left)
{
    fstream_t *s = &f->fs[worker][stream];
    *left = false;
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return true; /* not created yet */
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return true;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (first) {
        s->seen = true;
        s->offset = f->start;
        if (f->start == 0 && !f->whole && size > TAIL_MAX)
            s->offset = size - TAIL_MAX;
    }
    if (s->offset > size) /* truncated (or an offset past the end): what is there */
        s->offset = first ? size : 0;
    bool ok = true;
    /* holes are output the bound on worker output dropped (cr_output_bound):
     * a follower behind the part kept goes on from the first data, and its
     * next chunk says how much it skipped (from its start, on a first look) */
    uint64_t keep = F.ops.log_max ? F.ops.log_max(F.arg) : 0, old = cr_output_old(size, keep);
    uint64_t gap = F.ops.gap ? F.ops.gap(F.arg, f->job_id, worker, stream) : 0;
    old = gap > old ? gap : old;
    uint64_t skipped = s->skipped + (first ? cr_output_dropped(fd, s->offset, old) : 0), start, end;
    int retries = 0;
    while (*budget > 0 && s->offset < size) {
        if (!has_room(f)) { /* the socket is full: the drain brings it back */
            *budget = 0;
            break;
        }
        if (!cr_output_next(fd, s->offset, size, old, &start, &end)) {
            skipped += size - s->offset; /* holes to the end: data comes later */
            s->offset = size;
            break;
        }
        skipped += start - s->offset;
        s->offset = start;
        size_t want = CHUNK < *budget ? CHUNK : *budget;
        if (want > end - s->offset)
            want = (size_t)(end - s->offset);
        if (raw_ok(f, keep, size, s->offset)) {
            if (!send_raw_chunk(f, worker, stream, fd, s->offset, want, skipped)) {
                ok = false;
                break;
            }
            skipped = 0;
            s->offset += want;
            *budget -= want;
            continue;
        }
        ssize_t got = pread(fd, F.buf, want, (off_t)s->offset);
        if (got <= 0)
            break;
        if (retries < 8 && cr_output_punched(fd, s->offset, keep) && fstat(fd, &st) == 0) {
            retries++; /* punched while read: what was read may be zeros */
            size = (uint64_t)st.st_size;
            old = cr_output_old(size, keep);
            old = gap > old ? gap : old;
            continue;
        }
        if (!send_chunk(f, worker, stream, s->offset, F.buf, (size_t)got, false, skipped)) {
            ok = false;
            break;
        }
        skipped = 0;
        s->offset += (uint64_t)got;
        *budget -= (size_t)got;
    }
    s->skipped = skipped;
    *left = s->offset < size;
    close(fd);
    return ok;
}

/* Follows one worker's stream whose current file is path (NULL: none
 * now, as between a worker's exit and its restart). A file replaced by a
 * restart's new one is read to its end first: its writer has exited, so
 * its tail is complete. Returns false when the follower ended; sets
 * *more when bytes are left to send. */
static bool pump_file(follower_t *f, int worker, int stream, const char *path, size_t *budget,
                      bool *more)
{
    fstream_t *s = &f->fs[worker][stream];
    bool left = false;
    if (s->path && (!path || strcmp(s->path, path) != 0)) {
        if (!read_file(f, worker, stream, false, budget, &left))
            return false;
        if (left || !path) {
            *more |= left;
            return true;
        }
        free(s->path); /* the old file is sent whole: on to the new one */
        s->path = NULL;
    }
    if (!path)
        return true;
    bool first = !s->seen;
    if (!s->path) {
        s->path = cr_strdup(path);
        s->offset = 0;
    }
    if (!read_file(f, worker, stream, first, budget, &left))
        return false;
    *more |= left;
    return true;
}

/* Sends f what its files gained, as much as its queue has room for; the
 * drain of its connection brings it back for the rest. */
static void pump_logs(follower_t *f)
{
    int n = F.ops.nworkers(F.arg, f->job_id);
    if (n < 0) {
        cr_conn_reply_error(f->conn, f->req_id, CR_ENOENT, "job %s is gone", f->job_id);
        f->dead = true;
        return;
    }
    if (n > f->n) {
        f->fs = cr_realloc(f->fs, (size_t)n * sizeof(*f->fs));
        memset(&f->fs[f->n], 0, (size_t)(n - f->n) * sizeof(*f->fs));
        f->n = n;
    }
    /* asked before reading: a job final now has no writer left, so what
     * is read below is all there will ever be */
    bool final = F.ops.is_final(F.arg, f->job_id);
    size_t queued = cr_conn_queued(f->conn);
    size_t budget = has_room(f) ? QUEUE_HIGH - queued : 0, budget0 = budget;
    bool more = false;
    for (int k = 0; k < n; k++) { /* from the next worker each time: none starves */
        int i = (f->rr + k) % n;
        if (f->worker >= 0 && f->worker != i)
            continue;
        const char *out = NULL, *err = NULL;
        F.ops.paths(F.arg, f->job_id, i, &out, &err);
        if (!pump_file(f, i, 0, out, &budget, &more) || !pump_file(f, i, 1, err, &budget, &more))
            return;
    }
    f->rr = n ? (f->rr + 1) % n : 0;
    if (final && !more)
        send_eof(f);
    /* its budget spent and the socket took it all (by sendfile nothing
     * is queued, so no drain will come): on at the loop's next turn,
     * after what else waits, rather than at the timer */
    if (more && budget < budget0 && has_room(f) && F.again)
        uv_idle_start(F.again, on_again);
}

void follow_relay(const char *job_id, int worker, int stream, const char *path, int fd,
                  uint64_t off, const uint8_t *data, size_t len)
{
    if (!len || worker < 0 || stream < 0 || stream > 1)
        return;
    F.pumping++; /* a follower that ends here is freed by the sweep below */
    for (follower_t *f = F.list; f; f = f->next) {
        if (f->dead || !f->job_id || worker >= f->n || (f->worker >= 0 && f->worker != worker) ||
            strcmp(f->job_id, job_id) != 0)
            continue;
        fstream_t *s = &f->fs[worker][stream];
        /* only a follower caught up on this very file, with no gap to tell:
         * the pump sends anything else, from the file */
        if (!s->seen || !s->path || s->offset != off || s->skipped || strcmp(s->path, path) != 0 ||
            !cr_conn_can_send_raw(f->conn) || !has_room(f))
            continue;
        bool ok;
        if (fd >= 0 && cr_conn_can_sendfile(f->conn)) {
            ok = send_raw_chunk(f, worker, stream, fd, off, len, 0); /* by reference */
        } else {
            Corral__LogChunk ch;
            Corral__Envelope a;
            raw_chunk_header(f, worker, stream, off, 0, &ch, &a);
            size_t copied;
            ok = raw_chunk_sent(f, cr_conn_send_log_bytes(f->conn, &a, data, len, &copied));
        }
        if (!ok)
            continue;
        s->offset += len;
        F.relayed += len;
    }
    F.pumping--;
    sweep();
}

uint64_t follow_relayed(void)
{
    return F.relayed;
}

typedef struct ev_ctx {
    follower_t *f;
} ev_ctx_t;

static void emit_event(void *ctx, const Corral__Event *ev)
{
    follower_t *f = ((ev_ctx_t *)ctx)->f;
    if (f->dead || ev->seq <= f->seq)
        return;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_EVENT;
    a.event = (Corral__Event *)ev;
    if (send_env(f, &a))
        f->seq = ev->seq;
}

static void pump_one(follower_t *f)
{
    if (f->dead || !has_room(f))
        return; /* a slow reader: its drain brings it back */
    if (f->job_id) {
        pump_logs(f);
    } else {
        ev_ctx_t ctx = {f};
        F.ops.events_since(F.arg, f->seq, emit_event, &ctx);
    }
}

void follow_pump(void)
{
    F.pumping++;
    for (follower_t *f = F.list; f; f = f->next)
        pump_one(f);
    F.pumping--;
    sweep();
}

void follow_conn_drained(cr_conn_t *c)
{
    F.pumping++;
    for (follower_t *f = F.list; f; f = f->next)
        if (f->conn == c && f->job_id)
            pump_one(f);
    F.pumping--;
    sweep();
}

static follower_t *add(cr_conn_t *c, uint64_t req_id)
{
    follower_t *f = cr_calloc(1, sizeof(*f));
    f->conn = c;
    f->req_id = req_id;
    f->next = F.list;
    F.list = f;
    F.count++;
    if (F.timer && !uv_is_active((uv_handle_t *)F.timer))
        uv_timer_start(F.timer, on_timer, FOLLOW_PERIOD_MS, FOLLOW_PERIOD_MS);
    return f;
}

int follow_add(cr_conn_t *c, uint64_t req_id, const char *job_id, int worker_index, uint64_t offset,
               bool whole, bool with_job)
{
    if (!F.ops.nworkers || F.ops.nworkers(F.arg, job_id) < 0)
        return CR_ENOENT;
    follower_t *f = add(c, req_id);
    f->job_id = cr_strdup(job_id);
    cr_conn_set_send_buffer(c, SOCK_BUF); /* fewer wakeups of the reader per MiB */
    cr_conn_set_sendfile(c, true);        /* raw chunks by reference (has_room) */
    f->worker = worker_index;
    f->start = offset;
    f->whole = whole;
    f->with_job = with_job;
    F.pumping++;
    pump_logs(f);
    F.pumping--;
    sweep();
    return 0;
}

int follow_events_add(cr_conn_t *c, uint64_t req_id, uint64_t since_seq)
{
    if (!F.ops.events_since)
        return CR_ENOSYS;
    follower_t *f = add(c, req_id);
    f->seq = since_seq;
    return 0;
}

void follow_conn_closed(cr_conn_t *c)
{
    for (follower_t *f = F.list; f; f = f->next)
        if (f->conn == c)
            f->dead = true;
    sweep();
}
