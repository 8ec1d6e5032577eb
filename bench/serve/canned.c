/* bench/serve's trivial backend: a canned OpenAI chat completion for every
 * POST, 200 for GET /health, on libmicrohttpd with epoll, so that what a
 * benchmark through the router measures is the router.
 *   canned --port P [--host H] */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char reply[] =
    "{\"id\":\"canned-1\",\"object\":\"chat.completion\",\"created\":0,\"model\":\"canned\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hello\"},"
    "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,"
    "\"total_tokens\":2}}";

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *up,
                              size_t *up_size, void **rc)
{
    (void)cls, (void)url, (void)method, (void)version, (void)up;
    if (!*rc) {
        *rc = (void *)1;
        return MHD_YES;
    }
    if (*up_size) {
        *up_size = 0;
        return MHD_YES;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(sizeof(reply) - 1, (void *)reply, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

int main(int argc, char **argv)
{
    unsigned port = 0;
    const char *host = "127.0.0.1";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            port = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--host") == 0)
            host = argv[i + 1];
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!port || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "usage: canned --port P [--host IPv4]\n");
        return 2;
    }
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)port, NULL,
                         NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_CONNECTION_LIMIT, 4096u, MHD_OPTION_END);
    if (!d) {
        perror("canned: listen");
        return 1;
    }
    printf("canned on %s:%u\n", host, port);
    fflush(stdout);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGTERM);
    sigaddset(&s, SIGINT);
    sigprocmask(SIG_BLOCK, &s, NULL);
    int sig;
    sigwait(&s, &sig);
    MHD_stop_daemon(d);
    return 0;
}
