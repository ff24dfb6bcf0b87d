/* Input: a script for a guest driver of a virtio-net device on
 * virtio-mmio, interleaved with frames the backend side enqueues.  Each
 * step is an opcode byte and its arguments: raw bytes into guest RAM, a
 * chain of fuzzed descriptors on the rx or tx queue, a frame of fuzzed
 * length for the guest, a flush, a raw register write, or a driver reset
 * (taking the receive offloads or not); merged TCP frames for the
 * guest (lib/gso.h), with fuzzed headers or well formed from
 * segments of fuzzed sizes; and a snapshot (quiet, then the transport's
 * state saved and loaded into a fresh device, restored, and driven on).
 * Transmitted frames are echoed back when their first byte is odd.  The
 * device must never crash, leak or loop, and must never touch memory
 * outside guest RAM. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio_mmio.h"
#include "devices/virtio_mmio_state.h"
#include "devices/virtio_net.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/fuzz_script.h"

#define RAM 0x100000u
#define QSIZE 16u
#define IND 0x30000u
#define DATA 0x40000u
#define DATA_SIZE 0xc0000u

static struct fv_driver drv;
/* Two devices, so that a snapshot step can move the guest from one to a
 * fresh one; net and t are the one it drives. */
static struct virtio_mmio ts[2];
static struct virtio_net nets[2];
static struct virtio_mmio *t = &ts[0];
static struct virtio_net *net = &nets[0];

/* Whether the device comes up is not this target's question: the script
 * goes on either way. */
static void driver_up(uint64_t extra)
{
	const uint64_t f = 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_F_INDIRECT_DESC |
			   1ull << VIRTIO_F_EVENT_IDX | 1ull << VIRTIO_NET_F_MAC |
			   1ull << VIRTIO_NET_F_MTU;
	fv_driver_up(&drv, f | extra, 2, QSIZE);
}

static uint8_t big[VIRTIO_NET_MAX_GSO_FRAME + 16];

/* Step: a header (10 bytes), a length (4) and up to 255 bytes of frame
 * (the rest zero) for virtio_net_rx_enqueue_gso as they come. */
static void gso_raw(struct fz_input *in)
{
	struct gso_hdr h;
	uint32_t len;
	uint8_t n;
	fz_take(in, &h, sizeof h);
	fz_take(in, &len, 4);
	fz_take(in, &n, 1);
	len %= sizeof big;
	memset(big, 0, sizeof big);
	fz_take(in, big, n < len ? n : len);
	virtio_net_rx_enqueue_gso(net, &h, big, len);
}

static void gso_out(void *ctx, const struct gso_hdr *h, const uint8_t *f, size_t len)
{
	(void)ctx;
	virtio_net_rx_enqueue_gso(net, h, f, len);
}

/* Step: a segment count (1), a payload size (2) and flags (1): that many
 * TCP segments from the stack's side, merged as the stack merges them. */
static void gso_merged(struct fz_input *in)
{
	static struct gso g;
	uint8_t count, flags, f[VIRTIO_NET_MAX_FRAME];
	uint16_t plen;
	fz_take(in, &count, 1);
	fz_take(in, &plen, 2);
	fz_take(in, &flags, 1);
	plen %= VIRTIO_NET_MAX_FRAME - 54 + 1;
	gso_init(&g, VIRTIO_NET_MAX_GSO_FRAME, gso_out, NULL);
	for (unsigned i = 0; i < count % 64u; i++) {
		size_t len = 54u + plen;
		uint32_t seq = i * (uint32_t)plen;
		memset(f, 0, 54);
		memcpy(f, (const uint8_t[])VIRTIO_NET_GUEST_MAC, 6);
		f[12] = 0x08, f[14] = 0x45, f[22] = 64, f[23] = 6;
		f[16] = (uint8_t)((len - 14) >> 8), f[17] = (uint8_t)(len - 14);
		f[26] = 10, f[28] = 2, f[29] = 2, f[30] = 10, f[32] = 2, f[33] = 15;
		f[38] = (uint8_t)(seq >> 24), f[39] = (uint8_t)(seq >> 16), f[40] = (uint8_t)(seq >> 8);
		f[41] = (uint8_t)seq;
		f[46] = 0x50;
		f[47] = i + 1 == count % 64u ? flags : 0x10;
		memset(f + 54, (int)i, plen);
		gso_add(&g, f, len);
	}
	gso_flush(&g);
}

static void be_tx(void *ctx, const uint8_t *frame, size_t len)
{
	(void)ctx;
	if (frame[0] & 1)
		virtio_net_rx_enqueue(net, frame, len);
}

/* A chain of 1-8 fuzzed segments on queue q, direct or indirect, with
 * head descriptor h. */
static void raw_chain(struct fz_input *in)
{
	uint8_t q, n, nr, ind, h;
	fz_take(in, &q, 1);
	fz_take(in, &n, 1);
	fz_take(in, &nr, 1);
	fz_take(in, &ind, 1);
	fz_take(in, &h, 1);
	n = (uint8_t)(1 + n % 8);
	q &= 1;
	uint16_t head = ind & 1 ? h % QSIZE : h % (QSIZE - n + 1);
	struct fv_seg segs[8];
	for (unsigned i = 0; i < n; i++) {
		uint32_t o, l;
		fz_take(in, &o, 4);
		fz_take(in, &l, 4);
		o = o & 0x80000000u ? o : DATA + o % DATA_SIZE;
		l = l & 0x80000000u ? l : l % 0x1000;
		segs[i] = (struct fv_seg){ o, l, i >= nr % (n + 1u) };
	}
	if (ind & 1)
		fv_chain_indirect(&drv, q, head, IND, segs, n);
	else
		fv_chain(&drv, q, head, segs, n);
	fv_offer(&drv, q, head);
	fv_kick(&drv, q);
}

static void check(int ok)
{
	if (!ok)
		abort();
}

/* Step: take a snapshot if the device is quiet, as a template would be
 * made (docs/snapshots.md): save the transport's state, load it into a
 * fresh device, let it derive the rest, and drive that one from then on.
 * A state the load refuses (a queue the device broke, say) leaves the
 * new transport reset and the old device in use. */
static void snapshot(void)
{
	const uint8_t mac[6] = VIRTIO_NET_GUEST_MAC;
	struct net_backend be = { be_tx, NULL };
	char err[256] = "";
	struct statebuf_writer w;

	int q = net->dev.ops->quiet(&net->dev, err, sizeof err);
	check(q == 0 ? net->rxq_n == 0 : q == -EBUSY && net->rxq_n > 0 && err[0]);
	if (q < 0)
		return;
	struct virtio_net *nn = net == &nets[0] ? &nets[1] : &nets[0];
	struct virtio_mmio *nt = t == &ts[0] ? &ts[1] : &ts[0];
	statebuf_init(&w);
	check(virtio_mmio_state_save(t, &w) == 0);
	check(virtio_net_init(nn, mac, &be) == 0 && virtio_mmio_init(nt, &nn->dev, &drv.gm, NULL) == 0);
	int rc = virtio_mmio_state_load(nt, w.buf, w.len, err, sizeof err);
	statebuf_free(&w);
	if (rc < 0) {
		check(rc == -EINVAL && err[0] && !nn->dev.live && nt->status == 0);
		virtio_net_destroy(nn);
		return;
	}
	nn->dev.ops->restored(&nn->dev);
	check(nn->dev.live == net->dev.live);
	if (net->dev.live)
		check(nn->rx_tso == net->rx_tso && nn->rx_mtu == net->rx_mtu &&
		      nn->rx_csum == net->rx_csum);
	virtio_net_destroy(net);
	net = nn;
	t = nt;
	drv.mmio = t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_input in = { data, size };
	const uint8_t mac[6] = VIRTIO_NET_GUEST_MAC;
	struct net_backend be = { be_tx, NULL };

	if (!drv.ram && fv_init(&drv, 0, RAM) < 0)
		abort();
	fv_clear(&drv);
	net = &nets[0];
	t = &ts[0];
	if (virtio_net_init(net, mac, &be) < 0 || virtio_mmio_init(t, &net->dev, &drv.gm, NULL) < 0)
		abort();
	drv.mmio = t;
	driver_up(0);
	unsigned snaps = 0;
	for (unsigned steps = 0; in.left && steps < 64; steps++) {
		uint8_t op;
		fz_take(&in, &op, 1);
		switch (op % 10) {
		case 0:
			fz_poke_ram(&in, &drv, DATA, DATA_SIZE);
			break;
		case 1:
			raw_chain(&in);
			break;
		case 2: {
			uint8_t f[2048];
			uint16_t len;
			fz_take(&in, &len, 2);
			len %= sizeof f;
			fz_take(&in, f, len);
			virtio_net_rx_enqueue(net, f, len);
			break;
		}
		case 3:
			virtio_net_rx_flush(net);
			break;
		case 4:
			fz_poke_reg(&in, &drv);
			break;
		case 5:
			driver_up(1ull << VIRTIO_NET_F_CSUM | 1ull << VIRTIO_NET_F_GUEST_CSUM |
				  1ull << VIRTIO_NET_F_GUEST_TSO4);
			break;
		case 6:
			gso_raw(&in);
			break;
		case 7:
			gso_merged(&in);
			break;
		case 9:
			if (snaps++ < 4)
				snapshot();
			break;
		default:
			driver_up(0);
			break;
		}
	}
	virtio_net_destroy(net);
	return 0;
}
