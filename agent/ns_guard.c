/* agent/ns_guard: the sysctls, sysfs and raw disks a root agent's workers
 * must not reach (see ns_guard.h). */
#include "agent/ns_guard.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "base/base.h"

/* Bounds on what /dev and the mount table may make the agent hold: a node
 * with more is served as far as the bound, and the daemon's log says so. */
#define GUARD_MAX_COVER 4096
#define GUARD_MAX_RO 1024
#define GUARD_MAX_VISIT 65536
#define GUARD_MAX_DIRS 256

/* directories of /dev that hold no device of a disk, and that anyone may fill */
static const char *const skip_dirs[] = {"pts", "shm", "mqueue", "hugepages", NULL};
/* character devices that pass commands through to a disk: SCSI generic
 * (SG_IO reads with the file's read permission), bsg, NVMe's generic
 * namespace nodes (/dev/ngXnY) and raw flash */
static const char *const passthrough[] = {"scsi_generic", "bsg", "nvme-generic", "mtd", NULL};

static cr_ns_guard_t guard;
static bool gathered;
static int mounts_fd = -1;         /* the agent's /proc/self/mountinfo, polled for POLLPRI */
static char *dirs[GUARD_MAX_DIRS]; /* the directories of /dev looked into */
static size_t ndirs;
static uint64_t dev_sig; /* their modification times, mixed */

static bool in_list(const char *s, const char *const *l)
{
    for (; *l; l++)
        if (strcmp(s, *l) == 0)
            return true;
    return false;
}

static void strv_clear(char ***v, size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        free((*v)[i]);
    free(*v);
    *v = NULL;
    *n = 0;
}

static bool strv_equal(char **a, size_t na, char **b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

static void strv_push(char ***v, size_t *n, char *s)
{
    *v = cr_realloc(*v, (*n + 1) * sizeof(**v));
    (*v)[(*n)++] = s;
}

static bool is_passthrough(dev_t rdev)
{
    char link[64], target[256];
    snprintf(link, sizeof(link), "/sys/dev/char/%u:%u/subsystem", major(rdev), minor(rdev));
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n <= 0)
        return false;
    target[n] = '\0';
    const char *base = strrchr(target, '/');
    return in_list(base ? base + 1 : target, passthrough);
}

static uint64_t mix(uint64_t h, const struct stat *st)
{
    uint64_t v[3] = {(uint64_t)st->st_ino, (uint64_t)st->st_mtim.tv_sec,
                     (uint64_t)st->st_mtim.tv_nsec};
    for (size_t i = 0; i < 3; i++)
        h = (h ^ v[i]) * 0x100000001b3ull;
    return h;
}

/* The mixed modification times of the directories looked into (a device
 * node made or removed changes its directory's). */
static uint64_t dirs_sig(void)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < ndirs; i++) {
        struct stat st = {0};
        if (stat(dirs[i], &st) < 0)
            st.st_ino = 0;
        h = mix(h, &st);
    }
    return h;
}

/* One directory of /dev: its disks' nodes into cover, its subdirectories
 * (depth 0 only) looked into as well. */
static void scan_dir(const char *dir, int depth, char ***cover, size_t *ncover, size_t *visits)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    if (ndirs < GUARD_MAX_DIRS)
        dirs[ndirs++] = cr_strdup(dir);
    struct dirent *e;
    while ((e = readdir(d)) && (*visits)++ < GUARD_MAX_VISIT) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        bool disk = S_ISBLK(st.st_mode) || (S_ISCHR(st.st_mode) && is_passthrough(st.st_rdev));
        if (disk && *ncover < GUARD_MAX_COVER)
            strv_push(cover, ncover, cr_asprintf("%s/%s", dir, e->d_name));
        else if (disk)
            guard.truncated = true;
        else if (S_ISDIR(st.st_mode) && depth == 0 && !in_list(e->d_name, skip_dirs)) {
            char *sub = cr_asprintf("%s/%s", dir, e->d_name);
            scan_dir(sub, 1, cover, ncover, visits);
            free(sub);
        }
    }
    if (*visits >= GUARD_MAX_VISIT)
        guard.truncated = true;
    closedir(d);
}

static void gather_cover(char ***cover, size_t *ncover)
{
    for (size_t i = 0; i < ndirs; i++)
        free(dirs[i]);
    ndirs = 0;
    size_t visits = 0;
    struct stat st;
    if (stat("/proc/sysrq-trigger", &st) == 0)
        strv_push(cover, ncover, cr_strdup("/proc/sysrq-trigger"));
    scan_dir("/dev", 0, cover, ncover, &visits);
    dev_sig = dirs_sig();
}

static bool is_or_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* mountinfo writes space, tab, newline and backslash as \ooo */
static void unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

static int by_length(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    size_t nx = strlen(x), ny = strlen(y);
    return nx != ny ? (nx < ny ? -1 : 1) : strcmp(x, y);
}

static void gather_ro(char ***ro, size_t *nro)
{
    char *text = NULL;
    if (cr_read_file_alloc("/", "/proc/self/mountinfo", &text, NULL) < 0)
        text = NULL;
    struct stat st;
    if (stat("/proc/sys", &st) == 0)
        strv_push(ro, nro, cr_strdup("/proc/sys"));
    if (stat("/sys", &st) == 0)
        strv_push(ro, nro, cr_strdup("/sys"));
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT ... */
        char *f = line;
        for (int i = 0; i < 4 && f; i++) {
            f = strchr(f, ' ');
            if (f)
                f++;
        }
        if (!f)
            continue;
        /* an automount point is left alone: looking at it would mount
         * it, and what the automounter mounts there later shows as a
         * change of the mounts */
        char *type = strstr(f, " - ");
        if (type && strncmp(type + 3, "autofs ", 7) == 0)
            continue;
        char *end = strchr(f, ' ');
        if (end)
            *end = '\0';
        unescape(f);
        if (!is_or_under(f, "/sys") && !is_or_under(f, "/proc/sys"))
            continue;
        bool twice = false;
        for (size_t i = 0; i < *nro && !twice; i++)
            twice = strcmp((*ro)[i], f) == 0;
        if (twice)
            continue;
        if (*nro >= GUARD_MAX_RO) {
            guard.truncated = true;
            break;
        }
        strv_push(ro, nro, cr_strdup(f));
    }
    free(text);
    if (*nro)
        qsort(*ro, *nro, sizeof(**ro), by_length); /* a parent before what is mounted under it */
}

static bool mounts_changed(void)
{
    if (mounts_fd < 0)
        return false;
    struct pollfd p = {.fd = mounts_fd, .events = POLLPRI};
    return poll(&p, 1, 0) > 0;
}

bool cr_ns_guard_refresh(void)
{
    bool first = !gathered;
    bool dev = first || dirs_sig() != dev_sig;
    bool mnt = mounts_changed();
    if (mnt)
        guard.mounts_seen++;
    mnt |= first;
    if (!dev && !mnt)
        return false;
    gathered = true;
    bool was_truncated = guard.truncated;
    guard.truncated = false;
    bool changed = false;
    if (mnt) {
        if (mounts_fd < 0) /* before reading: a change while it is read shows next time */
            mounts_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
        guard.mounts_watched = mounts_fd >= 0;
        char **ro = NULL;
        size_t nro = 0;
        gather_ro(&ro, &nro);
        if (!strv_equal(ro, nro, guard.ro, guard.nro)) {
            strv_clear(&guard.ro, &guard.nro);
            guard.ro = ro;
            guard.nro = nro;
            changed = true;
        } else {
            strv_clear(&ro, &nro);
        }
    }
    if (dev) {
        char **cover = NULL;
        size_t ncover = 0;
        gather_cover(&cover, &ncover);
        if (!strv_equal(cover, ncover, guard.cover, guard.ncover)) {
            strv_clear(&guard.cover, &guard.ncover);
            guard.cover = cover;
            guard.ncover = ncover;
            changed = true;
        } else {
            strv_clear(&cover, &ncover);
        }
    }
    if (guard.truncated && !was_truncated)
        cr_warn("workers' namespace: more than %d disk device nodes or %d mounts under /sys "
                "and /proc/sys; only the first are hidden or made read-only",
                GUARD_MAX_COVER, GUARD_MAX_RO);
    if (changed)
        guard.generation++;
    return changed && !first;
}

const cr_ns_guard_t *cr_ns_guard(void)
{
    return &guard;
}

/* ---- applying: system calls only ---- */

__attribute__((no_sanitize_address)) int cr_ns_cover(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
    if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3))
        return 0; /* /dev/null itself, or covered already */
    return mount("/dev/null", path, "none", MS_BIND, NULL) < 0 ? -errno : 0;
}

/* path read-only, keeping its mount's other flags */
__attribute__((no_sanitize_address)) static int make_ro(const char *path)
{
    struct statfs sf;
    if (statfs(path, &sf) < 0)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
    if (sf.f_flags & ST_RDONLY)
        return 0;
    unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY;
    flags |= sf.f_flags & ST_NOSUID ? MS_NOSUID : 0;
    flags |= sf.f_flags & ST_NODEV ? MS_NODEV : 0;
    flags |= sf.f_flags & ST_NOEXEC ? MS_NOEXEC : 0;
    flags |= sf.f_flags & ST_NOATIME ? MS_NOATIME : 0;
    flags |= sf.f_flags & ST_NODIRATIME ? MS_NODIRATIME : 0;
    flags |= sf.f_flags & ST_RELATIME ? MS_RELATIME : 0;
    if (mount("none", path, "none", flags, NULL) == 0)
        return 0;
    if (errno != EINVAL)
        return -errno;
    /* not a mount of its own (/proc/sys): one made of it, what is mounted
     * below it included, then that made read-only */
    if (mount(path, path, "none", MS_BIND | MS_REC, NULL) < 0 ||
        mount("none", path, "none", flags, NULL) < 0)
        return -errno;
    return 0;
}

__attribute__((no_sanitize_address)) int cr_ns_guard_apply(const cr_ns_guard_t *g,
                                                           const char **step)
{
    for (size_t i = 0; i < g->nro; i++) {
        int err = make_ro(g->ro[i]);
        if (err) {
            *step = "making /sys or /proc/sys read-only";
            return err;
        }
    }
    for (size_t i = 0; i < g->ncover; i++) {
        int err = cr_ns_cover(g->cover[i]);
        if (err) {
            *step = "covering a disk's device node";
            return err;
        }
    }
    return 0;
}
