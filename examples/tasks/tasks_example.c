/* Tasks and actors from C (include/corral/tasks.h): one program that is
 * both the driver and its own workers. Started with CORRAL_TASK_LEASE set
 * (by corral, as a leased worker) it serves its functions and its Counter
 * class; otherwise it is the driver and runs one scenario:
 *
 *   tasks_example demo          functions, refs, objects through memfd, errors, an actor
 *   tasks_example tpu DIR N     N tasks asking TPU=1 at once, each printing its chip
 *   tasks_example retry DIR     a task whose worker is killed -9 runs again
 *   tasks_example restart       an actor killed -9 restarts (max_restarts 1), then dies
 *   tasks_example refargs       refs as arguments, resolved before the task runs
 *   tasks_example nested        a task whose worker submits tasks of its own
 *   tasks_example cancel DIR    corral_cancel of a call queued in the owner, of one queued in
 *                               the worker behind a running one, and of a running one
 *
 * CORRAL_EXAMPLE_TCP=1: workers connect by TCP (the HMAC challenge) even
 * on this host. Built by examples/CMakeLists.txt; run by
 * tests/cluster/tasks_c.sh. */
#include <corral/tasks.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- what the workers run ---- */

static int64_t get_i64(const void *args, size_t len)
{
    int64_t v = 0;
    memcpy(&v, args, len < sizeof(v) ? len : sizeof(v));
    return v;
}

static int square(const void *args, size_t len, corral_result_t *res)
{
    if (len != sizeof(int64_t))
        return corral_result_error(res, "square wants 8 bytes, got %zu", len), 1;
    int64_t x = get_i64(args, len);
    x *= x;
    return corral_result_set(res, &x, sizeof(x));
}

/* the length and a checksum of the arguments (a large object by memfd) */
static int checksum(const void *args, size_t len, corral_result_t *res)
{
    uint64_t sum = 0;
    const uint8_t *p = args;
    for (size_t i = 0; i < len; i++)
        sum = sum * 31 + p[i];
    char out[64];
    int n = snprintf(out, sizeof(out), "%zu:%llu", len, (unsigned long long)sum);
    return corral_result_set(res, out, (size_t)n);
}

/* N bytes of a pattern, N given as 8 bytes (a large result by memfd) */
static int big(const void *args, size_t len, corral_result_t *res)
{
    int64_t n = get_i64(args, len);
    uint8_t *p = corral_result_alloc(res, (size_t)n);
    if (!p)
        return corral_result_error(res, "no buffer of %lld bytes", (long long)n), 1;
    for (int64_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 7);
    return 0;
}

static int fails(const void *args, size_t len, corral_result_t *res)
{
    return corral_result_error(res, "fails was asked to fail (%zu bytes)", len), 1;
}

/* Waits until DIR holds N files, one per task, then returns NODE:CHIPS. */
static int chip(const void *args, size_t len, corral_result_t *res)
{
    char dir[512], path[600];
    int n = 0;
    if (sscanf(args, "%511s %d", dir, &n) != 2 || len >= 512)
        return corral_result_error(res, "chip wants \"DIR N\""), 1;
    const char *c = getenv("TPU_VISIBLE_CHIPS");
    snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%s\n", c ? c : "");
        fclose(f);
    }
    for (int i = 0; i < 600; i++) { /* at most 60 s */
        int k = 0;
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d)))
            k += e->d_name[0] != '.';
        if (d)
            closedir(d);
        if (k >= n)
            break;
        usleep(100000);
    }
    const char *node = getenv("CORRAL_NODE_ID");
    char out[256];
    int k = snprintf(out, sizeof(out), "%s:%s", node ? node : "", c ? c : "");
    return corral_result_set(res, out, (size_t)k);
}

/* The first run writes its pid to DIR/died and waits to be killed; a
 * later run returns "again". */
static int die_once(const void *args, size_t len, corral_result_t *res)
{
    char path[600];
    snprintf(path, sizeof(path), "%.*s/died", (int)len, (const char *)args);
    if (access(path, F_OK) == 0)
        return corral_result_set(res, "again", 5);
    char tmp[620];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return corral_result_error(res, "%s: %s", tmp, strerror(errno)), 1;
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    rename(tmp, path);
    sleep(120);
    return corral_result_error(res, "die_once was not killed"), 1;
}

typedef struct counter {
    int64_t n;
} counter_t;

static int counter_new(const void *args, size_t len, void **state, corral_result_t *res)
{
    counter_t *c = calloc(1, sizeof(*c));
    if (!c)
        return corral_result_error(res, "out of memory"), 1;
    c->n = get_i64(args, len);
    *state = c;
    return 0;
}

static int counter_add(void *state, const void *args, size_t len, corral_result_t *res)
{
    counter_t *c = state;
    c->n += get_i64(args, len);
    return corral_result_set(res, &c->n, sizeof(c->n));
}

static int counter_pid(void *state, const void *args, size_t len, corral_result_t *res)
{
    int64_t pid = getpid();
    return corral_result_set(res, &pid, sizeof(pid));
}

static void counter_free(void *state)
{
    free(state);
}

/* Meeter: meet(N) waits until N calls are inside it at once (at most
 * 30 s) and returns how many were: N only when the actor runs calls on N
 * threads (max_concurrency). */
typedef struct meeter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int64_t inside;
} meeter_t;

static int meeter_new(const void *args, size_t len, void **state, corral_result_t *res)
{
    meeter_t *m = calloc(1, sizeof(*m));
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->cond, NULL);
    *state = m;
    return 0;
}

static int meeter_meet(void *state, const void *args, size_t len, corral_result_t *res)
{
    meeter_t *m = state;
    int64_t n = get_i64(args, len), seen;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&m->lock);
    m->inside++;
    pthread_cond_broadcast(&m->cond);
    while (m->inside < n && pthread_cond_timedwait(&m->cond, &m->lock, &ts) == 0)
        ;
    seen = m->inside;
    pthread_mutex_unlock(&m->lock);
    return corral_result_set(res, &seen, sizeof(seen));
}

static const corral_method_def_t meeter_methods[] = {
    {"meet", meeter_meet},
    {NULL, NULL},
};

/* Gate: files as signals between the driver and its actor. wait(PATH)
 * writes PATH.started, waits (at most 120 s) for PATH to exist, then
 * writes PATH.done; mark(PATH) makes PATH. */
static int path_arg(const void *args, size_t len, char *buf, size_t size, corral_result_t *res)
{
    if (!len || len >= size || memchr(args, 0, len))
        return corral_result_error(res, "the argument is not a path");
    memcpy(buf, args, len);
    buf[len] = 0;
    return 0;
}

static int touch(const char *path)
{
    FILE *f = fopen(path, "w");
    return f ? fclose(f) : -1;
}

static int gate_new(const void *args, size_t len, void **state, corral_result_t *res)
{
    *state = NULL;
    return 0;
}

static int gate_wait(void *state, const void *args, size_t len, corral_result_t *res)
{
    char path[512], aux[600];
    if (path_arg(args, len, path, sizeof(path), res))
        return 1;
    snprintf(aux, sizeof(aux), "%s.started", path);
    touch(aux);
    for (int i = 0; i < 120000 && access(path, F_OK); i++)
        usleep(1000);
    snprintf(aux, sizeof(aux), "%s.done", path);
    touch(aux);
    return corral_result_set(res, "waited", 6);
}

static int gate_mark(void *state, const void *args, size_t len, corral_result_t *res)
{
    char path[512];
    if (path_arg(args, len, path, sizeof(path), res))
        return 1;
    if (touch(path))
        return corral_result_error(res, "%s: %s", path, strerror(errno));
    return corral_result_set(res, "marked", 6);
}

static int mark_fn(const void *args, size_t len, corral_result_t *res)
{
    return gate_mark(NULL, args, len, res);
}

/* argsum: called with ref arguments (corral_task_submit_args): the sum of
 * its items, each an int64 when 8 bytes long, else counted as its length. */
static int argsum(const void *args, size_t len, corral_result_t *res)
{
    const void *p;
    size_t n;
    int64_t sum = 0;
    if (corral_args_get(args, len, 0, &p, &n))
        return corral_result_error(res, "argsum is called with ref arguments");
    for (size_t i = 0; corral_args_get(args, len, i, &p, &n) == 0; i++)
        sum += n == 8 ? get_i64(p, n) : (int64_t)n;
    return corral_result_set(res, &sum, sizeof(sum));
}

/* nested(x): a task that is an owner too: it submits square(x) and
 * square(x + 1) from its worker and returns their sum, with the worker's
 * own credential (its lease job's CORRAL_JOB_TOKEN): the nested leases are
 * children of this task's lease job. */
static int nested(const void *args, size_t len, corral_result_t *res)
{
    int64_t x = get_i64(args, len), y = x + 1, sum = 0;
    corral_tasks_t *t;
    char *why = NULL;
    if (corral_tasks_init(NULL, &t, &why)) {
        corral_result_error(res, "corral_tasks_init in a worker: %s", why);
        free(why);
        return 1;
    }
    corral_ref_t *r[2] = {NULL, NULL};
    int rc = corral_task_submit(t, "square", &x, sizeof(x), NULL, &r[0]);
    if (!rc)
        rc = corral_task_submit(t, "square", &y, sizeof(y), NULL, &r[1]);
    for (int i = 0; i < 2 && !rc; i++) {
        const void *d;
        size_t n;
        rc = corral_get(t, r[i], 120000, &d, &n);
        if (rc)
            corral_result_error(res, "nested square: %s", corral_ref_error(r[i]));
        else
            sum += get_i64(d, n);
    }
    if (rc && !r[0])
        corral_result_error(res, "nested submit: %s", corral_tasks_errmsg());
    corral_ref_free(r[0]);
    corral_ref_free(r[1]);
    corral_tasks_shutdown(t);
    return rc ? 1 : corral_result_set(res, &sum, sizeof(sum));
}

static const corral_method_def_t gate_methods[] = {
    {"wait", gate_wait},
    {"mark", gate_mark},
    {NULL, NULL},
};

static const corral_method_def_t counter_methods[] = {
    {"add", counter_add},
    {"pid", counter_pid},
    {NULL, NULL},
};

/* ---- the driver ---- */

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            printf("ok: ");                                                                        \
        } else {                                                                                   \
            printf("FAIL: ");                                                                      \
            failures++;                                                                            \
        }                                                                                          \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        fflush(stdout);                                                                            \
    } while (0)

static int64_t get_int(corral_tasks_t *t, corral_ref_t *r, int *rc)
{
    const void *d;
    size_t n;
    *rc = corral_get(t, r, 60000, &d, &n);
    return *rc ? 0 : get_i64(d, n);
}

static int demo(corral_tasks_t *t)
{
    int rc;
    /* ten squares at once */
    corral_ref_t *refs[10];
    for (int64_t i = 0; i < 10; i++)
        if (corral_task_submit(t, "square", &i, sizeof(i), NULL, &refs[i]))
            return printf("FAIL: submit: %s\n", corral_tasks_errmsg()), 1;
    int64_t sum = 0;
    for (int i = 0; i < 10; i++) {
        sum += get_int(t, refs[i], &rc);
        if (rc)
            printf("get: %s\n", corral_ref_error(refs[i]));
        corral_ref_free(refs[i]);
    }
    CHECK(sum == 285, "ten squares sum to %lld", (long long)sum);

    /* an object of 4 MiB by memfd, as a task's argument */
    size_t bn = 4u << 20;
    uint8_t *buf = malloc(bn);
    uint64_t want = 0;
    for (size_t i = 0; i < bn; i++) {
        buf[i] = (uint8_t)(i * 13 + 1);
        want = want * 31 + buf[i];
    }
    corral_ref_t *obj, *r;
    if (corral_put(t, buf, bn, &obj))
        return printf("FAIL: put: %s\n", corral_tasks_errmsg()), 1;
    free(buf);
    if (corral_task_submit_ref(t, "checksum", obj, NULL, &r))
        return printf("FAIL: submit_ref: %s\n", corral_tasks_errmsg()), 1;
    const void *d;
    size_t n;
    char expect[64];
    snprintf(expect, sizeof(expect), "%zu:%llu", bn, (unsigned long long)want);
    rc = corral_get(t, r, 60000, &d, &n);
    CHECK(!rc && n == strlen(expect) && !memcmp(d, expect, n),
          "a 4 MiB object reaches the task whole (%.*s)", rc ? 0 : (int)n, rc ? "" : (char *)d);
    corral_ref_free(r);
    corral_ref_free(obj);

    /* a result of 8 MiB (over the inline limit) */
    int64_t big_n = 8 << 20;
    corral_task_submit(t, "big", &big_n, sizeof(big_n), NULL, &r);
    rc = corral_get(t, r, 60000, &d, &n);
    int good = !rc && n == (size_t)big_n;
    for (size_t i = 0; good && i < n; i += 4099)
        good = ((const uint8_t *)d)[i] == (uint8_t)(i * 7);
    CHECK(good, "an 8 MiB result comes back whole (rc %d, %zu bytes)", rc, rc ? 0 : n);
    corral_ref_free(r);
    /* a result larger than a frame (100 MiB): on one node its memfd; from a
     * worker over TCP kept there and fetched in 8 MiB chunks */
    big_n = 100 << 20;
    corral_task_submit(t, "big", &big_n, sizeof(big_n), NULL, &r);
    rc = corral_get(t, r, 120000, &d, &n);
    good = !rc && n == (size_t)big_n;
    for (size_t i = 0; good && i < n; i += 4099)
        good = ((const uint8_t *)d)[i] == (uint8_t)(i * 7);
    good = good && ((const uint8_t *)d)[n - 1] == (uint8_t)((n - 1) * 7);
    CHECK(good, "a 100 MiB result (over the 64 MiB frame) comes back whole (rc %d %s, %zu bytes)",
          rc, rc ? corral_ref_error(r) : "", rc ? 0 : n);
    corral_ref_free(r);

    /* errors: the function's, an unknown function, bad resources */
    corral_task_submit(t, "fails", "x", 1, NULL, &r);
    rc = corral_get(t, r, 60000, NULL, NULL);
    CHECK(rc == CR_ETASKFAILED && strstr(corral_ref_error(r), "asked to fail"),
          "a failing function: %s (%s)", cr_err_name(rc), corral_ref_error(r));
    corral_ref_free(r);
    corral_task_submit(t, "nosuch", NULL, 0, NULL, &r);
    rc = corral_get(t, r, 60000, NULL, NULL);
    CHECK(rc == CR_ENOENT && strstr(corral_ref_error(r), "nosuch"), "an unknown function: %s (%s)",
          cr_err_name(rc), corral_ref_error(r));
    corral_ref_free(r);
    corral_task_opts_t inf = {.resources = "GPU=8", .max_retries = 0};
    corral_task_submit(t, "square", &big_n, sizeof(big_n), &inf, &r);
    rc = corral_get(t, r, 60000, NULL, NULL);
    CHECK(rc == CR_EINFEASIBLE, "a shape no node holds: %s (%s)", cr_err_name(rc),
          corral_ref_error(r));
    corral_ref_free(r);

    /* a worker program that exits before it connects: the calls waiting
     * for it fail with the job's reason instead of waiting for ever */
    const char *false_argv[] = {"/bin/false", NULL};
    corral_tasks_opts_t bad = {.worker_argv = false_argv};
    corral_tasks_t *t2;
    char *why2 = NULL;
    if (corral_tasks_init(&bad, &t2, &why2))
        return printf("FAIL: init: %s\n", why2), 1;
    corral_task_submit(t2, "square", &big_n, sizeof(big_n), NULL, &r);
    rc = corral_get(t2, r, 120000, NULL, NULL);
    CHECK(rc == CR_EWORKERDIED && strstr(corral_ref_error(r), "before it connected"),
          "a worker that never connects: %s (%s)", cr_err_name(rc), corral_ref_error(r));
    corral_ref_free(r);
    corral_tasks_shutdown(t2);

    /* an actor keeps its state; calls run in order */
    corral_actor_t *a;
    int64_t start = 1000;
    corral_actor_opts_t ao = {.name = "demo-counter"};
    if (corral_actor_create(t, "Counter", &start, sizeof(start), &ao, &a))
        return printf("FAIL: actor: %s\n", corral_tasks_errmsg()), 1;
    corral_ref_t *adds[100];
    for (int64_t i = 1; i <= 100; i++)
        corral_actor_call(t, a, "add", &i, sizeof(i), &adds[i - 1]);
    int64_t last = 0, inorder = 1;
    for (int i = 0; i < 100; i++) {
        int64_t v = get_int(t, adds[i], &rc);
        inorder &= !rc && v == 1000 + (int64_t)(i + 1) * (i + 2) / 2;
        last = v;
        corral_ref_free(adds[i]);
    }
    CHECK(inorder && last == 6050, "an actor adds 1..100 in order to 1000: %lld", (long long)last);
    corral_actor_t *dup;
    rc = corral_actor_create(t, "Counter", &start, sizeof(start), &ao, &dup);
    CHECK(rc == CR_EEXIST, "a second actor named demo-counter is refused: %s",
          corral_tasks_errmsg());
    corral_actor_call(t, a, "nosuch", NULL, 0, &r);
    rc = corral_get(t, r, 60000, NULL, NULL);
    CHECK(rc == CR_ENOENT, "an unknown method: %s (%s)", cr_err_name(rc), corral_ref_error(r));
    corral_ref_free(r);
    corral_actor_kill(t, a);
    corral_actor_call(t, a, "add", &start, sizeof(start), &r);
    rc = corral_get(t, r, 60000, NULL, NULL);
    CHECK(rc == CR_EACTORDIED, "a killed actor's call: %s (%s)", cr_err_name(rc),
          corral_ref_error(r));
    corral_ref_free(r);
    corral_actor_free(a);

    /* max_concurrency 4: four calls inside the actor at once */
    corral_actor_opts_t mo = {.max_concurrency = 4};
    if (corral_actor_create(t, "Meeter", NULL, 0, &mo, &a))
        return printf("FAIL: actor: %s\n", corral_tasks_errmsg()), 1;
    corral_ref_t *meets[4];
    int64_t four = 4;
    for (int i = 0; i < 4; i++)
        corral_actor_call(t, a, "meet", &four, sizeof(four), &meets[i]);
    int all = 1;
    for (int i = 0; i < 4; i++) {
        all &= get_int(t, meets[i], &rc) == 4 && !rc;
        corral_ref_free(meets[i]);
    }
    CHECK(all, "an actor with max_concurrency 4 runs 4 calls at once");
    corral_actor_free(a);
    return 0;
}

static int tpu(corral_tasks_t *t, const char *dir, int n)
{
    corral_ref_t **refs = calloc((size_t)n, sizeof(*refs));
    char arg[600];
    snprintf(arg, sizeof(arg), "%s %d", dir, n);
    corral_task_opts_t o = {.resources = "TPU=1", .max_retries = 0};
    for (int i = 0; i < n; i++)
        if (corral_task_submit(t, "chip", arg, strlen(arg) + 1, &o, &refs[i]))
            return printf("FAIL: submit: %s\n", corral_tasks_errmsg()), 1;
    for (int i = 0; i < n; i++) {
        const void *d;
        size_t len;
        int rc = corral_get(t, refs[i], 120000, &d, &len);
        if (rc)
            printf("FAIL: task %d: %s\n", i, corral_ref_error(refs[i])), failures++;
        else
            printf("chip %.*s\n", (int)len, (const char *)d);
        corral_ref_free(refs[i]);
    }
    free(refs);
    return 0;
}

static int read_pid(const char *path)
{
    for (int i = 0; i < 600; i++) {
        FILE *f = fopen(path, "r");
        int pid = 0;
        if (f) {
            if (fscanf(f, "%d", &pid) != 1)
                pid = 0;
            fclose(f);
        }
        if (pid > 0)
            return pid;
        usleep(100000);
    }
    return 0;
}

static int retry(corral_tasks_t *t, const char *dir)
{
    corral_ref_t *r;
    corral_task_opts_t o = {.max_retries = 1};
    corral_task_submit(t, "die_once", dir, strlen(dir), &o, &r);
    char path[600];
    snprintf(path, sizeof(path), "%s/died", dir);
    int pid = read_pid(path);
    CHECK(pid > 0, "the task's first worker runs (pid %d)", pid);
    if (pid > 0)
        kill(pid, SIGKILL); /* our own leased worker: it said so in the file */
    const void *d;
    size_t n;
    int rc = corral_get(t, r, 120000, &d, &n);
    CHECK(!rc && n == 5 && !memcmp(d, "again", 5), "the task ran again on a new worker: %s",
          rc ? corral_ref_error(r) : "again");
    corral_ref_free(r);
    /* no retry left: the next one fails */
    corral_task_opts_t o0 = {.max_retries = 0};
    snprintf(path, sizeof(path), "%s/died", dir);
    unlink(path);
    corral_task_submit(t, "die_once", dir, strlen(dir), &o0, &r);
    pid = read_pid(path);
    if (pid > 0)
        kill(pid, SIGKILL);
    rc = corral_get(t, r, 120000, NULL, NULL);
    CHECK(rc == CR_EWORKERDIED, "without retries it fails: %s (%s)", cr_err_name(rc),
          corral_ref_error(r));
    corral_ref_free(r);
    return 0;
}

/* A task that runs until it is killed (die_once, no retry), held until
 * the driver itself is killed (tests/cluster/tasks_c.sh: a driver's
 * leased workers end with it); 1 if it ever returns. */
static int hold(corral_tasks_t *t, const char *dir)
{
    corral_ref_t *r;
    corral_task_opts_t o = {.max_retries = 0};
    corral_task_submit(t, "die_once", dir, strlen(dir), &o, &r);
    int rc = corral_get(t, r, 300000, NULL, NULL);
    fprintf(stderr, "hold: the task ended: %s\n", rc ? corral_ref_error(r) : "without error");
    corral_ref_free(r);
    return 1;
}

static bool exists(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* An actor call of method with DIR/name as its argument. */
static corral_ref_t *gate_call(corral_tasks_t *t, corral_actor_t *a, const char *method,
                               const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    corral_ref_t *r = NULL;
    corral_actor_call(t, a, method, p, strlen(p), &r);
    return r;
}

static void make(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    touch(p);
}

static int cancel(corral_tasks_t *t, const char *dir)
{
    int rc;
    char p[512];
    /* a task still queued in this owner (its shape's worker is being
     * leased): it never runs */
    corral_task_opts_t o = {.resources = "CPU=2"};
    corral_ref_t *r1, *r2;
    snprintf(p, sizeof(p), "%s/task-cancelled", dir);
    corral_task_submit(t, "mark", p, strlen(p), &o, &r1);
    rc = corral_cancel(t, r1);
    CHECK(rc == 0, "corral_cancel of a queued task: %d", rc);
    rc = corral_get(t, r1, 0, NULL, NULL);
    CHECK(rc == CR_ECANCELLED, "its ref fails at once with CR_ECANCELLED: %s (%s)", cr_err_name(rc),
          corral_ref_error(r1));
    snprintf(p, sizeof(p), "%s/task-after", dir);
    corral_task_submit(t, "mark", p, strlen(p), &o, &r2);
    rc = corral_get(t, r2, 120000, NULL, NULL);
    CHECK(rc == 0, "a task of the same shape after it runs: %s", rc ? corral_ref_error(r2) : "");
    CHECK(!exists(dir, "task-cancelled"), "the cancelled task never ran");
    rc = corral_cancel(t, r2);
    CHECK(rc == 0 && corral_get(t, r2, 0, NULL, NULL) == 0,
          "corral_cancel of a finished task changes nothing");
    corral_ref_free(r1);
    corral_ref_free(r2);

    /* an actor call queued in the worker behind a running one: answered
     * "cancelled" there without running */
    corral_actor_t *a;
    corral_actor_create(t, "Gate", NULL, 0, NULL, &a);
    corral_ref_t *w0 = gate_call(t, a, "mark", dir, "up");
    rc = corral_get(t, w0, 120000, NULL, NULL);
    CHECK(rc == 0, "the Gate actor is up: %s", rc ? corral_ref_error(w0) : "");
    corral_ref_free(w0);
    corral_ref_t *w1 = gate_call(t, a, "wait", dir, "go1");
    corral_ref_t *w2 = gate_call(t, a, "mark", dir, "queued-cancelled");
    /* both are sent; w1 runs (it says so) while w2 waits behind it */
    snprintf(p, sizeof(p), "%s/go1.started", dir);
    for (int i = 0; i < 1200 && access(p, F_OK); i++)
        usleep(100000);
    CHECK(exists(dir, "go1.started"), "the first call runs");
    rc = corral_cancel(t, w2);
    CHECK(rc == 0 && corral_get(t, w2, 0, NULL, NULL) == CR_ECANCELLED,
          "the call queued behind it is cancelled: %s", corral_ref_error(w2));
    make(dir, "go1");
    const void *d;
    size_t n;
    rc = corral_get(t, w1, 120000, &d, &n);
    CHECK(rc == 0 && n == 6 && !memcmp(d, "waited", 6), "the running call finished: %s",
          rc ? corral_ref_error(w1) : "waited");
    corral_ref_t *w3 = gate_call(t, a, "mark", dir, "after");
    rc = corral_get(t, w3, 120000, NULL, NULL);
    CHECK(rc == 0, "a call after them runs: %s", rc ? corral_ref_error(w3) : "");
    CHECK(exists(dir, "after") && !exists(dir, "queued-cancelled"),
          "the cancelled call never ran in the worker");
    corral_ref_free(w1);
    corral_ref_free(w2);
    corral_ref_free(w3);

    /* a running call: not interrupted (C cannot be), its ref fails at
     * once and its result is dropped */
    corral_ref_t *w4 = gate_call(t, a, "wait", dir, "go2");
    snprintf(p, sizeof(p), "%s/go2.started", dir);
    for (int i = 0; i < 1200 && access(p, F_OK); i++)
        usleep(100000);
    CHECK(exists(dir, "go2.started"), "a call runs");
    corral_cancel(t, w4);
    rc = corral_get(t, w4, -1, NULL, NULL);
    CHECK(rc == CR_ECANCELLED && !exists(dir, "go2.done"),
          "cancelled while it runs, its ref fails at once: %s (%s)", cr_err_name(rc),
          corral_ref_error(w4));
    make(dir, "go2");
    corral_ref_t *w5 = gate_call(t, a, "mark", dir, "after2");
    rc = corral_get(t, w5, 120000, NULL, NULL);
    CHECK(rc == 0 && exists(dir, "go2.done"),
          "it ran to its end, and the actor serves the next call: %s",
          rc ? corral_ref_error(w5) : "");
    CHECK(corral_get(t, w4, 0, NULL, NULL) == CR_ECANCELLED,
          "its result, which came after, was dropped");
    corral_ref_free(w4);
    corral_ref_free(w5);
    corral_actor_free(a);
    return 0;
}

static int refargs(corral_tasks_t *t)
{
    int64_t five = 5, base = 1;
    corral_ref_t *sq, *big, *bad, *r;
    int rc;
    corral_task_submit(t, "square", &five, sizeof(five), NULL, &sq);
    size_t bn = 2u << 20;
    char *b = calloc(1, bn);
    corral_put(t, b, bn, &big);
    free(b);
    corral_ref_t *deps[] = {sq, big};
    rc = corral_task_submit_args(t, "argsum", &base, sizeof(base), deps, 2, NULL, &r);
    CHECK(rc == 0, "a task with a pending result and a 2 MiB put as ref arguments is submitted: %s",
          rc ? corral_tasks_errmsg() : "");
    /* the call holds them: the caller's refs may go at once */
    corral_ref_free(sq);
    corral_ref_free(big);
    int64_t v = rc ? 0 : get_int(t, r, &rc);
    CHECK(!rc && v == 1 + 25 + (int64_t)bn,
          "the function got its bytes and both values, resolved: 1 + 25 + %zu = %lld (%s)", bn,
          (long long)v, rc ? corral_ref_error(r) : "");
    corral_ref_free(r);
    corral_task_submit(t, "fails", "x", 1, NULL, &bad);
    rc = corral_task_submit_args(t, "argsum", &base, sizeof(base), &bad, 1, NULL, &r);
    rc = rc ? rc : corral_get(t, r, 120000, NULL, NULL);
    CHECK(rc == CR_ETASKFAILED && strstr(corral_ref_error(r), "ref argument 1 failed"),
          "a failed ref argument fails the task without running it: %s (%s)", cr_err_name(rc),
          corral_ref_error(r));
    corral_ref_free(bad);
    corral_ref_free(r);
    rc = corral_task_submit_args(t, "argsum", NULL, 0, NULL, 0, NULL, &r);
    CHECK(rc == CR_EINVAL, "no refs: CR_EINVAL (%s)", corral_tasks_errmsg());
    return 0;
}

static int nested_demo(corral_tasks_t *t)
{
    int64_t x = 3;
    corral_ref_t *r;
    int rc = corral_task_submit(t, "nested", &x, sizeof(x), NULL, &r);
    int64_t v = rc ? 0 : get_int(t, r, &rc);
    CHECK(!rc && v == 9 + 16,
          "a task that submits two tasks from its worker gets 9 + 16: %lld (%s)", (long long)v,
          rc ? corral_ref_error(r) : "");
    corral_ref_free(r);
    return 0;
}

static int restart(corral_tasks_t *t)
{
    corral_actor_t *a;
    int64_t zero = 0, five = 5, one = 1;
    corral_actor_opts_t o = {.max_restarts = 1, .max_task_retries = 1};
    corral_actor_create(t, "Counter", &zero, sizeof(zero), &o, &a);
    corral_ref_t *r;
    int rc;
    corral_actor_call(t, a, "add", &five, sizeof(five), &r);
    int64_t v = get_int(t, r, &rc);
    corral_ref_free(r);
    CHECK(!rc && v == 5, "the actor holds 5");
    corral_actor_call(t, a, "pid", NULL, 0, &r);
    int64_t pid = get_int(t, r, &rc);
    corral_ref_free(r);
    CHECK(!rc && pid > 0, "its process is %lld", (long long)pid);
    kill((pid_t)pid, SIGKILL);
    corral_actor_call(t, a, "add", &one, sizeof(one), &r);
    v = get_int(t, r, &rc);
    CHECK(!rc && v == 1, "after kill -9 it restarted with fresh state: add(1) = %lld (%s)",
          (long long)v, rc ? corral_ref_error(r) : "");
    corral_ref_free(r);
    CHECK(corral_actor_restarts(a) == 1, "it restarted once (%u)", corral_actor_restarts(a));
    corral_actor_call(t, a, "pid", NULL, 0, &r);
    int64_t pid2 = get_int(t, r, &rc);
    corral_ref_free(r);
    CHECK(!rc && pid2 > 0 && pid2 != pid, "in a new process %lld", (long long)pid2);
    kill((pid_t)pid2, SIGKILL);
    corral_actor_call(t, a, "add", &one, sizeof(one), &r);
    rc = corral_get(t, r, 120000, NULL, NULL);
    CHECK(rc == CR_EACTORDIED, "killed again with no restart left it is dead: %s (%s)",
          cr_err_name(rc), corral_ref_error(r));
    corral_ref_free(r);
    corral_actor_free(a);
    return 0;
}

/* named NAME DIR: creates a Counter (from 1) named NAME, says so in
 * DIR/ready (its worker's pid), keeps it alive until DIR/stop appears,
 * then checks that what other processes added (lookup: 1..50) is in it. */
static int named(corral_tasks_t *t, const char *name, const char *dir)
{
    corral_actor_t *a;
    int64_t one = 1, zero = 0;
    corral_actor_opts_t ao = {.name = name};
    if (corral_actor_create(t, "Counter", &one, sizeof(one), &ao, &a))
        return printf("FAIL: named actor: %s\n", corral_tasks_errmsg()), 1;
    corral_ref_t *r;
    int rc;
    corral_actor_call(t, a, "pid", NULL, 0, &r);
    int64_t pid = get_int(t, r, &rc);
    corral_ref_free(r);
    CHECK(!rc, "actor %s is up in pid %lld", name, (long long)pid);
    char path[4096];
    snprintf(path, sizeof(path), "%s/ready", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%lld\n", (long long)pid);
        fclose(f);
    }
    snprintf(path, sizeof(path), "%s/stop", dir);
    for (int i = 0; i < 3000 && access(path, F_OK); i++)
        usleep(100 * 1000);
    corral_actor_call(t, a, "add", &zero, sizeof(zero), &r);
    int64_t v = get_int(t, r, &rc);
    corral_ref_free(r);
    CHECK(!rc && v == 1 + 1275, "the owner sees what another process added: %lld (want 1276)",
          (long long)v);
    corral_actor_free(a);
    return 0;
}

/* lookup NAME: finds the named Counter of another process, adds 1..50 to
 * it (pipelined: they run in this caller's order), and checks the errors:
 * an unknown name, and the name taken when this process would create it. */
static int lookup(corral_tasks_t *t, const char *name)
{
    corral_actor_t *a;
    int rc = corral_actor_get(t, name, &a);
    CHECK(!rc, "corral_actor_get found %s: %s", name, rc ? corral_tasks_errmsg() : "ok");
    if (rc)
        return 1;
    corral_ref_t *adds[50];
    for (int64_t i = 1; i <= 50; i++)
        corral_actor_call(t, a, "add", &i, sizeof(i), &adds[i - 1]);
    int64_t last = 0, inorder = 1;
    for (int i = 0; i < 50; i++) {
        int64_t v = get_int(t, adds[i], &rc);
        inorder &= !rc && v == 1 + (int64_t)(i + 1) * (i + 2) / 2;
        if (rc)
            printf("call %d: %s %s\n", i, cr_err_name(rc), corral_ref_error(adds[i]));
        last = v;
        corral_ref_free(adds[i]);
    }
    CHECK(inorder && last == 1276,
          "another process's actor adds 1..50 in this caller's order: %lld", (long long)last);
    corral_ref_t *r;
    corral_actor_call(t, a, "nosuch", NULL, 0, &r);
    rc = corral_get(t, r, 60000, NULL, NULL);
    CHECK(rc == CR_ENOENT, "an unknown method of the looked-up actor: %s (%s)", cr_err_name(rc),
          corral_ref_error(r));
    corral_ref_free(r);
    corral_actor_free(a); /* the connection only: the actor lives on */
    char missing[200];
    snprintf(missing, sizeof(missing), "%s-nosuch", name);
    rc = corral_actor_get(t, missing, &a);
    CHECK(rc == CR_ENOENT && strstr(corral_tasks_errmsg(), missing), "a name no actor has: %s (%s)",
          cr_err_name(rc), corral_tasks_errmsg());
    int64_t one = 1;
    corral_actor_opts_t ao = {.name = name};
    rc = corral_actor_create(t, "Counter", &one, sizeof(one), &ao, &a);
    CHECK(rc == CR_EEXIST, "the name is taken for this process too: %s", corral_tasks_errmsg());
    if (!rc)
        corral_actor_free(a);
    return 0;
}

/* crossnode NODE: large results made by a worker on node NODE (run with
 * CORRAL_EXAMPLE_TCP=1: over TCP, as from another host), kept in its
 * object store and fetched here in chunks: 100 MiB, then 8 at once of
 * 3 MiB (each its own fetch on the worker's connection). */
static int crossnode(corral_tasks_t *t, const char *node)
{
    char sel[200];
    snprintf(sel, sizeof(sel), "corral.io/node-id=%s", node);
    corral_task_opts_t o = {.selector = sel, .max_retries = 0};
    int64_t n100 = 100 << 20, n3 = 3 << 20;
    corral_ref_t *r, *rs[8];
    corral_task_submit(t, "big", &n100, sizeof(n100), &o, &r);
    for (int i = 0; i < 8; i++)
        corral_task_submit(t, "big", &n3, sizeof(n3), &o, &rs[i]);
    const void *d;
    size_t n;
    int rc = corral_get(t, r, 120000, &d, &n);
    int good = !rc && n == (size_t)n100;
    for (size_t i = 0; good && i < n; i += 4099)
        good = ((const uint8_t *)d)[i] == (uint8_t)(i * 7);
    good = good && ((const uint8_t *)d)[n - 1] == (uint8_t)((n - 1) * 7);
    CHECK(good, "a 100 MiB result made on %s comes back whole over TCP (rc %d %s)", node, rc,
          corral_ref_error(r));
    corral_ref_free(r);
    int all = 1;
    for (int i = 0; i < 8; i++) {
        rc = corral_get(t, rs[i], 120000, &d, &n);
        int ok = !rc && n == (size_t)n3 && ((const uint8_t *)d)[n - 1] == (uint8_t)((n - 1) * 7);
        if (!ok)
            printf("result %d: %s %s\n", i, cr_err_name(rc), corral_ref_error(rs[i]));
        all &= ok;
        corral_ref_free(rs[i]);
    }
    CHECK(all, "8 results of 3 MiB made on %s at once come back whole", node);
    return 0;
}

/* lookup-refused NAME: this process does not hold the owner's secret
 * (over TCP): the lookup fails, saying why, and nothing is called. */
static int lookup_refused(corral_tasks_t *t, const char *name)
{
    corral_actor_t *a;
    int rc = corral_actor_get(t, name, &a);
    CHECK(rc < 0 && strstr(corral_tasks_errmsg(), "cannot be reached"),
          "without the owner's secret the lookup over TCP is refused: %s (%s)", cr_err_name(rc),
          corral_tasks_errmsg());
    if (!rc)
        corral_actor_free(a);
    return 0;
}

int main(int argc, char **argv)
{
    corral_worker_register_fn("square", square);
    corral_worker_register_fn("checksum", checksum);
    corral_worker_register_fn("big", big);
    corral_worker_register_fn("fails", fails);
    corral_worker_register_fn("chip", chip);
    corral_worker_register_fn("die_once", die_once);
    corral_worker_register_class("Counter", counter_new, counter_methods, counter_free);
    corral_worker_register_class("Meeter", meeter_new, meeter_methods, NULL);
    corral_worker_register_class("Gate", gate_new, gate_methods, NULL);
    corral_worker_register_fn("mark", mark_fn);
    corral_worker_register_fn("nested", nested);
    corral_worker_register_fn("argsum", argsum);
    if (corral_worker_is_leased())
        return corral_worker_main();

    if (argc < 2) {
        fprintf(stderr,
                "usage: %s demo | tpu DIR N | retry DIR | hold DIR | restart | cancel DIR | named NAME DIR | "
                "lookup NAME | lookup-refused NAME | crossnode NODE\n",
                argv[0]);
        return 2;
    }
    corral_tasks_opts_t opts = {.tcp_only = getenv("CORRAL_EXAMPLE_TCP") != NULL};
    corral_tasks_t *t;
    char *why = NULL;
    if (corral_tasks_init(&opts, &t, &why)) {
        fprintf(stderr, "tasks_example: %s\n", why);
        free(why);
        return 1;
    }
    printf("owner listens at %s\n", corral_tasks_address(t));
    int rc = 2;
    if (!strcmp(argv[1], "demo"))
        rc = demo(t);
    else if (!strcmp(argv[1], "tpu") && argc > 3)
        rc = tpu(t, argv[2], atoi(argv[3]));
    else if (!strcmp(argv[1], "retry") && argc > 2)
        rc = retry(t, argv[2]);
    else if (!strcmp(argv[1], "hold") && argc > 2)
        rc = hold(t, argv[2]);
    else if (!strcmp(argv[1], "restart"))
        rc = restart(t);
    else if (!strcmp(argv[1], "refargs"))
        rc = refargs(t);
    else if (!strcmp(argv[1], "nested"))
        rc = nested_demo(t);
    else if (!strcmp(argv[1], "named") && argc > 3)
        rc = named(t, argv[2], argv[3]);
    else if (!strcmp(argv[1], "crossnode") && argc > 2)
        rc = crossnode(t, argv[2]);
    else if (!strcmp(argv[1], "lookup-refused") && argc > 2)
        rc = lookup_refused(t, argv[2]);
    else if (!strcmp(argv[1], "lookup") && argc > 2)
        rc = lookup(t, argv[2]);
    else if (!strcmp(argv[1], "cancel") && argc > 2)
        rc = cancel(t, argv[2]);
    else
        fprintf(stderr, "tasks_example: unknown scenario %s\n", argv[1]);
    corral_tasks_shutdown(t);
    return rc ? rc : failures ? 1 : 0;
}
