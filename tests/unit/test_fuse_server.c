/* FUSE server + passthrough backend: good requests and hostile ones.  Each
 * test serves a fresh temporary directory. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/fs_passthrough.h"
#include "devices/fuse_server.h"
#include "tests/lib/tmp_tree.h"
#include "tests/lib/unit_suite.h"

static char dir[64];
static struct fs_passthrough *fs;
static struct fuse_server *srv;
static uint8_t req[256 * 1024];
static uint8_t rep[256 * 1024];
static uint64_t next_unique = 1;

static void put_file(const char *name, const char *text)
{
	ck_assert_int_eq(tmp_tree_put(dir, name, text), 0);
}

/* A server of the backend c; keep_opendir as in fuse_server_config. */
static void serve_as(const struct fs_passthrough_config *c, bool keep_opendir)
{
	struct fuse_server_config sc = { .entry_timeout = 1,
					 .attr_timeout = 1,
					 .posix_locks = true,
					 .keep_opendir = keep_opendir };
	ck_assert_int_eq(fs_passthrough_new(c, &fs), 0);
	ck_assert_int_eq(fuse_server_new(&fs_passthrough_ops, fs, &sc, &srv), 0);
}

static void serve(bool ro, const char *const *hidden, size_t n_hidden,
		  bool hidden_set, unsigned max_fds)
{
	struct fs_passthrough_config c = { .root = dir, .readonly = ro, .hidden.list = hidden,
				.hidden.n = n_hidden, .hidden.set = hidden_set,
				.max_fds = max_fds };
	serve_as(&c, false);
}

static void setup(void)
{
	char p[128];
	ck_assert_int_eq(tmp_tree_make(dir, sizeof dir, "/tmp/kbox-fuse-unit.XXXXXX"),
			 0);
	put_file("a", "hello");
	put_file(".env", "SECRET=1");
	snprintf(p, sizeof p, "%s/sub", dir);
	ck_assert_int_eq(mkdir(p, 0755), 0);
	put_file("sub/key.pem", "k");
	snprintf(p, sizeof p, "%s/link", dir);
	ck_assert_int_eq(symlink("/etc", p), 0);
}

static void teardown(void)
{
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	srv = NULL;
	fs = NULL;
	ck_assert_int_eq(tmp_tree_remove(dir), 0);
}

/* Builds a request: header, fixed argument, then up to two names. */
static size_t build(uint32_t op, uint64_t nodeid, const void *arg,
		    size_t arglen, const char *n1, const char *n2)
{
	struct fuse_in_header h = { 0 };
	size_t len = sizeof h;

	if (arglen)
		memcpy(req + len, arg, arglen);
	len += arglen;
	for (const char *n = n1; n; n = n == n1 ? n2 : NULL) {
		memcpy(req + len, n, strlen(n) + 1);
		len += strlen(n) + 1;
	}
	h.len = (uint32_t)len;
	h.opcode = op;
	h.unique = next_unique++;
	h.nodeid = nodeid;
	memcpy(req, &h, sizeof h);
	return len;
}

static ssize_t send_len(size_t len)
{
	return fuse_server_handle_buf(srv, req, len, rep, sizeof rep);
}

static int call(uint32_t op, uint64_t nodeid, const void *arg, size_t arglen,
		const char *n1, const char *n2)
{
	ssize_t n = send_len(build(op, nodeid, arg, arglen, n1, n2));
	struct fuse_out_header oh;
	ck_assert_int_ge(n, (ssize_t)sizeof oh);
	memcpy(&oh, rep, sizeof oh);
	ck_assert_uint_eq(oh.len, (uint32_t)n);
	return oh.error;
}

static const void *body(void)
{
	return rep + sizeof(struct fuse_out_header);
}

/* Bytes after the header in the reply. */
static size_t body_len(void)
{
	return ((struct fuse_out_header *)rep)->len -
	       sizeof(struct fuse_out_header);
}

/* An INIT offering every flag, FUSE_NO_OPENDIR_SUPPORT too (directories
 * listed by node, without OPENDIR), or every flag but that one
 * (directories opened with OPENDIR and listed through its handle, as with
 * a kernel older than 5.1). */
static void init_mode(bool no_opendir)
{
	struct fuse_init_in in = { .major = 7, .minor = 38,
				   .max_readahead = 1 << 17,
				   .flags = 0xffffffffu };
	if (!no_opendir)
		in.flags &= ~(uint32_t)FUSE_NO_OPENDIR_SUPPORT;
	ck_assert_int_eq(call(FUSE_INIT, 0, &in, sizeof in, NULL, NULL), 0);
}

/* Directory handles; no_opendir_lists_nodes covers the other way. */
static void init_ok(void)
{
	init_mode(false);
}

static void start(void)
{
	serve(false, NULL, 0, false, 0);
	init_ok();
}

static uint64_t lookup(uint64_t parent, const char *name, int *err)
{
	struct fuse_entry_out e;
	*err = call(FUSE_LOOKUP, parent, NULL, 0, name, NULL);
	if (*err)
		return 0;
	memcpy(&e, body(), sizeof e);
	return e.nodeid;
}

/* The backend holds no inode and no fd for the guest. */
static void assert_nothing_held(void)
{
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 0);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 0);
}

/* A LOOKUP that must succeed. */
static uint64_t lookup_ok(uint64_t parent, const char *name)
{
	int err;
	uint64_t node = lookup(parent, name, &err);
	ck_assert_int_eq(err, 0);
	return node;
}

static uint64_t create(const char *name, uint32_t mode, int *err)
{
	struct fuse_create_in in = { .flags = O_RDWR, .mode = S_IFREG | mode };
	struct fuse_entry_out e;
	struct fuse_open_out o;
	*err = call(FUSE_CREATE, FUSE_ROOT_ID, &in, sizeof in, name, NULL);
	if (*err)
		return 0;
	memcpy(&e, body(), sizeof e);
	memcpy(&o, (const uint8_t *)body() + sizeof e, sizeof o);
	return o.fh;
}

static void forget(uint64_t node, uint64_t nlookup)
{
	struct fuse_forget_in fg = { .nlookup = nlookup };
	ck_assert_int_eq(send_len(build(FUSE_FORGET, node, &fg, sizeof fg,
					NULL, NULL)),
			 0);
}

START_TEST(init_negotiates)
{
	struct fuse_init_out o;
	serve(false, NULL, 0, false, 0);
	init_ok();
	memcpy(&o, body(), sizeof o);
	ck_assert_uint_eq(o.major, 7);
	ck_assert_uint_eq(o.minor, 38);
	ck_assert_uint_eq(o.max_write, 1u << 20);
	ck_assert_uint_eq(o.max_pages, 256);
	ck_assert(o.flags & FUSE_DO_READDIRPLUS);
	ck_assert(o.flags & FUSE_PARALLEL_DIROPS);
	ck_assert(o.flags & FUSE_ASYNC_READ);
	ck_assert(o.flags & FUSE_POSIX_LOCKS);
	ck_assert(!(o.flags & FUSE_WRITEBACK_CACHE));
	ck_assert(!(o.flags & FUSE_HANDLE_KILLPRIV));
	ck_assert_uint_eq(fuse_server_max_request(srv) >= (1u << 20) + 80, 1);
}
END_TEST

START_TEST(init_versions)
{
	struct fuse_init_in in = { .major = 7, .minor = 26 };
	struct fuse_init_out o;
	serve(false, NULL, 0, false, 0);
	ck_assert_int_eq(call(FUSE_INIT, 0, &in, sizeof in, NULL, NULL),
			 -EPROTO);
	in.major = 8;
	ck_assert_int_eq(call(FUSE_INIT, 0, &in, sizeof in, NULL, NULL), 0);
	memcpy(&o, body(), sizeof o);
	ck_assert_uint_eq(o.major, 7);
	/* The pre-7.36 16-byte form is accepted; 8 bytes is not. */
	in.major = 7;
	in.minor = 31;
	ck_assert_int_eq(call(FUSE_INIT, 0, &in, 16, NULL, NULL), 0);
	memcpy(&o, body(), sizeof o);
	ck_assert_uint_eq(o.minor, 31);
	ck_assert_int_eq(call(FUSE_INIT, 0, &in, 8, NULL, NULL), -EINVAL);
}
END_TEST

START_TEST(requests_before_init_fail)
{
	int err;
	serve(false, NULL, 0, false, 0);
	lookup(FUSE_ROOT_ID, "a", &err);
	ck_assert_int_eq(err, -EIO);
}
END_TEST

START_TEST(truncated_and_mismatched_headers)
{
	start();
	size_t len = build(FUSE_GETATTR, FUSE_ROOT_ID, NULL, 0, NULL, NULL);
	for (size_t n = 0; n < sizeof(struct fuse_in_header); n++)
		ck_assert_int_eq(fuse_server_handle_buf(srv, req, n, rep,
							sizeof rep),
				 -EINVAL);
	/* len says more, or less, than was given. */
	ck_assert_int_eq(send_len(len + 8), -EINVAL);
	ck_assert_int_eq(fuse_server_handle_buf(srv, req, len, rep, 15),
			 -EINVAL);
	ck_assert_int_eq(fuse_server_handle(srv, NULL, 1, NULL, 0), -EINVAL);
	/* A fixed argument that does not fit. */
	ck_assert_int_eq(call(FUSE_GETATTR, FUSE_ROOT_ID, "xx", 2, NULL, NULL),
			 -EINVAL);
	struct fuse_read_in rd = { 0 };
	ck_assert_int_eq(call(FUSE_READ, FUSE_ROOT_ID, &rd, sizeof rd - 1,
			      NULL, NULL),
			 -EINVAL);
	/* Oversized non-WRITE request. */
	struct fuse_in_header h = { .len = sizeof h + FUSE_SERVER_MAX_ARGS + 1,
				    .opcode = FUSE_SETXATTR,
				    .nodeid = FUSE_ROOT_ID };
	memset(req, 'x', h.len);
	memcpy(req, &h, sizeof h);
	ck_assert_int_eq(send_len(h.len), (ssize_t)sizeof(struct fuse_out_header));
	ck_assert_int_eq(((struct fuse_out_header *)rep)->error, -EINVAL);
}
END_TEST

START_TEST(hostile_names)
{
	int err;
	char longname[300];
	start();
	/* Not NUL-terminated within the request. */
	size_t len = build(FUSE_LOOKUP, FUSE_ROOT_ID, "abc", 3, NULL, NULL);
	ck_assert_int_eq(send_len(len), (ssize_t)sizeof(struct fuse_out_header));
	ck_assert_int_eq(((struct fuse_out_header *)rep)->error, -EINVAL);
	const char *bad[] = { "", ".", "..", "a/b", "/", "../a" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		lookup(FUSE_ROOT_ID, bad[i], &err);
		ck_assert_int_eq(err, -EINVAL);
		ck_assert_int_eq(call(FUSE_UNLINK, FUSE_ROOT_ID, NULL, 0,
				      bad[i], NULL),
				 -EINVAL);
	}
	memset(longname, 'n', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	lookup(FUSE_ROOT_ID, longname, &err);
	ck_assert_int_eq(err, -ENAMETOOLONG);
	/* RENAME missing its second name. */
	struct fuse_rename_in rn = { .newdir = FUSE_ROOT_ID };
	ck_assert_int_eq(call(FUSE_RENAME, FUSE_ROOT_ID, &rn, sizeof rn, "a",
			      NULL),
			 -EINVAL);
	ck_assert_int_eq(call(FUSE_RENAME, FUSE_ROOT_ID, &rn, sizeof rn, "a",
			      ".."),
			 -EINVAL);
	ck_assert_int_eq(fs_passthrough_open_fds(fs), 0);
}
END_TEST

START_TEST(unknown_opcodes)
{
	start();
	ck_assert_int_eq(call(9999, FUSE_ROOT_ID, NULL, 0, NULL, NULL),
			 -ENOSYS);
	ck_assert_int_eq(call(FUSE_IOCTL, FUSE_ROOT_ID, NULL, 0, NULL, NULL),
			 -ENOSYS);
	ck_assert_int_eq(call(0, FUSE_ROOT_ID, NULL, 0, NULL, NULL), -ENOSYS);
	/* Requests that take no reply produce none. */
	ck_assert_int_eq(send_len(build(FUSE_INTERRUPT, 0, "12345678", 8, NULL,
					NULL)),
			 0);
}
END_TEST

START_TEST(bad_nodeids_and_handles)
{
	struct fuse_getattr_in ga = { 0 };
	struct fuse_read_in rd = { .fh = 77, .size = 10 };
	struct fuse_open_in op = { .flags = O_RDONLY };
	const uint64_t ids[] = { 0, 2, 12345, UINT64_MAX };
	start();
	for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
		ck_assert_int_eq(call(FUSE_GETATTR, ids[i], &ga, sizeof ga,
				      NULL, NULL),
				 -ESTALE);
		ck_assert_int_eq(call(FUSE_OPEN, ids[i], &op, sizeof op, NULL,
				      NULL),
				 -ESTALE);
		ck_assert_int_eq(call(FUSE_MKDIR, ids[i], &op, 8, "x", NULL),
				 -ESTALE);
	}
	ck_assert_int_eq(call(FUSE_READ, FUSE_ROOT_ID, &rd, sizeof rd, NULL,
			      NULL),
			 -EBADF);
	ck_assert_int_eq(call(FUSE_READDIR, FUSE_ROOT_ID, &rd, sizeof rd, NULL,
			      NULL),
			 -EBADF);
	struct fuse_release_in rl = { .fh = UINT64_MAX };
	ck_assert_int_eq(call(FUSE_RELEASE, FUSE_ROOT_ID, &rl, sizeof rl, NULL,
			      NULL),
			 -EBADF);
	/* A file handle is not a directory handle. */
	int err;
	rl.fh = create("f", 0644, &err);
	ck_assert_int_eq(err, 0);
	ck_assert_int_eq(call(FUSE_RELEASEDIR, FUSE_ROOT_ID, &rl, sizeof rl,
			      NULL, NULL),
			 -EBADF);
	ck_assert_int_eq(call(FUSE_RELEASE, FUSE_ROOT_ID, &rl, sizeof rl, NULL,
			      NULL),
			 0);
	/* A regular file is not a directory. */
	uint64_t a = lookup(FUSE_ROOT_ID, "a", &err);
	lookup(a, "x", &err);
	ck_assert_int_eq(err, -ENOTDIR);
}
END_TEST

START_TEST(lookup_counts_and_forgets)
{
	int err;
	struct fuse_forget_in fg = { .nlookup = 1 };
	struct fuse_getattr_in ga = { 0 };
	start();
	uint64_t a = lookup_ok(FUSE_ROOT_ID, "a");
	ck_assert_uint_eq(lookup(FUSE_ROOT_ID, "a", &err), a);
	/* A lookup remembers the inode but opens nothing. */
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 1);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 0);
	ck_assert_int_eq(send_len(build(FUSE_FORGET, a, &fg, sizeof fg, NULL,
					NULL)),
			 0);
	ck_assert_int_eq(call(FUSE_GETATTR, a, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert_int_eq(send_len(build(FUSE_FORGET, a, &fg, sizeof fg, NULL,
					NULL)),
			 0);
	assert_nothing_held();
	ck_assert_int_eq(call(FUSE_GETATTR, a, &ga, sizeof ga, NULL, NULL),
			 -ESTALE);
	/* Forgets of unknown inodes, of the root, and batch counts that
	 * overstate the bytes present are all ignored. */
	fg.nlookup = UINT64_MAX;
	ck_assert_int_eq(send_len(build(FUSE_FORGET, 999, &fg, sizeof fg, NULL,
					NULL)),
			 0);
	ck_assert_int_eq(send_len(build(FUSE_FORGET, FUSE_ROOT_ID, &fg,
					sizeof fg, NULL, NULL)),
			 0);
	struct {
		struct fuse_batch_forget_in in;
		struct fuse_forget_one one;
	} bf = { { .count = 0xffffffffu }, { .nodeid = 5, .nlookup = 9 } };
	ck_assert_int_eq(send_len(build(FUSE_BATCH_FORGET, 0, &bf, sizeof bf,
					NULL, NULL)),
			 0);
	ck_assert_int_eq(send_len(build(FUSE_FORGET, 1, &fg, 4, NULL, NULL)),
			 0);
	ck_assert_int_eq(call(FUSE_GETATTR, FUSE_ROOT_ID, &ga, sizeof ga, NULL,
			      NULL),
			 0);
}
END_TEST

/* Names in a READDIR(PLUS) reply, space-separated, with sanity checks on
 * every record. */
static void dir_names(const uint8_t *p, size_t n, bool plus, char *out,
		      size_t outsz)
{
	out[0] = '\0';
	while (n) {
		size_t fixed = plus ? sizeof(struct fuse_direntplus) :
				      sizeof(struct fuse_dirent);
		struct fuse_dirent de;
		ck_assert_uint_ge(n, fixed);
		memcpy(&de, p + fixed - sizeof de, sizeof de);
		size_t rec = FUSE_DIRENT_ALIGN(fixed + de.namelen);
		ck_assert_uint_ge(n, rec);
		ck_assert_uint_gt(de.namelen, 0);
		strncat(out, (const char *)p + fixed, de.namelen);
		strncat(out, " ", outsz - strlen(out) - 1);
		p += rec;
		n -= rec;
	}
}

static uint64_t opendir_root(void)
{
	struct fuse_open_in op = { 0 };
	struct fuse_open_out oo;
	ck_assert_int_eq(call(FUSE_OPENDIR, FUSE_ROOT_ID, &op, sizeof op, NULL,
			      NULL),
			 0);
	memcpy(&oo, body(), sizeof oo);
	return oo.fh;
}

/* A READDIR (READDIRPLUS with plus) of node that must succeed, and the
 * names it lists, as dir_names gives them. */
static void list(uint64_t node, const struct fuse_read_in *rd, bool plus,
		 char *names, size_t size)
{
	ck_assert_int_eq(call(plus ? FUSE_READDIRPLUS : FUSE_READDIR, node, rd,
			      sizeof *rd, NULL, NULL),
			 0);
	dir_names(body(), body_len(), plus, names, size);
}

/* The root's names as setup made them: .env hidden, a and sub there. */
static void assert_root_names(const char *names)
{
	ck_assert_ptr_null(strstr(names, ".env"));
	ck_assert_ptr_nonnull(strstr(names, "a "));
	ck_assert_ptr_nonnull(strstr(names, "sub "));
}

/* READDIRs of the root from offset 0, one entry each (40 bytes), through
 * handle fh, walk the whole directory exactly once. */
static void walk_root_small_steps(uint64_t fh)
{
	struct fuse_read_in rd = { .fh = fh, .size = 40 };
	char names[512] = "";
	for (int i = 0; i < 20; i++) {
		char one[300];
		ck_assert_int_eq(call(FUSE_READDIR, FUSE_ROOT_ID, &rd,
				      sizeof rd, NULL, NULL),
				 0);
		size_t n = body_len();
		if (!n)
			break;
		dir_names(body(), n, false, one, sizeof one);
		strcat(names, one);
		struct fuse_dirent de;
		memcpy(&de, body(), sizeof de);
		rd.offset = de.off;
	}
	ck_assert_uint_eq(strlen(names), strlen(". .. a sub link "));
}

START_TEST(readdir_hides_and_bounds)
{
	char names[512];
	start();
	uint64_t fh = opendir_root();
	struct fuse_read_in rd = { .fh = fh, .size = 4096 };
	list(FUSE_ROOT_ID, &rd, true, names, sizeof names);
	assert_root_names(names);
	/* Every entry but . and .. was looked up: a, sub, link; only the
	 * directory handle holds an fd. */
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 3);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 1);
	/* Offsets past the end, and absurd ones, give an empty listing. */
	const uint64_t offs[] = { UINT64_MAX, (uint64_t)INT64_MAX,
				  1ull << 62 };
	for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
		rd.offset = offs[i];
		ssize_t r = send_len(build(FUSE_READDIR, FUSE_ROOT_ID, &rd,
					   sizeof rd, NULL, NULL));
		ck_assert_int_ge(r, (ssize_t)sizeof(struct fuse_out_header));
		ck_assert_int_le(((struct fuse_out_header *)rep)->error, 0);
	}
	/* A reply too small for one entry is empty, not overrun. */
	rd.offset = 0;
	rd.size = 10;
	ck_assert_int_eq(call(FUSE_READDIRPLUS, FUSE_ROOT_ID, &rd, sizeof rd,
			      NULL, NULL),
			 0);
	ck_assert_uint_eq(((struct fuse_out_header *)rep)->len,
			  sizeof(struct fuse_out_header));
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 3);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 1);
	/* Small steps walk the whole directory exactly once. */
	walk_root_small_steps(fh);
	struct fuse_release_in rl = { .fh = fh };
	ck_assert_int_eq(call(FUSE_RELEASEDIR, FUSE_ROOT_ID, &rl, sizeof rl,
			      NULL, NULL),
			 0);
}
END_TEST

/* The node id READDIRPLUS gives the entry name in the current reply, 0 if
 * it carries no attributes; the entry must be there. */
static uint64_t listed_nodeid(const char *name)
{
	const uint8_t *p = body();
	size_t n = body_len();
	while (n >= sizeof(struct fuse_direntplus)) {
		struct fuse_direntplus d;
		memcpy(&d, p, sizeof d);
		size_t rec = FUSE_DIRENTPLUS_SIZE(&d);
		ck_assert_uint_ge(n, rec);
		if (d.dirent.namelen == strlen(name) &&
		    memcmp(p + sizeof d, name, d.dirent.namelen) == 0)
			return d.entry_out.nodeid;
		p += rec;
		n -= rec;
	}
	ck_abort_msg("%s not listed", name);
	return 0;
}

/* An entry the guest holds already, under the same name, comes without
 * attributes (node id 0: the kernel keeps its dentry) and without a second
 * counted lookup; the others are looked up as usual. */
START_TEST(readdirplus_skips_held_entries)
{
	start();
	uint64_t a = lookup_ok(FUSE_ROOT_ID, "a");
	uint64_t fh = opendir_root();
	struct fuse_read_in rd = { .fh = fh, .size = 4096 };
	ck_assert_int_eq(call(FUSE_READDIRPLUS, FUSE_ROOT_ID, &rd, sizeof rd,
			      NULL, NULL),
			 0);
	ck_assert_uint_eq(listed_nodeid("a"), 0);
	uint64_t sub = listed_nodeid("sub");
	ck_assert_uint_ne(sub, 0);
	ck_assert_uint_ne(listed_nodeid("link"), 0);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 3);
	/* One FORGET each undoes everything: a had one lookup, not two. */
	struct fuse_forget_in f1 = { .nlookup = 1 };
	ck_assert_int_eq(send_len(build(FUSE_FORGET, a, &f1, sizeof f1, NULL,
					NULL)),
			 0);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 2);
	/* Forgotten, a is listed with attributes again. */
	ck_assert_int_eq(call(FUSE_READDIRPLUS, FUSE_ROOT_ID, &rd, sizeof rd,
			      NULL, NULL),
			 0);
	ck_assert_uint_ne(listed_nodeid("a"), 0);
	ck_assert_uint_eq(listed_nodeid("sub"), 0);
}
END_TEST

/* A kernel offering FUSE_NO_OPENDIR_SUPPORT gets ENOSYS to OPENDIR; each
 * READDIR(PLUS) and FSYNCDIR then names the directory node, whatever fh it
 * carries, and the server keeps no fd between them. */
START_TEST(no_opendir_lists_nodes)
{
	char names[512];
	struct fuse_open_in op = { 0 };
	serve(false, NULL, 0, false, 0);
	init_mode(true);
	ck_assert_int_eq(call(FUSE_OPENDIR, FUSE_ROOT_ID, &op, sizeof op, NULL,
			      NULL),
			 -ENOSYS);
	struct fuse_read_in rd = { .fh = 12345, .size = 4096 };
	list(FUSE_ROOT_ID, &rd, true, names, sizeof names);
	assert_root_names(names);
	uint64_t sub = listed_nodeid("sub");
	ck_assert_uint_ne(sub, 0);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 3);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 0);
	/* Small steps, each on a fresh open, walk the directory once. */
	walk_root_small_steps(0);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 0);
	/* The node must be a directory the guest holds. */
	uint64_t a = lookup_ok(FUSE_ROOT_ID, "a");
	ck_assert_int_eq(call(FUSE_READDIR, a, &rd, sizeof rd, NULL, NULL),
			 -ENOTDIR);
	ck_assert_int_eq(call(FUSE_READDIRPLUS, 999, &rd, sizeof rd, NULL,
			      NULL),
			 -ESTALE);
	list(sub, &rd, false, names, sizeof names);
	ck_assert_ptr_nonnull(strstr(names, "key.pem "));
	struct fuse_fsync_in fs_in = { .fh = 777 };
	ck_assert_int_eq(call(FUSE_FSYNCDIR, sub, &fs_in, sizeof fs_in, NULL,
			      NULL),
			 0);
	ck_assert_int_eq(call(FUSE_FSYNCDIR, a, &fs_in, sizeof fs_in, NULL,
			      NULL),
			 -ENOTDIR);
	/* There are no directory handles to release. */
	struct fuse_release_in rl = { .fh = 0 };
	ck_assert_int_eq(call(FUSE_RELEASEDIR, FUSE_ROOT_ID, &rl, sizeof rl,
			      NULL, NULL),
			 -EBADF);
	/* sub's inode fd (O_PATH, reopened to list it) stays cached as any
	 * inode fd does; no listing fd is left. */
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 1);
	/* A new INIT without the offer brings handles back. */
	init_ok();
	uint64_t fh = opendir_root();
	rd.fh = fh;
	ck_assert_int_eq(call(FUSE_READDIR, FUSE_ROOT_ID, &rd, sizeof rd, NULL,
			      NULL),
			 0);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 1);
	rl.fh = fh;
	ck_assert_int_eq(call(FUSE_RELEASEDIR, FUSE_ROOT_ID, &rl, sizeof rl,
			      NULL, NULL),
			 0);
}
END_TEST

/* The server's config can decline the offer: OPENDIR then gets a handle. */
START_TEST(keep_opendir_config)
{
	serve_as(&(struct fs_passthrough_config){ .root = dir }, true);
	init_mode(true);
	uint64_t fh = opendir_root();
	struct fuse_read_in rd = { .fh = fh + 1, .size = 4096 };
	ck_assert_int_eq(call(FUSE_READDIR, FUSE_ROOT_ID, &rd, sizeof rd, NULL,
			      NULL),
			 -EBADF);
	rd.fh = fh;
	ck_assert_int_eq(call(FUSE_READDIR, FUSE_ROOT_ID, &rd, sizeof rd, NULL,
			      NULL),
			 0);
}
END_TEST

/* With handles in use (the config keeps them, or the kernel never offered
 * to go without), the backend's "no handle" number is no handle the guest
 * may name: READDIR and FSYNCDIR with it are EBADF, as any number OPENDIR
 * did not give, not a listing of a directory the guest never opened. */
START_TEST(handle_mode_refuses_no_fh)
{
	struct fuse_read_in rd = { .fh = FUSE_FS_NO_FH, .size = 4096 };
	struct fuse_fsync_in fy = { .fh = FUSE_FS_NO_FH };
	serve_as(&(struct fs_passthrough_config){ .root = dir }, true);
	for (int round = 0; round < 2; round++) {
		init_mode(round == 0);
		ck_assert_int_eq(call(FUSE_READDIR, FUSE_ROOT_ID, &rd,
				      sizeof rd, NULL, NULL),
				 -EBADF);
		ck_assert_int_eq(call(FUSE_READDIRPLUS, FUSE_ROOT_ID, &rd,
				      sizeof rd, NULL, NULL),
				 -EBADF);
		ck_assert_int_eq(call(FUSE_FSYNCDIR, FUSE_ROOT_ID, &fy,
				      sizeof fy, NULL, NULL),
				 -EBADF);
		ck_assert_uint_eq(fs_passthrough_inodes(fs), 0);
	}
}
END_TEST

/* The open of a listing fd fails (no fd left under RLIMIT_NOFILE): its
 * place under the cap and the hold on the node go back, on each path that
 * opens one (READDIR and FSYNCDIR without OPENDIR, OPENDIR with it). */
START_TEST(open_dir_failure_gives_back)
{
	int err;
	struct rlimit old, none;
	struct fuse_getattr_in ga = { 0 };
	struct fuse_open_in op = { 0 };
	struct fuse_read_in rd = { .size = 4096 };
	struct fuse_fsync_in fy = { 0 };
	serve(false, NULL, 0, false, 0);
	for (int round = 0; round < 2; round++) {
		init_mode(round == 0);
		uint64_t sub = lookup_ok(FUSE_ROOT_ID, "sub");
		/* sub's own fd is open before the limit falls. */
		ck_assert_int_eq(call(FUSE_GETATTR, sub, &ga, sizeof ga, NULL,
				      NULL),
				 0);
		ck_assert_uint_eq(fs_passthrough_open_fds(fs), 1);
		int lowest = open("/dev/null", O_RDONLY | O_CLOEXEC);
		ck_assert_int_ge(lowest, 0);
		close(lowest);
		ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
		none = old;
		none.rlim_cur = (rlim_t)lowest;
		ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &none), 0);
		if (round == 0) {
			err = call(FUSE_READDIRPLUS, sub, &rd, sizeof rd, NULL,
				   NULL);
			int err2 = call(FUSE_FSYNCDIR, sub, &fy, sizeof fy,
					NULL, NULL);
			ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
			ck_assert_int_eq(err, -EMFILE);
			ck_assert_int_eq(err2, -EMFILE);
		} else {
			err = call(FUSE_OPENDIR, sub, &op, sizeof op, NULL,
				   NULL);
			ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
			ck_assert_int_eq(err, -EMFILE);
		}
		ck_assert_uint_eq(fs_passthrough_open_fds(fs), 1);
		/* No hold is left: one FORGET lets sub and its fd go. */
		forget(sub, 1);
		assert_nothing_held();
	}
}
END_TEST

/* Without handles, each listing's fd counts under the cap while it lives:
 * with the cap taken by a file handle and its inode, EMFILE; else room
 * comes from the least recently used inode fd, and nothing stays. */
START_TEST(no_opendir_fd_cap)
{
	struct fuse_getattr_in ga = { 0 };
	struct fuse_open_in op = { .flags = O_RDONLY };
	struct fuse_read_in rd = { .size = 4096 };
	struct fuse_fsync_in fy = { 0 };
	serve(false, NULL, 0, false, 2);
	init_mode(true);
	uint64_t a = lookup_ok(FUSE_ROOT_ID, "a");
	uint64_t sub = lookup_ok(FUSE_ROOT_ID, "sub");
	ck_assert_int_eq(call(FUSE_OPEN, a, &op, sizeof op, NULL, NULL), 0);
	struct fuse_release_in rl = {
		.fh = ((const struct fuse_open_out *)body())->fh
	};
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 2);
	ck_assert_int_eq(call(FUSE_READDIR, FUSE_ROOT_ID, &rd, sizeof rd, NULL,
			      NULL),
			 -EMFILE);
	ck_assert_int_eq(call(FUSE_FSYNCDIR, FUSE_ROOT_ID, &fy, sizeof fy, NULL,
			      NULL),
			 -EMFILE);
	ck_assert_int_eq(call(FUSE_READDIR, sub, &rd, sizeof rd, NULL, NULL),
			 -EMFILE);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 2);
	ck_assert_int_eq(call(FUSE_RELEASE, a, &rl, sizeof rl, NULL, NULL), 0);
	for (int round = 0; round < 3; round++) {
		ck_assert_int_eq(call(FUSE_READDIR, sub, &rd, sizeof rd, NULL,
				      NULL),
				 0);
		ck_assert_uint_le(fs_passthrough_open_fds(fs), 2);
		ck_assert_int_eq(call(FUSE_GETATTR, a, &ga, sizeof ga, NULL,
				      NULL),
				 0);
		ck_assert_int_eq(call(FUSE_READDIR, FUSE_ROOT_ID, &rd,
				      sizeof rd, NULL, NULL),
				 0);
		ck_assert_int_eq(call(FUSE_FSYNCDIR, sub, &fy, sizeof fy, NULL,
				      NULL),
				 0);
		ck_assert_uint_le(fs_passthrough_open_fds(fs), 2);
	}
	forget(a, 1);
	forget(sub, 1);
	assert_nothing_held();
}
END_TEST

/* Listings without handles hide what listings through them hid: names
 * anywhere and paths below the root. */
START_TEST(no_opendir_hides)
{
	char names[512];
	const char *const pats[] = { ".env", "sub/*.pem" };
	struct fuse_read_in rd = { .size = 4096 };
	put_file("sub/.env", "x");
	put_file("sub/ok", "y");
	serve(false, pats, 2, true, 0);
	init_mode(true);
	uint64_t sub = lookup_ok(FUSE_ROOT_ID, "sub");
	for (int plus = 0; plus < 2; plus++) {
		list(FUSE_ROOT_ID, &rd, plus, names, sizeof names);
		assert_root_names(names);
		list(sub, &rd, plus, names, sizeof names);
		ck_assert_ptr_null(strstr(names, ".env"));
		ck_assert_ptr_null(strstr(names, "key.pem"));
		ck_assert_ptr_nonnull(strstr(names, "ok "));
	}
}
END_TEST

/* GETATTR through a handle answers only for the handle's own node: naming
 * another file's handle gives the node's attributes, not the other
 * file's. */
START_TEST(getattr_handle_of_another_node)
{
	int err;
	start();
	uint64_t a = lookup(FUSE_ROOT_ID, "a", &err);
	ck_assert_int_eq(err, 0);
	uint64_t fh = create("empty", 0600, &err);
	ck_assert_int_eq(err, 0);
	struct fuse_getattr_in ga = { .getattr_flags = FUSE_GETATTR_FH,
				      .fh = fh };
	ck_assert_int_eq(call(FUSE_GETATTR, a, &ga, sizeof ga, NULL, NULL), 0);
	struct fuse_attr_out ao;
	memcpy(&ao, body(), sizeof ao);
	ck_assert_uint_eq(ao.attr.size, 5); /* a's "hello", not empty's 0 */
}
END_TEST

START_TEST(write_read_and_sizes)
{
	int err;
	start();
	uint64_t fh = create("f", 0644, &err);
	ck_assert_int_eq(err, 0);
	struct {
		struct fuse_write_in w;
		char data[5];
	} wr = { { .fh = fh, .size = 5 }, "world" };
	ck_assert_int_eq(call(FUSE_WRITE, FUSE_ROOT_ID, &wr, sizeof wr.w + 5, NULL,
			      NULL),
			 0);
	ck_assert_uint_eq(((const struct fuse_write_out *)body())->size, 5);
	/* size disagreeing with the payload, or past max_write. */
	wr.w.size = 6;
	ck_assert_int_eq(call(FUSE_WRITE, FUSE_ROOT_ID, &wr, sizeof wr.w + 5, NULL,
			      NULL),
			 -EINVAL);
	wr.w.size = 5;
	wr.w.offset = UINT64_MAX - 2;
	ck_assert_int_eq(call(FUSE_WRITE, FUSE_ROOT_ID, &wr, sizeof wr.w + 5, NULL,
			      NULL),
			 -EINVAL);
	struct fuse_read_in rd = { .fh = fh, .size = 100 };
	ck_assert_int_eq(call(FUSE_READ, FUSE_ROOT_ID, &rd, sizeof rd, NULL,
			      NULL),
			 0);
	ck_assert_uint_eq(((struct fuse_out_header *)rep)->len,
			  sizeof(struct fuse_out_header) + 5);
	ck_assert_mem_eq(body(), "world", 5);
	rd.size = 2u << 20;
	ck_assert_int_eq(call(FUSE_READ, FUSE_ROOT_ID, &rd, sizeof rd, NULL,
			      NULL),
			 -EINVAL);
	/* A reply area smaller than the read asks for. */
	rd.size = 100;
	build(FUSE_READ, FUSE_ROOT_ID, &rd, sizeof rd, NULL, NULL);
	ck_assert_int_eq(fuse_server_handle_buf(srv, req, sizeof rd + 40, rep,
						50),
			 16);
	ck_assert_int_eq(((struct fuse_out_header *)rep)->error, -EINVAL);
	/* Reply body larger than the reply area. */
	struct fuse_getattr_in ga = { 0 };
	build(FUSE_GETATTR, FUSE_ROOT_ID, &ga, sizeof ga, NULL, NULL);
	ck_assert_int_eq(fuse_server_handle_buf(srv, req, sizeof ga + 40, rep,
						20),
			 16);
	ck_assert_int_eq(((struct fuse_out_header *)rep)->error, -EINVAL);
	/* Xattr sizes. */
	struct {
		uint32_t size, flags;
	} sx = { 0x80000000u, 0 };
	ck_assert_int_eq(call(FUSE_SETXATTR, FUSE_ROOT_ID, &sx, sizeof sx,
			      "user.a", NULL),
			 -EINVAL);
	struct fuse_getxattr_in gx = { .size = 0xffffffffu };
	ck_assert_int_eq(call(FUSE_GETXATTR, FUSE_ROOT_ID, &gx, sizeof gx,
			      "security.capability", NULL),
			 -ENODATA);
	sx.size = 1;
	ck_assert_int_eq(call(FUSE_SETXATTR, FUSE_ROOT_ID, &sx, sizeof sx,
			      "security.capability", NULL),
			 -EINVAL);
	struct fuse_release_in rl = { .fh = fh };
	ck_assert_int_eq(call(FUSE_RELEASE, FUSE_ROOT_ID, &rl, sizeof rl, NULL,
			      NULL),
			 0);
	ck_assert_int_eq(call(FUSE_RELEASE, FUSE_ROOT_ID, &rl, sizeof rl, NULL,
			      NULL),
			 -EBADF);
}
END_TEST

START_TEST(hidden_names)
{
	int err;
	const char *const pats[] = { "sub/*.pem" };
	serve(false, pats, 1, true, 0);
	init_ok();
	/* Explicit list: .env is visible again, sub/key.pem is not. */
	lookup_ok(FUSE_ROOT_ID, ".env");
	uint64_t sub = lookup(FUSE_ROOT_ID, "sub", &err);
	lookup(sub, "key.pem", &err);
	ck_assert_int_eq(err, -ENOENT);
	struct fuse_mkdir_in mk = { .mode = 0755 };
	ck_assert_int_eq(call(FUSE_MKDIR, sub, &mk, sizeof mk, "x.pem", NULL),
			 -EACCES);
	ck_assert_int_eq(call(FUSE_MKDIR, FUSE_ROOT_ID, &mk, sizeof mk,
			      "x.pem", NULL),
			 0);
}
END_TEST

START_TEST(default_hidden)
{
	int err;
	start();
	lookup(FUSE_ROOT_ID, ".env", &err);
	ck_assert_int_eq(err, -ENOENT);
	create(".env.local", 0600, &err);
	ck_assert_int_eq(err, -EACCES);
	create("kbox.yaml", 0600, &err);
	ck_assert_int_eq(err, -EACCES);
	struct fuse_rename2_in rn = { .newdir = FUSE_ROOT_ID };
	ck_assert_int_eq(call(FUSE_RENAME2, FUSE_ROOT_ID, &rn, sizeof rn, "a",
			      "secrets.env"),
			 -EACCES);
	ck_assert_int_eq(call(FUSE_RENAME2, FUSE_ROOT_ID, &rn, sizeof rn,
			      ".env", "b"),
			 -ENOENT);
	rn.flags = 4; /* RENAME_WHITEOUT */
	ck_assert_int_eq(call(FUSE_RENAME2, FUSE_ROOT_ID, &rn, sizeof rn, "a",
			      "b"),
			 -EINVAL);
	ck_assert_int_eq(call(FUSE_UNLINK, FUSE_ROOT_ID, NULL, 0, ".env", NULL),
			 -ENOENT);
	char p[128];
	snprintf(p, sizeof p, "%s/.env", dir);
	ck_assert_int_eq(access(p, F_OK), 0);
	snprintf(p, sizeof p, "%s/secrets.env", dir);
	ck_assert_int_eq(access(p, F_OK), -1);
}
END_TEST

START_TEST(readonly_refuses_writes)
{
	int err;
	struct fuse_open_in op = { .flags = O_RDWR };
	struct fuse_setattr_in sa = { .valid = FATTR_MODE, .mode = 0777 };
	struct fuse_mknod_in mn = { .mode = S_IFREG | 0644 };
	serve(true, NULL, 0, false, 0);
	init_ok();
	uint64_t a = lookup(FUSE_ROOT_ID, "a", &err);
	ck_assert_int_eq(call(FUSE_OPEN, a, &op, sizeof op, NULL, NULL),
			 -EROFS);
	op.flags = O_RDONLY | O_TRUNC;
	ck_assert_int_eq(call(FUSE_OPEN, a, &op, sizeof op, NULL, NULL),
			 -EROFS);
	op.flags = O_RDONLY;
	ck_assert_int_eq(call(FUSE_OPEN, a, &op, sizeof op, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_SETATTR, a, &sa, sizeof sa, NULL, NULL),
			 -EROFS);
	create("new", 0644, &err);
	ck_assert_int_eq(err, -EROFS);
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "n",
			      NULL),
			 -EROFS);
	ck_assert_int_eq(call(FUSE_UNLINK, FUSE_ROOT_ID, NULL, 0, "a", NULL),
			 -EROFS);
	ck_assert_int_eq(call(FUSE_SYMLINK, FUSE_ROOT_ID, NULL, 0, "s", "a"),
			 -EROFS);
	struct fuse_link_in ln = { .oldnodeid = a };
	ck_assert_int_eq(call(FUSE_LINK, FUSE_ROOT_ID, &ln, sizeof ln, "l",
			      NULL),
			 -EROFS);
	struct fuse_access_in ac = { .mask = W_OK };
	ck_assert_int_eq(call(FUSE_ACCESS, a, &ac, sizeof ac, NULL, NULL),
			 -EROFS);
}
END_TEST

START_TEST(confinement)
{
	int err;
	struct fuse_getattr_in ga = { 0 };
	struct fuse_open_in op = { .flags = O_RDONLY };
	struct fuse_mknod_in mn = { .mode = S_IFIFO | 0644 };
	start();
	uint64_t l = lookup_ok(FUSE_ROOT_ID, "link");
	ck_assert_int_eq(call(FUSE_GETATTR, l, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert(S_ISLNK(((const struct fuse_attr_out *)body())->attr.mode));
	/* The symlink to /etc is neither followed nor opened. */
	lookup(l, "passwd", &err);
	ck_assert_int_eq(err, -ENOTDIR);
	ck_assert_int_eq(call(FUSE_OPEN, l, &op, sizeof op, NULL, NULL),
			 -ELOOP);
	ck_assert_int_eq(call(FUSE_READLINK, l, NULL, 0, NULL, NULL), 0);
	ck_assert_mem_eq(body(), "/etc", 4);
	/* No devices can be made (FIFOs and sockets: test_idmap.c). */
	mn.mode = S_IFCHR | 0644;
	mn.rdev = 0x103;
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "c",
			      NULL),
			 -EPERM);
	mn.mode = S_IFREG | 06755;
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "r",
			      NULL),
			 0);
	ck_assert_uint_eq(((const struct fuse_entry_out *)body())->attr.mode &
				  07777,
			  0755);
	/* chmod strips setuid/setgid. */
	uint64_t a = lookup(FUSE_ROOT_ID, "a", &err);
	struct fuse_setattr_in sa = { .valid = FATTR_MODE, .mode = 04777 };
	ck_assert_int_eq(call(FUSE_SETATTR, a, &sa, sizeof sa, NULL, NULL), 0);
	ck_assert_uint_eq(((const struct fuse_attr_out *)body())->attr.mode &
				  07777,
			  0777);
	/* Creating over an existing symlink is refused. */
	create("link", 0644, &err);
	ck_assert_int_eq(err, -ELOOP);
	/* Hard links to directories are refused. */
	uint64_t sub = lookup(FUSE_ROOT_ID, "sub", &err);
	struct fuse_link_in ln = { .oldnodeid = sub };
	ck_assert_int_eq(call(FUSE_LINK, FUSE_ROOT_ID, &ln, sizeof ln, "s2",
			      NULL),
			 -EPERM);
	/* The listing of xattrs crosses only user.*. */
	struct fuse_getxattr_in gx = { 0 };
	ck_assert_int_eq(call(FUSE_LISTXATTR, a, &gx, sizeof gx, NULL, NULL),
			 0);
}
END_TEST

START_TEST(fd_cap)
{
	struct fuse_getattr_in ga = { 0 };
	struct fuse_open_in op = { .flags = O_RDONLY };
	serve(false, NULL, 0, false, 2);
	init_ok();
	uint64_t a = lookup_ok(FUSE_ROOT_ID, "a");
	uint64_t sub = lookup_ok(FUSE_ROOT_ID, "sub");
	uint64_t link = lookup_ok(FUSE_ROOT_ID, "link");
	uint64_t pem = lookup_ok(sub, "key.pem");
	/* Inode fds come and go under the cap, least recently used first. */
	for (int round = 0; round < 3; round++) {
		const uint64_t ids[] = { a, sub, link, pem };
		for (size_t i = 0; i < 4; i++) {
			ck_assert_int_eq(call(FUSE_GETATTR, ids[i], &ga, sizeof ga, NULL,
					      NULL),
					 0);
			ck_assert_uint_le(fs_passthrough_open_fds(fs), 2);
		}
	}
	/* key.pem needs sub's fd too: reopened parent first. */
	ck_assert_int_eq(call(FUSE_OPEN, pem, &op, sizeof op, NULL, NULL), 0);
	struct fuse_open_out o1;
	memcpy(&o1, body(), sizeof o1);
	/* Handles and the inodes they pin are not closed for room. */
	ck_assert_int_eq(call(FUSE_OPEN, a, &op, sizeof op, NULL, NULL), -EMFILE);
	ck_assert_int_eq(call(FUSE_OPENDIR, sub, &op, sizeof op, NULL, NULL), -EMFILE);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 2);
	struct fuse_release_in rl = { .fh = o1.fh };
	ck_assert_int_eq(call(FUSE_RELEASE, pem, &rl, sizeof rl, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_OPEN, a, &op, sizeof op, NULL, NULL), 0);
}
END_TEST

/* A closed inode fd is reopened by name from its parent, and only if the
 * name still leads to the same inode: never a symlink, never another
 * file. */
START_TEST(reopen_checks_identity)
{
	int err;
	char p1[160], p2[160];
	struct fuse_getattr_in ga = { 0 };
	serve(false, NULL, 0, false, 1);
	init_ok();
	uint64_t a = lookup(FUSE_ROOT_ID, "a", &err);
	uint64_t sub = lookup(FUSE_ROOT_ID, "sub", &err);
	uint64_t pem = lookup_ok(sub, "key.pem");
	/* The host swaps a for another file: a stale inode, not the new one. */
	put_file("b", "other");
	snprintf(p1, sizeof p1, "%s/b", dir);
	snprintf(p2, sizeof p2, "%s/a", dir);
	ck_assert_int_eq(rename(p1, p2), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, a, &ga, sizeof ga, NULL, NULL), -ESTALE);
	/* A fresh lookup finds the new file. */
	uint64_t a2 = lookup_ok(FUSE_ROOT_ID, "a");
	ck_assert_uint_ne(a2, a);
	ck_assert_int_eq(call(FUSE_GETATTR, a2, &ga, sizeof ga, NULL, NULL), 0);
	/* The host swaps the directory for a symlink to it: the link is not
	 * followed, key.pem is stale. */
	snprintf(p1, sizeof p1, "%s/sub", dir);
	snprintf(p2, sizeof p2, "%s/sub2", dir);
	ck_assert_int_eq(rename(p1, p2), 0);
	ck_assert_int_eq(symlink("sub2", p1), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, sub, &ga, sizeof ga, NULL, NULL), -ESTALE);
	ck_assert_int_eq(call(FUSE_GETATTR, pem, &ga, sizeof ga, NULL, NULL), -ESTALE);
	ck_assert_uint_le(fs_passthrough_open_fds(fs), 1);
}
END_TEST

/* The guest's own renames and unlinks keep its inodes reachable: moved
 * nodes follow their new names, a file unlinked while open still answers
 * GETATTR. */
START_TEST(renames_and_unlinks_tracked)
{
	int err;
	struct fuse_getattr_in ga = { 0 };
	struct fuse_open_in op = { .flags = O_RDONLY };
	/* An open handle takes two fds (its own and its inode's), a replaced
	 * inode one: room for one more. */
	serve(false, NULL, 0, false, 4);
	init_ok();
	uint64_t sub = lookup(FUSE_ROOT_ID, "sub", &err);
	uint64_t pem = lookup(sub, "key.pem", &err);
	uint64_t a = lookup_ok(FUSE_ROOT_ID, "a");
	struct fuse_rename_in rn = { .newdir = FUSE_ROOT_ID };
	ck_assert_int_eq(call(FUSE_RENAME, sub, &rn, sizeof rn, "key.pem", "moved"), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, sub, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, pem, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert_uint_eq(lookup(FUSE_ROOT_ID, "moved", &err), pem);
	/* Open a, then unlink it. */
	ck_assert_int_eq(call(FUSE_OPEN, a, &op, sizeof op, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_UNLINK, FUSE_ROOT_ID, NULL, 0, "a", NULL), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, sub, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, a, &ga, sizeof ga, NULL, NULL), 0);
	const struct fuse_attr_out *ao = body();
	ck_assert_uint_eq(ao->attr.nlink, 0);
	/* Renamed over: the replaced inode stays reachable too. */
	uint64_t moved = lookup(FUSE_ROOT_ID, "moved", &err);
	put_file("c", "c");
	ck_assert_int_eq(call(FUSE_RENAME, FUSE_ROOT_ID, &rn, sizeof rn, "c", "moved"), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, sub, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, moved, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert_uint_eq(((const struct fuse_attr_out *)body())->attr.size, 1);
}
END_TEST

/* A leading '/' anchors a hidden name at the mount root. */
START_TEST(anchored_hidden)
{
	int err;
	char p[160];
	const char *const pats[] = { "/a", "/sub/*.pem" };
	snprintf(p, sizeof p, "%s/sub/a", dir);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	serve(false, pats, 2, true, 0);
	init_ok();
	lookup(FUSE_ROOT_ID, "a", &err);
	ck_assert_int_eq(err, -ENOENT);
	uint64_t sub = lookup_ok(FUSE_ROOT_ID, "sub");
	lookup_ok(sub, "a");
	lookup(sub, "key.pem", &err);
	ck_assert_int_eq(err, -ENOENT);
	const char *const bad[] = { "/" };
	struct fs_passthrough *p2;
	struct fs_passthrough_config c = { .root = dir, .hidden.list = bad, .hidden.n = 1, .hidden.set = true };
	ck_assert_int_eq(fs_passthrough_new(&c, &p2), -EINVAL);
}
END_TEST

START_TEST(posix_locks_never_block)
{
	int err;
	start();
	uint64_t fh1 = create("lk", 0644, &err);
	uint64_t node = lookup(FUSE_ROOT_ID, "lk", &err);
	struct fuse_open_in op = { .flags = O_RDWR };
	struct fuse_open_out oo;
	ck_assert_int_eq(call(FUSE_OPEN, node, &op, sizeof op, NULL, NULL), 0);
	memcpy(&oo, body(), sizeof oo);
	struct fuse_lk_in lk = { .fh = fh1,
				 .lk = { .start = 0, .end = 99,
					 .type = F_WRLCK } };
	ck_assert_int_eq(call(FUSE_SETLK, node, &lk, sizeof lk, NULL, NULL), 0);
	lk.fh = oo.fh;
	ck_assert_int_eq(call(FUSE_SETLKW, node, &lk, sizeof lk, NULL, NULL),
			 -EAGAIN);
	ck_assert_int_eq(call(FUSE_GETLK, node, &lk, sizeof lk, NULL, NULL), 0);
	const struct fuse_lk_out *lo = body();
	ck_assert_uint_eq(lo->lk.type, F_WRLCK);
	ck_assert_uint_eq(lo->lk.end, 99);
	lk.lk.start = 100;
	lk.lk.end = UINT64_MAX;
	ck_assert_int_eq(call(FUSE_SETLK, node, &lk, sizeof lk, NULL, NULL), 0);
	lk.lk.type = 77;
	ck_assert_int_eq(call(FUSE_SETLK, node, &lk, sizeof lk, NULL, NULL),
			 -EINVAL);
	lk.lk.type = F_RDLCK;
	lk.lk.start = 10;
	lk.lk.end = 5;
	ck_assert_int_eq(call(FUSE_SETLK, node, &lk, sizeof lk, NULL, NULL),
			 -EINVAL);
}
END_TEST

START_TEST(destroy_resets)
{
	int err;
	start();
	lookup(FUSE_ROOT_ID, "a", &err);
	create("f", 0644, &err);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 2);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 1);
	ck_assert_int_eq(call(FUSE_DESTROY, FUSE_ROOT_ID, NULL, 0, NULL, NULL),
			 0);
	ck_assert(fuse_server_destroyed(srv));
	assert_nothing_held();
	lookup(FUSE_ROOT_ID, "a", &err);
	ck_assert_int_eq(err, -EIO);
}
END_TEST

/* Several threads at once on one server, as the multi-threaded /dev/fuse
 * harness and a virtio-fs worker pool drive it.  Each worker owns its
 * buffers, looks names up, reads and lists through its own handles, and
 * reads the handles other workers are releasing meanwhile; a small fd cap
 * makes inode fds close and reopen under them.  At the end every worker
 * has forgotten what it looked up and released what it opened, so nothing
 * may be left. */
#define CONC_THREADS 6
#define CONC_ROUNDS 300
#define CONC_SHARED 16

static uint64_t conc_shared_fh[CONC_SHARED];

struct conc_worker {
	unsigned seed, id;
	uint8_t req[4096];
	uint8_t rep[70000];
	uint64_t unique;
	int bad; /* replies that broke the protocol */
};

static int conc_call(struct conc_worker *w, uint32_t op, uint64_t nodeid,
		     const void *arg, size_t arglen, const char *name)
{
	struct fuse_in_header h = { 0 };
	struct fuse_out_header oh;
	size_t len = sizeof h + arglen + (name ? strlen(name) + 1 : 0);

	if (arglen)
		memcpy(w->req + sizeof h, arg, arglen);
	if (name)
		memcpy(w->req + sizeof h + arglen, name, strlen(name) + 1);
	h.len = (uint32_t)len;
	h.opcode = op;
	h.unique = ++w->unique;
	h.nodeid = nodeid;
	memcpy(w->req, &h, sizeof h);
	ssize_t n = fuse_server_handle_buf(srv, w->req, len, w->rep, sizeof w->rep);
	if (op == FUSE_FORGET)
		return n == 0 ? 0 : (w->bad++, -EIO);
	memcpy(&oh, w->rep, sizeof oh);
	if (n < (ssize_t)sizeof oh || oh.len != (uint32_t)n || oh.unique != h.unique)
		w->bad++;
	return oh.error;
}

static uint64_t conc_lookup(struct conc_worker *w, uint64_t parent,
			    const char *name)
{
	struct fuse_entry_out e;
	if (conc_call(w, FUSE_LOOKUP, parent, NULL, 0, name) != 0)
		return 0;
	memcpy(&e, w->rep + sizeof(struct fuse_out_header), sizeof e);
	return e.nodeid;
}

static void conc_forget(struct conc_worker *w, uint64_t node, uint64_t n)
{
	struct fuse_forget_in f = { .nlookup = n };
	conc_call(w, FUSE_FORGET, node, &f, sizeof f, NULL);
}

/* READDIRPLUS counted a lookup of each entry it returned with a nodeid:
 * gives those back. */
static void conc_forget_listed(struct conc_worker *w)
{
	struct fuse_out_header oh;
	memcpy(&oh, w->rep, sizeof oh);
	size_t pos = sizeof oh;
	while (pos + FUSE_NAME_OFFSET_DIRENTPLUS <= oh.len) {
		struct fuse_direntplus d;
		memcpy(&d, w->rep + pos, sizeof d);
		if (d.entry_out.nodeid)
			conc_forget(w, d.entry_out.nodeid, 1);
		pos += FUSE_DIRENTPLUS_SIZE(&d);
	}
}

static uint64_t conc_open(struct conc_worker *w, uint64_t node, bool isdir)
{
	struct fuse_open_in in = { .flags = O_RDONLY };
	struct fuse_open_out o;
	if (conc_call(w, isdir ? FUSE_OPENDIR : FUSE_OPEN, node, &in, sizeof in,
		      NULL) != 0)
		return UINT64_MAX;
	memcpy(&o, w->rep + sizeof(struct fuse_out_header), sizeof o);
	return o.fh;
}

static void conc_release(struct conc_worker *w, uint64_t node, uint64_t fh,
			 bool isdir)
{
	struct fuse_release_in rl = { .fh = fh };
	conc_call(w, isdir ? FUSE_RELEASEDIR : FUSE_RELEASE, node, &rl, sizeof rl,
		  NULL);
}

static void *conc_main(void *arg)
{
	struct conc_worker *w = arg;
	const char *names[] = { "a", "sub", "link", "c0", "c1", "c2", "nope" };
	struct fuse_getattr_in ga = { 0 };
	char mine[16];

	snprintf(mine, sizeof mine, "w%u", w->id);
	for (int round = 0; round < CONC_ROUNDS; round++) {
		unsigned r = (unsigned)rand_r(&w->seed);
		const char *nm = names[r % 7];
		uint64_t node = conc_lookup(w, FUSE_ROOT_ID, nm);
		if (!node)
			continue;
		conc_call(w, FUSE_GETATTR, node, &ga, sizeof ga, NULL);
		uint64_t pem = strcmp(nm, "sub") == 0 ? conc_lookup(w, node, "key.pem") : 0;
		if (pem) {
			conc_call(w, FUSE_GETATTR, pem, &ga, sizeof ga, NULL);
			conc_forget(w, pem, 1);
		}
		bool isdir = strcmp(nm, "sub") == 0;
		uint64_t fh = strcmp(nm, "link") == 0 ? UINT64_MAX : conc_open(w, node, isdir);
		if (isdir && fh == UINT64_MAX) {
			/* No handle (ENOSYS without OPENDIR, or EMFILE): the
			 * node itself, with someone else's number riding
			 * along, which only a handle-mode server reads. */
			struct fuse_read_in rd = {
				.fh = __atomic_load_n(&conc_shared_fh[r % CONC_SHARED],
						      __ATOMIC_RELAXED),
				.size = 4096,
			};
			if (conc_call(w, FUSE_READDIRPLUS, node, &rd, sizeof rd, NULL) == 0)
				conc_forget_listed(w);
		}
		if (fh != UINT64_MAX) {
			struct fuse_read_in rd = { .fh = fh, .size = 4096 };
			if (conc_call(w, isdir ? FUSE_READDIRPLUS : FUSE_READ, node,
				      &rd, sizeof rd, NULL) == 0 && isdir)
				conc_forget_listed(w);
			/* Publish it for others to read, then release it
			 * while they may be reading. */
			__atomic_store_n(&conc_shared_fh[r % CONC_SHARED], fh,
					 __ATOMIC_RELAXED);
			conc_release(w, node, fh, isdir);
		}
		/* Someone else's handle, maybe being released right now. */
		struct fuse_read_in rd = {
			.fh = __atomic_load_n(&conc_shared_fh[(r >> 8) % CONC_SHARED],
					      __ATOMIC_RELAXED),
			.size = 64,
		};
		conc_call(w, FUSE_READ, node, &rd, sizeof rd, NULL);
		/* Names come and go in the root while others look them up. */
		if (r % 5 == 0) {
			struct fuse_create_in ci = { .flags = O_RDWR, .mode = S_IFREG | 0644 };
			if (conc_call(w, FUSE_CREATE, FUSE_ROOT_ID, &ci, sizeof ci, mine) == 0) {
				struct fuse_entry_out e;
				struct fuse_open_out o;
				memcpy(&e, w->rep + sizeof(struct fuse_out_header), sizeof e);
				memcpy(&o, w->rep + sizeof(struct fuse_out_header) + sizeof e,
				       sizeof o);
				conc_call(w, FUSE_UNLINK, FUSE_ROOT_ID, NULL, 0, mine);
				conc_release(w, e.nodeid, o.fh, false);
				conc_forget(w, e.nodeid, 1);
			}
		}
		conc_forget(w, node, 1);
	}
	return NULL;
}

static void conc_tree(void)
{
	for (int i = 0; i < 3; i++) {
		char n[16];
		snprintf(n, sizeof n, "c%d", i);
		put_file(n, "concurrent");
	}
}

/* The workers on a server whose INIT went without OPENDIR or not. */
static void conc_run(bool no_opendir)
{
	struct conc_worker *w = calloc(CONC_THREADS, sizeof *w);
	pthread_t t[CONC_THREADS];

	ck_assert_ptr_nonnull(w);
	conc_tree();
	/* A cap of 6 fds: inode fds are closed and reopened under the
	 * workers' feet, and opens may meet EMFILE. */
	serve(false, NULL, 0, false, 6);
	init_mode(no_opendir);
	for (unsigned i = 0; i < CONC_THREADS; i++) {
		w[i].seed = 1234 + i;
		w[i].id = i;
		ck_assert_int_eq(pthread_create(&t[i], NULL, conc_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < CONC_THREADS; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(w[i].bad, 0);
	}
	assert_nothing_held();
	free(w);
}

START_TEST(concurrent_requests)
{
	conc_run(false);
}
END_TEST

/* The same without OPENDIR: each listing opens and closes its own fd. */
START_TEST(concurrent_no_opendir)
{
	conc_run(true);
}
END_TEST

struct conc_reset {
	struct conc_worker w;
	int stop; /* atomic */
};

static void *conc_spam(void *arg)
{
	struct conc_reset *c = arg;
	struct fuse_getattr_in ga = { 0 };
	while (!__atomic_load_n(&c->stop, __ATOMIC_RELAXED)) {
		uint64_t a = conc_lookup(&c->w, FUSE_ROOT_ID, "a");
		uint64_t fh = a ? conc_open(&c->w, a, false) : UINT64_MAX;
		if (fh != UINT64_MAX) {
			struct fuse_read_in rd = { .fh = fh, .size = 16 };
			conc_call(&c->w, FUSE_READ, a, &rd, sizeof rd, NULL);
		}
		conc_call(&c->w, FUSE_GETATTR, a, &ga, sizeof ga, NULL);
		/* A listing, by node or by a number no OPENDIR gave. */
		uint64_t sub = conc_lookup(&c->w, FUSE_ROOT_ID, "sub");
		struct fuse_read_in rd = { .fh = fh, .size = 4096 };
		conc_call(&c->w, FUSE_READDIRPLUS, sub, &rd, sizeof rd, NULL);
	}
	return NULL;
}

/* A transport reset (virtio-fs) or a new INIT lands while requests are in
 * flight: it waits for them, drops everything, and what the workers held
 * is then unknown to the server (ESTALE, EBADF, EIO), never freed twice.
 * The INITs go in and out of directory handles while listings run. */
START_TEST(reset_while_busy)
{
	struct conc_reset *c = calloc(4, sizeof *c);
	pthread_t t[4];

	ck_assert_ptr_nonnull(c);
	start();
	for (unsigned i = 0; i < 4; i++) {
		c[i].w.id = i;
		ck_assert_int_eq(pthread_create(&t[i], NULL, conc_spam, &c[i]), 0);
	}
	for (int i = 0; i < 30; i++) {
		usleep(2000);
		fuse_server_reset(srv);
		usleep(500);
		init_mode(i % 2);
	}
	for (unsigned i = 0; i < 4; i++)
		__atomic_store_n(&c[i].stop, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(c[i].w.bad, 0);
	}
	fuse_server_reset(srv);
	assert_nothing_held();
	free(c);
}
END_TEST

Suite *fuse_server_suite(void)
{
	return unit_suite_fixture("fuse_server", "core", setup, teardown, 0,
				  init_negotiates, init_versions,
				  requests_before_init_fail,
				  truncated_and_mismatched_headers,
				  hostile_names, unknown_opcodes,
				  bad_nodeids_and_handles,
				  lookup_counts_and_forgets,
				  readdir_hides_and_bounds,
				  readdirplus_skips_held_entries,
				  no_opendir_lists_nodes, keep_opendir_config,
				  handle_mode_refuses_no_fh,
				  open_dir_failure_gives_back,
				  no_opendir_fd_cap, no_opendir_hides,
				  getattr_handle_of_another_node,
				  write_read_and_sizes, hidden_names,
				  default_hidden, readonly_refuses_writes,
				  confinement, fd_cap, reopen_checks_identity,
				  renames_and_unlinks_tracked, anchored_hidden,
				  posix_locks_never_block, destroy_resets,
				  concurrent_requests, concurrent_no_opendir,
				  reset_while_busy);
}
