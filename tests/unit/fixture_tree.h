/* Test helpers over fixture trees and discovered nodes; they assert with
 * cmocka, so include this after <cmocka.h>. Header-only, like fixture.h. */
#ifndef CORRAL_TEST_FIXTURE_TREE_H
#define CORRAL_TEST_FIXTURE_TREE_H

#include "fixture.h"

/* ---- a writable copy of the fixture tree ---- */

static inline void fixture_tree_copy(const fixture_env_t *f, char *dst, size_t size)
{
    snprintf(dst, size, "/tmp/corral-fixture-XXXXXX");
    assert_non_null(mkdtemp(dst));
    char cmd[2600];
    snprintf(cmd, sizeof(cmd), "cp -a '%s/.' '%s/'", f->root, dst);
    assert_int_equal(system(cmd), 0);
}

static inline void fixture_tree_write(const char *root, const char *rel, const char *text)
{
    char path[1024], cmd[1200];
    snprintf(path, sizeof(path), "%s%s", root, rel);
    snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
    assert_int_equal(system(cmd), 0);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Runs a shell command inside root. */
static inline void fixture_tree_sh(const char *root, const char *cmd)
{
    char full[1400];
    snprintf(full, sizeof(full), "cd '%s' && %s", root, cmd);
    assert_int_equal(system(full), 0);
}

static inline void fixture_tree_remove(const char *root)
{
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

static inline cr_node_t *fixture_discover(fixture_env_t *f, const char *root)
{
    hw_options_t o = fixture_options(f);
    o.no_host = true;
    if (root)
        o.root = root;
    cr_node_t *n = NULL;
    char *msg = NULL;
    assert_int_equal(hw_discover(&o, &n, &msg), 0);
    assert_null(msg);
    return n;
}

static inline size_t fixture_count_warnings(const cr_node_t *n, const char *a, const char *b)
{
    size_t k = 0;
    for (size_t i = 0; i < n->warnings.n; i++)
        k += strstr(n->warnings.v[i], a) && (!b || strstr(n->warnings.v[i], b));
    return k;
}

static inline int64_t fixture_resource(const cr_node_t *n, const char *name)
{
    for (size_t i = 0; i < n->resources.n; i++)
        if (strcmp(n->resources.v[i].name, name) == 0)
            return n->resources.v[i].amount;
    return -1;
}

static inline char *fixture_isolate(fixture_env_t *f, const cr_node_t *n, const int *devs,
                                    size_t ndevs, const char *var)
{
    hw_options_t o = fixture_options(f);
    cr_envlist_t env = {0};
    char *msg = NULL;
    assert_int_equal(hw_isolate(&o, n, devs, ndevs, &env, &msg), 0);
    const char *v = cr_envlist_get(&env, var);
    char *copy = v ? cr_strdup(v) : NULL;
    cr_envlist_free(&env);
    return copy;
}

#endif
