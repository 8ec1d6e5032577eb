/* Fuzz Envelope unpacking and validation: whatever passes must pack again,
 * unpack to the same bytes and pass validation again; whatever fails says
 * why in a non-empty sentence. */
/* the checks are the point: keep assert() in release builds too */
#undef NDEBUG
#include "net/net.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[300] = "";
    Corral__Envelope *e = cr_msg_unpack(data, size, why, sizeof(why));
    if (!e) {
        assert(why[0]);
        return 0;
    }
    assert(cr_msg_validate(e, why, sizeof(why)) == 0);
    assert(cr_msg_senders(e->body_case) != 0);
    assert(cr_msg_name(e->body_case)[0]);
    uint8_t *buf;
    size_t len;
    int err = cr_msg_pack(e, 0, &buf, &len);
    if (err == 0) {
        Corral__Envelope *again =
            cr_msg_unpack(buf + CR_FRAME_HDR, len - CR_FRAME_HDR, why, sizeof(why));
        assert(again);
        uint8_t *buf2;
        size_t len2;
        assert(cr_msg_pack(again, 0, &buf2, &len2) == 0);
        assert(len2 == len && memcmp(buf, buf2, len) == 0);
        free(buf2);
        cr_msg_free(again);
        free(buf);
    } else {
        /* only an envelope that packs to nothing or too much fails */
        assert(err == CR_EINVAL || err == CR_E2BIG);
    }
    cr_msg_free(e);
    return 0;
}
