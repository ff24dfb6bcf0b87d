/* virtio-net device: a fake guest driver over 1 MiB of RAM posts real
 * descriptor chains on the rx and tx queues through the virtio-mmio
 * transport; a fake backend records transmitted frames and may answer.
 * Hostile chains and frames must be dropped or stop the device, never
 * crash it. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "devices/virtio_mmio.h"
#include "devices/virtio_mmio_state.h"
#include "devices/virtio_net.h"
#include "lib/statebuf.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/unit_suite.h"

#define RAM 0x100000u
#define QSIZE 64u
#define BUF 0x40000u

enum { RX, TX };

static struct fv_driver drv;
static struct virtio_net net;
static struct virtio_mmio t;

/* What the backend saw. */
static uint8_t last_tx[VIRTIO_NET_MAX_FRAME];
static size_t last_tx_len;
static unsigned ntx;
static bool echo;

static void be_tx(void *ctx, const uint8_t *frame, size_t len)
{
	(void)ctx;
	ck_assert_uint_le(len, sizeof last_tx);
	memcpy(last_tx, frame, len);
	last_tx_len = len;
	ntx++;
	if (echo)
		ck_assert_int_eq(virtio_net_rx_enqueue(&net, frame, len), 0);
}

static uint32_t extra_features; /* offloads a test negotiates */
static bool no_mtu;              /* a driver that does not take MTU */

static void driver_up(void)
{
	fv_wr(&drv, FV_R_DEV_FEATURES_SEL, 0);
	uint32_t f = fv_rd(&drv, 0x10);
	ck_assert(f & (1u << VIRTIO_NET_F_MAC));
	ck_assert(f & (1u << VIRTIO_NET_F_MTU));
	uint64_t want = 1ull << VIRTIO_F_VERSION_1 | 1u << VIRTIO_NET_F_MAC |
			(no_mtu ? 0 : 1u << VIRTIO_NET_F_MTU) | 1u << VIRTIO_NET_F_STATUS | extra_features;
	ck_assert_int_eq(fv_driver_up(&drv, want, 2, QSIZE), 0);
	ck_assert(net.dev.live);
}

static void setup(void)
{
	ck_assert_int_eq(fv_init(&drv, 0, RAM), 0);
	const uint8_t mac[6] = VIRTIO_NET_GUEST_MAC;
	struct net_backend be = { be_tx, NULL };
	ck_assert_int_eq(virtio_net_init(&net, mac, &be), 0);
	ck_assert_int_eq(virtio_mmio_init(&t, &net.dev, &drv.gm, NULL), 0);
	drv.mmio = &t;
	ntx = 0;
	last_tx_len = 0;
	echo = false;
	driver_up();
}

static void teardown(void)
{
	virtio_net_destroy(&net);
	fv_free(&drv);
}

static bool needs_reset(void)
{
	return fv_rd(&drv, 0x70) & VIRTIO_STATUS_NEEDS_RESET;
}

static void frame(uint8_t *f, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		f[i] = (uint8_t)(seed + i * 7);
}

/* Transmit a header (gso byte g) and len frame bytes, split after split
 * bytes into two descriptors. */
static void tx(size_t len, uint8_t g, uint32_t split)
{
	memset(drv.ram + BUF, 0, VIRTIO_NET_HDR_SIZE);
	drv.ram[BUF + 1] = g;
	frame(drv.ram + BUF + VIRTIO_NET_HDR_SIZE, len, 3);
	uint32_t total = (uint32_t)(VIRTIO_NET_HDR_SIZE + len);
	if (split == 0 || split >= total) {
		struct fv_seg s = { BUF, total, false };
		fv_post(&drv, TX, &s, 1);
	} else {
		struct fv_seg s[2] = { { BUF, split, false },
				       { BUF + split, total - split, false } };
		fv_post(&drv, TX, s, 2);
	}
}

START_TEST(config_space)
{
	uint8_t b[VIRTIO_NET_CONFIG_SIZE];
	const uint8_t mac[6] = VIRTIO_NET_GUEST_MAC;
	for (unsigned i = 0; i < VIRTIO_NET_CONFIG_SIZE; i++)
		virtio_mmio_read(&t, VIRTIO_MMIO_CONFIG + i, &b[i], 1);
	ck_assert_mem_eq(b, mac, 6);
	ck_assert_uint_eq(b[6] | b[7] << 8, VIRTIO_NET_S_LINK_UP);
	ck_assert_uint_eq(b[10] | b[11] << 8, VIRTIO_NET_MTU);
	ck_assert_uint_eq(fv_rd(&drv, 0x08), VIRTIO_NET_DEVICE_ID);
}
END_TEST

START_TEST(tx_frames)
{
	uint32_t n;
	uint8_t want[VIRTIO_NET_MAX_FRAME];
	static const uint32_t splits[] = { 0, 1, 11, 12, 13, 40 };
	for (unsigned i = 0; i < sizeof splits / sizeof splits[0]; i++) {
		tx(60, 0, splits[i]);
		ck_assert(fv_used(&drv, TX, NULL, &n));
		ck_assert_uint_eq(n, 0);
		ck_assert_uint_eq(last_tx_len, 60);
		frame(want, 60, 3);
		ck_assert_mem_eq(last_tx, want, 60);
	}
	tx(VIRTIO_NET_MAX_FRAME, 0, 700);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	ck_assert_uint_eq(last_tx_len, VIRTIO_NET_MAX_FRAME);
	frame(want, VIRTIO_NET_MAX_FRAME, 3);
	ck_assert_mem_eq(last_tx, want, VIRTIO_NET_MAX_FRAME);
	tx(VIRTIO_NET_ETH_HLEN, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	ck_assert_uint_eq(last_tx_len, VIRTIO_NET_ETH_HLEN);
	ck_assert_uint_eq(ntx, 8);
	ck_assert(!needs_reset());
}
END_TEST

START_TEST(tx_bad_frames_dropped)
{
	uint32_t n;
	tx(VIRTIO_NET_ETH_HLEN - 1, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	tx(0, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	tx(VIRTIO_NET_MAX_FRAME + 1, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	tx(VIRTIO_NET_MAX_FRAME + 100, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	tx(100, 1 /* TCPv4 GSO */, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	ck_assert_uint_eq(ntx, 0);
	struct virtio_net_stats st;
	virtio_net_get_stats(&net, &st);
	ck_assert_uint_eq(st.tx_dropped, 5);
	ck_assert(!needs_reset());
	tx(60, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	ck_assert_uint_eq(ntx, 1);
}
END_TEST

/* A driver that did not take MTU stays at Ethernet's 1500 both ways. */
START_TEST(base_mtu_without_feature)
{
	uint32_t n;
	struct virtio_net_stats st;
	uint8_t f[VIRTIO_NET_BASE_FRAME + 1] = { 0 };

	no_mtu = true;
	driver_up();
	no_mtu = false;
	tx(VIRTIO_NET_BASE_FRAME + 1, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	ck_assert_uint_eq(ntx, 0);
	tx(VIRTIO_NET_BASE_FRAME, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	ck_assert_uint_eq(ntx, 1);
	ck_assert_uint_eq(last_tx_len, VIRTIO_NET_BASE_FRAME);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, VIRTIO_NET_BASE_FRAME + 1), -EMSGSIZE);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, VIRTIO_NET_BASE_FRAME), 0);
	virtio_net_get_stats(&net, &st);
	ck_assert_uint_eq(st.tx_dropped, 1);
	ck_assert(!needs_reset());
}
END_TEST

START_TEST(tx_short_header_stops)
{
	struct fv_seg s = { BUF, VIRTIO_NET_HDR_SIZE - 1, false };
	fv_post(&drv, TX, &s, 1);
	ck_assert(needs_reset());
	ck_assert_uint_eq(ntx, 0);
	/* The driver resets the device and starts over. */
	driver_up();
	ck_assert(!needs_reset());
	uint32_t n;
	tx(60, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	ck_assert_uint_eq(ntx, 1);
}
END_TEST

START_TEST(tx_ring_garbage_stops)
{
	/* A descriptor outside RAM. */
	struct fv_seg s = { RAM - 4, 64, false };
	fv_post(&drv, TX, &s, 1);
	ck_assert(needs_reset());
	ck_assert_uint_eq(ntx, 0);
}
END_TEST

/* Post one receive buffer of len bytes at gpa, split in two after split
 * bytes (0: one descriptor). */
static void rx_buf(uint64_t gpa, uint32_t len, uint32_t split)
{
	if (split == 0 || split >= len) {
		struct fv_seg s = { gpa, len, true };
		fv_post(&drv, RX, &s, 1);
	} else {
		struct fv_seg s[2] = { { gpa, split, true }, { gpa + split, len - split, true } };
		fv_post(&drv, RX, s, 2);
	}
}

static void check_rx(uint64_t gpa, uint32_t n, size_t len, uint8_t seed)
{
	uint8_t want[VIRTIO_NET_MAX_FRAME];
	ck_assert_uint_eq(n, VIRTIO_NET_HDR_SIZE + len);
	for (unsigned i = 0; i < VIRTIO_NET_HDR_SIZE; i++)
		ck_assert_uint_eq(drv.ram[gpa + i], i == 10 ? 1 : 0);
	frame(want, len, seed);
	ck_assert_mem_eq(drv.ram + gpa + VIRTIO_NET_HDR_SIZE, want, len);
}

START_TEST(rx_waits_for_buffers)
{
	uint8_t f[VIRTIO_NET_MAX_FRAME];
	uint32_t n;
	frame(f, 60, 1);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, 60), 0);
	frame(f, VIRTIO_NET_MAX_FRAME, 2);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, VIRTIO_NET_MAX_FRAME), 0);
	virtio_net_rx_flush(&net); /* no buffers yet: nothing moves */
	ck_assert(!fv_used(&drv, RX, NULL, &n));
	memset(drv.ram + BUF, 0xee, 0x1000);
	rx_buf(BUF, VIRTIO_NET_HDR_SIZE + VIRTIO_NET_MAX_FRAME, 0);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	check_rx(BUF, n, 60, 1);
	ck_assert(!fv_used(&drv, RX, NULL, &n));
	memset(drv.ram + BUF + 0x1000, 0xee, 0x1000);
	rx_buf(BUF + 0x1000, VIRTIO_NET_HDR_SIZE + VIRTIO_NET_MAX_FRAME, 5); /* header split */
	ck_assert(fv_used(&drv, RX, NULL, &n));
	check_rx(BUF + 0x1000, n, VIRTIO_NET_MAX_FRAME, 2);
	/* Buffers first, frame later. */
	rx_buf(BUF + 0x2000, 2048, 700);
	ck_assert(!fv_used(&drv, RX, NULL, &n));
	frame(f, 100, 9);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, 100), 0);
	uint64_t cnt;
	ck_assert_int_eq(read(virtio_net_wake_fd(&net), &cnt, sizeof cnt), (ssize_t)sizeof cnt);
	virtio_net_rx_flush(&net);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	check_rx(BUF + 0x2000, n, 100, 9);
	struct virtio_net_stats st;
	virtio_net_get_stats(&net, &st);
	ck_assert_uint_eq(st.rx_frames, 3);
	ck_assert_uint_eq(st.rx_dropped, 0);
}
END_TEST

START_TEST(rx_queue_bounded)
{
	uint8_t f[64] = { 0 };
	for (unsigned i = 0; i < VIRTIO_NET_RXQ_FRAMES; i++)
		ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, sizeof f), 0);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, sizeof f), -ENOBUFS);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, VIRTIO_NET_ETH_HLEN - 1), -EMSGSIZE);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, VIRTIO_NET_MAX_FRAME + 1), -EMSGSIZE);
	struct virtio_net_stats st;
	virtio_net_get_stats(&net, &st);
	ck_assert_uint_eq(st.rx_dropped, 3);
	/* Draining one makes room for one. */
	uint32_t n;
	rx_buf(BUF, 2048, 0);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, sizeof f), 0);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, sizeof f), -ENOBUFS);
}
END_TEST

START_TEST(rx_small_buffer_stops)
{
	uint8_t f[200] = { 0 };
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, sizeof f), 0);
	rx_buf(BUF, VIRTIO_NET_HDR_SIZE + sizeof f - 1, 0);
	ck_assert(needs_reset());
	uint32_t n;
	ck_assert(!fv_used(&drv, RX, NULL, &n));
	/* A reset drops the queue: the new driver sees no stale frame. */
	driver_up();
	rx_buf(BUF, 2048, 0);
	ck_assert(!fv_used(&drv, RX, NULL, &n));
}
END_TEST

START_TEST(rx_readable_buffer_stops)
{
	uint8_t f[60] = { 0 };
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, sizeof f), 0);
	struct fv_seg s[2] = { { BUF, 16, false }, { BUF + 16, 2048, true } };
	fv_post(&drv, RX, s, 2);
	ck_assert(needs_reset());
}
END_TEST

START_TEST(tx_reply_reaches_rx)
{
	uint32_t n;
	echo = true;
	rx_buf(BUF + 0x4000, 2048, 0);
	tx(80, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	ck_assert(fv_used(&drv, RX, NULL, &n));
	check_rx(BUF + 0x4000, n, 80, 3);
}
END_TEST

START_TEST(many_frames_through)
{
	uint8_t f[300];
	uint32_t n;
	for (unsigned round = 0; round < 3 * QSIZE; round++) {
		frame(f, sizeof f, (uint8_t)round);
		ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, sizeof f), 0);
		uint64_t gpa = BUF + 0x1000 * (round % 8);
		rx_buf(gpa, 2048, round % 2 ? 0 : 100);
		ck_assert(fv_used(&drv, RX, NULL, &n));
		check_rx(gpa, n, sizeof f, (uint8_t)round);
		tx(64 + round, 0, round % 40);
		ck_assert(fv_used(&drv, TX, NULL, &n));
		ck_assert_uint_eq(last_tx_len, 64 + round);
	}
	ck_assert(!needs_reset());
}
END_TEST

/* Another thread (lwIP's, in the VMM) enqueues while the device thread
 * flushes: every frame arrives once, in order, or is counted as dropped. */
#define THREAD_FRAMES 2000u

static void *producer(void *arg)
{
	(void)arg;
	uint8_t f[64] = { 0 };
	for (unsigned i = 0; i < THREAD_FRAMES; i++) {
		memcpy(f + 20, &i, sizeof i);
		for (unsigned tries = 0; tries < 100000; tries++) {
			if (virtio_net_rx_enqueue(&net, f, sizeof f) != -ENOBUFS)
				break;
			usleep(100);
		}
	}
	return NULL;
}

START_TEST(enqueue_from_another_thread)
{
	pthread_t th;
	uint32_t n;
	unsigned got = 0, posted = 0;
	ck_assert_int_eq(pthread_create(&th, NULL, producer, NULL), 0);
	/* Bounded: at most THREAD_FRAMES buffers and a few seconds. */
	for (unsigned spins = 0; got < THREAD_FRAMES && spins < 200000; spins++) {
		if (posted - got < QSIZE / 2) {
			rx_buf(BUF + 0x1000 * (posted % 64), 2048, 0);
			posted++;
		} else {
			usleep(50);
			virtio_net_rx_flush(&net);
		}
		while (fv_used(&drv, RX, NULL, &n)) {
			unsigned idx;
			uint64_t at = BUF + 0x1000 * (got % 64) + VIRTIO_NET_HDR_SIZE + 20;
			memcpy(&idx, fv_at(&drv, at, sizeof idx), sizeof idx);
			ck_assert_uint_eq(n, VIRTIO_NET_HDR_SIZE + 64);
			ck_assert_uint_eq(idx, got);
			got++;
		}
	}
	pthread_join(th, NULL);
	ck_assert_uint_eq(got, THREAD_FRAMES);
	ck_assert(!needs_reset());
}
END_TEST

START_TEST(init_rejects)
{
	struct virtio_net v;
	const uint8_t mcast[6] = { 1, 0, 0x5e, 0, 0, 1 };
	ck_assert_int_eq(virtio_net_init(&v, mcast, NULL), -EINVAL);
	ck_assert_int_eq(virtio_net_init(&v, NULL, NULL), -EINVAL);
}
END_TEST

/* RFC 1071 over buf, added to sum. */
static uint32_t sum16(uint32_t sum, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		sum += (uint32_t)b[i] << 8 | b[i + 1];
	if (n & 1)
		sum += (uint32_t)b[n - 1] << 8;
	return sum;
}

static uint16_t fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)sum;
}

/* An Ethernet + IPv4 + UDP frame of len bytes whose UDP checksum field
 * holds the pseudo-header sum, as a guest with CSUM offload leaves it;
 * *want gets the complete checksum. */
static size_t udp_partial(uint8_t *f, size_t len, uint16_t *want)
{
	memset(f, 0, len);
	frame(f + 42, len - 42, 9);
	f[12] = 0x08;
	uint8_t *ip = f + 14, *udp = f + 34;
	ip[0] = 0x45;
	ip[9] = 17;
	memcpy(ip + 12, (uint8_t[]){ 10, 0, 2, 15 }, 4);
	memcpy(ip + 16, (uint8_t[]){ 10, 0, 2, 2 }, 4);
	uint16_t ulen = (uint16_t)(len - 34);
	udp[0] = 0x30, udp[1] = 0x39, udp[2] = 0, udp[3] = 53;
	udp[4] = (uint8_t)(ulen >> 8), udp[5] = (uint8_t)ulen;
	uint8_t pseudo[12];
	memcpy(pseudo, ip + 12, 8);
	pseudo[8] = 0, pseudo[9] = 17, pseudo[10] = (uint8_t)(ulen >> 8), pseudo[11] = (uint8_t)ulen;
	uint16_t ps = fold(sum16(0, pseudo, 12));
	*want = (uint16_t)~fold(sum16(sum16(0, pseudo, 12), udp, ulen));
	udp[6] = (uint8_t)(ps >> 8), udp[7] = (uint8_t)ps;
	return len;
}

/* Transmit f (len bytes) with a header asking for a checksum from start
 * at off. */
static void tx_csum(const uint8_t *f, size_t len, uint16_t start, uint16_t off)
{
	memset(drv.ram + BUF, 0, VIRTIO_NET_HDR_SIZE);
	drv.ram[BUF] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
	drv.ram[BUF + 6] = (uint8_t)start, drv.ram[BUF + 7] = (uint8_t)(start >> 8);
	drv.ram[BUF + 8] = (uint8_t)off, drv.ram[BUF + 9] = (uint8_t)(off >> 8);
	memcpy(drv.ram + BUF + VIRTIO_NET_HDR_SIZE, f, len);
	struct fv_seg s = { BUF, (uint32_t)(VIRTIO_NET_HDR_SIZE + len), false };
	fv_post(&drv, TX, &s, 1);
}

START_TEST(csum_offloads)
{
	fv_wr(&drv, 0x10 + 0x4, 0);
	uint32_t f = fv_rd(&drv, 0x10);
	ck_assert(f & (1u << VIRTIO_NET_F_CSUM));
	ck_assert(f & (1u << VIRTIO_NET_F_GUEST_CSUM));
	extra_features = 1u << VIRTIO_NET_F_CSUM | 1u << VIRTIO_NET_F_GUEST_CSUM;
	driver_up();
	uint8_t fr[VIRTIO_NET_MAX_FRAME];
	uint16_t want;
	uint32_t n;
	/* Odd and even lengths; the device completes the checksum. */
	static const size_t lens[] = { 60, 61, 333, VIRTIO_NET_MAX_FRAME };
	for (unsigned i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		udp_partial(fr, lens[i], &want);
		unsigned before = ntx;
		tx_csum(fr, lens[i], 34, 6);
		ck_assert(fv_used(&drv, TX, NULL, &n));
		ck_assert_uint_eq(ntx, before + 1);
		ck_assert_uint_eq(last_tx[40] << 8 | last_tx[41], want);
		ck_assert_mem_eq(last_tx + 42, fr + 42, lens[i] - 42);
	}
	/* Offsets from the guest that do not fit are dropped, not trusted. */
	static const uint16_t bad[][2] = { { 60, 0 }, { 59, 0 }, { 34, 25 }, { 34, 26 }, { 0, 6 }, { 13, 6 },
					   { 65535, 65535 } };
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		udp_partial(fr, 60, &want);
		unsigned before = ntx;
		tx_csum(fr, 60, bad[i][0], bad[i][1]);
		ck_assert(fv_used(&drv, TX, NULL, &n));
		ck_assert_uint_eq(ntx, before);
	}
	ck_assert(!needs_reset());
	/* Received frames are marked valid: the stack made their sums. */
	uint8_t rf[60];
	frame(rf, 60, 5);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, rf, 60), 0);
	rx_buf(BUF + 0x1000, 2048, 0);
	virtio_net_rx_flush(&net);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	ck_assert_uint_eq(drv.ram[BUF + 0x1000], VIRTIO_NET_HDR_F_DATA_VALID);
	extra_features = 0;
}
END_TEST

START_TEST(csum_request_without_offload_dropped)
{
	/* driver_up (fixture) negotiated no offload. */
	uint8_t fr[60];
	uint16_t want;
	uint32_t n;
	udp_partial(fr, 60, &want);
	unsigned before = ntx;
	tx_csum(fr, 60, 34, 6);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	ck_assert_uint_eq(ntx, before);
}
END_TEST

/* Three TCP segments from 10.0.2.2:80 (the last one short and pushed)
 * in segs, merged by lib/gso.c into *m. */
static uint8_t segs[3][VIRTIO_NET_MAX_FRAME];
static size_t seglen[3];
static uint8_t merged[VIRTIO_NET_MAX_GSO_FRAME];
static size_t merged_len;
static struct gso_hdr merged_h;

static void keep_merged(void *ctx, const struct gso_hdr *h, const uint8_t *f, size_t len)
{
	(void)ctx;
	merged_h = *h;
	memcpy(merged, f, len);
	merged_len = len;
}

static void make_merged(void)
{
	static struct gso g;
	static const uint8_t ph_addrs[8] = { 10, 0, 2, 2, 10, 0, 2, 15 };
	for (unsigned i = 0; i < 3; i++) {
		uint8_t *f = segs[i];
		size_t plen = i < 2 ? 1460 : 99, len = 54 + plen;
		memset(f, 0, 54);
		memcpy(f, (const uint8_t[])VIRTIO_NET_GUEST_MAC, 6);
		f[12] = 0x08;
		f[14] = 0x45;
		f[16] = (uint8_t)((len - 14) >> 8), f[17] = (uint8_t)(len - 14);
		f[19] = (uint8_t)i;
		f[22] = 64, f[23] = 6;
		memcpy(f + 26, ph_addrs, 8);
		uint16_t c = frame_csum(f + 14, 20, 0);
		f[24] = (uint8_t)(c >> 8), f[25] = (uint8_t)c;
		f[35] = 80, f[36] = 0x9c;
		uint32_t seq = 1000 + i * 1460;
		f[38] = (uint8_t)(seq >> 24), f[39] = (uint8_t)(seq >> 16), f[40] = (uint8_t)(seq >> 8), f[41] = (uint8_t)seq;
		f[46] = 0x50, f[47] = i < 2 ? 0x10 : 0x18, f[48] = 0xff;
		frame(f + 54, plen, (uint8_t)i);
		uint8_t ph[12];
		memcpy(ph, ph_addrs, 8);
		ph[8] = 0, ph[9] = 6, ph[10] = (uint8_t)((len - 34) >> 8), ph[11] = (uint8_t)(len - 34);
		c = frame_csum(f + 34, len - 34, (uint16_t)~frame_csum(ph, 12, 0));
		f[50] = (uint8_t)(c >> 8), f[51] = (uint8_t)c;
		seglen[i] = len;
	}
	gso_init(&g, VIRTIO_NET_MAX_GSO_FRAME, keep_merged, NULL);
	for (unsigned i = 0; i < 3; i++)
		gso_add(&g, segs[i], seglen[i]);
	gso_flush(&g);
	ck_assert_uint_eq(merged_h.gso_type, GSO_TYPE_TCPV4);
	ck_assert_uint_eq(merged_len, 54 + 2 * 1460 + 99);
}

START_TEST(gso_segmented_without_tso)
{
	/* The fixture's driver took no offload: segments arrive. */
	uint32_t n;
	make_merged();
	ck_assert_int_eq(virtio_net_rx_enqueue_gso(&net, &merged_h, merged, merged_len), 0);
	for (unsigned i = 0; i < 3; i++) {
		rx_buf(BUF + i * 0x1000, 2048, 0);
		ck_assert(fv_used(&drv, RX, NULL, &n));
		ck_assert_uint_eq(n, VIRTIO_NET_HDR_SIZE + seglen[i]);
		ck_assert_uint_eq(drv.ram[BUF + i * 0x1000 + 1], 0); /* no GSO */
		ck_assert_mem_eq(drv.ram + BUF + i * 0x1000 + VIRTIO_NET_HDR_SIZE, segs[i], seglen[i]);
	}
	/* A header gso_segment refuses is dropped and counted. */
	struct gso_hdr bad = merged_h;
	bad.csum_start = 20;
	ck_assert_int_eq(virtio_net_rx_enqueue_gso(&net, &bad, merged, merged_len), -EINVAL);
	struct virtio_net_stats st;
	virtio_net_get_stats(&net, &st);
	ck_assert_uint_eq(st.rx_dropped, 1);
	ck_assert_uint_eq(st.rx_frames, 3);
}
END_TEST

START_TEST(gso_whole_with_tso)
{
	fv_wr(&drv, 0x10 + 0x4, 0);
	ck_assert(fv_rd(&drv, 0x10) & (1u << VIRTIO_NET_F_GUEST_TSO4));
	extra_features = 1u << VIRTIO_NET_F_GUEST_CSUM | 1u << VIRTIO_NET_F_GUEST_TSO4;
	driver_up();
	extra_features = 0;
	uint32_t n;
	const uint64_t big = BUF + 0x10000;
	make_merged();
	ck_assert_int_eq(virtio_net_rx_enqueue_gso(&net, &merged_h, merged, merged_len), 0);
	rx_buf(big, VIRTIO_NET_HDR_SIZE + VIRTIO_NET_MAX_GSO_FRAME, 100);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	ck_assert_uint_eq(n, VIRTIO_NET_HDR_SIZE + merged_len);
	const uint8_t *h = drv.ram + big;
	ck_assert_uint_eq(h[0], VIRTIO_NET_HDR_F_NEEDS_CSUM);
	ck_assert_uint_eq(h[1], 1); /* VIRTIO_NET_HDR_GSO_TCPV4 */
	ck_assert_uint_eq(fv_le16(h + 2), 54);
	ck_assert_uint_eq(fv_le16(h + 4), 1460);
	ck_assert_uint_eq(fv_le16(h + 6), 34);
	ck_assert_uint_eq(fv_le16(h + 8), 16);
	ck_assert_uint_eq(fv_le16(h + 10), 1);
	ck_assert_mem_eq(h + VIRTIO_NET_HDR_SIZE, merged, merged_len);
	struct virtio_net_stats st;
	virtio_net_get_stats(&net, &st);
	ck_assert_uint_eq(st.rx_gso, 1);
	/* Hostile headers and lengths are refused at the door. */
	struct gso_hdr bad = merged_h;
	bad.csum_offset = (uint16_t)(merged_len - 34 - 1);
	ck_assert_int_eq(virtio_net_rx_enqueue_gso(&net, &bad, merged, merged_len), -EINVAL);
	bad = merged_h;
	bad.gso_size = 0;
	ck_assert_int_eq(virtio_net_rx_enqueue_gso(&net, &bad, merged, merged_len), -EINVAL);
	bad = merged_h;
	bad.hdr_len = (uint16_t)(merged_len + 1);
	ck_assert_int_eq(virtio_net_rx_enqueue_gso(&net, &bad, merged, merged_len), -EINVAL);
	ck_assert_int_eq(virtio_net_rx_enqueue_gso(&net, &merged_h, merged, VIRTIO_NET_MAX_GSO_FRAME + 1), -EMSGSIZE);
	/* The byte ring bounds what waits: 64 KiB frames until it is full;
	 * each one out makes room again (after the wrap, sometimes only the
	 * second), and frames leave in order across the wrap. */
	static uint8_t huge[VIRTIO_NET_MAX_GSO_FRAME];
	struct gso_hdr hh = merged_h;
	memcpy(huge, merged, 54);
	unsigned in = 0, out = 0, k = 0;
	for (;; in++) {
		huge[100] = (uint8_t)in;
		if (virtio_net_rx_enqueue_gso(&net, &hh, huge, sizeof huge) < 0)
			break;
	}
	ck_assert_uint_eq(in, VIRTIO_NET_RXQ_BYTES / VIRTIO_NET_MAX_GSO_FRAME);
	for (; out < 5 * in; out++) {
		rx_buf(big, VIRTIO_NET_HDR_SIZE + VIRTIO_NET_MAX_GSO_FRAME, 0);
		ck_assert(fv_used(&drv, RX, NULL, &n));
		ck_assert_uint_eq(n, VIRTIO_NET_HDR_SIZE + sizeof huge);
		ck_assert_uint_eq(drv.ram[big + VIRTIO_NET_HDR_SIZE + 100], (uint8_t)out);
		huge[100] = (uint8_t)(in + k);
		if (virtio_net_rx_enqueue_gso(&net, &hh, huge, sizeof huge) == 0)
			k++;
		ck_assert_uint_ge(in + k, out + 1); /* never empty: it refills */
	}
	ck_assert_uint_ge(k, 4 * in);
	while (out < in + k) {
		rx_buf(big, VIRTIO_NET_HDR_SIZE + VIRTIO_NET_MAX_GSO_FRAME, 0);
		ck_assert(fv_used(&drv, RX, NULL, &n));
		ck_assert_uint_eq(drv.ram[big + VIRTIO_NET_HDR_SIZE + 100], (uint8_t)out++);
	}
	/* A merged frame meets a buffer too small for it: the guest broke
	 * the spec's promise of 65562-byte buffers, the device stops. */
	ck_assert_int_eq(virtio_net_rx_enqueue_gso(&net, &merged_h, merged, merged_len), 0);
	rx_buf(BUF, 2048, 0);
	ck_assert(needs_reset());
	/* The next driver takes no offload: merged frames are cut again. */
	driver_up();
	ck_assert_int_eq(virtio_net_rx_enqueue_gso(&net, &merged_h, merged, merged_len), 0);
	rx_buf(BUF, 2048, 0);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	ck_assert_mem_eq(drv.ram + BUF + VIRTIO_NET_HDR_SIZE, segs[0], seglen[0]);
}
END_TEST

/* ---- snapshots (docs/snapshots.md): quiet, then save, load, restored ---- */

static int net_quiet(struct virtio_net *v, char *err, size_t errlen)
{
	ck_assert_ptr_nonnull(v->dev.ops->quiet);
	return v->dev.ops->quiet(&v->dev, err, errlen);
}

START_TEST(quiet_until_frames_delivered)
{
	char err[128] = "";
	uint8_t f[100];
	uint32_t n;
	ck_assert_int_eq(net_quiet(&net, err, sizeof err), 0);
	frame(f, sizeof f, 4);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, sizeof f), 0);
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, 60), 0);
	ck_assert_int_eq(net_quiet(&net, err, sizeof err), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "2 frame(s) wait for the guest"));
	rx_buf(BUF, 2048, 0);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	check_rx(BUF, n, sizeof f, 4);
	ck_assert_int_eq(net_quiet(&net, err, sizeof err), -EBUSY);
	rx_buf(BUF + 0x1000, 2048, 0);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	ck_assert_int_eq(net_quiet(&net, err, sizeof err), 0);
	/* a frame dropped at the door leaves it quiet */
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, VIRTIO_NET_ETH_HLEN - 1), -EMSGSIZE);
	ck_assert_int_eq(net_quiet(&net, err, sizeof err), 0);
	/* a reset drops what waited */
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, 60), 0);
	ck_assert_int_eq(net_quiet(&net, err, sizeof err), -EBUSY);
	fv_wr(&drv, FV_R_STATUS, 0);
	ck_assert_int_eq(net_quiet(&net, err, sizeof err), 0);
}
END_TEST

/* The fixture's device after a driver that took offloads, with one rx
 * buffer (at BUF) posted and not used yet, saved; loaded into a fresh
 * device *v over transport *vt, which then drives the test's guest. */
static void save_into_fresh(struct virtio_net *v, struct virtio_mmio *vt, bool restored)
{
	char err[256] = "";
	struct statebuf_writer w;
	const uint8_t mac[6] = VIRTIO_NET_GUEST_MAC;
	struct net_backend be = { be_tx, NULL };

	rx_buf(BUF, VIRTIO_NET_HDR_SIZE + VIRTIO_NET_MAX_GSO_FRAME, 0);
	ck_assert_int_eq(net_quiet(&net, err, sizeof err), 0);
	statebuf_init(&w);
	ck_assert_int_eq(virtio_mmio_state_save(&t, &w), 0);
	ck_assert_int_eq(virtio_net_init(v, mac, &be), 0);
	ck_assert_int_eq(virtio_mmio_init(vt, &v->dev, &drv.gm, NULL), 0);
	ck_assert_int_eq(virtio_mmio_state_load(vt, w.buf, w.len, err, sizeof err), 0);
	statebuf_free(&w);
	ck_assert(v->dev.live);
	/* the transport's state alone does not give what activate derives */
	ck_assert(!v->rx_tso && !v->rx_mtu && !v->rx_csum);
	if (restored) {
		ck_assert_ptr_nonnull(v->dev.ops->restored);
		v->dev.ops->restored(&v->dev);
	}
	drv.mmio = vt;
}

START_TEST(restore_takes_offloads)
{
	static struct virtio_net v2;
	struct virtio_mmio t2;
	uint32_t n;

	extra_features = 1u << VIRTIO_NET_F_GUEST_CSUM | 1u << VIRTIO_NET_F_GUEST_TSO4;
	driver_up();
	extra_features = 0;
	ck_assert(net.rx_tso && net.rx_mtu && net.rx_csum);
	save_into_fresh(&v2, &t2, true);
	ck_assert_int_eq(v2.rx_tso, net.rx_tso);
	ck_assert_int_eq(v2.rx_mtu, net.rx_mtu);
	ck_assert_int_eq(v2.rx_csum, net.rx_csum);
	/* A merged frame, which only rx_tso lets through whole, fills the
	 * buffer the guest posted before the snapshot. */
	make_merged();
	ck_assert_int_eq(virtio_net_rx_enqueue_gso(&v2, &merged_h, merged, merged_len), 0);
	virtio_net_rx_flush(&v2);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	ck_assert_uint_eq(n, VIRTIO_NET_HDR_SIZE + merged_len);
	ck_assert_uint_eq(drv.ram[BUF], VIRTIO_NET_HDR_F_NEEDS_CSUM);
	ck_assert_uint_eq(drv.ram[BUF + 1], 1); /* VIRTIO_NET_HDR_GSO_TCPV4 */
	ck_assert_mem_eq(drv.ram + BUF + VIRTIO_NET_HDR_SIZE, merged, merged_len);
	/* a full-MTU frame (rx_mtu) into a buffer posted after it */
	uint8_t f[VIRTIO_NET_MAX_FRAME];
	frame(f, sizeof f, 6);
	ck_assert_int_eq(virtio_net_rx_enqueue(&v2, f, sizeof f), 0);
	rx_buf(BUF + 0x20000, VIRTIO_NET_HDR_SIZE + VIRTIO_NET_MAX_FRAME, 0);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	ck_assert_uint_eq(n, VIRTIO_NET_HDR_SIZE + sizeof f);
	ck_assert_uint_eq(drv.ram[BUF + 0x20000], VIRTIO_NET_HDR_F_DATA_VALID);
	ck_assert_mem_eq(drv.ram + BUF + 0x20000 + VIRTIO_NET_HDR_SIZE, f, sizeof f);
	/* and the tx side goes on too */
	unsigned before = ntx;
	tx(60, 0, 0);
	ck_assert(fv_used(&drv, TX, NULL, &n));
	ck_assert_uint_eq(ntx, before + 1);
	ck_assert(!needs_reset());
	virtio_net_destroy(&v2);
}
END_TEST

START_TEST(restore_without_offloads)
{
	static struct virtio_net v2;
	struct virtio_mmio t2;
	uint32_t n;

	no_mtu = true;
	driver_up();
	no_mtu = false;
	save_into_fresh(&v2, &t2, true);
	ck_assert(!v2.rx_tso && !v2.rx_mtu && !v2.rx_csum);
	uint8_t f[VIRTIO_NET_BASE_FRAME + 1];
	frame(f, sizeof f, 8);
	ck_assert_int_eq(virtio_net_rx_enqueue(&v2, f, sizeof f), -EMSGSIZE);
	ck_assert_int_eq(virtio_net_rx_enqueue(&v2, f, VIRTIO_NET_BASE_FRAME), 0);
	virtio_net_rx_flush(&v2);
	ck_assert(fv_used(&drv, RX, NULL, &n));
	check_rx(BUF, n, VIRTIO_NET_BASE_FRAME, 8);
	virtio_net_destroy(&v2);
}
END_TEST

/* Without the hook a restored device forgets the MTU the driver took:
 * what the test above relies on is the hook's doing. */
START_TEST(restore_needs_restored_hook)
{
	static struct virtio_net v2;
	struct virtio_mmio t2;
	uint8_t f[VIRTIO_NET_MAX_FRAME] = { 0 };

	save_into_fresh(&v2, &t2, false);
	ck_assert_int_eq(virtio_net_rx_enqueue(&v2, f, sizeof f), -EMSGSIZE);
	virtio_net_destroy(&v2);
}
END_TEST

/* On a device no driver has made live, restored derives nothing. */
START_TEST(restored_on_idle_device)
{
	static struct virtio_net v2;
	const uint8_t mac[6] = VIRTIO_NET_GUEST_MAC;
	ck_assert_int_eq(virtio_net_init(&v2, mac, NULL), 0);
	v2.dev.ops->restored(&v2.dev);
	ck_assert(!v2.dev.live);
	ck_assert(!v2.rx_tso && !v2.rx_mtu && !v2.rx_csum);
	virtio_net_destroy(&v2);
}
END_TEST

Suite *virtio_net_suite(void)
{
	return unit_suite_fixture("virtio_net", "core", setup, teardown, 0,
				  config_space, tx_frames,
				  tx_bad_frames_dropped,
				  base_mtu_without_feature,
				  tx_short_header_stops, tx_ring_garbage_stops,
				  rx_waits_for_buffers, rx_queue_bounded,
				  rx_small_buffer_stops,
				  rx_readable_buffer_stops, tx_reply_reaches_rx,
				  many_frames_through,
				  enqueue_from_another_thread, init_rejects,
				  csum_offloads,
				  csum_request_without_offload_dropped,
				  gso_segmented_without_tso,
				  gso_whole_with_tso,
				  quiet_until_frames_delivered,
				  restore_takes_offloads,
				  restore_without_offloads,
				  restore_needs_restored_hook,
				  restored_on_idle_device);
}
