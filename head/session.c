/* The head's session directory (docs/runtime.md "The session"): made at
 * start under the corral home, or taken over from a head that died, with
 * session_latest pointing at it; the files in it; the cluster token. */
#include "head/head.h"
#include "net/tls.h"
#include <fcntl.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Whether pid runs; a zombie does not (nobody may reap a head that died). */
static bool pid_alive(int pid)
{
    char state = 0;
    return kill(pid, 0) == 0 && agent_proc_stat(pid, &state) != 0 && state != 'Z';
}

/* Whether every entry of dir (and of its folders, one level down: logs/)
 * is the effective user's own and no symlink; the first that is not is
 * said in why. */
static bool all_ours(const char *dir, int depth, char *why, size_t size)
{
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(why, size, "cannot read %s: %s", dir, strerror(errno));
        return false;
    }
    bool ok = true;
    struct dirent *de;
    while (ok && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char *path = cr_asprintf("%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(path, &st) < 0 || st.st_uid != geteuid() || S_ISLNK(st.st_mode)) {
            snprintf(why, size, "%s is %s", path,
                     S_ISLNK(st.st_mode) ? "a symbolic link" : "not owned by you");
            ok = false;
        } else if (S_ISDIR(st.st_mode) && depth > 0) {
            ok = all_ours(path, depth - 1, why, size);
        }
        free(path);
    }
    closedir(d);
    return ok;
}

/* When session_latest names the session of a head that died (its
 * corrald.pid names no live process; a clean exit removes the file) and
 * holds its state.db, this head takes it over, token included: 1. 0 when
 * there is none to take over, a negative code (said on stderr) when there
 * is one this head must not take: a file in it is not the user's. */
static int reuse_session(const char *home)
{
    char dir[4096], why[1024];
    int e = cr_session_latest(home, dir, sizeof(dir), why, sizeof(why));
    if (e == CR_ENOENT)
        return 0;
    if (e < 0) {
        fprintf(stderr, "corrald: refusing the session: %s\n", why);
        return e;
    }
    char *pidf = cr_asprintf("%s/corrald.pid", dir), *db = cr_asprintf("%s/state.db", dir);
    char *text = NULL;
    int pid = 0;
    if (cr_read_private(pidf, &text, NULL, why, sizeof(why)) == 0 && sscanf(text, "%d", &pid) != 1)
        pid = 0;
    free(text);
    struct stat st;
    bool dead = pid > 0 && !pid_alive(pid) && lstat(db, &st) == 0;
    free(pidf);
    free(db);
    if (!dead)
        return 0;
    if (!all_ours(dir, 1, why, sizeof(why))) {
        fprintf(stderr,
                "corrald: refusing to take over the session %s of a head that died (pid %d): %s. "
                "Remove that session (or %s/session_latest) to start a new one\n",
                dir, pid, why, home);
        return CR_EACCES;
    }
    D.session = cr_strdup(dir);
    D.reused = true;
    D.died_at = st.st_mtime;
    const char *later[] = {"state.db-wal", "logs/corrald.log"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(later); i++) {
        char *p = cr_asprintf("%s/%s", dir, later[i]);
        if (lstat(p, &st) == 0 && st.st_mtime > D.died_at)
            D.died_at = st.st_mtime;
        free(p);
    }
    D.logs = cr_asprintf("%s/logs", D.session);
    D.sock = cr_asprintf("%s/corrald.sock", D.session);
    if (cr_mkdir_private(D.logs, why, sizeof(why)) < 0) {
        fprintf(stderr, "corrald: %s\n", why);
        return CR_EACCES;
    }
    unlink(D.sock); /* the dead head's */
    return 1;
}

/* $CORRAL_HOME/session_<time>_<pid>/ with logs/, and session_latest
 * pointing at it (or the session of a head that died, reuse_session). Any failure here is reported
 * now, not at the first job. */
static int new_session(const char *home);

int session_make(void)
{
    const char *home = cr_corral_home();
    if (!home)
        return CR_EIO;
    int e = reuse_session(home);
    if (e == 0)
        e = new_session(home);
    if (e < 0)
        return e;
    char why[1024];
    if ((e = cr_session_id(D.session, D.session_id, why, sizeof(why))) < 0) {
        fprintf(stderr, "corrald: the session's id: %s\n", why);
        return e;
    }
    return 0;
}

/* A new session directory and session_latest pointing at it. */
static int new_session(const char *home)
{
    char stamp[64], why[1024];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%d_%H-%M-%S", &tm);
    D.session = cr_asprintf("%s/session_%s_%d", home, stamp, (int)getpid());
    if (mkdir(D.session, 0700) < 0) {
        fprintf(stderr,
                "corrald: cannot create the session directory %s: %s (set CORRAL_HOME to a "
                "writable directory)\n",
                D.session, strerror(errno));
        return -errno;
    }
    D.logs = cr_asprintf("%s/logs", D.session);
    if (cr_mkdir_private(D.logs, why, sizeof(why)) < 0) {
        fprintf(stderr, "corrald: %s\n", why);
        return CR_EACCES;
    }
    D.sock = cr_asprintf("%s/corrald.sock", D.session);
    if (strlen(D.sock) >= 108) {
        fprintf(stderr,
                "corrald: the socket path %s is too long for a Unix socket; use a shorter "
                "CORRAL_HOME\n",
                D.sock);
        return CR_E2BIG;
    }
    /* the link is replaced atomically: a client never finds it missing */
    char *tmp = cr_asprintf("%s/.session_latest.%d", home, (int)getpid());
    char *link = cr_asprintf("%s/session_latest", home);
    const char *base = strrchr(D.session, '/') + 1;
    int err = 0;
    unlink(tmp);
    if (symlink(base, tmp) < 0 || rename(tmp, link) < 0) {
        fprintf(stderr, "corrald: cannot point %s at %s: %s\n", link, base, strerror(errno));
        err = -errno;
        unlink(tmp);
    }
    free(tmp);
    free(link);
    return err;
}

void session_took_over(size_t njobs, int active)
{
    char when[64];
    struct tm tm;
    gmtime_r(&D.died_at, &tm);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    fprintf(stderr,
            "corrald: took over session %s of a head that died at %s: %zu job(s) recovered, %d "
            "active\n",
            strrchr(D.session, '/') + 1, when, njobs, active);
}

int session_write(const char *name, const char *text)
{
    char *path = cr_asprintf("%s/%s", D.session, name);
    char why[1024];
    int err = cr_write_private(path, text, strlen(text), why, sizeof(why));
    if (err < 0)
        fprintf(stderr, "corrald: %s\n", why);
    free(path);
    return err < 0 ? CR_EIO : 0;
}

static bool loopback(const char *host)
{
    return !host || strcmp(host, "127.0.0.1") == 0 || strcmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0;
}

/* Whether host is a loopback address: no TLS there unless asked for. */
static bool tls_loopback(const char *host)
{
    return loopback(host) || strncmp(host, "127.", 4) == 0;
}

/* A certificate or key file given with --tls-cert/--tls-key or kept in
 * the session (net/tls_files.c), said on stderr when it cannot be read. */
static int read_pem(const char *path, bool secret, char **out)
{
    char why[1024];
    int err = cr_tls_read_pem(path, secret, out, why, sizeof(why));
    if (err < 0)
        fprintf(stderr, "corrald: TLS: %s\n", why);
    return err;
}

int session_tls(const head_opts_t *o, bool dashboard, char **cert, char **key, bool *tcp)
{
    *cert = *key = NULL;
    bool given = o->tls_cert || o->tls_key;
    *tcp = !(o->tls < 0 || (o->tls == 0 && !given && tls_loopback(o->listen)));
    if (!*tcp) {
        if (!tls_loopback(o->listen))
            fprintf(stderr,
                    "corrald: warning: --no-tls: job commands and environments cross the "
                    "network in plain text on %s\n",
                    o->listen);
        if (!dashboard)
            return 0;
    }
    if (given && (!o->tls_cert || !o->tls_key)) {
        fprintf(stderr, "corrald: --tls-cert and --tls-key go together\n");
        return CR_EINVAL;
    }
    char why[1024];
    const cr_tls_ops_t *t = cr_tls_load(why, sizeof(why));
    if (!t) {
        fprintf(stderr, "corrald: %s\n", why);
        return CR_ENOENT;
    }
    char *cpath = cr_asprintf("%s/tls.crt", D.session),
         *kpath = cr_asprintf("%s/tls.key", D.session);
    int err = 0;
    uint8_t fp[CR_TLS_FP_LEN];
    if (given) {
        if ((err = read_pem(o->tls_cert, false, cert)) == 0)
            err = read_pem(o->tls_key, true, key);
    } else if (D.reused && access(cpath, F_OK) == 0) { /* the dead head's: agents pinned it */
        if ((err = read_pem(cpath, false, cert)) == 0)
            err = read_pem(kpath, true, key);
    } else {
        char cn[200];
        snprintf(cn, sizeof(cn), "corral head %.128s", node_name());
        cr_buf_t names = {0};
        cr_tls_san_names(&names);
        if (t->selfsigned_names(cn, names.s, cert, key, why, sizeof(why)) < 0) {
            fprintf(stderr, "corrald: TLS: cannot make a certificate: %s\n", why);
            err = CR_EIO;
        } else if (cr_write_private(kpath, *key, strlen(*key), why, sizeof(why)) < 0 ||
                   cr_write_private(cpath, *cert, strlen(*cert), why, sizeof(why)) < 0) {
            fprintf(stderr, "corrald: TLS: %s\n", why);
            err = CR_EIO;
        }
        cr_buf_free(&names);
    }
    if (err == 0 && t->fingerprint(*cert, strlen(*cert), fp, why, sizeof(why)) < 0) {
        fprintf(stderr, "corrald: TLS: %s: %s\n", given ? o->tls_cert : cpath, why);
        err = CR_EINVAL;
    }
    if (err == 0 && *tcp) {
        char text[96];
        cr_tls_fp_format(fp, text, sizeof(text));
        fprintf(stderr, "corrald: TLS 1.3 on TCP, certificate %s\n", text);
        strcat(text, "\n");
        err = session_write("tls_fingerprint", text);
    }
    free(cpath);
    free(kpath);
    if (err < 0) {
        if (*key)
            cr_wipe(*key, strlen(*key));
        free(*cert);
        free(*key);
        *cert = *key = NULL;
    }
    return err;
}

/* The cluster token into token: the one given (the session gets a copy),
 * the dead head's when its session is taken over, or a new one. Said on
 * stderr when it fails. */
int session_token(const char *token_file, uint8_t token[CR_TOKEN_LEN])
{
    char *tokpath = cr_asprintf("%s/token", D.session);
    int e;
    if (token_file) { /* the cluster's token, given: the session gets a copy */
        e = cr_token_read(token_file, token);
        if (e == 0)
            e = cr_token_write(tokpath, token);
    } else if (D.reused) { /* clients of the dead head keep their token */
        e = cr_token_read(tokpath, token);
    } else {
        e = cr_token_generate(token);
        if (e == 0)
            e = cr_token_write(tokpath, token);
    }
    if (e < 0)
        fprintf(stderr, "corrald: cannot %s the token %s: %s%s\n",
                token_file || D.reused ? "read" : "write", token_file ? token_file : tokpath,
                cr_strerror(e), D.reused ? " (remove session_latest to start a new session)" : "");
    else if (!loopback(D.listen) && !token_file)
        fprintf(stderr,
                "corrald: warning: listening on %s with a generated token; copy %s to each "
                "agent's machine (--token-file), or give the head one with --token-file\n",
                D.listen, tokpath);
    free(tokpath);
    return e;
}
