#include "devices/blk_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Alignment asked of a request (offset, every buffer's address and
 * length) before it goes through the O_DIRECT descriptor: the page size,
 * which covers the logical block size of the disks in use (512 or 4096);
 * a filesystem that wants more answers EINVAL once and direct I/O stops. */
#define DIRECT_ALIGN 4096u

struct blk_file {
	int fd;
	/* The same file opened O_DIRECT, or -1: aligned reads and writes go
	 * through it, straight between guest RAM and the disk, without a
	 * copy through the host's page cache (the guest has its own).  The
	 * kernel keeps it coherent with the buffered fd: a direct read writes
	 * dirty cached pages of its range back first, a direct write drops
	 * them. */
	int dfd;
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

static bool direct_fits(const struct iovec *iov, int n, uint64_t off)
{
	if (off % DIRECT_ALIGN)
		return false;
	for (int i = 0; i < n; i++)
		if ((uintptr_t)iov[i].iov_base % DIRECT_ALIGN || iov[i].iov_len % DIRECT_ALIGN)
			return false;
	return true;
}

/* Through the O_DIRECT fd when the request is aligned, else (or when the
 * filesystem refuses it after all) through the page cache.  Repeating a
 * request that failed part-way is harmless: a read is read again, a write
 * writes the same guest bytes again. */
static int bf_rw(struct blk_file *f, const struct iovec *iov, int n, uint64_t off, bool write)
{
	if (n < 0 || n > BLK_MAX_IOV)
		return -EINVAL;
	if (f->dfd >= 0 && direct_fits(iov, n, off)) {
		int r = rw_all(f->dfd, iov, n, off, write);
		if (r != -EINVAL)
			return r;
		close(f->dfd);
		f->dfd = -1;
	}
	return rw_all(f->fd, iov, n, off, write);
}

static int bf_read(void *ctx, const struct iovec *iov, int n, uint64_t off)
{
	return bf_rw(ctx, iov, n, off, false);
}

static int bf_write(void *ctx, const struct iovec *iov, int n, uint64_t off)
{
	return bf_rw(ctx, iov, n, off, true);
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

/* fd's file once more, with O_DIRECT (through /proc/self/fd, so that it
 * is the very inode fd is, which fstat confirms), or -1 where the
 * filesystem has no direct I/O (tmpfs before Linux 6.6, some FUSE ones)
 * or /proc is missing. */
static int open_direct(int fd, bool read_only, const struct stat *st)
{
	char self[40];
	struct stat dst;

	snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
	int dfd = open(self, (read_only ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC | O_NOCTTY);
	if (dfd < 0)
		return -1;
	if (fstat(dfd, &dst) < 0 || dst.st_dev != st->st_dev || dst.st_ino != st->st_ino) {
		close(dfd);
		return -1;
	}
	return dfd;
}

bool blk_file_direct(const struct blk_backend *be)
{
	const struct blk_file *f = be->ctx;

	return f && be->ops == &file_ops && f->dfd >= 0;
}

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
	f->dfd = o->buffered ? -1 : open_direct(fd, o->read_only, &st);
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
		if (f->dfd >= 0)
			close(f->dfd);
		close(f->fd);
		free(f);
	}
	memset(be, 0, sizeof *be);
}
