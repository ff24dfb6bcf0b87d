/* The guest's NIC in `kbox run`: the egress policy and audit log from the
 * command line, kbox's network stack (netstack/stack.h) and a virtio-net
 * device (devices/virtio_net.h) wired to each other and to the bus.
 *
 * Locking (why it cannot deadlock).  Three locks are involved: the bus
 * lock (every device call), lwIP's core lock (every stack call) and the
 * device's receive-queue lock.  They are only ever taken in that order:
 *   - device thread and vCPU MMIO exits: bus lock → (guest TX) stack_input or
 *     (host fd ready) stack_dispatch → core lock → output → rxq lock;
 *   - lwIP's own thread (TCP timers): core lock → output → rxq lock; it
 *     never takes the bus lock, because the output callback only queues
 *     the frame (virtio_net_rx_enqueue_gso, which may cut a merged frame into
 *     segments under the rxq lock, taking nothing else) and wakes the
 *     device thread through an eventfd, which then moves it into guest
 *     buffers under the bus lock;
 *   - the rxq lock is a leaf: nothing is acquired while it is held.
 * No thread holds a later lock while waiting for an earlier one, so no
 * cycle exists.  The DNS resolver (netstack/resolver.h) runs on the
 * stack's resolver threads without the core lock, takes none of these
 * locks, and waits at most RESOLVER_TIMEOUT_MS (with --dns: RESOLVER_ROUNDS
 * tries of RESOLVER_TRY_MS per server). */
#ifndef KBOX_VMM_NETDEV_H
#define KBOX_VMM_NETDEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "devices/virtio_net.h"
#include "netstack/audit.h"
#include "netstack/hostaddr.h"
#include "netstack/policy.h"
#include "netstack/resolver.h"
#include "netstack/stack.h"
#include "vmm/core/virtio_bus.h"

struct kbox_config;

struct netdev {
	struct policy pol;
	struct hostaddr ha; /* the host's own addresses, asked per decision (fd -1 until attached) */
	bool mode_set; /* --network given: the config file's policy does not apply */
	struct audit audit;
	const char *audit_path; /* NULL: no audit log */
	struct virtio_net nic;
	struct stack *stack;
	bool nic_made;
	struct stack_forward fwd[STACK_MAX_FORWARDS]; /* -p, listening once attached */
	size_t nfwd;
	struct stack_host *hosts; /* --add-host, malloc'd */
	size_t nhosts;
	const char *learn_path; /* --learn FILE; NULL: off */
	int learn_fd;           /* opened by netdev_attach, written by netdev_write_learned */
	struct audit_learn learn;
	/* TLS interception (vmm/sandbox/tlsconf.h), set before netdev_attach; NULL:
	 * none.  Must outlive the device. */
	const struct intercept_config *icpt;
	/* Name servers kbox asks instead of the host's resolver (--dns,
	 * which replaces the file's network.dns); dns.n 0: the host's. */
	struct resolver_upstream dns;
	bool dns_set;      /* --dns given: the file's servers do not apply */
	unsigned dns_rate; /* network.dns.rate; 0: the stack's default */
};

/* Start with mode public, no rules and no audit log.  Never fails. */
void netdev_init(struct netdev *n);

/* --network MODE: 0 or -EINVAL with a message in err. */
int netdev_set_mode(struct netdev *n, const char *mode, char *err, size_t errlen);

/* --allow RULE (deny false) or --deny RULE (deny true): 0, -EINVAL
 * (message in err) or -ENOMEM. */
int netdev_add_rule(struct netdev *n, const char *rule, bool deny, char *err, size_t errlen);

/* -p [ADDR:]HOSTPORT:GUESTPORT: 0, or -EINVAL/-ENOSPC with a message in
 * err (a non-loopback ADDR is refused). */
int netdev_add_forward(struct netdev *n, const char *spec, char *err, size_t errlen);

/* --add-host NAME:ADDR: 0, -EINVAL (message in err), -ENOSPC (more
 * than STACK_MAX_HOSTS) or -ENOMEM. */
int netdev_add_host(struct netdev *n, const char *spec, char *err, size_t errlen);

/* --dns ADDR[:PORT]: 0, or -EINVAL/-ENOSPC with a message in err. */
int netdev_add_dns(struct netdev *n, const char *spec, char *err, size_t errlen);

/* The forwarded ports as "127.0.0.1:41234->8000,..." (host ports as
 * bound, so after netdev_attach), "" without any. */
void netdev_ports(const struct netdev *n, char *buf, size_t len);

/* Add the config file's network section and ports (loaded from file) to
 * what the command line set: the command line's --network, --audit-log
 * and --dns win, rules, hosts and ports add up.  0, or a negative errno
 * with "FILE:LINE:COL: ..." in err. */
int netdev_apply_config(struct netdev *n, const struct kbox_config *c, const char *file, char *err,
			size_t errlen);

/* Whether the guest gets a NIC at all (mode is not none). */
bool netdev_enabled(const struct netdev *n);

/* Open the audit log (if set), learn the host's own addresses, create the
 * stack and the device, listen on the forwarded ports (before the
 * lock-down, which forbids it), and add the device to bus with its
 * poller (the stack's fd and the device's wake fd on the device thread).
 * Opens the --learn file now, for the same reason.  Does nothing in mode
 * none (-EINVAL with forwarded ports or --learn).  0 or a
 * negative errno with err set; call netdev_destroy in every case. */
int netdev_attach(struct netdev *n, struct virtio_bus *bus, char *cmdline, size_t cmdlen, char *err,
		  size_t errlen);

/* --learn: write the suggested allowlist (audit.h) to learn_path, once
 * the bus is stopped.  0 (also without --learn) or a negative errno with
 * err set. */
int netdev_write_learned(struct netdev *n, char *err, size_t errlen);

/* One line of counters (frames, drops, connections, DNS, bytes) on f
 * for --verbose; nothing in mode none.  Call once the bus is stopped. */
void netdev_report(struct netdev *n, FILE *f);

/* Tear down, once no thread calls the device any more (bus stopped). */
void netdev_destroy(struct netdev *n);

#endif
