/* secrets.env: the untracked KEY=VALUE file next to sandbox.yaml or
 * secrets.yaml that ${VAR} falls back to when the host environment lacks a
 * variable.  One reader serves both files, so the same secrets.env means
 * the same thing to each.
 *
 * Lines: KEY=VALUE with nothing around '=', an optional "export ", a value
 * in '...' or "..." taken as is, or unquoted up to a '#' after a blank with
 * trailing blanks dropped; blank lines and # comments; a final "\r" is
 * dropped.  No control characters, no NUL byte, at most SECENV_MAX_BYTES.
 * The last line that sets a name wins, as in a shell.  Every value may be
 * real: messages name positions and keys, never values, and the text is
 * wiped before it is freed. */
#ifndef KBOX_LIB_SECENV_H
#define KBOX_LIB_SECENV_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/yamltree.h"

#define SECENV_MAX_BYTES (64u * 1024)

struct senv {
	char *path;             /* DIR/secrets.env; malloc'd */
	char name[YAMLTREE_NAME_BUF]; /* its printable form, for messages */
	bool read;              /* looked for already (only once per load) */
	char *buf;              /* the file's text, split in place */
	size_t len;
	char **kv;              /* KEY, VALUE, KEY, VALUE... into buf */
	size_t n, cap;
};

/* Writes into OUT (OUTLEN bytes) the name of the secrets.env that belongs
 * to FILE: the directory part of the name as given (none when FILE has no
 * '/') followed by "secrets.env".  0, or -ENAMETOOLONG with OUT empty. */
int secenv_path(char *out, size_t outlen, const char *file);

/* Set E up for the secrets.env of FILE (secenv_path).  Nothing is read yet.
 * 0 or -ENOMEM; secenv_free E either way. */
int secenv_init(struct senv *e, const char *file);

/* The value of VAR (NUL-terminated): the process environment first, then
 * secrets.env, which is read on the first call that needs it.  *val is
 * NULL (rc 0) when neither has VAR; a missing file is no error.  Otherwise
 * 0, -ENOMEM (ERR untouched), or the read's negative errno / -EINVAL with
 * ERR (ERRLEN bytes) saying "PATH[:LINE:COL]: what is wrong; what was
 * expected".  *val stays valid until secenv_free. */
int secenv_lookup(struct senv *e, const char *var, const char **val, char *err, size_t errlen);

/* The characters of a variable name, [A-Za-z_][A-Za-z0-9_]*, as in
 * secrets.env and in ${NAME}: the first, then any other. */
bool secenv_var_start(char c);
bool secenv_var_char(char c);

/* The longest name ${NAME} can look up. */
#define SECENV_NAME_MAX 255u

/* What secenv_expand found wrong.  The caller words the message: one about
 * sandbox.yaml may quote the name as written, one about secrets.yaml says
 * only where, since everything in that file may be a secret. */
enum secenv_fault {
	SECENV_UNTERMINATED = 1, /* "${" with no '}' after it */
	SECENV_BAD_NAME,         /* ${...} holds no [A-Za-z_][A-Za-z0-9_]* */
	SECENV_LONG_NAME,        /* a good name longer than the caller allows */
	SECENV_UNSET,            /* neither the environment nor secrets.env has it */
	SECENV_TOO_BIG,          /* the result would pass the caller's limit */
};

struct secenv_result {
	char *str;             /* success: the expansion, malloc'd, NUL-ended */
	size_t len;
	enum secenv_fault fault; /* on a fault: what is wrong, */
	size_t at;             /* at which byte of the value (0-based), */
	const char *name;      /* and the text between "${" and '}' (a pointer */
	size_t name_len;       /* into the value; none for SECENV_UNTERMINATED) */
};

/* Expands VAL (LEN bytes): ${NAME} becomes NAME's value (secenv_lookup), "$$"
 * becomes '$', and any other '$' is itself, so $HOME or a token holding '$'
 * passes through.  What a variable brings in is never expanded again.  A
 * name longer than MAX_NAME (at most SECENV_NAME_MAX) is not looked up; the
 * result may hold at most MAX_OUT bytes.  0 with R->str (R->len bytes, for
 * the caller to free); on a fault in the value, -EINVAL with R->fault set
 * and ERR untouched; otherwise R->fault is 0 and the error is -ENOMEM (ERR
 * untouched) or secenv_lookup's, with ERR set.  Every byte built on the way
 * that is not handed back is wiped before it is freed. */
int secenv_expand(struct senv *e, const char *val, size_t len, size_t max_name, size_t max_out,
		struct secenv_result *r, char *err, size_t errlen);

/* Wipe and free what E holds (safe on a zeroed or failed E, and twice). */
void secenv_free(struct senv *e);

#endif
