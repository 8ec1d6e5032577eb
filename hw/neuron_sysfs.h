/* Parsers for what the AWS Neuron driver publishes under
 * /sys/devices/virtual/neuron_device/neuronN/, and the NeuronCore lists
 * NEURON_RT_VISIBLE_CORES takes. Pure: strings in, numbers out.
 *
 * Facts (aws-neuron-driver, Neuron sysfs user guide): core_count is the
 * device's NeuronCore count as a bare decimal ("2"); connected_devices lists
 * the device ids its NeuronLinks reach, ", "-separated ("12, 3, 4, 1"),
 * empty when it has none. NEURON_RT_VISIBLE_CORES takes one core, an
 * inclusive range ("0-3") or a comma-separated list ("0,1,6,7"). */
#ifndef CORRAL_HW_NEURON_SYSFS_H
#define CORRAL_HW_NEURON_SYSFS_H

#include "base/base.h"

#define NEURON_MAX_DEVICES 64 /* the driver's MAX_NEURON_DEVICE_COUNT */
#define NEURON_MAX_CORES_PER_DEVICE 64

/* core_count: 1..NEURON_MAX_CORES_PER_DEVICE. Returns 0, CR_EPARSE or CR_ERANGE. */
int neuron_parse_core_count(const char *s, int *out);
/* connected_devices: ids in [0, NEURON_MAX_DEVICES), separated by commas
 * and/or blanks, each at most once. Returns how many were stored in
 * out[0..max) (0 for an empty file) or CR_EPARSE / CR_ERANGE. */
int neuron_parse_connected(const char *s, int *out, size_t max);
/* An isolation id: "4" or "4-5". Returns 0 or CR_EPARSE. */
int neuron_parse_core_range(const char *s, int *first, int *last);
/* The compact NEURON_RT_VISIBLE_CORES value for a set of cores (any order,
 * duplicates ignored): "a-b" when they are one run, else "a,b,c". Appends
 * to out; an empty set appends "". */
void neuron_format_cores(const int *cores, size_t n, cr_buf_t *out);

#endif
