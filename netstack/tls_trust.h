/* Trust anchors for verifying upstream servers during TLS interception
 * (docs/tls-interception.md): the host's CA bundle plus an optional extra
 * CA file (--tls-extra-ca), as BearSSL trust anchors (RSA and EC keys).
 * Loaded once, before the guest runs; read-only afterwards, so any
 * number of connections may use the anchors at once without a lock.
 * Must outlive every TLS engine that uses it. */
#ifndef KBOX_NETSTACK_TLS_TRUST_H
#define KBOX_NETSTACK_TLS_TRUST_H

#include <stddef.h>

#include <bearssl.h>

#define TLS_TRUST_DEFAULT_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define TLS_TRUST_MAX 4096u           /* anchors in all */
#define TLS_TRUST_FILE_MAX (16u << 20) /* bytes of one PEM file */
#define TLS_TRUST_CERT_MAX 65536u     /* bytes of one DER certificate */
#define TLS_TRUST_DN_MAX 4096u        /* bytes of one subject DN */

struct tls_trust;

/* An empty set.  0 or -ENOMEM. */
int tls_trust_new(struct tls_trust **out);

/* Add one DER certificate as an anchor: its subject DN and public key
 * (RSA, or EC on a curve BearSSL knows), flagged CA when its
 * basicConstraints say so (a non-CA anchor is trusted only as the exact
 * server certificate).  0, -EINVAL (unparsable, unsupported key),
 * -ENOSPC (TLS_TRUST_MAX reached), -ENOMEM. */
int tls_trust_add_der(struct tls_trust *t, const unsigned char *der, size_t len);

/* Add every "CERTIFICATE" object of the PEM text (LEN bytes; other
 * object types are ignored).  *ADDED and *SKIPPED (both may be NULL) get
 * the counts of certificates added and of ones refused by
 * tls_trust_add_der.  0, -EINVAL (broken PEM), -ENOSPC, -ENOMEM. */
int tls_trust_add_pem(struct tls_trust *t, const char *text, size_t len, size_t *added, size_t *skipped);

/* Read PATH (at most TLS_TRUST_FILE_MAX bytes) and add it as PEM.
 * 0 or a negative errno; ERR (if non-NULL) gets one line naming the
 * file and what is wrong.  A file in which no certificate, or (STRICT)
 * not every certificate, could be used fails with -EINVAL. */
int tls_trust_add_file(struct tls_trust *t, const char *path, int strict, char *err, size_t errlen);

/* The set for interception: BUNDLE (NULL: TLS_TRUST_DEFAULT_BUNDLE; ""
 * for none) leniently, then EXTRA (NULL or "" for none) strictly.
 * 0 and *OUT, or a negative errno with a message in ERR. */
int tls_trust_load(const char *bundle, const char *extra, struct tls_trust **out, char *err, size_t errlen);

/* The anchors and their count, valid until tls_trust_free. */
const br_x509_trust_anchor *tls_trust_anchors(const struct tls_trust *t, size_t *n);

/* Free the set (NULL is fine).  No engine may still use it. */
void tls_trust_free(struct tls_trust *t);

#endif
