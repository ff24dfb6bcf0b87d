/* DNS for the guest (RFC 1035): parsing the guest's queries and the
 * upstream resolver's responses, building our replies, and the memory of
 * which name produced which address (so that a connection can be judged
 * by name).  Pure: no I/O; time is passed in.  Every packet is hostile:
 * each length is checked against the bytes received, compression
 * pointers may only point backwards and are followed at most
 * DNS_MAX_HOPS times per name, labels are at most 63 bytes and names 255
 * on the wire, and record counts are capped. */
#ifndef KBOX_NETSTACK_DNS_H
#define KBOX_NETSTACK_DNS_H

#include <stddef.h>
#include <stdint.h>

#include "netstack/policy.h"

#define DNS_HDR 12u
#define DNS_MAX_MSG 512u    /* largest query we accept and reply we build (UDP, no EDNS) */
#define DNS_MAX_HOPS 16u    /* compression pointers followed per name */
#define DNS_MAX_RRS 64u     /* answer records a response may carry */
#define DNS_MAX_ANSWERS 16u /* addresses we put in one reply */
#define DNS_MAX_CNAMES 8u   /* CNAME chain length we follow */
#define DNS_NAME_TEXT 256u  /* buffer for a name in text form (253 + NUL, with room) */

#define DNS_TYPE_A 1u
#define DNS_TYPE_CNAME 5u
#define DNS_TYPE_AAAA 28u
#define DNS_CLASS_IN 1u

#define DNS_RCODE_NOERROR 0
#define DNS_RCODE_FORMERR 1
#define DNS_RCODE_SERVFAIL 2
#define DNS_RCODE_NXDOMAIN 3
#define DNS_RCODE_NOTIMP 4
#define DNS_RCODE_REFUSED 5

/* Keep a remembered name at least this long, whatever the TTL: resolvers
 * in the guest (nscd, the JVM, Node) reuse answers past short TTLs, and a
 * connection that finds no name is judged by address alone. */
#define DNS_MEMO_MIN_TTL 300u
#define DNS_MEMO_MAX_TTL 86400u
#define DNS_MEMO_MAX_NAMES 8u /* names dns_memo_names returns for one address */

/* A parsed query.  When dns_parse_query fails after a readable header
 * (id and flags set, has_question false), the caller may still answer
 * with FORMERR or NOTIMP without a question. */
struct dns_query {
	uint16_t id, flags;
	uint16_t qtype, qclass;
	int has_question;
	char name[DNS_NAME_TEXT]; /* text form, no trailing dot, case as sent */
	size_t qend;              /* end of the question: the reply echoes [DNS_HDR, qend) */
};

/* One address from a response, with its TTL in seconds. */
struct dns_rr {
	struct policy_addr addr;
	uint32_t ttl;
};

/* Read the name at off in pkt[0, len) into out (DNS_NAME_TEXT bytes, text
 * form, labels joined by '.', "" for the root) and store in *next the
 * offset just after the name where it started (not where a pointer led).
 * Labels may hold only printable ASCII other than '.'; pointers must lead
 * backwards and past the header.  0 or -EPROTO. */
int dns_read_name(const uint8_t *pkt, size_t len, size_t off, char *out, size_t *next);

/* Parse a guest query: QR clear, opcode QUERY, exactly one question of
 * class IN, no answer or authority records, at most DNS_MAX_MSG bytes.
 * Returns 0; -EBADMSG (no header, or a response: send nothing back, so
 * two resolvers cannot answer each other forever); -EPROTO (malformed:
 * answer FORMERR); -ENOTSUP (opcode or class we do not serve: answer
 * NOTIMP); -EMSGSIZE (too long: answer FORMERR). */
int dns_parse_query(const uint8_t *pkt, size_t len, struct dns_query *q);

/* Build our reply to q (parsed from qpkt, which must still hold the
 * query) into out: the question echoed, rcode, and for NOERROR the
 * addresses of addrs[0, n) whose family fits the question type (A: IPv4,
 * AAAA: IPv6), at most DNS_MAX_ANSWERS and as many as fit in outlen, each
 * with ttl.  *outn gets the length.  0, -EINVAL (bad rcode) or -ENOSPC
 * (not even the header and question fit). */
int dns_build_reply(const struct dns_query *q, const uint8_t *qpkt, int rcode, const struct policy_addr *addrs,
		    size_t n, uint32_t ttl, uint8_t *out, size_t outlen, size_t *outn);

/* Build a recursive query (RD set) with id for name (text form, no
 * trailing dot; labels of 1..63 bytes of printable ASCII other than '.',
 * at most 253 bytes) and qtype, class IN, into out; *outn gets the
 * length.  dns_parse_query reads it back into the struct dns_query that
 * dns_parse_response wants.  0, -EINVAL (bad name) or -ENOSPC. */
int dns_build_query(uint16_t id, const char *name, uint16_t qtype, uint8_t *out, size_t outlen,
		    size_t *outn);

/* Parse an upstream response to q: same id, QR set, the same single
 * question, at most DNS_MAX_RRS answers.  Stores the response code in
 * *rcode and the A/AAAA records owned by q's name or by a name its CNAME
 * chain (at most DNS_MAX_CNAMES long) leads to into out[0, max), count in
 * *n.  0, -EPROTO (malformed or not an answer to q) or -EMSGSIZE (TC set:
 * truncated). */
int dns_parse_response(const uint8_t *pkt, size_t len, const struct dns_query *q, int *rcode,
		       struct dns_rr *out, size_t max, size_t *n);

/* Rebinding protection and allowlist filtering: keep, in order, only the
 * records policy_check_answer allows for name, and return how many are left.
 * If some were dropped and why is not NULL, *why gets the decision for
 * the last one dropped (for the audit log). */
size_t dns_filter_answers(const struct policy *p, const char *name, struct dns_rr *rr, size_t n,
			  struct policy_decision *why);

/* The name memory: which name our DNS gave each address for, bounded
 * (least recently used entries go first) and with expiry. */
struct dns_memo_entry {
	struct policy_addr addr;
	char name[POLICY_NAME_MAX + 1];
	uint64_t expires; /* seconds, same clock as the now arguments */
	uint64_t used;    /* LRU stamp; 0: free slot */
};

struct dns_memo {
	struct dns_memo_entry *e;
	size_t cap;
	uint64_t tick;
};

/* Make an empty memory of cap entries (cap >= 1): 0, -EINVAL or -ENOMEM. */
int dns_memo_init(struct dns_memo *m, size_t cap);

/* Release the memory's entries. */
void dns_memo_free(struct dns_memo *m);

/* Remember that name (normalised; invalid names are ignored) resolved to
 * a for ttl seconds (clamped to [DNS_MEMO_MIN_TTL, DNS_MEMO_MAX_TTL]),
 * refreshing an existing pair or replacing an expired or the least
 * recently used entry. */
void dns_memo_put(struct dns_memo *m, const char *name, const struct policy_addr *a, uint32_t ttl, uint64_t now);

/* Store in names[0, max) (max capped at DNS_MEMO_MAX_NAMES) the live names remembered for a, most recently
 * used first, and return their count.  The pointers are valid until the
 * next dns_memo_put or dns_memo_free.  Marks those entries used. */
size_t dns_memo_names(struct dns_memo *m, const struct policy_addr *a, uint64_t now, const char **names, size_t max);

#endif
