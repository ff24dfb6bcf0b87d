#include "netstack/flowtab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t x)
{
	/* splitmix64's finaliser: every input bit reaches every output bit. */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static size_t hash(const struct ft *t, const struct flowtab_key *k)
{
	uint64_t g[2], d[2], h;

	memcpy(g, k->gip, 16);
	memcpy(d, k->dip, 16);
	h = mix(g[0] ^ t->seed);
	h = mix(h ^ g[1]);
	h = mix(h ^ d[0]);
	h = mix(h ^ d[1]);
	return (size_t)(mix(h ^ ((uint64_t)k->gport << 16 | k->dport)) & (t->nbuckets - 1));
}

static int key_eq(const struct flowtab_key *x, const struct flowtab_key *y)
{
	return memcmp(x->gip, y->gip, 16) == 0 && memcmp(x->dip, y->dip, 16) == 0 && x->gport == y->gport &&
	       x->dport == y->dport;
}

int flowtab_init(struct ft *t, size_t cap, uint64_t seed)
{
	size_t i;

	memset(t, 0, sizeof *t);
	if (cap == 0 || cap > FLOWTAB_MAX_CAP)
		return -EINVAL;
	t->nbuckets = 16;
	while (t->nbuckets < cap)
		t->nbuckets <<= 1;
	t->bucket = calloc(t->nbuckets, sizeof *t->bucket);
	t->slots = calloc(cap, sizeof *t->slots);
	t->gens = calloc(cap, sizeof *t->gens);
	t->free = calloc(cap, sizeof *t->free);
	if (!t->bucket || !t->slots || !t->gens || !t->free) {
		flowtab_free(t);
		return -ENOMEM;
	}
	/* Lowest slots first, so small tables stay dense in tests. */
	for (i = 0; i < cap; i++)
		t->free[i] = (uint32_t)(cap - 1 - i);
	t->nfree = cap;
	t->cap = cap;
	t->seed = seed;
	return 0;
}

void flowtab_free(struct ft *t)
{
	free(t->bucket);
	free(t->slots);
	free(t->gens);
	free(t->free);
	memset(t, 0, sizeof *t);
}

struct flowtab_entry *flowtab_find(const struct ft *t, const struct flowtab_key *k)
{
	struct flowtab_entry *e;

	for (e = t->bucket[hash(t, k)]; e; e = e->next)
		if (key_eq(&e->key, k))
			return e;
	return NULL;
}

int flowtab_insert(struct ft *t, struct flowtab_entry *e)
{
	size_t h = hash(t, &e->key);

	if (flowtab_find(t, &e->key))
		return -EEXIST;
	if (t->nfree == 0)
		return -ENOSPC;
	e->slot = t->free[--t->nfree];
	/* Generation 0 is never handed out, so handle 0 is never valid. */
	if (++t->gens[e->slot] == 0)
		t->gens[e->slot] = 1;
	e->gen = t->gens[e->slot];
	t->slots[e->slot] = e;
	e->next = t->bucket[h];
	t->bucket[h] = e;
	t->n++;
	return 0;
}

void flowtab_remove(struct ft *t, struct flowtab_entry *e)
{
	struct flowtab_entry **pp;

	for (pp = &t->bucket[hash(t, &e->key)]; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			e->next = NULL;
			t->slots[e->slot] = NULL;
			t->free[t->nfree++] = e->slot;
			t->n--;
			return;
		}
	}
}

uint64_t flowtab_handle(const struct flowtab_entry *e)
{
	return (uint64_t)e->gen << 32 | e->slot;
}

struct flowtab_entry *flowtab_from_handle(const struct ft *t, uint64_t h)
{
	uint32_t slot = (uint32_t)h, gen = (uint32_t)(h >> 32);
	struct flowtab_entry *e;

	if (slot >= t->cap || gen == 0)
		return NULL;
	e = t->slots[slot];
	return e && e->gen == gen ? e : NULL;
}
