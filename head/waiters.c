/* Parked requests (daemon/waiters.h). `corral run` waits for its job's end
 * with JobStatus{wait_ms}: one request answered when the job ends, rather
 * than the client polling with sleeps (which made every short job wait
 * for the next poll: 2 ms or more, docs/benchmarks.md, Runtime). A
 * handful are parked at a time, so a plain list. Each has a timer; its
 * memory goes in the timer's close callback. */
#include "head/waiters.h"

typedef struct waiter {
    uv_timer_t timer;
    cr_conn_t *c;
    uint64_t id;
    void *key;
    cr_waiter_answer_fn answer;
} waiter_t;

static CR_VEC(waiter_t *) parked;

static void closed(uv_handle_t *h)
{
    free(h->data);
}

/* Takes w off the list and frees it (answering first when answer). */
static void finish(size_t i, bool answer)
{
    waiter_t *w = parked.v[i];
    parked.v[i] = parked.v[--parked.n];
    uv_timer_stop(&w->timer);
    if (answer)
        w->answer(w->c, w->id, w->key);
    uv_close((uv_handle_t *)&w->timer, closed);
}

static void on_timer(uv_timer_t *t)
{
    for (size_t i = 0; i < parked.n; i++)
        if (parked.v[i] == t->data) {
            finish(i, true);
            return;
        }
}

void cr_waiters_add(uv_loop_t *loop, cr_conn_t *c, uint64_t id, void *key, uint32_t ms,
                    cr_waiter_answer_fn answer)
{
    waiter_t *w = cr_calloc(1, sizeof(*w));
    w->c = c;
    w->id = id;
    w->key = key;
    w->answer = answer;
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    uv_timer_start(&w->timer, on_timer, ms, 0);
    *CR_VEC_PUSH(&parked) = w;
}

void cr_waiters_wake(void *key)
{
    for (size_t i = 0; i < parked.n;)
        if (parked.v[i]->key == key)
            finish(i, true); /* the last one moved to i: look at i again */
        else
            i++;
}

void cr_waiters_drop_conn(cr_conn_t *c)
{
    for (size_t i = 0; i < parked.n;)
        if (parked.v[i]->c == c)
            finish(i, false);
        else
            i++;
    if (parked.n == 0)
        CR_VEC_FREE(&parked); /* nothing left for a leak checker at exit */
}

void cr_waiters_drop_key(void *key)
{
    for (size_t i = 0; i < parked.n;)
        if (parked.v[i]->key == key)
            finish(i, false);
        else
            i++;
}
