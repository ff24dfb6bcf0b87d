/* virtio-blk device: a fake guest driver over 1 MiB of RAM puts block
 * requests in real descriptor chains (direct and indirect, split at odd
 * places) over a real sparse file in /tmp, and compares what it reads
 * with the file itself.  Hostile chains get IOERR or stop the device,
 * never crash it, and never move the disk file's end. */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/blk_file.h"
#include "devices/virtio_blk.h"
#include "devices/virtio_mmio.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/unit_suite.h"

#define RAM 0x100000u
#define QSIZE 64u
#define IND 0x30000u   /* indirect table */
#define HDR 0x40000u   /* request header, then discard segments */
#define DATA 0x50000u  /* data buffers, up to 0xe0000 */
#define ST 0xf0000u    /* status byte */
#define DISK (1u << 20)
#define NSECT (DISK / 512)

static const uint64_t all_features =
	1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_F_INDIRECT_DESC | 1ull << VIRTIO_F_EVENT_IDX |
	1ull << VIRTIO_BLK_F_FLUSH | 1ull << VIRTIO_BLK_F_DISCARD |
	1ull << VIRTIO_BLK_F_WRITE_ZEROES | 1ull << VIRTIO_BLK_F_BLK_SIZE |
	1ull << VIRTIO_BLK_F_SEG_MAX | 1ull << VIRTIO_BLK_F_SIZE_MAX;

static struct fv_driver drv;
static struct virtio_blk blk;
static struct virtio_mmio t;
static struct blk_backend be;
static char path[64];
static int fd = -1; /* the test's own view of the disk file */

/* A backend that counts calls and can fail them, around the file one:
 * shows the write-through promise and backend errors. */
static struct {
	unsigned flushes, writes;
	int fail; /* returned by every hook when non-zero */
} spy;

static int spy_read(void *ctx, const struct iovec *iov, int n, uint64_t off)
{
	return spy.fail ? spy.fail : be.ops->read(ctx, iov, n, off);
}

static int spy_write(void *ctx, const struct iovec *iov, int n, uint64_t off)
{
	spy.writes++;
	return spy.fail ? spy.fail : be.ops->write(ctx, iov, n, off);
}

static int spy_flush(void *ctx)
{
	spy.flushes++;
	return spy.fail ? spy.fail : be.ops->flush(ctx);
}

static int spy_discard(void *ctx, uint64_t off, uint64_t len)
{
	return spy.fail ? spy.fail : be.ops->discard(ctx, off, len);
}

static int spy_wz(void *ctx, uint64_t off, uint64_t len, bool unmap)
{
	return spy.fail ? spy.fail : be.ops->write_zeroes(ctx, off, len, unmap);
}

static const struct blk_backend_ops spy_ops = { spy_read, spy_write, spy_flush, spy_discard,
						spy_wz };

static void make_disk(void)
{
	strcpy(path, "/tmp/kbox-vblk-unit.XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, DISK), 0);
}

/* Bring a device over backend b up with features f. */
static void device_up(const struct blk_backend *b, uint64_t f)
{
	struct virtio_blk_opts o = { .serial = "kbox-disk-0001" };
	ck_assert_int_eq(virtio_blk_init(&blk, b, &o), 0);
	ck_assert_int_eq(virtio_mmio_init(&t, &blk.dev, &drv.gm, NULL), 0);
	drv.mmio = &t;
	ck_assert_int_eq(fv_driver_up(&drv, f, 1, QSIZE), 0);
	ck_assert(blk.dev.live);
}

static void open_disk(bool ro, bool no_falloc, uint64_t f)
{
	struct blk_file_opts o = { .read_only = ro, .no_fallocate = no_falloc };
	blk_file_close(&be);
	ck_assert_int_eq(blk_file_open(path, &o, &be), 0);
	device_up(&be, f);
}

static void setup(void)
{
	make_disk();
	ck_assert_int_eq(fv_init(&drv, 0, RAM), 0);
	memset(&be, 0, sizeof be);
	memset(&spy, 0, sizeof spy);
	open_disk(false, false, all_features);
}

static void teardown(void)
{
	struct stat st;
	/* Whatever the guest did, the disk file kept its size. */
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(st.st_size, DISK);
	blk_file_close(&be);
	fv_free(&drv);
	close(fd);
	unlink(path);
}

static bool needs_reset(void)
{
	return fv_rd(&drv, 0x70) & VIRTIO_STATUS_NEEDS_RESET;
}

static void header(uint32_t type, uint64_t sector)
{
	uint32_t ty = htole32(type), z = 0;
	uint64_t s = htole64(sector);
	memcpy(drv.ram + HDR, &ty, 4);
	memcpy(drv.ram + HDR + 4, &z, 4);
	memcpy(drv.ram + HDR + 8, &s, 8);
}

/* Offer segs as one chain in descriptors 0.. (or through an indirect
 * table) and kick.  Returns the status byte at ST, or -1 if the device
 * gave nothing back; *used gets the used length. */
static int submit(const struct fv_seg *s, unsigned n, bool indirect, uint32_t *used)
{
	uint32_t head, u;
	drv.ram[ST] = 0xee;
	if (indirect)
		fv_chain_indirect(&drv, 0, 0, IND, s, n);
	else
		fv_chain(&drv, 0, 0, s, n);
	fv_offer(&drv, 0, 0);
	fv_kick(&drv, 0);
	if (!fv_used(&drv, 0, &head, &u))
		return -1;
	ck_assert_uint_eq(head, 0);
	if (used)
		*used = u;
	return drv.ram[ST];
}

/* A read or write of len bytes at sector from/to DATA, the data split
 * into pieces of at most piece bytes (odd sizes allowed); header split
 * after 5 bytes. */
static int rw(uint32_t type, uint64_t sector, uint32_t len, uint32_t piece, bool indirect)
{
	struct fv_seg s[40];
	unsigned n = 0;
	header(type, sector);
	s[n++] = (struct fv_seg){ HDR, 5, false };
	s[n++] = (struct fv_seg){ HDR + 5, 11, false };
	for (uint32_t done = 0; done < len;) {
		uint32_t k = len - done < piece ? len - done : piece;
		ck_assert_uint_lt(n, 39);
		s[n++] = (struct fv_seg){ DATA + done, k, type == VIRTIO_BLK_T_IN };
		done += k;
	}
	s[n++] = (struct fv_seg){ ST, 1, true };
	uint32_t used;
	int st = submit(s, n, indirect, &used);
	if (st == VIRTIO_BLK_S_OK && type == VIRTIO_BLK_T_IN)
		ck_assert_uint_eq(used, len + 1);
	return st;
}

/* A DISCARD or WRITE_ZEROES of n segments {sector, nsect, flags}. */
static int dwz(uint32_t type, const uint64_t (*seg)[3], unsigned n)
{
	header(type, 0);
	for (unsigned i = 0; i < n; i++) {
		uint64_t s = htole64(seg[i][0]);
		uint32_t ns = htole32((uint32_t)seg[i][1]), fl = htole32((uint32_t)seg[i][2]);
		uint8_t *p = drv.ram + HDR + 16 + 16 * i;
		memcpy(p, &s, 8);
		memcpy(p + 8, &ns, 4);
		memcpy(p + 12, &fl, 4);
	}
	struct fv_seg s[] = { { HDR, 16, false }, { HDR + 16, 16 * n, false }, { ST, 1, true } };
	return submit(s, 3, false, NULL);
}

static void pattern(uint8_t *p, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 7 + seed + (i >> 9));
}

/* The file's bytes [off, off + len) all equal to c. */
static bool file_is(uint64_t off, uint32_t len, uint8_t c)
{
	uint8_t *buf = malloc(len);
	ck_assert_int_eq(pread(fd, buf, len, (off_t)off), (ssize_t)len);
	bool ok = true;
	for (uint32_t i = 0; i < len && ok; i++)
		ok = buf[i] == c;
	free(buf);
	return ok;
}

static uint32_t cfg32(unsigned off)
{
	return le32toh(fv_rd(&drv, 0x100 + off));
}

START_TEST(config_space)
{
	ck_assert_uint_eq(fv_rd(&drv, 0x008), VIRTIO_BLK_DEVICE_ID);
	uint64_t cap = cfg32(0) | (uint64_t)cfg32(4) << 32;
	ck_assert_uint_eq(cap, NSECT);
	ck_assert_uint_eq(cfg32(8), VIRTIO_BLK_SIZE_MAX);
	ck_assert_uint_eq(cfg32(12), VIRTIO_BLK_SEG_MAX);
	ck_assert_uint_eq(cfg32(20), 512);
	ck_assert_uint_eq(cfg32(36), VIRTIO_BLK_MAX_DWZ_SECTORS);
	ck_assert_uint_eq(cfg32(40), VIRTIO_BLK_MAX_DWZ_SEG);
	ck_assert_uint_eq(cfg32(44), 1);
	ck_assert_uint_eq(cfg32(48), VIRTIO_BLK_MAX_DWZ_SECTORS);
	ck_assert_uint_eq(cfg32(52), VIRTIO_BLK_MAX_DWZ_SEG);
	uint8_t b;
	virtio_mmio_read(&t, 0x100 + 56, &b, 1);
	ck_assert_uint_eq(b, 1);
	uint64_t cap8;
	virtio_mmio_read(&t, 0x100, &cap8, 8);
	ck_assert_uint_eq(le64toh(cap8), NSECT);
	ck_assert_uint_eq(fv_rd(&drv, 0x100 + 60), 0); /* past the end */
	fv_wr(&drv, FV_R_DEV_FEATURES_SEL, 0);
	uint32_t f = fv_rd(&drv, 0x010);
	ck_assert(f & 1u << VIRTIO_BLK_F_FLUSH);
	ck_assert(f & 1u << VIRTIO_BLK_F_DISCARD);
	ck_assert(f & 1u << VIRTIO_BLK_F_WRITE_ZEROES);
	ck_assert(!(f & 1u << VIRTIO_BLK_F_RO));
}
END_TEST

/* Data integrity: a pattern written through the device is in the file,
 * and reads back the same with another split, direct and indirect. */
START_TEST(write_read_integrity)
{
	const uint32_t len = 64 * 1024;
	uint8_t *want = malloc(len), *got = malloc(len);
	pattern(want, len, 3);
	memcpy(drv.ram + DATA, want, len);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 100, len, 3333, false), VIRTIO_BLK_S_OK);
	ck_assert_int_eq(pread(fd, got, len, 100 * 512), (ssize_t)len);
	ck_assert_mem_eq(got, want, len);
	ck_assert(file_is(99 * 512, 512, 0));
	ck_assert(file_is(100 * 512 + len, 512, 0));

	memset(drv.ram + DATA, 0, len);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, 100, len, 4097, true), VIRTIO_BLK_S_OK);
	ck_assert_mem_eq(drv.ram + DATA, want, len);
	/* The last sector of the disk, one byte pieces of a single sector. */
	pattern(drv.ram + DATA, 512, 9);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, NSECT - 1, 512, 17, true), VIRTIO_BLK_S_OK);
	ck_assert_int_eq(pread(fd, got, 512, DISK - 512), 512);
	ck_assert_mem_eq(got, drv.ram + DATA, 512);
	ck_assert_uint_eq(blk.stats.written_bytes, len + 512);
	free(want);
	free(got);
}
END_TEST

/* Header, data and status all in one segment each way still works: the
 * status is the last writable byte wherever it lies. */
START_TEST(status_inside_data_segment)
{
	ck_assert_int_eq(pwrite(fd, "ABCD", 4, 512 * 7), 4);
	header(VIRTIO_BLK_T_IN, 7);
	struct fv_seg s[] = { { HDR, 16, false }, { DATA, 513, true } };
	uint32_t used;
	drv.ram[DATA + 512] = 0xee;
	ck_assert_int_eq(submit(s, 2, false, &used), 0xee); /* ST untouched */
	ck_assert_uint_eq(drv.ram[DATA + 512], VIRTIO_BLK_S_OK);
	ck_assert_mem_eq(drv.ram + DATA, "ABCD", 4);
	ck_assert_uint_eq(used, 513);
}
END_TEST

START_TEST(bounds)
{
	/* Past the end, straddling it, and sectors whose byte offset or
	 * sum would wrap. */
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, NSECT, 512, 512, false), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, NSECT - 1, 1024, 512, false), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, NSECT - 1, 1024, 512, false), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, UINT64_MAX, 512, 512, false), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, UINT64_MAX / 512 + 1, 512, 512, false),
			 VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 1ull << 55, 512, 512, false), VIRTIO_BLK_S_IOERR);
	/* Not whole sectors. */
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 0, 511, 511, false), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, 0, 513, 100, false), VIRTIO_BLK_S_IOERR);
	/* Zero-length at the very end is fine. */
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, NSECT, 0, 512, false), VIRTIO_BLK_S_OK);
	ck_assert(file_is(0, 4096, 0));
	ck_assert(!needs_reset());
	ck_assert_uint_eq(blk.stats.ioerr, 8);
}
END_TEST

/* Data descriptors on the wrong side, headers too short. */
START_TEST(layout_errors)
{
	memset(drv.ram + DATA, 0x5a, 1024);
	/* OUT whose data is device-writable: refused, file untouched. */
	header(VIRTIO_BLK_T_OUT, 0);
	struct fv_seg a[] = { { HDR, 16, false }, { DATA, 512, true }, { ST, 1, true } };
	ck_assert_int_eq(submit(a, 3, false, NULL), VIRTIO_BLK_S_IOERR);
	/* IN with readable data after the header. */
	header(VIRTIO_BLK_T_IN, 0);
	struct fv_seg b[] = { { HDR, 16, false }, { DATA, 512, false }, { ST, 1, true } };
	ck_assert_int_eq(submit(b, 3, false, NULL), VIRTIO_BLK_S_IOERR);
	ck_assert_uint_eq(drv.ram[DATA], 0x5a);
	/* A 15-byte header, and no header at all. */
	header(VIRTIO_BLK_T_IN, 0);
	struct fv_seg c[] = { { HDR, 15, false }, { DATA, 512, true }, { ST, 1, true } };
	ck_assert_int_eq(submit(c, 3, false, NULL), VIRTIO_BLK_S_IOERR);
	struct fv_seg d[] = { { DATA, 512, true }, { ST, 1, true } };
	ck_assert_int_eq(submit(d, 2, true, NULL), VIRTIO_BLK_S_IOERR);
	/* FLUSH with data either side. */
	header(VIRTIO_BLK_T_FLUSH, 0);
	ck_assert_int_eq(submit(a, 3, false, NULL), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(submit(b, 3, false, NULL), VIRTIO_BLK_S_IOERR);
	ck_assert(file_is(0, 1024, 0));
	ck_assert(!needs_reset());
}
END_TEST

/* A chain with no writable byte cannot be answered: the device stops. */
START_TEST(no_status_stops)
{
	header(VIRTIO_BLK_T_OUT, 0);
	struct fv_seg s[] = { { HDR, 16, false }, { DATA, 512, false } };
	ck_assert_int_eq(submit(s, 2, false, NULL), -1);
	ck_assert(needs_reset());
	ck_assert_uint_eq(blk.stats.bad_chains, 1);
	ck_assert(file_is(0, 512, 0));
}
END_TEST

/* Chains too long, or outside RAM, stop the device (virtqueue_pop's checks). */
START_TEST(hostile_chains_stop)
{
	static struct fv_seg many[VIRTQUEUE_MAX_SEGS + 2];
	header(VIRTIO_BLK_T_IN, 0);
	many[0] = (struct fv_seg){ HDR, 16, false };
	for (unsigned i = 1; i <= VIRTQUEUE_MAX_SEGS; i++)
		many[i] = (struct fv_seg){ DATA + 512 * i, 512, true };
	many[VIRTQUEUE_MAX_SEGS + 1] = (struct fv_seg){ ST, 1, true };
	ck_assert_int_eq(submit(many, VIRTQUEUE_MAX_SEGS + 2, true, NULL), -1);
	ck_assert(needs_reset());

	ck_assert_int_eq(fv_driver_up(&drv, all_features, 1, QSIZE), 0);
	struct fv_seg out[] = { { HDR, 16, false }, { RAM - 256, 512, true }, { ST, 1, true } };
	ck_assert_int_eq(submit(out, 3, false, NULL), -1);
	ck_assert(needs_reset());

	/* After a reset the device serves again. */
	ck_assert_int_eq(fv_driver_up(&drv, all_features, 1, QSIZE), 0);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, 0, 512, 512, false), VIRTIO_BLK_S_OK);
	ck_assert_uint_eq(blk.stats.bad_chains, 2);
}
END_TEST

/* Overlapping guest buffers: two writable data segments on the same RAM
 * get the later sector; data overlapping the header is the guest's
 * business.  Neither harms the host. */
START_TEST(overlapping_buffers)
{
	uint8_t a[512], b[512];
	memset(a, 'a', 512);
	memset(b, 'b', 512);
	ck_assert_int_eq(pwrite(fd, a, 512, 0), 512);
	ck_assert_int_eq(pwrite(fd, b, 512, 512), 512);
	header(VIRTIO_BLK_T_IN, 0);
	struct fv_seg s[] = { { HDR, 16, false }, { DATA, 512, true }, { DATA, 512, true },
			      { ST, 1, true } };
	ck_assert_int_eq(submit(s, 4, false, NULL), VIRTIO_BLK_S_OK);
	ck_assert_mem_eq(drv.ram + DATA, b, 512);
	/* Data read over its own header and status byte. */
	header(VIRTIO_BLK_T_IN, 0);
	struct fv_seg o[] = { { HDR, 16, false }, { HDR, 512, true }, { ST, 1, true } };
	ck_assert_int_eq(submit(o, 3, false, NULL), VIRTIO_BLK_S_OK);
	ck_assert_mem_eq(drv.ram + HDR, a, 512);
	ck_assert(!needs_reset());
}
END_TEST

START_TEST(flush_and_get_id)
{
	header(VIRTIO_BLK_T_FLUSH, 0);
	struct fv_seg f[] = { { HDR, 16, false }, { ST, 1, true } };
	ck_assert_int_eq(submit(f, 2, false, NULL), VIRTIO_BLK_S_OK);

	header(VIRTIO_BLK_T_GET_ID, 0);
	memset(drv.ram + DATA, 0xee, 64);
	struct fv_seg g[] = { { HDR, 16, false }, { DATA, 7, true }, { DATA + 7, 13, true },
			      { ST, 1, true } };
	ck_assert_int_eq(submit(g, 4, false, NULL), VIRTIO_BLK_S_OK);
	ck_assert_mem_eq(drv.ram + DATA, "kbox-disk-0001\0\0\0\0\0\0", 20);
	ck_assert_uint_eq(drv.ram[DATA + 20], 0xee);
	/* Too small for the 20 bytes. */
	struct fv_seg g2[] = { { HDR, 16, false }, { DATA, 19, true }, { ST, 1, true } };
	ck_assert_int_eq(submit(g2, 3, false, NULL), VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(unknown_types_unsupported)
{
	static const uint32_t types[] = { 2, 3, 5, 10, 12, 14, 16, 0x80000000u, UINT32_MAX };
	for (unsigned i = 0; i < sizeof types / sizeof *types; i++) {
		header(types[i], 0);
		struct fv_seg s[] = { { HDR, 16, false }, { DATA, 512, true }, { ST, 1, true } };
		ck_assert_int_eq(submit(s, 3, false, NULL), VIRTIO_BLK_S_UNSUPP);
	}
	ck_assert_uint_eq(blk.stats.unsupp, sizeof types / sizeof *types);
}
END_TEST

/* Discard and write-zeroes leave zeros; their segments are checked
 * before anything is done. */
static void dwz_checks(void)
{
	memset(drv.ram + DATA, 0x77, 64 * 1024);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 0, 64 * 1024, 64 * 1024, false), VIRTIO_BLK_S_OK);
	const uint64_t d[][3] = { { 8, 8, 0 }, { 32, 1, 0 } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, d, 2), VIRTIO_BLK_S_OK);
	ck_assert(file_is(0, 8 * 512, 0x77));
	ck_assert(file_is(8 * 512, 8 * 512, 0));
	ck_assert(file_is(16 * 512, 16 * 512, 0x77));
	ck_assert(file_is(32 * 512, 512, 0));
	const uint64_t z[][3] = { { 40, 4, 0 }, { 50, 2, VIRTIO_BLK_DWZ_F_UNMAP } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_WRITE_ZEROES, z, 2), VIRTIO_BLK_S_OK);
	ck_assert(file_is(39 * 512, 512, 0x77));
	ck_assert(file_is(40 * 512, 4 * 512, 0));
	ck_assert(file_is(44 * 512, 6 * 512, 0x77));
	ck_assert(file_is(50 * 512, 2 * 512, 0));
	ck_assert(file_is(52 * 512, 512, 0x77));
	/* The guest reads the zeros back too. */
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, 40, 512, 512, false), VIRTIO_BLK_S_OK);
	for (unsigned i = 0; i < 512; i++)
		ck_assert_uint_eq(drv.ram[DATA + i], 0);

	/* Flags: unmap on a discard, unknown bits on either. */
	const uint64_t u[][3] = { { 0, 1, VIRTIO_BLK_DWZ_F_UNMAP } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, u, 1), VIRTIO_BLK_S_UNSUPP);
	const uint64_t x[][3] = { { 0, 1, 2 } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, x, 1), VIRTIO_BLK_S_UNSUPP);
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_WRITE_ZEROES, x, 1), VIRTIO_BLK_S_UNSUPP);
	/* A good segment then one past the end: nothing done. */
	const uint64_t p[][3] = { { 0, 1, 0 }, { NSECT - 1, 2, 0 } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_WRITE_ZEROES, p, 2), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, p, 2), VIRTIO_BLK_S_IOERR);
	ck_assert(file_is(0, 512, 0x77));
	const uint64_t w[][3] = { { UINT64_MAX - 1, 4, 0 } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_WRITE_ZEROES, w, 1), VIRTIO_BLK_S_IOERR);
	const uint64_t big[][3] = { { 0, VIRTIO_BLK_MAX_DWZ_SECTORS + 1, 0 } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, big, 1), VIRTIO_BLK_S_IOERR);
	/* Too many segments, and none. */
	uint64_t many[VIRTIO_BLK_MAX_DWZ_SEG + 1][3];
	for (unsigned i = 0; i <= VIRTIO_BLK_MAX_DWZ_SEG; i++) {
		many[i][0] = i;
		many[i][1] = 1;
		many[i][2] = 0;
	}
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, many, VIRTIO_BLK_MAX_DWZ_SEG + 1),
			 VIRTIO_BLK_S_IOERR);
	ck_assert(file_is(0, 512, 0x77));
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, many, VIRTIO_BLK_MAX_DWZ_SEG), VIRTIO_BLK_S_OK);
	ck_assert(file_is(0, VIRTIO_BLK_MAX_DWZ_SEG * 512, 0));
	header(VIRTIO_BLK_T_DISCARD, 0);
	struct fv_seg none[] = { { HDR, 16, false }, { ST, 1, true } };
	ck_assert_int_eq(submit(none, 2, false, NULL), VIRTIO_BLK_S_IOERR);
	/* A segment cut short (not a multiple of 16 bytes). */
	struct fv_seg cut[] = { { HDR, 16, false }, { HDR + 16, 15, false }, { ST, 1, true } };
	ck_assert_int_eq(submit(cut, 3, false, NULL), VIRTIO_BLK_S_IOERR);
	ck_assert(!needs_reset());
}

START_TEST(discard_write_zeroes)
{
	struct stat st;
	dwz_checks();
	/* Punched, not written: the whole 64 KiB was allocated before. */
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_lt(st.st_blocks * 512, 64 * 1024);
}
END_TEST

START_TEST(discard_write_zeroes_fallback)
{
	open_disk(false, true, all_features);
	dwz_checks();
}
END_TEST

START_TEST(dwz_needs_features)
{
	open_disk(false, false, 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_BLK_F_FLUSH);
	const uint64_t d[][3] = { { 0, 1, 0 } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, d, 1), VIRTIO_BLK_S_UNSUPP);
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_WRITE_ZEROES, d, 1), VIRTIO_BLK_S_UNSUPP);
}
END_TEST

START_TEST(read_only_refuses)
{
	memset(drv.ram + DATA, 0x33, 4096);
	ck_assert_int_eq(pwrite(fd, drv.ram + DATA, 4096, 0), 4096);
	blk_file_close(&be);
	struct blk_file_opts o = { .read_only = true };
	ck_assert_int_eq(blk_file_open(path, &o, &be), 0);
	ck_assert_int_eq(virtio_blk_init(&blk, &be, NULL), 0);
	ck_assert_int_eq(virtio_mmio_init(&t, &blk.dev, &drv.gm, NULL), 0);
	fv_wr(&drv, FV_R_DEV_FEATURES_SEL, 0);
	uint32_t f = fv_rd(&drv, 0x010);
	ck_assert(f & 1u << VIRTIO_BLK_F_RO);
	ck_assert(!(f & 1u << VIRTIO_BLK_F_DISCARD));
	ck_assert(!(f & 1u << VIRTIO_BLK_F_WRITE_ZEROES));
	/* Features the device does not offer are refused... */
	ck_assert_int_eq(fv_driver_up(&drv, all_features, 1, QSIZE), -EIO);
	/* ...and even a driver that ignores RO cannot write. */
	ck_assert_int_eq(fv_driver_up(&drv, 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_BLK_F_FLUSH,
				      1, QSIZE), 0);
	memset(drv.ram + DATA, 0x44, 4096);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 0, 4096, 4096, false), VIRTIO_BLK_S_IOERR);
	const uint64_t d[][3] = { { 0, 8, 0 } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, d, 1), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_WRITE_ZEROES, d, 1), VIRTIO_BLK_S_IOERR);
	ck_assert(file_is(0, 4096, 0x33));
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, 0, 4096, 1000, false), VIRTIO_BLK_S_OK);
	for (unsigned i = 0; i < 4096; i++)
		ck_assert_uint_eq(drv.ram[DATA + i], 0x33);
	header(VIRTIO_BLK_T_FLUSH, 0);
	struct fv_seg fl[] = { { HDR, 16, false }, { ST, 1, true } };
	ck_assert_int_eq(submit(fl, 2, false, NULL), VIRTIO_BLK_S_OK);
}
END_TEST

/* The device refuses by itself, before the backend (whose fd might
 * well be writable) is asked. */
START_TEST(read_only_device_check)
{
	struct blk_backend sb = be;
	sb.ops = &spy_ops;
	sb.read_only = true;
	device_up(&sb, 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_BLK_F_RO);
	memset(drv.ram + DATA, 0x44, 512);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 0, 512, 512, false), VIRTIO_BLK_S_IOERR);
	const uint64_t d[][3] = { { 0, 1, 0 } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, d, 1), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_WRITE_ZEROES, d, 1), VIRTIO_BLK_S_IOERR);
	ck_assert_uint_eq(spy.writes, 0);
	ck_assert(file_is(0, 512, 0));
}
END_TEST

/* Without FLUSH negotiated every write is synced before it completes. */
START_TEST(write_through_without_flush)
{
	struct blk_backend sb = be;
	sb.ops = &spy_ops;
	device_up(&sb, 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_BLK_F_DISCARD);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 0, 512, 512, false), VIRTIO_BLK_S_OK);
	ck_assert_uint_eq(spy.writes, 1);
	ck_assert_uint_eq(spy.flushes, 1);
	const uint64_t d[][3] = { { 0, 1, 0 } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_DISCARD, d, 1), VIRTIO_BLK_S_OK);
	ck_assert_uint_eq(spy.flushes, 2);
	/* With FLUSH: writes are not synced until asked. */
	device_up(&sb, all_features);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 0, 512, 512, false), VIRTIO_BLK_S_OK);
	ck_assert_uint_eq(spy.flushes, 2);
}
END_TEST

START_TEST(backend_errors)
{
	struct blk_backend sb = be;
	sb.ops = &spy_ops;
	device_up(&sb, all_features);
	spy.fail = -EIO;
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 0, 512, 512, false), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, 0, 512, 512, false), VIRTIO_BLK_S_IOERR);
	header(VIRTIO_BLK_T_FLUSH, 0);
	struct fv_seg fl[] = { { HDR, 16, false }, { ST, 1, true } };
	ck_assert_int_eq(submit(fl, 2, false, NULL), VIRTIO_BLK_S_IOERR);
	spy.fail = -ENOSPC;
	const uint64_t d[][3] = { { 0, 1, 0 } };
	ck_assert_int_eq(dwz(VIRTIO_BLK_T_WRITE_ZEROES, d, 1), VIRTIO_BLK_S_IOERR);
	spy.fail = 0;
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, 0, 512, 512, false), VIRTIO_BLK_S_OK);
	ck_assert(!needs_reset());
}
END_TEST

/* Whether the disk file's filesystem takes O_DIRECT at all. */
static bool fs_has_direct(void)
{
	int d = open(path, O_RDWR | O_DIRECT);
	if (d < 0)
		return false;
	close(d);
	return true;
}

/* Guest RAM at a page boundary, as kbox's is: requests aligned to 4 KiB
 * go around the host's page cache where the filesystem allows O_DIRECT,
 * the others through it, and every view agrees with the file. */
START_TEST(direct_io)
{
	const uint32_t len = 64 * 1024;
	uint8_t *want = malloc(len), *got = malloc(len), odd[512];
	blk_file_close(&be);
	fv_free(&drv);
	memset(&drv, 0, sizeof drv);
	drv.ram = aligned_alloc(4096, RAM);
	ck_assert_ptr_nonnull(drv.ram);
	memset(drv.ram, 0, RAM);
	drv.size = RAM;
	ck_assert_int_eq(guest_mem_add_region(&drv.gm, 0, RAM, drv.ram), 0);
	open_disk(false, false, all_features);
	bool direct = fs_has_direct();
	ck_assert(blk_file_direct(&be) == direct);

	/* Aligned: 4 KiB pieces at sector 8 (4 KiB). */
	pattern(want, len, 5);
	memcpy(drv.ram + DATA, want, len);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 8, len, 4096, false), VIRTIO_BLK_S_OK);
	ck_assert_int_eq(pread(fd, got, len, 4096), (ssize_t)len);
	ck_assert_mem_eq(got, want, len);
	/* One sector inside that range, unaligned, through the page cache;
	 * an aligned read of the whole range afterwards sees it. */
	pattern(odd, sizeof odd, 11);
	memcpy(drv.ram + DATA, odd, sizeof odd);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_OUT, 9, 512, 512, false), VIRTIO_BLK_S_OK);
	memcpy(want + 512, odd, sizeof odd);
	memset(drv.ram + DATA, 0, len);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, 8, len, 8192, true), VIRTIO_BLK_S_OK);
	ck_assert_mem_eq(drv.ram + DATA, want, len);
	/* Buffers off a page boundary: the page cache, the same bytes. */
	memset(drv.ram + DATA, 0, len);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, 8, len, 3584, false), VIRTIO_BLK_S_OK);
	ck_assert_mem_eq(drv.ram + DATA, want, len);
	/* Neither kind of request turned direct I/O off. */
	ck_assert(blk_file_direct(&be) == direct);
	/* The last page of the disk, and past the end of a shrunk file. */
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, NSECT - 8, 4096, 4096, false), VIRTIO_BLK_S_OK);
	ck_assert_int_eq(ftruncate(fd, DISK / 2), 0);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, NSECT - 8, 4096, 4096, false), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(ftruncate(fd, DISK), 0);

	/* Asked for, the page cache only. */
	struct blk_file_opts o = { .buffered = true };
	blk_file_close(&be);
	ck_assert_int_eq(blk_file_open(path, &o, &be), 0);
	ck_assert(!blk_file_direct(&be));
	device_up(&be, all_features);
	memset(drv.ram + DATA, 0, len);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, 8, len, 4096, false), VIRTIO_BLK_S_OK);
	ck_assert_mem_eq(drv.ram + DATA, want, len);
	free(want);
	free(got);
}
END_TEST

/* A file shrunk behind the device: reads past its new end fail rather
 * than return stale guest memory as data. */
START_TEST(shrunk_file_read_fails)
{
	ck_assert_int_eq(ftruncate(fd, DISK / 2), 0);
	memset(drv.ram + DATA, 0xab, 512);
	ck_assert_int_eq(rw(VIRTIO_BLK_T_IN, NSECT - 1, 512, 512, false), VIRTIO_BLK_S_IOERR);
	ck_assert_int_eq(ftruncate(fd, DISK), 0);
}
END_TEST

START_TEST(init_rejects)
{
	struct virtio_blk b;
	struct blk_backend nb = { 0 };
	struct virtio_blk_opts o = { .serial = "123456789012345678901" };
	ck_assert_int_eq(virtio_blk_init(&b, &be, &o), -EINVAL);
	o.serial = "12345678901234567890";
	ck_assert_int_eq(virtio_blk_init(&b, &be, &o), 0);
	ck_assert_mem_eq(b.serial, "12345678901234567890", 20);
	ck_assert_int_eq(virtio_blk_init(&b, &nb, NULL), -EINVAL);
	ck_assert_int_eq(virtio_blk_init(&b, NULL, NULL), -EINVAL);
	static const uint32_t bad[] = { 256, 513, 1000, 8192 };
	for (unsigned i = 0; i < 4; i++) {
		struct virtio_blk_opts ob = { .blk_size = bad[i] };
		ck_assert_int_eq(virtio_blk_init(&b, &be, &ob), -EINVAL);
	}
	struct virtio_blk_opts ok = { .blk_size = 4096 };
	ck_assert_int_eq(virtio_blk_init(&b, &be, &ok), 0);
	ck_assert_uint_eq(b.capacity, NSECT);

	struct blk_backend x;
	struct blk_file_opts ro = { .read_only = true };
	ck_assert_int_eq(blk_file_open("/tmp", &ro, &x), -EINVAL);
	ck_assert_int_eq(blk_file_open("/tmp", NULL, &x), -EISDIR);
	ck_assert_int_eq(blk_file_open("/nonexistent/kbox-disk", NULL, &x), -ENOENT);
	blk_file_close(&x);
}
END_TEST

Suite *virtio_blk_suite(void)
{
	return unit_suite_fixture("virtio_blk", "device", setup, teardown, 0,
				  config_space, write_read_integrity,
				  status_inside_data_segment, bounds,
				  layout_errors, no_status_stops,
				  hostile_chains_stop, overlapping_buffers,
				  flush_and_get_id, unknown_types_unsupported,
				  discard_write_zeroes,
				  discard_write_zeroes_fallback,
				  dwz_needs_features, read_only_refuses,
				  read_only_device_check,
				  write_through_without_flush, backend_errors,
				  shrunk_file_read_fails, direct_io, init_rejects);
}
