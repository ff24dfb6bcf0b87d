/* The malicious-guest fuzzer (issue 9, docs/security.md): the ring-3 test
 * guest (guest.S, MODE_SCRIPT) becomes a hostile virtio driver for every
 * device kbox has -- vsock on a Unix socket directory, virtio-fs on a
 * temporary share, virtio-net on kbox's network stack with a deny-all
 * policy, virtio-blk on a temporary disk file as `kbox run --disk` serves
 * a volume -- wired to the real virtio-mmio bus, ioeventfds and irqfds.
 *
 * The harness writes a script of ops (register reads and writes of every
 * size, stores to rings and descriptors, queue notifies, bounded polls)
 * into guest RAM; ring 3 executes it and ends with SOP_NEXT, whose MMIO
 * exit makes the harness write the next one.  Payload bytes are written
 * straight into fresh guest pages beforehand; everything the device acts
 * on -- descriptors, ring indexes, notifies -- comes from guest stores and
 * real exits.  Every script is drawn from one seeded PRNG and never from
 * device state, so a seed replays the same guest, batch for batch (the
 * device thread's timing differs from run to run).
 *
 * After SECONDS, a last well-formed request per device must be answered;
 * then the host must have the same fds as before and a bounded RSS.  A
 * watchdog fails the run when neither the vCPU makes progress nor the
 * bus lock can be taken for HANG_S seconds.  Built with ASan and UBSan by
 * fuzz.sh, so memory errors in device code end the run too.
 *
 * With two vCPUs, each runs its own stream of scripts against all four
 * devices at once; vCPU 0 alone runs the final check, once the other has
 * stopped.
 *
 * Usage: guest-fuzz GUEST.elf SECONDS SEED TMPDIR [VCPUS]
 * Prints "ok"/"FAIL" lines and "N passed, M failed"; exit 1 on failure. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/landlock.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devices/blk_file.h"
#include "devices/virtio_blk.h"
#include "devices/virtio_net.h"
#include "devices/virtio_vsock.h"
#include "devices/vsock_unix.h"
#include "netstack/audit.h"
#include "netstack/policy.h"
#include "netstack/stack.h"
#include "tests/guest/tg.h"
#include "vmm/core/boot.h"
#include "vmm/core/mptable.h"
#include "vmm/core/virtio_bus.h"
#include "vmm/core/vm.h"
#include "vmm/sandbox/mounts.h"

enum sop { SOP_END, SOP_MW, SOP_MR, SOP_ST, SOP_WAIT, SOP_MWAIT, SOP_REP, SOP_IRQS,
	   SOP_NEXT, SOP_MWX, SOP_MRX };

#define MAX_CPUS     2u
#define MEM_MIB      128u
#define RAM_END      ((uint64_t)MEM_MIB << 20)
#define SCRIPT_ADDR  0x400000ull
#define SCRIPT_MAX   4096u
#define SCRIPT_STRIDE 0x40000ull /* vCPU n's script at SCRIPT_ADDR + n * this */
/* Everything a device may read or write lies in the arena (one span per
 * vCPU and device): the guest's code, page tables and scripts stay
 * intact, whatever the device does. */
#define ARENA        0x1000000ull
#define DEV_SPAN     0x800000ull
#define RING_SPAN    0x10000ull /* per queue: desc +0, avail +0x4000, used +0x8000 */
#define IND_OFF      0x40000ull /* indirect tables, 16 of 4 KiB */
#define CHECK_OFF    0x80000ull /* buffers of the final check */
#define BUF_OFF      0x100000ull
#define BUF_PAGES    ((DEV_SPAN - BUF_OFF) / 0x1000)
#define PAGE         0x1000u
#define GUEST_CID    3u
#define PORT_ECHO    1234u
#define HANG_S       5.0
#define RSS_SLACK_KB (48u * 1024)
#define TX_POLLS     20000u /* a bounded wait for a tx chain to come back */
#define FINAL_POLLS  200000000ull

#define VRING_F_NEXT     1u
#define VRING_F_WRITE    2u
#define VRING_F_INDIRECT 4u

/* virtio-mmio registers (virtio 1.2, 4.2.2) */
enum {
	R_MAGIC = 0x000, R_DEVID = 0x008, R_DFEAT = 0x010, R_DFSEL = 0x014, R_GFEAT = 0x020,
	R_GFSEL = 0x024, R_QSEL = 0x030, R_QMAX = 0x034, R_QNUM = 0x038, R_QREADY = 0x044,
	R_NOTIFY = 0x050, R_ISR = 0x060, R_IACK = 0x064, R_STATUS = 0x070, R_QDESC = 0x080,
	R_QAVAIL = 0x090, R_QUSED = 0x0a0, R_GEN = 0x0fc, R_CONFIG = 0x100,
};

/* ---- the script ring 3 runs ---- */

struct script {
	uint64_t op[SCRIPT_MAX][4];
	unsigned n, nrep;
};

enum { D_VSOCK, D_FS, D_NET, D_BLK, ND };

#define DISK_BYTES (4u << 20) /* the fuzzed disk: a sparse temporary file */
#define DISK_SERIAL "fuzzdisk"

struct fdev {
	unsigned nq;
	unsigned rxq_mask;  /* queues that take device-writable buffers only */
	uint64_t offered;   /* features the device offers */
	unsigned cfg_len;
	uint64_t arena;
	uint64_t feat;      /* what the driver last claimed */
	uint16_t qsize[4], avail[4], next_desc[4];
	unsigned next_page, next_ind;
	uint64_t unique;
};

/* One vCPU's driver: its own PRNG stream, script, view of the devices
 * and arena, so each vCPU's actions follow from the seed alone however
 * the vCPUs interleave.  Generated on that vCPU's thread. */
struct gctx {
	unsigned cpu;
	uint64_t rng;
	struct script scr;
	struct fdev dev[ND];
	unsigned batches;
	unsigned hostile[16];
	int ended; /* handed SOP_END */
};

static struct gctx gctx[MAX_CPUS];
static _Thread_local struct gctx *C;

/* ---- PRNG: splitmix64, the only source of the guest's choices ---- */

static uint64_t rnd(void)
{
	uint64_t z = (C->rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static unsigned rn(unsigned n) { return n ? (unsigned)(rnd() % n) : 0; }
static int pct(unsigned p) { return rn(100) < p; }

/* Small numbers and edges are what parsers get wrong. */
static uint64_t interesting(void)
{
	static const uint64_t v[] = { 0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255,
				      256, 1023, 1024, 4095, 4096, 65535, 65536, 0x7fffffff,
				      0x80000000, 0xffffffff, 0x100000000ull,
				      0x7fffffffffffffffull, 0xffffffffffffffffull };
	uint64_t x = v[rn(sizeof v / sizeof v[0])];
	return pct(20) ? x - 1 : pct(20) ? x + 1 : x;
}

static unsigned sop(uint64_t op, uint64_t a, uint64_t b, uint64_t c, unsigned reps)
{
	unsigned first = C->scr.nrep;
	if (C->scr.n + 2 >= SCRIPT_MAX) /* room for SOP_NEXT */
		return ~0u;
	C->scr.op[C->scr.n][0] = op;
	C->scr.op[C->scr.n][1] = a;
	C->scr.op[C->scr.n][2] = b;
	C->scr.op[C->scr.n][3] = c;
	C->scr.n++;
	C->scr.nrep += reps;
	return first;
}

static int script_full(void) { return C->scr.n + 64 >= SCRIPT_MAX; }

static void st(uint64_t gpa, uint64_t v, unsigned len) { sop(SOP_ST, gpa, v, len, 0); }

/* ---- the devices as the fuzzing driver sees them ---- */

static struct vm *g_vm;

static uint64_t win(unsigned d, unsigned reg) { return (uint64_t)d * VIRTIO_MMIO_WINDOW + reg; }
static void mw(unsigned d, unsigned reg, uint32_t v) { sop(SOP_MW, win(d, reg), v, 0, 0); }
static unsigned mr(unsigned d, unsigned reg) { return sop(SOP_MR, win(d, reg), 0, 0, 1); }

static uint64_t q_desc(unsigned d, unsigned q) { return C->dev[d].arena + q * RING_SPAN; }
static uint64_t q_avail(unsigned d, unsigned q) { return q_desc(d, q) + 0x4000; }
static uint64_t q_used(unsigned d, unsigned q) { return q_desc(d, q) + 0x8000; }

/* The queue size the driver indexes its rings with (a hostile size is
 * still bounded by the ring space reserved for it). */
static unsigned qs(unsigned d, unsigned q)
{
	unsigned s = C->dev[d].qsize[q];
	return s == 0 ? 1 : s > 1024 ? 1024 : s;
}

/* An address a device must refuse: outside RAM, in MMIO, or running off
 * the end of RAM. */
static uint64_t bad_addr(void)
{
	static const uint64_t v[] = { RAM_END, RAM_END - 8, RAM_END - 1, 0xd0000000ull,
				      0xfee00000ull, 0xcf000000ull, 1ull << 40, 1ull << 63,
				      0xfffffffffffff000ull, 0xffffffffffffffffull,
				      0x100000000ull };
	return v[rn(sizeof v / sizeof v[0])];
}

/* The ring addresses of queue q, or a hostile variant. */
static void queue_addrs(unsigned d, unsigned q, int hostile, uint64_t *a)
{
	a[0] = q_desc(d, q);
	a[1] = q_avail(d, q);
	a[2] = q_used(d, q);
	if (!hostile)
		return;
	unsigned which = rn(3);
	switch (rn(5)) {
	case 0: a[which] = bad_addr(); break;
	case 1: a[which] += 1 + rn(15); break;                      /* misaligned */
	case 2: a[which] = a[(which + 1) % 3]; break;               /* rings overlap */
	case 3: a[which] = q_desc(d, (q + 1) % C->dev[d].nq); break;   /* another queue's */
	default: a[which] = RAM_END - 16 - rn(64); break;           /* runs off RAM */
	}
}

static void set_addr(unsigned d, unsigned reg, uint64_t a)
{
	mw(d, reg, (uint32_t)a);
	mw(d, reg + 4, (uint32_t)(a >> 32));
}

static void post_rx(unsigned d, unsigned q, unsigned n);
static void fuse_init(unsigned d);

/* Reset and bring the device up; hostile: lie somewhere on the way. */
static void handshake(unsigned d, int hostile)
{
	struct fdev *f = &C->dev[d];
	mw(d, R_STATUS, 0);
	mr(d, R_MAGIC);
	mr(d, R_DEVID);
	mw(d, R_STATUS, VIRTIO_STATUS_ACKNOWLEDGE);
	mw(d, R_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	mw(d, R_DFSEL, 0);
	mr(d, R_DFEAT);
	mw(d, R_DFSEL, 1);
	mr(d, R_DFEAT);
	uint64_t feat = (f->offered & rnd()) | (1ull << VIRTIO_F_VERSION_1);
	if (hostile && pct(30))
		feat = pct(50) ? rnd() : feat & ~(1ull << VIRTIO_F_VERSION_1);
	f->feat = feat;
	mw(d, R_GFSEL, 0);
	mw(d, R_GFEAT, (uint32_t)feat);
	mw(d, R_GFSEL, 1);
	mw(d, R_GFEAT, (uint32_t)(feat >> 32));
	if (hostile && pct(20))
		mw(d, R_GFSEL, 2 + rn(8)); /* a selector past the end */
	mw(d, R_STATUS, 0xb);
	mr(d, R_STATUS);
	for (unsigned q = 0; q < f->nq; q++) {
		int hq = hostile && pct(25);
		unsigned size = 16u << rn(5); /* 16 .. 256 */
		if (hq && pct(50))
			size = (unsigned)(pct(50) ? interesting() : rn(2048)) & 0xffff;
		f->qsize[q] = (uint16_t)size;
		f->avail[q] = f->next_desc[q] = 0;
		uint64_t a[3];
		queue_addrs(d, q, hq && pct(60), a);
		st(q_avail(d, q), 0, 4);
		st(q_used(d, q), 0, 4);
		mw(d, R_QSEL, q);
		mr(d, R_QMAX);
		mw(d, R_QNUM, size);
		set_addr(d, R_QDESC, a[0]);
		set_addr(d, R_QAVAIL, a[1]);
		set_addr(d, R_QUSED, a[2]);
		mw(d, R_QREADY, 1);
		if (hq && pct(30)) /* re-configure a live queue */
			mw(d, R_QNUM, size / 2);
	}
	if (!(hostile && pct(10)))
		mw(d, R_STATUS, hostile && pct(10) ? (uint32_t)rnd() : 0xf);
	mr(d, R_STATUS);
	for (unsigned q = 0; q < f->nq; q++)
		if (f->rxq_mask & (1u << q))
			post_rx(d, q, qs(d, q) / 2 < 32 ? qs(d, q) / 2 : 32);
	if (d == D_FS && pct(90))
		fuse_init(d);
}

/* ---- descriptor chains ---- */

struct seg {
	uint64_t addr;
	uint32_t len;
	uint16_t flags;
};

#define MAX_SEGS 80

/* n fresh pages in the device's buffer area (they wrap around, far
 * behind anything still in flight). */
static uint64_t pages(unsigned d, unsigned n)
{
	struct fdev *f = &C->dev[d];
	if (f->next_page + n > BUF_PAGES)
		f->next_page = 0;
	uint64_t a = f->arena + BUF_OFF + (uint64_t)f->next_page * PAGE;
	f->next_page += n;
	return a;
}

/* Copy a readable payload into fresh pages, split into 1-3 segments. */
static unsigned payload_segs(unsigned d, const uint8_t *p, size_t len, struct seg *s)
{
	unsigned np = (unsigned)((len + PAGE - 1) / PAGE);
	uint64_t a = pages(d, np ? np : 1);
	guest_mem_write(&g_vm->mem, a, p, len);
	unsigned n = 0;
	size_t at = 0;
	unsigned parts = 1 + rn(3);
	for (unsigned i = 0; i < parts && at < len; i++) {
		size_t l = i + 1 == parts ? len - at : 1 + rn((unsigned)(len - at));
		s[n++] = (struct seg){ a + at, (uint32_t)l, 0 };
		at += l;
	}
	return n;
}

static unsigned write_segs(unsigned d, uint32_t len, struct seg *s, unsigned n)
{
	unsigned np = (len + PAGE - 1) / PAGE;
	uint64_t a = pages(d, np ? np : 1);
	unsigned parts = 1 + rn(2);
	uint32_t at = 0;
	for (unsigned i = 0; i < parts && at < len; i++) {
		uint32_t l = i + 1 == parts ? len - at : 1 + rn(len - at);
		s[n++] = (struct seg){ a + at, l, VRING_F_WRITE };
		at += l;
	}
	return n;
}

static void st_desc(unsigned d, unsigned q, unsigned i, uint64_t addr, uint32_t len,
		    uint16_t flags, uint16_t next)
{
	uint64_t at = q_desc(d, q) + 16ull * (i % 1024);
	st(at, addr, 8);
	st(at + 8, len | (uint64_t)flags << 32 | (uint64_t)next << 48, 8);
}

/* Make a chain of segments available on queue q and kick it; hostile:
 * break it in one of the ways a device must survive. */
static void post_chain(unsigned d, unsigned q, struct seg *s, unsigned n, int hostile)
{
	struct fdev *f = &C->dev[d];
	unsigned size = qs(d, q);
	int indirect = 0;
	if (n == 0)
		return;
	if (hostile) {
		unsigned k = rn(12);
		C->hostile[k]++;
		switch (k) {
		case 0: s[rn(n)].addr = bad_addr(); break;
		case 1: s[rn(n)].len = (uint32_t)interesting() | (pct(50) ? 0x80000000u : 0); break;
		case 2: for (unsigned i = 0; i < n; i++) s[i].flags ^= VRING_F_WRITE; break;
		case 3: { /* a buffer on top of this queue's own rings */
			unsigned i = rn(n);
			s[i].addr = q_desc(d, q) + (pct(50) ? 0x8000 : rn(0xa000));
			s[i].len = 16 + rn(4096);
			s[i].flags = pct(50) ? VRING_F_WRITE : 0;
			break;
		}
		case 4: s[rn(n)].len = 0; break;
		case 5: /* longer than any device accepts */
			while (n < MAX_SEGS && n < 70)
				s[n++] = (struct seg){ pages(d, 1), 1 + rn(64), 0 };
			break;
		case 6: indirect = 2; break; /* a broken indirect table */
		case 7: indirect = 1; break; /* indirect, negotiated or not */
		case 8: { /* writable before readable */
			struct seg t = s[0];
			s[0] = s[n - 1];
			s[n - 1] = t;
			s[0].flags = VRING_F_WRITE;
			break;
		}
		default: break; /* 9-11: broken links, below */
		}
		if (k == 9 || k == 10 || k == 11)
			hostile = (int)k;
		else
			hostile = 1;
	} else if ((f->feat & (1ull << VIRTIO_F_INDIRECT_DESC)) && pct(20)) {
		indirect = 1;
	}
	unsigned head = f->next_desc[q] % size;
	if (indirect) {
		uint64_t t = f->arena + IND_OFF + (uint64_t)(f->next_ind++ % 16) * PAGE;
		uint8_t tab[PAGE];
		unsigned m = n > 256 ? 256 : n;
		memset(tab, 0, sizeof tab);
		for (unsigned i = 0; i < m; i++) {
			uint16_t fl = s[i].flags | (i + 1 < m ? VRING_F_NEXT : 0);
			uint16_t nx = (uint16_t)(i + 1);
			if (indirect == 2 && i == m - 1) {
				switch (rn(4)) {
				case 0: fl |= VRING_F_NEXT; nx = 0; break;            /* loops */
				case 1: fl |= VRING_F_INDIRECT; break;                /* nested */
				case 2: fl |= VRING_F_NEXT; nx = (uint16_t)rnd(); break;
				default: break;
				}
			}
			memcpy(tab + 16 * i, &s[i].addr, 8);
			memcpy(tab + 16 * i + 8, &s[i].len, 4);
			memcpy(tab + 16 * i + 12, &fl, 2);
			memcpy(tab + 16 * i + 14, &nx, 2);
		}
		guest_mem_write(&g_vm->mem, t, tab, 16u * m);
		uint32_t tl = 16u * m;
		if (indirect == 2 && pct(50))
			tl = pct(50) ? tl + 1 + rn(15) : (uint32_t)interesting();
		uint64_t ta = indirect == 2 && pct(20) ? bad_addr() : t;
		st_desc(d, q, head, ta, tl, VRING_F_INDIRECT | (pct(5) ? VRING_F_NEXT : 0),
			(uint16_t)((head + 1) % size));
		f->next_desc[q] = (uint16_t)(head + 1);
	} else {
		for (unsigned i = 0; i < n; i++) {
			unsigned idx = (head + i) % size;
			uint16_t nx = (uint16_t)((head + i + 1) % size);
			uint16_t fl = s[i].flags | (i + 1 < n ? VRING_F_NEXT : 0);
			if (i + 1 == n && hostile == 9) { /* loops back to the head */
				fl |= VRING_F_NEXT;
				nx = (uint16_t)head;
			} else if (i + 1 == n && hostile == 10) { /* next past the table */
				fl |= VRING_F_NEXT;
				nx = (uint16_t)(size + rn(64));
			}
			st_desc(d, q, idx, s[i].addr, s[i].len, fl, nx);
		}
		f->next_desc[q] = (uint16_t)(head + n);
	}
	uint16_t entry = (uint16_t)head;
	if (hostile == 11)
		entry = (uint16_t)(pct(50) ? size + rn(64) : rnd());
	st(q_avail(d, q) + 4 + 2ull * (f->avail[q] % size), entry, 2);
	f->avail[q]++;
	uint16_t idx = f->avail[q];
	if (hostile && pct(15))
		idx = (uint16_t)(pct(50) ? idx + size + rn(1000) : rnd()); /* avail idx jumps */
	st(q_avail(d, q) + 2, idx, 2);
	if (pct(3))
		mw(d, R_NOTIFY, (uint32_t)rnd()); /* matches no ioeventfd: the VMM path */
	else
		mw(d, R_NOTIFY, pct(95) ? q : rn(8));
	if (!(f->rxq_mask & (1u << q)) && pct(70))
		sop(SOP_WAIT, q_used(d, q) + 2, f->avail[q], TX_POLLS, 1);
}

static void post_rx(unsigned d, unsigned q, unsigned n)
{
	for (unsigned i = 0; i < n && !script_full(); i++) {
		struct seg s[MAX_SEGS];
		unsigned k = write_segs(d, 256u + rn(3 * PAGE), s, 0);
		post_chain(d, q, s, k, pct(5));
	}
}

/* ---- payloads ---- */

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Valid-looking bytes with a few fields or bytes broken. */
static void mutate(uint8_t *p, size_t len)
{
	if (!len || !pct(35))
		return;
	unsigned k = 1 + rn(6);
	for (unsigned i = 0; i < k; i++) {
		size_t at = rn((unsigned)len);
		switch (rn(4)) {
		case 0: p[at] ^= (uint8_t)(1u << rn(8)); break;
		case 1: p[at] = (uint8_t)rnd(); break;
		case 2:
			if (at + 4 <= len)
				put32(p + at, (uint32_t)interesting());
			break;
		default:
			if (at + 8 <= len)
				put64(p + at, interesting());
			break;
		}
	}
}

/* vsock: a packet to the echo listener or elsewhere, any op. */
static size_t vsock_pkt(uint8_t *p, size_t cap)
{
	static const uint32_t ports[] = { PORT_ECHO, PORT_ECHO + 1, 0, 0xffffffffu, 22 };
	uint32_t len = pct(40) ? rn(2048) : 0;
	uint16_t op = (uint16_t)(pct(90) ? 1 + rn(7) : rnd());
	if (op == 5 && !len) /* RW carries data */
		len = 1 + rn(1024);
	if (VIRTIO_VSOCK_HDR_SIZE + len > cap)
		len = (uint32_t)(cap - VIRTIO_VSOCK_HDR_SIZE);
	memset(p, 0, VIRTIO_VSOCK_HDR_SIZE);
	put64(p, pct(90) ? GUEST_CID : interesting());
	put64(p + 8, pct(90) ? VIRTIO_VSOCK_HOST_CID : interesting());
	put32(p + 16, 5000 + rn(4));
	put32(p + 20, pct(80) ? ports[0] : ports[rn(5)]);
	put32(p + 24, pct(90) ? len : (uint32_t)interesting());
	put16(p + 28, (uint16_t)(pct(95) ? VIRTIO_VSOCK_TYPE_STREAM : rnd()));
	put16(p + 30, op);
	put32(p + 32, op == 4 ? 1 + rn(3) : 0);
	put32(p + 36, pct(80) ? VIRTIO_VSOCK_BUF_ALLOC : (uint32_t)interesting());
	put32(p + 40, (uint32_t)(pct(80) ? rn(65536) : interesting()));
	for (uint32_t i = 0; i < len; i++)
		p[VIRTIO_VSOCK_HDR_SIZE + i] = (uint8_t)rnd();
	mutate(p, VIRTIO_VSOCK_HDR_SIZE + len);
	return VIRTIO_VSOCK_HDR_SIZE + len;
}

static const char *const names[] = { "a", "b", "sub", "file.txt", "link", "..", ".", "",
				     "x/y", "new", "dir2", "\xff\xfe", "out" };

static size_t put_name(uint8_t *p, size_t cap)
{
	if (pct(3) && cap > 400) {
		size_t n = 255 + rn(100);
		memset(p, 'A', n);
		p[n] = 0;
		return n + 1;
	}
	const char *s = names[rn(sizeof names / sizeof names[0])];
	size_t n = strlen(s);
	memcpy(p, s, n + 1);
	return n + 1;
}

static uint64_t nodeid(void)
{
	return pct(50) ? 1 : pct(80) ? 1 + rn(64) : interesting();
}

static uint64_t fh(void) { return pct(80) ? rn(32) : interesting(); }

/* virtio-fs: one FUSE request (header and arguments); *reply gets the
 * size of the writable part to offer. */
static size_t fuse_req(unsigned d, uint8_t *p, size_t cap, uint32_t *reply, int hiprio,
		       int init)
{
	static const uint32_t ops[] = { 1, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,
					18, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
					34, 35, 36, 38, 39, 40, 43, 44, 45, 46, 47, 50, 51, 52 };
	/* What a real guest does most: look up, create, open, read, write,
	 * list, release. */
	static const uint32_t common[] = { 1, 1, 1, 3, 9, 14, 15, 16, 18, 27, 28, 29, 35, 44 };
	uint32_t op = hiprio ? (pct(50) ? 2 : pct(50) ? 42 : 36)
		      : pct(50)  ? common[rn(sizeof common / sizeof common[0])]
		      : pct(95)  ? ops[rn(sizeof ops / sizeof ops[0])]
				 : (uint32_t)rnd();
	if (init)
		op = 26;
	uint8_t *a = p + 40;
	size_t n = 0; /* argument bytes */
	memset(p, 0, cap < 512 ? cap : 512);
	*reply = 16 + rn(pct(80) ? 512 : 8192);
	switch (op) {
	case 26: /* INIT */
		put32(a, 7);
		put32(a + 4, 31 + rn(10));
		put32(a + 8, 128 * 1024);
		put32(a + 12, (uint32_t)rnd());
		n = 64;
		break;
	case 1: case 10: case 11: case 24: /* LOOKUP, UNLINK, RMDIR, REMOVEXATTR */
		n = put_name(a, cap - 40);
		break;
	case 6: /* SYMLINK */
		n = put_name(a, 200);
		n += put_name(a + n, 200);
		break;
	case 8: case 35: /* MKNOD, CREATE */
		put32(a, pct(80) ? 0100644 : (uint32_t)rnd());
		put32(a + 4, (uint32_t)rnd());
		put32(a + 8, 022);
		n = 16 + put_name(a + 16, 300);
		break;
	case 9: /* MKDIR */
		put32(a, 040755);
		put32(a + 4, 022);
		n = 8 + put_name(a + 8, 300);
		break;
	case 12: case 45: /* RENAME, RENAME2 */
		put64(a, nodeid());
		if (op == 45)
			put32(a + 8, rn(8));
		n = op == 45 ? 16 : 8;
		n += put_name(a + n, 300);
		n += put_name(a + n, 300);
		break;
	case 13: /* LINK */
		put64(a, nodeid());
		n = 8 + put_name(a + 8, 300);
		break;
	case 14: case 27: /* OPEN, OPENDIR */
		put32(a, pct(50) ? 0 : pct(50) ? 2 : (uint32_t)rnd());
		n = 8;
		break;
	case 15: case 28: case 44: /* READ, READDIR, READDIRPLUS */
		put64(a, fh());
		put64(a + 8, pct(70) ? rn(8192) : interesting());
		put32(a + 16, pct(80) ? rn(16384) : (uint32_t)interesting());
		n = 40;
		*reply = 16 + rn(16384);
		break;
	case 16: { /* WRITE */
		uint32_t dl = rn(pct(90) ? 4096 : 16384);
		put64(a, fh());
		put64(a + 8, pct(80) ? rn(65536) : rnd() & 0xffffffffffull);
		put32(a + 16, pct(90) ? dl : (uint32_t)interesting());
		n = 40;
		for (uint32_t i = 0; i < dl && 40 + n < cap; i++)
			a[n++] = (uint8_t)i;
		break;
	}
	case 4: /* SETATTR: valid mask, then values */
		put32(a, (uint32_t)rnd() & 0xffff);
		put64(a + 8, fh());
		put64(a + 16, rn(1u << 20)); /* size: small, RLIMIT_FSIZE backs it */
		for (unsigned i = 24; i < 88; i++)
			a[i] = (uint8_t)rnd();
		n = 88;
		break;
	case 18: case 29: case 25: case 20: case 30: /* RELEASE*, FLUSH, FSYNC* */
		put64(a, fh());
		n = 24;
		break;
	case 21: /* SETXATTR */
		put32(a, 8);
		put32(a + 4, rn(4));
		n = 16;
		memcpy(a + n, "user.k\0", 7);
		n += 7;
		memcpy(a + n, "value123", 8);
		n += 8;
		break;
	case 22: case 23: /* GETXATTR, LISTXATTR */
		put32(a, rn(2) ? 0 : rn(4096));
		n = 8;
		if (op == 22)
			n += put_name(a + n, 300);
		break;
	case 34: /* ACCESS */
		put32(a, rn(8));
		n = 8;
		break;
	case 31: case 32: case 33: /* locks */
		put64(a, fh());
		put64(a + 8, rnd());
		put64(a + 16, rn(100));
		put64(a + 24, rn(200));
		put32(a + 32, rn(3));
		n = 48;
		break;
	case 43: /* FALLOCATE: kept small, RLIMIT_FSIZE bounds the rest */
		put64(a, fh());
		put64(a + 8, rn(1u << 20));
		put64(a + 16, rn(1u << 20));
		put32(a + 24, rn(4) ? 0 : (uint32_t)rnd());
		n = 32;
		break;
	case 46: /* LSEEK */
		put64(a, fh());
		put64(a + 8, interesting());
		put32(a + 16, rn(6));
		n = 24;
		break;
	case 47: /* COPY_FILE_RANGE */
		put64(a, fh());
		put64(a + 8, rn(4096));
		put64(a + 16, nodeid());
		put64(a + 24, fh());
		put64(a + 32, rn(4096));
		put64(a + 40, rn(65536));
		n = 56;
		break;
	case 2: /* FORGET */
		put64(a, pct(80) ? 1 + rn(4) : interesting());
		n = 8;
		break;
	case 42: { /* BATCH_FORGET */
		uint32_t c = pct(80) ? rn(8) : (uint32_t)interesting();
		put32(a, c);
		n = 8;
		for (uint32_t i = 0; i < c && i < 8; i++, n += 16) {
			put64(a + n, nodeid());
			put64(a + n + 8, 1 + rn(3));
		}
		break;
	}
	default:
		n = rn(64);
		for (size_t i = 0; i < n; i++)
			a[i] = (uint8_t)rnd();
		break;
	}
	if (40 + n > cap)
		n = cap - 40;
	put32(p, (uint32_t)(40 + n));
	put32(p + 4, op);
	put64(p + 8, ++C->dev[d].unique);
	put64(p + 16, op == 26 ? 0 : nodeid());
	put32(p + 24, pct(90) ? 1000 : (uint32_t)rnd());
	put32(p + 28, pct(90) ? 1000 : (uint32_t)rnd());
	put32(p + 32, 1);
	if (!init || pct(20))
		mutate(p, 40 + n);
	return 40 + n;
}

static uint16_t csum_add(const uint8_t *p, size_t len, uint32_t sum)
{
	for (size_t i = 0; i + 1 < len; i += 2)
		sum += (uint32_t)p[i] << 8 | p[i + 1];
	if (len & 1)
		sum += (uint32_t)p[len - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static void be16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }

/* The guest's ARP who-has for tip, from byte 12 of the Ethernet frame at e
 * (its addresses are the caller's) to byte 42; the target MAC is left as
 * it was (zero in a cleared buffer). */
static void arp_who_has(uint8_t *e, const uint8_t tip[4])
{
	static const uint8_t g_mac[6] = VIRTIO_NET_GUEST_MAC, gip[4] = STACK_GUEST_IP;
	be16(e + 12, 0x0806);
	be16(e + 14, 1);
	be16(e + 16, 0x0800);
	e[18] = 6;
	e[19] = 4;
	be16(e + 20, 1);
	memcpy(e + 22, g_mac, 6);
	memcpy(e + 28, gip, 4);
	memcpy(e + 38, tip, 4);
}

/* virtio-net: a virtio-net header and an Ethernet frame for the stack. */
static size_t net_frame(uint8_t *p, size_t cap)
{
	static const uint8_t gw_mac[6] = STACK_GATEWAY_MAC, g_mac[6] = VIRTIO_NET_GUEST_MAC;
	static const uint8_t guest_ip[4] = STACK_GUEST_IP;
	memset(p, 0, VIRTIO_NET_HDR_SIZE + 128);
	if (pct(10)) { /* header flags and GSO fields of every kind */
		p[0] = (uint8_t)rnd();
		p[1] = (uint8_t)rnd();
		put16(p + 2, (uint16_t)rnd());
		put16(p + 4, (uint16_t)rnd());
	}
	uint8_t *e = p + VIRTIO_NET_HDR_SIZE;
	memcpy(e, pct(70) ? gw_mac : (const uint8_t[6]){ 0xff, 0xff, 0xff, 0xff, 0xff, 0xff }, 6);
	memcpy(e + 6, g_mac, 6);
	uint8_t *ip = e + 14;
	size_t len = 14;
	unsigned kind = rn(6);
	if (kind == 0) { /* ARP who-has 10.0.2.x */
		const uint8_t tip[4] = { 10, 0, 2, (uint8_t)(pct(50) ? 2 : rnd()) };
		arp_who_has(e, tip);
		len += 28;
	} else if (kind <= 4) { /* IPv4: TCP SYN, UDP DNS, ICMP echo */
		be16(e + 12, 0x0800);
		uint8_t proto = kind == 1 || kind == 4 ? 6 : kind == 2 ? 17 : 1;
		uint8_t *l4 = ip + 20;
		size_t l4len = 0;
		memcpy(ip + 12, guest_ip, 4);
		/* Destinations all fall to the deny-all policy. */
		if (pct(50)) {
			ip[16] = 10; ip[17] = 0; ip[18] = 2; ip[19] = 2;
		} else {
			put32(ip + 16, (uint32_t)rnd());
		}
		if (proto == 6) {
			be16(l4, (uint16_t)(40000 + rn(16)));
			be16(l4 + 2, (uint16_t)(pct(50) ? 80 : rnd()));
			put32(l4 + 4, (uint32_t)rnd());
			put32(l4 + 8, kind == 4 ? (uint32_t)rnd() : 0);
			l4[12] = 5 << 4;
			l4[13] = kind == 1 ? 0x02 : (uint8_t)rnd();
			be16(l4 + 14, 65535);
			l4len = 20 + (kind == 4 ? rn(64) : 0);
		} else if (proto == 17) {
			static const char q[] = "\7example\3com";
			be16(l4, (uint16_t)(30000 + rn(16)));
			be16(l4 + 2, pct(80) ? STACK_DNS_PORT : (uint16_t)rnd());
			uint8_t *dns = l4 + 8;
			be16(dns, (uint16_t)rnd());
			be16(dns + 2, 0x0100);
			be16(dns + 4, 1);
			memcpy(dns + 12, q, sizeof q);
			be16(dns + 12 + sizeof q, pct(50) ? 1 : 28);
			be16(dns + 14 + sizeof q, 1);
			l4len = 8 + 16 + sizeof q;
			be16(l4 + 4, (uint16_t)l4len);
		} else {
			l4[0] = 8;
			be16(l4 + 4, (uint16_t)rnd());
			l4len = 8 + rn(56);
		}
		ip[0] = 0x45;
		be16(ip + 2, (uint16_t)(20 + l4len));
		be16(ip + 4, (uint16_t)rnd());
		if (pct(5))
			be16(ip + 6, (uint16_t)(0x2000 | rn(100))); /* a fragment */
		ip[8] = 64;
		ip[9] = proto;
		be16(ip + 10, csum_add(ip, 20, 0));
		/* Pseudo header for TCP and UDP, ICMP over itself. */
		uint32_t ps = 0;
		if (proto != 1) {
			ps = (uint32_t)(ip[12] << 8 | ip[13]) + (uint32_t)(ip[14] << 8 | ip[15]) +
			     (uint32_t)(ip[16] << 8 | ip[17]) + (uint32_t)(ip[18] << 8 | ip[19]) +
			     proto + (uint32_t)l4len;
		}
		uint8_t *ck = proto == 6 ? l4 + 16 : proto == 17 ? l4 + 6 : l4 + 2;
		be16(ck, csum_add(l4, l4len, ps));
		len += 20 + l4len;
	} else { /* anything: IPv6, random ethertypes, runts */
		be16(e + 12, pct(50) ? 0x86dd : (uint16_t)rnd());
		size_t n = rn(200);
		for (size_t i = 0; i < n; i++)
			ip[i] = (uint8_t)rnd();
		len += n;
	}
	if (pct(3)) /* oversized */
		len = VIRTIO_NET_MAX_FRAME + 1 + rn(100);
	if (VIRTIO_NET_HDR_SIZE + len > cap)
		len = cap - VIRTIO_NET_HDR_SIZE;
	mutate(e, len);
	return VIRTIO_NET_HDR_SIZE + len;
}

/* A virtio-blk request: the readable header (and data or discard
 * segments) into buf, the writable length (data and status) in *reply.
 * Mostly well-formed around the disk's end, with every kind of lie. */
static size_t blk_req(uint8_t *buf, size_t cap, uint32_t *reply)
{
	static const uint32_t types[] = { VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_FLUSH,
					  VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_DISCARD,
					  VIRTIO_BLK_T_WRITE_ZEROES };
	uint64_t sectors = DISK_BYTES / VIRTIO_BLK_SECTOR;
	uint32_t type = pct(92) ? types[rn(6)] : (uint32_t)interesting();
	uint64_t sector = pct(60) ? rn((unsigned)sectors) : pct(50) ? sectors - rn(20) : interesting();
	uint32_t data = pct(85) ? VIRTIO_BLK_SECTOR * (1 + rn(16)) : rn(9000);
	memset(buf, 0, VIRTIO_BLK_HDR_SIZE);
	put32(buf, type);
	put32(buf + 4, pct(95) ? 0 : (uint32_t)rnd());
	put64(buf + 8, sector);
	size_t len = VIRTIO_BLK_HDR_SIZE;
	*reply = 1;
	if (type == VIRTIO_BLK_T_OUT) {
		if (data + 8 > cap - len)
			data = (uint32_t)(cap - len - 8);
		for (uint32_t i = 0; i < data; i += 8)
			put64(buf + len + i, rnd()); /* data is a multiple of 8 or the rest is left */
		len += data;
	} else if (type == VIRTIO_BLK_T_IN) {
		*reply = data + 1;
	} else if (type == VIRTIO_BLK_T_GET_ID) {
		*reply = pct(70) ? VIRTIO_BLK_ID_BYTES + 1 : rn(40);
	} else if (type == VIRTIO_BLK_T_DISCARD || type == VIRTIO_BLK_T_WRITE_ZEROES) {
		unsigned n = pct(90) ? 1 + rn(3) : rn(24);
		for (unsigned i = 0; i < n && len + VIRTIO_BLK_DWZ_SEG_SIZE <= cap; i++) {
			uint8_t *g = buf + len;
			put64(g, pct(70) ? rn((unsigned)sectors) : interesting());
			put32(g + 8, pct(70) ? 1 + rn(64) : (uint32_t)interesting());
			put32(g + 12, pct(80) ? rn(2) : (uint32_t)rnd());
			len += VIRTIO_BLK_DWZ_SEG_SIZE;
		}
		if (pct(5))
			len -= rn(VIRTIO_BLK_DWZ_SEG_SIZE); /* a torn segment */
	} else {
		*reply = 1 + rn(600);
	}
	if (pct(3))
		len = 1 + rn(VIRTIO_BLK_HDR_SIZE - 1); /* a short header */
	if (pct(3))
		*reply = 0; /* no status byte: the device must stop */
	return len;
}

/* One request on a device's tx-like queue. */
static void send_one(unsigned d)
{
	static uint8_t buf[20000];
	struct seg s[MAX_SEGS];
	unsigned n = 0, q;
	size_t len;
	uint32_t reply = 0;
	if (d == D_VSOCK) {
		q = 1;
		len = vsock_pkt(buf, sizeof buf);
	} else if (d == D_FS) {
		q = pct(85) ? 1 : 0;
		len = fuse_req(d, buf, sizeof buf, &reply, q == 0, 0);
		if (q == 0)
			reply = 0;
	} else if (d == D_BLK) {
		q = 0;
		len = blk_req(buf, sizeof buf, &reply);
	} else {
		q = 1;
		len = net_frame(buf, sizeof buf);
	}
	if (pct(2))
		q = C->dev[d].rxq_mask & 1 ? 0 : q; /* readable buffers on an rx queue */
	n = payload_segs(d, buf, len, s);
	if (reply)
		n = write_segs(d, reply, s, n);
	/* A broken chain stops a device until its next reset: FUSE requests
	 * get fewer of them so that more reach the server. */
	post_chain(d, q, s, n, pct(d == D_FS ? 7 : 15));
}

/* A reset server answers nothing but FUSE_INIT: a driver sends it first. */
static void fuse_init(unsigned d)
{
	static uint8_t buf[512];
	struct seg s[MAX_SEGS];
	uint32_t reply = 0;
	size_t len = fuse_req(d, buf, sizeof buf, &reply, 0, 1);
	unsigned n = payload_segs(d, buf, len, s);
	n = write_segs(d, 16 + 64 + rn(64), s, n);
	post_chain(d, 1, s, n, 0);
}

/* Random register traffic: any offset, any size, config space included. */
static void poke_regs(unsigned d)
{
	unsigned k = 1 + rn(6);
	for (unsigned i = 0; i < k; i++) {
		unsigned off = pct(40) ? R_CONFIG + rn(C->dev[d].cfg_len + 16) : rn(0x200);
		unsigned sz = 1u << rn(4);
		if (pct(50)) {
			off &= ~3u;
			sz = 4;
		}
		if (pct(50)) {
			sop(SOP_MRX, win(d, off), 0, sz, 1);
		} else {
			/* Writes that would move rings outside the arena, or end
			 * the guest's run, are left to the hostile handshake. */
			if (off >= R_QDESC && off < R_QDESC + 0x28)
				continue;
			sop(SOP_MWX, win(d, off), pct(50) ? interesting() : rnd(), sz, 0);
		}
	}
}

/* Something the driver does mid-flight: resets, re-configuration,
 * interrupt acks, queue selection. */
static void midflight(unsigned d)
{
	struct fdev *f = &C->dev[d];
	switch (rn(7)) {
	case 0: /* reset right after a kick */
		send_one(d);
		mw(d, R_STATUS, 0);
		handshake(d, pct(30));
		break;
	case 1: { /* re-configure a queue while it is notified */
		unsigned q = rn(f->nq);
		send_one(d);
		mw(d, R_QSEL, q);
		mw(d, R_QREADY, 0);
		uint64_t a[3];
		queue_addrs(d, q, pct(50), a);
		set_addr(d, R_QDESC, a[0]);
		mw(d, R_QNUM, 1u << rn(11));
		mw(d, R_QREADY, 1);
		mw(d, R_NOTIFY, q);
		break;
	}
	case 2:
		mr(d, R_ISR);
		mw(d, R_IACK, pct(50) ? 3 : (uint32_t)rnd());
		break;
	case 3: /* a status byte that goes backwards or claims too much */
		mw(d, R_STATUS, (uint32_t)(pct(50) ? rn(256) : rnd()));
		mr(d, R_STATUS);
		break;
	case 4: /* features changed after FEATURES_OK */
		mw(d, R_GFSEL, rn(2));
		mw(d, R_GFEAT, (uint32_t)rnd());
		mw(d, R_STATUS, 0xf);
		break;
	case 5:
		mr(d, R_GEN);
		for (unsigned i = 0; i < 4; i++)
			sop(SOP_MRX, win(d, R_CONFIG + rn(C->dev[d].cfg_len + 8)), 0, 1u << rn(4), 1);
		break;
	default: /* notify every queue, some not ready */
		for (unsigned q = 0; q < VIRTIO_BUS_MAX_QUEUES; q++)
			mw(d, R_NOTIFY, q);
		break;
	}
}

/* The next script: a few hundred ops over all devices. */
static void gen_batch(void)
{
	C->scr.n = C->scr.nrep = 0;
	for (unsigned d = 0; d < ND; d++)
		if (C->batches == 0 || pct(35))
			handshake(d, C->batches != 0 && pct(40));
	unsigned acts = 20 + rn(40);
	for (unsigned i = 0; i < acts && !script_full(); i++) {
		unsigned d = rn(ND);
		unsigned k = rn(100);
		if (k < 55)
			send_one(d);
		else if (k < 65)
			post_rx(d, rn(C->dev[d].nq), 1 + rn(4));
		else if (k < 80)
			poke_regs(d);
		else
			midflight(d);
	}
	if (pct(30))
		sop(SOP_IRQS, 0, 0, 0, 1);
	sop(SOP_NEXT, 0, C->batches, 0, 0);
	C->batches++;
}

/* ---- the final, well-formed requests ---- */

struct final_plan {
	uint64_t vs_rx, fs_reply, net_rx, blk_id, blk_read;
	uint64_t fs_unique;
};

static struct final_plan fin;

/* A clean handshake with power-of-two queues and no lies. */
static void clean_handshake(unsigned d)
{
	struct fdev *f = &C->dev[d];
	mw(d, R_STATUS, 0);
	mw(d, R_STATUS, 3);
	mw(d, R_GFSEL, 0);
	mw(d, R_GFEAT, 0);
	mw(d, R_GFSEL, 1);
	mw(d, R_GFEAT, 1);
	f->feat = 1ull << VIRTIO_F_VERSION_1;
	mw(d, R_STATUS, 0xb);
	for (unsigned q = 0; q < f->nq; q++) {
		st(q_avail(d, q), 0, 4);
		st(q_used(d, q), 0, 4);
		f->qsize[q] = 16;
		f->avail[q] = f->next_desc[q] = 0;
		mw(d, R_QSEL, q);
		mw(d, R_QNUM, 16);
		set_addr(d, R_QDESC, q_desc(d, q));
		set_addr(d, R_QAVAIL, q_avail(d, q));
		set_addr(d, R_QUSED, q_used(d, q));
		mw(d, R_QREADY, 1);
	}
	mw(d, R_STATUS, 0xf);
}

static void clean_post(unsigned d, unsigned q, struct seg *s, unsigned n)
{
	struct fdev *f = &C->dev[d];
	unsigned head = f->next_desc[q] % 16;
	for (unsigned i = 0; i < n; i++)
		st_desc(d, q, (head + i) % 16, s[i].addr, s[i].len,
			s[i].flags | (i + 1 < n ? VRING_F_NEXT : 0), (uint16_t)((head + i + 1) % 16));
	f->next_desc[q] = (uint16_t)(head + n);
	st(q_avail(d, q) + 4 + 2ull * (f->avail[q] % 16), head, 2);
	f->avail[q]++;
	st(q_avail(d, q) + 2, f->avail[q], 2);
	mw(d, R_NOTIFY, q);
}

static void gen_final(void)
{
	uint8_t b[256];
	struct seg s[MAX_SEGS];
	C->scr.n = C->scr.nrep = 0;
	for (unsigned d = 0; d < ND; d++)
		clean_handshake(d);

	/* vsock: a REQUEST to a port nobody listens on must bring an RST. */
	uint64_t a = C->dev[D_VSOCK].arena + CHECK_OFF;
	fin.vs_rx = a;
	guest_mem_write(&g_vm->mem, a, (uint8_t[PAGE]){ 0 }, PAGE);
	s[0] = (struct seg){ a, PAGE, VRING_F_WRITE };
	clean_post(D_VSOCK, 0, s, 1);
	memset(b, 0, sizeof b);
	put64(b, GUEST_CID);
	put64(b + 8, VIRTIO_VSOCK_HOST_CID);
	put32(b + 16, 7000);
	put32(b + 20, PORT_ECHO + 7);
	put16(b + 28, VIRTIO_VSOCK_TYPE_STREAM);
	put16(b + 30, 1);
	put32(b + 36, VIRTIO_VSOCK_BUF_ALLOC);
	guest_mem_write(&g_vm->mem, a + PAGE, b, VIRTIO_VSOCK_HDR_SIZE);
	s[0] = (struct seg){ a + PAGE, VIRTIO_VSOCK_HDR_SIZE, 0 };
	clean_post(D_VSOCK, 1, s, 1);
	sop(SOP_WAIT, q_used(D_VSOCK, 0) + 2, 1, FINAL_POLLS, 1);

	/* virtio-fs: FUSE_INIT must get its reply. */
	a = C->dev[D_FS].arena + CHECK_OFF;
	memset(b, 0, sizeof b);
	put32(b, 40 + 64);
	put32(b + 4, 26);
	fin.fs_unique = 0xfeedf00dull;
	put64(b + 8, fin.fs_unique);
	put32(b + 40, 7);
	put32(b + 44, 31);
	put32(b + 48, 65536);
	guest_mem_write(&g_vm->mem, a, b, 104);
	fin.fs_reply = a + PAGE;
	guest_mem_write(&g_vm->mem, fin.fs_reply, (uint8_t[PAGE]){ 0 }, PAGE);
	s[0] = (struct seg){ a, 104, 0 };
	s[1] = (struct seg){ fin.fs_reply, PAGE, VRING_F_WRITE };
	clean_post(D_FS, 1, s, 2);
	sop(SOP_WAIT, q_used(D_FS, 1) + 2, 1, FINAL_POLLS, 1);

	/* virtio-net: an ARP request for the gateway must be answered; frames
	 * queued before the reset may come first, so there are 8 buffers. */
	a = C->dev[D_NET].arena + CHECK_OFF;
	fin.net_rx = a;
	for (unsigned i = 0; i < 8; i++) {
		guest_mem_write(&g_vm->mem, a + i * 2048ull, (uint8_t[2048]){ 0 }, 2048);
		s[0] = (struct seg){ a + i * 2048ull, 2048, VRING_F_WRITE };
		clean_post(D_NET, 0, s, 1);
	}
	static const uint8_t g_mac[6] = VIRTIO_NET_GUEST_MAC, gwip[4] = STACK_GATEWAY_IP;
	memset(b, 0, sizeof b);
	uint8_t *e = b + VIRTIO_NET_HDR_SIZE;
	memset(e, 0xff, 6);
	memcpy(e + 6, g_mac, 6);
	arp_who_has(e, gwip);
	guest_mem_write(&g_vm->mem, a + 8 * 2048ull, b, VIRTIO_NET_HDR_SIZE + 42);
	s[0] = (struct seg){ a + 8 * 2048ull, VIRTIO_NET_HDR_SIZE + 42, 0 };
	clean_post(D_NET, 1, s, 1);
	sop(SOP_WAIT, q_used(D_NET, 0) + 2, 1, FINAL_POLLS, 1);
	/* virtio-blk: GET_ID answers the serial; a sector written reads back. */
	a = C->dev[D_BLK].arena + CHECK_OFF;
	memset(b, 0, sizeof b);
	put32(b, VIRTIO_BLK_T_GET_ID);
	put32(b + 16, VIRTIO_BLK_T_OUT);
	put64(b + 24, 5);
	put32(b + 32, VIRTIO_BLK_T_IN);
	put64(b + 40, 5);
	guest_mem_write(&g_vm->mem, a, b, 48);
	uint8_t sec[VIRTIO_BLK_SECTOR];
	for (unsigned i = 0; i < sizeof sec; i++)
		sec[i] = (uint8_t)(i * 7 + 3);
	guest_mem_write(&g_vm->mem, a + PAGE, sec, sizeof sec);
	fin.blk_id = a + 2 * PAGE;
	fin.blk_read = a + 3 * PAGE;
	guest_mem_write(&g_vm->mem, fin.blk_id, (uint8_t[PAGE]){ 0xee }, PAGE);
	guest_mem_write(&g_vm->mem, fin.blk_read, (uint8_t[PAGE]){ 0xee }, PAGE);
	s[0] = (struct seg){ a, VIRTIO_BLK_HDR_SIZE, 0 };
	s[1] = (struct seg){ fin.blk_id, VIRTIO_BLK_ID_BYTES + 1, VRING_F_WRITE };
	clean_post(D_BLK, 0, s, 2);
	s[0] = (struct seg){ a + 16, VIRTIO_BLK_HDR_SIZE, 0 };
	s[1] = (struct seg){ a + PAGE, VIRTIO_BLK_SECTOR, 0 };
	s[2] = (struct seg){ fin.blk_id + 64, 1, VRING_F_WRITE };
	clean_post(D_BLK, 0, s, 3);
	s[0] = (struct seg){ a + 32, VIRTIO_BLK_HDR_SIZE, 0 };
	s[1] = (struct seg){ fin.blk_read, VIRTIO_BLK_SECTOR + 1, VRING_F_WRITE };
	clean_post(D_BLK, 0, s, 2);
	sop(SOP_WAIT, q_used(D_BLK, 0) + 2, 3, FINAL_POLLS, 1);

	/* A little time for more frames, then report. */
	sop(SOP_WAIT, q_used(D_NET, 0) + 2, 0xffff, 2000000, 1);
	sop(SOP_NEXT, 0, ~0ull, 0, 0);
}

/* ---- the host end of the vsock port: echoes what it gets ---- */

#define ECHO_CONNS 16

struct echo {
	int listen_fd, stop_fd;
	int conn[ECHO_CONNS];
	pthread_t thread;
	int started;
	uint64_t accepted, bytes;
};

static void *echo_thread(void *arg)
{
	struct echo *e = arg;
	for (;;) {
		struct pollfd p[2 + ECHO_CONNS];
		unsigned n = 0;
		p[n++] = (struct pollfd){ .fd = e->stop_fd, .events = POLLIN };
		p[n++] = (struct pollfd){ .fd = e->listen_fd, .events = POLLIN };
		for (unsigned i = 0; i < ECHO_CONNS; i++)
			p[n++] = (struct pollfd){ .fd = e->conn[i], .events = POLLIN };
		if (poll(p, n, 1000) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;
		if (p[1].revents) {
			int c = accept4(e->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (c >= 0) {
				unsigned slot = (unsigned)(e->accepted++ % ECHO_CONNS);
				if (e->conn[slot] >= 0)
					close(e->conn[slot]);
				e->conn[slot] = c;
			}
		}
		for (unsigned i = 0; i < ECHO_CONNS; i++) {
			if (e->conn[i] < 0 || !p[2 + i].revents)
				continue;
			uint8_t b[4096];
			ssize_t r = read(e->conn[i], b, sizeof b);
			if (r > 0) {
				e->bytes += (uint64_t)r;
				ssize_t w = write(e->conn[i], b, (size_t)r); /* drops on a full socket */
				(void)w;
			} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				close(e->conn[i]);
				e->conn[i] = -1;
			}
		}
	}
	for (unsigned i = 0; i < ECHO_CONNS; i++)
		if (e->conn[i] >= 0) {
			close(e->conn[i]);
			e->conn[i] = -1;
		}
	return NULL;
}

static void echo_stop(struct echo *e)
{
	if (!e->started)
		return;
	uint64_t one = 1;
	ssize_t w = write(e->stop_fd, &one, sizeof one);
	(void)w;
	pthread_join(e->thread, NULL);
	e->started = 0;
}

/* ---- host-side health ---- */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own fd */
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long pages = -1, rss = -1;
	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
		rss = -1;
	fclose(f);
	return rss < 0 ? -1 : rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The guest's DNS answers must never reach the host's resolver: with a
 * deny-all policy this is never called, and a call fails the run. */
static unsigned resolver_calls;

static int no_resolve(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out,
		      size_t max, size_t *n)
{
	resolver_calls++;
	*n = 0;
	return -EPERM;
}

struct rig {
	struct vm vm;
	struct virtio_bus bus;
	struct virtio_vsock vs;
	struct vsock_unix vu;
	struct mounts mnt;
	struct policy pol;
	struct audit audit;
	struct virtio_net nic;
	struct stack *stack;
	struct echo echo;
	char share[160], sockdir[160], base[80], disk[160];
	struct blk_backend disk_be;
	struct virtio_blk blk;
	/* run state, shared with the watchdog */
	pthread_mutex_t lock;
	double started, last_progress, deadline;
	uint64_t reps; /* register values and polls ring 3 reported */
	unsigned final_phase; /* 0 fuzzing, 1 final script running, 2 done */
	unsigned ncpus;
	int fds_before, fds_after;
	long rss_base, rss_end;
	int final_ok[ND];
	char final_why[ND][160];
	int done;
};

static struct rig R;

static unsigned vs_fds(void *ctx, struct pollfd *p, unsigned max)
{
	return vsock_unix_pollfds(ctx, p, max);
}

static void vs_handle(void *ctx, const struct pollfd *p, unsigned n)
{
	vsock_unix_handle(ctx, p, n);
}

static void to_guest(void *ctx, const uint8_t *frame, size_t len)
{
	virtio_net_rx_enqueue(ctx, frame, len);
}

static void to_stack(void *ctx, const uint8_t *frame, size_t len)
{
	stack_input(R.stack, frame, len);
}

static unsigned net_fds(void *ctx, struct pollfd *p, unsigned max)
{
	if (max < 2)
		return 0;
	p[0] = (struct pollfd){ .fd = virtio_net_wake_fd(&R.nic), .events = POLLIN };
	p[1] = (struct pollfd){ .fd = stack_fd(R.stack), .events = POLLIN };
	return 2;
}

static void net_handle(void *ctx, const struct pollfd *p, unsigned k)
{
	if (k >= 2 && p[1].revents)
		stack_dispatch(R.stack);
	virtio_net_rx_flush(&R.nic);
}

/* ---- the final checks, from guest memory ---- */

static void final_checks(void)
{
	uint8_t b[2048];
	uint16_t used = 0;
	struct virtio_vsock_hdr h = { 0 };
	guest_mem_read(&R.vm.mem, &used, q_used(D_VSOCK, 0) + 2, 2);
	guest_mem_read(&R.vm.mem, b, fin.vs_rx, VIRTIO_VSOCK_HDR_SIZE);
	virtio_vsock_hdr_decode(&h, b);
	R.final_ok[D_VSOCK] = used >= 1 && h.op == 3 && h.dst_port == 7000 &&
			      h.src_port == PORT_ECHO + 7;
	snprintf(R.final_why[D_VSOCK], sizeof R.final_why[0],
		 "rx used idx %u, op %u, ports %u -> %u", used, h.op, h.src_port, h.dst_port);

	uint32_t olen = 0, unique_lo = 0;
	int32_t oerr = 1;
	guest_mem_read(&R.vm.mem, &used, q_used(D_FS, 1) + 2, 2);
	guest_mem_read(&R.vm.mem, b, fin.fs_reply, 16);
	memcpy(&olen, b, 4);
	memcpy(&oerr, b + 4, 4);
	memcpy(&unique_lo, b + 8, 4);
	R.final_ok[D_FS] = used >= 1 && oerr == 0 && olen >= 16 + 24 &&
			   unique_lo == (uint32_t)fin.fs_unique;
	snprintf(R.final_why[D_FS], sizeof R.final_why[0],
		 "used idx %u, reply len %u error %d unique 0x%x", used, olen, oerr, unique_lo);

	guest_mem_read(&R.vm.mem, &used, q_used(D_NET, 0) + 2, 2);
	int arp = 0;
	for (unsigned i = 0; i < 8 && i < used; i++) {
		guest_mem_read(&R.vm.mem, b, fin.net_rx + i * 2048ull, VIRTIO_NET_HDR_SIZE + 42);
		const uint8_t *e = b + VIRTIO_NET_HDR_SIZE;
		arp |= e[12] == 0x08 && e[13] == 0x06 && e[20] == 0 && e[21] == 2 &&
		       e[28] == 10 && e[29] == 0 && e[30] == 2 && e[31] == 2;
	}
	R.final_ok[D_NET] = arp;
	snprintf(R.final_why[D_NET], sizeof R.final_why[0], "%u frame(s) received, %s", used,
		 arp ? "one is the gateway's ARP reply" : "no ARP reply among them");

	uint8_t id[VIRTIO_BLK_ID_BYTES + 1], wst = 0xee, rd[VIRTIO_BLK_SECTOR + 1];
	guest_mem_read(&R.vm.mem, &used, q_used(D_BLK, 0) + 2, 2);
	guest_mem_read(&R.vm.mem, id, fin.blk_id, sizeof id);
	guest_mem_read(&R.vm.mem, &wst, fin.blk_id + 64, 1);
	guest_mem_read(&R.vm.mem, rd, fin.blk_read, sizeof rd);
	int same = 1;
	for (unsigned i = 0; i < VIRTIO_BLK_SECTOR; i++)
		same &= rd[i] == (uint8_t)(i * 7 + 3);
	R.final_ok[D_BLK] = used == 3 && id[VIRTIO_BLK_ID_BYTES] == VIRTIO_BLK_S_OK &&
			    memcmp(id, DISK_SERIAL, sizeof DISK_SERIAL) == 0 &&
			    wst == VIRTIO_BLK_S_OK && rd[VIRTIO_BLK_SECTOR] == VIRTIO_BLK_S_OK && same;
	snprintf(R.final_why[D_BLK], sizeof R.final_why[0],
		 "used idx %u, GET_ID status %u, write status %u, read status %u, %s", used,
		 id[VIRTIO_BLK_ID_BYTES], wst, rd[VIRTIO_BLK_SECTOR],
		 same ? "the sector read back" : "the sector differs");
}

/* ---- the harness's MMIO window: reports and the next script ---- */

static void tg_read(void *ctx, uint64_t off, uint8_t *data, unsigned len)
{
	memset(data, 0, len > 8 ? 8 : len);
}

/* Put the current vCPU's script where its ring 3 reads it. */
static void script_write(void)
{
	if (C->scr.n < SCRIPT_MAX)
		C->scr.op[C->scr.n][0] = SOP_END;
	guest_mem_write(&R.vm.mem, SCRIPT_ADDR + C->cpu * SCRIPT_STRIDE, C->scr.op,
		 sizeof C->scr.op[0] * (C->scr.n + 1));
}

/* This vCPU is done: its script ends, and it waits in `finish` for the
 * others (the last one there ends the VM).  Call with R.lock held. */
static void script_end(void)
{
	C->scr.n = C->scr.nrep = 0;
	C->scr.op[0][0] = SOP_END;
	C->ended = 1;
}

static void tg_write(void *ctx, uint64_t off, const uint8_t *data, unsigned len)
{
	unsigned cpu = (unsigned)(off / 0x1000), reg = (unsigned)(off % 0x1000);
	if (cpu >= R.ncpus)
		return;
	C = &gctx[cpu];
	pthread_mutex_lock(&R.lock);
	R.last_progress = tg_now();
	if (reg == 0x38) {
		R.reps++;
		pthread_mutex_unlock(&R.lock);
		return;
	}
	if (reg != 0x40) {
		pthread_mutex_unlock(&R.lock);
		return;
	}
	unsigned phase = R.final_phase;
	double now = R.last_progress;
	if (phase == 0 && R.rss_base < 0 && now - R.started >= (R.deadline - R.started) / 4)
		R.rss_base = rss_kb();
	int others = 0;
	for (unsigned c = 1; c < R.ncpus; c++)
		others |= !gctx[c].ended;
	if (cpu != 0 && now >= R.deadline)
		script_end();
	else if (cpu == 0 && phase == 0 && now >= R.deadline && !others)
		R.final_phase = 1;
	pthread_mutex_unlock(&R.lock);

	if (C->ended) {
		/* the end, written below */
	} else if (now < R.deadline) {
		gen_batch();
	} else if (phase == 0 && others) {
		/* The final check starts once no other vCPU drives a device. */
		C->scr.n = C->scr.nrep = 0;
		sop(SOP_NEXT, 0, ~1ull, 0, 0);
	} else if (phase == 0) {
		gen_final();
	} else {
		final_checks();
		/* The echo peer's own connections go first: what remains
		 * is what the devices hold. */
		echo_stop(&R.echo);
		R.fds_after = count_fds();
		R.rss_end = rss_kb();
		pthread_mutex_lock(&R.lock);
		R.final_phase = 2;
		script_end();
		pthread_mutex_unlock(&R.lock);
	}
	script_write();
}

/* Scripts handed out so far, all vCPUs (read racily, for reports). */
static unsigned total_batches(void)
{
	unsigned n = 0;
	for (unsigned c = 0; c < R.ncpus; c++)
		n += gctx[c].batches;
	return n;
}

/* ---- watchdog ---- */

static uint64_t seed;

static void *watchdog(void *arg)
{
	for (;;) {
		usleep(100000);
		pthread_mutex_lock(&R.lock);
		int done = R.done;
		double idle = tg_now() - R.last_progress;
		unsigned phase = R.final_phase;
		pthread_mutex_unlock(&R.lock);
		if (done)
			return NULL;
		/* The device thread and every MMIO exit take the bus lock. */
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += (time_t)HANG_S;
		int locked = pthread_mutex_timedlock(&R.bus.lock, &until) == 0;
		if (locked)
			pthread_mutex_unlock(&R.bus.lock);
		/* The final script waits for answers much longer, by design. */
		double limit = phase == 1 ? 30 : HANG_S;
		if (!locked || idle > limit) {
			tg_check(0, "host hang: %s (seed %" PRIu64 ", batch %u, phase %u)",
			      !locked ? "the bus lock was held for 5 s (device thread stuck)"
				      : "no vCPU progress for 5 s", seed, total_batches(), phase);
			printf("%u passed, %u failed\n", tg_passed, tg_failed);
			fflush(stdout);
			_exit(1);
		}
	}
}

/* ---- set-up ---- */

static uint8_t *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	static uint8_t buf[4 << 20];
	size_t n = fread(buf, 1, sizeof buf, f);
	fclose(f);
	*len = n;
	return n ? buf : NULL;
}

/* Files for the fuzzer to find in the share, a link out of it among them. */
static int make_share(const char *root)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof p, "%s/sub", root);
	if (mkdir(p, 0755) < 0)
		return -errno;
	snprintf(p, sizeof p, "%s/file.txt", root);
	FILE *f = fopen(p, "w");
	if (!f)
		return -errno;
	fputs("hello from the host\n", f);
	fclose(f);
	snprintf(p, sizeof p, "%s/link", root);
	if (symlink("/etc/passwd", p) < 0)
		return -errno;
	return 0;
}

/* Keep a device bug from touching host files: writes only in the temp
 * dir, reads anywhere (ASan and /proc need them).  Best effort. */
static const char *confine(const char *tmp)
{
	struct { uint64_t fs, net, scoped; } attr = { (1ull << 13) - 1, 0, 0 };
	int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, 8, 0);
	if (rs < 0)
		return "Landlock unavailable";
	struct landlock_path_beneath_attr pb = { 0 };
	int ok = 1;
	const char *paths[2] = { "/", tmp };
	uint64_t acc[2] = { LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR,
			    (1ull << 13) - 1 - LANDLOCK_ACCESS_FS_EXECUTE };
	for (int i = 0; i < 2 && ok; i++) {
		pb.parent_fd = open(paths[i], O_PATH | O_CLOEXEC);
		pb.allowed_access = acc[i];
		ok = pb.parent_fd >= 0 &&
		     syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) == 0;
		if (pb.parent_fd >= 0)
			close(pb.parent_fd);
	}
	ok = ok && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
	     syscall(SYS_landlock_restrict_self, rs, 0) == 0;
	close(rs);
	return ok ? "writes confined to the temp dir by Landlock" : "Landlock refused";
}

static int setup(const char *guest, const char *tmp, char *err, size_t errlen)
{
	size_t img_len = 0;
	uint8_t *img = read_all(guest, &img_len);
	if (!img) {
		snprintf(err, errlen, "cannot read %s", guest);
		return -1;
	}
	if (vm_create(&R.vm, R.ncpus, MEM_MIB, err, errlen) < 0)
		return -1;
	g_vm = &R.vm;
	struct boot_image k;
	struct boot_setup bs = { .low_ram = R.vm.low_ram, .high_ram = R.vm.high_ram,
				 .cmdline = "kbox-guest-fuzz" };
	if (boot_load_kernel(&R.vm.mem, img, img_len, &k, err, errlen) < 0 ||
	    boot_write_params(&R.vm.mem, &k, &bs, err, errlen) < 0)
		return -1;
	if (mptable_write(&R.vm.mem, R.ncpus) < 0) {
		snprintf(err, errlen, "mptable_write failed");
		return -1;
	}
	struct tg_cfg cfg;
	if (guest_mem_read(&R.vm.mem, &cfg, TG_CFG_ADDR, sizeof cfg) < 0 || cfg.magic != TG_CFG_MAGIC) {
		snprintf(err, errlen, "no configuration block in the guest");
		return -1;
	}
	cfg = (struct tg_cfg){ .magic = TG_CFG_MAGIC, .ncpus = R.ncpus, .mode = MODE_SCRIPT,
			       .rounds = 0, .seed = (uint32_t)seed, .exit_digit = 5,
			       .mmio_base = TG_MMIO, .virtio_base = VIRTIO_BUS_BASE,
			       .virtio_irq = VIRTIO_BUS_FIRST_IRQ, .script = SCRIPT_ADDR };
	guest_mem_write(&R.vm.mem, TG_CFG_ADDR, &cfg, sizeof cfg);
	if (vm_add_mmio(&R.vm, &(struct vm_mmio){ TG_MMIO, 0x1000ull * R.ncpus, tg_read, tg_write,
						  NULL }) < 0) {
		snprintf(err, errlen, "cannot add the harness window");
		return -1;
	}
	/* Every page of RAM touched now, so RSS measures the host, not the
	 * guest's first writes. */
	uint8_t *ram = guest_mem_ptr(&R.vm.mem, ARENA, RAM_END - ARENA);
	if (ram)
		memset(ram, 0, RAM_END - ARENA);

	/* Socket paths must fit in sun_path with the port appended. */
	if (strlen(tmp) > 64) {
		snprintf(err, errlen, "temp dir path too long for Unix sockets: %s", tmp);
		return -1;
	}
	snprintf(R.share, sizeof R.share, "%s/share", tmp);
	snprintf(R.sockdir, sizeof R.sockdir, "%s/vsock", tmp);
	snprintf(R.base, sizeof R.base, "%.70s/v", R.sockdir);
	if (mkdir(R.share, 0755) < 0 || mkdir(R.sockdir, 0700) < 0 || make_share(R.share) < 0) {
		snprintf(err, errlen, "cannot make the share and socket dir in %s: %s", tmp,
			 strerror(errno));
		return -1;
	}
	if (virtio_bus_init(&R.bus, &R.vm) < 0) {
		snprintf(err, errlen, "virtio_bus_init failed");
		return -1;
	}
	char cmdline[2048] = "";
	/* vsock: slot 0, the Unix backend, and a peer that echoes. */
	int rc = virtio_vsock_init(&R.vs, GUEST_CID, NULL, NULL);
	if (rc == 0)
		rc = vsock_unix_init(&R.vu, &R.vs, R.base, false);
	if (rc < 0) {
		snprintf(err, errlen, "vsock: %s", strerror(-rc));
		return -1;
	}
	struct virtio_bus_poller vp = { vs_fds, vs_handle, &R.vu };
	if (virtio_bus_add(&R.bus, &R.vs.dev, &vp, cmdline, sizeof cmdline, err, errlen) < 0)
		return -1;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%.80s_%u", R.base, PORT_ECHO);
	R.echo = (struct echo){ .listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0),
				.stop_fd = eventfd(0, EFD_CLOEXEC) };
	for (unsigned i = 0; i < ECHO_CONNS; i++)
		R.echo.conn[i] = -1;
	if (R.echo.listen_fd < 0 || R.echo.stop_fd < 0 ||
	    bind(R.echo.listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    listen(R.echo.listen_fd, 16) < 0) {
		snprintf(err, errlen, "echo listener %s: %s", sa.sun_path, strerror(errno));
		return -1;
	}
	/* virtio-fs: slot 1, exactly as kbox run -v wires it. */
	struct mount_spec ms = { .host = R.share, .guest = "/w" };
	if (mounts_add(&R.mnt, &ms, err, errlen) < 0 ||
	    mounts_attach(&R.mnt, &R.bus, cmdline, sizeof cmdline, err, errlen) < 0)
		return -1;
	/* virtio-blk: slot 3 (after the NIC), a sparse temporary file as a
	 * volume is served; opened before the confinement. */
	snprintf(R.disk, sizeof R.disk, "%s/disk.img", tmp);
	int dfd = open(R.disk, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (dfd < 0 || ftruncate(dfd, DISK_BYTES) < 0) {
		snprintf(err, errlen, "cannot make %s: %s", R.disk, strerror(errno));
		return -1;
	}
	close(dfd);
	if ((rc = blk_file_open(R.disk, NULL, &R.disk_be)) < 0 ||
	    (rc = virtio_blk_init(&R.blk, &R.disk_be, &(struct virtio_blk_opts){ .serial = DISK_SERIAL })) < 0) {
		snprintf(err, errlen, "virtio-blk: %s", strerror(-rc));
		return -1;
	}
	/* virtio-net: slot 2, kbox's stack with an allowlist of nothing. */
	policy_init(&R.pol, POLICY_MODE_ALLOWLIST);
	R.audit.fd = -1;
	const uint8_t mac[6] = VIRTIO_NET_GUEST_MAC;
	struct net_backend be = { to_stack, NULL };
	if ((rc = virtio_net_init(&R.nic, mac, &be)) < 0) {
		snprintf(err, errlen, "virtio_net_init: %s", strerror(-rc));
		return -1;
	}
	/* /dev/kvm and the share are open; lwIP's thread, started next, and
	 * every later one inherit the confinement (and LeakSanitizer, in it
	 * too, may then stop them all at exit). */
	printf("# %s\n", confine(tmp));
	struct stack_config nc = { .policy = &R.pol, .audit = &R.audit, .output = to_guest,
				.output_ctx = &R.nic, .resolve = no_resolve };
	if ((rc = stack_create(&nc, &R.stack)) < 0) {
		snprintf(err, errlen, "stack_create: %s", strerror(-rc));
		return -1;
	}
	struct virtio_bus_poller np = { net_fds, net_handle, NULL };
	if (virtio_bus_add(&R.bus, &R.nic.dev, &np, cmdline, sizeof cmdline, err, errlen) < 0 ||
	    virtio_bus_add(&R.bus, &R.blk.dev, NULL, cmdline, sizeof cmdline, err, errlen) < 0)
		return -1;

	/* vCPU 0's stream is the seed's own: a one-vCPU run replays it. */
	for (unsigned c = 0; c < R.ncpus; c++) {
		C = &gctx[c];
		C->cpu = c;
		C->rng = seed + c * 0xd1b54a32d192ed03ull;
		C->dev[D_VSOCK] = (struct fdev){ .nq = 3, .rxq_mask = 5,
						 .offered = R.vs.dev.features, .cfg_len = 8 };
		C->dev[D_FS] = (struct fdev){ .nq = 2, .rxq_mask = 0,
					      .offered = R.mnt.m[0].vfs.dev.features,
					      .cfg_len = VIRTIO_FS_CONFIG_SIZE };
		C->dev[D_NET] = (struct fdev){ .nq = 2, .rxq_mask = 1,
					       .offered = R.nic.dev.features,
					       .cfg_len = VIRTIO_NET_CONFIG_SIZE };
		C->dev[D_BLK] = (struct fdev){ .nq = 1, .rxq_mask = 0,
					       .offered = R.blk.dev.features,
					       .cfg_len = VIRTIO_BLK_CONFIG_SIZE };
		for (unsigned d = 0; d < ND; d++)
			C->dev[d].arena = ARENA + (c * ND + d) * DEV_SPAN;
		gen_batch();
		script_write();
	}
	C = &gctx[0];
	if (vm_setup_cpus(&R.vm, k.entry, err, errlen) < 0)
		return -1;
	if (pthread_create(&R.echo.thread, NULL, echo_thread, &R.echo) != 0) {
		snprintf(err, errlen, "cannot start the echo peer");
		return -1;
	}
	R.echo.started = 1;
	return 0;
}

/* Entries under dir, recursively: what the guest's FUSE requests made. */
static unsigned count_tree(int fd0, unsigned depth)
{
	DIR *d = fdopendir(fd0);
	if (!d) {
		close(fd0);
		return 0;
	}
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		n++;
		if (e->d_type == DT_DIR && depth < 32) {
			int fd = openat(dirfd(d), e->d_name,
					O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd >= 0)
				n += count_tree(fd, depth + 1);
		}
	}
	closedir(d);
	return n;
}

static void stats_line(const char *when)
{
	struct virtio_net_stats v;
	virtio_net_get_stats(&R.nic, &v);
	pthread_mutex_lock(&R.bus.lock);
	const struct virtio_fs_stats *fs = &R.mnt.m[0].vfs.stats;
	printf("# %s: %u batches; vsock %" PRIu64 " bad packets %" PRIu64 " RSTs; virtio-fs %"
	       PRIu64 " requests %" PRIu64 " bad chains; virtio-net %" PRIu64 " frames out %"
	       PRIu64 " in %" PRIu64 " bad chains; echo peer %" PRIu64 " conns %" PRIu64
	       " bytes\n", when, total_batches(), R.vs.stats.bad_packets, R.vs.stats.resets_sent,
	       fs->requests, fs->bad_chains, v.tx_frames, v.rx_frames, v.bad_chains,
	       R.echo.accepted, R.echo.bytes);
	const struct virtio_blk_stats *bs = &R.blk.stats;
	printf("# %s: virtio-blk %" PRIu64 " requests (%" PRIu64 " read, %" PRIu64
	       " written bytes), %" PRIu64 " IOERR %" PRIu64 " UNSUPP %" PRIu64 " bad chains\n",
	       when, bs->requests, bs->read_bytes, bs->written_bytes, bs->ioerr, bs->unsupp,
	       bs->bad_chains);
	pthread_mutex_unlock(&R.bus.lock);
	int root = open(R.share, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	printf("# the share holds %u entries (3 at the start)\n",
	       root >= 0 ? count_tree(root, 0) : 0);
	printf("# scripts per vCPU:");
	for (unsigned c = 0; c < R.ncpus; c++)
		printf(" %u", gctx[c].batches);
	printf("; %" PRIu64 " values reported by ring 3", R.reps);
	printf("\n# hostile chains by kind:");
	for (unsigned k = 0; k < 12; k++) {
		unsigned n = 0;
		for (unsigned c = 0; c < R.ncpus; c++)
			n += gctx[c].hostile[k];
		printf(" %u", n);
	}
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: %s GUEST.elf SECONDS SEED TMPDIR [VCPUS]\n", argv[0]);
		return 2;
	}
	R.ncpus = argc == 6 ? (unsigned)atoi(argv[5]) : 1;
	if (R.ncpus < 1 || R.ncpus > MAX_CPUS) {
		fprintf(stderr, "VCPUS must be 1 to %u\n", MAX_CPUS);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	double secs = strtod(argv[2], NULL);
	seed = strtoull(argv[3], NULL, 0);
	struct stat sst;
	if (stat("/dev/kvm", &sst) != 0) {
		printf("skip - /dev/kvm is absent\n0 passed, 0 failed\n");
		return 0;
	}
	printf("# guest-fuzz: seed %" PRIu64 " (SEED=%" PRIu64 " replays it), %.0f s, %u vCPU(s)\n",
	       seed, seed, secs, R.ncpus);
	/* A file the guest grows stops at 16 MiB (EFBIG, not SIGXFSZ). */
	signal(SIGXFSZ, SIG_IGN);
	setrlimit(RLIMIT_FSIZE, &(struct rlimit){ 16u << 20, 16u << 20 });
	signal(SIGPIPE, SIG_IGN);

	R.rss_base = -1;
	pthread_mutex_init(&R.lock, NULL);
	char err[512] = "";
	int set = setup(argv[1], argv[4], err, sizeof err) == 0;
	if (!tg_check(set, "set up the VM with vsock, virtio-fs, virtio-net and virtio-blk on the bus%s%s",
		   err[0] ? ": " : "", err)) {
		printf("%u passed, %u failed\n", tg_passed, tg_failed);
		return 1;
	}
	if (virtio_bus_start(&R.bus) < 0) {
		tg_check(0, "start the device thread");
		return 1;
	}
	R.fds_before = count_fds();
	R.started = R.last_progress = tg_now();
	R.deadline = R.started + secs;
	pthread_t wd;
	pthread_create(&wd, NULL, watchdog, NULL);

	enum vm_end end = vm_run(&R.vm);
	double took = tg_now() - R.started;

	pthread_mutex_lock(&R.lock);
	R.done = 1;
	pthread_mutex_unlock(&R.lock);
	pthread_join(wd, NULL);
	virtio_bus_stop(&R.bus);
	stats_line("end");

	tg_check(end == VM_END_RESET && R.final_phase == 2,
	      "the guest fuzzed for %.1f s and ended as it meant to (%u batches, end %d%s%s)",
	      took, total_batches(), (int)end, end == VM_END_ERROR ? ": " : "",
	      end == VM_END_ERROR ? R.vm.error : "");
	static const char *what[ND] = {
		"vsock: a REQUEST to a closed port is answered by RST",
		"virtio-fs: FUSE_INIT is answered",
		"virtio-net: an ARP request for the gateway is answered",
		"virtio-blk: GET_ID, a write and its read back are answered",
	};
	for (unsigned d = 0; d < ND && R.final_phase == 2; d++)
		tg_check(R.final_ok[d], "after the fuzzing, %s (%s)", what[d], R.final_why[d]);
	tg_check(R.final_phase == 2 && R.fds_after == R.fds_before,
	      "host fds unchanged: %d before, %d after", R.fds_before, R.fds_after);
	long growth = R.rss_end - R.rss_base;
	tg_check(R.final_phase == 2 && R.rss_base > 0 && growth < (long)RSS_SLACK_KB,
	      "RSS growth bounded: %ld KiB from the first quarter to the end (%ld -> %ld, "
	      "limit %u)", growth, R.rss_base, R.rss_end, RSS_SLACK_KB);
	tg_check(resolver_calls == 0, "the host resolver was never asked (%u calls)",
	      resolver_calls);

	echo_stop(&R.echo);
	virtio_bus_destroy(&R.bus);
	stack_destroy(R.stack);
	virtio_net_destroy(&R.nic);
	policy_free(&R.pol);
	mounts_free(&R.mnt);
	blk_file_close(&R.disk_be);
	vsock_unix_destroy(&R.vu);
	virtio_vsock_destroy(&R.vs);
	close(R.echo.listen_fd);
	close(R.echo.stop_fd);
	vm_destroy(&R.vm);
	if (tg_failed)
		printf("# reproduce: SEED=%" PRIu64 " VCPUS=%u tests/guest/fuzz.sh BUILD SECONDS\n",
		       seed, R.ncpus);
	printf("%u passed, %u failed\n", tg_passed, tg_failed);
	return tg_failed ? 1 : 0;
}
