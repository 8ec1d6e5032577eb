/* base: allocation, logging, small containers, string and file helpers.
 * Everything above base/ uses these rather than libc directly where a
 * policy applies (out-of-memory, root prefix, log levels). */
#ifndef CORRAL_BASE_H
#define CORRAL_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <corral/error.h>
#include <dirent.h>

#define CR_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define CR_UNUSED(x) ((void)(x))

/* ---- allocation: out-of-memory aborts with one message, in one place ---- */
void *cr_malloc(size_t n);
void *cr_calloc(size_t nmemb, size_t size);
void *cr_realloc(void *p, size_t n);
char *cr_strdup(const char *s);
char *cr_strndup(const char *s, size_t n);
char *cr_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define CR_FREE(p)                                                                                 \
    do {                                                                                           \
        free(p);                                                                                   \
        (p) = NULL;                                                                                \
    } while (0)

/* ---- growable arrays: struct { T *v; size_t n, cap; } ---- */
#define CR_VEC(T)                                                                                  \
    struct {                                                                                       \
        T *v;                                                                                      \
        size_t n, cap;                                                                             \
    }
void cr__vec_grow(void **v, size_t *cap, size_t need, size_t elem);
/* Appends one zeroed element and returns a pointer to it. */
#define CR_VEC_PUSH(vec)                                                                           \
    (cr__vec_grow((void **)&(vec)->v, &(vec)->cap, (vec)->n + 1, sizeof(*(vec)->v)),               \
     memset(&(vec)->v[(vec)->n], 0, sizeof(*(vec)->v)), &(vec)->v[(vec)->n++])
#define CR_VEC_FREE(vec)                                                                           \
    do {                                                                                           \
        free((vec)->v);                                                                            \
        (vec)->v = NULL;                                                                           \
        (vec)->n = (vec)->cap = 0;                                                                 \
    } while (0)

/* ---- a growable string buffer ---- */
typedef struct cr_buf {
    char *s;
    size_t len, cap;
} cr_buf_t;
void cr_buf_printf(cr_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cr_buf_append(cr_buf_t *b, const char *s, size_t n);
void cr_buf_free(cr_buf_t *b);

/* ---- logging ---- */
enum { CR_LOG_ERROR = 0, CR_LOG_WARN = 1, CR_LOG_INFO = 2, CR_LOG_DEBUG = 3 };
/* Sets the level (messages above it are dropped) and the destination
 * (NULL: stderr). Level can also come from CORRAL_LOG_LEVEL. */
void cr_log_set_level(int level);
int cr_log_get_level(void);
/* path is opened O_NOFOLLOW and must be a regular file of this user
 * (created 0600): 0, or -errno / CR_EACCES. */
int cr_log_set_file(const char *path);
/* corrald's log: given (--log-file) or dir/corrald.log. A given file that
 * cannot be used is said on stderr, with what it must be, and returns -1
 * (the operator's choice is not replaced quietly); the default one that
 * cannot be used leaves the log on stderr, saying so, and returns 0. */
int cr_log_use_file(const char *given, const char *dir);
/* Lines that could not be written since the last one that was (a full
 * disk, EIO): a failing log never blocks or stops the daemon; the next
 * line written says how many were lost. */
uint64_t cr_log_lost(void);
void cr_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* What keeps a log bounded (base/log.c): at most burst messages from one
 * call site per interval_ms, the rest counted in one line when the
 * interval is over (burst 0: no limit); a log file rotated at max_bytes
 * (0: never), keep older files name.1 .. name.<keep>. Defaults: 20 per
 * 10 s, 16 MiB, 3. */
typedef struct cr_log_limits {
    uint32_t burst, interval_ms;
    uint64_t max_bytes;
    unsigned keep;
} cr_log_limits_t;
void cr_log_set_limits(const cr_log_limits_t *l);
#define cr_error(...) cr_log(CR_LOG_ERROR, __VA_ARGS__)
#define cr_warn(...) cr_log(CR_LOG_WARN, __VA_ARGS__)
#define cr_info(...) cr_log(CR_LOG_INFO, __VA_ARGS__)
#define cr_debug(...) cr_log(CR_LOG_DEBUG, __VA_ARGS__)

/* ---- clocks (never in sched/ or hw/: those are pure) ---- */
/* Milliseconds of CLOCK_MONOTONIC, for timeouts and intervals. */
int64_t cr_mono_ms(void);
/* Milliseconds since the epoch (CLOCK_REALTIME), for records people read. */
int64_t cr_wall_ms(void);
/* Microseconds since the epoch, for ordering events across nodes. */
int64_t cr_wall_us(void);

/* ---- paths corral trusts (base/trust.c, docs/runtime.md "The session") ---- */
/* The corral home: $CORRAL_HOME, else /run/corral for root, else
 * $XDG_RUNTIME_DIR/corral (when that is a private directory of ours), else
 * /tmp/corral-$UID. Only the path: nothing is created or checked. */
int cr_home_path(char *out, size_t size);
/* The corral home, created (0700) when missing and refused unless
 * cr_dir_is_private; NULL then, said on stderr. Shared by the head and the
 * agent. */
const char *cr_corral_home(void);
/* Whether path is a real directory (not a symlink) owned by the effective
 * user that no group or other may write; why says what is wrong and how
 * to fix it. */
bool cr_dir_is_private(const char *path, char *why, size_t size);
/* mkdir 0700 when missing, then cr_dir_is_private: 0 or a negative code. */
int cr_mkdir_private(const char *path, char *why, size_t size);
/* dir opened to read its entries (its descriptor: dirfd()), dir itself no
 * symlink (O_NOFOLLOW); NULL with errno set when it cannot be. */
DIR *cr_opendir_nofollow(const char *dir);
/* open(2) with O_NOFOLLOW (mode 0600 when O_CREAT) of a regular file the
 * effective user owns: the descriptor, or a negative code and why. */
int cr_open_private(const char *path, int flags, char *why, size_t size);
/* The whole of such a file, malloc'ed and NUL-terminated. */
int cr_read_private(const char *path, char **out, size_t *len, char *why, size_t size);
/* Writes path atomically: a new 0600 file (O_EXCL, O_NOFOLLOW) beside it,
 * written, fsync'ed and renamed over it, so a reader (or a reboot) sees
 * the old bytes or the new ones, never part, and nobody else ever can. */
int cr_write_private(const char *path, const void *data, size_t len, char *why, size_t size);
/* The session session_latest names in home, as home/<name>: home is
 * private, the link is a symlink the effective user owns whose target is
 * a plain name inside home, and that directory is private too. */
int cr_session_latest(const char *home, char *out, size_t size, char *why, size_t wsize);
/* The id of the session (or agent) directory dir: 32 hex digits read from
 * dir/session_id, drawn and written there the first time. Every worker
 * started there carries it (CORRAL_SESSION_ID), which is how a process is
 * proved to be this session's before it is adopted or stopped by pid. */
#define CR_SESSION_ID_LEN 32
int cr_session_id(const char *dir, char out[CR_SESSION_ID_LEN + 1], char *why, size_t size);

/* ---- strings ---- */
/* Copies at most size-1 bytes and always terminates; returns strlen(src). */
size_t cr_strlcpy(char *dst, const char *src, size_t size);
/* Trims ASCII whitespace in place at both ends; returns s. */
char *cr_strtrim(char *s);
bool cr_str_has_prefix(const char *s, const char *prefix);
/* n bytes as 2n lowercase hex digits in out (room for 2n + 1), terminated. */
void cr_hex_encode(const uint8_t *b, size_t n, char *out);
/* FNV-1a (64 bits) of a string, for the open-addressed tables of names
 * (hw/node.c's environment merge, agent/keep.c's worker ids). */
#define CR_HASH_SEED 1469598103934665603ull
uint64_t cr_hash_str(const char *s);
/* The same over n bytes at p, going on from h (CR_HASH_SEED to start):
 * a key of several fields hashed one after another (head/placement.c's
 * shapes). */
uint64_t cr_hash_bytes(uint64_t h, const void *p, size_t n);
/* len hex digits (either case) as len / 2 bytes in out; false when len is
 * odd or a character is no hex digit (out then holds garbage). */
bool cr_hex_decode(const char *hex, size_t len, uint8_t *out);
/* The value of one hex digit (either case), -1 for anything else. */
int cr_hex_digit(char c);
/* Strict integer parsers: the whole string (after trimming) must be a number. */
int cr_parse_i64(const char *s, int base, int64_t *out);
int cr_parse_u64(const char *s, int base, uint64_t *out);

/* ---- files under a root prefix ("/" or a fixture tree) ---- */
/* Joins root and path into out; path is absolute ("/sys/..."). */
int cr_path_join(char *out, size_t size, const char *root, const char *path);
/* Reads a whole (small) file under root into a NUL-terminated, trimmed
 * buffer. Returns 0, -ENOENT, -EACCES, -E2BIG (larger than size-1), ... */
int cr_read_file(const char *root, const char *path, char *buf, size_t size);
/* Reads a whole file of any size; *out is malloc'ed and NUL-terminated. */
int cr_read_file_alloc(const char *root, const char *path, char **out, size_t *len);
/* The rest of an open file, of any size, the same way. */
int cr_read_fd_alloc(int fd, char **out, size_t *len);
int cr_read_u64(const char *root, const char *path, int base, uint64_t *out);
int cr_read_i64(const char *root, const char *path, int base, int64_t *out);
bool cr_path_exists(const char *root, const char *path);
bool cr_path_is_dir(const char *root, const char *path);
/* Resolves a symlink under root and returns its target's last component. */
int cr_readlink_base(const char *root, const char *path, char *buf, size_t size);
/* Lists names in a directory under root, sorted, without "." and "..";
 * *names is a malloc'ed array of malloc'ed strings. */
int cr_list_dir(const char *root, const char *path, char ***names, size_t *n);
void cr_free_strv(char **v, size_t n);

/* ---- worker output (output.c) ---- */
/* Bounds what an append-only output file holds on disk to about its last
 * keep bytes: once it holds more than keep + keep/8, its oldest part
 * becomes a hole (the logical size and every offset stay). fd open for
 * writing; keep 0: unbounded. Returns 1 when it punched (*dropped: bytes
 * freed), 0 when nothing was to do, -EOPNOTSUPP (and others) when the
 * filesystem cannot. */
int cr_output_bound(int fd, uint64_t keep, uint64_t *dropped);
/* 0 when fd's filesystem can punch holes (cr_output_bound works there),
 * else the negative errno; changes nothing in the file. */
int cr_output_probe(int fd);
/* Where holes may be in a file of size bounded to keep: before its last
 * keep bytes, the only part a bound punches (0 when keep is 0). */
uint64_t cr_output_old(uint64_t size, uint64_t keep);
/* The first extent of data at or after off in fd's first size bytes:
 * [*start, *end); false when nothing is left. Holes are believed only
 * before old (cr_output_old, or further where the caller knows of gaps),
 * since SEEK_DATA on a file being written to can call fresh data a hole.
 * Where the filesystem knows no holes, all of it is data. */
bool cr_output_next(int fd, uint64_t off, uint64_t size, uint64_t old, uint64_t *start,
                    uint64_t *end);
/* Whether a bound punched off since the caller looked (a read there may
 * have given zeros: read again from the next data). */
bool cr_output_punched(int fd, uint64_t off, uint64_t keep);
/* Bytes of fd's first size that are holes before old: output dropped. */
uint64_t cr_output_dropped(int fd, uint64_t size, uint64_t old);
/* The default bound on each worker output file (corrald --worker-log-max). */
#define CR_WORKER_LOG_MAX_DEFAULT (64ull << 20)
/* The least one can ask for (tests use small ones). */
#define CR_WORKER_LOG_MAX_MIN (1ull << 20)
/* In options: asked for no bound (--worker-log-max 0). */
#define CR_WORKER_LOG_UNBOUNDED UINT64_MAX

/* ---- cpulists ("0-3,8,10-11") ---- */
/* Parses a Linux cpulist into a bitmap of nbits; returns the count or a
 * negative error (CR_EPARSE with *errpos set to the bad offset). */
int cr_cpulist_parse(const char *s, uint64_t *bits, size_t nbits, size_t *errpos);
/* Formats a bitmap as a cpulist. */
void cr_cpulist_format(const uint64_t *bits, size_t nbits, cr_buf_t *out);

/* ---- /proc/PID/status masks ("SigCgt:\t0000000000004002") ---- */
/* The 16 hexadecimal digits after "\nNAME:\t" in the text of a
 * /proc/PID/status (bit sig - 1 for signal sig, in SigIgn, SigCgt, ...);
 * false when they are not there. Allocates nothing and reads no locale:
 * agent/launch.c calls it in a child that borrows the head's memory. */
bool cr_proc_status_mask(const char *text, const char *name, uint64_t *out);

#endif
