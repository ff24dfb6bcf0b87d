/* Input: a first byte choosing the disk (writable or read-only, with or
 * without fallocate, O_DIRECT or the page cache only) and the driver's
 * features, then a script for a guest
 * driver of a virtio-blk device on virtio-mmio over a small sparse file.
 * Each step is an opcode byte and its arguments: raw bytes into guest RAM,
 * a request (any type, sector, data length and split) in a chain of
 * fuzzed shape, a chain of fuzzed descriptors, a raw register write, or a
 * device reset.  The device must never crash, leak or loop, never touch
 * memory outside guest RAM, and never change the disk file's size. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/blk_file.h"
#include "devices/virtio_blk.h"
#include "devices/virtio_mmio.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/fuzz_script.h"

#define RAM 0x100000u
#define QSIZE 16u
#define IND 0x30000u
#define DATA 0x40000u   /* free-form area the script fills */
#define DATA_SIZE 0xc0000u
#define DISK (64u * 1024)

static struct fv_driver drv;
static struct virtio_mmio t;
static struct virtio_blk blk;
static char path[64];
static int fd = -1;
static uint64_t features;

static void remove_disk(void)
{
	unlink(path);
}

static void driver_up(void)
{
	fv_driver_up(&drv, features, 1, QSIZE);
}

/* A chain of n segments over [DATA + off, ...), the first nr readable;
 * indirect or direct. */
static void chain(const uint32_t *off, const uint32_t *len, unsigned n, unsigned nr, bool indirect)
{
	struct fv_seg segs[12];
	for (unsigned i = 0; i < n; i++)
		segs[i] = (struct fv_seg){ DATA + off[i], len[i], i >= nr };
	if (indirect)
		fv_chain_indirect(&drv, 0, 0, IND, segs, n);
	else
		fv_chain(&drv, 0, 0, segs, n);
	fv_offer(&drv, 0, 0);
	fv_kick(&drv, 0);
}

/* A well-shaped request: header at DATA, data of the script's length
 * (in or out as the type wants, or the other way round) in pieces, and a
 * status byte; discard segments come from the script. */
static void request(struct fz_input *in)
{
	struct {
		uint8_t type, pieces, indirect, wrong_side;
		uint16_t sector, len;
		uint8_t nseg, status_split;
	} a;
	fz_take(in, &a, sizeof a);
	static const uint32_t types[] = { VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_FLUSH,
					  VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_DISCARD,
					  VIRTIO_BLK_T_WRITE_ZEROES, 3, 0xffffffffu };
	uint32_t type = types[a.type % 8];
	/* Sectors near the end of the disk, or far past it. */
	uint64_t sector = a.sector & 0x8000 ? (uint64_t)a.sector << 48 | a.sector
					    : a.sector % (DISK / 512 + 4);
	uint8_t h[16] = { 0 };
	uint32_t t32 = htole32(type);
	uint64_t s64 = htole64(sector);
	memcpy(h, &t32, 4);
	memcpy(h + 8, &s64, 8);
	memcpy(fv_at(&drv, DATA, 16), h, 16);
	uint32_t len, base = 0x1000;
	bool data_in = type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID;
	if (type == VIRTIO_BLK_T_DISCARD || type == VIRTIO_BLK_T_WRITE_ZEROES) {
		len = 16u * (a.nseg % 20);
		fz_take(in, fv_at(&drv, DATA + base, len), len);
	} else {
		len = a.len & 0x8000 ? a.len & 0x7fff : 512u * (a.len % 130);
	}
	if (a.wrong_side & 1)
		data_in = !data_in;
	uint32_t off[12], lens[12];
	unsigned n = 0;
	off[n] = 0;
	lens[n++] = 16;
	unsigned pieces = 1 + a.pieces % 8;
	uint32_t done = 0;
	for (unsigned i = 0; i < pieces && done < len; i++) {
		uint32_t l = i + 1 == pieces ? len - done : (len - done) / 2 + 1;
		off[n] = base + done;
		lens[n++] = l;
		done += l;
	}
	unsigned nr = data_in ? 1 : n;
	if (a.status_split & 1) {
		/* The status in its own descriptor. */
		off[n] = 0x90000;
		lens[n++] = 1;
	} else if (n > nr) {
		lens[n - 1]++; /* the status as the last byte of the data */
	} else {
		off[n] = 0x90000;
		lens[n++] = 1;
	}
	if (data_in && (a.status_split & 2))
		nr = 0; /* no readable header */
	chain(off, lens, n, nr, a.indirect & 1);
}

static void raw_chain(struct fz_input *in)
{
	uint8_t n, nr, ind;
	fz_take(in, &n, 1);
	fz_take(in, &nr, 1);
	fz_take(in, &ind, 1);
	n = (uint8_t)(1 + n % 8);
	uint32_t off[8], len[8];
	for (unsigned i = 0; i < n; i++) {
		uint32_t o, l;
		fz_take(in, &o, 4);
		fz_take(in, &l, 4);
		off[i] = o & 0x80000000u ? o : o % DATA_SIZE;
		len[i] = l & 0x80000000u ? l : l % 0x8000;
	}
	chain(off, len, n, nr % (n + 1), ind & 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_input in = { data, size };
	struct blk_backend be;
	struct stat st;
	uint8_t mode;

	if (fd < 0) {
		strcpy(path, "/tmp/kbox-fuzz-vblk.XXXXXX");
		fd = mkstemp(path);
		if (fd < 0)
			abort();
		atexit(remove_disk);
	}
	/* A fresh sparse disk each run, so that runs replay alike. */
	if (ftruncate(fd, 0) < 0 || ftruncate(fd, DISK) < 0 || pwrite(fd, "kbox", 4, 512) != 4)
		abort();
	/* Page-aligned RAM, as kbox's: aligned requests take the O_DIRECT
	 * path of the backend (unless mode asks for the page cache only). */
	if (!drv.ram) {
		memset(&drv, 0, sizeof drv);
		if (!(drv.ram = aligned_alloc(4096, RAM)))
			abort();
		memset(drv.ram, 0, RAM);
		drv.size = RAM;
		if (guest_mem_add_region(&drv.gm, 0, RAM, drv.ram) < 0)
			abort();
	}
	fv_clear(&drv);
	fz_take(&in, &mode, 1);
	struct blk_file_opts o = { .read_only = mode & 1, .no_fallocate = mode & 2,
				   .buffered = mode & 0x80 };
	if (blk_file_open(path, &o, &be) < 0)
		abort();
	struct virtio_blk_opts bo = { .serial = "fuzz", .blk_size = mode & 4 ? 4096 : 0 };
	if (virtio_blk_init(&blk, &be, &bo) < 0 || virtio_mmio_init(&t, &blk.dev, &drv.gm, NULL) < 0)
		abort();
	drv.mmio = &t;
	features = 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_F_INDIRECT_DESC;
	if (mode & 8)
		features |= 1ull << VIRTIO_F_EVENT_IDX;
	if (mode & 16)
		features |= 1ull << VIRTIO_BLK_F_FLUSH;
	if (!(mode & 1))
		features |= (uint64_t)(mode & 0x60) << (VIRTIO_BLK_F_DISCARD - 5);
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
	blk_file_close(&be);
	if (fstat(fd, &st) < 0 || st.st_size != DISK)
		abort();
	return 0;
}
