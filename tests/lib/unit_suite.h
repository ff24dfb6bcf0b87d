/* The Check suite of one unit-test file in one call: a suite with a test
 * case holding the tests named, in order, with an optional checked fixture
 * and time limit.
 *
 * Header-only (static inline), as fake_virtio.h.  Loop and exit tests, which
 * take more than a test's name, are added to the TCase that unit_suite_case
 * returns with Check's own calls. */
#ifndef KBOX_TESTS_UNIT_SUITE_H
#define KBOX_TESTS_UNIT_SUITE_H

#include <check.h>
#include <stddef.h>

/* The tests named, as an array and its length. */
#define UNIT_TESTS(...)                                                        \
	(const TTest *const[]){__VA_ARGS__},                                   \
		sizeof((const TTest *const[]){__VA_ARGS__}) / sizeof(const TTest *)

/* Adds to s a test case called name with the n tests, the checked fixture
 * setup/teardown when setup is not NULL, and a time limit of timeout
 * seconds when it is above 0; returns the case (owned by s). */
static inline TCase *unit_suite_case_of(Suite *s, const char *name,
					void (*setup)(void), void (*teardown)(void),
					double timeout, const TTest *const *tests,
					size_t n)
{
	TCase *tc = tcase_create(name);

	if (setup)
		tcase_add_checked_fixture(tc, setup, teardown);
	if (timeout > 0)
		tcase_set_timeout(tc, timeout);
	for (size_t i = 0; i < n; i++)
		tcase_add_test(tc, tests[i]);
	suite_add_tcase(s, tc);
	return tc;
}

static inline Suite *unit_suite_of(const char *suite, const char *name,
				   void (*setup)(void), void (*teardown)(void),
				   double timeout, const TTest *const *tests,
				   size_t n)
{
	Suite *s = suite_create(suite);

	unit_suite_case_of(s, name, setup, teardown, timeout, tests, n);
	return s;
}

/* unit_suite("audit", "core", test_a, test_b): a new suite "audit" whose
 * case "core" runs test_a then test_b. */
#define unit_suite(suite, name, ...)                                           \
	unit_suite_of(suite, name, NULL, NULL, 0, UNIT_TESTS(__VA_ARGS__))

/* As unit_suite, each test run between setup() and teardown() (a checked
 * fixture, in the test's own process) with a limit of timeout seconds (0:
 * Check's default). */
#define unit_suite_fixture(suite, name, setup, teardown, timeout, ...)         \
	unit_suite_of(suite, name, setup, teardown, timeout,                   \
		      UNIT_TESTS(__VA_ARGS__))

/* One more case in suite s; returns it for loop and exit tests. */
#define unit_suite_case(s, name, ...)                                          \
	unit_suite_case_of(s, name, NULL, NULL, 0, UNIT_TESTS(__VA_ARGS__))
#define unit_suite_case_fixture(s, name, setup, teardown, timeout, ...)        \
	unit_suite_case_of(s, name, setup, teardown, timeout,                  \
			   UNIT_TESTS(__VA_ARGS__))

#endif
