/* Finding and loading the TLS shim (net/tls.h), and certificate
 * fingerprints in words. Part of corral_net: it needs no libssl. */
#include "net/net.h"
#include "net/tls.h"
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#ifndef CORRAL_TLS_BUILD_DIR
#define CORRAL_TLS_BUILD_DIR ""
#endif
#ifndef CORRAL_TLS_INSTALL_DIR
#define CORRAL_TLS_INSTALL_DIR ""
#endif
#ifndef CORRAL_TLS_LIBDIR
#define CORRAL_TLS_LIBDIR "lib"
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

/* Whether dir is the build folder or inside it. */
static bool in_build_tree(const char *dir)
{
    size_t n = strlen(CORRAL_TLS_BUILD_DIR);
    return n && strncmp(dir, CORRAL_TLS_BUILD_DIR, n) == 0 && (dir[n] == '\0' || dir[n] == '/');
}

const cr_tls_ops_t *cr_tls_load(char *why, size_t size)
{
    if (loaded)
        return loaded;
    char dir[4096] = "";
    Dl_info info;
    /* the object this code is in: the corral or corrald executable, or
     * libcorral.so */
    if (dladdr((void *)cr_tls_load, &info) && info.dli_fname && info.dli_fname[0] == '/') {
        snprintf(dir, sizeof(dir), "%s", info.dli_fname);
        *strrchr(dir, '/') = '\0';
    } else { /* an executable dladdr names by argv[0] only */
        ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
        dir[n > 0 ? n : 0] = '\0';
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            dir[0] = '\0';
    }
    char tried[5][4200];
    int n = 0;
    if (dir[0]) {
        snprintf(tried[n++], sizeof(tried[0]), "%s/%s", dir, CR_TLS_SHIM);
        /* an installed tree: libcorral.so in LIBDIR, the programs in bin/ */
        snprintf(tried[n++], sizeof(tried[0]), "%s/corral/%s", dir, CR_TLS_SHIM);
        snprintf(tried[n++], sizeof(tried[0]), "%s/../%s/corral/%s", dir, CORRAL_TLS_LIBDIR,
                 CR_TLS_SHIM);
    }
    if (CORRAL_TLS_INSTALL_DIR[0])
        snprintf(tried[n++], sizeof(tried[0]), "%s/%s", CORRAL_TLS_INSTALL_DIR, CR_TLS_SHIM);
    /* never for an installed program: the build folder may be gone, and
     * anyone may make that path then */
    if (dir[0] && in_build_tree(dir))
        snprintf(tried[n++], sizeof(tried[0]), "%s/%s", CORRAL_TLS_BUILD_DIR, CR_TLS_SHIM);
    char last[512] = "no place to look";
    for (int i = 0; i < n; i++)
        if ((loaded = try_load(tried[i], last, sizeof(last))))
            return loaded;
    snprintf(why, size,
             "TLS needs %s (corral's OpenSSL shim, installed in %s), which cannot be loaded: %s",
             CR_TLS_SHIM, CORRAL_TLS_INSTALL_DIR, last);
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
