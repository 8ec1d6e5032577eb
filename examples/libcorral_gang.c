/* A small program on libcorral (include/corral/corral.h): connects to the
 * running head, runs a gang of workers that each print the devices they
 * were given, prints the job's outcome and each worker's output, and exits
 * with the job's exit code.
 *
 *   libcorral_gang [WORKERS [RESOURCES]]     e.g. libcorral_gang 4 GPU=1
 *
 * Built by client/CMakeLists.txt, run by tests/cli/runtime.sh. */
#include <corral/corral.h>
#include <stdio.h>
#include <stdlib.h>

static void print_output(void *arg, unsigned worker, int stream, const char *data, size_t len)
{
    fprintf(stream ? stderr : stdout, "worker %u: %.*s", worker, (int)len, data);
}

int main(int argc, char **argv)
{
    unsigned workers = argc > 1 ? (unsigned)atoi(argv[1]) : 2;
    const char *resources = argc > 2 ? argv[2] : NULL;
    const char *cmd[] = {
        "sh", "-c", "echo \"index=$CORRAL_WORKER_INDEX devices=$CORRAL_ACCELERATOR_IDS\"", NULL};
    corral_t *c;
    char *why = NULL, *id = NULL;
    int rc = 1;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "libcorral_gang: %s\n", why);
        free(why);
        return 1;
    }
    corral_job_spec_t spec = {
        .name = "libcorral-gang", .argv = cmd, .resources = resources, .num_workers = workers};
    if (corral_submit(c, &spec, &id) < 0) {
        fprintf(stderr, "libcorral_gang: %s\n", corral_errmsg(c));
        goto out;
    }
    corral_job_t job;
    if (corral_wait(c, id, 30000, &job) < 0) {
        fprintf(stderr, "libcorral_gang: %s\n", corral_errmsg(c));
        goto out;
    }
    printf("job %s %s exit %d\n", job.job_id, corral_job_state_name(job.state), job.exit_code);
    for (size_t i = 0; i < job.nworkers; i++)
        printf("worker %u devices [%s] %s\n", job.workers[i].index, job.workers[i].devices,
               job.workers[i].state);
    if (corral_job_logs(c, id, -1, print_output, NULL) < 0)
        fprintf(stderr, "libcorral_gang: %s\n", corral_errmsg(c));
    rc = job.exit_code;
    corral_job_free(&job);
out:
    free(id);
    corral_disconnect(c);
    return rc;
}
