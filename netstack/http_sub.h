/* The HTTP/1.1 request filter that puts real secret values into the
 * guest's intercepted requests.  One instance per TLS connection sees the
 * decrypted guest -> upstream byte stream in slices of any size, parses it
 * (request line, header fields, Content-Length and chunked bodies,
 * trailers, keep-alive and pipelining) and produces the bytes to send
 * upstream.  Responses are http_resp's (values in them become
 * placeholders again); this filter tells it, through http_sub_pop_request, what
 * each forwarded request was.  TRACE is answered 405 by kbox, and where a
 * secret may be substituted (a secret allows the SNI) every request's
 * Accept-Encoding becomes "identity" (TE, Sec-WebSocket-Extensions, Range
 * and If-Range are dropped) so that the response can be read whole.
 *
 * For every placeholder "$KBOX_<NAME>" of a known secret it finds, in plain
 * form or hidden by percent-encoding (%24KBOX_...), JSON escapes
 * (\u0024KBOX_...), base64 (Basic credentials and base64 text anywhere) or
 * split across slices, it either substitutes the real value (the
 * connection's SNI name is in the secret's allow list and the place is
 * enabled: the named header fields, the query, the body) or blocks the
 * request: nothing more goes upstream, the guest gets a "403 Forbidden"
 * whose body says why, and the connection is to be closed.  Anything that
 * cannot be parsed with certainty (smuggling-prone framing, obs-fold, bare
 * CR or LF, HTTP/2 prior knowledge, oversized parts) is answered 4xx and
 * closed: the filter fails closed.
 *
 * Memory per connection is bounded by the limits below. */
#ifndef KBOX_NETSTACK_HTTP_SUB_H
#define KBOX_NETSTACK_HTTP_SUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netstack/secrets.h"

#define HTTP_SUB_LINE_MAX (16u * 1024)      /* request line or one field line; 414/431 */
#define HTTP_SUB_HEAD_MAX (64u * 1024)      /* request head (or trailer section); 431 */
#define HTTP_SUB_FIELDS_MAX 100u            /* fields in a head or trailer section; 431 */
#define HTTP_SUB_CHUNK_LINE_MAX 4096u       /* chunk-size line with extensions; 400 */
#define HTTP_SUB_BODY_BUFFER_MAX (8u << 20) /* Content-Length body held for substitution; 413 */
#define HTTP_SUB_SUBST_MAX 64u              /* substitutions in one request; 400 */
#define HTTP_SUB_OUT_HIGH (256u * 1024)     /* pending output before http_sub_feed stops taking */
#define HTTP_SUB_SNI_MAX 253u               /* longest server name */
#define HTTP_SUB_REPLY_MAX 4096u            /* the answer to the guest */
#define HTTP_SUB_PIPELINE_MAX 256u          /* requests forwarded whose http_sub_pop_request is pending */

enum http_sub_state {
	HTTP_SUB_OPEN,              /* keep feeding */
	HTTP_SUB_CLOSE_AFTER_REPLY, /* send http_sub_output upstream, then http_sub_reply to the guest; close */
	HTTP_SUB_ERROR,             /* out of memory: close both sides without a reply */
};

enum http_sub_decision { HTTP_SUB_SUBSTITUTED, HTTP_SUB_BLOCKED };

/* What the audit callback is told.  Never a real value. */
struct http_sub_audit {
	const char *secret;   /* secret name, or NULL for a request refused for
			       * another reason (Host != SNI, malformed...) */
	const char *host;     /* the connection's SNI name */
	const char *where;    /* "header authorization", "query", "body",
			       * "request line", "trailer x-y", ... */
	const char *encoding; /* "plain", "percent-encoded", "JSON-escaped",
			       * "base64", "Basic credentials", or NULL */
	enum http_sub_decision decision;
	int status;           /* HTTP status answered when blocked, else 0 */
	const char *reason;   /* the message given to the guest when blocked */
};

typedef void (*http_sub_audit_fn)(void *ctx, const struct http_sub_audit *ev);

struct hs;

/* A filter for one connection to SNI (a DNS name, at most HTTP_SUB_SNI_MAX
 * bytes; a trailing dot is dropped).  SET may be NULL (no secrets: every
 * request is only parsed and checked) and must outlive the filter; it may
 * be changed by secrets_reload between http_sub_feed calls.  CB (may be NULL)
 * gets one event per substitution or block.  0, -EINVAL (SNI not a DNS
 * name) or -ENOMEM. */
int http_sub_new(const struct secrets *set, const char *sni, http_sub_audit_fn cb, void *ctx,
	   struct hs **out);

/* Feed N request bytes.  *TAKEN gets how many were consumed: fewer than N
 * when pending output reached HTTP_SUB_OUT_HIGH (drain it with http_sub_output /
 * http_sub_consume and feed the rest again) or when the state is no longer
 * HTTP_SUB_OPEN (the rest must be dropped).  0, or -ENOMEM (state HTTP_SUB_ERROR). */
int http_sub_feed(struct hs *h, const void *in, size_t n, size_t *taken);

/* The end of the guest's request stream (its TLS close_notify or FIN).  A
 * request cut off in the middle is not completed; whatever of it is held
 * back is dropped.  0. */
int http_sub_finish(struct hs *h);

/* Bytes ready for upstream: *P and *LEN (0 when none).  Valid until the
 * next call on H. */
void http_sub_output(struct hs *h, const uint8_t **p, size_t *len);

/* Mark N bytes of http_sub_output as sent (N <= *LEN). */
void http_sub_consume(struct hs *h, size_t n);

/* The answer for the guest once the state is HTTP_SUB_CLOSE_AFTER_REPLY (a
 * complete HTTP/1.1 response with "Connection: close"), else *LEN = 0.
 * Requests before the refused one were forwarded whole: the caller should
 * stop writing upstream, relay upstream's responses to those
 * (http_sub_requests_forwarded of them) until upstream closes or a timeout, then
 * send this and close. */
void http_sub_reply(struct hs *h, const uint8_t **p, size_t *len);

/* The connection's state. */
enum http_sub_state http_sub_state(const struct hs *h);

/* Requests forwarded upstream in full so far. */
uint64_t http_sub_requests_forwarded(const struct hs *h);

/* What a forwarded request means for its response (http_resp). */
struct http_sub_req {
	bool head;     /* HEAD: the response has no body */
	bool upgrade;  /* it asked for a protocol switch (Upgrade) */
	bool identity; /* kbox replaced its Accept-Encoding by "identity" (a
			* secret may be substituted on this connection), so a
			* compressed response to it is to be refused */
};

/* The oldest forwarded request not popped yet, into *OUT; false when
 * there is none.  A request is queued when its head goes upstream; http_sub_feed
 * takes no new request while HTTP_SUB_PIPELINE_MAX are queued, so the response
 * side's pace bounds pipelining. */
bool http_sub_pop_request(struct hs *h, struct http_sub_req *out);

/* Free H (NULL is fine); buffered bytes are wiped first, since they may
 * hold substituted values. */
void http_sub_free(struct hs *h);

#endif
