/* virtio-blk device (virtio 1.2 §5.2): one request queue over a disk
 * backend (devices/blk_file.h).
 *
 * Requests: IN, OUT, FLUSH, GET_ID, DISCARD and WRITE_ZEROES; any other
 * type gets VIRTIO_BLK_S_UNSUPP.  Features offered: SIZE_MAX, SEG_MAX,
 * BLK_SIZE, FLUSH, DISCARD and WRITE_ZEROES (writable disks), RO
 * (read-only ones), plus the ring features.  A driver that does not take
 * FLUSH gets a write-through disk: every write is synced before it
 * completes.  Requests are served synchronously on the notify, in ring
 * order, straight between guest RAM and the backend (no bounce buffer).
 *
 * Each chain is one request: its readable side is the 16-byte header
 * followed (OUT, DISCARD, WRITE_ZEROES) by the data; its writable side is
 * the data (IN, GET_ID) followed by the status byte, its last byte.
 * Nothing is assumed about how the descriptors split these.
 *
 * Guest errors: a malformed ring or chain (see virtqueue_pop), or a chain with no
 * writable byte to put a status in, stops the device (DEVICE_NEEDS_RESET).
 * Every other bad request is answered VIRTIO_BLK_S_IOERR: a header shorter
 * than 16 bytes, data on the wrong side, a length that is not whole
 * sectors, a range past the end of the disk (checked without overflow),
 * too many or malformed discard segments, a write to a read-only disk, a
 * failing backend.  Unknown discard/write-zeroes flags, and the unmap flag
 * on a discard, get VIRTIO_BLK_S_UNSUPP as the spec requires.
 *
 * Like the transport, not thread-safe: the VMM serialises every call. */
#ifndef KBOX_VIRTIO_BLK_H
#define KBOX_VIRTIO_BLK_H

#include <stdint.h>

#include "devices/blk_file.h"
#include "devices/virtqueue.h"

#define VIRTIO_BLK_DEVICE_ID 2

#define VIRTIO_BLK_F_SIZE_MAX 1
#define VIRTIO_BLK_F_SEG_MAX 2
#define VIRTIO_BLK_F_RO 5
#define VIRTIO_BLK_F_BLK_SIZE 6
#define VIRTIO_BLK_F_FLUSH 9
#define VIRTIO_BLK_F_DISCARD 13
#define VIRTIO_BLK_F_WRITE_ZEROES 14

#define VIRTIO_BLK_T_IN 0
#define VIRTIO_BLK_T_OUT 1
#define VIRTIO_BLK_T_FLUSH 4
#define VIRTIO_BLK_T_GET_ID 8
#define VIRTIO_BLK_T_DISCARD 11
#define VIRTIO_BLK_T_WRITE_ZEROES 13

#define VIRTIO_BLK_S_OK 0
#define VIRTIO_BLK_S_IOERR 1
#define VIRTIO_BLK_S_UNSUPP 2

#define VIRTIO_BLK_DWZ_F_UNMAP 1u /* flags of a discard/write-zeroes segment */

#define VIRTIO_BLK_SECTOR 512u
#define VIRTIO_BLK_HDR_SIZE 16u   /* le32 type, le32 reserved, le64 sector */
#define VIRTIO_BLK_DWZ_SEG_SIZE 16u /* le64 sector, le32 num_sectors, le32 flags */
#define VIRTIO_BLK_ID_BYTES 20u
#define VIRTIO_BLK_QUEUE_SIZE 256

/* Config space: up to write_zeroes_may_unmap and its padding (offset 60);
 * the secure-erase and zoned fields behind it belong to features we do
 * not offer. */
#define VIRTIO_BLK_CONFIG_SIZE 60

/* Limits put in config space.  A request carries header and status
 * besides its data segments, and must fit in one chain; segments are
 * served in place, so size_max only keeps single requests (and the time
 * the VMM spends in one) moderate.  Discard and write-zeroes ranges are
 * bounded so that the zero-writing fallback stays short too (at most
 * 16 × 64 MiB a request). */
#define VIRTIO_BLK_SEG_MAX (VIRTQUEUE_MAX_SEGS - 2)
#define VIRTIO_BLK_SIZE_MAX (1u << 20)
#define VIRTIO_BLK_MAX_DWZ_SECTORS (1u << 17)
#define VIRTIO_BLK_MAX_DWZ_SEG 16u

struct virtio_blk_stats {
	uint64_t requests;    /* chains answered */
	uint64_t read_bytes, written_bytes;
	uint64_t ioerr;       /* answered VIRTIO_BLK_S_IOERR */
	uint64_t unsupp;      /* answered VIRTIO_BLK_S_UNSUPP */
	uint64_t bad_chains;  /* guest errors that stopped the device */
};

struct virtio_blk {
	struct virtqueue_dev dev;      /* give &dev to a transport */
	struct virtqueue vqs[1];
	struct blk_backend be;
	uint64_t capacity;      /* whole 512-byte sectors of be.size */
	uint32_t blk_size;
	uint8_t serial[VIRTIO_BLK_ID_BYTES];
	struct virtio_blk_stats stats;
};

struct virtio_blk_opts {
	const char *serial; /* GET_ID answer, at most 20 bytes; NULL: empty */
	uint32_t blk_size;  /* logical block size: a power of two from 512 to
			     * 4096; 0 means 512 */
};

/* Initialise b over backend be (copied; the backend's ctx is not owned
 * and must outlive b).  o may be NULL for the defaults.  The disk is
 * read-only to the guest iff be->read_only.  Then attach &b->dev to a
 * transport.  Returns 0 or -EINVAL (no ops or a missing hook, a serial
 * over 20 bytes, a bad blk_size). */
int virtio_blk_init(struct virtio_blk *b, const struct blk_backend *be,
		    const struct virtio_blk_opts *o);

#endif
