/* Fuzzes FUSE request decoding and the passthrough backend behind it.  The
 * input is one mode byte, then a run of requests, each framed by its own
 * fuse_in_header.len (a len that does not fit sends the rest as one
 * request).  The mode byte picks the first INIT: bit 0 set withholds
 * FUSE_NO_OPENDIR_SUPPORT (directories opened with OPENDIR, listed through
 * handles), bit 1 sets keep_opendir in the server's config; clear, the
 * kernel's offer is taken and directories are listed by node.  Bit 2 gives
 * the server an id map whose guest root is host 1002:1002 (as for kbox run
 * by that user): attributes, SETATTR's ids and the requests' own uid/gid
 * (the owner of what they make) then go through it.  Every input
 * gets a fresh copy of the same small tree and a fresh server after that
 * INIT, so runs are deterministic. */
#include <errno.h>
#include <linux/fuse.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/fs_passthrough.h"
#include "devices/fuse_server.h"
#include "tests/lib/tmp_tree.h"

static char base[64];
static char tree[96];
static struct fuse_fs_ops ops;
static uint8_t *reply;
#define REPLY_SIZE (2u << 20)

/* Real disk space is the one thing a request could use up: cap it. */
static int capped_fallocate(void *be, uint64_t fh, int mode, off_t off,
			    off_t len)
{
	if (len > (1 << 20))
		return -ENOSPC;
	return fs_passthrough_ops.fallocate(be, fh, mode, off, len);
}

static void put(const char *rel, const char *text)
{
	if (tmp_tree_put(tree, rel, text) < 0)
		abort();
}

/* The first input finds no tree to remove. */
static void fresh_tree(void)
{
	char p[160];
	tmp_tree_remove(tree);
	mkdir(tree, 0755);
	put("a", "hello");
	put(".env", "SECRET=1");
	snprintf(p, sizeof p, "%s/sub", tree);
	mkdir(p, 0755);
	put("sub/b", "world");
	/* A case variant of a hidden name, and a path pattern's target
	 * (hidden_extra below), whose ancestor sub must not be renamed. */
	put(".ENV", "SECRET=2");
	put("sub/secret", "k");
	snprintf(p, sizeof p, "%s/link", tree);
	symlink("../outside", p);
}

static void cleanup(void)
{
	tmp_tree_remove(base);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (tmp_tree_make(base, sizeof base, "/tmp/kbox-fuzz-fuse.XXXXXX") < 0)
		abort();
	snprintf(tree, sizeof tree, "%s/root", base);
	atexit(cleanup);
	ops = fs_passthrough_ops;
	ops.fallocate = capped_fallocate;
	reply = malloc(REPLY_SIZE);
	if (!reply)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const extra[] = { "sub/secret" };
	struct fs_passthrough_config cfg = { .max_fds = 64, .hidden.extra = extra, .hidden.n_extra = 1 };
	struct fuse_server_config scfg = { .posix_locks = true };
	struct fs_passthrough *fs;
	struct fuse_server *srv;
	struct {
		struct fuse_in_header h;
		struct fuse_init_in in;
	} init = { { sizeof init, FUSE_INIT, 1, 0, 0, 0, 0, 0, 0 },
		   { .major = 7, .minor = 38, .flags = 0xffffffffu } };

	if (size) {
		if (data[0] & 1)
			init.in.flags &= ~(uint32_t)FUSE_NO_OPENDIR_SUPPORT;
		scfg.keep_opendir = data[0] & 2;
		if (data[0] & 4)
			scfg.ids = idmap_owner(1002, 1002);
		data++;
		size--;
	}
	fresh_tree();
	cfg.root = tree;
	if (fs_passthrough_new(&cfg, &fs) < 0)
		abort();
	if (fuse_server_new(&ops, fs, &scfg, &srv) < 0)
		abort();
	if (fuse_server_handle_buf(srv, &init, sizeof init, reply,
				   REPLY_SIZE) <= 0)
		abort();
	/* The request is copied out of the fuzzer's buffer so that ASan sees
	 * any read past its end. */
	for (int n = 0; size && n < 64; n++) {
		struct fuse_in_header h;
		size_t len = size;
		if (size >= sizeof h) {
			memcpy(&h, data, sizeof h);
			if (h.len >= sizeof h && h.len <= size)
				len = h.len;
		}
		uint8_t *req = malloc(len);
		if (!req)
			abort();
		memcpy(req, data, len);
		ssize_t r = fuse_server_handle_buf(srv, req, len, reply,
						   REPLY_SIZE);
		if (r > (ssize_t)REPLY_SIZE)
			abort();
		free(req);
		data += len;
		size -= len;
	}
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	return 0;
}
