#include "devices/virtqueue.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#define VRING_DESC_F_NEXT 1
#define VRING_DESC_F_WRITE 2
#define VRING_DESC_F_INDIRECT 4
#define VRING_AVAIL_F_NO_INTERRUPT 1

#define DESC_SIZE 16

/* Byte offsets inside the rings (virtio 1.2 §2.7.5-2.7.8). */
#define AVAIL_FLAGS 0
#define AVAIL_IDX 2
#define AVAIL_RING 4
#define USED_IDX 2
#define USED_RING 4
#define USED_ELEM 8

struct virtqueue_desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags;
	uint16_t next;
};

/* Ring fields are read with single atomic loads so that a guest rewriting
 * them concurrently can at worst give us a stale or odd value, never a torn
 * one; virtqueue_activate checked the alignment that makes the casts valid. */
static uint16_t ld16(const uint8_t *p)
{
	return le16toh(__atomic_load_n((const uint16_t *)p, __ATOMIC_RELAXED));
}

static void st16(uint8_t *p, uint16_t v)
{
	__atomic_store_n((uint16_t *)p, htole16(v), __ATOMIC_RELAXED);
}

static void st32(uint8_t *p, uint32_t v)
{
	__atomic_store_n((uint32_t *)p, htole32(v), __ATOMIC_RELAXED);
}

/* One copy of a descriptor, so each field is fetched exactly once. */
static struct virtqueue_desc ld_desc(const uint8_t *p)
{
	uint8_t raw[DESC_SIZE];
	struct virtqueue_desc d;
	uint64_t a;
	uint32_t l;
	uint16_t f, n;

	memcpy(raw, p, sizeof raw);
	memcpy(&a, raw, 8);
	memcpy(&l, raw + 8, 4);
	memcpy(&f, raw + 12, 2);
	memcpy(&n, raw + 14, 2);
	d.addr = le64toh(a);
	d.len = le32toh(l);
	d.flags = le16toh(f);
	d.next = le16toh(n);
	return d;
}

static uint16_t pow2_floor(uint16_t v)
{
	uint16_t p = 1;
	while (v && p <= v / 2)
		p *= 2;
	return v ? p : 0;
}

void virtqueue_init(struct virtqueue *vq, uint16_t max_size)
{
	memset(vq, 0, sizeof *vq);
	if (max_size > VIRTQUEUE_MAX_SIZE)
		max_size = VIRTQUEUE_MAX_SIZE;
	vq->max_size = pow2_floor(max_size);
	vq->size = vq->max_size;
}

void virtqueue_reset(struct virtqueue *vq)
{
	virtqueue_init(vq, vq->max_size);
}

static uint8_t *map_ring(const struct guest_mem *gm, uint64_t gpa, uint64_t len,
			 uint64_t align)
{
	if (gpa & (align - 1))
		return NULL;
	uint8_t *p = guest_mem_ptr(gm, gpa, len);
	if (p == NULL || ((uintptr_t)p & (align - 1)))
		return NULL;
	return p;
}

int virtqueue_activate(struct virtqueue *vq, const struct guest_mem *gm, uint64_t features)
{
	uint64_t n = vq->size;

	vq->ready = false;
	if (n == 0 || n > vq->max_size || (n & (n - 1)))
		return -EINVAL;
	/* Both event fields are part of the layout whether or not the
	 * feature is negotiated, so they are always checked. */
	uint8_t *desc = map_ring(gm, vq->desc_gpa, DESC_SIZE * n, 16);
	uint8_t *avail = map_ring(gm, vq->avail_gpa, AVAIL_RING + 2 * n + 2, 2);
	uint8_t *used = map_ring(gm, vq->used_gpa, USED_RING + USED_ELEM * n + 2, 4);
	if (!desc || !avail || !used)
		return -EINVAL;
	vq->gm = gm;
	vq->desc = desc;
	vq->avail = avail;
	vq->used = used;
	vq->event_idx = features & (1ull << VIRTIO_F_EVENT_IDX);
	vq->indirect = features & (1ull << VIRTIO_F_INDIRECT_DESC);
	vq->last_avail = 0;
	vq->used_idx = 0;
	vq->signalled_used = 0;
	vq->broken = false;
	vq->ready = true;
	return 0;
}

static int virtqueue_break(struct virtqueue *vq, int err)
{
	vq->broken = true;
	vq->ready = false;
	return err;
}

static int add_seg(struct virtqueue *vq, struct virtqueue_chain *c, const struct virtqueue_desc *d,
		   uint64_t *total)
{
	if (d->len == 0)
		return 0;
	uint8_t *p = guest_mem_ptr(vq->gm, d->addr, d->len);
	if (p == NULL)
		return -EFAULT;
	bool write = d->flags & VRING_DESC_F_WRITE;
	if (!write && c->nr > c->nr_read)
		return -EINVAL;
	if (c->nr == VIRTQUEUE_MAX_SEGS)
		return -E2BIG;
	*total += d->len;
	if (*total > UINT32_MAX)
		return -E2BIG;
	c->seg[c->nr++] = (struct virtqueue_seg){ .ptr = p, .len = d->len, .write = write };
	if (write)
		c->write_len += d->len;
	else {
		c->nr_read++;
		c->read_len += d->len;
	}
	return 0;
}

/* Walk the chain from head.  The time-to-live is the table size: a chain
 * can visit each descriptor at most once, so anything longer is a loop. */
static int walk(struct virtqueue *vq, uint16_t head, struct virtqueue_chain *c)
{
	const uint8_t *table = vq->desc;
	uint32_t table_size = vq->size;
	uint32_t ttl = vq->size;
	uint32_t idx = head;
	bool nested = false;
	uint64_t total = 0;

	c->head = head;
	c->nr = c->nr_read = 0;
	c->read_len = c->write_len = 0;
	for (;;) {
		if (ttl-- == 0)
			return -ELOOP;
		struct virtqueue_desc d = ld_desc(table + (size_t)DESC_SIZE * idx);
		if (d.flags & VRING_DESC_F_INDIRECT) {
			if (!vq->indirect || nested || (d.flags & VRING_DESC_F_NEXT))
				return -EINVAL;
			if (d.len == 0 || d.len % DESC_SIZE ||
			    d.len / DESC_SIZE > VIRTQUEUE_MAX_INDIRECT)
				return -EINVAL;
			table = guest_mem_ptr(vq->gm, d.addr, d.len);
			if (table == NULL)
				return -EFAULT;
			table_size = d.len / DESC_SIZE;
			ttl = table_size;
			idx = 0;
			nested = true;
			continue;
		}
		int r = add_seg(vq, c, &d, &total);
		if (r < 0)
			return r;
		if (!(d.flags & VRING_DESC_F_NEXT))
			return 0;
		if (d.next >= table_size)
			return -EINVAL;
		idx = d.next;
	}
}

int virtqueue_pop(struct virtqueue *vq, struct virtqueue_chain *c)
{
	if (!vq->ready)
		return vq->broken ? -EIO : 0;

	uint16_t avail_idx = ld16(vq->avail + AVAIL_IDX);
	if (avail_idx == vq->last_avail) {
		if (!vq->event_idx)
			return 0;
		/* Ask for a kick at the next buffer, then look again: the
		 * driver may have added one before it could see our event. */
		st16(vq->used + USED_RING + USED_ELEM * vq->size, vq->last_avail);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		avail_idx = ld16(vq->avail + AVAIL_IDX);
		if (avail_idx == vq->last_avail)
			return 0;
	}
	/* Ring entries and descriptors must be read after the index. */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if ((uint16_t)(avail_idx - vq->last_avail) > vq->size)
		return virtqueue_break(vq, -EINVAL);

	uint16_t slot = vq->last_avail & (vq->size - 1);
	uint16_t head = ld16(vq->avail + AVAIL_RING + 2 * slot);
	if (head >= vq->size)
		return virtqueue_break(vq, -EINVAL);
	int r = walk(vq, head, c);
	if (r < 0)
		return virtqueue_break(vq, r);
	vq->last_avail++;
	return 1;
}

int virtqueue_push(struct virtqueue *vq, uint16_t head, uint32_t written)
{
	if (!vq->ready)
		return -EIO;
	if (head >= vq->size)
		return -EINVAL;
	uint8_t *e = vq->used + USED_RING + USED_ELEM * (vq->used_idx & (vq->size - 1));
	st32(e, head);
	st32(e + 4, written);
	/* The element must be visible before the index that publishes it. */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	vq->used_idx++;
	st16(vq->used + USED_IDX, vq->used_idx);
	return 0;
}

bool virtqueue_needs_interrupt(struct virtqueue *vq)
{
	if (!vq->ready)
		return false;
	/* Our used.idx store must be ordered before reading the driver's
	 * suppression fields, or both sides could miss each other. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	uint16_t old = vq->signalled_used, now = vq->used_idx;
	vq->signalled_used = now;
	if (old == now)
		return false;
	if (vq->event_idx) {
		uint16_t ev = ld16(vq->avail + AVAIL_RING + 2 * vq->size);
		return (uint16_t)(now - ev - 1) < (uint16_t)(now - old);
	}
	return !(ld16(vq->avail + AVAIL_FLAGS) & VRING_AVAIL_F_NO_INTERRUPT);
}

void virtqueue_dev_used(struct virtqueue_dev *d, unsigned q)
{
	if (q < d->nr_queues && virtqueue_needs_interrupt(&d->vqs[q]) && d->signal)
		d->signal(d, VIRTQUEUE_SIGNAL_USED);
}

void virtqueue_dev_fail(struct virtqueue_dev *d)
{
	d->live = false;
	if (d->signal)
		d->signal(d, VIRTQUEUE_SIGNAL_ERROR);
}

void virtqueue_dev_config_changed(struct virtqueue_dev *d)
{
	if (d->signal)
		d->signal(d, VIRTQUEUE_SIGNAL_CONFIG);
}
