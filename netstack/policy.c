/* Egress policy: address classes, rule parsing and decisions.  See
 * policy.h for the order of a decision and docs/network.md for the user's
 * view of it. */
#include "netstack/policy.h"
#include "lib/errbuf.h"
#include "lib/grow.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A blocked range.  host_only ranges reach the host itself (loopback,
 * "this network"), so a domain exception opens them only for
 * POLICY_HOST_NAME: otherwise a name that resolves to 127.0.0.1 would be a
 * way into the host's loopback. */
struct policy_class {
	uint8_t family, plen;
	uint8_t b[16];
	const char *label; /* "class:NAME", as the audit log shows it */
	bool host_only;
};

/* Specific ranges come before the ranges that contain them, so that the
 * audit log names the most precise class. */
static const struct policy_class classes[] = {
	{ 4, 8, { 0 }, "class:this-network", true },
	{ 4, 8, { 10 }, "class:private", false },
	{ 4, 10, { 100, 64 }, "class:cgnat", false },
	{ 4, 8, { 127 }, "class:loopback", true },
	{ 4, 32, { 169, 254, 169, 254 }, "class:metadata", false },
	{ 4, 16, { 169, 254 }, "class:link-local", false },
	{ 4, 12, { 172, 16 }, "class:private", false },
	{ 4, 24, { 192, 0, 0 }, "class:ietf-protocol", false },
	{ 4, 24, { 192, 0, 2 }, "class:documentation", false },
	{ 4, 24, { 192, 88, 99 }, "class:6to4-relay", false },
	{ 4, 16, { 192, 168 }, "class:private", false },
	{ 4, 15, { 198, 18 }, "class:benchmark", false },
	{ 4, 24, { 198, 51, 100 }, "class:documentation", false },
	{ 4, 24, { 203, 0, 113 }, "class:documentation", false },
	{ 4, 4, { 224 }, "class:multicast", false },
	{ 4, 32, { 255, 255, 255, 255 }, "class:broadcast", false },
	{ 4, 4, { 240 }, "class:reserved", false },
	{ 6, 128, { 0 }, "class:unspecified", true },
	{ 6, 128, { [15] = 1 }, "class:loopback", true },
	{ 6, 48, { 0, 0x64, 0xff, 0x9b, 0, 1 }, "class:nat64-local", false },
	{ 6, 64, { 1, 0 }, "class:discard", false },
	{ 6, 32, { 0x20, 0x01, 0x0d, 0xb8 }, "class:documentation", false },
	{ 6, 32, { 0x20, 0x01, 0, 0 }, "class:teredo", false },
	{ 6, 48, { 0x20, 0x01, 0, 2, 0, 0 }, "class:benchmark", false },
	{ 6, 28, { 0x20, 0x01, 0, 0x10 }, "class:orchid", false },
	{ 6, 28, { 0x20, 0x01, 0, 0x20 }, "class:orchid", false },
	{ 6, 23, { 0x20, 0x01 }, "class:ietf-protocol", false },
	{ 6, 20, { 0x3f, 0xff }, "class:documentation", false },
	{ 6, 7, { 0xfc }, "class:ula", false },
	{ 6, 10, { 0xfe, 0x80 }, "class:link-local", false },
	{ 6, 10, { 0xfe, 0xc0 }, "class:site-local", false },
	{ 6, 8, { 0xff }, "class:multicast", false },
};

/* Everything outside 2000::/3 (global unicast) is unassigned or special;
 * the embedded-IPv4 forms inside ::/8 are handled before this. */
static const char reserved6[] = "class:reserved";

/* ::a.b.c.d (IPv4-compatible, RFC 4291 deprecated it) leads nowhere
 * today: always blocked, under the embedded address's class when that
 * one is blocked too. */
static const char compat6[] = "class:ipv4-compatible";

static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };
static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b };
static const uint8_t v4compat[12] = { 0 };

static bool prefix_eq(const uint8_t *a, const uint8_t *b, unsigned plen)
{
	unsigned full = plen / 8, rest = plen % 8;
	if (memcmp(a, b, full) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[full] & mask) == (b[full] & mask);
}

/* ::ffff:a.b.c.d is the IPv4 address itself on a dual-stack socket:
 * judge it as such everywhere. */
static struct policy_addr canon(const struct policy_addr *a)
{
	struct policy_addr c = *a;
	if (a->family == 6 && memcmp(a->b, v4mapped, 12) == 0) {
		memset(&c, 0, sizeof c);
		c.family = 4;
		memcpy(c.b, a->b + 12, 4);
	}
	return c;
}

/* The IPv4 address a NAT64 (64:ff9b::/96), 6to4 (2002::/16) or
 * IPv4-compatible (::/96) address carries; false if a has none. */
static bool embedded_v4(const struct policy_addr *a, struct policy_addr *v4)
{
	if (a->family != 6)
		return false;
	memset(v4, 0, sizeof *v4);
	v4->family = 4;
	if (memcmp(a->b, nat64, 12) == 0 || memcmp(a->b, v4compat, 12) == 0) {
		memcpy(v4->b, a->b + 12, 4);
		return true;
	}
	if (a->b[0] == 0x20 && a->b[1] == 0x02) {
		memcpy(v4->b, a->b + 2, 4);
		return true;
	}
	return false;
}

static const struct policy_class *class_of_plain(const struct policy_addr *a)
{
	for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
		const struct policy_class *c = &classes[i];
		if (c->family == a->family && prefix_eq(a->b, c->b, c->plen))
			return c;
	}
	return NULL;
}

/* Label of the class of a canonical address: the table, then embedded IPv4, then the
 * catch-all for IPv6 outside global unicast.  *host_only tells whether
 * the class reaches the host itself. */
static const char *classify(const struct policy_addr *a, bool *host_only)
{
	*host_only = false;
	const struct policy_class *c = class_of_plain(a);
	if (c) {
		*host_only = c->host_only;
		return c->label;
	}
	if (a->family != 6)
		return NULL;
	struct policy_addr v4;
	if (embedded_v4(a, &v4)) {
		c = class_of_plain(&v4);
		if (c) {
			*host_only = c->host_only;
			return c->label;
		}
		return memcmp(a->b, v4compat, 12) == 0 ? compat6 : NULL;
	}
	if ((a->b[0] & 0xe0) != 0x20)
		return reserved6;
	return NULL;
}

const char *policy_addr_class(const struct policy_addr *a)
{
	struct policy_addr c = canon(a);
	bool host_only;
	const char *label = classify(&c, &host_only);
	return label ? label + strlen("class:") : NULL;
}

void policy_init(struct policy *p, enum policy_mode m)
{
	memset(p, 0, sizeof *p);
	p->mode = m;
}

void policy_free(struct policy *p)
{
	for (size_t i = 0; i < p->nrules; i++)
		free(p->rules[i].text);
	free(p->rules);
	free(p->host);
	memset(p, 0, sizeof *p);
}

int policy_parse_mode(const char *s, enum policy_mode *m)
{
	if (strcmp(s, "none") == 0)
		*m = POLICY_MODE_NONE;
	else if (strcmp(s, "public") == 0)
		*m = POLICY_MODE_PUBLIC;
	else if (strcmp(s, "allowlist") == 0)
		*m = POLICY_MODE_ALLOWLIST;
	else
		return -EINVAL;
	return 0;
}

int policy_addr_parse(const char *s, struct policy_addr *a)
{
	memset(a, 0, sizeof *a);
	/* glibc's inet_pton takes exactly four decimal parts without leading
	 * zeros for IPv4 and refuses zone suffixes for IPv6: the strict forms
	 * we want.  The explicit character check keeps it so elsewhere. */
	if (strchr(s, ':')) {
		if (strspn(s, "0123456789abcdefABCDEF:.") != strlen(s))
			return -EINVAL;
		if (inet_pton(AF_INET6, s, a->b) != 1)
			return -EINVAL;
		a->family = 6;
		return 0;
	}
	if (strspn(s, "0123456789.") != strlen(s))
		return -EINVAL;
	if (inet_pton(AF_INET, s, a->b) != 1)
		return -EINVAL;
	a->family = 4;
	return 0;
}

int policy_addr_format(const struct policy_addr *a, char *buf, size_t len)
{
	if (a->family != 4 && a->family != 6)
		return -EINVAL;
	if (!inet_ntop(a->family == 4 ? AF_INET : AF_INET6, a->b, buf, (socklen_t)(len > 1024 ? 1024 : len)))
		return -ENOSPC;
	return 0;
}

int policy_name_normalize(const char *name, char *out)
{
	size_t n = strlen(name);
	if (n > 0 && name[n - 1] == '.')
		n--;
	if (n == 0 || n > POLICY_NAME_MAX)
		return -EINVAL;
	size_t label = 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (c == '.') {
			if (label == 0)
				return -EINVAL;
			label = 0;
		} else if (++label > 63) {
			return -EINVAL;
		}
		out[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
	}
	if (label == 0)
		return -EINVAL;
	out[n] = '\0';
	return 0;
}

bool policy_host_match(const char *host, bool below, const char *name)
{
	size_t nl = strlen(name), hl = strlen(host);
	if (nl && name[nl - 1] == '.')
		nl--;
	if (hl && host[hl - 1] == '.')
		hl--;
	if (nl == 0)
		return false;
	if (below)
		return nl > hl + 1 && name[nl - hl - 1] == '.' &&
		       strncasecmp(name + nl - hl, host, hl) == 0;
	return nl == hl && strncasecmp(name, host, nl) == 0;
}

bool policy_pattern_match(const char *pattern, const char *name)
{
	bool below = pattern[0] == '*' && pattern[1] == '.';
	return policy_host_match(below ? pattern + 2 : pattern, below, name);
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_hex(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* inet_aton reads the last part as a number, so a name whose last label
 * is decimal or 0x-hex is an address to libc; and ':' makes an IPv6
 * literal.  No real top-level domain looks like either. */
static bool numeric_normalized(const char *n)
{
	if (strchr(n, ':'))
		return true;
	const char *last = strrchr(n, '.');
	last = last ? last + 1 : n;
	if (last[0] == '0' && (last[1] == 'x' || last[1] == 'X')) {
		for (const char *c = last + 2; *c; c++)
			if (!is_hex(*c))
				return false;
		return true;
	}
	for (const char *c = last; *c; c++)
		if (!is_digit(*c))
			return false;
	return true;
}

bool policy_name_is_numeric(const char *name)
{
	char n[POLICY_NAME_MAX + 1];
	if (strchr(name, ':'))
		return true;
	if (policy_name_normalize(name, n) < 0)
		return false;
	return numeric_normalized(n);
}

/* Letters, digits, '-' and '_' (service labels), labels not starting or
 * ending with '-'.  n is normalised. */
static bool ldh_name(const char *n)
{
	const char *label = n;
	for (const char *c = n;; c++) {
		if (*c == '.' || *c == '\0') {
			if (label[0] == '-' || c[-1] == '-')
				return false;
			if (*c == '\0')
				return true;
			label = c + 1;
			continue;
		}
		if (!(is_digit(*c) || (*c >= 'a' && *c <= 'z') || *c == '-' || *c == '_'))
			return false;
	}
}

/* Unsigned decimal without sign or leading zero, at most max. */
static int parse_num(const char *s, size_t len, unsigned max, unsigned *v)
{
	if (len == 0 || len > 5 || (len > 1 && s[0] == '0'))
		return -EINVAL;
	unsigned x = 0;
	for (size_t i = 0; i < len; i++) {
		if (!is_digit(s[i]))
			return -EINVAL;
		x = x * 10 + (unsigned)(s[i] - '0');
	}
	if (x > max)
		return -EINVAL;
	*v = x;
	return 0;
}

static int parse_net(const char *s, size_t len, const char *plen_s, size_t plen_len, struct policy_rule *r,
		     char *err, size_t errlen)
{
	char buf[64];
	if (len >= sizeof buf) {
		errbuf_say(err, errlen, "address too long");
		return -EINVAL;
	}
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (strchr(buf, '%')) {
		errbuf_say(err, errlen, "\"%s\": zone indexes (%%eth0) have no meaning in a rule; drop them", buf);
		return -EINVAL;
	}
	if (policy_addr_parse(buf, &r->net) < 0) {
		if (strchr(buf, ':'))
			errbuf_say(err, errlen, "\"%s\" is not a valid IPv6 address", buf);
		else
			errbuf_say(err, errlen, "\"%s\" is not a valid IPv4 address (write four decimal numbers, a.b.c.d)",
			       buf);
		return -EINVAL;
	}
	unsigned full = r->net.family == 4 ? 32 : 128, plen = full;
	if (plen_s && parse_num(plen_s, plen_len, full, &plen) < 0) {
		errbuf_say(err, errlen, "bad prefix length \"/%.*s\" for %s (0 to %u)", (int)plen_len, plen_s, buf, full);
		return -EINVAL;
	}
	r->plen = (uint8_t)plen;
	struct policy_addr masked = r->net;
	for (unsigned i = plen; i < full; i++)
		masked.b[i / 8] &= (uint8_t)~(0x80 >> (i % 8));
	if (memcmp(masked.b, r->net.b, sizeof masked.b) != 0) {
		char m[64];
		policy_addr_format(&masked, m, sizeof m);
		errbuf_say(err, errlen, "host bits set in %s/%u: did you mean %s/%u?", buf, plen, m, plen);
		return -EINVAL;
	}
	if (r->net.family == 6 && plen >= 96 && memcmp(r->net.b, v4mapped, 12) == 0) {
		r->net = canon(&r->net);
		r->plen = (uint8_t)(plen - 96);
	}
	r->kind = POLICY_RULE_NET;
	return 0;
}

static int parse_domain(const char *s, size_t len, struct policy_rule *r, char *err, size_t errlen)
{
	char buf[POLICY_NAME_MAX + 2];
	bool wild = len >= 2 && s[0] == '*' && s[1] == '.';
	if (wild) {
		s += 2;
		len -= 2;
	}
	if (len > POLICY_NAME_MAX + 1) {
		errbuf_say(err, errlen, "name longer than %d characters", POLICY_NAME_MAX);
		return -EINVAL;
	}
	memcpy(buf, s, len);
	buf[len] = '\0';
	for (size_t i = 0; i < len; i++) {
		if ((unsigned char)buf[i] >= 0x80) {
			errbuf_say(err, errlen, "\"%s\" is not ASCII: write an internationalised name in its xn-- form",
			       buf);
			return -EINVAL;
		}
		if (buf[i] == '*') {
			errbuf_say(err, errlen, "a wildcard is allowed only as a whole first label, as in *.example.com");
			return -EINVAL;
		}
	}
	if (policy_name_normalize(buf, r->name) < 0 || !ldh_name(r->name)) {
		errbuf_say(err, errlen, "\"%s\" is not a valid domain name", buf);
		return -EINVAL;
	}
	if (numeric_normalized(r->name)) {
		errbuf_say(err, errlen, "\"%s\" looks like a numeric address: write it as a.b.c.d", buf);
		return -EINVAL;
	}
	r->kind = wild ? POLICY_RULE_SUFFIX : POLICY_RULE_DOMAIN;
	return 0;
}

/* Does the rule's network lie entirely inside one blocked class? */
static const struct policy_class *net_inside_class(const struct policy_rule *r)
{
	for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
		const struct policy_class *c = &classes[i];
		if (c->family == r->net.family && c->plen <= r->plen && prefix_eq(r->net.b, c->b, c->plen))
			return c;
	}
	return NULL;
}

int policy_parse_rule(const char *s, struct policy_rule *r, char *err, size_t errlen)
{
	const char *orig = s;
	memset(r, 0, sizeof *r);
	if (strncmp(s, "deny:", 5) == 0) {
		r->deny = true;
		s += 5;
	} else if (strncmp(s, "allow:", 6) == 0) {
		s += 6;
	}
	if (*s == '\0') {
		errbuf_say(err, errlen, "empty rule \"%s\"", orig);
		return -EINVAL;
	}
	const char *port_s = NULL;
	size_t port_len = 0;
	int rc;
	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (!close) {
			errbuf_say(err, errlen, "\"%s\": missing ']'", orig);
			return -EINVAL;
		}
		const char *in = s + 1, *slash = memchr(in, '/', (size_t)(close - in));
		const char *after = close + 1, *plen_s = NULL;
		size_t plen_len = 0;
		if (*after == '/') {
			if (slash) {
				errbuf_say(err, errlen, "\"%s\": two prefix lengths", orig);
				return -EINVAL;
			}
			plen_s = after + 1;
			plen_len = strcspn(plen_s, ":");
			after = plen_s + plen_len;
		} else if (slash) {
			plen_s = slash + 1;
			plen_len = (size_t)(close - plen_s);
		}
		if (*after == ':') {
			port_s = after + 1;
			port_len = strlen(port_s);
		} else if (*after) {
			errbuf_say(err, errlen, "\"%s\": unexpected \"%s\" after ']'", orig, after);
			return -EINVAL;
		}
		size_t alen = (size_t)((slash ? slash : close) - in);
		if (!memchr(in, ':', alen)) {
			errbuf_say(err, errlen, "\"%s\": brackets are for IPv6 addresses only", orig);
			return -EINVAL;
		}
		rc = parse_net(in, alen, plen_s, plen_len, r, err, errlen);
	} else {
		const char *colon = strchr(s, ':');
		size_t tlen = strlen(s);
		if (colon && !strchr(colon + 1, ':')) {
			tlen = (size_t)(colon - s);
			port_s = colon + 1;
			port_len = strlen(port_s);
		}
		const char *slash = memchr(s, '/', tlen);
		if (tlen == 1 && s[0] == '*') {
			r->kind = POLICY_RULE_ANY;
			rc = 0;
		} else if (memchr(s, ':', tlen) || slash || strspn(s, "0123456789.") >= tlen) {
			size_t alen = slash ? (size_t)(slash - s) : tlen;
			rc = parse_net(s, alen, slash ? slash + 1 : NULL, slash ? tlen - alen - 1 : 0, r, err, errlen);
		} else {
			rc = parse_domain(s, tlen, r, err, errlen);
		}
	}
	if (rc < 0)
		return rc;
	if (port_s) {
		unsigned port;
		if (parse_num(port_s, port_len, 65535, &port) < 0 || port == 0) {
			errbuf_say(err, errlen, "\"%s\": bad port \"%s\" (1 to 65535)", orig, port_s);
			return -EINVAL;
		}
		r->port = (uint16_t)port;
	}
	if (r->kind == POLICY_RULE_ANY && r->port == 0) {
		errbuf_say(err, errlen, "\"%s\": '*' needs a port (*:443); for every destination use --network public",
		       orig);
		return -EINVAL;
	}
	if (r->kind == POLICY_RULE_NET && !r->deny) {
		const struct policy_class *c = net_inside_class(r);
		unsigned full = r->net.family == 4 ? 32 : 128;
		if (c && r->port == 0) {
			errbuf_say(err, errlen,
			       "\"%s\" lies in a blocked range (%s): an exception must name a port, as in %s:PORT",
			       orig, c->label + strlen("class:"), s);
			return -EINVAL;
		}
		r->exception = r->port != 0 && (c || r->plen == full);
	}
	if (r->kind == POLICY_RULE_DOMAIN && !r->deny)
		r->exception = r->port != 0;
	return 0;
}

int policy_add_rule(struct policy *p, const char *s, char *err, size_t errlen)
{
	struct policy_rule r;
	int rc = policy_parse_rule(s, &r, err, errlen);
	if (rc < 0)
		return rc;
	if (grow_array(&p->rules, &p->cap, p->nrules + 1, sizeof *p->rules, 8, 0) < 0)
		return -ENOMEM;
	r.text = strdup(s);
	if (!r.text)
		return -ENOMEM;
	p->rules[p->nrules++] = r;
	return 0;
}

int policy_set_host_addrs(struct policy *p, const struct policy_addr *a, size_t n)
{
	struct policy_addr *h = NULL;
	if (n) {
		h = calloc(n, sizeof *h);
		if (!h)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++)
			h[i] = canon(&a[i]);
	}
	free(p->host);
	p->host = h;
	p->nhost = n;
	return 0;
}

void policy_set_host_fn(struct policy *p, policy_host_fn fn, void *ctx)
{
	p->host_fn = fn;
	p->host_ctx = ctx;
}

/* What a decision looks at, computed once. */
struct dest {
	const char *name; /* normalised, or NULL */
	struct policy_addr addr;
	struct policy_addr emb;
	bool has_emb;
	uint16_t port;
	bool any_port; /* DNS time: no port yet, a rule for any port matches */
};

static bool net_match(const struct policy_rule *r, const struct policy_addr *a)
{
	return r->net.family == a->family && prefix_eq(a->b, r->net.b, r->plen);
}

/* use_emb: match the embedded IPv4 address too (deny rules: what the
 * connection really reaches must not escape a deny). */
static bool rule_match(const struct policy_rule *r, const struct dest *d, bool use_emb)
{
	if (!d->any_port && r->port != 0 && r->port != d->port)
		return false;
	switch (r->kind) {
	case POLICY_RULE_ANY:
		return true;
	case POLICY_RULE_DOMAIN:
	case POLICY_RULE_SUFFIX:
		return d->name && policy_host_match(r->name, r->kind == POLICY_RULE_SUFFIX, d->name);
	case POLICY_RULE_NET:
		return net_match(r, &d->addr) || (use_emb && d->has_emb && net_match(r, &d->emb));
	}
	return false;
}

static bool is_host_addr(const struct policy *p, const struct policy_addr *a)
{
	for (size_t i = 0; i < p->nhost; i++)
		if (p->host[i].family == a->family && memcmp(p->host[i].b, a->b, a->family == 4 ? 4 : 16) == 0)
			return true;
	return p->host_fn && p->host_fn(p->host_ctx, a);
}

static void decide(struct policy_decision *d, bool allow, enum policy_why why, const char *rule)
{
	d->allow = allow;
	d->why = why;
	d->rule = rule;
}

static const struct policy_rule *find_deny(const struct policy *p, const struct dest *d)
{
	for (size_t i = 0; i < p->nrules; i++) {
		const struct policy_rule *r = &p->rules[i];
		if (r->deny && rule_match(r, d, true))
			return r;
	}
	return NULL;
}

static const struct policy_rule *find_allow(const struct policy *p, const struct dest *d, bool exceptions_only,
					 bool host_only)
{
	for (size_t i = 0; i < p->nrules; i++) {
		const struct policy_rule *r = &p->rules[i];
		if (r->deny || (exceptions_only && !r->exception))
			continue;
		if (exceptions_only && host_only && r->kind == POLICY_RULE_DOMAIN && strcmp(r->name, POLICY_HOST_NAME) != 0)
			continue;
		if (rule_match(r, d, false))
			return r;
	}
	return NULL;
}

/* Steps 3-5 of policy.h, shared by connections and DNS answers. */
static void judge_addr(const struct policy *p, const struct dest *d, struct policy_decision *out)
{
	bool host_only = false;
	const char *cls = classify(&d->addr, &host_only);
	bool host = !cls && (is_host_addr(p, &d->addr) || (d->has_emb && is_host_addr(p, &d->emb)));
	if (cls || host) {
		const struct policy_rule *r = find_allow(p, d, true, host_only || host);
		if (r) {
			decide(out, true, POLICY_WHY_EXCEPTION, r->text);
			return;
		}
		if (host) {
			decide(out, false, POLICY_WHY_HOST, "host");
			return;
		}
		decide(out, false, POLICY_WHY_CLASS, cls);
		return;
	}
	if (p->mode == POLICY_MODE_PUBLIC) {
		decide(out, true, POLICY_WHY_PUBLIC, "mode:public");
		return;
	}
	const struct policy_rule *r = find_allow(p, d, false, false);
	if (r)
		decide(out, true, POLICY_WHY_ALLOW_RULE, r->text);
	else
		decide(out, false, POLICY_WHY_NO_MATCH, "allowlist");
}

static void fill_dest(struct dest *d, const char *name, char *buf, const struct policy_addr *a, uint16_t port)
{
	memset(d, 0, sizeof *d);
	if (name && policy_name_normalize(name, buf) == 0)
		d->name = buf;
	if (a) {
		d->addr = canon(a);
		d->has_emb = embedded_v4(&d->addr, &d->emb);
	}
	d->port = port;
}

void policy_check(const struct policy *p, const char *name, const struct policy_addr *dst, uint16_t port,
	       struct policy_decision *out)
{
	char buf[POLICY_NAME_MAX + 1];
	struct dest d;
	if (p->mode == POLICY_MODE_NONE) {
		decide(out, false, POLICY_WHY_MODE_NONE, "mode:none");
		return;
	}
	if (dst->family != 4 && dst->family != 6) {
		decide(out, false, POLICY_WHY_CLASS, "class:reserved");
		return;
	}
	fill_dest(&d, name, buf, dst, port);
	const struct policy_rule *r = find_deny(p, &d);
	if (r) {
		decide(out, false, POLICY_WHY_DENY_RULE, r->text);
		return;
	}
	judge_addr(p, &d, out);
}

/* A name that is no plain DNS name, or that libc would read as an
 * address, is refused before it reaches the host's resolver. */
static bool name_ok(const char *name, char *buf)
{
	return policy_name_normalize(name, buf) == 0 && ldh_name(buf) && !numeric_normalized(buf);
}

void policy_check_name(const struct policy *p, const char *name, struct policy_decision *out)
{
	char buf[POLICY_NAME_MAX + 1];
	if (p->mode == POLICY_MODE_NONE) {
		decide(out, false, POLICY_WHY_MODE_NONE, "mode:none");
		return;
	}
	if (!name_ok(name, buf)) {
		decide(out, false, POLICY_WHY_BAD_NAME, "name:invalid");
		return;
	}
	struct dest d = { .name = buf, .any_port = true };
	for (size_t i = 0; i < p->nrules; i++) {
		const struct policy_rule *r = &p->rules[i];
		if (r->deny && r->port == 0 && (r->kind == POLICY_RULE_DOMAIN || r->kind == POLICY_RULE_SUFFIX) &&
		    rule_match(r, &d, false)) {
			decide(out, false, POLICY_WHY_DENY_RULE, r->text);
			return;
		}
	}
	if (p->mode == POLICY_MODE_PUBLIC) {
		decide(out, true, POLICY_WHY_PUBLIC, "mode:public");
		return;
	}
	/* Only a name rule lets a name reach the resolver: with address
	 * rules alone, any name would carry the guest's data to the
	 * upstream resolver in the question (its answers would be dropped,
	 * the question would not). */
	for (size_t i = 0; i < p->nrules; i++) {
		const struct policy_rule *r = &p->rules[i];
		if (r->deny)
			continue;
		if ((r->kind == POLICY_RULE_DOMAIN || r->kind == POLICY_RULE_SUFFIX) && rule_match(r, &d, false)) {
			decide(out, true, POLICY_WHY_ALLOW_RULE, r->text);
			return;
		}
	}
	decide(out, false, POLICY_WHY_NO_MATCH, "allowlist");
}

bool policy_judges_stated_names(const struct policy *p)
{
	if (p->mode == POLICY_MODE_NONE)
		return false;
	for (size_t i = 0; i < p->nrules; i++) {
		const struct policy_rule *r = &p->rules[i];
		if (r->kind != POLICY_RULE_DOMAIN && r->kind != POLICY_RULE_SUFFIX)
			continue;
		if (r->deny || p->mode == POLICY_MODE_ALLOWLIST)
			return true;
	}
	return false;
}

void policy_check_stated(const struct policy *p, const char *stated, const struct policy_addr *dst, uint16_t port,
		      const struct policy_decision *first, struct policy_decision *out)
{
	struct policy_decision d;
	*out = *first;
	if (!first->allow)
		return;
	policy_check(p, stated, dst, port, &d);
	if (d.allow)
		return;
	/* A blocked class or the host itself was opened by an exception
	 * for the name our DNS gave (or the host alias): the stated name
	 * has no say there beyond deny rules. */
	if (d.why == POLICY_WHY_DENY_RULE || (first->why == POLICY_WHY_ALLOW_RULE && d.why == POLICY_WHY_NO_MATCH))
		*out = d;
}

void policy_check_answer(const struct policy *p, const char *name, const struct policy_addr *a, struct policy_decision *out)
{
	char buf[POLICY_NAME_MAX + 1];
	if (p->mode == POLICY_MODE_NONE) {
		decide(out, false, POLICY_WHY_MODE_NONE, "mode:none");
		return;
	}
	if (!name_ok(name, buf) || (a->family != 4 && a->family != 6)) {
		decide(out, false, POLICY_WHY_BAD_NAME, "name:invalid");
		return;
	}
	struct dest d;
	fill_dest(&d, buf, buf, a, 0);
	d.any_port = true;
	for (size_t i = 0; i < p->nrules; i++) {
		const struct policy_rule *r = &p->rules[i];
		if (r->deny && r->port == 0 && rule_match(r, &d, true)) {
			decide(out, false, POLICY_WHY_DENY_RULE, r->text);
			return;
		}
	}
	judge_addr(p, &d, out);
}
