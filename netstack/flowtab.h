/* The table of the guest's TCP connections that kbox proxies, keyed by
 * the 4-tuple the guest used, bounded in size.  Each entry also gets a
 * handle (slot and generation) that can be stored where a pointer would
 * be unsafe, e.g. in epoll data read by one thread while another may
 * already have freed the connection: a stale handle finds nothing.  Pure:
 * no I/O; the caller locks. */
#ifndef KBOX_NETSTACK_FLOWTAB_H
#define KBOX_NETSTACK_FLOWTAB_H

#include <stddef.h>
#include <stdint.h>

#define FLOWTAB_MAX_CAP (1u << 20)

struct flowtab_key {
	/* Guest address, address the guest dialled: IPv4 in the first 4
	 * bytes and zeros after, or IPv6.  A key is compared whole, so a
	 * caller zeroes it before filling it in. */
	uint8_t gip[16], dip[16];
	uint16_t gport, dport;
};

/* Embedded in the caller's connection structure. */
struct flowtab_entry {
	struct flowtab_key key;
	uint32_t slot, gen; /* set by flowtab_insert */
	struct flowtab_entry *next;
};

struct ft {
	struct flowtab_entry **bucket;
	size_t nbuckets; /* power of two */
	struct flowtab_entry **slots;
	uint32_t *gens;
	uint32_t *free; /* stack of free slot numbers */
	size_t nfree, cap, n;
	uint64_t seed;
};

/* Make an empty table for at most cap entries (1..FLOWTAB_MAX_CAP); seed keys
 * the hash so the guest cannot choose colliding tuples.  0, -EINVAL or
 * -ENOMEM. */
int flowtab_init(struct ft *t, size_t cap, uint64_t seed);

/* Release the table (not the entries, which the caller owns). */
void flowtab_free(struct ft *t);

/* Add e (e->key set by the caller) and give it a slot and generation.
 * 0, -EEXIST (the tuple is present) or -ENOSPC (table full). */
int flowtab_insert(struct ft *t, struct flowtab_entry *e);

/* The entry for k, or NULL. */
struct flowtab_entry *flowtab_find(const struct ft *t, const struct flowtab_key *k);

/* Remove e, which must be in t; its handle goes stale. */
void flowtab_remove(struct ft *t, struct flowtab_entry *e);

/* A handle for e: never 0, stale once e is removed. */
uint64_t flowtab_handle(const struct flowtab_entry *e);

/* The entry h was made for, or NULL if it is stale or garbage. */
struct flowtab_entry *flowtab_from_handle(const struct ft *t, uint64_t h);

#endif
