/* The INFO exchange of the task protocol (docs/actors.md "Wire"), as
 * corral list speaks it to an owner: the request frame it sends and the
 * check of the answer it gets. Pure: bytes in, JSON out; the socket is
 * list_cmd.c's. */
#include "task_info.h"
#include <stdio.h>
#include <string.h>

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

size_t cli_task_frame(uint8_t *out, size_t size, uint8_t kind, uint64_t id, const char *payload)
{
    size_t n = strlen(payload);
    if (size < CLI_TASK_HDR + n || n > CLI_TASK_REPLY_MAX)
        return 0;
    put_be32(out, (uint32_t)(CLI_TASK_HDR - 4 + n));
    out[4] = kind;
    out[5] = out[6] = out[7] = 0;
    for (int i = 0; i < 8; i++)
        out[8 + i] = (uint8_t)(id >> (56 - 8 * i));
    memcpy(out + CLI_TASK_HDR, payload, n);
    return CLI_TASK_HDR + n;
}

int cli_task_header(const uint8_t *hdr, uint32_t *rest)
{
    uint32_t n = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
    if (n < CLI_TASK_HDR - 4 || n > CLI_TASK_REPLY_MAX)
        return -1;
    *rest = n;
    return 0;
}

int cli_task_info_reply(const uint8_t *frame, size_t len, uint64_t id, json_t **out, char *why,
                        size_t whysize)
{
    *out = NULL;
    uint32_t rest;
    if (len < CLI_TASK_HDR || cli_task_header(frame, &rest) < 0 || rest != len - 4) {
        snprintf(why, whysize, "a frame whose length field does not match its %zu bytes", len);
        return -1;
    }
    if (frame[4] != CLI_TASK_RETURN || get_be64(frame + 8) != id) {
        snprintf(why, whysize,
                 "a frame of kind %u for request %llu, not the RETURN of request %llu", frame[4],
                 (unsigned long long)get_be64(frame + 8), (unsigned long long)id);
        return -1;
    }
    const uint8_t *p = frame + CLI_TASK_HDR;
    size_t n = len - CLI_TASK_HDR;
    if (n < 1) {
        snprintf(why, whysize, "an empty RETURN");
        return -1;
    }
    if (p[0] != 0) {
        /* the owner's reason, printable bytes only */
        size_t k = 0;
        for (size_t i = 1; i < n && k + 1 < whysize; i++)
            why[k++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
        why[k] = 0;
        return -1;
    }
    json_error_t e;
    json_t *j = json_loadb((const char *)p + 1, n - 1, JSON_REJECT_DUPLICATES, &e);
    json_t *items = j ? json_object_get(j, "items") : NULL;
    if (!json_is_object(j) || !json_is_array(items) ||
        !json_is_integer(json_object_get(j, "total")) ||
        !json_is_object(json_object_get(j, "owner"))) {
        snprintf(why, whysize,
                 "an answer that is not {\"owner\": {...}, \"total\": N, \"items\": [...]}");
        json_decref(j);
        return -1;
    }
    size_t i;
    json_t *v;
    json_array_foreach(items, i, v)
    {
        if (!json_is_object(v) || !json_is_string(json_object_get(v, "id"))) {
            snprintf(why, whysize, "item %zu is not an object with an \"id\"", i);
            json_decref(j);
            return -1;
        }
    }
    *out = j;
    return 0;
}
