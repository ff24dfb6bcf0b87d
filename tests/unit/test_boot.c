/* Boot protocol: kernel images built byte by byte in memory and loaded
 * into a fake guest RAM; what the loader refuses must leave RAM as it was.
 * The zero page is read back with the kernel's own struct boot_params. */
#include <asm/bootparam.h>
#include <check.h>
#include <elf.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/core/boot.h"
#include "tests/lib/unit_suite.h"

#define RAM_SIZE (16ull << 20)
#define CANARY   0xa5
#define MIB      0x100000ull

static uint8_t *ram;
static struct guest_mem gm;

static void ram_setup(void)
{
	ram = malloc(RAM_SIZE);
	ck_assert_ptr_nonnull(ram);
	memset(ram, CANARY, RAM_SIZE);
	memset(&gm, 0, sizeof gm);
	ck_assert_int_eq(guest_mem_add_region(&gm, 0, RAM_SIZE, ram), 0);
}

static void ram_teardown(void)
{
	free(ram);
	ram = NULL;
}

/* Index of the first byte of [from, to) that is not the canary, or -1.
 * Whole pages are compared first: this runs over 16 MiB per case. */
static long first_written(uint64_t from, uint64_t to)
{
	static uint8_t page[4096];
	if (page[0] != CANARY)
		memset(page, CANARY, sizeof page);
	uint64_t i = from;
	while (to - i >= sizeof page && memcmp(ram + i, page, sizeof page) == 0)
		i += sizeof page;
	for (; i < to; i++)
		if (ram[i] != CANARY)
			return (long)i;
	return -1;
}

static int all_bytes(uint64_t gpa, uint64_t n, uint8_t v)
{
	for (uint64_t i = 0; i < n; i++)
		if (ram[gpa + i] != v)
			return 0;
	return 1;
}

/* ---- ELF images ---- */

struct seg {
	uint32_t type;
	uint64_t paddr, filesz, memsz;
};

struct img {
	uint8_t *b;
	size_t len;
};

static Elf64_Ehdr *eh(struct img *m) { return (Elf64_Ehdr *)m->b; }
static Elf64_Phdr *ph(struct img *m, unsigned i)
{
	return (Elf64_Phdr *)(m->b + sizeof(Elf64_Ehdr) + i * sizeof(Elf64_Phdr));
}

/* Header, program headers, then each segment's file bytes in turn,
 * filled with 0x11 * (index + 1) so a misplaced copy shows. */
static struct img mk_elf(const struct seg *s, unsigned n, uint64_t entry)
{
	size_t off = sizeof(Elf64_Ehdr) + n * sizeof(Elf64_Phdr);
	size_t len = off;
	for (unsigned i = 0; i < n; i++)
		len += s[i].filesz;
	struct img m = { calloc(1, len), len };
	ck_assert_ptr_nonnull(m.b);
	Elf64_Ehdr *e = eh(&m);
	memcpy(e->e_ident, ELFMAG, SELFMAG);
	e->e_ident[EI_CLASS] = ELFCLASS64;
	e->e_ident[EI_DATA] = ELFDATA2LSB;
	e->e_ident[EI_VERSION] = EV_CURRENT;
	e->e_type = ET_EXEC;
	e->e_machine = EM_X86_64;
	e->e_version = EV_CURRENT;
	e->e_entry = entry;
	e->e_phoff = sizeof(Elf64_Ehdr);
	e->e_ehsize = sizeof(Elf64_Ehdr);
	e->e_phentsize = sizeof(Elf64_Phdr);
	e->e_phnum = (uint16_t)n;
	for (unsigned i = 0; i < n; i++) {
		Elf64_Phdr *p = ph(&m, i);
		p->p_type = s[i].type;
		p->p_offset = off;
		p->p_vaddr = 0xffffffff80000000ull + s[i].paddr;
		p->p_paddr = s[i].paddr;
		p->p_filesz = s[i].filesz;
		p->p_memsz = s[i].memsz;
		p->p_align = 0x1000;
		memset(m.b + off, 0x11 * (i + 1), s[i].filesz);
		off += s[i].filesz;
	}
	return m;
}

/* Text and data with bss, as a vmlinux has them. */
static const struct seg good_segs[] = {
	{ PT_LOAD, 1 * MIB, 0x1000, 0x3000 },
	{ PT_LOAD, 2 * MIB, 0x800, 0x800 },
};
#define GOOD_ENTRY (1 * MIB + 0x10)

static struct img good_elf(void)
{
	return mk_elf(good_segs, 2, GOOD_ENTRY);
}

START_TEST(elf_loads_segments_and_zeroes_bss)
{
	struct img m = good_elf();
	struct boot_image k;
	char err[256] = "";
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), 0);
	ck_assert_int_eq(k.kind, BOOT_ELF);
	ck_assert_uint_eq(k.entry, GOOD_ENTRY);
	ck_assert_uint_eq(k.load_start, 1 * MIB);
	ck_assert_uint_eq(k.load_end, 2 * MIB + 0x800);
	ck_assert_uint_eq(k.cmdline_max, 2047);
	ck_assert_uint_ge(k.initrd_max, 0x37ffffff);
	ck_assert(all_bytes(1 * MIB, 0x1000, 0x11));
	ck_assert(all_bytes(1 * MIB + 0x1000, 0x2000, 0));
	ck_assert(all_bytes(2 * MIB, 0x800, 0x22));
	/* Nothing outside the segments. */
	ck_assert_int_eq(first_written(0, 1 * MIB), -1);
	ck_assert_int_eq(first_written(1 * MIB + 0x3000, 2 * MIB), -1);
	ck_assert_int_eq(first_written(2 * MIB + 0x800, RAM_SIZE), -1);
	free(m.b);
}
END_TEST

START_TEST(elf_ignores_other_headers_and_empty_loads)
{
	/* A note pointing far outside the file and an empty PT_LOAD below
	 * 1 MiB are not loaded, so they cannot make the image invalid. */
	const struct seg s[] = {
		{ PT_NOTE, 0, 0x10, 0x10 },
		{ PT_LOAD, 0x1000, 0, 0 },
		{ PT_LOAD, 4 * MIB, 0x100, 0x100 },
	};
	struct img m = mk_elf(s, 3, 4 * MIB);
	ph(&m, 0)->p_offset = UINT64_MAX - 4;
	ph(&m, 0)->p_filesz = 0x1000000;
	struct boot_image k;
	char err[256] = "";
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), 0);
	ck_assert_uint_eq(k.load_start, 4 * MIB);
	ck_assert_uint_eq(k.load_end, 4 * MIB + 0x100);
	ck_assert(all_bytes(4 * MIB, 0x100, 0x33));
	ck_assert_int_eq(first_written(0, 4 * MIB), -1);
	free(m.b);
}
END_TEST

START_TEST(elf_adjacent_segments_and_ram_end)
{
	/* Touching is not overlapping, and the last byte of RAM is RAM. */
	const struct seg s[] = {
		{ PT_LOAD, 1 * MIB, 0x1000, 0x1000 },
		{ PT_LOAD, 1 * MIB + 0x1000, 0x10, 0x1000 },
		{ PT_LOAD, RAM_SIZE - 0x1000, 0x1000, 0x1000 },
	};
	struct img m = mk_elf(s, 3, 1 * MIB + 0x1000);
	struct boot_image k;
	char err[256] = "";
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), 0);
	ck_assert_uint_eq(k.load_end, RAM_SIZE);
	ck_assert_uint_eq(ram[RAM_SIZE - 1], 0x33);
	free(m.b);
}
END_TEST

/* One hostile variation of the good image per index; returns the errno
 * the loader must give, or 1 past the last case. */
static int hostile_elf(int i, struct img *m, const char **what)
{
	Elf64_Ehdr *e = eh(m);
	Elf64_Phdr *p0 = ph(m, 0), *p1 = ph(m, 1);
	switch (i) {
	case 0: *what = "header cut short"; m->len = sizeof(Elf64_Ehdr) - 1; return -ENOEXEC;
	case 1: *what = "magic only"; m->len = 4; return -ENOEXEC;
	case 2: *what = "magic cut short"; m->len = 3; return -ENOEXEC;
	case 3: *what = "ELFCLASS32"; e->e_ident[EI_CLASS] = ELFCLASS32; return -ENOEXEC;
	case 4: *what = "big endian"; e->e_ident[EI_DATA] = ELFDATA2MSB; return -ENOEXEC;
	case 5: *what = "i386"; e->e_machine = EM_386; return -ENOEXEC;
	case 6: *what = "aarch64"; e->e_machine = EM_AARCH64; return -ENOEXEC;
	case 7: *what = "ET_DYN"; e->e_type = ET_DYN; return -ENOEXEC;
	case 8: *what = "ET_REL"; e->e_type = ET_REL; return -ENOEXEC;
	case 9: *what = "phoff past end"; e->e_phoff = m->len + 1; return -EINVAL;
	case 10: *what = "phoff UINT64_MAX"; e->e_phoff = UINT64_MAX; return -EINVAL;
	case 11: *what = "table straddles end"; e->e_phoff = m->len - 60; return -EINVAL;
	case 12: *what = "phnum 0xffff"; e->e_phnum = 0xffff; return -EINVAL;
	case 13: *what = "phnum 0"; e->e_phnum = 0; return -EINVAL;
	case 14: *what = "phentsize 32"; e->e_phentsize = 32; return -EINVAL;
	case 15: *what = "phentsize 0"; e->e_phentsize = 0; return -EINVAL;
	case 16: *what = "phentsize 57"; e->e_phentsize = 57; return -EINVAL;
	case 17: *what = "segment data cut"; m->len -= 1; return -EINVAL;
	case 18: *what = "offset past end"; p0->p_offset = m->len + 1; p0->p_filesz = 0;
		return -EINVAL;
	case 19: *what = "offset UINT64_MAX"; p0->p_offset = UINT64_MAX; p0->p_filesz = 1;
		return -EINVAL;
	case 20: *what = "offset+filesz wraps"; p1->p_offset = 0x100;
		p1->p_filesz = UINT64_MAX - 0x80; p1->p_memsz = UINT64_MAX;
		return -EINVAL;
	case 21: *what = "filesz > memsz"; p1->p_memsz = p1->p_filesz - 1; return -EINVAL;
	case 22: *what = "segment at 0"; p1->p_paddr = 0; return -EINVAL;
	case 23: *what = "segment in boot area"; p1->p_paddr = 0x9000; return -EINVAL;
	case 24: *what = "segment crossing 1 MiB"; p1->p_paddr = MIB - 0x400; return -EINVAL;
	case 25: *what = "segment past RAM"; p1->p_paddr = RAM_SIZE; return -ENOMEM;
	case 26: *what = "segment straddling RAM end"; p1->p_paddr = RAM_SIZE - 0x400;
		return -ENOMEM;
	case 27: *what = "memsz UINT64_MAX"; p1->p_memsz = UINT64_MAX; return -ENOMEM;
	case 28: *what = "memsz 1 TiB"; p1->p_memsz = 1ull << 40; return -ENOMEM;
	case 29: *what = "paddr near UINT64_MAX"; p1->p_paddr = UINT64_MAX - 0x10;
		return -ENOMEM;
	case 30: *what = "paddr 4 GiB"; p1->p_paddr = 1ull << 32; return -ENOMEM;
	case 31: *what = "overlap in bss"; p1->p_paddr = 1 * MIB + 0x2000; return -EINVAL;
	case 32: *what = "same address"; p1->p_paddr = 1 * MIB; return -EINVAL;
	case 33: *what = "second covers first"; p0->p_paddr = 1 * MIB + 0x10000;
		p1->p_paddr = 1 * MIB; p1->p_memsz = 1 * MIB; return -EINVAL;
	case 34: *what = "first covers second"; p0->p_paddr = 1 * MIB;
		p0->p_memsz = 2 * MIB; return -EINVAL;
	case 35: *what = "entry 0"; e->e_entry = 0; return -EINVAL;
	case 36: *what = "entry in bss"; e->e_entry = 1 * MIB + 0x1000; return -EINVAL;
	case 37: *what = "entry past segments"; e->e_entry = 2 * MIB + 0x800; return -EINVAL;
	case 38: *what = "entry UINT64_MAX"; e->e_entry = UINT64_MAX; return -EINVAL;
	case 39: *what = "no PT_LOAD"; p0->p_type = PT_NOTE; p1->p_type = PT_DYNAMIC;
		return -EINVAL;
	case 40: *what = "PT_LOADs all empty"; p0->p_memsz = p0->p_filesz = 0;
		p1->p_memsz = p1->p_filesz = 0; return -EINVAL;
	case 41: *what = "not a kernel"; memset(m->b, 0x5a, m->len); return -ENOEXEC;
	case 42: *what = "empty file"; m->len = 0; return -ENOEXEC;
	}
	return 1;
}
#define HOSTILE_ELF_CASES 43

START_TEST(elf_hostile_refused_untouched)
{
	struct img m = good_elf();
	const char *what = "?";
	int want = hostile_elf(_i, &m, &what);
	ck_assert_int_lt(want, 0);
	struct boot_image k;
	memset(&k, 0x5c, sizeof k);
	char err[256] = "";
	int rc = boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err);
	ck_assert_msg(rc == want, "%s: rc %d, want %d (%s)", what, rc, want, err);
	ck_assert_msg(err[0] != '\0', "%s: no message", what);
	ck_assert_msg(strlen(err) < sizeof err, "%s", what);
	long w = first_written(0, RAM_SIZE);
	ck_assert_msg(w == -1, "%s: RAM written at 0x%lx", what, w);
	free(m.b);
}
END_TEST

START_TEST(elf_errors_fit_small_or_no_buffer)
{
	struct img m = good_elf();
	ph(&m, 1)->p_paddr = RAM_SIZE;
	struct boot_image k;
	char err[8];
	memset(err, 'x', sizeof err);
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), -ENOMEM);
	ck_assert_uint_eq(strlen(err), sizeof err - 1);
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, NULL, 0), -ENOMEM);
	free(m.b);
}
END_TEST

/* ---- bzImage ---- */

struct bz {
	uint8_t setup_sects; /* as in the header: 0 means 4 */
	uint16_t version;
	uint8_t loadflags, xloadflags, relocatable;
	uint32_t init_size, cmdline_size, initrd_max;
	uint64_t pref;
	size_t payload;
};

static const struct bz good_bz = {
	.setup_sects = 2, .version = 0x020f, .loadflags = 1, .xloadflags = 3,
	.relocatable = 1, .init_size = 4 * MIB, .cmdline_size = 2047,
	.initrd_max = 0x7fffffff, .pref = 2 * MIB, .payload = 0x1000,
};

/* Setup code of 0xee, then a payload whose byte i is (i * 7) & 0xff. */
static struct img mk_bz(const struct bz *z)
{
	size_t setup = ((size_t)(z->setup_sects ? z->setup_sects : 4) + 1) * 512;
	struct img m = { malloc(setup + z->payload), setup + z->payload };
	ck_assert_ptr_nonnull(m.b);
	memset(m.b, 0xee, setup);
	for (size_t i = 0; i < z->payload; i++)
		m.b[setup + i] = (uint8_t)(i * 7);
	struct setup_header h;
	memset(&h, 0, sizeof h);
	h.setup_sects = z->setup_sects;
	h.syssize = (uint32_t)(z->payload / 16);
	h.boot_flag = 0xaa55;
	h.jump = 0x66eb; /* jmp to 0x268, the end of a 2.15 header */
	h.header = 0x53726448;
	h.version = z->version;
	h.loadflags = z->loadflags;
	h.initrd_addr_max = z->initrd_max;
	h.kernel_alignment = 0x200000;
	h.relocatable_kernel = z->relocatable;
	h.min_alignment = 21;
	h.xloadflags = z->xloadflags;
	h.cmdline_size = z->cmdline_size;
	h.pref_address = z->pref;
	h.init_size = z->init_size;
	memcpy(m.b + 0x1f1, &h, sizeof h);
	return m;
}

static int payload_at(uint64_t gpa, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ram[gpa + i] != (uint8_t)(i * 7))
			return 0;
	return 1;
}

START_TEST(bz_relocatable_loads_at_pref_address)
{
	struct img m = mk_bz(&good_bz);
	struct boot_image k;
	char err[256] = "";
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), 0);
	ck_assert_int_eq(k.kind, BOOT_BZIMAGE);
	ck_assert_uint_eq(k.entry, 2 * MIB + 0x200);
	ck_assert_uint_eq(k.load_start, 2 * MIB);
	ck_assert_uint_eq(k.load_end, 6 * MIB);
	ck_assert_uint_eq(k.version, 0x020f);
	ck_assert_uint_eq(k.cmdline_max, 2047);
	ck_assert_uint_eq(k.initrd_max, 0x7fffffff);
	ck_assert(payload_at(2 * MIB, 0x1000));
	ck_assert_int_eq(first_written(0, 2 * MIB), -1);
	/* The header is kept for the zero page, setup code is not. */
	ck_assert_uint_ge(k.setup_hdr_len, offsetof(struct setup_header, init_size) + 4);
	ck_assert_uint_le(k.setup_hdr_len, sizeof k.setup_hdr);
	ck_assert_mem_eq(k.setup_hdr, m.b + 0x1f1, k.setup_hdr_len);
	free(m.b);
}
END_TEST

START_TEST(bz_fixed_and_low_pref_load_at_1mib)
{
	struct bz z = good_bz;
	z.relocatable = 0;
	struct img m = mk_bz(&z);
	struct boot_image k;
	char err[256] = "";
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), 0);
	ck_assert_uint_eq(k.load_start, 1 * MIB);
	ck_assert_uint_eq(k.entry, 1 * MIB + 0x200);
	ck_assert(payload_at(1 * MIB, 0x1000));
	free(m.b);

	z.relocatable = 1;
	z.pref = 0x8000;
	m = mk_bz(&z);
	memset(ram, CANARY, RAM_SIZE);
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), 0);
	ck_assert_uint_eq(k.load_start, 1 * MIB);
	ck_assert_int_eq(first_written(0, 1 * MIB), -1);
	free(m.b);
}
END_TEST

START_TEST(bz_zero_setup_sects_means_four)
{
	struct bz z = good_bz;
	z.setup_sects = 0;
	struct img m = mk_bz(&z);
	ck_assert_uint_eq(m.len, 5 * 512 + 0x1000);
	struct boot_image k;
	char err[256] = "";
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), 0);
	ck_assert(payload_at(2 * MIB, 0x1000));
	free(m.b);
}
END_TEST

START_TEST(bz_small_init_size_reserves_payload)
{
	struct bz z = good_bz;
	z.init_size = 0x10;
	z.cmdline_size = 0;
	struct img m = mk_bz(&z);
	struct boot_image k;
	char err[256] = "";
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), 0);
	ck_assert_uint_eq(k.load_end, 2 * MIB + 0x1000);
	/* Protocols before 2.06 had no field and allowed 255 bytes. */
	ck_assert_uint_eq(k.cmdline_max, 255);
	free(m.b);
}
END_TEST

/* Called twice per case: with m NULL to change the fields the image is
 * built from, then with the built image to change its bytes.  Returns
 * the errno the loader must give. */
static int hostile_bz(int i, struct bz *z, struct img *m, const char **what)
{
	switch (i) {
	case 0: *what = "protocol 2.11"; z->version = 0x020b; return -ENOEXEC;
	case 1: *what = "protocol 0"; z->version = 0; return -ENOEXEC;
	case 2: *what = "no 64-bit entry"; z->xloadflags = 2; return -ENOEXEC;
	case 3: *what = "not loaded high"; z->loadflags = 0; return -ENOEXEC;
	case 4: *what = "no payload"; z->payload = 0; return -EINVAL;
	case 5: *what = "255 setup sectors in a small file"; z->setup_sects = 255;
		if (m)
			m->len = 4096;
		return -EINVAL;
	case 6: *what = "payload cut short";
		if (m)
			m->len -= 16;
		return -EINVAL;
	case 7: *what = "payload without entry"; z->payload = 0x200; return -EINVAL;
	case 8: *what = "init_size beyond RAM"; z->init_size = 15 * MIB; return -ENOMEM;
	case 9: *what = "init_size 4 GiB-1"; z->init_size = UINT32_MAX; return -ENOMEM;
	case 10: *what = "pref past RAM"; z->pref = RAM_SIZE; return -ENOMEM;
	case 11: *what = "pref near UINT64_MAX"; z->pref = UINT64_MAX - 0x100; return -ENOMEM;
	case 12: *what = "no boot flag";
		if (m)
			m->b[0x1fe] = 0;
		return -ENOEXEC;
	case 13: *what = "no HdrS";
		if (m)
			m->b[0x205] = 'Z';
		return -ENOEXEC;
	case 14: *what = "header cut short";
		if (m)
			m->len = 0x263;
		return -ENOEXEC;
	case 15: *what = "syssize past the file"; z->payload = 0x1000;
		if (m)
			m->b[0x1f4 + 2] = 1;
		return -EINVAL;
	}
	return 1;
}
#define HOSTILE_BZ_CASES 16

START_TEST(bz_hostile_refused_untouched)
{
	struct bz z = good_bz;
	const char *what = "?";
	int want = hostile_bz(_i, &z, NULL, &what);
	ck_assert_int_lt(want, 0);
	struct img m = mk_bz(&z);
	hostile_bz(_i, &z, &m, &what);
	struct boot_image k;
	char err[256] = "";
	int rc = boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err);
	ck_assert_msg(rc == want, "%s: rc %d, want %d (%s)", what, rc, want, err);
	ck_assert_msg(err[0] != '\0', "%s: no message", what);
	long w = first_written(0, RAM_SIZE);
	ck_assert_msg(w == -1, "%s: RAM written at 0x%lx", what, w);
	free(m.b);
}
END_TEST

/* ---- initrd placement ---- */

static struct boot_image elf_kernel(void)
{
	return (struct boot_image){ .kind = BOOT_ELF, .entry = 1 * MIB, .load_start = 1 * MIB,
				    .load_end = 3 * MIB + 5, .cmdline_max = 2047,
				    .initrd_max = 0x7fffffff };
}

START_TEST(initrd_placed_high_aligned_above_kernel)
{
	struct boot_image k = elf_kernel();
	size_t len = 100001;
	uint8_t *d = malloc(len);
	ck_assert_ptr_nonnull(d);
	for (size_t i = 0; i < len; i++)
		d[i] = (uint8_t)(i ^ (i >> 8));
	uint64_t at = 0;
	char err[256] = "";
	ck_assert_int_eq(boot_place_initrd(&gm, &k, d, len, &at, err, sizeof err), 0);
	ck_assert_uint_eq(at & 0xfff, 0);
	ck_assert_uint_ge(at, k.load_end);
	ck_assert_uint_le(at + len, RAM_SIZE);
	ck_assert_uint_gt(at + len, RAM_SIZE - 0x1000);
	ck_assert_mem_eq(ram + at, d, len);
	ck_assert_int_eq(first_written(0, at), -1);
	free(d);
}
END_TEST

START_TEST(initrd_respects_initrd_max)
{
	struct boot_image k = elf_kernel();
	k.initrd_max = 8 * MIB - 1;
	uint8_t d[5000];
	memset(d, 0x42, sizeof d);
	uint64_t at = 0;
	char err[256] = "";
	ck_assert_int_eq(boot_place_initrd(&gm, &k, d, sizeof d, &at, err, sizeof err), 0);
	ck_assert_uint_eq(at & 0xfff, 0);
	ck_assert_uint_le(at + sizeof d, 8 * MIB);
	ck_assert_uint_gt(at + sizeof d, 8 * MIB - 0x1000);
	ck_assert_int_eq(first_written(8 * MIB, RAM_SIZE), -1);
}
END_TEST

START_TEST(initrd_exact_fit)
{
	/* From the page after the kernel to the end of RAM, not a byte more. */
	struct boot_image k = elf_kernel();
	uint64_t floor = 3 * MIB + 0x1000;
	size_t len = RAM_SIZE - floor;
	uint8_t *d = calloc(1, len + 1);
	ck_assert_ptr_nonnull(d);
	uint64_t at = 0;
	char err[256] = "";
	ck_assert_int_eq(boot_place_initrd(&gm, &k, d, len, &at, err, sizeof err), 0);
	ck_assert_uint_eq(at, floor);
	memset(ram, CANARY, RAM_SIZE);
	ck_assert_int_eq(boot_place_initrd(&gm, &k, d, len + 1, &at, err, sizeof err), -ENOMEM);
	ck_assert_int_eq(first_written(0, RAM_SIZE), -1);
	free(d);
}
END_TEST

START_TEST(initrd_too_big_refused)
{
	struct boot_image k = elf_kernel();
	static const uint8_t d[16];
	uint64_t at = 77;
	char err[256] = "";
	/* The length is checked before a byte of data is read. */
	const size_t lens[] = { 14 * MIB, RAM_SIZE, RAM_SIZE + 1, SIZE_MAX };
	for (unsigned i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		err[0] = '\0';
		ck_assert_int_eq(boot_place_initrd(&gm, &k, d, lens[i], &at, err, sizeof err),
				 -ENOMEM);
		ck_assert(strstr(err, "memory") != NULL);
	}
	ck_assert_uint_eq(at, 77);
	/* Kernel up to the top of what the initrd may use. */
	k.initrd_max = 3 * MIB;
	ck_assert_int_eq(boot_place_initrd(&gm, &k, d, sizeof d, &at, err, sizeof err), -ENOMEM);
	ck_assert_int_eq(first_written(0, RAM_SIZE), -1);
}
END_TEST

/* ---- e820 ---- */

START_TEST(e820_low_only)
{
	struct boot_e820 e[8];
	ck_assert_uint_eq(boot_e820_map(64 * MIB, 0, e, 8), 3);
	ck_assert_uint_eq(e[0].addr, 0);
	ck_assert_uint_eq(e[0].size, BOOT_EBDA_START);
	ck_assert_uint_eq(e[0].type, 1);
	ck_assert_uint_eq(e[1].addr, BOOT_EBDA_START);
	ck_assert_uint_eq(e[1].addr + e[1].size, 1 * MIB);
	ck_assert_uint_eq(e[1].type, 2);
	ck_assert_uint_eq(e[2].addr, 1 * MIB);
	ck_assert_uint_eq(e[2].size, 63 * MIB);
	ck_assert_uint_eq(e[2].type, 1);
}
END_TEST

START_TEST(e820_low_and_high)
{
	struct boot_e820 e[8];
	ck_assert_uint_eq(boot_e820_map(BOOT_LOW_RAM_MAX, 5ull << 30, e, 8), 4);
	ck_assert_uint_eq(e[2].addr + e[2].size, BOOT_LOW_RAM_MAX);
	ck_assert_uint_eq(e[3].addr, BOOT_HIGH_RAM_BASE);
	ck_assert_uint_eq(e[3].size, 5ull << 30);
	ck_assert_uint_eq(e[3].type, 1);
	/* Sorted, disjoint, and the MP table and EBDA are not RAM. */
	for (unsigned i = 1; i < 4; i++)
		ck_assert_uint_ge(e[i].addr, e[i - 1].addr + e[i - 1].size);
	for (unsigned i = 0; i < 4; i++)
		if (e[i].type == 1)
			ck_assert(e[i].addr + e[i].size <= 0xf0000 || e[i].addr > 0xf0000);
}
END_TEST

START_TEST(e820_truncated_to_max)
{
	struct boot_e820 e[2];
	memset(e, 0x77, sizeof e);
	ck_assert_uint_eq(boot_e820_map(BOOT_LOW_RAM_MAX, 1ull << 30, e, 2), 2);
	ck_assert_uint_eq(e[1].addr, BOOT_EBDA_START);
	ck_assert_uint_eq(boot_e820_map(BOOT_LOW_RAM_MAX, 1ull << 30, e, 0), 0);
}
END_TEST

/* ---- zero page, GDT and page tables ---- */

static struct boot_params read_params(void)
{
	struct boot_params bp;
	memcpy(&bp, ram + BOOT_PARAMS_ADDR, sizeof bp);
	return bp;
}

static void check_e820(const struct boot_params *bp, uint64_t low, uint64_t high)
{
	struct boot_e820 e[E820_MAX_ENTRIES_ZEROPAGE];
	unsigned n = boot_e820_map(low, high, e, E820_MAX_ENTRIES_ZEROPAGE);
	ck_assert_uint_eq(bp->e820_entries, n);
	for (unsigned i = 0; i < n; i++) {
		ck_assert_uint_eq(bp->e820_table[i].addr, e[i].addr);
		ck_assert_uint_eq(bp->e820_table[i].size, e[i].size);
		ck_assert_uint_eq(bp->e820_table[i].type, e[i].type);
	}
	ck_assert_uint_eq(bp->e820_table[n].size, 0);
}

START_TEST(params_elf_zero_page)
{
	struct boot_image k = elf_kernel();
	const char *cl = "console=ttyS0 reboot=k panic=-1";
	struct boot_setup s = { .low_ram = RAM_SIZE, .cmdline = cl,
				.initrd_addr = 12 * MIB, .initrd_len = 123457 };
	char err[256] = "";
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), 0);
	struct boot_params bp = read_params();
	ck_assert_uint_eq(bp.hdr.boot_flag, 0xaa55);
	ck_assert_uint_eq(bp.hdr.header, 0x53726448);
	ck_assert_uint_eq(bp.hdr.type_of_loader, 0xff);
	ck_assert_uint_eq(bp.hdr.cmd_line_ptr, BOOT_CMDLINE_ADDR);
	ck_assert_uint_eq(bp.ext_cmd_line_ptr, 0);
	ck_assert_uint_eq(bp.hdr.cmdline_size, strlen(cl));
	ck_assert_str_eq((const char *)ram + BOOT_CMDLINE_ADDR, cl);
	ck_assert_uint_eq(bp.hdr.ramdisk_image, 12 * MIB);
	ck_assert_uint_eq(bp.hdr.ramdisk_size, 123457);
	ck_assert_uint_eq(bp.ext_ramdisk_image, 0);
	ck_assert_uint_eq(bp.ext_ramdisk_size, 0);
	check_e820(&bp, RAM_SIZE, 0);
	ck_assert_uint_eq(bp.e820_entries, 3);
}
END_TEST

START_TEST(params_no_initrd_and_high_ram)
{
	struct boot_image k = elf_kernel();
	struct boot_setup s = { .low_ram = BOOT_LOW_RAM_MAX, .high_ram = 2ull << 30,
				.cmdline = "" };
	char err[256] = "";
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), 0);
	struct boot_params bp = read_params();
	ck_assert_uint_eq(bp.hdr.ramdisk_image, 0);
	ck_assert_uint_eq(bp.hdr.ramdisk_size, 0);
	ck_assert_uint_eq(ram[BOOT_CMDLINE_ADDR], 0);
	check_e820(&bp, BOOT_LOW_RAM_MAX, 2ull << 30);
	ck_assert_uint_eq(bp.e820_entries, 4);
}
END_TEST

START_TEST(params_bzimage_keeps_kernel_header)
{
	struct img m = mk_bz(&good_bz);
	struct boot_image k;
	char err[256] = "";
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), 0);
	struct boot_setup s = { .low_ram = RAM_SIZE, .cmdline = "quiet" };
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), 0);
	struct boot_params bp = read_params();
	ck_assert_uint_eq(bp.hdr.setup_sects, 2);
	ck_assert_uint_eq(bp.hdr.version, 0x020f);
	ck_assert_uint_eq(bp.hdr.init_size, 4 * MIB);
	ck_assert_uint_eq(bp.hdr.pref_address, 2 * MIB);
	ck_assert_uint_eq(bp.hdr.kernel_alignment, 0x200000);
	ck_assert_uint_eq(bp.hdr.xloadflags, 3);
	ck_assert_uint_eq(bp.hdr.type_of_loader, 0xff);
	ck_assert_uint_eq(bp.hdr.cmd_line_ptr, BOOT_CMDLINE_ADDR);
	ck_assert_str_eq((const char *)ram + BOOT_CMDLINE_ADDR, "quiet");
	/* Nothing of the setup code leaks into the zero page. */
	ck_assert_uint_eq(bp.screen_info.orig_video_mode, 0);
	check_e820(&bp, RAM_SIZE, 0);
	free(m.b);
}
END_TEST

/* Descriptor fields that matter for the 64-bit boot protocol. */
START_TEST(params_gdt)
{
	struct boot_image k = elf_kernel();
	struct boot_setup s = { .low_ram = RAM_SIZE, .cmdline = "x" };
	char err[256] = "";
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), 0);
	uint64_t gdt[4];
	memcpy(gdt, ram + BOOT_GDT_ADDR, sizeof gdt);
	ck_assert_uint_eq(gdt[0], 0);
	uint64_t cs = gdt[2], ds = gdt[3];
	ck_assert(cs & (1ull << 47));		/* present */
	ck_assert(cs & (1ull << 44));		/* code/data, not system */
	ck_assert(cs & (1ull << 43));		/* executable */
	ck_assert(cs & (1ull << 53));		/* long mode */
	ck_assert(!(cs & (1ull << 54)));	/* D clear, required with L */
	ck_assert_uint_eq((cs >> 45) & 3, 0);	/* ring 0 */
	ck_assert(ds & (1ull << 47));
	ck_assert(ds & (1ull << 44));
	ck_assert(!(ds & (1ull << 43)));	/* data */
	ck_assert(ds & (1ull << 41));		/* writable */
	ck_assert_uint_eq((ds >> 45) & 3, 0);
}
END_TEST

static uint64_t rd_gpa64(uint64_t gpa)
{
	uint64_t v;
	ck_assert_uint_lt(gpa + 8, RAM_SIZE);
	memcpy(&v, ram + gpa, 8);
	return v;
}

/* Walk the tables from BOOT_PML4_ADDR; returns the physical address or
 * UINT64_MAX if va is not mapped present and writable. */
static uint64_t walk(uint64_t va)
{
	const uint64_t addr_mask = 0x000ffffffffff000ull;
	uint64_t e = rd_gpa64(BOOT_PML4_ADDR + ((va >> 39) & 511) * 8);
	if ((e & 3) != 3)
		return UINT64_MAX;
	e = rd_gpa64((e & addr_mask) + ((va >> 30) & 511) * 8);
	if ((e & 3) != 3)
		return UINT64_MAX;
	ck_assert(!(e & 0x80)); /* no 1 GiB pages: not every CPU has them */
	e = rd_gpa64((e & addr_mask) + ((va >> 21) & 511) * 8);
	if ((e & 3) != 3)
		return UINT64_MAX;
	ck_assert(e & 0x80);
	return (e & 0x000fffffffe00000ull) | (va & 0x1fffff);
}

START_TEST(params_identity_page_tables)
{
	struct boot_image k = elf_kernel();
	struct boot_setup s = { .low_ram = RAM_SIZE, .cmdline = "x" };
	char err[256] = "";
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), 0);
	const uint64_t vas[] = { 0, 0x1234, BOOT_PARAMS_ADDR, 1 * MIB + 0x10, 0x1000000,
				 0x40201234, 0xbfffffff, 0xc0000000, 0xfec00000, 0xfee00000,
				 0xffffffff };
	for (unsigned i = 0; i < sizeof vas / sizeof vas[0]; i++)
		ck_assert_uint_eq(walk(vas[i]), vas[i]);
	ck_assert_uint_eq(walk(1ull << 32), UINT64_MAX);
	ck_assert_uint_eq(walk(1ull << 39), UINT64_MAX);
	/* The tables themselves live where the boot area reserves them. */
	ck_assert_uint_eq(rd_gpa64(BOOT_PML4_ADDR) & ~0xfffull, BOOT_PDPT_ADDR);
}
END_TEST

static char *cmdline_of(size_t n)
{
	char *c = malloc(n + 1);
	ck_assert_ptr_nonnull(c);
	memset(c, 'a', n);
	c[n] = '\0';
	return c;
}

START_TEST(cmdline_limit_elf)
{
	struct boot_image k = elf_kernel();
	char err[256] = "";
	char *c = cmdline_of(2047);
	struct boot_setup s = { .low_ram = RAM_SIZE, .cmdline = c };
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), 0);
	ck_assert_uint_eq(strlen((const char *)ram + BOOT_CMDLINE_ADDR), 2047);
	free(c);

	memset(ram, CANARY, RAM_SIZE);
	c = cmdline_of(2048);
	s.cmdline = c;
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), -E2BIG);
	ck_assert_ptr_nonnull(strstr(err, "2048"));
	ck_assert_ptr_nonnull(strstr(err, "2047"));
	ck_assert_int_eq(first_written(0, RAM_SIZE), -1);
	free(c);
}
END_TEST

START_TEST(cmdline_limit_bzimage)
{
	/* cmdline_size counts the bytes without the NUL (boot protocol). */
	struct img m = mk_bz(&good_bz);
	struct boot_image k;
	char err[256] = "";
	ck_assert_int_eq(boot_load_kernel(&gm, m.b, m.len, &k, err, sizeof err), 0);
	char *c = cmdline_of(2047);
	struct boot_setup s = { .low_ram = RAM_SIZE, .cmdline = c };
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), 0);
	free(c);
	c = cmdline_of(2048);
	s.cmdline = c;
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), -E2BIG);
	ck_assert_ptr_nonnull(strstr(err, "2047"));
	free(c);
	free(m.b);
}
END_TEST

START_TEST(cmdline_one_mib_refused)
{
	char *c = cmdline_of(1 << 20);
	struct boot_setup s = { .low_ram = RAM_SIZE, .cmdline = c };
	char err[256] = "";
	struct boot_image k = elf_kernel();
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), -E2BIG);
	ck_assert_ptr_nonnull(strstr(err, "1048576"));
	/* A kernel claiming no limit is still held to the reserved area. */
	k.cmdline_max = UINT32_MAX;
	err[0] = '\0';
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), -E2BIG);
	ck_assert(err[0] != '\0');
	ck_assert_int_eq(first_written(0, RAM_SIZE), -1);
	c[BOOT_CMDLINE_MAX - 1] = '\0';
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), 0);
	c[BOOT_CMDLINE_MAX - 1] = 'a';
	c[BOOT_CMDLINE_MAX] = '\0';
	ck_assert_int_eq(boot_write_params(&gm, &k, &s, err, sizeof err), -E2BIG);
	free(c);
}
END_TEST

START_TEST(cmdline_append_within_limits)
{
	char buf[32] = "console=x";
	ck_assert_int_eq(boot_cmdline_append(buf, sizeof buf, " a=%d", 1), 0);
	ck_assert_str_eq(buf, "console=x a=1");
	/* Exactly filling the buffer's last byte but the NUL fits. */
	ck_assert_int_eq(boot_cmdline_append(buf, sizeof buf, "%s", "0123456789abcdefgh"), 0);
	ck_assert_uint_eq(strlen(buf), sizeof buf - 1);
	/* One byte more is refused and leaves the line as it was. */
	ck_assert_int_eq(boot_cmdline_append(buf, sizeof buf, "z"), -E2BIG);
	ck_assert_uint_eq(strlen(buf), sizeof buf - 1);
	/* An unterminated buffer is refused, not read past. */
	char raw[4] = { 'a', 'b', 'c', 'd' };
	ck_assert_int_eq(boot_cmdline_append(raw, sizeof raw, "x"), -E2BIG);
	/* A large buffer is still held to the kernel's limit. */
	char *big = calloc(1, 8192);
	ck_assert_ptr_nonnull(big);
	memset(big, 'a', BOOT_KERNEL_CMDLINE_MAX - 1);
	ck_assert_int_eq(boot_cmdline_append(big, 8192, "b"), 0);
	ck_assert_uint_eq(strlen(big), BOOT_KERNEL_CMDLINE_MAX);
	ck_assert_int_eq(boot_cmdline_append(big, 8192, "c"), -E2BIG);
	ck_assert_uint_eq(strlen(big), BOOT_KERNEL_CMDLINE_MAX);
	free(big);
}
END_TEST

START_TEST(params_tiny_ram_efault)
{
	static uint8_t small[0x8000];
	struct guest_mem g = { 0 };
	ck_assert_int_eq(guest_mem_add_region(&g, 0, sizeof small, small), 0);
	struct boot_image k = elf_kernel();
	struct boot_setup s = { .low_ram = sizeof small, .cmdline = "x" };
	char err[256] = "";
	ck_assert_int_eq(boot_write_params(&g, &k, &s, err, sizeof err), -EFAULT);
	ck_assert(err[0] != '\0');
}
END_TEST

START_TEST(cmdline_take_words)
{
	char line[256] = "console=ttyS0 kbox.mounts=kbox0:/w:rw  virtio_mmio.device=4K@0xd0000000:5 kbox.root=kbox1 quiet";
	char out[64] = "";
	char small[20] = "";

	ck_assert_int_eq(boot_cmdline_take(line, "kbox.", small, sizeof small), -E2BIG);
	ck_assert_str_eq(small, "");
	ck_assert_str_eq(line, "console=ttyS0 kbox.mounts=kbox0:/w:rw  virtio_mmio.device=4K@0xd0000000:5 kbox.root=kbox1 quiet");
	ck_assert_int_eq(boot_cmdline_take(line, "kbox.", out, sizeof out), 0);
	ck_assert_str_eq(out, " kbox.mounts=kbox0:/w:rw kbox.root=kbox1");
	ck_assert_str_eq(line, "console=ttyS0  virtio_mmio.device=4K@0xd0000000:5 quiet");
	/* Nothing to take: both unchanged; a word only starting like one stays. */
	ck_assert_int_eq(boot_cmdline_take(line, "kbox.", out, sizeof out), 0);
	ck_assert_str_eq(out, " kbox.mounts=kbox0:/w:rw kbox.root=kbox1");
	strcpy(line, "kbox.x=1");
	strcpy(out, "");
	ck_assert_int_eq(boot_cmdline_take(line, "kbox.", out, sizeof out), 0);
	ck_assert_str_eq(line, "");
	ck_assert_str_eq(out, " kbox.x=1");
	strcpy(line, "kboxy=1 kbox.");
	strcpy(out, "");
	ck_assert_int_eq(boot_cmdline_take(line, "kbox.", out, 9), 0);
	ck_assert_str_eq(line, "kboxy=1");
	ck_assert_str_eq(out, " kbox.");
}
END_TEST

Suite *boot_suite(void)
{
	Suite *s = suite_create("boot");

	TCase *tc = unit_suite_case_fixture(s, "elf", ram_setup, ram_teardown, 0,
					    elf_loads_segments_and_zeroes_bss,
					    elf_ignores_other_headers_and_empty_loads,
					    elf_adjacent_segments_and_ram_end,
					    elf_errors_fit_small_or_no_buffer);
	tcase_add_loop_test(tc, elf_hostile_refused_untouched, 0, HOSTILE_ELF_CASES);
	tc = unit_suite_case_fixture(s, "bzimage", ram_setup, ram_teardown, 0,
				     bz_relocatable_loads_at_pref_address,
				     bz_fixed_and_low_pref_load_at_1mib,
				     bz_zero_setup_sects_means_four,
				     bz_small_init_size_reserves_payload);
	tcase_add_loop_test(tc, bz_hostile_refused_untouched, 0, HOSTILE_BZ_CASES);
	unit_suite_case_fixture(s, "initrd", ram_setup, ram_teardown, 0,
				initrd_placed_high_aligned_above_kernel,
				initrd_respects_initrd_max, initrd_exact_fit,
				initrd_too_big_refused);
	unit_suite_case_fixture(s, "params", ram_setup, ram_teardown, 0,
				e820_low_only, e820_low_and_high,
				e820_truncated_to_max, params_elf_zero_page,
				params_no_initrd_and_high_ram,
				params_bzimage_keeps_kernel_header, params_gdt,
				params_identity_page_tables, cmdline_limit_elf,
				cmdline_limit_bzimage, cmdline_one_mib_refused, cmdline_take_words,
				cmdline_append_within_limits, params_tiny_ram_efault);
	return s;
}
