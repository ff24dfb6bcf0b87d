/* The proxy's byte budget (budget.h). */
#include "netstack/budget.h"

void budget_init(struct budget *b, size_t cap)
{
	b->cap = cap ? cap : BUDGET_CAP_DEFAULT;
	b->used = 0;
	b->peak = 0;
}

void budget_charge(struct budget *b, size_t *charged, size_t now)
{
	b->used = b->used - *charged + now;
	*charged = now;
	if (b->used > b->peak)
		b->peak = b->used;
}

size_t budget_free(const struct budget *b)
{
	return b->used < b->cap ? b->cap - b->used : 0;
}

size_t budget_down_room(const struct budget *b, size_t held, size_t room)
{
	size_t may = held < BUDGET_FLOOR ? BUDGET_FLOOR - held : 0, f = budget_free(b);

	if (f > may)
		may = f;
	return room < may ? room : may;
}

size_t budget_up_give(const struct budget *b, size_t allot, size_t n, size_t max)
{
	size_t after = n < allot ? allot - n : 0;
	size_t fl = BUDGET_FLOOR < max ? BUDGET_FLOOR : max;
	size_t want = allot + n < max ? allot + n : max; /* grow by what was used */
	size_t lo = fl > after ? fl - after : 0;
	size_t hi = want > after ? want - after : 0;
	size_t lim;

	if (hi <= lo)
		return lo;
	/* The caller's charge still counts allot: the new allot may be as
	 * large as allot plus what the budget has free, and must shrink by
	 * what the budget is over. */
	if (b->used <= b->cap)
		lim = allot + (b->cap - b->used);
	else
		lim = allot > b->used - b->cap ? allot - (b->used - b->cap) : 0;
	if (after + hi > lim)
		hi = lim > after + lo ? lim - after : lo;
	return hi;
}
