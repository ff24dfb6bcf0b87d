/* proto/runcfg: the run configuration's round trip, and the decoder
 * against every truncation, each header and record field broken, a
 * duplicate, a missing record, an unknown required type (refused) and an
 * optional one (skipped). */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "proto/runcfg.h"
#include "tests/lib/unit_suite.h"

static uint8_t ent[256];

static struct runcfg sample(void)
{
	static const char w[] = " kbox.mounts=kbox0:/workspace:rw kbox.disks=data:/data:rw:grow";

	for (size_t i = 0; i < sizeof ent; i++)
		ent[i] = (uint8_t)(i * 7 + 1);
	return (struct runcfg){.words = w, .words_len = sizeof w - 1, .clock_sec = 1796000000ull, .clock_nsec = 123456789u, .entropy = ent, .entropy_len = sizeof ent};
}

START_TEST(round_trip)
{
	struct runcfg c = sample(), d;
	uint8_t buf[1024];
	size_t n, k;

	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), 0);
	ck_assert_uint_eq(n, RUNCFG_HDR + 3 * RUNCFG_REC_HDR + c.words_len + 12 + c.entropy_len);
	ck_assert_int_eq(runcfg_message_len(buf), (long)n);
	ck_assert_int_eq(runcfg_decode(buf, n, &d), 0);
	ck_assert_uint_eq(d.words_len, c.words_len);
	ck_assert_mem_eq(d.words, c.words, c.words_len);
	ck_assert_uint_eq(d.clock_sec, c.clock_sec);
	ck_assert_uint_eq(d.clock_nsec, c.clock_nsec);
	ck_assert_uint_eq(d.entropy_len, c.entropy_len);
	ck_assert_mem_eq(d.entropy, c.entropy, c.entropy_len);
	for (k = 0; k < n; k++)
		ck_assert_int_eq(runcfg_decode(buf, k, &d), -EPROTO);
	buf[n] = 0;
	ck_assert_int_eq(runcfg_decode(buf, n + 1, &d), -EPROTO); /* a byte more than the header says */
	ck_assert_int_eq(runcfg_encode(&c, buf, n - 1, &k), -ENOSPC);
	/* No words at all is a configuration too (no shares, no disks). */
	c.words = NULL;
	c.words_len = 0;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), 0);
	ck_assert_int_eq(runcfg_decode(buf, n, &d), 0);
	ck_assert_uint_eq(d.words_len, 0);
	/* A clock past 2106 keeps its high bits. */
	c = sample();
	c.clock_sec = 0x123456789abull;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), 0);
	ck_assert_int_eq(runcfg_decode(buf, n, &d), 0);
	ck_assert_uint_eq(d.clock_sec, 0x123456789abull);
}
END_TEST

START_TEST(encode_refuses)
{
	struct runcfg c;
	uint8_t buf[RUNCFG_MAX + 64];
	static char big[RUNCFG_WORDS_MAX + 1];
	size_t n;

	c = sample();
	c.clock_nsec = 1000000000u;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), -EINVAL);
	c = sample();
	c.entropy_len = RUNCFG_ENTROPY_MIN - 1;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), -EINVAL);
	c = sample();
	c.entropy = NULL;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), -EINVAL);
	c = sample();
	c.words = "a\nb";
	c.words_len = 3;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), -EINVAL);
	memset(big, 'a', sizeof big);
	c = sample();
	c.words = big;
	c.words_len = sizeof big;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), -EINVAL);
	c.words_len = sizeof big - 1;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), 0);
}
END_TEST

/* Little-endian helpers for building broken messages by hand. */
static void put16(uint8_t *b, unsigned v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *b, uint32_t v)
{
	put16(b, v & 0xffff);
	put16(b + 2, v >> 16);
}

START_TEST(decode_refuses)
{
	struct runcfg c = sample(), d;
	uint8_t buf[2048], m[2048];
	size_t n, wrec = RUNCFG_HDR, crec, erec;

	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), 0);
	crec = wrec + RUNCFG_REC_HDR + c.words_len;
	erec = crec + RUNCFG_REC_HDR + 12;
#define BROKEN(expr)                                                   \
	do {                                                           \
		memcpy(m, buf, n);                                     \
		expr;                                                  \
		ck_assert_int_eq(runcfg_decode(m, n, &d), -EPROTO);    \
	} while (0)
	BROKEN(m[0] = 'X');                                   /* magic */
	BROKEN(put16(m + 4, 2));                              /* version */
	BROKEN(put32(m + 6, (uint32_t)(n - RUNCFG_HDR + 1))); /* body longer than the buffer */
	BROKEN(put32(m + 6, RUNCFG_MAX));                     /* over the cap */
	BROKEN(put16(m + crec, 7));                           /* an unknown required type */
	BROKEN(put16(m + crec, 0));
	BROKEN(put16(m + crec, RUNCFG_WORDS));                /* a duplicate (and no clock) */
	BROKEN(put32(m + crec + 2, 11));                      /* a clock of the wrong length */
	BROKEN(put32(m + crec + RUNCFG_REC_HDR + 8, 1000000000u));
	BROKEN(put32(m + erec + 2, 0xffffffffu));             /* a record past the end */
	BROKEN(m[wrec + RUNCFG_REC_HDR] = '\n');              /* words not printable */
	BROKEN(m[wrec + RUNCFG_REC_HDR] = 0);
	BROKEN(m[wrec + RUNCFG_REC_HDR] = (uint8_t)0xc3);
#undef BROKEN
	/* A missing record: the message without the entropy. */
	memcpy(m, buf, erec);
	put32(m + 6, (uint32_t)(erec - RUNCFG_HDR));
	ck_assert_int_eq(runcfg_decode(m, erec, &d), -EPROTO);
	/* Entropy too short: rebuild with 63 bytes. */
	memcpy(m, buf, n);
	put32(m + erec + 2, RUNCFG_ENTROPY_MIN - 1);
	put32(m + 6, (uint32_t)(erec + RUNCFG_REC_HDR + RUNCFG_ENTROPY_MIN - 1 - RUNCFG_HDR));
	ck_assert_int_eq(runcfg_decode(m, erec + RUNCFG_REC_HDR + RUNCFG_ENTROPY_MIN - 1, &d), -EPROTO);
	/* An optional record (type 0x8000 and up) is skipped. */
	memcpy(m, buf, n);
	put16(m + n, 0x8001);
	put32(m + n + 2, 3);
	memcpy(m + n + RUNCFG_REC_HDR, "new", 3);
	put32(m + 6, (uint32_t)(n + RUNCFG_REC_HDR + 3 - RUNCFG_HDR));
	ck_assert_int_eq(runcfg_decode(m, n + RUNCFG_REC_HDR + 3, &d), 0);
	ck_assert_uint_eq(d.entropy_len, c.entropy_len);
	/* ...but a truncated one is not. */
	put32(m + 6, (uint32_t)(n + RUNCFG_REC_HDR + 2 - RUNCFG_HDR));
	ck_assert_int_eq(runcfg_decode(m, n + RUNCFG_REC_HDR + 2, &d), -EPROTO);
}
END_TEST

START_TEST(env_ca_hostname)
{
	static const char env[] = "KEY=kbox-placeholder-1\0SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\0EMPTY=\0";
	static const char ca[] = "-----BEGIN CERTIFICATE-----\r\nMIIB\tx\n-----END CERTIFICATE-----\n";
	struct runcfg c = sample(), d;
	static uint8_t buf[RUNCFG_MAX];
	size_t n;

	c.env = env;
	c.env_len = sizeof env - 1; /* the string literal's own NUL is not part of it */
	c.ca = ca;
	c.ca_len = sizeof ca - 1;
	c.hostname = "my-box.1";
	c.hostname_len = 8;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), 0);
	ck_assert_int_eq(runcfg_decode(buf, n, &d), 0);
	ck_assert_uint_eq(d.env_len, c.env_len);
	ck_assert_mem_eq(d.env, env, c.env_len);
	ck_assert_uint_eq(d.ca_len, c.ca_len);
	ck_assert_mem_eq(d.ca, ca, c.ca_len);
	ck_assert_uint_eq(d.hostname_len, 8);
	ck_assert_mem_eq(d.hostname, "my-box.1", 8);
	/* Absent ones decode as empty. */
	c = sample();
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), 0);
	ck_assert_int_eq(runcfg_decode(buf, n, &d), 0);
	ck_assert_uint_eq(d.env_len + d.ca_len + d.hostname_len, 0);
	/* The checks, one field at a time. */
	ck_assert(!runcfg_text_ok(RUNCFG_ENV, "A=1", 3));          /* no final NUL */
	ck_assert(!runcfg_text_ok(RUNCFG_ENV, "=1\0", 3));         /* empty name */
	ck_assert(!runcfg_text_ok(RUNCFG_ENV, "A1\0", 3));         /* no '=' */
	ck_assert(!runcfg_text_ok(RUNCFG_ENV, "A=1\0\0", 5));      /* an empty entry */
	ck_assert(runcfg_text_ok(RUNCFG_ENV, "A=1\0B==\0", 8));
	ck_assert(runcfg_text_ok(RUNCFG_ENV, "", 0));
	ck_assert(!runcfg_text_ok(RUNCFG_CA, "x\0y", 3));
	ck_assert(!runcfg_text_ok(RUNCFG_CA, "x\x7f", 2));
	ck_assert(!runcfg_text_ok(RUNCFG_HOSTNAME, "a b", 3));
	ck_assert(!runcfg_text_ok(RUNCFG_HOSTNAME, "a/b", 3));
	ck_assert(!runcfg_text_ok(RUNCFG_HOSTNAME, "a\nb", 3));
	ck_assert(!runcfg_text_ok(RUNCFG_HOSTNAME, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 65));
	ck_assert(runcfg_text_ok(RUNCFG_HOSTNAME, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 64));
	ck_assert(!runcfg_text_ok(RUNCFG_CLOCK, "", 0));
	c = sample();
	c.hostname = "bad name";
	c.hostname_len = 8;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), -EINVAL);
	c = sample();
	c.env = "A=1";
	c.env_len = 3;
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), -EINVAL);
	/* An optional record present but empty is malformed. */
	c = sample();
	ck_assert_int_eq(runcfg_encode(&c, buf, sizeof buf, &n), 0);
	buf[n] = RUNCFG_HOSTNAME;
	buf[n + 1] = 0;
	memset(buf + n + 2, 0, 4);
	put32(buf + 6, (uint32_t)(n + RUNCFG_REC_HDR - RUNCFG_HDR));
	ck_assert_int_eq(runcfg_decode(buf, n + RUNCFG_REC_HDR, &d), -EPROTO);
}
END_TEST

Suite *runcfg_suite(void)
{
	Suite *s = suite_create("runcfg");

	unit_suite_case(s, "core", round_trip, encode_refuses, decode_refuses, env_ca_hostname);
	return s;
}
