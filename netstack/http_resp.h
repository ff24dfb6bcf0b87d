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
 * Memory per connection: the head being collected (HR_HEAD_MAX), the scan
 * window (scrub_holdback + HR_STEP) and the pending output (HR_OUT_HIGH). */
#ifndef KBOX_NETSTACK_HTTP_RESP_H
#define KBOX_NETSTACK_HTTP_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netstack/secrets.h"

#define HR_HEAD_MAX (64u * 1024)   /* a response head or trailer section */
#define HR_FIELDS_MAX 200u         /* fields in one */
#define HR_CHUNK_LINE_MAX 4096u    /* a chunk-size line with extensions */
#define HR_STEP (16u * 1024)       /* body bytes scanned per step */
#define HR_OUT_HIGH (256u * 1024)  /* pending output before hr_feed stops taking */
#define HR_REPLY_MAX 2048u

/* What the response being parsed answers (from http_sub, in order). */
struct hr_req {
	bool head;     /* a HEAD request: the response has no body */
	bool upgrade;  /* the request asked for a protocol switch */
	bool identity; /* kbox asked for an uncompressed response */
};

/* The next request's description, in the order the requests went
 * upstream; false when none is known (the upstream answers something the
 * guest did not send yet, e.g. a 408 before closing). */
typedef bool (*hr_next_fn)(void *ctx, struct hr_req *out);

/* One outcome for the audit log; never a value. */
struct hr_event {
	const char *event;  /* "secret-scrubbed" or "response-refused" */
	const char *secret; /* the first secret found, or NULL */
	unsigned count;     /* replacements in this response */
	int status;         /* 502 when refused, else the response's status */
	const char *reason; /* one line */
};

typedef void (*hr_event_fn)(void *ctx, const struct hr_event *ev);

enum hr_state {
	HR_OPEN,              /* keep feeding */
	HR_CLOSE_AFTER_REPLY, /* send hr_output, then hr_reply to the guest; close */
	HR_FAILED,            /* send hr_output, then cut the connection (hr_reason) */
	HR_ERROR,             /* out of memory: close without sending more */
};

struct hr;

/* A filter for a connection to SNI (for messages).  SET may be NULL and
 * must outlive the filter; STRICT says whether a response nobody asked
 * for must be uncompressed (as if kbox asked for identity).  NEXT is
 * required; CB may be NULL.  0, -EINVAL or -ENOMEM. */
int hr_new(const struct secrets *set, const char *sni, bool strict, hr_next_fn next, hr_event_fn cb,
	   void *ctx, struct hr **out);

/* Feed N response bytes; *TAKEN gets how many were consumed (fewer when
 * the pending output reached HR_OUT_HIGH, or the state left HR_OPEN).
 * 0, or -ENOMEM (HR_ERROR). */
int hr_feed(struct hr *r, const void *in, size_t n, size_t *taken);

/* The upstream's stream ended: a close-delimited body is complete, the
 * held-back bytes are scrubbed and let out; a response cut inside its head
 * or framing is dropped.  0. */
int hr_finish(struct hr *r);

/* Bytes ready for the guest (valid until the next call on R), and how
 * many of them were sent. */
void hr_output(struct hr *r, const uint8_t **p, size_t *len);
void hr_consume(struct hr *r, size_t n);

/* The 502 for the guest once the state is HR_CLOSE_AFTER_REPLY, else
 * *LEN = 0. */
void hr_reply(struct hr *r, const uint8_t **p, size_t *len);

enum hr_state hr_state(const struct hr *r);

/* Why the state is not HR_OPEN (one line), or NULL. */
const char *hr_reason(const struct hr *r);

/* Free R (NULL is fine), wiping what it held. */
void hr_free(struct hr *r);

#endif
