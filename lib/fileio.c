#include "lib/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fio_slurp(const char *path, int oflags, size_t max, char **buf, size_t *len, struct stat *st,
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
	/* One byte more than allowed, to notice a file that grew. */
	char *b = rc ? NULL : malloc(max + 2);
	if (!rc && !b)
		rc = -ENOMEM;
	size_t n = 0;
	if (!rc)
		*stage = "read";
	while (!rc && n <= max) {
		ssize_t r = read(fd, b + n, max + 1 - n);
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
			explicit_bzero(b, max + 2);
		free(b);
		return rc;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}

int fio_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}
