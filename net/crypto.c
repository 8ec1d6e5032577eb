/* The handshake's primitives (net/auth.c) from Nettle: SHA-256 and
 * HMAC-SHA256 (nettle/sha2.h, nettle/hmac.h), comparison in constant time
 * (nettle_memeql_sec); randomness from the kernel (getrandom(2)).
 *
 * Why Nettle and not OpenSSL's libcrypto: loading libcrypto.so costs every
 * `corral` command about 1.2 ms of CPU (its relocations and its
 * initialisation, docs/benchmarks.md), a third of what a whole `corral run
 * -- true` may take (issue 4); libnettle loads in about a tenth of that.
 * Why not our own: a well-kept library is reviewed and tested by many, a
 * hand-written hash by us only (issue 12). Checked against the FIPS 180-2
 * and RFC 4231 vectors in tests/unit/test_net_crypto.c. */
#include "net/net.h"
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <string.h>
#include <sys/random.h>

void cr_sha256(const void *data, size_t len, uint8_t out[CR_SHA256_LEN])
{
    struct sha256_ctx s;
    sha256_init(&s);
    sha256_update(&s, len, data);
    sha256_digest(&s, CR_SHA256_LEN, out);
}

void cr_hmac_sha256(const void *key, size_t klen, const void *data, size_t len,
                    uint8_t out[CR_SHA256_LEN])
{
    struct hmac_sha256_ctx h;
    hmac_sha256_set_key(&h, klen, key);
    hmac_sha256_update(&h, len, data);
    hmac_sha256_digest(&h, CR_SHA256_LEN, out);
    cr_wipe(&h, sizeof(h)); /* it holds the key's pads */
}

bool cr_mem_equal_ct(const void *a, const void *b, size_t n)
{
    return memeql_sec(a, b, n) != 0;
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
