/* Egress policy (docs/network.md): decides whether the guest may open a
 * connection to an address and port, given the name our own DNS answered
 * for that address (if any).  Pure: no I/O, no clock, no global state, so
 * every decision is reproducible in a table-driven test.
 *
 * Order of a decision (the first step that decides wins):
 *   1. mode none denies everything;
 *   2. a deny rule that matches the name, the address or the IPv4 address
 *      embedded in it (NAT64, 6to4, IPv4-compatible) denies;
 *   3. an address in a blocked class (loopback, RFC 1918, link-local,
 *      multicast, ..., or one of the host's own addresses) is denied unless
 *      an exception (an allow rule naming one host and a port) matches;
 *   4. mode public allows;
 *   5. mode allowlist allows only what an allow rule matches. */
#ifndef KBOX_NETSTACK_POLICY_H
#define KBOX_NETSTACK_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The name under which the guest reaches the host's loopback (kbox maps
 * it to 127.0.0.1).  Only exceptions that name it, or a loopback address
 * literally, open a loopback port. */
#define POLICY_HOST_NAME "host.kbox.internal"

/* Longest DNS name in text form, without the trailing dot. */
#define POLICY_NAME_MAX 253

/* An IP address in network byte order; IPv4 uses b[0..3]. */
struct policy_addr {
	uint8_t family; /* 4 or 6 */
	uint8_t b[16];
};

enum policy_mode { POLICY_MODE_NONE, POLICY_MODE_PUBLIC, POLICY_MODE_ALLOWLIST };

enum policy_rule_kind {
	POLICY_RULE_ANY,    /* "*:PORT": every destination on a port */
	POLICY_RULE_DOMAIN, /* exact name */
	POLICY_RULE_SUFFIX, /* "*.suffix": any name below suffix, not suffix itself */
	POLICY_RULE_NET,    /* address or CIDR */
};

struct policy_rule {
	enum policy_rule_kind kind;
	bool deny;
	bool exception; /* allow rule that also opens a blocked class */
	uint16_t port;  /* 0: every port */
	uint8_t plen;   /* POLICY_RULE_NET: prefix length */
	struct policy_addr net;
	char name[POLICY_NAME_MAX + 1]; /* DOMAIN/SUFFIX: lower case, no dots at the ends */
	char *text;     /* the rule as the user wrote it, for the audit log */
};

/* Asks whether a (canonical: a mapped ::ffff:a.b.c.d comes as IPv4; in no
 * blocked class) is one of the host's own addresses right now.  Must
 * answer true when it cannot tell (fail closed). */
typedef bool (*policy_host_fn)(void *ctx, const struct policy_addr *a);

struct policy {
	enum policy_mode mode;
	struct policy_rule *rules;
	size_t nrules, cap;
	struct policy_addr *host; /* the host's own addresses, as a fixed list */
	size_t nhost;
	/* The host's own addresses as they are at the moment of a decision
	 * (netstack/hostaddr.h); NULL: the list alone.  Consulted after the
	 * list, only for addresses outside every blocked class. */
	policy_host_fn host_fn;
	void *host_ctx;
};

/* Which step decided, for the audit log and for --learn. */
enum policy_why {
	POLICY_WHY_MODE_NONE,
	POLICY_WHY_DENY_RULE,
	POLICY_WHY_CLASS,     /* blocked address class (rule = "class:NAME") */
	POLICY_WHY_HOST,      /* one of the host's own addresses */
	POLICY_WHY_EXCEPTION, /* exception rule opened a blocked class */
	POLICY_WHY_PUBLIC,
	POLICY_WHY_ALLOW_RULE,
	POLICY_WHY_NO_MATCH,  /* allowlist and nothing matched */
	POLICY_WHY_BAD_NAME,  /* name that is no DNS name (numeric, too long) */
};

struct policy_decision {
	bool allow;
	enum policy_why why;
	/* The rule text, or a fixed label ("mode:none", "class:loopback",
	 * "host", "mode:public", "allowlist"); valid while the policy lives. */
	const char *rule;
};

/* Start an empty policy in mode m.  Never fails. */
void policy_init(struct policy *p, enum policy_mode m);

/* Release everything policy_init/policy_add_rule/policy_set_host_addrs took. */
void policy_free(struct policy *p);

/* Parse "none", "public" or "allowlist" into *m: 0 or -EINVAL. */
int policy_parse_mode(const char *s, enum policy_mode *m);

/* Parse one rule string without adding it: `[allow:|deny:]TARGET[:PORT]`
 * where TARGET is `*` (port required), `name`, `*.suffix`, `a.b.c.d[/len]`,
 * `[v6][/len]` or a bare `v6[/len]` (no port then).  On error returns
 * -EINVAL and writes a message for the user to err (if errlen > 0).
 * r->text is left NULL. */
int policy_parse_rule(const char *s, struct policy_rule *r, char *err, size_t errlen);

/* Parse s (see policy_parse_rule) and append it to p.  --deny RULE is
 * "deny:RULE".  Returns 0, -EINVAL (message in err) or -ENOMEM. */
int policy_add_rule(struct policy *p, const char *s, char *err, size_t errlen);

/* Replace the list of the host's own addresses (copied); these are
 * blocked like a class.  0 or -ENOMEM. */
int policy_set_host_addrs(struct policy *p, const struct policy_addr *a, size_t n);

/* Ask fn(ctx, a) at every decision whether a is the host's own (see
 * policy_host_fn); fn NULL: only the list.  ctx must outlive p's use. */
void policy_set_host_fn(struct policy *p, policy_host_fn fn, void *ctx);

/* Strict address parser: dotted-quad IPv4 (no octal, hex or short forms)
 * or IPv6 without zone; 0 or -EINVAL. */
int policy_addr_parse(const char *s, struct policy_addr *a);

/* Write a in the usual text form to buf: 0 or -ENOSPC. */
int policy_addr_format(const struct policy_addr *a, char *buf, size_t len);

/* The blocked class a falls in ("loopback", "private", ...; IPv6 forms
 * that embed an IPv4 address are judged by that address), or NULL when a
 * is public.  The host's own addresses are not considered. */
const char *policy_addr_class(const struct policy_addr *a);

/* True if name, once normalised, is one libc would read as an IPv4
 * address ("127.1", "0x7f.1", "2130706433") rather than look it up. */
bool policy_name_is_numeric(const char *name);

/* Normalise a DNS name into out (size POLICY_NAME_MAX + 1): lower case, one
 * trailing dot removed.  -EINVAL if empty, too long or with an empty
 * label. */
int policy_name_normalize(const char *name, char *out);

/* The one host-name rule of kbox's lists (network rules, tls.bypass,
 * secret allow lists): true when NAME is HOST or, with BELOW, a strict
 * subdomain of HOST ("a.x.y" for "x.y", never "x.y" itself).
 * Case-insensitive (ASCII); one trailing dot on NAME or HOST is ignored; an
 * empty NAME matches nothing. */
bool policy_host_match(const char *host, bool below, const char *name);

/* policy_host_match for a pattern as written: "*.suffix" means BELOW suffix,
 * anything else that exact host. */
bool policy_pattern_match(const char *pattern, const char *name);

/* Decide a connection to dst:port (port 0 is never allowed to match a
 * port rule); name is what our DNS answered for dst, or NULL. */
void policy_check(const struct policy *p, const char *name, const struct policy_addr *dst, uint16_t port,
	       struct policy_decision *d);

/* Decide a DNS question for name before it is resolved: denied names get
 * REFUSED at once.  In allowlist mode only a name that a name rule (exact
 * or *.suffix, allow, any port) matches may reach the resolver; any other
 * is refused (POLICY_WHY_NO_MATCH, rule "allowlist") even when address or
 * `*:PORT` rules exist, so that a question cannot carry data out to the
 * upstream resolver. */
void policy_check_name(const struct policy *p, const char *name, struct policy_decision *d);

/* Whether the names a client states in its first bytes (TLS SNI, HTTP
 * Host) can change a decision under p: true when p has a deny rule for a
 * name, or is an allowlist with an allow rule for a name. */
bool policy_judges_stated_names(const struct policy *p);

/* Judge a name the client stated (SNI, Host; normalised or not) on a
 * connection to dst:port that *first allowed (under the name our DNS
 * gave, if any).  Refuses (d->allow false) when a deny rule matches the
 * stated name, or when first was allowed by an allow rule and the stated
 * name is allowed by none (allowlist: a name rule let the address in,
 * the client names another host there).  Otherwise d = *first.  A
 * stated name that is no DNS name is the caller's to refuse. */
void policy_check_stated(const struct policy *p, const char *stated, const struct policy_addr *dst, uint16_t port,
		      const struct policy_decision *first, struct policy_decision *d);

/* Decide whether one resolved address may be given to the guest as an
 * answer for name: refuses blocked classes unless an exception names it
 * (DNS rebinding), addresses a port-less deny rule covers, and, in
 * allowlist mode, addresses no rule for name or for the address allows. */
void policy_check_answer(const struct policy *p, const char *name, const struct policy_addr *a,
		      struct policy_decision *d);

#endif
