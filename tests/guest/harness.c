/* KVM-level tests (TESTING.md layer 3): boot tests/guest's freestanding
 * guest with kbox's own VM, loader, boot-parameter and MP-table code, let it
 * do its work in ring 3, and check exactly which port and MMIO accesses
 * reached the VMM, per vCPU, and how the VM ended.
 *
 * Usage: kvm-harness GUEST.elf [CASE]   (CASE: run only the case so named)
 * Prints one line per check and a final "N passed, M failed"; exits 1 if
 * any check failed, 0 otherwise (also when /dev/kvm is absent: skipped). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/kvm.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devices/irq_sink.h"
#include "devices/virtio_vsock.h"
#include "devices/vsock_unix.h"
#include "lib/fileio.h"
#include "tests/guest/tg.h"
#include "vmm/core/boot.h"
#include "vmm/core/mptable.h"
#include "vmm/core/serial.h"
#include "vmm/core/snapshot.h"
#include "vmm/core/virtio_bus.h"
#include "vmm/core/vm.h"

/* The guest's side of these lives in guest.S; keep the two in step. */
#define TG_MAX_CPUS   8u
#define TG_PORT       0x600u
#define TG_PORT_LEN   (16u * TG_MAX_CPUS)
#define TG_EXC_PORT   0x6e0u
#define TG_EXC_LEN    0x20u
#define TG_EXC_MAGIC  0x45584350u
#define TG_MMIO_LEN   (0x1000ull * TG_MAX_CPUS)
#define TG_DONE_MAGIC 0x454e4f4420424b47ull
#define TG_SEL_UCODE  0x2bu
#define GUEST_IMAGE_MAX (64u << 20) /* the test guest is a few KiB: far more is not it */
#define COM1          0x3f8u
/* The line finish_gate prints, as Linux would for `reboot kbox-exit=5`. */
#define EXIT_LINE     "\nreboot: Restarting system with command 'kbox-exit=5'\n"
#define COM1_IRQ      4u

/* One access as the device callbacks saw it: ports byte by byte (that is
 * how vm.c hands them out), MMIO as whole accesses. */
enum ev_kind { EV_PIO_OUT, EV_PIO_IN, EV_MMIO_W, EV_MMIO_R };
struct ev {
	uint8_t kind, len;
	uint32_t off;  /* from TG_PORT or TG_MMIO */
	uint64_t val;
};

#define LOG_MAX 4096u
#define REP_MAX 2048u

struct cpu_log {
	struct ev ev[LOG_MAX];
	unsigned n;
	int overflow;
	unsigned pio_k, mmio_k, str_n; /* answers handed out so far */
	unsigned wrong_thread;   /* accesses to this window from another vCPU */
	int done;                /* garbage run finished (TG_DONE_MAGIC seen) */
};

struct exc_report {
	uint32_t vec, err, cs, cpu;
	uint64_t rip;
};

struct line_irq {
	struct irq_sink sink;
	struct vm *vm;
	unsigned irq;
};

struct harness {
	struct vm *vm;
	pthread_mutex_t lock;
	int garbage;
	struct cpu_log log[TG_MAX_CPUS];
	uint64_t garbage_events;
	uint8_t exc_latch[TG_EXC_LEN];
	unsigned exc_count;
	struct exc_report exc;
	struct serial uart;
	struct line_irq uart_irq;
	char uart_tail[128];
	uint64_t uart_bytes;
	uint64_t rep[REP_MAX]; /* MODE_SCRIPT reports, in order */
	unsigned nrep;
	unsigned snap_at;      /* pause the VM once vCPU 0 logged this many events */
	int snap_fired;
};

/* ---- the values both sides compute (guest.S: xval, yval) ---- */

static uint32_t xval(unsigned cpu, unsigned k)
{
	return (uint32_t)(k * 0x9e3779b1u) ^ ((uint32_t)cpu << 16) ^ 0xa5000000u;
}

static uint32_t yval(unsigned cpu, unsigned k) { return xval(cpu, k) * 5u + cpu; }

static uint64_t mmio_xval(unsigned cpu, unsigned k)
{
	uint32_t x = xval(cpu, k);
	return (uint64_t)x << 32 | (uint32_t)~x;
}

static uint32_t mmio_yval(unsigned cpu, unsigned k) { return yval(cpu, k) ^ 0x55555555u; }

#define STR_LEN 64u
static uint8_t str_val(unsigned cpu, unsigned n) { return (uint8_t)(7 * n + 31 * cpu + 1); }

/* ---- devices ---- */

static void log_ev(struct harness *h, unsigned cpu, struct ev e)
{
	struct cpu_log *l = &h->log[cpu];
	/* Garbage from every vCPU lands in every window: nothing to log. */
	if (h->garbage) {
		h->garbage_events++;
		return;
	}
	if (!pthread_equal(pthread_self(), h->vm->cpu[cpu].thread))
		l->wrong_thread++;
	if (l->n < LOG_MAX)
		l->ev[l->n++] = e;
	else
		l->overflow = 1;
	if (h->snap_at && !h->snap_fired && cpu == 0 && l->n == h->snap_at) {
		h->snap_fired = 1;
		vm_stop(h->vm, VM_END_STOPPED);
	}
}

/* The vCPU a window belongs to must exist: a window of an absent vCPU is
 * logged as vCPU 0's but can never match its expected sequence. */
static unsigned window_cpu(struct harness *h, unsigned cpu)
{
	return cpu < h->vm->ncpus ? cpu : 0;
}

static uint8_t test_pio_in(void *ctx, unsigned off)
{
	struct harness *h = ctx;
	unsigned cpu = off / 16, reg = off % 16;
	uint8_t v = 0xff;
	pthread_mutex_lock(&h->lock);
	struct cpu_log *l = &h->log[window_cpu(h, cpu)];
	if (reg >= 8 && reg < 12) {
		v = (uint8_t)(yval(cpu, l->pio_k) >> (8 * (reg - 8)));
		if (reg == 11)
			l->pio_k++;
	} else if (reg == 12) {
		v = str_val(cpu, l->str_n++);
	}
	log_ev(h, window_cpu(h, cpu), (struct ev){ EV_PIO_IN, 1, off, v });
	pthread_mutex_unlock(&h->lock);
	return v;
}

static void test_pio_out(void *ctx, unsigned off, uint8_t v)
{
	struct harness *h = ctx;
	pthread_mutex_lock(&h->lock);
	log_ev(h, window_cpu(h, off / 16), (struct ev){ EV_PIO_OUT, 1, off, v });
	pthread_mutex_unlock(&h->lock);
}

static uint64_t le_get(const uint8_t *d, unsigned len)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < len && i < 8; i++)
		v |= (uint64_t)d[i] << (8 * i);
	return v;
}

static void test_mmio_read(void *ctx, uint64_t off, uint8_t *data, unsigned len)
{
	struct harness *h = ctx;
	unsigned cpu = (unsigned)(off / 0x1000), reg = (unsigned)(off % 0x1000);
	pthread_mutex_lock(&h->lock);
	struct cpu_log *l = &h->log[window_cpu(h, cpu)];
	uint64_t v = 0;
	if (reg == 0x10 && len == 4)
		v = mmio_yval(cpu, l->mmio_k++);
	for (unsigned i = 0; i < len && i < 8; i++)
		data[i] = (uint8_t)(v >> (8 * i));
	log_ev(h, window_cpu(h, cpu), (struct ev){ EV_MMIO_R, (uint8_t)len, (uint32_t)off, v });
	pthread_mutex_unlock(&h->lock);
}

static void test_mmio_write(void *ctx, uint64_t off, const uint8_t *data, unsigned len)
{
	struct harness *h = ctx;
	unsigned cpu = (unsigned)(off / 0x1000), reg = (unsigned)(off % 0x1000);
	uint64_t v = le_get(data, len);
	pthread_mutex_lock(&h->lock);
	if (reg == 0x28 && len == 8 && v == TG_DONE_MAGIC)
		h->log[window_cpu(h, cpu)].done = 1;
	if (reg == 0x38 && len == 8 && cpu == 0 && h->nrep < REP_MAX)
		h->rep[h->nrep++] = v;
	log_ev(h, window_cpu(h, cpu), (struct ev){ EV_MMIO_W, (uint8_t)len, (uint32_t)off, v });
	pthread_mutex_unlock(&h->lock);
}

static uint8_t exc_in(void *ctx, unsigned off) { return 0xff; }

/* Ring 0 writes its report as dwords and commits it with a magic dword;
 * garbage writes land in the latch too, but commit only by a 2^-32 chance. */
static void exc_out(void *ctx, unsigned off, uint8_t v)
{
	struct harness *h = ctx;
	pthread_mutex_lock(&h->lock);
	h->exc_latch[off % TG_EXC_LEN] = v;
	if (off == TG_EXC_LEN - 1 && le_get(h->exc_latch + 0x1c, 4) == TG_EXC_MAGIC) {
		if (h->exc_count++ == 0) {
			uint32_t cs = (uint32_t)le_get(h->exc_latch + 0x10, 4);
			h->exc = (struct exc_report){
				.vec = (uint32_t)le_get(h->exc_latch, 4),
				.err = (uint32_t)le_get(h->exc_latch + 4, 4),
				.rip = le_get(h->exc_latch + 8, 8),
				.cs = cs & 0xffff,
				.cpu = cs >> 16,
			};
		}
		memset(h->exc_latch, 0, sizeof h->exc_latch);
	}
	pthread_mutex_unlock(&h->lock);
}

static uint8_t uart_in(void *ctx, unsigned off) { return serial_in(ctx, off); }
static void uart_out(void *ctx, unsigned off, uint8_t v) { serial_out(ctx, off, v); }

/* Called under the UART's own lock, from whichever vCPU wrote THR. */
static void uart_capture(void *ctx, const uint8_t *b, size_t n)
{
	struct harness *h = ctx;
	size_t keep = sizeof h->uart_tail - 1;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(h->uart_tail);
		if (len == keep) {
			memmove(h->uart_tail, h->uart_tail + 1, keep - 1);
			len--;
		}
		/* NUL bytes would cut the tail short; the check only needs text. */
		h->uart_tail[len] = b[i] ? (char)b[i] : '.';
		h->uart_tail[len + 1] = 0;
	}
	h->uart_bytes += n;
}

static void line_irq_set(struct irq_sink *s, int level)
{
	struct line_irq *l = (struct line_irq *)s;
	vm_irq_line(l->vm, l->irq, level);
}

/* A virtio device that hands every buffer straight back: enough for the
 * garbage runs to drive the real virtio-mmio transport, ioeventfd and irqfd
 * wiring and device thread of vmm/core/virtio_bus.c. */
struct echo_dev {
	struct virtqueue_dev dev;
	struct virtqueue q[1];
	unsigned notifies, chains;
	int errors;
};

static int echo_notify(struct virtqueue_dev *d, unsigned qi)
{
	struct echo_dev *e = (struct echo_dev *)d;
	static struct virtqueue_chain c; /* one device thread; too big for its stack */
	int r;
	e->notifies++;
	while ((r = virtqueue_pop(&d->vqs[qi], &c)) > 0) {
		e->chains++;
		if (virtqueue_push(&d->vqs[qi], c.head, 0) < 0)
			break;
	}
	if (r < 0) {
		e->errors++;
		return r;
	}
	virtqueue_dev_used(d, qi);
	return 0;
}

static const struct virtqueue_dev_ops echo_ops = { .notify = echo_notify };

/* ---- MODE_SCRIPT: ring 3 drives the real vsock device ----
 *
 * The harness writes the driver's every step as a script of ops (guest.S,
 * `script`) into guest RAM; ring 3 executes it, so each register access,
 * descriptor, ring index and packet byte comes from guest stores and real
 * MMIO exits, and each QueueNotify reaches the device thread through its
 * ioeventfd.  What ring 3 saw comes back as reports, checked below. */

enum sop { SOP_END, SOP_MW, SOP_MR, SOP_ST, SOP_WAIT, SOP_MWAIT, SOP_REP, SOP_IRQS };

#define SCRIPT_ADDR 0x400000ull
#define SCRIPT_MAX  8192u
#define RING_ADDR   0x600000ull /* queue q at +q*0x4000: desc, avail +0x1000, used +0x2000 */
#define RXBUF_ADDR  0x800000ull
#define TXBUF_ADDR  0x900000ull
#define BUF_SIZE    0x1000u
#define DQ_SIZE     16u
#define RX_BUFS     8u
#define GUEST_CID   3u
#define PORT_OPEN   1234u
#define PORT_CLOSED 1235u
#define MEM_POLLS   100000000ull /* pause loops: seconds, not forever */
#define REG_POLLS   1000000ull
#define G2H_LEN     64u
#define H2G_LEN     48u
#define OUTSIDE_RAM 0x4000000000ull
#define POLL_GAVE_UP (1ull << 32)
#define VRING_F_NEXT 1u
#define VRING_F_WRITE 2u

struct script {
	uint64_t op[SCRIPT_MAX][4];
	unsigned n, nrep;
	int overflow;
};

/* Append one op that makes reps reports; returns the first one's index. */
static unsigned sop(struct script *s, uint64_t op, uint64_t a, uint64_t b, uint64_t c,
		    unsigned reps)
{
	unsigned first = s->nrep;
	if (s->n + 1 >= SCRIPT_MAX) { /* keep room for SOP_END */
		s->overflow = 1;
		return REP_MAX;
	}
	s->op[s->n][0] = op;
	s->op[s->n][1] = a;
	s->op[s->n][2] = b;
	s->op[s->n][3] = c;
	s->n++;
	s->nrep += reps;
	return first;
}

static unsigned notifies_in(const struct script *s)
{
	unsigned n = 0;
	for (unsigned i = 0; i < s->n; i++)
		n += s->op[i][0] == SOP_MW && s->op[i][1] == VIRTIO_MMIO_QUEUE_NOTIFY;
	return n;
}

static void mw(struct script *s, uint32_t reg, uint32_t v) { sop(s, SOP_MW, reg, v, 0, 0); }
static unsigned mr(struct script *s, uint32_t reg) { return sop(s, SOP_MR, reg, 0, 0, 1); }
static void st(struct script *s, uint64_t gpa, uint64_t v, unsigned len)
{
	sop(s, SOP_ST, gpa, v, len, 0);
}

static uint64_t q_desc(unsigned q) { return RING_ADDR + q * 0x4000ull; }
static uint64_t q_avail(unsigned q) { return q_desc(q) + 0x1000; }
static uint64_t q_used(unsigned q) { return q_desc(q) + 0x2000; }

static void st_desc(struct script *s, unsigned q, unsigned i, uint64_t addr, uint32_t len,
		    uint16_t flags, uint16_t next)
{
	st(s, q_desc(q) + 16 * i, addr, 8);
	st(s, q_desc(q) + 16 * i + 8, len | (uint64_t)flags << 32 | (uint64_t)next << 48, 8);
}

/* What one handshake reported (indexes into harness.rep). */
struct hs_rep { unsigned magic, version, devid, feat_hi, fok, qmax[3], live, cid; };
/* One received packet: the used-index poll, the used element, the buffer. */
struct rx_rep { unsigned wait, elem, buf, qwords; };

struct drv {
	struct script *s;
	uint16_t avail[3], used[3];
	unsigned rx_next;
};

/* Reset, features, three queues, DRIVER_OK, then RX_BUFS rx buffers. */
static void drv_handshake(struct drv *d, struct hs_rep *r)
{
	struct script *s = d->s;
	r->magic = mr(s, 0x000);
	r->version = mr(s, 0x004);
	r->devid = mr(s, 0x008);
	mw(s, 0x070, 0);
	mw(s, 0x070, VIRTIO_STATUS_ACKNOWLEDGE);
	mw(s, 0x070, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	mw(s, 0x014, 1);
	r->feat_hi = mr(s, 0x010);
	mw(s, 0x024, 0);
	mw(s, 0x020, 0);
	mw(s, 0x024, 1);
	mw(s, 0x020, 1); /* VIRTIO_F_VERSION_1 only */
	mw(s, 0x070, 0xb);
	r->fok = mr(s, 0x070);
	for (unsigned q = 0; q < 3; q++) {
		/* Stale indexes from an earlier round must not look like work. */
		st(s, q_avail(q), 0, 4);
		st(s, q_used(q), 0, 4);
		mw(s, 0x030, q);
		r->qmax[q] = mr(s, 0x034);
		mw(s, 0x038, DQ_SIZE);
		mw(s, 0x080, (uint32_t)q_desc(q));
		mw(s, 0x084, 0);
		mw(s, 0x090, (uint32_t)q_avail(q));
		mw(s, 0x094, 0);
		mw(s, 0x0a0, (uint32_t)q_used(q));
		mw(s, 0x0a4, 0);
		mw(s, 0x044, 1);
		d->avail[q] = d->used[q] = 0;
	}
	mw(s, 0x070, 0xf);
	r->live = mr(s, 0x070);
	r->cid = mr(s, 0x100);
	for (unsigned j = 0; j < RX_BUFS; j++) {
		st_desc(s, 0, j, RXBUF_ADDR + j * BUF_SIZE, BUF_SIZE, VRING_F_WRITE, 0);
		st(s, q_avail(0) + 4 + 2 * j, j, 2);
	}
	d->avail[0] = RX_BUFS;
	st(s, q_avail(0) + 2, RX_BUFS, 2);
	mw(s, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	d->rx_next = 0;
}

/* Make tx descriptor slot (already filled) available and kick the queue. */
static void drv_kick_tx(struct drv *d, unsigned slot)
{
	struct script *s = d->s;
	st(s, q_avail(1) + 4 + 2 * (d->avail[1] % DQ_SIZE), slot, 2);
	d->avail[1]++;
	st(s, q_avail(1) + 2, d->avail[1], 2);
	mw(s, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
}

/* Send one packet; returns the report of the poll for its used entry. */
static unsigned drv_send(struct drv *d, uint16_t op, uint32_t sport, uint32_t dport,
			 const uint8_t *payload, uint32_t len)
{
	struct script *s = d->s;
	unsigned slot = d->avail[1] % DQ_SIZE;
	uint64_t buf = TXBUF_ADDR + slot * BUF_SIZE;
	st(s, buf, GUEST_CID, 8);
	st(s, buf + 8, VIRTIO_VSOCK_HOST_CID, 8);
	st(s, buf + 16, sport | (uint64_t)dport << 32, 8);
	st(s, buf + 24, len | (uint64_t)VIRTIO_VSOCK_TYPE_STREAM << 32 | (uint64_t)op << 48, 8);
	st(s, buf + 32, (uint64_t)VIRTIO_VSOCK_MAX_PKT << 32, 8); /* flags 0, buf_alloc */
	st(s, buf + 40, 0, 4);                            /* fwd_cnt */
	for (uint32_t i = 0; i < len; i += 8) {
		uint64_t q = 0;
		for (uint32_t b = 0; b < 8 && i + b < len; b++)
			q |= (uint64_t)payload[i + b] << (8 * b);
		st(s, buf + VIRTIO_VSOCK_HDR_SIZE + i, q, len - i < 8 ? len - i : 8);
	}
	st_desc(s, 1, slot, buf, VIRTIO_VSOCK_HDR_SIZE + len, 0, 0);
	drv_kick_tx(d, slot);
	d->used[1]++;
	return sop(s, SOP_WAIT, q_used(1) + 2, d->used[1], MEM_POLLS, 1);
}

/* Wait for the next rx packet and report it with up to len payload bytes;
 * then acknowledge the interrupt as a driver must. */
static struct rx_rep drv_recv(struct drv *d, uint32_t len)
{
	struct script *s = d->s;
	struct rx_rep r;
	unsigned j = d->rx_next++;
	d->used[0]++;
	r.wait = sop(s, SOP_WAIT, q_used(0) + 2, d->used[0], MEM_POLLS, 1);
	r.elem = sop(s, SOP_REP, q_used(0) + 4 + 8 * ((d->used[0] - 1u) % DQ_SIZE), 0, 1, 1);
	r.qwords = (VIRTIO_VSOCK_HDR_SIZE + len + 7) / 8;
	r.buf = sop(s, SOP_REP, RXBUF_ADDR + j * BUF_SIZE, 0, r.qwords, r.qwords);
	mr(s, 0x060);
	mw(s, 0x064, VIRTIO_MMIO_INT_USED | VIRTIO_MMIO_INT_CONFIG);
	return r;
}

/* A tx chain the device must refuse (a buffer outside RAM, or a loop);
 * returns the report of the wait for DEVICE_NEEDS_RESET. */
static unsigned drv_hostile(struct drv *d, int loop)
{
	struct script *s = d->s;
	unsigned slot = d->avail[1] % DQ_SIZE, other = (slot + 1) % DQ_SIZE;
	if (loop) {
		st_desc(s, 1, slot, TXBUF_ADDR, VIRTIO_VSOCK_HDR_SIZE, VRING_F_NEXT, (uint16_t)other);
		st_desc(s, 1, other, TXBUF_ADDR, VIRTIO_VSOCK_HDR_SIZE, VRING_F_NEXT, (uint16_t)slot);
	} else {
		st_desc(s, 1, slot, OUTSIDE_RAM, VIRTIO_VSOCK_HDR_SIZE, 0, 0);
	}
	drv_kick_tx(d, slot);
	return sop(s, SOP_MWAIT | (uint64_t)VIRTIO_STATUS_NEEDS_RESET << 32, 0x070,
		   VIRTIO_STATUS_NEEDS_RESET, REG_POLLS, 1);
}

static uint8_t g2h_byte(unsigned i) { return (uint8_t)(i * 37 + 11); }
static uint8_t h2g_byte(unsigned i) { return (uint8_t)((i * 53 + 7) ^ 0x5a); }

#define HOSTILE_ROUNDS 2
struct plan {
	struct hs_rep hs[1 + HOSTILE_ROUNDS];
	struct rx_rep rst[1 + HOSTILE_ROUNDS], resp, h2g;
	unsigned rst_tx[1 + HOSTILE_ROUNDS], req_tx, rw_tx;
	unsigned bad[HOSTILE_ROUNDS], reset_status[HOSTILE_ROUNDS];
	unsigned irqs;
};

/* A connection to a closed port gives RST (request and reply both checked
 * later from the reports). */
static void drv_closed_port(struct drv *d, struct plan *p, unsigned round)
{
	p->rst_tx[round] = drv_send(d, VIRTIO_VSOCK_OP_REQUEST, 5001 + round, PORT_CLOSED, NULL, 0);
	p->rst[round] = drv_recv(d, 0);
}

static void build_script(struct script *s, struct plan *p)
{
	struct drv d = { .s = s };
	uint8_t g2h[G2H_LEN];
	for (unsigned i = 0; i < G2H_LEN; i++)
		g2h[i] = g2h_byte(i);
	memset(s, 0, sizeof *s);
	drv_handshake(&d, &p->hs[0]);
	drv_closed_port(&d, p, 0);
	p->req_tx = drv_send(&d, VIRTIO_VSOCK_OP_REQUEST, 5000, PORT_OPEN, NULL, 0);
	p->resp = drv_recv(&d, 0);
	p->rw_tx = drv_send(&d, VIRTIO_VSOCK_OP_RW, 5000, PORT_OPEN, g2h, G2H_LEN);
	p->h2g = drv_recv(&d, H2G_LEN);
	for (unsigned k = 0; k < HOSTILE_ROUNDS; k++) {
		p->bad[k] = drv_hostile(&d, k == 1);
		mw(s, 0x070, 0);
		p->reset_status[k] = mr(s, 0x070);
		drv_handshake(&d, &p->hs[1 + k]);
		drv_closed_port(&d, p, 1 + k);
	}
	p->irqs = sop(s, SOP_IRQS, 0, 0, 0, 1);
	s->op[s->n][0] = SOP_END;
}

/* The host end of port PORT_OPEN: takes G2H_LEN bytes, answers H2G_LEN. */
struct peer {
	int listen_fd, stop_fd, conn_fd;
	pthread_t thread;
	int started;
	uint8_t got[G2H_LEN];
	size_t got_n;
	ssize_t sent;
};

/* KBOX_TIMEOUT_MULT (a whole number, 1 by default) stretches every fixed
 * wait of this harness, as CK_TIMEOUT_MULTIPLIER does the unit tests': the
 * emulated hardware-KVM lane runs it under a load that a quiet machine
 * never sees, and a slow run must not read as a hang. */
static unsigned timeout_mult(void)
{
	const char *e = getenv("KBOX_TIMEOUT_MULT");
	char *end;
	unsigned long m = e ? strtoul(e, &end, 10) : 1;
	if (!e || *end || m < 1 || m > 100)
		return 1;
	return (unsigned)m;
}

/* Whether KBOX_HARNESS_SKIP (case names, space-separated) names this case:
 * a lane whose host cannot take a case (the emulated hardware-KVM lane's
 * L1 kernel, for the garbage guests) leaves it to the lanes that can. */
static int skipped(const char *name)
{
	const char *e = getenv("KBOX_HARNESS_SKIP");
	size_t n = strlen(name);
	while (e && *e) {
		while (*e == ' ')
			e++;
		size_t w = strcspn(e, " ");
		if (w == n && strncmp(e, name, n) == 0)
			return 1;
		e += w;
	}
	return 0;
}

/* Wait for fd to be ready for events, or the stop eventfd: 1 if ready. */
static int peer_wait(struct peer *p, int fd, short events)
{
	struct pollfd pf[2] = { { .fd = fd, .events = events }, { .fd = p->stop_fd, .events = POLLIN } };
	int r = poll(pf, 2, 30000 * (int)timeout_mult());
	return r > 0 && !pf[1].revents && pf[0].revents;
}

static void *peer_thread(void *arg)
{
	struct peer *p = arg;
	if (!peer_wait(p, p->listen_fd, POLLIN))
		return NULL;
	p->conn_fd = accept4(p->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (p->conn_fd < 0)
		return NULL;
	while (p->got_n < G2H_LEN && peer_wait(p, p->conn_fd, POLLIN)) {
		ssize_t r = read(p->conn_fd, p->got + p->got_n, G2H_LEN - p->got_n);
		if (r <= 0)
			return NULL;
		p->got_n += (size_t)r;
	}
	if (p->got_n < G2H_LEN)
		return NULL;
	uint8_t out[H2G_LEN];
	for (unsigned i = 0; i < H2G_LEN; i++)
		out[i] = h2g_byte(i);
	p->sent = write(p->conn_fd, out, sizeof out);
	return NULL;
}

struct vs_rig {
	struct virtio_vsock vs;
	struct vsock_unix vu;
	struct peer peer;
	struct script script;
	struct plan plan;
	char dir[32], base[48], lpath[64];
	int vs_made, vu_made;
	/* The bus's own MMIO handler, wrapped to count what reaches it. */
	struct vm_mmio bus_mmio;
	unsigned notify_writes, reg_writes; /* from the script / seen by the VMM */
	unsigned notify_exits;
};

static void rig_mmio_read(void *ctx, uint64_t off, uint8_t *data, unsigned len)
{
	struct vs_rig *r = ctx;
	r->bus_mmio.read(r->bus_mmio.ctx, off, data, len);
}

/* vCPU threads call this concurrently only with more than one vCPU. */
static void rig_mmio_write(void *ctx, uint64_t off, const uint8_t *data, unsigned len)
{
	struct vs_rig *r = ctx;
	r->reg_writes++;
	if (off == VIRTIO_MMIO_QUEUE_NOTIFY)
		r->notify_exits++;
	r->bus_mmio.write(r->bus_mmio.ctx, off, data, len);
}

static unsigned rig_fds(void *ctx, struct pollfd *p, unsigned max)
{
	return vsock_unix_pollfds(ctx, p, max);
}

static void rig_handle(void *ctx, const struct pollfd *p, unsigned n)
{
	vsock_unix_handle(ctx, p, n);
}

/* The vsock device and its Unix backend on bus, a listener on the open
 * port, and the script in guest RAM. */
static int rig_setup(struct vs_rig *r, struct vm *vm, struct virtio_bus *bus, char *err, size_t errlen)
{
	memset(r, 0, sizeof *r);
	r->peer = (struct peer){ .listen_fd = -1, .stop_fd = -1, .conn_fd = -1 };
	snprintf(r->dir, sizeof r->dir, "/tmp/kbox-kvm-XXXXXX");
	if (!mkdtemp(r->dir)) {
		r->dir[0] = 0;
		snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
		return -1;
	}
	snprintf(r->base, sizeof r->base, "%s/v", r->dir);
	snprintf(r->lpath, sizeof r->lpath, "%s_%u", r->base, PORT_OPEN);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", r->lpath);
	r->peer.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	r->peer.stop_fd = eventfd(0, EFD_CLOEXEC);
	if (r->peer.listen_fd < 0 || r->peer.stop_fd < 0 ||
	    bind(r->peer.listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    listen(r->peer.listen_fd, 4) < 0) {
		snprintf(err, errlen, "listener %s: %s", r->lpath, strerror(errno));
		return -1;
	}
	if (virtio_vsock_init(&r->vs, GUEST_CID, NULL, NULL) < 0) {
		snprintf(err, errlen, "virtio_vsock_init failed");
		return -1;
	}
	r->vs_made = 1;
	int rc = vsock_unix_init(&r->vu, &r->vs, r->base, false);
	if (rc < 0) {
		snprintf(err, errlen, "vsock_unix_init: %s", strerror(-rc));
		return -1;
	}
	r->vu_made = 1;
	struct virtio_bus_poller pl = { rig_fds, rig_handle, &r->vu };
	char cmdline[128] = "";
	if (virtio_bus_add(bus, &r->vs.dev, &pl, cmdline, sizeof cmdline, err, errlen) < 0)
		return -1;
	/* A QueueNotify the ioeventfd takes never exits to the VMM: count the
	 * ones that do, which should be none. */
	struct vm_mmio *m = NULL;
	for (unsigned i = 0; i < vm->nmmio; i++)
		if (vm->mmio[i].base == VIRTIO_BUS_BASE)
			m = &vm->mmio[i];
	if (!m) {
		snprintf(err, errlen, "the bus registered no MMIO window at 0x%llx", VIRTIO_BUS_BASE);
		return -1;
	}
	r->bus_mmio = *m;
	m->read = rig_mmio_read;
	m->write = rig_mmio_write;
	m->ctx = r;
	build_script(&r->script, &r->plan);
	if (r->script.overflow) {
		snprintf(err, errlen, "script longer than %u ops", SCRIPT_MAX);
		return -1;
	}
	if (guest_mem_write(&vm->mem, SCRIPT_ADDR, r->script.op, sizeof r->script.op) < 0) {
		snprintf(err, errlen, "cannot write the script to guest RAM");
		return -1;
	}
	if (pthread_create(&r->peer.thread, NULL, peer_thread, &r->peer) != 0) {
		snprintf(err, errlen, "cannot start the host peer");
		return -1;
	}
	r->peer.started = 1;
	return 0;
}

/* After virtio_bus_stop: stop the peer, drop the backend and device, clean up. */
static void rig_teardown(struct vs_rig *r)
{
	if (r->peer.started) {
		uint64_t one = 1;
		ssize_t w = write(r->peer.stop_fd, &one, sizeof one);
		(void)w;
		pthread_join(r->peer.thread, NULL);
	}
	if (r->vu_made)
		vsock_unix_destroy(&r->vu);
	if (r->vs_made)
		virtio_vsock_destroy(&r->vs);
	if (r->peer.conn_fd >= 0)
		close(r->peer.conn_fd);
	if (r->peer.listen_fd >= 0)
		close(r->peer.listen_fd);
	if (r->peer.stop_fd >= 0)
		close(r->peer.stop_fd);
	if (r->lpath[0])
		unlink(r->lpath);
	if (r->dir[0])
		rmdir(r->dir);
}

static int rep_get(const struct harness *h, unsigned i, uint64_t *v)
{
	if (i >= h->nrep)
		return 0;
	*v = h->rep[i];
	return 1;
}

static int hs_ok(const struct harness *h, const struct hs_rep *r, char *why, size_t n)
{
	uint64_t m = 0, ver = 0, id = 0, fh = 0, fok = 0, live = 0, cid = 0, q[3] = { 0 };
	int got = rep_get(h, r->magic, &m) && rep_get(h, r->version, &ver) &&
		  rep_get(h, r->devid, &id) && rep_get(h, r->feat_hi, &fh) &&
		  rep_get(h, r->fok, &fok) && rep_get(h, r->live, &live) &&
		  rep_get(h, r->cid, &cid) && rep_get(h, r->qmax[0], &q[0]) &&
		  rep_get(h, r->qmax[1], &q[1]) && rep_get(h, r->qmax[2], &q[2]);
	snprintf(why, n, "magic 0x%" PRIx64 " version %" PRIu64 " device %" PRIu64
		 " features[63:32] 0x%" PRIx64 " status after FEATURES_OK 0x%" PRIx64
		 ", after DRIVER_OK 0x%" PRIx64 ", QueueNumMax %" PRIu64 "/%" PRIu64 "/%" PRIu64
		 ", guest_cid %" PRIu64, m, ver, id, fh, fok, live, q[0], q[1], q[2], cid);
	return got && m == 0x74726976 && ver == 2 && id == VIRTIO_VSOCK_DEVICE_ID && (fh & 1) &&
	       fok == 0xb && live == 0xf && cid == GUEST_CID && q[0] >= DQ_SIZE &&
	       q[1] >= DQ_SIZE && q[2] >= DQ_SIZE;
}

/* Decode a received packet: 1 if it arrived (poll did not give up). */
static int rx_get(const struct harness *h, const struct rx_rep *r, struct virtio_vsock_hdr *hdr,
		  uint64_t *elem, uint8_t *payload, size_t plen)
{
	uint64_t w = 0;
	uint8_t raw[8 * 16] = { 0 };
	if (!rep_get(h, r->wait, &w) || (w & POLL_GAVE_UP) || !rep_get(h, r->elem, elem) ||
	    r->qwords > 16)
		return 0;
	for (unsigned i = 0; i < r->qwords; i++) {
		uint64_t q;
		if (!rep_get(h, r->buf + i, &q))
			return 0;
		for (unsigned b = 0; b < 8; b++)
			raw[8 * i + b] = (uint8_t)(q >> (8 * b));
	}
	virtio_vsock_hdr_decode(hdr, raw);
	if (plen)
		memcpy(payload, raw + VIRTIO_VSOCK_HDR_SIZE, plen);
	return 1;
}

static int is_pkt(const struct virtio_vsock_hdr *x, uint16_t op, uint32_t sport, uint32_t dport,
		  uint32_t len)
{
	return x->src_cid == VIRTIO_VSOCK_HOST_CID && x->dst_cid == GUEST_CID && x->src_port == sport &&
	       x->dst_port == dport && x->type == VIRTIO_VSOCK_TYPE_STREAM && x->op == op && x->len == len;
}

static int tx_done(const struct harness *h, unsigned i)
{
	uint64_t v;
	return rep_get(h, i, &v) && !(v & POLL_GAVE_UP);
}

static void rst_check(const char *name, const struct harness *h, const struct plan *p,
		      unsigned round)
{
	struct virtio_vsock_hdr x = { 0 };
	uint64_t elem = 0;
	int got = rx_get(h, &p->rst[round], &x, &elem, NULL, 0);
	tg_check(got && tx_done(h, p->rst_tx[round]) &&
		      is_pkt(&x, VIRTIO_VSOCK_OP_RST, PORT_CLOSED, 5001 + round, 0) &&
		      (elem >> 32) == VIRTIO_VSOCK_HDR_SIZE,
	      "%s: round %u: REQUEST to closed port %u answered by RST in the rx ring "
	      "(op %u %" PRIu64 ":%u -> %" PRIu64 ":%u len %u, used len %" PRIu64 ")%s",
	      name, round, PORT_CLOSED, x.op, x.src_cid, x.src_port, x.dst_cid, x.dst_port,
	      x.len, elem >> 32, got ? "" : ": nothing arrived");
}

static void script_checks(const char *name, struct harness *h, struct vs_rig *r)
{
	const struct plan *p = &r->plan;
	char why[320];
	tg_check(h->nrep == r->script.nrep, "%s: ring 3 ran the whole %u-op driver script "
					 "(%u of %u reports)", name, r->script.n, h->nrep,
	      r->script.nrep);
	for (unsigned k = 0; k <= HOSTILE_ROUNDS; k++) {
		int ok = hs_ok(h, &p->hs[k], why, sizeof why);
		tg_check(ok, "%s: round %u: virtio-mmio handshake from ring 3: %s", name, k, why);
	}
	rst_check(name, h, p, 0);

	struct virtio_vsock_hdr x = { 0 };
	uint64_t elem = 0;
	int got = rx_get(h, &p->resp, &x, &elem, NULL, 0);
	tg_check(got && tx_done(h, p->req_tx) && is_pkt(&x, VIRTIO_VSOCK_OP_RESPONSE, PORT_OPEN, 5000, 0),
	      "%s: REQUEST to listening port %u answered by RESPONSE (op %u, ports %u -> %u)",
	      name, PORT_OPEN, x.op, x.src_port, x.dst_port);
	int same = r->peer.got_n == G2H_LEN;
	for (unsigned i = 0; same && i < G2H_LEN; i++)
		same = r->peer.got[i] == g2h_byte(i);
	tg_check(tx_done(h, p->rw_tx) && same,
	      "%s: guest RW of %u bytes reached the Unix socket %s_%u byte-exact (%zu bytes "
	      "read)", name, G2H_LEN, "<dir>/v", PORT_OPEN, r->peer.got_n);
	uint8_t pl[H2G_LEN] = { 0 };
	x = (struct virtio_vsock_hdr){ 0 };
	got = rx_get(h, &p->h2g, &x, &elem, pl, sizeof pl);
	same = got && r->peer.sent == H2G_LEN;
	for (unsigned i = 0; same && i < H2G_LEN; i++)
		same = pl[i] == h2g_byte(i);
	tg_check(same && is_pkt(&x, VIRTIO_VSOCK_OP_RW, PORT_OPEN, 5000, H2G_LEN) &&
		      (elem >> 32) == VIRTIO_VSOCK_HDR_SIZE + H2G_LEN,
	      "%s: host write of %u bytes came to ring 3 as RW, read from rx and reported "
	      "byte-exact (op %u len %u, used len %" PRIu64 ")%s",
	      name, H2G_LEN, x.op, x.len, elem >> 32, got ? "" : ": nothing arrived");
	for (unsigned k = 0; k < HOSTILE_ROUNDS; k++) {
		uint64_t st = 0, after = 1;
		int seen = rep_get(h, p->bad[k], &st) && !(st & POLL_GAVE_UP) &&
			   (st & VIRTIO_STATUS_NEEDS_RESET);
		int reset = rep_get(h, p->reset_status[k], &after) && after == 0;
		tg_check(seen && reset,
		      "%s: round %u: tx chain %s -> Status 0x%" PRIx64 " (DEVICE_NEEDS_RESET), "
		      "Status reads 0x%" PRIx64 " after the driver's reset", name, k + 1,
		      k == 1 ? "that loops" : "pointing outside RAM", st & 0xffffffffu, after);
		rst_check(name, h, p, k + 1);
	}
	uint64_t irqs = 0;
	int have = rep_get(h, p->irqs, &irqs);
	tg_check(have && irqs > 0,
	      "%s: the device's irqfd interrupts reached the guest through the IO-APIC "
	      "(%" PRIu64 " counted in ring 0)", name, irqs);
	unsigned kicks = notifies_in(&r->script);
	tg_check(kicks > 0 && r->notify_exits == 0 && r->reg_writes > 0,
	      "%s: all %u QueueNotify writes went through the ioeventfds to the device thread "
	      "(%u reached the VMM's MMIO handler, which saw %u register writes)",
	      name, kicks, r->notify_exits, r->reg_writes);
	printf("# %s: vsock stats: %" PRIu64 " bad packets, %" PRIu64 " RSTs sent\n", name,
	       r->vs.stats.bad_packets, r->vs.stats.resets_sent);
}

/* ---- watchdog: no run may hang the suite ---- */

#define STOP_GRACE_S 5

struct watchdog {
	struct vm *vm;
	const char *name;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done, fired;
	double seconds;
};

/* Wait until done or the deadline; 1 if the deadline came first. */
static int wait_done(struct watchdog *w, const struct timespec *until)
{
	while (!w->done)
		if (pthread_cond_timedwait(&w->cond, &w->lock, until) == ETIMEDOUT)
			return !w->done;
	return 0;
}

/* Stop the VM at the deadline; if even vm_stop cannot end it (a vCPU that
 * is never kicked out of KVM_RUN), fail the suite here rather than hang. */
static void *watchdog_thread(void *arg)
{
	struct watchdog *w = arg;
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)w->seconds;
	pthread_mutex_lock(&w->lock);
	if (wait_done(w, &until)) {
		w->fired = 1;
		vm_stop(w->vm, VM_END_STOPPED);
		until.tv_sec += STOP_GRACE_S;
		if (wait_done(w, &until)) {
			tg_check(0, "%s: VM still running %d s after vm_stop", w->name, STOP_GRACE_S);
			printf("%u passed, %u failed\n", tg_passed, tg_failed);
			fflush(stdout);
			_exit(1);
		}
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* ---- one test case ---- */

struct tcase {
	const char *name;
	unsigned ncpus;
	enum tg_mode mode;
	enum tg_finish finish;
	unsigned rounds;
	unsigned mmio_pages;
	enum vm_end want;
	double limit_s; /* watchdog; a run that needs it fails */
	unsigned snap_at; /* MODE_EXITS: save at this event of vCPU 0, go on in a fresh VM */
};

static const char *end_name(enum vm_end e)
{
	switch (e) {
	case VM_END_NONE: return "none";
	case VM_END_RESET: return "reset";
	case VM_END_POWEROFF: return "power off";
	case VM_END_TRIPLE_FAULT: return "triple fault";
	case VM_END_STOPPED: return "stopped by the watchdog";
	case VM_END_ERROR: return "error";
	}
	return "?";
}

/* The events vCPU cpu must produce in MODE_EXITS, in order: port I/O from
 * ring 0, then MMIO from ring 3 (see guest.S for why). */
static unsigned expected_exits(unsigned cpu, unsigned rounds, struct ev *out, unsigned max)
{
	unsigned n = 0;
	uint32_t p = 16 * cpu, m = 0x1000 * cpu;
#define PUT(...) do { if (n < max) out[n] = (struct ev){ __VA_ARGS__ }; n++; } while (0)
	PUT(EV_PIO_OUT, 1, p, cpu);
	for (unsigned k = 0; k < rounds; k++) {
		for (unsigned b = 0; b < 4; b++)
			PUT(EV_PIO_OUT, 1, p + 4 + b, (uint8_t)(xval(cpu, k) >> (8 * b)));
		for (unsigned b = 0; b < 4; b++)
			PUT(EV_PIO_IN, 1, p + 8 + b, (uint8_t)(yval(cpu, k) >> (8 * b)));
	}
	for (unsigned i = 0; i < STR_LEN; i++)
		PUT(EV_PIO_IN, 1, p + 12, str_val(cpu, i));
	for (unsigned i = 0; i < STR_LEN; i++)
		PUT(EV_PIO_OUT, 1, p + 13, str_val(cpu, i));
	PUT(EV_MMIO_W, 4, m, cpu);
	for (unsigned k = 0; k < rounds; k++) {
		PUT(EV_MMIO_W, 8, m + 8, mmio_xval(cpu, k));
		PUT(EV_MMIO_R, 4, m + 0x10, mmio_yval(cpu, k));
	}
	PUT(EV_MMIO_W, 1, m + 0x18, 0);
#undef PUT
	return n;
}

static const char *kind_name(uint8_t k)
{
	static const char *names[] = { "port out", "port in", "mmio write", "mmio read" };
	return k < 4 ? names[k] : "?";
}

static int same_ev(const struct ev *a, const struct ev *b)
{
	return a->kind == b->kind && a->len == b->len && a->off == b->off && a->val == b->val;
}

static void check_sequence(const struct tcase *t, struct harness *h, unsigned cpu)
{
	static struct ev want[LOG_MAX];
	const struct cpu_log *l = &h->log[cpu];
	unsigned nwant = expected_exits(cpu, t->rounds, want, LOG_MAX);
	if (l->overflow || nwant > LOG_MAX) {
		tg_check(0, "%s: vCPU %u: more exits than the log holds", t->name, cpu);
		return;
	}
	unsigned i = 0;
	while (i < l->n && i < nwant && same_ev(&l->ev[i], &want[i]))
		i++;
	if (i == nwant && i == l->n) {
		tg_check(1, "%s: vCPU %u: exact sequence of %u exits (port and MMIO, out and in)",
		      t->name, cpu, nwant);
		return;
	}
	if (i < l->n && i < nwant)
		tg_check(0, "%s: vCPU %u: exit %u is %s +0x%x len %u = 0x%" PRIx64
			 ", expected %s +0x%x len %u = 0x%" PRIx64,
		      t->name, cpu, i, kind_name(l->ev[i].kind), l->ev[i].off, l->ev[i].len,
		      l->ev[i].val, kind_name(want[i].kind), want[i].off, want[i].len,
		      want[i].val);
	else
		tg_check(0, "%s: vCPU %u: %u exits seen, %u expected (first %u match)", t->name,
		      cpu, l->n, nwant, i);
}

static int add_test_devices(struct vm *vm, struct harness *h)
{
	int rc = vm_add_pio(vm, &(struct vm_pio){ TG_PORT, TG_PORT_LEN, test_pio_in, test_pio_out,
						  h });
	rc |= vm_add_pio(vm, &(struct vm_pio){ TG_EXC_PORT, TG_EXC_LEN, exc_in, exc_out, h });
	rc |= vm_add_pio(vm, &(struct vm_pio){ COM1, 8, uart_in, uart_out, &h->uart });
	rc |= vm_add_mmio(vm, &(struct vm_mmio){ TG_MMIO, TG_MMIO_LEN, test_mmio_read,
						 test_mmio_write, h });
	return rc;
}

/* ---- snapshots: pause, save, go on in a fresh VM ----
 *
 * The test devices' answers count on (pio_k, mmio_k, str_n per vCPU): that
 * is their state outside guest RAM, saved as their device blob. */

#define SNAPSHOT_DEV_LEN (TG_MAX_CPUS * 12u)

static int testdev_save(void *ctx, struct statebuf_writer *w, char *err, size_t errlen)
{
	struct harness *h = ctx;
	for (unsigned c = 0; c < TG_MAX_CPUS; c++) {
		statebuf_u32(w, h->log[c].pio_k);
		statebuf_u32(w, h->log[c].mmio_k);
		statebuf_u32(w, h->log[c].str_n);
	}
	return 0;
}

static int testdev_load(void *ctx, const uint8_t *blob, size_t len, char *err, size_t errlen)
{
	struct harness *h = ctx;
	if (len != SNAPSHOT_DEV_LEN) {
		snprintf(err, errlen, "test device state is %zu bytes, want %u", len, SNAPSHOT_DEV_LEN);
		return -EINVAL;
	}
	struct statebuf_reader r;
	statebuf_reader_init(&r, blob, len);
	for (unsigned c = 0; c < TG_MAX_CPUS; c++) {
		h->log[c].pio_k = statebuf_get_u32(&r);
		h->log[c].mmio_k = statebuf_get_u32(&r);
		h->log[c].str_n = statebuf_get_u32(&r);
	}
	return 0;
}

/* Whether the mapping holding addr is a private one of a file named name. */
static int mapped_from(const void *addr, const char *name)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;
	uintptr_t a = (uintptr_t)addr;
	while (f && !found && fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && a >= lo && a < hi)
			found = perms[3] == 'p' && strstr(line, name) != NULL ? 1 : -1;
	}
	if (f)
		fclose(f);
	return found == 1;
}

/* vCPU 0's TSC as the guest reads it, or 0. */
static uint64_t guest_tsc(struct vm *vm)
{
	struct {
		struct kvm_msrs h;
		struct kvm_msr_entry e;
	} m = { .h.nmsrs = 1, .e.index = 0x10 };
	return ioctl(vm->cpu[0].fd, KVM_GET_MSRS, &m) == 1 ? m.e.data : 0;
}

/* Set every vCPU's TSC as a VMM may (host-initiated).  Returns 0 or -1. */
static int set_guest_tsc(struct vm *vm, uint64_t v)
{
	for (unsigned i = 0; i < vm->ncpus; i++) {
		struct {
			struct kvm_msrs h;
			struct kvm_msr_entry e;
		} m = { .h.nmsrs = 1, .e = { .index = 0x10, .data = v } };
		if (ioctl(vm->cpu[i].fd, KVM_SET_MSRS, &m) != 1)
			return -1;
	}
	return 0;
}

#define SNAP_SHELF_MS 300 /* the snapshot's time "on disk" */
/* The snapshot cases start the guest's TSC this far on, as if it had run
 * that long: KVM takes a TSC written within a second of the one it
 * expects as an attempt to synchronise vCPUs and keeps its own, which a
 * template that booted for seconds never meets but a test guest of a few
 * milliseconds would. */
#define SNAP_TSC_START_S 10

/* The VM stopped at h->snap_at: save it, destroy it, make a fresh VM,
 * restore the file into it and run that to the end.  Returns how the
 * second VM ended (VM_END_ERROR when it could not start). */
static enum vm_end snap_resume(const struct tcase *t, struct vm *vm, struct harness *h,
			       enum vm_end first)
{
	static int probed;
	char err[512] = "", report[512] = "", dir[] = "/tmp/kbox-snap-XXXXXX", path[64];
	uint8_t key[SNAPSHOT_FILE_KEY_LEN], bad[SNAPSHOT_FILE_KEY_LEN];
	memset(key, 0x5a, sizeof key);
	memcpy(bad, key, sizeof bad);
	bad[7] ^= 1;
	const struct snapshot_dev dev = { "testdev", 3, h, testdev_save, testdev_load };
	struct snapshot_stats ss, rs;
	enum vm_end end = VM_END_ERROR;

	int prc = snapshot_probe(vm, report, sizeof report, err, sizeof err);
	if (!probed++)
		printf("# snapshot capabilities of this /dev/kvm: %s\n", report);
	if (!tg_check(prc == 0, "%s: /dev/kvm has what snapshots need%s%s", t->name,
		      prc ? ": " : "", err))
		return end;
	if (!tg_check(first == VM_END_STOPPED && h->snap_fired,
		      "%s: paused at event %u of vCPU 0 (the first VM ended: %s)", t->name,
		      t->snap_at, first == VM_END_STOPPED ? "stopped" : end_name(first)))
		return end;
	if (!tg_check(mkdtemp(dir) != NULL, "%s: private folder for the snapshot", t->name))
		return end;
	snprintf(path, sizeof path, "%s/t", dir);
	unsigned khz = vm_tsc_khz(vm);
	uint64_t tsc0 = guest_tsc(vm);
	double h0 = tg_now();
	int rc = snapshot_save(vm, key, &dev, 1, dir, "t", &ss, err, sizeof err);
	tg_check(rc == 0, "%s: saved %u vCPUs, %u MSRs each, XSAVE %u bytes, in %.1f ms (state "
			  "%.1f ms): file %" PRIu64 " KiB, %" PRIu64 " KiB on disk%s%s",
		 t->name, vm->ncpus, ss.msrs, ss.xsave_bytes, ss.ms, ss.state_ms,
		 ss.file_bytes >> 10, ss.disk_bytes >> 10, rc ? ": " : "", err);
	unsigned ncpus = vm->ncpus;
	uint64_t mib = vm->ram_size >> 20;
	vm_destroy(vm);
	usleep(SNAP_SHELF_MS * 1000);
	/* What the devices counted so far must come back from the file. */
	for (unsigned c = 0; c < TG_MAX_CPUS; c++)
		h->log[c].pio_k = h->log[c].mmio_k = h->log[c].str_n = 0xdead;
	if (rc == 0 && vm_create(vm, ncpus, mib, err, sizeof err) < 0)
		rc = tg_check(0, "%s: fresh VM: %s", t->name, err) - 1;
	if (rc == 0 && add_test_devices(vm, h) != 0)
		rc = tg_check(0, "%s: fresh VM: cannot register the test devices", t->name) - 1;
	if (rc == 0) {
		int wrong = snapshot_restore(vm, bad, &dev, 1, dir, "t", NULL, err, sizeof err);
		tg_check(wrong == -ESTALE, "%s: a restore under another layout key is refused (%s)",
			 t->name, err);
		err[0] = 0;
		rc = snapshot_restore(vm, key, &dev, 1, dir, "t", &rs, err, sizeof err);
		tg_check(rc == 0, "%s: restored into a fresh VM in %.1f ms (state %.1f ms)%s%s",
			 t->name, rs.ms, rs.state_ms, rc ? ": " : "", err);
	}
	if (rc == 0)
		tg_check(mapped_from(vm->ram, path),
			 "%s: guest RAM is a private (copy-on-write) mapping of the file", t->name);
	if (rc == 0 && khz) {
		/* On hardware KVM the guest's TSC goes on from the save: the
		 * time the VM spent saved, destroyed and on the shelf never
		 * reaches it.  PVM runs the guest's rdtsc natively, with no
		 * offset, so its TSC is the host's and takes the shelf time
		 * too (docs/snapshots.md). */
		uint64_t tsc1 = guest_tsc(vm);
		double host_ms = (tg_now() - h0) * 1e3;
		double guest_ms = (double)(int64_t)(tsc1 - tsc0) / khz;
		if (vm_is_pvm())
			tg_check(tsc0 && tsc1 && guest_ms > host_ms * 0.9 && guest_ms < host_ms * 1.1,
				 "%s: PVM: the restored guest's TSC is the host's, as before the "
				 "save (%.1f ms later for it, %.1f ms for the host)",
				 t->name, guest_ms, host_ms);
		else
			tg_check(tsc0 && tsc1 && guest_ms >= 0 &&
					 guest_ms < host_ms - SNAP_SHELF_MS * 0.8,
				 "%s: the restored guest's TSC went on from the saved one: %.1f ms "
				 "later for it, %.1f ms for the host", t->name, guest_ms, host_ms);
	}
	if (rc == 0) {
		double t0 = tg_now();
		end = vm_run(vm);
		printf("# %s: the restored VM ran %.3f s\n", t->name, tg_now() - t0);
	}
	unlink(path);
	rmdir(dir);
	return end;
}

static void run_case(const struct tcase *t, const char *guest_path)
{
	static struct vm vm;
	static struct harness h;
	static struct virtio_bus bus;
	static struct echo_dev echo;
	static struct vs_rig rig;
	int bus_made = 0, rig_made = 0;
	char err[512] = "";
	size_t img_len = 0;
	char *img_text = NULL;
	int rr = fileio_slurp(guest_path, 0, GUEST_IMAGE_MAX, &img_text, &img_len, NULL, NULL);
	uint8_t *img = (uint8_t *)img_text;
	if (!tg_check(rr == 0, "%s: read %s: %s", t->name, guest_path, strerror(-rr)))
		return;

	memset(&h, 0, sizeof h);
	pthread_mutex_init(&h.lock, NULL);
	h.vm = &vm;
	h.garbage = t->mode == MODE_GARBAGE;
	h.snap_at = t->snap_at;
	h.uart_irq = (struct line_irq){ { line_irq_set }, &vm, COM1_IRQ };
	serial_init(&h.uart, &h.uart_irq.sink, uart_capture, &h);

	int ok = vm_create(&vm, t->ncpus, 64, err, sizeof err) == 0;
	struct boot_image k;
	if (ok)
		ok = boot_load_kernel(&vm.mem, img, img_len, &k, err, sizeof err) == 0;
	struct boot_setup bs = { .low_ram = vm.low_ram, .high_ram = vm.high_ram,
				 .cmdline = "kbox-test-guest" };
	if (ok)
		ok = boot_write_params(&vm.mem, &k, &bs, err, sizeof err) == 0;
	if (ok && mptable_write(&vm.mem, t->ncpus) < 0) {
		snprintf(err, sizeof err, "mptable_write failed");
		ok = 0;
	}
	/* The configuration block must be where guest.S put it. */
	struct tg_cfg cfg;
	if (ok && (guest_mem_read(&vm.mem, &cfg, TG_CFG_ADDR, sizeof cfg) < 0 ||
		   cfg.magic != TG_CFG_MAGIC)) {
		snprintf(err, sizeof err, "no configuration block at 0x%llx in the guest",
			 TG_CFG_ADDR);
		ok = 0;
	}
	if (ok) {
		cfg = (struct tg_cfg){
			.magic = TG_CFG_MAGIC, .ncpus = t->ncpus, .mode = t->mode,
			.finish = t->finish, .rounds = t->rounds, .seed = 0x2545f491u,
			.mmio_pages = t->mmio_pages, .exit_digit = 5, .mmio_base = TG_MMIO,
			.virtio_base = VIRTIO_BUS_BASE, .virtio_hits = t->mode == MODE_GARBAGE ? 4096 : 0,
			.virtio_irq = VIRTIO_BUS_FIRST_IRQ, .script = SCRIPT_ADDR,
		};
		ok = guest_mem_write(&vm.mem, TG_CFG_ADDR, &cfg, sizeof cfg) == 0;
	}
	if (ok) {
		int rc = add_test_devices(&vm, &h);
		if (rc)
			snprintf(err, sizeof err, "cannot register the test devices");
		ok = rc == 0;
	}
	if (ok && t->mode == MODE_GARBAGE) {
		memset(&echo, 0, sizeof echo);
		virtqueue_init(&echo.q[0], 64);
		echo.dev = (struct virtqueue_dev){ .ops = &echo_ops, .device_id = 0x7f, .nr_queues = 1,
					    .vqs = echo.q };
		char cmdline[128] = "";
		ok = virtio_bus_init(&bus, &vm) == 0;
		bus_made = ok;
		if (ok)
			ok = virtio_bus_add(&bus, &echo.dev, NULL, cmdline, sizeof cmdline, err,
				      sizeof err) == 0 && virtio_bus_start(&bus) == 0;
		if (!ok && !err[0])
			snprintf(err, sizeof err, "cannot start the virtio-mmio bus");
	}
	if (ok && t->mode == MODE_SCRIPT) {
		ok = virtio_bus_init(&bus, &vm) == 0;
		bus_made = ok;
		if (ok) {
			rig_made = 1;
			ok = rig_setup(&rig, &vm, &bus, err, sizeof err) == 0 &&
			     virtio_bus_start(&bus) == 0;
		}
		if (!ok && !err[0])
			snprintf(err, sizeof err, "cannot start the virtio-mmio bus");
	}
	if (ok)
		ok = vm_setup_cpus(&vm, k.entry, err, sizeof err) == 0;
	if (ok && t->snap_at && vm_tsc_khz(&vm) &&
	    set_guest_tsc(&vm, (uint64_t)SNAP_TSC_START_S * 1000 * vm_tsc_khz(&vm)) < 0) {
		snprintf(err, sizeof err, "cannot set the guest's TSC");
		ok = 0;
	}
	if (!tg_check(ok, "%s: set up a %u-vCPU VM%s%s", t->name, t->ncpus, ok ? "" : ": ",
		   err)) {
		if (bus_made)
			virtio_bus_stop(&bus);
		if (rig_made)
			rig_teardown(&rig);
		if (bus_made)
			virtio_bus_destroy(&bus);
		vm_destroy(&vm);
		serial_destroy(&h.uart);
		pthread_mutex_destroy(&h.lock);
		free(img);
		return;
	}

	struct watchdog w = { .vm = &vm, .name = t->name, .seconds = t->limit_s * timeout_mult() };
	pthread_mutex_init(&w.lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w.cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_t wt;
	int have_wd = pthread_create(&wt, NULL, watchdog_thread, &w) == 0;

	double t0 = tg_now();
	enum vm_end end = vm_run(&vm);
	if (t->snap_at)
		end = snap_resume(t, &vm, &h, end);
	double dt = tg_now() - t0;

	if (have_wd) {
		pthread_mutex_lock(&w.lock);
		w.done = 1;
		pthread_cond_signal(&w.cond);
		pthread_mutex_unlock(&w.lock);
		pthread_join(wt, NULL);
	}
	tg_check(have_wd, "%s: watchdog armed (%.0f s)", t->name, w.seconds);
	tg_check(end == t->want && !w.fired, "%s: VM ended by %s (want %s) after %.3f s%s%s",
	      t->name, end_name(end), end_name(t->want), dt, end == VM_END_ERROR ? ": " : "",
	      end == VM_END_ERROR ? vm.error : "");

	if (t->mode == MODE_EXITS) {
		for (unsigned c = 0; c < t->ncpus; c++)
			check_sequence(t, &h, c);
		unsigned reported = 0;
		for (unsigned c = 0; c < t->ncpus; c++)
			reported += h.log[c].n > 0 && h.log[c].ev[0].kind == EV_PIO_OUT &&
				    h.log[c].ev[0].off == 16 * c && h.log[c].ev[0].val == c;
		tg_check(reported == t->ncpus, "%s: %u of %u vCPUs reported in ring 3", t->name,
		      reported, t->ncpus);
	}
	if (t->mode == MODE_FAULT) {
		/* Ring 0 says hello, ring 3 where it will fault, then faults. */
		const struct cpu_log *l = &h.log[0];
		uint64_t where = l->n == 2 && l->ev[1].kind == EV_MMIO_W && l->ev[1].len == 8 &&
					 l->ev[1].off == 0x20
				 ? l->ev[1].val : 0;
		tg_check(l->n == 2 && l->ev[0].kind == EV_PIO_OUT && where != 0,
		      "%s: ring 0 said hello, ring 3 said where it will fault", t->name);
		tg_check(h.exc_count == 1 && h.exc.vec == 13 && h.exc.err == 0 &&
			      h.exc.cs == TG_SEL_UCODE && h.exc.cpu == 0 && h.exc.rip == where,
		      "%s: hlt at CPL 3 delivered as #GP(0) from CS 0x%x at 0x%" PRIx64
		      " (got %u report(s): vector %u error %u CS 0x%x cpu %u RIP 0x%" PRIx64 ")",
		      t->name, TG_SEL_UCODE, where, h.exc_count, h.exc.vec, h.exc.err, h.exc.cs,
		      h.exc.cpu, h.exc.rip);
	} else if (t->mode == MODE_IOPL) {
		/* iretq asked for IOPL 3 with interrupts off; hardware KVM gives
		 * exactly that and lets `out` through, PVM was seen to give
		 * IOPL 0 and IF 1 and to raise #GP.  Either is a consistent
		 * machine; anything else is not. */
		const struct cpu_log *l = &h.log[0];
		uint64_t flags = l->n >= 3 && l->ev[1].kind == EV_MMIO_W && l->ev[1].off == 0x30
				 ? l->ev[1].val : 0;
		uint64_t where = l->n >= 3 && l->ev[2].kind == EV_MMIO_W && l->ev[2].off == 0x20
				 ? l->ev[2].val : 0;
		unsigned iopl = (unsigned)(flags >> 12) & 3;
		int got_out = l->n == 4 && l->ev[3].kind == EV_PIO_OUT && l->ev[3].off == 14 &&
			      l->ev[3].val == 0x5a;
		int got_gp = l->n == 3 && h.exc_count == 1 && h.exc.vec == 13 && h.exc.err == 0 &&
			     h.exc.cs == TG_SEL_UCODE && h.exc.rip == where;
		printf("# ring 3 runs with RFLAGS 0x%" PRIx64 " (IOPL %u, IF %u) after iretq "
		       "with 0x3002; `out` there %s\n", flags, iopl, (unsigned)(flags >> 9) & 1,
		       got_out ? "reaches the VMM" : got_gp ? "raises #GP(0)" : "does neither");
		tg_check(where != 0 && (iopl == 3 ? got_out && h.exc_count == 0 : got_gp),
		      "%s: ring-3 port I/O obeys the IOPL ring 3 really has (IOPL %u: %s)",
		      t->name, iopl, got_out ? "exit" : got_gp ? "#GP" : "neither");
	} else {
		if (t->mode == MODE_SCRIPT)
			script_checks(t->name, &h, &rig);
		tg_check(h.exc_count == 0, "%s: no exception in the guest%s", t->name,
		      h.exc_count ? " (one was reported)" : "");
		if (h.exc_count)
			printf("       vector %u error 0x%x RIP 0x%" PRIx64 " CS 0x%x vCPU %u\n",
			       h.exc.vec, h.exc.err, h.exc.rip, h.exc.cs, h.exc.cpu);
	}
	if (t->want == VM_END_RESET && (t->mode == MODE_EXITS || t->mode == MODE_GARBAGE))
		/* finish_gate's ring-0 path prints the exit line for kbox. */
		tg_check(strstr(h.uart_tail, EXIT_LINE) != NULL,
		      "%s: UART carried the guest's kbox-exit=5 line (%" PRIu64 " bytes out)",
		      t->name, h.uart_bytes);
	if (t->mode == MODE_GARBAGE) {
		unsigned done = 0;
		for (unsigned c = 0; c < t->ncpus; c++)
			done += h.log[c].done;
		tg_check(done == t->ncpus, "%s: %u of %u vCPUs done with garbage (together all 65536 "
					"ports; %u MMIO pages each)",
		      t->name, done, t->ncpus, t->mmio_pages);
		tg_check(h.garbage_events > 0, "%s: garbage reached the test devices (%" PRIu64
					    " accesses)", t->name, h.garbage_events);
		/* With one vCPU nothing can disturb the line between the guest
		 * setting it up and its 4096-byte rep outsb; with more, another
		 * vCPU's garbage may (set DLAB, loopback), so only count then.
		 * The sweep itself adds a few THR bytes on top. */
		uint64_t want = 4096 + sizeof EXIT_LINE - 1;
		if (t->ncpus == 1)
			tg_check(h.uart_bytes >= want, "%s: rep outsb of 4096 bytes reached the UART "
						    "byte for byte (%" PRIu64 " out, at least %" PRIu64
						    " expected)", t->name, h.uart_bytes, want);
		else
			printf("# %s: %" PRIu64 " bytes came out of the UART\n", t->name,
			       h.uart_bytes);
	}
	unsigned wrong = 0;
	for (unsigned c = 0; c < TG_MAX_CPUS; c++)
		wrong += h.log[c].wrong_thread;
	tg_check(wrong == 0, "%s: every access came from its own vCPU's thread (%u did not)",
	      t->name, wrong);

	if (bus_made) {
		virtio_bus_stop(&bus);
		if (t->mode == MODE_GARBAGE)
			printf("# %s: virtio-mmio echo device: status 0x%x, %u notifies, %u "
			       "chains, %d ring errors\n", t->name, bus.slot[0].t.status,
			       echo.notifies, echo.chains, echo.errors);
		if (rig_made)
			rig_teardown(&rig);
		virtio_bus_destroy(&bus);
	}
	vm_destroy(&vm);
	serial_destroy(&h.uart);
	pthread_mutex_destroy(&h.lock);
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.cond);
	free(img);
}

static const struct tcase cases[] = {
	{ "exits-1cpu", 1, MODE_EXITS, FINISH_RESET, 64, 0, VM_END_RESET, 20, 0 },
	{ "exits-2cpu", 2, MODE_EXITS, FINISH_RESET, 64, 0, VM_END_RESET, 20, 0 },
	{ "exits-4cpu", 4, MODE_EXITS, FINISH_RESET, 64, 0, VM_END_RESET, 20, 0 },
	{ "triple-1cpu", 1, MODE_EXITS, FINISH_TRIPLE, 8, 0, VM_END_TRIPLE_FAULT, 20, 0 },
	{ "triple-2cpu", 2, MODE_EXITS, FINISH_TRIPLE, 8, 0, VM_END_TRIPLE_FAULT, 20, 0 },
	{ "fault-1cpu", 1, MODE_FAULT, FINISH_RESET, 0, 0, VM_END_RESET, 20, 0 },
	{ "iopl-1cpu", 1, MODE_IOPL, FINISH_RESET, 0, 0, VM_END_RESET, 20, 0 },
	{ "vsock-1cpu", 1, MODE_SCRIPT, FINISH_RESET, 0, 0, VM_END_RESET, 30, 0 },
	{ "garbage-1cpu", 1, MODE_GARBAGE, FINISH_RESET, 0, 4096, VM_END_RESET, 30, 0 },
	{ "garbage-2cpu", 2, MODE_GARBAGE, FINISH_RESET, 0, 4096, VM_END_RESET, 30, 0 },
	/* The VMM that took the garbage runs a clean guest again. */
	{ "exits-after-garbage", 2, MODE_EXITS, FINISH_RESET, 16, 0, VM_END_RESET, 20, 0 },
	/* Saved mid-run and resumed in a fresh VM: the exact sequence of
	 * exits must go on where it stopped.  At 684 vCPU 0 is in ring 3,
	 * its MMIO read of round 20 answered but not yet completed; at 200
	 * in ring 0, inside a 4-byte port read; at 1 the second vCPU may not
	 * have taken its INIT and SIPI yet. */
	{ "snapshot-ring3-1cpu", 1, MODE_EXITS, FINISH_RESET, 64, 0, VM_END_RESET, 30, 684 },
	{ "snapshot-ring0-2cpu", 2, MODE_EXITS, FINISH_RESET, 64, 0, VM_END_RESET, 30, 200 },
	{ "snapshot-sipi-2cpu", 2, MODE_EXITS, FINISH_RESET, 64, 0, VM_END_RESET, 30, 1 },
};

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s GUEST.elf [CASE]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct stat st;
	if (stat("/dev/kvm", &st) != 0) {
		printf("skip - /dev/kvm is absent: KVM-level tests need a KVM host\n");
		printf("0 passed, 0 failed\n");
		return 0;
	}
	/* Backstop for a hang the watchdogs cannot reach (e.g. in vm_create). */
	alarm(120 * timeout_mult());
	printf("# /dev/kvm is %s\n", vm_is_pvm() ? "PVM (ring 0 emulated)" : "hardware KVM");
	unsigned ran = 0;
	double t0 = tg_now();
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (argc == 3 && strcmp(argv[2], cases[i].name) != 0)
			continue;
		if (skipped(cases[i].name)) {
			printf("skip - %s: named in KBOX_HARNESS_SKIP (%s)\n", cases[i].name,
			       getenv("KBOX_HARNESS_SKIP_WHY") ? getenv("KBOX_HARNESS_SKIP_WHY")
							    : "no reason given");
			continue;
		}
		run_case(&cases[i], argv[1]);
		ran++;
	}
	if (argc == 3 && ran == 0)
		tg_check(0, "no case named %s", argv[2]);
	printf("# all cases: %.2f s\n", tg_now() - t0);
	printf("%u passed, %u failed\n", tg_passed, tg_failed);
	return tg_failed ? 1 : 0;
}
