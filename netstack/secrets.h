/* secrets.yaml: the credentials kbox substitutes into the guest's HTTPS
 * requests.  Each secret has a name, a real value (usually taken from the
 * host environment or an untracked secrets.env), the destinations that may
 * receive it and the parts of a request where it may be substituted.  The
 * guest only ever sees the placeholder "$KBOX_<NAME>".
 *
 * Real values are never written into an error message, and they are wiped
 * (explicit_bzero) before their memory is freed.  Hostile files are
 * bounded: size, nesting, node count, number of secrets and of list
 * entries; anchors, aliases and tags are refused. */
#ifndef KBOX_NETSTACK_SECRETS_H
#define KBOX_NETSTACK_SECRETS_H

#include <stdbool.h>
#include <stddef.h>

#define SECRETS_MAX_BYTES (256u * 1024) /* secrets.yaml size */
#define SECRETS_MAX_DEPTH 8u      /* YAML nesting */
#define SECRETS_MAX_NODES 16384u  /* YAML values in the file */
#define SECRETS_MAX 64u           /* secrets per file */
#define SECRETS_NAME_MAX 64u      /* bytes of a name, [A-Z_][A-Z0-9_]* */
#define SECRETS_VALUE_MAX 4096u   /* bytes of a real value, after expansion */
#define SECRETS_ALLOW_MAX 32u     /* entries in an allow list */
#define SECRETS_HOST_MAX 253u     /* bytes of an allow entry */
#define SECRETS_FIELDS_MAX 32u    /* entries in header_fields */
#define SECRETS_FIELD_MAX 64u     /* bytes of a header field name */

/* The placeholder is this prefix followed by the secret's name. */
#define SECRETS_PLACEHOLDER_PREFIX "$KBOX_"
#define SECRETS_PLACEHOLDER_PREFIX_LEN 6u

struct secret {
	char *name;        /* [A-Z_][A-Z0-9_]*, at most SECRETS_NAME_MAX bytes */
	char *placeholder; /* "$KBOX_<name>" */
	char *env;         /* "<name>=$KBOX_<name>", for the guest environment */
	char *value;       /* the real value: 1..SECRETS_VALUE_MAX bytes, no
			    * control characters, NUL-terminated */
	size_t value_len;
	char **allow;      /* lower case, no trailing dot; "*.suffix" or a host */
	size_t n_allow;    /* >= 1 */
	bool sub_headers, sub_query, sub_body;
	char **fields;     /* lower-case header names; none = every header */
	size_t n_fields;
};

struct secrets {
	struct secret *v;
	size_t n;
};

/* Load the secrets file at PATH into a new set (*out, free with
 * secrets_free).  ${VAR} in a value is taken from the process environment,
 * else from "secrets.env" in the same directory as PATH; "$$" is a literal
 * '$'.  0, or a negative errno with ERR (if non-NULL) holding one printable
 * line "FILE:LINE:COL: what is wrong; what was expected" (or "FILE: ..."
 * for the file as a whole).  No real value ever appears in ERR. */
int secrets_load(const char *path, struct secrets **out, char *err, size_t errlen);

/* As secrets_load, from a buffer; NAME is used in messages and its
 * directory locates secrets.env. */
int secrets_load_buf(const char *name, const char *buf, size_t len, struct secrets **out,
		     char *err, size_t errlen);

/* Re-read PATH and replace the value, allow list and substitution rules of
 * the secret called NAME (or of every secret when NAME is NULL).  The set of
 * names must stay the same (the guest's environment was built from it), and
 * the secret struct addresses stay valid; the old values are wiped.  On any
 * error nothing in SET changes and ERR says why.  Not safe to run while
 * another thread reads SET. */
int secrets_reload(struct secrets *set, const char *path, const char *name, char *err,
		   size_t errlen);

/* Wipe every value and free SET (NULL is fine). */
void secrets_free(struct secrets *set);

/* Number of secrets in SET (0 for NULL). */
size_t secrets_count(const struct secrets *set);

/* The I-th secret (I < secrets_count), or NULL. */
const struct secret *secrets_at(const struct secrets *set, size_t i);

/* The secret called NAME (exact bytes, LEN of them), or NULL. */
const struct secret *secrets_find(const struct secrets *set, const char *name, size_t len);

/* "$KBOX_<NAME>": the string the guest sees instead of the value. */
const char *secrets_placeholder(const struct secret *s);

/* Fill OUT with up to MAX pointers to "NAME=$KBOX_NAME" strings owned by
 * SET, for the guest's environment.  Returns the number of secrets (which
 * may exceed MAX; only MAX are written then). */
size_t secrets_env(const struct secrets *set, const char **out, size_t max);

/* True when HOST may receive S's value: an allow entry matches it by
 * policy_pattern_match (netstack/policy.h): equal to HOST, or "*.suffix" and
 * HOST a strict subdomain of suffix.  Case-insensitive; a trailing dot on
 * HOST is ignored. */
bool secrets_hosts_match(const struct secret *s, const char *host);

/* Write S's allow list as "a, b, c" into BUF (cut to fit, always
 * NUL-terminated); for messages. */
void secrets_describe_allow(const struct secret *s, char *buf, size_t len);

/* Write S's header field list as "a, b" or "all header fields" into BUF. */
void secrets_describe_fields(const struct secret *s, char *buf, size_t len);

#endif
