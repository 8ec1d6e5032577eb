/* net/msg.c and net/hs.c: Envelope round trips, validation, and the
 * handshake state machine driven without sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "net/net.h"
#include <stdio.h>

/* Packs, strips the frame header, unpacks and validates. */
static Corral__Envelope *round_trip(const Corral__Envelope *e, char *why, size_t size)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(cr_msg_pack(e, 0, &buf, &len), 0);
    assert_true(len > CR_FRAME_HDR);
    assert_int_equal((size_t)buf[3] | (size_t)buf[2] << 8, len - CR_FRAME_HDR);
    Corral__Envelope *back = cr_msg_unpack(buf + CR_FRAME_HDR, len - CR_FRAME_HDR, why, size);
    free(buf);
    return back;
}

static void test_job_submit_round_trip(void **state)
{
    char why[300];
    char *argv[] = {"python", "train.py"};
    Corral__KeyValue kv = CORRAL__KEY_VALUE__INIT, *env[] = {&kv};
    kv.key = "A";
    kv.value = "b c";
    Corral__Quantity gpu = CORRAL__QUANTITY__INIT, *res[] = {&gpu};
    gpu.name = "GPU";
    gpu.amount = 5000;
    Corral__WorkerSpec w = CORRAL__WORKER_SPEC__INIT;
    w.n_argv = 2;
    w.argv = argv;
    w.n_env = 1;
    w.env = env;
    w.n_resources = 1;
    w.resources = res;
    Corral__JobSpec spec = CORRAL__JOB_SPEC__INIT;
    spec.worker = &w;
    spec.num_workers = 8;
    spec.strategy = CORRAL__STRATEGY__STRATEGY_STRICT_SPREAD;
    spec.domain = "corral.io/tpu-slice-name";
    spec.restart = CORRAL__RESTART_POLICY__RESTART_GANG;
    spec.max_restarts = 3;
    spec.bundle_index = -1;
    Corral__JobSubmit js = CORRAL__JOB_SUBMIT__INIT;
    js.spec = &spec;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.id = 42;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_SUBMIT;
    e.job_submit = &js;

    Corral__Envelope *b = round_trip(&e, why, sizeof(why));
    assert_non_null(b);
    assert_int_equal(b->id, 42);
    assert_int_equal(b->body_case, CORRAL__ENVELOPE__BODY_JOB_SUBMIT);
    const Corral__JobSpec *s = b->job_submit->spec;
    assert_int_equal(s->num_workers, 8);
    assert_int_equal(s->bundle_index, -1);
    assert_int_equal(s->strategy, CORRAL__STRATEGY__STRATEGY_STRICT_SPREAD);
    assert_string_equal(s->domain, "corral.io/tpu-slice-name");
    assert_string_equal(s->worker->argv[1], "train.py");
    assert_string_equal(s->worker->env[0]->value, "b c");
    assert_int_equal(s->worker->resources[0]->amount, 5000);
    assert_string_equal(cr_msg_name(b->body_case), "job_submit");
    cr_msg_free(b);

    /* each rule of validation, with its words */
    gpu.amount = -1;
    assert_null(round_trip(&e, why, sizeof(why)));
    assert_string_equal(why, "job_submit.spec.worker.resources: GPU: negative amount -1");
    gpu.amount = 1;
    gpu.name = "";
    assert_null(round_trip(&e, why, sizeof(why)));
    assert_non_null(strstr(why, "without a resource name"));
    gpu.name = "GPU";
    kv.key = "A=B";
    assert_null(round_trip(&e, why, sizeof(why)));
    assert_non_null(strstr(why, "spec.worker.env[0]"));
    kv.key = "A";
    w.n_argv = 0;
    assert_null(round_trip(&e, why, sizeof(why)));
    assert_string_equal(why, "job_submit: spec.worker.argv is empty (a worker needs a command)");
    w.n_argv = 2;
    spec.bundle_index = -2;
    assert_null(round_trip(&e, why, sizeof(why)));
    spec.bundle_index = -1;
    spec.strategy = 7; /* not a Strategy */
    assert_null(round_trip(&e, why, sizeof(why)));
    assert_string_equal(why, "job_submit.spec: strategy: unknown value 7");
    spec.strategy = 0;
    Corral__Envelope *ok = round_trip(&e, why, sizeof(why));
    assert_non_null(ok);
    cr_msg_free(ok);
}

static void test_validation_rules(void **state)
{
    char why[300];
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    /* no body */
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "no message body"));
    uint8_t *buf;
    size_t len;
    assert_int_equal(cr_msg_pack(&e, 0, &buf, &len), CR_EINVAL); /* packs to nothing */

    /* hello: nonce length, role, version */
    uint8_t nonce[CR_NONCE_LEN] = {1};
    Corral__Hello h = CORRAL__HELLO__INIT;
    h.protocol_version = 1;
    h.role = CORRAL__ROLE__ROLE_AGENT;
    h.nonce.data = nonce;
    h.nonce.len = 31;
    e.body_case = CORRAL__ENVELOPE__BODY_HELLO;
    e.hello = &h;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), CR_EPARSE);
    assert_string_equal(why, "hello: nonce has 31 bytes, expected 32");
    h.nonce.len = 32;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), 0);
    h.role = CORRAL__ROLE__ROLE_HEAD;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), CR_EPARSE);
    h.role = CORRAL__ROLE__ROLE_CLIENT;
    h.protocol_version = 0;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), CR_EPARSE);

    /* placement groups need bundles with resources */
    Corral__PgCreate pg = CORRAL__PG_CREATE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_PG_CREATE;
    e.pg_create = &pg;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "at least one bundle"));
    Corral__Bundle b = CORRAL__BUNDLE__INIT, *bs[] = {&b};
    pg.n_bundles = 1;
    pg.bundles = bs;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), CR_EPARSE);
    assert_non_null(strstr(why, "bundles[0] asks for no resources"));
    Corral__Quantity q = CORRAL__QUANTITY__INIT, *qs[] = {&q};
    q.name = "TPU";
    q.amount = 4 * 10000;
    b.n_resources = 1;
    b.resources = qs;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), 0);

    /* two-phase messages need their transaction */
    Corral__Commit cm = CORRAL__COMMIT__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_COMMIT;
    e.commit = &cm;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), CR_EPARSE);
    assert_string_equal(why, "commit: txn_id is empty");
    cm.txn_id = "t1";
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), 0);

    /* worker index inside the gang */
    char *argv[] = {"true"};
    Corral__WorkerSpec ws = CORRAL__WORKER_SPEC__INIT;
    ws.n_argv = 1;
    ws.argv = argv;
    Corral__WorkerStart st = CORRAL__WORKER_START__INIT;
    st.job_id = "j";
    st.worker_id = "w";
    st.spec = &ws;
    st.num_workers = 2;
    st.worker_index = 2;
    e.body_case = CORRAL__ENVELOPE__BODY_WORKER_START;
    e.worker_start = &st;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), CR_EPARSE);
    st.worker_index = 1;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), 0);

    /* errors carry negative codes */
    Corral__Error er = CORRAL__ERROR__INIT;
    er.code = 3;
    e.body_case = CORRAL__ENVELOPE__BODY_ERROR;
    e.error = &er;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), CR_EPARSE);
    er.code = CR_EINFEASIBLE;
    assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), 0);

    /* garbage that protobuf refuses */
    assert_null(cr_msg_unpack((const uint8_t *)"\xff\xff\xff", 3, why, sizeof(why)));
    assert_non_null(strstr(why, "not a protobuf Envelope"));

    /* strings are UTF-8: accented text passes, broken sequences do not */
    Corral__JobStatusRequest jsr = CORRAL__JOB_STATUS_REQUEST__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_JOB_STATUS;
    e.job_status = &jsr;
    static const char *good_utf8[] = {"job-\xc3\xa9t\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x9a\x80",
                                      "x"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(good_utf8); i++) {
        jsr.job_id = (char *)good_utf8[i];
        assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), 0);
    }
    static const char *bad_utf8[] = {
        "\xc3",             /* truncated */
        "\xc0\xaf",         /* overlong '/' */
        "\xe0\x80\xaf",     /* overlong */
        "\xed\xa0\x80",     /* surrogate */
        "\xf4\x90\x80\x80", /* above U+10FFFF */
        "\xff",             /* never valid */
        "a\x80"
        "b", /* stray continuation */
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad_utf8); i++) {
        jsr.job_id = (char *)bad_utf8[i];
        assert_int_equal(cr_msg_validate(&e, why, sizeof(why)), CR_EPARSE);
        assert_string_equal(why, "job_status: job_id: not valid UTF-8");
    }

    /* an overlong tag reading as field 0 (found by fuzz_net_msg) */
    assert_null(cr_msg_unpack((const uint8_t *)"\x5a\x00\x80\x00\x3f", 5, why, sizeof(why)));
    assert_string_equal(why, "a field numbered 0");

    /* who sends what */
    assert_int_equal(cr_msg_senders(CORRAL__ENVELOPE__BODY_HEARTBEAT), CR_FROM_AGENT);
    assert_int_equal(cr_msg_senders(CORRAL__ENVELOPE__BODY_JOB_SUBMIT), CR_FROM_CLIENT);
    assert_int_equal(cr_msg_senders(CORRAL__ENVELOPE__BODY_PREPARE), CR_FROM_HEAD);
    assert_string_equal(cr_msg_name(CORRAL__ENVELOPE__BODY_PREPARE_REPLY), "prepare_reply");
    assert_string_equal(cr_msg_name(CORRAL__ENVELOPE__BODY__NOT_SET), "none");
}

/* Every body the schema defines has a row in the table (a message added to
 * the schema without one would be refused by every peer). */
static void test_every_body_has_a_row(void **state)
{
    const ProtobufCMessageDescriptor *d = &corral__envelope__descriptor;
    size_t bodies = 0;
    for (unsigned i = 0; i < d->n_fields; i++) {
        if (!(d->fields[i].flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
            continue;
        bodies++;
        if (!cr_msg_senders((Corral__Envelope__BodyCase)d->fields[i].id))
            fail_msg("%s has no row in msg_table", d->fields[i].name);
    }
    assert_true(bodies >= 40);
}

/* Carries one envelope as the wire would: packed, unpacked, validated. */
static Corral__Envelope *wire(const Corral__Envelope *e)
{
    char why[300];
    Corral__Envelope *b = round_trip(e, why, sizeof(why));
    if (!b)
        fail_msg("%s", why);
    return b;
}

static void test_handshake_machine(void **state)
{
    uint8_t tok[CR_TOKEN_LEN], bad[CR_TOKEN_LEN], nc[CR_NONCE_LEN], ns[CR_NONCE_LEN];
    memset(tok, 7, sizeof(tok));
    memset(bad, 8, sizeof(bad));
    memset(nc, 1, sizeof(nc));
    memset(ns, 2, sizeof(ns));
    uint32_t roles = 1u << CORRAL__ROLE__ROLE_CLIENT | 1u << CORRAL__ROLE__ROLE_AGENT;
    cr_hs_t *cl = cr_malloc(sizeof(*cl)), *sv = cr_malloc(sizeof(*sv));

    /* the good path */
    cr_hs_init_client(cl, tok, nc, CORRAL__ROLE__ROLE_AGENT, "node-a");
    cr_hs_init_server(sv, tok, ns, roles, "head", 1234);
    cr_hs_start(cl);
    assert_true(cl->has_out);
    Corral__Envelope *m = wire(&cl->out);
    assert_int_equal(cr_hs_step(sv, m), CR_HS_MORE);
    cr_msg_free(m);
    assert_string_equal(sv->peer_name, "node-a");
    m = wire(&sv->out);
    assert_int_equal(m->body_case, CORRAL__ENVELOPE__BODY_CHALLENGE);
    assert_int_equal(cr_hs_step(cl, m), CR_HS_MORE);
    cr_msg_free(m);
    m = wire(&cl->out);
    assert_int_equal(cr_hs_step(sv, m), CR_HS_OK);
    cr_msg_free(m);
    assert_int_equal(sv->role, CORRAL__ROLE__ROLE_AGENT);
    m = wire(&sv->out);
    assert_int_equal(m->welcome->max_frame, 1234);
    assert_int_equal(cr_hs_step(cl, m), CR_HS_OK);
    assert_int_equal(cl->state, CR_HS_DONE);
    /* the token itself never went over: not in any message of the exchange */
    {
        const Corral__Envelope *sent[] = {&cl->out, &sv->out};
        for (size_t i = 0; i < CR_ARRAY_SIZE(sent); i++) {
            uint8_t *buf;
            size_t len;
            assert_int_equal(cr_msg_pack(sent[i], 0, &buf, &len), 0);
            assert_null(memmem(buf, len, tok, 8));
            free(buf);
        }
    }
    /* a finished handshake takes nothing more */
    assert_int_equal(cr_hs_step(cl, m), CR_EPARSE);
    cr_msg_free(m);

    /* wrong token: the server refuses with AUTH, the client reports it */
    cr_hs_init_client(cl, bad, nc, CORRAL__ROLE__ROLE_CLIENT, "c");
    cr_hs_init_server(sv, tok, ns, roles, "head", 0);
    cr_hs_start(cl);
    m = wire(&cl->out);
    cr_hs_step(sv, m);
    cr_msg_free(m);
    m = wire(&sv->out);
    cr_hs_step(cl, m);
    cr_msg_free(m);
    m = wire(&cl->out);
    assert_int_equal(cr_hs_step(sv, m), CR_EACCES);
    cr_msg_free(m);
    assert_true(sv->has_out);
    assert_non_null(strstr(sv->why, "wrong cluster token"));
    m = wire(&sv->out);
    assert_int_equal(m->refused->reason, CORRAL__REFUSE_REASON__REFUSE_AUTH);
    assert_int_equal(cr_hs_step(cl, m), CR_EACCES);
    assert_non_null(strstr(cl->why, "refused by the server: wrong cluster token"));
    cr_msg_free(m);

    /* a server without the token cannot fool the client: its welcome
     * proof is checked */
    cr_hs_init_client(cl, tok, nc, CORRAL__ROLE__ROLE_CLIENT, "c");
    cr_hs_init_server(sv, bad, ns, roles, "fake", 0);
    cr_hs_start(cl);
    m = wire(&cl->out);
    cr_hs_step(sv, m);
    cr_msg_free(m);
    m = wire(&sv->out);
    cr_hs_step(cl, m);
    cr_msg_free(m);
    /* the fake server accepts anything: forge its Welcome by hand */
    uint8_t proof[CR_PROOF_LEN];
    cr_auth_proof(bad, nc, CORRAL__ROLE__ROLE_HEAD, CR_PROTOCOL_VERSION, proof);
    Corral__Welcome w = CORRAL__WELCOME__INIT;
    w.protocol_version = CR_PROTOCOL_VERSION;
    w.proof.data = proof;
    w.proof.len = sizeof(proof);
    Corral__Envelope we = CORRAL__ENVELOPE__INIT;
    we.body_case = CORRAL__ENVELOPE__BODY_WELCOME;
    we.welcome = &w;
    assert_int_equal(cr_hs_step(cl, &we), CR_EACCES);
    assert_non_null(strstr(cl->why, "could not prove"));

    /* a replayed client proof is worth nothing against a new nonce */
    cr_hs_init_server(sv, tok, ns, roles, "head", 0);
    cr_hs_init_client(cl, tok, nc, CORRAL__ROLE__ROLE_CLIENT, "c");
    cr_hs_start(cl);
    m = wire(&cl->out);
    cr_hs_step(sv, m);
    cr_msg_free(m);
    Corral__Proof pr = CORRAL__PROOF__INIT;
    uint8_t old[CR_PROOF_LEN];
    uint8_t other_nonce[CR_NONCE_LEN];
    memset(other_nonce, 3, sizeof(other_nonce));
    cr_auth_proof(tok, other_nonce, CORRAL__ROLE__ROLE_CLIENT, CR_PROTOCOL_VERSION, old);
    pr.hmac.data = old;
    pr.hmac.len = sizeof(old);
    Corral__Envelope pe = CORRAL__ENVELOPE__INIT;
    pe.body_case = CORRAL__ENVELOPE__BODY_PROOF;
    pe.proof = &pr;
    assert_int_equal(cr_hs_step(sv, &pe), CR_EACCES);

    /* wrong version: refused first, with both versions in the words */
    cr_hs_init_server(sv, tok, ns, roles, "head", 0);
    Corral__Hello h = CORRAL__HELLO__INIT;
    h.protocol_version = 99;
    h.role = CORRAL__ROLE__ROLE_CLIENT;
    h.nonce.data = nc;
    h.nonce.len = sizeof(nc);
    Corral__Envelope he = CORRAL__ENVELOPE__INIT;
    he.body_case = CORRAL__ENVELOPE__BODY_HELLO;
    he.hello = &h;
    assert_int_equal(cr_hs_step(sv, &he), CR_EABI);
    assert_int_equal(sv->body.refused.reason, CORRAL__REFUSE_REASON__REFUSE_VERSION);
    assert_non_null(strstr(sv->why, "protocol version 99, this server speaks 1"));

    /* a role the server does not take */
    cr_hs_init_server(sv, tok, ns, 1u << CORRAL__ROLE__ROLE_AGENT, "head", 0);
    h.protocol_version = CR_PROTOCOL_VERSION;
    assert_int_equal(cr_hs_step(sv, &he), CR_EACCES);
    assert_int_equal(sv->body.refused.reason, CORRAL__REFUSE_REASON__REFUSE_ROLE);

    /* anything but hello first */
    cr_hs_init_server(sv, tok, ns, roles, "head", 0);
    assert_int_equal(cr_hs_step(sv, &pe), CR_EPARSE);
    assert_int_equal(sv->body.refused.reason, CORRAL__REFUSE_REASON__REFUSE_PROTOCOL);
    assert_non_null(strstr(sv->why, "expected hello as the first message, got proof"));
    free(cl);
    free(sv);
}

/* Runs a whole handshake; returns the server's last step. */
static int run_hs(cr_hs_t *cl, cr_hs_t *sv)
{
    cr_hs_start(cl);
    Corral__Envelope *m = wire(&cl->out);
    int r = cr_hs_step(sv, m);
    cr_msg_free(m);
    if (r != CR_HS_MORE)
        return r;
    m = wire(&sv->out);
    r = cr_hs_step(cl, m);
    cr_msg_free(m);
    if (r != CR_HS_MORE)
        return r;
    m = wire(&cl->out);
    r = cr_hs_step(sv, m);
    cr_msg_free(m);
    if (r != CR_HS_OK)
        return r;
    m = wire(&sv->out);
    r = cr_hs_step(cl, m);
    cr_msg_free(m);
    return r;
}

/* A worker's job credential: proved without the cluster token, the
 * server learns its scope; another scope's or the token itself fails. */
static void test_handshake_job_credential(void **state)
{
    uint8_t tok[CR_TOKEN_LEN], cred[CR_TOKEN_LEN], nc[CR_NONCE_LEN], ns[CR_NONCE_LEN];
    memset(tok, 7, sizeof(tok));
    memset(nc, 1, sizeof(nc));
    memset(ns, 2, sizeof(ns));
    uint32_t roles = 1u << CORRAL__ROLE__ROLE_CLIENT | 1u << CORRAL__ROLE__ROLE_AGENT;
    cr_hs_t *cl = cr_malloc(sizeof(*cl)), *sv = cr_malloc(sizeof(*sv));
    cr_job_scope_t s = {.job_id = "42", .worker_index = 1, .attempt = 2};
    cr_job_credential(tok, &s, cred);
    assert_memory_not_equal(cred, tok, CR_TOKEN_LEN);

    cr_hs_init_client(cl, cred, nc, CORRAL__ROLE__ROLE_CLIENT, "w");
    cl->job = true;
    cl->scope = s;
    cr_hs_init_server(sv, tok, ns, roles, "head", 0);
    assert_int_equal(run_hs(cl, sv), CR_HS_OK);
    assert_true(sv->job);
    assert_string_equal(sv->scope.job_id, "42");
    assert_int_equal(sv->scope.worker_index, 1);
    assert_int_equal(sv->scope.attempt, 2);

    /* the same credential claimed for the next attempt: refused */
    cr_hs_init_client(cl, cred, nc, CORRAL__ROLE__ROLE_CLIENT, "w");
    cl->job = true;
    cl->scope = s;
    cl->scope.attempt = 3;
    cr_hs_init_server(sv, tok, ns, roles, "head", 0);
    assert_int_equal(run_hs(cl, sv), CR_EACCES);
    assert_non_null(strstr(sv->why, "wrong job credential for job 42 worker 1 attempt 3"));

    /* the cluster token claimed as a job credential: refused too */
    cr_hs_init_client(cl, tok, nc, CORRAL__ROLE__ROLE_CLIENT, "w");
    cl->job = true;
    cl->scope = s;
    cr_hs_init_server(sv, tok, ns, roles, "head", 0);
    assert_int_equal(run_hs(cl, sv), CR_EACCES);

    /* and a job credential without the job flag is no cluster token */
    cr_hs_init_client(cl, cred, nc, CORRAL__ROLE__ROLE_CLIENT, "w");
    cr_hs_init_server(sv, tok, ns, roles, "head", 0);
    assert_int_equal(run_hs(cl, sv), CR_EACCES);
    assert_false(sv->job);

    /* an agent may not claim one */
    cr_hs_init_client(cl, cred, nc, CORRAL__ROLE__ROLE_AGENT, "w");
    cl->job = true;
    cl->scope = s;
    cr_hs_start(cl);
    char why[300];
    assert_null(round_trip(&cl->out, why, sizeof(why)));
    assert_non_null(strstr(why, "a job credential is for clients only"));
    free(cl);
    free(sv);
}

/* Packs e and hands its payload to both decoders: the fast one must take
 * it exactly when want says, and then agree with cr_msg_unpack. */
static void beat_both(const Corral__Envelope *e, bool want)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(cr_msg_pack(e, 0, &buf, &len), 0);
    const uint8_t *p = buf + CR_FRAME_HDR;
    size_t n = len - CR_FRAME_HDR;
    cr_msg_beat_t b;
    char why[300];
    bool fast = cr_msg_beat_decode(p, n, &b);
    assert_int_equal(fast, want);
    Corral__Envelope *slow = cr_msg_unpack(p, n, why, sizeof(why));
    if (fast) {
        assert_non_null(slow);
        assert_int_equal(b.env.body_case, slow->body_case);
        assert_ptr_equal(b.env.heartbeat, &b.hb);
        assert_int_equal(b.env.id, slow->id);
        assert_int_equal(b.env.reply_to, slow->reply_to);
        assert_string_equal(b.hb.node_id, slow->heartbeat->node_id);
        assert_int_equal(b.hb.incarnation, slow->heartbeat->incarnation);
        assert_int_equal(b.hb.seq, slow->heartbeat->seq);
        assert_int_equal(b.hb.free_same, slow->heartbeat->free_same);
        assert_int_equal(b.hb.n_free + b.hb.n_changes + b.hb.n_telemetry, 0);
    }
    cr_msg_free(slow);
    free(buf);
}

/* The plain beat an agent sends each period (agent/join.c) decodes on the
 * stack as protobuf-c decodes it; every other shape goes to protobuf-c. */
static void test_beat_fast_decode(void **state)
{
    Corral__Heartbeat hb = CORRAL__HEARTBEAT__INIT;
    Corral__Envelope e = CORRAL__ENVELOPE__INIT;
    e.body_case = CORRAL__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    hb.node_id = "sim-00042";
    hb.incarnation = 1733400000123ull;
    hb.seq = 77;
    hb.free_same = true;
    beat_both(&e, true);
    e.id = 9;
    hb.seq = UINT64_C(1) << 62;
    beat_both(&e, true);
    hb.free_same = false; /* nothing carried: still the plain shape */
    hb.node_id = "";
    beat_both(&e, true);
    hb.node_id = "n\xc3\xa9ud-\xe2\x82\xac"; /* UTF-8 */
    beat_both(&e, true);
    hb.seq = UINT64_MAX; /* a 10-byte varint: protobuf-c's */
    beat_both(&e, false);
    hb.seq = 1;
    /* a beat that carries free resources or a worker change */
    Corral__Quantity q = CORRAL__QUANTITY__INIT, *qp[] = {&q};
    q.name = "CPU";
    q.amount = 1000;
    hb.free = qp;
    hb.n_free = 1;
    beat_both(&e, false);
    hb.free = NULL;
    hb.n_free = 0;
    Corral__WorkerReport w = CORRAL__WORKER_REPORT__INIT, *wp[] = {&w};
    w.worker_id = "w1";
    hb.changes = wp;
    hb.n_changes = 1;
    beat_both(&e, false);
    hb.changes = NULL;
    hb.n_changes = 0;
    char longid[200];
    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    hb.node_id = longid; /* above the stack buffer */
    beat_both(&e, false);
    /* another body is not a beat */
    Corral__Ack ack = CORRAL__ACK__INIT;
    Corral__Envelope a = CORRAL__ENVELOPE__INIT;
    a.body_case = CORRAL__ENVELOPE__BODY_ACK;
    a.ack = &ack;
    beat_both(&a, false);

    /* hand-made bytes: a beat with a bad UTF-8 id, one with a field twice,
     * one cut short, one with no body; none is taken */
    cr_msg_beat_t b;
    const uint8_t bad_utf8[] = {0x82, 0x02, 0x04, 0x0a, 0x02, 0xc3, 0x28};
    assert_false(cr_msg_beat_decode(bad_utf8, sizeof(bad_utf8), &b));
    char why[300];
    assert_null(cr_msg_unpack(bad_utf8, sizeof(bad_utf8), why, sizeof(why)));
    const uint8_t twice[] = {0x82, 0x02, 0x04, 0x18, 0x01, 0x18, 0x02};
    assert_false(cr_msg_beat_decode(twice, sizeof(twice), &b));
    const uint8_t cut[] = {0x82, 0x02, 0x05, 0x18, 0x01};
    assert_false(cr_msg_beat_decode(cut, sizeof(cut), &b));
    const uint8_t nobody[] = {0x08, 0x01};
    assert_false(cr_msg_beat_decode(nobody, sizeof(nobody), &b));
    const uint8_t plain[] = {0x08, 0x05, 0x82, 0x02, 0x04, 0x18, 0x07, 0x30, 0x01};
    assert_true(cr_msg_beat_decode(plain, sizeof(plain), &b));
    assert_int_equal(b.env.id, 5);
    assert_int_equal(b.hb.seq, 7);
    assert_true(b.hb.free_same);
    assert_string_equal(b.hb.node_id, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_submit_round_trip),    cmocka_unit_test(test_validation_rules),
        cmocka_unit_test(test_every_body_has_a_row),     cmocka_unit_test(test_handshake_machine),
        cmocka_unit_test(test_handshake_job_credential), cmocka_unit_test(test_beat_fast_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
