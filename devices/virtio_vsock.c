#include "devices/virtio_vsock.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/statebuf.h"

enum { Q_RX, Q_TX, Q_EVENT };

/* Control packets a connection owes the guest. */
#define P_REQUEST 1u
#define P_RESPONSE 2u
#define P_CREDIT_UPDATE 4u
#define P_CREDIT_REQUEST 8u
#define P_SHUTDOWN 16u

#define BUF_MASK (VIRTIO_VSOCK_BUF_ALLOC - 1)
_Static_assert((VIRTIO_VSOCK_BUF_ALLOC & BUF_MASK) == 0, "ring arithmetic needs a power of two");

static struct virtio_vsock *to_vsock(struct virtqueue_dev *d)
{
	return (struct virtio_vsock *)((char *)d - offsetof(struct virtio_vsock, dev));
}

static uint16_t get16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return le16toh(v);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return le64toh(v);
}

static void put16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, 2);
}

static void put32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

void virtio_vsock_hdr_decode(struct virtio_vsock_hdr *h, const uint8_t raw[VIRTIO_VSOCK_HDR_SIZE])
{
	h->src_cid = get64(raw + 0);
	h->dst_cid = get64(raw + 8);
	h->src_port = get32(raw + 16);
	h->dst_port = get32(raw + 20);
	h->len = get32(raw + 24);
	h->type = get16(raw + 28);
	h->op = get16(raw + 30);
	h->flags = get32(raw + 32);
	h->buf_alloc = get32(raw + 36);
	h->fwd_cnt = get32(raw + 40);
}

void virtio_vsock_hdr_encode(uint8_t raw[VIRTIO_VSOCK_HDR_SIZE], const struct virtio_vsock_hdr *h)
{
	put64(raw + 0, h->src_cid);
	put64(raw + 8, h->dst_cid);
	put32(raw + 16, h->src_port);
	put32(raw + 20, h->dst_port);
	put32(raw + 24, h->len);
	put16(raw + 28, h->type);
	put16(raw + 30, h->op);
	put32(raw + 32, h->flags);
	put32(raw + 36, h->buf_alloc);
	put32(raw + 40, h->fwd_cnt);
}

/* Copy len bytes at byte offset off of the chain's readable (or writable)
 * side.  The caller checked that the side holds off + len bytes. */
static void chain_copy(const struct virtqueue_chain *c, bool write, uint32_t off, void *buf,
		       uint32_t len)
{
	uint8_t *b = buf;
	unsigned i = write ? c->nr_read : 0, end = write ? c->nr : c->nr_read;

	for (; i < end && len; i++) {
		const struct virtqueue_seg *s = &c->seg[i];
		if (off >= s->len) {
			off -= s->len;
			continue;
		}
		uint32_t n = s->len - off < len ? s->len - off : len;
		if (write)
			memcpy(s->ptr + off, b, n);
		else
			memcpy(b, s->ptr + off, n);
		b += n;
		len -= n;
		off = 0;
	}
}

/* ---- connection table ---- */

static struct virtio_vsock_conn *find_conn(struct virtio_vsock *v, uint32_t local, uint32_t peer)
{
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++) {
		struct virtio_vsock_conn *c = &v->conns[i];
		if (c->state != VIRTIO_VSOCK_FREE && c->local_port == local && c->peer_port == peer)
			return c;
	}
	return NULL;
}

static struct virtio_vsock_conn *alloc_conn(struct virtio_vsock *v, uint32_t local, uint32_t peer)
{
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++) {
		struct virtio_vsock_conn *c = &v->conns[i];
		if (c->state != VIRTIO_VSOCK_FREE)
			continue;
		uint8_t *rx = malloc(VIRTIO_VSOCK_BUF_ALLOC), *tx = malloc(VIRTIO_VSOCK_BUF_ALLOC);
		if (!rx || !tx) {
			free(rx);
			free(tx);
			return NULL;
		}
		memset(c, 0, sizeof *c);
		c->local_port = local;
		c->peer_port = peer;
		c->rxbuf = rx;
		c->txbuf = tx;
		return c;
	}
	return NULL;
}

static void free_conn(struct virtio_vsock_conn *c)
{
	free(c->rxbuf);
	free(c->txbuf);
	memset(c, 0, sizeof *c);
}

static void queue_rst(struct virtio_vsock *v, uint32_t local, uint32_t peer)
{
	if (v->nr_rst >= VIRTIO_VSOCK_MAX_RST)
		return; /* the guest's own timeout will end it */
	v->rst[v->nr_rst].local = local;
	v->rst[v->nr_rst].peer = peer;
	v->nr_rst++;
}

/* Tell the backend, RST the guest and forget c. */
static void reset_conn(struct virtio_vsock *v, struct virtio_vsock_conn *c)
{
	const struct virtio_vsock_backend *b = v->backend;
	enum virtio_vsock_state st = c->state;

	queue_rst(v, c->local_port, c->peer_port);
	if (st == VIRTIO_VSOCK_CONNECTING && b && b->connected)
		b->connected(v->backend_ctx, c, -ECONNRESET);
	else if (st == VIRTIO_VSOCK_CONNECTED && b && b->closed)
		b->closed(v->backend_ctx, c);
	free_conn(c);
}

static uint32_t peer_credit(const struct virtio_vsock_conn *c)
{
	uint32_t in_flight = c->tx_cnt - c->peer_fwd_cnt;
	return in_flight >= c->peer_buf_alloc ? 0 : c->peer_buf_alloc - in_flight;
}

/* ---- host → guest (rx queue) ---- */

static bool conn_has_work(const struct virtio_vsock_conn *c)
{
	if (c->state == VIRTIO_VSOCK_FREE)
		return false;
	if (c->pending & ~P_SHUTDOWN)
		return true;
	if (c->state != VIRTIO_VSOCK_CONNECTED)
		return false;
	if (c->tx_len && peer_credit(c))
		return true;
	return (c->pending & P_SHUTDOWN) && c->tx_len == 0;
}

static struct virtio_vsock_conn *next_conn(struct virtio_vsock *v)
{
	for (unsigned k = 0; k < VIRTIO_VSOCK_MAX_CONNS; k++) {
		unsigned i = (v->rr + k) % VIRTIO_VSOCK_MAX_CONNS;
		if (conn_has_work(&v->conns[i])) {
			v->rr = (i + 1) % VIRTIO_VSOCK_MAX_CONNS;
			return &v->conns[i];
		}
	}
	return NULL;
}

static void fill_hdr(struct virtio_vsock *v, struct virtio_vsock_hdr *h, uint32_t local, uint32_t peer,
		     uint16_t op)
{
	memset(h, 0, sizeof *h);
	h->src_cid = VIRTIO_VSOCK_HOST_CID;
	h->dst_cid = v->guest_cid;
	h->src_port = local;
	h->dst_port = peer;
	h->type = VIRTIO_VSOCK_TYPE_STREAM;
	h->op = op;
}

/* Build the next packet of c into the chain; returns the payload length
 * (data was moved out of txbuf when it is non-zero). */
static uint32_t conn_packet(struct virtio_vsock_conn *c, struct virtio_vsock_hdr *h,
			    const struct virtqueue_chain *ch)
{
	uint32_t room = ch->write_len - VIRTIO_VSOCK_HDR_SIZE;

	h->buf_alloc = VIRTIO_VSOCK_BUF_ALLOC;
	h->fwd_cnt = c->fwd_cnt;
	c->fwd_cnt_sent = c->fwd_cnt;
	c->pending &= ~P_CREDIT_UPDATE; /* every packet carries our credit */
	if (c->pending & P_REQUEST) {
		c->pending &= ~P_REQUEST;
		h->op = VIRTIO_VSOCK_OP_REQUEST;
		return 0;
	}
	if (c->pending & P_RESPONSE) {
		c->pending &= ~P_RESPONSE;
		h->op = VIRTIO_VSOCK_OP_RESPONSE;
		return 0;
	}
	if (c->pending & P_CREDIT_REQUEST) {
		c->pending &= ~P_CREDIT_REQUEST;
		h->op = VIRTIO_VSOCK_OP_CREDIT_REQUEST;
		return 0;
	}
	uint32_t n = c->tx_len;
	if (n > peer_credit(c))
		n = peer_credit(c);
	if (n > room)
		n = room;
	if (n > VIRTIO_VSOCK_MAX_PKT)
		n = VIRTIO_VSOCK_MAX_PKT;
	if (c->state == VIRTIO_VSOCK_CONNECTED && n) {
		uint32_t first = VIRTIO_VSOCK_BUF_ALLOC - c->tx_head;
		if (first > n)
			first = n;
		chain_copy(ch, true, VIRTIO_VSOCK_HDR_SIZE, c->txbuf + c->tx_head, first);
		chain_copy(ch, true, VIRTIO_VSOCK_HDR_SIZE + first, c->txbuf, n - first);
		c->tx_head = (c->tx_head + n) & BUF_MASK;
		c->tx_len -= n;
		c->tx_cnt += n;
		h->op = VIRTIO_VSOCK_OP_RW;
		h->len = n;
		return n;
	}
	if ((c->pending & P_SHUTDOWN) && c->tx_len == 0) {
		c->pending &= ~P_SHUTDOWN;
		h->op = VIRTIO_VSOCK_OP_SHUTDOWN;
		h->flags = c->host_shut;
		return 0;
	}
	h->op = VIRTIO_VSOCK_OP_CREDIT_UPDATE; /* buffer too small for data */
	return 0;
}

/* Send what is owed while the guest gives rx buffers.  Backend callbacks
 * made from here may queue more work; the loop picks it up. */
static void flush_rx(struct virtio_vsock *v)
{
	struct virtqueue *vq = &v->vqs[Q_RX];

	if (v->busy) {
		v->again = true;
		return;
	}
	v->busy = 1;
	do {
		bool pushed = false;
		v->again = false;
		while (v->dev.live) {
			struct virtio_vsock_conn *c = v->nr_rst ? NULL : next_conn(v);
			if (!v->nr_rst && !c)
				break;
			struct virtqueue_chain ch;
			int r = virtqueue_pop(vq, &ch);
			if (r < 0 || (r > 0 && ch.write_len < VIRTIO_VSOCK_HDR_SIZE)) {
				virtqueue_dev_fail(&v->dev);
				break;
			}
			if (r == 0)
				break;
			struct virtio_vsock_hdr h;
			uint32_t n = 0;
			if (!c) {
				v->nr_rst--;
				fill_hdr(v, &h, v->rst[v->nr_rst].local, v->rst[v->nr_rst].peer,
					 VIRTIO_VSOCK_OP_RST);
				v->stats.resets_sent++;
			} else {
				fill_hdr(v, &h, c->local_port, c->peer_port, 0);
				n = conn_packet(c, &h, &ch);
			}
			uint8_t raw[VIRTIO_VSOCK_HDR_SIZE];
			virtio_vsock_hdr_encode(raw, &h);
			chain_copy(&ch, true, 0, raw, VIRTIO_VSOCK_HDR_SIZE);
			virtqueue_push(vq, ch.head, VIRTIO_VSOCK_HDR_SIZE + n);
			pushed = true;
			if (n && v->backend && v->backend->writable)
				v->backend->writable(v->backend_ctx, c);
		}
		if (pushed)
			virtqueue_dev_used(&v->dev, Q_RX);
	} while (v->again && v->dev.live);
	v->busy = 0;
}

/* ---- guest → host (tx queue) ---- */

static void guest_request(struct virtio_vsock *v, const struct virtio_vsock_hdr *h)
{
	const struct virtio_vsock_backend *b = v->backend;
	struct virtio_vsock_conn *c = alloc_conn(v, h->dst_port, h->src_port);

	if (!c) {
		queue_rst(v, h->dst_port, h->src_port);
		return;
	}
	c->state = VIRTIO_VSOCK_CONNECTED;
	c->peer_buf_alloc = h->buf_alloc;
	c->peer_fwd_cnt = h->fwd_cnt;
	if (!b || !b->connect_request || b->connect_request(v->backend_ctx, c, h->dst_port) < 0) {
		queue_rst(v, h->dst_port, h->src_port);
		free_conn(c);
		return;
	}
	c->pending |= P_RESPONSE;
}

static void guest_data(struct virtio_vsock *v, struct virtio_vsock_conn *c, const struct virtqueue_chain *ch,
		       uint32_t len)
{
	const struct virtio_vsock_backend *b = v->backend;

	if (c->state != VIRTIO_VSOCK_CONNECTED || (c->peer_shut & VIRTIO_VSOCK_SHUT_SEND)) {
		reset_conn(v, c);
		return;
	}
	if (len > VIRTIO_VSOCK_BUF_ALLOC - (c->rx_cnt - c->fwd_cnt)) {
		v->stats.overruns++;
		reset_conn(v, c);
		return;
	}
	if (len == 0)
		return;
	uint32_t at = c->rx_cnt & BUF_MASK;
	uint32_t first = VIRTIO_VSOCK_BUF_ALLOC - at < len ? VIRTIO_VSOCK_BUF_ALLOC - at : len;
	chain_copy(ch, false, VIRTIO_VSOCK_HDR_SIZE, c->rxbuf + at, first);
	chain_copy(ch, false, VIRTIO_VSOCK_HDR_SIZE + first, c->rxbuf, len - first);
	c->rx_cnt += len;
	if (b && b->readable)
		b->readable(v->backend_ctx, c);
}

static void guest_conn_packet(struct virtio_vsock *v, struct virtio_vsock_conn *c, const struct virtio_vsock_hdr *h,
			      const struct virtqueue_chain *ch)
{
	const struct virtio_vsock_backend *b = v->backend;

	/* fwd_cnt may only move forward, and never past what we sent. */
	if ((uint32_t)(h->fwd_cnt - c->peer_fwd_cnt) > (uint32_t)(c->tx_cnt - c->peer_fwd_cnt)) {
		v->stats.bad_packets++;
		reset_conn(v, c);
		return;
	}
	c->peer_buf_alloc = h->buf_alloc;
	c->peer_fwd_cnt = h->fwd_cnt;

	switch (h->op) {
	case VIRTIO_VSOCK_OP_REQUEST:
		reset_conn(v, c);
		break;
	case VIRTIO_VSOCK_OP_RESPONSE:
		if (c->state != VIRTIO_VSOCK_CONNECTING) {
			reset_conn(v, c);
			break;
		}
		c->state = VIRTIO_VSOCK_CONNECTED;
		if (b && b->connected)
			b->connected(v->backend_ctx, c, 0);
		break;
	case VIRTIO_VSOCK_OP_RST:
		if (c->state == VIRTIO_VSOCK_CONNECTING && b && b->connected)
			b->connected(v->backend_ctx, c, -ECONNREFUSED);
		else if (b && b->closed)
			b->closed(v->backend_ctx, c);
		free_conn(c);
		break;
	case VIRTIO_VSOCK_OP_SHUTDOWN:
		if (c->state != VIRTIO_VSOCK_CONNECTED) {
			reset_conn(v, c);
			break;
		}
		c->peer_shut |= h->flags & (VIRTIO_VSOCK_SHUT_RCV | VIRTIO_VSOCK_SHUT_SEND);
		if (c->peer_shut & VIRTIO_VSOCK_SHUT_RCV) {
			/* Nothing more will be read: drop what waits. */
			c->tx_len = 0;
			c->pending &= ~P_SHUTDOWN;
		}
		if (b && b->shutdown)
			b->shutdown(v->backend_ctx, c, c->peer_shut);
		else if (c->peer_shut == (VIRTIO_VSOCK_SHUT_RCV | VIRTIO_VSOCK_SHUT_SEND))
			virtio_vsock_host_close(v, c);
		break;
	case VIRTIO_VSOCK_OP_RW:
		guest_data(v, c, ch, h->len);
		break;
	case VIRTIO_VSOCK_OP_CREDIT_UPDATE:
		break;
	case VIRTIO_VSOCK_OP_CREDIT_REQUEST:
		c->pending |= P_CREDIT_UPDATE;
		break;
	}
}

/* One tx packet.  Returns a negative errno only for a malformed buffer,
 * which stops the device; bad fields are dropped or answered with RST. */
static int tx_packet(struct virtio_vsock *v, const struct virtqueue_chain *ch)
{
	uint8_t raw[VIRTIO_VSOCK_HDR_SIZE];
	struct virtio_vsock_hdr h;

	if (ch->read_len < VIRTIO_VSOCK_HDR_SIZE)
		return -EINVAL;
	chain_copy(ch, false, 0, raw, VIRTIO_VSOCK_HDR_SIZE);
	virtio_vsock_hdr_decode(&h, raw);
	if (h.len > VIRTIO_VSOCK_MAX_PKT || h.len > ch->read_len - VIRTIO_VSOCK_HDR_SIZE)
		return -EINVAL;

	if (h.src_cid != v->guest_cid) {
		v->stats.bad_packets++; /* cannot be answered */
		return 0;
	}
	bool known_op = h.op >= VIRTIO_VSOCK_OP_REQUEST && h.op <= VIRTIO_VSOCK_OP_CREDIT_REQUEST;
	if (h.type != VIRTIO_VSOCK_TYPE_STREAM || h.dst_cid != VIRTIO_VSOCK_HOST_CID || !known_op ||
	    (h.op != VIRTIO_VSOCK_OP_RW && h.len != 0)) {
		v->stats.bad_packets++;
		if (h.op != VIRTIO_VSOCK_OP_RST)
			queue_rst(v, h.dst_port, h.src_port);
		return 0;
	}
	struct virtio_vsock_conn *c = find_conn(v, h.dst_port, h.src_port);
	if (c)
		guest_conn_packet(v, c, &h, ch);
	else if (h.op == VIRTIO_VSOCK_OP_REQUEST)
		guest_request(v, &h);
	else if (h.op != VIRTIO_VSOCK_OP_RST)
		queue_rst(v, h.dst_port, h.src_port);
	return 0;
}

static int process_tx(struct virtio_vsock *v)
{
	struct virtqueue *vq = &v->vqs[Q_TX];
	struct virtqueue_chain ch;
	bool pushed = false;
	int r = 0;

	while (v->dev.live && (r = virtqueue_pop(vq, &ch)) > 0) {
		int e = tx_packet(v, &ch);
		virtqueue_push(vq, ch.head, 0);
		pushed = true;
		if (e < 0) {
			r = e;
			break;
		}
	}
	if (pushed)
		virtqueue_dev_used(&v->dev, Q_TX);
	if (r < 0)
		return r;
	flush_rx(v);
	return 0;
}

/* ---- device ops ---- */

static void vs_config_read(struct virtqueue_dev *d, uint32_t off, void *data, uint32_t len)
{
	uint8_t cfg[8];

	put64(cfg, to_vsock(d)->guest_cid);
	memcpy(data, cfg + off, len); /* the transport bounded off + len by 8 */
}

static int vs_notify(struct virtqueue_dev *d, unsigned q)
{
	struct virtio_vsock *v = to_vsock(d);

	if (q == Q_TX)
		return process_tx(v);
	if (q == Q_RX)
		flush_rx(v);
	return 0;
}

static void drop_all(struct virtio_vsock *v)
{
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++) {
		struct virtio_vsock_conn *c = &v->conns[i];
		if (c->state == VIRTIO_VSOCK_FREE)
			continue;
		if (c->state == VIRTIO_VSOCK_CONNECTING && v->backend && v->backend->connected)
			v->backend->connected(v->backend_ctx, c, -ECONNRESET);
		else if (c->state == VIRTIO_VSOCK_CONNECTED && v->backend && v->backend->closed)
			v->backend->closed(v->backend_ctx, c);
		free_conn(c);
	}
	v->nr_rst = 0;
}

static void vs_reset(struct virtqueue_dev *d)
{
	drop_all(to_vsock(d));
}

/* A template holds no connection: the guest's side of one would be in
 * its RAM with nobody on the host's. */
static int vs_quiet(struct virtqueue_dev *d, char *err, size_t errlen)
{
	struct virtio_vsock *v = to_vsock(d);
	unsigned open = 0;
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++)
		open += v->conns[i].state != VIRTIO_VSOCK_FREE;
	if (open || v->nr_rst) {
		snprintf(err, errlen, "vsock: %u connection(s) open, %u reset(s) to send", open,
			 v->nr_rst);
		return -EBUSY;
	}
	return 0;
}

/* A fork's copy holds no connection either, but the guest's side of
 * each is in the RAM it copies: the copy resets them all (its exec
 * sessions and guest-made connections end; the original's go on).
 * State: version, next_port, count, then (local, peer) per connection
 * and per reset still owed. */
#define VS_FORK_VERSION 1u
#define VS_FORK_MAX (VIRTIO_VSOCK_MAX_CONNS + VIRTIO_VSOCK_MAX_RST)
_Static_assert(VS_FORK_MAX <= sizeof ((struct virtio_vsock *)0)->rst /
				  sizeof ((struct virtio_vsock *)0)->rst[0],
	       "a copy owes a reset for every pair its original saved");

static int vs_fork_save(struct virtqueue_dev *d, struct statebuf_writer *w, char *err,
			size_t errlen)
{
	struct virtio_vsock *v = to_vsock(d);
	uint32_t n = v->nr_rst;
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++)
		n += v->conns[i].state != VIRTIO_VSOCK_FREE;
	statebuf_u32(w, VS_FORK_VERSION);
	statebuf_u32(w, v->next_port);
	statebuf_u32(w, n);
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++)
		if (v->conns[i].state != VIRTIO_VSOCK_FREE) {
			statebuf_u32(w, v->conns[i].local_port);
			statebuf_u32(w, v->conns[i].peer_port);
		}
	for (unsigned i = 0; i < v->nr_rst; i++) {
		statebuf_u32(w, v->rst[i].local);
		statebuf_u32(w, v->rst[i].peer);
	}
	if (w->err)
		snprintf(err, errlen, "vsock: cannot hold its fork state");
	return w->err;
}

static int vs_fork_load(struct virtqueue_dev *d, const uint8_t *p, size_t len, char *err,
			size_t errlen)
{
	struct virtio_vsock *v = to_vsock(d);
	struct statebuf_reader r;
	statebuf_reader_init(&r, p, len);
	uint32_t version = statebuf_get_u32(&r), next = statebuf_get_u32(&r);
	uint32_t n = statebuf_get_u32(&r);
	if (r.err || version != VS_FORK_VERSION || next < VIRTIO_VSOCK_EPHEMERAL_BASE ||
	    n > VS_FORK_MAX || statebuf_left(&r) != (size_t)n * 8) {
		snprintf(err, errlen, "vsock: malformed fork state (%zu bytes)", len);
		return -EINVAL;
	}
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++)
		if (v->conns[i].state != VIRTIO_VSOCK_FREE) {
			snprintf(err, errlen, "vsock: a fork loads into a device with no connection");
			return -EBUSY;
		}
	/* Every pair, past MAX_RST too: the guest's side of a connection
	 * left out would wait for ever (an idle exec session sends nothing). */
	for (uint32_t i = 0; i < n; i++) {
		v->rst[i].local = statebuf_get_u32(&r);
		v->rst[i].peer = statebuf_get_u32(&r);
	}
	v->nr_rst = n;
	v->next_port = next;
	return 0;
}

/* The resets a fork owes go out at once, not with the next packet. */
static void vs_restored(struct virtqueue_dev *d)
{
	struct virtio_vsock *v = to_vsock(d);
	if (v->nr_rst)
		flush_rx(v);
}

static const struct virtqueue_dev_ops virtio_vsock_ops = {
	.config_read = vs_config_read,
	.notify = vs_notify,
	.reset = vs_reset,
	.quiet = vs_quiet,
	.restored = vs_restored,
	.fork_save = vs_fork_save,
	.fork_load = vs_fork_load,
};

int virtio_vsock_init(struct virtio_vsock *v, uint64_t guest_cid, const struct virtio_vsock_backend *backend,
	       void *backend_ctx)
{
	if (guest_cid < 3 || guest_cid >= 0xffffffffull)
		return -EINVAL;
	memset(v, 0, sizeof *v);
	v->guest_cid = guest_cid;
	v->backend = backend;
	v->backend_ctx = backend_ctx;
	v->next_port = VIRTIO_VSOCK_EPHEMERAL_BASE;
	for (unsigned i = 0; i < 3; i++)
		virtqueue_init(&v->vqs[i], VIRTIO_VSOCK_QUEUE_SIZE);
	v->dev.ops = &virtio_vsock_ops;
	v->dev.device_id = VIRTIO_VSOCK_DEVICE_ID;
	v->dev.features = (1ull << VIRTIO_F_EVENT_IDX) | (1ull << VIRTIO_F_INDIRECT_DESC);
	v->dev.config_size = 8;
	v->dev.nr_queues = 3;
	v->dev.vqs = v->vqs;
	return 0;
}

void virtio_vsock_destroy(struct virtio_vsock *v)
{
	drop_all(v);
}

/* ---- backend API ---- */

int virtio_vsock_host_connect(struct virtio_vsock *v, uint32_t port, void *user, struct virtio_vsock_conn **out)
{
	if (!v->dev.live)
		return -ENOTCONN;
	uint32_t local = 0;
	for (unsigned tries = 0; tries <= VIRTIO_VSOCK_MAX_CONNS; tries++) {
		uint32_t p = v->next_port++;
		if (v->next_port < VIRTIO_VSOCK_EPHEMERAL_BASE)
			v->next_port = VIRTIO_VSOCK_EPHEMERAL_BASE;
		if (!find_conn(v, p, port)) {
			local = p;
			break;
		}
	}
	unsigned used = 0;
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++)
		used += v->conns[i].state != VIRTIO_VSOCK_FREE;
	if (used == VIRTIO_VSOCK_MAX_CONNS || !local)
		return -ENOSPC;
	struct virtio_vsock_conn *c = alloc_conn(v, local, port);
	if (!c)
		return -ENOMEM;
	c->state = VIRTIO_VSOCK_CONNECTING;
	c->user = user;
	c->pending = P_REQUEST;
	*out = c;
	flush_rx(v);
	return 0;
}

size_t virtio_vsock_host_send_room(const struct virtio_vsock_conn *c)
{
	if (c->state == VIRTIO_VSOCK_FREE || (c->host_shut & VIRTIO_VSOCK_SHUT_SEND) ||
	    (c->peer_shut & VIRTIO_VSOCK_SHUT_RCV))
		return 0;
	return VIRTIO_VSOCK_BUF_ALLOC - c->tx_len;
}

ssize_t virtio_vsock_host_send(struct virtio_vsock *v, struct virtio_vsock_conn *c, const void *buf, size_t len)
{
	if (c->state == VIRTIO_VSOCK_FREE || (c->host_shut & VIRTIO_VSOCK_SHUT_SEND) ||
	    (c->peer_shut & VIRTIO_VSOCK_SHUT_RCV))
		return -ENOTCONN;
	uint32_t n = VIRTIO_VSOCK_BUF_ALLOC - c->tx_len;
	if (len < n)
		n = (uint32_t)len;
	uint32_t at = (c->tx_head + c->tx_len) & BUF_MASK;
	uint32_t first = VIRTIO_VSOCK_BUF_ALLOC - at < n ? VIRTIO_VSOCK_BUF_ALLOC - at : n;
	memcpy(c->txbuf + at, buf, first);
	memcpy(c->txbuf, (const uint8_t *)buf + first, n - first);
	c->tx_len += n;
	if (n && c->state == VIRTIO_VSOCK_CONNECTED && peer_credit(c) == 0 &&
	    c->tx_len == n)
		c->pending |= P_CREDIT_REQUEST; /* stalled: ask the guest */
	flush_rx(v);
	return n;
}

size_t virtio_vsock_host_pending(const struct virtio_vsock_conn *c)
{
	return c->state == VIRTIO_VSOCK_FREE ? 0 : c->rx_cnt - c->fwd_cnt;
}

size_t virtio_vsock_host_recv(struct virtio_vsock *v, struct virtio_vsock_conn *c, void *buf, size_t len)
{
	uint32_t n = (uint32_t)virtio_vsock_host_pending(c);

	if (len < n)
		n = (uint32_t)len;
	if (n == 0)
		return 0;
	uint32_t at = c->fwd_cnt & BUF_MASK;
	uint32_t first = VIRTIO_VSOCK_BUF_ALLOC - at < n ? VIRTIO_VSOCK_BUF_ALLOC - at : n;
	memcpy(buf, c->rxbuf + at, first);
	memcpy((uint8_t *)buf + first, c->rxbuf, n - first);
	c->fwd_cnt += n;
	/* Credit back once the guest believes we are half full and a fair
	 * share was freed (or all of it), so a sender that ran dry always
	 * hears of the space without an update for every small read. */
	uint32_t seen_used = c->rx_cnt - c->fwd_cnt_sent;
	uint32_t freed = c->fwd_cnt - c->fwd_cnt_sent;
	if (c->state == VIRTIO_VSOCK_CONNECTED && seen_used > VIRTIO_VSOCK_BUF_ALLOC / 2 &&
	    (freed >= VIRTIO_VSOCK_BUF_ALLOC / 8 || c->rx_cnt == c->fwd_cnt)) {
		c->pending |= P_CREDIT_UPDATE;
		flush_rx(v);
	}
	return n;
}

int virtio_vsock_host_shutdown(struct virtio_vsock *v, struct virtio_vsock_conn *c, uint32_t flags)
{
	flags &= VIRTIO_VSOCK_SHUT_RCV | VIRTIO_VSOCK_SHUT_SEND;
	if (c->state != VIRTIO_VSOCK_CONNECTED || flags == 0)
		return -ENOTCONN;
	if ((c->host_shut | flags) == c->host_shut)
		return 0;
	c->host_shut |= flags;
	c->pending |= P_SHUTDOWN;
	flush_rx(v);
	return 0;
}

void virtio_vsock_host_close(struct virtio_vsock *v, struct virtio_vsock_conn *c)
{
	if (c->state == VIRTIO_VSOCK_FREE)
		return;
	queue_rst(v, c->local_port, c->peer_port);
	free_conn(c);
	flush_rx(v);
}
