/* The passthrough backend's name rules (fs_passthrough_priv.h): entry
 * names, hidden patterns (fs_hidden.h) against the path from the root,
 * the spelling a case-folding host directory lists, and the name the
 * kernel records now for an inode the guest holds. */
#include "devices/fs_passthrough_priv.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int fs_passthrough_check_name(const char *name)
{
	if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 ||
	    strcmp(name, "..") == 0)
		return -EINVAL;
	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

int fs_passthrough_rel_path(struct fs_passthrough *p, int dirfd, char *buf, size_t size)
{
	char link[32], host[PATH_MAX + 1];

	snprintf(link, sizeof link, "%d", dirfd);
	ssize_t n = readlinkat(p->proc_fd, link, host, sizeof host - 1);
	if (n < 0 || (size_t)n >= sizeof host - 1)
		return -EACCES;
	host[n] = '\0';
	if (strncmp(host, p->root_path, p->root_len) != 0)
		return -EACCES;
	const char *rel = host + p->root_len;
	if (p->root_len > 1) {
		if (*rel == '\0') {
			buf[0] = '\0';
			return 0;
		}
		if (*rel != '/')
			return -EACCES;
	}
	if (*rel == '/')
		rel++;
	if (strlen(rel) >= size)
		return -EACCES;
	strcpy(buf, rel);
	return 0;
}

/* fs_hidden_hidden for name in directory dirfd, whose path from the root is
 * dirrel when the caller knows it (else it is read from dirfd when a
 * pattern needs it).  1 hidden, 0 not, <0 unknown (callers treat it as
 * hidden). */
static int fs_passthrough_hidden_at(struct fs_passthrough *p, int dirfd, const char *dirrel,
			 const char *name)
{
	char path[PATH_MAX];

	if (!dirrel && fs_hidden_needs_path(p->hid)) {
		int rc = fs_passthrough_rel_path(p, dirfd, path, sizeof path);
		if (rc < 0)
			return rc;
		dirrel = path;
	}
	return fs_hidden_hidden(p->hid, dirrel, name);
}

int fs_passthrough_hidden(struct fs_passthrough *p, int dirfd, const char *name)
{
	return fs_passthrough_hidden_at(p, dirfd, NULL, name);
}

/* Whether directory dirfd took another spelling of name for the same
 * entry st: name with its ASCII letters' case flipped, or with a dot
 * added (vfat, exFAT and Windows servers drop trailing dots).  1 yes, 0
 * no, -1 cannot tell from this name (no letters, and no dot dropped). */
static signed char fs_passthrough_probe_folds(int dirfd, const char *name,
				   const struct stat *st)
{
	char alt[NAME_MAX + 2];
	struct stat a;
	size_t len = strlen(name);
	bool letters = false;

	for (size_t i = 0; i <= len; i++) {
		unsigned char c = (unsigned char)name[i];
		letters |= c < 0x80 && isalpha(c);
		alt[i] = (char)(c < 0x80 && isalpha(c) ? c ^ 0x20 : c);
	}
	if (letters && fstatat(dirfd, alt, &a, AT_SYMLINK_NOFOLLOW) == 0 &&
	    a.st_dev == st->st_dev && a.st_ino == st->st_ino)
		return 1;
	memcpy(alt, name, len);
	alt[len] = '.';
	alt[len + 1] = '\0';
	if (len < NAME_MAX && fstatat(dirfd, alt, &a, AT_SYMLINK_NOFOLLOW) == 0 &&
	    a.st_dev == st->st_dev && a.st_ino == st->st_ino)
		return 1;
	return letters ? 0 : -1;
}

/* 1 if directory dirfd lists name byte for byte, 0 if not, or a negative
 * errno.  The listing takes a short-lived fd of its own, outside the cap
 * (which leaves 64 fds of RLIMIT_NOFILE for such). */
static int fs_passthrough_listed(int dirfd, const char *name)
{
	char buf[8192] __attribute__((aligned(8)));
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
		if (n <= 0) {
			rc = n < 0 ? -errno : 0;
			break;
		}
		for (long pos = 0; pos < n;) {
			const struct fs_passthrough_dirent64 *de =
				(const struct fs_passthrough_dirent64 *)(buf + pos);
			size_t hl = offsetof(struct fs_passthrough_dirent64, d_name);
			if (de->d_reclen <= hl || de->d_reclen > (size_t)(n - pos)) {
				close(fd);
				return -EIO;
			}
			size_t nl = strnlen(de->d_name, de->d_reclen - hl);
			if (nl == strlen(name) && memcmp(de->d_name, name, nl) == 0) {
				close(fd);
				return 1;
			}
			pos += de->d_reclen;
		}
	}
	close(fd);
	return rc;
}

int fs_passthrough_spelling(struct fs_passthrough *p, uint32_t di, int dirfd, const char *name,
		 const struct stat *st)
{
	struct fs_passthrough_node *d = &p->nodes[di];

	if (d->folds < 0)
		d->folds = fs_passthrough_probe_folds(dirfd, name, st);
	if (d->folds <= 0)
		return 0;
	int rc = fs_passthrough_listed(dirfd, name);
	return rc < 0 ? rc : rc ? 0 : -ENOENT;
}

int fs_passthrough_spelling_at(struct fs_passthrough *p, uint32_t di, int dirfd, const char *name)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	return fs_passthrough_spelling(p, di, dirfd, name, &st);
}

int fs_passthrough_check_current(struct fs_passthrough *p, int fd)
{
	char link[32], host[PATH_MAX + 1], dir[PATH_MAX + 1];
	struct stat st;

	snprintf(link, sizeof link, "%d", fd);
	ssize_t n = readlinkat(p->proc_fd, link, host, sizeof host - 1);
	if (n < 0 || (size_t)n >= sizeof host - 1)
		return -ESTALE;
	host[n] = '\0';
	/* The kernel marks a name it no longer has; a file may also be
	 * called so, which fstat tells apart. */
	static const char gone[] = " (deleted)";
	size_t gl = sizeof gone - 1;
	if ((size_t)n > gl && memcmp(host + n - gl, gone, gl) == 0 &&
	    fstat(fd, &st) == 0 && st.st_nlink == 0)
		return 0;
	if (strncmp(host, p->root_path, p->root_len) != 0)
		return -ESTALE;
	char *rel = host + p->root_len;
	if (p->root_len > 1 && *rel != '/' && *rel != '\0')
		return -ESTALE;
	while (*rel == '/')
		rel++;
	dir[0] = '\0';
	size_t dl = 0;
	while (*rel) {
		char *slash = strchr(rel, '/');
		if (slash)
			*slash = '\0';
		if (fs_passthrough_hidden_at(p, -1, dir, rel) != 0)
			return -ESTALE;
		size_t l = strlen(rel);
		if (dl + l + 2 > sizeof dir)
			return -ESTALE;
		if (dl)
			dir[dl++] = '/';
		memcpy(dir + dl, rel, l + 1);
		dl += l;
		if (!slash)
			break;
		rel = slash + 1;
	}
	return 0;
}
