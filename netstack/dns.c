/* DNS messages and the name memory; see dns.h for the limits. */
#include "netstack/dns.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/frame.h"

#define FLAG_QR 0x8000u
#define FLAG_TC 0x0200u
#define FLAG_RD 0x0100u
#define FLAG_RA 0x0080u
#define OPCODE_MASK 0x7800u

int dns_read_name(const uint8_t *pkt, size_t len, size_t off, char *out, size_t *next)
{
	/* Each pointer must lead before the start of the labels that held
	 * it, so the positions strictly decrease and no loop is possible;
	 * the hop limit bounds the work anyway. */
	size_t pos = off, floor = off, end = 0, tlen = 0, wire = 1;
	unsigned hops = 0;
	bool jumped = false;
	for (;;) {
		if (pos >= len)
			return -EPROTO;
		uint8_t b = pkt[pos];
		if ((b & 0xc0) == 0xc0) {
			if (pos + 1 >= len)
				return -EPROTO;
			size_t target = (size_t)(b & 0x3f) << 8 | pkt[pos + 1];
			/* No name lives in the header. */
			if (target < DNS_HDR || target >= floor || ++hops > DNS_MAX_HOPS)
				return -EPROTO;
			if (!jumped)
				end = pos + 2;
			jumped = true;
			pos = floor = target;
			continue;
		}
		if (b & 0xc0)
			return -EPROTO; /* 0x40 and 0x80: extended label types, obsolete */
		if (b == 0) {
			if (!jumped)
				end = pos + 1;
			break;
		}
		if (b > len - pos - 1)
			return -EPROTO;
		wire += 1u + b;
		if (wire > 255)
			return -EPROTO;
		if (tlen)
			out[tlen++] = '.';
		for (size_t i = 1; i <= b; i++) {
			uint8_t c = pkt[pos + i];
			/* A '.' inside a label would let one name pass for
			 * another once written as text. */
			if (c < 0x21 || c > 0x7e || c == '.')
				return -EPROTO;
			out[tlen++] = (char)c;
		}
		pos += 1u + b;
	}
	out[tlen] = '\0';
	*next = end;
	return 0;
}

int dns_parse_query(const uint8_t *pkt, size_t len, struct dns_query *q)
{
	memset(q, 0, sizeof *q);
	if (len < DNS_HDR)
		return -EBADMSG;
	q->id = frame_get16(pkt);
	q->flags = frame_get16(pkt + 2);
	if (q->flags & FLAG_QR)
		return -EBADMSG;
	if (len > DNS_MAX_MSG)
		return -EMSGSIZE;
	if (q->flags & OPCODE_MASK)
		return -ENOTSUP;
	if (frame_get16(pkt + 4) != 1 || frame_get16(pkt + 6) != 0 || frame_get16(pkt + 8) != 0)
		return -EPROTO;
	size_t next;
	if (dns_read_name(pkt, len, DNS_HDR, q->name, &next) < 0 || len - next < 4)
		return -EPROTO;
	q->qtype = frame_get16(pkt + next);
	q->qclass = frame_get16(pkt + next + 2);
	if (q->qclass != DNS_CLASS_IN)
		return -ENOTSUP;
	q->qend = next + 4;
	q->has_question = 1;
	return 0;
}

int dns_build_reply(const struct dns_query *q, const uint8_t *qpkt, int rcode, const struct policy_addr *addrs,
		    size_t n, uint32_t ttl, uint8_t *out, size_t outlen, size_t *outn)
{
	if (rcode < 0 || rcode > 15)
		return -EINVAL;
	size_t qlen = q->has_question ? q->qend - DNS_HDR : 0;
	if (outlen < DNS_HDR || outlen - DNS_HDR < qlen)
		return -ENOSPC;
	memset(out, 0, DNS_HDR);
	frame_put16(out, q->id);
	frame_put16(out + 2, (uint16_t)(FLAG_QR | (q->flags & (OPCODE_MASK | FLAG_RD)) | FLAG_RA | (unsigned)rcode));
	frame_put16(out + 4, q->has_question ? 1 : 0);
	memcpy(out + DNS_HDR, qpkt + DNS_HDR, qlen);
	size_t pos = DNS_HDR + qlen;
	uint16_t count = 0;
	uint8_t want = q->qtype == DNS_TYPE_A ? 4 : q->qtype == DNS_TYPE_AAAA ? 6 : 0;
	for (size_t i = 0; rcode == DNS_RCODE_NOERROR && want && i < n && count < DNS_MAX_ANSWERS; i++) {
		if (addrs[i].family != want)
			continue;
		size_t rdlen = want == 4 ? 4 : 16;
		if (outlen - pos < 12 + rdlen)
			break;
		frame_put16(out + pos, 0xc000 | DNS_HDR); /* the name in the question */
		frame_put16(out + pos + 2, q->qtype);
		frame_put16(out + pos + 4, DNS_CLASS_IN);
		frame_put32(out + pos + 6, ttl);
		frame_put16(out + pos + 10, (uint16_t)rdlen);
		memcpy(out + pos + 12, addrs[i].b, rdlen);
		pos += 12 + rdlen;
		count++;
	}
	frame_put16(out + 6, count);
	*outn = pos;
	return 0;
}

int dns_build_query(uint16_t id, const char *name, uint16_t qtype, uint8_t *out, size_t outlen,
		    size_t *outn)
{
	size_t len = strnlen(name, POLICY_NAME_MAX + 1);
	/* Labels plus one length byte each, the root byte and qtype/qclass. */
	if (len == 0 || len > POLICY_NAME_MAX)
		return -EINVAL;
	if (outlen < DNS_HDR || outlen - DNS_HDR < len + 2 + 4)
		return -ENOSPC;
	memset(out, 0, DNS_HDR);
	frame_put16(out, id);
	frame_put16(out + 2, FLAG_RD);
	frame_put16(out + 4, 1);
	size_t pos = DNS_HDR;
	const char *l = name;
	for (;;) {
		size_t ll = strcspn(l, ".");
		if (ll == 0 || ll > 63)
			return -EINVAL;
		out[pos++] = (uint8_t)ll;
		for (size_t i = 0; i < ll; i++) {
			unsigned char c = (unsigned char)l[i];
			if (c < 0x21 || c > 0x7e)
				return -EINVAL;
			out[pos++] = c;
		}
		if (l[ll] == '\0')
			break;
		l += ll + 1;
	}
	out[pos++] = 0;
	frame_put16(out + pos, qtype);
	frame_put16(out + pos + 2, DNS_CLASS_IN);
	*outn = pos + 4;
	return 0;
}

int dns_parse_response(const uint8_t *pkt, size_t len, const struct dns_query *q, int *rcode,
		       struct dns_rr *out, size_t max, size_t *n)
{
	*n = 0;
	if (len < DNS_HDR || frame_get16(pkt) != q->id)
		return -EPROTO;
	uint16_t flags = frame_get16(pkt + 2);
	if (!(flags & FLAG_QR) || (flags & OPCODE_MASK))
		return -EPROTO;
	if (flags & FLAG_TC)
		return -EMSGSIZE;
	uint16_t an = frame_get16(pkt + 6);
	if (frame_get16(pkt + 4) != 1 || an > DNS_MAX_RRS)
		return -EPROTO;
	*rcode = flags & 0xf;
	char name[DNS_NAME_TEXT];
	size_t pos;
	if (dns_read_name(pkt, len, DNS_HDR, name, &pos) < 0 || len - pos < 4)
		return -EPROTO;
	if (strcasecmp(name, q->name) != 0 || frame_get16(pkt + pos) != q->qtype ||
	    frame_get16(pkt + pos + 2) != q->qclass)
		return -EPROTO;
	pos += 4;
	char chain[DNS_MAX_CNAMES + 1][DNS_NAME_TEXT];
	size_t nchain = 1;
	memcpy(chain[0], q->name, sizeof chain[0]);
	for (uint16_t i = 0; i < an; i++) {
		if (dns_read_name(pkt, len, pos, name, &pos) < 0 || len - pos < 10)
			return -EPROTO;
		uint16_t type = frame_get16(pkt + pos), cls = frame_get16(pkt + pos + 2);
		uint32_t ttl = frame_get32(pkt + pos + 4);
		size_t rdlen = frame_get16(pkt + pos + 8), rd = pos + 10;
		if (len - rd < rdlen)
			return -EPROTO;
		pos = rd + rdlen;
		bool ours = false;
		for (size_t c = 0; c < nchain && !ours; c++)
			ours = strcasecmp(name, chain[c]) == 0;
		if (!ours || cls != DNS_CLASS_IN)
			continue;
		if (type == DNS_TYPE_CNAME) {
			size_t end;
			if (dns_read_name(pkt, len, rd, name, &end) < 0 || end != rd + rdlen)
				return -EPROTO;
			if (nchain < DNS_MAX_CNAMES + 1)
				memcpy(chain[nchain++], name, sizeof chain[0]);
			continue;
		}
		if (type != q->qtype || (type != DNS_TYPE_A && type != DNS_TYPE_AAAA))
			continue;
		size_t want = type == DNS_TYPE_A ? 4 : 16;
		if (rdlen != want)
			return -EPROTO;
		if (*n == max)
			continue;
		struct dns_rr *r = &out[(*n)++];
		memset(r, 0, sizeof *r);
		r->addr.family = type == DNS_TYPE_A ? 4 : 6;
		memcpy(r->addr.b, pkt + rd, want);
		r->ttl = ttl & 0x80000000u ? 0 : ttl; /* RFC 2181 §8 */
	}
	return 0;
}

size_t dns_filter_answers(const struct policy *p, const char *name, struct dns_rr *rr, size_t n,
			  struct policy_decision *why)
{
	size_t kept = 0;
	for (size_t i = 0; i < n; i++) {
		struct policy_decision d;
		policy_check_answer(p, name, &rr[i].addr, &d);
		if (d.allow)
			rr[kept++] = rr[i];
		else if (why)
			*why = d;
	}
	return kept;
}

int dns_memo_init(struct dns_memo *m, size_t cap)
{
	memset(m, 0, sizeof *m);
	if (cap == 0)
		return -EINVAL;
	m->e = calloc(cap, sizeof *m->e);
	if (!m->e)
		return -ENOMEM;
	m->cap = cap;
	return 0;
}

void dns_memo_free(struct dns_memo *m)
{
	free(m->e);
	memset(m, 0, sizeof *m);
}

static bool same_addr(const struct policy_addr *a, const struct policy_addr *b)
{
	return a->family == b->family && memcmp(a->b, b->b, a->family == 4 ? 4 : 16) == 0;
}

static bool live(const struct dns_memo_entry *e, uint64_t now)
{
	return e->used && e->expires > now;
}

void dns_memo_put(struct dns_memo *m, const char *name, const struct policy_addr *a, uint32_t ttl, uint64_t now)
{
	char n[POLICY_NAME_MAX + 1];
	if (policy_name_normalize(name, n) < 0 || (a->family != 4 && a->family != 6))
		return;
	if (ttl < DNS_MEMO_MIN_TTL)
		ttl = DNS_MEMO_MIN_TTL;
	if (ttl > DNS_MEMO_MAX_TTL)
		ttl = DNS_MEMO_MAX_TTL;
	struct dns_memo_entry *slot = NULL;
	for (size_t i = 0; i < m->cap; i++) {
		struct dns_memo_entry *e = &m->e[i];
		if (e->used && same_addr(&e->addr, a) && strcmp(e->name, n) == 0) {
			slot = e;
			break;
		}
		/* Otherwise the first free or expired slot, else the least
		 * recently used live one. */
		if (!slot || (live(slot, now) && (!live(e, now) || e->used < slot->used)))
			slot = e;
	}
	slot->addr = *a;
	memcpy(slot->name, n, sizeof slot->name);
	slot->expires = now + ttl;
	slot->used = ++m->tick;
}

size_t dns_memo_names(struct dns_memo *m, const struct policy_addr *a, uint64_t now, const char **names, size_t max)
{
	struct dns_memo_entry *picked[DNS_MEMO_MAX_NAMES];
	size_t k = 0;
	uint64_t below = UINT64_MAX;
	if (max > DNS_MEMO_MAX_NAMES)
		max = DNS_MEMO_MAX_NAMES;
	/* Selection by LRU stamp, newest first; max is small. */
	while (k < max) {
		struct dns_memo_entry *best = NULL;
		for (size_t i = 0; i < m->cap; i++) {
			struct dns_memo_entry *e = &m->e[i];
			if (live(e, now) && e->used < below && same_addr(&e->addr, a) && (!best || e->used > best->used))
				best = e;
		}
		if (!best)
			break;
		below = best->used;
		picked[k] = best;
		names[k++] = best->name;
	}
	/* Touch oldest first, so that the newest stays the newest. */
	for (size_t i = k; i-- > 0;)
		picked[i]->used = ++m->tick;
	return k;
}
