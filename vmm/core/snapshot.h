/* Saving a paused VM to a snapshot file and starting a fresh VM from one
 * (docs/snapshots.md): every vCPU's registers, special registers,
 * FPU/XSAVE, XCRs, MSRs (the TSC among them), LAPIC, pending events, MP
 * state, debug registers and CPUID; the VM's PIC, IO-APIC, PIT and clock;
 * each device's own blob; guest RAM, mapped back from the file
 * copy-on-write.  The file format and its checks are snapshot_file.h's. */
#ifndef KBOX_VMM_CORE_SNAPSHOT_H
#define KBOX_VMM_CORE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "lib/statebuf.h"
#include "vmm/core/snapshot_file.h"
#include "vmm/core/vm.h"

/* A device that keeps state outside guest RAM: save appends its state to
 * w; load gets back exactly those bytes, checks every one of them (they
 * come from a file) and either takes them whole or refuses with a line
 * in err.  Both return 0 or a negative errno.  name is 1..31 bytes of
 * [a-z0-9_-], slot < SNAPSHOT_FILE_MAX_DEVS and unique. */
struct snapshot_dev {
	const char *name;
	uint32_t slot;
	void *ctx;
	int (*save)(void *ctx, struct statebuf_writer *w, char *err, size_t errlen);
	int (*load)(void *ctx, const uint8_t *blob, size_t len, char *err, size_t errlen);
};

/* Figures of one save or restore. */
struct snapshot_stats {
	double ms;              /* the whole call */
	double state_ms;        /* vCPU, VM and device state, RAM excluded */
	uint64_t file_bytes;    /* the file's size */
	uint64_t disk_bytes;    /* what it takes on disk (RAM's zero pages are holes) */
	unsigned msrs;          /* MSRs per vCPU */
	unsigned xsave_bytes;   /* 0 when the FPU state stood in for XSAVE */
};

/* Whether this /dev/kvm can save and restore a VM as snapshot_save does: the
 * capabilities it needs (KVM_CAP_IMMEDIATE_EXIT, VCPU_EVENTS, DEBUGREGS,
 * MP_STATE, ADJUST_CLOCK, PIT_STATE2) are all there.  0, or -ENOTSUP
 * with the first one missing named in why.  report, when not NULL, gets
 * one "NAME=VALUE" word per capability looked at, for --verbose. */
int snapshot_probe(struct vm *vm, char *report, size_t replen, char *why, size_t whylen);

/* Save vm to dir/name (snapshot_file_write: atomically, in a private folder).
 * vm's vCPU threads must have ended (vm_run returned); each vCPU first
 * re-enters KVM_RUN once with immediate_exit set, so that the port or
 * MMIO access it stopped on is complete in its state.  key goes into the
 * layout (the hash of what the VM was booted from).  The vCPUs may run
 * again afterwards.  0 or a negative errno with a line in err; st, when
 * not NULL, gets the figures. */
int snapshot_save(struct vm *vm, const uint8_t key[SNAPSHOT_FILE_KEY_LEN], const struct snapshot_dev *devs,
	      unsigned ndev, const char *dir, const char *name, struct snapshot_stats *st, char *err,
	      size_t errlen);

/* A save's first half: everything but RAM (vCPU, VM and device state),
 * built as the file's metadata into meta (statebuf_init'ed, the
 * caller's to free); snapshot_file_write or snapshot_file_write_fd then
 * writes it with RAM.  The vCPUs must have ended.  0 or a negative errno
 * with a line in err; st, when not NULL, gets the MSR and XSAVE figures. */
int snapshot_save_state(struct vm *vm, const uint8_t key[SNAPSHOT_FILE_KEY_LEN],
			const struct snapshot_dev *devs, unsigned ndev, struct statebuf_writer *meta,
			struct snapshot_stats *st, char *err, size_t errlen);

/* Load dir/name into vm, made by vm_create with the snapshot's vCPU count
 * and RAM size and not yet run (vm_setup_cpus is not needed): the file
 * must be one snapshot_file_open accepts whose layout key is key, made on a host
 * with the same TSC frequency; guest RAM becomes a copy-on-write mapping
 * of the file (MAP_PRIVATE: VMs started from one file share the pages
 * none of them wrote); then the VM, vCPU and device state, each device
 * getting its own section (a device without one, or a section without a
 * device, fails the restore).  On failure vm is half-restored and must be
 * destroyed.  0 or a negative errno with a line in err. */
int snapshot_restore(struct vm *vm, const uint8_t key[SNAPSHOT_FILE_KEY_LEN], const struct snapshot_dev *devs,
		 unsigned ndev, const char *dir, const char *name, struct snapshot_stats *st,
		 char *err, size_t errlen);

/* The same from fd (snapshot_file_open_fd's checks; fd stays the
 * caller's, the RAM mapping holds the file). */
int snapshot_restore_fd(struct vm *vm, const uint8_t key[SNAPSHOT_FILE_KEY_LEN], const struct snapshot_dev *devs,
			unsigned ndev, int fd, struct snapshot_stats *st, char *err, size_t errlen);

/* Which pages of vm's RAM are zero without reading them, for
 * snapshot_file_write_fd: those the process never brought in (neither
 * present nor swapped, by pagemap_fd, an open /proc/self/pagemap of
 * this process) that come from nothing (anonymous RAM) or from a hole
 * of the file RAM was restored from (vm->ram_file).  *out: one bit per
 * page, to free.  0, or a negative errno (then no map: read them all).
 * Only while the vCPUs are stopped is the answer exact. */
int snapshot_ram_known_zero(const struct vm *vm, int pagemap_fd, uint8_t **out);

#endif
