/* Hidden-name patterns of a passthrough mount (fs_passthrough.c): which
 * names and paths the guest must not see, and which renames would unhide
 * something.
 *
 * - A pattern is an fnmatch(3) glob.  One without '/' is matched against
 *   an entry's name at every depth; one with a '/' inside, or a leading
 *   '/' (which anchors it: "/.env" is the root's .env only), against the
 *   entry's path from the mount root (FNM_PATHNAME).
 * - Matching ignores ASCII case, and a name also counts as hidden when its
 *   folded form matches: each component's trailing dots and spaces
 *   dropped (vfat, exFAT, Windows servers), the non-ASCII code points
 *   whose case folding, simple case mapping or canonical decomposition is
 *   ASCII (long s, Kelvin sign, sharp s, dotted and dotless i, Latin
 *   ligatures, ...) replaced by it, and the characters HFS+ ignores in
 *   names (zero widths, direction marks, BOM) dropped.  A case-folding host
 *   takes those spellings for the protected name; everywhere else hiding
 *   them costs nothing.
 * - Other spellings a folding host may take (vfat short names, Unicode
 *   case variants beyond the list) are not the patterns' job: the backend
 *   lets the guest use only the spelling such a directory lists.
 *
 * The set is immutable once made and may be used from several threads. */
#ifndef KBOX_FS_HIDDEN_H
#define KBOX_FS_HIDDEN_H

#include <stdbool.h>
#include <stddef.h>

struct fsh;

/* Which patterns a mount hides, as its configuration names them (the
 * arrays and strings are borrowed).  set false: the backend's default
 * list (list and n unused); set true: list[0..n) instead (n 0 hides
 * nothing).  extra[0..n_extra) is added to whichever list applies. */
struct fs_hidden_spec {
	const char *const *list;
	size_t n;
	bool set;
	const char *const *extra;
	size_t n_extra;
};

/* A set of the na patterns of a followed by the nb of b (either may be
 * NULL when its count is 0).  Returns 0 and *out, -EINVAL for an empty
 * pattern or "/" alone, -ENOMEM. */
int fs_hidden_new(const char *const *a, size_t na, const char *const *b, size_t nb,
		  struct fsh **out);

/* Frees the set.  NULL is a no-op. */
void fs_hidden_free(struct fsh *h);

/* Whether some pattern is matched against paths: then fs_hidden_hidden needs
 * the directory's path, and renames need fs_hidden_moves_hidden. */
bool fs_hidden_needs_path(const struct fsh *h);

/* 1 if name (one component) in the directory at dirrel (its path from
 * the mount root, "" for the root, no leading or trailing '/'; may be
 * NULL when !fs_hidden_needs_path) is hidden, 0 if not, -ENAMETOOLONG if name
 * or the path is too long to judge (callers treat any nonzero as
 * hidden). */
int fs_hidden_hidden(const struct fsh *h, const char *dirrel, const char *name);

/* Whether renaming the directory at src (its path from the root) to dst
 * would take something below it out from under a path pattern: src
 * matches the leading components of a pattern that has more, and dst
 * does not match the same components at the same depth, so a file the
 * pattern hides below src would not be hidden below dst.  The check is on
 * patterns, not on what lies below (that may be made later).  Name
 * patterns follow the name and need no such check. */
bool fs_hidden_moves_hidden(const struct fsh *h, const char *src, const char *dst);

#endif
