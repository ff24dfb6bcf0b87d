/* virtio-fs device (virtio 1.2 §5.11): carries FUSE requests between the
 * guest and a struct fuse_server.
 *
 * Queue 0 is hiprio (FORGET, BATCH_FORGET, INTERRUPT: no reply), queue 1
 * the one request queue.  Each chain is one request: its readable segments
 * are the request bytes, its writable ones the reply area, handed to
 * fuse_server_handle as they are (WRITE and READ data move straight between
 * guest RAM and the host file).  Requests are served synchronously on the
 * notify, in ring order.
 *
 * Guest errors (a malformed ring or chain, a request whose framing the
 * server rejects, a request that needs a reply but brings no reply area)
 * stop the device (DEVICE_NEEDS_RESET); a well-framed request with bad
 * fields gets an errno reply from the server.  A device reset resets the
 * server too (every host fd but the root's is closed).
 *
 * Snapshots: a template needs the device quiet (no FUSE session); a fork
 * (virtqueue_dev_ops.fork_save/fork_load) carries the session, its node
 * table and open handles to a device over the same folder, with the same
 * tag, in another process (fuse_server_fork_save; docs/snapshots.md).
 *
 * Like the transport, not thread-safe: the VMM serialises every call. */
#ifndef KBOX_VIRTIO_FS_H
#define KBOX_VIRTIO_FS_H

#include "devices/fuse_server.h"
#include "devices/virtqueue.h"

#define VIRTIO_FS_DEVICE_ID 26
#define VIRTIO_FS_TAG_LEN 36
#define VIRTIO_FS_CONFIG_SIZE 40
#define VIRTIO_FS_HIPRIO_SIZE 128
#define VIRTIO_FS_REQUEST_SIZE 256

/* The max_write a fuse_server behind this device must be configured with.
 * The Linux driver puts every data page in its own descriptor, so a
 * request of P pages is a chain of up to P + 4 segments, which must fit in
 * VIRTQUEUE_MAX_SEGS, in an indirect table (VIRTQUEUE_MAX_INDIRECT) and, for a driver
 * that goes without indirect descriptors, in the request queue. */
#define VIRTIO_FS_MAX_WRITE (252u * 4096)
_Static_assert(VIRTIO_FS_MAX_WRITE / 4096 + 4 <= VIRTQUEUE_MAX_SEGS &&
		       VIRTIO_FS_MAX_WRITE / 4096 + 4 <= VIRTQUEUE_MAX_INDIRECT &&
		       VIRTIO_FS_MAX_WRITE / 4096 + 4 <= VIRTIO_FS_REQUEST_SIZE,
	       "a max_write request must fit in one chain");

struct virtio_fs_stats {
	uint64_t requests;     /* chains served */
	uint64_t bad_chains;   /* guest errors that stopped the device */
};

struct virtio_fs {
	struct virtqueue_dev dev;     /* give &dev to a transport */
	struct virtqueue vqs[2];
	struct fuse_server *srv;
	char tag[VIRTIO_FS_TAG_LEN];
	struct virtio_fs_stats stats;
};

/* Initialise f to serve srv (not owned; it must outlive f and be built
 * with max_write at most VIRTIO_FS_MAX_WRITE) under tag, which must be 1 to
 * 36 bytes with no NUL inside (the guest mounts it by this name).  Then
 * attach &f->dev to a transport.  Returns 0 or -EINVAL. */
int virtio_fs_init(struct virtio_fs *f, struct fuse_server *srv, const char *tag);

#endif
