/* The ClientHello reader: real hellos from BearSSL's client (whole, cut
 * at every length, re-split over many records), hand-made hellos for
 * the version and extension cases, HTTP/2 prior knowledge, and names. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bearssl.h>

#include "netstack/tls_sni.h"
#include "tests/lib/unit_suite.h"

/* A real ClientHello from BearSSL's client for NAME with ALPN. */
static size_t bearssl_hello(const char *name, uint8_t *out, size_t cap)
{
	static br_ssl_client_context cc;
	static br_x509_minimal_context xc;
	static unsigned char buf[BR_SSL_BUFSIZE_BIDI];
	static const char *alpn[] = { "h2", "http/1.1" };
	br_ssl_client_init_full(&cc, &xc, NULL, 0);
	br_ssl_engine_set_buffer(&cc.eng, buf, sizeof buf, 1);
	br_ssl_engine_set_protocol_names(&cc.eng, alpn, 2);
	ck_assert(br_ssl_client_reset(&cc, name, 0));
	size_t len;
	uint8_t *rec = br_ssl_engine_sendrec_buf(&cc.eng, &len);
	ck_assert_ptr_nonnull(rec);
	ck_assert_uint_le(len, cap);
	memcpy(out, rec, len);
	return len;
}

/* Re-split a one-record hello into records of at most FRAG bytes. */
static size_t resplit(const uint8_t *in, size_t n, size_t frag, uint8_t *out)
{
	size_t o = 0;
	for (size_t off = 5; off < n; off += frag) {
		size_t k = n - off < frag ? n - off : frag;
		out[o++] = 22;
		out[o++] = 3;
		out[o++] = 1;
		out[o++] = (uint8_t)(k >> 8);
		out[o++] = (uint8_t)k;
		memcpy(out + o, in + off, k);
		o += k;
	}
	return o;
}

START_TEST(real_hello)
{
	uint8_t h1[4096], split[16384];
	size_t n = bearssl_hello("API.Example.TEST", h1, sizeof h1);
	struct tls_hello h;
	ck_assert_int_eq(tls_sni_parse(h1, n, &h), TLS_SNI_OK);
	ck_assert(h.has_sni);
	ck_assert_str_eq(h.sni, "api.example.test");
	ck_assert(h.offers_tls12);
	ck_assert(!h.tls13_only);
	ck_assert_uint_eq(h.alpn_n, 2);
	ck_assert_str_eq(h.alpn[0], "h2");
	ck_assert_str_eq(h.alpn[1], "http/1.1");
	ck_assert(h.alpn_h2 && h.alpn_http11);
	ck_assert_uint_eq(h.consumed, n);

	/* every prefix is "more, please"; trailing bytes are not read */
	for (size_t k = 0; k < n; k++)
		ck_assert_int_eq(tls_sni_parse(h1, k, &h), TLS_SNI_NEED_MORE);
	memset(h1 + n, 0xee, 10);
	ck_assert_int_eq(tls_sni_parse(h1, n + 10, &h), TLS_SNI_OK);
	ck_assert_uint_eq(h.consumed, n);

	/* split over many records, cut anywhere */
	size_t s = resplit(h1, n, 7, split);
	ck_assert_int_eq(tls_sni_parse(split, s, &h), TLS_SNI_OK);
	ck_assert_str_eq(h.sni, "api.example.test");
	ck_assert_uint_eq(h.consumed, s);
	for (size_t k = 0; k < s; k += 13)
		ck_assert_int_eq(tls_sni_parse(split, k, &h), TLS_SNI_NEED_MORE);
	/* ... but not over too many */
	s = resplit(h1, n, 1, split);
	ck_assert_int_eq(tls_sni_parse(split, s, &h), TLS_SNI_BAD);

	/* an alert record in the middle of the hello */
	s = resplit(h1, n, 40, split);
	split[45] = 21;
	ck_assert_int_eq(tls_sni_parse(split, s, &h), TLS_SNI_BAD);
}
END_TEST

/* Hand-made hello: legacy version, optional extensions given raw. */
static size_t craft(uint8_t *out, uint16_t legacy, const uint8_t *ext, size_t extlen)
{
	static uint8_t body[20000];
	size_t n = 0;
	body[n++] = (uint8_t)(legacy >> 8);
	body[n++] = (uint8_t)legacy;
	memset(body + n, 7, 32);
	n += 32;
	body[n++] = 0;
	body[n++] = 0, body[n++] = 2, body[n++] = 0xc0, body[n++] = 0x2b;
	body[n++] = 1, body[n++] = 0;
	if (ext) {
		body[n++] = (uint8_t)(extlen >> 8);
		body[n++] = (uint8_t)extlen;
		memcpy(body + n, ext, extlen);
		n += extlen;
	}
	uint8_t hdr[9] = { 22, 3, 1, (uint8_t)((n + 4) >> 8), (uint8_t)(n + 4), 1, 0, (uint8_t)(n >> 8), (uint8_t)n };
	memcpy(out, hdr, 9);
	memcpy(out + 9, body, n);
	return n + 9;
}

/* server_name extension for NAME (LEN bytes). */
static size_t sni_ext(uint8_t *e, const char *name, size_t len)
{
	size_t n = 0;
	e[n++] = 0, e[n++] = 0;
	e[n++] = (uint8_t)((len + 5) >> 8), e[n++] = (uint8_t)(len + 5);
	e[n++] = (uint8_t)((len + 3) >> 8), e[n++] = (uint8_t)(len + 3);
	e[n++] = 0;
	e[n++] = (uint8_t)(len >> 8), e[n++] = (uint8_t)len;
	memcpy(e + n, name, len);
	return n + len;
}

START_TEST(versions)
{
	uint8_t msg[8192], ext[512];
	struct tls_hello h;
	size_t e = sni_ext(ext, "x.test", 6);
	static const uint8_t only13[] = { 0, 43, 0, 5, 4, 0x0a, 0x0a, 0x03, 0x04 }; /* GREASE, 1.3 */
	static const uint8_t both[] = { 0, 43, 0, 5, 4, 0x03, 0x04, 0x03, 0x03 };
	memcpy(ext + e, only13, sizeof only13);
	size_t n = craft(msg, 0x0303, ext, e + sizeof only13);
	ck_assert_int_eq(tls_sni_parse(msg, n, &h), TLS_SNI_OK);
	ck_assert(h.has_supported_versions && h.offers_tls13 && h.tls13_only && !h.offers_tls12);
	ck_assert_str_eq(h.sni, "x.test");

	memcpy(ext + e, both, sizeof both);
	n = craft(msg, 0x0303, ext, e + sizeof both);
	ck_assert_int_eq(tls_sni_parse(msg, n, &h), TLS_SNI_OK);
	ck_assert(h.offers_tls13 && h.offers_tls12 && !h.tls13_only);

	/* no extensions at all: a TLS 1.0 client, no SNI */
	n = craft(msg, 0x0301, NULL, 0);
	ck_assert_int_eq(tls_sni_parse(msg, n, &h), TLS_SNI_OK);
	ck_assert(!h.has_sni && !h.offers_tls12 && !h.tls13_only);
	ck_assert_uint_eq(h.legacy_version, 0x0301);

	/* odd-length version list */
	static const uint8_t odd[] = { 0, 43, 0, 4, 3, 0x03, 0x04, 0x03 };
	memcpy(ext + e, odd, sizeof odd);
	n = craft(msg, 0x0303, ext, e + sizeof odd);
	ck_assert_int_eq(tls_sni_parse(msg, n, &h), TLS_SNI_BAD);
}
END_TEST

START_TEST(server_names)
{
	uint8_t msg[8192], ext[1024];
	struct tls_hello h;
	static const struct {
		const char *in, *out; /* out NULL: invalid */
	} cases[] = {
		{ "Example.COM.", "example.com" },
		{ "a-b.c0", "a-b.c0" },
		{ "xn--bcher-kva.example", "xn--bcher-kva.example" },
		{ "1.2.3.4", NULL },
		{ "under_score.test", NULL },
		{ "-lead.test", NULL },
		{ "trail-.test", NULL },
		{ "a..b", NULL },
		{ ".", NULL },
		{ "sp ace.test", NULL },
		{ "nul\0.test", NULL },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t len = strlen(cases[i].in);
		if (i == sizeof cases / sizeof cases[0] - 1)
			len = 9;
		size_t n = craft(msg, 0x0303, ext, sni_ext(ext, cases[i].in, len));
		ck_assert_int_eq(tls_sni_parse(msg, n, &h), TLS_SNI_OK);
		ck_assert(h.has_sni);
		if (cases[i].out) {
			ck_assert_msg(!h.sni_invalid, "%s", cases[i].in);
			ck_assert_str_eq(h.sni, cases[i].out);
		} else {
			ck_assert_msg(h.sni_invalid, "%s", cases[i].in);
			ck_assert_str_eq(h.sni, "");
		}
	}
	/* label and name lengths */
	char name[300];
	memset(name, 'a', 63);
	strcpy(name + 63, ".test");
	char out[TLS_NAME_MAX + 1];
	ck_assert_int_eq(tls_sni_name_normalize(name, strlen(name), out), 0);
	memset(name, 'a', 64);
	strcpy(name + 64, ".test");
	ck_assert_int_eq(tls_sni_name_normalize(name, strlen(name), out), -EINVAL);
	for (int i = 0; i < 126; i++)
		memcpy(name + 2 * i, "a.", 2);
	memcpy(name + 252, "b", 2); /* 253 bytes */
	ck_assert_int_eq(tls_sni_name_normalize(name, 253, out), 0);
	memcpy(name + 252, "bc", 3);
	ck_assert_int_eq(tls_sni_name_normalize(name, 254, out), -EINVAL);

	/* two host names, and two server_name extensions */
	size_t e = sni_ext(ext, "a.test", 6);
	memcpy(ext + e, ext, e);
	size_t n = craft(msg, 0x0303, ext, 2 * e);
	ck_assert_int_eq(tls_sni_parse(msg, n, &h), TLS_SNI_BAD);
	ck_assert_str_eq(h.why, "duplicate extension");
	static const uint8_t two[] = { 0, 0, 0, 14, 0, 12, 0, 0, 3, 'a', '.', 'b', 0, 0, 3, 'c', '.', 'd' };
	n = craft(msg, 0x0303, two, sizeof two);
	ck_assert_int_eq(tls_sni_parse(msg, n, &h), TLS_SNI_BAD);
	/* a server_name of another type is skipped */
	static const uint8_t other[] = { 0, 0, 0, 8, 0, 6, 9, 0, 3, 'a', '.', 'b' };
	n = craft(msg, 0x0303, other, sizeof other);
	ck_assert_int_eq(tls_sni_parse(msg, n, &h), TLS_SNI_OK);
	ck_assert(!h.has_sni);
}
END_TEST

START_TEST(alpn_and_bounds)
{
	uint8_t msg[20000], ext[18000];
	struct tls_hello h;
	/* ALPN with 10 names, one unprintable */
	size_t n = 0;
	ext[n++] = 0, ext[n++] = 16;
	size_t at = n;
	n += 4;
	for (int i = 0; i < 10; i++) {
		ext[n++] = 3;
		ext[n++] = 'p', ext[n++] = (uint8_t)('0' + i), ext[n++] = i == 1 ? 0x01 : 'x';
	}
	ext[at] = 0, ext[at + 1] = (uint8_t)(n - at - 2);
	ext[at + 2] = 0, ext[at + 3] = (uint8_t)(n - at - 4);
	size_t m = craft(msg, 0x0303, ext, n);
	ck_assert_int_eq(tls_sni_parse(msg, m, &h), TLS_SNI_OK);
	ck_assert_uint_eq(h.alpn_total, 10);
	ck_assert_uint_eq(h.alpn_n, TLS_ALPN_KEEP);
	ck_assert_str_eq(h.alpn[1], "p2x");
	ck_assert(!h.alpn_http11);
	/* an empty ALPN name */
	static const uint8_t empty[] = { 0, 16, 0, 4, 0, 2, 1, 'a', 0 };
	m = craft(msg, 0x0303, empty, sizeof empty);
	ck_assert_int_eq(tls_sni_parse(msg, m, &h), TLS_SNI_BAD);

	/* a hello over TLS_HELLO_MAX is refused from its header alone */
	uint8_t big[9] = { 22, 3, 1, 0x40, 0x00, 1, 0x00, 0x40, 0x00 };
	ck_assert_int_eq(tls_sni_parse(big, sizeof big, &h), TLS_SNI_BAD);
	/* padding up to the bound is fine */
	memset(ext, 0, sizeof ext);
	ext[0] = 0, ext[1] = 21; /* padding */
	size_t pad = TLS_HELLO_MAX - 4 - 41 - 2 - 4;
	ext[2] = (uint8_t)(pad >> 8), ext[3] = (uint8_t)pad;
	uint8_t *rec = malloc(TLS_HELLO_STREAM_MAX);
	m = craft(msg, 0x0303, ext, pad + 4);
	ck_assert_uint_eq(m, TLS_HELLO_MAX + 5);
	/* one record may not carry more than 2^14 bytes: split it */
	size_t s = resplit(msg, m, 8192, rec);
	ck_assert_int_eq(tls_sni_parse(rec, s, &h), TLS_SNI_OK);
	free(rec);

	/* record-level garbage */
	static const uint8_t zero_rec[] = { 22, 3, 1, 0, 0 };
	ck_assert_int_eq(tls_sni_parse(zero_rec, sizeof zero_rec, &h), TLS_SNI_BAD);
	static const uint8_t v2[] = { 22, 2, 0, 0, 4, 1, 0, 0, 0 };
	ck_assert_int_eq(tls_sni_parse(v2, sizeof v2, &h), TLS_SNI_BAD);
	static const uint8_t server_hello[] = { 22, 3, 3, 0, 4, 2, 0, 0, 0 };
	ck_assert_int_eq(tls_sni_parse(server_hello, sizeof server_hello, &h), TLS_SNI_BAD);
	static const uint8_t short_body[] = { 22, 3, 1, 0, 6, 1, 0, 0, 2, 3, 3 };
	ck_assert_int_eq(tls_sni_parse(short_body, sizeof short_body, &h), TLS_SNI_BAD);
}
END_TEST

START_TEST(not_tls)
{
	struct tls_hello h;
	static const char pri[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	ck_assert_int_eq(tls_sni_parse((const uint8_t *)pri, sizeof pri - 1, &h), TLS_SNI_NOT_TLS);
	ck_assert(h.h2_preface);
	ck_assert_int_eq(tls_sni_parse((const uint8_t *)pri, 5, &h), TLS_SNI_NOT_TLS);
	ck_assert(h.h2_preface);
	ck_assert_int_eq(tls_sni_parse((const uint8_t *)"GET / HTTP/1.1\r\n", 16, &h), TLS_SNI_NOT_TLS);
	ck_assert(!h.h2_preface);
	ck_assert_int_eq(tls_sni_parse((const uint8_t *)"P", 1, &h), TLS_SNI_NOT_TLS);
	ck_assert_int_eq(tls_sni_parse(NULL, 0, &h), TLS_SNI_NEED_MORE);
	static const uint8_t sslv2[] = { 0x80, 0x2e, 0x01, 0x03, 0x01 };
	ck_assert_int_eq(tls_sni_parse(sslv2, sizeof sslv2, &h), TLS_SNI_NOT_TLS);
}
END_TEST

/* ClientHellos captured from real clients (curl, node, openssl s_client;
 * the fuzz seeds) against a listener on 127.0.0.1. */
static size_t load(const char *name, uint8_t *buf, size_t cap)
{
	char path[256];
	snprintf(path, sizeof path, "tests/fuzz/corpus/fuzz_tls_sni/%s", name);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "%s", path);
	size_t n = fread(buf, 1, cap, f);
	fclose(f);
	return n;
}

START_TEST(captured_hellos)
{
	static uint8_t buf[TLS_HELLO_STREAM_MAX];
	struct tls_hello h;
	static const char *const tls[] = { "curl.bin", "node.bin", "openssl.bin", "openssl12.bin", "openssl13only.bin" };
	for (size_t i = 0; i < sizeof tls / sizeof tls[0]; i++) {
		size_t n = load(tls[i], buf, sizeof buf);
		ck_assert_int_eq(tls_sni_parse(buf, n, &h), TLS_SNI_OK);
		ck_assert_str_eq(h.sni, "api.example.test");
		ck_assert_uint_eq(h.consumed, n);
		ck_assert_msg(h.tls13_only == (i == 4), "%s", tls[i]);
		ck_assert_msg(h.offers_tls12 == (i != 4), "%s", tls[i]);
	}
	size_t n = load("curl.bin", buf, sizeof buf);
	ck_assert_int_eq(tls_sni_parse(buf, n, &h), TLS_SNI_OK);
	ck_assert(h.alpn_h2 && h.alpn_http11);
	n = load("h2prior.bin", buf, sizeof buf);
	ck_assert_int_eq(tls_sni_parse(buf, n, &h), TLS_SNI_NOT_TLS);
	ck_assert(h.h2_preface);
}
END_TEST

Suite *tls_sni_suite(void)
{
	return unit_suite("tls_sni", "sni", real_hello, versions, server_names,
			  alpn_and_bounds, not_tls, captured_hellos);
}
