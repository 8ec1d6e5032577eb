/* tests/cli/client_idle.sh's client: one libcorral connection used, left
 * idle for IDLE_MS (longer than its call timeout, CORRAL_CALL_TIMEOUT_MS),
 * then used again. Each call's timeout counts from when it is made: the
 * connection's loop does not run while it is idle, and a timer counted
 * from its clock as it last ran fired at once, failing the call with
 * CR_EAGAIN and closing the connection (cluster_tasks_c under ASan: a
 * driver's second job listing). Prints one line per call; exit 0 when
 * every call succeeded. */
#include <corral/corral.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int list(corral_t *c, const char *when)
{
    corral_job_t *jobs;
    size_t n;
    int rc = corral_job_list(c, &jobs, &n);
    printf("%s: %s\n", when, rc < 0 ? corral_errmsg(c) : "ok");
    if (rc == 0)
        corral_job_list_free(jobs, n);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: client_idle IDLE_MS\n");
        return 2;
    }
    long ms = strtol(argv[1], NULL, 10);
    corral_t *c;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "client_idle: %s\n", why ? why : "cannot connect");
        return 1;
    }
    int bad = list(c, "first call") < 0;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    bad |= list(c, "after the idle time") < 0;
    bad |= list(c, "once more") < 0;
    corral_disconnect(c);
    return bad;
}
