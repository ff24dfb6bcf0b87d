/* Ethernet frames between the guest and kbox's stack: parsing what the
 * guest sends (Ethernet II, ARP for IPv4, IPv4 carrying TCP, UDP or ICMP,
 * IPv6 carrying TCP, UDP or ICMPv6) and building the few replies kbox
 * writes itself (ARP replies and neighbor advertisements, echo replies,
 * UDP datagrams for DNS, TCP resets, port unreachable).  Pure: no I/O, no state.
 * Every frame is hostile: each length field is checked against the bytes
 * received and checksums are verified before anything acts on a frame. */
#ifndef KBOX_LIB_FRAME_H
#define KBOX_LIB_FRAME_H

#include <stddef.h>
#include <stdint.h>

/* Network byte order fields at b (no alignment needed); the caller has
 * checked that the 2 or 4 bytes lie inside the frame. */

/* The big-endian 16-bit field at b. */
static inline uint16_t frame_get16(const uint8_t *b)
{
	return (uint16_t)(b[0] << 8 | b[1]);
}

/* The big-endian 32-bit field at b. */
static inline uint32_t frame_get32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Store v big-endian in b[0..2). */
static inline void frame_put16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)(v >> 8);
	b[1] = (uint8_t)v;
}

/* Store v big-endian in b[0..4). */
static inline void frame_put32(uint8_t *b, uint32_t v)
{
	frame_put16(b, (uint16_t)(v >> 16));
	frame_put16(b + 2, (uint16_t)v);
}

#define FRAME_ETH_HLEN 14u
#define FRAME_MTU 65520u                           /* largest IPv4 packet either side sends (virtio-net's MTU) */
#define FRAME_MAX (FRAME_ETH_HLEN + FRAME_MTU)     /* no VLAN tags, no FCS */
#define FRAME_ETH_IPV4 0x0800u
#define FRAME_ETH_ARP 0x0806u
#define FRAME_ETH_IPV6 0x86ddu
#define FRAME_IP_ICMP 1u
#define FRAME_IP_TCP 6u
#define FRAME_IP_UDP 17u
#define FRAME_IP_ICMP6 58u
#define FRAME_IP6_HLEN 40u
#define FRAME_TCP_FIN 0x01u
#define FRAME_TCP_SYN 0x02u
#define FRAME_TCP_RST 0x04u
#define FRAME_TCP_PSH 0x08u
#define FRAME_TCP_ACK 0x10u
#define FRAME_ARP_REQUEST 1u
#define FRAME_ARP_REPLY 2u
#define FRAME_ICMP_ECHO_REPLY 0u
#define FRAME_ICMP_ECHO 8u
#define FRAME_ICMP_UNREACH 3u
#define FRAME_ICMP_PORT_UNREACH 3u
#define FRAME_ICMP6_UNREACH 1u
#define FRAME_ICMP6_PORT_UNREACH 4u
#define FRAME_ICMP6_ECHO 128u
#define FRAME_ICMP6_ECHO_REPLY 129u
#define FRAME_ICMP6_NS 135u /* neighbor solicitation (RFC 4861 4.3) */
#define FRAME_ICMP6_NA 136u /* neighbor advertisement (RFC 4861 4.4) */
#define FRAME_IP6_MIN_MTU 1280u

/* One parsed frame.  Pointers point into the frame given to frame_parse. */
struct frame_pkt {
	uint8_t eth_dst[6], eth_src[6];
	uint16_t ethertype;
	/* ARP (ethertype FRAME_ETH_ARP): Ethernet/IPv4 only. */
	uint16_t arp_op;
	uint8_t arp_sha[6], arp_spa[4], arp_tha[6], arp_tpa[4];
	/* IP: version 4 or 6 (0 for ARP); the packet is ip[0, ip_len), its
	 * header ip[0, ip_hlen) (40 for IPv6, which carries no extension
	 * headers here).  proto is IPv4's protocol or IPv6's next header.
	 * src and dst hold 4 bytes for IPv4, 16 for IPv6. */
	uint8_t ipv;
	const uint8_t *ip;
	size_t ip_hlen, ip_len;
	uint8_t proto;
	uint8_t hop_limit; /* IPv6 only */
	uint8_t src[16], dst[16];
	/* ICMPv6 neighbor solicitation: the address asked for and, if the
	 * solicitation carried it, the sender's link-layer address. */
	uint8_t nd_target[16];
	uint8_t nd_sll[6];
	uint8_t nd_has_sll;
	/* TCP and UDP ports; ICMP type and code. */
	uint16_t sport, dport;
	uint32_t seq, ack; /* TCP */
	uint8_t tcp_flags;
	uint8_t icmp_type, icmp_code;
	/* Payload after the TCP, UDP or ICMP header. */
	const uint8_t *data;
	size_t data_len;
};

/* The length of p's addresses in src and dst: 16 for IPv6, else 4. */
static inline size_t frame_addr_len(const struct frame_pkt *p)
{
	return p->ipv == 6 ? 16 : 4;
}

/* Parse frame f of len bytes into *p.  Returns 0 for an ARP packet
 * (Ethernet/IPv4, 28 bytes), an unfragmented IPv4 packet carrying TCP,
 * UDP or ICMP, or an IPv6 packet without extension headers carrying TCP,
 * UDP or ICMPv6, whose lengths and checksums (IPv4 header, TCP, ICMP,
 * ICMPv6, UDP unless zero in IPv4) are right; -EMSGSIZE for a frame longer
 * than FRAME_MAX; -ENOTSUP for what kbox does not handle (other
 * protocols, IPv4 fragments, IPv6 extension headers, jumbograms; IPv4
 * options are fine); -EPROTO for anything malformed, a neighbor
 * solicitation with a bad option included. */
int frame_parse(const uint8_t *f, size_t len, struct frame_pkt *p);

/* The Internet checksum over buf[0, len) continuing from the 32-bit
 * running sum sum (0 to start); returns the folded, complemented value. */
uint16_t frame_csum(const void *buf, size_t len, uint32_t sum);

/* Fill in the TCP checksum of IPv6 packet ip[0, len) (40-byte header,
 * TCP, len as its payload length says; not checked). */
void frame_fill_tcp6_csum(uint8_t *ip, size_t len);

/* Reply to ARP request req (as parsed) for an address kbox owns: "tpa is
 * at mac".  Writes the frame to out and its length to *n.  0, -EINVAL (req
 * is no ARP request) or -ENOSPC. */
int frame_build_arp_reply(const struct frame_pkt *req, const uint8_t mac[6], uint8_t *out, size_t cap, size_t *n);

/* Answer ICMP or ICMPv6 echo request req: same identifier, sequence and
 * data, addresses and MACs swapped (our MAC is req->eth_dst).  0, -EINVAL
 * or -ENOSPC. */
int frame_build_echo_reply(const struct frame_pkt *req, uint8_t *out, size_t cap, size_t *n);

/* Build an IPv4/UDP frame from src:sport (MAC smac) to dst:dport (MAC
 * dmac) carrying data[0, len), with its checksum.  0 or -ENOSPC (also
 * when the packet would exceed FRAME_MTU). */
int frame_build_udp(const uint8_t dmac[6], const uint8_t smac[6], const uint8_t src[4], uint16_t sport,
		 const uint8_t dst[4], uint16_t dport, const uint8_t *data, size_t len, uint8_t *out, size_t cap,
		 size_t *n);

/* Build the reset answering TCP segment seg (IPv4 or IPv6; RFC 9293 3.10.7.1): with ACK
 * set in seg, seq = seg.ack and flags RST; otherwise seq 0, ack = seg.seq +
 * the segment's length (SYN and FIN count one) and flags RST|ACK.  No
 * reset answers a reset (-EINVAL). 0, -EINVAL or -ENOSPC. */
int frame_build_tcp_rst(const struct frame_pkt *seg, uint8_t *out, size_t cap, size_t *n);

/* Ask who has tpa (ARP request, broadcast) as smac/spa.  0 or -ENOSPC. */
int frame_build_arp_request(const uint8_t smac[6], const uint8_t spa[4], const uint8_t tpa[4], uint8_t *out,
			 size_t cap, size_t *n);

/* Answer UDP datagram dg (as parsed, dg->ip still valid) with ICMP
 * "port unreachable" from the address it was sent to, quoting its IP
 * header and 8 bytes (RFC 792), or for IPv6 ICMPv6 "port unreachable"
 * quoting as much of the datagram as keeps the answer within 1280 bytes
 * (RFC 4443 3.1).  0, -EINVAL (no UDP) or -ENOSPC. */
int frame_build_port_unreach(const struct frame_pkt *dg, uint8_t *out, size_t cap, size_t *n);

/* Answer neighbor solicitation ns (as parsed) for an address kbox owns:
 * a solicited advertisement of ns->nd_target at mac, with the router and
 * override flags, to the soliciting address (RFC 4861 7.2.4).  A
 * solicitation from the unspecified address (duplicate address
 * detection) is not answered (-EINVAL).  0, -EINVAL or -ENOSPC. */
int frame_build_na(const struct frame_pkt *ns, const uint8_t mac[6], uint8_t *out, size_t cap, size_t *n);

#endif
