/* Fuzzes the /proc/driver/nvidia/gpus/<busid>/information parser and the
 * PCI bus id normalizer it uses. */
#include "hw/hw.h"
#include "hw/nvml_api.h"
#include <assert.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = cr_strndup((const char *)data, size);
    hw_nvidia_info_t info;
    int err = hw_nvidia_parse_information(text, &info);
    assert(err == 0 || err == CR_EPARSE);
    assert(strlen(info.model) < sizeof(info.model) && strlen(info.uuid) < sizeof(info.uuid));
    assert(info.bus[0] == '\0' || strlen(info.bus) == 12);
    assert(info.minor >= -1);
    char bus[20];
    if (hw_nvidia_normalize_busid(text, bus, sizeof(bus)) == 0) {
        /* normalizing is idempotent */
        char again[20];
        assert(hw_nvidia_normalize_busid(bus, again, sizeof(again)) == 0);
        assert(strcmp(bus, again) == 0);
    }
    free(text);
    return 0;
}
