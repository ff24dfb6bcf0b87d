/* libFuzzer target for the response filter (http_resp, with scrub).  The
 * first input byte describes the requests the responses answer (HEAD,
 * upgrade, identity for each of the first two) and how the rest is
 * sliced; the rest is the upstream's response stream.  Invariants:
 *  - no real value ever reaches the guest as it is, neither in the output
 *    nor in a reply, whatever the slicing;
 *  - whole and sliced feeding end in the same state with the same reply
 *    and the same number of replacements;
 *  - the filter always makes progress once its output is drained, and
 *    its pending output stays bounded;
 *  - a reply exists exactly when the state says so, and is a 502. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/grow.h"
#include "netstack/http_resp.h"
#include "netstack/secrets.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static const char yaml[] = "KEY: {value: Vk3y-REAL-alpha, allow: [api.example.com]}\n"
			   "PW: {value: 'p w\"d/REAL\\x', allow: [api.example.com]}\n";
static const char *const vals[] = { "Vk3y-REAL-alpha", "p w\"d/REAL\\x" };

static struct secrets *set;

struct run {
	struct http_resp_req q[2];
	unsigned nq, next;
	unsigned hits;
	enum http_resp_state state;
	uint8_t *out;
	size_t n, cap;
	uint8_t reply[HTTP_RESP_REPLY_MAX + 2048];
	size_t reply_len;
};

static bool next_req(void *ctx, struct http_resp_req *out)
{
	struct run *r = ctx;
	if (r->next == r->nq)
		return false;
	*out = r->q[r->next++];
	return true;
}

static void on_event(void *ctx, const struct http_resp_event *e)
{
	struct run *r = ctx;
	if (!strcmp(e->event, "secret-scrubbed"))
		r->hits += e->count;
	for (int i = 0; i < 2; i++)
		check(!e->reason || !strstr(e->reason, vals[i]));
}

static void take(struct hr *h, struct run *r)
{
	const uint8_t *p;
	size_t n;
	http_resp_output(h, &p, &n);
	check(grow_array(&r->out, &r->cap, r->n + n, 1, 64, 0) == 0);
	if (n)
		memcpy(r->out + r->n, p, n);
	r->n += n;
	http_resp_consume(h, n);
}

static void run(uint8_t mode, const uint8_t *d, size_t n, unsigned seed, struct run *r)
{
	memset(r, 0, sizeof *r);
	for (int i = 0; i < 2; i++)
		r->q[i] = (struct http_resp_req){ .head = mode >> (3 * i) & 1, .upgrade = mode >> (3 * i + 1) & 1,
					   .identity = mode >> (3 * i + 2) & 1 };
	r->nq = 2;
	struct hr *h;
	check(http_resp_new(set, "api.example.com", mode & 0x40, next_req, on_event, r, &h) == 0);
	size_t off = 0;
	while (off < n && http_resp_state(h) == HTTP_RESP_OPEN) {
		size_t k = n - off;
		if (seed) {
			seed = seed * 1103515245u + 12345u;
			size_t s = 1 + (seed >> 16) % 64;
			if (k > s)
				k = s;
		}
		size_t taken;
		check(http_resp_feed(h, d + off, k, &taken) == 0 && taken <= k);
		const uint8_t *p;
		size_t pending;
		http_resp_output(h, &p, &pending);
		check(pending <= HTTP_RESP_OUT_HIGH + HTTP_RESP_HEAD_MAX + 2 * HTTP_RESP_STEP + 1024);
		take(h, r);
		off += taken;
		if (!taken && http_resp_state(h) == HTTP_RESP_OPEN)
			check(0);
	}
	http_resp_finish(h);
	take(h, r);
	r->state = http_resp_state(h);
	const uint8_t *p;
	size_t rn;
	http_resp_reply(h, &p, &rn);
	check((rn > 0) == (r->state == HTTP_RESP_CLOSE_AFTER_REPLY));
	check(rn <= sizeof r->reply);
	if (rn) {
		memcpy(r->reply, p, rn);
		check(rn > 13 && !memcmp(p, "HTTP/1.1 502 ", 13));
	}
	r->reply_len = rn;
	for (int i = 0; i < 2; i++) {
		check(!r->n || !memmem(r->out, r->n, vals[i], strlen(vals[i])));
		check(!memmem(r->reply, r->reply_len, vals[i], strlen(vals[i])));
	}
	http_resp_free(h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!set) {
		char err[256];
		check(secrets_load_buf("fuzz/secrets.yaml", yaml, strlen(yaml), &set, err, sizeof err) == 0);
	}
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	struct run *a = malloc(sizeof *a), *b = malloc(sizeof *b);
	check(a && b);
	run(mode, data + 1, size - 1, 0, a);
	run(mode, data + 1, size - 1, 1u + mode, b);
	check(a->state == b->state);
	check(a->reply_len == b->reply_len && !memcmp(a->reply, b->reply, a->reply_len));
	if (a->state == HTTP_RESP_OPEN)
		check(a->hits == b->hits);
	free(a->out);
	free(b->out);
	free(a);
	free(b);
	return 0;
}
