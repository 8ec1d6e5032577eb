/* Certificate and key files (net/tls.h): reading one a user gave or an
 * earlier run made, and the names a certificate corral makes is good for.
 * The head's TCP port and dashboard (head/session.c) and an agent's
 * /metrics off loopback (agent/metrics.c) share them. */
#include "net/tls.h"
#include "net/net.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cr_tls_read_pem(const char *path, bool secret, char **out, char *why, size_t size)
{
    size_t len;
    *out = NULL;
    int fd = cr_open_private(path, O_RDONLY, why, size);
    struct stat st;
    if (fd >= 0 && secret && fstat(fd, &st) == 0 && (st.st_mode & 077)) {
        snprintf(why, size, "%s may be read by group or others (mode %03o): chmod 600 it", path,
                 (unsigned)(st.st_mode & 0777));
        close(fd);
        return CR_EACCES;
    }
    if (fd < 0)
        return fd;
    int err = cr_read_fd_alloc(fd, out, &len);
    close(fd);
    if (err < 0)
        snprintf(why, size, "cannot read %s: %s", path, cr_strerror(err));
    return err;
}

void cr_tls_san_names(cr_buf_t *b)
{
    char host[256];
    if (gethostname(host, sizeof(host) - 1) == 0) {
        host[sizeof(host) - 1] = '\0';
        if (host[0] && strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789-.") == strlen(host))
            cr_buf_printf(b, "DNS:%s,", host);
    }
    cr_buf_printf(b, "DNS:localhost,IP:127.0.0.1,IP:::1");
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0)
        return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        char text[INET6_ADDRSTRLEN];
        const struct sockaddr *sa = i->ifa_addr;
        if (!sa)
            continue;
        if (sa->sa_family == AF_INET) {
            const struct in_addr *a = &((const struct sockaddr_in *)sa)->sin_addr;
            if ((ntohl(a->s_addr) >> 24) == 127 || (ntohl(a->s_addr) >> 16) == 0xa9fe ||
                !inet_ntop(AF_INET, a, text, sizeof(text)))
                continue;
        } else if (sa->sa_family == AF_INET6) {
            const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
            if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_LINKLOCAL(a) ||
                !inet_ntop(AF_INET6, a, text, sizeof(text)))
                continue;
        } else {
            continue;
        }
        if (b->len < 4000) /* a machine with hundreds of addresses: the first ones */
            cr_buf_printf(b, ",IP:%s", text);
    }
    freeifaddrs(ifs);
}

int cr_tls_own_cert(const char *dir, const char *base, const char *cn, const char *name,
                    char **cert, char **key, char *what, size_t wsize, char *why, size_t size)
{
    char *cpath = cr_asprintf("%s/%s.crt", dir, base), *kpath = cr_asprintf("%s/%s.key", dir, base);
    const cr_tls_ops_t *t = cr_tls_load(why, size);
    int err = t ? 0 : CR_ENOENT;
    *cert = *key = NULL;
    what[0] = '\0';
    if (t && access(cpath, F_OK) == 0 && access(kpath, F_OK) == 0) {
        /* an earlier run's: kept while it serves, so that whoever trusts it
         * (a Prometheus's ca_file) goes on doing so; a file that is not
         * ours or whose key others may read is refused, never replaced
         * (half a pair is replaced: dir is private, the writes rename) */
        char because[512];
        if ((err = cr_tls_read_pem(cpath, false, cert, why, size)) == 0 &&
            (err = cr_tls_read_pem(kpath, true, key, why, size)) == 0) {
            if (t->check(*cert, strlen(*cert), *key, strlen(*key), name, because,
                         sizeof(because)) == 0)
                goto out;
            snprintf(what, wsize, "made a new certificate: %s's %.400s", cpath, because);
        }
        if (err < 0)
            goto out;
        cr_wipe(*key, strlen(*key));
        free(*cert);
        free(*key);
        *cert = *key = NULL;
    }
    if (t) {
        cr_buf_t names = {0};
        cr_tls_san_names(&names);
        if (name && name[0]) { /* a name given to reach it by: named too */
            struct in6_addr a6;
            struct in_addr a4;
            bool ip = inet_pton(AF_INET, name, &a4) == 1 || inet_pton(AF_INET6, name, &a6) == 1;
            if (ip || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789-.") == strlen(name))
                cr_buf_printf(&names, ",%s:%s", ip ? "IP" : "DNS", name);
        }
        if (t->selfsigned_names(cn, names.s, cert, key, why, size) < 0)
            err = CR_EIO;
        else if (cr_write_private(kpath, *key, strlen(*key), why, size) < 0 ||
                 cr_write_private(cpath, *cert, strlen(*cert), why, size) < 0)
            err = CR_EIO;
        cr_buf_free(&names);
    }
out:
    if (err < 0) {
        if (*key)
            cr_wipe(*key, strlen(*key));
        free(*cert);
        free(*key);
        *cert = *key = NULL;
    }
    free(cpath);
    free(kpath);
    return err;
}
