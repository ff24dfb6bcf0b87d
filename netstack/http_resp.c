/* HTTP/1.1 response filter: framing and scrubbing (see http_resp.h).
 *
 * Phases follow the response: a head (and a trailer section, and a
 * chunk-size line) is collected whole, checked, scrubbed in place and
 * sent; body bytes go into a scan window, the part scrub_run has decided
 * is sent (as a chunk of kbox's own for a chunked body) and the rest, a
 * possible value cut by the end of the data, waits for what follows. */
#include "netstack/http_resp.h"
#include "lib/wbuf.h"
#include "netstack/scrub.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum http_resp_phase {
	P_HEAD,
	P_BODY_CL,
	P_CHUNK_LINE,
	P_CHUNK_DATA,
	P_CHUNK_CRLF,
	P_TRAILER,
	P_CLOSE,  /* body until the upstream closes */
	P_OPAQUE, /* after 101: a byte stream */
	P_DONE,
};

#define HTTP_RESP_LEAD_MAX 8u /* CRLFs tolerated between responses */

struct hr {
	struct scrub *sc;
	char sni[256];
	bool strict;
	http_resp_next_fn next;
	http_resp_event_fn cb;
	void *ctx;
	enum http_resp_state state;
	enum http_resp_phase phase;
	struct wbuf head, out, win, reply;
	size_t lead;
	uint64_t remaining;
	unsigned crlf_got;
	bool have_req;
	struct http_resp_req req;
	int status;
	unsigned hits;
	char hit_name[SECRETS_NAME_MAX + 1];
	char reason[1024];
};

/* ---- outcomes ---- */

static void event(struct hr *r, const char *ev, int status, const char *reason)
{
	if (!r->cb)
		return;
	struct http_resp_event e = {
		.event = ev,
		.secret = r->hit_name[0] ? r->hit_name : NULL,
		.count = r->hits,
		.status = status,
		.reason = reason,
	};
	r->cb(r->ctx, &e);
}

/* The response is refused before any of it went to the guest: a 502.
 * Returns 1 for the callers to pass up. */
__attribute__((format(printf, 2, 3))) static int refuse(struct hr *r, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf(r->reason, sizeof r->reason, "kbox: %s; the response from %s was refused and the connection closed",
		 msg, r->sni);
	char head[256];
	size_t blen = strlen(r->reason) + 1;
	int k = snprintf(head, sizeof head,
			 "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n"
			 "Content-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
			 blen);
	wbuf_reset(&r->reply);
	if (wbuf_put(&r->reply, head, (size_t)k) || wbuf_put(&r->reply, r->reason, blen - 1) || wbuf_put(&r->reply, "\n", 1))
		r->state = HTTP_RESP_ERROR;
	else
		r->state = HTTP_RESP_CLOSE_AFTER_REPLY;
	r->phase = P_DONE;
	wbuf_reset(&r->head);
	wbuf_reset(&r->win);
	event(r, "response-refused", 502, r->reason);
	return 1;
}

/* The response is broken after part of it went out: cut the connection. */
__attribute__((format(printf, 2, 3))) static int cut(struct hr *r, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf(r->reason, sizeof r->reason, "response from %s cut: %s", r->sni, msg);
	r->state = HTTP_RESP_FAILED;
	r->phase = P_DONE;
	wbuf_reset(&r->head);
	wbuf_reset(&r->win);
	event(r, "response-refused", r->status, r->reason);
	return 1;
}

static void on_hit(void *ctx, const struct secret *s)
{
	struct hr *r = ctx;
	if (!r->hit_name[0])
		snprintf(r->hit_name, sizeof r->hit_name, "%s", s->name);
	r->hits++;
}

/* One response (its head, or its last body byte) went out. */
static void response_done(struct hr *r)
{
	if (r->hits) {
		char why[96];
		snprintf(why, sizeof why, "%u secret value%s in the response replaced by placeholders", r->hits,
			 r->hits == 1 ? "" : "s");
		event(r, "secret-scrubbed", r->status, why);
	}
	r->hits = 0;
	r->hit_name[0] = '\0';
}

/* ---- scrubbing ---- */

/* Scrub B[0, N) whole, in place.  0 or -ENOMEM. */
static int scrub_all(struct hr *r, uint8_t *b, size_t n)
{
	return scrub_run(r->sc, b, n, true, on_hit, r) == (size_t)-1 ? -ENOMEM : 0;
}

/* Body bytes D[0, N) join the window; the decided part goes out (as a
 * chunk when CHUNK).  FINAL: nothing follows in this body.  0, -ENOMEM. */
static int payload(struct hr *r, const uint8_t *d, size_t n, bool final, bool chunk)
{
	if (wbuf_put(&r->win, d, n))
		return -ENOMEM;
	size_t have = wbuf_size(&r->win);
	if (!have)
		return 0;
	size_t k = scrub_run(r->sc, wbuf_data(&r->win), have, final, on_hit, r);
	if (k == (size_t)-1)
		return -ENOMEM;
	if (!k)
		return 0;
	if (chunk) {
		char sz[24];
		int m = snprintf(sz, sizeof sz, "%zx\r\n", k);
		if (wbuf_put(&r->out, sz, (size_t)m))
			return -ENOMEM;
	}
	if (wbuf_put(&r->out, wbuf_data(&r->win), k) || (chunk && wbuf_put(&r->out, "\r\n", 2)))
		return -ENOMEM;
	wbuf_drop(&r->win, k);
	return 0;
}

/* ---- heads ---- */

static bool tchar(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool eq_ci(const uint8_t *a, size_t n, const char *b)
{
	return strlen(b) == n && strncasecmp((const char *)a, b, n) == 0;
}

/* Whether a comma-separated list V[0, N) has an element other than the
 * ones in OK (NULL-terminated); the first such goes to BAD. */
static bool list_other(const uint8_t *v, size_t n, const char *const *ok, char *bad, size_t badlen)
{
	size_t i = 0;
	while (i < n) {
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		size_t s = i;
		while (i < n && v[i] != ',' && v[i] != ';')
			i++;
		size_t e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		while (i < n && v[i] != ',')
			i++; /* parameters */
		if (e == s)
			continue;
		bool good = false;
		for (const char *const *o = ok; *o && !good; o++)
			good = eq_ci(v + s, e - s, *o);
		if (!good) {
			/* Named in the 502 and the audit log only when it is a
			 * known coding: the text comes from the upstream and could
			 * carry a value. */
			static const char *const known[] = { "gzip", "x-gzip", "deflate", "br", "zstd", "compress",
							     "x-compress", "chunked", "identity", NULL };
			snprintf(bad, badlen, "an unknown coding");
			for (const char *const *k = known; *k; k++)
				if (eq_ci(v + s, e - s, *k))
					snprintf(bad, badlen, "%s", *k);
			return true;
		}
	}
	return false;
}

/* The last element of a comma-separated list is "chunked". */
static bool last_is_chunked(const uint8_t *v, size_t n)
{
	while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
		n--;
	size_t s = n;
	while (s && v[s - 1] != ',')
		s--;
	while (s < n && (v[s] == ' ' || v[s] == '\t'))
		s++;
	return eq_ci(v + s, n - s, "chunked");
}

/* A complete head H[0, N) (status line to the empty line). */
static int head_done(struct hr *r, uint8_t *h, size_t n)
{
	const uint8_t *eol = memmem(h, n, "\r\n", 2);
	size_t ll = (size_t)(eol - h);
	if (ll < 12 || memcmp(h, "HTTP/1.", 7) != 0 || (h[7] != '0' && h[7] != '1') || h[8] != ' ' ||
	    h[9] < '1' || h[9] > '5' || h[10] < '0' || h[10] > '9' || h[11] < '0' || h[11] > '9' ||
	    (ll > 12 && h[12] != ' '))
		return refuse(r, "the upstream's answer is not an HTTP/1.x response");
	r->status = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
	if (!r->have_req) {
		r->have_req = true;
		if (!r->next(r->ctx, &r->req))
			r->req = (struct http_resp_req){ .identity = r->strict };
	}

	int cls = 0, tes = 0;
	uint64_t cl = 0;
	bool chunked = false, wsext = false, ws = false;
	char bad[64] = "";
	const uint8_t *p = eol + 2, *end = h + n - 2;
	size_t nf = 0;
	while (p < end) {
		const uint8_t *e = memmem(p, (size_t)(end - p) + 2, "\r\n", 2);
		size_t len = (size_t)(e - p);
		if (++nf > HTTP_RESP_FIELDS_MAX)
			return refuse(r, "more than %u header fields", HTTP_RESP_FIELDS_MAX);
		if (p[0] == ' ' || p[0] == '\t')
			return refuse(r, "a header field folded over several lines (obs-fold)");
		size_t c = 0;
		while (c < len && tchar(p[c]))
			c++;
		if (c == 0 || c == len || p[c] != ':')
			return refuse(r, "a malformed header field line");
		size_t vs = c + 1, ve = len;
		while (vs < ve && (p[vs] == ' ' || p[vs] == '\t'))
			vs++;
		while (ve > vs && (p[ve - 1] == ' ' || p[ve - 1] == '\t'))
			ve--;
		const uint8_t *v = p + vs;
		size_t vl = ve - vs;
		if (eq_ci(p, c, "content-length")) {
			uint64_t x = 0;
			if (vl == 0 || vl > 15)
				return refuse(r, "an invalid Content-Length");
			for (size_t j = 0; j < vl; j++) {
				if (v[j] < '0' || v[j] > '9')
					return refuse(r, "an invalid Content-Length");
				x = x * 10 + (uint64_t)(v[j] - '0');
			}
			if (cls++ && x != cl)
				return refuse(r, "several different Content-Length values");
			cl = x;
		} else if (eq_ci(p, c, "transfer-encoding")) {
			tes++;
			chunked = last_is_chunked(v, vl);
			static const char *const te_ok[] = { "chunked", NULL };
			if (r->req.identity && list_other(v, vl, te_ok, bad, sizeof bad))
				return refuse(r, "the response is sent with the transfer coding '%s', which kbox cannot "
					      "inspect for secret values", bad);
		} else if (eq_ci(p, c, "content-encoding")) {
			static const char *const ce_ok[] = { "identity", NULL };
			if (r->req.identity && list_other(v, vl, ce_ok, bad, sizeof bad))
				return refuse(r, "the response is compressed (Content-Encoding: %s) although kbox asked "
					      "for identity; kbox cannot inspect it for secret values", bad);
		} else if (eq_ci(p, c, "sec-websocket-extensions")) {
			wsext = vl > 0;
		} else if (eq_ci(p, c, "upgrade")) {
			ws = eq_ci(v, vl, "websocket");
		}
		p = e + 2;
	}
	if (tes > 1 && !chunked)
		return refuse(r, "several Transfer-Encoding fields");
	if (tes && cls)
		return refuse(r, "both Transfer-Encoding and Content-Length (ambiguous length)");

	/* kbox dropped Range where it asked for identity: a part of a body
	 * could be a part of a value, too short to be recognised. */
	if (r->status == 206 && r->req.identity)
		return refuse(r, "a partial response (206) where kbox asked for the whole body; a part of a "
			      "secret value could not be recognised");

	enum http_resp_phase next = P_HEAD;
	bool final = r->status >= 200 || r->status == 101;
	if (r->status == 101) {
		if (!r->req.upgrade)
			return refuse(r, "101 Switching Protocols to a request that asked for no upgrade");
		if (wsext && r->req.identity)
			return refuse(r, "the WebSocket extension the upstream chose may compress messages, which kbox "
				      "cannot inspect for secret values");
		/* Another protocol may compress what kbox must read (h2c's
		 * HPACK codes header fields): only WebSocket where kbox asked
		 * for identity. */
		if (!ws && r->req.identity)
			return refuse(r, "a switch to a protocol other than WebSocket (h2c compresses header fields), "
				      "which kbox cannot inspect for secret values");
		next = P_OPAQUE;
		scrub_set_interactive(r->sc, true);
	} else if (!final || r->req.head || r->status == 204 || r->status == 304) {
		next = P_HEAD;
	} else if (tes) {
		if (!chunked)
			next = P_CLOSE;
		else
			next = P_CHUNK_LINE;
	} else if (cls) {
		next = cl ? P_BODY_CL : P_HEAD;
		r->remaining = cl;
	} else {
		next = P_CLOSE;
	}

	if (scrub_all(r, h, n) || wbuf_put(&r->out, h, n))
		return -ENOMEM;
	if (final)
		r->have_req = false;
	r->phase = next;
	if (next == P_HEAD)
		response_done(r);
	return 0;
}

/* The trailer section B[0, N) ends a chunked body. */
static int trailer_done(struct hr *r, uint8_t *b, size_t n)
{
	if (n > 2 && (b[0] == ' ' || b[0] == '\t' || memmem(b, n, "\r\n ", 3) || memmem(b, n, "\r\n\t", 3)))
		return cut(r, "a trailer field folded over several lines (obs-fold)");
	int rc = payload(r, NULL, 0, true, true);
	if (rc)
		return rc;
	if (scrub_all(r, b, n) || wbuf_put(&r->out, "0\r\n", 3) || wbuf_put(&r->out, b, n))
		return -ENOMEM;
	r->phase = P_HEAD;
	response_done(r);
	return 0;
}

static int chunk_line(struct hr *r, const uint8_t *b, size_t n)
{
	size_t i = 0;
	uint64_t size = 0;
	while (i < n - 2) {
		int d = b[i] >= '0' && b[i] <= '9' ? b[i] - '0'
			: (b[i] | 0x20) >= 'a' && (b[i] | 0x20) <= 'f' ? (b[i] | 0x20) - 'a' + 10 : -1;
		if (d < 0)
			break;
		if (i == 15)
			return cut(r, "a chunk size with more than 15 hex digits");
		size = size * 16 + (uint64_t)d;
		i++;
	}
	if (i == 0)
		return cut(r, "a malformed chunk size");
	while (i < n - 2 && (b[i] == ' ' || b[i] == '\t'))
		i++;
	if (i < n - 2 && b[i] != ';')
		return cut(r, "a malformed chunk size");
	if (size == 0) {
		r->phase = P_TRAILER;
	} else {
		r->remaining = size;
		r->phase = P_CHUNK_DATA;
	}
	return 0;
}

/* Collect a head, trailer section or chunk-size line into r->head.
 * *END gets its length once complete (0 before).  0, 1, -ENOMEM. */
static int collect(struct hr *r, const uint8_t *p, size_t n, size_t max, size_t *used, size_t *end)
{
	bool line = r->phase == P_CHUNK_LINE;
	size_t old = wbuf_size(&r->head);
	*end = 0;
	*used = 0;
	/* CRLFs between responses (some servers add one after a body). */
	while (r->phase == P_HEAD && old == 0 && *used < n) {
		uint8_t c = p[*used];
		if (c != '\r' && c != '\n')
			break;
		if (++r->lead > 2 * HTTP_RESP_LEAD_MAX)
			return refuse(r, "empty lines instead of a response");
		(*used)++;
	}
	p += *used;
	n -= *used;
	size_t room = max + 4 - old;
	size_t k = n < room ? n : room;
	if (wbuf_put(&r->head, p, k))
		return -ENOMEM;
	const uint8_t *b = wbuf_data(&r->head);
	size_t len = wbuf_size(&r->head), e = 0;
	if (!len)
		return 0; /* only the CRLFs between responses so far */
	if (line) {
		size_t from = old ? old - 1 : 0;
		const uint8_t *x = memmem(b + from, len - from, "\r\n", 2);
		if (x)
			e = (size_t)(x - b) + 2;
	} else if (r->phase == P_TRAILER && len >= 2 && b[0] == '\r' && b[1] == '\n') {
		e = 2;
	} else {
		size_t from = old > 3 ? old - 3 : 0;
		const uint8_t *x = memmem(b + from, len - from, "\r\n\r\n", 4);
		if (x)
			e = (size_t)(x - b) + 4;
	}
	for (size_t i = old; i < (e ? e : len); i++) {
		uint8_t c = b[i];
		bool bad = (c == '\n' && (i == 0 || b[i - 1] != '\r')) || (i > 0 && b[i - 1] == '\r' && c != '\n') ||
			   (c < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f;
		if (bad)
			return r->phase == P_HEAD ? refuse(r, "bare CR or LF, or control bytes, in the response head")
						  : cut(r, "bare CR or LF, or control bytes, in the chunked framing");
	}
	if (e) {
		wbuf_trim(&r->head, len - e);
		*used += k - (len - e);
		*end = e;
		return 0;
	}
	*used += k;
	if (len > max)
		return r->phase == P_HEAD ? refuse(r, "a response head larger than %zu bytes", max)
					  : cut(r, "%s larger than %zu bytes", line ? "a chunk-size line" : "a trailer section",
						max);
	return 0;
}

static int step(struct hr *r, const uint8_t *p, size_t n, size_t *used)
{
	size_t end = 0, k;
	int rc;
	*used = 0;
	switch (r->phase) {
	case P_HEAD:
	case P_TRAILER:
	case P_CHUNK_LINE:
		rc = collect(r, p, n, r->phase == P_CHUNK_LINE ? HTTP_RESP_CHUNK_LINE_MAX : HTTP_RESP_HEAD_MAX, used, &end);
		if (rc || !end)
			return rc;
		if (r->phase == P_HEAD) {
			r->lead = 0;
			rc = head_done(r, wbuf_data(&r->head), end);
		} else if (r->phase == P_TRAILER) {
			rc = trailer_done(r, wbuf_data(&r->head), end);
		} else {
			rc = chunk_line(r, wbuf_data(&r->head), end);
		}
		wbuf_reset(&r->head);
		return rc;
	case P_BODY_CL:
	case P_CHUNK_DATA:
		k = n < HTTP_RESP_STEP ? n : HTTP_RESP_STEP;
		if (k > r->remaining)
			k = (size_t)r->remaining;
		*used = k;
		r->remaining -= k;
		rc = payload(r, p, k, r->phase == P_BODY_CL && !r->remaining, r->phase == P_CHUNK_DATA);
		if (rc || r->remaining)
			return rc;
		if (r->phase == P_BODY_CL) {
			r->phase = P_HEAD;
			response_done(r);
		} else {
			r->phase = P_CHUNK_CRLF;
			r->crlf_got = 0;
		}
		return 0;
	case P_CHUNK_CRLF:
		*used = 1;
		if (p[0] != (r->crlf_got ? '\n' : '\r'))
			return cut(r, "a chunk not followed by CRLF");
		if (++r->crlf_got == 2)
			r->phase = P_CHUNK_LINE;
		return 0;
	case P_CLOSE:
	case P_OPAQUE:
		k = n < HTTP_RESP_STEP ? n : HTTP_RESP_STEP;
		*used = k;
		return payload(r, p, k, false, false);
	case P_DONE:
		*used = n;
		return 0;
	}
	return 0;
}

/* ---- public ---- */

int http_resp_new(const struct secrets *set, const char *sni, bool strict, http_resp_next_fn next, http_resp_event_fn cb, void *ctx,
	   struct hr **out)
{
	*out = NULL;
	if (!sni || !next)
		return -EINVAL;
	struct hr *r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	if (scrub_new(set, &r->sc) < 0) {
		free(r);
		return -ENOMEM;
	}
	snprintf(r->sni, sizeof r->sni, "%s", sni);
	r->strict = strict;
	r->next = next;
	r->cb = cb;
	r->ctx = ctx;
	r->state = HTTP_RESP_OPEN;
	r->phase = P_HEAD;
	*out = r;
	return 0;
}

int http_resp_feed(struct hr *r, const void *in, size_t n, size_t *taken)
{
	const uint8_t *p = in;
	size_t t = 0;
	int rc = 0;
	while (t < n && r->state == HTTP_RESP_OPEN && wbuf_size(&r->out) < HTTP_RESP_OUT_HIGH) {
		size_t used;
		rc = step(r, p + t, n - t, &used);
		t += used;
		if (rc < 0) {
			r->state = HTTP_RESP_ERROR;
			r->phase = P_DONE;
			snprintf(r->reason, sizeof r->reason, "out of memory in the response filter");
			break;
		}
	}
	*taken = t;
	return rc < 0 ? rc : 0;
}

int http_resp_finish(struct hr *r)
{
	if (r->state != HTTP_RESP_OPEN)
		return 0;
	if (r->phase == P_CLOSE || r->phase == P_OPAQUE) {
		if (payload(r, NULL, 0, true, false) < 0) {
			r->state = HTTP_RESP_ERROR;
			snprintf(r->reason, sizeof r->reason, "out of memory in the response filter");
		}
		response_done(r);
	}
	/* Anything else cut short: what is held back (a head, a possible value
	 * at the end of a body) is dropped, the guest sees the truncation. */
	wbuf_reset(&r->head);
	wbuf_reset(&r->win);
	r->phase = P_DONE;
	return 0;
}

void http_resp_output(struct hr *r, const uint8_t **p, size_t *len)
{
	*p = wbuf_data(&r->out);
	*len = wbuf_size(&r->out);
}

void http_resp_consume(struct hr *r, size_t n)
{
	wbuf_drop(&r->out, n);
}

void http_resp_reply(struct hr *r, const uint8_t **p, size_t *len)
{
	if (r->state != HTTP_RESP_CLOSE_AFTER_REPLY) {
		*p = NULL;
		*len = 0;
		return;
	}
	*p = wbuf_data(&r->reply);
	*len = wbuf_size(&r->reply);
}

enum http_resp_state http_resp_state(const struct hr *r)
{
	return r->state;
}

const char *http_resp_reason(const struct hr *r)
{
	return r->state == HTTP_RESP_OPEN ? NULL : r->reason;
}

void http_resp_free(struct hr *r)
{
	if (!r)
		return;
	scrub_free(r->sc);
	wbuf_free(&r->head);
	wbuf_free(&r->out);
	wbuf_free(&r->win);
	wbuf_free(&r->reply);
	free(r);
}
