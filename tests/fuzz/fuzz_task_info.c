/* corral list's check of an owner's INFO answer (cli/task_info.c): any
 * bytes as a frame. Never crashes; what it accepts has the shape it
 * promises (an object with owner, total and items, each item an object
 * with an id); a refusal always says why. */
#include "cli/task_info.h"
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *out = (json_t *)1;
    char why[128];
    memset(why, 0x5a, sizeof(why));
    uint64_t id = size ? data[0] % 4 : 2;
    int rc = cli_task_info_reply(data, size, id, &out, why, sizeof(why));
    if (rc == 0) {
        json_t *items = json_object_get(out, "items");
        if (!json_is_array(items) || !json_is_object(json_object_get(out, "owner")))
            abort();
        size_t i;
        json_t *v;
        json_array_foreach(items, i, v) if (!json_is_string(json_object_get(v, "id"))) abort();
        json_decref(out);
    } else if (out != NULL || !memchr(why, '\0', sizeof(why))) {
        abort();
    }
    /* the header check alone */
    uint32_t rest;
    if (size >= 4 && cli_task_header(data, &rest) == 0 && (rest < 12 || rest > CLI_TASK_REPLY_MAX))
        abort();
    return 0;
}
