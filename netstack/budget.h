/* A budget for the bytes the TCP proxy holds across all its connections
 * (docs/network.md, "Memory"), prefix budget_.  Pure: the proxy
 * (stack_tcp.c) keeps one per stack and asks it before it reads from a
 * host socket or reopens a guest's window.
 *
 * Each connection is charged what it may be made to hold: towards the
 * host, its whole receive window (what the guest may send without
 * asking, plus what it sent and the host socket has not taken); towards
 * the guest, the host's bytes lwIP still holds (unsent or unacknowledged)
 * and those waiting in the proxy.  Above a floor of its own each way
 * (BUDGET_FLOOR), a connection grows only while the sum of all charges stays
 * within the cap; beyond it, reads stop and windows close as the host
 * takes bytes.  Nothing already accepted is dropped. */
#ifndef KBOX_NETSTACK_BUDGET_H
#define KBOX_NETSTACK_BUDGET_H

#include <stddef.h>

/* What a connection may always hold each way, whatever the others hold:
 * the unscaled window a SYN or SYN-ACK offers (lwIP's, before window
 * scaling, which the guest may fill before the proxy has a say). */
#define BUDGET_FLOOR 65535u

/* The default cap (stack_config.buf_cap 0). */
#define BUDGET_CAP_DEFAULT ((size_t)256 * 1024 * 1024)

struct budget {
	size_t cap;  /* bytes */
	size_t used; /* the sum of the connections' charges */
	size_t peak; /* the largest used seen */
};

/* Start b with cap bytes (0: BUDGET_CAP_DEFAULT). */
void budget_init(struct budget *b, size_t cap);

/* A connection's charge changes from *charged to now: used follows. */
void budget_charge(struct budget *b, size_t *charged, size_t now);

/* Bytes above the cap nobody holds (0 when used is at or past the cap). */
size_t budget_free(const struct budget *b);

/* Towards the guest: how much a connection that holds held bytes may
 * read from its host socket now, when lwIP would take room: up to its
 * floor whatever the budget, beyond it only what the budget has free. */
size_t budget_down_room(const struct budget *b, size_t held, size_t room);

/* Towards the host: the receive window to give back after the host
 * socket took n of the guest's bytes.  allot is the connection's charge
 * for this direction before they were taken (window plus bytes held,
 * counted in used), max the largest window the connection can have.
 * The new allot (allot - n + the answer) grows by at most n, up to max,
 * and is never more than allot plus what the budget has free, nor more
 * than allot less what the budget is over -- but never less than
 * BUDGET_FLOOR (or max if smaller).  The caller then charges it. */
size_t budget_up_give(const struct budget *b, size_t allot, size_t n, size_t max);

#endif
