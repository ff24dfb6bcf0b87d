/* Files kbox hands the guest at boot, as a cpio archive appended to the
 * initramfs (the kernel unpacks concatenated archives in order):
 * guest-init's /kbox/env (the sandbox-wide environment, NUL-separated
 * NAME=VALUE entries), /kbox/ca.pem (kbox's CA, when TLS interception
 * is possible) and /kbox/hostname (the sandbox's name, which the guest
 * takes as its host name).  See guest-init/senv.h for the guest side. */
#ifndef KBOX_GUESTFILES_H
#define KBOX_GUESTFILES_H

#include <stddef.h>
#include <stdint.h>

#define GUESTFILES_MAX_ENV_BYTES (256u << 10) /* guest-init reads at most this */

/* Longest host name the guest kernel takes (its HOST_NAME_MAX). */
#define GUESTFILES_HOSTNAME_MAX 64

/* Append the archive to the initramfs in *img (*len bytes, malloc'd; it
 * is padded to 4 bytes and grown).  env: n "NAME=VALUE" strings (each
 * with a non-empty NAME and no NUL); ca_pem: NUL-terminated or NULL;
 * hostname: NULL for none, else 1 to GUESTFILES_HOSTNAME_MAX letters, digits,
 * '-', '_' or '.' (what sandbox names are made of).
 * 0, -EINVAL (a malformed entry or host name, or the entries exceed
 * GUESTFILES_MAX_ENV_BYTES), or -ENOMEM; *img is unchanged on error. */
int guestfiles_append(uint8_t **img, size_t *len, const char *const *env, size_t n, const char *ca_pem,
	      const char *hostname);

#endif
