/* TLS for TCP connections (docs/protocol.md "TLS"): the interface between
 * net/conn.c and the shim libcorral_tls.so (net/tls.c), the only part of
 * corral that links OpenSSL's libssl.
 *
 * Why a shim loaded with dlopen: the lean `corral` CLI talks to a local
 * head over its Unix socket and must not pay libssl's and libcrypto's
 * load time for that; only a process that uses TLS (a head listening off
 * loopback, an agent or a client with a pinned fingerprint or a CA) loads
 * it, at that moment (net/tls_load.c). The shim keeps no global state,
 * logs nothing and links nothing of corral: every failure comes back as
 * words in why.
 *
 * One connection is an SSL object between two memory BIOs: conn.c feeds
 * the ciphertext libuv read, takes the plaintext out, gives plaintext to
 * send and takes the ciphertext to write. Nothing blocks; every buffer is
 * drained by conn.c after each call, so what the BIOs hold stays within
 * one read (1 MiB) or one frame. */
#ifndef CORRAL_NET_TLS_H
#define CORRAL_NET_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CR_TLS_SHIM "libcorral_tls.so"
#define CR_TLS_OPS_SYMBOL "cr_tls_ops_v1"
#define CR_TLS_FP_LEN 32 /* SHA-256 of the certificate's DER */

typedef struct cr_tls_ctx cr_tls_ctx_t; /* a server's certificate, or a client's trust */
typedef struct cr_tls cr_tls_t;         /* one connection */

/* Results of handshake and read besides a count of bytes. */
enum { CR_TLS_WANT = 0, CR_TLS_DONE = 1, CR_TLS_ERR = -1, CR_TLS_EOF = -2 };

typedef struct cr_tls_ops {
    size_t size; /* sizeof(cr_tls_ops_t) of the shim: a shim of another build is refused */
    /* A new P-256 key and a self-signed certificate for it (CN cn, valid
     * ten years), both PEM, malloc'ed. 0 or CR_TLS_ERR. */
    int (*selfsigned)(const char *cn, char **cert_pem, char **key_pem, char *why, size_t size);
    /* SHA-256 of the first certificate in pem (its DER). */
    int (*fingerprint)(const char *pem, size_t len, uint8_t out[CR_TLS_FP_LEN], char *why,
                       size_t size);
    /* A server: the certificate (then its chain) and key, PEM. TLS 1.3 only. */
    cr_tls_ctx_t *(*server_ctx)(const char *cert_pem, size_t cert_len, const char *key_pem,
                                size_t key_len, char *why, size_t size);
    /* A client: pin (CR_TLS_FP_LEN bytes) accepts exactly the server
     * certificate of that fingerprint; else ca_pem (one or more CA
     * certificates) verifies the server's chain and its name. */
    cr_tls_ctx_t *(*client_ctx)(const uint8_t *pin, const char *ca_pem, size_t ca_len, char *why,
                                size_t size);
    void (*ctx_free)(cr_tls_ctx_t *ctx);
    /* host: the name or IP the client dialled (checked against a CA-signed
     * certificate); NULL on a server. */
    cr_tls_t *(*conn_new)(cr_tls_ctx_t *ctx, bool server, const char *host);
    void (*conn_free)(cr_tls_t *t);
    /* Ciphertext received: 0 or CR_TLS_ERR. */
    int (*feed)(cr_tls_t *t, const void *data, size_t len);
    /* Advances the handshake: CR_TLS_DONE, CR_TLS_WANT (more to read), or
     * CR_TLS_ERR with why (a pinned fingerprint that does not match is
     * said with both fingerprints). */
    int (*handshake)(cr_tls_t *t, char *why, size_t size);
    /* Plaintext received: bytes (> 0) into buf, CR_TLS_WANT when none is
     * whole yet, CR_TLS_EOF after the peer's close_notify, CR_TLS_ERR. */
    long (*read)(cr_tls_t *t, void *buf, size_t cap, char *why, size_t size);
    /* Plaintext to send, all of it: 0 or CR_TLS_ERR. */
    int (*write)(cr_tls_t *t, const void *data, size_t len, char *why, size_t size);
    /* Ciphertext waiting to be written: its length, and taking it. */
    size_t (*pending)(cr_tls_t *t);
    size_t (*take)(cr_tls_t *t, void *buf, size_t cap);
    /* "TLSv1.3" once the handshake is done. */
    const char *(*version)(const cr_tls_t *t);
    /* selfsigned, the certificate also naming names in its
     * subjectAltName, OpenSSL's syntax ("DNS:head1,IP:10.0.0.5"; NULL or
     * "": none), so that a client that verifies names (curl --cacert, a
     * browser, Prometheus's ca_file) accepts it at those addresses. */
    int (*selfsigned_names)(const char *cn, const char *names, char **cert_pem, char **key_pem,
                            char *why, size_t size);
    /* Whether a certificate kept from an earlier run serves again: it is
     * valid now and for at least another day, key_pem is its key, and,
     * where name is not NULL, it names name (an IP address or a DNS name)
     * in its subjectAltName. 0, or CR_TLS_ERR with why saying which. */
    int (*check)(const char *cert_pem, size_t cert_len, const char *key_pem, size_t key_len,
                 const char *name, char *why, size_t size);
} cr_tls_ops_t;

/* The shim's table, loaded once per process: from beside the executable
 * or library that holds corral's net code (the build tree, where corral,
 * corrald and the shim lie together), else from LIBDIR/corral/ of the
 * tree it is installed in (beside libcorral.so, or ../LIBDIR/corral/ from
 * bin/), else from the configured install LIBDIR/corral/, else, for code that runs from inside the
 * build tree (tests), from the build folder; NULL and why when it cannot be. */
const cr_tls_ops_t *cr_tls_load(char *why, size_t size);

/* "sha256:" and 64 lowercase hex digits, into buf (at least 72 bytes). */
void cr_tls_fp_format(const uint8_t fp[CR_TLS_FP_LEN], char *buf, size_t size);
/* Parses a fingerprint: 64 hex digits, either case, optionally after
 * "sha256:" (or "SHA256:") and optionally in pairs separated by colons as
 * `openssl x509 -fingerprint -sha256` prints them. 0 or CR_EPARSE. */
int cr_tls_fp_parse(const char *s, uint8_t fp[CR_TLS_FP_LEN]);

/* net/tls_files.c. A PEM file given (--tls-cert, --tls-key) or kept from
 * an earlier run, malloc'ed into out: a regular file of the user's own,
 * never through a symlink; secret (a key): readable by nobody else. 0, or
 * a negative code and why naming the file and what to do. */
int cr_tls_read_pem(const char *path, bool secret, char **out, char *why, size_t size);
struct cr_buf;
/* The names a certificate corral makes is good for (subjectAltName,
 * OpenSSL's syntax) appended to b: this machine's host name, localhost,
 * and every address its interfaces have now (link-local ones left out),
 * so that a client that checks names (curl --cacert, a browser,
 * Prometheus's ca_file) accepts it at any of them. */
void cr_tls_san_names(struct cr_buf *b);
/* A process's own self-signed certificate, dir/BASE.crt and its key
 * dir/BASE.key (0600, dir private): the one an earlier run made while it
 * is valid and names name (NULL: any), else a new one (CN cn, named by
 * cr_tls_san_names and name), written there. The PEMs malloc'ed into cert
 * and key; what says why a kept one was replaced ("" when it was not). 0,
 * or a negative code and why: a file there that is not the user's own or
 * whose key others may read is refused, never replaced. */
int cr_tls_own_cert(const char *dir, const char *base, const char *cn, const char *name,
                    char **cert, char **key, char *what, size_t wsize, char *why, size_t size);

#endif
