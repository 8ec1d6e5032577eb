/* net/crypto.c: SHA-256 and HMAC-SHA256 (Nettle) against published vectors (FIPS
 * 180-2 appendix B, RFC 4231 section 4) and against Python's hashlib and
 * hmac over every padding boundary (the expected digests of digests were
 * computed apart with python3, the generator is in each test's comment). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "net/net.h"
#include <stdio.h>

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void check_sha(const void *msg, size_t len, const char *want)
{
    uint8_t d[CR_SHA256_LEN];
    char h[2 * CR_SHA256_LEN + 1];
    cr_sha256(msg, len, d);
    hex(d, sizeof(d), h);
    assert_string_equal(h, want);
}

static void check_hmac(const void *key, size_t klen, const void *msg, size_t len, const char *want)
{
    uint8_t d[CR_SHA256_LEN];
    char h[2 * CR_SHA256_LEN + 1];
    cr_hmac_sha256(key, klen, msg, len, d);
    hex(d, sizeof(d), h);
    assert_string_equal(h, want);
}

static void test_fips(void **state)
{
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha(m, strlen(m), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    size_t n = 1000000;
    char *a = malloc(n);
    memset(a, 'a', n);
    check_sha(a, n, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
}

static void test_rfc4231(void **state)
{
    uint8_t k[131];
    memset(k, 0x0b, 20);
    check_hmac(k, 20, "Hi There", 8,
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    check_hmac("Jefe", 4, "what do ya want for nothing?", 28,
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    uint8_t d[50];
    memset(k, 0xaa, 20);
    memset(d, 0xdd, sizeof(d));
    check_hmac(k, 20, d, sizeof(d),
               "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    for (int i = 0; i < 25; i++)
        k[i] = (uint8_t)(i + 1);
    memset(d, 0xcd, sizeof(d));
    check_hmac(k, 25, d, sizeof(d),
               "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    /* a key longer than the block is hashed first */
    memset(k, 0xaa, sizeof(k));
    const char *m = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac(k, 131, m, strlen(m),
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    m = "This is a test using a larger than block-size key and a larger than block-size data. "
        "The key needs to be hashed before being used by the HMAC algorithm.";
    check_hmac(k, 131, m, strlen(m),
               "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

/* python3: acc = b''.join(sha256(bytes((i*7+3)&0xff for i in range(n))).digest()
 *                         for n in range(200)); sha256(acc).hexdigest() */
static void test_lengths(void **state)
{
    uint8_t msg[200], all[200 * CR_SHA256_LEN];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (uint8_t)((i * 7 + 3) & 0xff);
    for (size_t n = 0; n < 200; n++)
        cr_sha256(msg, n, all + n * CR_SHA256_LEN);
    check_sha(all, sizeof(all), "615d67a99b8c846e1f0582dfe127019e93c33a66e89ced6a4f81f932c82ece87");
}

/* python3: acc = b''.join(hmac.new(bytes((i*5+1)&0xff for i in range(k)),
 *     bytes((i*3)&0xff for i in range(m)), sha256).digest()
 *     for k in range(0,140,3) for m in range(0,140,7)); sha256(acc).hexdigest() */
static void test_hmac_lengths(void **state)
{
    uint8_t key[140], msg[140];
    for (size_t i = 0; i < 140; i++) {
        key[i] = (uint8_t)((i * 5 + 1) & 0xff);
        msg[i] = (uint8_t)((i * 3) & 0xff);
    }
    size_t n = 0;
    uint8_t *all = malloc(47 * 20 * CR_SHA256_LEN);
    for (size_t k = 0; k < 140; k += 3)
        for (size_t m = 0; m < 140; m += 7)
            cr_hmac_sha256(key, k, msg, m, all + CR_SHA256_LEN * n++);
    assert_int_equal(n, 47 * 20);
    check_sha(all, n * CR_SHA256_LEN,
              "ddcd2b8170cb3e2f313403206d6e7ea01d71b778373dc3e248ca632ae2a4e16b");
    free(all);
}

static void test_helpers(void **state)
{
    uint8_t a[32] = {0}, b[32] = {0};
    assert_true(cr_mem_equal_ct(a, b, sizeof(a)));
    b[31] = 0x80;
    assert_false(cr_mem_equal_ct(a, b, sizeof(a)));
    assert_true(cr_mem_equal_ct(a, b, 31));
    /* two draws of 32 random bytes are not the same (2^-256 to fail) */
    assert_int_equal(cr_random_bytes(a, sizeof(a)), 0);
    assert_int_equal(cr_random_bytes(b, sizeof(b)), 0);
    assert_false(cr_mem_equal_ct(a, b, sizeof(a)));
    cr_wipe(a, sizeof(a));
    memset(b, 0, sizeof(b));
    assert_memory_equal(a, b, sizeof(a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fips),    cmocka_unit_test(test_rfc4231),
        cmocka_unit_test(test_lengths), cmocka_unit_test(test_hmac_lengths),
        cmocka_unit_test(test_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
