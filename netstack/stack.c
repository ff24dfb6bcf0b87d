/* The lwIP glue and the TCP proxy (see stack.h and docs/network.md).
 *
 * Debian's lwIP has no hook to accept any destination, so kbox parses
 * the guest's frames itself (lib/frame.c) and hands TCP segments
 * straight to tcp_input with lwIP's ip_data filled in as ip4_input would.
 * Listening pcbs bound to IP_ANY, one per destination port, turn a SYN
 * into a pcb whose local address is the one the guest dialled.  A SYN
 * that opens a new connection is not given to lwIP until the policy
 * allowed it and the host's connect() succeeded, so the guest's SYN-ACK
 * means "connected".  ARP, ICMP echo and DNS never reach lwIP.
 *
 * Locking: every entry point takes lwIP's core lock; lwIP's own thread
 * holds it when its timers call back into us.  So all of struct ns is
 * guarded by that lock.  epoll data holds flow handles, not pointers: a
 * flow may be freed by lwIP's thread between epoll_wait and the lock.
 *
 * DNS questions for the host resolver go to a queue served by a pool of
 * threads (rp below) that never take the core lock; an answer comes back
 * on the stack's done list and its eventfd, and ns_dispatch sends the
 * reply under the lock. */
#include "netstack/stack.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "lwip/ip.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/tcp.h"
#include "lwip/tcpip.h"

#include "lib/frame.h"
#include "netstack/flowtab.h"
#include "netstack/intercept.h"
#include "netstack/peek.h"

#define UP_CAP (2u * TCP_WND) /* guest bytes the host socket has not taken yet */
#define HOST_READ_MAX 0xffffu /* tcp_write takes a u16 length */
#define MEMO_CAP 4096u
#define TIME_WAIT_MAX 64u /* lwIP's TIME-WAIT pcbs kept; the oldest go beyond */
#define DNS_TAG ((uint64_t)NS_MAX_FORWARDS + 1) /* epoll data of the resolver's eventfd */
/* lwIP's send buffer per connection when the guest takes merged frames:
 * the packaged TCP_SND_BUF (64 KiB) is one merged frame, so the sender
 * would stop after each until the guest's ACK came back.  snd_buf is a
 * 32-bit field (window scaling is on) that lwIP only ever adds ACKed
 * bytes to and subtracts written ones from, so a larger start holds; the
 * real bound is TCP_SND_QUEUELEN segments, kept below by guest_room. */
#define SND_BUF_GSO ((tcpwnd_size_t)(TCP_SND_QUEUELEN - 4) * TCP_MSS)

static const uint8_t gw_ip[4] = NS_GATEWAY_IP;
static const uint8_t guest_ip[4] = NS_GUEST_IP;
static const uint8_t gw_mac[6] = NS_GATEWAY_MAC;

enum flow_state {
	FL_CONNECTING,       /* outgoing: the host connect() is under way, the guest's SYN held */
	FL_GUEST_CONNECTING, /* forwarded: our SYN is on its way to the guest */
	FL_OPEN,             /* bytes flow both ways */
};

struct flow {
	struct ft_entry ft;
	struct ns *s;
	enum flow_state state;
	bool inbound;         /* from a forwarded port */
	/* For the close line of the audit log. */
	struct pol_addr dst;  /* outgoing: the address dialled; forwarded: the guest's */
	uint16_t dport;
	char name[POL_NAME_MAX + 1]; /* "" without a name */
	uint64_t opened_ms, bytes_up, bytes_down;
	int err; /* why it failed (an errno), for the close line; 0: it did not */
	int fd;               /* host socket */
	struct tcp_pcb *pcb;  /* NULL until the SYN went to lwIP, and once lwIP freed it */
	uint32_t ev;          /* epoll events registered; 0: not registered */
	uint64_t deadline_ms; /* FL_CONNECTING */
	uint8_t *syn;         /* the guest's SYN (IPv4 packet) while connecting */
	size_t syn_len;
	struct fr_pkt syn_pkt; /* its parsed fields, pointers cleared, to answer with a reset */
	/* guest -> host */
	uint8_t *up;
	size_t up_off, up_len;
	bool guest_fin, host_shut;
	/* host -> guest */
	uint8_t *down; /* read from the host, refused by tcp_write */
	size_t down_len;
	bool reading, host_eof, fin_sent;
	/* TLS interception (netstack/intercept.h), outgoing flows only, until
	 * it splices: then f->up holds guest ciphertext it has not taken
	 * and f->down (IC_DOWN_CAP) upstream ciphertext it has not taken. */
	struct icpt *ic;
	bool ic_guest_told, ic_host_told;
	/* The names the client states (netstack/peek.h) are still to be
	 * judged: its bytes wait in f->up, none go upstream, until they are
	 * (pol_check_stated against first, the decision at the SYN). */
	bool peek;
	struct pol_decision first;
};

#define IC_DOWN_CAP 16384u

/* A token bucket: rate tokens a second, at most burst saved up.  Kept
 * in milli-tokens so that integer arithmetic is exact enough. */
struct bucket {
	uint64_t mtokens, last_ms;
	unsigned rate, burst;
};

static void bucket_init(struct bucket *b, unsigned rate, unsigned burst, uint64_t now)
{
	b->rate = rate;
	b->burst = burst;
	b->mtokens = (uint64_t)burst * 1000;
	b->last_ms = now;
}

/* Take one token if there is one. */
static bool bucket_take(struct bucket *b, uint64_t now)
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

/* A forwarded port's listening socket. */
struct fwd {
	int fd;
	bool paused; /* out of the epoll set after running out of descriptors */
	struct ns_forward fw;
	char label[96]; /* the audit log's rule: "forward:ADDR:HOSTPORT:GUESTPORT" */
};

/* A question waiting for the host resolver, with what its reply needs. */
struct dq {
	struct dq *next;
	struct ns *s;
	struct dns_query q;
	uint8_t qmsg[DNS_MAX_MSG]; /* the query, up to the end of its question */
	uint8_t mac[6];            /* the guest's, and its port */
	uint16_t sport;
	char norm[POL_NAME_MAX + 1];
	/* the resolver's answer */
	int rc;
	size_t n;
	struct dns_rr rr[DNS_MAX_ANSWERS];
};

struct ns {
	struct ns_config cfg;
	struct fwd fwd[NS_MAX_FORWARDS];
	size_t nfwd;
	struct netif netif;
	bool netif_added;
	struct ft ft;
	int epfd, tfd;
	uint8_t guest_mac[6];
	bool have_mac;
	struct dns_memo memo;
	struct ns_stats st;
	struct tcp_pcb **listen; /* by destination port */
	struct bucket udp_log;      /* audit lines for refused UDP */
	struct bucket dns_rate;     /* questions that need the resolver */
	struct bucket dns_rate_log; /* audit lines for questions refused by dns_rate */
	uint64_t udp_unlogged, dns_unlogged;
	int efd;             /* the resolver threads' "answers are in" */
	struct dq *dns_done; /* answered, not replied yet (guarded by rp.m) */
	unsigned dns_running; /* resolver calls under way (guarded by rp.m) */
	uint8_t tx[FR_FRAME_MAX];
	uint8_t rx[HOST_READ_MAX];
	/* cfg.output_gso: frames go through the merger; while a call into
	 * the stack runs (round) they may wait in it, and the call flushes
	 * it before letting go of the lock. */
	struct gso *gso;
	bool round;
	bool judge_stated; /* pol_judges_stated_names: new flows start with peek */
};

static pthread_once_t lwip_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t ns_single = PTHREAD_MUTEX_INITIALIZER;
static bool ns_exists;

static void lwip_start(void)
{
	tcpip_init(NULL, NULL);
}

/* The resolver threads, process-wide like lwIP: they outlive any one
 * stack.  rp.m guards the queue, the thread count and every stack's
 * dns_done and dns_running; it is never held while the core lock is
 * taken. */
static struct {
	pthread_mutex_t m;
	pthread_cond_t work, idle;
	struct dq *head, *tail;
	unsigned threads;
} rp = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0};

static void *rp_worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&rp.m);
	for (;;) {
		struct dq *j;
		struct ns *s;
		uint64_t one = 1;

		while (!rp.head)
			pthread_cond_wait(&rp.work, &rp.m);
		j = rp.head;
		rp.head = j->next;
		if (!rp.head)
			rp.tail = NULL;
		s = j->s;
		s->dns_running++; /* ns_destroy waits for it: s and its cfg stay */
		pthread_mutex_unlock(&rp.m);
		j->n = 0;
		j->rc = s->cfg.resolve(s->cfg.resolve_ctx, j->norm, j->q.qtype, j->rr, DNS_MAX_ANSWERS, &j->n);
		pthread_mutex_lock(&rp.m);
		j->next = s->dns_done;
		s->dns_done = j;
		if (write(s->efd, &one, sizeof one) < 0) {
			/* the counter is saturated: the fd is readable anyway */
		}
		if (--s->dns_running == 0)
			pthread_cond_broadcast(&rp.idle);
	}
	return NULL;
}

/* Start the resolver threads unless they run: 0, or -EAGAIN if none
 * could be started (tried again on the next question).  Started by the
 * first question rather than by ns_create, so that they are children of
 * a thread that asks (kbox's device or vCPU thread) and inherit its
 * lock-down, Landlock included; the seccomp allowlist lets a thread make
 * threads. */
static int rp_ensure(void)
{
	sigset_t all, old;
	int r;

	pthread_mutex_lock(&rp.m);
	if (rp.threads == 0) {
		/* Signals are for the threads that wait for them, never these;
		 * but not the ones a fault raises in the thread itself (SIGSYS
		 * is how the lock-down reports a refused call: blocked, the
		 * kernel would kill kbox without a word). */
		sigfillset(&all);
		sigdelset(&all, SIGSYS);
		sigdelset(&all, SIGSEGV);
		sigdelset(&all, SIGBUS);
		sigdelset(&all, SIGFPE);
		sigdelset(&all, SIGILL);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		while (rp.threads < NS_DNS_WORKERS) {
			pthread_t t;

			if (pthread_create(&t, NULL, rp_worker, NULL) != 0)
				break;
			pthread_detach(t);
			rp.threads++;
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	r = rp.threads ? 0 : -EAGAIN;
	pthread_mutex_unlock(&rp.m);
	return r;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The audit line for a decision, and nothing for --learn. */
static void audit_line(struct ns *s, const char *proto, const char *direction, const struct pol_addr *dst,
		       uint16_t port, const char *name, const struct pol_decision *d)
{
	struct audit_event e = {
		.time_ms = wall_ms(),
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

static void audit(struct ns *s, const char *proto, const char *direction, const struct pol_addr *dst,
		  uint16_t port, const char *name, const struct pol_decision *d)
{
	audit_line(s, proto, direction, dst, port, name, d);
	/* --learn wants what the guest tried: its connections, and the
	 * names refused before it could connect. */
	if (s->cfg.learn && (direction ? strcmp(direction, "out") == 0 : !d->allow && !dst))
		audit_learn_add(s->cfg.learn, name, dst, port, d);
}

static void send_frame(struct ns *s, size_t n)
{
	if (!s->gso) {
		s->cfg.output(s->cfg.output_ctx, s->tx, n);
		return;
	}
	gso_add(s->gso, s->tx, n);
	if (!s->round)
		gso_flush(s->gso); /* lwIP's timers: nobody would flush later */
}

static void gso_out(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len)
{
	struct ns *s = ctx;

	s->cfg.output_gso(s->cfg.output_ctx, h, frame, len);
}

/* Start and end one call's worth of output (see struct ns). */
static void round_begin(struct ns *s)
{
	s->round = true;
}

static void round_end(struct ns *s)
{
	if (s->gso)
		gso_flush(s->gso);
	s->round = false;
}

static void send_rst(struct ns *s, const struct fr_pkt *seg)
{
	size_t n;

	if (fr_build_tcp_rst(seg, s->tx, sizeof s->tx, &n) == 0)
		send_frame(s, n);
}

/* ---- lwIP's side of the link ---- */

static err_t netif_out4(struct netif *netif, struct pbuf *p, const ip4_addr_t *dst)
{
	struct ns *s = netif->state;

	/* Everything lwIP sends goes to the guest, whatever the next hop. */
	if (p->tot_len > FR_MTU)
		return ERR_OK;
	if (!s->have_mac) {
		/* A forwarded connection before the guest sent anything: ask,
		 * and let TCP's retransmission carry the packet once the
		 * guest's ARP reply taught us its MAC. */
		size_t n;

		if (fr_build_arp_request(gw_mac, gw_ip, guest_ip, s->tx, sizeof s->tx, &n) == 0)
			send_frame(s, n);
		return ERR_OK;
	}
	memcpy(s->tx, s->guest_mac, 6);
	memcpy(s->tx + 6, gw_mac, 6);
	s->tx[12] = FR_ETH_IPV4 >> 8;
	s->tx[13] = FR_ETH_IPV4 & 0xff;
	if (pbuf_copy_partial(p, s->tx + FR_ETH_HLEN, p->tot_len, 0) != p->tot_len)
		return ERR_OK;
	send_frame(s, FR_ETH_HLEN + p->tot_len);
	return ERR_OK;
}

static err_t netif_out6(struct netif *netif, struct pbuf *p, const ip6_addr_t *dst)
{
	return ERR_OK; /* IPv6 is not offered to the guest yet */
}

static err_t netif_link_out(struct netif *netif, struct pbuf *p)
{
	return ERR_OK; /* netif_out4 writes frames itself; nothing uses this */
}

static err_t netif_in(struct pbuf *p, struct netif *netif)
{
	pbuf_free(p); /* frames come through ns_input, never through lwIP's input */
	return ERR_OK;
}

static err_t netif_setup(struct netif *netif)
{
	netif->name[0] = 'k';
	netif->name[1] = 'b';
	netif->output = netif_out4;
	netif->output_ip6 = netif_out6;
	netif->linkoutput = netif_link_out;
	netif->mtu = FR_MTU;
	netif->hwaddr_len = 6;
	memcpy(netif->hwaddr, gw_mac, 6);
	netif->flags = NETIF_FLAG_LINK_UP;
	return ERR_OK;
}

/* Give the IPv4 packet ip[0, len) (already validated, carrying TCP) to
 * lwIP's TCP input as ip4_input would after accepting it. */
static void feed_tcp(struct ns *s, const uint8_t *ip, size_t len)
{
	size_t hlen = (size_t)(ip[0] & 0xf) * 4;
	struct pbuf *p = pbuf_alloc(PBUF_RAW, (u16_t)len, PBUF_RAM);
	ip4_addr_t a;

	if (!p)
		return;
	memcpy(p->payload, ip, len);
	ip_data.current_netif = &s->netif;
	ip_data.current_input_netif = &s->netif;
	ip_data.current_ip4_header = p->payload;
	ip_data.current_ip6_header = NULL;
	ip_data.current_ip_header_tot_len = (u16_t)hlen;
	memcpy(&a.addr, ip + 12, 4);
	ip_addr_copy_from_ip4(ip_data.current_iphdr_src, a);
	memcpy(&a.addr, ip + 16, 4);
	ip_addr_copy_from_ip4(ip_data.current_iphdr_dest, a);
	if (pbuf_remove_header(p, hlen) == 0)
		tcp_input(p, &s->netif);
	else
		pbuf_free(p);
	ip_data.current_netif = NULL;
	ip_data.current_input_netif = NULL;
	ip_data.current_ip4_header = NULL;
	ip_data.current_ip_header_tot_len = 0;
	ip_addr_set_zero(&ip_data.current_iphdr_src);
	ip_addr_set_zero(&ip_data.current_iphdr_dest);
}

/* ---- flows ---- */

static void flow_events(struct flow *f)
{
	uint32_t want = 0;
	struct epoll_event ev;
	int op;

	if (f->fd < 0)
		return;
	if (f->ic && f->state == FL_OPEN) {
		if (icpt_want(f->ic) & MITM_WANT_UP_OUT)
			want |= EPOLLOUT;
		if (icpt_upstream_direct(f->ic) ? f->reading : !f->host_eof && f->down_len < IC_DOWN_CAP)
			want |= EPOLLIN;
	} else {
		if (f->state == FL_CONNECTING || (f->up_len > 0 && !f->peek))
			want |= EPOLLOUT;
		if (f->state == FL_OPEN && f->reading)
			want |= EPOLLIN;
	}
	if (want == f->ev)
		return;
	/* With no interest the socket leaves the set altogether: epoll
	 * reports EPOLLHUP regardless, which would spin a paused flow. */
	if (want == 0) {
		epoll_ctl(f->s->epfd, EPOLL_CTL_DEL, f->fd, NULL);
		f->ev = 0;
		return;
	}
	op = f->ev ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
	ev.events = want;
	ev.data.u64 = ft_handle(&f->ft);
	if (epoll_ctl(f->s->epfd, op, f->fd, &ev) == 0)
		f->ev = want;
}

static void flow_detach_pcb(struct flow *f)
{
	if (!f->pcb)
		return;
	tcp_arg(f->pcb, NULL);
	tcp_recv(f->pcb, NULL);
	tcp_sent(f->pcb, NULL);
	tcp_err(f->pcb, NULL);
}

/* Free f; its pcb must be detached or gone.  reset: make the host side
 * see a reset rather than an orderly close. */
static void flow_free(struct flow *f, bool reset)
{
	struct ns *s = f->s;
	struct audit_event e = {
		.time_ms = wall_ms(),
		.proto = "tcp",
		.direction = f->inbound ? "in" : "out",
		.dst = &f->dst,
		.port = f->dport,
		.name = f->name[0] ? f->name : NULL,
		.allow = true,
		.close = true,
		.bytes_up = f->bytes_up,
		.bytes_down = f->bytes_down,
		.duration_ms = now_ms() - f->opened_ms,
		.error = f->err ? strerrorname_np(f->err) : NULL,
	};

	if (f->err && !e.error)
		e.error = "error";
	audit_write(s->cfg.audit, &e);
	ft_remove(&s->ft, &f->ft);
	if (f->fd >= 0) {
		if (reset) {
			struct linger lg = {.l_onoff = 1, .l_linger = 0};

			setsockopt(f->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		}
		close(f->fd); /* also leaves the epoll set */
	}
	icpt_free(f->ic);
	free(f->syn);
	free(f->up);
	free(f->down);
	free(f);
	s->st.flows = s->ft.n;
}

/* Reset both sides and free f.  Safe inside f's own lwIP callbacks as
 * long as they then return ERR_ABRT. */
static void flow_abort(struct flow *f)
{
	if (f->pcb) {
		flow_detach_pcb(f);
		tcp_abort(f->pcb);
		f->pcb = NULL;
	}
	flow_free(f, true);
}

/* Close f if both directions are finished. */
static void flow_maybe_done(struct flow *f)
{
	if (!(f->guest_fin && f->host_shut && f->host_eof && f->fin_sent))
		return;
	if (f->pcb) {
		flow_detach_pcb(f);
		if (tcp_close(f->pcb) != ERR_OK)
			tcp_abort(f->pcb);
		f->pcb = NULL;
	}
	flow_free(f, false);
}

static void recved(struct flow *f, size_t n)
{
	f->s->st.bytes_to_host += n;
	f->bytes_up += n;
	while (f->pcb && n > 0) {
		u16_t k = n > 0xffff ? 0xffff : (u16_t)n;

		tcp_recved(f->pcb, k);
		n -= k;
	}
}

/* Send the buffered guest bytes to the host.  0, or -1 after the flow was
 * aborted (f is gone). */
static int flush_up(struct flow *f)
{
	size_t done = 0;

	if (f->peek) {
		/* Held until the names in them are judged (peek_judge). */
		flow_events(f);
		return 0;
	}
	while (f->up_len > 0) {
		ssize_t r = send(f->fd, f->up + f->up_off, f->up_len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (r < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				break;
			flow_abort(f);
			return -1;
		}
		f->up_off += (size_t)r;
		f->up_len -= (size_t)r;
		done += (size_t)r;
	}
	if (f->up_len == 0)
		f->up_off = 0;
	recved(f, done);
	if (f->up_len == 0 && f->guest_fin && !f->host_shut) {
		shutdown(f->fd, SHUT_WR);
		f->host_shut = true;
	}
	flow_events(f);
	return 0;
}


/* Bytes lwIP takes for the guest now: its send buffer, at most
 * HOST_READ_MAX (tcp_write's u16), and 0 when the write's about len/MSS
 * queue entries would not fit (better to wait than meet ERR_MEM). */
static size_t guest_room(const struct flow *f)
{
	size_t max = tcp_sndbuf(f->pcb);

	if (max > HOST_READ_MAX)
		max = HOST_READ_MAX;
	if (tcp_sndqueuelen(f->pcb) + max / TCP_MSS + 2 > TCP_SND_QUEUELEN)
		return 0;
	return max;
}

/* Queue p's bytes behind f->up (made on first use) and free p.  ERR_MEM
 * when they do not fit: lwIP keeps p and offers it again.  ERR_BUF when
 * the buffer cannot be made (p is still the caller's). */
static err_t up_append(struct flow *f, struct pbuf *p)
{
	size_t total = p->tot_len;

	if (!f->up && !(f->up = malloc(UP_CAP)))
		return ERR_BUF;
	if (f->up_off + f->up_len + total > UP_CAP) {
		if (f->up_len + total > UP_CAP)
			return ERR_MEM;
		memmove(f->up, f->up + f->up_off, f->up_len);
		f->up_off = 0;
	}
	pbuf_copy_partial(p, f->up + f->up_off + f->up_len, (u16_t)total, 0);
	f->up_len += total;
	pbuf_free(p);
	return ERR_OK;
}

/* ---- intercepted flows (netstack/intercept.h) ---- */

static void maybe_fin(struct flow *f);

enum { IC_OK = 0, IC_FREED = -1, IC_ABORTED = -2 };

static void ic_event(void *ctx, const struct icpt_event *ev)
{
	struct flow *f = ctx;
	struct audit_event e = {
		.time_ms = wall_ms(),
		.proto = "tls",
		.direction = "out",
		.dst = &f->dst,
		.port = f->dport,
		.name = ev->sni ? ev->sni : (f->name[0] ? f->name : NULL),
		.allow = ev->allow,
		.event = ev->event,
		.secret = ev->secret,
		.where = ev->where,
		.reason = ev->reason,
		.status = ev->status,
	};

	audit_write(f->s->cfg.audit, &e);
	if (strcmp(ev->event, "tls-intercept") == 0)
		f->s->st.tls_intercepted++;
	else if (!ev->allow)
		f->s->st.tls_refused++;
}

/* A pump for f when interception is configured; the names our DNS gave
 * dst (or the host alias) are what the guest's SNI must be. */
static int ic_attach(struct ns *s, struct flow *f, const struct pol_addr *dst)
{
	const char *names[DNS_MEMO_MAX_NAMES];
	size_t n;

	if (memcmp(dst->b, gw_ip, 4) == 0) {
		names[0] = POL_HOST_NAME;
		n = 1;
	} else {
		n = dns_memo_names(&s->memo, dst, now_ms() / 1000, names, DNS_MEMO_MAX_NAMES);
	}
	return icpt_new(s->cfg.icpt, names, n, ic_event, f, &f->ic);
}

/* Move bytes through an intercepted flow until nothing moves.  IC_OK,
 * or IC_FREED / IC_ABORTED when f is gone (its pcb closed or aborted). */
static int ic_pump(struct flow *f)
{
	for (int round = 0; round < 256; round++) {
		bool prog = false;
		const uint8_t *b;
		size_t n, t;

		if (f->up_len > 0 && !f->peek) {
			if (icpt_guest_in(f->ic, f->up + f->up_off, f->up_len, &t) < 0)
				t = f->up_len; /* the engine is closing: drop */
			if (t) {
				f->up_off += t;
				f->up_len -= t;
				if (f->up_len == 0)
					f->up_off = 0;
				recved(f, t);
				prog = true;
			}
		}
		if (f->guest_fin && f->up_len == 0 && !f->ic_guest_told) {
			f->ic_guest_told = true;
			icpt_close_guest(f->ic);
			prog = true;
		}
		if (!icpt_upstream_direct(f->ic)) {
			if (f->down_len > 0) {
				if (icpt_upstream_in(f->ic, f->down, f->down_len, &t) < 0)
					t = f->down_len;
				if (t) {
					memmove(f->down, f->down + t, f->down_len - t);
					f->down_len -= t;
					prog = true;
				}
			}
			if (f->host_eof && f->down_len == 0 && !f->ic_host_told) {
				f->ic_host_told = true;
				icpt_close_upstream(f->ic);
				prog = true;
			}
		}
		b = icpt_upstream_out(f->ic, &n);
		if (b && n > 0 && !f->host_shut) {
			ssize_t r = send(f->fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);

			if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				flow_abort(f);
				return IC_ABORTED;
			}
			if (r > 0) {
				icpt_upstream_out_done(f->ic, (size_t)r);
				prog = true;
			}
		}
		b = icpt_guest_out(f->ic, &n);
		if (b && n > 0 && f->pcb) {
			size_t room = guest_room(f);

			if (n > room)
				n = room;
			if (n > 0) {
				err_t e = tcp_write(f->pcb, b, (u16_t)n, TCP_WRITE_FLAG_COPY);

				if (e == ERR_OK) {
					icpt_guest_out_done(f->ic, n);
					f->s->st.bytes_to_guest += n;
					f->bytes_down += n;
					prog = true;
				} else if (e != ERR_MEM) {
					flow_abort(f);
					return IC_ABORTED;
				}
			}
		}

		unsigned w = icpt_want(f->ic);

		if (w & ICPT_REFUSE) {
			flow_abort(f);
			return IC_ABORTED;
		}
		if (w & ICPT_SPLICE) {
			/* A plain flow from here: f->up holds guest bytes for
			 * the host, f->down is empty (the upstream went straight
			 * to the guest while the first bytes were judged). */
			icpt_free(f->ic);
			f->ic = NULL;
			if (f->pcb)
				tcp_output(f->pcb);
			if (flush_up(f) < 0)
				return IC_ABORTED;
			if (f->down_len == 0 && !f->host_eof)
				f->reading = true;
			maybe_fin(f);
			flow_events(f);
			if (f->guest_fin && f->host_shut && f->host_eof && f->fin_sent) {
				flow_maybe_done(f);
				return IC_FREED;
			}
			return IC_OK;
		}
		if ((w & MITM_DONE) && !(w & (MITM_WANT_GUEST_OUT | MITM_WANT_UP_OUT))) {
			if (f->pcb) {
				tcp_output(f->pcb);
				flow_detach_pcb(f);
				if (tcp_close(f->pcb) != ERR_OK) {
					tcp_abort(f->pcb);
					f->pcb = NULL;
					flow_free(f, true);
					return IC_ABORTED;
				}
				f->pcb = NULL;
			}
			flow_free(f, false);
			return IC_FREED;
		}
		if (!prog)
			break;
	}
	if (f->pcb)
		tcp_output(f->pcb);
	flow_events(f);
	return IC_OK;
}

/* Guest bytes (or its FIN) on an intercepted flow. */
static err_t ic_recv(struct flow *f, struct pbuf *p)
{
	if (!p) {
		f->guest_fin = true;
	} else {
		err_t e = up_append(f, p);

		if (e == ERR_MEM)
			return e;
		if (e != ERR_OK) {
			pbuf_free(p);
			flow_abort(f);
			return ERR_ABRT;
		}
	}
	return ic_pump(f) == IC_ABORTED ? ERR_ABRT : ERR_OK;
}

/* Upstream bytes for an intercepted flow. */
static void ic_read_host(struct flow *f)
{
	if (!f->host_eof && f->down_len < IC_DOWN_CAP) {
		ssize_t r;

		if (!f->down && !(f->down = malloc(IC_DOWN_CAP))) {
			flow_abort(f);
			return;
		}
		r = recv(f->fd, f->down + f->down_len, IC_DOWN_CAP - f->down_len, MSG_DONTWAIT);
		if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			flow_abort(f);
			return;
		}
		if (r == 0)
			f->host_eof = true;
		else if (r > 0)
			f->down_len += (size_t)r;
	}
	ic_pump(f);
}

/* A refusal after the SYN was allowed: the name the client stated (or
 * its unreadable first bytes) decided.  Audited like the SYN's decision;
 * both sides get a reset and the host has seen none of the guest's bytes. */
static void flow_refuse(struct flow *f, const char *name, const struct pol_decision *d)
{
	struct ns *s = f->s;

	audit(s, "tcp", "out", &f->dst, f->dport, name ? name : (f->name[0] ? f->name : NULL), d);
	s->st.tcp_denied++;
	f->err = EACCES;
	flow_abort(f);
}

/* Judge the names in the guest's first bytes (f->up) while f->peek.  0:
 * judged and allowed (f->peek now false), 1: more bytes needed, -1: refused
 * (f is gone). */
static int peek_judge(struct flow *f)
{
	static const struct pol_decision unreadable = {false, POL_WHY_BAD_NAME, "tcp:unreadable-name"};
	struct pk_result res;
	struct pol_decision d;
	int st = pk_parse(f->up ? f->up + f->up_off : NULL, f->up_len, &res);
	size_t i;

	if (st == PK_NEED_MORE) {
		if (!f->guest_fin && f->up_len < PK_MAX)
			return 1;
		/* A client that closes before its first request or hello is
		 * whole names nothing; one that goes on past the bounds is
		 * not judged and not let through. */
		st = f->guest_fin ? PK_NONE : PK_BAD;
	}
	if (st == PK_BAD) {
		flow_refuse(f, NULL, &unreadable);
		return -1;
	}
	for (i = 0; st == PK_NAMES_FOUND && i < res.n; i++) {
		pol_check_stated(f->s->cfg.policy, res.name[i], &f->dst, f->dport, &f->first, &d);
		if (!d.allow) {
			flow_refuse(f, res.name[i], &d);
			return -1;
		}
	}
	f->peek = false;
	return 0;
}

/* Guest bytes (or its FIN) while the names it states are not judged yet:
 * held in f->up; once judged, on as on_recv would have gone. */
static err_t peek_recv(struct flow *f, struct pbuf *p)
{
	int r;

	if (!p) {
		f->guest_fin = true;
	} else {
		err_t e = up_append(f, p);

		if (e == ERR_MEM)
			return e;
		if (e != ERR_OK) {
			pbuf_free(p);
			flow_abort(f);
			return ERR_ABRT;
		}
	}
	r = peek_judge(f);
	if (r < 0)
		return ERR_ABRT;
	if (r > 0)
		return ERR_OK;
	if (f->ic)
		return ic_pump(f) == IC_ABORTED ? ERR_ABRT : ERR_OK;
	if (flush_up(f) == 0)
		flow_maybe_done(f);
	return ERR_OK;
}

static err_t on_recv(void *arg, struct tcp_pcb *pcb, struct pbuf *p, err_t err)
{
	struct flow *f = arg;
	size_t total, sent = 0;
	struct pbuf *q;

	if (!f) {
		if (p)
			pbuf_free(p);
		return ERR_OK;
	}
	if (f->peek)
		return peek_recv(f, p);
	if (f->ic)
		return ic_recv(f, p);
	if (!p) {
		f->guest_fin = true;
		if (flush_up(f) == 0)
			flow_maybe_done(f);
		return ERR_OK;
	}
	total = p->tot_len;
	if (f->up_len > 0)
		return up_append(f, p); /* f->up exists: ERR_OK or ERR_MEM */
	/* Nothing queued: straight from lwIP's buffers to the socket. */
	for (q = p; q; q = q->next) {
		ssize_t r = send(f->fd, q->payload, q->len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (r < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				break;
			pbuf_free(p);
			flow_abort(f);
			return ERR_ABRT;
		}
		sent += (size_t)r;
		if ((size_t)r < q->len)
			break;
	}
	if (sent < total) {
		if (!f->up && !(f->up = malloc(UP_CAP))) {
			pbuf_free(p);
			flow_abort(f);
			return ERR_ABRT;
		}
		pbuf_copy_partial(p, f->up, (u16_t)(total - sent), (u16_t)sent);
		f->up_off = 0;
		f->up_len = total - sent;
	}
	pbuf_free(p);
	recved(f, sent);
	flow_events(f);
	return ERR_OK;
}

/* Send FIN once the host said EOF and everything it sent is queued. */
static void maybe_fin(struct flow *f)
{
	if (f->host_eof && f->down_len == 0 && !f->fin_sent && f->pcb) {
		if (tcp_shutdown(f->pcb, 0, 1) == ERR_OK)
			f->fin_sent = true;
	}
}

/* Queue host bytes for the guest; on ERR_MEM keep them and stop reading
 * until lwIP's send buffer drains.  0, or -1 when f was aborted. */
static int to_guest(struct flow *f, const uint8_t *b, size_t n)
{
	err_t e = tcp_write(f->pcb, b, (u16_t)n, TCP_WRITE_FLAG_COPY);

	if (e == ERR_MEM) {
		if (f->down != b) {
			if (!(f->down = malloc(n))) {
				flow_abort(f);
				return -1;
			}
			memcpy(f->down, b, n);
		}
		f->down_len = n;
		f->reading = false;
		return 0;
	}
	if (e != ERR_OK) {
		flow_abort(f);
		return -1;
	}
	f->s->st.bytes_to_guest += n;
	f->bytes_down += n;
	if (f->down == b) {
		free(f->down);
		f->down = NULL;
		f->down_len = 0;
	}
	return 0;
}

static err_t on_sent(void *arg, struct tcp_pcb *pcb, u16_t len)
{
	struct flow *f = arg;

	if (!f)
		return ERR_OK;
	if (f->ic && !icpt_upstream_direct(f->ic))
		return ic_pump(f) == IC_ABORTED ? ERR_ABRT : ERR_OK;
	if (f->down_len > 0 && to_guest(f, f->down, f->down_len) < 0)
		return ERR_ABRT;
	if (f->down_len == 0 && !f->host_eof)
		f->reading = true;
	maybe_fin(f);
	tcp_output(pcb);
	flow_events(f);
	flow_maybe_done(f);
	return ERR_OK;
}

static void on_err(void *arg, err_t err)
{
	struct flow *f = arg;

	if (!f)
		return;
	f->pcb = NULL; /* lwIP has freed it already */
	if (f->state == FL_GUEST_CONNECTING) {
		f->s->st.fwd_refused++; /* the guest reset our SYN: nothing listens */
		f->err = ECONNREFUSED;
	}
	flow_free(f, true);
}

static err_t on_accept(void *arg, struct tcp_pcb *pcb, err_t err)
{
	/* The flow was attached when the SYN went in (see flow_connected). */
	if (!arg) {
		tcp_abort(pcb);
		return ERR_ABRT;
	}
	return ERR_OK;
}

static void read_host(struct flow *f)
{
	size_t max;
	ssize_t r;

	if (f->ic && !icpt_upstream_direct(f->ic)) {
		ic_read_host(f);
		return;
	}
	if (!f->pcb || f->down_len > 0 || f->host_eof)
		return;
	/* Stop early rather than meet ERR_MEM with bytes already read. */
	max = guest_room(f);
	if (max == 0) {
		f->reading = false;
		flow_events(f);
		return;
	}
	r = recv(f->fd, f->s->rx, max, MSG_DONTWAIT);
	if (r < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return;
		flow_abort(f);
		return;
	}
	/* The server spoke before the client said anything (SSH, SMTP): the
	 * client names nothing kbox reads.  With bytes already held, the
	 * judgement waits for the rest of them. */
	if (r > 0 && f->peek && f->up_len == 0)
		f->peek = false;
	if (r == 0) {
		f->host_eof = true;
		f->reading = false;
		maybe_fin(f);
	} else if (to_guest(f, f->s->rx, (size_t)r) < 0) {
		return;
	}
	if (f->pcb)
		tcp_output(f->pcb);
	if (f->ic) {
		/* The server spoke before the guest's first bytes were
		 * judged: not TLS from a client, so never intercepted. */
		if (r > 0)
			icpt_server_spoke(f->ic);
		ic_pump(f);
		return;
	}
	flow_events(f);
	flow_maybe_done(f);
}

static struct tcp_pcb *listener(struct ns *s, uint16_t port)
{
	struct tcp_pcb *pcb, *l;

	if (s->listen[port])
		return s->listen[port];
	pcb = tcp_new_ip_type(IPADDR_TYPE_V4);
	if (!pcb)
		return NULL;
	ip_set_option(pcb, SOF_REUSEADDR);
	if (tcp_bind(pcb, IP4_ADDR_ANY, port) != ERR_OK) {
		tcp_abort(pcb);
		return NULL;
	}
	l = tcp_listen_with_backlog(pcb, TCP_DEFAULT_LISTEN_BACKLOG);
	if (!l) {
		tcp_abort(pcb);
		return NULL;
	}
	tcp_arg(l, NULL);
	tcp_accept(l, on_accept);
	s->listen[port] = l;
	return l;
}

static struct tcp_pcb *find_syn_rcvd(const struct flow *f)
{
	struct tcp_pcb *pcb;
	ip4_addr_t l, r;

	memcpy(&l.addr, f->ft.key.dip, 4);
	memcpy(&r.addr, f->ft.key.gip, 4);
	for (pcb = tcp_active_pcbs; pcb; pcb = pcb->next) {
		if (pcb->state == SYN_RCVD && pcb->local_port == f->ft.key.dport &&
		    pcb->remote_port == f->ft.key.gport && IP_IS_V4_VAL(pcb->local_ip) &&
		    ip4_addr_cmp(ip_2_ip4(&pcb->local_ip), &l) && ip4_addr_cmp(ip_2_ip4(&pcb->remote_ip), &r))
			return pcb;
	}
	return NULL;
}

static void wake(void *arg)
{
}

/* Forget lwIP's TIME-WAIT pcb for f's 4-tuple, if any.  lwIP closes first
 * when the host did (it sends the guest our FIN), so its pcb waits 2 MSL
 * while the guest, the passive closer, may reuse its port at once; lwIP
 * would then answer the new SYN from the old pcb instead of accepting it.
 * The host side already accepted this connection, so the old one is over
 * (RFC 6191 lets a SYN reopen a TIME-WAIT connection in the same way). */
/* Also keep at most TIME_WAIT_MAX of them: lwIP looks each new SYN up in
 * that list and its timer walks it, and at a thousand short connections
 * a second its 2 MSL (2 minutes) would hold a hundred thousand.  On a
 * point-to-point link with no reordering, TIME-WAIT has little to
 * protect; a FIN the guest retransmits after the pcb went gets a reset,
 * which closes its end as well. */
static void drop_time_wait(const struct flow *f)
{
	struct tcp_pcb *pcb, *next;
	ip4_addr_t l, r;
	unsigned kept = 0;

	memcpy(&l.addr, f->ft.key.dip, 4);
	memcpy(&r.addr, f->ft.key.gip, 4);
	/* Newest first: lwIP puts a pcb at the head when it enters TIME-WAIT. */
	for (pcb = tcp_tw_pcbs; pcb; pcb = next) {
		next = pcb->next;
		if ((pcb->local_port == f->ft.key.dport && pcb->remote_port == f->ft.key.gport &&
		     IP_IS_V4_VAL(pcb->local_ip) && ip4_addr_cmp(ip_2_ip4(&pcb->local_ip), &l) &&
		     ip4_addr_cmp(ip_2_ip4(&pcb->remote_ip), &r)) ||
		    ++kept > TIME_WAIT_MAX)
			tcp_abort(pcb); /* a TIME-WAIT pcb is only unlinked and freed, no reset */
	}
}

/* Both ends are connected (f->pcb set): start the pump. */
static void flow_open(struct flow *f)
{
	tcp_arg(f->pcb, f);
	tcp_recv(f->pcb, on_recv);
	tcp_sent(f->pcb, on_sent);
	tcp_err(f->pcb, on_err);
	tcp_nagle_disable(f->pcb);
	if (f->s->gso) {
		/* See SND_BUF_GSO. */
		f->pcb->snd_buf = SND_BUF_GSO;
		f->pcb->ssthresh = SND_BUF_GSO;
	}
	f->state = FL_OPEN;
	f->reading = true;
	flow_events(f);
}

/* The host connect() succeeded: let lwIP answer the held SYN. */
static void flow_connected(struct flow *f)
{
	struct ns *s = f->s;

	if (!listener(s, f->ft.key.dport))
		goto fail;
	drop_time_wait(f);
	feed_tcp(s, f->syn, f->syn_len);
	/* The new pcb started lwIP's TCP timer; wake its thread so that it
	 * sees the timer now rather than at its next one-second tick. */
	tcpip_try_callback(wake, NULL);
	free(f->syn);
	f->syn = NULL;
	f->pcb = find_syn_rcvd(f);
	if (!f->pcb)
		goto fail;
	flow_open(f);
	return;
fail:
	s->st.tcp_failed++;
	send_rst(s, &f->syn_pkt);
	flow_free(f, true);
}

static void connect_done(struct flow *f)
{
	int e = 0;
	socklen_t el = sizeof e;

	if (getsockopt(f->fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
		e = errno;
	if (e == EINPROGRESS || e == EALREADY)
		return;
	if (e != 0) {
		f->s->st.tcp_failed++;
		f->err = e;
		send_rst(f->s, &f->syn_pkt);
		flow_free(f, false);
		return;
	}
	flow_connected(f);
}

/* Decide a new connection, in the name our DNS gave the address (or the
 * host alias), and what to dial. */
static void decide(struct ns *s, const struct pol_addr *dst, uint16_t port, struct pol_addr *dial,
		   const char **name, struct pol_decision *d)
{
	const char *names[DNS_MEMO_MAX_NAMES];
	size_t n, i;

	*dial = *dst;
	*name = NULL;
	if (memcmp(dst->b, gw_ip, 4) == 0) {
		static const uint8_t lo[4] = {127, 0, 0, 1};

		memcpy(dial->b, lo, 4);
		*name = POL_HOST_NAME;
		pol_check(s->cfg.policy, *name, dial, port, d);
		return;
	}
	n = dns_memo_names(&s->memo, dst, now_ms() / 1000, names, DNS_MEMO_MAX_NAMES);
	if (n == 0) {
		pol_check(s->cfg.policy, NULL, dial, port, d);
		return;
	}
	/* Several names may share an address (CDNs): any that is allowed
	 * lets the connection through; otherwise the most recent one's
	 * denial is reported. */
	for (i = n; i-- > 0;) {
		pol_check(s->cfg.policy, names[i], dial, port, d);
		*name = names[i];
		/* The host's own address is refused whatever the name (and
		 * each judgement asks the kernel again: hostaddr.h). */
		if (d->allow || d->why == POL_WHY_HOST)
			return;
	}
}

static void tcp_new_conn(struct ns *s, const struct fr_pkt *p)
{
	struct pol_addr dst = {.family = 4}, dial;
	struct pol_decision d;
	struct sockaddr_in sin;
	const char *name;
	struct flow *f;
	int r;

	memcpy(dst.b, p->dst, 4);
	decide(s, &dst, p->dport, &dial, &name, &d);
	/* SYN|FIN opens nothing a real client wants; lwIP would answer it
	 * with a SYN-ACK, so it is refused here whatever the destination,
	 * audited like any SYN. */
	if (d.allow && (p->tcp_flags & FR_TCP_FIN)) {
		/* Not a destination the guest wants, so not one to learn. */
		d = (struct pol_decision){false, POL_WHY_BAD_NAME, "tcp:syn-fin"};
		audit_line(s, "tcp", "out", &dial, p->dport, name, &d);
	} else {
		audit(s, "tcp", "out", &dial, p->dport, name, &d);
	}
	if (!d.allow) {
		s->st.tcp_denied++;
		send_rst(s, p);
		return;
	}
	s->st.tcp_allowed++;
	f = calloc(1, sizeof *f);
	if (!f || !(f->syn = malloc(p->ip_len))) {
		free(f);
		send_rst(s, p);
		return;
	}
	f->s = s;
	f->fd = -1;
	f->dst = dial;
	f->dport = p->dport;
	f->opened_ms = now_ms();
	f->peek = s->judge_stated;
	f->first = d;
	if (name)
		snprintf(f->name, sizeof f->name, "%s", name);
	if (s->cfg.icpt && ic_attach(s, f, &dst) < 0) {
		free(f->syn);
		free(f);
		s->st.tcp_failed++;
		send_rst(s, p);
		return;
	}
	memcpy(f->syn, p->ip, p->ip_len);
	f->syn_len = p->ip_len;
	f->syn_pkt = *p;
	f->syn_pkt.ip = NULL;
	f->syn_pkt.data = NULL;
	memcpy(f->ft.key.gip, p->src, 4);
	memcpy(f->ft.key.dip, p->dst, 4);
	f->ft.key.gport = p->sport;
	f->ft.key.dport = p->dport;
	if (ft_insert(&s->ft, &f->ft) < 0) {
		free(f->syn);
		free(f);
		s->st.tcp_failed++;
		send_rst(s, p);
		return;
	}
	s->st.flows = s->ft.n;
	f->deadline_ms = now_ms() + s->cfg.connect_timeout_ms;
	f->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (f->fd < 0)
		goto fail;
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_port = htons(p->dport);
	memcpy(&sin.sin_addr, dial.b, 4);
	r = connect(f->fd, (struct sockaddr *)&sin, sizeof sin);
	if (r == 0) {
		flow_connected(f);
		return;
	}
	if (errno != EINPROGRESS)
		goto fail;
	flow_events(f);
	if (f->ev == 0)
		goto fail;
	return;
fail:
	f->err = errno ? errno : EIO;
	s->st.tcp_failed++;
	send_rst(s, p);
	flow_free(f, false);
}

static void handle_tcp(struct ns *s, const struct fr_pkt *p)
{
	struct ft_key k;
	struct ft_entry *e;
	struct flow *f;

	memcpy(k.gip, p->src, 4);
	memcpy(k.dip, p->dst, 4);
	k.gport = p->sport;
	k.dport = p->dport;
	e = ft_find(&s->ft, &k);
	f = e ? (struct flow *)((char *)e - offsetof(struct flow, ft)) : NULL;
	if (f && f->state == FL_CONNECTING) {
		/* The guest gave up before the host answered; anything else
		 * (a repeated SYN) waits for the decision already under way. */
		if (p->tcp_flags & FR_TCP_RST)
			flow_free(f, false);
		return;
	}
	/* Every segment that would open a connection is judged, whatever
	 * else it carries: lwIP's listener answers any SYN without ACK or
	 * RST (SYN|FIN too) with a SYN-ACK. */
	if (!f && (p->tcp_flags & (FR_TCP_SYN | FR_TCP_ACK | FR_TCP_RST)) == FR_TCP_SYN) {
		tcp_new_conn(s, p);
		return;
	}
	/* Open flows, and strays lwIP answers with a reset. */
	feed_tcp(s, p->ip, p->ip_len);
}

/* ---- forwarded ports ---- */

static err_t on_guest_connected(void *arg, struct tcp_pcb *pcb, err_t err)
{
	struct flow *f = arg;

	if (!f)
		return ERR_OK;
	f->s->st.fwd_accepted++;
	flow_open(f);
	return ERR_OK;
}

/* A host connection accepted on w (fd): connect to the guest's port from
 * the gateway.  The host socket is not read until the guest accepted. */
static void fwd_start(struct ns *s, const struct fwd *w, int fd)
{
	struct pol_decision d = {.allow = true, .why = POL_WHY_EXCEPTION, .rule = w->label};
	ip_addr_t local, remote;
	struct tcp_pcb *pcb;
	struct flow *f;

	f = calloc(1, sizeof *f);
	if (!f) {
		close(fd);
		return;
	}
	f->s = s;
	f->fd = fd;
	f->inbound = true;
	f->state = FL_GUEST_CONNECTING;
	f->dst.family = 4;
	memcpy(f->dst.b, guest_ip, 4);
	f->dport = w->fw.guest_port;
	f->opened_ms = now_ms();
	f->deadline_ms = f->opened_ms + s->cfg.connect_timeout_ms;
	audit(s, "tcp", "in", &f->dst, f->dport, NULL, &d);
	IP_ADDR4(&local, gw_ip[0], gw_ip[1], gw_ip[2], gw_ip[3]);
	IP_ADDR4(&remote, guest_ip[0], guest_ip[1], guest_ip[2], guest_ip[3]);
	pcb = tcp_new_ip_type(IPADDR_TYPE_V4);
	if (!pcb)
		goto fail;
	if (tcp_bind(pcb, &local, 0) != ERR_OK) {
		tcp_close(pcb); /* a pcb that never connected: close frees it */
		goto fail;
	}
	/* The guest's segments arrive as guest:GUESTPORT -> gateway:ours. */
	memcpy(f->ft.key.gip, guest_ip, 4);
	memcpy(f->ft.key.dip, gw_ip, 4);
	f->ft.key.gport = w->fw.guest_port;
	f->ft.key.dport = pcb->local_port;
	if (ft_insert(&s->ft, &f->ft) < 0) {
		tcp_close(pcb);
		goto fail;
	}
	s->st.flows = s->ft.n;
	f->pcb = pcb;
	tcp_arg(pcb, f);
	tcp_err(pcb, on_err);
	if (tcp_connect(pcb, &remote, w->fw.guest_port, on_guest_connected) != ERR_OK) {
		s->st.fwd_refused++;
		flow_abort(f);
		return;
	}
	tcpip_try_callback(wake, NULL); /* see flow_connected */
	return;
fail:
	s->st.fwd_refused++;
	flow_free(f, true);
}

static void fwd_accept(struct ns *s, struct fwd *w)
{
	int k;

	/* Bounded, so a connection storm cannot starve the guest's flows. */
	for (k = 0; k < 64; k++) {
		int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0) {
			fwd_start(s, w, fd);
			continue;
		}
		/* The pending connection stays queued and the listener
		 * readable: without a pause the caller's loop would spin.
		 * The timer tick (check_timeouts) resumes it. */
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			epoll_ctl(s->epfd, EPOLL_CTL_DEL, w->fd, NULL);
			w->paused = true;
		}
		return;
	}
}

static int parse_port(const char *s, size_t n, uint16_t *out)
{
	unsigned v = 0;
	size_t i;

	if (n == 0 || n > 5)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > 65535)
		return -EINVAL;
	*out = (uint16_t)v;
	return 0;
}

static bool is_loopback(const struct pol_addr *a)
{
	static const uint8_t lo6[16] = {[15] = 1};

	return a->family == 4 ? a->b[0] == 127 : memcmp(a->b, lo6, 16) == 0;
}

int ns_forward_parse(const char *spec, struct ns_forward *fw, char *err, size_t errlen)
{
	const char *gp, *hp;
	char addr[64];
	size_t alen;

	memset(fw, 0, sizeof *fw);
	gp = strrchr(spec, ':');
	if (!gp) {
		snprintf(err, errlen, "-p takes [ADDR:]HOSTPORT:GUESTPORT, not '%.64s'", spec);
		return -EINVAL;
	}
	if (parse_port(gp + 1, strlen(gp + 1), &fw->guest_port) < 0 || fw->guest_port == 0) {
		snprintf(err, errlen, "-p '%.64s': the guest port must be a number from 1 to 65535", spec);
		return -EINVAL;
	}
	/* The host port is what follows the last ':' before gp, or the start. */
	for (hp = gp; hp > spec && hp[-1] != ':'; hp--)
		;
	if (parse_port(hp, (size_t)(gp - hp), &fw->host_port) < 0) {
		snprintf(err, errlen, "-p '%.64s': the host port must be a number from 0 (any free port) to 65535",
			 spec);
		return -EINVAL;
	}
	if (hp == spec) {
		fw->host.family = 4;
		fw->host.b[0] = 127;
		fw->host.b[3] = 1;
		return 0;
	}
	alen = (size_t)(hp - 1 - spec);
	if (alen >= 2 && spec[0] == '[' && spec[alen - 1] == ']') {
		spec++;
		alen -= 2;
	}
	if (alen >= sizeof addr) {
		snprintf(err, errlen, "-p '%.64s': the address is too long", spec);
		return -EINVAL;
	}
	memcpy(addr, spec, alen);
	addr[alen] = '\0';
	if (pol_addr_parse(addr, &fw->host) < 0) {
		snprintf(err, errlen, "-p: '%s' is no IP address (write an IPv6 one as [::1])", addr);
		return -EINVAL;
	}
	if (!is_loopback(&fw->host)) {
		snprintf(err, errlen,
			 "-p: kbox listens only on loopback addresses (127.0.0.0/8 or [::1]), not %s: "
			 "a forwarded port must not be reachable from other machines",
			 addr);
		return -EINVAL;
	}
	return 0;
}

int ns_forward_add(struct ns *s, struct ns_forward *fw)
{
	struct epoll_event ev = {.events = EPOLLIN};
	struct sockaddr_storage ss;
	socklen_t sl;
	char ip[64];
	int fd, one = 1, r;
	struct fwd *w;

	if (!is_loopback(&fw->host) || fw->guest_port == 0)
		return -EINVAL;
	memset(&ss, 0, sizeof ss);
	if (fw->host.family == 4) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(fw->host_port);
		memcpy(&sin->sin_addr, fw->host.b, 4);
		sl = sizeof *sin;
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(fw->host_port);
		memcpy(&sin6->sin6_addr, fw->host.b, 16);
		sl = sizeof *sin6;
	}
	LOCK_TCPIP_CORE();
	if (s->nfwd >= NS_MAX_FORWARDS) {
		UNLOCK_TCPIP_CORE();
		return -ENOSPC;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		goto fail;
	fw->host_port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
						      : ((struct sockaddr_in6 *)&ss)->sin6_port);
	/* Listener handles have no generation (the upper half is 0), so
	 * they can never be taken for a flow's (flowtab.h). */
	ev.data.u64 = s->nfwd + 1;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		goto fail;
	w = &s->fwd[s->nfwd++];
	w->fd = fd;
	w->fw = *fw;
	if (pol_addr_format(&fw->host, ip, sizeof ip) < 0)
		snprintf(ip, sizeof ip, "?");
	snprintf(w->label, sizeof w->label, fw->host.family == 6 ? "forward:[%s]:%u:%u" : "forward:%s:%u:%u", ip,
		 fw->host_port, fw->guest_port);
	UNLOCK_TCPIP_CORE();
	return 0;
fail:
	r = -errno;
	if (fd >= 0)
		close(fd);
	UNLOCK_TCPIP_CORE();
	return r;
}

/* ---- DNS, ARP, ICMP ---- */

/* Reply to q (parsed from qmsg) to the guest's MAC and port. */
static void dns_send(struct ns *s, const uint8_t mac[6], uint16_t port, const struct dns_query *q,
		     const uint8_t *qmsg, int rcode, const struct pol_addr *a, size_t n, uint32_t ttl)
{
	uint8_t msg[DNS_MAX_MSG];
	size_t len, fl;

	if (dns_build_reply(q, qmsg, rcode, a, n, ttl, msg, sizeof msg, &len) < 0)
		return;
	if (fr_build_udp(mac, gw_mac, gw_ip, NS_DNS_PORT, guest_ip, port, msg, len, s->tx, sizeof s->tx, &fl) == 0)
		send_frame(s, fl);
}

static void dns_reply(struct ns *s, const struct fr_pkt *p, const struct dns_query *q, int rcode,
		      const struct pol_addr *a, size_t n, uint32_t ttl)
{
	dns_send(s, p->eth_src, p->sport, q, p->data, rcode, a, n, ttl);
}

/* A question refused before the resolver saw it, for asking too fast or
 * too much at once: told in the log, itself rate-limited. */
static void dns_refuse_load(struct ns *s, const struct fr_pkt *p, const struct dns_query *q, const char *rule)
{
	if (bucket_take(&s->dns_rate_log, now_ms())) {
		struct audit_event e = {
			.time_ms = wall_ms(),
			.proto = "dns",
			.name = q->name,
			.allow = false,
			.rule = rule,
			.suppressed = s->dns_unlogged,
		};

		audit_write(s->cfg.audit, &e);
		s->dns_unlogged = 0;
	} else {
		s->dns_unlogged++;
	}
	dns_reply(s, p, q, DNS_RCODE_REFUSED, NULL, 0, 0);
}

/* Hand an allowed question to the resolver threads; the reply goes out
 * from dns_answered. */
static void dns_ask(struct ns *s, const struct fr_pkt *p, const struct dns_query *q, const char *norm)
{
	struct dq *j;

	if (s->st.dns_inflight >= NS_DNS_INFLIGHT) {
		s->st.dns_busy_refused++;
		dns_refuse_load(s, p, q, "dns:busy");
		return;
	}
	/* Each question costs the host a resolver call: a guest asking too
	 * fast is refused at once. */
	if (!bucket_take(&s->dns_rate, now_ms())) {
		s->st.dns_rate_refused++;
		dns_refuse_load(s, p, q, "dns:rate");
		return;
	}
	j = rp_ensure() == 0 ? malloc(sizeof *j) : NULL;
	if (!j || q->qend > sizeof j->qmsg || q->qend > p->data_len) {
		free(j);
		dns_reply(s, p, q, DNS_RCODE_SERVFAIL, NULL, 0, 0);
		return;
	}
	j->next = NULL;
	j->s = s;
	j->q = *q;
	memcpy(j->qmsg, p->data, q->qend);
	memcpy(j->mac, p->eth_src, 6);
	j->sport = p->sport;
	memcpy(j->norm, norm, sizeof j->norm);
	s->st.dns_inflight++;
	pthread_mutex_lock(&rp.m);
	if (rp.tail)
		rp.tail->next = j;
	else
		rp.head = j;
	rp.tail = j;
	pthread_cond_signal(&rp.work);
	pthread_mutex_unlock(&rp.m);
}

/* The resolver answered j: the rebinding filter, the name memory, the
 * reply. */
static void dns_answered(struct ns *s, struct dq *j)
{
	struct pol_decision d;
	struct pol_addr a[DNS_MAX_ANSWERS];
	uint32_t ttl = DNS_MEMO_MAX_TTL;
	size_t n = j->n, kept, i;
	int r = j->rc;

	if (r < 0 || r > 15) {
		dns_send(s, j->mac, j->sport, &j->q, j->qmsg, DNS_RCODE_SERVFAIL, NULL, 0, 0);
		return;
	}
	if (n > DNS_MAX_ANSWERS)
		n = DNS_MAX_ANSWERS;
	kept = dns_filter_answers(s->cfg.policy, j->norm, j->rr, n, &d);
	if (n > 0 && kept == 0) {
		/* Every answer was refused (rebinding or allowlist). */
		audit(s, "dns", NULL, NULL, 0, j->q.name, &d);
		dns_send(s, j->mac, j->sport, &j->q, j->qmsg, DNS_RCODE_REFUSED, NULL, 0, 0);
		return;
	}
	for (i = 0; i < kept; i++) {
		a[i] = j->rr[i].addr;
		if (j->rr[i].ttl < ttl)
			ttl = j->rr[i].ttl;
		dns_memo_put(&s->memo, j->norm, &j->rr[i].addr, j->rr[i].ttl, now_ms() / 1000);
	}
	dns_send(s, j->mac, j->sport, &j->q, j->qmsg, r, a, kept, ttl);
}

/* Send the replies whose answers are in. */
static void dns_collect(struct ns *s)
{
	struct dq *j, *next;
	uint64_t v;

	if (read(s->efd, &v, sizeof v) < 0) {
		/* nothing counted: the list may still hold answers */
	}
	pthread_mutex_lock(&rp.m);
	j = s->dns_done;
	s->dns_done = NULL;
	pthread_mutex_unlock(&rp.m);
	for (; j; j = next) {
		next = j->next;
		dns_answered(s, j);
		free(j);
		s->st.dns_inflight--;
	}
}

/* Whether name is pinned (--add-host); if so, its addresses that fit
 * qtype go to out[0, *n) (at most DNS_MAX_ANSWERS).  The user's own
 * mapping skips the rebinding filter: a private address is what they
 * asked for, and connections to it are still judged by the policy. */
static bool pinned_answer(const struct ns *s, const char *name, uint16_t qtype, struct pol_addr *out, size_t *n)
{
	bool found = false;
	size_t i;

	*n = 0;
	for (i = 0; i < s->cfg.nhosts; i++) {
		const struct ns_host *h = &s->cfg.hosts[i];

		if (strcmp(h->name, name) != 0)
			continue;
		found = true;
		if ((h->addr.family == 4) == (qtype == DNS_TYPE_A) && *n < DNS_MAX_ANSWERS)
			out[(*n)++] = h->addr;
	}
	return found;
}

int ns_host_parse(const char *spec, struct ns_host *h, char *err, size_t errlen)
{
	const char *colon = strchr(spec, ':');
	char name[POL_NAME_MAX + 2], addr[64];
	size_t nlen, alen;
	const char *a;

	memset(h, 0, sizeof *h);
	if (!colon || colon == spec || !colon[1]) {
		snprintf(err, errlen, "'%.64s' is not NAME:ADDR", spec);
		return -EINVAL;
	}
	nlen = (size_t)(colon - spec);
	if (nlen >= sizeof name) {
		snprintf(err, errlen, "'%.64s...': the name is too long", spec);
		return -EINVAL;
	}
	memcpy(name, spec, nlen);
	name[nlen] = '\0';
	if (pol_name_normalize(name, h->name) < 0 || pol_name_is_numeric(h->name) || strchr(h->name, '*')) {
		snprintf(err, errlen, "'%.64s': '%s' is no DNS name", spec, name);
		return -EINVAL;
	}
	if (strcmp(h->name, POL_HOST_NAME) == 0) {
		snprintf(err, errlen, "%s is kbox's own name for the host and cannot be pinned",
			 POL_HOST_NAME);
		return -EINVAL;
	}
	a = colon + 1;
	alen = strlen(a);
	if (alen >= 2 && a[0] == '[' && a[alen - 1] == ']') {
		a++;
		alen -= 2;
	}
	if (alen < sizeof addr) {
		memcpy(addr, a, alen);
		addr[alen] = '\0';
		if (pol_addr_parse(addr, &h->addr) == 0)
			return 0;
	}
	snprintf(err, errlen, "'%.64s': '%.64s' is no IP address", spec, colon + 1);
	return -EINVAL;
}

static void handle_dns(struct ns *s, const struct fr_pkt *p)
{
	struct dns_query q;
	struct pol_decision d;
	struct pol_addr a[DNS_MAX_ANSWERS];
	char norm[POL_NAME_MAX + 1];
	size_t n = 0, i;
	int r;

	r = dns_parse_query(p->data, p->data_len, &q);
	if (r == -EBADMSG)
		return;
	s->st.dns_queries++;
	if (r < 0) {
		dns_reply(s, p, &q, r == -ENOTSUP ? DNS_RCODE_NOTIMP : DNS_RCODE_FORMERR, NULL, 0, 0);
		return;
	}
	pol_check_name(s->cfg.policy, q.name, &d);
	if (d.allow && pol_name_normalize(q.name, norm) < 0)
		d.allow = false;
	/* A pinned name is answered here and never asked upstream, so an
	 * allowlist without a rule for it need not refuse it (its
	 * connections are judged all the same). */
	if (!d.allow && d.why == POL_WHY_NO_MATCH && pol_name_normalize(q.name, norm) == 0 &&
	    pinned_answer(s, norm, q.qtype, a, &n))
		d = (struct pol_decision){true, POL_WHY_ALLOW_RULE, "add-host"};
	audit(s, "dns", NULL, NULL, 0, q.name, &d);
	if (!d.allow) {
		dns_reply(s, p, &q, DNS_RCODE_REFUSED, NULL, 0, 0);
		return;
	}
	if (q.qtype != DNS_TYPE_A && q.qtype != DNS_TYPE_AAAA) {
		dns_reply(s, p, &q, DNS_RCODE_NOERROR, NULL, 0, 0);
		return;
	}
	if (strcmp(norm, POL_HOST_NAME) == 0) {
		/* Ours: the gateway stands for the host (see decide). */
		if (q.qtype == DNS_TYPE_A) {
			a[0].family = 4;
			memcpy(a[0].b, gw_ip, 4);
			n = 1;
		}
		dns_reply(s, p, &q, DNS_RCODE_NOERROR, a, n, DNS_MEMO_MIN_TTL);
		return;
	}
	if (pinned_answer(s, norm, q.qtype, a, &n)) {
		for (i = 0; i < n; i++)
			dns_memo_put(&s->memo, norm, &a[i], DNS_MEMO_MIN_TTL, now_ms() / 1000);
		dns_reply(s, p, &q, DNS_RCODE_NOERROR, a, n, DNS_MEMO_MIN_TTL);
		return;
	}
	if (!s->cfg.resolve) {
		dns_reply(s, p, &q, DNS_RCODE_SERVFAIL, NULL, 0, 0);
		return;
	}
	dns_ask(s, p, &q, norm);
}

/* Whether dst is a broadcast or multicast address. */
static bool ip_group(const uint8_t dst[4])
{
	static const uint8_t all[4] = {255, 255, 255, 255};

	return dst[0] >= 224 || memcmp(dst, all, 4) == 0 || (memcmp(dst, gw_ip, 3) == 0 && dst[3] == 255);
}

/* UDP other than DNS to the gateway: port unreachable, so the sender
 * (QUIC above all) gives up at once instead of timing out. */
static void refuse_udp(struct ns *s, const struct fr_pkt *p)
{
	static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	struct pol_addr dst = {.family = 4};
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
	if (memcmp(p->eth_dst, bcast, 6) != 0 && !ip_group(p->dst) &&
	    fr_build_port_unreach(p, s->tx, sizeof s->tx, &n) == 0)
		send_frame(s, n);
	if (!bucket_take(&s->udp_log, now_ms())) {
		s->udp_unlogged++;
		return;
	}
	memcpy(dst.b, p->dst, 4);
	e.time_ms = wall_ms();
	e.suppressed = s->udp_unlogged;
	audit_write(s->cfg.audit, &e);
	s->udp_unlogged = 0;
}

static void handle_arp(struct ns *s, const struct fr_pkt *p)
{
	size_t n;

	if (memcmp(p->arp_spa, guest_ip, 4) != 0)
		return;
	if (p->arp_op == FR_ARP_REPLY) {
		/* The answer to our question in netif_out4. */
		memcpy(s->guest_mac, p->arp_sha, 6);
		s->have_mac = true;
		return;
	}
	if (p->arp_op != FR_ARP_REQUEST)
		return;
	memcpy(s->guest_mac, p->arp_sha, 6);
	s->have_mac = true;
	/* Every other address of the subnet is "on the link" as far as the
	 * guest knows; answering makes a connection to one fail fast with a
	 * reset instead of an ARP timeout. */
	if (memcmp(p->arp_tpa, gw_ip, 3) != 0 || memcmp(p->arp_tpa, guest_ip, 4) == 0)
		return;
	if (fr_build_arp_reply(p, gw_mac, s->tx, sizeof s->tx, &n) == 0)
		send_frame(s, n);
}

void ns_input(struct ns *s, const uint8_t *frame, size_t len)
{
	static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	struct fr_pkt p;
	size_t n;

	LOCK_TCPIP_CORE();
	round_begin(s);
	s->st.frames_in++;
	if (fr_parse(frame, len, &p) < 0)
		goto drop;
	if (p.ethertype == FR_ETH_ARP) {
		handle_arp(s, &p);
		goto out;
	}
	/* IPv4 only from the guest's address, only to the gateway's MAC. */
	if (memcmp(p.src, guest_ip, 4) != 0 || (memcmp(p.eth_dst, gw_mac, 6) != 0 && memcmp(p.eth_dst, bcast, 6) != 0))
		goto drop;
	if (p.eth_src[0] & 1)
		goto drop;
	memcpy(s->guest_mac, p.eth_src, 6);
	s->have_mac = true;
	switch (p.proto) {
	case FR_IP_TCP:
		handle_tcp(s, &p);
		goto out;
	case FR_IP_UDP:
		if (memcmp(p.dst, gw_ip, 4) == 0 && p.dport == NS_DNS_PORT) {
			handle_dns(s, &p);
			goto out;
		}
		refuse_udp(s, &p);
		goto out;
	case FR_IP_ICMP:
		if (memcmp(p.dst, gw_ip, 4) == 0 && p.icmp_type == FR_ICMP_ECHO &&
		    fr_build_echo_reply(&p, s->tx, sizeof s->tx, &n) == 0) {
			send_frame(s, n);
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

static void check_timeouts(struct ns *s)
{
	uint64_t now = now_ms();
	size_t i;

	for (i = 0; i < s->nfwd; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i + 1};

		if (s->fwd[i].paused && epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->fwd[i].fd, &ev) == 0)
			s->fwd[i].paused = false;
	}

	for (i = 0; i < s->ft.cap; i++) {
		struct ft_entry *e = s->ft.slots[i];
		struct flow *f = e ? (struct flow *)((char *)e - offsetof(struct flow, ft)) : NULL;

		if (f && f->state == FL_CONNECTING && now >= f->deadline_ms) {
			s->st.tcp_failed++;
			f->err = ETIMEDOUT;
			send_rst(s, &f->syn_pkt);
			flow_free(f, false);
		} else if (f && f->state == FL_GUEST_CONNECTING && now >= f->deadline_ms) {
			s->st.fwd_refused++; /* the guest never answered */
			f->err = ETIMEDOUT;
			flow_abort(f);
		}
	}
}

static void flow_event(struct flow *f, uint32_t ev)
{
	if (f->state == FL_CONNECTING) {
		connect_done(f);
		return;
	}
	if (f->ic && f->state == FL_OPEN) {
		if ((ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) && ic_pump(f) != IC_OK)
			return;
		if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
			read_host(f);
		return;
	}
	if ((ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) && f->up_len > 0 && flush_up(f) < 0)
		return;
	if ((ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) && f->reading)
		read_host(f);
}

void ns_dispatch(struct ns *s)
{
	struct epoll_event ev[64];
	int n, i;

	n = epoll_wait(s->epfd, ev, 64, 0);
	if (n <= 0)
		return;
	LOCK_TCPIP_CORE();
	round_begin(s);
	for (i = 0; i < n; i++) {
		struct ft_entry *e;

		if (ev[i].data.u64 == 0) {
			uint64_t ticks;

			if (read(s->tfd, &ticks, sizeof ticks) < 0) {
				/* spurious: nothing to do */
			}
			check_timeouts(s);
			continue;
		}
		if (ev[i].data.u64 == DNS_TAG) {
			dns_collect(s);
			continue;
		}
		if (ev[i].data.u64 >> 32 == 0) {
			if (ev[i].data.u64 <= s->nfwd)
				fwd_accept(s, &s->fwd[ev[i].data.u64 - 1]);
			continue;
		}
		e = ft_from_handle(&s->ft, ev[i].data.u64);
		if (e)
			flow_event((struct flow *)((char *)e - offsetof(struct flow, ft)), ev[i].events);
	}
	round_end(s);
	UNLOCK_TCPIP_CORE();
}

int ns_fd(const struct ns *s)
{
	return s->epfd;
}

void ns_get_stats(struct ns *s, struct ns_stats *st)
{
	LOCK_TCPIP_CORE();
	*st = s->st;
	st->flows = s->ft.n;
	UNLOCK_TCPIP_CORE();
}

int ns_create(const struct ns_config *cfg, struct ns **out)
{
	struct itimerspec its = {.it_interval = {.tv_sec = 1}, .it_value = {.tv_sec = 1}};
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
	struct epoll_event dev = {.events = EPOLLIN, .data.u64 = DNS_TAG};
	ip4_addr_t ip, mask, gw;
	uint64_t seed;
	struct ns *s;
	int r;

	if (!cfg || !cfg->policy || !cfg->audit || (!cfg->output && !cfg->output_gso))
		return -EINVAL;
	pthread_mutex_lock(&ns_single);
	if (ns_exists) {
		pthread_mutex_unlock(&ns_single);
		return -EBUSY;
	}
	s = calloc(1, sizeof *s);
	if (!s) {
		pthread_mutex_unlock(&ns_single);
		return -ENOMEM;
	}
	s->cfg = *cfg;
	if (cfg->guest_mac) {
		memcpy(s->guest_mac, cfg->guest_mac, 6);
		s->have_mac = true;
	}
	s->cfg.guest_mac = NULL; /* copied: the caller's buffer need not live on */
	s->judge_stated = pol_judges_stated_names(cfg->policy);
	if (!s->cfg.connect_timeout_ms)
		s->cfg.connect_timeout_ms = NS_CONNECT_TIMEOUT_MS;
	s->epfd = s->tfd = s->efd = -1;
	bucket_init(&s->udp_log, NS_UDP_LOG_PER_SEC, NS_UDP_LOG_BURST, now_ms());
	if (cfg->dns_per_sec)
		bucket_init(&s->dns_rate, cfg->dns_per_sec, 2 * cfg->dns_per_sec, now_ms());
	else
		bucket_init(&s->dns_rate, NS_DNS_PER_SEC, NS_DNS_BURST, now_ms());
	bucket_init(&s->dns_rate_log, NS_UDP_LOG_PER_SEC, NS_UDP_LOG_BURST, now_ms());
	seed = now_ms() ^ (uint64_t)(uintptr_t)s;
	r = -ENOMEM;
	s->listen = calloc(65536, sizeof *s->listen);
	if (!s->listen || ft_init(&s->ft, NS_MAX_FLOWS, seed) < 0 || dns_memo_init(&s->memo, MEMO_CAP) < 0)
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
	ip4_addr_set_u32(&mask, PP_HTONL(0xffffffffu << (32 - NS_PREFIX_LEN)));
	ip4_addr_set_zero(&gw);
	LOCK_TCPIP_CORE();
	if (!netif_add(&s->netif, &ip, &mask, &gw, s, netif_setup, netif_in)) {
		UNLOCK_TCPIP_CORE();
		r = -EIO;
		goto fail;
	}
	s->netif_added = true;
	netif_set_default(&s->netif);
	netif_set_up(&s->netif);
	UNLOCK_TCPIP_CORE();
	ns_exists = true;
	pthread_mutex_unlock(&ns_single);
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
	ft_free(&s->ft);
	free(s->listen);
	free(s->gso);
	free(s);
	pthread_mutex_unlock(&ns_single);
	return r;
}

/* Drop s's questions: those still queued at once, those under way when
 * their resolver call returns (the call uses s->cfg). */
static void dns_drop_all(struct ns *s)
{
	struct dq **pp, *j, *next;

	pthread_mutex_lock(&rp.m);
	rp.tail = NULL;
	for (pp = &rp.head; *pp;) {
		j = *pp;
		if (j->s == s) {
			*pp = j->next;
			free(j);
		} else {
			rp.tail = j;
			pp = &j->next;
		}
	}
	while (s->dns_running)
		pthread_cond_wait(&rp.idle, &rp.m);
	j = s->dns_done;
	s->dns_done = NULL;
	pthread_mutex_unlock(&rp.m);
	for (; j; j = next) {
		next = j->next;
		free(j);
	}
}

void ns_destroy(struct ns *s)
{
	size_t i;

	if (!s)
		return;
	dns_drop_all(s);
	LOCK_TCPIP_CORE();
	for (i = 0; i < s->ft.cap; i++) {
		struct ft_entry *e = s->ft.slots[i];

		if (e)
			flow_abort((struct flow *)((char *)e - offsetof(struct flow, ft)));
	}
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
	ft_free(&s->ft);
	free(s->listen);
	free(s->gso);
	free(s);
	pthread_mutex_lock(&ns_single);
	ns_exists = false;
	pthread_mutex_unlock(&ns_single);
}
