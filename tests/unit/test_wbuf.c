/* The wipe-on-free buffer: appends, drops and trims, the compaction that
 * reuses the front of the block, growth, and a size that cannot be had. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "lib/wbuf.h"
#include "tests/lib/unit_suite.h"

START_TEST(put_drop_trim)
{
	struct wbuf b = {0};

	ck_assert_uint_eq(wbuf_size(&b), 0);
	ck_assert_ptr_null(wbuf_data(&b));
	ck_assert_int_eq(wbuf_put(&b, "", 0), 0);
	ck_assert_ptr_null(wbuf_data(&b));
	ck_assert_int_eq(wbuf_puts(&b, "hello "), 0);
	ck_assert_int_eq(wbuf_put(&b, "world", 5), 0);
	ck_assert_uint_eq(wbuf_size(&b), 11);
	ck_assert_int_eq(memcmp(wbuf_data(&b), "hello world", 11), 0);
	wbuf_drop(&b, 6);
	ck_assert_uint_eq(wbuf_size(&b), 5);
	ck_assert_int_eq(memcmp(wbuf_data(&b), "world", 5), 0);
	wbuf_trim(&b, 2);
	ck_assert_uint_eq(wbuf_size(&b), 3);
	ck_assert_int_eq(memcmp(wbuf_data(&b), "wor", 3), 0);
	/* The trimmed bytes are wiped behind the live ones. */
	ck_assert_int_eq(b.p[b.len], 0);
	ck_assert_int_eq(b.p[b.len + 1], 0);
	wbuf_trim(&b, 100);
	ck_assert_uint_eq(wbuf_size(&b), 0);
	ck_assert_int_eq(wbuf_puts(&b, "abc"), 0);
	wbuf_drop(&b, 100);
	ck_assert_uint_eq(wbuf_size(&b), 0);
	ck_assert_uint_eq(b.off, 0);
	wbuf_free(&b);
	ck_assert_ptr_null(b.p);
	ck_assert_uint_eq(b.cap, 0);
	wbuf_free(&b);
}
END_TEST

START_TEST(compacts_before_growing)
{
	struct wbuf b = {0};
	uint8_t chunk[100];

	memset(chunk, 'x', sizeof chunk);
	ck_assert_int_eq(wbuf_reserve(&b, 1), 0);
	size_t cap = b.cap;
	ck_assert_uint_ge(cap, 200);
	ck_assert_uint_lt(cap, 300);
	ck_assert_int_eq(wbuf_put(&b, chunk, sizeof chunk), 0);
	ck_assert_int_eq(wbuf_put(&b, chunk, sizeof chunk), 0);
	uint8_t *block = b.p;
	wbuf_drop(&b, 150);
	/* 50 live bytes at 150: another 100 fit once they move to the front,
	 * so the block stays. */
	chunk[0] = 'y';
	ck_assert_int_eq(wbuf_put(&b, chunk, sizeof chunk), 0);
	ck_assert_ptr_eq(b.p, block);
	ck_assert_uint_eq(b.cap, cap);
	ck_assert_uint_eq(b.off, 0);
	ck_assert_uint_eq(wbuf_size(&b), 150);
	ck_assert_int_eq(wbuf_data(&b)[49], 'x');
	ck_assert_int_eq(wbuf_data(&b)[50], 'y');
	/* The vacated tail of the block is wiped. */
	ck_assert_int_eq(b.p[150], 0);
	ck_assert_int_eq(b.p[199], 0);
	/* More than the block holds: a larger one with the same bytes. */
	ck_assert_int_eq(wbuf_reserve(&b, cap), 0);
	ck_assert_uint_ge(b.cap, 150 + cap);
	ck_assert_uint_eq(wbuf_size(&b), 150);
	ck_assert_int_eq(wbuf_data(&b)[0], 'x');
	ck_assert_int_eq(wbuf_data(&b)[50], 'y');
	wbuf_reset(&b);
	ck_assert_uint_eq(wbuf_size(&b), 0);
	ck_assert_int_eq(b.p[0], 0);
	ck_assert_int_eq(b.p[149], 0);
	wbuf_free(&b);
}
END_TEST

START_TEST(impossible_size_refused)
{
	struct wbuf b = {0};

	ck_assert_int_eq(wbuf_puts(&b, "keep"), 0);
	ck_assert_int_eq(wbuf_reserve(&b, SIZE_MAX - 2), -ENOMEM);
	ck_assert_int_eq(wbuf_reserve(&b, SIZE_MAX / 4), -ENOMEM);
	ck_assert_uint_eq(wbuf_size(&b), 4);
	ck_assert_int_eq(memcmp(wbuf_data(&b), "keep", 4), 0);
	wbuf_free(&b);
}
END_TEST

Suite *wbuf_suite(void)
{
	return unit_suite("wbuf", "core", put_drop_trim,
			  compacts_before_growing, impossible_size_refused);
}
