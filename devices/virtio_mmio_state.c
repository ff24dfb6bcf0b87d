#include "devices/virtio_mmio_state.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "lib/errbuf.h"

#define HDR_LEN   64u
#define QUEUE_LEN 36u
#define USED_IDX  2u

#define KNOWN_STATUS                                                                       \
	(VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_DRIVER_OK |      \
	 VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_NEEDS_RESET | VIRTIO_STATUS_FAILED)

size_t virtio_mmio_state_len(unsigned nr_queues) { return HDR_LEN + (size_t)nr_queues * QUEUE_LEN; }

int virtio_mmio_state_save(const struct virtio_mmio *t, struct statebuf_writer *w)
{
	const struct virtqueue_dev *d = t->dev;
	size_t start = w->len;
	statebuf_u32(w, VIRTIO_MMIO_STATE_MAGIC);
	statebuf_u16(w, VIRTIO_MMIO_STATE_VERSION);
	statebuf_u16(w, (uint16_t)d->nr_queues);
	statebuf_u32(w, d->device_id);
	statebuf_u32(w, t->status);
	statebuf_u32(w, t->int_status);
	statebuf_u32(w, t->config_gen);
	statebuf_u32(w, t->dev_feat_sel);
	statebuf_u32(w, t->drv_feat_sel);
	statebuf_u32(w, t->queue_sel);
	statebuf_u32(w, t->shm_sel);
	statebuf_u64(w, t->drv_features);
	statebuf_u64(w, d->driver_features);
	statebuf_u64(w, d->live ? 1 : 0);
	for (unsigned i = 0; i < d->nr_queues; i++) {
		const struct virtqueue *q = &d->vqs[i];
		statebuf_u16(w, q->max_size);
		statebuf_u16(w, q->size);
		statebuf_u16(w, q->last_avail);
		statebuf_u16(w, q->used_idx);
		statebuf_u16(w, q->signalled_used);
		statebuf_put(w, (const uint8_t[]){ q->ready, q->broken }, 2);
		statebuf_u64(w, q->desc_gpa);
		statebuf_u64(w, q->avail_gpa);
		statebuf_u64(w, q->used_gpa);
	}
	if (!w->err && w->len - start != virtio_mmio_state_len(d->nr_queues))
		w->err = -EINVAL;
	return w->err;
}

struct saved_queue {
	uint16_t max_size, size, last_avail, used_idx, signalled_used;
	uint8_t ready, broken;
	uint64_t desc, avail, used;
};

static uint64_t offered(const struct virtio_mmio *t)
{
	return t->dev->features | (1ull << VIRTIO_F_VERSION_1);
}

/* The whole transport back to its state after virtio_mmio_init. */
static void reset_all(struct virtio_mmio *t)
{
	struct virtqueue_dev *d = t->dev;
	for (unsigned i = 0; i < d->nr_queues; i++)
		virtqueue_reset(&d->vqs[i]);
	d->driver_features = 0;
	d->live = false;
	struct irq_sink *irq = t->irq;
	memset(t, 0, sizeof *t);
	t->dev = d;
	t->irq = irq;
}

static int check_header(const struct virtio_mmio *t, struct statebuf_reader *r, struct virtio_mmio *nt,
			uint64_t *accepted, bool *live, char *err, size_t errlen)
{
	const struct virtqueue_dev *d = t->dev;
	uint32_t magic = statebuf_get_u32(r);
	uint16_t ver = statebuf_get_u16(r), nq = statebuf_get_u16(r);
	uint32_t id = statebuf_get_u32(r);
	if (magic != VIRTIO_MMIO_STATE_MAGIC || ver != VIRTIO_MMIO_STATE_VERSION)
		return errbuf_fail(err, errlen, -EINVAL, "virtio-mmio state: not version %u",
			       VIRTIO_MMIO_STATE_VERSION);
	if (id != d->device_id || nq != d->nr_queues)
		return errbuf_fail(err, errlen, -EINVAL,
			       "virtio-mmio state of device %u with %u queues, this is device %u "
			       "with %u", id, nq, d->device_id, d->nr_queues);
	nt->status = statebuf_get_u32(r);
	nt->int_status = statebuf_get_u32(r);
	nt->config_gen = statebuf_get_u32(r);
	nt->dev_feat_sel = statebuf_get_u32(r);
	nt->drv_feat_sel = statebuf_get_u32(r);
	nt->queue_sel = statebuf_get_u32(r);
	nt->shm_sel = statebuf_get_u32(r);
	nt->drv_features = statebuf_get_u64(r);
	*accepted = statebuf_get_u64(r);
	uint64_t l = statebuf_get_u64(r);
	uint32_t s = nt->status;
	if (s & ~KNOWN_STATUS)
		return errbuf_fail(err, errlen, -EINVAL, "virtio-mmio state: unknown status bits 0x%x",
			       s);
	if (((s & VIRTIO_STATUS_FEATURES_OK) && !(s & VIRTIO_STATUS_DRIVER)) ||
	    ((s & VIRTIO_STATUS_DRIVER_OK) && !(s & VIRTIO_STATUS_FEATURES_OK)))
		return errbuf_fail(err, errlen, -EINVAL,
			       "virtio-mmio state: status 0x%x no driver could reach", s);
	if (s & VIRTIO_STATUS_FEATURES_OK) {
		if (*accepted != nt->drv_features || (*accepted & ~offered(t)) ||
		    !(*accepted & (1ull << VIRTIO_F_VERSION_1)))
			return errbuf_fail(err, errlen, -EINVAL,
				       "virtio-mmio state: accepted features 0x%llx not offered "
				       "or not the driver's", (unsigned long long)*accepted);
	} else if (*accepted) {
		return errbuf_fail(err, errlen, -EINVAL,
			       "virtio-mmio state: features accepted without FEATURES_OK");
	}
	bool want_live = (s & VIRTIO_STATUS_DRIVER_OK) &&
			 !(s & (VIRTIO_STATUS_NEEDS_RESET | VIRTIO_STATUS_FAILED));
	if (l > 1 || (l == 1) != want_live)
		return errbuf_fail(err, errlen, -EINVAL,
			       "virtio-mmio state: 'live' does not follow from status 0x%x", s);
	*live = l == 1;
	if (nt->int_status & ~(VIRTIO_MMIO_INT_USED | VIRTIO_MMIO_INT_CONFIG))
		return errbuf_fail(err, errlen, -EINVAL, "virtio-mmio state: unknown interrupt bits");
	return 0;
}

int virtio_mmio_state_load(struct virtio_mmio *t, const uint8_t *blob, size_t len, char *err,
		     size_t errlen)
{
	struct virtqueue_dev *d = t->dev;
	if (d->nr_queues > VIRTQUEUE_MAX_SIZE || len != virtio_mmio_state_len(d->nr_queues)) {
		reset_all(t);
		return errbuf_fail(err, errlen, -EINVAL, "virtio-mmio state is %zu bytes, want %zu", len,
			       virtio_mmio_state_len(d->nr_queues));
	}
	struct statebuf_reader r;
	statebuf_reader_init(&r, blob, len);
	struct virtio_mmio nt = { 0 };
	uint64_t accepted = 0;
	bool live = false;
	int rc = check_header(t, &r, &nt, &accepted, &live, err, errlen);
	if (rc < 0) {
		reset_all(t);
		return rc;
	}
	/* Queues: all checked before the first is touched. */
	for (unsigned pass = 0; pass < 2; pass++) {
		statebuf_reader_init(&r, blob + HDR_LEN, len - HDR_LEN);
		for (unsigned i = 0; i < d->nr_queues; i++) {
			struct saved_queue q;
			q.max_size = statebuf_get_u16(&r);
			q.size = statebuf_get_u16(&r);
			q.last_avail = statebuf_get_u16(&r);
			q.used_idx = statebuf_get_u16(&r);
			q.signalled_used = statebuf_get_u16(&r);
			uint8_t flags[2];
			statebuf_get(&r, flags, 2);
			q.ready = flags[0];
			q.broken = flags[1];
			q.desc = statebuf_get_u64(&r);
			q.avail = statebuf_get_u64(&r);
			q.used = statebuf_get_u64(&r);
			if (pass == 0) {
				const char *why = NULL;
				if (q.max_size != d->vqs[i].max_size)
					why = "a maximum size not the device's";
				else if (q.ready > 1 || q.broken > 1 || (q.ready && q.broken))
					why = "bad ready/broken flags";
				else if (q.ready && !(nt.status & VIRTIO_STATUS_FEATURES_OK))
					why = "ready before FEATURES_OK";
				else if (!q.ready && !q.broken &&
					 (q.last_avail || q.used_idx || q.signalled_used))
					why = "ring indexes on a queue that is off";
				if (why) {
					reset_all(t);
					return errbuf_fail(err, errlen, -EINVAL,
						       "virtio-mmio state: queue %u: %s", i, why);
				}
				continue;
			}
			struct virtqueue *vq = &d->vqs[i];
			virtqueue_reset(vq);
			vq->size = q.size;
			vq->desc_gpa = q.desc;
			vq->avail_gpa = q.avail;
			vq->used_gpa = q.used;
			if (q.ready) {
				uint8_t idx[2] = { 0, 0 };
				if (virtqueue_activate(vq, d->gm, accepted) < 0 ||
				    guest_mem_read(d->gm, idx, q.used + USED_IDX, 2) < 0 ||
				    (uint16_t)(idx[0] | idx[1] << 8) != q.used_idx) {
					reset_all(t);
					return errbuf_fail(err, errlen, -EINVAL,
						       "virtio-mmio state: queue %u does not fit "
						       "guest memory (rings outside RAM, or its used "
						       "index not the one saved)", i);
				}
			}
			vq->last_avail = q.last_avail;
			vq->used_idx = q.used_idx;
			vq->signalled_used = q.signalled_used;
			vq->broken = q.broken;
		}
	}
	nt.dev = t->dev;
	nt.irq = t->irq;
	*t = nt;
	d->driver_features = accepted;
	d->live = live;
	if (t->int_status)
		irq_sink_raise(t->irq);
	return 0;
}
