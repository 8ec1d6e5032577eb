/* Paths corral trusts (docs/runtime.md "The session"): the corral home
 * and what lies in it. A directory is used only when it is a real one
 * (not a symlink) owned by the effective user that no group or other may
 * write, as OpenSSH's secure_filename and tmux's socket directory check;
 * a file in it is opened without following a symlink, created with
 * O_EXCL, written through a temporary file and a rename, and read only
 * when its owner is the effective user. A root daemon then never follows
 * another user's link nor acts on a file another user planted. */
#include "base.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX_HOME "set CORRAL_HOME to a directory of your own (mkdir -m 700 DIR)"

/* Whether st (of path, from lstat) is a directory only its owner, the
 * effective user, may write; why says what is wrong and what to do. */
static bool st_is_private(const char *path, const struct stat *st, char *why, size_t size)
{
    uid_t me = geteuid();
    if (S_ISLNK(st->st_mode))
        snprintf(why, size,
                 "%s is a symbolic link, and corral uses only a real directory: remove the link "
                 "or " FIX_HOME,
                 path);
    else if (!S_ISDIR(st->st_mode))
        snprintf(why, size, "%s is not a directory: remove it or " FIX_HOME, path);
    else if (st->st_uid != me)
        snprintf(why, size,
                 "%s is owned by uid %u, not by you (uid %u): another user may have made it to "
                 "take over your sessions; remove it (as its owner or root) or " FIX_HOME,
                 path, (unsigned)st->st_uid, (unsigned)me);
    else if (st->st_mode & 022)
        snprintf(why, size, "%s has mode %04o, so others may write in it: run chmod go-w %s", path,
                 (unsigned)(st->st_mode & 07777), path);
    else
        return true;
    return false;
}

bool cr_dir_is_private(const char *path, char *why, size_t size)
{
    struct stat st;
    if (lstat(path, &st) < 0) {
        snprintf(why, size, "cannot use %s: %s", path, strerror(errno));
        return false;
    }
    return st_is_private(path, &st, why, size);
}

int cr_home_path(char *out, size_t size)
{
    const char *home = getenv("CORRAL_HOME");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    char why[512];
    int n;
    if (home && home[0])
        n = snprintf(out, size, "%s", home);
    else if (geteuid() == 0)
        n = snprintf(out, size, "/run/corral");
    else if (xdg && xdg[0] == '/' && cr_dir_is_private(xdg, why, sizeof(why)))
        n = snprintf(out, size, "%s/corral", xdg);
    else
        n = snprintf(out, size, "/tmp/corral-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= size)
        return CR_E2BIG;
    while (n > 1 && out[n - 1] == '/')
        out[--n] = '\0';
    return 0;
}

const char *cr_corral_home(void)
{
    static char home[4096];
    char why[1024];
    if (cr_home_path(home, sizeof(home)) < 0) {
        fprintf(stderr, "corrald: CORRAL_HOME is too long; use a shorter path\n");
        return NULL;
    }
    if (mkdir(home, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "corrald: cannot create %s: %s (" FIX_HOME ")\n", home, strerror(errno));
        return NULL;
    }
    if (!cr_dir_is_private(home, why, sizeof(why))) {
        fprintf(stderr, "corrald: refusing the corral home: %s\n", why);
        return NULL;
    }
    return home;
}

int cr_mkdir_private(const char *path, char *why, size_t size)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST) {
        int err = -errno;
        snprintf(why, size, "cannot create %s: %s", path, strerror(errno));
        return err;
    }
    return cr_dir_is_private(path, why, size) ? 0 : CR_EACCES;
}

DIR *cr_opendir_nofollow(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return d;
}

int cr_open_private(const char *path, int flags, char *why, size_t size)
{
    int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int err = -errno;
        snprintf(why, size, "cannot open %s: %s%s", path, strerror(errno),
                 errno == ELOOP ? " (a symbolic link, which corral does not follow there)" : "");
        return err;
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        st.st_mode = 0;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
        if (!S_ISREG(st.st_mode))
            snprintf(why, size, "%s is not a regular file: remove it", path);
        else
            snprintf(why, size, "%s is owned by uid %u, not by you (uid %u): remove it", path,
                     (unsigned)st.st_uid, (unsigned)geteuid());
        close(fd);
        return CR_EACCES;
    }
    return fd;
}

int cr_read_private(const char *path, char **out, size_t *len, char *why, size_t size)
{
    int fd = cr_open_private(path, O_RDONLY, why, size);
    if (fd < 0)
        return fd;
    int err = cr_read_fd_alloc(fd, out, len);
    if (err < 0)
        snprintf(why, size, "cannot read %s: %s", path, strerror(-err));
    close(fd);
    return err;
}

int cr_write_private(const char *path, const void *data, size_t len, char *why, size_t size)
{
    char *tmp = cr_asprintf("%s.tmp.%d", path, (int)getpid());
    int err = 0;
    unlink(tmp); /* ours from a previous run of this pid, or an error below */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        err = -errno;
        snprintf(why, size, "cannot create %s: %s", tmp, strerror(errno));
        goto out_free;
    }
    for (const char *p = data; len;) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            err = -errno;
            snprintf(why, size, "cannot write %s: %s", tmp, strerror(errno));
            goto out_unlink;
        }
        p += w;
        len -= (size_t)w;
    }
    /* on disk before the rename makes it visible: after a crash the path
     * holds the old bytes or the new ones, never an empty file */
    if (fsync(fd) < 0) {
        err = -errno;
        snprintf(why, size, "cannot write %s: fsync: %s", tmp, strerror(errno));
        goto out_unlink;
    }
    if (close(fd) < 0) {
        fd = -1;
        err = -errno;
        snprintf(why, size, "cannot write %s: %s", tmp, strerror(errno));
        goto out_unlink;
    }
    fd = -1;
    if (rename(tmp, path) < 0) {
        err = -errno;
        snprintf(why, size, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto out_unlink;
    }
    goto out_free;
out_unlink:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
out_free:
    free(tmp);
    return err;
}

int cr_session_latest(const char *home, char *out, size_t size, char *why, size_t wsize)
{
    if (!cr_dir_is_private(home, why, wsize))
        return CR_EACCES;
    char link[4096], target[256];
    snprintf(link, sizeof(link), "%s/session_latest", home);
    struct stat st;
    if (lstat(link, &st) < 0) {
        int err = -errno;
        if (err == -ENOENT)
            snprintf(why, wsize,
                     "no head is running (no session in %s); start one with 'corral start --head'",
                     home);
        else
            snprintf(why, wsize, "no session in %s (%s): is a head running? corral start --head",
                     home, strerror(errno));
        return err;
    }
    ssize_t n = S_ISLNK(st.st_mode) ? readlink(link, target, sizeof(target) - 1) : -1;
    if (n > 0)
        target[n] = '\0';
    if (n <= 0 || st.st_uid != geteuid() || memchr(target, '/', (size_t)n) ||
        strcmp(target, ".") == 0 || strcmp(target, "..") == 0) {
        snprintf(why, wsize,
                 "%s is not a link of yours to a session inside %s (owner uid %u): remove it and "
                 "start the head again",
                 link, home, (unsigned)st.st_uid);
        return CR_EACCES;
    }
    int m = snprintf(out, size, "%s/%s", home, target);
    if (m < 0 || (size_t)m >= size)
        return CR_E2BIG;
    return cr_dir_is_private(out, why, wsize) ? 0 : CR_EACCES;
}

int cr_session_id(const char *dir, char out[CR_SESSION_ID_LEN + 1], char *why, size_t size)
{
    char *path = cr_asprintf("%s/session_id", dir), *text = NULL;
    int err = cr_read_private(path, &text, NULL, why, size);
    if (err == 0) {
        cr_strtrim(text);
        uint8_t raw[CR_SESSION_ID_LEN / 2];
        if (strlen(text) != CR_SESSION_ID_LEN || !cr_hex_decode(text, CR_SESSION_ID_LEN, raw)) {
            snprintf(why, size, "%s is malformed (expected %d hex digits): remove it", path,
                     CR_SESSION_ID_LEN);
            err = CR_EPARSE;
        } else {
            cr_strlcpy(out, text, CR_SESSION_ID_LEN + 1);
        }
    } else if (err == CR_ENOENT) {
        uint8_t raw[CR_SESSION_ID_LEN / 2];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
            err = -errno;
            snprintf(why, size, "getrandom: %s", strerror(errno));
        } else {
            cr_hex_encode(raw, sizeof(raw), out);
            char line[CR_SESSION_ID_LEN + 2];
            snprintf(line, sizeof(line), "%s\n", out);
            err = cr_write_private(path, line, strlen(line), why, size);
        }
    }
    free(text);
    free(path);
    return err;
}
