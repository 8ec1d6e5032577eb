/* File reads under a root prefix, so that discovery runs unchanged against
 * the real / or a recorded fixture tree (CORRAL_SYSFS_ROOT). */
#include "base.h"
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int cr_path_join(char *out, size_t size, const char *root, const char *path)
{
    if (!root || !*root || strcmp(root, "/") == 0)
        root = "";
    size_t rl = strlen(root);
    while (rl && root[rl - 1] == '/')
        rl--;
    int n = snprintf(out, size, "%.*s%s%s", (int)rl, root, path[0] == '/' ? "" : "/", path);
    if (n < 0 || (size_t)n >= size)
        return CR_E2BIG;
    return 0;
}

int cr_read_file(const char *root, const char *path, char *buf, size_t size)
{
    char full[4096];
    int err = cr_path_join(full, sizeof(full), root, path);
    if (err)
        return err;
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t off = 0;
    for (;;) {
        if (off + 1 >= size) {
            /* one more byte tells whether the file was larger */
            char c;
            ssize_t r = read(fd, &c, 1);
            close(fd);
            if (r > 0)
                return CR_E2BIG;
            break;
        }
        ssize_t r = read(fd, buf + off, size - 1 - off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            err = -errno;
            close(fd);
            return err;
        }
        if (r == 0) {
            close(fd);
            break;
        }
        off += (size_t)r;
    }
    buf[off] = '\0';
    if (memchr(buf, '\0', off))
        return CR_EPARSE;
    cr_strtrim(buf);
    return 0;
}

int cr_read_fd_alloc(int fd, char **out, size_t *len)
{
    cr_buf_t b = {0};
    cr_buf_append(&b, "", 0);
    char tmp[8192];
    for (;;) {
        ssize_t r = read(fd, tmp, sizeof(tmp));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int err = -errno;
            cr_buf_free(&b);
            return err;
        }
        if (r == 0)
            break;
        cr_buf_append(&b, tmp, (size_t)r);
    }
    *out = b.s;
    if (len)
        *len = b.len;
    return 0;
}

int cr_read_file_alloc(const char *root, const char *path, char **out, size_t *len)
{
    char full[4096];
    int err = cr_path_join(full, sizeof(full), root, path);
    if (err)
        return err;
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    err = cr_read_fd_alloc(fd, out, len);
    close(fd);
    return err;
}

int cr_read_u64(const char *root, const char *path, int base, uint64_t *out)
{
    char buf[64];
    int err = cr_read_file(root, path, buf, sizeof(buf));
    return err ? err : cr_parse_u64(buf, base, out);
}

int cr_read_i64(const char *root, const char *path, int base, int64_t *out)
{
    char buf[64];
    int err = cr_read_file(root, path, buf, sizeof(buf));
    return err ? err : cr_parse_i64(buf, base, out);
}

bool cr_path_exists(const char *root, const char *path)
{
    char full[4096];
    struct stat st;
    return cr_path_join(full, sizeof(full), root, path) == 0 && lstat(full, &st) == 0;
}

bool cr_path_is_dir(const char *root, const char *path)
{
    char full[4096];
    struct stat st;
    return cr_path_join(full, sizeof(full), root, path) == 0 && stat(full, &st) == 0 &&
           S_ISDIR(st.st_mode);
}

int cr_readlink_base(const char *root, const char *path, char *buf, size_t size)
{
    char full[4096], target[4096];
    int err = cr_path_join(full, sizeof(full), root, path);
    if (err)
        return err;
    ssize_t n = readlink(full, target, sizeof(target) - 1);
    if (n < 0)
        return -errno;
    target[n] = '\0';
    while (n > 1 && target[n - 1] == '/')
        target[--n] = '\0';
    const char *slash = strrchr(target, '/');
    cr_strlcpy(buf, slash ? slash + 1 : target, size);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int cr_list_dir(const char *root, const char *path, char ***names, size_t *n)
{
    char full[4096];
    int err = cr_path_join(full, sizeof(full), root, path);
    if (err)
        return err;
    DIR *d = opendir(full);
    if (!d)
        return -errno;
    CR_VEC(char *) v = {0};
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        *CR_VEC_PUSH(&v) = cr_strdup(de->d_name);
    }
    closedir(d);
    if (v.n)
        qsort(v.v, v.n, sizeof(char *), cmp_str);
    *names = v.v;
    *n = v.n;
    return 0;
}

void cr_free_strv(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}
