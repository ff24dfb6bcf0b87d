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
#include "devices/fs_passthrough_priv.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

/* The protected names (.env, secrets.env, kbox.yaml) and the copies that
 * editors and tools leave beside them: any suffix (NAME~, NAME.bak,
 * NAME.save, NAME.orig, NAME.~1~, .env.local), a '.' or '#' in front
 * (vim's .NAME.swp, emacs's #NAME#, rsync's .NAME.XXXXXX) and emacs's
 * lock .#NAME.  Matched without regard to case (fs_passthrough_hidden_at). */
const char *const FS_PASSTHROUGH_DEFAULT_HIDDEN[] = {
	".env*", "[.#].env*", ".#.env*",
	"secrets.env*", "[.#]secrets.env*", ".#secrets.env*",
	"kbox.yaml*", "[.#]kbox.yaml*", ".#kbox.yaml*",
	NULL
};

/* The parent directory for a name operation, after the name checks; lock
 * held.  On success the directory is held (fs_passthrough_drop/fs_passthrough_put): its index in
 * *di and its fd in *dfd.  hidden_err is what a hidden name gives (ENOENT
 * to read, EACCES to create). */
static int fs_passthrough_dir_for(struct fs_passthrough *p, uint64_t parent, const char *name,
		       int hidden_err, uint32_t *di, int *dfd)
{
	struct fs_passthrough_node *d = fs_passthrough_node(p, parent);

	if (!d)
		return -ESTALE;
	if (d->type != S_IFDIR)
		return -ENOTDIR;
	int rc = fs_passthrough_check_name(name);
	if (rc < 0)
		return rc;
	int fd = fs_passthrough_node_fd(p, d);
	if (fd < 0)
		return fd;
	if (fs_passthrough_hidden(p, fd, name) != 0)
		return hidden_err;
	*di = fs_passthrough_index(p, d);
	*dfd = fd;
	fs_passthrough_hold(p, *di);
	return 0;
}

/* Counts one lookup of the inode st, found as name in directory node
 * parent: the known node, or a new one without an fd; lock held.  With
 * held, the node is also held for the caller. */
static int fs_passthrough_remember(struct fs_passthrough *p, uint32_t parent, const char *name,
			const struct stat *st, struct fuse_fs_entry *e,
			uint32_t *held)
{
	uint32_t i;
	struct fs_passthrough_node *n = fs_passthrough_find(p, st->st_dev, st->st_ino);

	if (n && n->type == (st->st_mode & S_IFMT)) {
		i = fs_passthrough_index(p, n);
		fs_passthrough_rename_node(p, i, parent, name);
	} else {
		/* A known (dev, ino) of another type: the inode number was
		 * reused after the old file went away. */
		if (n)
			fs_passthrough_unhash(p, fs_passthrough_index(p, n));
		int64_t r = fs_passthrough_insert(p, st, parent, name);
		if (r < 0)
			return (int)r;
		i = (uint32_t)r;
	}
	p->nodes[i].nlookup++;
	e->nodeid = (uint64_t)i + 1;
	e->st = *st;
	if (held) {
		fs_passthrough_hold(p, i);
		*held = i;
	}
	return 0;
}

/* One counted lookup of name in directory node parent, whose open fd is
 * dirfd (the node's own or a handle's; the caller holds it); called
 * without the lock.  One fstatat, which follows nothing and runs unlocked:
 * the node's fd is opened only when an operation needs it.  drop_parent
 * also drops the caller's hold on parent; held as for fs_passthrough_remember.
 * listed: name comes from the directory's own listing, so it is the
 * directory's spelling (fs_passthrough_spelling). */
static int fs_passthrough_lookup_at(struct fs_passthrough *p, uint32_t parent, int dirfd,
			 const char *name, struct fuse_fs_entry *e,
			 bool drop_parent, uint32_t *held, bool listed)
{
	struct stat st;
	int rc = 0;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		rc = -errno;
	fs_passthrough_lock(p);
	if (rc == 0 && !listed)
		rc = fs_passthrough_spelling(p, parent, dirfd, name, &st);
	if (rc == 0)
		rc = fs_passthrough_remember(p, parent, name, &st, e, held);
	if (drop_parent)
		fs_passthrough_drop(p, parent);
	fs_passthrough_unlock(p);
	return rc;
}

/* fs_passthrough_lookup_at of a name the guest gave. */
static int fs_passthrough_lookup_in(struct fs_passthrough *p, uint32_t parent, int dirfd,
			 const char *name, struct fuse_fs_entry *e,
			 bool drop_parent, uint32_t *held)
{
	return fs_passthrough_lookup_at(p, parent, dirfd, name, e, drop_parent, held, false);
}

static int fs_passthrough_lookup(void *be, uint64_t parent, const char *name,
		      struct fuse_fs_entry *e)
{
	struct fs_passthrough *p = be;
	uint32_t di;
	int dfd;

	fs_passthrough_lock(p);
	int rc = fs_passthrough_dir_for(p, parent, name, -ENOENT, &di, &dfd);
	fs_passthrough_unlock(p);
	return rc < 0 ? rc : fs_passthrough_lookup_in(p, di, dfd, name, e, true, NULL);
}

static void fs_passthrough_forget(void *be, uint64_t nodeid, uint64_t nlookup)
{
	struct fs_passthrough *p = be;

	fs_passthrough_lock(p);
	fs_passthrough_forget_locked(p, nodeid, nlookup);
	fs_passthrough_unlock(p);
}

static void fs_passthrough_proc_name(int fd, char *buf, size_t size)
{
	snprintf(buf, size, "%d", fd);
}

/* Absolute /proc path of an fd, for calls that only take a path. */
static void fs_passthrough_proc_path(int fd, char *buf, size_t size)
{
	snprintf(buf, size, "/proc/self/fd/%d", fd);
}

static int fs_passthrough_getattr(void *be, uint64_t nodeid, uint64_t fh, struct stat *st)
{
	struct fs_passthrough *p = be;
	uint32_t i;
	int rc;

	fs_passthrough_lock(p);
	struct fs_passthrough_handle *h = fh == FUSE_FS_NO_FH ? NULL : fs_passthrough_fh(p, fh, false);
	struct fs_passthrough_node *n = fs_passthrough_node(p, nodeid);
	/* Only a handle of this very node answers for it, as in SETATTR: a
	 * guest naming another file's handle gets the node's attributes. */
	if (h && n && h->node == fs_passthrough_index(p, n)) {
		h->busy++;
		int hfd = h->fd;
		fs_passthrough_unlock(p);
		rc = fstat(hfd, st) < 0 ? -errno : 0;
		fs_passthrough_fh_put(p, fh);
		return rc;
	}
	int fd = fs_passthrough_get(p, nodeid, &i);
	fs_passthrough_unlock(p);
	if (fd < 0)
		return fd;
	rc = fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
	fs_passthrough_put(p, i);
	return rc;
}

/* SETATTR on fd: an open handle's (then fchmod and friends) or else the
 * node's O_PATH fd (then the *at and /proc forms).  type: the node's.
 * The owner goes first: a chown the host refuses (EPERM) then changes
 * nothing, and the mode set after it is not cleared by it.  chmod works
 * on FIFOs and sockets too (it opens nothing); a symlink has no mode of
 * its own, and device nodes stay untouched. */
static int fs_passthrough_setattr_fd(mode_t type, int fd, bool handle,
			  const struct fuse_fs_setattr *sa, struct stat *st)
{
	char path[40];

	fs_passthrough_proc_path(fd, path, sizeof path);
	if (sa->valid & (FUSE_FS_SET_UID | FUSE_FS_SET_GID)) {
		uid_t u = sa->valid & FUSE_FS_SET_UID ? sa->uid : (uid_t)-1;
		gid_t g = sa->valid & FUSE_FS_SET_GID ? sa->gid : (gid_t)-1;
		if (fchownat(fd, "", u, g, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
	}
	if (sa->valid & FUSE_FS_SET_MODE) {
		mode_t m = sa->mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID);
		if (type != S_IFREG && type != S_IFDIR && type != S_IFIFO &&
		    type != S_IFSOCK)
			return -EOPNOTSUPP;
		if ((handle ? fchmod(fd, m) : chmod(path, m)) < 0)
			return -errno;
	}
	if (sa->valid & FUSE_FS_SET_SIZE) {
		if (type != S_IFREG)
			return type == S_IFDIR ? -EISDIR : -EINVAL;
		if ((handle ? ftruncate(fd, sa->size) : truncate(path, sa->size)) < 0)
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
		if (utimensat(fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
	}
	return fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

static int fs_passthrough_setattr(void *be, uint64_t nodeid, uint64_t fh,
		       const struct fuse_fs_setattr *sa, struct stat *st)
{
	struct fs_passthrough *p = be;
	uint32_t i;
	int rc;

	fs_passthrough_lock(p);
	struct fs_passthrough_node *n = fs_passthrough_node(p, nodeid);
	if (!n || p->ro) {
		fs_passthrough_unlock(p);
		return n ? -EROFS : -ESTALE;
	}
	mode_t type = n->type;
	/* A handle of this very inode spares opening the node's fd (tar
	 * sets times and modes through the file it wrote). */
	struct fs_passthrough_handle *h = fh == FUSE_FS_NO_FH ? NULL : fs_passthrough_fh(p, fh, false);
	if (h && h->node == fs_passthrough_index(p, n)) {
		h->busy++;
		int hfd = h->fd;
		fs_passthrough_unlock(p);
		rc = fs_passthrough_setattr_fd(type, hfd, true, sa, st);
		fs_passthrough_fh_put(p, fh);
		return rc;
	}
	int fd = fs_passthrough_get(p, nodeid, &i);
	fs_passthrough_unlock(p);
	if (fd < 0)
		return fd;
	rc = fs_passthrough_setattr_fd(type, fd, false, sa, st);
	fs_passthrough_put(p, i);
	return rc;
}

static int fs_passthrough_readlink(void *be, uint64_t nodeid, char *buf, size_t size)
{
	struct fs_passthrough *p = be;
	uint32_t i;

	fs_passthrough_lock(p);
	struct fs_passthrough_node *n = fs_passthrough_node(p, nodeid);
	int fd = !n ? -ESTALE : n->type != S_IFLNK ? -EINVAL : fs_passthrough_get(p, nodeid, &i);
	fs_passthrough_unlock(p);
	if (fd < 0)
		return fd;
	ssize_t len = readlinkat(fd, "", buf, size);
	int rc = len < 0 ? -errno : (int)len;
	fs_passthrough_put(p, i);
	return rc;
}

/* Checks shared by everything that creates a name; called without the
 * lock, holds the directory on success as fs_passthrough_dir_for. */
static int fs_passthrough_new_name(struct fs_passthrough *p, uint64_t parent, const char *name,
			uint32_t *di, int *dfd)
{
	if (p->ro)
		return -EROFS;
	fs_passthrough_lock(p);
	int rc = fs_passthrough_dir_for(p, parent, name, -EACCES, di, dfd);
	fs_passthrough_unlock(p);
	return rc;
}

static int fs_passthrough_symlink(void *be, uint64_t parent, const char *name,
		       const char *target, struct fuse_fs_entry *e)
{
	struct fs_passthrough *p = be;
	uint32_t di;
	int dfd;
	int rc = fs_passthrough_new_name(p, parent, name, &di, &dfd);

	if (rc < 0)
		return rc;
	if (symlinkat(target, dfd, name) < 0) {
		rc = -errno;
		fs_passthrough_put(p, di);
		return rc;
	}
	return fs_passthrough_lookup_in(p, di, dfd, name, e, true, NULL);
}

static mode_t fs_passthrough_perm(mode_t mode)
{
	return mode & 01777 & ~(mode_t)(S_ISUID | S_ISGID);
}

static int fs_passthrough_mknod(void *be, uint64_t parent, const char *name, mode_t mode,
		     dev_t rdev, struct fuse_fs_entry *e)
{
	struct fs_passthrough *p = be;
	uint32_t di;
	int dfd;
	int rc = fs_passthrough_new_name(p, parent, name, &di, &dfd);

	if (rc < 0)
		return rc;
	/* Device nodes would give the guest's files a way to the host's
	 * devices.  FIFOs and sockets are what build tools, test suites and
	 * git's fsmonitor make in a project: the guest kernel serves them
	 * itself (the server never opens one: OPEN reopens regular files
	 * only), and on the host they are plain names that lead nowhere. */
	mode_t type = mode & S_IFMT;
	if (type == 0)
		type = S_IFREG;
	if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK)
		rc = -EPERM;
	else if (mknodat(dfd, name, type | fs_passthrough_perm(mode), 0) < 0)
		rc = -errno;
	if (rc < 0) {
		fs_passthrough_put(p, di);
		return rc;
	}
	return fs_passthrough_lookup_in(p, di, dfd, name, e, true, NULL);
}

static int fs_passthrough_mkdir(void *be, uint64_t parent, const char *name, mode_t mode,
		     struct fuse_fs_entry *e)
{
	struct fs_passthrough *p = be;
	uint32_t di;
	int dfd;
	int rc = fs_passthrough_new_name(p, parent, name, &di, &dfd);

	if (rc < 0)
		return rc;
	if (mkdirat(dfd, name, fs_passthrough_perm(mode)) < 0) {
		rc = -errno;
		fs_passthrough_put(p, di);
		return rc;
	}
	return fs_passthrough_lookup_in(p, di, dfd, name, e, true, NULL);
}

/* The known node that name in dirfd is, or FS_PASSTHROUGH_NONE; lock held. */
static uint32_t fs_passthrough_node_at(struct fs_passthrough *p, int dirfd, const char *name)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return FS_PASSTHROUGH_NONE;
	struct fs_passthrough_node *n = fs_passthrough_find(p, st.st_dev, st.st_ino);
	return n && n->type == (st.st_mode & S_IFMT) ? fs_passthrough_index(p, n) : FS_PASSTHROUGH_NONE;
}

/* name in directory node dir is about to go (unlink, rmdir, rename over
 * it); lock held.  If a node is known by that name, open its fd now and
 * keep it: the guest may still use the inode (an open file, another hard
 * link) and it could not be reopened by name any more. */
static void fs_passthrough_losing_name(struct fs_passthrough *p, uint32_t dir, int dirfd, const char *name)
{
	uint32_t i = fs_passthrough_node_at(p, dirfd, name);
	if (i == FS_PASSTHROUGH_NONE || i == 0)
		return;
	struct fs_passthrough_node *n = &p->nodes[i];
	if (n->nameless || n->parent != dir || strcmp(n->name, name) != 0)
		return;
	if (fs_passthrough_node_fd(p, n) < 0)
		return; /* then it goes stale, as if the host had removed it */
	n->nameless = true;
	fs_passthrough_pin(p, i);
}

/* UNLINK and RMDIR run under the lock whole: the node losing its name is
 * pinned before the name goes, with no reopen by that name in between. */
static int fs_passthrough_remove_name(void *be, uint64_t parent, const char *name,
			   int flags)
{
	struct fs_passthrough *p = be;
	uint32_t di;
	int dfd;

	if (p->ro)
		return -EROFS;
	fs_passthrough_lock(p);
	int rc = fs_passthrough_dir_for(p, parent, name, -ENOENT, &di, &dfd);
	if (rc == 0) {
		rc = fs_passthrough_spelling_at(p, di, dfd, name);
		if (rc == 0) {
			fs_passthrough_losing_name(p, di, dfd, name);
			rc = unlinkat(dfd, name, flags) < 0 ? -errno : 0;
		}
		fs_passthrough_drop(p, di);
	}
	fs_passthrough_unlock(p);
	return rc;
}

static int fs_passthrough_unlink(void *be, uint64_t parent, const char *name)
{
	return fs_passthrough_remove_name(be, parent, name, 0);
}

static int fs_passthrough_rmdir(void *be, uint64_t parent, const char *name)
{
	return fs_passthrough_remove_name(be, parent, name, AT_REMOVEDIR);
}

/* The path from the root of name in directory dirfd, into buf. */
static int fs_passthrough_path_of(struct fs_passthrough *p, int dirfd, const char *name, char *buf)
{
	int rc = fs_passthrough_rel_path(p, dirfd, buf, PATH_MAX);
	if (rc < 0)
		return rc;
	if (buf[0])
		strcat(buf, "/");
	strcat(buf, name);
	return 0;
}

/* RENAME's check for path patterns (fs_passthrough_moves_hidden), for the source
 * and, with RENAME_EXCHANGE, the target too, since both move.  Only
 * directories are checked: nothing lies below anything else.  Lock
 * held.  -EACCES when the rename would unhide something. */
static int fs_passthrough_rename_guard(struct fs_passthrough *p, int dfd, const char *name, int ndfd,
			    const char *newname, unsigned flags)
{
	char src[PATH_MAX + NAME_MAX + 2], dst[PATH_MAX + NAME_MAX + 2];
	struct stat st;

	if (!fs_hidden_needs_path(p->hid))
		return 0;
	int rc = fs_passthrough_path_of(p, dfd, name, src);
	if (rc == 0)
		rc = fs_passthrough_path_of(p, ndfd, newname, dst);
	if (rc < 0)
		return -EACCES;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISDIR(st.st_mode) && fs_hidden_moves_hidden(p->hid, src, dst))
		return -EACCES;
	if ((flags & RENAME_EXCHANGE) &&
	    fstatat(ndfd, newname, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISDIR(st.st_mode) && fs_hidden_moves_hidden(p->hid, dst, src))
		return -EACCES;
	return 0;
}

/* Lock held: the host rename and the nodes' new names change together. */
static int fs_passthrough_rename_locked(struct fs_passthrough *p, uint64_t parent, const char *name,
			     uint64_t newparent, const char *newname,
			     unsigned flags)
{
	uint32_t di, ndi;
	int dfd, ndfd;

	int rc = fs_passthrough_dir_for(p, parent, name, -ENOENT, &di, &dfd);
	if (rc < 0)
		return rc;
	rc = fs_passthrough_dir_for(p, newparent, newname, -EACCES, &ndi, &ndfd);
	if (rc < 0) {
		fs_passthrough_drop(p, di);
		return rc;
	}
	rc = fs_passthrough_spelling_at(p, di, dfd, name);
	if (rc == 0 && fs_passthrough_spelling_at(p, ndi, ndfd, newname) < 0)
		rc = -EACCES;
	if (rc == 0)
		rc = fs_passthrough_rename_guard(p, dfd, name, ndfd, newname, flags);
	if (rc < 0) {
		fs_passthrough_drop(p, ndi);
		fs_passthrough_drop(p, di);
		return rc;
	}
	/* The nodes keep the names they are reopened by. */
	uint32_t moved = fs_passthrough_node_at(p, dfd, name);
	uint32_t other = FS_PASSTHROUGH_NONE;
	if (flags & RENAME_EXCHANGE)
		other = fs_passthrough_node_at(p, ndfd, newname);
	else if (!(flags & RENAME_NOREPLACE))
		fs_passthrough_losing_name(p, ndi, ndfd, newname);
	if (renameat2(dfd, name, ndfd, newname, flags) < 0) {
		rc = -errno;
	} else {
		if (moved != FS_PASSTHROUGH_NONE)
			fs_passthrough_rename_node(p, moved, ndi, newname);
		if (other != FS_PASSTHROUGH_NONE)
			fs_passthrough_rename_node(p, other, di, name);
	}
	fs_passthrough_drop(p, ndi);
	fs_passthrough_drop(p, di);
	return rc;
}

static int fs_passthrough_rename(void *be, uint64_t parent, const char *name,
		      uint64_t newparent, const char *newname, unsigned flags)
{
	struct fs_passthrough *p = be;

	if (p->ro)
		return -EROFS;
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	fs_passthrough_lock(p);
	int rc = fs_passthrough_rename_locked(p, parent, name, newparent, newname, flags);
	fs_passthrough_unlock(p);
	return rc;
}

static int fs_passthrough_link(void *be, uint64_t nodeid, uint64_t newparent,
		    const char *newname, struct fuse_fs_entry *e)
{
	struct fs_passthrough *p = be;
	uint32_t di, ni;
	int dfd, fd;
	char name[32];

	fs_passthrough_lock(p);
	struct fs_passthrough_node *n = fs_passthrough_node(p, nodeid);
	fs_passthrough_unlock(p);
	if (!n)
		return -ESTALE;
	int rc = fs_passthrough_new_name(p, newparent, newname, &di, &dfd);
	if (rc < 0)
		return rc;
	fs_passthrough_lock(p);
	n = fs_passthrough_node(p, nodeid);
	if (!n)
		fd = -ESTALE;
	else if (n->type == S_IFDIR)
		fd = -EPERM;
	else
		fd = fs_passthrough_get(p, nodeid, &ni);
	fs_passthrough_unlock(p);
	if (fd < 0) {
		fs_passthrough_put(p, di);
		return fd;
	}
	rc = fs_passthrough_check_current(p, fd);
	if (rc == 0 && linkat(fd, "", dfd, newname, AT_EMPTY_PATH) < 0) {
		rc = -errno;
		if (rc == -ENOENT) {
			fs_passthrough_proc_name(fd, name, sizeof name);
			rc = linkat(p->proc_fd, name, dfd, newname,
				    AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
		}
	}
	fs_passthrough_put(p, ni);
	if (rc < 0) {
		fs_passthrough_put(p, di);
		return rc;
	}
	return fs_passthrough_lookup_in(p, di, dfd, newname, e, true, NULL);
}

/* Open flags the host honours; everything else the guest sends is
 * dropped (O_CREAT, O_PATH, O_DIRECT, O_TMPFILE, ...). */
static int fs_passthrough_open_flags(struct fs_passthrough *p, int flags, int *out)
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

/* Node i's O_PATH fd reopened for I/O; called without the lock, with i
 * held and an fd reserved.  Only a regular file is reopened, and the
 * magic link names that inode itself. */
static int fs_passthrough_reopen(struct fs_passthrough *p, uint32_t i, int flags)
{
	char name[32];
	int pfd;

	fs_passthrough_lock(p);
	mode_t type = p->nodes[i].type;
	if (type == S_IFDIR)
		pfd = -EISDIR;
	else if (type == S_IFLNK)
		pfd = -ELOOP;
	else if (type != S_IFREG)
		pfd = -EACCES;
	else
		pfd = fs_passthrough_node_fd(p, &p->nodes[i]);
	fs_passthrough_unlock(p);
	if (pfd < 0)
		return pfd;
	int rc = fs_passthrough_check_current(p, pfd);
	if (rc < 0)
		return rc;
	fs_passthrough_proc_name(pfd, name, sizeof name);
	int fd = openat(p->proc_fd, name, flags);
	return fd < 0 ? -errno : fd;
}

/* Lock held: a handle for fd (fd < 0: the open's errno, and the reserved
 * place goes back). */
static int fs_passthrough_fh_done(struct fs_passthrough *p, int fd, bool dir, uint32_t node,
		       uint64_t *fh)
{
	if (fd < 0) {
		fs_passthrough_unreserve(p);
		return fd;
	}
	return fs_passthrough_fh_new(p, fd, dir, node, fh);
}

static int fs_passthrough_open(void *be, uint64_t nodeid, int flags, uint64_t *fh)
{
	struct fs_passthrough *p = be;
	uint32_t i = 0;
	int hf;

	fs_passthrough_lock(p);
	struct fs_passthrough_node *n = fs_passthrough_node(p, nodeid);
	int rc = !n ? -ESTALE : fs_passthrough_open_flags(p, flags, &hf);
	if (rc == 0)
		rc = fs_passthrough_reserve(p);
	if (rc == 0) {
		i = fs_passthrough_index(p, n);
		fs_passthrough_hold(p, i);
	}
	fs_passthrough_unlock(p);
	if (rc < 0)
		return rc;
	int fd = fs_passthrough_reopen(p, i, hf);
	fs_passthrough_lock(p);
	rc = fs_passthrough_fh_done(p, fd, false, i, fh);
	fs_passthrough_drop(p, i);
	fs_passthrough_unlock(p);
	return rc;
}

static int fs_passthrough_create(void *be, uint64_t parent, const char *name, mode_t mode,
		      int flags, struct fuse_fs_entry *e, uint64_t *fh)
{
	struct fs_passthrough *p = be;
	uint32_t di, ni = FS_PASSTHROUGH_NONE;
	int dfd, hf, fd;
	struct stat st;
	int rc = fs_passthrough_new_name(p, parent, name, &di, &dfd);

	e->created = false;
	if (rc < 0)
		return rc;
	fs_passthrough_lock(p);
	rc = fs_passthrough_open_flags(p, flags, &hf);
	if (rc == 0)
		rc = fs_passthrough_reserve(p);
	if (rc < 0)
		fs_passthrough_drop(p, di);
	fs_passthrough_unlock(p);
	if (rc < 0)
		return rc;
	fd = fs_passthrough_open_beneath(dfd, name, (uint64_t)(hf | O_CREAT | O_EXCL),
			      fs_passthrough_perm(mode));
	if (fd == -EEXIST && !(flags & O_EXCL)) {
		/* An existing name is opened only if it is a regular file. */
		rc = fs_passthrough_lookup_in(p, di, dfd, name, e, false, &ni);
		if (rc == 0)
			fd = fs_passthrough_reopen(p, ni, hf);
		else
			fd = rc;
	} else if (fd >= 0) {
		/* The node is the file just made; should the host swap the
		 * name, a reopen by name will see it and give ESTALE. */
		rc = fstat(fd, &st) < 0 ? -errno : 0;
		e->created = true;
		fs_passthrough_lock(p);
		if (rc == 0)
			rc = fs_passthrough_remember(p, di, name, &st, e, &ni);
		fs_passthrough_unlock(p);
		if (rc < 0) {
			close(fd);
			fd = rc;
		}
	}
	fs_passthrough_lock(p);
	rc = fs_passthrough_fh_done(p, fd, false, ni, fh);
	if (ni != FS_PASSTHROUGH_NONE) {
		if (rc < 0)
			fs_passthrough_forget_locked(p, e->nodeid, 1);
		fs_passthrough_drop(p, ni);
	}
	fs_passthrough_drop(p, di);
	fs_passthrough_unlock(p);
	return rc;
}

static ssize_t fs_passthrough_read(void *be, uint64_t fh, const struct iovec *iov,
			int iovcnt, off_t off)
{
	struct fs_passthrough *p = be;
	int fd = fs_passthrough_fh_get(p, fh, false, NULL);

	if (fd < 0)
		return fd;
	ssize_t n = preadv(fd, iov, iovcnt, off);
	if (n < 0)
		n = -errno;
	fs_passthrough_fh_put(p, fh);
	return n;
}

static ssize_t fs_passthrough_write(void *be, uint64_t fh, const struct iovec *iov,
			 int iovcnt, off_t off)
{
	struct fs_passthrough *p = be;
	int fd = fs_passthrough_fh_get(p, fh, false, NULL);

	if (fd < 0)
		return fd;
	ssize_t n = -EROFS;
	if (!p->ro && (n = pwritev(fd, iov, iovcnt, off)) < 0)
		n = -errno;
	fs_passthrough_fh_put(p, fh);
	return n;
}

static int fs_passthrough_flush(void *be, uint64_t fh)
{
	int fd = fs_passthrough_fh_get(be, fh, false, NULL);

	if (fd < 0)
		return fd;
	fs_passthrough_fh_put(be, fh);
	return 0;
}

static int fs_passthrough_release(void *be, uint64_t fh)
{
	return fs_passthrough_fh_close(be, fh, false);
}

static int fs_passthrough_fsync_fh(struct fs_passthrough *p, uint64_t fh, bool dir, bool datasync)
{
	int fd = fs_passthrough_fh_get(p, fh, dir, NULL);

	if (fd < 0)
		return fd;
	int rc = (datasync ? fdatasync(fd) : fsync(fd)) < 0 ? -errno : 0;
	fs_passthrough_fh_put(p, fh);
	return rc;
}

static int fs_passthrough_fsync(void *be, uint64_t fh, bool datasync)
{
	return fs_passthrough_fsync_fh(be, fh, false, datasync);
}

/* A new read-only fd of directory node nodeid, counted under the cap, with
 * the node held in *idx: fs_passthrough_close_dir gives back all three, and a failed
 * open gives them back itself.  Called without the lock; takes it for the
 * table work and opens without it. */
static int fs_passthrough_open_dir(struct fs_passthrough *p, uint64_t nodeid, uint32_t *idx)
{
	uint32_t i;

	fs_passthrough_lock(p);
	struct fs_passthrough_node *n = fs_passthrough_node(p, nodeid);
	int nfd = !n ? -ESTALE : n->type != S_IFDIR ? -ENOTDIR : fs_passthrough_get(p, nodeid, &i);
	if (nfd >= 0) {
		int rc = fs_passthrough_reserve(p);
		if (rc < 0) {
			fs_passthrough_drop(p, i);
			nfd = rc;
		}
	}
	fs_passthrough_unlock(p);
	if (nfd < 0)
		return nfd;
	int fd = fs_passthrough_check_current(p, nfd);
	if (fd == 0) {
		fd = openat(nfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			fd = -errno;
	}
	if (fd < 0) {
		fs_passthrough_lock(p);
		fs_passthrough_unreserve(p);
		fs_passthrough_drop(p, i);
		fs_passthrough_unlock(p);
		return fd;
	}
	*idx = i;
	return fd;
}

/* Closes an fd of fs_passthrough_open_dir and lets its node go. */
static void fs_passthrough_close_dir(struct fs_passthrough *p, int fd, uint32_t i)
{
	close(fd);
	fs_passthrough_lock(p);
	fs_passthrough_unreserve(p);
	fs_passthrough_drop(p, i);
	fs_passthrough_unlock(p);
}

static int fs_passthrough_opendir(void *be, uint64_t nodeid, uint64_t *fh)
{
	struct fs_passthrough *p = be;
	uint32_t i;
	int fd = fs_passthrough_open_dir(p, nodeid, &i);

	if (fd < 0)
		return fd;
	/* The handle takes over the fd's counted place. */
	fs_passthrough_lock(p);
	int rc = fs_passthrough_fh_new(p, fd, true, i, fh);
	fs_passthrough_drop(p, i);
	fs_passthrough_unlock(p);
	return rc;
}

/* Whether the guest already holds the inode ino of directory node dir's
 * device as name in dir (a LOOKUP it has not forgotten); lock taken. */
static bool fs_passthrough_held_here(struct fs_passthrough *p, uint32_t dir, ino_t ino,
			  const char *name)
{
	fs_passthrough_lock(p);
	struct fs_passthrough_node *n = fs_passthrough_find(p, p->nodes[dir].dev, ino);
	bool held = n && n->nlookup > 0 && !n->nameless && n->parent == dir &&
		    n->name && strcmp(n->name, name) == 0;
	fs_passthrough_unlock(p);
	return held;
}

/* Emits one host entry; returns 1 to go on, 0 when the reply is full.
 * Called without the lock, with dirfd a busy handle's fd or a listing's
 * own (fs_passthrough_open_dir). */
static int fs_passthrough_emit(struct fs_passthrough *p, uint32_t dir, int dirfd, const struct fs_passthrough_dirent64 *de,
		    const char *name, bool plus, fuse_fs_fill_fn fill,
		    fuse_fs_fits_fn fits, void *ctx)
{
	struct fuse_fs_entry e;
	bool dots = strcmp(name, ".") == 0 || strcmp(name, "..") == 0;

	if (!dots && fs_passthrough_hidden(p, dirfd, name) != 0)
		return 1;
	if (!plus || dots)
		return fill(ctx, name, de->d_ino, de->d_type,
			    (uint64_t)de->d_off, NULL);
	if (!fits(ctx, strlen(name)))
		return 0;
	/* An entry the guest looked up already, under this name, gets no
	 * attributes: a READDIRPLUS entry with node id 0 tells the kernel to
	 * keep the dentry it has.  git status lists every directory right
	 * after lstat'ing every tracked file in it; this spares an fstatat
	 * here and the kernel's refresh of the dentry for each of them.  A
	 * mount point's d_ino is not the inode a lookup found, so it never
	 * matches and takes the full path. */
	if (fs_passthrough_held_here(p, dir, (ino_t)de->d_ino, name))
		return fill(ctx, name, de->d_ino, de->d_type,
			    (uint64_t)de->d_off, NULL);
	/* The same counted lookup as LOOKUP's, through the handle's fd: an
	 * fstatat, and a known inode is found by (dev, ino). */
	if (fs_passthrough_lookup_at(p, dir, dirfd, name, &e, false, NULL, true) < 0)
		return fill(ctx, name, de->d_ino, de->d_type,
			    (uint64_t)de->d_off, NULL);
	if (!fill(ctx, name, de->d_ino, de->d_type, (uint64_t)de->d_off, &e)) {
		fs_passthrough_forget(p, e.nodeid, 1);
		return 0;
	}
	return 1;
}

/* The directory listing itself, on a busy handle's fd or a listing's own.
 * The kernel serialises READDIRs of one open directory; should a guest send
 * two at once on one handle, the shared file offset only garbles its own
 * listing. */
static int fs_passthrough_list(struct fs_passthrough *p, int fd, uint32_t node, uint64_t off,
		    bool plus, fuse_fs_fill_fn fill, fuse_fs_fits_fn fits,
		    void *ctx)
{
	char buf[8192] __attribute__((aligned(8)));
	char name[NAME_MAX + 1];

	if (off > (uint64_t)INT64_MAX)
		return 0;
	/* The offset is an opaque cookie from a previous reply; the host
	 * filesystem validates it. */
	if (lseek(fd, (off_t)off, SEEK_SET) < 0)
		return -errno;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		for (long pos = 0; pos < n;) {
			const struct fs_passthrough_dirent64 *de =
				(const struct fs_passthrough_dirent64 *)(buf + pos);
			size_t rl = de->d_reclen, hl = offsetof(
					struct fs_passthrough_dirent64, d_name);
			if (rl <= hl || rl > (size_t)(n - pos))
				return -EIO;
			size_t nl = strnlen(de->d_name, rl - hl);
			if (nl == 0 || nl > NAME_MAX)
				return -EIO;
			memcpy(name, de->d_name, nl);
			name[nl] = '\0';
			if (!fs_passthrough_emit(p, node, fd, de, name, plus, fill, fits, ctx))
				return 0;
			pos += (long)rl;
		}
	}
}

static int fs_passthrough_readdir(void *be, uint64_t nodeid, uint64_t fh, uint64_t off,
		       bool plus, fuse_fs_fill_fn fill, fuse_fs_fits_fn fits,
		       void *ctx)
{
	struct fs_passthrough *p = be;
	uint32_t node;
	int rc;

	if (fh == FUSE_FS_NO_FH) {
		/* No OPENDIR: each READDIR opens the directory, goes to the
		 * offset and closes it.  Offsets are the host filesystem's
		 * d_off cookies, which hold across opens (NFS relies on it);
		 * a handle was seeked the same way before each listing. */
		int fd = fs_passthrough_open_dir(p, nodeid, &node);
		if (fd < 0)
			return fd;
		rc = fs_passthrough_list(p, fd, node, off, plus, fill, fits, ctx);
		fs_passthrough_close_dir(p, fd, node);
		return rc;
	}
	int fd = fs_passthrough_fh_get(p, fh, true, &node);

	if (fd < 0)
		return fd;
	rc = fs_passthrough_list(p, fd, node, off, plus, fill, fits, ctx);
	fs_passthrough_fh_put(p, fh);
	return rc;
}

static int fs_passthrough_releasedir(void *be, uint64_t fh)
{
	return fs_passthrough_fh_close(be, fh, true);
}

static int fs_passthrough_fsyncdir(void *be, uint64_t nodeid, uint64_t fh, bool datasync)
{
	struct fs_passthrough *p = be;

	if (fh != FUSE_FS_NO_FH)
		return fs_passthrough_fsync_fh(p, fh, true, datasync);
	uint32_t i;
	int fd = fs_passthrough_open_dir(p, nodeid, &i);
	if (fd < 0)
		return fd;
	int rc = (datasync ? fdatasync(fd) : fsync(fd)) < 0 ? -errno : 0;
	fs_passthrough_close_dir(p, fd, i);
	return rc;
}

static int fs_passthrough_statfs(void *be, uint64_t nodeid, struct statvfs *out)
{
	struct fs_passthrough *p = be;
	uint32_t i;
	int fd = fs_passthrough_get_unlocked(p, nodeid, &i);

	if (fd < 0)
		return fd;
	int rc = fstatvfs(fd, out) < 0 ? -errno : 0;
	fs_passthrough_put(p, i);
	return rc;
}

static int fs_passthrough_access(void *be, uint64_t nodeid, int mask)
{
	struct fs_passthrough *p = be;
	uint32_t i;

	fs_passthrough_lock(p);
	int fd = !fs_passthrough_node(p, nodeid) ? -ESTALE :
		 p->ro && (mask & W_OK) ? -EROFS :
					 fs_passthrough_get(p, nodeid, &i);
	fs_passthrough_unlock(p);
	if (fd < 0)
		return fd;
	int rc = faccessat(fd, "", mask, AT_EMPTY_PATH) < 0 ? -errno : 0;
	fs_passthrough_put(p, i);
	return rc;
}

/* Only the user.* namespace crosses: security.* (file capabilities!),
 * trusted.* and ACLs stay host matters. */
static bool fs_passthrough_xattr_ok(const char *name)
{
	return strncmp(name, "user.", 5) == 0 && name[5];
}

/* The /proc path of node nodeid's fd for an xattr call, the node held in
 * *idx (fs_passthrough_put after the call).  -EPERM: not a file or directory. */
static int fs_passthrough_xattr_node(struct fs_passthrough *p, uint64_t nodeid, char *path,
			  size_t size, uint32_t *idx)
{
	fs_passthrough_lock(p);
	struct fs_passthrough_node *n = fs_passthrough_node(p, nodeid);
	int fd = !n ? -ESTALE :
		 n->type != S_IFREG && n->type != S_IFDIR ? -EPERM :
							     fs_passthrough_get(p, nodeid, idx);
	fs_passthrough_unlock(p);
	if (fd < 0)
		return fd;
	int rc = fs_passthrough_check_current(p, fd);
	if (rc < 0) {
		fs_passthrough_put(p, *idx);
		return rc;
	}
	fs_passthrough_proc_path(fd, path, size);
	return 0;
}

static int fs_passthrough_getxattr(void *be, uint64_t nodeid, const char *name,
			void *buf, size_t size)
{
	char path[40];
	uint32_t i;
	int rc = fs_passthrough_xattr_node(be, nodeid, path, sizeof path, &i);

	if (rc == -EPERM)
		return -ENODATA;
	if (rc < 0)
		return rc;
	if (!fs_passthrough_xattr_ok(name)) {
		rc = -ENODATA;
	} else {
		ssize_t n = getxattr(path, name, size ? buf : NULL, size);
		rc = n < 0 ? -errno : (int)n;
	}
	fs_passthrough_put(be, i);
	return rc;
}

static int fs_passthrough_setxattr(void *be, uint64_t nodeid, const char *name,
			const void *value, size_t size, int flags)
{
	struct fs_passthrough *p = be;
	char path[40];
	uint32_t i;

	if (p->ro)
		return -EROFS;
	int rc = fs_passthrough_xattr_node(p, nodeid, path, sizeof path, &i);
	if (rc < 0)
		return rc;
	if (!fs_passthrough_xattr_ok(name))
		rc = -EOPNOTSUPP;
	else if (flags & ~(XATTR_CREATE | XATTR_REPLACE))
		rc = -EINVAL;
	else
		rc = setxattr(path, name, value, size, flags) < 0 ? -errno : 0;
	fs_passthrough_put(p, i);
	return rc;
}

/* The user.* names of path's list, into buf (size 0: the length only). */
static int fs_passthrough_list_user_xattrs(const char *path, char *buf, size_t size)
{
	char *all = malloc(FS_PASSTHROUGH_XATTR_LIST_MAX);
	int rc;

	if (!all)
		return -ENOMEM;
	ssize_t n = listxattr(path, all, FS_PASSTHROUGH_XATTR_LIST_MAX);
	if (n < 0) {
		rc = -errno;
		free(all);
		return rc;
	}
	size_t out = 0;
	for (ssize_t i = 0; i < n;) {
		size_t l = strnlen(all + i, (size_t)(n - i));
		if (l < (size_t)(n - i) && fs_passthrough_xattr_ok(all + i)) {
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

static int fs_passthrough_listxattr(void *be, uint64_t nodeid, char *buf, size_t size)
{
	char path[40];
	uint32_t i;
	int rc = fs_passthrough_xattr_node(be, nodeid, path, sizeof path, &i);

	if (rc == -EPERM)
		return 0;
	if (rc < 0)
		return rc;
	rc = fs_passthrough_list_user_xattrs(path, buf, size);
	fs_passthrough_put(be, i);
	return rc;
}

static int fs_passthrough_removexattr(void *be, uint64_t nodeid, const char *name)
{
	struct fs_passthrough *p = be;
	char path[40];
	uint32_t i;

	if (p->ro)
		return -EROFS;
	int rc = fs_passthrough_xattr_node(p, nodeid, path, sizeof path, &i);
	if (rc < 0)
		return rc;
	if (!fs_passthrough_xattr_ok(name))
		rc = -EOPNOTSUPP;
	else
		rc = removexattr(path, name) < 0 ? -errno : 0;
	fs_passthrough_put(p, i);
	return rc;
}

static int fs_passthrough_lseek(void *be, uint64_t fh, off_t off, int whence, off_t *res)
{
	int fd = fs_passthrough_fh_get(be, fh, false, NULL);

	if (fd < 0)
		return fd;
	/* SEEK_DATA/SEEK_HOLE only: the position they set is never used
	 * (I/O is positional), so racing calls on one handle are harmless. */
	off_t r = lseek(fd, off, whence);
	int rc = r < 0 ? -errno : 0;
	fs_passthrough_fh_put(be, fh);
	if (rc == 0)
		*res = r;
	return rc;
}

static int fs_passthrough_fallocate(void *be, uint64_t fh, int mode, off_t off, off_t len)
{
	struct fs_passthrough *p = be;
	const int ok[] = { 0, FALLOC_FL_KEEP_SIZE,
			   FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			   FALLOC_FL_ZERO_RANGE,
			   FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE };
	bool allowed = false;
	int fd = fs_passthrough_fh_get(p, fh, false, NULL);

	if (fd < 0)
		return fd;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		allowed |= mode == ok[i];
	int rc = p->ro ? -EROFS : !allowed ? -EOPNOTSUPP :
		 fallocate(fd, mode, off, len) < 0 ? -errno : 0;
	fs_passthrough_fh_put(p, fh);
	return rc;
}

/* Locks are open-file-description locks on the handle's host fd: they
 * conflict with host processes' locks too, and go away with the handle. */
static int fs_passthrough_getlk(void *be, uint64_t fh, struct flock *fl)
{
	int fd = fs_passthrough_fh_get(be, fh, false, NULL);

	if (fd < 0)
		return fd;
	fl->l_pid = 0;
	int rc = fcntl(fd, F_OFD_GETLK, fl) < 0 ? -errno : 0;
	fs_passthrough_fh_put(be, fh);
	return rc;
}

static int fs_passthrough_setlk(void *be, uint64_t fh, const struct flock *fl)
{
	struct flock l = *fl;
	int fd = fs_passthrough_fh_get(be, fh, false, NULL);

	if (fd < 0)
		return fd;
	l.l_pid = 0;
	int rc = 0;
	if (fcntl(fd, F_OFD_SETLK, &l) < 0)
		rc = errno == EACCES ? -EAGAIN : -errno;
	fs_passthrough_fh_put(be, fh);
	return rc;
}

const struct fuse_fs_ops fs_passthrough_ops = {
	.lookup = fs_passthrough_lookup,
	.forget = fs_passthrough_forget,
	.getattr = fs_passthrough_getattr,
	.setattr = fs_passthrough_setattr,
	.readlink = fs_passthrough_readlink,
	.symlink = fs_passthrough_symlink,
	.mknod = fs_passthrough_mknod,
	.mkdir = fs_passthrough_mkdir,
	.unlink = fs_passthrough_unlink,
	.rmdir = fs_passthrough_rmdir,
	.rename = fs_passthrough_rename,
	.link = fs_passthrough_link,
	.open = fs_passthrough_open,
	.create = fs_passthrough_create,
	.read = fs_passthrough_read,
	.write = fs_passthrough_write,
	.flush = fs_passthrough_flush,
	.release = fs_passthrough_release,
	.fsync = fs_passthrough_fsync,
	.opendir = fs_passthrough_opendir,
	.readdir = fs_passthrough_readdir,
	.releasedir = fs_passthrough_releasedir,
	.fsyncdir = fs_passthrough_fsyncdir,
	.statfs = fs_passthrough_statfs,
	.access = fs_passthrough_access,
	.getxattr = fs_passthrough_getxattr,
	.setxattr = fs_passthrough_setxattr,
	.listxattr = fs_passthrough_listxattr,
	.removexattr = fs_passthrough_removexattr,
	.lseek = fs_passthrough_lseek,
	.fallocate = fs_passthrough_fallocate,
	.getlk = fs_passthrough_getlk,
	.setlk = fs_passthrough_setlk,
	.reset = fs_passthrough_reset,
	.fork_save = fs_passthrough_fork_save,
	.fork_load = fs_passthrough_fork_load,
};

int fs_passthrough_new(const struct fs_passthrough_config *cfg, struct fs_passthrough **out)
{
	struct fs_passthrough *p;
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
	pthread_mutex_init(&p->mu, NULL);
	p->proc_fd = -1;
	p->free_node = FS_PASSTHROUGH_NONE;
	p->free_fh = FS_PASSTHROUGH_NONE;
	p->lru_head = p->lru_tail = FS_PASSTHROUGH_NONE;
	p->ro = cfg->readonly;
	const char *const *list = cfg->hidden.set ? cfg->hidden.list : FS_PASSTHROUGH_DEFAULT_HIDDEN;
	size_t nl = 0;
	if (cfg->hidden.set)
		nl = cfg->hidden.n;
	else
		while (FS_PASSTHROUGH_DEFAULT_HIDDEN[nl])
			nl++;
	rc = fs_hidden_new(list, nl, cfg->hidden.extra, cfg->hidden.n_extra, &p->hid);
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
	if (fstat(root, &st) < 0 || fs_passthrough_rehash(p, 256) < 0 ||
	    fs_passthrough_insert(p, &st, FS_PASSTHROUGH_NONE, NULL) != 0) {
		close(root);
		rc = -ENOMEM;
		goto fail;
	}
	/* The root keeps its fd for good, outside the cap and the LRU. */
	p->nodes[0].fd = root;
	p->nodes[0].nlookup = 1;
	p->lru_head = p->lru_tail = FS_PASSTHROUGH_NONE;
	fs_passthrough_proc_name(root, name, sizeof name);
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
	fs_passthrough_free(p);
	return rc;
}

void fs_passthrough_free(struct fs_passthrough *p)
{
	if (!p)
		return;
	for (uint32_t i = 0; i < p->n_fhs; i++)
		if (p->fhs[i].fd >= 0)
			close(p->fhs[i].fd);
	for (uint32_t i = 0; i < p->n_nodes; i++) {
		if (!p->nodes[i].used)
			continue;
		if (p->nodes[i].fd >= 0)
			close(p->nodes[i].fd);
		free(p->nodes[i].name);
	}
	if (p->proc_fd >= 0)
		close(p->proc_fd);
	fs_hidden_free(p->hid);
	free(p->root_path);
	free(p->nodes);
	free(p->hash);
	free(p->fhs);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
