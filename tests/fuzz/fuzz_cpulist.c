/* Fuzz the cpulist parser ("0-3,8") and its formatter: whatever parses
 * formats back to a list that parses to the same set. */
#include "base/base.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = cr_strndup((const char *)data, size);
    uint64_t bits[16], again[16];
    size_t pos;
    int n = cr_cpulist_parse(s, bits, 1024, &pos);
    if (n >= 0) {
        cr_buf_t b = {0};
        cr_cpulist_format(bits, 1024, &b);
        int m = cr_cpulist_parse(b.s, again, 1024, &pos);
        assert(m == n);
        assert(memcmp(bits, again, sizeof(bits)) == 0);
        cr_buf_free(&b);
    } else {
        assert(pos <= size);
    }
    free(s);
    return 0;
}
