/* kbox run's network options and the host resolver.  The resolver is only
 * asked about "localhost" (the hosts file): tests never resolve public
 * names (TESTING.md). */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "netstack/resolver.h"
#include "vmm/netdev.h"

START_TEST(options)
{
	struct netdev n;
	char err[256];
	netdev_init(&n);
	ck_assert(netdev_enabled(&n));
	ck_assert_int_eq(n.pol.mode, POL_MODE_PUBLIC);
	ck_assert_int_eq(netdev_set_mode(&n, "allowlist", err, sizeof err), 0);
	ck_assert_int_eq(n.pol.mode, POL_MODE_ALLOWLIST);
	ck_assert_int_eq(netdev_set_mode(&n, "open", err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "'open'"));
	ck_assert_int_eq(netdev_add_rule(&n, "host.kbox.internal:8080", false, err, sizeof err), 0);
	ck_assert_int_eq(netdev_add_rule(&n, "10.0.0.0/8", true, err, sizeof err), 0);
	ck_assert_uint_eq(n.pol.nrules, 2);
	ck_assert(n.pol.rules[1].deny);
	ck_assert(!n.pol.rules[0].deny);
	ck_assert_int_eq(netdev_add_rule(&n, "127.1", false, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--allow '127.1'"));
	ck_assert_int_eq(netdev_add_rule(&n, "*", true, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--deny"));
	char longrule[600];
	memset(longrule, 'a', sizeof longrule - 1);
	longrule[sizeof longrule - 1] = '\0';
	ck_assert_int_eq(netdev_add_rule(&n, longrule, false, err, sizeof err), -EINVAL);
	ck_assert_int_eq(netdev_set_mode(&n, "none", err, sizeof err), 0);
	ck_assert(!netdev_enabled(&n));
	/* Mode none attaches nothing. */
	char cmd[64] = "";
	ck_assert_int_eq(netdev_attach(&n, NULL, cmd, sizeof cmd, err, sizeof err), 0);
	ck_assert_str_eq(cmd, "");
	netdev_destroy(&n);
}
END_TEST

START_TEST(resolver)
{
	struct dns_rr rr[8];
	size_t n = 99;
	ck_assert_int_eq(nres_resolve(NULL, "localhost", DNS_TYPE_A, rr, 8, &n), DNS_RCODE_NOERROR);
	ck_assert_uint_ge(n, 1);
	ck_assert_uint_eq(rr[0].addr.family, 4);
	ck_assert_uint_eq(rr[0].addr.b[0], 127);
	ck_assert_uint_eq(rr[0].ttl, NRES_TTL);
	ck_assert_int_eq(nres_resolve(NULL, "localhost", 15 /* MX */, rr, 8, &n), -EINVAL);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(nres_resolve(NULL, "", DNS_TYPE_A, rr, 8, &n), -EINVAL);
	char big[300];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	ck_assert_int_eq(nres_resolve(NULL, big, DNS_TYPE_A, rr, 8, &n), -EINVAL);
	/* max bounds the answers. */
	ck_assert_int_eq(nres_resolve(NULL, "localhost", DNS_TYPE_A, rr, 0, &n), DNS_RCODE_NOERROR);
	ck_assert_uint_eq(n, 0);
}
END_TEST

Suite *netdev_suite(void)
{
	Suite *s = suite_create("netdev");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, options);
	tcase_add_test(tc, resolver);
	suite_add_tcase(s, tc);
	return s;
}
