/* Fuzz the parser of CORRAL_JOB_TOKEN (cr_job_token_parse, net/auth.c):
 * what it accepts formats back to the same text, and a scope it returns
 * always has a NUL-terminated job id of at most CR_JOB_ID_MAX bytes. */
#undef NDEBUG
#include "net/net.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = cr_strndup((const char *)data, size);
    cr_job_scope_t scope;
    uint8_t cred[CR_TOKEN_LEN];
    if (cr_job_token_parse(s, &scope, cred) == 0) {
        assert(memchr(scope.job_id, 0, sizeof(scope.job_id)));
        assert(scope.job_id[0]);
        char back[CR_JOB_TOKEN_TEXT_MAX];
        cr_job_token_format(&scope, cred, back, sizeof(back));
        cr_job_scope_t again;
        uint8_t cred2[CR_TOKEN_LEN];
        assert(cr_job_token_parse(back, &again, cred2) == 0);
        assert(strcmp(again.job_id, scope.job_id) == 0);
        assert(again.worker_index == scope.worker_index && again.attempt == scope.attempt);
        assert(memcmp(cred, cred2, CR_TOKEN_LEN) == 0);
    }
    free(s);
    return 0;
}
