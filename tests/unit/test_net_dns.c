/* DNS messages: round trips through our own builder, hostile queries and
 * responses (loops, forward pointers, truncation, huge counts, bad
 * labels), CNAME chains, rebinding filtering and the name memory. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "netstack/dns.h"

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

static struct pol_addr A(const char *s)
{
	struct pol_addr a;
	ck_assert_int_eq(pol_addr_parse(s, &a), 0);
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
	struct pol_addr addrs[] = { A("1.2.3.4"), A("2001:db8::1"), A("5.6.7.8") };
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
	struct pol_addr a = A("1.2.3.4");
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
	struct pol_addr many[40];
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
	struct pol p;
	pol_init(&p, POL_MODE_PUBLIC);
	struct dns_rr rr[] = {
		{ A("8.8.8.8"), 60 }, { A("127.0.0.1"), 60 }, { A("1.1.1.1"), 60 }, { A("10.0.0.1"), 60 },
	};
	struct pol_decision why = { 0 };
	ck_assert_uint_eq(dns_filter_answers(&p, "example.com", rr, 4, &why), 2);
	ck_assert_uint_eq(rr[0].addr.b[0], 8);
	ck_assert_uint_eq(rr[1].addr.b[0], 1);
	ck_assert_str_eq(why.rule, "class:private");
	struct dns_rr all_bad[] = { { A("::1"), 1 } };
	ck_assert_uint_eq(dns_filter_answers(&p, "example.com", all_bad, 1, NULL), 0);
	pol_free(&p);
}
END_TEST

START_TEST(memo)
{
	struct dns_memo m;
	const char *names[DNS_MEMO_MAX_NAMES + 4];
	struct pol_addr a = A("1.2.3.4"), b = A("5.6.7.8"), c = A("2001:db8::9");
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
	struct pol_addr junk = { .family = 9 };
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

Suite *net_dns_suite(void)
{
	Suite *s = suite_create("net_dns");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, query_reply_round_trip);
	tcase_add_test(tc, error_replies);
	tcase_add_test(tc, hostile_queries);
	tcase_add_test(tc, names_and_labels);
	tcase_add_test(tc, pointer_chains);
	tcase_add_test(tc, responses);
	tcase_add_test(tc, filter_rebinding);
	tcase_add_test(tc, memo);
	suite_add_tcase(s, tc);
	return s;
}
