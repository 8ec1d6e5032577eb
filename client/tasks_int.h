/* The owner side's insides that tests reach (client/tasks.c). */
#ifndef CORRAL_CLIENT_TASKS_INT_H
#define CORRAL_CLIENT_TASKS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Feeds size bytes as a leased worker's stream to an owner with no head
 * and no threads: one lease ("L1", of a task shape, or of an actor of
 * class "C" with actor), two calls waiting for it. Every handler of the
 * worker's frames runs (HELLO, RETURN, the rest), then the owner shuts
 * down; both calls must be done by then. 0 or -errno. */
int crt_owner_feed(const uint8_t *data, size_t size, bool actor);

#endif
