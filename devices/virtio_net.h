/* virtio-net device (virtio 1.2 §5.1): one receive and one transmit
 * queue, no control queue.  Features offered: MAC, MTU (65520), STATUS
 * (link always up), CSUM and GUEST_CSUM (checksum offload both ways) and
 * GUEST_TSO4, plus the ring features; VERSION_1 is added by the
 * transport, so every buffer starts with the 12-byte virtio_net_hdr
 * (num_buffers included).
 *
 * TX: each chain is one frame; the header is checked (no GSO) and
 * stripped, and the Ethernet frame goes to the backend's tx callback.
 * RX: the backend hands frames to virtio_net_rx_enqueue from any thread; they
 * wait in a bounded queue (full: dropped and counted) until the guest has
 * posted receive buffers, and virtio_net_rx_flush copies them in behind a
 * header with num_buffers = 1.  virtio_net_rx_enqueue_gso takes the merged
 * TCP frames of lib/gso.h (up to 64 KiB): a driver that negotiated
 * GUEST_TSO4 (and GUEST_CSUM) gets them whole with their GSO header, as
 * the spec lets it expect buffers of 65562 bytes without MRG_RXBUF
 * (Linux's "big packets"); for any other the device cuts them back into
 * segments first.
 *
 * Locking: everything except virtio_net_rx_enqueue must be serialised by the
 * caller (the bus lock in the VMM).  The receive queue has its own leaf
 * lock, taken with no other lock acquired inside it, so that a backend
 * running on a thread of its own (lwIP's) can enqueue frames without the
 * bus lock; virtio_net_wake_fd then tells the device thread to flush.
 *
 * Guest errors: a malformed ring, a TX chain shorter than the header, or
 * an RX chain that is not device-writable or cannot hold the header and
 * the frame stops the device (DEVICE_NEEDS_RESET).  A TX frame that is too
 * short, too long or asks for GSO is dropped and counted. */
#ifndef KBOX_VIRTIO_NET_H
#define KBOX_VIRTIO_NET_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/virtqueue.h"
#include "lib/gso.h"

#define VIRTIO_NET_DEVICE_ID 1
#define VIRTIO_NET_F_CSUM 0       /* the guest may leave TX checksums to us */
#define VIRTIO_NET_F_GUEST_CSUM 1 /* RX frames may say their checksums are valid */
#define VIRTIO_NET_F_MTU 3
#define VIRTIO_NET_F_GUEST_TSO4 7 /* RX frames may be TCPv4 GSO frames */
#define VIRTIO_NET_F_MAC 5
#define VIRTIO_NET_F_STATUS 16
#define VIRTIO_NET_S_LINK_UP 1
#define VIRTIO_NET_HDR_F_NEEDS_CSUM 1
#define VIRTIO_NET_HDR_F_DATA_VALID 2

#define VIRTIO_NET_HDR_SIZE 12
/* The MTU offered (VIRTIO_NET_F_MTU): a TCP segment fills a 64 KiB
 * frame.  A driver that does not take the feature keeps Ethernet's 1500,
 * and frames larger than that neither leave nor reach it. */
#define VIRTIO_NET_MTU 65520
#define VIRTIO_NET_BASE_MTU 1500
#define VIRTIO_NET_ETH_HLEN 14
#define VIRTIO_NET_MAX_FRAME (VIRTIO_NET_ETH_HLEN + VIRTIO_NET_MTU) /* no FCS, no VLAN tag */
#define VIRTIO_NET_BASE_FRAME (VIRTIO_NET_ETH_HLEN + VIRTIO_NET_BASE_MTU)
#define VIRTIO_NET_QUEUE_SIZE 256
#define VIRTIO_NET_RXQ_FRAMES 256 /* frames waiting for guest receive buffers ... */
#define VIRTIO_NET_RXQ_BYTES (8u << 20) /* ... and their bytes at most (128 of 64 KiB) */
#define VIRTIO_NET_MAX_GSO_FRAME GSO_FRAME_MAX
#define VIRTIO_NET_CONFIG_SIZE 12 /* mac, status, max_virtqueue_pairs, mtu */

/* The guest's MAC address, fixed for every VM (one NIC, private link). */
#define VIRTIO_NET_GUEST_MAC {0x52, 0x54, 0x00, 0x12, 0x34, 0x56}

/* Where transmitted frames go.  tx is called with the device serialised
 * (bus lock held), with one Ethernet frame of VIRTIO_NET_ETH_HLEN to
 * VIRTIO_NET_MAX_FRAME bytes that is only valid during the call; it may call
 * virtio_net_rx_enqueue. */
struct net_backend {
	void (*tx)(void *ctx, const uint8_t *frame, size_t len);
	void *ctx;
};

struct virtio_net_stats {
	uint64_t tx_frames;   /* given to the backend */
	uint64_t tx_dropped;  /* bad length or GSO */
	uint64_t rx_frames;   /* delivered to the guest */
	uint64_t rx_gso;      /* of which merged TCP frames (GUEST_TSO4) */
	uint64_t rx_dropped;  /* queue full or bad length at enqueue */
	uint64_t bad_chains;  /* guest errors that stopped the device */
};

/* A frame waiting in the receive queue: its bytes and its header. */
struct virtio_net_rxf {
	uint32_t off, len; /* in rxq_data */
	struct gso_hdr h;
};

struct virtio_net {
	struct virtqueue_dev dev;    /* give &dev to a transport */
	struct virtqueue vqs[2];
	uint8_t mac[6];
	struct net_backend be;
	int wake_fd;          /* eventfd written when a frame is enqueued */
	/* The receive queue, under rxq_lock: a ring of VIRTIO_NET_RXQ_FRAMES
	 * frame slots whose bytes lie whole and in order in a ring of
	 * VIRTIO_NET_RXQ_BYTES (a frame that does not fit before its end starts
	 * again at 0). */
	pthread_mutex_t rxq_lock;
	uint8_t *rxq_data;
	struct virtio_net_rxf *rxq;
	unsigned rxq_head, rxq_n;
	uint32_t rxq_wr;      /* where the next frame's bytes go */
	bool rx_tso;          /* the driver took GUEST_TSO4 and GUEST_CSUM */
	bool rx_mtu;          /* the driver took MTU: frames up to VIRTIO_NET_MAX_FRAME */
	bool rx_csum;         /* the driver took GUEST_CSUM: NEEDS_CSUM frames reach it whole */
	uint8_t rx_seg[VIRTIO_NET_MAX_FRAME]; /* one segment cut from a merged frame */
	uint64_t rx_dropped;
	uint8_t txbuf[VIRTIO_NET_MAX_FRAME];
	struct virtio_net_stats stats;
};

/* Initialise v with the guest MAC mac and backend be (copied; tx may be
 * NULL to discard).  Then attach &v->dev to a transport.  Returns 0,
 * -EINVAL or a negative errno (memory, eventfd). */
int virtio_net_init(struct virtio_net *v, const uint8_t mac[6], const struct net_backend *be);

/* Free what virtio_net_init took; v is unusable afterwards. */
void virtio_net_destroy(struct virtio_net *v);

/* Queue one frame (VIRTIO_NET_ETH_HLEN to VIRTIO_NET_MAX_FRAME bytes, or to
 * VIRTIO_NET_BASE_FRAME for a driver that did not take MTU; copied) for the
 * guest.  Safe from any thread and with any lock held except rxq_lock.
 * Returns 0, -EMSGSIZE for a bad length or -ENOBUFS when the queue is
 * full (both counted as rx_dropped). */
int virtio_net_rx_enqueue(struct virtio_net *v, const uint8_t *frame, size_t len);

/* virtio_net_rx_enqueue for a frame described by *h (lib/gso.h): a plain
 * one (zero header); one whose checksum is partial (NEEDS_CSUM, no GSO),
 * queued whole for a driver with GUEST_CSUM and completed first for
 * another; or a merged TCPv4 frame of up to VIRTIO_NET_MAX_GSO_FRAME bytes,
 * queued whole for a driver with GUEST_TSO4 and as its segments
 * otherwise.  Also -EINVAL (counted) for a header gso_segment refuses. */
int virtio_net_rx_enqueue_gso(struct virtio_net *v, const struct gso_hdr *h, const uint8_t *frame, size_t len);

/* An eventfd that becomes readable when frames were enqueued; poll it on
 * the device thread and then call virtio_net_rx_flush. */
int virtio_net_wake_fd(const struct virtio_net *v);

/* Move queued frames into the guest's receive buffers while both exist
 * and interrupt if the driver wants it; clears the wake fd.  Serialised. */
void virtio_net_rx_flush(struct virtio_net *v);

/* Copy the counters into *st.  Serialised. */
void virtio_net_get_stats(struct virtio_net *v, struct virtio_net_stats *st);

#endif
