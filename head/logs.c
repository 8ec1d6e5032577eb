/* A job's output (docs/runtime.md "Following output and events"): the
 * JobLogs answer, the output remote agents forward into the head's copy,
 * and the follow ops that let follow.c stream logs of the job table. Part
 * of the jobs module (jobs.h). */
#include "head/jobs.h"
#include "head/follow.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOG_CHUNK (64 * 1024)

#define LOG_MAX (8u << 20) /* the tail of a log file a JobLogs answer carries */

static void send_piece(cr_conn_t *c, const Corral__Envelope *e, const job_t *j, const wk_t *w,
                       Corral__LogStream stream, uint64_t off, const uint8_t *data, size_t len,
                       uint64_t dropped)
{
    Corral__LogChunk ch = CORRAL__LOG_CHUNK__INIT;
    ch.job_id = (char *)j->idstr;
    ch.worker_index = (uint32_t)w->index;
    ch.stream = stream;
    ch.offset = off;
    ch.data.data = (uint8_t *)data;
    ch.data.len = len;
    ch.dropped = dropped;
    ch.worker_log_max = dropped ? D.worker_log_max : 0;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
    a.log_chunk = &ch;
    reply(c, e, &a);
}

/* Sends one log file (its last LOG_MAX bytes) as chunks; the holes the
 * bound on worker output left (cr_output_bound) are skipped, and the
 * first chunk says how much of the file they took (dropped). */
static void send_log(cr_conn_t *c, const Corral__Envelope *e, const job_t *j, const wk_t *w,
                     const char *path, Corral__LogStream stream, uint64_t gap)
{
    if (!path)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return;
    }
    uint64_t size = (uint64_t)sb.st_size, off = size > LOG_MAX ? size - LOG_MAX : 0;
    uint64_t old = cr_output_old(size, D.worker_log_max);
    old = gap > old ? gap : old;
    uint64_t dropped = cr_output_dropped(fd, size, old), start, end;
    uint8_t *buf = cr_malloc(LOG_CHUNK);
    bool told = false;
    int retries = 0;
    while (cr_output_next(fd, off, size, old, &start, &end)) {
        size_t want = end - start < LOG_CHUNK ? (size_t)(end - start) : LOG_CHUNK;
        ssize_t got = pread(fd, buf, want, (off_t)start);
        if (got <= 0)
            break;
        if (retries < 8 && cr_output_punched(fd, start, D.worker_log_max) && fstat(fd, &sb) == 0) {
            retries++; /* punched while read: what was read may be zeros */
            size = (uint64_t)sb.st_size;
            old = cr_output_old(size, D.worker_log_max);
            old = gap > old ? gap : old;
            continue;
        }
        send_piece(c, e, j, w, stream, start, buf, (size_t)got, told ? 0 : dropped);
        told = true;
        off = start + (uint64_t)got;
    }
    if (!told && dropped) /* only holes left in the tail: say so all the same */
        send_piece(c, e, j, w, stream, size, NULL, 0, dropped);
    free(buf);
    close(fd);
}

void req_job_logs(cr_conn_t *c, const Corral__Envelope *e)
{
    const Corral__JobLogs *q = e->job_logs;
    job_t *j = job_find(q->job_id);
    if (!j) {
        cr_conn_reply_error(c, e->id, CR_ENOENT, "no job %s", q->job_id);
        return;
    }
    if (q->worker_index >= j->n) {
        cr_conn_reply_error(c, e->id, CR_EINVAL, "job %s has %d worker(s): no worker %d", j->idstr,
                            j->n, q->worker_index);
        return;
    }
    if (q->follow) { /* daemon/follow.c answers from here on, eof included */
        if (follow_add(c, e->id, j->idstr, q->worker_index, q->offset, q->whole, q->with_job) < 0)
            cr_conn_reply_error(c, e->id, CR_ENOENT, "no job %s", q->job_id);
        return;
    }
    for (int i = 0; i < j->n; i++) {
        if (q->worker_index >= 0 && q->worker_index != i)
            continue;
        send_log(c, e, j, &j->wk[i], j->wk[i].out_path, CORRAL__LOG_STREAM__LOG_STDOUT,
                 j->wk[i].out_gap[0]);
        send_log(c, e, j, &j->wk[i], j->wk[i].err_path, CORRAL__LOG_STREAM__LOG_STDERR,
                 j->wk[i].out_gap[1]);
    }
    Corral__LogChunk end = CORRAL__LOG_CHUNK__INIT;
    end.job_id = j->idstr;
    end.eof = true;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_LOG_CHUNK;
    a.log_chunk = &end;
    reply(c, e, &a);
}

static int fo_nworkers(void *arg, const char *job_id)
{
    const job_t *j = job_find(job_id);
    return j ? j->n : -1;
}

static void fo_paths(void *arg, const char *job_id, int i, const char **out, const char **err)
{
    const job_t *j = job_find(job_id);
    *out = *err = NULL;
    if (j && i >= 0 && i < j->n) {
        *out = j->wk[i].out_path;
        *err = j->wk[i].err_path;
    }
}

static bool fo_is_final(void *arg, const char *job_id)
{
    const job_t *j = job_find(job_id);
    return !j || cr_job_state_is_final(j->state);
}

static size_t fo_events_since(void *arg, uint64_t since_seq,
                              void (*emit)(void *ctx, const Corral__Event *ev), void *ctx)
{
    return events_each_since(since_seq, EVENTS_PUMP_MAX, emit, ctx);
}

static uint64_t fo_log_max(void *arg)
{
    return D.worker_log_max;
}

static uint64_t fo_gap(void *arg, const char *job_id, int i, int stream)
{
    const job_t *j = job_find(job_id);
    return j && i >= 0 && i < j->n ? j->wk[i].out_gap[stream ? 1 : 0] : 0;
}

static void fo_job_info(void *arg, const char *job_id,
                        void (*fn)(void *ctx, const Corral__JobInfo *info), void *ctx)
{
    jobs_info_each(job_id, fn, ctx);
}

const follow_ops_t head_follow_ops = {.nworkers = fo_nworkers,
                                      .job_info = fo_job_info,
                                      .paths = fo_paths,
                                      .is_final = fo_is_final,
                                      .events_since = fo_events_since,
                                      .log_max = fo_log_max,
                                      .gap = fo_gap};

/* The head's copies of remote output being written, kept open: an agent
 * forwards a worker's output in pieces of up to 1 MiB (one per read of
 * its connection and raw chunk), and an open, two fstats and a close per
 * piece were a tenth of the head's system calls for a remote stream. A
 * slot is keyed by the worker and stream and the path it was opened for;
 * end is where the last piece ended, so a piece that follows it needs no
 * fstat to know it leaves no gap. job_free closes a job's slots. */
#define COPY_SLOTS 8

typedef struct copy_slot {
    const wk_t *w;
    int stream;
    const char *path; /* the worker's path string it was opened for */
    int fd;           /* -1 free */
    uint64_t end;
} copy_slot_t;

static copy_slot_t copies[COPY_SLOTS];
static unsigned copy_next; /* the slot taken next when none is free */

static void slot_close(copy_slot_t *s)
{
    if (s->w && s->fd >= 0)
        close(s->fd);
    *s = (copy_slot_t){.fd = -1};
}

void logs_forget_job(const job_t *j)
{
    for (size_t i = 0; i < COPY_SLOTS; i++)
        if (copies[i].w && copies[i].w->job == j)
            slot_close(&copies[i]);
}

/* The open copy of w's stream at path, opened now if no slot has it;
 * NULL when it cannot be opened (said). */
static copy_slot_t *copy_open(const wk_t *w, int stream, const char *path)
{
    copy_slot_t *free_slot = NULL;
    for (size_t i = 0; i < COPY_SLOTS; i++) {
        copy_slot_t *s = &copies[i];
        if (s->w == w && s->stream == stream && s->path == path)
            return s;
        if (s->w == w && s->stream == stream) /* its path changed: a stale slot */
            slot_close(s);
        if (!s->w && !free_slot)
            free_slot = s;
    }
    if (!free_slot) {
        free_slot = &copies[copy_next++ % COPY_SLOTS];
        slot_close(free_slot);
    }
    /* readable too: follow_relay sends from it by sendfile */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        cr_warn("output of %s: %s: %s", w->id, path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    *free_slot = (copy_slot_t){.w = w,
                               .stream = stream,
                               .path = path,
                               .fd = fd,
                               .end = fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : UINT64_MAX};
    return free_slot;
}

/* Output an agent forwards: written at its offset into the head's copy. */
void logs_chunk_msg(node_t *n, const Corral__LogChunk *ch)
{
    job_t *j = job_find(ch->job_id);
    if (!j || ch->worker_index >= (uint32_t)j->n)
        return;
    wk_t *w = &j->wk[ch->worker_index];
    if (w->node != n)
        return;
    char **path = ch->stream == CORRAL__LOG_STREAM__LOG_STDERR ? &w->err_path : &w->out_path;
    if (!*path) {
        *path = cr_asprintf("%s/%s.%s", D.logs, w->id,
                            ch->stream == CORRAL__LOG_STREAM__LOG_STDERR ? "err" : "out");
        db_worker(w);
    }
    int si = ch->stream == CORRAL__LOG_STREAM__LOG_STDERR;
    copy_slot_t *cs = copy_open(w, si, *path);
    if (!cs)
        return;
    int fd = cs->fd;
    /* Output is forwarded in order; a gap is what the agent's own bound
     * dropped before it could send it (ch->dropped), a hole here too. An
     * agent can so grow the file's size at will, never its disk use. */
    struct stat sb;
    if (ch->offset != cs->end && fstat(fd, &sb) == 0 && ch->offset > (uint64_t)sb.st_size &&
        ch->offset > w->out_gap[si])
        w->out_gap[si] = ch->offset;
    ssize_t wrote = pwrite(fd, ch->data.data, ch->data.len, (off_t)ch->offset);
    if (wrote == (ssize_t)ch->data.len) /* in the copy: its caught-up followers get it now */
        follow_relay(j->idstr, w->index, si, *path, fd, ch->offset, ch->data.data, ch->data.len);
    if (wrote < 0) {
        cr_warn("output of %s: %s: %s", w->id, *path, strerror(errno));
        cs->end = UINT64_MAX; /* not known: the next piece asks */
    } else if (cs->end == UINT64_MAX) {
        cs->end = fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : UINT64_MAX;
    } else if (ch->offset + ch->data.len > cs->end) {
        cs->end = ch->offset + ch->data.len;
    }
    /* the bound punches only a file grown past it and its slack
     * (cr_output_bound): below that, no need to ask */
    uint64_t keep = D.worker_log_max;
    if (!keep || cs->end <= keep + keep / 8) {
        follow_pump_soon();
        return;
    }
    int err = cr_output_bound(fd, keep, NULL);
    if (err < 0 && !D.worker_log_unbounded_told) {
        cr_warn("output of %s: %s cannot be bounded to %llu bytes: %s; the head's copy of remote "
                "output grows without limit",
                w->id, *path, (unsigned long long)D.worker_log_max, cr_strerror(err));
        D.worker_log_unbounded_told = true;
    }
    follow_pump_soon(); /* once for every piece this read brought */
}
