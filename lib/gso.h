/* Segmentation offload towards the guest: consecutive TCP segments that
 * kbox's stack sends for one connection are merged into one large frame
 * that the link peer (a TAP device opened with IFF_VNET_HDR, or a
 * virtio-net driver that negotiated GUEST_TSO4) cuts back into segments
 * itself, as described by a virtio_net_hdr.  One frame, one copy and one
 * system call or interrupt per up to 64 KiB instead of per 1460 bytes.
 *
 * What merges: IPv4 (no options, not fragmented) TCP segments carrying
 * data with only ACK, or ACK|PSH on the last one, the same Ethernet and
 * IP header fields except length, identifier and checksum, the same
 * ports, acknowledgement, window and options, each starting where the
 * previous one ended, every one but the last exactly as long as the
 * first.  Anything else (a SYN, FIN or RST, a pure ACK, another
 * connection, ARP, UDP) first sends what is pending and then goes out
 * alone, so the order of frames on the link never changes.
 *
 * A merged frame carries the header of its first segment with the total
 * IP length, a fresh IP checksum, the last segment's flags and, in the
 * TCP checksum field, the pseudo-header sum (NEEDS_CSUM: the peer
 * completes it); its gso_size is the first segment's payload length. A
 * frame that merged with nothing goes out unchanged with a zero header.
 * The peer's segmentation (Linux's tcp_gso_segment and virtio's spec)
 * gives back the original segments: sequence numbers advanced, PSH only
 * on the last, the IP identifier counting up from the first's.
 *
 * Pure: no I/O, no locking (the stack calls it under its lock). */
#ifndef KBOX_LIB_GSO_H
#define KBOX_LIB_GSO_H

#include <stddef.h>
#include <stdint.h>

#include "lib/frame.h"

#define GSO_F_NEEDS_CSUM 1u /* virtio_net_hdr flags */
#define GSO_TYPE_NONE 0u    /* virtio_net_hdr gso_type */
#define GSO_TYPE_TCPV4 1u
#define GSO_IP_MAX 65535u                       /* IPv4 total length */
#define GSO_FRAME_MAX (FRAME_ETH_HLEN + GSO_IP_MAX) /* largest merged frame */
#define GSO_MIN_BOUND (FRAME_ETH_HLEN + 1500u)      /* the smallest bound: an Ethernet frame */

/* virtio_net_hdr (virtio 1.2 §5.1.6) without num_buffers, in host byte
 * order: the layout a TAP device with IFF_VNET_HDR reads and writes on a
 * little-endian host; virtio-net writes it out field by field. */
struct gso_hdr {
	uint8_t flags;
	uint8_t gso_type;
	uint16_t hdr_len;     /* Ethernet + IP + TCP headers */
	uint16_t gso_size;    /* payload bytes per segment */
	uint16_t csum_start;  /* where the TCP header starts in the frame */
	uint16_t csum_offset; /* of the checksum field within it */
};

/* Receives each frame leaving the merger (len <= the max given to
 * gso_init), valid only during the call. */
typedef void (*gso_emit_fn)(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len);

struct gso {
	gso_emit_fn emit;
	void *ctx;
	size_t max;       /* largest frame emitted */
	size_t len;       /* bytes pending in buf; 0: nothing */
	size_t hlen;      /* their headers */
	size_t mss;       /* payload of the first segment */
	unsigned segs;    /* segments merged */
	uint32_t next_seq;
	int partial;      /* the pending frame's TCP checksum is the pseudo-header's sum only */
	uint8_t buf[GSO_FRAME_MAX];
};

/* Start empty; merged frames are at most max bytes (clamped to
 * GSO_MIN_BOUND..GSO_FRAME_MAX); a frame offered larger than max leaves
 * alone. */
void gso_init(struct gso *g, size_t max, gso_emit_fn emit, void *ctx);

/* Offer frame f[0, len) (copied; len at most FRAME_MAX, longer frames
 * are emitted alone unchanged): merged with what is pending, or pending
 * itself, or emitted after what was pending. */
void gso_add(struct gso *g, const uint8_t *f, size_t len);

/* gso_add for a frame whose TCP checksum is left to the peer: f is an
 * IPv4 TCP segment (no IP options) whose checksum field holds only the
 * pseudo-header's sum (gso_tcp_partial), as a sender that leaves
 * checksums to the hardware writes it.  It merges as gso_add's frames do
 * and leaves with NEEDS_CSUM (csum_start 34, csum_offset 16), merged or
 * alone; frames of the two kinds never merge with each other. */
void gso_add_partial(struct gso *g, const uint8_t *f, size_t len);

/* Put the pseudo-header's sum into the TCP checksum field of f[0, len)
 * (an IPv4 TCP frame without IP options): 0, or -EINVAL when f is not
 * one. */
int gso_tcp_partial(uint8_t *f, size_t len);

/* Emit what is pending, if anything. */
void gso_flush(struct gso *g);

/* What the peer does with a frame from gso_flush: cut frame f[0, len)
 * described by *h (as emitted: TCPV4 with NEEDS_CSUM; a lone NEEDS_CSUM
 * frame, whose checksum it completes in out; or a plain frame with a
 * zero header, passed on unchanged) into the segments it was made of,
 * each built in out[0, cap) with its checksums and given to emit with a
 * zero header.  For a link whose peer cannot take merged frames.
 * 0, or -EINVAL when *h and the frame do not describe such a frame or a
 * segment would not fit cap (nothing emitted then). */
int gso_segment(const struct gso_hdr *h, const uint8_t *f, size_t len, uint8_t *out, size_t cap, gso_emit_fn emit,
		void *ctx);

#endif
