/* Confined passthrough backend; see fs_passthrough.h for the rules.
 *
 * /proc/self/fd/N is used only where Linux offers no *at() form that works
 * on an O_PATH fd: reopening a regular file for I/O (OPEN, and CREATE of an
 * existing file), chmod, truncate without an open handle, xattrs, and hard
 * links when linkat(AT_EMPTY_PATH) lacks CAP_DAC_READ_SEARCH.  Each use is
 * on an fd whose type was checked (regular file or directory), and the
 * magic link names that very inode, so no path the guest could influence is
 * resolved.  /proc/self/fd is opened once and checked to be procfs.  The
 * mount-relative path of a directory (for hidden patterns with a '/') is
 * read from the same link. */
#include "devices/fs_passthrough.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

const char *const FSP_DEFAULT_HIDDEN[] = { ".env", ".env.*", "secrets.env",
					   "kbox.yaml", NULL };

#define FSP_NONE UINT32_MAX
#define FSP_XATTR_LIST_MAX 65536

struct fsp_node {
	int fd; /* O_PATH|O_NOFOLLOW; -1 when the slot is free */
	mode_t type;
	dev_t dev;
	ino_t ino;
	uint64_t nlookup;
	uint32_t hnext; /* hash chain, or the free list when unused */
};

struct fsp_handle {
	int fd; /* -1 when free */
	bool dir;
	uint32_t next_free;
};

struct fsp {
	int proc_fd;
	bool ro;
	char **hidden;
	size_t n_hidden;
	bool path_patterns;
	char *root_path;
	size_t root_len;
	struct fsp_node *nodes; /* nodeid = index + 1; index 0 is the root */
	uint32_t n_nodes, cap_nodes, free_node;
	uint32_t *hash; /* bucket heads, FSP_NONE terminated */
	uint32_t hash_size, n_live;
	struct fsp_handle *fhs; /* fh = index */
	uint32_t n_fhs, cap_fhs, free_fh;
	unsigned fds, max_fds;
};

static uint32_t fsp_hash(const struct fsp *p, dev_t dev, ino_t ino)
{
	uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15ull ^ (uint64_t)dev;
	h ^= h >> 29;
	return (uint32_t)(h & (p->hash_size - 1));
}

static struct fsp_node *fsp_node(struct fsp *p, uint64_t nodeid)
{
	if (nodeid == 0 || nodeid > p->n_nodes)
		return NULL;
	struct fsp_node *n = &p->nodes[nodeid - 1];
	return n->fd >= 0 ? n : NULL;
}

static int fsp_rehash(struct fsp *p, uint32_t size)
{
	uint32_t *h = malloc(sizeof *h * size);

	if (!h)
		return -ENOMEM;
	free(p->hash);
	p->hash = h;
	p->hash_size = size;
	for (uint32_t i = 0; i < size; i++)
		h[i] = FSP_NONE;
	for (uint32_t i = 0; i < p->n_nodes; i++) {
		struct fsp_node *n = &p->nodes[i];
		if (n->fd < 0)
			continue;
		uint32_t b = fsp_hash(p, n->dev, n->ino);
		n->hnext = h[b];
		h[b] = i;
	}
	return 0;
}

static struct fsp_node *fsp_find(struct fsp *p, dev_t dev, ino_t ino)
{
	for (uint32_t i = p->hash[fsp_hash(p, dev, ino)]; i != FSP_NONE;
	     i = p->nodes[i].hnext)
		if (p->nodes[i].dev == dev && p->nodes[i].ino == ino)
			return &p->nodes[i];
	return NULL;
}

/* Takes ownership of fd.  Returns the slot index or a negative errno. */
static int64_t fsp_insert(struct fsp *p, int fd, const struct stat *st)
{
	uint32_t i;

	if (p->free_node != FSP_NONE) {
		i = p->free_node;
		p->free_node = p->nodes[i].hnext;
	} else {
		if (p->n_nodes == p->cap_nodes) {
			uint32_t cap = p->cap_nodes ? p->cap_nodes * 2 : 64;
			struct fsp_node *nn =
				realloc(p->nodes, sizeof *nn * cap);
			if (!nn)
				return -ENOMEM;
			p->nodes = nn;
			p->cap_nodes = cap;
		}
		i = p->n_nodes++;
	}
	struct fsp_node *n = &p->nodes[i];
	n->fd = fd;
	n->type = st->st_mode & S_IFMT;
	n->dev = st->st_dev;
	n->ino = st->st_ino;
	n->nlookup = 0;
	uint32_t b = fsp_hash(p, n->dev, n->ino);
	n->hnext = p->hash[b];
	p->hash[b] = i;
	p->n_live++;
	if (p->n_live > p->hash_size * 2 && p->hash_size < (1u << 30))
		fsp_rehash(p, p->hash_size * 2); /* on failure chains grow */
	return i;
}

static void fsp_remove(struct fsp *p, uint32_t i)
{
	struct fsp_node *n = &p->nodes[i];
	uint32_t *link = &p->hash[fsp_hash(p, n->dev, n->ino)];

	while (*link != i)
		link = &p->nodes[*link].hnext;
	*link = n->hnext;
	close(n->fd);
	p->fds--;
	n->fd = -1;
	n->hnext = p->free_node;
	p->free_node = i;
	p->n_live--;
}

static int fsp_check_name(const char *name)
{
	if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 ||
	    strcmp(name, "..") == 0)
		return -EINVAL;
	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/* The path of directory fd relative to the root ("" for the root), from
 * the kernel's own record.  Fails closed when it cannot be established. */
static int fsp_rel_path(struct fsp *p, int dirfd, char *buf, size_t size)
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

/* 1 if name in directory dirfd is hidden, 0 if not, <0 if unknown (the
 * caller treats unknown as hidden). */
static int fsp_hidden(struct fsp *p, int dirfd, const char *name)
{
	char path[PATH_MAX + NAME_MAX + 2];
	bool have_path = false;

	for (size_t i = 0; i < p->n_hidden; i++) {
		const char *pat = p->hidden[i];
		if (!strchr(pat, '/')) {
			if (fnmatch(pat, name, 0) == 0)
				return 1;
			continue;
		}
		if (!have_path) {
			int rc = fsp_rel_path(p, dirfd, path, PATH_MAX);
			if (rc < 0)
				return rc;
			if (path[0])
				strcat(path, "/");
			strcat(path, name);
			have_path = true;
		}
		if (fnmatch(pat, path, FNM_PATHNAME) == 0)
			return 1;
	}
	return 0;
}

static int fsp_open_beneath(int dirfd, const char *name, uint64_t flags,
			    uint64_t mode)
{
	struct open_how how;

	memset(&how, 0, sizeof how);
	how.flags = flags | O_NOFOLLOW | O_CLOEXEC;
	how.mode = mode;
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
		      RESOLVE_NO_MAGICLINKS;
	long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how);
	return fd < 0 ? -errno : (int)fd;
}

/* The parent directory for a name operation, after the name checks.
 * hidden_err is what a hidden name gives (ENOENT to read, EACCES to
 * create). */
static int fsp_dir_for(struct fsp *p, uint64_t parent, const char *name,
		       int hidden_err, struct fsp_node **out)
{
	struct fsp_node *d = fsp_node(p, parent);

	if (!d)
		return -ESTALE;
	if (d->type != S_IFDIR)
		return -ENOTDIR;
	int rc = fsp_check_name(name);
	if (rc < 0)
		return rc;
	if (fsp_hidden(p, d->fd, name) != 0)
		return hidden_err;
	*out = d;
	return 0;
}

/* One counted lookup of name in d. */
static int fsp_lookup_in(struct fsp *p, struct fsp_node *d, const char *name,
			 struct fuse_fs_entry *e)
{
	struct stat st;

	if (p->fds >= p->max_fds)
		return -EMFILE;
	int fd = fsp_open_beneath(d->fd, name, O_PATH, 0);
	if (fd < 0)
		return fd;
	if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	struct fsp_node *n = fsp_find(p, st.st_dev, st.st_ino);
	if (n) {
		close(fd);
	} else {
		int64_t i = fsp_insert(p, fd, &st);
		if (i < 0) {
			close(fd);
			return (int)i;
		}
		p->fds++;
		n = &p->nodes[i];
	}
	n->nlookup++;
	e->nodeid = (uint64_t)(n - p->nodes) + 1;
	e->st = st;
	return 0;
}

static int fsp_lookup(void *be, uint64_t parent, const char *name,
		      struct fuse_fs_entry *e)
{
	struct fsp *p = be;
	struct fsp_node *d;
	int rc = fsp_dir_for(p, parent, name, -ENOENT, &d);

	return rc < 0 ? rc : fsp_lookup_in(p, d, name, e);
}

static void fsp_forget(void *be, uint64_t nodeid, uint64_t nlookup)
{
	struct fsp *p = be;
	struct fsp_node *n = fsp_node(p, nodeid);

	if (!n || nodeid == 1)
		return;
	n->nlookup = nlookup >= n->nlookup ? 0 : n->nlookup - nlookup;
	if (n->nlookup == 0)
		fsp_remove(p, (uint32_t)(nodeid - 1));
}

static struct fsp_handle *fsp_fh(struct fsp *p, uint64_t fh, bool dir)
{
	if (fh >= p->n_fhs || p->fhs[fh].fd < 0 || p->fhs[fh].dir != dir)
		return NULL;
	return &p->fhs[fh];
}

/* Takes ownership of fd. */
static int fsp_fh_new(struct fsp *p, int fd, bool dir, uint64_t *fh)
{
	uint32_t i;

	if (p->free_fh != FSP_NONE) {
		i = p->free_fh;
		p->free_fh = p->fhs[i].next_free;
	} else {
		if (p->n_fhs == p->cap_fhs) {
			uint32_t cap = p->cap_fhs ? p->cap_fhs * 2 : 16;
			struct fsp_handle *nh =
				realloc(p->fhs, sizeof *nh * cap);
			if (!nh) {
				close(fd);
				return -ENOMEM;
			}
			p->fhs = nh;
			p->cap_fhs = cap;
		}
		i = p->n_fhs++;
	}
	p->fhs[i].fd = fd;
	p->fhs[i].dir = dir;
	p->fds++;
	*fh = i;
	return 0;
}

static int fsp_fh_close(struct fsp *p, uint64_t fh, bool dir)
{
	struct fsp_handle *h = fsp_fh(p, fh, dir);

	if (!h)
		return -EBADF;
	close(h->fd);
	p->fds--;
	h->fd = -1;
	h->next_free = p->free_fh;
	p->free_fh = (uint32_t)fh;
	return 0;
}

static void fsp_proc_name(int fd, char *buf, size_t size)
{
	snprintf(buf, size, "%d", fd);
}

/* Absolute /proc path of an fd, for calls that only take a path. */
static void fsp_proc_path(int fd, char *buf, size_t size)
{
	snprintf(buf, size, "/proc/self/fd/%d", fd);
}

static int fsp_getattr(void *be, uint64_t nodeid, uint64_t fh, struct stat *st)
{
	struct fsp *p = be;
	struct fsp_node *n = fsp_node(p, nodeid);

	if (!n)
		return -ESTALE;
	struct fsp_handle *h = fh == FUSE_FS_NO_FH ? NULL : fsp_fh(p, fh, false);
	int rc = h ? fstat(h->fd, st) :
		     fstatat(n->fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	return rc < 0 ? -errno : 0;
}

static int fsp_setattr(void *be, uint64_t nodeid, uint64_t fh,
		       const struct fuse_fs_setattr *sa, struct stat *st)
{
	struct fsp *p = be;
	struct fsp_node *n = fsp_node(p, nodeid);
	char path[40];

	if (!n)
		return -ESTALE;
	if (p->ro)
		return -EROFS;
	struct fsp_handle *h = fh == FUSE_FS_NO_FH ? NULL : fsp_fh(p, fh, false);
	fsp_proc_path(n->fd, path, sizeof path);
	if (sa->valid & FUSE_FS_SET_MODE) {
		if (n->type != S_IFREG && n->type != S_IFDIR)
			return -EOPNOTSUPP;
		if (chmod(path, sa->mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID)) <
		    0)
			return -errno;
	}
	if (sa->valid & (FUSE_FS_SET_UID | FUSE_FS_SET_GID)) {
		uid_t u = sa->valid & FUSE_FS_SET_UID ? sa->uid : (uid_t)-1;
		gid_t g = sa->valid & FUSE_FS_SET_GID ? sa->gid : (gid_t)-1;
		if (fchownat(n->fd, "", u, g,
			     AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
	}
	if (sa->valid & FUSE_FS_SET_SIZE) {
		if (n->type != S_IFREG)
			return n->type == S_IFDIR ? -EISDIR : -EINVAL;
		if ((h ? ftruncate(h->fd, sa->size) :
			 truncate(path, sa->size)) < 0)
			return -errno;
	}
	if (sa->valid & (FUSE_FS_SET_ATIME | FUSE_FS_SET_MTIME)) {
		struct timespec ts[2] = { { 0, UTIME_OMIT }, { 0, UTIME_OMIT } };
		if (sa->valid & FUSE_FS_SET_ATIME_NOW)
			ts[0].tv_nsec = UTIME_NOW;
		else if (sa->valid & FUSE_FS_SET_ATIME)
			ts[0] = sa->atime;
		if (sa->valid & FUSE_FS_SET_MTIME_NOW)
			ts[1].tv_nsec = UTIME_NOW;
		else if (sa->valid & FUSE_FS_SET_MTIME)
			ts[1] = sa->mtime;
		if (utimensat(n->fd, "", ts,
			      AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
	}
	return fsp_getattr(be, nodeid, FUSE_FS_NO_FH, st);
}

static int fsp_readlink(void *be, uint64_t nodeid, char *buf, size_t size)
{
	struct fsp_node *n = fsp_node(be, nodeid);

	if (!n)
		return -ESTALE;
	if (n->type != S_IFLNK)
		return -EINVAL;
	ssize_t len = readlinkat(n->fd, "", buf, size);
	if (len < 0)
		return -errno;
	return (int)len;
}

/* Checks shared by everything that creates a name. */
static int fsp_new_name(struct fsp *p, uint64_t parent, const char *name,
			struct fsp_node **d)
{
	if (p->ro)
		return -EROFS;
	return fsp_dir_for(p, parent, name, -EACCES, d);
}

static int fsp_symlink(void *be, uint64_t parent, const char *name,
		       const char *target, struct fuse_fs_entry *e)
{
	struct fsp *p = be;
	struct fsp_node *d;
	int rc = fsp_new_name(p, parent, name, &d);

	if (rc < 0)
		return rc;
	if (symlinkat(target, d->fd, name) < 0)
		return -errno;
	return fsp_lookup_in(p, d, name, e);
}

static mode_t fsp_perm(mode_t mode)
{
	return mode & 01777 & ~(mode_t)(S_ISUID | S_ISGID);
}

static int fsp_mknod(void *be, uint64_t parent, const char *name, mode_t mode,
		     dev_t rdev, struct fuse_fs_entry *e)
{
	struct fsp *p = be;
	struct fsp_node *d;
	int rc = fsp_new_name(p, parent, name, &d);

	if (rc < 0)
		return rc;
	/* Device nodes, FIFOs and sockets would be traps for host programs. */
	if ((mode & S_IFMT) != S_IFREG && (mode & S_IFMT) != 0)
		return -EPERM;
	if (mknodat(d->fd, name, S_IFREG | fsp_perm(mode), 0) < 0)
		return -errno;
	return fsp_lookup_in(p, d, name, e);
}

static int fsp_mkdir(void *be, uint64_t parent, const char *name, mode_t mode,
		     struct fuse_fs_entry *e)
{
	struct fsp *p = be;
	struct fsp_node *d;
	int rc = fsp_new_name(p, parent, name, &d);

	if (rc < 0)
		return rc;
	if (mkdirat(d->fd, name, fsp_perm(mode)) < 0)
		return -errno;
	return fsp_lookup_in(p, d, name, e);
}

static int fsp_remove_name(void *be, uint64_t parent, const char *name,
			   int flags)
{
	struct fsp *p = be;
	struct fsp_node *d;

	if (p->ro)
		return -EROFS;
	int rc = fsp_dir_for(p, parent, name, -ENOENT, &d);
	if (rc < 0)
		return rc;
	return unlinkat(d->fd, name, flags) < 0 ? -errno : 0;
}

static int fsp_unlink(void *be, uint64_t parent, const char *name)
{
	return fsp_remove_name(be, parent, name, 0);
}

static int fsp_rmdir(void *be, uint64_t parent, const char *name)
{
	return fsp_remove_name(be, parent, name, AT_REMOVEDIR);
}

static int fsp_rename(void *be, uint64_t parent, const char *name,
		      uint64_t newparent, const char *newname, unsigned flags)
{
	struct fsp *p = be;
	struct fsp_node *d, *nd;

	if (p->ro)
		return -EROFS;
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	int rc = fsp_dir_for(p, parent, name, -ENOENT, &d);
	if (rc < 0)
		return rc;
	rc = fsp_dir_for(p, newparent, newname, -EACCES, &nd);
	if (rc < 0)
		return rc;
	return renameat2(d->fd, name, nd->fd, newname, flags) < 0 ? -errno : 0;
}

static int fsp_link(void *be, uint64_t nodeid, uint64_t newparent,
		    const char *newname, struct fuse_fs_entry *e)
{
	struct fsp *p = be;
	struct fsp_node *d, *n = fsp_node(p, nodeid);
	char name[32];

	if (!n)
		return -ESTALE;
	int rc = fsp_new_name(p, newparent, newname, &d);
	if (rc < 0)
		return rc;
	if (n->type == S_IFDIR)
		return -EPERM;
	if (linkat(n->fd, "", d->fd, newname, AT_EMPTY_PATH) < 0) {
		if (errno != ENOENT)
			return -errno;
		fsp_proc_name(n->fd, name, sizeof name);
		if (linkat(p->proc_fd, name, d->fd, newname,
			   AT_SYMLINK_FOLLOW) < 0)
			return -errno;
	}
	return fsp_lookup_in(p, d, newname, e);
}

/* Open flags the host honours; everything else the guest sends is
 * dropped (O_CREAT, O_PATH, O_DIRECT, O_TMPFILE, ...). */
static int fsp_open_flags(struct fsp *p, int flags, int *out)
{
	int acc = flags & O_ACCMODE;

	if (acc == O_ACCMODE)
		return -EINVAL;
	if (p->ro && (acc != O_RDONLY || (flags & O_TRUNC)))
		return -EROFS;
	*out = acc | (flags & (O_APPEND | O_TRUNC | O_SYNC | O_DSYNC)) |
	       O_CLOEXEC | O_NOCTTY;
	return 0;
}

/* A regular file's O_PATH fd reopened for I/O.  The magic link names the
 * inode itself, which is known to be a regular file. */
static int fsp_reopen(struct fsp *p, struct fsp_node *n, int flags)
{
	char name[32];

	if (n->type == S_IFDIR)
		return -EISDIR;
	if (n->type == S_IFLNK)
		return -ELOOP;
	if (n->type != S_IFREG)
		return -EACCES;
	fsp_proc_name(n->fd, name, sizeof name);
	int fd = openat(p->proc_fd, name, flags);
	return fd < 0 ? -errno : fd;
}

static int fsp_open(void *be, uint64_t nodeid, int flags, uint64_t *fh)
{
	struct fsp *p = be;
	struct fsp_node *n = fsp_node(p, nodeid);
	int hf;

	if (!n)
		return -ESTALE;
	int rc = fsp_open_flags(p, flags, &hf);
	if (rc < 0)
		return rc;
	if (p->fds >= p->max_fds)
		return -EMFILE;
	int fd = fsp_reopen(p, n, hf);
	if (fd < 0)
		return fd;
	return fsp_fh_new(p, fd, false, fh);
}

static int fsp_create(void *be, uint64_t parent, const char *name, mode_t mode,
		      int flags, struct fuse_fs_entry *e, uint64_t *fh)
{
	struct fsp *p = be;
	struct fsp_node *d;
	int hf, fd;
	int rc = fsp_new_name(p, parent, name, &d);

	if (rc < 0)
		return rc;
	rc = fsp_open_flags(p, flags, &hf);
	if (rc < 0)
		return rc;
	/* One fd for the handle and one for the inode. */
	if (p->fds + 2 > p->max_fds)
		return -EMFILE;
	fd = fsp_open_beneath(d->fd, name, (uint64_t)(hf | O_CREAT | O_EXCL),
			      fsp_perm(mode));
	if (fd == -EEXIST && !(flags & O_EXCL)) {
		/* An existing name is opened only if it is a regular file. */
		rc = fsp_lookup_in(p, d, name, e);
		if (rc < 0)
			return rc;
		fd = fsp_reopen(p, fsp_node(p, e->nodeid), hf);
		if (fd < 0) {
			fsp_forget(p, e->nodeid, 1);
			return fd;
		}
	} else if (fd < 0) {
		return fd;
	} else {
		struct stat st;
		rc = fsp_lookup_in(p, d, name, e);
		if (rc == 0 && (fstat(fd, &st) < 0 || st.st_ino != e->st.st_ino ||
				st.st_dev != e->st.st_dev)) {
			/* The name was swapped on the host in between. */
			fsp_forget(p, e->nodeid, 1);
			rc = -EIO;
		}
		if (rc < 0) {
			close(fd);
			return rc;
		}
	}
	rc = fsp_fh_new(p, fd, false, fh);
	if (rc < 0)
		fsp_forget(p, e->nodeid, 1);
	return rc;
}

static ssize_t fsp_read(void *be, uint64_t fh, const struct iovec *iov,
			int iovcnt, off_t off)
{
	struct fsp_handle *h = fsp_fh(be, fh, false);

	if (!h)
		return -EBADF;
	ssize_t n = preadv(h->fd, iov, iovcnt, off);
	return n < 0 ? -errno : n;
}

static ssize_t fsp_write(void *be, uint64_t fh, const struct iovec *iov,
			 int iovcnt, off_t off)
{
	struct fsp *p = be;
	struct fsp_handle *h = fsp_fh(p, fh, false);

	if (!h)
		return -EBADF;
	if (p->ro)
		return -EROFS;
	ssize_t n = pwritev(h->fd, iov, iovcnt, off);
	return n < 0 ? -errno : n;
}

static int fsp_flush(void *be, uint64_t fh)
{
	return fsp_fh(be, fh, false) ? 0 : -EBADF;
}

static int fsp_release(void *be, uint64_t fh)
{
	return fsp_fh_close(be, fh, false);
}

static int fsp_fsync_fd(struct fsp_handle *h, bool datasync)
{
	if (!h)
		return -EBADF;
	return (datasync ? fdatasync(h->fd) : fsync(h->fd)) < 0 ? -errno : 0;
}

static int fsp_fsync(void *be, uint64_t fh, bool datasync)
{
	return fsp_fsync_fd(fsp_fh(be, fh, false), datasync);
}

static int fsp_opendir(void *be, uint64_t nodeid, uint64_t *fh)
{
	struct fsp *p = be;
	struct fsp_node *n = fsp_node(p, nodeid);

	if (!n)
		return -ESTALE;
	if (n->type != S_IFDIR)
		return -ENOTDIR;
	if (p->fds >= p->max_fds)
		return -EMFILE;
	int fd = openat(n->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return fsp_fh_new(p, fd, true, fh);
}

struct fsp_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* Emits one host entry; returns 1 to go on, 0 when the reply is full. */
static int fsp_emit(struct fsp *p, int dirfd, const struct fsp_dirent64 *de,
		    const char *name, bool plus, fuse_fs_fill_fn fill,
		    fuse_fs_fits_fn fits, void *ctx)
{
	struct fuse_fs_entry e;
	bool dots = strcmp(name, ".") == 0 || strcmp(name, "..") == 0;

	if (!dots && fsp_hidden(p, dirfd, name) != 0)
		return 1;
	if (!plus || dots)
		return fill(ctx, name, de->d_ino, de->d_type,
			    (uint64_t)de->d_off, NULL);
	if (!fits(ctx, strlen(name)))
		return 0;
	/* The lookup goes through the same confined path as LOOKUP; the
	 * handle's fd stands in for the directory node. */
	struct fsp_node tmp = { .fd = dirfd, .type = S_IFDIR };
	if (fsp_lookup_in(p, &tmp, name, &e) < 0)
		return fill(ctx, name, de->d_ino, de->d_type,
			    (uint64_t)de->d_off, NULL);
	if (!fill(ctx, name, de->d_ino, de->d_type, (uint64_t)de->d_off, &e)) {
		fsp_forget(p, e.nodeid, 1);
		return 0;
	}
	return 1;
}

static int fsp_readdir(void *be, uint64_t fh, uint64_t off, bool plus,
		       fuse_fs_fill_fn fill, fuse_fs_fits_fn fits, void *ctx)
{
	struct fsp *p = be;
	struct fsp_handle *h = fsp_fh(p, fh, true);
	char buf[8192] __attribute__((aligned(8)));
	char name[NAME_MAX + 1];

	if (!h)
		return -EBADF;
	if (off > (uint64_t)INT64_MAX)
		return 0;
	/* The offset is an opaque cookie from a previous reply; the host
	 * filesystem validates it. */
	if (lseek(h->fd, (off_t)off, SEEK_SET) < 0)
		return -errno;
	for (;;) {
		long n = syscall(SYS_getdents64, h->fd, buf, sizeof buf);
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		for (long pos = 0; pos < n;) {
			const struct fsp_dirent64 *de =
				(const struct fsp_dirent64 *)(buf + pos);
			size_t rl = de->d_reclen, hl = offsetof(
					struct fsp_dirent64, d_name);
			if (rl <= hl || rl > (size_t)(n - pos))
				return -EIO;
			size_t nl = strnlen(de->d_name, rl - hl);
			if (nl == 0 || nl > NAME_MAX)
				return -EIO;
			memcpy(name, de->d_name, nl);
			name[nl] = '\0';
			if (!fsp_emit(p, h->fd, de, name, plus, fill, fits, ctx))
				return 0;
			pos += (long)rl;
		}
	}
}

static int fsp_releasedir(void *be, uint64_t fh)
{
	return fsp_fh_close(be, fh, true);
}

static int fsp_fsyncdir(void *be, uint64_t fh, bool datasync)
{
	return fsp_fsync_fd(fsp_fh(be, fh, true), datasync);
}

static int fsp_statfs(void *be, uint64_t nodeid, struct statvfs *out)
{
	struct fsp_node *n = fsp_node(be, nodeid);

	if (!n)
		return -ESTALE;
	return fstatvfs(n->fd, out) < 0 ? -errno : 0;
}

static int fsp_access(void *be, uint64_t nodeid, int mask)
{
	struct fsp *p = be;
	struct fsp_node *n = fsp_node(p, nodeid);

	if (!n)
		return -ESTALE;
	if (p->ro && (mask & W_OK))
		return -EROFS;
	return faccessat(n->fd, "", mask, AT_EMPTY_PATH) < 0 ? -errno : 0;
}

/* Only the user.* namespace crosses: security.* (file capabilities!),
 * trusted.* and ACLs stay host matters. */
static bool fsp_xattr_ok(const char *name)
{
	return strncmp(name, "user.", 5) == 0 && name[5];
}

static int fsp_xattr_node(struct fsp *p, uint64_t nodeid, char *path,
			  size_t size)
{
	struct fsp_node *n = fsp_node(p, nodeid);

	if (!n)
		return -ESTALE;
	if (n->type != S_IFREG && n->type != S_IFDIR)
		return -EPERM;
	fsp_proc_path(n->fd, path, size);
	return 0;
}

static int fsp_getxattr(void *be, uint64_t nodeid, const char *name,
			void *buf, size_t size)
{
	char path[40];
	int rc = fsp_xattr_node(be, nodeid, path, sizeof path);

	if (rc == -EPERM || (rc == 0 && !fsp_xattr_ok(name)))
		return -ENODATA;
	if (rc < 0)
		return rc;
	ssize_t n = getxattr(path, name, size ? buf : NULL, size);
	return n < 0 ? -errno : (int)n;
}

static int fsp_setxattr(void *be, uint64_t nodeid, const char *name,
			const void *value, size_t size, int flags)
{
	struct fsp *p = be;
	char path[40];

	if (p->ro)
		return -EROFS;
	int rc = fsp_xattr_node(p, nodeid, path, sizeof path);
	if (rc < 0)
		return rc;
	if (!fsp_xattr_ok(name))
		return -EOPNOTSUPP;
	if (flags & ~(XATTR_CREATE | XATTR_REPLACE))
		return -EINVAL;
	return setxattr(path, name, value, size, flags) < 0 ? -errno : 0;
}

static int fsp_listxattr(void *be, uint64_t nodeid, char *buf, size_t size)
{
	char path[40];
	int rc = fsp_xattr_node(be, nodeid, path, sizeof path);

	if (rc == -EPERM)
		return 0;
	if (rc < 0)
		return rc;
	char *all = malloc(FSP_XATTR_LIST_MAX);
	if (!all)
		return -ENOMEM;
	ssize_t n = listxattr(path, all, FSP_XATTR_LIST_MAX);
	if (n < 0) {
		rc = -errno;
		free(all);
		return rc;
	}
	size_t out = 0;
	for (ssize_t i = 0; i < n;) {
		size_t l = strnlen(all + i, (size_t)(n - i));
		if (l < (size_t)(n - i) && fsp_xattr_ok(all + i)) {
			if (size && out + l + 1 > size) {
				free(all);
				return -ERANGE;
			}
			if (size)
				memcpy(buf + out, all + i, l + 1);
			out += l + 1;
		}
		i += (ssize_t)l + 1;
	}
	free(all);
	return (int)out;
}

static int fsp_removexattr(void *be, uint64_t nodeid, const char *name)
{
	struct fsp *p = be;
	char path[40];

	if (p->ro)
		return -EROFS;
	int rc = fsp_xattr_node(p, nodeid, path, sizeof path);
	if (rc < 0)
		return rc;
	if (!fsp_xattr_ok(name))
		return -EOPNOTSUPP;
	return removexattr(path, name) < 0 ? -errno : 0;
}

static int fsp_lseek(void *be, uint64_t fh, off_t off, int whence, off_t *res)
{
	struct fsp_handle *h = fsp_fh(be, fh, false);

	if (!h)
		return -EBADF;
	off_t r = lseek(h->fd, off, whence);
	if (r < 0)
		return -errno;
	*res = r;
	return 0;
}

static int fsp_fallocate(void *be, uint64_t fh, int mode, off_t off, off_t len)
{
	struct fsp *p = be;
	struct fsp_handle *h = fsp_fh(p, fh, false);
	const int ok[] = { 0, FALLOC_FL_KEEP_SIZE,
			   FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			   FALLOC_FL_ZERO_RANGE,
			   FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE };
	bool allowed = false;

	if (!h)
		return -EBADF;
	if (p->ro)
		return -EROFS;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		allowed |= mode == ok[i];
	if (!allowed)
		return -EOPNOTSUPP;
	return fallocate(h->fd, mode, off, len) < 0 ? -errno : 0;
}

/* Locks are open-file-description locks on the handle's host fd: they
 * conflict with host processes' locks too, and go away with the handle. */
static int fsp_getlk(void *be, uint64_t fh, struct flock *fl)
{
	struct fsp_handle *h = fsp_fh(be, fh, false);

	if (!h)
		return -EBADF;
	fl->l_pid = 0;
	return fcntl(h->fd, F_OFD_GETLK, fl) < 0 ? -errno : 0;
}

static int fsp_setlk(void *be, uint64_t fh, const struct flock *fl)
{
	struct fsp_handle *h = fsp_fh(be, fh, false);
	struct flock l = *fl;

	if (!h)
		return -EBADF;
	l.l_pid = 0;
	if (fcntl(h->fd, F_OFD_SETLK, &l) < 0)
		return errno == EACCES ? -EAGAIN : -errno;
	return 0;
}

static void fsp_reset(void *be)
{
	struct fsp *p = be;

	for (uint32_t i = 0; i < p->n_fhs; i++)
		if (p->fhs[i].fd >= 0)
			fsp_fh_close(p, i, p->fhs[i].dir);
	for (uint32_t i = 1; i < p->n_nodes; i++)
		if (p->nodes[i].fd >= 0)
			fsp_remove(p, i);
}

const struct fuse_fs_ops fsp_ops = {
	.lookup = fsp_lookup,
	.forget = fsp_forget,
	.getattr = fsp_getattr,
	.setattr = fsp_setattr,
	.readlink = fsp_readlink,
	.symlink = fsp_symlink,
	.mknod = fsp_mknod,
	.mkdir = fsp_mkdir,
	.unlink = fsp_unlink,
	.rmdir = fsp_rmdir,
	.rename = fsp_rename,
	.link = fsp_link,
	.open = fsp_open,
	.create = fsp_create,
	.read = fsp_read,
	.write = fsp_write,
	.flush = fsp_flush,
	.release = fsp_release,
	.fsync = fsp_fsync,
	.opendir = fsp_opendir,
	.readdir = fsp_readdir,
	.releasedir = fsp_releasedir,
	.fsyncdir = fsp_fsyncdir,
	.statfs = fsp_statfs,
	.access = fsp_access,
	.getxattr = fsp_getxattr,
	.setxattr = fsp_setxattr,
	.listxattr = fsp_listxattr,
	.removexattr = fsp_removexattr,
	.lseek = fsp_lseek,
	.fallocate = fsp_fallocate,
	.getlk = fsp_getlk,
	.setlk = fsp_setlk,
	.reset = fsp_reset,
};

static int fsp_init_hidden(struct fsp *p, const struct fsp_config *cfg)
{
	const char *const *list = cfg->hidden_set ? cfg->hidden :
						    FSP_DEFAULT_HIDDEN;
	size_t n = 0;

	if (cfg->hidden_set)
		n = cfg->n_hidden;
	else
		while (FSP_DEFAULT_HIDDEN[n])
			n++;
	if (n && !list)
		return -EINVAL;
	p->hidden = calloc(n ? n : 1, sizeof *p->hidden);
	if (!p->hidden)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (!list[i] || !list[i][0])
			return -EINVAL;
		/* A leading "/" anchors at the root, same as none. */
		const char *pat = list[i][0] == '/' ? list[i] + 1 : list[i];
		p->hidden[i] = strdup(pat);
		if (!p->hidden[i])
			return -ENOMEM;
		p->n_hidden = i + 1;
		p->path_patterns |= strchr(pat, '/') != NULL;
	}
	return 0;
}

int fsp_new(const struct fsp_config *cfg, struct fsp **out)
{
	struct fsp *p;
	struct stat st;
	struct statfs sf;
	struct rlimit rl;
	char path[PATH_MAX + 1], name[32];
	int rc;

	if (!cfg || !cfg->root || !out)
		return -EINVAL;
	p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->proc_fd = -1;
	p->free_node = FSP_NONE;
	p->free_fh = FSP_NONE;
	p->ro = cfg->readonly;
	rc = fsp_init_hidden(p, cfg);
	if (rc < 0)
		goto fail;
	p->proc_fd = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (p->proc_fd < 0 || fstatfs(p->proc_fd, &sf) < 0 ||
	    sf.f_type != PROC_SUPER_MAGIC) {
		rc = -ENOSYS;
		goto fail;
	}
	int root = open(cfg->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		rc = -errno;
		goto fail;
	}
	if (fstat(root, &st) < 0 || fsp_rehash(p, 256) < 0 ||
	    fsp_insert(p, root, &st) != 0) {
		close(root);
		rc = -ENOMEM;
		goto fail;
	}
	p->nodes[0].nlookup = 1;
	fsp_proc_name(root, name, sizeof name);
	ssize_t n = readlinkat(p->proc_fd, name, path, sizeof path - 1);
	if (n <= 0 || (size_t)n >= sizeof path - 1) {
		rc = -ENAMETOOLONG;
		goto fail;
	}
	path[n] = '\0';
	p->root_path = strdup(path);
	if (!p->root_path) {
		rc = -ENOMEM;
		goto fail;
	}
	p->root_len = (size_t)n;
	p->max_fds = cfg->max_fds;
	if (!p->max_fds) {
		if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 128)
			rl.rlim_cur = 128;
		p->max_fds = rl.rlim_cur > (1u << 24) ?
				     (1u << 24) :
				     (unsigned)rl.rlim_cur - 64;
	}
	*out = p;
	return 0;
fail:
	fsp_free(p);
	return rc;
}

void fsp_free(struct fsp *p)
{
	if (!p)
		return;
	for (uint32_t i = 0; i < p->n_fhs; i++)
		if (p->fhs[i].fd >= 0)
			close(p->fhs[i].fd);
	for (uint32_t i = 0; i < p->n_nodes; i++)
		if (p->nodes[i].fd >= 0)
			close(p->nodes[i].fd);
	if (p->proc_fd >= 0)
		close(p->proc_fd);
	for (size_t i = 0; i < p->n_hidden; i++)
		free(p->hidden[i]);
	free(p->hidden);
	free(p->root_path);
	free(p->nodes);
	free(p->hash);
	free(p->fhs);
	free(p);
}

unsigned fsp_open_fds(const struct fsp *p)
{
	return p->fds;
}
