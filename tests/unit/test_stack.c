/* The stack's pure parts: Ethernet/ARP/IPv4/TCP/UDP/ICMP parsing of
 * hostile frames (every truncation, oversized frames, bad header and
 * length fields, bad checksums, fragments, padding, random bytes), the
 * replies kbox builds (parsed back), and the connection table (limits,
 * stale handles).  And a forwarded port on loopback with no guest behind
 * it: the SYN the stack sends, the timeout, and the pause when the
 * process runs out of descriptors. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/frame.h"
#include "netstack/flowtab.h"
#include "netstack/stack.h"
#include "tests/lib/unit_suite.h"

static const uint8_t gmac[6] = {0x02, 0, 0, 0, 0, 0x15};
static const uint8_t wmac[6] = {0x52, 0x55, 0x0a, 0x00, 0x02, 0x02};
static const uint8_t gip[4] = {10, 0, 2, 15};
static const uint8_t wip[4] = {10, 0, 2, 2};
static const uint8_t far[4] = {93, 184, 216, 34};

/* Recompute the IPv4 header checksum and the TCP/UDP/ICMP checksum of the
 * frame f after a test changed a field. */
static void fix_sums(uint8_t *f)
{
	uint8_t *ip = f + FRAME_ETH_HLEN;
	size_t hl = (size_t)(ip[0] & 0xf) * 4, tot = (size_t)(ip[2] << 8 | ip[3]);
	uint8_t *l4 = ip + hl, ph[12];
	size_t l4len = tot - hl;
	uint32_t s = 0;
	size_t i;

	frame_put16(ip + 10, 0);
	frame_put16(ip + 10, frame_csum(ip, hl, 0));
	memcpy(ph, ip + 12, 8);
	ph[8] = 0;
	ph[9] = ip[9];
	frame_put16(ph + 10, (unsigned)l4len);
	for (i = 0; i < 12; i += 2)
		s += (uint32_t)(ph[i] << 8 | ph[i + 1]);
	if (ip[9] == FRAME_IP_TCP) {
		frame_put16(l4 + 16, 0);
		frame_put16(l4 + 16, frame_csum(l4, l4len, s));
	} else if (ip[9] == FRAME_IP_UDP) {
		frame_put16(l4 + 6, 0);
		frame_put16(l4 + 6, frame_csum(l4, l4len, s));
	} else if (ip[9] == FRAME_IP_ICMP) {
		frame_put16(l4 + 2, 0);
		frame_put16(l4 + 2, frame_csum(l4, l4len, 0));
	}
}

/* A guest TCP segment to far:443 with flags and payload len bytes. */
static size_t tcp_frame(uint8_t *f, uint8_t flags, size_t len)
{
	uint8_t *ip = f + FRAME_ETH_HLEN, *t = ip + 20;
	size_t tot = 20 + 20 + len;

	memset(f, 0, FRAME_ETH_HLEN + tot);
	memcpy(f, wmac, 6);
	memcpy(f + 6, gmac, 6);
	frame_put16(f + 12, FRAME_ETH_IPV4);
	ip[0] = 0x45;
	frame_put16(ip + 2, (unsigned)tot);
	frame_put16(ip + 6, 0x4000);
	ip[8] = 64;
	ip[9] = FRAME_IP_TCP;
	memcpy(ip + 12, gip, 4);
	memcpy(ip + 16, far, 4);
	frame_put16(t, 40000);
	frame_put16(t + 2, 443);
	t[4] = 0x11, t[5] = 0x22, t[6] = 0x33, t[7] = 0x44; /* seq */
	t[8] = 0, t[9] = 0, t[10] = 0x10, t[11] = 0x01;     /* ack */
	t[12] = 5 << 4;
	t[13] = flags;
	frame_put16(t + 14, 65535);
	memset(t + 20, 'x', len);
	fix_sums(f);
	return FRAME_ETH_HLEN + tot;
}

/* The guest asks who has tpa (the builder itself is checked by
 * port_unreach_and_arp_request below). */
static size_t arp_request(uint8_t *f, const uint8_t tpa[4])
{
	size_t n = 0;

	ck_assert_int_eq(frame_build_arp_request(gmac, gip, tpa, f, FRAME_MAX, &n), 0);
	return n;
}

START_TEST(tcp_parse_and_truncation)
{
	uint8_t f[FRAME_MAX];
	struct frame_pkt p;
	size_t n = tcp_frame(f, FRAME_TCP_SYN, 0), k;

	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.proto, FRAME_IP_TCP);
	ck_assert_uint_eq(p.sport, 40000);
	ck_assert_uint_eq(p.dport, 443);
	ck_assert_uint_eq(p.seq, 0x11223344u);
	ck_assert_uint_eq(p.tcp_flags, FRAME_TCP_SYN);
	ck_assert_uint_eq(p.ip_len, 40);
	ck_assert_mem_eq(p.dst, far, 4);
	/* Every truncation fails; none reads past the end (ASan). */
	for (k = 0; k < n; k++) {
		uint8_t *c = malloc(k ? k : 1);

		memcpy(c, f, k);
		ck_assert_int_eq(frame_parse(c, k, &p), -EPROTO);
		free(c);
	}
	/* With data, and padded frames: the IP length rules. */
	n = tcp_frame(f, FRAME_TCP_ACK | FRAME_TCP_PSH, 100);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.data_len, 100);
	ck_assert_int_eq(p.data[99], 'x');
	n = tcp_frame(f, FRAME_TCP_ACK, 0);
	memset(f + n, 0xee, 60 - n);
	ck_assert_int_eq(frame_parse(f, 60, &p), 0);
	ck_assert_uint_eq(p.data_len, 0);
}
END_TEST

START_TEST(bad_fields)
{
	uint8_t f[FRAME_MAX + 16];
	uint8_t *ip = f + FRAME_ETH_HLEN, *t = ip + 20;
	struct frame_pkt p;
	size_t n;

	/* Oversized frames, whatever they hold. */
	n = tcp_frame(f, FRAME_TCP_ACK, FRAME_MTU - 40);
	ck_assert_uint_eq(n, FRAME_MAX);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_parse(f, n + 1, &p), -EMSGSIZE);
	ck_assert_int_eq(frame_parse(f, (size_t)-1, &p), -EMSGSIZE);

#define BAD(expr, want)                                         \
	do {                                                    \
		n = tcp_frame(f, FRAME_TCP_ACK, 10);               \
		expr;                                           \
		ck_assert_int_eq(frame_parse(f, n, &p), want);     \
	} while (0)
	BAD(ip[0] = 0x44; fix_sums(f), -EPROTO);                      /* IHL 4 */
	BAD(ip[0] = 0x4f, -EPROTO);                                   /* header past the packet */
	BAD(ip[0] = 0x65; fix_sums(f), -EPROTO);                      /* version 6 */
	BAD(frame_put16(ip + 2, 19), -EPROTO);                              /* total < header */
	BAD(frame_put16(ip + 2, 71); fix_sums(f), -EPROTO);                 /* total > frame */
	BAD(frame_put16(ip + 2, 0xffff), -EPROTO);
	BAD(ip[10] ^= 1, -EPROTO);                                    /* IP checksum */
	BAD(t[16] ^= 1, -EPROTO);                                     /* TCP checksum */
	BAD(t[12] = 4 << 4; fix_sums(f), -EPROTO);                    /* data offset < 5 */
	BAD(t[12] = 15 << 4; fix_sums(f), -EPROTO);                   /* data offset past the end */
	BAD(frame_put16(ip + 6, 0x2000); fix_sums(f), -ENOTSUP);            /* more fragments */
	BAD(frame_put16(ip + 6, 0x0001); fix_sums(f), -ENOTSUP);            /* offset */
	BAD(frame_put16(ip + 6, 0x8000); fix_sums(f), -EPROTO);             /* reserved bit */
	BAD(ip[9] = 47; fix_sums(f), -ENOTSUP);                       /* GRE */
	BAD(frame_put16(f + 12, FRAME_ETH_IPV6), -EPROTO);               /* IPv4 under IPv6's type */
	BAD(frame_put16(f + 12, 0x8100), -ENOTSUP);                         /* VLAN tag */
	/* IP options are fine: a 24-byte header. */
	n = tcp_frame(f, FRAME_TCP_ACK, 10);
	memmove(ip + 24, ip + 20, 30);
	memset(ip + 20, 1, 4); /* four NOPs */
	ip[0] = 0x46;
	frame_put16(ip + 2, 54);
	n += 4;
	fix_sums(f);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.data_len, 10);
	ck_assert_uint_eq(p.dport, 443);
#undef BAD
}
END_TEST

START_TEST(udp_and_icmp)
{
	uint8_t f[FRAME_MAX], out[FRAME_MAX], big[FRAME_MTU + 1];
	uint8_t *u = f + FRAME_ETH_HLEN + 20;
	struct frame_pkt p, q;
	size_t n, m, k;

	ck_assert_int_eq(frame_build_udp(wmac, gmac, gip, 5353, wip, 53, (const uint8_t *)"query", 5, f, sizeof f, &n),
			 0);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.proto, FRAME_IP_UDP);
	ck_assert_uint_eq(p.sport, 5353);
	ck_assert_uint_eq(p.dport, 53);
	ck_assert_uint_eq(p.data_len, 5);
	ck_assert_mem_eq(p.data, "query", 5);
	for (k = 0; k < n; k++)
		ck_assert_int_lt(frame_parse(f, k, &q), 0);
	/* Zero checksum means "none"; a wrong one is refused. */
	frame_put16(u + 6, 0);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	frame_put16(u + 6, 0x1234);
	ck_assert_int_eq(frame_parse(f, n, &p), -EPROTO);
	/* UDP length must match the IP payload exactly. */
	ck_assert_int_eq(frame_build_udp(wmac, gmac, gip, 1, wip, 53, (const uint8_t *)"query", 5, f, sizeof f, &n), 0);
	frame_put16(u + 4, 12);
	fix_sums(f);
	ck_assert_int_eq(frame_parse(f, n, &p), -EPROTO);
	frame_put16(u + 4, 14);
	fix_sums(f);
	ck_assert_int_eq(frame_parse(f, n, &p), -EPROTO);
	frame_put16(u + 4, 7);
	ck_assert_int_eq(frame_parse(f, n, &p), -EPROTO);
	/* Too big for one packet, or for the buffer. */
	memset(big, 0, sizeof big);
	ck_assert_int_eq(frame_build_udp(wmac, gmac, gip, 1, wip, 2, big, FRAME_MTU - 28, out, sizeof out, &m), 0);
	ck_assert_uint_eq(m, FRAME_MAX);
	ck_assert_int_eq(frame_build_udp(wmac, gmac, gip, 1, wip, 2, big, FRAME_MTU - 27, out, sizeof out, &m), -ENOSPC);
	ck_assert_int_eq(frame_build_udp(wmac, gmac, gip, 1, wip, 2, big, 10, out, 40, &m), -ENOSPC);

	/* ICMP echo: the reply carries the same identifier, sequence and data. */
	n = tcp_frame(f, 0, 20);
	f[FRAME_ETH_HLEN + 9] = FRAME_IP_ICMP;
	memcpy(f + FRAME_ETH_HLEN + 16, wip, 4);
	u[0] = FRAME_ICMP_ECHO;
	u[1] = 0;
	fix_sums(f);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.icmp_type, FRAME_ICMP_ECHO);
	ck_assert_int_eq(frame_build_echo_reply(&p, out, sizeof out, &m), 0);
	ck_assert_uint_eq(m, n);
	ck_assert_int_eq(frame_parse(out, m, &q), 0);
	ck_assert_uint_eq(q.icmp_type, FRAME_ICMP_ECHO_REPLY);
	ck_assert_mem_eq(q.src, wip, 4);
	ck_assert_mem_eq(q.dst, gip, 4);
	ck_assert_mem_eq(q.eth_dst, gmac, 6);
	ck_assert_uint_eq(q.data_len, p.data_len);
	ck_assert_mem_eq(q.data, p.data, p.data_len);
	ck_assert_int_eq(frame_build_echo_reply(&q, out, sizeof out, &m), -EINVAL); /* a reply is not answered */
	ck_assert_int_eq(frame_build_echo_reply(&p, out, 60, &m), -ENOSPC);
	u[2] ^= 1;
	ck_assert_int_eq(frame_parse(f, n, &p), -EPROTO); /* ICMP checksum */
}
END_TEST

START_TEST(port_unreach_and_arp_request)
{
	uint8_t f[FRAME_MAX], out[FRAME_MAX];
	struct frame_pkt p, q;
	size_t n, m;

	/* A QUIC datagram to far:443 is answered from far with type 3 code 3,
	 * quoting its IP header and UDP header. */
	ck_assert_int_eq(frame_build_udp(wmac, gmac, gip, 40000, far, 443, (const uint8_t *)"quic-initial", 12, f,
				      sizeof f, &n), 0);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_port_unreach(&p, out, sizeof out, &m), 0);
	ck_assert_uint_eq(m, FRAME_ETH_HLEN + 20 + 8 + 20 + 8);
	ck_assert_int_eq(frame_parse(out, m, &q), 0);
	ck_assert_uint_eq(q.proto, FRAME_IP_ICMP);
	ck_assert_uint_eq(q.icmp_type, FRAME_ICMP_UNREACH);
	ck_assert_uint_eq(q.icmp_code, FRAME_ICMP_PORT_UNREACH);
	ck_assert_mem_eq(q.src, far, 4);
	ck_assert_mem_eq(q.dst, gip, 4);
	ck_assert_mem_eq(q.eth_dst, gmac, 6);
	ck_assert_mem_eq(q.eth_src, wmac, 6);
	ck_assert_uint_eq(q.data_len, 4 + 28); /* the unused word, then the quote */
	ck_assert_mem_eq(q.data + 4, f + FRAME_ETH_HLEN, 28);
	ck_assert_int_eq(frame_build_port_unreach(&p, out, m - 1, &m), -ENOSPC);
	/* Only UDP is answered this way. */
	n = tcp_frame(f, FRAME_TCP_SYN, 0);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_port_unreach(&p, out, sizeof out, &m), -EINVAL);

	/* "Who has the guest's address", from the gateway, parses back. */
	ck_assert_int_eq(frame_build_arp_request(wmac, wip, gip, out, sizeof out, &m), 0);
	ck_assert_int_eq(frame_parse(out, m, &q), 0);
	ck_assert_uint_eq(q.arp_op, FRAME_ARP_REQUEST);
	ck_assert_mem_eq(q.arp_sha, wmac, 6);
	ck_assert_mem_eq(q.arp_spa, wip, 4);
	ck_assert_mem_eq(q.arp_tpa, gip, 4);
	ck_assert_int_eq(frame_build_arp_request(wmac, wip, gip, out, 41, &m), -ENOSPC);
}
END_TEST

START_TEST(resets)
{
	uint8_t f[FRAME_MAX], out[FRAME_MAX];
	struct frame_pkt p, r;
	size_t n, m;

	/* SYN: seq 0, ack = seq + 1, RST|ACK, addresses swapped. */
	n = tcp_frame(f, FRAME_TCP_SYN, 0);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_tcp_rst(&p, out, sizeof out, &m), 0);
	ck_assert_int_eq(frame_parse(out, m, &r), 0);
	ck_assert_uint_eq(r.tcp_flags, FRAME_TCP_RST | FRAME_TCP_ACK);
	ck_assert_uint_eq(r.seq, 0);
	ck_assert_uint_eq(r.ack, 0x11223345u);
	ck_assert_uint_eq(r.sport, 443);
	ck_assert_uint_eq(r.dport, 40000);
	ck_assert_mem_eq(r.src, far, 4);
	ck_assert_mem_eq(r.dst, gip, 4);
	ck_assert_mem_eq(r.eth_dst, gmac, 6);
	ck_assert_mem_eq(r.eth_src, wmac, 6);
	/* Data and FIN count; the sequence wraps. */
	n = tcp_frame(f, FRAME_TCP_FIN, 10);
	memset(f + FRAME_ETH_HLEN + 24, 0xff, 4);
	fix_sums(f);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_tcp_rst(&p, out, sizeof out, &m), 0);
	ck_assert_int_eq(frame_parse(out, m, &r), 0);
	ck_assert_uint_eq(r.ack, 10u); /* 0xffffffff + 11 */
	/* With ACK: seq = their ack, no ACK of ours. */
	n = tcp_frame(f, FRAME_TCP_ACK, 5);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_tcp_rst(&p, out, sizeof out, &m), 0);
	ck_assert_int_eq(frame_parse(out, m, &r), 0);
	ck_assert_uint_eq(r.tcp_flags, FRAME_TCP_RST);
	ck_assert_uint_eq(r.seq, 0x1001u);
	/* Never a reset for a reset, nor for what is not TCP. */
	ck_assert_int_eq(frame_build_tcp_rst(&r, out, sizeof out, &m), -EINVAL);
	n = arp_request(f, wip);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_tcp_rst(&p, out, sizeof out, &m), -EINVAL);
	n = tcp_frame(f, FRAME_TCP_SYN, 0);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_tcp_rst(&p, out, 53, &m), -ENOSPC);
}
END_TEST

START_TEST(arp)
{
	uint8_t f[64], out[64];
	struct frame_pkt p, r;
	size_t n, m, k;

	n = arp_request(f, wip);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.arp_op, FRAME_ARP_REQUEST);
	ck_assert_mem_eq(p.arp_tpa, wip, 4);
	ck_assert_int_eq(frame_build_arp_reply(&p, wmac, out, sizeof out, &m), 0);
	ck_assert_int_eq(frame_parse(out, m, &r), 0);
	ck_assert_uint_eq(r.arp_op, FRAME_ARP_REPLY);
	ck_assert_mem_eq(r.arp_sha, wmac, 6);
	ck_assert_mem_eq(r.arp_spa, wip, 4);
	ck_assert_mem_eq(r.arp_tha, gmac, 6);
	ck_assert_mem_eq(r.arp_tpa, gip, 4);
	ck_assert_mem_eq(r.eth_dst, gmac, 6);
	ck_assert_int_eq(frame_build_arp_reply(&r, wmac, out, sizeof out, &m), -EINVAL);
	ck_assert_int_eq(frame_build_arp_reply(&p, wmac, out, 41, &m), -ENOSPC);
	for (k = 0; k < n; k++)
		ck_assert_int_eq(frame_parse(f, k, &r), -EPROTO);
	/* Other hardware or protocol types, other address sizes. */
	f[FRAME_ETH_HLEN + 1] = 6;
	ck_assert_int_eq(frame_parse(f, n, &r), -ENOTSUP);
	n = arp_request(f, wip);
	f[FRAME_ETH_HLEN + 5] = 16;
	ck_assert_int_eq(frame_parse(f, n, &r), -ENOTSUP);
}
END_TEST

START_TEST(random_frames)
{
	/* Random bytes behind plausible headers: every path, no crash. */
	uint8_t f[FRAME_MAX];
	struct frame_pkt p;
	uint32_t x = 12345;
	int i, ok = 0;
	size_t n, k;

	for (i = 0; i < 20000; i++) {
		/* Odd rounds keep the IP version, header and total lengths
		 * (which fix_sums trusts) and then make the checksums right. */
		size_t from = i & 1 ? FRAME_ETH_HLEN + 4 : 0;

		n = tcp_frame(f, FRAME_TCP_ACK, 64);
		for (k = 0; k < 4; k++) {
			x = x * 1103515245u + 12345u;
			f[from + (x >> 8) % (n - from)] = (uint8_t)(x >> 20);
		}
		if (i & 1)
			fix_sums(f);
		x = x * 1103515245u + 12345u;
		if (frame_parse(f, (x >> 8) % (n + 1), &p) == 0) {
			ok++;
			ck_assert_uint_le(p.ip_len, n - FRAME_ETH_HLEN);
			ck_assert(p.data + p.data_len <= f + n);
		}
	}
	ck_assert_int_gt(ok, 0);
}
END_TEST

START_TEST(flowtab)
{
	struct ft t;
	struct flowtab_entry e[5], dup;
	uint64_t h0, h;
	int i;

	ck_assert_int_eq(flowtab_init(&t, 0, 1), -EINVAL);
	ck_assert_int_eq(flowtab_init(&t, FLOWTAB_MAX_CAP + 1, 1), -EINVAL);
	ck_assert_int_eq(flowtab_init(&t, 4, 42), 0);
	memset(e, 0, sizeof e);
	for (i = 0; i < 5; i++) {
		memcpy(e[i].key.gip, gip, 4);
		memcpy(e[i].key.dip, far, 4);
		e[i].key.gport = (uint16_t)(40000 + i);
		e[i].key.dport = 443;
	}
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(flowtab_insert(&t, &e[i]), 0);
	ck_assert_int_eq(flowtab_insert(&t, &e[4]), -ENOSPC);
	dup = e[2];
	ck_assert_int_eq(flowtab_insert(&t, &dup), -EEXIST);
	for (i = 0; i < 4; i++) {
		ck_assert_ptr_eq(flowtab_find(&t, &e[i].key), &e[i]);
		ck_assert_ptr_eq(flowtab_from_handle(&t, flowtab_handle(&e[i])), &e[i]);
	}
	ck_assert_ptr_null(flowtab_find(&t, &e[4].key));
	/* Removing makes the handle stale even when the slot is reused. */
	h0 = flowtab_handle(&e[1]);
	flowtab_remove(&t, &e[1]);
	ck_assert_ptr_null(flowtab_find(&t, &e[1].key));
	ck_assert_ptr_null(flowtab_from_handle(&t, h0));
	ck_assert_int_eq(flowtab_insert(&t, &e[4]), 0);
	ck_assert_uint_eq(e[4].slot, (uint32_t)(h0 & 0xffffffffu));
	ck_assert_ptr_null(flowtab_from_handle(&t, h0));
	ck_assert_ptr_eq(flowtab_from_handle(&t, flowtab_handle(&e[4])), &e[4]);
	/* Garbage handles. */
	ck_assert_ptr_null(flowtab_from_handle(&t, 0));
	ck_assert_ptr_null(flowtab_from_handle(&t, ~0ull));
	h = (uint64_t)e[0].gen << 32 | 1000;
	ck_assert_ptr_null(flowtab_from_handle(&t, h));
	ck_assert_ptr_null(flowtab_from_handle(&t, (uint64_t)e[0].slot));
	ck_assert_uint_eq(t.n, 4);
	for (i = 0; i < 5; i++)
		if (i != 1)
			flowtab_remove(&t, &e[i]);
	ck_assert_uint_eq(t.n, 0);
	flowtab_free(&t);
}
END_TEST

START_TEST(flowtab_many)
{
	/* Full table of tuples differing in one field at a time. */
	enum { N = 3000 };
	struct flowtab_entry *e = calloc(N, sizeof *e);
	struct ft t;
	int i;

	ck_assert_int_eq(flowtab_init(&t, N, 7), 0);
	for (i = 0; i < N; i++) {
		memcpy(e[i].key.gip, gip, 4);
		memcpy(e[i].key.dip, far, 4);
		e[i].key.dip[3] = (uint8_t)(i % 3);
		e[i].key.gport = (uint16_t)(i / 3);
		e[i].key.dport = 80;
		ck_assert_int_eq(flowtab_insert(&t, &e[i]), 0);
	}
	for (i = 0; i < N; i++)
		ck_assert_ptr_eq(flowtab_find(&t, &e[i].key), &e[i]);
	for (i = 0; i < N; i += 2)
		flowtab_remove(&t, &e[i]);
	for (i = 0; i < N; i++)
		ck_assert_ptr_eq(flowtab_find(&t, &e[i].key), i % 2 ? &e[i] : NULL);
	flowtab_free(&t);
	free(e);
}
END_TEST

static unsigned syns;
static uint8_t syn_dst[4];
static uint16_t syn_dport;

static void count_syns(void *ctx, const uint8_t *frame, size_t len)
{
	struct frame_pkt p;

	if (frame_parse(frame, len, &p) == 0 && p.proto == FRAME_IP_TCP && p.tcp_flags == FRAME_TCP_SYN &&
	    memcmp(p.src, wip, 4) == 0 && memcmp(p.eth_dst, gmac, 6) == 0) {
		memcpy(syn_dst, p.dst, 4);
		syn_dport = p.dport;
		syns++;
	}
}

/* Dispatch for up to ms milliseconds or until done() holds. */
static void pump(struct stack *s, unsigned ms, int (*done)(struct stack *))
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pfd = {.fd = stack_fd(s), .events = POLLIN};

		poll(&pfd, 1, 20);
		stack_dispatch(s);
		if (done && done(s))
			return;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= ms)
			return;
	}
}

static int one_flow(struct stack *s)
{
	struct stack_stats st;

	stack_get_stats(s, &st);
	return st.flows == 1;
}

static int refused(struct stack *s)
{
	struct stack_stats st;

	stack_get_stats(s, &st);
	return st.fwd_refused == 1 && st.flows == 0;
}

/* A stack for the forwarding tests: pol and au, a short connect timeout,
 * no output callback yet. */
static struct stack_config fwd_config(struct policy *pol, struct audit *au)
{
	return (struct stack_config){
		.policy = pol,
		.audit = au,
		.guest_mac = gmac,
		.connect_timeout_ms = 300,
	};
}

START_TEST(forward_without_guest)
{
	struct policy pol;
	struct audit au = {.fd = -1};
	struct stack_forward fw;
	struct stack_config cfg = fwd_config(&pol, &au);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct epoll_event ev;
	struct stack_stats st;
	struct rlimit rl = {.rlim_cur = 128, .rlim_max = 128};
	char err[256], b;
	int fds[128], nfds = 0, c, c2, i;
	struct stack *s;

	cfg.output = count_syns;
	policy_init(&pol, POLICY_MODE_PUBLIC);
	ck_assert_int_eq(stack_create(&cfg, &s), 0);
	/* Refused before any socket exists. */
	ck_assert_int_eq(stack_forward_parse("0:8000", &fw, err, sizeof err), 0);
	fw.host.b[0] = 10;
	ck_assert_int_eq(stack_forward_add(s, &fw), -EINVAL);
	ck_assert_int_eq(stack_forward_parse("127.0.0.1:0:8000", &fw, err, sizeof err), 0);
	ck_assert_int_eq(stack_forward_add(s, &fw), 0);
	ck_assert_uint_ne(fw.host_port, 0);
	sin.sin_port = htons(fw.host_port);

	/* Out of descriptors: the pending connection waits, the listener
	 * leaves the epoll set, nothing spins. */
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(c, 0);
	ck_assert_int_eq(connect(c, (struct sockaddr *)&sin, sizeof sin), 0);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	while (nfds < 128 && (fds[nfds] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		nfds++;
	ck_assert_int_eq(errno, EMFILE);
	stack_dispatch(s);
	/* Only the timer (data 0) may be ready now, never the listener. */
	c2 = epoll_wait(stack_fd(s), &ev, 1, 0);
	ck_assert(c2 == 0 || (c2 == 1 && ev.data.u64 == 0));
	stack_get_stats(s, &st);
	ck_assert_uint_eq(st.flows, 0);
	for (i = 0; i < nfds; i++)
		close(fds[i]);

	/* Resumed on the next tick: the stack dials the guest's port from
	 * the gateway, and with nobody answering, gives up after the connect
	 * timeout and resets the host's connection. */
	pump(s, 3000, one_flow);
	ck_assert(one_flow(s));
	pump(s, 300, NULL);
	ck_assert_uint_ge(syns, 1);
	ck_assert_mem_eq(syn_dst, gip, 4);
	ck_assert_uint_eq(syn_dport, 8000);
	pump(s, 3000, refused);
	ck_assert(refused(s));
	ck_assert_int_eq(recv(c, &b, 1, 0), -1);
	ck_assert_int_eq(errno, ECONNRESET);
	close(c);
	stack_destroy(s);
	policy_free(&pol);
}
END_TEST

/* RFC 1071's checksum the plain way: big-endian 16-bit words one by one. */
static uint16_t ref_csum(const uint8_t *b, size_t len, uint32_t sum)
{
	uint64_t s = sum;
	size_t i;

	for (i = 0; i + 1 < len; i += 2)
		s += (uint32_t)(b[i] << 8 | b[i + 1]);
	if (i < len)
		s += (uint32_t)b[i] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* frame_csum sums eight bytes at a time in host order: the same result for
 * every length, alignment, starting sum and content (all zero, all ones,
 * random). */
START_TEST(csum_matches_reference)
{
	static uint8_t buf[66000];
	unsigned seed = 7;

	for (unsigned k = 0; k < 20000; k++) {
		size_t off = (size_t)(rand_r(&seed) % 8), len = (size_t)rand_r(&seed) % (k % 50 ? 200 : 65600);
		int mode = rand_r(&seed) % 4;
		uint32_t sum = k % 3 == 0 ? 0 : k % 3 == 1 ? 0xffff : (uint32_t)rand_r(&seed) % 0x1ffff;

		for (size_t i = 0; i < off + len; i++)
			buf[i] = mode == 0 ? 0 : mode == 1 ? 0xff : (uint8_t)rand_r(&seed);
		ck_assert_uint_eq(frame_csum(buf + off, len, sum), ref_csum(buf + off, len, sum));
	}
}
END_TEST

static void count_syns_done(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len)
{
	count_syns(ctx, frame, len);
}

static void count_syns_gso(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len)
{
	static uint8_t done[FRAME_MAX];

	/* A SYN never merges: a lone frame whose TCP checksum lwIP left to
	 * the peer (NEEDS_CSUM at the TCP header); completed, it parses. */
	ck_assert_uint_eq(h->gso_type, GSO_TYPE_NONE);
	ck_assert_uint_le(len, FRAME_MAX);
	ck_assert_uint_eq(h->flags, GSO_F_NEEDS_CSUM);
	ck_assert_uint_eq(h->csum_start, 34);
	ck_assert_uint_eq(h->csum_offset, 16);
	ck_assert_int_eq(gso_segment(h, frame, len, done, sizeof done, count_syns_done, ctx), 0);
}

/* The stack's output with segmentation offload: stack_create wants one of
 * the two callbacks, and a frame sent outside stack_input (here the SYN of a
 * forwarded connection, from stack_dispatch) leaves before the call
 * returns. */
START_TEST(gso_output)
{
	struct policy pol;
	struct audit au = {.fd = -1};
	struct stack_forward fw;
	struct stack_config cfg = fwd_config(&pol, &au);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	char err[256];
	struct stack *s;
	int c;

	policy_init(&pol, POLICY_MODE_PUBLIC);
	ck_assert_int_eq(stack_create(&cfg, &s), -EINVAL);
	cfg.output_gso = count_syns_gso;
	ck_assert_int_eq(stack_create(&cfg, &s), 0);
	ck_assert_int_eq(stack_forward_parse("127.0.0.1:0:8001", &fw, err, sizeof err), 0);
	ck_assert_int_eq(stack_forward_add(s, &fw), 0);
	sin.sin_port = htons(fw.host_port);
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(c, 0);
	ck_assert_int_eq(connect(c, (struct sockaddr *)&sin, sizeof sin), 0);
	syns = 0;
	pump(s, 3000, one_flow);
	ck_assert(one_flow(s));
	ck_assert_uint_ge(syns, 1);
	ck_assert_uint_eq(syn_dport, 8001);
	close(c);
	stack_destroy(s);
	policy_free(&pol);
}
END_TEST

Suite *stack_suite(void)
{
	Suite *s = suite_create("stack");

	unit_suite_case(s, "core", tcp_parse_and_truncation, bad_fields, udp_and_icmp,
			resets, port_unreach_and_arp_request, arp, random_frames,
			flowtab, flowtab_many, csum_matches_reference);
	unit_suite_case_fixture(s, "forward", NULL, NULL, 20, forward_without_guest,
				gso_output);
	return s;
}
