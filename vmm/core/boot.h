/* Linux x86_64 boot protocol: kernel images, boot_params, e820, page
 * tables.  Pure code over guest_mem; nothing here touches KVM. */
#ifndef KBOX_BOOT_H
#define KBOX_BOOT_H

#include <stddef.h>
#include <stdint.h>

#include "lib/guest_mem.h"

/* Fixed guest-physical layout below 1 MiB (see docs/boot.md). */
#define BOOT_GDT_ADDR      0x0500ull
#define BOOT_PARAMS_ADDR   0x7000ull
#define BOOT_STACK_TOP     0x8ff0ull
#define BOOT_PML4_ADDR     0x9000ull
#define BOOT_PDPT_ADDR     0xa000ull
#define BOOT_PD_ADDR       0xb000ull /* 4 pages: identity map of 4 GiB */
#define BOOT_CMDLINE_ADDR  0x20000ull
#define BOOT_CMDLINE_MAX   0x10000ull /* room reserved; the kernel's limit applies */
#define BOOT_EBDA_START    0x9fc00ull
#define BOOT_HIMEM_START   0x100000ull
#define BOOT_LOW_RAM_MAX   0xc0000000ull /* RAM above this goes above 4 GiB */
#define BOOT_HIGH_RAM_BASE 0x100000000ull

/* The longest kernel command line kbox builds (x86's COMMAND_LINE_SIZE
 * less its NUL): the limit of an ELF vmlinux, and what a bzImage of ours
 * accepts.  boot_setup still checks the image's own limit. */
#define BOOT_KERNEL_CMDLINE_MAX 2047u

/* Append printf-style text to the NUL-terminated cmdline (buffer of
 * cmdlen bytes).  Returns 0, or -E2BIG with cmdline unchanged when the
 * result would not fit the buffer or BOOT_KERNEL_CMDLINE_MAX; the caller
 * says what did not fit. */
__attribute__((format(printf, 3, 4)))
int boot_cmdline_append(char *cmdline, size_t cmdlen, const char *fmt, ...);

/* Move every space-separated word of cmdline that starts with prefix to
 * the end of out (NUL-terminated, each word after a space), closing the
 * gaps in cmdline: the per-run settings that go to guest-init in its run
 * configuration rather than on the command line.  0, or -E2BIG when out
 * (outlen bytes) cannot take them (cmdline is then unchanged). */
int boot_cmdline_take(char *cmdline, const char *prefix, char *out, size_t outlen);

enum boot_kind { BOOT_ELF, BOOT_BZIMAGE };

struct boot_image {
	enum boot_kind kind;
	uint64_t entry;      /* 64-bit entry point (guest physical) */
	uint64_t load_start; /* lowest guest-physical byte written */
	uint64_t load_end;   /* one past the highest byte reserved */
	uint16_t version;    /* boot protocol version (bzImage) */
	uint32_t cmdline_max;/* longest command line the kernel accepts */
	uint32_t initrd_max; /* highest address the initrd may end at */
	uint8_t setup_hdr[0x80]; /* bzImage setup header bytes from 0x1f1 */
	size_t setup_hdr_len;
};

/* Load a kernel image (vmlinux ELF or bzImage, detected from its bytes)
 * into guest memory.  Everything is validated before anything is copied:
 * header fields, program headers inside the file, segment sizes, no
 * overlap between segments or with the boot area below 1 MiB, and the
 * whole destination inside RAM.  Returns 0 or -ENOEXEC (not a kernel we
 * know), -EINVAL (inconsistent image), -ENOMEM (does not fit in RAM);
 * err gets one line saying what is wrong. */
int boot_load_kernel(const struct guest_mem *gm, const uint8_t *img, size_t len,
		     struct boot_image *out, char *err, size_t errlen);

/* Place an initrd (possibly several concatenated cpio archives) as high
 * as the kernel allows in low RAM, page-aligned, above the kernel.
 * Returns 0 and the address, or -ENOMEM with err set. */
int boot_place_initrd(const struct guest_mem *gm, const struct boot_image *k,
		      const uint8_t *data, size_t len, uint64_t *addr, char *err,
		      size_t errlen);

struct boot_setup {
	uint64_t low_ram;      /* bytes of RAM from 0 */
	uint64_t high_ram;     /* bytes of RAM from 4 GiB (0 if none) */
	const char *cmdline;
	uint64_t initrd_addr, initrd_len; /* 0 len = none */
};

/* Write boot_params (zero page with e820 map, command line pointer,
 * initrd), the command line, a GDT and identity page tables for the first
 * 4 GiB.  Returns 0, -E2BIG if the command line is longer than the kernel
 * accepts, -EFAULT if a structure does not fit in RAM. */
int boot_write_params(const struct guest_mem *gm, const struct boot_image *k,
		      const struct boot_setup *s, char *err, size_t errlen);

/* e820 map for the layout above; returns the number of entries written
 * (at most max).  Exposed for tests. */
struct boot_e820 {
	uint64_t addr, size;
	uint32_t type;
};
unsigned boot_e820_map(uint64_t low_ram, uint64_t high_ram, struct boot_e820 *e,
		       unsigned max);

#endif
