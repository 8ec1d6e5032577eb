/* web/'s own header: the server struct that route.c and server.c share. */
#ifndef CORRAL_WEB_WEB_INT_H
#define CORRAL_WEB_WEB_INT_H

#include "net/net.h"
#include "web/web.h"
#include <ctype.h>
#include <errno.h>

struct MHD_Daemon;
typedef struct web_stream web_stream_t;

struct web {
    web_config_t cfg;
    char *who, *host;
    uint8_t token[WEB_KEY_LEN];
    bool has_token;
    uint8_t login[WEB_KEY_LEN];
    char login_hex[2 * WEB_KEY_LEN + 1];
    CR_VEC(web_route_t) routes;
    char *tls_cert, *tls_key; /* PEM copies (HTTPS); the key wiped at web_free */
    /* server.c */
    struct MHD_Daemon *mhd;
    int port;
    uv_poll_t *poll;       /* on libmicrohttpd's epoll descriptor */
    uv_timer_t *timer;     /* its timeouts, and waking suspended streams */
    web_stream_t *streams; /* open streams (a list), suspended or not */
};

#endif
