/* corral-tools: the commands that read hardware and run the scheduler
 * offline (hw, topo, sim, conformance), in their own executable.
 *
 * Why apart from `corral`: these link hwloc, libfyaml, jansson, libudev
 * (through hwloc) and the backends, which the runtime commands (run, job,
 * status, ...) never use; loading them cost every `corral run` about
 * 0.4 ms of CPU before it did anything (docs/benchmarks.md, Runtime).
 * Users still type `corral hw`: corral (cli/corral.c) execs this binary
 * with the same arguments. It exports its symbols for the backend
 * plugins (cr_node_add_*). */
#include "cli.h"
#include <stdio.h>

int cli_discover(const char *spec, const char *root, cr_node_t **out)
{
    hw_options_t o = {.root = root, .spec_path = spec};
    char *msg = NULL;
    int err = hw_discover(&o, out, &msg);
    if (err) {
        fprintf(stderr, "corral: %s\n", msg ? msg : cr_strerror(err));
        free(msg);
    }
    return err;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } tools[] = {
        {"hw", cli_hw}, {"topo", cli_topo}, {"sim", cli_sim}, {"conformance", cli_conformance}};
    for (size_t i = 0; argc >= 2 && i < CR_ARRAY_SIZE(tools); i++)
        if (strcmp(argv[1], tools[i].name) == 0)
            return tools[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "corral-tools: expected hw, topo, sim or conformance (run it as 'corral hw', "
                    "'corral topo', 'corral sim', 'corral conformance')\n");
    return CLI_USAGE;
}
