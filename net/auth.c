/* The cluster token and the challenge proofs. The token is 32 random bytes
 * kept in a 0600 file; peers prove they hold it with HMAC-SHA256 over a
 * nonce the other side chose, so the token itself never crosses the wire
 * and a recorded proof is worth nothing on the next connection. */
#include "net/net.h"
#include <fcntl.h>
#include <stdio.h>
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

static int write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

int cr_token_write(const char *path, const uint8_t token[CR_TOKEN_LEN])
{
    char text[2 * CR_TOKEN_LEN + 2];
    cr_hex_encode(token, CR_TOKEN_LEN, text);
    text[2 * CR_TOKEN_LEN] = '\n';
    text[2 * CR_TOKEN_LEN + 1] = '\0';

    char *tmp = cr_asprintf("%s.tmp.%ld", path, (long)getpid());
    int err = 0;
    /* O_EXCL with mode 0600: the bytes are never readable by anyone else,
     * whatever the umask or a file left over by someone else */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        err = -errno;
        cr_warn("cannot create the token file %s: %s; check that its directory exists and is "
                "writable",
                tmp, strerror(errno));
        goto out_free;
    }
    if ((err = write_all(fd, text, strlen(text))) < 0 || (fsync(fd) < 0 && (err = -errno))) {
        cr_warn("cannot write the token file %s: %s", tmp, strerror(-err));
        goto out_unlink;
    }
    if (close(fd) < 0) {
        fd = -1;
        err = -errno;
        goto out_unlink;
    }
    fd = -1;
    if (rename(tmp, path) < 0) {
        err = -errno;
        cr_warn("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto out_unlink;
    }
    goto out_free;

out_unlink:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
out_free:
    free(tmp);
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
