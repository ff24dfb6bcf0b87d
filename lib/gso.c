#include "lib/gso.h"

#include <errno.h>
#include <string.h>

#define IP_OFF FRAME_ETH_HLEN
#define TCP_OFF (FRAME_ETH_HLEN + 20u) /* only option-less IP headers merge */

void gso_init(struct gso *g, size_t max, gso_emit_fn emit, void *ctx)
{
	if (max < GSO_MIN_BOUND)
		max = GSO_MIN_BOUND;
	if (max > GSO_FRAME_MAX)
		max = GSO_FRAME_MAX;
	g->emit = emit;
	g->ctx = ctx;
	g->max = max;
	g->len = 0;
	g->segs = 0;
}

/* The length of f's headers if f is a segment that may merge (see
 * gso.h), else 0. */
static size_t candidate(const uint8_t *f, size_t len)
{
	size_t hlen;
	uint8_t flags;

	if (len < TCP_OFF + 20 || len > FRAME_MAX || frame_get16(f + 12) != FRAME_ETH_IPV4)
		return 0;
	if (f[IP_OFF] != 0x45 || frame_get16(f + IP_OFF + 2) != len - FRAME_ETH_HLEN || (frame_get16(f + IP_OFF + 6) & 0x3fff) != 0 ||
	    f[IP_OFF + 9] != FRAME_IP_TCP)
		return 0;
	hlen = TCP_OFF + (size_t)(f[TCP_OFF + 12] >> 4) * 4;
	flags = f[TCP_OFF + 13];
	if (hlen < TCP_OFF + 20 || hlen >= len || (flags & ~(FRAME_TCP_ACK | FRAME_TCP_PSH)) != 0 || !(flags & FRAME_TCP_ACK) ||
	    frame_get16(f + TCP_OFF + 18) != 0)
		return 0;
	return hlen;
}

/* Whether segment f (headers hlen) continues the pending frame. */
static int continues(const struct gso *g, const uint8_t *f, size_t len, size_t hlen, int partial)
{
	const uint8_t *p = g->buf;
	size_t plen = len - hlen;

	if (g->len == 0 || hlen != g->hlen || plen > g->mss || g->len + plen > g->max || partial != g->partial)
		return 0;
	/* Only the last segment may be short or pushed. */
	if (g->len - g->hlen != (size_t)g->segs * g->mss || (p[TCP_OFF + 13] & FRAME_TCP_PSH))
		return 0;
	if (frame_get32(f + TCP_OFF + 4) != g->next_seq)
		return 0;
	/* Ethernet header; IP version to TOS; flags to protocol; addresses;
	 * TCP ports; acknowledgement to window (flags differ: checked
	 * above); urgent pointer and options. */
	return memcmp(f, p, IP_OFF + 2) == 0 && memcmp(f + IP_OFF + 6, p + IP_OFF + 6, 4) == 0 &&
	       memcmp(f + IP_OFF + 12, p + IP_OFF + 12, 8) == 0 && memcmp(f + TCP_OFF, p + TCP_OFF, 4) == 0 &&
	       memcmp(f + TCP_OFF + 8, p + TCP_OFF + 8, 5) == 0 && memcmp(f + TCP_OFF + 14, p + TCP_OFF + 14, 2) == 0 &&
	       memcmp(f + TCP_OFF + 18, p + TCP_OFF + 18, hlen - TCP_OFF - 18) == 0;
}

/* A frame that leaves alone: unchanged, with a zero header or, when its
 * TCP checksum is partial, with NEEDS_CSUM for the peer to complete. */
static void emit_plain(struct gso *g, const uint8_t *f, size_t len, int partial)
{
	struct gso_hdr h;

	memset(&h, 0, sizeof h);
	if (partial) {
		h.flags = GSO_F_NEEDS_CSUM;
		h.csum_start = TCP_OFF;
		h.csum_offset = 16;
	}
	g->emit(g->ctx, &h, f, len);
}

int gso_tcp_partial(uint8_t *f, size_t len)
{
	uint8_t ph[12];

	if (len < TCP_OFF + 20 || frame_get16(f + 12) != FRAME_ETH_IPV4 || f[IP_OFF] != 0x45 || f[IP_OFF + 9] != FRAME_IP_TCP ||
	    frame_get16(f + IP_OFF + 2) != len - FRAME_ETH_HLEN)
		return -EINVAL;
	memcpy(ph, f + IP_OFF + 12, 8);
	ph[8] = 0;
	ph[9] = FRAME_IP_TCP;
	frame_put16(ph + 10, (uint16_t)(len - TCP_OFF));
	frame_put16(f + TCP_OFF + 16, (uint16_t)~frame_csum(ph, sizeof ph, 0));
	return 0;
}

void gso_flush(struct gso *g)
{
	uint8_t *p = g->buf, ph[12];
	size_t iplen = g->len - FRAME_ETH_HLEN;
	struct gso_hdr h;

	if (g->len == 0)
		return;
	if (g->segs == 1) {
		/* Unchanged, checksums and all. */
		emit_plain(g, p, g->len, g->partial);
		g->len = 0;
		return;
	}
	frame_put16(p + IP_OFF + 2, (uint16_t)iplen);
	frame_put16(p + IP_OFF + 10, 0);
	frame_put16(p + IP_OFF + 10, frame_csum(p + IP_OFF, 20, 0));
	/* The pseudo-header's sum, folded and not complemented: the peer
	 * adds the segment's bytes and complements (NEEDS_CSUM). */
	memcpy(ph, p + IP_OFF + 12, 8);
	ph[8] = 0;
	ph[9] = FRAME_IP_TCP;
	frame_put16(ph + 10, (uint16_t)(iplen - 20));
	frame_put16(p + TCP_OFF + 16, (uint16_t)~frame_csum(ph, sizeof ph, 0));
	h.flags = GSO_F_NEEDS_CSUM;
	h.gso_type = GSO_TYPE_TCPV4;
	h.hdr_len = (uint16_t)g->hlen;
	h.gso_size = (uint16_t)g->mss;
	h.csum_start = TCP_OFF;
	h.csum_offset = 16;
	g->emit(g->ctx, &h, p, g->len);
	g->len = 0;
}

static void add(struct gso *g, const uint8_t *f, size_t len, int partial)
{
	size_t hlen = candidate(f, len);

	if (hlen && continues(g, f, len, hlen, partial)) {
		memcpy(g->buf + g->len, f + hlen, len - hlen);
		g->len += len - hlen;
		g->buf[TCP_OFF + 13] = f[TCP_OFF + 13];
		g->segs++;
		g->next_seq += (uint32_t)(len - hlen);
		return;
	}
	gso_flush(g);
	if (!hlen) {
		emit_plain(g, f, len, partial);
		return;
	}
	memcpy(g->buf, f, len);
	g->partial = partial;
	g->len = len;
	g->hlen = hlen;
	g->mss = len - hlen;
	g->segs = 1;
	g->next_seq = frame_get32(f + TCP_OFF + 4) + (uint32_t)g->mss;
}

void gso_add(struct gso *g, const uint8_t *f, size_t len)
{
	add(g, f, len, 0);
}

void gso_add_partial(struct gso *g, const uint8_t *f, size_t len)
{
	add(g, f, len, 1);
}

int gso_segment(const struct gso_hdr *h, const uint8_t *f, size_t len, uint8_t *out, size_t cap, gso_emit_fn emit,
		void *ctx)
{
	static const struct gso_hdr none;
	size_t hlen = h->hdr_len, mss = h->gso_size, off, i;
	uint32_t seq;
	uint16_t id;
	uint8_t ph[12];

	if (h->gso_type == GSO_TYPE_NONE && h->flags == 0) {
		emit(ctx, &none, f, len);
		return 0;
	}
	if (h->gso_type == GSO_TYPE_NONE && h->flags == GSO_F_NEEDS_CSUM) {
		/* One frame: the checksum from csum_start to the end, stored
		 * at csum_offset over the partial sum already there. */
		size_t at = (size_t)h->csum_start + h->csum_offset;

		if (h->csum_start < FRAME_ETH_HLEN || h->csum_start >= len || at + 2 > len || len > cap)
			return -EINVAL;
		memcpy(out, f, len);
		frame_put16(out + at, frame_csum(out + h->csum_start, len - h->csum_start, 0));
		emit(ctx, &none, out, len);
		return 0;
	}
	if (h->gso_type != GSO_TYPE_TCPV4 || h->flags != GSO_F_NEEDS_CSUM || h->csum_start != TCP_OFF ||
	    h->csum_offset != 16 || mss == 0 || hlen < TCP_OFF + 20 || hlen >= len || len > GSO_FRAME_MAX ||
	    hlen + mss > cap || frame_get16(f + 12) != FRAME_ETH_IPV4 || f[IP_OFF] != 0x45 || f[IP_OFF + 9] != FRAME_IP_TCP ||
	    frame_get16(f + IP_OFF + 2) != len - FRAME_ETH_HLEN || hlen != TCP_OFF + (size_t)(f[TCP_OFF + 12] >> 4) * 4)
		return -EINVAL;
	seq = frame_get32(f + TCP_OFF + 4);
	id = frame_get16(f + IP_OFF + 4);
	memcpy(ph, f + IP_OFF + 12, 8);
	ph[8] = 0;
	ph[9] = FRAME_IP_TCP;
	for (off = hlen, i = 0; off < len; off += mss, i++) {
		size_t plen = len - off < mss ? len - off : mss, n = hlen + plen;

		memcpy(out, f, hlen);
		memcpy(out + hlen, f + off, plen);
		frame_put16(out + IP_OFF + 2, (uint16_t)(n - FRAME_ETH_HLEN));
		frame_put16(out + IP_OFF + 4, (uint16_t)(id + i));
		frame_put16(out + IP_OFF + 10, 0);
		frame_put16(out + IP_OFF + 10, frame_csum(out + IP_OFF, 20, 0));
		frame_put32(out + TCP_OFF + 4, seq + (uint32_t)(off - hlen));
		if (off + plen < len)
			out[TCP_OFF + 13] &= (uint8_t)~(FRAME_TCP_PSH | FRAME_TCP_FIN);
		frame_put16(ph + 10, (uint16_t)(n - TCP_OFF));
		frame_put16(out + TCP_OFF + 16, 0);
		frame_put16(out + TCP_OFF + 16, frame_csum(out + TCP_OFF, n - TCP_OFF, (uint16_t)~frame_csum(ph, sizeof ph, 0)));
		emit(ctx, &none, out, n);
	}
	return 0;
}
