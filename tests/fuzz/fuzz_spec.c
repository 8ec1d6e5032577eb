/* libFuzzer target for the hardware spec loader (hw/spec.c): any bytes, as
 * YAML, or as JSON when it starts with a brace, must load or fail with a
 * FILE:LINE:COL message; never crash, leak or print. */
#include "hw/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *name = size && data[0] == '{' ? "fuzz.json" : "fuzz.yaml";
    cr_node_t *n = hw_node_new();
    char *msg = NULL;
    int err = hw_spec_load_buffer(name, (const char *)data, size, n, &msg);
    if (err) {
        /* every failure says where */
        if (!msg || strncmp(msg, name, strlen(name)) != 0 || msg[strlen(name)] != ':')
            __builtin_trap();
    } else if (msg) {
        __builtin_trap();
    }
    free(msg);
    hw_node_free(n);
    return 0;
}
