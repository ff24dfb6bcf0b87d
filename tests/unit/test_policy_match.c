/* policy_host_match / policy_pattern_match: the host-name rule shared by network
 * rules, tls.bypass, the names DNS gave and secret allow lists. */
#include <check.h>

#include "netstack/policy.h"
#include "tests/lib/unit_suite.h"

START_TEST(exact_names)
{
	ck_assert(policy_pattern_match("api.example.com", "api.example.com"));
	ck_assert(policy_pattern_match("api.example.com", "API.Example.COM"));
	ck_assert(policy_pattern_match("API.example.com", "api.example.com"));
	ck_assert(policy_pattern_match("api.example.com", "api.example.com."));
	ck_assert(policy_pattern_match("api.example.com.", "api.example.com"));
	ck_assert(policy_pattern_match("api.example.com.", "api.example.com."));
	ck_assert(!policy_pattern_match("api.example.com", "api.example.com.."));
	ck_assert(!policy_pattern_match("api.example.com", "x.api.example.com"));
	ck_assert(!policy_pattern_match("api.example.com", "api.example.co"));
	ck_assert(!policy_pattern_match("api.example.com", "pi.example.com"));
	ck_assert(!policy_pattern_match("example.com", "api.example.com"));
	/* Only ASCII folds: bytes above 0x7f must be equal. */
	ck_assert(!policy_pattern_match("\xc3\xa9.com", "\xc3\x89.com"));
}
END_TEST

START_TEST(wildcards_cover_strict_subdomains)
{
	ck_assert(policy_pattern_match("*.example.com", "a.example.com"));
	ck_assert(policy_pattern_match("*.example.com", "a.b.example.com"));
	ck_assert(policy_pattern_match("*.example.com", "A.EXAMPLE.com."));
	ck_assert(policy_pattern_match("*.example.com.", "a.example.com"));
	/* Not the suffix itself, and only at a label boundary. */
	ck_assert(!policy_pattern_match("*.example.com", "example.com"));
	ck_assert(!policy_pattern_match("*.example.com", "example.com."));
	ck_assert(!policy_pattern_match("*.example.com", "evilexample.com"));
	ck_assert(!policy_pattern_match("*.example.com", ".example.com"));
	ck_assert(!policy_pattern_match("*.example.com", "a.example.com.evil"));
	/* A '*' that is not a whole first label is an ordinary byte. */
	ck_assert(!policy_pattern_match("*example.com", "aexample.com"));
	ck_assert(policy_pattern_match("*example.com", "*example.com"));
	ck_assert(!policy_pattern_match("*", "a"));
	ck_assert(policy_pattern_match("*", "*"));
	ck_assert(!policy_pattern_match("a.*.com", "a.b.com"));
}
END_TEST

START_TEST(empty_names_match_nothing)
{
	ck_assert(!policy_pattern_match("", ""));
	ck_assert(!policy_pattern_match(".", "."));
	ck_assert(!policy_pattern_match("*.com", ""));
	ck_assert(!policy_pattern_match("*.com", "."));
	ck_assert(!policy_pattern_match("a", ""));
	ck_assert(!policy_host_match("", false, ""));
	ck_assert(!policy_host_match("", true, "a"));
}
END_TEST

START_TEST(host_and_below)
{
	ck_assert(policy_host_match("example.com", false, "Example.com."));
	ck_assert(!policy_host_match("example.com", false, "a.example.com"));
	ck_assert(policy_host_match("example.com", true, "a.example.com"));
	ck_assert(!policy_host_match("example.com", true, "example.com"));
	ck_assert(policy_host_match("com", true, "example.com"));
	ck_assert(!policy_host_match("om", true, "example.com"));
}
END_TEST

Suite *policy_match_suite(void)
{
	return unit_suite("policy_match", "host_match", exact_names,
			  wildcards_cover_strict_subdomains,
			  empty_names_match_nothing, host_and_below);
}
