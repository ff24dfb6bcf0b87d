#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kvm.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/statebuf.h"
#include "vmm/core/snapshot_file.h"
#include "tests/lib/unit_suite.h"

#define RAM_LEN (16u * SNAPSHOT_FILE_PAGE)
#define IRQCHIP_LEN sizeof(((struct kvm_irqchip *)0)->chip)

static char dir[64];
static char err[512];

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/kbox-snapf-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];
	chmod(dir, 0700);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* What the variants below leave out or get wrong. */
enum flaw {
	OK, NO_LAYOUT, NO_VM, CPU_MISSING, CPU_EXTRA, CPU_TWICE, REGS_SHORT, REGS_TWICE,
	UNKNOWN_TAG, NO_LAPIC, FPU_AND_XSAVE, NEITHER_FPU, XCRS_ALONE, XSAVE_ODD, MSRS_EMPTY,
	MSRS_PARTIAL, BAD_DEV_NAME, DEV_ID_HIGH, UNKNOWN_KIND, NCPUS_ZERO, RAM_MISMATCH,
	VM_ID_ONE, CPUID_TOO_MANY,
};

static void rec_zero(struct snapshot_file_builder *b, uint32_t tag, size_t n)
{
	void *z = calloc(1, n ? n : 1);
	ck_assert_ptr_nonnull(z);
	snapshot_file_build_rec(b, tag, z, n);
	free(z);
}

static void cpu_section(struct snapshot_file_builder *b, uint32_t id, enum flaw f)
{
	snapshot_file_build_section(b, SNAPSHOT_FILE_SEC_CPU, id);
	rec_zero(b, SNAPSHOT_FILE_C_REGS, f == REGS_SHORT ? sizeof(struct kvm_regs) - 8
						  : sizeof(struct kvm_regs));
	if (f == REGS_TWICE)
		rec_zero(b, SNAPSHOT_FILE_C_REGS, sizeof(struct kvm_regs));
	rec_zero(b, SNAPSHOT_FILE_C_SREGS, sizeof(struct kvm_sregs));
	if (f == FPU_AND_XSAVE || f == XCRS_ALONE)
		rec_zero(b, SNAPSHOT_FILE_C_FPU, sizeof(struct kvm_fpu));
	if (f != NEITHER_FPU && f != XCRS_ALONE)
		rec_zero(b, SNAPSHOT_FILE_C_XSAVE, f == XSAVE_ODD ? 4096 + 8 : 4096);
	if (f != NEITHER_FPU)
		rec_zero(b, SNAPSHOT_FILE_C_XCRS, sizeof(struct kvm_xcrs));
	if (f != NO_LAPIC)
		rec_zero(b, SNAPSHOT_FILE_C_LAPIC, sizeof(struct kvm_lapic_state));
	rec_zero(b, SNAPSHOT_FILE_C_MP_STATE, sizeof(struct kvm_mp_state));
	rec_zero(b, SNAPSHOT_FILE_C_EVENTS, sizeof(struct kvm_vcpu_events));
	rec_zero(b, SNAPSHOT_FILE_C_DEBUGREGS, sizeof(struct kvm_debugregs));
	rec_zero(b, SNAPSHOT_FILE_C_MSRS, f == MSRS_EMPTY ? 0 : f == MSRS_PARTIAL ? 24 : 3 * 16);
	rec_zero(b, SNAPSHOT_FILE_C_CPUID, f == CPUID_TOO_MANY ? 257 * sizeof(struct kvm_cpuid_entry2)
						     : 4 * sizeof(struct kvm_cpuid_entry2));
	if (f == UNKNOWN_TAG)
		rec_zero(b, 999, 8);
}

/* Metadata of a 2-vCPU snapshot with one device, but for flaw f. */
static void build(struct statebuf_writer *meta, enum flaw f)
{
	struct snapshot_file_builder b;
	snapshot_file_build_init(&b);
	struct snapshot_file_layout l = { .ncpus = f == NCPUS_ZERO ? 0 : 2, .tsc_khz = 2300000,
				  .ram_size = f == RAM_MISMATCH ? RAM_LEN * 2 : RAM_LEN,
				  .low_ram = RAM_LEN,
				  .high_base = f == RAM_MISMATCH ? 1ull << 32 : 0 };
	memset(l.key, 0xab, sizeof l.key);
	if (f != NO_LAYOUT)
		snapshot_file_build_layout(&b, &l);
	if (f != NO_VM) {
		snapshot_file_build_section(&b, SNAPSHOT_FILE_SEC_VM, f == VM_ID_ONE ? 1 : 0);
		rec_zero(&b, SNAPSHOT_FILE_V_CLOCK, sizeof(struct kvm_clock_data));
		rec_zero(&b, SNAPSHOT_FILE_V_PIT2, sizeof(struct kvm_pit_state2));
		rec_zero(&b, SNAPSHOT_FILE_V_PIC0, IRQCHIP_LEN);
		rec_zero(&b, SNAPSHOT_FILE_V_PIC1, IRQCHIP_LEN);
		rec_zero(&b, SNAPSHOT_FILE_V_IOAPIC, IRQCHIP_LEN);
	}
	cpu_section(&b, 0, f);
	if (f != CPU_MISSING)
		cpu_section(&b, f == CPU_TWICE ? 0 : 1, OK);
	if (f == CPU_EXTRA)
		cpu_section(&b, 2, OK);
	snapshot_file_build_section(&b, SNAPSHOT_FILE_SEC_DEV, f == DEV_ID_HIGH ? SNAPSHOT_FILE_MAX_DEVS : 5);
	snapshot_file_build_rec(&b, SNAPSHOT_FILE_D_NAME, f == BAD_DEV_NAME ? "Virtio/MMIO" : "virtio-mmio",
			11);
	snapshot_file_build_rec(&b, SNAPSHOT_FILE_D_BLOB, "\1\2\3", 3);
	if (f == UNKNOWN_KIND)
		snapshot_file_build_section(&b, 9, 0);
	ck_assert_int_eq(snapshot_file_build_finish(&b, RAM_LEN, meta), 0);
	snapshot_file_build_free(&b);
}

static uint64_t file_size(const struct statebuf_writer *m)
{
	return ((m->len + SNAPSHOT_FILE_PAGE - 1) & ~(uint64_t)(SNAPSHOT_FILE_PAGE - 1)) + RAM_LEN;
}

START_TEST(parse_accepts_what_the_builder_makes)
{
	struct statebuf_writer m;
	struct snapshot_file_view v;
	build(&m, OK);
	ck_assert_int_eq(snapshot_file_parse(m.buf, m.len, file_size(&m), &v, err, sizeof err), 0);
	ck_assert_uint_eq(v.layout.ncpus, 2);
	ck_assert_uint_eq(v.layout.tsc_khz, 2300000);
	ck_assert(v.layout.ram_size == RAM_LEN);
	ck_assert_uint_eq(v.layout.key[31], 0xab);
	ck_assert(v.ram_off % SNAPSHOT_FILE_PAGE == 0 && v.ram_off >= m.len);
	ck_assert(v.ram_len == RAM_LEN);
	ck_assert_uint_eq(v.nsec, 5);
	ck_assert_uint_eq(v.ndev, 1);
	const struct snapshot_file_sec *s = snapshot_file_find(&v, SNAPSHOT_FILE_SEC_DEV, 5);
	ck_assert_ptr_nonnull(s);
	const uint8_t *d;
	uint32_t n;
	ck_assert_int_eq(snapshot_file_rec(s, SNAPSHOT_FILE_D_BLOB, &d, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_mem_eq(d, "\1\2\3", 3);
	ck_assert_int_eq(snapshot_file_rec(s, SNAPSHOT_FILE_C_REGS, &d, &n), -ENOENT);
	s = snapshot_file_find(&v, SNAPSHOT_FILE_SEC_CPU, 1);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(snapshot_file_rec(s, SNAPSHOT_FILE_C_XSAVE, &d, &n), 0);
	ck_assert_uint_eq(n, 4096);
	ck_assert_ptr_null(snapshot_file_find(&v, SNAPSHOT_FILE_SEC_CPU, 2));
	statebuf_free(&m);
}
END_TEST

START_TEST(parse_refuses_every_flaw)
{
	static const struct { enum flaw f; const char *says; } cases[] = {
		{ NO_LAYOUT, "no layout" },
		{ NO_VM, "no VM" },
		{ CPU_MISSING, "1 vCPU sections for 2" },
		{ CPU_EXTRA, "vCPU section 2 in a snapshot of 2" },
		{ CPU_TWICE, "vCPU section 0 twice" },
		{ REGS_SHORT, "record 32 has 136 bytes" },
		{ REGS_TWICE, "record 32 twice" },
		{ UNKNOWN_TAG, "unknown record 999" },
		{ NO_LAPIC, "record 37 missing" },
		{ FPU_AND_XSAVE, "exactly one" },
		{ NEITHER_FPU, "exactly one" },
		{ XCRS_ALONE, "XCRs without" },
		{ XSAVE_ODD, "record 35 has 4104" },
		{ MSRS_EMPTY, "record 41 has 0" },
		{ MSRS_PARTIAL, "record 41 has 24" },
		{ BAD_DEV_NAME, "bad device name" },
		{ DEV_ID_HIGH, "device section id 32" },
		{ UNKNOWN_KIND, "unknown kind 9" },
		{ NCPUS_ZERO, "0 vCPUs" },
		{ RAM_MISMATCH, "layout says" },
		{ VM_ID_ONE, "VM section id 1" },
		{ CPUID_TOO_MANY, "record 42 has 10280" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct statebuf_writer m;
		struct snapshot_file_view v;
		build(&m, cases[i].f);
		err[0] = 0;
		int rc = snapshot_file_parse(m.buf, m.len, file_size(&m), &v, err, sizeof err);
		ck_assert_msg(rc == -EBADMSG && strstr(err, cases[i].says),
			      "flaw %d: rc %d, '%s' (want '%s')", cases[i].f, rc, err, cases[i].says);
		statebuf_free(&m);
	}
}
END_TEST

static uint8_t *dup_meta(const struct statebuf_writer *m)
{
	uint8_t *p = malloc(m->len);
	ck_assert_ptr_nonnull(p);
	memcpy(p, m->buf, m->len);
	return p;
}

static void put64(uint8_t *p, uint64_t v)
{
	for (unsigned i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put32(uint8_t *p, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

START_TEST(parse_refuses_bad_headers_and_tables)
{
	struct statebuf_writer m;
	struct snapshot_file_view v;
	build(&m, OK);
	uint64_t fs = file_size(&m);
	uint8_t *p = dup_meta(&m);
	uint64_t ml;

	ck_assert_int_eq(snapshot_file_header(p, SNAPSHOT_FILE_HDR_LEN - 1, &ml, err, sizeof err), -EBADMSG);
	ck_assert_int_eq(snapshot_file_header(p, m.len, &ml, err, sizeof err), 0);
	ck_assert(ml == m.len);

	/* Any changed byte is caught, if by nothing else by the checksum. */
	for (size_t i = 0; i < m.len; i += 13) {
		p[i] ^= 0x41;
		ck_assert_int_lt(snapshot_file_parse(p, m.len, fs, &v, NULL, 0), 0);
		p[i] ^= 0x41;
	}
	ck_assert_int_eq(snapshot_file_parse(p, m.len, fs, &v, err, sizeof err), 0);

	/* Cut short, or the file's size not what the RAM needs. */
	ck_assert_int_eq(snapshot_file_parse(p, m.len - 8, fs, &v, err, sizeof err), -EBADMSG);
	ck_assert_int_eq(snapshot_file_parse(p, m.len, fs - 1, &v, err, sizeof err), -EBADMSG);
	ck_assert_int_eq(snapshot_file_parse(p, m.len, fs + SNAPSHOT_FILE_PAGE, &v, err, sizeof err), -EBADMSG);
	ck_assert_int_eq(snapshot_file_parse(p, m.len, 0, &v, err, sizeof err), -EBADMSG);

	/* With the checksum made good again, the structure's own checks. */
	struct { size_t off; uint64_t val; int wide; int rc; const char *says; } bad[] = {
		{ 8, 2, 0, -EPROTO, "version 2" },
		{ 12, 72, 0, -EBADMSG, "header length" },
		{ 16, SNAPSHOT_FILE_MAX_SECTIONS + 1, 0, -EBADMSG, "section count" },
		{ 16, 100, 0, -EBADMSG, "" }, /* payload bytes read as a table */
		{ 20, 1, 0, -EBADMSG, "flags" },
		{ 32, 0, 1, -EBADMSG, "does not fill" },
		{ 32, 12345, 1, -EBADMSG, "does not fill" },
		{ 40, RAM_LEN + 1, 1, -EBADMSG, "does not fill" },
		{ 56, 1, 1, -EBADMSG, "flags" },
		/* the first section table entry: kind, offset, length */
		{ 64, 0, 0, -EBADMSG, "unknown kind" },
		{ 72, 3, 1, -EBADMSG, "out of place" },
		{ 72, 0, 1, -EBADMSG, "out of place" },
		{ 72, UINT64_MAX - 7, 1, -EBADMSG, "out of place" },
		{ 80, UINT64_MAX, 1, -EBADMSG, "out of place" },
		{ 80, 8, 1, -EBADMSG, "" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint8_t *q = dup_meta(&m);
		if (bad[i].wide)
			put64(q + bad[i].off, bad[i].val);
		else
			put32(q + bad[i].off, (uint32_t)bad[i].val);
		snapshot_file_seal(q, m.len);
		err[0] = 0;
		int rc = snapshot_file_parse(q, m.len, fs, &v, err, sizeof err);
		ck_assert_msg(rc == bad[i].rc && strstr(err, bad[i].says), "case %zu: rc %d '%s'",
			      i, rc, err);
		free(q);
	}

	/* The second section starting inside the first: overlap. */
	uint8_t *q = dup_meta(&m);
	uint64_t off0 = statebuf_le64(q + 64 + 8);
	put64(q + 64 + 24 + 8, off0 + 8);
	snapshot_file_seal(q, m.len);
	ck_assert_int_eq(snapshot_file_parse(q, m.len, fs, &v, err, sizeof err), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(err, "out of place"));
	free(q);

	/* Padding of a record must be zeros: the device name's (11 bytes). */
	q = dup_meta(&m);
	const struct snapshot_file_sec *s;
	ck_assert_int_eq(snapshot_file_parse(q, m.len, fs, &v, NULL, 0), 0);
	s = snapshot_file_find(&v, SNAPSHOT_FILE_SEC_DEV, 5);
	size_t pad = (size_t)(s->data - q) + 8 + 11;
	q[pad] = 1;
	snapshot_file_seal(q, m.len);
	ck_assert_int_eq(snapshot_file_parse(q, m.len, fs, &v, err, sizeof err), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(err, "padding"));
	free(q);

	free(p);
	statebuf_free(&m);
}
END_TEST

START_TEST(builder_limits)
{
	struct snapshot_file_builder b;
	struct statebuf_writer m;
	snapshot_file_build_init(&b);
	snapshot_file_build_rec(&b, SNAPSHOT_FILE_L_KEY, "x", 1); /* no section begun */
	ck_assert_int_eq(snapshot_file_build_finish(&b, RAM_LEN, &m), -EINVAL);
	snapshot_file_build_free(&b);

	snapshot_file_build_init(&b);
	for (unsigned i = 0; i <= SNAPSHOT_FILE_MAX_SECTIONS; i++)
		snapshot_file_build_section(&b, SNAPSHOT_FILE_SEC_DEV, i);
	ck_assert_int_eq(snapshot_file_build_finish(&b, RAM_LEN, &m), -ENOSPC);
	snapshot_file_build_free(&b);
	statebuf_free(&m);
}
END_TEST

static uint8_t *make_ram(void)
{
	uint8_t *ram = calloc(1, RAM_LEN);
	ck_assert_ptr_nonnull(ram);
	for (unsigned i = 0; i < RAM_LEN; i += 3 * SNAPSHOT_FILE_PAGE) /* pages 0, 3, 6...: data */
		memset(ram + i, (int)(i / SNAPSHOT_FILE_PAGE) + 1, 100);
	ram[RAM_LEN - 1] = 0x77;
	return ram;
}

START_TEST(write_then_open)
{
	struct statebuf_writer m;
	build(&m, OK);
	uint8_t *ram = make_ram();
	ck_assert_int_eq(snapshot_file_write(dir, "tmpl-1", &m, ram, RAM_LEN, err, sizeof err), 0);
	struct stat st;
	char path[128];
	snprintf(path, sizeof path, "%s/tmpl-1", dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);

	struct snapshot_file_file f;
	ck_assert_int_eq(snapshot_file_open(dir, "tmpl-1", &f, err, sizeof err), 0);
	ck_assert(f.size == f.v.ram_off + RAM_LEN);
	ck_assert_uint_eq(f.v.layout.ncpus, 2);
	ck_assert(f.disk_bytes < f.size); /* the zero pages are holes */
	uint8_t *map = mmap(NULL, RAM_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE, f.fd,
			    (off_t)f.v.ram_off);
	ck_assert_ptr_ne(map, MAP_FAILED);
	ck_assert_mem_eq(map, ram, RAM_LEN);
	map[5] = 0xee; /* copy-on-write: the file keeps its byte */
	ck_assert_int_eq(munmap(map, RAM_LEN), 0);
	uint8_t b;
	ck_assert_int_eq(pread(f.fd, &b, 1, (off_t)f.v.ram_off + 5), 1);
	ck_assert_uint_eq(b, 1);
	snapshot_file_close(&f);
	snapshot_file_close(&f);

	/* Written again over the old one, atomically; no temporary left. */
	ck_assert_int_eq(snapshot_file_write(dir, "tmpl-1", &m, ram, RAM_LEN, err, sizeof err), 0);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", dir);
	ck_assert_int_eq(system(cmd), 0);

	/* A temporary left by a kbox that died with this pid is replaced. */
	char stale[160];
	snprintf(stale, sizeof stale, "%s/.tmpl-1.tmp-%ld", dir, (long)getpid());
	FILE *sf = fopen(stale, "w");
	ck_assert_ptr_nonnull(sf);
	fclose(sf);
	ck_assert_int_eq(snapshot_file_write(dir, "tmpl-1", &m, ram, RAM_LEN, err, sizeof err), 0);
	ck_assert_int_eq(system(cmd), 0);

	/* The metadata must describe the RAM it is written with. */
	ck_assert_int_eq(snapshot_file_write(dir, "t2", &m, ram, RAM_LEN - SNAPSHOT_FILE_PAGE, err, sizeof err),
			 -EINVAL);
	free(ram);
	statebuf_free(&m);
}
END_TEST

START_TEST(refuses_what_kbox_did_not_write)
{
	struct statebuf_writer m;
	build(&m, OK);
	uint8_t *ram = make_ram();
	struct snapshot_file_file f;
	char path[128], other[128];
	snprintf(path, sizeof path, "%s/t", dir);
	snprintf(other, sizeof other, "%s/u", dir);

	static const char *names[] = { "", ".hidden.list", "a/b", "..", "sp ace",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		ck_assert_int_eq(snapshot_file_write(dir, names[i], &m, ram, RAM_LEN, err, sizeof err),
				 -EINVAL);
		ck_assert_int_eq(snapshot_file_open(dir, names[i], &f, err, sizeof err), -EINVAL);
	}
	ck_assert_int_eq(snapshot_file_name_ok("Ab_9.-x"), 0);

	/* A folder others may enter or write is not kbox's private cache. */
	ck_assert_int_eq(chmod(dir, 0750), 0);
	ck_assert_int_eq(snapshot_file_write(dir, "t", &m, ram, RAM_LEN, err, sizeof err), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "not private"));
	ck_assert_int_eq(chmod(dir, 0700), 0);
	ck_assert_int_eq(snapshot_file_write(dir, "t", &m, ram, RAM_LEN, err, sizeof err), 0);
	ck_assert_int_eq(chmod(dir, 0711), 0);
	ck_assert_int_eq(snapshot_file_open(dir, "t", &f, err, sizeof err), -EPERM);
	ck_assert_int_eq(chmod(dir, 0700), 0);
	ck_assert_int_eq(snapshot_file_open(dir, "t", &f, err, sizeof err), 0);
	snapshot_file_close(&f);

	/* Another user's folder or file (as root, where chown is allowed). */
	if (geteuid() == 0) {
		ck_assert_int_eq(chown(dir, 1002, 1002), 0);
		ck_assert_int_eq(snapshot_file_open(dir, "t", &f, err, sizeof err), -EPERM);
		ck_assert_int_eq(snapshot_file_write(dir, "t", &m, ram, RAM_LEN, err, sizeof err), -EPERM);
		ck_assert_int_eq(chown(dir, 0, 0), 0);
		ck_assert_int_eq(chown(path, 1002, 1002), 0);
		ck_assert_int_eq(snapshot_file_open(dir, "t", &f, err, sizeof err), -EPERM);
		ck_assert_ptr_nonnull(strstr(err, "not written by kbox"));
		ck_assert_int_eq(chown(path, 0, 0), 0);
		ck_assert_int_eq(snapshot_file_open(dir, "t", &f, err, sizeof err), 0);
		snapshot_file_close(&f);
	}

	/* A symlink as the folder. */
	char slink[128];
	snprintf(slink, sizeof slink, "%s-link", dir);
	ck_assert_int_eq(symlink(dir, slink), 0);
	ck_assert_int_lt(snapshot_file_open(slink, "t", &f, err, sizeof err), 0);
	unlink(slink);

	/* The file readable by others, hard-linked, a symlink, a FIFO. */
	ck_assert_int_eq(chmod(path, 0644), 0);
	ck_assert_int_eq(snapshot_file_open(dir, "t", &f, err, sizeof err), -EPERM);
	ck_assert_int_eq(chmod(path, 0600), 0);
	ck_assert_int_eq(link(path, other), 0);
	ck_assert_int_eq(snapshot_file_open(dir, "t", &f, err, sizeof err), -EPERM);
	ck_assert_int_eq(unlink(other), 0);
	ck_assert_int_eq(symlink(path, other), 0);
	ck_assert_int_eq(snapshot_file_open(dir, "u", &f, err, sizeof err), -ELOOP);
	ck_assert_int_eq(unlink(other), 0);
	ck_assert_int_eq(mkfifo(other, 0600), 0);
	ck_assert_int_eq(snapshot_file_open(dir, "u", &f, err, sizeof err), -EPERM);
	ck_assert_int_eq(unlink(other), 0);

	/* Cut short: the RAM no longer fills the file. */
	ck_assert_int_eq(truncate(path, (off_t)(file_size(&m) - SNAPSHOT_FILE_PAGE)), 0);
	ck_assert_int_eq(snapshot_file_open(dir, "t", &f, err, sizeof err), -EBADMSG);
	ck_assert_int_eq(truncate(path, 10), 0);
	ck_assert_int_eq(snapshot_file_open(dir, "t", &f, err, sizeof err), -EBADMSG);
	ck_assert_int_eq(snapshot_file_open(dir, "absent", &f, err, sizeof err), -ENOENT);

	/* A folder in the name's place: the rename fails, nothing is left. */
	ck_assert_int_eq(mkdir(other, 0700), 0);
	ck_assert_int_lt(snapshot_file_write(dir, "u", &m, ram, RAM_LEN, err, sizeof err), 0);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 2", dir);
	ck_assert_int_eq(system(cmd), 0);
	free(ram);
	statebuf_free(&m);
}
END_TEST

/* ---- a fork's file: written into and opened from a descriptor ---- */

static off_t fd_size(int fd)
{
	struct stat st;
	ck_assert_int_eq(fstat(fd, &st), 0);
	return st.st_size;
}

/* fd holds the snapshot of m and ram: open_fd takes a duplicate, RAM
 * maps from it, and fd stays the caller's. */
static void check_opens(int fd, const struct statebuf_writer *m, const uint8_t *ram)
{
	struct snapshot_file_file f;
	ck_assert_int_eq(snapshot_file_open_fd(fd, &f, err, sizeof err), 0);
	ck_assert_int_ge(f.fd, 0);
	ck_assert_int_ne(f.fd, fd);
	ck_assert(f.size == file_size(m));
	ck_assert(f.size == f.v.ram_off + RAM_LEN);
	ck_assert_uint_eq(f.v.layout.ncpus, 2);
	ck_assert_uint_eq(f.v.layout.key[0], 0xab);
	ck_assert(f.disk_bytes < f.size); /* the zero pages are holes */
	uint8_t *map = mmap(NULL, RAM_LEN, PROT_READ, MAP_PRIVATE, f.fd, (off_t)f.v.ram_off);
	ck_assert_ptr_ne(map, MAP_FAILED);
	ck_assert_mem_eq(map, ram, RAM_LEN);
	ck_assert_int_eq(munmap(map, RAM_LEN), 0);
	ck_assert_int_ne(fcntl(f.fd, F_GETFD) & FD_CLOEXEC, 0);
	snapshot_file_close(&f);
	snapshot_file_close(&f);
	ck_assert_int_ge(fcntl(fd, F_GETFD), 0); /* still open */
}

START_TEST(fd_write_then_open)
{
	struct statebuf_writer m;
	build(&m, OK);
	uint8_t *ram = make_ram();

	/* an unnamed file, as kbox fork makes it */
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(snapshot_file_write_fd(fd, &m, ram, RAM_LEN, NULL, err, sizeof err), 0);
	ck_assert(fd_size(fd) == (off_t)file_size(&m));
	check_opens(fd, &m, ram);
	close(fd);

	/* a named one, its only link */
	char path[128];
	snprintf(path, sizeof path, "%s/fork", dir);
	fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(snapshot_file_write_fd(fd, &m, ram, RAM_LEN, NULL, err, sizeof err), 0);
	check_opens(fd, &m, ram);
	/* and once unlinked (0 links) */
	ck_assert_int_eq(unlink(path), 0);
	check_opens(fd, &m, ram);
	close(fd);

	/* the metadata must describe the RAM: nothing written */
	fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(snapshot_file_write_fd(fd, &m, ram, RAM_LEN - SNAPSHOT_FILE_PAGE, NULL, err,
						sizeof err),
			 -EINVAL);
	ck_assert(fd_size(fd) == 0);
	close(fd);
	free(ram);
	statebuf_free(&m);
}
END_TEST

START_TEST(fd_refusals)
{
	struct statebuf_writer m;
	build(&m, OK);
	uint8_t *ram = make_ram();
	struct snapshot_file_file f;
	char path[128], other[128];
	snprintf(path, sizeof path, "%s/fork", dir);
	snprintf(other, sizeof other, "%s/fork2", dir);

	/* written once: not empty any more, left as it is */
	int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(snapshot_file_write_fd(fd, &m, ram, RAM_LEN, NULL, err, sizeof err), 0);
	ck_assert_int_eq(snapshot_file_write_fd(fd, &m, ram, RAM_LEN, NULL, err, sizeof err), -EEXIST);
	ck_assert_ptr_nonnull(strstr(err, "not empty"));
	ck_assert(fd_size(fd) == (off_t)file_size(&m));
	check_opens(fd, &m, ram);

	/* readable by others */
	ck_assert_int_eq(fchmod(fd, 0644), 0);
	ck_assert_int_eq(snapshot_file_open_fd(fd, &f, err, sizeof err), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "not a private file"));
	ck_assert_int_eq(fchmod(fd, 0640), 0);
	ck_assert_int_eq(snapshot_file_open_fd(fd, &f, err, sizeof err), -EPERM);
	ck_assert_int_eq(fchmod(fd, 0600), 0);
	/* a second link */
	ck_assert_int_eq(link(path, other), 0);
	ck_assert_int_eq(snapshot_file_open_fd(fd, &f, err, sizeof err), -EPERM);
	ck_assert_int_eq(unlink(other), 0);
	check_opens(fd, &m, ram);

	/* cut short: the RAM no longer fills it; then shorter than a header */
	ck_assert_int_eq(ftruncate(fd, (off_t)(file_size(&m) - SNAPSHOT_FILE_PAGE)), 0);
	ck_assert_int_eq(snapshot_file_open_fd(fd, &f, err, sizeof err), -EBADMSG);
	ck_assert_int_eq(f.fd, -1);
	ck_assert_int_eq(ftruncate(fd, 10), 0);
	ck_assert_int_eq(snapshot_file_open_fd(fd, &f, err, sizeof err), -EBADMSG);
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	ck_assert_int_eq(snapshot_file_open_fd(fd, &f, err, sizeof err), -EBADMSG);
	snapshot_file_close(&f);

	/* empty again, but readable by others, or linked twice: not written */
	ck_assert_int_eq(fchmod(fd, 0644), 0);
	ck_assert_int_eq(snapshot_file_write_fd(fd, &m, ram, RAM_LEN, NULL, err, sizeof err), -EPERM);
	ck_assert(fd_size(fd) == 0);
	ck_assert_int_eq(fchmod(fd, 0600), 0);
	ck_assert_int_eq(link(path, other), 0);
	ck_assert_int_eq(snapshot_file_write_fd(fd, &m, ram, RAM_LEN, NULL, err, sizeof err), -EPERM);
	ck_assert(fd_size(fd) == 0);
	ck_assert_int_eq(unlink(other), 0);
	close(fd);

	/* a folder, a FIFO */
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(dfd, 0);
	ck_assert_int_eq(snapshot_file_write_fd(dfd, &m, ram, RAM_LEN, NULL, err, sizeof err), -EPERM);
	ck_assert_int_eq(snapshot_file_open_fd(dfd, &f, err, sizeof err), -EPERM);
	close(dfd);
	ck_assert_int_eq(mkfifo(other, 0600), 0);
	int ffd = open(other, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(ffd, 0);
	ck_assert_int_eq(snapshot_file_write_fd(ffd, &m, ram, RAM_LEN, NULL, err, sizeof err), -EPERM);
	ck_assert_int_eq(snapshot_file_open_fd(ffd, &f, err, sizeof err), -EPERM);
	close(ffd);
	ck_assert_int_eq(unlink(other), 0);
	/* not a descriptor */
	ck_assert_int_eq(snapshot_file_open_fd(-1, &f, err, sizeof err), -EBADF);
	ck_assert_int_eq(snapshot_file_write_fd(-1, &m, ram, RAM_LEN, NULL, err, sizeof err), -EBADF);
	free(ram);
	statebuf_free(&m);
}
END_TEST

/* A write that fails half-way (the file size limit, reached in the RAM)
 * leaves the file empty, ready for another try. */
START_TEST(fd_failed_write_leaves_it_empty)
{
	struct statebuf_writer m;
	build(&m, OK);
	uint8_t *ram = make_ram();
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	struct rlimit old, lim;
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)(file_size(&m) - SNAPSHOT_FILE_PAGE);
	ck_assert(lim.rlim_cur > m.len);
	ck_assert_ptr_ne(signal(SIGXFSZ, SIG_IGN), SIG_ERR);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	ck_assert_int_eq(snapshot_file_write_fd(fd, &m, ram, RAM_LEN, NULL, err, sizeof err), -EFBIG);
	ck_assert_ptr_nonnull(strstr(err, "cannot write the snapshot"));
	ck_assert(fd_size(fd) == 0);
	struct snapshot_file_file f;
	ck_assert_int_eq(snapshot_file_open_fd(fd, &f, err, sizeof err), -EBADMSG);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	ck_assert_int_eq(snapshot_file_write_fd(fd, &m, ram, RAM_LEN, NULL, err, sizeof err), 0);
	check_opens(fd, &m, ram);
	close(fd);
	free(ram);
	statebuf_free(&m);
}
END_TEST

Suite *snapshot_file_suite(void)
{
	return unit_suite_fixture("snapshot_file", "snapshot_file", setup,
				  teardown, 0,
				  parse_accepts_what_the_builder_makes,
				  parse_refuses_every_flaw,
				  parse_refuses_bad_headers_and_tables,
				  builder_limits, write_then_open,
				  refuses_what_kbox_did_not_write,
				  fd_write_then_open, fd_refusals,
				  fd_failed_write_leaves_it_empty);
}
