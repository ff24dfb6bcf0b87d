/* Where kbox keeps a user's own data (the CA, the trust store). */
#ifndef KBOX_LIB_DATADIR_H
#define KBOX_LIB_DATADIR_H

#include <stddef.h>

/* The path of NAME in kbox's data folder into buf: the value of the
 * environment variable override if it is an absolute path, else
 * $XDG_DATA_HOME/kbox/NAME if that is absolute, else
 * $HOME/.local/share/kbox/NAME if $HOME is (override NULL: no variable;
 * NAME "" gives the folder itself).  Returns 0, -ENOENT when none
 * applies, or -ENAMETOOLONG. */
int datadir_path(const char *override, const char *name, char *buf, size_t len);

/* mkdir -p of dir (absolute or relative), new components mode 0700: what
 * these folders hold is the user's alone.  0 or a negative errno. */
int datadir_mkdirs(const char *dir);

#endif
