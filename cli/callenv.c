/* Where the user stands (issue 13), as srun's --export and --chdir: a
 * job's workers start in the caller's directory with the caller's
 * environment, not the daemon's. */
#include "cli.h"
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

extern char **environ;

/* Whether word (n bytes) is one of the comma-separated words of list. */
bool cli_one_of(const char *list, const char *word, size_t n)
{
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && !strncmp(p, word, n))
            return true;
        p += k + (p[k] == ',');
    }
    return false;
}

int cli_worker_env(const char *cmd, const char *policy, const char *const *extra, size_t nextra,
                   cli_strv_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!policy)
        policy = "all";
    bool all = !strcmp(policy, "all"), none = !strcmp(policy, "none");
    if (!policy[0] || policy[0] == ',' || strchr(policy, '=')) {
        fprintf(stderr,
                "%s: --env-policy: expected all, none or a list of names (K1,K2), got '%s'\n", cmd,
                policy);
        return CLI_USAGE;
    }
    if (!none)
        for (char **e = environ; *e; e++) {
            const char *eq = strchr(*e, '=');
            if (!eq || eq == *e)
                continue;
            if (all || cli_one_of(policy, *e, (size_t)(eq - *e)))
                *CR_VEC_PUSH(&out->v) = *e;
        }
    for (size_t i = 0; i < nextra; i++) /* after: --env wins */
        *CR_VEC_PUSH(&out->v) = extra[i];
    *CR_VEC_PUSH(&out->v) = NULL;
    return 0;
}

void cli_strv_free(cli_strv_t *v)
{
    CR_VEC_FREE(&v->v);
}

char *cli_abs_path(const char *cmd, const char *what, const char *path)
{
    if (path && path[0] == '/')
        return cr_strdup(path);
    char *here = getcwd(NULL, 0);
    if (!here) {
        fprintf(stderr, "%s: %s: the current directory is unreadable: %s; give an absolute path\n",
                cmd, what, strerror(errno));
        return NULL;
    }
    if (!path || !path[0] || !strcmp(path, "."))
        return here;
    char *p = cr_asprintf("%s/%s", here, path);
    free(here);
    return p;
}
