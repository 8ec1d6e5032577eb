/* The option table every command parses its options with (cli.h): the
 * getopt_long boilerplate once, --help and the messages for an unknown
 * option or a bad number in one place. */
#include "cli.h"
#include <getopt.h>
#include <stdio.h>

#define MAX_OPTS 40

/* A usage error shows the usage lines, --help the whole text: the lines
 * end at the first blank line. */
static int usage_line_len(const char *usage)
{
    const char *blank = strstr(usage, "\n\n");
    return (int)(blank ? (size_t)(blank - usage) + 1 : strlen(usage));
}

int cli_parse_opts(const char *cmd, const cli_opt_t *t, int argc, char **argv, const char *usage,
                   const char *help, bool in_order)
{
    struct option lo[MAX_OPTS + 2];
    char abbrs[2 * MAX_OPTS + 3];
    size_t n = 0, na = 0;
    if (in_order)
        abbrs[na++] = '+'; /* stop at the first positional argument */
    abbrs[na++] = 'h';
    for (; t[n].name && n < MAX_OPTS; n++) {
        bool arg = t[n].kind != CLI_OPT_FLAG;
        lo[n] = (struct option){t[n].name, arg ? required_argument : no_argument, 0, (int)(n + 1)};
        if (t[n].abbr) {
            abbrs[na++] = t[n].abbr;
            if (arg)
                abbrs[na++] = ':';
        }
    }
    abbrs[na] = '\0';
    lo[n] = (struct option){"help", no_argument, 0, 'h'};
    lo[n + 1] = (struct option){0, 0, 0, 0};
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, abbrs, lo, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage, stdout);
            if (help)
                fputs(help, stdout);
            return CLI_OPTS_HELP;
        }
        for (size_t i = 0; opt > MAX_OPTS && i < n; i++)
            if (t[i].abbr == opt)
                opt = (int)(i + 1);
        if (opt < 1 || opt > (int)n) {
            fprintf(stderr, "%s: unknown or incomplete option '%s'\n%.*s", cmd, argv[optind - 1],
                    usage_line_len(usage), usage);
            return CLI_OPTS_BAD;
        }
        const cli_opt_t *o = &t[opt - 1];
        switch (o->kind) {
        case CLI_OPT_FLAG:
            *(bool *)o->dst = true;
            break;
        case CLI_OPT_STR:
            *(const char **)o->dst = optarg;
            break;
        case CLI_OPT_UINT: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (!optarg[0] || *end || v < (long)o->lo || v > (long)o->hi) {
                fprintf(stderr, "%s: --%s: expected %u to %u, got '%s'\n%.*s", cmd, o->name, o->lo,
                        o->hi, optarg, usage_line_len(usage), usage);
                return CLI_OPTS_BAD;
            }
            *(unsigned *)o->dst = (unsigned)v;
            break;
        }
        case CLI_OPT_CALL:
            if (o->call(o->dst, o->name, optarg))
                return CLI_OPTS_BAD;
            break;
        }
    }
    return optind;
}
