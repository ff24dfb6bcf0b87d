/* newc cpio writer: archives parsed back by an independent reader with
 * the kernel's rules (init/initramfs.c): 110-byte header, name and data
 * each padded to 4 bytes, "TRAILER!!!" last. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/core/cpio.h"
#include "tests/lib/unit_suite.h"

struct entry {
	char name[1100];
	unsigned mode, nlink;
	size_t size;
	const uint8_t *data;
};

static unsigned hex8(const uint8_t *p)
{
	unsigned v = 0;
	for (int i = 0; i < 8; i++) {
		char c = (char)p[i];
		unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
			   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
			   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 99u;
		ck_assert_msg(d < 16, "bad hex digit 0x%02x", (unsigned)p[i]);
		v = v << 4 | d;
	}
	return v;
}

static size_t up4(size_t n) { return (n + 3) & ~(size_t)3; }

/* Reads the entry at *off and advances past its data padding. */
static struct entry next(const struct cpio *c, size_t *off)
{
	struct entry e;
	memset(&e, 0, sizeof e);
	const uint8_t *h = c->buf + *off;
	ck_assert_uint_eq(*off % 4, 0);
	ck_assert_uint_le(*off + 110, c->len);
	ck_assert_mem_eq(h, "070701", 6);
	e.mode = hex8(h + 14);
	e.nlink = hex8(h + 38);
	e.size = hex8(h + 54);
	size_t namesize = hex8(h + 94);
	ck_assert_uint_eq(hex8(h + 102), 0); /* check field unused in newc */
	ck_assert_uint_ge(namesize, 2);
	ck_assert_uint_le(namesize, sizeof e.name);
	ck_assert_uint_le(*off + 110 + namesize, c->len);
	ck_assert_uint_eq(h[110 + namesize - 1], 0);
	memcpy(e.name, h + 110, namesize);
	ck_assert_uint_eq(strlen(e.name), namesize - 1);
	size_t d = *off + up4(110 + namesize);
	for (size_t i = *off + 110 + namesize; i < d; i++)
		ck_assert_uint_eq(c->buf[i], 0);
	ck_assert_uint_le(d + e.size, c->len);
	e.data = c->buf + d;
	*off = up4(d + e.size);
	ck_assert_uint_le(*off, c->len);
	for (size_t i = d + e.size; i < *off; i++)
		ck_assert_uint_eq(c->buf[i], 0);
	return e;
}

START_TEST(archive_parses_back)
{
	struct cpio c;
	cpio_init(&c);
	cpio_add_dir(&c, "kbox");
	const char argv[] = "sh\0-c\0echo hi\0";
	cpio_add_file(&c, "kbox/argv", 0644, argv, sizeof argv - 1);
	cpio_add_file(&c, "kbox/x", 0755, "abcde", 5);
	cpio_add_file(&c, "kbox/empty", 0600, NULL, 0);
	cpio_add_file(&c, "kbox/suid-stripped", 0177777, "z", 1);
	ck_assert_int_eq(cpio_finish(&c), 0);
	ck_assert_int_eq(c.err, 0);
	ck_assert_uint_eq(c.len % 4, 0);

	size_t off = 0;
	struct entry e = next(&c, &off);
	ck_assert_str_eq(e.name, "kbox");
	ck_assert_uint_eq(e.mode, 040755);
	ck_assert_uint_eq(e.size, 0);
	e = next(&c, &off);
	ck_assert_str_eq(e.name, "kbox/argv");
	ck_assert_uint_eq(e.mode, 0100644);
	ck_assert_uint_eq(e.size, sizeof argv - 1);
	ck_assert_mem_eq(e.data, argv, sizeof argv - 1);
	ck_assert_uint_ge(e.nlink, 1);
	e = next(&c, &off);
	ck_assert_str_eq(e.name, "kbox/x");
	ck_assert_uint_eq(e.mode, 0100755);
	ck_assert_mem_eq(e.data, "abcde", 5);
	e = next(&c, &off);
	ck_assert_str_eq(e.name, "kbox/empty");
	ck_assert_uint_eq(e.size, 0);
	e = next(&c, &off);
	/* Only permission bits come from the caller: still a regular file. */
	ck_assert_uint_eq(e.mode, 0107777);
	e = next(&c, &off);
	ck_assert_str_eq(e.name, "TRAILER!!!");
	ck_assert_uint_eq(off, c.len);
	cpio_free(&c);
	ck_assert_ptr_null(c.buf);
}
END_TEST

START_TEST(every_name_length_pads)
{
	/* Name lengths 1..8 cover every padding remainder. */
	struct cpio c;
	cpio_init(&c);
	char name[9] = "abcdefgh";
	for (int n = 8; n >= 1; n--) {
		name[n] = '\0';
		cpio_add_file(&c, name, 0644, name, (size_t)n);
	}
	ck_assert_int_eq(cpio_finish(&c), 0);
	ck_assert_uint_eq(c.len % 4, 0);
	size_t off = 0;
	for (int n = 8; n >= 1; n--) {
		struct entry e = next(&c, &off);
		ck_assert_uint_eq(strlen(e.name), (size_t)n);
		ck_assert_uint_eq(e.size, (size_t)n);
		ck_assert_mem_eq(e.data, "abcdefgh", (size_t)n);
	}
	ck_assert_str_eq(next(&c, &off).name, "TRAILER!!!");
	ck_assert_uint_eq(off, c.len);
	cpio_free(&c);
}
END_TEST

START_TEST(large_file)
{
	size_t n = (3u << 20) + 3;
	uint8_t *d = malloc(n);
	ck_assert_ptr_nonnull(d);
	for (size_t i = 0; i < n; i++)
		d[i] = (uint8_t)(i * 31 + (i >> 12));
	struct cpio c;
	cpio_init(&c);
	cpio_add_file(&c, "big", 0644, d, n);
	ck_assert_int_eq(cpio_finish(&c), 0);
	ck_assert_uint_eq(c.len % 4, 0);
	size_t off = 0;
	struct entry e = next(&c, &off);
	ck_assert_uint_eq(e.size, n);
	ck_assert(memcmp(e.data, d, n) == 0);
	ck_assert_str_eq(next(&c, &off).name, "TRAILER!!!");
	cpio_free(&c);
	free(d);
}
END_TEST

START_TEST(name_limits)
{
	char *name = malloc(1025);
	ck_assert_ptr_nonnull(name);
	memset(name, 'n', 1024);
	name[1023] = '\0';
	struct cpio c;
	cpio_init(&c);
	cpio_add_file(&c, name, 0644, "x", 1);
	ck_assert_int_eq(cpio_finish(&c), 0);
	size_t off = 0;
	ck_assert_uint_eq(strlen(next(&c, &off).name), 1023);
	cpio_free(&c);

	name[1023] = 'n';
	name[1024] = '\0';
	cpio_init(&c);
	cpio_add_file(&c, name, 0644, "x", 1);
	ck_assert_int_eq(c.err, -EINVAL);
	ck_assert_int_eq(cpio_finish(&c), -EINVAL);
	cpio_free(&c);
	free(name);
}
END_TEST

START_TEST(errors_are_sticky)
{
	struct cpio c;
	cpio_init(&c);
	cpio_add_dir(&c, "ok");
	size_t len = c.len;
	cpio_add_file(&c, "", 0644, "x", 1);
	ck_assert_int_eq(c.err, -EINVAL);
	/* Nothing more is appended, however valid. */
	cpio_add_dir(&c, "fine");
	cpio_add_file(&c, "fine/f", 0644, "y", 1);
	ck_assert_uint_eq(c.len, len);
	ck_assert_int_eq(cpio_finish(&c), -EINVAL);
	ck_assert_uint_eq(c.len, len);
	cpio_free(&c);

	cpio_init(&c);
	cpio_add_dir(&c, "");
	ck_assert_int_eq(cpio_finish(&c), -EINVAL);
	cpio_free(&c);
}
END_TEST

START_TEST(size_beyond_field_refused_before_reading)
{
	/* c_filesize holds 8 hex digits; the data pointer is never read. */
	static const uint8_t one = 1;
	struct cpio c;
	cpio_init(&c);
	cpio_add_file(&c, "huge", 0644, &one, (size_t)1 << 32);
	ck_assert_int_eq(c.err, -EINVAL);
	ck_assert_uint_eq(c.len, 0);
	cpio_add_file(&c, "huge", 0644, &one, SIZE_MAX);
	ck_assert_int_eq(cpio_finish(&c), -EINVAL);
	cpio_free(&c);
}
END_TEST

START_TEST(finish_alone_is_a_valid_archive)
{
	struct cpio c;
	cpio_init(&c);
	ck_assert_int_eq(cpio_finish(&c), 0);
	size_t off = 0;
	ck_assert_str_eq(next(&c, &off).name, "TRAILER!!!");
	ck_assert_uint_eq(off, c.len);
	cpio_free(&c);
}
END_TEST

Suite *cpio_suite(void)
{
	return unit_suite("cpio", "core", archive_parses_back,
			  every_name_length_pads, large_file, name_limits,
			  errors_are_sticky,
			  size_beyond_field_refused_before_reading,
			  finish_alone_is_a_valid_archive);
}
