/* corral: the command line entry point. */
#include "cli.h"
#include <stdio.h>

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"hw", cli_hw, "this node's accelerators, host topology and labels"},
    {"topo", cli_topo, "the device-to-device connection matrix and domains"},
    {"sim", cli_sim, "the scheduler on a simulated cluster and workload"},
};

static void usage(FILE *fp)
{
    fprintf(fp, "usage: corral COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < CR_ARRAY_SIZE(commands); i++)
        fprintf(fp, "  %-8s %s\n", commands[i].name, commands[i].help);
    fprintf(fp, "\n'corral COMMAND --help' tells more.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    for (size_t i = 0; i < CR_ARRAY_SIZE(commands); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "corral: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}
