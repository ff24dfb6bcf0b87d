/* kbox's network stack for the guest (docs/network.md): the guest's only
 * peer.  It takes the guest's Ethernet frames (stack_input) and sends frames
 * back through a callback, so any link works: a TAP device in tests,
 * virtio-net in the VM.
 *
 * Fixed addressing (the guest configures itself to match):
 *   gateway   10.0.2.2/24, MAC 52:55:0a:00:02:02; answers ARP for every
 *             address of 10.0.2.0/24 except the guest's, ICMP echo, and
 *             DNS on UDP port 53 (questions for the host resolver capped
 *             at STACK_DNS_PER_SEC, STACK_DNS_BURST at once, and STACK_DNS_INFLIGHT
 *             waiting for an answer: REFUSED beyond);
 *   guest     10.0.2.15 (frames from any other source are dropped);
 *   IPv6      gateway fd6b:626f:7800::2/64 (answers neighbor solicitations
 *             for that address and ICMPv6 echo), guest fd6b:626f:7800::f;
 *             TCP over IPv6 goes the same way as over IPv4;
 *   host      the gateway address (either) is also POLICY_HOST_NAME: a
 *             connection to 10.0.2.2:PORT or [fd6b:626f:7800::2]:PORT is
 *             dialled to the host's 127.0.0.1:PORT and judged under that
 *             name.
 *
 * TCP to any address and port is terminated here: the guest's SYN is
 * held, the policy decides (with the name our DNS gave for the address),
 * the host socket connects, and only then does the guest get its SYN-ACK
 * (lwIP's); a denial or a failed connect is answered at once with a
 * reset.  Any segment without ACK or RST that carries SYN takes that
 * path (SYN|FIN is then always reset).  When the policy has name rules
 * that a stated name could trip (policy_judges_stated_names), the guest's
 * first bytes are held until the names in them (TLS SNI, HTTP Host:
 * netstack/peek.h) are judged; a refusal resets both sides before any
 * byte went upstream.  Every decision goes to the audit log.  Bytes are
 * then copied both ways with backpressure.  UDP other than DNS to the gateway is
 * refused loudly: an ICMP port unreachable at once (so QUIC falls back to
 * TCP without waiting) and an audit line, at most STACK_UDP_LOG_BURST at
 * once and STACK_UDP_LOG_PER_SEC a second after that, so a flood cannot fill
 * the disk.  DNS is IPv4 only (AAAA questions are answered there); IPv4
 * fragments, IPv6 extension headers (and so MLD) are dropped.
 *
 * Port forwarding (stack_forward_add): kbox listens on a host loopback
 * address; each accepted connection becomes a TCP connection from the
 * gateway to the guest's port (lwIP's tcp_connect), pumped like an
 * outgoing one.  The guest refusing it closes the host connection.
 *
 * DNS questions for the host resolver are answered asynchronously: the
 * resolver callback runs on one of STACK_DNS_WORKERS threads, without the
 * stack's lock, and the reply is sent from stack_dispatch once the answer is
 * in, so one slow name stalls neither the other questions nor any TCP
 * connection.
 *
 * lwIP (Debian's, NO_SYS=0) is process-wide: one stack at a time.  Its
 * own thread runs the TCP timers; all stack state is guarded by lwIP's
 * core lock, so the output callback may run on that thread too.  The
 * resolver threads are process-wide as well; the first question that
 * needs them starts them, from the thread that calls stack_input, so they
 * share its sandbox (kbox's lock-down must allow that thread to make
 * threads, as it does). */
#ifndef KBOX_NETSTACK_STACK_H
#define KBOX_NETSTACK_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "lib/gso.h"
#include "netstack/audit.h"
#include "netstack/dns.h"
#include "netstack/intercept.h"
#include "netstack/policy.h"

#define STACK_GATEWAY_IP {10, 0, 2, 2}
#define STACK_GUEST_IP {10, 0, 2, 15}
#define STACK_PREFIX_LEN 24
#define STACK_GATEWAY_IP6 {0xfd, 0x6b, 0x62, 0x6f, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}
#define STACK_GUEST_IP6 {0xfd, 0x6b, 0x62, 0x6f, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0f}
#define STACK_PREFIX6_LEN 64
#define STACK_GATEWAY_MAC {0x52, 0x55, 0x0a, 0x00, 0x02, 0x02}
#define STACK_DNS_PORT 53
#define STACK_MAX_FLOWS 4096u           /* TCP connections at once */
#define STACK_CONNECT_TIMEOUT_MS 10000u /* host connect() before the guest gets a reset */
#define STACK_MAX_FORWARDS 32u          /* -p options */
#define STACK_MAX_HOSTS 256u            /* --add-host entries */
#define STACK_UDP_LOG_BURST 20u         /* audit lines for refused UDP, at once ... */
#define STACK_UDP_LOG_PER_SEC 5u        /* ... and then per second */
#define STACK_DNS_BURST 200u            /* questions for the resolver at once ... */
#define STACK_DNS_PER_SEC 50u           /* ... and then per second; beyond: REFUSED */
#define STACK_DNS_INFLIGHT 256u         /* questions waiting for the resolver; beyond: REFUSED */
#define STACK_DNS_WORKERS 8u            /* threads running the resolver callback */

/* Send one frame of len bytes (at most 1514) to the guest.  Called with
 * the stack's lock held, from stack_input, stack_dispatch or lwIP's thread. */
typedef void (*stack_output_fn)(void *ctx, const uint8_t *frame, size_t len);

/* With segmentation offload: send frame[0, len) (at most GSO_FRAME_MAX
 * bytes) to the guest as described by *h, a virtio_net_hdr that is all
 * zero for a plain frame (lib/gso.h).  Called like stack_output_fn. */
typedef void (*stack_output_gso_fn)(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len);

/* Resolve name (allowed by the policy) for qtype (DNS_TYPE_A or
 * DNS_TYPE_AAAA): store at most max addresses with their TTLs in out and
 * the count in *n, and return a DNS rcode (DNS_RCODE_NOERROR with *n == 0
 * for "no such records"), or a negative errno for SERVFAIL.  Called on
 * one of the stack's resolver threads without the stack's lock, possibly
 * on several at once (so it must be thread-safe); it may block, which
 * delays only its own question, but each call holds one of the
 * STACK_DNS_WORKERS threads, so it should give up after a few seconds. */
typedef int (*stack_resolve_fn)(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out, size_t max,
			     size_t *n);

/* A name pinned to an address (--add-host): our DNS answers it from here
 * and never asks the resolver; connections are still judged by the
 * policy, under the name. */
struct stack_host {
	char name[POLICY_NAME_MAX + 1]; /* normalised */
	struct policy_addr addr;
};

/* Parse "NAME:ADDR" (ADDR IPv4, or IPv6 bare or in brackets) into *h.
 * NAME must be a DNS name, neither numeric nor POLICY_HOST_NAME.  0, or
 * -EINVAL with a message for the user in err (without the option's or
 * the setting's name: the caller adds it). */
int stack_host_parse(const char *spec, struct stack_host *h, char *err, size_t errlen);

struct stack_config {
	const struct policy *policy; /* must outlive the stack */
	const struct stack_host *hosts; /* pinned names, nhosts of them; must outlive the stack */
	size_t nhosts;
	struct audit *audit;      /* may be "logging off" (fd -1), not NULL */
	struct audit_learn *learn; /* --learn: every decision recorded too; NULL: off */
	stack_output_fn output;
	void *output_ctx;
	/* Set when the link peer segments TCPv4 and completes checksums
	 * (a TAP with IFF_VNET_HDR, virtio-net, which cuts them again for a
	 * driver without GUEST_TSO4): every frame then goes here instead of
	 * output (with output_ctx), and the TCP segments one call into the
	 * stack sends for one connection leave as one frame of up to
	 * GSO_FRAME_MAX bytes. */
	stack_output_gso_fn output_gso;
	/* The guest's MAC when known in advance (a NIC we made), so that a
	 * forwarded connection reaches a guest that has sent nothing yet
	 * without an ARP round trip and a SYN retransmission; NULL: learnt
	 * from the guest's frames. */
	const uint8_t *guest_mac;
	stack_resolve_fn resolve;
	void *resolve_ctx;
	/* Questions per second for the resolver (burst: twice that);
	 * 0: STACK_DNS_PER_SEC and STACK_DNS_BURST. */
	unsigned dns_per_sec;
	unsigned connect_timeout_ms; /* 0: STACK_CONNECT_TIMEOUT_MS */
	/* TLS interception and secret substitution for outgoing TCP, or
	 * NULL for none; must outlive the stack. */
	const struct intercept_config *icpt;
	/* Bytes the TCP proxy may hold across all connections, both ways,
	 * beyond each connection's floor (netstack/budget.h); 0:
	 * BUDGET_CAP_DEFAULT (256 MiB). */
	size_t buf_cap;
};

struct stack;

/* One forwarded port.  host must be a loopback address (127.0.0.0/8 or
 * ::1): kbox never listens where other machines could reach it. */
struct stack_forward {
	struct policy_addr host;
	uint16_t host_port; /* 0: any free port; stack_forward_add stores the one it got */
	uint16_t guest_port;
};

/* Parse "[ADDR:]HOSTPORT:GUESTPORT" (ADDR defaults to 127.0.0.1; an IPv6
 * one is written "[::1]"; HOSTPORT may be 0, GUESTPORT may not) into *fw.
 * 0, or -EINVAL with a message for the user in err. */
int stack_forward_parse(const char *spec, struct stack_forward *fw, char *err, size_t errlen);

/* Counters for tests and `kbox ps`. */
struct stack_stats {
	uint64_t frames_in, frames_dropped;
	uint64_t tcp_allowed, tcp_denied, tcp_failed; /* connect decisions and failed connects */
	uint64_t dns_queries, dns_rate_refused; /* questions; refused for asking too fast */
	uint64_t dns_busy_refused; /* refused: STACK_DNS_INFLIGHT questions were waiting */
	size_t dns_inflight;       /* questions waiting for the resolver now */
	uint64_t bytes_to_host, bytes_to_guest;
	uint64_t tls_intercepted, tls_refused; /* TLS connections intercepted; refused or failed */
	uint64_t fwd_accepted, fwd_refused; /* forwarded connections; refused by the guest or failed */
	uint64_t udp_refused;               /* datagrams other than DNS */
	size_t flows; /* open now */
	size_t buffered, buffered_peak; /* the TCP proxy's charges now and at most (netstack/budget.h) */
};

/* Start lwIP (first call only) and a stack with cfg (copied).  0,
 * -EBUSY (a stack exists), -EINVAL (no policy, audit, or neither output
 * nor output_gso) or a negative errno. */
int stack_create(const struct stack_config *cfg, struct stack **out);

/* Tear down every connection (hosts and guest get resets), drop the DNS
 * questions not answered yet (waiting for resolver calls already under
 * way to return, so the resolver's ctx may be freed afterwards) and free
 * the stack; lwIP and the resolver threads stay for the next stack_create. */
void stack_destroy(struct stack *s);

/* Handle one frame from the guest.  Never fails: bad frames are counted
 * and dropped. */
void stack_input(struct stack *s, const uint8_t *frame, size_t len);

/* A descriptor that becomes readable when host sockets need service; the
 * caller polls it and then calls stack_dispatch. */
int stack_fd(const struct stack *s);

/* Service the host sockets that are ready and the connect timeouts, and
 * send the DNS replies whose answers came in; never blocks. */
void stack_dispatch(struct stack *s);

/* Listen on fw->host:fw->host_port (storing the port bound when it was
 * 0) and forward what connects there to fw->guest_port.  Call before any
 * sandboxing that forbids bind/listen.  0, -EINVAL (not loopback, guest
 * port 0), -ENOSPC (STACK_MAX_FORWARDS reached) or the errno of
 * socket/bind/listen (-EADDRINUSE...). */
int stack_forward_add(struct stack *s, struct stack_forward *fw);

/* Copy the counters into *st. */
void stack_get_stats(struct stack *s, struct stack_stats *st);

#endif
