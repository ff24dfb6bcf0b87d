/* sandbox.yaml loader: the sections made of checked strings (ports),
 * network and tls, and the typo-tolerant key lookup they and the top
 * level share (config_priv.h). */
#include "vmm/sandbox/config_priv.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "netstack/policy.h"
#include "netstack/resolver.h"

/* ---- lists of checked strings ------------------------------------------ */

void config_free_strs(struct config_str *s, size_t n)
{
	if (!s)
		return;
	for (size_t i = 0; i < n; i++)
		free(s[i].s);
	free(s);
}

/* Checks one entry; fills msg with what is wrong (rest of the sentence
 * after "WHAT: ") and returns false if it is bad. */
typedef bool (*config_check_fn)(const char *s, char *msg, size_t msglen);

/* A list of scalars, each passed through check; stored as written. */
static int config_str_list(struct config_ctx *x, const struct yamltree_node *v, const char *what,
			   const char *expected, size_t max, config_check_fn check,
			   struct config_str **out, size_t *n_out)
{
	char w[64], msg[512];
	int rc;
	struct config_str *s = config_seq(x, v, what, expected, max, "entries", sizeof *s, &rc);
	if (!s)
		return rc;
	for (size_t i = 0; i < v->n; i++) {
		const struct yamltree_node *e = v->kids[i];
		snprintf(w, sizeof w, "%s[%zu]", what, i);
		rc = config_text(x, e, w, expected);
		if (!rc && !check(e->str, msg, sizeof msg)) {
			char safe[4 * sizeof msg + 4];
			yamltree_show(safe, sizeof safe, msg, strlen(msg), sizeof msg);
			if (e->raw)
				config_show_node(safe, e);
			rc = e->raw ? config_err(x, e, "%s: what '%s' expands to is not valid (a "
						    "value from a variable is not shown); "
						    "expected %s", w, safe, expected)
				    : config_err(x, e, "%s: %s", w, safe);
		}
		if (!rc && !(s[i].s = config_strdup(e->str, e->len)))
			rc = config_nomem(x);
		if (rc) {
			config_free_strs(s, v->n);
			return rc;
		}
		s[i].line = e->line;
		s[i].col = e->col;
	}
	*out = s;
	*n_out = v->n;
	return 0;
}

static bool config_check_rule(const char *s, bool deny, char *msg, size_t msglen)
{
	struct policy_rule r;
	char buf[POLICY_NAME_MAX * 2 + 16];
	int n = snprintf(buf, sizeof buf, "%s%s", deny ? "deny:" : "", s);
	if (n < 0 || (size_t)n >= sizeof buf) {
		snprintf(msg, msglen, "rule is too long; expected a rule such as example.com, "
				      "*.github.com:443 or 203.0.113.0/24");
		return false;
	}
	char perr[384];
	if (policy_parse_rule(buf, &r, perr, sizeof perr) == 0)
		return true;
	snprintf(msg, msglen, "%s; expected a rule such as example.com, *.github.com:443 or "
			      "203.0.113.0/24", perr);
	return false;
}

static bool config_check_allow(const char *s, char *msg, size_t msglen)
{
	return config_check_rule(s, false, msg, msglen);
}

static bool config_check_deny(const char *s, char *msg, size_t msglen)
{
	return config_check_rule(s, true, msg, msglen);
}

/* A DNS name in the usual characters, not one libc would read as an IPv4
 * address. */
static bool config_name_ok(const char *s)
{
	char norm[POLICY_NAME_MAX + 1];
	if (policy_name_normalize(s, norm) < 0 || policy_name_is_numeric(norm))
		return false;
	for (const char *p = norm; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.' && *p != '_')
			return false;
	return true;
}

static bool config_check_bypass(const char *s, char *msg, size_t msglen)
{
	const char *name = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
	if (config_name_ok(name))
		return true;
	snprintf(msg, msglen, "'%s' is not a host name; expected a name such as "
			      "example.com or *.example.com", s);
	return false;
}

static bool config_port_num(const char *s, size_t len, unsigned *out)
{
	uint64_t v;
	if (config_decimal(s, len, &v) != CONFIG_NUM_OK || v < 1 || v > 65535)
		return false;
	*out = (unsigned)v;
	return true;
}

/* "[IP:]HOSTPORT:GUESTPORT"; IP is a loopback address (IPv6 in brackets),
 * since a port published on another address would be reachable from the
 * network. */
static bool config_check_port(const char *s, char *msg, size_t msglen)
{
	static const char expected[] =
		"expected \"HOSTPORT:GUESTPORT\" or \"127.0.0.1:HOSTPORT:GUESTPORT\" with "
		"ports from 1 to 65535 (HOSTPORT 0: any free port)";
	const char *guest = strrchr(s, ':');
	unsigned hp = 0, gp;
	if (!guest && s[0] && strspn(s, "0123456789") == strlen(s)) {
		snprintf(msg, msglen, "%s is not a port number; %s", s, expected);
		return false;
	}
	if (!guest) {
		snprintf(msg, msglen, "'%s' has no ':'; %s", s, expected);
		return false;
	}
	const char *host = guest;
	while (host > s && host[-1] != ':' && host[-1] != ']')
		host--;
	/* Host port 0: the host picks a free one, as with -p. */
	bool any = guest - host == 1 && host[0] == '0';
	if (!config_port_num(guest + 1, strlen(guest + 1), &gp) ||
	    (!any && !config_port_num(host, (size_t)(guest - host), &hp))) {
		snprintf(msg, msglen, "'%s': bad port number; %s", s, expected);
		return false;
	}
	if (host == s)
		return true;
	if (host[-1] != ':') {
		snprintf(msg, msglen, "'%s': expected ':' after ']'; %s", s, expected);
		return false;
	}
	char ip[64];
	size_t iplen = (size_t)(host - 1 - s);
	const char *ips = s;
	if (iplen >= 2 && s[0] == '[' && s[iplen - 1] == ']') {
		ips++;
		iplen -= 2;
	} else if (memchr(s, ':', iplen)) {
		snprintf(msg, msglen, "'%s': write an IPv6 address in brackets ([::1]:%u:%u)", s,
			 hp, gp);
		return false;
	}
	struct policy_addr a;
	const char *cls = NULL;
	if (iplen < sizeof ip) {
		memcpy(ip, ips, iplen);
		ip[iplen] = '\0';
		if (policy_addr_parse(ip, &a) == 0)
			cls = policy_addr_class(&a);
		else
			iplen = sizeof ip;
	}
	if (iplen >= sizeof ip) {
		snprintf(msg, msglen, "'%s': bad IP address; %s", s, expected);
		return false;
	}
	if (!cls || strcmp(cls, "loopback") != 0) {
		snprintf(msg, msglen, "'%s': %s is not a loopback address; expected 127.0.0.1 "
				      "or [::1] (ports are only published on the host's loopback)",
			 s, ip);
		return false;
	}
	return true;
}

static bool config_check_port_or_num(const char *s, char *msg, size_t msglen)
{
	unsigned p;
	if (!strchr(s, ':') && config_port_num(s, strlen(s), &p))
		return true;
	return config_check_port(s, msg, msglen);
}

/* ports: strings as above, or a bare integer N meaning "N:N". */
int config_ports(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	static const char expected[] = "\"[IP:]HOSTPORT:GUESTPORT\" entries";
	int rc = config_str_list(x, v, "ports", expected, CONFIG_LIST_MAX,
				 config_check_port_or_num, &c->ports, &c->n_ports);
	if (rc)
		return rc;
	for (size_t i = 0; i < c->n_ports; i++) {
		if (strchr(c->ports[i].s, ':'))
			continue;
		size_t len = strlen(c->ports[i].s);
		char *p = malloc(2 * len + 2);
		if (!p)
			return config_nomem(x);
		snprintf(p, 2 * len + 2, "%s:%s", c->ports[i].s, c->ports[i].s);
		free(c->ports[i].s);
		c->ports[i].s = p;
	}
	return 0;
}

/* ---- network, tls ------------------------------------------------------ */

#define CONFIG_SUB_KEYS_MAX 8 /* keys of the largest mapping section (network has 6) */

/* Finds key k of section among keys[] (n of them), refusing unknown keys
 * with a suggestion and repeated ones; seen[] holds the line of each key
 * already met.  Returns the index, or a negative errno. */
static int config_sub_key(struct config_ctx *x, const struct yamltree_node *k, const char *section,
			  const char *const *keys, size_t n, unsigned *seen)
{
	char show[YAMLTREE_SHOW_BUF], list[256];
	size_t o = 0;
	list[0] = '\0';
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", keys[i]);
	if (k->kind != YAMLTREE_SCALAR)
		return config_err(x, k, "%s: a key is %s; expected one of: %s", section,
				  yamltree_kind_name(k), list);
	config_show_node(show, k);
	const char *near = NULL;
	unsigned best = UINT_MAX;
	for (size_t i = 0; i < n; i++) {
		if (strlen(keys[i]) == k->len && memcmp(keys[i], k->str, k->len) == 0) {
			if (seen[i])
				return config_err(x, k, "%s: duplicate key '%s' (first at line %u); "
						     "expected each key once", section, show, seen[i]);
			seen[i] = k->line;
			return (int)i;
		}
		unsigned d = config_distance(k->str, k->len, keys[i]);
		if (d <= (strlen(keys[i]) <= 4 ? 1u : 2u) && d < best) {
			best = d;
			near = keys[i];
		}
	}
	if (near)
		return config_err(x, k, "%s: unknown key '%s'; did you mean '%s'?", section, show,
				  near);
	return config_err(x, k, "%s: unknown key '%s'; expected one of: %s", section, show, list);
}

/* One word out of words[], as policy and intercept take. */
static int config_word(struct config_ctx *x, const struct yamltree_node *v, const char *what,
		       const char *const *words, size_t n, char **out)
{
	char expected[128] = "", show[YAMLTREE_SHOW_BUF];
	size_t o = 0;
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(expected + o, sizeof expected - o, "%s%s",
				      i == 0 ? "" : i + 1 == n ? " or " : ", ", words[i]);
	int rc = config_text(x, v, what, expected);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		if (strcmp(v->str, words[i]) == 0)
			return (*out = config_strdup(v->str, v->len)) ? 0 : config_nomem(x);
	config_show_node(show, v);
	return config_err(x, v, "%s: '%s' is not valid; expected %s", what, show, expected);
}

/* hosts: {NAME: ADDRESS}, stored as "NAME:ADDRESS". */
static int config_hosts(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	char got[YAMLTREE_SHOW_BUF + 2], show[YAMLTREE_SHOW_BUF];
	if (v->kind != YAMLTREE_MAP)
		return config_err(x, v, "network.hosts: got %s; expected a mapping NAME: ADDRESS "
				     "such as 'db.local: 10.0.2.5'", config_got(v, got, sizeof got));
	size_t n = v->n / 2;
	if (n > CONFIG_LIST_MAX)
		return config_err(x, v->kids[2 * CONFIG_LIST_MAX], "network.hosts: more than %u "
				"entries; expected at most %u", CONFIG_LIST_MAX, CONFIG_LIST_MAX);
	c->hosts = calloc(n ? n : 1, sizeof *c->hosts);
	if (!c->hosts)
		return config_nomem(x);
	for (size_t i = 0; i < n; i++) {
		const struct yamltree_node *k = v->kids[2 * i], *a = v->kids[2 * i + 1];
		struct policy_addr addr;
		int rc = config_text(x, k, "network.hosts", "a host name");
		if (rc)
			return rc;
		config_show_node(show, k);
		if (!config_name_ok(k->str))
			return config_err(x, k, "network.hosts: '%s' is not a host name; expected a "
					     "name such as db.local", show);
		for (size_t j = 0; j < i; j++)
			if (strncasecmp(c->hosts[j].s, k->str, k->len) == 0 &&
			    c->hosts[j].s[k->len] == ':')
				return config_err(x, k, "network.hosts: '%s' is listed twice; "
						     "expected each name once", show);
		char what[YAMLTREE_SHOW_BUF + 16];
		snprintf(what, sizeof what, "network.hosts.%s", show);
		rc = config_text(x, a, what, "an IP address such as 10.0.2.5");
		if (rc)
			return rc;
		if (policy_addr_parse(a->str, &addr) < 0) {
			config_show_node(got, a);
			return config_err(x, a, "%s: '%s' is not an IP address; expected an IPv4 "
					     "address such as 10.0.2.5 or an IPv6 one", what, got);
		}
		size_t len = k->len + 1 + a->len + 1;
		if (!(c->hosts[i].s = malloc(len)))
			return config_nomem(x);
		snprintf(c->hosts[i].s, len, "%s:%s", k->str, a->str);
		c->hosts[i].line = k->line;
		c->hosts[i].col = k->col;
		c->n_hosts = i + 1;
	}
	return 0;
}

static bool config_check_dns(const char *s, char *msg, size_t msglen)
{
	struct resolver_server srv;
	return resolver_server_parse(s, &srv, msg, msglen) == 0;
}

/* dns: [ADDR[:PORT], ...] or {servers: [...], rate: N}. */
static int config_dns(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	static const char *const keys[] = { "servers", "rate" };
	static const char expected[] = "name server addresses (10.0.0.53, 10.0.0.53:5353, "
				       "\"[fd00::53]:5353\")";
	unsigned seen[ARRAY_SIZE(keys)] = { 0 };
	char got[YAMLTREE_SHOW_BUF + 2];
	const struct yamltree_node *list = NULL;
	if (v->kind == YAMLTREE_SEQ) {
		list = v;
	} else if (v->kind == YAMLTREE_MAP) {
		for (size_t i = 0; i + 1 < v->n; i += 2) {
			const struct yamltree_node *val = v->kids[i + 1];
			int s = config_sub_key(x, v->kids[i], "network.dns", keys, ARRAY_SIZE(keys), seen);
			if (s < 0)
				return s;
			if (s == 0) {
				list = val;
				continue;
			}
			uint64_t rate;
			int rc = config_uint(x, val, "network.dns.rate", 1, CONFIG_DNS_RATE_MAX, &rate);
			if (rc)
				return rc;
			c->dns_rate = (unsigned)rate;
		}
		if (!list)
			return 0;
	} else {
		return config_err(x, v, "network.dns: got %s; expected a list of %s, or a mapping "
				     "with servers and rate", config_got(v, got, sizeof got), expected);
	}
	const char *what = list == v ? "network.dns" : "network.dns.servers";
	if (list->kind == YAMLTREE_SEQ && list->n == 0)
		return config_err(x, list, "%s: an empty list; expected at least one of %s (leave "
					"it out to use the host's resolver)", what, expected);
	return config_str_list(x, list, what, expected, RESOLVER_MAX_SERVERS, config_check_dns, &c->dns,
			       &c->n_dns);
}

/* The keys of a section that is a mapping: fn gets each key's index in
 * keys[] (n of them) and its value, unknown and repeated keys having been
 * refused.  0 or the first failure. */
static int config_sub_keys(struct config_ctx *x, const struct yamltree_node *v, const char *section,
			   const char *const *keys, size_t n, struct kbox_config *c,
			   int (*fn)(struct config_ctx *x, size_t key, const struct yamltree_node *val,
				     struct kbox_config *c))
{
	unsigned seen[CONFIG_SUB_KEYS_MAX] = { 0 };
	for (size_t i = 0; i + 1 < v->n; i += 2) {
		int s = config_sub_key(x, v->kids[i], section, keys, n, seen);
		int rc = s < 0 ? s : fn(x, (size_t)s, v->kids[i + 1], c);
		if (rc)
			return rc;
	}
	return 0;
}

static const char *const config_network_keys[] = { "policy", "allow", "deny", "hosts", "audit_log",
						"dns" };

static int config_network_key(struct config_ctx *x, size_t key, const struct yamltree_node *val,
			      struct kbox_config *c)
{
	static const char *const policies[] = { "none", "public", "allowlist" };
	static const char rule[] = "rules (example.com, *.github.com:443, 203.0.113.0/24)";
	switch (key) {
	case 0:
		return config_word(x, val, "network.policy", policies, ARRAY_SIZE(policies),
				   &c->network_policy);
	case 1:
		return config_str_list(x, val, "network.allow", rule, CONFIG_LIST_MAX, config_check_allow,
				       &c->allow, &c->n_allow);
	case 2:
		return config_str_list(x, val, "network.deny", rule, CONFIG_LIST_MAX, config_check_deny,
				       &c->deny, &c->n_deny);
	case 3:
		return config_hosts(x, val, c);
	case 4:
		return config_path(x, val, "network.audit_log", "a file to append network decisions to",
				   &c->audit_log);
	default: /* dns */
		return config_dns(x, val, c);
	}
}

int config_network(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	char got[YAMLTREE_SHOW_BUF + 2];
	if (v->kind != YAMLTREE_MAP)
		return config_err(x, v, "network: got %s; expected a mapping with policy, allow, "
				     "deny, hosts, audit_log or dns", config_got(v, got, sizeof got));
	return config_sub_keys(x, v, "network", config_network_keys, ARRAY_SIZE(config_network_keys), c,
			       config_network_key);
}

static const char *const config_tls_keys[] = { "intercept", "bypass", "extra_ca" };

static int config_tls_key(struct config_ctx *x, size_t key, const struct yamltree_node *val,
			  struct kbox_config *c)
{
	static const char *const scopes[] = { "all", "secrets" };
	switch (key) {
	case 0:
		return config_word(x, val, "tls.intercept", scopes, ARRAY_SIZE(scopes),
				   &c->tls_intercept);
	case 1:
		return config_str_list(x, val, "tls.bypass", "host names (example.com, "
				       "*.example.com)", CONFIG_LIST_MAX, config_check_bypass,
				       &c->tls_bypass, &c->n_tls_bypass);
	default: /* extra_ca */
		return config_path(x, val, "tls.extra_ca", "a PEM file of CA certificates",
				   &c->tls_extra_ca);
	}
}

int config_tls(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	char got[YAMLTREE_SHOW_BUF + 2];
	if (v->kind != YAMLTREE_MAP)
		return config_err(x, v, "tls: got %s; expected a mapping with intercept, bypass or "
				     "extra_ca", config_got(v, got, sizeof got));
	return config_sub_keys(x, v, "tls", config_tls_keys, ARRAY_SIZE(config_tls_keys), c, config_tls_key);
}

/* Edit distance with adjacent swaps (optimal string alignment), ignoring
 * case; gives up past CONFIG_KEY_MAX bytes, where no key is a typo of ours. */
#define CONFIG_KEY_MAX 32 /* config_priv.h */
unsigned config_distance(const char *a, size_t la, const char *b)
{
	size_t lb = strlen(b);
	unsigned d[CONFIG_KEY_MAX + 1][CONFIG_KEY_MAX + 1];
	if (la > CONFIG_KEY_MAX || lb > CONFIG_KEY_MAX)
		return UINT_MAX;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = (unsigned)i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			int ca = tolower((unsigned char)a[i - 1]);
			int cb = tolower((unsigned char)b[j - 1]);
			unsigned best = d[i - 1][j - 1] + (ca != cb);
			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == cb &&
			    d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	}
	return d[la][lb];
}

