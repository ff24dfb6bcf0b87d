/* The interception decisions (splice, refuse, intercept) on real
 * ClientHellos from BearSSL's client, and a whole intercepted request in
 * memory: a BearSSL client trusting only the kbox CA sends a placeholder,
 * a BearSSL server with a leaf of a separate upstream CA receives the real
 * value; a request to a name the secret may not go to is answered 403. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bearssl.h>

#include "netstack/intercept.h"
#include "netstack/secrets.h"
#include "netstack/tls_cert.h"
#include "netstack/tls_trust.h"
#include "tests/lib/unit_suite.h"

#define NAME "api.example.test"

static struct tls_cert_ca *kbox_ca, *up_ca;
static struct tls_trust *up_trust, *kbox_trust;
static struct secrets *secs;

static const char SECRETS_YAML[] = "TOKEN:\n"
				   "  value: real-token-value-1234\n"
				   "  allow: [\"api.example.test\"]\n"
				   "  substitution:\n"
				   "    headers: true\n"
				   "    header_fields: [\"authorization\"]\n";

static void setup(void)
{
	time_t now = time(NULL);
	ck_assert_int_eq(tls_cert_ca_generate("kbox test CA", now, &kbox_ca), 0);
	ck_assert_int_eq(tls_cert_ca_generate("upstream test CA", now, &up_ca), 0);
	size_t len;
	const unsigned char *der;
	ck_assert_int_eq(tls_trust_new(&up_trust), 0);
	der = tls_cert_ca_der(up_ca, &len);
	ck_assert_int_eq(tls_trust_add_der(up_trust, der, len), 0);
	ck_assert_int_eq(tls_trust_new(&kbox_trust), 0);
	der = tls_cert_ca_der(kbox_ca, &len);
	ck_assert_int_eq(tls_trust_add_der(kbox_trust, der, len), 0);
	char err[256];
	ck_assert_int_eq(secrets_load_buf("secrets.yaml", SECRETS_YAML, strlen(SECRETS_YAML), &secs, err,
					  sizeof err),
			 0);
}

static void teardown(void)
{
	secrets_free(secs);
	tls_trust_free(up_trust);
	tls_trust_free(kbox_trust);
	tls_cert_ca_free(kbox_ca);
	tls_cert_ca_free(up_ca);
}

/* Events seen. */
struct seen {
	char last[64];
	char reasons[1024];
	unsigned n, substituted, blocked;
};

static void on_event(void *ctx, const struct intercept_event *ev)
{
	struct seen *s = ctx;
	s->n++;
	snprintf(s->last, sizeof s->last, "%s", ev->event);
	size_t l = strlen(s->reasons);
	snprintf(s->reasons + l, sizeof s->reasons - l, "%s:%s;", ev->event, ev->reason ? ev->reason : "");
	if (strcmp(ev->event, "secret-substituted") == 0)
		s->substituted++;
	if (strcmp(ev->event, "secret-blocked") == 0)
		s->blocked++;
	/* The real value never reaches an event. */
	ck_assert_ptr_null(ev->reason ? strstr(ev->reason, "real-token") : NULL);
}

static br_ssl_client_context hc;
static br_x509_minimal_context hx;
static unsigned char hbuf[BR_SSL_BUFSIZE_BIDI];

/* The first record of a BearSSL client's handshake for NAME. */
static size_t hello_for(const char *name, uint8_t *out, size_t cap)
{
	br_ssl_client_init_full(&hc, &hx, NULL, 0);
	br_ssl_engine_set_buffer(&hc.eng, hbuf, sizeof hbuf, 1);
	ck_assert(br_ssl_client_reset(&hc, name, 0));
	size_t len;
	uint8_t *rec = br_ssl_engine_sendrec_buf(&hc.eng, &len);
	ck_assert_ptr_nonnull(rec);
	ck_assert_uint_le(len, cap);
	memcpy(out, rec, len);
	return len;
}

static struct intercept_config cfg_of(enum intercept_scope scope, const char *const *bypass, size_t nb)
{
	struct intercept_config c = {
		.ca = kbox_ca, .trust = up_trust, .secrets = secs, .scope = scope, .bypass = bypass, .n_bypass = nb,
	};
	return c;
}

/* Feed BYTES as the guest's first bytes; return intercept_want. */
static unsigned first_bytes(const struct intercept_config *cfg, const char *const *names, size_t nn,
			    const uint8_t *bytes, size_t n, struct seen *s, struct icpt **out)
{
	ck_assert_int_eq(intercept_new(cfg, names, nn, on_event, s, out), 0);
	size_t taken = 0;
	ck_assert_int_eq(intercept_guest_in(*out, bytes, n, &taken), 0);
	ck_assert_uint_eq(taken, n);
	return intercept_want(*out);
}

START_TEST(plain_http_is_spliced_byte_exact)
{
	static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
	struct intercept_config cfg = cfg_of(INTERCEPT_SCOPE_ALL, NULL, 0);
	struct seen s = { 0 };
	struct icpt *c;
	unsigned w = first_bytes(&cfg, NULL, 0, (const uint8_t *)req, strlen(req), &s, &c);
	ck_assert(w & TLS_MITM_WANT_UP_OUT);
	size_t n;
	const uint8_t *p = intercept_upstream_out(c, &n);
	ck_assert_uint_eq(n, strlen(req));
	ck_assert_mem_eq(p, req, n);
	intercept_upstream_out_done(c, n);
	ck_assert(intercept_want(c) & INTERCEPT_SPLICE);
	ck_assert_uint_eq(s.n, 0);
	intercept_free(c);
}
END_TEST

START_TEST(decisions_by_name)
{
	uint8_t h[4096];
	size_t n = hello_for(NAME, h, sizeof h);
	const char *right[] = { "other.example", NAME };
	const char *wrong[] = { "evil.example" };
	const char *bypass[] = { "*.example.test" };
	struct seen s;
	struct icpt *c;

	/* The name our DNS gave: intercepted. */
	struct intercept_config all = cfg_of(INTERCEPT_SCOPE_ALL, NULL, 0);
	memset(&s, 0, sizeof s);
	unsigned w = first_bytes(&all, right, 2, h, n, &s, &c);
	ck_assert(!(w & (INTERCEPT_SPLICE | INTERCEPT_REFUSE)));
	ck_assert(!intercept_upstream_direct(c));
	ck_assert_str_eq(s.last, "tls-intercept");
	/* The engine's own hello goes upstream first. */
	size_t k;
	ck_assert_ptr_nonnull(intercept_upstream_out(c, &k));
	ck_assert_uint_gt(k, 0);
	intercept_free(c);

	/* SNI naming another host than the address's: refused. */
	memset(&s, 0, sizeof s);
	w = first_bytes(&all, wrong, 1, h, n, &s, &c);
	ck_assert(w & INTERCEPT_REFUSE);
	ck_assert_str_eq(s.last, "tls-refuse");
	ck_assert_ptr_nonnull(strstr(s.reasons, "not a name our DNS gave"));
	intercept_free(c);

	/* A name the guest asked our DNS for is a name, not a pattern: an
	 * answer for "*.example.test" vouches for no other host. */
	const char *star[] = { "*.example.test" };
	memset(&s, 0, sizeof s);
	w = first_bytes(&all, star, 1, h, n, &s, &c);
	ck_assert(w & INTERCEPT_REFUSE);
	ck_assert_str_eq(s.last, "tls-refuse");
	intercept_free(c);

	/* Bypass: spliced, the hello unchanged. */
	struct intercept_config by = cfg_of(INTERCEPT_SCOPE_ALL, bypass, 1);
	memset(&s, 0, sizeof s);
	w = first_bytes(&by, right, 2, h, n, &s, &c);
	ck_assert(w & TLS_MITM_WANT_UP_OUT);
	const uint8_t *p = intercept_upstream_out(c, &k);
	ck_assert_uint_eq(k, n);
	ck_assert_mem_eq(p, h, n);
	intercept_upstream_out_done(c, k);
	ck_assert(intercept_want(c) & INTERCEPT_SPLICE);
	ck_assert_str_eq(s.last, "tls-splice");
	intercept_free(c);

	/* Scope "secrets": a name no secret may go to is spliced, and the
	 * audit log says so (one line per outcome). */
	uint8_t h2[4096];
	size_t n2 = hello_for("elsewhere.example", h2, sizeof h2);
	const char *else_names[] = { "elsewhere.example" };
	struct intercept_config sec = cfg_of(INTERCEPT_SCOPE_SECRETS, NULL, 0);
	memset(&s, 0, sizeof s);
	w = first_bytes(&sec, else_names, 1, h2, n2, &s, &c);
	ck_assert(w & TLS_MITM_WANT_UP_OUT);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_str_eq(s.last, "tls-splice");
	ck_assert_ptr_nonnull(strstr(s.reasons, "no secret may be sent"));
	intercept_free(c);
	/* ... and the secret's host is intercepted. */
	memset(&s, 0, sizeof s);
	w = first_bytes(&sec, right, 2, h, n, &s, &c);
	ck_assert_str_eq(s.last, "tls-intercept");
	intercept_free(c);
}
END_TEST

START_TEST(partial_hello_waits_then_decides)
{
	uint8_t h[4096];
	size_t n = hello_for(NAME, h, sizeof h);
	const char *right[] = { NAME };
	struct intercept_config all = cfg_of(INTERCEPT_SCOPE_ALL, NULL, 0);
	struct seen s = { 0 };
	struct icpt *c;
	ck_assert_int_eq(intercept_new(&all, right, 1, on_event, &s, &c), 0);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(s.n, 0);
		size_t t;
		ck_assert_int_eq(intercept_guest_in(c, h + i, 1, &t), 0);
		ck_assert_uint_eq(t, 1);
	}
	ck_assert_str_eq(s.last, "tls-intercept");
	intercept_free(c);
}
END_TEST

START_TEST(malformed_hello_refused_server_first_spliced)
{
	uint8_t bad[] = { 22, 3, 1, 0, 4, 2, 0, 0, 0 }; /* a handshake record, but a ServerHello */
	struct intercept_config all = cfg_of(INTERCEPT_SCOPE_ALL, NULL, 0);
	struct seen s = { 0 };
	struct icpt *c;
	unsigned w = first_bytes(&all, NULL, 0, bad, sizeof bad, &s, &c);
	ck_assert(w & INTERCEPT_REFUSE);
	intercept_free(c);

	/* SSH-like: the server talks first; whatever the guest says then is
	 * not intercepted. */
	memset(&s, 0, sizeof s);
	ck_assert_int_eq(intercept_new(&all, NULL, 0, on_event, &s, &c), 0);
	ck_assert(intercept_upstream_direct(c));
	intercept_server_spoke(c);
	ck_assert(intercept_want(c) & INTERCEPT_SPLICE);
	intercept_free(c);
}
END_TEST

/* ---- a whole intercepted exchange ---- */

struct pipe_end {
	br_ssl_engine_context *e;
	const char *tx;
	size_t txoff;
	char rx[8192];
	size_t rxlen;
};

/* Move TLS records between an engine end and the icpt side. */
static bool end_app(struct pipe_end *x)
{
	bool prog = false;
	unsigned st = br_ssl_engine_current_state(x->e);
	if ((st & BR_SSL_SENDAPP) && x->tx && x->tx[x->txoff]) {
		size_t len;
		unsigned char *b = br_ssl_engine_sendapp_buf(x->e, &len);
		size_t k = strlen(x->tx + x->txoff);
		k = k < len ? k : len;
		memcpy(b, x->tx + x->txoff, k);
		br_ssl_engine_sendapp_ack(x->e, k);
		br_ssl_engine_flush(x->e, 0);
		x->txoff += k;
		prog = true;
	}
	if (st & BR_SSL_RECVAPP) {
		size_t len;
		unsigned char *b = br_ssl_engine_recvapp_buf(x->e, &len);
		size_t k = sizeof x->rx - 1 - x->rxlen;
		k = k < len ? k : len;
		memcpy(x->rx + x->rxlen, b, k);
		x->rxlen += k;
		x->rx[x->rxlen] = '\0';
		br_ssl_engine_recvapp_ack(x->e, k);
		prog = prog || k > 0;
	}
	return prog;
}

/* What the server answers once it has a whole request head. */
static const char *server_reply;

static void exchange(const char *sni, const char *const *names, size_t nn, const char *request,
		     struct pipe_end *cl, struct pipe_end *sv, struct seen *s)
{
	static br_ssl_client_context cc;
	static br_x509_minimal_context xc;
	static br_ssl_server_context sc;
	static unsigned char cbuf[BR_SSL_BUFSIZE_BIDI], sbuf[BR_SSL_BUFSIZE_BIDI];
	static const char *alpn[] = { "http/1.1" };
	size_t nta;
	const br_x509_trust_anchor *ta = tls_trust_anchors(kbox_trust, &nta);
	br_ssl_client_init_full(&cc, &xc, ta, nta);
	br_ssl_engine_set_buffer(&cc.eng, cbuf, sizeof cbuf, 1);
	br_ssl_engine_set_protocol_names(&cc.eng, alpn, 1);
	ck_assert(br_ssl_client_reset(&cc, sni, 0));
	const br_x509_certificate *chain;
	size_t chain_len;
	const br_ec_private_key *key;
	ck_assert_int_eq(tls_cert_leaf(up_ca, sni, &chain, &chain_len, &key), 0);
	br_ssl_server_init_full_ec(&sc, chain, chain_len, BR_KEYTYPE_EC, key);
	br_ssl_engine_set_buffer(&sc.eng, sbuf, sizeof sbuf, 1);
	br_ssl_engine_set_protocol_names(&sc.eng, alpn, 1);
	ck_assert(br_ssl_server_reset(&sc));
	memset(cl, 0, sizeof *cl);
	memset(sv, 0, sizeof *sv);
	cl->e = &cc.eng;
	cl->tx = request;
	sv->e = &sc.eng;
	sv->tx = NULL;

	struct intercept_config cfg = cfg_of(INTERCEPT_SCOPE_SECRETS, NULL, 0);
	struct icpt *c;
	ck_assert_int_eq(intercept_new(&cfg, names, nn, on_event, s, &c), 0);
	bool answered = false;
	for (int round = 0; round < 10000; round++) {
		bool prog = end_app(cl);
		prog |= end_app(sv);
		if (!answered && strstr(sv->rx, "\r\n\r\n")) {
			sv->tx = server_reply ? server_reply : "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
			answered = true;
		}
		size_t len, t;
		unsigned char *b;
		/* client -> icpt */
		if ((b = br_ssl_engine_sendrec_buf(cl->e, &len)) && len) {
			ck_assert_int_ge(intercept_guest_in(c, b, len, &t), -EPIPE);
			if (t) {
				br_ssl_engine_sendrec_ack(cl->e, t);
				prog = true;
			}
		}
		/* icpt -> server */
		const uint8_t *o = intercept_upstream_out(c, &len);
		if (o && len) {
			unsigned char *r = br_ssl_engine_recvrec_buf(sv->e, &t);
			if (r && t) {
				size_t k = len < t ? len : t;
				memcpy(r, o, k);
				br_ssl_engine_recvrec_ack(sv->e, k);
				intercept_upstream_out_done(c, k);
				prog = true;
			}
		}
		/* server -> icpt */
		if ((b = br_ssl_engine_sendrec_buf(sv->e, &len)) && len) {
			ck_assert_int_ge(intercept_upstream_in(c, b, len, &t), -EPIPE);
			if (t) {
				br_ssl_engine_sendrec_ack(sv->e, t);
				prog = true;
			}
		}
		/* icpt -> client */
		o = intercept_guest_out(c, &len);
		if (o && len) {
			unsigned char *r = br_ssl_engine_recvrec_buf(cl->e, &t);
			if (r && t) {
				size_t k = len < t ? len : t;
				memcpy(r, o, k);
				br_ssl_engine_recvrec_ack(cl->e, k);
				intercept_guest_out_done(c, k);
				prog = true;
			}
		}
		if (!prog)
			break;
	}
	intercept_free(c);
}

START_TEST(secret_substituted_for_its_host)
{
	const char *names[] = { NAME };
	struct pipe_end cl, sv;
	struct seen s = { 0 };
	exchange(NAME, names, 1, "GET /v1 HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Bearer $KBOX_TOKEN\r\n\r\n",
		 &cl, &sv, &s);
	ck_assert_ptr_nonnull(strstr(sv.rx, "Authorization: Bearer real-token-value-1234\r\n"));
	ck_assert_ptr_null(strstr(sv.rx, "$KBOX_TOKEN"));
	ck_assert_ptr_nonnull(strstr(cl.rx, "200 OK"));
	ck_assert_ptr_null(strstr(cl.rx, "real-token"));
	ck_assert_uint_eq(s.substituted, 1);
}
END_TEST

START_TEST(placeholder_elsewhere_blocked_with_403)
{
	/* A secret allowed for this host, but the placeholder sits in the
	 * query, where substitution is off: kbox answers, nothing leaves. */
	const char *names[] = { NAME };
	struct pipe_end cl, sv;
	struct seen s = { 0 };
	exchange(NAME, names, 1, "GET /v1?k=$KBOX_TOKEN HTTP/1.1\r\nHost: api.example.test\r\n\r\n", &cl, &sv, &s);
	ck_assert_uint_eq(sv.rxlen, 0);
	ck_assert_ptr_nonnull(strstr(cl.rx, "403"));
	ck_assert_ptr_null(strstr(cl.rx, "real-token"));
	ck_assert_uint_eq(s.blocked, 1);
}
END_TEST

START_TEST(reflected_value_comes_back_as_placeholder)
{
	/* The server echoes what it got, value included, in a header and in
	 * a chunked body cut inside the value: the guest sees the
	 * placeholder, the lengths still add up. */
	const char *names[] = { NAME };
	struct pipe_end cl, sv;
	struct seen s = { 0 };
	server_reply = "HTTP/1.1 200 OK\r\nX-Echo: Bearer real-token-value-1234\r\nTransfer-Encoding: chunked\r\n\r\n"
		       "9\r\nauth=real\r\n8\r\n-token-v\r\n8;x=y\r\nalue-123\r\n2\r\n4.\r\n0\r\n\r\n";
	exchange(NAME, names, 1, "GET /v1 HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Bearer $KBOX_TOKEN\r\n\r\n",
		 &cl, &sv, &s);
	server_reply = NULL;
	ck_assert_ptr_nonnull(strstr(sv.rx, "Bearer real-token-value-1234\r\n"));
	ck_assert_ptr_nonnull(strstr(sv.rx, "Accept-Encoding: identity\r\n"));
	ck_assert_ptr_null(strstr(cl.rx, "real-token"));
	ck_assert_ptr_nonnull(strstr(cl.rx, "X-Echo: Bearer $KBOX_TOKEN**********\r\n"));
	/* De-chunk what the guest got: sizes must match the data. */
	const char *b = strstr(cl.rx, "\r\n\r\n");
	ck_assert_ptr_nonnull(b);
	b += 4;
	char body[256] = "";
	for (;;) {
		char *end;
		unsigned long n = strtoul(b, &end, 16);
		ck_assert(end[0] == '\r' && end[1] == '\n');
		if (n == 0) {
			ck_assert_str_eq(end, "\r\n\r\n");
			break;
		}
		ck_assert_uint_lt(strlen(body) + n, sizeof body);
		strncat(body, end + 2, n);
		b = end + 2 + n;
		ck_assert(b[0] == '\r' && b[1] == '\n');
		b += 2;
	}
	ck_assert_str_eq(body, "auth=$KBOX_TOKEN**********.");
	ck_assert_ptr_nonnull(strstr(s.reasons, "secret-scrubbed"));
}
END_TEST

START_TEST(compressed_response_refused_trace_405)
{
	const char *names[] = { NAME };
	struct pipe_end cl, sv;
	struct seen s = { 0 };
	server_reply = "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc";
	exchange(NAME, names, 1,
		 "GET /v1 HTTP/1.1\r\nHost: api.example.test\r\nAccept-Encoding: gzip\r\nAuthorization: Bearer "
		 "$KBOX_TOKEN\r\n\r\n",
		 &cl, &sv, &s);
	server_reply = NULL;
	ck_assert_ptr_null(strstr(sv.rx, "gzip"));
	ck_assert_ptr_nonnull(strstr(cl.rx, "HTTP/1.1 502 Bad Gateway\r\n"));
	ck_assert_ptr_nonnull(strstr(cl.rx, "Content-Encoding: gzip"));
	ck_assert_ptr_null(strstr(cl.rx, "abc"));
	ck_assert_ptr_nonnull(strstr(s.reasons, "response-refused"));

	memset(&s, 0, sizeof s);
	exchange(NAME, names, 1, "TRACE / HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Bearer $KBOX_TOKEN\r\n\r\n",
		 &cl, &sv, &s);
	ck_assert_uint_eq(sv.rxlen, 0);
	ck_assert_ptr_nonnull(strstr(cl.rx, "HTTP/1.1 405 "));
}
END_TEST

Suite *intercept_suite(void)
{
	return unit_suite_fixture("intercept", "core", setup, teardown, 60,
				  plain_http_is_spliced_byte_exact,
				  decisions_by_name,
				  partial_hello_waits_then_decides,
				  malformed_hello_refused_server_first_spliced,
				  secret_substituted_for_its_host,
				  placeholder_elsewhere_blocked_with_403,
				  reflected_value_comes_back_as_placeholder,
				  compressed_response_refused_trace_405);
}
