/* libFuzzer target for virtio_mmio_state_load: a 2-queue device's saved
 * transport state from any bytes (the first 32 KiB of guest RAM follow
 * it).  Accepted or not, the transport must be consistent afterwards:
 * refused means reset; accepted means every ready queue's rings lie in
 * RAM, and a driver kicking every queue and touching every register
 * cannot make the device misbehave. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio_mmio_state.h"
#include "tests/lib/fake_virtio.h"

#define RAM 0x8000u

static void check(int ok)
{
	if (!ok)
		abort();
}

static int f_notify(struct virtqueue_dev *d, unsigned q)
{
	static struct virtqueue_chain c;
	int r, n = 0;
	while (n++ < 4 * VIRTQUEUE_MAX_SIZE && (r = virtqueue_pop(&d->vqs[q], &c)) > 0) {
		for (unsigned i = 0; i < c.nr; i++)
			if (c.seg[i].write)
				memset(c.seg[i].ptr, 0x5a, c.seg[i].len);
		virtqueue_push(&d->vqs[q], c.head, c.write_len);
	}
	virtqueue_dev_used(d, q);
	return 0;
}

static const struct virtqueue_dev_ops ops = { .notify = f_notify };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t slen = virtio_mmio_state_len(2);
	if (size < slen)
		return 0;
	struct fv_driver drv;
	struct virtqueue_dev dev;
	struct virtqueue vqs[2];
	struct virtio_mmio t;
	check(fv_init(&drv, 0, RAM) == 0);
	memcpy(drv.ram, data + slen, size - slen < RAM ? size - slen : RAM);
	dev = (struct virtqueue_dev){ .ops = &ops, .device_id = 19, .nr_queues = 2, .vqs = vqs,
			       .features = 1ull << VIRTIO_F_EVENT_IDX |
					   1ull << VIRTIO_F_INDIRECT_DESC };
	virtqueue_init(&vqs[0], 64);
	virtqueue_init(&vqs[1], 16);
	check(virtio_mmio_init(&t, &dev, &drv.gm, NULL) == 0);
	char err[256] = "";
	int rc = virtio_mmio_state_load(&t, data, slen, err, sizeof err);
	if (rc < 0) {
		check(rc == -EINVAL && err[0] && t.status == 0 && !dev.live && !vqs[0].ready &&
		      !vqs[1].ready && dev.driver_features == 0);
	} else {
		for (unsigned q = 0; q < 2; q++) {
			check(!(vqs[q].ready && vqs[q].broken));
			if (vqs[q].ready)
				check(guest_mem_ptr(&drv.gm, vqs[q].used_gpa, 4) != NULL &&
				      vqs[q].size <= vqs[q].max_size);
		}
		check(dev.live == ((t.status & VIRTIO_STATUS_DRIVER_OK) &&
				   !(t.status & (VIRTIO_STATUS_NEEDS_RESET | VIRTIO_STATUS_FAILED))));
		drv.mmio = &t;
		for (unsigned q = 0; q < 3; q++)
			fv_kick(&drv, q);
		for (uint32_t off = 0; off < 0x100; off += 4)
			(void)fv_rd(&drv, off);
		struct statebuf_writer w;
		statebuf_init(&w);
		check(virtio_mmio_state_save(&t, &w) == 0 && w.len == slen);
		statebuf_free(&w);
	}
	fv_free(&drv);
	return 0;
}
