/* The interception engine: a BearSSL server toward the guest and a
 * BearSSL client toward the upstream, glued by a pump that moves
 * plaintext through the filter only when the destination engine can take
 * it (so every buffer stays the engines' own, fixed size).
 *
 * Phases: HELLO (hold the guest's ClientHello and check it), UPSTREAM
 * (our handshake with the upstream; the guest waits), GUEST (the held
 * hello goes into the server engine), RUN (plaintext flows). */
#include "netstack/tls_mitm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "netstack/tls_sni.h"

enum { PH_HELLO, PH_UPSTREAM, PH_GUEST, PH_RUN };

/* TLS alert descriptions (RFC 5246 7.2) we send ourselves, in clear,
 * before the guest's engine has seen a byte. */
#define ALERT_BAD_RECORD_MAC 20
#define ALERT_RECORD_OVERFLOW 22
#define ALERT_HANDSHAKE_FAILURE 40
#define ALERT_DECODE_ERROR 50
#define ALERT_PROTOCOL_VERSION 70
#define ALERT_NO_APPLICATION_PROTOCOL 120

/* Forward-secret suites only, AEAD first; no 3DES, no static RSA.  The
 * guest side can only use the ECDSA ones (our leaf is EC). */
static const uint16_t suites[] = {
	BR_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,       BR_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	BR_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,       BR_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	BR_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, BR_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	BR_TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,       BR_TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256,
	BR_TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384,       BR_TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384,
	BR_TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,          BR_TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
	BR_TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,          BR_TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
};

/* BearSSL keeps the pointer (its prototype is not const-clean). */
static const char *alpn_names[] = { "http/1.1" };

struct mitm {
	br_ssl_server_context sc;
	br_ssl_client_context cc;
	br_x509_minimal_context xc;
	unsigned char sbuf[BR_SSL_BUFSIZE_BIDI];
	unsigned char cbuf[BR_SSL_BUFSIZE_BIDI];
	const struct tls_mitm_filter_ops *ops;
	void *fctx;
	char sni[TLS_NAME_MAX + 1];
	int phase;
	uint8_t *hello; /* held guest bytes, until all went into the server engine */
	size_t hlen, hoff;
	uint8_t alert[7];
	size_t alert_len, alert_off;
	bool failed;
	char reason[TLS_MITM_REASON_MAX];
	bool guest_eof, up_eof;   /* TCP EOF seen */
	bool up_more, down_more;  /* the filter has output pending */
	bool up_fin, down_fin;    /* direction over: nothing more is forwarded */
	bool guest_drop, up_drop; /* end that side with a bare EOF: show no more output */
	const uint8_t *reply;     /* the filter's answer to the guest, while being written */
	size_t reply_len, reply_off;
	uint64_t n_up, n_down;
};

static br_ssl_engine_context *S(struct mitm *m)
{
	return &m->sc.eng;
}

static br_ssl_engine_context *C(struct mitm *m)
{
	return &m->cc.eng;
}

static const char *br_err_text(int e)
{
	switch (e) {
	case BR_ERR_X509_NOT_TRUSTED:
		return "certificate not trusted (unknown issuer)";
	case BR_ERR_X509_BAD_SERVER_NAME:
		return "certificate not valid for this name";
	case BR_ERR_X509_EXPIRED:
		return "certificate expired or not yet valid";
	case BR_ERR_X509_BAD_SIGNATURE:
		return "bad certificate signature";
	case BR_ERR_X509_NOT_CA:
		return "chain issuer is not a CA";
	case BR_ERR_X509_FORBIDDEN_KEY_USAGE:
		return "certificate key usage forbids this use";
	case BR_ERR_X509_WEAK_PUBLIC_KEY:
		return "certificate key too weak";
	case BR_ERR_X509_EMPTY_CHAIN:
		return "no certificate sent";
	case BR_ERR_X509_CRITICAL_EXTENSION:
		return "unsupported critical certificate extension";
	case BR_ERR_X509_TIME_UNKNOWN:
		return "no clock to check certificate validity";
	case BR_ERR_UNSUPPORTED_VERSION:
		return "no common TLS version (TLS 1.2 needed)";
	case BR_ERR_BAD_CIPHER_SUITE:
		return "no common cipher suite";
	case BR_ERR_BAD_MAC:
		return "bad record MAC";
	case BR_ERR_BAD_VERSION:
	case BR_ERR_BAD_LENGTH:
	case BR_ERR_TOO_LARGE:
	case BR_ERR_UNKNOWN_TYPE:
	case BR_ERR_UNEXPECTED:
	case BR_ERR_BAD_HANDSHAKE:
		return "protocol violation";
	case BR_ERR_BAD_SECRENEG:
		return "renegotiation refused";
	case BR_ERR_NO_RANDOM:
		return "no random source";
	default:
		if (e >= BR_ERR_X509_OK && e < BR_ERR_X509_OK + 64)
			return "certificate could not be verified";
		return "TLS error";
	}
}

static const char *alert_name(int a)
{
	switch (a) {
	case 0: return "close_notify";
	case 10: return "unexpected_message";
	case 20: return "bad_record_mac";
	case 22: return "record_overflow";
	case 40: return "handshake_failure";
	case 42: return "bad_certificate";
	case 43: return "unsupported_certificate";
	case 45: return "certificate_expired";
	case 46: return "certificate_unknown";
	case 47: return "illegal_parameter";
	case 48: return "unknown_ca";
	case 50: return "decode_error";
	case 51: return "decrypt_error";
	case 70: return "protocol_version";
	case 71: return "insufficient_security";
	case 80: return "internal_error";
	case 90: return "user_canceled";
	case 100: return "no_renegotiation";
	case 112: return "unrecognized_name";
	case 120: return "no_application_protocol";
	default: return "alert";
	}
}

/* One phrase for a BearSSL error code; GUEST says which side it is from,
 * for the hint that a guest rejecting our certificate does not trust the
 * kbox CA. */
static void describe(int e, bool guest, char *buf, size_t len)
{
	if (e >= BR_ERR_SEND_FATAL_ALERT) {
		int a = e - BR_ERR_SEND_FATAL_ALERT;
		snprintf(buf, len, "sent fatal alert %s (%d)", alert_name(a), a);
	} else if (e >= BR_ERR_RECV_FATAL_ALERT) {
		int a = e - BR_ERR_RECV_FATAL_ALERT;
		bool trust = guest && (a == 42 || a == 46 || a == 48);
		snprintf(buf, len, "received fatal alert %s (%d)%s", alert_name(a), a,
			 trust ? ": the client does not trust the kbox CA" : "");
	} else {
		snprintf(buf, len, "%s (BearSSL error %d)", br_err_text(e), e);
	}
}

/* The first failure wins; ALERT (if non-zero and the guest's engine has
 * not started) is sent to the guest in clear. */
__attribute__((format(printf, 3, 4))) static void fail(struct mitm *m, int alert, const char *fmt, ...)
{
	if (m->failed)
		return;
	m->failed = true;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m->reason, sizeof m->reason, fmt, ap);
	va_end(ap);
	if (alert && m->phase < PH_GUEST && !m->guest_eof) {
		const uint8_t rec[7] = { 21, 3, 3, 0, 2, 2, (uint8_t)alert };
		memcpy(m->alert, rec, sizeof rec);
		m->alert_len = sizeof rec;
	}
	free(m->hello);
	m->hello = NULL;
}

static bool finished(const struct mitm *m)
{
	return m->failed || (m->up_fin && m->down_fin && !m->reply);
}

static int pass_through(struct tls_mitm_io *io)
{
	size_t k = io->in_len < io->out_cap ? io->in_len : io->out_cap;
	if (k)
		memcpy(io->out, io->in, k);
	io->taken = io->made = k;
	return TLS_MITM_FILTER_OK;
}

static int start_upstream(struct mitm *m)
{
	uint8_t seed[32];
	if (getrandom(seed, sizeof seed, 0) != (ssize_t)sizeof seed)
		return -EIO;
	br_ssl_engine_inject_entropy(C(m), seed, sizeof seed);
	if (getrandom(seed, sizeof seed, 0) != (ssize_t)sizeof seed)
		return -EIO;
	br_ssl_engine_inject_entropy(S(m), seed, sizeof seed);
	if (!br_ssl_client_reset(&m->cc, m->sni, 0))
		return -EIO;
	m->phase = PH_UPSTREAM;
	return 0;
}

/* Judge the held bytes once they hold a whole hello (called after each
 * piece; until then it only asks for more). */
static void check_hello(struct mitm *m)
{
	struct tls_hello h;
	int st = tls_sni_parse(m->hello, m->hlen, &h);
	if (st == TLS_SNI_NEED_MORE) {
		if (m->hlen == TLS_HELLO_STREAM_MAX)
			fail(m, ALERT_DECODE_ERROR, "guest ClientHello too long");
		return;
	}
	if (st == TLS_SNI_NOT_TLS) {
		fail(m, 0, "guest did not start TLS: %s", h.why);
		return;
	}
	if (st == TLS_SNI_BAD) {
		fail(m, ALERT_DECODE_ERROR, "guest ClientHello malformed: %s", h.why);
		return;
	}
	if (!h.has_sni || h.sni_invalid) {
		fail(m, ALERT_HANDSHAKE_FAILURE, "guest ClientHello has no usable server name");
		return;
	}
	if (strcmp(h.sni, m->sni) != 0) {
		fail(m, ALERT_HANDSHAKE_FAILURE, "guest ClientHello names %s, not %s", h.sni, m->sni);
		return;
	}
	if (!h.offers_tls12) {
		fail(m, ALERT_PROTOCOL_VERSION, "%s",
		     h.tls13_only ? "client offers only TLS 1.3; interception needs TLS 1.2"
				  : "client offers no TLS 1.2 (too old); interception needs TLS 1.2");
		return;
	}
	/* A client that names protocols but not HTTP/1.1 (h2 only) would
	 * speak something the filter cannot read. */
	if (h.alpn_total > 0 && !h.alpn_http11) {
		fail(m, ALERT_NO_APPLICATION_PROTOCOL, "client offers ALPN %s but not http/1.1",
		     h.alpn_n ? h.alpn[0] : "(unprintable)");
		return;
	}
	if (start_upstream(m) < 0)
		fail(m, ALERT_HANDSHAKE_FAILURE, "no random source for the TLS engines");
}

static bool step_upstream_hs(struct mitm *m)
{
	unsigned st = br_ssl_engine_current_state(C(m));
	char why[160];
	if (st & BR_SSL_CLOSED) {
		describe(br_ssl_engine_last_error(C(m)), false, why, sizeof why);
		fail(m, ALERT_HANDSHAKE_FAILURE, "upstream TLS for %s failed: %s", m->sni, why);
		return true;
	}
	if (st & (BR_SSL_SENDAPP | BR_SSL_RECVAPP)) {
		if (!br_ssl_server_reset(&m->sc)) {
			fail(m, ALERT_HANDSHAKE_FAILURE, "guest TLS engine did not start");
			return true;
		}
		m->phase = PH_GUEST;
		return true;
	}
	if (m->up_eof) {
		fail(m, ALERT_HANDSHAKE_FAILURE, "upstream %s closed the connection during the handshake", m->sni);
		return true;
	}
	return false;
}

static bool inject_hello(struct mitm *m)
{
	bool progress = false;
	while (m->hoff < m->hlen) {
		size_t len;
		unsigned char *buf = br_ssl_engine_recvrec_buf(S(m), &len);
		if (!buf)
			break;
		size_t k = m->hlen - m->hoff < len ? m->hlen - m->hoff : len;
		memcpy(buf, m->hello + m->hoff, k);
		br_ssl_engine_recvrec_ack(S(m), k);
		m->hoff += k;
		progress = true;
	}
	if (m->hoff == m->hlen) {
		free(m->hello);
		m->hello = NULL;
		progress = true;
	}
	return progress;
}

/* The alert for a guest handshake that BearSSL ended without one (a
 * record it could not read, a bad MAC): sent in clear, as every record
 * of ours is until our Finished. */
static int guest_alert_for(int err)
{
	switch (err) {
	case BR_ERR_BAD_MAC:
		return ALERT_BAD_RECORD_MAC;
	case BR_ERR_TOO_LARGE:
		return ALERT_RECORD_OVERFLOW;
	case BR_ERR_UNSUPPORTED_VERSION:
		return ALERT_PROTOCOL_VERSION;
	case BR_ERR_BAD_LENGTH:
	case BR_ERR_BAD_VERSION:
	case BR_ERR_UNKNOWN_TYPE:
		return ALERT_DECODE_ERROR;
	default:
		return ALERT_HANDSHAKE_FAILURE;
	}
}

static bool step_guest_hs(struct mitm *m)
{
	unsigned st = br_ssl_engine_current_state(S(m));
	char why[160];
	if (st & BR_SSL_CLOSED) {
		int err = br_ssl_engine_last_error(S(m));
		describe(err, true, why, sizeof why);
		fail(m, 0, "guest TLS for %s failed: %s", m->sni, why);
		/* A client whose handshake failed must learn it now, not at its
		 * own timeout: unless an alert already passed either way (or the
		 * guest is gone), send one before the connection closes. */
		if (err != BR_ERR_OK && err < BR_ERR_RECV_FATAL_ALERT && !m->guest_eof) {
			const uint8_t rec[7] = { 21, 3, 3, 0, 2, 2, (uint8_t)guest_alert_for(err) };
			memcpy(m->alert, rec, sizeof rec);
			m->alert_len = sizeof rec;
			m->alert_off = 0;
		}
		return true;
	}
	if (st & (BR_SSL_SENDAPP | BR_SSL_RECVAPP)) {
		m->phase = PH_RUN;
		return true;
	}
	if (m->guest_eof && !m->hello) {
		fail(m, 0, "guest closed the connection during the TLS handshake for %s (does it trust the kbox CA?)",
		     m->sni);
		return true;
	}
	return false;
}

/* One side's input ended (CLEAN: with close_notify): the other side is
 * ended the same way, and nothing more is forwarded either way. */
static void end_from(struct mitm *m, br_ssl_engine_context *other, bool *other_drop, bool clean)
{
	m->up_fin = m->down_fin = true;
	if (clean)
		br_ssl_engine_close(other);
	else
		*other_drop = true;
}

/* Call the filter once for one direction.  FROM gives plaintext, TO
 * takes it.  Returns true if anything moved or changed. */
static bool move(struct mitm *m, bool up)
{
	br_ssl_engine_context *from = up ? S(m) : C(m), *to = up ? C(m) : S(m);
	bool *more = up ? &m->up_more : &m->down_more;
	unsigned fs = br_ssl_engine_current_state(from), ts = br_ssl_engine_current_state(to);
	bool input_over = (fs & BR_SSL_CLOSED) || (up ? m->guest_eof : m->up_eof);
	size_t ilen = 0, ocap = 0;
	const uint8_t *in = (fs & BR_SSL_RECVAPP) ? br_ssl_engine_recvapp_buf(from, &ilen) : NULL;
	bool eof = !in && input_over;
	if (!in && !eof && !*more)
		return false;
	if (!(ts & BR_SSL_SENDAPP)) {
		/* The destination is gone: nothing more can go this way.  The
		 * other direction sees its source closed and ends the
		 * connection once what it holds was delivered. */
		if (ts & BR_SSL_CLOSED) {
			*(up ? &m->up_fin : &m->down_fin) = true;
			return true;
		}
		return false; /* backpressure: wait until its records are sent */
	}
	uint8_t *out = br_ssl_engine_sendapp_buf(to, &ocap);
	struct tls_mitm_io io = { .in = in, .in_len = ilen, .eof = eof, .out = out, .out_cap = ocap };
	int (*fn)(void *, struct tls_mitm_io *) = m->ops ? (up ? m->ops->up : m->ops->down) : NULL;
	int rc = fn ? fn(m->fctx, &io) : pass_through(&io);
	if (io.taken > ilen || io.made > ocap || (rc == TLS_MITM_FILTER_REPLY && !io.reply && io.reply_len)) {
		fail(m, 0, "filter broke its contract (%s)", up ? "up" : "down");
		return true;
	}
	if (io.taken)
		br_ssl_engine_recvapp_ack(from, io.taken);
	if (io.made) {
		br_ssl_engine_sendapp_ack(to, io.made);
		br_ssl_engine_flush(to, 0);
		*(up ? &m->n_up : &m->n_down) += io.made;
	}
	if (rc < 0) {
		io.reason[sizeof io.reason - 1] = '\0';
		fail(m, 0, "%s", io.reason[0] ? io.reason : "the filter refused the stream");
		return true;
	}
	*more = rc == TLS_MITM_FILTER_MORE;
	if (rc == TLS_MITM_FILTER_REPLY) {
		m->reply = io.reply;
		m->reply_len = io.reply_len;
		m->reply_off = 0;
		m->up_fin = m->down_fin = true;
		br_ssl_engine_close(C(m));
		return true;
	}
	if (eof && !*more) {
		bool clean = (fs & BR_SSL_CLOSED) != 0;
		end_from(m, to, up ? &m->up_drop : &m->guest_drop, clean);
		return true;
	}
	return io.taken || io.made;
}

static bool write_reply(struct mitm *m)
{
	bool progress = false;
	while (m->reply && !m->guest_drop) {
		if (m->reply_off == m->reply_len) {
			br_ssl_engine_close(S(m));
			m->reply = NULL;
			return true;
		}
		size_t cap;
		uint8_t *out = br_ssl_engine_sendapp_buf(S(m), &cap);
		if (!out)
			break;
		size_t k = m->reply_len - m->reply_off < cap ? m->reply_len - m->reply_off : cap;
		memcpy(out, m->reply + m->reply_off, k);
		br_ssl_engine_sendapp_ack(S(m), k);
		br_ssl_engine_flush(S(m), 0);
		m->reply_off += k;
		m->n_down += k;
		progress = true;
	}
	if (m->reply && m->guest_drop)
		m->reply = NULL;
	return progress;
}

static bool step_run(struct mitm *m)
{
	char why[160];
	for (int side = 0; side < 2; side++) {
		br_ssl_engine_context *e = side ? C(m) : S(m);
		int err = br_ssl_engine_last_error(e);
		if ((br_ssl_engine_current_state(e) & BR_SSL_CLOSED) && err != BR_ERR_OK) {
			describe(err, side == 0, why, sizeof why);
			fail(m, 0, "%s TLS for %s failed: %s", side ? "upstream" : "guest", m->sni, why);
			return true;
		}
	}
	bool progress = false;
	if (!m->up_fin)
		progress |= move(m, true);
	if (!m->down_fin && !m->failed)
		progress |= move(m, false);
	if (m->reply && !m->failed)
		progress |= write_reply(m);
	return progress;
}

static void pump(struct mitm *m)
{
	bool progress = true;
	while (progress && !m->failed) {
		progress = false;
		if (m->phase == PH_UPSTREAM)
			progress |= step_upstream_hs(m);
		if (m->phase >= PH_GUEST && m->hello && !m->failed)
			progress |= inject_hello(m);
		if (m->phase == PH_GUEST && !m->failed)
			progress |= step_guest_hs(m);
		if (m->phase == PH_RUN && !m->failed && !finished(m))
			progress |= step_run(m);
	}
}

int tls_mitm_new(const struct tls_mitm_config *cfg, const char *sni, void *filter_ctx, struct mitm **out)
{
	char name[TLS_NAME_MAX + 1];
	if (!cfg || !cfg->ca || !cfg->trust || !sni || tls_sni_name_normalize(sni, strlen(sni), name) < 0)
		return -EINVAL;
	const br_x509_certificate *chain;
	size_t chain_len;
	const br_ec_private_key *key;
	int rc = tls_cert_leaf(cfg->ca, name, &chain, &chain_len, &key);
	if (rc < 0)
		return rc;
	struct mitm *m = calloc(1, sizeof *m);
	if (!m)
		return -ENOMEM;
	m->hello = malloc(TLS_HELLO_STREAM_MAX);
	if (!m->hello) {
		free(m);
		return -ENOMEM;
	}
	memcpy(m->sni, name, sizeof name);
	m->ops = cfg->filter;
	m->fctx = filter_ctx;

	/* Guest side: our leaf is signed by an EC CA and its key only signs,
	 * so only ECDHE_ECDSA suites can be chosen. */
	br_ssl_server_init_full_ec(&m->sc, chain, chain_len, BR_KEYTYPE_EC, key);
	br_ssl_server_set_single_ec(&m->sc, chain, chain_len, key, BR_KEYTYPE_SIGN, BR_KEYTYPE_EC, br_ec_get_default(),
				    br_ecdsa_sign_asn1_get_default());
	br_ssl_engine_set_versions(S(m), BR_TLS12, BR_TLS12);
	br_ssl_engine_set_suites(S(m), suites, sizeof suites / sizeof suites[0]);
	br_ssl_engine_set_protocol_names(S(m), alpn_names, 1);
	br_ssl_engine_set_buffer(S(m), m->sbuf, sizeof m->sbuf, 1);
	br_ssl_engine_add_flags(S(m), BR_OPT_NO_RENEGOTIATION | BR_OPT_ENFORCE_SERVER_PREFERENCES |
					      BR_OPT_FAIL_ON_ALPN_MISMATCH);

	/* Upstream side: verified against the anchors for the SNI name. */
	size_t nta;
	const br_x509_trust_anchor *ta = tls_trust_anchors(cfg->trust, &nta);
	br_ssl_client_init_full(&m->cc, &m->xc, ta, nta);
	br_ssl_engine_set_versions(C(m), BR_TLS12, BR_TLS12);
	br_ssl_engine_set_suites(C(m), suites, sizeof suites / sizeof suites[0]);
	br_ssl_engine_set_protocol_names(C(m), alpn_names, 1);
	br_ssl_engine_set_buffer(C(m), m->cbuf, sizeof m->cbuf, 1);
	br_ssl_engine_add_flags(C(m), BR_OPT_NO_RENEGOTIATION | BR_OPT_FAIL_ON_ALPN_MISMATCH);
	*out = m;
	return 0;
}

static int feed(struct mitm *m, br_ssl_engine_context *e, unsigned want, const uint8_t *buf, size_t n,
		size_t *taken)
{
	*taken = 0;
	while (*taken < n && (tls_mitm_want(m) & want)) {
		size_t len;
		unsigned char *rb = br_ssl_engine_recvrec_buf(e, &len);
		if (!rb)
			break;
		size_t k = n - *taken < len ? n - *taken : len;
		memcpy(rb, buf + *taken, k);
		br_ssl_engine_recvrec_ack(e, k);
		*taken += k;
		pump(m);
	}
	return 0;
}

int tls_mitm_guest_in(struct mitm *m, const uint8_t *buf, size_t n, size_t *taken)
{
	*taken = 0;
	if (finished(m) || m->guest_eof)
		return -EPIPE;
	if (m->phase == PH_HELLO) {
		size_t k = TLS_HELLO_STREAM_MAX - m->hlen < n ? TLS_HELLO_STREAM_MAX - m->hlen : n;
		memcpy(m->hello + m->hlen, buf, k);
		m->hlen += k;
		*taken = k;
		check_hello(m);
		pump(m);
		return 0;
	}
	return feed(m, S(m), TLS_MITM_WANT_GUEST_IN, buf, n, taken);
}

int tls_mitm_upstream_in(struct mitm *m, const uint8_t *buf, size_t n, size_t *taken)
{
	*taken = 0;
	if (finished(m) || m->up_eof)
		return -EPIPE;
	return feed(m, C(m), TLS_MITM_WANT_UP_IN, buf, n, taken);
}

const uint8_t *tls_mitm_guest_out(struct mitm *m, size_t *n)
{
	*n = 0;
	if (m->alert_off < m->alert_len) {
		*n = m->alert_len - m->alert_off;
		return m->alert + m->alert_off;
	}
	if (m->failed || m->guest_drop || m->phase < PH_GUEST)
		return NULL;
	return br_ssl_engine_sendrec_buf(S(m), n);
}

void tls_mitm_guest_out_done(struct mitm *m, size_t n)
{
	if (m->alert_off < m->alert_len) {
		size_t left = m->alert_len - m->alert_off;
		m->alert_off += n < left ? n : left;
		return;
	}
	if (m->failed || m->guest_drop || m->phase < PH_GUEST || n == 0)
		return;
	size_t len;
	if (br_ssl_engine_sendrec_buf(S(m), &len) && n <= len) {
		br_ssl_engine_sendrec_ack(S(m), n);
		pump(m);
	}
}

const uint8_t *tls_mitm_upstream_out(struct mitm *m, size_t *n)
{
	*n = 0;
	if (m->failed || m->up_drop || m->phase < PH_UPSTREAM)
		return NULL;
	return br_ssl_engine_sendrec_buf(C(m), n);
}

void tls_mitm_upstream_out_done(struct mitm *m, size_t n)
{
	if (m->failed || m->up_drop || m->phase < PH_UPSTREAM || n == 0)
		return;
	size_t len;
	if (br_ssl_engine_sendrec_buf(C(m), &len) && n <= len) {
		br_ssl_engine_sendrec_ack(C(m), n);
		pump(m);
	}
}

void tls_mitm_close_guest(struct mitm *m)
{
	if (m->guest_eof)
		return;
	if (m->phase == PH_HELLO)
		fail(m, 0, "guest closed the connection before its ClientHello was complete");
	else if (m->phase == PH_UPSTREAM)
		fail(m, 0, "guest closed the connection while kbox verified %s", m->sni);
	m->guest_eof = true;
	pump(m);
}

void tls_mitm_close_upstream(struct mitm *m)
{
	m->up_eof = true;
	pump(m);
}

unsigned tls_mitm_want(const struct mitm *m)
{
	unsigned w = 0;
	if (m->alert_off < m->alert_len)
		w |= TLS_MITM_WANT_GUEST_OUT;
	if (!m->failed && !m->guest_drop && m->phase >= PH_GUEST &&
	    (br_ssl_engine_current_state(&m->sc.eng) & BR_SSL_SENDREC))
		w |= TLS_MITM_WANT_GUEST_OUT;
	if (!m->failed && !m->up_drop && m->phase >= PH_UPSTREAM &&
	    (br_ssl_engine_current_state(&m->cc.eng) & BR_SSL_SENDREC))
		w |= TLS_MITM_WANT_UP_OUT;
	if (finished(m)) {
		if (!(w & (TLS_MITM_WANT_GUEST_OUT | TLS_MITM_WANT_UP_OUT)))
			w |= TLS_MITM_DONE;
		return w;
	}
	if (m->phase == PH_HELLO && !m->guest_eof && m->hlen < TLS_HELLO_STREAM_MAX)
		w |= TLS_MITM_WANT_GUEST_IN;
	if (m->phase >= PH_GUEST && !m->hello && !m->guest_eof && !m->up_fin &&
	    (br_ssl_engine_current_state(&m->sc.eng) & BR_SSL_RECVREC))
		w |= TLS_MITM_WANT_GUEST_IN;
	if (m->phase >= PH_UPSTREAM && !m->up_eof && !m->down_fin &&
	    (br_ssl_engine_current_state(&m->cc.eng) & BR_SSL_RECVREC))
		w |= TLS_MITM_WANT_UP_IN;
	return w;
}

const char *tls_mitm_error(const struct mitm *m)
{
	return m->failed ? m->reason : NULL;
}

bool tls_mitm_established(const struct mitm *m)
{
	return m->phase == PH_RUN;
}

void tls_mitm_counts(const struct mitm *m, uint64_t *up, uint64_t *down)
{
	*up = m->n_up;
	*down = m->n_down;
}

void tls_mitm_free(struct mitm *m)
{
	if (!m)
		return;
	free(m->hello);
	/* The buffers held plaintext after substitution (real secrets) and
	 * the session keys. */
	explicit_bzero(m, sizeof *m);
	free(m);
}
