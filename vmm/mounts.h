/* Host folders shared with the guest (`kbox run -v HOST:GUEST[:ro]`).
 *
 * Each mount is one passthrough backend, one FUSE server and one virtio-fs
 * device on the virtio-mmio bus, with tag "kboxN".  The guest learns what
 * to mount from the kernel command line:
 *     kbox.mounts=kbox0:/workspace:rw,kbox1:/cfg:ro
 * which guest-init reads from /proc/cmdline.  Guest paths therefore never
 * contain ',', ':' or whitespace; nothing is escaped. */
#ifndef KBOX_MOUNTS_H
#define KBOX_MOUNTS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "devices/fs_passthrough.h"
#include "devices/virtio_fs.h"
#include "vmm/virtio_bus.h"

/* One bus slot stays for the vsock device. */
#define MOUNTS_MAX (VBUS_MAX_DEVS - 2)
/* Longest guest path: seven of them must fit in the kernel's 2047-byte
 * command line next to everything else. */
#define MOUNTS_GUEST_MAX 160

struct mount {
	char host[PATH_MAX];
	char guest[MOUNTS_GUEST_MAX + 1];
	bool readonly;
	struct fsp *fs;
	struct fuse_server *srv;
	struct virtio_fs vfs;
};

struct mounts {
	unsigned n;
	struct mount m[MOUNTS_MAX];
};

/* Add one `-v` argument, HOST:GUEST[:ro|:rw].  HOST must be an existing
 * directory (it may contain ':'; the split is at the last ones); GUEST an
 * absolute path without ".", ".." or empty components, without ',', ':',
 * '"' or whitespace, not "/" and not under /proc, /sys or /dev, and not
 * used twice.  Returns 0, or a negative errno with a message for the user
 * in err. */
int mounts_parse(struct mounts *ms, const char *arg, char *err, size_t errlen);

/* Serve every mount: open the host folders, attach one virtio-fs device
 * each to bus b (which appends them to cmdline) and append the
 * kbox.mounts= list.  Also raises the soft fd limit to the hard one, since
 * every file the guest has looked up holds a host fd.  On failure some
 * mounts may be attached: mounts_free after vbus_destroy still frees
 * everything.  Returns 0 or a negative errno with err set. */
int mounts_attach(struct mounts *ms, struct vbus *b, char *cmdline, size_t cmdlen,
		  char *err, size_t errlen);

/* Frees every server and backend; call after the bus is destroyed.  ms
 * may be partly attached or never attached. */
void mounts_free(struct mounts *ms);

#endif
