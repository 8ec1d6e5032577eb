/* A socketless head for fuzz targets and unit tests (daemon/harness.h).
 * The set-up and the tear-down follow main.c's for --head, less the
 * session directory, the token, the listeners and the signals. */
#include "daemon/harness.h"
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static char *spec_copy;
static bool started;

int head_harness_init(const char *spec_path, const char *dir)
{
    memset(&D, 0, sizeof(D));
    spec_copy = cr_strdup(spec_path);
    hw_options_t hwo = {.spec_path = spec_copy};
    cr_node_t *node = NULL;
    char *msg = NULL;
    if (hw_discover(&hwo, &node, &msg) < 0) {
        fprintf(stderr, "head harness: %s\n", msg ? msg : "discovery failed");
        free(msg);
        head_harness_fini();
        return CR_EINVAL;
    }
    /* deterministic, unlike corrald's pid */
    head_core_t core = {.who = "head harness",
                        .node = node,
                        .hwo = &hwo,
                        .seed = 1,
                        .refuse_start = HEAD_HARNESS_REFUSAL};
    if (head_core_init(&core) < 0) {
        head_harness_fini();
        return CR_EINVAL;
    }
    D.session = cr_strdup(dir);
    D.logs = cr_asprintf("%s/logs", dir);
    if (mkdir(D.logs, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "head harness: cannot create %s: %s\n", D.logs, strerror(errno));
        head_harness_fini();
        return -errno;
    }
    char *dbpath = cr_asprintf("%s/state.db", dir);
    const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < CR_ARRAY_SIZE(sfx); i++) {
        char *p = cr_asprintf("%s%s", dbpath, sfx[i]);
        unlink(p);
        free(p);
    }
    int e = head_core_open(&core, dbpath);
    free(dbpath);
    if (e < 0) {
        head_harness_fini();
        return e;
    }
    uv_loop_init(&D.loop);
    head_core_start(&core);
    started = true;
    return 0;
}

void head_harness_conn_closed(cr_conn_t *c)
{
    head_conn_closed(c);
}

/* as head/server.c's */
static void on_message(cr_conn_t *c, const Corral__Envelope *e, void *data)
{
    head_handle(c, e);
}

static void on_close(cr_conn_t *c, int err, void *data)
{
    head_batch();
    head_conn_closed(c);
}

int head_harness_listen(const char *path, const uint8_t token[CR_TOKEN_LEN])
{
    cr_net_config_t nc = {.token = token, .name = "harness-head"};
    cr_net_callbacks_t cb = {.on_message = on_message, .on_close = on_close};
    if (!(D.net = cr_net_new(&D.loop, &nc, &cb, NULL)))
        return CR_EINVAL;
    return cr_net_listen_unix(D.net, path);
}

void head_harness_run(void)
{
    uv_run(&D.loop, UV_RUN_NOWAIT);
}

static void close_left(uv_handle_t *h, void *arg)
{
    /* what the head leaves open for the process's end (the shutdown's
     * forcing timer, a static) */
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

void head_harness_fini(void)
{
    if (started) {
        if (D.net)
            cr_net_close(D.net, NULL, NULL);
        D.net = NULL;
        uv_run(&D.loop, UV_RUN_NOWAIT); /* the connections' on_close */
        head_core_stop();
        uv_timer_stop(&D.tick);
        uv_close((uv_handle_t *)&D.tick, NULL);
        uv_run(&D.loop, UV_RUN_DEFAULT); /* close callbacks of released workers */
        uv_walk(&D.loop, close_left, NULL);
        uv_run(&D.loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&D.loop) != 0)
            cr_warn("head harness: loop closed with handles left");
        head_batch_forget();
        started = false;
    }
    head_core_fini();
    hw_node_free(D.node);
    free(D.session);
    free(D.logs);
    free(spec_copy);
    spec_copy = NULL;
    memset(&D, 0, sizeof(D));
}
