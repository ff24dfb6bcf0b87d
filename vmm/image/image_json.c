/* Container images: the bounded JSON reader (image.h). */
#include "vmm/image/image_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- JSON */

struct jparse {
	const char *s;
	size_t len, pos;
	struct image_json_tok *tok;
	uint32_t n, cap;
};

static void jp_ws(struct jparse *p)
{
	while (p->pos < p->len) {
		char c = p->s[p->pos];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

static int jp_new(struct jparse *p, uint8_t type, size_t start)
{
	if (p->n >= p->cap)
		return -E2BIG;
	struct image_json_tok *t = &p->tok[p->n];
	memset(t, 0, sizeof *t);
	t->type = type;
	t->start = (uint32_t)start;
	return (int)p->n++;
}

static int is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int jp_string(struct jparse *p)
{
	size_t start = ++p->pos;
	while (p->pos < p->len) {
		unsigned char c = (unsigned char)p->s[p->pos];
		if (c == '"') {
			int t = jp_new(p, IMAGE_JSON_STR, start);
			if (t < 0)
				return t;
			p->tok[t].len = (uint32_t)(p->pos - start);
			p->tok[t].next = p->n;
			p->pos++;
			return t;
		}
		if (c < 0x20)
			return -EINVAL;
		if (c == '\\') {
			if (++p->pos >= p->len)
				return -EINVAL;
			c = (unsigned char)p->s[p->pos];
			if (c == 'u') {
				if (p->len - p->pos < 5)
					return -EINVAL;
				for (int i = 1; i <= 4; i++)
					if (!is_hex(p->s[p->pos + (size_t)i]))
						return -EINVAL;
				p->pos += 4;
			} else if (!c || !strchr("\"\\/bfnrt", c)) {
				return -EINVAL;
			}
		}
		p->pos++;
	}
	return -EINVAL;
}

static int jp_digits(struct jparse *p)
{
	size_t s = p->pos;
	while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
		p->pos++;
	return p->pos > s ? 0 : -EINVAL;
}

static int jp_number(struct jparse *p)
{
	size_t start = p->pos;
	if (p->s[p->pos] == '-')
		p->pos++;
	if (p->pos < p->len && p->s[p->pos] == '0')
		p->pos++;
	else if (jp_digits(p) < 0)
		return -EINVAL;
	if (p->pos < p->len && p->s[p->pos] == '.') {
		p->pos++;
		if (jp_digits(p) < 0)
			return -EINVAL;
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
		p->pos++;
		if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		if (jp_digits(p) < 0)
			return -EINVAL;
	}
	int t = jp_new(p, IMAGE_JSON_NUM, start);
	if (t < 0)
		return t;
	p->tok[t].len = (uint32_t)(p->pos - start);
	p->tok[t].next = p->n;
	return t;
}

static int jp_value(struct jparse *p, int depth)
{
	jp_ws(p);
	if (p->pos >= p->len)
		return -EINVAL;
	char c = p->s[p->pos];
	if (c == '"')
		return jp_string(p);
	if (c == '-' || (c >= '0' && c <= '9'))
		return jp_number(p);
	if (c != '{' && c != '[') {
		static const char *const lits[] = { "true", "false", "null" };
		for (size_t i = 0; i < 3; i++) {
			size_t l = strlen(lits[i]);
			if (p->len - p->pos >= l && memcmp(p->s + p->pos, lits[i], l) == 0) {
				int t = jp_new(p, IMAGE_JSON_LIT, p->pos);
				if (t < 0)
					return t;
				p->tok[t].len = (uint32_t)l;
				p->tok[t].next = p->n;
				p->pos += l;
				return t;
			}
		}
		return -EINVAL;
	}
	if (depth >= JSON_MAX_DEPTH)
		return -EINVAL;
	char close = c == '{' ? '}' : ']';
	int t = jp_new(p, c == '{' ? IMAGE_JSON_OBJ : IMAGE_JSON_ARR, p->pos);
	if (t < 0)
		return t;
	p->pos++;
	jp_ws(p);
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
	} else {
		for (;;) {
			if (c == '{') {
				jp_ws(p);
				if (p->pos >= p->len || p->s[p->pos] != '"')
					return -EINVAL;
				int k = jp_string(p);
				if (k < 0)
					return k;
				jp_ws(p);
				if (p->pos >= p->len || p->s[p->pos] != ':')
					return -EINVAL;
				p->pos++;
			}
			int v = jp_value(p, depth + 1);
			if (v < 0)
				return v;
			p->tok[t].count++;
			jp_ws(p);
			if (p->pos >= p->len)
				return -EINVAL;
			if (p->s[p->pos] == ',') {
				p->pos++;
				continue;
			}
			if (p->s[p->pos] != close)
				return -EINVAL;
			p->pos++;
			break;
		}
	}
	p->tok[t].len = (uint32_t)(p->pos - p->tok[t].start);
	p->tok[t].next = p->n;
	return t;
}

int image_json_parse(struct image_json *j, const char *src, size_t len,
		     struct image_json_tok *tok, uint32_t cap)
{
	if (len > INT32_MAX)
		return -E2BIG;
	struct jparse p = { .s = src, .len = len, .tok = tok, .cap = cap };
	int r = jp_value(&p, 0);
	if (r < 0)
		return r;
	jp_ws(&p);
	if (p.pos != len)
		return -EINVAL;
	j->src = src;
	j->tok = tok;
	j->n = p.n;
	return 0;
}

static int json_key_is(const struct image_json *j, uint32_t t, const char *key)
{
	char buf[128];
	return image_json_str(j, (int)t, buf, sizeof buf) == 0 && strcmp(buf, key) == 0;
}

int image_json_get(const struct image_json *j, int obj, const char *key)
{
	if (obj < 0 || (uint32_t)obj >= j->n || j->tok[obj].type != IMAGE_JSON_OBJ)
		return -ENOENT;
	uint32_t i = (uint32_t)obj + 1;
	for (uint32_t k = 0; k < j->tok[obj].count; k++) {
		if (json_key_is(j, i, key))
			return (int)i + 1;
		i = j->tok[i + 1].next;
	}
	return -ENOENT;
}

int image_json_elem(const struct image_json *j, int arr, uint32_t idx)
{
	if (arr < 0 || (uint32_t)arr >= j->n || j->tok[arr].type != IMAGE_JSON_ARR ||
	    idx >= j->tok[arr].count)
		return -ENOENT;
	uint32_t i = (uint32_t)arr + 1;
	while (idx--)
		i = j->tok[i].next;
	return (int)i;
}

static unsigned hex4(const char *s)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		v = v << 4 | (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
	}
	return v;
}

int image_json_str(const struct image_json *j, int t, char *out, size_t len)
{
	if (t < 0 || (uint32_t)t >= j->n || j->tok[t].type != IMAGE_JSON_STR || !len)
		return -EINVAL;
	/* The parser checked every escape, so the look-aheads stay inside. */
	const char *s = j->src + j->tok[t].start;
	size_t n = j->tok[t].len, o = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned cp = (unsigned char)s[i];
		int unicode = 0;
		if (cp == '\\') {
			char e = s[++i];
			switch (e) {
			case 'b': cp = '\b'; break;
			case 'f': cp = '\f'; break;
			case 'n': cp = '\n'; break;
			case 'r': cp = '\r'; break;
			case 't': cp = '\t'; break;
			case 'u':
				unicode = 1;
				cp = hex4(s + i + 1);
				i += 4;
				if (cp >= 0xd800 && cp < 0xdc00 && i + 6 < n && s[i + 1] == '\\' &&
				    s[i + 2] == 'u') {
					unsigned lo = hex4(s + i + 3);
					if (lo >= 0xdc00 && lo < 0xe000) {
						cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
						i += 6;
					}
				}
				if (!cp)
					return -EINVAL;
				break;
			default: cp = (unsigned char)e; break;
			}
		}
		unsigned char u[4];
		size_t k;
		if (cp < 0x80 || !unicode) {
			u[0] = (unsigned char)cp;
			k = 1;
		} else if (cp < 0x800) {
			u[0] = (unsigned char)(0xc0 | cp >> 6);
			u[1] = (unsigned char)(0x80 | (cp & 0x3f));
			k = 2;
		} else if (cp < 0x10000) {
			u[0] = (unsigned char)(0xe0 | cp >> 12);
			u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
			u[2] = (unsigned char)(0x80 | (cp & 0x3f));
			k = 3;
		} else {
			u[0] = (unsigned char)(0xf0 | cp >> 18);
			u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
			u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
			u[3] = (unsigned char)(0x80 | (cp & 0x3f));
			k = 4;
		}
		if (o + k >= len)
			return -ENAMETOOLONG;
		memcpy(out + o, u, k);
		o += k;
	}
	out[o] = 0;
	return 0;
}

int image_json_load(struct image_json *j, const char *buf, size_t len)
{
	if (len > JSON_FILE_MAX)
		return -E2BIG;
	uint32_t cap = (uint32_t)(len / 2 + 2);
	struct image_json_tok *tok = calloc(cap, sizeof *tok);
	if (!tok)
		return -ENOMEM;
	int r = image_json_parse(j, buf, len, tok, cap);
	if (r < 0)
		free(tok);
	return r;
}

int image_json_str_at(const struct image_json *j, int obj, const char *key, char *out,
		      size_t len)
{
	int t = image_json_get(j, obj, key);
	return t < 0 ? t : image_json_str(j, t, out, len);
}
