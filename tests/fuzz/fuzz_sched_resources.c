/* Fuzz the resource-string and quantity parsers: never crash; on success
 * the result formats and parses back to the same request. */
#include "sched/sched.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = cr_strndup((const char *)data, size);
    sched_syms_t res;
    sched_resources_init(&res);
    sched_resreq_t q, back;
    sched_err_t err;
    if (sched_parse_resources(&res, s, &q, &err) == 0) {
        cr_buf_t b = {0};
        sched_format_resources(&res, &q, &b);
        if (q.n) {
            int rc = sched_parse_resources(&res, b.s, &back, &err);
            assert(rc == 0 && back.n == q.n);
            for (int k = 0; k < q.n; k++)
                assert(back.id[k] == q.id[k] && back.qty[k] == q.qty[k]);
        }
        cr_buf_free(&b);
    } else {
        assert(err.pos >= 0 && (size_t)err.pos <= strlen(s) && err.msg[0]);
    }
    int64_t v;
    if (sched_parse_qty(s, strlen(s), &v, &err) == 0)
        assert(v >= 0);
    sched_syms_fini(&res);
    free(s);
    return 0;
}
