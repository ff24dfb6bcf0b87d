/* Input: a script for a guest driver of a virtio-net device on
 * virtio-mmio, interleaved with frames the backend side enqueues.  Each
 * step is an opcode byte and its arguments: raw bytes into guest RAM, a
 * chain of fuzzed descriptors on the rx or tx queue, a frame of fuzzed
 * length for the guest, a flush, a raw register write, or a driver reset.
 * Transmitted frames are echoed back when their first byte is odd.  The
 * device must never crash, leak or loop, and must never touch memory
 * outside guest RAM. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio_mmio.h"
#include "devices/virtio_net.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/fuzz_script.h"

#define RAM 0x100000u
#define QSIZE 16u
#define IND 0x30000u
#define DATA 0x40000u
#define DATA_SIZE 0xc0000u

static struct fv_driver drv;
static struct vmmio t;
static struct vnet net;

/* Whether the device comes up is not this target's question: the script
 * goes on either way. */
static void driver_up(void)
{
	const uint64_t f = 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_F_INDIRECT_DESC |
			   1ull << VIRTIO_F_EVENT_IDX | 1ull << VIRTIO_NET_F_MAC |
			   1ull << VIRTIO_NET_F_MTU;
	fv_driver_up(&drv, f, 2, QSIZE);
}

static void be_tx(void *ctx, const uint8_t *frame, size_t len)
{
	(void)ctx;
	if (frame[0] & 1)
		vnet_rx_enqueue(&net, frame, len);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_input in = { data, size };
	const uint8_t mac[6] = VNET_GUEST_MAC;
	struct net_backend be = { be_tx, NULL };

	if (!drv.ram && fv_init(&drv, 0, RAM) < 0)
		abort();
	fv_clear(&drv);
	if (vnet_init(&net, mac, &be) < 0 || vmmio_init(&t, &net.dev, &drv.gm, NULL) < 0)
		abort();
	drv.mmio = &t;
	driver_up();
	for (unsigned steps = 0; in.left && steps < 64; steps++) {
		uint8_t op;
		fz_take(&in, &op, 1);
		switch (op % 6) {
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
			vnet_rx_enqueue(&net, f, len);
			break;
		}
		case 3:
			vnet_rx_flush(&net);
			break;
		case 4:
			fz_poke_reg(&in, &drv);
			break;
		default:
			driver_up();
			break;
		}
	}
	vnet_destroy(&net);
	return 0;
}
