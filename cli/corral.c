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
    {"start", cli_start, "start a head (corrald) on this machine"},
    {"stop", cli_stop, "stop the head and its workers"},
    {"status", cli_status, "the head, its nodes, devices used and free, pending work"},
    {"nodes", cli_nodes, "the nodes of the cluster"},
    {"run", cli_run, "run a job (a gang of workers) and wait for it"},
    {"job", cli_job, "list jobs, show one, stop one, its output"},
    {"pg", cli_pg, "placement groups: bundles reserved together"},
    {"train", cli_train, "one worker per device for torch.distributed / JAX, gang restarts"},
    {"events", cli_events, "what happened and why"},
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
