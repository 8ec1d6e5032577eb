/* libcorral_tls.so: TLS 1.3 over memory BIOs with OpenSSL (net/tls.h says
 * why this is a separate shim). Built as its own module; links OpenSSL
 * and libc only, logs nothing, keeps no global state. */
#include "net/tls.h"
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct cr_tls_ctx {
    SSL_CTX *ctx;
    bool pinned;
    uint8_t pin[CR_TLS_FP_LEN];
};

struct cr_tls {
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl */
    const cr_tls_ctx_t *ctx;
    bool done;
};

/* why gets what, then OpenSSL's first queued error (the queue is cleared). */
static void say(char *why, size_t size, const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[256] = "";
    if (e)
        ERR_error_string_n(e, buf, sizeof(buf));
    snprintf(why, size, "%s%s%s", what, e ? ": " : "", buf);
    ERR_clear_error();
}

static void fp_hex(const uint8_t fp[CR_TLS_FP_LEN], char *buf, size_t size)
{
    static const char hex[] = "0123456789abcdef";
    char out[7 + 2 * CR_TLS_FP_LEN + 1] = "sha256:";
    for (int i = 0; i < CR_TLS_FP_LEN; i++) {
        out[7 + 2 * i] = hex[fp[i] >> 4];
        out[8 + 2 * i] = hex[fp[i] & 15];
    }
    out[sizeof(out) - 1] = '\0';
    snprintf(buf, size, "%s", out);
}

static char *bio_text(BIO *b)
{
    char *p;
    long n = BIO_get_mem_data(b, &p);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s) {
        memcpy(s, p, (size_t)n);
        s[n] = '\0';
    }
    return s;
}

static int tls_selfsigned_names(const char *cn, const char *names, char **cert_pem, char **key_pem,
                                char *why, size_t size)
{
    *cert_pem = *key_pem = NULL;
    int rc = CR_TLS_ERR;
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    BIO *cb = BIO_new(BIO_s_mem()), *kb = BIO_new(BIO_s_mem());
    unsigned char serial[16];
    BIGNUM *bn = NULL;
    if (!key || !x || !cb || !kb) {
        say(why, size, "cannot make a key");
        goto out;
    }
    if (RAND_bytes(serial, sizeof(serial)) != 1) {
        say(why, size, "no random bytes for the serial");
        goto out;
    }
    serial[0] &= 0x7f; /* positive */
    bn = BN_bin2bn(serial, sizeof(serial), NULL);
    X509_NAME *name = X509_get_subject_name(x);
    if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) || !X509_set_version(x, 2) ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), 10L * 365 * 24 * 3600) ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1,
                                    0) ||
        !X509_set_issuer_name(x, name) || !X509_set_pubkey(x, key)) {
        say(why, size, "cannot make the certificate");
        goto out;
    }
    if (names && names[0]) { /* the subjectAltName clients check the address against */
        X509V3_CTX v3;
        X509V3_set_ctx_nodb(&v3);
        X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
        X509_EXTENSION *san = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, names);
        int added = san && X509_add_ext(x, san, -1);
        X509_EXTENSION_free(san);
        if (!added) {
            say(why, size, "cannot name the certificate's addresses");
            goto out;
        }
    }
    if (!X509_sign(x, key, EVP_sha256())) {
        say(why, size, "cannot make the certificate");
        goto out;
    }
    if (!PEM_write_bio_X509(cb, x) ||
        !PEM_write_bio_PrivateKey(kb, key, NULL, NULL, 0, NULL, NULL)) {
        say(why, size, "cannot write the certificate");
        goto out;
    }
    *cert_pem = bio_text(cb);
    *key_pem = bio_text(kb);
    if (!*cert_pem || !*key_pem) {
        free(*cert_pem);
        free(*key_pem);
        *cert_pem = *key_pem = NULL;
        snprintf(why, size, "out of memory");
        goto out;
    }
    rc = 0;
out:
    BN_free(bn);
    BIO_free(cb);
    BIO_free(kb); /* a memory BIO: its contents are cleared when freed */
    X509_free(x);
    EVP_PKEY_free(key);
    return rc;
}

static int tls_selfsigned(const char *cn, char **cert_pem, char **key_pem, char *why, size_t size)
{
    return tls_selfsigned_names(cn, NULL, cert_pem, key_pem, why, size);
}

static X509 *read_cert(BIO *b)
{
    return PEM_read_bio_X509(b, NULL, NULL, NULL);
}

static int tls_fingerprint(const char *pem, size_t len, uint8_t out[CR_TLS_FP_LEN], char *why,
                           size_t size)
{
    BIO *b = BIO_new_mem_buf(pem, (int)len);
    X509 *x = b ? read_cert(b) : NULL;
    unsigned n = 0;
    int rc = x && X509_digest(x, EVP_sha256(), out, &n) && n == CR_TLS_FP_LEN ? 0 : CR_TLS_ERR;
    if (rc)
        say(why, size, "not a PEM certificate");
    X509_free(x);
    BIO_free(b);
    return rc;
}

static int tls_check(const char *cert_pem, size_t cert_len, const char *key_pem, size_t key_len,
                     const char *name, char *why, size_t size)
{
    BIO *cb = BIO_new_mem_buf(cert_pem, (int)cert_len);
    BIO *kb = BIO_new_mem_buf(key_pem, (int)key_len);
    X509 *x = cb ? read_cert(cb) : NULL;
    EVP_PKEY *key = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
    time_t soon = time(NULL) + 24 * 3600;
    int rc = CR_TLS_ERR;
    if (!x || !key)
        say(why, size, !x ? "the certificate is not PEM" : "the key is not an unencrypted PEM key");
    else if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0 ||
             X509_cmp_time(X509_get0_notAfter(x), &soon) <= 0)
        snprintf(why, size, "the certificate is not valid now or expires within a day");
    else if (X509_check_private_key(x, key) != 1)
        say(why, size, "the key does not belong to the certificate");
    else if (name && X509_check_ip_asc(x, name, 0) != 1 &&
             X509_check_host(x, name, 0, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, NULL) != 1)
        snprintf(why, size, "the certificate does not name %.200s", name);
    else
        rc = 0;
    ERR_clear_error();
    EVP_PKEY_free(key);
    X509_free(x);
    BIO_free(cb);
    BIO_free(kb);
    return rc;
}

static SSL_CTX *ctx_base(bool server, char *why, size_t size)
{
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx) {
        say(why, size, "cannot set up TLS");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    /* no session tickets (nothing resumes) and no renegotiation: what the
     * server sends after the handshake is application data only */
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    /* an idle connection gives its record buffers back (a head holds
     * thousands of agents) */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    return ctx;
}

static cr_tls_ctx_t *tls_server_ctx(const char *cert_pem, size_t cert_len, const char *key_pem,
                                    size_t key_len, char *why, size_t size)
{
    SSL_CTX *ctx = ctx_base(true, why, size);
    if (!ctx)
        return NULL;
    BIO *cb = BIO_new_mem_buf(cert_pem, (int)cert_len);
    BIO *kb = BIO_new_mem_buf(key_pem, (int)key_len);
    X509 *x = cb ? read_cert(cb) : NULL;
    EVP_PKEY *key = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
    cr_tls_ctx_t *t = NULL;
    if (!x) {
        say(why, size, "the certificate is not PEM");
        goto out;
    }
    if (!key) {
        say(why, size, "the key is not an unencrypted PEM private key");
        goto out;
    }
    if (SSL_CTX_use_certificate(ctx, x) != 1) {
        say(why, size, "the certificate cannot be used");
        goto out;
    }
    for (X509 *c; (c = read_cert(cb));) /* the rest of the file: the chain */
        if (SSL_CTX_add0_chain_cert(ctx, c) != 1) {
            X509_free(c);
            say(why, size, "a chain certificate cannot be used");
            goto out;
        }
    ERR_clear_error(); /* the end of the file reads as an error */
    if (SSL_CTX_use_PrivateKey(ctx, key) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        say(why, size, "the key does not belong to the certificate");
        goto out;
    }
    t = calloc(1, sizeof(*t));
    if (t) {
        t->ctx = ctx;
        ctx = NULL;
    }
out:
    X509_free(x);
    EVP_PKEY_free(key);
    BIO_free(cb);
    BIO_free(kb);
    SSL_CTX_free(ctx);
    return t;
}

static cr_tls_ctx_t *tls_client_ctx(const uint8_t *pin, const char *ca_pem, size_t ca_len,
                                    char *why, size_t size)
{
    SSL_CTX *ctx = ctx_base(false, why, size);
    if (!ctx)
        return NULL;
    cr_tls_ctx_t *t = calloc(1, sizeof(*t));
    if (!t) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    t->ctx = ctx;
    if (pin) {
        /* the chain is not what is trusted, the one certificate is: it is
         * compared once the handshake is done, before a byte of ours goes */
        t->pinned = true;
        memcpy(t->pin, pin, CR_TLS_FP_LEN);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        return t;
    }
    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    BIO *b = BIO_new_mem_buf(ca_pem, (int)ca_len);
    int n = 0;
    for (X509 *c; b && (c = read_cert(b)); n++) {
        X509_STORE_add_cert(store, c);
        X509_free(c);
    }
    ERR_clear_error();
    BIO_free(b);
    if (!n) {
        snprintf(why, size, "no PEM certificate in the CA file");
        SSL_CTX_free(ctx);
        free(t);
        return NULL;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    return t;
}

static void tls_ctx_free(cr_tls_ctx_t *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

static cr_tls_t *tls_conn_new(cr_tls_ctx_t *ctx, bool server, const char *host)
{
    cr_tls_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->ctx = ctx;
    t->ssl = SSL_new(ctx->ctx);
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (!t->ssl || !t->rbio || !t->wbio) {
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        SSL_free(t->ssl);
        free(t);
        return NULL;
    }
    /* an empty memory BIO reads as "retry", not as the end */
    BIO_set_mem_eof_return(t->rbio, -1);
    BIO_set_mem_eof_return(t->wbio, -1);
    SSL_set_bio(t->ssl, t->rbio, t->wbio);
    if (server) {
        SSL_set_accept_state(t->ssl);
    } else {
        SSL_set_connect_state(t->ssl);
        if (host && !ctx->pinned) {
            X509_VERIFY_PARAM *vp = SSL_get0_param(t->ssl);
            /* an address is checked against the certificate's IP entries,
             * a name against its DNS ones */
            if (X509_VERIFY_PARAM_set1_ip_asc(vp, host) != 1) {
                ERR_clear_error();
                SSL_set_tlsext_host_name(t->ssl, host);
                SSL_set1_host(t->ssl, host);
            }
        }
    }
    ERR_clear_error();
    return t;
}

static void tls_conn_free(cr_tls_t *t)
{
    if (!t)
        return;
    SSL_free(t->ssl); /* and both BIOs */
    free(t);
}

static int tls_feed(cr_tls_t *t, const void *data, size_t len)
{
    while (len) {
        int chunk = len > (1u << 30) ? 1 << 30 : (int)len;
        int w = BIO_write(t->rbio, data, chunk);
        if (w <= 0)
            return CR_TLS_ERR;
        data = (const char *)data + w;
        len -= (size_t)w;
    }
    return 0;
}

static int check_pin(cr_tls_t *t, char *why, size_t size)
{
    X509 *x = SSL_get0_peer_certificate(t->ssl);
    uint8_t fp[CR_TLS_FP_LEN];
    unsigned n = 0;
    if (!x || !X509_digest(x, EVP_sha256(), fp, &n) || n != CR_TLS_FP_LEN) {
        say(why, size, "the server sent no certificate");
        return CR_TLS_ERR;
    }
    if (CRYPTO_memcmp(fp, t->ctx->pin, CR_TLS_FP_LEN) != 0) {
        char have[80], want[80];
        fp_hex(fp, have, sizeof(have));
        fp_hex(t->ctx->pin, want, sizeof(want));
        snprintf(why, size,
                 "the head's certificate has fingerprint %s, not the pinned %s: this is not the "
                 "head the join command was printed for (or its certificate changed); check "
                 "--tls-fingerprint (CORRAL_TLS_FINGERPRINT for a client)",
                 have, want);
        return CR_TLS_ERR;
    }
    return 0;
}

/* Words for a failed SSL call r. */
static int ssl_fail(cr_tls_t *t, int r, const char *what, char *why, size_t size)
{
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        return CR_TLS_WANT;
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        ERR_clear_error();
        return CR_TLS_EOF;
    }
    long v = SSL_get_verify_result(t->ssl);
    if (v != X509_V_OK && !t->done) {
        snprintf(why, size, "%s: the head's certificate does not verify: %s", what,
                 X509_verify_cert_error_string(v));
        ERR_clear_error();
        return CR_TLS_ERR;
    }
    say(why, size, what);
    return CR_TLS_ERR;
}

static int tls_handshake(cr_tls_t *t, char *why, size_t size)
{
    if (t->done)
        return CR_TLS_DONE;
    int r = SSL_do_handshake(t->ssl);
    if (r != 1) {
        int f = ssl_fail(t, r, "TLS handshake failed", why, size);
        return f == CR_TLS_EOF ? CR_TLS_ERR : f;
    }
    if (!SSL_is_server(t->ssl) && t->ctx->pinned && check_pin(t, why, size) < 0)
        return CR_TLS_ERR;
    t->done = true;
    return CR_TLS_DONE;
}

static long tls_read(cr_tls_t *t, void *buf, size_t cap, char *why, size_t size)
{
    int want = cap > (1u << 30) ? 1 << 30 : (int)cap;
    int r = SSL_read(t->ssl, buf, want);
    if (r > 0)
        return r;
    return ssl_fail(t, r, "TLS read failed", why, size);
}

static int tls_write(cr_tls_t *t, const void *data, size_t len, char *why, size_t size)
{
    while (len) {
        int chunk = len > (1u << 30) ? 1 << 30 : (int)len;
        int r = SSL_write(t->ssl, data, chunk);
        if (r <= 0) {
            ssl_fail(t, r, "TLS write failed", why, size);
            return CR_TLS_ERR; /* a memory BIO never asks to retry a write */
        }
        data = (const char *)data + r;
        len -= (size_t)r;
    }
    return 0;
}

static size_t tls_pending(cr_tls_t *t)
{
    return BIO_ctrl_pending(t->wbio);
}

static size_t tls_take(cr_tls_t *t, void *buf, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        int chunk = cap - got > (1u << 30) ? 1 << 30 : (int)(cap - got);
        int r = BIO_read(t->wbio, (char *)buf + got, chunk);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

static const char *tls_version(const cr_tls_t *t)
{
    return SSL_get_version(t->ssl);
}

__attribute__((visibility("default"))) const cr_tls_ops_t cr_tls_ops_v1 = {
    .size = sizeof(cr_tls_ops_t),
    .selfsigned = tls_selfsigned,
    .fingerprint = tls_fingerprint,
    .server_ctx = tls_server_ctx,
    .client_ctx = tls_client_ctx,
    .ctx_free = tls_ctx_free,
    .conn_new = tls_conn_new,
    .conn_free = tls_conn_free,
    .feed = tls_feed,
    .handshake = tls_handshake,
    .read = tls_read,
    .write = tls_write,
    .pending = tls_pending,
    .take = tls_take,
    .version = tls_version,
    .selfsigned_names = tls_selfsigned_names,
    .check = tls_check,
};
