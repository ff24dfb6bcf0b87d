/* Reading the first ClientHello of a TLS connection (docs/tls-interception.md)
 * from the guest's first bytes, before anything is decided: the server
 * name (SNI), the ALPN list and the versions offered.  The input is the
 * raw TCP byte stream as received so far, in one contiguous buffer; the
 * reader keeps no state, so the caller appends what arrives and asks
 * again (each call costs O(records) until the whole hello is there).
 *
 * Everything is hostile: record and handshake lengths are bounded
 * (TLS_HELLO_MAX), duplicate extensions and malformed lists are refused,
 * and the host name is validated before it is reported. */
#ifndef KBOX_NETSTACK_TLS_SNI_H
#define KBOX_NETSTACK_TLS_SNI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TLS_HELLO_MAX 16384u      /* bytes of the ClientHello message (with its 4-byte header) */
#define TLS_HELLO_RECORDS 64u     /* records the hello may be split across */
#define TLS_HELLO_STREAM_MAX (TLS_HELLO_MAX + 5u * TLS_HELLO_RECORDS) /* stream bytes ever needed */
#define TLS_NAME_MAX 253u         /* longest host name */
#define TLS_ALPN_KEEP 8u          /* ALPN names kept (more are counted) */
#define TLS_ALPN_NAME_MAX 32u     /* longest ALPN name kept */

enum tls_sni_status {
	TLS_SNI_OK = 0,        /* a whole, well-formed ClientHello */
	TLS_SNI_NEED_MORE = 1, /* a valid prefix: append more bytes and ask again */
	TLS_SNI_NOT_TLS = 2,   /* the stream does not start with a TLS handshake record */
	TLS_SNI_BAD = 3,       /* TLS, but malformed or over a bound (see .why) */
};

struct tls_hello {
	/* Server name: lower case, no trailing dot, only [a-z0-9-.] with
	 * labels of 1..63 bytes, at most TLS_NAME_MAX.  Empty without SNI. */
	char sni[TLS_NAME_MAX + 1];
	bool has_sni;          /* a host_name entry was present (valid or not) */
	bool sni_invalid;      /* it was present but not a valid host name (sni is empty) */
	uint16_t legacy_version;  /* ClientHello.client_version */
	bool has_supported_versions;
	bool offers_tls12;     /* the client can do TLS 1.2 (what BearSSL can serve) */
	bool offers_tls13;
	bool tls13_only;       /* offers 1.3 and not 1.2 */
	char alpn[TLS_ALPN_KEEP][TLS_ALPN_NAME_MAX + 1]; /* printable names, in order */
	size_t alpn_n;         /* names kept in alpn */
	size_t alpn_total;     /* names offered (including ones not kept) */
	bool alpn_http11, alpn_h2;
	bool h2_preface;       /* NOT_TLS and the bytes start like "PRI * HTTP/2.0" */
	size_t consumed;       /* OK: stream bytes up to the end of the record that ends the hello */
	const char *why;       /* BAD/NOT_TLS: a static reason for the audit log */
};

/* Examine the first N bytes of a guest's TCP stream.  Returns a
 * tls_sni_status and fills *H (always: fields not found are zero).
 * NOT_TLS as soon as the first byte is not a handshake record (0x16);
 * NEED_MORE while the bytes are a valid prefix of a hello within the
 * bounds; BAD for anything malformed, for a hello longer than
 * TLS_HELLO_MAX or split over more than TLS_HELLO_RECORDS records, and
 * for records other than handshake before the hello ends.  Never reads
 * outside BUF[0..N). */
int tls_sni_parse(const uint8_t *buf, size_t n, struct tls_hello *h);

/* Validate a DNS host name as the reader does (LDH labels of 1..63,
 * dots, at most TLS_NAME_MAX, one trailing dot allowed) and write it in
 * lower case without the trailing dot into OUT (TLS_NAME_MAX + 1
 * bytes).  0 or -EINVAL.  A string that is an IP literal fails: SNI
 * carries names only. */
int tls_sni_name_normalize(const char *name, size_t len, char *out);

#endif
