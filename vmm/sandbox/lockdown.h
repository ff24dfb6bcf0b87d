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
				      * resolves names for it; netdev_attach has
				      * started lwIP's thread, which gets the
				      * same Landlock domain */
	const char *const *read_files; /* files kbox re-reads later (the secrets
					* file and its secrets.env, on SIGHUP);
					* missing ones are skipped */
	size_t n_read_files;
	bool verbose;                /* one line listing what is active */
	bool off;                    /* --no-lockdown: nothing but that line */
};

/* Call at the start of `kbox run`: refuses a setuid/setgid start, closes
 * every fd above 2, turns core dumps off (they would hold guest memory)
 * and sets RLIMIT_NOFILE to LOCKDOWN_NOFILE.  Returns 0, or a negative
 * errno with a line for the user in err. */
int lockdown_prepare(char *err, size_t errlen);

/* Lock the process down as described above.  Landlock binds only the
 * calling thread and its later children, so the one thread that exists
 * before (lwIP's, with a network) is made to join the domain from inside
 * and the call waits (at most 5 s) for it.  Landlock missing from the
 * kernel gives one warning line on stderr and the rest still applies;
 * any other failure returns a negative errno with err set, and the caller
 * must not run the guest.  From then on a system call outside the
 * allowlist, from any thread, prints one line and exits 125. */
int lockdown_apply(const struct lockdown_cfg *c, char *err, size_t errlen);

/* The client commands, which read bytes a compromised sandbox may have
 * written (exec: the agent's frames; ps, stop, logs: the runtime dir). */
enum lockdown_client { LD_CLIENT_EXEC, LD_CLIENT_PS, LD_CLIENT_STOP, LD_CLIENT_LOGS };

/* Lock a client command down before it reads such bytes: no_new_privs;
 * Landlock with no file reachable but, for ps, reading under dir (the
 * runtime dir) and, for stop, reading and removing under it (exec's socket
 * connect needs no file right; logs has its log open already, dir is
 * ignored for both); no TCP; no signals outside the process but stop's;
 * and a seccomp allowlist
 * for that command whose default action prints one line and exits 125.
 * Without Landlock the allowlist alone applies, silently.  Returns 0 or a
 * negative errno with err set. */
int lockdown_client(enum lockdown_client kind, const char *dir, char *err, size_t errlen);

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
	LD_READ_FILE,
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
