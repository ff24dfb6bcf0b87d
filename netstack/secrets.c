/* secrets.yaml loader.  libyaml's events become a small bounded tree (as in
 * vmm/config.c: anchors, aliases and tags refused as they arrive), which is
 * then checked secret by secret.  Values are expanded from the environment
 * or secrets.env; an expanded value is treated as radioactive: it is never
 * shown in a message and is wiped before it is freed. */
#include "netstack/secrets.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#define SEC_SHOW_MAX 40
#define SEC_SHOW_BUF (4 * SEC_SHOW_MAX + 4)
#define SEC_PATH_MAX 256
#define SEC_PATH_BUF (4 * SEC_PATH_MAX + 4)

enum sec_kind { SEC_SCALAR, SEC_SEQ, SEC_MAP };

struct sec_node {
	enum sec_kind kind;
	unsigned line, col; /* 1-based */
	bool plain;
	char *str; /* scalar text, NUL-terminated; may hold NULs */
	size_t len;
	struct sec_node **kids; /* seq: items; map: key, value, key, value... */
	size_t n, cap;
};

/* secrets.env, read at most once per load and only when a variable is not
 * in the process environment. */
struct sec_envfile {
	bool tried;
	bool present;
	char *buf; /* KEY\0VALUE\0 pairs; holds real values */
	size_t len, cap;
};

struct sec_ctx {
	char name[SEC_PATH_BUF];    /* printable form of the file name */
	char envname[SEC_PATH_BUF]; /* printable secrets.env path */
	char envpath[4096];         /* secrets.env path as given */
	char *err;
	size_t errlen;
	unsigned nodes;
	struct sec_envfile env;
};

/* Printable ASCII copy of s (other bytes as \xNN), cut at max bytes. */
static void sec_show(char *out, size_t outlen, const char *s, size_t len, size_t max)
{
	size_t o = 0;
	for (size_t i = 0; i < len && i < max; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (o + 5 > outlen)
			break;
		if (ch >= 0x20 && ch < 0x7f && ch != '\\')
			out[o++] = (char)ch;
		else
			o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", ch);
	}
	if (len > max && o + 4 <= outlen) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

__attribute__((format(printf, 5, 6))) static int
sec_err_in(struct sec_ctx *x, const char *file, unsigned line, unsigned col, const char *fmt, ...)
{
	if (!x->err || !x->errlen)
		return -EINVAL;
	int n = line ? snprintf(x->err, x->errlen, "%s:%u:%u: ", file, line, col)
		     : snprintf(x->err, x->errlen, "%s: ", file);
	if (n >= 0 && (size_t)n < x->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

#define sec_err_at(x, line, col, ...) sec_err_in((x), (x)->name, (line), (col), __VA_ARGS__)
#define sec_err(x, node, ...) sec_err_at((x), (node)->line, (node)->col, __VA_ARGS__)

static int sec_nomem(struct sec_ctx *x)
{
	if (x->err && x->errlen)
		snprintf(x->err, x->errlen,
			 "%s: out of memory while loading; free some memory and retry", x->name);
	return -ENOMEM;
}

/* Free after wiping: any of these bytes may be a real value. */
static void sec_wipe_free(char *p, size_t len)
{
	if (p) {
		explicit_bzero(p, len);
		free(p);
	}
}

/* ---- the tree ---------------------------------------------------------- */

static void sec_node_free(struct sec_node *n)
{
	if (!n)
		return;
	/* Recursion depth is bounded by SECRETS_MAX_DEPTH. */
	for (size_t i = 0; i < n->n; i++)
		sec_node_free(n->kids[i]);
	free(n->kids);
	/* Scalars include the literal values users write in the file. */
	sec_wipe_free(n->str, n->len);
	free(n);
}

struct sec_builder {
	struct sec_node *root;
	struct sec_node *open[SECRETS_MAX_DEPTH];
	unsigned depth;
	unsigned docs;
};

static int sec_refuse_decoration(struct sec_ctx *x, unsigned line, unsigned col,
				 const yaml_char_t *anchor, const yaml_char_t *tag)
{
	char show[SEC_SHOW_BUF];
	if (anchor) {
		sec_show(show, sizeof show, (const char *)anchor, strlen((const char *)anchor),
			 SEC_SHOW_MAX);
		return sec_err_at(x, line, col,
				  "anchor '&%s' is not allowed; expected plain values "
				  "(anchors and aliases are refused)",
				  show);
	}
	if (tag) {
		sec_show(show, sizeof show, (const char *)tag, strlen((const char *)tag),
			 SEC_SHOW_MAX);
		return sec_err_at(x, line, col, "tag '%s' is not allowed; expected an untagged value",
				  show);
	}
	return 0;
}

static int sec_event(struct sec_ctx *x, struct sec_builder *b, const yaml_event_t *ev)
{
	unsigned line = (unsigned)ev->start_mark.line + 1;
	unsigned col = (unsigned)ev->start_mark.column + 1;
	enum sec_kind kind;
	int rc;

	switch (ev->type) {
	case YAML_DOCUMENT_START_EVENT:
		if (++b->docs > 1)
			return sec_err_at(x, line, col,
					  "a second YAML document starts here; expected one "
					  "document (remove the extra '---')");
		return 0;
	case YAML_ALIAS_EVENT:
		return sec_err_at(x, line, col,
				  "an alias is not allowed; expected plain values (anchors and "
				  "aliases are refused)");
	case YAML_SCALAR_EVENT:
		rc = sec_refuse_decoration(x, line, col, ev->data.scalar.anchor,
					   ev->data.scalar.tag);
		kind = SEC_SCALAR;
		break;
	case YAML_SEQUENCE_START_EVENT:
		rc = sec_refuse_decoration(x, line, col, ev->data.sequence_start.anchor,
					   ev->data.sequence_start.tag);
		kind = SEC_SEQ;
		break;
	case YAML_MAPPING_START_EVENT:
		rc = sec_refuse_decoration(x, line, col, ev->data.mapping_start.anchor,
					   ev->data.mapping_start.tag);
		kind = SEC_MAP;
		break;
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		if (b->depth)
			b->depth--;
		return 0;
	default:
		return 0;
	}
	if (rc)
		return rc;
	if (x->nodes >= SECRETS_MAX_NODES)
		return sec_err_at(x, line, col,
				  "more than %u values in the file; expected a smaller file",
				  SECRETS_MAX_NODES);
	if (kind != SEC_SCALAR && b->depth >= SECRETS_MAX_DEPTH)
		return sec_err_at(x, line, col,
				  "nesting deeper than %u levels; expected a flatter structure",
				  SECRETS_MAX_DEPTH);

	struct sec_node *n = calloc(1, sizeof *n);
	if (!n)
		return sec_nomem(x);
	n->kind = kind;
	n->line = line;
	n->col = col;
	if (kind == SEC_SCALAR) {
		n->len = ev->data.scalar.length;
		n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
		n->str = malloc(n->len + 1);
		if (!n->str) {
			free(n);
			return sec_nomem(x);
		}
		if (n->len)
			memcpy(n->str, ev->data.scalar.value, n->len);
		n->str[n->len] = '\0';
	}
	if (b->depth == 0) {
		b->root = n;
	} else {
		struct sec_node *p = b->open[b->depth - 1];
		if (p->n == p->cap) {
			size_t cap = p->cap ? p->cap * 2 : 4;
			struct sec_node **k = realloc(p->kids, cap * sizeof *k);
			if (!k) {
				sec_node_free(n);
				return sec_nomem(x);
			}
			p->kids = k;
			p->cap = cap;
		}
		p->kids[p->n++] = n;
	}
	x->nodes++;
	if (kind != SEC_SCALAR)
		b->open[b->depth++] = n;
	return 0;
}

/* libyaml's message with our position; reader errors carry only a byte
 * offset, so line and column are counted from the buffer.  The text around
 * the problem is not quoted: it may be a value. */
static int sec_syntax_err(struct sec_ctx *x, const yaml_parser_t *p, const char *buf, size_t len)
{
	const char *problem = p->problem ? p->problem : "unknown error";
	if (p->error == YAML_MEMORY_ERROR)
		return sec_nomem(x);
	if (p->error == YAML_READER_ERROR) {
		size_t off = p->problem_offset < len ? p->problem_offset : len;
		unsigned line = 1, col = 1;
		for (size_t i = 0; i < off; i++) {
			if (buf[i] == '\n') {
				line++;
				col = 1;
			} else if (((unsigned char)buf[i] & 0xc0) != 0x80) {
				col++;
			}
		}
		return sec_err_at(x, line, col,
				  "invalid text: %s; expected UTF-8 text without control "
				  "characters",
				  problem);
	}
	unsigned line = (unsigned)p->problem_mark.line + 1;
	unsigned col = (unsigned)p->problem_mark.column + 1;
	if (p->context)
		return sec_err_at(x, line, col,
				  "invalid YAML: %s (%s at line %u, column %u); expected valid "
				  "YAML syntax",
				  problem, p->context, (unsigned)p->context_mark.line + 1,
				  (unsigned)p->context_mark.column + 1);
	return sec_err_at(x, line, col, "invalid YAML: %s; expected valid YAML syntax", problem);
}

static int sec_build(struct sec_ctx *x, const char *buf, size_t len, struct sec_node **root)
{
	struct sec_builder b = { 0 };
	yaml_parser_t p;
	int rc = 0;
	bool done = false;

	if (!yaml_parser_initialize(&p))
		return sec_nomem(x);
	yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
	yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);
	while (!done && !rc) {
		yaml_event_t ev;
		if (!yaml_parser_parse(&p, &ev)) {
			rc = sec_syntax_err(x, &p, buf, len);
			break;
		}
		rc = sec_event(x, &b, &ev);
		done = ev.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&ev);
	}
	/* libyaml frees its own copies of scalars without wiping them (it has
	 * no allocator hooks); values written as ${VAR} never pass through it. */
	yaml_parser_delete(&p);
	if (rc) {
		sec_node_free(b.root);
		return rc;
	}
	*root = b.root;
	return 0;
}

static bool sec_is_null(const struct sec_node *v)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };
	if (v->kind != SEC_SCALAR || !v->plain)
		return false;
	for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
		if (strcmp(v->str, nulls[i]) == 0)
			return true;
	return false;
}

static const char *sec_kind_name(const struct sec_node *v)
{
	if (v->kind == SEC_SEQ)
		return "a list";
	if (v->kind == SEC_MAP)
		return "a mapping";
	return "an empty value";
}

/* ---- secrets.env ------------------------------------------------------- */

static bool sec_is_var_start(int c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool sec_is_var_char(int c)
{
	return sec_is_var_start(c) || (c >= '0' && c <= '9');
}

static int sec_env_add(struct sec_ctx *x, const char *k, size_t klen, const char *v, size_t vlen)
{
	struct sec_envfile *e = &x->env;
	size_t need = klen + vlen + 2;
	if (e->len + need > e->cap) {
		size_t cap = e->cap ? e->cap : 1024;
		while (cap < e->len + need)
			cap *= 2;
		char *nb = malloc(cap);
		if (!nb)
			return sec_nomem(x);
		if (e->len)
			memcpy(nb, e->buf, e->len);
		/* Not realloc: the old block holds values and must be wiped. */
		sec_wipe_free(e->buf, e->cap);
		e->buf = nb;
		e->cap = cap;
	}
	memcpy(e->buf + e->len, k, klen);
	e->buf[e->len + klen] = '\0';
	memcpy(e->buf + e->len + klen + 1, v, vlen);
	e->buf[e->len + klen + 1 + vlen] = '\0';
	e->len += need;
	return 0;
}

/* One KEY=VALUE line (without its newline).  Messages name keys and
 * positions, never what follows '='. */
static int sec_env_line(struct sec_ctx *x, const char *s, size_t n, unsigned line)
{
	size_t i = 0;
	while (i < n && (s[i] == ' ' || s[i] == '\t'))
		i++;
	if (i == n || s[i] == '#')
		return 0;
	if (n - i > 7 && memcmp(s + i, "export", 6) == 0 && (s[i + 6] == ' ' || s[i + 6] == '\t')) {
		i += 7;
		while (i < n && (s[i] == ' ' || s[i] == '\t'))
			i++;
	}
	size_t k = i;
	if (i == n || !sec_is_var_start((unsigned char)s[i]))
		return sec_err_in(x, x->envname, line, (unsigned)i + 1,
				  "expected a line KEY=VALUE, a comment (#) or nothing");
	while (i < n && sec_is_var_char((unsigned char)s[i]))
		i++;
	size_t klen = i - k;
	if (i == n || s[i] != '=')
		return sec_err_in(x, x->envname, line, (unsigned)i + 1,
				  "expected '=' after the name; write KEY=VALUE");
	i++;
	size_t v, vlen;
	if (i < n && (s[i] == '"' || s[i] == '\'')) {
		char q = s[i++];
		v = i;
		while (i < n && s[i] != q)
			i++;
		if (i == n)
			return sec_err_in(x, x->envname, line, (unsigned)v,
					  "the quoted value does not end on this line; expected "
					  "a closing %c",
					  q);
		vlen = i - v;
		i++;
		while (i < n && (s[i] == ' ' || s[i] == '\t'))
			i++;
		if (i < n && s[i] != '#')
			return sec_err_in(x, x->envname, line, (unsigned)i + 1,
					  "text after the closing quote; expected the end of the "
					  "line or a # comment");
	} else {
		v = i;
		while (i < n && !((s[i] == '#') && i > v && (s[i - 1] == ' ' || s[i - 1] == '\t')))
			i++;
		vlen = i - v;
		while (vlen && (s[v + vlen - 1] == ' ' || s[v + vlen - 1] == '\t'))
			vlen--;
	}
	for (size_t j = v; j < v + vlen; j++)
		if ((unsigned char)s[j] < 0x20 || s[j] == 0x7f)
			return sec_err_in(x, x->envname, line, (unsigned)(j + 1),
					  "the value of %.*s contains a control character; "
					  "expected printable text",
					  (int)klen, s + k);
	return sec_env_add(x, s + k, klen, s + v, vlen);
}

static int sec_env_read(struct sec_ctx *x)
{
	struct sec_envfile *e = &x->env;
	e->tried = true;
	int fd = open(x->envpath, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		int rc = -errno;
		sec_err_in(x, x->envname, 0, 0, "cannot open: %s; expected a readable file",
			   strerror(-rc));
		return rc;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SECRETS_ENV_MAX_BYTES) {
		close(fd);
		return sec_err_in(x, x->envname, 0, 0,
				  "not a regular file of at most %u bytes; expected KEY=VALUE "
				  "lines",
				  SECRETS_ENV_MAX_BYTES);
	}
	char *buf = malloc(SECRETS_ENV_MAX_BYTES + 1);
	if (!buf) {
		close(fd);
		return sec_nomem(x);
	}
	size_t len = 0;
	int rc = 0;
	while (len <= SECRETS_ENV_MAX_BYTES) {
		ssize_t r = read(fd, buf + len, SECRETS_ENV_MAX_BYTES + 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			sec_err_in(x, x->envname, 0, 0, "cannot read: %s; expected a readable file",
				   strerror(-rc));
			break;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	if (!rc && len > SECRETS_ENV_MAX_BYTES)
		rc = sec_err_in(x, x->envname, 0, 0, "larger than %u bytes; expected a smaller file",
				SECRETS_ENV_MAX_BYTES);
	unsigned line = 1;
	for (size_t s = 0; !rc && s < len; line++) {
		size_t eol = s;
		while (eol < len && buf[eol] != '\n')
			eol++;
		size_t n = eol - s;
		if (n && buf[s + n - 1] == '\r')
			n--;
		rc = sec_env_line(x, buf + s, n, line);
		s = eol + 1;
	}
	sec_wipe_free(buf, SECRETS_ENV_MAX_BYTES + 1);
	if (!rc)
		e->present = true;
	return rc;
}

/* The value of VAR from the environment, then secrets.env; NULL if unset. */
static int sec_lookup(struct sec_ctx *x, const char *var, const char **out)
{
	*out = getenv(var);
	if (*out)
		return 0;
	if (!x->env.tried) {
		int rc = sec_env_read(x);
		if (rc)
			return rc;
	}
	/* The last line setting a key wins, as in a shell. */
	for (size_t o = 0; o < x->env.len;) {
		const char *k = x->env.buf + o;
		const char *v = k + strlen(k) + 1;
		if (strcmp(k, var) == 0)
			*out = v;
		o = (size_t)(v - x->env.buf) + strlen(v) + 1;
	}
	return 0;
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
static int sec_expand(struct sec_ctx *x, const struct sec_node *v, struct secret *s)
{
	if (v->kind != SEC_SCALAR || sec_is_null(v))
		return sec_err(x, v,
			       "secret %s: value is %s; expected a string such as "
			       "\"${%s}\"",
			       s->name, sec_kind_name(v), s->name);
	char *out = malloc(SECRETS_VALUE_MAX + 1);
	if (!out)
		return sec_nomem(x);
	size_t o = 0;
	int rc = 0;
	for (size_t i = 0; i < v->len && !rc;) {
		const char *add = v->str + i;
		size_t addlen = 1;
		if (v->str[i] == '$') {
			if (i + 1 < v->len && v->str[i + 1] == '$') {
				addlen = 1;
				i += 2;
			} else if (i + 1 < v->len && v->str[i + 1] == '{') {
				size_t b = i + 2, e = b;
				while (e < v->len && sec_is_var_char((unsigned char)v->str[e]))
					e++;
				if (e == b || e >= v->len || v->str[e] != '}' ||
				    !sec_is_var_start((unsigned char)v->str[b]) || e - b > 255) {
					rc = sec_err(x, v,
						     "secret %s: '${' at byte %zu of the value does "
						     "not start a variable; expected ${NAME} with "
						     "NAME made of letters, digits and '_' (write $$ "
						     "for a literal $)",
						     s->name, i + 1);
					break;
				}
				char var[256];
				memcpy(var, v->str + b, e - b);
				var[e - b] = '\0';
				rc = sec_lookup(x, var, &add);
				if (rc)
					break;
				if (!add) {
					rc = sec_err(x, v,
						     "secret %s: ${%s} is not set; expected %s in "
						     "kbox's environment or a line %s=... in %s",
						     s->name, var, var, var, x->envname);
					break;
				}
				addlen = strlen(add);
				i = e + 1;
			} else {
				/* As in sandbox.yaml: a '$' before anything else is
				 * itself, so tokens containing '$' need no escaping. */
				i++;
			}
		} else {
			i++;
		}
		if (o + addlen > SECRETS_VALUE_MAX) {
			rc = sec_err(x, v,
				     "secret %s: the value is longer than %u bytes; expected a "
				     "shorter value",
				     s->name, SECRETS_VALUE_MAX);
			break;
		}
		memcpy(out + o, add, addlen);
		o += addlen;
	}
	if (!rc && o == 0)
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
		sec_wipe_free(out, SECRETS_VALUE_MAX + 1);
		return rc;
	}
	/* A right-sized copy, so that value_len + 1 bytes are all there is to
	 * wipe later. */
	char *fit = malloc(o + 1);
	if (fit) {
		memcpy(fit, out, o);
		fit[o] = '\0';
	}
	sec_wipe_free(out, SECRETS_VALUE_MAX + 1);
	if (!fit)
		return sec_nomem(x);
	s->value_len = o;
	s->value = fit;
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

static int sec_str_list(struct sec_ctx *x, const struct sec_node *v, const struct secret *s,
			const char *key, size_t max, char ***out, size_t *n_out)
{
	if (v->kind != SEC_SEQ)
		return sec_err(x, v, "secret %s: %s is %s; expected a list such as [\"a\", \"b\"]",
			       s->name, key, v->kind == SEC_MAP ? "a mapping" : "a single value");
	if (v->n > max)
		return sec_err(x, v, "secret %s: %s has %zu entries; expected at most %zu",
			       s->name, key, v->n, max);
	*out = calloc(v->n ? v->n : 1, sizeof **out);
	if (!*out)
		return sec_nomem(x);
	*n_out = 0;
	for (size_t i = 0; i < v->n; i++) {
		const struct sec_node *e = v->kids[i];
		if (e->kind != SEC_SCALAR || sec_is_null(e))
			return sec_err(x, e, "secret %s: an entry of %s is %s; expected a name",
				       s->name, key, sec_kind_name(e));
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

static int sec_allow(struct sec_ctx *x, const struct sec_node *v, struct secret *s)
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
			char show[SEC_SHOW_BUF];
			sec_show(show, sizeof show, h, n, SEC_SHOW_MAX);
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

static int sec_bool(struct sec_ctx *x, const struct sec_node *v, const struct secret *s,
		    const char *key, bool *out)
{
	if (v->kind == SEC_SCALAR && v->plain) {
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

static int sec_substitution(struct sec_ctx *x, const struct sec_node *v, struct secret *s)
{
	static const char *const keys[] = { "headers", "header_fields", "query", "body" };
	unsigned seen[4] = { 0 };
	if (sec_is_null(v))
		return 0;
	if (v->kind != SEC_MAP)
		return sec_err(x, v,
			       "secret %s: substitution is %s; expected a mapping with headers, "
			       "header_fields, query and body",
			       s->name, sec_kind_name(v));
	for (size_t i = 0; i + 1 < v->n; i += 2) {
		const struct sec_node *k = v->kids[i], *e = v->kids[i + 1];
		size_t w = 0;
		while (w < 4 && (k->kind != SEC_SCALAR || strcmp(k->str, keys[w]) != 0))
			w++;
		if (w == 4) {
			char show[SEC_SHOW_BUF] = "";
			if (k->kind == SEC_SCALAR)
				sec_show(show, sizeof show, k->str, k->len, SEC_SHOW_MAX);
			return sec_err(x, k,
				       "secret %s: unknown key 'substitution.%s'; expected one "
				       "of: headers, header_fields, query, body",
				       s->name, show);
		}
		if (seen[w])
			return sec_err(x, k,
				       "secret %s: duplicate key 'substitution.%s' (first at line "
				       "%u); expected each key once",
				       s->name, keys[w], seen[w]);
		seen[w] = k->line;
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
					char show[SEC_SHOW_BUF];
					sec_show(show, sizeof show, h, n, SEC_SHOW_MAX);
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

static int sec_one(struct sec_ctx *x, const struct sec_node *k, const struct sec_node *v,
		   struct secret *s)
{
	char show[SEC_SHOW_BUF];
	static const char *const keys[] = { "value", "allow", "substitution" };
	const struct sec_node *found[3] = { NULL, NULL, NULL };

	if (k->kind != SEC_SCALAR)
		return sec_err(x, k, "a secret's name is %s; expected a name such as "
				     "OPENCODE_API_KEY",
			       sec_kind_name(k));
	bool ok = k->len > 0 && k->len <= SECRETS_NAME_MAX &&
		  ((k->str[0] >= 'A' && k->str[0] <= 'Z') || k->str[0] == '_');
	for (size_t i = 1; ok && i < k->len; i++)
		ok = (k->str[i] >= 'A' && k->str[i] <= 'Z') || (k->str[i] >= '0' && k->str[i] <= '9') ||
		     k->str[i] == '_';
	if (!ok) {
		sec_show(show, sizeof show, k->str, k->len, SEC_SHOW_MAX);
		return sec_err(x, k,
			       "'%s' is not a valid secret name; expected 1 to %u characters "
			       "of A-Z, 0-9 and '_', not starting with a digit",
			       show, SECRETS_NAME_MAX);
	}
	s->name = strdup(k->str);
	s->placeholder = malloc(SECRETS_PLACEHOLDER_PREFIX_LEN + k->len + 1);
	s->env = malloc(k->len + 1 + SECRETS_PLACEHOLDER_PREFIX_LEN + k->len + 1);
	if (!s->name || !s->placeholder || !s->env)
		return sec_nomem(x);
	sprintf(s->placeholder, "%s%s", SECRETS_PLACEHOLDER_PREFIX, s->name);
	sprintf(s->env, "%s=%s", s->name, s->placeholder);
	s->sub_headers = true;

	if (v->kind != SEC_MAP)
		return sec_err(x, v,
			       "secret %s is %s; expected a mapping with value, allow and "
			       "substitution",
			       s->name, v->kind == SEC_SEQ ? "a list" : "a single value");
	for (size_t i = 0; i + 1 < v->n; i += 2) {
		const struct sec_node *kk = v->kids[i];
		size_t w = 0;
		while (w < 3 && (kk->kind != SEC_SCALAR || strcmp(kk->str, keys[w]) != 0))
			w++;
		if (w == 3) {
			show[0] = '\0';
			if (kk->kind == SEC_SCALAR)
				sec_show(show, sizeof show, kk->str, kk->len, SEC_SHOW_MAX);
			return sec_err(x, kk,
				       "secret %s: unknown key '%s'; expected one of: value, "
				       "allow, substitution",
				       s->name, show);
		}
		if (found[w])
			return sec_err(x, kk,
				       "secret %s: duplicate key '%s' (first at line %u); expected "
				       "each key once",
				       s->name, keys[w], found[w]->line);
		found[w] = kk;
		const struct sec_node *e = v->kids[i + 1];
		int rc = w == 0 ? sec_expand(x, e, s)
			 : w == 1 ? sec_allow(x, e, s)
				  : sec_substitution(x, e, s);
		if (rc)
			return rc;
	}
	if (!found[0])
		return sec_err(x, k, "secret %s has no value; expected value: \"${%s}\"", s->name,
			       s->name);
	if (!found[1])
		return sec_err(x, k,
			       "secret %s has no allow list; expected allow: [\"host.example\"] "
			       "naming where the value may be sent",
			       s->name);
	return 0;
}

static int sec_top(struct sec_ctx *x, const struct sec_node *root, struct secrets *set)
{
	if (!root || sec_is_null(root))
		return 0;
	if (root->kind != SEC_MAP)
		return sec_err(x, root,
			       "the top level is %s; expected a mapping of secret names such "
			       "as 'OPENCODE_API_KEY:'",
			       root->kind == SEC_SEQ ? "a list" : "a single value");
	size_t n = root->n / 2;
	if (n > SECRETS_MAX)
		return sec_err(x, root, "%zu secrets; expected at most %u", n, SECRETS_MAX);
	set->v = calloc(n ? n : 1, sizeof *set->v);
	if (!set->v)
		return sec_nomem(x);
	for (size_t i = 0; i < n; i++) {
		const struct sec_node *k = root->kids[2 * i];
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
	struct sec_node *root = NULL;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	sec_show(x.name, sizeof x.name, name, strlen(name), SEC_PATH_MAX);
	const char *slash = strrchr(name, '/');
	size_t dirlen = slash ? (size_t)(slash - name) + 1 : 0;
	if (dirlen + sizeof "secrets.env" > sizeof x.envpath) {
		sec_err_in(&x, x.name, 0, 0, "path too long; expected a shorter path");
		return -ENAMETOOLONG;
	}
	memcpy(x.envpath, name, dirlen);
	strcpy(x.envpath + dirlen, "secrets.env");
	sec_show(x.envname, sizeof x.envname, x.envpath, strlen(x.envpath), SEC_PATH_MAX);
	if (len > SECRETS_MAX_BYTES) {
		sec_err_in(&x, x.name, 0, 0, "file is larger than %u bytes; expected a smaller file",
			   SECRETS_MAX_BYTES);
		return -EFBIG;
	}
	int rc = sec_build(&x, buf, len, &root);
	if (rc)
		return rc;
	struct secrets *set = calloc(1, sizeof *set);
	if (!set)
		rc = sec_nomem(&x);
	else
		rc = sec_top(&x, root, set);
	sec_node_free(root);
	sec_wipe_free(x.env.buf, x.env.cap);
	if (rc) {
		secrets_free(set);
		return rc;
	}
	*out = set;
	return 0;
}

int secrets_load(const char *path, struct secrets **out, char *err, size_t errlen)
{
	char name[SEC_PATH_BUF];
	struct stat st;
	int rc;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	sec_show(name, sizeof name, path, strlen(path), SEC_PATH_MAX);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: cannot open: %s; expected a readable secrets file",
				 name, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		if (err && errlen)
			snprintf(err, errlen, "%s: not a regular file; expected a YAML file", name);
		return -EINVAL;
	}
	if (st.st_size > (off_t)SECRETS_MAX_BYTES) {
		close(fd);
		if (err && errlen)
			snprintf(err, errlen,
				 "%s: file is larger than %u bytes; expected a smaller file", name,
				 SECRETS_MAX_BYTES);
		return -EFBIG;
	}
	char *buf = malloc(SECRETS_MAX_BYTES + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	size_t len = 0;
	rc = 0;
	while (len <= SECRETS_MAX_BYTES) {
		ssize_t r = read(fd, buf + len, SECRETS_MAX_BYTES + 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			if (err && errlen)
				snprintf(err, errlen, "%s: cannot read: %s; expected a readable file",
					 name, strerror(-rc));
			break;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	if (!rc)
		rc = secrets_load_buf(path, buf, len, out, err, errlen);
	sec_wipe_free(buf, SECRETS_MAX_BYTES + 1);
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
	char show[SEC_SHOW_BUF];
	int rc = secrets_load(path, &fresh, err, errlen);
	if (rc)
		return rc;
	sec_show(show, sizeof show, path, strlen(path), SEC_SHOW_MAX);
	if (name) {
		struct secret *old = (struct secret *)secrets_find(set, name, strlen(name));
		struct secret *nw = (struct secret *)secrets_find(fresh, name, strlen(name));
		if (!old || !nw) {
			char nshow[SEC_SHOW_BUF];
			sec_show(nshow, sizeof nshow, name, strlen(name), SEC_SHOW_MAX);
			if (err && errlen)
				snprintf(err, errlen,
					 "%s: no secret %s %s; expected the name of a secret the "
					 "sandbox was started with",
					 show, nshow, old ? "in the file any more" : "in the sandbox");
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
		if (err && errlen)
			snprintf(err, errlen,
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
	size_t hn = strlen(host);
	if (hn && host[hn - 1] == '.')
		hn--;
	if (hn == 0)
		return false;
	for (size_t i = 0; i < s->n_allow; i++) {
		const char *a = s->allow[i];
		size_t an = strlen(a);
		if (an >= 2 && a[0] == '*' && a[1] == '.') {
			/* "*.x.y" matches "a.x.y", never "x.y": the suffix with its dot. */
			size_t sn = an - 1;
			if (hn > sn && strncasecmp(host + hn - sn, a + 1, sn) == 0)
				return true;
		} else if (an == hn && strncasecmp(host, a, hn) == 0) {
			return true;
		}
	}
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
