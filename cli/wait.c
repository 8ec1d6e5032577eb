/* What run, train and pg create wait for, said while they wait (as srun's
 * "job N queued and waiting for resources"): the pending reason and how
 * long, kept current on one line of a terminal, said again only when it
 * changes (and each WAIT_REPEAT_MS) when stderr is not one; and Ctrl-C
 * while waiting (cli_interrupted). */
#include "cli.h"
#include <corral/corral.h>
#include <stdio.h>
#include <unistd.h>

#define WAIT_REPEAT_MS 30000
#define WAIT_POLL_MS 250

void cli_waitline_init(cli_waitline_t *w, const char *cmd, const char *what)
{
    *w = (cli_waitline_t){.cmd = cmd, .t0 = cr_mono_ms(), .tty = isatty(STDERR_FILENO) == 1};
    snprintf(w->what, sizeof(w->what), "%s", what);
}

/* 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st */
const char *cli_ordinal(unsigned n)
{
    if (n % 100 >= 11 && n % 100 <= 13)
        return "th";
    return n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
}

void cli_waitline_show(cli_waitline_t *w, const char *reason, unsigned pos)
{
    int64_t now = cr_mono_ms();
    long secs = (long)((now - w->t0) / 1000);
    bool changed = strcmp(w->reason, reason) != 0;
    char where[48] = "";
    if (pos)
        snprintf(where, sizeof(where), ", %u%s in queue", pos, cli_ordinal(pos));
    if (w->tty) {
        fprintf(stderr, "\r\033[K%s: %s pending %lds%s: %s", w->cmd, w->what, secs, where, reason);
    } else if (changed || now - w->said_ms >= WAIT_REPEAT_MS) {
        char took[32] = "";
        if (w->shown)
            snprintf(took, sizeof(took), " %lds", secs);
        fprintf(stderr, "%s: %s pending%s%s: %s\n", w->cmd, w->what, took, where, reason);
        w->said_ms = now;
    }
    fflush(stderr);
    snprintf(w->reason, sizeof(w->reason), "%s", reason);
    w->shown = true;
}

void cli_waitline_done(cli_waitline_t *w)
{
    if (w->shown && w->tty)
        fprintf(stderr, "\n");
    w->shown = false;
}

/* The follow's tick while a job may be pending: once a second its state,
 * through a second connection opened on the first need (the first one is
 * busy following), until it is placed. */
void cli_watch_pending(cli_stopper_t *st)
{
    if (st->placed)
        return;
    int64_t now = cr_mono_ms();
    if (!st->next_ms) /* a job placed at once (the usual case) costs nothing */
        st->next_ms = now + 500;
    if (now < st->next_ms)
        return;
    st->next_ms = now + 1000;
    if (!st->c2) {
        char *why = NULL;
        if (corral_connect(NULL, NULL, &st->c2, &why) < 0) {
            free(why);
            st->placed = true; /* the follow says what goes wrong */
            return;
        }
        char what[96];
        snprintf(what, sizeof(what), "job %s", st->job_id);
        cli_waitline_init(&st->wl, st->cmd, what);
    }
    corral_job_t job;
    if (corral_job_status(st->c2, st->job_id, &job) < 0)
        return;
    if (job.state == CORRAL_JOB_PENDING) {
        cli_waitline_show(&st->wl, job.reason && job.reason[0] ? job.reason : "queued",
                          job.queue_position);
    } else {
        st->placed = true;
        cli_waitline_done(&st->wl);
        corral_disconnect(st->c2);
        st->c2 = NULL;
    }
    corral_job_free(&job);
}

void cli_stopper_fini(cli_stopper_t *st)
{
    cli_waitline_done(&st->wl);
    if (st->c2)
        corral_disconnect(st->c2);
    st->c2 = NULL;
}

int cli_wait_pg(corral_t *c, const char *cmd, const char *name, corral_pg_t *out)
{
    cli_waitline_t wl;
    char what[96];
    snprintf(what, sizeof(what), "group %s", name);
    cli_waitline_init(&wl, cmd, what);
    int64_t next_show = cr_mono_ms() + 1000;
    for (;;) {
        corral_pg_t *v;
        size_t n;
        int err = corral_pg_list(c, &v, &n);
        if (err < 0) {
            cli_waitline_done(&wl);
            return err;
        }
        size_t i = 0;
        while (i < n && strcmp(v[i].name, name))
            i++;
        if (i == n) {
            corral_pg_list_free(v, n);
            cli_waitline_done(&wl);
            fprintf(stderr, "%s: group %s is gone (removed while waiting)\n", cmd, name);
            return CR_ENOENT;
        }
        if (strcmp(v[i].state, "PENDING") && strcmp(v[i].state, "PREPARING")) {
            *out = v[i];
            v[i] = v[n - 1]; /* out owns it now */
            corral_pg_list_free(v, n - 1);
            cli_waitline_done(&wl);
            return 0;
        }
        if (cr_mono_ms() >= next_show)
            cli_waitline_show(&wl, v[i].reason[0] ? v[i].reason : v[i].state, v[i].queue_position);
        corral_pg_list_free(v, n);
        if (cli_interrupted()) {
            cli_waitline_done(&wl);
            return -EINTR;
        }
        usleep(WAIT_POLL_MS * 1000);
    }
}

/* Ctrl-C (or SIGTERM) while waiting stops the job rather than leaving it
 * running behind the user's back (corral run and corral train). */
static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig)
{
    interrupted = sig;
}

int cli_interrupted(void)
{
    return interrupted;
}

void cli_catch_interrupts(struct sigaction *old_int, struct sigaction *old_term)
{
    struct sigaction sa = {.sa_handler = on_interrupt};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, old_int);
    sigaction(SIGTERM, &sa, old_term);
}
