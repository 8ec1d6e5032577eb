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
