/* The worker loop's insides that tests reach (worker/worker.c). */
#ifndef CORRAL_WORKER_WORKER_H
#define CORRAL_WORKER_WORKER_H

#include "worker/frame.h"

/* Runs one CALL payload against the registered functions and classes, as
 * the loop would, appending its RETURN (id 1) to out: for the fuzz target
 * and the unit tests of the C encoding's error paths. */
int crt_worker_run_call(const uint8_t *payload, size_t len, crt_bytes_t *out);

#endif
