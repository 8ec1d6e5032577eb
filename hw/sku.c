/* Canonical accelerator types: one table, one row per fact. Names follow
 * what ML engineers already use (Ray's accelerator type names). Adding a
 * chip is adding a row; no code branches on a model. */
#include "hw.h"
#include <strings.h>

static const struct pci_row {
    uint16_t vendor, device;
    const char *sku;
} pci_rows[] = {
    /* NVIDIA */
    {0x10de, 0x2330, "H100"},     /* H100 SXM5 80GB */
    {0x10de, 0x2331, "H100"},     /* H100 PCIe */
    {0x10de, 0x2321, "H100"},     /* H100 NVL */
    {0x10de, 0x2324, "H800"},
    {0x10de, 0x2335, "H200"},     /* H200 SXM 141GB */
    {0x10de, 0x233b, "H200"},     /* H200 NVL */
    {0x10de, 0x2342, "GH200"},
    {0x10de, 0x2901, "B200"},
    {0x10de, 0x20b0, "A100-40G"}, /* A100 SXM4 40GB */
    {0x10de, 0x20f1, "A100-40G"}, /* A100 PCIe 40GB */
    {0x10de, 0x20b2, "A100-80G"}, /* A100 SXM4 80GB */
    {0x10de, 0x20b5, "A100-80G"}, /* A100 PCIe 80GB */
    {0x10de, 0x20b3, "A100-64G"},
    {0x10de, 0x2236, "A10"},
    {0x10de, 0x2237, "A10G"},
    {0x10de, 0x27b8, "L4"},
    {0x10de, 0x26b5, "L40"},
    {0x10de, 0x26b9, "L40S"},
    {0x10de, 0x1eb8, "T4"},
    {0x10de, 0x1db1, "V100"},
    {0x10de, 0x1db4, "V100"},
    {0x10de, 0x1db5, "V100"},
    {0x10de, 0x1db6, "V100"},
    /* AMD: every Instinct id of Ray's amd_product_dict
     * (python/ray/_private/accelerators/amd_gpu.py) */
    {0x1002, 0x74a1, "MI300X"},
    {0x1002, 0x74a9, "MI300X-HF"},
    {0x1002, 0x74a2, "MI308X"},
    {0x1002, 0x74a0, "MI300A"},
    {0x1002, 0x74a5, "MI325X"},
    {0x1002, 0x75a0, "MI350X"},
    {0x1002, 0x75a3, "MI355X"},
    {0x1002, 0x740c, "MI250"},  /* Ray: AMD-Instinct-MI250X-MI250 */
    {0x1002, 0x7408, "MI250X"},
    {0x1002, 0x740f, "MI210"},
    {0x1002, 0x738c, "MI100"},
    {0x1002, 0x66a1, "MI50"},
    /* Google TPU */
    {0x1ae0, 0x0027, "TPU-V3"},        /* v2 and v3 share this id */
    {0x1ae0, 0x005e, "TPU-V4"},
    {0x1ae0, 0x0063, "TPU-V5LITEPOD"},
    {0x1ae0, 0x0062, "TPU-V5P"},
    {0x1ae0, 0x006f, "TPU-V6E"},
    {0x1ae0, 0x0076, "TPU-V7X"},
    /* AWS Neuron */
    {0x1d0f, 0x7064, "Inferentia"},
    {0x1d0f, 0x7164, "Inferentia2"},
    {0x1d0f, 0x7264, "Trainium"},
    {0x1d0f, 0x7364, "Trainium2"},
    /* Intel Gaudi (Habana Labs) */
    {0x1da3, 0x1000, "Gaudi"},
    {0x1da3, 0x1020, "Gaudi2"},
    {0x1da3, 0x1060, "Gaudi3"},
    /* Intel GPUs */
    {0x8086, 0x0bd5, "Intel-GPU-Max-1550"},
    {0x8086, 0x0bda, "Intel-GPU-Max-1100"},
    {0x8086, 0x56c0, "Intel-Flex-170"},
    {0x8086, 0x56a0, "Intel-Arc-A770"},
};

/* Product names as vendor tools print them. A row matches when both of its
 * substrings (the second may be NULL) occur, case-insensitively; the first
 * matching row wins, so more specific rows come first. */
static const struct name_row {
    const char *a, *b;
    const char *sku;
} name_rows[] = {
    /* NVML's names: "NVIDIA GB200", "NVIDIA B300 SXM6 AC", "NVIDIA RTX PRO
     * 6000 Blackwell Server Edition"; a GB row before its B row, whose name
     * it contains */
    {"GH200", NULL, "GH200"},
    {"GB300", NULL, "GB300"},
    {"GB200", NULL, "GB200"},
    {"B300", NULL, "B300"},
    {"B200", NULL, "B200"},
    {"RTX PRO 6000", "Blackwell", "RTX-PRO-6000-Blackwell"},
    {"H200", NULL, "H200"},
    {"H100", NULL, "H100"},
    {"H800", NULL, "H800"},
    {"A100", "80G", "A100-80G"},
    {"A100", "40G", "A100-40G"},
    {"A100", NULL, "A100"},
    {"A10G", NULL, "A10G"},
    {"L40S", NULL, "L40S"},
    {"L40", NULL, "L40"},
    {"L4", NULL, "L4"},
    {"A10", NULL, "A10"},
    {"T4", NULL, "T4"},
    {"V100", NULL, "V100"},
    {"MI300X-HF", NULL, "MI300X-HF"},
    {"MI300X", NULL, "MI300X"},
    {"MI308X", NULL, "MI308X"},
    {"MI300A", NULL, "MI300A"},
    {"MI325X", NULL, "MI325X"},
    {"MI350X", NULL, "MI350X"},
    {"MI355X", NULL, "MI355X"},
    {"MI250X", NULL, "MI250X"},
    {"MI250", NULL, "MI250"},
    {"MI210", NULL, "MI210"},
    {"MI100", NULL, "MI100"},
    {"v6e", NULL, "TPU-V6E"},
    {"v5p", NULL, "TPU-V5P"},
    {"v5litepod", NULL, "TPU-V5LITEPOD"},
    {"v5e", NULL, "TPU-V5LITEPOD"},
    {"v4", NULL, "TPU-V4"},
    {"Trainium3", NULL, "Trainium3"},
    {"Trainium2", NULL, "Trainium2"},
    {"Trainium", NULL, "Trainium"},
    {"trn3", NULL, "Trainium3"},
    {"trn2", NULL, "Trainium2"},
    {"trn1", NULL, "Trainium"},
    {"Inferentia2", NULL, "Inferentia2"},
    {"inf2", NULL, "Inferentia2"},
    {"Inferentia", NULL, "Inferentia"},
    {"HL-225", NULL, "Gaudi2"},
    {"Gaudi3", NULL, "Gaudi3"},
    {"HL-325", NULL, "Gaudi3"},
    {"Gaudi2", NULL, "Gaudi2"},
    {"Gaudi", NULL, "Gaudi"},
    {"Max 1550", NULL, "Intel-GPU-Max-1550"},
    {"Max 1100", NULL, "Intel-GPU-Max-1100"},
};

const char *cr_accel_sku_by_pci(uint16_t vendor, uint16_t device)
{
    for (size_t i = 0; i < CR_ARRAY_SIZE(pci_rows); i++)
        if (pci_rows[i].vendor == vendor && pci_rows[i].device == device)
            return pci_rows[i].sku;
    return NULL;
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    return false;
}

const char *cr_accel_sku_by_name(const char *product)
{
    if (!product)
        return NULL;
    for (size_t i = 0; i < CR_ARRAY_SIZE(name_rows); i++)
        if (contains_ci(product, name_rows[i].a) &&
            (!name_rows[i].b || contains_ci(product, name_rows[i].b)))
            return name_rows[i].sku;
    return NULL;
}
