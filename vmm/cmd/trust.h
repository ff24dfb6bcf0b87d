/* Trust of a project's kbox.yaml.
 *
 * A kbox.yaml that `kbox run` finds by itself came with the project, maybe
 * from a clone of someone else's repository: it chooses the mounts, the
 * network policy, the secrets file and which host variables enter the
 * guest.  kbox uses such a file only once the user has accepted its exact
 * content (`kbox trust`, or "y" at the question on a terminal), as one
 * accepts a direnv file: a new file, or one that changed since (a `git
 * pull`), is refused until accepted again.  A file named with --conf is the
 * user's explicit choice and is not checked.
 *
 * What is accepted is a SHA-256 over the file's bytes and, when the file
 * names a secrets file inside the project folder, that file's path and
 * bytes too (a secrets file elsewhere is the user's own), and secrets.env
 * next to the file (its ${VAR}s shape the sandbox, and a repository may
 * carry one).  The store is a
 * text file of "v1 HEX PATH" lines, PATH where the config was found (its
 * folder's real path and its name: a kbox.yaml symlink is trusted where it
 * is, since its relative paths and /workspace are that folder's):
 * $KBOX_TRUST_FILE, else $XDG_DATA_HOME/kbox/trusted, else
 * ~/.local/share/kbox/trusted (directory 0700, file 0600). */
#ifndef KBOX_TRUST_H
#define KBOX_TRUST_H

#include <stddef.h>

#define TRUST_HEX_LEN 64

/* The store's path into buf.  Returns 0, -ENOENT without $HOME and the
 * variables above, or -ENAMETOOLONG. */
int trust_store_path(char *buf, size_t len);

/* The digest of the config at conf_real (an absolute path) and, if
 * secrets is non-NULL and lies under the config's folder, of the secrets
 * file, as TRUST_HEX_LEN lowercase hex digits plus a NUL in hex.  Returns
 * 0 or -errno (a missing secrets file is hashed as absent, not an error);
 * err gets a one-line reason. */
int trust_digest(const char *conf_real, const char *secrets, char hex[TRUST_HEX_LEN + 1],
		 char *err, size_t errlen);

/* 1 if the store holds exactly (conf_real, hex), 0 if not (no store, no
 * line for the path, or another digest), or -errno reading the store. */
int trust_check(const char *store, const char *conf_real, const char *hex);

/* Record (conf_real, hex) in the store, replacing the path's earlier line;
 * with hex NULL, remove the path's line.  Other lines are kept as they are.
 * The store is rewritten whole (temporary file and rename) under an flock
 * of "STORE.lock".  Returns 0 or -errno; err gets a one-line reason. */
int trust_record(const char *store, const char *conf_real, const char *hex, char *err,
		 size_t errlen);

struct kbox_config;

/* For `kbox run`: may the project config conf (as found, relative or
 * absolute), already loaded into cfg, be used?  Returns 0 if the store
 * trusts its content; otherwise, when stdin and stderr are terminals, shows
 * what the file asks for and asks, recording a "y"; else, or on any other
 * answer, returns -EACCES with err saying what to do.  Other -errno on
 * failure. */
int trust_project(const char *conf, const struct kbox_config *cfg, char *err, size_t errlen);

/* `kbox trust [--remove|--list] [PATH]`; returns the exit code. */
int trust_main(int argc, char **argv);

#endif
