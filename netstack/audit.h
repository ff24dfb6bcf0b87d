/* The audit log: one JSON object per line for every policy decision, so
 * that `jq` and --learn can read it.  Strings that come from the guest
 * (names) or the user (rules) are escaped and cut to a bounded length, so
 * that no input can break a line or forge another entry. */
#ifndef KBOX_NETSTACK_AUDIT_H
#define KBOX_NETSTACK_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netstack/policy.h"

#define AUDIT_NAME_MAX 256u /* bytes of a name kept before escaping */
#define AUDIT_RULE_MAX 512u /* bytes of a rule kept before escaping */
#define AUDIT_LINE_MAX 8192u /* no line is longer than this */

struct audit_event {
	uint64_t time_ms;           /* wall clock, milliseconds since the epoch */
	const char *proto;          /* "tcp", "udp" or "dns" */
	const char *direction;      /* TCP: "out" (the guest dialled) or "in" (forwarded port); else NULL */
	const struct policy_addr *dst; /* NULL for a DNS question */
	uint16_t port;
	const char *name;           /* DNS name, or NULL */
	bool allow;
	const char *rule;           /* policy_decision.rule */
	/* A connection's end instead of a decision: bytes from the guest
	 * (up) and to it (down), and its lifetime. */
	bool close;
	uint64_t bytes_up, bytes_down, duration_ms;
	const char *error; /* close: why the connection failed ("ECONNREFUSED", ...), or NULL */
	/* Like decisions not logged since the last line (rate limit); 0:
	 * the field is left out. */
	uint64_t suppressed;
	/* A TLS interception or secret event instead (netstack/intercept.h):
	 * "event" names it; secret, where, reason and status are optional.
	 * Never a secret's value. */
	const char *event;
	const char *secret, *where, *reason;
	int status;
};

/* Format e as one line ending in '\n' into buf: {"time":"ISO-8601 UTC",
 * "proto":...,"direction":... (absent without direction),"dst":"ip:port"
 * (IPv6 in brackets, absent without dst),"name":... (absent without
 * name), then "decision":"allow"|"deny","rule":...} for a decision or
 * "event":"close","bytes_up":N,"bytes_down":N,"duration_ms":N} (then
 * ,"error":... when set) for a close; for an event: "event":EV then "secret", "where", "status" when
 * set, "decision" and "reason" (when set) instead of "rule";
 * ,"suppressed":N before the "}" when set.  *n gets the length.
 * 0 or -ENOSPC. */
int audit_format(const struct audit_event *e, char *buf, size_t len, size_t *n);

struct audit {
	int fd; /* -1: logging off */
};

/* Whether line (n bytes, without its newline) could be one audit_format
 * wrote: how an existing file is recognised as an audit log. */
bool audit_line_is_ours(const char *line, size_t n);

/* Open path to write guest-chosen text into, refusing any file the host
 * may later run or read as something else: a symbolic link (unless to a
 * character device or FIFO, as /dev/stderr is), a file with an execute
 * bit, anything but a regular file, device or FIFO, and a non-empty
 * regular file kbox did not write (first line: an audit line, or for
 * learn the --learn header).  A new file is created 0600.  The audit log
 * (learn false) is opened for appending; learn's (true) is truncated.
 * The fd, or a negative errno with one line for the user in err. */
int audit_open_file(const char *path, bool learn, char *err, size_t errlen);

/* audit_open_file(path, false) into a.  0 or a negative errno (err says
 * why; a stays "logging off"). */
int audit_open(struct audit *a, const char *path, char *err, size_t errlen);

/* Append e as one line with a single write(), so that concurrent
 * writers never interleave within a line.  A no-op when logging is off.
 * 0 or a negative errno. */
int audit_write(struct audit *a, const struct audit_event *e);

/* Close the log; a stays usable as "logging off". */
void audit_close(struct audit *a);

/* --learn: every destination the guest tried, deduplicated, to suggest an
 * allowlist at exit.  Learning never changes a decision. */
#define AUDIT_LEARN_MAX 4096u /* distinct destinations kept; later ones are counted only */

struct audit_learn_entry {
	char target[POLICY_NAME_MAX + 3]; /* name, or address ("[v6]" in brackets) when no name was seen */
	uint16_t port;                 /* 0: a name refused at DNS, no connection seen */
	bool allowed;                  /* allowed at least once */
	bool widen;                    /* an allowlist would let it through: allowed, or denied only for
					* matching no rule (not a deny rule, class or the host) */
	char why[64];                  /* the first denial's rule, for the comment */
	uint64_t count;
};

struct audit_learn {
	struct audit_learn_entry *e;
	size_t n, cap;
	uint64_t allowed, denied, lost; /* decisions seen; lost: table full */
};

/* Start empty.  Never fails. */
void audit_learn_init(struct audit_learn *l);

/* Release the entries. */
void audit_learn_free(struct audit_learn *l);

/* Record one decision: a TCP connection to dst:port judged under name
 * (NULL if none), or a DNS question for name (dst NULL, port 0; only
 * denials are worth recording, allowed names show up as connections).
 * 0 or -ENOMEM (counted in lost). */
int audit_learn_add(struct audit_learn *l, const char *name, const struct policy_addr *dst, uint16_t port,
		    const struct policy_decision *d);

/* The suggested network: section as YAML (sorted by target and port)
 * after a comment header naming mode, the decision counts and the time
 * (unix seconds) it was made: malloc'd NUL-terminated text in *out.
 * Destinations only an allow rule kept out are suggested as allow
 * entries; those a deny rule, a blocked class or the host refused are
 * listed commented out, with the reason.  0 or -ENOMEM. */
int audit_learn_format(const struct audit_learn *l, const char *mode, uint64_t now, char **out);

/* audit_learn_format, made now, written to fd (opened beforehand, e.g.
 * before a sandbox forbids opening files).  0 or a negative errno. */
int audit_learn_write(const struct audit_learn *l, const char *mode, int fd);

#endif
