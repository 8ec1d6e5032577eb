/* Worker output files bounded on disk (base.h "worker output"): the
 * oldest part of a file that grew past its limit becomes a hole
 * (fallocate PUNCH_HOLE, KEEP_SIZE), so that the file keeps its logical
 * size and every offset a reader holds stays valid; readers skip holes
 * with SEEK_DATA. Why not rename and truncate, as Docker's json-file
 * driver does: workers write straight into their files (agent/launch.c)
 * and the forwarder, followers and JobLogs read them by offset. */
#include "base.h"
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* The granule a punch frees whole: a partial block would only be
 * zeroed, and a reader would see the zeros as output. */
static uint64_t granule(const struct stat *sb)
{
    uint64_t b = (uint64_t)sb->st_blksize;
    return b >= 512 && b <= (1u << 20) && !(b & (b - 1)) ? b : 4096;
}

/* Where a punch starts and ends: whole 2 MiB ranges, the largest folio the
 * page cache uses for a file here (PMD size on x86-64 and on arm64 with 4
 * KiB pages), which lie at multiples of their size. A punch that ends
 * inside a large folio zeroes its part in place when the folio cannot be
 * split, and it cannot while a socket still holds its pages (raw log
 * chunks by sendfile, net/conn.c cr_conn_set_sendfile): bytes sent, not
 * yet read by the peer, would turn to zeros. A whole folio is only taken
 * out of the file; whoever holds it keeps its bytes. */
#define PUNCH_ALIGN (2ull << 20)

int cr_output_bound(int fd, uint64_t keep, uint64_t *dropped)
{
    struct stat sb;
    if (dropped)
        *dropped = 0;
    if (!keep || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode))
        return 0;
    uint64_t size = (uint64_t)sb.st_size, slack = keep / 8;
    if (size <= keep + slack || (uint64_t)sb.st_blocks * 512 <= keep + slack)
        return 0; /* small, or its old part is a hole already */
    uint64_t g = granule(&sb);
    if (g < PUNCH_ALIGN)
        g = PUNCH_ALIGN;
    uint64_t end = (size - keep) / g * g, start = 0;
    off_t d = lseek(fd, 0, SEEK_DATA);
    if (d > 0)
        start = (uint64_t)d / g * g;
    if (start >= end)
        return 0;
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)start,
                  (off_t)(end - start)) < 0)
        return -errno;
    if (dropped)
        *dropped = end - start;
    return 1;
}

int cr_output_probe(int fd)
{
    struct stat sb;
    if (fstat(fd, &sb) < 0)
        return -errno;
    /* past the end with KEEP_SIZE: frees nothing, changes nothing, and
     * fails with EOPNOTSUPP where the filesystem cannot punch. Far past
     * it: the file's writer may be appending while this runs (the probe
     * comes after the worker started), and a range just past the size
     * read here could hold its output by the time the punch runs (it did:
     * 4 KiB of zeros in a worker's output, tests/unit/test_base.c). A
     * filesystem whose files cannot be that large (EFBIG) is asked
     * nearer. */
    static const unsigned shifts[] = {40, 34, 30};
    uint64_t g = granule(&sb), end = ((uint64_t)sb.st_size + g - 1) / g * g;
    int err = -EFBIG;
    for (size_t i = 0; i < sizeof(shifts) / sizeof(shifts[0]) && err == -EFBIG; i++) {
        uint64_t at = end + (1ull << shifts[i]);
        err = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)g) < 0
                  ? -errno
                  : 0;
    }
    return err;
}

uint64_t cr_output_old(uint64_t size, uint64_t keep)
{
    return keep && size > keep ? size - keep : 0;
}

/* Holes are believed only before old (the part of a file older than its
 * last keep bytes, the only part a bound ever punches): SEEK_DATA on a file
 * being appended to (ext4's delayed allocation) may call a hole what is
 * data, and near the end that would drop output the bound keeps. */
bool cr_output_next(int fd, uint64_t off, uint64_t size, uint64_t old, uint64_t *start,
                    uint64_t *end)
{
    if (off >= size)
        return false;
    if (old > size)
        old = size;
    if (off >= old) {
        *start = off;
        *end = size;
        return true;
    }
    /* a punch between the two lseeks moves the data on: look again */
    for (int tries = 0; tries < 4 && off < old; tries++) {
        uint64_t s = off, e = size;
        off_t d = lseek(fd, (off_t)off, SEEK_DATA);
        if (d >= 0)
            s = (uint64_t)d; /* else no SEEK_DATA here (or a hole to the end) */
        else if (errno == ENXIO)
            s = size;
        if (s > old) /* data is in the last keep bytes, whatever lseek says */
            s = old;
        if (s >= size)
            return false; /* holes to the end */
        off_t h = lseek(fd, (off_t)s, SEEK_HOLE);
        if (h >= 0 && (uint64_t)h < old)
            e = (uint64_t)h;
        if (e > s) {
            *start = s;
            *end = e;
            return true;
        }
        off = s;
    }
    *start = off > old ? off : old;
    *end = size;
    return *start < size;
}

bool cr_output_punched(int fd, uint64_t off, uint64_t keep)
{
    struct stat sb;
    uint64_t s, e;
    if (!keep || fstat(fd, &sb) < 0)
        return false;
    uint64_t size = (uint64_t)sb.st_size;
    return cr_output_next(fd, off, size, cr_output_old(size, keep), &s, &e) && s > off;
}

uint64_t cr_output_dropped(int fd, uint64_t size, uint64_t old)
{
    uint64_t off = 0, dropped = 0, s, e;
    while (off < size && cr_output_next(fd, off, size, old, &s, &e)) {
        dropped += s - off;
        off = e;
    }
    return off < size ? dropped + (size - off) : dropped; /* holes to the end */
}
