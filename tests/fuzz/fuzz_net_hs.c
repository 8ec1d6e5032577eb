/* Fuzz the handshake state machine with arbitrary frames, as a server and
 * as a client. The first byte picks the side and which frames the harness
 * replaces by correct ones (the fuzzer cannot forge an HMAC), so the later
 * states are reached too. Invariants: the handshake completes only with a
 * correct proof, every message the machine asks to send is valid, a
 * failure always leaves words and the FAILED state. A Hello with a job
 * credential (CREDENTIAL_JOB) is taken as any other: its forged proof is
 * keyed with the credential of the scope it names. */
/* the checks are the point: keep assert() in release builds too */
#undef NDEBUG
#include "net/net.h"
#include <assert.h>

static const uint8_t token[CR_TOKEN_LEN] = {0x5a, 1, 2, 3};
static const uint8_t nonce[CR_NONCE_LEN] = {0xa5, 4, 5, 6};

/* A correct message from the other side for the machine's state. */
static void forge(cr_hs_t *hs, Corral__Envelope *e, Corral__Proof *p, Corral__Challenge *c,
                  Corral__Welcome *w, uint8_t *buf)
{
    corral__envelope__init(e);
    if (hs->state == CR_HS_SERVER_PROOF) {
        corral__proof__init(p);
        /* a job credential's Hello: the proof is keyed with that scope's
         * credential, derived from the token as a worker's agent does */
        uint8_t key[CR_TOKEN_LEN];
        if (hs->job)
            cr_job_credential(token, &hs->scope, key);
        else
            memcpy(key, token, CR_TOKEN_LEN);
        cr_auth_proof(key, hs->nonce, (uint32_t)hs->role, CR_PROTOCOL_VERSION, buf);
        p->hmac.data = buf;
        p->hmac.len = CR_PROOF_LEN;
        e->body_case = CORRAL__ENVELOPE__BODY_PROOF;
        e->proof = p;
    } else if (hs->state == CR_HS_CLIENT_CHALLENGE) {
        corral__challenge__init(c);
        c->protocol_version = CR_PROTOCOL_VERSION;
        c->nonce.data = (uint8_t *)nonce;
        c->nonce.len = CR_NONCE_LEN;
        e->body_case = CORRAL__ENVELOPE__BODY_CHALLENGE;
        e->challenge = c;
    } else if (hs->state == CR_HS_CLIENT_WELCOME) {
        corral__welcome__init(w);
        cr_auth_proof(token, hs->nonce, CORRAL__ROLE__ROLE_HEAD, CR_PROTOCOL_VERSION, buf);
        w->proof.data = buf;
        w->proof.len = CR_PROOF_LEN;
        e->body_case = CORRAL__ENVELOPE__BODY_WELCOME;
        e->welcome = w;
    }
}

static void check_out(cr_hs_t *hs)
{
    if (!hs->has_out)
        return;
    char why[300];
    assert(cr_msg_validate(&hs->out, why, sizeof(why)) == 0);
    uint8_t *buf;
    size_t len;
    assert(cr_msg_pack(&hs->out, 0, &buf, &len) == 0);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t ctl = data[0];
    bool server = ctl & 1;
    data++;
    size--;
    cr_hs_t *hs = cr_malloc(sizeof(*hs));
    if (server)
        cr_hs_init_server(hs, token, nonce,
                          (ctl & 2)
                              ? 1u << CORRAL__ROLE__ROLE_AGENT
                              : 1u << CORRAL__ROLE__ROLE_CLIENT | 1u << CORRAL__ROLE__ROLE_AGENT,
                          "head", 0);
    else {
        cr_hs_init_client(hs, token, nonce,
                          (ctl & 2) ? CORRAL__ROLE__ROLE_AGENT : CORRAL__ROLE__ROLE_CLIENT, "c");
        cr_hs_start(hs);
        check_out(hs);
    }

    cr_frame_dec_t d;
    cr_frame_dec_init(&d, 1 << 16);
    bool forged_last = false;
    unsigned frame_no = 0;
    while (size && hs->state != CR_HS_FAILED && hs->state != CR_HS_DONE) {
        size_t used, fl;
        const uint8_t *f;
        int r = cr_frame_dec_feed(&d, data, size, &used, &f, &fl);
        data += used;
        size -= used;
        if (r <= 0)
            break;
        /* bits 2..7 of ctl: replace frame n by a correct one */
        bool do_forge = frame_no < 6 && (ctl >> (2 + frame_no)) & 1;
        frame_no++;
        Corral__Envelope *in = NULL, fe;
        Corral__Proof p;
        Corral__Challenge c;
        Corral__Welcome w;
        uint8_t buf[CR_PROOF_LEN];
        /* unvalidated on purpose: the machine must not trust its input */
        if (!do_forge && !(in = corral__envelope__unpack(NULL, fl, f)))
            continue;
        if (do_forge)
            forge(hs, &fe, &p, &c, &w, buf);
        cr_hs_state_t before = hs->state;
        int s = cr_hs_step(hs, in ? in : &fe);
        forged_last = do_forge;
        if (in)
            corral__envelope__free_unpacked(in, NULL);
        check_out(hs);
        if (s < 0) {
            assert(hs->state == CR_HS_FAILED);
            assert(hs->why[0]);
            /* the server always says why it refused */
            assert(!server || (hs->has_out && hs->out.body_case == CORRAL__ENVELOPE__BODY_REFUSED));
        } else if (s == CR_HS_OK) {
            assert(hs->state == CR_HS_DONE);
            assert(before == CR_HS_SERVER_PROOF || before == CR_HS_CLIENT_WELCOME);
        }
    }
    /* only a proof computed with the token gets through */
    if (hs->state == CR_HS_DONE)
        assert(forged_last);
    cr_frame_dec_fini(&d);
    free(hs);
    return 0;
}
