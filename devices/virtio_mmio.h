/* The virtio-mmio transport, modern register layout (virtio 1.2 §4.2.2,
 * Version 2).  It owns the register file of one 4 KiB window and drives a
 * struct virtqueue_dev; it knows nothing about KVM: MMIO accesses come in through
 * virtio_mmio_read/virtio_mmio_write and the interrupt goes out through an irq_sink.
 *
 * Not thread-safe: the VMM serializes every call that reaches one device
 * (MMIO exits, queue notifies, backend polling), e.g. under one lock. */
#ifndef KBOX_VIRTIO_MMIO_H
#define KBOX_VIRTIO_MMIO_H

#include <stdint.h>

#include "devices/irq_sink.h"
#include "devices/virtqueue.h"

#define VIRTIO_MMIO_WINDOW 0x1000
#define VIRTIO_MMIO_CONFIG 0x100 /* device config space starts here */
#define VIRTIO_MMIO_QUEUE_NOTIFY 0x050 /* register offset, for an ioeventfd */

#define VIRTIO_MMIO_INT_USED 1u
#define VIRTIO_MMIO_INT_CONFIG 2u

#define VIRTIO_STATUS_ACKNOWLEDGE 1u
#define VIRTIO_STATUS_DRIVER 2u
#define VIRTIO_STATUS_DRIVER_OK 4u
#define VIRTIO_STATUS_FEATURES_OK 8u
#define VIRTIO_STATUS_NEEDS_RESET 0x40u
#define VIRTIO_STATUS_FAILED 0x80u

struct virtio_mmio {
	struct virtqueue_dev *dev;
	struct irq_sink *irq;
	uint32_t status;
	uint32_t int_status;
	uint32_t config_gen;
	uint32_t dev_feat_sel, drv_feat_sel;
	uint64_t drv_features;
	uint32_t queue_sel;
	uint32_t shm_sel;
};

/* Bind dev to a fresh transport t that reads guest RAM through gm and
 * interrupts through irq (either may be shared with other devices; irq may
 * be NULL).  dev must have ops->notify, nr_queues ≥ 1 and its queues
 * virtqueue_init'ed.  Returns 0 or -EINVAL. */
int virtio_mmio_init(struct virtio_mmio *t, struct virtqueue_dev *dev, const struct guest_mem *gm,
	       struct irq_sink *irq);

/* A guest read of len bytes at offset off in the window.  Registers take
 * only aligned 4-byte reads and config space 1, 2, 4 or 8 bytes inside it;
 * anything else reads as zeros.  data always gets len bytes (len ≤ 8, or
 * nothing is written). */
void virtio_mmio_read(struct virtio_mmio *t, uint64_t off, void *data, uint32_t len);

/* A guest write; malformed, misaligned or out-of-order writes are ignored
 * as the spec allows, never fatal. */
void virtio_mmio_write(struct virtio_mmio *t, uint64_t off, const void *data, uint32_t len);

/* Deliver a queue kick that bypassed virtio_mmio_write (an ioeventfd on
 * QueueNotify carrying queue index q).  Ignored unless the device is live
 * and queue q is ready. */
void virtio_mmio_notify(struct virtio_mmio *t, uint32_t q);

#endif
