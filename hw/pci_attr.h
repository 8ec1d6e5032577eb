/* The PCI attribute files the amd, intel and gaudi backends read from
 * /sys/bus/pci/devices/<address>/ (vendor, device, class, numa_node), and
 * PCI address checks. Private to those backends. */
#ifndef CORRAL_HW_PCI_ATTR_H
#define CORRAL_HW_PCI_ATTR_H

#include "base/base.h"

typedef struct hw_pci_attr {
    uint16_t vendor, device;
    uint32_t class_code; /* 24 bits: base class, subclass, programming interface */
    int numa;            /* -1 when the kernel does not know */
} hw_pci_attr_t;

/* Reads vendor, device and class (required) and numa_node (optional) of
 * the device at addr under root. On failure returns a negative code and
 * why names the file and what was expected in it. */
int hw_pci_attr_read(const char *root, const char *addr, hw_pci_attr_t *out, char *why,
                     size_t whysize);
/* "dddd:bb:dd.f" in lower-case hex, as sysfs names devices. */
bool hw_pci_addr_valid(const char *s);

#endif
