/* The handshake, as a state machine with no I/O:
 *
 *   client                              server
 *   Hello(version, role, nonce_c)  -->
 *                                  <--  Challenge(nonce_s)     (or Refused)
 *   Proof(HMAC(t, nonce_s|role|v)) -->
 *                                  <--  Welcome(HMAC(t, nonce_c|HEAD|v))
 *                                       (or Refused)
 *
 * t is the cluster token, or, when the Hello says CREDENTIAL_JOB, the job
 * credential of the scope it names (cr_job_credential), which the server
 * derives from the cluster token: a worker proves its job's key without
 * ever holding the token, and the server proves it knows that key too.
 *
 * The version is checked first, so a peer of another version is told so
 * rather than failing the proof. Both sides prove the token over the
 * other's nonce with a different role in the message, so neither proof
 * can be replayed or reflected. */
#include "net/net.h"
#include <stdarg.h>
#include <stdio.h>

const char *cr_role_name(Corral__Role r)
{
    static const char *names[] = {"unspecified", "client", "agent", "head"};
    return (unsigned)r < CR_ARRAY_SIZE(names) ? names[r] : "unknown";
}

static void base_init(cr_hs_t *hs, const uint8_t token[CR_TOKEN_LEN],
                      const uint8_t nonce[CR_NONCE_LEN], const char *name)
{
    memset(hs, 0, sizeof(*hs));
    memcpy(hs->token, token, CR_TOKEN_LEN);
    memcpy(hs->nonce, nonce, CR_NONCE_LEN);
    hs->name = name ? name : "";
    hs->features = CR_FEATURES;
    corral__envelope__init(&hs->out);
}

void cr_hs_init_client(cr_hs_t *hs, const uint8_t token[CR_TOKEN_LEN],
                       const uint8_t nonce[CR_NONCE_LEN], Corral__Role role, const char *name)
{
    base_init(hs, token, nonce, name);
    hs->state = CR_HS_CLIENT_HELLO;
    hs->role = role;
}

void cr_hs_init_server(cr_hs_t *hs, const uint8_t token[CR_TOKEN_LEN],
                       const uint8_t nonce[CR_NONCE_LEN], uint32_t accept_roles, const char *name,
                       uint64_t max_frame)
{
    base_init(hs, token, nonce, name);
    hs->state = CR_HS_SERVER_HELLO;
    hs->accept_roles = accept_roles;
    hs->max_frame = max_frame;
}

/* Clears the outgoing message and sets its body case. */
static void out_reset(cr_hs_t *hs, Corral__Envelope__BodyCase body)
{
    corral__envelope__init(&hs->out);
    memset(&hs->body, 0, sizeof(hs->body));
    hs->out.body_case = body;
    hs->has_out = true;
}

void cr_hs_start(cr_hs_t *hs)
{
    out_reset(hs, CORRAL__ENVELOPE__BODY_HELLO);
    corral__hello__init(&hs->body.hello);
    hs->body.hello.protocol_version = CR_PROTOCOL_VERSION;
    hs->body.hello.role = hs->role;
    hs->body.hello.nonce.data = hs->nonce;
    hs->body.hello.nonce.len = CR_NONCE_LEN;
    hs->body.hello.name = (char *)hs->name;
    hs->body.hello.features = hs->features;
    if (hs->job) { /* which key the proofs use: the server derives the same */
        hs->body.hello.credential = CORRAL__CREDENTIAL__CREDENTIAL_JOB;
        hs->body.hello.job_id = hs->scope.job_id;
        hs->body.hello.worker_index = hs->scope.worker_index;
        hs->body.hello.attempt = hs->scope.attempt;
    }
    hs->out.hello = &hs->body.hello;
    hs->state = CR_HS_CLIENT_CHALLENGE;
}

static int failf(cr_hs_t *hs, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int failf(cr_hs_t *hs, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(hs->why, sizeof(hs->why), fmt, ap);
    va_end(ap);
    hs->state = CR_HS_FAILED;
    return err;
}

/* Server: fails with err and asks to send Refused(reason, hs->why). */
static int refuse(cr_hs_t *hs, int err, Corral__RefuseReason reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(cr_hs_t *hs, int err, Corral__RefuseReason reason, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(hs->why, sizeof(hs->why), fmt, ap);
    va_end(ap);
    out_reset(hs, CORRAL__ENVELOPE__BODY_REFUSED);
    corral__refused__init(&hs->body.refused);
    hs->body.refused.reason = reason;
    hs->body.refused.message = hs->why;
    hs->body.refused.protocol_version = CR_PROTOCOL_VERSION;
    hs->out.refused = &hs->body.refused;
    hs->state = CR_HS_FAILED;
    return err;
}

/* Keeps a printable copy of the peer's self-description for logs. */
static void set_peer_name(cr_hs_t *hs, const char *s)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < sizeof(hs->peer_name); i++)
        hs->peer_name[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    hs->peer_name[i] = '\0';
}

static int server_hello(cr_hs_t *hs, const Corral__Envelope *in)
{
    if (in->body_case != CORRAL__ENVELOPE__BODY_HELLO || !in->hello)
        return refuse(hs, CR_EPARSE, CORRAL__REFUSE_REASON__REFUSE_PROTOCOL,
                      "expected hello as the first message, got %s", cr_msg_name(in->body_case));
    const Corral__Hello *h = in->hello;
    set_peer_name(hs, h->name);
    hs->role = h->role; /* as claimed, for the logs; trusted only once proven */
    hs->peer_features = h->features;
    if (h->protocol_version != CR_PROTOCOL_VERSION)
        return refuse(hs, CR_EABI, CORRAL__REFUSE_REASON__REFUSE_VERSION,
                      "protocol version %u, this server speaks %u; run the same corral release "
                      "on every node",
                      h->protocol_version, CR_PROTOCOL_VERSION);
    if (h->nonce.len != CR_NONCE_LEN)
        return refuse(hs, CR_EPARSE, CORRAL__REFUSE_REASON__REFUSE_PROTOCOL,
                      "hello nonce of %zu bytes, expected %d", h->nonce.len, CR_NONCE_LEN);
    if ((unsigned)h->role >= 32 || !(hs->accept_roles & (1u << h->role)))
        return refuse(hs, CR_EACCES, CORRAL__REFUSE_REASON__REFUSE_ROLE,
                      "this server does not take %s connections", cr_role_name(h->role));
    memcpy(hs->peer_nonce, h->nonce.data, CR_NONCE_LEN);
    if (h->credential == CORRAL__CREDENTIAL__CREDENTIAL_JOB) {
        if (h->role != CORRAL__ROLE__ROLE_CLIENT || !h->job_id || !h->job_id[0] ||
            strlen(h->job_id) > CR_JOB_ID_MAX)
            return refuse(hs, CR_EPARSE, CORRAL__REFUSE_REASON__REFUSE_PROTOCOL,
                          "a job credential is for a client and needs its job id");
        /* both proofs are keyed with that scope's credential from here on */
        hs->job = true;
        memset(&hs->scope, 0, sizeof(hs->scope));
        cr_strlcpy(hs->scope.job_id, h->job_id, sizeof(hs->scope.job_id));
        hs->scope.worker_index = h->worker_index;
        hs->scope.attempt = h->attempt;
        uint8_t key[CR_TOKEN_LEN];
        cr_job_credential(hs->token, &hs->scope, key);
        memcpy(hs->token, key, CR_TOKEN_LEN);
        cr_wipe(key, sizeof(key));
    }

    out_reset(hs, CORRAL__ENVELOPE__BODY_CHALLENGE);
    corral__challenge__init(&hs->body.challenge);
    hs->body.challenge.protocol_version = CR_PROTOCOL_VERSION;
    hs->body.challenge.nonce.data = hs->nonce;
    hs->body.challenge.nonce.len = CR_NONCE_LEN;
    hs->out.challenge = &hs->body.challenge;
    hs->state = CR_HS_SERVER_PROOF;
    return CR_HS_MORE;
}

static int server_proof(cr_hs_t *hs, const Corral__Envelope *in)
{
    if (in->body_case != CORRAL__ENVELOPE__BODY_PROOF || !in->proof)
        return refuse(hs, CR_EPARSE, CORRAL__REFUSE_REASON__REFUSE_PROTOCOL,
                      "expected proof after the challenge, got %s", cr_msg_name(in->body_case));
    if (!cr_auth_check(hs->token, hs->nonce, (uint32_t)hs->role, CR_PROTOCOL_VERSION,
                       in->proof->hmac.data, in->proof->hmac.len)) {
        if (hs->job)
            return refuse(hs, CR_EACCES, CORRAL__REFUSE_REASON__REFUSE_AUTH,
                          "wrong job credential for job %s worker %u attempt %u; a worker "
                          "uses the CORRAL_JOB_TOKEN its agent gave it, unchanged",
                          hs->scope.job_id, hs->scope.worker_index, hs->scope.attempt);
        return refuse(hs, CR_EACCES, CORRAL__REFUSE_REASON__REFUSE_AUTH,
                      "wrong cluster token; use the token file of the head's session "
                      "(session_latest/token)");
    }
    out_reset(hs, CORRAL__ENVELOPE__BODY_WELCOME);
    corral__welcome__init(&hs->body.welcome);
    hs->body.welcome.protocol_version = CR_PROTOCOL_VERSION;
    cr_auth_proof(hs->token, hs->peer_nonce, CORRAL__ROLE__ROLE_HEAD, CR_PROTOCOL_VERSION,
                  hs->out_bytes);
    hs->body.welcome.proof.data = hs->out_bytes;
    hs->body.welcome.proof.len = CR_PROOF_LEN;
    hs->body.welcome.name = (char *)hs->name;
    hs->body.welcome.max_frame = hs->max_frame;
    hs->body.welcome.features = hs->features;
    hs->out.welcome = &hs->body.welcome;
    hs->state = CR_HS_DONE;
    return CR_HS_OK;
}

/* Client: a Refused from the server ends the handshake with its words. */
static int client_refused(cr_hs_t *hs, const Corral__Envelope *in)
{
    const Corral__Refused *r = in->refused;
    static const int errs[] = {
        [CORRAL__REFUSE_REASON__REFUSE_UNSPECIFIED] = CR_EPARSE,
        [CORRAL__REFUSE_REASON__REFUSE_VERSION] = CR_EABI,
        [CORRAL__REFUSE_REASON__REFUSE_AUTH] = CR_EACCES,
        [CORRAL__REFUSE_REASON__REFUSE_ROLE] = CR_EACCES,
        [CORRAL__REFUSE_REASON__REFUSE_PROTOCOL] = CR_EPARSE,
    };
    int err = (unsigned)r->reason < CR_ARRAY_SIZE(errs) ? errs[r->reason] : CR_EPARSE;
    char msg[160];
    size_t i = 0;
    for (const char *s = r->message ? r->message : ""; s[i] && i + 1 < sizeof(msg); i++)
        msg[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    msg[i] = '\0';
    return failf(hs, err, "refused by the server: %s", msg[0] ? msg : "no reason given");
}

static int client_challenge(cr_hs_t *hs, const Corral__Envelope *in)
{
    if (in->body_case == CORRAL__ENVELOPE__BODY_REFUSED && in->refused)
        return client_refused(hs, in);
    if (in->body_case != CORRAL__ENVELOPE__BODY_CHALLENGE || !in->challenge)
        return failf(hs, CR_EPARSE, "expected a challenge from the server, got %s",
                     cr_msg_name(in->body_case));
    if (in->challenge->nonce.len != CR_NONCE_LEN)
        return failf(hs, CR_EPARSE, "challenge nonce of %zu bytes, expected %d",
                     in->challenge->nonce.len, CR_NONCE_LEN);
    out_reset(hs, CORRAL__ENVELOPE__BODY_PROOF);
    corral__proof__init(&hs->body.proof);
    cr_auth_proof(hs->token, in->challenge->nonce.data, (uint32_t)hs->role, CR_PROTOCOL_VERSION,
                  hs->out_bytes);
    hs->body.proof.hmac.data = hs->out_bytes;
    hs->body.proof.hmac.len = CR_PROOF_LEN;
    hs->out.proof = &hs->body.proof;
    hs->state = CR_HS_CLIENT_WELCOME;
    return CR_HS_MORE;
}

static int client_welcome(cr_hs_t *hs, const Corral__Envelope *in)
{
    if (in->body_case == CORRAL__ENVELOPE__BODY_REFUSED && in->refused)
        return client_refused(hs, in);
    if (in->body_case != CORRAL__ENVELOPE__BODY_WELCOME || !in->welcome)
        return failf(hs, CR_EPARSE, "expected welcome from the server, got %s",
                     cr_msg_name(in->body_case));
    const Corral__Welcome *w = in->welcome;
    if (!cr_auth_check(hs->token, hs->nonce, CORRAL__ROLE__ROLE_HEAD, CR_PROTOCOL_VERSION,
                       w->proof.data, w->proof.len))
        return failf(hs, CR_EACCES,
                     "the server could not prove it holds the cluster token; "
                     "check the address and the token file");
    set_peer_name(hs, w->name);
    hs->max_frame = w->max_frame;
    hs->peer_features = w->features;
    hs->state = CR_HS_DONE;
    return CR_HS_OK;
}

int cr_hs_step(cr_hs_t *hs, const Corral__Envelope *in)
{
    hs->has_out = false;
    switch (hs->state) {
    case CR_HS_SERVER_HELLO:
        return server_hello(hs, in);
    case CR_HS_SERVER_PROOF:
        return server_proof(hs, in);
    case CR_HS_CLIENT_CHALLENGE:
        return client_challenge(hs, in);
    case CR_HS_CLIENT_WELCOME:
        return client_welcome(hs, in);
    case CR_HS_CLIENT_HELLO:
        return failf(hs, CR_EPARSE, "%s before our hello", cr_msg_name(in->body_case));
    case CR_HS_DONE:
    case CR_HS_FAILED:
        break;
    }
    return failf(hs, CR_EPARSE, "handshake already over");
}
