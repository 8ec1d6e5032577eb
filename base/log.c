/* Leveled logging to stderr or a file. One line per message, prefixed with
 * the level; daemons point it at their session log. */
#include "base.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

static int log_level = -1;
static FILE *log_fp;

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
    setvbuf(log_fp, NULL, _IOLBF, 0);
    return 0;
}

void cr_log(int level, const char *fmt, ...)
{
    if (level > cr_log_get_level())
        return;
    static const char *tags[] = {"error", "warning", "info", "debug"};
    FILE *fp = log_fp ? log_fp : stderr;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (log_fp) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        fprintf(fp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    }
    fprintf(fp, "corral: %s: %s\n", tags[level < 0 ? 0 : level > 3 ? 3 : level], line);
}
