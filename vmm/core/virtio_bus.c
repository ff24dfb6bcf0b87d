#include "vmm/core/virtio_bus.h"

#include <errno.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "devices/virtio_mmio_state.h"
#include "lib/errbuf.h"
#include "vmm/core/boot.h"
#include "vmm/core/snapshot.h"

int virtio_bus_init(struct virtio_bus *b, struct vm *vm)
{
	memset(b, 0, sizeof *b);
	b->vm = vm;
	pthread_mutex_init(&b->lock, NULL);
	b->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return b->stop_fd < 0 ? -errno : 0;
}

/* Edge-triggered through the irqfd: the guest driver reads and acks
 * InterruptStatus, so lowering the line needs no action. */
static void slot_irq(struct irq_sink *s, int level)
{
	struct virtio_bus_slot *sl = (struct virtio_bus_slot *)((char *)s - offsetof(struct virtio_bus_slot, sink));
	if (level) {
		uint64_t one = 1;
		ssize_t w = write(sl->irqfd, &one, sizeof one);
		(void)w; /* an eventfd counter cannot overflow at this rate */
	}
}

static void slot_read(void *ctx, uint64_t off, uint8_t *data, unsigned len)
{
	struct virtio_bus_slot *sl = ctx;
	pthread_mutex_lock(&sl->bus->lock);
	virtio_mmio_read(&sl->t, off, data, len);
	pthread_mutex_unlock(&sl->bus->lock);
}

static void slot_write(void *ctx, uint64_t off, const uint8_t *data, unsigned len)
{
	struct virtio_bus_slot *sl = ctx;
	pthread_mutex_lock(&sl->bus->lock);
	virtio_mmio_write(&sl->t, off, data, len);
	pthread_mutex_unlock(&sl->bus->lock);
}

/* Close the eventfds of a slot (KVM keeps its own references to those
 * it was given until the VM goes). */
static void slot_close_fds(struct virtio_bus_slot *sl)
{
	for (unsigned q = 0; q < VIRTIO_BUS_MAX_QUEUES; q++) {
		if (sl->qfd[q] >= 0)
			close(sl->qfd[q]);
		sl->qfd[q] = -1;
	}
	if (sl->irqfd >= 0)
		close(sl->irqfd);
	sl->irqfd = -1;
}

int virtio_bus_add(struct virtio_bus *b, struct virtqueue_dev *dev, const struct virtio_bus_poller *poller,
	     char *cmdline, size_t cmdlen, char *err, size_t errlen)
{
	if (b->n >= VIRTIO_BUS_MAX_DEVS || dev->nr_queues > VIRTIO_BUS_MAX_QUEUES)
		return errbuf_fail(err, errlen, -ENOSPC, "too many virtio devices or queues");
	struct virtio_bus_slot *sl = &b->slot[b->n];
	memset(sl, 0, sizeof *sl);
	sl->bus = b;
	sl->base = VIRTIO_BUS_BASE + b->n * (uint64_t)VIRTIO_MMIO_WINDOW;
	sl->irq = VIRTIO_BUS_FIRST_IRQ + b->n;
	sl->nq = dev->nr_queues;
	sl->irqfd = -1;
	for (unsigned q = 0; q < VIRTIO_BUS_MAX_QUEUES; q++)
		sl->qfd[q] = -1;
	if (poller)
		sl->poller = *poller;
	sl->sink.set_level = slot_irq;

	sl->irqfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sl->irqfd < 0)
		goto sys;
	struct kvm_irqfd irqfd = { .fd = (uint32_t)sl->irqfd, .gsi = sl->irq };
	if (ioctl(b->vm->vm_fd, KVM_IRQFD, &irqfd) < 0)
		goto sys;
	for (unsigned q = 0; q < sl->nq; q++) {
		sl->qfd[q] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (sl->qfd[q] < 0)
			goto sys;
		struct kvm_ioeventfd io = {
			.datamatch = q,
			.addr = sl->base + VIRTIO_MMIO_QUEUE_NOTIFY,
			.len = 4,
			.fd = sl->qfd[q],
			.flags = KVM_IOEVENTFD_FLAG_DATAMATCH,
		};
		if (ioctl(b->vm->vm_fd, KVM_IOEVENTFD, &io) < 0)
			goto sys;
	}
	int rc = virtio_mmio_init(&sl->t, dev, &b->vm->mem, &sl->sink);
	if (rc < 0) {
		slot_close_fds(sl);
		return errbuf_fail(err, errlen, rc, "virtio-mmio set-up failed: %s", strerror(-rc));
	}
	struct vm_mmio h = { sl->base, VIRTIO_MMIO_WINDOW, slot_read, slot_write, sl };
	if ((rc = vm_add_mmio(b->vm, &h)) < 0) {
		slot_close_fds(sl);
		return errbuf_fail(err, errlen, rc, "cannot map the virtio-mmio window: %s",
			       strerror(-rc));
	}
	if ((rc = boot_cmdline_append(cmdline, cmdlen, " virtio_mmio.device=4K@0x%llx:%u",
				      (unsigned long long)sl->base, sl->irq)) < 0) {
		slot_close_fds(sl);
		return errbuf_fail(err, errlen, rc, "the devices do not fit on the kernel command "
				   "line (%u bytes at most)", BOOT_KERNEL_CMDLINE_MAX);
	}
	b->n++;
	return 0;
sys:
	rc = -errno;
	slot_close_fds(sl);
	return errbuf_fail(err, errlen, rc, "cannot wire a virtio device to KVM: %s", strerror(-rc));
}

static void *virtio_bus_thread(void *arg)
{
	struct virtio_bus *b = arg;
	struct pollfd p[VIRTIO_BUS_MAX_POLL];
	struct dev_fds { unsigned slot, first, n; } dev_fds[VIRTIO_BUS_MAX_DEVS];
	for (;;) {
		unsigned n = 0;
		p[n++] = (struct pollfd){ .fd = b->stop_fd, .events = POLLIN };
		for (unsigned s = 0; s < b->n; s++)
			for (unsigned q = 0; q < b->slot[s].nq; q++)
				p[n++] = (struct pollfd){ .fd = b->slot[s].qfd[q], .events = POLLIN };
		unsigned nd = 0;
		pthread_mutex_lock(&b->lock);
		for (unsigned s = 0; s < b->n; s++) {
			struct virtio_bus_poller *pl = &b->slot[s].poller;
			if (!pl->fds)
				continue;
			unsigned k = pl->fds(pl->ctx, p + n, VIRTIO_BUS_MAX_POLL - n);
			dev_fds[nd++] = (struct dev_fds){ s, n, k };
			n += k;
		}
		pthread_mutex_unlock(&b->lock);
		if (poll(p, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents)
			break;
		unsigned i = 1;
		pthread_mutex_lock(&b->lock);
		for (unsigned s = 0; s < b->n; s++)
			for (unsigned q = 0; q < b->slot[s].nq; q++, i++) {
				if (!(p[i].revents & POLLIN))
					continue;
				uint64_t cnt;
				if (read(p[i].fd, &cnt, sizeof cnt) == sizeof cnt)
					virtio_mmio_notify(&b->slot[s].t, q);
			}
		for (unsigned d = 0; d < nd; d++) {
			struct virtio_bus_poller *pl = &b->slot[dev_fds[d].slot].poller;
			pl->handle(pl->ctx, p + dev_fds[d].first, dev_fds[d].n);
		}
		pthread_mutex_unlock(&b->lock);
	}
	return NULL;
}

int virtio_bus_start(struct virtio_bus *b)
{
	/* A stop before (a pause) left the eventfd readable. */
	uint64_t cnt;
	while (read(b->stop_fd, &cnt, sizeof cnt) == sizeof cnt)
		;
	if (pthread_create(&b->thread, NULL, virtio_bus_thread, b) != 0)
		return -EAGAIN;
	b->running = 1;
	return 0;
}

void virtio_bus_stop(struct virtio_bus *b)
{
	if (!b->running)
		return;
	uint64_t one = 1;
	ssize_t w = write(b->stop_fd, &one, sizeof one);
	(void)w;
	pthread_join(b->thread, NULL);
	b->running = 0;
}

void virtio_bus_destroy(struct virtio_bus *b)
{
	virtio_bus_stop(b);
	for (unsigned s = 0; s < b->n; s++)
		slot_close_fds(&b->slot[s]);
	if (b->stop_fd >= 0)
		close(b->stop_fd);
	pthread_mutex_destroy(&b->lock);
}

static const char *slot_kind(const struct virtio_bus_slot *sl)
{
	switch (sl->t.dev->device_id) {
	case 1: return "net";
	case 2: return "blk";
	case 19: return "vsock";
	case 26: return "fs";
	default: return "dev";
	}
}

/* A template's blob is the transport's state alone (the device quiet);
 * a fork's is the transport's state followed by the device's fork state
 * (fork_save), which may be empty. */
static int slot_save_mode(struct virtio_bus_slot *sl, bool fork, struct statebuf_writer *w,
			  char *err, size_t errlen)
{
	struct virtqueue_dev *d = sl->t.dev;
	pthread_mutex_lock(&sl->bus->lock);
	int rc = fork && d->ops->fork_save ? 0 : d->ops->quiet ? d->ops->quiet(d, err, errlen) : 0;
	if (!rc && (rc = virtio_mmio_state_save(&sl->t, w)) < 0)
		snprintf(err, errlen, "%s: cannot save its state: %s", slot_kind(sl), strerror(-rc));
	if (!rc && fork && d->ops->fork_save)
		rc = d->ops->fork_save(d, w, err, errlen);
	pthread_mutex_unlock(&sl->bus->lock);
	return rc;
}

static int slot_load_mode(struct virtio_bus_slot *sl, bool fork, const uint8_t *blob, size_t len,
			  char *err, size_t errlen)
{
	struct virtqueue_dev *d = sl->t.dev;
	size_t state_len = virtio_mmio_state_len(d->nr_queues);
	char why[256];
	if (len > state_len && !fork) {
		snprintf(err, errlen, "%s: %zu bytes of state, a template's has %zu", slot_kind(sl),
			 len, state_len);
		return -EINVAL;
	}
	if (len > state_len && !d->ops->fork_load) {
		snprintf(err, errlen, "%s: %zu bytes of fork state for a device that takes none",
			 slot_kind(sl), len - state_len);
		return -EINVAL;
	}
	pthread_mutex_lock(&sl->bus->lock);
	int rc = virtio_mmio_state_load(&sl->t, blob, len < state_len ? len : state_len, why,
					sizeof why);
	if (rc < 0)
		snprintf(err, errlen, "%s: %s", slot_kind(sl), why);
	/* A blob of the transport's state alone is a template's (the device
	 * was quiet): no fork state to take, fork_load is not asked. */
	if (!rc && fork && d->ops->fork_load && len > state_len &&
	    (rc = d->ops->fork_load(d, blob + state_len, len - state_len, err, errlen)) < 0 &&
	    d->ops->reset)
		d->ops->reset(d); /* nothing half-taken stays */
	if (!rc && d->ops->restored)
		d->ops->restored(d);
	pthread_mutex_unlock(&sl->bus->lock);
	return rc;
}

static int slot_save(void *ctx, struct statebuf_writer *w, char *err, size_t errlen)
{
	return slot_save_mode(ctx, false, w, err, errlen);
}

static int slot_load(void *ctx, const uint8_t *blob, size_t len, char *err, size_t errlen)
{
	return slot_load_mode(ctx, false, blob, len, err, errlen);
}

static int slot_fork_save(void *ctx, struct statebuf_writer *w, char *err, size_t errlen)
{
	return slot_save_mode(ctx, true, w, err, errlen);
}

static int slot_fork_load(void *ctx, const uint8_t *blob, size_t len, char *err, size_t errlen)
{
	return slot_load_mode(ctx, true, blob, len, err, errlen);
}

unsigned virtio_bus_snapshot_devs(struct virtio_bus *b, struct snapshot_dev *out, unsigned max)
{
	for (unsigned s = 0; s < b->n && s < max; s++)
		out[s] = (struct snapshot_dev){ slot_kind(&b->slot[s]), s, &b->slot[s], slot_save,
						slot_load };
	return b->n;
}

unsigned virtio_bus_fork_devs(struct virtio_bus *b, struct snapshot_dev *out, unsigned max)
{
	for (unsigned s = 0; s < b->n && s < max; s++)
		out[s] = (struct snapshot_dev){ slot_kind(&b->slot[s]), s, &b->slot[s],
						slot_fork_save, slot_fork_load };
	return b->n;
}

int virtio_bus_describe(struct virtio_bus *b, char *buf, size_t len)
{
	size_t used = 0;
	if (len == 0)
		return -ENOSPC;
	buf[0] = '\0'; /* a bus without devices describes as "" */
	for (unsigned s = 0; s < b->n; s++) {
		struct virtqueue_dev *d = b->slot[s].t.dev;
		uint8_t cfg[256] = { 0 };
		uint32_t cl = d->config_size < sizeof cfg ? d->config_size : sizeof cfg;
		if (d->ops->config_read && cl)
			d->ops->config_read(d, 0, cfg, cl);
		int n = snprintf(buf + used, len - used, "slot %u %s id %u queues %u features %llx config ",
				 s, slot_kind(&b->slot[s]), d->device_id, d->nr_queues,
				 (unsigned long long)d->features);
		if (n < 0 || (size_t)n >= len - used)
			return -ENOSPC;
		used += (size_t)n;
		for (uint32_t i = 0; i < cl; i++) {
			if (len - used < 4)
				return -ENOSPC;
			used += (size_t)snprintf(buf + used, len - used, "%02x", cfg[i]);
		}
		if (len - used < 2)
			return -ENOSPC;
		buf[used++] = '\n';
		buf[used] = '\0';
	}
	return (int)used;
}
