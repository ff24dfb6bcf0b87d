/* IPv6 in lib/frame.c: parsing what a hostile guest sends (TCP, UDP,
 * ICMPv6 and neighbor solicitations, every truncation, bad lengths and
 * checksums, extension headers, a zero UDP checksum) and the replies kbox
 * builds (neighbor advertisement, echo reply, reset, port unreachable),
 * each parsed back so that its checksum is verified by the parser. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "lib/frame.h"
#include "tests/lib/unit_suite.h"

static const uint8_t gmac[6] = {0x02, 0, 0, 0, 0, 0x15};
static const uint8_t wmac[6] = {0x52, 0x55, 0x0a, 0x00, 0x02, 0x02};
static const uint8_t gip6[16] = {0xfd, 0x6b, 0x62, 0x6f, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0f};
static const uint8_t wip6[16] = {0xfd, 0x6b, 0x62, 0x6f, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
static const uint8_t far6[16] = {0x2a, 0x01, 0, 5, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

/* The checksum of the IPv6 packet's upper layer, computed the slow way
 * (RFC 8200 8.1), at its usual offset for nh. */
static void fix_sum6(uint8_t *f)
{
	uint8_t *ip = f + FRAME_ETH_HLEN, *l4 = ip + 40;
	size_t len = (size_t)(ip[4] << 8 | ip[5]), off, i;
	uint32_t s = 0;

	for (i = 8; i < 40; i += 2)
		s += (uint32_t)(ip[i] << 8 | ip[i + 1]);
	s += (uint32_t)(len >> 16) + (uint32_t)(len & 0xffff) + ip[6];
	off = ip[6] == FRAME_IP_TCP ? 16 : ip[6] == FRAME_IP_UDP ? 6 : 2;
	l4[off] = l4[off + 1] = 0;
	frame_put16(l4 + off, frame_csum(l4, len, s));
}

/* A frame from the guest to dst carrying nh and payload l4[0, len), with
 * its checksum. */
static size_t frame6(uint8_t *f, const uint8_t dst[16], uint8_t nh, const uint8_t *l4, size_t len, uint8_t hops)
{
	uint8_t *ip = f + FRAME_ETH_HLEN;

	memset(f, 0, FRAME_ETH_HLEN + 40);
	memcpy(f, wmac, 6);
	memcpy(f + 6, gmac, 6);
	frame_put16(f + 12, FRAME_ETH_IPV6);
	ip[0] = 0x60;
	frame_put16(ip + 4, (uint16_t)len);
	ip[6] = nh;
	ip[7] = hops;
	memcpy(ip + 8, gip6, 16);
	memcpy(ip + 24, dst, 16);
	memcpy(ip + 40, l4, len);
	fix_sum6(f);
	return FRAME_ETH_HLEN + 40 + len;
}

static size_t tcp6(uint8_t *f, uint8_t flags, size_t data)
{
	uint8_t t[20 + 64] = {0};

	frame_put16(t, 40000);
	frame_put16(t + 2, 443);
	frame_put32(t + 4, 1000);
	frame_put32(t + 8, 2000);
	t[12] = 5 << 4;
	t[13] = flags;
	frame_put16(t + 14, 65535);
	memset(t + 20, 'x', data);
	return frame6(f, far6, FRAME_IP_TCP, t, 20 + data, 64);
}

/* A neighbor solicitation for target, with a source link-layer option
 * unless sll is 0. */
static size_t ns6(uint8_t *f, const uint8_t target[16], int sll, uint8_t hops)
{
	static const uint8_t snm[16] = {0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 2};
	uint8_t c[32] = {FRAME_ICMP6_NS};

	memcpy(c + 8, target, 16);
	c[24] = 1;
	c[25] = 1;
	memcpy(c + 26, gmac, 6);
	return frame6(f, snm, FRAME_IP_ICMP6, c, sll ? 32 : 24, hops);
}

START_TEST(tcp6_parse_and_truncation)
{
	uint8_t f[256];
	struct frame_pkt p, q;
	size_t n, k;

	n = tcp6(f, FRAME_TCP_SYN, 10);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.ipv, 6);
	ck_assert_uint_eq(p.proto, FRAME_IP_TCP);
	ck_assert_mem_eq(p.src, gip6, 16);
	ck_assert_mem_eq(p.dst, far6, 16);
	ck_assert_uint_eq(p.ip_hlen, 40);
	ck_assert_uint_eq(p.ip_len, 40 + 30);
	ck_assert_uint_eq(p.sport, 40000);
	ck_assert_uint_eq(p.dport, 443);
	ck_assert_uint_eq(p.seq, 1000);
	ck_assert_uint_eq(p.data_len, 10);
	for (k = 0; k < n; k++)
		ck_assert_int_lt(frame_parse(f, k, &q), 0);
	/* Padding past the packet is fine. */
	memset(f + n, 0, 8);
	ck_assert_int_eq(frame_parse(f, n + 8, &p), 0);
	ck_assert_uint_eq(p.data_len, 10);
}
END_TEST

START_TEST(bad6)
{
	uint8_t f[256];
	uint8_t *ip = f + FRAME_ETH_HLEN;
	struct frame_pkt p;
	size_t n;

#define BAD6(expr, want)                                   \
	do {                                               \
		n = tcp6(f, FRAME_TCP_ACK, 10);            \
		expr;                                      \
		ck_assert_int_eq(frame_parse(f, n, &p), want); \
	} while (0)
	BAD6(ip[0] = 0x40, -EPROTO);                                   /* version 4 under IPv6's type */
	BAD6(frame_put16(ip + 4, 31), -EPROTO);                        /* payload past the frame */
	BAD6(frame_put16(ip + 4, 0), -ENOTSUP);                        /* jumbogram */
	BAD6(frame_put16(ip + 4, 19), -EPROTO);                        /* shorter than a TCP header */
	BAD6(ip[40 + 16] ^= 1, -EPROTO);                               /* TCP checksum */
	BAD6(ip[8] ^= 1, -EPROTO);                                     /* source outside the sum */
	BAD6(ip[6] = 0; fix_sum6(f), -ENOTSUP);                        /* hop-by-hop */
	BAD6(ip[6] = 44; fix_sum6(f), -ENOTSUP);                       /* fragment header */
	BAD6(ip[6] = 43; fix_sum6(f), -ENOTSUP);                       /* routing header */
	BAD6(ip[40 + 12] = 4 << 4; fix_sum6(f), -EPROTO);              /* data offset < 5 */
#undef BAD6
}
END_TEST

START_TEST(udp6)
{
	uint8_t f[256], out[FRAME_MAX], u[8 + 5] = {0};
	struct frame_pkt p, q;
	size_t n, m;

	frame_put16(u, 5353);
	frame_put16(u + 2, 443);
	frame_put16(u + 4, 13);
	memcpy(u + 8, "quic?", 5);
	n = frame6(f, far6, FRAME_IP_UDP, u, sizeof u, 64);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.proto, FRAME_IP_UDP);
	ck_assert_uint_eq(p.dport, 443);
	ck_assert_uint_eq(p.data_len, 5);
	/* Port unreachable, quoting the datagram, parsed back. */
	ck_assert_int_eq(frame_build_port_unreach(&p, out, sizeof out, &m), 0);
	ck_assert_uint_eq(m, FRAME_ETH_HLEN + 40 + 8 + p.ip_len);
	ck_assert_int_eq(frame_parse(out, m, &q), 0);
	ck_assert_uint_eq(q.ipv, 6);
	ck_assert_uint_eq(q.proto, FRAME_IP_ICMP6);
	ck_assert_uint_eq(q.icmp_type, FRAME_ICMP6_UNREACH);
	ck_assert_uint_eq(q.icmp_code, FRAME_ICMP6_PORT_UNREACH);
	ck_assert_mem_eq(q.src, far6, 16);
	ck_assert_mem_eq(q.dst, gip6, 16);
	ck_assert_mem_eq(q.eth_dst, gmac, 6);
	ck_assert_mem_eq(out + FRAME_ETH_HLEN + 48, f + FRAME_ETH_HLEN, p.ip_len);
	ck_assert_int_eq(frame_build_port_unreach(&p, out, 60, &m), -ENOSPC);
	/* The answer in the datagram's own buffer, as the stack does not,
	 * but may: the quote moves first. */
	memcpy(out, f, n);
	ck_assert_int_eq(frame_parse(out, n, &p), 0);
	ck_assert_int_eq(frame_build_port_unreach(&p, out, sizeof out, &m), 0);
	ck_assert_int_eq(frame_parse(out, m, &q), 0);
	ck_assert_mem_eq(out + FRAME_ETH_HLEN + 48, f + FRAME_ETH_HLEN, p.ip_len);
	/* A zero checksum is forbidden in IPv6. */
	frame_put16(f + FRAME_ETH_HLEN + 40 + 6, 0);
	ck_assert_int_eq(frame_parse(f, n, &p), -EPROTO);
	n = frame6(f, far6, FRAME_IP_UDP, u, sizeof u, 64);
	frame_put16(f + FRAME_ETH_HLEN + 40 + 6, 0x1234);
	ck_assert_int_eq(frame_parse(f, n, &p), -EPROTO);
}
END_TEST

START_TEST(large_udp6_quote_capped)
{
	static uint8_t f[FRAME_MAX], out[FRAME_MAX], u[4000];
	struct frame_pkt p, q;
	size_t n, m;

	memset(u, 7, sizeof u);
	frame_put16(u + 4, sizeof u);
	n = frame6(f, far6, FRAME_IP_UDP, u, sizeof u, 64);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_port_unreach(&p, out, sizeof out, &m), 0);
	ck_assert_uint_eq(m, FRAME_ETH_HLEN + FRAME_IP6_MIN_MTU); /* RFC 4443: within the minimum MTU */
	ck_assert_int_eq(frame_parse(out, m, &q), 0);
}
END_TEST

START_TEST(echo6)
{
	uint8_t f[256], out[256], c[8 + 10] = {FRAME_ICMP6_ECHO};
	struct frame_pkt p, q;
	size_t n, m;

	frame_put16(c + 4, 0x4b42);
	frame_put16(c + 6, 1);
	memcpy(c + 8, "kbox-ping6", 10);
	n = frame6(f, wip6, FRAME_IP_ICMP6, c, sizeof c, 64);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.icmp_type, FRAME_ICMP6_ECHO);
	ck_assert_int_eq(frame_build_echo_reply(&p, out, sizeof out, &m), 0);
	ck_assert_uint_eq(m, n);
	ck_assert_int_eq(frame_parse(out, m, &q), 0);
	ck_assert_uint_eq(q.icmp_type, FRAME_ICMP6_ECHO_REPLY);
	ck_assert_mem_eq(q.src, wip6, 16);
	ck_assert_mem_eq(q.dst, gip6, 16);
	ck_assert_uint_eq(q.data_len, p.data_len);
	ck_assert_mem_eq(q.data, p.data, p.data_len);
	ck_assert_int_eq(frame_build_echo_reply(&q, out, sizeof out, &m), -EINVAL);
	/* An IPv4 echo type number inside ICMPv6 is no echo request. */
	c[0] = FRAME_ICMP_ECHO;
	n = frame6(f, wip6, FRAME_IP_ICMP6, c, sizeof c, 64);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_echo_reply(&p, out, sizeof out, &m), -EINVAL);
	/* The ICMPv6 checksum covers the pseudo-header. */
	c[0] = FRAME_ICMP6_ECHO;
	n = frame6(f, wip6, FRAME_IP_ICMP6, c, sizeof c, 64);
	f[FRAME_ETH_HLEN + 24 + 15] ^= 1;
	ck_assert_int_eq(frame_parse(f, n, &p), -EPROTO);
}
END_TEST

START_TEST(neighbor_discovery)
{
	uint8_t f[256], out[256];
	uint8_t *c = f + FRAME_ETH_HLEN + 40;
	struct frame_pkt p, q;
	size_t n, m, k;

	n = ns6(f, wip6, 1, 255);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.icmp_type, FRAME_ICMP6_NS);
	ck_assert_mem_eq(p.nd_target, wip6, 16);
	ck_assert_uint_eq(p.nd_has_sll, 1);
	ck_assert_mem_eq(p.nd_sll, gmac, 6);
	for (k = 0; k < n; k++)
		ck_assert_int_lt(frame_parse(f, k, &q), 0);
	ck_assert_int_eq(frame_build_na(&p, wmac, out, sizeof out, &m), 0);
	ck_assert_int_eq(frame_parse(out, m, &q), 0);
	ck_assert_uint_eq(q.icmp_type, FRAME_ICMP6_NA);
	ck_assert_uint_eq(q.hop_limit, 255);
	ck_assert_mem_eq(q.src, wip6, 16);
	ck_assert_mem_eq(q.dst, gip6, 16);
	ck_assert_mem_eq(q.eth_dst, gmac, 6);
	ck_assert_mem_eq(q.eth_src, wmac, 6);
	ck_assert_uint_eq(out[FRAME_ETH_HLEN + 40 + 4], 0xe0);
	ck_assert_mem_eq(out + FRAME_ETH_HLEN + 40 + 8, wip6, 16);
	ck_assert_mem_eq(out + FRAME_ETH_HLEN + 40 + 26, wmac, 6);
	ck_assert_int_eq(frame_build_na(&p, wmac, out, 60, &m), -ENOSPC);
	ck_assert_int_eq(frame_build_na(&q, wmac, out, sizeof out, &m), -EINVAL); /* an NA is not answered */
	/* Without the option: answered to the frame's source MAC. */
	n = ns6(f, wip6, 0, 255);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_uint_eq(p.nd_has_sll, 0);
	ck_assert_int_eq(frame_build_na(&p, wmac, out, sizeof out, &m), 0);
	ck_assert_mem_eq(out, gmac, 6);
	/* From the unspecified address (DAD): not answered. */
	n = ns6(f, wip6, 0, 255);
	memset(f + FRAME_ETH_HLEN + 8, 0, 16);
	fix_sum6(f);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_na(&p, wmac, out, sizeof out, &m), -EINVAL);
	/* Not from the link (hop limit), a multicast target, a bad code, an
	 * option of length 0 or past the end: malformed. */
	n = ns6(f, wip6, 1, 64);
	ck_assert_int_eq(frame_parse(f, n, &p), -EPROTO);
#define NS_WITH(at, v, want)                                    \
	do {                                                    \
		n = ns6(f, wip6, 1, 255);                       \
		c[at] = (v);                                    \
		fix_sum6(f);                                    \
		ck_assert_int_eq(frame_parse(f, n, &p), want);  \
	} while (0)
	NS_WITH(8, 0xff, -EPROTO); /* multicast target */
	NS_WITH(1, 1, -EPROTO);    /* code */
	NS_WITH(25, 0, -EPROTO);   /* option of length 0 */
	NS_WITH(25, 2, -EPROTO);   /* option past the end */
	NS_WITH(24, 14, 0);        /* an unknown option is skipped */
#undef NS_WITH
	ck_assert_uint_eq(p.nd_has_sll, 0);
}
END_TEST

START_TEST(reset6)
{
	uint8_t f[256], out[256];
	struct frame_pkt p, q;
	size_t n, m;

	n = tcp6(f, FRAME_TCP_SYN, 0);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_tcp_rst(&p, out, sizeof out, &m), 0);
	ck_assert_uint_eq(m, FRAME_ETH_HLEN + 60);
	ck_assert_int_eq(frame_parse(out, m, &q), 0);
	ck_assert_uint_eq(q.ipv, 6);
	ck_assert_uint_eq(q.tcp_flags, FRAME_TCP_RST | FRAME_TCP_ACK);
	ck_assert_uint_eq(q.ack, 1001);
	ck_assert_uint_eq(q.sport, 443);
	ck_assert_uint_eq(q.dport, 40000);
	ck_assert_mem_eq(q.src, far6, 16);
	ck_assert_mem_eq(q.dst, gip6, 16);
	ck_assert_int_eq(frame_build_tcp_rst(&q, out, sizeof out, &m), -EINVAL);
	n = tcp6(f, FRAME_TCP_ACK, 5);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
	ck_assert_int_eq(frame_build_tcp_rst(&p, out, sizeof out, &m), 0);
	ck_assert_int_eq(frame_parse(out, m, &q), 0);
	ck_assert_uint_eq(q.tcp_flags, FRAME_TCP_RST);
	ck_assert_uint_eq(q.seq, 2000);
	ck_assert_int_eq(frame_build_tcp_rst(&p, out, 70, &m), -ENOSPC);
}
END_TEST

START_TEST(fill_tcp6_csum)
{
	uint8_t f[256];
	struct frame_pkt p;
	size_t n;

	n = tcp6(f, FRAME_TCP_ACK, 33);
	f[FRAME_ETH_HLEN + 40 + 16] ^= 0x55;
	ck_assert_int_eq(frame_parse(f, n, &p), -EPROTO);
	frame_fill_tcp6_csum(f + FRAME_ETH_HLEN, n - FRAME_ETH_HLEN);
	ck_assert_int_eq(frame_parse(f, n, &p), 0);
}
END_TEST

Suite *frame6_suite(void)
{
	Suite *s = suite_create("frame6");

	unit_suite_case(s, "core", tcp6_parse_and_truncation, bad6, udp6, large_udp6_quote_capped, echo6,
			neighbor_discovery, reset6, fill_tcp6_csum);
	return s;
}
