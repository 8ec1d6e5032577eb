/* Fuzz the /proc/PID/status mask reader (cr_proc_status_mask, which the
 * agent's spawn uses for SigIgn and SigCgt): it reads only within the
 * text, and what it finds is there, as 16 hexadecimal digits after
 * "\nNAME:\t". */
#include "base/base.h"
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = cr_strndup((const char *)data, size);
    static const char *const names[] = {"SigIgn", "SigCgt", "SigBlk", "S"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        uint64_t v = 0;
        if (!cr_proc_status_mask(s, names[i], &v))
            continue;
        char want[64];
        snprintf(want, sizeof(want), "\n%s:\t%016" PRIx64, names[i], v);
        assert(strstr(s, want) != NULL);
    }
    free(s);
    return 0;
}
