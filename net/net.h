/* net: the transport every corral process speaks (DESIGN.md "Runtime").
 *
 * Layers, each usable alone:
 *   frame  4-byte big-endian length + payload; an incremental decoder that
 *          takes arbitrary chunks (pure, no I/O)
 *   auth   the cluster token file and the HMAC-SHA256 challenge proofs
 *   msg    Envelope packing, unpacking and validation (proto/corral.proto)
 *   hs     the handshake as a pure state machine: Hello, Challenge, Proof,
 *          Welcome or Refused
 *   conn   connections on one libuv loop: listeners (Unix socket, TCP),
 *          outgoing connections, read buffering, the write queue, the
 *          handshake, one callback per Envelope after it.
 *
 * docs/protocol.md is the prose version of this header and the schema. */
#ifndef CORRAL_NET_H
#define CORRAL_NET_H

#include "base/base.h"
#include "proto/corral.pb-c.h"
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* Bumped when a peer of the previous version could not ignore a change. */
#define CR_PROTOCOL_VERSION 1u
/* What a peer may send only when the other announced it (Hello.features,
 * Welcome.features): an older peer announces none and gets none. These
 * are what this build takes; $CORRAL_FEATURES (a number) announces fewer
 * (tests stand in for an older peer with 0): a feature is used only
 * where both sides announced it. */
#define CR_FEATURES ((uint32_t)CORRAL__FEATURE__FEATURE_RAW_LOG)

#define CR_FRAME_HDR 4
#define CR_FRAME_MAX_DEFAULT (16u << 20) /* 16 MiB */
/* Elements one repeated field of a message may hold (validation): a
 * paged listing's page holds no more. */
#define CR_MSG_MAX_LIST 100000
/* Before a peer has proved it holds the token, a frame is at most this:
 * the largest handshake message (a Hello with its 128-byte name, a Proof,
 * a Welcome) is a few hundred bytes. A larger one closes the connection
 * without a reply, having cost no more than this. */
#define CR_FRAME_MAX_HANDSHAKE (4u << 10)
/* Connections that have not finished the handshake, in all and from one
 * peer (a TCP address, or a Unix peer's uid): more are closed at accept. */
#define CR_UNAUTH_MAX_DEFAULT 512
#define CR_UNAUTH_PER_PEER_DEFAULT 64
#define CR_TOKEN_LEN 32 /* bytes; 64 hex digits in the file */
#define CR_NONCE_LEN 32
#define CR_PROOF_LEN 32 /* HMAC-SHA256 */

/* ------------------------------------------------------------ frame codec */

typedef struct cr_frame_dec {
    size_t max; /* largest payload accepted */
    uint8_t hdr[CR_FRAME_HDR];
    size_t hdr_have; /* header bytes seen of the current frame */
    size_t len;      /* payload length of the current frame */
    uint8_t *buf;    /* payload being assembled */
    size_t have, cap;
    bool shrink;      /* buf was big: freed at the next header unless that frame is big */
    int err;          /* sticky: once failed, every feed fails */
    uint64_t bad_len; /* the length that made it fail */
} cr_frame_dec_t;

/* max 0 means CR_FRAME_MAX_DEFAULT. */
void cr_frame_dec_init(cr_frame_dec_t *d, size_t max);
void cr_frame_dec_fini(cr_frame_dec_t *d);
/* Frees the payload buffer when no frame is half received (a connection
 * whose frames now come whole, each in one read, needs none): 0 bytes kept
 * instead of its largest frame's, up to 64 KiB, for the connection's life. */
void cr_frame_dec_trim(cr_frame_dec_t *d);

/* Feeds up to n bytes. Returns 1 with *frame and *flen set to one whole
 * payload (valid until the next call; it may point into data), 0 when all
 * n bytes were taken and no frame is complete yet, or a negative error:
 * CR_EPARSE for a zero length, CR_E2BIG for a length above max. *used says
 * how many bytes of data were taken; call again with the rest. An error is
 * final: the stream has lost its framing and the connection must go. */
int cr_frame_dec_feed(cr_frame_dec_t *d, const uint8_t *data, size_t n, size_t *used,
                      const uint8_t **frame, size_t *flen);

/* Words for the decoder's error ("frame length 0", "frame of 20000000 bytes
 * exceeds the limit of 16777216"), into buf. */
const char *cr_frame_dec_why(const cr_frame_dec_t *d, char *buf, size_t size);

/* Writes the header for a payload of len bytes; CR_E2BIG above max,
 * CR_EINVAL for 0. */
int cr_frame_hdr(uint8_t hdr[CR_FRAME_HDR], size_t len, size_t max);

/* ------------------------------------------------------------------- auth */

/* SHA-256 and HMAC-SHA256 (net/crypto.c: Nettle, not libcrypto; see there why). */
#define CR_SHA256_LEN 32
void cr_sha256(const void *data, size_t len, uint8_t out[CR_SHA256_LEN]);
void cr_hmac_sha256(const void *key, size_t klen, const void *data, size_t len,
                    uint8_t out[CR_SHA256_LEN]);
/* Whether a and b hold the same n bytes, in time that depends on n only. */
bool cr_mem_equal_ct(const void *a, const void *b, size_t n);
/* Clears memory in a way the compiler cannot drop (secrets). */
void cr_wipe(void *p, size_t n);
/* n bytes from the kernel's random generator (getrandom(2), blocking only
 * before the pool is first seeded); 0 or -errno. */
int cr_random_bytes(void *buf, size_t n);

/* 32 bytes from the kernel's random generator (cr_random_bytes). */
int cr_token_generate(uint8_t token[CR_TOKEN_LEN]);

/* Writes the token as 64 hex digits and a newline to path, created with
 * mode 0600 under a temporary name and renamed into place, so no reader
 * ever sees a partial or world-readable token. */
int cr_token_write(const char *path, const uint8_t token[CR_TOKEN_LEN]);

/* Reads a token file. Refuses (CR_EACCES) a file that group or others
 * may read, and (CR_EPARSE) anything but 64 hex digits with an optional
 * trailing newline; each refusal is one warning naming the file and
 * what to do. */
int cr_token_read(const char *path, uint8_t token[CR_TOKEN_LEN]);

/* HMAC-SHA256(token, nonce || role as 4 bytes BE || version as 4 bytes BE). */
void cr_auth_proof(const uint8_t token[CR_TOKEN_LEN], const uint8_t nonce[CR_NONCE_LEN],
                   uint32_t role, uint32_t version, uint8_t out[CR_PROOF_LEN]);

/* Whether a received proof matches, compared in constant time. A proof of
 * the wrong length never matches. */
bool cr_auth_check(const uint8_t token[CR_TOKEN_LEN], const uint8_t nonce[CR_NONCE_LEN],
                   uint32_t role, uint32_t version, const uint8_t *proof, size_t len);

/* A worker's job credential (a Hello with CREDENTIAL_JOB): what it is
 * scoped to. The head serves such a connection only this job's own
 * requests, while worker_index's current attempt is attempt. */
#define CR_JOB_ID_MAX 32
typedef struct cr_job_scope {
    char job_id[CR_JOB_ID_MAX + 1];
    uint32_t worker_index;
    uint32_t attempt;
} cr_job_scope_t;

/* HMAC-SHA256(token, "corral-job" 0 job_id 0 worker_index BE32 attempt
 * BE32): the key a worker proves instead of the cluster token. It cannot
 * be turned back into the token nor into another scope's credential. */
void cr_job_credential(const uint8_t token[CR_TOKEN_LEN], const cr_job_scope_t *s,
                       uint8_t out[CR_TOKEN_LEN]);

/* CORRAL_JOB_TOKEN, what a worker gets: "job:ID:INDEX:ATTEMPT:HEX64"
 * (format into buf of at least CR_JOB_TOKEN_TEXT_MAX; parse: 0 or
 * CR_EPARSE). */
#define CR_JOB_TOKEN_TEXT_MAX (CR_JOB_ID_MAX + 2 * CR_TOKEN_LEN + 32)
void cr_job_token_format(const cr_job_scope_t *s, const uint8_t cred[CR_TOKEN_LEN], char *buf,
                         size_t size);
int cr_job_token_parse(const char *text, cr_job_scope_t *s, uint8_t cred[CR_TOKEN_LEN]);

/* --------------------------------------------------------------- messages */

/* The payload case's name ("hello", "job_submit"); "none" or "unknown". */
const char *cr_msg_name(Corral__Envelope__BodyCase c);
/* info without its workers' environment (spec.worker.env: the submitter's
 * whole environment for corral run, most of a JobInfo), for answers whose
 * readers have no use for it: *brief, sharing the rest with info, with the
 * spec and worker spec copied into *spec and *worker; info itself when it
 * has none. */
const Corral__JobInfo *cr_msg_job_info_brief(const Corral__JobInfo *info, Corral__JobInfo *brief,
                                             Corral__JobSpec *spec, Corral__WorkerSpec *worker);

/* Who may send a message: bits of CR_FROM_*. */
enum { CR_FROM_CLIENT = 1, CR_FROM_AGENT = 2, CR_FROM_HEAD = 4 };
unsigned cr_msg_senders(Corral__Envelope__BodyCase c);

/* Checks what protobuf cannot: a body is set, enum values are known,
 * nonces and proofs have their lengths, strings and lists stay within
 * bounds, required fields of each message are present. Returns 0 or
 * CR_EPARSE with the reason in why ("job_submit: spec.worker.argv is
 * empty"). */
int cr_msg_validate(const Corral__Envelope *e, char *why, size_t size);

/* Unpacks and validates one payload. Returns the message (free with
 * cr_msg_free) or NULL with the reason in why. */
Corral__Envelope *cr_msg_unpack(const uint8_t *data, size_t len, char *why, size_t size);
void cr_msg_free(Corral__Envelope *e);

/* The plain heartbeat, decoded without malloc (issue 18: protobuf-c's
 * unpack, the validation walk and the free were four fifths of a beat's
 * instructions): an Envelope of id, reply_to and a Heartbeat of node_id
 * (under 128 bytes), incarnation, seq and free_same only, each once.
 * True with b->env what cr_msg_unpack would return for these bytes
 * (valid; b->env.heartbeat points into b, so b must outlive its use);
 * false for anything else, which cr_msg_unpack then judges. */
typedef struct cr_msg_beat {
    Corral__Envelope env;
    Corral__Heartbeat hb;
    char node_id[128];
} cr_msg_beat_t;
bool cr_msg_beat_decode(const uint8_t *data, size_t len, cr_msg_beat_t *b);

/* Packs e behind a frame header into one malloc'ed buffer (*out, *len
 * including the header). CR_E2BIG when the payload exceeds max (0: the
 * default). */
int cr_msg_pack(const Corral__Envelope *e, size_t max, uint8_t **out, size_t *len);

/* -------------------------------------------------------------- handshake */

/* "client", "agent", "head". */
const char *cr_role_name(Corral__Role r);

typedef enum cr_hs_state {
    CR_HS_CLIENT_HELLO,     /* client: about to send Hello */
    CR_HS_CLIENT_CHALLENGE, /* client: waiting for Challenge */
    CR_HS_CLIENT_WELCOME,   /* client: waiting for Welcome */
    CR_HS_SERVER_HELLO,     /* server: waiting for Hello */
    CR_HS_SERVER_PROOF,     /* server: waiting for Proof */
    CR_HS_DONE,
    CR_HS_FAILED,
} cr_hs_state_t;

/* Results of cr_hs_step, besides negative errors. */
enum { CR_HS_MORE = 0, CR_HS_OK = 1 };

/* The handshake of one connection, no I/O: the caller feeds received
 * envelopes and sends what the machine asks for. Nonces are given, so
 * tests and fuzzers are deterministic. */
typedef struct cr_hs {
    cr_hs_state_t state;
    Corral__Role role;     /* client: ours; server: the peer's, once known */
    uint32_t accept_roles; /* server: bit (1 << role) per role it takes */
    uint8_t token[CR_TOKEN_LEN];
    uint8_t nonce[CR_NONCE_LEN];      /* ours */
    uint8_t peer_nonce[CR_NONCE_LEN]; /* theirs */
    char peer_name[64];
    char why[256]; /* after a failure: what went wrong, in words */
    /* storage for the one message the machine asks to send */
    Corral__Envelope out;
    union {
        Corral__Hello hello;
        Corral__Challenge challenge;
        Corral__Proof proof;
        Corral__Welcome welcome;
        Corral__Refused refused;
    } body;
    uint8_t out_bytes[CR_PROOF_LEN];
    bool has_out;
    uint64_t max_frame;     /* server: announced in Welcome */
    uint32_t features;      /* ours, announced in Hello or Welcome (CR_FEATURES) */
    uint32_t peer_features; /* the peer's, once its Hello or Welcome came */
    const char *name;       /* ours, announced in Hello or Welcome; borrowed */
    /* a job credential: the client sets it after init (token is then the
     * credential); the server learns it from the Hello (and keys the
     * proofs with the credential it derives from the cluster token) */
    bool job;
    cr_job_scope_t scope;
} cr_hs_t;

void cr_hs_init_client(cr_hs_t *hs, const uint8_t token[CR_TOKEN_LEN],
                       const uint8_t nonce[CR_NONCE_LEN], Corral__Role role, const char *name);
/* accept_roles: bits (1u << CORRAL__ROLE__ROLE_CLIENT) etc. */
void cr_hs_init_server(cr_hs_t *hs, const uint8_t token[CR_TOKEN_LEN],
                       const uint8_t nonce[CR_NONCE_LEN], uint32_t accept_roles, const char *name,
                       uint64_t max_frame);

/* Client: prepares Hello in hs->out (has_out set). */
void cr_hs_start(cr_hs_t *hs);

/* Feeds one received envelope. Afterwards, when hs->has_out, send hs->out
 * (a Challenge, Proof, Welcome, or on failure Refused). Returns CR_HS_MORE,
 * CR_HS_OK (done: every later envelope is the application's), or a
 * negative error with hs->why saying what went wrong: CR_EACCES (token),
 * CR_EABI (version), CR_EPARSE (out of order or malformed). After an
 * error, send the Refused if there is one and close. */
int cr_hs_step(cr_hs_t *hs, const Corral__Envelope *in);

/* ------------------------------------------------------------ connections */

typedef struct cr_net cr_net_t;
typedef struct cr_conn cr_conn_t;

typedef struct cr_net_callbacks {
    /* The handshake finished; the connection may send and receive. */
    void (*on_ready)(cr_conn_t *c, void *data);
    /* One envelope after the handshake; borrowed, freed after return.
     * The callback may send on c, close c, or close the whole net. */
    void (*on_message)(cr_conn_t *c, const Corral__Envelope *e, void *data);
    /* The connection is going away: err 0 for an orderly close by either
     * side, else why (CR_EACCES refused, CR_EPARSE malformed, -ECONNREFUSED,
     * ...). c may not be used after this returns. Called once for every
     * connection cr_net_connect returned or on_ready announced. */
    void (*on_close)(cr_conn_t *c, int err, void *data);
    /* Optional: everything queued on c has been written. Bulk senders (log
     * streams) send the next piece from here, keeping cr_conn_queued()
     * well below max_write_queue, which closes a connection that passes
     * it. */
    void (*on_drain)(cr_conn_t *c, void *data);
} cr_net_callbacks_t;

typedef struct cr_net_config {
    const uint8_t *token;          /* CR_TOKEN_LEN bytes; copied */
    const char *name;              /* ours, for the peer's logs; copied */
    size_t max_frame;              /* 0: CR_FRAME_MAX_DEFAULT */
    uint32_t handshake_timeout_ms; /* 0: 5000 */
    size_t max_write_queue;        /* bytes queued to one peer; 0: 64 MiB */
    uint32_t accept_roles;         /* listening side; 0: clients and agents */
    uint32_t max_unauth;           /* 0: CR_UNAUTH_MAX_DEFAULT */
    uint32_t max_unauth_per_peer;  /* 0: CR_UNAUTH_PER_PEER_DEFAULT */
    /* TLS 1.3 (docs/protocol.md "TLS"; net/tls.h), all optional. A
     * listening side's certificate (then its chain) and key, PEM text, for
     * the listeners started with cr_net_listen_tcp_tls(..., true). A
     * connecting side's pin, the SHA-256 of the head's certificate
     * (CR_TLS_FP_LEN bytes), or its CA certificates (PEM): with either,
     * every TCP connection it opens speaks TLS. Any of them loads the TLS
     * shim (libcorral_tls.so) in cr_net_new, which fails (a warning says
     * why) when it cannot be loaded or the PEM is bad. Copied. */
    const char *tls_cert_pem, *tls_key_pem;
    const uint8_t *tls_pin;
    const char *tls_ca_pem;
    /* Connecting side: token is this scope's job credential, not the
     * cluster token (a worker's CORRAL_JOB_TOKEN); copied. NULL: none. */
    const cr_job_scope_t *job;
    /* Listening side: an agent's connection whose reads are small (its
     * heartbeats) is read in batches, every connection of the batch in one
     * turn, at most once every batch_ms (docs/cluster.md "Membership"): a
     * head woken by every beat spends more on the wakeups than on the
     * beats. A read of bulk (16 KiB or more, a raw log chunk) puts it back
     * to being read at once until its reads are small again. 0: every
     * connection is read at once. */
    uint32_t batch_ms;
} cr_net_config_t;

/* One per process and loop: the token, the callbacks, every listener and
 * connection. Returns NULL only on a bad config (a warning says why). */
cr_net_t *cr_net_new(uv_loop_t *loop, const cr_net_config_t *cfg, const cr_net_callbacks_t *cb,
                     void *data);

/* Closes every listener and connection (on_close runs for each), then
 * frees the net from the last close callback and calls done (may be
 * NULL). Run the loop to let it finish. */
void cr_net_close(cr_net_t *n, void (*done)(void *data), void *data);

/* Listens on a Unix socket (an existing socket file at path is replaced;
 * the file is created 0600 and removed on close). */
int cr_net_listen_unix(cr_net_t *n, const char *path);

/* Listens on TCP host:port (host NULL: 127.0.0.1; port 0: any free port;
 * *bound, when not NULL, gets the port in use). */
int cr_net_listen_tcp(cr_net_t *n, const char *host, int port, int *bound);
/* The same, with tls every connection accepted there runs TLS 1.3 before
 * the handshake (the net needs tls_cert_pem and tls_key_pem); a peer that
 * speaks plain frames gets a Refused saying so. */
int cr_net_listen_tcp_tls(cr_net_t *n, const char *host, int port, int *bound, bool tls);

/* Connects to an address: "unix:/path", "/path" (a Unix socket), or
 * "host:port" / "[v6]:port" (TCP). A host name is looked up without
 * blocking the loop and its first IPv4 address is used (else its first
 * address); a failed lookup closes with -EHOSTUNREACH. The handshake runs
 * as role; on_ready or on_close says how it ended (the deadline covers
 * lookup, connect and handshake). *out (may be NULL) gets the connection,
 * valid until on_close. */
int cr_net_connect(cr_net_t *n, const char *address, Corral__Role role, cr_conn_t **out);

/* How many connections are read in batches now (cr_net_config_t.batch_ms),
 * how many batches were read so far, and how many of their receives went
 * through io_uring (net/uring.h): for tests and benchmarks. */
void cr_net_batch_stats(const cr_net_t *n, size_t *conns, uint64_t *batches, uint64_t *ring_recvs);

/* The largest frame this net sends or takes after the handshake
 * (cr_net_config_t.max_frame): a server sizes a reply's pages by it. */
size_t cr_net_max_frame(const cr_net_t *n);

/* Queues e for sending. Fails with -ENOTCONN before on_ready or once the
 * connection closes, CR_E2BIG for a message above the limit, -ENOBUFS when
 * the peer reads too slowly (the connection is then closed). e is only
 * read. */
int cr_conn_send(cr_conn_t *c, const Corral__Envelope *e);
/* cr_conn_send for job output (a LogChunk with data): while the net is
 * held (cr_net_hold) it is written at once unless frames are already
 * held for c, which it then follows. Output acknowledges nothing that a
 * commit could undo; its eof (which may carry a job's final state) goes
 * with cr_conn_send, held as any answer. */
int cr_conn_send_output(cr_conn_t *c, const Corral__Envelope *e);

/* Sends the LogChunk e (data empty, eof unset) with len bytes (> 0) of
 * the file fd from off as its data; e is borrowed and left as it was.
 * With raw set, where both sides announced FEATURE_RAW_LOG, the chunk
 * goes as a frame with raw_len and the bytes, read from the file straight
 * after it into the same buffer (no protobuf copy here, none at the
 * receiver); otherwise the bytes are read into the message (the framing
 * every peer takes). Either way it is queued as cr_conn_send_output's
 * (written at once while the net is held unless frames are held for c;
 * TLS; cr_conn_queued). raw is the caller's word that the bytes cannot
 * change between this read and its check (a bound punching the file
 * could make them zeros: see head/follow.c raw_ok). *copied: how many
 * bytes went through this process's memory. 0, or an error as
 * cr_conn_send's. */
int cr_conn_send_log_file(cr_conn_t *c, Corral__Envelope *e, int fd, uint64_t off, size_t len,
                          bool raw, size_t *copied);
/* Receiving side: pick (NULL: none) is asked at each raw chunk's header
 * for a descriptor its bytes go to instead of on_message (-1: on_message
 * as usual). They are written there whole, what is still in the socket
 * moved by splice(2) where the descriptor is a pipe (never read into this
 * process); a chunk's dropped is still told to on_message, with no data.
 * The descriptor must be blocking (stdout is); a client's private loop
 * only: the loop waits on it. */
void cr_conn_set_raw_fd(cr_conn_t *c, int (*pick)(void *arg, const Corral__LogChunk *ch),
                        void *arg);
/* A raw log chunk e (a LogChunk with no data) of len bytes from memory:
 * while nothing is queued or held for c, its header and data are written
 * in one writev as far as the socket takes them, and only the rest is
 * copied into the queue (written at once while the net is held unless
 * frames are held for c, as cr_conn_send_output's). For the head's relay
 * of remote output to its followers (head/follow.c follow_relay): no read
 * of the file it was just written to. c must take raw chunks
 * (cr_conn_can_send_raw), else CR_EINVAL. *copied: bytes copied into the
 * queue. 0, or an error as cr_conn_send's. */
int cr_conn_send_log_bytes(cr_conn_t *c, Corral__Envelope *e, const uint8_t *data, size_t len,
                           size_t *copied);
/* Whether raw log chunks may go to c (cr_conn_send_log_file). */
bool cr_conn_can_send_raw(const cr_conn_t *c);
/* Raw log chunks to c go by sendfile(2) while nothing is queued to it
 * (and it takes raw chunks, without TLS): their bytes leave the file's
 * page cache by reference, never copied in this process. For a link whose
 * sender waits for the drain once anything is queued (an agent's to the
 * head, docs/protocol.md "Raw log chunks"). */
void cr_conn_set_sendfile(cr_conn_t *c, bool on);
/* Whether raw chunks to c go by sendfile now (set, raw, no TLS). */
bool cr_conn_can_sendfile(const cr_conn_t *c);
/* Bytes of raw log chunks this process sent (sent_kernel of them by
 * sendfile, never copied here) and received. */
typedef struct cr_raw_stats {
    uint64_t sent, sent_kernel, received;
} cr_raw_stats_t;
void cr_net_raw_stats(cr_raw_stats_t *out);

/* Closes one connection; on_close follows with err. */
void cr_conn_close(cr_conn_t *c, int err);

/* The peer as seen from here ("unix:/run/x.sock#3", "127.0.0.1:4242"). */
const char *cr_conn_peer(const cr_conn_t *c);
/* Why the connection's TLS or corral handshake failed, in words ("the
 * head's certificate has fingerprint ..., not the pinned ..."); "" when it
 * did not. Valid in on_close. */
const char *cr_conn_why(const cr_conn_t *c);
/* "TLSv1.3" for a connection that runs TLS, once its TLS handshake is
 * done; NULL otherwise. */
const char *cr_conn_tls(const cr_conn_t *c);
/* The IP address of a TCP connection's peer ("10.0.0.2"), or of this end
 * (the address the peer reached us at), into buf. Returns 0, or -ENOTSUP
 * for a Unix socket, or a negative libuv error. */
int cr_conn_peer_ip(const cr_conn_t *c, char *buf, size_t size);
int cr_conn_local_ip(const cr_conn_t *c, char *buf, size_t size);
/* The peer's role once the handshake ended (the server's side), or ours. */
Corral__Role cr_conn_role(const cr_conn_t *c);
bool cr_conn_is_ready(const cr_conn_t *c);
/* Server side, once ready: the scope of the job credential the peer
 * proved, NULL when it proved the cluster token. */
const cr_job_scope_t *cr_conn_job_scope(const cr_conn_t *c);
/* A job credential for s from this net's token (an agent's, for the
 * workers it starts). */
void cr_net_job_credential(const cr_net_t *n, const cr_job_scope_t *s, uint8_t out[CR_TOKEN_LEN]);
void cr_conn_set_data(cr_conn_t *c, void *data);
void *cr_conn_data(const cr_conn_t *c);
/* A fresh request id for this connection (1, 2, ...), for Envelope.id. */
uint64_t cr_conn_next_id(cr_conn_t *c);
/* Answers request reply_to with Error{code, message}: the common failure
 * reply of every handler. code is a negative corral error code. */
int cr_conn_reply_error(cr_conn_t *c, uint64_t reply_to, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Holds every frame sent from now on (each connection's in one buffer)
 * until cr_net_flush writes them, one write per connection: a head sends
 * the answers to a message only once what they acknowledge is committed.
 * Nests; a connection closed meanwhile still gets its frames as far as a
 * non-blocking write takes them. */
void cr_net_hold(cr_net_t *n);
void cr_net_flush(cr_net_t *n);
/* cr_net_flush after what the held frames acknowledge could not be made
 * durable: every held answer to a request (Envelope.reply_to set) is
 * replaced by Error{code, msg}; the other frames go as they are. */
void cr_net_flush_failed(cr_net_t *n, int code, const char *msg);
/* Bytes queued whose write has not completed yet. */
size_t cr_conn_queued(const cr_conn_t *c);
/* Asks the kernel for a send buffer of at least bytes on c's socket
 * (SO_SNDBUF; the kernel caps it at net.core.wmem_max): a bulk sender
 * (log streams) then moves more per wakeup of its peer. Never shrinks
 * it. 0 or a negative libuv error; nothing on a detached connection. */
int cr_conn_set_send_buffer(cr_conn_t *c, int bytes);

/* Test seam: a connection with no socket and no net, as the server side
 * of a peer of the given role that finished its handshake (fuzz targets
 * and unit tests drive a head's handlers with it). cr_conn_send and
 * cr_conn_reply_error check the envelope as for a real connection, pack
 * it, unpack it again (a message that does not decode aborts: a bug of
 * the sender) and pass the decoded copy, borrowed, to sink (may be NULL).
 * cr_conn_role, cr_conn_peer ("detached:ROLE#N"), cr_conn_set_data,
 * cr_conn_data, cr_conn_next_id and cr_conn_is_ready work as usual;
 * cr_conn_queued is 0; on_drain never runs. cr_conn_close only marks it
 * closed (later sends fail with -ENOTCONN) and calls no on_close: the
 * caller does what its on_close would. Free it with cr_conn_free_detached
 * (closed or not), never otherwise. */
cr_conn_t *cr_conn_new_detached(Corral__Role role,
                                void (*sink)(void *arg, const Corral__Envelope *e), void *arg);
void cr_conn_free_detached(cr_conn_t *c);

#endif
