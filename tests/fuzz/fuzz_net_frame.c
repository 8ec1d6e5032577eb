/* Fuzz the frame decoder: the input is cut into chunks whose sizes come
 * from the input itself, and whatever the cuts, the frames must be those a
 * one-shot reading of the same bytes finds, up to the same error. */
/* the checks are the point: keep assert() in release builds too */
#undef NDEBUG
#include "net/net.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t max = 1 + data[0] * 4; /* small limits so that both paths get hit */
    uint8_t step = data[1];
    data += 2;
    size -= 2;

    /* the reference: walk the headers in one go */
    size_t ref_off[64], ref_len[64], nref = 0;
    int ref_err = 0;
    for (size_t pos = 0; nref < 64;) {
        if (size - pos < CR_FRAME_HDR)
            break;
        uint32_t len = (uint32_t)data[pos] << 24 | (uint32_t)data[pos + 1] << 16 |
                       (uint32_t)data[pos + 2] << 8 | data[pos + 3];
        if (len == 0 || len > max) {
            ref_err = len == 0 ? CR_EPARSE : CR_E2BIG;
            break;
        }
        if (size - pos - CR_FRAME_HDR < len)
            break;
        ref_off[nref] = pos + CR_FRAME_HDR;
        ref_len[nref++] = len;
        pos += CR_FRAME_HDR + len;
    }

    cr_frame_dec_t d;
    cr_frame_dec_init(&d, max);
    size_t got = 0, pos = 0, k = 0;
    int err = 0;
    while (pos < size && !err && got < 64) {
        size_t chunk = 1 + ((step + k++ * 7) % 13);
        if (chunk > size - pos)
            chunk = size - pos;
        size_t left = chunk;
        const uint8_t *p = data + pos;
        while (left && got < 64) {
            size_t used, fl;
            const uint8_t *f;
            int r = cr_frame_dec_feed(&d, p, left, &used, &f, &fl);
            assert(used <= left);
            if (r < 0) {
                err = r;
                break;
            }
            if (r == 1) {
                assert(got < nref);
                assert(fl == ref_len[got]);
                assert(memcmp(f, data + ref_off[got], fl) == 0);
                got++;
            } else {
                assert(used == left);
            }
            p += used;
            left -= used;
        }
        pos += chunk;
    }
    if (got < 64) {
        assert(got == nref);
        assert(err == ref_err);
    }
    if (err) {
        /* sticky */
        size_t used, fl;
        const uint8_t *f;
        assert(cr_frame_dec_feed(&d, data, size, &used, &f, &fl) == err);
        char why[160];
        assert(cr_frame_dec_why(&d, why, sizeof(why))[0]);
    }
    cr_frame_dec_fini(&d);
    return 0;
}
