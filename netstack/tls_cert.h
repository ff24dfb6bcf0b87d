/* The kbox certificate authority and the leaf certificates it mints for
 * TLS interception.  The CA is an EC P-256 key with a self-signed X.509
 * v3 certificate, made once per user and kept on disk (PEM); leaf
 * certificates are minted per server name on first use, signed with
 * ecdsa-with-SHA256, and cached.  Everything here is built with our own
 * bounds-checked DER writer and BearSSL's EC primitives; names come from
 * the network (SNI) and are checked before they reach a certificate. */
#ifndef KBOX_NETSTACK_TLS_CERT_H
#define KBOX_NETSTACK_TLS_CERT_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <bearssl.h>

#define TLS_CERT_MINT_MAX 4096u               /* leaves minted per CA, in all */
#define TLS_CERT_NAME_MAX 253u                /* longest DNS name we mint for */
#define TLS_CERT_LEAF_LIFETIME (7 * 86400)    /* leaf notAfter = now + 7 days */
#define TLS_CERT_LEAF_BACKDATE 3600           /* notBefore = now - 1 hour (clock skew) */
#define TLS_CERT_CA_LIFETIME (3650LL * 86400) /* CA validity: 10 years */

struct tls_cert_ca; /* the CA: P-256 key + self-signed cert, plus the leaf cache */

/* Load DIR/ca.pem and DIR/ca.key, or create both (DIR 0700, key 0600,
 * cert 0644; missing parent directories are created 0700) when neither
 * exists.  The key must be ours, not readable by group or others, and
 * match the certificate, which must not have expired.  A lock on DIR
 * keeps two processes from creating two CAs at once.  Returns 0 and sets
 * *OUT, or a negative errno; on failure ERR (if non-NULL) gets one line
 * saying what is wrong and what to do. */
int tls_cert_ca_open(const char *dir, struct tls_cert_ca **out, char *err, size_t errlen);

/* Make a fresh CA in memory only (new key, self-signed certificate with
 * subject CN=CN, valid from NOW-1h for ten years).  For tests and for
 * tls_cert_ca_open's create path.  0, -EINVAL (CN empty or > 64 bytes),
 * -ENOMEM, or -EIO if the random source fails. */
int tls_cert_ca_generate(const char *cn, time_t now, struct tls_cert_ca **out);

/* A CA from a caller-given DER certificate and the raw P-256 private
 * scalar (32 bytes, big-endian).  The certificate must parse, be a CA
 * (basicConstraints cA) and carry the P-256 public key of the scalar;
 * leaves name its subjectKeyIdentifier as their authority key (the SHA-1
 * of its key if it has none) and end no later than it.  Copies both.
 * 0, -EINVAL (unparsable, not a CA, wrong curve, key mismatch), -ENOMEM,
 * -EIO (random source). */
int tls_cert_ca_from_parts(const unsigned char *cert_der, size_t cert_len, const unsigned char *priv,
		     size_t priv_len, struct tls_cert_ca **out);

/* Free the CA and every leaf it minted (all pointers from tls_cert_leaf die). */
void tls_cert_ca_free(struct tls_cert_ca *ca);

/* The CA certificate in PEM, NUL-terminated, owned by CA. */
const char *tls_cert_ca_pem(const struct tls_cert_ca *ca);

/* The CA certificate in DER, owned by CA; *LEN gets its length. */
const unsigned char *tls_cert_ca_der(const struct tls_cert_ca *ca, size_t *len);

/* When the CA certificate expires (its notAfter). */
time_t tls_cert_ca_not_after(const struct tls_cert_ca *ca);

/* The CA's private key (for tests and for writing ca.key). */
const br_ec_private_key *tls_cert_ca_key(const struct tls_cert_ca *ca);

/* The chain [leaf, CA] for NAME, a DNS name (case-insensitive, kept in
 * lower case, one trailing dot dropped) or an IPv4/IPv6 literal, minted
 * on first use and cached, plus the leaf private key (one key per CA,
 * shared by all its leaves).  The pointers stay valid until tls_cert_ca_free
 * (the TLS engine holds them for a whole connection), so nothing is ever
 * evicted: a cached leaf within a day of expiry is re-minted and the old
 * one kept alive, and the number of leaves minted per CA is bounded by
 * TLS_CERT_MINT_MAX (~1 KiB each); past that, new names get -ENOSPC while
 * cached names go on working.  Thread-safe (one mutex).  0, -EINVAL
 * (NULL, empty, > 253 bytes, a character outside [A-Za-z0-9-_.], an
 * empty or > 63-byte label, a malformed IP literal), -ENOMEM, -EIO
 * (signing failed), -ENOSPC. */
int tls_cert_leaf(struct tls_cert_ca *ca, const char *name, const br_x509_certificate **chain,
	    size_t *chain_len, const br_ec_private_key **key);

/* How many distinct names have a leaf (tests). */
size_t tls_cert_cache_count(struct tls_cert_ca *ca);

/* The default CA directory: $KBOX_CA_DIR, else $XDG_DATA_HOME/kbox/ca,
 * else $HOME/.local/share/kbox/ca (only absolute values count).  Writes
 * a NUL-terminated path into BUF.  0, -ENAMETOOLONG, -ENOENT (no usable
 * variable). */
int tls_cert_ca_default_dir(char *buf, size_t len);

/* ---- DER writer (exposed for tests and the fuzz target) ----
 * Writes into a fixed buffer; the first overflow makes the writer sticky
 * failed (every later call is a no-op) so that callers check once at the
 * end. */
struct tls_cert_der {
	unsigned char *buf;
	size_t cap;
	size_t len;
	int err; /* 0, or the first error: -ENOSPC (full), -EINVAL (tag over
		  * 0xff, malformed OID, bad mark), -ERANGE (year past 9999) */
};

/* Start writing into BUF (CAP bytes). */
void tls_cert_der_init(struct tls_cert_der *d, unsigned char *buf, size_t cap);

/* Append a tag-length header for a content of LEN bytes (definite form,
 * minimal length octets). */
void tls_cert_der_hdr(struct tls_cert_der *d, unsigned tag, size_t len);

/* Append raw bytes. */
void tls_cert_der_raw(struct tls_cert_der *d, const void *p, size_t n);

/* Append a primitive TLV. */
void tls_cert_der_tlv(struct tls_cert_der *d, unsigned tag, const void *p, size_t n);

/* Append an INTEGER from an unsigned big-endian magnitude: leading zero
 * bytes are stripped and one 0x00 is added when the top bit is set. */
void tls_cert_der_uint(struct tls_cert_der *d, const unsigned char *p, size_t n);

/* Append an OBJECT IDENTIFIER from dotted text ("1.2.840.10045.2.1").
 * A malformed OID sets -EINVAL. */
void tls_cert_der_oid(struct tls_cert_der *d, const char *dotted);

/* Open a constructed value (SEQUENCE, SET, [n]); returns a mark for
 * tls_cert_der_close.  Content is written after a reserved 6-byte header
 * (lengths up to 2^32-1) and moved down once its size is known. */
size_t tls_cert_der_open(struct tls_cert_der *d, unsigned tag);

/* Close the value opened at MARK, fixing its length. */
void tls_cert_der_close(struct tls_cert_der *d, size_t mark);

/* Append a UTCTime (years 1950..2049) or GeneralizedTime (otherwise,
 * up to 9999) for T, in UTC with seconds, as RFC 5280 4.1.2.5 requires. */
void tls_cert_der_time(struct tls_cert_der *d, time_t t);

/* ---- PEM ---- */

/* Encode DER as PEM with the label LABEL (64-column lines, trailing
 * newline) into a malloc'd NUL-terminated string in *OUT.  0, -ENOMEM. */
int tls_cert_pem_encode(const char *label, const unsigned char *der, size_t len, char **out);

/* Find the first PEM block labelled LABEL in TEXT (LEN bytes, need not be
 * NUL-terminated) and decode it into a malloc'd buffer.  Whitespace
 * inside the base64 is ignored; anything else invalid fails.  0, -EINVAL
 * (no such block, bad base64, empty), -ENOMEM. */
int tls_cert_pem_decode(const char *text, size_t len, const char *label, unsigned char **der,
		  size_t *der_len);

/* A P-256 private key as PEM "EC PRIVATE KEY" (SEC1 / RFC 5915, what
 * `openssl ec` reads and writes): malloc'd, NUL-terminated, in *OUT.
 * 0, -EINVAL (not a P-256 key), -ENOMEM. */
int tls_cert_key_pem(const br_ec_private_key *sk, char **out);

#endif
