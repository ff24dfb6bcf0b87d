/* sandbox.yaml loader.  lib/yamltree.c turns the file into a small
 * tree (bounded in size, depth and node count, with anchors, aliases and
 * tags refused as the events arrive), ${VAR} is expanded (from the host
 * environment or secrets.env, lib/secenv.c), then each top-level key
 * is handed to its entry in cfg_sections[].  Everything is parsed into a scratch config that
 * is moved into the caller's only when the whole file is good. */
#include "vmm/sandbox/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/errbuf.h"
#include "lib/secenv.h"
#include "lib/yamltree.h"
#include "netstack/policy.h"
#include "netstack/resolver.h"
#include "netstack/secrets.h"
#include "vmm/sandbox/hostfiles.h"
#include "vmm/sandbox/mounts.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static const struct yt_rules cfg_rules = {
	.max_depth = CONFIG_MAX_DEPTH,
	.max_nodes = CONFIG_MAX_NODES,
	.smaller = "config",
};

struct cfg_ctx {
	char name[YT_NAME_BUF]; /* printable form of the file name */
	const char *dir;        /* directory part of the name, with its '/' */
	size_t dirlen;          /* 0: relative paths stay as written */
	char *err;
	size_t errlen;
	size_t expanded;        /* bytes ${VAR} expansion has produced */
	struct senv env;        /* secrets.env, for ${VAR} */
};

/* Longest variable name ${…} may use; a longer one is not set. */
#define CFG_MAX_VAR 128

/* Messages quote a value as written: what ${VAR} brought in may be a
 * secret, and the user wrote the ${VAR}. */
static void cfg_show_node(char *out, const struct yt_node *v)
{
	if (v->raw)
		yt_show(out, YT_SHOW_BUF, v->raw, v->rawlen, YT_SHOW_MAX);
	else
		yt_show(out, YT_SHOW_BUF, v->str, v->len, YT_SHOW_MAX);
}

__attribute__((format(printf, 4, 5))) static int
cfg_err_at(struct cfg_ctx *x, unsigned line, unsigned col, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = yt_verr(x->err, x->errlen, x->name, line, col, fmt, ap);
	va_end(ap);
	return rc;
}

#define cfg_err(x, node, ...) cfg_err_at((x), (node)->line, (node)->col, __VA_ARGS__)

/* Errors about the file as a whole have no position. */
__attribute__((format(printf, 4, 5))) static void
cfg_file_err(const char *path, char *err, size_t errlen, const char *fmt, ...)
{
	char name[YT_NAME_BUF];
	va_list ap;
	yt_show(name, sizeof name, path, strlen(path), YT_NAME_MAX);
	va_start(ap, fmt);
	yt_verr(err, errlen, name, 0, 0, fmt, ap);
	va_end(ap);
}

static int cfg_nomem(struct cfg_ctx *x)
{
	return yt_nomem(x->err, x->errlen, x->name);
}

/* ---- ${VAR} ----------------------------------------------------------- */

/* Replaces ${NAME} in scalar n by its value and "$$" by "$"; other '$'
 * stay (a shell's $HOME passes through to the guest).  All values together
 * may grow to CONFIG_MAX_BYTES. */
static int cfg_expand_node(struct cfg_ctx *x, struct yt_node *n)
{
	if (!memchr(n->str, '$', n->len))
		return 0;
	struct senv_result r;
	int rc = senv_expand(&x->env, n->str, n->len, CFG_MAX_VAR, CONFIG_MAX_BYTES - x->expanded,
			     &r, x->err, x->errlen);
	char show[YT_SHOW_BUF] = "";
	if (r.name)
		yt_show(show, sizeof show, r.name, r.name_len, YT_SHOW_MAX);
	switch (r.fault) {
	case SENV_UNTERMINATED:
		return cfg_err(x, n, "unterminated '${'; expected ${NAME} (write $$ for a literal "
				     "'$')");
	case SENV_BAD_NAME:
		return cfg_err(x, n, "'${%s}' is not a variable name; expected ${NAME} with "
				     "letters, digits and '_' (write $$ for a literal '$')", show);
	case SENV_LONG_NAME:
	case SENV_UNSET:
		return cfg_err(x, n, "${%s} is not set; export %s or add %s=... to %s", show, show,
			       show, x->env.name);
	case SENV_TOO_BIG:
		return cfg_err(x, n, "values grow past %u bytes once variables are expanded; "
				     "expected a smaller config", CONFIG_MAX_BYTES);
	}
	if (rc)
		return rc == -ENOMEM ? cfg_nomem(x) : rc;
	x->expanded += r.len;
	n->raw = n->str;
	n->rawlen = n->len;
	n->str = r.str;
	n->len = r.len;
	/* An expanded value is text, never YAML's null. */
	n->plain = false;
	return 0;
}

/* Expands every value scalar; mapping keys stay as written.  Recursion
 * depth is bounded by CONFIG_MAX_DEPTH. */
static int cfg_expand(struct cfg_ctx *x, struct yt_node *n)
{
	if (!n)
		return 0;
	if (n->kind == YT_SCALAR)
		return cfg_expand_node(x, n);
	for (size_t i = n->kind == YT_MAP ? 1 : 0; i < n->n; i += n->kind == YT_MAP ? 2 : 1) {
		int rc = cfg_expand(x, n->kids[i]);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- value helpers ----------------------------------------------------- */

/* A non-null scalar without NUL bytes, or an error naming what. */
static int cfg_text(struct cfg_ctx *x, const struct yt_node *v, const char *what,
		    const char *expected)
{
	if (v->kind != YT_SCALAR || yt_is_null(v))
		return cfg_err(x, v, "%s: got %s; expected %s", what, yt_kind_name(v), expected);
	if (strlen(v->str) != v->len)
		return cfg_err(x, v, "%s: contains a NUL byte; expected %s", what, expected);
	return 0;
}

enum cfg_num { CFG_NUM_OK, CFG_NUM_BAD, CFG_NUM_RANGE };

/* Unsigned decimal digits only.  No leading zeros, since YAML 1.1 reads
 * those as octal and users would not get what they meant.  Values too big
 * to matter saturate rather than wrap.  A minus sign is a range error. */
static enum cfg_num cfg_decimal(const char *s, size_t len, uint64_t *out)
{
	bool neg = len > 1 && s[0] == '-';
	if (neg) {
		s++;
		len--;
	}
	if (len == 0 || (s[0] == '0' && len > 1))
		return CFG_NUM_BAD;
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return CFG_NUM_BAD;
		if (v < 1000000000000ull)
			v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (neg)
		return v ? CFG_NUM_RANGE : CFG_NUM_BAD;
	*out = v;
	return CFG_NUM_OK;
}

static int cfg_uint(struct cfg_ctx *x, const struct yt_node *v, const char *what,
		    uint64_t lo, uint64_t hi, uint64_t *out)
{
	char show[YT_SHOW_BUF];
	char expected[64];
	snprintf(expected, sizeof expected, "an integer from %llu to %llu",
		 (unsigned long long)lo, (unsigned long long)hi);
	int rc = cfg_text(x, v, what, expected);
	if (rc)
		return rc;
	cfg_show_node(show, v);
	switch (cfg_decimal(v->str, v->len, out)) {
	case CFG_NUM_BAD:
		return cfg_err(x, v, "%s: '%s' is not an integer; expected %s", what, show,
			       expected);
	case CFG_NUM_RANGE:
		return cfg_err(x, v, "%s: %s is out of range; expected %s", what, show, expected);
	case CFG_NUM_OK:
		break;
	}
	if (*out < lo || *out > hi)
		return cfg_err(x, v, "%s: %s is out of range; expected %s", what, show, expected);
	return 0;
}

static int cfg_bool(struct cfg_ctx *x, const struct yt_node *v, const char *what, int *out)
{
	static const char *const yes[] = { "true", "yes", "on" };
	static const char *const no[] = { "false", "no", "off" };
	static const char expected[] = "true or false";
	int rc = cfg_text(x, v, what, expected);
	if (rc)
		return rc;
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (strcasecmp(v->str, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(v->str, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	char show[YT_SHOW_BUF];
	cfg_show_node(show, v);
	return cfg_err(x, v, "%s: '%s' is not a boolean; expected %s", what, show, expected);
}

static char *cfg_strdup(const char *s, size_t len)
{
	char *d = malloc(len + 1);
	if (d) {
		memcpy(d, s, len);
		d[len] = '\0';
	}
	return d;
}

/* Frees a NULL-terminated list of strings: argv, a mount's protected
 * names. */
static void cfg_free_argv(char **l)
{
	if (!l)
		return;
	for (char **p = l; *p; p++)
		free(*p);
	free(l);
}

/* ---- sections ---------------------------------------------------------- */

static int cfg_cpus(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	uint64_t n;
	int rc = cfg_uint(x, v, "cpus", CONFIG_CPUS_MIN, CONFIG_CPUS_MAX, &n);
	if (!rc)
		c->cpus = (unsigned)n;
	return rc;
}

/* MiB as a bare number, or a number with a binary unit: M/MB/MiB or
 * G/GB/GiB in any case, optionally after spaces.  "MB" means MiB here on
 * purpose: nobody sizes a VM in powers of ten. */
static int cfg_memory(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	static const struct {
		const char *unit;
		uint64_t mib;
	} units[] = { { "", 1 },    { "m", 1 },	   { "mb", 1 },	  { "mib", 1 },
		      { "g", 1024 }, { "gb", 1024 }, { "gib", 1024 } };
	static const char expected[] = "MiB from 64 to 65536, or a size like 512M or 2G";
	char show[YT_SHOW_BUF];
	int rc = cfg_text(x, v, "memory", expected);
	if (rc)
		return rc;
	cfg_show_node(show, v);

	bool neg = v->len > 1 && v->str[0] == '-';
	size_t digits = neg;
	while (digits < v->len && v->str[digits] >= '0' && v->str[digits] <= '9')
		digits++;
	size_t u = digits;
	while (u < v->len && v->str[u] == ' ')
		u++;
	uint64_t n = 0, mul = 0;
	for (size_t i = 0; i < ARRAY_SIZE(units); i++)
		if (strcasecmp(v->str + u, units[i].unit) == 0)
			mul = units[i].mib;
	if (!mul || cfg_decimal(v->str + neg, digits - neg, &n) != CFG_NUM_OK)
		return cfg_err(x, v, "memory: '%s' is not a size; expected %s", show, expected);
	/* n saturates near 10^12, so n * 1024 cannot wrap. */
	if (neg || n * mul < CONFIG_MEMORY_MIN_MIB || n * mul > CONFIG_MEMORY_MAX_MIB)
		return cfg_err(x, v, "memory: %s is out of range; expected %s", show, expected);
	c->memory_mib = n * mul;
	return 0;
}

/* A path from the file; relative ones are joined to the file's directory so
 * the config means the same thing from any working directory. */
static int cfg_path(struct cfg_ctx *x, const struct yt_node *v, const char *what,
		    const char *expected, char **out)
{
	int rc = cfg_text(x, v, what, expected);
	if (rc)
		return rc;
	if (v->len == 0)
		return cfg_err(x, v, "%s: empty path; expected %s", what, expected);
	if (v->str[0] == '~')
		return cfg_err(x, v,
			       "%s: '~' is not expanded; expected an absolute path or one "
			       "relative to the config file",
			       what);
	size_t pre = v->str[0] == '/' ? 0 : x->dirlen;
	if (pre + v->len >= PATH_MAX)
		return cfg_err(x, v, "%s: path is longer than %d bytes; expected %s", what,
			       PATH_MAX - 1, expected);
	char *p = malloc(pre + v->len + 1);
	if (!p)
		return cfg_nomem(x);
	if (pre)
		memcpy(p, x->dir, pre);
	memcpy(p + pre, v->str, v->len + 1);
	*out = p;
	return 0;
}

static int cfg_kernel(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	return cfg_path(x, v, "kernel", "a path to a kernel image (vmlinux or bzImage)",
			&c->kernel);
}

static int cfg_initrd(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	return cfg_path(x, v, "initrd", "a path to an initramfs (cpio) file", &c->initrd);
}

static int cfg_command_string(struct cfg_ctx *x, const struct yt_node *v,
			      struct kbox_config *c)
{
	static const char expected[] =
		"a command line string or a list of strings (program and arguments)";
	int rc = cfg_text(x, v, "command", expected);
	if (rc)
		return rc;
	size_t i = 0;
	while (i < v->len && (v->str[i] == ' ' || v->str[i] == '\t'))
		i++;
	if (i == v->len)
		return cfg_err(x, v, "command: empty command; expected %s", expected);
	char **argv = calloc(4, sizeof *argv);
	if (!argv)
		return cfg_nomem(x);
	argv[0] = cfg_strdup("/bin/sh", 7);
	argv[1] = cfg_strdup("-c", 2);
	argv[2] = cfg_strdup(v->str, v->len);
	if (!argv[0] || !argv[1] || !argv[2]) {
		for (int k = 0; k < 3; k++)
			free(argv[k]);
		free(argv);
		return cfg_nomem(x);
	}
	c->argv = argv;
	return 0;
}

static int cfg_command(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	if (v->kind != YT_SEQ)
		return cfg_command_string(x, v, c);
	if (v->n == 0)
		return cfg_err(x, v,
			       "command: empty command; expected a list with at least the "
			       "program to run");
	char **argv = calloc(v->n + 1, sizeof *argv);
	if (!argv)
		return cfg_nomem(x);
	for (size_t i = 0; i < v->n; i++) {
		const struct yt_node *a = v->kids[i];
		char what[32];
		snprintf(what, sizeof what, "command[%zu]", i);
		int rc = cfg_text(x, a, what, "a string (write \"\" for an empty argument)");
		if (!rc && i == 0 && a->len == 0)
			rc = cfg_err(x, a, "command[0]: empty program name; expected the "
					   "program to run");
		if (!rc && !(argv[i] = cfg_strdup(a->str, a->len)))
			rc = cfg_nomem(x);
		if (rc) {
			cfg_free_argv(argv);
			return rc;
		}
	}
	c->argv = argv;
	return 0;
}

static int cfg_verbose(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	return cfg_bool(x, v, "verbose", &c->verbose);
}

/* "'value'" for a scalar, else what kind of node it is, for "got …". */
static const char *cfg_got(const struct yt_node *v, char *buf, size_t size)
{
	if (v->kind != YT_SCALAR || yt_is_null(v))
		return yt_kind_name(v);
	char show[YT_SHOW_BUF];
	cfg_show_node(show, v);
	snprintf(buf, size, "'%s'", show);
	return buf;
}

static void cfg_free_mounts(struct config_mount *m, unsigned n)
{
	if (!m)
		return;
	for (unsigned i = 0; i < n; i++) {
		free(m[i].source);
		free(m[i].target);
		for (size_t j = 0; j < m[i].n_hidden; j++)
			free(m[i].hidden[j]);
		free(m[i].hidden);
		for (size_t j = 0; j < m[i].n_hidden_extra; j++)
			free(m[i].hidden_extra[j]);
		free(m[i].hidden_extra);
	}
	free(m);
}

/* hidden and hidden_extra (key): a list of non-empty fnmatch patterns,
 * into *out and *n.  A trailing '/' (as in .gitignore's "secrets/") is
 * dropped: the backend hides a matching name whatever it is, and a hidden
 * directory hides all below it. */
static int cfg_patterns(struct cfg_ctx *x, const struct yt_node *v, unsigned idx,
			const char *key, char ***out, size_t *n)
{
	static const char expected[] = "a glob pattern such as \".env\" or \"*.pem\"";
	char what[48], got[YT_SHOW_BUF + 2];
	snprintf(what, sizeof what, "mounts[%u].%s", idx, key);
	if (v->kind != YT_SEQ)
		return cfg_err(x, v, "%s: got %s; expected a list of patterns such as "
				     "[\".env\", \"*.pem\"] ([] hides nothing)",
			       what, cfg_got(v, got, sizeof got));
	if (v->n > CONFIG_HIDDEN_MAX)
		return cfg_err(x, v->kids[CONFIG_HIDDEN_MAX],
			       "%s: more than %u patterns; expected at most %u", what,
			       CONFIG_HIDDEN_MAX, CONFIG_HIDDEN_MAX);
	*out = calloc(v->n ? v->n : 1, sizeof **out);
	if (!*out)
		return cfg_nomem(x);
	for (size_t i = 0; i < v->n; i++) {
		const struct yt_node *p = v->kids[i];
		snprintf(what, sizeof what, "mounts[%u].%s[%zu]", idx, key, i);
		int rc = cfg_text(x, p, what, expected);
		if (rc)
			return rc;
		size_t len = p->len;
		while (len > 0 && p->str[len - 1] == '/')
			len--;
		if (p->len == 0)
			return cfg_err(x, p, "%s: empty pattern; expected %s", what, expected);
		if (len == 0)
			return cfg_err(x, p, "%s: '/' alone would hide the whole mount; "
					     "expected %s", what, expected);
		if (len > CONFIG_HIDDEN_LEN_MAX)
			return cfg_err(x, p, "%s: pattern is longer than %u bytes; expected %s",
				       what, CONFIG_HIDDEN_LEN_MAX, expected);
		if (!((*out)[i] = cfg_strdup(p->str, len)))
			return cfg_nomem(x);
		*n = i + 1;
	}
	return 0;
}

static int cfg_mount(struct cfg_ctx *x, const struct yt_node *v, unsigned idx,
		     struct config_mount *m)
{
	static const char *const keys[] = { "source", "target", "readonly", "hidden",
					    "hidden_extra" };
	unsigned seen[ARRAY_SIZE(keys)] = { 0 };
	char what[48], got[YT_SHOW_BUF + 2], show[YT_SHOW_BUF];
	int rc;
	m->line = v->line;
	m->col = v->col;
	if (v->kind != YT_MAP)
		return cfg_err(x, v, "mounts[%u]: got %s; expected a mapping with source and "
				     "target", idx, cfg_got(v, got, sizeof got));
	for (size_t i = 0; i + 1 < v->n; i += 2) {
		const struct yt_node *k = v->kids[i], *val = v->kids[i + 1];
		if (k->kind != YT_SCALAR)
			return cfg_err(x, k, "mounts[%u]: a key is %s; expected source, target, "
					     "readonly, hidden or hidden_extra", idx, yt_kind_name(k));
		size_t s = 0;
		while (s < ARRAY_SIZE(keys) &&
		       (strlen(keys[s]) != k->len || memcmp(keys[s], k->str, k->len) != 0))
			s++;
		cfg_show_node(show, k);
		if (s == ARRAY_SIZE(keys))
			return cfg_err(x, k, "mounts[%u]: unknown key '%s'; expected source, "
					     "target, readonly, hidden or hidden_extra", idx, show);
		if (seen[s])
			return cfg_err(x, k, "mounts[%u]: duplicate key '%s' (first at line %u); "
					     "expected each key once", idx, show, seen[s]);
		seen[s] = k->line;
		snprintf(what, sizeof what, "mounts[%u].%s", idx, keys[s]);
		switch (s) {
		case 0:
			rc = cfg_path(x, val, what, "the host directory to share", &m->source);
			break;
		case 1:
			rc = cfg_text(x, val, what, "an absolute guest path such as /workspace");
			if (!rc && val->len == 0)
				rc = cfg_err(x, val, "%s: empty path; expected an absolute guest "
						     "path such as /workspace", what);
			if (!rc && !(m->target = cfg_strdup(val->str, val->len)))
				rc = cfg_nomem(x);
			break;
		case 2: {
			int ro = 0;
			rc = cfg_bool(x, val, what, &ro);
			m->readonly = ro == 1;
			break;
		}
		case 3:
			m->hidden_set = true;
			rc = cfg_patterns(x, val, idx, "hidden", &m->hidden, &m->n_hidden);
			break;
		default:
			rc = cfg_patterns(x, val, idx, "hidden_extra", &m->hidden_extra,
					  &m->n_hidden_extra);
			break;
		}
		if (rc)
			return rc;
	}
	if (!m->source)
		return cfg_err(x, v, "mounts[%u]: no source; expected the host directory to "
				     "share (source: ./)", idx);
	if (!m->target)
		return cfg_err(x, v, "mounts[%u]: no target; expected the guest path (target: "
				     "/workspace)", idx);
	return 0;
}

static int cfg_mounts(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	char got[YT_SHOW_BUF + 2];
	if (v->kind != YT_SEQ)
		return cfg_err(x, v, "mounts: got %s; expected a list of mappings with source "
				     "and target", cfg_got(v, got, sizeof got));
	if (v->n > MOUNTS_MAX)
		return cfg_err(x, v->kids[MOUNTS_MAX], "mounts: more than %d mounts; expected "
						       "at most %d", MOUNTS_MAX, MOUNTS_MAX);
	struct config_mount *m = calloc(v->n ? v->n : 1, sizeof *m);
	if (!m)
		return cfg_nomem(x);
	for (size_t i = 0; i < v->n; i++) {
		int rc = cfg_mount(x, v->kids[i], (unsigned)i, &m[i]);
		if (rc) {
			cfg_free_mounts(m, (unsigned)v->n);
			return rc;
		}
	}
	c->mounts = m;
	c->n_mounts = (unsigned)v->n;
	return 0;
}

/* ---- image, workdir, env ----------------------------------------------- */

/* "./rootfs", "/srv/rootfs", "rootfs/" or ".rootfs": a directory, joined to
 * the file's directory like every path; other words are image names or id
 * prefixes, kept as written for the store (image_resolve's rule). */
static int cfg_image(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	static const char expected[] =
		"a rootfs directory such as ./rootfs, or an image name";
	int rc = cfg_text(x, v, "image", expected);
	if (rc)
		return rc;
	if (v->len == 0)
		return cfg_err(x, v, "image: empty value; expected %s", expected);
	if (memchr(v->str, '/', v->len) || v->str[0] == '.')
		return cfg_path(x, v, "image", expected, &c->image);
	for (size_t i = 0; i < v->len; i++) {
		char ch = v->str[i];
		if (!isalnum((unsigned char)ch) && !strchr("._-:@+", ch)) {
			char show[YT_SHOW_BUF];
			cfg_show_node(show, v);
			return cfg_err(x, v, "image: '%s' is not an image name; expected letters, "
					     "digits and . _ - : @ +, or a directory written "
					     "with a '/' (./%s)", show, show);
		}
	}
	return (c->image = cfg_strdup(v->str, v->len)) ? 0 : cfg_nomem(x);
}

/* An absolute guest path without "." or ".." components: the agent starts
 * there, so it must mean one place. */
static int cfg_guest_path(struct cfg_ctx *x, const struct yt_node *v, const char *what,
			  char **out)
{
	static const char expected[] = "an absolute guest path such as /workspace";
	char show[YT_SHOW_BUF];
	int rc = cfg_text(x, v, what, expected);
	if (rc)
		return rc;
	cfg_show_node(show, v);
	if (v->str[0] != '/')
		return cfg_err(x, v, "%s: '%s' is not absolute; expected %s", what, show,
			       expected);
	if (v->len >= PATH_MAX)
		return cfg_err(x, v, "%s: longer than %d bytes; expected %s", what, PATH_MAX - 1,
			       expected);
	for (const char *p = v->str; *p;) {
		while (*p == '/')
			p++;
		size_t n = strcspn(p, "/");
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return cfg_err(x, v, "%s: '%s' has a '.' or '..' component; expected %s",
				       what, show, expected);
		p += n;
	}
	return (*out = cfg_strdup(v->str, v->len)) ? 0 : cfg_nomem(x);
}

static int cfg_workdir(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	return cfg_guest_path(x, v, "workdir", &c->workdir);
}

/* Environment names as shells accept them. */
static bool cfg_env_name_ok(const char *s, size_t len)
{
	if (len == 0 || isdigit((unsigned char)s[0]))
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_')
			return false;
	return true;
}

static void cfg_free_strv(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Appends "NAME=VALUE" to c->env unless NAME is already there. */
static int cfg_env_add(struct cfg_ctx *x, const struct yt_node *at, struct kbox_config *c,
		       const char *name, size_t nlen, const char *val, size_t vlen)
{
	char show[YT_SHOW_BUF];
	if (at->raw)
		cfg_show_node(show, at);
	else
		yt_show(show, sizeof show, name, nlen, YT_SHOW_MAX);
	if (!cfg_env_name_ok(name, nlen))
		return cfg_err(x, at, "env: '%s' is not a variable name; expected letters, "
				      "digits and '_', not starting with a digit", show);
	for (size_t i = 0; i < c->n_env; i++)
		if (strncmp(c->env[i], name, nlen) == 0 && c->env[i][nlen] == '=')
			return cfg_err(x, at, "env: %s is set twice; expected each name once",
				       show);
	if (c->n_env >= CONFIG_ENV_MAX)
		return cfg_err(x, at, "env: more than %u variables; expected at most %u",
			       CONFIG_ENV_MAX, CONFIG_ENV_MAX);
	char *e = malloc(nlen + 1 + vlen + 1);
	if (!e)
		return cfg_nomem(x);
	memcpy(e, name, nlen);
	e[nlen] = '=';
	memcpy(e + nlen + 1, val, vlen);
	e[nlen + 1 + vlen] = '\0';
	c->env[c->n_env++] = e;
	return 0;
}

/* env: {NAME: VALUE} or ["NAME=VALUE"].  Scalars of any YAML type count as
 * their text (PORT: 8080 is "8080"); a null value is refused rather than
 * guessed at, since the host's value might be a secret. */
static int cfg_env(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	char got[YT_SHOW_BUF + 2];
	if (v->kind == YT_SCALAR && !yt_is_null(v))
		return cfg_err(x, v, "env: got %s; expected a mapping NAME: VALUE or a list of "
				     "\"NAME=VALUE\"", cfg_got(v, got, sizeof got));
	size_t n = v->kind == YT_MAP ? v->n / 2 : v->n;
	c->env = calloc(n ? n : 1, sizeof *c->env);
	if (!c->env)
		return cfg_nomem(x);
	for (size_t i = 0; i < v->n; i++) {
		const struct yt_node *k = v->kids[i];
		char what[YT_SHOW_BUF + 8];
		int rc;
		if (v->kind == YT_MAP) {
			const struct yt_node *val = v->kids[++i];
			rc = cfg_text(x, k, "env", "a variable name");
			cfg_show_node(got, k);
			snprintf(what, sizeof what, "env.%s", got);
			if (!rc)
				rc = cfg_text(x, val, what, "a value (write \"\" for an empty one)");
			if (!rc)
				rc = cfg_env_add(x, k, c, k->str, k->len, val->str, val->len);
		} else {
			snprintf(what, sizeof what, "env[%zu]", i);
			rc = cfg_text(x, k, what, "\"NAME=VALUE\"");
			const char *eq = rc ? NULL : memchr(k->str, '=', k->len);
			if (!rc && !eq) {
				cfg_show_node(got, k);
				rc = cfg_err(x, k, "%s: '%s' has no '='; expected \"NAME=VALUE\"",
					     what, got);
			}
			if (!rc)
				rc = cfg_env_add(x, k, c, k->str, (size_t)(eq - k->str), eq + 1,
						 k->len - (size_t)(eq - k->str) - 1);
		}
		if (rc)
			return rc;
	}
	return 0;
}

static int cfg_secrets(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	return cfg_path(x, v, "secrets", "a path to a secrets.yaml file", &c->secrets);
}

/* ---- lists of checked strings ------------------------------------------ */

static void cfg_free_strs(struct config_str *s, size_t n)
{
	if (!s)
		return;
	for (size_t i = 0; i < n; i++)
		free(s[i].s);
	free(s);
}

/* Checks one entry; fills msg with what is wrong (rest of the sentence
 * after "WHAT: ") and returns false if it is bad. */
typedef bool (*cfg_check_fn)(const char *s, char *msg, size_t msglen);

/* A list of scalars, each passed through check; stored as written. */
static int cfg_str_list(struct cfg_ctx *x, const struct yt_node *v, const char *what,
			const char *expected, size_t max, cfg_check_fn check,
			struct config_str **out, size_t *n_out)
{
	char got[YT_SHOW_BUF + 2], w[64], msg[512];
	if (v->kind != YT_SEQ)
		return cfg_err(x, v, "%s: got %s; expected a list of %s", what,
			       cfg_got(v, got, sizeof got), expected);
	if (v->n > max)
		return cfg_err(x, v->kids[max], "%s: more than %zu entries; expected at most %zu",
			       what, max, max);
	struct config_str *s = calloc(v->n ? v->n : 1, sizeof *s);
	if (!s)
		return cfg_nomem(x);
	for (size_t i = 0; i < v->n; i++) {
		const struct yt_node *e = v->kids[i];
		snprintf(w, sizeof w, "%s[%zu]", what, i);
		int rc = cfg_text(x, e, w, expected);
		if (!rc && !check(e->str, msg, sizeof msg)) {
			char safe[4 * sizeof msg + 4];
			yt_show(safe, sizeof safe, msg, strlen(msg), sizeof msg);
			if (e->raw)
				cfg_show_node(safe, e);
			rc = e->raw ? cfg_err(x, e, "%s: what '%s' expands to is not valid (a "
						    "value from a variable is not shown); "
						    "expected %s", w, safe, expected)
				    : cfg_err(x, e, "%s: %s", w, safe);
		}
		if (!rc && !(s[i].s = cfg_strdup(e->str, e->len)))
			rc = cfg_nomem(x);
		if (rc) {
			cfg_free_strs(s, v->n);
			return rc;
		}
		s[i].line = e->line;
		s[i].col = e->col;
	}
	*out = s;
	*n_out = v->n;
	return 0;
}

static bool cfg_check_rule(const char *s, bool deny, char *msg, size_t msglen)
{
	struct pol_rule r;
	char buf[POL_NAME_MAX * 2 + 16];
	int n = snprintf(buf, sizeof buf, "%s%s", deny ? "deny:" : "", s);
	if (n < 0 || (size_t)n >= sizeof buf) {
		snprintf(msg, msglen, "rule is too long; expected a rule such as example.com, "
				      "*.github.com:443 or 203.0.113.0/24");
		return false;
	}
	char perr[384];
	if (pol_parse_rule(buf, &r, perr, sizeof perr) == 0)
		return true;
	snprintf(msg, msglen, "%s; expected a rule such as example.com, *.github.com:443 or "
			      "203.0.113.0/24", perr);
	return false;
}

static bool cfg_check_allow(const char *s, char *msg, size_t msglen)
{
	return cfg_check_rule(s, false, msg, msglen);
}

static bool cfg_check_deny(const char *s, char *msg, size_t msglen)
{
	return cfg_check_rule(s, true, msg, msglen);
}

/* A DNS name in the usual characters, not one libc would read as an IPv4
 * address. */
static bool cfg_name_ok(const char *s)
{
	char norm[POL_NAME_MAX + 1];
	if (pol_name_normalize(s, norm) < 0 || pol_name_is_numeric(norm))
		return false;
	for (const char *p = norm; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.' && *p != '_')
			return false;
	return true;
}

static bool cfg_check_bypass(const char *s, char *msg, size_t msglen)
{
	const char *name = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
	if (cfg_name_ok(name))
		return true;
	snprintf(msg, msglen, "'%s' is not a host name; expected a name such as "
			      "example.com or *.example.com", s);
	return false;
}

static bool cfg_port_num(const char *s, size_t len, unsigned *out)
{
	uint64_t v;
	if (cfg_decimal(s, len, &v) != CFG_NUM_OK || v < 1 || v > 65535)
		return false;
	*out = (unsigned)v;
	return true;
}

/* "[IP:]HOSTPORT:GUESTPORT"; IP is a loopback address (IPv6 in brackets),
 * since a port published on another address would be reachable from the
 * network. */
static bool cfg_check_port(const char *s, char *msg, size_t msglen)
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
	if (!cfg_port_num(guest + 1, strlen(guest + 1), &gp) ||
	    (!any && !cfg_port_num(host, (size_t)(guest - host), &hp))) {
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
	struct pol_addr a;
	const char *cls = NULL;
	if (iplen < sizeof ip) {
		memcpy(ip, ips, iplen);
		ip[iplen] = '\0';
		if (pol_addr_parse(ip, &a) == 0)
			cls = pol_addr_class(&a);
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

static bool cfg_check_port_or_num(const char *s, char *msg, size_t msglen)
{
	unsigned p;
	if (!strchr(s, ':') && cfg_port_num(s, strlen(s), &p))
		return true;
	return cfg_check_port(s, msg, msglen);
}

/* ports: strings as above, or a bare integer N meaning "N:N". */
static int cfg_ports(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	static const char expected[] = "\"[IP:]HOSTPORT:GUESTPORT\" entries";
	int rc = cfg_str_list(x, v, "ports", expected, CONFIG_LIST_MAX,
			      cfg_check_port_or_num, &c->ports, &c->n_ports);
	if (rc)
		return rc;
	for (size_t i = 0; i < c->n_ports; i++) {
		if (strchr(c->ports[i].s, ':'))
			continue;
		size_t len = strlen(c->ports[i].s);
		char *p = malloc(2 * len + 2);
		if (!p)
			return cfg_nomem(x);
		snprintf(p, 2 * len + 2, "%s:%s", c->ports[i].s, c->ports[i].s);
		free(c->ports[i].s);
		c->ports[i].s = p;
	}
	return 0;
}

/* ---- network, tls ------------------------------------------------------ */

static unsigned cfg_distance(const char *a, size_t la, const char *b);

#define CFG_SUB_KEYS_MAX 8 /* keys of the largest mapping section (network has 6) */

/* Finds key k of section among keys[] (n of them), refusing unknown keys
 * with a suggestion and repeated ones; seen[] holds the line of each key
 * already met.  Returns the index, or a negative errno. */
static int cfg_sub_key(struct cfg_ctx *x, const struct yt_node *k, const char *section,
		       const char *const *keys, size_t n, unsigned *seen)
{
	char show[YT_SHOW_BUF], list[256];
	size_t o = 0;
	list[0] = '\0';
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", keys[i]);
	if (k->kind != YT_SCALAR)
		return cfg_err(x, k, "%s: a key is %s; expected one of: %s", section,
			       yt_kind_name(k), list);
	cfg_show_node(show, k);
	const char *near = NULL;
	unsigned best = UINT_MAX;
	for (size_t i = 0; i < n; i++) {
		if (strlen(keys[i]) == k->len && memcmp(keys[i], k->str, k->len) == 0) {
			if (seen[i])
				return cfg_err(x, k, "%s: duplicate key '%s' (first at line %u); "
						     "expected each key once", section, show, seen[i]);
			seen[i] = k->line;
			return (int)i;
		}
		unsigned d = cfg_distance(k->str, k->len, keys[i]);
		if (d <= (strlen(keys[i]) <= 4 ? 1u : 2u) && d < best) {
			best = d;
			near = keys[i];
		}
	}
	if (near)
		return cfg_err(x, k, "%s: unknown key '%s'; did you mean '%s'?", section, show,
			       near);
	return cfg_err(x, k, "%s: unknown key '%s'; expected one of: %s", section, show, list);
}

/* One word out of words[], as policy and intercept take. */
static int cfg_word(struct cfg_ctx *x, const struct yt_node *v, const char *what,
		    const char *const *words, size_t n, char **out)
{
	char expected[128] = "", show[YT_SHOW_BUF];
	size_t o = 0;
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(expected + o, sizeof expected - o, "%s%s",
				      i == 0 ? "" : i + 1 == n ? " or " : ", ", words[i]);
	int rc = cfg_text(x, v, what, expected);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		if (strcmp(v->str, words[i]) == 0)
			return (*out = cfg_strdup(v->str, v->len)) ? 0 : cfg_nomem(x);
	cfg_show_node(show, v);
	return cfg_err(x, v, "%s: '%s' is not valid; expected %s", what, show, expected);
}

/* hosts: {NAME: ADDRESS}, stored as "NAME:ADDRESS". */
static int cfg_hosts(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	char got[YT_SHOW_BUF + 2], show[YT_SHOW_BUF];
	if (v->kind != YT_MAP)
		return cfg_err(x, v, "network.hosts: got %s; expected a mapping NAME: ADDRESS "
				     "such as 'db.local: 10.0.2.5'", cfg_got(v, got, sizeof got));
	size_t n = v->n / 2;
	if (n > CONFIG_LIST_MAX)
		return cfg_err(x, v->kids[2 * CONFIG_LIST_MAX], "network.hosts: more than %u "
				"entries; expected at most %u", CONFIG_LIST_MAX, CONFIG_LIST_MAX);
	c->hosts = calloc(n ? n : 1, sizeof *c->hosts);
	if (!c->hosts)
		return cfg_nomem(x);
	for (size_t i = 0; i < n; i++) {
		const struct yt_node *k = v->kids[2 * i], *a = v->kids[2 * i + 1];
		struct pol_addr addr;
		int rc = cfg_text(x, k, "network.hosts", "a host name");
		if (rc)
			return rc;
		cfg_show_node(show, k);
		if (!cfg_name_ok(k->str))
			return cfg_err(x, k, "network.hosts: '%s' is not a host name; expected a "
					     "name such as db.local", show);
		for (size_t j = 0; j < i; j++)
			if (strncasecmp(c->hosts[j].s, k->str, k->len) == 0 &&
			    c->hosts[j].s[k->len] == ':')
				return cfg_err(x, k, "network.hosts: '%s' is listed twice; "
						     "expected each name once", show);
		char what[YT_SHOW_BUF + 16];
		snprintf(what, sizeof what, "network.hosts.%s", show);
		rc = cfg_text(x, a, what, "an IP address such as 10.0.2.5");
		if (rc)
			return rc;
		if (pol_addr_parse(a->str, &addr) < 0) {
			cfg_show_node(got, a);
			return cfg_err(x, a, "%s: '%s' is not an IP address; expected an IPv4 "
					     "address such as 10.0.2.5 or an IPv6 one", what, got);
		}
		size_t len = k->len + 1 + a->len + 1;
		if (!(c->hosts[i].s = malloc(len)))
			return cfg_nomem(x);
		snprintf(c->hosts[i].s, len, "%s:%s", k->str, a->str);
		c->hosts[i].line = k->line;
		c->hosts[i].col = k->col;
		c->n_hosts = i + 1;
	}
	return 0;
}

static bool cfg_check_dns(const char *s, char *msg, size_t msglen)
{
	struct nres_server srv;
	return nres_server_parse(s, &srv, msg, msglen) == 0;
}

/* dns: [ADDR[:PORT], ...] or {servers: [...], rate: N}. */
static int cfg_dns(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	static const char *const keys[] = { "servers", "rate" };
	static const char expected[] = "name server addresses (10.0.0.53, 10.0.0.53:5353, "
				       "\"[fd00::53]:5353\")";
	unsigned seen[ARRAY_SIZE(keys)] = { 0 };
	char got[YT_SHOW_BUF + 2];
	const struct yt_node *list = NULL;
	if (v->kind == YT_SEQ) {
		list = v;
	} else if (v->kind == YT_MAP) {
		for (size_t i = 0; i + 1 < v->n; i += 2) {
			const struct yt_node *val = v->kids[i + 1];
			int s = cfg_sub_key(x, v->kids[i], "network.dns", keys, ARRAY_SIZE(keys), seen);
			if (s < 0)
				return s;
			if (s == 0) {
				list = val;
				continue;
			}
			uint64_t rate;
			int rc = cfg_uint(x, val, "network.dns.rate", 1, CONFIG_DNS_RATE_MAX, &rate);
			if (rc)
				return rc;
			c->dns_rate = (unsigned)rate;
		}
		if (!list)
			return 0;
	} else {
		return cfg_err(x, v, "network.dns: got %s; expected a list of %s, or a mapping "
				     "with servers and rate", cfg_got(v, got, sizeof got), expected);
	}
	const char *what = list == v ? "network.dns" : "network.dns.servers";
	if (list->kind == YT_SEQ && list->n == 0)
		return cfg_err(x, list, "%s: an empty list; expected at least one of %s (leave "
					"it out to use the host's resolver)", what, expected);
	return cfg_str_list(x, list, what, expected, NRES_MAX_SERVERS, cfg_check_dns, &c->dns,
			    &c->n_dns);
}

/* The keys of a section that is a mapping: fn gets each key's index in
 * keys[] (n of them) and its value, unknown and repeated keys having been
 * refused.  0 or the first failure. */
static int cfg_sub_keys(struct cfg_ctx *x, const struct yt_node *v, const char *section,
			const char *const *keys, size_t n, struct kbox_config *c,
			int (*fn)(struct cfg_ctx *x, size_t key, const struct yt_node *val,
				  struct kbox_config *c))
{
	unsigned seen[CFG_SUB_KEYS_MAX] = { 0 };
	for (size_t i = 0; i + 1 < v->n; i += 2) {
		int s = cfg_sub_key(x, v->kids[i], section, keys, n, seen);
		int rc = s < 0 ? s : fn(x, (size_t)s, v->kids[i + 1], c);
		if (rc)
			return rc;
	}
	return 0;
}

static const char *const cfg_network_keys[] = { "policy", "allow", "deny", "hosts", "audit_log",
						"dns" };

static int cfg_network_key(struct cfg_ctx *x, size_t key, const struct yt_node *val,
			   struct kbox_config *c)
{
	static const char *const policies[] = { "none", "public", "allowlist" };
	static const char rule[] = "rules (example.com, *.github.com:443, 203.0.113.0/24)";
	switch (key) {
	case 0:
		return cfg_word(x, val, "network.policy", policies, ARRAY_SIZE(policies),
				&c->network_policy);
	case 1:
		return cfg_str_list(x, val, "network.allow", rule, CONFIG_LIST_MAX, cfg_check_allow,
				    &c->allow, &c->n_allow);
	case 2:
		return cfg_str_list(x, val, "network.deny", rule, CONFIG_LIST_MAX, cfg_check_deny,
				    &c->deny, &c->n_deny);
	case 3:
		return cfg_hosts(x, val, c);
	case 4:
		return cfg_path(x, val, "network.audit_log", "a file to append network decisions to",
				&c->audit_log);
	default: /* dns */
		return cfg_dns(x, val, c);
	}
}

static int cfg_network(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	char got[YT_SHOW_BUF + 2];
	if (v->kind != YT_MAP)
		return cfg_err(x, v, "network: got %s; expected a mapping with policy, allow, "
				     "deny, hosts, audit_log or dns", cfg_got(v, got, sizeof got));
	return cfg_sub_keys(x, v, "network", cfg_network_keys, ARRAY_SIZE(cfg_network_keys), c,
			    cfg_network_key);
}

static const char *const cfg_tls_keys[] = { "intercept", "bypass", "extra_ca" };

static int cfg_tls_key(struct cfg_ctx *x, size_t key, const struct yt_node *val,
		       struct kbox_config *c)
{
	static const char *const scopes[] = { "all", "secrets" };
	switch (key) {
	case 0:
		return cfg_word(x, val, "tls.intercept", scopes, ARRAY_SIZE(scopes),
				&c->tls_intercept);
	case 1:
		return cfg_str_list(x, val, "tls.bypass", "host names (example.com, "
				    "*.example.com)", CONFIG_LIST_MAX, cfg_check_bypass,
				    &c->tls_bypass, &c->n_tls_bypass);
	default: /* extra_ca */
		return cfg_path(x, val, "tls.extra_ca", "a PEM file of CA certificates",
				&c->tls_extra_ca);
	}
}

static int cfg_tls(struct cfg_ctx *x, const struct yt_node *v, struct kbox_config *c)
{
	char got[YT_SHOW_BUF + 2];
	if (v->kind != YT_MAP)
		return cfg_err(x, v, "tls: got %s; expected a mapping with intercept, bypass or "
				     "extra_ca", cfg_got(v, got, sizeof got));
	return cfg_sub_keys(x, v, "tls", cfg_tls_keys, ARRAY_SIZE(cfg_tls_keys), c, cfg_tls_key);
}

/* The top-level keys.  A new section adds its row here and its fields to
 * struct kbox_config, config_free and cfg_move. */
static const struct cfg_section {
	const char *key;
	int (*parse)(struct cfg_ctx *x, const struct yt_node *val, struct kbox_config *c);
} cfg_sections[] = {
	{ "cpus", cfg_cpus },
	{ "memory", cfg_memory },
	{ "kernel", cfg_kernel },
	{ "initrd", cfg_initrd },
	{ "command", cfg_command },
	{ "verbose", cfg_verbose },
	{ "mounts", cfg_mounts },
	{ "image", cfg_image },
	{ "workdir", cfg_workdir },
	{ "env", cfg_env },
	{ "network", cfg_network },
	{ "ports", cfg_ports },
	{ "tls", cfg_tls },
	{ "secrets", cfg_secrets },
};

/* Edit distance with adjacent swaps (optimal string alignment), ignoring
 * case; gives up past CFG_KEY_MAX bytes, where no key is a typo of ours. */
#define CFG_KEY_MAX 32
static unsigned cfg_distance(const char *a, size_t la, const char *b)
{
	size_t lb = strlen(b);
	unsigned d[CFG_KEY_MAX + 1][CFG_KEY_MAX + 1];
	if (la > CFG_KEY_MAX || lb > CFG_KEY_MAX)
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

/* "cpus, memory, …": every top-level key, for messages. */
static const char *cfg_supported_keys(char *list, size_t size)
{
	size_t o = 0;
	list[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(cfg_sections); i++)
		if (o < size)
			o += (size_t)snprintf(list + o, size - o, "%s%s", o ? ", " : "",
					      cfg_sections[i].key);
	return list;
}

static int cfg_unknown_key(struct cfg_ctx *x, const struct yt_node *k)
{
	char show[YT_SHOW_BUF];
	const char *near = NULL;
	unsigned best = UINT_MAX;
	cfg_show_node(show, k);
	for (size_t i = 0; i < ARRAY_SIZE(cfg_sections); i++) {
		unsigned d = cfg_distance(k->str, k->len, cfg_sections[i].key);
		/* One slip in a short word, two in a longer one. */
		unsigned allowed = strlen(cfg_sections[i].key) <= 4 ? 1 : 2;
		if (d <= allowed && d < best) {
			best = d;
			near = cfg_sections[i].key;
		}
	}
	if (near)
		return cfg_err(x, k, "unknown key '%s'; did you mean '%s'?", show, near);
	char list[256];
	return cfg_err(x, k, "unknown key '%s'; expected one of: %s", show,
		       cfg_supported_keys(list, sizeof list));
}

static int cfg_top(struct cfg_ctx *x, const struct yt_node *root, struct kbox_config *c)
{
	unsigned seen[ARRAY_SIZE(cfg_sections)] = { 0 };
	char show[YT_SHOW_BUF];

	if (!root || yt_is_null(root))
		return 0; /* an empty file sets nothing */
	if (root->kind != YT_MAP)
		return cfg_err(x, root, "the top level is %s; expected a mapping of keys such as "
					"'cpus: 2'",
			       root->kind == YT_SEQ ? "a list" : "a single value");
	for (size_t i = 0; i + 1 < root->n; i += 2) {
		const struct yt_node *k = root->kids[i], *v = root->kids[i + 1];
		if (k->kind != YT_SCALAR)
			return cfg_err(x, k, "a key is %s; expected a key name such as 'cpus'",
				       yt_kind_name(k));
		size_t s = 0;
		while (s < ARRAY_SIZE(cfg_sections) &&
		       (strlen(cfg_sections[s].key) != k->len ||
			memcmp(cfg_sections[s].key, k->str, k->len) != 0))
			s++;
		if (s == ARRAY_SIZE(cfg_sections))
			return cfg_unknown_key(x, k);
		cfg_show_node(show, k);
		if (seen[s])
			return cfg_err(x, k, "duplicate key '%s' (first at line %u); expected each "
					     "key once",
				       show, seen[s]);
		seen[s] = k->line;
		int rc = cfg_sections[s].parse(x, v, c);
		if (rc)
			return rc;
	}
	return 0;
}

#define CFG_MOVE_PTR(dst, src, f)          \
	do {                               \
		if ((src)->f) {            \
			free((dst)->f);    \
			(dst)->f = (src)->f; \
			(src)->f = NULL;   \
		}                          \
	} while (0)
#define CFG_MOVE_LIST(dst, src, f, n)  \
	do {                           \
		(dst)->f = (src)->f;   \
		(dst)->n = (src)->n;   \
		(src)->f = NULL;       \
		(src)->n = 0;          \
	} while (0)
#define CFG_MOVE_STRS(dst, src, f, n)                  \
	do {                                           \
		if ((src)->f) {                        \
			cfg_free_strs((dst)->f, (dst)->n); \
			CFG_MOVE_LIST(dst, src, f, n); \
		}                                      \
	} while (0)

/* Moves every field src has set into dst, freeing what dst held there. */
static void cfg_move(struct kbox_config *dst, struct kbox_config *src)
{
	if (src->cpus)
		dst->cpus = src->cpus;
	if (src->memory_mib)
		dst->memory_mib = src->memory_mib;
	if (src->kernel) {
		free(dst->kernel);
		dst->kernel = src->kernel;
		src->kernel = NULL;
	}
	if (src->initrd) {
		free(dst->initrd);
		dst->initrd = src->initrd;
		src->initrd = NULL;
	}
	if (src->argv) {
		cfg_free_argv(dst->argv);
		dst->argv = src->argv;
		src->argv = NULL;
	}
	if (src->verbose >= 0)
		dst->verbose = src->verbose;
	if (src->mounts) {
		cfg_free_mounts(dst->mounts, dst->n_mounts);
		dst->mounts = src->mounts;
		dst->n_mounts = src->n_mounts;
		src->mounts = NULL;
		src->n_mounts = 0;
	}
	CFG_MOVE_PTR(dst, src, image);
	CFG_MOVE_PTR(dst, src, workdir);
	if (src->env) {
		cfg_free_strv(dst->env, dst->n_env);
		CFG_MOVE_LIST(dst, src, env, n_env);
	}
	CFG_MOVE_PTR(dst, src, network_policy);
	CFG_MOVE_STRS(dst, src, allow, n_allow);
	CFG_MOVE_STRS(dst, src, deny, n_deny);
	CFG_MOVE_STRS(dst, src, hosts, n_hosts);
	CFG_MOVE_STRS(dst, src, ports, n_ports);
	CFG_MOVE_PTR(dst, src, audit_log);
	CFG_MOVE_STRS(dst, src, dns, n_dns);
	if (src->dns_rate)
		dst->dns_rate = src->dns_rate;
	CFG_MOVE_PTR(dst, src, tls_intercept);
	CFG_MOVE_STRS(dst, src, tls_bypass, n_tls_bypass);
	CFG_MOVE_PTR(dst, src, tls_extra_ca);
	CFG_MOVE_PTR(dst, src, secrets);
}

/* ---- hiding the sandbox's own files ------------------------------------ */

char *config_literal_pattern(const char *name)
{
	size_t len = strlen(name);
	char *p = malloc(2 * len + 1), *o = p;
	if (!p)
		return NULL;
	for (const char *s = name; *s; s++) {
		if (strchr("*?[\\", *s))
			*o++ = '\\';
		*o++ = *s;
	}
	*o = '\0';
	return p;
}

/* The hidden list for mount m: its own (or the default) patterns plus
 * names[0..nnames), each as a literal pattern.  A bare name rather than
 * the path: the guest could rename a folder on the path, but it cannot
 * look up, create or rename anything by a hidden name.  *out stays NULL
 * when there are no names. */
static int cfg_protect_one(struct mount *m, char *const *names, size_t nnames, char ***out)
{
	*out = NULL;
	if (nnames == 0)
		return 0;
	const char *const *base = m->hidden_set ? m->hidden : FSP_DEFAULT_HIDDEN;
	size_t nbase = 0;
	if (m->hidden_set)
		nbase = m->n_hidden;
	else
		while (base[nbase])
			nbase++;
	char **l = calloc(nbase + nnames + 1, sizeof *l);
	size_t n = 0;
	int rc = l ? 0 : -ENOMEM;
	for (size_t i = 0; !rc && i < nnames; i++)
		if (!(l[n++] = config_literal_pattern(names[i])))
			rc = -ENOMEM;
	for (size_t i = 0; !rc && i < nbase; i++)
		if (!(l[n++] = cfg_strdup(base[i], strlen(base[i]))))
			rc = -ENOMEM;
	if (rc) {
		cfg_free_argv(l);
		return rc;
	}
	*out = l;
	m->hidden = (const char *const *)l;
	m->n_hidden = n;
	m->hidden_set = true;
	return 0;
}

_Static_assert(MOUNTS_MAX <= HF_MAX_ROOTS, "a bit per mount in hf_walk");

/* Add name to a mount's list of names to hide, once. */
static int cfg_add_name(char ***names, size_t *n, const char *name)
{
	for (size_t i = 0; i < *n; i++)
		if (!strcmp((*names)[i], name))
			return 0;
	char **g = realloc(*names, (*n + 1) * sizeof *g);
	if (!g)
		return -ENOMEM;
	*names = g;
	if (!(g[*n] = cfg_strdup(name, strlen(name))))
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* Where one protected file lies against the mounts: its names join the
 * lists of the user mounts its path passes through.  A file with more
 * than one name, or inside the image root (which hides nothing), cannot
 * be kept from the guest: -EPERM with err set. */
static int cfg_protect_file(const struct config_hostfile *f, const struct mounts *ms,
			    const struct hf_root *roots, char ***names, size_t *nnames, char *err,
			    size_t errlen)
{
	struct hf_walk w;
	if (!f->path || hf_walk(f->path, roots, ms->n, &w) < 0)
		return 0; /* kbox cannot open it either, and says so there */
	/* Another name may lie anywhere, in a share or in a folder mounted
	 * inside one, and finding it would mean searching every share: the
	 * only answer that holds is to refuse. */
	if (ms->n && w.exists && S_ISREG(w.st.st_mode) && w.st.st_nlink > 1)
		return eb_fail(err, errlen, -EPERM,
			       "%s %s has %lu names (hard links): the guest could reach it "
			       "through one kbox cannot hide; give it a file of its own (copy it "
			       "and remove the other names)",
			       f->what, f->path, (unsigned long)w.st.st_nlink);
	for (unsigned i = 0; i < ms->n; i++) {
		if (!(w.crossed & (1u << i)))
			continue;
		if (ms->m[i].root)
			return eb_fail(err, errlen, -EPERM,
				       "%s %s is inside the image's root folder %s, which the "
				       "guest sees whole: keep it outside",
				       f->what, f->path, ms->m[i].host);
		for (size_t k = 0; k < w.n_names; k++)
			if (cfg_add_name(&names[i], &nnames[i], w.names[k]) < 0)
				return eb_fail(err, errlen, -ENOMEM, "out of memory");
	}
	return 0;
}

int config_protect_mounts(struct kbox_config *c, const char *conf,
			  const struct config_hostfile *extra, size_t n_extra, struct mounts *ms,
			  char *err, size_t errlen)
{
	char senv[PATH_MAX + 16], ssenv[PATH_MAX + 16];
	const struct config_hostfile own[] = {
		{ conf, "the config file" },
		{ conf && !senv_path(senv, sizeof senv, conf) ? senv : NULL,
		  "the config's secrets.env" },
		{ c->secrets, "the secrets file" },
		{ c->secrets && !senv_path(ssenv, sizeof ssenv, c->secrets) ? ssenv : NULL,
		  "the secrets file's secrets.env" },
		{ c->audit_log, "the audit log" },
		{ c->tls_extra_ca, "the extra CA file (tls.extra_ca)" },
	};
	struct hf_root roots[MOUNTS_MAX];
	char **names[MOUNTS_MAX] = { 0 };
	size_t nnames[MOUNTS_MAX] = { 0 };
	int rc = 0;
	for (unsigned i = 0; i < ms->n; i++)
		if (hf_root_of(ms->m[i].host, &roots[i]) < 0)
			roots[i] = (struct hf_root){ 0, 0 }; /* mounts_attach reports it */
	for (size_t i = 0; !rc && i < ARRAY_SIZE(own) + n_extra; i++)
		rc = cfg_protect_file(i < ARRAY_SIZE(own) ? &own[i] : &extra[i - ARRAY_SIZE(own)], ms,
				      roots, names, nnames, err, errlen);
	char ***lists = rc ? NULL : realloc(c->protect, (c->n_protect + ms->n + 1) * sizeof *lists);
	if (!rc && !lists)
		rc = eb_fail(err, errlen, -ENOMEM, "out of memory");
	else if (!rc)
		c->protect = lists;
	for (unsigned i = 0; !rc && i < ms->n; i++) {
		char **l;
		if (ms->m[i].root)
			continue;
		rc = cfg_protect_one(&ms->m[i], names[i], nnames[i], &l);
		if (!rc && l)
			c->protect[c->n_protect++] = l;
		else if (rc)
			eb_say(err, errlen, "out of memory");
	}
	for (unsigned i = 0; i < ms->n; i++) {
		for (size_t k = 0; k < nnames[i]; k++)
			free(names[i][k]);
		free(names[i]);
	}
	return rc;
}

/* ---- public ------------------------------------------------------------ */

void config_init(struct kbox_config *c)
{
	memset(c, 0, sizeof *c);
	c->verbose = -1;
}

void config_free(struct kbox_config *c)
{
	free(c->kernel);
	free(c->initrd);
	cfg_free_argv(c->argv);
	cfg_free_mounts(c->mounts, c->n_mounts);
	free(c->image);
	free(c->workdir);
	cfg_free_strv(c->env, c->n_env);
	free(c->network_policy);
	cfg_free_strs(c->allow, c->n_allow);
	cfg_free_strs(c->deny, c->n_deny);
	cfg_free_strs(c->hosts, c->n_hosts);
	cfg_free_strs(c->ports, c->n_ports);
	free(c->audit_log);
	cfg_free_strs(c->dns, c->n_dns);
	free(c->tls_intercept);
	cfg_free_strs(c->tls_bypass, c->n_tls_bypass);
	free(c->tls_extra_ca);
	free(c->secrets);
	for (size_t i = 0; i < c->n_protect; i++)
		cfg_free_argv(c->protect[i]);
	free(c->protect);
	config_init(c);
}

int config_load_buf(const char *name, const char *buf, size_t len, struct kbox_config *c,
		    char *err, size_t errlen)
{
	struct cfg_ctx x = { .err = err, .errlen = errlen };
	struct yt_node *root = NULL;
	struct kbox_config tmp;

	if (err && errlen)
		err[0] = '\0';
	yt_show(x.name, sizeof x.name, name, strlen(name), YT_NAME_MAX);
	if (len > CONFIG_MAX_BYTES) {
		cfg_file_err(name, err, errlen,
			     "file is larger than %u bytes; expected a smaller config",
			     CONFIG_MAX_BYTES);
		return -EFBIG;
	}
	const char *slash = strrchr(name, '/');
	x.dir = name;
	x.dirlen = slash ? (size_t)(slash - name) + 1 : 0;

	int rc = senv_init(&x.env, name) ? cfg_nomem(&x)
					  : yt_parse(buf, len, &cfg_rules, x.name, err, errlen, &root);
	config_init(&tmp);
	if (!rc)
		rc = cfg_expand(&x, root);
	if (!rc)
		rc = cfg_top(&x, root, &tmp);
	yt_free(root);
	senv_free(&x.env);
	if (!rc)
		cfg_move(c, &tmp);
	config_free(&tmp);
	return rc;
}

int config_load(const char *path, struct kbox_config *c, char *err, size_t errlen)
{
	char *buf;
	size_t len;
	const char *stage;
	if (err && errlen)
		err[0] = '\0';
	int rc = yt_slurp(path, CONFIG_MAX_BYTES, &buf, &len, &stage);
	if (rc == -EISDIR || (rc == -EINVAL && !strcmp(stage, "stat")))
		cfg_file_err(path, err, errlen, "%s; expected a regular YAML file",
			     rc == -EISDIR ? "is a directory" : "is not a regular file");
	else if (rc == -EFBIG)
		cfg_file_err(path, err, errlen,
			     "file is larger than %u bytes; expected a smaller config",
			     CONFIG_MAX_BYTES);
	else if (rc == -ENOMEM)
		cfg_file_err(path, err, errlen, "out of memory; free some memory and retry");
	else if (rc)
		cfg_file_err(path, err, errlen, "cannot %s: %s; expected a readable config file",
			     stage, strerror(-rc));
	if (rc)
		return rc;
	rc = config_load_buf(path, buf, len, c, err, errlen);
	free(buf);
	return rc;
}
