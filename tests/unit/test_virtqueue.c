#include <check.h>
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtqueue.h"

/* Fake guest: 64 KiB of RAM at gpa 0, rings at fixed places, buffers from
 * BUF up. */
#define RAM 0x10000u
#define DESC 0x1000u
#define AVAIL 0x2000u
#define USED 0x3000u
#define BUF 0x8000u
#define F_NEXT 1
#define F_WRITE 2
#define F_INDIRECT 4

static uint8_t *ram;
static struct guest_mem gm;
static struct vq q;

static void setup(void)
{
	ram = calloc(1, RAM);
	memset(&gm, 0, sizeof gm);
	ck_assert_int_eq(gm_add_region(&gm, 0, RAM, ram), 0);
	vq_init(&q, 256);
	q.desc_gpa = DESC;
	q.avail_gpa = AVAIL;
	q.used_gpa = USED;
}

static void teardown(void)
{
	free(ram);
}

static void w16(uint64_t gpa, uint16_t v)
{
	v = htole16(v);
	memcpy(ram + gpa, &v, 2);
}

static uint16_t r16(uint64_t gpa)
{
	uint16_t v;
	memcpy(&v, ram + gpa, 2);
	return le16toh(v);
}

static uint32_t r32(uint64_t gpa)
{
	uint32_t v;
	memcpy(&v, ram + gpa, 4);
	return le32toh(v);
}

static void desc_at(uint64_t table, unsigned i, uint64_t addr, uint32_t len, uint16_t flags,
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

static void desc(unsigned i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
	desc_at(DESC, i, addr, len, flags, next);
}

/* Make head available (the driver side of §2.7.13). */
static void offer(uint16_t head)
{
	uint16_t idx = r16(AVAIL + 2);
	w16(AVAIL + 4 + 2 * (idx % q.size), head);
	w16(AVAIL + 2, idx + 1);
}

static void start(uint16_t size, uint64_t features)
{
	q.size = size;
	ck_assert_int_eq(vq_activate(&q, &gm, features), 0);
}

START_TEST(simple_chain)
{
	struct vq_chain c;
	start(8, 0);
	desc(0, BUF, 100, F_NEXT, 3);
	desc(3, BUF + 0x100, 200, F_WRITE, 0);
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), 1);
	ck_assert_uint_eq(c.head, 0);
	ck_assert_uint_eq(c.nr, 2);
	ck_assert_uint_eq(c.nr_read, 1);
	ck_assert_uint_eq(c.read_len, 100);
	ck_assert_uint_eq(c.write_len, 200);
	ck_assert_ptr_eq(c.seg[0].ptr, ram + BUF);
	ck_assert(c.seg[1].write);
	ck_assert_int_eq(vq_pop(&q, &c), 0);
	ck_assert_int_eq(vq_push(&q, 0, 42), 0);
	ck_assert_uint_eq(r16(USED + 2), 1);
	ck_assert_uint_eq(r32(USED + 4), 0);
	ck_assert_uint_eq(r32(USED + 8), 42);
	ck_assert(vq_needs_interrupt(&q));
	ck_assert(!vq_needs_interrupt(&q)); /* nothing new since */
	ck_assert_int_eq(vq_push(&q, 8, 0), -EINVAL);
}
END_TEST

START_TEST(bad_sizes_refused)
{
	static const uint16_t bad[] = { 0, 3, 6, 100, 512 };
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		q.size = bad[i];
		ck_assert_int_eq(vq_activate(&q, &gm, 0), -EINVAL);
		ck_assert(!q.ready);
	}
	struct vq big;
	vq_init(&big, 1000); /* rounded down to a power of two */
	ck_assert_uint_eq(big.max_size, 512);
	vq_init(&big, 40000);
	ck_assert_uint_eq(big.max_size, VQ_MAX_SIZE);
}
END_TEST

START_TEST(misaligned_or_outside_rings_refused)
{
	q.size = 8;
	q.desc_gpa = DESC + 8;
	ck_assert_int_eq(vq_activate(&q, &gm, 0), -EINVAL);
	q.desc_gpa = DESC;
	q.avail_gpa = AVAIL + 1;
	ck_assert_int_eq(vq_activate(&q, &gm, 0), -EINVAL);
	q.avail_gpa = AVAIL;
	q.used_gpa = USED + 2;
	ck_assert_int_eq(vq_activate(&q, &gm, 0), -EINVAL);
	q.used_gpa = RAM - 16; /* straddles the end of RAM */
	ck_assert_int_eq(vq_activate(&q, &gm, 0), -EINVAL);
	q.used_gpa = USED;
	q.desc_gpa = 0xfffffffffffffff0ull;
	ck_assert_int_eq(vq_activate(&q, &gm, 0), -EINVAL);
	q.desc_gpa = RAM - 16 * 8; /* exactly fits */
	ck_assert_int_eq(vq_activate(&q, &gm, 0), 0);
	/* The avail ring's used_event field makes 6 + 2n bytes. */
	q.avail_gpa = RAM - (4 + 2 * 8);
	ck_assert_int_eq(vq_activate(&q, &gm, 0), -EINVAL);
}
END_TEST

START_TEST(loop_is_an_error)
{
	struct vq_chain c;
	start(8, 0);
	desc(0, BUF, 10, F_NEXT, 1);
	desc(1, BUF, 10, F_NEXT, 0);
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), -ELOOP);
	ck_assert(q.broken);
	ck_assert_int_eq(vq_pop(&q, &c), -EIO);
	ck_assert_int_eq(vq_push(&q, 0, 0), -EIO);
	vq_reset(&q);
	ck_assert(!q.broken);
}
END_TEST

START_TEST(self_loop_with_zero_length)
{
	struct vq_chain c;
	start(4, 0);
	desc(2, 0, 0, F_NEXT, 2);
	offer(2);
	ck_assert_int_eq(vq_pop(&q, &c), -ELOOP);
}
END_TEST

START_TEST(bad_next_and_head)
{
	struct vq_chain c;
	start(8, 0);
	desc(0, BUF, 10, F_NEXT, 8);
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), -EINVAL);
	vq_reset(&q);
	q.desc_gpa = DESC, q.avail_gpa = AVAIL, q.used_gpa = USED;
	memset(ram, 0, RAM);
	start(8, 0);
	offer(9);
	ck_assert_int_eq(vq_pop(&q, &c), -EINVAL);
}
END_TEST

START_TEST(buffers_outside_ram)
{
	struct vq_chain c;
	start(8, 0);
	desc(0, RAM - 4, 8, 0, 0); /* straddles the end */
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), -EFAULT);
	vq_reset(&q);
	q.desc_gpa = DESC, q.avail_gpa = AVAIL, q.used_gpa = USED;
	memset(ram, 0, RAM);
	start(8, 0);
	desc(0, 0xfffffffffffffff8ull, 16, 0, 0); /* wraps */
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), -EFAULT);
}
END_TEST

START_TEST(readable_after_writable)
{
	struct vq_chain c;
	start(8, 0);
	desc(0, BUF, 10, F_WRITE | F_NEXT, 1);
	desc(1, BUF, 10, 0, 0);
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), -EINVAL);
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
	struct vq_chain c;
	vq_init(&q, size);
	q.desc_gpa = desc_gpa;
	q.avail_gpa = avail_gpa;
	q.used_gpa = used_gpa;
	start(size, 0);
	for (unsigned i = 0; i < VQ_MAX_SEGS; i++)
		desc_at(desc_gpa, i, BUF + i, 1, i + 1 < VQ_MAX_SEGS ? F_NEXT : 0,
			(uint16_t)(i + 1));
	w16(avail_gpa + 4, 0);
	w16(avail_gpa + 2, 1);
	ck_assert_int_eq(vq_pop(&q, &c), 1);
	ck_assert_uint_eq(c.nr, VQ_MAX_SEGS);
	desc_at(desc_gpa, VQ_MAX_SEGS - 1, BUF, 1, F_NEXT, VQ_MAX_SEGS);
	desc_at(desc_gpa, VQ_MAX_SEGS, BUF, 1, 0, 0);
	w16(avail_gpa + 4 + 2, 0);
	w16(avail_gpa + 2, 2);
	ck_assert_int_eq(vq_pop(&q, &c), -E2BIG);
}
END_TEST

START_TEST(avail_idx_runs_ahead)
{
	struct vq_chain c;
	start(8, 0);
	for (unsigned i = 0; i < 8; i++)
		desc(i, BUF, 1, 0, 0);
	w16(AVAIL + 2, 8); /* a full ring is fine */
	ck_assert_int_eq(vq_pop(&q, &c), 1);
	w16(AVAIL + 2, 1 + 8 + 1); /* one more than the ring holds */
	ck_assert_int_eq(vq_pop(&q, &c), -EINVAL);
}
END_TEST

START_TEST(index_wraps_at_65535)
{
	struct vq_chain c;
	start(4, 0);
	q.last_avail = 65534;
	q.used_idx = q.signalled_used = 65534;
	w16(AVAIL + 2, 65534);
	w16(USED + 2, 65534);
	for (unsigned i = 0; i < 4; i++) {
		desc(i, BUF + 16 * i, 16, F_WRITE, 0);
		offer(i);
	}
	ck_assert_uint_eq(r16(AVAIL + 2), 2);
	for (unsigned i = 0; i < 4; i++) {
		ck_assert_int_eq(vq_pop(&q, &c), 1);
		ck_assert_uint_eq(c.head, i);
		ck_assert_int_eq(vq_push(&q, c.head, 16), 0);
	}
	ck_assert_int_eq(vq_pop(&q, &c), 0);
	ck_assert_uint_eq(r16(USED + 2), 2);
	/* slot of used index 65535 is 3, of 0 is 0 */
	ck_assert_uint_eq(r32(USED + 4 + 8 * 3), 1);
	ck_assert_uint_eq(r32(USED + 4 + 8 * 0), 2);
}
END_TEST

START_TEST(indirect_table)
{
	struct vq_chain c;
	const uint64_t tbl = 0x5000;
	start(8, 1ull << VIRTIO_F_INDIRECT_DESC);
	desc_at(tbl, 0, BUF, 44, F_NEXT, 1);
	desc_at(tbl, 1, BUF + 64, 10, F_NEXT, 2);
	desc_at(tbl, 2, BUF + 128, 4096, F_WRITE, 0);
	desc(5, tbl, 3 * 16, F_INDIRECT, 0);
	offer(5);
	ck_assert_int_eq(vq_pop(&q, &c), 1);
	ck_assert_uint_eq(c.head, 5);
	ck_assert_uint_eq(c.nr, 3);
	ck_assert_uint_eq(c.read_len, 54);
	ck_assert_uint_eq(c.write_len, 4096);
}
END_TEST

START_TEST(indirect_abuse)
{
	struct vq_chain c;
	const uint64_t tbl = 0x5000;
	struct {
		uint64_t addr;
		uint32_t len;
		uint16_t flags;
		uint64_t feat;
		int err;
	} cases[] = {
		{ tbl, 32, F_INDIRECT, 0, -EINVAL },                        /* not negotiated */
		{ tbl, 24, F_INDIRECT, 1ull << VIRTIO_F_INDIRECT_DESC, -EINVAL }, /* not n*16 */
		{ tbl, 0, F_INDIRECT, 1ull << VIRTIO_F_INDIRECT_DESC, -EINVAL },
		{ RAM - 16, 32, F_INDIRECT, 1ull << VIRTIO_F_INDIRECT_DESC, -EFAULT },
		{ tbl, 32, F_INDIRECT | F_NEXT, 1ull << VIRTIO_F_INDIRECT_DESC, -EINVAL },
		{ tbl, 16 * (VQ_MAX_INDIRECT + 1), F_INDIRECT, 1ull << VIRTIO_F_INDIRECT_DESC, -EINVAL },
	};
	for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		vq_init(&q, 256);
		q.desc_gpa = DESC, q.avail_gpa = AVAIL, q.used_gpa = USED;
		memset(ram, 0, RAM);
		start(8, cases[i].feat);
		desc_at(tbl, 0, BUF, 8, 0, 0);
		desc_at(tbl, 1, BUF, 8, 0, 0);
		desc(0, cases[i].addr, cases[i].len, cases[i].flags, 1);
		offer(0);
		ck_assert_int_eq(vq_pop(&q, &c), cases[i].err);
	}
	/* nested indirect, and a loop inside the table */
	memset(ram, 0, RAM);
	vq_init(&q, 256);
	q.desc_gpa = DESC, q.avail_gpa = AVAIL, q.used_gpa = USED;
	start(8, 1ull << VIRTIO_F_INDIRECT_DESC);
	desc_at(tbl, 0, tbl, 32, F_INDIRECT, 0);
	desc(0, tbl, 32, F_INDIRECT, 0);
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), -EINVAL);
	vq_reset(&q);
	q.desc_gpa = DESC, q.avail_gpa = AVAIL, q.used_gpa = USED;
	memset(ram, 0, RAM);
	start(8, 1ull << VIRTIO_F_INDIRECT_DESC);
	desc_at(tbl, 0, BUF, 8, F_NEXT, 1);
	desc_at(tbl, 1, BUF, 8, F_NEXT, 0);
	desc(0, tbl, 32, F_INDIRECT, 0);
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), -ELOOP);
}
END_TEST

START_TEST(interrupt_suppression)
{
	struct vq_chain c;
	start(8, 0);
	desc(0, BUF, 8, F_WRITE, 0);
	w16(AVAIL, 1); /* NO_INTERRUPT */
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), 1);
	vq_push(&q, 0, 0);
	ck_assert(!vq_needs_interrupt(&q));
	w16(AVAIL, 0);
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), 1);
	vq_push(&q, 0, 0);
	ck_assert(vq_needs_interrupt(&q));
}
END_TEST

START_TEST(event_idx)
{
	struct vq_chain c;
	const uint64_t used_event = AVAIL + 4 + 2 * 8, avail_event = USED + 4 + 8 * 8;
	start(8, 1ull << VIRTIO_F_EVENT_IDX);
	/* empty pop publishes where we want the next kick */
	ck_assert_int_eq(vq_pop(&q, &c), 0);
	ck_assert_uint_eq(r16(avail_event), 0);
	desc(0, BUF, 8, F_WRITE, 0);
	w16(used_event, 2); /* interrupt once used.idx passes 2 */
	for (unsigned i = 0; i < 4; i++) {
		offer(0);
		ck_assert_int_eq(vq_pop(&q, &c), 1);
		vq_push(&q, 0, 0);
		/* idx becomes 1, 2, 3, 4: only the step to 3 crosses 2 */
		ck_assert_int_eq(vq_needs_interrupt(&q), i == 2);
	}
	ck_assert_int_eq(vq_pop(&q, &c), 0);
	ck_assert_uint_eq(r16(avail_event), 4);
	/* a batch crossing the event interrupts once */
	w16(used_event, 5);
	offer(0), offer(0), offer(0);
	for (unsigned i = 0; i < 3; i++) {
		ck_assert_int_eq(vq_pop(&q, &c), 1);
		vq_push(&q, 0, 0);
	}
	ck_assert(vq_needs_interrupt(&q));
}
END_TEST

START_TEST(zero_length_segments_skipped)
{
	struct vq_chain c;
	start(8, 0);
	desc(0, RAM + 100, 0, F_NEXT, 1); /* never dereferenced */
	desc(1, BUF, 4, F_WRITE, 0);
	offer(0);
	ck_assert_int_eq(vq_pop(&q, &c), 1);
	ck_assert_uint_eq(c.nr, 1);
	ck_assert_uint_eq(c.write_len, 4);
}
END_TEST

START_TEST(not_ready_is_empty)
{
	struct vq_chain c;
	ck_assert_int_eq(vq_pop(&q, &c), 0);
	ck_assert_int_eq(vq_push(&q, 0, 0), -EIO);
	ck_assert(!vq_needs_interrupt(&q));
}
END_TEST

Suite *virtqueue_suite(void)
{
	Suite *s = suite_create("virtqueue");
	TCase *t = tcase_create("core");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, simple_chain);
	tcase_add_test(t, bad_sizes_refused);
	tcase_add_test(t, misaligned_or_outside_rings_refused);
	tcase_add_test(t, loop_is_an_error);
	tcase_add_test(t, self_loop_with_zero_length);
	tcase_add_test(t, bad_next_and_head);
	tcase_add_test(t, buffers_outside_ram);
	tcase_add_test(t, readable_after_writable);
	tcase_add_test(t, segment_bound);
	tcase_add_test(t, avail_idx_runs_ahead);
	tcase_add_test(t, index_wraps_at_65535);
	tcase_add_test(t, indirect_table);
	tcase_add_test(t, indirect_abuse);
	tcase_add_test(t, interrupt_suppression);
	tcase_add_test(t, event_idx);
	tcase_add_test(t, zero_length_segments_skipped);
	tcase_add_test(t, not_ready_is_empty);
	suite_add_tcase(s, t);
	return s;
}
