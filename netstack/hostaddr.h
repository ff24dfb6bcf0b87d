/* Whether an address is the host's own, asked of the kernel at the
 * moment of each decision (docs/network.md, "The host's own addresses").
 *
 * A list read once at start-up goes stale (DHCP, a VPN, a new interface
 * add addresses later) and needs a bound; instead each question is one
 * route look-up (RTM_GETROUTE) on a NETLINK_ROUTE socket opened before
 * the lock-down: an address is the host's when the kernel would deliver
 * a connection to it locally (route type local, broadcast, anycast or
 * multicast).  That covers every address of every interface however
 * many there are, addresses added after start, and "local" routes
 * (AnyIP) that no interface lists.  Nothing is sent on any network: the
 * kernel answers from its routing tables.
 *
 * Fail closed: when the kernel cannot be asked or its answer cannot be
 * read, the address counts as the host's.  When the kernel says there is
 * no route at all (unreachable, prohibited, no IPv6), it is not: nothing
 * local could be reached by connecting to it either. */
#ifndef KBOX_NETSTACK_HOSTADDR_H
#define KBOX_NETSTACK_HOSTADDR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "netstack/policy.h"

#define HOSTADDR_TIMEOUT_MS 200 /* wait for the kernel's answer (it is queued before send returns) */

struct hostaddr {
	int fd;
	uint32_t seq;
	pthread_mutex_t m; /* one question at a time on the socket */
	uint64_t asked, failed; /* look-ups, and those that failed closed */
};

/* Open the netlink socket (call before any lock-down that forbids
 * socket()).  0 or a negative errno (h->fd stays -1). */
int hostaddr_open(struct hostaddr *h);

/* Close it; h may be one hostaddr_open failed on. */
void hostaddr_close(struct hostaddr *h);

/* Whether a connection to a (IPv4 or IPv6, canonical) would be delivered
 * on this host, as the kernel routes it now.  True also when the kernel
 * could not be asked (fail closed).  Thread-safe. */
bool hostaddr_is_local(struct hostaddr *h, const struct policy_addr *a);

/* hostaddr_is_local in policy_host_fn's shape (ctx is the struct hostaddr). */
bool hostaddr_pol_host(void *ctx, const struct policy_addr *a);

#endif
