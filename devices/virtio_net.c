#include "devices/virtio_net.h"

#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum { Q_RX, Q_TX };

#define GSO_NONE 0
#define HDR_FLAGS 0
#define HDR_GSO_TYPE 1
#define HDR_HDR_LEN 2
#define HDR_GSO_SIZE 4
#define HDR_CSUM_START 6
#define HDR_CSUM_OFFSET 8
#define HDR_NUM_BUFFERS 10

static struct virtio_net *to_net(struct virtqueue_dev *d)
{
	return (struct virtio_net *)((char *)d - offsetof(struct virtio_net, dev));
}

/* Gather the readable side of c from byte off into buf (at most max
 * bytes); returns the count. */
static uint32_t gather(const struct virtqueue_chain *c, uint32_t off, uint8_t *buf, uint32_t max)
{
	uint32_t got = 0;

	for (unsigned i = 0; i < c->nr_read && got < max; i++) {
		uint32_t l = c->seg[i].len;
		if (off >= l) {
			off -= l;
			continue;
		}
		uint32_t n = l - off < max - got ? l - off : max - got;
		memcpy(buf + got, c->seg[i].ptr + off, n);
		got += n;
		off = 0;
	}
	return got;
}

/* Scatter len bytes of buf into the writable side of c from byte off. */
static void scatter(const struct virtqueue_chain *c, uint32_t off, const uint8_t *buf, uint32_t len)
{
	uint32_t put = 0;

	for (unsigned i = c->nr_read; i < c->nr && put < len; i++) {
		uint32_t l = c->seg[i].len;
		if (off >= l) {
			off -= l;
			continue;
		}
		uint32_t n = l - off < len - put ? l - off : len - put;
		memcpy(c->seg[i].ptr + off, buf + put, n);
		put += n;
		off = 0;
	}
}

static bool negotiated(const struct virtio_net *v, unsigned bit)
{
	return (v->dev.driver_features >> bit) & 1;
}

/* VIRTIO_NET_HDR_F_NEEDS_CSUM: the guest left the checksum of the bytes
 * from csum_start to the end (with its pseudo-header sum already in the
 * field at csum_start + csum_offset) to us.  The offsets come from the
 * guest: false when they do not fit the frame. */
static bool fill_csum(uint8_t *f, uint32_t len, const uint8_t *hdr)
{
	uint16_t start = (uint16_t)(hdr[HDR_CSUM_START] | hdr[HDR_CSUM_START + 1] << 8);
	uint16_t off = (uint16_t)(hdr[HDR_CSUM_OFFSET] | hdr[HDR_CSUM_OFFSET + 1] << 8);
	if (start < VIRTIO_NET_ETH_HLEN || start >= len || off > len - start || len - start - off < 2)
		return false;
	uint16_t c = frame_csum(f + start, len - start, 0);
	f[start + off] = (uint8_t)(c >> 8);
	f[start + off + 1] = (uint8_t)c;
	return true;
}

static int do_tx(struct virtio_net *v)
{
	struct virtqueue *vq = &v->vqs[Q_TX];
	struct virtqueue_chain c;
	bool pushed = false;
	int err = 0;

	while (v->dev.live) {
		int r = virtqueue_pop(vq, &c);
		if (r <= 0) {
			err = r;
			break;
		}
		uint8_t hdr[VIRTIO_NET_HDR_SIZE];
		if (gather(&c, 0, hdr, VIRTIO_NET_HDR_SIZE) < VIRTIO_NET_HDR_SIZE) {
			err = -EINVAL;
			break;
		}
		uint32_t flen = c.read_len - VIRTIO_NET_HDR_SIZE;
		uint32_t fmax = negotiated(v, VIRTIO_NET_F_MTU) ? VIRTIO_NET_MAX_FRAME : VIRTIO_NET_BASE_FRAME;
		if (hdr[HDR_GSO_TYPE] != GSO_NONE || flen < VIRTIO_NET_ETH_HLEN || flen > fmax) {
			v->stats.tx_dropped++;
		} else {
			gather(&c, VIRTIO_NET_HDR_SIZE, v->txbuf, flen);
			if ((hdr[HDR_FLAGS] & VIRTIO_NET_HDR_F_NEEDS_CSUM) &&
			    (!negotiated(v, VIRTIO_NET_F_CSUM) || !fill_csum(v->txbuf, flen, hdr))) {
				v->stats.tx_dropped++;
			} else {
				v->stats.tx_frames++;
				if (v->be.tx)
					v->be.tx(v->be.ctx, v->txbuf, flen);
			}
		}
		virtqueue_push(vq, c.head, 0);
		pushed = true;
	}
	if (pushed)
		virtqueue_dev_used(&v->dev, Q_TX);
	if (err < 0) {
		v->stats.bad_chains++;
		virtqueue_dev_fail(&v->dev);
	}
	return err;
}

void virtio_net_rx_flush(struct virtio_net *v)
{
	struct virtqueue *vq = &v->vqs[Q_RX];
	struct virtqueue_chain c;
	bool pushed = false;
	uint64_t cnt;

	/* Clear the wake-up first, so a frame enqueued during the flush
	 * wakes the device thread again; EAGAIN just means none was due. */
	ssize_t rd = read(v->wake_fd, &cnt, sizeof cnt);
	(void)rd;
	while (v->dev.live && vq->ready) {
		pthread_mutex_lock(&v->rxq_lock);
		unsigned n = v->rxq_n;
		pthread_mutex_unlock(&v->rxq_lock);
		if (n == 0)
			break;
		int r = virtqueue_pop(vq, &c);
		if (r == 0)
			break;
		/* Only this function takes frames off the queue, so the
		 * head counted above is still there. */
		pthread_mutex_lock(&v->rxq_lock);
		const struct virtio_net_rxf *q = &v->rxq[v->rxq_head];
		uint32_t flen = q->len;
		if (r < 0 || c.nr_read > 0 || c.write_len < VIRTIO_NET_HDR_SIZE + flen) {
			pthread_mutex_unlock(&v->rxq_lock);
			v->stats.bad_chains++;
			virtqueue_dev_fail(&v->dev);
			break;
		}
		uint8_t hdr[VIRTIO_NET_HDR_SIZE] = { 0 };
		if (q->h.flags & GSO_F_NEEDS_CSUM) {
			/* Only queued while rx_tso (merged frames) or rx_csum
			 * holds (see virtio_net_rx_enqueue_gso). */
			uint16_t f[4] = {htole16(q->h.hdr_len), htole16(q->h.gso_size), htole16(q->h.csum_start),
					 htole16(q->h.csum_offset)};
			hdr[HDR_FLAGS] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
			hdr[HDR_GSO_TYPE] = q->h.gso_type;
			memcpy(hdr + HDR_HDR_LEN, f, sizeof f);
		} else if (negotiated(v, VIRTIO_NET_F_GUEST_CSUM)) {
			/* The stack's frames carry correct checksums (it builds
			 * them, or lwIP does): the guest need not verify them
			 * again. */
			hdr[HDR_FLAGS] = VIRTIO_NET_HDR_F_DATA_VALID;
		}
		uint16_t one = htole16(1);
		memcpy(hdr + HDR_NUM_BUFFERS, &one, 2);
		scatter(&c, 0, hdr, VIRTIO_NET_HDR_SIZE);
		scatter(&c, VIRTIO_NET_HDR_SIZE, v->rxq_data + q->off, flen);
		v->rxq_head = (v->rxq_head + 1) % VIRTIO_NET_RXQ_FRAMES;
		v->rxq_n--;
		pthread_mutex_unlock(&v->rxq_lock);
		virtqueue_push(vq, c.head, VIRTIO_NET_HDR_SIZE + flen);
		v->stats.rx_frames++;
		v->stats.rx_gso += hdr[HDR_GSO_TYPE] != GSO_TYPE_NONE;
		pushed = true;
	}
	if (pushed)
		virtqueue_dev_used(&v->dev, Q_RX);
}

/* Put one frame with header *h in the queue, rxq_lock held.  0, or
 * -ENOBUFS when either ring is full. */
static int enqueue_locked(struct virtio_net *v, const struct gso_hdr *h, const uint8_t *frame, uint32_t len)
{
	uint32_t at = v->rxq_wr;

	if (v->rxq_n >= VIRTIO_NET_RXQ_FRAMES)
		return -ENOBUFS;
	if (v->rxq_n == 0) {
		at = 0;
	} else {
		uint32_t head = v->rxq[v->rxq_head].off;

		/* Bytes in use run from head to rxq_wr, wrapped or not; a
		 * frame never ends exactly on head, so that at == head
		 * always means empty. */
		if (at >= head) {
			if (len > VIRTIO_NET_RXQ_BYTES - at) {
				if (len >= head)
					return -ENOBUFS;
				at = 0;
			}
		} else if (len >= head - at) {
			return -ENOBUFS;
		}
	}
	unsigned t = (v->rxq_head + v->rxq_n) % VIRTIO_NET_RXQ_FRAMES;
	memcpy(v->rxq_data + at, frame, len);
	v->rxq[t].off = at;
	v->rxq[t].len = len;
	v->rxq[t].h = *h;
	v->rxq_wr = at + len;
	v->rxq_n++;
	return 0;
}

/* gso_segment's output: one segment into the queue (rxq_lock held). */
static void enqueue_seg(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len)
{
	struct virtio_net *v = ctx;

	if (len > (v->rx_mtu ? VIRTIO_NET_MAX_FRAME : VIRTIO_NET_BASE_FRAME) || enqueue_locked(v, h, frame, (uint32_t)len) < 0)
		v->rx_dropped++;
}

int virtio_net_rx_enqueue_gso(struct virtio_net *v, const struct gso_hdr *h, const uint8_t *frame, size_t len)
{
	int rc = 0;

	pthread_mutex_lock(&v->rxq_lock);
	if (h->gso_type == GSO_TYPE_NONE && h->flags == 0) {
		if (len < VIRTIO_NET_ETH_HLEN || len > (v->rx_mtu ? VIRTIO_NET_MAX_FRAME : VIRTIO_NET_BASE_FRAME))
			rc = -EMSGSIZE;
		else
			rc = enqueue_locked(v, h, frame, (uint32_t)len);
	} else if (h->gso_type == GSO_TYPE_NONE) {
		/* One frame whose checksum is left to the guest: whole for a
		 * driver that took GUEST_CSUM, completed here for another. */
		if (len < VIRTIO_NET_ETH_HLEN || len > (v->rx_mtu ? VIRTIO_NET_MAX_FRAME : VIRTIO_NET_BASE_FRAME))
			rc = -EMSGSIZE;
		else if (h->flags != GSO_F_NEEDS_CSUM || h->csum_start < VIRTIO_NET_ETH_HLEN || h->csum_start >= len ||
			 h->csum_offset > len - h->csum_start - 2u)
			rc = -EINVAL;
		else if (v->rx_csum)
			rc = enqueue_locked(v, h, frame, (uint32_t)len);
		else
			rc = gso_segment(h, frame, len, v->rx_seg, sizeof v->rx_seg, enqueue_seg, v);
	} else if (len < VIRTIO_NET_ETH_HLEN || len > VIRTIO_NET_MAX_GSO_FRAME) {
		rc = -EMSGSIZE;
	} else if (!v->rx_tso) {
		/* Each segment is counted on its own if dropped. */
		rc = gso_segment(h, frame, len, v->rx_seg, sizeof v->rx_seg, enqueue_seg, v);
	} else if (h->gso_type != GSO_TYPE_TCPV4 || h->flags != GSO_F_NEEDS_CSUM || h->gso_size == 0 ||
		   h->hdr_len > len || h->csum_start < VIRTIO_NET_ETH_HLEN || h->csum_start >= len ||
		   h->csum_offset > len - h->csum_start - 2u) {
		rc = -EINVAL; /* what the driver would refuse anyway */
	} else {
		rc = enqueue_locked(v, h, frame, (uint32_t)len);
	}
	if (rc < 0)
		v->rx_dropped++;
	pthread_mutex_unlock(&v->rxq_lock);
	if (rc == 0) {
		uint64_t one = 1;
		ssize_t w = write(v->wake_fd, &one, sizeof one);
		(void)w; /* a saturated eventfd is still readable */
	}
	return rc;
}

int virtio_net_rx_enqueue(struct virtio_net *v, const uint8_t *frame, size_t len)
{
	static const struct gso_hdr none;

	return virtio_net_rx_enqueue_gso(v, &none, frame, len);
}

static int net_notify(struct virtqueue_dev *d, unsigned q)
{
	struct virtio_net *v = to_net(d);
	int err = 0;

	if (q == Q_TX)
		err = do_tx(v);
	/* Posted receive buffers, or replies the backend produced while
	 * transmitting, can now meet. */
	if (err == 0)
		virtio_net_rx_flush(v);
	return err;
}

/* What the frames for the guest may be, from the features it took. */
static void net_take_features(struct virtio_net *v)
{
	pthread_mutex_lock(&v->rxq_lock);
	v->rx_tso = negotiated(v, VIRTIO_NET_F_GUEST_TSO4) && negotiated(v, VIRTIO_NET_F_GUEST_CSUM);
	v->rx_mtu = negotiated(v, VIRTIO_NET_F_MTU);
	v->rx_csum = negotiated(v, VIRTIO_NET_F_GUEST_CSUM);
	pthread_mutex_unlock(&v->rxq_lock);
}

static void net_activate(struct virtqueue_dev *d)
{
	struct virtio_net *v = to_net(d);
	net_take_features(v);
	virtio_net_rx_flush(v);
}

/* Frames waiting for the guest belong to this run's flows. */
static int net_quiet(struct virtqueue_dev *d, char *err, size_t errlen)
{
	struct virtio_net *v = to_net(d);
	pthread_mutex_lock(&v->rxq_lock);
	unsigned n = v->rxq_n;
	pthread_mutex_unlock(&v->rxq_lock);
	if (n) {
		snprintf(err, errlen, "virtio-net: %u frame(s) wait for the guest", n);
		return -EBUSY;
	}
	return 0;
}

/* A fork's copy starts with no flow (its stack is new): the frames
 * waiting for the guest are the original's, which keeps them.  Nothing
 * beyond the transport is copied. */
static int net_fork_save(struct virtqueue_dev *d, struct statebuf_writer *w, char *err,
			 size_t errlen)
{
	return 0;
}

static void net_restored(struct virtqueue_dev *d)
{
	if (d->live)
		net_take_features(to_net(d));
}

/* Frames queued for a driver that reset are stale for the next one, and
 * merged ones may not suit it. */
static void net_reset(struct virtqueue_dev *d)
{
	struct virtio_net *v = to_net(d);

	pthread_mutex_lock(&v->rxq_lock);
	v->rxq_head = 0;
	v->rxq_n = 0;
	v->rxq_wr = 0;
	v->rx_tso = false;
	v->rx_mtu = false;
	v->rx_csum = false;
	pthread_mutex_unlock(&v->rxq_lock);
}

static void net_config_read(struct virtqueue_dev *d, uint32_t off, void *data, uint32_t len)
{
	struct virtio_net *v = to_net(d);
	uint8_t cfg[VIRTIO_NET_CONFIG_SIZE];
	uint16_t status = htole16(VIRTIO_NET_S_LINK_UP), pairs = htole16(1),
		 mtu = htole16(VIRTIO_NET_MTU);

	memcpy(cfg, v->mac, 6);
	memcpy(cfg + 6, &status, 2);
	memcpy(cfg + 8, &pairs, 2);
	memcpy(cfg + 10, &mtu, 2);
	memcpy(data, cfg + off, len); /* the transport bounded off + len */
}

static const struct virtqueue_dev_ops net_ops = {
	.config_read = net_config_read,
	.notify = net_notify,
	.activate = net_activate,
	.reset = net_reset,
	.quiet = net_quiet,
	.restored = net_restored,
	.fork_save = net_fork_save,
};

int virtio_net_init(struct virtio_net *v, const uint8_t mac[6], const struct net_backend *be)
{
	if (!mac || (mac[0] & 1))
		return -EINVAL; /* a multicast address cannot name a NIC */
	memset(v, 0, sizeof *v);
	v->wake_fd = -1;
	v->rxq = calloc(VIRTIO_NET_RXQ_FRAMES, sizeof *v->rxq);
	v->rxq_data = malloc(VIRTIO_NET_RXQ_BYTES);
	if (!v->rxq || !v->rxq_data) {
		free(v->rxq);
		free(v->rxq_data);
		return -ENOMEM;
	}
	v->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (v->wake_fd < 0) {
		int e = -errno;
		free(v->rxq);
		free(v->rxq_data);
		return e;
	}
	pthread_mutex_init(&v->rxq_lock, NULL);
	memcpy(v->mac, mac, 6);
	if (be)
		v->be = *be;
	virtqueue_init(&v->vqs[Q_RX], VIRTIO_NET_QUEUE_SIZE);
	virtqueue_init(&v->vqs[Q_TX], VIRTIO_NET_QUEUE_SIZE);
	v->dev.ops = &net_ops;
	v->dev.device_id = VIRTIO_NET_DEVICE_ID;
	v->dev.features = (1ull << VIRTIO_NET_F_CSUM) | (1ull << VIRTIO_NET_F_GUEST_CSUM) |
			  (1ull << VIRTIO_NET_F_MAC) | (1ull << VIRTIO_NET_F_MTU) |
			  (1ull << VIRTIO_NET_F_STATUS) | (1ull << VIRTIO_NET_F_GUEST_TSO4) |
			  (1ull << VIRTIO_F_EVENT_IDX) |
			  (1ull << VIRTIO_F_INDIRECT_DESC);
	v->dev.config_size = VIRTIO_NET_CONFIG_SIZE;
	v->dev.nr_queues = 2;
	v->dev.vqs = v->vqs;
	return 0;
}

void virtio_net_destroy(struct virtio_net *v)
{
	if (v->wake_fd >= 0)
		close(v->wake_fd);
	v->wake_fd = -1;
	pthread_mutex_destroy(&v->rxq_lock);
	free(v->rxq);
	free(v->rxq_data);
	v->rxq = NULL;
	v->rxq_data = NULL;
}

int virtio_net_wake_fd(const struct virtio_net *v)
{
	return v->wake_fd;
}

void virtio_net_get_stats(struct virtio_net *v, struct virtio_net_stats *st)
{
	*st = v->stats;
	pthread_mutex_lock(&v->rxq_lock);
	st->rx_dropped = v->rx_dropped;
	pthread_mutex_unlock(&v->rxq_lock);
}
