/* The corral command line: one file per command group. */
#ifndef CORRAL_CLI_H
#define CORRAL_CLI_H

#include "hw/hw.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* in corral-tools (cli/tools.c), which corral execs for them */
int cli_hw(int argc, char **argv);
int cli_topo(int argc, char **argv);
int cli_sim(int argc, char **argv);
/* the runtime (docs/runtime.md): start_cmd.c, run_cmd.c, job_cmd.c */
int cli_start(int argc, char **argv);
int cli_stop(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_job(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_nodes(int argc, char **argv);
int cli_events(int argc, char **argv);

/* Discovers the node the way every command does: --spec FILE, or
 * --root DIR / CORRAL_SYSFS_ROOT, or this machine. Prints why on failure.
 * corral-tools only (cli/tools.c). */
int cli_discover(const char *spec, const char *root, cr_node_t **out);
/* Prints a JSON value to stdout, indented, with a newline. */
void cli_print_json(json_t *j);
/* "80 GiB", "1.5 TiB" */
void cli_format_bytes(uint64_t bytes, char *buf, size_t size);

#endif
