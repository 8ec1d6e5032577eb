/* agent/launch: how an agent starts, watches and stops worker processes on
 * its one libuv loop.
 *
 * A worker is one process started for one job on this node, with only the
 * devices it was given visible, bound to the CPUs local to them, in its own
 * session (so its own process group), its stdout and stderr appended to
 * <log_dir>/<worker_id>.out and .err. The worker is its process group:
 * stopping it signals the whole group, and when its first process (the
 * leader) exits, whatever it left behind in the group is killed, so that
 * nothing keeps holding a device after the worker is reported gone.
 *
 * Ownership: cr_worker_start gives the caller a worker it must hand back
 * with cr_worker_release exactly once, also after the worker exited. The
 * worker embeds libuv handles, so its memory is freed from their close
 * callbacks: run the loop after the last release before uv_loop_close. */
#ifndef CORRAL_AGENT_LAUNCH_H
#define CORRAL_AGENT_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>
#include "hw/hw.h"

typedef struct cr_worker cr_worker_t;

/* Where a worker's threads may run. CLOSEST (the default, value 0): the
 * union of its devices' local CPUs, intersected with the CPUs this agent
 * may use here; NONE: the agent's own set. */
typedef enum cr_bind_mode {
    CR_BIND_CLOSEST = 0,
    CR_BIND_NONE,
} cr_bind_mode_t;

/* "closest" | "none" -> mode; CR_EINVAL otherwise. */
int cr_bind_mode_parse(const char *s, cr_bind_mode_t *out);
const char *cr_bind_mode_name(cr_bind_mode_t mode);

typedef struct cr_worker_spec {
    const char *const *argv; /* NULL-terminated; argv[0] searched in the worker's PATH */
    const char *cwd;         /* NULL: the agent's working directory */
    const cr_envlist_t *env; /* the job's environment, NULL for none */
    /* the head's variables for a distributed gang, applied after the
     * isolation ones (a TPU mesh's bounds replace the lone process's);
     * NULL for none */
    const cr_envlist_t *gang_env;
    bool inherit_env;       /* start from PATH, HOME, USER, LOGNAME, SHELL, LANG, LC_ALL,
                             * TZ, TMPDIR of the agent (none of the rest), job's on top */
    const cr_node_t *node;  /* this node, for isolation, CPUs and NICs */
    const hw_options_t *hw; /* how hw_isolate reads the world; NULL: defaults */
    const int *devs;        /* the devices given (indices into node->devices) */
    size_t ndevs;
    const char *job_id;       /* CORRAL_JOB_ID */
    const char *worker_id;    /* CORRAL_WORKER_ID and the log file names: a plain name */
    int worker_index;         /* CORRAL_WORKER_INDEX */
    const char *agent_socket; /* CORRAL_AGENT_SOCKET, NULL: not set */
    const char *head_address; /* CORRAL_ADDRESS (where the head is), NULL: not set */
    /* CORRAL_TLS_FINGERPRINT, CORRAL_TLS_CA: how to authenticate the head
     * there (docs/cluster.md "TLS"), NULL: not set */
    const char *tls_fingerprint, *tls_ca;
    const char *job_token; /* CORRAL_JOB_TOKEN (cr_job_token_format), NULL: not set */
    const char *log_dir;   /* an existing directory; NULL: output to /dev/null */
    bool log_fresh;        /* empty the files first (a worker's first attempt: files
                            * of the same name may be left by an earlier head's job
                            * of the same id); else later attempts append */
    cr_bind_mode_t bind;
    /* What the worker must not reach (docs/workers.md "What a worker can
     * reach"): NULL, or absolute paths, NULL-terminated (8 at most). With
     * it the worker starts in a mount namespace apart from the agent's (the
     * agent needs CAP_SYS_ADMIN: root; one namespace, made once, for every
     * worker with the same hide and keep, made again when one of their
     * paths names another file or the agent's mounts changed) where each
     * directory of hide is an empty
     * read-only tmpfs and each other file reads as /dev/null (and so do the
     * disks' device nodes, with /proc/sys and /sys read-only:
     * agent/ns_guard.h; mended while workers run); the paths of
     * keep (NULL-terminated, may be NULL) inside a hidden directory, such
     * as the sockets CORRAL_AGENT_SOCKET and CORRAL_ADDRESS name, are bound
     * back; and the capabilities that would undo or bypass the namespace
     * are dropped from its bounding set. A path that does not exist is
     * skipped. */
    const char *const *hide;
    const char *const *keep;
} cr_worker_spec_t;

typedef struct cr_worker_exit {
    int64_t code;     /* exit status when signal is 0 */
    int signal;       /* the signal that ended the leader, 0 none */
    bool stopped;     /* cr_worker_stop was called before it ended */
    bool killed;      /* the grace period ran out: the group got SIGKILL */
    int64_t ended_us; /* wall clock, us, when the leader's exit was seen (the
                       * pidfd or SIGCHLD event), not when this is reported:
                       * a stop's drain and a busy loop come after it */
} cr_worker_exit_t;

/* Called once per worker, when its leader has exited and, for a stop, the
 * rest of its group is gone or was killed. The worker stays valid until
 * released (releasing it from here is allowed). */
typedef void (*cr_worker_exit_cb)(cr_worker_t *w, const cr_worker_exit_t *exit, void *arg);

/* Starts one worker. Its environment, later entries winning: the agent's
 * (when inherit_env), the job's, NCCL_SOCKET_IFNAME and UCX_NET_DEVICES
 * for the NICs nearest its devices (unless the job set them), the
 * isolation variables of every backend on the node (hw_isolate), the
 * gang's (gang_env), then CORRAL_NODE_ID, CORRAL_JOB_ID, CORRAL_WORKER_ID,
 * CORRAL_WORKER_INDEX, CORRAL_ACCELERATOR_IDS, CORRAL_AGENT_SOCKET,
 * CORRAL_ADDRESS and CORRAL_JOB_TOKEN (the job's own credential, never
 * the cluster token: CORRAL_TOKEN_FILE is dropped).
 *
 * The worker gets stdin from /dev/null, no other descriptor of the agent's
 * and default signal dispositions; argv[0] is searched in the PATH of the
 * environment above.
 *
 * Returns 0 with *out set once the command has been executed, or a
 * negative code with *errmsg (malloc'ed, may be NULL on success) saying
 * why: "exec failed: No such file or directory" for a command that does
 * not exist. On failure cb is never called and nothing needs releasing
 * (run the loop so that the handles it opened close). A CPU binding that
 * cannot be honoured here is not an error: the worker runs unbound and
 * cr_worker_warning says why. */
int cr_worker_start(uv_loop_t *loop, const cr_worker_spec_t *spec, cr_worker_exit_cb cb, void *arg,
                    cr_worker_t **out, char **errmsg);

/* Spare log files: a worker's first attempt (log_fresh) takes its two
 * files from up to 8 made ahead of time in its log directory (named
 * .spare-PID-N) and renamed into place, when no file of its name is there;
 * creating a file allocates an inode, which ext4 without a journal makes
 * slow after many deletions (docs/benchmarks.md "Runtime"). fill makes
 * them, in the directory the last worker's logs went to (none before the
 * first worker: it creates its own); call it where nobody waits (the
 * head after a turn's answers went out). drop removes them (and a new
 * directory's first fill removes the spares of processes that are gone).
 * spares says how many are ready. */
void cr_worker_spares_fill(void);
void cr_worker_spares_drop(void);
unsigned cr_worker_spares(void);

/* The agent's periodic look at the workers' mount namespace: when the
 * agent's mounts changed since it was made, it is let go now rather than
 * at the next worker's start, so that a filesystem the host unmounted is
 * not kept mounted (its device busy) in a copy nobody uses, where the
 * host's unmounts do not propagate. */
void cr_worker_ns_tick(void);

/* SIGTERM to the worker's process group, then SIGKILL to the group after
 * grace_ms (0: at once) unless the group is gone by then. Stopping a worker
 * that has exited is a no-op; stopping one already stopping only shortens
 * its grace period. Returns 0. */
int cr_worker_stop(cr_worker_t *w, uint64_t grace_ms);

/* Hands the worker back. One still running is killed (SIGKILL to its
 * group) and its exit callback is not called. */
void cr_worker_release(cr_worker_t *w);

int cr_worker_pid(const cr_worker_t *w);         /* also its process group id */
bool cr_worker_is_running(const cr_worker_t *w); /* until the exit callback */
/* The cpulist it was bound to, "" when unbound. */
const char *cr_worker_cpus(const cr_worker_t *w);
/* Why its binding was not honoured, NULL when it was (or none asked). */
const char *cr_worker_warning(const cr_worker_t *w);
/* Its log files, NULL without a log directory. */
const char *cr_worker_stdout_path(const cr_worker_t *w);
const char *cr_worker_stderr_path(const cr_worker_t *w);
/* The descriptor of its log file of stream (0 stdout, 1 stderr) that the
 * worker was started with (write-only, appending), handed to the caller
 * (who closes it); -1 when there is none or it was taken. One not taken
 * is closed with the worker. */
int cr_worker_take_log_fd(cr_worker_t *w, int stream);

#endif
