/* The TCP proxy's byte budget across connections (netstack/budget.h):
 * floors that always hold, growth only into free budget, windows that
 * close as the host takes bytes once the budget is spent, and a
 * simulation of many greedy connections that never pushes the total past
 * the cap plus their floors. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "netstack/budget.h"
#include "tests/lib/unit_suite.h"

#define MIB ((size_t)1024 * 1024)
#define WND (2 * MIB)

START_TEST(charges)
{
	struct budget b;
	size_t a = 0, c = 0;

	budget_init(&b, 0);
	ck_assert_uint_eq(b.cap, BUDGET_CAP_DEFAULT);
	budget_init(&b, 10 * MIB);
	budget_charge(&b, &a, 3 * MIB);
	budget_charge(&b, &c, 4 * MIB);
	ck_assert_uint_eq(b.used, 7 * MIB);
	ck_assert_uint_eq(budget_free(&b), 3 * MIB);
	budget_charge(&b, &a, 1 * MIB);
	ck_assert_uint_eq(b.used, 5 * MIB);
	ck_assert_uint_eq(b.peak, 7 * MIB);
	budget_charge(&b, &c, 12 * MIB);
	ck_assert_uint_eq(budget_free(&b), 0); /* over: nothing free, no wrap */
	budget_charge(&b, &a, 0);
	budget_charge(&b, &c, 0);
	ck_assert_uint_eq(b.used, 0);
	ck_assert_uint_eq(b.peak, 13 * MIB);
}
END_TEST

START_TEST(down_room)
{
	struct budget b;
	size_t other = 0;

	budget_init(&b, 4 * MIB);
	/* Room is what lwIP takes, when the budget has more. */
	ck_assert_uint_eq(budget_down_room(&b, 0, 256 * 1024), 256 * 1024);
	ck_assert_uint_eq(budget_down_room(&b, MIB, 256 * 1024), 256 * 1024);
	/* Budget spent elsewhere: the floor still reads, no more. */
	budget_charge(&b, &other, 4 * MIB);
	ck_assert_uint_eq(budget_down_room(&b, 0, 256 * 1024), BUDGET_FLOOR);
	ck_assert_uint_eq(budget_down_room(&b, 1000, 256 * 1024), BUDGET_FLOOR - 1000);
	ck_assert_uint_eq(budget_down_room(&b, BUDGET_FLOOR, 256 * 1024), 0);
	ck_assert_uint_eq(budget_down_room(&b, MIB, 256 * 1024), 0);
	ck_assert_uint_eq(budget_down_room(&b, 0, 100), 100);
	/* Some of it back. */
	budget_charge(&b, &other, 4 * MIB - 100000);
	ck_assert_uint_eq(budget_down_room(&b, MIB, 256 * 1024), 100000);
}
END_TEST

START_TEST(up_give)
{
	struct budget b;
	size_t mine = 0, other = 0;

	budget_init(&b, 8 * MIB);
	/* A fresh connection at its floor, with budget: the window grows by
	 * what the host took, up to the largest it can be. */
	budget_charge(&b, &mine, BUDGET_FLOOR);
	ck_assert_uint_eq(budget_up_give(&b, BUDGET_FLOOR, BUDGET_FLOOR, WND), 2 * BUDGET_FLOOR);
	ck_assert_uint_eq(budget_up_give(&b, BUDGET_FLOOR, 1000, WND), 2000);
	ck_assert_uint_eq(budget_up_give(&b, WND, 1000, WND), 1000);
	ck_assert_uint_eq(budget_up_give(&b, WND - 10, 1000, WND), 1010);
	/* Without window scaling the largest is 64 KiB - 1. */
	ck_assert_uint_eq(budget_up_give(&b, 65535, 65535, 65535), 65535);
	ck_assert_uint_eq(budget_up_give(&b, 1000, 0, 1000), 0);
	/* The budget spent elsewhere: what the host took comes back only
	 * down to the floor... */
	budget_charge(&b, &mine, MIB);
	budget_charge(&b, &other, 7 * MIB);
	ck_assert_uint_eq(budget_free(&b), 0);
	ck_assert_uint_eq(budget_up_give(&b, MIB, 300000, WND), 300000); /* at the cap: kept, not grown */
	budget_charge(&b, &other, 7 * MIB + 200000);                      /* 200000 over */
	ck_assert_uint_eq(budget_up_give(&b, MIB, 300000, WND), 100000); /* shrinks by what is over */
	ck_assert_uint_eq(budget_up_give(&b, MIB, MIB, WND), MIB - 200000); /* all taken: the window is what is left */
	budget_charge(&b, &other, 100 * MIB);
	ck_assert_uint_eq(budget_up_give(&b, MIB, 300000, WND), 0);
	ck_assert_uint_eq(budget_up_give(&b, 100000, 90000, WND), BUDGET_FLOOR - 10000);
	ck_assert_uint_eq(budget_up_give(&b, 100000, 90000, 20000), 10000); /* floor capped by the largest window */
	/* ...and free budget lets it grow again, only into what is free. */
	budget_charge(&b, &other, 7 * MIB - 50000);
	ck_assert_uint_eq(budget_up_give(&b, MIB, 300000, WND), 350000);
}
END_TEST

/* Many connections, each greedy both ways, the host taking bytes at
 * random: the total never passes the cap by more than the floors, every
 * connection keeps its floor, and once the cap is spent nobody grows. */
START_TEST(simulation)
{
	enum { N = 300, ROUNDS = 200000 };
	struct conn {
		size_t allot, held, down, charge;
	} *c = calloc(N, sizeof *c);
	struct budget b;
	uint32_t x = 99;
	size_t i, r;

	ck_assert_ptr_nonnull(c);
	budget_init(&b, 64 * MIB);
	for (i = 0; i < N; i++) {
		c[i].allot = BUDGET_FLOOR;
		budget_charge(&b, &c[i].charge, c[i].allot);
	}
	for (r = 0; r < ROUNDS; r++) {
		struct conn *k;
		size_t n, give, room;

		x = x * 1103515245u + 12345u;
		k = &c[(x >> 8) % N];
		x = x * 1103515245u + 12345u;
		switch ((x >> 16) % 3) {
		case 0: /* the guest fills its window */
			k->held = k->allot;
			break;
		case 1: /* the host takes some of it */
			n = k->held ? ((x >> 4) % k->held) + 1 : 0;
			give = budget_up_give(&b, k->allot, n, WND);
			ck_assert_uint_le(give, 2 * n > BUDGET_FLOOR ? 2 * n : BUDGET_FLOOR);
			k->allot = k->allot - n + give;
			k->held -= n;
			ck_assert_uint_ge(k->allot, BUDGET_FLOOR);
			ck_assert_uint_le(k->allot, WND);
			break;
		case 2: /* the host sends, the guest acknowledges some */
			room = budget_down_room(&b, k->down, 256 * 1024);
			if (b.used >= b.cap)
				ck_assert_uint_le(k->down + room, k->down > BUDGET_FLOOR ? k->down : BUDGET_FLOOR);
			k->down += room;
			k->down -= k->down ? (x >> 4) % k->down : 0;
			break;
		}
		budget_charge(&b, &k->charge, k->allot + k->down);
		ck_assert_uint_le(b.used, b.cap + (size_t)N * 2 * BUDGET_FLOOR);
	}
	/* The budget was used, and the windows grew past their floors. */
	ck_assert_uint_ge(b.peak, 60 * MIB);
	for (i = 0, r = 0; i < N; i++)
		r += c[i].allot > BUDGET_FLOOR;
	ck_assert_uint_gt(r, 0);
	for (i = 0; i < N; i++)
		budget_charge(&b, &c[i].charge, 0);
	ck_assert_uint_eq(b.used, 0);
	free(c);
}
END_TEST

Suite *budget_suite(void)
{
	return unit_suite("budget", "core", charges, down_room, up_give,
			  simulation);
}
