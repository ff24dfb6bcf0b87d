#include <check.h>
#include <errno.h>
#include <stdint.h>

#include "lib/guest_mem.h"
#include "tests/lib/unit_suite.h"

static uint8_t ram_lo[4096], ram_hi[4096];

static struct guest_mem two_regions(void)
{
	struct guest_mem gm = { 0 };
	ck_assert_int_eq(guest_mem_add_region(&gm, 0, sizeof ram_lo, ram_lo), 0);
	ck_assert_int_eq(guest_mem_add_region(&gm, 0x100000000ull, sizeof ram_hi, ram_hi), 0);
	return gm;
}

START_TEST(inside_ranges_map)
{
	struct guest_mem gm = two_regions();
	ck_assert_ptr_eq(guest_mem_ptr(&gm, 0, 4096), ram_lo);
	ck_assert_ptr_eq(guest_mem_ptr(&gm, 4095, 1), ram_lo + 4095);
	ck_assert_ptr_eq(guest_mem_ptr(&gm, 0x100000010ull, 16), ram_hi + 16);
	ck_assert_uint_eq(guest_mem_total(&gm), 8192);
}
END_TEST

START_TEST(outside_and_straddling_refused)
{
	struct guest_mem gm = two_regions();
	ck_assert_ptr_null(guest_mem_ptr(&gm, 4096, 1));
	ck_assert_ptr_null(guest_mem_ptr(&gm, 4095, 2));
	ck_assert_ptr_null(guest_mem_ptr(&gm, 0, 4097));
	ck_assert_ptr_null(guest_mem_ptr(&gm, 0xfffff000ull, 0x2000));
	ck_assert_ptr_null(guest_mem_ptr(&gm, 0x100000000ull + 4096, 0));
}
END_TEST

START_TEST(overflowing_sums_refused)
{
	struct guest_mem gm = two_regions();
	ck_assert_ptr_null(guest_mem_ptr(&gm, 16, UINT64_MAX));
	ck_assert_ptr_null(guest_mem_ptr(&gm, UINT64_MAX, 2));
	ck_assert_ptr_null(guest_mem_ptr(&gm, UINT64_MAX - 1, UINT64_MAX));
	ck_assert_ptr_null(guest_mem_ptr(&gm, 0x100000000ull + 8, UINT64_MAX - 4));
}
END_TEST

START_TEST(copy_helpers_are_all_or_nothing)
{
	struct guest_mem gm = two_regions();
	uint8_t buf[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	ck_assert_int_eq(guest_mem_write(&gm, 4092, buf, 8), -EFAULT);
	ck_assert_int_eq(guest_mem_write(&gm, 100, buf, 8), 0);
	uint8_t out[8] = { 0 };
	ck_assert_int_eq(guest_mem_read(&gm, out, 100, 8), 0);
	ck_assert_mem_eq(out, buf, 8);
	ck_assert_int_eq(guest_mem_read(&gm, out, 4090, 8), -EFAULT);
}
END_TEST

START_TEST(bad_regions_refused)
{
	struct guest_mem gm = { 0 };
	ck_assert_int_eq(guest_mem_add_region(&gm, 0, 0, ram_lo), -EINVAL);
	ck_assert_int_eq(guest_mem_add_region(&gm, UINT64_MAX - 10, 4096, ram_lo), -EINVAL);
	ck_assert_int_eq(guest_mem_add_region(&gm, 0x1000, 4096, ram_lo), 0);
	ck_assert_int_eq(guest_mem_add_region(&gm, 0x1800, 4096, ram_hi), -EINVAL);
	ck_assert_int_eq(guest_mem_add_region(&gm, 0, 0x1001, ram_hi), -EINVAL);
	ck_assert_int_eq(guest_mem_add_region(&gm, 0, 0x1000, ram_hi), 0);
}
END_TEST

Suite *guest_mem_suite(void)
{
	return unit_suite("guest_mem", "core", inside_ranges_map,
			  outside_and_straddling_refused,
			  overflowing_sums_refused,
			  copy_helpers_are_all_or_nothing, bad_regions_refused);
}
