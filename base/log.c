/* Leveled logging to stderr or a file. One line per message, prefixed with
 * the level; daemons point it at their session log.
 *
 * A log a peer can make the daemon write must not fill the disk: messages
 * from one call site (its format string) beyond a burst per interval are
 * counted, not written, and the count is one line once the interval is
 * over ("... repeated 4211 more times in 10 s"), as the kernel's
 * printk_ratelimit does; a log file past its size is rotated (name.1 ..
 * name.<keep>), as logrotate's size and rotate do. */
#include "base.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

static int log_level = -1;
static FILE *log_fp;
static char *log_path;
static uint64_t log_bytes; /* in the file now */
static cr_log_limits_t limits = {
    .burst = 20, .interval_ms = 10000, .max_bytes = 16u << 20, .keep = 3};

/* One call site's window: the first burst messages are written, the rest
 * counted. */
typedef struct site {
    const char *fmt;
    int level;
    int64_t start;
    uint32_t n;
    uint64_t dropped;
    char first[120]; /* the window's first message, to say what repeated */
} site_t;
static site_t sites[32];

void cr_log_set_limits(const cr_log_limits_t *l)
{
    limits = *l;
    memset(sites, 0, sizeof(sites));
}

static int level_from_env(void)
{
    const char *s = getenv("CORRAL_LOG_LEVEL");
    if (!s)
        return CR_LOG_WARN;
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(names); i++)
        if (strcmp(s, names[i]) == 0)
            return (int)i;
    return CR_LOG_WARN;
}

void cr_log_set_level(int level)
{
    log_level = level;
}

int cr_log_get_level(void)
{
    if (log_level < 0)
        log_level = level_from_env();
    return log_level;
}

int cr_log_set_file(const char *path)
{
    if (log_fp && log_fp != stderr)
        fclose(log_fp);
    log_fp = NULL;
    CR_FREE(log_path);
    log_bytes = 0;
    if (!path)
        return 0;
    /* never through a symlink someone planted: the log is in the session */
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
        close(fd);
        return CR_EACCES;
    }
    log_fp = fdopen(fd, "a");
    if (!log_fp) {
        close(fd);
        return -errno;
    }
    log_path = cr_strdup(path);
    log_bytes = (uint64_t)st.st_size;
    setvbuf(log_fp, NULL, _IOLBF, 0);
    return 0;
}

int cr_log_use_file(const char *given, const char *dir)
{
    char *path = given ? cr_strdup(given) : cr_asprintf("%s/corrald.log", dir);
    int le = cr_log_set_file(path), rc = 0;
    if (le < 0 && given) {
        fprintf(stderr,
                "corrald: --log-file %s: %s (it must be a regular file of this user, not a "
                "symbolic link, in a directory that exists)\n",
                path, cr_strerror(le));
        rc = -1;
    } else if (le < 0) {
        fprintf(stderr, "corrald: cannot log to %s; logging to stderr\n", path);
    }
    free(path);
    return rc;
}

/* name -> name.1 -> ... -> name.<keep> (the oldest goes), then a new
 * name; a failure keeps writing where it was. */
static void rotate(void)
{
    if (!log_path || limits.keep == 0)
        return;
    for (unsigned i = limits.keep; i >= 1; i--) {
        char *from = i == 1 ? cr_strdup(log_path) : cr_asprintf("%s.%u", log_path, i - 1);
        char *to = cr_asprintf("%s.%u", log_path, i);
        rename(from, to);
        free(from);
        free(to);
    }
    char *path = log_path;
    log_path = NULL;
    FILE *old = log_fp;
    log_fp = NULL;
    if (cr_log_set_file(path) < 0) { /* keep the old stream: nothing is lost */
        log_fp = old;
        log_path = path;
        log_bytes = 0;
        return;
    }
    fclose(old);
    free(path);
}

/* Lines that could not be written (a full disk, EIO): counted, never
 * waited for, and said with the next line that is written. */
static uint64_t log_lost;
static int log_lost_errno;

uint64_t cr_log_lost(void)
{
    return log_lost;
}

/* One write(2) of the whole line: a log that fails never blocks or stops
 * the daemon, the line is dropped and counted (stdio would keep a failed
 * line in its buffer and its error flag set). */
static bool put(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            log_lost_errno = w < 0 ? errno : EIO;
            return false;
        }
        s += w;
        n -= (size_t)w;
    }
    return true;
}

static void emit(FILE *fp, int level, const char *line)
{
    static const char *tags[] = {"error", "warning", "info", "debug"};
    char buf[2400], lost[160] = "";
    size_t n = 0;
    if (log_fp) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        n = (size_t)snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ",
                             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                             tm.tm_sec, ts.tv_nsec / 1000000);
    }
    if (log_lost)
        snprintf(lost, sizeof(lost), " (%llu earlier log line(s) lost: %s)",
                 (unsigned long long)log_lost, strerror(log_lost_errno));
    int tag = level < 0 ? 0 : level > 3 ? 3 : level;
    int m = snprintf(buf + n, sizeof(buf) - n, "corral: %s: %s%s\n", tags[tag], line, lost);
    n += m > 0 ? (size_t)m : 0;
    if (n >= sizeof(buf)) {
        n = sizeof(buf) - 1;
        buf[n - 1] = '\n';
    }
    if (!put(fileno(fp), buf, n)) {
        log_lost++;
        return;
    }
    log_lost = 0;
    if (!log_fp)
        return;
    log_bytes += n;
    if (limits.max_bytes && log_bytes >= limits.max_bytes)
        rotate();
}

/* The count of each window that has ended, as one line. */
static void flush_sites(FILE *fp, int64_t now)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(sites); i++) {
        site_t *st = &sites[i];
        if (!st->fmt || now - st->start < (int64_t)limits.interval_ms)
            continue;
        if (st->dropped) {
            char line[256];
            snprintf(line, sizeof(line),
                     "the message \"%s\" and others like it repeated %llu more "
                     "time(s) in %u ms",
                     st->first, (unsigned long long)st->dropped, limits.interval_ms);
            emit(fp, st->level, line);
        }
        st->fmt = NULL;
    }
}

/* Whether a message from call site fmt is written now (else counted). */
static bool admit(const char *fmt, int level, const char *line, int64_t now)
{
    if (!limits.burst || level > CR_LOG_WARN) /* info and debug are asked for: all of it */
        return true;
    site_t *st = NULL, *free_slot = NULL;
    for (size_t i = 0; i < CR_ARRAY_SIZE(sites) && !st; i++) {
        if (sites[i].fmt == fmt)
            st = &sites[i];
        else if (!sites[i].fmt && !free_slot)
            free_slot = &sites[i];
    }
    if (!st) {
        if (!free_slot)
            return true; /* more sites than slots: unlimited, as before */
        st = free_slot;
        *st = (site_t){.fmt = fmt, .level = level, .start = now};
        cr_strlcpy(st->first, line, sizeof(st->first));
    }
    if (st->n < limits.burst) {
        st->n++;
        return true;
    }
    st->dropped++;
    return false;
}

void cr_log(int level, const char *fmt, ...)
{
    if (level > cr_log_get_level())
        return;
    FILE *fp = log_fp ? log_fp : stderr;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    int64_t now = cr_mono_ms();
    flush_sites(fp, now);
    if (admit(fmt, level, line, now))
        emit(log_fp ? log_fp : stderr, level, line);
}
