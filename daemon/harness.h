/* A head without sockets or signals, for fuzz targets and unit tests: D
 * set up as corrald --head sets it up (head_core_* in head/server.c), a simulated node from a
 * hardware spec, a state.db in a given directory, the local agent, a
 * libuv loop, and no listener. Messages go in through head_dispatch on
 * detached connections (cr_conn_new_detached, net/net.h); the loop runs
 * when the caller runs it.
 *
 * The local agent never starts a process: each worker start fails with
 * HEAD_HARNESS_REFUSAL (agent_config_t.refuse_start), so a job spec taken
 * from fuzz input runs nothing on the machine. Workers on nodes that
 * registered through a detached agent connection are "started" by a
 * WorkerStart handed to that connection's sink, nothing more. */
#ifndef CORRAL_DAEMON_HARNESS_H
#define CORRAL_DAEMON_HARNESS_H

#include "head/head.h"

#define HEAD_HARNESS_REFUSAL "not started in the fuzz harness"

/* Sets up D for a head on the node spec_path describes (a hardware spec:
 * simulated). dir must exist and be writable: dir/state.db (replaced if
 * there) and dir/logs are made there. Returns 0, or a negative error with
 * the reason on stderr (D is then torn down again). */
int head_harness_init(const char *spec_path, const char *dir);
/* What corrald's on_close does for a connection that goes away: its node
 * is disconnected, its followers and its placement groups' waits dropped.
 * Call it before cr_conn_free_detached on a connection the head saw. */
void head_harness_conn_closed(cr_conn_t *c);
/* Listens on the Unix socket path for peers holding token, as corrald
 * --head does: their messages go through head_handle (the turn's group
 * commit, answers held until it commits), their closes through what
 * main.c's on_close does. Closed by head_harness_fini. */
int head_harness_listen(const char *path, const uint8_t token[CR_TOKEN_LEN]);
/* Runs the loop once without blocking: due timers, exits, follow pumps. */
void head_harness_run(void);
/* Tears everything down (every handle closed, every allocation freed) and
 * zeroes D, so head_harness_init may run again. Free the detached
 * connections before or after; the head keeps no pointer to them after
 * head_harness_conn_closed. */
void head_harness_fini(void);

#endif
