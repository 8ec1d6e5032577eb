/* corral: the command line entry point. */
#include "cli.h"
#include <stdio.h>
#include <unistd.h>

/* A command of another executable beside this corral (the build tree, an
 * install's bin/), else the path in the environment variable env, else
 * the PATH, run with the same arguments: corral-tools for hw, topo, sim
 * and conformance, corral-serve for serve (cli/tools.c, cli/serve_main.c
 * say why they are apart). */
static int exec_beside(const char *bin, const char *env_name, char **argv)
{
    char self[4096], path[4200];
    const char *env = getenv(env_name);
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char *slash = n > 0 ? (self[n] = '\0', strrchr(self, '/')) : NULL;
    argv[-1] = "corral"; /* argv is main's, shifted by one */
    if (slash) {
        *slash = '\0';
        snprintf(path, sizeof(path), "%s/%s", self, bin);
        if (access(path, X_OK) == 0)
            execv(path, argv - 1);
    }
    if (env && env[0])
        execv(env, argv - 1);
    execvp(bin, argv - 1);
    fprintf(stderr,
            "corral %s: cannot run %s (%s): it should be beside corral; or set %s to its path\n",
            argv[0], bin, strerror(errno), env_name);
    return CLI_FAIL;
}

static int cli_tools(int argc, char **argv)
{
    CR_UNUSED(argc);
    return exec_beside("corral-tools", "CORRAL_TOOLS", argv);
}

static int cli_serve_exec(int argc, char **argv)
{
    CR_UNUSED(argc);
    return exec_beside("corral-serve", "CORRAL_SERVE", argv);
}

/* Whether this corral is linked static (CORRAL_STATIC_EXE in
 * CMakeLists.txt): such an executable has no dynamic section, so the
 * linker leaves this weak reference NULL. */
extern const char _DYNAMIC[] __attribute__((weak));

static bool is_static(void)
{
    return _DYNAMIC == NULL;
}

/* TLS to a head (client/client.c tls_config) loads the TLS shim, a shared
 * object that links libssl, which a static executable cannot load safely
 * (a second libc in the process): corral-dynamic, this CLI linked with
 * the shared libc, does it in its place. A Unix socket never runs TLS,
 * but the address may come from a flag, so the variables alone decide. */
static bool wants_tls(void)
{
    const char *fp = getenv("CORRAL_TLS_FINGERPRINT"), *ca = getenv("CORRAL_TLS_CA");
    return (fp && fp[0]) || (ca && ca[0]);
}

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"hw", cli_tools, "this node's accelerators, host topology and labels"},
    {"topo", cli_tools, "the device-to-device connection matrix and domains"},
    {"sim", cli_tools, "the scheduler on a simulated cluster and workload"},
    {"conformance", cli_tools,
     "this node's accelerators against the vendors' tools, on real hardware"},
    {"start", cli_start, "start a head (corrald) on this machine"},
    {"stop", cli_stop, "stop the head and the agents of this session on this node"},
    {"status", cli_status, "the head, its nodes, devices used and free, pending work"},
    {"nodes", cli_nodes, "the nodes of the cluster"},
    {"run", cli_run, "run a job (a gang of workers) and wait for it"},
    {"job", cli_job, "list jobs, show one, stop one, its output"},
    {"pg", cli_pg, "placement groups: bundles reserved together"},
    {"list", cli_list, "the task runtime's tasks, actors and objects, from their owners"},
    {"train", cli_train, "one worker per device for torch.distributed / JAX, gang restarts"},
    {"events", cli_events, "what happened and why"},
    {"dashboard", cli_dashboard, "the URL of the head's dashboard and API, with its login token"},
    {"serve", cli_serve_exec, "OpenAI-compatible endpoints from replicas placed on the cluster"},
};

static void usage(FILE *fp)
{
    fprintf(fp, "usage: corral COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < CR_ARRAY_SIZE(commands); i++)
        fprintf(fp, "  %-8s %s\n", commands[i].name, commands[i].help);
    fprintf(fp, "\n'corral COMMAND --help' tells more; 'corral --version' the version.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (is_static() && wants_tls())
        return exec_beside("corral-dynamic", "CORRAL_DYNAMIC", argv + 1);
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("corral %s\n", CORRAL_VERSION);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    for (size_t i = 0; i < CR_ARRAY_SIZE(commands); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "corral: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}
