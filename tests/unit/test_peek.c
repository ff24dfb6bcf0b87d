/* The names a client states in its first bytes (netstack/peek.h): TLS
 * server names and HTTP/1.x Host headers and targets, every prefix of
 * each (NEED_MORE until whole), and the ambiguous or oversized heads that
 * must be refused rather than guessed at. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netstack/peek.h"
#include "tests/lib/unit_suite.h"

/* A minimal ClientHello (TLS 1.2 record) with server name sni. */
static size_t hello(const char *sni, uint8_t *out)
{
	size_t nl = strlen(sni), ext = 9 + nl, body = 2 + 32 + 1 + 4 + 2 + 2 + ext, n = 0;
	out[n++] = 0x16;
	out[n++] = 3;
	out[n++] = 1;
	out[n++] = (uint8_t)((body + 4) >> 8);
	out[n++] = (uint8_t)(body + 4);
	out[n++] = 1; /* client_hello */
	out[n++] = 0;
	out[n++] = (uint8_t)(body >> 8);
	out[n++] = (uint8_t)body;
	out[n++] = 3;
	out[n++] = 3;
	memset(out + n, 0x42, 32);
	n += 32;
	out[n++] = 0; /* session id */
	out[n++] = 0;
	out[n++] = 2;
	out[n++] = 0xc0;
	out[n++] = 0x2f;
	out[n++] = 1; /* compression: null */
	out[n++] = 0;
	out[n++] = (uint8_t)(ext >> 8);
	out[n++] = (uint8_t)ext;
	out[n++] = 0; /* server_name */
	out[n++] = 0;
	out[n++] = (uint8_t)((nl + 5) >> 8);
	out[n++] = (uint8_t)(nl + 5);
	out[n++] = (uint8_t)((nl + 3) >> 8);
	out[n++] = (uint8_t)(nl + 3);
	out[n++] = 0; /* host_name */
	out[n++] = (uint8_t)(nl >> 8);
	out[n++] = (uint8_t)nl;
	memcpy(out + n, sni, nl);
	return n + nl;
}

/* Every strict prefix of buf needs more; the whole gives want. */
static void prefixes(const uint8_t *buf, size_t n, int want, struct peek_result *r)
{
	for (size_t i = 0; i < n; i++) {
		int st = peek_parse(buf, i, r);
		ck_assert_msg(st == PEEK_NEED_MORE, "prefix %zu of %zu: %d (%s)", i, n, st, r->why ? r->why : "");
	}
	ck_assert_int_eq(peek_parse(buf, n, r), want);
}

static int parse(const char *s, struct peek_result *r)
{
	return peek_parse((const uint8_t *)s, strlen(s), r);
}

START_TEST(tls_server_name)
{
	uint8_t b[512];
	struct peek_result r;
	size_t n = hello("Deny.Test", b);
	prefixes(b, n, PEEK_NAMES_FOUND, &r);
	ck_assert_uint_eq(r.n, 1);
	ck_assert_str_eq(r.name[0], "deny.test");
	ck_assert_str_eq(r.what[0], "sni");
	n = hello("1.2.3.4", b); /* an address where a name belongs */
	ck_assert_int_eq(peek_parse(b, n, &r), PEEK_BAD);
	b[0] = 0x16;
	b[5] = 2; /* not a client hello */
	ck_assert_int_eq(peek_parse(b, n, &r), PEEK_BAD);
}
END_TEST

START_TEST(http_host)
{
	static const char req[] = "GET /x HTTP/1.1\r\nUser-Agent: t\r\nHost: Deny.Test.:8000\r\nAccept: */*\r\n\r\n";
	struct peek_result r;
	prefixes((const uint8_t *)req, strlen(req), PEEK_NAMES_FOUND, &r);
	ck_assert_uint_eq(r.n, 1);
	ck_assert_str_eq(r.name[0], "deny.test");
	ck_assert_str_eq(r.what[0], "host");
	static const struct {
		const char *req, *name;
	} ok[] = {
		{ "\r\nPOST / HTTP/1.1\r\nhost:a.test\r\n\r\n", "a.test" },
		{ "GET / HTTP/1.1\nHOST: \t b_c.test \t\n\n", "b_c.test" },
		{ "get / HTTP/1.0\r\nHost: c.test\r\n\r\nbody", "c.test" },
		{ "CONNECT d.test:443 HTTP/1.1\r\nHost: d.test:443\r\n\r\n", "d.test" },
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		ck_assert_msg(parse(ok[i].req, &r) == PEEK_NAMES_FOUND, "%zu: %s", i, r.why ? r.why : "");
		ck_assert_uint_eq(r.n, 1);
		ck_assert_str_eq(r.name[0], ok[i].name);
	}
	/* the absolute form's authority wins at the server: both are judged */
	ck_assert_int_eq(parse("GET http://u:p@DENY.test.:80/a?b HTTP/1.1\r\nHost: fine.test\r\n\r\n", &r),
			 PEEK_NAMES_FOUND);
	ck_assert_uint_eq(r.n, 2);
	ck_assert_str_eq(r.name[0], "deny.test");
	ck_assert_str_eq(r.what[0], "target");
	ck_assert_str_eq(r.name[1], "fine.test");
	ck_assert_int_eq(parse("GET HTTPS://x.test HTTP/1.1\r\nHost: x.test\r\n\r\n", &r), PEEK_NAMES_FOUND);
	ck_assert_uint_eq(r.n, 1);
}
END_TEST

START_TEST(names_nothing)
{
	struct peek_result r;
	static const char *const none[] = {
		"GET / HTTP/1.1\r\nAccept: x\r\n\r\n", /* no Host */
		"GET / HTTP/1.1\r\nHost: 1.2.3.4:80\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: 2130706433\r\n\r\n", /* libc reads it as an address */
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"SSH-2.0-OpenSSH_9.2\r\n",
		"HELLO world\r\n",
		"\x01\x02\x03",
		"*1\r\n$4\r\nPING\r\n",
		"\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n", /* more empty lines than a server skips */
	};
	for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
		ck_assert_msg(parse(none[i], &r) == PEEK_NONE, "%zu: %s", i, none[i]);
}
END_TEST

START_TEST(refused_when_ambiguous)
{
	struct peek_result r;
	static const char *const bad[] = {
		"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
		"GET / HTTP/1.1\r\nX: y\r\n  folded\r\nHost: a.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : a.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a%2etest\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a..test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: ::1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\x01\r\n\r\n",
		"GET / HTTP/1.1\r\nno colon\r\n\r\n",
		"GET / HTTP/1.1\rX\r\n\r\n",
		"GET http://a%2e.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(parse(bad[i], &r) == PEEK_BAD, "%zu: %s", i, bad[i]);
	/* a head longer than kbox reads, with or without an end */
	size_t n = PEEK_HTTP_HEAD_MAX + 64;
	char *big = malloc(n + 32);
	ck_assert_ptr_nonnull(big);
	strcpy(big, "GET / HTTP/1.1\r\nX-Pad: ");
	memset(big + strlen(big), 'a', n);
	big[n] = '\0';
	ck_assert_int_eq(parse(big, &r), PEEK_BAD);
	strcat(big, "\r\nHost: a.test\r\n\r\n");
	ck_assert_int_eq(parse(big, &r), PEEK_BAD);
	/* a long request line without its end */
	strcpy(big, "GET /");
	memset(big + 5, 'a', n - 5);
	big[n] = '\0';
	ck_assert_int_eq(parse(big, &r), PEEK_BAD);
	free(big);
}
END_TEST

Suite *peek_suite(void)
{
	return unit_suite("peek", "core", tls_server_name, http_host,
			  names_nothing, refused_when_ambiguous);
}
