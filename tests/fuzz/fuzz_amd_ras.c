/* libFuzzer target: amdgpu's RAS error count files (hw/kfd.c
 * hw_amd_ras_parse, read by the amd backend's telemetry). */
#include "hw/amd_kfd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[96];
    uint64_t ue = 0, ce = 0;
    if (hw_amd_ras_parse((const char *)data, size, &ue, &ce, why, sizeof(why)) != 0 &&
        !memchr(why, '\0', sizeof(why)))
        __builtin_trap();
    return 0;
}
