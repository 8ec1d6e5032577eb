/* bench/runtime worker: writes the time it reached main() (CLOCK_REALTIME,
 * "SECONDS NANOSECONDS") to DIR/<pid>, so the driver can take the latest
 * start of a gang. Realtime, not monotonic: the other end of the interval
 * is bash's $EPOCHREALTIME.
 *
 *   bench_runtime_stamp DIR */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    if (argc != 2) {
        fprintf(stderr, "usage: bench_runtime_stamp DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/%ld", argv[1], (long)getpid());
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fprintf(f, "%lld %09ld\n", (long long)t.tv_sec, t.tv_nsec);
    return fclose(f) == 0 ? 0 : 1;
}
