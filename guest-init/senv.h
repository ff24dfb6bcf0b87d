/* The sandbox-wide environment and kbox's CA, handed to guest-init by
 * kbox in the run configuration (proto/runcfg.h, docs/run-config.md):
 *   the environment: NAME=VALUE entries every command gets (secret
 *                 placeholders, the CA variables, the config's env); a
 *                 request's own variables override them by name;
 *   kbox's CA certificate, when TLS interception is possible;
 *   the sandbox's name, the guest's host name.
 * They are kept in guest-init's memory, which the agent inherits. */
#ifndef KBOX_GUEST_SENV_H
#define KBOX_GUEST_SENV_H

#include <stddef.h>

#define SENV_CA_DIR "/etc/kbox"
#define SENV_BUNDLE_DIR "/etc/ssl/certs"
#define SENV_BUNDLE SENV_BUNDLE_DIR "/ca-certificates.crt"

/* Keep copies of the environment (NUL-terminated entries; malformed ones
 * are skipped), the CA and the host name (each absent when its length
 * is 0).  Call once, in PID 1, before the agent starts. */
void senv_take(const char *env, size_t env_len, const char *ca, size_t ca_len, const char *host,
	       size_t host_len);

/* With a CA loaded: write it to /etc/kbox/ca.pem and append it to the
 * system bundle (created if the root has none).  Call once the final
 * root is in place.  0 or a negative errno. */
int senv_install_ca(void);

/* With a host name handed over (the sandbox's name): make
 * it the kernel's host name and add "127.0.1.1 NAME" to /etc/hosts (kept
 * otherwise; made with the localhost lines when missing), as container
 * runtimes do.  Call once the final root is in place.  0 or a negative
 * errno. */
int senv_set_hostname(void);

/* After a fork (kbox fork): the new sandbox's name becomes the host
 * name, and its "127.0.1.1 NAME" line in /etc/hosts replaces the old
 * name's.  0 or a negative errno. */
int senv_rename_host(const char *host, size_t host_len);

/* A NULL-terminated array: the base entries not overridden by name in
 * req[0..n), then req's; extra spare NULL slots at the end for the
 * caller.  The strings are borrowed; free only the array.  NULL on
 * ENOMEM. */
char **senv_merge(char *const *req, size_t n, size_t extra);

#endif
