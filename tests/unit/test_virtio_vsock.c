#include <check.h>
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <poll.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "devices/virtio_mmio.h"
#include "devices/virtio_mmio_state.h"
#include "devices/virtio_vsock.h"
#include "devices/vsock_unix.h"
#include "lib/statebuf.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/fake_vsock.h"
#include "tests/lib/unit_suite.h"

/* A fake guest driver laid out as tests/lib/fake_vsock.h says (tx is
 * consumed synchronously on notify). */
enum { RXQ, TXQ, EVQ };

struct backend_log {
	uint32_t accept_port;
	unsigned requests, readable, writable, closed, connected;
	int connected_err;
	uint32_t shut;
	struct virtio_vsock_conn *last;
	bool close_on_shutdown;
};

struct counting_irq {
	struct irq_sink sink;
	unsigned raises;
};

static struct fv_driver drv;
static struct virtio_vsock vs;
static struct virtio_mmio t;
static struct backend_log bl;
static struct counting_irq irq;

static int b_request(void *ctx, struct virtio_vsock_conn *c, uint32_t port)
{
	struct backend_log *l = ctx;
	l->requests++;
	l->last = c;
	return port == l->accept_port ? 0 : -ECONNREFUSED;
}

static void b_connected(void *ctx, struct virtio_vsock_conn *c, int err)
{
	struct backend_log *l = ctx;
	l->connected++;
	l->connected_err = err;
}

static void b_readable(void *ctx, struct virtio_vsock_conn *c)
{
	((struct backend_log *)ctx)->readable++;
}

static void b_writable(void *ctx, struct virtio_vsock_conn *c)
{
	((struct backend_log *)ctx)->writable++;
}

static void b_shutdown(void *ctx, struct virtio_vsock_conn *c, uint32_t flags)
{
	struct backend_log *l = ctx;
	l->shut = flags;
	if (l->close_on_shutdown && flags == (VIRTIO_VSOCK_SHUT_RCV | VIRTIO_VSOCK_SHUT_SEND))
		virtio_vsock_host_close(&vs, c);
}

static void b_closed(void *ctx, struct virtio_vsock_conn *c)
{
	((struct backend_log *)ctx)->closed++;
}

static const struct virtio_vsock_backend backend = {
	.connect_request = b_request,
	.connected = b_connected,
	.readable = b_readable,
	.writable = b_writable,
	.shutdown = b_shutdown,
	.closed = b_closed,
};

static void set_level(struct irq_sink *s, int level)
{
	((struct counting_irq *)s)->raises += level;
}

static void setup(void)
{
	ck_assert_int_eq(fv_init(&drv, 0, RAM), 0);
	memset(&bl, 0, sizeof bl);
	memset(&irq, 0, sizeof irq);
	irq.sink.set_level = set_level;
	bl.accept_port = 1234;
	ck_assert_int_eq(virtio_vsock_init(&vs, CID, &backend, &bl), 0);
	ck_assert_int_eq(virtio_mmio_init(&t, &vs.dev, &drv.gm, &irq.sink), 0);
	drv.mmio = &t;
	ck_assert_int_eq(fv_driver_up(&drv, 1ull << VIRTIO_F_VERSION_1, 3, QSIZE), 0);
	ck_assert(vs.dev.live);
}

static void teardown(void)
{
	virtio_vsock_destroy(&vs);
	fv_free(&drv);
}

static bool needs_reset(void)
{
	return fv_rd(&drv, 0x70) & VIRTIO_STATUS_NEEDS_RESET;
}

/* Give the device n rx buffers. */
static void rx_fill(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		uint16_t s = fv_avail_idx(&drv, RXQ) % QSIZE;
		fv_desc(&drv, drv.q[RXQ].desc, s, RXBUF + RXSLOT * s, RXLEN, FV_DESC_F_WRITE, 0);
		fv_offer(&drv, RXQ, s);
	}
	fv_kick(&drv, RXQ);
}

/* The next packet the device put in rx; false if there is none. */
static bool rx_get(struct virtio_vsock_hdr *h, uint8_t *payload)
{
	uint32_t id, len;
	if (!fv_used(&drv, RXQ, &id, &len))
		return false;
	ck_assert_uint_lt(id, QSIZE);
	ck_assert_uint_ge(len, VIRTIO_VSOCK_HDR_SIZE);
	ck_assert_uint_le(len, RXLEN);
	const uint8_t *b = fv_at(&drv, RXBUF + RXSLOT * id, RXLEN);
	virtio_vsock_hdr_decode(h, b);
	ck_assert_uint_eq(h->len, len - VIRTIO_VSOCK_HDR_SIZE);
	ck_assert_uint_eq(h->src_cid, VIRTIO_VSOCK_HOST_CID);
	ck_assert_uint_eq(h->dst_cid, CID);
	if (payload)
		memcpy(payload, b + VIRTIO_VSOCK_HDR_SIZE, h->len);
	return true;
}

static struct virtio_vsock_hdr hdr(uint16_t op, uint32_t src_port, uint32_t dst_port)
{
	return (struct virtio_vsock_hdr){
		.src_cid = CID,
		.dst_cid = VIRTIO_VSOCK_HOST_CID,
		.src_port = src_port,
		.dst_port = dst_port,
		.type = VIRTIO_VSOCK_TYPE_STREAM,
		.op = op,
		.buf_alloc = 65536,
	};
}

/* Send one tx packet: header and payload in two descriptors, the payload
 * descriptor buf_len long (normally h->len). */
static void tx_raw(const struct virtio_vsock_hdr *h, uint32_t hdr_len, const void *payload,
		   uint32_t buf_len)
{
	uint16_t s = (fv_avail_idx(&drv, TXQ) % (QSIZE / 2)) * 2;
	uint64_t table = drv.q[TXQ].desc;
	virtio_vsock_hdr_encode(fv_at(&drv, TXBUF, VIRTIO_VSOCK_HDR_SIZE), h);
	if (payload)
		memcpy(fv_at(&drv, TXBUF + 0x100, buf_len), payload, buf_len);
	fv_desc(&drv, table, s, TXBUF, hdr_len, buf_len ? FV_DESC_F_NEXT : 0, s + 1);
	fv_desc(&drv, table, s + 1, TXBUF + 0x100, buf_len, 0, 0);
	fv_offer(&drv, TXQ, s);
	fv_kick(&drv, TXQ);
}

static void tx(const struct virtio_vsock_hdr *h, const void *payload)
{
	tx_raw(h, VIRTIO_VSOCK_HDR_SIZE, payload, h->len);
}

static struct virtio_vsock_conn *guest_connect(uint32_t guest_port)
{
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, guest_port, 1234), r;
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RESPONSE);
	ck_assert_uint_eq(r.src_port, 1234);
	ck_assert_uint_eq(r.dst_port, guest_port);
	ck_assert_uint_eq(r.buf_alloc, VIRTIO_VSOCK_BUF_ALLOC);
	return bl.last;
}

START_TEST(config_has_guest_cid)
{
	uint64_t cid = 0;
	virtio_mmio_read(&t, 0x100, &cid, 8);
	ck_assert_uint_eq(le64toh(cid), CID);
	uint32_t lo = 0;
	virtio_mmio_read(&t, 0x104, &lo, 4);
	ck_assert_uint_eq(lo, 0);
	ck_assert_uint_eq(fv_rd(&drv, 0x8), VIRTIO_VSOCK_DEVICE_ID);
	struct virtio_vsock bad;
	ck_assert_int_eq(virtio_vsock_init(&bad, 2, NULL, NULL), -EINVAL);
	ck_assert_int_eq(virtio_vsock_init(&bad, 0xffffffffull, NULL, NULL), -EINVAL);
}
END_TEST

START_TEST(connect_accept_and_refuse)
{
	rx_fill(8);
	struct virtio_vsock_conn *c = guest_connect(5000);
	ck_assert_ptr_nonnull(c);
	ck_assert_uint_eq(c->peer_port, 5000);
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, 5001, 999), r;
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	ck_assert_uint_eq(r.src_port, 999);
	ck_assert_uint_eq(r.dst_port, 5001);
	ck_assert_uint_eq(bl.requests, 2);
	ck_assert(!needs_reset());
	ck_assert_uint_gt(irq.raises, 0);
}
END_TEST

START_TEST(guest_to_host_data)
{
	rx_fill(8);
	struct virtio_vsock_conn *c = guest_connect(5000);
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_RW, 5000, 1234);
	h.len = 11;
	tx(&h, "hello world");
	ck_assert_uint_eq(bl.readable, 1);
	char buf[32] = { 0 };
	ck_assert_uint_eq(virtio_vsock_host_pending(c), 11);
	ck_assert_uint_eq(virtio_vsock_host_recv(&vs, c, buf, 5), 5);
	ck_assert_uint_eq(virtio_vsock_host_recv(&vs, c, buf + 5, sizeof buf), 6);
	ck_assert_str_eq(buf, "hello world");
	ck_assert_uint_eq(virtio_vsock_host_recv(&vs, c, buf, sizeof buf), 0);
}
END_TEST

START_TEST(host_to_guest_within_credit)
{
	rx_fill(16);
	struct virtio_vsock_conn *c = guest_connect(5000);
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_CREDIT_UPDATE, 5000, 1234), r;
	h.buf_alloc = 100;
	tx(&h, NULL);
	uint8_t data[300], got[4096];
	for (unsigned i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)i;
	ck_assert_int_eq(virtio_vsock_host_send(&vs, c, data, sizeof data), 300);
	ck_assert(rx_get(&r, got));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RW);
	ck_assert_uint_eq(r.len, 100);
	ck_assert_mem_eq(got, data, 100);
	/* nothing more until the guest frees credit (a CREDIT_REQUEST may
	 * ask for it) */
	while (rx_get(&r, NULL))
		ck_assert_uint_ne(r.op, VIRTIO_VSOCK_OP_RW);
	h.fwd_cnt = 100;
	tx(&h, NULL);
	ck_assert(rx_get(&r, got));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RW);
	ck_assert_uint_eq(r.len, 100);
	ck_assert_mem_eq(got, data + 100, 100);
	ck_assert_uint_gt(bl.writable, 0);
	ck_assert(!rx_get(&r, NULL));
}
END_TEST

START_TEST(large_send_is_split_by_buffer)
{
	rx_fill(16);
	struct virtio_vsock_conn *c = guest_connect(5000);
	static uint8_t data[10000];
	memset(data, 0x5a, sizeof data);
	ck_assert_int_eq(virtio_vsock_host_send(&vs, c, data, sizeof data), (ssize_t)sizeof data);
	struct virtio_vsock_hdr r;
	uint32_t total = 0;
	while (rx_get(&r, NULL)) {
		ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RW);
		ck_assert_uint_le(r.len, 4096);
		total += r.len;
	}
	ck_assert_uint_eq(total, sizeof data);
}
END_TEST

/* A guest connection to port 5000 whose data fills our buffer to exactly
 * the credit advertised; *h is left as the RW header it sent. */
static struct virtio_vsock_conn *guest_fills_credit(struct virtio_vsock_hdr *h)
{
	rx_fill(8);
	struct virtio_vsock_conn *c = guest_connect(5000);
	*h = hdr(VIRTIO_VSOCK_OP_RW, 5000, 1234);
	h->len = VIRTIO_VSOCK_MAX_PKT;
	for (unsigned i = 0; i < VIRTIO_VSOCK_BUF_ALLOC / VIRTIO_VSOCK_MAX_PKT; i++)
		tx_raw(h, VIRTIO_VSOCK_HDR_SIZE, NULL, VIRTIO_VSOCK_MAX_PKT);
	return c;
}

START_TEST(guest_overrun_resets)
{
	struct virtio_vsock_hdr h, r;
	struct virtio_vsock_conn *c = guest_fills_credit(&h);
	ck_assert_uint_eq(virtio_vsock_host_pending(c), VIRTIO_VSOCK_BUF_ALLOC);
	ck_assert_uint_eq(bl.closed, 0);
	h.len = 1;
	tx(&h, "x");
	ck_assert_uint_eq(bl.closed, 1);
	ck_assert_uint_eq(vs.stats.overruns, 1);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	ck_assert(!needs_reset());
}
END_TEST

START_TEST(bad_fields_are_dropped_or_reset)
{
	rx_fill(16);
	struct virtio_vsock_hdr h, r;
	h = hdr(VIRTIO_VSOCK_OP_REQUEST, 1, 1234);
	h.src_cid = 77; /* not the guest: dropped silently */
	tx(&h, NULL);
	ck_assert(!rx_get(&r, NULL));
	h = hdr(VIRTIO_VSOCK_OP_REQUEST, 1, 1234);
	h.dst_cid = 42; /* not us */
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	h = hdr(VIRTIO_VSOCK_OP_REQUEST, 1, 1234);
	h.type = 2; /* seqpacket */
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	h = hdr(99, 1, 1234);
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	h = hdr(VIRTIO_VSOCK_OP_REQUEST, 1, 1234);
	h.len = 4; /* payload on a control packet */
	tx(&h, "abcd");
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	h = hdr(VIRTIO_VSOCK_OP_RW, 1, 1234); /* no such connection */
	h.len = 1;
	tx(&h, "a");
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	h = hdr(VIRTIO_VSOCK_OP_RST, 1, 1234); /* RST for nothing: ignored */
	tx(&h, NULL);
	ck_assert(!rx_get(&r, NULL));
	ck_assert_uint_eq(vs.stats.bad_packets, 5);
	ck_assert_uint_eq(bl.requests, 0);
	ck_assert(!needs_reset());
}
END_TEST

START_TEST(bad_lengths_need_reset)
{
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_RW, 1, 1234);
	h.len = 100;
	tx_raw(&h, VIRTIO_VSOCK_HDR_SIZE, "short", 5); /* len beyond the buffer */
	ck_assert(needs_reset());
	ck_assert(!vs.dev.live);
	teardown();
	setup();
	h.len = 0;
	tx_raw(&h, 20, NULL, 0); /* header cut short */
	ck_assert(needs_reset());
	teardown();
	setup();
	h.len = VIRTIO_VSOCK_MAX_PKT + 1;
	tx_raw(&h, VIRTIO_VSOCK_HDR_SIZE, NULL, VIRTIO_VSOCK_MAX_PKT + 1);
	ck_assert(needs_reset());
}
END_TEST

START_TEST(fwd_cnt_past_sent_resets)
{
	rx_fill(8);
	struct virtio_vsock_conn *c = guest_connect(5000);
	ck_assert_int_eq(virtio_vsock_host_send(&vs, c, "abc", 3), 3);
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_CREDIT_UPDATE, 5000, 1234), r;
	ck_assert(rx_get(&r, NULL));
	h.fwd_cnt = 3; /* all we sent: fine */
	tx(&h, NULL);
	ck_assert_uint_eq(bl.closed, 0);
	h.fwd_cnt = 4; /* one byte never sent */
	tx(&h, NULL);
	ck_assert_uint_eq(bl.closed, 1);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	/* a huge buf_alloc cannot make us send more than we hold */
	c = guest_connect(5001);
	h = hdr(VIRTIO_VSOCK_OP_CREDIT_UPDATE, 5001, 1234);
	h.buf_alloc = 0xffffffffu;
	tx(&h, NULL);
	ck_assert_int_eq(virtio_vsock_host_send(&vs, c, "z", 1), 1);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.len, 1);
}
END_TEST

START_TEST(counters_wrap)
{
	rx_fill(32);
	struct virtio_vsock_conn *c = guest_connect(5000);
	/* pretend 4 GiB minus a little already flowed both ways */
	c->tx_cnt = c->peer_fwd_cnt = 0xffffff00u;
	c->rx_cnt = c->fwd_cnt = c->fwd_cnt_sent = 0xffffff00u;
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_CREDIT_UPDATE, 5000, 1234), r;
	h.fwd_cnt = 0xffffff00u;
	h.buf_alloc = 1024;
	tx(&h, NULL);
	static uint8_t data[1024];
	memset(data, 1, sizeof data);
	ck_assert_int_eq(virtio_vsock_host_send(&vs, c, data, 1024), 1024);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.len, 1024);
	ck_assert_uint_eq(c->tx_cnt, 0x300);
	ck_assert_int_eq(virtio_vsock_host_send(&vs, c, data, 10), 10);
	ck_assert(rx_get(&r, NULL)); /* no credit left: we ask for some */
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_CREDIT_REQUEST);
	ck_assert(!rx_get(&r, NULL));
	h.fwd_cnt = 0x300; /* after the wrap */
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.len, 10);
	/* guest → host across the wrap, and overrun still caught */
	h = hdr(VIRTIO_VSOCK_OP_RW, 5000, 1234);
	h.len = 1024;
	h.fwd_cnt = 0x300; /* fwd_cnt going back would be a violation */
	tx_raw(&h, VIRTIO_VSOCK_HDR_SIZE, data, 1024);
	ck_assert_uint_eq(virtio_vsock_host_pending(c), 1024);
	ck_assert_uint_eq(c->rx_cnt, 0x300);
	uint8_t out[2048];
	ck_assert_uint_eq(virtio_vsock_host_recv(&vs, c, out, sizeof out), 1024);
	ck_assert_mem_eq(out, data, 1024);
	ck_assert_uint_eq(bl.closed, 0);
}
END_TEST

START_TEST(host_initiated)
{
	struct virtio_vsock_conn *c;
	rx_fill(8);
	ck_assert_int_eq(virtio_vsock_host_connect(&vs, 52, NULL, &c), 0);
	struct virtio_vsock_hdr r, h;
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_REQUEST);
	ck_assert_uint_eq(r.dst_port, 52);
	ck_assert_uint_ge(r.src_port, VIRTIO_VSOCK_EPHEMERAL_BASE);
	/* data queued before the answer waits for it */
	ck_assert_int_eq(virtio_vsock_host_send(&vs, c, "hi", 2), 2);
	ck_assert(!rx_get(&r, NULL));
	h = hdr(VIRTIO_VSOCK_OP_RESPONSE, 52, c->local_port);
	tx(&h, NULL);
	ck_assert_uint_eq(bl.connected, 1);
	ck_assert_int_eq(bl.connected_err, 0);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RW);
	/* a second one is refused */
	ck_assert_int_eq(virtio_vsock_host_connect(&vs, 53, NULL, &c), 0);
	ck_assert(rx_get(&r, NULL));
	h = hdr(VIRTIO_VSOCK_OP_RST, 53, c->local_port);
	tx(&h, NULL);
	ck_assert_uint_eq(bl.connected, 2);
	ck_assert_int_eq(bl.connected_err, -ECONNREFUSED);
	/* a stray RESPONSE on an established connection resets it */
	h = hdr(VIRTIO_VSOCK_OP_RESPONSE, 52, r.src_port - 1);
	tx(&h, NULL);
	ck_assert_uint_eq(bl.closed, 1);
}
END_TEST

START_TEST(shutdown_both_ways)
{
	rx_fill(8);
	struct virtio_vsock_conn *c = guest_connect(5000);
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_SHUTDOWN, 5000, 1234), r;
	/* host half-close: SHUTDOWN leaves after the queued data */
	ck_assert_int_eq(virtio_vsock_host_send(&vs, c, "bye", 3), 3);
	ck_assert_int_eq(virtio_vsock_host_shutdown(&vs, c, VIRTIO_VSOCK_SHUT_SEND), 0);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RW);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_SHUTDOWN);
	ck_assert_uint_eq(r.flags, VIRTIO_VSOCK_SHUT_SEND);
	ck_assert_int_eq(virtio_vsock_host_send(&vs, c, "x", 1), -ENOTCONN);
	/* guest half-close, then data from it is a protocol error */
	h.flags = VIRTIO_VSOCK_SHUT_SEND;
	tx(&h, NULL);
	ck_assert_uint_eq(bl.shut, VIRTIO_VSOCK_SHUT_SEND);
	h = hdr(VIRTIO_VSOCK_OP_RW, 5000, 1234);
	h.len = 1;
	tx(&h, "x");
	ck_assert_uint_eq(bl.closed, 1);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	/* full close from the guest answered with RST by the backend */
	bl.close_on_shutdown = true;
	guest_connect(5001);
	h = hdr(VIRTIO_VSOCK_OP_SHUTDOWN, 5001, 1234);
	h.flags = 3;
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	ck_assert_uint_eq(r.dst_port, 5001);
}
END_TEST

START_TEST(credit_request_answered)
{
	rx_fill(8);
	guest_connect(5000);
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_CREDIT_REQUEST, 5000, 1234), r;
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_CREDIT_UPDATE);
	ck_assert_uint_eq(r.buf_alloc, VIRTIO_VSOCK_BUF_ALLOC);
}
END_TEST

START_TEST(credit_update_after_reads)
{
	struct virtio_vsock_hdr h, r;
	struct virtio_vsock_conn *c = guest_fills_credit(&h);
	ck_assert(!rx_get(&r, NULL));
	static uint8_t sink[VIRTIO_VSOCK_BUF_ALLOC];
	ck_assert_uint_eq(virtio_vsock_host_recv(&vs, c, sink, VIRTIO_VSOCK_BUF_ALLOC / 8), VIRTIO_VSOCK_BUF_ALLOC / 8);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_CREDIT_UPDATE);
	ck_assert_uint_eq(r.fwd_cnt, VIRTIO_VSOCK_BUF_ALLOC / 8);
	/* small reads do not each cause an update */
	ck_assert_uint_eq(virtio_vsock_host_recv(&vs, c, sink, 10), 10);
	ck_assert(!rx_get(&r, NULL));
}
END_TEST

START_TEST(connection_table_bounded)
{
	rx_fill(QSIZE);
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++) {
		struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, 100 + i, 1234), r;
		tx(&h, NULL);
		ck_assert(rx_get(&r, NULL));
		ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RESPONSE);
		if (fv_avail_idx(&drv, RXQ) - drv.q[RXQ].used_seen < 4)
			rx_fill(8);
	}
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, 99, 1234), r;
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	struct virtio_vsock_conn *c;
	ck_assert_int_eq(virtio_vsock_host_connect(&vs, 1, NULL, &c), -ENOSPC);
	/* a device reset drops them all */
	fv_wr(&drv, 0x70, 0);
	ck_assert_uint_eq(bl.closed, VIRTIO_VSOCK_MAX_CONNS);
	ck_assert_int_eq(virtio_vsock_host_connect(&vs, 1, NULL, &c), -ENOTCONN);
}
END_TEST

START_TEST(rst_backlog_bounded_without_rx_buffers)
{
	/* no rx buffers: answers queue up to the bound and no further */
	for (unsigned i = 0; i < 3 * VIRTIO_VSOCK_MAX_RST; i++) {
		struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, i, 999);
		tx(&h, NULL);
	}
	ck_assert_uint_eq(vs.nr_rst, VIRTIO_VSOCK_MAX_RST);
	rx_fill(QSIZE);
	struct virtio_vsock_hdr r;
	unsigned n = 0;
	while (rx_get(&r, NULL))
		n++;
	ck_assert_uint_eq(n, VIRTIO_VSOCK_MAX_RST);
}
END_TEST

START_TEST(tiny_rx_buffer_needs_reset)
{
	fv_desc(&drv, drv.q[RXQ].desc, 0, RXBUF, 20, FV_DESC_F_WRITE, 0);
	fv_offer(&drv, RXQ, 0);
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, 1, 999);
	tx(&h, NULL);
	ck_assert(needs_reset());
}
END_TEST

START_TEST(broken_tx_ring_needs_reset)
{
	/* loops on itself */
	fv_desc(&drv, drv.q[TXQ].desc, 0, TXBUF, VIRTIO_VSOCK_HDR_SIZE, FV_DESC_F_NEXT, 0);
	fv_offer(&drv, TXQ, 0);
	fv_kick(&drv, TXQ);
	ck_assert(needs_reset());
	ck_assert_uint_eq(fv_rd(&drv, 0x60) & VIRTIO_MMIO_INT_CONFIG, VIRTIO_MMIO_INT_CONFIG);
}
END_TEST


/* ---- quiet: what a template may be taken with (docs/snapshots.md) ---- */

static int quiet(char *err, size_t errlen)
{
	ck_assert_ptr_nonnull(vs.dev.ops->quiet);
	return vs.dev.ops->quiet(&vs.dev, err, errlen);
}

START_TEST(quiet_fresh_device)
{
	char err[128] = "";
	ck_assert(vs.dev.live);
	ck_assert_int_eq(quiet(err, sizeof err), 0);
	ck_assert_str_eq(err, "");
}
END_TEST

START_TEST(quiet_busy_with_open_connection)
{
	char err[128] = "";
	rx_fill(8);
	guest_connect(5000);
	ck_assert_int_eq(quiet(err, sizeof err), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "1 connection(s) open"));
	/* the guest closes both ways, the backend answers with RST */
	bl.close_on_shutdown = true;
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_SHUTDOWN, 5000, 1234), r;
	h.flags = VIRTIO_VSOCK_SHUT_RCV | VIRTIO_VSOCK_SHUT_SEND;
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	ck_assert_int_eq(quiet(err, sizeof err), 0);
	/* a connection the guest resets is gone as well */
	guest_connect(5001);
	ck_assert_int_eq(quiet(err, sizeof err), -EBUSY);
	h = hdr(VIRTIO_VSOCK_OP_RST, 5001, 1234);
	tx(&h, NULL);
	ck_assert_uint_eq(bl.closed, 1);
	ck_assert_int_eq(quiet(err, sizeof err), 0);
}
END_TEST

START_TEST(quiet_busy_with_host_connection_pending)
{
	char err[128] = "";
	struct virtio_vsock_conn *c;
	rx_fill(8);
	ck_assert_int_eq(virtio_vsock_host_connect(&vs, 52, NULL, &c), 0);
	ck_assert_int_eq(quiet(err, sizeof err), -EBUSY); /* CONNECTING counts */
	struct virtio_vsock_hdr r, h;
	ck_assert(rx_get(&r, NULL));
	h = hdr(VIRTIO_VSOCK_OP_RST, 52, r.src_port);
	tx(&h, NULL);
	ck_assert_int_eq(bl.connected_err, -ECONNREFUSED);
	ck_assert_int_eq(quiet(err, sizeof err), 0);
}
END_TEST

START_TEST(quiet_busy_with_reset_to_send)
{
	char err[128] = "";
	/* refused while the guest gives no rx buffer: the RST waits */
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, 5000, 999), r;
	tx(&h, NULL);
	ck_assert_uint_eq(bl.requests, 1);
	ck_assert_uint_eq(vs.nr_rst, 1);
	ck_assert_int_eq(quiet(err, sizeof err), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "0 connection(s) open, 1 reset(s) to send"));
	/* a short err buffer is cut, not overrun */
	char tiny[8];
	memset(tiny, 'x', sizeof tiny);
	ck_assert_int_eq(quiet(tiny, sizeof tiny), -EBUSY);
	ck_assert_uint_eq(strlen(tiny), sizeof tiny - 1);
	rx_fill(1);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	ck_assert_uint_eq(r.dst_port, 5000);
	ck_assert_int_eq(quiet(err, sizeof err), 0);
}
END_TEST

START_TEST(quiet_after_device_reset)
{
	char err[128] = "";
	rx_fill(1);
	guest_connect(5000);
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, 5001, 999);
	tx(&h, NULL); /* no rx buffer left: its RST waits */
	ck_assert_uint_eq(vs.nr_rst, 1);
	ck_assert_int_eq(quiet(err, sizeof err), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "1 connection(s) open, 1 reset(s) to send"));
	fv_wr(&drv, FV_R_STATUS, 0); /* drops connections and resets owed */
	ck_assert(!vs.dev.live);
	ck_assert_int_eq(quiet(err, sizeof err), 0);
}
END_TEST

/* ---- fork: what a copy of a running device needs (kbox fork) ---- */

/* The copy: a fresh device on a transport of its own over the same RAM
 * (a fork's guest RAM is the original's). */
static struct virtio_vsock vs2;
static struct virtio_mmio t2;
static struct backend_log bl2;

static void copy_init(void)
{
	memset(&bl2, 0, sizeof bl2);
	ck_assert_int_eq(virtio_vsock_init(&vs2, CID, &backend, &bl2), 0);
	ck_assert_int_eq(virtio_mmio_init(&t2, &vs2.dev, &drv.gm, &irq.sink), 0);
}

static int fork_save(struct virtio_vsock *v, struct statebuf_writer *w, char *err, size_t errlen)
{
	ck_assert_ptr_nonnull(v->dev.ops->fork_save);
	return v->dev.ops->fork_save(&v->dev, w, err, errlen);
}

static int fork_load(struct virtio_vsock *v, const void *p, size_t len, char *err, size_t errlen)
{
	ck_assert_ptr_nonnull(v->dev.ops->fork_load);
	return v->dev.ops->fork_load(&v->dev, p, len, err, errlen);
}

/* Offer n rx buffers without a notify (the guest's RAM as the fork
 * copies it: buffers posted, nothing told to the copy yet). */
static void rx_offer(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		uint16_t s = fv_avail_idx(&drv, RXQ) % QSIZE;
		fv_desc(&drv, drv.q[RXQ].desc, s, RXBUF + RXSLOT * s, RXLEN, FV_DESC_F_WRITE, 0);
		fv_offer(&drv, RXQ, s);
	}
}

/* A guest-made connection (1234 <- 5000), a host-made one (ephemeral ->
 * 52, answered) and one still connecting (-> 53), and an RST owed (a
 * request to 999 refused while the guest gave no rx buffer). */
static void busy_device(uint32_t *host_port, uint32_t *connecting_port)
{
	struct virtio_vsock_conn *c, *c2;
	struct virtio_vsock_hdr h, r;
	rx_fill(3);
	guest_connect(5000);
	ck_assert_int_eq(virtio_vsock_host_connect(&vs, 52, NULL, &c), 0);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_REQUEST);
	h = hdr(VIRTIO_VSOCK_OP_RESPONSE, 52, c->local_port);
	tx(&h, NULL);
	ck_assert_int_eq(c->state, VIRTIO_VSOCK_CONNECTED);
	ck_assert_int_eq(virtio_vsock_host_connect(&vs, 53, NULL, &c2), 0);
	ck_assert(rx_get(&r, NULL));
	ck_assert_int_eq(c2->state, VIRTIO_VSOCK_CONNECTING);
	h = hdr(VIRTIO_VSOCK_OP_REQUEST, 5001, 999);
	tx(&h, NULL);
	ck_assert(!rx_get(&r, NULL));
	ck_assert_uint_eq(vs.nr_rst, 1);
	*host_port = c->local_port;
	*connecting_port = c2->local_port;
}

/* c's connection (local, peer) if it is open. */
static struct virtio_vsock_conn *find_open(struct virtio_vsock *v, uint32_t local, uint32_t peer)
{
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++)
		if (v->conns[i].state != VIRTIO_VSOCK_FREE && v->conns[i].local_port == local &&
		    v->conns[i].peer_port == peer)
			return &v->conns[i];
	return NULL;
}

/* The guest resets its connection 5000 -> 1234. */
static void h_rst_5000(void)
{
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_RST, 5000, 1234);
	tx(&h, NULL);
	ck_assert_ptr_null(find_open(&vs, 1234, 5000));
}

static bool has_pair(const uint32_t (*pairs)[2], unsigned n, uint32_t local, uint32_t peer)
{
	for (unsigned i = 0; i < n; i++)
		if (pairs[i][0] == local && pairs[i][1] == peer)
			return true;
	return false;
}

START_TEST(fork_copy_resets_every_connection)
{
	char err[128] = "";
	uint32_t hp, cp;
	busy_device(&hp, &cp);
	uint32_t next = vs.next_port;
	ck_assert_uint_eq(next, cp + 1);

	/* the transport's state, then the device's fork state, as the bus
	 * saves them; the original is left as it was */
	struct statebuf_writer tw, w;
	statebuf_init(&tw);
	statebuf_init(&w);
	ck_assert_int_eq(virtio_mmio_state_save(&t, &tw), 0);
	ck_assert_int_eq(fork_save(&vs, &w, err, sizeof err), 0);
	ck_assert_str_eq(err, "");
	ck_assert_uint_eq(w.len, 12 + 4 * 8);
	struct statebuf_reader rd;
	statebuf_reader_init(&rd, w.buf, w.len);
	ck_assert_uint_eq(statebuf_get_u32(&rd), 1);
	ck_assert_uint_eq(statebuf_get_u32(&rd), next);
	ck_assert_uint_eq(statebuf_get_u32(&rd), 4);
	uint32_t pairs[4][2];
	for (unsigned i = 0; i < 4; i++) {
		pairs[i][0] = statebuf_get_u32(&rd);
		pairs[i][1] = statebuf_get_u32(&rd);
	}
	ck_assert_uint_eq(statebuf_left(&rd), 0);
	ck_assert(has_pair(pairs, 4, 1234, 5000));
	ck_assert(has_pair(pairs, 4, hp, 52));
	ck_assert(has_pair(pairs, 4, cp, 53));
	ck_assert(has_pair(pairs, 4, 999, 5001));
	ck_assert_uint_eq(vs.nr_rst, 1);
	ck_assert_ptr_nonnull(find_open(&vs, 1234, 5000));

	/* the guest posts rx buffers; only the copy will see them */
	rx_offer(8);
	copy_init();
	ck_assert_int_eq(virtio_mmio_state_load(&t2, tw.buf, tw.len, err, sizeof err), 0);
	ck_assert(vs2.dev.live);
	ck_assert_int_eq(fork_load(&vs2, w.buf, w.len, err, sizeof err), 0);
	ck_assert_uint_eq(vs2.next_port, next);
	ck_assert(!rx_get(&(struct virtio_vsock_hdr){ 0 }, NULL)); /* nothing before restored */
	ck_assert_ptr_nonnull(vs2.dev.ops->restored);
	vs2.dev.ops->restored(&vs2.dev);

	/* at once, one RST a connection and owed reset, none more */
	struct virtio_vsock_hdr r;
	uint32_t got[4][2];
	for (unsigned i = 0; i < 4; i++) {
		ck_assert(rx_get(&r, NULL));
		ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
		ck_assert_uint_eq(r.type, VIRTIO_VSOCK_TYPE_STREAM);
		ck_assert(!has_pair(got, i, r.src_port, r.dst_port));
		got[i][0] = r.src_port;
		got[i][1] = r.dst_port;
		ck_assert(has_pair(pairs, 4, r.src_port, r.dst_port));
	}
	ck_assert(!rx_get(&r, NULL));
	ck_assert_uint_eq(vs2.nr_rst, 0);
	ck_assert_uint_eq(vs2.stats.resets_sent, 4);
	ck_assert_uint_eq(bl2.closed + bl2.connected + bl2.requests, 0);

	/* the copy's next host connection takes the port after the
	 * original's last */
	struct virtio_vsock_conn *c;
	drv.mmio = &t2;
	ck_assert_int_eq(virtio_vsock_host_connect(&vs2, 52, NULL, &c), 0);
	ck_assert_uint_eq(c->local_port, next);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_REQUEST);
	ck_assert_uint_eq(r.src_port, next);
	drv.mmio = &t;
	statebuf_free(&tw);
	statebuf_free(&w);
	virtio_vsock_destroy(&vs2);
}
END_TEST

/* A full table and an owed RST: 65 pairs; the copy resets every one
 * (the guest's side of a connection left out would wait for ever). */
START_TEST(fork_copy_resets_a_full_table)
{
	char err[128] = "";
	rx_fill(QSIZE);
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++) {
		struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, 100 + i, 1234), r;
		tx(&h, NULL);
		ck_assert(rx_get(&r, NULL));
		ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RESPONSE);
	}
	ck_assert(fv_avail_idx(&drv, RXQ) == drv.q[RXQ].used_seen); /* no rx buffer left */
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, 99, 1234), r;
	tx(&h, NULL); /* the table is full: refused, its RST waits */
	ck_assert_uint_eq(vs.nr_rst, 1);
	struct statebuf_writer tw, w;
	statebuf_init(&tw);
	statebuf_init(&w);
	ck_assert_int_eq(virtio_mmio_state_save(&t, &tw), 0);
	ck_assert_int_eq(fork_save(&vs, &w, err, sizeof err), 0);
	ck_assert_uint_eq(w.len, 12 + (VIRTIO_VSOCK_MAX_CONNS + 1) * 8);

	rx_offer(QSIZE);
	copy_init();
	ck_assert_int_eq(virtio_mmio_state_load(&t2, tw.buf, tw.len, err, sizeof err), 0);
	ck_assert_int_eq(fork_load(&vs2, w.buf, w.len, err, sizeof err), 0);
	vs2.dev.ops->restored(&vs2.dev);
	drv.mmio = &t2;
	bool seen[VIRTIO_VSOCK_MAX_CONNS + 1] = { false };
	unsigned n = 0;
	for (unsigned round = 0; round < 2; round++) {
		while (rx_get(&r, NULL)) {
			ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
			ck_assert_uint_eq(r.src_port, 1234);
			ck_assert_uint_ge(r.dst_port, 99);
			ck_assert_uint_lt(r.dst_port, 100 + VIRTIO_VSOCK_MAX_CONNS);
			ck_assert(!seen[r.dst_port - 99]);
			seen[r.dst_port - 99] = true;
			n++;
		}
		rx_fill(8); /* the queue held 64: the rest go out with the next buffers */
	}
	ck_assert_uint_eq(n, VIRTIO_VSOCK_MAX_CONNS + 1);
	ck_assert_uint_eq(vs2.nr_rst, 0);
	drv.mmio = &t;
	statebuf_free(&tw);
	statebuf_free(&w);
	virtio_vsock_destroy(&vs2);
}
END_TEST

/* A quiet device's fork state: no pair, its next port. */
START_TEST(fork_save_quiet_device)
{
	char err[128] = "";
	struct statebuf_writer w;
	statebuf_init(&w);
	ck_assert_int_eq(fork_save(&vs, &w, err, sizeof err), 0);
	ck_assert_uint_eq(w.len, 12);
	struct statebuf_reader rd;
	statebuf_reader_init(&rd, w.buf, w.len);
	ck_assert_uint_eq(statebuf_get_u32(&rd), 1);
	ck_assert_uint_eq(statebuf_get_u32(&rd), VIRTIO_VSOCK_EPHEMERAL_BASE);
	ck_assert_uint_eq(statebuf_get_u32(&rd), 0);
	/* loaded into a copy: nothing to send */
	copy_init();
	ck_assert_int_eq(fork_load(&vs2, w.buf, w.len, err, sizeof err), 0);
	vs2.dev.ops->restored(&vs2.dev);
	ck_assert_uint_eq(vs2.nr_rst, 0);
	ck_assert_uint_eq(vs2.next_port, VIRTIO_VSOCK_EPHEMERAL_BASE);
	statebuf_free(&w);
	virtio_vsock_destroy(&vs2);
}
END_TEST

/* A fork state of count pairs (local 100 + i, peer 200 + i). */
static void fork_blob(struct statebuf_writer *w, uint32_t version, uint32_t next, uint32_t count,
		      uint32_t pairs)
{
	statebuf_init(w);
	statebuf_u32(w, version);
	statebuf_u32(w, next);
	statebuf_u32(w, count);
	for (uint32_t i = 0; i < pairs; i++) {
		statebuf_u32(w, 100 + i);
		statebuf_u32(w, 200 + i);
	}
	ck_assert_int_eq(w->err, 0);
}

/* The device as the refused loads must leave it: one owed RST
 * (999, 5001), the next port where it was. */
static void assert_unchanged(uint32_t next)
{
	ck_assert_uint_eq(vs.nr_rst, 1);
	ck_assert_uint_eq(vs.rst[0].local, 999);
	ck_assert_uint_eq(vs.rst[0].peer, 5001);
	ck_assert_uint_eq(vs.next_port, next);
}

START_TEST(fork_load_refuses_hostile_state)
{
	char err[128];
	struct virtio_vsock_hdr h = hdr(VIRTIO_VSOCK_OP_REQUEST, 5001, 999), r;
	tx(&h, NULL); /* refused with no rx buffer: the RST waits */
	const uint32_t next = VIRTIO_VSOCK_EPHEMERAL_BASE + 7;
	vs.next_port = next;
	assert_unchanged(next);
	struct statebuf_writer w;

	/* every truncation of a valid state */
	fork_blob(&w, 1, VIRTIO_VSOCK_EPHEMERAL_BASE + 100, 3, 3);
	for (size_t len = 0; len < w.len; len++) {
		err[0] = '\0';
		ck_assert_int_eq(fork_load(&vs, w.buf, len, err, sizeof err), -EINVAL);
		ck_assert_ptr_nonnull(strstr(err, "vsock: malformed fork state"));
		assert_unchanged(next);
	}
	/* trailing bytes: one more, a whole pair more than counted */
	uint8_t big[256];
	memcpy(big, w.buf, w.len);
	big[w.len] = 0;
	ck_assert_int_eq(fork_load(&vs, big, w.len + 1, err, sizeof err), -EINVAL);
	assert_unchanged(next);
	statebuf_free(&w);
	fork_blob(&w, 1, VIRTIO_VSOCK_EPHEMERAL_BASE, 2, 3);
	ck_assert_int_eq(fork_load(&vs, w.buf, w.len, err, sizeof err), -EINVAL);
	assert_unchanged(next);
	statebuf_free(&w);
	/* fewer pairs than counted */
	fork_blob(&w, 1, VIRTIO_VSOCK_EPHEMERAL_BASE, 3, 2);
	ck_assert_int_eq(fork_load(&vs, w.buf, w.len, err, sizeof err), -EINVAL);
	assert_unchanged(next);
	statebuf_free(&w);
	/* another version */
	const uint32_t versions[] = { 0, 2, 0xffffffffu };
	for (unsigned i = 0; i < 3; i++) {
		fork_blob(&w, versions[i], VIRTIO_VSOCK_EPHEMERAL_BASE, 1, 1);
		ck_assert_int_eq(fork_load(&vs, w.buf, w.len, err, sizeof err), -EINVAL);
		assert_unchanged(next);
		statebuf_free(&w);
	}
	/* a next port below the ephemeral range */
	const uint32_t low[] = { 0, 1024, VIRTIO_VSOCK_EPHEMERAL_BASE - 1 };
	for (unsigned i = 0; i < 3; i++) {
		fork_blob(&w, 1, low[i], 0, 0);
		ck_assert_int_eq(fork_load(&vs, w.buf, w.len, err, sizeof err), -EINVAL);
		assert_unchanged(next);
		statebuf_free(&w);
	}
	/* more pairs than a device can owe (its connections and resets),
	 * with the bytes to match, and a count that would overflow */
	const uint32_t too_many = VIRTIO_VSOCK_MAX_CONNS + VIRTIO_VSOCK_MAX_RST + 1;
	fork_blob(&w, 1, VIRTIO_VSOCK_EPHEMERAL_BASE, too_many, too_many);
	ck_assert_int_eq(fork_load(&vs, w.buf, w.len, err, sizeof err), -EINVAL);
	assert_unchanged(next);
	statebuf_free(&w);
	fork_blob(&w, 1, VIRTIO_VSOCK_EPHEMERAL_BASE, 0x20000000u, 1);
	ck_assert_int_eq(fork_load(&vs, w.buf, w.len, err, sizeof err), -EINVAL);
	assert_unchanged(next);
	statebuf_free(&w);

	/* none of them sent anything once the guest gives a buffer: only
	 * the owed RST */
	rx_fill(4);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	ck_assert_uint_eq(r.src_port, 999);
	ck_assert_uint_eq(r.dst_port, 5001);
	ck_assert(!rx_get(&r, NULL));

	/* the highest next port is taken; the host's next connection uses it */
	fork_blob(&w, 1, 0xffffffffu, 0, 0);
	ck_assert_int_eq(fork_load(&vs, w.buf, w.len, err, sizeof err), 0);
	ck_assert_uint_eq(vs.next_port, 0xffffffffu);
	statebuf_free(&w);
	struct virtio_vsock_conn *c;
	ck_assert_int_eq(virtio_vsock_host_connect(&vs, 52, NULL, &c), 0);
	ck_assert_uint_eq(c->local_port, 0xffffffffu);
	ck_assert_uint_eq(vs.next_port, VIRTIO_VSOCK_EPHEMERAL_BASE); /* wrapped into the range */
}
END_TEST

/* A fork loads into a fresh device: one that holds a connection refuses
 * it and keeps what it had. */
START_TEST(fork_load_refused_with_a_connection)
{
	char err[128] = "";
	rx_fill(4);
	struct virtio_vsock_conn *c = guest_connect(5000);
	uint32_t next = vs.next_port;
	struct statebuf_writer w;
	fork_blob(&w, 1, VIRTIO_VSOCK_EPHEMERAL_BASE + 50, 2, 2);
	ck_assert_int_eq(fork_load(&vs, w.buf, w.len, err, sizeof err), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "vsock: "));
	ck_assert_uint_eq(vs.next_port, next);
	ck_assert_uint_eq(vs.nr_rst, 0);
	ck_assert_int_eq(c->state, VIRTIO_VSOCK_CONNECTED);
	vs.dev.ops->restored(&vs.dev);
	struct virtio_vsock_hdr r;
	ck_assert(!rx_get(&r, NULL));
	/* the connection still carries data */
	ck_assert_int_eq(virtio_vsock_host_send(&vs, c, "ok", 2), 2);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RW);
	ck_assert_uint_eq(r.len, 2);
	/* once it is gone, the same state loads */
	h_rst_5000();
	ck_assert_int_eq(fork_load(&vs, w.buf, w.len, err, sizeof err), 0);
	ck_assert_uint_eq(vs.nr_rst, 2);
	ck_assert_uint_eq(vs.next_port, VIRTIO_VSOCK_EPHEMERAL_BASE + 50);
	statebuf_free(&w);
}
END_TEST

/* ---- the Unix-socket backend, over real sockets ---- */

static struct vsock_unix vu;
static char dir[64];

static void pump(void)
{
	for (unsigned k = 0; k < 4; k++) {
		struct pollfd pfds[VU_MAX + 1];
		unsigned n = vsock_unix_pollfds(&vu, pfds, VU_MAX + 1);
		ck_assert_int_ge(poll(pfds, n, 0), 0);
		vsock_unix_handle(&vu, pfds, n);
	}
}

static void set_sun(struct sockaddr_un *sa, const char *path)
{
	ck_assert_uint_lt(strlen(path), sizeof sa->sun_path);
	memcpy(sa->sun_path, path, strlen(path) + 1);
}

static int listen_at(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	set_sun(&sa, path);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	ck_assert_int_eq(listen(fd, 4), 0);
	return fd;
}

static void unix_setup(void)
{
	setup();
	snprintf(dir, sizeof dir, "/tmp/kbox-vsock-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char base[96];
	snprintf(base, sizeof base, "%s/v.sock", dir);
	ck_assert_int_eq(vsock_unix_init(&vu, &vs, base, true), 0);
}

static void unix_teardown(void)
{
	char p[128];
	vsock_unix_destroy(&vu);
	snprintf(p, sizeof p, "%s/v.sock_1234", dir);
	unlink(p);
	rmdir(dir);
	teardown();
}

START_TEST(unix_host_initiated)
{
	int sv[2];
	char buf[64] = { 0 };
	struct virtio_vsock_hdr h, r;
	uint8_t payload[64];

	rx_fill(8);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(vsock_unix_adopt(&vu, sv[0]), 0);
	ck_assert_int_eq(write(sv[1], "CONNECT 52\n", 11), 11);
	pump();
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_REQUEST);
	ck_assert_uint_eq(r.dst_port, 52);
	h = hdr(VIRTIO_VSOCK_OP_RESPONSE, 52, r.src_port);
	tx(&h, NULL);
	ssize_t n = read(sv[1], buf, sizeof buf - 1);
	char want[32];
	snprintf(want, sizeof want, "OK %u\n", r.src_port);
	ck_assert_int_eq(n, (ssize_t)strlen(want));
	ck_assert_str_eq(buf, want);
	ck_assert_int_eq(write(sv[1], "ping", 4), 4);
	pump();
	ck_assert(rx_get(&r, payload));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RW);
	ck_assert_uint_eq(r.len, 4);
	ck_assert_mem_eq(payload, "ping", 4);
	h = hdr(VIRTIO_VSOCK_OP_RW, 52, r.src_port);
	h.len = 4;
	tx(&h, "pong");
	ck_assert_int_eq(read(sv[1], buf, sizeof buf), 4);
	ck_assert_mem_eq(buf, "pong", 4);
	/* host closes: the guest hears SHUTDOWN */
	close(sv[1]);
	pump();
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_SHUTDOWN);
	ck_assert_uint_eq(r.flags, VIRTIO_VSOCK_SHUT_SEND);
}
END_TEST

START_TEST(unix_guest_initiated)
{
	char path[128], buf[16];
	struct virtio_vsock_hdr h, r;
	uint8_t payload[64];

	rx_fill(8);
	snprintf(path, sizeof path, "%s/v.sock_1234", dir);
	int l = listen_at(path);
	h = hdr(VIRTIO_VSOCK_OP_REQUEST, 7000, 1234);
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RESPONSE);
	int a = accept(l, NULL, NULL);
	ck_assert_int_ge(a, 0);
	h = hdr(VIRTIO_VSOCK_OP_RW, 7000, 1234);
	h.len = 2;
	tx(&h, "hi");
	ck_assert_int_eq(read(a, buf, sizeof buf), 2);
	ck_assert_mem_eq(buf, "hi", 2);
	ck_assert_int_eq(write(a, "yo", 2), 2);
	pump();
	ck_assert(rx_get(&r, payload));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RW);
	ck_assert_mem_eq(payload, "yo", 2);
	/* guest closes both ways: fd closed, RST to the guest */
	h = hdr(VIRTIO_VSOCK_OP_SHUTDOWN, 7000, 1234);
	h.flags = 3;
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	ck_assert_int_eq(read(a, buf, sizeof buf), 0);
	/* nobody listens on 999 */
	h = hdr(VIRTIO_VSOCK_OP_REQUEST, 7001, 999);
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
	close(a);
	close(l);
}
END_TEST

START_TEST(unix_control_socket)
{
	char path[128], buf[8];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(path, sizeof path, "%s/v.sock", dir);
	set_sun(&sa, path);
	/* a second backend cannot take over a live control socket */
	struct vsock_unix other;
	ck_assert_int_eq(vsock_unix_init(&other, &vs, path, true), -EADDRINUSE);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	ck_assert_int_eq(write(fd, "HELLO\n", 6), 6);
	pump();
	ck_assert_int_eq(read(fd, buf, sizeof buf), 0); /* dropped */
	close(fd);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	ck_assert_int_eq(write(fd, "CONNECT 99999999999\n", 20), 20);
	pump();
	ck_assert_int_eq(read(fd, buf, sizeof buf), 0);
	close(fd);
}
END_TEST

/* A request for the notice port is refused and counted, and leaves
 * nothing behind; other ports are untouched. */
START_TEST(unix_notice_port)
{
	char path[128], err[128];
	uint64_t n = 0;
	struct virtio_vsock_hdr h, r;

	rx_fill(16);
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(efd, 0);
	vsock_unix_notice(&vu, 1025, efd);
	/* even with a listener at <path>_1025, the request goes nowhere */
	snprintf(path, sizeof path, "%s/v.sock_1025", dir);
	int l1025 = listen_at(path);
	for (unsigned i = 0; i < 2; i++) {
		h = hdr(VIRTIO_VSOCK_OP_REQUEST, 7000 + i, 1025);
		tx(&h, NULL);
		ck_assert(rx_get(&r, NULL));
		ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RST);
		ck_assert_uint_eq(r.src_port, 1025);
		ck_assert_uint_eq(r.dst_port, 7000 + i);
	}
	ck_assert_int_eq(read(efd, &n, sizeof n), (ssize_t)sizeof n);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(read(efd, &n, sizeof n), -1); /* read resets it */
	ck_assert_int_eq(errno, EAGAIN);
	for (unsigned i = 0; i < VU_MAX; i++)
		ck_assert_int_eq(vu.e[i].fd, -1);
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++)
		ck_assert_int_eq(vs.conns[i].state, VIRTIO_VSOCK_FREE);
	struct pollfd lp = { .fd = l1025, .events = POLLIN };
	ck_assert_int_eq(poll(&lp, 1, 0), 0); /* nobody connected to it */
	ck_assert_int_eq(vs.dev.ops->quiet(&vs.dev, err, sizeof err), 0);

	/* another port is passed on as before */
	snprintf(path, sizeof path, "%s/v.sock_1234", dir);
	int l = listen_at(path);
	h = hdr(VIRTIO_VSOCK_OP_REQUEST, 7100, 1234);
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RESPONSE);
	int a = accept(l, NULL, NULL);
	ck_assert_int_ge(a, 0);
	ck_assert_int_eq(read(efd, &n, sizeof n), -1);
	ck_assert_int_eq(vs.dev.ops->quiet(&vs.dev, err, sizeof err), -EBUSY);
	close(a);
	pump();
	ck_assert(rx_get(&r, NULL)); /* the host side's close */
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_SHUTDOWN);

	/* turned off: the notice port is an ordinary port again */
	vsock_unix_notice(&vu, 1025, -1);
	h = hdr(VIRTIO_VSOCK_OP_REQUEST, 7200, 1025);
	tx(&h, NULL);
	ck_assert(rx_get(&r, NULL));
	ck_assert_uint_eq(r.op, VIRTIO_VSOCK_OP_RESPONSE);
	a = accept(l1025, NULL, NULL);
	ck_assert_int_ge(a, 0);
	ck_assert_int_eq(read(efd, &n, sizeof n), -1);
	close(a);
	close(l);
	close(l1025);
	unlink(path);
	snprintf(path, sizeof path, "%s/v.sock_1025", dir);
	unlink(path);
	close(efd);
}
END_TEST

Suite *virtio_vsock_suite(void)
{
	Suite *s = suite_create("virtio_vsock");

	unit_suite_case_fixture(s, "core", setup, teardown, 0, config_has_guest_cid,
				connect_accept_and_refuse, guest_to_host_data,
				host_to_guest_within_credit,
				large_send_is_split_by_buffer, guest_overrun_resets,
				bad_fields_are_dropped_or_reset,
				bad_lengths_need_reset, fwd_cnt_past_sent_resets,
				counters_wrap, host_initiated, shutdown_both_ways,
				credit_request_answered, credit_update_after_reads,
				connection_table_bounded,
				rst_backlog_bounded_without_rx_buffers,
				tiny_rx_buffer_needs_reset,
				broken_tx_ring_needs_reset, quiet_fresh_device,
				quiet_busy_with_open_connection,
				quiet_busy_with_host_connection_pending,
				quiet_busy_with_reset_to_send, quiet_after_device_reset,
				fork_copy_resets_every_connection, fork_copy_resets_a_full_table,
				fork_save_quiet_device,
				fork_load_refuses_hostile_state,
				fork_load_refused_with_a_connection);
	unit_suite_case_fixture(s, "unix", unix_setup, unix_teardown, 0,
				unix_host_initiated, unix_guest_initiated,
				unix_control_socket, unix_notice_port);
	return s;
}
