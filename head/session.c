/* The head's session directory (docs/runtime.md "The session"): made at
 * start under the corral home, or taken over from a head that died, with
 * session_latest pointing at it; the files in it; the cluster token. */
#include "head/head.h"
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

/* When session_latest names the session of a head that died (its
 * corrald.pid names no live process; a clean exit removes the file) and
 * holds its state.db, this head takes it over, token included. */
static bool reuse_session(const char *home)
{
    char *link = cr_asprintf("%s/session_latest", home);
    char target[512];
    ssize_t len = readlink(link, target, sizeof(target) - 1);
    free(link);
    if (len <= 0 || memchr(target, '/', (size_t)len))
        return false;
    target[len] = '\0';
    char *dir = cr_asprintf("%s/%s", home, target);
    char *pidf = cr_asprintf("%s/corrald.pid", dir), *db = cr_asprintf("%s/state.db", dir);
    FILE *fp = fopen(pidf, "r");
    int pid = 0;
    if (fp) {
        if (fscanf(fp, "%d", &pid) != 1)
            pid = 0;
        fclose(fp);
    }
    bool reuse = pid > 0 && !pid_alive(pid) && access(db, R_OK | W_OK) == 0;
    free(pidf);
    free(db);
    if (!reuse) {
        free(dir);
        return false;
    }
    D.session = dir;
    D.reused = true;
    D.logs = cr_asprintf("%s/logs", D.session);
    D.sock = cr_asprintf("%s/corrald.sock", D.session);
    if (mkdir(D.logs, 0700) < 0 && errno != EEXIST)
        fprintf(stderr, "corrald: cannot create %s: %s\n", D.logs, strerror(errno));
    unlink(D.sock); /* the dead head's */
    fprintf(stderr, "corrald: taking over the session %s of a head that died (pid %d)\n", D.session,
            pid);
    return true;
}

/* $CORRAL_HOME/session_<time>_<pid>/ with logs/, and session_latest
 * pointing at it (or the session of a head that died, reuse_session). Any failure here is reported
 * now, not at the first job. */
int session_make(void)
{
    const char *home = cr_corral_home();
    if (!home)
        return CR_EIO;
    if (reuse_session(home))
        return 0;
    char stamp[64];
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
    if (mkdir(D.logs, 0700) < 0) {
        fprintf(stderr, "corrald: cannot create %s: %s\n", D.logs, strerror(errno));
        return -errno;
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

int session_write(const char *name, const char *text)
{
    char *path = cr_asprintf("%s/%s", D.session, name);
    FILE *fp = fopen(path, "w");
    int err = 0;
    if (!fp || fputs(text, fp) < 0) {
        fprintf(stderr, "corrald: cannot write %s: %s\n", path, strerror(errno));
        err = CR_EIO;
    }
    if (fp && fclose(fp) != 0 && !err) {
        fprintf(stderr, "corrald: cannot write %s: %s\n", path, strerror(errno));
        err = CR_EIO;
    }
    free(path);
    return err;
}

static bool loopback(const char *host)
{
    return !host || strcmp(host, "127.0.0.1") == 0 || strcmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0;
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
