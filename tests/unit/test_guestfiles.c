#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/sandbox/guestfiles.h"
#include "tests/lib/unit_suite.h"

static uint8_t *find(uint8_t *b, size_t len, const char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i + n <= len; i++)
		if (memcmp(b + i, s, n) == 0)
			return b + i;
	return NULL;
}

START_TEST(appends_padded_archive)
{
	size_t len = 5;
	uint8_t *img = malloc(len);
	memcpy(img, "abcde", 5);
	const char *env[] = { "A=1", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" };
	ck_assert_int_eq(guestfiles_append(&img, &len, env, 2, "-----BEGIN CERTIFICATE-----\n", "my-box.1"), 0);
	ck_assert_mem_eq(img, "abcde\0\0\0", 8);
	ck_assert_mem_eq(img + 8, "070701", 6);
	ck_assert_int_eq(len % 4, 0);
	ck_assert_ptr_nonnull(find(img, len, "kbox/env"));
	ck_assert_ptr_nonnull(find(img, len, "kbox/ca.pem"));
	/* The entries, NUL-separated, in order. */
	uint8_t *e = find(img, len, "A=1");
	ck_assert_ptr_nonnull(e);
	ck_assert_mem_eq(e, "A=1\0SSL_CERT_FILE=", 18);
	ck_assert_ptr_nonnull(find(img, len, "TRAILER!!!"));
	/* The host name, as a file of its own. */
	ck_assert_ptr_nonnull(find(img, len, "kbox/hostname"));
	ck_assert_ptr_nonnull(find(img, len, "my-box.1"));
	free(img);
}
END_TEST

START_TEST(refuses_bad_hostnames_unchanged)
{
	size_t len = 4;
	uint8_t *img = calloc(1, len);
	uint8_t *before = img;
	char long_name[GUESTFILES_HOSTNAME_MAX + 2];
	memset(long_name, 'a', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = '\0';
	const char *bad[] = { "", "a b", "a\nb", "a/b", "a:b", long_name };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_int_eq(guestfiles_append(&img, &len, NULL, 0, NULL, bad[i]), -EINVAL);
	ck_assert_ptr_eq(img, before);
	ck_assert_uint_eq(len, 4);
	long_name[GUESTFILES_HOSTNAME_MAX] = '\0';
	ck_assert_int_eq(guestfiles_append(&img, &len, NULL, 0, NULL, long_name), 0);
	free(img);
}
END_TEST

START_TEST(no_ca_no_file)
{
	size_t len = 4;
	uint8_t *img = calloc(1, len);
	ck_assert_int_eq(guestfiles_append(&img, &len, NULL, 0, NULL, NULL), 0);
	ck_assert_ptr_nonnull(find(img, len, "kbox/env"));
	ck_assert_ptr_null(find(img, len, "kbox/ca.pem"));
	ck_assert_ptr_null(find(img, len, "kbox/hostname"));
	free(img);
}
END_TEST

START_TEST(refuses_bad_entries_unchanged)
{
	size_t len = 4;
	uint8_t *img = calloc(1, len);
	uint8_t *before = img;
	const char *noeq[] = { "NOEQUALS" };
	const char *noname[] = { "=x" };
	ck_assert_int_eq(guestfiles_append(&img, &len, noeq, 1, NULL, NULL), -EINVAL);
	ck_assert_int_eq(guestfiles_append(&img, &len, noname, 1, NULL, NULL), -EINVAL);
	size_t big = GUESTFILES_MAX_ENV_BYTES;
	char *huge = malloc(big + 3);
	memset(huge, 'x', big + 2);
	huge[0] = 'A';
	huge[1] = '=';
	huge[big + 2] = '\0';
	const char *h[] = { huge };
	ck_assert_int_eq(guestfiles_append(&img, &len, h, 1, NULL, NULL), -EINVAL);
	ck_assert_ptr_eq(img, before);
	ck_assert_uint_eq(len, 4);
	free(huge);
	free(img);
}
END_TEST

Suite *guestfiles_suite(void)
{
	return unit_suite("guestfiles", "core", appends_padded_archive,
			  no_ca_no_file, refuses_bad_entries_unchanged,
			  refuses_bad_hostnames_unchanged);
}
