#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "lib/statebuf.h"
#include "tests/lib/unit_suite.h"

START_TEST(round_trip)
{
	struct statebuf_writer w;
	statebuf_init(&w);
	statebuf_u16(&w, 0xbeef);
	statebuf_u32(&w, 0x01020304u);
	statebuf_u64(&w, 0x1122334455667788ull);
	statebuf_put(&w, "abc", 3);
	statebuf_put(&w, NULL, 0);
	statebuf_pad(&w, 8);
	ck_assert_int_eq(w.err, 0);
	ck_assert_uint_eq(w.len, 24);
	ck_assert_uint_eq(w.buf[2], 0x04); /* little-endian */
	ck_assert_uint_eq(statebuf_le32(w.buf + 2), 0x01020304u);
	ck_assert(statebuf_le64(w.buf + 6) == 0x1122334455667788ull);
	for (size_t i = 17; i < 24; i++)
		ck_assert_uint_eq(w.buf[i], 0);
	statebuf_set_u32(&w, 2, 7);
	statebuf_set_u64(&w, 6, 0x8877665544332211ull);
	ck_assert_int_eq(w.err, 0);

	struct statebuf_reader r;
	statebuf_reader_init(&r, w.buf, w.len);
	ck_assert_uint_eq(statebuf_get_u16(&r), 0xbeef);
	ck_assert_uint_eq(statebuf_get_u32(&r), 7);
	ck_assert(statebuf_get_u64(&r) == 0x8877665544332211ull);
	char abc[3];
	statebuf_get(&r, abc, 3);
	ck_assert_mem_eq(abc, "abc", 3);
	ck_assert_uint_eq(statebuf_left(&r), 7); /* the padding */
	ck_assert_int_eq(r.err, 0);
	statebuf_free(&w);
	statebuf_free(&w);
}
END_TEST

START_TEST(reader_latches_overrun)
{
	const uint8_t b[6] = { 1, 2, 3, 4, 5, 6 };
	struct statebuf_reader r;
	statebuf_reader_init(&r, b, sizeof b);
	ck_assert_uint_eq(statebuf_get_u32(&r), 0x04030201u);
	ck_assert_uint_eq(statebuf_get_u32(&r), 0); /* only 2 left */
	ck_assert_int_eq(r.err, -EBADMSG);
	ck_assert_uint_eq(statebuf_get_u16(&r), 0); /* stays failed */
	ck_assert_uint_eq(statebuf_left(&r), 0);
	uint8_t big[4] = { 9, 9, 9, 9 };
	statebuf_get(&r, big, sizeof big);
	ck_assert_uint_eq(big[0] | big[1] | big[2] | big[3], 0);

	statebuf_reader_init(&r, NULL, 100);
	ck_assert_uint_eq(statebuf_left(&r), 0);
	ck_assert(statebuf_get_u64(&r) == 0);
	ck_assert_int_eq(r.err, -EBADMSG);
}
END_TEST

START_TEST(writer_refusals)
{
	struct statebuf_writer w;
	statebuf_init(&w);
	statebuf_u32(&w, 1);
	statebuf_set_u32(&w, 1, 5); /* runs past the end */
	ck_assert_int_eq(w.err, -EINVAL);
	statebuf_u32(&w, 2);
	ck_assert_uint_eq(w.len, 4); /* nothing after a failure */
	statebuf_free(&w);

	statebuf_init(&w);
	statebuf_pad(&w, 3);
	ck_assert_int_eq(w.err, -EINVAL);
	statebuf_free(&w);

	statebuf_init(&w);
	statebuf_pad(&w, 8192);
	ck_assert_int_eq(w.err, -EINVAL);
	statebuf_free(&w);

	statebuf_init(&w);
	statebuf_u64(&w, 1);
	statebuf_put(&w, "", (size_t)STATEBUF_MAX); /* refused before anything is read */
	ck_assert_int_eq(w.err, -EFBIG);
	ck_assert_uint_eq(w.len, 8);
	statebuf_free(&w);

	statebuf_init(&w);
	statebuf_set_u64(&w, 0, 1);
	ck_assert_int_eq(w.err, -EINVAL);
	statebuf_free(&w);
}
END_TEST

Suite *statebuf_suite(void)
{
	return unit_suite("statebuf", "statebuf", round_trip,
			  reader_latches_overrun, writer_refusals);
}
