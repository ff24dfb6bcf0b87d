/* The segment merger (lib/gso.c): every merged frame is cut back
 * into segments here the way the peer does it (Linux's tcp_gso_segment,
 * virtio 1.2 §5.1.6.2), its checksums completed and recomputed, and the
 * result must be the original segments byte for byte, in their order.
 * Also: what stops a merge, interleaved connections, the 64 KiB bound. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/frame.h"
#include "lib/gso.h"
#include "tests/lib/unit_suite.h"

#define MAXF 512

static const uint8_t gmac[6] = {0x02, 0, 0, 0, 0, 0x15};
static const uint8_t wmac[6] = {0x52, 0x55, 0x0a, 0x00, 0x02, 0x02};

/* Frames as the merger emitted them. */
static struct out {
	struct gso_hdr h;
	uint8_t *f;
	size_t len;
} outs[MAXF];
static size_t nouts;

static void collect(void *ctx, const struct gso_hdr *h, const uint8_t *f, size_t len)
{
	ck_assert_uint_lt(nouts, MAXF);
	outs[nouts].h = *h;
	outs[nouts].f = malloc(len);
	ck_assert_ptr_nonnull(outs[nouts].f);
	memcpy(outs[nouts].f, f, len);
	outs[nouts].len = len;
	nouts++;
}

static void reset_outs(void)
{
	size_t i;

	for (i = 0; i < nouts; i++)
		free(outs[i].f);
	nouts = 0;
}

/* The TCP checksum over the segment at f + 34 of tcplen bytes. */
static uint16_t tcp_sum(const uint8_t *f, size_t tcplen)
{
	uint8_t ph[12];

	memcpy(ph, f + 26, 8);
	ph[8] = 0;
	ph[9] = FRAME_IP_TCP;
	frame_put16(ph + 10, (unsigned)tcplen);
	return frame_csum(f + 34, tcplen, (uint32_t)(uint16_t)~frame_csum(ph, 12, 0));
}

/* Build a segment from 10.0.2.2:sport to the guest as lwIP sends it. */
static size_t seg(uint8_t *f, uint16_t sport, uint32_t seq, uint32_t ack, uint8_t flags, uint16_t ipid,
		  size_t plen, uint8_t fill)
{
	size_t len = 54 + plen;

	memset(f, 0, 54);
	memcpy(f, gmac, 6);
	memcpy(f + 6, wmac, 6);
	frame_put16(f + 12, FRAME_ETH_IPV4);
	f[14] = 0x45;
	frame_put16(f + 16, (unsigned)(len - 14));
	frame_put16(f + 18, ipid);
	f[22] = 255;
	f[23] = FRAME_IP_TCP;
	f[26] = 10, f[27] = 0, f[28] = 2, f[29] = 2;
	f[30] = 10, f[31] = 0, f[32] = 2, f[33] = 15;
	frame_put16(f + 24, frame_csum(f + 14, 20, 0));
	frame_put16(f + 34, sport);
	frame_put16(f + 36, 40000);
	frame_put32(f + 38, seq);
	frame_put32(f + 42, ack);
	f[46] = 5 << 4;
	f[47] = flags;
	frame_put16(f + 48, 0xffff);
	memset(f + 54, fill, plen);
	for (size_t i = 0; i < plen; i += 97)
		f[54 + i] = (uint8_t)(seq + i); /* distinct bytes catch misplaced payload */
	frame_put16(f + 50, tcp_sum(f, len - 34));
	return len;
}

/* Cut out[k] back into segments as the peer does, checking each
 * checksum, and append them to segs/lens. */
static void segment(const struct out *o, uint8_t **segs, size_t *lens, size_t *n)
{
	const uint8_t *f = o->f;
	size_t hlen = o->h.hdr_len, mss = o->h.gso_size, off, i = 0;
	uint32_t seq = frame_get32(f + 38);
	unsigned id = frame_get16(f + 18);

	if (o->h.gso_type == GSO_TYPE_NONE) {
		ck_assert_uint_le(o->len, FRAME_MAX);
		segs[*n] = malloc(o->len);
		memcpy(segs[*n], f, o->len);
		if (o->h.flags) {
			/* A lone frame with its checksum left to us. */
			ck_assert_uint_eq(o->h.flags, GSO_F_NEEDS_CSUM);
			ck_assert_uint_eq(o->h.csum_start, 34);
			ck_assert_uint_eq(o->h.csum_offset, 16);
			frame_put16(segs[*n] + 50, frame_csum(segs[*n] + 34, o->len - 34, 0));
		}
		lens[(*n)++] = o->len;
		return;
	}
	ck_assert_uint_eq(o->h.gso_type, GSO_TYPE_TCPV4);
	ck_assert_uint_eq(o->h.flags, GSO_F_NEEDS_CSUM);
	ck_assert_uint_eq(o->h.csum_start, 34);
	ck_assert_uint_eq(o->h.csum_offset, 16);
	ck_assert_uint_eq(hlen, 54);
	ck_assert_uint_le(o->len, GSO_FRAME_MAX);
	ck_assert_uint_gt(o->len, hlen + mss); /* more than one segment */
	ck_assert_uint_eq(frame_get16(f + 16), o->len - 14);
	ck_assert_uint_eq(frame_csum(f + 14, 20, 0), 0);
	/* The partial checksum: the pseudo-header with the whole TCP length. */
	{
		uint8_t ph[12];

		memcpy(ph, f + 26, 8);
		ph[8] = 0;
		ph[9] = FRAME_IP_TCP;
		frame_put16(ph + 10, (unsigned)(o->len - 34));
		ck_assert_uint_eq(frame_get16(f + 50), (uint16_t)~frame_csum(ph, 12, 0));
		/* Completing it gives the checksum of the whole segment. */
		uint8_t *c = malloc(o->len);
		memcpy(c, f, o->len);
		frame_put16(c + 50, 0);
		uint16_t want = tcp_sum(c, o->len - 34);
		frame_put16(c + 50, frame_get16(f + 50));
		ck_assert_uint_eq(frame_csum(c + 34, o->len - 34, 0), want);
		free(c);
	}
	for (off = hlen; off < o->len; off += mss, i++) {
		size_t plen = o->len - off < mss ? o->len - off : mss, len = hlen + plen;
		uint8_t *s = malloc(len);

		memcpy(s, f, hlen);
		memcpy(s + hlen, f + off, plen);
		frame_put16(s + 16, (unsigned)(len - 14));
		frame_put16(s + 18, (id + i) & 0xffff);
		frame_put16(s + 24, 0);
		frame_put16(s + 24, frame_csum(s + 14, 20, 0));
		frame_put32(s + 38, seq + (uint32_t)(off - hlen));
		if (off + plen < o->len)
			s[47] &= (uint8_t)~(FRAME_TCP_PSH | FRAME_TCP_FIN);
		frame_put16(s + 50, 0);
		frame_put16(s + 50, tcp_sum(s, len - 34));
		segs[*n] = s;
		lens[(*n)++] = len;
	}
}

static size_t ncut;

/* gso_segment's output must be the next of the frames in ctx. */
static void cut(void *ctx, const struct gso_hdr *h, const uint8_t *f, size_t len)
{
	uint8_t **in = ctx;

	ck_assert_uint_eq(h->flags, 0);
	ck_assert_uint_eq(h->gso_type, GSO_TYPE_NONE);
	ck_assert_msg(memcmp(f, in[ncut], len) == 0, "cut %zu differs", ncut);
	ncut++;
}

/* Feed frames in[0, n) through a merger of max bytes and check that the
 * emitted frames segment back into exactly them; returns how many frames
 * were emitted. */
static int partial_in; /* roundtrip offers its frames with partial checksums */

static size_t roundtrip(uint8_t **in, const size_t *inlen, size_t n, size_t max)
{
	static struct gso g;
	static uint8_t *segs[4 * MAXF];
	static size_t lens[4 * MAXF];
	size_t i, ns = 0, k;

	reset_outs();
	gso_init(&g, max, collect, NULL);
	for (i = 0; i < n; i++) {
		if (partial_in) {
			static uint8_t c[FRAME_MAX];

			memcpy(c, in[i], inlen[i]);
			ck_assert_int_eq(gso_tcp_partial(c, inlen[i]), 0);
			gso_add_partial(&g, c, inlen[i]);
		} else {
			gso_add(&g, in[i], inlen[i]);
		}
	}
	gso_flush(&g);
	gso_flush(&g); /* nothing pending: no frame */
	for (k = 0; k < nouts; k++) {
		ck_assert_uint_le(outs[k].len, g.max);
		segment(&outs[k], segs, lens, &ns);
	}
	ck_assert_uint_eq(ns, n);
	for (i = 0; i < n; i++) {
		ck_assert_uint_eq(lens[i], inlen[i]);
		ck_assert_msg(memcmp(segs[i], in[i], lens[i]) == 0, "segment %zu differs", i);
		free(segs[i]);
	}
	/* gso_segment, kbox's own cutter, agrees. */
	ncut = 0;
	for (k = 0; k < nouts; k++) {
		uint8_t out[FRAME_MAX];

		ck_assert_int_eq(gso_segment(&outs[k].h, outs[k].f, outs[k].len, out, sizeof out, cut, in), 0);
	}
	ck_assert_uint_eq(ncut, n);
	return nouts;
}

static uint8_t *frames[MAXF];
static size_t flen[MAXF];

static void setup(void)
{
	for (size_t i = 0; i < MAXF; i++) {
		frames[i] = malloc(FRAME_MAX);
		ck_assert_ptr_nonnull(frames[i]);
	}
}

static void teardown(void)
{
	for (size_t i = 0; i < MAXF; i++)
		free(frames[i]);
	reset_outs();
}

START_TEST(one_burst)
{
	uint32_t seq = 0xfffff000u; /* wraps inside the burst */
	size_t i;

	for (i = 0; i < 44; i++) {
		flen[i] = seg(frames[i], 80, seq, 7, FRAME_TCP_ACK, (uint16_t)(0xfff0 + i), 1460, (uint8_t)i);
		seq += 1460;
	}
	flen[44] = seg(frames[44], 80, seq, 7, FRAME_TCP_ACK | FRAME_TCP_PSH, (uint16_t)(0xfff0 + 44), 333, 9);
	ck_assert_uint_eq(roundtrip(frames, flen, 45, GSO_FRAME_MAX), 1);
	ck_assert_uint_eq(outs[0].h.gso_size, 1460);
	ck_assert_uint_eq(outs[0].h.hdr_len, 54);
	ck_assert_uint_eq(outs[0].len, 54 + 44 * 1460 + 333);
	ck_assert_uint_eq(outs[0].f[47], FRAME_TCP_ACK | FRAME_TCP_PSH);
}
END_TEST

START_TEST(alone_unchanged)
{
	flen[0] = seg(frames[0], 80, 1, 7, FRAME_TCP_ACK | FRAME_TCP_PSH, 1, 100, 1);
	ck_assert_uint_eq(roundtrip(frames, flen, 1, GSO_FRAME_MAX), 1);
	ck_assert_uint_eq(outs[0].h.gso_type, GSO_TYPE_NONE);
	ck_assert_mem_eq(outs[0].f, frames[0], flen[0]);
}
END_TEST

START_TEST(bounded)
{
	uint32_t seq = 1;
	size_t i, k, total = 0;

	for (i = 0; i < 300; i++) {
		flen[i] = seg(frames[i], 80, seq, 7, FRAME_TCP_ACK, (uint16_t)i, 1460, 3);
		seq += 1460;
	}
	/* 44 segments of 1460 fit in 65535 bytes of IP packet, 45 do not. */
	ck_assert_uint_eq(roundtrip(frames, flen, 300, GSO_FRAME_MAX), 7);
	for (k = 0; k < nouts; k++) {
		ck_assert_uint_le(outs[k].len - 14, GSO_IP_MAX);
		total += outs[k].len - 54;
	}
	ck_assert_uint_eq(total, 300 * 1460);
	ck_assert_uint_eq(outs[0].len, 54 + 44 * 1460);
	/* A smaller bound, and the smallest: nothing merges. */
	ck_assert_uint_eq(roundtrip(frames, flen, 300, 54 + 4 * 1460), 75);
	ck_assert_uint_eq(roundtrip(frames, flen, 10, 0), 10);
}
END_TEST

START_TEST(interleaved)
{
	uint32_t a = 100, b = 5000;
	size_t i, n = 0;

	/* A A B A B B: each change of connection starts a new frame. */
	static const int who[] = {0, 0, 1, 0, 1, 1};
	for (i = 0; i < 6; i++) {
		if (who[i] == 0) {
			flen[n] = seg(frames[n], 80, a, 1, FRAME_TCP_ACK, (uint16_t)n, 1000, 1);
			a += 1000;
		} else {
			flen[n] = seg(frames[n], 443, b, 1, FRAME_TCP_ACK, (uint16_t)n, 1000, 2);
			b += 1000;
		}
		n++;
	}
	ck_assert_uint_eq(roundtrip(frames, flen, n, GSO_FRAME_MAX), 4);
	ck_assert_uint_eq(outs[0].h.gso_type, GSO_TYPE_TCPV4);
	ck_assert_uint_eq(frame_get16(outs[1].f + 34), 443);
	ck_assert_uint_eq(outs[3].h.gso_type, GSO_TYPE_TCPV4);
}
END_TEST

START_TEST(stoppers)
{
	/* After two mergeable segments, each of these ends the frame and goes
	 * out on its own or starts the next, order kept. */
	static const struct {
		uint8_t flags;
		size_t plen;
		int seq_gap, ack_diff, win_diff, mss_diff;
		size_t frames; /* emitted for: 2 merged, the odd one, 2 merged */
	} cases[] = {
		{FRAME_TCP_ACK | FRAME_TCP_FIN, 100, 0, 0, 0, 0, 3},
		{FRAME_TCP_ACK | FRAME_TCP_SYN, 0, 0, 0, 0, 0, 3},
		{FRAME_TCP_RST, 0, 0, 0, 0, 0, 3},
		{FRAME_TCP_ACK, 0, 0, 0, 0, 0, 3},          /* pure ACK */
		{FRAME_TCP_ACK | 0x20, 100, 0, 0, 0, 0, 3}, /* URG */
		{FRAME_TCP_ACK, 100, 1, 0, 0, 0, 3},        /* sequence gap */
		{FRAME_TCP_ACK, 100, 0, 1, 0, 0, 3},        /* other acknowledgement */
		{FRAME_TCP_ACK, 100, 0, 0, 1, 0, 3},        /* other window */
		{FRAME_TCP_ACK, 1200, 0, 0, 0, 1, 3},       /* longer than the first */
	};
	size_t c;

	for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		uint32_t seq = 10;
		size_t n = 0, i;

		for (i = 0; i < 2; i++, seq += 1000, n++)
			flen[n] = seg(frames[n], 80, seq, 1, FRAME_TCP_ACK, (uint16_t)n, 1000, 1);
		if (cases[c].seq_gap)
			seq += 5;
		flen[n] = seg(frames[n], 80, seq, 1 + (uint32_t)cases[c].ack_diff, cases[c].flags, (uint16_t)n,
			      cases[c].plen, 4);
		if (cases[c].win_diff) {
			frame_put16(frames[n] + 48, 1000);
			frame_put16(frames[n] + 50, 0);
			frame_put16(frames[n] + 50, tcp_sum(frames[n], flen[n] - 34));
		}
		seq += (uint32_t)cases[c].plen + ((cases[c].flags & (FRAME_TCP_SYN | FRAME_TCP_FIN)) ? 1 : 0);
		n++;
		/* Two more that cannot continue the odd one (new ack). */
		for (i = 0; i < 2; i++, seq += 1000, n++)
			flen[n] = seg(frames[n], 80, seq, 99, FRAME_TCP_ACK, (uint16_t)n, 1000, 1);
		ck_assert_msg(roundtrip(frames, flen, n, GSO_FRAME_MAX) == cases[c].frames, "case %zu: %zu frames", c,
			      nouts);
		ck_assert_uint_eq(outs[0].h.gso_type, GSO_TYPE_TCPV4);
		ck_assert_uint_eq(outs[1].h.gso_type, GSO_TYPE_NONE);
	}
}
END_TEST

START_TEST(push_and_short_end_a_frame)
{
	uint32_t seq = 1;
	size_t n = 0;

	/* PSH in the middle: the next segment starts a new frame. */
	flen[n] = seg(frames[n], 80, seq, 1, FRAME_TCP_ACK, 0, 1000, 1), seq += 1000, n++;
	flen[n] = seg(frames[n], 80, seq, 1, FRAME_TCP_ACK | FRAME_TCP_PSH, 1, 1000, 1), seq += 1000, n++;
	flen[n] = seg(frames[n], 80, seq, 1, FRAME_TCP_ACK, 2, 1000, 1), seq += 1000, n++;
	flen[n] = seg(frames[n], 80, seq, 1, FRAME_TCP_ACK, 3, 1000, 1), seq += 1000, n++;
	/* A short one, then more: the short one ends the frame. */
	flen[n] = seg(frames[n], 80, seq, 1, FRAME_TCP_ACK, 4, 10, 1), seq += 10, n++;
	flen[n] = seg(frames[n], 80, seq, 1, FRAME_TCP_ACK, 5, 1000, 1), seq += 1000, n++;
	ck_assert_uint_eq(roundtrip(frames, flen, n, GSO_FRAME_MAX), 3);
	ck_assert_uint_eq(outs[0].len, 54 + 2000);
	ck_assert_uint_eq(outs[1].len, 54 + 2010);
	ck_assert_uint_eq(outs[2].h.gso_type, GSO_TYPE_NONE);
}
END_TEST

START_TEST(other_frames)
{
	uint32_t seq = 1;
	size_t n = 0;

	flen[n] = seg(frames[n], 80, seq, 1, FRAME_TCP_ACK, 0, 1000, 1), seq += 1000, n++;
	flen[n] = seg(frames[n], 80, seq, 1, FRAME_TCP_ACK, 1, 1000, 1), seq += 1000, n++;
	/* An ARP request: flushes, goes out alone. */
	ck_assert_int_eq(frame_build_arp_request(wmac, (const uint8_t[]){10, 0, 2, 2}, (const uint8_t[]){10, 0, 2, 15},
					      frames[n], FRAME_MAX, &flen[n]),
			 0);
	n++;
	/* A segment with IP options never merges. */
	flen[n] = seg(frames[n], 80, seq, 1, FRAME_TCP_ACK, 2, 1000, 1), seq += 1000, n++;
	reset_outs();
	{
		static struct gso g;
		uint8_t opt[FRAME_MAX];

		memcpy(opt, frames[3], 34);
		opt[14] = 0x46;
		memset(opt + 34, 1, 4); /* four NOPs */
		memcpy(opt + 38, frames[3] + 34, flen[3] - 34);
		frame_put16(opt + 16, (unsigned)(flen[3] + 4 - 14));
		gso_init(&g, GSO_FRAME_MAX, collect, NULL);
		for (size_t i = 0; i < 3; i++)
			gso_add(&g, frames[i], flen[i]);
		gso_add(&g, opt, flen[3] + 4);
		gso_add(&g, opt, flen[3] + 4);
		gso_flush(&g);
		ck_assert_uint_eq(nouts, 4);
		ck_assert_uint_eq(outs[0].h.gso_type, GSO_TYPE_TCPV4);
		ck_assert_uint_eq(frame_get16(outs[1].f + 12), FRAME_ETH_ARP);
		ck_assert_mem_eq(outs[2].f, opt, flen[3] + 4);
		ck_assert_uint_eq(outs[3].h.gso_type, GSO_TYPE_NONE);
	}
	ck_assert_uint_eq(roundtrip(frames, flen, n, GSO_FRAME_MAX), 3);
}
END_TEST

START_TEST(segment_refuses)
{
	static struct gso g;
	uint8_t out[FRAME_MAX];
	struct gso_hdr h;
	uint32_t seq = 1;
	size_t i;

	for (i = 0; i < 3; i++, seq += 1000)
		flen[i] = seg(frames[i], 80, seq, 1, FRAME_TCP_ACK, (uint16_t)i, 1000, 1);
	reset_outs();
	gso_init(&g, GSO_FRAME_MAX, collect, NULL);
	for (i = 0; i < 3; i++)
		gso_add(&g, frames[i], flen[i]);
	gso_flush(&g);
	ck_assert_uint_eq(nouts, 1);
	/* Each field wrong in turn: refused, nothing emitted. */
	for (i = 0; i < 9; i++) {
		h = outs[0].h;
		switch (i) {
		case 0: h.gso_type = 3; break;
		case 1: h.flags = 0; break;
		case 2: h.csum_start = 30; break;
		case 3: h.csum_offset = 6; break;
		case 4: h.gso_size = 0; break;
		case 5: h.hdr_len = 50; break;
		case 6: h.hdr_len = (uint16_t)outs[0].len; break;
		case 7: h.gso_size = FRAME_MAX; break;
		case 8: h.flags = 2, h.gso_type = GSO_TYPE_NONE; break;
		}
		ncut = 0;
		ck_assert_int_eq(gso_segment(&h, outs[0].f, outs[0].len, out, sizeof out, cut, frames), -EINVAL);
		ck_assert_uint_eq(ncut, 0);
	}
	/* A frame shorter than its IP length says. */
	ck_assert_int_eq(gso_segment(&outs[0].h, outs[0].f, outs[0].len - 1, out, sizeof out, cut, frames), -EINVAL);
}
END_TEST

START_TEST(hostile_lengths)
{
	static struct gso g;
	uint8_t f[FRAME_MAX + 10];
	size_t len = seg(f, 80, 1, 1, FRAME_TCP_ACK, 0, 1000, 1), cut;

	/* Truncations and lying length fields never merge nor overrun. */
	gso_init(&g, GSO_FRAME_MAX, collect, NULL);
	for (cut = 1; cut <= len; cut++) {
		reset_outs();
		gso_add(&g, f, cut);
		gso_add(&g, f, cut);
		gso_flush(&g);
		ck_assert_uint_eq(nouts, 2);
	}
	len = seg(f, 80, 1, 1, FRAME_TCP_ACK, 0, 20, 1);
	f[46] = 15 << 4; /* a TCP header longer than the segment */
	reset_outs();
	gso_add(&g, f, len);
	gso_flush(&g);
	ck_assert_uint_eq(outs[0].h.gso_type, GSO_TYPE_NONE);
	reset_outs();
	gso_add(&g, f, sizeof f); /* too long to merge: out alone */
	ck_assert_uint_eq(nouts, 1);
}
END_TEST

/* Segments whose checksum the sender left to the peer (lwIP with
 * checksum generation off): merged as before, and alone with
 * NEEDS_CSUM; completed, they are the fully checksummed originals. */
START_TEST(partial_checksums)
{
	static uint8_t one[FRAME_MAX], out[FRAME_MAX];
	uint32_t seq = 1;
	size_t i, len;
	struct gso_hdr h;

	for (i = 0; i < 300; i++) {
		flen[i] = seg(frames[i], 80, seq, 7, FRAME_TCP_ACK, (uint16_t)i, 1460, 3);
		seq += 1460;
	}
	partial_in = 1;
	ck_assert_uint_eq(roundtrip(frames, flen, 300, GSO_FRAME_MAX), 7);
	/* A SYN, a FIN, a 64 KiB segment: alone, NEEDS_CSUM. */
	flen[0] = seg(frames[0], 80, 5, 0, FRAME_TCP_SYN, 1, 0, 0);
	flen[1] = seg(frames[1], 80, 6, 9, FRAME_TCP_ACK | FRAME_TCP_FIN, 2, 10, 1);
	flen[2] = seg(frames[2], 81, 6, 9, FRAME_TCP_ACK, 3, FRAME_MTU - 40, 2);
	ck_assert_uint_eq(roundtrip(frames, flen, 3, GSO_FRAME_MAX), 3);
	for (i = 0; i < 3; i++)
		ck_assert_uint_eq(outs[i].h.flags, GSO_F_NEEDS_CSUM);
	partial_in = 0;
	/* gso_segment completes a lone one as the peer would. */
	len = flen[1];
	memcpy(one, frames[1], len);
	ck_assert_int_eq(gso_tcp_partial(one, len), 0);
	memset(&h, 0, sizeof h);
	h.flags = GSO_F_NEEDS_CSUM;
	h.csum_start = 34;
	h.csum_offset = 16;
	ncut = 0;
	ck_assert_int_eq(gso_segment(&h, one, len, out, sizeof out, cut, &frames[1]), 0);
	ck_assert_uint_eq(ncut, 1);
	h.csum_offset = (uint16_t)(len - 34 - 1);
	ck_assert_int_eq(gso_segment(&h, one, len, out, sizeof out, cut, &frames[1]), -EINVAL);
	h.csum_offset = 16;
	h.csum_start = 13;
	ck_assert_int_eq(gso_segment(&h, one, len, out, sizeof out, cut, &frames[1]), -EINVAL);
	ck_assert_int_eq(gso_segment(&h, one, len, out, len - 1, cut, &frames[1]), -EINVAL);
	/* Not a TCP frame: no partial sum. */
	one[23] = FRAME_IP_UDP;
	ck_assert_int_eq(gso_tcp_partial(one, len), -EINVAL);
	reset_outs();
}
END_TEST

Suite *gso_suite(void)
{
	return unit_suite_fixture("gso", "core", setup, teardown, 0, one_burst,
				  alone_unchanged, bounded, interleaved,
				  stoppers, push_and_short_end_a_frame,
				  other_frames, segment_refuses,
				  hostile_lengths, partial_checksums);
}
