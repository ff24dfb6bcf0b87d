#include <check.h>
#include <errno.h>
#include <string.h>

#include "lib/errbuf.h"
#include "tests/lib/unit_suite.h"

START_TEST(say_fits_and_cuts)
{
	char err[8];
	memset(err, 'x', sizeof err);
	errbuf_say(err, sizeof err, "%s %d", "abc", 12);
	ck_assert_str_eq(err, "abc 12");
	errbuf_say(err, sizeof err, "%s", "0123456789");
	ck_assert_str_eq(err, "0123456");
	errbuf_say(err, 0, "%s", "untouched");
	ck_assert_str_eq(err, "0123456");
	errbuf_say(NULL, 8, "%s", "nowhere");
}
END_TEST

START_TEST(fail_returns_rc)
{
	char err[32] = "";
	ck_assert_int_eq(errbuf_fail(err, sizeof err, -ENOSPC, "no %s", "room"), -ENOSPC);
	ck_assert_str_eq(err, "no room");
	ck_assert_int_eq(errbuf_fail(NULL, 0, -EINVAL, "ignored"), -EINVAL);
}
END_TEST

Suite *errbuf_suite(void)
{
	return unit_suite("errbuf", "errbuf", say_fits_and_cuts,
			  fail_returns_rc);
}
