/* Template snapshots (issue 19, docs/snapshots.md): where kbox keeps them
 * and what names one.  A template is a VM saved where guest-init waits
 * for its run configuration; every input that shapes the guest up to
 * that point goes into its key, so two runs with the same key may start
 * from the same file. */
#ifndef KBOX_VMM_SANDBOX_TEMPLATE_H
#define KBOX_VMM_SANDBOX_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/core/snapshot_file.h"

/* File names: TEMPLATE_PREFIX, 64 hex digits of the key, TEMPLATE_SUFFIX. */
#define TEMPLATE_PREFIX "t-"
#define TEMPLATE_SUFFIX ".snap"
#define TEMPLATE_NAME_LEN (sizeof TEMPLATE_PREFIX - 1 + 2 * SNAPSHOT_FILE_KEY_LEN + sizeof TEMPLATE_SUFFIX - 1)

/* Everything a template depends on. */
struct template_inputs {
	const char *kernel, *initrd; /* files, identified by stat (device, inode, size, times) */
	unsigned cpus;
	uint64_t memory_mib;
	unsigned tsc_khz;
	bool pvm;
	const char *cmdline; /* the kernel command line as written to boot_params */
	const char *devices; /* virtio_bus_describe's text */
};

/* The templates' folder into buf: $KBOX_TEMPLATE_DIR if absolute, else
 * $XDG_CACHE_HOME/kbox/templates if that is absolute, else
 * $HOME/.cache/kbox/templates.  With create, the folder is made (mode
 * 0700) when missing.  0, or a negative errno with a line in err. */
int template_dir(char *buf, size_t len, bool create, char *err, size_t errlen);

/* A file for a fork (kbox fork): an unnamed (O_TMPFILE) private file in
 * the templates' folder, made when missing and checked private (a
 * named one unlinked at once where the file system has no O_TMPFILE),
 * gone when its last descriptor and mapping are.  The fd, or a negative
 * errno with a line in err. */
int template_fork_file(char *err, size_t errlen);

/* The key of in (a SHA-256 over a text naming kbox's own binary by stat,
 * then each input) and the file name for it (TEMPLATE_NAME_LEN + 1 bytes).
 * 0, or a negative errno with a line in err (a file cannot be stat'ed). */
int template_key(const struct template_inputs *in, uint8_t key[SNAPSHOT_FILE_KEY_LEN],
		 char name[TEMPLATE_NAME_LEN + 1], char *err, size_t errlen);

/* 1 if name is a template's file name (TEMPLATE_PREFIX, 64 lower-case hex
 * digits, TEMPLATE_SUFFIX), else 0. */
int template_name_ok(const char *name);

/* Mark dir/name used now: its access time set to the present, its
 * modification time (when it was made) left alone, so `kbox snapshot ls`
 * and `prune --unused-for` see when a run last started from it whatever
 * the mount's atime options.  Only a regular file is touched (no symlink
 * is followed).  0 or a negative errno. */
int template_touch(const char *dir, const char *name);

/* Days after which a run that makes a template removes the others no run
 * started from (and none was made) in that time (docs/snapshots.md). */
#define TEMPLATE_EXPIRE_DAYS 30

/* Remove from dir the templates (regular files with a template's name,
 * yours, one link) whose access and modification times are both more
 * than days days old, keep excepted (NULL: none).  A template removed
 * is safe: the next run of its layout boots cold and makes it again.
 * The number removed (their disk space added to *freed when freed is
 * not NULL), or a negative errno when dir cannot be opened. */
long template_expire(const char *dir, const char *keep, long days, uint64_t *freed);

#endif
