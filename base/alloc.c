/* Allocation with one out-of-memory policy: log and abort. A control plane
 * that cannot allocate a few bytes cannot keep its state consistent. */
#include "base.h"
#include <stdio.h>

static void oom(size_t n)
{
    fprintf(stderr, "corral: out of memory allocating %zu bytes\n", n);
    abort();
}

void *cr_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *cr_calloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    if (!p)
        oom(nmemb * size);
    return p;
}

void *cr_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *cr_strdup(const char *s)
{
    return cr_strndup(s, strlen(s));
}

char *cr_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = cr_malloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *cr_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    char *p = cr_malloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void cr__vec_grow(void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return;
    size_t ncap = *cap ? *cap * 2 : 8;
    while (ncap < need)
        ncap *= 2;
    *v = cr_realloc(*v, ncap * elem);
    *cap = ncap;
}

void cr_buf_append(cr_buf_t *b, const char *s, size_t n)
{
    cr__vec_grow((void **)&b->s, &b->cap, b->len + n + 1, 1);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void cr_buf_printf(cr_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0) {
        cr_buf_append(b, "", 0);
        return;
    }
    cr__vec_grow((void **)&b->s, &b->cap, b->len + (size_t)n + 1, 1);
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void cr_buf_free(cr_buf_t *b)
{
    CR_FREE(b->s);
    b->len = b->cap = 0;
}
