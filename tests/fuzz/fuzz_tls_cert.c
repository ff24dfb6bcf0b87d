/* Input: the first byte picks the path, the rest is hostile data.
 *   0: a server name (as SNI would bring it) for tls_cert_leaf.  A name that is
 *      accepted must come back as a leaf that BearSSL parses, that is not
 *      a CA, and (for DNS names) that BearSSL validates for that name
 *      under our CA.
 *   1: PEM text ("CERTIFICATE"), decoded, then offered as a CA certificate.
 *   2: raw DER offered as a CA certificate (with a fixed key).
 *   3: PEM encode then decode: the bytes must come back unchanged.
 *   4: a program for the DER writer into a small buffer: it must never
 *      write past its end, and never claim more than it holds.
 * Nothing may crash, leak, hang or read outside the input. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "netstack/tls_cert.h"

static struct tls_cert_ca *ca;
static br_x509_trust_anchor ta;
static unsigned char ta_dn[512], ta_q[65];
static size_t minted;

static void dn_add(void *ctx, const void *buf, size_t len)
{
	size_t *n = ctx;
	if (*n + len <= sizeof ta_dn)
		memcpy(ta_dn + *n, buf, len);
	*n += len;
}

static void setup(void)
{
	if (ca && minted < TLS_CERT_MINT_MAX - 16)
		return;
	/* a fresh CA before the old one runs out of leaves */
	tls_cert_ca_free(ca);
	minted = 0;
	if (tls_cert_ca_generate("kbox fuzz CA", time(NULL), &ca))
		abort();
	size_t len, dn_len = 0;
	const unsigned char *der = tls_cert_ca_der(ca, &len);
	br_x509_decoder_context xd;
	br_x509_decoder_init(&xd, dn_add, &dn_len);
	br_x509_decoder_push(&xd, der, len);
	const br_x509_pkey *pk = br_x509_decoder_get_pkey(&xd);
	if (!pk || dn_len > sizeof ta_dn)
		abort();
	memcpy(ta_q, pk->key.ec.q, sizeof ta_q);
	ta.dn = (br_x500_name){ta_dn, dn_len};
	ta.flags = BR_X509_TA_CA;
	ta.pkey.key_type = BR_KEYTYPE_EC;
	ta.pkey.key.ec = (br_ec_public_key){BR_EC_secp256r1, ta_q, sizeof ta_q};
}

static int has_colon_or_digits_only(const char *name)
{
	int alpha = 0;
	for (const char *p = name; *p; p++) {
		if (*p == ':')
			return 1;
		if (*p != '.' && (*p < '0' || *p > '9'))
			alpha = 1;
	}
	return !alpha;
}

static void leaf(const uint8_t *data, size_t size)
{
	char name[300];
	size_t n = size < sizeof name - 1 ? size : sizeof name - 1;
	memcpy(name, data, n);
	name[n] = 0;
	const br_x509_certificate *chain;
	size_t clen;
	const br_ec_private_key *key;
	size_t before = tls_cert_cache_count(ca);
	int rc = tls_cert_leaf(ca, name, &chain, &clen, &key);
	if (rc == -EINVAL || rc == -ENOSPC)
		return;
	if (rc != 0 || clen != 2 || !key)
		abort();
	if (tls_cert_cache_count(ca) != before)
		minted++;
	br_x509_decoder_context xd;
	br_x509_decoder_init(&xd, NULL, NULL);
	br_x509_decoder_push(&xd, chain[0].data, chain[0].data_len);
	if (!br_x509_decoder_get_pkey(&xd) || br_x509_decoder_isCA(&xd))
		abort();
	if (has_colon_or_digits_only(name))
		return; /* BearSSL matches DNS names only */
	if (name[strlen(name) - 1] == '.')
		name[strlen(name) - 1] = 0; /* nor does it know the root label */
	br_x509_minimal_context xc;
	br_x509_minimal_init(&xc, &br_sha256_vtable, &ta, 1);
	br_x509_minimal_set_hash(&xc, br_sha256_ID, &br_sha256_vtable);
	br_x509_minimal_set_ecdsa(&xc, br_ec_get_default(), br_ecdsa_i31_vrfy_asn1);
	const br_x509_class **vt = &xc.vtable;
	(*vt)->start_chain(vt, name);
	for (size_t i = 0; i < clen; i++) {
		(*vt)->start_cert(vt, (uint32_t)chain[i].data_len);
		(*vt)->append(vt, chain[i].data, chain[i].data_len);
		(*vt)->end_cert(vt);
	}
	unsigned err = (*vt)->end_chain(vt);
	if (err != 0)
		abort();
}

static void offer_ca(const unsigned char *der, size_t len)
{
	static const unsigned char x[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
	struct tls_cert_ca *other;
	if (tls_cert_ca_from_parts(der, len, x, sizeof x, &other) == 0)
		tls_cert_ca_free(other);
}

static void der_program(const uint8_t *data, size_t size)
{
	unsigned char buf[64 + 8];
	memset(buf + 64, 0xa5, 8);
	struct tls_cert_der d;
	tls_cert_der_init(&d, buf, 64);
	size_t marks[8], nm = 0;
	char text[40];
	for (size_t i = 0; i + 2 < size; i += 3) {
		unsigned op = data[i] & 7, a = data[i + 1], b = data[i + 2];
		switch (op) {
		case 0:
			tls_cert_der_hdr(&d, a, (size_t)b << (a & 15));
			break;
		case 1:
			tls_cert_der_raw(&d, data, b < size ? b : size);
			break;
		case 2:
			tls_cert_der_uint(&d, data + i, size - i < b ? size - i : b);
			break;
		case 3: {
			size_t n = size - i < sizeof text - 1 ? size - i : sizeof text - 1;
			memcpy(text, data + i + 1, n - 1);
			text[n - 1] = 0;
			tls_cert_der_oid(&d, text);
			break;
		}
		case 4:
			if (nm < 8)
				marks[nm++] = tls_cert_der_open(&d, a);
			break;
		case 5:
			if (nm)
				tls_cert_der_close(&d, marks[--nm]);
			break;
		case 6:
			tls_cert_der_time(&d, (time_t)((int64_t)(int8_t)a * 100000000 + b * 1000003));
			break;
		default:
			tls_cert_der_tlv(&d, a, data, b < size ? b : size);
		}
		if (d.len > d.cap)
			abort();
	}
	for (int j = 0; j < 8; j++)
		if (buf[64 + j] != 0xa5)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	setup();
	uint8_t sel = data[0];
	data++;
	size--;
	unsigned char *der;
	size_t len;
	char *pem;
	switch (sel % 5) {
	case 0:
		leaf(data, size);
		break;
	case 1:
		if (tls_cert_pem_decode((const char *)data, size, "CERTIFICATE", &der, &len) == 0) {
			offer_ca(der, len);
			free(der);
		}
		break;
	case 2:
		offer_ca(data, size);
		break;
	case 3:
		if (size == 0)
			break;
		if (tls_cert_pem_encode("X", data, size, &pem) != 0)
			abort();
		if (tls_cert_pem_decode(pem, strlen(pem), "X", &der, &len) != 0 || len != size ||
		    memcmp(der, data, size) != 0)
			abort();
		free(der);
		free(pem);
		break;
	default:
		der_program(data, size);
	}
	return 0;
}
