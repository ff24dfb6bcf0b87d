/* The host resolver behind the stack's DNS (an ns_resolve_fn): the
 * host's getaddrinfo, run in a short-lived worker thread per question and
 * waited for with a timeout, so a slow or dead upstream costs the caller
 * at most NRES_TIMEOUT_MS.  A question that times out is answered
 * SERVFAIL and its worker finishes on its own and frees the job; at most
 * NRES_MAX_PENDING such workers exist at once (more questions get
 * SERVFAIL at once), so a guest cannot pile up threads.
 *
 * Blocking: the stack calls it on its resolver threads (netstack/stack.h),
 * without its lock, and replies when it returns; the timeout frees such a
 * thread for the next question after NRES_TIMEOUT_MS at most. */
#ifndef KBOX_NETSTACK_RESOLVER_H
#define KBOX_NETSTACK_RESOLVER_H

#include <stddef.h>
#include <stdint.h>

#include "netstack/dns.h"

#define NRES_TIMEOUT_MS 2000u
#define NRES_MAX_PENDING 8u
#define NRES_TTL 60u /* getaddrinfo gives no TTL */

/* ns_resolve_fn (netstack/stack.h) over getaddrinfo; ctx is unused.
 * Returns DNS_RCODE_NOERROR (maybe with *n == 0), DNS_RCODE_NXDOMAIN, or
 * -ETIMEDOUT, -EAGAIN (too many pending), -EINVAL (bad qtype or name),
 * -EIO (resolver failure) for SERVFAIL. */
int nres_resolve(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out, size_t max,
		 size_t *n);

#endif
