/* Split virtqueues (virtio 1.2 §2.7) and the transport-neutral view of a
 * virtio device.  Every ring byte is guest-owned and may change under our
 * feet: indices and descriptors are read once into locals and checked there,
 * and nothing the guest writes can make us loop, overrun or crash — a broken
 * ring only ever yields a negative errno and a device that needs a reset. */
#ifndef KBOX_VIRTQUEUE_H
#define KBOX_VIRTQUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/guest_mem.h"

struct statebuf_writer;

/* Feature bits the ring code understands (virtio 1.2 §6). */
#define VIRTIO_F_INDIRECT_DESC 28
#define VIRTIO_F_EVENT_IDX 29
#define VIRTIO_F_VERSION_1 32

/* Largest queue any of our devices offers (the spec allows 32768). */
#define VIRTQUEUE_MAX_SIZE 1024
/* Segments one chain may yield; longer chains are an error rather than a
 * reason to allocate.  256 lets virtio-fs move ~1 MiB per request (the
 * Linux driver gives each data page its own segment); a chain costs 4 KiB
 * of segment table wherever it is popped. */
#define VIRTQUEUE_MAX_SEGS 256
/* Longest indirect table accepted (entries). */
#define VIRTQUEUE_MAX_INDIRECT 256

/* One guest buffer, already translated and bounds-checked. */
struct virtqueue_seg {
	uint8_t *ptr;  /* host pointer to len bytes of guest RAM */
	uint32_t len;  /* never 0 */
	bool write;    /* device-writable (true) or device-readable */
};

/* A popped descriptor chain: nr_read readable segments first, then the
 * writable ones, so a device can treat each side as one byte stream. */
struct virtqueue_chain {
	uint16_t head;       /* give back to virtqueue_push */
	unsigned nr;         /* segments in seg[] */
	unsigned nr_read;    /* seg[0..nr_read) are readable */
	uint32_t read_len;   /* total readable bytes */
	uint32_t write_len;  /* total writable bytes */
	struct virtqueue_seg seg[VIRTQUEUE_MAX_SEGS];
};

/* Queue state.  The transport fills size and the three ring addresses from
 * the driver's registers and then calls virtqueue_activate. */
struct virtqueue {
	uint16_t max_size;       /* device limit, a power of two */
	uint16_t size;           /* driver's choice, validated by virtqueue_activate */
	uint64_t desc_gpa, avail_gpa, used_gpa;
	bool ready;              /* activated and not broken */
	bool broken;             /* a guest error was seen; needs a reset */
	bool event_idx;          /* VIRTIO_F_EVENT_IDX negotiated */
	bool indirect;           /* VIRTIO_F_INDIRECT_DESC negotiated */
	const struct guest_mem *gm;
	uint8_t *desc, *avail, *used; /* host views, whole rings checked */
	uint16_t last_avail;     /* next avail ring slot we will read */
	uint16_t used_idx;       /* our copy of used.idx */
	uint16_t signalled_used; /* used.idx when virtqueue_needs_interrupt last ran */
};

/* Put vq in the reset state with the given limit (a power of two, at most
 * VIRTQUEUE_MAX_SIZE; larger or non-powers are rounded down).  Ring addresses are
 * cleared and size becomes max_size, as the transport reset requires. */
void virtqueue_init(struct virtqueue *vq, uint16_t max_size);

/* Reset the queue to its state after virtqueue_init, keeping max_size. */
void virtqueue_reset(struct virtqueue *vq);

/* Validate size and the rings set in vq and start using them: size must be
 * a power of two between 1 and max_size, the descriptor table 16-byte
 * aligned, the available ring 2-byte and the used ring 4-byte aligned, each
 * ring (event fields included) wholly inside one RAM region of gm.  features
 * are the negotiated bits (event index and indirect descriptors are read from
 * them).  Returns 0 or -EINVAL (the queue then stays not ready). */
int virtqueue_activate(struct virtqueue *vq, const struct guest_mem *gm, uint64_t features);

/* Take the next available chain.  Returns 1 and fills *c, 0 if the driver
 * has nothing new, or a negative errno if the ring or chain is malformed
 * (avail.idx too far ahead, head or next out of range, a loop, a buffer
 * outside RAM, a readable after a writable segment, nested or misshapen
 * indirect table, more than VIRTQUEUE_MAX_SEGS segments, total length over
 * UINT32_MAX); after an error the queue is broken and keeps returning -EIO
 * until virtqueue_reset.  Publishes avail_event when event index is in use. */
int virtqueue_pop(struct virtqueue *vq, struct virtqueue_chain *c);

/* Return chain head to the driver with written bytes put in its writable
 * buffers.  Returns 0, -EINVAL for a head outside the queue or -EIO if the
 * queue is not ready.  Does not interrupt: ask virtqueue_needs_interrupt. */
int virtqueue_push(struct virtqueue *vq, uint16_t head, uint32_t written);

/* Whether the driver wants an interrupt for the buffers pushed since the
 * previous call (used_event with event index, else the NO_INTERRUPT flag).
 * Call once after a batch of virtqueue_push. */
bool virtqueue_needs_interrupt(struct virtqueue *vq);

/* ---- A virtio device as any transport sees it. ---- */

struct virtqueue_dev;

/* Why a device signals its transport. */
enum virtqueue_signal {
	VIRTQUEUE_SIGNAL_USED,   /* buffers were used: used-buffer interrupt */
	VIRTQUEUE_SIGNAL_CONFIG, /* config space changed: config interrupt */
	VIRTQUEUE_SIGNAL_ERROR,  /* guest error: DEVICE_NEEDS_RESET + config irq */
};

/* What a device model implements.  All hooks are optional except notify.
 * Offsets given to config hooks are already inside [0, config_size) and
 * len is 1, 2, 4 or 8. */
struct virtqueue_dev_ops {
	void (*config_read)(struct virtqueue_dev *d, uint32_t off, void *data, uint32_t len);
	void (*config_write)(struct virtqueue_dev *d, uint32_t off, const void *data, uint32_t len);
	/* The driver kicked queue q (q < nr_queues, queue ready).  A negative
	 * return marks the device as needing a reset. */
	int (*notify)(struct virtqueue_dev *d, unsigned q);
	/* The driver set DRIVER_OK: queues are live. */
	void (*activate)(struct virtqueue_dev *d);
	/* The driver reset the device: drop all device state.  Queues are
	 * reset by the transport afterwards. */
	void (*reset)(struct virtqueue_dev *d);
	/* Snapshots (docs/snapshots.md); either may be NULL.  quiet: 0 when
	 * the device holds nothing beyond its transport's state that a VM
	 * started from the snapshot could not go on from (no connection,
	 * session or frame in flight), else -EBUSY with a line in err.
	 * restored: the transport's state was loaded into a fresh device
	 * (the driver may be live); derive from it what activate would. */
	int (*quiet)(struct virtqueue_dev *d, char *err, size_t errlen);
	void (*restored)(struct virtqueue_dev *d);
	/* Fork (kbox fork, docs/snapshots.md); either may be NULL.  A fork
	 * copies a running VM, so its devices need not be quiet: fork_save
	 * appends what a copy of the device needs beyond its transport's
	 * state (the connections the copy must reset, a FUSE session and
	 * its node table) to w, instead of quiet's check; -EBUSY with a
	 * line in err when it cannot be copied now (tried again), another
	 * negative errno when never.  fork_load gets exactly those bytes
	 * (hostile: a file another process wrote; never none: a blob
	 * without fork state, a template's, is not passed on) in a fresh
	 * device whose transport's state was just loaded, before restored;
	 * it checks every byte and takes them whole or refuses (0 or a
	 * negative errno with a line in err).  A device without fork_save
	 * must be quiet to be forked; one without fork_load takes no bytes. */
	int (*fork_save)(struct virtqueue_dev *d, struct statebuf_writer *w, char *err,
			 size_t errlen);
	int (*fork_load)(struct virtqueue_dev *d, const uint8_t *p, size_t len, char *err,
			 size_t errlen);
};

/* Embedded in each device model; the device fills the first block, the
 * transport the second. */
struct virtqueue_dev {
	const struct virtqueue_dev_ops *ops;
	uint32_t device_id;
	uint64_t features;        /* offered (VERSION_1 is added by transport) */
	uint32_t config_size;
	unsigned nr_queues;
	struct virtqueue *vqs;           /* nr_queues queues, virtqueue_init'ed by the device */

	const struct guest_mem *gm;
	uint64_t driver_features; /* valid once FEATURES_OK was accepted */
	bool live;                /* DRIVER_OK set and no reset needed */
	void (*signal)(struct virtqueue_dev *d, enum virtqueue_signal why);
	void *transport;
};

/* Tell the transport that queue q has new used buffers; interrupts only if
 * virtqueue_needs_interrupt agrees. */
void virtqueue_dev_used(struct virtqueue_dev *d, unsigned q);

/* Report a guest error: the device stops (live = false) and the transport
 * sets DEVICE_NEEDS_RESET.  Idempotent. */
void virtqueue_dev_fail(struct virtqueue_dev *d);

/* Tell the transport that config space changed. */
void virtqueue_dev_config_changed(struct virtqueue_dev *d);

#endif
