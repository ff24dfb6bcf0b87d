/* The HTTP/1.1 response filter of an intercepted connection: the
 * upstream -> guest half of what http_sub is for requests.  One instance
 * per TLS connection sees the decrypted response stream in slices of any
 * size, parses it (status line, header fields, interim 1xx responses,
 * Content-Length, chunked and close-delimited bodies, trailers, responses
 * without a body, a 101 switch) and produces the bytes for the guest with
 * every real secret value replaced by its placeholder (netstack/scrub.h):
 * in the head, in the body across record and chunk boundaries, in the
 * trailers and in the stream after a protocol switch.
 *
 * Framing stays right because the replacement keeps the length: a
 * Content-Length body is passed with its head as it was, a chunked body
 * is decoded, scrubbed as one stream and re-chunked by kbox (chunk
 * extensions are dropped).
 *
 * A response kbox cannot inspect is refused: the guest gets "502 Bad
 * Gateway" with the reason and the connection is closed.  That is a
 * compressed one (Content-Encoding other than identity, a transfer coding
 * other than chunked, a WebSocket extension) or a partial one (206) to a
 * request on which kbox asked for identity (the request side does so where a secret may be
 * substituted), and anything that is not HTTP/1.x or cannot be framed with
 * certainty (several Content-Length values, obs-fold, bare CR or LF, a 101
 * nobody asked for, oversized parts).  Once bytes of a response went to
 * the guest, a later failure can only cut the connection.
 *
 * Memory per connection: the head being collected (HTTP_RESP_HEAD_MAX), the scan
 * window (scrub_holdback + HTTP_RESP_STEP) and the pending output (HTTP_RESP_OUT_HIGH). */
#ifndef KBOX_NETSTACK_HTTP_RESP_H
#define KBOX_NETSTACK_HTTP_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netstack/secrets.h"

#define HTTP_RESP_HEAD_MAX (64u * 1024)   /* a response head or trailer section */
#define HTTP_RESP_FIELDS_MAX 200u         /* fields in one */
#define HTTP_RESP_CHUNK_LINE_MAX 4096u    /* a chunk-size line with extensions */
#define HTTP_RESP_STEP (16u * 1024)       /* body bytes scanned per step */
#define HTTP_RESP_OUT_HIGH (256u * 1024)  /* pending output before http_resp_feed stops taking */
#define HTTP_RESP_REPLY_MAX 2048u

/* What the response being parsed answers (from http_sub, in order). */
struct http_resp_req {
	bool head;     /* a HEAD request: the response has no body */
	bool upgrade;  /* the request asked for a protocol switch */
	bool identity; /* kbox asked for an uncompressed response */
};

/* The next request's description, in the order the requests went
 * upstream; false when none is known (the upstream answers something the
 * guest did not send yet, e.g. a 408 before closing). */
typedef bool (*http_resp_next_fn)(void *ctx, struct http_resp_req *out);

/* One outcome for the audit log; never a value. */
struct http_resp_event {
	const char *event;  /* "secret-scrubbed" or "response-refused" */
	const char *secret; /* the first secret found, or NULL */
	unsigned count;     /* replacements in this response */
	int status;         /* 502 when refused, else the response's status */
	const char *reason; /* one line */
};

typedef void (*http_resp_event_fn)(void *ctx, const struct http_resp_event *ev);

enum http_resp_state {
	HTTP_RESP_OPEN,              /* keep feeding */
	HTTP_RESP_CLOSE_AFTER_REPLY, /* send http_resp_output, then http_resp_reply to the guest; close */
	HTTP_RESP_FAILED,            /* send http_resp_output, then cut the connection (http_resp_reason) */
	HTTP_RESP_ERROR,             /* out of memory: close without sending more */
};

struct hr;

/* A filter for a connection to SNI (for messages).  SET may be NULL and
 * must outlive the filter; STRICT says whether a response nobody asked
 * for must be uncompressed (as if kbox asked for identity).  NEXT is
 * required; CB may be NULL.  0, -EINVAL or -ENOMEM. */
int http_resp_new(const struct secrets *set, const char *sni, bool strict, http_resp_next_fn next, http_resp_event_fn cb,
	   void *ctx, struct hr **out);

/* Feed N response bytes; *TAKEN gets how many were consumed (fewer when
 * the pending output reached HTTP_RESP_OUT_HIGH, or the state left HTTP_RESP_OPEN).
 * 0, or -ENOMEM (HTTP_RESP_ERROR). */
int http_resp_feed(struct hr *r, const void *in, size_t n, size_t *taken);

/* The upstream's stream ended: a close-delimited body is complete, the
 * held-back bytes are scrubbed and let out; a response cut inside its head
 * or framing is dropped.  0. */
int http_resp_finish(struct hr *r);

/* Bytes ready for the guest (valid until the next call on R), and how
 * many of them were sent. */
void http_resp_output(struct hr *r, const uint8_t **p, size_t *len);
void http_resp_consume(struct hr *r, size_t n);

/* The 502 for the guest once the state is HTTP_RESP_CLOSE_AFTER_REPLY, else
 * *LEN = 0. */
void http_resp_reply(struct hr *r, const uint8_t **p, size_t *len);

enum http_resp_state http_resp_state(const struct hr *r);

/* Why the state is not HTTP_RESP_OPEN (one line), or NULL. */
const char *http_resp_reason(const struct hr *r);

/* Free R (NULL is fine), wiping what it held. */
void http_resp_free(struct hr *r);

#endif
