/* The network stack's creation, its input and its dispatch (see stack.h
 * and docs/network.md); the TCP proxy is in stack_tcp.c, forwarded ports
 * in stack_fwd.c, the DNS answerer in stack_dns.c, what they share in
 * stack_priv.h.
 *
 * kbox parses the guest's frames itself (lib/frame.c) and hands TCP
 * segments, IPv4 and IPv6, straight to tcp_input (stack_tcp.c), which
 * accepts any destination.  ARP, neighbor discovery, ICMP echo and DNS
 * never reach lwIP.
 *
 * Locking: every entry point takes lwIP's core lock; lwIP's own thread
 * holds it when its timers call back into us.  So all of struct stack is
 * guarded by that lock.  epoll data holds flow handles, not pointers: a
 * flow may be freed by lwIP's thread between epoll_wait and the lock. */
#include "netstack/stack_priv.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "lwip/ip.h"
#include "lwip/pbuf.h"
#include "lwip/tcpip.h"

#define MEMO_CAP 4096u
#define DNS_TAG ((uint64_t)STACK_MAX_FORWARDS + 1) /* epoll data of the resolver's eventfd */

static pthread_once_t lwip_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t stack_single = PTHREAD_MUTEX_INITIALIZER;
static bool stack_exists;

static void lwip_start(void)
{
	tcpip_init(NULL, NULL);
}

void stack_bucket_init(struct bucket *b, unsigned rate, unsigned burst, uint64_t now)
{
	b->rate = rate;
	b->burst = burst;
	b->mtokens = (uint64_t)burst * 1000;
	b->last_ms = now;
}

bool stack_bucket_take(struct bucket *b, uint64_t now)
{
	uint64_t cap = (uint64_t)b->burst * 1000;

	if (now > b->last_ms) {
		uint64_t add = (now - b->last_ms) * b->rate;

		b->mtokens = add >= cap - b->mtokens ? cap : b->mtokens + add;
		b->last_ms = now;
	}
	if (b->mtokens < 1000)
		return false;
	b->mtokens -= 1000;
	return true;
}

uint64_t stack_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t stack_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The audit line for a decision, and nothing for --learn. */
void stack_audit_line(struct stack *s, const char *proto, const char *direction, const struct policy_addr *dst,
		   uint16_t port, const char *name, const struct policy_decision *d)
{
	struct audit_event e = {
		.time_ms = stack_wall_ms(),
		.proto = proto,
		.direction = direction,
		.dst = dst,
		.port = port,
		.name = name,
		.allow = d->allow,
		.rule = d->rule,
	};

	audit_write(s->cfg.audit, &e);
}

void stack_audit(struct stack *s, const char *proto, const char *direction, const struct policy_addr *dst,
	      uint16_t port, const char *name, const struct policy_decision *d)
{
	stack_audit_line(s, proto, direction, dst, port, name, d);
	/* --learn wants what the guest tried: its connections, and the
	 * names refused before it could connect. */
	if (s->cfg.learn && (direction ? strcmp(direction, "out") == 0 : !d->allow && !dst))
		audit_learn_add(s->cfg.learn, name, dst, port, d);
}

/* s->tx[0, n) to the guest; partial: a TCP segment of lwIP's whose
 * checksum the peer completes (only with the merger, see stack_create). */
static void send_frame(struct stack *s, size_t n, bool partial)
{
	if (!s->gso) {
		s->cfg.output(s->cfg.output_ctx, s->tx, n);
		return;
	}
	if (partial)
		gso_add_partial(s->gso, s->tx, n);
	else
		gso_add(s->gso, s->tx, n);
	if (!s->round)
		gso_flush(s->gso); /* lwIP's timers: nobody would flush later */
}

void stack_send_frame(struct stack *s, size_t n)
{
	send_frame(s, n, false);
}

static void gso_out(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len)
{
	struct stack *s = ctx;

	s->cfg.output_gso(s->cfg.output_ctx, h, frame, len);
}

/* Start and end one call's worth of output (see struct stack). */
static void round_begin(struct stack *s)
{
	s->round = true;
}

static void round_end(struct stack *s)
{
	if (s->gso)
		gso_flush(s->gso);
	s->round = false;
}

void stack_send_rst(struct stack *s, const struct frame_pkt *seg)
{
	size_t n;

	if (frame_build_tcp_rst(seg, s->tx, sizeof s->tx, &n) == 0)
		stack_send_frame(s, n);
}

/* ---- lwIP's side of the link ---- */

/* The Ethernet header of s->tx: from the gateway to the guest, type. */
static void eth_to_guest(struct stack *s, uint16_t type)
{
	memcpy(s->tx, s->guest_mac, 6);
	memcpy(s->tx + 6, gw_mac, 6);
	frame_put16(s->tx + 12, type);
}

static err_t netif_out4(struct netif *netif, struct pbuf *p, const ip4_addr_t *dst)
{
	struct stack *s = netif->state;

	/* Everything lwIP sends goes to the guest, whatever the next hop. */
	if (p->tot_len > FRAME_MTU)
		return ERR_OK;
	if (!s->have_mac) {
		/* A forwarded connection before the guest sent anything: ask,
		 * and let TCP's retransmission carry the packet once the
		 * guest's ARP reply taught us its MAC. */
		size_t n;

		if (frame_build_arp_request(gw_mac, gw_ip, guest_ip, s->tx, sizeof s->tx, &n) == 0)
			stack_send_frame(s, n);
		return ERR_OK;
	}
	eth_to_guest(s, FRAME_ETH_IPV4);
	if (pbuf_copy_partial(p, s->tx + FRAME_ETH_HLEN, p->tot_len, 0) != p->tot_len)
		return ERR_OK;
	/* With the merger lwIP computes no TCP checksum (stack_create): the
	 * frame leaves with the pseudo-header's sum and NEEDS_CSUM, which
	 * the guest's kernel trusts or completes as from any NIC. */
	send_frame(s, FRAME_ETH_HLEN + p->tot_len,
		   s->gso && gso_tcp_partial(s->tx, FRAME_ETH_HLEN + p->tot_len) == 0);
	return ERR_OK;
}

static err_t netif_out6(struct netif *netif, struct pbuf *p, const ip6_addr_t *dst)
{
	struct stack *s = netif->state;
	uint8_t *ip = s->tx + FRAME_ETH_HLEN;

	/* TCP only: lwIP's own IPv6 chatter (MLD, neighbor discovery) has
	 * no business on this link, whose neighbors kbox answers itself.
	 * The guest's MAC is known from the packets that opened the
	 * connection (no forwarded port dials the guest over IPv6). */
	if (p->tot_len > FRAME_MTU || p->tot_len < FRAME_IP6_HLEN + 20 || !s->have_mac)
		return ERR_OK;
	if (pbuf_copy_partial(p, ip, p->tot_len, 0) != p->tot_len || ip[6] != FRAME_IP_TCP)
		return ERR_OK;
	eth_to_guest(s, FRAME_ETH_IPV6);
	/* With the merger lwIP left the checksum out (stack_create), and the
	 * merger takes IPv4 only: complete it here. */
	if (s->gso)
		frame_fill_tcp6_csum(ip, p->tot_len);
	send_frame(s, FRAME_ETH_HLEN + p->tot_len, false);
	return ERR_OK;
}

static err_t netif_link_out(struct netif *netif, struct pbuf *p)
{
	return ERR_OK; /* netif_out4 writes frames itself; nothing uses this */
}

static err_t netif_in(struct pbuf *p, struct netif *netif)
{
	pbuf_free(p); /* frames come through stack_input, never through lwIP's input */
	return ERR_OK;
}

static err_t netif_setup(struct netif *netif)
{
	netif->name[0] = 'k';
	netif->name[1] = 'b';
	netif->output = netif_out4;
	netif->output_ip6 = netif_out6;
	netif->linkoutput = netif_link_out;
	netif->mtu = FRAME_MTU;
#if LWIP_ND6_ALLOW_RA_UPDATES
	netif->mtu6 = FRAME_MTU;
#endif
	netif->hwaddr_len = 6;
	memcpy(netif->hwaddr, gw_mac, 6);
	netif->flags = NETIF_FLAG_LINK_UP;
	return ERR_OK;
}

/* ---- ARP, ICMP, UDP ---- */

/* Whether p's destination is a broadcast or multicast address. */
static bool ip_group(const struct frame_pkt *p)
{
	static const uint8_t all[4] = {255, 255, 255, 255};
	const uint8_t *dst = p->dst;

	if (p->ipv == 6)
		return dst[0] == 0xff;
	return dst[0] >= 224 || memcmp(dst, all, 4) == 0 || (memcmp(dst, gw_ip, 3) == 0 && dst[3] == 255);
}

/* UDP other than DNS to the gateway: port unreachable, so the sender
 * (QUIC above all) gives up at once instead of timing out. */
static void refuse_udp(struct stack *s, const struct frame_pkt *p)
{
	static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	struct policy_addr dst = {.family = p->ipv};
	struct audit_event e = {
		.proto = "udp",
		.dst = &dst,
		.port = p->dport,
		.allow = false,
		.rule = "udp:only-dns",
	};
	size_t n;

	s->st.udp_refused++;
	/* No ICMP errors about broadcast or multicast (RFC 1122 3.2.2). */
	if (memcmp(p->eth_dst, bcast, 6) != 0 && !ip_group(p) &&
	    frame_build_port_unreach(p, s->tx, sizeof s->tx, &n) == 0)
		stack_send_frame(s, n);
	if (!stack_bucket_take(&s->udp_log, stack_now_ms())) {
		s->udp_unlogged++;
		return;
	}
	memcpy(dst.b, p->dst, frame_addr_len(p));
	e.time_ms = stack_wall_ms();
	e.suppressed = s->udp_unlogged;
	audit_write(s->cfg.audit, &e);
	s->udp_unlogged = 0;
}

static void handle_arp(struct stack *s, const struct frame_pkt *p)
{
	size_t n;

	if (memcmp(p->arp_spa, guest_ip, 4) != 0)
		return;
	if (p->arp_op == FRAME_ARP_REPLY) {
		/* The answer to our question in netif_out4. */
		memcpy(s->guest_mac, p->arp_sha, 6);
		s->have_mac = true;
		return;
	}
	if (p->arp_op != FRAME_ARP_REQUEST)
		return;
	memcpy(s->guest_mac, p->arp_sha, 6);
	s->have_mac = true;
	/* Every other address of the subnet is "on the link" as far as the
	 * guest knows; answering makes a connection to one fail fast with a
	 * reset instead of an ARP timeout. */
	if (memcmp(p->arp_tpa, gw_ip, 3) != 0 || memcmp(p->arp_tpa, guest_ip, 4) == 0)
		return;
	if (frame_build_arp_reply(p, gw_mac, s->tx, sizeof s->tx, &n) == 0)
		stack_send_frame(s, n);
}

/* A neighbor solicitation: answered for the gateway's address (the
 * guest's next hop) and the rest of the prefix, ignored otherwise (the
 * guest's own duplicate address detection above all: nobody else is on
 * the link). */
static void handle_ns(struct stack *s, const struct frame_pkt *p)
{
	size_t n;

	/* As with ARP: every other address of the prefix is "on the link"
	 * too, so that a connection to one is reset at once rather than
	 * waiting for neighbor discovery to give up. */
	if (memcmp(p->nd_target, gw_ip6, STACK_PREFIX6_LEN / 8) != 0 || memcmp(p->nd_target, guest_ip6, 16) == 0 ||
	    (p->eth_src[0] & 1))
		return;
	if (memcmp(p->src, guest_ip6, 16) == 0) {
		memcpy(s->guest_mac, p->nd_has_sll ? p->nd_sll : p->eth_src, 6);
		s->have_mac = true;
	}
	if (frame_build_na(p, gw_mac, s->tx, sizeof s->tx, &n) == 0)
		stack_send_frame(s, n);
}

/* An IPv6 packet (p parsed): neighbor discovery, then what the guest's
 * address sends to the gateway's MAC, as for IPv4.  Returns false to
 * count it dropped. */
static bool input6(struct stack *s, const struct frame_pkt *p)
{
	size_t n;

	if (p->proto == FRAME_IP_ICMP6 && p->icmp_type == FRAME_ICMP6_NS) {
		handle_ns(s, p);
		return true;
	}
	if (memcmp(p->src, guest_ip6, 16) != 0 || memcmp(p->eth_dst, gw_mac, 6) != 0 || (p->eth_src[0] & 1))
		return false;
	memcpy(s->guest_mac, p->eth_src, 6);
	s->have_mac = true;
	switch (p->proto) {
	case FRAME_IP_TCP:
		stack_tcp_input(s, p);
		return true;
	case FRAME_IP_UDP:
		refuse_udp(s, p);
		return true;
	case FRAME_IP_ICMP6:
		if (memcmp(p->dst, gw_ip6, 16) == 0 && p->icmp_type == FRAME_ICMP6_ECHO &&
		    frame_build_echo_reply(p, s->tx, sizeof s->tx, &n) == 0) {
			stack_send_frame(s, n);
			return true;
		}
		return false;
	default:
		return false;
	}
}

void stack_input(struct stack *s, const uint8_t *frame, size_t len)
{
	static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	struct frame_pkt p;
	size_t n;

	LOCK_TCPIP_CORE();
	round_begin(s);
	s->st.frames_in++;
	if (frame_parse(frame, len, &p) < 0)
		goto drop;
	if (p.ethertype == FRAME_ETH_ARP) {
		handle_arp(s, &p);
		goto out;
	}
	if (p.ipv == 6) {
		if (input6(s, &p))
			goto out;
		goto drop;
	}
	/* IPv4 only from the guest's address, only to the gateway's MAC. */
	if (memcmp(p.src, guest_ip, 4) != 0 || (memcmp(p.eth_dst, gw_mac, 6) != 0 && memcmp(p.eth_dst, bcast, 6) != 0))
		goto drop;
	if (p.eth_src[0] & 1)
		goto drop;
	memcpy(s->guest_mac, p.eth_src, 6);
	s->have_mac = true;
	switch (p.proto) {
	case FRAME_IP_TCP:
		stack_tcp_input(s, &p);
		goto out;
	case FRAME_IP_UDP:
		if (memcmp(p.dst, gw_ip, 4) == 0 && p.dport == STACK_DNS_PORT) {
			stack_dns_input(s, &p);
			goto out;
		}
		refuse_udp(s, &p);
		goto out;
	case FRAME_IP_ICMP:
		if (memcmp(p.dst, gw_ip, 4) == 0 && p.icmp_type == FRAME_ICMP_ECHO &&
		    frame_build_echo_reply(&p, s->tx, sizeof s->tx, &n) == 0) {
			stack_send_frame(s, n);
			goto out;
		}
		goto drop;
	default:
		goto drop;
	}
drop:
	s->st.frames_dropped++;
out:
	round_end(s);
	UNLOCK_TCPIP_CORE();
}

/* ---- host side ---- */

static void check_timeouts(struct stack *s)
{
	stack_fwd_resume(s);
	stack_tcp_timeouts(s, stack_now_ms());
}

void stack_dispatch(struct stack *s)
{
	struct epoll_event ev[64];
	int n, i;

	n = epoll_wait(s->epfd, ev, 64, 0);
	if (n <= 0)
		return;
	LOCK_TCPIP_CORE();
	round_begin(s);
	for (i = 0; i < n; i++) {
		struct flowtab_entry *e;

		if (ev[i].data.u64 == 0) {
			uint64_t ticks;

			if (read(s->tfd, &ticks, sizeof ticks) < 0) {
				/* spurious: nothing to do */
			}
			check_timeouts(s);
			continue;
		}
		if (ev[i].data.u64 == DNS_TAG) {
			stack_dns_collect(s);
			continue;
		}
		if (ev[i].data.u64 >> 32 == 0) {
			if (ev[i].data.u64 <= s->nfwd)
				stack_fwd_accept(s, &s->fwd[ev[i].data.u64 - 1]);
			continue;
		}
		e = flowtab_from_handle(&s->ft, ev[i].data.u64);
		if (e)
			stack_flow_event((struct flow *)((char *)e - offsetof(struct flow, ft)), ev[i].events);
	}
	round_end(s);
	UNLOCK_TCPIP_CORE();
}

int stack_fd(const struct stack *s)
{
	return s->epfd;
}

void stack_get_stats(struct stack *s, struct stack_stats *st)
{
	LOCK_TCPIP_CORE();
	*st = s->st;
	st->flows = s->ft.n;
	st->buffered = s->nb.used;
	st->buffered_peak = s->nb.peak;
	UNLOCK_TCPIP_CORE();
}

int stack_create(const struct stack_config *cfg, struct stack **out)
{
	struct itimerspec its = {.it_interval = {.tv_sec = 1}, .it_value = {.tv_sec = 1}};
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
	struct epoll_event dev = {.events = EPOLLIN, .data.u64 = DNS_TAG};
	ip4_addr_t ip, mask, gw;
	uint64_t seed;
	struct stack *s;
	int r;

	if (!cfg || !cfg->policy || !cfg->audit || (!cfg->output && !cfg->output_gso))
		return -EINVAL;
	pthread_mutex_lock(&stack_single);
	if (stack_exists) {
		pthread_mutex_unlock(&stack_single);
		return -EBUSY;
	}
	s = calloc(1, sizeof *s);
	if (!s) {
		pthread_mutex_unlock(&stack_single);
		return -ENOMEM;
	}
	s->cfg = *cfg;
	if (cfg->guest_mac) {
		memcpy(s->guest_mac, cfg->guest_mac, 6);
		s->have_mac = true;
	}
	s->cfg.guest_mac = NULL; /* copied: the caller's buffer need not live on */
	s->judge_stated = policy_judges_stated_names(cfg->policy);
	budget_init(&s->nb, s->cfg.buf_cap);
	if (!s->cfg.connect_timeout_ms)
		s->cfg.connect_timeout_ms = STACK_CONNECT_TIMEOUT_MS;
	s->epfd = s->tfd = s->efd = -1;
	stack_bucket_init(&s->udp_log, STACK_UDP_LOG_PER_SEC, STACK_UDP_LOG_BURST, stack_now_ms());
	if (cfg->dns_per_sec)
		stack_bucket_init(&s->dns_rate, cfg->dns_per_sec, 2 * cfg->dns_per_sec, stack_now_ms());
	else
		stack_bucket_init(&s->dns_rate, STACK_DNS_PER_SEC, STACK_DNS_BURST, stack_now_ms());
	stack_bucket_init(&s->dns_rate_log, STACK_UDP_LOG_PER_SEC, STACK_UDP_LOG_BURST, stack_now_ms());
	seed = stack_now_ms() ^ (uint64_t)(uintptr_t)s;
	r = -ENOMEM;
	s->listen = calloc(65536, sizeof *s->listen);
	if (!s->listen || flowtab_init(&s->ft, STACK_MAX_FLOWS, seed) < 0 || dns_memo_init(&s->memo, MEMO_CAP) < 0)
		goto fail;
	if (cfg->output_gso) {
		if (!(s->gso = malloc(sizeof *s->gso)))
			goto fail;
		gso_init(s->gso, GSO_FRAME_MAX, gso_out, s);
	}
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	s->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->epfd < 0 || s->tfd < 0 || s->efd < 0 || timerfd_settime(s->tfd, 0, &its, NULL) < 0 ||
	    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->tfd, &ev) < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->efd, &dev) < 0) {
		r = -errno;
		goto fail;
	}
	pthread_once(&lwip_once, lwip_start);
	memcpy(&ip.addr, gw_ip, 4);
	ip4_addr_set_u32(&mask, PP_HTONL(0xffffffffu << (32 - STACK_PREFIX_LEN)));
	ip4_addr_set_zero(&gw);
	LOCK_TCPIP_CORE();
	if (!netif_add(&s->netif, &ip, &mask, &gw, s, netif_setup, netif_in)) {
		UNLOCK_TCPIP_CORE();
		r = -EIO;
		goto fail;
	}
	s->netif_added = true;
	/* A peer that takes merged frames takes partial checksums too
	 * (virtio-net's GUEST_CSUM, a TAP with a virtio_net_hdr; virtio-net
	 * completes them for a driver without): lwIP's checksum over every
	 * byte it sends is left out. */
	if (s->gso)
		NETIF_SET_CHECKSUM_CTRL(&s->netif, NETIF_CHECKSUM_ENABLE_ALL & ~NETIF_CHECKSUM_GEN_TCP);
	netif_set_default(&s->netif);
	netif_set_up(&s->netif);
	UNLOCK_TCPIP_CORE();
	stack_exists = true;
	pthread_mutex_unlock(&stack_single);
	*out = s;
	return 0;
fail:
	if (s->epfd >= 0)
		close(s->epfd);
	if (s->tfd >= 0)
		close(s->tfd);
	if (s->efd >= 0)
		close(s->efd);
	dns_memo_free(&s->memo);
	flowtab_free(&s->ft);
	free(s->listen);
	free(s->gso);
	free(s);
	pthread_mutex_unlock(&stack_single);
	return r;
}

void stack_destroy(struct stack *s)
{
	size_t i;

	if (!s)
		return;
	stack_dns_drop_all(s);
	LOCK_TCPIP_CORE();
	stack_flow_abort_all(s);
	for (i = 0; i < 65536; i++)
		if (s->listen[i])
			tcp_close(s->listen[i]); /* never fails for a listener */
	for (i = 0; i < s->nfwd; i++)
		close(s->fwd[i].fd);
	if (s->netif_added)
		netif_remove(&s->netif);
	UNLOCK_TCPIP_CORE();
	close(s->epfd);
	close(s->tfd);
	close(s->efd);
	dns_memo_free(&s->memo);
	flowtab_free(&s->ft);
	free(s->listen);
	free(s->gso);
	free(s);
	pthread_mutex_lock(&stack_single);
	stack_exists = false;
	pthread_mutex_unlock(&stack_single);
}
