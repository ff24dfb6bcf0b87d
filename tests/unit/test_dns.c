/* DNS messages: round trips through our own builder, hostile queries and
 * responses (loops, forward pointers, truncation, huge counts, bad
 * labels), CNAME chains, rebinding filtering and the name memory.  And the
 * upstream resolver (network.dns, --dns) against a small DNS responder
 * thread on 127.0.0.1 (TESTING.md: loopback only). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "netstack/dns.h"
#include "netstack/resolver.h"
#include "tests/lib/unit_suite.h"

struct pkt {
	uint8_t b[1024];
	size_t n;
};

static void p8(struct pkt *p, uint8_t v)
{
	ck_assert_uint_lt(p->n, sizeof p->b);
	p->b[p->n++] = v;
}

static void p16(struct pkt *p, uint16_t v)
{
	p8(p, (uint8_t)(v >> 8));
	p8(p, (uint8_t)v);
}

static void p32(struct pkt *p, uint32_t v)
{
	p16(p, (uint16_t)(v >> 16));
	p16(p, (uint16_t)v);
}

/* Dotted name in wire form, ending with the root label. */
static void pname(struct pkt *p, const char *name)
{
	while (*name) {
		const char *dot = strchr(name, '.');
		size_t l = dot ? (size_t)(dot - name) : strlen(name);
		p8(p, (uint8_t)l);
		for (size_t i = 0; i < l; i++)
			p8(p, (uint8_t)name[i]);
		name += l + (dot ? 1 : 0);
	}
	p8(p, 0);
}

static void header(struct pkt *p, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar)
{
	p->n = 0;
	p16(p, id);
	p16(p, flags);
	p16(p, qd);
	p16(p, an);
	p16(p, ns);
	p16(p, ar);
}

static void query(struct pkt *p, uint16_t id, const char *name, uint16_t type)
{
	header(p, id, 0x0100, 1, 0, 0, 0);
	pname(p, name);
	p16(p, type);
	p16(p, DNS_CLASS_IN);
}

static struct policy_addr A(const char *s)
{
	struct policy_addr a;
	ck_assert_int_eq(policy_addr_parse(s, &a), 0);
	return a;
}

START_TEST(query_reply_round_trip)
{
	struct pkt p;
	struct dns_query q;
	query(&p, 0x1234, "Example.COM", DNS_TYPE_A);
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), 0);
	ck_assert_str_eq(q.name, "Example.COM");
	ck_assert_uint_eq(q.qtype, DNS_TYPE_A);
	ck_assert_uint_eq(q.qend, p.n);
	struct policy_addr addrs[] = { A("1.2.3.4"), A("2001:db8::1"), A("5.6.7.8") };
	uint8_t out[DNS_MAX_MSG];
	size_t n;
	ck_assert_int_eq(dns_build_reply(&q, p.b, DNS_RCODE_NOERROR, addrs, 3, 60, out, sizeof out, &n), 0);
	ck_assert_uint_eq(out[0], 0x12);
	ck_assert_uint_eq(out[1], 0x34);
	ck_assert_uint_eq(out[2], 0x81); /* QR, RD echoed */
	ck_assert_uint_eq(out[3], 0x80); /* RA, NOERROR */
	ck_assert_uint_eq(out[7], 2);
	ck_assert_mem_eq(out + DNS_HDR, p.b + DNS_HDR, p.n - DNS_HDR);
	struct dns_rr rr[4];
	size_t nrr;
	int rcode;
	ck_assert_int_eq(dns_parse_response(out, n, &q, &rcode, rr, 4, &nrr), 0);
	ck_assert_int_eq(rcode, 0);
	ck_assert_uint_eq(nrr, 2);
	ck_assert_mem_eq(rr[0].addr.b, addrs[0].b, 4);
	ck_assert_mem_eq(rr[1].addr.b, addrs[2].b, 4);
	ck_assert_uint_eq(rr[1].ttl, 60);

	query(&p, 7, "v6.example", DNS_TYPE_AAAA);
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), 0);
	ck_assert_int_eq(dns_build_reply(&q, p.b, 0, addrs, 3, 5, out, sizeof out, &n), 0);
	ck_assert_int_eq(dns_parse_response(out, n, &q, &rcode, rr, 4, &nrr), 0);
	ck_assert_uint_eq(nrr, 1);
	ck_assert_uint_eq(rr[0].addr.family, 6);
	ck_assert_mem_eq(rr[0].addr.b, addrs[1].b, 16);
}
END_TEST

START_TEST(error_replies)
{
	struct pkt p;
	struct dns_query q;
	uint8_t out[DNS_MAX_MSG];
	size_t n;
	struct policy_addr a = A("1.2.3.4");
	query(&p, 9, "denied.example", DNS_TYPE_A);
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), 0);
	static const int codes[] = { DNS_RCODE_NXDOMAIN, DNS_RCODE_REFUSED, DNS_RCODE_SERVFAIL };
	for (size_t i = 0; i < 3; i++) {
		ck_assert_int_eq(dns_build_reply(&q, p.b, codes[i], &a, 1, 60, out, sizeof out, &n), 0);
		ck_assert_uint_eq(n, p.n);
		ck_assert_uint_eq(out[3] & 0xf, (unsigned)codes[i]);
		ck_assert_uint_eq(out[5], 1); /* question echoed */
		ck_assert_uint_eq(out[7], 0); /* no answers */
		ck_assert_mem_eq(out + DNS_HDR, p.b + DNS_HDR, p.n - DNS_HDR);
	}
	ck_assert_int_eq(dns_build_reply(&q, p.b, 16, NULL, 0, 0, out, sizeof out, &n), -EINVAL);
	ck_assert_int_eq(dns_build_reply(&q, p.b, 0, NULL, 0, 0, out, p.n - 1, &n), -ENOSPC);
	/* answers that do not fit are left out, never overflow */
	struct policy_addr many[40];
	for (size_t i = 0; i < 40; i++)
		many[i] = a;
	ck_assert_int_eq(dns_build_reply(&q, p.b, 0, many, 40, 60, out, p.n + 16 * 2 + 5, &n), 0);
	ck_assert_uint_eq(out[7], 2);
	ck_assert_int_eq(dns_build_reply(&q, p.b, 0, many, 40, 60, out, sizeof out, &n), 0);
	ck_assert_uint_eq(out[7], DNS_MAX_ANSWERS);
	/* a malformed query is answered without a question */
	header(&p, 0x4242, 0x0100, 2, 0, 0, 0);
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), -EPROTO);
	ck_assert_int_eq(dns_build_reply(&q, p.b, DNS_RCODE_FORMERR, NULL, 0, 0, out, sizeof out, &n), 0);
	ck_assert_uint_eq(n, DNS_HDR);
	ck_assert_uint_eq(out[0], 0x42);
	ck_assert_uint_eq(out[5], 0);
}
END_TEST

START_TEST(hostile_queries)
{
	struct pkt p;
	struct dns_query q;
	query(&p, 1, "a.b", DNS_TYPE_A);
	for (size_t cut = 0; cut < p.n; cut++) {
		int rc = dns_parse_query(p.b, cut, &q);
		ck_assert_msg(rc == (cut < DNS_HDR ? -EBADMSG : -EPROTO), "cut %zu: %d", cut, rc);
	}
	p.b[2] |= 0x80; /* a response: never answered */
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), -EBADMSG);
	p.b[2] = 0x10; /* opcode 2 */
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), -ENOTSUP);
	ck_assert_uint_eq(q.id, 1);

	static const uint16_t counts[][4] = { { 0, 0, 0, 0 }, { 2, 0, 0, 0 }, { 1, 1, 0, 0 }, { 1, 0, 1, 0 },
					      { 0xffff, 0, 0, 0 } };
	for (size_t i = 0; i < 5; i++) {
		header(&p, 1, 0, counts[i][0], counts[i][1], counts[i][2], counts[i][3]);
		pname(&p, "x");
		p16(&p, 1);
		p16(&p, 1);
		ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), -EPROTO);
	}
	/* EDNS OPT in the additional section is tolerated */
	header(&p, 1, 0, 1, 0, 0, 1);
	pname(&p, "x");
	p16(&p, 1);
	p16(&p, 1);
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), 0);

	query(&p, 1, "x", DNS_TYPE_A);
	p.b[p.n - 1] = 3; /* class CH */
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), -ENOTSUP);

	query(&p, 1, "x", DNS_TYPE_A);
	memset(p.b + p.n, 0, DNS_MAX_MSG + 1 - p.n);
	ck_assert_int_eq(dns_parse_query(p.b, DNS_MAX_MSG + 1, &q), -EMSGSIZE);
	ck_assert_int_eq(dns_parse_query(p.b, DNS_MAX_MSG, &q), 0);

	/* pointer in the question to itself, and forward */
	header(&p, 1, 0, 1, 0, 0, 0);
	p16(&p, 0xc00c);
	p32(&p, 0x00010001);
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), -EPROTO);
	header(&p, 1, 0, 1, 0, 0, 0);
	p16(&p, 0xc00e);
	pname(&p, "x");
	p32(&p, 0x00010001);
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), -EPROTO);
	/* pointer into the header: backwards, but to garbage */
	header(&p, 0, 0, 1, 0, 0, 0);
	p16(&p, 0xc000);
	p32(&p, 0x00010001);
	ck_assert_int_eq(dns_parse_query(p.b, p.n, &q), -EPROTO);
}
END_TEST

START_TEST(names_and_labels)
{
	struct pkt p;
	char out[DNS_NAME_TEXT];
	size_t next;
	/* label types 0x40 and 0x80, a 63-byte label, a '.' inside a label */
	header(&p, 0, 0, 0, 0, 0, 0);
	p8(&p, 0x40);
	ck_assert_int_eq(dns_read_name(p.b, p.n, DNS_HDR, out, &next), -EPROTO);
	p.b[DNS_HDR] = 0x80;
	ck_assert_int_eq(dns_read_name(p.b, p.n, DNS_HDR, out, &next), -EPROTO);
	header(&p, 0, 0, 0, 0, 0, 0);
	p8(&p, 63);
	for (int i = 0; i < 63; i++)
		p8(&p, 'a');
	p8(&p, 0);
	ck_assert_int_eq(dns_read_name(p.b, p.n, DNS_HDR, out, &next), 0);
	ck_assert_uint_eq(strlen(out), 63);
	ck_assert_uint_eq(next, p.n);
	static const uint8_t bad[] = { '.', ' ', 0, 0x7f, 0xc3 };
	for (size_t i = 0; i < sizeof bad; i++) {
		header(&p, 0, 0, 0, 0, 0, 0);
		p8(&p, 3);
		p8(&p, 'a');
		p8(&p, bad[i]);
		p8(&p, 'b');
		p8(&p, 0);
		ck_assert_int_eq(dns_read_name(p.b, p.n, DNS_HDR, out, &next), -EPROTO);
	}
	/* 255 bytes on the wire is the limit: 4 labels of 63 = 253 + root */
	header(&p, 0, 0, 0, 0, 0, 0);
	for (int l = 0; l < 4; l++) {
		p8(&p, l == 3 ? 61 : 63);
		for (int i = 0; i < (l == 3 ? 61 : 63); i++)
			p8(&p, 'x');
	}
	p8(&p, 0);
	ck_assert_int_eq(dns_read_name(p.b, p.n, DNS_HDR, out, &next), 0);
	ck_assert_uint_eq(strlen(out), 253);
	p.b[DNS_HDR + 3 * 64] = 62;
	memmove(p.b + DNS_HDR + 3 * 64 + 63, p.b + DNS_HDR + 3 * 64 + 62, 2);
	p.b[DNS_HDR + 3 * 64 + 62] = 'x';
	p.n++;
	ck_assert_int_eq(dns_read_name(p.b, p.n, DNS_HDR, out, &next), -EPROTO);
	/* the root */
	header(&p, 0, 0, 0, 0, 0, 0);
	p8(&p, 0);
	ck_assert_int_eq(dns_read_name(p.b, p.n, DNS_HDR, out, &next), 0);
	ck_assert_str_eq(out, "");
	ck_assert_int_eq(dns_read_name(p.b, p.n, p.n, out, &next), -EPROTO);
}
END_TEST

START_TEST(pointer_chains)
{
	struct pkt p;
	char out[DNS_NAME_TEXT];
	size_t next;
	/* "b" at 12, then "a" + pointer to 12 at 15 */
	header(&p, 0, 0, 0, 0, 0, 0);
	pname(&p, "b");
	size_t at = p.n;
	p8(&p, 1);
	p8(&p, 'a');
	p16(&p, 0xc00c);
	ck_assert_int_eq(dns_read_name(p.b, p.n, at, out, &next), 0);
	ck_assert_str_eq(out, "a.b");
	ck_assert_uint_eq(next, p.n);
	/* a loop: "a" + pointer back to its own start */
	header(&p, 0, 0, 0, 0, 0, 0);
	p8(&p, 1);
	p8(&p, 'a');
	p16(&p, 0xc00c);
	ck_assert_int_eq(dns_read_name(p.b, p.n, DNS_HDR, out, &next), -EPROTO);
	/* a two-step loop: 12 -> 14 -> 12 */
	header(&p, 0, 0, 0, 0, 0, 0);
	p16(&p, 0xc00e);
	p16(&p, 0xc00c);
	ck_assert_int_eq(dns_read_name(p.b, p.n, DNS_HDR, out, &next), -EPROTO);
	ck_assert_int_eq(dns_read_name(p.b, p.n, 14, out, &next), -EPROTO);
	/* truncated pointer */
	header(&p, 0, 0, 0, 0, 0, 0);
	p8(&p, 0xc0);
	ck_assert_int_eq(dns_read_name(p.b, p.n, DNS_HDR, out, &next), -EPROTO);
	/* a backward chain of DNS_MAX_HOPS pointers is fine, one more is not */
	for (unsigned hops = DNS_MAX_HOPS; hops <= DNS_MAX_HOPS + 1; hops++) {
		header(&p, 0, 0, 0, 0, 0, 0);
		pname(&p, "z");
		size_t prev = DNS_HDR;
		for (unsigned i = 0; i < hops; i++) {
			size_t here = p.n;
			p16(&p, (uint16_t)(0xc000 | prev));
			prev = here;
		}
		int rc = dns_read_name(p.b, p.n, prev, out, &next);
		ck_assert_int_eq(rc, hops <= DNS_MAX_HOPS ? 0 : -EPROTO);
	}
	/* a pointer chain that builds a name longer than 255 bytes */
	header(&p, 0, 0, 0, 0, 0, 0);
	size_t prev = 0;
	for (int l = 0; l < 6; l++) {
		size_t here = p.n;
		p8(&p, 50);
		for (int i = 0; i < 50; i++)
			p8(&p, 'q');
		if (prev)
			p16(&p, (uint16_t)(0xc000 | prev));
		else
			p8(&p, 0);
		prev = here;
	}
	ck_assert_int_eq(dns_read_name(p.b, p.n, prev, out, &next), -EPROTO);
}
END_TEST

/* Response to q with the question, then answers appended by the caller. */
static void response(struct pkt *p, const struct dns_query *q, const char *qname, uint16_t an)
{
	header(p, q->id, 0x8180, 1, an, 0, 0);
	pname(p, qname);
	p16(p, q->qtype);
	p16(p, DNS_CLASS_IN);
}

static void rr_a(struct pkt *p, uint16_t name_ptr, uint32_t ttl, const uint8_t *ip)
{
	p16(p, name_ptr);
	p16(p, DNS_TYPE_A);
	p16(p, DNS_CLASS_IN);
	p32(p, ttl);
	p16(p, 4);
	for (int i = 0; i < 4; i++)
		p8(p, ip[i]);
}

START_TEST(responses)
{
	struct pkt qp, p;
	struct dns_query q;
	struct dns_rr rr[8];
	size_t n;
	int rcode;
	query(&qp, 77, "www.x.com", DNS_TYPE_A);
	ck_assert_int_eq(dns_parse_query(qp.b, qp.n, &q), 0);

	/* CNAME chain, an unrelated record, a record of another type */
	response(&p, &q, "WWW.X.COM", 4);
	p16(&p, 0xc00c);
	p16(&p, DNS_TYPE_CNAME);
	p16(&p, DNS_CLASS_IN);
	p32(&p, 30);
	size_t rdl = p.n;
	p16(&p, 0);
	size_t cname_at = p.n;
	pname(&p, "cdn.y.net");
	p.b[rdl + 1] = (uint8_t)(p.n - cname_at);
	rr_a(&p, (uint16_t)(0xc000 | cname_at), 0x80000000u, (const uint8_t[]){ 9, 9, 9, 9 });
	size_t other = p.n;
	pname(&p, "other.com");
	p16(&p, DNS_TYPE_A);
	p16(&p, DNS_CLASS_IN);
	p32(&p, 5);
	p16(&p, 4);
	p32(&p, 0x06060606);
	rr_a(&p, (uint16_t)(0xc000 | other), 5, (const uint8_t[]){ 7, 7, 7, 7 });
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(rr[0].addr.b[0], 9);
	ck_assert_uint_eq(rr[0].ttl, 0);

	/* every truncation of it fails cleanly */
	for (size_t cut = 0; cut < p.n; cut++)
		ck_assert_int_ne(dns_parse_response(p.b, cut, &q, &rcode, rr, 8, &n), 0);

	/* huge answer count */
	response(&p, &q, "www.x.com", DNS_MAX_RRS + 1);
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), -EPROTO);
	/* more answers than room: the rest are ignored */
	response(&p, &q, "www.x.com", 10);
	for (int i = 0; i < 10; i++)
		rr_a(&p, 0xc00c, 60, (const uint8_t[]){ 8, 8, 8, (uint8_t)i });
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), 0);
	ck_assert_uint_eq(n, 8);
	ck_assert_uint_eq(rr[7].addr.b[3], 7);
	/* count larger than the records present */
	p.b[7] = 11;
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), -EPROTO);
	/* A with a 5-byte rdata */
	response(&p, &q, "www.x.com", 1);
	p16(&p, 0xc00c);
	p16(&p, DNS_TYPE_A);
	p16(&p, DNS_CLASS_IN);
	p32(&p, 1);
	p16(&p, 5);
	p32(&p, 0);
	p8(&p, 0);
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), -EPROTO);
	/* rdlen past the end */
	p.b[p.n - 6] = 0xff;
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), -EPROTO);
	/* wrong id, not a response, truncated, other question, NXDOMAIN */
	response(&p, &q, "www.x.com", 0);
	p.b[1] ^= 1;
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), -EPROTO);
	p.b[1] ^= 1;
	p.b[2] &= 0x7f;
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), -EPROTO);
	p.b[2] |= 0x82;
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), -EMSGSIZE);
	response(&p, &q, "www.y.com", 0);
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), -EPROTO);
	response(&p, &q, "www.x.com", 0);
	p.b[3] = 0x83;
	ck_assert_int_eq(dns_parse_response(p.b, p.n, &q, &rcode, rr, 8, &n), 0);
	ck_assert_int_eq(rcode, DNS_RCODE_NXDOMAIN);
	ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(filter_rebinding)
{
	struct policy p;
	policy_init(&p, POLICY_MODE_PUBLIC);
	struct dns_rr rr[] = {
		{ A("8.8.8.8"), 60 }, { A("127.0.0.1"), 60 }, { A("1.1.1.1"), 60 }, { A("10.0.0.1"), 60 },
	};
	struct policy_decision why = { 0 };
	ck_assert_uint_eq(dns_filter_answers(&p, "example.com", rr, 4, &why), 2);
	ck_assert_uint_eq(rr[0].addr.b[0], 8);
	ck_assert_uint_eq(rr[1].addr.b[0], 1);
	ck_assert_str_eq(why.rule, "class:private");
	struct dns_rr all_bad[] = { { A("::1"), 1 } };
	ck_assert_uint_eq(dns_filter_answers(&p, "example.com", all_bad, 1, NULL), 0);
	policy_free(&p);
}
END_TEST

/* AAAA answers go through the same filter: every IPv6 form that reaches
 * a blocked IPv4 address, or a blocked IPv6 range, is dropped; global
 * unicast and forms embedding a public IPv4 address are kept. */
START_TEST(filter_rebinding_v6)
{
	static const struct {
		const char *addr;
		bool kept;
	} t[] = {
		{ "2606:4700::1111", true },   { "64:ff9b::808:808", true },  { "2002:808:808::1", true },
		{ "::ffff:8.8.8.8", true },    { "::1", false },              { "::", false },
		{ "::ffff:10.0.0.1", false },  { "::ffff:127.0.0.1", false }, { "64:ff9b::a9fe:a9fe", false },
		{ "64:ff9b::7f00:1", false },  { "64:ff9b:1::808:808", false }, { "2002:c0a8:101::1", false },
		{ "::10.0.0.1", false },       { "::8.8.8.8", false },        { "fd00::1", false },
		{ "fe80::1", false },          { "fec0::1", false },          { "ff02::1", false },
		{ "2001::1", false },          { "2001:db8::1", false },      { "100::1", false },
		{ "2001:2::1", false },        { "2001:10::1", false },       { "2001:20::1", false },
	};
	struct policy p;
	policy_init(&p, POLICY_MODE_PUBLIC);
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct dns_rr rr[] = { { A("1.1.1.1"), 60 }, { A(t[i].addr), 60 } };
		struct policy_decision why = { .rule = "none" };
		size_t kept = dns_filter_answers(&p, "example.com", rr, 2, &why);
		ck_assert_msg(kept == (t[i].kept ? 2u : 1u), "%s: kept %zu", t[i].addr, kept);
		ck_assert_msg(t[i].kept || strncmp(why.rule, "class:", 6) == 0, "%s: %s", t[i].addr, why.rule);
	}
	policy_free(&p);

	/* allowlist: an AAAA answer for a name the list allows is kept, one for an
	 * address rule's range kept whatever the name, anything else dropped */
	policy_init(&p, POLICY_MODE_ALLOWLIST);
	char err[200];
	ck_assert_int_eq(policy_add_rule(&p, "github.com", err, sizeof err), 0);
	ck_assert_int_eq(policy_add_rule(&p, "[2606:50c0::/32]:443", err, sizeof err), 0);
	struct dns_rr rr[] = { { A("2a01:4f8::1"), 60 }, { A("fd00::1"), 60 } };
	ck_assert_uint_eq(dns_filter_answers(&p, "github.com", rr, 2, NULL), 1);
	ck_assert_uint_eq(rr[0].addr.b[1], 0x01);
	struct dns_rr other[] = { { A("2a01:4f8::1"), 60 }, { A("2606:50c0::7"), 60 } };
	struct policy_decision why = { 0 };
	ck_assert_uint_eq(dns_filter_answers(&p, "example.com", other, 2, &why), 1);
	ck_assert_uint_eq(other[0].addr.b[1], 0x06);
	ck_assert_str_eq(why.rule, "allowlist");
	policy_free(&p);
}
END_TEST

START_TEST(memo)
{
	struct dns_memo m;
	const char *names[DNS_MEMO_MAX_NAMES + 4];
	struct policy_addr a = A("1.2.3.4"), b = A("5.6.7.8"), c = A("2001:db8::9");
	ck_assert_int_eq(dns_memo_init(&m, 0), -EINVAL);
	ck_assert_int_eq(dns_memo_init(&m, 3), 0);
	dns_memo_put(&m, "WWW.Example.com.", &a, 10, 1000);
	ck_assert_uint_eq(dns_memo_names(&m, &a, 1000, names, 4), 1);
	ck_assert_str_eq(names[0], "www.example.com");
	/* TTL is raised to the minimum */
	ck_assert_uint_eq(dns_memo_names(&m, &a, 1000 + DNS_MEMO_MIN_TTL - 1, names, 4), 1);
	ck_assert_uint_eq(dns_memo_names(&m, &a, 1000 + DNS_MEMO_MIN_TTL, names, 4), 0);
	/* two names for one address, newest first; refresh does not duplicate */
	dns_memo_put(&m, "one.example", &a, 600, 2000);
	dns_memo_put(&m, "two.example", &a, 600, 2001);
	dns_memo_put(&m, "two.example", &a, 600, 2002);
	ck_assert_uint_eq(dns_memo_names(&m, &a, 2003, names, 4), 2);
	ck_assert_str_eq(names[0], "two.example");
	ck_assert_str_eq(names[1], "one.example");
	ck_assert_uint_eq(dns_memo_names(&m, &a, 2003, names, 1), 1);
	/* full: the least recently used pair goes; the last lookup touched
	 * only two.example, so one.example is the oldest */
	dns_memo_put(&m, "b.example", &b, 600, 2004);
	dns_memo_put(&m, "c.example", &c, 600, 2005);
	ck_assert_uint_eq(dns_memo_names(&m, &a, 2006, names, 4), 1);
	ck_assert_str_eq(names[0], "two.example");
	ck_assert_uint_eq(dns_memo_names(&m, &b, 2006, names, 4), 1);
	ck_assert_uint_eq(dns_memo_names(&m, &c, 2006, names, 4), 1);
	ck_assert_str_eq(names[0], "c.example");
	/* invalid names and addresses are ignored; max is capped */
	struct policy_addr junk = { .family = 9 };
	dns_memo_put(&m, "a..b", &b, 600, 2007);
	dns_memo_put(&m, "ok.example", &junk, 600, 2007);
	ck_assert_uint_eq(dns_memo_names(&m, &b, 2007, names, 4), 1);
	ck_assert_str_eq(names[0], "b.example");
	dns_memo_free(&m);

	ck_assert_int_eq(dns_memo_init(&m, 32), 0);
	char n[32];
	for (int i = 0; i < 12; i++) {
		n[0] = (char)('a' + i);
		strcpy(n + 1, ".example");
		dns_memo_put(&m, n, &a, 600, 3000 + (uint64_t)i);
	}
	ck_assert_uint_eq(dns_memo_names(&m, &a, 3100, names, DNS_MEMO_MAX_NAMES + 4), DNS_MEMO_MAX_NAMES);
	ck_assert_str_eq(names[0], "l.example");
	dns_memo_free(&m);
}
END_TEST

START_TEST(build_query)
{
	uint8_t m[DNS_MAX_MSG];
	size_t n;
	struct dns_query q;
	ck_assert_int_eq(dns_build_query(0xbeef, "www.Example.com", DNS_TYPE_AAAA, m, sizeof m, &n), 0);
	ck_assert_int_eq(dns_parse_query(m, n, &q), 0);
	ck_assert_uint_eq(q.id, 0xbeef);
	ck_assert_uint_eq(q.flags, 0x0100); /* RD */
	ck_assert_uint_eq(q.qtype, DNS_TYPE_AAAA);
	ck_assert_str_eq(q.name, "www.Example.com");
	ck_assert_uint_eq(q.qend, n);
	ck_assert_int_eq(dns_build_query(1, "", DNS_TYPE_A, m, sizeof m, &n), -EINVAL);
	ck_assert_int_eq(dns_build_query(1, "a..b", DNS_TYPE_A, m, sizeof m, &n), -EINVAL);
	ck_assert_int_eq(dns_build_query(1, "a.", DNS_TYPE_A, m, sizeof m, &n), -EINVAL);
	ck_assert_int_eq(dns_build_query(1, "a b.c", DNS_TYPE_A, m, sizeof m, &n), -EINVAL);
	char big[300];
	memset(big, 'a', 64);
	strcpy(big + 64, ".com");
	ck_assert_int_eq(dns_build_query(1, big, DNS_TYPE_A, m, sizeof m, &n), -EINVAL);
	for (int i = 0; i < 254; i++)
		big[i] = i % 2 ? '.' : 'a';
	big[253] = '\0'; /* 253 bytes: the longest name */
	ck_assert_int_eq(dns_build_query(1, big, DNS_TYPE_A, m, sizeof m, &n), 0);
	ck_assert_int_eq(dns_parse_query(m, n, &q), 0);
	ck_assert_str_eq(q.name, big);
	ck_assert_int_eq(dns_build_query(1, big, DNS_TYPE_A, m, 100, &n), -ENOSPC);
	big[253] = 'a';
	big[254] = '\0';
	ck_assert_int_eq(dns_build_query(1, big, DNS_TYPE_A, m, sizeof m, &n), -EINVAL);
}
END_TEST

START_TEST(server_specs)
{
	struct resolver_server s;
	char err[256];
	const struct sockaddr_in *v4 = (const void *)&s.sa;
	const struct sockaddr_in6 *v6 = (const void *)&s.sa;
	ck_assert_int_eq(resolver_server_parse("10.0.0.53", &s, err, sizeof err), 0);
	ck_assert_int_eq(v4->sin_family, AF_INET);
	ck_assert_uint_eq(ntohs(v4->sin_port), 53);
	ck_assert_int_eq(resolver_server_parse("127.0.0.1:5353", &s, err, sizeof err), 0);
	ck_assert_uint_eq(ntohs(v4->sin_port), 5353);
	ck_assert_int_eq(resolver_server_parse("fd00::53", &s, err, sizeof err), 0);
	ck_assert_int_eq(v6->sin6_family, AF_INET6);
	ck_assert_uint_eq(ntohs(v6->sin6_port), 53);
	ck_assert_int_eq(resolver_server_parse("[fd00::53]:5353", &s, err, sizeof err), 0);
	ck_assert_uint_eq(ntohs(v6->sin6_port), 5353);
	ck_assert_int_eq(resolver_server_parse("[::1]", &s, err, sizeof err), 0);
	static const char *const bad[] = {
		"", "dns.example", "10.0.0.53:", "10.0.0.53:0", "10.0.0.53:65536", "10.0.0.53:053",
		"10.0.0.53:x", "[10.0.0.53]:53", "[fd00::53", "[fd00::53]53", "0.0.0.0", "224.0.0.251",
		"::", "ff02::fb", "255.255.255.255", "1.2.3", "10.0.0.53:53:53x",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		ck_assert_msg(resolver_server_parse(bad[i], &s, err, sizeof err) == -EINVAL, "%s", bad[i]);
		ck_assert_msg(err[0] != '\0', "%s", bad[i]);
	}
	struct resolver_upstream u = { .n = 0 };
	for (unsigned i = 0; i < RESOLVER_MAX_SERVERS; i++)
		ck_assert_int_eq(resolver_upstream_add(&u, "127.0.0.1", err, sizeof err), 0);
	ck_assert_int_eq(resolver_upstream_add(&u, "127.0.0.1", err, sizeof err), -ENOSPC);
	ck_assert_uint_eq(u.n, RESOLVER_MAX_SERVERS);
}
END_TEST

/* ---- a DNS responder on 127.0.0.1 ---- */

static uint64_t ms_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

enum rmode {
	R_ANSWER,      /* 198.51.100.7 (A) or 2001:db8::7 (AAAA) */
	R_NXDOMAIN,
	R_SERVFAIL,
	R_SILENT,      /* never answers */
	R_WRONG_ID,    /* a reply with another id, then the right one */
	R_WRONG_Q,     /* a reply for another name, then the right one */
	R_ONLY_WRONG,  /* only replies with another id */
	R_GARBAGE,     /* junk bytes, then the right answer */
	R_TRUNC,       /* TC over UDP; the answer over TCP */
	R_OTHER_PORT,  /* the right answer, but from another port */
	R_FLOOD,       /* replies with another id, without a pause, for 3 s */
};

struct responder {
	enum rmode mode;
	int udp, tcp, other;
	uint16_t port;
	atomic_int stop;
	atomic_int udp_queries, tcp_queries;
	pthread_t t;
};

static size_t answer(const uint8_t *qm, size_t qlen, uint8_t *out, size_t outlen, int rcode)
{
	struct dns_query q;
	struct policy_addr a[2] = { A("198.51.100.7"), A("2001:db8::7") };
	size_t n;
	ck_assert_int_eq(dns_parse_query(qm, qlen, &q), 0);
	ck_assert_int_eq(dns_build_reply(&q, qm, rcode, a, 2, 120, out, outlen, &n), 0);
	return n;
}

static void serve_tcp(struct responder *r)
{
	int c = accept(r->tcp, NULL, NULL);
	uint8_t m[600], out[DNS_MAX_MSG + 2];
	struct timeval tv = { .tv_sec = 2 };
	size_t got = 0;
	ck_assert_int_ge(c, 0);
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	while (got < 2 || got < 2 + ((size_t)m[0] << 8 | m[1])) {
		ssize_t more = recv(c, m + got, sizeof m - got, 0);
		ck_assert_int_gt(more, 0);
		got += (size_t)more;
	}
	atomic_fetch_add(&r->tcp_queries, 1);
	size_t n = answer(m + 2, got - 2, out + 2, sizeof out - 2, DNS_RCODE_NOERROR);
	out[0] = (uint8_t)(n >> 8);
	out[1] = (uint8_t)n;
	ck_assert_int_eq(send(c, out, n + 2, MSG_NOSIGNAL), (ssize_t)(n + 2));
	close(c);
}

/* Forgeries to the asker's port back to back, so that its socket never
 * runs dry, until stopped or 3 s passed; a new question moves the target. */
static void flood(struct responder *r, const uint8_t *msg, size_t n, struct sockaddr_in *to,
		  socklen_t tl)
{
	struct mmsghdr v[32];
	struct iovec io = { .iov_base = (void *)msg, .iov_len = n };
	uint64_t end = ms_now() + 3000;
	while (!atomic_load(&r->stop) && ms_now() < end) {
		uint8_t q[DNS_MAX_MSG];
		struct sockaddr_in from;
		socklen_t fl = sizeof from;
		if (recvfrom(r->udp, q, sizeof q, MSG_DONTWAIT, (struct sockaddr *)&from, &fl) > 0) {
			atomic_fetch_add(&r->udp_queries, 1);
			*to = from;
			tl = fl;
		}
		for (size_t i = 0; i < 32; i++)
			v[i] = (struct mmsghdr){ .msg_hdr = { .msg_name = to, .msg_namelen = tl,
							      .msg_iov = &io, .msg_iovlen = 1 } };
		sendmmsg(r->udp, v, 32, 0);
	}
}

static void *respond(void *arg)
{
	struct responder *r = arg;
	while (!atomic_load(&r->stop)) {
		struct pollfd p[2] = { { .fd = r->udp, .events = POLLIN }, { .fd = r->tcp, .events = POLLIN } };
		if (poll(p, 2, 20) <= 0)
			continue;
		if (p[1].revents & POLLIN)
			serve_tcp(r);
		if (!(p[0].revents & POLLIN))
			continue;
		uint8_t m[DNS_MAX_MSG], out[DNS_MAX_MSG];
		struct sockaddr_in from;
		socklen_t fl = sizeof from;
		ssize_t got = recvfrom(r->udp, m, sizeof m, 0, (struct sockaddr *)&from, &fl);
		if (got <= 0)
			continue;
		atomic_fetch_add(&r->udp_queries, 1);
		const struct sockaddr *to = (const struct sockaddr *)&from;
		size_t n;
		switch (r->mode) {
		case R_SILENT:
			break;
		case R_NXDOMAIN:
		case R_SERVFAIL:
			n = answer(m, (size_t)got, out, sizeof out,
				   r->mode == R_NXDOMAIN ? DNS_RCODE_NXDOMAIN : DNS_RCODE_SERVFAIL);
			sendto(r->udp, out, n, 0, to, fl);
			break;
		case R_WRONG_ID:
		case R_ONLY_WRONG:
			n = answer(m, (size_t)got, out, sizeof out, DNS_RCODE_NOERROR);
			out[1] ^= 1;
			sendto(r->udp, out, n, 0, to, fl);
			if (r->mode == R_ONLY_WRONG)
				break;
			out[1] ^= 1;
			sendto(r->udp, out, n, 0, to, fl);
			break;
		case R_WRONG_Q:
			n = answer(m, (size_t)got, out, sizeof out, DNS_RCODE_NOERROR);
			out[DNS_HDR + 1] = 'q'; /* first letter of the name */
			sendto(r->udp, out, n, 0, to, fl);
			n = answer(m, (size_t)got, out, sizeof out, DNS_RCODE_NOERROR);
			sendto(r->udp, out, n, 0, to, fl);
			break;
		case R_GARBAGE: {
			static const uint8_t junk[] = { 0xff, 0xff, 0xc0, 0x0c, 1, 2, 3 };
			sendto(r->udp, junk, sizeof junk, 0, to, fl);
			memcpy(out, m, 2); /* the id, then nothing that parses */
			memset(out + 2, 0xc0, 40);
			sendto(r->udp, out, 42, 0, to, fl);
			n = answer(m, (size_t)got, out, sizeof out, DNS_RCODE_NOERROR);
			sendto(r->udp, out, n, 0, to, fl);
			break;
		}
		case R_TRUNC:
			n = answer(m, (size_t)got, out, sizeof out, DNS_RCODE_NOERROR);
			out[2] |= 0x02; /* TC */
			sendto(r->udp, out, n, 0, to, fl);
			break;
		case R_OTHER_PORT:
			n = answer(m, (size_t)got, out, sizeof out, DNS_RCODE_NOERROR);
			sendto(r->other, out, n, 0, to, fl);
			break;
		case R_FLOOD:
			n = answer(m, (size_t)got, out, sizeof out, DNS_RCODE_NOERROR);
			out[1] ^= 1;
			flood(r, out, n, &from, fl);
			break;
		case R_ANSWER:
			n = answer(m, (size_t)got, out, sizeof out, DNS_RCODE_NOERROR);
			sendto(r->udp, out, n, 0, to, fl);
			break;
		}
	}
	return NULL;
}

static int lo_socket(int type, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1, fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	return fd;
}

static void responder_start(struct responder *r, enum rmode mode)
{
	memset(r, 0, sizeof *r);
	r->mode = mode;
	r->udp = lo_socket(SOCK_DGRAM, 0);
	struct sockaddr_in a;
	socklen_t al = sizeof a;
	ck_assert_int_eq(getsockname(r->udp, (struct sockaddr *)&a, &al), 0);
	r->port = ntohs(a.sin_port);
	r->tcp = lo_socket(SOCK_STREAM, r->port);
	ck_assert_int_eq(listen(r->tcp, 4), 0);
	r->other = lo_socket(SOCK_DGRAM, 0);
	ck_assert_int_eq(pthread_create(&r->t, NULL, respond, r), 0);
}

static void responder_stop(struct responder *r)
{
	atomic_store(&r->stop, 1);
	pthread_join(r->t, NULL);
	close(r->udp);
	close(r->tcp);
	close(r->other);
}

static void add_server(struct resolver_upstream *u, uint16_t port)
{
	char spec[32], err[256];
	snprintf(spec, sizeof spec, "127.0.0.1:%u", port);
	ck_assert_int_eq(resolver_upstream_add(u, spec, err, sizeof err), 0);
}

/* Ask name (A) of one responder in mode; returns the resolver's result. */
static int ask_one(enum rmode mode, uint16_t qtype, struct dns_rr *rr, size_t *n, struct responder *r)
{
	struct resolver_upstream u = { .try_ms = 300 };
	responder_start(r, mode);
	add_server(&u, r->port);
	int rc = resolver_upstream_resolve(&u, "www.example.com", qtype, rr, DNS_MAX_ANSWERS, n);
	responder_stop(r);
	return rc;
}

START_TEST(upstream_answers)
{
	struct responder r;
	struct dns_rr rr[DNS_MAX_ANSWERS];
	size_t n = 99;
	ck_assert_int_eq(ask_one(R_ANSWER, DNS_TYPE_A, rr, &n, &r), DNS_RCODE_NOERROR);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(rr[0].addr.family, 4);
	ck_assert_mem_eq(rr[0].addr.b, ((uint8_t[]){ 198, 51, 100, 7 }), 4);
	ck_assert_uint_eq(rr[0].ttl, 120);
	ck_assert_int_eq(ask_one(R_ANSWER, DNS_TYPE_AAAA, rr, &n, &r), DNS_RCODE_NOERROR);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(rr[0].addr.family, 6);
	ck_assert_int_eq(ask_one(R_NXDOMAIN, DNS_TYPE_A, rr, &n, &r), DNS_RCODE_NXDOMAIN);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(ask_one(R_SERVFAIL, DNS_TYPE_A, rr, &n, &r), -EIO);
	ck_assert_uint_eq(atomic_load(&r.udp_queries), 1); /* a refusal is not retried */
	struct resolver_upstream u = { .try_ms = 300 };
	add_server(&u, 53);
	ck_assert_int_eq(resolver_upstream_resolve(&u, "www.example.com", 15, rr, 4, &n), -EINVAL);
	ck_assert_int_eq(resolver_upstream_resolve(&u, "", DNS_TYPE_A, rr, 4, &n), -EINVAL);
	ck_assert_int_eq(resolver_upstream_resolve(&u, "a..b", DNS_TYPE_A, rr, 4, &n), -EINVAL);
}
END_TEST

START_TEST(upstream_forgeries)
{
	struct responder r;
	struct dns_rr rr[DNS_MAX_ANSWERS];
	size_t n;
	/* Wrong id, wrong question, junk: dropped, the real answer taken. */
	ck_assert_int_eq(ask_one(R_WRONG_ID, DNS_TYPE_A, rr, &n, &r), DNS_RCODE_NOERROR);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(ask_one(R_WRONG_Q, DNS_TYPE_A, rr, &n, &r), DNS_RCODE_NOERROR);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(ask_one(R_GARBAGE, DNS_TYPE_A, rr, &n, &r), DNS_RCODE_NOERROR);
	ck_assert_uint_eq(n, 1);
	/* Only forgeries: a timeout after the retry. */
	uint64_t t0 = ms_now();
	ck_assert_int_eq(ask_one(R_ONLY_WRONG, DNS_TYPE_A, rr, &n, &r), -ETIMEDOUT);
	ck_assert_uint_eq(n, 0);
	ck_assert_uint_eq(atomic_load(&r.udp_queries), RESOLVER_ROUNDS);
	ck_assert_uint_ge(ms_now() - t0, 2 * 300 - 20);
	/* The right answer from another port of the server's address. */
	ck_assert_int_eq(ask_one(R_OTHER_PORT, DNS_TYPE_A, rr, &n, &r), -ETIMEDOUT);
	/* Forgeries that never pause do not hold an attempt past its time. */
	t0 = ms_now();
	ck_assert_int_eq(ask_one(R_FLOOD, DNS_TYPE_A, rr, &n, &r), -ETIMEDOUT);
	ck_assert_uint_lt(ms_now() - t0, 2 * 300 + 900);
}
END_TEST

START_TEST(upstream_truncated)
{
	struct responder r;
	struct dns_rr rr[DNS_MAX_ANSWERS];
	size_t n;
	ck_assert_int_eq(ask_one(R_TRUNC, DNS_TYPE_A, rr, &n, &r), DNS_RCODE_NOERROR);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(atomic_load(&r.tcp_queries), 1);
}
END_TEST

START_TEST(upstream_failover)
{
	struct responder dead, good;
	struct dns_rr rr[DNS_MAX_ANSWERS];
	size_t n;
	struct resolver_upstream u = { .try_ms = 300 };
	responder_start(&dead, R_SILENT);
	responder_start(&good, R_ANSWER);
	add_server(&u, dead.port);
	add_server(&u, good.port);
	uint64_t t0 = ms_now();
	ck_assert_int_eq(resolver_upstream_resolve(&u, "www.example.com", DNS_TYPE_A, rr, DNS_MAX_ANSWERS, &n),
			 DNS_RCODE_NOERROR);
	uint64_t took = ms_now() - t0;
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_ge(took, 280);
	ck_assert_uint_lt(took, 2000);
	ck_assert_uint_eq(atomic_load(&dead.udp_queries), 1);
	ck_assert_uint_eq(atomic_load(&good.udp_queries), 1);
	/* Nothing listens on the first one's port any more: refused at once. */
	responder_stop(&dead);
	u.n = 0;
	add_server(&u, dead.port);
	add_server(&u, good.port);
	ck_assert_int_eq(resolver_upstream_resolve(&u, "www.example.com", DNS_TYPE_A, rr, DNS_MAX_ANSWERS, &n),
			 DNS_RCODE_NOERROR);
	responder_stop(&good);
	/* All silent: both rounds, then -ETIMEDOUT. */
	responder_start(&dead, R_SILENT);
	u.n = 0;
	add_server(&u, dead.port);
	ck_assert_int_eq(resolver_upstream_resolve(&u, "www.example.com", DNS_TYPE_A, rr, DNS_MAX_ANSWERS, &n),
			 -ETIMEDOUT);
	responder_stop(&dead);
	ck_assert_uint_eq(atomic_load(&dead.udp_queries), RESOLVER_ROUNDS);
}
END_TEST

START_TEST(answer_judged)
{
	uint8_t qm[DNS_MAX_MSG], out[DNS_MAX_MSG];
	size_t ql, n, k;
	struct dns_query q;
	struct dns_rr rr[4];
	ck_assert_int_eq(dns_build_query(7, "a.example", DNS_TYPE_A, qm, sizeof qm, &ql), 0);
	ck_assert_int_eq(dns_parse_query(qm, ql, &q), 0);
	n = answer(qm, ql, out, sizeof out, DNS_RCODE_NOERROR);
	ck_assert_int_eq(resolver_answer(out, n, &q, rr, 4, &k), DNS_RCODE_NOERROR);
	ck_assert_uint_eq(k, 1);
	n = answer(qm, ql, out, sizeof out, DNS_RCODE_REFUSED);
	ck_assert_int_eq(resolver_answer(out, n, &q, rr, 4, &k), -EAGAIN);
	ck_assert_uint_eq(k, 0);
	n = answer(qm, ql, out, sizeof out, DNS_RCODE_NOERROR);
	out[2] |= 0x02;
	ck_assert_int_eq(resolver_answer(out, n, &q, rr, 4, &k), -EMSGSIZE);
	ck_assert_int_eq(resolver_answer(qm, ql, &q, rr, 4, &k), -EPROTO); /* a query, not an answer */
	for (size_t cut = 0; cut < n; cut++) /* every truncation of a good answer */
		ck_assert_int_lt(resolver_answer(out, cut, &q, rr, 4, &k), 0);
}
END_TEST

Suite *dns_suite(void)
{
	Suite *s = suite_create("dns");

	unit_suite_case(s, "core", query_reply_round_trip, error_replies,
			hostile_queries, names_and_labels, pointer_chains, responses,
			filter_rebinding, filter_rebinding_v6, memo, build_query, server_specs,
			answer_judged);
	unit_suite_case_fixture(s, "upstream", NULL, NULL, 30, upstream_answers,
				upstream_forgeries, upstream_truncated,
				upstream_failover);
	return s;
}
