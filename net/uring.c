/* Many receives in one system call through io_uring (net/uring.h). */
#include "net/uring.h"
#include "base/base.h"
#include <errno.h>
#include <linux/io_uring.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

struct cr_uring {
    int fd;
    unsigned entries;
    /* the submission ring: head and tail shared with the kernel */
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    struct io_uring_sqe *sqes;
    /* the completion ring */
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_cqe *cqes;
    void *sq_map, *cq_map;
    size_t sq_len, cq_len, sqes_len;
};

static int uring_setup(unsigned entries, struct io_uring_params *p)
{
    return (int)syscall(__NR_io_uring_setup, entries, p);
}

static int uring_enter(int fd, unsigned submit, unsigned min_complete, unsigned flags)
{
    return (int)syscall(__NR_io_uring_enter, fd, submit, min_complete, flags, NULL, 0);
}

void cr_uring_free(cr_uring_t *u)
{
    if (!u)
        return;
    if (u->sqes && u->sqes != MAP_FAILED)
        munmap(u->sqes, u->sqes_len);
    if (u->cq_map && u->cq_map != MAP_FAILED && u->cq_map != u->sq_map)
        munmap(u->cq_map, u->cq_len);
    if (u->sq_map && u->sq_map != MAP_FAILED)
        munmap(u->sq_map, u->sq_len);
    if (u->fd >= 0)
        close(u->fd);
    free(u);
}

cr_uring_t *cr_uring_new(unsigned entries)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    /* one submitter, no task work to signal: every receive ends inline */
    p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
    int fd = uring_setup(entries, &p);
    if (fd < 0 && errno == EINVAL) { /* an older kernel without those flags */
        memset(&p, 0, sizeof(p));
        fd = uring_setup(entries, &p);
    }
    if (fd < 0)
        return NULL;
    cr_uring_t *u = cr_calloc(1, sizeof(*u));
    u->fd = fd;
    u->entries = p.sq_entries;
    u->sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    u->cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP)
        u->sq_len = u->cq_len = u->sq_len > u->cq_len ? u->sq_len : u->cq_len;
    u->sq_map = mmap(NULL, u->sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                     IORING_OFF_SQ_RING);
    if (u->sq_map == MAP_FAILED)
        goto fail;
    if (p.features & IORING_FEAT_SINGLE_MMAP)
        u->cq_map = u->sq_map;
    else
        u->cq_map = mmap(NULL, u->cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                         IORING_OFF_CQ_RING);
    if (u->cq_map == MAP_FAILED)
        goto fail;
    u->sqes_len = p.sq_entries * sizeof(struct io_uring_sqe);
    u->sqes = mmap(NULL, u->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                   IORING_OFF_SQES);
    if (u->sqes == MAP_FAILED)
        goto fail;
    uint8_t *sq = u->sq_map, *cq = u->cq_map;
    u->sq_head = (unsigned *)(sq + p.sq_off.head);
    u->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    u->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    u->sq_array = (unsigned *)(sq + p.sq_off.array);
    u->cq_head = (unsigned *)(cq + p.cq_off.head);
    u->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    u->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    u->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    return u;
fail : {
    int e = errno;
    cr_uring_free(u);
    errno = e;
    return NULL;
}
}

/* Takes every completion there is into res (by user_data); how many. */
static unsigned reap(cr_uring_t *u, int *res, unsigned n)
{
    unsigned head = *u->cq_head, got = 0;
    unsigned tail = __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE);
    for (; head != tail; head++) {
        const struct io_uring_cqe *cqe = &u->cqes[head & *u->cq_mask];
        if (cqe->user_data < n)
            res[cqe->user_data] = cqe->res;
        got++;
    }
    __atomic_store_n(u->cq_head, head, __ATOMIC_RELEASE);
    return got;
}

int cr_uring_recv_all(cr_uring_t *u, unsigned n, const int *fds, uint8_t *base, size_t slice,
                      int *res)
{
    if (n > u->entries)
        return -EINVAL;
    unsigned tail = *u->sq_tail, mask = *u->sq_mask;
    for (unsigned i = 0; i < n; i++) {
        unsigned idx = (tail + i) & mask;
        struct io_uring_sqe *sqe = &u->sqes[idx];
        memset(sqe, 0, sizeof(*sqe));
        sqe->opcode = IORING_OP_RECV;
        sqe->fd = fds[i];
        sqe->addr = (uint64_t)(uintptr_t)(base + i * slice);
        sqe->len = (uint32_t)slice;
        /* never armed to wait: the kernel answers -EAGAIN at once */
        sqe->msg_flags = MSG_DONTWAIT;
        sqe->user_data = i;
        u->sq_array[idx] = idx;
        res[i] = -EAGAIN;
    }
    __atomic_store_n(u->sq_tail, tail + n, __ATOMIC_RELEASE);
    unsigned submitted = 0, done = 0;
    while (submitted < n) {
        int r = uring_enter(u->fd, n - submitted, 0, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EBUSY)) {
            done += reap(u, res, n);
            continue;
        }
        if (r < 0)
            return -errno;
        submitted += (unsigned)r;
    }
    done += reap(u, res, n);
    while (done < n) { /* not expected (each ends inline), but never leave one in flight */
        int r = uring_enter(u->fd, 0, n - done, IORING_ENTER_GETEVENTS);
        if (r < 0 && errno != EINTR)
            return -errno;
        done += reap(u, res, n);
    }
    return 0;
}
