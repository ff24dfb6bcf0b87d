/* Input: a 16-byte queue state, then guest RAM contents.  The queue is
 * activated over that RAM and drained; every chain it yields must lie in
 * RAM and respect the segment rules, and draining must end. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtqueue.h"
#include "tests/lib/fake_virtio.h"

#define RAM 0x4000u

static void check_chain(const struct virtqueue_chain *c, const uint8_t *ram)
{
	uint64_t rl = 0, wl = 0;
	if (c->nr > VIRTQUEUE_MAX_SEGS || c->nr_read > c->nr)
		abort();
	for (unsigned i = 0; i < c->nr; i++) {
		const struct virtqueue_seg *s = &c->seg[i];
		if (s->len == 0 || s->ptr < ram || s->ptr + s->len > ram + RAM)
			abort();
		if (s->write != (i >= c->nr_read))
			abort();
		*(s->write ? &wl : &rl) += s->len;
	}
	if (rl != c->read_len || wl != c->write_len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 16)
		return 0;
	struct fv_driver drv;
	struct virtqueue q;

	if (fv_init(&drv, 0x1000, RAM) < 0)
		abort();
	memcpy(drv.ram, data + 16, size - 16 < RAM ? size - 16 : RAM);

	virtqueue_init(&q, fv_le16(data));
	q.size = fv_le16(data + 2);
	/* Mostly inside RAM, sometimes anywhere. */
	q.desc_gpa = data[4] & 0x80 ? fv_le16(data + 5) * 0x101ull
				    : 0x1000 + fv_le16(data + 5) % RAM;
	q.avail_gpa = 0x1000 + fv_le16(data + 7) % RAM;
	q.used_gpa = 0x1000 + fv_le16(data + 9) % RAM;
	uint64_t feat = (uint64_t)(data[4] & 3) << VIRTIO_F_INDIRECT_DESC;
	if (virtqueue_activate(&q, &drv.gm, feat) == 0) {
		q.last_avail = q.used_idx = q.signalled_used = fv_le16(data + 11);
		struct virtqueue_chain c;
		int r = 0;
		unsigned n = 0;
		/* Our own used-ring and buffer writes may land on the avail
		 * ring (the guest chose overlapping addresses), like a guest
		 * racing us; the bound stands in for the guest's patience. */
		while (n < 4u * q.size + 4 && (r = virtqueue_pop(&q, &c)) > 0) {
			check_chain(&c, drv.ram);
			if (c.nr && c.seg[c.nr - 1].len)
				memset(c.seg[c.nr - 1].ptr, 0xee, c.seg[c.nr - 1].len);
			if (virtqueue_push(&q, c.head, c.write_len) < 0)
				abort();
			if (++n % 4 == 0)
				virtqueue_needs_interrupt(&q);
		}
		if (r < 0 && (!q.broken || virtqueue_pop(&q, &c) != -EIO))
			abort();
		virtqueue_needs_interrupt(&q);
	}
	fv_free(&drv);
	return 0;
}
