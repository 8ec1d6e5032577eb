/* Finding and loading the TLS shim (net/tls.h), and certificate
 * fingerprints in words. Part of corral_net: it needs no libssl. */
#include "net/net.h"
#include "net/tls.h"
#include <dlfcn.h>
#include <stdio.h>

#ifndef CORRAL_TLS_BUILD_DIR
#define CORRAL_TLS_BUILD_DIR ""
#endif

static const cr_tls_ops_t *loaded;

static const cr_tls_ops_t *try_load(const char *path, char *why, size_t size)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, size, "%.480s", e ? e : path);
        return NULL;
    }
    const cr_tls_ops_t *ops = dlsym(h, CR_TLS_OPS_SYMBOL);
    if (!ops || ops->size != sizeof(cr_tls_ops_t)) {
        snprintf(why, size, "%.400s is not the TLS shim of this build of corral", path);
        dlclose(h);
        return NULL;
    }
    return ops; /* never closed: the process keeps it */
}

const cr_tls_ops_t *cr_tls_load(char *why, size_t size)
{
    if (loaded)
        return loaded;
    char dir[4096] = "";
    Dl_info info;
    /* the object this code is in: the corral or corrald executable, or a
     * library that embeds libcorral */
    if (dladdr((void *)cr_tls_load, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
        snprintf(dir, sizeof(dir), "%s", info.dli_fname);
        *strrchr(dir, '/') = '\0';
    }
    char tried[3][4200];
    int n = 0;
    if (dir[0]) {
        snprintf(tried[n++], sizeof(tried[0]), "%s/%s", dir, CR_TLS_SHIM);
        snprintf(tried[n++], sizeof(tried[0]), "%s/../lib/corral/%s", dir, CR_TLS_SHIM);
    }
    if (CORRAL_TLS_BUILD_DIR[0])
        snprintf(tried[n++], sizeof(tried[0]), "%s/%s", CORRAL_TLS_BUILD_DIR, CR_TLS_SHIM);
    char last[512] = "no place to look";
    for (int i = 0; i < n; i++)
        if ((loaded = try_load(tried[i], last, sizeof(last))))
            return loaded;
    snprintf(why, size,
             "TLS needs %s (corral's OpenSSL shim, built with corral beside corrald), which "
             "cannot be loaded: %s",
             CR_TLS_SHIM, last);
    return NULL;
}

void cr_tls_fp_format(const uint8_t fp[CR_TLS_FP_LEN], char *buf, size_t size)
{
    char hex[2 * CR_TLS_FP_LEN + 1];
    cr_hex_encode(fp, CR_TLS_FP_LEN, hex);
    snprintf(buf, size, "sha256:%s", hex);
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int cr_tls_fp_parse(const char *s, uint8_t fp[CR_TLS_FP_LEN])
{
    if (!s)
        return CR_EPARSE;
    if (strncasecmp(s, "sha256:", 7) == 0)
        s += 7;
    size_t len = strlen(s);
    bool colons = len == 3 * CR_TLS_FP_LEN - 1;
    if (len != 2 * CR_TLS_FP_LEN && !colons)
        return CR_EPARSE;
    for (int i = 0; i < CR_TLS_FP_LEN; i++) {
        const char *p = s + (colons ? 3 * i : 2 * i);
        int hi = hexval(p[0]), lo = hexval(p[1]);
        if (hi < 0 || lo < 0 || (colons && i + 1 < CR_TLS_FP_LEN && p[2] != ':'))
            return CR_EPARSE;
        fp[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
