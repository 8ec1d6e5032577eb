/* corral start / corral stop: the head's life cycle (docs/runtime.md). */
#include "cli.h"
#include <corral/corral.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char start_usage[] =
    "usage: corral start --head [--hw-spec FILE] [--resources 'K=V,...'] [--labels 'k=v,...'] "
    "[--port N] [--listen ADDR] [--node-ip IP] [--token-file F] [--heartbeat-ms N] "
    "[--suspect-after-ms N] "
    "[--dead-after-ms N] [--tls | --no-tls] [--tls-cert F --tls-key F] "
    "[--dashboard-port N|any|0] [--dashboard-host IP|off] "
    "[--keep-finished-jobs N] [--keep-finished-for DURATION] [--keep-events N] "
    "[--max-frame BYTES] [--log-file PATH] [--worker-log-max BYTES] [--block]\n"
    "       corral start --address HEAD:PORT [--token-file F] [--hw-spec FILE] [--node-ip IP] "
    "[--node-id ID] [--resources ...] [--labels ...] [--tls-fingerprint sha256:HEX | --tls-ca F] "
    "[--metrics-port N|any] [--metrics-host IP] [--tls-cert F --tls-key F] [--log-file PATH] "
    "[--worker-log-max BYTES] [--keep-finished-jobs N] [--keep-finished-for D] [--block]\n"
    "\n"
    "--head starts the cluster's head (corrald) on this node, in the background, and prints\n"
    "the command that joins an agent to it; --address joins this node to a head as an agent.\n"
    "\n"
    "  --hw-spec FILE          describe the node from a spec file instead of discovering it\n"
    "  --resources, --labels   extra resources ('K=V,...') and labels ('k=v,...') of the node\n"
    "  --port N, --listen ADDR the head's TCP port, address to listen on\n"
    "  --token-file F          the cluster token (default: the session's)\n"
    "  --node-ip IP, --node-id ID   this agent's address and name\n"
    "  --heartbeat-ms, --suspect-after-ms, --dead-after-ms N   the head's failure detector\n"
    "  --tls, --no-tls          TLS 1.3 on the head's TCP port: on by default unless it listens\n"
    "                          on a loopback address; --no-tls sends jobs in plain text\n"
    "  --tls-cert F --tls-key F   the head's certificate and key (PEM) instead of the\n"
    "                          session's self-signed one; an agent's: its /metrics's\n"
    "  --tls-fingerprint sha256:HEX   the head's certificate, pinned (the join command has it)\n"
    "  --tls-ca F              or: verify the head's certificate and name against this CA\n"
    "  --keep-finished-jobs N  finished jobs the head keeps, with their workers, events and\n"
    "                          output (default 10000); the oldest beyond are removed\n"
    "  --keep-finished-for D   and each for at most D (90s, 15m, 24h, 7d; default 24h); an\n"
    "                          agent keeps its output files of finished workers by the same\n"
    "                          two bounds, counted in workers\n"
    "  --keep-events N         the newest events the head keeps for 'corral events'\n"
    "                          (default 100000); older ones are removed once a second\n"
    "  --max-frame BYTES       the largest message the head takes or sends (default 16 MiB;\n"
    "                          at least 512 KiB); listings are paged to fit\n"
    "  --log-file PATH         corrald's log (default: logs/corrald.log in its session), a\n"
    "                          regular file of yours, never opened through a symlink\n"
    "  --dashboard-port N      the head's HTTP API, metrics and dashboard (default 8265; any:\n"
    "                          a free port; 0: none); --dashboard-host IP (127.0.0.1; off: none;\n"
    "                          off loopback it serves HTTPS only, with the head's certificate)\n"
    "  --metrics-port N        an agent's Prometheus /metrics (any: a free port; default none)\n"
    "                          on --metrics-host IP (127.0.0.1; 0.0.0.0: every address; off\n"
    "                          loopback it serves HTTPS only, with --tls-cert/--tls-key or the\n"
    "                          agent's self-signed certificate, kept in CORRAL_HOME/agent_ID)\n"
    "  --worker-log-max BYTES  what each worker output file keeps on disk: its last BYTES\n"
    "                          (default 64M, at least 1M; 0: unbounded); older output is\n"
    "                          dropped and 'corral job logs' says how much\n"
    "  --block                 run in the foreground\n"
    "\n"
    "A head that is unreachable fails the join at once; 'corral stop' stops what started here.\n";
static const char stop_usage[] =
    "usage: corral stop | corral stop --address HOST:PORT [--token-file F] [--keep-head]\n"
    "  corral stop: every corral daemon of this session on this node: the head (through its\n"
    "  socket, else by its pid) and the agents started here (CORRAL_HOME/agent_*/corrald.pid);\n"
    "  their workers are stopped first. This node only, as 'ray stop'.\n"
    "  --address: the cluster of that head, from anywhere: the head tells every agent joined\n"
    "  to it to stop its workers and exit (they do not join again), then stops itself and its\n"
    "  own workers; --keep-head leaves the head running, its jobs on other nodes ended.\n"
    "  --token-file: the cluster token (default: CORRAL_TOKEN_FILE, else this session's).\n"
    "  Either way 'nothing was running' (exit 0) when there was none.\n";

#define START_TIMEOUT_MS 15000

/* corral stop --address: through the head (Shutdown with agents). A head
 * that is not there is "nothing was running", so that it is idempotent. */
static int stop_cluster(const char *addr, const char *token_file, bool keep_head)
{
    corral_t *c;
    char *why = NULL;
    int err = corral_connect(addr, token_file, &c, &why);
    if (err == -ECONNREFUSED || err == CR_ENOENT) {
        printf("corral: nothing was running at %s (%s)\n", addr, why ? why : cr_strerror(err));
        free(why);
        return CLI_OK;
    }
    if (err < 0) {
        fprintf(stderr, "corral stop: %s\n", why ? why : cr_strerror(err));
        free(why);
        return CLI_FAIL;
    }
    unsigned told = 0;
    if (corral_shutdown_cluster(c, keep_head, &told) < 0) {
        fprintf(stderr, "corral stop: %s\n", corral_errmsg(c));
        corral_disconnect(c);
        return CLI_FAIL;
    }
    corral_disconnect(c);
    printf("corral: told %u agent(s) of %s to stop%s\n", told, addr,
           keep_head ? "; the head keeps running" : ", and the head");
    if (keep_head)
        return CLI_OK;
    /* the head goes once its workers have: wait until it no longer answers */
    int64_t deadline = cr_mono_ms() + START_TIMEOUT_MS;
    while (cr_mono_ms() < deadline) {
        if (corral_connect(addr, token_file, &c, NULL) < 0) {
            printf("corral: head %s stopped\n", addr);
            return CLI_OK;
        }
        corral_disconnect(c);
        usleep(100000);
    }
    fprintf(stderr, "corral stop: the head at %s is still running\n", addr);
    return CLI_FAIL;
}

/* corrald beside this corral (the build tree, an install's bin/), else
 * $CORRAL_DAEMON, else the PATH. */
static char *find_corrald(void)
{
    const char *env = getenv("CORRAL_DAEMON");
    if (env && env[0])
        return cr_strdup(env);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            char *p = cr_asprintf("%s/corrald", self);
            if (access(p, X_OK) == 0)
                return p;
            free(p);
        }
    }
    return cr_strdup("corrald");
}

/* The pid in corrald.pid of the session session_latest names, once the
 * home and the link are checked (base/trust.c); 0 when there is none. */
static int session_pid(void)
{
    char home[4096], dir[4096], why[1024];
    if (cr_home_path(home, sizeof(home)) < 0 ||
        cr_session_latest(home, dir, sizeof(dir), why, sizeof(why)) < 0)
        return 0;
    char *path = cr_asprintf("%s/corrald.pid", dir), *text = NULL;
    int pid = 0;
    if (cr_read_private(path, &text, NULL, why, sizeof(why)) == 0 && sscanf(text, "%d", &pid) != 1)
        pid = 0;
    free(text);
    free(path);
    return pid;
}

/* What the daemon said at start that its user must see (warnings, a
 * session taken over), relayed to stderr. */
static void relay(const cr_buf_t *said)
{
    for (const char *l = said->s; l && *l;) {
        const char *nl = strchr(l, '\n');
        size_t n = nl ? (size_t)(nl - l + 1) : strlen(l);
        if (memmem(l, n, "warning", 7) || memmem(l, n, "took over", 9))
            fwrite(l, 1, n, stderr);
        l += n;
    }
}

/* Whether pid still runs; a zombie does not (the container's init may
 * never reap the head it inherited). */
static bool alive(int pid)
{
    if (kill(pid, 0) < 0)
        return false;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return !(rp && rp[1] == ' ' && rp[2] == 'Z');
}

/* Whether a TCP connection to HOST:PORT opens within a few seconds: 0, or
 * the reason in why ("Connection refused"), so that a join that cannot
 * work fails here, at once, with nothing started. */
static int reach(const char *address, char *why, size_t size)
{
    const char *colon = strrchr(address, ':');
    if (!colon || colon == address || !colon[1]) {
        snprintf(why, size, "expected HOST:PORT, got '%s'", address);
        return -EINVAL;
    }
    char host[256];
    snprintf(host, sizeof(host), "%.*s", (int)(colon - address), address);
    /* a numeric address first: it needs no name service (a static corral
     * has files and DNS only, docs/install.md) */
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai = NULL;
    int g = getaddrinfo(host, colon + 1, &hints, &ai);
    if (g == EAI_NONAME) {
        hints.ai_flags = 0;
        g = getaddrinfo(host, colon + 1, &hints, &ai);
    }
    if (g) {
        snprintf(why, size, "%s: %s", address, gai_strerror(g));
        return -EINVAL;
    }
    int err = -ECONNREFUSED;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        err = -errno;
    } else if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        err = 0;
    } else if (errno != EINPROGRESS) {
        err = -errno;
    } else {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (poll(&p, 1, 5000) != 1)
            err = -ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
            err = -errno;
        else
            err = -soerr;
    }
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    if (err)
        snprintf(why, size, "cannot reach the head at %s: %s", address, strerror(-err));
    return err;
}

/* Ends a daemon this command started that did not come up: SIGTERM, then
 * SIGKILL after a grace; reaped (it is our child). */
static void end_child(pid_t pid)
{
    kill(pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* The options corrald takes as they are: passed on. */
typedef struct passed {
    const char *args[80];
    char names[32][24];
    int na, nn;
} passed_t;

/* The head's line about its open-file limit, when it said one before
 * answering (head/server.c raise_nofile), passed on to the user. */
static void print_limit_note(const char *said)
{
    const char *at = said ? strstr(said, "corrald: open-file limit") : NULL;
    if (at)
        printf("corral: %.*s\n", (int)strcspn(at + 9, "\n"), at + 9);
}

static int opt_pass(void *dst, const char *name, const char *arg)
{
    passed_t *p = dst;
    if (p->na + 4 >= (int)CR_ARRAY_SIZE(p->args) || p->nn == (int)CR_ARRAY_SIZE(p->names))
        return 0;
    snprintf(p->names[p->nn], sizeof(p->names[p->nn]), "--%s", name);
    p->args[p->na++] = p->names[p->nn++];
    p->args[p->na++] = arg;
    return 0;
}

int cli_start(int argc, char **argv)
{
    passed_t p = {.na = 1};
    bool head = false, block = false, tls = false, no_tls = false;
    const char *address = NULL;
    const cli_opt_t opts[] = {
        CLI_FLAG("head", &head),
        CLI_CALL("hw-spec", opt_pass, &p),
        CLI_CALL("resources", opt_pass, &p),
        CLI_CALL("labels", opt_pass, &p),
        CLI_CALL("port", opt_pass, &p),
        CLI_STR("address", &address),
        CLI_CALL("token-file", opt_pass, &p),
        CLI_CALL("node-ip", opt_pass, &p),
        CLI_CALL("node-id", opt_pass, &p),
        CLI_CALL("listen", opt_pass, &p),
        CLI_CALL("heartbeat-ms", opt_pass, &p),
        CLI_CALL("suspect-after-ms", opt_pass, &p),
        CLI_CALL("dead-after-ms", opt_pass, &p),
        CLI_CALL("keep-finished-jobs", opt_pass, &p),
        CLI_CALL("keep-finished-for", opt_pass, &p),
        CLI_CALL("keep-events", opt_pass, &p),
        CLI_CALL("max-frame", opt_pass, &p),
        CLI_CALL("log-file", opt_pass, &p),
        CLI_CALL("dashboard-port", opt_pass, &p),
        CLI_CALL("dashboard-host", opt_pass, &p),
        CLI_CALL("metrics-port", opt_pass, &p),
        CLI_CALL("metrics-host", opt_pass, &p),
        CLI_CALL("worker-log-max", opt_pass, &p),
        CLI_FLAG("block", &block),
        CLI_FLAG("tls", &tls),
        CLI_FLAG("no-tls", &no_tls),
        CLI_CALL("tls-cert", opt_pass, &p),
        CLI_CALL("tls-key", opt_pass, &p),
        CLI_CALL("tls-fingerprint", opt_pass, &p),
        CLI_CALL("tls-ca", opt_pass, &p),
        CLI_END,
    };
    int first = cli_parse_opts("corral start", opts, argc, argv, start_usage, NULL, false);
    if (first < 0)
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    const char **args = p.args;
    int na = p.na;
    if (head == !!address || first < argc) {
        fprintf(stderr, "corral start: %s\n%s",
                first < argc ? "unexpected arguments"
                : head       ? "--head and --address exclude each other"
                             : "give --head (start a head) or --address HEAD:PORT (join one)",
                start_usage);
        return CLI_USAGE;
    }
    if (tls || no_tls)
        args[na++] = tls ? "--tls" : "--no-tls";
    if (address) {
        args[na++] = "--address";
        args[na++] = address;
    } else {
        args[na++] = "--head";
    }
    args[na] = NULL;

    char unreachable[320] = "";
    int reach_err = address ? reach(address, unreachable, sizeof(unreachable)) : 0;
    /* a refusal or a bad address is final; a timeout may be a link still
     * coming up: then the agent tries, within START_TIMEOUT_MS */
    if (reach_err == -ECONNREFUSED || reach_err == -EINVAL) {
        fprintf(stderr,
                "corral start: %s; nothing was started (is the head running? 'corral start "
                "--head' on it prints the command to join)\n",
                unreachable);
        return CLI_FAIL;
    }
    corral_t *c = NULL;
    int old = address ? 0 : session_pid();
    if (old > 0 && alive(old) && corral_connect(NULL, NULL, &c, NULL) == 0) {
        corral_disconnect(c);
        fprintf(stderr, "corral start: a head is already running (pid %d); 'corral stop' first\n",
                session_pid());
        return CLI_FAIL;
    }
    char *daemon = find_corrald();
    args[0] = daemon;
    if (block) {
        execvp(daemon, (char **)args);
        fprintf(stderr, "corral start: cannot run %s: %s\n", daemon, strerror(errno));
        free(daemon);
        return CLI_FAIL;
    }

    /* the daemon's stderr comes back through a pipe until it answers, so
     * that a failure at start is shown here */
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        fprintf(stderr, "corral start: pipe: %s\n", strerror(errno));
        free(daemon);
        return CLI_FAIL;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "corral start: fork: %s\n", strerror(errno));
        free(daemon);
        return CLI_FAIL;
    }
    if (pid == 0) {
        setsid();
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(pfd[1], 2);
        execvp(daemon, (char **)args);
        fprintf(stderr, "cannot run %s: %s\n", daemon, strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    int rc = CLI_FAIL, status;
    int64_t deadline = cr_mono_ms() + START_TIMEOUT_MS;
    char *why = NULL;
    cr_buf_t said = {0};
    while (cr_mono_ms() < deadline) {
        char buf[1024];
        ssize_t n;
        while ((n = read(pfd[0], buf, sizeof(buf))) > 0)
            cr_buf_append(&said, buf, (size_t)n);
        if (address) { /* an agent: until it says it has registered */
            if (said.s && strstr(said.s, "registered with the head")) {
                relay(&said);
                printf("corral: agent started (pid %d), joined %s\n", (int)pid, address);
                const char *m = strstr(said.s, "corrald: metrics on ");
                if (m)
                    printf("corral: %.*s\n", (int)strcspn(m + 9, "\n"), m + 9);
                /* off loopback it is HTTPS with the agent's certificate (agent/join.c) */
                const char *mc = strstr(said.s, "corrald: metrics certificate ");
                if (mc) {
                    mc += 29;
                    int fl = (int)strcspn(mc, " \n");
                    const char *in = strstr(mc, " in ");
                    int il = in ? (int)strcspn(in + 4, "\n") : 0;
                    printf("corral: the metrics are HTTPS with the certificate %.*s; trust it "
                           "with curl --cacert %.*s (Prometheus: tls_config ca_file)\n",
                           fl, mc, il, in ? in + 4 : "");
                }
                rc = CLI_OK;
                goto out;
            }
        }
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "corral start: corrald exited at start (%s %d):\n",
                    WIFEXITED(status) ? "code" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            if (said.len)
                fwrite(said.s, 1, said.len, stderr);
            while ((n = read(pfd[0], buf, sizeof(buf))) > 0)
                fwrite(buf, 1, (size_t)n, stderr);
            goto out;
        }
        if (!address && session_pid() == pid) {
            free(why);
            why = NULL;
            if (corral_connect(NULL, NULL, &c, &why) == 0) {
                corral_status_t st;
                if (corral_status(c, &st) == 0) {
                    char home[4096] = "?";
                    cr_home_path(home, sizeof(home));
                    while ((n = read(pfd[0], buf, sizeof(buf))) > 0)
                        cr_buf_append(&said, buf, (size_t)n);
                    relay(&said);
                    /* corrald said what it really listens on (0.0.0.0:PORT
                     * for --listen 0.0.0.0); the address is where this
                     * machine reaches it */
                    const char *on = said.s ? strstr(said.s, "corrald: listening on ") : NULL;
                    int onlen = on ? (int)strcspn(on + 22, "\n") : 0;
                    printf("corral: head started (pid %d) on %s, session %s/session_latest, "
                           "address %s%s%.*s\n",
                           (int)pid, st.nnodes ? st.nodes[0].node_id : "?", home, st.head_address,
                           on ? ", listening on " : "", onlen, on ? on + 22 : "");
                    print_limit_note(said.s);
                    char *url = NULL;
                    if (cli_dashboard_url(&url, true) == 0) {
                        char *q = strchr(url, '?');
                        printf("corral: dashboard and API on %.*s ('corral dashboard' prints "
                               "the login URL)\n",
                               q ? (int)(q - url) : (int)strlen(url), url);
                        free(url);
                        /* off loopback it is HTTPS with the head's certificate (head/web.c) */
                        const char *dc =
                            said.s ? strstr(said.s, "corrald: dashboard certificate ") : NULL;
                        if (dc) {
                            dc += 31;
                            int fl = (int)strcspn(dc, " \n");
                            const char *in = strstr(dc, " in ");
                            int il = in ? (int)strcspn(in + 4, "\n") : 0;
                            printf("corral: the dashboard is HTTPS with the certificate %.*s; "
                                   "trust it with curl --cacert %.*s (Prometheus: ca_file), or "
                                   "check that fingerprint in the browser\n",
                                   fl, dc, il, in ? in + 4 : "");
                        }
                    } else if (said.s && strstr(said.s, "corrald: no dashboard")) {
                        printf("corral: no dashboard: the port was taken (--dashboard-port)\n");
                    }
                    /* the certificate agents pin (head/session.c session_tls) */
                    const char *fp = said.s ? strstr(said.s, "on TCP, certificate sha256:") : NULL;
                    int fplen = fp ? (int)strcspn(fp + 20, "\n") : 0;
                    printf("corral: to join an agent to it:\n  corral start --address %s "
                           "--token-file %s/session_latest/token%s%.*s\n",
                           st.head_address, home, fp ? " --tls-fingerprint " : "", fplen,
                           fp ? fp + 20 : "");
                    corral_status_free(&st);
                    rc = CLI_OK;
                }
                corral_disconnect(c);
                if (rc == CLI_OK)
                    goto out;
            }
        }
        usleep(20000);
    }
    fprintf(stderr, "corral start: corrald (pid %d) did not answer within %d s%s%s; stopped it\n",
            (int)pid, START_TIMEOUT_MS / 1000,
            why              ? ": "
            : unreachable[0] ? ": "
                             : "",
            why ? why : unreachable);
    if (said.len)
        fwrite(said.s, 1, said.len, stderr);
    end_child(pid); /* nothing left running after a failed start */
out:
    cr_buf_free(&said);
    free(why);
    close(pfd[0]);
    free(daemon);
    return rc;
}

/* The pid in a daemon's pid file, when the file and the process are
 * provably ours: a regular file (not a link) owned by us in a directory
 * owned by us, and a live process of our uid whose executable is corrald.
 * 0 otherwise: a pid is never signalled on a file's word alone. */
static int verified_pid(const char *dir)
{
    struct stat ds, fs;
    if (lstat(dir, &ds) < 0 || !S_ISDIR(ds.st_mode) || ds.st_uid != getuid())
        return 0;
    char *path = cr_asprintf("%s/corrald.pid", dir);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    free(path);
    if (fd < 0)
        return 0;
    char buf[32] = "";
    ssize_t n = fstat(fd, &fs) == 0 && S_ISREG(fs.st_mode) && fs.st_uid == getuid()
                    ? read(fd, buf, sizeof(buf) - 1)
                    : -1;
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    if (pid <= 1 || pid > 4194304 || (*end && *end != '\n') || !alive((int)pid))
        return 0;
    char proc[64], exe[4096];
    struct stat ps;
    snprintf(proc, sizeof(proc), "/proc/%ld", pid);
    if (stat(proc, &ps) < 0 || ps.st_uid != getuid())
        return 0;
    snprintf(proc, sizeof(proc), "/proc/%ld/exe", pid);
    ssize_t k = readlink(proc, exe, sizeof(exe) - 1);
    if (k <= 0)
        return 0;
    exe[k] = '\0';
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    return strncmp(base, "corrald", 7) == 0 ? (int)pid : 0;
}

/* Waits up to timeout_ms for pid to be gone. */
static bool gone_within(int pid, int64_t timeout_ms)
{
    int64_t deadline = cr_mono_ms() + timeout_ms;
    while (alive(pid) && cr_mono_ms() < deadline) {
        waitpid(pid, NULL, WNOHANG); /* when it is our own child (tests) */
        usleep(10000);
    }
    return !alive(pid);
}

int cli_stop(int argc, char **argv)
{
    const char *head_addr = NULL, *token_file = NULL;
    bool keep_head = false;
    const cli_opt_t opts[] = {
        CLI_STR("address", &head_addr),
        CLI_STR("token-file", &token_file),
        CLI_FLAG("keep-head", &keep_head),
        CLI_END,
    };
    int first = cli_parse_opts("corral stop", opts, argc, argv, stop_usage, NULL, false);
    if (first < 0)
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (first < argc) {
        fprintf(stderr, "corral stop: unexpected argument '%s'\n%s", argv[first], stop_usage);
        return CLI_USAGE;
    }
    if ((keep_head || token_file) && !head_addr) {
        fprintf(stderr, "corral stop: --keep-head and --token-file go with --address\n%s",
                stop_usage);
        return CLI_USAGE;
    }
    if (head_addr)
        return stop_cluster(head_addr, token_file, keep_head);
    /* inside a worker (its job credential, no token file given): only the
     * head is asked, which refuses a job credential a shutdown; nothing is
     * signalled by pid */
    const char *jt = getenv("CORRAL_JOB_TOKEN"), *tf = getenv("CORRAL_TOKEN_FILE");
    if (jt && jt[0] && !(tf && tf[0])) {
        corral_t *c;
        char *msg = NULL;
        if (corral_connect(NULL, NULL, &c, &msg) < 0) {
            fprintf(stderr, "corral stop: %s\n", msg ? msg : "cannot reach the head");
            free(msg);
            return CLI_FAIL;
        }
        int err = corral_shutdown(c);
        if (err < 0)
            fprintf(stderr, "corral stop: %s\n", corral_errmsg(c));
        corral_disconnect(c);
        return err < 0 ? CLI_FAIL : CLI_OK;
    }
    const char *home = cr_corral_home();
    if (!home)
        return CLI_FAIL;
    int stopped = 0, rc = CLI_OK;
    /* the head: asked through its socket (it stops its workers first), else
     * signalled by its verified pid */
    char *sdir = cr_asprintf("%s/session_latest", home);
    char real[4096];
    int pid = realpath(sdir, real) ? verified_pid(real) : 0;
    free(sdir);
    corral_t *c;
    char *sock = cr_asprintf("%s/session_latest/corrald.sock", home);
    struct stat ss;
    const char *addr = getenv("CORRAL_ADDRESS");
    bool try = (addr && addr[0]) || stat(sock, &ss) == 0; /* else no warning to say */
    free(sock);
    if (try && corral_connect(NULL, NULL, &c, NULL) == 0) {
        if (!pid)
            pid = session_pid();
        if (corral_shutdown(c) < 0) {
            fprintf(stderr, "corral stop: %s\n", corral_errmsg(c));
            rc = CLI_FAIL;
        }
        corral_disconnect(c);
    } else if (pid) {
        kill(pid, SIGTERM);
    }
    if (pid > 0) {
        if (gone_within(pid, START_TIMEOUT_MS)) {
            printf("corral: head stopped (pid %d)\n", pid);
            stopped++;
        } else {
            fprintf(stderr, "corral stop: the head (pid %d) is still running\n", pid);
            rc = CLI_FAIL;
        }
    }
    /* the agents started on this node: each stops its workers, then exits */
    DIR *d = opendir(home);
    struct {
        int pid;
        char id[64];
    } ag[64];
    int nag = 0;
    for (struct dirent *e; d && (e = readdir(d)) && nag < 64;) {
        if (strncmp(e->d_name, "agent_", 6))
            continue;
        char *dir = cr_asprintf("%s/%s", home, e->d_name);
        int apid = verified_pid(dir);
        free(dir);
        if (apid > 0 && kill(apid, SIGTERM) == 0) {
            ag[nag].pid = apid;
            snprintf(ag[nag].id, sizeof(ag[nag].id), "%s", e->d_name + 6);
            nag++;
        }
    }
    if (d)
        closedir(d);
    for (int i = 0; i < nag; i++) {
        if (gone_within(ag[i].pid, START_TIMEOUT_MS)) {
            printf("corral: agent %s stopped (pid %d)\n", ag[i].id, ag[i].pid);
            stopped++;
        } else {
            fprintf(stderr, "corral stop: agent %s (pid %d) is still running\n", ag[i].id,
                    ag[i].pid);
            rc = CLI_FAIL;
        }
    }
    if (!stopped && rc == CLI_OK)
        printf("corral: nothing was running (CORRAL_HOME %s)\n", home);
    return rc;
}
