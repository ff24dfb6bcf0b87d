/* HTTP/1.1 request filter with secret substitution (see http_sub.h).
 *
 * The stream goes through phases: a request head is collected whole (it is
 * bounded), checked and rewritten at once; a body is decoded (Content-Length
 * or chunked) into a small scan window; the window is rewritten as far as
 * it can be decided and the rest (a possible placeholder cut by the end of
 * the data seen so far) waits for more bytes.  So a placeholder split across
 * slices is found exactly like a whole one, and at most one encoded
 * placeholder's worth of bytes is ever held back. */
#include "netstack/http_sub.h"
#include "lib/b64.h"
#include "lib/wbuf.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HTTP_SUB_STEP (16u * 1024) /* body bytes handled per step */
#define HTTP_SUB_LEAD_MAX 64u      /* empty lines tolerated before a request line */
#define HTTP_SUB_MSG_MAX 2048u

enum http_sub_phase {
	PH_HEAD,
	PH_BODY_CL,
	PH_CHUNK_LINE,
	PH_CHUNK_DATA,
	PH_CHUNK_CRLF,
	PH_TRAILER,
	PH_OPAQUE,
	PH_DONE,
};

struct hs {
	const struct secrets *set;
	char sni[HTTP_SUB_SNI_MAX + 1];
	http_sub_audit_fn cb;
	void *ctx;
	enum http_sub_state state;
	enum http_sub_phase phase;

	struct wbuf head;  /* head, trailer section or chunk-size line being collected */
	size_t scan;         /* bytes of head already searched for the end */
	size_t line_start;   /* where the last line in head begins */
	size_t lead;         /* empty lines (CRLF pairs) before the request line */
	bool lead_done;

	struct wbuf out;   /* for upstream */
	struct wbuf reply; /* for the guest */
	struct wbuf win;   /* body bytes not yet decided */
	struct wbuf held;  /* rewritten body held until its length is known */
	struct wbuf held_head;
	struct wbuf tmp;

	uint64_t remaining;  /* Content-Length or chunk bytes left */
	unsigned crlf_got;   /* bytes of a chunk's trailing CRLF seen */
	bool chunked, buffering, upgrade;
	unsigned n_subst;
	uint64_t forwarded;
	struct http_sub_req queue[HTTP_SUB_PIPELINE_MAX]; /* forwarded, not popped: a ring */
	size_t q_head, q_len;

	/* base64 of "$KBOX_" at the three byte alignments, standard and URL
	 * alphabets: the characters fully determined by the prefix. */
	char b64pat[6][8];
	unsigned b64len[6];
	unsigned b64bit[6]; /* placeholder bit where the pattern's first char starts */
	bool b64first[256];
	bool start[256]; /* bytes that may begin a placeholder in some form */
};

/* ---- small helpers ----------------------------------------------------- */

static bool http_sub_tchar(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int http_sub_hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool http_sub_eq_ci(const uint8_t *a, size_t n, const char *b)
{
	return strlen(b) == n && strncasecmp((const char *)a, b, n) == 0;
}

/* ---- replies and audit ------------------------------------------------- */

static void http_sub_audit_emit(struct hs *h, const char *secret, const char *where,
			  const char *encoding, enum http_sub_decision d, int status, const char *reason)
{
	if (!h->cb)
		return;
	struct http_sub_audit ev = {
		.secret = secret,
		.host = h->sni,
		.where = where,
		.encoding = encoding,
		.decision = d,
		.status = status,
		.reason = reason,
	};
	h->cb(h->ctx, &ev);
}

static const char *http_sub_status_text(int status)
{
	switch (status) {
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 413:
		return "Content Too Large";
	case 405:
		return "Method Not Allowed";
	case 414:
		return "URI Too Long";
	case 421:
		return "Misdirected Request";
	case 431:
		return "Request Header Fields Too Large";
	default:
		return "Not Implemented";
	}
}

/* Stop the connection: nothing more goes upstream, the guest gets STATUS
 * with MSG as the body.  Returns 1 ("stopped") for the callers to pass up. */
static int http_sub_stop(struct hs *h, int status, const char *msg, const char *secret,
		   const char *where, const char *encoding)
{
	char head[256];
	size_t mlen = strlen(msg);
	int n = snprintf(head, sizeof head,
			 "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
			 "Content-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
			 status, http_sub_status_text(status), mlen + 1);
	wbuf_reset(&h->reply);
	if (wbuf_put(&h->reply, head, (size_t)n) || wbuf_put(&h->reply, msg, mlen) ||
	    wbuf_put(&h->reply, "\n", 1)) {
		h->state = HTTP_SUB_ERROR;
	} else {
		h->state = HTTP_SUB_CLOSE_AFTER_REPLY;
	}
	h->phase = PH_DONE;
	wbuf_reset(&h->win);
	wbuf_reset(&h->held);
	wbuf_reset(&h->held_head);
	wbuf_reset(&h->head);
	http_sub_audit_emit(h, secret, where, encoding, HTTP_SUB_BLOCKED, status, msg);
	return 1;
}

/* A request refused for its form rather than for a secret. */
__attribute__((format(printf, 3, 4))) static int http_sub_fail(struct hs *h, int status,
							  const char *fmt, ...)
{
	char msg[HTTP_SUB_MSG_MAX];
	int n = snprintf(msg, sizeof msg, "kbox: ");
	va_list ap;
	va_start(ap, fmt);
	n += vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t)n < sizeof msg)
		snprintf(msg + n, sizeof msg - (size_t)n,
			 "; this request to %s was refused and the connection closed", h->sni);
	return http_sub_stop(h, status, msg, NULL, "request", NULL);
}

/* ---- finding placeholders ---------------------------------------------- */

enum http_sub_form { F_PLAIN = 0, F_PCT = 1, F_JSON = 2, F_MIXED = 3, F_B64 = 4 };
enum { M_NO, M_YES, M_MORE };

struct http_sub_match {
	const struct secret *s;
	size_t start, end;
	unsigned form;
};

/* One character, decoded from %XX or \uXXXX if written so.  M_MORE when
 * the data ends inside what may be an escape and more may follow. */
static int http_sub_lchar(const uint8_t *s, size_t n, size_t i, bool final, int *c, size_t *adv,
		    unsigned *forms)
{
	*c = s[i];
	*adv = 1;
	if (s[i] == '%') {
		for (size_t k = 1; k <= 2; k++) {
			if (i + k >= n)
				return final ? M_YES : M_MORE;
			if (http_sub_hexval(s[i + k]) < 0)
				return M_YES;
		}
		*c = http_sub_hexval(s[i + 1]) * 16 + http_sub_hexval(s[i + 2]);
		*adv = 3;
		*forms |= F_PCT;
	} else if (s[i] == '\\') {
		int v = 0;
		for (size_t k = 1; k <= 5; k++) {
			if (i + k >= n)
				return final ? M_YES : M_MORE;
			if (k == 1) {
				if (s[i + 1] != 'u' && s[i + 1] != 'U')
					return M_YES;
				continue;
			}
			int d = http_sub_hexval(s[i + k]);
			if (d < 0)
				return M_YES;
			v = v * 16 + d;
		}
		if (v >= 0x80)
			return M_YES;
		*c = v;
		*adv = 6;
		*forms |= F_JSON;
	}
	return M_YES;
}

static bool http_sub_namechar(int c)
{
	return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* "$KBOX_NAME" at s[i], in plain, %-encoded or \u-escaped characters (mixed
 * freely).  NAME is the longest secret name that the run of name
 * characters starts with: "$KBOX_FOOBAR" is FOO's placeholder followed by
 * "BAR" when only FOO exists, as a shell would have built it. */
static int http_sub_find_text(const struct hs *h, const uint8_t *s, size_t n, size_t i, bool final,
			struct http_sub_match *m)
{
	if (s[i] != '$' && s[i] != '%' && s[i] != '\\')
		return M_NO;
	size_t p = i, adv;
	unsigned forms = 0;
	int c;
	for (size_t k = 0; k < SECRETS_PLACEHOLDER_PREFIX_LEN; k++) {
		if (p >= n)
			return final ? M_NO : M_MORE;
		if (http_sub_lchar(s, n, p, final, &c, &adv, &forms) == M_MORE)
			return M_MORE;
		if (c != SECRETS_PLACEHOLDER_PREFIX[k])
			return M_NO;
		p += adv;
	}
	char name[SECRETS_NAME_MAX];
	size_t ends[SECRETS_NAME_MAX];
	unsigned fat[SECRETS_NAME_MAX];
	size_t len = 0;
	while (len < SECRETS_NAME_MAX) {
		if (p >= n) {
			if (!final)
				return M_MORE;
			break;
		}
		unsigned f = forms;
		if (http_sub_lchar(s, n, p, final, &c, &adv, &f) == M_MORE)
			return M_MORE;
		if (!http_sub_namechar(c))
			break;
		forms = f;
		name[len] = (char)c;
		p += adv;
		ends[len] = p;
		fat[len++] = forms;
	}
	for (size_t l = len; l > 0; l--) {
		const struct secret *sec = secrets_find(h->set, name, l);
		if (sec) {
			m->s = sec;
			m->start = i;
			m->end = ends[l - 1];
			m->form = fat[l - 1];
			return M_YES;
		}
	}
	return M_NO;
}

/* A placeholder inside base64 text starting at s[i], in any of the three
 * byte alignments.  Found by the prefix's fixed characters, then decoded
 * far enough to read the name. */
static int http_sub_find_b64(const struct hs *h, const uint8_t *s, size_t n, size_t i, bool final,
		       struct http_sub_match *m)
{
	if (!h->b64first[s[i]])
		return M_NO;
	bool more = false;
	for (size_t t = 0; t < 6; t++) {
		size_t k = 0, plen = h->b64len[t];
		while (k < plen && i + k < n && s[i + k] == (uint8_t)h->b64pat[t][k])
			k++;
		if (k < plen) {
			if (i + k == n)
				more = true;
			continue;
		}
		bool url = t >= 3;
		uint8_t dec[SECRETS_PLACEHOLDER_PREFIX_LEN + SECRETS_NAME_MAX + 1];
		size_t dn = 0, q = i;
		unsigned o = h->b64bit[t];
		unsigned acc = o ? (unsigned)'$' >> (8 - o) : 0, nb = o;
		bool cut = false;
		while (dn < sizeof dec) {
			if (q >= n) {
				cut = !final;
				break;
			}
			int v = b64_val(s[q], url);
			if (v < 0)
				break;
			acc = ((acc << 6) | (unsigned)v) & 0x3fff;
			nb += 6;
			q++;
			if (nb >= 8) {
				dec[dn++] = (uint8_t)(acc >> (nb - 8));
				nb -= 8;
			}
		}
		struct http_sub_match dm;
		int r = http_sub_find_text(h, dec, dn, 0, !cut, &dm);
		if (r == M_MORE)
			return M_MORE;
		if (r == M_YES) {
			m->s = dm.s;
			m->start = i;
			m->end = q;
			m->form = F_B64;
			return M_YES;
		}
	}
	return more && !final ? M_MORE : M_NO;
}

static int http_sub_find(const struct hs *h, const uint8_t *s, size_t n, size_t i, bool final,
		   struct http_sub_match *m)
{
	int r = http_sub_find_text(h, s, n, i, final, m);
	if (r != M_NO)
		return r;
	return http_sub_find_b64(h, s, n, i, final, m);
}

static void http_sub_b64_patterns(struct hs *h)
{
	const char *pre = SECRETS_PLACEHOLDER_PREFIX;
	for (unsigned t = 0; t < 6; t++) {
		unsigned shift = t % 3;
		const char *alpha = t < 3 ? b64_std : b64_url;
		/* Bits of (shift filler bytes + prefix); characters k with
		 * 6k >= 8*shift and 6k+6 <= 8*(shift+6) depend on the prefix only. */
		unsigned first = (8 * shift + 5) / 6;
		unsigned last = (8 * (shift + SECRETS_PLACEHOLDER_PREFIX_LEN)) / 6;
		h->b64len[t] = last - first;
		h->b64bit[t] = 6 * first - 8 * shift;
		for (unsigned k = first; k < last; k++) {
			unsigned v = 0;
			for (unsigned b = 0; b < 6; b++) {
				unsigned bit = 6 * k + b;
				unsigned byte = bit / 8;
				unsigned x = byte < shift ? 0 : (unsigned char)pre[byte - shift];
				v = (v << 1) | ((x >> (7 - bit % 8)) & 1);
			}
			h->b64pat[t][k - first] = alpha[v];
		}
		h->b64first[(uint8_t)h->b64pat[t][0]] = true;
		h->start[(uint8_t)h->b64pat[t][0]] = true;
	}
	h->start['$'] = h->start['%'] = h->start['\\'] = true;
}

/* ---- deciding and substituting ------------------------------------------ */

enum http_sub_place_kind { PL_LINE, PL_QUERY, PL_HEADER, PL_HEADER_NAME, PL_TRAILER, PL_BODY, PL_STREAM };

struct http_sub_place {
	enum http_sub_place_kind kind;
	const char *field; /* lower-case field name for PL_HEADER / PL_TRAILER */
	bool basic;        /* inside decoded Basic credentials */
};

static bool http_sub_field_enabled(const struct secret *s, const char *field)
{
	if (!s->sub_headers)
		return false;
	if (s->n_fields == 0)
		return true;
	for (size_t i = 0; i < s->n_fields; i++)
		if (strcmp(s->fields[i], field) == 0)
			return true;
	return false;
}

static void http_sub_where(const struct http_sub_place *pl, char *buf, size_t len)
{
	switch (pl->kind) {
	case PL_LINE:
		snprintf(buf, len, "request line");
		break;
	case PL_QUERY:
		snprintf(buf, len, "query");
		break;
	case PL_HEADER:
		snprintf(buf, len, "header %s", pl->field);
		break;
	case PL_HEADER_NAME:
		snprintf(buf, len, "header field name");
		break;
	case PL_TRAILER:
		snprintf(buf, len, "trailer %s", pl->field);
		break;
	case PL_BODY:
		snprintf(buf, len, "body");
		break;
	case PL_STREAM:
		snprintf(buf, len, "upgraded stream");
		break;
	}
}

static void http_sub_where_words(const struct http_sub_place *pl, char *buf, size_t len)
{
	switch (pl->kind) {
	case PL_LINE:
		snprintf(buf, len, "the method or path");
		break;
	case PL_QUERY:
		snprintf(buf, len, "the query string");
		break;
	case PL_HEADER:
	case PL_TRAILER:
		snprintf(buf, len, "%s%s field '%s'", pl->basic ? "Basic credentials in the " : "the ",
			 pl->kind == PL_HEADER ? "header" : "trailer", pl->field);
		break;
	case PL_HEADER_NAME:
		snprintf(buf, len, "a header field name");
		break;
	case PL_BODY:
		snprintf(buf, len, "the body");
		break;
	case PL_STREAM:
		snprintf(buf, len, "the data after a protocol upgrade");
		break;
	}
}

static const char *http_sub_form_name(unsigned form, bool basic)
{
	if (form & F_B64)
		return "base64";
	if (basic)
		return "Basic credentials";
	switch (form) {
	case F_PCT:
		return "percent-encoded";
	case F_JSON:
		return "JSON-escaped";
	case F_MIXED:
		return "mixed escapes";
	default:
		return "plain";
	}
}

/* Where S may go, as "header fields: a, b; query string; body". */
static void http_sub_places_of(const struct secret *s, char *buf, size_t len)
{
	char fields[256] = "";
	if (s->n_fields)
		secrets_describe_fields(s, fields, sizeof fields);
	const char *intro = !s->sub_headers ? "" : s->n_fields ? "header fields: " : "any header field";
	int n = snprintf(buf, len, "%s%s", intro, s->sub_headers ? fields : "");
	if (n < 0 || (size_t)n >= len)
		return;
	if (s->sub_query)
		n += snprintf(buf + n, len - (size_t)n, "%squery string", n ? "; " : "");
	if ((size_t)n < len && s->sub_body)
		n += snprintf(buf + n, len - (size_t)n, "%sbody", n ? "; " : "");
	if (n == 0)
		snprintf(buf, len, "nowhere (all substitution is off)");
}

/* 0: substitute M here.  1: the request was blocked. */
static int http_sub_decide(struct hs *h, const struct http_sub_place *pl, const struct http_sub_match *m)
{
	const struct secret *s = m->s;
	bool allowed = secrets_hosts_match(s, h->sni);
	bool here = false;
	char where[128], words[160], msg[HTTP_SUB_MSG_MAX];

	switch (pl->kind) {
	case PL_HEADER:
	case PL_TRAILER:
		here = http_sub_field_enabled(s, pl->field);
		break;
	case PL_QUERY:
		here = s->sub_query;
		break;
	case PL_BODY:
		here = s->sub_body;
		break;
	default:
		break;
	}
	http_sub_where(pl, where, sizeof where);
	const char *enc = http_sub_form_name(m->form, pl->basic);
	if (allowed && here && m->form <= F_JSON) {
		if (++h->n_subst > HTTP_SUB_SUBST_MAX)
			return http_sub_fail(h, 400,
				       "more than %u secret placeholders in one request",
				       HTTP_SUB_SUBST_MAX);
		http_sub_audit_emit(h, s->name, where, enc, HTTP_SUB_SUBSTITUTED, 0, NULL);
		return 0;
	}
	http_sub_where_words(pl, words, sizeof words);
	if (!allowed) {
		char allow[512], places[384];
		secrets_describe_allow(s, allow, sizeof allow);
		http_sub_places_of(s, places, sizeof places);
		snprintf(msg, sizeof msg,
			 "kbox: the secret %s may only be sent to %s (%s); this request to %s was "
			 "blocked",
			 s->name, allow, places, h->sni);
	} else if (here) {
		snprintf(msg, sizeof msg,
			 "kbox: the secret %s was found %s in %s of this request to %s; kbox "
			 "substitutes it only when written plainly, percent-encoded or "
			 "JSON-escaped (or plainly inside Basic credentials), so the request was "
			 "blocked",
			 s->name, m->form & F_B64 ? "hidden in base64" : "written with mixed escapes",
			 words, h->sni);
	} else {
		char places[384];
		http_sub_places_of(s, places, sizeof places);
		snprintf(msg, sizeof msg,
			 "kbox: the secret %s may be sent to %s only in %s; it was found in %s "
			 "(%s), so this request was blocked",
			 s->name, h->sni, places, words, enc);
	}
	return http_sub_stop(h, 403, msg, s->name, where, enc);
}

static int http_sub_pct_value(struct wbuf *dst, const struct secret *s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (size_t i = 0; i < s->value_len; i++) {
		uint8_t c = (uint8_t)s->value[i];
		if (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
			if (wbuf_put(dst, &c, 1))
				return -ENOMEM;
		} else {
			uint8_t e[3] = { '%', (uint8_t)hex[c >> 4], (uint8_t)hex[c & 15] };
			if (wbuf_put(dst, e, 3))
				return -ENOMEM;
		}
	}
	return 0;
}

/* The value, in the same dress as the placeholder it replaces. */
static int http_sub_put_value(struct wbuf *dst, const struct http_sub_place *pl, const struct secret *s,
			unsigned form)
{
	if (pl->kind == PL_QUERY || form == F_PCT)
		return http_sub_pct_value(dst, s);
	if (form == F_JSON) {
		for (size_t i = 0; i < s->value_len; i++) {
			char c = s->value[i];
			if ((c == '"' || c == '\\') && wbuf_put(dst, "\\", 1))
				return -ENOMEM;
			if (wbuf_put(dst, &c, 1))
				return -ENOMEM;
		}
		return 0;
	}
	return wbuf_put(dst, s->value, s->value_len);
}

/* Rewrite S[0, N) found in place PL into DST.  Unless FINAL, stops before a
 * possible placeholder that the end of the data cuts; *DONE gets how many
 * bytes were dealt with.  0, 1 (blocked) or -ENOMEM. */
static int http_sub_rewrite(struct hs *h, const struct http_sub_place *pl, const uint8_t *s, size_t n,
		      bool final, struct wbuf *dst, size_t *done)
{
	size_t i = 0, emit = 0;
	int rc = 0;
	if (n == 0) {
		if (done)
			*done = 0;
		return 0;
	}
	while (i < n) {
		if (!h->start[s[i]]) {
			i++;
			continue;
		}
		struct http_sub_match m;
		int r = http_sub_find(h, s, n, i, final, &m);
		if (r == M_MORE)
			break;
		if (r == M_NO) {
			i++;
			continue;
		}
		rc = http_sub_decide(h, pl, &m);
		if (rc)
			return rc;
		if (wbuf_put(dst, s + emit, i - emit) || http_sub_put_value(dst, pl, m.s, m.form))
			return -ENOMEM;
		emit = i = m.end;
	}
	if (wbuf_put(dst, s + emit, i - emit))
		return -ENOMEM;
	if (done)
		*done = i;
	return 0;
}

/* ---- Basic credentials -------------------------------------------------- */

/* Strict base64 (standard alphabet, padding optional) into OUT. */
static bool http_sub_b64_decode(const uint8_t *s, size_t n, struct wbuf *out)
{
	while (n && s[n - 1] == '=')
		n--;
	if (n % 4 == 1)
		return false;
	unsigned acc = 0, nb = 0;
	for (size_t i = 0; i < n; i++) {
		int v = b64_val(s[i], false);
		if (v < 0)
			return false;
		acc = ((acc << 6) | (unsigned)v) & 0x3fff;
		nb += 6;
		if (nb >= 8) {
			uint8_t b = (uint8_t)(acc >> (nb - 8));
			nb -= 8;
			if (wbuf_put(out, &b, 1))
				return false;
		}
	}
	return true;
}

static int http_sub_b64_encode(const uint8_t *s, size_t n, struct wbuf *out)
{
	for (size_t i = 0; i < n; i += 3) {
		char e[4];
		b64_quantum(s + i, n - i < 3 ? n - i : 3, e);
		if (wbuf_put(out, e, 4))
			return -ENOMEM;
	}
	return 0;
}

/* "Basic TOKEN" in an authorization field: the placeholder is looked for
 * in the decoded credentials, and they are re-encoded after substitution.
 * 0 (handled, written to DST), 1 (blocked), 2 (not Basic credentials),
 * -ENOMEM. */
static int http_sub_basic(struct hs *h, const char *field, const uint8_t *v, size_t n,
		    struct wbuf *dst)
{
	if (strcmp(field, "authorization") != 0 && strcmp(field, "proxy-authorization") != 0)
		return 2;
	if (n < 7 || strncasecmp((const char *)v, "basic ", 6) != 0)
		return 2;
	size_t t = 6;
	while (t < n && v[t] == ' ')
		t++;
	struct wbuf dec = { 0 }, rew = { 0 };
	int rc = 2;
	if (t < n && http_sub_b64_decode(v + t, n - t, &dec)) {
		struct http_sub_place pl = { .kind = PL_HEADER, .field = field, .basic = true };
		unsigned before = h->n_subst;
		rc = http_sub_rewrite(h, &pl, wbuf_data(&dec), wbuf_size(&dec), true, &rew, NULL);
		if (rc == 0 && h->n_subst == before)
			rc = wbuf_put(dst, v, n);
		else if (rc == 0 && (wbuf_put(dst, v, t) || http_sub_b64_encode(wbuf_data(&rew), wbuf_size(&rew), dst)))
			rc = -ENOMEM;
	}
	wbuf_free(&dec);
	wbuf_free(&rew);
	return rc;
}

/* ---- heads and trailers ------------------------------------------------- */

struct http_sub_field {
	const uint8_t *name, *val;
	size_t nlen, vlen;
	char lname[SECRETS_FIELD_MAX + 1]; /* lower case, cut */
};

/* Split B (field lines, each ending in CRLF, then the final CRLF) into
 * fields.  0, or 1 when refused. */
static int http_sub_fields(struct hs *h, const uint8_t *b, size_t n, struct http_sub_field *f, size_t *nf,
		     const char *what)
{
	size_t i = 0;
	*nf = 0;
	while (i + 2 <= n && !(b[i] == '\r' && b[i + 1] == '\n')) {
		const uint8_t *line = b + i;
		const uint8_t *eol = memmem(line, n - i, "\r\n", 2);
		size_t len = (size_t)(eol - line);
		i += len + 2;
		if (len > HTTP_SUB_LINE_MAX)
			return http_sub_fail(h, 431, "a %s field line is longer than %u bytes",
				       what, HTTP_SUB_LINE_MAX);
		if (*nf == HTTP_SUB_FIELDS_MAX)
			return http_sub_fail(h, 431, "more than %u %s fields",
				       HTTP_SUB_FIELDS_MAX, what);
		if (line[0] == ' ' || line[0] == '\t')
			return http_sub_fail(h, 400,
				       "a %s field is folded over several lines (obs-fold)", what);
		size_t c = 0;
		while (c < len && http_sub_tchar(line[c]))
			c++;
		if (c == 0 || c == len || line[c] != ':')
			return http_sub_fail(h, 400,
				       "malformed %s field line (expected 'name: value')", what);
		struct http_sub_field *fl = &f[(*nf)++];
		fl->name = line;
		fl->nlen = c;
		/* A name too long to be any configured field gets a marker that
		 * is not a token, so it can never match one. */
		if (c > SECRETS_FIELD_MAX) {
			snprintf(fl->lname, sizeof fl->lname, "(long name)");
		} else {
			for (size_t k = 0; k < c; k++)
				fl->lname[k] = (char)tolower(line[k]);
			fl->lname[c] = '\0';
		}
		size_t vs = c + 1, ve = len;
		while (vs < ve && (line[vs] == ' ' || line[vs] == '\t'))
			vs++;
		while (ve > vs && (line[ve - 1] == ' ' || line[ve - 1] == '\t'))
			ve--;
		for (size_t j = vs; j < ve; j++)
			if ((line[j] < 0x20 && line[j] != '\t') || line[j] == 0x7f)
				return http_sub_fail(h, 400,
					       "a control character in the %s field '%s'", what,
					       fl->lname);
		fl->val = line + vs;
		fl->vlen = ve - vs;
	}
	return 0;
}

/* Rewrite one field into DST as "Name: value\r\n".  0, 1, -ENOMEM. */
static int http_sub_put_field(struct hs *h, const struct http_sub_field *f, enum http_sub_place_kind kind,
			struct wbuf *dst)
{
	struct http_sub_place npl = { .kind = PL_HEADER_NAME };
	int rc = http_sub_rewrite(h, &npl, f->name, f->nlen, true, dst, NULL);
	if (rc)
		return rc;
	if (wbuf_put(dst, ": ", 2))
		return -ENOMEM;
	rc = http_sub_basic(h, f->lname, f->val, f->vlen, dst);
	if (rc == 2) {
		struct http_sub_place pl = { .kind = kind, .field = f->lname };
		rc = http_sub_rewrite(h, &pl, f->val, f->vlen, true, dst, NULL);
	}
	if (rc)
		return rc;
	return wbuf_put(dst, "\r\n", 2) ? -ENOMEM : 0;
}

/* Host must name the connection's server (port allowed). */
static bool http_sub_host_ok(const struct hs *h, const uint8_t *v, size_t n)
{
	size_t hn = n;
	for (size_t i = 0; i < n; i++)
		if (v[i] == ':') {
			hn = i;
			break;
		}
	if (hn < n) {
		size_t pl = n - hn - 1;
		if (pl == 0 || pl > 5)
			return false;
		unsigned port = 0;
		for (size_t i = hn + 1; i < n; i++) {
			if (v[i] < '0' || v[i] > '9')
				return false;
			port = port * 10 + (unsigned)(v[i] - '0');
		}
		if (port == 0 || port > 65535)
			return false;
	}
	if (hn && v[hn - 1] == '.')
		hn--;
	return hn == strlen(h->sni) && hn && strncasecmp((const char *)v, h->sni, hn) == 0;
}

/* Some secret may be sent to this connection's server. */
static bool http_sub_secret_host(const struct hs *h)
{
	for (size_t i = 0; i < secrets_count(h->set); i++)
		if (secrets_hosts_match(secrets_at(h->set, i), h->sni))
			return true;
	return false;
}

static bool http_sub_body_enabled(const struct hs *h)
{
	for (size_t i = 0; i < secrets_count(h->set); i++) {
		const struct secret *s = secrets_at(h->set, i);
		if (s->sub_body && secrets_hosts_match(s, h->sni))
			return true;
	}
	return false;
}

static int http_sub_request_done(struct hs *h)
{
	h->forwarded++;
	h->n_subst = 0;
	h->chunked = h->buffering = false;
	h->phase = h->upgrade ? PH_OPAQUE : PH_HEAD;
	return 0;
}

/* A complete head B[0, N) (request line to the empty line).  0, 1, -ENOMEM. */
static int http_sub_head_done(struct hs *h, const uint8_t *b, size_t n)
{
	const uint8_t *eol = memmem(b, n, "\r\n", 2);
	size_t ll = (size_t)(eol - b);
	if (ll > HTTP_SUB_LINE_MAX)
		return http_sub_fail(h, 414, "the request line is longer than %u bytes",
			       HTTP_SUB_LINE_MAX);
	if (ll >= 3 && memcmp(b, "PRI", 3) == 0)
		return http_sub_fail(h, 400,
			       "HTTP/2 is not available through kbox's secret substitution; use "
			       "HTTP/1.1 (ALPN http/1.1)");
	/* method SP target SP version */
	size_t m = 0;
	while (m < ll && http_sub_tchar(b[m]))
		m++;
	size_t t0 = m + 1, t1 = t0;
	while (t1 < ll && b[t1] > 0x20 && b[t1] < 0x7f)
		t1++;
	if (m == 0 || m >= ll || b[m] != ' ' || t1 == t0 || t1 >= ll || b[t1] != ' ')
		return http_sub_fail(h, 400, "malformed request line (expected 'METHOD /path HTTP/1.1')");
	const uint8_t *ver = b + t1 + 1;
	size_t vl = ll - t1 - 1;
	bool v11 = http_sub_eq_ci(ver, vl, "HTTP/1.1") && memcmp(ver, "HTTP", 4) == 0;
	bool v10 = http_sub_eq_ci(ver, vl, "HTTP/1.0") && memcmp(ver, "HTTP", 4) == 0;
	if (!v11 && !v10)
		return http_sub_fail(h, 400, "only HTTP/1.1 and HTTP/1.0 requests pass kbox's secret substitution");
	if (http_sub_eq_ci(b, m, "CONNECT") && memcmp(b, "CONNECT", 7) == 0)
		return http_sub_fail(h, 400, "CONNECT is not available inside an intercepted connection");
	/* TRACE (and IIS's TRACK) answers with the request as the server got
	 * it: after substitution that is the real value. */
	if (http_sub_eq_ci(b, m, "TRACE") || http_sub_eq_ci(b, m, "TRACK"))
		return http_sub_stop(h, 405,
			       "kbox: TRACE is not available through kbox's TLS interception (the server would "
			       "echo the request as it received it); this request was refused",
			       NULL, "request line", NULL);
	if (b[t0] != '/' && !(t1 - t0 == 1 && b[t0] == '*' && m == 7 && memcmp(b, "OPTIONS", 7) == 0))
		return http_sub_fail(h, 400,
			       "the request target must be a path starting with '/' (absolute URLs are not accepted)");

	struct http_sub_field f[HTTP_SUB_FIELDS_MAX];
	size_t nf;
	int rc = http_sub_fields(h, eol + 2, n - ll - 2, f, &nf, "header");
	if (rc)
		return rc;
	int hosts = 0, cls = 0, tes = 0;
	bool host_ok = false, te_ok = true, expect = false;
	uint64_t cl = 0;
	h->upgrade = false;
	for (size_t i = 0; i < nf; i++) {
		const char *ln = f[i].lname;
		if (f[i].nlen > SECRETS_FIELD_MAX)
			continue;
		if (!strcmp(ln, "host")) {
			hosts++;
			host_ok = http_sub_host_ok(h, f[i].val, f[i].vlen);
		} else if (!strcmp(ln, "content-length")) {
			cls++;
			if (f[i].vlen == 0 || f[i].vlen > 15)
				return http_sub_fail(h, 400, "invalid Content-Length");
			cl = 0;
			for (size_t j = 0; j < f[i].vlen; j++) {
				if (f[i].val[j] < '0' || f[i].val[j] > '9')
					return http_sub_fail(h, 400, "invalid Content-Length");
				cl = cl * 10 + (uint64_t)(f[i].val[j] - '0');
			}
		} else if (!strcmp(ln, "transfer-encoding")) {
			tes++;
			te_ok = http_sub_eq_ci(f[i].val, f[i].vlen, "chunked");
		} else if (!strcmp(ln, "expect")) {
			expect = true;
		} else if (!strcmp(ln, "upgrade")) {
			h->upgrade = true;
		}
	}
	if (hosts != 1)
		return http_sub_fail(h, 400, "a request needs exactly one Host field (this one has %d)",
			       hosts);
	if (!host_ok)
		return http_sub_stop(h, 421,
			       "kbox: the Host field does not name the server this connection "
			       "was opened to (TLS server name); the request was refused",
			       NULL, "header host", NULL);
	if (cls > 1 || tes > 1 || (cls && tes))
		return http_sub_fail(h, 400,
			       "ambiguous body length (several Content-Length or "
			       "Transfer-Encoding fields, or both)");
	if (tes && (!te_ok || v10))
		return http_sub_fail(h, 400,
			       "only 'Transfer-Encoding: chunked' (HTTP/1.1) is accepted");

	h->chunked = tes == 1;
	h->buffering = false;
	if (cls && cl > 0 && http_sub_body_enabled(h)) {
		if (cl > HTTP_SUB_BODY_BUFFER_MAX)
			return http_sub_fail(h, 413,
				       "a request body in which secrets may be substituted is "
				       "limited to %u bytes (this one has %llu)",
				       HTTP_SUB_BODY_BUFFER_MAX, (unsigned long long)cl);
		h->buffering = true;
	}

	/* The rewritten head. */
	struct wbuf *dst = h->buffering ? &h->held_head : &h->out;
	struct wbuf *hd = &h->tmp;
	wbuf_reset(hd);
	const uint8_t *q = memchr(b + t0, '?', t1 - t0);
	size_t pathlen = q ? (size_t)(q - (b + t0)) : t1 - t0;
	struct http_sub_place line = { .kind = PL_LINE };
	rc = http_sub_rewrite(h, &line, b, t0 + pathlen, true, hd, NULL);
	if (!rc && q) {
		struct http_sub_place query = { .kind = PL_QUERY };
		rc = http_sub_rewrite(h, &query, q, (size_t)(b + t1 - q), true, hd, NULL);
	}
	if (rc)
		return rc;
	if (wbuf_put(hd, b + t1, ll - t1 + 2))
		return -ENOMEM;
	/* Where a secret may be substituted, the response must stay
	 * readable for http_resp's scrubbing: no content or transfer coding,
	 * no WebSocket extension (permessage-deflate), whole (no Range). */
	bool identity = http_sub_secret_host(h);
	for (size_t i = 0; i < nf; i++) {
		/* A held body gets its Content-Length when its size is known; and
		 * the client would wait for a 100 that its Expect cannot get
		 * before the body is complete, so it is dropped. */
		if (h->buffering && (!strcmp(f[i].lname, "content-length") ||
				     (expect && !strcmp(f[i].lname, "expect"))))
			continue;
		/* Range too: pieces of a stored value, each too short to be
		 * recognised, would add up to the value in the guest. */
		if (identity && (!strcmp(f[i].lname, "accept-encoding") || !strcmp(f[i].lname, "te") ||
				 !strcmp(f[i].lname, "sec-websocket-extensions") || !strcmp(f[i].lname, "range") ||
				 !strcmp(f[i].lname, "if-range")))
			continue;
		rc = http_sub_put_field(h, &f[i], PL_HEADER, hd);
		if (rc)
			return rc;
	}
	if (identity && wbuf_puts(hd, "Accept-Encoding: identity\r\n"))
		return -ENOMEM;
	if (!h->buffering && wbuf_put(hd, "\r\n", 2))
		return -ENOMEM;
	if (wbuf_put(dst, wbuf_data(hd), wbuf_size(hd)))
		return -ENOMEM;
	wbuf_reset(hd);
	/* Queued now: the response may come before the body went. */
	h->queue[(h->q_head + h->q_len) % HTTP_SUB_PIPELINE_MAX] = (struct http_sub_req){
		.head = m == 4 && memcmp(b, "HEAD", 4) == 0,
		.upgrade = h->upgrade,
		.identity = identity,
	};
	h->q_len++;

	wbuf_reset(&h->win);
	if (h->chunked) {
		h->phase = PH_CHUNK_LINE;
	} else if (cl > 0) {
		h->remaining = cl;
		h->phase = PH_BODY_CL;
	} else {
		return http_sub_request_done(h);
	}
	return 0;
}

/* The trailer section B[0, N) (fields, then the empty line) ends a chunked
 * body.  0, 1, -ENOMEM. */
static int http_sub_trailer_done(struct hs *h, const uint8_t *b, size_t n)
{
	struct http_sub_field f[HTTP_SUB_FIELDS_MAX];
	size_t nf;
	int rc = http_sub_fields(h, b, n, f, &nf, "trailer");
	if (rc)
		return rc;
	struct wbuf *hd = &h->tmp;
	wbuf_reset(hd);
	if (wbuf_puts(hd, "0\r\n"))
		return -ENOMEM;
	for (size_t i = 0; i < nf; i++) {
		rc = http_sub_put_field(h, &f[i], PL_TRAILER, hd);
		if (rc)
			return rc;
	}
	if (wbuf_put(hd, "\r\n", 2) || wbuf_put(&h->out, wbuf_data(hd), wbuf_size(hd)))
		return -ENOMEM;
	wbuf_reset(hd);
	return http_sub_request_done(h);
}

/* ---- bodies ------------------------------------------------------------ */

/* Body bytes D[0, N) join the window; whatever can be decided is rewritten
 * and sent on (or held).  FINAL at the body's end.  0, 1, -ENOMEM. */
static int http_sub_payload(struct hs *h, const uint8_t *d, size_t n, bool final)
{
	if (wbuf_put(&h->win, d, n))
		return -ENOMEM;
	struct http_sub_place pl = { .kind = h->phase == PH_OPAQUE ? PL_STREAM : PL_BODY };
	struct wbuf *dst = h->buffering ? &h->held : h->chunked ? &h->tmp : &h->out;
	size_t done = 0;
	if (h->chunked)
		wbuf_reset(&h->tmp);
	int rc = http_sub_rewrite(h, &pl, wbuf_data(&h->win), wbuf_size(&h->win), final, dst, &done);
	if (rc)
		return rc;
	wbuf_drop(&h->win, done);
	if (h->chunked && wbuf_size(&h->tmp)) {
		char sz[24];
		int k = snprintf(sz, sizeof sz, "%zx\r\n", wbuf_size(&h->tmp));
		if (wbuf_put(&h->out, sz, (size_t)k) ||
		    wbuf_put(&h->out, wbuf_data(&h->tmp), wbuf_size(&h->tmp)) ||
		    wbuf_put(&h->out, "\r\n", 2))
			return -ENOMEM;
		wbuf_reset(&h->tmp);
	}
	return 0;
}

static int http_sub_cl_done(struct hs *h)
{
	if (h->buffering) {
		char cl[48];
		int k = snprintf(cl, sizeof cl, "Content-Length: %zu\r\n\r\n", wbuf_size(&h->held));
		if (wbuf_put(&h->out, wbuf_data(&h->held_head), wbuf_size(&h->held_head)) ||
		    wbuf_put(&h->out, cl, (size_t)k) ||
		    wbuf_put(&h->out, wbuf_data(&h->held), wbuf_size(&h->held)))
			return -ENOMEM;
		wbuf_reset(&h->held_head);
		wbuf_reset(&h->held);
	}
	return http_sub_request_done(h);
}

/* ---- collecting heads, trailers and chunk lines -------------------------- */

/* Append up to N bytes to h->head until the block ends: a CRLF for a chunk
 * line, an empty line for a head or trailer section.  Sets *USED and
 * *END (length of the block in h->head, 0 while incomplete).  0 or 1. */
static int http_sub_collect(struct hs *h, const uint8_t *p, size_t n, size_t max, size_t *used,
		      size_t *end)
{
	size_t old = wbuf_size(&h->head);
	/* Room for the block and its terminator; what lies beyond is given
	 * back below.  The checks after each append keep old <= max + lead. */
	size_t room = max + 4 + (h->phase == PH_HEAD ? h->lead : 0) - old;
	size_t k = n < room ? n : room;
	*end = 0;
	if (wbuf_put(&h->head, p, k))
		return -ENOMEM;
	const uint8_t *b = wbuf_data(&h->head);
	size_t len = wbuf_size(&h->head);
	bool head = h->phase == PH_HEAD;
	bool chunkline = h->phase == PH_CHUNK_LINE;

	if (head && !h->lead_done) {
		while (h->lead + 1 < len && b[h->lead] == '\r' && b[h->lead + 1] == '\n')
			h->lead += 2;
		if (h->lead > HTTP_SUB_LEAD_MAX)
			return http_sub_fail(h, 400, "too many empty lines before a request");
		if (h->lead < len && !(b[h->lead] == '\r' && h->lead + 1 == len))
			h->lead_done = true;
	}
	size_t e = 0;
	if (chunkline) {
		size_t from = h->scan ? h->scan - 1 : 0;
		const uint8_t *x = memmem(b + from, len - from, "\r\n", 2);
		if (x)
			e = (size_t)(x - b) + 2;
	} else if (!head && len >= 2 && b[0] == '\r' && b[1] == '\n') {
		e = 2; /* no trailer fields */
	} else {
		size_t from = h->scan > 3 ? h->scan - 3 : 0;
		if (head && from < h->lead)
			from = h->lead;
		if (head && !h->lead_done)
			from = len;
		const uint8_t *x = from < len ? memmem(b + from, len - from, "\r\n\r\n", 4) : NULL;
		if (x)
			e = (size_t)(x - b) + 4;
	}
	/* Only the block itself: what follows it is body or the next request. */
	for (size_t i = old; i < (e ? e : len); i++) {
		uint8_t c = b[i];
		if (c == '\n')
			h->line_start = i + 1;
		if (c == '\n' && (i == 0 || b[i - 1] != '\r'))
			return http_sub_fail(h, 400, "a line ends in a bare LF (expected CRLF)");
		if (i > 0 && b[i - 1] == '\r' && c != '\n')
			return http_sub_fail(h, 400, "a bare CR in the request");
		if ((c < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f)
			return http_sub_fail(h, 400,
				       "not an HTTP/1.1 request (control bytes in the %s)",
				       head ? "head" : "framing");
	}
	if (e) {
		size_t excess = len - e;
		wbuf_trim(&h->head, excess);
		*used = k - excess;
		*end = e;
		h->scan = 0;
		h->line_start = 0;
		return 0;
	}
	*used = k;
	h->scan = len;
	if (chunkline) {
		if (len > max)
			return http_sub_fail(h, 400, "a chunk-size line is longer than %u bytes",
				       HTTP_SUB_CHUNK_LINE_MAX);
		return 0;
	}
	if (len - (head ? h->lead : 0) > max)
		return http_sub_fail(h, 431, "the %s is larger than %zu bytes",
			       head ? "request head" : "trailer section", max);
	size_t from = h->line_start > h->lead || !head ? h->line_start : h->lead;
	if (len - from > HTTP_SUB_LINE_MAX) {
		bool first = head && h->line_start <= h->lead;
		return http_sub_fail(h, first ? 414 : 431,
			       "a %s is longer than %u bytes",
			       first ? "request line" : "field line", HTTP_SUB_LINE_MAX);
	}
	return 0;
}

static int http_sub_chunk_line(struct hs *h, const uint8_t *b, size_t n)
{
	size_t i = 0;
	uint64_t size = 0;
	while (i < n && http_sub_hexval(b[i]) >= 0) {
		if (i == 16)
			return http_sub_fail(h, 400, "a chunk size has more than 16 hex digits");
		size = size * 16 + (uint64_t)http_sub_hexval(b[i]);
		i++;
	}
	if (i == 0)
		return http_sub_fail(h, 400, "malformed chunk size");
	size_t j = i;
	while (j < n - 2 && (b[j] == ' ' || b[j] == '\t'))
		j++;
	if (j < n - 2 && b[j] != ';')
		return http_sub_fail(h, 400, "malformed chunk size");
	/* Extensions are dropped: the body is re-chunked anyway. */
	if (size == 0) {
		h->phase = PH_TRAILER;
	} else {
		h->remaining = size;
		h->phase = PH_CHUNK_DATA;
	}
	return 0;
}

/* ---- public ------------------------------------------------------------ */

int http_sub_new(const struct secrets *set, const char *sni, http_sub_audit_fn cb, void *ctx,
	   struct hs **out)
{
	size_t n = strlen(sni);
	*out = NULL;
	if (n && sni[n - 1] == '.')
		n--;
	if (n == 0 || n > HTTP_SUB_SNI_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = sni[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return -EINVAL;
	}
	struct hs *h = calloc(1, sizeof *h);
	if (!h)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		h->sni[i] = (char)tolower((unsigned char)sni[i]);
	h->set = set;
	h->cb = cb;
	h->ctx = ctx;
	h->state = HTTP_SUB_OPEN;
	h->phase = PH_HEAD;
	http_sub_b64_patterns(h);
	*out = h;
	return 0;
}

static int http_sub_step(struct hs *h, const uint8_t *p, size_t n, size_t *used)
{
	size_t end = 0, k;
	int rc;
	*used = 0;
	switch (h->phase) {
	case PH_HEAD:
		rc = http_sub_collect(h, p, n, HTTP_SUB_HEAD_MAX, used, &end);
		if (rc || !end)
			return rc;
		rc = http_sub_head_done(h, wbuf_data(&h->head) + h->lead, end - h->lead);
		wbuf_reset(&h->head);
		h->lead = 0;
		h->lead_done = false;
		return rc;
	case PH_TRAILER:
		rc = http_sub_collect(h, p, n, HTTP_SUB_HEAD_MAX, used, &end);
		if (rc || !end)
			return rc;
		rc = http_sub_payload(h, NULL, 0, true);
		if (!rc)
			rc = http_sub_trailer_done(h, wbuf_data(&h->head), end);
		wbuf_reset(&h->head);
		return rc;
	case PH_CHUNK_LINE:
		rc = http_sub_collect(h, p, n, HTTP_SUB_CHUNK_LINE_MAX, used, &end);
		if (rc || !end)
			return rc;
		rc = http_sub_chunk_line(h, wbuf_data(&h->head), end);
		wbuf_reset(&h->head);
		return rc;
	case PH_BODY_CL:
	case PH_CHUNK_DATA:
		k = n < HTTP_SUB_STEP ? n : HTTP_SUB_STEP;
		if (k > h->remaining)
			k = (size_t)h->remaining;
		*used = k;
		h->remaining -= k;
		rc = http_sub_payload(h, p, k, h->phase == PH_BODY_CL && h->remaining == 0);
		if (rc || h->remaining)
			return rc;
		if (h->phase == PH_BODY_CL)
			return http_sub_cl_done(h);
		h->phase = PH_CHUNK_CRLF;
		h->crlf_got = 0;
		return 0;
	case PH_CHUNK_CRLF:
		*used = 1;
		if (p[0] != (h->crlf_got ? '\n' : '\r'))
			return http_sub_fail(h, 400, "a chunk is not followed by CRLF (wrong chunk size?)");
		if (++h->crlf_got == 2)
			h->phase = PH_CHUNK_LINE;
		return 0;
	case PH_OPAQUE:
		/* Nothing is substituted after an upgrade, so nothing needs to be
		 * held back either: an interactive protocol must not stall. */
		k = n < HTTP_SUB_STEP ? n : HTTP_SUB_STEP;
		*used = k;
		return http_sub_payload(h, p, k, true);
	case PH_DONE:
		break;
	}
	return 0;
}

int http_sub_feed(struct hs *h, const void *in, size_t n, size_t *taken)
{
	const uint8_t *p = in;
	size_t t = 0;
	int rc = 0;
	while (t < n && h->state == HTTP_SUB_OPEN && h->phase != PH_DONE &&
	       wbuf_size(&h->out) < HTTP_SUB_OUT_HIGH &&
	       !(h->phase == PH_HEAD && h->q_len == HTTP_SUB_PIPELINE_MAX)) {
		size_t used;
		rc = http_sub_step(h, p + t, n - t, &used);
		t += used;
		if (rc < 0) {
			h->state = HTTP_SUB_ERROR;
			h->phase = PH_DONE;
			break;
		}
	}
	*taken = t;
	return rc < 0 ? rc : 0;
}

int http_sub_finish(struct hs *h)
{
	wbuf_reset(&h->win);
	wbuf_reset(&h->held);
	wbuf_reset(&h->held_head);
	wbuf_reset(&h->head);
	if (h->state == HTTP_SUB_OPEN)
		h->phase = PH_DONE;
	return 0;
}

void http_sub_output(struct hs *h, const uint8_t **p, size_t *len)
{
	*p = wbuf_data(&h->out);
	*len = wbuf_size(&h->out);
}

void http_sub_consume(struct hs *h, size_t n)
{
	size_t have = wbuf_size(&h->out);
	wbuf_drop(&h->out, n < have ? n : have);
}

void http_sub_reply(struct hs *h, const uint8_t **p, size_t *len)
{
	if (h->state != HTTP_SUB_CLOSE_AFTER_REPLY) {
		*p = NULL;
		*len = 0;
		return;
	}
	*p = wbuf_data(&h->reply);
	*len = wbuf_size(&h->reply);
}

enum http_sub_state http_sub_state(const struct hs *h)
{
	return h->state;
}

uint64_t http_sub_requests_forwarded(const struct hs *h)
{
	return h->forwarded;
}

bool http_sub_pop_request(struct hs *h, struct http_sub_req *out)
{
	if (!h->q_len)
		return false;
	*out = h->queue[h->q_head];
	h->q_head = (h->q_head + 1) % HTTP_SUB_PIPELINE_MAX;
	h->q_len--;
	return true;
}

void http_sub_free(struct hs *h)
{
	if (!h)
		return;
	wbuf_free(&h->head);
	wbuf_free(&h->out);
	wbuf_free(&h->reply);
	wbuf_free(&h->win);
	wbuf_free(&h->held);
	wbuf_free(&h->held_head);
	wbuf_free(&h->tmp);
	free(h);
}
