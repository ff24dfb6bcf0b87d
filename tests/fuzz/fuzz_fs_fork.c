/* libFuzzer target for the virtio-fs fork state (virtio_fs.c,
 * fuse_server_fork_load, fs_passthrough_fork.c): bytes loaded as a
 * device's fork state into a fresh device over a small temporary tree,
 * then FUSE requests to the copy's server.
 *
 * The first byte picks where the state comes from.  Bit 0 clear: a real
 * session, made here on a first device (INIT, then a script of lookups,
 * opens, directory opens and forgets), saved, the host tree changed as
 * bits 2-3 say, then bytes of the state flipped and (bit 4) the state cut,
 * as the script says: real tables with the tree's own inode numbers, a
 * few bytes wrong.  Bit 0 set: raw script bytes as the state, with (bit 1)
 * the root's dev and ino written in where the layout has them, so that
 * they get past that one check.
 *
 * A refused state must leave the copy with no session, no node and no
 * fd; an accepted one must save again and load into a third device.  No
 * request may crash, leak memory or host fds, or loop. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/fs_passthrough.h"
#include "devices/virtio_fs.h"
#include "lib/statebuf.h"
#include "tests/lib/fuzz_script.h"
#include "tests/lib/tmp_tree.h"

/* Where the backend's root dev and ino lie in a device's fork state: the
 * device's header (8 + tag), the server's (40), the backend's magic and
 * version. */
#define ROOT_AT (8u + VIRTIO_FS_TAG_LEN + 40u + 8u)

static char tree[64];

static void check(int ok)
{
	if (!ok)
		abort();
}

struct dev {
	struct fs_passthrough *fs;
	struct fuse_server *srv;
	struct virtio_fs vfs;
};

static void dev_make(struct dev *d)
{
	static const char *const extra[] = { "d/secret" };
	struct fs_passthrough_config fc = { .root = tree, .max_fds = 16, .hidden.extra = extra,
					    .hidden.n_extra = 1 };
	struct fuse_server_config sc = { .max_write = VIRTIO_FS_MAX_WRITE };
	check(fs_passthrough_new(&fc, &d->fs) == 0);
	check(fuse_server_new(&fs_passthrough_ops, d->fs, &sc, &d->srv) == 0);
	check(virtio_fs_init(&d->vfs, d->srv, "fuzz") == 0);
}

static void dev_free(struct dev *d)
{
	fuse_server_free(d->srv);
	fs_passthrough_free(d->fs);
}

static int dev_save(struct dev *d, struct statebuf_writer *w)
{
	char err[256] = "";
	statebuf_init(w);
	return d->vfs.dev.ops->fork_save(&d->vfs.dev, w, err, sizeof err);
}

static int dev_load(struct dev *d, const uint8_t *p, size_t len)
{
	char err[256] = "";
	int rc = d->vfs.dev.ops->fork_load(&d->vfs.dev, p, len, err, sizeof err);
	if (rc < 0) {
		/* refused whole, with a reason */
		check(err[0] != '\0');
		check(!fuse_server_in_session(d->srv));
		check(fs_passthrough_inodes(d->fs) == 0 && fs_passthrough_open_fds(d->fs) == 0);
	}
	return rc;
}

/* One request with arglen argument bytes and an optional name. */
static void call(struct fuse_server *s, uint32_t op, uint64_t nodeid, const void *arg,
		 uint32_t arglen, const char *name)
{
	static uint8_t req[1024], rep[16384];
	struct fuse_in_header h = { .opcode = op, .unique = 1, .nodeid = nodeid };
	uint32_t len = sizeof h;
	if (arglen)
		memcpy(req + len, arg, arglen);
	len += arglen;
	if (name) {
		memcpy(req + len, name, strlen(name) + 1);
		len += (uint32_t)strlen(name) + 1;
	}
	h.len = len;
	memcpy(req, &h, sizeof h);
	check(fuse_server_handle_buf(s, req, len, rep, sizeof rep) >= 0);
}

static const char *const names[] = { "a", "d", "e", "secret", ".ENV", "x", "..", "e2" };

/* The source session's script: steps of three bytes. */
static void source_session(struct dev *d, struct fz_input *in)
{
	uint64_t known[16] = { 1 };
	unsigned nk = 1;
	struct fuse_init_in init = { .major = 7, .minor = 31,
				     .flags = FUSE_DO_READDIRPLUS | FUSE_MAX_PAGES };
	uint8_t steps;

	call(d->srv, FUSE_INIT, 0, &init, sizeof init, NULL);
	fz_take(in, &steps, 1);
	for (unsigned i = 0; i < steps % 24u; i++) {
		uint8_t s[3];
		struct fuse_fs_entry e;
		uint64_t fh;
		fz_take(in, s, 3);
		uint64_t node = known[s[1] % nk];
		switch (s[0] % 4) {
		case 0:
			if (fs_passthrough_ops.lookup(d->fs, node, names[s[2] % 8], &e) == 0 &&
			    nk < 16)
				known[nk++] = e.nodeid;
			break;
		case 1:
			fs_passthrough_ops.open(d->fs, node, s[2] % 3 | (s[2] & 4 ? O_APPEND : 0),
						&fh);
			break;
		case 2:
			fs_passthrough_ops.opendir(d->fs, node, &fh);
			break;
		default:
			fs_passthrough_ops.forget(d->fs, node, s[2] % 3);
			break;
		}
	}
}

/* The state to load, in w: a real one, changed, or raw bytes. */
static void make_state(uint8_t mode, struct fz_input *in, struct statebuf_writer *w)
{
	char from[128], to[128];

	if (mode & 1) {
		uint16_t len;
		fz_take(in, &len, 2);
		statebuf_init(w);
		len = (uint16_t)(len < in->left ? len : in->left);
		statebuf_put(w, in->p, len);
		in->p += len;
		in->left -= len;
		struct stat st;
		if ((mode & 2) && w->len >= ROOT_AT + 16 && stat(tree, &st) == 0) {
			uint64_t v[2] = { (uint64_t)st.st_dev, (uint64_t)st.st_ino };
			memcpy(w->buf + ROOT_AT, v, sizeof v);
		}
		return;
	}
	struct dev src;
	dev_make(&src);
	source_session(&src, in);
	check(dev_save(&src, w) == 0);
	dev_free(&src);
	if (mode & 4) {
		snprintf(from, sizeof from, "%s/a", tree);
		unlink(from);
	}
	if (mode & 8) {
		snprintf(from, sizeof from, "%s/d/e", tree);
		snprintf(to, sizeof to, "%s/d/e2", tree);
		rename(from, to);
	}
	fz_flips(in, w->buf, w->len, 0);
	if (mode & 16) {
		uint16_t cut;
		fz_take(in, &cut, 2);
		w->len = cut % (w->len + 1);
	}
}

/* Requests to the copy: steps of four bytes. */
static void drive(struct dev *d, struct fz_input *in)
{
	static const char text[] = "fuzzed";
	for (unsigned i = 0; in->left && i < 32; i++) {
		uint8_t s[4];
		fz_take(in, s, 4);
		uint64_t node = s[1] % 8, fh = s[2] % 8;
		switch (s[0] % 9) {
		case 0: {
			struct fuse_getattr_in a = { .getattr_flags = s[3] & 1 ? FUSE_GETATTR_FH : 0,
						     .fh = fh };
			call(d->srv, FUSE_GETATTR, node, &a, sizeof a, NULL);
			break;
		}
		case 1:
			call(d->srv, FUSE_LOOKUP, node, NULL, 0, names[s[3] % 8]);
			break;
		case 2: {
			struct fuse_read_in r = { .fh = fh, .offset = s[3], .size = 64 };
			call(d->srv, FUSE_READ, node, &r, sizeof r, NULL);
			break;
		}
		case 3: {
			struct {
				struct fuse_write_in w;
				char data[sizeof text - 1];
			} wr = { { .fh = fh, .offset = s[3], .size = sizeof text - 1 }, "" };
			memcpy(wr.data, text, sizeof text - 1);
			call(d->srv, FUSE_WRITE, node, &wr, sizeof wr.w + sizeof text - 1, NULL);
			break;
		}
		case 4:
		case 5: {
			struct fuse_read_in r = { .fh = fh, .offset = s[3] & 1 ? 0 : s[3], .size = 4096 };
			call(d->srv, s[0] % 9 == 4 ? FUSE_READDIR : FUSE_READDIRPLUS, node, &r,
			     sizeof r, NULL);
			break;
		}
		case 6: {
			struct fuse_release_in r = { .fh = fh };
			call(d->srv, s[3] & 1 ? FUSE_RELEASEDIR : FUSE_RELEASE, node, &r, sizeof r,
			     NULL);
			break;
		}
		case 7: {
			struct fuse_forget_in f = { .nlookup = s[3] % 4 };
			call(d->srv, FUSE_FORGET, node, &f, sizeof f, NULL);
			break;
		}
		default: {
			struct fuse_open_in o = { .flags = s[3] % 3 };
			call(d->srv, s[3] & 4 ? FUSE_OPENDIR : FUSE_OPEN, node, &o, sizeof o, NULL);
			break;
		}
		}
	}
}

static void remove_tree(void)
{
	tmp_tree_remove(tree);
}

static void fresh_tree(void)
{
	char p[128];
	if (!tree[0]) {
		if (tmp_tree_make(tree, sizeof tree, "/tmp/kbox-fuzz-fsfork.XXXXXX") < 0)
			abort();
		atexit(remove_tree);
	}
	tmp_tree_remove(tree);
	mkdir(tree, 0755);
	snprintf(p, sizeof p, "%s/d", tree);
	mkdir(p, 0755);
	if (tmp_tree_put(tree, "a", "hello") < 0 || tmp_tree_put(tree, "d/e", "deep") < 0 ||
	    tmp_tree_put(tree, "d/secret", "k") < 0 || tmp_tree_put(tree, ".ENV", "S=1") < 0)
		abort();
}

/* How many of this process's fds lead into the tree. */
static int fds_into_tree(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	struct dirent *e;
	check(d != NULL);
	size_t tl = strlen(tree);
	while ((e = readdir(d))) {
		char l[64], t[PATH_MAX];
		snprintf(l, sizeof l, "/proc/self/fd/%s", e->d_name);
		ssize_t got = readlink(l, t, sizeof t - 1);
		if (got <= 0)
			continue;
		t[got] = '\0';
		if (strncmp(t, tree, tl) == 0 && (t[tl] == '/' || t[tl] == '\0'))
			n++;
	}
	closedir(d);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_input in = { data, size };
	struct statebuf_writer w;
	struct dev copy;
	uint8_t mode;

	fresh_tree();
	fz_take(&in, &mode, 1);
	make_state(mode, &in, &w);
	check(w.err == 0);
	dev_make(&copy);
	if (dev_load(&copy, w.buf, w.len) == 0) {
		/* what was taken saves, and loads again */
		struct statebuf_writer again;
		struct dev third;
		check(dev_save(&copy, &again) == 0);
		dev_make(&third);
		check(dev_load(&third, again.buf, again.len) == 0);
		dev_free(&third);
		statebuf_free(&again);
	}
	statebuf_free(&w);
	drive(&copy, &in);
	dev_free(&copy);
	/* No host fd outlives its device: none is left into the tree.  (Not
	 * "the lowest free fd never rises": libFuzzer opens a pipe to its
	 * symbolizer the first time it names a new function.) */
	check(fds_into_tree() == 0);
	return 0;
}
