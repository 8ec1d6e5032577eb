/* The owner side's insides that tests reach (client/tasks.c). */
#ifndef CORRAL_CLIENT_TASKS_INT_H
#define CORRAL_CLIENT_TASKS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Feeds size bytes as a leased worker's stream to an owner with no head
 * and no threads: one lease ("L1", of a task shape, or of an actor of
 * class "C" with CRT_FEED_ACTOR), two calls waiting for it. Every handler
 * of the worker's frames runs (HELLO, RETURN, the rest;
 * a caller's HELLO and its CALLs, asking where the actor of directory
 * "/d" listens), then the owner
 * shuts down; both calls must be done by then. With CRT_FEED_TCP the
 * connection counts as TCP (the secret is 32 bytes of 0x11, the CHALLENGE
 * nonce 32 of 0x22): HELLO's mac is checked; with CRT_FEED_GOOD_MAC too,
 * the feed is first a HELLO of lease L1 with the right mac whose "nonce"
 * is the data's first 64 bytes as they are (hex or not), then the rest.
 * 0 or -errno. */
#define CRT_FEED_ACTOR 1
#define CRT_FEED_TCP 2
#define CRT_FEED_GOOD_MAC 4
int crt_owner_feed(const uint8_t *data, size_t size, unsigned flags);

#endif
