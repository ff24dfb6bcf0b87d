/* The tree is built from libyaml's event stream, not its document API, so
 * that an anchor, an alias or a tag is refused the moment it appears and a
 * "billion laughs" file never gets to grow. */
#include "lib/yamltree.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "lib/errbuf.h"
#include "lib/fileio.h"
#include "lib/grow.h"

void yamltree_show(char *out, size_t outlen, const char *s, size_t len, size_t max)
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

int yamltree_verr(char *err, size_t errlen, const char *name, unsigned line, unsigned col,
		  const char *fmt, va_list ap)
{
	if (!err || !errlen)
		return -EINVAL;
	int n = line ? snprintf(err, errlen, "%s:%u:%u: ", name, line, col)
		     : snprintf(err, errlen, "%s: ", name);
	if (n >= 0 && (size_t)n < errlen)
		vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
	return -EINVAL;
}

int yamltree_err(char *err, size_t errlen, const char *name, unsigned line, unsigned col,
		 const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = yamltree_verr(err, errlen, name, line, col, fmt, ap);
	va_end(ap);
	return rc;
}

int yamltree_nomem(char *err, size_t errlen, const char *name)
{
	return errbuf_fail(err, errlen, -ENOMEM,
		       "%s: out of memory while loading; free some memory and retry", name);
}

/* ---- the tree ---------------------------------------------------------- */

static void yamltree_wipe_free(char *p, size_t len)
{
	if (p) {
		explicit_bzero(p, len);
		free(p);
	}
}

void yamltree_free(struct yamltree_node *n)
{
	if (!n)
		return;
	/* Recursion depth is bounded by YAMLTREE_DEPTH_MAX. */
	for (size_t i = 0; i < n->n; i++)
		yamltree_free(n->kids[i]);
	free(n->kids);
	yamltree_wipe_free(n->str, n->len);
	yamltree_wipe_free(n->raw, n->rawlen);
	free(n);
}

struct yamltree_builder {
	const struct yamltree_rules *rules;
	const char *name;
	char *err;
	size_t errlen;
	struct yamltree_node *root;
	struct yamltree_node *open[YAMLTREE_DEPTH_MAX]; /* containers not yet ended */
	unsigned depth, max_depth;
	unsigned docs, nodes;
};

static int yamltree_attach(struct yamltree_node *parent, struct yamltree_node *kid)
{
	if (grow_array(&parent->kids, &parent->cap, parent->n + 1, sizeof *parent->kids, 4, 0) < 0)
		return -ENOMEM;
	parent->kids[parent->n++] = kid;
	return 0;
}

static int yamltree_refuse_decoration(struct yamltree_builder *b, unsigned line, unsigned col,
				      const yaml_char_t *anchor, const yaml_char_t *tag)
{
	char show[YAMLTREE_SHOW_BUF];
	if (anchor) {
		yamltree_show(show, sizeof show, (const char *)anchor, strlen((const char *)anchor),
			YAMLTREE_SHOW_MAX);
		return yamltree_err(b->err, b->errlen, b->name, line, col,
			      "anchor '&%s' is not allowed; expected plain values (anchors and "
			      "aliases are refused)",
			      show);
	}
	if (tag) {
		yamltree_show(show, sizeof show, (const char *)tag, strlen((const char *)tag),
			YAMLTREE_SHOW_MAX);
		return yamltree_err(b->err, b->errlen, b->name, line, col,
			      "tag '%s' is not allowed; expected an untagged value", show);
	}
	return 0;
}

static int yamltree_alias(struct yamltree_builder *b, unsigned line, unsigned col, const yaml_char_t *anchor)
{
	char show[YAMLTREE_SHOW_BUF];
	if (b->rules->secret)
		return yamltree_err(b->err, b->errlen, b->name, line, col,
			      "an alias is not allowed; expected plain values (anchors and "
			      "aliases are refused)");
	yamltree_show(show, sizeof show, (const char *)anchor, strlen((const char *)anchor),
		YAMLTREE_SHOW_MAX);
	return yamltree_err(b->err, b->errlen, b->name, line, col,
		      "alias '*%s' is not allowed; expected plain values (anchors and aliases "
		      "are refused)",
		      show);
}

static int yamltree_event(struct yamltree_builder *b, const yaml_event_t *ev)
{
	unsigned line = (unsigned)ev->start_mark.line + 1;
	unsigned col = (unsigned)ev->start_mark.column + 1;
	enum yamltree_kind kind;
	int rc;

	switch (ev->type) {
	case YAML_DOCUMENT_START_EVENT:
		if (++b->docs > 1)
			return yamltree_err(b->err, b->errlen, b->name, line, col,
				      "a second YAML document starts here; expected one document "
				      "(remove the extra '---')");
		return 0;
	case YAML_ALIAS_EVENT:
		return yamltree_alias(b, line, col, ev->data.alias.anchor);
	case YAML_SCALAR_EVENT:
		rc = yamltree_refuse_decoration(b, line, col, ev->data.scalar.anchor,
					  ev->data.scalar.tag);
		kind = YAMLTREE_SCALAR;
		break;
	case YAML_SEQUENCE_START_EVENT:
		rc = yamltree_refuse_decoration(b, line, col, ev->data.sequence_start.anchor,
					  ev->data.sequence_start.tag);
		kind = YAMLTREE_SEQ;
		break;
	case YAML_MAPPING_START_EVENT:
		rc = yamltree_refuse_decoration(b, line, col, ev->data.mapping_start.anchor,
					  ev->data.mapping_start.tag);
		kind = YAMLTREE_MAP;
		break;
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		if (b->depth)
			b->depth--;
		return 0;
	default: /* stream start/end, document end */
		return 0;
	}
	if (rc)
		return rc;
	if (b->nodes >= b->rules->max_nodes)
		return yamltree_err(b->err, b->errlen, b->name, line, col,
			      "more than %u values in the file; expected a smaller %s",
			      b->rules->max_nodes, b->rules->smaller);
	if (kind != YAMLTREE_SCALAR && b->depth >= b->max_depth)
		return yamltree_err(b->err, b->errlen, b->name, line, col,
			      "nesting deeper than %u levels; expected a flatter structure",
			      b->max_depth);

	struct yamltree_node *n = calloc(1, sizeof *n);
	if (!n)
		return yamltree_nomem(b->err, b->errlen, b->name);
	n->kind = kind;
	n->line = line;
	n->col = col;
	if (kind == YAMLTREE_SCALAR) {
		n->len = ev->data.scalar.length;
		n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
		n->str = malloc(n->len + 1);
		if (!n->str) {
			free(n);
			return yamltree_nomem(b->err, b->errlen, b->name);
		}
		if (n->len)
			memcpy(n->str, ev->data.scalar.value, n->len);
		n->str[n->len] = '\0';
	}
	if (b->depth == 0) {
		b->root = n; /* one document, so one root */
	} else if (yamltree_attach(b->open[b->depth - 1], n)) {
		yamltree_free(n);
		return yamltree_nomem(b->err, b->errlen, b->name);
	}
	b->nodes++;
	if (kind != YAMLTREE_SCALAR)
		b->open[b->depth++] = n;
	return 0;
}

/* libyaml's message with our position.  Reader errors (bad UTF-8, control
 * characters) carry only a byte offset, so line and column are counted
 * from the buffer.  The text around the problem is never quoted: it may be
 * a value. */
static int yamltree_syntax_err(struct yamltree_builder *b, const yaml_parser_t *p, const char *buf,
			       size_t len)
{
	const char *problem = p->problem ? p->problem : "unknown error";

	if (p->error == YAML_MEMORY_ERROR)
		return yamltree_nomem(b->err, b->errlen, b->name);
	if (p->error == YAML_READER_ERROR) {
		size_t off = p->problem_offset < len ? p->problem_offset : len;
		unsigned line = 1, col = 1;
		for (size_t i = 0; i < off; i++) {
			if (buf[i] == '\n') {
				line++;
				col = 1;
			} else if (((unsigned char)buf[i] & 0xc0) != 0x80) {
				col++; /* columns count characters, as libyaml's do */
			}
		}
		if (p->problem_value >= 0 && !b->rules->secret)
			return yamltree_err(b->err, b->errlen, b->name, line, col,
				      "invalid text: %s (0x%x); expected UTF-8 text without "
				      "control characters",
				      problem, (unsigned)p->problem_value);
		return yamltree_err(b->err, b->errlen, b->name, line, col,
			      "invalid text: %s; expected UTF-8 text without control characters",
			      problem);
	}
	unsigned line = (unsigned)p->problem_mark.line + 1;
	unsigned col = (unsigned)p->problem_mark.column + 1;
	if (p->context)
		return yamltree_err(b->err, b->errlen, b->name, line, col,
			      "invalid YAML: %s (%s at line %u, column %u); expected valid YAML "
			      "syntax",
			      problem, p->context, (unsigned)p->context_mark.line + 1,
			      (unsigned)p->context_mark.column + 1);
	return yamltree_err(b->err, b->errlen, b->name, line, col,
		      "invalid YAML: %s; expected valid YAML syntax", problem);
}

int yamltree_parse(const char *buf, size_t len, const struct yamltree_rules *rules, const char *name,
		   char *err, size_t errlen, struct yamltree_node **root)
{
	struct yamltree_builder b = {
		.rules = rules,
		.name = name,
		.err = err,
		.errlen = errlen,
		.max_depth = rules->max_depth < YAMLTREE_DEPTH_MAX ? rules->max_depth : YAMLTREE_DEPTH_MAX,
	};
	yaml_parser_t p;
	int rc = 0;
	bool done = false;

	*root = NULL;
	if (!yaml_parser_initialize(&p))
		return yamltree_nomem(err, errlen, name);
	yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
	yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);
	while (!done && !rc) {
		yaml_event_t ev;
		if (!yaml_parser_parse(&p, &ev)) {
			rc = yamltree_syntax_err(&b, &p, buf, len);
			break;
		}
		rc = yamltree_event(&b, &ev);
		done = ev.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&ev);
	}
	/* libyaml frees its own copies of scalars without wiping them (it has
	 * no allocator hooks); values written as ${VAR} never pass through it. */
	yaml_parser_delete(&p);
	if (rc) {
		yamltree_free(b.root);
		return rc;
	}
	*root = b.root;
	return 0;
}

bool yamltree_is_null(const struct yamltree_node *v)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };
	if (v->kind != YAMLTREE_SCALAR || !v->plain)
		return false;
	for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
		if (strcmp(v->str, nulls[i]) == 0)
			return true;
	return false;
}

const char *yamltree_kind_name(const struct yamltree_node *v)
{
	if (v->kind == YAMLTREE_SEQ)
		return "a list";
	if (v->kind == YAMLTREE_MAP)
		return "a mapping";
	return "an empty value";
}

/* ---- files ------------------------------------------------------------- */

int yamltree_slurp(const char *path, size_t max, char **buf, size_t *len, const char **stage)
{
	/* O_NONBLOCK: a FIFO planted where the file should be must not hang
	 * us before fstat refuses it. */
	return fileio_slurp(path, O_NOCTTY | O_NONBLOCK, max, buf, len, NULL, stage);
}
