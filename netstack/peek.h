/* The names a client states in the first bytes of a TCP connection, read
 * before any of them go upstream (docs/network.md, "Names the client
 * states"): the server name of a TLS ClientHello (SNI, through tls_sni),
 * or on plain HTTP/1.x the Host header of the first request and the
 * authority of an absolute-form target ("GET http://x/ HTTP/1.1").  The
 * stack judges them against the name rules (policy_check_stated), so that
 * dialling an address directly does not get around `--deny NAME`.
 *
 * Pure, no state: the caller appends what arrives and asks again (each
 * call rereads the bytes held, at most PEEK_MAX).  Everything is hostile:
 * a request head that is HTTP-shaped but ambiguous (two Host headers, a
 * folded header line, a Host that is no name) or larger than the bounds
 * is PEEK_BAD, for the caller to refuse; bytes that are neither TLS nor
 * HTTP/1.x name nothing (PEEK_NONE). */
#ifndef KBOX_NETSTACK_PEEK_H
#define KBOX_NETSTACK_PEEK_H

#include <stddef.h>
#include <stdint.h>

#include "netstack/policy.h"
#include "netstack/tls_sni.h"

#define PEEK_HTTP_HEAD_MAX 16384u /* request line and headers of the first request */
#define PEEK_MAX (TLS_HELLO_STREAM_MAX > PEEK_HTTP_HEAD_MAX ? TLS_HELLO_STREAM_MAX : PEEK_HTTP_HEAD_MAX)
#define PEEK_NAMES 2u /* Host and the target's authority */

enum peek_status {
	PEEK_NEED_MORE = 0, /* a valid prefix of a hello or request head: append and ask again */
	PEEK_NAMES_FOUND = 1, /* r->n names (1 or 2), all to be judged */
	PEEK_NONE = 2,      /* names nothing: not TLS or HTTP/1.x, no SNI, no Host, or IP literals only */
	PEEK_BAD = 3,       /* malformed or over a bound (r->why says which) */
};

struct peek_result {
	char name[PEEK_NAMES][POLICY_NAME_MAX + 1]; /* lower case, no trailing dot, no port */
	const char *what[PEEK_NAMES];            /* "sni", "host", "target": where each came from */
	size_t n;
	const char *why; /* PEEK_BAD, PEEK_NONE: a static reason */
};

/* Read the first n bytes of a client's stream.  Returns a peek_status and
 * fills *r (r->n is 0 unless PEEK_NAMES_FOUND).  Never reads outside
 * buf[0, n). */
int peek_parse(const uint8_t *buf, size_t n, struct peek_result *r);

#endif
