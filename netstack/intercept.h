/* What happens to the bytes of one guest TCP connection when TLS
 * interception is configured (docs/tls-interception.md): the glue
 * between the network stack's flow pump and tls_sni, tls_mitm and
 * http_sub.  Like tls_mitm it is a byte pump without sockets.
 *
 * A connection starts in SNIFF: the guest's first bytes are held until
 * tls_sni can say what they are (at most TLS_HELLO_STREAM_MAX bytes; the
 * upstream's bytes pass straight through meanwhile).  Then:
 *   - not TLS, or TLS without a server name, or a name the scope does not
 *     cover, or on the bypass list, or the server spoke first:
 *     SPLICE — the held bytes go upstream unchanged and the caller drops
 *     this object and copies the rest itself (intercept_want has
 *     INTERCEPT_SPLICE once the held bytes were taken);
 *   - a malformed hello, or a server name that is not one our DNS gave
 *     for the address the guest dialled (SNI spoofing): REFUSE — the
 *     caller resets both sides (INTERCEPT_REFUSE);
 *   - otherwise MITM: a tls_mitm engine whose request filter is an
 *     http_sub instance for the name (secrets are substituted where
 *     allowed and requests that would carry a placeholder elsewhere are
 *     answered 403 by kbox) and whose response filter is an http_resp
 *     instance (every real value in a response becomes its placeholder;
 *     an uninspectable response where kbox asked for identity is
 *     answered 502).
 * Every outcome is reported through the event callback, for the audit
 * log. */
#ifndef KBOX_NETSTACK_INTERCEPT_H
#define KBOX_NETSTACK_INTERCEPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netstack/secrets.h"
#include "netstack/tls_cert.h"
#include "netstack/tls_mitm.h"
#include "netstack/tls_trust.h"

#define INTERCEPT_BYPASS_MAX 64u

enum intercept_scope {
	INTERCEPT_SCOPE_SECRETS, /* only names some secret may be sent to */
	INTERCEPT_SCOPE_ALL,     /* every TLS connection with a server name */
};

struct intercept_config {
	struct tls_cert_ca *ca;              /* required */
	const struct tls_trust *trust; /* required: upstream anchors */
	const struct secrets *secrets; /* may be NULL */
	enum intercept_scope scope;
	/* Names spliced untouched: "host" or "*.suffix" (lower case, no
	 * trailing dot); borrowed, must outlive every connection. */
	const char *const *bypass;
	size_t n_bypass;
};

/* One outcome, for the audit log.  Never carries a real secret value. */
struct intercept_event {
	const char *event;    /* "tls-intercept", "tls-splice", "tls-refuse",
			       * "tls-fail", "secret-substituted", "secret-blocked",
			       * "request-refused" */
	const char *sni;      /* server name, or NULL */
	const char *secret;   /* secret name, or NULL */
	const char *where;    /* e.g. "header authorization", or NULL */
	const char *reason;   /* one line, or NULL */
	int status;           /* HTTP status kbox answered, or 0 */
	bool allow;
};

typedef void (*intercept_event_fn)(void *ctx, const struct intercept_event *ev);

struct icpt;

/* intercept_want bits: the tls_mitm ones, and these. */
#define INTERCEPT_SPLICE 0x100u /* the held bytes are out: go on without this object */
#define INTERCEPT_REFUSE 0x200u /* reset both sides */

/* Whether a name is covered by a bypass entry (exact, or a subdomain of
 * "*.suffix"; case-insensitive, trailing dot ignored). */
bool intercept_bypassed(const struct intercept_config *cfg, const char *name);

/* A pump for a new connection to an address our DNS gave NAMES for
 * (n may be 0; the gateway's name for connections to the host).  CFG
 * and NAMES are copied as needed; CB (may be NULL) gets events.
 * 0, -EINVAL (no CA or trust) or -ENOMEM. */
int intercept_new(const struct intercept_config *cfg, const char *const *names, size_t n, intercept_event_fn cb, void *ctx,
	     struct icpt **out);

/* Same contracts as tls_mitm's functions of the same shape; once the
 * held bytes are draining or spliced, intercept_guest_in takes nothing (the
 * caller keeps the bytes and sends them itself after INTERCEPT_SPLICE); after
 * a refusal it returns -EPIPE.  The
 * upstream_in/guest_out pair is only for an intercepted connection:
 * while intercept_upstream_direct is true the caller copies upstream bytes to
 * the guest itself, after calling intercept_server_spoke (a server that
 * speaks first is never intercepted). */
int intercept_guest_in(struct icpt *c, const uint8_t *buf, size_t n, size_t *taken);
const uint8_t *intercept_guest_out(struct icpt *c, size_t *n);
void intercept_guest_out_done(struct icpt *c, size_t n);
int intercept_upstream_in(struct icpt *c, const uint8_t *buf, size_t n, size_t *taken);
const uint8_t *intercept_upstream_out(struct icpt *c, size_t *n);
void intercept_upstream_out_done(struct icpt *c, size_t n);
void intercept_close_guest(struct icpt *c);
void intercept_close_upstream(struct icpt *c);

/* TLS_MITM_WANT_* / TLS_MITM_DONE bits and INTERCEPT_SPLICE / INTERCEPT_REFUSE. */
unsigned intercept_want(const struct icpt *c);

/* True until the connection is intercepted: upstream bytes go to the
 * guest without this object. */
bool intercept_upstream_direct(const struct icpt *c);

/* The upstream sent bytes before the decision: splice. */
void intercept_server_spoke(struct icpt *c);

/* Free (NULL is fine); wipes what it held. */
void intercept_free(struct icpt *c);

#endif
