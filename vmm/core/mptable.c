#include "vmm/core/mptable.h"

#include <errno.h>
#include <string.h>

/* Entry layouts from the MP specification; all fields little-endian and
 * packed, written byte by byte so no struct padding can leak in. */
enum { MP_PROC = 0, MP_BUS = 1, MP_IOAPIC = 2, MP_INTSRC = 3, MP_LINTSRC = 4 };
enum { MP_INT = 0, MP_NMI = 1, MP_EXTINT = 3 };

/* 16 + 44 + 64 CPUs * 20 + 8 + 8 + 24 pins * 8 + 2 * 8 = 1564 bytes at
 * most, so put() never needs a bounds check. */
struct mp_buf {
	uint8_t b[2048];
	unsigned len;
};

static void put(struct mp_buf *m, const void *p, unsigned n)
{
	memcpy(m->b + m->len, p, n);
	m->len += n;
}
static void put8(struct mp_buf *m, uint8_t v) { put(m, &v, 1); }
static void put16(struct mp_buf *m, uint16_t v)
{
	uint8_t b[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
	put(m, b, 2);
}
static void put32(struct mp_buf *m, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
	put(m, b, 4);
}

static uint8_t checksum(const uint8_t *p, unsigned n)
{
	uint8_t s = 0;
	for (unsigned i = 0; i < n; i++)
		s = (uint8_t)(s + p[i]);
	return (uint8_t)-s;
}

int mptable_write(const struct guest_mem *gm, unsigned ncpus)
{
	if (ncpus == 0 || ncpus > MPTABLE_MAX_CPUS)
		return -EINVAL;
	struct mp_buf m = { .len = 0 };
	const uint32_t table = (uint32_t)MPTABLE_ADDR + 16;
	const uint8_t ioapic_id = (uint8_t)ncpus;

	/* Floating pointer structure. */
	put(&m, "_MP_", 4);
	put32(&m, table);
	put8(&m, 1);	/* length in 16-byte units */
	put8(&m, 4);	/* spec revision 1.4 */
	put8(&m, 0);	/* checksum, below */
	put8(&m, 0);	/* feature 1: 0 = a configuration table is present */
	put32(&m, 0);	/* features 2-5 */
	m.b[10] = checksum(m.b, 16);

	/* Configuration table header; length, count and checksum below. */
	unsigned hdr = m.len;
	put(&m, "PCMP", 4);
	put16(&m, 0);
	put8(&m, 4);
	put8(&m, 0);
	put(&m, "KBOX    ", 8);
	put(&m, "KBOX-VM     ", 12);
	put32(&m, 0);	/* OEM table pointer */
	put16(&m, 0);	/* OEM table size */
	put16(&m, 0);	/* entry count */
	put32(&m, 0xfee00000u); /* local APIC address */
	put16(&m, 0);	/* extended table length */
	put8(&m, 0);	/* extended checksum */
	put8(&m, 0);	/* reserved */
	uint16_t entries = 0;

	for (unsigned i = 0; i < ncpus; i++) {
		put8(&m, MP_PROC);
		put8(&m, (uint8_t)i);		/* APIC ID */
		put8(&m, 0x14);			/* APIC version */
		put8(&m, (uint8_t)(1 | (i == 0 ? 2 : 0))); /* enabled, BSP */
		put32(&m, 0x600);		/* signature: family 6 */
		put32(&m, 0x201);		/* features: FPU, APIC */
		put32(&m, 0);
		put32(&m, 0);
		entries++;
	}
	put8(&m, MP_BUS);
	put8(&m, 0);
	put(&m, "ISA   ", 6);
	entries++;
	put8(&m, MP_IOAPIC);
	put8(&m, ioapic_id);
	put8(&m, 0x11);
	put8(&m, 1);	/* usable */
	put32(&m, IOAPIC_ADDR);
	entries++;
	for (unsigned pin = 0; pin < IOAPIC_PINS; pin++) {
		put8(&m, MP_INTSRC);
		put8(&m, MP_INT);
		put16(&m, 0);	/* conforming polarity and trigger */
		put8(&m, 0);	/* source bus: ISA */
		put8(&m, (uint8_t)pin);
		put8(&m, ioapic_id);
		put8(&m, (uint8_t)pin);
		entries++;
	}
	put8(&m, MP_LINTSRC);
	put8(&m, MP_EXTINT);
	put16(&m, 0);
	put8(&m, 0);
	put8(&m, 0);
	put8(&m, 0xff);	/* all local APICs */
	put8(&m, 0);	/* LINT0 */
	entries++;
	put8(&m, MP_LINTSRC);
	put8(&m, MP_NMI);
	put16(&m, 0);
	put8(&m, 0);
	put8(&m, 0);
	put8(&m, 0xff);
	put8(&m, 1);	/* LINT1 */
	entries++;

	uint16_t len = (uint16_t)(m.len - hdr);
	m.b[hdr + 4] = (uint8_t)len;
	m.b[hdr + 5] = (uint8_t)(len >> 8);
	m.b[hdr + 34] = (uint8_t)entries;
	m.b[hdr + 35] = (uint8_t)(entries >> 8);
	m.b[hdr + 7] = checksum(m.b + hdr, len);

	return guest_mem_write(gm, MPTABLE_ADDR, m.b, m.len);
}
