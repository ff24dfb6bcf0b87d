/* Container images: writing a tree beneath a root fd and applying a
 * layer to it (image.h, image_priv.h). */
#include "vmm/image/image_priv.h"

#include "lib/grow.h"
#include "vmm/image/archive_lib.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

/* ------------------------------------------------------ Writing a tree */

__attribute__((format(printf, 3, 4)))
int image_fail(struct image_ctx *ctx, int err, const char *fmt, ...)
{
	if (!ctx->err[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
		va_end(ap);
	}
	return err < 0 ? err : -EIO;
}

int image_path_norm(const char *in, char *out, size_t len)
{
	if (in[0] == '/' && in[strspn(in, "/")])
		return -EPERM;
	size_t o = 0;
	unsigned depth = 0;
	const char *p = in;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = strchrnul(p, '/');
		size_t cl = (size_t)(e - p);
		if (cl == 1 && p[0] == '.') {
			p = e;
			continue;
		}
		if (cl == 2 && p[0] == '.' && p[1] == '.')
			return -EPERM;
		if (cl > NAME_MAX || ++depth > PATH_DEPTH_MAX || o + 1 + cl + 1 > len)
			return -ENAMETOOLONG;
		if (o)
			out[o++] = '/';
		memcpy(out + o, p, cl);
		o += cl;
		p = e;
	}
	out[o] = 0;
	return 0;
}

/* openat2 beneath DIRFD, refusing every symlink on the way (the final
 * component included), so nothing an archive laid down can redirect a
 * write to the host. */
static int open_beneath(int dirfd, const char *path, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
			   RESOLVE_NO_XDEV,
	};
	long fd = syscall(SYS_openat2, dirfd, path[0] ? path : ".", &how, sizeof how);
	return fd < 0 ? -errno : (int)fd;
}

DIR *image_dir_stream(int fd)
{
	DIR *d = fdopendir(fd);
	if (!d)
		close(fd);
	return d;
}

DIR *image_dir_open(int dfd, const char *name, int oflags)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | oflags);
	if (fd < 0)
		return NULL;
	DIR *d = image_dir_stream(fd);
	if (!d)
		errno = ENOMEM;
	return d;
}

int image_remove_tree(int dfd, const char *name, unsigned depth)
{
	if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	if (depth > PATH_DEPTH_MAX + 8)
		return -ELOOP;
	/* Unprivileged owners may have left a directory unreadable. */
	fchmodat(dfd, name, 0700, 0);
	DIR *d = image_dir_open(dfd, name, O_NOFOLLOW);
	if (!d)
		return -errno;
	int fd = dirfd(d), r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		int rr = image_remove_tree(fd, de->d_name, depth + 1);
		if (rr < 0 && !r)
			r = rr;
	}
	closedir(d);
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && !r)
		r = -errno;
	return r;
}

struct dirfix {
	char *path;
	size_t seq;
	mode_t mode;
	struct timespec mtime;
};

void image_tree_init(struct writer *w, struct image_ctx *ctx, int rootfd)
{
	memset(w, 0, sizeof *w);
	w->ctx = ctx;
	w->rootfd = rootfd;
	w->is_root = geteuid() == 0;
	w->max_bytes = ctx->max_bytes ? ctx->max_bytes : DEFAULT_MAX_BYTES;
	w->max_entries = ctx->max_entries ? ctx->max_entries : DEFAULT_MAX_ENTRIES;
	w->what = "image";
}

void image_tree_free(struct writer *w)
{
	for (size_t i = 0; i < w->nfix; i++)
		free(w->fix[i].path);
	free(w->fix);
	w->fix = NULL;
	w->nfix = w->capfix = 0;
}

static int path_error(struct writer *w, int err, const char *path)
{
	if (err == -ELOOP || err == -EXDEV)
		return image_fail(w->ctx, -EPERM,
				  "%s: '%s' goes through a symlink: refusing the archive (an entry may "
				  "not write through a link laid down before it)",
				  w->what, path);
	if (err == -ENOTDIR)
		return image_fail(w->ctx, err, "%s: '%s': a parent is not a directory", w->what, path);
	return image_fail(w->ctx, err, "%s: '%s': %s", w->what, path, strerror(-err));
}

/* Opens the directory holding PATH beneath the root (creating missing
 * ones when CREATE) and points *LEAF at PATH's last component. */
static int open_parent(struct writer *w, const char *path, int create, const char **leaf)
{
	const char *slash = strrchr(path, '/');
	*leaf = slash ? slash + 1 : path;
	char dir[PATH_MAX];
	size_t dl = slash ? (size_t)(slash - path) : 0;
	memcpy(dir, path, dl);
	dir[dl] = 0;
	int fd = open_beneath(w->rootfd, dir, O_PATH | O_DIRECTORY);
	if (fd != -ENOENT || !create)
		return fd;
	fd = open_beneath(w->rootfd, "", O_PATH | O_DIRECTORY);
	char *p = dir;
	while (fd >= 0 && *p) {
		char *e = strchrnul(p, '/');
		char save = *e;
		*e = 0;
		if (mkdirat(fd, p, 0755) < 0 && errno != EEXIST) {
			int r = -errno;
			close(fd);
			return r;
		}
		int nfd = open_beneath(fd, p, O_PATH | O_DIRECTORY);
		close(fd);
		fd = nfd;
		*e = save;
		p = save ? e + 1 : e;
	}
	return fd;
}

/* Makes room for a new LEAF in PFD: removes what is there, except a
 * directory when KEEP_DIR (returns 1 then). */
static int clear_leaf(int pfd, const char *leaf, int keep_dir)
{
	struct stat st;
	if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(st.st_mode))
		return keep_dir ? 1 : image_remove_tree(pfd, leaf, 0);
	return unlinkat(pfd, leaf, 0) < 0 ? -errno : 0;
}

int image_tree_count_entry(struct writer *w)
{
	if (++w->entries > w->max_entries)
		return image_fail(w->ctx, -EFBIG, "%s: more than %llu entries: refusing the image",
				  w->what, (unsigned long long)w->max_entries);
	return 0;
}

static void set_xattrs(struct writer *w, int fd, const struct xat *x, unsigned nx)
{
	for (unsigned i = 0; i < nx; i++) {
		if (strncmp(x[i].name, "user.", 5) != 0 &&
		    strcmp(x[i].name, "security.capability") != 0)
			continue;
		if (fsetxattr(fd, x[i].name, x[i].val, x[i].len, 0) < 0)
			w->ctx->xattrs_skipped++;
	}
}

void image_tree_set_meta_fd(struct writer *w, int fd, const struct wmeta *m, const struct xat *x,
			    unsigned nx, int times)
{
	if (w->is_root) {
		if (fchown(fd, m->uid, m->gid) < 0)
			w->ctx->owners_skipped++;
	} else if (m->uid != geteuid() || m->gid != getegid()) {
		w->ctx->owners_skipped++;
	}
	fchmod(fd, m->mode & 07777);
	set_xattrs(w, fd, x, nx);
	if (times) {
		struct timespec ts[2] = { m->mtime, m->mtime };
		futimens(fd, ts);
	}
}

int image_tree_file(struct writer *w, const char *path, const struct wmeta *m,
		    const struct xat *x, unsigned nx, reader_fn rd, void *arg)
{
	const char *leaf;
	int pfd = open_parent(w, path, 1, &leaf);
	if (pfd < 0)
		return path_error(w, pfd, path);
	int r = clear_leaf(pfd, leaf, 0);
	int fd = -1;
	if (r == 0) {
		fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			r = -errno;
	}
	close(pfd);
	if (r < 0)
		return path_error(w, r, path);
	static char buf[1 << 16];
	for (;;) {
		ssize_t n = rd(arg, buf, sizeof buf);
		if (n < 0) {
			r = image_fail(w->ctx, (int)n, "%s: reading '%s' failed", w->what, path);
			break;
		}
		if (n == 0)
			break;
		w->bytes += (uint64_t)n;
		if (w->bytes > w->max_bytes) {
			r = image_fail(w->ctx, -EFBIG, "%s: more than %llu bytes of files: refusing the image",
				       w->what, (unsigned long long)w->max_bytes);
			break;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t k = write(fd, buf + off, (size_t)(n - off));
			if (k < 0) {
				r = image_fail(w->ctx, -errno, "writing '%s': %s", path, strerror(errno));
				break;
			}
			off += k;
		}
		if (r < 0)
			break;
	}
	if (r >= 0)
		image_tree_set_meta_fd(w, fd, m, x, nx, 1);
	close(fd);
	return r < 0 ? r : 0;
}

static int fix_add(struct writer *w, const char *path, const struct wmeta *m)
{
	if (grow_array(&w->fix, &w->capfix, w->nfix + 1, sizeof *w->fix, 64, 0) < 0)
		return -ENOMEM;
	char *p = strdup(path);
	if (!p)
		return -ENOMEM;
	w->fix[w->nfix] = (struct dirfix){ p, w->nfix, m->mode, m->mtime };
	w->nfix++;
	return 0;
}

int image_tree_dir(struct writer *w, const char *path, const struct wmeta *m,
		   const struct xat *x, unsigned nx)
{
	const char *leaf;
	int pfd = open_parent(w, path, 1, &leaf);
	if (pfd < 0)
		return path_error(w, pfd, path);
	int r = clear_leaf(pfd, leaf, 1);
	if (r == 0 && mkdirat(pfd, leaf, 0700) < 0)
		r = -errno;
	int fd = -1;
	if (r >= 0 && (fd = openat(pfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		r = -errno;
	close(pfd);
	if (r < 0)
		return path_error(w, r, path);
	/* Mode and time wait for image_tree_fix_apply: a read-only directory must still
	 * take its children, and every child changes the time. */
	struct wmeta own = *m;
	own.mode = 0700;
	image_tree_set_meta_fd(w, fd, &own, x, nx, 0);
	close(fd);
	return fix_add(w, path, m) < 0 ? image_fail(w->ctx, -ENOMEM, "out of memory") : 0;
}

static int fix_cmp(const void *a, const void *b)
{
	const struct dirfix *x = a, *y = b;
	int c = strcmp(x->path, y->path);
	return c ? c : (x->seq < y->seq ? -1 : x->seq > y->seq);
}

void image_tree_fix_apply(struct writer *w)
{
	if (w->nfix)
		qsort(w->fix, w->nfix, sizeof *w->fix, fix_cmp);
	for (size_t i = w->nfix; i-- > 0;) {
		if (i + 1 < w->nfix && strcmp(w->fix[i].path, w->fix[i + 1].path) == 0)
			continue;
		int fd = open_beneath(w->rootfd, w->fix[i].path, O_RDONLY | O_DIRECTORY);
		if (fd < 0)
			continue; /* removed by a later layer */
		fchmod(fd, w->fix[i].mode & 07777);
		struct timespec ts[2] = { w->fix[i].mtime, w->fix[i].mtime };
		futimens(fd, ts);
		close(fd);
	}
	image_tree_free(w);
}

int image_tree_special(struct writer *w, const char *path, const char *target,
		       const struct wmeta *m)
{
	const char *leaf;
	int pfd = open_parent(w, path, 1, &leaf);
	if (pfd < 0)
		return path_error(w, pfd, path);
	int r = clear_leaf(pfd, leaf, 0);
	if (r == 0 && (target ? symlinkat(target, pfd, leaf)
			      : mknodat(pfd, leaf, S_IFIFO | (m->mode & 0777), 0)) < 0)
		r = -errno;
	if (r == 0) {
		if (w->is_root && fchownat(pfd, leaf, m->uid, m->gid, AT_SYMLINK_NOFOLLOW) < 0)
			w->ctx->owners_skipped++;
		struct timespec ts[2] = { m->mtime, m->mtime };
		utimensat(pfd, leaf, ts, AT_SYMLINK_NOFOLLOW);
	}
	close(pfd);
	return r < 0 ? path_error(w, r, path) : 0;
}

int image_tree_link(struct writer *w, const char *path, const char *target)
{
	const char *leaf, *tleaf;
	int tfd = open_parent(w, target, 0, &tleaf);
	if (tfd < 0)
		return tfd == -ENOENT ? image_fail(w->ctx, -ENOENT, "%s: hard link '%s' to missing '%s'",
						   w->what, path, target)
				      : path_error(w, tfd, target);
	int pfd = open_parent(w, path, 1, &leaf);
	if (pfd < 0) {
		close(tfd);
		return path_error(w, pfd, path);
	}
	int r = 0;
	if (strcmp(path, target) != 0) {
		r = clear_leaf(pfd, leaf, 0);
		if (r == 0 && linkat(tfd, tleaf, pfd, leaf, 0) < 0)
			r = -errno;
	}
	close(pfd);
	close(tfd);
	if (r < 0)
		return image_fail(w->ctx, r, "%s: hard link '%s' to '%s': %s", w->what, path, target,
				  strerror(-r));
	return 0;
}

/* ---------------------------------------------------------------- Layers */

static int layer_open(struct writer *w, int at, const char *name, struct archive **out)
{
	int fd = openat(at, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return image_fail(w->ctx, -errno, "%s: %s", w->what, strerror(errno));
	char aerr[320];
	int rc;
	struct archive *a = archive_lib_tar_reader(&rc, aerr, sizeof aerr);
	if (!a) {
		close(fd);
		return image_fail(w->ctx, rc, "%s", aerr);
	}
	archive_read_support_format_empty(a);
	if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK) {
		int r = image_fail(w->ctx, -EINVAL, "%s: not a tar: %s", w->what, archive_error_string(a));
		archive_read_free(a);
		close(fd);
		return r;
	}
	/* libarchive reads FD but leaves closing it to us. */
	*out = a;
	return fd;
}

static void layer_close(struct archive *a, int fd)
{
	archive_read_free(a);
	close(fd);
}

static int entry_path(struct writer *w, struct archive_entry *e, char *out, size_t len)
{
	const char *raw = archive_entry_pathname(e);
	if (!raw)
		return image_fail(w->ctx, -EINVAL, "%s: an entry has no usable name", w->what);
	int r = image_path_norm(raw, out, len);
	if (r == -EPERM)
		return image_fail(w->ctx, r, "%s: entry '%s' %s: refusing the archive", w->what, raw,
				  raw[0] == '/' ? "has an absolute path" : "climbs out with '..'");
	if (r < 0)
		return image_fail(w->ctx, r, "%s: entry name too long or too deep", w->what);
	return 0;
}

const char *image_split_dir(const char *p, char *dir)
{
	const char *slash = strrchr(p, '/');
	size_t dl = slash ? (size_t)(slash - p) : 0;
	memcpy(dir, p, dl);
	dir[dl] = 0;
	return slash ? slash + 1 : p;
}

/* One pass over a layer's entries: FN gets each one with its normalised
 * path P; a non-zero return ends the pass with it. */
static int layer_pass(struct writer *w, int at, const char *name,
		      int (*fn)(struct writer *w, struct archive *a, struct archive_entry *e,
				const char *p))
{
	struct archive *a = NULL;
	int fd = layer_open(w, at, name, &a);
	if (fd < 0)
		return fd;
	struct archive_entry *e;
	int r = 0, ar;
	while (r == 0 && (ar = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		char p[PATH_MAX];
		r = entry_path(w, e, p, sizeof p);
		if (r == 0)
			r = fn(w, a, e, p);
	}
	if (r == 0 && ar != ARCHIVE_EOF)
		r = image_fail(w->ctx, -EINVAL, "%s: %s", w->what, archive_error_string(a));
	layer_close(a, fd);
	return r;
}

/* A layer's whiteouts only hide what the layers below it brought, so they
 * all go before any of its files are written (a pass of their own). */
static int whiteout_entry(struct writer *w, struct archive *a, struct archive_entry *e,
			  const char *p)
{
	char dir[PATH_MAX], what[NAME_MAX + 1];
	int k = image_whiteout(image_split_dir(p, dir), what, sizeof what);
	if (k < 0)
		return image_fail(w->ctx, -EINVAL, "%s: bad whiteout '%s'", w->what, p);
	if (k != 1 && k != 2)
		return 0;
	int dfd = open_beneath(w->rootfd, dir, O_RDONLY | O_DIRECTORY);
	if (dfd == -ENOENT)
		return 0;
	if (dfd < 0)
		return path_error(w, dfd, p);
	int r = 0;
	if (k == 1) {
		r = clear_leaf(dfd, what, 0);
		close(dfd);
	} else {
		DIR *d = image_dir_stream(dfd);
		if (!d)
			return -ENOMEM;
		struct dirent *de;
		while (r == 0 && (de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				r = image_remove_tree(dirfd(d), de->d_name, 0);
		closedir(d);
	}
	return r < 0 ? image_fail(w->ctx, r, "%s: whiteout '%s': %s", w->what, p, strerror(-r)) : 0;
}

static ssize_t archive_reader(void *arg, void *buf, size_t len)
{
	la_ssize_t n = archive_read_data(arg, buf, len);
	return n < 0 ? -EIO : (ssize_t)n;
}

static unsigned entry_xattrs(struct archive_entry *e, struct xat *x)
{
	unsigned n = 0;
	archive_entry_xattr_reset(e);
	const char *name;
	const void *val;
	size_t size;
	while (n < XATTR_MAX && archive_entry_xattr_next(e, &name, &val, &size) == ARCHIVE_OK)
		if (name && size <= XATTR_VALUE_MAX)
			x[n++] = (struct xat){ name, val, size };
	return n;
}

static int layer_entry(struct writer *w, struct archive *a, struct archive_entry *e,
		       const char *p)
{
	char dir[PATH_MAX], what[NAME_MAX + 1];
	int r = image_tree_count_entry(w);
	if (r < 0)
		return r;
	if (!p[0] || image_whiteout(image_split_dir(p, dir), what, sizeof what) != 0)
		return 0;
	struct wmeta m = {
		.mode = archive_entry_perm(e),
		.uid = (uid_t)archive_entry_uid(e),
		.gid = (gid_t)archive_entry_gid(e),
		.mtime = { archive_entry_mtime(e), archive_entry_mtime_nsec(e) },
	};
	struct xat x[XATTR_MAX];
	unsigned nx = entry_xattrs(e, x);
	const char *hl = archive_entry_hardlink(e);
	if (hl) {
		char t[PATH_MAX];
		if (image_path_norm(hl, t, sizeof t) < 0)
			return image_fail(w->ctx, -EPERM, "%s: hard link '%s' points outside the image ('%s'): "
					  "refusing the archive", w->what, p, hl);
		return image_tree_link(w, p, t);
	}
	switch (archive_entry_filetype(e)) {
	case AE_IFREG: return image_tree_file(w, p, &m, x, nx, archive_reader, a);
	case AE_IFDIR: return image_tree_dir(w, p, &m, x, nx);
	case AE_IFLNK: {
		const char *t = archive_entry_symlink(e);
		if (!t || !*t || strlen(t) >= PATH_MAX)
			return image_fail(w->ctx, -EINVAL, "%s: symlink '%s' has no usable target", w->what, p);
		return image_tree_special(w, p, t, &m);
	}
	case AE_IFIFO: return image_tree_special(w, p, NULL, &m);
	case AE_IFCHR:
	case AE_IFBLK: w->ctx->devices_skipped++; return 0;
	default: return 0;
	}
}

int image_tree_apply_layer(struct writer *w, int at, const char *name)
{
	int r = layer_pass(w, at, name, whiteout_entry);
	return r < 0 ? r : layer_pass(w, at, name, layer_entry);
}

int image_apply_layer(struct image_ctx *ctx, int rootfd, const char *path)
{
	struct writer w;
	image_tree_init(&w, ctx, rootfd);
	w.what = path;
	int r = image_tree_apply_layer(&w, AT_FDCWD, path);
	if (r == 0)
		image_tree_fix_apply(&w);
	image_tree_free(&w);
	return r;
}
