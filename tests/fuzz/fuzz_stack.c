/* Input: a sequence of Ethernet frames from a hostile guest, each as a
 * control byte, a 16-bit length and that many bytes, fed to a fresh stack
 * (stack_input) per input.  Control bit 0 makes the frame plausible first
 * (our MACs, the guest's source address, right lengths and checksums) so
 * that the fuzzer gets past parsing into ARP, DNS, UDP refusals and TCP;
 * bit 1 runs stack_dispatch after the frame; with bit 0, bit 2 aims a TCP
 * segment at the gateway's allowed port and bit 3 gives it the sequence
 * and acknowledgment numbers the stack expects next (from the last
 * segment it sent), so inputs can finish handshakes and move data
 * through the pump; with bit 0, bit 4 makes the frame IPv6 instead
 * (the guest's IPv6 source, the gateway's IPv6 address with bit 2,
 * hop limit 255 so that neighbor solicitations count).  The stack merges its TCP segments (output_gso);
 * every merged frame must cut back (gso_segment) into segments.  Nothing
 * may crash, leak, hang or write a segment longer than FRAME_MAX.
 *
 * No traffic leaves the process except to loopback (TESTING.md): the
 * policy is an allowlist whose only rule opens one port of
 * host.kbox.internal, served by a listener of our own on 127.0.0.1; every
 * other address is denied before any connect().  The resolver answers
 * from a table and never touches the network. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/frame.h"
#include "lib/gso.h"
#include "netstack/stack.h"

static const uint8_t gw_mac[6] = STACK_GATEWAY_MAC;
static const uint8_t guest_mac[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
static const uint8_t guest_ip[4] = STACK_GUEST_IP;

static struct policy pol;
static struct audit au = {.fd = -1};
static struct stack_host hosts[1];
static int lfd = -1; /* host.kbox.internal's allowed port */
static uint16_t lport;
static uint32_t next_seq, next_ack; /* what the stack expects from the guest next */

static void output(void *ctx, const uint8_t *frame, size_t len)
{
	struct frame_pkt p;

	if (len > FRAME_MAX || (len > 0 && !frame))
		abort();
	if (frame_parse(frame, len, &p) == 0 && (p.ipv == 4 || p.ipv == 6) && p.proto == FRAME_IP_TCP) {
		next_seq = p.ack;
		next_ack = p.seq + (uint32_t)p.data_len + !!(p.tcp_flags & FRAME_TCP_SYN) + !!(p.tcp_flags & FRAME_TCP_FIN);
	}
}

static void cut_out(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len)
{
	output(ctx, frame, len);
}

/* The stack merges its TCP segments (lib/gso.h): each merged frame
 * must cut back into segments as a guest's kernel would cut it. */
static void output_gso(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len)
{
	static uint8_t seg[FRAME_MAX];

	if (len > GSO_FRAME_MAX || gso_segment(h, frame, len, seg, sizeof seg, cut_out, ctx) < 0)
		abort();
}

/* Documentation addresses only: blocked as a class, never dialled. */
static int resolve(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out, size_t max, size_t *n)
{
	*n = 0;
	if (strcmp(name, "a.fuzz.test") != 0)
		return DNS_RCODE_NXDOMAIN;
	if (max == 0)
		return DNS_RCODE_NOERROR;
	out[0].ttl = 60;
	if (qtype == DNS_TYPE_A) {
		out[0].addr.family = 4;
		memcpy(out[0].addr.b, (const uint8_t[]){192, 0, 2, 1}, 4);
	} else {
		out[0].addr.family = 6;
		memset(out[0].addr.b, 0, 16);
		memcpy(out[0].addr.b, (const uint8_t[]){0x20, 0x01, 0x0d, 0xb8}, 4);
		out[0].addr.b[15] = 1;
	}
	*n = 1;
	return DNS_RCODE_NOERROR;
}

static void setup(void)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sin;
	char rule[64], err[128];

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof sin) < 0 || listen(lfd, 64) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sin, &sl) < 0)
		abort();
	lport = ntohs(sin.sin_port);
	policy_init(&pol, POLICY_MODE_ALLOWLIST);
	snprintf(rule, sizeof rule, "%s:%u", POLICY_HOST_NAME, ntohs(sin.sin_port));
	if (policy_add_rule(&pol, rule, err, sizeof err) < 0 || policy_add_rule(&pol, "*.fuzz.test:443", err, sizeof err) < 0 ||
	    policy_add_rule(&pol, "deny:evil.fuzz.test", err, sizeof err) < 0)
		abort();
	if (stack_host_parse("pinned.fuzz.test:198.51.100.7", &hosts[0], err, sizeof err) < 0)
		abort();
}

/* The IPv6 side of plausible: f[0, len) as an IPv6 packet from the
 * guest's address, its upper-layer checksum right. */
static void plausible6(uint8_t *f, size_t len, uint8_t ctl)
{
	static const uint8_t gw6[16] = STACK_GATEWAY_IP6, guest6[16] = STACK_GUEST_IP6;
	uint8_t *ip = f + FRAME_ETH_HLEN, *l4 = ip + 40, ph[40];
	size_t l4len, off;
	uint32_t sum = 0;
	size_t i;

	frame_put16(f + 12, FRAME_ETH_IPV6);
	if (len < FRAME_ETH_HLEN + 40)
		return;
	l4len = len - FRAME_ETH_HLEN - 40;
	ip[0] = 0x60;
	frame_put16(ip + 4, (unsigned)l4len);
	ip[7] = 255;
	memcpy(ip + 8, guest6, 16);
	if (ip[6] == FRAME_IP_TCP && l4len >= 20 && (ctl & 4)) {
		memcpy(ip + 24, gw6, 16);
		frame_put16(l4 + 2, lport);
	}
	if (ip[6] == FRAME_IP_TCP && l4len >= 20 && (ctl & 8)) {
		frame_put32(l4 + 4, next_seq);
		frame_put32(l4 + 8, next_ack);
	}
	if (ip[6] == FRAME_IP_UDP && l4len >= 8)
		frame_put16(l4 + 4, (unsigned)l4len);
	off = ip[6] == FRAME_IP_TCP ? 16 : ip[6] == FRAME_IP_UDP ? 6 : ip[6] == FRAME_IP_ICMP6 ? 2 : 0;
	if (!off || l4len < off + 2)
		return;
	memcpy(ph, ip + 8, 32);
	frame_put32(ph + 32, (uint32_t)l4len);
	ph[36] = ph[37] = ph[38] = 0;
	ph[39] = ip[6];
	for (i = 0; i < 40; i += 2)
		sum += (uint32_t)(ph[i] << 8 | ph[i + 1]);
	frame_put16(l4 + off, 0);
	frame_put16(l4 + off, frame_csum(l4, l4len, sum));
}

/* Make f[0, len) look like the guest's: addresses, lengths, checksums;
 * ctl as in the comment at the top. */
static void plausible(uint8_t *f, size_t len, uint8_t ctl)
{
	static const uint8_t gw[4] = STACK_GATEWAY_IP;
	uint8_t *ip = f + FRAME_ETH_HLEN, ph[12];
	size_t hl, tot, l4len;
	uint32_t sum = 0;
	uint8_t *l4;
	size_t i;

	if (len < FRAME_ETH_HLEN)
		return;
	memcpy(f, gw_mac, 6);
	memcpy(f + 6, guest_mac, 6);
	if (f[12] == (FRAME_ETH_ARP >> 8) && f[13] == (FRAME_ETH_ARP & 0xff))
		return;
	if (ctl & 16) {
		plausible6(f, len, ctl);
		return;
	}
	frame_put16(f + 12, FRAME_ETH_IPV4);
	if (len < FRAME_ETH_HLEN + 20)
		return;
	ip[0] = (ip[0] & 0xf) < 5 ? 0x45 : (uint8_t)(0x40 | (ip[0] & 0xf));
	hl = (size_t)(ip[0] & 0xf) * 4;
	tot = len - FRAME_ETH_HLEN;
	if (hl > tot) {
		ip[0] = 0x45;
		hl = 20;
	}
	frame_put16(ip + 2, (unsigned)tot);
	ip[6] &= 0x40; /* no fragments */
	ip[7] = 0;
	memcpy(ip + 12, guest_ip, 4);
	frame_put16(ip + 10, 0);
	frame_put16(ip + 10, frame_csum(ip, hl, 0));
	l4 = ip + hl;
	l4len = tot - hl;
	memcpy(ph, ip + 12, 8);
	ph[8] = 0;
	ph[9] = ip[9];
	frame_put16(ph + 10, (unsigned)l4len);
	for (i = 0; i < 12; i += 2)
		sum += (uint32_t)(ph[i] << 8 | ph[i + 1]);
	if (ip[9] == FRAME_IP_TCP && l4len >= 20) {
		if (ctl & 4) {
			memcpy(ip + 16, gw, 4);
			frame_put16(l4 + 2, lport);
			frame_put16(ip + 10, 0);
			frame_put16(ip + 10, frame_csum(ip, hl, 0));
			memcpy(ph + 4, gw, 4);
			sum = 0;
			for (i = 0; i < 12; i += 2)
				sum += (uint32_t)(ph[i] << 8 | ph[i + 1]);
		}
		if (ctl & 8) {
			frame_put32(l4 + 4, next_seq);
			frame_put32(l4 + 8, next_ack);
		}
		frame_put16(l4 + 16, 0);
		frame_put16(l4 + 16, frame_csum(l4, l4len, sum));
	} else if (ip[9] == FRAME_IP_UDP && l4len >= 8) {
		frame_put16(l4 + 4, (unsigned)l4len);
		frame_put16(l4 + 6, 0);
		frame_put16(l4 + 6, frame_csum(l4, l4len, sum));
	} else if (ip[9] == FRAME_IP_ICMP && l4len >= 8) {
		frame_put16(l4 + 2, 0);
		frame_put16(l4 + 2, frame_csum(l4, l4len, 0));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t frame[FRAME_MAX + 64];
	struct stack_config cfg = {
		.policy = &pol,
		.audit = &au,
		.output_gso = output_gso,
		.resolve = resolve,
		.hosts = hosts,
		.nhosts = 1,
		.connect_timeout_ms = 100,
	};
	struct stack *s;
	int fd;

	if (lfd < 0)
		setup();
	if (stack_create(&cfg, &s) < 0)
		abort();
	while (size >= 3) {
		uint8_t ctl = data[0];
		size_t len = (size_t)(data[1] << 8 | data[2]) % sizeof frame;

		data += 3;
		size -= 3;
		if (len > size)
			len = size;
		memcpy(frame, data, len);
		data += len;
		size -= len;
		if (ctl & 1)
			plausible(frame, len, ctl);
		stack_input(s, frame, len);
		if (ctl & 2)
			stack_dispatch(s);
		/* Take what connected to our listener, so its queue never fills. */
		while ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
			close(fd);
	}
	stack_dispatch(s);
	stack_destroy(s);
	while ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
		close(fd);
	return 0;
}
