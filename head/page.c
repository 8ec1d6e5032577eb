/* Paged listings (docs/protocol.md "Paged listings", after Kubernetes'
 * list chunking): what one reply's items may take, and the continue
 * token. A token is "<listing>.<head tag>.<key>": the key the next page
 * starts at (the first item's id of that page, so items added meanwhile
 * neither repeat nor shift pages), and a tag drawn when this head
 * started, so that a token of an earlier head (the session was taken
 * over, the ids may have moved on) is refused as expired rather than read
 * as a position. */
#include "head/head.h"
#include <inttypes.h>
#include <unistd.h>
#include <stdio.h>

#define ENVELOPE_ROOM 4096 /* the envelope, the token, the counts */

static uint32_t tag;

static uint32_t head_tag(void)
{
    while (!tag)
        if (cr_random_bytes(&tag, sizeof(tag)) < 0)
            tag = (uint32_t)getpid() ^ (uint32_t)cr_wall_ms();
    return tag;
}

size_t page_budget(void)
{
    size_t max = D.net ? cr_net_max_frame(D.net) : CR_FRAME_MAX_DEFAULT;
    return max > 2 * ENVELOPE_ROOM ? max - ENVELOPE_ROOM : max / 2;
}

size_t page_items(uint32_t asked)
{
    return asked && asked < CR_MSG_MAX_LIST ? asked : CR_MSG_MAX_LIST;
}

size_t page_cap(uint32_t asked, size_t left)
{
    size_t cap = page_items(asked);
    return cap < left ? cap : left;
}

size_t page_item_cost(size_t packed)
{
    size_t varint = 1;
    for (size_t v = packed; v >= 0x80; v >>= 7)
        varint++;
    return 1 + varint + packed; /* the field's tag, the length, the item */
}

void page_token(const char *kind, const char *key, char *buf, size_t size)
{
    snprintf(buf, size, "%s.%08" PRIx32 ".%s", kind, head_tag(), key);
}

int page_parse(const char *token, const char *kind, char *key, size_t keysize, char *msg,
               size_t size)
{
    key[0] = '\0';
    if (!token || !token[0])
        return 0;
    size_t kl = strlen(kind);
    const char *p = token;
    char *end;
    if (strncmp(p, kind, kl) != 0 || p[kl] != '.') {
        snprintf(msg, size,
                 "invalid continue token '%.64s': not one of a %s listing; list again "
                 "without it",
                 token, kind);
        return CR_EINVAL;
    }
    p += kl + 1;
    unsigned long t = strtoul(p, &end, 16);
    if (end != p + 8 || *end != '.' || !end[1] || strlen(end + 1) >= keysize) {
        snprintf(msg, size, "invalid continue token '%.64s'; list again without it", token);
        return CR_EINVAL;
    }
    if ((uint32_t)t != head_tag()) {
        snprintf(msg, size,
                 "the continue token has expired: it is of an earlier head of this cluster (the "
                 "head restarted since); list again from the start");
        return CR_EINVAL;
    }
    snprintf(key, keysize, "%s", end + 1);
    return 0;
}

int page_parse_id(const char *token, const char *kind, int64_t *id, char *msg, size_t size)
{
    char key[32];
    *id = 0;
    int err = page_parse(token, kind, key, sizeof(key), msg, size);
    if (err < 0 || !key[0])
        return err;
    char *end;
    long long v = strtoll(key, &end, 10);
    if (*end || v < 0) {
        snprintf(msg, size, "invalid continue token '%.64s'; list again without it", token);
        return CR_EINVAL;
    }
    *id = v;
    return 0;
}
