/* bench/launch worker: says it is running by writing one byte to the FIFO
 * named by argv[1], then exits. What it costs (exec, the dynamic loader,
 * libc start-up) is the same under posix_spawn and under corral. */
#include <fcntl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int fd = open(argv[1], O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    char c = 'r';
    int rc = write(fd, &c, 1) == 1 ? 0 : 1;
    close(fd);
    return rc;
}
