/* The task protocol's codec (worker/frame.h, docs/actors.md "Wire"). */
#include "worker/frame.h"
#include "net/net.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

int crt_hdr_parse(const uint8_t p[CRT_HDR], uint32_t max, crt_hdr_t *h)
{
    uint32_t len = get32(p);
    if (len < 12 || p[6] || p[7])
        return CR_EPARSE;
    if (len > max)
        return CR_E2BIG;
    h->len = len - 12;
    h->kind = p[4];
    h->flags = p[5];
    h->id = get64(p + 8);
    return 0;
}

void crt_hdr_put(uint8_t p[CRT_HDR], uint8_t kind, uint8_t flags, uint64_t id, uint32_t plen)
{
    put32(p, plen + 12);
    p[4] = kind;
    p[5] = flags;
    p[6] = p[7] = 0;
    put32(p + 8, (uint32_t)(id >> 32));
    put32(p + 12, (uint32_t)id);
}

const char *crt_kind_name(unsigned kind)
{
    static const char *const names[] = {"?",      "HELLO",     "WELCOME", "CALL", "RETURN",
                                        "CANCEL", "CHALLENGE", "BYE",     "INFO", "FETCH"};
    return kind < CR_ARRAY_SIZE(names) ? names[kind] : "unknown";
}

void crt_bytes_reserve(crt_bytes_t *b, size_t more)
{
    if (b->len + more <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    b->p = cr_realloc(b->p, cap);
    b->cap = cap;
}

void crt_bytes_add(crt_bytes_t *b, const void *data, size_t n)
{
    if (!n)
        return;
    crt_bytes_reserve(b, n);
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

void crt_bytes_free(crt_bytes_t *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

void crt_bytes_compact(crt_bytes_t *b)
{
    if (!b->off)
        return;
    memmove(b->p, b->p + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
}

void crt_frame_add(crt_bytes_t *b, uint8_t kind, uint8_t flags, uint64_t id, const void *p1,
                   size_t n1, const void *p2, size_t n2)
{
    crt_bytes_reserve(b, CRT_HDR + n1 + n2);
    crt_hdr_put(b->p + b->len, kind, flags, id, (uint32_t)(n1 + n2));
    b->len += CRT_HDR;
    crt_bytes_add(b, p1, n1);
    crt_bytes_add(b, p2, n2);
}

int crt_call_add(crt_bytes_t *b, uint64_t id, uint8_t flags, const char *name, const void *args,
                 size_t len)
{
    size_t nl = name ? strlen(name) : 0;
    if (!nl || nl > CORRAL_TASK_NAME_MAX)
        return CR_EINVAL;
    if (12 + 2 + nl + len > CRT_MAX_FRAME)
        return CR_E2BIG;
    crt_bytes_reserve(b, CRT_HDR + 2 + nl + len);
    crt_hdr_put(b->p + b->len, CRT_CALL, flags, id, (uint32_t)(2 + nl + len));
    b->len += CRT_HDR;
    b->p[b->len++] = (uint8_t)(nl >> 8);
    b->p[b->len++] = (uint8_t)nl;
    crt_bytes_add(b, name, nl);
    crt_bytes_add(b, args, len);
    return 0;
}

int crt_call_parse(const uint8_t *p, size_t n, const char **name, size_t *name_len,
                   const uint8_t **args, size_t *args_len)
{
    if (n < 2)
        return CR_EPARSE;
    size_t nl = (size_t)p[0] << 8 | p[1];
    if (!nl || nl > CORRAL_TASK_NAME_MAX || 2 + nl > n || memchr(p + 2, 0, nl))
        return CR_EPARSE;
    *name = (const char *)p + 2;
    *name_len = nl;
    *args = p + 2 + nl;
    *args_len = n - 2 - nl;
    return 0;
}

void crt_return_add(crt_bytes_t *b, uint64_t id, uint8_t flags, uint8_t status, const void *v,
                    size_t n)
{
    crt_frame_add(b, CRT_RETURN, flags, id, &status, 1, v, n);
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

size_t crt_args_size(const size_t *len, size_t n)
{
    size_t total = CRT_ARGS_HDR;
    for (size_t i = 0; i < n; i++)
        total += CRT_ARG_HDR + len[i];
    return total;
}

void crt_args_add(crt_bytes_t *b, const void *const *p, const size_t *len, size_t n)
{
    crt_bytes_reserve(b, crt_args_size(len, n));
    put32(b->p + b->len, (uint32_t)n);
    b->len += CRT_ARGS_HDR;
    for (size_t i = 0; i < n; i++) {
        put64(b->p + b->len, len[i]);
        b->len += CRT_ARG_HDR;
        crt_bytes_add(b, p[i], len[i]);
    }
}

int corral_args_get(const void *args, size_t len, size_t i, const void **p, size_t *n)
{
    const uint8_t *a = args;
    if (!a || len < CRT_ARGS_HDR)
        return CR_EPARSE;
    uint32_t count = get32(a);
    if (!count || count > CORRAL_TASK_MAX_ARG_REFS + 1)
        return CR_EPARSE;
    size_t off = CRT_ARGS_HDR;
    for (uint32_t k = 0; k < count; k++) {
        if (len - off < CRT_ARG_HDR)
            return CR_EPARSE;
        uint64_t il = get64(a + off);
        off += CRT_ARG_HDR;
        if (il > len - off)
            return CR_EPARSE;
        if (k == i) {
            *p = a + off;
            *n = (size_t)il;
            return 0;
        }
        off += (size_t)il;
    }
    return CR_ERANGE;
}

int crt_cancel_parse(const uint8_t *p, size_t n, uint64_t *id)
{
    if (n != 8)
        return CR_EPARSE;
    *id = get64(p);
    return 0;
}

void crt_cancel_add(crt_bytes_t *b, uint64_t id)
{
    uint8_t p[8];
    put32(p, (uint32_t)(id >> 32));
    put32(p + 4, (uint32_t)id);
    crt_frame_add(b, CRT_CANCEL, 0, 0, p, sizeof(p), NULL, 0);
}

int crt_return_parse(const uint8_t *p, size_t n, uint8_t *status, const uint8_t **v, size_t *vn)
{
    if (n < 1 || p[0] > CRT_SYS_ERROR)
        return CR_EPARSE;
    *status = p[0];
    *v = p + 1;
    *vn = n - 1;
    return 0;
}

static int opt_str(json_t *o, const char *what, const char *key, char **out, char *why,
                   size_t wsize)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_string(v)) {
        snprintf(why, wsize, "%s's \"%s\" is not a string", what, key);
        return CR_EPARSE;
    }
    *out = cr_strdup(json_string_value(v));
    return 0;
}

int crt_hello_parse(const uint8_t *p, size_t n, crt_hello_t *h, char *why, size_t wsize)
{
    memset(h, 0, sizeof(*h));
    if (n > CRT_HELLO_MAX) {
        snprintf(why, wsize, "a HELLO of %zu bytes (at most %u)", n, CRT_HELLO_MAX);
        return CR_E2BIG;
    }
    json_error_t jerr;
    json_t *o = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(o)) {
        snprintf(why, wsize, "HELLO is not a JSON object");
        json_decref(o);
        return CR_EPARSE;
    }
    int rc = 0;
    static const char *const keys[] = {"role", "runtime", "lease", "address",
                                       "node", "mac",     "nonce"};
    char **outs[] = {&h->role, &h->runtime, &h->lease, &h->address, &h->node, &h->mac, &h->nonce};
    for (size_t i = 0; i < CR_ARRAY_SIZE(keys) && !rc; i++)
        rc = opt_str(o, "HELLO", keys[i], outs[i], why, wsize);
    json_t *pid = json_object_get(o, "pid");
    if (!rc && pid) {
        if (!json_is_integer(pid)) {
            snprintf(why, wsize, "HELLO's \"pid\" is not an integer");
            rc = CR_EPARSE;
        } else {
            h->pid = json_integer_value(pid);
        }
    }
    if (!rc && (!h->role || (strcmp(h->role, "worker") && strcmp(h->role, "caller")))) {
        snprintf(why, wsize, "HELLO's \"role\" is not \"worker\" or \"caller\"");
        rc = CR_EPARSE;
    }
    json_decref(o);
    if (rc)
        crt_hello_free(h);
    return rc;
}

void crt_hello_free(crt_hello_t *h)
{
    CR_FREE(h->role);
    CR_FREE(h->runtime);
    CR_FREE(h->lease);
    CR_FREE(h->address);
    CR_FREE(h->node);
    CR_FREE(h->mac);
    CR_FREE(h->nonce);
}

int crt_welcome_parse(const uint8_t *p, size_t n, crt_welcome_t *w, char *why, size_t wsize)
{
    memset(w, 0, sizeof(*w));
    if (n > CRT_HELLO_MAX) {
        snprintf(why, wsize, "a WELCOME of %zu bytes (at most %u)", n, CRT_HELLO_MAX);
        return CR_E2BIG;
    }
    json_error_t jerr;
    json_t *o = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(o)) {
        snprintf(why, wsize, "WELCOME is not a JSON object");
        json_decref(o);
        return CR_EPARSE;
    }
    int rc = opt_str(o, "WELCOME", "runtime", &w->runtime, why, wsize);
    if (!rc)
        rc = opt_str(o, "WELCOME", "mac", &w->mac, why, wsize);
    json_t *pid = json_object_get(o, "pid");
    if (!rc && pid) {
        if (!json_is_integer(pid)) {
            snprintf(why, wsize, "WELCOME's \"pid\" is not an integer");
            rc = CR_EPARSE;
        } else {
            w->pid = json_integer_value(pid);
        }
    }
    json_decref(o);
    if (rc)
        crt_welcome_free(w);
    return rc;
}

void crt_welcome_free(crt_welcome_t *w)
{
    CR_FREE(w->runtime);
    CR_FREE(w->mac);
}

void crt_welcome_mac_hex(const uint8_t *key, size_t klen, const uint8_t snonce[CRT_NONCE_LEN],
                         const uint8_t cnonce[CRT_NONCE_LEN], char out[65])
{
    uint8_t msg[sizeof(CRT_WELCOME_LABEL) - 1 + 2 * CRT_NONCE_LEN];
    size_t ll = sizeof(CRT_WELCOME_LABEL) - 1;
    memcpy(msg, CRT_WELCOME_LABEL, ll);
    memcpy(msg + ll, snonce, CRT_NONCE_LEN);
    memcpy(msg + ll + CRT_NONCE_LEN, cnonce, CRT_NONCE_LEN);
    uint8_t mac[CR_SHA256_LEN];
    cr_hmac_sha256(key, klen, msg, sizeof(msg), mac);
    cr_hex_encode(mac, sizeof(mac), out);
}

bool crt_welcome_mac_ok(const uint8_t *key, size_t klen, const uint8_t snonce[CRT_NONCE_LEN],
                        const uint8_t cnonce[CRT_NONCE_LEN], const char *mac)
{
    char want[65];
    crt_welcome_mac_hex(key, klen, snonce, cnonce, want);
    return mac && strlen(mac) == 64 && cr_mem_equal_ct(want, mac, 64);
}

int crt_welcome_check(const uint8_t *p, size_t n, const uint8_t *key, size_t klen,
                      const uint8_t snonce[CRT_NONCE_LEN], const uint8_t cnonce[CRT_NONCE_LEN],
                      char *why, size_t wsize)
{
    crt_welcome_t w;
    char wwhy[128];
    if (crt_welcome_parse(p, n, &w, wwhy, sizeof(wwhy))) {
        snprintf(why, wsize, "a bad WELCOME (%s)", wwhy);
        return CR_EPARSE;
    }
    bool ok = crt_welcome_mac_ok(key, klen, snonce, cnonce, w.mac);
    bool missing = !w.mac;
    crt_welcome_free(&w);
    if (ok)
        return 0;
    snprintf(why, wsize, "its WELCOME's mac is %s", missing ? "missing" : "wrong");
    return CR_EACCES;
}

int crt_nonce_parse(const char *hex, uint8_t out[CRT_NONCE_LEN])
{
    if (!hex || strlen(hex) != 2 * CRT_NONCE_LEN || !cr_hex_decode(hex, 2 * CRT_NONCE_LEN, out))
        return CR_EPARSE;
    return 0;
}

void crt_mac_hex(const uint8_t *key, size_t klen, const uint8_t nonce[CRT_NONCE_LEN], char out[65])
{
    uint8_t mac[CR_SHA256_LEN];
    cr_hmac_sha256(key, klen, nonce, CRT_NONCE_LEN, mac);
    cr_hex_encode(mac, sizeof(mac), out);
}

bool crt_mac_ok(const uint8_t *key, size_t klen, const uint8_t nonce[CRT_NONCE_LEN],
                const char *mac)
{
    char want[65];
    crt_mac_hex(key, klen, nonce, want);
    return mac && strlen(mac) == 64 && cr_mem_equal_ct(want, mac, 64);
}

void crt_reader_init(crt_reader_t *r, uint32_t max)
{
    memset(r, 0, sizeof(*r));
    r->max = max;
}

void crt_reader_fini(crt_reader_t *r)
{
    for (unsigned i = 0; i < r->nfds; i++)
        close(r->fds[i]);
    r->nfds = 0;
    crt_bytes_free(&r->in);
}

ssize_t crt_reader_fill(crt_reader_t *r, int sock, bool unix_sock)
{
    return crt_reader_fill_flags(r, sock, unix_sock, 0);
}

ssize_t crt_reader_fill_flags(crt_reader_t *r, int sock, bool unix_sock, int flags)
{
    crt_bytes_compact(&r->in);
    size_t room = r->want > (8u << 20) ? (8u << 20) : r->want;
    crt_bytes_reserve(&r->in, room > (64u << 10) ? room : (64u << 10));
    struct iovec iov = {r->in.p + r->in.len, r->in.cap - r->in.len};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * CRT_MAX_FDS)];
    } cm;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (unix_sock) {
        msg.msg_control = cm.buf;
        msg.msg_controllen = sizeof(cm.buf);
    }
    ssize_t n;
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    int bad = 0;
    for (struct cmsghdr *c = unix_sock ? CMSG_FIRSTHDR(&msg) : NULL; c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (r->nfds < CRT_MAX_FDS)
                r->fds[r->nfds++] = fd;
            else {
                close(fd);
                bad = 1;
            }
        }
    }
    if (msg.msg_flags & MSG_CTRUNC)
        bad = 1;
    r->in.len += (size_t)n;
    return bad ? CR_EPARSE : n;
}

int crt_reader_next(crt_reader_t *r, crt_hdr_t *h, const uint8_t **payload, int *fd)
{
    size_t avail = r->in.len - r->in.off;
    *fd = -1;
    if (avail < CRT_HDR)
        return 0;
    int rc = crt_hdr_parse(r->in.p + r->in.off, r->max, h);
    if (rc)
        return rc;
    if (avail < CRT_HDR + (size_t)h->len) {
        /* the next fills read more at once (the buffer grows as the bytes
         * come, not from what a header claims) */
        r->want = CRT_HDR + h->len - avail;
        return 0;
    }
    r->want = 0;
    if (h->flags & CRT_FLAG_FD) {
        if (!r->nfds)
            return CR_EPARSE;
        *fd = r->fds[0];
        memmove(r->fds, r->fds + 1, --r->nfds * sizeof(int));
    }
    *payload = r->in.p + r->in.off + CRT_HDR;
    r->in.off += CRT_HDR + h->len;
    return 1;
}

ssize_t crt_send(int sock, const void *p, size_t len, int fd, int flags)
{
    struct iovec iov = {(void *)p, len};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } cm;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        msg.msg_control = cm.buf;
        msg.msg_controllen = sizeof(cm.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    return sendmsg(sock, &msg, MSG_NOSIGNAL | flags);
}

int crt_write_all(int sock, crt_bytes_t *b, int fd)
{
    while (b->off < b->len) {
        ssize_t n = crt_send(sock, b->p + b->off, b->len - b->off, fd, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        fd = -1;
        b->off += (size_t)n;
    }
    b->off = b->len = 0;
    return 0;
}

int crt_send_frame(int sock, uint8_t kind, const void *p, size_t n)
{
    crt_bytes_t b = {0};
    crt_frame_add(&b, kind, 0, 0, p, n, NULL, 0);
    int rc = crt_write_all(sock, &b, -1);
    crt_bytes_free(&b);
    return rc;
}

int crt_memfd_new(size_t n, void **map)
{
    int fd = memfd_create("corral-object", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)n) < 0)
        goto fail;
    *map = NULL;
    if (n) {
        void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            goto fail;
        *map = m;
    }
    return fd;
fail:;
    int e = -errno;
    close(fd);
    return e;
}

int crt_memfd_seal(int fd)
{
    return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0
               ? -errno
               : 0;
}

int crt_memfd_from(const void *data, size_t n, void **map)
{
    void *w;
    int fd = crt_memfd_new(n, &w);
    if (fd < 0)
        return fd;
    if (n) {
        memcpy(w, data, n);
        munmap(w, n);
    }
    int rc = crt_memfd_seal(fd);
    if (!rc && map)
        rc = crt_memfd_map(fd, map, &n);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int crt_memfd_map(int fd, void **map, size_t *n)
{
    struct stat st;
    /* a memfd its sender can no longer shrink or write: a mapping of it
     * never faults or changes under the reader */
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return -errno;
    if ((seals & (F_SEAL_SHRINK | F_SEAL_WRITE)) != (F_SEAL_SHRINK | F_SEAL_WRITE))
        return CR_EACCES;
    if (fstat(fd, &st) < 0)
        return -errno;
    *n = (size_t)st.st_size;
    *map = NULL;
    if (!*n)
        return 0;
    void *m = mmap(NULL, *n, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return -errno;
    *map = m;
    return 0;
}

int crt_actor_cmd_parse(const char *cmd, char cls[CORRAL_TASK_NAME_MAX + 1],
                        char dir[CRT_LISTEN_DIR_MAX + 1], char owner[CRT_OWNER_ADDR_MAX + 1])
{
    if (!cmd)
        return CR_EPARSE;
    /* the last four words, from the end, and a program before them */
    const char *w[4];
    size_t wl[4];
    size_t end = strlen(cmd);
    for (int i = 3; i >= 0; i--) {
        size_t b = end;
        while (b > 0 && cmd[b - 1] != ' ')
            b--;
        w[i] = cmd + b;
        wl[i] = end - b;
        if (!wl[i] || b == 0)
            return CR_EPARSE;
        end = b - 1;
    }
    if (wl[0] != strlen(CRT_ACTOR_ARG) || memcmp(w[0], CRT_ACTOR_ARG, wl[0]))
        return CR_EPARSE;
    if (wl[1] > CORRAL_TASK_NAME_MAX || memchr(w[1], '.', wl[1]))
        return CR_EPARSE;
    if (wl[2] > CRT_LISTEN_DIR_MAX || w[2][0] != '/' || wl[3] > CRT_OWNER_ADDR_MAX)
        return CR_EPARSE;
    memcpy(cls, w[1], wl[1]);
    cls[wl[1]] = 0;
    memcpy(dir, w[2], wl[2]);
    dir[wl[2]] = 0;
    memcpy(owner, w[3], wl[3]);
    owner[wl[3]] = 0;
    if (strstr(dir, "/.."))
        return CR_EPARSE;
    return 0;
}

int crt_fetch_parse(const uint8_t *p, size_t n, uint64_t *oid, uint64_t *off, uint32_t *len)
{
    if (n != CRT_FETCH_LEN)
        return CR_EPARSE;
    *oid = get64(p);
    *off = get64(p + 8);
    *len = (uint32_t)p[16] << 24 | (uint32_t)p[17] << 16 | (uint32_t)p[18] << 8 | p[19];
    return *len > CRT_FETCH_CHUNK ? CR_EPARSE : 0;
}

void crt_fetch_add(crt_bytes_t *b, uint64_t id, uint64_t oid, uint64_t off, uint32_t len)
{
    uint8_t p[CRT_FETCH_LEN];
    put64(p, oid);
    put64(p + 8, off);
    p[16] = (uint8_t)(len >> 24);
    p[17] = (uint8_t)(len >> 16);
    p[18] = (uint8_t)(len >> 8);
    p[19] = (uint8_t)len;
    crt_frame_add(b, CRT_FETCH, 0, id, p, sizeof(p), NULL, 0);
}
