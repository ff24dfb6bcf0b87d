/* Per-connection interception decisions and pump; see intercept.h. */
#include "netstack/intercept.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netstack/http_resp.h"
#include "netstack/http_sub.h"
#include "netstack/policy.h"
#include "netstack/tls_sni.h"

enum intercept_mode { M_SNIFF, M_DRAIN, M_SPLICED, M_MITM, M_REFUSED };

struct icpt {
	const struct intercept_config *cfg;
	intercept_event_fn cb;
	void *ctx;
	enum intercept_mode mode;
	char **names;
	size_t n_names;
	uint8_t held[TLS_HELLO_STREAM_MAX];
	size_t held_len, held_off; /* bytes held; how many went on (drain or engine) */
	bool guest_fin;            /* EOF from the guest while held bytes remain */
	bool server_spoke;
	char sni[TLS_NAME_MAX + 1];
	struct tls_mitm_config mcfg;
	struct tls_mitm_filter_ops ops;
	struct mitm *m;
	struct hs *hs;
	struct hr *hr;
	bool fail_reported;
};

static void emit(struct icpt *c, const char *event, bool allow, const char *reason)
{
	if (!c->cb)
		return;
	struct intercept_event ev = {
		.event = event,
		.sni = c->sni[0] ? c->sni : NULL,
		.reason = reason,
		.allow = allow,
	};
	c->cb(c->ctx, &ev);
}

bool intercept_bypassed(const struct intercept_config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_bypass; i++)
		if (policy_pattern_match(cfg->bypass[i], name))
			return true;
	return false;
}

static bool some_secret_for(const struct intercept_config *cfg, const char *name)
{
	size_t n = cfg->secrets ? secrets_count(cfg->secrets) : 0;
	for (size_t i = 0; i < n; i++)
		if (secrets_hosts_match(secrets_at(cfg->secrets, i), name))
			return true;
	return false;
}

static bool dns_gave(const struct icpt *c, const char *name)
{
	for (size_t i = 0; i < c->n_names; i++)
		if (policy_host_match(c->names[i], false, name))
			return true;
	return false;
}

static void hs_event(void *ctx, const struct http_sub_audit *a)
{
	struct icpt *c = ctx;
	if (!c->cb)
		return;
	char where[160];
	snprintf(where, sizeof where, "%s%s%s%s", a->where ? a->where : "", a->encoding ? " (" : "",
		 a->encoding ? a->encoding : "", a->encoding ? ")" : "");
	struct intercept_event ev = {
		.event = !a->secret ? "request-refused"
			 : a->decision == HTTP_SUB_SUBSTITUTED ? "secret-substituted" : "secret-blocked",
		.sni = c->sni,
		.secret = a->secret,
		.where = where[0] ? where : NULL,
		.reason = a->reason,
		.status = a->status,
		.allow = a->decision == HTTP_SUB_SUBSTITUTED,
	};
	c->cb(c->ctx, &ev);
}

/* The request filter: http_sub behind tls_mitm's filter interface. */
static int filter_up(void *ctx, struct tls_mitm_io *io)
{
	struct icpt *c = ctx;
	size_t taken = 0;
	if (io->in_len > 0 && http_sub_feed(c->hs, io->in, io->in_len, &taken) < 0) {
		snprintf(io->reason, sizeof io->reason, "out of memory in the request filter");
		return -ENOMEM;
	}
	io->taken = taken;
	if (io->eof && taken == io->in_len)
		http_sub_finish(c->hs);
	const uint8_t *p;
	size_t len;
	http_sub_output(c->hs, &p, &len);
	size_t k = len < io->out_cap ? len : io->out_cap;
	if (k)
		memcpy(io->out, p, k);
	http_sub_consume(c->hs, k);
	io->made = k;
	enum http_sub_state st = http_sub_state(c->hs);
	if (st == HTTP_SUB_ERROR) {
		snprintf(io->reason, sizeof io->reason, "out of memory in the request filter");
		return -ENOMEM;
	}
	if (len > k)
		return TLS_MITM_FILTER_MORE;
	if (st == HTTP_SUB_CLOSE_AFTER_REPLY) {
		http_sub_reply(c->hs, &io->reply, &io->reply_len);
		snprintf(io->reason, sizeof io->reason, "request to %.200s refused by kbox", c->sni);
		return TLS_MITM_FILTER_REPLY;
	}
	return taken < io->in_len && st == HTTP_SUB_OPEN ? TLS_MITM_FILTER_MORE : TLS_MITM_FILTER_OK;
}

/* What the response filter is told about the request it answers. */
static bool next_request(void *ctx, struct http_resp_req *out)
{
	struct icpt *c = ctx;
	struct http_sub_req q;
	if (!http_sub_pop_request(c->hs, &q))
		return false;
	*out = (struct http_resp_req){ .head = q.head, .upgrade = q.upgrade, .identity = q.identity };
	return true;
}

static void hr_event_cb(void *ctx, const struct http_resp_event *e)
{
	struct icpt *c = ctx;
	if (!c->cb)
		return;
	struct intercept_event ev = {
		.event = e->event,
		.sni = c->sni,
		.secret = e->secret,
		.where = "response",
		.reason = e->reason,
		.status = strcmp(e->event, "response-refused") == 0 ? 502 : 0,
		.allow = strcmp(e->event, "response-refused") != 0,
	};
	c->cb(c->ctx, &ev);
}

/* The response filter: http_resp behind tls_mitm's filter interface. */
static int filter_down(void *ctx, struct tls_mitm_io *io)
{
	struct icpt *c = ctx;
	size_t taken = 0;
	const uint8_t *p;
	size_t len;
	/* New input only once the last output is out: the pending output
	 * stays about one record, never moved around in a large buffer. */
	http_resp_output(c->hr, &p, &len);
	if (len == 0 && io->in_len > 0 && http_resp_feed(c->hr, io->in, io->in_len, &taken) < 0) {
		snprintf(io->reason, sizeof io->reason, "out of memory in the response filter");
		return -ENOMEM;
	}
	io->taken = taken;
	if (io->eof && taken == io->in_len)
		http_resp_finish(c->hr);
	http_resp_output(c->hr, &p, &len);
	size_t k = len < io->out_cap ? len : io->out_cap;
	if (k)
		memcpy(io->out, p, k);
	http_resp_consume(c->hr, k);
	io->made = k;
	enum http_resp_state st = http_resp_state(c->hr);
	if (len > k)
		return TLS_MITM_FILTER_MORE;
	if (st == HTTP_RESP_ERROR || st == HTTP_RESP_FAILED) {
		snprintf(io->reason, sizeof io->reason, "%s", http_resp_reason(c->hr));
		return -EPROTO;
	}
	if (st == HTTP_RESP_CLOSE_AFTER_REPLY) {
		http_resp_reply(c->hr, &io->reply, &io->reply_len);
		return TLS_MITM_FILTER_REPLY;
	}
	return taken < io->in_len ? TLS_MITM_FILTER_MORE : TLS_MITM_FILTER_OK;
}

int intercept_new(const struct intercept_config *cfg, const char *const *names, size_t n, intercept_event_fn cb, void *ctx,
		  struct icpt **out)
{
	if (!cfg || !cfg->ca || !cfg->trust)
		return -EINVAL;
	struct icpt *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->cfg = cfg;
	c->cb = cb;
	c->ctx = ctx;
	if (n) {
		c->names = calloc(n, sizeof *c->names);
		if (!c->names) {
			free(c);
			return -ENOMEM;
		}
		for (size_t i = 0; i < n; i++) {
			if (!(c->names[i] = strdup(names[i]))) {
				c->n_names = i;
				intercept_free(c);
				return -ENOMEM;
			}
		}
		c->n_names = n;
	}
	*out = c;
	return 0;
}

static void to_drain(struct icpt *c)
{
	c->mode = M_DRAIN;
	c->held_off = 0;
}

static void start_mitm(struct icpt *c)
{
	if (http_sub_new(c->cfg->secrets, c->sni, hs_event, c, &c->hs) < 0) {
		emit(c, "tls-refuse", false, "cannot set up the request filter");
		c->mode = M_REFUSED;
		return;
	}
	if (http_resp_new(c->cfg->secrets, c->sni, some_secret_for(c->cfg, c->sni), next_request, hr_event_cb, c,
		   &c->hr) < 0) {
		emit(c, "tls-refuse", false, "cannot set up the response filter");
		c->mode = M_REFUSED;
		return;
	}
	c->ops.up = filter_up;
	c->ops.down = filter_down;
	c->mcfg.ca = c->cfg->ca;
	c->mcfg.trust = c->cfg->trust;
	c->mcfg.filter = &c->ops;
	int rc = tls_mitm_new(&c->mcfg, c->sni, c, &c->m);
	if (rc < 0) {
		char why[96];
		snprintf(why, sizeof why, "cannot start interception: %s", strerror(-rc));
		emit(c, "tls-refuse", false, why);
		c->mode = M_REFUSED;
		return;
	}
	c->mode = M_MITM;
	c->held_off = 0;
	emit(c, "tls-intercept", true, NULL);
}

/* Look at the held bytes; maybe leave SNIFF. */
static void decide(struct icpt *c)
{
	struct tls_hello h;
	int st = tls_sni_parse(c->held, c->held_len, &h);
	if (st == TLS_SNI_NEED_MORE && !c->guest_fin && !c->server_spoke)
		return;
	if (c->server_spoke || st == TLS_SNI_NOT_TLS || st == TLS_SNI_NEED_MORE) {
		/* Not (yet) TLS when the talk turned: nothing to intercept. */
		to_drain(c);
		return;
	}
	if (st == TLS_SNI_BAD) {
		emit(c, "tls-refuse", false, h.why ? h.why : "malformed ClientHello");
		c->mode = M_REFUSED;
		return;
	}
	if (!h.has_sni || h.sni_invalid) {
		emit(c, "tls-splice", true, h.sni_invalid ? "invalid server name: not intercepted"
							 : "no server name: not intercepted");
		to_drain(c);
		return;
	}
	snprintf(c->sni, sizeof c->sni, "%s", h.sni);
	if (intercept_bypassed(c->cfg, c->sni)) {
		emit(c, "tls-splice", true, "on the bypass list");
		to_drain(c);
		return;
	}
	if (c->cfg->scope == INTERCEPT_SCOPE_SECRETS && !some_secret_for(c->cfg, c->sni)) {
		/* No secret may go there: nothing to gain by looking. */
		emit(c, "tls-splice", true, "no secret may be sent to this name (scope secrets): not intercepted");
		to_drain(c);
		return;
	}
	if (!dns_gave(c, c->sni)) {
		char why[TLS_NAME_MAX + 96];
		snprintf(why, sizeof why, "server name %s is not a name our DNS gave for the address dialled",
			 c->sni);
		emit(c, "tls-refuse", false, why);
		c->mode = M_REFUSED;
		return;
	}
	start_mitm(c);
}

/* Move held bytes into the engine. */
static void feed_held(struct icpt *c)
{
	while (c->mode == M_MITM && c->held_off < c->held_len) {
		size_t t = 0;
		if (tls_mitm_guest_in(c->m, c->held + c->held_off, c->held_len - c->held_off, &t) < 0 || t == 0)
			break;
		c->held_off += t;
	}
	if (c->mode == M_MITM && c->held_off == c->held_len && c->guest_fin) {
		c->guest_fin = false;
		tls_mitm_close_guest(c->m);
	}
}

static void note_failure(struct icpt *c)
{
	const char *e = c->m ? tls_mitm_error(c->m) : NULL;
	if (e && !c->fail_reported) {
		c->fail_reported = true;
		emit(c, "tls-fail", false, e);
	}
}

int intercept_guest_in(struct icpt *c, const uint8_t *buf, size_t n, size_t *taken)
{
	*taken = 0;
	switch (c->mode) {
	case M_SNIFF: {
		size_t room = sizeof c->held - c->held_len;
		size_t k = n < room ? n : room;
		memcpy(c->held + c->held_len, buf, k);
		c->held_len += k;
		*taken = k;
		decide(c);
		if (c->mode == M_SNIFF && c->held_len == sizeof c->held) {
			/* tls_sni bounds a hello below this; cannot happen, but
			 * never wait forever. */
			emit(c, "tls-refuse", false, "ClientHello too long");
			c->mode = M_REFUSED;
		}
		feed_held(c);
		return 0;
	}
	case M_MITM: {
		if (c->held_off < c->held_len)
			return 0; /* held bytes first */
		int rc = tls_mitm_guest_in(c->m, buf, n, taken);
		note_failure(c);
		return rc;
	}
	case M_DRAIN:
	case M_SPLICED:
		return 0; /* the caller sends these itself once spliced */
	default:
		return -EPIPE;
	}
}

const uint8_t *intercept_guest_out(struct icpt *c, size_t *n)
{
	*n = 0;
	if (c->mode != M_MITM)
		return NULL;
	feed_held(c);
	return tls_mitm_guest_out(c->m, n);
}

void intercept_guest_out_done(struct icpt *c, size_t n)
{
	if (c->mode == M_MITM) {
		tls_mitm_guest_out_done(c->m, n);
		feed_held(c);
		note_failure(c);
	}
}

int intercept_upstream_in(struct icpt *c, const uint8_t *buf, size_t n, size_t *taken)
{
	*taken = 0;
	if (c->mode != M_MITM)
		return -EPIPE;
	int rc = tls_mitm_upstream_in(c->m, buf, n, taken);
	feed_held(c);
	note_failure(c);
	return rc;
}

const uint8_t *intercept_upstream_out(struct icpt *c, size_t *n)
{
	*n = 0;
	if (c->mode == M_DRAIN) {
		*n = c->held_len - c->held_off;
		return *n ? c->held + c->held_off : NULL;
	}
	if (c->mode != M_MITM)
		return NULL;
	feed_held(c);
	return tls_mitm_upstream_out(c->m, n);
}

void intercept_upstream_out_done(struct icpt *c, size_t n)
{
	if (c->mode == M_DRAIN) {
		size_t left = c->held_len - c->held_off;
		c->held_off += n < left ? n : left;
		if (c->held_off == c->held_len)
			c->mode = M_SPLICED;
		return;
	}
	if (c->mode == M_MITM) {
		tls_mitm_upstream_out_done(c->m, n);
		feed_held(c);
		note_failure(c);
	}
}

void intercept_close_guest(struct icpt *c)
{
	if (c->mode == M_SNIFF) {
		c->guest_fin = true;
		decide(c);
	}
	if (c->mode == M_MITM) {
		if (c->held_off < c->held_len)
			c->guest_fin = true; /* after the held bytes */
		else
			tls_mitm_close_guest(c->m);
	}
	/* Drained or spliced: the caller forwards the EOF itself. */
}

void intercept_close_upstream(struct icpt *c)
{
	if (c->mode == M_MITM) {
		tls_mitm_close_upstream(c->m);
		note_failure(c);
	}
}

void intercept_server_spoke(struct icpt *c)
{
	if (c->mode == M_SNIFF) {
		c->server_spoke = true;
		decide(c);
	}
}

bool intercept_upstream_direct(const struct icpt *c)
{
	return c->mode != M_MITM;
}

unsigned intercept_want(const struct icpt *c)
{
	switch (c->mode) {
	case M_SNIFF:
		return TLS_MITM_WANT_GUEST_IN;
	case M_DRAIN:
		return c->held_off < c->held_len ? TLS_MITM_WANT_UP_OUT : INTERCEPT_SPLICE;
	case M_SPLICED:
		return INTERCEPT_SPLICE;
	case M_REFUSED:
		return INTERCEPT_REFUSE;
	case M_MITM:
		return tls_mitm_want(c->m);
	}
	return INTERCEPT_REFUSE;
}

void intercept_free(struct icpt *c)
{
	if (!c)
		return;
	tls_mitm_free(c->m);
	http_sub_free(c->hs);
	http_resp_free(c->hr);
	for (size_t i = 0; i < c->n_names; i++)
		free(c->names[i]);
	free(c->names);
	explicit_bzero(c->held, sizeof c->held);
	free(c);
}
