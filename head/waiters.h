/* Requests the head answers later: a JobStatus with wait_ms is parked
 * until its job ends or the wait runs out (daemon/waiters.c). */
#ifndef CORRAL_DAEMON_WAITERS_H
#define CORRAL_DAEMON_WAITERS_H

#include "net/net.h"

/* Sends the answer to request id on c about key (the job). */
typedef void (*cr_waiter_answer_fn)(cr_conn_t *c, uint64_t id, void *key);

/* Parks request id of c: answer(c, id, key) runs once, at
 * cr_waiters_wake(key) or after ms, whichever comes first. */
void cr_waiters_add(uv_loop_t *loop, cr_conn_t *c, uint64_t id, void *key, uint32_t ms,
                    cr_waiter_answer_fn answer);
/* Answers every request parked on key. */
void cr_waiters_wake(void *key);
/* c has closed: its parked requests are dropped unanswered. */
void cr_waiters_drop_conn(cr_conn_t *c);
/* The waits on key dropped, unanswered (key is going away unrecorded). */
void cr_waiters_drop_key(void *key);

#endif
