/* The interception engine between a real BearSSL client (trusting only
 * the kbox CA) and a real BearSSL server (with a leaf from a separate
 * "upstream" test CA, trusted through tls_trust), all in memory: pass-
 * through and modifying filters, 1-byte delivery, 1 MiB both ways with
 * backpressure, bad upstream certificates, a TLS-1.3-only hello,
 * garbage, a filter's own answer, and clean closes. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "lib/grow.h"
#include "netstack/tls_cert.h"
#include "netstack/tls_mitm.h"
#include "netstack/tls_sni.h"
#include "netstack/tls_trust.h"
#include "tests/lib/unit_suite.h"

#define NAME "api.example.test"

static struct tls_cert_ca *kbox_ca, *up_ca, *other_ca;
static struct tls_trust *up_trust, *kbox_trust;

static void setup(void)
{
	time_t now = time(NULL);
	ck_assert_int_eq(tls_cert_ca_generate("kbox test CA", now, &kbox_ca), 0);
	ck_assert_int_eq(tls_cert_ca_generate("upstream test CA", now, &up_ca), 0);
	ck_assert_int_eq(tls_cert_ca_generate("unknown test CA", now, &other_ca), 0);
	size_t len;
	const unsigned char *der;
	ck_assert_int_eq(tls_trust_new(&up_trust), 0);
	der = tls_cert_ca_der(up_ca, &len);
	ck_assert_int_eq(tls_trust_add_der(up_trust, der, len), 0);
	ck_assert_int_eq(tls_trust_new(&kbox_trust), 0);
	der = tls_cert_ca_der(kbox_ca, &len);
	ck_assert_int_eq(tls_trust_add_der(kbox_trust, der, len), 0);
}

static void teardown(void)
{
	tls_trust_free(up_trust);
	tls_trust_free(kbox_trust);
	tls_cert_ca_free(kbox_ca);
	tls_cert_ca_free(up_ca);
	tls_cert_ca_free(other_ca);
}

/* One TLS end (the test client or the test server) with its plaintext
 * to send and what it received. */
struct end {
	br_ssl_engine_context *e;
	const uint8_t *tx;
	size_t txlen, txoff;
	uint8_t *rx;
	size_t rxlen, rxcap;
	bool close_when_sent; /* send close_notify once tx is out */
};

struct rig {
	br_ssl_client_context cc;
	br_x509_minimal_context xc;
	br_ssl_server_context sc;
	unsigned char cbuf[BR_SSL_BUFSIZE_BIDI], sbuf[BR_SSL_BUFSIZE_BIDI];
	struct end client, server;
	struct mitm *m;
	size_t chunk;      /* most bytes moved per transfer */
	size_t up_sent;    /* ciphertext bytes the mitm sent upstream */
	bool stall_client; /* the client reads nothing (backpressure) */
};

static const char *alpn_both[] = { "h2", "http/1.1" };

static void rig_init(struct rig *r, const struct tls_mitm_filter_ops *ops, void *fctx, struct tls_cert_ca *server_ca,
		     const char *server_name)
{
	memset(r, 0, sizeof *r);
	r->chunk = 1 << 20;
	size_t nta;
	const br_x509_trust_anchor *ta = tls_trust_anchors(kbox_trust, &nta);
	br_ssl_client_init_full(&r->cc, &r->xc, ta, nta);
	br_ssl_engine_set_buffer(&r->cc.eng, r->cbuf, sizeof r->cbuf, 1);
	br_ssl_engine_set_protocol_names(&r->cc.eng, alpn_both, 2);
	ck_assert(br_ssl_client_reset(&r->cc, NAME, 0));
	r->client.e = &r->cc.eng;

	const br_x509_certificate *chain;
	size_t chain_len;
	const br_ec_private_key *key;
	ck_assert_int_eq(tls_cert_leaf(server_ca, server_name, &chain, &chain_len, &key), 0);
	br_ssl_server_init_full_ec(&r->sc, chain, chain_len, BR_KEYTYPE_EC, key);
	br_ssl_engine_set_buffer(&r->sc.eng, r->sbuf, sizeof r->sbuf, 1);
	br_ssl_engine_set_protocol_names(&r->sc.eng, alpn_both + 1, 1);
	ck_assert(br_ssl_server_reset(&r->sc));
	r->server.e = &r->sc.eng;

	struct tls_mitm_config cfg = { .ca = kbox_ca, .trust = up_trust, .filter = ops };
	ck_assert_int_eq(tls_mitm_new(&cfg, NAME, fctx, &r->m), 0);
}

static void rig_free(struct rig *r)
{
	tls_mitm_free(r->m);
	free(r->client.rx);
	free(r->server.rx);
}

static size_t min3(size_t a, size_t b, size_t c)
{
	size_t k = a < b ? a : b;
	return k < c ? k : c;
}

/* The end's application: write what is left of tx, read into rx. */
static bool app_step(struct end *x, bool reading)
{
	bool progress = false;
	unsigned st = br_ssl_engine_current_state(x->e);
	size_t len;
	if ((st & BR_SSL_SENDAPP) && x->txoff < x->txlen) {
		uint8_t *buf = br_ssl_engine_sendapp_buf(x->e, &len);
		size_t k = x->txlen - x->txoff < len ? x->txlen - x->txoff : len;
		memcpy(buf, x->tx + x->txoff, k);
		br_ssl_engine_sendapp_ack(x->e, k);
		br_ssl_engine_flush(x->e, 0);
		x->txoff += k;
		progress = true;
	} else if ((st & BR_SSL_SENDAPP) && x->close_when_sent) {
		br_ssl_engine_close(x->e);
		x->close_when_sent = false;
		progress = true;
	}
	st = br_ssl_engine_current_state(x->e);
	if (reading && (st & BR_SSL_RECVAPP)) {
		uint8_t *buf = br_ssl_engine_recvapp_buf(x->e, &len);
		ck_assert_int_eq(grow_array(&x->rx, &x->rxcap, x->rxlen + len, 1, 4096, 0), 0);
		memcpy(x->rx + x->rxlen, buf, len);
		x->rxlen += len;
		br_ssl_engine_recvapp_ack(x->e, len);
		progress = true;
	}
	return progress;
}

/* Ciphertext from an end into the mitm. */
static bool to_mitm(struct rig *r, struct end *x, bool guest)
{
	size_t len, taken = 0;
	uint8_t *buf = br_ssl_engine_sendrec_buf(x->e, &len);
	if (!buf)
		return false;
	len = len < r->chunk ? len : r->chunk;
	int rc = guest ? tls_mitm_guest_in(r->m, buf, len, &taken) : tls_mitm_upstream_in(r->m, buf, len, &taken);
	if (rc == -EPIPE)
		taken = len; /* written to a socket the other end closed */
	if (taken)
		br_ssl_engine_sendrec_ack(x->e, taken);
	return taken > 0;
}

/* Ciphertext from the mitm into an end. */
static bool from_mitm(struct rig *r, struct end *x, bool guest)
{
	size_t n, len;
	const uint8_t *out = guest ? tls_mitm_guest_out(r->m, &n) : tls_mitm_upstream_out(r->m, &n);
	if (!out || n == 0)
		return false;
	uint8_t *buf = br_ssl_engine_recvrec_buf(x->e, &len);
	if (!buf)
		return false;
	size_t k = min3(n, len, r->chunk);
	memcpy(buf, out, k);
	br_ssl_engine_recvrec_ack(x->e, k);
	if (guest) {
		tls_mitm_guest_out_done(r->m, k);
	} else {
		tls_mitm_upstream_out_done(r->m, k);
		r->up_sent += k;
	}
	return true;
}

/* Run until nothing moves; returns the number of rounds. */
static int rig_run(struct rig *r)
{
	int rounds = 0;
	bool progress = true;
	while (progress && rounds < 2000000) {
		progress = false;
		progress |= app_step(&r->client, !r->stall_client);
		progress |= app_step(&r->server, true);
		progress |= to_mitm(r, &r->client, true);
		progress |= from_mitm(r, &r->server, false);
		progress |= to_mitm(r, &r->server, false);
		progress |= from_mitm(r, &r->client, true);
		rounds++;
	}
	ck_assert_int_lt(rounds, 2000000);
	return rounds;
}

static const char req[] = "GET /v1/models HTTP/1.1\r\nHost: " NAME "\r\nx-secret: PLACEHOLDER\r\n"
			  "accept: */*\r\n\r\n";
static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

static void exchange(struct rig *r)
{
	r->client.tx = (const uint8_t *)req;
	r->client.txlen = strlen(req);
	r->server.tx = (const uint8_t *)resp;
	r->server.txlen = strlen(resp);
	rig_run(r);
}

START_TEST(pass_through)
{
	struct rig *r = malloc(sizeof *r);
	rig_init(r, NULL, NULL, up_ca, NAME);
	exchange(r);
	ck_assert_ptr_null(tls_mitm_error(r->m));
	ck_assert(tls_mitm_established(r->m));
	ck_assert_uint_eq(r->server.rxlen, strlen(req));
	ck_assert_mem_eq(r->server.rx, req, strlen(req));
	ck_assert_uint_eq(r->client.rxlen, strlen(resp));
	ck_assert_mem_eq(r->client.rx, resp, strlen(resp));
	/* the guest was offered h2 too, and got http/1.1: TLS 1.2 only */
	ck_assert_str_eq(br_ssl_engine_get_selected_protocol(&r->cc.eng), "http/1.1");
	ck_assert_uint_eq(br_ssl_engine_get_version(&r->cc.eng), BR_TLS12);
	uint64_t up, down;
	tls_mitm_counts(r->m, &up, &down);
	ck_assert_uint_eq(up, strlen(req));
	ck_assert_uint_eq(down, strlen(resp));

	/* the server ends with close_notify: the client gets one too */
	r->server.close_when_sent = true;
	rig_run(r);
	ck_assert(br_ssl_engine_current_state(&r->cc.eng) & BR_SSL_CLOSED);
	ck_assert_int_eq(br_ssl_engine_last_error(&r->cc.eng), BR_ERR_OK);
	ck_assert_uint_eq(tls_mitm_want(r->m), TLS_MITM_DONE);
	ck_assert_ptr_null(tls_mitm_error(r->m));
	rig_free(r);
	free(r);
}
END_TEST

START_TEST(one_byte_pieces)
{
	struct rig *r = malloc(sizeof *r);
	rig_init(r, NULL, NULL, up_ca, NAME);
	r->chunk = 1;
	exchange(r);
	ck_assert_ptr_null(tls_mitm_error(r->m));
	ck_assert_uint_eq(r->server.rxlen, strlen(req));
	ck_assert_mem_eq(r->server.rx, req, strlen(req));
	ck_assert_uint_eq(r->client.rxlen, strlen(resp));
	/* the client closes: the server gets close_notify */
	r->client.close_when_sent = true;
	rig_run(r);
	ck_assert(br_ssl_engine_current_state(&r->sc.eng) & BR_SSL_CLOSED);
	ck_assert_int_eq(br_ssl_engine_last_error(&r->sc.eng), BR_ERR_OK);
	ck_assert(tls_mitm_want(r->m) & TLS_MITM_DONE);
	rig_free(r);
	free(r);
}
END_TEST

/* A filter that works line by line over the request head: it holds a
 * partial line, replaces the x-secret value (so the length changes) and
 * upper-cases the accept field name; the body passes as is. */
struct subst {
	uint8_t line[1024];
	size_t len;
	uint8_t out[2048];
	size_t out_len, out_off;
	bool body;
};

static int subst_up(void *ctx, struct tls_mitm_io *io)
{
	struct subst *s = ctx;
	io->taken = io->made = 0;
	for (;;) {
		if (s->out_off < s->out_len) {
			size_t k = s->out_len - s->out_off;
			k = k < io->out_cap - io->made ? k : io->out_cap - io->made;
			memcpy(io->out + io->made, s->out + s->out_off, k);
			io->made += k;
			s->out_off += k;
			if (s->out_off < s->out_len)
				return TLS_MITM_FILTER_MORE;
		}
		if (io->taken == io->in_len)
			return TLS_MITM_FILTER_OK;
		if (s->body) {
			size_t k = io->in_len - io->taken;
			k = k < io->out_cap - io->made ? k : io->out_cap - io->made;
			memcpy(io->out + io->made, io->in + io->taken, k);
			io->made += k;
			io->taken += k;
			return TLS_MITM_FILTER_OK;
		}
		uint8_t c = io->in[io->taken++];
		if (s->len == sizeof s->line) {
			snprintf(io->reason, sizeof io->reason, "header line too long");
			return -EMSGSIZE;
		}
		s->line[s->len++] = c;
		if (c != '\n')
			continue;
		s->out_off = 0;
		if (s->len > 10 && memcmp(s->line, "x-secret: ", 10) == 0) {
			s->out_len = (size_t)snprintf((char *)s->out, sizeof s->out,
						      "x-secret: the-real-value-0123456789\r\n");
		} else {
			memcpy(s->out, s->line, s->len);
			s->out_len = s->len;
			if (s->len > 7 && memcmp(s->out, "accept:", 7) == 0)
				memcpy(s->out, "ACCEPT:", 7);
		}
		s->body = s->len == 2;
		s->len = 0;
	}
}

static const struct tls_mitm_filter_ops subst_ops = { .up = subst_up };

START_TEST(modifying_filter)
{
	static const char want[] = "GET /v1/models HTTP/1.1\r\nHost: " NAME
				   "\r\nx-secret: the-real-value-0123456789\r\nACCEPT: */*\r\n\r\n";
	for (int pass = 0; pass < 2; pass++) {
		struct rig *r = malloc(sizeof *r);
		struct subst s = { 0 };
		rig_init(r, &subst_ops, &s, up_ca, NAME);
		r->chunk = pass ? 1 : 1 << 20;
		exchange(r);
		ck_assert_ptr_null(tls_mitm_error(r->m));
		ck_assert_uint_eq(r->server.rxlen, strlen(want));
		ck_assert_mem_eq(r->server.rx, want, strlen(want));
		ck_assert_uint_eq(r->client.rxlen, strlen(resp));
		rig_free(r);
		free(r);
	}
}
END_TEST

static uint8_t *pattern(size_t n, unsigned seed)
{
	uint8_t *p = malloc(n);
	ck_assert_ptr_nonnull(p);
	uint32_t x = seed;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t)(x >> 16);
	}
	return p;
}

START_TEST(large_both_ways)
{
	const size_t big = 1 << 20;
	uint8_t *up = pattern(big, 1), *down = pattern(big, 2);
	struct rig *r = malloc(sizeof *r);
	rig_init(r, NULL, NULL, up_ca, NAME);
	r->chunk = 4000;
	r->client.tx = up;
	r->client.txlen = big;
	r->server.tx = down;
	r->server.txlen = big;
	/* The client reads nothing at first: the mitm must stop taking
	 * from the upstream once its buffers are full, not grow. */
	r->stall_client = true;
	rig_run(r);
	ck_assert_ptr_null(tls_mitm_error(r->m));
	ck_assert_uint_eq(r->server.rxlen, big);
	ck_assert_uint_lt(r->server.txoff, big);
	ck_assert(!(tls_mitm_want(r->m) & TLS_MITM_WANT_UP_IN));
	r->stall_client = false;
	rig_run(r);
	ck_assert_ptr_null(tls_mitm_error(r->m));
	ck_assert_uint_eq(r->server.rxlen, big);
	ck_assert_mem_eq(r->server.rx, up, big);
	ck_assert_uint_eq(r->client.rxlen, big);
	ck_assert_mem_eq(r->client.rx, down, big);
	rig_free(r);
	free(r);
	free(up);
	free(down);
}
END_TEST

/* The upstream's certificate does not verify: the guest's handshake
 * fails with an alert, and the server never gets a byte of plaintext. */
static void bad_upstream(struct tls_cert_ca *ca, const char *name, const char *why)
{
	struct rig *r = malloc(sizeof *r);
	rig_init(r, NULL, NULL, ca, name);
	exchange(r);
	ck_assert_ptr_nonnull(tls_mitm_error(r->m));
	ck_assert_msg(strstr(tls_mitm_error(r->m), why), "%s", tls_mitm_error(r->m));
	ck_assert_uint_eq(r->server.rxlen, 0);
	ck_assert_uint_eq(r->client.rxlen, 0);
	ck_assert(br_ssl_engine_current_state(&r->cc.eng) & BR_SSL_CLOSED);
	ck_assert_int_eq(br_ssl_engine_last_error(&r->cc.eng), BR_ERR_RECV_FATAL_ALERT + 40);
	ck_assert(!tls_mitm_established(r->m));
	ck_assert(tls_mitm_want(r->m) & TLS_MITM_DONE);
	rig_free(r);
	free(r);
}

START_TEST(upstream_wrong_name)
{
	bad_upstream(up_ca, "other.example.test", "not valid for this name");
}
END_TEST

START_TEST(upstream_unknown_ca)
{
	bad_upstream(other_ca, NAME, "not trusted");
}
END_TEST

/* A hand-made ClientHello: SNI NAME, supported_versions VERS (count
 * NVERS, 0 for none), legacy version LEGACY. */
static size_t craft_hello(uint8_t *out, uint16_t legacy, const uint16_t *vers, size_t nvers)
{
	uint8_t body[512];
	size_t n = 0;
	body[n++] = (uint8_t)(legacy >> 8);
	body[n++] = (uint8_t)legacy;
	memset(body + n, 0x42, 32);
	n += 32;
	body[n++] = 0;                                 /* session id */
	body[n++] = 0, body[n++] = 2;                  /* suites */
	body[n++] = 0x13, body[n++] = 0x01;            /* TLS_AES_128_GCM_SHA256 */
	body[n++] = 1, body[n++] = 0;                  /* null compression */
	size_t extlen_at = n;
	n += 2;
	size_t name_len = strlen(NAME);
	body[n++] = 0, body[n++] = 0; /* server_name */
	body[n++] = 0, body[n++] = (uint8_t)(name_len + 5);
	body[n++] = 0, body[n++] = (uint8_t)(name_len + 3);
	body[n++] = 0;
	body[n++] = 0, body[n++] = (uint8_t)name_len;
	memcpy(body + n, NAME, name_len);
	n += name_len;
	if (nvers) {
		body[n++] = 0, body[n++] = 43;
		body[n++] = 0, body[n++] = (uint8_t)(1 + 2 * nvers);
		body[n++] = (uint8_t)(2 * nvers);
		for (size_t i = 0; i < nvers; i++) {
			body[n++] = (uint8_t)(vers[i] >> 8);
			body[n++] = (uint8_t)vers[i];
		}
	}
	body[extlen_at] = (uint8_t)((n - extlen_at - 2) >> 8);
	body[extlen_at + 1] = (uint8_t)(n - extlen_at - 2);
	uint8_t hdr[9] = { 22, 3, 1, (uint8_t)((n + 4) >> 8), (uint8_t)(n + 4), 1, 0, (uint8_t)(n >> 8), (uint8_t)n };
	memcpy(out, hdr, 9);
	memcpy(out + 9, body, n);
	return n + 9;
}

START_TEST(tls13_only_client)
{
	uint8_t hello[600];
	static const uint16_t v13[] = { 0x0304 };
	size_t n = craft_hello(hello, 0x0303, v13, 1);
	struct mitm *m;
	struct tls_mitm_config cfg = { .ca = kbox_ca, .trust = up_trust };
	ck_assert_int_eq(tls_mitm_new(&cfg, NAME, NULL, &m), 0);
	size_t taken;
	/* in pieces */
	ck_assert_int_eq(tls_mitm_guest_in(m, hello, 10, &taken), 0);
	ck_assert_uint_eq(taken, 10);
	ck_assert_ptr_null(tls_mitm_error(m));
	ck_assert_int_eq(tls_mitm_guest_in(m, hello + 10, n - 10, &taken), 0);
	ck_assert_ptr_nonnull(tls_mitm_error(m));
	ck_assert_ptr_nonnull(strstr(tls_mitm_error(m), "only TLS 1.3"));
	/* protocol_version alert for the guest, nothing for the upstream */
	size_t k;
	const uint8_t *out = tls_mitm_guest_out(m, &k);
	static const uint8_t alert[] = { 21, 3, 3, 0, 2, 2, 70 };
	ck_assert_uint_eq(k, sizeof alert);
	ck_assert_mem_eq(out, alert, sizeof alert);
	tls_mitm_guest_out_done(m, k);
	ck_assert_ptr_null(tls_mitm_upstream_out(m, &k));
	ck_assert_uint_eq(tls_mitm_want(m), TLS_MITM_DONE);
	ck_assert_int_eq(tls_mitm_guest_in(m, hello, 1, &taken), -EPIPE);
	tls_mitm_free(m);

	/* the same client offering 1.2 as well gets through to the upstream */
	static const uint16_t both[] = { 0x0304, 0x0303 };
	n = craft_hello(hello, 0x0303, both, 2);
	ck_assert_int_eq(tls_mitm_new(&cfg, NAME, NULL, &m), 0);
	ck_assert_int_eq(tls_mitm_guest_in(m, hello, n, &taken), 0);
	ck_assert_ptr_null(tls_mitm_error(m));
	ck_assert_ptr_nonnull(tls_mitm_upstream_out(m, &k));
	ck_assert_uint_gt(k, 0);
	ck_assert(tls_mitm_want(m) & TLS_MITM_WANT_UP_OUT);
	tls_mitm_free(m);
}
END_TEST

START_TEST(sni_mismatch_and_garbage)
{
	uint8_t hello[600];
	size_t n = craft_hello(hello, 0x0303, NULL, 0), taken, k;
	struct mitm *m;
	struct tls_mitm_config cfg = { .ca = kbox_ca, .trust = up_trust };
	ck_assert_int_eq(tls_mitm_new(&cfg, "other.example.test", NULL, &m), 0);
	ck_assert_int_eq(tls_mitm_guest_in(m, hello, n, &taken), 0);
	ck_assert_ptr_nonnull(strstr(tls_mitm_error(m), "names " NAME));
	ck_assert_ptr_null(tls_mitm_upstream_out(m, &k));
	tls_mitm_free(m);

	ck_assert_int_eq(tls_mitm_new(&cfg, "bad_name.test", NULL, &m), -EINVAL);
	ck_assert_int_eq(tls_mitm_new(&cfg, "10.0.0.1", NULL, &m), -EINVAL);

	/* plain HTTP, random bytes, and a truncated hello with an EOF */
	static const char http[] = "GET / HTTP/1.1\r\n\r\n";
	ck_assert_int_eq(tls_mitm_new(&cfg, NAME, NULL, &m), 0);
	ck_assert_int_eq(tls_mitm_guest_in(m, (const uint8_t *)http, sizeof http - 1, &taken), 0);
	ck_assert_ptr_nonnull(strstr(tls_mitm_error(m), "did not start TLS"));
	ck_assert_ptr_null(tls_mitm_guest_out(m, &k));
	ck_assert_uint_eq(tls_mitm_want(m), TLS_MITM_DONE);
	tls_mitm_free(m);

	for (int i = 0; i < 200; i++) {
		uint8_t junk[3000];
		ck_assert_int_eq(getrandom(junk, sizeof junk, 0), (ssize_t)sizeof junk);
		junk[0] = 22;
		junk[1] = 3;
		ck_assert_int_eq(tls_mitm_new(&cfg, NAME, NULL, &m), 0);
		size_t off = 0;
		while (off < sizeof junk && tls_mitm_guest_in(m, junk + off, sizeof junk - off, &taken) == 0 && taken)
			off += taken;
		if (!tls_mitm_error(m))
			tls_mitm_close_guest(m);
		ck_assert_ptr_nonnull(tls_mitm_error(m));
		while ((tls_mitm_guest_out(m, &k), k))
			tls_mitm_guest_out_done(m, k);
		ck_assert_uint_eq(tls_mitm_want(m), TLS_MITM_DONE);
		tls_mitm_free(m);
	}
}
END_TEST

/* A client that offers h2 only is refused before anything goes upstream. */
START_TEST(h2_only_client)
{
	struct rig *r = malloc(sizeof *r);
	rig_init(r, NULL, NULL, up_ca, NAME);
	br_ssl_engine_set_protocol_names(&r->cc.eng, alpn_both, 1);
	ck_assert(br_ssl_client_reset(&r->cc, NAME, 0));
	exchange(r);
	ck_assert_ptr_nonnull(tls_mitm_error(r->m));
	ck_assert_ptr_nonnull(strstr(tls_mitm_error(r->m), "ALPN h2 but not http/1.1"));
	ck_assert_int_eq(br_ssl_engine_last_error(&r->cc.eng), BR_ERR_RECV_FATAL_ALERT + 120);
	ck_assert_uint_eq(r->up_sent, 0);
	ck_assert_uint_eq(r->server.rxlen, 0);
	rig_free(r);
	free(r);
}
END_TEST

/* A client whose suites BearSSL's server cannot serve with an EC leaf. */
START_TEST(no_common_suite)
{
	static const uint16_t rsa_only[] = { BR_TLS_RSA_WITH_AES_128_GCM_SHA256 };
	struct rig *r = malloc(sizeof *r);
	rig_init(r, NULL, NULL, up_ca, NAME);
	br_ssl_engine_set_suites(&r->cc.eng, rsa_only, 1);
	ck_assert(br_ssl_client_reset(&r->cc, NAME, 0));
	exchange(r);
	ck_assert_ptr_nonnull(tls_mitm_error(r->m));
	ck_assert_ptr_nonnull(strstr(tls_mitm_error(r->m), "sent fatal alert handshake_failure"));
	/* BearSSL's own alert reached the client */
	ck_assert_int_eq(br_ssl_engine_last_error(&r->cc.eng), BR_ERR_RECV_FATAL_ALERT + 40);
	ck_assert_uint_eq(r->server.rxlen, 0);
	rig_free(r);
	free(r);
}
END_TEST

/* A guest that does not trust the kbox CA: the reason says so. */
START_TEST(guest_distrusts_kbox)
{
	struct rig *r = malloc(sizeof *r);
	rig_init(r, NULL, NULL, up_ca, NAME);
	size_t nta;
	const br_x509_trust_anchor *ta = tls_trust_anchors(up_trust, &nta);
	br_ssl_client_init_full(&r->cc, &r->xc, ta, nta);
	br_ssl_engine_set_buffer(&r->cc.eng, r->cbuf, sizeof r->cbuf, 1);
	ck_assert(br_ssl_client_reset(&r->cc, NAME, 0));
	exchange(r);
	ck_assert_int_eq(br_ssl_engine_last_error(&r->cc.eng), BR_ERR_X509_NOT_TRUSTED);
	/* BearSSL's client just closes (curl and python send an alert first) */
	ck_assert_ptr_null(tls_mitm_error(r->m));
	tls_mitm_close_guest(r->m);
	ck_assert_ptr_nonnull(tls_mitm_error(r->m));
	ck_assert_msg(strstr(tls_mitm_error(r->m), "trust the kbox CA"), "%s", tls_mitm_error(r->m));
	ck_assert_uint_eq(r->server.rxlen, 0);
	ck_assert(tls_mitm_want(r->m) & TLS_MITM_DONE);
	rig_free(r);
	free(r);
}
END_TEST

/* The upstream answers with garbage: the guest gets handshake_failure. */
START_TEST(upstream_garbage)
{
	uint8_t hello[600], junk[2000];
	size_t n = craft_hello(hello, 0x0303, NULL, 0), taken, k;
	struct mitm *m;
	struct tls_mitm_config cfg = { .ca = kbox_ca, .trust = up_trust };
	for (int i = 0; i < 50; i++) {
		ck_assert_int_eq(tls_mitm_new(&cfg, NAME, NULL, &m), 0);
		ck_assert_int_eq(tls_mitm_guest_in(m, hello, n, &taken), 0);
		ck_assert_uint_eq(taken, n);
		while (tls_mitm_upstream_out(m, &k) && k)
			tls_mitm_upstream_out_done(m, k);
		ck_assert_int_eq(getrandom(junk, sizeof junk, 0), (ssize_t)sizeof junk);
		junk[0] = (uint8_t)(i & 1 ? 22 : junk[0]);
		size_t off = 0;
		while (off < sizeof junk && tls_mitm_upstream_in(m, junk + off, sizeof junk - off, &taken) == 0 && taken)
			off += taken;
		if (!tls_mitm_error(m))
			tls_mitm_close_upstream(m);
		ck_assert_ptr_nonnull(tls_mitm_error(m));
		ck_assert_ptr_nonnull(strstr(tls_mitm_error(m), "upstream"));
		const uint8_t *out = tls_mitm_guest_out(m, &k);
		ck_assert_uint_eq(k, 7);
		ck_assert_uint_eq(out[6], 40);
		tls_mitm_guest_out_done(m, k);
		ck_assert_uint_eq(tls_mitm_want(m), TLS_MITM_DONE);
		tls_mitm_free(m);
	}
}
END_TEST

/* Garbage once the guest's handshake is under way. */
START_TEST(garbage_after_hello)
{
	struct rig *r = malloc(sizeof *r);
	rig_init(r, NULL, NULL, up_ca, NAME);
	rig_run(r);
	ck_assert(tls_mitm_established(r->m));
	uint8_t junk[300];
	memset(junk, 0x17, sizeof junk); /* application_data records with absurd lengths */
	size_t taken;
	tls_mitm_guest_in(r->m, junk, sizeof junk, &taken);
	rig_run(r);
	ck_assert_ptr_nonnull(tls_mitm_error(r->m));
	ck_assert_ptr_nonnull(strstr(tls_mitm_error(r->m), "guest TLS"));
	ck_assert_uint_eq(r->server.rxlen, 0);
	ck_assert(tls_mitm_want(r->m) & TLS_MITM_DONE);
	rig_free(r);
	free(r);
}
END_TEST

/* A record BearSSL cannot read while the guest's handshake is under way
 * (its hello answered, the rest not come): BearSSL ends that handshake
 * without an alert; kbox sends one at once, so the client does not wait
 * for its own timeout (busybox wget did), and the reason is kept. */
START_TEST(broken_guest_handshake_gets_an_alert)
{
	struct rig *r = malloc(sizeof *r);
	rig_init(r, NULL, NULL, up_ca, NAME);
	ck_assert(to_mitm(r, &r->client, true)); /* the client's hello */
	for (int i = 0; i < 10000; i++) {
		size_t k;
		if (tls_mitm_guest_out(r->m, &k) && k)
			break; /* the answer to the guest's hello */
		bool p = app_step(&r->server, true);
		p |= from_mitm(r, &r->server, false);
		p |= to_mitm(r, &r->server, false);
		ck_assert(p);
	}
	ck_assert_ptr_null(tls_mitm_error(r->m));
	static const uint8_t junk[] = { 0x63, 3, 3, 0, 1, 0 };
	size_t taken;
	tls_mitm_guest_in(r->m, junk, sizeof junk, &taken);
	ck_assert_ptr_nonnull(tls_mitm_error(r->m));
	ck_assert_msg(strstr(tls_mitm_error(r->m), "guest TLS for"), "%s", tls_mitm_error(r->m));
	size_t k;
	const uint8_t *out = tls_mitm_guest_out(r->m, &k);
	ck_assert_uint_eq(k, 7);
	ck_assert(out[0] == 21 && out[1] == 3 && out[2] == 3 && out[3] == 0 && out[4] == 2 && out[5] == 2);
	tls_mitm_guest_out_done(r->m, k);
	ck_assert_uint_eq(tls_mitm_want(r->m), TLS_MITM_DONE);
	ck_assert_uint_eq(r->server.rxlen, 0);
	rig_free(r);
	free(r);
}
END_TEST

/* A filter that answers the guest itself (as the secret filter does for
 * a placeholder bound for a host that may not get it). */
static const char forbidden[] = "HTTP/1.1 403 Forbidden\r\nContent-Length: 3\r\nConnection: close\r\n\r\nno\n";

static int refuse_up(void *ctx, struct tls_mitm_io *io)
{
	io->taken = io->in_len;
	io->made = 0;
	io->reply = (const uint8_t *)forbidden;
	io->reply_len = strlen(forbidden);
	return TLS_MITM_FILTER_REPLY;
}

static const struct tls_mitm_filter_ops refuse_ops = { .up = refuse_up };

START_TEST(filter_reply)
{
	struct rig *r = malloc(sizeof *r);
	rig_init(r, &refuse_ops, NULL, up_ca, NAME);
	r->client.tx = (const uint8_t *)req;
	r->client.txlen = strlen(req);
	rig_run(r);
	ck_assert_ptr_null(tls_mitm_error(r->m));
	ck_assert_uint_eq(r->server.rxlen, 0);
	ck_assert_uint_eq(r->client.rxlen, strlen(forbidden));
	ck_assert_mem_eq(r->client.rx, forbidden, strlen(forbidden));
	/* the guest got close_notify, the upstream too */
	ck_assert(br_ssl_engine_current_state(&r->cc.eng) & BR_SSL_CLOSED);
	ck_assert_int_eq(br_ssl_engine_last_error(&r->cc.eng), BR_ERR_OK);
	ck_assert(br_ssl_engine_current_state(&r->sc.eng) & BR_SSL_CLOSED);
	ck_assert(tls_mitm_want(r->m) & TLS_MITM_DONE);
	rig_free(r);
	free(r);
}
END_TEST

/* A down filter that holds the whole response until the upstream ends. */
struct hold {
	uint8_t buf[65536];
	size_t len, off;
};

static int hold_down(void *ctx, struct tls_mitm_io *io)
{
	struct hold *h = ctx;
	if (io->in_len > sizeof h->buf - h->len)
		return -ENOSPC;
	if (io->in_len)
		memcpy(h->buf + h->len, io->in, io->in_len);
	h->len += io->in_len;
	io->taken = io->in_len;
	io->made = 0;
	if (!io->eof)
		return TLS_MITM_FILTER_OK;
	size_t k = h->len - h->off < io->out_cap ? h->len - h->off : io->out_cap;
	memcpy(io->out, h->buf + h->off, k);
	h->off += k;
	io->made = k;
	return h->off < h->len ? TLS_MITM_FILTER_MORE : TLS_MITM_FILTER_OK;
}

static const struct tls_mitm_filter_ops hold_ops = { .down = hold_down };

/* The upstream answers and closes while the guest is still uploading:
 * what the down filter held is delivered before the guest's close. */
START_TEST(close_while_both_busy)
{
	const size_t big = 200000;
	uint8_t *up = pattern(big, 3), *down = pattern(40000, 4);
	struct hold *h = calloc(1, sizeof *h);
	struct rig *r = malloc(sizeof *r);
	rig_init(r, &hold_ops, h, up_ca, NAME);
	r->chunk = 3000;
	r->client.tx = up;
	r->client.txlen = big;
	r->server.tx = down;
	r->server.txlen = 40000;
	r->server.close_when_sent = true;
	rig_run(r);
	ck_assert_ptr_null(tls_mitm_error(r->m));
	ck_assert_uint_eq(r->client.rxlen, 40000);
	ck_assert_mem_eq(r->client.rx, down, 40000);
	ck_assert(br_ssl_engine_current_state(&r->cc.eng) & BR_SSL_CLOSED);
	ck_assert_int_eq(br_ssl_engine_last_error(&r->cc.eng), BR_ERR_OK);
	ck_assert(tls_mitm_want(r->m) & TLS_MITM_DONE);
	rig_free(r);
	free(r);
	free(h);
	free(up);
	free(down);
}
END_TEST

/* The upstream ends with a bare TCP EOF: the guest sees a bare EOF too
 * (no close_notify), so a truncated response stays visible. */
START_TEST(upstream_eof_is_not_a_close_notify)
{
	struct rig *r = malloc(sizeof *r);
	rig_init(r, NULL, NULL, up_ca, NAME);
	exchange(r);
	tls_mitm_close_upstream(r->m);
	rig_run(r);
	ck_assert_ptr_null(tls_mitm_error(r->m));
	ck_assert_uint_eq(tls_mitm_want(r->m), TLS_MITM_DONE);
	ck_assert(!(br_ssl_engine_current_state(&r->cc.eng) & BR_SSL_CLOSED));
	ck_assert_uint_eq(r->client.rxlen, strlen(resp));
	rig_free(r);
	free(r);
}
END_TEST

START_TEST(trust_files)
{
	char path[] = "/tmp/kbox-trust-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	const char *pem = tls_cert_ca_pem(up_ca);
	const char *pem2 = tls_cert_ca_pem(other_ca);
	ck_assert_int_eq(write(fd, "junk before\n", 12), 12);
	ck_assert_int_eq(write(fd, pem, strlen(pem)), (ssize_t)strlen(pem));
	ck_assert_int_eq(write(fd, pem2, strlen(pem2)), (ssize_t)strlen(pem2));
	close(fd);
	struct tls_trust *t;
	char err[256];
	ck_assert_int_eq(tls_trust_load("", path, &t, err, sizeof err), 0);
	size_t n;
	const br_x509_trust_anchor *ta = tls_trust_anchors(t, &n);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(ta[0].flags, BR_X509_TA_CA);
	ck_assert_int_eq(ta[0].pkey.key_type, BR_KEYTYPE_EC);
	tls_trust_free(t);

	/* the host's bundle, when there is one, loads RSA and EC anchors */
	if (access(TLS_TRUST_DEFAULT_BUNDLE, R_OK) == 0) {
		ck_assert_int_eq(tls_trust_load(NULL, path, &t, err, sizeof err), 0);
		ta = tls_trust_anchors(t, &n);
		ck_assert_uint_gt(n, 50);
		bool rsa = false, ec = false;
		for (size_t i = 0; i < n; i++) {
			rsa |= ta[i].pkey.key_type == BR_KEYTYPE_RSA;
			ec |= ta[i].pkey.key_type == BR_KEYTYPE_EC;
		}
		ck_assert(rsa && ec);
		tls_trust_free(t);
	}

	/* broken files say what is wrong */
	fd = open(path, O_WRONLY | O_TRUNC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "not a pem\n", 10), 10);
	close(fd);
	ck_assert_int_eq(tls_trust_load("", path, &t, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "no PEM certificate"));
	fd = open(path, O_WRONLY | O_TRUNC);
	static const char bad[] = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
	ck_assert_int_eq(write(fd, bad, sizeof bad - 1), (ssize_t)sizeof bad - 1);
	close(fd);
	ck_assert_int_eq(tls_trust_load("", path, &t, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "could not be used"));
	unlink(path);
	ck_assert_int_eq(tls_trust_load("", path, &t, err, sizeof err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, path));
}
END_TEST

Suite *tls_mitm_suite(void)
{
	return unit_suite_fixture("tls_mitm", "mitm", setup, teardown, 120,
				  pass_through, one_byte_pieces,
				  modifying_filter, large_both_ways,
				  upstream_wrong_name, upstream_unknown_ca,
				  tls13_only_client, sni_mismatch_and_garbage,
				  garbage_after_hello,
				  broken_guest_handshake_gets_an_alert,
				  h2_only_client, no_common_suite,
				  guest_distrusts_kbox, upstream_garbage,
				  filter_reply,
				  upstream_eof_is_not_a_close_notify,
				  close_while_both_busy, trust_files);
}
