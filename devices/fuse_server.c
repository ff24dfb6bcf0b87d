/* FUSE request decoding and reply encoding; see fuse_server.h.
 *
 * Every request is first copied (header and fixed arguments) into a private
 * bounce buffer, so the guest cannot change a field between its check and its
 * use.  Only WRITE payloads and READ results move between guest buffers and
 * the backend without a copy, as iovec slices whose bounds were checked.
 *
 * Several threads may handle requests at once: each call takes a scratch
 * buffer (bounce copy and reply staging) from a pool, and a read-write gate
 * lets ordinary requests run together while INIT, DESTROY and a transport
 * reset (which drop every inode and handle in the backend) wait for the
 * requests in flight and run alone. */
#include "devices/fuse_server.h"

#include "lib/errbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Oldest protocol minor we speak: 7.27 (Linux 4.16) has every field and
 * struct size the decoder relies on. */
#define FSRV_MIN_MINOR 27
/* Reply staging for variable-size replies (readdir, xattrs, readlink). */
#define FSRV_REPLY_MAX (64u * 1024 + 4096)
#define FSRV_XATTR_SIZE_MAX 65536u
#define FSRV_XATTR_NAME_MAX 255u
#define FSRV_SYMLINK_MAX 4095u

/* One call's scratch; the pool holds as many as calls ever ran at once. */
struct fsrv_buf {
	struct fsrv_buf *next;
	uint8_t req[sizeof(struct fuse_in_header) + FUSE_SERVER_MAX_ARGS];
	uint8_t rep[FSRV_REPLY_MAX]; /* staging for variable-size replies */
};

struct fuse_server {
	const struct fuse_fs_ops *ops;
	void *be;
	struct fuse_server_config cfg;
	/* Shared by every request; exclusive for INIT, DESTROY and reset.
	 * inited changes only under it exclusively. */
	pthread_rwlock_t gate;
	bool inited;
	/* The kernel opens directories without OPENDIR (set by INIT). */
	bool no_opendir;
	/* What INIT negotiated, kept for a fork (fuse_server_fork_save). */
	uint32_t minor, init_flags, max_readahead;
	bool destroyed; /* atomic: fuse_server_destroyed reads it ungated */
	pthread_mutex_t pool_mu;
	struct fsrv_buf *pool;
};

/* One request being served. */
struct fsrv_req {
	struct fuse_in_header h;
	const uint8_t *arg; /* arguments after the header, in the bounce buffer */
	size_t arglen, pos; /* pos: decode cursor into arg */
	int err;	    /* first decode error */
	uint8_t *rep;	    /* this call's reply staging (FSRV_REPLY_MAX) */
	const struct iovec *in;
	int in_cnt;
	const struct iovec *out;
	int out_cnt;
	size_t out_room;
};

static int iov_total(const struct iovec *v, int n, size_t *total)
{
	size_t t = 0;

	if (n < 0 || n > FUSE_SERVER_MAX_IOV || (n > 0 && !v))
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		if (v[i].iov_len > SIZE_MAX - t)
			return -EINVAL;
		t += v[i].iov_len;
	}
	*total = t;
	return 0;
}

/* Copies len bytes starting at byte off of an iovec list (caller checked
 * that off+len is within the total). */
static void iov_read(const struct iovec *v, int n, size_t off, void *dst,
		     size_t len)
{
	uint8_t *d = dst;

	for (int i = 0; i < n && len; i++) {
		if (off >= v[i].iov_len) {
			off -= v[i].iov_len;
			continue;
		}
		size_t k = v[i].iov_len - off;
		if (k > len)
			k = len;
		memcpy(d, (const uint8_t *)v[i].iov_base + off, k);
		d += k;
		len -= k;
		off = 0;
	}
}

static void iov_write(const struct iovec *v, int n, size_t off,
		      const void *src, size_t len)
{
	const uint8_t *s = src;

	for (int i = 0; i < n && len; i++) {
		if (off >= v[i].iov_len) {
			off -= v[i].iov_len;
			continue;
		}
		size_t k = v[i].iov_len - off;
		if (k > len)
			k = len;
		memcpy((uint8_t *)v[i].iov_base + off, s, k);
		s += k;
		len -= k;
		off = 0;
	}
}

/* Fills dst (room for max entries) with the sub-range [off, off+len) of v.
 * Returns the entry count; the caller checked the range is inside v. */
static int iov_slice(const struct iovec *v, int n, size_t off, size_t len,
		     struct iovec *dst, int max)
{
	int k = 0;

	for (int i = 0; i < n && len && k < max; i++) {
		if (off >= v[i].iov_len) {
			off -= v[i].iov_len;
			continue;
		}
		size_t c = v[i].iov_len - off;
		if (c > len)
			c = len;
		dst[k].iov_base = (uint8_t *)v[i].iov_base + off;
		dst[k].iov_len = c;
		k++;
		len -= c;
		off = 0;
	}
	return k;
}

/* Writes the header and body; a body that does not fit becomes -EINVAL. */
static ssize_t reply(struct fsrv_req *r, int err, const void *body,
		     size_t len)
{
	struct fuse_out_header oh;

	if (err > 0 || err < -4095)
		err = -EIO;
	if (err || len > r->out_room - sizeof oh) {
		if (!err)
			err = -EINVAL;
		len = 0;
	}
	oh.len = (uint32_t)(sizeof oh + len);
	oh.error = err;
	oh.unique = r->h.unique;
	iov_write(r->out, r->out_cnt, 0, &oh, sizeof oh);
	if (len)
		iov_write(r->out, r->out_cnt, sizeof oh, body, len);
	return (ssize_t)oh.len;
}

static ssize_t reply_err(struct fsrv_req *r, int err)
{
	return reply(r, err ? err : -EIO, NULL, 0);
}

/* Empty success reply, or the error rc. */
static ssize_t reply_status(struct fsrv_req *r, int rc)
{
	return reply(r, rc < 0 ? rc : 0, NULL, 0);
}

/* Copies the next fixed-size argument struct; on a short request records
 * -EINVAL and zero-fills dst. */
static bool take(struct fsrv_req *r, void *dst, size_t size)
{
	if (r->err || r->arglen - r->pos < size) {
		memset(dst, 0, size);
		if (!r->err)
			r->err = -EINVAL;
		return false;
	}
	memcpy(dst, r->arg + r->pos, size);
	r->pos += size;
	return true;
}

/* Next NUL-terminated string of at most max bytes (NUL excluded). */
static const char *take_str(struct fsrv_req *r, size_t max)
{
	if (r->err)
		return NULL;
	const char *p = (const char *)r->arg + r->pos;
	const char *nul = memchr(p, '\0', r->arglen - r->pos);
	if (!nul) {
		r->err = -EINVAL;
		return NULL;
	}
	size_t n = (size_t)(nul - p);
	if (n > max) {
		r->err = -ENAMETOOLONG;
		return NULL;
	}
	r->pos += n + 1;
	return p;
}

static const char *take_name(struct fsrv_req *r)
{
	const char *n = take_str(r, NAME_MAX);
	if (n && !*n) {
		r->err = -EINVAL;
		return NULL;
	}
	return n;
}

static void split_timeout(double t, uint64_t *sec, uint32_t *nsec)
{
	if (!(t > 0)) {
		*sec = 0;
		*nsec = 0;
		return;
	}
	if (t > 1e9)
		t = 1e9;
	*sec = (uint64_t)t;
	*nsec = (uint32_t)((t - (double)*sec) * 1e9);
	if (*nsec > 999999999u)
		*nsec = 999999999u;
}

/* The guest sees ids through the mount's map (idmap.h). */
static void fill_attr(const struct fuse_server *s, struct fuse_attr *a,
		      const struct stat *st)
{
	memset(a, 0, sizeof *a);
	a->ino = st->st_ino;
	a->size = (uint64_t)st->st_size;
	a->blocks = (uint64_t)st->st_blocks;
	a->atime = (uint64_t)st->st_atim.tv_sec;
	a->mtime = (uint64_t)st->st_mtim.tv_sec;
	a->ctime = (uint64_t)st->st_ctim.tv_sec;
	a->atimensec = (uint32_t)st->st_atim.tv_nsec;
	a->mtimensec = (uint32_t)st->st_mtim.tv_nsec;
	a->ctimensec = (uint32_t)st->st_ctim.tv_nsec;
	a->mode = st->st_mode;
	a->nlink = (uint32_t)st->st_nlink;
	a->uid = idmap_uid_to_guest(&s->cfg.ids, (uint32_t)st->st_uid);
	a->gid = idmap_gid_to_guest(&s->cfg.ids, (uint32_t)st->st_gid);
	a->rdev = (uint32_t)st->st_rdev;
	a->blksize = (uint32_t)st->st_blksize;
}

static void fill_entry(const struct fuse_server *s, struct fuse_entry_out *o,
		       const struct fuse_fs_entry *e)
{
	memset(o, 0, sizeof *o);
	o->nodeid = e->nodeid;
	split_timeout(s->cfg.entry_timeout, &o->entry_valid,
		      &o->entry_valid_nsec);
	split_timeout(s->cfg.attr_timeout, &o->attr_valid, &o->attr_valid_nsec);
	fill_attr(s, &o->attr, &e->st);
}

static ssize_t reply_entry(struct fuse_server *s, struct fsrv_req *r, int rc,
			   const struct fuse_fs_entry *e)
{
	struct fuse_entry_out o;

	if (rc < 0)
		return reply_err(r, rc);
	fill_entry(s, &o, e);
	return reply(r, 0, &o, sizeof o);
}

static ssize_t reply_attr(struct fuse_server *s, struct fsrv_req *r, int rc,
			  const struct stat *st)
{
	struct fuse_attr_out o;

	if (rc < 0)
		return reply_err(r, rc);
	memset(&o, 0, sizeof o);
	split_timeout(s->cfg.attr_timeout, &o.attr_valid, &o.attr_valid_nsec);
	fill_attr(s, &o.attr, st);
	return reply(r, 0, &o, sizeof o);
}

static ssize_t reply_open(struct fsrv_req *r, int rc, uint64_t fh)
{
	struct fuse_open_out o;

	if (rc < 0)
		return reply_err(r, rc);
	memset(&o, 0, sizeof o);
	o.fh = fh;
	return reply(r, 0, &o, sizeof o);
}

/* The INIT flags this server grants when the kernel offers them. */
static uint32_t fuse_server_offer(const struct fuse_server *s)
{
	uint32_t want = FUSE_ASYNC_READ | FUSE_ATOMIC_O_TRUNC |
			FUSE_BIG_WRITES | FUSE_DO_READDIRPLUS |
			FUSE_READDIRPLUS_AUTO | FUSE_PARALLEL_DIROPS |
			FUSE_MAX_PAGES | FUSE_AUTO_INVAL_DATA |
			FUSE_CACHE_SYMLINKS;
	if (s->cfg.posix_locks)
		want |= FUSE_POSIX_LOCKS;
	return want;
}

static ssize_t do_init(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_init_in in;
	struct fuse_init_out o;
	size_t n = r->arglen < sizeof in ? r->arglen : sizeof in;

	/* The struct grew over time: 16 bytes before 7.36, 64 after. */
	memset(&in, 0, sizeof in);
	if (n < 16)
		return reply_err(r, -EINVAL);
	memcpy(&in, r->arg, n);
	memset(&o, 0, sizeof o);
	o.major = FUSE_KERNEL_VERSION;
	o.minor = FUSE_KERNEL_MINOR_VERSION;
	/* A newer major: answer with ours alone and the kernel retries. */
	if (in.major > FUSE_KERNEL_VERSION)
		return reply(r, 0, &o, sizeof o);
	if (in.major < FUSE_KERNEL_VERSION || in.minor < FSRV_MIN_MINOR)
		return reply_err(r, -EPROTO);
	if (s->inited && s->ops->reset)
		s->ops->reset(s->be);

	o.minor = in.minor < FUSE_KERNEL_MINOR_VERSION ?
			  in.minor :
			  FUSE_KERNEL_MINOR_VERSION;
	o.flags = in.flags & fuse_server_offer(s);
	/* A kernel that offers it needs no flag back: an ENOSYS to the first
	 * OPENDIR tells it.  READDIR and FSYNCDIR then name the node alone. */
	s->no_opendir = (in.flags & FUSE_NO_OPENDIR_SUPPORT) &&
			!s->cfg.keep_opendir;
	o.max_readahead = in.max_readahead;
	if (s->cfg.max_readahead && s->cfg.max_readahead < o.max_readahead)
		o.max_readahead = s->cfg.max_readahead;
	o.max_background = 64;
	o.congestion_threshold = 48;
	o.max_write = s->cfg.max_write;
	o.time_gran = 1;
	o.max_pages = (uint16_t)(s->cfg.max_write / 4096);
	s->minor = o.minor;
	s->init_flags = o.flags;
	s->max_readahead = o.max_readahead;
	s->inited = true;
	__atomic_store_n(&s->destroyed, false, __ATOMIC_RELEASE);
	return reply(r, 0, &o, sizeof o);
}

static ssize_t do_forget(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_forget_in in;

	if (take(r, &in, sizeof in))
		s->ops->forget(s->be, r->h.nodeid, in.nlookup);
	return 0;
}

static ssize_t do_batch_forget(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_batch_forget_in in;
	struct fuse_forget_one one;

	if (!take(r, &in, sizeof in))
		return 0;
	/* count is the guest's word; the bytes present are the bound. */
	for (uint32_t i = 0; i < in.count && take(r, &one, sizeof one); i++)
		s->ops->forget(s->be, one.nodeid, one.nlookup);
	return 0;
}

static ssize_t do_getattr(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_getattr_in in;
	struct stat st;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	uint64_t fh = in.getattr_flags & FUSE_GETATTR_FH ? in.fh :
							   FUSE_FS_NO_FH;
	return reply_attr(s, r, s->ops->getattr(s->be, r->h.nodeid, fh, &st),
			  &st);
}

static ssize_t do_setattr(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_setattr_in in;
	struct fuse_fs_setattr sa;
	struct stat st;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	memset(&sa, 0, sizeof sa);
	if (in.valid & FATTR_MODE) {
		sa.valid |= FUSE_FS_SET_MODE;
		sa.mode = in.mode & 07777;
	}
	/* An id with no host id behind it cannot be given: EPERM before
	 * anything changes, as a chown the host refuses. */
	uint32_t host_id;
	if (in.valid & FATTR_UID) {
		if (!idmap_uid_to_host(&s->cfg.ids, in.uid, &host_id))
			return reply_err(r, -EPERM);
		sa.valid |= FUSE_FS_SET_UID;
		sa.uid = (uid_t)host_id;
	}
	if (in.valid & FATTR_GID) {
		if (!idmap_gid_to_host(&s->cfg.ids, in.gid, &host_id))
			return reply_err(r, -EPERM);
		sa.valid |= FUSE_FS_SET_GID;
		sa.gid = (gid_t)host_id;
	}
	if (in.valid & FATTR_SIZE) {
		if (in.size > (uint64_t)INT64_MAX)
			return reply_err(r, -EFBIG);
		sa.valid |= FUSE_FS_SET_SIZE;
		sa.size = (off_t)in.size;
	}
	if (in.valid & FATTR_ATIME_NOW) {
		sa.valid |= FUSE_FS_SET_ATIME | FUSE_FS_SET_ATIME_NOW;
	} else if (in.valid & FATTR_ATIME) {
		if (in.atimensec > 999999999u || in.atime > (uint64_t)INT64_MAX)
			return reply_err(r, -EINVAL);
		sa.valid |= FUSE_FS_SET_ATIME;
		sa.atime.tv_sec = (time_t)in.atime;
		sa.atime.tv_nsec = in.atimensec;
	}
	if (in.valid & FATTR_MTIME_NOW) {
		sa.valid |= FUSE_FS_SET_MTIME | FUSE_FS_SET_MTIME_NOW;
	} else if (in.valid & FATTR_MTIME) {
		if (in.mtimensec > 999999999u || in.mtime > (uint64_t)INT64_MAX)
			return reply_err(r, -EINVAL);
		sa.valid |= FUSE_FS_SET_MTIME;
		sa.mtime.tv_sec = (time_t)in.mtime;
		sa.mtime.tv_nsec = in.mtimensec;
	}
	uint64_t fh = in.valid & FATTR_FH ? in.fh : FUSE_FS_NO_FH;
	return reply_attr(
		s, r, s->ops->setattr(s->be, r->h.nodeid, fh, &sa, &st), &st);
}

/* A node the guest just made in parent: give it exactly the permission
 * bits it asked for (want_mode; the guest kernel applied the guest's umask
 * already, and the host process's own umask must not mask them a second
 * time) and, where the host can give them, the request's user and group
 * as its owner.  The process umask cannot simply be 0: it is process-wide
 * and the server shares its process.  A parent with the setgid bit keeps
 * the group the host gave, as on any filesystem.  An owner the host
 * refuses (kbox not root, a guest user other than root) leaves the host's
 * defaults: the kbox user's, guest root's.  Costs nothing when the host
 * already gave what was asked, the usual case. */
static void settle_new(struct fuse_server *s, const struct fsrv_req *r,
		       uint64_t parent, uint64_t fh, bool has_mode,
		       mode_t want_mode, struct fuse_fs_entry *e)
{
	struct fuse_fs_setattr sa;
	struct stat st;
	uint32_t id;

	memset(&sa, 0, sizeof sa);
	if (has_mode && (e->st.st_mode & 0777) != (want_mode & 0777)) {
		sa.valid |= FUSE_FS_SET_MODE;
		sa.mode = want_mode & 07777;
	}
	unsigned mode_only = sa.valid;
	if (idmap_uid_to_host(&s->cfg.ids, r->h.uid, &id) &&
	    id != (uint32_t)e->st.st_uid) {
		sa.valid |= FUSE_FS_SET_UID;
		sa.uid = (uid_t)id;
	}
	if (idmap_gid_to_host(&s->cfg.ids, r->h.gid, &id) &&
	    id != (uint32_t)e->st.st_gid &&
	    s->ops->getattr(s->be, parent, FUSE_FS_NO_FH, &st) == 0 &&
	    !(st.st_mode & S_ISGID)) {
		sa.valid |= FUSE_FS_SET_GID;
		sa.gid = (gid_t)id;
	}
	if (!sa.valid)
		return;
	/* A mode for a symlink means nothing (has_mode is false for one). */
	int rc = s->ops->setattr(s->be, e->nodeid, fh, &sa, &st);
	if (rc < 0 && sa.valid != mode_only && mode_only) {
		sa.valid = mode_only;
		rc = s->ops->setattr(s->be, e->nodeid, fh, &sa, &st);
	}
	if (rc == 0)
		e->st = st;
}

static ssize_t do_readlink(struct fuse_server *s, struct fsrv_req *r)
{
	int n = s->ops->readlink(s->be, r->h.nodeid, (char *)r->rep,
				 FSRV_SYMLINK_MAX + 1);
	if (n < 0)
		return reply_err(r, n);
	if ((size_t)n > FSRV_SYMLINK_MAX)
		return reply_err(r, -ENAMETOOLONG);
	return reply(r, 0, r->rep, (size_t)n);
}

static ssize_t do_symlink(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_fs_entry e;
	const char *name = take_name(r);
	const char *target = take_str(r, FSRV_SYMLINK_MAX);

	if (r->err)
		return reply_err(r, r->err);
	if (!*target)
		return reply_err(r, -ENOENT);
	int rc = s->ops->symlink(s->be, r->h.nodeid, name, target, &e);
	if (rc == 0)
		settle_new(s, r, r->h.nodeid, FUSE_FS_NO_FH, false, 0, &e);
	return reply_entry(s, r, rc, &e);
}

static ssize_t do_mknod(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_mknod_in in;
	struct fuse_fs_entry e;

	take(r, &in, sizeof in);
	const char *name = take_name(r);
	if (r->err)
		return reply_err(r, r->err);
	int rc = s->ops->mknod(s->be, r->h.nodeid, name, in.mode,
			       (dev_t)in.rdev, &e);
	if (rc == 0)
		settle_new(s, r, r->h.nodeid, FUSE_FS_NO_FH, true, in.mode, &e);
	return reply_entry(s, r, rc, &e);
}

static ssize_t do_mkdir(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_mkdir_in in;
	struct fuse_fs_entry e;

	take(r, &in, sizeof in);
	const char *name = take_name(r);
	if (r->err)
		return reply_err(r, r->err);
	int rc = s->ops->mkdir(s->be, r->h.nodeid, name, in.mode & 07777, &e);
	if (rc == 0)
		settle_new(s, r, r->h.nodeid, FUSE_FS_NO_FH, true, in.mode, &e);
	return reply_entry(s, r, rc, &e);
}

static ssize_t do_unlink(struct fuse_server *s, struct fsrv_req *r, bool dir)
{
	const char *name = take_name(r);

	if (r->err)
		return reply_err(r, r->err);
	int rc = dir ? s->ops->rmdir(s->be, r->h.nodeid, name) :
		       s->ops->unlink(s->be, r->h.nodeid, name);
	return reply_status(r, rc);
}

static ssize_t do_rename(struct fuse_server *s, struct fsrv_req *r, bool two)
{
	uint64_t newdir;
	uint32_t flags = 0;

	if (two) {
		struct fuse_rename2_in in;
		take(r, &in, sizeof in);
		newdir = in.newdir;
		flags = in.flags;
	} else {
		struct fuse_rename_in in;
		take(r, &in, sizeof in);
		newdir = in.newdir;
	}
	const char *oldname = take_name(r);
	const char *newname = take_name(r);
	if (r->err)
		return reply_err(r, r->err);
	return reply_status(r, s->ops->rename(s->be, r->h.nodeid, oldname,
					      newdir, newname, flags));
}

static ssize_t do_link(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_link_in in;
	struct fuse_fs_entry e;

	take(r, &in, sizeof in);
	const char *name = take_name(r);
	if (r->err)
		return reply_err(r, r->err);
	return reply_entry(
		s, r, s->ops->link(s->be, in.oldnodeid, r->h.nodeid, name, &e),
		&e);
}

static ssize_t do_open(struct fuse_server *s, struct fsrv_req *r, bool dir)
{
	struct fuse_open_in in;
	uint64_t fh = 0;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	if (dir && s->no_opendir)
		return reply_err(r, -ENOSYS);
	int rc = dir ? s->ops->opendir(s->be, r->h.nodeid, &fh) :
		       s->ops->open(s->be, r->h.nodeid, (int)in.flags, &fh);
	return reply_open(r, rc, fh);
}

static ssize_t do_create(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_create_in in;
	struct {
		struct fuse_entry_out e;
		struct fuse_open_out o;
	} out;
	struct fuse_fs_entry e;
	uint64_t fh = 0;

	take(r, &in, sizeof in);
	const char *name = take_name(r);
	if (r->err)
		return reply_err(r, r->err);
	memset(&e, 0, sizeof e);
	int rc = s->ops->create(s->be, r->h.nodeid, name, in.mode & 07777,
				(int)in.flags, &e, &fh);
	if (rc < 0)
		return reply_err(r, rc);
	if (e.created)
		settle_new(s, r, r->h.nodeid, fh, true, in.mode, &e);
	fill_entry(s, &out.e, &e);
	memset(&out.o, 0, sizeof out.o);
	out.o.fh = fh;
	return reply(r, 0, &out, sizeof out);
}

static ssize_t do_read(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_read_in in;
	struct fuse_out_header oh;
	struct iovec v[FUSE_SERVER_MAX_IOV];

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	if (in.size > s->cfg.max_write || in.offset > (uint64_t)INT64_MAX ||
	    in.size > r->out_room - sizeof oh)
		return reply_err(r, -EINVAL);
	int n = iov_slice(r->out, r->out_cnt, sizeof oh, in.size, v,
			  FUSE_SERVER_MAX_IOV);
	ssize_t got = s->ops->read(s->be, in.fh, v, n, (off_t)in.offset);
	if (got < 0)
		return reply_err(r, (int)got);
	if ((size_t)got > in.size)
		return reply_err(r, -EIO);
	oh.len = (uint32_t)(sizeof oh + (size_t)got);
	oh.error = 0;
	oh.unique = r->h.unique;
	iov_write(r->out, r->out_cnt, 0, &oh, sizeof oh);
	return (ssize_t)oh.len;
}

static ssize_t do_write(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_write_in in;
	struct fuse_write_out o;
	struct iovec v[FUSE_SERVER_MAX_IOV];
	size_t data_off = sizeof(struct fuse_in_header) + sizeof in;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	/* The payload is exactly the rest of the request. */
	if (in.size != r->h.len - data_off || in.size > s->cfg.max_write ||
	    in.offset > (uint64_t)INT64_MAX - in.size)
		return reply_err(r, -EINVAL);
	int n = iov_slice(r->in, r->in_cnt, data_off, in.size, v,
			  FUSE_SERVER_MAX_IOV);
	ssize_t put = in.size ? s->ops->write(s->be, in.fh, v, n,
					      (off_t)in.offset) :
				0;
	if (put < 0)
		return reply_err(r, (int)put);
	memset(&o, 0, sizeof o);
	o.size = (uint32_t)((size_t)put > in.size ? in.size : (size_t)put);
	return reply(r, 0, &o, sizeof o);
}

static ssize_t do_flush(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_flush_in in;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	return reply_status(r, s->ops->flush(s->be, in.fh));
}

static ssize_t do_release(struct fuse_server *s, struct fsrv_req *r, bool dir)
{
	struct fuse_release_in in;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	return reply_status(r, dir ? s->ops->releasedir(s->be, in.fh) :
				     s->ops->release(s->be, in.fh));
}

/* The directory handle for the backend: none once INIT chose to go without
 * OPENDIR, whatever the guest wrote; else the guest's number, which must
 * not pass for "no handle" (that would list or sync a directory it never
 * opened): EBADF, as for any number OPENDIR did not give. */
static int dir_fh(const struct fuse_server *s, uint64_t fh, uint64_t *out)
{
	if (s->no_opendir) {
		*out = FUSE_FS_NO_FH;
		return 0;
	}
	*out = fh;
	return fh == FUSE_FS_NO_FH ? -EBADF : 0;
}

static ssize_t do_fsync(struct fuse_server *s, struct fsrv_req *r, bool dir)
{
	struct fuse_fsync_in in;
	uint64_t dfh;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	bool ds = in.fsync_flags & 1;
	if (!dir)
		return reply_status(r, s->ops->fsync(s->be, in.fh, ds));
	int rc = dir_fh(s, in.fh, &dfh);
	return reply_status(r, rc < 0 ? rc :
				s->ops->fsyncdir(s->be, r->h.nodeid, dfh, ds));
}

/* Where READDIR(PLUS) entries are packed. */
struct fsrv_dir {
	struct fuse_server *s;
	uint8_t *buf;
	size_t cap, used;
	bool plus;
};

static size_t dirent_size(bool plus, size_t namelen)
{
	size_t fixed = plus ? sizeof(struct fuse_direntplus) :
			      sizeof(struct fuse_dirent);
	return FUSE_DIRENT_ALIGN(fixed + namelen);
}

static int dir_fits(void *ctx, size_t namelen)
{
	struct fsrv_dir *d = ctx;
	return namelen <= NAME_MAX &&
	       dirent_size(d->plus, namelen) <= d->cap - d->used;
}

static int dir_fill(void *ctx, const char *name, uint64_t ino, unsigned dtype,
		    uint64_t next_off, const struct fuse_fs_entry *e)
{
	struct fsrv_dir *d = ctx;
	size_t namelen = strlen(name);

	if (!dir_fits(ctx, namelen))
		return 0;
	size_t sz = dirent_size(d->plus, namelen);
	uint8_t *p = d->buf + d->used;
	struct fuse_dirent de;

	memset(p, 0, sz);
	if (d->plus) {
		struct fuse_entry_out eo;
		memset(&eo, 0, sizeof eo);
		if (e)
			fill_entry(d->s, &eo, e);
		memcpy(p, &eo, sizeof eo);
		p += sizeof eo;
	}
	de.ino = ino;
	de.off = next_off;
	de.namelen = (uint32_t)namelen;
	de.type = dtype;
	memcpy(p, &de, sizeof de);
	memcpy(p + sizeof de, name, namelen);
	d->used += sz;
	return 1;
}

static ssize_t do_readdir(struct fuse_server *s, struct fsrv_req *r,
			  bool plus)
{
	struct fuse_read_in in;
	struct fsrv_dir d;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	d.s = s;
	d.buf = r->rep;
	d.used = 0;
	d.plus = plus;
	/* A smaller listing than asked for is always allowed. */
	d.cap = in.size;
	if (d.cap > FSRV_REPLY_MAX)
		d.cap = FSRV_REPLY_MAX;
	if (d.cap > r->out_room - sizeof(struct fuse_out_header))
		d.cap = r->out_room - sizeof(struct fuse_out_header);
	uint64_t fh;
	int rc = dir_fh(s, in.fh, &fh);
	if (rc < 0)
		return reply_err(r, rc);
	rc = s->ops->readdir(s->be, r->h.nodeid, fh, in.offset, plus, dir_fill,
			     dir_fits, &d);
	if (rc < 0 && d.used == 0)
		return reply_err(r, rc);
	return reply(r, 0, d.buf, d.used);
}

static ssize_t do_statfs(struct fuse_server *s, struct fsrv_req *r)
{
	struct statvfs sv;
	struct fuse_statfs_out o;

	int rc = s->ops->statfs(s->be, r->h.nodeid, &sv);
	if (rc < 0)
		return reply_err(r, rc);
	memset(&o, 0, sizeof o);
	o.st.blocks = sv.f_blocks;
	o.st.bfree = sv.f_bfree;
	o.st.bavail = sv.f_bavail;
	o.st.files = sv.f_files;
	o.st.ffree = sv.f_ffree;
	o.st.bsize = (uint32_t)sv.f_bsize;
	o.st.namelen = (uint32_t)sv.f_namemax;
	o.st.frsize = (uint32_t)sv.f_frsize;
	return reply(r, 0, &o, sizeof o);
}

static ssize_t do_access(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_access_in in;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	return reply_status(r, s->ops->access(s->be, r->h.nodeid,
					      (int)(in.mask & 7)));
}

static ssize_t do_getxattr(struct fuse_server *s, struct fsrv_req *r,
			   bool list)
{
	struct fuse_getxattr_in in;
	const char *name = NULL;
	int n;

	take(r, &in, sizeof in);
	if (!list)
		name = take_str(r, FSRV_XATTR_NAME_MAX);
	if (r->err)
		return reply_err(r, r->err);
	size_t size = in.size;
	if (size > FSRV_XATTR_SIZE_MAX)
		size = FSRV_XATTR_SIZE_MAX;
	if (list)
		n = s->ops->listxattr(s->be, r->h.nodeid, (char *)r->rep, size);
	else
		n = s->ops->getxattr(s->be, r->h.nodeid, name, r->rep, size);
	if (n < 0)
		return reply_err(r, n);
	if (in.size == 0) {
		struct fuse_getxattr_out o;
		memset(&o, 0, sizeof o);
		o.size = (uint32_t)n;
		return reply(r, 0, &o, sizeof o);
	}
	if ((size_t)n > size)
		return reply_err(r, -ERANGE);
	return reply(r, 0, r->rep, (size_t)n);
}

static ssize_t do_setxattr(struct fuse_server *s, struct fsrv_req *r)
{
	/* Without FUSE_SETXATTR_EXT the kernel sends the 8-byte form. */
	struct {
		uint32_t size, flags;
	} in;

	take(r, &in, sizeof in);
	const char *name = take_str(r, FSRV_XATTR_NAME_MAX);
	if (r->err)
		return reply_err(r, r->err);
	if (in.size > FSRV_XATTR_SIZE_MAX || in.size > r->arglen - r->pos)
		return reply_err(r, -EINVAL);
	return reply_status(r, s->ops->setxattr(s->be, r->h.nodeid, name,
						r->arg + r->pos, in.size,
						(int)in.flags));
}

static ssize_t do_removexattr(struct fuse_server *s, struct fsrv_req *r)
{
	const char *name = take_str(r, FSRV_XATTR_NAME_MAX);

	if (r->err)
		return reply_err(r, r->err);
	return reply_status(r, s->ops->removexattr(s->be, r->h.nodeid, name));
}

static ssize_t do_lseek(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_lseek_in in;
	struct fuse_lseek_out o;
	off_t res = 0;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	if (in.offset > (uint64_t)INT64_MAX ||
	    (in.whence != SEEK_DATA && in.whence != SEEK_HOLE))
		return reply_err(r, -EINVAL);
	int rc = s->ops->lseek(s->be, in.fh, (off_t)in.offset, (int)in.whence,
			       &res);
	if (rc < 0)
		return reply_err(r, rc);
	memset(&o, 0, sizeof o);
	o.offset = (uint64_t)res;
	return reply(r, 0, &o, sizeof o);
}

static ssize_t do_fallocate(struct fuse_server *s, struct fsrv_req *r)
{
	struct fuse_fallocate_in in;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	if (in.offset > (uint64_t)INT64_MAX || in.length == 0 ||
	    in.length > (uint64_t)INT64_MAX - in.offset)
		return reply_err(r, -EINVAL);
	return reply_status(r, s->ops->fallocate(s->be, in.fh, (int)in.mode,
						 (off_t)in.offset,
						 (off_t)in.length));
}

static ssize_t do_lock(struct fuse_server *s, struct fsrv_req *r, bool get)
{
	struct fuse_lk_in in;
	struct flock fl;

	if (!take(r, &in, sizeof in))
		return reply_err(r, r->err);
	if (!s->cfg.posix_locks || (in.lk_flags & FUSE_LK_FLOCK))
		return reply_err(r, -ENOSYS);
	if (in.lk.type != F_RDLCK && in.lk.type != F_WRLCK &&
	    in.lk.type != F_UNLCK)
		return reply_err(r, -EINVAL);
	if (in.lk.start > (uint64_t)INT64_MAX || in.lk.end < in.lk.start)
		return reply_err(r, -EINVAL);
	memset(&fl, 0, sizeof fl);
	fl.l_type = (short)in.lk.type;
	fl.l_whence = SEEK_SET;
	fl.l_start = (off_t)in.lk.start;
	/* end is inclusive; INT64_MAX or more means "to end of file". */
	fl.l_len = in.lk.end >= (uint64_t)INT64_MAX ?
			   0 :
			   (off_t)(in.lk.end - in.lk.start + 1);
	if (!get)
		return reply_status(r, s->ops->setlk(s->be, in.fh, &fl));

	int rc = s->ops->getlk(s->be, in.fh, &fl);
	if (rc < 0)
		return reply_err(r, rc);
	struct fuse_lk_out o;
	memset(&o, 0, sizeof o);
	o.lk.type = (uint32_t)fl.l_type;
	if (fl.l_type != F_UNLCK) {
		o.lk.start = (uint64_t)fl.l_start;
		o.lk.end = fl.l_len == 0 ? (uint64_t)INT64_MAX :
					   (uint64_t)(fl.l_start + fl.l_len - 1);
	}
	/* Host pids mean nothing in the guest: report pid 0. */
	return reply(r, 0, &o, sizeof o);
}

static ssize_t dispatch(struct fuse_server *s, struct fsrv_req *r)
{
	uint32_t op = r->h.opcode;

	if (op == FUSE_INIT)
		return do_init(s, r);
	if (op == FUSE_INTERRUPT || op == FUSE_NOTIFY_REPLY)
		return 0;
	if (!s->inited) {
		if (op == FUSE_FORGET || op == FUSE_BATCH_FORGET)
			return 0;
		return reply_err(r, -EIO);
	}
	switch (op) {
	case FUSE_LOOKUP: {
		struct fuse_fs_entry e;
		const char *name = take_name(r);
		if (r->err)
			return reply_err(r, r->err);
		return reply_entry(
			s, r, s->ops->lookup(s->be, r->h.nodeid, name, &e), &e);
	}
	case FUSE_FORGET:
		return do_forget(s, r);
	case FUSE_BATCH_FORGET:
		return do_batch_forget(s, r);
	case FUSE_GETATTR:
		return do_getattr(s, r);
	case FUSE_SETATTR:
		return do_setattr(s, r);
	case FUSE_READLINK:
		return do_readlink(s, r);
	case FUSE_SYMLINK:
		return do_symlink(s, r);
	case FUSE_MKNOD:
		return do_mknod(s, r);
	case FUSE_MKDIR:
		return do_mkdir(s, r);
	case FUSE_UNLINK:
		return do_unlink(s, r, false);
	case FUSE_RMDIR:
		return do_unlink(s, r, true);
	case FUSE_RENAME:
		return do_rename(s, r, false);
	case FUSE_RENAME2:
		return do_rename(s, r, true);
	case FUSE_LINK:
		return do_link(s, r);
	case FUSE_OPEN:
		return do_open(s, r, false);
	case FUSE_READ:
		return do_read(s, r);
	case FUSE_WRITE:
		return do_write(s, r);
	case FUSE_FLUSH:
		return do_flush(s, r);
	case FUSE_RELEASE:
		return do_release(s, r, false);
	case FUSE_FSYNC:
		return do_fsync(s, r, false);
	case FUSE_OPENDIR:
		return do_open(s, r, true);
	case FUSE_READDIR:
		return do_readdir(s, r, false);
	case FUSE_READDIRPLUS:
		return do_readdir(s, r, true);
	case FUSE_RELEASEDIR:
		return do_release(s, r, true);
	case FUSE_FSYNCDIR:
		return do_fsync(s, r, true);
	case FUSE_STATFS:
		return do_statfs(s, r);
	case FUSE_CREATE:
		return do_create(s, r);
	case FUSE_ACCESS:
		return do_access(s, r);
	case FUSE_GETXATTR:
		return do_getxattr(s, r, false);
	case FUSE_LISTXATTR:
		return do_getxattr(s, r, true);
	case FUSE_SETXATTR:
		return do_setxattr(s, r);
	case FUSE_REMOVEXATTR:
		return do_removexattr(s, r);
	case FUSE_LSEEK:
		return do_lseek(s, r);
	case FUSE_FALLOCATE:
		return do_fallocate(s, r);
	case FUSE_GETLK:
		return do_lock(s, r, true);
	case FUSE_SETLK:
	case FUSE_SETLKW:
		return do_lock(s, r, false);
	case FUSE_DESTROY:
		if (s->ops->reset)
			s->ops->reset(s->be);
		s->inited = false;
		__atomic_store_n(&s->destroyed, true, __ATOMIC_RELEASE);
		return reply_status(r, 0);
	default:
		return reply_err(r, -ENOSYS);
	}
}

static struct fsrv_buf *buf_get(struct fuse_server *s)
{
	pthread_mutex_lock(&s->pool_mu);
	struct fsrv_buf *b = s->pool;
	if (b)
		s->pool = b->next;
	pthread_mutex_unlock(&s->pool_mu);
	return b ? b : malloc(sizeof *b);
}

static void buf_put(struct fuse_server *s, struct fsrv_buf *b)
{
	pthread_mutex_lock(&s->pool_mu);
	b->next = s->pool;
	s->pool = b;
	pthread_mutex_unlock(&s->pool_mu);
}

/* Whether the request drops every inode and handle, so that it must not
 * overlap any other. */
static bool op_exclusive(uint32_t op)
{
	return op == FUSE_INIT || op == FUSE_DESTROY;
}

ssize_t fuse_server_handle(struct fuse_server *s, const struct iovec *in,
			   int in_cnt, const struct iovec *out, int out_cnt)
{
	struct fsrv_req r;
	size_t total, hl = sizeof(struct fuse_in_header);

	memset(&r, 0, sizeof r);
	if (iov_total(in, in_cnt, &total) < 0 ||
	    iov_total(out, out_cnt, &r.out_room) < 0)
		return -EINVAL;
	if (total < hl || r.out_room < sizeof(struct fuse_out_header))
		return -EINVAL;
	iov_read(in, in_cnt, 0, &r.h, hl);
	if (r.h.len != total)
		return -EINVAL;
	r.in = in;
	r.in_cnt = in_cnt;
	r.out = out;
	r.out_cnt = out_cnt;
	/* WRITE payloads stay where they are; everything else is copied. */
	size_t copy = total;
	if (r.h.opcode == FUSE_WRITE && copy > hl + sizeof(struct fuse_write_in))
		copy = hl + sizeof(struct fuse_write_in);
	if (copy > hl + FUSE_SERVER_MAX_ARGS)
		return reply_err(&r, -EINVAL);
	struct fsrv_buf *b = buf_get(s);
	if (!b)
		return reply_err(&r, -ENOMEM);
	iov_read(in, in_cnt, 0, b->req, copy);
	r.arg = b->req + hl;
	r.arglen = copy - hl;
	r.rep = b->rep;
	if (op_exclusive(r.h.opcode))
		pthread_rwlock_wrlock(&s->gate);
	else
		pthread_rwlock_rdlock(&s->gate);
	ssize_t n = dispatch(s, &r);
	pthread_rwlock_unlock(&s->gate);
	buf_put(s, b);
	return n;
}

ssize_t fuse_server_handle_buf(struct fuse_server *s, const void *req,
			       size_t req_len, void *reply_buf,
			       size_t reply_size)
{
	struct iovec in = { (void *)req, req_len };
	struct iovec out = { reply_buf, reply_size };

	return fuse_server_handle(s, &in, 1, &out, 1);
}

int fuse_server_new(const struct fuse_fs_ops *ops, void *be,
		    const struct fuse_server_config *cfg,
		    struct fuse_server **out)
{
	struct fuse_server *s;

	if (!ops || !out)
		return -EINVAL;
	s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->ops = ops;
	s->be = be;
	if (cfg)
		s->cfg = *cfg;
	if (!s->cfg.max_write)
		s->cfg.max_write = FUSE_SERVER_DEFAULT_MAX_WRITE;
	/* The kernel moves whole pages; 16 MiB bounds max_pages. */
	if (s->cfg.max_write < 4096 || s->cfg.max_write > (16u << 20) ||
	    s->cfg.max_write % 4096) {
		free(s);
		return -EINVAL;
	}
	pthread_mutex_init(&s->pool_mu, NULL);
	/* Writers first: a reset must not wait behind a stream of requests. */
	pthread_rwlockattr_t ra;
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra,
				      PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&s->gate, &ra);
	pthread_rwlockattr_destroy(&ra);
	/* One scratch buffer up front: a lone caller never allocates. */
	s->pool = malloc(sizeof *s->pool);
	if (!s->pool) {
		fuse_server_free(s);
		return -ENOMEM;
	}
	s->pool->next = NULL;
	*out = s;
	return 0;
}

void fuse_server_free(struct fuse_server *s)
{
	if (!s)
		return;
	while (s->pool) {
		struct fsrv_buf *b = s->pool;
		s->pool = b->next;
		free(b);
	}
	pthread_rwlock_destroy(&s->gate);
	pthread_mutex_destroy(&s->pool_mu);
	free(s);
}

size_t fuse_server_max_request(const struct fuse_server *s)
{
	size_t w = sizeof(struct fuse_in_header) +
		   sizeof(struct fuse_write_in) + s->cfg.max_write;
	size_t a = sizeof(struct fuse_in_header) + FUSE_SERVER_MAX_ARGS;

	return w > a ? w : a;
}

bool fuse_server_destroyed(const struct fuse_server *s)
{
	return __atomic_load_n(&s->destroyed, __ATOMIC_ACQUIRE);
}

bool fuse_server_in_session(struct fuse_server *s)
{
	pthread_rwlock_rdlock(&s->gate);
	bool in = s->inited;
	pthread_rwlock_unlock(&s->gate);
	return in;
}

void fuse_server_reset(struct fuse_server *s)
{
	pthread_rwlock_wrlock(&s->gate);
	if (s->inited && s->ops->reset)
		s->ops->reset(s->be);
	s->inited = false;
	pthread_rwlock_unlock(&s->gate);
}

/* ---- fork: the session's state (fuse_server.h) ----
 *
 * Layout, little-endian: magic, version, state bits (in session, no
 * OPENDIR, destroyed), protocol minor, INIT flags, max_readahead,
 * max_write, the id map's owner uid and gid, then the length of the
 * backend's part and that part (empty outside a session). */
#define FUSE_SERVER_FORK_MAGIC 0x56525346u /* "FSRV" */
#define FUSE_SERVER_FORK_VERSION 1u
#define FUSE_SERVER_FORK_SESSION 0x1u
#define FUSE_SERVER_FORK_NO_OPENDIR 0x2u
#define FUSE_SERVER_FORK_DESTROYED 0x4u
#define FUSE_SERVER_FORK_BITS 0x7u

int fuse_server_fork_save(struct fuse_server *s, struct statebuf_writer *w, char *err,
			  size_t errlen)
{
	int rc = 0;

	pthread_rwlock_wrlock(&s->gate);
	if (s->inited && !s->ops->fork_save) {
		pthread_rwlock_unlock(&s->gate);
		return errbuf_fail(err, errlen, -EOPNOTSUPP,
				   "its file system cannot save its tables");
	}
	uint32_t bits = (s->inited ? FUSE_SERVER_FORK_SESSION : 0) |
			(s->inited && s->no_opendir ? FUSE_SERVER_FORK_NO_OPENDIR : 0) |
			(fuse_server_destroyed(s) ? FUSE_SERVER_FORK_DESTROYED : 0);
	statebuf_u32(w, FUSE_SERVER_FORK_MAGIC);
	statebuf_u32(w, FUSE_SERVER_FORK_VERSION);
	statebuf_u32(w, bits);
	statebuf_u32(w, s->inited ? s->minor : 0);
	statebuf_u32(w, s->inited ? s->init_flags : 0);
	statebuf_u32(w, s->inited ? s->max_readahead : 0);
	statebuf_u32(w, s->cfg.max_write);
	statebuf_u32(w, s->cfg.ids.owner_uid);
	statebuf_u32(w, s->cfg.ids.owner_gid);
	size_t at = w->len;
	statebuf_u32(w, 0);
	if (s->inited && w->err == 0) {
		rc = s->ops->fork_save(s->be, w, err, errlen);
		if (rc == 0 && w->err == 0 && w->len - at - 4 > UINT32_MAX)
			rc = errbuf_fail(err, errlen, -EFBIG, "its tables are too large");
		if (rc == 0)
			statebuf_set_u32(w, at, (uint32_t)(w->len - at - 4));
	}
	pthread_rwlock_unlock(&s->gate);
	if (rc == 0 && w->err)
		rc = errbuf_fail(err, errlen, w->err, "cannot save its session: %s",
				 strerror(-w->err));
	return rc;
}

/* The session fields of a fork's bytes against this server's own
 * configuration; 0 or -EINVAL with a line in err. */
static int fuse_server_fork_check(const struct fuse_server *s, uint32_t bits, uint32_t minor,
				  uint32_t flags, uint32_t readahead, uint32_t max_write,
				  uint32_t uid, uint32_t gid, uint32_t be_len, char *err,
				  size_t errlen)
{
	if (bits & ~FUSE_SERVER_FORK_BITS)
		return errbuf_fail(err, errlen, -EINVAL, "unknown session bits %#x", bits);
	if (!(bits & FUSE_SERVER_FORK_SESSION)) {
		if (bits & FUSE_SERVER_FORK_NO_OPENDIR || minor || flags || readahead || be_len)
			return errbuf_fail(err, errlen, -EINVAL,
					   "no session, yet a session's state");
		return 0;
	}
	if (bits & FUSE_SERVER_FORK_DESTROYED)
		return errbuf_fail(err, errlen, -EINVAL, "a session both open and destroyed");
	if (minor < FSRV_MIN_MINOR || minor > FUSE_KERNEL_MINOR_VERSION)
		return errbuf_fail(err, errlen, -EINVAL, "protocol 7.%u is not one this server speaks",
				   minor);
	if (flags & ~fuse_server_offer(s))
		return errbuf_fail(err, errlen, -EINVAL,
				   "INIT flags %#x that this server does not grant",
				   flags & ~fuse_server_offer(s));
	if ((bits & FUSE_SERVER_FORK_NO_OPENDIR) && s->cfg.keep_opendir)
		return errbuf_fail(err, errlen, -EINVAL,
				   "a session without OPENDIR, a server that keeps it");
	if (s->cfg.max_readahead && readahead > s->cfg.max_readahead)
		return errbuf_fail(err, errlen, -EINVAL, "max_readahead %u above this server's %u",
				   readahead, s->cfg.max_readahead);
	if (max_write != s->cfg.max_write)
		return errbuf_fail(err, errlen, -EINVAL, "max_write %u, this server's is %u",
				   max_write, s->cfg.max_write);
	if (uid != s->cfg.ids.owner_uid || gid != s->cfg.ids.owner_gid)
		return errbuf_fail(err, errlen, -EINVAL,
				   "ids mapped for owner %u:%u, this server maps %u:%u", uid, gid,
				   s->cfg.ids.owner_uid, s->cfg.ids.owner_gid);
	if (be_len && !s->ops->fork_load)
		return errbuf_fail(err, errlen, -EINVAL,
				   "file system tables for a file system that takes none");
	return 0;
}

int fuse_server_fork_load(struct fuse_server *s, const uint8_t *p, size_t len, char *err,
			  size_t errlen)
{
	struct statebuf_reader r;

	statebuf_reader_init(&r, p, len);
	uint32_t magic = statebuf_get_u32(&r), version = statebuf_get_u32(&r);
	uint32_t bits = statebuf_get_u32(&r), minor = statebuf_get_u32(&r);
	uint32_t flags = statebuf_get_u32(&r), readahead = statebuf_get_u32(&r);
	uint32_t max_write = statebuf_get_u32(&r), uid = statebuf_get_u32(&r);
	uint32_t gid = statebuf_get_u32(&r), be_len = statebuf_get_u32(&r);
	if (r.err)
		return errbuf_fail(err, errlen, -EBADMSG, "session state cut short (%zu bytes)", len);
	if (magic != FUSE_SERVER_FORK_MAGIC || version != FUSE_SERVER_FORK_VERSION)
		return errbuf_fail(err, errlen, -EINVAL, "not a FUSE session's state (version %u)",
				   version);
	if (be_len != statebuf_left(&r))
		return errbuf_fail(err, errlen, -EBADMSG,
				   "file system tables of %u bytes, %zu follow", be_len,
				   statebuf_left(&r));
	int rc = fuse_server_fork_check(s, bits, minor, flags, readahead, max_write, uid, gid,
					be_len, err, errlen);
	if (rc < 0)
		return rc;
	pthread_rwlock_wrlock(&s->gate);
	if (s->inited) {
		pthread_rwlock_unlock(&s->gate);
		return errbuf_fail(err, errlen, -EBUSY, "a session is open here already");
	}
	if (bits & FUSE_SERVER_FORK_SESSION && s->ops->fork_load)
		rc = s->ops->fork_load(s->be, p + r.off, be_len, err, errlen);
	if (rc == 0) {
		s->inited = bits & FUSE_SERVER_FORK_SESSION;
		s->no_opendir = bits & FUSE_SERVER_FORK_NO_OPENDIR;
		s->minor = minor;
		s->init_flags = flags;
		s->max_readahead = readahead;
		__atomic_store_n(&s->destroyed, (bits & FUSE_SERVER_FORK_DESTROYED) != 0,
				 __ATOMIC_RELEASE);
	}
	pthread_rwlock_unlock(&s->gate);
	return rc;
}
