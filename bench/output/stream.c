/* bench/output helpers (bench/output/run.sh), one binary, three modes:
 *   bench_output gen MIB [FILE] writes MIB MiB of a repeating byte pattern to
 *                               stdout in 64 KiB writes (the worker, and the
 *                               writer of the plain pipe it is compared to);
 *                               with FILE, the seconds that took go there
 *   bench_output sink           reads stdin to its end; prints the bytes
 *                               read and the seconds from its first byte
 *   bench_output tcp MIB        the TCP loopback peer: a child connects to
 *                               a listener on 127.0.0.1 and sends MIB MiB
 *                               in 64 KiB writes, the parent reads them;
 *                               prints "SECONDS" from accept to the last
 *                               byte received
 * Every failure is one line on stderr naming the call, exit 1. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (64 * 1024)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int die(const char *what)
{
    fprintf(stderr, "bench_output: %s: %s\n", what, strerror(errno));
    return 1;
}

static void fill(char *buf)
{
    for (int i = 0; i < BLOCK; i++)
        buf[i] = (char)('a' + i % 26);
}

/* Writes mib MiB to fd; 0 or -1 with errno. */
static int send_all(int fd, long mib)
{
    static char buf[BLOCK];
    fill(buf);
    for (long left = mib * 1024 * 1024; left > 0;) {
        size_t want = left < BLOCK ? (size_t)left : BLOCK;
        ssize_t put = write(fd, buf, want);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return -1;
        left -= put;
    }
    return 0;
}

/* Reads fd to its end; the byte count or -1. *first: when the first came. */
static long long read_all(int fd, double *first)
{
    static char buf[4 * BLOCK];
    long long total = 0;
    for (;;) {
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -1;
        if (got == 0)
            return total;
        if (total == 0 && first)
            *first = now();
        total += got;
    }
}

static int tcp(long mib)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) < 0)
        return die("listen on 127.0.0.1");
    pid_t pid = fork();
    if (pid < 0)
        return die("fork");
    if (pid == 0) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
            _exit(die("connect"));
        _exit(send_all(s, mib) < 0 ? die("send") : 0);
    }
    int s = accept(l, NULL, NULL);
    if (s < 0)
        return die("accept");
    double t0 = now();
    long long got = read_all(s, NULL);
    double t1 = now();
    int st = 0;
    waitpid(pid, &st, 0);
    if (got != mib * 1024 * 1024 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bench_output: tcp: received %lld of %ld bytes\n", got, mib * 1024 * 1024);
        return 1;
    }
    printf("%.6f\n", t1 - t0);
    return 0;
}

int main(int argc, char **argv)
{
    const char *usage = "usage: bench_output gen MIB [FILE] | sink | tcp MIB\n";
    if (argc == 2 && strcmp(argv[1], "sink") == 0) {
        double first = 0;
        long long got = read_all(0, &first);
        if (got < 0)
            return die("read stdin");
        printf("%lld %.6f\n", got, got ? now() - first : 0.0);
        return 0;
    }
    if (argc != 3 && !(argc == 4 && strcmp(argv[1], "gen") == 0)) {
        fputs(usage, stderr);
        return 2;
    }
    char *end;
    long mib = strtol(argv[2], &end, 10);
    if (!argv[2][0] || *end || mib < 1 || mib > 1 << 20) {
        fprintf(stderr, "bench_output: MIB: expected a count of MiB from 1 to 1048576, got '%s'\n",
                argv[2]);
        return 2;
    }
    if (strcmp(argv[1], "gen") == 0) {
        double t0 = now();
        if (send_all(1, mib) < 0)
            return die("write stdout");
        FILE *fp = argc == 4 ? fopen(argv[3], "w") : NULL;
        if (argc == 4 && (!fp || fprintf(fp, "%.6f\n", now() - t0) < 0 || fclose(fp) != 0))
            return die(argv[3]);
        return 0;
    }
    if (strcmp(argv[1], "tcp") == 0)
        return tcp(mib);
    fputs(usage, stderr);
    return 2;
}
