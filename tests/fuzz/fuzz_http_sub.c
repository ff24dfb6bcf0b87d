/* libFuzzer target for the HTTP/1.1 substitution filter.  The first input
 * byte picks the server name and how the rest is sliced; the rest is the
 * guest's request stream.  Invariants:
 *  - a real value never reaches upstream more often than the guest wrote it
 *    literally, plus the substitutions the audit callback reported for it
 *    (and never at all beyond the literal copies for a server outside every
 *    allow list);
 *  - the reply to the guest never holds a value, and exists exactly when
 *    the state says so;
 *  - whole and sliced feeding end in the same state with the same reply
 *    and, when not refused, the same upstream bytes once chunk boundaries
 *    are ignored; except after a protocol upgrade (nothing is held back
 *    there). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/grow.h"
#include "netstack/http_sub.h"
#include "netstack/secrets.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

/* Values of unreserved characters only, so that every dress (percent,
 * JSON, query) of a value is the value itself and can be counted. */
static const char yaml[] =
	"KEY: {value: Vk3y-REAL-alpha, allow: [api.example.com, \"*.svc.example\"],\n"
	"      substitution: {header_fields: [authorization, x-api-key]}}\n"
	"QK: {value: Vq-REAL-beta, allow: [api.example.com],\n"
	"     substitution: {headers: false, query: true}}\n"
	"BK: {value: Vb-REAL-gamma, allow: [api.example.com, a.svc.example],\n"
	"     substitution: {body: true}}\n"
	"FOO: {value: Vf-REAL-delta, allow: [\"*.svc.example\"]}\n";
static const char *const names[] = { "KEY", "QK", "BK", "FOO" };
static const char *const vals[] = { "Vk3y-REAL-alpha", "Vq-REAL-beta", "Vb-REAL-gamma",
				    "Vf-REAL-delta" };
static const char *const snis[] = { "api.example.com", "a.svc.example", "svc.example",
				    "evil.example" };
#define NSEC 4

static struct secrets *set;

struct run {
	uint8_t *out;
	size_t n, cap;
	size_t subs[NSEC];
	enum http_sub_state state;
	uint8_t reply[8192];
	size_t reply_len;
};

static void on_audit(void *ctx, const struct http_sub_audit *ev)
{
	struct run *r = ctx;
	for (int i = 0; i < NSEC; i++) {
		check(!ev->reason || !strstr(ev->reason, vals[i]));
		if (ev->secret && ev->decision == HTTP_SUB_SUBSTITUTED && !strcmp(ev->secret, names[i]))
			r->subs[i]++;
	}
}

static void take(struct hs *h, struct run *r)
{
	const uint8_t *p;
	size_t n;
	http_sub_output(h, &p, &n);
	check(grow_array(&r->out, &r->cap, r->n + n, 1, 64, 0) == 0);
	if (n)
		memcpy(r->out + r->n, p, n);
	r->n += n;
	http_sub_consume(h, n);
}

static size_t count(const uint8_t *hay, size_t n, const char *needle)
{
	size_t k = strlen(needle), c = 0;
	for (size_t i = 0; i + k <= n; i++)
		if (!memcmp(hay + i, needle, k))
			c++;
	return c;
}

static void run(const char *sni, const uint8_t *d, size_t n, unsigned seed, struct run *r)
{
	struct hs *h;
	memset(r, 0, sizeof *r);
	check(http_sub_new(set, sni, on_audit, r, &h) == 0);
	size_t off = 0;
	while (off < n && http_sub_state(h) == HTTP_SUB_OPEN) {
		size_t k = n - off;
		if (seed) {
			seed = seed * 1103515245u + 12345u;
			size_t s = 1 + (seed >> 16) % 64;
			if (k > s)
				k = s;
		}
		size_t taken;
		int rc = http_sub_feed(h, d + off, k, &taken);
		check(rc == 0 && taken <= k);
		const uint8_t *p;
		size_t pending;
		http_sub_output(h, &p, &pending);
		check(pending <= HTTP_SUB_OUT_HIGH + HTTP_SUB_HEAD_MAX + 64 * 1024 + (1u << 20));
		take(h, r);
		/* The responses came: the request queue empties (at
		 * HTTP_SUB_PIPELINE_MAX queued the filter would rightly wait). */
		struct http_sub_req q;
		while (http_sub_pop_request(h, &q))
			;
		off += taken;
		if (!taken && http_sub_state(h) == HTTP_SUB_OPEN)
			check(0); /* no progress with the output drained */
	}
	http_sub_finish(h);
	take(h, r);
	r->state = http_sub_state(h);
	const uint8_t *p;
	size_t rn;
	http_sub_reply(h, &p, &rn);
	check((rn > 0) == (r->state == HTTP_SUB_CLOSE_AFTER_REPLY));
	check(rn <= sizeof r->reply);
	if (rn)
		memcpy(r->reply, p, rn);
	r->reply_len = rn;
	if (rn)
		check(rn > 9 && !memcmp(p, "HTTP/1.1 ", 9));
	http_sub_free(h);
}

struct bytes {
	uint8_t *p;
	size_t n, cap;
};

static void put(struct bytes *b, const void *d, size_t n)
{
	check(grow_array(&b->p, &b->cap, b->n + n, 1, 64, 0) == 0);
	if (n)
		memcpy(b->p + b->n, d, n);
	b->n += n;
}

static const uint8_t *find(const uint8_t *p, size_t n, const char *s)
{
	return memmem(p, n, s, strlen(s));
}

/* Our output with each chunked body's data joined into one chunk.  The
 * filter wrote this output, so its framing is well formed (a cut-off last
 * request is copied as it is). */
static void unchunk(const uint8_t *p, size_t n, struct bytes *o)
{
	size_t i = 0;
	while (i < n) {
		const uint8_t *e = find(p + i, n - i, "\r\n\r\n");
		if (!e) {
			put(o, p + i, n - i);
			return;
		}
		size_t hl = (size_t)(e + 4 - (p + i));
		char *lower = malloc(hl + 1);
		check(lower != NULL);
		for (size_t k = 0; k < hl; k++)
			lower[k] = (char)(p[i + k] >= 'A' && p[i + k] <= 'Z' ? p[i + k] + 32 : p[i + k]);
		lower[hl] = '\0';
		put(o, p + i, hl);
		i += hl;
		bool chunked = strstr(lower, "\r\ntransfer-encoding:") != NULL;
		const char *cl = strstr(lower, "\r\ncontent-length: ");
		size_t len = cl ? strtoul(cl + 18, NULL, 10) : 0;
		free(lower);
		if (chunked) {
			struct bytes data = { 0 };
			for (;;) {
				const uint8_t *crlf = find(p + i, n - i, "\r\n");
				if (!crlf) {
					put(o, data.p, data.n);
					put(o, p + i, n - i);
					free(data.p);
					return;
				}
				size_t sz = strtoul((const char *)p + i, NULL, 16);
				i = (size_t)(crlf + 2 - p);
				if (sz == 0)
					break;
				if (sz + 2 > n - i) {
					put(o, data.p, data.n);
					put(o, p + i, n - i);
					free(data.p);
					return;
				}
				put(&data, p + i, sz);
				i += sz + 2;
			}
			put(o, data.p, data.n);
			put(o, "|0|", 3);
			free(data.p);
		} else if (len) {
			if (len > n - i)
				len = n - i;
			put(o, p + i, len);
			i += len;
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!set) {
		char err[256];
		check(secrets_load_buf("fuzz/secrets.yaml", yaml, sizeof yaml - 1, &set, err,
				       sizeof err) == 0);
	}
	if (size < 1 || size > 64 * 1024)
		return 0;
	const char *sni = snis[data[0] & 3];
	unsigned seed = data[0] >> 2;
	const uint8_t *d = data + 1;
	size_t n = size - 1;

	static struct run whole, sliced;
	run(sni, d, n, 0, &whole);
	run(sni, d, n, seed | 1u, &sliced);

	struct run *rs[2] = { &whole, &sliced };
	for (int w = 0; w < 2; w++) {
		struct run *r = rs[w];
		for (int i = 0; i < NSEC; i++) {
			size_t lit = count(d, n, vals[i]);
			check(count(r->out, r->n, vals[i]) <= lit + r->subs[i]);
			const struct secret *s = secrets_find(set, names[i], strlen(names[i]));
			if (!secrets_hosts_match(s, sni))
				check(r->subs[i] == 0);
			check(count(r->reply, r->reply_len, vals[i]) == 0);
		}
	}
	bool upgrade = false;
	for (size_t i = 0; i + 7 <= n && !upgrade; i++)
		upgrade = !strncasecmp((const char *)d + i, "upgrade", 7);
	if (!upgrade) {
		check(whole.state == sliced.state);
		check(whole.reply_len == sliced.reply_len &&
		      !memcmp(whole.reply, sliced.reply, whole.reply_len));
		if (whole.state == HTTP_SUB_OPEN) {
			struct bytes a = { 0 }, b = { 0 };
			unchunk(whole.out, whole.n, &a);
			unchunk(sliced.out, sliced.n, &b);
			check(a.n == b.n && (a.n == 0 || !memcmp(a.p, b.p, a.n)));
			free(a.p);
			free(b.p);
		}
	}
	free(whole.out);
	free(sliced.out);
	return 0;
}
