/* Fuzz the heartbeat's fast decoder (net/msg.c cr_msg_beat_decode) against
 * protobuf-c's: whatever it takes, cr_msg_unpack must take too and decode
 * to the same envelope; what it refuses is left to cr_msg_unpack. */
/* the checks are the point: keep assert() in release builds too */
#undef NDEBUG
#include "net/net.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr_msg_beat_t b;
    if (!cr_msg_beat_decode(data, size, &b))
        return 0;
    char why[300] = "";
    Corral__Envelope *e = cr_msg_unpack(data, size, why, sizeof(why));
    assert(e);
    assert(b.env.body_case == CORRAL__ENVELOPE__BODY_HEARTBEAT && e->body_case == b.env.body_case);
    assert(b.env.heartbeat == &b.hb);
    assert(b.env.id == e->id && b.env.reply_to == e->reply_to);
    const Corral__Heartbeat *h = e->heartbeat;
    assert(strcmp(b.hb.node_id, h->node_id ? h->node_id : "") == 0);
    assert(b.hb.incarnation == h->incarnation && b.hb.seq == h->seq);
    assert(b.hb.free_same == h->free_same);
    assert(!h->n_free && !h->n_changes && !h->n_telemetry);
    assert(!b.hb.n_free && !b.hb.n_changes && !b.hb.n_telemetry);
    assert(cr_msg_validate(&b.env, why, sizeof(why)) == 0);
    cr_msg_free(e);
    return 0;
}
