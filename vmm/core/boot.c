#include "vmm/core/boot.h"

#include <asm/bootparam.h>
#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/errbuf.h"

/* Kernel's own limits when an image does not say (x86 COMMAND_LINE_SIZE
 * less its NUL, as a bzImage's cmdline_size counts it, and the 32-bit
 * ramdisk_image field). */
#define ELF_CMDLINE_MAX BOOT_KERNEL_CMDLINE_MAX
#define ELF_INITRD_MAX  0x7fffffffu
#define MAX_PHDRS       64u
#define E820_RAM        1u
#define E820_RESERVED   2u

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static int load_elf(const struct guest_mem *gm, const uint8_t *img, size_t len,
		    struct boot_image *out, char *err, size_t errlen)
{
	Elf64_Ehdr eh;
	if (len < sizeof eh)
		return errbuf_fail(err, errlen, -ENOEXEC, "ELF image truncated (%zu bytes)", len);
	memcpy(&eh, img, sizeof eh);
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
	    eh.e_machine != EM_X86_64)
		return errbuf_fail(err, errlen, -ENOEXEC, "not an x86_64 little-endian ELF64 kernel");
	if (eh.e_type != ET_EXEC)
		return errbuf_fail(err, errlen, -ENOEXEC, "ELF image is not an executable (type %u)",
			    eh.e_type);
	if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > MAX_PHDRS)
		return errbuf_fail(err, errlen, -EINVAL, "ELF program header table is malformed");
	if (eh.e_phoff > len || (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > len - eh.e_phoff)
		return errbuf_fail(err, errlen, -EINVAL, "ELF program headers lie outside the file");

	Elf64_Phdr ph[MAX_PHDRS];
	memcpy(ph, img + eh.e_phoff, eh.e_phnum * sizeof(Elf64_Phdr));
	uint64_t lo = UINT64_MAX, hi = 0;
	int entry_ok = 0, loads = 0;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		const Elf64_Phdr *p = &ph[i];
		if (p->p_type != PT_LOAD || p->p_memsz == 0)
			continue;
		if (p->p_offset > len || p->p_filesz > len - p->p_offset)
			return errbuf_fail(err, errlen, -EINVAL,
				    "ELF segment %u lies outside the file", i);
		if (p->p_filesz > p->p_memsz)
			return errbuf_fail(err, errlen, -EINVAL,
				    "ELF segment %u has more file bytes than memory", i);
		if (p->p_paddr < BOOT_HIMEM_START)
			return errbuf_fail(err, errlen, -EINVAL,
				    "ELF segment %u at 0x%llx overlaps the boot area below 1 MiB",
				    i, (unsigned long long)p->p_paddr);
		if (guest_mem_ptr(gm, p->p_paddr, p->p_memsz) == NULL)
			return errbuf_fail(err, errlen, -ENOMEM,
				    "ELF segment %u (0x%llx, %llu bytes) does not fit in guest RAM",
				    i, (unsigned long long)p->p_paddr,
				    (unsigned long long)p->p_memsz);
		for (unsigned j = 0; j < i; j++) {
			const Elf64_Phdr *q = &ph[j];
			if (q->p_type != PT_LOAD || q->p_memsz == 0)
				continue;
			/* Both ranges are known to be inside RAM, so the sums
			 * below cannot wrap. */
			if (p->p_paddr < q->p_paddr + q->p_memsz &&
			    q->p_paddr < p->p_paddr + p->p_memsz)
				return errbuf_fail(err, errlen, -EINVAL,
					    "ELF segments %u and %u overlap", j, i);
		}
		if (eh.e_entry >= p->p_paddr && eh.e_entry - p->p_paddr < p->p_filesz)
			entry_ok = 1;
		if (p->p_paddr < lo)
			lo = p->p_paddr;
		if (p->p_paddr + p->p_memsz > hi)
			hi = p->p_paddr + p->p_memsz;
		loads++;
	}
	if (!loads)
		return errbuf_fail(err, errlen, -EINVAL, "ELF image has no loadable segment");
	if (!entry_ok)
		return errbuf_fail(err, errlen, -EINVAL,
			    "ELF entry point 0x%llx is not inside a loaded segment",
			    (unsigned long long)eh.e_entry);

	for (unsigned i = 0; i < eh.e_phnum; i++) {
		const Elf64_Phdr *p = &ph[i];
		if (p->p_type != PT_LOAD || p->p_memsz == 0)
			continue;
		uint8_t *dst = guest_mem_ptr(gm, p->p_paddr, p->p_memsz);
		memcpy(dst, img + p->p_offset, p->p_filesz);
		memset(dst + p->p_filesz, 0, p->p_memsz - p->p_filesz);
	}
	*out = (struct boot_image){
		.kind = BOOT_ELF,
		.entry = eh.e_entry,
		.load_start = lo,
		.load_end = hi,
		.cmdline_max = ELF_CMDLINE_MAX,
		.initrd_max = ELF_INITRD_MAX,
	};
	return 0;
}

/* Offsets into a bzImage, from the boot protocol's setup header table. */
enum {
	BZ_SETUP_SECTS = 0x1f1,
	BZ_SYSSIZE = 0x1f4,
	BZ_BOOT_FLAG = 0x1fe,
	BZ_JUMP = 0x200,
	BZ_HEADER = 0x202,
	BZ_VERSION = 0x206,
	BZ_LOADFLAGS = 0x211,
	BZ_INITRD_MAX = 0x22c,
	BZ_RELOCATABLE = 0x234,
	BZ_XLOADFLAGS = 0x236,
	BZ_CMDLINE_SIZE = 0x238,
	BZ_PREF_ADDRESS = 0x258,
	BZ_INIT_SIZE = 0x260,
	BZ_MIN_LEN = 0x264,
};

static int load_bzimage(const struct guest_mem *gm, const uint8_t *img, size_t len,
			struct boot_image *out, char *err, size_t errlen)
{
	uint16_t version = rd16(img + BZ_VERSION);
	if (version < 0x020c)
		return errbuf_fail(err, errlen, -ENOEXEC,
			    "bzImage boot protocol %u.%02u is too old (need 2.12 for 64-bit entry)",
			    version >> 8, version & 0xff);
	if (!(img[BZ_XLOADFLAGS] & 1))
		return errbuf_fail(err, errlen, -ENOEXEC, "bzImage has no 64-bit entry point");
	if (!(img[BZ_LOADFLAGS] & 1))
		return errbuf_fail(err, errlen, -ENOEXEC, "bzImage is not loaded high");
	unsigned sects = img[BZ_SETUP_SECTS] ? img[BZ_SETUP_SECTS] : 4;
	size_t setup_len = (size_t)(sects + 1) * 512;
	if (setup_len >= len)
		return errbuf_fail(err, errlen, -EINVAL, "bzImage truncated inside its setup code");
	uint64_t payload = len - setup_len;
	/* syssize counts the protected-mode kernel in 16-byte units: a file
	 * cut short is refused here instead of crashing the guest later. */
	uint64_t sys = (uint64_t)rd32(img + BZ_SYSSIZE) * 16;
	if (payload < sys)
		return errbuf_fail(err, errlen, -EINVAL,
			    "bzImage truncated: %llu bytes of kernel after the setup code, "
			    "its header says %llu", (unsigned long long)payload,
			    (unsigned long long)sys);
	if (payload <= 0x200)
		return errbuf_fail(err, errlen, -EINVAL,
			    "bzImage truncated before its 64-bit entry point");
	uint64_t load = BOOT_HIMEM_START;
	if (img[BZ_RELOCATABLE]) {
		uint64_t pref = rd64(img + BZ_PREF_ADDRESS);
		if (pref >= BOOT_HIMEM_START)
			load = pref;
	}
	uint64_t need = rd32(img + BZ_INIT_SIZE);
	if (need < payload)
		need = payload;
	if (guest_mem_ptr(gm, load, need) == NULL)
		return errbuf_fail(err, errlen, -ENOMEM,
			    "bzImage needs %llu bytes at 0x%llx, beyond guest RAM",
			    (unsigned long long)need, (unsigned long long)load);
	memcpy(guest_mem_ptr(gm, load, payload), img + setup_len, payload);

	*out = (struct boot_image){
		.kind = BOOT_BZIMAGE,
		.entry = load + 0x200,
		.load_start = load,
		.load_end = load + need,
		.version = version,
		.cmdline_max = rd32(img + BZ_CMDLINE_SIZE),
		.initrd_max = rd32(img + BZ_INITRD_MAX),
	};
	/* The setup header runs from 0x1f1 to the end named by the jump at
	 * 0x200; copy at most what struct setup_header holds. */
	size_t hdr_end = (size_t)BZ_HEADER + img[BZ_JUMP + 1];
	size_t hdr_len = hdr_end - BZ_SETUP_SECTS;
	if (hdr_len > sizeof(struct setup_header))
		hdr_len = sizeof(struct setup_header);
	if (hdr_len > sizeof out->setup_hdr)
		hdr_len = sizeof out->setup_hdr;
	memcpy(out->setup_hdr, img + BZ_SETUP_SECTS, hdr_len);
	out->setup_hdr_len = hdr_len;
	/* Protocols before 2.06 had no field and a limit of 255 bytes. */
	if (out->cmdline_max == 0)
		out->cmdline_max = 255;
	return 0;
}

int boot_load_kernel(const struct guest_mem *gm, const uint8_t *img, size_t len,
		     struct boot_image *out, char *err, size_t errlen)
{
	if (len >= 4 && memcmp(img, ELFMAG, SELFMAG) == 0)
		return load_elf(gm, img, len, out, err, errlen);
	if (len >= BZ_MIN_LEN && rd16(img + BZ_BOOT_FLAG) == 0xaa55 &&
	    memcmp(img + BZ_HEADER, "HdrS", 4) == 0)
		return load_bzimage(gm, img, len, out, err, errlen);
	return errbuf_fail(err, errlen, -ENOEXEC,
		    "not a Linux kernel image (expected a vmlinux ELF or a bzImage)");
}

int boot_place_initrd(const struct guest_mem *gm, const struct boot_image *k,
		      const uint8_t *data, size_t len, uint64_t *addr, char *err,
		      size_t errlen)
{
	uint64_t low_end = 0;
	for (unsigned i = 0; i < gm->nr; i++)
		if (gm->r[i].gpa == 0)
			low_end = gm->r[i].size;
	uint64_t top = low_end;
	if ((uint64_t)k->initrd_max + 1 < top)
		top = (uint64_t)k->initrd_max + 1;
	uint64_t floor = (k->load_end + 0xfff) & ~0xfffull;
	if (len == 0 || len > top || ((top - len) & ~0xfffull) < floor)
		return errbuf_fail(err, errlen, -ENOMEM,
			    "initrd of %zu bytes does not fit in guest RAM above the kernel; "
			    "give the guest more memory", len);
	uint64_t at = (top - len) & ~0xfffull;
	memcpy(guest_mem_ptr(gm, at, len), data, len);
	*addr = at;
	return 0;
}

unsigned boot_e820_map(uint64_t low_ram, uint64_t high_ram, struct boot_e820 *e,
		       unsigned max)
{
	struct boot_e820 m[4];
	unsigned n = 0;
	m[n++] = (struct boot_e820){ 0, BOOT_EBDA_START, E820_RAM };
	m[n++] = (struct boot_e820){ BOOT_EBDA_START, BOOT_HIMEM_START - BOOT_EBDA_START,
				     E820_RESERVED };
	if (low_ram > BOOT_HIMEM_START)
		m[n++] = (struct boot_e820){ BOOT_HIMEM_START, low_ram - BOOT_HIMEM_START,
					     E820_RAM };
	if (high_ram)
		m[n++] = (struct boot_e820){ BOOT_HIGH_RAM_BASE, high_ram, E820_RAM };
	if (n > max)
		n = max;
	memcpy(e, m, n * sizeof *e);
	return n;
}

int boot_write_params(const struct guest_mem *gm, const struct boot_image *k,
		      const struct boot_setup *s, char *err, size_t errlen)
{
	/* cmdline_max excludes the NUL; the area at BOOT_CMDLINE_ADDR holds it. */
	size_t cl = strlen(s->cmdline);
	uint64_t max = k->cmdline_max < BOOT_CMDLINE_MAX - 1 ? k->cmdline_max
							     : BOOT_CMDLINE_MAX - 1;
	if (cl > max)
		return errbuf_fail(err, errlen, -E2BIG,
			    "kernel command line is %zu bytes; this kernel accepts at most %llu",
			    cl, (unsigned long long)max);
	if (guest_mem_write(gm, BOOT_CMDLINE_ADDR, s->cmdline, cl + 1))
		return errbuf_fail(err, errlen, -EFAULT, "no guest RAM for the command line");

	struct boot_params bp;
	memset(&bp, 0, sizeof bp);
	if (k->kind == BOOT_BZIMAGE)
		memcpy(&bp.hdr, k->setup_hdr, k->setup_hdr_len);
	else {
		bp.hdr.boot_flag = 0xaa55;
		bp.hdr.header = 0x53726448; /* "HdrS" */
		bp.hdr.kernel_alignment = 0x01000000;
	}
	bp.hdr.type_of_loader = 0xff;
	bp.hdr.cmd_line_ptr = (uint32_t)BOOT_CMDLINE_ADDR;
	bp.hdr.cmdline_size = (uint32_t)cl;
	if (s->initrd_len) {
		bp.hdr.ramdisk_image = (uint32_t)s->initrd_addr;
		bp.hdr.ramdisk_size = (uint32_t)s->initrd_len;
	}
	struct boot_e820 map[E820_MAX_ENTRIES_ZEROPAGE];
	unsigned n = boot_e820_map(s->low_ram, s->high_ram, map, E820_MAX_ENTRIES_ZEROPAGE);
	for (unsigned i = 0; i < n; i++) {
		bp.e820_table[i].addr = map[i].addr;
		bp.e820_table[i].size = map[i].size;
		bp.e820_table[i].type = map[i].type;
	}
	bp.e820_entries = (uint8_t)n;
	if (guest_mem_write(gm, BOOT_PARAMS_ADDR, &bp, sizeof bp))
		return errbuf_fail(err, errlen, -EFAULT, "no guest RAM for boot_params");

	/* Selectors 0x10 (code) and 0x18 (data) as the 64-bit boot protocol
	 * requires; 0x20 is a TSS the VMM loads so the task register is
	 * valid. */
	uint64_t gdt[5] = { 0, 0, 0x00af9b000000ffffull, 0x00cf93000000ffffull,
			    0x00008b0000000067ull };
	if (guest_mem_write(gm, BOOT_GDT_ADDR, gdt, sizeof gdt))
		return errbuf_fail(err, errlen, -EFAULT, "no guest RAM for the GDT");

	/* Identity map of the first 4 GiB with 2 MiB pages. */
	uint64_t pml4[512] = { BOOT_PDPT_ADDR | 3 };
	uint64_t pdpt[512] = { 0 };
	for (unsigned i = 0; i < 4; i++)
		pdpt[i] = (BOOT_PD_ADDR + i * 0x1000ull) | 3;
	if (guest_mem_write(gm, BOOT_PML4_ADDR, pml4, sizeof pml4) ||
	    guest_mem_write(gm, BOOT_PDPT_ADDR, pdpt, sizeof pdpt))
		return errbuf_fail(err, errlen, -EFAULT, "no guest RAM for page tables");
	for (unsigned i = 0; i < 4 * 512; i++) {
		uint64_t pde = ((uint64_t)i << 21) | 0x83;
		if (guest_mem_write(gm, BOOT_PD_ADDR + i * 8ull, &pde, 8))
			return errbuf_fail(err, errlen, -EFAULT, "no guest RAM for page tables");
	}
	return 0;
}

int boot_cmdline_append(char *cmdline, size_t cmdlen, const char *fmt, ...)
{
	size_t used = strnlen(cmdline, cmdlen);
	if (used >= cmdlen)
		return -E2BIG;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(cmdline + used, cmdlen - used, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= cmdlen - used || used + (size_t)n > BOOT_KERNEL_CMDLINE_MAX) {
		cmdline[used] = '\0';
		return -E2BIG;
	}
	return 0;
}

int boot_cmdline_take(char *cmdline, const char *prefix, char *out, size_t outlen)
{
	size_t plen = strlen(prefix), used = strnlen(out, outlen), need = 0;
	char *r, *w;

	if (used >= outlen)
		return -E2BIG;
	/* First the room the words need, so that a failure changes nothing. */
	for (r = cmdline; *r;) {
		size_t n;

		while (*r == ' ')
			r++;
		n = strcspn(r, " ");
		if (n && strncmp(r, prefix, plen) == 0)
			need += 1 + n;
		r += n;
	}
	if (need >= outlen - used)
		return -E2BIG;
	for (r = w = cmdline; *r;) {
		size_t n, sp = 0;

		while (r[sp] == ' ')
			sp++;
		n = strcspn(r + sp, " ");
		if (n && strncmp(r + sp, prefix, plen) == 0) {
			out[used++] = ' ';
			memcpy(out + used, r + sp, n);
			used += n;
		} else {
			memmove(w, r, sp + n);
			w += sp + n;
		}
		r += sp + n;
	}
	*w = '\0';
	out[used] = '\0';
	return 0;
}
