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

#define FT_MAX_CAP (1u << 20)

struct ft_key {
	uint8_t gip[4], dip[4]; /* guest address, address the guest dialled */
	uint16_t gport, dport;
};

/* Embedded in the caller's connection structure. */
struct ft_entry {
	struct ft_key key;
	uint32_t slot, gen; /* set by ft_insert */
	struct ft_entry *next;
};

struct ft {
	struct ft_entry **bucket;
	size_t nbuckets; /* power of two */
	struct ft_entry **slots;
	uint32_t *gens;
	uint32_t *free; /* stack of free slot numbers */
	size_t nfree, cap, n;
	uint64_t seed;
};

/* Make an empty table for at most cap entries (1..FT_MAX_CAP); seed keys
 * the hash so the guest cannot choose colliding tuples.  0, -EINVAL or
 * -ENOMEM. */
int ft_init(struct ft *t, size_t cap, uint64_t seed);

/* Release the table (not the entries, which the caller owns). */
void ft_free(struct ft *t);

/* Add e (e->key set by the caller) and give it a slot and generation.
 * 0, -EEXIST (the tuple is present) or -ENOSPC (table full). */
int ft_insert(struct ft *t, struct ft_entry *e);

/* The entry for k, or NULL. */
struct ft_entry *ft_find(const struct ft *t, const struct ft_key *k);

/* Remove e, which must be in t; its handle goes stale. */
void ft_remove(struct ft *t, struct ft_entry *e);

/* A handle for e: never 0, stale once e is removed. */
uint64_t ft_handle(const struct ft_entry *e);

/* The entry h was made for, or NULL if it is stale or garbage. */
struct ft_entry *ft_from_handle(const struct ft *t, uint64_t h);

#endif
