/* Virtio-mmio devices on the VM: a 4 KiB window each, queue notifies
 * through ioeventfds, interrupts through irqfds, and one device thread that
 * serves the notifies and any host file descriptors a device polls. */
#ifndef KBOX_VIRTIO_BUS_H
#define KBOX_VIRTIO_BUS_H

#include <poll.h>
#include <pthread.h>

#include "devices/irq_sink.h"
#include "devices/virtio_mmio.h"
#include "vmm/core/vm.h"

#define VIRTIO_BUS_BASE     0xd0000000ull
#define VIRTIO_BUS_FIRST_IRQ 5u
#define VIRTIO_BUS_MAX_DEVS 14u /* vsock, virtio-net, up to 8 virtio-fs mounts and 4 disks */
#define VIRTIO_BUS_MAX_QUEUES 4u
#define VIRTIO_BUS_MAX_POLL 160u

struct virtio_bus;

/* Host fds a device wants watched: fill up to max pollfds, then handle
 * the results.  Both run on the device thread with the bus lock held. */
struct virtio_bus_poller {
	unsigned (*fds)(void *ctx, struct pollfd *p, unsigned max);
	void (*handle)(void *ctx, const struct pollfd *p, unsigned n);
	void *ctx;
};

struct virtio_bus_slot {
	struct virtio_bus *bus;
	struct virtio_mmio t;
	struct irq_sink sink;
	int irqfd;
	int qfd[VIRTIO_BUS_MAX_QUEUES];
	unsigned nq;
	uint64_t base;
	unsigned irq;
	struct virtio_bus_poller poller;
};

struct virtio_bus {
	struct vm *vm;
	pthread_mutex_t lock; /* serialises every call into device code */
	struct virtio_bus_slot slot[VIRTIO_BUS_MAX_DEVS];
	unsigned n;
	int stop_fd; /* eventfd that ends the device thread */
	pthread_t thread;
	int running;
};

/* An empty bus for vm: its lock and the eventfd that will end its
 * device thread.  Returns 0 or a negative errno (no eventfd); virtio_bus_destroy
 * may be called either way. */
int virtio_bus_init(struct virtio_bus *b, struct vm *vm);

/* Attach dev at the next window; poller may be NULL.  Registers the MMIO
 * handler, one ioeventfd per queue and an irqfd.  Appends the device to
 * the kernel command line (virtio_mmio.device=4K@BASE:IRQ) in cmdline.
 * Returns 0 or a negative errno with err set. */
int virtio_bus_add(struct virtio_bus *b, struct virtqueue_dev *dev, const struct virtio_bus_poller *poller,
	     char *cmdline, size_t cmdlen, char *err, size_t errlen);

/* Start the device thread, which from then on serves the queue notifies
 * and the pollers' fds under the bus lock.  0, or -EAGAIN when no thread
 * could be made (the bus stays as it was). */
int virtio_bus_start(struct virtio_bus *b);

/* Stop the device thread and wait for it; nothing when it does not run.
 * The devices are not called from it afterwards (the vCPUs' MMIO exits
 * still may, until they stop). */
void virtio_bus_stop(struct virtio_bus *b);

/* Stop the device thread if it runs, then close every slot's ioeventfds
 * and irqfd and the bus's own eventfd.  The device models stay the
 * caller's: once the vCPUs have stopped (their MMIO exits call in too)
 * and this returns, nothing calls into them, so they may be destroyed. */
void virtio_bus_destroy(struct virtio_bus *b);

struct snapshot_dev;

/* The devices on the bus as snapshot devices (vmm/core/snapshot.h), slot
 * i as slot i, named by kind ("vsock", "net", "fs", "blk"): save checks
 * that the device is quiet (its own check, e.g. no vsock connection, no
 * FUSE session) and writes its transport's state (virtio_mmio_state);
 * load checks and takes that state and lets the device derive the rest.
 * The ioeventfds and irqfd need nothing: virtio_bus_add wired them to
 * this VM.  Fills at most max, returns the bus's device count (more than
 * max: out was too small). */
unsigned virtio_bus_snapshot_devs(struct virtio_bus *b, struct snapshot_dev *out, unsigned max);

/* The same for a fork (kbox fork): a device with a fork_save hook is
 * saved as it is, its blob the transport's state followed by what
 * fork_save wrote, and loaded back through fork_load; one without must
 * be quiet as for a template.  A template's blob (no fork state) loads
 * here too; a fork's does not load as a template's. */
unsigned virtio_bus_fork_devs(struct virtio_bus *b, struct snapshot_dev *out, unsigned max);

/* What a guest booted with this bus sees of its devices, one line per
 * slot (kind, offered features, config space in hex), for a template's
 * key: two buses with the same text look alike to a driver.  Returns
 * the length, or -ENOSPC when buf is too small. */
int virtio_bus_describe(struct virtio_bus *b, char *buf, size_t len);

#endif
