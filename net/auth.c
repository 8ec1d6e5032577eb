/* The cluster token and the challenge proofs. The token is 32 random bytes
 * kept in a 0600 file; peers prove they hold it with HMAC-SHA256 over a
 * nonce the other side chose, so the token itself never crosses the wire
 * and a recorded proof is worth nothing on the next connection. */
#include "net/net.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cr_token_generate(uint8_t token[CR_TOKEN_LEN])
{
    int err = cr_random_bytes(token, CR_TOKEN_LEN);
    if (err < 0) {
        cr_error("cannot draw random bytes for the cluster token: getrandom: %s", cr_strerror(err));
        return err;
    }
    return 0;
}

int cr_token_write(const char *path, const uint8_t token[CR_TOKEN_LEN])
{
    char text[2 * CR_TOKEN_LEN + 2], why[512] = "";
    cr_hex_encode(token, CR_TOKEN_LEN, text);
    text[2 * CR_TOKEN_LEN] = '\n';
    text[2 * CR_TOKEN_LEN + 1] = '\0';
    /* base/trust.c's one atomic private writer: mode 0600 with O_EXCL and
     * O_NOFOLLOW whatever the umask or a file left over by someone else,
     * fsync'ed, renamed into place */
    int err = cr_write_private(path, text, 2 * CR_TOKEN_LEN + 1, why, sizeof(why));
    if (err < 0)
        cr_warn("cannot create the token file %s: %s; check that its directory exists and is "
                "writable",
                path, why);
    cr_wipe(text, sizeof(text));
    return err;
}

int cr_token_read(const char *path, uint8_t token[CR_TOKEN_LEN])
{
    char text[2 * CR_TOKEN_LEN + 4];
    int err = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        err = -errno;
        cr_warn("cannot open the token file %s: %s; start the head first or pass the file its "
                "session wrote (session_latest/token)",
                path, strerror(errno));
        return err;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        err = -errno;
        goto out_close;
    }
    if (!S_ISREG(st.st_mode)) {
        cr_warn("token file %s is not a regular file", path);
        err = CR_EPARSE;
        goto out_close;
    }
    if (st.st_uid != geteuid()) {
        cr_warn("token file %s is owned by uid %u, not by you (uid %u); refusing it: whoever "
                "owns it chooses your cluster's token. Copy it to a file of your own (chmod 600)",
                path, (unsigned)st.st_uid, (unsigned)geteuid());
        err = CR_EACCES;
        goto out_close;
    }
    if (st.st_mode & 077) {
        cr_warn("token file %s has mode %04o and may be read by group or others; refusing it. "
                "Run: chmod 600 %s",
                path, (unsigned)(st.st_mode & 07777), path);
        err = CR_EACCES;
        goto out_close;
    }
    ssize_t n;
    do
        n = read(fd, text, sizeof(text));
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        err = -errno;
        cr_warn("cannot read the token file %s: %s", path, strerror(errno));
        goto out_close;
    }
    size_t len = (size_t)n;
    if (len == 2 * CR_TOKEN_LEN + 1 && text[len - 1] == '\n')
        len--;
    bool ok = len == 2 * CR_TOKEN_LEN && cr_hex_decode(text, len, token);
    if (!ok) {
        cr_warn("token file %s is malformed: expected %d hex digits and a newline; copy it "
                "again from the head's session directory (session_latest/token)",
                path, 2 * CR_TOKEN_LEN);
        cr_wipe(token, CR_TOKEN_LEN);
        err = CR_EPARSE;
    }
out_close:
    close(fd);
    cr_wipe(text, sizeof(text));
    return err;
}

void cr_auth_proof(const uint8_t token[CR_TOKEN_LEN], const uint8_t nonce[CR_NONCE_LEN],
                   uint32_t role, uint32_t version, uint8_t out[CR_PROOF_LEN])
{
    uint8_t msg[CR_NONCE_LEN + 8];
    memcpy(msg, nonce, CR_NONCE_LEN);
    uint32_t v[2] = {role, version};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++)
            msg[CR_NONCE_LEN + 4 * k + i] = (uint8_t)(v[k] >> (24 - 8 * i));
    cr_hmac_sha256(token, CR_TOKEN_LEN, msg, sizeof(msg), out);
}

bool cr_auth_check(const uint8_t token[CR_TOKEN_LEN], const uint8_t nonce[CR_NONCE_LEN],
                   uint32_t role, uint32_t version, const uint8_t *proof, size_t len)
{
    uint8_t want[CR_PROOF_LEN];
    cr_auth_proof(token, nonce, role, version, want);
    bool ok = len == CR_PROOF_LEN && cr_mem_equal_ct(want, proof, CR_PROOF_LEN);
    cr_wipe(want, sizeof(want));
    return ok;
}

void cr_job_credential(const uint8_t token[CR_TOKEN_LEN], const cr_job_scope_t *s,
                       uint8_t out[CR_TOKEN_LEN])
{
    /* a label, so the key can be no other proof's; NULs so "1" index 23
     * and "12" index 3 differ */
    static const char label[] = "corral-job";
    size_t idlen = strnlen(s->job_id, CR_JOB_ID_MAX);
    uint8_t msg[sizeof(label) + CR_JOB_ID_MAX + 1 + 8];
    size_t n = 0;
    memcpy(msg, label, sizeof(label)); /* with its NUL */
    n += sizeof(label);
    memcpy(msg + n, s->job_id, idlen);
    n += idlen;
    msg[n++] = 0;
    uint32_t v[2] = {s->worker_index, s->attempt};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++)
            msg[n++] = (uint8_t)(v[k] >> (24 - 8 * i));
    cr_hmac_sha256(token, CR_TOKEN_LEN, msg, n, out);
}

void cr_job_token_format(const cr_job_scope_t *s, const uint8_t cred[CR_TOKEN_LEN], char *buf,
                         size_t size)
{
    char hex[2 * CR_TOKEN_LEN + 1];
    cr_hex_encode(cred, CR_TOKEN_LEN, hex);
    snprintf(buf, size, "job:%s:%u:%u:%s", s->job_id, s->worker_index, s->attempt, hex);
    cr_wipe(hex, sizeof(hex));
}

int cr_job_token_parse(const char *text, cr_job_scope_t *s, uint8_t cred[CR_TOKEN_LEN])
{
    memset(s, 0, sizeof(*s));
    if (!text || strncmp(text, "job:", 4) != 0)
        return CR_EPARSE;
    const char *id = text + 4, *c1 = strchr(id, ':');
    if (!c1 || c1 == id || (size_t)(c1 - id) > CR_JOB_ID_MAX)
        return CR_EPARSE;
    char *end;
    errno = 0;
    unsigned long idx = strtoul(c1 + 1, &end, 10);
    if (end == c1 + 1 || *end != ':' || idx > UINT32_MAX || errno)
        return CR_EPARSE;
    const char *a = end + 1;
    unsigned long att = strtoul(a, &end, 10);
    if (end == a || *end != ':' || att > UINT32_MAX || errno)
        return CR_EPARSE;
    const char *hex = end + 1;
    if (strlen(hex) != 2 * CR_TOKEN_LEN || !cr_hex_decode(hex, 2 * CR_TOKEN_LEN, cred))
        return CR_EPARSE;
    memcpy(s->job_id, id, (size_t)(c1 - id));
    s->worker_index = (uint32_t)idx;
    s->attempt = (uint32_t)att;
    return 0;
}
