/* Egress policy: tables of tricky destinations (first and last address of
 * every blocked range and its neighbours, mapped and embedded IPv6 forms,
 * the host's own addresses, exceptions, deny rules), DNS-time decisions
 * (numeric names, rebinding) and the rule parser's errors. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "netstack/policy.h"
#include "tests/lib/unit_suite.h"

struct row {
	const char *name; /* what our DNS answered, or NULL */
	const char *addr;
	uint16_t port;
	bool allow;
	const char *rule; /* expected decision label or rule text */
};

static void add(struct policy *p, const char *rule)
{
	char err[200] = "";
	int rc = policy_add_rule(p, rule, err, sizeof err);
	ck_assert_msg(rc == 0, "rule %s: %s", rule, err);
}

static struct policy_addr A(const char *s)
{
	struct policy_addr a;
	ck_assert_msg(policy_addr_parse(s, &a) == 0, "address %s", s);
	return a;
}

static void run_table(const struct policy *p, const struct row *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct policy_addr a = A(t[i].addr);
		struct policy_decision d;
		policy_check(p, t[i].name, &a, t[i].port, &d);
		ck_assert_msg(d.allow == t[i].allow && strcmp(d.rule, t[i].rule) == 0,
			      "row %zu %s %s:%u: got %s by %s, want %s by %s", i, t[i].name ? t[i].name : "-",
			      t[i].addr, t[i].port, d.allow ? "allow" : "deny", d.rule, t[i].allow ? "allow" : "deny",
			      t[i].rule);
	}
}

static void public_policy(struct policy *p)
{
	policy_init(p, POLICY_MODE_PUBLIC);
	add(p, "host.kbox.internal:11434");
	add(p, "10.1.2.3/32:5432");
	add(p, "db.corp:5432");
	add(p, "[fd00::5]:8080");
	add(p, "localhost:8080");
	add(p, "deny:*.evil.com");
	add(p, "deny:1.1.1.1");
	add(p, "deny:*:25");
	struct policy_addr host[] = { A("93.184.216.34"), A("2a01:4f8::5"), A("::ffff:203.0.113.200") };
	ck_assert_int_eq(policy_set_host_addrs(p, host, 3), 0);
}

#define PUB "mode:public"
static const struct row public_rows[] = {
	{ NULL, "8.8.8.8", 443, true, PUB },
	{ NULL, "1.1.1.1", 443, false, "deny:1.1.1.1" },
	{ NULL, "::ffff:1.1.1.1", 443, false, "deny:1.1.1.1" },
	{ NULL, "64:ff9b::101:101", 443, false, "deny:1.1.1.1" },
	{ NULL, "2002:101:101::1", 443, false, "deny:1.1.1.1" },
	{ NULL, "::1.1.1.1", 443, false, "deny:1.1.1.1" },
	{ NULL, "1.1.1.2", 443, true, PUB },
	{ NULL, "8.8.8.8", 25, false, "deny:*:25" },
	{ NULL, "8.8.8.8", 0, true, PUB },
	/* 0.0.0.0/8 and loopback */
	{ NULL, "0.0.0.0", 80, false, "class:this-network" },
	{ NULL, "0.255.255.255", 80, false, "class:this-network" },
	{ NULL, "1.0.0.0", 80, true, PUB },
	{ NULL, "127.0.0.1", 80, false, "class:loopback" },
	{ NULL, "127.0.0.0", 80, false, "class:loopback" },
	{ NULL, "127.255.255.255", 80, false, "class:loopback" },
	{ NULL, "126.255.255.255", 80, true, PUB },
	{ NULL, "128.0.0.0", 80, true, PUB },
	/* RFC 1918 */
	{ NULL, "10.0.0.0", 80, false, "class:private" },
	{ NULL, "10.255.255.255", 80, false, "class:private" },
	{ NULL, "9.255.255.255", 80, true, PUB },
	{ NULL, "11.0.0.0", 80, true, PUB },
	{ NULL, "172.16.0.0", 80, false, "class:private" },
	{ NULL, "172.31.255.255", 80, false, "class:private" },
	{ NULL, "172.15.255.255", 80, true, PUB },
	{ NULL, "172.32.0.0", 80, true, PUB },
	{ NULL, "192.168.0.0", 80, false, "class:private" },
	{ NULL, "192.168.255.255", 80, false, "class:private" },
	{ NULL, "192.167.255.255", 80, true, PUB },
	{ NULL, "192.169.0.0", 80, true, PUB },
	/* CGNAT (and Alibaba's metadata address inside it) */
	{ NULL, "100.64.0.0", 80, false, "class:cgnat" },
	{ NULL, "100.127.255.255", 80, false, "class:cgnat" },
	{ NULL, "100.100.100.200", 80, false, "class:cgnat" },
	{ NULL, "100.63.255.255", 80, true, PUB },
	{ NULL, "100.128.0.0", 80, true, PUB },
	/* link-local and metadata */
	{ NULL, "169.254.169.254", 80, false, "class:metadata" },
	{ NULL, "169.254.0.0", 80, false, "class:link-local" },
	{ NULL, "169.254.255.255", 80, false, "class:link-local" },
	{ NULL, "169.253.255.255", 80, true, PUB },
	{ NULL, "169.255.0.0", 80, true, PUB },
	/* special-purpose */
	{ NULL, "192.0.0.0", 80, false, "class:ietf-protocol" },
	{ NULL, "192.0.0.255", 80, false, "class:ietf-protocol" },
	{ NULL, "192.0.1.0", 80, true, PUB },
	{ NULL, "192.0.2.1", 80, false, "class:documentation" },
	{ NULL, "198.51.100.255", 80, false, "class:documentation" },
	{ NULL, "203.0.113.0", 80, false, "class:documentation" },
	{ NULL, "198.18.0.0", 80, false, "class:benchmark" },
	{ NULL, "198.19.255.255", 80, false, "class:benchmark" },
	{ NULL, "198.17.255.255", 80, true, PUB },
	{ NULL, "198.20.0.0", 80, true, PUB },
	{ NULL, "224.0.0.0", 80, false, "class:multicast" },
	{ NULL, "239.255.255.255", 80, false, "class:multicast" },
	{ NULL, "223.255.255.255", 80, true, PUB },
	{ NULL, "240.0.0.0", 80, false, "class:reserved" },
	{ NULL, "255.255.255.254", 80, false, "class:reserved" },
	{ NULL, "255.255.255.255", 80, false, "class:broadcast" },
	/* IPv6 */
	{ NULL, "::1", 80, false, "class:loopback" },
	{ NULL, "::", 80, false, "class:unspecified" },
	{ NULL, "::ffff:127.0.0.1", 80, false, "class:loopback" },
	{ NULL, "::ffff:7f00:1", 80, false, "class:loopback" },
	{ NULL, "::ffff:10.0.0.1", 80, false, "class:private" },
	{ NULL, "::ffff:169.254.169.254", 80, false, "class:metadata" },
	{ NULL, "::ffff:0.0.0.0", 80, false, "class:this-network" },
	{ NULL, "::ffff:8.8.8.8", 80, true, PUB },
	/* IPv4-compatible: the embedded address's class, else blocked anyway */
	{ NULL, "::127.0.0.1", 80, false, "class:loopback" },
	{ NULL, "::10.0.0.1", 80, false, "class:private" },
	{ NULL, "::0.0.0.2", 80, false, "class:this-network" },
	{ NULL, "::169.254.169.254", 80, false, "class:metadata" },
	{ NULL, "::8.8.8.8", 80, false, "class:ipv4-compatible" },
	{ NULL, "::255.255.255.255", 80, false, "class:broadcast" },
	{ NULL, "::1:0:0:0", 80, false, "class:reserved" },
	{ NULL, "::ffff:0:0:8.8.8.8", 80, false, "class:reserved" },
	{ NULL, "fc00::", 80, false, "class:ula" },
	{ NULL, "fd00::1", 80, false, "class:ula" },
	{ NULL, "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 80, false, "class:ula" },
	{ NULL, "fbff:ffff::", 80, false, "class:reserved" },
	{ NULL, "fe80::1", 80, false, "class:link-local" },
	{ NULL, "febf:ffff::1", 80, false, "class:link-local" },
	{ NULL, "fec0::1", 80, false, "class:site-local" },
	{ NULL, "ff02::1", 80, false, "class:multicast" },
	{ NULL, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 80, false, "class:multicast" },
	{ NULL, "64:ff9b::7f00:1", 80, false, "class:loopback" },
	{ NULL, "64:ff9b::a9fe:a9fe", 80, false, "class:metadata" },
	{ NULL, "64:ff9b::808:808", 80, true, PUB },
	{ NULL, "64:ff9b::a00:1", 80, false, "class:private" },
	{ NULL, "64:ff9b::ac10:1", 80, false, "class:private" },
	{ NULL, "64:ff9b::6440:1", 80, false, "class:cgnat" },
	{ NULL, "64:ff9b::", 80, false, "class:this-network" },
	{ NULL, "64:ff9b::e000:1", 80, false, "class:multicast" },
	{ NULL, "64:ff9b::101:101", 80, false, "deny:1.1.1.1" },
	{ NULL, "64:ff9b::1:808:808", 80, false, "class:reserved" },
	{ NULL, "64:ff9b:1::808:808", 80, false, "class:nat64-local" },
	{ NULL, "64:ff9b:1::a00:1", 80, false, "class:nat64-local" },
	{ NULL, "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", 80, false, "class:nat64-local" },
	{ NULL, "64:ff9b:2::808:808", 80, false, "class:reserved" },
	{ NULL, "2002:7f00:1::", 80, false, "class:loopback" },
	{ NULL, "2002:c0a8:101::1", 80, false, "class:private" },
	{ NULL, "2002:808:808::1", 80, true, PUB },
	{ NULL, "2002:a00:1::1", 80, false, "class:private" },
	{ NULL, "2002:a9fe:a9fe::", 80, false, "class:metadata" },
	{ NULL, "2002::1", 80, false, "class:this-network" },
	{ NULL, "2002:c058:6301::", 80, false, "class:6to4-relay" },
	{ NULL, "2003::1", 80, true, PUB },
	{ NULL, "2001:db8::1", 80, false, "class:documentation" },
	{ NULL, "3fff::1", 80, false, "class:documentation" },
	{ NULL, "2001::1", 80, false, "class:teredo" },
	{ NULL, "2001:0:4136:e378:8000:63bf:3fff:fdd2", 80, false, "class:teredo" },
	{ NULL, "2001:0:ffff:ffff:ffff:ffff:ffff:ffff", 80, false, "class:teredo" },
	{ NULL, "2001:1::1", 80, false, "class:ietf-protocol" },
	{ NULL, "2001:2::", 80, false, "class:benchmark" },
	{ NULL, "2001:2:0:ffff:ffff:ffff:ffff:ffff", 80, false, "class:benchmark" },
	{ NULL, "2001:2:1::1", 80, false, "class:ietf-protocol" },
	{ NULL, "2001:10::1", 80, false, "class:orchid" },
	{ NULL, "2001:1f:ffff::1", 80, false, "class:orchid" },
	{ NULL, "2001:20::1", 80, false, "class:orchid" },
	{ NULL, "2001:2f:ffff::1", 80, false, "class:orchid" },
	{ NULL, "2001:30::1", 80, false, "class:ietf-protocol" },
	{ NULL, "2001:db7:ffff::1", 80, true, PUB },
	{ NULL, "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", 80, false, "class:documentation" },
	{ NULL, "2001:db9::1", 80, true, PUB },
	{ NULL, "100::", 80, false, "class:discard" },
	{ NULL, "100::ffff:ffff:ffff:ffff", 80, false, "class:discard" },
	{ NULL, "100:0:0:1::", 80, false, "class:reserved" },
	{ NULL, "fdff:ffff::1", 80, false, "class:ula" },
	{ NULL, "fe7f:ffff::1", 80, false, "class:reserved" },
	{ NULL, "feff:ffff::1", 80, false, "class:site-local" },
	{ NULL, "ff05::2", 80, false, "class:multicast" },
	{ NULL, "2001:1ff:ffff::1", 80, false, "class:ietf-protocol" },
	{ NULL, "2001:200::1", 80, true, PUB },
	{ NULL, "100::1", 80, false, "class:discard" },
	{ NULL, "1000::1", 80, false, "class:reserved" },
	{ NULL, "4000::1", 80, false, "class:reserved" },
	{ NULL, "2606:4700::1111", 443, true, PUB },
	/* the host's own addresses, in every form that reaches them */
	{ NULL, "93.184.216.34", 22, false, "host" },
	{ NULL, "::ffff:93.184.216.34", 22, false, "host" },
	{ NULL, "64:ff9b::5db8:d822", 22, false, "host" },
	{ NULL, "2a01:4f8::5", 22, false, "host" },
	{ NULL, "2a01:4f8::6", 22, true, PUB },
	{ NULL, "203.0.113.200", 22, false, "class:documentation" },
	/* exceptions: one host and one port */
	{ "host.kbox.internal", "127.0.0.1", 11434, true, "host.kbox.internal:11434" },
	{ "HOST.kbox.internal.", "127.0.0.1", 11434, true, "host.kbox.internal:11434" },
	{ "host.kbox.internal", "127.0.0.1", 11435, false, "class:loopback" },
	{ NULL, "127.0.0.1", 11434, false, "class:loopback" },
	{ "localhost", "127.0.0.1", 8080, false, "class:loopback" },
	{ NULL, "10.1.2.3", 5432, true, "10.1.2.3/32:5432" },
	{ NULL, "::ffff:10.1.2.3", 5432, true, "10.1.2.3/32:5432" },
	{ NULL, "10.1.2.3", 5433, false, "class:private" },
	{ NULL, "10.1.2.4", 5432, false, "class:private" },
	{ "db.corp", "10.9.9.9", 5432, true, "db.corp:5432" },
	{ "DB.Corp.", "10.9.9.9", 5432, true, "db.corp:5432" },
	{ "db.corp", "10.9.9.9", 22, false, "class:private" },
	{ "x.db.corp", "10.9.9.9", 5432, false, "class:private" },
	{ NULL, "fd00::5", 8080, true, "[fd00::5]:8080" },
	{ NULL, "fd00::5", 8081, false, "class:ula" },
	/* deny by name: suffix rules do not cover the apex */
	{ "api.evil.com", "8.8.8.8", 443, false, "deny:*.evil.com" },
	{ "A.B.EVIL.COM.", "8.8.8.8", 443, false, "deny:*.evil.com" },
	{ "evil.com", "8.8.8.8", 443, true, PUB },
	{ "notevil.com", "8.8.8.8", 443, true, PUB },
	{ "api.evil.com.example", "8.8.8.8", 443, true, PUB },
};

START_TEST(public_table)
{
	struct policy p;
	public_policy(&p);
	run_table(&p, public_rows, sizeof public_rows / sizeof public_rows[0]);
	policy_free(&p);
}
END_TEST

static const struct row allowlist_rows[] = {
	{ "github.com", "140.82.112.3", 443, true, "github.com" },
	{ "GitHub.COM.", "8.8.8.8", 22, true, "github.com" },
	{ "api.github.com", "8.8.8.8", 443, true, "*.github.com" },
	{ "a.b.github.com", "8.8.8.8", 443, true, "*.github.com" },
	{ "gist.github.com", "8.8.8.8", 443, false, "deny:gist.github.com" },
	{ "evilgithub.com", "8.8.8.8", 443, false, "allowlist" },
	{ "github.com.evil.net", "8.8.8.8", 443, false, "allowlist" },
	{ "pypi.org", "151.101.0.223", 443, true, "pypi.org:443" },
	{ "pypi.org", "151.101.0.223", 80, false, "allowlist" },
	{ NULL, "140.82.112.0", 443, true, "140.82.112.0/20" },
	{ NULL, "140.82.127.255", 80, true, "140.82.112.0/20" },
	{ NULL, "140.82.128.0", 443, false, "allowlist" },
	{ NULL, "140.82.113.4", 443, false, "deny:140.82.113.4" },
	{ NULL, "::ffff:140.82.113.4", 443, false, "deny:140.82.113.4" },
	{ NULL, "2606:50c0::1", 443, true, "[2606:50c0::/32]:443" },
	{ NULL, "2606:50c0::1", 80, false, "allowlist" },
	{ NULL, "2606:50c1::1", 443, false, "allowlist" },
	{ "github.com", "10.0.0.1", 443, false, "class:private" },
	{ "github.com", "127.0.0.1", 443, false, "class:loopback" },
	{ NULL, "10.1.2.3", 5432, true, "10.1.2.3/32:5432" },
	{ "example.com", "93.184.216.34", 443, false, "allowlist" },
	{ "example.com", "93.184.216.34", 22, true, "*:22" },
	{ NULL, "169.254.169.254", 22, false, "class:metadata" },
};

START_TEST(allowlist_table)
{
	struct policy p;
	policy_init(&p, POLICY_MODE_ALLOWLIST);
	add(&p, "github.com");
	add(&p, "*.github.com");
	add(&p, "pypi.org:443");
	add(&p, "140.82.112.0/20");
	add(&p, "[2606:50c0::/32]:443");
	add(&p, "deny:gist.github.com");
	add(&p, "deny:140.82.113.4");
	add(&p, "10.1.2.3/32:5432");
	add(&p, "*:22");
	run_table(&p, allowlist_rows, sizeof allowlist_rows / sizeof allowlist_rows[0]);
	policy_free(&p);
}
END_TEST

START_TEST(mode_none)
{
	struct policy p;
	struct policy_decision d;
	policy_init(&p, POLICY_MODE_NONE);
	add(&p, "8.8.8.8/32:443");
	struct policy_addr a = A("8.8.8.8");
	policy_check(&p, NULL, &a, 443, &d);
	ck_assert(!d.allow);
	ck_assert_str_eq(d.rule, "mode:none");
	policy_check_name(&p, "example.com", &d);
	ck_assert(!d.allow);
	policy_check_answer(&p, "example.com", &a, &d);
	ck_assert(!d.allow);
	policy_free(&p);
}
END_TEST

START_TEST(deny_beats_exception)
{
	struct policy p;
	struct policy_decision d;
	policy_init(&p, POLICY_MODE_PUBLIC);
	add(&p, "10.1.2.3/32:5432");
	add(&p, "deny:10.0.0.0/8");
	struct policy_addr a = A("10.1.2.3");
	policy_check(&p, NULL, &a, 5432, &d);
	ck_assert(!d.allow);
	ck_assert_int_eq(d.why, POLICY_WHY_DENY_RULE);
	ck_assert_str_eq(d.rule, "deny:10.0.0.0/8");
	policy_free(&p);
}
END_TEST

/* A wide CIDR with a port is an ordinary allow, not an exception: it may
 * not open every private address on that port. */
START_TEST(wide_cidr_is_no_exception)
{
	struct policy p;
	struct policy_decision d;
	policy_init(&p, POLICY_MODE_ALLOWLIST);
	add(&p, "0.0.0.0/0:22");
	struct policy_addr a = A("10.1.2.3"), b = A("8.8.8.8");
	policy_check(&p, NULL, &a, 22, &d);
	ck_assert(!d.allow);
	ck_assert_str_eq(d.rule, "class:private");
	policy_check(&p, NULL, &b, 22, &d);
	ck_assert(d.allow);
	policy_free(&p);
}
END_TEST

struct name_row {
	const char *name;
	bool allow;
	const char *rule;
};

START_TEST(names_public)
{
	static const struct name_row t[] = {
		{ "example.com", true, PUB },
		{ "Example.COM.", true, PUB },
		{ "localhost", true, PUB },
		{ "_dmarc.example.com", true, PUB },
		{ "xn--bcher-kva.de", true, PUB },
		{ "0x7f.1", false, "name:invalid" },
		{ "0x7f000001", false, "name:invalid" },
		{ "2130706433", false, "name:invalid" },
		{ "127.1", false, "name:invalid" },
		{ "1.2.3.4", false, "name:invalid" },
		{ "1.2.3.4.", false, "name:invalid" },
		{ "::1", false, "name:invalid" },
		{ "[::]", false, "name:invalid" },
		{ "a..b", false, "name:invalid" },
		{ ".", false, "name:invalid" },
		{ "", false, "name:invalid" },
		{ "exa mple.com", false, "name:invalid" },
		{ "b\xc3\xbc" "cher.de", false, "name:invalid" },
		{ "-x.com", false, "name:invalid" },
		{ "api.evil.com", false, "deny:*.evil.com" },
		{ "evil.com", true, PUB },
	};
	struct policy p;
	public_policy(&p);
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct policy_decision d;
		policy_check_name(&p, t[i].name, &d);
		ck_assert_msg(d.allow == t[i].allow && strcmp(d.rule, t[i].rule) == 0, "row %zu %s: %s", i,
			      t[i].name, d.rule);
	}
	char longname[300];
	memset(longname, 'a', sizeof longname);
	for (size_t i = 60; i < sizeof longname; i += 61)
		longname[i] = '.';
	longname[254] = '\0';
	struct policy_decision d;
	policy_check_name(&p, longname, &d);
	ck_assert(!d.allow);
	longname[253] = '\0';
	policy_check_name(&p, longname, &d);
	ck_assert(d.allow);
	char label64[80];
	memset(label64, 'b', 64);
	strcpy(label64 + 64, ".com");
	policy_check_name(&p, label64, &d);
	ck_assert(!d.allow);
	policy_free(&p);
}
END_TEST

START_TEST(names_allowlist)
{
	struct policy p;
	struct policy_decision d;
	policy_init(&p, POLICY_MODE_ALLOWLIST);
	add(&p, "github.com:443");
	add(&p, "*.pythonhosted.org");
	policy_check_name(&p, "github.com", &d);
	ck_assert(d.allow);
	policy_check_name(&p, "files.pythonhosted.org", &d);
	ck_assert(d.allow);
	ck_assert_str_eq(d.rule, "*.pythonhosted.org");
	policy_check_name(&p, "pythonhosted.org", &d);
	ck_assert(!d.allow);
	ck_assert_int_eq(d.why, POLICY_WHY_NO_MATCH);
	policy_check_name(&p, "example.com", &d);
	ck_assert(!d.allow);
	/* An address rule or a `*:PORT` rule lets no name reach the
	 * resolver: the question itself would carry data out. */
	add(&p, "151.101.0.0/16");
	add(&p, "10.1.2.3/32:5432");
	static const char *const refused[] = { "example.com", "c2VjcmV0.exfil.test", "a.b.c.github.com.evil" };
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		policy_check_name(&p, refused[i], &d);
		ck_assert_msg(!d.allow, "%s reached the resolver", refused[i]);
		ck_assert_int_eq(d.why, POLICY_WHY_NO_MATCH);
		ck_assert_str_eq(d.rule, "allowlist");
	}
	policy_check_name(&p, "GitHub.com.", &d);
	ck_assert(d.allow);
	ck_assert_str_eq(d.rule, "github.com:443");
	struct policy_addr in = A("151.101.1.1"), out = A("8.8.8.8");
	policy_check_answer(&p, "example.com", &in, &d);
	ck_assert(d.allow);
	policy_check_answer(&p, "example.com", &out, &d);
	ck_assert(!d.allow);
	policy_check_answer(&p, "github.com", &out, &d);
	ck_assert(d.allow);
	add(&p, "*:22"); /* every address on a port: still no name */
	policy_check_name(&p, "example.com", &d);
	ck_assert(!d.allow);
	policy_free(&p);
}
END_TEST

START_TEST(answers_rebinding)
{
	struct policy p;
	struct policy_decision d;
	public_policy(&p);
	static const struct {
		const char *name, *addr;
		bool allow;
		const char *rule;
	} t[] = {
		{ "example.com", "93.184.216.35", true, PUB },
		{ "example.com", "127.0.0.1", false, "class:loopback" },
		{ "example.com", "::ffff:192.168.1.1", false, "class:private" },
		{ "example.com", "169.254.169.254", false, "class:metadata" },
		{ "example.com", "fd00::1", false, "class:ula" },
		{ "example.com", "93.184.216.34", false, "host" },
		{ "localhost", "127.0.0.1", false, "class:loopback" },
		{ "localhost", "::1", false, "class:loopback" },
		{ "db.corp", "10.9.9.9", true, "db.corp:5432" },
		{ "host.kbox.internal", "127.0.0.1", true, "host.kbox.internal:11434" },
		{ "one.one", "1.1.1.1", false, "deny:1.1.1.1" },
		{ "x.evil.com", "8.8.8.8", false, "deny:*.evil.com" },
		{ "1.2.3.4", "1.2.3.4", false, "name:invalid" },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct policy_addr a = A(t[i].addr);
		policy_check_answer(&p, t[i].name, &a, &d);
		ck_assert_msg(d.allow == t[i].allow && strcmp(d.rule, t[i].rule) == 0, "row %zu %s %s: %s", i,
			      t[i].name, t[i].addr, d.rule);
	}
	policy_free(&p);
}
END_TEST

START_TEST(parse_good)
{
	struct policy_rule r;
	char err[200];
	ck_assert_int_eq(policy_parse_rule("Example.COM.", &r, err, sizeof err), 0);
	ck_assert_int_eq(r.kind, POLICY_RULE_DOMAIN);
	ck_assert_str_eq(r.name, "example.com");
	ck_assert(!r.deny && !r.exception && r.port == 0);

	ck_assert_int_eq(policy_parse_rule("*.github.com", &r, err, sizeof err), 0);
	ck_assert_int_eq(r.kind, POLICY_RULE_SUFFIX);
	ck_assert_str_eq(r.name, "github.com");

	ck_assert_int_eq(policy_parse_rule("10.1.2.3/32:5432", &r, err, sizeof err), 0);
	ck_assert_int_eq(r.kind, POLICY_RULE_NET);
	ck_assert_uint_eq(r.plen, 32);
	ck_assert_uint_eq(r.port, 5432);
	ck_assert(r.exception);

	ck_assert_int_eq(policy_parse_rule("[2001:db8::1]:443", &r, err, sizeof err), 0);
	ck_assert_uint_eq(r.net.family, 6);
	ck_assert_uint_eq(r.plen, 128);
	ck_assert_uint_eq(r.port, 443);

	ck_assert_int_eq(policy_parse_rule("[2001:db8::]/32:443", &r, err, sizeof err), 0);
	ck_assert_uint_eq(r.plen, 32);
	ck_assert_int_eq(policy_parse_rule("[2001:db8::/32]:443", &r, err, sizeof err), 0);
	ck_assert_uint_eq(r.plen, 32);
	ck_assert_uint_eq(r.port, 443);
	ck_assert_int_eq(policy_parse_rule("2606:4700::/32", &r, err, sizeof err), 0);
	ck_assert_uint_eq(r.port, 0);

	ck_assert_int_eq(policy_parse_rule("deny:*.evil.com", &r, err, sizeof err), 0);
	ck_assert(r.deny);
	ck_assert_int_eq(policy_parse_rule("deny:10.0.0.0/8", &r, err, sizeof err), 0);
	ck_assert(r.deny && !r.exception);
	ck_assert_int_eq(policy_parse_rule("allow:*:443", &r, err, sizeof err), 0);
	ck_assert_int_eq(r.kind, POLICY_RULE_ANY);
	ck_assert_int_eq(policy_parse_rule("::ffff:10.0.0.0/104:22", &r, err, sizeof err), -EINVAL);
	ck_assert_int_eq(policy_parse_rule("[::ffff:10.0.0.0/104]:22", &r, err, sizeof err), 0);
	ck_assert_uint_eq(r.net.family, 4);
	ck_assert_uint_eq(r.plen, 8);
	ck_assert(r.exception);
	ck_assert_int_eq(policy_parse_rule("_acme.example.com:80", &r, err, sizeof err), 0);
	ck_assert_int_eq(policy_parse_rule("0.0.0.0/0", &r, err, sizeof err), 0);
	ck_assert(!r.exception);
}
END_TEST

START_TEST(parse_errors)
{
	static const struct {
		const char *rule, *msg; /* msg: part of the error text */
	} t[] = {
		{ "", "empty" },
		{ "deny:", "empty" },
		{ "*", "needs a port" },
		{ "*.", "not a valid domain" },
		{ "a.*.com", "wildcard" },
		{ "**.com", "wildcard" },
		{ "10.1.2.3/24", "did you mean 10.1.2.0/24" },
		{ "10.1.2.0/33", "prefix length" },
		{ "10.1.2.0/", "prefix length" },
		{ "10.1.2.0/08", "prefix length" },
		{ "example.com:0", "bad port" },
		{ "example.com:65536", "bad port" },
		{ "example.com:08", "bad port" },
		{ "example.com:", "bad port" },
		{ "example.com:http", "bad port" },
		{ "10.1.2.3", "exception must name a port" },
		{ "192.168.0.0/16", "exception must name a port" },
		{ "[::1]", "exception must name a port" },
		{ "0x7f.1", "numeric address" },
		{ "127.1", "not a valid IPv4" },
		{ "2130706433", "not a valid IPv4" },
		{ "010.1.2.3/32:80", "not a valid IPv4" },
		{ "1.2.3.4.5", "not a valid IPv4" },
		{ "b\xc3\xbc" "cher.de", "xn--" },
		{ "[fe80::1%eth0]:80", "zone" },
		{ "fe80::1%eth0", "zone" },
		{ "[1.2.3.4]:80", "IPv6 addresses only" },
		{ "[::1:80", "missing ']'" },
		{ "[::1]x", "unexpected" },
		{ "[2001:db8::/32]/32:443", "two prefix" },
		{ "-bad.com", "not a valid domain" },
		{ "bad-.com", "not a valid domain" },
		{ "a..com", "not a valid domain" },
		{ "exa mple.com", "not a valid domain" },
		{ "gggg::1", "not a valid IPv6" },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct policy_rule r;
		char err[200] = "";
		int rc = policy_parse_rule(t[i].rule, &r, err, sizeof err);
		ck_assert_msg(rc == -EINVAL, "row %zu %s: rc %d", i, t[i].rule, rc);
		ck_assert_msg(strstr(err, t[i].msg), "row %zu %s: message \"%s\"", i, t[i].rule, err);
	}
	char label64[80];
	memset(label64, 'x', 64);
	strcpy(label64 + 64, ".com");
	struct policy_rule r;
	ck_assert_int_eq(policy_parse_rule(label64, &r, NULL, 0), -EINVAL);
}
END_TEST

START_TEST(addr_parse_and_class)
{
	struct policy_addr a;
	static const char *bad[] = { "127.1", "0x7f.0.0.1", "2130706433", "01.2.3.4", "1.2.3", "1.2.3.4 ",
				     "fe80::1%eth0", "[::1]", "1.2.3.256", "", "::ffff:1.2.3", ":::" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(policy_addr_parse(bad[i], &a) == -EINVAL, "%s", bad[i]);
	char buf[64];
	ck_assert_int_eq(policy_addr_parse("::FFFF:1.2.3.4", &a), 0);
	ck_assert_int_eq(policy_addr_format(&a, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "::ffff:1.2.3.4");
	ck_assert_int_eq(policy_addr_format(&a, buf, 4), -ENOSPC);
	ck_assert_ptr_null(policy_addr_class(&a));
	ck_assert_int_eq(policy_addr_parse("::ffff:127.0.0.2", &a), 0);
	ck_assert_str_eq(policy_addr_class(&a), "loopback");
}
END_TEST

START_TEST(numeric_names)
{
	ck_assert(policy_name_is_numeric("127.1"));
	ck_assert(policy_name_is_numeric("0X7F.1."));
	ck_assert(policy_name_is_numeric("0x"));
	ck_assert(policy_name_is_numeric("fe80::1"));
	ck_assert(!policy_name_is_numeric("1.2.3.4.example"));
	ck_assert(!policy_name_is_numeric("0xabc.com"));
	ck_assert(!policy_name_is_numeric("3com.com"));
	char out[POLICY_NAME_MAX + 1];
	ck_assert_int_eq(policy_name_normalize("A.B.", out), 0);
	ck_assert_str_eq(out, "a.b");
	ck_assert_int_eq(policy_name_normalize("a.b..", out), -EINVAL);
	ck_assert_int_eq(policy_name_normalize(".a", out), -EINVAL);
}
END_TEST

START_TEST(modes_and_host_list)
{
	enum policy_mode m;
	ck_assert_int_eq(policy_parse_mode("allowlist", &m), 0);
	ck_assert_int_eq(m, POLICY_MODE_ALLOWLIST);
	ck_assert_int_eq(policy_parse_mode("Public", &m), -EINVAL);
	struct policy p;
	struct policy_decision d;
	policy_init(&p, POLICY_MODE_PUBLIC);
	struct policy_addr h = A("93.184.216.34");
	ck_assert_int_eq(policy_set_host_addrs(&p, &h, 1), 0);
	policy_check(&p, NULL, &h, 80, &d);
	ck_assert_int_eq(d.why, POLICY_WHY_HOST);
	ck_assert_int_eq(policy_set_host_addrs(&p, NULL, 0), 0);
	policy_check(&p, NULL, &h, 80, &d);
	ck_assert(d.allow);
	struct policy_addr junk = { .family = 5 };
	policy_check(&p, NULL, &junk, 80, &d);
	ck_assert(!d.allow);
	policy_free(&p);
}
END_TEST

static int host_calls;

/* A host whose addresses change under the policy: 5.5.5.5 only while
 * *ctx is true. */
static bool fake_host(void *ctx, const struct policy_addr *a)
{
	const bool *on = ctx;
	host_calls++;
	return *on && a->family == 4 && a->b[0] == 5 && a->b[1] == 5 && a->b[2] == 5 && a->b[3] == 5;
}

START_TEST(host_fn_at_each_decision)
{
	struct policy p;
	struct policy_decision d;
	bool on = false;
	policy_init(&p, POLICY_MODE_PUBLIC);
	policy_set_host_fn(&p, fake_host, &on);
	struct policy_addr h = A("5.5.5.5"), mapped = A("::ffff:5.5.5.5"), nat64 = A("64:ff9b::505:505"),
			six4 = A("2002:505:505::1"), priv = A("10.0.0.1");
	policy_check(&p, NULL, &h, 80, &d);
	ck_assert(d.allow);
	on = true; /* an address added while the policy runs */
	policy_check(&p, NULL, &h, 80, &d);
	ck_assert(!d.allow);
	ck_assert_int_eq(d.why, POLICY_WHY_HOST);
	policy_check(&p, NULL, &mapped, 80, &d);
	ck_assert_int_eq(d.why, POLICY_WHY_HOST);
	policy_check(&p, NULL, &nat64, 80, &d);
	ck_assert_int_eq(d.why, POLICY_WHY_HOST);
	policy_check(&p, NULL, &six4, 80, &d);
	ck_assert_int_eq(d.why, POLICY_WHY_HOST);
	policy_check_answer(&p, "example.com", &h, &d);
	ck_assert(!d.allow);
	ck_assert_int_eq(d.why, POLICY_WHY_HOST);
	/* A blocked class is decided without asking (the hook costs a
	 * system call in kbox). */
	host_calls = 0;
	policy_check(&p, NULL, &priv, 80, &d);
	ck_assert_str_eq(d.rule, "class:private");
	ck_assert_int_eq(host_calls, 0);
	/* An exception for the address still opens it (--allow 5.5.5.5/32:80). */
	add(&p, "5.5.5.5/32:80");
	policy_check(&p, NULL, &h, 80, &d);
	ck_assert(d.allow);
	ck_assert_int_eq(d.why, POLICY_WHY_EXCEPTION);
	on = false;
	policy_check(&p, NULL, &h, 81, &d);
	ck_assert(d.allow);
	policy_free(&p);
}
END_TEST

START_TEST(stated_names)
{
	struct policy p;
	struct policy_decision first, d;
	struct policy_addr cdn = A("151.101.1.1"), lo = A("127.0.0.1"), db = A("10.1.2.3");

	/* public: only deny rules for names make stated names matter */
	policy_init(&p, POLICY_MODE_PUBLIC);
	add(&p, "db.corp:5432");
	ck_assert(!policy_judges_stated_names(&p));
	add(&p, "deny:other.test");
	add(&p, "deny:*.evil.test:443");
	add(&p, "host.kbox.internal:8000");
	ck_assert(policy_judges_stated_names(&p));
	policy_check(&p, NULL, &cdn, 443, &first);
	ck_assert(first.allow);
	policy_check_stated(&p, "Other.Test.", &cdn, 443, &first, &d);
	ck_assert(!d.allow);
	ck_assert_str_eq(d.rule, "deny:other.test");
	policy_check_stated(&p, "x.evil.test", &cdn, 443, &first, &d);
	ck_assert(!d.allow);
	policy_check_stated(&p, "x.evil.test", &cdn, 80, &first, &d); /* the rule's port only */
	ck_assert(d.allow);
	policy_check_stated(&p, "fine.test", &cdn, 443, &first, &d);
	ck_assert(d.allow);
	ck_assert_str_eq(d.rule, first.rule);
	/* The host alias and exceptions: the stated name cannot open or
	 * close the class, only a deny rule refuses. */
	policy_check(&p, POLICY_HOST_NAME, &lo, 8000, &first);
	ck_assert(first.allow);
	policy_check_stated(&p, "localhost", &lo, 8000, &first, &d);
	ck_assert(d.allow);
	policy_check_stated(&p, "other.test", &lo, 8000, &first, &d);
	ck_assert(!d.allow);
	policy_check(&p, "db.corp", &db, 5432, &first);
	ck_assert(first.allow);
	policy_check_stated(&p, "h", &db, 5432, &first, &d);
	ck_assert(d.allow);
	/* a refused first decision stays refused */
	policy_check(&p, NULL, &db, 80, &first);
	policy_check_stated(&p, "db.corp", &db, 80, &first, &d);
	ck_assert(!d.allow);
	policy_free(&p);

	/* allowlist: a name rule let the address in; the stated name must
	 * be allowed too (another name on the same CDN address is not) */
	policy_init(&p, POLICY_MODE_ALLOWLIST);
	ck_assert(!policy_judges_stated_names(&p));
	add(&p, "api.test:443");
	add(&p, "10.1.2.3/32:5432");
	ck_assert(policy_judges_stated_names(&p));
	policy_check(&p, "api.test", &cdn, 443, &first);
	ck_assert(first.allow);
	policy_check_stated(&p, "api.test", &cdn, 443, &first, &d);
	ck_assert(d.allow);
	policy_check_stated(&p, "evil.test", &cdn, 443, &first, &d);
	ck_assert(!d.allow);
	ck_assert_int_eq(d.why, POLICY_WHY_NO_MATCH);
	/* allowed by an address rule: any stated name the rule allows too */
	policy_check(&p, NULL, &db, 5432, &first);
	ck_assert(first.allow);
	policy_check_stated(&p, "whatever.test", &db, 5432, &first, &d);
	ck_assert(d.allow);
	policy_free(&p);

	policy_init(&p, POLICY_MODE_NONE);
	add(&p, "deny:x.test");
	ck_assert(!policy_judges_stated_names(&p));
	policy_free(&p);
}
END_TEST

Suite *policy_suite(void)
{
	return unit_suite("policy", "core", public_table, allowlist_table,
			  mode_none, deny_beats_exception,
			  wide_cidr_is_no_exception, names_public,
			  names_allowlist, answers_rebinding, parse_good,
			  parse_errors, addr_parse_and_class, numeric_names,
			  modes_and_host_list, host_fn_at_each_decision,
			  stated_names);
}
