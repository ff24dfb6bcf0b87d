/* The names a client states in the first bytes of a TCP connection, read
 * before any of them go upstream (docs/network.md, "Names the client
 * states"): the server name of a TLS ClientHello (SNI, through tls_sni),
 * or on plain HTTP/1.x the Host header of the first request and the
 * authority of an absolute-form target ("GET http://x/ HTTP/1.1").  The
 * stack judges them against the name rules (pol_check_stated), so that
 * dialling an address directly does not get around `--deny NAME`.
 *
 * Pure, no state: the caller appends what arrives and asks again (each
 * call rereads the bytes held, at most PK_MAX).  Everything is hostile:
 * a request head that is HTTP-shaped but ambiguous (two Host headers, a
 * folded header line, a Host that is no name) or larger than the bounds
 * is PK_BAD, for the caller to refuse; bytes that are neither TLS nor
 * HTTP/1.x name nothing (PK_NONE). */
#ifndef KBOX_NETSTACK_PEEK_H
#define KBOX_NETSTACK_PEEK_H

#include <stddef.h>
#include <stdint.h>

#include "netstack/policy.h"
#include "netstack/tls_sni.h"

#define PK_HTTP_HEAD_MAX 16384u /* request line and headers of the first request */
#define PK_MAX (TLS_HELLO_STREAM_MAX > PK_HTTP_HEAD_MAX ? TLS_HELLO_STREAM_MAX : PK_HTTP_HEAD_MAX)
#define PK_NAMES 2u /* Host and the target's authority */

enum pk_status {
	PK_NEED_MORE = 0, /* a valid prefix of a hello or request head: append and ask again */
	PK_NAMES_FOUND = 1, /* r->n names (1 or 2), all to be judged */
	PK_NONE = 2,      /* names nothing: not TLS or HTTP/1.x, no SNI, no Host, or IP literals only */
	PK_BAD = 3,       /* malformed or over a bound (r->why says which) */
};

struct pk_result {
	char name[PK_NAMES][POL_NAME_MAX + 1]; /* lower case, no trailing dot, no port */
	const char *what[PK_NAMES];            /* "sni", "host", "target": where each came from */
	size_t n;
	const char *why; /* PK_BAD, PK_NONE: a static reason */
};

/* Read the first n bytes of a client's stream.  Returns a pk_status and
 * fills *r (r->n is 0 unless PK_NAMES_FOUND).  Never reads outside
 * buf[0, n). */
int pk_parse(const uint8_t *buf, size_t n, struct pk_result *r);

#endif
