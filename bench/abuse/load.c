/* The load generator of bench/abuse/run.sh: unauthenticated clients of a
 * head on loopback, bounded in count and in time. One thread, epoll, so
 * that the generator costs the shared CPUs little (the Python one it
 * replaces took most of them, and the client's latency measured that).
 *
 *   bench_abuse_load frames HOST PORT CLIENTS SIZE SECONDS MAX_ROUNDS
 *       CLIENTS connections, each sending a frame header announcing SIZE
 *       bytes and then SIZE bytes of payload (no Hello, no proof); when the
 *       head closes one (or all is sent) it connects again, for SECONDS or
 *       MAX_ROUNDS rounds each, whichever ends first.
 *   bench_abuse_load idle HOST PORT COUNT SECONDS
 *       opens COUNT connections that send nothing, 128 at a time, holds
 *       them until SECONDS after the start, then says how many the head had
 *       closed by then.
 *
 * Only a loopback HOST (127.0.0.0/8) is accepted; connections come from 40
 * loopback sources (127.0.1.x for idle, 127.0.2.x for frames): each has its
 * own ephemeral ports and is a peer of its own to the head's per-peer cap.
 * Bounds: 1000 clients, 1000 rounds, 50,000 connections, 120 s. The
 * open-file limit is raised to what COUNT needs (the hard limit too where
 * the process may); where it cannot be, the connections are held by as
 * many processes as it takes, their counts summed. One summary line of
 * "key=value" words on stdout; "ready" on stderr once the load is under way. */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SOURCES 40
#define BATCH 128 /* about a listen backlog's worth: more only waits for SYN retries */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static struct sockaddr_in dst;

/* A non-blocking socket from source 127.0.NET.(i % SOURCES + 1), connecting. */
static int open_from(int net, long i)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl((127u << 24) | ((unsigned)net << 8) | (unsigned)(i % SOURCES + 1));
    if (bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0 ||
        (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0 && errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- frames ---- */

typedef struct client {
    int fd;
    long id;
    int rounds;
    uint64_t sent; /* of SIZE + 4 (the header) */
} client_t;

static int frames(int nclients, uint64_t size, double seconds, int max_rounds)
{
    static char chunk[64 << 10];
    uint8_t hdr[4] = {(uint8_t)(size >> 24), (uint8_t)(size >> 16), (uint8_t)(size >> 8),
                      (uint8_t)size};
    long connections = 0, closed_early = 0, refused = 0;
    uint64_t bytes = 0;
    double deadline = now_s() + seconds;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    client_t *c = calloc((size_t)nclients, sizeof(*c));
    if (ep < 0 || !c)
        return 1;
    int active = 0;
    for (int i = 0; i < nclients; i++) {
        c[i].id = i;
        c[i].fd = -1;
    }
    /* (re)connects client k unless its rounds or the time are up */
    for (int i = 0; i < nclients; i++) {
        c[i].fd = open_from(2, i);
        if (c[i].fd < 0) {
            refused++;
            continue;
        }
        struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev);
        active++;
    }
    fprintf(stderr, "ready\n");
    struct epoll_event evs[256];
    while (active > 0 && now_s() < deadline) {
        int n = epoll_wait(ep, evs, 256, 100);
        for (int e = 0; e < n; e++) {
            client_t *k = &c[evs[e].data.u32];
            bool done = false;
            if (evs[e].events & (EPOLLERR | EPOLLHUP)) {
                done = true;
            } else {
                while (k->sent < size + 4) {
                    ssize_t w;
                    if (k->sent < 4)
                        w = send(k->fd, hdr + k->sent, 4 - k->sent, MSG_NOSIGNAL);
                    else {
                        uint64_t left = size + 4 - k->sent;
                        w = send(k->fd, chunk, left < sizeof(chunk) ? left : sizeof(chunk),
                                 MSG_NOSIGNAL);
                    }
                    if (w < 0) {
                        done = errno != EAGAIN && errno != EINTR;
                        break;
                    }
                    k->sent += (uint64_t)w;
                }
                done |= k->sent >= size + 4;
            }
            if (!done)
                continue;
            /* this round is over: count it, then connect again */
            close(k->fd);
            k->fd = -1;
            active--;
            connections++;
            bytes += k->sent > 4 ? k->sent - 4 : 0;
            closed_early += k->sent < size + 4;
            k->sent = 0;
            if (++k->rounds >= max_rounds || now_s() >= deadline)
                continue;
            k->fd = open_from(2, k->id);
            if (k->fd < 0) {
                refused++;
                continue;
            }
            struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (uint32_t)k->id};
            epoll_ctl(ep, EPOLL_CTL_ADD, k->fd, &ev);
            active++;
        }
    }
    for (int i = 0; i < nclients; i++)
        if (c[i].fd >= 0) { /* cut by the deadline: a round that ended early */
            close(c[i].fd);
            connections++;
            bytes += c[i].sent > 4 ? c[i].sent - 4 : 0;
            closed_early++;
        }
    printf("connections=%ld bytes_sent=%llu closed_by_head_before_the_end=%ld refused=%ld\n",
           connections, (unsigned long long)bytes, closed_early, refused);
    free(c);
    close(ep);
    return 0;
}

/* ---- idle ---- */

static void idle(long count, double seconds, long first, bool say_ready, FILE *out)
{
    int *socks = calloc((size_t)count + 1, sizeof(int));
    long nsocks = 0, failed = 0;
    double start = now_s();
    struct pollfd pf[BATCH];
    for (long b = 0; b < count; b += BATCH) {
        int np = 0;
        for (long i = 0; i < BATCH && b + i < count; i++) {
            int fd = open_from(1, first + nsocks + failed + np);
            if (fd < 0) {
                failed++;
                continue;
            }
            pf[np++] = (struct pollfd){.fd = fd, .events = POLLOUT};
        }
        int left = np;
        double end = now_s() + 3;
        while (left > 0 && now_s() < end) {
            if (poll(pf, (nfds_t)np, 100) <= 0)
                continue;
            for (int i = 0; i < np; i++) {
                if (pf[i].fd < 0 || !pf[i].revents)
                    continue;
                int err = 0;
                socklen_t len = sizeof(err);
                getsockopt(pf[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err == 0)
                    socks[nsocks++] = pf[i].fd;
                else {
                    failed++;
                    close(pf[i].fd);
                }
                pf[i].fd = -1;
                left--;
            }
        }
        for (int i = 0; i < np; i++)
            if (pf[i].fd >= 0) {
                failed++;
                close(pf[i].fd);
            }
        if (b == 0 && say_ready)
            fprintf(stderr, "ready\n");
    }
    double opened = now_s() - start;
    double wait = seconds - opened;
    if (wait > 0)
        usleep((useconds_t)(wait * 1e6));
    long closed = 0;
    for (long i = 0; i < nsocks; i++) {
        char b;
        ssize_t r = recv(socks[i], &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            closed++;
        close(socks[i]);
    }
    fprintf(out, "opened=%ld failed=%ld open_seconds=%.2f closed_by_head=%ld still_open=%ld\n",
            nsocks, failed, opened, closed, nsocks - closed);
    fflush(out);
    free(socks);
}

/* idle() in as many processes as the open-file limit needs, summed */
static int idle_split(long count, double seconds)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rlim_t need = (rlim_t)count + 64;
    if (rl.rlim_cur < need) {
        struct rlimit want = {need, rl.rlim_max > need ? rl.rlim_max : need};
        if (setrlimit(RLIMIT_NOFILE, &want) < 0) {
            want = (struct rlimit){rl.rlim_max, rl.rlim_max};
            setrlimit(RLIMIT_NOFILE, &want);
        }
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    long room = (long)rl.rlim_cur - 64;
    if (room >= count) {
        idle(count, seconds, 0, true, stdout);
        return 0;
    }
    if (room < 1)
        return 1;
    long parts = (count + room - 1) / room;
    int fds[64];
    pid_t pids[64];
    if (parts > 64)
        parts = 64;
    for (long p = 0; p < parts; p++) {
        int pp[2];
        if (pipe(pp) < 0)
            return 1;
        long n = p == parts - 1 ? count - room * p : room;
        pid_t pid = fork();
        if (pid == 0) {
            close(pp[0]);
            FILE *o = fdopen(pp[1], "w");
            idle(n, seconds, room * p, p == 0, o);
            _exit(0);
        }
        close(pp[1]);
        fds[p] = pp[0];
        pids[p] = pid;
    }
    long opened = 0, failed = 0, closed = 0, still = 0;
    double secs = 0;
    for (long p = 0; p < parts; p++) {
        char line[256] = "";
        FILE *in = fdopen(fds[p], "r");
        if (in && fgets(line, sizeof(line), in)) {
            long o, f, c, s;
            double t;
            if (sscanf(line,
                       "opened=%ld failed=%ld open_seconds=%lf closed_by_head=%ld still_open=%ld",
                       &o, &f, &t, &c, &s) == 5) {
                opened += o, failed += f, closed += c, still += s;
                secs = t > secs ? t : secs;
            }
        }
        if (in)
            fclose(in);
        waitpid(pids[p], NULL, 0);
    }
    printf("processes=%ld opened=%ld failed=%ld open_seconds=%.2f closed_by_head=%ld "
           "still_open=%ld\n",
           parts, opened, failed, secs, closed, still);
    return 0;
}

static long arg_long(const char *s, long max)
{
    long v = strtol(s, NULL, 10);
    return v < 0 ? 0 : v > max ? max : v;
}

int main(int argc, char **argv)
{
    bool fr = argc == 8 && strcmp(argv[1], "frames") == 0;
    bool id = argc == 6 && strcmp(argv[1], "idle") == 0;
    if (!fr && !id) {
        fprintf(stderr,
                "usage: %s frames HOST PORT CLIENTS SIZE SECONDS MAX_ROUNDS\n"
                "       %s idle HOST PORT COUNT SECONDS\n",
                argv[0], argv[0]);
        return 2;
    }
    dst.sin_family = AF_INET;
    dst.sin_port = htons((uint16_t)arg_long(argv[3], 65535));
    if (inet_pton(AF_INET, argv[2], &dst.sin_addr) != 1 ||
        (ntohl(dst.sin_addr.s_addr) >> 24) != 127) {
        fprintf(stderr, "%s: %s is not a loopback address; this generator only loads loopback\n",
                argv[0], argv[2]);
        return 2;
    }
    if (fr) {
        double secs = strtod(argv[6], NULL);
        return frames((int)arg_long(argv[4], 1000), (uint64_t)arg_long(argv[5], 1l << 30),
                      secs > 120 ? 120 : secs, (int)arg_long(argv[7], 1000));
    }
    double secs = strtod(argv[5], NULL);
    return idle_split(arg_long(argv[4], 50000), secs > 120 ? 120 : secs);
}
