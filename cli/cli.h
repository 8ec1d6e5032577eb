/* The corral command line: one file per command group. */
#ifndef CORRAL_CLI_H
#define CORRAL_CLI_H

#include "hw/hw.h"
#include <corral/corral.h>

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
int cli_job_submit(int argc, char **argv); /* run_cmd.c: corral job submit */
int cli_job(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_nodes(int argc, char **argv);
int cli_dashboard(int argc, char **argv);
/* The session's dashboard login URL (cli/dashboard_cmd.c): 0 with *url
 * malloc'ed, else CLI_FAIL (said on stderr unless quiet). */
int cli_dashboard_url(char **url, bool quiet);
int cli_events(int argc, char **argv);
int cli_pg(int argc, char **argv);   /* pg_cmd.c */
int cli_list(int argc, char **argv); /* list_cmd.c */
/* The lease jobs (tasks' and actors' workers) a job's workers made, and
 * theirs in turn: [{job_id, name, state, node, pid, owner_pid}]; NULL when
 * the head cannot say. list_cmd.c */
json_t *cli_job_leases(corral_t *c, const corral_job_t *driver);
int cli_train(int argc, char **argv); /* train_cmd.c */
int cli_serve(int argc, char **argv); /* serve_cmd.c */

/* Workers' output as it is followed (run_cmd.c): with prefix, each line
 * goes out as "[<label>N] line" once whole, the partial one held. */
typedef struct outputs {
    size_t n;
    bool prefix;
    const char *label;   /* "" or "rank " */
    cr_buf_t *out, *err; /* with prefix: the partial line held */
} outputs_t;
void cli_on_follow(void *arg, unsigned worker, int stream, const char *data, size_t len);
/* Followed output of stdout, unprefixed, to a pipe: straight to it
 * (corral_set_log_fd: spliced from the socket, not copied through us). */
void cli_follow_to_stdout(corral_t *c, bool prefix);
/* The line on stderr before a worker's output that follows dropped
 * output (corral_set_log_dropped): "[corral: 12.0 MiB of earlier output
 * of worker 0 dropped: each worker keeps its last 64 MiB
 * (--worker-log-max)]". */
void cli_on_dropped(void *arg, unsigned worker, int stream, uint64_t dropped, uint64_t log_max);
/* Ctrl-C or SIGTERM while a job is followed stops the job (run_cmd.c):
 * cli_catch_interrupts installs the handler (the old ones saved), and
 * cli_stop_on_interrupt, the follow's tick (corral_set_tick) with a
 * cli_stopper_t, stops the job through a second connection once. */
#include <signal.h>
/* A line saying what a command waits for (wait.c): on a terminal one line
 * kept current ("corral run: job 4 pending 12s, 3rd in queue: REASON";
 * pos 0: no place said), else a line each time the reason changes and
 * every 30 s. */
typedef struct cli_waitline {
    const char *cmd;
    char what[96];
    char reason[256];
    int64_t t0, said_ms;
    bool tty, shown;
} cli_waitline_t;
void cli_waitline_init(cli_waitline_t *w, const char *cmd, const char *what);
void cli_waitline_show(cli_waitline_t *w, const char *reason, unsigned pos);
/* The suffix of n's ordinal: "st" (1st), "nd", "rd", "th" (11th). */
const char *cli_ordinal(unsigned n);
void cli_waitline_done(cli_waitline_t *w);

typedef struct corral corral_t;
typedef struct corral_pg corral_pg_t;
typedef struct cli_stopper {
    const char *cmd; /* "corral run", for messages */
    const char *job_id;
    bool sent;
    bool leave_running; /* corral job submit: an interrupt ends the follow only */
    bool left;          /* ... and it did */
    /* while the job is pending (cli_watch_pending): what it waits for */
    bool placed;
    int64_t next_ms;
    corral_t *c2;
    cli_waitline_t wl;
} cli_stopper_t;
void cli_catch_interrupts(struct sigaction *old_int, struct sigaction *old_term);
/* The follow's tick: stops the job on a signal, shows what it waits for. */
int cli_stop_on_interrupt(void *arg);
void cli_watch_pending(cli_stopper_t *st);
void cli_stopper_fini(cli_stopper_t *st);
/* Non-zero once SIGINT or SIGTERM came (after cli_catch_interrupts). */
int cli_interrupted(void);
/* Waits for group name (created with wait 0) to leave PENDING, saying why
 * it waits: 0 with *out (CREATED, or INFEASIBLE with its reason), -EINTR
 * on a signal, CR_ENOENT when it was removed, or the call's error. */
int cli_wait_pg(corral_t *c, const char *cmd, const char *name, corral_pg_t *out);

/* The caller's environment for a job's workers (callenv.c): policy "all"
 * (NULL too), "none" or "K1,K2" (those names), then extra ("K=V", later
 * wins), NULL-terminated in out->v.v, borrowing environ and extra. 0, or
 * CLI_USAGE once a bad policy is said. */
typedef struct cli_strv {
    CR_VEC(const char *) v;
} cli_strv_t;
int cli_worker_env(const char *cmd, const char *policy, const char *const *extra, size_t nextra,
                   cli_strv_t *out);
void cli_strv_free(cli_strv_t *v);
/* Whether word (n bytes) is one of list's comma-separated words. */
bool cli_one_of(const char *list, const char *word, size_t n);
/* path made absolute against the current directory (NULL: the directory
 * itself), malloc'ed; NULL once why is said. */
char *cli_abs_path(const char *cmd, const char *what, const char *path);

/* A command's options (cli/opts.c): a table ended by {0}, parsed with
 * getopt_long; --help (-h) is every command's. FLAG sets a bool, STR a
 * const char * (borrowed from argv), UINT an unsigned in lo..hi, CALL
 * calls call(dst, name, arg), which prints its own message and returns 0
 * or CLI_USAGE. usage follows every message on stderr; --help prints
 * usage then help (NULL: nothing more). cli_parse_opts returns the index of the first positional
 * argument; CLI_OPTS_HELP once the usage is printed for --help;
 * CLI_OPTS_BAD once the problem and the usage are printed on stderr. With
 * in_order, parsing stops at the first positional argument (a command
 * and its own options follow). */
typedef enum { CLI_OPT_FLAG, CLI_OPT_STR, CLI_OPT_UINT, CLI_OPT_CALL } cli_opt_kind_t;
typedef struct cli_opt {
    const char *name; /* without the dashes */
    char abbr;        /* a one-letter form (-f), 0 none */
    cli_opt_kind_t kind;
    void *dst;
    unsigned lo, hi;
    int (*call)(void *dst, const char *name, const char *arg);
} cli_opt_t;
/* clang-format off */
#define CLI_FLAG(n, p) {.name = (n), .kind = CLI_OPT_FLAG, .dst = (p)}
#define CLI_FLAG1(a, n, p) {.name = (n), .abbr = (a), .kind = CLI_OPT_FLAG, .dst = (p)}
#define CLI_STR(n, p) {.name = (n), .kind = CLI_OPT_STR, .dst = (p)}
#define CLI_UINT(n, p, l, h) {.name = (n), .kind = CLI_OPT_UINT, .dst = (p), .lo = (l), .hi = (h)}
#define CLI_CALL(n, fn, p) {.name = (n), .kind = CLI_OPT_CALL, .dst = (p), .call = (fn)}
#define CLI_END {.name = NULL}
/* clang-format on */
#define CLI_OPTS_HELP (-1)
#define CLI_OPTS_BAD (-2)
int cli_parse_opts(const char *cmd, const cli_opt_t *t, int argc, char **argv, const char *usage,
                   const char *help, bool in_order);

/* Discovers the node the way every command does: --spec FILE, or
 * --root DIR / CORRAL_SYSFS_ROOT, or this machine. Prints why on failure.
 * corral-tools only (cli/tools.c). */
int cli_discover(const char *spec, const char *root, cr_node_t **out);
/* Prints a JSON value to stdout, indented, with a newline. */
void cli_print_json(json_t *j);
/* s as a table shows it: a control character (newline, ESC, C1) as an
 * escape (\\n, \\x1b, \\u009b) and a backslash doubled, so that a name
 * cannot spoof rows or drive the terminal; long ones end in "...". The
 * result lives until eight more calls. */
const char *cli_esc(const char *s);
/* "80 GiB", "1.5 TiB" */
void cli_format_bytes(uint64_t bytes, char *buf, size_t size);

#endif
