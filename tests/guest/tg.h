/* Shared by the KVM-level harness (harness.c) and the malicious-guest
 * fuzzer (fuzz.c), which both drive the test guest of guest.S: the
 * guest's configuration block, and their one-line-per-check output. */
#ifndef KBOX_TESTS_GUEST_TG_H
#define KBOX_TESTS_GUEST_TG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* The guest's side of these lives in guest.S; keep the two in step. */
#define TG_CFG_ADDR  0x200000ull
#define TG_CFG_MAGIC 0x3147544bu
#define TG_MMIO      0xcf000000ull /* clear of VIRTIO_BUS_BASE */

enum tg_mode { MODE_EXITS = 0, MODE_GARBAGE = 1, MODE_FAULT = 2, MODE_IOPL = 3,
	       MODE_SCRIPT = 4 };
enum tg_finish { FINISH_RESET = 0, FINISH_TRIPLE = 1 };

/* Written at TG_CFG_ADDR before the guest starts; it reads its work there. */
struct tg_cfg {
	uint32_t magic, ncpus, mode, finish, rounds, seed, mmio_pages, exit_digit;
	uint64_t mmio_base;
	uint64_t virtio_base;
	uint32_t virtio_hits, virtio_irq;
	uint64_t script;
};
_Static_assert(offsetof(struct tg_cfg, script) == 0x38 && sizeof(struct tg_cfg) <= 0x40,
	       "struct tg_cfg must match cfg in guest.S");

/* The checks so far, for the final "N passed, M failed" line. */
static unsigned tg_passed, tg_failed;

/* Print "ok   - WHAT" or "FAIL - WHAT" (a printf format) at once, count
 * it, and return ok. */
__attribute__((format(printf, 2, 3)))
static inline int tg_check(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s - ", ok ? "ok  " : "FAIL");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	if (ok)
		tg_passed++;
	else
		tg_failed++;
	return ok;
}

/* Seconds on the monotonic clock. */
static inline double tg_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#endif
