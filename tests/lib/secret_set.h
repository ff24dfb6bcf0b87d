/* The secret set a unit suite runs against (test_scrub.c, test_http_resp.c,
 * test_http_sub.c): the suite points ts_yaml at its secrets.yaml text when
 * it builds its Suite and adds ts_setup/ts_teardown as a checked fixture;
 * each test then finds the loaded set in ts_set.
 *
 * Header-only (static inline, per test file), as tmp_tree.h. */
#ifndef KBOX_TESTS_SECRET_SET_H
#define KBOX_TESTS_SECRET_SET_H

#include <check.h>
#include <string.h>

#include "netstack/secrets.h"

static const char *ts_yaml;
static struct secrets *ts_set;

/* Load ts_yaml as t/secrets.yaml into ts_set; the test fails with the
 * loader's message if it does not load. */
static inline void ts_setup(void)
{
	char err[256];

	ck_assert_msg(secrets_load_buf("t/secrets.yaml", ts_yaml, strlen(ts_yaml), &ts_set, err, sizeof err) == 0,
		      "%s", err);
}

/* Free ts_set. */
static inline void ts_teardown(void)
{
	secrets_free(ts_set);
	ts_set = NULL;
}

#endif
