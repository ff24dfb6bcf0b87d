/* The TCP proxy of the network stack (stack.h, docs/network.md): every
 * connection the guest opens, and those forwarded to it (stack_fwd.c),
 * become flows between an lwIP pcb and a host socket.
 *
 * Listening pcbs bound to IP_ANY, one per destination port, turn a SYN
 * into a pcb whose local address is the one the guest dialled; the
 * segment goes straight to tcp_input with lwIP's ip_data filled in as
 * ip4_input or ip6_input would.  A SYN that opens a new connection is not given to
 * lwIP until the policy allowed it and the host's connect() succeeded,
 * so the guest's SYN-ACK means "connected".  Everything here runs under
 * lwIP's core lock (stack.c). */
#include "netstack/stack_priv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lwip/ip.h"
#include "lwip/pbuf.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/tcpip.h"

#include "netstack/peek.h"

/* Guest bytes the host socket has not taken yet: lwIP's window bounds
 * them, since tcp_recved is called only for bytes the socket took. */
#define UP_CAP ((size_t)TCP_WND)
#define TIME_WAIT_MAX 64u /* lwIP's TIME-WAIT pcbs kept; the oldest go beyond */
#define IC_DOWN_CAP 16384u /* upstream ciphertext an intercepted flow holds */

/* The address at b (IPv4 or IPv6 by ipv) as lwIP's. */
static void lwip_addr(ip_addr_t *a, const uint8_t *b, uint8_t ipv)
{
	if (ipv == 6) {
		ip6_addr_t a6;

		memcpy(a6.addr, b, 16);
		ip6_addr_clear_zone(&a6);
		ip_addr_copy_from_ip6(*a, a6);
	} else {
		ip4_addr_t a4;

		memcpy(&a4.addr, b, 4);
		ip_addr_copy_from_ip4(*a, a4);
	}
}

/* Give the IP packet ip[0, len) (already validated, carrying TCP; IPv6
 * without extension headers) to lwIP's TCP input as ip4_input or
 * ip6_input would after accepting it. */
static void feed_tcp(struct stack *s, const uint8_t *ip, size_t len)
{
	bool v6 = ip[0] >> 4 == 6;
	size_t hlen = v6 ? FRAME_IP6_HLEN : (size_t)(ip[0] & 0xf) * 4;
	struct pbuf *p = pbuf_alloc(PBUF_RAW, (u16_t)len, PBUF_RAM);

	if (!p)
		return;
	memcpy(p->payload, ip, len);
	ip_data.current_netif = &s->netif;
	ip_data.current_input_netif = &s->netif;
	ip_data.current_ip4_header = v6 ? NULL : p->payload;
	ip_data.current_ip6_header = v6 ? p->payload : NULL;
	ip_data.current_ip_header_tot_len = (u16_t)hlen;
	lwip_addr(&ip_data.current_iphdr_src, ip + (v6 ? 8 : 12), v6 ? 6 : 4);
	lwip_addr(&ip_data.current_iphdr_dest, ip + (v6 ? 24 : 16), v6 ? 6 : 4);
	if (pbuf_remove_header(p, hlen) == 0)
		tcp_input(p, &s->netif);
	else
		pbuf_free(p);
	ip_data.current_netif = NULL;
	ip_data.current_input_netif = NULL;
	ip_data.current_ip4_header = NULL;
	ip_data.current_ip6_header = NULL;
	ip_data.current_ip_header_tot_len = 0;
	ip_addr_set_zero(&ip_data.current_iphdr_src);
	ip_addr_set_zero(&ip_data.current_iphdr_dest);
}

/* Whether pcb is f's connection: its 4-tuple as the guest used it. */
static bool pcb_is_flow(const struct tcp_pcb *pcb, const struct flow *f)
{
	ip_addr_t l, r;
	uint8_t ipv = f->ipv == 6 ? 6 : 4;

	if (pcb->local_port != f->ft.key.dport || pcb->remote_port != f->ft.key.gport)
		return false;
	lwip_addr(&l, f->ft.key.dip, ipv);
	lwip_addr(&r, f->ft.key.gip, ipv);
	return ip_addr_cmp(&pcb->local_ip, &l) && ip_addr_cmp(&pcb->remote_ip, &r);
}

static void flow_events(struct flow *f)
{
	uint32_t want = 0;
	struct epoll_event ev;
	int op;

	if (f->fd < 0)
		return;
	if (f->ic && f->state == FL_OPEN) {
		if (intercept_want(f->ic) & TLS_MITM_WANT_UP_OUT)
			want |= EPOLLOUT;
		if (intercept_upstream_direct(f->ic) ? f->reading : !f->host_eof && f->down_len < IC_DOWN_CAP)
			want |= EPOLLIN;
	} else {
		if (f->state == FL_CONNECTING || (f->up_len > 0 && !f->peek))
			want |= EPOLLOUT;
		/* EPOLLRDHUP: read_host takes the host's EOF with its last
		 * bytes, so the FIN leaves with them in one segment. */
		if (f->state == FL_OPEN && f->reading)
			want |= EPOLLIN | EPOLLRDHUP;
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
	ev.data.u64 = flowtab_handle(&f->ft);
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

void stack_flow_free(struct flow *f, bool reset)
{
	struct stack *s = f->s;
	struct audit_event e = {
		.time_ms = stack_wall_ms(),
		.proto = "tcp",
		.direction = f->inbound ? "in" : "out",
		.dst = &f->dst,
		.port = f->dport,
		.name = f->name[0] ? f->name : NULL,
		.allow = true,
		.close = true,
		.bytes_up = f->bytes_up,
		.bytes_down = f->bytes_down,
		.duration_ms = stack_now_ms() - f->opened_ms,
		.error = f->err ? strerrorname_np(f->err) : NULL,
	};

	if (f->err && !e.error)
		e.error = "error";
	audit_write(s->cfg.audit, &e);
	budget_charge(&s->nb, &f->charge, 0);
	flowtab_remove(&s->ft, &f->ft);
	if (f->fd >= 0) {
		if (reset) {
			struct linger lg = {.l_onoff = 1, .l_linger = 0};

			setsockopt(f->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		}
		close(f->fd); /* also leaves the epoll set */
	}
	intercept_free(f->ic);
	free(f->syn);
	free(f->up);
	free(f->down);
	free(f);
	s->st.flows = s->ft.n;
}

void stack_flow_abort(struct flow *f)
{
	if (f->pcb) {
		flow_detach_pcb(f);
		tcp_abort(f->pcb);
		f->pcb = NULL;
	}
	stack_flow_free(f, true);
}

/* Before tcp_close: lwIP resets an open connection whose receive window
 * is not at its largest ("not all data received by the application"),
 * and the byte budget keeps windows smaller on purpose (recved).  A flow
 * that holds none of the guest's bytes has lost nothing: say so.  One
 * that still holds some gets the reset, as before. */
static void close_window(struct flow *f)
{
	if (f->pcb && f->up_len == 0 && !f->pcb->refused_data)
		f->pcb->rcv_wnd = TCP_WND_MAX(f->pcb);
}

/* Close f if both directions are finished; true when it is gone. */
static bool flow_maybe_done(struct flow *f)
{
	if (!(f->guest_fin && f->host_shut && f->host_eof && f->fin_sent))
		return false;
	if (f->pcb) {
		flow_detach_pcb(f);
		close_window(f);
		if (tcp_close(f->pcb) != ERR_OK)
			tcp_abort(f->pcb);
		f->pcb = NULL;
	}
	stack_flow_free(f, false);
	return true;
}

/* Room in lwIP's send buffer for pcb.  Not tcp_sndbuf(): with window
 * scaling that caps at 0xffff (TCPWND16), which would make a 2 MiB
 * buffer look full and let each read take one segment. */
static size_t snd_room(const struct tcp_pcb *pcb)
{
	return pcb->snd_buf;
}

/* The host's bytes lwIP's send buffer holds for pcb (unsent or not yet
 * acknowledged).  lwIP gives snd_buf back only for acknowledged data,
 * never past TCP_SND_BUF; checked anyway, so the budget cannot wrap. */
static size_t snd_held(const struct tcp_pcb *pcb)
{
	size_t free_ = snd_room(pcb);

	return free_ < (size_t)TCP_SND_BUF ? (size_t)TCP_SND_BUF - free_ : 0;
}

/* f's charge in the stack's byte budget (netstack/budget.h): its
 * receive window with the guest's bytes not given back yet (up_allot),
 * and the host's bytes lwIP's send buffer and f->down hold. */
static void budget_sync(struct flow *f)
{
	size_t now = f->down_len;

	if (f->pcb)
		now += f->up_allot + snd_held(f->pcb);
	else
		now += f->up_len;
	budget_charge(&f->s->nb, &f->charge, now);
}

/* The host took n of the guest's bytes: give the guest back as much
 * window as the budget lets (netstack/budget.h), at least its floor. */
static void recved(struct flow *f, size_t n)
{
	struct tcp_pcb *pcb = f->pcb;
	size_t give;

	f->s->st.bytes_to_host += n;
	f->bytes_up += n;
	if (!pcb)
		return;
	give = budget_up_give(&f->s->nb, f->up_allot, n, TCP_WND_MAX(pcb));
	f->up_allot = (n < f->up_allot ? f->up_allot - n : 0) + give;
	while (give > 0) {
		u16_t k = give > 0xffff ? 0xffff : (u16_t)give;

		tcp_recved(pcb, k);
		give -= k;
	}
	/* lwIP announces a larger window at once only past its threshold
	 * (a quarter of TCP_WND) and otherwise with its next segment; when
	 * the guest knows less than half of the window it now has (a small
	 * one, near its floor), tell it now instead of leaving it to probe.
	 * Inside lwIP's own input tcp_output waits for the input's end. */
	if (n > 0 && (s32_t)(pcb->rcv_ann_right_edge - pcb->rcv_nxt) < (s32_t)(pcb->rcv_wnd / 2)) {
		tcp_ack_now(pcb);
		tcp_output(pcb);
	}
	budget_sync(f);
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
			stack_flow_abort(f);
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
		/* With the host's EOF read and our FIN sent, the caller's
		 * flow_maybe_done closes the socket next, and close() sends
		 * the FIN (nothing unread is left to turn it into a reset). */
		if (!(f->host_eof && f->fin_sent))
			shutdown(f->fd, SHUT_WR);
		f->host_shut = true;
	}
	flow_events(f);
	return 0;
}


/* The connection's segment size towards the guest (the smaller of
 * lwIP's MSS and the one the guest stated). */
static size_t seg_size(const struct flow *f)
{
	size_t mss = tcp_mss(f->pcb);

	return mss ? mss : 536;
}

/* Bytes lwIP takes for the guest now: its send buffer, at most
 * STACK_RX_MAX, no more segments than its send queue still holds (with a
 * few entries spare: better to wait than meet ERR_MEM), and no more than
 * the byte budget lets f hold (netstack/budget.h).  Whole segments where
 * it is at least one, so no write leaves a runt behind.  0 stops f's
 * reads until lwIP's sent callback: a flow held back by the budget has
 * at least its floor in flight, so that callback comes. */
static size_t guest_room(const struct flow *f)
{
	size_t max = snd_room(f->pcb), mss = seg_size(f), q = tcp_sndqueuelen(f->pcb);

	if (max > STACK_RX_MAX)
		max = STACK_RX_MAX;
	if (q + 8 >= TCP_SND_QUEUELEN)
		return 0;
	if (max > (TCP_SND_QUEUELEN - 8 - q) * mss)
		max = (TCP_SND_QUEUELEN - 8 - q) * mss;
	max = budget_down_room(&f->s->nb, snd_held(f->pcb) + f->down_len, max);
	if (max > mss)
		max -= max % mss;
	return max;
}

/* Give up to n bytes of b to lwIP for the guest, in tcp_write's 16-bit
 * pieces cut at whole segments.  The bytes taken (fewer than n when
 * lwIP's buffer or queue filled), or -1 on any error but ERR_MEM. */
static ssize_t guest_write(struct flow *f, const uint8_t *b, size_t n)
{
	size_t mss = seg_size(f), piece = 0xffff, done = 0;

	if (piece >= mss)
		piece -= piece % mss;
	while (done < n) {
		size_t k = n - done < piece ? n - done : piece;
		err_t e = tcp_write(f->pcb, b + done, (u16_t)k,
				    TCP_WRITE_FLAG_COPY | (done + k < n ? TCP_WRITE_FLAG_MORE : 0));

		if (e == ERR_MEM)
			break;
		if (e != ERR_OK)
			return -1;
		done += k;
	}
	return (ssize_t)done;
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

static void ic_event(void *ctx, const struct intercept_event *ev)
{
	struct flow *f = ctx;
	struct audit_event e = {
		.time_ms = stack_wall_ms(),
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
static int ic_attach(struct stack *s, struct flow *f, const struct policy_addr *dst)
{
	const char *names[DNS_MEMO_MAX_NAMES];
	size_t n;

	if (stack_is_gateway(dst)) {
		names[0] = POLICY_HOST_NAME;
		n = 1;
	} else {
		n = dns_memo_names(&s->memo, dst, stack_now_ms() / 1000, names, DNS_MEMO_MAX_NAMES);
	}
	return intercept_new(s->cfg.icpt, names, n, ic_event, f, &f->ic);
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
			if (intercept_guest_in(f->ic, f->up + f->up_off, f->up_len, &t) < 0)
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
			intercept_close_guest(f->ic);
			prog = true;
		}
		if (!intercept_upstream_direct(f->ic)) {
			if (f->down_len > 0) {
				if (intercept_upstream_in(f->ic, f->down, f->down_len, &t) < 0)
					t = f->down_len;
				if (t) {
					memmove(f->down, f->down + t, f->down_len - t);
					f->down_len -= t;
					prog = true;
				}
			}
			if (f->host_eof && f->down_len == 0 && !f->ic_host_told) {
				f->ic_host_told = true;
				intercept_close_upstream(f->ic);
				prog = true;
			}
		}
		b = intercept_upstream_out(f->ic, &n);
		if (b && n > 0 && !f->host_shut) {
			ssize_t r = send(f->fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);

			if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				stack_flow_abort(f);
				return IC_ABORTED;
			}
			if (r > 0) {
				intercept_upstream_out_done(f->ic, (size_t)r);
				prog = true;
			}
		}
		b = intercept_guest_out(f->ic, &n);
		if (b && n > 0 && f->pcb) {
			size_t room = guest_room(f);

			if (n > room)
				n = room;
			if (n > 0) {
				ssize_t w = guest_write(f, b, n);

				if (w < 0) {
					stack_flow_abort(f);
					return IC_ABORTED;
				}
				if (w > 0) {
					intercept_guest_out_done(f->ic, (size_t)w);
					f->s->st.bytes_to_guest += (size_t)w;
					f->bytes_down += (size_t)w;
					prog = true;
				}
			}
		}

		unsigned w = intercept_want(f->ic);

		if (w & INTERCEPT_REFUSE) {
			stack_flow_abort(f);
			return IC_ABORTED;
		}
		if (w & INTERCEPT_SPLICE) {
			/* A plain flow from here: f->up holds guest bytes for
			 * the host, f->down is empty (the upstream went straight
			 * to the guest while the first bytes were judged). */
			intercept_free(f->ic);
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
		if ((w & TLS_MITM_DONE) && !(w & (TLS_MITM_WANT_GUEST_OUT | TLS_MITM_WANT_UP_OUT))) {
			if (f->pcb) {
				tcp_output(f->pcb);
				flow_detach_pcb(f);
				close_window(f);
				if (tcp_close(f->pcb) != ERR_OK) {
					tcp_abort(f->pcb);
					f->pcb = NULL;
					stack_flow_free(f, true);
					return IC_ABORTED;
				}
				f->pcb = NULL;
			}
			stack_flow_free(f, false);
			return IC_FREED;
		}
		if (!prog)
			break;
	}
	if (f->pcb)
		tcp_output(f->pcb);
	budget_sync(f);
	flow_events(f);
	return IC_OK;
}

/* Guest bytes (or its FIN, p NULL) held in f->up for a flow whose upstream
 * is not written directly: ERR_OK, ERR_MEM (lwIP keeps p and offers it
 * again), or ERR_ABRT once the flow is aborted for any other failure. */
static err_t take_guest(struct flow *f, struct pbuf *p)
{
	if (!p) {
		f->guest_fin = true;
		return ERR_OK;
	}
	err_t e = up_append(f, p);

	if (e == ERR_OK || e == ERR_MEM)
		return e;
	pbuf_free(p);
	stack_flow_abort(f);
	return ERR_ABRT;
}

/* Guest bytes (or its FIN) on an intercepted flow. */
static err_t ic_recv(struct flow *f, struct pbuf *p)
{
	err_t e = take_guest(f, p);

	if (e != ERR_OK)
		return e;
	return ic_pump(f) == IC_ABORTED ? ERR_ABRT : ERR_OK;
}

/* Upstream bytes for an intercepted flow. */
static void ic_read_host(struct flow *f)
{
	if (!f->host_eof && f->down_len < IC_DOWN_CAP) {
		ssize_t r;

		if (!f->down && !(f->down = malloc(IC_DOWN_CAP))) {
			stack_flow_abort(f);
			return;
		}
		r = recv(f->fd, f->down + f->down_len, IC_DOWN_CAP - f->down_len, MSG_DONTWAIT);
		if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			stack_flow_abort(f);
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
static void flow_refuse(struct flow *f, const char *name, const struct policy_decision *d)
{
	struct stack *s = f->s;

	stack_audit(s, "tcp", "out", &f->dst, f->dport, name ? name : (f->name[0] ? f->name : NULL), d);
	s->st.tcp_denied++;
	f->err = EACCES;
	stack_flow_abort(f);
}

/* Judge the names in the guest's first bytes (f->up) while f->peek.  0:
 * judged and allowed (f->peek now false), 1: more bytes needed, -1: refused
 * (f is gone). */
static int peek_judge(struct flow *f)
{
	static const struct policy_decision unreadable = {false, POLICY_WHY_BAD_NAME, "tcp:unreadable-name"};
	struct peek_result res;
	struct policy_decision d;
	int st = peek_parse(f->up ? f->up + f->up_off : NULL, f->up_len, &res);
	size_t i;

	if (st == PEEK_NEED_MORE) {
		if (!f->guest_fin && f->up_len < PEEK_MAX)
			return 1;
		/* A client that closes before its first request or hello is
		 * whole names nothing; one that goes on past the bounds is
		 * not judged and not let through. */
		st = f->guest_fin ? PEEK_NONE : PEEK_BAD;
	}
	if (st == PEEK_BAD) {
		flow_refuse(f, NULL, &unreadable);
		return -1;
	}
	for (i = 0; st == PEEK_NAMES_FOUND && i < res.n; i++) {
		policy_check_stated(f->s->cfg.policy, res.name[i], &f->dst, f->dport, &f->first, &d);
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

	err_t e = take_guest(f, p);

	if (e != ERR_OK)
		return e;
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
			stack_flow_abort(f);
			return ERR_ABRT;
		}
		sent += (size_t)r;
		if ((size_t)r < q->len)
			break;
	}
	if (sent < total) {
		if (!f->up && !(f->up = malloc(UP_CAP))) {
			pbuf_free(p);
			stack_flow_abort(f);
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

/* Queue host bytes for the guest; what lwIP does not take now (ERR_MEM)
 * is kept in f->down and reading stops until lwIP's send buffer drains.
 * 0, or -1 when f was aborted. */
static int to_guest(struct flow *f, const uint8_t *b, size_t n)
{
	ssize_t w = guest_write(f, b, n);
	size_t rest;

	if (w < 0) {
		stack_flow_abort(f);
		return -1;
	}
	f->s->st.bytes_to_guest += (size_t)w;
	f->bytes_down += (size_t)w;
	rest = n - (size_t)w;
	if (rest > 0) {
		if (f->down == b) {
			memmove(f->down, f->down + w, rest);
		} else {
			free(f->down);
			if (!(f->down = malloc(rest))) {
				stack_flow_abort(f);
				return -1;
			}
			memcpy(f->down, b + w, rest);
		}
		f->down_len = rest;
		f->reading = false;
		budget_sync(f);
		return 0;
	}
	if (f->down == b) {
		free(f->down);
		f->down = NULL;
		f->down_len = 0;
	}
	budget_sync(f);
	return 0;
}

static err_t on_sent(void *arg, struct tcp_pcb *pcb, u16_t len)
{
	struct flow *f = arg;

	if (!f)
		return ERR_OK;
	budget_sync(f); /* the guest acknowledged len bytes */
	if (f->ic && !intercept_upstream_direct(f->ic))
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

void stack_flow_on_err(void *arg, err_t err)
{
	struct flow *f = arg;

	if (!f)
		return;
	f->pcb = NULL; /* lwIP has freed it already */
	if (f->state == FL_GUEST_CONNECTING) {
		f->s->st.fwd_refused++; /* the guest reset our SYN: nothing listens */
		f->err = ECONNREFUSED;
	}
	stack_flow_free(f, true);
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

/* Read the host's bytes for the guest; ev: the epoll events that said
 * so.  With EPOLLRDHUP (the host closed its end) a read that took all
 * there was is followed by one more for the EOF, so that lwIP sends the
 * FIN in the segment with the last bytes: one frame, and one wakeup of
 * the guest, fewer per short connection. */
static void read_host(struct flow *f, uint32_t ev)
{
	bool eof_next = (ev & (EPOLLRDHUP | EPOLLHUP)) && !f->ic, spoke = false;
	size_t max;
	ssize_t r;

	if (f->ic && !intercept_upstream_direct(f->ic)) {
		ic_read_host(f);
		return;
	}
	for (int round = 0;; round++) {
		if (!f->pcb || f->down_len > 0 || f->host_eof)
			return;
		/* Stop early rather than meet ERR_MEM with bytes already read. */
		max = guest_room(f);
		if (max == 0) {
			f->reading = false;
			if (round > 0)
				break;
			flow_events(f);
			return;
		}
		r = recv(f->fd, f->s->rx, max, MSG_DONTWAIT);
		if (r < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				stack_flow_abort(f);
				return;
			}
			if (round > 0)
				break; /* bytes of round 0 are queued */
			return;
		}
		spoke = spoke || r > 0;
		/* The server spoke before the client said anything (SSH,
		 * SMTP): the client names nothing kbox reads.  With bytes
		 * already held, the judgement waits for the rest of them. */
		if (r > 0 && f->peek && f->up_len == 0)
			f->peek = false;
		if (r == 0) {
			f->host_eof = true;
			f->reading = false;
			maybe_fin(f);
			break;
		}
		if (to_guest(f, f->s->rx, (size_t)r) < 0)
			return;
		if (!eof_next || round > 0 || (size_t)r == max || f->down_len > 0)
			break;
	}
	if (f->pcb)
		tcp_output(f->pcb);
	if (f->ic) {
		/* The server spoke before the guest's first bytes were
		 * judged: not TLS from a client, so never intercepted. */
		if (spoke)
			intercept_server_spoke(f->ic);
		ic_pump(f);
		return;
	}
	flow_events(f);
	flow_maybe_done(f);
}

static struct tcp_pcb *listener(struct stack *s, uint16_t port)
{
	struct tcp_pcb *pcb, *l;

	if (s->listen[port])
		return s->listen[port];
	pcb = tcp_new_ip_type(IPADDR_TYPE_ANY); /* IPv4 and IPv6 */
	if (!pcb)
		return NULL;
	ip_set_option(pcb, SOF_REUSEADDR);
	if (tcp_bind(pcb, IP_ANY_TYPE, port) != ERR_OK) {
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

	for (pcb = tcp_active_pcbs; pcb; pcb = pcb->next)
		if (pcb->state == SYN_RCVD && pcb_is_flow(pcb, f))
			return pcb;
	return NULL;
}

void stack_wake_lwip(void *arg)
{
}

bool stack_tcp_timer_running(void)
{
	return tcp_active_pcbs || tcp_tw_pcbs;
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
	unsigned kept = 0;

	/* Newest first: lwIP puts a pcb at the head when it enters TIME-WAIT. */
	for (pcb = tcp_tw_pcbs; pcb; pcb = next) {
		next = pcb->next;
		if (pcb_is_flow(pcb, f) || ++kept > TIME_WAIT_MAX)
			tcp_abort(pcb); /* a TIME-WAIT pcb is only unlinked and freed, no reset */
	}
}

void stack_flow_open(struct flow *f)
{
	struct tcp_pcb *pcb = f->pcb;

	/* The SYN or SYN-ACK offered at most BUDGET_FLOOR (its window is never
	 * scaled), though lwIP took the full TCP_WND once both sides agreed
	 * on scaling; start from what was offered, and let the window grow
	 * as the budget allows (recved). */
	if (pcb->rcv_wnd > BUDGET_FLOOR) {
		pcb->rcv_wnd = pcb->rcv_ann_wnd = BUDGET_FLOOR;
		pcb->rcv_ann_right_edge = pcb->rcv_nxt + BUDGET_FLOOR;
	}
	f->up_allot = pcb->rcv_wnd;
	budget_sync(f);
	tcp_arg(f->pcb, f);
	tcp_recv(f->pcb, on_recv);
	tcp_sent(f->pcb, on_sent);
	tcp_err(f->pcb, stack_flow_on_err);
	tcp_nagle_disable(f->pcb);
	f->state = FL_OPEN;
	f->reading = true;
	flow_events(f);
}

/* The host connect() succeeded: let lwIP answer the held SYN. */
static void flow_connected(struct flow *f)
{
	struct stack *s = f->s;
	bool timer = stack_tcp_timer_running();

	if (!listener(s, f->ft.key.dport))
		goto fail;
	drop_time_wait(f);
	feed_tcp(s, f->syn, f->syn_len);
	/* If the new pcb started lwIP's TCP timer, wake its thread so that
	 * it sees the timer now rather than at its next one-second tick. */
	if (!timer)
		tcpip_try_callback(stack_wake_lwip, NULL);
	free(f->syn);
	f->syn = NULL;
	f->pcb = find_syn_rcvd(f);
	if (!f->pcb)
		goto fail;
	stack_flow_open(f);
	return;
fail:
	s->st.tcp_failed++;
	stack_send_rst(s, &f->syn_pkt);
	stack_flow_free(f, true);
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
		stack_send_rst(f->s, &f->syn_pkt);
		stack_flow_free(f, false);
		return;
	}
	flow_connected(f);
}

/* Decide a new connection, in the name our DNS gave the address (or the
 * host alias), and what to dial. */
static void decide(struct stack *s, const struct policy_addr *dst, uint16_t port, struct policy_addr *dial,
		   const char **name, struct policy_decision *d)
{
	const char *names[DNS_MEMO_MAX_NAMES];
	size_t n, i;

	*dial = *dst;
	*name = NULL;
	if (stack_is_gateway(dst)) {
		static const uint8_t lo[4] = {127, 0, 0, 1};

		/* Either gateway address: the host's IPv4 loopback, where
		 * servers for the guest listen (docs/network.md). */
		memset(dial, 0, sizeof *dial);
		dial->family = 4;
		memcpy(dial->b, lo, 4);
		*name = POLICY_HOST_NAME;
		policy_check(s->cfg.policy, *name, dial, port, d);
		return;
	}
	n = dns_memo_names(&s->memo, dst, stack_now_ms() / 1000, names, DNS_MEMO_MAX_NAMES);
	if (n == 0) {
		policy_check(s->cfg.policy, NULL, dial, port, d);
		return;
	}
	/* Several names may share an address (CDNs): any that is allowed
	 * lets the connection through; otherwise the most recent one's
	 * denial is reported. */
	for (i = n; i-- > 0;) {
		policy_check(s->cfg.policy, names[i], dial, port, d);
		*name = names[i];
		/* The host's own address is refused whatever the name (and
		 * each judgement asks the kernel again: hostaddr.h). */
		if (d->allow || d->why == POLICY_WHY_HOST)
			return;
	}
}

static void tcp_new_conn(struct stack *s, const struct frame_pkt *p)
{
	struct policy_addr dst = {.family = p->ipv}, dial;
	struct policy_decision d;
	struct sockaddr_storage ss;
	socklen_t sl;
	const char *name;
	struct flow *f;
	int r;

	memcpy(dst.b, p->dst, frame_addr_len(p));
	decide(s, &dst, p->dport, &dial, &name, &d);
	/* SYN|FIN opens nothing a real client wants; lwIP would answer it
	 * with a SYN-ACK, so it is refused here whatever the destination,
	 * audited like any SYN. */
	if (d.allow && (p->tcp_flags & FRAME_TCP_FIN)) {
		/* Not a destination the guest wants, so not one to learn. */
		d = (struct policy_decision){false, POLICY_WHY_BAD_NAME, "tcp:syn-fin"};
		stack_audit_line(s, "tcp", "out", &dial, p->dport, name, &d);
	} else {
		stack_audit(s, "tcp", "out", &dial, p->dport, name, &d);
	}
	if (!d.allow) {
		s->st.tcp_denied++;
		stack_send_rst(s, p);
		return;
	}
	s->st.tcp_allowed++;
	f = calloc(1, sizeof *f);
	if (!f || !(f->syn = malloc(p->ip_len))) {
		free(f);
		stack_send_rst(s, p);
		return;
	}
	f->s = s;
	f->fd = -1;
	f->ipv = p->ipv;
	f->dst = dial;
	f->dport = p->dport;
	f->opened_ms = stack_now_ms();
	f->peek = s->judge_stated;
	f->first = d;
	if (name)
		snprintf(f->name, sizeof f->name, "%s", name);
	if (s->cfg.icpt && ic_attach(s, f, &dst) < 0) {
		free(f->syn);
		free(f);
		s->st.tcp_failed++;
		stack_send_rst(s, p);
		return;
	}
	memcpy(f->syn, p->ip, p->ip_len);
	f->syn_len = p->ip_len;
	f->syn_pkt = *p;
	f->syn_pkt.ip = NULL;
	f->syn_pkt.data = NULL;
	memcpy(f->ft.key.gip, p->src, frame_addr_len(p));
	memcpy(f->ft.key.dip, p->dst, frame_addr_len(p));
	f->ft.key.gport = p->sport;
	f->ft.key.dport = p->dport;
	if (flowtab_insert(&s->ft, &f->ft) < 0) {
		free(f->syn);
		free(f);
		s->st.tcp_failed++;
		stack_send_rst(s, p);
		return;
	}
	s->st.flows = s->ft.n;
	f->deadline_ms = stack_now_ms() + s->cfg.connect_timeout_ms;
	memset(&ss, 0, sizeof ss);
	if (dial.family == 6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(p->dport);
		memcpy(&sin6->sin6_addr, dial.b, 16);
		sl = sizeof *sin6;
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(p->dport);
		memcpy(&sin->sin_addr, dial.b, 4);
		sl = sizeof *sin;
	}
	f->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (f->fd < 0)
		goto fail;
	r = connect(f->fd, (struct sockaddr *)&ss, sl);
	/* To the host's loopback the handshake is usually over by the time
	 * connect() returns EINPROGRESS (the kernel ran it as connect let go
	 * of the socket): a second connect() says so (0) or that it is still
	 * under way (EALREADY), and saves a round through epoll before the
	 * guest gets its SYN-ACK. */
	if (r < 0 && errno == EINPROGRESS)
		r = connect(f->fd, (struct sockaddr *)&ss, sl);
	if (r == 0 || (r < 0 && errno == EISCONN)) {
		flow_connected(f);
		return;
	}
	if (errno != EINPROGRESS && errno != EALREADY)
		goto fail;
	flow_events(f);
	if (f->ev == 0)
		goto fail;
	return;
fail:
	f->err = errno ? errno : EIO;
	s->st.tcp_failed++;
	stack_send_rst(s, p);
	stack_flow_free(f, false);
}

void stack_tcp_input(struct stack *s, const struct frame_pkt *p)
{
	struct flowtab_key k;
	struct flowtab_entry *e;
	struct flow *f;

	memset(&k, 0, sizeof k);
	memcpy(k.gip, p->src, frame_addr_len(p));
	memcpy(k.dip, p->dst, frame_addr_len(p));
	k.gport = p->sport;
	k.dport = p->dport;
	e = flowtab_find(&s->ft, &k);
	f = e ? (struct flow *)((char *)e - offsetof(struct flow, ft)) : NULL;
	if (f && f->state == FL_CONNECTING) {
		/* The guest gave up before the host answered; anything else
		 * (a repeated SYN) waits for the decision already under way. */
		if (p->tcp_flags & FRAME_TCP_RST)
			stack_flow_free(f, false);
		return;
	}
	/* Every segment that would open a connection is judged, whatever
	 * else it carries: lwIP's listener answers any SYN without ACK or
	 * RST (SYN|FIN too) with a SYN-ACK. */
	if (!f && (p->tcp_flags & (FRAME_TCP_SYN | FRAME_TCP_ACK | FRAME_TCP_RST)) == FRAME_TCP_SYN) {
		tcp_new_conn(s, p);
		return;
	}
	/* Open flows, and strays lwIP answers with a reset. */
	feed_tcp(s, p->ip, p->ip_len);
}

void stack_flow_event(struct flow *f, uint32_t ev)
{
	if (f->state == FL_CONNECTING) {
		connect_done(f);
		return;
	}
	if (f->ic && f->state == FL_OPEN) {
		if ((ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) && ic_pump(f) != IC_OK)
			return;
		if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
			read_host(f, ev);
		return;
	}
	if ((ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) && f->up_len > 0 && (flush_up(f) < 0 || flow_maybe_done(f)))
		return;
	if ((ev & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) && f->reading)
		read_host(f, ev);
}

void stack_tcp_timeouts(struct stack *s, uint64_t now)
{
	size_t i;

	for (i = 0; i < s->ft.cap; i++) {
		struct flowtab_entry *e = s->ft.slots[i];
		struct flow *f = e ? (struct flow *)((char *)e - offsetof(struct flow, ft)) : NULL;

		if (f && f->state == FL_CONNECTING && now >= f->deadline_ms) {
			s->st.tcp_failed++;
			f->err = ETIMEDOUT;
			stack_send_rst(s, &f->syn_pkt);
			stack_flow_free(f, false);
		} else if (f && f->state == FL_GUEST_CONNECTING && now >= f->deadline_ms) {
			s->st.fwd_refused++; /* the guest never answered */
			f->err = ETIMEDOUT;
			stack_flow_abort(f);
		}
	}
}

void stack_flow_abort_all(struct stack *s)
{
	size_t i;

	for (i = 0; i < s->ft.cap; i++) {
		struct flowtab_entry *e = s->ft.slots[i];

		if (e)
			stack_flow_abort((struct flow *)((char *)e - offsetof(struct flow, ft)));
	}
}
