/* Input: a script for a guest driver and a host backend talking through a
 * vsock device on virtio-mmio.  Each step is an opcode byte and its
 * arguments: tx packets with fuzzed headers and payloads, rx buffer
 * refills, host connect/send/recv/shutdown/close, raw register writes.
 * The device must never crash, leak or loop. */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio_mmio.h"
#include "devices/virtio_vsock.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/fake_vsock.h"
#include "tests/lib/fuzz_script.h"

static struct fv_driver drv;
static struct virtio_vsock vs;
static struct virtio_mmio t;

static int b_request(void *ctx, struct virtio_vsock_conn *c, uint32_t port)
{
	return port & 1 ? -ECONNREFUSED : 0;
}

static void b_shutdown(void *ctx, struct virtio_vsock_conn *c, uint32_t flags)
{
	if (flags == (VIRTIO_VSOCK_SHUT_RCV | VIRTIO_VSOCK_SHUT_SEND))
		virtio_vsock_host_close(&vs, c);
}

static void b_readable(void *ctx, struct virtio_vsock_conn *c)
{
	uint8_t buf[512];
	if (c->peer_port & 2)
		virtio_vsock_host_recv(&vs, c, buf, sizeof buf);
}

static const struct virtio_vsock_backend backend = {
	.connect_request = b_request,
	.shutdown = b_shutdown,
	.readable = b_readable,
};

static void rx_fill(unsigned n, uint32_t len)
{
	for (unsigned i = 0; i < n; i++) {
		uint16_t s = fv_avail_idx(&drv, 0) % QSIZE;
		fv_desc(&drv, drv.q[0].desc, s, RXBUF + RXSLOT * s, len, FV_DESC_F_WRITE, 0);
		fv_offer(&drv, 0, s);
	}
	fv_kick(&drv, 0);
}

static void start(void)
{
	fv_clear(&drv);
	/* Whether the device comes up is not this target's question: the
	 * script goes on either way. */
	fv_driver_up(&drv, 1ull << VIRTIO_F_VERSION_1 | 1ull << VIRTIO_F_EVENT_IDX, 3, QSIZE);
	rx_fill(QSIZE, VIRTIO_VSOCK_HDR_SIZE + 4096);
}

static void tx_packet(struct fz_input *in, uint8_t op)
{
	uint8_t raw[VIRTIO_VSOCK_HDR_SIZE];
	uint16_t plen;
	struct virtio_vsock_hdr h;

	fz_take(in, raw, sizeof raw);
	fz_take(in, &plen, 2);
	plen = le16toh(plen) % 8192;
	virtio_vsock_hdr_decode(&h, raw);
	if (op & 0x10) { /* mostly-valid header to get deeper */
		h.src_cid = CID;
		h.dst_cid = VIRTIO_VSOCK_HOST_CID;
		h.type = VIRTIO_VSOCK_TYPE_STREAM;
		h.op = 1 + h.op % 7;
		h.dst_port %= 4;
		h.src_port %= 8;
		h.len = h.op == VIRTIO_VSOCK_OP_RW ? plen : 0;
	}
	virtio_vsock_hdr_encode(fv_at(&drv, TXBUF, VIRTIO_VSOCK_HDR_SIZE), &h);
	fz_take(in, fv_at(&drv, TXBUF + 0x100, plen), plen);
	uint16_t s = (fv_avail_idx(&drv, 1) % (QSIZE / 2)) * 2;
	uint32_t hlen = op & 0x20 ? VIRTIO_VSOCK_HDR_SIZE - (op & 7) : VIRTIO_VSOCK_HDR_SIZE;
	fv_desc(&drv, drv.q[1].desc, s, TXBUF, hlen, plen ? FV_DESC_F_NEXT : 0, s + 1);
	fv_desc(&drv, drv.q[1].desc, s + 1, TXBUF + 0x100, plen, 0, 0);
	fv_offer(&drv, 1, s);
	fv_kick(&drv, 1);
}

static struct virtio_vsock_conn *pick(uint8_t k)
{
	struct virtio_vsock_conn *c = &vs.conns[k % VIRTIO_VSOCK_MAX_CONNS];
	return c->state == VIRTIO_VSOCK_FREE ? NULL : c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[8192];

	if (!drv.ram && fv_init(&drv, 0, RAM) < 0)
		abort();
	if (virtio_vsock_init(&vs, CID, &backend, NULL) < 0 ||
	    virtio_mmio_init(&t, &vs.dev, &drv.gm, NULL) < 0)
		abort();
	drv.mmio = &t;
	start();

	struct fz_input in = { data, size };
	uint8_t op, k;
	uint16_t n;
	uint32_t v;
	struct virtio_vsock_conn *c;
	while (in.left) {
		fz_take(&in, &op, 1);
		switch (op % 8) {
		case 0:
		case 1:
			tx_packet(&in, op);
			break;
		case 2:
			fz_take(&in, &k, 1);
			rx_fill(1 + k % 16, k & 0x80 ? VIRTIO_VSOCK_HDR_SIZE + k % 64 : VIRTIO_VSOCK_HDR_SIZE + 4096);
			break;
		case 3:
			fz_take(&in, &n, 2);
			virtio_vsock_host_connect(&vs, n % 8, NULL, &c);
			break;
		case 4:
			fz_take(&in, &k, 1);
			fz_take(&in, &n, 2);
			if ((c = pick(k)))
				virtio_vsock_host_send(&vs, c, buf, n % sizeof buf);
			break;
		case 5:
			fz_take(&in, &k, 1);
			if ((c = pick(k)))
				virtio_vsock_host_recv(&vs, c, buf, sizeof buf);
			break;
		case 6:
			fz_take(&in, &k, 1);
			if ((c = pick(k))) {
				if (op & 0x80)
					virtio_vsock_host_close(&vs, c);
				else
					virtio_vsock_host_shutdown(&vs, c, op >> 4);
			}
			break;
		case 7:
			fz_take(&in, &n, 2);
			fz_take(&in, &v, 4);
			if (op & 0x80) {
				fv_wr(&drv, n % 0x200, v);
			} else {
				uint64_t r;
				virtio_mmio_read(&t, n % 0x200, &r, 1 + (op >> 4) % 8);
			}
			break;
		}
	}
	virtio_vsock_destroy(&vs);
	return 0;
}
