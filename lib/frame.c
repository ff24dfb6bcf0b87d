#include "lib/frame.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

static uint32_t sum_bytes(const uint8_t *b, size_t len, uint32_t sum)
{
	/* The one's-complement sum does not depend on byte order (RFC 1071
	 * §2(B)): add the bytes as native 64-bit words, two at a time into
	 * two accumulators whose carries are counted apart (end-around carry
	 * added back at the end), fold, and swap once into network order.
	 * Sixteen bytes a step: this sum runs over every segment the guest
	 * sends (1.5x the speed of 32-bit words into one accumulator). */
	uint64_t a0 = 0, a1 = 0, c = 0, s;
	size_t i = 0;

	for (; i + 16 <= len; i += 16) {
		uint64_t w[2];

		memcpy(w, b + i, 16);
		a0 += w[0];
		c += a0 < w[0];
		a1 += w[1];
		c += a1 < w[1];
	}
	/* Each 64-bit sum as two 32-bit halves, and the carries (one each
	 * worth 2^64 = 1 in the end-around sum): no overflow below 2^32 steps. */
	s = (a0 & 0xffffffffu) + (a0 >> 32) + (a1 & 0xffffffffu) + (a1 >> 32) + c;
	for (; i + 2 <= len; i += 2) {
		uint16_t h;

		memcpy(&h, b + i, 2);
		s += h;
	}
	if (i < len) {
		uint8_t t[2] = {b[i], 0};
		uint16_t h;

		memcpy(&h, t, 2);
		s += h;
	}
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	s = ntohs((uint16_t)s) + (uint64_t)sum;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint32_t)s;
}

uint16_t frame_csum(const void *buf, size_t len, uint32_t sum)
{
	return (uint16_t)~sum_bytes(buf, len, sum);
}

/* The running sum of the IPv4 pseudo-header for a transport segment. */
static uint32_t pseudo_sum4(const uint8_t src[4], const uint8_t dst[4], uint8_t proto, size_t len)
{
	uint8_t ph[12];

	memcpy(ph, src, 4);
	memcpy(ph + 4, dst, 4);
	ph[8] = 0;
	ph[9] = proto;
	frame_put16(ph + 10, (uint16_t)len);
	return sum_bytes(ph, sizeof ph, 0);
}

/* The same for IPv6 (RFC 8200 8.1): both addresses, the upper-layer
 * length as 32 bits, three zero bytes and the next header. */
static uint32_t pseudo_sum6(const uint8_t src[16], const uint8_t dst[16], uint8_t proto, size_t len)
{
	uint8_t ph[40];

	memcpy(ph, src, 16);
	memcpy(ph + 16, dst, 16);
	frame_put32(ph + 32, (uint32_t)len);
	ph[36] = ph[37] = ph[38] = 0;
	ph[39] = proto;
	return sum_bytes(ph, sizeof ph, 0);
}

void frame_fill_tcp6_csum(uint8_t *ip, size_t len)
{
	uint8_t *t = ip + FRAME_IP6_HLEN;
	size_t tl = len - FRAME_IP6_HLEN;

	frame_put16(t + 16, 0);
	frame_put16(t + 16, frame_csum(t, tl, pseudo_sum6(ip + 8, ip + 24, FRAME_IP_TCP, tl)));
}

/* The pseudo-header sum for p's version, from src to dst. */
static uint32_t pseudo_sum(uint8_t ipv, const uint8_t *src, const uint8_t *dst, uint8_t proto, size_t len)
{
	return ipv == 6 ? pseudo_sum6(src, dst, proto, len) : pseudo_sum4(src, dst, proto, len);
}

static int parse_arp(const uint8_t *a, size_t len, struct frame_pkt *p)
{
	if (len < 28)
		return -EPROTO;
	/* Ethernet hardware, IPv4 protocol, 6- and 4-byte addresses. */
	if (frame_get16(a) != 1 || frame_get16(a + 2) != FRAME_ETH_IPV4 || a[4] != 6 || a[5] != 4)
		return -ENOTSUP;
	p->arp_op = frame_get16(a + 6);
	memcpy(p->arp_sha, a + 8, 6);
	memcpy(p->arp_spa, a + 14, 4);
	memcpy(p->arp_tha, a + 18, 6);
	memcpy(p->arp_tpa, a + 24, 4);
	return 0;
}

static int parse_tcp(struct frame_pkt *p, const uint8_t *t, size_t len)
{
	size_t hlen;

	if (len < 20)
		return -EPROTO;
	hlen = (size_t)(t[12] >> 4) * 4;
	if (hlen < 20 || hlen > len)
		return -EPROTO;
	if (frame_csum(t, len, pseudo_sum(p->ipv, p->src, p->dst, FRAME_IP_TCP, len)) != 0)
		return -EPROTO;
	p->sport = frame_get16(t);
	p->dport = frame_get16(t + 2);
	p->seq = frame_get32(t + 4);
	p->ack = frame_get32(t + 8);
	p->tcp_flags = t[13];
	p->data = t + hlen;
	p->data_len = len - hlen;
	return 0;
}

static int parse_udp(struct frame_pkt *p, const uint8_t *u, size_t len)
{
	size_t ulen;

	if (len < 8)
		return -EPROTO;
	ulen = frame_get16(u + 4);
	/* The UDP length must fill the IP payload exactly: a shorter one
	 * would hide bytes another parser might read. */
	if (ulen != len)
		return -EPROTO;
	/* A zero checksum means "none" in IPv4 and is forbidden in IPv6
	 * (RFC 8200 8.1). */
	if (frame_get16(u + 6) == 0 ? p->ipv == 6
				    : frame_csum(u, len, pseudo_sum(p->ipv, p->src, p->dst, FRAME_IP_UDP, len)) != 0)
		return -EPROTO;
	p->sport = frame_get16(u);
	p->dport = frame_get16(u + 2);
	p->data = u + 8;
	p->data_len = len - 8;
	return 0;
}

static int parse_icmp(struct frame_pkt *p, const uint8_t *c, size_t len)
{
	if (len < 8)
		return -EPROTO;
	if (frame_csum(c, len, 0) != 0)
		return -EPROTO;
	p->icmp_type = c[0];
	p->icmp_code = c[1];
	p->data = c + 4; /* identifier and sequence onwards, echoed as they are */
	p->data_len = len - 4;
	return 0;
}

static int parse_ipv4(const uint8_t *ip, size_t avail, struct frame_pkt *p)
{
	size_t hlen, tot;
	uint16_t frag;

	if (avail < 20 || ip[0] >> 4 != 4)
		return -EPROTO;
	hlen = (size_t)(ip[0] & 0xf) * 4;
	tot = frame_get16(ip + 2);
	/* Frames may be padded past the packet (60-byte minimum), never
	 * shorter than it. */
	if (hlen < 20 || tot < hlen || tot > avail)
		return -EPROTO;
	if (frame_csum(ip, hlen, 0) != 0)
		return -EPROTO;
	frag = frame_get16(ip + 6);
	if (frag & 0x8000)
		return -EPROTO; /* reserved bit */
	if (frag & 0x3fff)
		return -ENOTSUP; /* MF or an offset: fragments are not reassembled */
	p->ipv = 4;
	p->ip = ip;
	p->ip_hlen = hlen;
	p->ip_len = tot;
	p->proto = ip[9];
	memcpy(p->src, ip + 12, 4);
	memcpy(p->dst, ip + 16, 4);
	switch (p->proto) {
	case FRAME_IP_TCP:
		return parse_tcp(p, ip + hlen, tot - hlen);
	case FRAME_IP_UDP:
		return parse_udp(p, ip + hlen, tot - hlen);
	case FRAME_IP_ICMP:
		return parse_icmp(p, ip + hlen, tot - hlen);
	default:
		return -ENOTSUP;
	}
}

/* The options of a neighbor solicitation at o[0, len) (RFC 4861 4.6):
 * each a type, a length in units of 8 bytes (never 0) and its bytes.
 * Only the source link-layer address is kept. */
static int parse_nd_options(struct frame_pkt *p, const uint8_t *o, size_t len)
{
	while (len > 0) {
		size_t olen;

		if (len < 2)
			return -EPROTO;
		olen = (size_t)o[1] * 8;
		if (olen == 0 || olen > len)
			return -EPROTO;
		if (o[0] == 1 && olen == 8) {
			memcpy(p->nd_sll, o + 2, 6);
			p->nd_has_sll = 1;
		}
		o += olen;
		len -= olen;
	}
	return 0;
}

static int parse_icmp6(struct frame_pkt *p, const uint8_t *c, size_t len)
{
	if (len < 8)
		return -EPROTO;
	if (frame_csum(c, len, pseudo_sum6(p->src, p->dst, FRAME_IP_ICMP6, len)) != 0)
		return -EPROTO;
	p->icmp_type = c[0];
	p->icmp_code = c[1];
	p->data = c + 4;
	p->data_len = len - 4;
	if (p->icmp_type == FRAME_ICMP6_NS) {
		/* RFC 4861 7.1.1: hop limit 255 (it came from the link),
		 * code 0, at least 24 bytes, a target that is no multicast. */
		if (p->hop_limit != 255 || p->icmp_code != 0 || len < 24 || c[8] == 0xff)
			return -EPROTO;
		memcpy(p->nd_target, c + 8, 16);
		return parse_nd_options(p, c + 24, len - 24);
	}
	return 0;
}

static int parse_ipv6(const uint8_t *ip, size_t avail, struct frame_pkt *p)
{
	size_t plen;

	if (avail < FRAME_IP6_HLEN || ip[0] >> 4 != 6)
		return -EPROTO;
	plen = frame_get16(ip + 4);
	if (plen == 0)
		return -ENOTSUP; /* a jumbogram, or nothing at all */
	if (FRAME_IP6_HLEN + plen > avail)
		return -EPROTO;
	p->ipv = 6;
	p->ip = ip;
	p->ip_hlen = FRAME_IP6_HLEN;
	p->ip_len = FRAME_IP6_HLEN + plen;
	p->proto = ip[6];
	p->hop_limit = ip[7];
	memcpy(p->src, ip + 8, 16);
	memcpy(p->dst, ip + 24, 16);
	switch (p->proto) {
	case FRAME_IP_TCP:
		return parse_tcp(p, ip + FRAME_IP6_HLEN, plen);
	case FRAME_IP_UDP:
		return parse_udp(p, ip + FRAME_IP6_HLEN, plen);
	case FRAME_IP_ICMP6:
		return parse_icmp6(p, ip + FRAME_IP6_HLEN, plen);
	default:
		return -ENOTSUP; /* extension headers (MLD's hop-by-hop above all), other protocols */
	}
}

int frame_parse(const uint8_t *f, size_t len, struct frame_pkt *p)
{
	memset(p, 0, sizeof *p);
	if (len > FRAME_MAX)
		return -EMSGSIZE;
	if (len < FRAME_ETH_HLEN)
		return -EPROTO;
	memcpy(p->eth_dst, f, 6);
	memcpy(p->eth_src, f + 6, 6);
	p->ethertype = frame_get16(f + 12);
	switch (p->ethertype) {
	case FRAME_ETH_ARP:
		return parse_arp(f + FRAME_ETH_HLEN, len - FRAME_ETH_HLEN, p);
	case FRAME_ETH_IPV4:
		return parse_ipv4(f + FRAME_ETH_HLEN, len - FRAME_ETH_HLEN, p);
	case FRAME_ETH_IPV6:
		return parse_ipv6(f + FRAME_ETH_HLEN, len - FRAME_ETH_HLEN, p);
	default:
		return -ENOTSUP;
	}
}

static void put_eth(uint8_t *out, const uint8_t dmac[6], const uint8_t smac[6], uint16_t type)
{
	memcpy(out, dmac, 6);
	memcpy(out + 6, smac, 6);
	frame_put16(out + 12, type);
}

/* An ARP packet for Ethernet and IPv4 (RFC 826) at a: 28 bytes. */
static void put_arp(uint8_t *a, uint16_t op, const uint8_t sha[6], const uint8_t spa[4], const uint8_t tha[6],
		    const uint8_t tpa[4])
{
	frame_put16(a, 1);
	frame_put16(a + 2, FRAME_ETH_IPV4);
	a[4] = 6;
	a[5] = 4;
	frame_put16(a + 6, op);
	memcpy(a + 8, sha, 6);
	memcpy(a + 14, spa, 4);
	memcpy(a + 18, tha, 6);
	memcpy(a + 24, tpa, 4);
}

/* A 20-byte IPv4 header without options, DF set, TTL 64. */
static void put_ipv4(uint8_t *ip, const uint8_t src[4], const uint8_t dst[4], uint8_t proto, size_t total)
{
	memset(ip, 0, 20);
	ip[0] = 0x45;
	frame_put16(ip + 2, (uint16_t)total);
	frame_put16(ip + 6, 0x4000);
	ip[8] = 64;
	ip[9] = proto;
	memcpy(ip + 12, src, 4);
	memcpy(ip + 16, dst, 4);
	frame_put16(ip + 10, frame_csum(ip, 20, 0));
}

/* An IPv6 header: no traffic class or flow label. */
static void put_ipv6(uint8_t *ip, const uint8_t src[16], const uint8_t dst[16], uint8_t nh, size_t plen, uint8_t hops)
{
	memset(ip, 0, 4);
	ip[0] = 0x60;
	frame_put16(ip + 4, (uint16_t)plen);
	ip[6] = nh;
	ip[7] = hops;
	memcpy(ip + 8, src, 16);
	memcpy(ip + 24, dst, 16);
}

/* The IP header for an answer of plen payload bytes to p: its version,
 * from p's destination to p's source.  Returns the header's length. */
static size_t put_ip_answer(uint8_t *ip, const struct frame_pkt *p, uint8_t proto, size_t plen)
{
	if (p->ipv == 6) {
		put_ipv6(ip, p->dst, p->src, proto == FRAME_IP_ICMP ? FRAME_IP_ICMP6 : proto, plen, 64);
		return FRAME_IP6_HLEN;
	}
	put_ipv4(ip, p->dst, p->src, proto, 20 + plen);
	return 20;
}

int frame_build_arp_reply(const struct frame_pkt *req, const uint8_t mac[6], uint8_t *out, size_t cap, size_t *n)
{
	if (req->ethertype != FRAME_ETH_ARP || req->arp_op != FRAME_ARP_REQUEST)
		return -EINVAL;
	if (cap < FRAME_ETH_HLEN + 28)
		return -ENOSPC;
	put_eth(out, req->arp_sha, mac, FRAME_ETH_ARP);
	put_arp(out + FRAME_ETH_HLEN, FRAME_ARP_REPLY, mac, req->arp_tpa, req->arp_sha, req->arp_spa);
	*n = FRAME_ETH_HLEN + 28;
	return 0;
}

int frame_build_echo_reply(const struct frame_pkt *req, uint8_t *out, size_t cap, size_t *n)
{
	size_t icmp_len, total, hl = req->ipv == 6 ? FRAME_IP6_HLEN : 20;
	uint8_t *c;

	if (req->ipv == 4 ? req->proto != FRAME_IP_ICMP || req->icmp_type != FRAME_ICMP_ECHO
			  : req->ipv != 6 || req->proto != FRAME_IP_ICMP6 || req->icmp_type != FRAME_ICMP6_ECHO)
		return -EINVAL;
	icmp_len = 4 + req->data_len;
	total = hl + icmp_len;
	if (total > FRAME_MTU || cap < FRAME_ETH_HLEN + total)
		return -ENOSPC;
	put_eth(out, req->eth_src, req->eth_dst, req->ipv == 6 ? FRAME_ETH_IPV6 : FRAME_ETH_IPV4);
	c = out + FRAME_ETH_HLEN + hl;
	memmove(c + 4, req->data, req->data_len); /* first: out may be the request's own buffer */
	put_ip_answer(out + FRAME_ETH_HLEN, req, FRAME_IP_ICMP, icmp_len);
	c[0] = req->ipv == 6 ? FRAME_ICMP6_ECHO_REPLY : FRAME_ICMP_ECHO_REPLY;
	c[1] = 0;
	c[2] = c[3] = 0;
	frame_put16(c + 2, frame_csum(c, icmp_len, req->ipv == 6 ? pseudo_sum6(req->dst, req->src, FRAME_IP_ICMP6, icmp_len) : 0));
	*n = FRAME_ETH_HLEN + total;
	return 0;
}

int frame_build_udp(const uint8_t dmac[6], const uint8_t smac[6], const uint8_t src[4], uint16_t sport,
		 const uint8_t dst[4], uint16_t dport, const uint8_t *data, size_t len, uint8_t *out, size_t cap,
		 size_t *n)
{
	size_t total = 20 + 8 + len;
	uint8_t *u = out + FRAME_ETH_HLEN + 20;
	uint16_t ck;

	if (len > FRAME_MTU || total > FRAME_MTU || cap < FRAME_ETH_HLEN + total)
		return -ENOSPC;
	put_eth(out, dmac, smac, FRAME_ETH_IPV4);
	put_ipv4(out + FRAME_ETH_HLEN, src, dst, FRAME_IP_UDP, total);
	frame_put16(u, sport);
	frame_put16(u + 2, dport);
	frame_put16(u + 4, (uint16_t)(8 + len));
	frame_put16(u + 6, 0);
	memmove(u + 8, data, len);
	ck = frame_csum(u, 8 + len, pseudo_sum4(src, dst, FRAME_IP_UDP, 8 + len));
	frame_put16(u + 6, ck ? ck : 0xffff); /* 0 means "no checksum" in UDP */
	*n = FRAME_ETH_HLEN + total;
	return 0;
}

int frame_build_tcp_rst(const struct frame_pkt *seg, uint8_t *out, size_t cap, size_t *n)
{
	size_t hl = seg->ipv == 6 ? FRAME_IP6_HLEN : 20, total = hl + 20;
	uint8_t *t = out + FRAME_ETH_HLEN + hl;
	uint32_t seq, ack, seglen;
	uint8_t flags;

	if ((seg->ipv != 4 && seg->ipv != 6) || seg->proto != FRAME_IP_TCP || (seg->tcp_flags & FRAME_TCP_RST))
		return -EINVAL;
	if (cap < FRAME_ETH_HLEN + total)
		return -ENOSPC;
	if (seg->tcp_flags & FRAME_TCP_ACK) {
		seq = seg->ack;
		ack = 0;
		flags = FRAME_TCP_RST;
	} else {
		seglen = (uint32_t)seg->data_len + !!(seg->tcp_flags & FRAME_TCP_SYN) + !!(seg->tcp_flags & FRAME_TCP_FIN);
		seq = 0;
		ack = seg->seq + seglen;
		flags = FRAME_TCP_RST | FRAME_TCP_ACK;
	}
	put_eth(out, seg->eth_src, seg->eth_dst, seg->ipv == 6 ? FRAME_ETH_IPV6 : FRAME_ETH_IPV4);
	put_ip_answer(out + FRAME_ETH_HLEN, seg, FRAME_IP_TCP, 20);
	memset(t, 0, 20);
	frame_put16(t, seg->dport);
	frame_put16(t + 2, seg->sport);
	frame_put32(t + 4, seq);
	frame_put32(t + 8, ack);
	t[12] = 5 << 4;
	t[13] = flags;
	frame_put16(t + 16, frame_csum(t, 20, pseudo_sum(seg->ipv, seg->dst, seg->src, FRAME_IP_TCP, 20)));
	*n = FRAME_ETH_HLEN + total;
	return 0;
}

int frame_build_arp_request(const uint8_t smac[6], const uint8_t spa[4], const uint8_t tpa[4], uint8_t *out,
			 size_t cap, size_t *n)
{
	static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	static const uint8_t zero[6];

	if (cap < FRAME_ETH_HLEN + 28)
		return -ENOSPC;
	put_eth(out, bcast, smac, FRAME_ETH_ARP);
	put_arp(out + FRAME_ETH_HLEN, FRAME_ARP_REQUEST, smac, spa, zero, tpa);
	*n = FRAME_ETH_HLEN + 28;
	return 0;
}

int frame_build_port_unreach(const struct frame_pkt *dg, uint8_t *out, size_t cap, size_t *n)
{
	/* RFC 792: the offending IP header and the first 8 bytes of its
	 * payload (the UDP header), enough for the sender to find its socket.
	 * RFC 4443: as much of the packet as fits in the minimum MTU. */
	size_t quoted, total, hl = dg->ipv == 6 ? FRAME_IP6_HLEN : 20;
	uint8_t *c = out + FRAME_ETH_HLEN + hl;

	if ((dg->ipv != 4 && dg->ipv != 6) || dg->proto != FRAME_IP_UDP || !dg->ip)
		return -EINVAL;
	quoted = dg->ipv == 6 ? FRAME_IP6_MIN_MTU - FRAME_IP6_HLEN - 8 : dg->ip_hlen + 8;
	if (quoted > dg->ip_len)
		quoted = dg->ip_len;
	total = hl + 8 + quoted;
	if (cap < FRAME_ETH_HLEN + total)
		return -ENOSPC;
	memmove(c + 8, dg->ip, quoted); /* first: out may hold the datagram */
	put_eth(out, dg->eth_src, dg->eth_dst, dg->ipv == 6 ? FRAME_ETH_IPV6 : FRAME_ETH_IPV4);
	put_ip_answer(out + FRAME_ETH_HLEN, dg, FRAME_IP_ICMP, 8 + quoted);
	memset(c, 0, 8);
	if (dg->ipv == 6) {
		c[0] = FRAME_ICMP6_UNREACH;
		c[1] = FRAME_ICMP6_PORT_UNREACH;
		frame_put16(c + 2, frame_csum(c, 8 + quoted, pseudo_sum6(dg->dst, dg->src, FRAME_IP_ICMP6, 8 + quoted)));
	} else {
		c[0] = FRAME_ICMP_UNREACH;
		c[1] = FRAME_ICMP_PORT_UNREACH;
		frame_put16(c + 2, frame_csum(c, 8 + quoted, 0));
	}
	*n = FRAME_ETH_HLEN + total;
	return 0;
}

int frame_build_na(const struct frame_pkt *ns, const uint8_t mac[6], uint8_t *out, size_t cap, size_t *n)
{
	static const uint8_t unspec[16];
	const size_t plen = 24 + 8, total = FRAME_IP6_HLEN + plen;
	uint8_t *ip = out + FRAME_ETH_HLEN, *c = ip + FRAME_IP6_HLEN;

	if (ns->ipv != 6 || ns->proto != FRAME_IP_ICMP6 || ns->icmp_type != FRAME_ICMP6_NS ||
	    memcmp(ns->src, unspec, 16) == 0)
		return -EINVAL;
	if (cap < FRAME_ETH_HLEN + total)
		return -ENOSPC;
	put_eth(out, ns->nd_has_sll ? ns->nd_sll : ns->eth_src, mac, FRAME_ETH_IPV6);
	put_ipv6(ip, ns->nd_target, ns->src, FRAME_IP_ICMP6, plen, 255);
	memset(c, 0, plen);
	c[0] = FRAME_ICMP6_NA;
	c[4] = 0xe0; /* router, solicited, override */
	memcpy(c + 8, ns->nd_target, 16);
	c[24] = 2; /* target link-layer address */
	c[25] = 1;
	memcpy(c + 26, mac, 6);
	frame_put16(c + 2, frame_csum(c, plen, pseudo_sum6(ns->nd_target, ns->src, FRAME_IP_ICMP6, plen)));
	*n = FRAME_ETH_HLEN + total;
	return 0;
}
