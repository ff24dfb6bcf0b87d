/* A fake virtio driver for the device unit tests and fuzz targets: guest
 * RAM at a chosen address, split virtqueues laid out in it (virtio 1.2
 * §2.7) and the virtio-mmio sequence that brings a device up (§3.1.1,
 * §4.2.3).
 *
 * Header-only (static inline): the unit-test binary compiles only
 * tests/unit/ and each fuzz target only its own file, so both include it.
 * It never uses Check: helpers return what the device did and the caller
 * asserts.  A guest address outside the fake RAM aborts, since that is a
 * bug in the test, not in the device. */
#ifndef KBOX_TESTS_FAKE_VIRTIO_H
#define KBOX_TESTS_FAKE_VIRTIO_H

#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio_mmio.h"
#include "lib/guest_mem.h"

#define FV_MAX_QUEUES 4
#define FV_DESC_F_NEXT 1u
#define FV_DESC_F_WRITE 2u
#define FV_DESC_F_INDIRECT 4u

/* fv_driver_up puts queue q's descriptors at FV_RING_BASE(q), its avail
 * ring 0x1000 and its used ring 0x2000 above: room for 256 entries each,
 * all within FV_RING_SPAN.  Tests keep their buffers clear of these. */
#define FV_RING_BASE(q) (0x10000u * ((q) + 1))
#define FV_RING_SPAN 0x3000u

/* The virtio-mmio registers a driver writes (§4.2.2). */
enum {
	FV_R_DEV_FEATURES_SEL = 0x14,
	FV_R_DRV_FEATURES = 0x20,
	FV_R_DRV_FEATURES_SEL = 0x24,
	FV_R_QUEUE_SEL = 0x30,
	FV_R_QUEUE_NUM = 0x38,
	FV_R_QUEUE_READY = 0x44,
	FV_R_QUEUE_NOTIFY = 0x50,
	FV_R_STATUS = 0x70,
	FV_R_QUEUE_DESC = 0x80,
	FV_R_QUEUE_AVAIL = 0x90,
	FV_R_QUEUE_USED = 0xa0,
};

/* One buffer of a chain: readable by the device unless write. */
struct fv_seg {
	uint64_t gpa;
	uint32_t len;
	bool write;
};

/* The driver's side of one split queue.  size is 32 bits wide so that a
 * test can program sizes the device must refuse. */
struct fv_ring {
	uint64_t desc, avail, used;
	uint32_t size;
	uint16_t used_seen; /* used elements taken by fv_used */
	uint16_t next_desc; /* where fv_post starts its next chain */
};

struct fv_driver {
	uint8_t *ram;
	uint64_t base, size; /* ram is guest [base, base + size) */
	struct guest_mem gm;
	struct virtio_mmio *mmio; /* the transport under test; NULL for bare queues */
	struct fv_ring q[FV_MAX_QUEUES];
};

/* Zero *d, allocate size bytes of zeroed RAM at guest address base and map
 * it in d->gm.  Returns 0, -ENOMEM or guest_mem_add_region's error; release with
 * fv_free. */
static inline int fv_init(struct fv_driver *d, uint64_t base, uint64_t size)
{
	memset(d, 0, sizeof *d);
	d->ram = calloc(1, size);
	if (!d->ram)
		return -ENOMEM;
	d->base = base;
	d->size = size;
	int r = guest_mem_add_region(&d->gm, base, size, d->ram);
	if (r < 0) {
		free(d->ram);
		d->ram = NULL;
	}
	return r;
}

/* Free the RAM of fv_init; d may be reused with fv_init. */
static inline void fv_free(struct fv_driver *d)
{
	free(d->ram);
	d->ram = NULL;
}

/* Zero the whole RAM and forget what was taken from the used rings, as
 * for a fresh guest. */
static inline void fv_clear(struct fv_driver *d)
{
	memset(d->ram, 0, d->size);
	for (unsigned q = 0; q < FV_MAX_QUEUES; q++)
		d->q[q].used_seen = d->q[q].next_desc = 0;
}

/* The host address of guest [gpa, gpa + len); aborts unless all of it is
 * fake RAM. */
static inline uint8_t *fv_at(const struct fv_driver *d, uint64_t gpa, uint64_t len)
{
	if (gpa < d->base || gpa - d->base > d->size || len > d->size - (gpa - d->base))
		abort();
	return d->ram + (gpa - d->base);
}

/* Little-endian loads from any byte pointer (guest RAM or fuzz input). */
static inline uint16_t fv_le16(const void *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return le16toh(v);
}

static inline uint32_t fv_le32(const void *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return le32toh(v);
}

/* Little-endian guest RAM accesses, as the rings are laid out. */
static inline void fv_w16(const struct fv_driver *d, uint64_t gpa, uint16_t v)
{
	v = htole16(v);
	memcpy(fv_at(d, gpa, 2), &v, 2);
}

static inline uint16_t fv_r16(const struct fv_driver *d, uint64_t gpa)
{
	return fv_le16(fv_at(d, gpa, 2));
}

static inline uint32_t fv_r32(const struct fv_driver *d, uint64_t gpa)
{
	return fv_le32(fv_at(d, gpa, 4));
}

/* Write descriptor i of the table at guest address table (a ring's or an
 * indirect one), any field value allowed. */
static inline void fv_desc(const struct fv_driver *d, uint64_t table, unsigned i, uint64_t addr,
			   uint32_t len, uint16_t flags, uint16_t next)
{
	uint8_t *p = fv_at(d, table + 16ull * i, 16);
	addr = htole64(addr);
	len = htole32(len);
	flags = htole16(flags);
	next = htole16(next);
	memcpy(p, &addr, 8);
	memcpy(p + 8, &len, 4);
	memcpy(p + 12, &flags, 2);
	memcpy(p + 14, &next, 2);
}

/* Lay queue q out from base as fv_driver_up does (see FV_RING_BASE) with
 * size entries; nothing is written to RAM or to the device. */
static inline void fv_ring_at(struct fv_driver *d, unsigned q, uint64_t base, uint32_t size)
{
	d->q[q] = (struct fv_ring){
		.desc = base, .avail = base + 0x1000, .used = base + 0x2000, .size = size
	};
}

/* Write segs[0..n) as one chain in queue q's descriptors from head on,
 * the index wrapping at the queue size like a driver's free list. */
static inline void fv_chain(const struct fv_driver *d, unsigned q, uint16_t head,
			    const struct fv_seg *segs, unsigned n)
{
	const struct fv_ring *r = &d->q[q];
	for (unsigned i = 0; i < n; i++) {
		unsigned at = (head + i) % r->size;
		fv_desc(d, r->desc, at, segs[i].gpa, segs[i].len,
			(uint16_t)((segs[i].write ? FV_DESC_F_WRITE : 0) |
				   (i + 1 < n ? FV_DESC_F_NEXT : 0)),
			(uint16_t)((at + 1) % r->size));
	}
}

/* Write segs[0..n) as a chain in an indirect table at guest address table
 * and point queue q's descriptor head at it. */
static inline void fv_chain_indirect(const struct fv_driver *d, unsigned q, uint16_t head,
				     uint64_t table, const struct fv_seg *segs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		fv_desc(d, table, i, segs[i].gpa, segs[i].len,
			(uint16_t)((segs[i].write ? FV_DESC_F_WRITE : 0) |
				   (i + 1 < n ? FV_DESC_F_NEXT : 0)),
			(uint16_t)(i + 1));
	fv_desc(d, d->q[q].desc, head, table, 16 * n, FV_DESC_F_INDIRECT, 0);
}

/* The avail ring's idx as it stands in guest RAM. */
static inline uint16_t fv_avail_idx(const struct fv_driver *d, unsigned q)
{
	return fv_r16(d, d->q[q].avail + 2);
}

/* Make chain head available on queue q: the next avail slot after the idx
 * in RAM (so a test may set idx itself), then the idx (§2.7.13). */
static inline void fv_offer(const struct fv_driver *d, unsigned q, uint16_t head)
{
	const struct fv_ring *r = &d->q[q];
	uint16_t idx = fv_avail_idx(d, q);
	fv_w16(d, r->avail + 4 + 2ull * (idx % r->size), head);
	fv_w16(d, r->avail + 2, (uint16_t)(idx + 1));
}

/* 32-bit register accesses to the transport.  fv_rd starts from a value
 * no register holds, so a read the transport failed to fill shows. */
static inline void fv_wr(const struct fv_driver *d, uint64_t off, uint32_t v)
{
	virtio_mmio_write(d->mmio, off, &v, 4);
}

static inline uint32_t fv_rd(const struct fv_driver *d, uint64_t off)
{
	uint32_t v = 0xdeadbeef;
	virtio_mmio_read(d->mmio, off, &v, 4);
	return v;
}

static inline void fv_kick(const struct fv_driver *d, unsigned q)
{
	fv_wr(d, FV_R_QUEUE_NOTIFY, q);
}

/* Chain segs[0..n) in queue q's next free descriptors, offer and kick;
 * returns the chain's head. */
static inline uint16_t fv_post(struct fv_driver *d, unsigned q, const struct fv_seg *segs,
			       unsigned n)
{
	struct fv_ring *r = &d->q[q];
	uint16_t head = r->next_desc;
	fv_chain(d, q, head, segs, n);
	r->next_desc = (uint16_t)((head + n) % r->size);
	fv_offer(d, q, head);
	fv_kick(d, q);
	return head;
}

/* How many used elements of queue q fv_used has not taken yet. */
static inline uint16_t fv_used_pending(const struct fv_driver *d, unsigned q)
{
	return (uint16_t)(fv_r16(d, d->q[q].used + 2) - d->q[q].used_seen);
}

/* Take the next used element of queue q: true and its id and len (either
 * pointer may be NULL), or false if the device has given none back. */
static inline bool fv_used(struct fv_driver *d, unsigned q, uint32_t *id, uint32_t *len)
{
	struct fv_ring *r = &d->q[q];
	if (!fv_used_pending(d, q))
		return false;
	uint64_t elem = r->used + 4 + 8ull * (r->used_seen % r->size);
	if (id)
		*id = fv_r32(d, elem);
	if (len)
		*len = fv_r32(d, elem + 4);
	r->used_seen++;
	return true;
}

/* Reset the device, acknowledge it and accept features (both words, bit
 * 32 is VERSION_1) up to FEATURES_OK.  Returns 0, or -EIO if the device
 * refused them. */
static inline int fv_negotiate(const struct fv_driver *d, uint64_t features)
{
	const uint32_t want = VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER |
			      VIRTIO_STATUS_FEATURES_OK;
	fv_wr(d, FV_R_STATUS, 0);
	fv_wr(d, FV_R_STATUS, VIRTIO_STATUS_ACKNOWLEDGE);
	fv_wr(d, FV_R_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	fv_wr(d, FV_R_DRV_FEATURES_SEL, 0);
	fv_wr(d, FV_R_DRV_FEATURES, (uint32_t)features);
	fv_wr(d, FV_R_DRV_FEATURES_SEL, 1);
	fv_wr(d, FV_R_DRV_FEATURES, (uint32_t)(features >> 32));
	fv_wr(d, FV_R_STATUS, want);
	return fv_rd(d, FV_R_STATUS) == want ? 0 : -EIO;
}

/* Program queue q's size and ring addresses from d->q[q] and set it
 * ready.  Returns 0, or -EIO if the device did not take it. */
static inline int fv_queue_setup(const struct fv_driver *d, unsigned q)
{
	const struct fv_ring *r = &d->q[q];
	fv_wr(d, FV_R_QUEUE_SEL, q);
	fv_wr(d, FV_R_QUEUE_NUM, r->size);
	fv_wr(d, FV_R_QUEUE_DESC, (uint32_t)r->desc);
	fv_wr(d, FV_R_QUEUE_DESC + 4, (uint32_t)(r->desc >> 32));
	fv_wr(d, FV_R_QUEUE_AVAIL, (uint32_t)r->avail);
	fv_wr(d, FV_R_QUEUE_AVAIL + 4, (uint32_t)(r->avail >> 32));
	fv_wr(d, FV_R_QUEUE_USED, (uint32_t)r->used);
	fv_wr(d, FV_R_QUEUE_USED + 4, (uint32_t)(r->used >> 32));
	fv_wr(d, FV_R_QUEUE_READY, 1);
	return fv_rd(d, FV_R_QUEUE_READY) == 1 ? 0 : -EIO;
}

/* Bring the device up as a driver would: negotiate features, lay queues
 * 0..nq out at FV_RING_BASE with size entries over zeroed rings, make
 * them ready and set DRIVER_OK.  Returns 0, or -EIO at the first step the
 * device refused (the rest is not attempted). */
static inline int fv_driver_up(struct fv_driver *d, uint64_t features, unsigned nq,
			       uint32_t size)
{
	if (nq > FV_MAX_QUEUES)
		abort();
	for (unsigned q = 0; q < nq; q++) {
		fv_ring_at(d, q, FV_RING_BASE(q), size);
		memset(fv_at(d, FV_RING_BASE(q), FV_RING_SPAN), 0, FV_RING_SPAN);
	}
	if (fv_negotiate(d, features) < 0)
		return -EIO;
	for (unsigned q = 0; q < nq; q++)
		if (fv_queue_setup(d, q) < 0)
			return -EIO;
	fv_wr(d, FV_R_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER |
				      VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_DRIVER_OK);
	return fv_rd(d, FV_R_STATUS) & VIRTIO_STATUS_DRIVER_OK ? 0 : -EIO;
}

#endif
