#include "lib/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fileio_slurp(const char *path, int oflags, size_t max, char **buf, size_t *len, struct stat *st,
	      const char **stage)
{
	struct stat own;
	const char *where;
	if (!st)
		st = &own;
	if (!stage)
		stage = &where;
	int rc = 0;
	*stage = "open";
	int fd = open(path, O_RDONLY | O_CLOEXEC | oflags);
	if (fd < 0)
		return -errno;
	*stage = "stat";
	if (fstat(fd, st) < 0)
		rc = -errno;
	else if (!S_ISREG(st->st_mode))
		rc = S_ISDIR(st->st_mode) ? -EISDIR : -EINVAL;
	else if (st->st_size > (off_t)max)
		rc = -EFBIG;
	/* Sized from the file, one byte more to notice one that grew (then
	 * up to max, and one byte more again). */
	size_t cap = rc ? 0 : (size_t)st->st_size < max ? (size_t)st->st_size : max;
	char *b = rc ? NULL : malloc(cap + 2);
	if (!rc && !b)
		rc = -ENOMEM;
	size_t n = 0;
	if (!rc)
		*stage = "read";
	while (!rc && n <= max) {
		if (n > cap) {
			char *g = malloc(max + 2);
			if (!g) {
				rc = -ENOMEM;
				break;
			}
			memcpy(g, b, n);
			explicit_bzero(b, cap + 2);
			free(b);
			b = g;
			cap = max;
		}
		ssize_t r = read(fd, b + n, cap + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			rc = -errno;
		else if (r == 0)
			break;
		else
			n += (size_t)r;
	}
	if (!rc && n > max)
		rc = -EFBIG;
	close(fd);
	if (rc) {
		if (b)
			explicit_bzero(b, cap + 2);
		free(b);
		return rc;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}

enum io_kind { IO_WRITE, IO_PWRITE, IO_PREAD };

/* The n bytes at p moved whole, again after EINTR and short transfers: off
 * advances for the positioned kinds.  0, the call's negative errno, or eof
 * when it moved nothing. */
static int io_whole(enum io_kind kind, int fd, char *p, size_t n, off_t off, int eof)
{
	while (n) {
		ssize_t r = kind == IO_PREAD    ? pread(fd, p, n, off)
			    : kind == IO_PWRITE ? pwrite(fd, p, n, off)
						: write(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : eof;
		p += r;
		n -= (size_t)r;
		off += r;
	}
	return 0;
}

/* The writers never store through p: the cast only lets one loop serve
 * the reader too. */
int fileio_write_all(int fd, const void *buf, size_t n)
{
	return io_whole(IO_WRITE, fd, (char *)buf, n, 0, -EIO);
}

int fileio_pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
	return io_whole(IO_PWRITE, fd, (char *)buf, n, off, -EIO);
}

int fileio_pread_all(int fd, void *buf, size_t n, off_t off)
{
	return io_whole(IO_PREAD, fd, buf, n, off, -ENODATA);
}

bool fileio_name_ok(const char *name, size_t max, const char *bad_first)
{
	size_t n = strlen(name);
	if (n == 0 || n > max || strchr(bad_first, name[0]))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* The folder path lies in, relative to dirfd, fsync'd. */
static void sync_parent(int dirfd, const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (slash == path)
		snprintf(dir, sizeof dir, "/");
	else if ((size_t)(slash - path) < sizeof dir)
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
	else
		return;
	int fd = openat(dirfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	(void)fsync(fd);
	close(fd);
}

int fileio_write_atomic(int dirfd, const char *path, const char *tmp, const void *buf, size_t n,
		     mode_t mode)
{
	char own[PATH_MAX];
	if (!tmp) {
		if (snprintf(own, sizeof own, "%s.tmp", path) >= (int)sizeof own)
			return -ENAMETOOLONG;
		tmp = own;
	}
	/* Created afresh, so that a hard link planted there is not written
	 * through; a symlink there is refused (someone put it there). */
	const int oflags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(dirfd, tmp, oflags, 0600);
	if (fd < 0 && errno == EEXIST) {
		struct stat st;
		if (fstatat(dirfd, tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
			return -ELOOP;
		if (unlinkat(dirfd, tmp, 0) < 0)
			return -errno;
		fd = openat(dirfd, tmp, oflags, 0600);
	}
	if (fd < 0)
		return -errno;
	int rc = fileio_write_all(fd, buf, n);
	if (!rc && (fchmod(fd, mode) < 0 || fsync(fd) < 0))
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc && renameat(dirfd, tmp, dirfd, path) < 0)
		rc = -errno;
	if (rc) {
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	sync_parent(dirfd, path);
	return 0;
}
