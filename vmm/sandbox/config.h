/* sandbox.yaml: the sandbox definition a user keeps next to a project.
 *
 * The file is one YAML mapping.  Supported keys today:
 *   cpus:    integer 1..64
 *   memory:  MiB as an integer 64..65536, or a size string "512M", "2G"
 *            (M/MB/MiB and G/GB/GiB are all binary: 1G = 1024 MiB)
 *   kernel:  path; relative paths are taken from the config file's directory
 *   initrd:  path; same rule
 *   command: a list of strings (argv), or one string run as /bin/sh -c STRING
 *   verbose: true/false (also yes/no, on/off)
 *   mounts:  a list (at most MOUNTS_MAX) of mappings with
 *              source:   host directory; relative to the file's directory
 *              target:   guest path (checked when the mount is added)
 *              readonly: true/false, default false
 *              hidden:   list of glob patterns (1..CONFIG_HIDDEN_LEN_MAX
 *                        bytes, at most CONFIG_HIDDEN_MAX); a trailing '/'
 *                        is dropped; [] hides nothing; absent = defaults
 *              hidden_extra: the same, added to hidden's list (or to the
 *                        defaults when hidden is absent)
 *   disks:   a list (at most DISKS_MAX) of disk volumes (docs/disks.md), each
 *            "NAME:GUEST_PATH[:size=SIZE][:ro]" as for --disk, or a mapping
 *              name:     the volume's name
 *              target:   guest path
 *              size:     "8G", "512M" (64M to 1T; default 8G, or the
 *                        volume's size when it exists)
 *              readonly: true/false, default false
 *   image:   a rootfs directory (relative to the file's directory), later
 *            also an image name
 *   workdir: absolute guest path COMMAND starts in
 *   env:     mapping NAME: VALUE, or list of "NAME=VALUE"
 *   network: mapping with
 *              policy:    none | public | allowlist
 *              allow:     list of rules (netstack/policy.h syntax)
 *              deny:      list of rules
 *              hosts:     mapping NAME: ADDRESS
 *              audit_log: path; relative to the file's directory
 *              dns:       name servers kbox asks instead of the host's
 *                         resolver: a list of "ADDR[:PORT]" (1..RESOLVER_MAX_SERVERS,
 *                         IPv6 as "[ADDR]:PORT"), or a mapping with
 *                         servers (that list) and rate (questions per
 *                         second, 1..CONFIG_DNS_RATE_MAX; burst twice that)
 *   ports:   list of "[IP:]HOSTPORT:GUESTPORT" (IP a loopback address)
 *   tls:     mapping with
 *              intercept: all | secrets
 *              bypass:    list of host names
 *              extra_ca:  path; relative to the file's directory
 *   secrets: path to a secrets.yaml; relative to the file's directory
 * String values may use ${VAR}: from the host environment, else from
 * secrets.env (KEY=VALUE lines) next to the file; "$$" is a '$'.
 *
 * Hostile files are expected: anchors/aliases, tags, more than one document,
 * files over CONFIG_MAX_BYTES, nesting deeper than CONFIG_MAX_DEPTH and more
 * than CONFIG_MAX_NODES nodes are refused with a message, never a crash. */
#ifndef KBOX_CONFIG_H
#define KBOX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONFIG_MAX_BYTES (1u << 20)
#define CONFIG_MAX_DEPTH 16
#define CONFIG_MAX_NODES 65536

#define CONFIG_CPUS_MIN 1u
#define CONFIG_CPUS_MAX 64u
#define CONFIG_MEMORY_MIN_MIB 64u
#define CONFIG_MEMORY_MAX_MIB 65536u
#define CONFIG_HIDDEN_MAX 64u
#define CONFIG_HIDDEN_LEN_MAX 255u
#define CONFIG_ENV_MAX 128u  /* env: entries */
#define CONFIG_LIST_MAX 256u /* network.allow/deny/hosts, ports, tls.bypass */
#define CONFIG_DNS_RATE_MAX 10000u /* network.dns.rate */

struct config_mount {
	char *source;   /* malloc'd, joined to the file's directory if relative */
	char *target;   /* malloc'd, as written */
	bool readonly;
	char **hidden;  /* malloc'd patterns; NULL when hidden_set is false */
	size_t n_hidden;
	bool hidden_set; /* false: the default hidden list */
	char **hidden_extra; /* malloc'd patterns added to that list, or NULL */
	size_t n_hidden_extra;
	unsigned line, col; /* where the entry starts, for later messages */
};

struct config_disk {
	char *name;      /* malloc'd, checked by disks_add */
	char *target;    /* malloc'd, normalised */
	uint64_t size;   /* bytes; 0 = not given */
	bool readonly;
	unsigned line, col;
};

/* A string as written in the file (after ${VAR} expansion), and where. */
struct config_str {
	char *s;            /* malloc'd */
	unsigned line, col; /* 1-based */
};

struct kbox_config {
	unsigned cpus;       /* 0 = not set */
	uint64_t memory_mib; /* 0 = not set */
	char *kernel;        /* NULL = not set; malloc'd */
	char *initrd;        /* NULL = not set; malloc'd */
	char **argv;         /* NULL-terminated, malloc'd; NULL = not set */
	int verbose;         /* -1 = not set, else 0/1 */
	struct config_mount *mounts; /* malloc'd; NULL = not set */
	unsigned n_mounts;
	struct config_disk *disks; /* malloc'd; NULL = not set */
	unsigned n_disks;
	char *image;         /* NULL = not set; rootfs dir joined to the file's dir */
	char *workdir;       /* NULL = not set; absolute guest path */
	char **env;          /* "NAME=VALUE" strings; NULL = not set */
	size_t n_env;
	char *network_policy; /* NULL = not set; "none", "public" or "allowlist" */
	/* network.allow/deny: rules as written, each checked by
	 * policy_parse_rule; hosts: "NAME:ADDR"; ports: "[IP:]HOSTPORT:GUESTPORT"
	 * (an integer N is stored as "N:N").  NULL = not set. */
	struct config_str *allow, *deny, *hosts, *ports;
	size_t n_allow, n_deny, n_hosts, n_ports;
	char *audit_log;     /* NULL = not set; joined to the file's dir */
	struct config_str *dns; /* network.dns servers "ADDR[:PORT]"; NULL = not set */
	size_t n_dns;
	unsigned dns_rate;   /* network.dns.rate; 0 = not set */
	char *tls_intercept; /* NULL = not set; "all" or "secrets" */
	struct config_str *tls_bypass; /* host names; NULL = not set */
	size_t n_tls_bypass;
	char *tls_extra_ca;  /* NULL = not set; joined to the file's dir */
	char *secrets;       /* NULL = not set; joined to the file's dir */
	/* Hidden lists made by config_protect_mounts, one per mount that
	 * needed one (each NULL-terminated, with its strings). */
	char ***protect;
	size_t n_protect;
};

struct mounts;

/* Mark every field of c "not set".  c need not be initialised before. */
void config_init(struct kbox_config *c);

/* Free what c owns and leave it "not set" again (config_init state).
 * Safe to call twice. */
void config_free(struct kbox_config *c);

/* Load the file at path into c: only the keys present in the file are set,
 * replacing (and freeing) earlier values of those fields; other fields keep
 * their value.  On error c is left exactly as it was.
 *
 * Returns 0, or a negative errno: the open/read errno for an unreadable
 * file, -EFBIG for a file over CONFIG_MAX_BYTES, -ENOMEM, or -EINVAL for any
 * mistake in the content.  On error, err (if errlen > 0) receives one
 * NUL-terminated line without a newline:
 *   "FILE:LINE:COL: what is wrong; what was expected"
 * LINE and COL are 1-based.  Errors about the file as a whole (cannot be
 * read, too large) have no position: "FILE: what is wrong; what to do".
 * Values quoted in messages are shortened and non-printable bytes escaped,
 * so the line is always safe to print. */
int config_load(const char *path, struct kbox_config *c, char *err, size_t errlen);

/* As config_load, from the len bytes at buf (need not be NUL-terminated;
 * NUL bytes inside are an error).  name stands for the file in messages,
 * and relative kernel/initrd paths are resolved against name's directory
 * part (kept relative to the current directory when name has no '/'). */
int config_load_buf(const char *name, const char *buf, size_t len,
		    struct kbox_config *c, char *err, size_t errlen);

/* One more file kbox reads or writes for the host, for
 * config_protect_mounts: path NULL is skipped; what names it in messages
 * ("the audit log"). */
struct config_hostfile {
	const char *path;
	const char *what;
};

/* Keep the files that define this sandbox, and those kbox writes for the
 * host, from the guest: the config file at conf (may be NULL),
 * secrets.env next to it, c->secrets and the secrets.env next to that,
 * c->audit_log, c->tls_extra_ca, and extra[0..n_extra) (the audit log and
 * --learn file in effect, the kernel log, the trust record).  Every user
 * mount of ms whose host folder the file's path passes through (the
 * file's own folder, or a folder or link on the way, compared by device
 * and inode) gets, besides its own hidden list (or the default one), the
 * file's name as a pattern -- and, when the path ends in a symbolic link,
 * each target's name too -- so neither "hidden: []" nor a -v of a parent
 * folder shows them, and the guest can neither read nor rewrite its own
 * cage.  A name hides every file so named in that mount: a path could be
 * dodged by renaming a folder on it.  Files that do not exist yet are
 * placed by the folder they would be created in.
 *
 * What a name cannot cover is refused (-EPERM, with one line for the user
 * in err): a regular file with more than one name (hard links: the other
 * could be anywhere in a share), and a file inside the image root, which
 * hides nothing.  The new lists are owned by c (freed by config_free), so
 * c must outlive the mounts' use of them.  0, -EPERM or -ENOMEM. */
int config_protect_mounts(struct kbox_config *c, const char *conf,
			  const struct config_hostfile *extra, size_t n_extra, struct mounts *ms,
			  char *err, size_t errlen);

/* The fnmatch pattern that matches exactly name: '*', '?', '[' and '\\'
 * escaped.  malloc'd; NULL when out of memory. */
char *config_literal_pattern(const char *name);

#endif
