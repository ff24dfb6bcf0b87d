/* Intel MultiProcessor Specification 1.4 tables: how a guest without ACPI
 * learns its CPUs, its IO-APIC and how ISA interrupts are wired. */
#ifndef KBOX_MPTABLE_H
#define KBOX_MPTABLE_H

#include <stdint.h>

#include "lib/guest_mem.h"

#define MPTABLE_ADDR     0xf0000ull /* BIOS area: reserved in e820, scanned by Linux */
#define MPTABLE_MAX_CPUS 64u
#define IOAPIC_ADDR      0xfec00000u
#define IOAPIC_PINS      24u

/* Write the floating pointer and configuration table for ncpus processors
 * (APIC IDs 0..ncpus-1, CPU 0 the bootstrap processor), one ISA bus and an
 * IO-APIC whose pins 0..23 are routed as ISA interrupts 0..23.  Returns
 * 0, -EINVAL for 0 or more than MPTABLE_MAX_CPUS CPUs, -EFAULT if the
 * table does not fit in guest RAM. */
int mptable_write(const struct guest_mem *gm, unsigned ncpus);

#endif
