/* What the four files of the network stack share (stack.c: creation,
 * input and dispatch; stack_tcp.c: the TCP proxy; stack_fwd.c: forwarded
 * ports; stack_dns.c: the DNS answerer and its resolver threads).  Not
 * for anyone else: the public face is stack.h.
 *
 * Every function here runs with lwIP's core lock held (stack.c's header
 * comment), except where its comment says otherwise.  This header
 * includes none of the four, and each of them includes only it, so the
 * seams cannot close into a circle. */
#ifndef KBOX_NETSTACK_STACK_PRIV_H
#define KBOX_NETSTACK_STACK_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lwip/netif.h"
#include "lwip/tcp.h"

#include "lib/frame.h"
#include "lib/gso.h"
#include "netstack/budget.h"
#include "netstack/flowtab.h"
#include "netstack/intercept.h"
#include "netstack/stack.h"

#define STACK_RX_MAX (256u * 1024) /* host bytes read at once for a flow (several tcp_writes) */

static const uint8_t gw_ip[4] = STACK_GATEWAY_IP;
static const uint8_t guest_ip[4] = STACK_GUEST_IP;
static const uint8_t gw_mac[6] = STACK_GATEWAY_MAC;
static const uint8_t gw_ip6[16] = STACK_GATEWAY_IP6;
static const uint8_t guest_ip6[16] = STACK_GUEST_IP6;

/* Whether addr (a struct policy_addr) is the gateway, which stands for the host. */
static inline bool stack_is_gateway(const struct policy_addr *a)
{
	return a->family == 6 ? memcmp(a->b, gw_ip6, 16) == 0 : memcmp(a->b, gw_ip, 4) == 0;
}

enum flow_state {
	FL_CONNECTING,       /* outgoing: the host connect() is under way, the guest's SYN held */
	FL_GUEST_CONNECTING, /* forwarded: our SYN is on its way to the guest */
	FL_OPEN,             /* bytes flow both ways */
};

struct flow {
	struct flowtab_entry ft;
	struct stack *s;
	enum flow_state state;
	bool inbound;         /* from a forwarded port */
	uint8_t ipv;          /* 4 or 6: the guest's side (forwarded ports: 4) */
	/* For the close line of the audit log. */
	struct policy_addr dst;  /* outgoing: the address dialled; forwarded: the guest's */
	uint16_t dport;
	char name[POLICY_NAME_MAX + 1]; /* "" without a name */
	uint64_t opened_ms, bytes_up, bytes_down;
	int err; /* why it failed (an errno), for the close line; 0: it did not */
	int fd;               /* host socket */
	struct tcp_pcb *pcb;  /* NULL until the SYN went to lwIP, and once lwIP freed it */
	uint32_t ev;          /* epoll events registered; 0: not registered */
	uint64_t deadline_ms; /* FL_CONNECTING */
	uint8_t *syn;         /* the guest's SYN (IPv4 packet) while connecting */
	size_t syn_len;
	struct frame_pkt syn_pkt; /* its parsed fields, pointers cleared, to answer with a reset */
	/* guest -> host */
	uint8_t *up;
	size_t up_off, up_len;
	bool guest_fin, host_shut;
	/* host -> guest */
	uint8_t *down; /* read from the host, refused by tcp_write */
	size_t down_len;
	bool reading, host_eof, fin_sent;
	/* The byte budget (netstack/budget.h): the receive window plus the
	 * guest's bytes not yet taken by the host (what tcp_recved has not
	 * given back), and the flow's whole charge in s->nb. */
	size_t up_allot, charge;
	/* TLS interception (netstack/intercept.h), outgoing flows only, until
	 * it splices: then f->up holds guest ciphertext it has not taken
	 * and f->down (IC_DOWN_CAP) upstream ciphertext it has not taken. */
	struct icpt *ic;
	bool ic_guest_told, ic_host_told;
	/* The names the client states (netstack/peek.h) are still to be
	 * judged: its bytes wait in f->up, none go upstream, until they are
	 * (policy_check_stated against first, the decision at the SYN). */
	bool peek;
	struct policy_decision first;
};

/* A token bucket: rate tokens a second, at most burst saved up.  Kept
 * in milli-tokens so that integer arithmetic is exact enough. */
struct bucket {
	uint64_t mtokens, last_ms;
	unsigned rate, burst;
};

/* A forwarded port's listening socket. */
struct fwd {
	int fd;
	bool paused; /* out of the epoll set after running out of descriptors */
	struct stack_forward fw;
	char label[96]; /* the audit log's rule: "forward:ADDR:HOSTPORT:GUESTPORT" */
};

/* A question for the resolver threads (stack_dns.c). */
struct dq;

struct stack {
	struct stack_config cfg;
	struct fwd fwd[STACK_MAX_FORWARDS];
	size_t nfwd;
	struct netif netif;
	bool netif_added;
	struct ft ft;
	int epfd, tfd;
	uint8_t guest_mac[6];
	bool have_mac;
	struct dns_memo memo;
	struct stack_stats st;
	struct tcp_pcb **listen; /* by destination port */
	struct bucket udp_log;      /* audit lines for refused UDP */
	struct bucket dns_rate;     /* questions that need the resolver */
	struct bucket dns_rate_log; /* audit lines for questions refused by dns_rate */
	uint64_t udp_unlogged, dns_unlogged;
	int efd;             /* the resolver threads' "answers are in" */
	struct dq *dns_done; /* answered, not replied yet (guarded by rp.m, stack_dns.c) */
	unsigned dns_running; /* resolver calls under way (guarded by rp.m) */
	uint8_t tx[FRAME_MAX];
	uint8_t rx[STACK_RX_MAX];
	/* cfg.output_gso: frames go through the merger; while a call into
	 * the stack runs (round) they may wait in it, and the call flushes
	 * it before letting go of the lock. */
	struct gso *gso;
	bool round;
	bool judge_stated; /* policy_judges_stated_names: new flows start with peek */
	struct budget nb;      /* the bytes every flow holds, against cfg.buf_cap */
};

/* ---- stack.c ---- */

/* Milliseconds on the monotonic clock (timeouts, buckets, the DNS
 * memory) and on the wall clock (the audit log's time stamps). */
uint64_t stack_now_ms(void);
uint64_t stack_wall_ms(void);

/* Start b full: burst tokens, rate more a second, at now (stack_now_ms). */
void stack_bucket_init(struct bucket *b, unsigned rate, unsigned burst, uint64_t now);

/* Take one token from b if it has one at now: true if it had. */
bool stack_bucket_take(struct bucket *b, uint64_t now);

/* Write the audit line for decision d on a connection or question
 * (direction "out", "in", or NULL for DNS; dst and name may be NULL).
 * stack_audit also tells --learn what the guest tried; stack_audit_line does
 * not, for decisions that are no destination the guest wants. */
void stack_audit_line(struct stack *s, const char *proto, const char *direction, const struct policy_addr *dst,
		   uint16_t port, const char *name, const struct policy_decision *d);
void stack_audit(struct stack *s, const char *proto, const char *direction, const struct policy_addr *dst,
	      uint16_t port, const char *name, const struct policy_decision *d);

/* Send the frame s->tx[0, n) to the guest (through the merger when the
 * guest takes merged frames). */
void stack_send_frame(struct stack *s, size_t n);

/* Answer the guest's TCP segment seg with a reset. */
void stack_send_rst(struct stack *s, const struct frame_pkt *seg);

/* ---- stack_tcp.c ---- */

/* A TCP segment from the guest (p validated, from the guest's address):
 * a new connection is judged and dialled, the rest goes to lwIP. */
void stack_tcp_input(struct stack *s, const struct frame_pkt *p);

/* The host socket of f reported ev (epoll events). */
void stack_flow_event(struct flow *f, uint32_t ev);

/* Both ends of f are connected (f->pcb set): start copying bytes. */
void stack_flow_open(struct flow *f);

/* Free f, whose pcb must be detached or gone, and write its close line.
 * reset: the host side sees a reset rather than an orderly close. */
void stack_flow_free(struct flow *f, bool reset);

/* Reset both sides of f and free it.  Safe inside f's own lwIP
 * callbacks as long as they then return ERR_ABRT. */
void stack_flow_abort(struct flow *f);

/* lwIP's error callback for a flow's pcb (arg: the flow, or NULL):
 * lwIP freed the pcb; the flow goes too. */
void stack_flow_on_err(void *arg, err_t err);

/* Reset the flows whose connect (either way) ran past its deadline at
 * now (stack_now_ms). */
void stack_tcp_timeouts(struct stack *s, uint64_t now);

/* Reset and free every flow (stack_destroy). */
void stack_flow_abort_all(struct stack *s);

/* For tcpip_try_callback: wakes lwIP's thread, so that it sees a timer
 * a new pcb started now rather than at its next tick. */
void stack_wake_lwip(void *arg);

/* Whether lwIP's TCP timer is surely running: while any pcb is active or
 * in TIME-WAIT it is (each registration arms it, and it stops only at a
 * tick that found both lists empty), so a new pcb needs no wakeup of
 * lwIP's thread (stack_wake_lwip) -- one thread switch and one contended
 * core lock fewer per connection.  Under the core lock. */
bool stack_tcp_timer_running(void);

/* ---- stack_fwd.c ---- */

/* Accept what waits on forwarded port w (a bounded number at once);
 * each becomes a connection from the gateway to the guest's port. */
void stack_fwd_accept(struct stack *s, struct fwd *w);

/* Put the forwarded ports paused for want of descriptors back into the
 * epoll set (the timer tick). */
void stack_fwd_resume(struct stack *s);

/* ---- stack_dns.c ---- */

/* A DNS question from the guest to the gateway's port 53 (p validated):
 * judged, answered at once or handed to the resolver threads. */
void stack_dns_input(struct stack *s, const struct frame_pkt *p);

/* Reply to the questions whose answers are in (the eventfd s->efd was
 * readable). */
void stack_dns_collect(struct stack *s);

/* Drop every question of s: those still queued at once, those under
 * way when their resolver call returns.  Called without the core lock. */
void stack_dns_drop_all(struct stack *s);

#endif
