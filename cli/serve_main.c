/* corral-serve: `corral serve` (serve_cmd.c, docs/serve.md) in its own
 * executable, which corral execs as it execs corral-tools.
 *
 * Why apart from `corral`: the router links libmicrohttpd (and through it
 * GnuTLS), which the runtime commands never use; in `corral` every run,
 * status and job command would load them first. The replicas' workers run
 * this binary too ("serve exec"), as does the router ("serve router"). */
#include "cli.h"
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "serve") == 0)
        return cli_serve(argc - 1, argv + 1);
    fprintf(stderr, "corral-serve: expected serve (run it as 'corral serve')\n");
    return CLI_USAGE;
}
