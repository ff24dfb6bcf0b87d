/* Container images: the store (load, import, ls, rm); see image.h. */
#include "vmm/image/image.h"
#include "vmm/image/archive_lib.h"

#include <bearssl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "lib/datadir.h"
#include "lib/fileio.h"
#include "lib/grow.h"
#include "vmm/image/image_priv.h"
#include "vmm/sandbox/sandbox.h"

/* ----------------------------------------------------------------- Store */

struct store {
	char dir[PATH_MAX];
	int fd;
};

int image_store_dir(char *buf, size_t len)
{
	const char *e = getenv("KBOX_IMAGE_DIR");
	int n;
	if (e && *e) {
		n = snprintf(buf, len, "%s", e);
	} else if ((e = getenv("XDG_DATA_HOME")) && e[0] == '/') {
		n = snprintf(buf, len, "%s/kbox/images", e);
	} else {
		e = getenv("HOME");
		if (!e || !*e)
			return -ENOENT;
		n = snprintf(buf, len, "%s/.local/share/kbox/images", e);
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int store_open(struct image_ctx *ctx, struct store *st, int create)
{
	st->fd = -1;
	int r = image_store_dir(st->dir, sizeof st->dir);
	if (r < 0)
		return image_fail(ctx, r, "no image store: set KBOX_IMAGE_DIR or HOME");
	if (create && (r = datadir_mkdirs(st->dir)) < 0)
		return image_fail(ctx, r, "cannot create the image store %s: %s", st->dir, strerror(-r));
	st->fd = open(st->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->fd < 0)
		return errno == ENOENT && !create ? -ENOENT
						  : image_fail(ctx, -errno, "image store %s: %s", st->dir,
							       strerror(errno));
	static const char *const sub[] = { "rootfs", "meta", "refs", "tmp" };
	for (size_t i = 0; create && i < 4; i++)
		if (mkdirat(st->fd, sub[i], 0700) < 0 && errno != EEXIST)
			return image_fail(ctx, -errno, "image store %s/%s: %s", st->dir, sub[i],
					  strerror(errno));
	return 0;
}

static void store_close(struct store *st)
{
	if (st->fd >= 0)
		close(st->fd);
	st->fd = -1;
}

/* The store-wide lock: commits and removals take it, so a name and the
 * rootfs it names always change together. */
static int store_lock(struct image_ctx *ctx, struct store *st)
{
	int fd = openat(st->fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		int r = image_fail(ctx, -errno, "locking the image store: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return r;
	}
	return fd;
}

static void rand_name(char *buf, size_t len, const char *prefix)
{
	uint32_t v = 0;
	if (getrandom(&v, sizeof v, 0) != sizeof v)
		v = (uint32_t)time(NULL) ^ (uint32_t)clock();
	snprintf(buf, len, "%s-%d-%08x", prefix, (int)getpid(), v);
}

/* Work dirs of loads that died: their flock is free (or, for a removal in
 * progress and a dir not locked yet, they are old). */
static void tmp_sweep(struct store *st)
{
	DIR *d = image_dir_open(st->fd, "tmp", 0);
	if (!d)
		return;
	int tfd = dirfd(d);
	struct dirent *de;
	time_t now = time(NULL);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		struct stat sb;
		if (fstatat(tfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || now - sb.st_mtime < 60)
			continue;
		char lk[NAME_MAX + 8];
		snprintf(lk, sizeof lk, "%s/.lock", de->d_name);
		int lfd = openat(tfd, lk, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) < 0) {
			close(lfd);
			continue;
		}
		image_remove_tree(tfd, de->d_name, 0);
		if (lfd >= 0)
			close(lfd);
	}
	closedir(d);
}

struct work {
	char name[64];
	int fd, lockfd;
};

static int work_open(struct image_ctx *ctx, struct store *st, struct work *wk)
{
	wk->fd = wk->lockfd = -1;
	tmp_sweep(st);
	for (int tries = 0; tries < 16; tries++) {
		char path[80];
		rand_name(wk->name, sizeof wk->name, "load");
		snprintf(path, sizeof path, "tmp/%s", wk->name);
		if (mkdirat(st->fd, path, 0700) < 0) {
			if (errno == EEXIST)
				continue;
			return image_fail(ctx, -errno, "%s/%s: %s", st->dir, path, strerror(errno));
		}
		wk->fd = openat(st->fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (wk->fd < 0)
			return image_fail(ctx, -errno, "%s/%s: %s", st->dir, path, strerror(errno));
		wk->lockfd = openat(wk->fd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (wk->lockfd < 0 || flock(wk->lockfd, LOCK_EX) < 0)
			return image_fail(ctx, -errno, "%s/%s/.lock: %s", st->dir, path, strerror(errno));
		return 0;
	}
	return image_fail(ctx, -EEXIST, "cannot make a work directory in %s/tmp", st->dir);
}

static void work_close(struct store *st, struct work *wk)
{
	if (wk->fd >= 0) {
		char path[80];
		snprintf(path, sizeof path, "tmp/%s", wk->name);
		image_remove_tree(st->fd, path, 0);
		close(wk->fd);
	}
	if (wk->lockfd >= 0)
		close(wk->lockfd);
	wk->fd = wk->lockfd = -1;
}

static int read_ref(struct store *st, const char *nametag, char *id)
{
	char path[IMAGE_REF_MAX + 8], buf[IMAGE_HEX_LEN + 2];
	snprintf(path, sizeof path, "refs/%s", nametag);
	int fd = openat(st->fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof buf);
	close(fd);
	if (n < IMAGE_HEX_LEN)
		return -EINVAL;
	buf[IMAGE_HEX_LEN] = 0;
	if (!image_hex64_ok(buf))
		return -EINVAL;
	memcpy(id, buf, IMAGE_HEX_LEN + 1);
	return 0;
}

static int write_ref(struct image_ctx *ctx, struct store *st, const char *nametag,
		     const char *id)
{
	char tmp[96], path[IMAGE_REF_MAX + 8], line[IMAGE_HEX_LEN + 2];
	rand_name(tmp + 4, sizeof tmp - 4, "ref");
	memcpy(tmp, "tmp/", 4);
	snprintf(path, sizeof path, "refs/%s", nametag);
	snprintf(line, sizeof line, "%s\n", id);
	int r = fileio_write_atomic(st->fd, path, tmp, line, strlen(line), 0600);
	if (r < 0)
		return image_fail(ctx, r, "writing %s/%s: %s", st->dir, path, strerror(-r));
	return 0;
}

/* Calls FN for every ref; stops at a non-zero return. */
static int refs_each(struct store *st, int (*fn)(void *arg, const char *nametag, const char *id),
		     void *arg)
{
	DIR *d = image_dir_open(st->fd, "refs", 0);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	struct dirent *de;
	int r = 0;
	while (!r && (de = readdir(d))) {
		char id[IMAGE_HEX_LEN + 1];
		if (de->d_name[0] != '.' && read_ref(st, de->d_name, id) == 0)
			r = fn(arg, de->d_name, id);
	}
	closedir(d);
	return r;
}

static int ref_is(void *arg, const char *nametag, const char *id)
{
	return strcmp(id, arg) == 0;
}

struct users {
	struct stat root; /* the image's rootfs */
	char *names;
	size_t len, used;
	unsigned n;
};

static void user_of(const struct sandbox_info *info, void *arg)
{
	struct users *u = arg;
	struct stat sb;
	/* By inode: the recorded path may reach the store another way. */
	if (!info->alive || !info->image[0] || stat(info->image, &sb) < 0 ||
	    sb.st_dev != u->root.st_dev || sb.st_ino != u->root.st_ino)
		return;
	u->n++;
	if (u->names && u->used < u->len) {
		int k = snprintf(u->names + u->used, u->len - u->used, "%s%s", u->used ? ", " : "",
				 info->name);
		u->used += k > 0 ? (size_t)k : 0;
	}
}

/* The running sandboxes whose root is image ID's rootfs: their number,
 * and their names joined by ", " in names (len bytes; may be NULL). */
static unsigned image_users(struct store *st, const char *id, char *names, size_t len)
{
	struct users u = { .names = names, .len = len };
	char path[80];
	if (names && len)
		names[0] = 0;
	snprintf(path, sizeof path, "rootfs/%s", id);
	if (fstatat(st->fd, path, &u.root, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	sandbox_each(user_of, &u);
	return u.n;
}

struct ref_counter {
	const char *id;
	int *n;
};

static int ref_count(void *arg, const char *nametag, const char *id)
{
	const struct ref_counter *c = arg;
	if (strcmp(id, c->id) == 0)
		(*c->n)++;
	return 0;
}

/* Removes image ID's rootfs and metadata once no name is left for it and
 * no running sandbox uses it (deleting files under a sandbox would break
 * it; a later sweep_unused frees them); the rootfs leaves rootfs/ in one
 * rename, so it is never seen half deleted.  Called with the store lock
 * held. */
static void gc_id(struct store *st, const char *id)
{
	if (refs_each(st, ref_is, (void *)id) != 0 || image_users(st, id, NULL, 0) > 0)
		return;
	char from[80], to[128];
	snprintf(from, sizeof from, "rootfs/%s", id);
	rand_name(to + 4, sizeof to - 4, "rm");
	memcpy(to, "tmp/", 4);
	if (renameat(st->fd, from, st->fd, to) == 0)
		image_remove_tree(st->fd, to, 0);
	snprintf(from, sizeof from, "meta/%s", id);
	unlinkat(st->fd, from, 0);
}

/* Frees every image left without a name and no longer in use (kept by
 * gc_id while a sandbox ran on it).  Called with the store lock held. */
static void sweep_unused(struct store *st)
{
	DIR *d = image_dir_open(st->fd, "rootfs", 0);
	if (!d)
		return;
	char ids[64][IMAGE_HEX_LEN + 1];
	unsigned n = 0;
	struct dirent *de;
	/* Collected first: gc_id renames entries out of this directory. */
	while ((de = readdir(d)) && n < 64)
		if (strlen(de->d_name) == IMAGE_HEX_LEN && refs_each(st, ref_is, de->d_name) == 0)
			memcpy(ids[n++], de->d_name, IMAGE_HEX_LEN + 1);
	closedir(d);
	for (unsigned i = 0; i < n; i++)
		gc_id(st, ids[i]);
}

struct prefix_find {
	const char *prefix;
	size_t len;
	char id[IMAGE_HEX_LEN + 1];
	int found;
};

/* The one image whose id starts with PREFIX (after an optional
 * "sha256:"): 0, -ENOENT or -ENOTUNIQ. */
static int find_id_prefix(struct store *st, const char *prefix, char *id)
{
	if (strncmp(prefix, "sha256:", 7) == 0)
		prefix += 7;
	size_t pl = strlen(prefix);
	if (!pl || pl > IMAGE_HEX_LEN)
		return -ENOENT;
	for (size_t i = 0; i < pl; i++)
		if (!((prefix[i] >= '0' && prefix[i] <= '9') || (prefix[i] >= 'a' && prefix[i] <= 'f')))
			return -ENOENT;
	int dfd = openat(st->fd, "rootfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -ENOENT;
	DIR *d = image_dir_stream(dfd);
	if (!d)
		return -ENOMEM;
	int found = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!image_hex64_ok(de->d_name) || strncmp(de->d_name, prefix, pl) != 0)
			continue;
		if (found++)
			break;
		memcpy(id, de->d_name, IMAGE_HEX_LEN + 1);
	}
	closedir(d);
	return found == 0 ? -ENOENT : found > 1 ? -ENOTUNIQ : 0;
}

/* Looks REF up as NAME[:TAG], then as an id prefix. */
static int lookup(struct store *st, const char *ref, char *id, char *nametag)
{
	char name[IMAGE_NAME_MAX + 1], tag[IMAGE_TAG_MAX + 1];
	nametag[0] = 0;
	if (image_ref_parse(ref, name, sizeof name, tag, sizeof tag) == 0) {
		snprintf(nametag, IMAGE_REF_MAX, "%s:%s", name, tag);
		if (read_ref(st, nametag, id) == 0)
			return 0;
		nametag[0] = 0;
	}
	return find_id_prefix(st, ref, id);
}

static uint64_t tree_size(int fd, unsigned depth)
{
	DIR *d = image_dir_stream(fd);
	if (!d)
		return 0;
	uint64_t sum = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat sb;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		/* Each of N hard links counts 1/N: the whole file once. */
		if (S_ISREG(sb.st_mode))
			sum += (uint64_t)sb.st_size / (sb.st_nlink ? sb.st_nlink : 1);
		else if (S_ISDIR(sb.st_mode) && depth < PATH_DEPTH_MAX + 8) {
			int c = openat(dirfd(d), de->d_name,
				       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (c >= 0)
				sum += tree_size(c, depth + 1);
		}
	}
	closedir(d);
	return sum;
}

/* Puts the finished tree work/rootfs in the store as ID (unless it is
 * there already) and points every name in NAMES at it. */
static int commit(struct image_ctx *ctx, struct store *st, struct work *wk, const char *id,
		  int built, const char *source, char (*names)[IMAGE_REF_MAX], unsigned nnames)
{
	int lk = store_lock(ctx, st);
	if (lk < 0)
		return lk;
	char path[96];
	int r = 0;
	struct stat sb;
	snprintf(path, sizeof path, "rootfs/%s", id);
	int there = fstatat(st->fd, path, &sb, AT_SYMLINK_NOFOLLOW) == 0;
	if (!there && !built) {
		r = image_fail(ctx, -EAGAIN, "image %.12s was removed while loading: load it again", id);
	} else if (!there) {
		int rfd = openat(wk->fd, "rootfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		uint64_t size = rfd >= 0 ? tree_size(rfd, 0) : 0;
		char meta[512];
		int n = snprintf(meta, sizeof meta, "size %llu\ncreated %lld\nsource %s\n",
				 (unsigned long long)size, (long long)time(NULL), source);
		int fd = openat(wk->fd, "meta", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, meta, (size_t)n) != n)
			r = image_fail(ctx, -EIO, "writing the image metadata in %s/tmp", st->dir);
		if (fd >= 0)
			close(fd);
		char mpath[96];
		snprintf(mpath, sizeof mpath, "meta/%s", id);
		if (r == 0 && (renameat(wk->fd, "meta", st->fd, mpath) < 0 ||
			       renameat(wk->fd, "rootfs", st->fd, path) < 0))
			r = image_fail(ctx, -errno, "storing image %.12s in %s: %s", id, st->dir,
				       strerror(errno));
	}
	for (unsigned i = 0; r == 0 && i < nnames; i++) {
		char old[IMAGE_HEX_LEN + 1];
		int had = read_ref(st, names[i], old) == 0 && strcmp(old, id) != 0;
		r = write_ref(ctx, st, names[i], id);
		if (r == 0 && had)
			gc_id(st, old);
	}
	if (r == 0)
		sweep_unused(st);
	close(lk);
	if (r == 0) {
		memcpy(ctx->id, id, IMAGE_HEX_LEN + 1);
		if (nnames)
			memcpy(ctx->ref, names[0], IMAGE_REF_MAX);
		else
			ctx->ref[0] = 0;
		ctx->existed = there;
	}
	return r;
}

/* --------------------------------------------------------------- Loading */

struct member {
	char *path, *link; /* link: the member a symlink or hard link stands for */
	uint64_t size;
	char sha[IMAGE_HEX_LEN + 1];
	unsigned blob; /* staged as work/b<blob> */
};

struct load {
	struct image_ctx *ctx;
	struct store st;
	struct work wk;
	struct member *m;
	size_t n, cap;
	const char *file;
};

static void sha_hex(br_sha256_context *h, char *hex)
{
	unsigned char d[32];
	br_sha256_out(h, d);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* DIR/TARGET with ".." taken back (never above the archive root). */
static int join_rel(const char *dir, const char *target, char *out, size_t len)
{
	char buf[PATH_MAX * 2];
	snprintf(buf, sizeof buf, "%s/%s", target[0] == '/' ? "" : dir, target);
	size_t o = 0;
	for (char *p = buf, *e; *p; p = e) {
		while (*p == '/')
			p++;
		e = strchrnul(p, '/');
		size_t cl = (size_t)(e - p);
		if (!cl || (cl == 1 && *p == '.'))
			continue;
		if (cl == 2 && p[0] == '.' && p[1] == '.') {
			if (!o)
				return -EPERM;
			while (o && out[o - 1] != '/')
				o--;
			if (o)
				o--;
			continue;
		}
		if (o + 1 + cl + 1 > len)
			return -ENAMETOOLONG;
		if (o)
			out[o++] = '/';
		memcpy(out + o, p, cl);
		o += cl;
	}
	out[o] = 0;
	return 0;
}

static struct member *find_member(struct load *l, const char *path)
{
	for (int hops = 0; hops <= LINK_HOPS_MAX; hops++) {
		struct member *m = NULL;
		for (size_t i = 0; i < l->n && !m; i++)
			if (strcmp(l->m[i].path, path) == 0)
				m = &l->m[i];
		if (!m || !m->link)
			return m;
		path = m->link;
	}
	return NULL;
}

static void progress(struct image_ctx *ctx, const char *phase, uint64_t done, uint64_t total)
{
	if (ctx->progress)
		ctx->progress(ctx->progress_arg, phase, done, total);
}

static int stage_member(struct load *l, struct archive *a, struct member *m, uint64_t *staged,
			uint64_t total)
{
	char name[32];
	snprintf(name, sizeof name, "b%u", m->blob);
	int fd = openat(l->wk.fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return image_fail(l->ctx, -errno, "staging %s: %s", m->path, strerror(errno));
	uint64_t max = l->ctx->max_bytes ? l->ctx->max_bytes : DEFAULT_MAX_BYTES;
	br_sha256_context h;
	br_sha256_init(&h);
	static char buf[1 << 16];
	int r = 0;
	uint64_t last = 0;
	for (;;) {
		la_ssize_t n = archive_read_data(a, buf, sizeof buf);
		if (n < 0) {
			r = image_fail(l->ctx, -EIO, "%s: %s", l->file, archive_error_string(a));
			break;
		}
		if (n == 0)
			break;
		m->size += (uint64_t)n;
		*staged += (uint64_t)n;
		if (*staged > max) {
			r = image_fail(l->ctx, -EFBIG, "%s: more than %llu bytes: refusing the archive",
				       l->file, (unsigned long long)max);
			break;
		}
		br_sha256_update(&h, buf, (size_t)n);
		if (write(fd, buf, (size_t)n) != n) {
			r = image_fail(l->ctx, -EIO, "staging %s in %s/tmp: %s", m->path, l->st.dir,
				       strerror(errno));
			break;
		}
		if (m->size - last >= (4u << 20)) {
			last = m->size;
			progress(l->ctx, "reading", (uint64_t)archive_filter_bytes(a, -1), total);
		}
	}
	close(fd);
	sha_hex(&h, m->sha);
	return r;
}

/* Reads the whole archive once: every file is copied into the work dir
 * and hashed on the way, so the manifests can be read in any order and
 * every blob checked against its digest before any layer is applied. */
static int stage_archive(struct load *l)
{
	int fd = open(l->file, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0) {
		int r = image_fail(l->ctx, -errno, "%s: %s", l->file, strerror(errno));
		if (fd >= 0)
			close(fd);
		return r;
	}
	uint64_t total = (uint64_t)sb.st_size, staged = 0;
	char aerr[320];
	int r = 0, ar;
	struct archive *a = archive_lib_tar_reader(&r, aerr, sizeof aerr);
	if (!a) {
		close(fd);
		return image_fail(l->ctx, r, "%s", aerr);
	}
	if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK) {
		r = image_fail(l->ctx, -EINVAL, "%s: not a tar archive: %s", l->file, archive_error_string(a));
		goto out;
	}
	struct archive_entry *e;
	while (r == 0 && (ar = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *raw = archive_entry_pathname(e);
		char p[PATH_MAX], dir[PATH_MAX], link[PATH_MAX] = "";
		if (!raw || image_path_norm(raw, p, sizeof p) < 0) {
			r = image_fail(l->ctx, -EPERM, "%s: member '%s' has an unusable path", l->file,
				       raw ? raw : "?");
			break;
		}
		const char *hl = archive_entry_hardlink(e);
		int type = archive_entry_filetype(e);
		if (hl) {
			if (image_path_norm(hl, link, sizeof link) < 0)
				r = -EPERM;
		} else if (type == AE_IFLNK) {
			image_split_dir(p, dir);
			const char *t = archive_entry_symlink(e);
			if (!t || join_rel(dir, t, link, sizeof link) < 0)
				r = -EPERM;
		} else if (type != AE_IFREG) {
			continue;
		}
		if (r < 0) {
			r = image_fail(l->ctx, r, "%s: member '%s' links outside the archive", l->file, p);
			break;
		}
		if (grow_array(&l->m, &l->cap, l->n + 1, sizeof *l->m, 64, OUTER_MEMBERS_MAX) < 0) {
			r = image_fail(l->ctx, -E2BIG, "%s: too many members", l->file);
			break;
		}
		struct member *m = &l->m[l->n];
		memset(m, 0, sizeof *m);
		m->blob = (unsigned)l->n;
		m->path = strdup(p);
		m->link = link[0] ? strdup(link) : NULL;
		l->n++;
		if (!m->path || (link[0] && !m->link))
			r = image_fail(l->ctx, -ENOMEM, "out of memory");
		else if (!link[0])
			r = stage_member(l, a, m, &staged, total);
		progress(l->ctx, "reading", (uint64_t)archive_filter_bytes(a, -1), total);
	}
	if (r == 0 && ar != ARCHIVE_EOF)
		r = image_fail(l->ctx, -EINVAL, "%s: %s", l->file, archive_error_string(a));
out:
	archive_read_free(a);
	close(fd);
	return r;
}

/* The member PATH, checked against the sha256 EXPECT (when known). */
static struct member *checked(struct load *l, const char *path, const char *expect,
			      const char *what, int *r)
{
	struct member *m = find_member(l, path);
	if (!m) {
		*r = image_fail(l->ctx, -ENOENT, "%s: %s '%s' is missing from the archive", l->file, what,
				path);
		return NULL;
	}
	if (expect[0] && strcmp(m->sha, expect) != 0) {
		*r = image_fail(l->ctx, -EBADMSG, "%s: %s '%s' has sha256 %.12s, the manifest says %.12s: "
				"the archive is corrupt or was tampered with", l->file, what, path, m->sha,
				expect);
		return NULL;
	}
	return m;
}

static int read_member(struct load *l, struct member *m, char **buf)
{
	if (m->size > JSON_FILE_MAX)
		return image_fail(l->ctx, -E2BIG, "%s: '%s' is too large for a manifest", l->file, m->path);
	char name[32];
	snprintf(name, sizeof name, "b%u", m->blob);
	int fd = openat(l->wk.fd, name, O_RDONLY | O_CLOEXEC);
	*buf = malloc(m->size + 1);
	ssize_t n = fd >= 0 && *buf ? read(fd, *buf, m->size) : -1;
	if (fd >= 0)
		close(fd);
	if (n != (ssize_t)m->size) {
		free(*buf);
		*buf = NULL;
		return image_fail(l->ctx, -EIO, "%s: reading '%s' back failed", l->file, m->path);
	}
	(*buf)[n] = 0;
	return (int)n;
}

static int docker_images(struct load *l, struct image_manifest *im)
{
	int r = 0;
	char *buf;
	struct member *m = checked(l, "manifest.json", "", "manifest", &r);
	if (!m || (r = read_member(l, m, &buf)) < 0)
		return r;
	int n = image_parse_docker_manifest(buf, (size_t)r, im, IMAGE_MAX_PER_ARCHIVE);
	free(buf);
	if (n < 0)
		return image_fail(l->ctx, n, "%s: manifest.json is not a docker image manifest", l->file);
	for (int i = 0; i < n; i++) {
		struct member *c = checked(l, im[i].config, im[i].config_sha, "config", &r);
		if (!c || (r = read_member(l, c, &buf)) < 0)
			return r;
		char (*ids)[IMAGE_HEX_LEN + 1] = calloc(IMAGE_MAX_LAYERS, sizeof *ids);
		int nids = ids ? image_parse_diff_ids(buf, (size_t)r, ids, IMAGE_MAX_LAYERS) : -ENOMEM;
		free(buf);
		/* Layers named by their digest are checked against it; the
		 * others (<id>/layer.tar) against the config's diff_ids. */
		for (unsigned k = 0; k < im[i].nlayers && r >= 0; k++) {
			if (im[i].layer_sha[k][0])
				continue;
			if (nids != (int)im[i].nlayers)
				r = image_fail(l->ctx, -EBADMSG, "%s: the config does not list a digest for "
					       "each layer, so they cannot be checked", l->file);
			else
				memcpy(im[i].layer_sha[k], ids[k], IMAGE_HEX_LEN + 1);
		}
		free(ids);
		if (r < 0)
			return r;
	}
	return n;
}

/* Lower-case FILE's base name without its extensions, as an image name. */
static void name_from_file(const char *file, const char *tag, char *out, size_t len)
{
	const char *b = strrchr(file, '/');
	b = b ? b + 1 : file;
	char name[IMAGE_NAME_MAX + 1];
	size_t n = 0;
	for (; b[n] && b[n] != '.' && n < IMAGE_NAME_MAX; n++) {
		char c = b[n] >= 'A' && b[n] <= 'Z' ? (char)(b[n] + 32) : b[n];
		name[n] = image_name_char(c, n == 0) ? c : n ? '-' : 'x';
	}
	if (!n)
		name[n++] = 'x';
	name[n] = 0;
	char t[IMAGE_TAG_MAX + 1], nm[IMAGE_NAME_MAX + 1], ref[IMAGE_REF_MAX];
	snprintf(ref, sizeof ref, "%s:%s", name, tag && *tag ? tag : "latest");
	if (image_ref_parse(ref, nm, sizeof nm, t, sizeof t) < 0)
		snprintf(ref, sizeof ref, "%s:latest", name);
	snprintf(out, len, "%s", ref);
}

static int oci_image(struct load *l, struct image_manifest *im)
{
	int r = 0;
	char *buf;
	struct image_oci_desc d;
	struct member *m = checked(l, "index.json", "", "index", &r);
	if (!m || (r = read_member(l, m, &buf)) < 0)
		return r;
	r = image_parse_oci_index(buf, (size_t)r, &d);
	free(buf);
	char ref[IMAGE_REF_MAX];
	snprintf(ref, sizeof ref, "%s", d.ref);
	/* One nested index (a multi-platform image) is followed. */
	for (int depth = 0; r == 0 && d.is_index; depth++) {
		char path[IMAGE_MEMBER_MAX];
		snprintf(path, sizeof path, "blobs/sha256/%s", d.sha);
		if (depth || !(m = checked(l, path, d.sha, "index", &r)) ||
		    (r = read_member(l, m, &buf)) < 0) {
			if (depth)
				r = image_fail(l->ctx, -EINVAL, "%s: indexes nested too deep", l->file);
			return r;
		}
		r = image_parse_oci_index(buf, (size_t)r, &d);
		free(buf);
	}
	if (r < 0)
		return image_fail(l->ctx, r, "%s: index.json lists no image manifest for linux/%s",
				  l->file, HOST_ARCH);
	char path[IMAGE_MEMBER_MAX];
	snprintf(path, sizeof path, "blobs/sha256/%s", d.sha);
	if (!(m = checked(l, path, d.sha, "manifest", &r)) || (r = read_member(l, m, &buf)) < 0)
		return r;
	r = image_parse_oci_manifest(buf, (size_t)r, im);
	free(buf);
	if (r < 0)
		return image_fail(l->ctx, r, "%s: the image manifest is not valid", l->file);
	if (strchr(ref, '/') || strchr(ref, ':'))
		image_add_tag(im, ref);
	else if (ref[0])
		name_from_file(l->file, ref, im->tag[im->ntags++], IMAGE_REF_MAX);
	return 1;
}

static int load_one(struct load *l, struct image_manifest *im, const char *ref)
{
	int r = 0;
	struct member *cfg = checked(l, im->config, im->config_sha, "config", &r);
	if (!cfg)
		return r;
	struct member *layers[IMAGE_MAX_LAYERS];
	for (unsigned k = 0; k < im->nlayers; k++) {
		if (!im->layer_sha[k][0])
			return image_fail(l->ctx, -EBADMSG, "%s: layer %u has no digest to check", l->file, k + 1);
		if (!(layers[k] = checked(l, im->layer[k], im->layer_sha[k], "layer", &r)))
			return r;
	}
	char names[IMAGE_MAX_TAGS][IMAGE_REF_MAX];
	unsigned nnames = 0;
	if (ref) {
		char n[IMAGE_NAME_MAX + 1], t[IMAGE_TAG_MAX + 1];
		image_ref_parse(ref, n, sizeof n, t, sizeof t);
		snprintf(names[nnames++], IMAGE_REF_MAX, "%s:%s", n, t);
	} else {
		for (unsigned i = 0; i < im->ntags; i++)
			memcpy(names[nnames++], im->tag[i], IMAGE_REF_MAX);
		if (!nnames)
			name_from_file(l->file, NULL, names[nnames++], IMAGE_REF_MAX);
	}
	char path[96];
	struct stat sb;
	snprintf(path, sizeof path, "rootfs/%s", cfg->sha);
	int built = 0;
	if (fstatat(l->st.fd, path, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
		image_remove_tree(l->wk.fd, "rootfs", 0);
		int rootfd = mkdirat(l->wk.fd, "rootfs", 0755) < 0 ? -1
			     : openat(l->wk.fd, "rootfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (rootfd < 0)
			return image_fail(l->ctx, -errno, "%s/tmp: %s", l->st.dir, strerror(errno));
		struct writer w;
		image_tree_init(&w, l->ctx, rootfd);
		for (unsigned k = 0; k < im->nlayers && r == 0; k++) {
			char what[IMAGE_MEMBER_MAX + 32], blob[32];
			snprintf(what, sizeof what, "layer %u (%s)", k + 1, im->layer[k]);
			snprintf(blob, sizeof blob, "b%u", layers[k]->blob);
			w.what = what;
			progress(l->ctx, "applying layer", k + 1, im->nlayers);
			r = image_tree_apply_layer(&w, l->wk.fd, blob);
		}
		if (r == 0)
			image_tree_fix_apply(&w);
		image_tree_free(&w);
		fchmod(rootfd, 0755);
		close(rootfd);
		if (r < 0)
			return r;
		built = 1;
	}
	char source[300];
	const char *b = strrchr(l->file, '/');
	snprintf(source, sizeof source, "load:%s", b ? b + 1 : l->file);
	return commit(l->ctx, &l->st, &l->wk, cfg->sha, built, source, names, nnames);
}

int image_load(struct image_ctx *ctx, const char *file, const char *ref)
{
	char n[IMAGE_NAME_MAX + 1], t[IMAGE_TAG_MAX + 1];
	if (ref && image_ref_parse(ref, n, sizeof n, t, sizeof t) < 0)
		return image_fail(ctx, -EINVAL, "'%s' is not a valid image name: use NAME[:TAG] with "
				  "NAME of a-z 0-9 . _ - (no '/')", ref);
	struct load l = { .ctx = ctx, .file = file, .wk = { .fd = -1, .lockfd = -1 } };
	struct image_manifest *im = calloc(IMAGE_MAX_PER_ARCHIVE, sizeof *im);
	int r = im ? store_open(ctx, &l.st, 1) : image_fail(ctx, -ENOMEM, "out of memory");
	if (r == 0)
		r = work_open(ctx, &l.st, &l.wk);
	if (r == 0)
		r = stage_archive(&l);
	int nimg = 0;
	if (r == 0) {
		if (find_member(&l, "manifest.json"))
			nimg = docker_images(&l, im);
		else if (find_member(&l, "index.json"))
			nimg = oci_image(&l, im);
		else
			nimg = image_fail(ctx, -EINVAL, "%s is neither a 'docker save' archive (manifest.json) "
					  "nor an OCI image layout (index.json)", file);
		r = nimg < 0 ? nimg : 0;
	}
	if (r == 0 && ref && nimg != 1)
		r = image_fail(ctx, -EINVAL, "%s holds %d images: --name can only name one", file, nimg);
	for (int i = 0; r == 0 && i < nimg; i++)
		r = load_one(&l, &im[i], ref);
	work_close(&l.st, &l.wk);
	store_close(&l.st);
	for (size_t i = 0; i < l.n; i++) {
		free(l.m[i].path);
		free(l.m[i].link);
	}
	free(l.m);
	free(im);
	return r;
}

/* ------------------------------------------------------------- Importing */

struct import {
	struct writer *w;
	br_sha256_context h;
	struct { dev_t dev; ino_t ino; char *path; } *links;
	size_t nlinks, caplinks;
};

struct file_src {
	int fd;
	br_sha256_context *h;
};

static ssize_t file_reader(void *arg, void *buf, size_t len)
{
	struct file_src *s = arg;
	ssize_t n = read(s->fd, buf, len);
	if (n < 0)
		return -errno;
	br_sha256_update(s->h, buf, (size_t)n);
	return n;
}

/* The xattrs kbox keeps (user.*, security.capability) of FD, into BUF. */
static unsigned fd_xattrs(int fd, struct xat *x, char *buf, size_t len)
{
	char names[4096];
	ssize_t nl = flistxattr(fd, names, sizeof names);
	unsigned n = 0;
	size_t used = 0;
	for (ssize_t i = 0; i < nl && n < XATTR_MAX; i += (ssize_t)strlen(names + i) + 1) {
		const char *name = names + i;
		if (strncmp(name, "user.", 5) != 0 && strcmp(name, "security.capability") != 0)
			continue;
		size_t nlen = strlen(name) + 1;
		if (used + nlen >= len)
			break;
		memcpy(buf + used, name, nlen);
		ssize_t vl = fgetxattr(fd, name, buf + used + nlen, len - used - nlen);
		if (vl < 0)
			continue;
		x[n++] = (struct xat){ buf + used, buf + used + nlen, (size_t)vl };
		used += nlen + (size_t)vl;
	}
	return n;
}

/* Feeds one entry's identity into the tree digest: the id of an import is
 * the digest of names, types, owners, modes, link targets and contents
 * (not times), in sorted order. */
static void hash_entry(struct import *im, const char *path, const struct stat *sb,
		       const char *extra)
{
	char rec[128];
	int n = snprintf(rec, sizeof rec, "%o %u %u %llu", (unsigned)sb->st_mode,
			 (unsigned)sb->st_uid, (unsigned)sb->st_gid,
			 S_ISREG(sb->st_mode) ? (unsigned long long)sb->st_size : 0ull);
	br_sha256_update(&im->h, path, strlen(path) + 1);
	br_sha256_update(&im->h, rec, (size_t)n + 1);
	br_sha256_update(&im->h, extra, strlen(extra) + 1);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int import_link(struct import *im, const struct stat *sb, const char *path,
		       const char **first)
{
	for (size_t i = 0; i < im->nlinks; i++)
		if (im->links[i].dev == sb->st_dev && im->links[i].ino == sb->st_ino) {
			*first = im->links[i].path;
			return 0;
		}
	*first = NULL;
	if (grow_array(&im->links, &im->caplinks, im->nlinks + 1, sizeof *im->links, 16, 0) < 0)
		return -ENOMEM;
	char *p = strdup(path);
	if (!p)
		return -ENOMEM;
	im->links[im->nlinks].dev = sb->st_dev;
	im->links[im->nlinks].ino = sb->st_ino;
	im->links[im->nlinks++].path = p;
	return 0;
}

static int import_entry(struct import *im, int sfd, const char *name, const char *path,
			unsigned depth);

static int import_dir(struct import *im, int sfd, const char *rel, unsigned depth)
{
	int dfd = dup(sfd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return image_fail(im->w->ctx, -errno, "%s: %s", rel, strerror(errno));
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (grow_array(&names, &cap, n + 1, sizeof *names, 32, 0) < 0) {
			r = -ENOMEM;
			break;
		}
		if (!(names[n] = strdup(de->d_name))) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (r < 0)
		r = image_fail(im->w->ctx, r, "out of memory");
	qsort(names, n, sizeof *names, name_cmp);
	for (size_t i = 0; i < n && r == 0; i++) {
		char path[PATH_MAX];
		if ((size_t)snprintf(path, sizeof path, "%s%s%s", rel, *rel ? "/" : "", names[i]) >=
		    sizeof path)
			r = image_fail(im->w->ctx, -ENAMETOOLONG, "%s/%s: path too long", rel, names[i]);
		else
			r = import_entry(im, sfd, names[i], path, depth);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

static int import_entry(struct import *im, int sfd, const char *name, const char *path,
			unsigned depth)
{
	struct writer *w = im->w;
	struct stat sb;
	int r = image_tree_count_entry(w);
	if (r < 0)
		return r;
	if (fstatat(sfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return image_fail(w->ctx, -errno, "%s: %s", path, strerror(errno));
	struct wmeta m = { sb.st_mode, sb.st_uid, sb.st_gid, sb.st_mtim };
	struct xat x[XATTR_MAX];
	static char xbuf[XATTR_VALUE_MAX * 2];
	if (S_ISDIR(sb.st_mode)) {
		if (depth >= PATH_DEPTH_MAX)
			return image_fail(w->ctx, -ELOOP, "%s: nested too deep", path);
		int fd = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return image_fail(w->ctx, -errno, "%s: %s", path, strerror(errno));
		hash_entry(im, path, &sb, "");
		r = image_tree_dir(w, path, &m, x, fd_xattrs(fd, x, xbuf, sizeof xbuf));
		if (r == 0)
			r = import_dir(im, fd, path, depth + 1);
		close(fd);
	} else if (S_ISREG(sb.st_mode)) {
		const char *first = NULL;
		if (sb.st_nlink > 1 && (r = import_link(im, &sb, path, &first)) < 0)
			return image_fail(w->ctx, r, "out of memory");
		hash_entry(im, path, &sb, first ? first : "");
		if (first)
			return image_tree_link(w, path, first);
		int fd = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return image_fail(w->ctx, -errno, "%s: %s", path, strerror(errno));
		struct file_src src = { fd, &im->h };
		r = image_tree_file(w, path, &m, x, fd_xattrs(fd, x, xbuf, sizeof xbuf), file_reader, &src);
		close(fd);
	} else if (S_ISLNK(sb.st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(sfd, name, t, sizeof t - 1);
		if (n <= 0)
			return image_fail(w->ctx, -EINVAL, "%s: unreadable symlink", path);
		t[n] = 0;
		hash_entry(im, path, &sb, t);
		r = image_tree_special(w, path, t, &m);
	} else if (S_ISFIFO(sb.st_mode)) {
		hash_entry(im, path, &sb, "");
		r = image_tree_special(w, path, NULL, &m);
	} else if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)) {
		w->ctx->devices_skipped++;
	}
	return r;
}

int image_import(struct image_ctx *ctx, const char *dir, const char *ref)
{
	char n[IMAGE_NAME_MAX + 1], t[IMAGE_TAG_MAX + 1], names[1][IMAGE_REF_MAX];
	if (!ref || image_ref_parse(ref, n, sizeof n, t, sizeof t) < 0)
		return image_fail(ctx, -EINVAL, "'%s' is not a valid image name: use NAME[:TAG] with "
				  "NAME of a-z 0-9 . _ - (no '/')", ref ? ref : "");
	snprintf(names[0], sizeof names[0], "%s:%s", n, t);
	int sfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0)
		return image_fail(ctx, -errno, "%s: %s", dir, strerror(errno));
	struct store st = { .fd = -1 };
	struct work wk = { .fd = -1, .lockfd = -1 };
	struct writer w;
	struct import im = { .w = &w };
	br_sha256_init(&im.h);
	int rootfd = -1;
	int r = store_open(ctx, &st, 1);
	if (r == 0)
		r = work_open(ctx, &st, &wk);
	if (r == 0) {
		rootfd = mkdirat(wk.fd, "rootfs", 0755) < 0 ? -1
			 : openat(wk.fd, "rootfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (rootfd < 0)
			r = image_fail(ctx, -errno, "%s/tmp: %s", st.dir, strerror(errno));
	}
	image_tree_init(&w, ctx, rootfd);
	w.what = dir;
	if (r == 0) {
		struct stat sb;
		fstat(sfd, &sb);
		hash_entry(&im, "", &sb, "");
		progress(ctx, "copying", 0, 0);
		r = import_dir(&im, sfd, "", 0);
		if (r == 0) {
			image_tree_fix_apply(&w);
			struct wmeta m = { sb.st_mode, sb.st_uid, sb.st_gid, sb.st_mtim };
			image_tree_set_meta_fd(&w, rootfd, &m, NULL, 0, 1);
		}
	}
	image_tree_free(&w);
	if (r == 0) {
		char id[IMAGE_HEX_LEN + 1], source[PATH_MAX + 16], real[PATH_MAX];
		sha_hex(&im.h, id);
		snprintf(source, sizeof source, "import:%s", realpath(dir, real) ? real : dir);
		r = commit(ctx, &st, &wk, id, 1, source, names, 1);
	}
	if (rootfd >= 0)
		close(rootfd);
	for (size_t i = 0; i < im.nlinks; i++)
		free(im.links[i].path);
	free(im.links);
	work_close(&st, &wk);
	store_close(&st);
	close(sfd);
	return r;
}

/* ------------------------------------------------ Listing and removing */

struct list_acc {
	struct store *st;
	struct image_info *v;
	size_t n, cap;
};

static void read_meta(struct store *st, struct image_info *info)
{
	char path[96], buf[1024];
	snprintf(path, sizeof path, "meta/%s", info->id);
	int fd = openat(st->fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	for (char *line = buf, *e; *line; line = e) {
		e = strchrnul(line, '\n');
		if (*e)
			*e++ = 0;
		unsigned long long v;
		long long c;
		if (sscanf(line, "size %llu", &v) == 1)
			info->size = v;
		else if (sscanf(line, "created %lld", &c) == 1)
			info->created = c;
		else if (strncmp(line, "source ", 7) == 0)
			snprintf(info->source, sizeof info->source, "%s", line + 7);
	}
}

static int list_add(void *arg, const char *nametag, const char *id)
{
	struct list_acc *a = arg;
	char path[96];
	struct stat sb;
	snprintf(path, sizeof path, "rootfs/%s", id);
	if (fstatat(a->st->fd, path, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	if (grow_array(&a->v, &a->cap, a->n + 1, sizeof *a->v, 16, 0) < 0)
		return -ENOMEM;
	struct image_info *info = &a->v[a->n++];
	memset(info, 0, sizeof *info);
	snprintf(info->ref, sizeof info->ref, "%s", nametag);
	memcpy(info->id, id, IMAGE_HEX_LEN + 1);
	read_meta(a->st, info);
	return 0;
}

static int info_cmp(const void *a, const void *b)
{
	return strcmp(((const struct image_info *)a)->ref, ((const struct image_info *)b)->ref);
}

int image_list(struct image_ctx *ctx, void (*fn)(void *arg, const struct image_info *),
	       void *arg)
{
	struct store st;
	int r = store_open(ctx, &st, 0);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	struct list_acc a = { .st = &st };
	r = refs_each(&st, list_add, &a);
	if (r < 0)
		r = image_fail(ctx, r, "listing %s/refs: %s", st.dir, strerror(-r));
	qsort(a.v, a.n, sizeof *a.v, info_cmp);
	for (size_t i = 0; r == 0 && i < a.n; i++)
		fn(arg, &a.v[i]);
	free(a.v);
	store_close(&st);
	return r;
}

struct unref {
	struct store *st;
	const char *id;
};

static int unref_id(void *arg, const char *nametag, const char *id)
{
	struct unref *u = arg;
	char path[IMAGE_REF_MAX + 8];
	if (strcmp(id, u->id) == 0) {
		snprintf(path, sizeof path, "refs/%s", nametag);
		unlinkat(u->st->fd, path, 0);
	}
	return 0;
}

int image_remove(struct image_ctx *ctx, const char *ref)
{
	struct store st;
	int r = store_open(ctx, &st, 0);
	if (r < 0)
		return r == -ENOENT ? image_fail(ctx, r, "no image '%s' (the store is empty)", ref) : r;
	int lk = store_lock(ctx, &st);
	if (lk < 0) {
		store_close(&st);
		return lk;
	}
	char id[IMAGE_HEX_LEN + 1], nametag[IMAGE_REF_MAX], path[IMAGE_REF_MAX + 8];
	int names = 0;
	ctx->users[0] = 0;
	r = lookup(&st, ref, id, nametag);
	if (r == 0 && nametag[0])
		refs_each(&st, ref_count, &(struct ref_counter){ id, &names });
	if (r == -ENOTUNIQ)
		r = image_fail(ctx, r, "'%s' matches several image ids: give more digits", ref);
	else if (r < 0)
		r = image_fail(ctx, r, "no image '%s' (see 'kbox image ls')", ref);
	/* Only the last name's removal would take the files away. */
	else if ((!nametag[0] || names <= 1) &&
		 image_users(&st, id, ctx->users, sizeof ctx->users) > 0 && !ctx->force)
		r = image_fail(ctx, -EBUSY, "image '%s' (id %.12s) is in use by running sandbox(es): %s; "
				      "stop them first ('kbox stop NAME'), or use --force",
			       ref, id, ctx->users);
	else if (nametag[0]) {
		snprintf(path, sizeof path, "refs/%s", nametag);
		unlinkat(st.fd, path, 0);
	} else {
		struct unref u = { &st, id };
		refs_each(&st, unref_id, &u);
	}
	if (r == 0) {
		gc_id(&st, id);
		sweep_unused(&st);
		memcpy(ctx->id, id, sizeof id);
		snprintf(ctx->ref, sizeof ctx->ref, "%s", nametag);
	}
	close(lk);
	store_close(&st);
	return r;
}

int image_resolve(const char *ref, char *dir, size_t len)
{
	if (strchr(ref, '/') || ref[0] == '.')
		return (size_t)snprintf(dir, len, "%s", ref) >= len ? -ENAMETOOLONG : 0;
	struct image_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	struct store st;
	int r = store_open(&ctx, &st, 0);
	if (r < 0)
		return r == -ENAMETOOLONG ? r : -ENOENT;
	char id[IMAGE_HEX_LEN + 1], nametag[IMAGE_REF_MAX];
	r = lookup(&st, ref, id, nametag);
	if (r == 0 && (size_t)snprintf(dir, len, "%s/rootfs/%s", st.dir, id) >= len)
		r = -ENAMETOOLONG;
	store_close(&st);
	return r;
}

int image_store_hold(void)
{
	struct image_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	struct store st;
	int r = store_open(&ctx, &st, 0);
	if (r < 0)
		return r;
	int fd = openat(st.fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_SH) < 0) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		fd = r;
	}
	store_close(&st);
	return fd;
}
