/* Fuzzes the /proc/driver/nvidia/version parser: any bytes, any output
 * size; the result is either CR_EPARSE or a terminated version that fits. */
#include "hw/hw.h"
#include "hw/nvml_api.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* the first byte picks the output size, the rest is the file */
    size_t outsize = data[0] % 40;
    char *text = cr_strndup((const char *)data + 1, size - 1);
    char out[40];
    memset(out, 'x', sizeof(out));
    int err = hw_nvidia_parse_version(text, out, outsize);
    if (err == 0) {
        assert(outsize > 0 && strlen(out) < outsize);
        assert(strstr(text, out) != NULL);
    } else {
        assert(err == CR_EPARSE);
    }
    free(text);
    return 0;
}
