/* Where kbox finds its guest kernel and initramfs. */
#ifndef KBOX_PATHS_H
#define KBOX_PATHS_H

#include <stddef.h>

/* Directory holding the running kbox binary (from /proc/self/exe).
 * Returns 0 or -errno. */
int paths_exe_dir(char *buf, size_t len);

/* Default file NAME next to the binary (build tree: build/NAME) or in
 * ../lib/kbox/NAME (installed).  Writes the first that exists, or the
 * build-tree path if none does, so the error names a useful place. */
void paths_default(const char *name, char *buf, size_t len);

#endif
