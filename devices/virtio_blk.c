#include "devices/virtio_blk.h"

#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

_Static_assert(BLK_MAX_IOV >= VIRTQUEUE_MAX_SEGS, "one iovec per segment of a chain");

static struct virtio_blk *to_blk(struct virtqueue_dev *d)
{
	return (struct virtio_blk *)((char *)d - offsetof(struct virtio_blk, dev));
}

static bool negotiated(const struct virtio_blk *b, unsigned bit)
{
	return (b->dev.driver_features >> bit) & 1;
}

/* Copy up to max bytes of the readable side of c from byte off into buf;
 * returns the count.  The guest may rewrite its buffers at any time, so
 * whatever is decided is decided on this copy. */
static uint32_t gather(const struct virtqueue_chain *c, uint32_t off, void *buf, uint32_t max)
{
	uint32_t got = 0;

	for (unsigned i = 0; i < c->nr_read && got < max; i++) {
		uint32_t l = c->seg[i].len;
		if (off >= l) {
			off -= l;
			continue;
		}
		uint32_t n = l - off < max - got ? l - off : max - got;
		memcpy((uint8_t *)buf + got, c->seg[i].ptr + off, n);
		got += n;
		off = 0;
	}
	return got;
}

/* Describe bytes [off, off + len) of one side of c (the writable one if
 * write) as iovecs into guest RAM; returns their number.  The caller has
 * checked that the side holds them; at most one iovec per segment. */
static int span(const struct virtqueue_chain *c, bool write, uint32_t off, uint32_t len, struct iovec *iov)
{
	unsigned first = write ? c->nr_read : 0, end = write ? c->nr : c->nr_read;
	int n = 0;

	for (unsigned i = first; i < end && len > 0; i++) {
		uint32_t l = c->seg[i].len;
		if (off >= l) {
			off -= l;
			continue;
		}
		uint32_t k = l - off < len ? l - off : len;
		iov[n++] = (struct iovec){ c->seg[i].ptr + off, k };
		len -= k;
		off = 0;
	}
	return n;
}

/* Whether [sector, sector + nsect) lies on the disk; no sum can wrap. */
static bool in_disk(const struct virtio_blk *b, uint64_t sector, uint64_t nsect)
{
	return sector <= b->capacity && nsect <= b->capacity - sector;
}

/* After a write a driver without FLUSH expects the data to be stable. */
static uint8_t write_done(struct virtio_blk *b, int r)
{
	if (r == 0 && !negotiated(b, VIRTIO_BLK_F_FLUSH))
		r = b->be.ops->flush(b->be.ctx);
	return r == 0 ? VIRTIO_BLK_S_OK : VIRTIO_BLK_S_IOERR;
}

/* IN and OUT: data_len bytes at sector, the data on the writable (IN) or
 * readable (OUT, after the header) side. */
static uint8_t do_rw(struct virtio_blk *b, const struct virtqueue_chain *c, bool in, uint64_t sector,
		     uint32_t data_len)
{
	struct iovec iov[BLK_MAX_IOV];

	if (data_len % VIRTIO_BLK_SECTOR || !in_disk(b, sector, data_len / VIRTIO_BLK_SECTOR))
		return VIRTIO_BLK_S_IOERR;
	if (data_len == 0)
		return VIRTIO_BLK_S_OK;
	uint64_t off = sector * VIRTIO_BLK_SECTOR;
	if (in) {
		int n = span(c, true, 0, data_len, iov);
		if (b->be.ops->read(b->be.ctx, iov, n, off) < 0)
			return VIRTIO_BLK_S_IOERR;
		b->stats.read_bytes += data_len;
		return VIRTIO_BLK_S_OK;
	}
	int n = span(c, false, VIRTIO_BLK_HDR_SIZE, data_len, iov);
	int r = b->be.ops->write(b->be.ctx, iov, n, off);
	if (r == 0)
		b->stats.written_bytes += data_len;
	return write_done(b, r);
}

/* DISCARD and WRITE_ZEROES: data_len bytes of segments after the header.
 * All of them are checked before any is carried out, so a bad request
 * changes nothing. */
static uint8_t do_dwz(struct virtio_blk *b, const struct virtqueue_chain *c, bool discard, uint32_t data_len)
{
	struct { uint64_t sector; uint32_t nsect, flags; } seg[VIRTIO_BLK_MAX_DWZ_SEG];
	uint8_t raw[VIRTIO_BLK_MAX_DWZ_SEG * VIRTIO_BLK_DWZ_SEG_SIZE];

	if (data_len == 0 || data_len % VIRTIO_BLK_DWZ_SEG_SIZE ||
	    data_len / VIRTIO_BLK_DWZ_SEG_SIZE > VIRTIO_BLK_MAX_DWZ_SEG)
		return VIRTIO_BLK_S_IOERR;
	unsigned n = data_len / VIRTIO_BLK_DWZ_SEG_SIZE;
	gather(c, VIRTIO_BLK_HDR_SIZE, raw, data_len);
	for (unsigned i = 0; i < n; i++) {
		const uint8_t *p = raw + i * VIRTIO_BLK_DWZ_SEG_SIZE;
		uint64_t s;
		uint32_t ns, fl;
		memcpy(&s, p, 8);
		memcpy(&ns, p + 8, 4);
		memcpy(&fl, p + 12, 4);
		seg[i].sector = le64toh(s);
		seg[i].nsect = le32toh(ns);
		seg[i].flags = le32toh(fl);
		if (seg[i].flags & ~VIRTIO_BLK_DWZ_F_UNMAP ||
		    (discard && seg[i].flags & VIRTIO_BLK_DWZ_F_UNMAP))
			return VIRTIO_BLK_S_UNSUPP;
		if (seg[i].nsect > VIRTIO_BLK_MAX_DWZ_SECTORS ||
		    !in_disk(b, seg[i].sector, seg[i].nsect))
			return VIRTIO_BLK_S_IOERR;
	}
	int r = 0;
	for (unsigned i = 0; i < n && r == 0; i++) {
		uint64_t off = seg[i].sector * VIRTIO_BLK_SECTOR,
			 len = (uint64_t)seg[i].nsect * VIRTIO_BLK_SECTOR;
		if (len == 0)
			continue;
		r = discard ? b->be.ops->discard(b->be.ctx, off, len)
			    : b->be.ops->write_zeroes(b->be.ctx, off, len,
						      seg[i].flags & VIRTIO_BLK_DWZ_F_UNMAP);
	}
	return write_done(b, r);
}

/* GET_ID: the serial, zero-padded to 20 bytes and to the end of the
 * driver's buffer (the used length covers all of it). */
static uint8_t do_get_id(struct virtio_blk *b, const struct virtqueue_chain *c, uint32_t data_len)
{
	uint32_t done = 0;

	if (data_len < VIRTIO_BLK_ID_BYTES)
		return VIRTIO_BLK_S_IOERR;
	for (unsigned i = c->nr_read; i < c->nr && done < data_len; i++) {
		uint32_t k = c->seg[i].len < data_len - done ? c->seg[i].len : data_len - done;
		for (uint32_t j = 0; j < k; j++, done++)
			c->seg[i].ptr[j] = done < VIRTIO_BLK_ID_BYTES ? b->serial[done] : 0;
	}
	return VIRTIO_BLK_S_OK;
}

/* Answer one chain that has a status byte: the status. */
static uint8_t serve(struct virtio_blk *b, const struct virtqueue_chain *c)
{
	uint8_t h[VIRTIO_BLK_HDR_SIZE];

	if (gather(c, 0, h, sizeof h) < sizeof h)
		return VIRTIO_BLK_S_IOERR;
	uint32_t type;
	uint64_t sector;
	memcpy(&type, h, 4);
	memcpy(&sector, h + 8, 8);
	type = le32toh(type);
	sector = le64toh(sector);
	/* What follows the header on the readable side, and what precedes
	 * the status byte on the writable one. */
	uint32_t rd = c->read_len - VIRTIO_BLK_HDR_SIZE, wr = c->write_len - 1;

	switch (type) {
	case VIRTIO_BLK_T_IN:
		return rd ? VIRTIO_BLK_S_IOERR : do_rw(b, c, true, sector, wr);
	case VIRTIO_BLK_T_OUT:
		if (b->be.read_only || wr)
			return VIRTIO_BLK_S_IOERR;
		return do_rw(b, c, false, sector, rd);
	case VIRTIO_BLK_T_FLUSH:
		if (rd || wr)
			return VIRTIO_BLK_S_IOERR;
		if (b->be.read_only)
			return VIRTIO_BLK_S_OK;
		return b->be.ops->flush(b->be.ctx) == 0 ? VIRTIO_BLK_S_OK : VIRTIO_BLK_S_IOERR;
	case VIRTIO_BLK_T_GET_ID:
		return rd ? VIRTIO_BLK_S_IOERR : do_get_id(b, c, wr);
	case VIRTIO_BLK_T_DISCARD:
	case VIRTIO_BLK_T_WRITE_ZEROES: {
		bool discard = type == VIRTIO_BLK_T_DISCARD;
		if (b->be.read_only)
			return VIRTIO_BLK_S_IOERR;
		if (!negotiated(b, discard ? VIRTIO_BLK_F_DISCARD : VIRTIO_BLK_F_WRITE_ZEROES))
			return VIRTIO_BLK_S_UNSUPP;
		return wr ? VIRTIO_BLK_S_IOERR : do_dwz(b, c, discard, rd);
	}
	default:
		return VIRTIO_BLK_S_UNSUPP;
	}
}

static int blk_notify(struct virtqueue_dev *d, unsigned q)
{
	struct virtio_blk *b = to_blk(d);
	struct virtqueue *vq = &b->vqs[q];
	struct virtqueue_chain c;
	bool pushed = false;
	int err = 0;

	while (d->live) {
		int r = virtqueue_pop(vq, &c);
		if (r <= 0) {
			err = r;
			break;
		}
		if (c.write_len == 0) {
			/* No status byte: the request cannot be answered. */
			err = -EINVAL;
			break;
		}
		uint8_t st = serve(b, &c);
		/* Writable segments come last and are never empty, so the
		 * status byte is the last byte of the last segment. */
		c.seg[c.nr - 1].ptr[c.seg[c.nr - 1].len - 1] = st;
		b->stats.ioerr += st == VIRTIO_BLK_S_IOERR;
		b->stats.unsupp += st == VIRTIO_BLK_S_UNSUPP;
		b->stats.requests++;
		virtqueue_push(vq, c.head, c.write_len);
		pushed = true;
	}
	if (pushed)
		virtqueue_dev_used(d, q);
	if (err < 0)
		b->stats.bad_chains++;
	return err;
}

static void put32(uint8_t *cfg, unsigned off, uint32_t v)
{
	v = htole32(v);
	memcpy(cfg + off, &v, 4);
}

static void blk_config_read(struct virtqueue_dev *d, uint32_t off, void *data, uint32_t len)
{
	struct virtio_blk *b = to_blk(d);
	uint8_t cfg[VIRTIO_BLK_CONFIG_SIZE] = { 0 };
	uint64_t cap = htole64(b->capacity);

	memcpy(cfg, &cap, 8);
	put32(cfg, 8, VIRTIO_BLK_SIZE_MAX);
	put32(cfg, 12, VIRTIO_BLK_SEG_MAX);
	/* 16: geometry, 24: topology, 32: writeback, 34: num_queues, for
	 * features not offered: zero. */
	put32(cfg, 20, b->blk_size);
	put32(cfg, 36, VIRTIO_BLK_MAX_DWZ_SECTORS);
	put32(cfg, 40, VIRTIO_BLK_MAX_DWZ_SEG);
	put32(cfg, 44, b->blk_size / VIRTIO_BLK_SECTOR);
	put32(cfg, 48, VIRTIO_BLK_MAX_DWZ_SECTORS);
	put32(cfg, 52, VIRTIO_BLK_MAX_DWZ_SEG);
	cfg[56] = 1; /* write_zeroes_may_unmap: a hole reads as zeros */
	memcpy(data, cfg + off, len); /* the transport bounded off + len */
}

static const struct virtqueue_dev_ops blk_ops = {
	.config_read = blk_config_read,
	.notify = blk_notify,
};

int virtio_blk_init(struct virtio_blk *b, const struct blk_backend *be,
		    const struct virtio_blk_opts *o)
{
	static const struct virtio_blk_opts defaults;
	const struct blk_backend_ops *ops = be ? be->ops : NULL;

	if (!o)
		o = &defaults;
	uint32_t bs = o->blk_size ? o->blk_size : VIRTIO_BLK_SECTOR;
	size_t sl = o->serial ? strnlen(o->serial, VIRTIO_BLK_ID_BYTES + 1) : 0;
	if (!ops || !ops->read || !ops->write || !ops->flush || !ops->discard ||
	    !ops->write_zeroes || sl > VIRTIO_BLK_ID_BYTES || bs < VIRTIO_BLK_SECTOR || bs > 4096 ||
	    (bs & (bs - 1)))
		return -EINVAL;
	memset(b, 0, sizeof *b);
	b->be = *be;
	b->capacity = be->size / VIRTIO_BLK_SECTOR;
	b->blk_size = bs;
	memcpy(b->serial, o->serial ? o->serial : "", sl);
	virtqueue_init(&b->vqs[0], VIRTIO_BLK_QUEUE_SIZE);
	b->dev.ops = &blk_ops;
	b->dev.device_id = VIRTIO_BLK_DEVICE_ID;
	b->dev.features = (1ull << VIRTIO_BLK_F_SIZE_MAX) | (1ull << VIRTIO_BLK_F_SEG_MAX) |
			  (1ull << VIRTIO_BLK_F_BLK_SIZE) | (1ull << VIRTIO_BLK_F_FLUSH) |
			  (1ull << VIRTIO_F_EVENT_IDX) | (1ull << VIRTIO_F_INDIRECT_DESC);
	if (be->read_only)
		b->dev.features |= 1ull << VIRTIO_BLK_F_RO;
	else
		b->dev.features |= (1ull << VIRTIO_BLK_F_DISCARD) |
				   (1ull << VIRTIO_BLK_F_WRITE_ZEROES);
	b->dev.config_size = VIRTIO_BLK_CONFIG_SIZE;
	b->dev.nr_queues = 1;
	b->dev.vqs = b->vqs;
	return 0;
}
