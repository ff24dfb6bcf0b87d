/* The passthrough backend's fork state (fs_passthrough_fork.c) through its
 * ops table: a table saved from one backend and loaded into a new one over
 * the same folder keeps the guest's nodeids and handles working; what the
 * host changed in between goes stale; and hostile tables, built here by
 * hand after the layout in fs_passthrough_fork.c, are refused whole with
 * the backend left as new.  The device and the FUSE session around it:
 * test_virtio_fs.c. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "devices/fs_passthrough.h"
#include "lib/statebuf.h"
#include "tests/lib/tmp_tree.h"
#include "tests/lib/unit_suite.h"

static char dir[64];
static struct fs_passthrough *fs, *fs2;

static void put(const char *name, const char *text)
{
	ck_assert_int_eq(tmp_tree_put(dir, name, text), 0);
}

static void path(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", dir, name);
}

static struct fs_passthrough *serve(const char *const *extra, size_t n_extra)
{
	struct fs_passthrough_config c = { .root = dir, .hidden.extra = extra,
					   .hidden.n_extra = n_extra };
	struct fs_passthrough *p;

	ck_assert_int_eq(fs_passthrough_new(&c, &p), 0);
	return p;
}

static void setup(void)
{
	char p[128];

	ck_assert_int_eq(tmp_tree_make(dir, sizeof dir, "/tmp/kbox-fspf-unit.XXXXXX"), 0);
	put("a", "hello");
	put("b", "world");
	put(".env", "SECRET=1");
	path(p, sizeof p, "sub");
	ck_assert_int_eq(mkdir(p, 0755), 0);
	put("sub/c", "deep");
	put("sub/d", "more");
	fs = serve(NULL, 0);
	fs2 = NULL;
}

static void teardown(void)
{
	fs_passthrough_free(fs);
	fs_passthrough_free(fs2);
	tmp_tree_remove(dir);
}

static uint64_t look(struct fs_passthrough *p, uint64_t parent, const char *name)
{
	struct fuse_fs_entry e;

	ck_assert_int_eq(fs_passthrough_ops.lookup(p, parent, name, &e), 0);
	return e.nodeid;
}

static ssize_t rd(struct fs_passthrough *p, uint64_t fh, char *buf, size_t size, off_t off)
{
	struct iovec iov = { .iov_base = buf, .iov_len = size - 1 };
	ssize_t n = fs_passthrough_ops.read(p, fh, &iov, 1, off);
	buf[n > 0 ? n : 0] = '\0';
	return n;
}

/* What a listing gave: names joined by ',' and the offset after the
 * first entry. */
struct listing {
	char names[512];
	uint64_t first_next;
	unsigned n;
};

static int fill(void *ctx, const char *name, uint64_t ino, unsigned dtype, uint64_t next_off,
		const struct fuse_fs_entry *e)
{
	struct listing *l = ctx;
	(void)ino;
	(void)dtype;
	(void)e;
	if (l->n++ == 0)
		l->first_next = next_off;
	strncat(l->names, name, sizeof l->names - strlen(l->names) - 2);
	strcat(l->names, ",");
	return 1;
}

static int fits(void *ctx, size_t namelen)
{
	(void)ctx;
	(void)namelen;
	return 1;
}

static struct listing list(struct fs_passthrough *p, uint64_t node, uint64_t dh, uint64_t off)
{
	struct listing l;
	memset(&l, 0, sizeof l);
	ck_assert_int_eq(fs_passthrough_ops.readdir(p, node, dh, off, false, fill, fits, &l), 0);
	return l;
}

/* p's tables as bytes, into w (statebuf_free by the caller). */
static void save(struct fs_passthrough *p, struct statebuf_writer *w)
{
	char err[200] = "";
	statebuf_init(w);
	ck_assert_int_eq(fs_passthrough_ops.fork_save(p, w, err, sizeof err), 0);
	ck_assert_int_eq(w->err, 0);
}

static int load(struct fs_passthrough *p, const void *b, size_t len, char *err, size_t errlen)
{
	err[0] = '\0';
	return fs_passthrough_ops.fork_load(p, b, len, err, errlen);
}

START_TEST(fork_carries_nodes_and_handles)
{
	char buf[64], p[128];
	struct statebuf_writer w;
	struct stat st;

	uint64_t sub = look(fs, 1, "sub");
	uint64_t c = look(fs, sub, "c");
	uint64_t a = look(fs, 1, "a");
	ck_assert_uint_eq(look(fs, 1, "a"), a);
	uint64_t fh, dh, sdh;
	ck_assert_int_eq(fs_passthrough_ops.open(fs, a, O_RDWR, &fh), 0);
	ck_assert_int_eq(fs_passthrough_ops.opendir(fs, 1, &dh), 0);
	ck_assert_int_eq(fs_passthrough_ops.opendir(fs, sub, &sdh), 0);
	struct listing before = list(fs, 1, dh, 0);
	ck_assert_ptr_null(strstr(before.names, ".env"));
	struct listing rest_before = list(fs, 1, dh, before.first_next);
	save(fs, &w);

	fs2 = serve(NULL, 0);
	char err[200];
	ck_assert_int_eq(load(fs2, w.buf, w.len, err, sizeof err), 0);
	statebuf_free(&w);
	ck_assert_uint_eq(fs_passthrough_inodes(fs2), 3);
	/* Node ids as the guest knows them: attributes, and a lookup finds
	 * the same node again. */
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs2, c, FUSE_FS_NO_FH, &st), 0);
	ck_assert_uint_eq(st.st_size, 4);
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs2, sub, FUSE_FS_NO_FH, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(look(fs2, sub, "c"), c);
	/* A sibling gets a nodeid the guest does not hold yet. */
	uint64_t d = look(fs2, sub, "d");
	ck_assert_uint_ne(d, a);
	ck_assert_uint_ne(d, c);
	ck_assert_uint_ne(d, sub);
	/* The old handles: read, write, list (from the start and from an
	 * offset the first backend gave). */
	ck_assert_int_eq(rd(fs2, fh, buf, sizeof buf, 0), 5);
	ck_assert_str_eq(buf, "hello");
	struct iovec iov = { .iov_base = "HE", .iov_len = 2 };
	ck_assert_int_eq(fs_passthrough_ops.write(fs2, fh, &iov, 1, 0), 2);
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs2, a, fh, &st), 0);
	ck_assert_uint_eq(st.st_size, 5);
	ck_assert_str_eq(list(fs2, 1, dh, 0).names, before.names);
	ck_assert_str_eq(list(fs2, 1, dh, before.first_next).names, rest_before.names);
	ck_assert_ptr_nonnull(strstr(list(fs2, sub, sdh, 0).names, "c,"));
	/* The lookup counts came along: a's two lookups, then it goes once
	 * its handle is released too. */
	fs_passthrough_ops.forget(fs2, a, 1);
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs2, a, FUSE_FS_NO_FH, &st), 0);
	fs_passthrough_ops.forget(fs2, a, 1);
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs2, a, FUSE_FS_NO_FH, &st), -ESTALE);
	ck_assert_int_eq(fs_passthrough_ops.release(fs2, fh), 0);
	ck_assert_int_eq(fs_passthrough_ops.release(fs2, fh), -EBADF);
	ck_assert_int_eq(fs_passthrough_ops.releasedir(fs2, dh), 0);
	ck_assert_int_eq(fs_passthrough_ops.releasedir(fs2, sdh), 0);
	ck_assert_uint_eq(fs_passthrough_inodes(fs2), 3);
	path(p, sizeof p, "a");
	FILE *f = fopen(p, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fread(buf, 1, 5, f), 5);
	fclose(f);
	ck_assert_mem_eq(buf, "HEllo", 5);
	/* The first backend goes on as it was. */
	ck_assert_int_eq(rd(fs, fh, buf, sizeof buf, 0), 5);
	ck_assert_str_eq(buf, "HEllo");
	/* And the copy forks again. */
	save(fs2, &w);
	struct fs_passthrough *fs3 = serve(NULL, 0);
	ck_assert_int_eq(load(fs3, w.buf, w.len, err, sizeof err), 0);
	ck_assert_uint_eq(look(fs3, sub, "d"), d);
	fs_passthrough_free(fs3);
	statebuf_free(&w);
}
END_TEST

START_TEST(fork_host_changes_go_stale)
{
	char buf[64], from[128], to[128];
	struct statebuf_writer w;
	struct stat st;
	char err[200];

	uint64_t a = look(fs, 1, "a");
	uint64_t b = look(fs, 1, "b");
	uint64_t sub = look(fs, 1, "sub");
	uint64_t c = look(fs, sub, "c");
	uint64_t fa, fb, fc;
	ck_assert_int_eq(fs_passthrough_ops.open(fs, a, O_RDONLY, &fa), 0);
	ck_assert_int_eq(fs_passthrough_ops.open(fs, b, O_RDWR, &fb), 0);
	save(fs, &w);
	/* Between the save and the load the host renames a (same inode)
	 * and deletes b. */
	path(from, sizeof from, "a");
	path(to, sizeof to, "a2");
	ck_assert_int_eq(rename(from, to), 0);
	path(from, sizeof from, "b");
	ck_assert_int_eq(unlink(from), 0);
	fs2 = serve(NULL, 0);
	ck_assert_int_eq(load(fs2, w.buf, w.len, err, sizeof err), 0);
	statebuf_free(&w);
	/* Neither could be opened again: both handles are stale, held
	 * without an fd, and every operation on them says so. */
	ck_assert_uint_eq(fs_passthrough_open_fds(fs2), 0);
	ck_assert_int_eq(rd(fs2, fa, buf, sizeof buf, 0), -ESTALE);
	struct iovec iov = { .iov_base = "x", .iov_len = 1 };
	ck_assert_int_eq(fs_passthrough_ops.write(fs2, fb, &iov, 1, 0), -ESTALE);
	ck_assert_int_eq(fs_passthrough_ops.flush(fs2, fb), -ESTALE);
	ck_assert_int_eq(fs_passthrough_ops.fsync(fs2, fb, false), -ESTALE);
	struct flock fl = { .l_type = F_RDLCK };
	ck_assert_int_eq(fs_passthrough_ops.getlk(fs2, fb, &fl), -ESTALE);
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs2, b, FUSE_FS_NO_FH, &st), -ESTALE);
	/* a, by the old name, is stale too; looked up by its new name it
	 * is the same node again, and answers. */
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs2, a, FUSE_FS_NO_FH, &st), -ESTALE);
	ck_assert_uint_eq(look(fs2, 1, "a2"), a);
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs2, a, FUSE_FS_NO_FH, &st), 0);
	ck_assert_int_eq(rd(fs2, fa, buf, sizeof buf, 0), -ESTALE);
	/* RELEASE frees a stale handle, once. */
	ck_assert_int_eq(fs_passthrough_ops.release(fs2, fa), 0);
	ck_assert_int_eq(fs_passthrough_ops.release(fs2, fa), -EBADF);
	ck_assert_int_eq(fs_passthrough_ops.releasedir(fs2, fb), -EBADF);
	ck_assert_int_eq(fs_passthrough_ops.release(fs2, fb), 0);
	/* A fresh open takes a freed number and works. */
	ck_assert_int_eq(fs_passthrough_ops.open(fs2, c, O_RDONLY, &fc), 0);
	ck_assert_uint_le(fc, 1);
	ck_assert_int_eq(rd(fs2, fc, buf, sizeof buf, 0), 4);
	/* A handle opened by the load follows its inode when the host
	 * renames it afterwards. */
	path(from, sizeof from, "sub/c");
	path(to, sizeof to, "sub/c2");
	ck_assert_int_eq(rename(from, to), 0);
	ck_assert_int_eq(rd(fs2, fc, buf, sizeof buf, 0), 4);
	ck_assert_str_eq(buf, "deep");
	ck_assert_int_eq(fs_passthrough_ops.release(fs2, fc), 0);
	/* A reset drops stale handles with the rest. */
	save(fs, &w);
	fs_passthrough_free(fs2);
	fs2 = serve(NULL, 0);
	ck_assert_int_eq(load(fs2, w.buf, w.len, err, sizeof err), 0);
	statebuf_free(&w);
	fs_passthrough_ops.reset(fs2);
	ck_assert_uint_eq(fs_passthrough_inodes(fs2), 0);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs2), 0);
	ck_assert_int_eq(rd(fs2, fa, buf, sizeof buf, 0), -EBADF);
}
END_TEST

START_TEST(fork_handle_flags_and_fd_cap)
{
	char buf[64], err[200];
	struct statebuf_writer w;

	uint64_t a = look(fs, 1, "a");
	uint64_t fh, fh2;
	/* O_TRUNC cut the file when the guest opened it, never again. */
	ck_assert_int_eq(fs_passthrough_ops.open(fs, a, O_WRONLY | O_APPEND, &fh), 0);
	ck_assert_int_eq(fs_passthrough_ops.open(fs, a, O_RDONLY, &fh2), 0);
	save(fs, &w);
	fs2 = serve(NULL, 0);
	ck_assert_int_eq(load(fs2, w.buf, w.len, err, sizeof err), 0);
	struct iovec iov = { .iov_base = "!", .iov_len = 1 };
	ck_assert_int_eq(fs_passthrough_ops.write(fs2, fh, &iov, 1, 0), 1);
	ck_assert_int_eq(rd(fs2, fh2, buf, sizeof buf, 0), 6);
	ck_assert_str_eq(buf, "hello!");
	/* The read-only handle stays read-only. */
	ck_assert_int_lt(fs_passthrough_ops.write(fs2, fh2, &iov, 1, 0), 0);
	/* Under a cap of two fds (a's O_PATH fd and one handle), the second
	 * handle cannot be opened: stale, not a failed load. */
	struct fs_passthrough_config cc = { .root = dir, .max_fds = 2 };
	struct fs_passthrough *capped;
	ck_assert_int_eq(fs_passthrough_new(&cc, &capped), 0);
	ck_assert_int_eq(load(capped, w.buf, w.len, err, sizeof err), 0);
	ck_assert_uint_eq(fs_passthrough_open_fds(capped), 2);
	ck_assert_int_eq(rd(capped, fh, buf, sizeof buf, 0), -EBADF); /* write-only */
	ck_assert_int_eq(rd(capped, fh2, buf, sizeof buf, 0), -ESTALE);
	ck_assert_int_eq(fs_passthrough_ops.release(capped, fh2), 0);
	ck_assert_int_eq(fs_passthrough_ops.release(capped, fh), 0);
	ck_assert_uint_le(fs_passthrough_open_fds(capped), 1);
	fs_passthrough_free(capped);
	/* A read-only mount opens a write handle as stale. */
	struct fs_passthrough_config rc = { .root = dir, .readonly = true };
	struct fs_passthrough *ro;
	ck_assert_int_eq(fs_passthrough_new(&rc, &ro), 0);
	ck_assert_int_eq(load(ro, w.buf, w.len, err, sizeof err), 0);
	ck_assert_int_eq(fs_passthrough_ops.write(ro, fh, &iov, 1, 0), -ESTALE);
	ck_assert_int_eq(rd(ro, fh2, buf, sizeof buf, 0), 6);
	fs_passthrough_free(ro);
	statebuf_free(&w);
}
END_TEST

/* ---- hostile tables, built by hand ---- */

struct node_rec {
	uint64_t id, parent, nlookup, dev, ino;
	uint32_t type;
	uint16_t bits;
	const char *name;
	int name_len; /* -1: strlen(name) */
};

struct fh_rec {
	uint64_t fh, id;
	uint32_t flags, bits;
};

struct table {
	uint64_t root_dev, root_ino;
	struct node_rec n[8];
	unsigned nn;
	struct fh_rec h[4];
	unsigned nh;
	int64_t count_nodes, count_handles; /* -1: nn, nh */
	uint32_t magic;
};

static void build(const struct table *t, struct statebuf_writer *w)
{
	statebuf_init(w);
	statebuf_u32(w, t->magic);
	statebuf_u32(w, 1);
	statebuf_u64(w, t->root_dev);
	statebuf_u64(w, t->root_ino);
	statebuf_u32(w, t->count_nodes < 0 ? t->nn : (uint32_t)t->count_nodes);
	statebuf_u32(w, t->count_handles < 0 ? t->nh : (uint32_t)t->count_handles);
	for (unsigned i = 0; i < t->nn; i++) {
		const struct node_rec *n = &t->n[i];
		size_t nl = n->name_len < 0 ? strlen(n->name) : (size_t)n->name_len;
		statebuf_u64(w, n->id);
		statebuf_u64(w, n->parent);
		statebuf_u64(w, n->nlookup);
		statebuf_u64(w, n->dev);
		statebuf_u64(w, n->ino);
		statebuf_u32(w, n->type);
		statebuf_u16(w, n->bits);
		statebuf_u16(w, (uint16_t)nl);
		statebuf_put(w, n->name, nl);
	}
	for (unsigned i = 0; i < t->nh; i++) {
		statebuf_u64(w, t->h[i].fh);
		statebuf_u64(w, t->h[i].id);
		statebuf_u32(w, t->h[i].flags);
		statebuf_u32(w, t->h[i].bits);
	}
}

/* A table the guest could hold: sub (2), sub/c (3), a (4); a read
 * handle 0 on a and a directory handle 1 on sub. */
static struct table good_table(void)
{
	struct stat r, s, c, a;
	char p[128];

	ck_assert_int_eq(stat(dir, &r), 0);
	path(p, sizeof p, "sub");
	ck_assert_int_eq(stat(p, &s), 0);
	path(p, sizeof p, "sub/c");
	ck_assert_int_eq(stat(p, &c), 0);
	path(p, sizeof p, "a");
	ck_assert_int_eq(stat(p, &a), 0);
	struct table t = {
		.root_dev = r.st_dev, .root_ino = r.st_ino,
		.n = {
			{ 2, 1, 1, s.st_dev, s.st_ino, S_IFDIR, 1, "sub", -1 },
			{ 3, 2, 1, c.st_dev, c.st_ino, S_IFREG, 1, "c", -1 },
			{ 4, 1, 2, a.st_dev, a.st_ino, S_IFREG, 1, "a", -1 },
		},
		.nn = 3,
		.h = { { 0, 4, O_RDONLY, 0 }, { 1, 2, 0, 1 } },
		.nh = 2,
		.count_nodes = -1, .count_handles = -1,
		.magic = 0x54505346u,
	};
	return t;
}

/* t must be refused by fs2, which then is as new. */
static void refused(const struct table *t, int want)
{
	struct statebuf_writer w;
	char err[200];

	build(t, &w);
	ck_assert_int_eq(w.err, 0);
	int rc = load(fs2, w.buf, w.len, err, sizeof err);
	statebuf_free(&w);
	ck_assert_msg(rc == want, "rc %d (%s), want %d", rc, err, want);
	ck_assert_str_ne(err, "");
	ck_assert_uint_eq(fs_passthrough_inodes(fs2), 0);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs2), 0);
}

START_TEST(fork_refuses_hostile_tables)
{
	struct statebuf_writer w;
	char err[200], buf[16];
	struct table t;

	fs2 = serve(NULL, 0);
	/* Every cut of a good table. */
	build((t = good_table(), &t), &w);
	for (size_t len = 0; len < w.len; len++) {
		ck_assert_int_lt(load(fs2, w.buf, len, err, sizeof err), 0);
		ck_assert_uint_eq(fs_passthrough_inodes(fs2), 0);
		ck_assert_uint_eq(fs_passthrough_open_fds(fs2), 0);
	}
	statebuf_free(&w);
	/* Counts that do not match the records, or huge. */
	t = good_table(), t.count_nodes = 4, refused(&t, -EBADMSG);
	t = good_table(), t.count_nodes = 2, refused(&t, -EINVAL);
	t = good_table(), t.count_handles = 3, refused(&t, -EBADMSG);
	t = good_table(), t.count_nodes = 0xffffffff, refused(&t, -EBADMSG);
	t = good_table(), t.count_handles = 0x7fffffff, refused(&t, -EBADMSG);
	t = good_table(), t.magic ^= 1, refused(&t, -EINVAL);
	/* Node ids: duplicate, out of order, the root's, past the bound. */
	t = good_table(), t.n[2].id = 3, refused(&t, -EINVAL);
	t = good_table(), t.n[1].id = 5, refused(&t, -EINVAL);
	t = good_table(), t.n[0].id = 1, refused(&t, -EINVAL);
	t = good_table(), t.n[2].id = 1ull << 40, t.h[0].id = 1ull << 40, refused(&t, -EINVAL);
	/* Parents: a cycle, itself, unknown, not a directory, zero. */
	t = good_table(), t.n[1].type = S_IFDIR, t.n[0].parent = 3, refused(&t, -EINVAL);
	t = good_table(), t.n[0].parent = 2, refused(&t, -EINVAL);
	t = good_table(), t.n[1].parent = 9, refused(&t, -EINVAL);
	t = good_table(), t.n[1].parent = 4, refused(&t, -EINVAL);
	t = good_table(), t.n[1].parent = 0, refused(&t, -EINVAL);
	/* Names: hidden (in any case), dots, a slash, empty, a NUL inside,
	 * too long. */
	static const char *const bad[] = { ".env", ".ENV", "kbox.yaml", "..", ".", "x/y", "" };
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
		t = good_table(), t.n[2].name = bad[i], refused(&t, -EINVAL);
	t = good_table(), t.n[2].name = "a\0b", t.n[2].name_len = 3, refused(&t, -EINVAL);
	char longname[300];
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	t = good_table(), t.n[2].name = longname, refused(&t, -EINVAL);
	/* Types and bits. */
	t = good_table(), t.n[2].type = 0, refused(&t, -EINVAL);
	t = good_table(), t.n[2].type = 0170000, refused(&t, -EINVAL);
	t = good_table(), t.n[2].bits = 0x80, refused(&t, -EINVAL);
	/* One inode findable as two nodes; a node nothing holds; a root of
	 * another folder. */
	t = good_table(), t.n[2].ino = t.n[1].ino, t.n[2].dev = t.n[1].dev, refused(&t, -EINVAL);
	t = good_table(), t.n[1].nlookup = 0, refused(&t, -EINVAL);
	t = good_table(), t.root_ino++, refused(&t, -EINVAL);
	/* Handles: unknown node, wrong kind, duplicate, bad flags, bits. */
	t = good_table(), t.h[0].id = 7, refused(&t, -EINVAL);
	t = good_table(), t.h[0].id = 2, refused(&t, -EINVAL);
	t = good_table(), t.h[1].id = 3, refused(&t, -EINVAL);
	t = good_table(), t.h[1].fh = 0, refused(&t, -EINVAL);
	t = good_table(), t.h[0].flags = O_ACCMODE, refused(&t, -EINVAL);
	t = good_table(), t.h[0].bits = 4, refused(&t, -EINVAL);
	t = good_table(), t.h[1].fh = 1ull << 32, refused(&t, -EINVAL);
	/* A byte more than the tables. */
	build((t = good_table(), &t), &w);
	statebuf_u16(&w, 0);
	ck_assert_int_eq(load(fs2, w.buf, w.len, err, sizeof err), -EBADMSG);
	ck_assert_uint_eq(fs_passthrough_inodes(fs2), 0);
	statebuf_free(&w);
	/* After all that, the good table loads, and its handles work. */
	build((t = good_table(), &t), &w);
	ck_assert_int_eq(load(fs2, w.buf, w.len, err, sizeof err), 0);
	ck_assert_uint_eq(fs_passthrough_inodes(fs2), 3);
	ck_assert_int_eq(rd(fs2, 0, buf, sizeof buf, 0), 5);
	ck_assert_str_eq(buf, "hello");
	ck_assert_ptr_nonnull(strstr(list(fs2, 2, 1, 0).names, "c,"));
	/* A second load into a backend in use is refused. */
	ck_assert_int_eq(load(fs2, w.buf, w.len, err, sizeof err), -EBUSY);
	statebuf_free(&w);
}
END_TEST

/* A path pattern hides sub/c: a table naming it there is refused. */
START_TEST(fork_refuses_path_hidden)
{
	static const char *const extra[] = { "sub/c" };
	struct statebuf_writer w;
	char err[200];
	struct table t = good_table();

	fs2 = serve(extra, 1);
	build(&t, &w);
	ck_assert_int_eq(load(fs2, w.buf, w.len, err, sizeof err), -EINVAL);
	ck_assert_uint_eq(fs_passthrough_inodes(fs2), 0);
	statebuf_free(&w);
	t.n[1].name = "d";
	t.n[1].ino++; /* whatever inode: only the name is judged here */
	build(&t, &w);
	ck_assert_int_eq(load(fs2, w.buf, w.len, err, sizeof err), 0);
	statebuf_free(&w);
}
END_TEST

Suite *fs_passthrough_fork_suite(void)
{
	return unit_suite_fixture("fs_passthrough_fork", "core", setup, teardown, 0,
				  fork_carries_nodes_and_handles, fork_host_changes_go_stale,
				  fork_handle_flags_and_fd_cap, fork_refuses_hostile_tables,
				  fork_refuses_path_hidden);
}
