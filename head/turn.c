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
    if (err < 0)
        cr_warn("state: %s", cr_state_errmsg(D.st));
}

void reply(cr_conn_t *c, const Corral__Envelope *req, Corral__Envelope *ans)
{
    ans->reply_to = req->id;
    int err = cr_conn_send(c, ans);
    if (err < 0)
        cr_warn("reply to %s: %s", cr_conn_peer(c), cr_strerror(err));
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

static void batch_end(uv_prepare_t *h)
{
    uv_prepare_stop(h);
    if (!batching)
        return;
    batching = false;
    int err = D.st ? cr_state_commit(D.st) : 0;
    head_counters.commits += err == 0;
    head_counters.commit_failures += err < 0;
    if (err < 0)
        cr_warn("state: %s: what the last turn changed is not recorded; its answers are errors",
                cr_state_errmsg(D.st));
    if (batch_net && err < 0) /* nothing is acknowledged that is not recorded */
        cr_net_flush_failed(batch_net, err, cr_state_errmsg(D.st));
    else if (batch_net)
        cr_net_flush(batch_net);
    batch_net = NULL;
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
