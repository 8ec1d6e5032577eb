/* net/auth.c: the token file (mode, format, refusals) and the HMAC proofs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "net/net.h"
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/corral-auth-XXXXXX";
static char logpath[600];

static int setup(void **state)
{
    if (!mkdtemp(dir))
        return -1;
    snprintf(logpath, sizeof(logpath), "%s/log", dir);
    cr_log_set_level(CR_LOG_WARN);
    return cr_log_set_file(logpath);
}

static int teardown(void **state)
{
    cr_log_set_file(NULL);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd);
}

/* The log written since the last call. */
static char *take_log(void)
{
    char *s;
    size_t n;
    assert_int_equal(cr_read_file_alloc(NULL, logpath, &s, &n), 0);
    assert_int_equal(truncate(logpath, 0), 0);
    return s;
}

static void write_text(const char *path, const char *text, mode_t mode)
{
    unlink(path);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
    chmod(path, mode);
}

static void test_token_file(void **state)
{
    uint8_t t1[CR_TOKEN_LEN], t2[CR_TOKEN_LEN], back[CR_TOKEN_LEN];
    assert_int_equal(cr_token_generate(t1), 0);
    assert_int_equal(cr_token_generate(t2), 0);
    assert_memory_not_equal(t1, t2, CR_TOKEN_LEN);

    char path[700];
    snprintf(path, sizeof(path), "%s/token", dir);
    /* created 0600 whatever the umask */
    mode_t old = umask(0);
    assert_int_equal(cr_token_write(path, t1), 0);
    umask(old);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, 65);
    assert_int_equal(cr_token_read(path, back), 0);
    assert_memory_equal(back, t1, CR_TOKEN_LEN);

    /* replaced atomically: no temporary file left behind */
    assert_int_equal(cr_token_write(path, t2), 0);
    assert_int_equal(cr_token_read(path, back), 0);
    assert_memory_equal(back, t2, CR_TOKEN_LEN);
    char **names;
    size_t n;
    assert_int_equal(cr_list_dir(NULL, dir, &names, &n), 0);
    for (size_t i = 0; i < n; i++)
        assert_null(strstr(names[i], ".tmp"));
    cr_free_strv(names, n);

    /* the file holds hex, never the raw bytes */
    char text[80];
    assert_int_equal(cr_read_file(NULL, path, text, sizeof(text)), 0);
    assert_int_equal(strlen(text), 64);
    assert_int_equal(strspn(text, "0123456789abcdef"), 64);

    /* an unwritable directory fails with a message */
    snprintf(path, sizeof(path), "%s/missing/token", dir);
    assert_int_equal(cr_token_write(path, t1), -ENOENT);
    char *log = take_log();
    assert_non_null(strstr(log, "cannot create the token file"));
    free(log);
}

static void test_token_refusals(void **state)
{
    uint8_t tok[CR_TOKEN_LEN];
    char path[700];
    snprintf(path, sizeof(path), "%s/t", dir);
    const char *good = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF\n";

    write_text(path, good, 0600);
    assert_int_equal(cr_token_read(path, tok), 0);
    assert_int_equal(tok[0], 0x00);
    assert_int_equal(tok[5], 0x55);
    assert_int_equal(tok[31], 0xff);
    free(take_log());

    /* readable by group, by others: refused with what to do */
    static const mode_t loose[] = {0640, 0604, 0660, 0666};
    for (size_t i = 0; i < CR_ARRAY_SIZE(loose); i++) {
        write_text(path, good, loose[i]);
        assert_int_equal(cr_token_read(path, tok), CR_EACCES);
        char *log = take_log();
        assert_non_null(strstr(log, path));
        assert_non_null(strstr(log, "chmod 600"));
        free(log);
    }

    /* malformed: short, long, not hex, two lines, empty */
    static const char *bad[] = {
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeef\n",
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff0\n",
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeexx\n",
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n\n",
        " 0112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
        "",
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++) {
        write_text(path, bad[i], 0600);
        assert_int_equal(cr_token_read(path, tok), CR_EPARSE);
        char *log = take_log();
        assert_non_null(strstr(log, "malformed"));
        assert_non_null(strstr(log, "64 hex digits"));
        free(log);
    }
    /* no newline is fine */
    write_text(path, "ab00000000000000000000000000000000000000000000000000000000000000", 0400);
    assert_int_equal(cr_token_read(path, tok), 0);
    assert_int_equal(tok[0], 0xab);

    /* missing: says where the token comes from */
    snprintf(path, sizeof(path), "%s/nope", dir);
    assert_int_equal(cr_token_read(path, tok), -ENOENT);
    char *log = take_log();
    assert_non_null(strstr(log, "session_latest/token"));
    free(log);

    /* a directory is not a token */
    assert_int_equal(cr_token_read(dir, tok), CR_EPARSE);
    free(take_log());
}

static void test_proofs(void **state)
{
    uint8_t tok[CR_TOKEN_LEN], other[CR_TOKEN_LEN], nonce[CR_NONCE_LEN], p[CR_PROOF_LEN],
        q[CR_PROOF_LEN];
    memset(tok, 1, sizeof(tok));
    memset(other, 1, sizeof(other));
    other[31] = 2;
    for (int i = 0; i < CR_NONCE_LEN; i++)
        nonce[i] = (uint8_t)i;
    cr_auth_proof(tok, nonce, CORRAL__ROLE__ROLE_AGENT, 1, p);
    assert_true(cr_auth_check(tok, nonce, CORRAL__ROLE__ROLE_AGENT, 1, p, sizeof(p)));
    /* any change of token, role, version, nonce or length fails */
    assert_false(cr_auth_check(other, nonce, CORRAL__ROLE__ROLE_AGENT, 1, p, sizeof(p)));
    assert_false(cr_auth_check(tok, nonce, CORRAL__ROLE__ROLE_CLIENT, 1, p, sizeof(p)));
    assert_false(cr_auth_check(tok, nonce, CORRAL__ROLE__ROLE_AGENT, 2, p, sizeof(p)));
    assert_false(cr_auth_check(tok, nonce, CORRAL__ROLE__ROLE_AGENT, 1, p, sizeof(p) - 1));
    assert_false(cr_auth_check(tok, nonce, CORRAL__ROLE__ROLE_AGENT, 1, NULL, 0));
    nonce[0] ^= 1;
    assert_false(cr_auth_check(tok, nonce, CORRAL__ROLE__ROLE_AGENT, 1, p, sizeof(p)));
    nonce[0] ^= 1;
    /* every byte counts, not only a pointer's worth of them (the check
     * once compared sizeof(proof) bytes) */
    memcpy(q, p, sizeof(p));
    q[CR_PROOF_LEN - 1] ^= 1;
    assert_false(cr_auth_check(tok, nonce, CORRAL__ROLE__ROLE_AGENT, 1, q, sizeof(q)));
    /* the server's proof over the same nonce differs from a client's */
    cr_auth_proof(tok, nonce, CORRAL__ROLE__ROLE_HEAD, 1, q);
    assert_memory_not_equal(p, q, CR_PROOF_LEN);
    /* HMAC-SHA256 of a known input, computed apart with `openssl dgst
     * -sha256 -mac HMAC`: key 32 x 0x01, message 00..1f || 00000002 ||
     * 00000001 (nonce, role agent, version 1) */
    static const uint8_t want[CR_PROOF_LEN] = {0x04, 0x79, 0xac, 0x6f, 0x86, 0xc2, 0x7a, 0xc4,
                                               0x79, 0x96, 0xdb, 0x17, 0xca, 0xdc, 0x64, 0xe0,
                                               0x82, 0x14, 0xe6, 0x2d, 0x43, 0x78, 0x34, 0x46,
                                               0x0a, 0xab, 0xed, 0xc8, 0x91, 0x07, 0x03, 0xe3};
    assert_memory_equal(p, want, CR_PROOF_LEN);
}

/* The job credential: one per scope, its text form round-trips, bad text is refused. */
static void test_job_credential(void **state)
{
    uint8_t tok[CR_TOKEN_LEN], a[CR_TOKEN_LEN], b[CR_TOKEN_LEN], back[CR_TOKEN_LEN];
    memset(tok, 3, sizeof(tok));
    cr_job_scope_t s = {.job_id = "12", .worker_index = 3, .attempt = 0}, t = s, got;
    cr_job_credential(tok, &s, a);
    cr_job_credential(tok, &s, b);
    assert_memory_equal(a, b, CR_TOKEN_LEN);
    t.attempt = 1; /* a restart: another credential */
    cr_job_credential(tok, &t, b);
    assert_memory_not_equal(a, b, CR_TOKEN_LEN);
    t = s;
    strcpy(t.job_id, "123"); /* "12" index 3 and "123" must differ */
    cr_job_credential(tok, &t, b);
    assert_memory_not_equal(a, b, CR_TOKEN_LEN);
    /* it is HMAC-SHA256 over the label, the id and the two numbers */
    const uint8_t msg[] = {'c', 'o', 'r', 'r', 'a', 'l', '-', 'j', 'o', 'b', 0,
                           '1', '2', 0,   0,   0,   0,   3,   0,   0,   0,   0};
    cr_hmac_sha256(tok, CR_TOKEN_LEN, msg, sizeof(msg), b);
    assert_memory_equal(a, b, CR_TOKEN_LEN);

    char text[CR_JOB_TOKEN_TEXT_MAX];
    cr_job_token_format(&s, a, text, sizeof(text));
    assert_int_equal(strncmp(text, "job:12:3:0:", 11), 0);
    assert_int_equal(cr_job_token_parse(text, &got, back), 0);
    assert_string_equal(got.job_id, "12");
    assert_int_equal(got.worker_index, 3);
    assert_int_equal(got.attempt, 0);
    assert_memory_equal(back, a, CR_TOKEN_LEN);
    const char *bad[] = {"",
                         "job:",
                         "job::1:0:00",
                         "12:3:0:ab",
                         "job:12:x:0:00",
                         "job:12:3:0:abc",
                         "job:123456789012345678901234567890123:0:0:00"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(bad); i++)
        assert_int_equal(cr_job_token_parse(bad[i], &got, back), CR_EPARSE);
    text[strlen(text) - 1] = 'g';
    assert_int_equal(cr_job_token_parse(text, &got, back), CR_EPARSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_file),
        cmocka_unit_test(test_token_refusals),
        cmocka_unit_test(test_proofs),
        cmocka_unit_test(test_job_credential),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
