/* The TLS interception engine (docs/tls-interception.md): one per
 * intercepted connection, a pure byte pump with no sockets, no lwIP and
 * no threads of its own.  Toward the guest it is a TLS 1.2 server
 * (BearSSL, ALPN "http/1.1", a leaf for the SNI minted by the kbox CA);
 * toward the upstream (the address the guest dialled; the caller owns
 * that socket) it is a TLS 1.2 client that verifies the server's chain
 * against tls_trust's anchors for the SNI name.  Plaintext goes through
 * a filter (struct tls_mitm_filter_ops) in both directions.
 *
 * How the caller decides, before creating an engine:
 *   1. Hold the guest's first bytes and run tls_sni_parse on them until
 *      it says something other than NEED_MORE (bound the wait).
 *   2. NOT_TLS (h2_preface included) or BAD: refuse (reset), or splice
 *      if policy allows non-TLS traffic to that port.
 *   3. OK without a usable SNI (!has_sni or sni_invalid): the engine
 *      cannot intercept; refuse or splice (tls.bypass), never guess.
 *   4. OK with the name on the bypass list: splice untouched.
 *   5. Otherwise tls_mitm_new(cfg, hello.sni, ...) and hand it every byte
 *      from the start of the stream (the held bytes first).  A client
 *      that cannot do TLS 1.2 (tls13_only) may be refused at step 2 for
 *      a clearer audit entry; if handed to the engine it fails cleanly
 *      with a protocol_version alert and a reason.
 *
 * What the engine enforces:
 *   - it re-reads the guest's ClientHello itself and fails unless it is
 *     well formed, names the same SNI, offers TLS 1.2 and, if it offers
 *     ALPN at all, offers http/1.1 (an h2-only client gets
 *     no_application_protocol);
 *   - the upstream handshake runs first, while the guest's hello is held;
 *     only when the upstream's certificate verified for the SNI does the
 *     guest's handshake start.  Otherwise the guest gets a fatal
 *     handshake_failure alert and the reason is kept for the audit log:
 *     nothing from the guest ever reaches the upstream but the engine's
 *     own ClientHello;
 *   - the filter sees plaintext only after both handshakes completed;
 *   - renegotiation is refused on both sides.
 *
 * I/O contract (every call is O(bytes moved), none blocks):
 *   - ciphertext in: tls_mitm_guest_in / tls_mitm_upstream_in take what they can
 *     (*taken may be less than n, even 0: backpressure; offer the rest
 *     later, after output has drained);
 *   - ciphertext out: tls_mitm_guest_out / tls_mitm_upstream_out show the bytes
 *     to send (zero-copy, valid until the next call on the engine); say
 *     how many were sent with the matching *_out_done;
 *   - after every call, ask tls_mitm_want what to do next; when it says
 *     TLS_MITM_DONE, close both sockets (after sending any output it still
 *     shows).  tls_mitm_error is non-NULL once the connection failed;
 *   - the engine has no clock: the caller bounds every wait (the hello,
 *     the upstream's handshake, idle connections).
 *   Memory per engine: two BR_SSL_BUFSIZE_BIDI buffers plus the two
 *   BearSSL contexts (~80 KiB) and, until the guest's handshake starts,
 *   TLS_HELLO_STREAM_MAX for the held hello.  Nothing grows.
 *
 * Closing: when one side ends (close_notify or TCP EOF), what is pending
 * in that direction is forwarded, the filter is told (eof), and the other
 * side is ended the same way: close_notify if it was one, a bare TCP EOF
 * if it was not (so a truncation stays visible).  BearSSL answers a
 * close_notify with its own and closes both directions, so half-closed
 * TLS connections are not kept open. */
#ifndef KBOX_NETSTACK_TLS_MITM_H
#define KBOX_NETSTACK_TLS_MITM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bearssl.h>

#include "netstack/tls_cert.h"
#include "netstack/tls_trust.h"

#define TLS_MITM_REASON_MAX 256u

/* One filter call.  The engine fills the inputs; the filter consumes
 * from IN (sets TAKEN <= IN_LEN) and writes at most OUT_CAP bytes to OUT
 * (sets MADE).  It may keep consumed bytes to itself (e.g. a header not
 * yet complete) and produce them in a later call.  IN is NULL when IN_LEN
 * is 0. */
struct tls_mitm_io {
	const uint8_t *in;
	size_t in_len;
	bool eof;          /* no byte will follow IN: flush everything held */
	size_t taken;      /* set by the filter */
	uint8_t *out;
	size_t out_cap;
	size_t made;       /* set by the filter */
	const uint8_t *reply; /* TLS_MITM_FILTER_REPLY: bytes for the guest, */
	size_t reply_len;     /* valid until tls_mitm_free */
	char reason[TLS_MITM_REASON_MAX]; /* with a negative return: why, for tls_mitm_error (a REPLY is
				       * not a failure: tls_mitm_error stays NULL, the filter logs it) */
};

enum {
	TLS_MITM_FILTER_OK = 0,    /* call again when there is more input */
	TLS_MITM_FILTER_MORE = 1,  /* output is pending: call again when there is room, even without input */
	TLS_MITM_FILTER_REPLY = 2, /* send what was MADE on (upstream for up, to the guest for down), then
				* answer the guest with REPLY and close both sides; nothing more is
				* read from either */
};

/* Both directions are optional (NULL: bytes pass unchanged).  A negative
 * return (an errno) fails the connection with io->reason (or a generic
 * one).  A filter that answers the guest itself should do so only when
 * the responses to requests it already forwarded have passed down. */
struct tls_mitm_filter_ops {
	int (*up)(void *ctx, struct tls_mitm_io *io);   /* guest -> upstream plaintext */
	int (*down)(void *ctx, struct tls_mitm_io *io); /* upstream -> guest plaintext */
};

struct tls_mitm_config {
	struct tls_cert_ca *ca;                     /* mints the guest-facing leaf; outlives the engine */
	const struct tls_trust *trust;        /* upstream anchors; outlives the engine */
	const struct tls_mitm_filter_ops *filter; /* NULL: pass-through both ways */
};

struct mitm;

/* tls_mitm_want bits */
#define TLS_MITM_WANT_GUEST_IN 0x01u /* tls_mitm_guest_in would take bytes */
#define TLS_MITM_WANT_GUEST_OUT 0x02u /* tls_mitm_guest_out has bytes */
#define TLS_MITM_WANT_UP_IN 0x04u
#define TLS_MITM_WANT_UP_OUT 0x08u
#define TLS_MITM_DONE 0x10u /* nothing more in or out: close both sockets */

/* A new engine for a connection whose ClientHello named SNI (validated
 * by tls_sni_name_normalize; an IP literal is refused, tls_sni never gives
 * one).  Mints or finds the leaf now.  FILTER_CTX goes to the filter.
 * 0 and *OUT, -EINVAL (bad name, no CA or trust), -ENOMEM, or
 * tls_cert_leaf's error. */
int tls_mitm_new(const struct tls_mitm_config *cfg, const char *sni, void *filter_ctx, struct mitm **out);

/* Ciphertext from the guest, starting with the first byte of the TCP
 * stream.  *TAKEN gets how many bytes were consumed.  0, or -EPIPE once
 * the engine accepts no more guest input (failed, or closing). */
int tls_mitm_guest_in(struct mitm *m, const uint8_t *buf, size_t n, size_t *taken);

/* Ciphertext for the guest: a pointer and *N bytes (NULL, 0 if none). */
const uint8_t *tls_mitm_guest_out(struct mitm *m, size_t *n);

/* N of the bytes shown by tls_mitm_guest_out were sent. */
void tls_mitm_guest_out_done(struct mitm *m, size_t n);

/* Same three for the upstream socket. */
int tls_mitm_upstream_in(struct mitm *m, const uint8_t *buf, size_t n, size_t *taken);
const uint8_t *tls_mitm_upstream_out(struct mitm *m, size_t *n);
void tls_mitm_upstream_out_done(struct mitm *m, size_t n);

/* TCP EOF from the guest / from the upstream (no more *_in calls). */
void tls_mitm_close_guest(struct mitm *m);
void tls_mitm_close_upstream(struct mitm *m);

/* What the engine wants now: TLS_MITM_WANT_* and TLS_MITM_DONE bits. */
unsigned tls_mitm_want(const struct mitm *m);

/* NULL while all is well; after a failure, one line for the audit log
 * (e.g. "upstream certificate for x.com: not trusted"), owned by M. */
const char *tls_mitm_error(const struct mitm *m);

/* True once both handshakes completed (plaintext flows). */
bool tls_mitm_established(const struct mitm *m);

/* Plaintext bytes delivered to the upstream and to the guest. */
void tls_mitm_counts(const struct mitm *m, uint64_t *up, uint64_t *down);

/* Free the engine (NULL is fine), wiping its buffers and keys first.
 * Sends nothing. */
void tls_mitm_free(struct mitm *m);

#endif
