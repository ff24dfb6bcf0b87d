/* ClientHello reader: record reassembly, then a strict walk of the hello
 * (RFC 8446 4.1.2, RFC 5246 7.4.1.2) and of the three extensions we use. */
#include "netstack/tls_sni.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define REC_HANDSHAKE 22
#define REC_HDR 5
#define REC_MAX 16384u /* TLSPlaintext.length bound */
#define HS_CLIENT_HELLO 1
#define EXT_SERVER_NAME 0
#define EXT_ALPN 16
#define EXT_SUPPORTED_VERSIONS 43
#define EXT_SEEN_MAX 64 /* distinct extension types remembered for the duplicate check */

static const char h2_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/* A bounds-checked cursor over one contiguous span. */
struct rd {
	const uint8_t *p;
	size_t n;
	bool bad;
};

static const uint8_t *rd_take(struct rd *r, size_t k)
{
	if (r->bad || k > r->n) {
		r->bad = true;
		return NULL;
	}
	const uint8_t *p = r->p;
	r->p += k;
	r->n -= k;
	return p;
}

static unsigned rd_u8(struct rd *r)
{
	const uint8_t *p = rd_take(r, 1);
	return p ? p[0] : 0;
}

static unsigned rd_u16(struct rd *r)
{
	const uint8_t *p = rd_take(r, 2);
	return p ? (unsigned)p[0] << 8 | p[1] : 0;
}

/* A sub-cursor over the next LEN bytes (a length-prefixed vector). */
static struct rd rd_sub(struct rd *r, size_t len)
{
	struct rd s = { 0 };
	s.p = rd_take(r, len);
	s.n = s.p ? len : 0;
	s.bad = s.p == NULL;
	return s;
}

int tls_sni_name_normalize(const char *name, size_t len, char *out)
{
	if (len > 0 && name[len - 1] == '.')
		len--;
	if (len == 0 || len > TLS_NAME_MAX)
		return -EINVAL;
	size_t label = 0;
	bool all_digits = true;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c == '.') {
			if (label == 0 || name[i - 1] == '-')
				return -EINVAL;
			label = 0;
			all_digits = true;
			out[i] = '.';
			continue;
		}
		bool digit = c >= '0' && c <= '9';
		bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
		if (!digit && !alpha && c != '-')
			return -EINVAL;
		if (c == '-' && label == 0)
			return -EINVAL;
		if (++label > 63)
			return -EINVAL;
		all_digits = all_digits && digit;
		out[i] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
	}
	/* An all-numeric last label is an IPv4 literal (no TLD is numeric),
	 * which SNI may not carry (RFC 6066 3). */
	if (name[len - 1] == '-' || all_digits)
		return -EINVAL;
	out[len] = '\0';
	return 0;
}

static void note_version(struct tls_hello *h, unsigned v)
{
	if (v == 0x0303)
		h->offers_tls12 = true;
	else if (v == 0x0304)
		h->offers_tls13 = true;
}

/* server_name (RFC 6066 3): exactly one host_name entry. */
static int parse_sni(struct rd *e, struct tls_hello *h)
{
	struct rd list = rd_sub(e, rd_u16(e));
	if (e->bad || e->n != 0 || list.n == 0)
		return -1;
	while (list.n > 0) {
		unsigned type = rd_u8(&list);
		struct rd name = rd_sub(&list, rd_u16(&list));
		if (list.bad)
			return -1;
		if (type != 0)
			continue;
		if (h->has_sni || name.n == 0)
			return -1;
		h->has_sni = true;
		if (tls_sni_name_normalize((const char *)name.p, name.n, h->sni) < 0) {
			h->sni[0] = '\0';
			h->sni_invalid = true;
		}
	}
	return 0;
}

/* application_layer_protocol_negotiation (RFC 7301 3.1). */
static int parse_alpn(struct rd *e, struct tls_hello *h)
{
	struct rd list = rd_sub(e, rd_u16(e));
	if (e->bad || e->n != 0 || list.n < 2)
		return -1;
	while (list.n > 0) {
		struct rd name = rd_sub(&list, rd_u8(&list));
		if (list.bad || name.n == 0)
			return -1;
		h->alpn_total++;
		if (name.n == 8 && memcmp(name.p, "http/1.1", 8) == 0)
			h->alpn_http11 = true;
		if (name.n == 2 && memcmp(name.p, "h2", 2) == 0)
			h->alpn_h2 = true;
		bool printable = name.n <= TLS_ALPN_NAME_MAX;
		for (size_t i = 0; printable && i < name.n; i++)
			printable = name.p[i] > 0x20 && name.p[i] < 0x7f;
		if (printable && h->alpn_n < TLS_ALPN_KEEP) {
			memcpy(h->alpn[h->alpn_n], name.p, name.n);
			h->alpn[h->alpn_n][name.n] = '\0';
			h->alpn_n++;
		}
	}
	return 0;
}

/* supported_versions, client form (RFC 8446 4.2.1): 2..254 bytes. */
static int parse_versions(struct rd *e, struct tls_hello *h)
{
	size_t len = rd_u8(e);
	if (len < 2 || len % 2 != 0)
		return -1;
	struct rd list = rd_sub(e, len);
	if (e->bad || e->n != 0)
		return -1;
	h->has_supported_versions = true;
	while (list.n > 0)
		note_version(h, rd_u16(&list));
	return 0;
}

static int bad(struct tls_hello *h, const char *why)
{
	h->why = why;
	return TLS_SNI_BAD;
}

/* The hello body, after the 4-byte handshake header. */
static int parse_body(struct rd *r, struct tls_hello *h)
{
	h->legacy_version = (uint16_t)rd_u16(r);
	rd_take(r, 32); /* random */
	size_t sid = rd_u8(r);
	if (sid > 32)
		return bad(h, "session id longer than 32 bytes");
	rd_take(r, sid);
	size_t suites = rd_u16(r);
	if (suites < 2 || suites % 2 != 0)
		return bad(h, "malformed cipher suite list");
	rd_take(r, suites);
	size_t comp = rd_u8(r);
	if (comp < 1)
		return bad(h, "empty compression list");
	rd_take(r, comp);
	if (r->bad)
		return bad(h, "truncated ClientHello");
	if (r->n > 0) {
		struct rd exts = rd_sub(r, rd_u16(r));
		if (r->bad || r->n != 0)
			return bad(h, "extension block does not fill the hello");
		uint16_t seen[EXT_SEEN_MAX];
		size_t nseen = 0;
		while (exts.n > 0) {
			unsigned type = rd_u16(&exts);
			struct rd e = rd_sub(&exts, rd_u16(&exts));
			if (exts.bad)
				return bad(h, "truncated extension");
			/* Two copies of one extension could make us and the TLS
			 * engine read different names: refuse (RFC 8446 4.2). */
			for (size_t i = 0; i < nseen; i++)
				if (seen[i] == type)
					return bad(h, "duplicate extension");
			if (nseen == EXT_SEEN_MAX)
				return bad(h, "too many extensions");
			seen[nseen++] = (uint16_t)type;
			int rc = 0;
			if (type == EXT_SERVER_NAME)
				rc = parse_sni(&e, h);
			else if (type == EXT_ALPN)
				rc = parse_alpn(&e, h);
			else if (type == EXT_SUPPORTED_VERSIONS)
				rc = parse_versions(&e, h);
			if (rc < 0)
				return bad(h, type == EXT_SERVER_NAME ? "malformed server_name"
					      : type == EXT_ALPN     ? "malformed ALPN"
								     : "malformed supported_versions");
		}
	}
	/* Without supported_versions the legacy field is the offer: a
	 * client saying 1.2 (or more) can do 1.2. */
	if (!h->has_supported_versions && h->legacy_version >= 0x0303)
		h->offers_tls12 = true;
	h->tls13_only = h->offers_tls13 && !h->offers_tls12;
	return TLS_SNI_OK;
}

int tls_sni_parse(const uint8_t *buf, size_t n, struct tls_hello *h)
{
	memset(h, 0, sizeof *h);
	if (n == 0)
		return TLS_SNI_NEED_MORE;
	if (buf[0] != REC_HANDSHAKE) {
		size_t k = n < sizeof h2_preface - 1 ? n : sizeof h2_preface - 1;
		h->h2_preface = k >= 3 && memcmp(buf, h2_preface, k) == 0;
		h->why = h->h2_preface ? "HTTP/2 prior knowledge" : "not a TLS handshake record";
		return TLS_SNI_NOT_TLS;
	}

	/* Pass 1: walk the record headers, counting the handshake bytes
	 * available; the hello's length is known from its first 4 bytes. */
	size_t off = 0, have = 0, need = 0, records = 0, end = 0;
	uint8_t hdr[4];
	while (need == 0 || have < need) {
		if (n - off < REC_HDR)
			return TLS_SNI_NEED_MORE;
		const uint8_t *rec = buf + off;
		size_t len = (size_t)rec[3] << 8 | rec[4];
		if (rec[0] != REC_HANDSHAKE)
			return bad(h, records ? "other record inside the ClientHello" : "not a handshake record");
		if (rec[1] != 3)
			return bad(h, "record version is not 3.x");
		if (len == 0 || len > REC_MAX)
			return bad(h, "bad record length");
		if (++records > TLS_HELLO_RECORDS)
			return bad(h, "ClientHello split over too many records");
		size_t avail = n - off - REC_HDR < len ? n - off - REC_HDR : len;
		for (size_t i = 0; i < avail && have + i < 4; i++)
			hdr[have + i] = rec[REC_HDR + i];
		if (need == 0 && have + avail >= 4) {
			if (hdr[0] != HS_CLIENT_HELLO)
				return bad(h, "first handshake message is not a ClientHello");
			need = 4 + ((size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3]);
			if (need > TLS_HELLO_MAX)
				return bad(h, "ClientHello too long");
		}
		if (avail < len) {
			/* The record is incomplete; it may still end the hello. */
			if (need != 0 && have + len > need)
				return bad(h, "record continues past the ClientHello");
			return TLS_SNI_NEED_MORE;
		}
		have += len;
		off += REC_HDR + len;
		if (need != 0 && have > need)
			return bad(h, "record continues past the ClientHello");
		end = off;
	}

	/* Pass 2: the hello in one span (in place when one record holds it). */
	uint8_t *copy = NULL;
	const uint8_t *msg = buf + REC_HDR;
	if (records > 1) {
		copy = malloc(need);
		if (!copy)
			return bad(h, "out of memory");
		size_t got = 0;
		for (size_t o = 0; got < need;) {
			size_t len = (size_t)buf[o + 3] << 8 | buf[o + 4];
			memcpy(copy + got, buf + o + REC_HDR, len);
			got += len;
			o += REC_HDR + len;
		}
		msg = copy;
	}
	struct rd r = { .p = msg + 4, .n = need - 4 };
	int rc = parse_body(&r, h);
	free(copy);
	if (rc == TLS_SNI_OK)
		h->consumed = end;
	return rc;
}
