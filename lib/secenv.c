/* secrets.env, read once and split in place into KEY/VALUE pointers. */
#include "lib/secenv.h"

#include "lib/grow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int secenv_path(char *out, size_t outlen, const char *file)
{
	const char *slash = strrchr(file, '/');
	size_t dirlen = slash ? (size_t)(slash - file) + 1 : 0;
	if (outlen < dirlen + sizeof "secrets.env") {
		if (outlen)
			out[0] = '\0';
		return -ENAMETOOLONG;
	}
	memcpy(out, file, dirlen);
	memcpy(out + dirlen, "secrets.env", sizeof "secrets.env");
	return 0;
}

int secenv_init(struct senv *e, const char *file)
{
	memset(e, 0, sizeof *e);
	size_t cap = strlen(file) + sizeof "secrets.env";
	e->path = malloc(cap);
	if (!e->path)
		return -ENOMEM;
	secenv_path(e->path, cap, file);
	yamltree_show(e->name, sizeof e->name, e->path, strlen(e->path), YAMLTREE_NAME_MAX);
	return 0;
}

bool secenv_var_start(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

bool secenv_var_char(char c)
{
	return secenv_var_start(c) || (c >= '0' && c <= '9');
}

static bool secenv_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* One line (S, N bytes, no newline), split in place. */
static int secenv_line(struct senv *e, char *s, size_t n, unsigned line, char *err, size_t errlen)
{
	size_t i = 0;
	while (i < n && secenv_blank(s[i]))
		i++;
	if (i == n || s[i] == '#')
		return 0;
	if (n - i > 7 && memcmp(s + i, "export", 6) == 0 && secenv_blank(s[i + 6])) {
		i += 7;
		while (i < n && secenv_blank(s[i]))
			i++;
	}
	size_t k = i;
	if (i == n || !secenv_var_start(s[i]))
		return yamltree_err(err, errlen, e->name, line, (unsigned)i + 1,
			      "expected a line KEY=VALUE, a comment (#) or nothing");
	while (i < n && secenv_var_char(s[i]))
		i++;
	size_t klen = i - k;
	if (i == n || s[i] != '=')
		return yamltree_err(err, errlen, e->name, line, (unsigned)i + 1,
			      "expected '=' after the name; write KEY=VALUE");
	i++;
	size_t v, vlen;
	if (i < n && (s[i] == '"' || s[i] == '\'')) {
		char q = s[i++];
		v = i;
		while (i < n && s[i] != q)
			i++;
		if (i == n)
			return yamltree_err(err, errlen, e->name, line, (unsigned)v,
				      "the quoted value does not end on this line; expected a "
				      "closing %c",
				      q);
		vlen = i - v;
		i++;
		while (i < n && secenv_blank(s[i]))
			i++;
		if (i < n && s[i] != '#')
			return yamltree_err(err, errlen, e->name, line, (unsigned)i + 1,
				      "text after the closing quote; expected the end of the line "
				      "or a # comment");
	} else {
		v = i;
		while (i < n && !(s[i] == '#' && i > v && secenv_blank(s[i - 1])))
			i++;
		vlen = i - v;
		while (vlen && secenv_blank(s[v + vlen - 1]))
			vlen--;
	}
	for (size_t j = v; j < v + vlen; j++)
		if ((unsigned char)s[j] < 0x20 || s[j] == 0x7f)
			return yamltree_err(err, errlen, e->name, line, (unsigned)j + 1,
				      "the value of %.*s contains a control character; expected "
				      "printable text",
				      (int)klen, s + k);
	/* Two pointers an entry: its key and its value. */
	if (grow_array(&e->kv, &e->cap, e->n + 1, 2 * sizeof *e->kv, 16, 0) < 0)
		return -ENOMEM;
	s[k + klen] = '\0';
	s[v + vlen] = '\0';
	e->kv[2 * e->n] = s + k;
	e->kv[2 * e->n + 1] = s + v;
	e->n++;
	return 0;
}

static int secenv_read(struct senv *e, char *err, size_t errlen)
{
	const char *stage;
	e->read = true;
	int rc = yamltree_slurp(e->path, SECENV_MAX_BYTES, &e->buf, &e->len, &stage);
	if (rc == -ENOENT || rc == -ENOMEM)
		return rc == -ENOENT ? 0 : rc;
	if (rc) {
		char big[32];
		snprintf(big, sizeof big, "larger than %u KiB", SECENV_MAX_BYTES / 1024);
		yamltree_err(err, errlen, e->name, 0, 0,
		       "cannot read: %s; expected a readable file of KEY=VALUE lines",
		       rc == -EFBIG ? big : strerror(-rc));
		return rc;
	}
	if (memchr(e->buf, '\0', e->len))
		return yamltree_err(err, errlen, e->name, 0, 0,
			      "contains a NUL byte; expected a text file of KEY=VALUE lines");
	unsigned line = 1;
	for (size_t s = 0; s < e->len; line++) {
		size_t eol = s;
		while (eol < e->len && e->buf[eol] != '\n')
			eol++;
		size_t n = eol - s;
		if (n && e->buf[s + n - 1] == '\r')
			n--;
		rc = secenv_line(e, e->buf + s, n, line, err, errlen);
		if (rc)
			return rc;
		s = eol + 1;
	}
	return 0;
}

int secenv_lookup(struct senv *e, const char *var, const char **val, char *err, size_t errlen)
{
	if ((*val = getenv(var)))
		return 0;
	if (!e->read) {
		int rc = secenv_read(e, err, errlen);
		if (rc)
			return rc;
	}
	for (size_t i = e->n; i-- > 0;)
		if (strcmp(e->kv[2 * i], var) == 0) {
			*val = e->kv[2 * i + 1];
			break;
		}
	return 0;
}

/* The ${...} whose text starts at S (N bytes to the end of the value):
 * its value in *VAL and the bytes the reference spans, "${" and '}' too,
 * in *SPAN. */
static int secenv_ref(struct senv *e, const char *s, size_t n, size_t max_name, const char **val,
		    size_t *span, struct secenv_result *r, char *err, size_t errlen)
{
	const char *close = memchr(s, '}', n);
	if (!close) {
		r->fault = SECENV_UNTERMINATED;
		return -EINVAL;
	}
	size_t len = (size_t)(close - s);
	bool ok = len && secenv_var_start(s[0]);
	for (size_t k = 1; ok && k < len; k++)
		ok = secenv_var_char(s[k]);
	enum secenv_fault fault = !ok ? SECENV_BAD_NAME : len > max_name ? SECENV_LONG_NAME : 0;
	if (!fault) {
		char var[SECENV_NAME_MAX + 1];
		memcpy(var, s, len);
		var[len] = '\0';
		int rc = secenv_lookup(e, var, val, err, errlen);
		if (rc)
			return rc;
		fault = *val ? 0 : SECENV_UNSET;
	}
	if (fault) {
		r->fault = fault;
		r->name = s;
		r->name_len = len;
		return -EINVAL;
	}
	*span = len + 3;
	return 0;
}

int secenv_expand(struct senv *e, const char *val, size_t len, size_t max_name, size_t max_out,
		struct secenv_result *r, char *err, size_t errlen)
{
	memset(r, 0, sizeof *r);
	if (max_name > SECENV_NAME_MAX)
		max_name = SECENV_NAME_MAX;
	size_t cap = len + 1, o = 0;
	char *out = malloc(cap);
	if (!out)
		return -ENOMEM;
	int rc = 0;
	for (size_t i = 0; i < len;) {
		const char *add = val + i;
		size_t alen = 1, step = 1;
		if (val[i] == '$' && i + 1 < len && val[i + 1] == '$') {
			step = 2;
		} else if (val[i] == '$' && i + 1 < len && val[i + 1] == '{') {
			rc = secenv_ref(e, val + i + 2, len - i - 2, max_name, &add, &step, r, err,
				      errlen);
			if (rc) {
				r->at = i;
				break;
			}
			alen = strlen(add);
		}
		if (alen > max_out - o) {
			r->fault = SECENV_TOO_BIG;
			r->at = i;
			rc = -EINVAL;
			break;
		}
		/* Grown by hand, not realloc, so that no copy is left unwiped. */
		if (o + alen + 1 > cap) {
			size_t ncap = 2 * (o + alen + 1);
			char *b = malloc(ncap);
			if (!b) {
				rc = -ENOMEM;
				break;
			}
			memcpy(b, out, o);
			explicit_bzero(out, o);
			free(out);
			out = b;
			cap = ncap;
		}
		memcpy(out + o, add, alen);
		o += alen;
		i += step;
	}
	if (rc) {
		explicit_bzero(out, o);
		free(out);
		return rc;
	}
	out[o] = '\0';
	r->str = out;
	r->len = o;
	return 0;
}

void secenv_free(struct senv *e)
{
	if (e->buf)
		explicit_bzero(e->buf, e->len + 1);
	free(e->buf);
	free(e->kv);
	free(e->path);
	memset(e, 0, sizeof *e);
}
