/* The floor under PCI discovery through Linux sysfs: hwloc's Linux backend
 * reads the first 256 bytes of every PCI function's config space
 * (/sys/bus/pci/devices/ * /config), whatever its type filters; a reader
 * without CAP_SYS_ADMIN gets the 64-byte header only (what corral asks
 * for). Prints the median over REPS of reading BYTES of each once, in
 * microseconds, and the number of functions:
 *     pci_config [REPS [BYTES]]  ->  "<us> <functions>" */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    int bytes = argc > 2 ? atoi(argv[2]) : 256;
    if (reps < 1 || reps > 1000)
        reps = 10;
    if (bytes < 1 || bytes > 256)
        bytes = 256;
    double *t = calloc((size_t)reps, sizeof(double));
    int functions = 0;
    for (int r = 0; r < reps; r++) {
        DIR *d = opendir("/sys/bus/pci/devices");
        if (!d) {
            printf("0 0\n");
            free(t);
            return 0;
        }
        struct dirent *e;
        double t0 = now_us();
        functions = 0;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char path[512], buf[256];
            snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/config", e->d_name);
            int fd = open(path, O_RDONLY);
            if (fd < 0)
                continue;
            if (read(fd, buf, (size_t)bytes) > 0)
                functions++;
            close(fd);
        }
        t[r] = now_us() - t0;
        closedir(d);
    }
    qsort(t, (size_t)reps, sizeof(double), cmp);
    double med = reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2;
    printf("%.0f %d\n", med, functions);
    free(t);
    return 0;
}
