/* The state of one virtio-mmio transport and its split queues, saved into
 * a snapshot (docs/snapshots.md) and checked when it comes back: the
 * registers the driver set, the negotiated features, each queue's size,
 * ring addresses, readiness and ring indexes.  What a device keeps beyond
 * that (connections, sessions) is the device's own blob.  Host pointers
 * are never saved: a ready queue is activated again over the new RAM,
 * with every check virtqueue_activate makes. */
#ifndef KBOX_VIRTIO_MMIO_STATE_H
#define KBOX_VIRTIO_MMIO_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "devices/virtio_mmio.h"
#include "lib/statebuf.h"

#define VIRTIO_MMIO_STATE_MAGIC   0x54534d56u /* "VMST" */
#define VIRTIO_MMIO_STATE_VERSION 1u

/* The bytes virtio_mmio_state_save writes for a device of nr_queues queues. */
size_t virtio_mmio_state_len(unsigned nr_queues);

/* Append t's state to w.  The device must be quiet (no notify running).
 * Returns 0 or w's latched error. */
int virtio_mmio_state_save(const struct virtio_mmio *t, struct statebuf_writer *w);

/* Take the state in blob (len bytes, hostile) into t, which virtio_mmio_init
 * bound to its device and no driver has touched since.  Everything is
 * checked before anything changes: the exact length, magic and version,
 * the device id, queue count and each queue's maximum against the device
 * (not the file), status bits only in an order write_status allows
 * (FEATURES_OK needs DRIVER, DRIVER_OK needs FEATURES_OK), accepted
 * features only with FEATURES_OK and then offered, with VERSION_1, and
 * equal to what the driver wrote, "live" exactly when DRIVER_OK is set
 * with neither NEEDS_RESET nor FAILED, interrupt bits known, a ready queue
 * only with FEATURES_OK and never broken, a queue that is neither with
 * its indexes at zero.  Then each ready queue is activated over t's guest
 * memory and must find the used index in RAM equal to the saved one.
 * The device's hooks are not called (its own blob restores it).  0, or
 * -EINVAL with a line in err and t reset. */
int virtio_mmio_state_load(struct virtio_mmio *t, const uint8_t *blob, size_t len, char *err,
		     size_t errlen);

#endif
