/* Many placement groups at once through libcorral, as Ray programs make
 * them (placement_group() returns at once; the groups are waited on
 * together): N groups of one bundle created with corral_pg_create_many,
 * each waited on until CREATED, printed, then removed together with
 * corral_pg_remove_many, with any extra names given after them.
 *
 *   libcorral_pg_batch N RESOURCES [NAME ...]    e.g. libcorral_pg_batch 8 GPU=1
 *
 * Prints "group I ID STATE NODE [DEVICES]" per group, then "removed K of
 * M" and one "not removed NAME: MESSAGE" per refusal; exits 0 when every
 * group was created and every removal done. Built by client/CMakeLists.txt,
 * run by tests/cli/pg.sh. */
#include <corral/corral.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 3 || atoi(argv[1]) < 1) {
        fprintf(stderr, "usage: libcorral_pg_batch N RESOURCES [NAME ...]\n");
        return 2;
    }
    size_t n = (size_t)atoi(argv[1]), extra = (size_t)argc - 3;
    corral_t *c;
    char *why = NULL;
    if (corral_connect(NULL, NULL, &c, &why) < 0) {
        fprintf(stderr, "libcorral_pg_batch: %s\n", why);
        free(why);
        return 1;
    }
    corral_bundle_spec_t b = {.resources = argv[2]};
    corral_pg_spec_t *specs = calloc(n, sizeof(*specs));
    corral_pg_t *pgs = calloc(n, sizeof(*pgs));
    int *errs = calloc(n + extra, sizeof(*errs));
    const char **ids = calloc(n + extra, sizeof(*ids));
    for (size_t i = 0; i < n; i++)
        specs[i] = (corral_pg_spec_t){.bundles = &b, .nbundles = 1, .wait = 1};
    int rc = 0;
    if (corral_pg_create_many(c, specs, n, pgs, errs) < 0) {
        fprintf(stderr, "libcorral_pg_batch: create: %s\n", corral_errmsg(c));
        rc = 1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (errs[i]) {
            printf("group %zu not created: error %d\n", i, errs[i]);
            continue;
        }
        const corral_bundle_t *bd = &pgs[i].bundles[0];
        printf("group %zu %s %s %s [%s]\n", i, pgs[i].pg_id, pgs[i].state,
               bd->node_id[0] ? bd->node_id : "-", bd->devices);
        if (strcmp(pgs[i].state, "CREATED") != 0)
            rc = 1;
        ids[k++] = pgs[i].pg_id;
    }
    for (size_t i = 0; i < extra; i++)
        ids[k++] = argv[3 + i];
    if (corral_pg_remove_many(c, ids, k, errs) < 0) {
        fprintf(stderr, "libcorral_pg_batch: remove: %s\n", corral_errmsg(c));
        rc = 1;
    }
    size_t removed = 0;
    for (size_t i = 0; i < k; i++)
        removed += errs[i] == 0;
    printf("removed %zu of %zu\n", removed, k);
    for (size_t i = 0; i < k; i++)
        if (errs[i])
            printf("not removed %s: error %d\n", ids[i], errs[i]);
    for (size_t i = 0; i < n; i++)
        corral_pg_free(&pgs[i]);
    free(specs);
    free(pgs);
    free(errs);
    free(ids);
    corral_disconnect(c);
    return rc;
}
