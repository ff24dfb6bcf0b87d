/* The response filter: framing (Content-Length, chunked, close-delimited,
 * no body for HEAD/204/304, interim 1xx, 101 and the stream after it,
 * pipelined responses), values replaced in heads, bodies across chunks
 * and trailers, the same output whatever the slicing, and the refusals
 * (502 before anything of a response went out, a cut after). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netstack/http_resp.h"
#include "netstack/secrets.h"
#include "tests/lib/secret_set.h"
#include "tests/lib/unit_suite.h"

#define V "ghp_R3alT0kenValue42"
#define PH "$KBOX_TOK***********" /* as long as V */

static const char yaml[] = "TOK: {value: \"" V "\", allow: [api.example.com]}\n";

/* The requests the responses answer, as http_sub would queue them. */
struct reqs {
	struct http_resp_req q[8];
	size_t n, next;
};

struct out;
static struct reqs *reqs_of(struct out *o);

static bool next_req(void *ctx, struct http_resp_req *out)
{
	struct reqs *r = reqs_of(ctx);
	if (r->next == r->n)
		return false;
	*out = r->q[r->next++];
	return true;
}

struct out {
	char *p;
	size_t n;
	char reply[HTTP_RESP_REPLY_MAX + 1024];
	enum http_resp_state state;
	unsigned scrubbed, refused;
	struct reqs rq;
};

static struct reqs *reqs_of(struct out *o)
{
	return &o->rq;
}

static void on_event(void *ctx, const struct http_resp_event *e)
{
	struct out *o = ctx;
	if (!strcmp(e->event, "secret-scrubbed"))
		o->scrubbed += e->count;
	else
		o->refused++;
	ck_assert(!e->reason || !strstr(e->reason, V));
}

static void drain(struct hr *h, struct out *o)
{
	const uint8_t *p;
	size_t n;
	http_resp_output(h, &p, &n);
	o->p = realloc(o->p, o->n + n + 1);
	ck_assert_ptr_nonnull(o->p);
	if (n)
		memcpy(o->p + o->n, p, n);
	o->n += n;
	o->p[o->n] = '\0';
	http_resp_consume(h, n);
}

/* Feed IN split once at SPLIT (0: whole) or in SLICE-byte pieces. */
static void run(const char *in, size_t n, const struct reqs *rq, size_t split, size_t slice, struct out *o)
{
	struct hr *h;
	memset(o, 0, sizeof *o);
	o->rq = *rq;
	ck_assert_int_eq(http_resp_new(ts_set, "api.example.com", true, next_req, on_event, o, &h), 0);
	size_t off = 0;
	while (off < n && http_resp_state(h) == HTTP_RESP_OPEN) {
		size_t k = n - off;
		if (split)
			k = off < split ? split - off : n - off;
		else if (slice && k > slice)
			k = slice;
		size_t t;
		ck_assert_int_eq(http_resp_feed(h, in + off, k, &t), 0);
		drain(h, o);
		if (http_resp_state(h) != HTTP_RESP_OPEN)
			break;
		ck_assert_uint_eq(t, k);
		off += t;
	}
	http_resp_finish(h);
	drain(h, o);
	o->state = http_resp_state(h);
	const uint8_t *p;
	size_t rn;
	http_resp_reply(h, &p, &rn);
	snprintf(o->reply, sizeof o->reply, "%.*s", (int)rn, (const char *)p);
	if (!o->p)
		o->p = calloc(1, 1);
	http_resp_free(h);
}

/* The same output for the whole and for every split and 1-byte pieces,
 * once chunk framing is ignored (kbox re-chunks). */
static char *dechunk_all(const char *s);

static void same_everywhere(const char *in, const struct reqs *rq, const struct out *whole)
{
	size_t n = strlen(in);
	char *w = dechunk_all(whole->p);
	for (size_t k = 0; k <= n; k++) {
		struct out o;
		if (k == n)
			run(in, n, rq, 0, 1, &o);
		else if (k)
			run(in, n, rq, k, 0, &o);
		else
			continue;
		char *g = dechunk_all(o.p);
		ck_assert_msg(strcmp(g, w) == 0, "split %zu:\n%s\nvs\n%s", k, g, w);
		ck_assert_int_eq(o.state, whole->state);
		ck_assert_str_eq(o.reply, whole->reply);
		ck_assert_ptr_null(strstr(o.p, V));
		free(g);
		free(o.p);
	}
	free(w);
}

/* Replace every chunked body in S (HTTP/1.1 responses) by its data, to
 * compare outputs sliced differently. */
static char *dechunk_all(const char *s)
{
	size_t n = strlen(s);
	char *o = calloc(1, n + 1);
	size_t on = 0;
	const char *p = s;
	while (*p) {
		const char *e = strstr(p, "\r\n\r\n");
		if (!e) {
			strcpy(o + on, p);
			on += strlen(p);
			break;
		}
		size_t hl = (size_t)(e + 4 - p);
		memcpy(o + on, p, hl);
		on += hl;
		bool ch = memmem(p, hl, "Transfer-Encoding: chunked", 26) != NULL;
		p += hl;
		if (!ch)
			continue;
		for (;;) {
			char *end;
			unsigned long sz = strtoul(p, &end, 16);
			const char *crlf = strstr(p, "\r\n");
			if (!crlf)
				break;
			p = crlf + 2;
			if (sz == 0) {
				const char *te = strstr(p, "\r\n\r\n");
				const char *t2 = strncmp(p, "\r\n", 2) == 0 ? p : te;
				size_t tl = t2 == p ? 2 : (size_t)(te + 4 - p);
				memcpy(o + on, "[end]", 5);
				on += 5;
				memcpy(o + on, p, tl);
				on += tl;
				p += tl;
				break;
			}
			memcpy(o + on, p, sz);
			on += sz;
			p += sz + 2;
		}
	}
	o[on] = '\0';
	return o;
}

static const struct reqs GET1 = { .q = { { .identity = true } }, .n = 1 };

START_TEST(content_length_body_and_head)
{
	const char *in = "HTTP/1.1 200 OK\r\nX-Echo: Bearer " V "\r\nContent-Length: 29\r\n\r\n{\"t\":\"" V "\"}\n";
	struct out o;
	run(in, strlen(in), &GET1, 0, 0, &o);
	ck_assert_int_eq(o.state, HTTP_RESP_OPEN);
	ck_assert_str_eq(o.p, "HTTP/1.1 200 OK\r\nX-Echo: Bearer " PH "\r\nContent-Length: 29\r\n\r\n{\"t\":\"" PH "\"}\n");
	ck_assert_uint_eq(o.scrubbed, 2);
	same_everywhere(in, &GET1, &o);
	free(o.p);
}
END_TEST

START_TEST(chunked_across_chunks_and_trailer)
{
	const char *in = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			 "3;a=b\r\nghp\r\n5\r\n_R3al\r\nc\r\nT0kenValue42\r\n1\r\n!\r\n0\r\nX-T: " V "\r\n\r\n";
	struct out o;
	run(in, strlen(in), &GET1, 0, 0, &o);
	ck_assert_int_eq(o.state, HTTP_RESP_OPEN);
	char *d = dechunk_all(o.p);
	ck_assert_str_eq(d, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" PH "![end]X-T: " PH "\r\n\r\n");
	ck_assert_ptr_null(strstr(o.p, ";a=b"));
	free(d);
	same_everywhere(in, &GET1, &o);
	free(o.p);
}
END_TEST

START_TEST(close_delimited_and_opaque)
{
	const char *in = "HTTP/1.0 200 OK\r\n\r\nsome " V " until EOF " V;
	struct out o;
	run(in, strlen(in), &GET1, 0, 0, &o);
	ck_assert_str_eq(o.p, "HTTP/1.0 200 OK\r\n\r\nsome " PH " until EOF " PH);
	same_everywhere(in, &GET1, &o);
	free(o.p);

	struct reqs up = { .q = { { .upgrade = true, .identity = true } }, .n = 1 };
	const char *ws = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x14" V "\x81\x02hi";
	run(ws, strlen(ws), &up, 0, 0, &o);
	ck_assert_str_eq(o.p, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x14" PH "\x81\x02hi");
	same_everywhere(ws, &up, &o);
	free(o.p);
}
END_TEST

START_TEST(no_body_interim_and_pipelined)
{
	/* HEAD (a Content-Length but no body), 100 then 200, 204, 304: each
	 * for its own request, in order. */
	struct reqs rq = { .q = { { .head = true }, {}, {}, {} }, .n = 4 };
	const char *in = "HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n"
			 "HTTP/1.1 100 Continue\r\n\r\n"
			 "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n" V
			 "HTTP/1.1 204 No Content\r\n\r\n"
			 "HTTP/1.1 304 Not Modified\r\nETag: \"" V "\"\r\n\r\n";
	struct out o;
	run(in, strlen(in), &rq, 0, 0, &o);
	ck_assert_int_eq(o.state, HTTP_RESP_OPEN);
	ck_assert_str_eq(o.p, "HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n"
			      "HTTP/1.1 100 Continue\r\n\r\n"
			      "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n" PH
			      "HTTP/1.1 204 No Content\r\n\r\n"
			      "HTTP/1.1 304 Not Modified\r\nETag: \"" PH "\"\r\n\r\n");
	same_everywhere(in, &rq, &o);
	free(o.p);
}
END_TEST

struct rcase {
	const char *name, *in;
	struct http_resp_req req;
	enum http_resp_state state;
	const char *reply; /* in the 502's text */
};

static const struct rcase refusals[] = {
	{ "gzip where identity was asked", "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
	  { .identity = true }, HTTP_RESP_CLOSE_AFTER_REPLY, "compressed (Content-Encoding: gzip)" },
	{ "br, identity listed", "HTTP/1.1 200 OK\r\nContent-Encoding: identity, br\r\n\r\n", { .identity = true },
	  HTTP_RESP_CLOSE_AFTER_REPLY, "Content-Encoding: br" },
	{ "a coding name carrying a value", "HTTP/1.1 200 OK\r\nContent-Encoding: x" V "\r\n\r\n", { .identity = true },
	  HTTP_RESP_CLOSE_AFTER_REPLY, "Content-Encoding: an unknown coding" },
	{ "206 where identity was asked", "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/20\r\n"
	  "Content-Length: 5\r\n\r\nghp_R", { .identity = true }, HTTP_RESP_CLOSE_AFTER_REPLY, "partial response (206)" },
	{ "gzip elsewhere passes", "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc", {},
	  HTTP_RESP_OPEN, NULL },
	{ "transfer coding gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	  { .identity = true }, HTTP_RESP_CLOSE_AFTER_REPLY, "transfer coding 'gzip'" },
	{ "TE and CL", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", {},
	  HTTP_RESP_CLOSE_AFTER_REPLY, "ambiguous" },
	{ "two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", {}, HTTP_RESP_CLOSE_AFTER_REPLY,
	  "different Content-Length" },
	{ "not HTTP", "\x00\x00\x12\x04\x00\x00\x00\x00\x00", {}, HTTP_RESP_CLOSE_AFTER_REPLY, "control bytes" },
	{ "TLS bytes", "\x16\x03\x03\x00\x02\r\n\r\n", {}, HTTP_RESP_CLOSE_AFTER_REPLY, "control bytes" },
	{ "garbage line", "SSH-2.0-x\r\n\r\n", {}, HTTP_RESP_CLOSE_AFTER_REPLY, "not an HTTP/1.x response" },
	{ "HTTP/2 status line", "HTTP/2 200\r\n\r\n", {}, HTTP_RESP_CLOSE_AFTER_REPLY, "not an HTTP/1.x response" },
	{ "bare LF", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", {}, HTTP_RESP_CLOSE_AFTER_REPLY, "bare CR or LF" },
	{ "obs-fold", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\n\r\n", {}, HTTP_RESP_CLOSE_AFTER_REPLY, "obs-fold" },
	{ "101 unasked", "HTTP/1.1 101 Switching Protocols\r\n\r\n", {}, HTTP_RESP_CLOSE_AFTER_REPLY, "asked for no upgrade" },
	{ "101 with deflate", "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
	  { .upgrade = true, .identity = true }, HTTP_RESP_CLOSE_AFTER_REPLY, "WebSocket extension" },
	{ "101 to h2c", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", { .upgrade = true, .identity = true },
	  HTTP_RESP_CLOSE_AFTER_REPLY, "other than WebSocket" },
	{ "bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", {}, HTTP_RESP_FAILED, NULL },
	{ "chunk without CRLF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab", {}, HTTP_RESP_FAILED, NULL },
};

START_TEST(refused)
{
	const struct rcase *c = &refusals[_i];
	struct reqs rq = { .q = { c->req }, .n = 1 };
	struct out o;
	size_t n = strlen(c->in) ? strlen(c->in) : 9;
	run(c->in, n, &rq, 0, 0, &o);
	ck_assert_msg(o.state == c->state, "%s: state %d (%s)", c->name, o.state, o.reply);
	if (c->state == HTTP_RESP_CLOSE_AFTER_REPLY) {
		ck_assert_msg(strncmp(o.reply, "HTTP/1.1 502 Bad Gateway\r\n", 26) == 0, "%s", c->name);
		ck_assert_msg(strstr(o.reply, c->reply), "%s: %s", c->name, o.reply);
		ck_assert_msg(strstr(o.reply, "\r\nConnection: close\r\n"), "%s", c->name);
		ck_assert_uint_eq(o.n, 0); /* nothing of the refused response */
		ck_assert_uint_eq(o.refused, 1);
		ck_assert_ptr_null(strstr(o.reply, V));
	}
	if (c->state == HTTP_RESP_FAILED)
		ck_assert_uint_eq(o.refused, 1);
	free(o.p);
}
END_TEST

START_TEST(cut_short_drops_the_held_part)
{
	/* The body ends (EOF) with a value's beginning: a cut body is not
	 * completed, and the held part is not let out. */
	const char *in = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc ghp_R3alT0ken";
	struct out o;
	run(in, strlen(in), &GET1, 0, 0, &o);
	ck_assert_str_eq(o.p, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc ");
	free(o.p);
}
END_TEST

Suite *http_resp_suite(void)
{
	ts_yaml = yaml;
	Suite *s = suite_create("http_resp");
	TCase *tc = unit_suite_case_fixture(s, "core", ts_setup, ts_teardown, 60,
					    content_length_body_and_head,
					    chunked_across_chunks_and_trailer,
					    close_delimited_and_opaque,
					    no_body_interim_and_pipelined,
					    cut_short_drops_the_held_part);
	tcase_add_loop_test(tc, refused, 0, sizeof refusals / sizeof refusals[0]);
	return s;
}
