/* Fuzz the label-selector parser: never crash; on success the selector
 * formats and parses back to the same terms. */
#include "sched/sched.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = cr_strndup((const char *)data, size);
    sched_syms_t labels;
    sched_syms_init(&labels);
    sched_selector_t sel, back;
    sched_err_t err;
    if (sched_parse_selector(&labels, s, &sel, &err) == 0) {
        cr_buf_t b = {0};
        sched_format_selector(&labels, &sel, &b);
        if (sel.n) {
            int rc = sched_parse_selector(&labels, b.s, &back, &err);
            assert(rc == 0 && back.n == sel.n);
            for (int i = 0; i < sel.n; i++)
                assert(back.t[i].key == sel.t[i].key && back.t[i].op == sel.t[i].op &&
                       back.t[i].nvals == sel.t[i].nvals);
        }
        cr_buf_free(&b);
    } else {
        assert(err.pos >= 0 && (size_t)err.pos <= strlen(s) && err.msg[0]);
    }
    sched_syms_fini(&labels);
    free(s);
    return 0;
}
