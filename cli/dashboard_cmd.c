/* corral dashboard: the URL of the head's HTTP server with its login
 * token (docs/api.md "Access"), read from the session the head wrote it
 * into (0600, checked as every session file is). Opening it sets the
 * login cookie; the token changes each time the head starts. */
#include "cli.h"
#include <stdio.h>

static const char usage_text[] =
    "usage: corral dashboard [--json]\n"
    "  prints the URL of this session's head dashboard and API, with the login token\n"
    "  (open it in a browser on this machine; it is good until the head restarts)\n"
    "  --json  {\"url\": ..., \"login_url\": ...}\n";

/* The session's dashboard line: 0 with url (malloc'ed), or CLI_FAIL said. */
int cli_dashboard_url(char **url, bool quiet)
{
    char home[4096], session[4096], why[512];
    if (cr_home_path(home, sizeof(home)) < 0 ||
        cr_session_latest(home, session, sizeof(session), why, sizeof(why)) < 0) {
        if (!quiet)
            fprintf(stderr,
                    "corral dashboard: no head session here (%s); 'corral start --head' "
                    "starts one\n",
                    why);
        return CLI_FAIL;
    }
    char *path = cr_asprintf("%s/dashboard", session), *text = NULL;
    size_t len;
    int err = cr_read_private(path, &text, &len, why, sizeof(why));
    free(path);
    if (err < 0) {
        if (!quiet)
            fprintf(stderr,
                    "corral dashboard: the head serves no dashboard (%s): it was started with "
                    "--dashboard-port 0, its port was taken, or it is not running\n",
                    why);
        return CLI_FAIL;
    }
    text[strcspn(text, "\n")] = '\0';
    *url = text;
    return 0;
}

int cli_dashboard(int argc, char **argv)
{
    bool json = false;
    const cli_opt_t opts[] = {CLI_FLAG("json", &json), CLI_END};
    int first = cli_parse_opts("corral dashboard", opts, argc, argv, usage_text, NULL, false);
    if (first < 0)
        return first == CLI_OPTS_HELP ? CLI_OK : CLI_USAGE;
    if (first < argc) {
        fprintf(stderr, "corral dashboard: unexpected argument '%s'\n%s", argv[first], usage_text);
        return CLI_USAGE;
    }
    char *url;
    if (cli_dashboard_url(&url, false) != 0)
        return CLI_FAIL;
    if (json) {
        json_t *o = json_object();
        char *q = strchr(url, '?');
        json_object_set_new(o, "url", json_stringn(url, q ? (size_t)(q - url) : strlen(url)));
        json_object_set_new(o, "login_url", json_string(url));
        cli_print_json(o);
        json_decref(o);
    } else {
        printf("%s\n", url);
    }
    free(url);
    return CLI_OK;
}
