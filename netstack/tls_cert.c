/* The kbox CA and its leaf certificates: a DER writer, a small DER reader
 * for the one certificate we load (our own CA), the X.509 v3 builder, PEM
 * and the on-disk CA.  Keys and signatures come from BearSSL. */
#include "netstack/tls_cert.h"
#include "lib/b64.h"
#include "lib/datadir.h"
#include "lib/errbuf.h"
#include "lib/fileio.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define P256_SCALAR 32u
#define P256_POINT 65u   /* uncompressed: 04 || X || Y */
#define KEYID_MAX 64u    /* longest subjectKeyIdentifier we carry over */
#define DN_MAX 1024u     /* longest CA subject DN we carry over */
#define CERT_MAX 4096u   /* room for any certificate we build */
#define CN_MAX 64u       /* RFC 5280 ub-common-name */
#define TLS_CERT_SLOTS (2u * TLS_CERT_MINT_MAX) /* hash table: at most half full */
#define RENEW_MARGIN 86400 /* re-mint a cached leaf this close to expiry */

#define OID_EC_PUBKEY "1.2.840.10045.2.1"
#define OID_P256 "1.2.840.10045.3.1.7"
#define OID_ECDSA_SHA256 "1.2.840.10045.4.3.2"
#define OID_CN "2.5.4.3"
#define OID_SKI "2.5.29.14"
#define OID_KU "2.5.29.15"
#define OID_SAN "2.5.29.17"
#define OID_BC "2.5.29.19"
#define OID_AKI "2.5.29.35"
#define OID_EKU "2.5.29.37"
#define OID_SERVER_AUTH "1.3.6.1.5.5.7.3.1"

#define T_BOOLEAN 0x01u
#define T_INTEGER 0x02u
#define T_BITSTR 0x03u
#define T_OCTSTR 0x04u
#define T_OID 0x06u
#define T_UTF8 0x0cu
#define T_UTCTIME 0x17u
#define T_GENTIME 0x18u
#define T_SEQ 0x30u
#define T_SET 0x31u

struct tls_cert_entry {
	struct tls_cert_entry *all_next; /* every leaf ever minted, freed with the CA */
	time_t not_after;
	br_x509_certificate chain[2];
	unsigned char *der;
	char name[TLS_CERT_NAME_MAX + 1];
};

struct tls_cert_ca {
	pthread_mutex_t mu;
	br_hmac_drbg_context drbg;

	unsigned char ca_x[P256_SCALAR];
	br_ec_private_key ca_sk;
	unsigned char *der;
	size_t der_len;
	char *pem;
	unsigned char dn[DN_MAX]; /* the CA's subject, raw, issuer of every leaf */
	size_t dn_len;
	unsigned char keyid[KEYID_MAX];
	size_t keyid_len;
	time_t not_after;

	unsigned char leaf_x[P256_SCALAR];
	br_ec_private_key leaf_sk;
	unsigned char leaf_pub[P256_POINT];
	unsigned char leaf_keyid[20];

	struct tls_cert_entry *slots[TLS_CERT_SLOTS];
	struct tls_cert_entry *all;
	size_t minted, names;
};

/* ---------------------------------------------------------------- DER out */

void tls_cert_der_init(struct tls_cert_der *d, unsigned char *buf, size_t cap)
{
	d->buf = buf;
	d->cap = cap;
	d->len = 0;
	d->err = 0;
}

static int der_room(struct tls_cert_der *d, size_t n)
{
	if (d->err)
		return 0;
	if (n > d->cap - d->len) {
		d->err = -ENOSPC;
		return 0;
	}
	return 1;
}

void tls_cert_der_raw(struct tls_cert_der *d, const void *p, size_t n)
{
	if (!der_room(d, n))
		return;
	if (n)
		memcpy(d->buf + d->len, p, n);
	d->len += n;
}

/* Bytes of a definite length field for LEN (1 for short form). */
static size_t len_octets(size_t len)
{
	size_t n = 1;
	if (len < 0x80)
		return 1;
	for (size_t v = len; v; v >>= 8)
		n++;
	return n;
}

static void put_len(unsigned char *out, size_t len, size_t octets)
{
	if (octets == 1) {
		out[0] = (unsigned char)len;
		return;
	}
	out[0] = (unsigned char)(0x80u | (octets - 1));
	for (size_t i = octets - 1; i >= 1; i--) {
		out[i] = (unsigned char)len;
		len >>= 8;
	}
}

void tls_cert_der_hdr(struct tls_cert_der *d, unsigned tag, size_t len)
{
	if (!d->err && tag > 0xffu)
		d->err = -EINVAL;
	size_t lo = len_octets(len);
	if (!der_room(d, 1 + lo))
		return;
	d->buf[d->len] = (unsigned char)tag;
	put_len(d->buf + d->len + 1, len, lo);
	d->len += 1 + lo;
}

void tls_cert_der_tlv(struct tls_cert_der *d, unsigned tag, const void *p, size_t n)
{
	tls_cert_der_hdr(d, tag, n);
	tls_cert_der_raw(d, p, n);
}

void tls_cert_der_uint(struct tls_cert_der *d, const unsigned char *p, size_t n)
{
	while (n > 1 && p[0] == 0) {
		p++;
		n--;
	}
	if (n == 0) {
		static const unsigned char zero = 0;
		tls_cert_der_tlv(d, T_INTEGER, &zero, 1);
		return;
	}
	int pad = (p[0] & 0x80u) != 0;
	tls_cert_der_hdr(d, T_INTEGER, n + (size_t)pad);
	if (pad)
		tls_cert_der_raw(d, "", 1);
	tls_cert_der_raw(d, p, n);
}

/* Base-128 arc into OUT (at most 10 bytes for 64 bits); returns its size. */
static size_t oid_arc(unsigned char *out, unsigned long long v)
{
	unsigned char tmp[10];
	size_t n = 0;
	do {
		tmp[n++] = (unsigned char)(v & 0x7fu);
		v >>= 7;
	} while (v);
	for (size_t i = 0; i < n; i++)
		out[i] = (unsigned char)(tmp[n - 1 - i] | (i + 1 < n ? 0x80u : 0));
	return n;
}

void tls_cert_der_oid(struct tls_cert_der *d, const char *dotted)
{
	unsigned char body[64];
	size_t blen = 0;
	unsigned long long arcs[2] = {0, 0};
	size_t narcs = 0;
	const char *s = dotted;
	for (;;) {
		if (*s < '0' || *s > '9')
			goto bad;
		unsigned long long v = 0;
		while (*s >= '0' && *s <= '9') {
			if (v > (ULLONG_MAX - 9) / 10)
				goto bad;
			v = v * 10 + (unsigned)(*s++ - '0');
		}
		if (narcs < 2) {
			arcs[narcs] = v;
		}
		narcs++;
		if (narcs == 2) {
			if (arcs[0] > 2 || (arcs[0] < 2 && arcs[1] > 39) ||
			    arcs[1] > ULLONG_MAX - 80)
				goto bad;
			blen += oid_arc(body + blen, arcs[0] * 40 + arcs[1]);
		} else if (narcs > 2) {
			if (blen + 10 > sizeof body)
				goto bad;
			blen += oid_arc(body + blen, v);
		}
		if (*s == 0)
			break;
		if (*s++ != '.')
			goto bad;
	}
	if (narcs < 2)
		goto bad;
	tls_cert_der_tlv(d, T_OID, body, blen);
	return;
bad:
	if (!d->err)
		d->err = -EINVAL;
}

/* Constructed values are written behind a header of the largest size we
 * allow (tag + 0x84 + 4 length bytes) and moved down when closed, so the
 * builder can nest without knowing sizes in advance. */
#define OPEN_HDR 6u

size_t tls_cert_der_open(struct tls_cert_der *d, unsigned tag)
{
	size_t mark = d->len;
	if (!d->err && tag > 0xffu)
		d->err = -EINVAL;
	if (!der_room(d, OPEN_HDR))
		return mark;
	d->buf[d->len] = (unsigned char)tag;
	d->len += OPEN_HDR;
	return mark;
}

void tls_cert_der_close(struct tls_cert_der *d, size_t mark)
{
	if (d->err)
		return;
	if (mark > d->len || d->len - mark < OPEN_HDR) {
		d->err = -EINVAL;
		return;
	}
	size_t content = d->len - mark - OPEN_HDR;
	if (content > 0xffffffffu) {
		d->err = -E2BIG;
		return;
	}
	size_t lo = len_octets(content);
	put_len(d->buf + mark + 1, content, lo);
	memmove(d->buf + mark + 1 + lo, d->buf + mark + OPEN_HDR, content);
	d->len = mark + 1 + lo + content;
}

void tls_cert_der_time(struct tls_cert_der *d, time_t t)
{
	struct tm tm;
	char s[32];
	if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) {
		if (!d->err)
			d->err = -ERANGE;
		return;
	}
	int year = tm.tm_year + 1900;
	int n;
	unsigned tag;
	if (year >= 1950 && year <= 2049) {
		tag = T_UTCTIME;
		n = snprintf(s, sizeof s, "%02d%02d%02d%02d%02d%02dZ", year % 100, tm.tm_mon + 1,
			     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
	} else {
		tag = T_GENTIME;
		n = snprintf(s, sizeof s, "%04d%02d%02d%02d%02d%02dZ", year, tm.tm_mon + 1,
			     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
	}
	tls_cert_der_tlv(d, tag, s, (size_t)n);
}

/* ----------------------------------------------------------------- DER in */

struct der_rd {
	const unsigned char *p;
	size_t n;
};

struct der_tlv {
	unsigned tag;
	const unsigned char *val;
	size_t len;
	const unsigned char *start; /* header included */
	size_t total;
};

/* Take the next TLV off R.  Only low tag numbers and definite lengths of
 * at most four length octets; the value must lie inside R. */
static int rd_next(struct der_rd *r, struct der_tlv *t)
{
	if (r->n < 2 || (r->p[0] & 0x1fu) == 0x1fu)
		return -EINVAL;
	size_t hl = 2, len = r->p[1];
	if (len & 0x80u) {
		size_t lo = len & 0x7fu;
		if (lo == 0 || lo > 4 || r->n < 2 + lo)
			return -EINVAL;
		len = 0;
		for (size_t i = 0; i < lo; i++)
			len = (len << 8) | r->p[2 + i];
		hl += lo;
	}
	if (len > r->n - hl)
		return -EINVAL;
	t->tag = r->p[0];
	t->start = r->p;
	t->val = r->p + hl;
	t->len = len;
	t->total = hl + len;
	r->p += t->total;
	r->n -= t->total;
	return 0;
}

static int rd_expect(struct der_rd *r, unsigned tag, struct der_tlv *t)
{
	if (rd_next(r, t) < 0 || t->tag != tag)
		return -EINVAL;
	return 0;
}

static int digits(const unsigned char *s, size_t n, int *out)
{
	int v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

/* UTCTime or GeneralizedTime in the Z form RFC 5280 requires. */
static int rd_time(const struct der_tlv *t, time_t *out)
{
	size_t yl = t->tag == T_UTCTIME ? 2 : t->tag == T_GENTIME ? 4 : 0;
	if (!yl || t->len != yl + 11 || t->val[t->len - 1] != 'Z')
		return -EINVAL;
	int y, mo, dd, h, mi, s;
	const unsigned char *v = t->val;
	if (digits(v, yl, &y) || digits(v + yl, 2, &mo) || digits(v + yl + 2, 2, &dd) ||
	    digits(v + yl + 4, 2, &h) || digits(v + yl + 6, 2, &mi) || digits(v + yl + 8, 2, &s))
		return -EINVAL;
	if (yl == 2)
		y += y < 50 ? 2000 : 1900;
	if (mo < 1 || mo > 12 || dd < 1 || dd > 31 || h > 23 || mi > 59 || s > 60)
		return -EINVAL;
	struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = dd,
			.tm_hour = h, .tm_min = mi, .tm_sec = s};
	*out = timegm(&tm);
	return 0;
}

struct cert_info {
	const unsigned char *dn;
	size_t dn_len;
	const unsigned char *keyid;
	size_t keyid_len;
	time_t not_after;
};

/* Walk a certificate far enough to find what a leaf needs from its
 * issuer: the subject DN (raw), the subjectKeyIdentifier and notAfter.
 * Everything else (signature, key) is BearSSL's decoder's job. */
static int cert_scan(const unsigned char *der, size_t len, struct cert_info *ci)
{
	struct der_rd r = {der, len}, tbs_r, ext_r;
	struct der_tlv cert, tbs, t, validity;
	memset(ci, 0, sizeof *ci);
	if (rd_expect(&r, T_SEQ, &cert) || r.n != 0)
		return -EINVAL;
	r = (struct der_rd){cert.val, cert.len};
	if (rd_expect(&r, T_SEQ, &tbs))
		return -EINVAL;
	tbs_r = (struct der_rd){tbs.val, tbs.len};
	if (rd_next(&tbs_r, &t))
		return -EINVAL;
	if (t.tag == 0xa0u && rd_next(&tbs_r, &t))
		return -EINVAL;
	if (t.tag != T_INTEGER)                      /* serial */
		return -EINVAL;
	if (rd_expect(&tbs_r, T_SEQ, &t) ||          /* signature algorithm */
	    rd_expect(&tbs_r, T_SEQ, &t) ||          /* issuer */
	    rd_expect(&tbs_r, T_SEQ, &validity) ||
	    rd_expect(&tbs_r, T_SEQ, &t))            /* subject */
		return -EINVAL;
	ci->dn = t.start;
	ci->dn_len = t.total;
	struct der_rd vr = {validity.val, validity.len};
	struct der_tlv nb, na;
	if (rd_next(&vr, &nb) || rd_next(&vr, &na) || rd_time(&na, &ci->not_after))
		return -EINVAL;
	if (rd_expect(&tbs_r, T_SEQ, &t))            /* subjectPublicKeyInfo */
		return -EINVAL;
	while (tbs_r.n) {
		if (rd_next(&tbs_r, &t))
			return -EINVAL;
		if (t.tag != 0xa3u)
			continue;
		struct der_rd er = {t.val, t.len};
		struct der_tlv exts;
		if (rd_expect(&er, T_SEQ, &exts))
			return -EINVAL;
		ext_r = (struct der_rd){exts.val, exts.len};
		while (ext_r.n) {
			struct der_tlv ext, oid, v;
			if (rd_expect(&ext_r, T_SEQ, &ext))
				return -EINVAL;
			struct der_rd x = {ext.val, ext.len};
			if (rd_expect(&x, T_OID, &oid) || rd_next(&x, &v))
				return -EINVAL;
			if (v.tag == T_BOOLEAN && rd_next(&x, &v))
				return -EINVAL;
			if (v.tag != T_OCTSTR)
				return -EINVAL;
			static const unsigned char ski_oid[] = {0x55, 0x1d, 0x0e};
			if (oid.len != sizeof ski_oid || memcmp(oid.val, ski_oid, sizeof ski_oid))
				continue;
			struct der_rd kr = {v.val, v.len};
			struct der_tlv kid;
			if (rd_expect(&kr, T_OCTSTR, &kid) || kid.len == 0 || kid.len > KEYID_MAX)
				return -EINVAL;
			ci->keyid = kid.val;
			ci->keyid_len = kid.len;
		}
	}
	return 0;
}

/* -------------------------------------------------------------------- PEM */

int tls_cert_pem_encode(const char *label, const unsigned char *der, size_t len, char **out)
{
	size_t llen = strlen(label);
	if (len > (SIZE_MAX - 2 * llen - 64) / 2)
		return -ENOMEM;
	size_t chars = (len + 2) / 3 * 4;
	size_t cap = chars + chars / 64 + 2 + 2 * llen + 40;
	char *s = malloc(cap);
	if (!s)
		return -ENOMEM;
	size_t o = (size_t)snprintf(s, cap, "-----BEGIN %s-----\n", label);
	size_t col = 0;
	for (size_t i = 0; i < len; i += 3) {
		b64_quantum(der + i, len - i < 3 ? len - i : 3, s + o);
		o += 4;
		col += 4;
		if (col == 64) {
			s[o++] = '\n';
			col = 0;
		}
	}
	if (col)
		s[o++] = '\n';
	snprintf(s + o, cap - o, "-----END %s-----\n", label);
	*out = s;
	return 0;
}

int tls_cert_pem_decode(const char *text, size_t len, const char *label, unsigned char **der,
			size_t *der_len)
{
	char begin[96], end[96];
	if (strlen(label) > 64)
		return -EINVAL;
	int bl = snprintf(begin, sizeof begin, "-----BEGIN %s-----", label);
	int el = snprintf(end, sizeof end, "-----END %s-----", label);
	const char *b = memmem(text, len, begin, (size_t)bl);
	if (!b)
		return -EINVAL;
	const char *body = b + bl;
	const char *e = memmem(body, len - (size_t)(body - text), end, (size_t)el);
	if (!e)
		return -EINVAL;
	size_t blen = (size_t)(e - body);
	unsigned char *out = malloc(blen / 4 * 3 + 3);
	if (!out)
		return -ENOMEM;
	size_t o = 0, q = 0, pad = 0, done = 0;
	unsigned acc = 0;
	for (size_t i = 0; i < blen; i++) {
		unsigned char c = (unsigned char)body[i];
		if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
			continue;
		if (done)
			goto bad; /* data after the padded final quantum */
		int v;
		if (c == '=') {
			/* '=' only in the last two places of the final quantum */
			if (q < 2)
				goto bad;
			pad++;
			v = 0;
		} else {
			v = b64_val(c, false);
			if (v < 0 || pad)
				goto bad;
		}
		acc = (acc << 6) | (unsigned)v;
		if (++q == 4) {
			out[o++] = (unsigned char)(acc >> 16);
			if (pad < 2)
				out[o++] = (unsigned char)(acc >> 8);
			if (pad < 1)
				out[o++] = (unsigned char)acc;
			q = 0;
			acc = 0;
			done = pad != 0;
		}
	}
	if (q != 0 || o == 0)
		goto bad;
	*der = out;
	*der_len = o;
	return 0;
bad:
	free(out);
	return -EINVAL;
}

/* ------------------------------------------------------------ keys, certs */

static int drbg_seed(br_hmac_drbg_context *drbg)
{
	unsigned char seed[48];
	size_t got = 0;
	while (got < sizeof seed) {
		ssize_t n = getrandom(seed + got, sizeof seed - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	br_hmac_drbg_init(drbg, &br_sha256_vtable, seed, sizeof seed);
	explicit_bzero(seed, sizeof seed);
	return 0;
}

/* A P-256 key: the scalar lands in X (P256_SCALAR bytes), SK points at it. */
static int keygen(br_hmac_drbg_context *drbg, unsigned char x[P256_SCALAR],
		  br_ec_private_key *sk)
{
	unsigned char kbuf[BR_EC_KBUF_PRIV_MAX_SIZE];
	br_ec_private_key tmp;
	size_t n = br_ec_keygen(&drbg->vtable, br_ec_get_default(), &tmp, kbuf, BR_EC_secp256r1);
	if (n != P256_SCALAR)
		return -EIO;
	memcpy(x, kbuf, P256_SCALAR);
	explicit_bzero(kbuf, sizeof kbuf);
	sk->curve = BR_EC_secp256r1;
	sk->x = x;
	sk->xlen = P256_SCALAR;
	return 0;
}

static int pubkey(const br_ec_private_key *sk, unsigned char pub[P256_POINT])
{
	return br_ec_compute_pub(br_ec_get_default(), NULL, pub, sk) == P256_POINT ? 0 : -EINVAL;
}

/* RFC 5280 4.2.1.2 method 1: SHA-1 of the subjectPublicKey bits. */
static void key_id(const unsigned char pub[P256_POINT], unsigned char id[20])
{
	br_sha1_context c;
	br_sha1_init(&c);
	br_sha1_update(&c, pub, P256_POINT);
	br_sha1_out(&c, id);
}

static void put_alg(struct tls_cert_der *d)
{
	size_t m = tls_cert_der_open(d, T_SEQ);
	tls_cert_der_oid(d, OID_ECDSA_SHA256);
	tls_cert_der_close(d, m);
}

static void put_cn(struct tls_cert_der *d, const char *cn)
{
	size_t name = tls_cert_der_open(d, T_SEQ);
	if (cn) {
		size_t set = tls_cert_der_open(d, T_SET);
		size_t atv = tls_cert_der_open(d, T_SEQ);
		tls_cert_der_oid(d, OID_CN);
		tls_cert_der_tlv(d, T_UTF8, cn, strlen(cn));
		tls_cert_der_close(d, atv);
		tls_cert_der_close(d, set);
	}
	tls_cert_der_close(d, name);
}

static void put_spki(struct tls_cert_der *d, const unsigned char pub[P256_POINT])
{
	size_t spki = tls_cert_der_open(d, T_SEQ);
	size_t alg = tls_cert_der_open(d, T_SEQ);
	tls_cert_der_oid(d, OID_EC_PUBKEY);
	tls_cert_der_oid(d, OID_P256);
	tls_cert_der_close(d, alg);
	tls_cert_der_hdr(d, T_BITSTR, 1 + P256_POINT);
	tls_cert_der_raw(d, "", 1);
	tls_cert_der_raw(d, pub, P256_POINT);
	tls_cert_der_close(d, spki);
}

/* Open an Extension: SEQUENCE { extnID, critical?, OCTET STRING {...} }.
 * Returns the two marks to close, inner first. */
static void ext_open(struct tls_cert_der *d, const char *oid, int critical, size_t m[2])
{
	static const unsigned char yes = 0xff;
	m[0] = tls_cert_der_open(d, T_SEQ);
	tls_cert_der_oid(d, oid);
	if (critical)
		tls_cert_der_tlv(d, T_BOOLEAN, &yes, 1);
	m[1] = tls_cert_der_open(d, T_OCTSTR);
}

static void ext_close(struct tls_cert_der *d, size_t m[2])
{
	tls_cert_der_close(d, m[1]);
	tls_cert_der_close(d, m[0]);
}

static void put_key_ids(struct tls_cert_der *d, const unsigned char *ski, size_t ski_len,
			const unsigned char *aki, size_t aki_len)
{
	size_t m[2];
	ext_open(d, OID_SKI, 0, m);
	tls_cert_der_tlv(d, T_OCTSTR, ski, ski_len);
	ext_close(d, m);
	ext_open(d, OID_AKI, 0, m);
	size_t seq = tls_cert_der_open(d, T_SEQ);
	tls_cert_der_tlv(d, 0x80u, aki, aki_len); /* [0] keyIdentifier */
	tls_cert_der_close(d, seq);
	ext_close(d, m);
}

/* Certificate ::= SEQUENCE { tbs, signatureAlgorithm, signature }, with
 * ecdsa-with-SHA256 by SK over the DER of TBS. */
static int sign_cert(const unsigned char *tbs, size_t tbs_len, const br_ec_private_key *sk,
		     unsigned char **out, size_t *out_len)
{
	unsigned char hash[32], sig[80];
	br_sha256_context h;
	br_sha256_init(&h);
	br_sha256_update(&h, tbs, tbs_len);
	br_sha256_out(&h, hash);
	size_t sl = br_ecdsa_i31_sign_asn1(br_ec_get_default(), &br_sha256_vtable, hash, sk, sig);
	if (sl == 0)
		return -EIO;
	size_t cap = tbs_len + sl + 32;
	unsigned char *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	struct tls_cert_der d;
	tls_cert_der_init(&d, buf, cap);
	size_t c = tls_cert_der_open(&d, T_SEQ);
	tls_cert_der_raw(&d, tbs, tbs_len);
	put_alg(&d);
	tls_cert_der_hdr(&d, T_BITSTR, 1 + sl);
	tls_cert_der_raw(&d, "", 1);
	tls_cert_der_raw(&d, sig, sl);
	tls_cert_der_close(&d, c);
	if (d.err) {
		free(buf);
		return d.err;
	}
	*out = buf;
	*out_len = d.len;
	return 0;
}

static void put_serial(struct tls_cert_der *d, br_hmac_drbg_context *drbg)
{
	unsigned char serial[16];
	br_hmac_drbg_generate(drbg, serial, sizeof serial);
	/* positive (top bit clear) and always 16 bytes long (next bit set) */
	serial[0] = (unsigned char)((serial[0] & 0x7fu) | 0x40u);
	tls_cert_der_uint(d, serial, sizeof serial);
}

/* A TBSCertificate's fields up to its issuer: version 3, a fresh serial,
 * the signature algorithm. */
static void put_version_serial(struct tls_cert_der *d, br_hmac_drbg_context *drbg)
{
	size_t ver = tls_cert_der_open(d, 0xa0u);
	tls_cert_der_uint(d, (const unsigned char *)"\x02", 1);
	tls_cert_der_close(d, ver);
	put_serial(d, drbg);
	put_alg(d);
}

/* Valid from a little before now (clocks differ) until not_after. */
static void put_validity(struct tls_cert_der *d, time_t now, time_t not_after)
{
	size_t val = tls_cert_der_open(d, T_SEQ);
	tls_cert_der_time(d, now - TLS_CERT_LEAF_BACKDATE);
	tls_cert_der_time(d, not_after);
	tls_cert_der_close(d, val);
}

/* The self-signed CA certificate for SK, subject CN=CN. */
static int build_ca_cert(br_hmac_drbg_context *drbg, const br_ec_private_key *sk,
			 const char *cn, time_t now, unsigned char **der, size_t *der_len)
{
	unsigned char pub[P256_POINT], id[20], buf[CERT_MAX];
	int rc = pubkey(sk, pub);
	if (rc)
		return rc;
	key_id(pub, id);
	struct tls_cert_der d;
	tls_cert_der_init(&d, buf, sizeof buf);
	size_t tbs = tls_cert_der_open(&d, T_SEQ);
	put_version_serial(&d, drbg);
	put_cn(&d, cn);
	put_validity(&d, now, now + (time_t)TLS_CERT_CA_LIFETIME);
	put_cn(&d, cn);
	put_spki(&d, pub);
	size_t x = tls_cert_der_open(&d, 0xa3u);
	size_t exts = tls_cert_der_open(&d, T_SEQ);
	size_t m[2];
	ext_open(&d, OID_BC, 1, m);
	static const unsigned char ca_true[] = {T_SEQ, 3, T_BOOLEAN, 1, 0xff};
	tls_cert_der_raw(&d, ca_true, sizeof ca_true);
	ext_close(&d, m);
	ext_open(&d, OID_KU, 1, m);
	static const unsigned char ku_ca[] = {T_BITSTR, 2, 1, 0x06}; /* keyCertSign, cRLSign */
	tls_cert_der_raw(&d, ku_ca, sizeof ku_ca);
	ext_close(&d, m);
	put_key_ids(&d, id, sizeof id, id, sizeof id);
	tls_cert_der_close(&d, exts);
	tls_cert_der_close(&d, x);
	tls_cert_der_close(&d, tbs);
	if (d.err)
		return d.err;
	return sign_cert(buf, d.len, sk, der, der_len);
}

/* NAME is canonical (see canon_name); IP is its address (4 or 16 bytes)
 * or IPLEN 0 for a DNS name. */
static int build_leaf_cert(struct tls_cert_ca *ca, const char *name, const unsigned char *ip,
			   size_t iplen, time_t now, time_t not_after, unsigned char **der,
			   size_t *der_len)
{
	unsigned char buf[CERT_MAX];
	size_t nlen = strlen(name);
	/* A CN holds at most 64 characters; a longer name lives in the SAN
	 * alone, under an empty subject, which makes the SAN critical. */
	int cn_fits = nlen <= CN_MAX;
	struct tls_cert_der d;
	tls_cert_der_init(&d, buf, sizeof buf);
	size_t tbs = tls_cert_der_open(&d, T_SEQ);
	put_version_serial(&d, &ca->drbg);
	tls_cert_der_raw(&d, ca->dn, ca->dn_len);
	put_validity(&d, now, not_after);
	put_cn(&d, cn_fits ? name : NULL);
	put_spki(&d, ca->leaf_pub);
	size_t x = tls_cert_der_open(&d, 0xa3u);
	size_t exts = tls_cert_der_open(&d, T_SEQ);
	size_t m[2];
	ext_open(&d, OID_BC, 1, m);
	tls_cert_der_hdr(&d, T_SEQ, 0); /* cA defaults to FALSE */
	ext_close(&d, m);
	ext_open(&d, OID_KU, 1, m);
	static const unsigned char ku_leaf[] = {T_BITSTR, 2, 7, 0x80}; /* digitalSignature */
	tls_cert_der_raw(&d, ku_leaf, sizeof ku_leaf);
	ext_close(&d, m);
	ext_open(&d, OID_EKU, 0, m);
	size_t eku = tls_cert_der_open(&d, T_SEQ);
	tls_cert_der_oid(&d, OID_SERVER_AUTH);
	tls_cert_der_close(&d, eku);
	ext_close(&d, m);
	ext_open(&d, OID_SAN, !cn_fits, m);
	size_t san = tls_cert_der_open(&d, T_SEQ);
	if (iplen)
		tls_cert_der_tlv(&d, 0x87u, ip, iplen); /* [7] iPAddress */
	else
		tls_cert_der_tlv(&d, 0x82u, name, nlen); /* [2] dNSName */
	tls_cert_der_close(&d, san);
	ext_close(&d, m);
	put_key_ids(&d, ca->leaf_keyid, sizeof ca->leaf_keyid, ca->keyid, ca->keyid_len);
	tls_cert_der_close(&d, exts);
	tls_cert_der_close(&d, x);
	tls_cert_der_close(&d, tbs);
	if (d.err)
		return d.err;
	return sign_cert(buf, d.len, &ca->ca_sk, der, der_len);
}

/* ------------------------------------------------------------------- CA */

/* Fill CA from its certificate (copied) and key scalar X. */
static int ca_init(struct tls_cert_ca *ca, const unsigned char *cert, size_t cert_len,
		   const unsigned char *x, size_t xlen)
{
	if (xlen != P256_SCALAR || cert_len == 0 || cert_len > CERT_MAX)
		return -EINVAL;
	struct cert_info ci;
	if (cert_scan(cert, cert_len, &ci) || ci.dn_len > DN_MAX)
		return -EINVAL;
	memcpy(ca->ca_x, x, P256_SCALAR);
	ca->ca_sk = (br_ec_private_key){.curve = BR_EC_secp256r1, .x = ca->ca_x,
					.xlen = P256_SCALAR};
	/* Zero and values >= n are not keys; br_ec_compute_pub does not
	 * promise to notice, so check: 0 < x < n (n of P-256). */
	static const unsigned char n256[P256_SCALAR] = {
		0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17,
		0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51};
	static const unsigned char zero[P256_SCALAR];
	if (memcmp(x, zero, P256_SCALAR) == 0 || memcmp(x, n256, P256_SCALAR) >= 0)
		return -EINVAL;
	unsigned char pub[P256_POINT];
	if (pubkey(&ca->ca_sk, pub))
		return -EINVAL;

	br_x509_decoder_context xd;
	br_x509_decoder_init(&xd, NULL, NULL);
	br_x509_decoder_push(&xd, cert, cert_len);
	const br_x509_pkey *pk = br_x509_decoder_get_pkey(&xd);
	if (br_x509_decoder_last_error(&xd) != 0 || !pk || pk->key_type != BR_KEYTYPE_EC ||
	    pk->key.ec.curve != BR_EC_secp256r1 ||
	    pk->key.ec.qlen != P256_POINT || memcmp(pk->key.ec.q, pub, P256_POINT) != 0 ||
	    !br_x509_decoder_isCA(&xd))
		return -EINVAL;
	memcpy(ca->dn, ci.dn, ci.dn_len);
	ca->dn_len = ci.dn_len;
	if (ci.keyid) {
		memcpy(ca->keyid, ci.keyid, ci.keyid_len);
		ca->keyid_len = ci.keyid_len;
	} else {
		key_id(pub, ca->keyid);
		ca->keyid_len = 20;
	}
	ca->not_after = ci.not_after;

	ca->der = malloc(cert_len);
	if (!ca->der)
		return -ENOMEM;
	memcpy(ca->der, cert, cert_len);
	ca->der_len = cert_len;
	int rc = tls_cert_pem_encode("CERTIFICATE", cert, cert_len, &ca->pem);
	if (rc)
		return rc;
	if (!ca->drbg.vtable && (rc = drbg_seed(&ca->drbg)))
		return rc;
	if ((rc = keygen(&ca->drbg, ca->leaf_x, &ca->leaf_sk)) || (rc = pubkey(&ca->leaf_sk, ca->leaf_pub)))
		return rc;
	key_id(ca->leaf_pub, ca->leaf_keyid);
	return 0;
}

static struct tls_cert_ca *ca_alloc(void)
{
	struct tls_cert_ca *ca = calloc(1, sizeof *ca);
	if (ca && pthread_mutex_init(&ca->mu, NULL) != 0) {
		free(ca);
		return NULL;
	}
	return ca;
}

void tls_cert_ca_free(struct tls_cert_ca *ca)
{
	if (!ca)
		return;
	for (struct tls_cert_entry *e = ca->all, *next; e; e = next) {
		next = e->all_next;
		free(e->der);
		free(e);
	}
	free(ca->der);
	free(ca->pem);
	pthread_mutex_destroy(&ca->mu);
	explicit_bzero(ca, sizeof *ca);
	free(ca);
}

int tls_cert_ca_from_parts(const unsigned char *cert_der, size_t cert_len, const unsigned char *priv,
			   size_t priv_len, struct tls_cert_ca **out)
{
	struct tls_cert_ca *ca = ca_alloc();
	if (!ca)
		return -ENOMEM;
	int rc = ca_init(ca, cert_der, cert_len, priv, priv_len);
	if (rc) {
		tls_cert_ca_free(ca);
		return rc;
	}
	*out = ca;
	return 0;
}

int tls_cert_ca_generate(const char *cn, time_t now, struct tls_cert_ca **out)
{
	if (!cn || !*cn || strlen(cn) > CN_MAX)
		return -EINVAL;
	struct tls_cert_ca *ca = ca_alloc();
	if (!ca)
		return -ENOMEM;
	unsigned char x[P256_SCALAR], *der = NULL;
	size_t der_len = 0;
	br_ec_private_key sk;
	int rc = drbg_seed(&ca->drbg);
	if (!rc)
		rc = keygen(&ca->drbg, x, &sk);
	if (!rc)
		rc = build_ca_cert(&ca->drbg, &sk, cn, now, &der, &der_len);
	if (!rc)
		rc = ca_init(ca, der, der_len, x, sizeof x);
	free(der);
	explicit_bzero(x, sizeof x);
	if (rc) {
		tls_cert_ca_free(ca);
		return rc;
	}
	*out = ca;
	return 0;
}

const char *tls_cert_ca_pem(const struct tls_cert_ca *ca)
{
	return ca->pem;
}

const unsigned char *tls_cert_ca_der(const struct tls_cert_ca *ca, size_t *len)
{
	*len = ca->der_len;
	return ca->der;
}

time_t tls_cert_ca_not_after(const struct tls_cert_ca *ca)
{
	return ca->not_after;
}

const br_ec_private_key *tls_cert_ca_key(const struct tls_cert_ca *ca)
{
	return &ca->ca_sk;
}

/* ------------------------------------------------------------------ leaves */

/* Check NAME and write its canonical form into OUT: an IP literal in
 * inet_ntop's form (address bytes into IP, *IPLEN 4 or 16), or a DNS name
 * in lower case without a trailing dot (*IPLEN 0). */
static int canon_name(const char *name, char out[TLS_CERT_NAME_MAX + 1], unsigned char ip[16],
		      size_t *iplen)
{
	size_t n = strnlen(name, TLS_CERT_NAME_MAX + 2);
	if (n == 0 || n > TLS_CERT_NAME_MAX + 1)
		return -EINVAL;
	if (inet_pton(AF_INET, name, ip) == 1) {
		*iplen = 4;
		inet_ntop(AF_INET, ip, out, TLS_CERT_NAME_MAX + 1);
		return 0;
	}
	if (memchr(name, ':', n)) {
		if (inet_pton(AF_INET6, name, ip) != 1)
			return -EINVAL;
		*iplen = 16;
		inet_ntop(AF_INET6, ip, out, TLS_CERT_NAME_MAX + 1);
		return 0;
	}
	if (name[n - 1] == '.')
		n--;
	if (n == 0 || n > TLS_CERT_NAME_MAX)
		return -EINVAL;
	size_t label = 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c == '.') {
			if (label == 0)
				return -EINVAL;
			label = 0;
		} else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
			   c == '_') {
			if (++label > 63)
				return -EINVAL;
		} else {
			return -EINVAL;
		}
		out[i] = c;
	}
	if (label == 0)
		return -EINVAL;
	out[n] = 0;
	*iplen = 0;
	return 0;
}

static size_t slot_of(const char *name)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 16777619u;
	return h % TLS_CERT_SLOTS;
}

int tls_cert_leaf(struct tls_cert_ca *ca, const char *name, const br_x509_certificate **chain,
		  size_t *chain_len, const br_ec_private_key **key)
{
	char cname[TLS_CERT_NAME_MAX + 1];
	unsigned char ip[16];
	size_t iplen;
	if (!name || canon_name(name, cname, ip, &iplen))
		return -EINVAL;
	time_t now = time(NULL);
	int rc = 0;
	pthread_mutex_lock(&ca->mu);
	size_t s = slot_of(cname);
	while (ca->slots[s] && strcmp(ca->slots[s]->name, cname) != 0)
		s = (s + 1) % TLS_CERT_SLOTS;
	struct tls_cert_entry *e = ca->slots[s];
	/* (a leaf clamped to the CA's own end cannot be renewed) */
	if (e && (e->not_after - now > RENEW_MARGIN || e->not_after >= ca->not_after))
		goto found;
	/* Not known, or about to expire: mint.  An expiring entry stays
	 * alive (a connection may hold it) and its slot takes the new one. */
	if (ca->minted >= TLS_CERT_MINT_MAX) {
		rc = -ENOSPC;
		goto out;
	}
	e = calloc(1, sizeof *e);
	if (!e) {
		rc = -ENOMEM;
		goto out;
	}
	time_t not_after = now + TLS_CERT_LEAF_LIFETIME;
	if (ca->not_after < not_after)
		not_after = ca->not_after;
	size_t der_len;
	rc = build_leaf_cert(ca, cname, ip, iplen, now, not_after, &e->der, &der_len);
	if (rc) {
		free(e);
		goto out;
	}
	memcpy(e->name, cname, strlen(cname) + 1);
	e->not_after = not_after;
	e->chain[0] = (br_x509_certificate){e->der, der_len};
	e->chain[1] = (br_x509_certificate){ca->der, ca->der_len};
	e->all_next = ca->all;
	ca->all = e;
	ca->minted++;
	if (!ca->slots[s])
		ca->names++;
	ca->slots[s] = e;
found:
	*chain = e->chain;
	*chain_len = 2;
	*key = &ca->leaf_sk;
out:
	pthread_mutex_unlock(&ca->mu);
	return rc;
}

size_t tls_cert_cache_count(struct tls_cert_ca *ca)
{
	pthread_mutex_lock(&ca->mu);
	size_t n = ca->names;
	pthread_mutex_unlock(&ca->mu);
	return n;
}

/* ----------------------------------------------------------------- on disk */

#define FILE_MAX 65536 /* ca.pem and ca.key are a few hundred bytes */

int tls_cert_ca_default_dir(char *buf, size_t len)
{
	return datadir_path("KBOX_CA_DIR", "ca", buf, len);
}

/* Read a small regular file into a NUL-terminated malloc'd buffer; ST
 * gets its attributes.  Anything but a small regular file is -EINVAL. */
static int slurp(const char *path, char **out, size_t *len, struct stat *st)
{
	int rc = fileio_slurp(path, 0, FILE_MAX, out, len, st, NULL);
	return rc == -EISDIR || rc == -EFBIG ? -EINVAL : rc;
}

int tls_cert_key_pem(const br_ec_private_key *sk, char **out)
{
	unsigned char pub[P256_POINT], buf[256];
	if (sk->curve != BR_EC_secp256r1 || sk->xlen != P256_SCALAR)
		return -EINVAL;
	int rc = pubkey(sk, pub);
	if (rc)
		return rc;
	struct tls_cert_der d;
	tls_cert_der_init(&d, buf, sizeof buf);
	size_t k = tls_cert_der_open(&d, T_SEQ);
	tls_cert_der_uint(&d, (const unsigned char *)"\x01", 1);
	tls_cert_der_tlv(&d, T_OCTSTR, sk->x, P256_SCALAR);
	size_t params = tls_cert_der_open(&d, 0xa0u);
	tls_cert_der_oid(&d, OID_P256);
	tls_cert_der_close(&d, params);
	size_t pk = tls_cert_der_open(&d, 0xa1u);
	tls_cert_der_hdr(&d, T_BITSTR, 1 + P256_POINT);
	tls_cert_der_raw(&d, "", 1);
	tls_cert_der_raw(&d, pub, P256_POINT);
	tls_cert_der_close(&d, pk);
	tls_cert_der_close(&d, k);
	rc = d.err ? d.err : tls_cert_pem_encode("EC PRIVATE KEY", buf, d.len, out);
	explicit_bzero(buf, sizeof buf);
	return rc;
}

static void ca_common_name(char cn[CN_MAX + 1])
{
	char host[256] = "localhost";
	const char *user = getenv("USER");
	struct passwd *pw = getpwuid(geteuid());
	if (pw && pw->pw_name)
		user = pw->pw_name;
	if (!user || !*user)
		user = "user";
	gethostname(host, sizeof host - 1);
	host[sizeof host - 1] = 0;
	/* "kbox local CA (" + ")" leave 48 characters for user@host */
	snprintf(cn, CN_MAX + 1, "kbox local CA (%.20s@%.27s)", user, host);
	/* the CN is a UTF8String: keep it plain printable ASCII */
	for (char *p = cn; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
}

static int ca_create(const char *dir, const char *key_path, const char *cert_path,
		     struct tls_cert_ca **out, char *err, size_t errlen)
{
	char cn[CN_MAX + 1], *kp = NULL;
	ca_common_name(cn);
	struct tls_cert_ca *ca;
	int rc = tls_cert_ca_generate(cn, time(NULL), &ca);
	if (rc) {
		errbuf_say(err, errlen, "cannot make a CA key: %s", strerror(-rc));
		return rc;
	}
	rc = tls_cert_key_pem(&ca->ca_sk, &kp);
	/* the key first: a certificate alone on disk would be useless */
	if (!rc && (rc = fileio_write_atomic(AT_FDCWD, key_path, NULL, kp, strlen(kp), 0600)) < 0)
		errbuf_say(err, errlen, "cannot write %s: %s", key_path, strerror(-rc));
	else if (!rc &&
		 (rc = fileio_write_atomic(AT_FDCWD, cert_path, NULL, ca->pem, strlen(ca->pem), 0644)) < 0) {
		errbuf_say(err, errlen, "cannot write %s: %s", cert_path, strerror(-rc));
		unlink(key_path);
	} else if (rc) {
		errbuf_say(err, errlen, "cannot encode the CA key: %s", strerror(-rc));
	}
	if (kp) {
		explicit_bzero(kp, strlen(kp));
		free(kp);
	}
	if (rc) {
		tls_cert_ca_free(ca);
		return rc;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	*out = ca;
	return 0;
}

static int ca_load(const char *key_path, const char *cert_path, struct tls_cert_ca **out, char *err,
		   size_t errlen)
{
	char *kt = NULL, *ct = NULL;
	unsigned char *kder = NULL, *cder = NULL;
	size_t kl, cl, kdl = 0, cdl = 0;
	struct stat st;
	int rc = slurp(key_path, &kt, &kl, &st);
	if (rc) {
		errbuf_say(err, errlen, "cannot read %s: %s", key_path,
		    rc == -EINVAL ? "not a small regular file" : strerror(-rc));
		goto out;
	}
	if (st.st_uid != geteuid() || (st.st_mode & 077)) {
		errbuf_say(err, errlen, "%s is %s (mode %04o): run 'chmod 600 %s'%s", key_path,
		    st.st_uid != geteuid() ? "owned by someone else" : "readable by others",
		    (unsigned)(st.st_mode & 07777), key_path,
		    st.st_uid != geteuid() ? " as its owner, or use your own KBOX_CA_DIR" : "");
		rc = -EPERM;
		goto out;
	}
	rc = slurp(cert_path, &ct, &cl, &st);
	if (rc) {
		errbuf_say(err, errlen, "cannot read %s: %s", cert_path,
		    rc == -EINVAL ? "not a small regular file" : strerror(-rc));
		goto out;
	}
	if ((rc = tls_cert_pem_decode(kt, kl, "EC PRIVATE KEY", &kder, &kdl))) {
		errbuf_say(err, errlen, "%s holds no PEM 'EC PRIVATE KEY': remove ca.key and ca.pem to "
				 "make a new CA (guests then trust the new one)", key_path);
		goto out;
	}
	br_skey_decoder_context sd;
	br_skey_decoder_init(&sd);
	br_skey_decoder_push(&sd, kder, kdl);
	const br_ec_private_key *sk = br_skey_decoder_get_ec(&sd);
	if (!sk || sk->curve != BR_EC_secp256r1 || sk->xlen == 0 || sk->xlen > P256_SCALAR) {
		errbuf_say(err, errlen, "%s is not a P-256 EC private key: remove ca.key and ca.pem to "
				 "make a new CA", key_path);
		rc = -EINVAL;
		goto wipe;
	}
	if ((rc = tls_cert_pem_decode(ct, cl, "CERTIFICATE", &cder, &cdl))) {
		errbuf_say(err, errlen, "%s holds no PEM certificate: restore it, or remove ca.key and "
				 "ca.pem to make a new CA", cert_path);
		goto wipe;
	}
	/* RFC 5915 wants the scalar at full width, but some writers drop
	 * leading zero bytes */
	unsigned char x[P256_SCALAR] = {0};
	memcpy(x + P256_SCALAR - sk->xlen, sk->x, sk->xlen);
	rc = tls_cert_ca_from_parts(cder, cdl, x, sizeof x, out);
	explicit_bzero(x, sizeof x);
	if (rc == -EINVAL)
		errbuf_say(err, errlen, "%s is not a CA certificate for %s: restore the pair, or remove "
				 "both to make a new CA", cert_path, key_path);
	else if (rc)
		errbuf_say(err, errlen, "cannot load the CA: %s", strerror(-rc));
	else if ((*out)->not_after <= time(NULL)) {
		errbuf_say(err, errlen, "%s has expired: remove ca.key and ca.pem to make a new CA",
		    cert_path);
		tls_cert_ca_free(*out);
		*out = NULL;
		rc = -EKEYEXPIRED;
	}
wipe:
	explicit_bzero(&sd, sizeof sd);
out:
	if (kt) {
		explicit_bzero(kt, kl);
		free(kt);
	}
	if (kder) {
		explicit_bzero(kder, kdl);
		free(kder);
	}
	free(ct);
	free(cder);
	return rc;
}

int tls_cert_ca_open(const char *dir, struct tls_cert_ca **out, char *err, size_t errlen)
{
	char key_path[PATH_MAX], cert_path[PATH_MAX];
	if (!dir || !*dir || snprintf(key_path, sizeof key_path, "%s/ca.key", dir) >=
				     (int)sizeof key_path - 4 ||
	    snprintf(cert_path, sizeof cert_path, "%s/ca.pem", dir) >= (int)sizeof cert_path - 4) {
		errbuf_say(err, errlen, "CA directory name is empty or too long");
		return -ENAMETOOLONG;
	}
	int rc = datadir_mkdirs(dir);
	if (rc) {
		errbuf_say(err, errlen, "cannot create the CA directory %s: %s", dir, strerror(-rc));
		return rc;
	}
	/* Two kbox processes starting at once must not both create a CA and
	 * leave one's key next to the other's certificate. */
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		rc = -errno;
		errbuf_say(err, errlen, "cannot open the CA directory %s: %s", dir, strerror(-rc));
		return rc;
	}
	while (flock(dfd, LOCK_EX) < 0 && errno == EINTR)
		;
	struct stat ks, cs;
	int have_key = lstat(key_path, &ks) == 0, have_cert = lstat(cert_path, &cs) == 0;
	if (!have_key && !have_cert)
		rc = ca_create(dir, key_path, cert_path, out, err, errlen);
	else if (!have_cert) {
		errbuf_say(err, errlen, "%s exists but %s is missing: restore ca.pem, or remove ca.key to "
				 "make a new CA (guests then trust the new one)", key_path, cert_path);
		rc = -ENOENT;
	} else if (!have_key) {
		errbuf_say(err, errlen, "%s exists but its key %s is missing: restore ca.key, or remove "
				 "ca.pem to make a new CA", cert_path, key_path);
		rc = -ENOENT;
	} else {
		rc = ca_load(key_path, cert_path, out, err, errlen);
	}
	close(dfd); /* drops the lock */
	return rc;
}
