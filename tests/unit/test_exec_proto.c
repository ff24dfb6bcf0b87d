/* Exec channel codec: round trips, and hostile frames (truncated,
 * oversized, counts that overflow, strings without NUL, argc 0, unknown
 * types), each of which must give -EPROTO and never a crash. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto/exec_proto.h"
#include "tests/lib/unit_suite.h"

static char *argv3[] = { "sh", "-c", "echo hi", NULL };
static char *env2[] = { "HOME=/root", "TERM=xterm", NULL };

static struct exec_proto_exec sample(void)
{
	struct exec_proto_exec r = {
		.flags = EXEC_PROTO_FLAG_TTY, .rows = 33, .cols = 101,
		.argc = 3, .argv = argv3, .envc = 2, .envp = env2, .cwd = "/work",
	};
	return r;
}

/* Encode the sample and return a malloc'd copy of its payload. */
static uint8_t *sample_payload(uint32_t *len)
{
	static uint8_t frame[EXEC_PROTO_MAX_FRAME];
	struct exec_proto_exec r = sample();
	size_t n;
	ck_assert_int_eq(exec_proto_encode_exec(&r, frame, sizeof frame, &n), 0);
	ck_assert_uint_eq(frame[0], EXEC_PROTO_EXEC);
	*len = (uint32_t)(n - EXEC_PROTO_HDR);
	ck_assert_uint_eq(frame[1] | frame[2] << 8 | frame[3] << 16 | (uint32_t)frame[4] << 24, *len);
	uint8_t *p = malloc(*len);
	memcpy(p, frame + EXEC_PROTO_HDR, *len);
	return p;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

START_TEST(exec_round_trip)
{
	uint32_t len;
	uint8_t *p = sample_payload(&len);
	struct exec_proto_exec d;
	ck_assert_int_eq(exec_proto_decode_exec(p, len, &d), 0);
	ck_assert_uint_eq(d.flags, EXEC_PROTO_FLAG_TTY);
	ck_assert_uint_eq(d.rows, 33);
	ck_assert_uint_eq(d.cols, 101);
	ck_assert_uint_eq(d.argc, 3);
	ck_assert_str_eq(d.argv[0], "sh");
	ck_assert_str_eq(d.argv[2], "echo hi");
	ck_assert_ptr_null(d.argv[3]);
	ck_assert_uint_eq(d.envc, 2);
	ck_assert_str_eq(d.envp[1], "TERM=xterm");
	ck_assert_ptr_null(d.envp[2]);
	ck_assert_str_eq(d.cwd, "/work");
	exec_proto_exec_free(&d);
	exec_proto_exec_free(&d); /* idempotent */
	free(p);
}
END_TEST

START_TEST(exec_minimal_and_empty_cwd)
{
	char *argv1[] = { "true", NULL };
	struct exec_proto_exec r = { .argc = 1, .argv = argv1 };
	uint8_t frame[64];
	size_t n;
	ck_assert_int_eq(exec_proto_encode_exec(&r, frame, sizeof frame, &n), 0);
	struct exec_proto_exec d;
	ck_assert_int_eq(exec_proto_decode_exec(frame + EXEC_PROTO_HDR, (uint32_t)(n - EXEC_PROTO_HDR), &d), 0);
	ck_assert_str_eq(d.cwd, "");
	ck_assert_uint_eq(d.envc, 0);
	ck_assert_ptr_null(d.envp[0]);
	exec_proto_exec_free(&d);
}
END_TEST

START_TEST(exec_encode_refuses)
{
	uint8_t frame[256];
	size_t n;
	struct exec_proto_exec r = sample();
	r.argc = 0;
	ck_assert_int_eq(exec_proto_encode_exec(&r, frame, sizeof frame, &n), -EINVAL);
	r = sample();
	r.argc = 4; /* argv[3] is NULL */
	ck_assert_int_eq(exec_proto_encode_exec(&r, frame, sizeof frame, &n), -EINVAL);
	r = sample();
	ck_assert_int_eq(exec_proto_encode_exec(&r, frame, 20, &n), -E2BIG);
	ck_assert_int_eq(exec_proto_encode_exec(&r, frame, 3, &n), -E2BIG);
	/* An argument larger than a frame may carry. */
	char *big = malloc(EXEC_PROTO_MAX_PAYLOAD + 1);
	memset(big, 'x', EXEC_PROTO_MAX_PAYLOAD);
	big[EXEC_PROTO_MAX_PAYLOAD] = 0;
	char *argv1[] = { big, NULL };
	struct exec_proto_exec b = { .argc = 1, .argv = argv1 };
	uint8_t *huge = malloc(2 * EXEC_PROTO_MAX_FRAME);
	ck_assert_int_eq(exec_proto_encode_exec(&b, huge, 2 * EXEC_PROTO_MAX_FRAME, &n), -E2BIG);
	free(huge);
	free(big);
}
END_TEST

START_TEST(exec_every_truncation_fails)
{
	uint32_t len;
	uint8_t *p = sample_payload(&len);
	for (uint32_t cut = 0; cut < len; cut++) {
		uint8_t *q = malloc(cut ? cut : 1); /* exact size: ASan sees overreads */
		memcpy(q, p, cut);
		struct exec_proto_exec d;
		ck_assert_int_eq(exec_proto_decode_exec(q, cut, &d), -EPROTO);
		ck_assert_ptr_null(d.argv);
		free(q);
	}
	free(p);
}
END_TEST

START_TEST(exec_trailing_bytes_fail)
{
	uint32_t len;
	uint8_t *p = sample_payload(&len);
	uint8_t *q = malloc(len + 1);
	memcpy(q, p, len);
	q[len] = 0;
	struct exec_proto_exec d;
	ck_assert_int_eq(exec_proto_decode_exec(q, len + 1, &d), -EPROTO);
	free(q);
	free(p);
}
END_TEST

START_TEST(exec_hostile_counts)
{
	uint32_t len;
	uint8_t *p = sample_payload(&len);
	struct exec_proto_exec d;
	/* argc at offset 8: 0, one too many, and values that overflow
	 * count + 1 or count * sizeof(char *). */
	static const uint32_t bad_argc[] = { 0, 4, 0x40000000u, 0x7fffffffu, 0xffffffffu };
	for (size_t i = 0; i < sizeof bad_argc / sizeof bad_argc[0]; i++) {
		uint8_t *q = malloc(len);
		memcpy(q, p, len);
		put32(q + 8, bad_argc[i]);
		ck_assert_int_eq(exec_proto_decode_exec(q, len, &d), -EPROTO);
		free(q);
	}
	/* envc sits after "sh\0-c\0echo hi\0" (14 bytes). */
	static const uint32_t bad_envc[] = { 3, 0xffffffffu, 0x20000000u };
	for (size_t i = 0; i < sizeof bad_envc / sizeof bad_envc[0]; i++) {
		uint8_t *q = malloc(len);
		memcpy(q, p, len);
		put32(q + 12 + 14, bad_envc[i]);
		ck_assert_int_eq(exec_proto_decode_exec(q, len, &d), -EPROTO);
		free(q);
	}
	free(p);
}
END_TEST

START_TEST(exec_strings_without_nul)
{
	uint32_t len;
	uint8_t *p = sample_payload(&len);
	struct exec_proto_exec d;
	/* The last byte ends the cwd: without it the string runs off. */
	p[len - 1] = 'x';
	ck_assert_int_eq(exec_proto_decode_exec(p, len, &d), -EPROTO);
	free(p);

	/* argc 1 and a payload that ends inside the argument. */
	uint8_t q[16];
	put32(q, 0);
	put32(q + 4, 0);
	put32(q + 8, 1);
	memcpy(q + 12, "abcd", 4);
	ck_assert_int_eq(exec_proto_decode_exec(q, sizeof q, &d), -EPROTO);
}
END_TEST

START_TEST(exec_env_needs_equals_and_flags_known)
{
	char *noeq[] = { "JUSTNAME", NULL };
	struct exec_proto_exec r = sample();
	r.envc = 1;
	r.envp = noeq;
	uint8_t frame[256];
	size_t n;
	ck_assert_int_eq(exec_proto_encode_exec(&r, frame, sizeof frame, &n), 0);
	struct exec_proto_exec d;
	ck_assert_int_eq(exec_proto_decode_exec(frame + EXEC_PROTO_HDR, (uint32_t)(n - EXEC_PROTO_HDR), &d), -EPROTO);

	r = sample();
	r.flags = 2;
	ck_assert_int_eq(exec_proto_encode_exec(&r, frame, sizeof frame, &n), 0);
	ck_assert_int_eq(exec_proto_decode_exec(frame + EXEC_PROTO_HDR, (uint32_t)(n - EXEC_PROTO_HDR), &d), -EPROTO);
	ck_assert_int_eq(exec_proto_decode_exec(frame, EXEC_PROTO_MAX_PAYLOAD + 1, &d), -EPROTO);
}
END_TEST

START_TEST(exec_max_strings)
{
	/* A payload made of nothing but empty arguments: the most strings a
	 * frame can hold, all decoded. */
	uint32_t argc = EXEC_PROTO_MAX_PAYLOAD - 18;
	uint8_t *q = calloc(1, EXEC_PROTO_MAX_PAYLOAD);
	put32(q + 8, argc);
	/* argc NULs from offset 12, then envc 0 (already zero), then cwd "". */
	uint32_t len = 12 + argc + 4 + 1;
	ck_assert_uint_le(len, EXEC_PROTO_MAX_PAYLOAD);
	struct exec_proto_exec d;
	ck_assert_int_eq(exec_proto_decode_exec(q, len, &d), 0);
	ck_assert_uint_eq(d.argc, argc);
	ck_assert_str_eq(d.argv[argc - 1], "");
	ck_assert_ptr_null(d.argv[argc]);
	exec_proto_exec_free(&d);
	free(q);
}
END_TEST

START_TEST(check_types_and_lengths)
{
	ck_assert_int_eq(exec_proto_check(EXEC_PROTO_STDIN, 0), 0);
	ck_assert_int_eq(exec_proto_check(EXEC_PROTO_STDOUT, EXEC_PROTO_MAX_PAYLOAD), 0);
	ck_assert_int_eq(exec_proto_check(EXEC_PROTO_STDIN_EOF, 0), 0);
	ck_assert_int_eq(exec_proto_check(EXEC_PROTO_STDIN_EOF, 1), -EPROTO);
	ck_assert_int_eq(exec_proto_check(EXEC_PROTO_SIGNAL, 3), -EPROTO);
	ck_assert_int_eq(exec_proto_check(EXEC_PROTO_RESIZE, 5), -EPROTO);
	ck_assert_int_eq(exec_proto_check(EXEC_PROTO_EXIT, 0), -EPROTO);
	ck_assert_int_eq(exec_proto_check(EXEC_PROTO_CREDIT, 4), 0);
	static const uint8_t unknown[] = { 0x00, 0x06, 0x7f, 0x80, 0x87, 0xff };
	for (size_t i = 0; i < sizeof unknown; i++)
		ck_assert_int_eq(exec_proto_check(unknown[i], 0), -EPROTO);
}
END_TEST

START_TEST(small_frames)
{
	uint8_t b[16];
	struct exec_proto_frame f = { .type = EXEC_PROTO_SIGNAL, .len = 4, .payload = b + EXEC_PROTO_HDR };
	int signo;
	ck_assert_uint_eq(exec_proto_put_u32(b, EXEC_PROTO_SIGNAL, 2), 9);
	ck_assert_int_eq(exec_proto_get_signal(&f, &signo), 0);
	ck_assert_int_eq(signo, 2);
	static const uint32_t bad[] = { 0, 65, 0x80000002u, 0xffffffffu };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		exec_proto_put_u32(b, EXEC_PROTO_SIGNAL, bad[i]);
		ck_assert_int_eq(exec_proto_get_signal(&f, &signo), -EPROTO);
	}
	exec_proto_put_u32(b, EXEC_PROTO_SIGNAL, 64);
	ck_assert_int_eq(exec_proto_get_signal(&f, &signo), 0);
	f.len = 3;
	ck_assert_int_eq(exec_proto_get_signal(&f, &signo), -EPROTO);

	uint16_t rows, cols;
	ck_assert_uint_eq(exec_proto_put_resize(b, 50, 200), 9);
	struct exec_proto_frame r = { .type = EXEC_PROTO_RESIZE, .len = 4, .payload = b + EXEC_PROTO_HDR };
	ck_assert_int_eq(exec_proto_get_resize(&r, &rows, &cols), 0);
	ck_assert_uint_eq(rows, 50);
	ck_assert_uint_eq(cols, 200);
	r.type = EXEC_PROTO_SIGNAL;
	ck_assert_int_eq(exec_proto_get_resize(&r, &rows, &cols), -EPROTO);
}
END_TEST

static void feed(struct exec_proto_reader *r, const uint8_t *p, size_t n)
{
	size_t room;
	uint8_t *dst = exec_proto_rd_space(r, &room);
	ck_assert_uint_ge(room, n);
	memcpy(dst, p, n);
	exec_proto_rd_commit(r, n);
}

START_TEST(reader_byte_at_a_time)
{
	struct exec_proto_reader *r = malloc(sizeof *r);
	exec_proto_rd_init(r);
	uint8_t s[32];
	size_t n = exec_proto_put_u32(s, EXEC_PROTO_EXIT, 143);
	exec_proto_put_hdr(s + n, EXEC_PROTO_STDOUT, 3);
	memcpy(s + n + EXEC_PROTO_HDR, "abc", 3);
	n += EXEC_PROTO_HDR + 3;
	struct exec_proto_frame f;
	int got = 0;
	for (size_t i = 0; i < n; i++) {
		feed(r, s + i, 1);
		int rc;
		while ((rc = exec_proto_rd_next(r, &f)) == 1) {
			if (got++ == 0) {
				uint32_t v;
				ck_assert_int_eq(exec_proto_get_u32(&f, &v), 0);
				ck_assert_uint_eq(v, 143);
			} else {
				ck_assert_uint_eq(f.type, EXEC_PROTO_STDOUT);
				ck_assert_uint_eq(f.len, 3);
				ck_assert_mem_eq(f.payload, "abc", 3);
			}
		}
		ck_assert_int_eq(rc, 0);
		ck_assert_int_eq(exec_proto_rd_partial(r), i + 1 != 9 && i + 1 != n);
	}
	ck_assert_int_eq(got, 2);
	free(r);
}
END_TEST

START_TEST(reader_oversized_and_max)
{
	struct exec_proto_reader *r = malloc(sizeof *r);
	exec_proto_rd_init(r);
	uint8_t h[EXEC_PROTO_HDR];
	struct exec_proto_frame f;
	exec_proto_put_hdr(h, EXEC_PROTO_STDOUT, EXEC_PROTO_MAX_PAYLOAD + 1);
	feed(r, h, sizeof h);
	ck_assert_int_eq(exec_proto_rd_next(r, &f), -EPROTO);
	exec_proto_rd_init(r);
	exec_proto_put_hdr(h, EXEC_PROTO_STDOUT, 0xffffffffu);
	feed(r, h, sizeof h);
	ck_assert_int_eq(exec_proto_rd_next(r, &f), -EPROTO);

	/* A maximal frame fills the buffer exactly and is taken whole. */
	exec_proto_rd_init(r);
	uint8_t *big = calloc(1, EXEC_PROTO_MAX_FRAME);
	exec_proto_put_hdr(big, EXEC_PROTO_STDOUT, EXEC_PROTO_MAX_PAYLOAD);
	big[EXEC_PROTO_MAX_FRAME - 1] = 0x5a;
	feed(r, big, EXEC_PROTO_MAX_FRAME);
	size_t room;
	exec_proto_rd_space(r, &room);
	ck_assert_uint_eq(room, 0);
	ck_assert_int_eq(exec_proto_rd_next(r, &f), 1);
	ck_assert_uint_eq(f.len, EXEC_PROTO_MAX_PAYLOAD);
	ck_assert_uint_eq(f.payload[EXEC_PROTO_MAX_PAYLOAD - 1], 0x5a);
	ck_assert_int_eq(exec_proto_rd_next(r, &f), 0);
	free(big);
	free(r);
}
END_TEST

START_TEST(reader_slides_partial_frames)
{
	/* Frames that straddle the end of the buffer: the unread tail must
	 * move down intact, and room must never be zero while only part of
	 * a frame is buffered. */
	struct exec_proto_reader *r = malloc(sizeof *r);
	exec_proto_rd_init(r);
	uint8_t fr[EXEC_PROTO_HDR + 1000];
	unsigned seq = 0, want = 0;
	for (int round = 0; round < 2000; round++) {
		exec_proto_put_hdr(fr, EXEC_PROTO_STDERR, 1000);
		memset(fr + EXEC_PROTO_HDR, (int)(seq++ & 0xff), 1000);
		size_t off = 0;
		while (off < sizeof fr) {
			size_t room;
			uint8_t *dst = exec_proto_rd_space(r, &room);
			ck_assert_uint_gt(room, 0);
			size_t k = sizeof fr - off < room ? sizeof fr - off : room;
			if (k > 777)
				k = 777;
			memcpy(dst, fr + off, k);
			exec_proto_rd_commit(r, k);
			off += k;
			struct exec_proto_frame f;
			while (exec_proto_rd_next(r, &f) == 1) {
				ck_assert_uint_eq(f.len, 1000);
				ck_assert_uint_eq(f.payload[0], want & 0xff);
				ck_assert_uint_eq(f.payload[999], want & 0xff);
				want++;
			}
		}
	}
	ck_assert_uint_eq(want, seq);
	free(r);
}
END_TEST

Suite *exec_proto_suite(void)
{
	return unit_suite("exec_proto", "codec", exec_round_trip,
			  exec_minimal_and_empty_cwd, exec_encode_refuses,
			  exec_every_truncation_fails, exec_trailing_bytes_fail,
			  exec_hostile_counts, exec_strings_without_nul,
			  exec_env_needs_equals_and_flags_known,
			  exec_max_strings, check_types_and_lengths,
			  small_frames, reader_byte_at_a_time,
			  reader_oversized_and_max,
			  reader_slides_partial_frames);
}
