/* Growable arrays: doubling from the first capacity, enough at once for a
 * large need, the bound, sizes a size_t cannot count, and nothing touched
 * on failure (a failing allocation is left out: under ASan it aborts). */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "lib/grow.h"
#include "tests/lib/unit_suite.h"

struct pair {
	uint64_t a, b;
};

START_TEST(doubles_from_first)
{
	struct pair *v = NULL;
	size_t cap = 0;

	ck_assert_int_eq(grow_array(&v, &cap, 0, sizeof *v, 8, 0), 0);
	ck_assert_ptr_null(v);
	ck_assert_uint_eq(cap, 0);
	ck_assert_int_eq(grow_array(&v, &cap, 1, sizeof *v, 8, 0), 0);
	ck_assert_ptr_nonnull(v);
	ck_assert_uint_eq(cap, 8);
	for (size_t i = 0; i < 8; i++)
		v[i] = (struct pair){i, ~i};
	/* Enough already: nothing moves. */
	struct pair *same = v;
	ck_assert_int_eq(grow_array(&v, &cap, 8, sizeof *v, 8, 0), 0);
	ck_assert_ptr_eq(v, same);
	ck_assert_int_eq(grow_array(&v, &cap, 9, sizeof *v, 8, 0), 0);
	ck_assert_uint_eq(cap, 16);
	/* A need far past the next doubling is met at once. */
	ck_assert_int_eq(grow_array(&v, &cap, 100, sizeof *v, 8, 0), 0);
	ck_assert_uint_eq(cap, 128);
	for (size_t i = 0; i < 8; i++)
		ck_assert(v[i].a == i && v[i].b == ~i);
	free(v);
	/* No first capacity: from one. */
	v = NULL;
	cap = 0;
	ck_assert_int_eq(grow_array(&v, &cap, 3, sizeof *v, 0, 0), 0);
	ck_assert_uint_eq(cap, 4);
	free(v);
}
END_TEST

START_TEST(bounded_by_max)
{
	char *b = NULL;
	size_t cap = 0;

	ck_assert_int_eq(grow_array(&b, &cap, 600, 1, 256, 1000), 0);
	ck_assert_uint_eq(cap, 1000); /* 1024 would pass the bound */
	ck_assert_int_eq(grow_array(&b, &cap, 1000, 1, 256, 1000), 0);
	char *kept = b;
	ck_assert_int_eq(grow_array(&b, &cap, 1001, 1, 256, 1000), -E2BIG);
	ck_assert_ptr_eq(b, kept);
	ck_assert_uint_eq(cap, 1000);
	free(b);
	/* A bound that is a power of two times first is reached exactly. */
	b = NULL;
	cap = 0;
	for (size_t need = 1; need <= 1024; need++)
		ck_assert_int_eq(grow_array(&b, &cap, need, 1, 64, 1024), 0);
	ck_assert_uint_eq(cap, 1024);
	ck_assert_int_eq(grow_array(&b, &cap, 1025, 1, 64, 1024), -E2BIG);
	free(b);
}
END_TEST

START_TEST(impossible_sizes)
{
	struct pair *v = NULL;
	size_t cap = 0;

	ck_assert_int_eq(grow_array(&v, &cap, SIZE_MAX / sizeof *v + 1, sizeof *v, 8, 0), -E2BIG);
	ck_assert_ptr_null(v);
	ck_assert_uint_eq(cap, 0);
	/* One element short of the bound is still refused when a size_t
	 * cannot count its bytes. */
	ck_assert_int_eq(grow_array(&v, &cap, SIZE_MAX / 2, sizeof *v, 4, 0), -E2BIG);
	ck_assert_ptr_null(v);
}
END_TEST

Suite *grow_suite(void)
{
	return unit_suite("grow", "core", doubles_from_first, bounded_by_max,
			  impossible_sizes);
}
