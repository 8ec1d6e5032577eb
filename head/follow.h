/* Following a job's output while it is written (JobLogs{follow}).
 *
 * The head registers each following request with follow_add; follow_pump()
 * reads what the workers' stdout and stderr files gained since the last
 * look and sends it as LogChunk answers to the request, as much as the
 * client's connection has room for (a few MiB queued), and
 * follow_conn_drained() sends the next piece as soon as the client has
 * read the last: output streams as fast as the client reads it. A libuv
 * timer (every FOLLOW_PERIOD_MS, running only while someone follows)
 * pumps too, for files that grow while their followers are caught up.
 * Once the job is final and every byte is sent, a last LogChunk with eof
 * ends the request and the follower is dropped.
 *
 * The head keeps its job table to itself: follow.c asks it through
 * follow_ops_t for the facts it needs, by job id, each time it pumps, so
 * a restarted worker's new files are picked up (a changed path starts
 * over at offset 0 of the new file).
 *
 * Offsets in LogChunk are those of the current file of that worker and
 * stream; a client that only appends what it is given needs none. */
#ifndef CORRAL_HEAD_FOLLOW_H
#define CORRAL_HEAD_FOLLOW_H

#include "net/net.h"

#define FOLLOW_PERIOD_MS 50

typedef struct follow_ops {
    /* The job's number of workers; -1 when the head knows no such job
     * (it was forgotten: the follower gets an Error and is dropped). */
    int (*nworkers)(void *arg, const char *job_id);
    /* Worker i's current stdout and stderr files; NULL when it has none
     * (not started yet). The strings are borrowed until the call returns
     * to the loop. */
    void (*paths)(void *arg, const char *job_id, int worker, const char **out, const char **err);
    /* The job has ended: no worker will write any more. */
    bool (*is_final)(void *arg, const char *job_id);
    /* Optional (events following): calls emit for each event after
     * since_seq, oldest first, at most a pump's worth (the next pump goes
     * on); returns how many. */
    size_t (*events_since)(void *arg, uint64_t since_seq,
                           void (*emit)(void *ctx, const Corral__Event *ev), void *ctx);
    /* Optional: the bound on each worker output file (cr_output_bound),
     * told with the output a follower skipped; 0 or NULL: not said. */
    uint64_t (*log_max)(void *arg);
    /* Optional: where a worker's stream has holes besides its bound's
     * (cr_output_next's old): the end of the last gap in it, 0 none. */
    uint64_t (*gap)(void *arg, const char *job_id, int worker, int stream);
    /* Optional: calls fn once with the job's JobInfo (as JobStatus
     * answers it), not at all when the head knows no such job. */
    void (*job_info)(void *arg, const char *job_id,
                     void (*fn)(void *ctx, const Corral__JobInfo *info), void *ctx);
} follow_ops_t;

/* Sets up the module on loop (the timer is created here, started only
 * while followers exist). ops is copied. */
void follow_init(uv_loop_t *loop, const follow_ops_t *ops, void *arg);
/* Drops every follower and closes the timer (run the loop afterwards to
 * let its close callback run). Safe without follow_init. */
void follow_fini(void);

/* Follows job_id's output for request req_id on c: worker_index -1 every
 * worker, else that one. offset: where to start in each file (0: from
 * the start, except that a file longer than 8 MiB starts with its last 8
 * MiB, as a JobLogs answer without follow does, unless whole). with_job:
 * the eof carries the job as it ended (ops.job_info). What is there now is
 * sent at once; a job already final is answered completely, eof
 * included, before this returns. Returns 0, or CR_ENOENT (no such job,
 * nothing sent: the caller answers with an Error). */
int follow_add(cr_conn_t *c, uint64_t req_id, const char *job_id, int worker_index, uint64_t offset,
               bool whole, bool with_job);
/* Follows the event log for request req_id on c (EventsRequest{follow}):
 * each event after since_seq is pushed as an Event answering req_id, for
 * as long as c lives. The head answers the request's EventList itself
 * first and passes the last seq it sent. Returns 0 or CR_ENOSYS when the
 * ops have no events_since. */
int follow_events_add(cr_conn_t *c, uint64_t req_id, uint64_t since_seq);
/* Sends what every follower's files gained; ends the followers of jobs
 * now final. The timer calls it; the head may call it too (say when a
 * worker exits) to answer sooner. */
void follow_pump(void);
/* Remote output just written at off into the head's copy path of a job's
 * worker and stream (0 stdout, 1 stderr), open as fd (readable; -1: not
 * given), in memory (data, len): sent at once to each follower caught up
 * on that file at off (no gap to tell, raw chunks, room in its queue):
 * from fd by sendfile where the follower's connection takes it (the
 * page cache's pages by reference), else straight from data
 * (cr_conn_send_log_bytes); either way the pump need not read it back.
 * Every other follower gets it from the file as before. */
void follow_relay(const char *job_id, int worker, int stream, const char *path, int fd,
                  uint64_t off, const uint8_t *data, size_t len);
/* Bytes follow_relay sent so far (the head's /metrics). */
uint64_t follow_relayed(void);
/* follow_pump once this turn of the loop has handled what it read (a
 * uv_check): output an agent forwards arrives in many pieces per read,
 * and the followers are pumped once for all of them. */
void follow_pump_soon(void);
/* Everything queued on c was written (the net's on_drain): its log
 * followers that are behind get their next piece now. */
void follow_conn_drained(cr_conn_t *c);
/* c is closing: forget its followers (call from on_close). */
void follow_conn_closed(cr_conn_t *c);
/* How many requests are being followed (tests, status). */
size_t follow_count(void);

#endif
