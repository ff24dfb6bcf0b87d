/* What the parts of the sandbox.yaml loader share, and nothing else
 * includes: config.c (the file, ${VAR}, the value helpers, the sections
 * from cpus to secrets, the top level, hiding kbox's own files) and
 * config_net.c (ports, network, tls and the key lookup with suggestions).
 * Every parser here returns 0 or a negative errno with the message, which
 * names the file, line and column, in x->err. */
#ifndef KBOX_VMM_CONFIG_PRIV_H
#define KBOX_VMM_CONFIG_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "lib/errbuf.h"
#include "lib/secenv.h"
#include "lib/yamltree.h"
#include "vmm/sandbox/config.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

struct config_ctx {
	char name[YAMLTREE_NAME_BUF]; /* printable form of the file name */
	const char *dir;        /* directory part of the name, with its '/' */
	size_t dirlen;          /* 0: relative paths stay as written */
	char *err;
	size_t errlen;
	size_t expanded;        /* bytes ${VAR} expansion has produced */
	struct senv env;        /* secrets.env, for ${VAR} */
};

/* The message "FILE:LINE:COL: ..." in x->err; returns -EINVAL. */
__attribute__((format(printf, 4, 5))) int config_err_at(struct config_ctx *x, unsigned line,
							unsigned col, const char *fmt, ...);

/* config_err_at at node's position. */
#define config_err(x, node, ...) config_err_at((x), (node)->line, (node)->col, __VA_ARGS__)

/* "out of memory" for the file in x->err; returns -ENOMEM. */
int config_nomem(struct config_ctx *x);

/* v's value as the user wrote it (before ${VAR}: what it brought in may
 * be a secret), cut to fit, into out (YAMLTREE_SHOW_BUF bytes). */
void config_show_node(char *out, const struct yamltree_node *v);

/* "'value'" for a scalar, else what kind of node v is, into buf (size
 * bytes), for "got ..."; returns buf. */
const char *config_got(const struct yamltree_node *v, char *buf, size_t size);

/* 0 if v is a non-null scalar without NUL bytes, else the error "WHAT:
 * got ...; expected EXPECTED". */
int config_text(struct config_ctx *x, const struct yamltree_node *v, const char *what, const char *expected);

/* A calloc'd array of v->n elements of size bytes (one at least) when v is
 * a list, else NULL with *rc the error "WHAT: got ...; expected a list of
 * EXPECTED", or "WHAT: more than MAX NOUN; expected at most MAX" at the
 * first entry too many, or -ENOMEM. */
void *config_seq(struct config_ctx *x, const struct yamltree_node *v, const char *what,
		 const char *expected, size_t max, const char *noun, size_t size, int *rc);

enum config_num { CONFIG_NUM_OK, CONFIG_NUM_BAD, CONFIG_NUM_RANGE };

/* The len bytes at s as an unsigned decimal without leading zeros (YAML
 * 1.1 would read those as octal) into *out, saturating past 64 bits;
 * CONFIG_NUM_RANGE for a minus sign, CONFIG_NUM_BAD for anything else. */
enum config_num config_decimal(const char *s, size_t len, uint64_t *out);

/* v as a whole number from lo to hi into *out, or the error naming
 * what. */
int config_uint(struct config_ctx *x, const struct yamltree_node *v, const char *what, uint64_t lo,
		uint64_t hi, uint64_t *out);

/* A malloc'd NUL-terminated copy of the len bytes at s, or NULL. */
char *config_strdup(const char *s, size_t len);

/* A path from the file into a malloc'd *out; a relative one is joined to
 * the file's directory, so the config means the same from any working
 * directory. */
int config_path(struct config_ctx *x, const struct yamltree_node *v, const char *what, const char *expected,
		char **out);

/* Free the n strings at s and s itself (NULL is fine). */
void config_free_strs(struct config_str *s, size_t n);

/* Edit distance with adjacent swaps between the la bytes at a and the
 * string b, ignoring case; UINT_MAX past 32 bytes (no key is that long). */
unsigned config_distance(const char *a, size_t la, const char *b);

/* The sections in config_net.c: `ports:`, `network:` and `tls:` into c. */
int config_ports(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c);
int config_network(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c);
int config_tls(struct config_ctx *x, const struct yamltree_node *v, struct kbox_config *c);

#endif
