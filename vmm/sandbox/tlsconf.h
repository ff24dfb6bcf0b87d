/* TLS interception and secrets for `kbox run` (docs/secrets.md,
 * docs/tls-interception.md): the options (--secret-conf, --tls-extra-ca,
 * --tls-bypass, --tls-intercept and their sandbox.yaml keys), and what
 * they load before the guest starts: the secrets, the kbox CA, the
 * upstream trust anchors.  The result is the stack's intercept_config, the
 * placeholders for the guest's environment and the CA for its trust
 * store. */
#ifndef KBOX_VMM_TLSCONF_H
#define KBOX_VMM_TLSCONF_H

#include <stdbool.h>
#include <stddef.h>

#include "netstack/intercept.h"
#include "netstack/secrets.h"

/* Variables that point the guest's TLS clients at the bundle with kbox's
 * CA in it (or at the CA alone where a tool adds it to its own roots). */
#define TLSCONF_GUEST_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define TLSCONF_GUEST_CA "/etc/kbox/ca.pem"

struct tlsconf {
	const char *secrets_path; /* NULL: no secrets */
	const char *extra_ca;     /* NULL: the host bundle only */
	const char *ca_dir;       /* NULL: tls_cert_ca_default_dir */
	size_t n_bypass;
	int scope; /* -1 unset, else enum intercept_scope */
	/* Loaded by tlsconf_load: */
	struct secrets *secrets;
	struct tls_cert_ca *ca;
	struct tls_trust *trust;
	struct intercept_config icpt;
	char bypass_norm[INTERCEPT_BYPASS_MAX][256];
	const char *bypass_ptr[INTERCEPT_BYPASS_MAX];
	char secrets_env[4096]; /* secrets.env next to the secrets file */
	bool stack_running;     /* set once lwIP runs: reloads take its lock */
};

/* Nothing set.  Never fails. */
void tlsconf_init(struct tlsconf *t);

/* --tls-intercept WORD ("all" or "secrets"): 0 or -EINVAL with err. */
int tlsconf_set_scope(struct tlsconf *t, const char *word, char *err, size_t errlen);

/* --tls-bypass HOST ("host" or "*.suffix"; borrowed): 0, -EINVAL or
 * -ENOSPC with err. */
int tlsconf_add_bypass(struct tlsconf *t, const char *host, char *err, size_t errlen);

/* Whether interception is configured at all: secrets, or scope "all". */
bool tlsconf_active(const struct tlsconf *t);

/* Load the secrets, the CA (created on first use in ca_dir, else in
 * tls_cert_ca_default_dir) and the trust anchors (the host bundle plus extra_ca), when active.
 * 0, or a negative errno with one line in err (never a secret value). */
int tlsconf_load(struct tlsconf *t, char *err, size_t errlen);

/* After a successful load: the stack's configuration, or NULL when not
 * active. */
const struct intercept_config *tlsconf_icpt(const struct tlsconf *t);

/* After load: up to max "NAME=VALUE" strings (owned by t) for the guest's
 * environment: the secret placeholders and the CA variables.  Returns
 * how many were written. */
size_t tlsconf_guest_env(const struct tlsconf *t, const char **out, size_t max);

/* After load: the CA certificate in PEM, or NULL when not active. */
const char *tlsconf_ca_pem(const struct tlsconf *t);

/* Re-read every secret's value from the secrets file (and secrets.env),
 * for SIGHUP and `kbox secrets reload`: nothing changes on error.  Takes
 * the network stack's lock when stack_running, so no connection sees a
 * half-changed set.  0 or a negative errno with err set (never a
 * value). */
int tlsconf_reload(struct tlsconf *t, char *err, size_t errlen);

/* The files a reload reads, for the lock-down's read rules: up to max
 * paths (owned by t).  Returns how many. */
size_t tlsconf_read_files(const struct tlsconf *t, const char **out, size_t max);

/* Free what load made. */
void tlsconf_free(struct tlsconf *t);

#endif
