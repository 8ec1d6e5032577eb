/* corral list's side of the task protocol's INFO kind (docs/actors.md). */
#ifndef CORRAL_CLI_TASK_INFO_H
#define CORRAL_CLI_TASK_INFO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define CLI_TASK_HDR 16                /* length, kind, flags, 0, id */
#define CLI_TASK_REPLY_MAX (16u << 20) /* the most an INFO answer may be */
#define CLI_TASK_HELLO 1
#define CLI_TASK_WELCOME 2
#define CLI_TASK_RETURN 4
#define CLI_TASK_BYE 7
#define CLI_TASK_INFO 8

/* Writes one frame of kind and id with payload into out (size bytes);
 * returns its length, 0 when it does not fit. */
size_t cli_task_frame(uint8_t *out, size_t size, uint8_t kind, uint64_t id, const char *payload);
/* hdr: a frame's first 4 bytes. 0 with *rest (the bytes after them), or
 * -1 when the length is below a header's or above CLI_TASK_REPLY_MAX. */
int cli_task_header(const uint8_t *hdr, uint32_t *rest);
/* Checks a whole frame (len bytes, header included) as the RETURN of INFO
 * request id: 0 with *out the answer ({"owner", "total", "items"}, the
 * caller json_decref()s it), or -1 with why (the owner's own reason when
 * it refused the request). */
int cli_task_info_reply(const uint8_t *frame, size_t len, uint64_t id, json_t **out, char *why,
                        size_t whysize);

#endif
