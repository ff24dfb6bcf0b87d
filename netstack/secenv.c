/* secrets.env, read once and split in place into KEY/VALUE pointers. */
#include "netstack/secenv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int senv_init(struct senv *e, const char *file)
{
	memset(e, 0, sizeof *e);
	const char *slash = strrchr(file, '/');
	size_t dirlen = slash ? (size_t)(slash - file) + 1 : 0;
	e->path = malloc(dirlen + sizeof "secrets.env");
	if (!e->path)
		return -ENOMEM;
	memcpy(e->path, file, dirlen);
	memcpy(e->path + dirlen, "secrets.env", sizeof "secrets.env");
	yt_show(e->name, sizeof e->name, e->path, strlen(e->path), YT_NAME_MAX);
	return 0;
}

bool senv_var_start(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

bool senv_var_char(char c)
{
	return senv_var_start(c) || (c >= '0' && c <= '9');
}

static bool senv_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* One line (S, N bytes, no newline), split in place. */
static int senv_line(struct senv *e, char *s, size_t n, unsigned line, char *err, size_t errlen)
{
	size_t i = 0;
	while (i < n && senv_blank(s[i]))
		i++;
	if (i == n || s[i] == '#')
		return 0;
	if (n - i > 7 && memcmp(s + i, "export", 6) == 0 && senv_blank(s[i + 6])) {
		i += 7;
		while (i < n && senv_blank(s[i]))
			i++;
	}
	size_t k = i;
	if (i == n || !senv_var_start(s[i]))
		return yt_err(err, errlen, e->name, line, (unsigned)i + 1,
			      "expected a line KEY=VALUE, a comment (#) or nothing");
	while (i < n && senv_var_char(s[i]))
		i++;
	size_t klen = i - k;
	if (i == n || s[i] != '=')
		return yt_err(err, errlen, e->name, line, (unsigned)i + 1,
			      "expected '=' after the name; write KEY=VALUE");
	i++;
	size_t v, vlen;
	if (i < n && (s[i] == '"' || s[i] == '\'')) {
		char q = s[i++];
		v = i;
		while (i < n && s[i] != q)
			i++;
		if (i == n)
			return yt_err(err, errlen, e->name, line, (unsigned)v,
				      "the quoted value does not end on this line; expected a "
				      "closing %c",
				      q);
		vlen = i - v;
		i++;
		while (i < n && senv_blank(s[i]))
			i++;
		if (i < n && s[i] != '#')
			return yt_err(err, errlen, e->name, line, (unsigned)i + 1,
				      "text after the closing quote; expected the end of the line "
				      "or a # comment");
	} else {
		v = i;
		while (i < n && !(s[i] == '#' && i > v && senv_blank(s[i - 1])))
			i++;
		vlen = i - v;
		while (vlen && senv_blank(s[v + vlen - 1]))
			vlen--;
	}
	for (size_t j = v; j < v + vlen; j++)
		if ((unsigned char)s[j] < 0x20 || s[j] == 0x7f)
			return yt_err(err, errlen, e->name, line, (unsigned)j + 1,
				      "the value of %.*s contains a control character; expected "
				      "printable text",
				      (int)klen, s + k);
	if (e->n == e->cap) {
		size_t cap = e->cap ? 2 * e->cap : 16;
		char **kv = realloc(e->kv, 2 * cap * sizeof *kv);
		if (!kv)
			return -ENOMEM;
		e->kv = kv;
		e->cap = cap;
	}
	s[k + klen] = '\0';
	s[v + vlen] = '\0';
	e->kv[2 * e->n] = s + k;
	e->kv[2 * e->n + 1] = s + v;
	e->n++;
	return 0;
}

static int senv_read(struct senv *e, char *err, size_t errlen)
{
	const char *stage;
	e->read = true;
	int rc = yt_slurp(e->path, SENV_MAX_BYTES, &e->buf, &e->len, &stage);
	if (rc == -ENOENT || rc == -ENOMEM)
		return rc == -ENOENT ? 0 : rc;
	if (rc) {
		char big[32];
		snprintf(big, sizeof big, "larger than %u KiB", SENV_MAX_BYTES / 1024);
		yt_err(err, errlen, e->name, 0, 0,
		       "cannot read: %s; expected a readable file of KEY=VALUE lines",
		       rc == -EFBIG ? big : strerror(-rc));
		return rc;
	}
	if (memchr(e->buf, '\0', e->len))
		return yt_err(err, errlen, e->name, 0, 0,
			      "contains a NUL byte; expected a text file of KEY=VALUE lines");
	unsigned line = 1;
	for (size_t s = 0; s < e->len; line++) {
		size_t eol = s;
		while (eol < e->len && e->buf[eol] != '\n')
			eol++;
		size_t n = eol - s;
		if (n && e->buf[s + n - 1] == '\r')
			n--;
		rc = senv_line(e, e->buf + s, n, line, err, errlen);
		if (rc)
			return rc;
		s = eol + 1;
	}
	return 0;
}

int senv_lookup(struct senv *e, const char *var, const char **val, char *err, size_t errlen)
{
	if ((*val = getenv(var)))
		return 0;
	if (!e->read) {
		int rc = senv_read(e, err, errlen);
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

void senv_free(struct senv *e)
{
	if (e->buf)
		explicit_bzero(e->buf, e->len + 1);
	free(e->buf);
	free(e->kv);
	free(e->path);
	memset(e, 0, sizeof *e);
}
