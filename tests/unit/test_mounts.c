/* `-v HOST:GUEST[:ro]` parsing: what is refused and why. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/mounts.h"

static char dir[64], file[96];
static struct mounts ms;
static char err[512];

static void setup(void)
{
	strcpy(dir, "/tmp/kbox-mounts-unit.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof file, "%s/f", dir);
	FILE *f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	memset(&ms, 0, sizeof ms);
	err[0] = '\0';
}

static void teardown(void)
{
	unlink(file);
	rmdir(dir);
}

/* mounts_parse of host followed by rest. */
static int parse(const char *host, const char *rest)
{
	char arg[512];
	snprintf(arg, sizeof arg, "%s%s", host, rest);
	return mounts_parse(&ms, arg, err, sizeof err);
}

START_TEST(good)
{
	ck_assert_int_eq(parse(dir, ":/workspace"), 0);
	ck_assert_int_eq(parse(dir, ":/cfg/x/:ro"), 0);
	ck_assert_int_eq(parse(dir, ":/rw:rw"), 0);
	ck_assert_uint_eq(ms.n, 3);
	ck_assert_str_eq(ms.m[0].host, dir);
	ck_assert_str_eq(ms.m[0].guest, "/workspace");
	ck_assert(!ms.m[0].readonly);
	ck_assert_str_eq(ms.m[1].guest, "/cfg/x");
	ck_assert(ms.m[1].readonly);
	ck_assert(!ms.m[2].readonly);
	mounts_free(&ms);
}
END_TEST

START_TEST(host_with_colon)
{
	char sub[128];
	snprintf(sub, sizeof sub, "%s/a:b", dir);
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	ck_assert_int_eq(parse(sub, ":/w:ro"), 0);
	ck_assert_str_eq(ms.m[0].host, sub);
	ck_assert_str_eq(ms.m[0].guest, "/w");
	ck_assert(ms.m[0].readonly);
	rmdir(sub);
}
END_TEST

START_TEST(refused)
{
	static const char *const bad_guest[] = {
		"", ":", ":workspace", ":/", ":///", ":/a/../b", ":/a/./b", ":/a//b",
		":/a,b", ":/a b", ":/a\"b", ":/proc", ":/dev/x", ":/sys/", ":/a\tb",
		":/a:rx", ":/..",
	};
	for (size_t i = 0; i < sizeof bad_guest / sizeof *bad_guest; i++) {
		err[0] = '\0';
		ck_assert_msg(parse(dir, bad_guest[i]) < 0, "accepted %s", bad_guest[i]);
		ck_assert_msg(err[0] != '\0', "no message for %s", bad_guest[i]);
	}
	ck_assert_int_eq(mounts_parse(&ms, ":/w", err, sizeof err), -EINVAL);
	ck_assert_int_eq(parse(dir, "/missing:/w"), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "missing"));
	ck_assert_int_eq(parse(file, ":/w"), -ENOTDIR);
	ck_assert_ptr_nonnull(strstr(err, "not a directory"));
	char long_guest[MOUNTS_GUEST_MAX + 8];
	memset(long_guest, 'x', sizeof long_guest - 1);
	long_guest[0] = '/';
	long_guest[sizeof long_guest - 1] = '\0';
	char arg[512];
	snprintf(arg, sizeof arg, "%s:%s", dir, long_guest);
	ck_assert_int_eq(mounts_parse(&ms, arg, err, sizeof err), -ENAMETOOLONG);
	ck_assert_uint_eq(ms.n, 0);
}
END_TEST

START_TEST(limits)
{
	ck_assert_int_eq(parse(dir, ":/w"), 0);
	ck_assert_int_eq(parse(dir, ":/w/"), -EEXIST);
	for (unsigned i = 1; i < MOUNTS_MAX; i++) {
		char arg[256];
		snprintf(arg, sizeof arg, "%s:/m%u", dir, i);
		ck_assert_int_eq(mounts_parse(&ms, arg, err, sizeof err), 0);
	}
	ck_assert_int_eq(parse(dir, ":/one-more"), -E2BIG);
	ck_assert_ptr_nonnull(strstr(err, "too many"));
	ck_assert_uint_eq(ms.n, MOUNTS_MAX);
	mounts_free(&ms);
}
END_TEST

Suite *mounts_suite(void)
{
	Suite *s = suite_create("mounts");
	TCase *tc = tcase_create("parse");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, good);
	tcase_add_test(tc, host_with_colon);
	tcase_add_test(tc, refused);
	tcase_add_test(tc, limits);
	suite_add_tcase(s, tc);
	return s;
}
