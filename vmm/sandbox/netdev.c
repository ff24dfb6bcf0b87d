#include "vmm/sandbox/netdev.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/errbuf.h"
#include "netstack/hostaddr.h"
#include "netstack/resolver.h"
#include "vmm/sandbox/config.h"

void netdev_init(struct netdev *n)
{
	memset(n, 0, sizeof *n);
	policy_init(&n->pol, POLICY_MODE_PUBLIC);
	n->audit.fd = -1;
	n->learn_fd = -1;
	n->ha.fd = -1;
	audit_learn_init(&n->learn);
}

int netdev_set_mode(struct netdev *n, const char *mode, char *err, size_t errlen)
{
	if (policy_parse_mode(mode, &n->pol.mode) < 0)
		return errbuf_fail(err, errlen, -EINVAL,
			       "--network takes none, public or allowlist, not '%s'", mode);
	n->mode_set = true;
	return 0;
}

int netdev_add_rule(struct netdev *n, const char *rule, bool deny, char *err, size_t errlen)
{
	char buf[POLICY_NAME_MAX + 64];
	char msg[256];
	if (snprintf(buf, sizeof buf, "%s%s", deny ? "deny:" : "", rule) >= (int)sizeof buf)
		return errbuf_fail(err, errlen, -EINVAL, "rule too long: '%.64s...'", rule);
	int r = policy_add_rule(&n->pol, buf, msg, sizeof msg);
	if (r < 0)
		errbuf_say(err, errlen, "%s '%s': %s", deny ? "--deny" : "--allow", rule,
		       r == -ENOMEM ? "out of memory" : msg);
	return r;
}

int netdev_add_forward(struct netdev *n, const char *spec, char *err, size_t errlen)
{
	if (n->nfwd >= STACK_MAX_FORWARDS)
		return errbuf_fail(err, errlen, -ENOSPC, "too many -p options (at most %u)",
			       STACK_MAX_FORWARDS);
	int r = stack_forward_parse(spec, &n->fwd[n->nfwd], err, errlen);
	if (r == 0)
		n->nfwd++;
	return r;
}

/* Append the pin spec; what names its origin in messages. */
static int add_host(struct netdev *n, const char *spec, const char *what, char *err, size_t errlen)
{
	struct stack_host h;
	char msg[256];
	int r = stack_host_parse(spec, &h, msg, sizeof msg);
	if (r < 0)
		return errbuf_fail(err, errlen, r, "%s: %s", what, msg);
	if (n->nhosts >= STACK_MAX_HOSTS)
		return errbuf_fail(err, errlen, -ENOSPC, "%s: too many pinned names (at most %u)", what,
			       STACK_MAX_HOSTS);
	struct stack_host *p = realloc(n->hosts, (n->nhosts + 1) * sizeof *p);
	if (!p)
		return errbuf_fail(err, errlen, -ENOMEM, "%s: out of memory", what);
	n->hosts = p;
	n->hosts[n->nhosts++] = h;
	return 0;
}

int netdev_add_host(struct netdev *n, const char *spec, char *err, size_t errlen)
{
	return add_host(n, spec, "--add-host", err, errlen);
}

int netdev_add_dns(struct netdev *n, const char *spec, char *err, size_t errlen)
{
	char msg[256];
	n->dns_set = true;
	int r = resolver_upstream_add(&n->dns, spec, msg, sizeof msg);
	if (r < 0)
		errbuf_say(err, errlen, "--dns: %s", msg);
	return r;
}

void netdev_ports(const struct netdev *n, char *buf, size_t len)
{
	size_t used = 0;
	if (len == 0)
		return;
	buf[0] = '\0';
	for (size_t i = 0; i < n->nfwd; i++) {
		char ip[64];
		const struct stack_forward *f = &n->fwd[i];
		if (policy_addr_format(&f->host, ip, sizeof ip) < 0)
			snprintf(ip, sizeof ip, "?");
		int k = snprintf(buf + used, len - used, f->host.family == 6 ? "%s[%s]:%u->%u" : "%s%s:%u->%u",
				 i ? "," : "", ip, f->host_port, f->guest_port);
		if (k < 0 || (size_t)k >= len - used) {
			buf[used] = '\0'; /* cut at the last whole entry */
			return;
		}
		used += (size_t)k;
	}
}

int netdev_apply_config(struct netdev *n, const struct kbox_config *c, const char *file, char *err,
			size_t errlen)
{
	char msg[256], buf[POLICY_NAME_MAX + 64];
	int r;
	if (c->network_policy && !n->mode_set && policy_parse_mode(c->network_policy, &n->pol.mode) < 0)
		return errbuf_fail(err, errlen, -EINVAL,
			       "%s: network.policy: '%s' is not none, public or allowlist", file,
			       c->network_policy);
	if (c->audit_log && !n->audit_path)
		n->audit_path = c->audit_log;
	for (size_t k = 0; k < 2; k++) {
		const struct config_str *list = k ? c->deny : c->allow;
		size_t cnt = k ? c->n_deny : c->n_allow;
		for (size_t i = 0; i < cnt; i++) {
			const struct config_str *e = &list[i];
			if (snprintf(buf, sizeof buf, "%s%s", k ? "deny:" : "", e->s) >= (int)sizeof buf) {
				snprintf(msg, sizeof msg, "rule too long");
				r = -EINVAL;
			} else {
				r = policy_add_rule(&n->pol, buf, msg, sizeof msg);
			}
			if (r < 0)
				return errbuf_fail(err, errlen, r, "%s:%u:%u: network.%s: '%.64s': %s",
					       file, e->line, e->col, k ? "deny" : "allow", e->s,
					       r == -ENOMEM ? "out of memory" : msg);
		}
	}
	for (size_t i = 0; i < c->n_hosts; i++) {
		const struct config_str *e = &c->hosts[i];
		if ((r = add_host(n, e->s, "network.hosts", msg, sizeof msg)) < 0)
			return errbuf_fail(err, errlen, r, "%s:%u:%u: %s", file, e->line, e->col, msg);
	}
	for (size_t i = 0; i < c->n_dns && !n->dns_set; i++) {
		const struct config_str *e = &c->dns[i];
		if ((r = resolver_upstream_add(&n->dns, e->s, msg, sizeof msg)) < 0)
			return errbuf_fail(err, errlen, r, "%s:%u:%u: network.dns: %s", file, e->line,
				       e->col, msg);
	}
	if (c->dns_rate)
		n->dns_rate = c->dns_rate;
	for (size_t i = 0; i < c->n_ports; i++) {
		const struct config_str *e = &c->ports[i];
		if ((r = netdev_add_forward(n, e->s, msg, sizeof msg)) < 0)
			return errbuf_fail(err, errlen, r, "%s:%u:%u: ports: %s", file, e->line, e->col,
				       msg);
	}
	return 0;
}

bool netdev_enabled(const struct netdev *n)
{
	return n->pol.mode != POLICY_MODE_NONE;
}

/* Stack → guest: only queue (see the locking note in netdev.h).  Merged
 * TCP frames reach a driver without GUEST_TSO4 cut back into segments
 * (virtio_net_rx_enqueue_gso). */
static void to_guest(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len)
{
	struct netdev *n = ctx;
	virtio_net_rx_enqueue_gso(&n->nic, h, frame, len); /* a full queue drops, like a wire */
}

/* Guest → stack, on the device thread or a vCPU under the bus lock. */
static void to_stack(void *ctx, const uint8_t *frame, size_t len)
{
	struct netdev *n = ctx;
	stack_input(n->stack, frame, len);
}

static unsigned poll_fds(void *ctx, struct pollfd *p, unsigned max)
{
	struct netdev *n = ctx;
	if (max < 2)
		return 0;
	p[0] = (struct pollfd){ .fd = virtio_net_wake_fd(&n->nic), .events = POLLIN };
	p[1] = (struct pollfd){ .fd = stack_fd(n->stack), .events = POLLIN };
	return 2;
}

static void poll_handle(void *ctx, const struct pollfd *p, unsigned k)
{
	struct netdev *n = ctx;
	if (k >= 2 && p[1].revents)
		stack_dispatch(n->stack);
	virtio_net_rx_flush(&n->nic);
}

int netdev_attach(struct netdev *n, struct virtio_bus *bus, char *cmdline, size_t cmdlen, char *err,
		  size_t errlen)
{
	int r;

	if (!netdev_enabled(n)) {
		if (n->nfwd || n->learn_path)
			return errbuf_fail(err, errlen, -EINVAL,
				       "%s needs a network: not with --network none",
				       n->nfwd ? "-p" : "--learn");
		return 0;
	}
	if (n->audit_path && (r = audit_open(&n->audit, n->audit_path, err, errlen)) < 0)
		return r;
	if (n->learn_path) {
		n->learn_fd = audit_open_file(n->learn_path, true, err, errlen);
		if (n->learn_fd < 0) {
			r = n->learn_fd;
			n->learn_fd = -1;
			return r;
		}
	}
	/* The host's own addresses are blocked like a class (policy.h),
	 * judged as the kernel routes them at each decision: opened here,
	 * before the lock-down forbids new sockets of most kinds. */
	if ((r = hostaddr_open(&n->ha)) < 0)
		return errbuf_fail(err, errlen, r,
			       "cannot open a netlink socket to tell the host's own addresses from others: %s "
			       "(kbox needs NETLINK_ROUTE to keep the guest off them; --network none needs nothing)",
			       strerror(-r));
	policy_set_host_fn(&n->pol, hostaddr_pol_host, &n->ha);
	const uint8_t mac[6] = VIRTIO_NET_GUEST_MAC;
	struct net_backend be = { to_stack, n };
	if ((r = virtio_net_init(&n->nic, mac, &be)) < 0)
		return errbuf_fail(err, errlen, r, "cannot create the network device: %s",
			       strerror(-r));
	n->nic_made = true;
	struct stack_config cfg = {
		.policy = &n->pol,
		.hosts = n->hosts,
		.nhosts = n->nhosts,
		.audit = &n->audit,
		.learn = n->learn_path ? &n->learn : NULL,
		.output_gso = to_guest,
		.output_ctx = n,
		.guest_mac = mac,
		.resolve = n->dns.n ? resolver_upstream_resolve : resolver_resolve,
		.resolve_ctx = n->dns.n ? &n->dns : NULL,
		.dns_per_sec = n->dns_rate,
		.icpt = n->icpt,
	};
	if ((r = stack_create(&cfg, &n->stack)) < 0)
		return errbuf_fail(err, errlen, r, "cannot start the network stack: %s", strerror(-r));
	for (size_t i = 0; i < n->nfwd; i++) {
		char ip[64];
		if (policy_addr_format(&n->fwd[i].host, ip, sizeof ip) < 0)
			snprintf(ip, sizeof ip, "?");
		if ((r = stack_forward_add(n->stack, &n->fwd[i])) < 0)
			return errbuf_fail(err, errlen, r, "-p: cannot listen on %s port %u: %s", ip,
				       n->fwd[i].host_port, strerror(-r));
	}
	struct virtio_bus_poller vp = { poll_fds, poll_handle, n };
	r = virtio_bus_add(bus, &n->nic.dev, &vp, cmdline, cmdlen, err, errlen);
	if (r == -ENOSPC)
		errbuf_say(err, errlen, "no room for the network device on the virtio bus "
		       "(%u devices at most)", VIRTIO_BUS_MAX_DEVS);
	return r;
}

int netdev_write_learned(struct netdev *n, char *err, size_t errlen)
{
	static const char *const modes[] = { "none", "public", "allowlist" };
	if (n->learn_fd < 0)
		return 0;
	int r = audit_learn_write(&n->learn, modes[n->pol.mode], n->learn_fd);
	if (r < 0)
		errbuf_say(err, errlen, "--learn: cannot write %s: %s", n->learn_path, strerror(-r));
	return r;
}

void netdev_report(struct netdev *n, FILE *f)
{
	struct virtio_net_stats v;
	struct stack_stats st;

	if (!n->stack)
		return;
	virtio_net_get_stats(&n->nic, &v);
	stack_get_stats(n->stack, &st);
	fprintf(f,
		"kbox: network: frames %llu out (%llu dropped), %llu in (%llu dropped, %llu merged), "
		"%llu bad chains; tcp %llu allowed, %llu denied, %llu failed; %llu DNS queries "
		"(%llu refused for asking too fast or too much at once); "
		"%llu bytes to the host, %llu to the guest\n",
		(unsigned long long)v.tx_frames, (unsigned long long)v.tx_dropped,
		(unsigned long long)v.rx_frames, (unsigned long long)v.rx_dropped,
		(unsigned long long)v.rx_gso, (unsigned long long)v.bad_chains, (unsigned long long)st.tcp_allowed,
		(unsigned long long)st.tcp_denied, (unsigned long long)st.tcp_failed,
		(unsigned long long)st.dns_queries,
		(unsigned long long)(st.dns_rate_refused + st.dns_busy_refused),
		(unsigned long long)st.bytes_to_host,
		(unsigned long long)st.bytes_to_guest);
	/* Only when it matters: a look-up that failed refused its address. */
	if (n->ha.failed)
		fprintf(f, "kbox: network: %llu of %llu look-ups of the host's own addresses failed; "
			"their addresses were refused as the host's\n",
			(unsigned long long)n->ha.failed, (unsigned long long)n->ha.asked);
}

void netdev_destroy(struct netdev *n)
{
	if (n->stack)
		stack_destroy(n->stack);
	n->stack = NULL;
	if (n->nic_made)
		virtio_net_destroy(&n->nic);
	n->nic_made = false;
	audit_close(&n->audit);
	policy_free(&n->pol);
	hostaddr_close(&n->ha);
	free(n->hosts);
	n->hosts = NULL;
	n->nhosts = 0;
	if (n->learn_fd >= 0)
		close(n->learn_fd);
	n->learn_fd = -1;
	audit_learn_free(&n->learn);
}
