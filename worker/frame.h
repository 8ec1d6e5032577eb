/* The task protocol's codec (docs/actors.md "Wire"), shared by the worker
 * loop (worker/worker.c) and the owner (client/tasks.c): frame headers,
 * the C encoding of CALL and RETURN, HELLO's JSON, a byte buffer, and a
 * reader that takes frames (and the descriptors that come with them) from
 * a stream socket. Pure but for crt_conn_* (which read and write). */
#ifndef CORRAL_WORKER_FRAME_H
#define CORRAL_WORKER_FRAME_H

#include "base/base.h"
#include <corral/tasks.h>
#include <stdbool.h>
#include <stdint.h>

#define CRT_HDR 16
#define CRT_MAX_FRAME CORRAL_TASK_MAX_FRAME
/* Before HELLO (and for HELLO itself) a frame is at most this long. */
#define CRT_HELLO_MAX (64u << 10)
/* Descriptors queued on one connection, at most. */
#define CRT_MAX_FDS 16
#define CRT_NONCE_LEN 32

enum crt_kind {
    CRT_HELLO = 1,
    CRT_WELCOME = 2,
    CRT_CALL = 3,
    CRT_RETURN = 4,
    CRT_CANCEL = 5,
    CRT_CHALLENGE = 6,
    CRT_BYE = 7,
    CRT_FETCH = 9,
};
#define CRT_FLAG_FD 1u
/* RETURN status 0 whose value stayed in the worker's object store (a
 * large result on TCP): the payload after the status byte is the value's
 * 8-byte size and the object's 8-byte id, both big-endian; the receiver
 * FETCHes it in chunks. */
#define CRT_FLAG_OBJ 2u
/* FETCH's payload: the object's id (8 bytes), an offset (8), a length (4,
 * 1 to CRT_FETCH_CHUNK; 0: drop the object unread), all big-endian. Its
 * answer is a RETURN of the same id: status 0 and exactly those bytes, or
 * status 2 and why. The FETCH that reaches the value's end drops it. */
#define CRT_FETCH_CHUNK (8u << 20)
#define CRT_FETCH_LEN 20

/* RETURN's status byte */
enum { CRT_OK = 0, CRT_APP_ERROR = 1, CRT_SYS_ERROR = 2 };

typedef struct crt_hdr {
    uint8_t kind, flags;
    uint64_t id;
    uint32_t len; /* of the payload */
} crt_hdr_t;

/* Decodes the 16 bytes at p: 0; CR_EPARSE for a length below 12 or
 * nonzero reserved bytes; CR_E2BIG for a frame over max (a payload over
 * max - 12). */
int crt_hdr_parse(const uint8_t p[CRT_HDR], uint32_t max, crt_hdr_t *h);
void crt_hdr_put(uint8_t p[CRT_HDR], uint8_t kind, uint8_t flags, uint64_t id, uint32_t plen);
const char *crt_kind_name(unsigned kind);

/* A growable byte buffer; off: what was consumed from the front. */
typedef struct crt_bytes {
    uint8_t *p;
    size_t len, cap, off;
} crt_bytes_t;
void crt_bytes_reserve(crt_bytes_t *b, size_t more);
void crt_bytes_add(crt_bytes_t *b, const void *data, size_t n);
void crt_bytes_free(crt_bytes_t *b);
/* Drops the consumed front (moves the rest down). */
void crt_bytes_compact(crt_bytes_t *b);

/* FETCH (CRT_FETCH_LEN bytes): 0, or CR_EPARSE (another length, a length
 * over CRT_FETCH_CHUNK). */
int crt_fetch_parse(const uint8_t *p, size_t n, uint64_t *oid, uint64_t *off, uint32_t *len);
void crt_fetch_add(crt_bytes_t *b, uint64_t id, uint64_t oid, uint64_t off, uint32_t len);

/* Appends a whole frame: header, then the payload's parts. */
void crt_frame_add(crt_bytes_t *b, uint8_t kind, uint8_t flags, uint64_t id, const void *p1,
                   size_t n1, const void *p2, size_t n2);
/* A CALL's payload: name, then args (C encoding). CR_EINVAL: a name empty
 * or over CORRAL_TASK_NAME_MAX; CR_E2BIG: over the frame's limit. */
int crt_call_add(crt_bytes_t *b, uint64_t id, uint8_t flags, const char *name, const void *args,
                 size_t len);
/* Splits a CALL's payload: name (not terminated) and args. CR_EPARSE:
 * shorter than its name length, an empty name, a name with a NUL. */
int crt_call_parse(const uint8_t *p, size_t n, const char **name, size_t *name_len,
                   const uint8_t **args, size_t *args_len);
/* A RETURN: status byte, then the value (or error text). */
void crt_return_add(crt_bytes_t *b, uint64_t id, uint8_t flags, uint8_t status, const void *v,
                    size_t n);
/* CANCEL's payload: the 8-byte big-endian id of the CALL to cancel. 0 or
 * CR_EPARSE (not 8 bytes). A RETURN of a call cancelled before it ran is
 * CRT_SYS_ERROR with this text. */
int crt_cancel_parse(const uint8_t *p, size_t n, uint64_t *id);
void crt_cancel_add(crt_bytes_t *b, uint64_t id);
#define CRT_CANCELLED_TEXT "cancelled"
/* CR_EPARSE: empty, or an unknown status. */
int crt_return_parse(const uint8_t *p, size_t n, uint8_t *status, const uint8_t **v, size_t *vn);

/* HELLO's fields (borrowed strings are copied: free with crt_hello_free).
 * nonce: the connecting side's own challenge (TCP), 64 hex digits, that
 * the accepting side answers with WELCOME's mac. */
typedef struct crt_hello {
    char *role, *runtime, *lease, *address, *node, *mac, *nonce;
    int64_t pid;
} crt_hello_t;
/* Parses HELLO's JSON (at most CRT_HELLO_MAX bytes): CR_EPARSE when it
 * is not a JSON object, or a field has the wrong type, or role is not
 * "worker" or "caller"; why says which. */
int crt_hello_parse(const uint8_t *p, size_t n, crt_hello_t *h, char *why, size_t wsize);
void crt_hello_free(crt_hello_t *h);
/* The hex HMAC-SHA256 (65 bytes with the NUL) of nonce under key. */
void crt_mac_hex(const uint8_t *key, size_t klen, const uint8_t nonce[CRT_NONCE_LEN], char out[65]);
/* Whether mac (as sent) is the right one, in constant time. */
bool crt_mac_ok(const uint8_t *key, size_t klen, const uint8_t nonce[CRT_NONCE_LEN],
                const char *mac);

/* Ref arguments' encoding (corral_task_submit_args, corral_args_get):
 * a 4-byte big-endian count N (1 to CORRAL_TASK_MAX_ARG_REFS + 1), then N
 * items, each an 8-byte big-endian length and that many bytes. Item 0 is
 * the caller's bytes, items 1.. the refs' values in order. */
#define CRT_ARGS_HDR 4
#define CRT_ARG_HDR 8
/* Appends the encoding of n parts (p[i], len[i]) to b. */
void crt_args_add(crt_bytes_t *b, const void *const *p, const size_t *len, size_t n);
/* How long that encoding is. */
size_t crt_args_size(const size_t *len, size_t n);

/* Mutual authentication on TCP (docs/actors.md "Wire"): the accepting
 * side's CHALLENGE nonce s, answered by HELLO's mac (crt_mac_hex), and the
 * connecting side's nonce c (HELLO's "nonce"), answered by WELCOME's mac:
 * HMAC-SHA256 under the secret of "corral-welcome" || s || c, a message no
 * connecting side ever MACs (so a fake listener cannot get it by passing
 * the nonce on as its own CHALLENGE to another worker). */
#define CRT_WELCOME_LABEL "corral-welcome"
void crt_welcome_mac_hex(const uint8_t *key, size_t klen, const uint8_t snonce[CRT_NONCE_LEN],
                         const uint8_t cnonce[CRT_NONCE_LEN], char out[65]);
bool crt_welcome_mac_ok(const uint8_t *key, size_t klen, const uint8_t snonce[CRT_NONCE_LEN],
                        const uint8_t cnonce[CRT_NONCE_LEN], const char *mac);
/* Decodes a nonce as sent (64 hex digits): 0, or CR_EPARSE (NULL, wrong
 * length, not hex). */
int crt_nonce_parse(const char *hex, uint8_t out[CRT_NONCE_LEN]);

/* WELCOME's fields (copied: free with crt_welcome_free). */
typedef struct crt_welcome {
    char *runtime, *mac;
    int64_t pid;
} crt_welcome_t;
/* Parses WELCOME's JSON (at most CRT_HELLO_MAX bytes): CR_EPARSE when it
 * is not a JSON object or a field has the wrong type; why says which. */
int crt_welcome_parse(const uint8_t *p, size_t n, crt_welcome_t *w, char *why, size_t wsize);
void crt_welcome_free(crt_welcome_t *w);
/* A WELCOME received over TCP proves the secret key back (its mac of the
 * two nonces): 0; CR_EPARSE when it does not parse, CR_EACCES when its
 * mac is missing or wrong, with why ("a bad WELCOME (...)", "its
 * WELCOME's mac is missing") for the caller to put after who sent it. */
int crt_welcome_check(const uint8_t *p, size_t n, const uint8_t *key, size_t klen,
                      const uint8_t snonce[CRT_NONCE_LEN], const uint8_t cnonce[CRT_NONCE_LEN],
                      char *why, size_t wsize);

/* ---- one stream socket's reading side ---- */
typedef struct crt_reader {
    crt_bytes_t in;
    int fds[CRT_MAX_FDS];
    unsigned nfds;
    uint32_t max; /* the frame limit now: CRT_HELLO_MAX until HELLO */
    size_t want;  /* bytes the frame begun in the buffer still needs */
} crt_reader_t;
void crt_reader_init(crt_reader_t *r, uint32_t max);
void crt_reader_fini(crt_reader_t *r); /* closes queued descriptors */
/* One recvmsg into the buffer (descriptors queued): bytes read (0: end of
 * stream), or -errno (-EAGAIN on a non-blocking socket with nothing), or
 * CR_EPARSE when more descriptors came than CRT_MAX_FDS or on a TCP
 * socket. */
ssize_t crt_reader_fill(crt_reader_t *r, int sock, bool unix_sock);
/* The same with recvmsg flags (MSG_DONTWAIT: -EAGAIN when nothing came). */
ssize_t crt_reader_fill_flags(crt_reader_t *r, int sock, bool unix_sock, int flags);
/* The next whole frame in the buffer: 1 with *h and *payload (borrowed
 * until the next fill) and, with CRT_FLAG_FD, *fd (now the caller's; -1
 * else); 0 when no whole frame is there; CR_EPARSE / CR_E2BIG for a bad
 * header, or a frame whose descriptor did not come. */
int crt_reader_next(crt_reader_t *r, crt_hdr_t *h, const uint8_t **payload, int *fd);

/* Writes all of b from b->off (blocking socket; a non-blocking one may
 * return -EAGAIN with part written, b->off says how much), sending fd
 * (-1 none) with the first byte. 0 or -errno. */
int crt_write_all(int sock, crt_bytes_t *b, int fd);
/* One frame of kind (no flags, id 0, body p of n bytes) written whole on
 * a blocking socket: the handshake's HELLO, CHALLENGE and WELCOME. 0 or a
 * negative code. */
int crt_send_frame(int sock, uint8_t kind, const void *p, size_t n);
/* One sendmsg of len bytes at p (MSG_NOSIGNAL | flags), with fd passed
 * (SCM_RIGHTS) when it is not -1: what it returns. */
ssize_t crt_send(int sock, const void *p, size_t len, int fd, int flags);

/* A sealed read-only memfd holding n bytes of data (and its mapping,
 * read-only, in *map when map is not NULL): the descriptor or -errno. */
int crt_memfd_from(const void *data, size_t n, void **map);
/* A writable memfd of n bytes with its mapping; seal it with
 * crt_memfd_seal once written. The descriptor or -errno. */
int crt_memfd_new(size_t n, void **map);
int crt_memfd_seal(int fd);
/* Maps a received memfd read-only: 0 with *map and *n (a size-0 memfd:
 * *map NULL), or -errno; the caller keeps fd. */
int crt_memfd_map(int fd, void **map, size_t *n);

/* A C actor's lease job's command ends with the words "--corral-actor
 * CLASS DIR OWNER" (docs/actors.md "Named actors from C"): its class, the
 * directory whose socket "s" it listens on for other callers, and where
 * its owner listens (to ask for the actor's TCP address). Parses them out
 * of cmd (argv joined by spaces): 0, or CR_EPARSE when the words are not
 * there after a program, the class is longer than CORRAL_TASK_NAME_MAX or
 * has a '.', dir is not an absolute path of at most CRT_LISTEN_DIR_MAX
 * bytes without "..", or owner is longer than CRT_OWNER_ADDR_MAX. */
#define CRT_ACTOR_ARG "--corral-actor"
#define CRT_LISTEN_DIR_MAX 100
#define CRT_OWNER_ADDR_MAX 255
int crt_actor_cmd_parse(const char *cmd, char cls[CORRAL_TASK_NAME_MAX + 1],
                        char dir[CRT_LISTEN_DIR_MAX + 1], char owner[CRT_OWNER_ADDR_MAX + 1]);
/* The request a caller sends an actor's owner (a CALL of this name whose
 * args are the actor's DIR): RETURN status 0 with the actor worker's
 * "tcp:HOST:PORT", or status 2 and why. */
#define CRT_ACTOR_ADDRESS_CALL "corral.actor_address"

#endif
