/* The frame codec: a 4-byte big-endian length, then that many bytes of
 * payload. The decoder takes whatever chunks the socket gives and never
 * trusts the length before the bytes arrive: its buffer grows with the
 * data, so a peer that announces 16 MiB and sends 4 bytes costs 4 bytes. */
#include "net/net.h"
#include <stdio.h>

void cr_frame_dec_init(cr_frame_dec_t *d, size_t max)
{
    memset(d, 0, sizeof(*d));
    d->max = max ? max : CR_FRAME_MAX_DEFAULT;
}

void cr_frame_dec_fini(cr_frame_dec_t *d)
{
    CR_FREE(d->buf);
    d->cap = d->have = 0;
}

void cr_frame_dec_trim(cr_frame_dec_t *d)
{
    if (d->hdr_have || d->have)
        return;
    CR_FREE(d->buf);
    d->cap = 0;
    d->shrink = false;
}

int cr_frame_hdr(uint8_t hdr[CR_FRAME_HDR], size_t len, size_t max)
{
    if (len == 0)
        return CR_EINVAL;
    if (len > (max ? max : CR_FRAME_MAX_DEFAULT) || len > UINT32_MAX)
        return CR_E2BIG;
    hdr[0] = (uint8_t)(len >> 24);
    hdr[1] = (uint8_t)(len >> 16);
    hdr[2] = (uint8_t)(len >> 8);
    hdr[3] = (uint8_t)len;
    return 0;
}

#define BIG (64 * 1024) /* a payload buffer above this is not kept between small frames */

/* Grows the payload buffer to hold need bytes, doubling, never past the
 * frame's own length. */
static void reserve(cr_frame_dec_t *d, size_t need)
{
    if (need <= d->cap)
        return;
    size_t cap = d->cap ? d->cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > d->len)
        cap = d->len;
    d->buf = cr_realloc(d->buf, cap);
    d->cap = cap;
}

int cr_frame_dec_feed(cr_frame_dec_t *d, const uint8_t *data, size_t n, size_t *used,
                      const uint8_t **frame, size_t *flen)
{
    size_t pos = 0;
    *used = 0;
    if (d->err)
        return d->err;
    while (d->hdr_have < CR_FRAME_HDR) {
        if (pos == n) {
            *used = pos;
            return 0;
        }
        d->hdr[d->hdr_have++] = data[pos++];
        if (d->hdr_have < CR_FRAME_HDR)
            continue;
        uint32_t len = (uint32_t)d->hdr[0] << 24 | (uint32_t)d->hdr[1] << 16 |
                       (uint32_t)d->hdr[2] << 8 | d->hdr[3];
        if (len == 0 || len > d->max) {
            d->bad_len = len;
            d->err = len == 0 ? CR_EPARSE : CR_E2BIG;
            *used = pos;
            return d->err;
        }
        d->len = len;
        d->have = 0;
        if (d->shrink && len <= BIG) { /* a big frame's buffer goes with the next small one */
            CR_FREE(d->buf);
            d->cap = 0;
        }
        d->shrink = false;
    }
    size_t avail = n - pos;
    if (avail == 0) {
        *used = pos;
        return 0;
    }
    /* the whole payload is in this chunk: hand it out without copying */
    if (d->have == 0 && avail >= d->len) {
        *frame = data + pos;
        *flen = d->len;
        *used = pos + d->len;
        d->hdr_have = 0;
        return 1;
    }
    size_t take = d->len - d->have;
    if (take > avail)
        take = avail;
    reserve(d, d->have + take);
    memcpy(d->buf + d->have, data + pos, take);
    d->have += take;
    *used = pos + take;
    if (d->have < d->len)
        return 0;
    *frame = d->buf;
    *flen = d->len;
    d->hdr_have = 0;
    d->have = 0;
    /* a big frame's buffer is not kept for the life of the connection:
     * the next frame's header frees it, unless that frame is big too (a
     * stream of output: one buffer for all, not a fresh one each) */
    d->shrink = d->cap > BIG;
    return 1;
}

const char *cr_frame_dec_why(const cr_frame_dec_t *d, char *buf, size_t size)
{
    if (d->err == CR_EPARSE)
        snprintf(buf, size, "frame length 0 (a frame carries at least one byte)");
    else if (d->err == CR_E2BIG)
        snprintf(buf, size, "frame of %llu bytes exceeds the limit of %zu",
                 (unsigned long long)d->bad_len, d->max);
    else if (d->err)
        snprintf(buf, size, "%s", cr_strerror(d->err));
    else
        snprintf(buf, size, "no error");
    return buf;
}
