/* Disk backends for the virtio-blk device: the ops table the device calls
 * and the one real backend, a raw (sparse) file.
 *
 * Offsets and lengths reach a backend already checked by the device
 * against the disk size (size bytes from offset 0), so a backend never
 * needs to trust a guest number; it moves bytes straight between the host
 * file and guest RAM through the iovecs it is given. */
#ifndef KBOX_BLK_FILE_H
#define KBOX_BLK_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

/* Most iovecs one read or write carries (a whole chain's worth). */
#define BLK_MAX_IOV 256

/* What a disk backend does.  Every hook returns 0 or a negative errno;
 * read and write move all of the n (≤ BLK_MAX_IOV) iovecs at byte off or
 * fail.  discard may leave the range reading as anything (this one reads
 * zeros); write_zeroes must leave it reading as zeros, and may deallocate
 * it when unmap is true. */
struct blk_backend_ops {
	int (*read)(void *ctx, const struct iovec *iov, int n, uint64_t off);
	int (*write)(void *ctx, const struct iovec *iov, int n, uint64_t off);
	int (*flush)(void *ctx);
	int (*discard)(void *ctx, uint64_t off, uint64_t len);
	int (*write_zeroes)(void *ctx, uint64_t off, uint64_t len, bool unmap);
};

/* A disk as the device sees it. */
struct blk_backend {
	const struct blk_backend_ops *ops;
	void *ctx;
	uint64_t size;   /* bytes; the device uses whole 512-byte sectors of it */
	bool read_only;  /* the device offers VIRTIO_BLK_F_RO and refuses writes */
};

struct blk_file_opts {
	bool read_only;    /* open O_RDONLY; the disk is read-only to the guest */
	bool no_fallocate; /* never call fallocate: zeroes are written instead
			    * (for filesystems whose fallocate misbehaves, and
			    * for tests of that path) */
	bool buffered;     /* never O_DIRECT: every read and write goes
			    * through the host's page cache */
};

/* Open the regular file at path as a disk of its current size and fill
 * *be (be->ctx is owned; release it with blk_file_close).  o may be NULL
 * for a writable disk.  Returns 0, -EINVAL if path is not a regular file,
 * or the errno of open/fstat. */
int blk_file_open(const char *path, const struct blk_file_opts *o, struct blk_backend *be);

/* Whether aligned requests of the file backend be go around the host's
 * page cache (O_DIRECT): the default where the filesystem allows it,
 * unless blk_file_opts.buffered.  Requests not aligned to 4 KiB (offset,
 * buffers, lengths) always go through the page cache. */
bool blk_file_direct(const struct blk_backend *be);

/* Close what blk_file_open opened; be is cleared.  Safe on a cleared be. */
void blk_file_close(struct blk_backend *be);

#endif
