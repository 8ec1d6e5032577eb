/* Fuzz the owner's handlers of a leased worker's frames (client/tasks.c:
 * HELLO, RETURN of a call or of an actor's constructor, BYE, the rest),
 * through a real socket pair into an owner with no head and no threads
 * (crt_owner_feed). The first byte picks a task worker or an actor's (bit
 * 0), a Unix or a TCP connection (bit 1: HELLO's mac and nonce checked,
 * WELCOME's mac made), and with TCP whether the harness says a HELLO with
 * the right mac first, its nonce the next 64 bytes (bit 2); the rest is
 * the worker's stream. Whatever comes, the owner stays up, reads
 * nothing out of bounds, and leaves no call pending when it shuts down. */
/* the checks are the point: keep assert() in release builds too */
#undef NDEBUG
#include "client/tasks_int.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    assert(crt_owner_feed(data + 1, size - 1, data[0] & 7u) == 0);
    return 0;
}
