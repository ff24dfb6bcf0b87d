/* A running sandbox's footprint on the host: a private directory under the
 * runtime dir holding its control socket and what `kbox ps` shows. */
#ifndef KBOX_SANDBOX_H
#define KBOX_SANDBOX_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SANDBOX_NAME_MAX 64

struct sandbox {
	char name[SANDBOX_NAME_MAX + 1];
	char dir[PATH_MAX - 64];  /* <runtime>/<name> */
	char sock[PATH_MAX];      /* <dir>/vsock.sock: hybrid vsock control socket */
	char klog[PATH_MAX];      /* <dir>/kernel.log */
	int lock;                 /* sandbox_claim: the directory, flock'd while we own it; else -1 */
};

struct sandbox_info {
	char name[SANDBOX_NAME_MAX + 1];
	pid_t pid;
	long long started;   /* unix time */
	unsigned cpus;
	unsigned long long memory_mib;
	char command[256];   /* argv joined by spaces, truncated */
	char ports[256];     /* forwarded ports, "127.0.0.1:8080->80,...", or "" */
	int alive;           /* the owning kbox process still exists */
	char image[PATH_MAX]; /* root filesystem folder it runs on; "" for the initramfs */
};

/* The runtime directory: $XDG_RUNTIME_DIR/kbox, /run/kbox for root, else
 * /tmp/kbox-UID.  Created mode 0700 if missing.  Returns 0 or -errno. */
int sandbox_runtime_dir(char *buf, size_t len);

/* 1 if name is 1..64 characters of [A-Za-z0-9_.-] not starting with '.'. */
int sandbox_name_ok(const char *name);

/* Create the directory for a new sandbox called name and own it: an
 * exclusive flock on the directory, held through sb->lock until
 * sandbox_release or the process exits, so two claims of one name never
 * both succeed.  A directory nobody holds is left by a kbox that no longer
 * exists and is cleaned first; a held one (a sandbox running or starting)
 * gives -EEXIST.  err gets a line for the user. */
int sandbox_claim(struct sandbox *sb, const char *name, char *err, size_t errlen);

/* Record what `kbox ps` shows.  Returns 0 or -errno. */
int sandbox_write_info(const struct sandbox *sb, unsigned cpus, unsigned long long memory_mib,
		       char *const argv[]);

/* sandbox_write_info with the forwarded ports too, on one line (NULL or
 * "" for none). */
int sandbox_write_info_ports(const struct sandbox *sb, unsigned cpus, unsigned long long memory_mib,
			     char *const argv[], const char *ports);

/* Record how the sandbox was started (kbox fork starts its copy the
 * same way): the working folder and kbox run's arguments (argv[0] is
 * "run"), NUL-separated in run.args, at most SANDBOX_ARGS_MAX bytes.
 * 0, -E2BIG or -errno. */
#define SANDBOX_ARGS_MAX (256u << 10)
int sandbox_write_args(const struct sandbox *sb, const char *cwd, int argc, char *const argv[]);

/* Read them back: *buf to free (with free(*argv)), *cwd an absolute path
 * in it, *argv NULL-terminated with *argc entries.  0, -EBADMSG for a
 * malformed file, or -errno. */
int sandbox_read_args(const struct sandbox *sb, char **buf, char **cwd, int *argc, char ***argv);

/* Record the root filesystem folder the sandbox runs on (an image's
 * rootfs or a folder), so that `kbox image rm` sees the image is in use.
 * One line, kept apart from the info file (which is rewritten).  0,
 * -EINVAL (a newline in dir) or -errno. */
int sandbox_write_image(const struct sandbox *sb, const char *dir);

/* Remove the sandbox's files and directory, then drop the claim (close
 * sb->lock) if this process holds it.  Without a claim (sb from
 * sandbox_lookup), nothing is removed while another process holds one. */
void sandbox_release(struct sandbox *sb);

/* Read one sandbox's info by name: 0, -ENOENT, or -errno. */
int sandbox_lookup(const char *name, struct sandbox *sb, struct sandbox_info *info);

/* Call fn for every sandbox directory (stale ones included, alive = 0).
 * Returns the number visited or -errno. */
int sandbox_each(void (*fn)(const struct sandbox_info *info, void *ctx), void *ctx);

#endif
