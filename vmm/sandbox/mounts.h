/* Host folders shared with the guest (`kbox run -v HOST:GUEST[:ro]` and
 * the `mounts:` section of sandbox.yaml).
 *
 * Each mount is one passthrough backend, one FUSE server and one virtio-fs
 * device on the virtio-mmio bus, with tag "kboxN".  The guest learns what
 * to mount from the kernel command line:
 *     kbox.mounts=kbox0:/workspace:rw,kbox1:/cfg:ro
 * which guest-init reads from /proc/cmdline.  Guest paths therefore never
 * contain ',', ':' or whitespace; nothing is escaped.
 *
 * A root image (`--image DIR`) is one more mount, read-only, with nothing
 * hidden, named on the command line as kbox.root=kboxN instead of in the
 * list: guest-init puts a tmpfs overlay over it and makes that the root. */
#ifndef KBOX_MOUNTS_H
#define KBOX_MOUNTS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "devices/fs_passthrough.h"
#include "devices/virtio_fs.h"
#include "vmm/core/virtio_bus.h"

/* Shared folders besides vsock, the NIC and the disks (vmm/sandbox/disks.h). */
#define MOUNTS_MAX 8
/* Longest guest path: seven of them must fit in the kernel's 2047-byte
 * command line next to everything else. */
#define MOUNTS_GUEST_MAX 160

struct mount {
	char host[PATH_MAX];
	char guest[MOUNTS_GUEST_MAX + 1];
	bool readonly;
	/* Borrowed from the caller of mounts_add. */
	struct fs_hidden_spec hidden;
	bool root;  /* the --image root, not a user folder */
	/* The image folder's owner, whose files are the guest root's (a -v
	 * folder's guest root is the kbox process's own user). */
	uid_t image_uid;
	gid_t image_gid;
	struct fs_passthrough *fs;
	struct fuse_server *srv;
	struct virtio_fs vfs;
};

struct mounts {
	unsigned n;
	struct mount m[MOUNTS_MAX];
};

/* One mount as a caller other than `-v` describes it. */
struct mount_spec {
	const char *host;
	const char *guest;
	bool readonly;
	/* As in struct fs_passthrough_config (sandbox.yaml's hidden and
	 * hidden_extra); borrowed, valid until mounts_attach has returned. */
	struct fs_hidden_spec hidden;
};

/* Add one mount with the same checks as mounts_parse (HOST an existing
 * directory, GUEST valid and unused, at most MOUNTS_MAX mounts).  Returns
 * 0, or a negative errno with a message for the user in err that names no
 * option, so the caller can prefix where the mount came from. */
int mounts_add(struct mounts *ms, const struct mount_spec *s, char *err, size_t errlen);

/* Serve host directory dir as the guest's read-only root image.  It takes
 * one of the MOUNTS_MAX slots; there is at most one.  Returns 0, or a
 * negative errno with a message for the user in err that names no option
 * (the image comes from --image or from image: in sandbox.yaml). */
int mounts_set_image(struct mounts *ms, const char *dir, char *err, size_t errlen);

/* The backend configuration mount m is served with (root, read-only,
 * hidden list, the given fd cap).  fc borrows m's strings. */
void mounts_fsp_config(const struct mount *m, unsigned max_fds, struct fs_passthrough_config *fc);

/* The id map mount m is served with (devices/idmap.h): guest root is the
 * kbox process's own user and group for a -v or mounts: folder, the image
 * folder's owner for the image; the identity when that is root. */
struct idmap mounts_ids(const struct mount *m);

/* Check and normalise (trailing slashes dropped) the guest path g (len
 * bytes) into out (MOUNTS_GUEST_MAX + 1 bytes), with the rules of
 * mounts_parse; who prefixes messages ("-v: " or "").  0 or a negative
 * errno with err set.  Disks' guest paths follow the same rules. */
int mounts_guest_path(const char *g, size_t len, char *out, const char *who, char *err,
		      size_t errlen);

/* Add one `-v` argument, HOST:GUEST[:ro|:rw].  HOST must be an existing
 * directory (it may contain ':'; the split is at the last ones); GUEST an
 * absolute path without ".", ".." or empty components, without ',', ':',
 * '"' or whitespace, not "/" and not under /proc, /sys or /dev, and not
 * used twice.  Returns 0, or a negative errno with a message for the user
 * in err. */
int mounts_parse(struct mounts *ms, const char *arg, char *err, size_t errlen);

/* Serve every mount: open the host folders, attach one virtio-fs device
 * each to bus b (which appends them to cmdline) and append the
 * kbox.mounts= list (and kbox.root= for an image).  Also raises the soft fd limit to the hard one, since
 * every file the guest has looked up holds a host fd.  On failure some
 * mounts may be attached: mounts_free after virtio_bus_destroy still frees
 * everything.  Returns 0 or a negative errno with err set. */
int mounts_attach(struct mounts *ms, struct virtio_bus *b, char *cmdline, size_t cmdlen,
		  char *err, size_t errlen);

/* Frees every server and backend; call after the bus is destroyed.  ms
 * may be partly attached or never attached. */
void mounts_free(struct mounts *ms);

#endif
