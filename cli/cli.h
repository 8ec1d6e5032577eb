/* The corral command line: one file per command group. */
#ifndef CORRAL_CLI_H
#define CORRAL_CLI_H

#include "hw/hw.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* in corral-tools (cli/tools.c), which corral execs for them */
int cli_hw(int argc, char **argv);
int cli_topo(int argc, char **argv);
int cli_sim(int argc, char **argv);
int cli_conformance(int argc, char **argv); /* conformance_cmd.c */
/* the runtime (docs/runtime.md): start_cmd.c, run_cmd.c, job_cmd.c */
int cli_start(int argc, char **argv);
int cli_stop(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_job(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_nodes(int argc, char **argv);
int cli_events(int argc, char **argv);
int cli_pg(int argc, char **argv); /* pg_cmd.c */
int cli_train(int argc, char **argv); /* train_cmd.c */

/* Workers' output as it is followed (run_cmd.c): with prefix, each line
 * goes out as "[<label>N] line" once whole, the partial one held. */
typedef struct outputs {
    size_t n;
    bool prefix;
    const char *label;   /* "" or "rank " */
    cr_buf_t *out, *err; /* with prefix: the partial line held */
} outputs_t;
void cli_on_follow(void *arg, unsigned worker, int stream, const char *data, size_t len);
/* Ctrl-C or SIGTERM while a job is followed stops the job (run_cmd.c):
 * cli_catch_interrupts installs the handler (the old ones saved), and
 * cli_stop_on_interrupt, the follow's tick (corral_set_tick) with a
 * cli_stopper_t, stops the job through a second connection once. */
#include <signal.h>
typedef struct cli_stopper {
    const char *cmd; /* "corral run", for messages */
    const char *job_id;
    bool sent;
} cli_stopper_t;
void cli_catch_interrupts(struct sigaction *old_int, struct sigaction *old_term);
int cli_stop_on_interrupt(void *arg);

/* Discovers the node the way every command does: --spec FILE, or
 * --root DIR / CORRAL_SYSFS_ROOT, or this machine. Prints why on failure.
 * corral-tools only (cli/tools.c). */
int cli_discover(const char *spec, const char *root, cr_node_t **out);
/* Prints a JSON value to stdout, indented, with a newline. */
void cli_print_json(json_t *j);
/* "80 GiB", "1.5 TiB" */
void cli_format_bytes(uint64_t bytes, char *buf, size_t size);

#endif
