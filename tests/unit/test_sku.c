/* hw/sku.c: the tables that name an accelerator from its PCI ids or its
 * product name. Expected values: the PCI ID Repository
 * (https://pci-ids.ucw.cz: 10de:2330 "GH100 [H100 SXM5 80GB]", 1002:74a1
 * "Aqua Vanjaram [Instinct MI300X]") and Ray's accelerator type names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <corral/accel.h>

/* Pins the vendor half of the PCI match (cr_accel_sku_by_pci compares the
 * vendor id too): a device id is only unique within its vendor, so the same
 * number under another vendor is not that accelerator. */
static void test_by_pci_needs_the_vendor(void **state)
{
    assert_string_equal(cr_accel_sku_by_pci(0x10de, 0x2330), "H100");
    assert_string_equal(cr_accel_sku_by_pci(0x1002, 0x74a1), "MI300X");
    assert_null(cr_accel_sku_by_pci(0x1002, 0x2330));
    assert_null(cr_accel_sku_by_pci(0x8086, 0x2330));
    assert_null(cr_accel_sku_by_pci(0x10de, 0x74a1));
    assert_null(cr_accel_sku_by_pci(0x10de, 0x0000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_by_pci_needs_the_vendor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
