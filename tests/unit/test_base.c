/* base/: strings, number parsing, cpulists, files under a root, errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "base/base.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_parse_numbers(void **state)
{
    int64_t i;
    uint64_t u;
    assert_int_equal(cr_parse_i64(" -42 ", 10, &i), 0);
    assert_int_equal(i, -42);
    assert_int_equal(cr_parse_i64("12x", 10, &i), CR_EPARSE);
    assert_int_equal(cr_parse_i64("", 10, &i), CR_EPARSE);
    assert_int_equal(cr_parse_u64("0x10de", 16, &u), 0);
    assert_int_equal(u, 0x10de);
    assert_int_equal(cr_parse_u64("-1", 10, &u), CR_EPARSE);
    assert_int_equal(cr_parse_u64("99999999999999999999999", 10, &u), CR_ERANGE);
}

static void test_hex(void **state)
{
    const uint8_t b[] = {0x00, 0x7f, 0x80, 0xff, 0x1a};
    char h[2 * sizeof(b) + 1];
    cr_hex_encode(b, sizeof(b), h);
    assert_string_equal(h, "007f80ff1a");
    uint8_t back[sizeof(b)];
    assert_true(cr_hex_decode(h, strlen(h), back));
    assert_memory_equal(back, b, sizeof(b));
    assert_true(cr_hex_decode("AbCd", 4, back));
    assert_int_equal(back[0], 0xab);
    assert_int_equal(back[1], 0xcd);
    assert_false(cr_hex_decode("abc", 3, back)); /* odd */
    assert_false(cr_hex_decode("0g", 2, back));  /* no hex digit */
    assert_false(cr_hex_decode(" 1", 2, back));
    assert_true(cr_hex_decode("", 0, back));
}

/* The masks of a /proc/PID/status (agent/launch.c sets back only the
 * signals SigIgn and SigCgt list): 16 digits after "\nNAME:\t", the
 * first such line, nothing on a short or missing one. */
static void test_proc_status_mask(void **state)
{
    (void)state;
    const char *t = "Name:\tcorrald\nSigQ:\t0/1\nSigIgn:\t0000000000001000\n"
                    "SigCgt:\t00000000000044c2\nSigCgtX:\t1\n";
    uint64_t v = 7;
    assert_true(cr_proc_status_mask(t, "SigIgn", &v));
    assert_true(v == 1u << 12); /* SIGPIPE, 13 */
    assert_true(cr_proc_status_mask(t, "SigCgt", &v));
    assert_true(v == 0x44c2);
    assert_false(cr_proc_status_mask(t, "SigBlk", &v));
    assert_false(cr_proc_status_mask(t, "Name", &v)); /* not 16 digits */
    assert_false(
        cr_proc_status_mask("SigIgn:\t0000000000001000\n", "SigIgn", &v)); /* no line before */
    assert_false(cr_proc_status_mask("x\nSigIgn:\t00000000000010", "SigIgn", &v));
    assert_false(cr_proc_status_mask("x\nSigIgn", "SigIgn", &v));
    assert_false(cr_proc_status_mask("", "SigIgn", &v));
    /* this process's own: readable, and SIGKILL is never caught */
    char buf[4096];
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_true(cr_proc_status_mask(buf, "SigCgt", &v));
    assert_false(v & (1u << (9 - 1)));
}

static void test_cpulist(void **state)
{
    uint64_t bits[4];
    size_t pos = 99;
    assert_int_equal(cr_cpulist_parse("0-3,8,10-11", bits, 256, &pos), 7);
    assert_true(bits[0] & (1ull << 8));
    assert_false(bits[0] & (1ull << 9));
    cr_buf_t b = {0};
    cr_cpulist_format(bits, 256, &b);
    assert_string_equal(b.s, "0-3,8,10-11");
    cr_buf_free(&b);
    assert_int_equal(cr_cpulist_parse("0-3,x", bits, 256, &pos), CR_EPARSE);
    assert_int_equal(pos, 4);
    assert_int_equal(cr_cpulist_parse("5-2", bits, 256, &pos), CR_EPARSE);
    assert_int_equal(cr_cpulist_parse("300", bits, 256, &pos), CR_ERANGE);
    assert_int_equal(cr_cpulist_parse("", bits, 256, &pos), 0);
    assert_int_equal(cr_cpulist_parse("1,1,1", bits, 256, &pos), 1);
}

static void test_files_under_root(void **state)
{
    char dir[] = "/tmp/corral-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof(path), "%s/sys", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/sys/value", dir);
    FILE *fp = fopen(path, "w");
    fputs("  0x1ae0\n", fp);
    fclose(fp);
    char buf[64];
    assert_int_equal(cr_read_file(dir, "/sys/value", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "0x1ae0");
    uint64_t v;
    assert_int_equal(cr_read_u64(dir, "/sys/value", 16, &v), 0);
    assert_int_equal(v, 0x1ae0);
    assert_int_equal(cr_read_file(dir, "/sys/missing", buf, sizeof(buf)), -ENOENT);
    assert_int_equal(cr_read_file(dir, "/sys/value", buf, 4), CR_E2BIG);
    assert_true(cr_path_is_dir(dir, "/sys"));
    assert_false(cr_path_is_dir(dir, "/sys/value"));
    char **names;
    size_t n;
    assert_int_equal(cr_list_dir(dir, "/sys", &names, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(names[0], "value");
    cr_free_strv(names, n);
    unlink(path);
    snprintf(path, sizeof(path), "%s/sys", dir);
    rmdir(path);
    rmdir(dir);
}

static size_t count_lines(const char *path, const char *with)
{
    char *text = NULL;
    size_t n = 0;
    if (cr_read_file_alloc("/", path, &text, NULL) < 0)
        return 0;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"))
        n += !with || strstr(l, with) != NULL;
    free(text);
    return n;
}

/* base/log.c: a flood from one call site is a burst and one count line
 * per interval; another site is not held back by it; the file rotates at
 * its size, keeping keep older files. */
static void test_log_limits(void **state)
{
    char dir[] = "/tmp/corral-test-log-XXXXXX", path[256], old[300];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/corrald.log", dir);
    int level = cr_log_get_level();
    cr_log_set_level(CR_LOG_WARN);
    cr_log_set_limits(&(cr_log_limits_t){.burst = 3, .interval_ms = 100});
    assert_int_equal(cr_log_set_file(path), 0);
    for (int i = 0; i < 500; i++)
        cr_warn("refused 127.0.0.1:%d (client): bad proof", 40000 + i);
    cr_warn("another site");
    assert_int_equal(count_lines(path, "bad proof"), 3);
    assert_int_equal(count_lines(path, "another site"), 1);
    usleep(150 * 1000);
    cr_warn("refused 127.0.0.1:1 (client): bad proof");
    assert_int_equal(count_lines(path, "repeated 497 more time(s) in 100 ms"), 1);
    assert_int_equal(count_lines(path, "bad proof"), 5); /* the count line names it too */

    cr_log_set_limits(&(cr_log_limits_t){.max_bytes = 1000, .keep = 2});
    assert_int_equal(cr_log_set_file(path), 0);
    for (int i = 0; i < 200; i++)
        cr_warn("line %03d of a log that must rotate", i);
    cr_log_set_file(NULL);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size < 1100);
    snprintf(old, sizeof(old), "%s.2", path);
    assert_int_equal(stat(old, &st), 0);
    assert_true(st.st_size >= 1000 && st.st_size < 1100);
    snprintf(old, sizeof(old), "%s.3", path);
    assert_int_equal(stat(old, &st), -1);
    assert_int_equal(count_lines(path, "line 199"), 1);
    for (int i = 0; i <= 2; i++) {
        if (i)
            snprintf(old, sizeof(old), "%s.%d", path, i);
        unlink(i ? old : path);
    }
    rmdir(dir);
    cr_log_set_level(level);
    cr_log_set_limits(
        &(cr_log_limits_t){.burst = 20, .interval_ms = 10000, .max_bytes = 16u << 20, .keep = 3});
}

static void test_errors(void **state)
{
    assert_string_equal(cr_strerror(CR_ENOENT), "no such file or directory");
    assert_string_equal(cr_strerror(CR_EABI), "component ABI version mismatch");
    assert_string_equal(cr_err_name(CR_EPARSE), "CR_EPARSE");
    assert_string_equal(cr_strerror(0), "success");
}

static void test_buf_and_vec(void **state)
{
    cr_buf_t b = {0};
    for (int i = 0; i < 1000; i++)
        cr_buf_printf(&b, "%d,", i);
    assert_true(b.len > 3000);
    assert_int_equal(strncmp(b.s, "0,1,2,", 6), 0);
    cr_buf_free(&b);
    CR_VEC(int) v = {0};
    for (int i = 0; i < 100; i++)
        *CR_VEC_PUSH(&v) = i;
    assert_int_equal(v.n, 100);
    assert_int_equal(v.v[99], 99);
    CR_VEC_FREE(&v);
}

/* Worker output bounded by holes (base/output.c), on a real file in /tmp:
 * skipped where that filesystem cannot punch holes. */
/* The probe runs on a worker's file after the worker started (agent/
 * workers.c bound_open): a writer appending meanwhile must lose nothing.
 * It once punched one block past the size it had just read, which a fast
 * writer had filled by then: 4 KiB of the output read as zeros (CI, and
 * the sendfile version of raw log chunks, both under load). Here a child
 * appends 64 MiB in 4 KiB writes while the probe runs over and over. */
static void test_output_probe_writer(void **state)
{
    char path[] = "/tmp/corral-test-probe-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    if (cr_output_probe(fd) < 0) {
        unlink(path);
        close(fd);
        skip();
    }
    int wfd = open(path, O_WRONLY | O_APPEND);
    assert_true(wfd >= 0);
    unlink(path);
    const size_t piece = 4096, total = 64u << 20;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char b[4096];
        memset(b, 'x', sizeof(b));
        for (size_t off = 0; off < total; off += piece)
            if (write(wfd, b, piece) != (ssize_t)piece)
                _exit(1);
        _exit(0);
    }
    close(wfd);
    struct stat sb;
    do { /* while it writes */
        assert_int_equal(cr_output_probe(fd), 0);
        assert_int_equal(fstat(fd, &sb), 0);
    } while ((uint64_t)sb.st_size < total);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *all = malloc(total);
    assert_int_equal(pread(fd, all, total, 0), (ssize_t)total);
    size_t zeros = 0;
    for (size_t i = 0; i < total; i++)
        zeros += all[i] != 'x';
    assert_int_equal(zeros, 0);
    free(all);
    close(fd);
}

static void test_output_bound(void **state)
{
    char path[] = "/tmp/corral-test-output-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    if (cr_output_probe(fd) < 0) {
        close(fd);
        skip();
    }
    const uint64_t keep = 1u << 20, total = 5u << 20;
    char *block = malloc(65536);
    for (uint64_t off = 0; off < total; off += 65536) {
        memset(block, 'a' + (int)(off >> 20), 65536); /* each MiB its own letter */
        assert_int_equal(write(fd, block, 65536), 65536);
    }
    uint64_t dropped = 0, start, end;
    assert_int_equal(cr_output_bound(fd, 0, &dropped), 0); /* 0: unbounded */
    assert_int_equal(cr_output_bound(fd, keep, &dropped), 1);
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    assert_int_equal((uint64_t)sb.st_size, total); /* the size, so every offset, stays */
    assert_true((uint64_t)sb.st_blocks * 512 <= keep + keep / 8);
    assert_true(dropped >= total - keep - 65536 && dropped <= total - keep);
    /* the first data is where the hole ends, and reads as what was written */
    uint64_t old = cr_output_old(total, keep);
    assert_int_equal(old, total - keep);
    assert_true(cr_output_next(fd, 0, total, old, &start, &end));
    assert_int_equal(start, dropped);
    assert_int_equal(end, total);
    char c;
    assert_int_equal(pread(fd, &c, 1, (off_t)start), 1);
    assert_int_equal(c, 'a' + (int)(start >> 20));
    assert_int_equal(cr_output_dropped(fd, total, old), dropped);
    assert_int_equal(cr_output_dropped(fd, dropped / 2, old), dropped / 2);
    /* holes are believed only before old: none where the bound keeps */
    assert_true(cr_output_next(fd, 0, total, 0, &start, &end));
    assert_int_equal(start, 0);
    assert_int_equal(cr_output_dropped(fd, total, 0), 0);
    assert_false(cr_output_punched(fd, dropped, keep));
    assert_true(cr_output_punched(fd, 0, keep));
    /* a reader inside the kept part stays where it is */
    assert_true(cr_output_next(fd, total - 10, total, old, &start, &end));
    assert_int_equal(start, total - 10);
    assert_false(cr_output_next(fd, total, total, old, &start, &end));
    /* once bounded, nothing more to do until it grows again */
    assert_int_equal(cr_output_bound(fd, keep, &dropped), 0);
    free(block);
    close(fd);
}

/* A bound punches whole 2 MiB ranges (base/output.c PUNCH_ALIGN): a punch
 * that ended inside a large page-cache folio a socket still held (raw log
 * chunks by sendfile) would zero its part in place, under the peer. */
static void test_output_bound_aligned(void **state)
{
    char path[] = "/tmp/corral-test-output-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    if (cr_output_probe(fd) < 0) {
        close(fd);
        skip();
    }
    const uint64_t mib = 1u << 20, keep = 3 * mib + 4096, total = 7 * mib;
    char *block = malloc(65536);
    memset(block, 'z', 65536);
    for (uint64_t off = 0; off < total; off += 65536)
        assert_int_equal(write(fd, block, 65536), 65536);
    uint64_t dropped = 0, start, end;
    assert_int_equal(cr_output_bound(fd, keep, &dropped), 1);
    /* the old part is 3 MiB + 1020 KiB: the punch stops at 2 MiB, the
     * last whole range in it, not at the block before the kept part */
    assert_int_equal(dropped, 2 * mib);
    assert_true(cr_output_next(fd, 0, total, cr_output_old(total, keep), &start, &end));
    assert_int_equal(start, 2 * mib);
    /* more than keep stays, less than keep and one range more */
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    assert_true((uint64_t)sb.st_blocks * 512 >= keep &&
                (uint64_t)sb.st_blocks * 512 <= keep + 2 * mib);
    free(block);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_numbers),
        cmocka_unit_test(test_hex),
        cmocka_unit_test(test_cpulist),
        cmocka_unit_test(test_proc_status_mask),
        cmocka_unit_test(test_files_under_root),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_buf_and_vec),
        cmocka_unit_test(test_log_limits),
        cmocka_unit_test(test_output_bound),
        cmocka_unit_test(test_output_bound_aligned),
        cmocka_unit_test(test_output_probe_writer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
