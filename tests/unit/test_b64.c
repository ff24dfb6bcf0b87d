#include <check.h>
#include <string.h>

#include "lib/b64.h"
#include "tests/lib/unit_suite.h"

START_TEST(quantum_rfc4648_vectors)
{
	/* RFC 4648 section 10. */
	char q[4];
	b64_quantum((const uint8_t *)"f", 1, q);
	ck_assert_mem_eq(q, "Zg==", 4);
	b64_quantum((const uint8_t *)"fo", 2, q);
	ck_assert_mem_eq(q, "Zm8=", 4);
	b64_quantum((const uint8_t *)"foo", 3, q);
	ck_assert_mem_eq(q, "Zm9v", 4);
	b64_quantum((const uint8_t *)"\xff\xff\xff", 3, q);
	ck_assert_mem_eq(q, "////", 4);
}
END_TEST

START_TEST(values_of_both_alphabets)
{
	for (int v = 0; v < 64; v++) {
		ck_assert_int_eq(b64_val((uint8_t)b64_std[v], false), v);
		ck_assert_int_eq(b64_val((uint8_t)b64_url[v], true), v);
	}
	ck_assert_int_eq(b64_val('+', true), -1);
	ck_assert_int_eq(b64_val('/', true), -1);
	ck_assert_int_eq(b64_val('-', false), -1);
	ck_assert_int_eq(b64_val('_', false), -1);
	ck_assert_int_eq(b64_val('=', false), -1);
	ck_assert_int_eq(b64_val(0, false), -1);
	ck_assert_int_eq(b64_val(0xff, true), -1);
	ck_assert_uint_eq(strlen(b64_std), 64);
	ck_assert_uint_eq(strlen(b64_url), 64);
}
END_TEST

Suite *b64_suite(void)
{
	return unit_suite("b64", "b64", quantum_rfc4648_vectors,
			  values_of_both_alphabets);
}
