/* The Prometheus text exposition format, version 0.0.4 (written by hand:
 * no C client is packaged), checked by `promtool check metrics` in
 * tests/cli/web_api.sh. */
#include "web/web_int.h"
#include <math.h>

static void escape(cr_buf_t *b, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            cr_buf_append(b, "\\\\", 2);
        else if (*s == '\n')
            cr_buf_append(b, "\\n", 2);
        else if (*s == '"' && quote)
            cr_buf_append(b, "\\\"", 2);
        else
            cr_buf_append(b, s, 1);
    }
}

void web_prom_family(cr_buf_t *b, const char *name, const char *type, const char *help)
{
    cr_buf_printf(b, "# HELP %s ", name);
    escape(b, help, false);
    cr_buf_printf(b, "\n# TYPE %s %s\n", name, type);
}

void web_prom_sample(cr_buf_t *b, const char *name, const char *const *labels, size_t nl,
                     double value)
{
    cr_buf_append(b, name, strlen(name));
    if (nl) {
        cr_buf_append(b, "{", 1);
        for (size_t i = 0; i < nl; i++) {
            cr_buf_printf(b, "%s%s=\"", i ? "," : "", labels[2 * i]);
            escape(b, labels[2 * i + 1] ? labels[2 * i + 1] : "", true);
            cr_buf_append(b, "\"", 1);
        }
        cr_buf_append(b, "}", 1);
    }
    if (isnan(value))
        cr_buf_printf(b, " NaN\n");
    else if (isinf(value))
        cr_buf_printf(b, " %s\n", value > 0 ? "+Inf" : "-Inf");
    else if (value == (double)(int64_t)value && fabs(value) < 9e15)
        cr_buf_printf(b, " %lld\n", (long long)value);
    else
        cr_buf_printf(b, " %.12g\n", value);
}
