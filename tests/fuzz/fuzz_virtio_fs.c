/* Input: a script for a guest driver of a virtio-fs device on virtio-mmio
 * serving a small temporary tree.  Each step is an opcode byte and its
 * arguments: raw bytes into guest RAM, a well-framed FUSE request in a
 * chain of fuzzed shape, a chain of fuzzed descriptors, a raw register
 * write, or a device reset.  The device must never crash, leak or loop,
 * and must never touch memory outside guest RAM. */
#include <linux/fuse.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/fs_passthrough.h"
#include "devices/virtio_fs.h"
#include "devices/virtio_mmio.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/fuzz_script.h"
#include "tests/lib/tmp_tree.h"

#define RAM 0x100000u
#define QSIZE 16u
#define IND 0x30000u
#define DATA 0x40000u   /* free-form area the script fills */
#define DATA_SIZE 0xc0000u

static struct fv_driver drv;
static struct virtio_mmio t;
static struct virtio_fs vfs;
static char tree[64];

/* Whether the device comes up is not this target's question: the script
 * goes on either way. */
static void driver_up(void)
{
	const uint64_t f = 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_F_INDIRECT_DESC |
			   1ull << VIRTIO_F_EVENT_IDX;
	fv_driver_up(&drv, f, 2, QSIZE);
}

/* A chain of n segments over [DATA + off, ...), the first nr readable;
 * indirect or direct. */
static void chain(unsigned q, const uint32_t *off, const uint32_t *len, unsigned n, unsigned nr,
		  bool indirect)
{
	struct fv_seg segs[12];
	for (unsigned i = 0; i < n; i++)
		segs[i] = (struct fv_seg){ DATA + off[i], len[i], i >= nr };
	if (indirect)
		fv_chain_indirect(&drv, q, 0, IND, segs, n);
	else
		fv_chain(&drv, q, 0, segs, n);
	fv_offer(&drv, q, 0);
	fv_kick(&drv, q);
}

/* A well-framed request: header (opcode, nodeid from the script) and
 * arglen argument bytes at DATA, split into pieces, then a reply area. */
static void request(struct fz_input *in)
{
	struct {
		uint8_t q, opcode, nodeid, pieces, indirect, out_pieces;
		uint16_t arglen, replen;
	} a;
	fz_take(in, &a, sizeof a);
	unsigned arglen = a.arglen % 2048, replen = a.replen % 0x9000;
	struct fuse_in_header h = {
		.len = (uint32_t)(sizeof h + arglen),
		.opcode = a.opcode % 52,
		.unique = 1,
		.nodeid = a.nodeid % 8,
	};
	memcpy(fv_at(&drv, DATA, sizeof h), &h, sizeof h);
	fz_take(in, fv_at(&drv, DATA + sizeof h, arglen), arglen);
	uint32_t off[12], len[12];
	unsigned n = 0, total = h.len, pieces = 1 + a.pieces % 4, done = 0;
	for (unsigned i = 0; i < pieces && done < total; i++) {
		unsigned l = i + 1 == pieces ? total - done : (total - done) / 2 + 1;
		off[n] = done;
		len[n++] = l;
		done += l;
	}
	unsigned nr = n, outp = a.out_pieces % 5;
	for (unsigned i = 0; i < outp && replen; i++) {
		off[n] = 0x10000 + 0x10000 * i;
		len[n++] = i + 1 == outp ? replen : 16 + i;
	}
	chain(a.q & 1, off, len, n, nr, a.indirect & 1);
}

static void raw_chain(struct fz_input *in)
{
	uint8_t q, n, nr, ind;
	fz_take(in, &q, 1);
	fz_take(in, &n, 1);
	fz_take(in, &nr, 1);
	fz_take(in, &ind, 1);
	n = (uint8_t)(1 + n % 8);
	uint32_t off[8], len[8];
	for (unsigned i = 0; i < n; i++) {
		uint32_t o, l;
		fz_take(in, &o, 4);
		fz_take(in, &l, 4);
		/* Mostly inside the data area, sometimes anywhere. */
		off[i] = o & 0x80000000u ? o : o % DATA_SIZE;
		len[i] = l & 0x80000000u ? l : l % 0x8000;
	}
	chain(q & 1, off, len, n, nr % (n + 1), ind & 1);
}

static void remove_tree(void)
{
	tmp_tree_remove(tree);
}

static void fresh_tree(void)
{
	char p[128];
	if (!tree[0]) {
		if (tmp_tree_make(tree, sizeof tree, "/tmp/kbox-fuzz-vfs.XXXXXX") < 0)
			abort();
		atexit(remove_tree);
	}
	tmp_tree_remove(tree);
	mkdir(tree, 0755);
	if (tmp_tree_put(tree, "a", "hello") < 0)
		abort();
	snprintf(p, sizeof p, "%s/d", tree);
	mkdir(p, 0755);
	/* A case variant of a hidden name, and a path pattern's target. */
	if (tmp_tree_put(tree, ".ENV", "SECRET=2") < 0 || tmp_tree_put(tree, "d/secret", "k") < 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_input in = { data, size };
	struct fs_passthrough *fs;
	struct fuse_server *srv;

	fresh_tree();
	if (!drv.ram && fv_init(&drv, 0, RAM) < 0)
		abort();
	fv_clear(&drv);
	static const char *const extra[] = { "d/secret" };
	struct fs_passthrough_config fc = { .root = tree, .max_fds = 64, .hidden.extra = extra,
				 .hidden.n_extra = 1 };
	struct fuse_server_config sc = { .max_write = VIRTIO_FS_MAX_WRITE };
	if (fs_passthrough_new(&fc, &fs) < 0)
		abort();
	if (fuse_server_new(&fs_passthrough_ops, fs, &sc, &srv) < 0 || virtio_fs_init(&vfs, srv, "fuzz") < 0 ||
	    virtio_mmio_init(&t, &vfs.dev, &drv.gm, NULL) < 0)
		abort();
	drv.mmio = &t;
	driver_up();
	for (unsigned steps = 0; in.left && steps < 64; steps++) {
		uint8_t op;
		fz_take(&in, &op, 1);
		switch (op % 5) {
		case 0:
			fz_poke_ram(&in, &drv, DATA, DATA_SIZE);
			break;
		case 1:
			request(&in);
			break;
		case 2:
			raw_chain(&in);
			break;
		case 3:
			fz_poke_reg(&in, &drv);
			break;
		default:
			driver_up();
			break;
		}
	}
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	return 0;
}
