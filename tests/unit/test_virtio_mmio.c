#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "devices/virtio_mmio.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/unit_suite.h"

#define RAM 0x10000u

/* A dummy device: two queues, 12 bytes of config, counts its hooks. */
struct dummy {
	struct virtqueue_dev dev;
	struct virtqueue vqs[2];
	uint8_t cfg[12];
	unsigned notifies[2], resets, activates;
	int notify_ret;
};

struct counting_irq {
	struct irq_sink sink;
	int level;
	unsigned raises;
};

static struct fv_driver drv;
static struct dummy dm;
static struct counting_irq irq;
static struct virtio_mmio t;

static void d_config_read(struct virtqueue_dev *d, uint32_t off, void *data, uint32_t len)
{
	memcpy(data, ((struct dummy *)d)->cfg + off, len);
}

static void d_config_write(struct virtqueue_dev *d, uint32_t off, const void *data, uint32_t len)
{
	memcpy(((struct dummy *)d)->cfg + off, data, len);
}

static int d_notify(struct virtqueue_dev *d, unsigned q)
{
	((struct dummy *)d)->notifies[q]++;
	return ((struct dummy *)d)->notify_ret;
}

static void d_reset(struct virtqueue_dev *d)
{
	((struct dummy *)d)->resets++;
}

static void d_activate(struct virtqueue_dev *d)
{
	((struct dummy *)d)->activates++;
}

static const struct virtqueue_dev_ops d_ops = {
	.config_read = d_config_read,
	.config_write = d_config_write,
	.notify = d_notify,
	.reset = d_reset,
	.activate = d_activate,
};

static void set_level(struct irq_sink *s, int level)
{
	struct counting_irq *c = (struct counting_irq *)s;
	c->level = level;
	c->raises += level;
}

static void setup(void)
{
	ck_assert_int_eq(fv_init(&drv, 0, RAM), 0);
	memset(&dm, 0, sizeof dm);
	memset(&irq, 0, sizeof irq);
	irq.sink.set_level = set_level;
	dm.dev.ops = &d_ops;
	dm.dev.device_id = 42;
	dm.dev.features = 1ull << 3 | 1ull << VIRTIO_F_EVENT_IDX;
	dm.dev.config_size = sizeof dm.cfg;
	dm.dev.nr_queues = 2;
	dm.dev.vqs = dm.vqs;
	virtqueue_init(&dm.vqs[0], 64);
	virtqueue_init(&dm.vqs[1], 16);
	for (unsigned i = 0; i < sizeof dm.cfg; i++)
		dm.cfg[i] = (uint8_t)(0xa0 + i);
	ck_assert_int_eq(virtio_mmio_init(&t, &dm.dev, &drv.gm, &irq.sink), 0);
	drv.mmio = &t;
}

static void teardown(void)
{
	fv_free(&drv);
}

/* Rings packed in 1 KiB steps from base; the tests check the device took
 * (or refused) exactly these values. */
static void setup_queue(uint32_t q, uint32_t num, uint64_t base)
{
	drv.q[q] = (struct fv_ring){
		.desc = base, .avail = base + 0x400, .used = base + 0x800, .size = num
	};
	fv_queue_setup(&drv, q);
}

static const uint32_t ALL_OK = VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER |
			       VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_DRIVER_OK;

START_TEST(identity_registers)
{
	ck_assert_uint_eq(fv_rd(&drv, 0x0), 0x74726976);
	ck_assert_uint_eq(fv_rd(&drv, 0x4), 2);
	ck_assert_uint_eq(fv_rd(&drv, 0x8), 42);
	ck_assert_uint_eq(fv_rd(&drv, 0xc), 0x786f626b);
	fv_wr(&drv, 0x14, 0);
	ck_assert_uint_eq(fv_rd(&drv, 0x10), 1u << 3 | 1u << VIRTIO_F_EVENT_IDX);
	fv_wr(&drv, 0x14, 1);
	ck_assert_uint_eq(fv_rd(&drv, 0x10), 1); /* VERSION_1 */
	fv_wr(&drv, 0x14, 7);
	ck_assert_uint_eq(fv_rd(&drv, 0x10), 0);
	fv_wr(&drv, 0x30, 0);
	ck_assert_uint_eq(fv_rd(&drv, 0x34), 64);
	fv_wr(&drv, 0x30, 1);
	ck_assert_uint_eq(fv_rd(&drv, 0x34), 16);
	fv_wr(&drv, 0x30, 2);
	ck_assert_uint_eq(fv_rd(&drv, 0x34), 0);
	ck_assert_uint_eq(fv_rd(&drv, 0xb0), 0xffffffffu);
}
END_TEST

START_TEST(features_ok_requires_version_1)
{
	fv_negotiate(&drv, 1ull << 3);
	ck_assert_uint_eq(fv_rd(&drv, 0x70) & VIRTIO_STATUS_FEATURES_OK, 0);
	fv_negotiate(&drv, 1ull << 3 | 1ull << 5 | 1ull << VIRTIO_F_VERSION_1); /* 5 not offered */
	ck_assert_uint_eq(fv_rd(&drv, 0x70) & VIRTIO_STATUS_FEATURES_OK, 0);
	fv_negotiate(&drv, 1ull << 3 | 1ull << VIRTIO_F_VERSION_1);
	ck_assert_uint_eq(fv_rd(&drv, 0x70) & VIRTIO_STATUS_FEATURES_OK, VIRTIO_STATUS_FEATURES_OK);
	ck_assert_uint_eq(dm.dev.driver_features, 1ull << 3 | 1ull << VIRTIO_F_VERSION_1);
	/* features are frozen now */
	fv_wr(&drv, 0x24, 0);
	fv_wr(&drv, 0x20, 0);
	fv_wr(&drv, 0x70, ALL_OK);
	ck_assert_uint_eq(dm.dev.driver_features, 1ull << 3 | 1ull << VIRTIO_F_VERSION_1);
	ck_assert(dm.dev.live);
	ck_assert_uint_eq(dm.activates, 1);
}
END_TEST

START_TEST(status_out_of_order)
{
	/* FEATURES_OK without DRIVER, DRIVER_OK without FEATURES_OK */
	fv_wr(&drv, 0x70, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_FEATURES_OK);
	ck_assert_uint_eq(fv_rd(&drv, 0x70), VIRTIO_STATUS_ACKNOWLEDGE);
	fv_wr(&drv, 0x70,
	      VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_DRIVER_OK);
	ck_assert_uint_eq(fv_rd(&drv, 0x70), VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	ck_assert(!dm.dev.live);
	/* clearing a bit without reset is ignored */
	fv_wr(&drv, 0x70, VIRTIO_STATUS_DRIVER);
	ck_assert_uint_eq(fv_rd(&drv, 0x70), VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	/* a queue cannot go ready before FEATURES_OK */
	setup_queue(0, 8, 0x1000);
	ck_assert_uint_eq(fv_rd(&drv, 0x44), 0);
	/* notify before DRIVER_OK is ignored */
	fv_wr(&drv, 0x50, 0);
	ck_assert_uint_eq(dm.notifies[0], 0);
	/* the driver cannot set NEEDS_RESET itself */
	fv_wr(&drv, 0x70,
	      VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_NEEDS_RESET);
	ck_assert_uint_eq(fv_rd(&drv, 0x70) & VIRTIO_STATUS_NEEDS_RESET, 0);
}
END_TEST

START_TEST(queue_setup_and_notify)
{
	fv_negotiate(&drv, 1ull << VIRTIO_F_VERSION_1);
	setup_queue(0, 8, 0x1000);
	ck_assert_uint_eq(fv_rd(&drv, 0x44), 1);
	ck_assert(dm.vqs[0].ready);
	ck_assert_uint_eq(dm.vqs[0].desc_gpa, 0x1000);
	ck_assert_uint_eq(dm.vqs[0].avail_gpa, 0x1400);
	ck_assert_uint_eq(dm.vqs[0].used_gpa, 0x1800);
	/* writes while ready are ignored */
	fv_wr(&drv, 0x38, 4);
	fv_wr(&drv, 0x80, 0x2000);
	ck_assert_uint_eq(dm.vqs[0].size, 8);
	ck_assert_uint_eq(dm.vqs[0].desc_gpa, 0x1000);
	fv_wr(&drv, 0x70, ALL_OK);
	fv_wr(&drv, 0x50, 0);
	fv_wr(&drv, 0x50, 1); /* queue 1 not ready */
	fv_wr(&drv, 0x50, 9); /* no such queue */
	virtio_mmio_notify(&t, 0);
	ck_assert_uint_eq(dm.notifies[0], 2);
	ck_assert_uint_eq(dm.notifies[1], 0);
	/* QueueReady 0 stops the queue */
	fv_wr(&drv, 0x30, 0);
	fv_wr(&drv, 0x44, 0);
	ck_assert_uint_eq(fv_rd(&drv, 0x44), 0);
	fv_wr(&drv, 0x50, 0);
	ck_assert_uint_eq(dm.notifies[0], 2);
}
END_TEST

START_TEST(bad_queue_needs_reset)
{
	fv_negotiate(&drv, 1ull << VIRTIO_F_VERSION_1);
	setup_queue(1, 12, 0x1000); /* not a power of two */
	ck_assert_uint_eq(fv_rd(&drv, 0x44), 0);
	ck_assert_uint_eq(fv_rd(&drv, 0x70) & VIRTIO_STATUS_NEEDS_RESET, VIRTIO_STATUS_NEEDS_RESET);
	ck_assert_uint_eq(fv_rd(&drv, 0x60), VIRTIO_MMIO_INT_CONFIG);
	ck_assert_int_eq(irq.level, 1);
	/* a huge QueueNum must not truncate into a valid size */
	fv_negotiate(&drv, 1ull << VIRTIO_F_VERSION_1);
	ck_assert_uint_eq(fv_rd(&drv, 0x70) & VIRTIO_STATUS_NEEDS_RESET, 0);
	setup_queue(0, 0x10008, 0x1000);
	ck_assert_uint_eq(fv_rd(&drv, 0x44), 0);
	fv_negotiate(&drv, 1ull << VIRTIO_F_VERSION_1);
	setup_queue(0, 8, RAM - 0x400); /* used ring outside RAM */
	ck_assert_uint_eq(fv_rd(&drv, 0x70) & VIRTIO_STATUS_NEEDS_RESET, VIRTIO_STATUS_NEEDS_RESET);
}
END_TEST

START_TEST(notify_error_needs_reset)
{
	fv_negotiate(&drv, 1ull << VIRTIO_F_VERSION_1);
	setup_queue(0, 8, 0x1000);
	fv_wr(&drv, 0x70, ALL_OK);
	dm.notify_ret = -EINVAL;
	fv_wr(&drv, 0x50, 0);
	ck_assert_uint_eq(fv_rd(&drv, 0x70), ALL_OK | VIRTIO_STATUS_NEEDS_RESET);
	ck_assert(!dm.dev.live);
	ck_assert_uint_eq(fv_rd(&drv, 0x60), VIRTIO_MMIO_INT_CONFIG);
	fv_wr(&drv, 0x50, 0); /* no more notifies until reset */
	ck_assert_uint_eq(dm.notifies[0], 1);
	fv_wr(&drv, 0x70, 0);
	ck_assert_uint_eq(fv_rd(&drv, 0x70), 0);
	ck_assert_uint_eq(fv_rd(&drv, 0x60), 0);
	ck_assert_int_eq(irq.level, 0);
	ck_assert_uint_eq(dm.resets, 2); /* fv_negotiate() reset too */
	ck_assert(!dm.vqs[0].ready);
	ck_assert_uint_eq(dm.vqs[0].desc_gpa, 0);
}
END_TEST

START_TEST(interrupts_level)
{
	fv_negotiate(&drv, 1ull << VIRTIO_F_VERSION_1);
	setup_queue(0, 8, 0x1000);
	fv_wr(&drv, 0x70, ALL_OK);
	ck_assert_int_eq(virtqueue_push(&dm.vqs[0], 0, 0), 0);
	virtqueue_dev_used(&dm.dev, 0);
	ck_assert_uint_eq(fv_rd(&drv, 0x60), VIRTIO_MMIO_INT_USED);
	ck_assert_int_eq(irq.level, 1);
	virtqueue_dev_config_changed(&dm.dev);
	ck_assert_uint_eq(fv_rd(&drv, 0x60), VIRTIO_MMIO_INT_USED | VIRTIO_MMIO_INT_CONFIG);
	ck_assert_uint_eq(fv_rd(&drv, 0xfc), 1);
	fv_wr(&drv, 0x64, VIRTIO_MMIO_INT_USED);
	ck_assert_int_eq(irq.level, 1);
	fv_wr(&drv, 0x64, VIRTIO_MMIO_INT_CONFIG);
	ck_assert_uint_eq(fv_rd(&drv, 0x60), 0);
	ck_assert_int_eq(irq.level, 0);
}
END_TEST

START_TEST(odd_accesses_ignored)
{
	uint8_t b[8];
	uint16_t h = 0xffff;
	virtio_mmio_read(&t, 0x2, &h, 2);
	ck_assert_uint_eq(h, 0);
	memset(b, 0xff, sizeof b);
	virtio_mmio_read(&t, 0x1, b, 4);
	ck_assert_uint_eq(b[0] | b[1] | b[2] | b[3], 0);
	virtio_mmio_read(&t, 0x0, b, 8);
	ck_assert_uint_eq(b[0], 0);
	ck_assert_uint_eq(fv_rd(&drv, 0x1000), 0);
	ck_assert_uint_eq(fv_rd(&drv, UINT64_MAX - 1), 0);
	virtio_mmio_read(&t, 0x0, b, 9); /* too wide: untouched, no crash */
	/* odd writes do nothing */
	uint16_t v = 7;
	virtio_mmio_write(&t, 0x70, &v, 2);
	virtio_mmio_write(&t, 0x71, &v, 2);
	virtio_mmio_write(&t, 0x2000, &v, 2);
	ck_assert_uint_eq(fv_rd(&drv, 0x70), 0);
	/* config space: any width inside, nothing outside */
	virtio_mmio_read(&t, 0x100, &h, 2);
	ck_assert_uint_eq(h, 0xa1a0);
	virtio_mmio_read(&t, 0x10b, b, 1);
	ck_assert_uint_eq(b[0], 0xab);
	uint32_t w = 0x12345678;
	virtio_mmio_read(&t, 0x10a, &w, 4); /* runs past the 12 bytes */
	ck_assert_uint_eq(w, 0);
	virtio_mmio_read(&t, 0x104, b, 8);
	ck_assert_uint_eq(b[7], 0xab);
	virtio_mmio_read(&t, 0x101, b, 3);
	ck_assert_uint_eq(b[0], 0);
	w = 0x11223344;
	virtio_mmio_write(&t, 0x108, &w, 4);
	ck_assert_uint_eq(dm.cfg[8], 0x44);
	virtio_mmio_write(&t, 0x10a, &w, 4);
	ck_assert_uint_eq(dm.cfg[11], 0x11);
}
END_TEST

START_TEST(init_rejects_bad_devices)
{
	struct virtio_mmio t2;
	struct virtqueue_dev d = { 0 };
	ck_assert_int_eq(virtio_mmio_init(&t2, &d, &drv.gm, NULL), -EINVAL);
	d = dm.dev;
	d.config_size = 0x1000;
	ck_assert_int_eq(virtio_mmio_init(&t2, &d, &drv.gm, NULL), -EINVAL);
	d.config_size = 0;
	d.nr_queues = 0;
	ck_assert_int_eq(virtio_mmio_init(&t2, &d, &drv.gm, NULL), -EINVAL);
}
END_TEST

Suite *virtio_mmio_suite(void)
{
	return unit_suite_fixture("virtio_mmio", "core", setup, teardown, 0,
				  identity_registers,
				  features_ok_requires_version_1,
				  status_out_of_order, queue_setup_and_notify,
				  bad_queue_needs_reset,
				  notify_error_needs_reset, interrupts_level,
				  odd_accesses_ignored,
				  init_rejects_bad_devices);
}
