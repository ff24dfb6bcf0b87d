/* A throwaway host directory tree for the filesystem tests and fuzz
 * targets: made under /tmp, filled with small files, removed whole.
 *
 * Header-only (static inline), as fake_virtio.h, since the unit-test binary
 * compiles only tests/unit/ and each fuzz target only its own file.  No
 * Check: helpers return 0 or a negative errno and the caller asserts. */
#ifndef KBOX_TESTS_TMP_TREE_H
#define KBOX_TESTS_TMP_TREE_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A new empty directory named after template (which ends in XXXXXX) in
 * dir, of size bytes; 0 or a negative errno. */
static inline int tmp_tree_make(char *dir, size_t size, const char *template)
{
	if (strlen(template) >= size)
		return -ENAMETOOLONG;
	strcpy(dir, template);
	return mkdtemp(dir) ? 0 : -errno;
}

/* Writes text as the whole of dir/name, made 0644 if new; 0 or a negative
 * errno. */
static inline int tmp_tree_put(const char *dir, const char *name, const char *text)
{
	char p[256];
	size_t len = strlen(text);

	if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, name) >= sizeof p)
		return -ENAMETOOLONG;
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	int rc = write(fd, text, len) == (ssize_t)len ? 0 : -EIO;
	close(fd);
	return rc;
}

static inline int tmp_tree_remove_one(const char *p, const struct stat *st, int flag,
				      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p) < 0 ? -1 : 0;
}

/* Removes dir and everything below it, following no symlink; 0, or -EIO
 * when something could not be read or removed. */
static inline int tmp_tree_remove(const char *dir)
{
	return nftw(dir, tmp_tree_remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 :
									 -EIO;
}

#endif
