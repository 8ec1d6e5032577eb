/* libFuzzer target for the node description reader (hw/node_json.c): any
 * JSON must be read or refused with a path and a message, and whatever is
 * read must survive a round trip through hw_node_to_json unchanged. */
#include "hw/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
    if (!j)
        return 0;
    cr_node_t *n = hw_node_new();
    hw_json_error_t err;
    if (hw_node_from_json(j, n, &err) == 0) {
        json_t *out = hw_node_to_json(n);
        cr_node_t *back = hw_node_new();
        if (hw_node_from_json(out, back, &err) != 0)
            __builtin_trap(); /* we wrote something we cannot read */
        json_t *again = hw_node_to_json(back);
        if (!json_equal(out, again))
            __builtin_trap();
        json_decref(again);
        json_decref(out);
        hw_node_free(back);
    } else if (!err.msg[0]) {
        __builtin_trap(); /* refused without saying why */
    }
    hw_node_free(n);
    json_decref(j);
    return 0;
}
