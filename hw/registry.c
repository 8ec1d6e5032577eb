/* Backend registry: the built-in components, external ones loaded from
 * CORRAL_PLUGIN_PATH, the ABI check that refuses broken components, and
 * the probe runner that keeps a crashing vendor library out of our process. */
#include "hw.h"
#include <dirent.h>
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_COMPONENTS 64

static const cr_accel_component_t *builtins[] = {
    &hw_backend_nvidia, &hw_backend_amd,   &hw_backend_intel, &hw_backend_tpu,
    &hw_backend_neuron, &hw_backend_gaudi, &hw_backend_sim,
};

static const cr_accel_component_t *all[MAX_COMPONENTS];
static size_t nall;
static bool plugins_loaded;

int hw_component_validate(const cr_accel_component_t *c, char *msg, size_t msgsize)
{
    if (c->abi_version != CR_ACCEL_ABI_VERSION) {
        snprintf(msg, msgsize,
                 "ABI version %u, but this corral speaks version %d; rebuild it "
                 "against this corral's <corral/accel.h>",
                 c->abi_version, CR_ACCEL_ABI_VERSION);
        return CR_EABI;
    }
    const char *missing = !c->name || !*c->name           ? "name"
                          : !c->resource || !*c->resource ? "resource"
                          : !c->isolation_vars            ? "isolation_vars"
                          : !c->probe                     ? "probe"
                          : !c->isolate                   ? "isolate"
                                                          : NULL;
    if (missing) {
        snprintf(msg, msgsize, "required member '%s' is missing", missing);
        return CR_EINVAL;
    }
    if (strlen(c->name) >= sizeof(((cr_device_t *)0)->backend)) {
        snprintf(msg, msgsize, "name '%s' is longer than %zu characters", c->name,
                 sizeof(((cr_device_t *)0)->backend) - 1);
        return CR_EINVAL;
    }
    return 0;
}

static int add_component(const cr_accel_component_t *c, const char *origin)
{
    char msg[256];
    int err = hw_component_validate(c, msg, sizeof(msg));
    if (err) {
        cr_warn("backend from %s refused: %s", origin, msg);
        return err;
    }
    for (size_t i = 0; i < nall; i++) {
        if (strcmp(all[i]->name, c->name) == 0) {
            cr_warn("backend '%s' from %s refused: a backend of that name is already loaded",
                    c->name, origin);
            return CR_EEXIST;
        }
    }
    if (nall == MAX_COMPONENTS) {
        cr_warn("backend '%s' from %s refused: more than %d backends", c->name, origin,
                MAX_COMPONENTS);
        return CR_E2BIG;
    }
    /* insertion by priority, highest first, stable */
    size_t pos = nall;
    while (pos > 0 && all[pos - 1]->priority < c->priority) {
        all[pos] = all[pos - 1];
        pos--;
    }
    all[pos] = c;
    nall++;
    return 0;
}

static void ensure_builtins(void)
{
    if (nall)
        return;
    for (size_t i = 0; i < CR_ARRAY_SIZE(builtins); i++)
        add_component(builtins[i], "corral");
}

static void load_plugin_file(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        cr_warn("backend plugin %s not loaded: %s", path, dlerror());
        return;
    }
    const cr_accel_component_t *c = dlsym(h, CR_ACCEL_COMPONENT_SYMBOL);
    if (!c) {
        cr_warn("backend plugin %s refused: it exports no '%s' symbol", path,
                CR_ACCEL_COMPONENT_SYMBOL);
        dlclose(h);
        return;
    }
    if (add_component(c, path) != 0)
        dlclose(h);
    /* a loaded plugin stays mapped for the life of the process */
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

void hw_plugins_load(const cr_hw_env_t *env)
{
    ensure_builtins();
    if (plugins_loaded)
        return;
    plugins_loaded = true;
    const char *pp = cr_hw_getenv(env, "CORRAL_PLUGIN_PATH");
    if (!pp || !*pp)
        return;
    char *copy = cr_strdup(pp), *save = NULL;
    for (char *tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
        struct stat st;
        if (stat(tok, &st) != 0) {
            cr_warn("CORRAL_PLUGIN_PATH entry %s does not exist; skipped", tok);
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            load_plugin_file(tok);
            continue;
        }
        char **names;
        size_t n;
        /* a relative entry is relative to the working directory */
        int lerr = cr_list_dir(tok[0] == '/' ? "/" : ".", tok, &names, &n);
        if (lerr != 0) {
            cr_warn("CORRAL_PLUGIN_PATH entry %s cannot be listed: %s; skipped", tok,
                    cr_strerror(lerr));
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            if (!ends_with(names[i], ".so"))
                continue;
            char *full = cr_asprintf("%s/%s", tok, names[i]);
            load_plugin_file(full);
            free(full);
        }
        cr_free_strv(names, n);
    }
    free(copy);
}

size_t hw_components(const cr_accel_component_t *const **out)
{
    ensure_builtins();
    *out = all;
    return nall;
}

const cr_accel_component_t *hw_component_find(const char *name)
{
    ensure_builtins();
    for (size_t i = 0; i < nall; i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}

/* ---- probing, optionally in a child process ---- */

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The child's probe must finish in this time (CORRAL_PROBE_TIMEOUT_MS
 * overrides it); a hung vendor library is treated like a crashed one. */
#define PROBE_TIMEOUT_MS 20000

static int probe_timeout_ms(const cr_hw_env_t *env)
{
    const char *s = cr_hw_getenv(env, "CORRAL_PROBE_TIMEOUT_MS");
    int64_t v;
    if (s && cr_parse_i64(s, 10, &v) == 0 && v > 0 && v <= 600000)
        return (int)v;
    return PROBE_TIMEOUT_MS;
}

static int probe_in_child(const cr_accel_component_t *c, const cr_hw_env_t *env, cr_node_t **out,
                          char *why, size_t whysize)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -errno;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = -errno;
        close(fds[0]);
        close(fds[1]);
        return e;
    }
    if (pid == 0) {
        /* a crash in the vendor library must kill this child plainly, not
         * run handlers the parent installed (test runners, sanitizers) */
        static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
        for (size_t i = 0; i < CR_ARRAY_SIZE(crash_signals); i++)
            signal(crash_signals[i], SIG_DFL);
        close(fds[0]);
        cr_node_t *n = hw_node_new();
        int err = c->probe(env, n);
        char head[32];
        snprintf(head, sizeof(head), "%d\n", err);
        write_all(fds[1], head, strlen(head));
        if (err == 0) {
            json_t *j = hw_node_to_json(n);
            char *s = json_dumps(j, JSON_COMPACT);
            if (s)
                write_all(fds[1], s, strlen(s));
        }
        _exit(0);
    }
    close(fds[1]);
    int timeout = probe_timeout_ms(env);
    cr_buf_t b = {0};
    cr_buf_append(&b, "", 0);
    int err = 0;
    for (;;) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int r = poll(&p, 1, timeout);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            kill(pid, SIGKILL);
            err = CR_ECRASH;
            snprintf(why, whysize, "its probe did not finish in %d ms and was killed", timeout);
            break;
        }
        char tmp[8192];
        ssize_t n = read(fds[0], tmp, sizeof(tmp));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        cr_buf_append(&b, tmp, (size_t)n);
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!err && WIFSIGNALED(status)) {
        snprintf(why, whysize, "it crashed during its probe (signal %d: %s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
        err = CR_ECRASH;
    }
    char *nl = err ? NULL : strchr(b.s, '\n');
    if (!err && !nl) {
        snprintf(why, whysize, "it died during its probe without an answer (exit status %d)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        err = CR_ECRASH;
    }
    if (!err) {
        *nl = '\0';
        int64_t perr;
        if (cr_parse_i64(b.s, 10, &perr) != 0) {
            snprintf(why, whysize, "its probe's answer was unreadable");
            err = CR_ECRASH;
        } else if (perr != 0) {
            err = (int)perr;
            snprintf(why, whysize, "%s", cr_strerror(err));
        }
    }
    if (!err) {
        json_error_t je;
        json_t *j = json_loads(nl + 1, 0, &je);
        cr_node_t *n = hw_node_new();
        hw_json_error_t he;
        if (!j || hw_node_from_json(j, n, &he) != 0) {
            snprintf(why, whysize, "its probe's answer was unreadable (%s: %s)", he.path, he.msg);
            hw_node_free(n);
            err = CR_ECRASH;
        } else {
            *out = n;
        }
        json_decref(j);
    }
    cr_buf_free(&b);
    return err;
}

/* Built-in backends whose probe has a cheap check of whether there is
 * anything to find (one row per backend). */
static const struct {
    const cr_accel_component_t *c;
    bool (*present)(const cr_hw_env_t *env);
} presence[] = {
    {&hw_backend_nvidia, hw_nvidia_present},
};

int hw_probe_component(const cr_accel_component_t *c, const cr_hw_env_t *env, cr_node_t **out,
                       char *why, size_t whysize)
{
    *out = NULL;
    if (whysize)
        why[0] = '\0';
    /* a built-in backend's cheap presence check first: nothing there,
     * nothing to probe, no child to fork (issue 18) */
    for (size_t i = 0; i < CR_ARRAY_SIZE(presence); i++)
        if (presence[i].c == c && !presence[i].present(env)) {
            *out = hw_node_new();
            return 0;
        }
    if (c->flags & CR_ACCEL_F_PROBE_ISOLATED)
        return probe_in_child(c, env, out, why, whysize);
    cr_node_t *n = hw_node_new();
    int err = c->probe(env, n);
    if (err) {
        /* a failing probe may say why in its last warning */
        snprintf(why, whysize, "%s",
                 n->warnings.n ? n->warnings.v[n->warnings.n - 1] : cr_strerror(err));
        hw_node_free(n);
        return err;
    }
    *out = n;
    return 0;
}
