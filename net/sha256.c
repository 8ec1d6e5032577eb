/* SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the handshake's
 * proofs (net/auth.c).
 *
 * Why not OpenSSL's: loading libcrypto.so costs every `corral` command
 * about 1.2 ms of CPU (its relocations and its initialisation, measured
 * with `perf stat` on an empty program linked with and without -lcrypto,
 * docs/benchmarks.md), a third of the time a whole `corral run -- true`
 * may take (issue 4). The handshake needs one hash of 40 bytes per side,
 * which this file does in a few microseconds. SHA-256 has no table
 * lookups and no branches on the data, so the key does not leak through
 * timing. Checked against the FIPS 180-2 and RFC 4231 vectors in
 * tests/unit/test_net_sha256.c. */
#include "net/net.h"
#include <string.h>
#include <sys/random.h>

typedef struct sha256 {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
} sha256_t;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static uint32_t ror(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static void block(sha256_t *s, const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
    uint32_t e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    s->h[0] += a;
    s->h[1] += b;
    s->h[2] += c;
    s->h[3] += d;
    s->h[4] += e;
    s->h[5] += f;
    s->h[6] += g;
    s->h[7] += h;
    cr_wipe(w, sizeof(w));
}

static void init(sha256_t *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof(iv));
    s->len = 0;
    s->nbuf = 0;
}

static void update(sha256_t *s, const uint8_t *p, size_t n)
{
    s->len += n;
    while (n) {
        if (s->nbuf == 0 && n >= 64) {
            block(s, p);
            p += 64;
            n -= 64;
            continue;
        }
        size_t k = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, k);
        s->nbuf += k;
        p += k;
        n -= k;
        if (s->nbuf == 64) {
            block(s, s->buf);
            s->nbuf = 0;
        }
    }
}

static void final(sha256_t *s, uint8_t out[CR_SHA256_LEN])
{
    uint64_t bits = s->len * 8;
    uint8_t pad[72] = {0x80};
    size_t npad = (s->nbuf < 56 ? 56 : 120) - s->nbuf;
    for (int i = 0; i < 8; i++)
        pad[npad + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    update(s, pad, npad + 8);
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 4; k++)
            out[4 * i + k] = (uint8_t)(s->h[i] >> (24 - 8 * k));
    cr_wipe(s, sizeof(*s));
}

void cr_sha256(const void *data, size_t len, uint8_t out[CR_SHA256_LEN])
{
    sha256_t s;
    init(&s);
    update(&s, data, len);
    final(&s, out);
}

void cr_hmac_sha256(const void *key, size_t klen, const void *data, size_t len,
                    uint8_t out[CR_SHA256_LEN])
{
    uint8_t k[64] = {0}, pad[64], inner[CR_SHA256_LEN];
    if (klen > sizeof(k))
        cr_sha256(key, klen, k);
    else if (klen)
        memcpy(k, key, klen);
    sha256_t s;
    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x36;
    init(&s);
    update(&s, pad, sizeof(pad));
    update(&s, data, len);
    final(&s, inner);
    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x5c;
    init(&s);
    update(&s, pad, sizeof(pad));
    update(&s, inner, sizeof(inner));
    final(&s, out);
    cr_wipe(k, sizeof(k));
    cr_wipe(pad, sizeof(pad));
    cr_wipe(inner, sizeof(inner));
}

bool cr_mem_equal_ct(const void *a, const void *b, size_t n)
{
    const volatile uint8_t *x = a, *y = b;
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= x[i] ^ y[i];
    return d == 0;
}

void cr_wipe(void *p, size_t n)
{
    explicit_bzero(p, n);
}

int cr_random_bytes(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -errno;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}
