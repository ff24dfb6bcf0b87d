/* The names a client states in its first bytes: see peek.h. */
#include "netstack/peek.h"

#include <string.h>
#include <strings.h>

#define METHOD_MAX 32u  /* longest method token taken for HTTP */
#define LEADING_EOL 4u  /* empty-line bytes a server may skip before the request (RFC 9112 2.2) */

static int tls(const uint8_t *buf, size_t n, struct peek_result *r)
{
	struct tls_hello h;

	switch (tls_sni_parse(buf, n, &h)) {
	case TLS_SNI_NEED_MORE:
		return PEEK_NEED_MORE;
	case TLS_SNI_OK:
		break;
	case TLS_SNI_NOT_TLS:
		r->why = "not TLS";
		return PEEK_NONE;
	default:
		r->why = h.why ? h.why : "malformed TLS hello";
		return PEEK_BAD;
	}
	if (!h.has_sni) {
		r->why = "TLS without a server name";
		return PEEK_NONE;
	}
	if (h.sni_invalid || !h.sni[0]) {
		r->why = "TLS server name that is no host name";
		return PEEK_BAD;
	}
	memcpy(r->name[0], h.sni, sizeof h.sni < sizeof r->name[0] ? sizeof h.sni : sizeof r->name[0]);
	r->name[0][POLICY_NAME_MAX] = '\0';
	r->what[0] = "sni";
	r->n = 1;
	return PEEK_NAMES_FOUND;
}

static bool is_tchar(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Add the host of authority a[0, len) ("host", "host:port", "[v6]:port")
 * to r under what.  0, or -1 when it is no name and no IP literal
 * (r->why set).  IP literals and an empty authority name nothing. */
static int add_authority(struct peek_result *r, const uint8_t *a, size_t len, const char *what)
{
	char host[POLICY_NAME_MAX + 2], norm[POLICY_NAME_MAX + 1];
	size_t hl = len, i;

	if (len == 0)
		return 0;
	if (a[0] == '[') {
		const uint8_t *close = memchr(a, ']', len);

		if (!close) {
			r->why = "bracketed host without ']'";
			return -1;
		}
		hl = (size_t)(close - a) + 1;
		if (hl != len && a[hl] != ':') {
			r->why = "bytes after an IPv6 literal host";
			return -1;
		}
		for (i = hl + 1; i < len; i++)
			if (a[i] < '0' || a[i] > '9') {
				r->why = "port that is no number";
				return -1;
			}
		return 0; /* an IPv6 literal names nothing */
	}
	for (i = len; i-- > 0;) {
		if (a[i] == ':') {
			hl = i;
			break;
		}
		if (a[i] < '0' || a[i] > '9')
			break;
	}
	if (hl == 0 || hl > POLICY_NAME_MAX + 1) {
		r->why = "host that is no name";
		return -1;
	}
	for (i = 0; i < hl; i++) {
		uint8_t c = a[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
		      c == '_' || c == '.')) {
			r->why = "host with a character no name has";
			return -1;
		}
	}
	memcpy(host, a, hl);
	host[hl] = '\0';
	if (policy_name_normalize(host, norm) < 0) {
		r->why = "host that is no name";
		return -1;
	}
	if (policy_name_is_numeric(norm))
		return 0; /* an IPv4 literal (in any form libc reads) names nothing */
	for (i = 0; i < r->n; i++)
		if (strcmp(r->name[i], norm) == 0)
			return 0;
	if (r->n == PEEK_NAMES)
		return 0; /* cannot happen: one target and one Host */
	memcpy(r->name[r->n], norm, sizeof norm);
	r->what[r->n++] = what;
	return 0;
}

/* The authority of an absolute-form target ("http://user@host:port/...")
 * or of CONNECT's authority-form one, into r.  0 or -1 (r->why). */
static int target_authority(struct peek_result *r, const uint8_t *t, size_t len, bool connect)
{
	size_t i, at = 0, end;

	if (connect)
		return add_authority(r, t, len, "target");
	if (len >= 7 && strncasecmp((const char *)t, "http://", 7) == 0)
		i = 7;
	else if (len >= 8 && strncasecmp((const char *)t, "https://", 8) == 0)
		i = 8;
	else
		return 0; /* origin form ("/path") or "*": the Host header names it */
	for (end = i; end < len && t[end] != '/' && t[end] != '?' && t[end] != '#'; end++)
		if (t[end] == '@')
			at = end + 1;
	if (at)
		i = at;
	return add_authority(r, t + i, end - i, "target");
}

static int http(const uint8_t *buf, size_t n, struct peek_result *r)
{
	static const char ver[] = "HTTP/";
	size_t i = 0, m, t, v, p;
	bool host_seen = false;

	while (i < n && i < LEADING_EOL && (buf[i] == '\r' || buf[i] == '\n'))
		i++;
	if (i == n)
		return PEEK_NEED_MORE;
	/* The request line: METHOD SP TARGET SP HTTP/d.d CRLF. */
	for (m = i; m < n && m - i < METHOD_MAX && is_tchar(buf[m]); m++)
		;
	if (m == n)
		return PEEK_NEED_MORE;
	if (m == i || buf[m] != ' ') {
		r->why = "neither TLS nor HTTP/1.x";
		return PEEK_NONE;
	}
	for (t = m + 1; t < n && buf[t] > 0x20 && buf[t] < 0x7f; t++)
		if (t - i > PEEK_HTTP_HEAD_MAX)
			goto too_long;
	if (t == n)
		return PEEK_NEED_MORE;
	if (t == m + 1 || buf[t] != ' ') {
		r->why = "neither TLS nor HTTP/1.x";
		return PEEK_NONE;
	}
	for (v = 0; v < 8 && t + 1 + v < n; v++) {
		uint8_t c = buf[t + 1 + v];
		bool fits = v < 5 ? c == (uint8_t)ver[v] : v == 6 ? c == '.' : c >= '0' && c <= '9';

		if (!fits) {
			r->why = "neither TLS nor HTTP/1.x";
			return PEEK_NONE;
		}
	}
	if (v < 8)
		return PEEK_NEED_MORE;
	if (buf[t + 6] != '1') {
		/* "PRI * HTTP/2.0": HTTP/2 with prior knowledge carries its
		 * authority in compressed headers, which kbox does not read. */
		r->why = "HTTP/2 with prior knowledge";
		return PEEK_NONE;
	}
	p = t + 9;
	if (p < n && buf[p] == '\r')
		p++;
	if (p == n)
		return PEEK_NEED_MORE;
	if (buf[p] != '\n') {
		r->why = "request line with bytes after the version";
		return PEEK_BAD;
	}
	p++;
	if (target_authority(r, buf + m + 1, t - m - 1, m - i == 7 && memcmp(buf + i, "CONNECT", 7) == 0) < 0)
		return PEEK_BAD;
	/* Header lines up to the empty one. */
	for (;;) {
		const uint8_t *lf = memchr(buf + p, '\n', n - p), *line = buf + p, *colon;
		size_t len, k;

		if (!lf) {
			if (n - i > PEEK_HTTP_HEAD_MAX)
				goto too_long;
			return PEEK_NEED_MORE;
		}
		if ((size_t)(lf - buf) - i > PEEK_HTTP_HEAD_MAX)
			goto too_long;
		len = (size_t)(lf - line);
		if (len > 0 && line[len - 1] == '\r')
			len--;
		p = (size_t)(lf - buf) + 1;
		if (len == 0)
			break;
		if (line[0] == ' ' || line[0] == '\t') {
			r->why = "folded header line";
			return PEEK_BAD;
		}
		colon = memchr(line, ':', len);
		if (!colon || colon == line) {
			r->why = "header line without a name";
			return PEEK_BAD;
		}
		for (k = 0; line + k < colon; k++)
			if (!is_tchar(line[k])) {
				r->why = "header name with a character no token has";
				return PEEK_BAD;
			}
		for (k = 0; k < len; k++)
			if ((line[k] < 0x20 && line[k] != '\t') || line[k] == 0x7f) {
				r->why = "control character in a header line";
				return PEEK_BAD;
			}
		if (colon - line == 4 && strncasecmp((const char *)line, "host", 4) == 0) {
			const uint8_t *vs = colon + 1, *ve = line + len;

			if (host_seen) {
				r->why = "two Host headers";
				return PEEK_BAD;
			}
			host_seen = true;
			while (vs < ve && (*vs == ' ' || *vs == '\t'))
				vs++;
			while (ve > vs && (ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			if (add_authority(r, vs, (size_t)(ve - vs), "host") < 0)
				return PEEK_BAD;
		}
	}
	if (r->n == 0) {
		r->why = host_seen ? "Host is an address" : "HTTP request without a Host";
		return PEEK_NONE;
	}
	return PEEK_NAMES_FOUND;
too_long:
	r->why = "HTTP request head longer than kbox reads";
	return PEEK_BAD;
}

int peek_parse(const uint8_t *buf, size_t n, struct peek_result *r)
{
	int st;

	memset(r, 0, sizeof *r);
	if (n == 0)
		return PEEK_NEED_MORE;
	st = buf[0] == 0x16 ? tls(buf, n, r) : http(buf, n, r);
	if (st != PEEK_NAMES_FOUND)
		r->n = 0; /* names read before the verdict are no result */
	return st;
}
