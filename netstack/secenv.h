/* secrets.env: the untracked KEY=VALUE file next to sandbox.yaml or
 * secrets.yaml that ${VAR} falls back to when the host environment lacks a
 * variable.  One reader serves both files, so the same secrets.env means
 * the same thing to each.
 *
 * Lines: KEY=VALUE with nothing around '=', an optional "export ", a value
 * in '...' or "..." taken as is, or unquoted up to a '#' after a blank with
 * trailing blanks dropped; blank lines and # comments; a final "\r" is
 * dropped.  No control characters, no NUL byte, at most SENV_MAX_BYTES.
 * The last line that sets a name wins, as in a shell.  Every value may be
 * real: messages name positions and keys, never values, and the text is
 * wiped before it is freed. */
#ifndef KBOX_NETSTACK_SECENV_H
#define KBOX_NETSTACK_SECENV_H

#include <stdbool.h>
#include <stddef.h>

#include "netstack/yamltree.h"

#define SENV_MAX_BYTES (64u * 1024)

struct senv {
	char *path;             /* DIR/secrets.env; malloc'd */
	char name[YT_NAME_BUF]; /* its printable form, for messages */
	bool read;              /* looked for already (only once per load) */
	char *buf;              /* the file's text, split in place */
	size_t len;
	char **kv;              /* KEY, VALUE, KEY, VALUE... into buf */
	size_t n, cap;
};

/* Set E up for the secrets.env in the directory of FILE (the directory part
 * of the name as given, the current one when FILE has no '/').  Nothing is
 * read yet.  0 or -ENOMEM; senv_free E either way. */
int senv_init(struct senv *e, const char *file);

/* The value of VAR (NUL-terminated): the process environment first, then
 * secrets.env, which is read on the first call that needs it.  *val is
 * NULL (rc 0) when neither has VAR; a missing file is no error.  Otherwise
 * 0, -ENOMEM (ERR untouched), or the read's negative errno / -EINVAL with
 * ERR (ERRLEN bytes) saying "PATH[:LINE:COL]: what is wrong; what was
 * expected".  *val stays valid until senv_free. */
int senv_lookup(struct senv *e, const char *var, const char **val, char *err, size_t errlen);

/* The characters of a variable name, [A-Za-z_][A-Za-z0-9_]*, as in
 * secrets.env and in ${NAME}: the first, then any other. */
bool senv_var_start(char c);
bool senv_var_char(char c);

/* Wipe and free what E holds (safe on a zeroed or failed E, and twice). */
void senv_free(struct senv *e);

#endif
