/* The run configuration (docs/run-config.md): what one `kbox run` tells
 * guest-init after the kernel booted, over vsock, instead of on the
 * kernel command line or in the initramfs, so that a booted guest waiting
 * for it can be snapshotted once and serve every run (issue 19).  It
 * carries the per-run settings guest-init reads (the kbox.mounts=,
 * kbox.disks= and kbox.root= words), the host's wall clock, fresh entropy
 * for the guest's random number generator, and what every command gets:
 * the sandbox's environment (placeholders, CA variables), kbox's CA and
 * the host name.
 *
 * Pure encoding and decoding, no I/O and only libc, shared by kbox and
 * guest-init (musl) as exec_proto is.  The decoder treats its input as
 * hostile: it never reads past the bytes given and refuses, with -EPROTO,
 * anything malformed. */
#ifndef KBOX_RUNCFG_H
#define KBOX_RUNCFG_H

#include <stddef.h>
#include <stdint.h>

/* The guest vsock port guest-init listens on until it has its
 * configuration (the exec agent's is 1024). */
#define RUNCFG_VSOCK_PORT 1025u
/* Host port guest-init asks for once it listens on RUNCFG_VSOCK_PORT: kbox
 * refuses it (nothing is connected) and learns that the guest waits, the
 * point where a template is saved (docs/snapshots.md). */
#define RUNCFG_READY_PORT 1025u

/* The header: magic "KBRC", version (16 bits), the records' length (32
 * bits), little-endian.  Records: type (16 bits), length (32 bits),
 * value. */
#define RUNCFG_HDR 10u
#define RUNCFG_REC_HDR 6u
#define RUNCFG_VERSION 1u
#define RUNCFG_MAX (512u << 10)  /* a whole message, header included */
#define RUNCFG_WORDS_MAX 8192u   /* the settings words */
#define RUNCFG_ENTROPY_MIN 64u
#define RUNCFG_ENTROPY_MAX 4096u
#define RUNCFG_ENV_MAX (256u << 10)
#define RUNCFG_CA_MAX (64u << 10)
#define RUNCFG_HOSTNAME_MAX 64u

enum runcfg_type {
	RUNCFG_WORDS = 1,   /* printable ASCII: space-separated kbox.NAME=VALUE words */
	RUNCFG_CLOCK = 2,   /* seconds (64 bits) and nanoseconds (32 bits) of CLOCK_REALTIME */
	RUNCFG_ENTROPY = 3, /* RUNCFG_ENTROPY_MIN..MAX random bytes from the host */
	/* At most once each, absent when empty: */
	RUNCFG_ENV = 4,      /* NAME=VALUE entries, each ending in a NUL; NAME not empty */
	RUNCFG_CA = 5,       /* a PEM text (printable ASCII, tab, CR, LF) */
	RUNCFG_HOSTNAME = 6, /* 1..64 of [A-Za-z0-9._-] */
	/* Types from 0x8000 up are optional: a decoder that does not know
	 * one skips it; an unknown type below is refused. */
	RUNCFG_OPTIONAL = 0x8000,
};

/* A configuration; after runcfg_decode its pointers point into the
 * decoded buffer, which must outlive it.  Words, clock and entropy are
 * required; the rest is absent when its length is 0.  Only env holds
 * NULs (its terminators); no field is NUL-terminated otherwise. */
struct runcfg {
	const char *words;
	size_t words_len;
	uint64_t clock_sec;
	uint32_t clock_nsec; /* < 1000000000 */
	const uint8_t *entropy;
	size_t entropy_len;
	const char *env;
	size_t env_len;
	const char *ca;
	size_t ca_len;
	const char *hostname;
	size_t hostname_len;
};

/* Whether the text t[0, n) may be the record of type (RUNCFG_WORDS, ENV,
 * CA or HOSTNAME): what the encoder and decoder check. */
int runcfg_text_ok(enum runcfg_type type, const char *t, size_t n);

/* Encode c into out[0, cap): 0 with the length in *n, -EINVAL for a c
 * the decoder would refuse, -ENOSPC. */
int runcfg_encode(const struct runcfg *c, uint8_t *out, size_t cap, size_t *n);

/* The length of the whole message whose first RUNCFG_HDR bytes are at
 * hdr (for a reader that takes the header first), or -EPROTO for a bad
 * magic, version or length. */
long runcfg_message_len(const uint8_t hdr[RUNCFG_HDR]);

/* Decode the message buf[0, len) (exactly one) into *c: 0 or -EPROTO
 * (bad header, a record past the end or of a bad length, a duplicate, a
 * missing required record, an unknown required type, a text record
 * runcfg_text_ok refuses, nanoseconds out of range). */
int runcfg_decode(const uint8_t *buf, size_t len, struct runcfg *c);

#endif
