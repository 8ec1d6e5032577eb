/* libFuzzer target for SKU files (hw/sku.c, docs/vendor-checklist.md): any
 * bytes must validate or fail with a FILE:LINE:COL message; never crash,
 * leak or print. */
#include "hw/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char name[] = "skus.yaml";
    char *msg = NULL;
    size_t rows;
    int err = hw_skus_check_buffer(name, (const char *)data, size, &rows, &msg);
    if (err) {
        if (!msg || strncmp(msg, name, strlen(name)) != 0 || msg[strlen(name)] != ':')
            __builtin_trap();
    } else if (msg) {
        __builtin_trap();
    }
    free(msg);
    return 0;
}
