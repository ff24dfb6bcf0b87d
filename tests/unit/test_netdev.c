/* kbox run's network options and the host resolver.  The resolver is only
 * asked about "localhost" (the hosts file): tests never resolve public
 * names (TESTING.md). */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "netstack/resolver.h"
#include "vmm/sandbox/config.h"
#include "vmm/sandbox/netdev.h"
#include "tests/lib/unit_suite.h"

START_TEST(options)
{
	struct netdev n;
	char err[256];
	netdev_init(&n);
	ck_assert(netdev_enabled(&n));
	ck_assert_int_eq(n.pol.mode, POLICY_MODE_PUBLIC);
	ck_assert_int_eq(netdev_set_mode(&n, "allowlist", err, sizeof err), 0);
	ck_assert_int_eq(n.pol.mode, POLICY_MODE_ALLOWLIST);
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

START_TEST(forwards)
{
	struct netdev n;
	struct stack_forward fw;
	char err[256], ports[256];
	netdev_init(&n);
	ck_assert_int_eq(stack_forward_parse("8080:80", &fw, err, sizeof err), 0);
	ck_assert_uint_eq(fw.host.family, 4);
	ck_assert_uint_eq(fw.host.b[0], 127);
	ck_assert_uint_eq(fw.host.b[3], 1);
	ck_assert_uint_eq(fw.host_port, 8080);
	ck_assert_uint_eq(fw.guest_port, 80);
	ck_assert_int_eq(stack_forward_parse("127.0.0.2:0:8000", &fw, err, sizeof err), 0);
	ck_assert_uint_eq(fw.host.b[3], 2);
	ck_assert_uint_eq(fw.host_port, 0);
	ck_assert_int_eq(stack_forward_parse("[::1]:9000:22", &fw, err, sizeof err), 0);
	ck_assert_uint_eq(fw.host.family, 6);
	ck_assert_uint_eq(fw.host.b[15], 1);
	ck_assert_int_eq(stack_forward_parse("::1:9000:22", &fw, err, sizeof err), 0);
	ck_assert_uint_eq(fw.host.family, 6);
	/* Anything other machines could reach is refused, with the reason. */
	static const char *const outside[] = {
		"0.0.0.0:8080:80", "192.168.1.2:8080:80", "[::]:8080:80", "[fe80::1]:1:2",
		"10.0.2.15:1:2", "[::ffff:127.0.0.1]:1:2",
	};
	for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
		ck_assert_int_eq(stack_forward_parse(outside[i], &fw, err, sizeof err), -EINVAL);
		ck_assert_ptr_nonnull(strstr(err, "loopback"));
	}
	static const char *const bad[] = {
		"", "80", "8080:0", "8080:65536", "x:80", "8080:8x", "-1:80", ":80", "8080:",
		"localhost:8080:80", "127.1:8080:80", "[127.0.0.1:1:2", "123456:80", "1:2:3:4:5:6:7:8:9:10:1:2",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(stack_forward_parse(bad[i], &fw, err, sizeof err) == -EINVAL, "%s", bad[i]);
	netdev_ports(&n, ports, sizeof ports);
	ck_assert_str_eq(ports, "");
	ck_assert_int_eq(netdev_add_forward(&n, "8080:80", err, sizeof err), 0);
	ck_assert_int_eq(netdev_add_forward(&n, "[::1]:0:22", err, sizeof err), 0);
	netdev_ports(&n, ports, sizeof ports);
	ck_assert_str_eq(ports, "127.0.0.1:8080->80,[::1]:0->22");
	netdev_ports(&n, ports, 20);
	ck_assert_str_eq(ports, "127.0.0.1:8080->80");
	while (n.nfwd < STACK_MAX_FORWARDS)
		ck_assert_int_eq(netdev_add_forward(&n, "1:1", err, sizeof err), 0);
	ck_assert_int_eq(netdev_add_forward(&n, "1:1", err, sizeof err), -ENOSPC);
	/* Forwarding needs a NIC. */
	ck_assert_int_eq(netdev_set_mode(&n, "none", err, sizeof err), 0);
	char cmd[64] = "";
	ck_assert_int_eq(netdev_attach(&n, NULL, cmd, sizeof cmd, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "--network none"));
	netdev_destroy(&n);
}
END_TEST

START_TEST(hosts)
{
	struct netdev n;
	struct stack_host h;
	char err[256];
	netdev_init(&n);
	ck_assert_int_eq(stack_host_parse("DB.Example.:192.168.1.5", &h, err, sizeof err), 0);
	ck_assert_str_eq(h.name, "db.example");
	ck_assert_uint_eq(h.addr.family, 4);
	ck_assert_uint_eq(h.addr.b[3], 5);
	ck_assert_int_eq(stack_host_parse("v6.test:2001:db8::1", &h, err, sizeof err), 0);
	ck_assert_uint_eq(h.addr.family, 6);
	ck_assert_int_eq(stack_host_parse("v6.test:[::1]", &h, err, sizeof err), 0);
	ck_assert_uint_eq(h.addr.b[15], 1);
	ck_assert_int_eq(stack_host_parse("host.kbox.internal:1.2.3.4", &h, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "host.kbox.internal"));
	static const char *const bad[] = {
		"", "name", "name:", ":1.2.3.4", "127.1:1.2.3.4", "2130706433:1.2.3.4", "a..b:1.2.3.4",
		"*.x:1.2.3.4", "x:127.1", "x:0x7f.0.0.1", "x:fe80::1%eth0", "x:[1.2.3.4", "x:1.2.3.4:80",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(stack_host_parse(bad[i], &h, err, sizeof err) == -EINVAL, "%s", bad[i]);
	ck_assert_int_eq(netdev_add_host(&n, "a.test:10.1.1.1", err, sizeof err), 0);
	ck_assert_int_eq(netdev_add_host(&n, "a.test:fd00::1", err, sizeof err), 0);
	ck_assert_int_eq(netdev_add_host(&n, "bad", err, sizeof err), -EINVAL);
	ck_assert_uint_eq(n.nhosts, 2);
	while (n.nhosts < STACK_MAX_HOSTS)
		ck_assert_int_eq(netdev_add_host(&n, "b.test:1.1.1.1", err, sizeof err), 0);
	ck_assert_int_eq(netdev_add_host(&n, "b.test:1.1.1.1", err, sizeof err), -ENOSPC);
	netdev_destroy(&n);
}
END_TEST

START_TEST(from_config)
{
	struct netdev n;
	struct kbox_config c;
	char err[256];
	struct config_str allow[] = { { "example.com:443", 3, 5 }, { "*.npmjs.org", 4, 5 } };
	struct config_str deny[] = { { "evil.test", 6, 5 } };
	struct config_str pins[] = { { "db.test:10.1.2.3", 8, 5 } };
	struct config_str ports[] = { { "127.0.0.1:0:8000", 10, 3 }, { "9000:9000", 11, 3 } };
	struct config_str bad_rule[] = { { "127.1", 7, 9 } };
	struct config_str bad_port[] = { { "0.0.0.0:80:80", 12, 3 } };

	memset(&c, 0, sizeof c);
	c.network_policy = "allowlist";
	c.allow = allow, c.n_allow = 2;
	c.deny = deny, c.n_deny = 1;
	c.hosts = pins, c.n_hosts = 1;
	c.ports = ports, c.n_ports = 2;
	c.audit_log = "/tmp/from-config.jsonl";
	netdev_init(&n);
	ck_assert_int_eq(netdev_apply_config(&n, &c, "k.yaml", err, sizeof err), 0);
	ck_assert_int_eq(n.pol.mode, POLICY_MODE_ALLOWLIST);
	ck_assert_uint_eq(n.pol.nrules, 3);
	ck_assert(n.pol.rules[2].deny);
	ck_assert_uint_eq(n.nhosts, 1);
	ck_assert_str_eq(n.hosts[0].name, "db.test");
	ck_assert_uint_eq(n.nfwd, 2);
	ck_assert_uint_eq(n.fwd[1].host_port, 9000);
	ck_assert_str_eq(n.audit_path, "/tmp/from-config.jsonl");
	netdev_destroy(&n);

	/* The command line wins for the mode and the audit log; rules add up. */
	netdev_init(&n);
	ck_assert_int_eq(netdev_set_mode(&n, "public", err, sizeof err), 0);
	ck_assert_int_eq(netdev_add_rule(&n, "deny.test", true, err, sizeof err), 0);
	n.audit_path = "cli.jsonl";
	ck_assert_int_eq(netdev_apply_config(&n, &c, "k.yaml", err, sizeof err), 0);
	ck_assert_int_eq(n.pol.mode, POLICY_MODE_PUBLIC);
	ck_assert_uint_eq(n.pol.nrules, 4);
	ck_assert_str_eq(n.audit_path, "cli.jsonl");
	netdev_destroy(&n);

	/* Bad entries point at their place in the file. */
	netdev_init(&n);
	c.allow = bad_rule, c.n_allow = 1;
	ck_assert_int_eq(netdev_apply_config(&n, &c, "k.yaml", err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "k.yaml:7:9: network.allow: '127.1'"));
	netdev_destroy(&n);
	netdev_init(&n);
	c.allow = allow, c.n_allow = 2;
	c.ports = bad_port, c.n_ports = 1;
	ck_assert_int_eq(netdev_apply_config(&n, &c, "k.yaml", err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "k.yaml:12:3: ports: "));
	ck_assert_ptr_nonnull(strstr(err, "loopback"));
	netdev_destroy(&n);
}
END_TEST

START_TEST(resolver)
{
	struct dns_rr rr[8];
	size_t n = 99;
	ck_assert_int_eq(resolver_resolve(NULL, "localhost", DNS_TYPE_A, rr, 8, &n), DNS_RCODE_NOERROR);
	ck_assert_uint_ge(n, 1);
	ck_assert_uint_eq(rr[0].addr.family, 4);
	ck_assert_uint_eq(rr[0].addr.b[0], 127);
	ck_assert_uint_eq(rr[0].ttl, RESOLVER_TTL);
	ck_assert_int_eq(resolver_resolve(NULL, "localhost", 15 /* MX */, rr, 8, &n), -EINVAL);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(resolver_resolve(NULL, "", DNS_TYPE_A, rr, 8, &n), -EINVAL);
	char big[300];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	ck_assert_int_eq(resolver_resolve(NULL, big, DNS_TYPE_A, rr, 8, &n), -EINVAL);
	/* max bounds the answers. */
	ck_assert_int_eq(resolver_resolve(NULL, "localhost", DNS_TYPE_A, rr, 0, &n), DNS_RCODE_NOERROR);
	ck_assert_uint_eq(n, 0);
}
END_TEST

Suite *netdev_suite(void)
{
	return unit_suite("netdev", "core", options, forwards, hosts,
			  from_config, resolver);
}
