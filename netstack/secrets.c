/* secrets.yaml loader.  lib/yamltree.c turns the file into a bounded
 * tree (as for sandbox.yaml), which is then checked secret by secret.
 * Values are expanded from the environment or secrets.env
 * (lib/secenv.c); an expanded value is treated as radioactive: it is
 * never shown in a message and is wiped before it is freed. */
#include "netstack/secrets.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/errbuf.h"
#include "lib/secenv.h"
#include "lib/yamltree.h"
#include "netstack/policy.h"

/* The tree keeps literal values written in the file: they are secrets too,
 * so no message quotes an alias name or a refused byte. */
static const struct yamltree_rules sec_rules = {
	.max_depth = SECRETS_MAX_DEPTH,
	.max_nodes = SECRETS_MAX_NODES,
	.smaller = "file",
	.secret = true,
};

struct sec_ctx {
	char name[YAMLTREE_NAME_BUF]; /* printable form of the file name */
	char *err;
	size_t errlen;
	struct senv env;
};

__attribute__((format(printf, 4, 5))) static int
sec_err_at(struct sec_ctx *x, unsigned line, unsigned col, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = yamltree_verr(x->err, x->errlen, x->name, line, col, fmt, ap);
	va_end(ap);
	return rc;
}

#define sec_err(x, node, ...) sec_err_at((x), (node)->line, (node)->col, __VA_ARGS__)

static int sec_nomem(struct sec_ctx *x)
{
	return yamltree_nomem(x->err, x->errlen, x->name);
}

/* Free after wiping: any of these bytes may be a real value. */
static void sec_wipe_free(char *p, size_t len)
{
	if (p) {
		explicit_bzero(p, len);
		free(p);
	}
}

/* ---- checking one secret ---------------------------------------------- */

static void sec_secret_clear(struct secret *s)
{
	free(s->name);
	free(s->placeholder);
	free(s->env);
	sec_wipe_free(s->value, s->value_len + 1);
	for (size_t i = 0; i < s->n_allow; i++)
		free(s->allow[i]);
	free(s->allow);
	for (size_t i = 0; i < s->n_fields; i++)
		free(s->fields[i]);
	free(s->fields);
	memset(s, 0, sizeof *s);
}

/* Expand ${VAR} and $$ in the value node into s->value. */
static int sec_expand(struct sec_ctx *x, const struct yamltree_node *v, struct secret *s)
{
	if (v->kind != YAMLTREE_SCALAR || yamltree_is_null(v))
		return sec_err(x, v,
			       "secret %s: value is %s; expected a string such as "
			       "\"${%s}\"",
			       s->name, yamltree_kind_name(v), s->name);
	struct secenv_result r;
	int rc = secenv_expand(&x->env, v->str, v->len, SECENV_NAME_MAX, SECRETS_VALUE_MAX, &r,
			     x->err, x->errlen);
	switch (r.fault) {
	case SECENV_UNTERMINATED:
	case SECENV_BAD_NAME:
	case SECENV_LONG_NAME:
		return sec_err(x, v,
			       "secret %s: '${' at byte %zu of the value does not start a "
			       "variable; expected ${NAME} with NAME made of letters, digits "
			       "and '_' (write $$ for a literal $)",
			       s->name, r.at + 1);
	case SECENV_UNSET:
		return sec_err(x, v,
			       "secret %s: ${%.*s} is not set; expected %.*s in kbox's "
			       "environment or a line %.*s=... in %s",
			       s->name, (int)r.name_len, r.name, (int)r.name_len, r.name,
			       (int)r.name_len, r.name, x->env.name);
	case SECENV_TOO_BIG:
		return sec_err(x, v,
			       "secret %s: the value is longer than %u bytes; expected a "
			       "shorter value",
			       s->name, SECRETS_VALUE_MAX);
	}
	if (rc)
		return rc == -ENOMEM ? sec_nomem(x) : rc;
	char *out = r.str;
	size_t o = r.len;
	if (o == 0)
		rc = sec_err(x, v, "secret %s: the value is empty; expected a non-empty value",
			     s->name);
	for (size_t i = 0; !rc && i < o; i++)
		if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
			rc = sec_err(x, v,
				     "secret %s: the value contains a control character (byte "
				     "%zu); expected printable text (it is sent in HTTP "
				     "headers)",
				     s->name, i + 1);
	if (rc) {
		sec_wipe_free(out, o + 1);
		return rc;
	}
	s->value_len = o;
	s->value = out;
	return 0;
}

static bool sec_host_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

/* A DNS name: labels of [a-z0-9_-], no empty label. */
static bool sec_hostname_ok(const char *h, size_t n)
{
	if (n == 0 || n > SECRETS_HOST_MAX || h[0] == '.' || h[n - 1] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!sec_host_char((unsigned char)h[i]))
			return false;
		if (h[i] == '.' && h[i + 1] == '.')
			return false;
	}
	return true;
}

static int sec_str_list(struct sec_ctx *x, const struct yamltree_node *v, const struct secret *s,
			const char *key, size_t max, char ***out, size_t *n_out)
{
	if (v->kind != YAMLTREE_SEQ)
		return sec_err(x, v, "secret %s: %s is %s; expected a list such as [\"a\", \"b\"]",
			       s->name, key, v->kind == YAMLTREE_MAP ? "a mapping" : "a single value");
	if (v->n > max)
		return sec_err(x, v, "secret %s: %s has %zu entries; expected at most %zu",
			       s->name, key, v->n, max);
	*out = calloc(v->n ? v->n : 1, sizeof **out);
	if (!*out)
		return sec_nomem(x);
	*n_out = 0;
	for (size_t i = 0; i < v->n; i++) {
		const struct yamltree_node *e = v->kids[i];
		if (e->kind != YAMLTREE_SCALAR || yamltree_is_null(e))
			return sec_err(x, e, "secret %s: an entry of %s is %s; expected a name",
				       s->name, key, yamltree_kind_name(e));
		if (strlen(e->str) != e->len)
			return sec_err(x, e,
				       "secret %s: an entry of %s contains a NUL byte; expected a "
				       "name",
				       s->name, key);
		char *c = malloc(e->len + 1);
		if (!c)
			return sec_nomem(x);
		for (size_t j = 0; j < e->len; j++)
			c[j] = (char)tolower((unsigned char)e->str[j]);
		c[e->len] = '\0';
		(*out)[(*n_out)++] = c;
	}
	return 0;
}

static int sec_allow(struct sec_ctx *x, const struct yamltree_node *v, struct secret *s)
{
	int rc = sec_str_list(x, v, s, "allow", SECRETS_ALLOW_MAX, &s->allow, &s->n_allow);
	if (rc)
		return rc;
	if (s->n_allow == 0)
		return sec_err(x, v,
			       "secret %s: allow is empty; expected at least one destination "
			       "such as \"api.example.com\" or \"*.example.com\"",
			       s->name);
	for (size_t i = 0; i < s->n_allow; i++) {
		char *h = s->allow[i];
		size_t n = strlen(h);
		if (n && h[n - 1] == '.')
			h[--n] = '\0';
		const char *name = h;
		if (n >= 2 && h[0] == '*' && h[1] == '.')
			name += 2;
		if (!sec_hostname_ok(name, strlen(name))) {
			char show[YAMLTREE_SHOW_BUF];
			yamltree_show(show, sizeof show, h, n, YAMLTREE_SHOW_MAX);
			return sec_err(x, v->kids[i],
				       "secret %s: '%s' is not a host name; expected a name such "
				       "as \"api.example.com\" or \"*.example.com\"",
				       s->name, show);
		}
	}
	return 0;
}

static bool sec_token_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int sec_bool(struct sec_ctx *x, const struct yamltree_node *v, const struct secret *s,
		    const char *key, bool *out)
{
	if (v->kind == YAMLTREE_SCALAR && v->plain) {
		if (!strcmp(v->str, "true") || !strcmp(v->str, "True") || !strcmp(v->str, "TRUE")) {
			*out = true;
			return 0;
		}
		if (!strcmp(v->str, "false") || !strcmp(v->str, "False") ||
		    !strcmp(v->str, "FALSE")) {
			*out = false;
			return 0;
		}
	}
	return sec_err(x, v, "secret %s: substitution.%s is not a boolean; expected true or false",
		       s->name, key);
}

/* Which of keys[] (n of them) key k of secret s's mapping is, with
 * seen[] holding the line each key first stood on: an unknown or repeated
 * key is refused, the message naming it after within ("substitution." or
 * "").  The index, or a negative errno. */
static int sec_key(struct sec_ctx *x, const struct yamltree_node *k, const struct secret *s,
		   const char *within, const char *const *keys, size_t n, unsigned *seen)
{
	size_t w = 0;
	while (w < n && (k->kind != YAMLTREE_SCALAR || strcmp(k->str, keys[w]) != 0))
		w++;
	if (w == n) {
		char show[YAMLTREE_SHOW_BUF] = "", list[128] = "";
		if (k->kind == YAMLTREE_SCALAR)
			yamltree_show(show, sizeof show, k->str, k->len, YAMLTREE_SHOW_MAX);
		for (size_t i = 0, o = 0; i < n && o < sizeof list; i++)
			o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "",
					      keys[i]);
		return sec_err(x, k, "secret %s: unknown key '%s%s'; expected one of: %s", s->name,
			       within, show, list);
	}
	if (seen[w])
		return sec_err(x, k,
			       "secret %s: duplicate key '%s%s' (first at line %u); expected each "
			       "key once",
			       s->name, within, keys[w], seen[w]);
	seen[w] = k->line;
	return (int)w;
}

static int sec_substitution(struct sec_ctx *x, const struct yamltree_node *v, struct secret *s)
{
	static const char *const keys[] = { "headers", "header_fields", "query", "body" };
	unsigned seen[4] = { 0 };
	if (yamltree_is_null(v))
		return 0;
	if (v->kind != YAMLTREE_MAP)
		return sec_err(x, v,
			       "secret %s: substitution is %s; expected a mapping with headers, "
			       "header_fields, query and body",
			       s->name, yamltree_kind_name(v));
	for (size_t i = 0; i + 1 < v->n; i += 2) {
		const struct yamltree_node *e = v->kids[i + 1];
		int w = sec_key(x, v->kids[i], s, "substitution.", keys, 4, seen);
		if (w < 0)
			return w;
		int rc;
		if (w == 0)
			rc = sec_bool(x, e, s, "headers", &s->sub_headers);
		else if (w == 2)
			rc = sec_bool(x, e, s, "query", &s->sub_query);
		else if (w == 3)
			rc = sec_bool(x, e, s, "body", &s->sub_body);
		else {
			rc = sec_str_list(x, e, s, "header_fields", SECRETS_FIELDS_MAX, &s->fields,
					  &s->n_fields);
			for (size_t f = 0; !rc && f < s->n_fields; f++) {
				const char *h = s->fields[f];
				size_t n = strlen(h);
				bool ok = n > 0 && n <= SECRETS_FIELD_MAX;
				for (size_t j = 0; ok && j < n; j++)
					ok = sec_token_char((unsigned char)h[j]);
				if (!ok) {
					char show[YAMLTREE_SHOW_BUF];
					yamltree_show(show, sizeof show, h, n, YAMLTREE_SHOW_MAX);
					rc = sec_err(x, e->kids[f],
						     "secret %s: '%s' is not a header field name; "
						     "expected a name such as \"authorization\"",
						     s->name, show);
				}
			}
		}
		if (rc)
			return rc;
	}
	return 0;
}

static int sec_one(struct sec_ctx *x, const struct yamltree_node *k, const struct yamltree_node *v,
		   struct secret *s)
{
	static const char *const keys[] = { "value", "allow", "substitution" };
	unsigned seen[3] = { 0 };

	if (k->kind != YAMLTREE_SCALAR)
		return sec_err(x, k, "a secret's name is %s; expected a name such as "
				     "OPENCODE_API_KEY",
			       yamltree_kind_name(k));
	bool ok = k->len > 0 && k->len <= SECRETS_NAME_MAX &&
		  ((k->str[0] >= 'A' && k->str[0] <= 'Z') || k->str[0] == '_');
	for (size_t i = 1; ok && i < k->len; i++)
		ok = (k->str[i] >= 'A' && k->str[i] <= 'Z') || (k->str[i] >= '0' && k->str[i] <= '9') ||
		     k->str[i] == '_';
	if (!ok) /* not quoted: a mis-indented value can land here as a key */
		return sec_err(x, k,
			       "this key is not a valid secret name (not shown: it may be a "
			       "value); expected 1 to %u characters of A-Z, 0-9 and '_', not "
			       "starting with a digit",
			       SECRETS_NAME_MAX);
	s->name = strdup(k->str);
	s->placeholder = malloc(SECRETS_PLACEHOLDER_PREFIX_LEN + k->len + 1);
	s->env = malloc(k->len + 1 + SECRETS_PLACEHOLDER_PREFIX_LEN + k->len + 1);
	if (!s->name || !s->placeholder || !s->env)
		return sec_nomem(x);
	sprintf(s->placeholder, "%s%s", SECRETS_PLACEHOLDER_PREFIX, s->name);
	sprintf(s->env, "%s=%s", s->name, s->placeholder);
	s->sub_headers = true;

	if (v->kind != YAMLTREE_MAP)
		return sec_err(x, v,
			       "secret %s is %s; expected a mapping with value, allow and "
			       "substitution",
			       s->name, v->kind == YAMLTREE_SEQ ? "a list" : "a single value");
	for (size_t i = 0; i + 1 < v->n; i += 2) {
		int w = sec_key(x, v->kids[i], s, "", keys, 3, seen);
		if (w < 0)
			return w;
		const struct yamltree_node *e = v->kids[i + 1];
		int rc = w == 0 ? sec_expand(x, e, s)
			 : w == 1 ? sec_allow(x, e, s)
				  : sec_substitution(x, e, s);
		if (rc)
			return rc;
	}
	if (!seen[0])
		return sec_err(x, k, "secret %s has no value; expected value: \"${%s}\"", s->name,
			       s->name);
	if (!seen[1])
		return sec_err(x, k,
			       "secret %s has no allow list; expected allow: [\"host.example\"] "
			       "naming where the value may be sent",
			       s->name);
	return 0;
}

static int sec_top(struct sec_ctx *x, const struct yamltree_node *root, struct secrets *set)
{
	if (!root || yamltree_is_null(root))
		return 0;
	if (root->kind != YAMLTREE_MAP)
		return sec_err(x, root,
			       "the top level is %s; expected a mapping of secret names such "
			       "as 'OPENCODE_API_KEY:'",
			       root->kind == YAMLTREE_SEQ ? "a list" : "a single value");
	size_t n = root->n / 2;
	if (n > SECRETS_MAX)
		return sec_err(x, root, "%zu secrets; expected at most %u", n, SECRETS_MAX);
	set->v = calloc(n ? n : 1, sizeof *set->v);
	if (!set->v)
		return sec_nomem(x);
	for (size_t i = 0; i < n; i++) {
		const struct yamltree_node *k = root->kids[2 * i];
		struct secret *s = &set->v[set->n++];
		int rc = sec_one(x, k, root->kids[2 * i + 1], s);
		if (rc)
			return rc;
		for (size_t j = 0; j + 1 < set->n; j++)
			if (strcmp(set->v[j].name, s->name) == 0)
				return sec_err(x, k,
					       "duplicate secret %s; expected each name once",
					       s->name);
	}
	return 0;
}

/* ---- public ------------------------------------------------------------ */

void secrets_free(struct secrets *set)
{
	if (!set)
		return;
	for (size_t i = 0; i < set->n; i++)
		sec_secret_clear(&set->v[i]);
	free(set->v);
	free(set);
}

int secrets_load_buf(const char *name, const char *buf, size_t len, struct secrets **out,
		     char *err, size_t errlen)
{
	struct sec_ctx x = { .err = err, .errlen = errlen };
	struct yamltree_node *root = NULL;
	struct secrets *set = NULL;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	yamltree_show(x.name, sizeof x.name, name, strlen(name), YAMLTREE_NAME_MAX);
	if (len > SECRETS_MAX_BYTES) {
		yamltree_err(err, errlen, x.name, 0, 0,
		       "file is larger than %u bytes; expected a smaller file", SECRETS_MAX_BYTES);
		return -EFBIG;
	}
	int rc = secenv_init(&x.env, name) ? sec_nomem(&x)
					  : yamltree_parse(buf, len, &sec_rules, x.name, err, errlen, &root);
	if (!rc) {
		set = calloc(1, sizeof *set);
		rc = set ? sec_top(&x, root, set) : sec_nomem(&x);
	}
	yamltree_free(root);
	secenv_free(&x.env);
	if (rc) {
		secrets_free(set);
		return rc;
	}
	*out = set;
	return 0;
}

int secrets_load(const char *path, struct secrets **out, char *err, size_t errlen)
{
	char name[YAMLTREE_NAME_BUF], *buf;
	const char *stage;
	size_t len;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	yamltree_show(name, sizeof name, path, strlen(path), YAMLTREE_NAME_MAX);
	int rc = yamltree_slurp(path, SECRETS_MAX_BYTES, &buf, &len, &stage);
	if (rc == -EFBIG)
		yamltree_err(err, errlen, name, 0, 0,
		       "file is larger than %u bytes; expected a smaller file", SECRETS_MAX_BYTES);
	else if (rc && !strcmp(stage, "open"))
		yamltree_err(err, errlen, name, 0, 0, "cannot open: %s; expected a readable secrets file",
		       strerror(-rc));
	else if (rc && !strcmp(stage, "stat"))
		rc = yamltree_err(err, errlen, name, 0, 0, "not a regular file; expected a YAML file");
	else if (rc && rc != -ENOMEM)
		yamltree_err(err, errlen, name, 0, 0, "cannot read: %s; expected a readable file",
		       strerror(-rc));
	if (rc)
		return rc;
	rc = secrets_load_buf(path, buf, len, out, err, errlen);
	sec_wipe_free(buf, len + 1);
	return rc;
}

/* Swap everything but the name-derived strings. */
static void sec_swap_rules(struct secret *a, struct secret *b)
{
	struct secret t = *a;
	a->value = b->value;
	a->value_len = b->value_len;
	a->allow = b->allow;
	a->n_allow = b->n_allow;
	a->sub_headers = b->sub_headers;
	a->sub_query = b->sub_query;
	a->sub_body = b->sub_body;
	a->fields = b->fields;
	a->n_fields = b->n_fields;
	b->value = t.value;
	b->value_len = t.value_len;
	b->allow = t.allow;
	b->n_allow = t.n_allow;
	b->sub_headers = t.sub_headers;
	b->sub_query = t.sub_query;
	b->sub_body = t.sub_body;
	b->fields = t.fields;
	b->n_fields = t.n_fields;
}

int secrets_reload(struct secrets *set, const char *path, const char *name, char *err,
		   size_t errlen)
{
	struct secrets *fresh;
	char show[YAMLTREE_SHOW_BUF];
	int rc = secrets_load(path, &fresh, err, errlen);
	if (rc)
		return rc;
	yamltree_show(show, sizeof show, path, strlen(path), YAMLTREE_SHOW_MAX);
	if (name) {
		struct secret *old = (struct secret *)secrets_find(set, name, strlen(name));
		struct secret *nw = (struct secret *)secrets_find(fresh, name, strlen(name));
		if (!old || !nw) {
			char nshow[YAMLTREE_SHOW_BUF];
			yamltree_show(nshow, sizeof nshow, name, strlen(name), YAMLTREE_SHOW_MAX);
			errbuf_say(err, errlen,
			       "%s: no secret %s %s; expected the name of a secret the "
			       "sandbox was started with", show, nshow,
			       old ? "in the file any more" : "in the sandbox");
			secrets_free(fresh);
			return -ENOENT;
		}
		sec_swap_rules(old, nw);
		secrets_free(fresh);
		return 0;
	}
	bool same = fresh->n == set->n;
	for (size_t i = 0; same && i < set->n; i++)
		same = secrets_find(fresh, set->v[i].name, strlen(set->v[i].name)) != NULL;
	if (!same) {
		errbuf_say(err, errlen,
		       "%s: secrets were added or removed; expected the same names as "
		       "when the sandbox started (restart it to change the names)",
		       show);
		secrets_free(fresh);
		return -EINVAL;
	}
	for (size_t i = 0; i < set->n; i++)
		sec_swap_rules(&set->v[i], (struct secret *)secrets_find(fresh, set->v[i].name,
									 strlen(set->v[i].name)));
	secrets_free(fresh);
	return 0;
}

size_t secrets_count(const struct secrets *set)
{
	return set ? set->n : 0;
}

const struct secret *secrets_at(const struct secrets *set, size_t i)
{
	return set && i < set->n ? &set->v[i] : NULL;
}

const struct secret *secrets_find(const struct secrets *set, const char *name, size_t len)
{
	for (size_t i = 0; set && i < set->n; i++)
		if (strlen(set->v[i].name) == len && memcmp(set->v[i].name, name, len) == 0)
			return &set->v[i];
	return NULL;
}

const char *secrets_placeholder(const struct secret *s)
{
	return s->placeholder;
}

size_t secrets_env(const struct secrets *set, const char **out, size_t max)
{
	size_t n = secrets_count(set);
	for (size_t i = 0; i < n && i < max; i++)
		out[i] = set->v[i].env;
	return n;
}

bool secrets_hosts_match(const struct secret *s, const char *host)
{
	for (size_t i = 0; i < s->n_allow; i++)
		if (policy_pattern_match(s->allow[i], host))
			return true;
	return false;
}

static void sec_join(char *buf, size_t len, char *const *v, size_t n)
{
	size_t o = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n && o < len; i++) {
		int w = snprintf(buf + o, len - o, "%s%s", i ? ", " : "", v[i]);
		if (w < 0)
			break;
		o += (size_t)w;
	}
}

void secrets_describe_allow(const struct secret *s, char *buf, size_t len)
{
	if (len)
		sec_join(buf, len, s->allow, s->n_allow);
}

void secrets_describe_fields(const struct secret *s, char *buf, size_t len)
{
	if (!len)
		return;
	if (s->n_fields == 0)
		snprintf(buf, len, "all header fields");
	else
		sec_join(buf, len, s->fields, s->n_fields);
}
