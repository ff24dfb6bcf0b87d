#include "devices/virtio_mmio.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#define VIRTIO_MMIO_MAGIC 0x74726976u   /* "virt" */
#define VIRTIO_MMIO_VERSION_VALUE 2u
#define VIRTIO_MMIO_VENDOR 0x786f626bu  /* "kbox" */

enum {
	R_MAGIC = 0x000,
	R_VERSION = 0x004,
	R_DEVICE_ID = 0x008,
	R_VENDOR_ID = 0x00c,
	R_DEV_FEATURES = 0x010,
	R_DEV_FEATURES_SEL = 0x014,
	R_DRV_FEATURES = 0x020,
	R_DRV_FEATURES_SEL = 0x024,
	R_QUEUE_SEL = 0x030,
	R_QUEUE_NUM_MAX = 0x034,
	R_QUEUE_NUM = 0x038,
	R_QUEUE_READY = 0x044,
	R_QUEUE_NOTIFY = 0x050,
	R_INT_STATUS = 0x060,
	R_INT_ACK = 0x064,
	R_STATUS = 0x070,
	R_QUEUE_DESC_LO = 0x080,
	R_QUEUE_DESC_HI = 0x084,
	R_QUEUE_DRIVER_LO = 0x090,
	R_QUEUE_DRIVER_HI = 0x094,
	R_QUEUE_DEVICE_LO = 0x0a0,
	R_QUEUE_DEVICE_HI = 0x0a4,
	R_SHM_SEL = 0x0ac,
	R_SHM_LEN_LO = 0x0b0,
	R_SHM_LEN_HI = 0x0b4,
	R_SHM_BASE_LO = 0x0b8,
	R_SHM_BASE_HI = 0x0bc,
	R_CONFIG_GEN = 0x0fc,
};

static uint64_t offered(const struct virtio_mmio *t)
{
	return t->dev->features | (1ull << VIRTIO_F_VERSION_1);
}

static void raise_int(struct virtio_mmio *t, uint32_t bit)
{
	t->int_status |= bit;
	irq_sink_raise(t->irq);
}

static void on_signal(struct virtqueue_dev *d, enum virtqueue_signal why)
{
	struct virtio_mmio *t = d->transport;

	switch (why) {
	case VIRTQUEUE_SIGNAL_USED:
		if (d->live)
			raise_int(t, VIRTIO_MMIO_INT_USED);
		break;
	case VIRTQUEUE_SIGNAL_CONFIG:
		t->config_gen++;
		raise_int(t, VIRTIO_MMIO_INT_CONFIG);
		break;
	case VIRTQUEUE_SIGNAL_ERROR:
		d->live = false;
		if (t->status & VIRTIO_STATUS_NEEDS_RESET)
			break;
		t->status |= VIRTIO_STATUS_NEEDS_RESET;
		raise_int(t, VIRTIO_MMIO_INT_CONFIG);
		break;
	}
}

int virtio_mmio_init(struct virtio_mmio *t, struct virtqueue_dev *dev, const struct guest_mem *gm,
	       struct irq_sink *irq)
{
	if (!dev || !dev->ops || !dev->ops->notify || !dev->vqs || dev->nr_queues == 0 ||
	    dev->config_size > VIRTIO_MMIO_WINDOW - VIRTIO_MMIO_CONFIG)
		return -EINVAL;
	memset(t, 0, sizeof *t);
	t->dev = dev;
	t->irq = irq;
	dev->gm = gm;
	dev->transport = t;
	dev->signal = on_signal;
	dev->driver_features = 0;
	dev->live = false;
	return 0;
}

static void reset(struct virtio_mmio *t)
{
	struct virtqueue_dev *d = t->dev;

	d->live = false;
	if (d->ops->reset)
		d->ops->reset(d);
	for (unsigned i = 0; i < d->nr_queues; i++)
		virtqueue_reset(&d->vqs[i]);
	d->driver_features = 0;
	t->status = 0;
	t->int_status = 0;
	t->dev_feat_sel = t->drv_feat_sel = 0;
	t->drv_features = 0;
	t->queue_sel = 0;
	t->shm_sel = 0;
	irq_sink_lower(t->irq);
}

/* The selected queue, or NULL if there is none. */
static struct virtqueue *sel_queue(struct virtio_mmio *t)
{
	return t->queue_sel < t->dev->nr_queues ? &t->dev->vqs[t->queue_sel] : NULL;
}

/* Queue registers only change while the queue is off (§4.2.2.3). */
static struct virtqueue *writable_queue(struct virtio_mmio *t)
{
	struct virtqueue *vq = sel_queue(t);
	return vq && !vq->ready ? vq : NULL;
}

static uint32_t read_reg(struct virtio_mmio *t, uint32_t off)
{
	struct virtqueue *vq = sel_queue(t);

	switch (off) {
	case R_MAGIC:
		return VIRTIO_MMIO_MAGIC;
	case R_VERSION:
		return VIRTIO_MMIO_VERSION_VALUE;
	case R_DEVICE_ID:
		return t->dev->device_id;
	case R_VENDOR_ID:
		return VIRTIO_MMIO_VENDOR;
	case R_DEV_FEATURES:
		if (t->dev_feat_sel > 1)
			return 0;
		return (uint32_t)(offered(t) >> (32 * t->dev_feat_sel));
	case R_QUEUE_NUM_MAX:
		return vq ? vq->max_size : 0;
	case R_QUEUE_READY:
		return vq ? vq->ready : 0;
	case R_INT_STATUS:
		return t->int_status;
	case R_STATUS:
		return t->status;
	case R_SHM_LEN_LO:
	case R_SHM_LEN_HI:
	case R_SHM_BASE_LO:
	case R_SHM_BASE_HI:
		return 0xffffffffu; /* no shared memory regions */
	case R_CONFIG_GEN:
		return t->config_gen;
	default:
		return 0;
	}
}

static void set_half(uint64_t *v, int high, uint32_t val)
{
	if (high)
		*v = (*v & 0xffffffffull) | (uint64_t)val << 32;
	else
		*v = (*v & ~0xffffffffull) | val;
}

static void write_status(struct virtio_mmio *t, uint32_t v)
{
	struct virtqueue_dev *d = t->dev;
	uint32_t old = t->status & ~VIRTIO_STATUS_NEEDS_RESET;

	if (v == 0) {
		reset(t);
		return;
	}
	v &= 0xff & ~VIRTIO_STATUS_NEEDS_RESET;
	if ((v & old) != old)
		return; /* the driver may not clear bits except by reset */
	uint32_t added = v & ~old;
	if (added & VIRTIO_STATUS_FEATURES_OK) {
		bool ok = (v & VIRTIO_STATUS_DRIVER) &&
			  !(t->drv_features & ~offered(t)) &&
			  (t->drv_features & (1ull << VIRTIO_F_VERSION_1));
		if (ok)
			d->driver_features = t->drv_features;
		else
			v &= ~VIRTIO_STATUS_FEATURES_OK;
	}
	if ((added & VIRTIO_STATUS_DRIVER_OK) && !(v & VIRTIO_STATUS_FEATURES_OK))
		v &= ~VIRTIO_STATUS_DRIVER_OK;
	t->status = v | (t->status & VIRTIO_STATUS_NEEDS_RESET);
	if ((v & VIRTIO_STATUS_DRIVER_OK) && (added & VIRTIO_STATUS_DRIVER_OK) &&
	    !(t->status & VIRTIO_STATUS_NEEDS_RESET) && !(v & VIRTIO_STATUS_FAILED)) {
		d->live = true;
		if (d->ops->activate)
			d->ops->activate(d);
	}
	if (v & VIRTIO_STATUS_FAILED)
		d->live = false;
}

static void write_queue_ready(struct virtio_mmio *t, uint32_t v)
{
	struct virtqueue *vq = sel_queue(t);

	if (!vq)
		return;
	if (v == 0) {
		virtqueue_reset(vq);
		return;
	}
	if (v != 1 || vq->ready || !(t->status & VIRTIO_STATUS_FEATURES_OK))
		return;
	if (virtqueue_activate(vq, t->dev->gm, t->dev->driver_features) < 0)
		virtqueue_dev_fail(t->dev);
}

static void write_reg(struct virtio_mmio *t, uint32_t off, uint32_t v)
{
	struct virtqueue *vq = writable_queue(t);

	switch (off) {
	case R_DEV_FEATURES_SEL:
		t->dev_feat_sel = v;
		break;
	case R_DRV_FEATURES:
		if ((t->status & VIRTIO_STATUS_DRIVER) &&
		    !(t->status & VIRTIO_STATUS_FEATURES_OK) && t->drv_feat_sel <= 1)
			set_half(&t->drv_features, t->drv_feat_sel, v);
		break;
	case R_DRV_FEATURES_SEL:
		t->drv_feat_sel = v;
		break;
	case R_QUEUE_SEL:
		t->queue_sel = v;
		break;
	case R_QUEUE_NUM:
		if (vq)
			vq->size = v <= 0xffff ? (uint16_t)v : 0;
		break;
	case R_QUEUE_READY:
		write_queue_ready(t, v);
		break;
	case R_QUEUE_NOTIFY:
		virtio_mmio_notify(t, v);
		break;
	case R_INT_ACK:
		t->int_status &= ~v;
		if (t->int_status == 0)
			irq_sink_lower(t->irq);
		break;
	case R_STATUS:
		write_status(t, v);
		break;
	case R_QUEUE_DESC_LO:
	case R_QUEUE_DESC_HI:
		if (vq)
			set_half(&vq->desc_gpa, off == R_QUEUE_DESC_HI, v);
		break;
	case R_QUEUE_DRIVER_LO:
	case R_QUEUE_DRIVER_HI:
		if (vq)
			set_half(&vq->avail_gpa, off == R_QUEUE_DRIVER_HI, v);
		break;
	case R_QUEUE_DEVICE_LO:
	case R_QUEUE_DEVICE_HI:
		if (vq)
			set_half(&vq->used_gpa, off == R_QUEUE_DEVICE_HI, v);
		break;
	case R_SHM_SEL:
		t->shm_sel = v;
		break;
	default:
		break;
	}
}

/* Config accesses must be a natural width and lie wholly in config space. */
static bool config_access_ok(const struct virtio_mmio *t, uint64_t off, uint32_t len)
{
	if (len != 1 && len != 2 && len != 4 && len != 8)
		return false;
	if (off < VIRTIO_MMIO_CONFIG)
		return false;
	uint64_t c = off - VIRTIO_MMIO_CONFIG;
	return c < t->dev->config_size && len <= t->dev->config_size - c;
}

void virtio_mmio_read(struct virtio_mmio *t, uint64_t off, void *data, uint32_t len)
{
	if (len > 8)
		return;
	memset(data, 0, len);
	if (off >= VIRTIO_MMIO_WINDOW)
		return;
	if (off >= VIRTIO_MMIO_CONFIG) {
		if (config_access_ok(t, off, len) && t->dev->ops->config_read)
			t->dev->ops->config_read(t->dev, (uint32_t)(off - VIRTIO_MMIO_CONFIG), data, len);
		return;
	}
	if (len != 4 || (off & 3))
		return;
	uint32_t v = htole32(read_reg(t, (uint32_t)off));
	memcpy(data, &v, 4);
}

void virtio_mmio_write(struct virtio_mmio *t, uint64_t off, const void *data, uint32_t len)
{
	if (len > 8 || off >= VIRTIO_MMIO_WINDOW)
		return;
	if (off >= VIRTIO_MMIO_CONFIG) {
		if (config_access_ok(t, off, len) && t->dev->ops->config_write)
			t->dev->ops->config_write(t->dev, (uint32_t)(off - VIRTIO_MMIO_CONFIG), data, len);
		return;
	}
	if (len != 4 || (off & 3))
		return;
	uint32_t v;
	memcpy(&v, data, 4);
	write_reg(t, (uint32_t)off, le32toh(v));
}

void virtio_mmio_notify(struct virtio_mmio *t, uint32_t q)
{
	struct virtqueue_dev *d = t->dev;

	if (!d->live || q >= d->nr_queues || !d->vqs[q].ready)
		return;
	if (d->ops->notify(d, q) < 0)
		virtqueue_dev_fail(d);
}
