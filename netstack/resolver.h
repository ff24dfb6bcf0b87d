/* The resolvers behind the stack's DNS (stack_resolve_fn, netstack/stack.h).
 *
 * Without configured servers (resolver_resolve): the host's getaddrinfo, run in a short-lived worker thread per question and
 * waited for with a timeout, so a slow or dead upstream costs the caller
 * at most RESOLVER_TIMEOUT_MS.  A question that times out is answered
 * SERVFAIL and its worker finishes on its own and frees the job; at most
 * RESOLVER_MAX_PENDING such workers exist at once (more questions get
 * SERVFAIL at once), so a guest cannot pile up threads.
 *
 * Blocking: the stack calls it on its resolver threads (netstack/stack.h),
 * without its lock, and replies when it returns; the timeout frees such a
 * thread for the next question after RESOLVER_TIMEOUT_MS at most. */
#ifndef KBOX_NETSTACK_RESOLVER_H
#define KBOX_NETSTACK_RESOLVER_H

#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include "netstack/dns.h"

#define RESOLVER_TIMEOUT_MS 2000u
#define RESOLVER_MAX_PENDING 8u
#define RESOLVER_TTL 60u /* getaddrinfo gives no TTL */

/* stack_resolve_fn (netstack/stack.h) over getaddrinfo; ctx is unused.
 * Returns DNS_RCODE_NOERROR (maybe with *n == 0), DNS_RCODE_NXDOMAIN, or
 * -ETIMEDOUT, -EAGAIN (too many pending), -EINVAL (bad qtype or name),
 * -EIO (resolver failure) for SERVFAIL. */
int resolver_resolve(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out, size_t max,
		     size_t *n);

/* With configured servers (sandbox.yaml network.dns, --dns): kbox asks
 * them itself over UDP instead of the host's resolver, one A or AAAA
 * question per call.  Rounds: each server in order gets one attempt of
 * try_ms; a second round retries the servers that neither answered nor
 * refused.  Each attempt uses a fresh socket (a random source port from
 * the kernel) and a random query id; a datagram is taken only from the
 * server's address and port and only if its id and question match (any
 * other is dropped and the wait goes on), so an off-path forger must
 * guess 32 bits.  A truncated answer (TC) is asked again over TCP within
 * the same attempt's time.  Answers are parsed by dns_parse_response:
 * hostile bytes, bounds-checked.  No EDNS: answers fit 512 bytes or come
 * over TCP. */
#define RESOLVER_MAX_SERVERS 3u   /* as resolv.conf's MAXNS */
#define RESOLVER_TRY_MS 1000u     /* one attempt at one server */
#define RESOLVER_ROUNDS 2u        /* so each server gets one retry */
#define RESOLVER_DEFAULT_PORT 53u
#define RESOLVER_TCP_MAX 65535u   /* largest DNS message over TCP */

struct resolver_server {
	struct sockaddr_storage sa; /* AF_INET or AF_INET6, with the port */
	socklen_t len;
};

struct resolver_upstream {
	struct resolver_server srv[RESOLVER_MAX_SERVERS];
	size_t n;
	unsigned try_ms; /* 0: RESOLVER_TRY_MS (tests shorten it) */
};

/* Parse "ADDR[:PORT]": an IPv4 address, an IPv6 one bare or in brackets
 * ("[ADDR]:PORT" with a port), PORT 1..65535 (default 53).  The
 * unspecified and multicast addresses are refused.  0, or -EINVAL with a
 * message for the user in err (without the option's or the setting's
 * name: the caller adds it). */
int resolver_server_parse(const char *spec, struct resolver_server *s, char *err, size_t errlen);

/* Append the server spec to u: 0, -EINVAL (bad spec, message in err) or
 * -ENOSPC (already RESOLVER_MAX_SERVERS, message in err). */
int resolver_upstream_add(struct resolver_upstream *u, const char *spec, char *err, size_t errlen);

/* stack_resolve_fn over the servers of ctx (a const struct resolver_upstream *
 * with n >= 1, which must outlive the stack).  Thread-safe: several
 * questions may be asked at once.  Blocks at most about
 * n * RESOLVER_ROUNDS * try_ms.  Returns DNS_RCODE_NOERROR (maybe with
 * *n == 0) or DNS_RCODE_NXDOMAIN, or -EINVAL (bad qtype or name),
 * -ETIMEDOUT (no server answered) or -EIO (every server failed or
 * refused) for SERVFAIL. */
int resolver_upstream_resolve(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out,
			      size_t max, size_t *n);

/* Judge one message received for q: the addresses for q into out[0, max)
 * (count in *n) and DNS_RCODE_NOERROR or DNS_RCODE_NXDOMAIN; -EPROTO (not
 * an answer to q, or malformed: drop it and keep waiting); -EMSGSIZE
 * (truncated: ask over TCP); -EAGAIN (the server failed or refused: ask
 * the next one).  Pure; exposed for the tests and the fuzzer. */
int resolver_answer(const uint8_t *pkt, size_t len, const struct dns_query *q, struct dns_rr *out,
		    size_t max, size_t *n);

#endif
