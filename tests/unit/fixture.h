/* Test helpers shared by the unit tests: fixture machine paths and an
 * injectable environment loaded from a fixture's `env` file. Header-only,
 * included by test files. */
#ifndef CORRAL_TEST_FIXTURE_H
#define CORRAL_TEST_FIXTURE_H

#include "hw/hw.h"
#include <stdio.h>
#include <unistd.h>

#define FIXTURE_MAX_VARS 64

typedef struct fixture_env {
    char root[1100]; /* tests/fixtures/hw/<machine>/root */
    char dir[1024];  /* tests/fixtures/hw/<machine> */
    int n;
    char *keys[FIXTURE_MAX_VARS], *vals[FIXTURE_MAX_VARS];
} fixture_env_t;

static inline const char *fixture_getenv(void *ctx, const char *name)
{
    fixture_env_t *f = ctx;
    for (int i = f->n - 1; i >= 0; i--)
        if (strcmp(f->keys[i], name) == 0)
            return f->vals[i];
    return NULL;
}

/* Sets (or overrides) one variable of the fixture's environment. */
static inline void fixture_setenv(fixture_env_t *f, const char *key, const char *val)
{
    if (f->n == FIXTURE_MAX_VARS)
        abort();
    f->keys[f->n] = cr_strdup(key);
    f->vals[f->n] = cr_strdup(val);
    f->n++;
}

/* Loads tests/fixtures/hw/<machine>/env (KEY=VALUE lines, # comments) when
 * present. The process environment is never consulted. */
static inline void fixture_open(fixture_env_t *f, const char *machine)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "%s/tests/fixtures/hw/%s", CORRAL_SOURCE_DIR, machine);
    snprintf(f->root, sizeof(f->root), "%s/root", f->dir);
    char path[1200], line[4096];
    /* the host topology of a fixture is hwloc's own XML recording */
    snprintf(path, sizeof(path), "%s/hwloc.xml", f->dir);
    if (access(path, R_OK) == 0)
        fixture_setenv(f, "CORRAL_HWLOC_XML", path);
    snprintf(path, sizeof(path), "%s/env", f->dir);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return;
    while (fgets(line, sizeof(line), fp)) {
        cr_strtrim(line);
        char *eq = strchr(line, '=');
        if (!line[0] || line[0] == '#' || !eq)
            continue;
        *eq = '\0';
        fixture_setenv(f, line, eq + 1);
    }
    fclose(fp);
}

static inline void fixture_close(fixture_env_t *f)
{
    for (int i = 0; i < f->n; i++) {
        free(f->keys[i]);
        free(f->vals[i]);
    }
    f->n = 0;
}

/* Options for hw_discover on the fixture: its root and environment. */
static inline hw_options_t fixture_options(fixture_env_t *f)
{
    hw_options_t o = {
        .root = f->root, .getenv = fixture_getenv, .getenv_ctx = f, .no_plugins = true};
    return o;
}

#endif
