/* The kbox CA: DER writer boundaries, PEM, certificates read back by
 * BearSSL's decoder and validated by its X.509 engine against the CA as a
 * trust anchor, the leaf cache, and the CA directory on disk. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netstack/tls_cert.h"
#include "tests/lib/unit_suite.h"

static unsigned char big[70000];

static void hdr_is(unsigned tag, size_t len, const unsigned char *want, size_t wn)
{
	unsigned char b[8];
	struct tls_cert_der d;
	tls_cert_der_init(&d, b, sizeof b);
	tls_cert_der_hdr(&d, tag, len);
	ck_assert_int_eq(d.err, 0);
	ck_assert_uint_eq(d.len, wn);
	ck_assert_mem_eq(b, want, wn);
}

START_TEST(der_lengths)
{
	hdr_is(0x04, 0, (const unsigned char *)"\x04\x00", 2);
	hdr_is(0x04, 127, (const unsigned char *)"\x04\x7f", 2);
	hdr_is(0x04, 128, (const unsigned char *)"\x04\x81\x80", 3);
	hdr_is(0x04, 255, (const unsigned char *)"\x04\x81\xff", 3);
	hdr_is(0x04, 256, (const unsigned char *)"\x04\x82\x01\x00", 4);
	hdr_is(0x04, 65535, (const unsigned char *)"\x04\x82\xff\xff", 4);
	hdr_is(0x04, 65536, (const unsigned char *)"\x04\x83\x01\x00\x00", 5);

	/* constructed values, closed at each boundary, match the direct form */
	static const size_t sizes[] = {0, 1, 127, 128, 255, 256, 65535, 65536};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		static unsigned char out[70016], want[70016];
		struct tls_cert_der d, w;
		tls_cert_der_init(&d, out, sizeof out);
		size_t m = tls_cert_der_open(&d, 0x30);
		tls_cert_der_raw(&d, big, sizes[i]);
		tls_cert_der_close(&d, m);
		tls_cert_der_init(&w, want, sizeof want);
		tls_cert_der_tlv(&w, 0x30, big, sizes[i]);
		ck_assert_int_eq(d.err, 0);
		ck_assert_uint_eq(d.len, w.len);
		ck_assert(memcmp(out, want, w.len) == 0);
	}

	unsigned char b[4];
	struct tls_cert_der d;
	tls_cert_der_init(&d, b, sizeof b);
	tls_cert_der_hdr(&d, 0x100, 1);
	ck_assert_int_eq(d.err, -EINVAL);
}
END_TEST

START_TEST(der_integers)
{
	unsigned char b[32];
	struct tls_cert_der d;
	tls_cert_der_init(&d, b, sizeof b);
	tls_cert_der_uint(&d, (const unsigned char *)"\x80", 1);
	tls_cert_der_uint(&d, (const unsigned char *)"\x00\x00\x7f", 3);
	tls_cert_der_uint(&d, (const unsigned char *)"\x00\x00", 2);
	tls_cert_der_uint(&d, (const unsigned char *)"\x00\xff\x01", 3);
	static const unsigned char want[] = {0x02, 0x02, 0x00, 0x80, 0x02, 0x01, 0x7f, 0x02, 0x01,
					     0x00, 0x02, 0x03, 0x00, 0xff, 0x01};
	ck_assert_int_eq(d.err, 0);
	ck_assert_uint_eq(d.len, sizeof want);
	ck_assert_mem_eq(b, want, sizeof want);
}
END_TEST

START_TEST(der_oids)
{
	unsigned char b[64];
	struct tls_cert_der d;
	tls_cert_der_init(&d, b, sizeof b);
	tls_cert_der_oid(&d, "1.2.840.10045.2.1");
	tls_cert_der_oid(&d, "2.5.29.14");
	tls_cert_der_oid(&d, "2.999.3");
	static const unsigned char want[] = {0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01,
					     0x06, 0x03, 0x55, 0x1d, 0x0e, 0x06, 0x03, 0x88, 0x37,
					     0x03};
	ck_assert_int_eq(d.err, 0);
	ck_assert_uint_eq(d.len, sizeof want);
	ck_assert_mem_eq(b, want, sizeof want);

	static const char *bad[] = {"", "1", "3.1", "1.40", "1..2", "1.2.", ".1.2", "1.2a",
				    "1.2.99999999999999999999999"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tls_cert_der_init(&d, b, sizeof b);
		tls_cert_der_oid(&d, bad[i]);
		ck_assert_msg(d.err == -EINVAL, "%s accepted", bad[i]);
	}
}
END_TEST

START_TEST(der_overflow)
{
	unsigned char b[8];
	memset(b, 0xee, sizeof b);
	struct tls_cert_der d;
	tls_cert_der_init(&d, b, 6);
	tls_cert_der_tlv(&d, 0x04, "abcd", 4);
	ck_assert_int_eq(d.err, 0);
	tls_cert_der_tlv(&d, 0x04, "abcd", 4); /* does not fit: sticky error */
	ck_assert_int_eq(d.err, -ENOSPC);
	tls_cert_der_raw(&d, "x", 1);
	tls_cert_der_hdr(&d, 0x04, 0);
	ck_assert_int_eq(d.err, -ENOSPC);
	ck_assert_uint_le(d.len, 6);
	ck_assert_uint_eq(b[6], 0xee);
	ck_assert_uint_eq(b[7], 0xee);

	/* an open with no room for its header, then a close */
	tls_cert_der_init(&d, b, 3);
	size_t m = tls_cert_der_open(&d, 0x30);
	tls_cert_der_close(&d, m);
	ck_assert_int_eq(d.err, -ENOSPC);

	/* a big value inside a small buffer */
	static unsigned char small[300];
	tls_cert_der_init(&d, small, sizeof small);
	m = tls_cert_der_open(&d, 0x30);
	tls_cert_der_raw(&d, big, 295);
	tls_cert_der_close(&d, m);
	ck_assert_int_eq(d.err, -ENOSPC);
}
END_TEST

static void time_is(time_t t, const char *want)
{
	unsigned char b[32];
	struct tls_cert_der d;
	tls_cert_der_init(&d, b, sizeof b);
	tls_cert_der_time(&d, t);
	ck_assert_int_eq(d.err, 0);
	size_t n = strlen(want);
	ck_assert_uint_eq(d.len, n + 2);
	ck_assert_uint_eq(b[0], n == 13 ? 0x17 : 0x18);
	ck_assert_uint_eq(b[1], n);
	ck_assert(memcmp(b + 2, want, n) == 0);
}

START_TEST(der_times)
{
	time_is(0, "700101000000Z");
	time_is(2524607999, "491231235959Z");     /* last UTCTime second */
	time_is(2524608000, "20500101000000Z");   /* GeneralizedTime from 2050 */
	time_is(-631152000, "500101000000Z");     /* 1950 */
	time_is(-631152001, "19491231235959Z");
	time_is(253402300799LL, "99991231235959Z");
	unsigned char b[32];
	struct tls_cert_der d;
	tls_cert_der_init(&d, b, sizeof b);
	tls_cert_der_time(&d, 253402300800LL); /* year 10000 */
	ck_assert_int_eq(d.err, -ERANGE);
}
END_TEST

START_TEST(pem_round_trip)
{
	unsigned char data[200];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (unsigned char)(i * 37 + 11);
	for (size_t n = 1; n <= sizeof data; n++) {
		char *pem;
		unsigned char *der;
		size_t len;
		ck_assert_int_eq(tls_cert_pem_encode("TEST", data, n, &pem), 0);
		ck_assert_int_eq(tls_cert_pem_decode(pem, strlen(pem), "TEST", &der, &len), 0);
		ck_assert_uint_eq(len, n);
		ck_assert(memcmp(der, data, n) == 0);
		ck_assert_int_eq(tls_cert_pem_decode(pem, strlen(pem), "TESTX", &der, &len), -EINVAL);
		free(der);
		free(pem);
	}
	static const char *bad[] = {
		"-----BEGIN T-----\nAAAA\n",                      /* no end */
		"-----BEGIN T-----\n-----END T-----\n",           /* empty */
		"-----BEGIN T-----\nAA=A\n-----END T-----\n",     /* '=' inside */
		"-----BEGIN T-----\nAAA\n-----END T-----\n",      /* short quantum */
		"-----BEGIN T-----\nAA==AAAA\n-----END T-----\n", /* data after padding */
		"-----BEGIN T-----\nA===\n-----END T-----\n",
		"-----BEGIN T-----\nAA*A\n-----END T-----\n",
		"-----END T-----\n-----BEGIN T-----\nAAAA\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		unsigned char *der;
		size_t len;
		ck_assert_msg(tls_cert_pem_decode(bad[i], strlen(bad[i]), "T", &der, &len) == -EINVAL,
			      "accepted %s", bad[i]);
	}
	const char *ok = "junk\n-----BEGIN T-----\r\n QU Jj\r\n-----END T-----\n";
	unsigned char *der;
	size_t len;
	ck_assert_int_eq(tls_cert_pem_decode(ok, strlen(ok), "T", &der, &len), 0);
	ck_assert_uint_eq(len, 3);
	ck_assert(memcmp(der, "ABc", 3) == 0);
	free(der);
}
END_TEST

/* The CA as BearSSL sees it: subject DN and key, for a trust anchor. */
struct anchor {
	unsigned char dn[1024];
	size_t dn_len;
	unsigned char q[65];
	br_x509_trust_anchor ta;
};

static void dn_add(void *ctx, const void *buf, size_t len)
{
	struct anchor *a = ctx;
	ck_assert_uint_le(a->dn_len + len, sizeof a->dn);
	memcpy(a->dn + a->dn_len, buf, len);
	a->dn_len += len;
}

static void anchor_of(struct tls_cert_ca *ca, struct anchor *a)
{
	size_t len;
	const unsigned char *der = tls_cert_ca_der(ca, &len);
	br_x509_decoder_context xd;
	memset(a, 0, sizeof *a);
	br_x509_decoder_init(&xd, dn_add, a);
	br_x509_decoder_push(&xd, der, len);
	const br_x509_pkey *pk = br_x509_decoder_get_pkey(&xd);
	ck_assert_ptr_nonnull(pk);
	ck_assert_int_eq(br_x509_decoder_isCA(&xd), 1);
	ck_assert_int_eq(pk->key_type, BR_KEYTYPE_EC);
	ck_assert_int_eq(pk->key.ec.curve, BR_EC_secp256r1);
	ck_assert_int_eq(br_x509_decoder_get_signer_key_type(&xd), BR_KEYTYPE_EC);
	ck_assert_int_eq(br_x509_decoder_get_signer_hash_id(&xd), br_sha256_ID);
	memcpy(a->q, pk->key.ec.q, sizeof a->q);
	a->ta.dn = (br_x500_name){a->dn, a->dn_len};
	a->ta.flags = BR_X509_TA_CA;
	a->ta.pkey.key_type = BR_KEYTYPE_EC;
	a->ta.pkey.key.ec = (br_ec_public_key){BR_EC_secp256r1, a->q, sizeof a->q};
}

/* br_x509_minimal's verdict on CHAIN for SERVER_NAME (0 is success). */
static unsigned validate(struct anchor *a, const br_x509_certificate *chain, size_t n,
			 const char *server_name)
{
	br_x509_minimal_context xc;
	br_x509_minimal_init(&xc, &br_sha256_vtable, &a->ta, 1);
	br_x509_minimal_set_hash(&xc, br_sha256_ID, &br_sha256_vtable);
	br_x509_minimal_set_ecdsa(&xc, br_ec_get_default(), br_ecdsa_i31_vrfy_asn1);
	const br_x509_class **vt = &xc.vtable;
	(*vt)->start_chain(vt, server_name);
	for (size_t i = 0; i < n; i++) {
		(*vt)->start_cert(vt, (uint32_t)chain[i].data_len);
		(*vt)->append(vt, chain[i].data, chain[i].data_len);
		(*vt)->end_cert(vt);
	}
	return (*vt)->end_chain(vt);
}

START_TEST(leaf_validates)
{
	struct tls_cert_ca *ca;
	ck_assert_int_eq(tls_cert_ca_generate("kbox test CA", time(NULL), &ca), 0);
	ck_assert_ptr_nonnull(strstr(tls_cert_ca_pem(ca), "-----BEGIN CERTIFICATE-----\n"));
	static struct anchor a;
	anchor_of(ca, &a);

	/* the CA alone validates against itself as anchor */
	size_t cl;
	const unsigned char *cd = tls_cert_ca_der(ca, &cl);
	br_x509_certificate self = {(unsigned char *)cd, cl};
	ck_assert_uint_eq(validate(&a, &self, 1, NULL), 0);

	static const char *names[] = {"example.com", "api.github.com", "a-b.c_d.example",
				      "x"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		const br_x509_certificate *chain;
		size_t n;
		const br_ec_private_key *key;
		ck_assert_int_eq(tls_cert_leaf(ca, names[i], &chain, &n, &key), 0);
		ck_assert_uint_eq(n, 2);
		ck_assert_int_eq(key->curve, BR_EC_secp256r1);
		ck_assert_uint_eq(validate(&a, chain, n, names[i]), 0);
		ck_assert_uint_eq(validate(&a, chain, n, "other.example"),
				  BR_ERR_X509_BAD_SERVER_NAME);

		/* the leaf is an EC P-256 end-entity signed with ecdsa-SHA256 */
		br_x509_decoder_context xd;
		br_x509_decoder_init(&xd, NULL, NULL);
		br_x509_decoder_push(&xd, chain[0].data, chain[0].data_len);
		ck_assert_ptr_nonnull(br_x509_decoder_get_pkey(&xd));
		ck_assert_int_eq(br_x509_decoder_isCA(&xd), 0);
		ck_assert_int_eq(br_x509_decoder_get_signer_hash_id(&xd), br_sha256_ID);
	}

	/* a 253-byte name does not fit a CN: SAN only, and still valid */
	char longname[254];
	for (size_t i = 0; i < 253; i++)
		longname[i] = (i % 62 == 61) ? '.' : 'a';
	longname[253] = 0;
	const br_x509_certificate *chain;
	size_t n;
	const br_ec_private_key *key;
	ck_assert_int_eq(tls_cert_leaf(ca, longname, &chain, &n, &key), 0);
	ck_assert_uint_eq(validate(&a, chain, n, longname), 0);

	/* another CA's anchor does not accept our leaves */
	struct tls_cert_ca *other;
	static struct anchor b;
	ck_assert_int_eq(tls_cert_ca_generate("kbox test CA", time(NULL), &other), 0);
	anchor_of(other, &b);
	ck_assert_int_eq(tls_cert_leaf(ca, "example.com", &chain, &n, &key), 0);
	ck_assert_uint_ne(validate(&b, chain, n, "example.com"), 0);
	tls_cert_ca_free(other);
	tls_cert_ca_free(ca);
}
END_TEST

START_TEST(leaf_names)
{
	struct tls_cert_ca *ca;
	ck_assert_int_eq(tls_cert_ca_generate("kbox test CA", time(NULL), &ca), 0);
	const br_x509_certificate *c1, *c2;
	size_t n;
	const br_ec_private_key *k1, *k2;
	ck_assert_int_eq(tls_cert_leaf(ca, "Example.COM.", &c1, &n, &k1), 0);
	ck_assert_int_eq(tls_cert_leaf(ca, "example.com", &c2, &n, &k2), 0);
	ck_assert_ptr_eq(c1, c2);
	ck_assert_ptr_eq(k1, k2);
	ck_assert_uint_eq(tls_cert_cache_count(ca), 1);
	ck_assert_int_eq(tls_cert_leaf(ca, "127.0.0.1", &c1, &n, &k1), 0);
	ck_assert_int_eq(tls_cert_leaf(ca, "::1", &c1, &n, &k1), 0);
	ck_assert_int_eq(tls_cert_leaf(ca, "0:0::1", &c2, &n, &k2), 0);
	ck_assert_ptr_eq(c1, c2); /* one canonical form per address */
	ck_assert_int_eq(tls_cert_leaf(ca, "2001:db8::1", &c2, &n, &k2), 0);
	ck_assert_uint_eq(tls_cert_cache_count(ca), 4);

	char toolong[300];
	memset(toolong, 'a', sizeof toolong);
	toolong[299] = 0;
	char label64[80];
	memset(label64, 'b', 64);
	strcpy(label64 + 64, ".com");
	static const char *bad[] = {"", ".", "..", "a..b", ".a", "a b", "a/b", "a\nb", "*.x.com",
				    "[::1]", "1:2:3", "::1%eth0", "a\x80" "b", "café.fr", "a:b",
				    "example.com..", "x@y"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(tls_cert_leaf(ca, bad[i], &c1, &n, &k1) == -EINVAL, "accepted %s", bad[i]);
	ck_assert_int_eq(tls_cert_leaf(ca, toolong, &c1, &n, &k1), -EINVAL);
	ck_assert_int_eq(tls_cert_leaf(ca, label64, &c1, &n, &k1), -EINVAL);
	ck_assert_int_eq(tls_cert_leaf(ca, NULL, &c1, &n, &k1), -EINVAL);
	ck_assert_uint_eq(tls_cert_cache_count(ca), 4);
	tls_cert_ca_free(ca);
}
END_TEST

/* The bound on leaves: past TLS_CERT_MINT_MAX new names are refused, known
 * names keep their (still valid) certificates. */
START_TEST(leaf_bound)
{
	struct tls_cert_ca *ca;
	ck_assert_int_eq(tls_cert_ca_generate("kbox test CA", time(NULL), &ca), 0);
	const br_x509_certificate *first = NULL, *c;
	size_t n;
	const br_ec_private_key *k;
	for (unsigned i = 0; i < TLS_CERT_MINT_MAX; i++) {
		char name[32];
		snprintf(name, sizeof name, "h%u.example", i);
		ck_assert_int_eq(tls_cert_leaf(ca, name, &c, &n, &k), 0);
		if (i == 0)
			first = c;
	}
	ck_assert_uint_eq(tls_cert_cache_count(ca), TLS_CERT_MINT_MAX);
	ck_assert_int_eq(tls_cert_leaf(ca, "one-too-many.example", &c, &n, &k), -ENOSPC);
	ck_assert_int_eq(tls_cert_leaf(ca, "h0.example", &c, &n, &k), 0);
	ck_assert_ptr_eq(c, first);
	static struct anchor a;
	anchor_of(ca, &a);
	ck_assert_uint_eq(validate(&a, c, n, "h0.example"), 0);
	tls_cert_ca_free(ca);
}
END_TEST

/* A CA near its end: leaves end with it (never after), and such a leaf is
 * not re-minted on every use. */
START_TEST(leaf_clamped_to_ca)
{
	struct tls_cert_ca *ca;
	time_t now = time(NULL);
	ck_assert_int_eq(tls_cert_ca_generate("kbox test CA", now - (time_t)TLS_CERT_CA_LIFETIME + 7200, &ca),
			 0);
	const br_x509_certificate *c1, *c2;
	size_t n;
	const br_ec_private_key *k;
	ck_assert_int_eq(tls_cert_leaf(ca, "late.example", &c1, &n, &k), 0);
	ck_assert_int_eq(tls_cert_leaf(ca, "late.example", &c2, &n, &k), 0);
	ck_assert_ptr_eq(c1, c2);
	static struct anchor a;
	anchor_of(ca, &a);
	ck_assert_uint_eq(validate(&a, c1, n, "late.example"), 0);
	/* the leaf's notAfter equals the CA's: same 13 bytes in both */
	size_t cl;
	const unsigned char *cd = tls_cert_ca_der(ca, &cl);
	const unsigned char *p = NULL;
	for (size_t i = 0; i + 2 + 13 <= cl && !p; i++)
		if (cd[i] == 0x17 && cd[i + 1] == 13 && i + 17 + 13 <= cl && cd[i + 15] == 0x17)
			p = cd + i + 15; /* notAfter follows notBefore */
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(memmem(c1[0].data, c1[0].data_len, p, 15));
	tls_cert_ca_free(ca);
}
END_TEST

struct worker {
	struct tls_cert_ca *ca;
	const br_x509_certificate *got[16];
};

static void *work(void *arg)
{
	struct worker *w = arg;
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < 16; i++) {
			char name[32];
			snprintf(name, sizeof name, "host%d.example", i);
			size_t n;
			const br_ec_private_key *k;
			const br_x509_certificate *c;
			if (tls_cert_leaf(w->ca, name, &c, &n, &k) != 0)
				return NULL;
			w->got[i] = c;
		}
	return w;
}

START_TEST(leaf_threads)
{
	struct tls_cert_ca *ca;
	ck_assert_int_eq(tls_cert_ca_generate("kbox test CA", time(NULL), &ca), 0);
	struct worker w[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		w[i].ca = ca;
		ck_assert_int_eq(pthread_create(&t[i], NULL, work, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		void *r;
		pthread_join(t[i], &r);
		ck_assert_ptr_eq(r, &w[i]);
	}
	for (int i = 0; i < 16; i++)
		for (int j = 1; j < 4; j++)
			ck_assert_ptr_eq(w[j].got[i], w[0].got[i]);
	ck_assert_uint_eq(tls_cert_cache_count(ca), 16);
	tls_cert_ca_free(ca);
}
END_TEST

START_TEST(from_parts)
{
	struct tls_cert_ca *ca, *copy;
	ck_assert_int_eq(tls_cert_ca_generate("kbox test CA", time(NULL), &ca), 0);
	size_t len;
	const unsigned char *der = tls_cert_ca_der(ca, &len);
	const br_ec_private_key *sk = tls_cert_ca_key(ca);
	ck_assert_int_eq(tls_cert_ca_from_parts(der, len, sk->x, sk->xlen, &copy), 0);
	ck_assert_str_eq(tls_cert_ca_pem(copy), tls_cert_ca_pem(ca));
	static struct anchor a;
	anchor_of(ca, &a);
	const br_x509_certificate *chain;
	size_t n;
	const br_ec_private_key *key;
	ck_assert_int_eq(tls_cert_leaf(copy, "example.org", &chain, &n, &key), 0);
	ck_assert_uint_eq(validate(&a, chain, n, "example.org"), 0);
	tls_cert_ca_free(copy);

	unsigned char x[32];
	memset(x, 0, sizeof x);
	ck_assert_int_eq(tls_cert_ca_from_parts(der, len, x, 32, &copy), -EINVAL);
	memset(x, 0xff, sizeof x); /* >= n */
	ck_assert_int_eq(tls_cert_ca_from_parts(der, len, x, 32, &copy), -EINVAL);
	x[0] = 1; /* a key, but not this certificate's */
	ck_assert_int_eq(tls_cert_ca_from_parts(der, len, x, 32, &copy), -EINVAL);
	ck_assert_int_eq(tls_cert_ca_from_parts(der, len, sk->x, 31, &copy), -EINVAL);
	for (size_t cut = 0; cut < len; cut += 7)
		ck_assert_int_eq(tls_cert_ca_from_parts(der, cut, sk->x, 32, &copy), -EINVAL);
	/* a leaf is not a CA */
	ck_assert_int_eq(tls_cert_leaf(ca, "example.org", &chain, &n, &key), 0);
	ck_assert_int_eq(tls_cert_ca_from_parts(chain[0].data, chain[0].data_len, key->x, key->xlen,
					  &copy), -EINVAL);
	tls_cert_ca_free(ca);
}
END_TEST

/* Move what one engine has to send into the other, as far as it takes. */
static int pump(br_ssl_engine_context *from, br_ssl_engine_context *to)
{
	size_t out, in;
	if (!(br_ssl_engine_current_state(from) & BR_SSL_SENDREC) ||
	    !(br_ssl_engine_current_state(to) & BR_SSL_RECVREC))
		return 0;
	unsigned char *src = br_ssl_engine_sendrec_buf(from, &out);
	unsigned char *dst = br_ssl_engine_recvrec_buf(to, &in);
	size_t n = out < in ? out : in;
	memcpy(dst, src, n);
	br_ssl_engine_sendrec_ack(from, n);
	br_ssl_engine_recvrec_ack(to, n);
	return n > 0;
}

/* A BearSSL server with tls_cert_leaf's chain and key, a BearSSL client that
 * trusts only our CA, TLS 1.2, in memory: the handshake completes and
 * application data flows, as it will in the interception engine.  For
 * another name the client refuses. */
static unsigned handshake(struct tls_cert_ca *ca, struct anchor *a, const char *mint_for,
			  const char *client_name)
{
	static br_ssl_server_context sc;
	static br_ssl_client_context cc;
	static br_x509_minimal_context xc;
	static unsigned char sbuf[BR_SSL_BUFSIZE_BIDI], cbuf[BR_SSL_BUFSIZE_BIDI];
	const br_x509_certificate *chain;
	size_t n;
	const br_ec_private_key *key;
	ck_assert_int_eq(tls_cert_leaf(ca, mint_for, &chain, &n, &key), 0);
	br_ssl_server_init_full_ec(&sc, chain, n, BR_KEYTYPE_EC, key);
	br_ssl_engine_set_versions(&sc.eng, BR_TLS12, BR_TLS12);
	br_ssl_engine_set_buffer(&sc.eng, sbuf, sizeof sbuf, 1);
	ck_assert_int_eq(br_ssl_server_reset(&sc), 1);
	br_ssl_client_init_full(&cc, &xc, &a->ta, 1);
	br_ssl_engine_set_buffer(&cc.eng, cbuf, sizeof cbuf, 1);
	ck_assert_int_eq(br_ssl_client_reset(&cc, client_name, 0), 1);
	int sent = 0;
	for (int round = 0; round < 200; round++) {
		unsigned cs = br_ssl_engine_current_state(&cc.eng);
		unsigned ss = br_ssl_engine_current_state(&sc.eng);
		if (cs == BR_SSL_CLOSED)
			return br_ssl_engine_last_error(&cc.eng);
		if (ss == BR_SSL_CLOSED)
			return 1000 + br_ssl_engine_last_error(&sc.eng);
		if (!sent && (cs & BR_SSL_SENDAPP)) {
			size_t room;
			unsigned char *p = br_ssl_engine_sendapp_buf(&cc.eng, &room);
			ck_assert_uint_ge(room, 4);
			memcpy(p, "ping", 4);
			br_ssl_engine_sendapp_ack(&cc.eng, 4);
			br_ssl_engine_flush(&cc.eng, 0);
			sent = 1;
		}
		if (ss & BR_SSL_RECVAPP) {
			size_t got;
			unsigned char *p = br_ssl_engine_recvapp_buf(&sc.eng, &got);
			ck_assert_uint_eq(got, 4);
			ck_assert(memcmp(p, "ping", 4) == 0);
			ck_assert_uint_eq(br_ssl_engine_get_version(&sc.eng), BR_TLS12);
			return 0;
		}
		pump(&cc.eng, &sc.eng);
		pump(&sc.eng, &cc.eng);
	}
	return 9999;
}

START_TEST(bearssl_handshake)
{
	struct tls_cert_ca *ca;
	ck_assert_int_eq(tls_cert_ca_generate("kbox test CA", time(NULL), &ca), 0);
	static struct anchor a;
	anchor_of(ca, &a);
	ck_assert_uint_eq(handshake(ca, &a, "api.example.com", "api.example.com"), 0);
	ck_assert_uint_eq(handshake(ca, &a, "API.Example.com.", "api.example.com"), 0);
	ck_assert_uint_eq(handshake(ca, &a, "api.example.com", "evil.example"),
			  BR_ERR_X509_BAD_SERVER_NAME);
	tls_cert_ca_free(ca);
}
END_TEST

static char tmpdir[64];

static void mk_tmp(void)
{
	strcpy(tmpdir, "/tmp/kbox-tc-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmp(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

static void put(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
}

START_TEST(open_create_reload)
{
	mk_tmp();
	char dir[128], key[160], cert[160], err[512];
	snprintf(dir, sizeof dir, "%s/a/b/ca", tmpdir);
	snprintf(key, sizeof key, "%s/ca.key", dir);
	snprintf(cert, sizeof cert, "%s/ca.pem", dir);
	struct tls_cert_ca *ca, *again;
	ck_assert_int_eq(tls_cert_ca_open(dir, &ca, err, sizeof err), 0);
	struct stat st;
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0700);
	ck_assert_int_eq(stat(key, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	ck_assert_int_eq(stat(cert, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0644);
	ck_assert_int_eq(tls_cert_ca_open(dir, &again, err, sizeof err), 0);
	ck_assert_str_eq(tls_cert_ca_pem(again), tls_cert_ca_pem(ca));
	static struct anchor a;
	anchor_of(ca, &a);
	const br_x509_certificate *chain;
	size_t n;
	const br_ec_private_key *k;
	ck_assert_int_eq(tls_cert_leaf(again, "reload.example", &chain, &n, &k), 0);
	ck_assert_uint_eq(validate(&a, chain, n, "reload.example"), 0);
	tls_cert_ca_free(again);

	/* a key others can read */
	chmod(key, 0644);
	err[0] = 0;
	ck_assert_int_eq(tls_cert_ca_open(dir, &again, err, sizeof err), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "chmod 600"));
	chmod(key, 0600);

	/* the certificate alone, the key alone */
	char saved[160];
	snprintf(saved, sizeof saved, "%s/saved.pem", tmpdir);
	ck_assert_int_eq(rename(cert, saved), 0);
	ck_assert_int_eq(tls_cert_ca_open(dir, &again, err, sizeof err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "ca.pem is missing"));
	ck_assert_int_eq(rename(saved, cert), 0);
	ck_assert_int_eq(rename(key, saved), 0);
	ck_assert_int_eq(tls_cert_ca_open(dir, &again, err, sizeof err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "key"));
	ck_assert_int_eq(rename(saved, key), 0);

	/* corrupt certificate, garbage key, and a key from another CA */
	put(cert, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", 0644);
	ck_assert_int_eq(tls_cert_ca_open(dir, &again, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "not a CA certificate"));
	put(cert, "hello\n", 0644);
	ck_assert_int_eq(tls_cert_ca_open(dir, &again, err, sizeof err), -EINVAL);
	put(cert, tls_cert_ca_pem(ca), 0644);
	put(key, "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n", 0600);
	ck_assert_int_eq(tls_cert_ca_open(dir, &again, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "P-256"));

	char dir2[128];
	snprintf(dir2, sizeof dir2, "%s/other", tmpdir);
	struct tls_cert_ca *other;
	ck_assert_int_eq(tls_cert_ca_open(dir2, &other, err, sizeof err), 0);
	char otherkey[160];
	snprintf(otherkey, sizeof otherkey, "%s/ca.key", dir2);
	ck_assert_int_eq(rename(otherkey, key), 0);
	ck_assert_int_eq(tls_cert_ca_open(dir, &again, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "not a CA certificate for"));
	tls_cert_ca_free(other);

	/* a directory in place of the key */
	unlink(key);
	ck_assert_int_eq(mkdir(key, 0700), 0);
	ck_assert_int_eq(tls_cert_ca_open(dir, &again, err, sizeof err), -EINVAL);
	tls_cert_ca_free(ca);
	rm_tmp();
}
END_TEST

START_TEST(default_dir)
{
	char buf[256];
	setenv("KBOX_CA_DIR", "/x/ca", 1);
	ck_assert_int_eq(tls_cert_ca_default_dir(buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "/x/ca");
	setenv("KBOX_CA_DIR", "relative", 1);
	setenv("XDG_DATA_HOME", "/d", 1);
	ck_assert_int_eq(tls_cert_ca_default_dir(buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "/d/kbox/ca");
	unsetenv("KBOX_CA_DIR");
	unsetenv("XDG_DATA_HOME");
	setenv("HOME", "/home/u", 1);
	ck_assert_int_eq(tls_cert_ca_default_dir(buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "/home/u/.local/share/kbox/ca");
	ck_assert_int_eq(tls_cert_ca_default_dir(buf, 10), -ENAMETOOLONG);
	unsetenv("HOME");
	ck_assert_int_eq(tls_cert_ca_default_dir(buf, sizeof buf), -ENOENT);
}
END_TEST

Suite *tls_cert_suite(void)
{
	return unit_suite_fixture("tls_cert", "core", NULL, NULL, 60,
				  der_lengths, der_integers, der_oids,
				  der_overflow, der_times, pem_round_trip,
				  leaf_validates, leaf_names, leaf_threads,
				  leaf_bound, leaf_clamped_to_ca, from_parts,
				  bearssl_handshake, open_create_reload,
				  default_dir);
}
