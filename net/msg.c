/* Envelopes: packing behind a frame header, unpacking, and the checks
 * protobuf cannot make. Every received message passes cr_msg_validate
 * before any handler sees it, so handlers may rely on what it promises:
 * a body is set, enums hold known values, nonces and proofs have their
 * lengths, quantities are named and not negative, lists are bounded, and
 * each message's required fields (per the table below) are present. */
#include "net/net.h"
#include <stdarg.h>
#include <stdio.h>

#define MAX_LIST CR_MSG_MAX_LIST /* elements in one repeated field */
#define MAX_STRING (4u << 20)    /* bytes in one string (node JSON is the big one) */
#define MAX_WORKERS 100000       /* in one job */

#define MAX_DEPTH 32 /* field names kept for a message's path */

/* The path to the current message ("spec.worker") is kept as the field
 * names walked through, and written out only when a check fails: a
 * message that passes (nearly all) formats nothing (issue 18). */
typedef struct check_ctx {
    char *why;
    size_t size;
    const char *body; /* the body's name, set for its own checks (ck_*) */
    const char *names[MAX_DEPTH];
    unsigned depth; /* may pass MAX_DEPTH: the deeper names are not kept */
} check_ctx_t;

static int fail(check_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(check_ctx_t *c, const char *fmt, ...)
{
    char path[256];
    size_t at = 0;
    path[0] = '\0';
    if (c->body)
        at = (size_t)snprintf(path, sizeof(path), "%s", c->body);
    for (unsigned i = 0; i < c->depth && at < sizeof(path); i++)
        at += (size_t)snprintf(path + at, sizeof(path) - at, "%s%s", at ? "." : "",
                               i < MAX_DEPTH ? c->names[i] : "...");
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (path[0])
        snprintf(c->why, c->size, "%s: %s", path, msg);
    else
        snprintf(c->why, c->size, "%s", msg);
    return CR_EPARSE;
}

/* ---- the generic walk: every field of every message, from the schema ---- */

/* Whether s is well-formed UTF-8 (no overlong forms, no surrogates, nothing
 * above U+10FFFF), as proto3 requires of strings and JSON of its text.
 * len is strlen(s): ASCII, nearly all of what corral sends, is checked
 * eight bytes at a time. */
static bool is_utf8(const unsigned char *s, size_t len)
{
    size_t at = 0;
    for (; at + 8 <= len; at += 8) {
        uint64_t w;
        memcpy(&w, s + at, sizeof(w));
        if (w & 0x8080808080808080ull)
            break;
    }
    s += at;
    while (*s) {
        unsigned char c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        int n = (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (n < 0 || c == 0xc0 || c == 0xc1 || c > 0xf4)
            return false;
        uint32_t cp = c & (0x3f >> n);
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i] & 0x3f);
        }
        static const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
        if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        s += n + 1;
    }
    return true;
}

static int walk(check_ctx_t *c, const ProtobufCMessage *m);

static int check_value(check_ctx_t *c, const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)p;
        if (!protobuf_c_enum_descriptor_get_value(f->descriptor, v))
            return fail(c, "%s: unknown value %d", f->name, v);
        return 0;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        if (!s)
            return 0;
        size_t len = strlen(s);
        if (len > MAX_STRING)
            return fail(c, "%s: string longer than %u bytes", f->name, MAX_STRING);
        if (!is_utf8((const unsigned char *)s, len))
            return fail(c, "%s: not valid UTF-8", f->name);
        return 0;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(ProtobufCMessage *const *)p;
        if (!sub)
            return 0;
        if (c->depth < MAX_DEPTH)
            c->names[c->depth] = f->name;
        c->depth++;
        int err = walk(c, sub);
        if (!err)
            c->depth--;
        return err;
    }
    default:
        return 0;
    }
}

static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    default:
        return 0; /* nothing to check in numbers and bytes */
    }
}

static int walk(check_ctx_t *c, const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    if (d == &corral__quantity__descriptor) {
        const Corral__Quantity *q = (const Corral__Quantity *)m;
        if (!q->name || !q->name[0])
            return fail(c, "a quantity without a resource name");
        if (q->amount < 0)
            return fail(c, "%s: negative amount %lld", q->name, (long long)q->amount);
    }
    /* unknown fields are kept for newer peers' additions, but field
     * number 0 does not exist: protobuf-c reads it from an overlong tag
     * and then cannot read back what it packs (found by fuzz_net_msg) */
    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return fail(c, "a field numbered 0");
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        if (f->label != PROTOBUF_C_LABEL_REPEATED) {
            int err = check_value(c, f, base + f->offset);
            if (err)
                return err;
            continue;
        }
        size_t n = *(const size_t *)(base + f->quantifier_offset);
        if (n > MAX_LIST)
            return fail(c, "%s: %zu elements, at most %d allowed", f->name, n, MAX_LIST);
        size_t es = elem_size(f->type);
        const char *arr = *(char *const *)(base + f->offset);
        for (size_t k = 0; es && k < n; k++) {
            int err = check_value(c, f, arr + k * es);
            if (err)
                return err;
        }
    }
    return 0;
}

/* ---- what each message needs beyond the schema ---- */

static bool empty(const char *s)
{
    return !s || !s[0];
}

static int need_len(check_ctx_t *c, const char *what, ProtobufCBinaryData b, size_t len)
{
    if (b.len != len)
        return fail(c, "%s has %zu bytes, expected %zu", what, b.len, len);
    return 0;
}

static int check_worker_spec(check_ctx_t *c, const Corral__WorkerSpec *w, const char *where)
{
    if (!w)
        return fail(c, "%s is missing", where);
    if (w->n_argv == 0)
        return fail(c, "%s.argv is empty (a worker needs a command)", where);
    if (empty(w->argv[0]))
        return fail(c, "%s.argv[0] is empty", where);
    for (size_t i = 0; i < w->n_env; i++)
        if (empty(w->env[i]->key) || strchr(w->env[i]->key, '='))
            return fail(c, "%s.env[%zu]: a variable name must be non-empty and without '='", where,
                        i);
    return 0;
}

static int ck_error(check_ctx_t *c, const Corral__Envelope *e)
{
    if (e->error->code >= 0)
        return fail(c, "error code %d is not negative", e->error->code);
    return 0;
}

static int ck_hello(check_ctx_t *c, const Corral__Envelope *e)
{
    const Corral__Hello *h = e->hello;
    if (h->protocol_version == 0)
        return fail(c, "protocol_version is 0");
    if (h->role != CORRAL__ROLE__ROLE_CLIENT && h->role != CORRAL__ROLE__ROLE_AGENT)
        return fail(c, "role must be client or agent");
    if (h->credential == CORRAL__CREDENTIAL__CREDENTIAL_JOB) {
        if (h->role != CORRAL__ROLE__ROLE_CLIENT)
            return fail(c, "a job credential is for clients only");
        if (empty(h->job_id) || strlen(h->job_id) > CR_JOB_ID_MAX)
            return fail(c, "a job credential needs a job_id of 1 to %d bytes", CR_JOB_ID_MAX);
    } else if (!empty(h->job_id)) {
        return fail(c, "job_id is set without a job credential");
    }
    return need_len(c, "nonce", h->nonce, CR_NONCE_LEN);
}

static int ck_challenge(check_ctx_t *c, const Corral__Envelope *e)
{
    return need_len(c, "nonce", e->challenge->nonce, CR_NONCE_LEN);
}

static int ck_proof(check_ctx_t *c, const Corral__Envelope *e)
{
    return need_len(c, "hmac", e->proof->hmac, CR_PROOF_LEN);
}

static int ck_welcome(check_ctx_t *c, const Corral__Envelope *e)
{
    return need_len(c, "proof", e->welcome->proof, CR_PROOF_LEN);
}

static int ck_register(check_ctx_t *c, const Corral__Envelope *e)
{
    if (empty(e->register_->node_json))
        return fail(c, "node_json is empty");
    for (size_t i = 0; i < e->register_->n_workers; i++)
        if (empty(e->register_->workers[i]->worker_id))
            return fail(c, "workers[%zu] has no worker_id", i);
    return 0;
}

static int ck_heartbeat(check_ctx_t *c, const Corral__Envelope *e)
{
    for (size_t i = 0; i < e->heartbeat->n_changes; i++)
        if (empty(e->heartbeat->changes[i]->worker_id))
            return fail(c, "changes[%zu] has no worker_id", i);
    return 0;
}

static int ck_job_submit(check_ctx_t *c, const Corral__Envelope *e)
{
    const Corral__JobSpec *s = e->job_submit->spec;
    if (!s)
        return fail(c, "spec is missing");
    if (s->num_workers > MAX_WORKERS)
        return fail(c, "num_workers %u is above %d", s->num_workers, MAX_WORKERS);
    if (s->bundle_index < -1)
        return fail(c, "bundle_index %d (use -1 for any bundle)", s->bundle_index);
    if (!empty(s->placement_group) && (!empty(s->domain) || s->strategy))
        return fail(c, "a job in a placement group takes its strategy and domain from the group");
    return check_worker_spec(c, s->worker, "spec.worker");
}

static int ck_job_id(check_ctx_t *c, const char *id)
{
    return empty(id) ? fail(c, "job_id is empty") : 0;
}

static int ck_job_status(check_ctx_t *c, const Corral__Envelope *e)
{
    return ck_job_id(c, e->job_status->job_id);
}

static int ck_job_stop(check_ctx_t *c, const Corral__Envelope *e)
{
    return ck_job_id(c, e->job_stop->job_id);
}

static int ck_job_logs(check_ctx_t *c, const Corral__Envelope *e)
{
    if (e->job_logs->worker_index < -1)
        return fail(c, "worker_index %d (use -1 for every worker)", e->job_logs->worker_index);
    return ck_job_id(c, e->job_logs->job_id);
}

static int ck_pg_create(check_ctx_t *c, const Corral__Envelope *e)
{
    const Corral__PgCreate *p = e->pg_create;
    if (p->n_bundles == 0)
        return fail(c, "a placement group needs at least one bundle");
    for (size_t i = 0; i < p->n_bundles; i++)
        if (p->bundles[i]->n_resources == 0)
            return fail(c, "bundles[%zu] asks for no resources", i);
    return 0;
}

static int ck_pg_remove(check_ctx_t *c, const Corral__Envelope *e)
{
    if (empty(e->pg_remove->pg_id) && empty(e->pg_remove->name))
        return fail(c, "give pg_id or name");
    return 0;
}

static int ck_prepare(check_ctx_t *c, const Corral__Envelope *e)
{
    if (empty(e->prepare->txn_id))
        return fail(c, "txn_id is empty");
    if (e->prepare->n_reservations == 0)
        return fail(c, "nothing to reserve");
    for (size_t i = 0; i < e->prepare->n_reservations; i++)
        if (empty(e->prepare->reservations[i]->pg_id))
            return fail(c, "reservations[%zu] has no pg_id", i);
    return 0;
}

static int ck_txn(check_ctx_t *c, const char *id)
{
    return empty(id) ? fail(c, "txn_id is empty") : 0;
}

static int ck_prepare_reply(check_ctx_t *c, const Corral__Envelope *e)
{
    return ck_txn(c, e->prepare_reply->txn_id);
}

static int ck_commit(check_ctx_t *c, const Corral__Envelope *e)
{
    return ck_txn(c, e->commit->txn_id);
}

static int ck_abort(check_ctx_t *c, const Corral__Envelope *e)
{
    return ck_txn(c, e->abort->txn_id);
}

static int ck_txn_done(check_ctx_t *c, const Corral__Envelope *e)
{
    return ck_txn(c, e->txn_done->txn_id);
}

static int ck_release(check_ctx_t *c, const Corral__Envelope *e)
{
    return empty(e->release->pg_id) ? fail(c, "pg_id is empty") : 0;
}

static int ck_worker_start(check_ctx_t *c, const Corral__Envelope *e)
{
    const Corral__WorkerStart *w = e->worker_start;
    if (empty(w->job_id) || empty(w->worker_id))
        return fail(c, "job_id and worker_id are required");
    if (w->num_workers == 0 || w->worker_index >= w->num_workers)
        return fail(c, "worker_index %u outside a gang of %u", w->worker_index, w->num_workers);
    return check_worker_spec(c, w->spec, "spec");
}

static int ck_worker_started(check_ctx_t *c, const Corral__Envelope *e)
{
    if (empty(e->worker_started->worker_id) || e->worker_started->pid <= 0)
        return fail(c, "worker_id and a positive pid are required");
    return 0;
}

static int ck_worker_stop(check_ctx_t *c, const Corral__Envelope *e)
{
    return empty(e->worker_stop->worker_id) ? fail(c, "worker_id is empty") : 0;
}

static int ck_worker_exit(check_ctx_t *c, const Corral__Envelope *e)
{
    if (!e->worker_exit->report || empty(e->worker_exit->report->worker_id))
        return fail(c, "report.worker_id is required");
    return 0;
}

static int ck_log_chunk(check_ctx_t *c, const Corral__Envelope *e)
{
    const Corral__LogChunk *l = e->log_chunk;
    if (empty(l->job_id))
        return fail(c, "job_id is required");
    /* raw bytes follow the frame: the chunk itself carries none, and they
     * are bounded as a frame is (net/conn.c checks the connection's own
     * limit) */
    if (l->raw_len && (l->data.len || l->eof))
        return fail(c, "raw_len with data or eof");
    if (l->raw_len > CR_FRAME_MAX_DEFAULT)
        return fail(c, "raw_len %llu exceeds %u", (unsigned long long)l->raw_len,
                    CR_FRAME_MAX_DEFAULT);
    return 0;
}

typedef int (*check_fn)(check_ctx_t *, const Corral__Envelope *);

/* One row per message: who may send it, and its own checks. */
#define CL CR_FROM_CLIENT
#define AG CR_FROM_AGENT
#define HD CR_FROM_HEAD
#define B(x) CORRAL__ENVELOPE__BODY_##x
static const struct msg_row {
    Corral__Envelope__BodyCase body;
    unsigned senders;
    check_fn check;
} msg_table[] = {
    {B(ERROR), CL | AG | HD, ck_error},
    {B(ACK), CL | AG | HD, NULL},
    {B(HELLO), CL | AG, ck_hello},
    {B(CHALLENGE), HD, ck_challenge},
    {B(PROOF), CL | AG, ck_proof},
    {B(WELCOME), HD, ck_welcome},
    {B(REFUSED), HD, NULL},
    {B(REGISTER), AG, ck_register},
    {B(REGISTERED), HD, NULL},
    {B(HEARTBEAT), AG, ck_heartbeat},
    {B(HEARTBEAT_ACK), HD, NULL},
    {B(NODE_LIST), CL, NULL},
    {B(NODE_LIST_REPLY), HD, NULL},
    {B(JOB_SUBMIT), CL, ck_job_submit},
    {B(JOB_SUBMITTED), HD, NULL},
    {B(JOB_STATUS), CL, ck_job_status},
    {B(JOB_INFO), HD, NULL},
    {B(JOB_LIST), CL, NULL},
    {B(JOB_LIST_REPLY), HD, NULL},
    {B(JOB_STOP), CL, ck_job_stop},
    {B(JOB_LOGS), CL, ck_job_logs},
    {B(LOG_CHUNK), AG | HD, ck_log_chunk}, /* an agent forwards its workers' output */
    {B(PG_CREATE), CL, ck_pg_create},
    {B(PG_CREATED), HD, NULL},
    {B(PG_REMOVE), CL, ck_pg_remove},
    {B(PG_LIST), CL, NULL},
    {B(PG_LIST_REPLY), HD, NULL},
    {B(PREPARE), HD, ck_prepare},
    {B(PREPARE_REPLY), AG, ck_prepare_reply},
    {B(COMMIT), HD, ck_commit},
    {B(ABORT), HD, ck_abort},
    {B(TXN_DONE), AG, ck_txn_done},
    {B(RELEASE), HD, ck_release},
    {B(PORT_REQUEST), HD, NULL},
    {B(PORT_REPLY), AG, NULL},
    {B(WORKER_START), HD, ck_worker_start},
    {B(WORKER_STARTED), AG, ck_worker_started},
    {B(WORKER_STOP), HD, ck_worker_stop},
    {B(WORKER_EXIT), AG, ck_worker_exit},
    {B(EVENT), AG | HD, NULL},
    {B(EVENTS_REQUEST), CL, NULL},
    {B(EVENT_LIST), HD, NULL},
    {B(STATUS_REQUEST), CL, NULL},
    {B(CLUSTER_STATUS), HD, NULL},
    {B(SHUTDOWN), CL | HD, NULL}, /* the head tells its agents (corral stop --address) */
    {B(SHUTDOWN_REPLY), HD, NULL},
};
#undef B

static const struct msg_row *row_of(Corral__Envelope__BodyCase body)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(msg_table); i++)
        if (msg_table[i].body == body)
            return &msg_table[i];
    return NULL;
}

const Corral__JobInfo *cr_msg_job_info_brief(const Corral__JobInfo *info, Corral__JobInfo *brief,
                                             Corral__JobSpec *spec, Corral__WorkerSpec *worker)
{
    if (!info->spec || !info->spec->worker || !info->spec->worker->n_env)
        return info;
    *brief = *info;
    *spec = *info->spec;
    *worker = *spec->worker;
    worker->n_env = 0;
    worker->env = NULL;
    spec->worker = worker;
    brief->spec = spec;
    return brief;
}

const char *cr_msg_name(Corral__Envelope__BodyCase body)
{
    if (body == CORRAL__ENVELOPE__BODY__NOT_SET)
        return "none";
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(&corral__envelope__descriptor, (unsigned)body);
    return f ? f->name : "unknown";
}

unsigned cr_msg_senders(Corral__Envelope__BodyCase body)
{
    const struct msg_row *r = row_of(body);
    return r ? r->senders : 0;
}

int cr_msg_validate(const Corral__Envelope *e, char *why, size_t size)
{
    check_ctx_t c = {.why = why, .size = size};
    const struct msg_row *r = row_of(e->body_case);
    if (!r)
        return fail(&c, "no message body (or one this version does not know)");
    /* a sender may set the case and forget the message; protobuf-c then
     * packs no body at all */
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(&corral__envelope__descriptor, e->body_case);
    if (!f || !*(void *const *)((const char *)e + f->offset))
        return fail(&c, "%s: the body case is set but its message is missing",
                    cr_msg_name(e->body_case));
    int err = walk(&c, &e->base);
    if (err)
        return err;
    c.body = cr_msg_name(e->body_case);
    return r->check ? r->check(&c, e) : 0;
}

Corral__Envelope *cr_msg_unpack(const uint8_t *data, size_t len, char *why, size_t size)
{
    Corral__Envelope *e = corral__envelope__unpack(NULL, len, data);
    if (!e) {
        snprintf(why, size, "not a protobuf Envelope (%zu bytes that do not decode)", len);
        return NULL;
    }
    if (cr_msg_validate(e, why, size) < 0) {
        corral__envelope__free_unpacked(e, NULL);
        return NULL;
    }
    return e;
}

void cr_msg_free(Corral__Envelope *e)
{
    if (e)
        corral__envelope__free_unpacked(e, NULL);
}

int cr_msg_pack(const Corral__Envelope *e, size_t max, uint8_t **out, size_t *len)
{
    size_t n = corral__envelope__get_packed_size(e);
    uint8_t hdr[CR_FRAME_HDR];
    /* an envelope with nothing set packs to 0 bytes; it still needs a
     * frame, so it is refused here as the decoder would refuse it */
    int err = cr_frame_hdr(hdr, n, max);
    if (err)
        return err;
    uint8_t *buf = cr_malloc(CR_FRAME_HDR + n);
    memcpy(buf, hdr, CR_FRAME_HDR);
    corral__envelope__pack(e, buf + CR_FRAME_HDR);
    *out = buf;
    *len = CR_FRAME_HDR + n;
    return 0;
}

/* ------------------------------------------------ a beat without malloc */

/* A varint of at most 9 bytes (63 bits: no truncation to think about);
 * false for anything longer or cut short, which the general path judges. */
static bool beat_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned i = 0; i < 9 && *p < end; i++) {
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* The Heartbeat's bytes: node_id (1), incarnation (2), seq (3),
 * free_same (6), each at most once; anything else is not the plain beat. */
static bool beat_body(const uint8_t *p, const uint8_t *end, cr_msg_beat_t *b)
{
    unsigned seen = 0;
    while (p < end) {
        uint64_t key, v;
        if (!beat_varint(&p, end, &key) || key > 0xff)
            return false;
        unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);
        if (field >= 8 || seen & (1u << field))
            return false;
        seen |= 1u << field;
        if (field == 1 && wire == 2) {
            if (!beat_varint(&p, end, &v) || v >= sizeof(b->node_id) || v > (uint64_t)(end - p) ||
                memchr(p, 0, (size_t)v))
                return false;
            memcpy(b->node_id, p, (size_t)v);
            b->node_id[v] = '\0'; /* is_utf8 reads up to it */
            if (!is_utf8((const unsigned char *)b->node_id, (size_t)v))
                return false;
            p += v;
        } else if ((field == 2 || field == 3) && wire == 0) {
            if (!beat_varint(&p, end, &v))
                return false;
            *(field == 2 ? &b->hb.incarnation : &b->hb.seq) = v;
        } else if (field == 6 && wire == 0) {
            if (p >= end || *p > 1) /* one byte, 0 or 1 */
                return false;
            b->hb.free_same = *p++;
        } else {
            return false;
        }
    }
    return true;
}

bool cr_msg_beat_decode(const uint8_t *data, size_t len, cr_msg_beat_t *b)
{
    const uint8_t *p = data, *end = data + len;
    Corral__Envelope env = CORRAL__ENVELOPE__INIT;
    Corral__Heartbeat hb = CORRAL__HEARTBEAT__INIT;
    b->env = env;
    b->hb = hb;
    b->node_id[0] = '\0';
    b->hb.node_id = b->node_id; /* protobuf-c's default for a string: "" */
    unsigned seen = 0;
    while (p < end) {
        uint64_t key, v;
        if (!beat_varint(&p, end, &key) || key > 0xffff)
            return false;
        unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);
        unsigned bit = field == 1 ? 1u : field == 2 ? 2u : field == 32 ? 4u : 0u;
        if (!bit || seen & bit)
            return false;
        seen |= bit;
        if (field != 32 && wire == 0) {
            if (!beat_varint(&p, end, &v))
                return false;
            *(field == 1 ? &b->env.id : &b->env.reply_to) = v;
        } else if (field == 32 && wire == 2) {
            if (!beat_varint(&p, end, &v) || v > (uint64_t)(end - p) || !beat_body(p, p + v, b))
                return false;
            p += v;
        } else {
            return false;
        }
    }
    if (!(seen & 4u))
        return false;
    b->env.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT;
    b->env.heartbeat = &b->hb;
    return true;
}
