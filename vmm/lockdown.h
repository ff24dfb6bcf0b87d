/* Lock-down of the `kbox run` process (docs/security.md).
 *
 * Two steps.  lockdown_prepare runs first thing: no setuid, no inherited
 * fds, deliberate resource limits.  lockdown_apply runs once every fd,
 * socket and mapping the VM needs exists and before any VM thread starts
 * (threads created afterwards inherit everything): no_new_privs, a
 * Landlock ruleset limiting the filesystem to the -v folders and the
 * sandbox's runtime directory (plus the resolver's configuration when the
 * guest has a network), and a seccomp allowlist whose default
 * action stops kbox with one line naming the refused system call. */
#ifndef KBOX_LOCKDOWN_H
#define KBOX_LOCKDOWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mounts;

/* The open-file limit kbox runs with (soft and hard, lowered to the
 * user's hard limit if that is smaller): every file the guest has looked
 * up through virtio-fs holds a host fd, so this bounds what a guest can
 * pin on the host. */
#define LOCKDOWN_NOFILE 65536

/* What lockdown_apply leaves reachable. */
struct lockdown_cfg {
	const struct mounts *mounts; /* -v folders: read, and write unless :ro */
	const char *sandbox_dir;     /* <runtime>/<name>: listed and emptied at exit */
	const char *klog_path;       /* kernel log: write only */
	bool network;                /* the guest has a NIC: kbox dials TCP and
				      * resolves names for it */
	bool verbose;                /* one line listing what is active */
	bool off;                    /* --no-lockdown: nothing but that line */
};

/* Call at the start of `kbox run`: refuses a setuid/setgid start, closes
 * every fd above 2, turns core dumps off (they would hold guest memory)
 * and sets RLIMIT_NOFILE to LOCKDOWN_NOFILE.  Returns 0, or a negative
 * errno with a line for the user in err. */
int lockdown_prepare(char *err, size_t errlen);

/* Lock the process down as described above.  Landlock missing from the
 * kernel gives one warning line on stderr and the rest still applies;
 * any other failure returns a negative errno with err set, and the caller
 * must not run the guest.  From then on a system call outside the
 * allowlist, from any thread, prints one line and exits 125. */
int lockdown_apply(const struct lockdown_cfg *c, char *err, size_t errlen);

/* 1 if real and effective ids differ (a setuid or setgid start). */
int lockdown_ids_differ(unsigned uid, unsigned euid, unsigned gid, unsigned egid);

/* Landlock rights for each kind of path, limited to what ABI version abi
 * knows (0 for abi < 1). */
enum lockdown_path_kind {
	LD_MOUNT_RW,
	LD_MOUNT_RO,
	LD_SANDBOX_DIR,
	LD_RUNTIME_DIR,
	LD_LOG_FILE,
	LD_RESOLVER_FILE,
};
uint64_t lockdown_ll_access(int abi, enum lockdown_path_kind kind);

/* Every filesystem right ABI version abi knows (0 for abi < 1). */
uint64_t lockdown_ll_handled(int abi);

/* The report for a refused system call, async-signal-safe: "kbox:
 * lock-down: ..." naming nr, name (may be NULL) and, for ioctl, the
 * request.  Writes at most len bytes, always ends in '\n' when len > 0,
 * and returns the length written. */
size_t lockdown_format_refusal(char *buf, size_t len, long nr, const char *name,
			       bool is_ioctl, unsigned long request);

#endif
