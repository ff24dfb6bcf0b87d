/* Runs every Check suite found in tests/unit/test_*.c (see gen-suites.sh).
 * `unit-tests NAME…` runs only the named suites. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

int main(int argc, char **argv)
{
	SRunner *sr = srunner_create(NULL);
	int added = 0;
#define X(n)                                                                   \
	do {                                                                   \
		int want = argc < 2;                                           \
		for (int i = 1; i < argc; i++)                                 \
			want |= strcmp(argv[i], #n) == 0;                      \
		if (want) {                                                    \
			srunner_add_suite(sr, n##_suite());                    \
			added++;                                               \
		}                                                              \
	} while (0);
	KBOX_SUITES
#undef X
	if (!added) {
		fprintf(stderr, "unit-tests: no suite matches\n");
		srunner_free(sr);
		return 2;
	}
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
