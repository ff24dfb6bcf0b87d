#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "devices/virtio_mmio_state.h"
#include "lib/statebuf.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/unit_suite.h"

#define RAM 0x40000u

/* A device of two queues that pops and completes what it is kicked for. */
struct dummy {
	struct virtqueue_dev dev;
	struct virtqueue vqs[2];
	unsigned notifies, chains, activates, resets;
};

struct counting_irq {
	struct irq_sink sink;
	int level;
};

static struct fv_driver drv;
static struct dummy a, b;
static struct virtio_mmio ta, tb;
static struct counting_irq irq;
static char err[256];

static int d_notify(struct virtqueue_dev *d, unsigned q)
{
	struct dummy *x = (struct dummy *)d;
	static struct virtqueue_chain c;
	x->notifies++;
	int r;
	while ((r = virtqueue_pop(&d->vqs[q], &c)) > 0) {
		x->chains++;
		virtqueue_push(&d->vqs[q], c.head, c.write_len);
	}
	virtqueue_dev_used(d, q);
	return r;
}

static void d_activate(struct virtqueue_dev *d) { ((struct dummy *)d)->activates++; }
static void d_reset(struct virtqueue_dev *d) { ((struct dummy *)d)->resets++; }

static const struct virtqueue_dev_ops ops = { .notify = d_notify, .activate = d_activate,
				       .reset = d_reset };

static void set_level(struct irq_sink *s, int level) { ((struct counting_irq *)s)->level = level; }

static void dummy_init(struct dummy *d, struct virtio_mmio *t)
{
	memset(d, 0, sizeof *d);
	d->dev = (struct virtqueue_dev){ .ops = &ops, .device_id = 19, .nr_queues = 2, .vqs = d->vqs,
				  .features = 1ull << VIRTIO_F_EVENT_IDX };
	virtqueue_init(&d->vqs[0], 64);
	virtqueue_init(&d->vqs[1], 32);
	ck_assert_int_eq(virtio_mmio_init(t, &d->dev, &drv.gm, &irq.sink), 0);
}

static void setup(void)
{
	ck_assert_int_eq(fv_init(&drv, 0, RAM), 0);
	memset(&irq, 0, sizeof irq);
	irq.sink.set_level = set_level;
	dummy_init(&a, &ta);
	dummy_init(&b, &tb);
	drv.mmio = &ta;
}

static void teardown(void) { fv_free(&drv); }

/* Device a up, three chains through queue 0, one through queue 1, and
 * its state saved into w. */
static void run_and_save(struct statebuf_writer *w)
{
	ck_assert_int_eq(fv_driver_up(&drv, (1ull << VIRTIO_F_VERSION_1) |
						    (1ull << VIRTIO_F_EVENT_IDX), 2, 16), 0);
	struct fv_seg s = { 0x30000, 64, true };
	for (unsigned i = 0; i < 3; i++)
		fv_post(&drv, 0, &s, 1); /* each kicks the queue */
	fv_post(&drv, 1, &s, 1);
	ck_assert_uint_eq(a.chains, 4);
	statebuf_init(w);
	ck_assert_int_eq(virtio_mmio_state_save(&ta, w), 0);
	ck_assert_uint_eq(w->len, virtio_mmio_state_len(2));
}

START_TEST(restored_transport_goes_on)
{
	struct statebuf_writer w;
	run_and_save(&w);
	ck_assert_int_eq(virtio_mmio_state_load(&tb, w.buf, w.len, err, sizeof err), 0);
	ck_assert_uint_eq(tb.status, ta.status);
	ck_assert(b.dev.live && b.dev.driver_features == a.dev.driver_features);
	for (unsigned q = 0; q < 2; q++) {
		ck_assert(b.vqs[q].ready && b.vqs[q].size == 16);
		ck_assert(b.vqs[q].desc_gpa == a.vqs[q].desc_gpa);
		ck_assert_uint_eq(b.vqs[q].last_avail, a.vqs[q].last_avail);
		ck_assert_uint_eq(b.vqs[q].used_idx, a.vqs[q].used_idx);
		ck_assert(b.vqs[q].event_idx);
		ck_assert_ptr_eq(b.vqs[q].used, a.vqs[q].used); /* mapped again, same RAM */
	}
	ck_assert_uint_eq(b.activates, 0); /* the device's own blob restores it */
	ck_assert_uint_eq(b.resets, 0);
	/* The driver goes on with b: the next chain is the fourth. */
	drv.mmio = &tb;
	struct fv_seg s = { 0x30000, 64, true };
	fv_post(&drv, 0, &s, 1);
	ck_assert_uint_eq(b.chains, 1);
	ck_assert_uint_eq(b.vqs[0].used_idx, 4);
	ck_assert_uint_eq(fv_r16(&drv, drv.q[0].used + 2), 4);
	ck_assert_uint_eq(fv_rd(&drv, FV_R_STATUS) & VIRTIO_STATUS_NEEDS_RESET, 0);

	/* A state saved from b comes out byte for byte as from a. */
	struct statebuf_writer w2;
	statebuf_init(&w2);
	ck_assert_int_eq(virtio_mmio_state_save(&tb, &w2), 0);
	ck_assert_uint_eq(w2.len, w.len);
	statebuf_free(&w2);
	statebuf_free(&w);
}
END_TEST

START_TEST(fresh_transport_round_trip)
{
	struct statebuf_writer w;
	statebuf_init(&w);
	ck_assert_int_eq(virtio_mmio_state_save(&ta, &w), 0);
	ck_assert_int_eq(virtio_mmio_state_load(&tb, w.buf, w.len, err, sizeof err), 0);
	ck_assert(!b.dev.live && !b.vqs[0].ready && tb.status == 0);
	statebuf_free(&w);
}
END_TEST

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)v); put16(p + 2, (uint16_t)(v >> 16)); }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }

START_TEST(load_refuses_each_inconsistency)
{
	struct statebuf_writer w;
	run_and_save(&w);
	/* Offsets: header 0 magic, 4 version, 6 queues, 8 device id,
	 * 12 status, 16 interrupts, 40 driver's features, 48 accepted,
	 * 56 live; queue 0 at 64: +0 max, +2 size, +4 last_avail, +6 used,
	 * +8 signalled, +10 ready, +11 broken, +12 desc, +20 avail, +28 used. */
	static const struct { size_t off; unsigned width; uint64_t val; const char *says; } bad[] = {
		{ 0, 4, 0x12345678, "not version" },
		{ 4, 2, 2, "not version" },
		{ 6, 2, 3, "with 3 queues" },
		{ 8, 4, 20, "device 20" },
		{ 12, 4, 0x0f | 0x10, "unknown status" },
		{ 12, 4, VIRTIO_STATUS_DRIVER_OK | VIRTIO_STATUS_FEATURES_OK, "no driver could reach" },
		{ 12, 4, VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_DRIVER_OK, "no driver could reach" },
		{ 12, 4, 0x0f | VIRTIO_STATUS_NEEDS_RESET, "'live'" },
		{ 12, 4, VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_ACKNOWLEDGE, "without FEATURES_OK" },
		{ 16, 4, 4, "interrupt bits" },
		{ 40, 8, 1ull << 33 | 1ull << 32, "not offered" },
		{ 48, 8, 1ull << 29, "not offered" },
		{ 56, 8, 0, "'live'" },
		{ 56, 8, 2, "'live'" },
		{ 64, 2, 128, "maximum size" },
		{ 64 + 10, 1, 2, "ready/broken" },
		{ 64 + 11, 1, 1, "ready/broken" },
		{ 64 + 2, 2, 12, "does not fit" },      /* not a power of two */
		{ 64 + 2, 2, 128, "does not fit" },     /* beyond the maximum */
		{ 64 + 12, 8, RAM - 8, "does not fit" },/* ring outside RAM */
		{ 64 + 12, 8, 0x10008, "does not fit" },/* misaligned */
		{ 64 + 6, 2, 9, "does not fit" },       /* used index not RAM's */
		{ 100 + 28, 8, UINT64_MAX - 3, "does not fit" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint8_t blob[256];
		ck_assert_uint_le(w.len, sizeof blob);
		memcpy(blob, w.buf, w.len);
		uint8_t *p = blob + bad[i].off;
		if (bad[i].width == 1)
			*p = (uint8_t)bad[i].val;
		else if (bad[i].width == 2)
			put16(p, (uint16_t)bad[i].val);
		else if (bad[i].width == 4)
			put32(p, (uint32_t)bad[i].val);
		else
			put64(p, bad[i].val);
		dummy_init(&b, &tb);
		err[0] = 0;
		int rc = virtio_mmio_state_load(&tb, blob, w.len, err, sizeof err);
		ck_assert_msg(rc == -EINVAL && strstr(err, bad[i].says), "case %zu: %d '%s'", i, rc,
			      err);
		ck_assert(tb.status == 0 && !b.dev.live && !b.vqs[0].ready && !b.vqs[1].ready);
		ck_assert(b.dev.driver_features == 0);
	}
	/* A queue that is off may not carry indexes; a broken one keeps
	 * its own and stays off. */
	uint8_t blob[256];
	memcpy(blob, w.buf, w.len);
	blob[64 + 10] = 0;
	dummy_init(&b, &tb);
	ck_assert_int_eq(virtio_mmio_state_load(&tb, blob, w.len, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "indexes"));
	blob[64 + 11] = 1;
	dummy_init(&b, &tb);
	ck_assert_int_eq(virtio_mmio_state_load(&tb, blob, w.len, err, sizeof err), 0);
	ck_assert(b.vqs[0].broken && !b.vqs[0].ready && b.vqs[1].ready);

	dummy_init(&b, &tb);
	ck_assert_int_eq(virtio_mmio_state_load(&tb, w.buf, w.len - 1, err, sizeof err), -EINVAL);
	ck_assert_int_eq(virtio_mmio_state_load(&tb, w.buf, 0, err, sizeof err), -EINVAL);
	ck_assert_int_eq(virtio_mmio_state_load(&tb, NULL, 0, err, sizeof err), -EINVAL);
	statebuf_free(&w);
}
END_TEST

Suite *virtio_mmio_state_suite(void)
{
	return unit_suite_fixture("virtio_mmio_state", "virtio_mmio_state",
				  setup, teardown, 0,
				  restored_transport_goes_on,
				  fresh_transport_round_trip,
				  load_refuses_each_inconsistency);
}
