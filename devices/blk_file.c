#include "devices/blk_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct blk_file {
	int fd;
	/* Cleared the first time the filesystem says a mode is not
	 * supported, so that later requests go straight to the fallback. */
	bool punch, zero_range;
};

/* preadv/pwritev until every byte of iov moved: a regular file may still
 * return short counts (signals, some filesystems).  A read that meets the
 * end of the file (someone shrank it behind us) is an error: the disk's
 * size was fixed when it was opened. */
static int rw_all(int fd, const struct iovec *iov_in, int n, uint64_t off, bool write)
{
	struct iovec iov[BLK_MAX_IOV];
	int i = 0;

	if (n < 0 || n > BLK_MAX_IOV)
		return -EINVAL;
	memcpy(iov, iov_in, sizeof *iov * (size_t)n);
	while (i < n) {
		if (iov[i].iov_len == 0) {
			i++;
			continue;
		}
		ssize_t r = write ? pwritev(fd, iov + i, n - i, (off_t)off)
				  : preadv(fd, iov + i, n - i, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		off += (uint64_t)r;
		while (r > 0 && i < n) {
			size_t k = (size_t)r < iov[i].iov_len ? (size_t)r : iov[i].iov_len;
			iov[i].iov_base = (char *)iov[i].iov_base + k;
			iov[i].iov_len -= k;
			r -= (ssize_t)k;
			if (iov[i].iov_len == 0)
				i++;
		}
	}
	return 0;
}

static int bf_read(void *ctx, const struct iovec *iov, int n, uint64_t off)
{
	return rw_all(((struct blk_file *)ctx)->fd, iov, n, off, false);
}

static int bf_write(void *ctx, const struct iovec *iov, int n, uint64_t off)
{
	return rw_all(((struct blk_file *)ctx)->fd, iov, n, off, true);
}

static int bf_flush(void *ctx)
{
	return fdatasync(((struct blk_file *)ctx)->fd) < 0 ? -errno : 0;
}

/* The fallback of both discard and write-zeroes: plain writes of zeros. */
static int write_zero_bytes(int fd, uint64_t off, uint64_t len)
{
	static const uint8_t zeros[64 * 1024];

	while (len > 0) {
		size_t k = len < sizeof zeros ? (size_t)len : sizeof zeros;
		ssize_t r = pwrite(fd, zeros, k, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		off += (uint64_t)r;
		len -= (uint64_t)r;
	}
	return 0;
}

/* fallocate with mode, clearing *can when the filesystem refuses the mode
 * itself (as opposed to failing this one call). */
static int try_fallocate(int fd, int mode, uint64_t off, uint64_t len, bool *can)
{
	if (!*can)
		return -EOPNOTSUPP;
	if (fallocate(fd, mode, (off_t)off, (off_t)len) == 0)
		return 0;
	int e = errno;
	if (e == EOPNOTSUPP || e == ENOSYS)
		*can = false;
	return -e;
}

static bool fallback_worth(int r)
{
	return r == -EOPNOTSUPP || r == -ENOSYS || r == -EINVAL;
}

/* A hole reads as zeros, so discard and write-zeroes with unmap are the
 * same punch; without hole punching a discard writes zeros as well, so
 * that what the guest reads afterwards never depends on the host. */
static int bf_discard(void *ctx, uint64_t off, uint64_t len)
{
	struct blk_file *f = ctx;
	int r = try_fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len, &f->punch);

	return fallback_worth(r) ? write_zero_bytes(f->fd, off, len) : r;
}

static int bf_write_zeroes(void *ctx, uint64_t off, uint64_t len, bool unmap)
{
	struct blk_file *f = ctx;
	int r = -EOPNOTSUPP;

	if (unmap)
		r = try_fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len, &f->punch);
	if (fallback_worth(r))
		r = try_fallocate(f->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, off, len,
				  &f->zero_range);
	return fallback_worth(r) ? write_zero_bytes(f->fd, off, len) : r;
}

static const struct blk_backend_ops file_ops = {
	.read = bf_read,
	.write = bf_write,
	.flush = bf_flush,
	.discard = bf_discard,
	.write_zeroes = bf_write_zeroes,
};

int blk_file_open(const char *path, const struct blk_file_opts *o, struct blk_backend *be)
{
	static const struct blk_file_opts defaults;
	struct stat st;

	if (!o)
		o = &defaults;
	memset(be, 0, sizeof *be);
	int fd = open(path, (o->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < 0) {
		close(fd);
		return -EINVAL;
	}
	struct blk_file *f = malloc(sizeof *f);
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	f->fd = fd;
	f->punch = f->zero_range = !o->no_fallocate;
	be->ops = &file_ops;
	be->ctx = f;
	be->size = (uint64_t)st.st_size;
	be->read_only = o->read_only;
	return 0;
}

void blk_file_close(struct blk_backend *be)
{
	struct blk_file *f = be->ctx;

	if (f && be->ops == &file_ops) {
		close(f->fd);
		free(f);
	}
	memset(be, 0, sizeof *be);
}
