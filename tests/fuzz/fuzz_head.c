/* Fuzz every message handler of the head: each input is a conversation
 * of a client and two agents with a fresh head (daemon/harness.h, a
 * simulated DGX H100 node, no sockets), delivered through head_dispatch
 * as corrald delivers it.
 *
 * Input: a sequence of chunks, each [ctl][len lo][len hi][len bytes]. The
 * bytes are an Envelope's payload; like net/conn.c, it is unpacked and
 * validated (cr_msg_unpack) and checked against the senders its role may
 * use; only what passes is dispatched. ctl bits 0-1 pick the connection
 * (0 and 3: the client, 1: agent A, 2: agent B); bit 6 closes that
 * connection after the message (on_close as corrald runs it; a new one of
 * the same role takes its place); bit 7 runs the loop a few more times.
 * The loop runs once (UV_RUN_NOWAIT) after every message.
 *
 * Nothing runs on this machine: the harness's agent fails every start
 * (HEAD_HARNESS_REFUSAL), and the agents are detached connections whose
 * WorkerStarts go to a sink. Run under ASan/UBSan (the fuzz build), this
 * checks every handler, the messages it sends (each is packed and
 * unpacked again by the detached connection), and the tear-down (LSan). */
#undef NDEBUG
#include "daemon/harness.h"
#define _XOPEN_SOURCE 700
#include <assert.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CORRAL_SOURCE_DIR
#error "CORRAL_SOURCE_DIR must be defined"
#endif

static char dir[64];
static size_t sent;

static bool verbose; /* FUZZ_HEAD_VERBOSE=1: what the head sends, on stderr */

static void sink(void *arg, const Corral__Envelope *e)
{
    assert(e->body_case != CORRAL__ENVELOPE__BODY__NOT_SET);
    sent++;
    if (verbose)
        fprintf(stderr, "  -> %s: %s reply_to %llu%s%s\n", (const char *)arg,
                cr_msg_name(e->body_case), (unsigned long long)e->reply_to,
                e->body_case == CORRAL__ENVELOPE__BODY_ERROR ? ": " : "",
                e->body_case == CORRAL__ENVELOPE__BODY_ERROR ? e->error->message : "");
    if (verbose && e->body_case == CORRAL__ENVELOPE__BODY_WORKER_START)
        fprintf(stderr, "     id %llu %s, %zu device(s), first %d\n", (unsigned long long)e->id,
                e->worker_start->worker_id, e->worker_start->n_devices,
                e->worker_start->n_devices ? (int)e->worker_start->devices[0] : -1);
    if (verbose && e->body_case == CORRAL__ENVELOPE__BODY_PREPARE)
        fprintf(stderr, "     id %llu txn %s\n", (unsigned long long)e->id, e->prepare->txn_id);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

static void rm_dir(void)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void)
{
    cr_log_set_level(CR_LOG_ERROR); /* the fuzzer makes every warning happen */
    verbose = getenv("FUZZ_HEAD_VERBOSE") && atoi(getenv("FUZZ_HEAD_VERBOSE")) > 0;
    /* state.db syncs each event: in memory when there is a tmpfs */
    snprintf(dir, sizeof(dir), "/dev/shm/corral-fuzz-head-XXXXXX");
    if (!mkdtemp(dir)) {
        snprintf(dir, sizeof(dir), "/tmp/corral-fuzz-head-XXXXXX");
        assert(mkdtemp(dir));
    }
    atexit(rm_dir);
    /* belt and braces: nothing can be found to run even if a start got through */
    char *empty = cr_asprintf("%s/empty", dir);
    mkdir(empty, 0700);
    setenv("PATH", empty, 1);
    free(empty);
}

static cr_conn_t *conn_new(int k);

static Corral__Role role_of(int k)
{
    return k == 0 ? CORRAL__ROLE__ROLE_CLIENT : CORRAL__ROLE__ROLE_AGENT;
}

static const char *const conn_names[3] = {"client", "agent A", "agent B"};

static cr_conn_t *conn_new(int k)
{
    return cr_conn_new_detached(role_of(k), sink, (void *)conn_names[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    if (head_harness_init(CORRAL_SOURCE_DIR "/specs/dgx-h100.yaml", dir) < 0)
        abort();
    cr_conn_t *conns[3];
    for (int k = 0; k < 3; k++)
        conns[k] = conn_new(k);

    while (size >= 3) {
        uint8_t ctl = data[0];
        size_t len = (size_t)data[1] | (size_t)data[2] << 8;
        data += 3;
        size -= 3;
        if (len > size)
            len = size;
        int k = (ctl & 3) == 3 ? 0 : ctl & 3;
        cr_conn_t *c = conns[k];
        char why[300];
        Corral__Envelope *e = cr_msg_unpack(data, len, why, sizeof(why));
        data += len;
        size -= len;
        unsigned from = k == 0 ? CR_FROM_CLIENT : CR_FROM_AGENT;
        /* as net/conn.c's handle_frame: handshake bodies and messages this
         * role may not send close the connection instead */
        bool ok = e &&
                  !(e->body_case >= CORRAL__ENVELOPE__BODY_HELLO &&
                    e->body_case <= CORRAL__ENVELOPE__BODY_REFUSED) &&
                  (cr_msg_senders(e->body_case) & from);
        if (verbose)
            fprintf(stderr, "%s: %s%s\n", conn_names[k], e ? cr_msg_name(e->body_case) : why,
                    ok ? "" : " (not dispatched; closing)");
        if (ok && cr_conn_is_ready(c))
            head_dispatch(c, e);
        cr_msg_free(e);
        if ((ctl & 0x40) || !ok) {
            cr_conn_close(c, 0);
            head_harness_conn_closed(c);
            cr_conn_free_detached(c);
            conns[k] = conn_new(k);
        }
        for (int i = 0; i < ((ctl & 0x80) ? 8 : 1); i++)
            head_harness_run();
    }

    for (int k = 0; k < 3; k++) {
        cr_conn_close(conns[k], 0);
        head_harness_conn_closed(conns[k]);
        cr_conn_free_detached(conns[k]);
    }
    head_harness_fini();
    return 0;
}
