/* The worker loop's insides that tests reach (worker/worker.c). */
#ifndef CORRAL_WORKER_WORKER_H
#define CORRAL_WORKER_WORKER_H

#include "worker/frame.h"

/* Runs one CALL payload against the registered functions and classes, as
 * the loop would, appending its RETURN (id 1) to out: for the fuzz target
 * and the unit tests of the C encoding's error paths. */
int crt_worker_run_call(const uint8_t *payload, size_t len, crt_bytes_t *out);
/* Serves size bytes as an owner's stream after the handshake (CALLs,
 * CANCELs, BYE, the rest), through a real socket pair, as
 * corral_worker_main's loop does on one thread; the RETURNs are read and
 * each must parse. For the fuzz target: at most 1 MiB. 0, or CR_EPARSE
 * when a RETURN the loop wrote did not parse. The actor constructed, if
 * any, is destroyed after. */
int crt_worker_feed(const uint8_t *data, size_t size);
/* Serves size bytes as another caller's stream after its HELLO (CALLs of
 * the actor's methods only, CANCEL, BYE, the rest), through a real socket
 * pair, as a caller's thread of corral_worker_main does; the RETURNs are
 * read and each must parse. Calls the actor constructed by an earlier
 * crt_worker_run_call, if any. At most 1 MiB. 0 or CR_EPARSE. */
int crt_worker_caller_feed(const uint8_t *data, size_t size);

#endif
