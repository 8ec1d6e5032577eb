/* PLACEHOLDER: corral topo is being written. */
#include "cli.h"
#include <stdio.h>

int cli_topo(int argc, char **argv)
{
    CR_UNUSED(argc);
    CR_UNUSED(argv);
    fprintf(stderr, "corral topo: not built yet\n");
    return CLI_FAIL;
}
