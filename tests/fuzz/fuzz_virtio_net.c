/* Input: a script for a guest driver of a virtio-net device on
 * virtio-mmio, interleaved with frames the backend side enqueues.  Each
 * step is an opcode byte and its arguments: raw bytes into guest RAM, a
 * chain of fuzzed descriptors on the rx or tx queue, a frame of fuzzed
 * length for the guest, a flush, a raw register write, or a driver reset.
 * Transmitted frames are echoed back when their first byte is odd.  The
 * device must never crash, leak or loop, and must never touch memory
 * outside guest RAM. */
#include <endian.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio_mmio.h"
#include "devices/virtio_net.h"

#define RAM 0x100000u
#define QSIZE 16u
#define QBASE(q) (0x10000u * ((q) + 1))
#define IND 0x30000u
#define DATA 0x40000u
#define DATA_SIZE 0xc0000u

struct input {
	const uint8_t *p;
	size_t left;
};

static uint8_t *ram;
static struct guest_mem gm;
static struct vmmio t;
static struct vnet net;
static uint16_t avail_idx[2];

static void take(struct input *in, void *out, size_t n)
{
	size_t k = n < in->left ? n : in->left;
	memset(out, 0, n);
	memcpy(out, in->p, k);
	in->p += k;
	in->left -= k;
}

static void wr(uint64_t off, uint32_t v)
{
	vmmio_write(&t, off, &v, 4);
}

static void put_desc(uint64_t table, unsigned i, uint64_t addr, uint32_t len, uint16_t flags,
		     uint16_t next)
{
	uint8_t *d = ram + table + 16 * i;
	addr = htole64(addr);
	len = htole32(len);
	flags = htole16(flags);
	next = htole16(next);
	memcpy(d, &addr, 8);
	memcpy(d + 8, &len, 4);
	memcpy(d + 12, &flags, 2);
	memcpy(d + 14, &next, 2);
}

static void driver_up(void)
{
	wr(0x70, 0);
	wr(0x70, 1);
	wr(0x70, 3);
	wr(0x24, 1);
	wr(0x20, 1);
	wr(0x24, 0);
	wr(0x20, 1u << VIRTIO_F_INDIRECT_DESC | 1u << VIRTIO_F_EVENT_IDX | 1u << VIRTIO_NET_F_MAC |
			 1u << VIRTIO_NET_F_MTU);
	wr(0x70, 11);
	for (unsigned q = 0; q < 2; q++) {
		memset(ram + QBASE(q), 0, 0x3000);
		wr(0x30, q);
		wr(0x38, QSIZE);
		wr(0x80, QBASE(q));
		wr(0x90, QBASE(q) + 0x1000);
		wr(0xa0, QBASE(q) + 0x2000);
		wr(0x44, 1);
	}
	wr(0x70, 15);
	avail_idx[0] = avail_idx[1] = 0;
}

static void be_tx(void *ctx, const uint8_t *frame, size_t len)
{
	(void)ctx;
	if (frame[0] & 1)
		vnet_rx_enqueue(&net, frame, len);
}

/* A chain of 1-8 fuzzed segments on queue q, direct or indirect, with
 * head descriptor h. */
static void raw_chain(struct input *in)
{
	uint8_t q, n, nr, ind, h;
	take(in, &q, 1);
	take(in, &n, 1);
	take(in, &nr, 1);
	take(in, &ind, 1);
	take(in, &h, 1);
	n = (uint8_t)(1 + n % 8);
	q &= 1;
	unsigned head = ind & 1 ? h % QSIZE : h % (QSIZE - n + 1);
	uint64_t table = ind & 1 ? IND : QBASE(q);
	unsigned base = ind & 1 ? 0 : head;
	for (unsigned i = 0; i < n; i++) {
		uint32_t o, l;
		take(in, &o, 4);
		take(in, &l, 4);
		o = o & 0x80000000u ? o : DATA + o % DATA_SIZE;
		l = l & 0x80000000u ? l : l % 0x1000;
		put_desc(table, base + i, o, l, (uint16_t)((i >= nr % (n + 1u) ? 2 : 0) |
							   (i + 1 < n ? 1 : 0)),
			 (uint16_t)(base + i + 1));
	}
	if (ind & 1)
		put_desc(QBASE(q), head, IND, 16 * n, 4, 0);
	uint64_t a = QBASE(q) + 0x1000;
	uint16_t hd = htole16((uint16_t)head), idx;
	memcpy(ram + a + 4 + 2 * (avail_idx[q] % QSIZE), &hd, 2);
	avail_idx[q]++;
	idx = htole16(avail_idx[q]);
	memcpy(ram + a + 2, &idx, 2);
	wr(0x50, q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = { data, size };
	const uint8_t mac[6] = VNET_GUEST_MAC;
	struct net_backend be = { be_tx, NULL };

	if (!ram)
		ram = malloc(RAM);
	memset(ram, 0, RAM);
	memset(&gm, 0, sizeof gm);
	gm_add_region(&gm, 0, RAM, ram);
	if (vnet_init(&net, mac, &be) < 0 || vmmio_init(&t, &net.dev, &gm, NULL) < 0)
		abort();
	driver_up();
	for (unsigned steps = 0; in.left && steps < 64; steps++) {
		uint8_t op;
		take(&in, &op, 1);
		switch (op % 6) {
		case 0: {
			uint32_t off;
			uint8_t len;
			take(&in, &off, 4);
			take(&in, &len, 1);
			take(&in, ram + DATA + off % (DATA_SIZE - 256), len);
			break;
		}
		case 1:
			raw_chain(&in);
			break;
		case 2: {
			uint8_t f[2048];
			uint16_t len;
			take(&in, &len, 2);
			len %= sizeof f;
			take(&in, f, len);
			vnet_rx_enqueue(&net, f, len);
			break;
		}
		case 3:
			vnet_rx_flush(&net);
			break;
		case 4: {
			uint16_t off;
			uint32_t v;
			take(&in, &off, 2);
			take(&in, &v, 4);
			if ((off & 0xffc) < 0x80 || (off & 0xffc) >= 0x100)
				wr(off & 0xffc, v);
			break;
		}
		default:
			driver_up();
			break;
		}
	}
	vnet_destroy(&net);
	return 0;
}
