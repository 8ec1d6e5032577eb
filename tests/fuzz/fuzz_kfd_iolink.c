/* libFuzzer target: KFD io_links/<n>/properties (hw/kfd.c). */
#include "hw/amd_kfd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[256];
    hw_kfd_iolink_t l;
    if (hw_kfd_iolink_parse((const char *)data, size, &l, why, sizeof(why)) == 0 &&
        (l.type > UINT32_MAX || l.max_bandwidth > UINT32_MAX))
        __builtin_trap(); /* the kernel prints these with %u */
    return 0;
}
