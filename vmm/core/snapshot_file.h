/* The snapshot file: a paused VM as kbox saves it (docs/snapshots.md).
 *
 *   header (64 bytes) | section table | section payloads  = the metadata
 *   zero padding to a page | guest RAM (ram_len bytes, sparse)
 *
 * The metadata is read whole into memory and checked here before anything
 * uses it: every size and offset, the section kinds and the records each
 * kind must hold with their exact sizes, and a checksum (which finds
 * damage, not forgery: only the file's owner and place are trusted, see
 * snapshot_file_open).  Guest RAM is never read: the caller maps it from the file
 * copy-on-write.  Numbers are little-endian; the vCPU and VM records are
 * the x86-64 KVM structures byte for byte, whose values KVM itself checks
 * when they are set. */
#ifndef KBOX_VMM_CORE_SNAPSHOT_FILE_H
#define KBOX_VMM_CORE_SNAPSHOT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/statebuf.h"

#define SNAPSHOT_FILE_MAGIC        "KBOXSNAP"
#define SNAPSHOT_FILE_VERSION      1u
#define SNAPSHOT_FILE_HDR_LEN      64u
#define SNAPSHOT_FILE_ENT_LEN      24u
#define SNAPSHOT_FILE_MAX_SECTIONS 160u
#define SNAPSHOT_FILE_MAX_CPUS     64u
#define SNAPSHOT_FILE_MAX_DEVS     32u
#define SNAPSHOT_FILE_MAX_META     (64u << 20)
#define SNAPSHOT_FILE_MAX_DEV_BLOB (1u << 20)
#define SNAPSHOT_FILE_MAX_RAM      (1ull << 40)
#define SNAPSHOT_FILE_PAGE         4096u
#define SNAPSHOT_FILE_KEY_LEN      32u
#define SNAPSHOT_FILE_NAME_MAX     100u

/* Section kinds, and the id each takes. */
enum snapshot_file_sec_type {
	SNAPSHOT_FILE_SEC_LAYOUT = 1, /* id 0: what the template was made for */
	SNAPSHOT_FILE_SEC_VM = 2,     /* id 0: in-kernel irqchip, PIT, clock */
	SNAPSHOT_FILE_SEC_CPU = 3,    /* id = vCPU index, 0 .. ncpus-1, each once */
	SNAPSHOT_FILE_SEC_DEV = 4,    /* id = device slot < SNAPSHOT_FILE_MAX_DEVS */
};

/* Records: {u32 tag, u32 len, len bytes, zeros to a multiple of 8}. */
enum snapshot_file_tag {
	/* SNAPSHOT_FILE_SEC_LAYOUT */
	SNAPSHOT_FILE_L_KEY = 1,      /* SNAPSHOT_FILE_KEY_LEN bytes: hash of the boot layout */
	SNAPSHOT_FILE_L_GEOMETRY = 2, /* u32 ncpus, u32 tsc_khz, u64 ram_size, low_ram, high_base */
	/* SNAPSHOT_FILE_SEC_VM */
	SNAPSHOT_FILE_V_CLOCK = 16,   /* struct kvm_clock_data */
	SNAPSHOT_FILE_V_PIT2,         /* struct kvm_pit_state2 */
	SNAPSHOT_FILE_V_PIC0,         /* kvm_irqchip.chip of KVM_IRQCHIP_PIC_MASTER */
	SNAPSHOT_FILE_V_PIC1,         /* ... KVM_IRQCHIP_PIC_SLAVE */
	SNAPSHOT_FILE_V_IOAPIC,       /* ... KVM_IRQCHIP_IOAPIC */
	/* SNAPSHOT_FILE_SEC_CPU */
	SNAPSHOT_FILE_C_REGS = 32,    /* struct kvm_regs */
	SNAPSHOT_FILE_C_SREGS,        /* struct kvm_sregs */
	SNAPSHOT_FILE_C_FPU,          /* struct kvm_fpu (only without XSAVE) */
	SNAPSHOT_FILE_C_XSAVE,        /* KVM_GET_XSAVE(2) area, 4096 .. 1 MiB, a multiple of 64 */
	SNAPSHOT_FILE_C_XCRS,         /* struct kvm_xcrs (optional) */
	SNAPSHOT_FILE_C_LAPIC,        /* struct kvm_lapic_state */
	SNAPSHOT_FILE_C_MP_STATE,     /* struct kvm_mp_state */
	SNAPSHOT_FILE_C_EVENTS,       /* struct kvm_vcpu_events */
	SNAPSHOT_FILE_C_DEBUGREGS,    /* struct kvm_debugregs */
	SNAPSHOT_FILE_C_MSRS,         /* struct kvm_msr_entry[n], 1 <= n <= 1024 */
	SNAPSHOT_FILE_C_CPUID,        /* struct kvm_cpuid_entry2[n], 1 <= n <= 256 */
	/* SNAPSHOT_FILE_SEC_DEV */
	SNAPSHOT_FILE_D_NAME = 64,    /* 1..31 bytes [a-z0-9_-]: the device model's name */
	SNAPSHOT_FILE_D_BLOB,         /* 0..SNAPSHOT_FILE_MAX_DEV_BLOB bytes the device checks itself */
};

#define SNAPSHOT_FILE_MAX_MSRS  1024u
#define SNAPSHOT_FILE_MAX_CPUID 256u

struct snapshot_file_layout {
	uint8_t key[SNAPSHOT_FILE_KEY_LEN];
	uint32_t ncpus, tsc_khz;
	uint64_t ram_size, low_ram, high_base;
};

struct snapshot_file_sec {
	uint32_t type, id;
	const uint8_t *data; /* inside the metadata buffer parsed */
	uint64_t len;
};

/* A parsed, checked file: sections point into the metadata buffer. */
struct snapshot_file_view {
	uint64_t meta_len, ram_off, ram_len;
	unsigned nsec, ndev;
	struct snapshot_file_sec sec[SNAPSHOT_FILE_MAX_SECTIONS];
	struct snapshot_file_layout layout;
};

/* The first SNAPSHOT_FILE_HDR_LEN bytes of a file: magic, version, header length
 * and a metadata length between the header's and SNAPSHOT_FILE_MAX_META, which
 * goes to *meta_len so the caller knows how much to read.  0 or -EBADMSG
 * (-EPROTO for another version), with a line in err. */
int snapshot_file_header(const uint8_t *hdr, size_t len, uint64_t *meta_len, char *err, size_t errlen);

/* Check the whole metadata (meta_len bytes, the header included) of a file
 * of file_size bytes and fill v: the header again, the checksum, the
 * section table (kinds known, ids in range, no (kind, id) twice, payloads
 * 8-aligned, inside the metadata, in order, not overlapping), every
 * section's records (inside it, each tag known to its kind and at most
 * once, the exact size its kind needs, the ones it requires present),
 * one layout and one VM section, a CPU section for each of the layout's
 * vCPUs and no other, RAM of the layout's size at a page-aligned offset
 * right after the metadata, ending the file.  0, or -EBADMSG/-EPROTO with
 * the first fault in err. */
int snapshot_file_parse(const uint8_t *meta, size_t meta_len, uint64_t file_size, struct snapshot_file_view *v,
		char *err, size_t errlen);

/* Write the checksum of meta (len bytes, a header first) into its header:
 * for snapshot_file_build_finish, and for tests and the fuzzer, which change a
 * file on purpose and want its other checks reached. */
void snapshot_file_seal(uint8_t *meta, size_t len);

/* The section of this kind and id, or NULL. */
const struct snapshot_file_sec *snapshot_file_find(const struct snapshot_file_view *v, uint32_t type, uint32_t id);

/* The record tagged tag in a section snapshot_file_parse accepted: 0 with *data
 * and *len set, or -ENOENT. */
int snapshot_file_rec(const struct snapshot_file_sec *s, uint32_t tag, const uint8_t **data, uint32_t *len);

/* Building the metadata of a file: sections one after the other, records
 * into the one begun last.  Errors latch; snapshot_file_build_finish reports. */
struct snapshot_file_builder {
	struct statebuf_writer body; /* payloads, offsets from the first one */
	unsigned nsec;
	uint32_t type[SNAPSHOT_FILE_MAX_SECTIONS], id[SNAPSHOT_FILE_MAX_SECTIONS];
	uint64_t off[SNAPSHOT_FILE_MAX_SECTIONS], len[SNAPSHOT_FILE_MAX_SECTIONS];
	int err;
};

void snapshot_file_build_init(struct snapshot_file_builder *b);
void snapshot_file_build_free(struct snapshot_file_builder *b);
void snapshot_file_build_section(struct snapshot_file_builder *b, uint32_t type, uint32_t id);
void snapshot_file_build_rec(struct snapshot_file_builder *b, uint32_t tag, const void *data, size_t len);
/* A layout section holding l. */
void snapshot_file_build_layout(struct snapshot_file_builder *b, const struct snapshot_file_layout *l);

/* The finished metadata for ram_len bytes of RAM into *meta (initialised
 * here; the caller frees it with statebuf_free): 0, or the first error of the
 * builder (-ENOSPC for too many sections, -EFBIG, -ENOMEM). */
int snapshot_file_build_finish(struct snapshot_file_builder *b, uint64_t ram_len, struct statebuf_writer *meta);

/* 0 if name can name a snapshot in its folder: 1..SNAPSHOT_FILE_NAME_MAX bytes of
 * [A-Za-z0-9._-], not starting with '.'; -EINVAL otherwise. */
int snapshot_file_name_ok(const char *name);

/* Write dir/name atomically: a temporary file (0600, O_EXCL) in dir, the
 * metadata, ram_len bytes of RAM from ram with its all-zero pages left as
 * holes, fsync, rename over name, fsync of dir.  dir must be a folder (not
 * a symlink) owned by the effective user with no group or other access
 * (0700); nothing is written otherwise.  0 or a negative errno, with a
 * line in err; no temporary file is left behind. */
int snapshot_file_write(const char *dir, const char *name, const struct statebuf_writer *meta,
		const void *ram, uint64_t ram_len, char *err, size_t errlen);

/* Write a snapshot into fd (a fork's file, made by the process that
 * will load it): the file must be a regular file of the effective user,
 * no group or other access, at most one link, and empty; the metadata at
 * 0 and RAM as snapshot_file_write does, without fsync (a fork's file
 * lives as long as the sandboxes that map it).  known_zero, when not
 * NULL, has one bit per page of RAM (bit p%8 of byte p/8), set for a
 * page known to be zero: it is left a hole without being read
 * (snapshot_ram_known_zero).  On failure the file is emptied.  0 or a
 * negative errno, with a line in err. */
int snapshot_file_write_fd(int fd, const struct statebuf_writer *meta, const void *ram,
			   uint64_t ram_len, const uint8_t *known_zero, char *err, size_t errlen);

/* snapshot_file_write with known_zero as snapshot_file_write_fd's. */
int snapshot_file_write_known(const char *dir, const char *name, const struct statebuf_writer *meta,
			      const void *ram, uint64_t ram_len, const uint8_t *known_zero, char *err,
			      size_t errlen);

/* An unnamed (O_TMPFILE) file, mode 0600, in dir (a private folder as
 * for snapshot_file_write; a named file unlinked at once where the file
 * system has no O_TMPFILE): gone when its last descriptor and mapping
 * are.  The fd, or a negative errno with a line in err. */
int snapshot_file_make_unnamed(const char *dir, char *err, size_t errlen);

/* An opened, checked snapshot. */
struct snapshot_file_file {
	int fd;
	uint8_t *meta;
	uint64_t size;       /* bytes */
	uint64_t disk_bytes; /* what it takes on disk (st_blocks) */
	struct snapshot_file_view v;
};

/* Open dir/name and check it: dir as for snapshot_file_write; the file a regular
 * file (no symlink, no FIFO), owned by the effective user, with one link
 * and no group or other access; its metadata as snapshot_file_parse.  Only a file
 * kbox itself wrote into its private folder passes (another user's file,
 * or one a hard link put there, does not).  0 with f filled, or a
 * negative errno with a line in err and nothing left open. */
int snapshot_file_open(const char *dir, const char *name, struct snapshot_file_file *f, char *err, size_t errlen);

/* The same for a file already open as fd (kept by the caller; f holds
 * a duplicate): a regular file of the effective user, no group or other
 * access, at most one link, its metadata as snapshot_file_parse. */
int snapshot_file_open_fd(int fd, struct snapshot_file_file *f, char *err, size_t errlen);

/* Close what snapshot_file_open opened; safe after a failed snapshot_file_open and twice. */
void snapshot_file_close(struct snapshot_file_file *f);

#endif
