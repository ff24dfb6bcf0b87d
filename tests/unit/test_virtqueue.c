#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "devices/virtqueue.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/unit_suite.h"

/* Fake guest: 64 KiB of RAM at gpa 0, rings at fixed places, buffers from
 * BUF up. */
#define RAM 0x10000u
#define DESC 0x1000u
#define AVAIL 0x2000u
#define USED 0x3000u
#define BUF 0x8000u

static struct fv_driver drv;
static struct virtqueue q;

static void setup(void)
{
	ck_assert_int_eq(fv_init(&drv, 0, RAM), 0);
	drv.q[0] = (struct fv_ring){ .desc = DESC, .avail = AVAIL, .used = USED };
	virtqueue_init(&q, 256);
	q.desc_gpa = DESC;
	q.avail_gpa = AVAIL;
	q.used_gpa = USED;
}

static void teardown(void)
{
	fv_free(&drv);
}

static void start(uint16_t size, uint64_t features)
{
	q.size = size;
	drv.q[0].size = size;
	ck_assert_int_eq(virtqueue_activate(&q, &drv.gm, features), 0);
}

START_TEST(simple_chain)
{
	struct virtqueue_chain c;
	start(8, 0);
	fv_desc(&drv, DESC, 0, BUF, 100, FV_DESC_F_NEXT, 3);
	fv_desc(&drv, DESC, 3, BUF + 0x100, 200, FV_DESC_F_WRITE, 0);
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), 1);
	ck_assert_uint_eq(c.head, 0);
	ck_assert_uint_eq(c.nr, 2);
	ck_assert_uint_eq(c.nr_read, 1);
	ck_assert_uint_eq(c.read_len, 100);
	ck_assert_uint_eq(c.write_len, 200);
	ck_assert_ptr_eq(c.seg[0].ptr, drv.ram + BUF);
	ck_assert(c.seg[1].write);
	ck_assert_int_eq(virtqueue_pop(&q, &c), 0);
	ck_assert_int_eq(virtqueue_push(&q, 0, 42), 0);
	ck_assert_uint_eq(fv_r16(&drv, USED + 2), 1);
	ck_assert_uint_eq(fv_r32(&drv, USED + 4), 0);
	ck_assert_uint_eq(fv_r32(&drv, USED + 8), 42);
	ck_assert(virtqueue_needs_interrupt(&q));
	ck_assert(!virtqueue_needs_interrupt(&q)); /* nothing new since */
	ck_assert_int_eq(virtqueue_push(&q, 8, 0), -EINVAL);
}
END_TEST

START_TEST(bad_sizes_refused)
{
	static const uint16_t bad[] = { 0, 3, 6, 100, 512 };
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		q.size = bad[i];
		ck_assert_int_eq(virtqueue_activate(&q, &drv.gm, 0), -EINVAL);
		ck_assert(!q.ready);
	}
	struct virtqueue big;
	virtqueue_init(&big, 1000); /* rounded down to a power of two */
	ck_assert_uint_eq(big.max_size, 512);
	virtqueue_init(&big, 40000);
	ck_assert_uint_eq(big.max_size, VIRTQUEUE_MAX_SIZE);
}
END_TEST

START_TEST(misaligned_or_outside_rings_refused)
{
	q.size = 8;
	q.desc_gpa = DESC + 8;
	ck_assert_int_eq(virtqueue_activate(&q, &drv.gm, 0), -EINVAL);
	q.desc_gpa = DESC;
	q.avail_gpa = AVAIL + 1;
	ck_assert_int_eq(virtqueue_activate(&q, &drv.gm, 0), -EINVAL);
	q.avail_gpa = AVAIL;
	q.used_gpa = USED + 2;
	ck_assert_int_eq(virtqueue_activate(&q, &drv.gm, 0), -EINVAL);
	q.used_gpa = RAM - 16; /* straddles the end of RAM */
	ck_assert_int_eq(virtqueue_activate(&q, &drv.gm, 0), -EINVAL);
	q.used_gpa = USED;
	q.desc_gpa = 0xfffffffffffffff0ull;
	ck_assert_int_eq(virtqueue_activate(&q, &drv.gm, 0), -EINVAL);
	q.desc_gpa = RAM - 16 * 8; /* exactly fits */
	ck_assert_int_eq(virtqueue_activate(&q, &drv.gm, 0), 0);
	/* The avail ring's used_event field makes 6 + 2n bytes. */
	q.avail_gpa = RAM - (4 + 2 * 8);
	ck_assert_int_eq(virtqueue_activate(&q, &drv.gm, 0), -EINVAL);
}
END_TEST

START_TEST(loop_is_an_error)
{
	struct virtqueue_chain c;
	start(8, 0);
	fv_desc(&drv, DESC, 0, BUF, 10, FV_DESC_F_NEXT, 1);
	fv_desc(&drv, DESC, 1, BUF, 10, FV_DESC_F_NEXT, 0);
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -ELOOP);
	ck_assert(q.broken);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -EIO);
	ck_assert_int_eq(virtqueue_push(&q, 0, 0), -EIO);
	virtqueue_reset(&q);
	ck_assert(!q.broken);
}
END_TEST

START_TEST(self_loop_with_zero_length)
{
	struct virtqueue_chain c;
	start(4, 0);
	fv_desc(&drv, DESC, 2, 0, 0, FV_DESC_F_NEXT, 2);
	fv_offer(&drv, 0, 2);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -ELOOP);
}
END_TEST

START_TEST(bad_next_and_head)
{
	struct virtqueue_chain c;
	start(8, 0);
	fv_desc(&drv, DESC, 0, BUF, 10, FV_DESC_F_NEXT, 8);
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -EINVAL);
	virtqueue_reset(&q);
	q.desc_gpa = DESC, q.avail_gpa = AVAIL, q.used_gpa = USED;
	memset(drv.ram, 0, RAM);
	start(8, 0);
	fv_offer(&drv, 0, 9);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -EINVAL);
}
END_TEST

START_TEST(buffers_outside_ram)
{
	struct virtqueue_chain c;
	start(8, 0);
	fv_desc(&drv, DESC, 0, RAM - 4, 8, 0, 0); /* straddles the end */
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -EFAULT);
	virtqueue_reset(&q);
	q.desc_gpa = DESC, q.avail_gpa = AVAIL, q.used_gpa = USED;
	memset(drv.ram, 0, RAM);
	start(8, 0);
	fv_desc(&drv, DESC, 0, 0xfffffffffffffff8ull, 16, 0, 0); /* wraps */
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -EFAULT);
}
END_TEST

START_TEST(readable_after_writable)
{
	struct virtqueue_chain c;
	start(8, 0);
	fv_desc(&drv, DESC, 0, BUF, 10, FV_DESC_F_WRITE | FV_DESC_F_NEXT, 1);
	fv_desc(&drv, DESC, 1, BUF, 10, 0, 0);
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -EINVAL);
}
END_TEST

START_TEST(segment_bound)
{
	/* A queue large enough for a direct chain one segment too long:
	 * rings of its own above the shared ones, buffers at BUF. */
	const uint64_t desc_gpa = 0x9000, avail_gpa = 0xd000, used_gpa = 0xe000;
	const unsigned size = 512;
	_Static_assert(0x9000 + 16 * 512 <= 0xd000 && 0xe000 + 6 + 8 * 512 <= RAM,
		       "segment_bound's rings fit");
	struct virtqueue_chain c;
	virtqueue_init(&q, size);
	q.desc_gpa = desc_gpa;
	q.avail_gpa = avail_gpa;
	q.used_gpa = used_gpa;
	start(size, 0);
	for (unsigned i = 0; i < VIRTQUEUE_MAX_SEGS; i++)
		fv_desc(&drv, desc_gpa, i, BUF + i, 1, i + 1 < VIRTQUEUE_MAX_SEGS ? FV_DESC_F_NEXT : 0,
			(uint16_t)(i + 1));
	fv_w16(&drv, avail_gpa + 4, 0);
	fv_w16(&drv, avail_gpa + 2, 1);
	ck_assert_int_eq(virtqueue_pop(&q, &c), 1);
	ck_assert_uint_eq(c.nr, VIRTQUEUE_MAX_SEGS);
	fv_desc(&drv, desc_gpa, VIRTQUEUE_MAX_SEGS - 1, BUF, 1, FV_DESC_F_NEXT, VIRTQUEUE_MAX_SEGS);
	fv_desc(&drv, desc_gpa, VIRTQUEUE_MAX_SEGS, BUF, 1, 0, 0);
	fv_w16(&drv, avail_gpa + 4 + 2, 0);
	fv_w16(&drv, avail_gpa + 2, 2);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -E2BIG);
}
END_TEST

START_TEST(avail_idx_runs_ahead)
{
	struct virtqueue_chain c;
	start(8, 0);
	for (unsigned i = 0; i < 8; i++)
		fv_desc(&drv, DESC, i, BUF, 1, 0, 0);
	fv_w16(&drv, AVAIL + 2, 8); /* a full ring is fine */
	ck_assert_int_eq(virtqueue_pop(&q, &c), 1);
	fv_w16(&drv, AVAIL + 2, 1 + 8 + 1); /* one more than the ring holds */
	ck_assert_int_eq(virtqueue_pop(&q, &c), -EINVAL);
}
END_TEST

START_TEST(index_wraps_at_65535)
{
	struct virtqueue_chain c;
	start(4, 0);
	q.last_avail = 65534;
	q.used_idx = q.signalled_used = 65534;
	fv_w16(&drv, AVAIL + 2, 65534);
	fv_w16(&drv, USED + 2, 65534);
	for (unsigned i = 0; i < 4; i++) {
		fv_desc(&drv, DESC, i, BUF + 16 * i, 16, FV_DESC_F_WRITE, 0);
		fv_offer(&drv, 0, i);
	}
	ck_assert_uint_eq(fv_r16(&drv, AVAIL + 2), 2);
	for (unsigned i = 0; i < 4; i++) {
		ck_assert_int_eq(virtqueue_pop(&q, &c), 1);
		ck_assert_uint_eq(c.head, i);
		ck_assert_int_eq(virtqueue_push(&q, c.head, 16), 0);
	}
	ck_assert_int_eq(virtqueue_pop(&q, &c), 0);
	ck_assert_uint_eq(fv_r16(&drv, USED + 2), 2);
	/* slot of used index 65535 is 3, of 0 is 0 */
	ck_assert_uint_eq(fv_r32(&drv, USED + 4 + 8 * 3), 1);
	ck_assert_uint_eq(fv_r32(&drv, USED + 4 + 8 * 0), 2);
}
END_TEST

START_TEST(indirect_table)
{
	struct virtqueue_chain c;
	const uint64_t tbl = 0x5000;
	start(8, 1ull << VIRTIO_F_INDIRECT_DESC);
	fv_desc(&drv, tbl, 0, BUF, 44, FV_DESC_F_NEXT, 1);
	fv_desc(&drv, tbl, 1, BUF + 64, 10, FV_DESC_F_NEXT, 2);
	fv_desc(&drv, tbl, 2, BUF + 128, 4096, FV_DESC_F_WRITE, 0);
	fv_desc(&drv, DESC, 5, tbl, 3 * 16, FV_DESC_F_INDIRECT, 0);
	fv_offer(&drv, 0, 5);
	ck_assert_int_eq(virtqueue_pop(&q, &c), 1);
	ck_assert_uint_eq(c.head, 5);
	ck_assert_uint_eq(c.nr, 3);
	ck_assert_uint_eq(c.read_len, 54);
	ck_assert_uint_eq(c.write_len, 4096);
}
END_TEST

START_TEST(indirect_abuse)
{
	struct virtqueue_chain c;
	const uint64_t tbl = 0x5000, on = 1ull << VIRTIO_F_INDIRECT_DESC;
	const uint16_t ind = FV_DESC_F_INDIRECT;
	struct {
		uint64_t addr;
		uint32_t len;
		uint16_t flags;
		uint64_t feat;
		int err;
	} cases[] = {
		{ tbl, 32, ind, 0, -EINVAL },  /* not negotiated */
		{ tbl, 24, ind, on, -EINVAL }, /* not n*16 */
		{ tbl, 0, ind, on, -EINVAL },
		{ RAM - 16, 32, ind, on, -EFAULT },
		{ tbl, 32, ind | FV_DESC_F_NEXT, on, -EINVAL },
		{ tbl, 16 * (VIRTQUEUE_MAX_INDIRECT + 1), ind, on, -EINVAL },
	};
	for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		virtqueue_init(&q, 256);
		q.desc_gpa = DESC, q.avail_gpa = AVAIL, q.used_gpa = USED;
		memset(drv.ram, 0, RAM);
		start(8, cases[i].feat);
		fv_desc(&drv, tbl, 0, BUF, 8, 0, 0);
		fv_desc(&drv, tbl, 1, BUF, 8, 0, 0);
		fv_desc(&drv, DESC, 0, cases[i].addr, cases[i].len, cases[i].flags, 1);
		fv_offer(&drv, 0, 0);
		ck_assert_int_eq(virtqueue_pop(&q, &c), cases[i].err);
	}
	/* nested indirect, and a loop inside the table */
	memset(drv.ram, 0, RAM);
	virtqueue_init(&q, 256);
	q.desc_gpa = DESC, q.avail_gpa = AVAIL, q.used_gpa = USED;
	start(8, 1ull << VIRTIO_F_INDIRECT_DESC);
	fv_desc(&drv, tbl, 0, tbl, 32, FV_DESC_F_INDIRECT, 0);
	fv_desc(&drv, DESC, 0, tbl, 32, FV_DESC_F_INDIRECT, 0);
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -EINVAL);
	virtqueue_reset(&q);
	q.desc_gpa = DESC, q.avail_gpa = AVAIL, q.used_gpa = USED;
	memset(drv.ram, 0, RAM);
	start(8, 1ull << VIRTIO_F_INDIRECT_DESC);
	fv_desc(&drv, tbl, 0, BUF, 8, FV_DESC_F_NEXT, 1);
	fv_desc(&drv, tbl, 1, BUF, 8, FV_DESC_F_NEXT, 0);
	fv_desc(&drv, DESC, 0, tbl, 32, FV_DESC_F_INDIRECT, 0);
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), -ELOOP);
}
END_TEST

START_TEST(interrupt_suppression)
{
	struct virtqueue_chain c;
	start(8, 0);
	fv_desc(&drv, DESC, 0, BUF, 8, FV_DESC_F_WRITE, 0);
	fv_w16(&drv, AVAIL, 1); /* NO_INTERRUPT */
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), 1);
	virtqueue_push(&q, 0, 0);
	ck_assert(!virtqueue_needs_interrupt(&q));
	fv_w16(&drv, AVAIL, 0);
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), 1);
	virtqueue_push(&q, 0, 0);
	ck_assert(virtqueue_needs_interrupt(&q));
}
END_TEST

START_TEST(event_idx)
{
	struct virtqueue_chain c;
	const uint64_t used_event = AVAIL + 4 + 2 * 8, avail_event = USED + 4 + 8 * 8;
	start(8, 1ull << VIRTIO_F_EVENT_IDX);
	/* empty pop publishes where we want the next kick */
	ck_assert_int_eq(virtqueue_pop(&q, &c), 0);
	ck_assert_uint_eq(fv_r16(&drv, avail_event), 0);
	fv_desc(&drv, DESC, 0, BUF, 8, FV_DESC_F_WRITE, 0);
	fv_w16(&drv, used_event, 2); /* interrupt once used.idx passes 2 */
	for (unsigned i = 0; i < 4; i++) {
		fv_offer(&drv, 0, 0);
		ck_assert_int_eq(virtqueue_pop(&q, &c), 1);
		virtqueue_push(&q, 0, 0);
		/* idx becomes 1, 2, 3, 4: only the step to 3 crosses 2 */
		ck_assert_int_eq(virtqueue_needs_interrupt(&q), i == 2);
	}
	ck_assert_int_eq(virtqueue_pop(&q, &c), 0);
	ck_assert_uint_eq(fv_r16(&drv, avail_event), 4);
	/* a batch crossing the event interrupts once */
	fv_w16(&drv, used_event, 5);
	fv_offer(&drv, 0, 0), fv_offer(&drv, 0, 0), fv_offer(&drv, 0, 0);
	for (unsigned i = 0; i < 3; i++) {
		ck_assert_int_eq(virtqueue_pop(&q, &c), 1);
		virtqueue_push(&q, 0, 0);
	}
	ck_assert(virtqueue_needs_interrupt(&q));
}
END_TEST

START_TEST(zero_length_segments_skipped)
{
	struct virtqueue_chain c;
	start(8, 0);
	fv_desc(&drv, DESC, 0, RAM + 100, 0, FV_DESC_F_NEXT, 1); /* never dereferenced */
	fv_desc(&drv, DESC, 1, BUF, 4, FV_DESC_F_WRITE, 0);
	fv_offer(&drv, 0, 0);
	ck_assert_int_eq(virtqueue_pop(&q, &c), 1);
	ck_assert_uint_eq(c.nr, 1);
	ck_assert_uint_eq(c.write_len, 4);
}
END_TEST

START_TEST(not_ready_is_empty)
{
	struct virtqueue_chain c;
	ck_assert_int_eq(virtqueue_pop(&q, &c), 0);
	ck_assert_int_eq(virtqueue_push(&q, 0, 0), -EIO);
	ck_assert(!virtqueue_needs_interrupt(&q));
}
END_TEST

Suite *virtqueue_suite(void)
{
	return unit_suite_fixture("virtqueue", "core", setup, teardown, 0,
				  simple_chain, bad_sizes_refused,
				  misaligned_or_outside_rings_refused,
				  loop_is_an_error, self_loop_with_zero_length,
				  bad_next_and_head, buffers_outside_ram,
				  readable_after_writable, segment_bound,
				  avail_idx_runs_ahead, index_wraps_at_65535,
				  indirect_table, indirect_abuse,
				  interrupt_suppression, event_idx,
				  zero_length_segments_skipped,
				  not_ready_is_empty);
}
