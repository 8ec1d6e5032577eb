/* corral start / corral stop: the head's life cycle (docs/runtime.md). */
#include "cli.h"
#include <corral/corral.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char start_usage[] =
    "usage: corral start --head [--hw-spec FILE] [--resources 'K=V,...'] [--labels 'k=v,...'] "
    "[--port N] [--listen ADDR] [--node-ip IP] [--token-file F] [--heartbeat-ms N] "
    "[--suspect-after-ms N] "
    "[--dead-after-ms N] [--block]\n"
    "       corral start --address HEAD:PORT [--token-file F] [--hw-spec FILE] [--node-ip IP] "
    "[--node-id ID] [--resources ...] [--labels ...] [--block]\n";
static const char stop_usage[] = "usage: corral stop\n";

#define START_TIMEOUT_MS 15000

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

static int session_pid(void)
{
    const char *home = getenv("CORRAL_HOME");
    char *path =
        cr_asprintf("%s/session_latest/corrald.pid", home && home[0] ? home : "/tmp/corral");
    FILE *fp = fopen(path, "r");
    int pid = 0;
    if (fp) {
        if (fscanf(fp, "%d", &pid) != 1)
            pid = 0;
        fclose(fp);
    }
    free(path);
    return pid;
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

int cli_start(int argc, char **argv)
{
    static const struct option opts[] = {
        {"head", no_argument, 0, 'H'},
        {"hw-spec", required_argument, 0, 's'},
        {"resources", required_argument, 0, 'r'},
        {"labels", required_argument, 0, 'l'},
        {"port", required_argument, 0, 'p'},
        {"address", required_argument, 0, 'a'},
        {"token-file", required_argument, 0, 't'},
        {"node-ip", required_argument, 0, 'i'},
        {"node-id", required_argument, 0, 'n'},
        {"listen", required_argument, 0, 'L'},
        {"heartbeat-ms", required_argument, 0, 'B'},
        {"suspect-after-ms", required_argument, 0, 'S'},
        {"dead-after-ms", required_argument, 0, 'X'},
        {"block", no_argument, 0, 'b'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    /* opts' names with their dashes, in the same order */
    static const char *const flags[] = {
        "--head",    "--hw-spec",    "--resources",    "--labels",
        "--port",    "--address",    "--token-file",   "--node-ip",
        "--node-id", "--listen",     "--heartbeat-ms", "--suspect-after-ms",
        "--dead-after-ms", "--block", "--help",
    };
    const char *args[40];
    int na = 1, opt, idx = 0;
    bool head = false, block = false;
    const char *address = NULL;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        switch (opt) {
        case 'H':
            head = true;
            break;
        case 'b':
            block = true;
            break;
        case 'a':
            address = optarg;
            break;
        case 's':
        case 'r':
        case 'l':
        case 'p':
        case 't':
        case 'i':
        case 'n':
        case 'L':
        case 'B':
        case 'S':
        case 'X':
            if (na + 2 >= (int)CR_ARRAY_SIZE(args))
                break;
            args[na++] = flags[idx]; /* corrald takes the same long options */
            args[na++] = optarg;
            break;
        case 'h':
            fputs(start_usage, stdout);
            return CLI_OK;
        default:
            fprintf(stderr, "corral start: unknown or incomplete option '%s'\n%s", argv[optind - 1],
                    start_usage);
            return CLI_USAGE;
        }
    }
    if (head == !!address || optind < argc) {
        fprintf(stderr, "corral start: %s\n%s",
                optind < argc ? "unexpected arguments"
                : head        ? "--head and --address exclude each other"
                              : "give --head (start a head) or --address HEAD:PORT (join one)",
                start_usage);
        return CLI_USAGE;
    }
    if (address) {
        args[na++] = "--address";
        args[na++] = address;
    } else {
        args[na++] = "--head";
    }
    args[na] = NULL;

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
        if (address) { /* an agent: until it says it has registered */
            char buf[1024];
            ssize_t n;
            while ((n = read(pfd[0], buf, sizeof(buf))) > 0)
                cr_buf_append(&said, buf, (size_t)n);
            if (said.s && strstr(said.s, "registered with the head")) {
                printf("corral: agent started (pid %d), joined %s\n", (int)pid, address);
                rc = CLI_OK;
                goto out;
            }
        }
        if (waitpid(pid, &status, WNOHANG) == pid) {
            char buf[4096];
            ssize_t n;
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
                    const char *home = getenv("CORRAL_HOME");
                    printf("corral: head started (pid %d) on %s, session %s/session_latest, "
                           "address %s\n",
                           (int)pid, st.nnodes ? st.nodes[0].node_id : "?",
                           home && home[0] ? home : "/tmp/corral", st.head_address);
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
    fprintf(stderr, "corral start: corrald (pid %d) did not answer within %d s%s%s\n", (int)pid,
            START_TIMEOUT_MS / 1000, why ? ": " : "", why ? why : "");
    if (said.len)
        fwrite(said.s, 1, said.len, stderr);
out:
    cr_buf_free(&said);
    free(why);
    close(pfd[0]);
    free(daemon);
    return rc;
}

int cli_stop(int argc, char **argv)
{
    if (argc > 1) {
        if (strcmp(argv[1], "--help") == 0) {
            fputs(stop_usage, stdout);
            return CLI_OK;
        }
        fprintf(stderr, "corral stop: unexpected argument '%s'\n%s", argv[1], stop_usage);
        return CLI_USAGE;
    }
    corral_t *c;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "corral stop: no head answers: %s\n", why ? why : "?");
        free(why);
        return CLI_FAIL;
    }
    int pid = session_pid();
    int err = corral_shutdown(c);
    if (err < 0) {
        fprintf(stderr, "corral stop: %s\n", corral_errmsg(c));
        corral_disconnect(c);
        return CLI_FAIL;
    }
    corral_disconnect(c);
    /* the head stops its workers first: wait for it to be gone */
    int64_t deadline = cr_mono_ms() + START_TIMEOUT_MS;
    while (pid > 0 && alive(pid) && cr_mono_ms() < deadline) {
        waitpid(pid, NULL, WNOHANG); /* when it is our own child (tests) */
        usleep(10000);
    }
    if (pid > 0 && alive(pid)) {
        fprintf(stderr, "corral stop: the head (pid %d) is still running\n", pid);
        return CLI_FAIL;
    }
    printf("corral: head stopped\n");
    return CLI_OK;
}
