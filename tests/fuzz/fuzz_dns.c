/* Input: the first byte picks the path, the rest is a DNS message.
 *   even: a guest query.  When it parses, our reply to it must parse back
 *         as a response to it with the addresses we put in; when only the
 *         header parsed, the error reply must still build.
 *   odd:  an upstream response to a fixed question (bit 1: A or AAAA,
 *         the id taken from the message), whose addresses then go through
 *         the rebinding filter and the name memory; with bit 2, judged as
 *         the configured-server resolver does (resolver_answer), the question
 *         made by dns_build_query.
 * The message's bytes as a name must build a query that parses back to
 * that name, or be refused.
 * Names are also read from the first offsets directly.  Nothing may
 * crash, hang or read outside the message. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "netstack/dns.h"
#include "netstack/resolver.h"

static void check_query(const uint8_t *m, size_t len)
{
	static const struct policy_addr addrs[] = {
		{ 4, { 93, 184, 216, 34 } },
		{ 6, { 0x26, 0x06, 0x28, 0x00, [15] = 1 } },
		{ 4, { 8, 8, 8, 8 } },
	};
	struct dns_query q;
	uint8_t out[DNS_MAX_MSG];
	size_t n;
	int rc = dns_parse_query(m, len, &q);
	if (rc == -EBADMSG)
		return;
	if (rc < 0) {
		if (dns_build_reply(&q, m, DNS_RCODE_FORMERR, NULL, 0, 0, out, sizeof out, &n) < 0 || n < DNS_HDR)
			abort();
		return;
	}
	if (dns_build_reply(&q, m, DNS_RCODE_NOERROR, addrs, 3, 60, out, sizeof out, &n) < 0) {
		/* only a question longer than our buffer can fail */
		if (q.qend <= sizeof out)
			abort();
		return;
	}
	struct dns_rr rr[4];
	size_t nrr;
	int rcode;
	if (dns_parse_response(out, n, &q, &rcode, rr, 4, &nrr) < 0 || rcode != 0)
		abort();
	size_t want = q.qtype == DNS_TYPE_A ? 2 : q.qtype == DNS_TYPE_AAAA ? 1 : 0;
	if (nrr != want)
		abort();
	struct policy_decision d;
	struct policy p;
	policy_init(&p, POLICY_MODE_PUBLIC);
	policy_check_name(&p, q.name, &d);
	policy_free(&p);
}

static void check_response(const uint8_t *m, size_t len, int aaaa)
{
	struct dns_query q;
	memset(&q, 0, sizeof q);
	q.id = len >= 2 ? (uint16_t)(m[0] << 8 | m[1]) : 0;
	q.qtype = aaaa ? DNS_TYPE_AAAA : DNS_TYPE_A;
	q.qclass = DNS_CLASS_IN;
	q.has_question = 1;
	strcpy(q.name, "www.x.com");
	struct dns_rr rr[DNS_MAX_ANSWERS];
	size_t n;
	int rcode;
	if (dns_parse_response(m, len, &q, &rcode, rr, DNS_MAX_ANSWERS, &n) < 0)
		return;
	if (n > DNS_MAX_ANSWERS)
		abort();
	struct policy p;
	policy_init(&p, POLICY_MODE_PUBLIC);
	struct policy_decision why;
	n = dns_filter_answers(&p, q.name, rr, n, &why);
	struct dns_memo memo;
	if (dns_memo_init(&memo, 4) == 0) {
		const char *names[DNS_MEMO_MAX_NAMES];
		for (size_t i = 0; i < n; i++) {
			dns_memo_put(&memo, q.name, &rr[i].addr, rr[i].ttl, i);
			if (dns_memo_names(&memo, &rr[i].addr, i, names, DNS_MEMO_MAX_NAMES) == 0)
				abort();
			policy_check(&p, names[0], &rr[i].addr, 443, &why);
		}
		dns_memo_free(&memo);
	}
	policy_free(&p);
}

static void check_upstream(const uint8_t *m, size_t len, int aaaa)
{
	uint8_t qm[DNS_MAX_MSG];
	size_t qlen, n;
	struct dns_query q;
	uint16_t id = len >= 2 ? (uint16_t)(m[0] << 8 | m[1]) : 0;
	if (dns_build_query(id, "www.x.com", aaaa ? DNS_TYPE_AAAA : DNS_TYPE_A, qm, sizeof qm, &qlen) < 0 ||
	    dns_parse_query(qm, qlen, &q) < 0)
		abort();
	struct dns_rr rr[DNS_MAX_ANSWERS];
	int r = resolver_answer(m, len, &q, rr, DNS_MAX_ANSWERS, &n);
	if (r >= 0 && (n > DNS_MAX_ANSWERS || (r == DNS_RCODE_NXDOMAIN && n != 0)))
		abort();
	if (r != DNS_RCODE_NOERROR && r != DNS_RCODE_NXDOMAIN && r != -EPROTO && r != -EMSGSIZE && r != -EAGAIN)
		abort();
	for (size_t i = 0; r >= 0 && i < n; i++)
		if (rr[i].addr.family != (aaaa ? 6 : 4))
			abort();
}

static void check_build(const uint8_t *m, size_t len)
{
	char name[DNS_NAME_TEXT];
	uint8_t qm[DNS_MAX_MSG];
	size_t k = len < sizeof name - 1 ? len : sizeof name - 1, qlen;
	struct dns_query q;
	memcpy(name, m, k);
	name[k] = '\0';
	if (dns_build_query(1, name, DNS_TYPE_A, qm, sizeof qm, &qlen) < 0)
		return;
	if (qlen > sizeof qm || dns_parse_query(qm, qlen, &q) < 0 || strcmp(q.name, name) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t *m = data + 1;
	size_t len = size - 1;
	if ((data[0] & 5) == 5)
		check_upstream(m, len, data[0] & 2);
	else if (data[0] & 1)
		check_response(m, len, data[0] & 2);
	else
		check_query(m, len);
	check_build(m, len);
	char name[DNS_NAME_TEXT];
	size_t next;
	for (size_t off = 0; off < len && off < 48; off++)
		if (dns_read_name(m, len, off, name, &next) == 0 && (next > len || strlen(name) > POLICY_NAME_MAX))
			abort();
	return 0;
}
