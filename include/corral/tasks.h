/* corral tasks and actors from C (docs/actors.md): Ray's model for C
 * programs.
 *
 * One program holds both halves. Started by a person it is the *owner*
 * (the driver): corral_tasks_init() connects to the head, and the program
 * submits named functions and creates actors of named classes, with
 * arguments as bytes. Started by corral as a leased worker
 * (CORRAL_TASK_LEASE set, corral_worker_is_leased()), it registers its
 * functions and classes and calls corral_worker_main(), which serves the
 * owner's calls until the owner goes away.
 *
 *     int main(void) {
 *         corral_worker_register_fn("square", square);
 *         if (corral_worker_is_leased())
 *             return corral_worker_main();
 *         corral_tasks_t *t;
 *         corral_tasks_init(NULL, &t, NULL);
 *         ...
 *     }
 *
 * The owner leases workers through the head once per resource shape (a
 * lease is a one-worker job, named "task:RESOURCES" or "actor:CLASS",
 * bound to the owner's connection so it ends with the owner), then sends
 * calls to them directly over a Unix socket on the node (TCP across
 * nodes, where each side proves CORRAL_TASK_SECRET to the other with an
 * HMAC of a nonce the other chose), never through the head.
 *
 * Threads: the owner runs two threads of its own besides the caller's:
 * one does the sockets' I/O (accepts workers, reads their replies), the
 * other talks to the head (submits leases, watches them, stops them).
 * Every owner call may be made from any thread; a corral_tasks_t may be
 * shared by threads. Functions and methods run on the worker's main
 * thread, or on max_concurrency threads of an actor that asks for more.
 *
 * Errors: 0 or a negative code (corral/error.h). A failed call says why
 * in corral_tasks_errmsg() (per thread); a failed ref says why in
 * corral_ref_error().
 *
 * Ownership, for every buffer:
 *   - argument bytes given to a submit, call, create or put are copied
 *     before the call returns; the caller keeps them.
 *   - a corral_ref_t * from a submit, call or put belongs to the caller,
 *     who releases it once with corral_ref_free(), pending or not (a
 *     pending task still runs; its result is dropped).
 *   - the bytes corral_get() points at belong to the ref: valid, read
 *     only, until corral_ref_free() of that ref. Large values (at least
 *     CORRAL_TASK_INLINE_MAX on one node) are a read-only mapping of the
 *     memfd they came in, not a copy; from a worker over TCP (another
 *     node) a read-only mapping of a memfd this owner made and filled by
 *     FETCH (at most CORRAL_TASK_MAX_OBJECT), owned by the ref the same
 *     way.
 *   - a corral_actor_t * belongs to the caller: corral_actor_free() kills
 *     the actor (unless corral_actor_kill already did) and releases it;
 *     one from corral_actor_get is released without killing the actor.
 *   - the name given to corral_actor_get is borrowed for the call.
 *   - CORRAL_TASK_SECRET, when a driver's environment sets it, is read at
 *     corral_tasks_init (64 hex digits, else CR_EINVAL).
 *   - strings returned by corral_tasks_errmsg(), corral_ref_error() and
 *     corral_tasks_address() are borrowed: valid until the next owner call
 *     on that thread, corral_ref_free(), corral_tasks_shutdown().
 *   - refs given to corral_task_submit_args are held by the call (a
 *     count of their own) until it is sent or fails: the caller may free
 *     its refs at once. corral_cancel borrows r.
 *   - in a worker, args given to a function are borrowed for the call
 *     (and so are the items corral_args_get points at, inside them);
 *     what it puts in its corral_result_t belongs to the runtime (copied
 *     by corral_result_set, or allocated by corral_result_alloc), which
 *     sends and frees it after the function returns. */
#ifndef CORRAL_TASKS_H
#define CORRAL_TASKS_H

#include <corral/error.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every frame's limit (docs/actors.md "Wire"): larger arguments or
 * results fail with CR_E2BIG, except through a memfd on one node. */
#define CORRAL_TASK_MAX_FRAME (64u << 20)
/* Values at least this large travel in a sealed memfd passed with the
 * frame on a Unix socket instead of inside it. */
#define CORRAL_TASK_INLINE_MAX (1u << 20)
/* The largest result: on one node a memfd passed with the RETURN; from a
 * worker reached over TCP (another node) it stays in that worker's memory
 * and the owner fetches it in chunks of at most 8 MiB, each a frame
 * (docs/actors.md "Wire", FETCH). */
#define CORRAL_TASK_MAX_OBJECT ((size_t)4 << 30)
/* The longest function, class or method name. */
#define CORRAL_TASK_NAME_MAX 255

typedef struct corral_tasks corral_tasks_t;
typedef struct corral_ref corral_ref_t;
typedef struct corral_actor corral_actor_t;

/* ---- the owner ---- */

typedef struct corral_tasks_opts {
    const char *address;    /* the head, as corral_connect's; NULL: the same default */
    const char *token_path; /* as corral_connect's */
    /* What a lease runs: a NULL-terminated argv whose program registers
     * the functions and classes and calls corral_worker_main(). NULL: this
     * very program (/proc/self/exe), with no arguments. */
    const char *const *worker_argv;
    /* Non-zero: listen on TCP too (at tcp_host, NULL: 127.0.0.1), for
     * workers on other hosts; they prove CORRAL_TASK_SECRET with HMAC. */
    int tcp;
    const char *tcp_host;
    /* Non-zero: workers are told only the TCP address, even on this host
     * (tests of the TCP path). Implies tcp. */
    int tcp_only;
    /* Workers of one shape leased at once, at most; 0: what the cluster's
     * nodes can hold of that shape (at most 64). An owner whose credential
     * may not list the nodes (a job's, as in a worker: nested tasks) leases
     * this many (at most 64), or 1 when 0. */
    unsigned max_workers;
    /* An idle task worker is given back after this long; 0: 10000 ms. */
    unsigned idle_timeout_ms;
    /* A lease that runs but does not connect within this long fails; 0:
     * 60000 ms. */
    unsigned lease_timeout_ms;
} corral_tasks_opts_t;

/* Connects to the head and starts listening for workers (a private Unix
 * socket in a fresh mkdtemp directory, mode 0700; TCP when asked). opts
 * NULL: every default. Returns 0 with *out, or a negative code with
 * *errmsg (malloc'ed, the caller frees it; may be NULL) saying why. */
int corral_tasks_init(const corral_tasks_opts_t *opts, corral_tasks_t **out, char **errmsg);
/* Ends every lease (the workers exit), fails what is pending with
 * CR_EWORKERDIED, stops the threads and frees t. No other thread may be
 * inside a call on t (a corral_get waiting, say) when it is called. Refs and actors the
 * caller still holds stay valid for corral_get (failed or done) and must
 * still be freed; nothing else may be called with them. NULL: no-op. */
void corral_tasks_shutdown(corral_tasks_t *t);
/* Where the owner listens: "unix:PATH" and/or "tcp:HOST:PORT", ';'-separated. */
const char *corral_tasks_address(const corral_tasks_t *t);
/* What the last failing owner call of this thread said ("" none). */
const char *corral_tasks_errmsg(void);

typedef struct corral_task_opts {
    /* Per worker, as a job's: "CPU=1", "TPU=1", "GPU=1,CPU=2",
     * "my_resource=2". NULL or "": CPU=1. A worker given devices serves
     * only tasks of its shape; it sees its devices in the isolation
     * variables (TPU_VISIBLE_CHIPS, CUDA_VISIBLE_DEVICES, ...). */
    const char *resources;
    const char *selector; /* a label selector for its node; NULL none */
    /* How often a task whose worker died (a system failure: the process
     * ended, the connection broke) is run again; -1: without end. An
     * application error (the function failed) is never retried. */
    int max_retries;
} corral_task_opts_t;
/* opts NULL: CPU=1, no selector, and this many retries (Ray's default). */
#define CORRAL_TASK_DEFAULT_RETRIES 3

/* Runs fn(args) on a leased worker of opts' shape. Returns 0 with *out (a
 * pending ref) at once: the call is queued, sent to an idle worker of the
 * shape, or waits for one being leased. CR_EINVAL: a name that is empty
 * or too long, bad resources. CR_E2BIG: args over the frame's limit
 * (on one node, args of CORRAL_TASK_INLINE_MAX or more go by memfd and
 * may be larger). */
int corral_task_submit(corral_tasks_t *t, const char *fn, const void *args, size_t len,
                       const corral_task_opts_t *opts, corral_ref_t **out);
/* The same with the value of arg (a put, or another task's result) as
 * the arguments: waits for arg first (as corral_get, without a limit),
 * and a failed arg fails this submit with arg's code. A value held in a
 * memfd goes to a worker on this node as that memfd (no copy). */
int corral_task_submit_ref(corral_tasks_t *t, const char *fn, corral_ref_t *arg,
                           const corral_task_opts_t *opts, corral_ref_t **out);

/* Refs as arguments (Ray's f.remote(ref)): runs fn with args and the
 * values of the nrefs refs (puts, or results of other tasks, of any owner
 * in this process), resolved before it runs. Returns at once with *out:
 * the call waits in this owner until every ref is done (corral list:
 * PENDING_ARGS_AVAIL), then goes to a worker; a ref that failed fails it
 * with that ref's code and a text naming it ("ref argument 2 failed:
 * ..."). The refs are held by the call until then: the caller may free
 * its own at once. The function gets one buffer in the ref arguments'
 * encoding (read it with corral_args_get): item 0 the args given here,
 * item i the value of refs[i - 1], each copied into the CALL (a memfd
 * value too: up to the frame's limit in all, else CR_E2BIG on the ref;
 * corral_task_submit_ref passes one memfd value without a copy). nrefs:
 * 1 to CORRAL_TASK_MAX_ARG_REFS, else CR_EINVAL. */
#define CORRAL_TASK_MAX_ARG_REFS 1024
int corral_task_submit_args(corral_tasks_t *t, const char *fn, const void *args, size_t len,
                            corral_ref_t *const *refs, size_t nrefs, const corral_task_opts_t *opts,
                            corral_ref_t **out);
/* In a function called through corral_task_submit_args: item i of its
 * args (0: the caller's bytes; i: the value of the i-th ref), borrowed
 * from args for the call. 0 with *p and *n; CR_ERANGE: no item i;
 * CR_EPARSE: args are not in that encoding. Bounded by len: never reads
 * past the args. */
int corral_args_get(const void *args, size_t len, size_t i, const void **p, size_t *n);

/* Waits up to timeout_ms (negative: for ever; 0: do not wait) for r.
 * Returns 0 with *data and *len the value (borrowed from r: see the
 * ownership rules above), CR_EAGAIN when the time ran out, or the
 * failure: CR_ETASKFAILED (the function set an error: corral_ref_error),
 * CR_EWORKERDIED (its worker died and no retry was left),
 * CR_EACTORDIED (the actor is dead: killed, or restarts used up),
 * CR_EINFEASIBLE (no node can ever hold the shape), CR_ENOENT (the worker
 * has no such function or method), CR_E2BIG (the value did not fit a
 * frame), CR_ECANCELLED (corral_cancel). data and len may be NULL. */
int corral_get(corral_tasks_t *t, corral_ref_t *r, int timeout_ms, const void **data, size_t *len);
/* Waits until at least num_ready of the n refs are done (succeeded or
 * failed) or timeout_ms passes (negative: for ever). ready (n bytes, may
 * be NULL) gets 1 for each done ref. Returns 0, or CR_EAGAIN on timeout
 * (ready still says which are done). */
int corral_refs_wait(corral_tasks_t *t, corral_ref_t *const *refs, size_t n, size_t num_ready,
                     int timeout_ms, unsigned char *ready);
/* Whether r is done (succeeded or failed). */
bool corral_ref_is_ready(const corral_ref_t *r);
/* Why r failed, in words ("" while pending or when it succeeded). */
const char *corral_ref_error(const corral_ref_t *r);
/* Cancels the task or actor method call whose result r is (Ray's
 * ray.cancel without force): r fails at once with CR_ECANCELLED (a
 * corral_get waiting for it returns), and the call is never retried. A
 * call still queued, in this owner or in the worker behind another call,
 * never runs (the worker answers it "cancelled", RETURN status 2); one
 * already running is not interrupted (C cannot be, safely): it runs to its
 * end and its result is dropped. r done already (or a put): nothing
 * changes. 0, or CR_EINVAL for a NULL t or r. r still belongs to the
 * caller. */
int corral_cancel(corral_tasks_t *t, corral_ref_t *r);
/* Releases the caller's hold on r. NULL: no-op. */
void corral_ref_free(corral_ref_t *r);

/* An object: a ref whose value is a copy of data, ready at once. At least
 * CORRAL_TASK_INLINE_MAX bytes live in a sealed memfd that workers on this
 * node map read-only (corral_task_submit_ref). */
int corral_put(corral_tasks_t *t, const void *data, size_t len, corral_ref_t **out);

/* ---- actors ---- */

typedef struct corral_actor_opts {
    const char *resources; /* as corral_task_opts_t's; NULL: CPU=1 */
    const char *selector;
    /* Unique in the namespace (CORRAL_NAMESPACE, else "default", as
     * Python's): among this owner's live actors and the head's live jobs;
     * the lease job is then named "actor:NAMESPACE/NAME", and other
     * processes find it with corral_actor_get. At most 128 bytes, no
     * blanks, ':' or '/'. NULL: none. */
    const char *name;
    /* How often the actor is started again (a new worker, the
     * constructor with the same bytes) after its process died; -1:
     * without end. corral_actor_kill ends it for good. */
    int max_restarts;
    /* How often a method call in flight when the actor's process died is
     * sent again to the restarted actor; 0: it fails with
     * CR_EACTORDIED; -1: without end. Calls made while the actor restarts
     * wait for it. */
    int max_task_retries;
    /* How many method calls run at once in the actor (threads); 0 or 1:
     * one at a time, in the order each caller made them. */
    unsigned max_concurrency;
} corral_actor_opts_t;

/* Leases a worker for an actor of class cls and runs its constructor
 * with args there. Returns 0 with *out at once; method calls made before
 * the actor is up wait for it. A constructor that fails makes the actor
 * dead: every call fails with CR_EACTORDIED and the constructor's error.
 * CR_EEXIST: the name is taken. */
int corral_actor_create(corral_tasks_t *t, const char *cls, const void *args, size_t len,
                        const corral_actor_opts_t *opts, corral_actor_t **out);
/* Calls method (of the actor's class) with args: 0 with a pending ref.
 * Calls run in the order they were made (max_concurrency 1). */
int corral_actor_call(corral_tasks_t *t, corral_actor_t *a, const char *method, const void *args,
                      size_t len, corral_ref_t **out);
/* Ends the actor for good (no restart): its calls in flight and later
 * ones fail with CR_EACTORDIED; its lease job is stopped. */
int corral_actor_kill(corral_tasks_t *t, corral_actor_t *a);
/* How many times the actor was restarted so far. */
unsigned corral_actor_restarts(const corral_actor_t *a);
/* The id of the actor's current lease job ("" before it was leased):
 * borrowed, valid until the next call with a. */
const char *corral_actor_job(corral_actor_t *a, char *buf, size_t size);
/* A handle on the live actor named name in this owner's namespace
 * (CORRAL_NAMESPACE, else "default"), created by another process of the
 * same user (another driver of the job, say) with opts.name; Python's
 * corral.get_actor. It is found through the head (the lease job
 * "actor:NAMESPACE/NAME", whose command says its class and the directory
 * its worker listens in, and its owner's address), and called directly:
 * on this host (unless opts.tcp_only) on the actor's Unix socket (a
 * directory of this user's, mode 0700; SO_PEERCRED checked both ways);
 * else over TCP, where the owner says where the actor listens and each
 * side proves CORRAL_TASK_SECRET (this driver must hold the owner's: set
 * the same CORRAL_TASK_SECRET in both drivers' environments; a driver
 * takes it from there when set). Waits up to 10 s for an actor whose
 * constructor has not run yet.
 * Calls made with corral_actor_call run in the order this process made
 * them, one at a time with the owner's (max_concurrency 1). Returns 0
 * with *out; CR_ENOENT: no live actor of that name (the message says the
 * name and namespace); CR_EINVAL: a bad name; CR_EACCES, -ECONNREFUSED
 * and the like: it cannot be reached (why in corral_tasks_errmsg()).
 * *out belongs to the caller: corral_actor_free() only closes the
 * connection (the actor lives on with its owner); corral_actor_kill()
 * stops the actor's lease job (for good: its owner sees it die). The
 * actor is not restarted from here: when its process dies, calls in
 * flight and later ones fail with CR_EACTORDIED (look it up again). */
int corral_actor_get(corral_tasks_t *t, const char *name, corral_actor_t **out);
/* Kills the actor unless it is dead already and releases the handle (a
 * handle from corral_actor_get: closes its connection only). NULL: no-op. */
void corral_actor_free(corral_actor_t *a);

/* ---- the worker ---- */

typedef struct corral_result corral_result_t;
/* A function: args are borrowed for the call. Returns 0 with its value
 * set in res (none set: an empty value), or non-zero for an application
 * error (the message given to corral_result_error, else "FN returned N").
 */
typedef int (*corral_fn_t)(const void *args, size_t len, corral_result_t *res);
/* A constructor: sets *state, which the class's methods get. A value set
 * in res is the constructor's result (ignored by the owner). */
typedef int (*corral_ctor_t)(const void *args, size_t len, void **state, corral_result_t *res);
typedef int (*corral_method_t)(void *state, const void *args, size_t len, corral_result_t *res);
typedef void (*corral_dtor_t)(void *state);
typedef struct corral_method_def {
    const char *name;
    corral_method_t fn;
} corral_method_def_t;

/* Copies len bytes of data as the value. 0, or CR_E2BIG beyond what a
 * reply can carry. */
int corral_result_set(corral_result_t *res, const void *data, size_t len);
/* A buffer of len bytes, owned by the runtime, that becomes the value
 * (large ones are a memfd on this node: no copy on the way). NULL when it
 * cannot be had. A later call replaces it. */
void *corral_result_alloc(corral_result_t *res, size_t len);
/* Says why the call failed (printf format); the function should then
 * return non-zero. Returns CR_ETASKFAILED. */
int corral_result_error(corral_result_t *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Registers fn under name (before corral_worker_main; from one thread).
 * CR_EEXIST: the name is taken; CR_EINVAL: an empty or too long name. */
int corral_worker_register_fn(const char *name, corral_fn_t fn);
/* Registers a class: ctor, methods (an array ended by {NULL, NULL},
 * borrowed for the life of the program), dtor (may be NULL). A method is
 * called "CLASS.METHOD" on the wire. */
int corral_worker_register_class(const char *name, corral_ctor_t ctor,
                                 const corral_method_def_t *methods, corral_dtor_t dtor);
/* Whether this process was started as a leased worker (CORRAL_TASK_LEASE
 * is set). */
bool corral_worker_is_leased(void);
/* Connects to the owner (CORRAL_TASK_OWNER: its Unix socket when the path
 * is on this host, else TCP with the HMAC of CORRAL_TASK_SECRET), says
 * HELLO, and serves calls until the owner closes the connection or says
 * BYE. Over TCP the owner must prove the secret back (WELCOME's mac of
 * this worker's nonce) before any call is taken. A CANCEL of a call still
 * waiting here answers it "cancelled" without running it; a running call
 * is not interrupted. Returns the process's exit status: 0 then, 1 when
 * the owner could not be reached, did not prove the secret, or broke the
 * protocol (said on stderr). */
int corral_worker_main(void);

#ifdef __cplusplus
}
#endif
#endif
