/* sandbox.yaml loader.  lib/yamltree.c turns the file into a small
 * tree (bounded in size, depth and node count, with anchors, aliases and
 * tags refused as the events arrive), ${VAR} is expanded (from the host
 * environment or secrets.env, lib/secenv.c), then each top-level key
 * is handed to its entry in config_sections[].  Everything is parsed into a scratch config that
 * is moved into the caller's only when the whole file is good. */
#include "vmm/sandbox/config_priv.h"

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
#include "vmm/sandbox/disks.h"
#include "vmm/sandbox/mounts.h"

static const struct yamltree_rules config_rules = {
	.max_depth = CONFIG_MAX_DEPTH,
	.max_nodes = CONFIG_MAX_NODES,
	.smaller = "config",
};

/* Longest variable name ${…} may use; a longer one is not set. */
#define CONFIG_MAX_VAR 128

/* Messages quote a value as written: what ${VAR} brought in may be a
 * secret, and the user wrote the ${VAR}. */
void config_show_node(char *out, const struct yamltree_node *v)
{
	if (v->raw)
		yamltree_show(out, YAMLTREE_SHOW_BUF, v->raw, v->rawlen, YAMLTREE_SHOW_MAX);
	else
		yamltree_show(out, YAMLTREE_SHOW_BUF, v->str, v->len, YAMLTREE_SHOW_MAX);
}

int config_err_at(struct config_ctx *x, unsigned line, unsigned col, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = yamltree_verr(x->err, x->errlen, x->name, line, col, fmt, ap);
	va_end(ap);
	return rc;
}

/* Errors about the file as a whole have no position. */
__attribute__((format(printf, 4, 5))) static void
config_file_err(const char *path, char *err, size_t errlen, const char *fmt, ...)
{
	char name[YAMLTREE_NAME_BUF];
	va_list ap;
	yamltree_show(name, sizeof name, path, strlen(path), YAMLTREE_NAME_MAX);
	va_start(ap, fmt);
	yamltree_verr(err, errlen, name, 0, 0, fmt, ap);
	va_end(ap);
}

int config_nomem(struct config_ctx *x)
{
	return yamltree_nomem(x->err, x->errlen, x->name);
}

/* ---- ${VAR} ----------------------------------------------------------- */

/* Replaces ${NAME} in scalar n by its value and "$$" by "$"; other '$'
 * stay (a shell's $HOME passes through to the guest).  All values together
 * may grow to CONFIG_MAX_BYTES. */
static int config_expand_node(struct config_ctx *x, struct yamltree_node *n)
{
	if (!memchr(n->str, '$', n->len))
		return 0;
	struct secenv_result r;
	int rc = secenv_expand(&x->env, n->str, n->len, CONFIG_MAX_VAR, CONFIG_MAX_BYTES - x->expanded,
			     &r, x->err, x->errlen);
	char show[YAMLTREE_SHOW_BUF] = "";
	if (r.name)
		yamltree_show(show, sizeof show, r.name, r.name_len, YAMLTREE_SHOW_MAX);
	switch (r.fault) {
	case SECENV_UNTERMINATED:
		return config_err(x, n, "unterminated '${'; expected ${NAME} (write $$ for a literal "
				     "'$')");
	case SECENV_BAD_NAME:
		return config_err(x, n, "'${%s}' is not a variable name; expected ${NAME} with "
				     "letters, digits and '_' (write $$ for a literal '$')", show);
	case SECENV_LONG_NAME:
	case SECENV_UNSET:
		return config_err(x, n, "${%s} is not set; export %s or add %s=... to %s", show, show,
				  show, x->env.name);
	case SECENV_TOO_BIG:
		return config_err(x, n, "values grow past %u bytes once variables are expanded; "
				     "expected a smaller config", CONFIG_MAX_BYTES);
	}
	if (rc)
		return rc == -ENOMEM ? config_nomem(x) : rc;
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
static int config_expand(struct config_ctx *x, struct yamltree_node *n)
{
	if (!n)
		return 0;
	if (n->kind == YAMLTREE_SCALAR)
		return config_expand_node(x, n);
	for (size_t i = n->kind == YAMLTREE_MAP ? 1 : 0; i < n->n; i += n->kind == YAMLTREE_MAP ? 2 : 1) {
		int rc = config_expand(x, n->kids[i]);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- value helpers ----------------------------------------------------- */

/* A non-null scalar without NUL bytes, or an error naming what. */
int config_text(struct config_ctx *x, const struct yamltree_node *v, const char *what,
		const char *expected)
{
	if (v->kind != YAMLTREE_SCALAR || yamltree_is_null(v))
		return config_err(x, v, "%s: got %s; expected %s", what, yamltree_kind_name(v), expected);
	if (strlen(v->str) != v->len)
		return config_err(x, v, "%s: contains a NUL byte; expected %s", what, expected);
	return 0;
}

/* Unsigned decimal digits only.  No leading zeros, since YAML 1.1 reads
 * those as octal and users would not get what they meant.  Values too big
 * to matter saturate rather than wrap.  A minus sign is a range error. */
enum config_num config_decimal(const char *s, size_t len, uint64_t *out)
{
	bool neg = len > 1 && s[0] == '-';
	if (neg) {
		s++;
		len--;
	}
	if (len == 0 || (s[0] == '0' && len > 1))
		return CONFIG_NUM_BAD;
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return CONFIG_NUM_BAD;
		if (v < 1000000000000ull)
			v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (neg)
		return v ? CONFIG_NUM_RANGE : CONFIG_NUM_BAD;
	*out = v;
	return CONFIG_NUM_OK;
}

int config_uint(struct config_ctx *x, const struct yamltree_node *v, const char *what,
		uint64_t lo, uint64_t hi, uint64_t *out)
{
	char show[YAMLTREE_SHOW_BUF];
	char expected[64];
	snprintf(expected, sizeof expected, "an integer from %llu to %llu",
		 (unsigned long long)lo, (unsigned long long)hi);
	int rc = config_text(x, v, what, expected);
	if (rc)
		return rc;
	config_show_node(show, v);
	switch (config_decimal(v->str, v->len, out)) {
	case CONFIG_NUM_BAD:
		return config_err(x, v, "%s: '%s' is not an integer; expected %s", what, show,
				  expected);
	case CONFIG_NUM_RANGE:
		return config_err(x, v, "%s: %s is out of range; expected %s", what, show, expected);
	case CONFIG_NUM_OK:
		break;
	}
	if (*out < lo || *out > hi)
		return config_err(x, v, "%s: %s is out of range; expected %s", what, show, expected);
	return 0;
}

static int config_bool(struct config_ctx *x, const struct yamltree_node *v, const char *what, int *out)
{
	static const char *const yes[] = { "true", "yes", "on" };
	static const char *const no[] = { "false", "no", "off" };
	static const char expected[] = "true or false";
	int rc = config_text(x, v, what, expected);
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
	char show[YAMLTREE_SHOW_BUF];
	config_show_node(show, v);
	return config_err(x, v, "%s: '%s' is not a boolean; expected %s", what, show, expected);
}

char *config_strdup(const char *s, size_t len)
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
static void config_free_argv(char **l)
{
	if (!l)
		return;
	for (char **p = l; *p; p++)
		free(*p);
	free(l);
}

/* ---- sections ---------------------------------------------------------- */

static int config_cpus(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	uint64_t n;
	int rc = config_uint(x, v, "cpus", CONFIG_CPUS_MIN, CONFIG_CPUS_MAX, &n);
	if (!rc)
		c->cpus = (unsigned)n;
	return rc;
}

/* MiB as a bare number, or a number with a binary unit: M/MB/MiB or
 * G/GB/GiB in any case, optionally after spaces.  "MB" means MiB here on
 * purpose: nobody sizes a VM in powers of ten. */
static int config_memory(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	static const struct {
		const char *unit;
		uint64_t mib;
	} units[] = { { "", 1 },    { "m", 1 },	   { "mb", 1 },	  { "mib", 1 },
		      { "g", 1024 }, { "gb", 1024 }, { "gib", 1024 } };
	static const char expected[] = "MiB from 64 to 65536, or a size like 512M or 2G";
	char show[YAMLTREE_SHOW_BUF];
	int rc = config_text(x, v, "memory", expected);
	if (rc)
		return rc;
	config_show_node(show, v);

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
	if (!mul || config_decimal(v->str + neg, digits - neg, &n) != CONFIG_NUM_OK)
		return config_err(x, v, "memory: '%s' is not a size; expected %s", show, expected);
	/* n saturates near 10^12, so n * 1024 cannot wrap. */
	if (neg || n * mul < CONFIG_MEMORY_MIN_MIB || n * mul > CONFIG_MEMORY_MAX_MIB)
		return config_err(x, v, "memory: %s is out of range; expected %s", show, expected);
	c->memory_mib = n * mul;
	return 0;
}

/* A path from the file; relative ones are joined to the file's directory so
 * the config means the same thing from any working directory. */
int config_path(struct config_ctx *x, const struct yamltree_node *v, const char *what,
		const char *expected, char **out)
{
	int rc = config_text(x, v, what, expected);
	if (rc)
		return rc;
	if (v->len == 0)
		return config_err(x, v, "%s: empty path; expected %s", what, expected);
	if (v->str[0] == '~')
		return config_err(x, v,
				  "%s: '~' is not expanded; expected an absolute path or one "
				  "relative to the config file",
				  what);
	size_t pre = v->str[0] == '/' ? 0 : x->dirlen;
	if (pre + v->len >= PATH_MAX)
		return config_err(x, v, "%s: path is longer than %d bytes; expected %s", what,
				  PATH_MAX - 1, expected);
	char *p = malloc(pre + v->len + 1);
	if (!p)
		return config_nomem(x);
	if (pre)
		memcpy(p, x->dir, pre);
	memcpy(p + pre, v->str, v->len + 1);
	*out = p;
	return 0;
}

static int config_kernel(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	return config_path(x, v, "kernel", "a path to a kernel image (vmlinux or bzImage)",
			   &c->kernel);
}

static int config_initrd(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	return config_path(x, v, "initrd", "a path to an initramfs (cpio) file", &c->initrd);
}

static int config_command_string(struct config_ctx *x, const struct yamltree_node *v,
				 struct kbox_config *c)
{
	static const char expected[] =
		"a command line string or a list of strings (program and arguments)";
	int rc = config_text(x, v, "command", expected);
	if (rc)
		return rc;
	size_t i = 0;
	while (i < v->len && (v->str[i] == ' ' || v->str[i] == '\t'))
		i++;
	if (i == v->len)
		return config_err(x, v, "command: empty command; expected %s", expected);
	char **argv = calloc(4, sizeof *argv);
	if (!argv)
		return config_nomem(x);
	argv[0] = config_strdup("/bin/sh", 7);
	argv[1] = config_strdup("-c", 2);
	argv[2] = config_strdup(v->str, v->len);
	if (!argv[0] || !argv[1] || !argv[2]) {
		for (int k = 0; k < 3; k++)
			free(argv[k]);
		free(argv);
		return config_nomem(x);
	}
	c->argv = argv;
	return 0;
}

static int config_command(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	if (v->kind != YAMLTREE_SEQ)
		return config_command_string(x, v, c);
	if (v->n == 0)
		return config_err(x, v,
				  "command: empty command; expected a list with at least the "
				  "program to run");
	char **argv = calloc(v->n + 1, sizeof *argv);
	if (!argv)
		return config_nomem(x);
	for (size_t i = 0; i < v->n; i++) {
		const struct yamltree_node *a = v->kids[i];
		char what[32];
		snprintf(what, sizeof what, "command[%zu]", i);
		int rc = config_text(x, a, what, "a string (write \"\" for an empty argument)");
		if (!rc && i == 0 && a->len == 0)
			rc = config_err(x, a, "command[0]: empty program name; expected the "
					   "program to run");
		if (!rc && !(argv[i] = config_strdup(a->str, a->len)))
			rc = config_nomem(x);
		if (rc) {
			config_free_argv(argv);
			return rc;
		}
	}
	c->argv = argv;
	return 0;
}

static int config_verbose(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	return config_bool(x, v, "verbose", &c->verbose);
}

/* "'value'" for a scalar, else what kind of node it is, for "got …". */
const char *config_got(const struct yamltree_node *v, char *buf, size_t size)
{
	if (v->kind != YAMLTREE_SCALAR || yamltree_is_null(v))
		return yamltree_kind_name(v);
	char show[YAMLTREE_SHOW_BUF];
	config_show_node(show, v);
	snprintf(buf, size, "'%s'", show);
	return buf;
}

void *config_seq(struct config_ctx *x, const struct yamltree_node *v, const char *what,
		 const char *expected, size_t max, const char *noun, size_t size, int *rc)
{
	char got[YAMLTREE_SHOW_BUF + 2];
	void *a = NULL;
	if (v->kind != YAMLTREE_SEQ)
		*rc = config_err(x, v, "%s: got %s; expected a list of %s", what,
				 config_got(v, got, sizeof got), expected);
	else if (v->n > max)
		*rc = config_err(x, v->kids[max], "%s: more than %zu %s; expected at most %zu", what,
				 max, noun, max);
	else if (!(a = calloc(v->n ? v->n : 1, size)))
		*rc = config_nomem(x);
	return a;
}

static void config_free_strv(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void config_free_mounts(struct config_mount *m, unsigned n)
{
	if (!m)
		return;
	for (unsigned i = 0; i < n; i++) {
		free(m[i].source);
		free(m[i].target);
		config_free_strv(m[i].hidden, m[i].n_hidden);
		config_free_strv(m[i].hidden_extra, m[i].n_hidden_extra);
	}
	free(m);
}

/* hidden and hidden_extra (key): a list of non-empty fnmatch patterns,
 * into *out and *n.  A trailing '/' (as in .gitignore's "secrets/") is
 * dropped: the backend hides a matching name whatever it is, and a hidden
 * directory hides all below it. */
static int config_patterns(struct config_ctx *x, const struct yamltree_node *v, unsigned idx,
			   const char *key, char ***out, size_t *n)
{
	static const char expected[] = "a glob pattern such as \".env\" or \"*.pem\"";
	char what[48];
	int rc;
	snprintf(what, sizeof what, "mounts[%u].%s", idx, key);
	*out = config_seq(x, v, what, "patterns such as [\".env\", \"*.pem\"] ([] hides nothing)",
			  CONFIG_HIDDEN_MAX, "patterns", sizeof **out, &rc);
	if (!*out)
		return rc;
	for (size_t i = 0; i < v->n; i++) {
		const struct yamltree_node *p = v->kids[i];
		snprintf(what, sizeof what, "mounts[%u].%s[%zu]", idx, key, i);
		rc = config_text(x, p, what, expected);
		if (rc)
			return rc;
		size_t len = p->len;
		while (len > 0 && p->str[len - 1] == '/')
			len--;
		if (p->len == 0)
			return config_err(x, p, "%s: empty pattern; expected %s", what, expected);
		if (len == 0)
			return config_err(x, p, "%s: '/' alone would hide the whole mount; "
					     "expected %s", what, expected);
		if (len > CONFIG_HIDDEN_LEN_MAX)
			return config_err(x, p, "%s: pattern is longer than %u bytes; expected %s",
					  what, CONFIG_HIDDEN_LEN_MAX, expected);
		if (!((*out)[i] = config_strdup(p->str, len)))
			return config_nomem(x);
		*n = i + 1;
	}
	return 0;
}

static int config_mount_entry(struct config_ctx *x, const struct yamltree_node *v, unsigned idx,
			      struct config_mount *m)
{
	static const char *const keys[] = { "source", "target", "readonly", "hidden",
					    "hidden_extra" };
	unsigned seen[ARRAY_SIZE(keys)] = { 0 };
	char what[48], got[YAMLTREE_SHOW_BUF + 2], show[YAMLTREE_SHOW_BUF];
	int rc;
	m->line = v->line;
	m->col = v->col;
	if (v->kind != YAMLTREE_MAP)
		return config_err(x, v, "mounts[%u]: got %s; expected a mapping with source and "
				     "target", idx, config_got(v, got, sizeof got));
	for (size_t i = 0; i + 1 < v->n; i += 2) {
		const struct yamltree_node *k = v->kids[i], *val = v->kids[i + 1];
		if (k->kind != YAMLTREE_SCALAR)
			return config_err(x, k, "mounts[%u]: a key is %s; expected source, target, "
					     "readonly, hidden or hidden_extra", idx, yamltree_kind_name(k));
		size_t s = 0;
		while (s < ARRAY_SIZE(keys) &&
		       (strlen(keys[s]) != k->len || memcmp(keys[s], k->str, k->len) != 0))
			s++;
		config_show_node(show, k);
		if (s == ARRAY_SIZE(keys))
			return config_err(x, k, "mounts[%u]: unknown key '%s'; expected source, "
					     "target, readonly, hidden or hidden_extra", idx, show);
		if (seen[s])
			return config_err(x, k, "mounts[%u]: duplicate key '%s' (first at line %u); "
					     "expected each key once", idx, show, seen[s]);
		seen[s] = k->line;
		snprintf(what, sizeof what, "mounts[%u].%s", idx, keys[s]);
		switch (s) {
		case 0:
			rc = config_path(x, val, what, "the host directory to share", &m->source);
			break;
		case 1:
			rc = config_text(x, val, what, "an absolute guest path such as /workspace");
			if (!rc && val->len == 0)
				rc = config_err(x, val, "%s: empty path; expected an absolute guest "
						     "path such as /workspace", what);
			if (!rc && !(m->target = config_strdup(val->str, val->len)))
				rc = config_nomem(x);
			break;
		case 2: {
			int ro = 0;
			rc = config_bool(x, val, what, &ro);
			m->readonly = ro == 1;
			break;
		}
		case 3:
			m->hidden_set = true;
			rc = config_patterns(x, val, idx, "hidden", &m->hidden, &m->n_hidden);
			break;
		default:
			rc = config_patterns(x, val, idx, "hidden_extra", &m->hidden_extra,
					     &m->n_hidden_extra);
			break;
		}
		if (rc)
			return rc;
	}
	if (!m->source)
		return config_err(x, v, "mounts[%u]: no source; expected the host directory to "
				     "share (source: ./)", idx);
	if (!m->target)
		return config_err(x, v, "mounts[%u]: no target; expected the guest path (target: "
				     "/workspace)", idx);
	return 0;
}

static int config_mounts(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	int rc;
	struct config_mount *m = config_seq(x, v, "mounts", "mappings with source and target",
					    MOUNTS_MAX, "mounts", sizeof *m, &rc);
	if (!m)
		return rc;
	for (size_t i = 0; i < v->n; i++) {
		rc = config_mount_entry(x, v->kids[i], (unsigned)i, &m[i]);
		if (rc) {
			config_free_mounts(m, (unsigned)v->n);
			return rc;
		}
	}
	c->mounts = m;
	c->n_mounts = (unsigned)v->n;
	return 0;
}

/* ---- disks ------------------------------------------------------------- */

static void config_free_disks(struct config_disk *d, unsigned n)
{
	if (!d)
		return;
	for (unsigned i = 0; i < n; i++) {
		free(d[i].name);
		free(d[i].target);
	}
	free(d);
}

/* One disks: entry as a mapping (name, target, size, readonly) into the
 * checking set ds. */
static int config_disk_map(struct config_ctx *x, const struct yamltree_node *v, unsigned idx,
			   struct disks *ds)
{
	static const char *const keys[] = { "name", "target", "size", "readonly" };
	static const char keylist[] = "name, target, size or readonly";
	unsigned seen[ARRAY_SIZE(keys)] = { 0 };
	const struct yamltree_node *val_of[ARRAY_SIZE(keys)] = { 0 };
	char what[48], show[YAMLTREE_SHOW_BUF], e[400];
	for (size_t i = 0; i + 1 < v->n; i += 2) {
		const struct yamltree_node *k = v->kids[i];
		if (k->kind != YAMLTREE_SCALAR)
			return config_err(x, k, "disks[%u]: a key is %s; expected %s", idx,
					  yamltree_kind_name(k), keylist);
		size_t s = 0;
		while (s < ARRAY_SIZE(keys) &&
		       (strlen(keys[s]) != k->len || memcmp(keys[s], k->str, k->len) != 0))
			s++;
		config_show_node(show, k);
		if (s == ARRAY_SIZE(keys))
			return config_err(x, k, "disks[%u]: unknown key '%s'; expected %s", idx, show,
					  keylist);
		if (seen[s])
			return config_err(x, k, "disks[%u]: duplicate key '%s' (first at line %u); "
					     "expected each key once", idx, show, seen[s]);
		seen[s] = k->line;
		val_of[s] = v->kids[i + 1];
	}
	char name[DISKS_NAME_MAX + 2] = "", target[DISKS_GUEST_MAX + 2] = "";
	uint64_t size = 0;
	int ro = 0, rc;
	if (!val_of[0])
		return config_err(x, v, "disks[%u]: no name; expected the volume's name (name: "
				     "containers)", idx);
	if (!val_of[1])
		return config_err(x, v, "disks[%u]: no target; expected the guest path (target: "
				     "/var/lib/containers)", idx);
	snprintf(what, sizeof what, "disks[%u].name", idx);
	if ((rc = config_text(x, val_of[0], what, "a volume name such as containers")))
		return rc;
	if (val_of[0]->len > DISKS_NAME_MAX || memchr(val_of[0]->str, '\0', val_of[0]->len))
		return config_err(x, val_of[0], "%s: longer than %u bytes; expected a volume name",
				  what, DISKS_NAME_MAX);
	memcpy(name, val_of[0]->str, val_of[0]->len);
	snprintf(what, sizeof what, "disks[%u].target", idx);
	if ((rc = config_text(x, val_of[1], what, "an absolute guest path")))
		return rc;
	if (val_of[1]->len > DISKS_GUEST_MAX)
		return config_err(x, val_of[1], "%s: longer than %u bytes; expected a guest path",
				  what, DISKS_GUEST_MAX);
	memcpy(target, val_of[1]->str, val_of[1]->len);
	if (val_of[2]) {
		snprintf(what, sizeof what, "disks[%u].size", idx);
		if ((rc = config_text(x, val_of[2], what, "a size such as 8G")))
			return rc;
		char sz[40];
		snprintf(sz, sizeof sz, "%.*s", (int)(val_of[2]->len < 39 ? val_of[2]->len : 39),
			 val_of[2]->str);
		if (val_of[2]->len >= 39 || disks_parse_size(sz, &size, e, sizeof e) < 0) {
			config_show_node(show, val_of[2]);
			return config_err(x, val_of[2], "%s: '%s' is not a size from 64M to 1T; "
						     "expected a size such as 8G or 512M", what, show);
		}
	}
	if (val_of[3]) {
		snprintf(what, sizeof what, "disks[%u].readonly", idx);
		if ((rc = config_bool(x, val_of[3], what, &ro)))
			return rc;
	}
	if (disks_add(ds, name, target, size, ro == 1, e, sizeof e) < 0)
		return config_err(x, v, "disks[%u]: %s", idx, e);
	return 0;
}

/* disks: a list of "NAME:GUEST_PATH[:size=SIZE][:ro]" strings (the --disk
 * syntax) or mappings with name, target, size and readonly. */
static int config_disks(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	char what[32], e[400];
	int rc = 0;
	struct config_disk *d = config_seq(x, v, "disks",
					   "\"NAME:GUEST_PATH[:size=SIZE][:ro]\" or of mappings with "
					   "name and target", DISKS_MAX, "disks", sizeof *d, &rc);
	if (!d)
		return rc;
	struct disks *ds = calloc(1, sizeof *ds);
	if (!ds)
		rc = config_nomem(x);
	for (size_t i = 0; i < v->n && !rc; i++) {
		const struct yamltree_node *k = v->kids[i];
		snprintf(what, sizeof what, "disks[%zu]", i);
		if (k->kind == YAMLTREE_MAP) {
			rc = config_disk_map(x, k, (unsigned)i, ds);
		} else if (!(rc = config_text(x, k, what, "\"NAME:GUEST_PATH[:size=SIZE][:ro]\" or a "
							 "mapping with name and target"))) {
			if (memchr(k->str, '\0', k->len) || k->len > 400)
				rc = config_err(x, k, "%s: too long; expected NAME:GUEST_PATH", what);
			else if (disks_parse(ds, k->str, e, sizeof e) < 0)
				rc = config_err(x, k, "%s: %s", what, e);
		}
		if (rc)
			break;
		const struct disk *n = &ds->d[ds->n - 1];
		d[i] = (struct config_disk){ .name = strdup(n->name), .target = strdup(n->guest),
					     .size = n->size_set ? n->size : 0,
					     .readonly = n->readonly, .line = k->line, .col = k->col };
		if (!d[i].name || !d[i].target)
			rc = config_nomem(x);
	}
	free(ds);
	if (rc) {
		config_free_disks(d, (unsigned)v->n);
		return rc;
	}
	config_free_disks(c->disks, c->n_disks);
	c->disks = d;
	c->n_disks = (unsigned)v->n;
	return 0;
}

/* ---- image, workdir, env ----------------------------------------------- */

/* "./rootfs", "/srv/rootfs", "rootfs/" or ".rootfs": a directory, joined to
 * the file's directory like every path; other words are image names or id
 * prefixes, kept as written for the store (image_resolve's rule). */
static int config_image(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	static const char expected[] =
		"a rootfs directory such as ./rootfs, or an image name";
	int rc = config_text(x, v, "image", expected);
	if (rc)
		return rc;
	if (v->len == 0)
		return config_err(x, v, "image: empty value; expected %s", expected);
	if (memchr(v->str, '/', v->len) || v->str[0] == '.')
		return config_path(x, v, "image", expected, &c->image);
	for (size_t i = 0; i < v->len; i++) {
		char ch = v->str[i];
		if (!isalnum((unsigned char)ch) && !strchr("._-:@+", ch)) {
			char show[YAMLTREE_SHOW_BUF];
			config_show_node(show, v);
			return config_err(x, v, "image: '%s' is not an image name; expected letters, "
					     "digits and . _ - : @ +, or a directory written "
					     "with a '/' (./%s)", show, show);
		}
	}
	return (c->image = config_strdup(v->str, v->len)) ? 0 : config_nomem(x);
}

/* An absolute guest path without "." or ".." components: the agent starts
 * there, so it must mean one place. */
static int config_guest_path(struct config_ctx *x, const struct yamltree_node *v, const char *what,
			     char **out)
{
	static const char expected[] = "an absolute guest path such as /workspace";
	char show[YAMLTREE_SHOW_BUF];
	int rc = config_text(x, v, what, expected);
	if (rc)
		return rc;
	config_show_node(show, v);
	if (v->str[0] != '/')
		return config_err(x, v, "%s: '%s' is not absolute; expected %s", what, show,
				  expected);
	if (v->len >= PATH_MAX)
		return config_err(x, v, "%s: longer than %d bytes; expected %s", what, PATH_MAX - 1,
				  expected);
	for (const char *p = v->str; *p;) {
		while (*p == '/')
			p++;
		size_t n = strcspn(p, "/");
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return config_err(x, v, "%s: '%s' has a '.' or '..' component; expected %s",
					  what, show, expected);
		p += n;
	}
	return (*out = config_strdup(v->str, v->len)) ? 0 : config_nomem(x);
}

static int config_workdir(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	return config_guest_path(x, v, "workdir", &c->workdir);
}

/* Environment names as shells accept them. */
static bool config_env_name_ok(const char *s, size_t len)
{
	if (len == 0 || isdigit((unsigned char)s[0]))
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_')
			return false;
	return true;
}

/* Appends "NAME=VALUE" to c->env unless NAME is already there. */
static int config_env_add(struct config_ctx *x, const struct yamltree_node *at, struct kbox_config *c,
			  const char *name, size_t nlen, const char *val, size_t vlen)
{
	char show[YAMLTREE_SHOW_BUF];
	if (at->raw)
		config_show_node(show, at);
	else
		yamltree_show(show, sizeof show, name, nlen, YAMLTREE_SHOW_MAX);
	if (!config_env_name_ok(name, nlen))
		return config_err(x, at, "env: '%s' is not a variable name; expected letters, "
				      "digits and '_', not starting with a digit", show);
	for (size_t i = 0; i < c->n_env; i++)
		if (strncmp(c->env[i], name, nlen) == 0 && c->env[i][nlen] == '=')
			return config_err(x, at, "env: %s is set twice; expected each name once",
					  show);
	if (c->n_env >= CONFIG_ENV_MAX)
		return config_err(x, at, "env: more than %u variables; expected at most %u",
				  CONFIG_ENV_MAX, CONFIG_ENV_MAX);
	char *e = malloc(nlen + 1 + vlen + 1);
	if (!e)
		return config_nomem(x);
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
static int config_env(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	char got[YAMLTREE_SHOW_BUF + 2];
	if (v->kind == YAMLTREE_SCALAR && !yamltree_is_null(v))
		return config_err(x, v, "env: got %s; expected a mapping NAME: VALUE or a list of "
				     "\"NAME=VALUE\"", config_got(v, got, sizeof got));
	size_t n = v->kind == YAMLTREE_MAP ? v->n / 2 : v->n;
	c->env = calloc(n ? n : 1, sizeof *c->env);
	if (!c->env)
		return config_nomem(x);
	for (size_t i = 0; i < v->n; i++) {
		const struct yamltree_node *k = v->kids[i];
		char what[YAMLTREE_SHOW_BUF + 8];
		int rc;
		if (v->kind == YAMLTREE_MAP) {
			const struct yamltree_node *val = v->kids[++i];
			rc = config_text(x, k, "env", "a variable name");
			config_show_node(got, k);
			snprintf(what, sizeof what, "env.%s", got);
			if (!rc)
				rc = config_text(x, val, what, "a value (write \"\" for an empty one)");
			if (!rc)
				rc = config_env_add(x, k, c, k->str, k->len, val->str, val->len);
		} else {
			snprintf(what, sizeof what, "env[%zu]", i);
			rc = config_text(x, k, what, "\"NAME=VALUE\"");
			const char *eq = rc ? NULL : memchr(k->str, '=', k->len);
			if (!rc && !eq) {
				config_show_node(got, k);
				rc = config_err(x, k, "%s: '%s' has no '='; expected \"NAME=VALUE\"",
						what, got);
			}
			if (!rc)
				rc = config_env_add(x, k, c, k->str, (size_t)(eq - k->str), eq + 1,
						    k->len - (size_t)(eq - k->str) - 1);
		}
		if (rc)
			return rc;
	}
	return 0;
}

static int config_secrets(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c)
{
	return config_path(x, v, "secrets", "a path to a secrets.yaml file", &c->secrets);
}

/* The top-level keys.  A new section adds its row here and its fields to
 * struct kbox_config, config_free and config_move. */
static const struct config_section {
	const char *key;
	int (*parse)(struct config_ctx *x, const struct yamltree_node *val, struct kbox_config *c);
} config_sections[] = {
	{ "cpus", config_cpus },
	{ "memory", config_memory },
	{ "kernel", config_kernel },
	{ "initrd", config_initrd },
	{ "command", config_command },
	{ "verbose", config_verbose },
	{ "mounts", config_mounts },
	{ "disks", config_disks },
	{ "image", config_image },
	{ "workdir", config_workdir },
	{ "env", config_env },
	{ "network", config_network },
	{ "ports", config_ports },
	{ "tls", config_tls },
	{ "secrets", config_secrets },
};

/* "cpus, memory, …": every top-level key, for messages. */
static const char *config_supported_keys(char *list, size_t size)
{
	size_t o = 0;
	list[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(config_sections); i++)
		if (o < size)
			o += (size_t)snprintf(list + o, size - o, "%s%s", o ? ", " : "",
					      config_sections[i].key);
	return list;
}

static int config_unknown_key(struct config_ctx *x, const struct yamltree_node *k)
{
	char show[YAMLTREE_SHOW_BUF];
	const char *near = NULL;
	unsigned best = UINT_MAX;
	config_show_node(show, k);
	for (size_t i = 0; i < ARRAY_SIZE(config_sections); i++) {
		unsigned d = config_distance(k->str, k->len, config_sections[i].key);
		/* One slip in a short word, two in a longer one. */
		unsigned allowed = strlen(config_sections[i].key) <= 4 ? 1 : 2;
		if (d <= allowed && d < best) {
			best = d;
			near = config_sections[i].key;
		}
	}
	if (near)
		return config_err(x, k, "unknown key '%s'; did you mean '%s'?", show, near);
	char list[256];
	return config_err(x, k, "unknown key '%s'; expected one of: %s", show,
			  config_supported_keys(list, sizeof list));
}

static int config_top(struct config_ctx *x, const struct yamltree_node *root, struct kbox_config *c)
{
	unsigned seen[ARRAY_SIZE(config_sections)] = { 0 };
	char show[YAMLTREE_SHOW_BUF];

	if (!root || yamltree_is_null(root))
		return 0; /* an empty file sets nothing */
	if (root->kind != YAMLTREE_MAP)
		return config_err(x, root, "the top level is %s; expected a mapping of keys such as "
					"'cpus: 2'",
				  root->kind == YAMLTREE_SEQ ? "a list" : "a single value");
	for (size_t i = 0; i + 1 < root->n; i += 2) {
		const struct yamltree_node *k = root->kids[i], *v = root->kids[i + 1];
		if (k->kind != YAMLTREE_SCALAR)
			return config_err(x, k, "a key is %s; expected a key name such as 'cpus'",
					  yamltree_kind_name(k));
		size_t s = 0;
		while (s < ARRAY_SIZE(config_sections) &&
		       (strlen(config_sections[s].key) != k->len ||
			memcmp(config_sections[s].key, k->str, k->len) != 0))
			s++;
		if (s == ARRAY_SIZE(config_sections))
			return config_unknown_key(x, k);
		config_show_node(show, k);
		if (seen[s])
			return config_err(x, k, "duplicate key '%s' (first at line %u); expected each "
					     "key once",
					  show, seen[s]);
		seen[s] = k->line;
		int rc = config_sections[s].parse(x, v, c);
		if (rc)
			return rc;
	}
	return 0;
}

#define CONFIG_MOVE_PTR(dst, src, f)          \
	do {                               \
		if ((src)->f) {            \
			free((dst)->f);    \
			(dst)->f = (src)->f; \
			(src)->f = NULL;   \
		}                          \
	} while (0)
#define CONFIG_MOVE_LIST(dst, src, f, n)  \
	do {                           \
		(dst)->f = (src)->f;   \
		(dst)->n = (src)->n;   \
		(src)->f = NULL;       \
		(src)->n = 0;          \
	} while (0)
#define CONFIG_MOVE_STRS(dst, src, f, n)                  \
	do {                                           \
		if ((src)->f) {                        \
			config_free_strs((dst)->f, (dst)->n); \
			CONFIG_MOVE_LIST(dst, src, f, n); \
		}                                      \
	} while (0)

/* Moves every field src has set into dst, freeing what dst held there. */
static void config_move(struct kbox_config *dst, struct kbox_config *src)
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
		config_free_argv(dst->argv);
		dst->argv = src->argv;
		src->argv = NULL;
	}
	if (src->verbose >= 0)
		dst->verbose = src->verbose;
	if (src->mounts) {
		config_free_mounts(dst->mounts, dst->n_mounts);
		dst->mounts = src->mounts;
		dst->n_mounts = src->n_mounts;
		src->mounts = NULL;
		src->n_mounts = 0;
	}
	if (src->disks) {
		config_free_disks(dst->disks, dst->n_disks);
		CONFIG_MOVE_LIST(dst, src, disks, n_disks);
	}
	CONFIG_MOVE_PTR(dst, src, image);
	CONFIG_MOVE_PTR(dst, src, workdir);
	if (src->env) {
		config_free_strv(dst->env, dst->n_env);
		CONFIG_MOVE_LIST(dst, src, env, n_env);
	}
	CONFIG_MOVE_PTR(dst, src, network_policy);
	CONFIG_MOVE_STRS(dst, src, allow, n_allow);
	CONFIG_MOVE_STRS(dst, src, deny, n_deny);
	CONFIG_MOVE_STRS(dst, src, hosts, n_hosts);
	CONFIG_MOVE_STRS(dst, src, ports, n_ports);
	CONFIG_MOVE_PTR(dst, src, audit_log);
	CONFIG_MOVE_STRS(dst, src, dns, n_dns);
	if (src->dns_rate)
		dst->dns_rate = src->dns_rate;
	CONFIG_MOVE_PTR(dst, src, tls_intercept);
	CONFIG_MOVE_STRS(dst, src, tls_bypass, n_tls_bypass);
	CONFIG_MOVE_PTR(dst, src, tls_extra_ca);
	CONFIG_MOVE_PTR(dst, src, secrets);
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
static int config_protect_one(struct mount *m, char *const *names, size_t nnames, char ***out)
{
	*out = NULL;
	if (nnames == 0)
		return 0;
	const char *const *base = m->hidden.set ? m->hidden.list : FS_PASSTHROUGH_DEFAULT_HIDDEN;
	size_t nbase = 0;
	if (m->hidden.set)
		nbase = m->hidden.n;
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
		if (!(l[n++] = config_strdup(base[i], strlen(base[i]))))
			rc = -ENOMEM;
	if (rc) {
		config_free_argv(l);
		return rc;
	}
	*out = l;
	m->hidden.list = (const char *const *)l;
	m->hidden.n = n;
	m->hidden.set = true;
	return 0;
}

_Static_assert(MOUNTS_MAX <= HOSTFILES_MAX_ROOTS, "a bit per mount in hostfiles_walk");

/* Add name to a mount's list of names to hide, once. */
static int config_add_name(char ***names, size_t *n, const char *name)
{
	for (size_t i = 0; i < *n; i++)
		if (!strcmp((*names)[i], name))
			return 0;
	char **g = realloc(*names, (*n + 1) * sizeof *g);
	if (!g)
		return -ENOMEM;
	*names = g;
	if (!(g[*n] = config_strdup(name, strlen(name))))
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* Where one protected file lies against the mounts: its names join the
 * lists of the user mounts its path passes through.  A file with more
 * than one name, or inside the image root (which hides nothing), cannot
 * be kept from the guest: -EPERM with err set. */
static int config_protect_file(const struct config_hostfile *f, const struct mounts *ms,
			       const struct hostfiles_root *roots, char ***names, size_t *nnames, char *err,
			       size_t errlen)
{
	struct hostfiles_walk w;
	if (!f->path || hostfiles_walk(f->path, roots, ms->n, &w) < 0)
		return 0; /* kbox cannot open it either, and says so there */
	/* Another name may lie anywhere, in a share or in a folder mounted
	 * inside one, and finding it would mean searching every share: the
	 * only answer that holds is to refuse. */
	if (ms->n && w.exists && S_ISREG(w.st.st_mode) && w.st.st_nlink > 1)
		return errbuf_fail(err, errlen, -EPERM,
			       "%s %s has %lu names (hard links): the guest could reach it "
			       "through one kbox cannot hide; give it a file of its own (copy it "
			       "and remove the other names)",
			       f->what, f->path, (unsigned long)w.st.st_nlink);
	for (unsigned i = 0; i < ms->n; i++) {
		if (!(w.crossed & (1u << i)))
			continue;
		if (ms->m[i].root)
			return errbuf_fail(err, errlen, -EPERM,
				       "%s %s is inside the image's root folder %s, which the "
				       "guest sees whole: keep it outside",
				       f->what, f->path, ms->m[i].host);
		for (size_t k = 0; k < w.n_names; k++)
			if (config_add_name(&names[i], &nnames[i], w.names[k]) < 0)
				return errbuf_fail(err, errlen, -ENOMEM, "out of memory");
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
		{ conf && !secenv_path(senv, sizeof senv, conf) ? senv : NULL,
		  "the config's secrets.env" },
		{ c->secrets, "the secrets file" },
		{ c->secrets && !secenv_path(ssenv, sizeof ssenv, c->secrets) ? ssenv : NULL,
		  "the secrets file's secrets.env" },
		{ c->audit_log, "the audit log" },
		{ c->tls_extra_ca, "the extra CA file (tls.extra_ca)" },
	};
	struct hostfiles_root roots[MOUNTS_MAX];
	char **names[MOUNTS_MAX] = { 0 };
	size_t nnames[MOUNTS_MAX] = { 0 };
	int rc = 0;
	for (unsigned i = 0; i < ms->n; i++)
		if (hostfiles_root_of(ms->m[i].host, &roots[i]) < 0)
			roots[i] = (struct hostfiles_root){ 0, 0 }; /* mounts_attach reports it */
	for (size_t i = 0; !rc && i < ARRAY_SIZE(own) + n_extra; i++)
		rc = config_protect_file(i < ARRAY_SIZE(own) ? &own[i] : &extra[i - ARRAY_SIZE(own)], ms,
					 roots, names, nnames, err, errlen);
	char ***lists = rc ? NULL : realloc(c->protect, (c->n_protect + ms->n + 1) * sizeof *lists);
	if (!rc && !lists)
		rc = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
	else if (!rc)
		c->protect = lists;
	for (unsigned i = 0; !rc && i < ms->n; i++) {
		char **l;
		if (ms->m[i].root)
			continue;
		rc = config_protect_one(&ms->m[i], names[i], nnames[i], &l);
		if (!rc && l)
			c->protect[c->n_protect++] = l;
		else if (rc)
			errbuf_say(err, errlen, "out of memory");
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
	config_free_argv(c->argv);
	config_free_mounts(c->mounts, c->n_mounts);
	config_free_disks(c->disks, c->n_disks);
	free(c->image);
	free(c->workdir);
	config_free_strv(c->env, c->n_env);
	free(c->network_policy);
	config_free_strs(c->allow, c->n_allow);
	config_free_strs(c->deny, c->n_deny);
	config_free_strs(c->hosts, c->n_hosts);
	config_free_strs(c->ports, c->n_ports);
	free(c->audit_log);
	config_free_strs(c->dns, c->n_dns);
	free(c->tls_intercept);
	config_free_strs(c->tls_bypass, c->n_tls_bypass);
	free(c->tls_extra_ca);
	free(c->secrets);
	for (size_t i = 0; i < c->n_protect; i++)
		config_free_argv(c->protect[i]);
	free(c->protect);
	config_init(c);
}

int config_load_buf(const char *name, const char *buf, size_t len, struct kbox_config *c,
		    char *err, size_t errlen)
{
	struct config_ctx x = { .err = err, .errlen = errlen };
	struct yamltree_node *root = NULL;
	struct kbox_config tmp;

	if (err && errlen)
		err[0] = '\0';
	yamltree_show(x.name, sizeof x.name, name, strlen(name), YAMLTREE_NAME_MAX);
	if (len > CONFIG_MAX_BYTES) {
		config_file_err(name, err, errlen,
				"file is larger than %u bytes; expected a smaller config",
				CONFIG_MAX_BYTES);
		return -EFBIG;
	}
	const char *slash = strrchr(name, '/');
	x.dir = name;
	x.dirlen = slash ? (size_t)(slash - name) + 1 : 0;

	int rc = secenv_init(&x.env, name) ? config_nomem(&x)
					  : yamltree_parse(buf, len, &config_rules, x.name, err, errlen, &root);
	config_init(&tmp);
	if (!rc)
		rc = config_expand(&x, root);
	if (!rc)
		rc = config_top(&x, root, &tmp);
	yamltree_free(root);
	secenv_free(&x.env);
	if (!rc)
		config_move(c, &tmp);
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
	int rc = yamltree_slurp(path, CONFIG_MAX_BYTES, &buf, &len, &stage);
	if (rc == -EISDIR || (rc == -EINVAL && !strcmp(stage, "stat")))
		config_file_err(path, err, errlen, "%s; expected a regular YAML file",
				rc == -EISDIR ? "is a directory" : "is not a regular file");
	else if (rc == -EFBIG)
		config_file_err(path, err, errlen,
				"file is larger than %u bytes; expected a smaller config",
				CONFIG_MAX_BYTES);
	else if (rc == -ENOMEM)
		config_file_err(path, err, errlen, "out of memory; free some memory and retry");
	else if (rc)
		config_file_err(path, err, errlen, "cannot %s: %s; expected a readable config file",
				stage, strerror(-rc));
	if (rc)
		return rc;
	rc = config_load_buf(path, buf, len, c, err, errlen);
	free(buf);
	return rc;
}
