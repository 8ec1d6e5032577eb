/* libcorral's insides that its unit test (tests/unit/test_client.c)
 * reaches without a head: the requests are built by pure functions. */
#ifndef CORRAL_CLIENT_INT_H
#define CORRAL_CLIENT_INT_H

#include <corral/corral.h>
#include "net/net.h"
#include "sched/sched.h"

/* "GPU=1,CPU=2,memory=8Gi" to Quantity messages (at most SCHED_REQ_MAX,
 * each malloc'ed, name included) in q, *n of them. Returns 0, or
 * CR_EINVAL with why in msg (q then holds nothing to free). */
int cr__parse_resources(const char *s, Corral__Quantity **q, size_t *n, char *msg, size_t size);
void cr__quantities_free(Corral__Quantity **q, size_t n);

/* The PgCreate for spec, every part malloc'ed; free with
 * cr__pg_create_free. Returns NULL with why in msg for a spec that cannot
 * be sent (no bundle, a bundle without resources, bad resource text). */
Corral__PgCreate *cr__pg_create_build(const corral_pg_spec_t *spec, char *msg, size_t size);
void cr__pg_create_free(Corral__PgCreate *r);

#endif
