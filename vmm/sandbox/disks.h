/* Disk volumes (`kbox run --disk NAME:GUEST_PATH[:size=8G][:ro]` and the
 * `disks:` section of sandbox.yaml; docs/disks.md).
 *
 * A volume is a sparse regular file NAME.img in the disk folder
 * (KBOX_DISK_DIR, else kbox's data folder's disks/, mode 0700), mode 0600,
 * holding an ext4 filesystem that the host's mkfs.ext4 made on the new
 * file.  The host never reads the filesystem again: to the host it is the
 * guest's blocks, served by one virtio-blk device (devices/virtio_blk.h)
 * whose serial (GET_ID) is NAME.  The guest learns what to mount from the
 * kernel command line:
 *     kbox.disks=NAME:/var/lib/containers:rw,NAME2:/data:ro:grow
 * (":grow": the file was made larger, guest-init grows the filesystem).
 *
 * While a sandbox runs, its kbox process holds an open-file-description
 * lock on each volume: a write lock for a read-write disk, a read lock for
 * a read-only one.  So a volume is in one sandbox read-write, or in any
 * number read-only, and `kbox disk rm` (which takes the write lock before
 * it unlinks) never removes one in use. */
#ifndef KBOX_DISKS_H
#define KBOX_DISKS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/blk_file.h"
#include "devices/virtio_blk.h"
#include "vmm/core/virtio_bus.h"

#define DISKS_MAX 4u
#define DISKS_NAME_MAX 20u   /* the virtio-blk serial holds 20 bytes */
#define DISKS_GUEST_MAX 160u /* as MOUNTS_GUEST_MAX */
#define DISKS_SIZE_DEFAULT (8ull << 30)
#define DISKS_SIZE_MIN (64ull << 20)
#define DISKS_SIZE_MAX (1ull << 40)

struct disk {
	char name[DISKS_NAME_MAX + 1];
	char guest[DISKS_GUEST_MAX + 1];
	uint64_t size;  /* bytes; DISKS_SIZE_DEFAULT when not given */
	bool size_set;  /* size= was given */
	bool readonly;
	/* Set by disks_open. */
	char path[PATH_MAX];
	int fd;         /* holds the lock for the VM's life; -1 when closed */
	bool created;   /* made by this run */
	bool grown;     /* made larger by this run: the guest grows the fs */
	struct blk_backend be;
	bool be_open;
	struct virtio_blk blk;
};

struct disks {
	unsigned n;
	struct disk d[DISKS_MAX];
};

/* A volume name: 1 to DISKS_NAME_MAX letters, digits, '_', '.' or '-',
 * starting with a letter or digit. */
bool disks_name_ok(const char *name);

/* "8G", "512M", "1T", "1073741824" (bytes); K/M/G/T binary, an optional
 * trailing "B" or "iB".  0, or -EINVAL (not a size) / -ERANGE (outside
 * DISKS_SIZE_MIN..DISKS_SIZE_MAX), with a message in err. */
int disks_parse_size(const char *s, uint64_t *out, char *err, size_t errlen);

/* Add one disk, checked: a valid name not used twice, a guest path as for
 * mounts (absolute, no '.', '..', ',', ':', spaces, not /, not under
 * /proc, /sys, /dev) and not used twice, at most DISKS_MAX.  size 0 means
 * the default (or the existing volume's size).  0, or a negative errno
 * with a message that names no option. */
int disks_add(struct disks *ds, const char *name, const char *guest, uint64_t size, bool ro,
	      char *err, size_t errlen);

/* Add one --disk argument (or a disks: entry written as a string):
 * NAME:GUEST_PATH followed by any of ":size=SIZE", ":ro", ":rw".  0 or a
 * negative errno with a message in err that names no option. */
int disks_parse(struct disks *ds, const char *arg, char *err, size_t errlen);

/* The disk folder into buf: $KBOX_DISK_DIR if absolute, else kbox's data
 * folder's disks/.  0, -ENOENT or -ENAMETOOLONG. */
int disks_dir(char *buf, size_t len);

/* Open (creating and formatting when missing; growing when size= asks for
 * more) and lock every volume.  A read-only disk must exist.  Fails
 * (-EBUSY) when another sandbox holds a volume in a conflicting way, and
 * (-EINVAL) when size= asks for less than the volume has.  On failure the
 * volumes opened so far stay open: disks_free closes them.  0 or a
 * negative errno with a message for the user in err. */
int disks_open(struct disks *ds, char *err, size_t errlen);

/* Attach one virtio-blk device per opened volume to bus b (which adds it
 * to cmdline) and append kbox.disks=.  0 or a negative errno with err
 * set. */
int disks_attach(struct disks *ds, struct virtio_bus *b, char *cmdline, size_t cmdlen,
		 char *err, size_t errlen);

/* Close every volume (and so drop its lock).  Call after the bus is
 * destroyed.  Safe on disks never opened. */
void disks_free(struct disks *ds);

/* One volume of the disk folder, for `kbox disk ls`. */
struct disks_volume {
	char name[DISKS_NAME_MAX + 1];
	uint64_t size, allocated; /* bytes: the file's length, its blocks */
	int in_use;               /* 1 locked by a sandbox, 0 not, -1 unknown */
};

/* Call fn for each volume in the disk folder (files NAME.img with a valid
 * NAME, in no particular order).  0, -ENOENT when there is no folder, or
 * another negative errno. */
int disks_each(void (*fn)(const struct disks_volume *v, void *ctx), void *ctx);

/* Remove volume name: refused (-EBUSY) while a sandbox holds it, -ENOENT
 * when there is none.  0 or a negative errno with err set. */
int disks_remove(const char *name, char *err, size_t errlen);

#endif
