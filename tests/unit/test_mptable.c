/* MP table: parsed back the way Linux's mpparse finds and checks it. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/core/mptable.h"
#include "tests/lib/unit_suite.h"

#define RAM_SIZE 0x100000u

static uint8_t *ram;
static struct guest_mem gm;

static void ram_setup(void)
{
	ram = malloc(RAM_SIZE);
	ck_assert_ptr_nonnull(ram);
	memset(ram, 0xa5, RAM_SIZE);
	memset(&gm, 0, sizeof gm);
	ck_assert_int_eq(guest_mem_add_region(&gm, 0, RAM_SIZE, ram), 0);
}

static void ram_teardown(void)
{
	free(ram);
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)le16(p) | (uint32_t)le16(p + 2) << 16; }

static uint8_t sum(const uint8_t *p, size_t n)
{
	uint8_t s = 0;
	while (n--)
		s = (uint8_t)(s + *p++);
	return s;
}

struct parsed {
	unsigned cpus, bsp_count, buses, ioapics, ints, lints;
	uint8_t ioapic_id;
	uint32_t ioapic_addr;
	int apic_ids_in_order, ints_identity, lint_kinds; /* bit 0 ExtINT on LINT0, bit 1 NMI on LINT1 */
};

/* Finds the floating pointer by scanning the BIOS area on 16-byte
 * boundaries, as the kernel does, then walks every entry. */
static struct parsed parse(void)
{
	struct parsed r = { .apic_ids_in_order = 1, .ints_identity = 1 };
	const uint8_t *fp = NULL;
	for (uint32_t a = 0xf0000; a < 0x100000; a += 16)
		if (memcmp(ram + a, "_MP_", 4) == 0) {
			fp = ram + a;
			break;
		}
	ck_assert_ptr_nonnull(fp);
	ck_assert_uint_eq(fp[8], 1);	/* 16 bytes */
	ck_assert_uint_eq(fp[9], 4);	/* spec 1.4 */
	ck_assert_uint_eq(sum(fp, 16), 0);
	ck_assert_uint_eq(fp[11], 0);	/* table present, no default config */
	uint32_t ta = le32(fp + 4);
	ck_assert_uint_ge(ta, 0xf0000);
	ck_assert_uint_lt(ta + 44, RAM_SIZE);
	const uint8_t *t = ram + ta;
	ck_assert_mem_eq(t, "PCMP", 4);
	uint16_t len = le16(t + 4);
	ck_assert_uint_ge(len, 44);
	ck_assert_uint_le(ta + len, RAM_SIZE);
	ck_assert_uint_eq(t[6], 4);
	ck_assert_uint_eq(sum(t, len), 0);
	ck_assert_uint_eq(le32(t + 36), 0xfee00000u);
	ck_assert_uint_eq(le16(t + 40), 0); /* no extended table */
	unsigned count = le16(t + 34), seen = 0;
	size_t off = 44;
	while (off < len) {
		const uint8_t *e = t + off;
		switch (e[0]) {
		case 0:
			ck_assert_uint_le(off + 20, len);
			if (e[1] != r.cpus)
				r.apic_ids_in_order = 0;
			ck_assert(e[3] & 1); /* enabled */
			if (e[3] & 2) {
				r.bsp_count++;
				ck_assert_uint_eq(e[1], 0);
			}
			r.cpus++;
			off += 20;
			break;
		case 1:
			ck_assert_mem_eq(e + 2, "ISA   ", 6);
			r.buses++;
			off += 8;
			break;
		case 2:
			ck_assert(e[3] & 1);
			r.ioapic_id = e[1];
			r.ioapic_addr = le32(e + 4);
			r.ioapics++;
			off += 8;
			break;
		case 3:
			ck_assert_uint_eq(e[1], 0); /* vectored interrupt */
			ck_assert_uint_eq(e[4], 0); /* from the ISA bus */
			ck_assert_uint_eq(e[6], r.ioapic_id);
			if (e[5] != r.ints || e[7] != r.ints)
				r.ints_identity = 0;
			r.ints++;
			off += 8;
			break;
		case 4:
			ck_assert_uint_eq(e[6], 0xff); /* every local APIC */
			if (e[1] == 3 && e[7] == 0)
				r.lint_kinds |= 1;
			if (e[1] == 1 && e[7] == 1)
				r.lint_kinds |= 2;
			r.lints++;
			off += 8;
			break;
		default:
			ck_abort_msg("unknown MP entry type %u at %zu", e[0], off);
		}
		seen++;
	}
	ck_assert_uint_eq(off, len);
	ck_assert_uint_eq(seen, count);
	return r;
}

static void check_machine(unsigned n)
{
	ck_assert_int_eq(mptable_write(&gm, n), 0);
	struct parsed r = parse();
	ck_assert_uint_eq(r.cpus, n);
	ck_assert(r.apic_ids_in_order);
	ck_assert_uint_eq(r.bsp_count, 1);
	ck_assert_uint_eq(r.buses, 1);
	ck_assert_uint_eq(r.ioapics, 1);
	ck_assert_uint_eq(r.ioapic_addr, IOAPIC_ADDR);
	ck_assert_uint_ge(r.ioapic_id, n); /* distinct from every CPU's APIC ID */
	ck_assert_uint_eq(r.ints, IOAPIC_PINS);
	ck_assert(r.ints_identity);
	ck_assert_uint_eq(r.lints, 2);
	ck_assert_uint_eq(r.lint_kinds, 3);
}

START_TEST(one_cpu)
{
	check_machine(1);
}
END_TEST

START_TEST(four_cpus)
{
	check_machine(4);
}
END_TEST

START_TEST(max_cpus_fit)
{
	check_machine(MPTABLE_MAX_CPUS);
	/* Everything stays in the BIOS area, away from the EBDA below it. */
	for (uint32_t a = 0x9fc00; a < 0xf0000; a++)
		ck_assert_uint_eq(ram[a], 0xa5);
}
END_TEST

START_TEST(bad_cpu_counts_refused)
{
	ck_assert_int_eq(mptable_write(&gm, 0), -EINVAL);
	ck_assert_int_eq(mptable_write(&gm, MPTABLE_MAX_CPUS + 1), -EINVAL);
	ck_assert_int_eq(mptable_write(&gm, UINT32_MAX), -EINVAL);
	for (uint32_t a = 0; a < RAM_SIZE; a++)
		if (ram[a] != 0xa5)
			ck_abort_msg("written at 0x%x", a);
}
END_TEST

START_TEST(small_ram_efault)
{
	static uint8_t small[0xf0200]; /* room for 1 CPU, not for 64 */
	struct guest_mem g = { 0 };
	ck_assert_int_eq(guest_mem_add_region(&g, 0, 0x80000, small), 0);
	ck_assert_int_eq(mptable_write(&g, 2), -EFAULT);
	/* Ending inside the table is as bad as ending before it. */
	struct guest_mem g2 = { 0 };
	ck_assert_int_eq(guest_mem_add_region(&g2, 0, sizeof small, small), 0);
	ck_assert_int_eq(mptable_write(&g2, MPTABLE_MAX_CPUS), -EFAULT);
	ck_assert_int_eq(mptable_write(&g2, 1), 0);
}
END_TEST

Suite *mptable_suite(void)
{
	return unit_suite_fixture("mptable", "core", ram_setup, ram_teardown, 0,
				  one_cpu, four_cpus, max_cpus_fit,
				  bad_cpu_counts_refused, small_ram_efault);
}
