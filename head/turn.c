/* The head's turn (DESIGN.md "Runtime"): the server struct D, the answers
 * every module sends, and the group commit. What the messages and events
 * handled in one turn of the loop change is committed together when the
 * loop is about to wait again (a libuv prepare handle), and every answer
 * and message sent meanwhile goes out only after it (an acknowledged
 * request survives kill -9): one transaction per turn, one write per
 * connection. The end of a shutdown lives here too: the turn's answers go
 * before the net does. */
#include "head/head.h"
#include "head/follow.h"
#include <stdio.h>

head_t D;

void db_check(int err)
{
    if (err < 0 && !D.store_failing) /* said once when the store fails (store_failed) */
        cr_warn("state: %s", cr_state_errmsg(D.st));
}

int reply_to(cr_conn_t *c, uint64_t id, Corral__Envelope *ans)
{
    ans->reply_to = id;
    int err = cr_conn_send(c, ans);
    if (err == CR_E2BIG) { /* the peer would wait for it forever: say why instead */
        size_t len = corral__envelope__get_packed_size(ans);
        size_t max = D.net ? cr_net_max_frame(D.net) : CR_FRAME_MAX_DEFAULT;
        cr_warn("reply to %s: a %s of %zu bytes is above the frame limit of %zu bytes",
                cr_conn_peer(c), cr_msg_name(ans->body_case), len, max);
        return cr_conn_reply_error(c, id, CR_E2BIG,
                                   "the answer (a %s of %zu bytes) is above the frame limit of "
                                   "%zu bytes; ask for less (a listing: a smaller limit)",
                                   cr_msg_name(ans->body_case), len, max);
    }
    if (err == CR_EINVAL) /* ours did not validate (net/conn.c said why): say so */
        return cr_conn_reply_error(c, id, CR_EINVAL,
                                   "the head could not send its answer (a %s): it is not a valid "
                                   "message (the head's log says why)",
                                   cr_msg_name(ans->body_case));
    if (err < 0)
        cr_warn("reply to %s: %s", cr_conn_peer(c), cr_strerror(err));
    return err;
}

void reply(cr_conn_t *c, const Corral__Envelope *req, Corral__Envelope *ans)
{
    reply_to(c, req->id, ans);
}

void reply_ack(cr_conn_t *c, const Corral__Envelope *req)
{
    Corral__Ack ack = CORRAL__ACK__INIT;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_ACK;
    a.ack = &ack;
    reply(c, req, &a);
}

static void net_closed(void *data)
{
    D.closed = true;
}

static void batch_end(uv_prepare_t *h);

static uv_prepare_t batch;

static bool batch_ready;

void maybe_finish_shutdown(void)
{
    if (!D.shutting_down || D.running_workers > 0 || D.closed || !D.net)
        return;
    if (batch_ready) /* the turn's answers go before the net does */
        batch_end(&batch);
    cr_net_t *n = D.net;
    D.net = NULL;
    follow_fini();
    uv_close((uv_handle_t *)&D.sig_term, NULL);
    uv_close((uv_handle_t *)&D.sig_int, NULL);
    uv_timer_stop(&D.tick);
    uv_close((uv_handle_t *)&D.tick, NULL);
    cr_net_close(n, net_closed, NULL);
}

/* What the messages and events handled in one turn of the loop change is
 * committed together when the loop is about to wait again (a libuv
 * prepare handle), and every answer and message sent meanwhile goes out
 * only after (an acknowledged request survives kill -9): one transaction
 * per turn, one write per connection. */
static bool batching;

static cr_net_t *batch_net;

/* What every answer of a failed turn, and every write refused after it,
 * says. */
#define STORE_FAILED_FMT                                                                           \
    "the state store could not commit: %s; nothing of this request was kept; the head serves "     \
    "reads only until it can commit"

static void store_failed(const char *why)
{
    if (!D.store_failing) /* said once, not every turn it goes on failing */
        cr_warn("state: %s: what the last turn changed is not recorded; its answers are errors; "
                "the head serves reads only and tries a commit again every %d ms",
                why, STORE_RETRY_MS);
    D.store_failing = true;
    cr_strlcpy(D.store_why, why, sizeof(D.store_why));
    D.store_tried_ms = cr_mono_ms();
}

/* One turn's commit: its held answers go out, or, when it failed, errors
 * in their place (nothing is acknowledged that is not recorded); then the
 * watch's committed starts or drops what the turn created. That may open
 * another turn (the workers of the jobs just recorded): it is committed
 * here too, a few rounds at most, the rest at the next prepare. */
static void batch_end(uv_prepare_t *h)
{
    uv_prepare_stop(h);
    for (int round = 0; batching && round < 4; round++) {
        batching = false;
        int err = D.st ? cr_state_commit(D.st) : 0;
        head_counters.commits += err == 0;
        head_counters.commit_failures += err < 0;
        cr_net_t *n = batch_net;
        batch_net = NULL;
        if (err < 0) {
            store_failed(cr_state_errmsg(D.st));
            if (n) {
                char *msg = cr_asprintf(STORE_FAILED_FMT, cr_state_errmsg(D.st));
                cr_net_flush_failed(n, err, msg);
                free(msg);
            }
        } else if (n) {
            cr_net_flush(n);
        }
        if (D.watch.committed)
            D.watch.committed(err == 0);
    }
    /* the answers are out: the files the next workers take are made now,
     * not while a client waits for its worker to start */
    cr_worker_spares_fill();
}

bool head_refuse_write(cr_conn_t *c, const Corral__Envelope *e)
{
    if (!D.store_failing)
        return false;
    cr_conn_reply_error(c, e->id, CR_EAGAIN, STORE_FAILED_FMT, D.store_why);
    return true;
}

void head_store_retry(void)
{
    if (!D.store_failing || !D.st || D.shutting_down ||
        cr_mono_ms() - D.store_tried_ms < STORE_RETRY_MS)
        return;
    D.store_tried_ms = cr_mono_ms();
    /* a turn of its own, outside the group commit of the others */
    if (batching)
        batch_end(&batch);
    if (cr_state_begin(D.st) < 0) {
        cr_strlcpy(D.store_why, cr_state_errmsg(D.st), sizeof(D.store_why));
        return;
    }
    int err = D.watch.resync ? D.watch.resync() : 0;
    if (err == 0)
        err = cr_state_commit(D.st);
    else
        cr_state_rollback(D.st);
    if (err < 0) {
        cr_strlcpy(D.store_why, cr_state_errmsg(D.st), sizeof(D.store_why));
        return;
    }
    D.store_failing = false;
    cr_info("state: the state store commits again; the head serves writes again");
    head_event("store",
               "the state store commits again after failing (%s); writes are served "
               "again",
               D.store_why);
    D.store_why[0] = '\0';
}

void head_batch(void)
{
    if (!batch_ready) {
        uv_prepare_init(&D.loop, &batch);
        batch_ready = true;
    }
    if (batching || !D.st || cr_state_begin(D.st) < 0)
        return;
    batching = true;
    batch_net = D.net; /* a Shutdown may let go of D.net */
    if (batch_net)
        cr_net_hold(batch_net);
    if (!uv_is_closing((uv_handle_t *)&batch))
        uv_prepare_start(&batch, batch_end);
}

void head_batch_fini(void)
{
    if (!batch_ready)
        return;
    batch_end(&batch);
    if (!uv_is_closing((uv_handle_t *)&batch))
        uv_close((uv_handle_t *)&batch, NULL);
}

void head_batch_forget(void)
{
    batch_ready = batching = false;
    batch_net = NULL;
}

void head_retry(void)
{
    if (D.watch.retry)
        D.watch.retry();
}
