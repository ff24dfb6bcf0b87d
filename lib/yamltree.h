/* The YAML reading that sandbox.yaml (vmm/sandbox/config.c) and secrets.yaml
 * (netstack/secrets.c) share: libyaml's events become a small tree, bounded
 * in nesting and node count, with anchors, aliases, tags and a second
 * document refused as they arrive; plus the pieces of their messages
 * ("FILE:LINE:COL: what is wrong; what was expected", values shown as safe
 * printable text) and the bounded read of a file.  Both files are hostile
 * input: nothing here trusts a byte of them. */
#ifndef KBOX_LIB_YAMLTREE_H
#define KBOX_LIB_YAMLTREE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Bytes of a user's value a message shows; the rest becomes "...". */
#define YAMLTREE_SHOW_MAX 40
#define YAMLTREE_SHOW_BUF (4 * YAMLTREE_SHOW_MAX + 4)
/* Bytes of a file name a message shows. */
#define YAMLTREE_NAME_MAX 256
#define YAMLTREE_NAME_BUF (4 * YAMLTREE_NAME_MAX + 4)
/* The deepest nesting any caller may allow. */
#define YAMLTREE_DEPTH_MAX 16u

enum yamltree_kind { YAMLTREE_SCALAR, YAMLTREE_SEQ, YAMLTREE_MAP };

struct yamltree_node {
	enum yamltree_kind kind;
	unsigned line, col; /* 1-based */
	bool plain;         /* scalar written without quotes */
	char *str;          /* scalar text, NUL-terminated; may hold NULs */
	size_t len;
	char *raw;          /* the text as written, kept by a caller whose
			     * ${VAR} expansion replaced str; NULL otherwise */
	size_t rawlen;
	struct yamltree_node **kids; /* seq: items; map: key, value, key, value... */
	size_t n, cap;
};

/* What one kind of file allows, and how its messages read. */
struct yamltree_rules {
	unsigned max_depth;  /* nesting of lists and mappings, <= YAMLTREE_DEPTH_MAX */
	unsigned max_nodes;  /* values in the whole file */
	const char *smaller; /* what "expected a smaller ..." names */
	/* The file may hold real secret values: a message quotes neither an
	 * alias's name ("value: *token" reads as an alias) nor the character
	 * libyaml's reader refused. */
	bool secret;
};

/* Copy LEN bytes of S into OUT (OUTLEN bytes, NUL-terminated) as printable
 * ASCII, other bytes and '\\' as \xNN, so a message stays one safe line;
 * input beyond MAX bytes becomes "...". */
void yamltree_show(char *out, size_t outlen, const char *s, size_t len, size_t max);

/* Write "NAME:LINE:COL: " (or "NAME: " when LINE is 0) and the formatted
 * text into ERR (ERRLEN bytes; nothing when ERR is NULL or ERRLEN 0).  NAME
 * is already printable.  Returns -EINVAL, so a caller can return it. */
__attribute__((format(printf, 6, 7))) int yamltree_err(char *err, size_t errlen, const char *name,
						 unsigned line, unsigned col, const char *fmt, ...);

/* As yamltree_err, with the arguments in AP. */
__attribute__((format(printf, 6, 0))) int yamltree_verr(char *err, size_t errlen, const char *name,
						  unsigned line, unsigned col, const char *fmt,
						  va_list ap);

/* The message for a load that ran out of memory, naming NAME.  Returns
 * -ENOMEM. */
int yamltree_nomem(char *err, size_t errlen, const char *name);

/* Parse the LEN bytes at BUF (UTF-8, need not be NUL-terminated) into a
 * tree under RULES: *root is the one document's root, or NULL for an empty
 * file.  0, -ENOMEM or -EINVAL, with a message naming NAME (printable) and
 * the position in ERR.  Free the tree with yamltree_free. */
int yamltree_parse(const char *buf, size_t len, const struct yamltree_rules *rules, const char *name,
	     char *err, size_t errlen, struct yamltree_node **root);

/* Free a tree from yamltree_parse (NULL is fine).  Every scalar (and raw text)
 * is wiped first: a value may be a secret. */
void yamltree_free(struct yamltree_node *n);

/* True for YAML's spellings of null ("", "~", "null", "Null", "NULL"),
 * which count only when written unquoted. */
bool yamltree_is_null(const struct yamltree_node *v);

/* What V is, for "got ..." messages: "a list", "a mapping" or, for a
 * scalar, "an empty value" (callers ask about scalars only when null). */
const char *yamltree_kind_name(const struct yamltree_node *v);

/* Read the regular file at PATH, at most MAX bytes, into a malloc'd
 * NUL-terminated *buf of *len bytes (the block is MAX + 2 bytes long; wipe
 * *len + 1 of them if they matter).  0 or a negative errno: the
 * open/stat/read errno (*stage says "open", "stat" or "read"), -EISDIR,
 * -EINVAL for another kind of file (stage "stat"), -EFBIG or -ENOMEM.  A
 * FIFO in the file's place is refused, never waited on. */
int yamltree_slurp(const char *path, size_t max, char **buf, size_t *len, const char **stage);

#endif
