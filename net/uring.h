/* Many receives in one system call (issue 18, "A head for 100,000
 * agents"): the head reads the agents' connections that the batch of
 * net/conn.c found ready through one io_uring submission, not one read(2)
 * each; on this project's paravirtualised VMs a system call's entry and
 * exit cost more than the receive of a heartbeat itself.
 *
 * Raw system calls (io_uring_setup, io_uring_enter, and the three mmaps of
 * the rings), no liburing. Every receive is submitted with MSG_DONTWAIT,
 * so the kernel completes each one within the submitting call (the bytes,
 * or -EAGAIN) and none is left in flight to write into a buffer later; a
 * kernel without io_uring, or with it disabled (kernel.io_uring_disabled),
 * makes cr_uring_new fail and the caller reads one connection at a time. */
#ifndef CORRAL_NET_URING_H
#define CORRAL_NET_URING_H

#include <stddef.h>
#include <stdint.h>

typedef struct cr_uring cr_uring_t;

/* A ring for up to entries receives at a time; NULL when the kernel gives
 * none (errno says why). */
cr_uring_t *cr_uring_new(unsigned entries);
void cr_uring_free(cr_uring_t *u);

/* Receives from fds[i] into base + i * slice, up to slice bytes, for each
 * i < n (n at most the ring's entries), without waiting: res[i] is the
 * bytes received, 0 at the end of the stream, or -errno (-EAGAIN: nothing
 * there). All n are done when it returns 0. A negative errno when the ring
 * failed; then the ring must not be used again (cr_uring_free). */
int cr_uring_recv_all(cr_uring_t *u, unsigned n, const int *fds, uint8_t *base, size_t slice,
                      int *res);

#endif
