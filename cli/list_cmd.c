/* corral list tasks|actors|objects: what the task runtime's owners hold
 * (docs/actors.md "Listing"), as `ray list` shows it. The head knows the
 * lease jobs (task:SHAPE, actor:CLASS) and, in each one's command, the
 * owner that leased it (--owner NODE|PID|ADDRESS); the owners hold the
 * tables. So: the live lease jobs from the head, their distinct owners,
 * and each owner on this node asked over its Unix socket with the task
 * protocol's INFO kind (task_info.c). An owner on another node is named,
 * not asked: run corral list there. */
#include "cli.h"
#include "task_info.h"
#include <corral/corral.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char list_usage[] =
    "usage: corral list tasks|actors|objects [--job JOB] [--limit N] [--json]\n"
    "\n"
    "What the drivers and workers of the task runtime hold, asked of each owner on this node:\n"
    "  tasks     tasks not yet finished: ID, STATE (PENDING_ARGS_AVAIL, PENDING_NODE_ASSIGNMENT,\n"
    "            RUNNING), FUNCTION, NODE, PID (its worker), LEASE (the worker's job), OWNER\n"
    "  actors    ID, STATE, CLASS, NAME, NODE, PID, RESTARTS, OWNER\n"
    "  objects   ID, STATE, SIZE, WHERE (inline or shm), REFS, TASK (that makes it), OWNER\n"
    "  --job JOB   only those of the driver job JOB (a script run by corral run)\n"
    "  --limit N   at most N rows (100; up to 10000)\n"
    "  --json      one JSON array, each item with its owner\n";

#define MAX_OWNERS 1024
#define IO_TIMEOUT_MS 5000

typedef struct owner {
    char *id; /* NODE|PID|ADDRESS */
    char *node;
    int pid;
    char *unix_path; /* NULL: no Unix address */
} owner_t;

/* "node|pid|unix:PATH;tcp:H:P" -> its parts; false when it is not one */
static bool parse_owner(const char *s, owner_t *o)
{
    const char *a = strchr(s, '|'), *b = a ? strchr(a + 1, '|') : NULL;
    if (!a || !b || a == s)
        return false;
    char *end;
    long pid = strtol(a + 1, &end, 10);
    if (end != b || pid <= 0 || pid > 1 << 30)
        return false;
    *o = (owner_t){.id = cr_strdup(s), .node = cr_strndup(s, (size_t)(a - s)), .pid = (int)pid};
    for (const char *p = b + 1; *p;) {
        const char *e = strchrnul(p, ';');
        if (!strncmp(p, "unix:", 5) && e - p > 5 && !o->unix_path)
            o->unix_path = cr_strndup(p + 5, (size_t)(e - p - 5));
        p = *e ? e + 1 : e;
    }
    return true;
}

/* The --owner word of a lease job's command, NULL when none. */
static const char *owner_word(const char *cmd, char *buf, size_t size)
{
    const char *p = cmd ? strstr(cmd, " --owner ") : NULL;
    if (!p)
        return NULL;
    p += 9;
    size_t n = strcspn(p, " ");
    if (n == 0 || n >= size)
        return NULL;
    memcpy(buf, p, n);
    buf[n] = 0;
    return buf;
}

static bool is_lease(const char *name)
{
    return name && (!strncmp(name, "task:", 5) || !strncmp(name, "actor:", 6));
}

/* Each live lease job (PENDING, PLACING, RUNNING; its status, with its
 * command) and the owner word its command names (NULL when it names none),
 * handed to fn, over every page of the head's listing; fn returns false
 * to stop. 0, or -1 when the head could not be asked (corral_errmsg). */
static int each_lease(corral_t *c, bool (*fn)(void *arg, const corral_job_t *j, const char *owner),
                      void *arg)
{
    static const corral_job_state_t live[] = {CORRAL_JOB_PENDING, CORRAL_JOB_PLACING,
                                              CORRAL_JOB_RUNNING};
    char *token = NULL;
    bool more = true;
    do {
        corral_page_t page = {.limit = 0, .continue_token = token};
        corral_job_t *v = NULL;
        size_t n = 0;
        int rc = corral_job_list_page(c, live, 3, &page, &v, &n);
        free(token);
        token = NULL;
        if (rc < 0)
            return -1;
        for (size_t i = 0; i < n && more; i++) {
            corral_job_t j = {0};
            char word[4096];
            if (!is_lease(v[i].name) || corral_job_status(c, v[i].job_id, &j) < 0)
                continue;
            more = fn(arg, &j, owner_word(j.command, word, sizeof(word)));
            corral_job_free(&j);
        }
        corral_job_list_free(v, n);
        token = page.next_token;
    } while (token && more);
    free(token);
    return 0;
}

typedef struct owners {
    owner_t *v;
    size_t n, max;
} owners_t;

static bool add_owner(void *arg, const corral_job_t *j, const char *w)
{
    owners_t *o = arg;
    bool seen = false;
    for (size_t k = 0; w && k < o->n && !seen; k++)
        seen = !strcmp(o->v[k].id, w);
    if (w && !seen && o->n < o->max && parse_owner(w, &o->v[o->n]))
        o->n++;
    return true;
}

/* Every live lease job's owner, distinct. Returns the number of owners,
 * -1 on failure (said). */
static int find_owners(corral_t *c, owner_t *own, size_t max)
{
    owners_t o = {.v = own, .max = max};
    if (each_lease(c, add_owner, &o) < 0) {
        fprintf(stderr, "corral list: %s\n", corral_errmsg(c));
        return -1;
    }
    return (int)o.n;
}

static int io_wait(int fd, short ev)
{
    struct pollfd p = {.fd = fd, .events = ev};
    int r = poll(&p, 1, IO_TIMEOUT_MS);
    return r > 0 ? 0 : r == 0 ? -ETIMEDOUT : -errno;
}

static int write_all(int fd, const uint8_t *b, size_t n)
{
    while (n) {
        if (io_wait(fd, POLLOUT) < 0)
            return -1;
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno != EINTR && errno != EAGAIN)
            return -1;
        if (w > 0)
            b += w, n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, uint8_t *b, size_t n)
{
    while (n) {
        if (io_wait(fd, POLLIN) < 0)
            return -1;
        ssize_t r = recv(fd, b, n, 0);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
            return -1;
        if (r > 0)
            b += r, n -= (size_t)r;
    }
    return 0;
}

/* One frame, header included, in *out (malloc'd); its length, -1 on failure. */
static ssize_t read_frame(int fd, uint8_t **out)
{
    uint8_t hdr[4];
    uint32_t rest;
    if (read_all(fd, hdr, 4) < 0 || cli_task_header(hdr, &rest) < 0)
        return -1;
    uint8_t *f = cr_malloc(4 + (size_t)rest);
    memcpy(f, hdr, 4);
    if (read_all(fd, f + 4, rest) < 0 || (f[5] & 1)) { /* no descriptors expected */
        free(f);
        return -1;
    }
    *out = f;
    return (ssize_t)(4 + rest);
}

/* Asks one owner for what (tasks, actors, objects): 0 with *out, or -1
 * with why. The socket must be ours (owner, type) and so must its peer. */
static int ask_owner(const owner_t *o, const char *what, unsigned limit, json_t **out, char *why,
                     size_t whysize)
{
    struct stat st;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (!o->unix_path || strlen(o->unix_path) >= sizeof(sa.sun_path)) {
        snprintf(why, whysize, "no Unix address");
        return -1;
    }
    if (lstat(o->unix_path, &st) < 0 || !S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) {
        snprintf(why, whysize, "not reachable from this node (%s is not our socket here)",
                 o->unix_path);
        return -1;
    }
    strcpy(sa.sun_path, o->unix_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc = -1;
    uint8_t *f = NULL;
    if (fd < 0)
        goto out;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
        snprintf(why, whysize, "connect: %s", strerror(errno));
        goto out_close;
    }
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (io_wait(fd, POLLOUT) < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 ||
        cred.uid != geteuid()) {
        snprintf(why, whysize, "its socket is not served by our user");
        goto out_close;
    }
    char body[256];
    uint8_t frame[CLI_TASK_HDR + 256];
    snprintf(body, sizeof(body), "{\"role\": \"caller\", \"pid\": %d, \"runtime\": \"c\"}",
             getpid());
    size_t n = cli_task_frame(frame, sizeof(frame), CLI_TASK_HELLO, 1, body);
    if (write_all(fd, frame, n) < 0) {
        snprintf(why, whysize, "it closed the connection");
        goto out_close;
    }
    ssize_t len = read_frame(fd, &f);
    if (len < 0 || f[4] != CLI_TASK_WELCOME) {
        snprintf(why, whysize, "no WELCOME");
        goto out_close;
    }
    free(f);
    f = NULL;
    snprintf(body, sizeof(body), "{\"what\": \"%s\", \"limit\": %u}", what, limit);
    n = cli_task_frame(frame, sizeof(frame), CLI_TASK_INFO, 2, body);
    if (write_all(fd, frame, n) < 0 || (len = read_frame(fd, &f)) < 0) {
        snprintf(why, whysize, "no answer to INFO (a runtime without it?)");
        goto out_close;
    }
    rc = cli_task_info_reply(f, (size_t)len, 2, out, why, whysize);
    n = cli_task_frame(frame, sizeof(frame), CLI_TASK_BYE, 3, "");
    (void)write_all(fd, frame, n);
out_close:
    close(fd);
out:
    free(f);
    return rc;
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static long long num(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void print_row(const char *what, json_t *it, const char *owner)
{
    if (!strcmp(what, "tasks"))
        printf("%-18s %-24s %-24s %-12s %-7lld %-6s %s\n", cli_esc(str(it, "id")),
               cli_esc(str(it, "state")), cli_esc(str(it, "function")), cli_esc(str(it, "node")),
               num(it, "pid"), cli_esc(str(it, "job")), owner);
    else if (!strcmp(what, "actors"))
        printf("%-18s %-10s %-20s %-12s %-12s %-7lld %-8lld %s\n", cli_esc(str(it, "id")),
               cli_esc(str(it, "state")), cli_esc(str(it, "class")), cli_esc(str(it, "name")),
               cli_esc(str(it, "node")), num(it, "pid"), num(it, "restarts"), owner);
    else {
        char size[32];
        cli_format_bytes((uint64_t)num(it, "size"), size, sizeof(size));
        printf("%-20s %-8s %-10s %-6s %-5lld %-20s %s\n", cli_esc(str(it, "id")),
               cli_esc(str(it, "state")), size, cli_esc(str(it, "where")), num(it, "refs"),
               cli_esc(str(it, "task")), owner);
    }
}

static void print_header(const char *what)
{
    if (!strcmp(what, "tasks"))
        printf("%-18s %-24s %-24s %-12s %-7s %-6s %s\n", "ID", "STATE", "FUNCTION", "NODE", "PID",
               "LEASE", "OWNER");
    else if (!strcmp(what, "actors"))
        printf("%-18s %-10s %-20s %-12s %-12s %-7s %-8s %s\n", "ID", "STATE", "CLASS", "NAME",
               "NODE", "PID", "RESTARTS", "OWNER");
    else
        printf("%-20s %-8s %-10s %-6s %-5s %-20s %s\n", "ID", "STATE", "SIZE", "WHERE", "REFS",
               "TASK", "OWNER");
}

int cli_list(int argc, char **argv)
{
    bool json = false;
    unsigned limit = 100;
    const char *job = NULL;
    const cli_opt_t opts[] = {CLI_FLAG("json", &json), CLI_UINT("limit", &limit, 1, 10000),
                              CLI_STR("job", &job), CLI_END};
    int first = cli_parse_opts("corral list", opts, argc, argv, list_usage, NULL, false);
    if (first < 0)
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (argc - first != 1 || (strcmp(argv[first], "tasks") && strcmp(argv[first], "actors") &&
                              strcmp(argv[first], "objects"))) {
        fprintf(stderr, "corral list: say what: tasks, actors or objects\n%s", list_usage);
        return CLI_USAGE;
    }
    const char *what = argv[first];
    corral_t *c;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "corral list: %s\n", why ? why : "cannot connect");
        free(why);
        return CLI_FAIL;
    }
    owner_t *own = cr_calloc(MAX_OWNERS, sizeof(*own));
    int n_own = find_owners(c, own, MAX_OWNERS);
    corral_disconnect(c);
    if (n_own < 0) {
        free(own);
        return CLI_FAIL;
    }
    json_t *all = json_array();
    long long total = 0;
    unsigned shown = 0;
    if (!json)
        print_header(what);
    for (int i = 0; i < n_own; i++) {
        json_t *ans = NULL;
        char err[256];
        char oname[96];
        snprintf(oname, sizeof(oname), "%d@%s", own[i].pid, own[i].node);
        if (ask_owner(&own[i], what, limit, &ans, err, sizeof(err)) < 0) {
            fprintf(stderr, "corral list: owner pid %d on node %s: %s\n", own[i].pid,
                    cli_esc(own[i].node), err);
            continue;
        }
        json_t *ow = json_object_get(ans, "owner");
        if (job && strcmp(str(ow, "job"), job)) {
            json_decref(ans);
            continue;
        }
        total += num(ans, "total");
        size_t k;
        json_t *it;
        json_array_foreach(json_object_get(ans, "items"), k, it)
        {
            if (shown >= limit)
                break;
            shown++;
            if (json) {
                json_object_set(it, "owner", ow);
                json_array_append(all, it);
            } else
                print_row(what, it, cli_esc(oname));
        }
        json_decref(ans);
    }
    if (json)
        cli_print_json(all);
    else if (total > shown)
        fprintf(stderr, "corral list: %u of %lld %s shown; --limit N shows more\n", shown, total,
                what);
    json_decref(all);
    for (int i = 0; i < n_own; i++)
        free(own[i].id), free(own[i].node), free(own[i].unix_path);
    free(own);
    return CLI_OK;
}

typedef struct lease_row {
    char *job_id, *name, *node, *owner_node;
    const char *state;
    int pid, owner_pid;
    bool mine;
} lease_row_t;

typedef struct leases {
    const corral_job_t *driver;
    CR__VEC(lease_row_t) rows;
} leases_t;

static bool add_lease(void *arg, const corral_job_t *j, const char *w)
{
    leases_t *L = arg;
    owner_t o;
    if (!strcmp(j->job_id, L->driver->job_id) || !w || !parse_owner(w, &o))
        return true;
    lease_row_t *r = CR_VEC_PUSH(&L->rows);
    /* the head's word first: a child of the job (submitted with its
     * worker's credential: a driver run as a job) */
    *r = (lease_row_t){.mine = j->parent_job && !strcmp(j->parent_job, L->driver->job_id),
                       .job_id = cr_strdup(j->job_id),
                       .name = cr_strdup(j->name),
                       .node = cr_strdup(j->nworkers ? j->workers[0].node_id : ""),
                       .pid = j->nworkers ? j->workers[0].pid : 0,
                       .state = corral_job_state_name(j->state),
                       .owner_node = o.node,
                       .owner_pid = o.pid};
    free(o.id), free(o.unix_path);
    return L->rows.n < 100000;
}

/* The lease jobs (tasks' and actors' workers) that the job's own workers
 * leased, and those leased in turn by them (nested tasks), as a JSON
 * array; NULL when the head cannot be asked. The owner of a lease is
 * matched by node and pid to a worker of the job. */
json_t *cli_job_leases(corral_t *c, const corral_job_t *driver)
{
    leases_t L = {.driver = driver};
    bool failed = each_lease(c, add_lease, &L) < 0;
    /* the job's workers own leases; so do the leases' workers (nested) */
    for (bool grew = true; grew && !failed;) {
        grew = false;
        for (size_t i = 0; i < L.rows.n; i++) {
            lease_row_t *r = &L.rows.v[i];
            bool owned = false;
            for (size_t k = 0; k < driver->nworkers && !owned; k++)
                owned = driver->workers[k].pid == r->owner_pid &&
                        !strcmp(driver->workers[k].node_id, r->owner_node);
            for (size_t k = 0; k < L.rows.n && !owned; k++)
                owned = L.rows.v[k].mine && L.rows.v[k].pid == r->owner_pid &&
                        !strcmp(L.rows.v[k].node, r->owner_node);
            if (owned && !r->mine)
                r->mine = grew = true;
        }
    }
    json_t *out = failed ? NULL : json_array();
    for (size_t i = 0; i < L.rows.n; i++) {
        lease_row_t *r = &L.rows.v[i];
        if (out && r->mine)
            json_array_append_new(out,
                                  json_pack("{s:s,s:s,s:s,s:s,s:i,s:i}", "job_id", r->job_id,
                                            "name", r->name, "state", r->state, "node", r->node,
                                            "pid", r->pid, "owner_pid", r->owner_pid));
        free(r->job_id), free(r->name), free(r->node), free(r->owner_node);
    }
    free(L.rows.v);
    return out;
}
