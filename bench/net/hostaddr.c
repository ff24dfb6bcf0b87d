/* What judging "is this the host's own address?" costs per connection
 * (netstack/hostaddr.h): one route look-up per SYN to a public address,
 * against the alternative of listing the addresses afresh (getifaddrs).
 * Asks the kernel only; sends nothing on any network.  Run it as
 * bench/net/hostaddr.sh does (in a namespace of its own with N
 * addresses).
 *
 *   hostaddr [ROUNDS]   prints ns per look-up for each way */
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "netstack/hostaddr.h"

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The old way: list every address and compare. */
static bool listed(const struct policy_addr *a)
{
	struct ifaddrs *ifa, *i;
	bool found = false;

	if (getifaddrs(&ifa) < 0)
		return true;
	for (i = ifa; i && !found; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    memcmp(&((struct sockaddr_in *)i->ifa_addr)->sin_addr, a->b, 4) == 0)
			found = true;
	freeifaddrs(ifa);
	return found;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 20000, i;
	struct policy_addr remote = {.family = 4, .b = {5, 7, 0, 1}}, own = {.family = 4, .b = {5, 6, 0, 1}};
	struct hostaddr h;
	unsigned hits = 0;
	double t0, t1, t2, t3;

	if (hostaddr_open(&h) < 0) {
		perror("hostaddr: netlink");
		return 1;
	}
	t0 = now_ns();
	for (i = 0; i < rounds; i++)
		hits += hostaddr_is_local(&h, i & 1 ? &own : &remote);
	t1 = now_ns();
	for (i = 0; i < rounds / 10; i++)
		hits += listed(i & 1 ? &own : &remote);
	t2 = now_ns();
	for (i = 0; i < rounds; i++)
		hits += hostaddr_is_local(&h, &remote);
	t3 = now_ns();
	printf("route look-up (RTM_GETROUTE), half own, half not: %.0f ns each (%ld rounds, %llu failed)\n",
	       (t1 - t0) / (double)rounds, rounds, (unsigned long long)h.failed);
	printf("route look-up, a routed remote address:           %.0f ns each\n", (t3 - t2) / (double)rounds);
	printf("getifaddrs and compare (the list, read afresh):    %.0f ns each (%ld rounds)\n",
	       (t2 - t1) / (double)(rounds / 10), rounds / 10);
	printf("(%u hits)\n", hits);
	hostaddr_close(&h);
	return 0;
}
