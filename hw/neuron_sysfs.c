/* Neuron sysfs and NEURON_RT_VISIBLE_CORES parsing (see neuron_sysfs.h). */
#include "neuron_sysfs.h"
#include <stdio.h>

/* A decimal at *p (no sign), at most max; moves *p past it. */
static int parse_uint(const char **p, int max, int *out)
{
    const char *s = *p;
    long v = 0;
    if (*s < '0' || *s > '9')
        return CR_EPARSE;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s - '0');
        if (v > max)
            return CR_ERANGE;
        s++;
    }
    *p = s;
    *out = (int)v;
    return 0;
}

static const char *skip_blanks(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

int neuron_parse_core_count(const char *s, int *out)
{
    if (!s)
        return CR_EPARSE;
    const char *p = skip_blanks(s);
    int v;
    int err = parse_uint(&p, NEURON_MAX_CORES_PER_DEVICE, &v);
    if (err)
        return err;
    if (*skip_blanks(p) != '\0')
        return CR_EPARSE;
    if (v < 1)
        return CR_ERANGE;
    *out = v;
    return 0;
}

int neuron_parse_connected(const char *s, int *out, size_t max)
{
    if (!s)
        return CR_EPARSE;
    size_t n = 0;
    const char *p = skip_blanks(s);
    while (*p) {
        int v;
        int err = parse_uint(&p, NEURON_MAX_DEVICES - 1, &v);
        if (err)
            return err;
        for (size_t i = 0; i < n; i++)
            if (out[i] == v)
                return CR_EPARSE; /* a device named twice */
        if (n == max)
            return CR_ERANGE;
        out[n++] = v;
        p = skip_blanks(p);
        if (*p == ',') {
            p = skip_blanks(p + 1);
            if (!*p)
                return CR_EPARSE; /* a trailing comma */
        } else if (*p && (p[-1] != ' ' && p[-1] != '\t')) {
            return CR_EPARSE;
        }
    }
    return (int)n;
}

int neuron_parse_core_range(const char *s, int *first, int *last)
{
    if (!s)
        return CR_EPARSE;
    const char *p = s;
    int a, b;
    if (parse_uint(&p, NEURON_MAX_DEVICES * NEURON_MAX_CORES_PER_DEVICE, &a) != 0)
        return CR_EPARSE;
    b = a;
    if (*p == '-') {
        p++;
        if (parse_uint(&p, NEURON_MAX_DEVICES * NEURON_MAX_CORES_PER_DEVICE, &b) != 0 || b < a)
            return CR_EPARSE;
    }
    if (*p)
        return CR_EPARSE;
    *first = a;
    *last = b;
    return 0;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void neuron_format_cores(const int *cores, size_t n, cr_buf_t *out)
{
    cr_buf_append(out, "", 0);
    if (n == 0)
        return;
    int *v = cr_malloc(n * sizeof(int));
    memcpy(v, cores, n * sizeof(int));
    qsort(v, n, sizeof(int), cmp_int);
    size_t m = 0; /* unique */
    for (size_t i = 0; i < n; i++)
        if (m == 0 || v[m - 1] != v[i])
            v[m++] = v[i];
    if (m > 1 && v[m - 1] - v[0] == (int)(m - 1)) {
        cr_buf_printf(out, "%d-%d", v[0], v[m - 1]);
    } else {
        for (size_t i = 0; i < m; i++)
            cr_buf_printf(out, "%s%d", i ? "," : "", v[i]);
    }
    free(v);
}
