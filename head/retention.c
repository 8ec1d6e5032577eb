/* Retention of finished jobs (docs/runtime.md "Retention"), as Slurm's
 * MinJobAge and Kubernetes' ttlSecondsAfterFinished: a finished job is
 * kept D.keep_finished_ms after it ended and while it is among the newest
 * D.keep_finished finished ones; then it goes with its workers (state.db
 * cascades), its events and the output files of its workers in the
 * session's logs/. Jobs that are not final are never touched. Part of the
 * jobs module (jobs.h). */
#include "head/jobs.h"
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define RETENTION_EVERY_MS 1000
#define RETENTION_BATCH 256 /* jobs removed per sweep at most: a turn stays short */

/* The output files the head's session holds for w: those in logs/ under
 * the worker's id (the local agent's and the forwarded copies; never a
 * path read from elsewhere). */
static void remove_output(const wk_t *w)
{
    static const char *const ext[] = {"out", "err"};
    int dfd = open(D.logs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    for (size_t i = 0; i < CR_ARRAY_SIZE(ext); i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s.%s", w->id, ext[i]);
        if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
            cr_warn("retention: %s/%s: %s", D.logs, name, strerror(errno));
    }
    close(dfd);
}

static void remove_job(job_t *j)
{
    for (int i = 0; D.logs && i < j->n; i++)
        remove_output(&j->wk[i]);
    db_check(cr_state_job_delete(D.st, j->id)); /* its workers cascade */
    db_check(cr_state_event_delete_job(D.st, j->id));
    job_free(j);
}

size_t jobs_retention(int64_t now_ms)
{
    if (now_ms - D.retention_last_ms < RETENTION_EVERY_MS && D.retention_last_ms &&
        !D.retention_behind)
        return 0;
    D.retention_last_ms = now_ms;
    size_t finished =
        jobs_count(CR_JOB_SUCCEEDED) + jobs_count(CR_JOB_FAILED) + jobs_count(CR_JOB_STOPPED);
    uint32_t keep = D.keep_finished ? D.keep_finished : CR_KEEP_FINISHED_DEFAULT;
    int64_t age = D.keep_finished_ms ? D.keep_finished_ms : CR_KEEP_FINISHED_MS_DEFAULT;
    size_t over = finished > keep ? finished - keep : 0, gone = 0, kept = 0;
    /* D.jobs is in id order: the oldest finished come first */
    for (size_t i = 0; i < D.jobs.n; i++) {
        job_t *j = D.jobs.v[i];
        bool final = cr_job_state_is_final(j->state);
        int64_t ended = j->finished_ms ? j->finished_ms : j->submitted_ms;
        if (final && gone < RETENTION_BATCH && (gone < over || now_ms - ended > age)) {
            remove_job(j);
            gone++;
            continue;
        }
        D.jobs.v[kept++] = j;
    }
    D.jobs.n = kept;
    /* a whole batch leaves more behind: the next sweep runs on the next
     * tick (100 ms), not a second later, so the finished jobs kept stay at
     * their bound while jobs end faster than 256 a second (a sequential
     * corral run here ends 500 to 800 a second; at one sweep a second the
     * count grew by the difference without end) */
    D.retention_behind = gone == RETENTION_BATCH;
    if (gone)
        cr_info("retention: %zu finished job(s) removed (keeping %u, each for %lld s)", gone, keep,
                (long long)(age / 1000));
    return gone;
}
