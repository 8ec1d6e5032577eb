/* agent/launch: starting, watching and stopping workers on the agent's
 * libuv loop (see launch.h for the contract). */
#include "agent/launch.h"
#include "agent/ns_guard.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* CPUs a binding can name: the cpulist parser's bitmap and the cpu_set_t
 * handed to the kernel are both this size. */
#define MAX_CPUS 4096
/* How often a stopping worker's group is looked at once its leader is gone
 * (members that are not our children cannot be waited for). */
#define GROUP_POLL_MS 10

typedef enum worker_state {
    W_RUNNING = 0,
    W_EXITED,
} worker_state_t;

struct cr_worker {
    /* how the leader's exit is seen: a pidfd polled on the loop, or, on
     * kernels before 5.3, SIGCHLD */
    union {
        uv_poll_t poll;
        uv_signal_t sigchld;
    } watch;
    bool use_signal;
    int pidfd;
    uv_timer_t timer;
    uv_loop_t *loop;
    cr_worker_exit_cb cb;
    void *arg;
    int pid;
    worker_state_t state;
    bool stopping;    /* SIGTERM sent: deadline is when SIGKILL follows */
    bool leader_gone; /* reaped; a stopping group may still be draining */
    bool released;
    bool in_cb;
    int nopen;         /* handles not yet closed */
    uint64_t deadline; /* loop time, ms */
    cr_worker_exit_t exit;
    char *cpus;
    char *warning;
    char *out_path, *err_path;
    int logfd[2]; /* the files the worker was given, until cr_worker_take_log_fd */
    bool hidden;  /* in hidden_ws: ns_mend_all mends its namespace until its leader is reaped */
};

/* The running workers started in a namespace (spawn_hidden), whose
 * namespace ns_repair mends while their leader is not reaped (its pid is
 * then still ours). */
static cr_worker_t **hidden_ws;
static size_t nhidden, hidden_cap;

static void hidden_add(cr_worker_t *w)
{
    if (nhidden == hidden_cap) {
        hidden_cap = hidden_cap ? 2 * hidden_cap : 16;
        hidden_ws = cr_realloc(hidden_ws, hidden_cap * sizeof(*hidden_ws));
    }
    hidden_ws[nhidden++] = w;
    w->hidden = true;
}

static void hidden_remove(cr_worker_t *w)
{
    if (!w->hidden)
        return;
    w->hidden = false;
    for (size_t i = 0; i < nhidden; i++)
        if (hidden_ws[i] == w) {
            hidden_ws[i] = hidden_ws[--nhidden];
            return;
        }
}

static const struct {
    const char *name;
    cr_bind_mode_t mode;
} bind_names[] = {
    {"closest", CR_BIND_CLOSEST},
    {"none", CR_BIND_NONE},
};

int cr_bind_mode_parse(const char *s, cr_bind_mode_t *out)
{
    for (size_t i = 0; s && i < CR_ARRAY_SIZE(bind_names); i++)
        if (strcmp(s, bind_names[i].name) == 0) {
            *out = bind_names[i].mode;
            return 0;
        }
    return CR_EINVAL;
}

const char *cr_bind_mode_name(cr_bind_mode_t mode)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(bind_names); i++)
        if (bind_names[i].mode == mode)
            return bind_names[i].name;
    return "?";
}

/* ---- the environment ---- */

static bool env_has(const cr_envlist_t *env, const char *key)
{
    return env && cr_envlist_get(env, key) != NULL;
}

static void env_unset(cr_envlist_t *env, const char *key)
{
    for (size_t i = 0; i < env->vars.n; i++)
        if (strcmp(env->vars.v[i].key, key) == 0) {
            free(env->vars.v[i].key);
            free(env->vars.v[i].value);
            env->vars.v[i] = env->vars.v[--env->vars.n];
            return;
        }
}

static const cr_nic_t *find_nic(const cr_node_t *node, const char *name)
{
    for (size_t i = 0; i < node->nics.n; i++)
        if (strcmp(node->nics.v[i].name, name) == 0)
            return &node->nics.v[i];
    return NULL;
}

/* NCCL_SOCKET_IFNAME as exact names ("=ib0,ib1": a leading '=' makes NCCL
 * match whole names, not prefixes) and UCX_NET_DEVICES (an RDMA NIC by its
 * HCA and port, mlx5_0:1, else the netdev), for the distinct NICs nearest
 * the worker's devices, in the order of its devices. */
static void set_nic_vars(const cr_worker_spec_t *s, cr_envlist_t *env)
{
    cr_buf_t ifn = {0}, ucx = {0};
    const char *seen[64];
    size_t nseen = 0;
    for (size_t i = 0; i < s->ndevs && nseen < CR_ARRAY_SIZE(seen); i++) {
        const char *nic = s->node->devices.v[s->devs[i]].nic;
        bool dup = !nic[0];
        for (size_t k = 0; k < nseen && !dup; k++)
            dup = strcmp(seen[k], nic) == 0;
        if (dup)
            continue;
        seen[nseen++] = nic;
        const cr_nic_t *n = find_nic(s->node, nic);
        cr_buf_printf(&ifn, "%s%s", ifn.len ? "," : "=", nic);
        if (n && n->rdma && n->rdma_device[0])
            cr_buf_printf(&ucx, "%s%s:1", ucx.len ? "," : "", n->rdma_device);
        else
            cr_buf_printf(&ucx, "%s%s", ucx.len ? "," : "", nic);
    }
    if (nseen && !env_has(env, "NCCL_SOCKET_IFNAME"))
        cr_envlist_set(env, "NCCL_SOCKET_IFNAME", ifn.s);
    if (nseen && !env_has(env, "UCX_NET_DEVICES"))
        cr_envlist_set(env, "UCX_NET_DEVICES", ucx.s);
    cr_buf_free(&ifn);
    cr_buf_free(&ucx);
}

/* What a worker calls its devices: the ids the isolation variables use. */
static void accelerator_ids(const cr_worker_spec_t *s, cr_buf_t *out)
{
    cr_buf_append(out, "", 0);
    for (size_t i = 0; i < s->ndevs; i++) {
        const cr_device_t *d = &s->node->devices.v[s->devs[i]];
        const char *sep = i ? "," : "";
        if (d->isolation_id[0])
            cr_buf_printf(out, "%s%s", sep, d->isolation_id);
        else if (d->vendor_index >= 0)
            cr_buf_printf(out, "%s%d", sep, d->vendor_index);
        else
            cr_buf_printf(out, "%s%d", sep, d->index);
    }
}

/* Why argv0 did not start, naming it: the errno's words first (what
 * scripts match), then the command, where it was looked for, and, for a
 * name with a space, the likely mistake (the whole command in one word). */
static char *exec_failure(const char *argv0, int err)
{
    const char *where =
        err == -ENOENT && !strchr(argv0, '/') ? " (not found in the worker's PATH)" : "";
    const char *hint = strchr(argv0, ' ') ? "; did you quote the whole command? give the command "
                                            "and its arguments as separate words, or run it "
                                            "with sh -c"
                                          : "";
    return cr_asprintf("exec failed: %s: cannot run '%s'%s%s", strerror(-err), argv0, where, hint);
}

/* What a worker takes from the agent's environment with inherit_env: what
 * programs need to run at all, never the rest (the daemon's own settings,
 * CORRAL_TOKEN_FILE, whatever its operator exported: issue 12). */
static const char *const inherited_vars[] = {"PATH", "HOME",   "USER", "LOGNAME", "SHELL",
                                             "LANG", "LC_ALL", "TZ",   "TMPDIR"};

static int build_env(const cr_worker_spec_t *s, cr_envlist_t *env, char **errmsg)
{
    if (s->inherit_env)
        for (size_t i = 0; i < CR_ARRAY_SIZE(inherited_vars); i++) {
            const char *v = getenv(inherited_vars[i]);
            if (v)
                cr_envlist_set(env, inherited_vars[i], v);
        }
    (void)cr_envlist_merge(env, s->env);
    /* a worker proves its job credential, never the cluster token: a
     * token file the submitter's environment names is not passed on */
    env_unset(env, "CORRAL_TOKEN_FILE");
    if (s->node) {
        set_nic_vars(s, env);
        cr_envlist_t iso = {0};
        hw_options_t dflt = {0};
        char *why = NULL;
        int err = hw_isolate(s->hw ? s->hw : &dflt, s->node, s->devs, s->ndevs, &iso, &why);
        if (err) {
            *errmsg = cr_asprintf("isolating its devices: %s", why ? why : cr_strerror(err));
            free(why);
            cr_envlist_free(&iso);
            return err;
        }
        (void)cr_envlist_merge(env, &iso);
        cr_envlist_free(&iso);
        (void)cr_envlist_merge(env, s->gang_env);
        cr_envlist_set(env, "CORRAL_NODE_ID", s->node->id);
    }
    char index[24];
    snprintf(index, sizeof(index), "%d", s->worker_index);
    cr_buf_t ids = {0};
    accelerator_ids(s, &ids);
    cr_envlist_set(env, "CORRAL_JOB_ID", s->job_id);
    cr_envlist_set(env, "CORRAL_WORKER_ID", s->worker_id);
    cr_envlist_set(env, "CORRAL_WORKER_INDEX", index);
    cr_envlist_set(env, "CORRAL_ACCELERATOR_IDS", ids.s);
    if (s->agent_socket)
        cr_envlist_set(env, "CORRAL_AGENT_SOCKET", s->agent_socket);
    if (s->head_address)
        cr_envlist_set(env, "CORRAL_ADDRESS", s->head_address);
    if (s->tls_fingerprint)
        cr_envlist_set(env, "CORRAL_TLS_FINGERPRINT", s->tls_fingerprint);
    if (s->tls_ca)
        cr_envlist_set(env, "CORRAL_TLS_CA", s->tls_ca);
    if (s->job_token)
        cr_envlist_set(env, "CORRAL_JOB_TOKEN", s->job_token);
    cr_buf_free(&ids);
    return 0;
}

/* KEY=VALUE for execve, joined by hand: cr_asprintf's formatting was a
 * third of a worker's start in the agent (about 2,000 instructions a
 * variable, 50 variables for a corral run carrying its caller's). */
static char **env_flatten(const cr_envlist_t *env)
{
    char **v = cr_calloc(env->vars.n + 1, sizeof(char *));
    for (size_t i = 0; i < env->vars.n; i++) {
        const char *k = env->vars.v[i].key, *val = env->vars.v[i].value;
        size_t kl = strlen(k), vl = strlen(val);
        char *s = cr_malloc(kl + vl + 2);
        memcpy(s, k, kl);
        s[kl] = '=';
        memcpy(s + kl + 1, val, vl + 1);
        v[i] = s;
    }
    return v;
}

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* ---- CPU binding ---- */

typedef struct binding {
    cpu_set_t *have; /* the loop thread's own set: restored after the spawn */
    cpu_set_t *want;
    size_t size;
    bool apply; /* want differs from have */
} binding_t;

static void bits_to_set(const uint64_t *bits, cpu_set_t *set, size_t size)
{
    CPU_ZERO_S(size, set);
    for (size_t c = 0; c < MAX_CPUS; c++)
        if (bits[c / 64] & (1ull << (c % 64)))
            CPU_SET_S(c, size, set);
}

static void set_to_bits(const cpu_set_t *set, size_t size, uint64_t *bits)
{
    memset(bits, 0, MAX_CPUS / 8);
    for (size_t c = 0; c < MAX_CPUS; c++)
        if (CPU_ISSET_S(c, size, set))
            bits[c / 64] |= 1ull << (c % 64);
}

static char *format_bits(const uint64_t *bits)
{
    cr_buf_t b = {0};
    cr_buf_append(&b, "", 0);
    cr_cpulist_format(bits, MAX_CPUS, &b);
    return b.s;
}

/* Decides the worker's CPUs: the union of its devices' local cpulists,
 * intersected with what the agent's thread may use (sched_getaffinity
 * already leaves out offline CPUs and those outside our cpuset). A
 * described node's CPUs may not exist here (a simulated DGX on a 2-core
 * machine): then the worker runs unbound and w->warning says why. */
static void plan_binding(const cr_worker_spec_t *s, cr_worker_t *w, binding_t *b)
{
    uint64_t want[MAX_CPUS / 64] = {0}, have[MAX_CPUS / 64], tmp[MAX_CPUS / 64];
    b->size = CPU_ALLOC_SIZE(MAX_CPUS);
    b->have = CPU_ALLOC(MAX_CPUS);
    b->want = CPU_ALLOC(MAX_CPUS);
    b->apply = false;
    w->cpus = cr_strdup("");
    if (!b->have || !b->want || s->bind == CR_BIND_NONE || !s->node || !s->ndevs)
        return;
    if (sched_getaffinity(0, b->size, b->have) != 0) {
        w->warning = cr_asprintf("not bound to CPUs: sched_getaffinity: %s", strerror(errno));
        return;
    }
    size_t known = 0;
    for (size_t i = 0; i < s->ndevs; i++) {
        const cr_device_t *d = &s->node->devices.v[s->devs[i]];
        size_t pos = 0;
        if (!d->cpus[0])
            continue;
        if (cr_cpulist_parse(d->cpus, tmp, MAX_CPUS, &pos) < 0) {
            cr_warn("worker %s: device %d has a bad cpulist '%s' (offset %zu): expected "
                    "e.g. 0-55,112-167; its CPUs are left out",
                    s->worker_id, d->index, d->cpus, pos);
            continue;
        }
        for (size_t k = 0; k < MAX_CPUS / 64; k++)
            want[k] |= tmp[k];
        known++;
    }
    if (!known)
        return; /* nothing says where its devices are: nothing to bind to */
    set_to_bits(b->have, b->size, have);
    bool any = false, all = true;
    for (size_t k = 0; k < MAX_CPUS / 64; k++) {
        tmp[k] = want[k] & have[k];
        any |= tmp[k] != 0;
        all &= tmp[k] == have[k];
    }
    if (!any) {
        char *wl = format_bits(want), *hl = format_bits(have);
        w->warning = cr_asprintf("not bound to CPUs: none of the CPUs local to its devices (%s) "
                                 "are online for this agent (it may use %s)",
                                 wl, hl);
        free(wl);
        free(hl);
        return;
    }
    free(w->cpus);
    w->cpus = format_bits(tmp);
    bits_to_set(tmp, b->want, b->size);
    b->apply = !all; /* the agent's own set already is the answer */
}

static void binding_fini(binding_t *b)
{
    if (b->have)
        CPU_FREE(b->have);
    if (b->want)
        CPU_FREE(b->want);
}

/* ---- log files ---- */

/* Files made ahead of time for workers' first attempts (cr_worker_spares_fill),
 * open for appending, in the directory the last worker's logs went to:
 * renamed into place at a worker's start, where creating its two files
 * would allocate two inodes on the path the caller waits on. */
#define SPARES 8
#define SPARE_PREFIX ".spare-"

static struct {
    char *dir;
    int fd[SPARES];
    char *path[SPARES];
    unsigned n, seq;
} spares;

/* A spare renamed to path, in spares.dir (spares_dir), when nothing of
 * that name is there (RENAME_NOREPLACE): its descriptor; -1 when there is
 * none or the rename failed (the old way then says what is wrong). */
static int spare_take(const char *path)
{
    if (!spares.n)
        return -1;
    unsigned i = spares.n - 1;
    if (renameat2(AT_FDCWD, spares.path[i], AT_FDCWD, path, RENAME_NOREPLACE) < 0) {
        if (errno == ENOENT) { /* removed behind our back: forgotten */
            close(spares.fd[i]);
            free(spares.path[i]);
            spares.n--;
        }
        return -1;
    }
    int fd = spares.fd[i];
    free(spares.path[i]);
    spares.n--;
    (void)futimens(fd, NULL); /* its times are the worker's start, as a fresh file's */
    return fd;
}

/* Removes the spares other processes of this directory left: those of a
 * process that is gone (or of an earlier process with this pid). Regular
 * files of ours only. */
static void spares_sweep(const char *dir)
{
    DIR *d = cr_opendir_nofollow(dir);
    if (!d)
        return;
    int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, SPARE_PREFIX, strlen(SPARE_PREFIX)) != 0)
            continue;
        int64_t pid;
        const char *p = e->d_name + strlen(SPARE_PREFIX);
        char num[24];
        size_t len = strcspn(p, "-");
        if (len == 0 || len >= sizeof(num) || p[len] != '-')
            continue;
        memcpy(num, p, len);
        num[len] = '\0';
        if (cr_parse_i64(num, 10, &pid) != 0 || pid <= 0 || pid > INT_MAX)
            continue;
        if (pid != getpid() && !(kill((pid_t)pid, 0) < 0 && errno == ESRCH))
            continue; /* a live process's */
        struct stat sb;
        if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
            sb.st_uid == geteuid())
            (void)unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

void cr_worker_spares_drop(void)
{
    for (unsigned i = 0; i < spares.n; i++) {
        (void)unlink(spares.path[i]);
        close(spares.fd[i]);
        free(spares.path[i]);
    }
    spares.n = 0;
    free(spares.dir);
    spares.dir = NULL;
}

void cr_worker_spares_fill(void)
{
    for (unsigned tries = 0; spares.dir && spares.n < SPARES && tries < 2 * SPARES; tries++) {
        char *p = cr_asprintf("%s/" SPARE_PREFIX "%d-%u", spares.dir, (int)getpid(), spares.seq++);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) {
            free(p);
            if (errno == EEXIST)
                continue; /* (a name an earlier process of this pid left) */
            return;       /* full, or no permission: workers create their own */
        }
        spares.fd[spares.n] = fd;
        spares.path[spares.n++] = p;
    }
}

unsigned cr_worker_spares(void)
{
    return spares.n;
}

/* dir is where workers' logs go now: spares are made there from now on
 * (those of another directory dropped, and the old ones of dead
 * processes there removed, once). */
static void spares_dir(const char *dir)
{
    if (spares.dir && strcmp(spares.dir, dir) == 0)
        return;
    cr_worker_spares_drop();
    spares.dir = cr_strdup(dir);
    spares_sweep(dir);
}

static int open_log(const char *dir, const char *id, const char *ext, bool fresh, char **path,
                    char **errmsg)
{
    *path = cr_asprintf("%s/%s.%s", dir, id, ext);
    if (fresh) {
        spares_dir(dir);
        int fd = spare_take(*path);
        if (fd >= 0)
            return fd;
    }
    int fd =
        open(*path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC | (fresh ? O_TRUNC : 0),
             0644);
    if (fd < 0) {
        int err = -errno;
        *errmsg = cr_asprintf("log file %s: %s", *path, strerror(errno));
        return err;
    }
    return fd;
}

/* ---- lifetime ---- */

static void on_close(uv_handle_t *h)
{
    cr_worker_t *w = h->data;
    if (--w->nopen > 0)
        return;
    hidden_remove(w);
    if (w->pidfd >= 0)
        close(w->pidfd);
    for (int s = 0; s < 2; s++)
        if (w->logfd[s] >= 0)
            close(w->logfd[s]);
    free(w->cpus);
    free(w->warning);
    free(w->out_path);
    free(w->err_path);
    free(w);
}

static void close_worker(cr_worker_t *w)
{
    uv_close((uv_handle_t *)&w->watch, on_close);
    uv_close((uv_handle_t *)&w->timer, on_close);
}

static void finish(cr_worker_t *w)
{
    w->state = W_EXITED;
    uv_timer_stop(&w->timer);
    if (!w->released && w->cb) {
        w->in_cb = true;
        w->cb(w, &w->exit, w->arg);
        w->in_cb = false;
    }
    if (w->released)
        close_worker(w);
}

/* True while any process of the group exists (zombies count: they cannot
 * be told apart without reading /proc, and the grace period bounds it). */
static bool group_alive(int pgid)
{
    return kill(-pgid, 0) == 0 || errno == EPERM;
}

static void kill_group(cr_worker_t *w)
{
    kill(-w->pid, SIGKILL);
    w->exit.killed = true;
}

static void on_timer(uv_timer_t *t);

/* A stopping worker whose leader is gone: done when the group is empty or
 * the grace period is over (then what is left gets SIGKILL). */
static void drain_group(cr_worker_t *w)
{
    if (!group_alive(w->pid)) {
        finish(w);
        return;
    }
    uint64_t now = uv_now(w->loop);
    if (now >= w->deadline) {
        kill_group(w);
        finish(w);
        return;
    }
    uint64_t wait = w->deadline - now;
    uv_timer_start(&w->timer, on_timer, wait < GROUP_POLL_MS ? wait : GROUP_POLL_MS, 0);
}

static void on_timer(uv_timer_t *t)
{
    cr_worker_t *w = t->data;
    if (w->leader_gone) {
        drain_group(w);
        return;
    }
    /* grace over and the leader still runs: its exit comes through
     * on_leader_exit once the kernel has delivered SIGKILL */
    kill_group(w);
}

static void on_leader_exit(cr_worker_t *w, int status)
{
    hidden_remove(w); /* reaped: its pid may be another's now */
    w->exit.code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    w->exit.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    w->leader_gone = true;
    if (!w->stopping) {
        finish(w);
        return;
    }
    drain_group(w);
}

/* The leader may have exited: reap it (only it: other children of the
 * agent belong to others) and go on from there. */
static void reap(cr_worker_t *w)
{
    int status = 0;
    pid_t r;
    siginfo_t si = {0};
    int64_t seen_us = cr_wall_us(); /* before anything else this turn does */
    if (w->leader_gone ||
        (waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0))
        return; /* still running (another child's SIGCHLD) */
    /* whatever the leader left in its group goes with it (nothing may keep
     * a device once the worker is reported gone), killed while the
     * unreaped leader still holds the group's id */
    if (!w->stopping)
        kill(-w->pid, SIGKILL);
    do
        r = waitpid(w->pid, &status, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return;
    if (w->use_signal)
        uv_signal_stop(&w->watch.sigchld);
    else
        uv_poll_stop(&w->watch.poll);
    if (r < 0) /* someone else reaped it: how it ended is lost */
        status = 0xff00;
    w->exit.ended_us = seen_us;
    on_leader_exit(w, status);
}

static void on_pidfd(uv_poll_t *h, int status, int events)
{
    reap(h->data);
}

static void on_sigchld(uv_signal_t *h, int signum)
{
    reap(h->data);
}

static bool have_pidfd(void)
{
    static int known = -1; /* a property of the kernel: probed once */
    if (getenv("CORRAL_TEST_NO_PIDFD"))
        return false; /* the tests' way to the SIGCHLD path */
    if (known < 0) {
        int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
        known = fd >= 0;
        if (fd >= 0)
            close(fd);
    }
    return known;
}

/* The job's PATH decides which program argv[0] names, as execvp would in
 * the worker (posix_spawnp would search the agent's PATH instead). */
static int resolve(const char *file, const cr_envlist_t *env, char **out)
{
    if (strchr(file, '/')) {
        *out = cr_strdup(file);
        return 0;
    }
    const char *path = cr_envlist_get(env, "PATH");
    if (!path)
        path = "/bin:/usr/bin"; /* glibc's default */
    int err = -ENOENT;
    while (*path) {
        size_t n = strcspn(path, ":");
        char *cand = cr_asprintf("%.*s/%s", (int)n, n ? path : ".", file);
        struct stat st;
        if (access(cand, X_OK) == 0 && stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            *out = cand;
            return 0;
        }
        if (errno == EACCES)
            err = -EACCES;
        free(cand);
        path += n + (path[n] == ':');
    }
    return err;
}

/* posix_spawn (glibc: clone(CLONE_VM|CLONE_VFORK), no page tables copied
 * however large the agent grows) in a new session, with default signal
 * dispositions and an empty mask, stdin from /dev/null, the logs as stdout
 * and stderr. An exec failure comes back as its errno, the failed child
 * already reaped. */
static int spawn_hidden(const cr_worker_spec_t *s, const char *file, char **envp, int outfd,
                        int errfd, pid_t *pid, const char **step);

static int spawn(const cr_worker_spec_t *s, char **envp, const cr_envlist_t *env, int outfd,
                 int errfd, pid_t *pid, const char **step)
{
    char *file = NULL;
    int err = resolve(s->argv[0], env, &file);
    if (err)
        return err;
    if (s->hide && s->hide[0]) {
        err = spawn_hidden(s, file, envp, outfd, errfd, pid, step);
        free(file);
        return err;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (outfd >= 0) {
        posix_spawn_file_actions_adddup2(&fa, outfd, 1);
        posix_spawn_file_actions_adddup2(&fa, errfd, 2);
    } else {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    }
    /* nothing else of the agent's (sockets, the database, pidfds), even
     * from a library that forgot O_CLOEXEC */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    if (s->cwd)
        posix_spawn_file_actions_addchdir_np(&fa, s->cwd);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setflags(&at,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    err = -posix_spawn(pid, file, &fa, &at, (char *const *)s->argv, envp);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    free(file);
    return err;
}

/* ---- a worker that cannot reach the session (docs/workers.md "What a
 * worker can reach") ----
 *
 * posix_spawn has no way to give the child a mount namespace of its own,
 * so with spec->hide the child is cloned as glibc's posix_spawn clones it
 * (CLONE_VM | CLONE_VFORK: no page tables copied, the parent waits until
 * the exec), and the child does what the file actions and attributes do,
 * plus: a mount namespace of its own (slave: the host's later mounts
 * still reach it, its own never leave it), an empty read-only tmpfs over
 * each hidden directory (the corral home: sessions, tokens, state.db, the
 * TLS key, other jobs' logs), /dev/null over each hidden file (a token
 * file kept elsewhere), the kept paths inside a hidden directory bound
 * back (the sockets CORRAL_AGENT_SOCKET and CORRAL_ADDRESS name, a CA
 * file), and the capabilities that would undo or bypass the namespace
 * dropped from its bounding set (CR_WORKER_DROPPED_CAPS below). The child
 * shares the parent's memory until it executes: it calls only system
 * calls and async-signal-safe functions, and says which step failed
 * through ns_child_t. (The type and source that mount(2) ignores for a
 * bind, a remount and a propagation change are given as "none", not NULL,
 * which valgrind takes for a bad pointer.) */

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif
/* Each of these undoes a mount namespace or reads around it: mount and
 * umount, setns (SYS_ADMIN); the agent's /proc/PID/root and memory
 * (SYS_PTRACE); open_by_handle_at (DAC_READ_SEARCH); raw disks through a
 * new device node (MKNOD), /dev/mem and /proc/kcore (SYS_RAWIO); kernel
 * memory through modules, BPF, perf or kexec (SYS_MODULE, BPF, PERFMON,
 * SYS_BOOT); the LSM's policy (MAC_ADMIN, MAC_OVERRIDE). The rest of
 * root's capabilities stay (Docker's default set keeps fewer). */
static const int dropped_caps[] = {CAP_SYS_ADMIN, CAP_SYS_PTRACE,  CAP_DAC_READ_SEARCH,
                                   CAP_MKNOD,     CAP_SYS_RAWIO,   CAP_SYS_MODULE,
                                   CAP_BPF,       CAP_PERFMON,     CAP_SYS_BOOT,
                                   CAP_MAC_ADMIN, CAP_MAC_OVERRIDE};

#define NS_MAX_PATHS 8
#define NS_STACK (256 * 1024)

typedef struct ns_child {
    const char *file;
    char *const *argv, *const *envp;
    int outfd, errfd;
    const char *cwd;
    const char *hide[NS_MAX_PATHS];
    bool hide_dir[NS_MAX_PATHS];
    size_t nhide;
    const char *keep[NS_MAX_PATHS];
    size_t keep_in[NS_MAX_PATHS]; /* the hidden directory it lies in */
    bool keep_dir[NS_MAX_PATHS];
    size_t nkeep;
    char fdpath[NS_MAX_PATHS][32]; /* "/proc/self/fd/N", made by the child */
    const cr_ns_guard_t *guard;    /* sysctls, sysfs and disks (agent/ns_guard.h) */
    int nsfd;                      /* the workers' namespace to enter (worker_ns), -1: make one */
    int err;                       /* out: -errno of the step that failed */
    const char *step;              /* out: which */
} ns_child_t;

/* the step whose failure turns the namespace made once off (spawn_hidden) */
static const char NS_ENTER_STEP[] = "entering the workers' mount namespace";

#define NS_FAIL(c, what)                                                                           \
    do {                                                                                           \
        (c)->err = -errno;                                                                         \
        (c)->step = (what);                                                                        \
        _exit(127);                                                                                \
    } while (0)

/* mkdir -p of path's components below the hidden directory dir (already
 * an empty tmpfs), without the last one; path is copied on the stack. */
__attribute__((no_sanitize_address)) static int ns_mkdirs(const char *dir, const char *path)
{
    char buf[4096];
    size_t n = strlen(path), at = strlen(dir);
    if (n >= sizeof(buf))
        return -1;
    memcpy(buf, path, n + 1);
    for (size_t i = at + 1; i < n; i++)
        if (buf[i] == '/') {
            buf[i] = '\0';
            if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                return -1;
            buf[i] = '/';
        }
    return 0;
}

/* The namespace itself: a mount namespace of its own, slave, each hidden
 * directory an empty read-only tmpfs, each hidden file /dev/null, the kept
 * paths bound back. Runs in a cloned child (shared memory: system calls
 * only); -1 with c->err and c->step set when a step fails, the kept paths'
 * descriptors closed either way (the namespace maker shares the agent's
 * descriptor table). */
__attribute__((no_sanitize_address)) static int ns_setup(ns_child_t *c)
{
    int keepfd[NS_MAX_PATHS];
    size_t nopen = 0;
    const char *step = NULL;
    if (unshare(CLONE_NEWNS) < 0) {
        step = "unshare(CLONE_NEWNS)";
        goto fail;
    }
    if (mount("none", "/", "none", MS_REC | MS_SLAVE, NULL) < 0) {
        step = "making / a slave mount";
        goto fail;
    }
    if (c->guard) {
        int e = cr_ns_guard_apply(c->guard, &step);
        if (e) {
            errno = -e;
            goto fail;
        }
    }
    /* the kept paths, opened in this namespace before they are covered */
    for (; nopen < c->nkeep; nopen++) {
        size_t i = nopen;
        if ((keepfd[i] = open(c->keep[i], O_PATH | O_CLOEXEC)) < 0) {
            step = "opening a path the worker keeps";
            goto fail;
        }
        char digits[16];
        int nd = 0;
        for (unsigned v = (unsigned)keepfd[i]; nd == 0 || v; v /= 10)
            digits[nd++] = (char)('0' + v % 10);
        char *o = c->fdpath[i];
        memcpy(o, "/proc/self/fd/", 14);
        o += 14;
        while (nd)
            *o++ = digits[--nd];
        *o = '\0';
    }
    for (size_t i = 0; i < c->nhide; i++) {
        if (!c->hide_dir[i]) {
            if (mount("/dev/null", c->hide[i], "none", MS_BIND, NULL) < 0) {
                step = "covering a hidden file";
                goto fail;
            }
            continue;
        }
        if (mount("corral-hidden", c->hide[i], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "mode=0755,size=16k") < 0) {
            step = "mounting a tmpfs over the corral home";
            goto fail;
        }
    }
    for (size_t i = 0; i < c->nkeep; i++) {
        if (ns_mkdirs(c->hide[c->keep_in[i]], c->keep[i]) < 0) {
            step = "making the way to a kept path";
            goto fail;
        }
        if (c->keep_dir[i]) {
            if (mkdir(c->keep[i], 0755) < 0 && errno != EEXIST) {
                step = "making a kept directory";
                goto fail;
            }
        } else {
            int fd = open(c->keep[i], O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
            if (fd < 0) {
                step = "making a kept file";
                goto fail;
            }
            close(fd);
        }
        if (mount(c->fdpath[i], c->keep[i], "none", MS_BIND, NULL) < 0) {
            step = "binding a kept path back";
            goto fail;
        }
    }
    for (size_t i = 0; i < c->nhide; i++)
        if (c->hide_dir[i] &&
            mount("none", c->hide[i], "none",
                  MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
            step = "making the tmpfs read-only";
            goto fail;
        }
    for (size_t i = 0; i < nopen; i++)
        close(keepfd[i]);
    return 0;
fail:
    c->err = -errno;
    c->step = step;
    for (size_t i = 0; i < nopen; i++)
        close(keepfd[i]);
    return -1;
}

/* Every signal the worker must not inherit a disposition of back to the
 * default, before any is unblocked: a handler of the head's would run on
 * its memory, which the child borrows until it executes, and an ignored
 * one would stay ignored across the exec. Only the caught and ignored
 * ones need it (SigCgt and SigIgn of the kernel's status of this process:
 * three in a plain corrald), which saves some sixty rt_sigaction calls on
 * every spawn while the head waits; when the status cannot be read, all. */
__attribute__((no_sanitize_address)) static void signals_to_default(void)
{
    /* the kernel's own struct, zeroed: SIG_DFL, no flags, an empty mask
     * (on every architecture, since all of it is zero). By the system
     * call, not glibc's sigaction, which refuses glibc's own signals (32
     * and 33): a head started ignoring them would hand that on. */
    uint64_t dfl[4] = {0};
    uint64_t set = ~(uint64_t)0, ign = 0, cgt = 0;
    char text[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, text, sizeof(text) - 1);
        close(fd);
        text[n > 0 ? n : 0] = '\0';
        if (n > 0 && cr_proc_status_mask(text, "SigIgn", &ign) &&
            cr_proc_status_mask(text, "SigCgt", &cgt))
            set = ign | cgt;
    }
    for (int sig = 1; sig < _NSIG && sig <= 64; sig++)
        if (sig != SIGKILL && sig != SIGSTOP && (set >> (sig - 1) & 1))
            syscall(SYS_rt_sigaction, sig, dfl, NULL, sizeof(uint64_t));
}

__attribute__((no_sanitize_address)) static int ns_child(void *arg)
{
    ns_child_t *c = arg;
    signals_to_default();
    if (setsid() < 0)
        NS_FAIL(c, "setsid");
    if (c->nsfd >= 0) {
        /* the namespace made once (worker_ns below); its root becomes
         * this process's root and working directory, so the working
         * directory is entered by path, inside it */
        if (setns(c->nsfd, CLONE_NEWNS) < 0)
            NS_FAIL(c, NS_ENTER_STEP);
    } else if (ns_setup(c) < 0) {
        _exit(127);
    }
    int in = open("/dev/null", O_RDONLY);
    if (in < 0 || dup2(in, 0) < 0)
        NS_FAIL(c, "stdin from /dev/null");
    int out = c->outfd >= 0 ? c->outfd : open("/dev/null", O_WRONLY);
    int err = c->errfd >= 0 ? c->errfd : out;
    if (out < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        NS_FAIL(c, "stdout and stderr");
    if (syscall(SYS_close_range, 3u, ~0u, 0u) < 0)
        for (int fd = 3; fd < 65536; fd++)
            close(fd);
    if (c->cwd && chdir(c->cwd) < 0)
        NS_FAIL(c, "chdir");
    for (size_t i = 0; i < CR_ARRAY_SIZE(dropped_caps); i++)
        if (prctl(PR_CAPBSET_DROP, dropped_caps[i], 0, 0, 0) < 0 && errno != EINVAL)
            NS_FAIL(c, "dropping a capability");
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) == 0) {
        for (size_t i = 0; i < CR_ARRAY_SIZE(dropped_caps); i++)
            d[dropped_caps[i] / 32].inheritable &= ~(1u << (dropped_caps[i] % 32));
        if (syscall(SYS_capset, &h, d) < 0)
            NS_FAIL(c, "clearing inheritable capabilities");
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(c->file, c->argv, c->envp);
    NS_FAIL(c, NULL);
    return 127;
}

/* The stack the cloned child runs on until it executes: mapped once per
 * thread and kept (an munmap per spawn cost a TLB flush, on a
 * paravirtualised guest a hypervisor call); the parent waits while the
 * child uses it (CLONE_VFORK), so one spawn at a time per thread uses it. */
static void *ns_stack(void)
{
    static _Thread_local void *stack;
    if (!stack) {
        void *s = mmap(NULL, NS_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        stack = s == MAP_FAILED ? NULL : s;
    }
    return stack;
}

/* fn(arg) in a child cloned onto the thread's stack above (CLONE_VM |
 * CLONE_VFORK | flags: the caller waits until it executes or exits), with
 * every signal blocked around the clone so that no handler runs on the
 * child's borrowed memory. Returns the child's pid, or -errno. */
static int ns_clone(int (*fn)(void *), void *arg, int flags)
{
    void *stack = ns_stack();
    if (!stack)
        return -ENOMEM;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int p = clone(fn, (char *)stack + NS_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD | flags, arg);
    int err = p < 0 ? -errno : 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return err ? err : p;
}

/* ---- the workers' mount namespace, made once ----
 *
 * Every worker of an agent gets the same namespace (the same paths hidden,
 * the same kept back), and none can change it (no CAP_SYS_ADMIN, the
 * tmpfs read-only), so it is made once and each worker enters it with
 * setns instead of making its own: a namespace of its own cost a worker
 * its unshare and mounts, and at its exit the namespace's teardown (the
 * unmounts wait for an RCU grace period), between its last instruction
 * and the head seeing it end. It is made again when the recipe changes
 * (a hidden or kept path now names another file: a restarted head's new
 * socket) or the agent's own mounts changed since (/proc/self/mountinfo
 * polls POLLPRI then): what the namespace copied of the host is then as
 * fresh as a copy made at each spawn, also where the host's mounts do not
 * propagate. Where it cannot be made (or the agent is in a chroot, which
 * setns would leave) each worker makes its own as before. */
typedef struct worker_ns {
    int fd;               /* the namespace (nsfs), -1: none */
    uint64_t mounts_seen; /* cr_ns_guard()->mounts_seen when it was made */
    char *key;            /* the recipe it was made from */
    bool broken;          /* made once and not usable here: each worker makes its own */
} worker_ns_t;

static worker_ns_t worker_ns = {.fd = -1};

typedef struct ns_maker {
    ns_child_t *c;
    dev_t root_dev;
    ino_t root_ino;
    int fd;        /* out: the namespace */
    bool made;     /* out: ns_setup succeeded */
    bool chrooted; /* out: its root is not the agent's */
} ns_maker_t;

__attribute__((no_sanitize_address)) static int ns_make_child(void *arg)
{
    ns_maker_t *m = arg;
    if (ns_setup(m->c) < 0)
        _exit(127);
    m->made = true;
    int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        m->c->err = -errno;
        m->c->step = "opening /proc/self/ns/mnt";
        _exit(127);
    }
    /* entering it as a worker will: is its root the agent's? */
    struct stat st;
    if (setns(fd, CLONE_NEWNS) < 0 || stat("/", &st) < 0 || st.st_dev != m->root_dev ||
        st.st_ino != m->root_ino)
        m->chrooted = true;
    m->fd = fd;
    _exit(0);
}

static void worker_ns_drop(void)
{
    if (worker_ns.fd >= 0)
        close(worker_ns.fd);
    worker_ns.fd = -1;
    free(worker_ns.key);
    worker_ns.key = NULL;
}

/* Whether the agent's mounts changed since the namespace was made, as far
 * as the guard's last look (cr_ns_guard_refresh, in ns_look) saw. */
static bool mounts_changed(void)
{
    return worker_ns.mounts_seen != cr_ns_guard()->mounts_seen;
}

static void ns_look(void);
static bool ns_used; /* a hidden spawn happened: the ticks look (ns_look) */

void cr_worker_ns_tick(void)
{
    if (ns_used)
        ns_look();
    if (worker_ns.fd >= 0 && mounts_changed())
        worker_ns_drop(); /* the next worker gets one made again */
}

/* The namespace for c's recipe (key): its descriptor, or -1 when the
 * worker is to make its own. */
static int worker_ns_get(ns_child_t *c, const char *key)
{
    if (worker_ns.broken)
        return -1;
    if (worker_ns.fd >= 0 && strcmp(worker_ns.key, key) == 0 && !mounts_changed())
        return worker_ns.fd;
    worker_ns_drop();
    struct stat root;
    if (stat("/", &root) < 0)
        return -1;
    /* the guard looked just before (spawn_hidden's ns_look): a change
     * while the namespace is made shows at its next look */
    if (!cr_ns_guard()->mounts_watched) {
        worker_ns.broken = true;
        return -1;
    }
    worker_ns.mounts_seen = cr_ns_guard()->mounts_seen;
    ns_maker_t m = {.c = c, .root_dev = root.st_dev, .root_ino = root.st_ino, .fd = -1};
    /* CLONE_FILES: the namespace's descriptor, opened by the child, is the agent's */
    int p = ns_clone(ns_make_child, &m, CLONE_FILES);
    if (p > 0)
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
            ;
    c->err = 0; /* a failed step shows again when the worker makes its own */
    c->step = NULL;
    if (p < 0 || m.fd < 0 || m.chrooted) {
        if (m.fd >= 0)
            close(m.fd);
        worker_ns_drop();
        worker_ns.broken = m.made; /* the namespace itself is not the trouble */
        return -1;
    }
    worker_ns.fd = m.fd;
    worker_ns.key = cr_strdup(key);
    return worker_ns.fd;
}

/* Whether path is dir or lies inside it. */
static bool path_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* ---- mending: what the host changes under running workers ----
 *
 * A hidden file replaced by a rename (a token file rotated) loses its
 * /dev/null in every other namespace: the kernel drops a mount whose file
 * is renamed over or removed elsewhere. A disk attached later gets a new
 * device node, and a filesystem mounted under /sys or /proc/sys later
 * reaches the workers' namespace writable (slave propagation). A new
 * namespace is made for the next worker either way (the recipe's key);
 * the ones running workers are in are mended: the agent looks at each tick
 * (cr_worker_ns_tick) and before each hidden spawn, and when something
 * changed it enters each running worker's namespace (setns, in a child
 * cloned as for a spawn) and covers or makes read-only again what is not.
 * Between the host's change and the mend (at most a tick) a worker can see
 * it (docs/workers.md). A namespace that cannot be mended has its workers
 * killed, as they could reach what they must not. */
typedef struct watched {
    char *path; /* a hidden file, not a directory */
    bool there;
    dev_t dev;
    ino_t ino;
} watched_t;

static watched_t watched[NS_MAX_PATHS];
static size_t nwatched;

static void watch_files(const ns_child_t *c)
{
    for (size_t i = 0; i < c->nhide && nwatched < NS_MAX_PATHS; i++) {
        bool known = c->hide_dir[i];
        for (size_t k = 0; k < nwatched && !known; k++)
            known = strcmp(watched[k].path, c->hide[i]) == 0;
        if (known)
            continue;
        struct stat st;
        watched_t *x = &watched[nwatched++];
        x->path = cr_strdup(c->hide[i]);
        x->there = lstat(x->path, &st) == 0;
        x->dev = x->there ? st.st_dev : 0;
        x->ino = x->there ? st.st_ino : 0;
    }
}

static bool watched_changed(void)
{
    bool changed = false;
    for (size_t i = 0; i < nwatched; i++) {
        watched_t *x = &watched[i];
        struct stat st;
        bool there = lstat(x->path, &st) == 0;
        if (there == x->there && (!there || (st.st_dev == x->dev && st.st_ino == x->ino)))
            continue;
        changed = true;
        x->there = there;
        x->dev = there ? st.st_dev : 0;
        x->ino = there ? st.st_ino : 0;
    }
    return changed;
}

typedef struct ns_mender {
    int fd; /* the namespace */
    const cr_ns_guard_t *guard;
    int err;          /* out */
    const char *step; /* out */
} ns_mender_t;

__attribute__((no_sanitize_address)) static int ns_mend_child(void *arg)
{
    ns_mender_t *m = arg;
    const char *step = "entering a worker's mount namespace";
    int e = setns(m->fd, CLONE_NEWNS) < 0 ? -errno : 0;
    if (!e)
        e = cr_ns_guard_apply(m->guard, &step);
    for (size_t i = 0; !e && i < nwatched; i++)
        if ((e = cr_ns_cover(watched[i].path)))
            step = "covering a hidden file";
    m->err = e;
    m->step = e ? step : NULL;
    _exit(e ? 127 : 0);
}

/* One namespace: 0 when mended, or -errno with *step. */
static int ns_mend(int fd, const char **step)
{
    ns_mender_t m = {.fd = fd, .guard = cr_ns_guard(), .err = -ECHILD, .step = "cloning"};
    int p = ns_clone(ns_mend_child, &m, 0);
    if (p < 0) {
        *step = "cloning";
        return p;
    }
    while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
        ;
    *step = m.step;
    return m.err;
}

static void ns_mend_all(void)
{
    struct stat self;
    if (stat("/proc/self/ns/mnt", &self) < 0)
        return;
    typedef struct {
        ino_t ino;
        int err;
    } seen_t;
    seen_t *seen = cr_calloc(nhidden + 1, sizeof(*seen));
    size_t nseen = 0;
    for (size_t i = 0; i < nhidden; i++) {
        cr_worker_t *w = hidden_ws[i];
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/mnt", w->pid);
        /* the leader is not reaped (hidden_remove), so the pid is still this worker's */
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_ino == self.st_ino) {
            if (fd >= 0)
                close(fd); /* exiting, or (never meant to be) the agent's own: nothing to mend */
            continue;
        }
        seen_t *x = NULL;
        for (size_t k = 0; k < nseen && !x; k++)
            if (seen[k].ino == st.st_ino)
                x = &seen[k];
        const char *step = NULL;
        if (!x) {
            x = &seen[nseen++];
            x->ino = st.st_ino;
            x->err = ns_mend(fd, &step);
            if (x->err)
                cr_error("worker %d: its mount namespace could not be mended after the host "
                         "changed (%s: %s); killing it, since it could reach what workers "
                         "must not",
                         w->pid, step ? step : "?", strerror(-x->err));
        }
        close(fd);
        if (x->err)
            kill(-w->pid, SIGKILL);
    }
    free(seen);
}

/* Whether the host changed what the namespaces hide; mends the running
 * workers' when it did. */
static void ns_look(void)
{
    bool changed = watched_changed();
    changed |= cr_ns_guard_refresh();
    if (changed && nhidden)
        ns_mend_all();
}

/* spawn() for a spec with hide; the same contract. */
static int spawn_hidden(const cr_worker_spec_t *s, const char *file, char **envp, int outfd,
                        int errfd, pid_t *pid, const char **step)
{
    ns_child_t c = {.file = file,
                    .argv = (char *const *)s->argv,
                    .envp = envp,
                    .outfd = outfd,
                    .errfd = errfd,
                    .cwd = s->cwd,
                    .guard = cr_ns_guard(),
                    .nsfd = -1};
    ns_used = true;
    ns_look();
    cr_buf_t key = {0}; /* the recipe: each path and the file it names */
    cr_buf_printf(&key, "g %llu\n", (unsigned long long)c.guard->generation);
    for (size_t i = 0; s->hide[i] && c.nhide < NS_MAX_PATHS; i++) {
        struct stat st;
        if (s->hide[i][0] != '/' || lstat(s->hide[i], &st) < 0)
            continue; /* nothing there to hide */
        c.hide_dir[c.nhide] = S_ISDIR(st.st_mode);
        c.hide[c.nhide++] = s->hide[i];
        cr_buf_printf(&key, "h %s %llu %llu %o\n", s->hide[i], (unsigned long long)st.st_dev,
                      (unsigned long long)st.st_ino, (unsigned)st.st_mode);
    }
    for (size_t i = 0; s->keep && s->keep[i] && c.nkeep < NS_MAX_PATHS; i++) {
        struct stat st;
        bool twice = false; /* the agent's socket is often also CORRAL_ADDRESS */
        for (size_t k = 0; k < c.nkeep; k++)
            twice |= strcmp(c.keep[k], s->keep[i]) == 0;
        if (twice || s->keep[i][0] != '/' || stat(s->keep[i], &st) < 0)
            continue;
        for (size_t k = 0; k < c.nhide; k++)
            if (c.hide_dir[k] && path_under(s->keep[i], c.hide[k]) &&
                strcmp(s->keep[i], c.hide[k]) != 0) {
                c.keep_in[c.nkeep] = k;
                c.keep_dir[c.nkeep] = S_ISDIR(st.st_mode);
                c.keep[c.nkeep++] = s->keep[i];
                cr_buf_printf(&key, "k %s %zu %llu %llu %o\n", s->keep[i], k,
                              (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                              (unsigned)st.st_mode);
                break;
            }
    }
    watch_files(&c);
    if (s->cwd) { /* said plainly, not as a failed chdir */
        char real[PATH_MAX];
        const char *cwd = realpath(s->cwd, real) ? real : s->cwd;
        for (size_t k = 0; k < c.nhide; k++)
            if (c.hide_dir[k] && path_under(cwd, c.hide[k])) {
                *step = "its working directory is inside the corral home, which workers do not see "
                        "(give the job another --cwd)";
                cr_buf_free(&key);
                return -EACCES;
            }
    }
    /* entering the namespace made once puts the worker at its root: it
     * goes to its directory (the agent's when the spec names none) by
     * path, as one made for it would have kept it there */
    char here[PATH_MAX];
    bool by_path = s->cwd != NULL;
    if (!by_path && getcwd(here, sizeof(here))) {
        by_path = true; /* unless the agent's own lies under what is hidden */
        for (size_t k = 0; k < c.nhide; k++)
            by_path &= !(c.hide_dir[k] && path_under(here, c.hide[k]));
    }
    if (c.nhide && by_path) {
        if (!s->cwd)
            c.cwd = here;
        c.nsfd = worker_ns_get(&c, key.s ? key.s : "");
        if (c.nsfd < 0)
            c.cwd = s->cwd;
    }
    cr_buf_free(&key);
    int p = ns_clone(ns_child, &c, 0);
    if (p < 0)
        return p;
    if (c.err && c.nsfd >= 0 && c.step == NS_ENTER_STEP) {
        /* the namespace made once cannot be entered here: from now on
         * each worker makes its own, this one too */
        waitpid(p, NULL, 0);
        worker_ns_drop();
        worker_ns.broken = true;
        c.nsfd = -1;
        c.cwd = s->cwd;
        c.err = 0;
        c.step = NULL;
        if ((p = ns_clone(ns_child, &c, 0)) < 0)
            return p;
    }
    if (c.err) {
        waitpid(p, NULL, 0);
        *step = c.step; /* NULL: the exec itself */
        return c.err;
    }
    *pid = p;
    return 0;
}

static int check_spec(const cr_worker_spec_t *s, char **errmsg)
{
    if (!s->argv || !s->argv[0] || !s->argv[0][0]) {
        *errmsg = cr_strdup("no command given");
        return CR_EINVAL;
    }
    if (!s->job_id || !s->worker_id || !s->worker_id[0] || strchr(s->worker_id, '/') ||
        strcmp(s->worker_id, ".") == 0 || strcmp(s->worker_id, "..") == 0) {
        *errmsg = cr_asprintf("bad worker id '%s': expected a plain name such as w0",
                              s->worker_id ? s->worker_id : "(none)");
        return CR_EINVAL;
    }
    if (s->ndevs && !s->node) {
        *errmsg = cr_strdup("devices given without the node they belong to");
        return CR_EINVAL;
    }
    for (size_t i = 0; i < s->ndevs; i++)
        if (s->devs[i] < 0 || (size_t)s->devs[i] >= s->node->devices.n) {
            *errmsg = cr_asprintf("device %d does not exist on node %s", s->devs[i], s->node->id);
            return CR_ENODEV;
        }
    /* a missing directory would otherwise surface as the child's chdir
     * failing, reported like a missing command */
    if (s->cwd) {
        struct stat st;
        int err = stat(s->cwd, &st) != 0 ? -errno : !S_ISDIR(st.st_mode) ? -ENOTDIR : 0;
        if (err) {
            *errmsg = cr_asprintf("working directory %s: %s", s->cwd, strerror(-err));
            return err;
        }
    }
    return 0;
}

int cr_worker_start(uv_loop_t *loop, const cr_worker_spec_t *spec, cr_worker_exit_cb cb, void *arg,
                    cr_worker_t **out, char **errmsg)
{
    char *why = NULL;
    int outfd = -1, errfd = -1;
    cr_envlist_t env = {0};
    char **envp = NULL;
    binding_t bind = {0};
    int err = check_spec(spec, &why);
    if (err)
        goto out_msg;
    cr_worker_t *w = cr_calloc(1, sizeof(*w));
    w->loop = loop;
    w->cb = cb;
    w->arg = arg;
    w->logfd[0] = w->logfd[1] = -1;
    if ((err = build_env(spec, &env, &why)))
        goto out_free_worker;
    envp = env_flatten(&env);
    if (spec->log_dir) {
        if ((outfd = err = open_log(spec->log_dir, spec->worker_id, "out", spec->log_fresh,
                                    &w->out_path, &why)) < 0)
            goto out_free_worker;
        if ((errfd = err = open_log(spec->log_dir, spec->worker_id, "err", spec->log_fresh,
                                    &w->err_path, &why)) < 0)
            goto out_free_worker;
    }
    plan_binding(spec, w, &bind);

    /* CPU binding before the worker's first instruction: posix_spawn has
     * no affinity attribute, and setting it after the spawn races with the
     * worker's start (its first threads would already be placed). The
     * child is cloned from the calling thread and affinity survives clone
     * and exec, so the loop thread takes the worker's set for the length
     * of the spawn and its own back right after. Two system calls, no
     * helper process (taskset would cost an exec per worker). */
    if (bind.apply && sched_setaffinity(0, bind.size, bind.want) != 0) {
        w->warning =
            cr_asprintf("not bound to CPUs %s: sched_setaffinity: %s", w->cpus, strerror(errno));
        w->cpus[0] = '\0';
        bind.apply = false;
    }
    w->pidfd = -1;
    w->use_signal = !have_pidfd();
    w->watch.poll.data = w;
    if (w->use_signal) { /* watching before the child exists: no SIGCHLD is missed */
        uv_signal_init(loop, &w->watch.sigchld);
        w->watch.sigchld.data = w;
        uv_signal_start(&w->watch.sigchld, on_sigchld, SIGCHLD);
    }
    pid_t pid = 0;
    const char *step = NULL;
    err = spawn(spec, envp, &env, outfd, errfd, &pid, &step);
    if (bind.apply && sched_setaffinity(0, bind.size, bind.have) != 0)
        cr_warn("could not give the agent's loop thread its CPUs back: %s", strerror(errno));
    if (err) {
        why = step ? cr_asprintf("cannot start the worker where the corral session is hidden "
                                 "from it: %s: %s",
                                 step, strerror(-err))
                   : exec_failure(spec->argv[0], err);
        if (errfd >= 0)
            dprintf(errfd, "corral: %s: %s\n", spec->argv[0], why);
        if (!w->use_signal)
            goto out_free_worker;
        w->nopen = 1;
        uv_close((uv_handle_t *)&w->watch, on_close);
        w = NULL;
        goto out_close_logs;
    }
    w->pid = pid;
    if (!w->use_signal) {
        /* the child is ours and not yet reaped, so the pid cannot have
         * been reused */
        w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (w->pidfd < 0) {
            err = -errno;
            cr_error("pidfd_open(%d): %s: stopping worker %s", (int)pid, strerror(errno),
                     spec->worker_id);
            kill(-pid, SIGKILL);
            waitpid(pid, NULL, 0);
            why = cr_asprintf("cannot watch the worker: pidfd_open: %s", strerror(-err));
            goto out_free_worker;
        }
        uv_poll_init(loop, &w->watch.poll, w->pidfd);
        w->watch.poll.data = w;
        uv_poll_start(&w->watch.poll, UV_READABLE, on_pidfd);
    }
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    w->nopen = 2;
    if (w->warning)
        cr_warn("worker %s of job %s: %s", spec->worker_id, spec->job_id, w->warning);
    if (spec->hide && spec->hide[0])
        hidden_add(w);
    w->logfd[0] = outfd; /* kept for cr_worker_take_log_fd */
    w->logfd[1] = errfd;
    outfd = errfd = -1;
    *out = w;
    goto out_close_logs;

out_free_worker:
    free(w->cpus);
    free(w->warning);
    free(w->out_path);
    free(w->err_path);
    free(w);
out_close_logs:
    if (outfd >= 0)
        close(outfd);
    if (errfd >= 0)
        close(errfd);
    binding_fini(&bind);
    strv_free(envp);
    cr_envlist_free(&env);
out_msg:
    if (errmsg)
        *errmsg = why;
    else
        free(why);
    return err < 0 ? err : 0;
}

int cr_worker_stop(cr_worker_t *w, uint64_t grace_ms)
{
    if (w->state == W_EXITED)
        return 0;
    uv_update_time(w->loop);
    uint64_t deadline = uv_now(w->loop) + grace_ms;
    if (w->stopping && deadline >= w->deadline)
        return 0;
    if (!w->stopping) {
        w->stopping = true;
        w->exit.stopped = true;
        kill(-w->pid, SIGTERM);
        kill(-w->pid, SIGCONT); /* a stopped process would never see SIGTERM */
    }
    w->deadline = deadline;
    if (w->leader_gone) {
        drain_group(w);
        return 0;
    }
    if (grace_ms == 0) {
        kill_group(w);
        return 0;
    }
    uv_timer_start(&w->timer, on_timer, grace_ms, 0);
    return 0;
}

void cr_worker_release(cr_worker_t *w)
{
    if (!w || w->released)
        return;
    w->released = true;
    if (w->state != W_EXITED) {
        kill(-w->pid, SIGKILL);
        if (w->leader_gone)
            finish(w); /* a draining stop: the leader is reaped already */
        return;        /* else reaping it finishes, silently */
    }
    if (!w->in_cb)
        close_worker(w);
}

int cr_worker_pid(const cr_worker_t *w)
{
    return w->pid;
}

bool cr_worker_is_running(const cr_worker_t *w)
{
    return w->state == W_RUNNING;
}

const char *cr_worker_cpus(const cr_worker_t *w)
{
    return w->cpus;
}

const char *cr_worker_warning(const cr_worker_t *w)
{
    return w->warning;
}

int cr_worker_take_log_fd(cr_worker_t *w, int stream)
{
    int fd = w->logfd[stream];
    w->logfd[stream] = -1;
    return fd;
}

const char *cr_worker_stdout_path(const cr_worker_t *w)
{
    return w->out_path;
}

const char *cr_worker_stderr_path(const cr_worker_t *w)
{
    return w->err_path;
}
