/* String helpers: bounded copies, trimming, strict number parsing, cpulists. */
#include "base.h"
#include <ctype.h>
#include <errno.h>

size_t cr_strlcpy(char *dst, const char *src, size_t size)
{
    size_t len = strlen(src);
    if (size) {
        size_t n = len < size - 1 ? len : size - 1;
        memcpy(dst, src, n);
        dst[n] = '\0';
    }
    return len;
}

char *cr_strtrim(char *s)
{
    char *p = s;
    while (*p && isspace((unsigned char)*p))
        p++;
    size_t n = strlen(p);
    while (n && isspace((unsigned char)p[n - 1]))
        n--;
    memmove(s, p, n);
    s[n] = '\0';
    return s;
}

bool cr_str_has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static const char *skip_ws(const char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    return s;
}

int cr_parse_i64(const char *s, int base, int64_t *out)
{
    if (!s)
        return CR_EINVAL;
    s = skip_ws(s);
    if (!*s)
        return CR_EPARSE;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, base);
    if (errno == ERANGE)
        return CR_ERANGE;
    if (end == s || *skip_ws(end))
        return CR_EPARSE;
    *out = v;
    return 0;
}

int cr_parse_u64(const char *s, int base, uint64_t *out)
{
    if (!s)
        return CR_EINVAL;
    s = skip_ws(s);
    if (!*s || *s == '-')
        return CR_EPARSE;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    if (errno == ERANGE)
        return CR_ERANGE;
    if (end == s || *skip_ws(end))
        return CR_EPARSE;
    *out = v;
    return 0;
}

static int read_uint(const char **p, uint64_t *v)
{
    const char *s = *p;
    if (!isdigit((unsigned char)*s))
        return CR_EPARSE;
    uint64_t x = 0;
    while (isdigit((unsigned char)*s)) {
        x = x * 10 + (uint64_t)(*s - '0');
        if (x > (1u << 24))
            return CR_ERANGE;
        s++;
    }
    *p = s;
    *v = x;
    return 0;
}

int cr_cpulist_parse(const char *str, uint64_t *bits, size_t nbits, size_t *errpos)
{
    const char *s = skip_ws(str);
    int count = 0;
    memset(bits, 0, ((nbits + 63) / 64) * sizeof(uint64_t));
    if (!*s)
        return 0;
    for (;;) {
        uint64_t lo, hi;
        int err = read_uint(&s, &lo);
        if (err)
            goto bad;
        hi = lo;
        if (*s == '-') {
            s++;
            err = read_uint(&s, &hi);
            if (err)
                goto bad;
            if (hi < lo) {
                err = CR_EPARSE;
                goto bad;
            }
        }
        if (hi >= nbits) {
            err = CR_ERANGE;
            goto bad;
        }
        for (uint64_t c = lo; c <= hi; c++) {
            if (!(bits[c / 64] & (1ull << (c % 64))))
                count++;
            bits[c / 64] |= 1ull << (c % 64);
        }
        if (*s == ',') {
            s++;
            continue;
        }
        if (*skip_ws(s) == '\0')
            return count;
        err = CR_EPARSE;
    bad:
        if (errpos)
            *errpos = (size_t)(s - str);
        return err;
    }
}

void cr_cpulist_format(const uint64_t *bits, size_t nbits, cr_buf_t *out)
{
    bool first = true;
    cr_buf_append(out, "", 0);
    for (size_t c = 0; c < nbits;) {
        if (!(bits[c / 64] & (1ull << (c % 64)))) {
            c++;
            continue;
        }
        size_t e = c;
        while (e + 1 < nbits && (bits[(e + 1) / 64] & (1ull << ((e + 1) % 64))))
            e++;
        if (e == c)
            cr_buf_printf(out, "%s%zu", first ? "" : ",", c);
        else
            cr_buf_printf(out, "%s%zu-%zu", first ? "" : ",", c, e);
        first = false;
        c = e + 1;
    }
}

void cr_hex_encode(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

uint64_t cr_hash_str(const char *s)
{
    uint64_t h = CR_HASH_SEED;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

uint64_t cr_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

int cr_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool cr_hex_decode(const char *hex, size_t len, uint8_t *out)
{
    if (len % 2)
        return false;
    for (size_t i = 0; i < len / 2; i++) {
        int hi = cr_hex_digit(hex[2 * i]), lo = cr_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

bool cr_proc_status_mask(const char *text, const char *name, uint64_t *out)
{
    size_t n = strlen(name);
    for (const char *p = text; (p = strchr(p, '\n')) != NULL; p++) {
        if (strncmp(p + 1, name, n) != 0 || p[1 + n] != ':' || p[2 + n] != '\t')
            continue;
        uint64_t v = 0;
        int digits = 0;
        for (const char *q = p + 3 + n; digits < 16; q++, digits++) {
            int d = *q >= '0' && *q <= '9' ? *q - '0' : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10 : -1;
            if (d < 0)
                break;
            v = v << 4 | (uint64_t)d;
        }
        *out = v;
        return digits == 16;
    }
    return false;
}
