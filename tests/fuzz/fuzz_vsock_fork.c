/* libFuzzer target for the vsock fork state (virtio_vsock.c: vs_fork_save,
 * vs_fork_load, vs_restored) through the bus's fork path (virtio_bus.c,
 * slot_save_mode and slot_load_mode: the transport's state, then the
 * device's fork state, then restored), over fake guest RAM that the copy
 * shares with its original as a fork's copy does.
 *
 * The first byte is a mode.  A source device is brought up (with event
 * index when bit 4 is set) and driven by a script (guest-made and
 * host-made connections, guest packets, host sends and closes, rx
 * buffers), then saved as kbox fork saves it.  The
 * blob is then changed: bit 0 puts raw script bytes in place of the fork
 * state (bit 1 writes a valid header over them, so that arbitrary pairs
 * get in), bytes are flipped in the fork state (bit 2) or anywhere, and
 * (bit 3) the blob is cut.  The fork state is also loaded straight into
 * a bare device, which must take it exactly when its layout is right
 * (version 1, next port >= the ephemeral base, at most 128 pairs, nothing
 * after them) and, when it refuses, stay unchanged.  The blob then goes
 * into a fresh device through the bus; a refusal leaves it with no
 * connection and no reset owed.
 *
 * On an accepted load, unless bit 5 is set, the copy is given rx buffers
 * until it owes nothing: it must have sent one RST per pair of the state
 * and nothing else.  Then the rest of the script drives the copy (guest
 * packets on the state's pairs and others, rx buffers, host connects,
 * sends and closes, a driver reset).  Every RST the copy sends must name
 * a pair of the state, of a packet the guest sent it, or of a connection
 * its host side made; while the transport's bytes are the original's, the
 * copy never uses an rx buffer it was not given, nor one twice, nor writes
 * past one.  Nothing may crash, leak or loop. */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio_mmio.h"
#include "devices/virtio_mmio_state.h"
#include "devices/virtio_vsock.h"
#include "lib/statebuf.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/fake_vsock.h"
#include "tests/lib/fuzz_script.h"
#include "vmm/core/snapshot.h"
#include "vmm/core/virtio_bus.h"

#define RXQ 0u
#define TXQ 1u
/* The fork state's header: version, next port, count; then 8 per pair. */
#define FORK_HDR 12u
#define FORK_MAX_PAIRS (VIRTIO_VSOCK_MAX_CONNS + VIRTIO_VSOCK_MAX_RST)

static void check(int ok)
{
	if (!ok)
		abort();
}

/* One device on a bus of its own: the bus's fork hooks reach it through
 * the slot, as virtio_bus_fork_devs hands them to kbox fork. */
struct dev {
	struct virtio_bus bus;
	struct virtio_vsock vs;
	struct snapshot_dev sd;
};

static struct fv_driver drv;
static struct dev devs[2];

/* The driver's view of the rx ring: buffers given and not yet used. */
static bool outstanding[QSIZE];
static uint32_t buflen[QSIZE];
static unsigned n_out;
/* Whether the copy's transport state is the original's, byte for byte. */
static bool strict;

/* Pairs the copy may send an RST for. */
struct pair {
	uint32_t local, peer;
};
static struct pair allowed[FORK_MAX_PAIRS + 1024];
static unsigned n_allowed;
/* The state's pairs, each to be answered once by the completeness phase. */
static struct pair owed[FORK_MAX_PAIRS];
static bool owed_sent[FORK_MAX_PAIRS];
static unsigned n_owed;
static bool collecting;

static void allow(uint32_t local, uint32_t peer)
{
	if (n_allowed < sizeof allowed / sizeof allowed[0])
		allowed[n_allowed++] = (struct pair){ local, peer };
	else
		allowed[n_allowed - 1] = (struct pair){ local, peer }; /* still checked, less */
}

static bool is_allowed(uint32_t local, uint32_t peer)
{
	for (unsigned i = 0; i < n_allowed; i++)
		if (allowed[i].local == local && allowed[i].peer == peer)
			return true;
	return false;
}

/* ---- backend: accepts even ports, reads what arrives on peer ports
 * with bit 1 set, closes on a full shutdown ---- */

static int b_request(void *ctx, struct virtio_vsock_conn *c, uint32_t port)
{
	return port & 1 ? -ECONNREFUSED : 0;
}

static void b_shutdown(void *ctx, struct virtio_vsock_conn *c, uint32_t flags)
{
	if (flags == (VIRTIO_VSOCK_SHUT_RCV | VIRTIO_VSOCK_SHUT_SEND))
		virtio_vsock_host_close(ctx, c);
}

static void b_readable(void *ctx, struct virtio_vsock_conn *c)
{
	uint8_t buf[512];
	if (c->peer_port & 2)
		virtio_vsock_host_recv(ctx, c, buf, sizeof buf);
}

static const struct virtio_vsock_backend backend = {
	.connect_request = b_request,
	.shutdown = b_shutdown,
	.readable = b_readable,
};

static void dev_make(struct dev *d)
{
	memset(&d->bus, 0, sizeof d->bus);
	pthread_mutex_init(&d->bus.lock, NULL);
	d->bus.n = 1;
	d->bus.stop_fd = -1;
	d->bus.slot[0].bus = &d->bus;
	d->bus.slot[0].irqfd = -1;
	check(virtio_vsock_init(&d->vs, CID, &backend, &d->vs) == 0);
	check(virtio_mmio_init(&d->bus.slot[0].t, &d->vs.dev, &drv.gm, NULL) == 0);
	d->bus.slot[0].nq = d->vs.dev.nr_queues;
	check(virtio_bus_fork_devs(&d->bus, &d->sd, 1) == 1);
}

static void dev_free(struct dev *d)
{
	virtio_vsock_destroy(&d->vs);
	pthread_mutex_destroy(&d->bus.lock);
}

static unsigned open_conns(const struct virtio_vsock *v)
{
	unsigned n = 0;
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++)
		n += v->conns[i].state != VIRTIO_VSOCK_FREE;
	return n;
}

/* ---- the driver ---- */

static void driver_up(bool event_idx)
{
	memset(outstanding, 0, sizeof outstanding);
	n_out = 0;
	for (unsigned q = 0; q < FV_MAX_QUEUES; q++)
		drv.q[q].used_seen = drv.q[q].next_desc = 0;
	/* Whether the device comes up is not this target's question. */
	fv_driver_up(&drv, 1ull << VIRTIO_F_VERSION_1 | (event_idx ? 1ull << VIRTIO_F_EVENT_IDX : 0),
		     3, QSIZE);
}

/* Take what the device gave back on rx (checking it) and on tx. */
static void drain(struct virtio_vsock *v)
{
	uint32_t id, len;
	check((uint16_t)(fv_avail_idx(&drv, RXQ) - fv_r16(&drv, drv.q[RXQ].used + 2)) <= QSIZE ||
	      !strict);
	while (fv_used(&drv, RXQ, &id, &len)) {
		check(id < QSIZE);
		if (strict) {
			check(outstanding[id]);
			check(len >= VIRTIO_VSOCK_HDR_SIZE && len <= buflen[id]);
			outstanding[id] = false;
			n_out--;
		} else if (outstanding[id]) {
			outstanding[id] = false;
			n_out--;
		}
		struct virtio_vsock_hdr h;
		virtio_vsock_hdr_decode(&h, fv_at(&drv, RXBUF + RXSLOT * id, VIRTIO_VSOCK_HDR_SIZE));
		if (v && len >= VIRTIO_VSOCK_HDR_SIZE) {
			check(h.src_cid == VIRTIO_VSOCK_HOST_CID && h.dst_cid == CID &&
			      h.type == VIRTIO_VSOCK_TYPE_STREAM);
			if (h.op == VIRTIO_VSOCK_OP_RST) {
				check(is_allowed(h.src_port, h.dst_port));
				if (collecting) {
					unsigned i = 0;
					while (i < n_owed && (owed_sent[i] || owed[i].local != h.src_port ||
							      owed[i].peer != h.dst_port))
						i++;
					check(i < n_owed); /* no RST beyond the state's */
					owed_sent[i] = true;
				}
			} else {
				check(!collecting); /* the copy has no connection yet */
			}
		}
	}
	while (fv_used(&drv, TXQ, NULL, NULL))
		;
}

/* Offer up to n rx buffers (len bytes, or just a header's worth when
 * small) in the free slots, then kick unless quiet. */
static void rx_fill(unsigned n, bool small, bool quiet)
{
	for (unsigned i = 0; i < n && n_out < QSIZE; i++) {
		uint16_t s = fv_avail_idx(&drv, RXQ) % QSIZE;
		if (outstanding[s])
			break;
		uint32_t len = small ? VIRTIO_VSOCK_HDR_SIZE + i % 8 : RXLEN;
		fv_desc(&drv, drv.q[RXQ].desc, s, RXBUF + RXSLOT * s, len, FV_DESC_F_WRITE, 0);
		buflen[s] = len;
		outstanding[s] = true;
		n_out++;
		fv_offer(&drv, RXQ, s);
	}
	if (!quiet)
		fv_kick(&drv, RXQ);
}

/* One guest packet on tx: header fields as given, plen bytes of payload. */
static void tx_send(struct virtio_vsock_hdr *h, struct fz_input *in, uint16_t plen)
{
	virtio_vsock_hdr_encode(fv_at(&drv, TXBUF, VIRTIO_VSOCK_HDR_SIZE), h);
	fz_take(in, fv_at(&drv, TXBUF + 0x100, plen), plen);
	uint16_t s = (fv_avail_idx(&drv, TXQ) % (QSIZE / 2)) * 2;
	fv_desc(&drv, drv.q[TXQ].desc, s, TXBUF, VIRTIO_VSOCK_HDR_SIZE, plen ? FV_DESC_F_NEXT : 0,
		s + 1);
	fv_desc(&drv, drv.q[TXQ].desc, s + 1, TXBUF + 0x100, plen ? plen : 1, 0, 0);
	fv_offer(&drv, TXQ, s);
	fv_kick(&drv, TXQ);
}

static struct virtio_vsock_conn *pick(struct virtio_vsock *v, uint8_t k)
{
	struct virtio_vsock_conn *c = &v->conns[k % VIRTIO_VSOCK_MAX_CONNS];
	return c->state == VIRTIO_VSOCK_FREE ? NULL : c;
}

/* Step: 6 bytes (op, two port picks, a field byte, a length).  Ports come
 * from a small set, from the device's own connections, or (in the copy)
 * from the state's pairs, so that packets land on what the guest of a
 * fork believes is open. */
static void guest_packet(struct virtio_vsock *v, struct fz_input *in, bool copy)
{
	uint8_t a[6];
	fz_take(in, a, sizeof a);
	struct virtio_vsock_hdr h = { .src_cid = CID, .dst_cid = VIRTIO_VSOCK_HOST_CID,
				      .type = VIRTIO_VSOCK_TYPE_STREAM };
	h.op = (uint16_t)(1 + a[0] % 7);
	h.src_port = 1000u + a[1] % 8;
	h.dst_port = a[2] % 8;
	struct virtio_vsock_conn *c = pick(v, a[1]);
	if ((a[0] & 0x10) && c) {
		h.src_port = c->peer_port;
		h.dst_port = c->local_port;
	} else if ((a[0] & 0x20) && copy && n_owed) {
		h.src_port = owed[a[2] % n_owed].peer;
		h.dst_port = owed[a[2] % n_owed].local;
	}
	h.flags = a[3] & 3;
	h.buf_alloc = a[3] & 4 ? 0 : VIRTIO_VSOCK_BUF_ALLOC;
	h.fwd_cnt = a[3] & 8 ? a[4] : (c ? c->tx_cnt : 0);
	uint16_t plen = h.op == VIRTIO_VSOCK_OP_RW ? a[5] : 0;
	if (a[0] & 0x80) { /* a field the device must refuse */
		if (a[3] & 0x10)
			h.type = 2;
		else if (a[3] & 0x20)
			h.len = 1;
		else
			h.op = (uint16_t)(a[3] >> 6 ? 8 : 0);
	}
	if (h.op == VIRTIO_VSOCK_OP_RW)
		h.len = plen;
	allow(h.dst_port, h.src_port);
	tx_send(&h, in, (uint16_t)(h.op == VIRTIO_VSOCK_OP_RW ? plen : h.len));
}

/* One step of the script, the source's or the copy's: an opcode byte and
 * its arguments, then what the device gave back is taken and checked. */
static void step(struct virtio_vsock *v, struct fz_input *in, bool copy)
{
	uint8_t op, k;
	uint16_t n;
	struct virtio_vsock_conn *c;
	static uint8_t buf[8192];

	fz_take(in, &op, 1);
	switch (op % 8) {
	case 0:
	case 1:
		guest_packet(v, in, copy);
		break;
	case 2:
		fz_take(in, &k, 1);
		rx_fill(1 + k % 16, (k & 0xc0) == 0xc0, false);
		break;
	case 3:
		fz_take(in, &n, 2);
		if (virtio_vsock_host_connect(v, n % 8, NULL, &c) == 0)
			allow(c->local_port, c->peer_port);
		break;
	case 4:
		fz_take(in, &k, 1);
		fz_take(in, &n, 2);
		if ((c = pick(v, k)))
			virtio_vsock_host_send(v, c, buf, n % sizeof buf);
		break;
	case 5:
		fz_take(in, &k, 1);
		if ((c = pick(v, k))) {
			if (op & 0x80)
				virtio_vsock_host_close(v, c);
			else
				virtio_vsock_host_shutdown(v, c, op >> 4);
		}
		break;
	case 6:
		fz_take(in, &k, 1);
		if ((c = pick(v, k)))
			virtio_vsock_host_recv(v, c, buf, sizeof buf);
		break;
	default:
		if (op & 0x80) /* rarely: the driver starts over */
			driver_up(op & 0x40);
		else
			fv_kick(&drv, RXQ);
		break;
	}
	drain(copy ? v : NULL);
}

/* ---- the fork state ---- */

/* Whether p[0..len) is a fork state vs_fork_load must take, by its
 * documented layout; its pairs into owed when so. */
static bool layout_ok(const uint8_t *p, size_t len, uint32_t *next)
{
	if (len < FORK_HDR)
		return false;
	uint32_t n = statebuf_le32(p + 8);
	*next = statebuf_le32(p + 4);
	return statebuf_le32(p) == 1 && *next >= VIRTIO_VSOCK_EPHEMERAL_BASE &&
	       n <= FORK_MAX_PAIRS && len == FORK_HDR + 8ull * n;
}

static void take_pairs(const uint8_t *p)
{
	n_owed = statebuf_le32(p + 8);
	for (unsigned i = 0; i < n_owed; i++) {
		owed[i].local = statebuf_le32(p + FORK_HDR + 8 * i);
		owed[i].peer = statebuf_le32(p + FORK_HDR + 8 * i + 4);
		owed_sent[i] = false;
		allow(owed[i].local, owed[i].peer);
	}
}

/* The fork state alone into a bare device: taken exactly when its layout
 * is right, and a refusal changes nothing. */
static void load_bare(const uint8_t *p, size_t len)
{
	static struct virtio_vsock bare;
	char err[256] = "";
	uint32_t next = 0;
	check(virtio_vsock_init(&bare, CID, &backend, &bare) == 0);
	int rc = bare.dev.ops->fork_load(&bare.dev, p, len, err, sizeof err);
	bool ok = layout_ok(p, len, &next);
	if (rc == 0) {
		check(ok && bare.nr_rst == statebuf_le32(p + 8) && bare.next_port == next);
		for (unsigned i = 0; i < bare.nr_rst; i++)
			check(bare.rst[i].local == statebuf_le32(p + FORK_HDR + 8 * i) &&
			      bare.rst[i].peer == statebuf_le32(p + FORK_HDR + 8 * i + 4));
	} else {
		check(!ok && rc == -EINVAL && err[0]);
		check(bare.nr_rst == 0 && bare.next_port == VIRTIO_VSOCK_EPHEMERAL_BASE &&
		      open_conns(&bare) == 0);
	}
	virtio_vsock_destroy(&bare);
}

/* The blob to load, in w: the source's, changed as the mode says. */
static void mutate(uint8_t mode, struct fz_input *in, struct statebuf_writer *w, size_t state_len)
{
	if ((mode & 1) && w->len >= state_len) {
		uint16_t len;
		fz_take(in, &len, 2);
		len = (uint16_t)(len % 2048 < in->left ? len % 2048 : in->left);
		w->len = state_len;
		statebuf_put(w, in->p, len);
		in->p += len;
		in->left -= len;
		if ((mode & 2) && len >= FORK_HDR) {
			uint32_t n = (len - FORK_HDR) / 8;
			n = n > FORK_MAX_PAIRS ? FORK_MAX_PAIRS : n;
			uint8_t *p = w->buf + state_len;
			uint32_t next = statebuf_le32(p + 4) | VIRTIO_VSOCK_EPHEMERAL_BASE;
			uint32_t h[3] = { htole32(1), htole32(next), htole32(n) };
			memcpy(p, h, sizeof h);
			w->len = state_len + FORK_HDR + 8 * n;
		}
	}
	/* Bytes flipped in the fork state only, or anywhere. */
	fz_flips(in, w->buf, w->len, mode & 4 ? state_len : 0);
	if (mode & 8) {
		uint16_t cut;
		fz_take(in, &cut, 2);
		w->len = cut % (w->len + 1);
	}
}

/* Give the copy rx buffers until it owes no reset: one RST per pair of
 * the state, nothing else. */
static void completeness(struct dev *d)
{
	collecting = true;
	drain(&d->vs);
	for (unsigned round = 0; round < 16 && d->vs.nr_rst && d->vs.dev.live; round++) {
		rx_fill(QSIZE, false, false);
		drain(&d->vs);
	}
	collecting = false;
	if (!d->vs.dev.live)
		return; /* the source left a bad rx buffer in the ring */
	check(d->vs.nr_rst == 0);
	for (unsigned i = 0; i < n_owed; i++)
		check(owed_sent[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_input in = { data, size };
	struct dev *src = &devs[0], *cp = &devs[1];
	struct statebuf_writer w;
	char err[256] = "";
	uint8_t mode, steps;

	if (!drv.ram && fv_init(&drv, 0, RAM) < 0)
		abort();
	fv_clear(&drv);
	n_allowed = n_owed = 0;
	collecting = false;
	strict = true;
	fz_take(&in, &mode, 1);

	/* The original, driven by the first part of the script. */
	dev_make(src);
	drv.mmio = &src->bus.slot[0].t;
	driver_up(mode & 16);
	fz_take(&in, &steps, 1);
	for (unsigned i = 0; i < steps % 48u; i++)
		step(&src->vs, &in, false);

	/* Saved as kbox fork saves it: the transport's state, then the
	 * device's fork state. */
	size_t state_len = virtio_mmio_state_len(src->vs.dev.nr_queues);
	statebuf_init(&w);
	check(src->sd.save(src->sd.ctx, &w, err, sizeof err) == 0);
	check(w.len >= state_len + FORK_HDR);
	uint8_t *orig = malloc(state_len);
	check(orig != NULL);
	memcpy(orig, w.buf, state_len);
	bool src_live = src->vs.dev.live;
	dev_free(src);
	n_allowed = 0; /* what the original's guest sent is the state's business */

	mutate(mode, &in, &w, state_len);
	check(w.err == 0);
	strict = w.len >= state_len && memcmp(w.buf, orig, state_len) == 0;
	free(orig);
	if (w.len > state_len)
		load_bare(w.buf + state_len, w.len - state_len);

	/* Into a fresh device, as the copy loads it. */
	dev_make(cp);
	drv.mmio = &cp->bus.slot[0].t;
	err[0] = '\0';
	int rc = cp->sd.load(cp->sd.ctx, w.buf, w.len, err, sizeof err);
	uint32_t next = VIRTIO_VSOCK_EPHEMERAL_BASE;
	bool fork_ok = w.len == state_len ||
		       (w.len > state_len && layout_ok(w.buf + state_len, w.len - state_len, &next));
	if (rc < 0) {
		check(err[0] != '\0');
		check(open_conns(&cp->vs) == 0 && cp->vs.nr_rst == 0 &&
		      cp->vs.next_port == VIRTIO_VSOCK_EPHEMERAL_BASE);
		/* the original's own transport state, alive, with a good fork
		 * state is never refused */
		check(!(strict && src_live && fork_ok));
	} else {
		check(fork_ok && cp->vs.next_port == next && open_conns(&cp->vs) == 0);
		if (w.len > state_len)
			take_pairs(w.buf + state_len);
		if (strict && !(mode & 32))
			completeness(cp);
		else
			drain(&cp->vs);
		/* The copy's guest goes on. */
		for (unsigned i = 0; in.left && i < 64; i++)
			step(&cp->vs, &in, true);
	}
	statebuf_free(&w);
	dev_free(cp);
	return 0;
}
