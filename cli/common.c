/* Helpers shared by the corral commands (both executables: no hw/ here, see
 * cli/tools.c). */
#include "cli.h"
#include <stdio.h>

void cli_print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
    }
}

void cli_format_bytes(uint64_t bytes, char *buf, size_t size)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024 && u + 1 < CR_ARRAY_SIZE(units)) {
        v /= 1024;
        u++;
    }
    if (bytes == 0)
        snprintf(buf, size, "-");
    else if (v == (double)(uint64_t)v)
        snprintf(buf, size, "%.0f %s", v, units[u]);
    else
        snprintf(buf, size, "%.1f %s", v, units[u]);
}

const char *cli_esc(const char *s)
{
    static char bufs[8][4096];
    static unsigned next;
    char *out = bufs[next++ % CR_ARRAY_SIZE(bufs)];
    size_t o = 0, cap = sizeof(bufs[0]) - 8; /* room for one escape and the end */
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    for (; *p && o < cap; p++) {
        unsigned char ch = *p;
        if (ch == '\\' || ch == '\n' || ch == '\r' || ch == '\t') {
            out[o++] = '\\';
            out[o++] = ch == '\\' ? '\\' : ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't';
        } else if (ch < 0x20 || ch == 0x7f) {
            o += (size_t)snprintf(out + o, 5, "\\x%02x", ch);
        } else if (ch == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) { /* a C1 control, e.g. CSI */
            o += (size_t)snprintf(out + o, 7, "\\u%04x", p[1]);
            p++;
        } else {
            out[o++] = (char)ch;
        }
    }
    if (*p)
        o += (size_t)snprintf(out + o, 4, "...");
    out[o] = '\0';
    return out;
}
