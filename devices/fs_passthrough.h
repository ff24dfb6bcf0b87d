/* Passthrough filesystem backend for the FUSE server: serves one host
 * directory, confined on the host side.
 *
 * - Every inode the guest knows is an entry in a table keyed by (st_dev,
 *   st_ino), with the guest's lookup count and the name it was last seen
 *   under in its parent.  A lookup is one fstatat (following nothing); the
 *   inode's O_PATH|O_NOFOLLOW fd is opened when an operation needs it, by
 *   that name from the parent's fd under the rules below, and must be the
 *   same inode of the same type, else ESTALE.
 * - Every name is one component, resolved with openat2(RESOLVE_BENEATH |
 *   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) relative to its parent's fd;
 *   "", ".", ".." and names containing '/' are refused (EINVAL).
 * - Only regular files and directories are ever opened; symlinks are read
 *   with readlinkat, never followed.  MKNOD makes regular files, FIFOs
 *   and sockets, never devices (the guest kernel serves FIFOs and sockets
 *   itself; the server never opens one).
 * - Setuid/setgid bits are stripped on create and chmod.
 * - A read-only mount refuses every write with EROFS.
 * - Hidden names do not exist: ENOENT on lookup, absent from readdir, EACCES
 *   when the guest tries to create, link or rename onto one.  Patterns
 *   match whatever the ASCII case, and also the name as a folding host
 *   reads it (trailing dots and spaces dropped, non-ASCII letters that fold
 *   to ASCII replaced).  On a directory that takes one spelling for another
 *   (case-insensitive or dot-dropping host file systems), only the
 *   spelling the directory lists reaches an entry.  A rename that would
 *   move something out from under a path pattern (one with a '/') gives
 *   EACCES.  OPEN, listings, LINK and xattrs of a node check the name the
 *   host now has for it (ESTALE if hidden or outside the root).
 * - Open fds (inodes plus handles) are capped: at the cap the least
 *   recently used inode fd is closed (it is reopened on demand); when only
 *   handles are left, EMFILE. */
#ifndef KBOX_FS_PASSTHROUGH_H
#define KBOX_FS_PASSTHROUGH_H

#include <stdbool.h>
#include <stddef.h>

#include "devices/fs_hidden.h"
#include "devices/fuse_server.h"

struct fs_passthrough_config {
	const char *root; /* host directory to serve */
	bool readonly;
	/* Hidden glob patterns (fnmatch, case-insensitive).  A pattern with
	 * no '/' matches an entry's name anywhere in the mount; one with a '/'
	 * matches the path relative to the mount root, e.g.
	 * "config/secret-*", and a leading '/' anchors a name at the root
	 * ("/.env" hides the root's .env only).  hidden.set false means the
	 * defaults (FS_PASSTHROUGH_DEFAULT_HIDDEN); hidden.extra adds to the
	 * list (`hidden_extra:` in sandbox.yaml). */
	struct fs_hidden_spec hidden;
	/* Cap on host fds held for the guest; 0 = RLIMIT_NOFILE minus 64. */
	unsigned max_fds;
};

/* The default hidden list, NULL-terminated: .env, secrets.env and
 * kbox.yaml, each with any suffix, with '.' or '#' in front, and with
 * ".#" in front (editor swap, autosave, lock and backup copies). */
extern const char *const FS_PASSTHROUGH_DEFAULT_HIDDEN[];

struct fs_passthrough;

/* The backend's ops table, for fuse_server_new(&fs_passthrough_ops, fsp, ...). */
extern const struct fuse_fs_ops fs_passthrough_ops;

/* Opens cfg->root (which must be a directory; the path itself may contain
 * symlinks, it is the host user's choice) and prepares the tables.
 * Returns 0 and *out, or a negative errno. */
int fs_passthrough_new(const struct fs_passthrough_config *cfg, struct fs_passthrough **out);

/* Closes every fd and frees the backend.  NULL is a no-op. */
void fs_passthrough_free(struct fs_passthrough *p);

/* Host fds currently held for the guest (inodes + open handles, root
 * excluded); for tests and the fd cap. */
unsigned fs_passthrough_open_fds(const struct fs_passthrough *p);

/* Inodes the backend remembers for the guest, root excluded; for tests. */
unsigned fs_passthrough_inodes(const struct fs_passthrough *p);

#endif
