/* virtio-fs device: a fake guest driver over 1 MiB of RAM puts FUSE
 * requests in real descriptor chains (direct and indirect, split at odd
 * places) and reads the replies back from its own buffers; a temporary
 * directory is served.  Hostile chains must stop the device, never crash
 * it. */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/fs_passthrough.h"
#include "devices/virtio_fs.h"
#include "devices/virtio_mmio.h"
#include "lib/statebuf.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/tmp_tree.h"
#include "tests/lib/unit_suite.h"

#define RAM 0x100000u
#define QSIZE 64u
#define IND 0x30000u   /* indirect table */
#define REQ 0x40000u   /* request bytes */
#define REP 0x80000u   /* reply area */

enum { HIPRIO, REQUEST };

static struct fv_driver drv;
static struct virtio_fs vfs;
static struct virtio_mmio t;
static struct fs_passthrough *fs;
static struct fuse_server *srv;
static char dir[64];
static uint64_t unique = 1;

static void driver_up(void)
{
	const uint64_t f = 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_F_INDIRECT_DESC |
			   1ull << VIRTIO_F_EVENT_IDX;
	ck_assert_int_eq(fv_driver_up(&drv, f, 2, QSIZE), 0);
	ck_assert(vfs.dev.live);
}

static void setup(void)
{
	ck_assert_int_eq(tmp_tree_make(dir, sizeof dir, "/tmp/kbox-vfs-unit.XXXXXX"), 0);
	ck_assert_int_eq(tmp_tree_put(dir, "a", "hello"), 0);
	ck_assert_int_eq(tmp_tree_put(dir, ".env", "SECRET=1"), 0);
	struct fs_passthrough_config fc = { .root = dir };
	struct fuse_server_config sc = { .max_write = VIRTIO_FS_MAX_WRITE,
					 .entry_timeout = 1, .attr_timeout = 1 };
	ck_assert_int_eq(fs_passthrough_new(&fc, &fs), 0);
	ck_assert_int_eq(fuse_server_new(&fs_passthrough_ops, fs, &sc, &srv), 0);
	ck_assert_int_eq(fv_init(&drv, 0, RAM), 0);
	ck_assert_int_eq(virtio_fs_init(&vfs, srv, "workspace"), 0);
	ck_assert_int_eq(virtio_mmio_init(&t, &vfs.dev, &drv.gm, NULL), 0);
	drv.mmio = &t;
	driver_up();
}

static void teardown(void)
{
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	fv_free(&drv);
	ck_assert_int_eq(tmp_tree_remove(dir), 0);
}

static bool needs_reset(void)
{
	return fv_rd(&drv, 0x70) & VIRTIO_STATUS_NEEDS_RESET;
}

/* Offer one chain on queue q (in descriptors 0..n-1, or through an
 * indirect table) and kick.  Returns true and *used if the device gave it
 * back. */
static bool submit(unsigned q, const struct fv_seg *s, unsigned n, bool indirect, uint32_t *used)
{
	uint32_t head;
	if (indirect)
		fv_chain_indirect(&drv, q, 0, IND, s, n);
	else
		fv_chain(&drv, q, 0, s, n);
	fv_offer(&drv, q, 0);
	fv_kick(&drv, q);
	if (!fv_used(&drv, q, &head, used))
		return false;
	ck_assert_uint_eq(head, 0);
	ck_assert_uint_eq(fv_used_pending(&drv, q), 0);
	return true;
}

/* A chain the device must refuse: submit() gets nothing back and the
 * device asks for a reset. */
static void assert_stops(unsigned q, const struct fv_seg *s, unsigned n, bool indirect)
{
	uint32_t used;
	ck_assert(!submit(q, s, n, indirect, &used));
	ck_assert(needs_reset());
}

/* Write a request (header + arg + optional name) at REQ; returns its
 * length. */
static uint32_t build(uint32_t op, uint64_t nodeid, const void *arg, uint32_t arglen,
		      const char *name)
{
	struct fuse_in_header h = { .opcode = op, .unique = unique++, .nodeid = nodeid };
	uint32_t len = sizeof h;
	if (arglen)
		memcpy(drv.ram + REQ + len, arg, arglen);
	len += arglen;
	if (name) {
		memcpy(drv.ram + REQ + len, name, strlen(name) + 1);
		len += (uint32_t)strlen(name) + 1;
	}
	h.len = len;
	memcpy(drv.ram + REQ, &h, sizeof h);
	return len;
}

/* Send a request split after `split` bytes into two readable segments,
 * with a reply area of rep_len bytes in one writable segment. */
static struct fuse_out_header call(uint32_t op, uint64_t nodeid, const void *arg,
				   uint32_t arglen, const char *name, uint32_t rep_len,
				   bool indirect)
{
	uint32_t len = build(op, nodeid, arg, arglen, name), used;
	uint32_t split = len > 7 ? 7 : 1;
	struct fv_seg s[] = {
		{ REQ, split, false },
		{ REQ + split, len - split, false },
		{ REP, rep_len, true },
	};
	memset(drv.ram + REP, 0xee, rep_len);
	ck_assert(submit(REQUEST, s, 3, indirect, &used));
	struct fuse_out_header oh;
	memcpy(&oh, drv.ram + REP, sizeof oh);
	ck_assert_uint_eq(oh.len, used);
	return oh;
}

/* Copies n bytes of the reply from byte off after its header. */
static void reply_body(void *out, size_t off, size_t n)
{
	memcpy(out, drv.ram + REP + sizeof(struct fuse_out_header) + off, n);
}

/* call() of a request that must succeed, its reply in one 4 KiB area. */
static void call_ok(uint32_t op, uint64_t nodeid, const void *arg, uint32_t arglen,
		    const char *name, bool indirect)
{
	ck_assert_int_eq(call(op, nodeid, arg, arglen, name, 4096, indirect).error, 0);
}

/* The entry of a LOOKUP of name in the root that must succeed. */
static struct fuse_entry_out lookup_ok(const char *name, bool indirect)
{
	struct fuse_entry_out e;
	call_ok(FUSE_LOOKUP, FUSE_ROOT_ID, NULL, 0, name, indirect);
	reply_body(&e, 0, sizeof e);
	return e;
}

static void init_ok(void)
{
	struct fuse_init_in in = { .major = 7, .minor = 37, .max_readahead = 1 << 17,
				   .flags = FUSE_MAX_PAGES | FUSE_ASYNC_READ };
	struct fuse_init_out o;
	call_ok(FUSE_INIT, 0, &in, sizeof in, NULL, false);
	reply_body(&o, 0, sizeof o);
	ck_assert_uint_eq(o.major, 7);
	ck_assert_uint_eq(o.max_write, VIRTIO_FS_MAX_WRITE);
	ck_assert_uint_eq(o.max_pages, VIRTIO_FS_MAX_WRITE / 4096);
}

START_TEST(config_space)
{
	ck_assert_uint_eq(fv_rd(&drv, 0x008), VIRTIO_FS_DEVICE_ID);
	char tag[VIRTIO_FS_TAG_LEN];
	for (unsigned i = 0; i < VIRTIO_FS_TAG_LEN; i += 4) {
		uint32_t v = fv_rd(&drv, 0x100 + i);
		memcpy(tag + i, &v, 4);
	}
	ck_assert_mem_eq(tag, "workspace\0\0\0", 12);
	for (unsigned i = 9; i < VIRTIO_FS_TAG_LEN; i++)
		ck_assert_uint_eq((uint8_t)tag[i], 0);
	ck_assert_uint_eq(le32toh(fv_rd(&drv, 0x100 + 36)), 1);
	uint8_t b;
	virtio_mmio_read(&t, 0x100 + 1, &b, 1);
	ck_assert_uint_eq(b, 'o');
	/* Past the end of config space reads as zeros. */
	ck_assert_uint_eq(fv_rd(&drv, 0x100 + 40), 0);
}
END_TEST

START_TEST(init_lookup_getattr_read)
{
	init_ok();
	struct fuse_entry_out e = lookup_ok("a", true);
	ck_assert_uint_eq(e.attr.size, 5);

	struct fuse_getattr_in ga = { 0 };
	call_ok(FUSE_GETATTR, e.nodeid, &ga, sizeof ga, NULL, false);
	struct fuse_attr_out ao;
	reply_body(&ao, 0, sizeof ao);
	ck_assert_uint_eq(ao.attr.size, 5);
	ck_assert(S_ISREG(ao.attr.mode));

	struct fuse_open_in oi = { .flags = O_RDONLY };
	call_ok(FUSE_OPEN, e.nodeid, &oi, sizeof oi, NULL, false);
	struct fuse_open_out oo;
	reply_body(&oo, 0, sizeof oo);

	/* READ into a reply split as the Linux driver does: the header in
	 * one buffer, data in pieces. */
	struct fuse_read_in ri = { .fh = oo.fh, .offset = 1, .size = 4 };
	uint32_t len = build(FUSE_READ, e.nodeid, &ri, sizeof ri, NULL), used;
	struct fv_seg s[] = {
		{ REQ, sizeof(struct fuse_in_header), false },
		{ REQ + sizeof(struct fuse_in_header), len - sizeof(struct fuse_in_header), false },
		{ REP, sizeof(struct fuse_out_header), true },
		{ REP + 0x1000, 1, true },
		{ REP + 0x2000, 4096, true },
	};
	ck_assert(submit(REQUEST, s, 5, false, &used));
	ck_assert_uint_eq(used, sizeof(struct fuse_out_header) + 4);
	struct fuse_out_header oh;
	memcpy(&oh, drv.ram + REP, sizeof oh);
	ck_assert_int_eq(oh.error, 0);
	ck_assert_uint_eq(drv.ram[REP + 0x1000], 'e');
	ck_assert_mem_eq(drv.ram + REP + 0x2000, "llo", 3);

	/* Hidden names do not exist through the device either. */
	oh = call(FUSE_LOOKUP, FUSE_ROOT_ID, NULL, 0, ".env", 4096, false);
	ck_assert_int_eq(oh.error, -ENOENT);
	ck_assert(!needs_reset());
	ck_assert_uint_eq(vfs.stats.requests, 6);
}
END_TEST

START_TEST(write_reaches_host)
{
	init_ok();
	struct fuse_create_in ci = { .flags = O_WRONLY | O_CREAT, .mode = 0644 };
	call_ok(FUSE_CREATE, FUSE_ROOT_ID, &ci, sizeof ci, "new", false);
	struct fuse_entry_out e;
	struct fuse_open_out oo;
	reply_body(&e, 0, sizeof e);
	reply_body(&oo, sizeof e, sizeof oo);

	struct fuse_write_in wi = { .fh = oo.fh, .size = 6 };
	uint32_t len = build(FUSE_WRITE, e.nodeid, &wi, sizeof wi, NULL), used;
	memcpy(drv.ram + 0x60000, "from g", 6);
	struct fuse_in_header h;
	memcpy(&h, drv.ram + REQ, sizeof h);
	h.len = len + 6;
	memcpy(drv.ram + REQ, &h, sizeof h);
	struct fv_seg s[] = {
		{ REQ, len, false },
		{ 0x60000, 6, false },
		{ REP, 64, true },
	};
	ck_assert(submit(REQUEST, s, 3, true, &used));
	struct fuse_out_header oh;
	memcpy(&oh, drv.ram + REP, sizeof oh);
	ck_assert_int_eq(oh.error, 0);
	struct fuse_write_out wo;
	reply_body(&wo, 0, sizeof wo);
	ck_assert_uint_eq(wo.size, 6);

	char p[128], buf[16] = { 0 };
	snprintf(p, sizeof p, "%s/new", dir);
	FILE *f = fopen(p, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fread(buf, 1, sizeof buf, f), 6);
	fclose(f);
	ck_assert_str_eq(buf, "from g");
}
END_TEST

START_TEST(forget_on_hiprio)
{
	init_ok();
	struct fuse_entry_out e = lookup_ok("a", false);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 1);

	struct fuse_forget_in fi = { .nlookup = 1 };
	uint32_t len = build(FUSE_FORGET, e.nodeid, &fi, sizeof fi, NULL), used = 99;
	struct fv_seg s[] = { { REQ, len, false } };
	ck_assert(submit(HIPRIO, s, 1, false, &used));
	ck_assert_uint_eq(used, 0);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 0);
	ck_assert(!needs_reset());
}
END_TEST

/* A request that wants a reply but has no reply area: the device stops
 * before doing anything. */
START_TEST(reply_needed_but_no_area)
{
	init_ok();
	struct fuse_mkdir_in mi = { .mode = 0755 };
	uint32_t len = build(FUSE_MKDIR, FUSE_ROOT_ID, &mi, sizeof mi, "d");
	struct fv_seg s[] = { { REQ, len, false } };
	assert_stops(HIPRIO, s, 1, false);
	ck_assert(!vfs.dev.live);
	char p[128];
	struct stat st;
	snprintf(p, sizeof p, "%s/d", dir);
	ck_assert_int_ne(stat(p, &st), 0);
	ck_assert_uint_eq(vfs.stats.bad_chains, 1);
	/* The driver resets the device and starts over. */
	driver_up();
	init_ok();
}
END_TEST

/* A device reset drops the server's inodes and handles with their host
 * fds; requests before the next INIT fail. */
START_TEST(reset_closes_host_fds)
{
	init_ok();
	struct fuse_entry_out e = lookup_ok("a", false);
	struct fuse_open_in oi = { .flags = O_RDONLY };
	call_ok(FUSE_OPEN, e.nodeid, &oi, sizeof oi, NULL, false);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 1);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 2);
	fv_wr(&drv, 0x70, 0);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 0);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), 0);
	driver_up();
	struct fuse_getattr_in ga = { 0 };
	ck_assert_int_eq(call(FUSE_GETATTR, e.nodeid, &ga, sizeof ga, NULL, 4096, false).error,
			 -EIO);
	init_ok();
	ck_assert_int_eq(call(FUSE_GETATTR, e.nodeid, &ga, sizeof ga, NULL, 4096, false).error,
			 -ESTALE);
	call_ok(FUSE_GETATTR, FUSE_ROOT_ID, &ga, sizeof ga, NULL, false);
}
END_TEST

START_TEST(bad_framing_stops)
{
	init_ok();
	/* len says more than the chain holds */
	uint32_t len = build(FUSE_LOOKUP, FUSE_ROOT_ID, NULL, 0, "a");
	struct fv_seg s[] = { { REQ, len - 1, false }, { REP, 4096, true } };
	assert_stops(REQUEST, s, 2, false);
}
END_TEST

START_TEST(short_header_stops)
{
	init_ok();
	struct fv_seg s[] = { { REQ, 8, false }, { REP, 4096, true } };
	assert_stops(REQUEST, s, 2, false);
	/* A short request on hiprio (no reply area) is no better. */
	driver_up();
	assert_stops(HIPRIO, s, 1, false);
}
END_TEST

START_TEST(tiny_reply_area_stops)
{
	init_ok();
	uint32_t len = build(FUSE_LOOKUP, FUSE_ROOT_ID, NULL, 0, "a");
	struct fv_seg s[] = { { REQ, len, false }, { REP, 8, true } };
	assert_stops(REQUEST, s, 2, false);
}
END_TEST

START_TEST(hostile_chains)
{
	init_ok();
	uint32_t len = build(FUSE_LOOKUP, FUSE_ROOT_ID, NULL, 0, "a");
	/* A buffer outside guest RAM. */
	struct fv_seg out_of_ram[] = { { REQ, len, false }, { RAM - 16, 4096, true } };
	assert_stops(REQUEST, out_of_ram, 2, false);

	/* Readable after writable. */
	driver_up();
	struct fv_seg order[] = { { REP, 4096, true }, { REQ, len, false } };
	assert_stops(REQUEST, order, 2, false);

	/* A loop: the last descriptor points back at the first. */
	driver_up();
	fv_desc(&drv, drv.q[REQUEST].desc, 0, REQ, len, FV_DESC_F_NEXT, 1);
	fv_desc(&drv, drv.q[REQUEST].desc, 1, REP, 4096, FV_DESC_F_WRITE | FV_DESC_F_NEXT, 0);
	fv_offer(&drv, REQUEST, 0);
	fv_kick(&drv, REQUEST);
	ck_assert(needs_reset());

	/* More segments than a chain may have. */
	driver_up();
	struct fv_seg many[VIRTQUEUE_MAX_SEGS + 1];
	many[0] = (struct fv_seg){ REQ, len, false };
	for (unsigned i = 1; i <= VIRTQUEUE_MAX_SEGS; i++)
		many[i] = (struct fv_seg){ REP + 16 * i, 16, true };
	assert_stops(REQUEST, many, VIRTQUEUE_MAX_SEGS + 1, true);

	/* avail.idx far ahead of what the queue can hold. */
	driver_up();
	fv_w16(&drv, drv.q[REQUEST].avail + 2, QSIZE + 5);
	fv_kick(&drv, REQUEST);
	ck_assert(needs_reset());
	ck_assert_uint_ge(vfs.stats.bad_chains, 5);
}
END_TEST

/* Well-framed requests with bad fields get errno replies and the device
 * goes on. */
START_TEST(bad_fields_answered)
{
	init_ok();
	struct fuse_out_header oh = call(FUSE_LOOKUP, 12345, NULL, 0, "a", 4096, false);
	ck_assert_int_ne(oh.error, 0);
	oh = call(FUSE_LOOKUP, FUSE_ROOT_ID, NULL, 0, "..", 4096, false);
	ck_assert_int_eq(oh.error, -EINVAL);
	oh = call(9999, FUSE_ROOT_ID, NULL, 0, NULL, 4096, false);
	ck_assert_int_eq(oh.error, -ENOSYS);
	struct fuse_read_in ri = { .fh = 77, .size = 1u << 30 };
	oh = call(FUSE_READ, FUSE_ROOT_ID, &ri, sizeof ri, NULL, 4096, false);
	ck_assert_int_ne(oh.error, 0);
	ck_assert(!needs_reset());
}
END_TEST

START_TEST(init_rejects)
{
	struct virtio_fs f;
	char long_tag[VIRTIO_FS_TAG_LEN + 2];
	memset(long_tag, 'x', sizeof long_tag - 1);
	long_tag[sizeof long_tag - 1] = '\0';
	ck_assert_int_eq(virtio_fs_init(&f, srv, ""), -EINVAL);
	ck_assert_int_eq(virtio_fs_init(&f, srv, NULL), -EINVAL);
	ck_assert_int_eq(virtio_fs_init(&f, srv, long_tag), -EINVAL);
	ck_assert_int_eq(virtio_fs_init(&f, NULL, "t"), -EINVAL);
	long_tag[VIRTIO_FS_TAG_LEN] = '\0';
	ck_assert_int_eq(virtio_fs_init(&f, srv, long_tag), 0);

	/* A server whose max_write needs longer chains than a queue takes. */
	struct fuse_server *big;
	struct fuse_server_config sc = { .max_write = 1u << 20 };
	ck_assert_int_eq(fuse_server_new(&fs_passthrough_ops, fs, &sc, &big), 0);
	ck_assert_int_eq(virtio_fs_init(&f, big, "t"), -EINVAL);
	fuse_server_free(big);
}
END_TEST

/* ---- quiet (docs/snapshots.md): no FUSE session open ---- */

static int fs_quiet(char *err, size_t errlen)
{
	ck_assert_ptr_nonnull(vfs.dev.ops->quiet);
	return vfs.dev.ops->quiet(&vfs.dev, err, errlen);
}

START_TEST(quiet_until_session_ends)
{
	char err[128] = "";
	ck_assert_int_eq(fs_quiet(err, sizeof err), 0);
	/* an INIT the server refuses opens no session */
	struct fuse_init_in old = { .major = 6, .minor = 37 };
	ck_assert_int_eq(call(FUSE_INIT, 0, &old, sizeof old, NULL, 4096, false).error, -EPROTO);
	ck_assert_int_eq(fs_quiet(err, sizeof err), 0);
	init_ok();
	ck_assert(fuse_server_in_session(srv));
	ck_assert_int_eq(fs_quiet(err, sizeof err), -EBUSY);
	ck_assert_str_eq(err, "virtio-fs workspace: the guest has mounted it");
	/* the guest unmounts: DESTROY ends it */
	call_ok(FUSE_DESTROY, 0, NULL, 0, NULL, false);
	ck_assert(!fuse_server_in_session(srv));
	ck_assert_int_eq(fs_quiet(err, sizeof err), 0);
	/* a second mount, ended by a device reset */
	init_ok();
	ck_assert_int_eq(fs_quiet(err, sizeof err), -EBUSY);
	fv_wr(&drv, FV_R_STATUS, 0);
	ck_assert_int_eq(fs_quiet(err, sizeof err), 0);
	driver_up();
	ck_assert_int_eq(fs_quiet(err, sizeof err), 0);
	init_ok();
	ck_assert_int_eq(fs_quiet(err, sizeof err), -EBUSY);
}
END_TEST

/* ---- fork (docs/snapshots.md): the session carried to another device ---- */

/* The copy: a device over a new backend and server on the same folder,
 * made as another process would make it, with no transport. */
static struct virtio_fs vfs2;
static struct fs_passthrough *fs2;
static struct fuse_server *srv2;

static void copy_make(const char *tag, uint32_t max_write)
{
	struct fs_passthrough_config fc = { .root = dir };
	struct fuse_server_config sc = { .max_write = max_write, .entry_timeout = 1,
					 .attr_timeout = 1 };
	ck_assert_int_eq(fs_passthrough_new(&fc, &fs2), 0);
	ck_assert_int_eq(fuse_server_new(&fs_passthrough_ops, fs2, &sc, &srv2), 0);
	ck_assert_int_eq(virtio_fs_init(&vfs2, srv2, tag), 0);
}

static void copy_free(void)
{
	fuse_server_free(srv2);
	fs_passthrough_free(fs2);
	srv2 = NULL;
	fs2 = NULL;
}

static void fork_save(struct virtio_fs *f, struct statebuf_writer *w)
{
	char err[200] = "";
	statebuf_init(w);
	ck_assert_ptr_nonnull(f->dev.ops->fork_save);
	ck_assert_int_eq(f->dev.ops->fork_save(&f->dev, w, err, sizeof err), 0);
	ck_assert_int_eq(w->err, 0);
}

static int fork_load(struct virtio_fs *f, const void *p, size_t len, char *err, size_t errlen)
{
	err[0] = '\0';
	return f->dev.ops->fork_load(&f->dev, p, len, err, errlen);
}

/* One request to a server straight (no transport); the reply body, if
 * any, into body. */
static struct fuse_out_header srv_call(struct fuse_server *s, uint32_t op, uint64_t nodeid,
				       const void *arg, uint32_t arglen, const char *name,
				       void *body, size_t bodylen)
{
	uint8_t req[512], rep[8192];
	struct fuse_in_header h = { .opcode = op, .unique = unique++, .nodeid = nodeid };
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
	ck_assert_int_gt(fuse_server_handle_buf(s, req, len, rep, sizeof rep), 0);
	struct fuse_out_header oh;
	memcpy(&oh, rep, sizeof oh);
	if (body)
		memcpy(body, rep + sizeof oh, bodylen);
	return oh;
}

START_TEST(fork_carries_the_session)
{
	struct statebuf_writer w;
	char err[200];

	init_ok();
	struct fuse_entry_out e = lookup_ok("a", false);
	struct fuse_open_in oi = { .flags = O_RDWR };
	struct fuse_open_out oo, od;
	call_ok(FUSE_OPEN, e.nodeid, &oi, sizeof oi, NULL, false);
	reply_body(&oo, 0, sizeof oo);
	struct fuse_open_in di = { .flags = O_RDONLY | O_DIRECTORY };
	call_ok(FUSE_OPENDIR, FUSE_ROOT_ID, &di, sizeof di, NULL, false);
	reply_body(&od, 0, sizeof od);
	fork_save(&vfs, &w);

	copy_make("workspace", VIRTIO_FS_MAX_WRITE);
	ck_assert_int_eq(fork_load(&vfs2, w.buf, w.len, err, sizeof err), 0);
	statebuf_free(&w);
	ck_assert(fuse_server_in_session(srv2));
	ck_assert_uint_eq(fs_passthrough_inodes(fs2), 1);
	/* The old nodeid answers, the old handle reads and writes. */
	struct fuse_getattr_in ga = { 0 };
	struct fuse_attr_out ao;
	ck_assert_int_eq(srv_call(srv2, FUSE_GETATTR, e.nodeid, &ga, sizeof ga, NULL, &ao,
				  sizeof ao).error, 0);
	ck_assert_uint_eq(ao.attr.size, 5);
	struct fuse_read_in ri = { .fh = oo.fh, .size = 16 };
	char data[8] = "";
	struct fuse_out_header oh = srv_call(srv2, FUSE_READ, e.nodeid, &ri, sizeof ri, NULL,
					     data, 5);
	ck_assert_int_eq(oh.error, 0);
	ck_assert_uint_eq(oh.len, sizeof oh + 5);
	ck_assert_mem_eq(data, "hello", 5);
	struct {
		struct fuse_write_in in;
		char data[3];
	} wr = { { .fh = oo.fh, .offset = 5, .size = 3 }, "!!!" };
	struct fuse_write_out wo;
	ck_assert_int_eq(srv_call(srv2, FUSE_WRITE, e.nodeid, &wr, sizeof wr.in + 3, NULL, &wo,
				  sizeof wo).error, 0);
	ck_assert_uint_eq(wo.size, 3);
	/* The directory handle lists the root, hidden names left out. */
	uint8_t list[2048];
	struct fuse_read_in rdi = { .fh = od.fh, .size = sizeof list };
	oh = srv_call(srv2, FUSE_READDIR, FUSE_ROOT_ID, &rdi, sizeof rdi, NULL, list, sizeof list);
	ck_assert_int_eq(oh.error, 0);
	ck_assert_ptr_nonnull(memmem(list, oh.len - sizeof oh, "a", 1));
	ck_assert_ptr_null(memmem(list, oh.len - sizeof oh, ".env", 4));
	/* A lookup of the same name gives the same node. */
	struct fuse_entry_out e2;
	ck_assert_int_eq(srv_call(srv2, FUSE_LOOKUP, FUSE_ROOT_ID, NULL, 0, "a", &e2,
				  sizeof e2).error, 0);
	ck_assert_uint_eq(e2.nodeid, e.nodeid);
	struct fuse_release_in rl = { .fh = oo.fh };
	ck_assert_int_eq(srv_call(srv2, FUSE_RELEASE, e.nodeid, &rl, sizeof rl, NULL, NULL, 0)
				 .error, 0);
	/* The first device goes on: its handle reads what the copy wrote. */
	ri.size = 16;
	oh = call(FUSE_READ, e.nodeid, &ri, sizeof ri, NULL, 4096, false);
	ck_assert_int_eq(oh.error, 0);
	ck_assert_mem_eq(drv.ram + REP + sizeof oh, "hello!!!", 8);
	/* The copy forks in turn. */
	fork_save(&vfs2, &w);
	copy_free();
	copy_make("workspace", VIRTIO_FS_MAX_WRITE);
	ck_assert_int_eq(fork_load(&vfs2, w.buf, w.len, err, sizeof err), 0);
	ck_assert(fuse_server_in_session(srv2));
	ck_assert_int_eq(srv_call(srv2, FUSE_GETATTR, e.nodeid, &ga, sizeof ga, NULL, NULL, 0)
				 .error, 0);
	statebuf_free(&w);
	copy_free();
}
END_TEST

/* Never mounted: the fork carries "no session", and the copy mounts. */
START_TEST(fork_without_session)
{
	struct statebuf_writer w;
	char err[200];

	fork_save(&vfs, &w);
	copy_make("workspace", VIRTIO_FS_MAX_WRITE);
	ck_assert_int_eq(fork_load(&vfs2, w.buf, w.len, err, sizeof err), 0);
	ck_assert(!fuse_server_in_session(srv2));
	/* No bytes at all (a template's blob) is no session either. */
	ck_assert_int_eq(fork_load(&vfs2, NULL, 0, err, sizeof err), 0);
	struct fuse_getattr_in ga = { 0 };
	ck_assert_int_eq(srv_call(srv2, FUSE_GETATTR, FUSE_ROOT_ID, &ga, sizeof ga, NULL, NULL, 0)
				 .error, -EIO);
	struct fuse_init_in in = { .major = 7, .minor = 37 };
	ck_assert_int_eq(srv_call(srv2, FUSE_INIT, 0, &in, sizeof in, NULL, NULL, 0).error, 0);
	ck_assert_int_eq(srv_call(srv2, FUSE_GETATTR, FUSE_ROOT_ID, &ga, sizeof ga, NULL, NULL, 0)
				 .error, 0);
	statebuf_free(&w);
	copy_free();
	/* After DESTROY, the same. */
	init_ok();
	call_ok(FUSE_DESTROY, 0, NULL, 0, NULL, false);
	fork_save(&vfs, &w);
	copy_make("workspace", VIRTIO_FS_MAX_WRITE);
	ck_assert_int_eq(fork_load(&vfs2, w.buf, w.len, err, sizeof err), 0);
	ck_assert(!fuse_server_in_session(srv2));
	ck_assert(fuse_server_destroyed(srv2));
	statebuf_free(&w);
	copy_free();
}
END_TEST

/* A session's state is taken whole or not at all. */
START_TEST(fork_refused_whole)
{
	struct statebuf_writer w;
	char err[200];

	init_ok();
	struct fuse_entry_out e = lookup_ok("a", false);
	struct fuse_open_in oi = { .flags = O_RDONLY };
	call_ok(FUSE_OPEN, e.nodeid, &oi, sizeof oi, NULL, false);
	fork_save(&vfs, &w);
	copy_make("workspace", VIRTIO_FS_MAX_WRITE);
	/* Every cut is refused, with a line, and leaves nothing taken. */
	for (size_t len = 1; len < w.len; len++) {
		ck_assert_int_lt(fork_load(&vfs2, w.buf, len, err, sizeof err), 0);
		ck_assert_str_ne(err, "");
		ck_assert(!fuse_server_in_session(srv2));
		ck_assert_uint_eq(fs_passthrough_inodes(fs2), 0);
		ck_assert_uint_eq(fs_passthrough_open_fds(fs2), 0);
	}
	/* Flipped session bits and fields the server would not grant. */
	static const size_t at[] = { 0, 4, 44, 48, 52, 56, 60, 68, 72, 76, 80 };
	for (unsigned i = 0; i < sizeof at / sizeof at[0]; i++) {
		w.buf[at[i] + 3] ^= 0x40;
		ck_assert_int_lt(fork_load(&vfs2, w.buf, w.len, err, sizeof err), 0);
		ck_assert(!fuse_server_in_session(srv2));
		ck_assert_uint_eq(fs_passthrough_inodes(fs2), 0);
		w.buf[at[i] + 3] ^= 0x40;
	}
	copy_free();
	/* Another share's, another max_write. */
	copy_make("other", VIRTIO_FS_MAX_WRITE);
	ck_assert_int_eq(fork_load(&vfs2, w.buf, w.len, err, sizeof err), -EINVAL);
	ck_assert_str_eq(err, "virtio-fs other: the state of another share");
	copy_free();
	copy_make("workspace", 64u << 10);
	ck_assert_int_eq(fork_load(&vfs2, w.buf, w.len, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "max_write"));
	ck_assert_uint_eq(fs_passthrough_inodes(fs2), 0);
	copy_free();
	/* Into a copy that is mounted already. */
	copy_make("workspace", VIRTIO_FS_MAX_WRITE);
	struct fuse_init_in in = { .major = 7, .minor = 37 };
	ck_assert_int_eq(srv_call(srv2, FUSE_INIT, 0, &in, sizeof in, NULL, NULL, 0).error, 0);
	ck_assert_int_eq(fork_load(&vfs2, w.buf, w.len, err, sizeof err), -EBUSY);
	copy_free();
	/* And the good bytes still load. */
	copy_make("workspace", VIRTIO_FS_MAX_WRITE);
	ck_assert_int_eq(fork_load(&vfs2, w.buf, w.len, err, sizeof err), 0);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs2), 2);
	copy_free();
	statebuf_free(&w);
}
END_TEST

Suite *virtio_fs_suite(void)
{
	return unit_suite_fixture("virtio_fs", "device", setup, teardown, 0,
				  config_space, init_lookup_getattr_read,
				  write_reaches_host, forget_on_hiprio,
				  reply_needed_but_no_area,
				  reset_closes_host_fds, bad_framing_stops,
				  short_header_stops, tiny_reply_area_stops,
				  hostile_chains, bad_fields_answered,
				  init_rejects, quiet_until_session_ends,
				  fork_carries_the_session, fork_without_session,
				  fork_refused_whole);
}
