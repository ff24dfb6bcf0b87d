/* The files and folders kbox keeps for the host (the config and secrets
 * files, the audit log, the --learn file, the kernel log, the CA, the
 * trust record, the image store, the runtime folder) against the folders
 * it shares with the guest: which shares a path passes through, so that
 * the file's name can be hidden there, and which of kbox's folders a
 * share would give away (docs/security.md, "kbox's own files").
 *
 * Paths are resolved the way open(2) will resolve them, one component at
 * a time, and folders compared by device and inode, so a symbolic link,
 * a bind mount or another spelling of a shared folder is seen for what it
 * is.  A file that does not exist yet is placed by the folder it would be
 * created in. */
#ifndef KBOX_HOSTFILES_H
#define KBOX_HOSTFILES_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* At most this many folders to compare against (a bit each). */
#define HOSTFILES_MAX_ROOTS 32
/* Names a path may take on its way (as written, then after each link). */
#define HOSTFILES_MAX_NAMES 8

/* A shared folder, by identity. */
struct hostfiles_root {
	dev_t dev;
	ino_t ino;
};

/* What hostfiles_walk found for one path. */
struct hostfiles_walk {
	/* Bit i: roots[i] holds a folder the resolution passed through
	 * (the file's own folder included), so a guest with that share
	 * could rename, replace or create something on the way. */
	uint32_t crossed;
	bool exists;        /* the final file exists (st is its stat) */
	struct stat st;
	char real[PATH_MAX]; /* where the file is, or would be created */
	/* The final names met: as written, then the target's after each
	 * symbolic link, without repeats. */
	size_t n_names;
	char names[HOSTFILES_MAX_NAMES][NAME_MAX + 1];
};

/* Fill roots[i] from the folder at paths[i] (followed); -errno when one
 * cannot be stat'ed. */
int hostfiles_root_of(const char *path, struct hostfiles_root *root);

/* Resolve path (relative ones against the current folder), following
 * symbolic links as open(2) would (at most 40), and report in *w which of
 * roots[0..n) (n <= HOSTFILES_MAX_ROOTS) it passes through and the names it
 * ends in.  A missing component ends the walk: the rest would be created
 * in the last folder reached.  Returns 0, -ELOOP, -ENAMETOOLONG, -EINVAL
 * (an empty path, n too large) or the -errno of a folder that cannot be
 * read. */
int hostfiles_walk(const char *path, const struct hostfiles_root *roots, size_t n, struct hostfiles_walk *w);

/* Which of roots[0..n) hold the existing folder at real (an absolute
 * path without links, "." or ".."), real itself included: a bit each. */
uint32_t hostfiles_holders(const char *real, const struct hostfiles_root *roots, size_t n);

/* One of kbox's own folders, for hostfiles_check_folders. */
struct hostfiles_folder {
	const char *path; /* may not exist yet */
	const char *what; /* "kbox's data folder (CA key, trust record, images)" */
};

/* One shared folder, for hostfiles_check_folders. */
struct hostfiles_share {
	const char *host;
	const char *guest;
	bool image;       /* the --image root: may lie inside image_store */
};

/* Refuse a share that holds one of kbox's folders f[0..nf) (or passes
 * through one on the way to it: a link in the share could be replaced),
 * or that lies inside one (the image root may lie inside image_store,
 * which may be NULL).  Hiding cannot help here: the folders' names are
 * generic and their files many.  Returns 0, or -EPERM with one line for
 * the user in err naming both and what to do; -errno when a share's
 * folder cannot be read. */
int hostfiles_check_folders(const struct hostfiles_folder *f, size_t nf, const struct hostfiles_share *s, size_t ns,
		     const char *image_store, char *err, size_t errlen);

#endif
