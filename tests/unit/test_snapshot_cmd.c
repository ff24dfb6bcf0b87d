/* `kbox snapshot ls|rm|prune` run in-process on real template files,
 * written by snapshot_file_write into a private folder that
 * KBOX_TEMPLATE_DIR names; template_touch, which kbox run calls;
 * template_fork_file, which kbox fork calls. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kvm.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/statebuf.h"
#include "vmm/cli.h"
#include "vmm/cmd/snapshot_cmd.h"
#include "vmm/core/snapshot_file.h"
#include "vmm/sandbox/template.h"
#include "tests/lib/unit_suite.h"

#define RAM_PAGES 16u
#define RAM_LEN (RAM_PAGES * SNAPSHOT_FILE_PAGE)
#define IRQCHIP_LEN sizeof(((struct kvm_irqchip *)0)->chip)
#define DAY 86400L

static char dir[64];
static char err[512];
static char out[32768], errout[8192];

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/kbox-snapcmd-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(setenv("KBOX_TEMPLATE_DIR", dir, 1), 0);
	ck_assert_int_eq(setenv("TZ", "UTC", 1), 0);
	tzset();
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];
	chmod(dir, 0700);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
	unsetenv("KBOX_TEMPLATE_DIR");
	unsetenv("TZ");
}

static void slurp(FILE *f, char *buf, size_t len)
{
	rewind(f);
	size_t n = fread(buf, 1, len - 1, f);
	buf[n] = 0;
	fclose(f);
}

/* snapshot_main("snapshot", args..., NULL) with stdout and stderr caught
 * in out and errout; its exit code. */
static int run(const char *a, ...)
{
	char *argv[16];
	int argc = 0;
	argv[argc++] = (char *)"snapshot";
	va_list ap;
	va_start(ap, a);
	for (const char *s = a; s; s = va_arg(ap, const char *)) {
		ck_assert_int_lt(argc, 15);
		argv[argc++] = (char *)s;
	}
	va_end(ap);
	argv[argc] = NULL;
	fflush(stdout);
	fflush(stderr);
	FILE *fo = tmpfile(), *fe = tmpfile();
	ck_assert(fo && fe);
	int so = dup(STDOUT_FILENO), se = dup(STDERR_FILENO);
	ck_assert(so >= 0 && se >= 0);
	ck_assert_int_ge(dup2(fileno(fo), STDOUT_FILENO), 0);
	ck_assert_int_ge(dup2(fileno(fe), STDERR_FILENO), 0);
	int rc = snapshot_main(argc, argv);
	fflush(stdout);
	fflush(stderr);
	dup2(so, STDOUT_FILENO);
	dup2(se, STDERR_FILENO);
	close(so);
	close(se);
	slurp(fo, out, sizeof out);
	slurp(fe, errout, sizeof errout);
	return rc;
}

static void rec_zero(struct snapshot_file_builder *b, uint32_t tag, size_t n)
{
	void *z = calloc(1, n);
	ck_assert_ptr_nonnull(z);
	snapshot_file_build_rec(b, tag, z, n);
	free(z);
}

/* "t-" KEY ".snap" for the key that starts with start and goes on with
 * fill. */
static void name_of(const char *start, char fill, char name[TEMPLATE_NAME_LEN + 1])
{
	char key[2 * SNAPSHOT_FILE_KEY_LEN + 1];
	memset(key, fill, sizeof key - 1);
	key[sizeof key - 1] = 0;
	memcpy(key, start, strlen(start));
	snprintf(name, TEMPLATE_NAME_LEN + 1, "%s%s%s", TEMPLATE_PREFIX, key, TEMPLATE_SUFFIX);
	ck_assert(template_name_ok(name));
}

static void path_of(const char *name, char *path, size_t len)
{
	snprintf(path, len, "%s/%s", dir, name);
}

/* A template of ncpus vCPUs as kbox run writes one, named name. */
static void make_template(const char *name, uint32_t ncpus)
{
	struct snapshot_file_builder b;
	snapshot_file_build_init(&b);
	struct snapshot_file_layout l = { .ncpus = ncpus, .tsc_khz = 2300000, .ram_size = RAM_LEN,
					  .low_ram = RAM_LEN };
	snapshot_file_build_layout(&b, &l);
	snapshot_file_build_section(&b, SNAPSHOT_FILE_SEC_VM, 0);
	rec_zero(&b, SNAPSHOT_FILE_V_CLOCK, sizeof(struct kvm_clock_data));
	rec_zero(&b, SNAPSHOT_FILE_V_PIT2, sizeof(struct kvm_pit_state2));
	rec_zero(&b, SNAPSHOT_FILE_V_PIC0, IRQCHIP_LEN);
	rec_zero(&b, SNAPSHOT_FILE_V_PIC1, IRQCHIP_LEN);
	rec_zero(&b, SNAPSHOT_FILE_V_IOAPIC, IRQCHIP_LEN);
	for (uint32_t i = 0; i < ncpus; i++) {
		snapshot_file_build_section(&b, SNAPSHOT_FILE_SEC_CPU, i);
		rec_zero(&b, SNAPSHOT_FILE_C_REGS, sizeof(struct kvm_regs));
		rec_zero(&b, SNAPSHOT_FILE_C_SREGS, sizeof(struct kvm_sregs));
		rec_zero(&b, SNAPSHOT_FILE_C_XSAVE, 4096);
		rec_zero(&b, SNAPSHOT_FILE_C_XCRS, sizeof(struct kvm_xcrs));
		rec_zero(&b, SNAPSHOT_FILE_C_LAPIC, sizeof(struct kvm_lapic_state));
		rec_zero(&b, SNAPSHOT_FILE_C_MP_STATE, sizeof(struct kvm_mp_state));
		rec_zero(&b, SNAPSHOT_FILE_C_EVENTS, sizeof(struct kvm_vcpu_events));
		rec_zero(&b, SNAPSHOT_FILE_C_DEBUGREGS, sizeof(struct kvm_debugregs));
		rec_zero(&b, SNAPSHOT_FILE_C_MSRS, 3 * sizeof(struct kvm_msr_entry));
		rec_zero(&b, SNAPSHOT_FILE_C_CPUID, 4 * sizeof(struct kvm_cpuid_entry2));
	}
	struct statebuf_writer m;
	ck_assert_int_eq(snapshot_file_build_finish(&b, RAM_LEN, &m), 0);
	snapshot_file_build_free(&b);
	uint8_t *ram = calloc(1, RAM_LEN);
	ck_assert_ptr_nonnull(ram);
	memset(ram, 0x5a, 2 * SNAPSHOT_FILE_PAGE); /* two pages of data, the rest holes */
	ck_assert_int_eq(snapshot_file_write(dir, name, &m, ram, RAM_LEN, err, sizeof err), 0);
	free(ram);
	statebuf_free(&m);
}

/* A template made by a kbox of another file format version. */
static void make_other_version(const char *name)
{
	make_template(name, 1);
	char path[PATH_MAX];
	path_of(name, path, sizeof path);
	int fd = open(path, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	uint8_t v[4] = { 2, 0, 0, 0 };
	ck_assert_int_eq(pwrite(fd, v, sizeof v, 8), 4);
	close(fd);
}

/* A plain file of a few bytes in the folder. */
static void put_file(const char *name, mode_t mode)
{
	char path[PATH_MAX];
	path_of(name, path, sizeof path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "leftover", 8), 8);
	close(fd);
}

static void set_times(const char *name, time_t atime, time_t mtime)
{
	char path[PATH_MAX];
	path_of(name, path, sizeof path);
	const struct timespec t[2] = { { .tv_sec = atime }, { .tv_sec = mtime } };
	ck_assert_int_eq(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

static int exists(const char *name)
{
	char path[PATH_MAX];
	struct stat st;
	path_of(name, path, sizeof path);
	return lstat(path, &st) == 0;
}

static time_t atime_of(const char *name)
{
	char path[PATH_MAX];
	struct stat st;
	path_of(name, path, sizeof path);
	ck_assert_int_eq(lstat(path, &st), 0);
	return st.st_atim.tv_sec;
}

/* The line of out that starts with start, or NULL. */
static const char *line_of(const char *start)
{
	size_t n = strlen(start);
	for (const char *p = out; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
		if (strncmp(p, start, n) == 0)
			return p;
	return NULL;
}

START_TEST(ls_lists_templates_without_using_them)
{
	char a[TEMPLATE_NAME_LEN + 1], b[TEMPLATE_NAME_LEN + 1], bad[TEMPLATE_NAME_LEN + 1];
	name_of("0123456789ab", 'c', a);
	name_of("fedcba987654", '3', b);
	name_of("5555", '0', bad);
	make_template(a, 1);
	make_template(b, 2);
	make_other_version(bad);
	/* 2026-01-02 03:04 and 2026-03-04 05:06 UTC */
	set_times(a, 1772600760, 1767323040);
	set_times(b, 1772600760, 1767323040);
	put_file("notes.txt", 0600); /* not a template: not listed */

	ck_assert_int_eq(run("ls", NULL), 0);
	ck_assert_str_eq(errout, "");
	ck_assert_ptr_nonnull(line_of("NAME "));
	const char *la = line_of("0123456789ab ");
	ck_assert_ptr_nonnull(la);
	/* NAME CPUS MEMORY SIZE ON DISK MADE LAST USED */
	char cpus[8], mem[16], size[16], disk[16];
	ck_assert_int_eq(sscanf(la, "%*s %7s %15s %15s %15s", cpus, mem, size, disk), 4);
	ck_assert_str_eq(cpus, "1");
	ck_assert_str_eq(mem, "64.0K");
	/* the metadata, then RAM: two pages of it data, the rest holes */
	char path[PATH_MAX], want[32];
	struct stat st;
	path_of(a, path, sizeof path);
	ck_assert_int_eq(stat(path, &st), 0);
	cli_human_bytes((uint64_t)st.st_size, want, sizeof want);
	ck_assert_str_eq(size, want);
	ck_assert_int_gt(st.st_size, RAM_LEN);
	ck_assert_int_lt(st.st_blocks * 512, st.st_size);
	cli_human_bytes((uint64_t)st.st_blocks * 512, want, sizeof want);
	ck_assert_str_eq(disk, want);
	const char *times = strstr(la, "2026-01-02 03:04  2026-03-04 05:06");
	ck_assert(times && times < strchr(la, '\n'));
	const char *lb = line_of("fedcba987654 ");
	ck_assert_ptr_nonnull(lb);
	ck_assert_int_eq(sscanf(lb, "%*s %7s", cpus), 1);
	ck_assert_str_eq(cpus, "2");
	const char *lbad = line_of("555500000000 ");
	ck_assert_ptr_nonnull(lbad);
	const char *nl = strchr(lbad, '\n');
	const char *dmg = strstr(lbad, "damaged: ");
	ck_assert(dmg && dmg < nl);
	ck_assert_ptr_nonnull(strstr(dmg, "version 2"));
	ck_assert_ptr_null(strstr(out, "notes.txt"));
	ck_assert_ptr_nonnull(line_of("3 templates in "));
	/* Reading their headers did not make them look used. */
	ck_assert_int_eq(atime_of(a), 1772600760);
	ck_assert_int_eq(atime_of(b), 1772600760);

	/* The short names grow until no two are alike. */
	char c[TEMPLATE_NAME_LEN + 1];
	name_of("0123456789abcccccc", '1', c);
	make_template(c, 1);
	ck_assert_int_eq(run("ls", NULL), 0);
	ck_assert_ptr_nonnull(line_of("0123456789abccccccc "));
	ck_assert_ptr_nonnull(line_of("0123456789abcccccc1 "));
	ck_assert_ptr_nonnull(line_of("fedcba987654 "));

	ck_assert_int_eq(run("ls", "extra", NULL), KBOX_EXIT_FAILURE);
	ck_assert_ptr_nonnull(strstr(errout, "unknown argument 'extra'"));
	ck_assert_int_eq(run("ls", "--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "Usage: kbox snapshot ls"));
}
END_TEST

START_TEST(ls_empty_missing_and_unsafe)
{
	char expect[128];
	ck_assert_int_eq(run("ls", NULL), 0);
	snprintf(expect, sizeof expect, "no templates in %s\n", dir);
	ck_assert_str_eq(out, expect);

	char missing[96];
	snprintf(missing, sizeof missing, "%s/none", dir);
	ck_assert_int_eq(setenv("KBOX_TEMPLATE_DIR", missing, 1), 0);
	ck_assert_int_eq(run("ls", NULL), 0);
	snprintf(expect, sizeof expect, "no templates in %s\n", missing);
	ck_assert_str_eq(out, expect);
	ck_assert_int_eq(run("prune", NULL), 0);
	ck_assert_int_eq(run("rm", "abcd", NULL), KBOX_EXIT_FAILURE);
	ck_assert_int_eq(access(missing, F_OK), -1); /* not made */

	/* A folder others may read is not kbox's: refused, nothing removed. */
	ck_assert_int_eq(setenv("KBOX_TEMPLATE_DIR", dir, 1), 0);
	char a[TEMPLATE_NAME_LEN + 1];
	name_of("abcd", '1', a);
	make_template(a, 1);
	ck_assert_int_eq(chmod(dir, 0755), 0);
	ck_assert_int_eq(run("ls", NULL), KBOX_EXIT_FAILURE);
	ck_assert_ptr_nonnull(strstr(errout, "not private"));
	ck_assert_int_eq(run("rm", "abcd", NULL), KBOX_EXIT_FAILURE);
	ck_assert_int_eq(run("prune", "--all", NULL), KBOX_EXIT_FAILURE);
	ck_assert(exists(a));
	ck_assert_int_eq(chmod(dir, 0700), 0);

	/* A symlink as the folder. */
	char link[96];
	snprintf(link, sizeof link, "%s-link", dir);
	ck_assert_int_eq(symlink(dir, link), 0);
	ck_assert_int_eq(setenv("KBOX_TEMPLATE_DIR", link, 1), 0);
	ck_assert_int_eq(run("prune", "--all", NULL), KBOX_EXIT_FAILURE);
	ck_assert_int_eq(unlink(link), 0);
	ck_assert(exists(a));
}
END_TEST

START_TEST(rm_by_name_key_and_prefix)
{
	char a[TEMPLATE_NAME_LEN + 1], b[TEMPLATE_NAME_LEN + 1], c[TEMPLATE_NAME_LEN + 1];
	name_of("aaaa1111", '0', a);
	name_of("bbbb", '2', b);
	name_of("cccc", '3', c);
	make_template(a, 1);
	make_template(b, 1);
	make_template(c, 1);

	ck_assert_int_eq(run("rm", "AAAA1", NULL), 0); /* a prefix, any case */
	ck_assert(!exists(a));
	ck_assert(exists(b));
	char expect[128];
	snprintf(expect, sizeof expect, "removed %s\n", a);
	ck_assert_str_eq(out, expect);

	/* The key, then the file name; one named twice goes once. */
	char key[80];
	snprintf(key, sizeof key, "%.64s", b + 2);
	ck_assert_int_eq(run("rm", key, c, c, NULL), 0);
	ck_assert(!exists(b));
	ck_assert(!exists(c));
	ck_assert_str_eq(errout, "");

	ck_assert_int_eq(run("rm", NULL), KBOX_EXIT_FAILURE);
	ck_assert_ptr_nonnull(strstr(errout, "which template?"));
	ck_assert_int_eq(run("rm", "--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "Usage: kbox snapshot rm"));
}
END_TEST

START_TEST(rm_refuses_ambiguous_and_unknown)
{
	char a[TEMPLATE_NAME_LEN + 1], b[TEMPLATE_NAME_LEN + 1], c[TEMPLATE_NAME_LEN + 1];
	name_of("1111aaaa", '0', a);
	name_of("1111bbbb", '0', b);
	name_of("2222", '0', c);
	make_template(a, 1);
	make_template(b, 1);
	make_template(c, 1);

	/* Ambiguous, unknown, too short and not hex: each an error naming
	 * it, nothing removed for it; the good one still goes. */
	ck_assert_int_eq(run("rm", "1111", "9999", "222", "t-zzzz", "2222", NULL), KBOX_EXIT_FAILURE);
	ck_assert_ptr_nonnull(strstr(errout, "'1111' is ambiguous: 2 templates"));
	ck_assert_ptr_nonnull(strstr(errout, "1111aaaa0000"));
	ck_assert_ptr_nonnull(strstr(errout, "1111bbbb0000"));
	ck_assert_ptr_nonnull(strstr(errout, "no template '9999'"));
	ck_assert_ptr_nonnull(strstr(errout, "'222' does not name a template"));
	ck_assert_ptr_nonnull(strstr(errout, "'t-zzzz' does not name a template"));
	ck_assert(exists(a));
	ck_assert(exists(b));
	ck_assert(!exists(c));
	ck_assert_int_eq(run("rm", "1111a", NULL), 0);
	ck_assert(!exists(a));
	ck_assert(exists(b));
}
END_TEST

START_TEST(rm_removes_only_templates)
{
	/* A symlink with a template's name, to a file outside the folder. */
	char target[96], tpath[PATH_MAX], l[TEMPLATE_NAME_LEN + 1];
	snprintf(target, sizeof target, "%s-target", dir);
	FILE *f = fopen(target, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	name_of("dddd", '4', l);
	path_of(l, tpath, sizeof tpath);
	ck_assert_int_eq(symlink(target, tpath), 0);
	ck_assert_int_eq(run("rm", "dddd", NULL), KBOX_EXIT_FAILURE);
	ck_assert_ptr_nonnull(strstr(errout, "a symbolic link, not a template: not removed"));
	ck_assert(exists(l));
	ck_assert_int_eq(access(target, F_OK), 0);
	/* ls says what it is; prune leaves it too. */
	ck_assert_int_eq(run("ls", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "not a template: a symbolic link"));
	ck_assert_int_eq(run("prune", "--all", NULL), 0);
	ck_assert(exists(l));
	ck_assert_int_eq(access(target, F_OK), 0);
	ck_assert_int_eq(unlink(target), 0);

	/* Names that are not a template's, in the folder or out of it. */
	put_file("notes.txt", 0600);
	char up[TEMPLATE_NAME_LEN + 8], t[TEMPLATE_NAME_LEN + 1];
	name_of("eeee", '5', t);
	make_template(t, 1);
	snprintf(up, sizeof up, "../%s", t);
	ck_assert_int_eq(run("rm", "notes.txt", "../notes.txt", up, "t-eeee.snap", NULL),
			 KBOX_EXIT_FAILURE);
	ck_assert(exists("notes.txt"));
	ck_assert(exists(t));
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(prune_damaged_and_stale_temporaries)
{
	char good[TEMPLATE_NAME_LEN + 1], old[TEMPLATE_NAME_LEN + 1], cut[TEMPLATE_NAME_LEN + 1];
	name_of("6666", '0', good);
	name_of("7777", '0', old);
	name_of("8888", '0', cut);
	make_template(good, 1);
	make_other_version(old);
	make_template(cut, 1);
	char path[PATH_MAX];
	path_of(cut, path, sizeof path);
	ck_assert_int_eq(truncate(path, 100), 0);
	/* A template another user could read: kbox run would not use it. */
	char open_to_all[TEMPLATE_NAME_LEN + 1];
	name_of("9999", '0', open_to_all);
	make_template(open_to_all, 1);
	path_of(open_to_all, path, sizeof path);
	ck_assert_int_eq(chmod(path, 0644), 0);

	/* Temporaries of snapshot_file_write: one an hour old, one fresh
	 * (a write going on), and names of that shape that are not. */
	char stale[TEMPLATE_NAME_LEN + 32], fresh[TEMPLATE_NAME_LEN + 32];
	snprintf(stale, sizeof stale, ".%s.tmp-12345", good);
	snprintf(fresh, sizeof fresh, ".%s.tmp-12346", good);
	put_file(stale, 0600);
	put_file(fresh, 0600);
	put_file(".other.tmp-1", 0600);
	char notpid[TEMPLATE_NAME_LEN + 32];
	snprintf(notpid, sizeof notpid, ".%s.tmp-x1", good);
	put_file(notpid, 0600);
	time_t now = time(NULL);
	set_times(stale, now - 3600, now - 3600);
	set_times(".other.tmp-1", now - 3600, now - 3600);
	set_times(notpid, now - 3600, now - 3600);

	ck_assert_int_eq(run("ls", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "2 unfinished writes"));

	ck_assert_int_eq(run("prune", NULL), 0);
	ck_assert_str_eq(errout, "");
	ck_assert(exists(good));
	ck_assert(!exists(old));
	ck_assert(!exists(cut));
	ck_assert(!exists(open_to_all));
	ck_assert(!exists(stale));
	ck_assert(exists(fresh));
	ck_assert(exists(".other.tmp-1"));
	ck_assert(exists(notpid));
	ck_assert_ptr_nonnull(strstr(out, "removed 777700000000"));
	ck_assert_ptr_nonnull(strstr(out, "damaged: "));
	ck_assert_ptr_nonnull(strstr(out, "removed 888800000000"));
	ck_assert_ptr_nonnull(strstr(out, "removed 999900000000"));
	ck_assert_ptr_nonnull(strstr(out, stale));
	ck_assert_ptr_nonnull(strstr(out, "4 files removed, "));
	ck_assert_ptr_nonnull(strstr(out, " freed on disk"));
	ck_assert_ptr_null(strstr(out, "removed 666600000000"));

	ck_assert_int_eq(run("prune", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "nothing to remove in "));
}
END_TEST

START_TEST(prune_unused_for_and_all)
{
	char a[TEMPLATE_NAME_LEN + 1], b[TEMPLATE_NAME_LEN + 1], c[TEMPLATE_NAME_LEN + 1];
	name_of("aaaa", '0', a);
	name_of("bbbb", '0', b);
	name_of("cccc", '0', c);
	make_template(a, 1);
	make_template(b, 1);
	make_template(c, 1);
	put_file("keep.txt", 0600);
	time_t now = time(NULL);
	set_times(a, now - 10 * DAY, now - 20 * DAY); /* made long ago, used 10 days ago */
	set_times(b, now - 1 * DAY, now - 20 * DAY);
	set_times(c, now - 3 * DAY - 60, now - 3 * DAY - 60);

	ck_assert_int_eq(run("prune", "--unused-for", "5", NULL), 0);
	ck_assert(!exists(a));
	ck_assert(exists(b));
	ck_assert(exists(c));
	ck_assert_ptr_nonnull(strstr(out, "removed aaaa00000000"));
	ck_assert_ptr_nonnull(strstr(out, "last used "));
	ck_assert_int_eq(run("prune", "--unused-for=3", NULL), 0);
	ck_assert(exists(b));
	ck_assert(!exists(c));

	static const char *bad[] = { "x", "-1", "1.5", "", "99999" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		ck_assert_int_eq(run("prune", "--unused-for", bad[i], NULL), KBOX_EXIT_FAILURE);
		ck_assert_ptr_nonnull(strstr(errout, "--unused-for takes a number of days"));
	}
	ck_assert_int_eq(run("prune", "--unused-for", NULL), KBOX_EXIT_FAILURE);
	ck_assert_int_eq(run("prune", "--bogus", NULL), KBOX_EXIT_FAILURE);
	ck_assert_ptr_nonnull(strstr(errout, "unknown argument '--bogus'"));
	ck_assert(exists(b));

	ck_assert_int_eq(run("prune", "--all", NULL), 0);
	ck_assert(!exists(b));
	ck_assert(exists("keep.txt"));
	ck_assert_ptr_nonnull(strstr(out, "removed bbbb00000000"));
	ck_assert_ptr_nonnull(strstr(out, "1 file removed, "));
	ck_assert_int_eq(run("ls", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "no templates in "));
}
END_TEST

START_TEST(touch_marks_a_template_used)
{
	char a[TEMPLATE_NAME_LEN + 1];
	name_of("abcdef", '0', a);
	make_template(a, 1);
	set_times(a, 1000000000, 1100000000);
	ck_assert_int_eq(template_touch(dir, a), 0);
	char path[PATH_MAX];
	struct stat st;
	path_of(a, path, sizeof path);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_ge(st.st_atim.tv_sec, time(NULL) - 60);
	ck_assert_int_eq(st.st_mtim.tv_sec, 1100000000);

	ck_assert_int_eq(template_touch(dir, "notes.txt"), -EINVAL);
	char l[TEMPLATE_NAME_LEN + 1], lpath[PATH_MAX];
	name_of("1234", '0', l);
	path_of(l, lpath, sizeof lpath);
	ck_assert_int_eq(symlink(path, lpath), 0);
	ck_assert_int_eq(template_touch(dir, l), -ELOOP);
	char none[TEMPLATE_NAME_LEN + 1];
	name_of("4321", '0', none);
	ck_assert_int_eq(template_touch(dir, none), -ENOENT);
}
END_TEST

/* What a run that makes a template removes: the others unused (and not
 * made) for longer than the days, yours, regular, one link; never the
 * one it keeps, a symlink, another name or a second link. */
START_TEST(expire_removes_only_long_unused_templates)
{
	char old[TEMPLATE_NAME_LEN + 1], used[TEMPLATE_NAME_LEN + 1], made[TEMPLATE_NAME_LEN + 1],
		kept[TEMPLATE_NAME_LEN + 1], link2[TEMPLATE_NAME_LEN + 1], sym[TEMPLATE_NAME_LEN + 1],
		old2[TEMPLATE_NAME_LEN + 1];
	name_of("0001", '0', old);
	name_of("0002", '0', used);
	name_of("0003", '0', made);
	name_of("0004", '0', kept);
	name_of("0005", '0', link2);
	name_of("0006", '0', sym);
	name_of("0007", '0', old2);
	make_template(old, 1);
	make_template(used, 1);
	make_template(made, 1);
	make_template(kept, 1);
	make_template(link2, 1);
	make_template(old2, 2);
	put_file("notes.txt", 0600);
	char p1[PATH_MAX], p2[PATH_MAX];
	path_of(link2, p1, sizeof p1);
	path_of("second-link", p2, sizeof p2);
	ck_assert_int_eq(link(p1, p2), 0);
	path_of(old, p1, sizeof p1);
	path_of(sym, p2, sizeof p2);
	ck_assert_int_eq(symlink(p1, p2), 0);
	time_t now = time(NULL);
	set_times(old, now - 31 * DAY, now - 40 * DAY);
	set_times(old2, now - 100 * DAY, now - 100 * DAY);
	set_times(used, now - 29 * DAY, now - 40 * DAY);  /* used since */
	set_times(made, now - 40 * DAY, now - 2 * DAY);   /* made since (times copied) */
	set_times(kept, now - 40 * DAY, now - 40 * DAY);  /* this run's */
	set_times(link2, now - 40 * DAY, now - 40 * DAY); /* two names */
	set_times("notes.txt", now - 40 * DAY, now - 40 * DAY);
	set_times(sym, now - 40 * DAY, now - 40 * DAY);

	char path[PATH_MAX];
	struct stat st;
	path_of(old, path, sizeof path);
	ck_assert_int_eq(stat(path, &st), 0);
	uint64_t expect = (uint64_t)st.st_blocks * 512;
	path_of(old2, path, sizeof path);
	ck_assert_int_eq(stat(path, &st), 0);
	expect += (uint64_t)st.st_blocks * 512;
	uint64_t freed = 0;
	ck_assert_int_eq(template_expire(dir, kept, 30, &freed), 2);
	ck_assert_uint_eq(freed, expect);
	ck_assert(!exists(old));
	ck_assert(!exists(old2));
	ck_assert(exists(used) && exists(made) && exists(kept) && exists(link2));
	ck_assert(exists(sym) && exists("notes.txt") && exists("second-link"));
	/* Nothing more to remove; without a kept one, this run's goes too. */
	ck_assert_int_eq(template_expire(dir, kept, 30, NULL), 0);
	ck_assert_int_eq(template_expire(dir, NULL, 30, NULL), 1);
	ck_assert(!exists(kept));
	ck_assert_int_eq(template_expire("/nonexistent-kbox-dir", NULL, 30, NULL), -ENOENT);
	/* A symlink to a folder is not followed. */
	path_of("folder-link", p2, sizeof p2);
	ck_assert_int_eq(symlink(dir, p2), 0);
	ck_assert_int_lt(template_expire(p2, NULL, 30, NULL), 0);
}
END_TEST

START_TEST(group_help_and_unknown)
{
	ck_assert_int_eq(run("--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "Usage: kbox snapshot COMMAND"));
	ck_assert_int_eq(run("frob", NULL), KBOX_EXIT_FAILURE);
	ck_assert_ptr_nonnull(strstr(errout, "unknown command 'frob'"));
	ck_assert_int_eq(run("prune", "--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "--unused-for DAYS"));
}
END_TEST

/* ---- template_fork_file: kbox fork's file ---- */

static unsigned entries(const char *d)
{
	char cmd[PATH_MAX + 32];
	snprintf(cmd, sizeof cmd, "exit $(ls -A '%s' | wc -l)", d);
	int st = system(cmd);
	ck_assert(WIFEXITED(st));
	return (unsigned)WEXITSTATUS(st);
}

START_TEST(fork_file_private_and_unnamed)
{
	/* the folder made when missing, private */
	char sub[128];
	snprintf(sub, sizeof sub, "%s/a/templates", dir);
	ck_assert_int_eq(setenv("KBOX_TEMPLATE_DIR", sub, 1), 0);
	int fd = template_fork_file(err, sizeof err);
	ck_assert_msg(fd >= 0, "%s", err);
	struct stat st;
	ck_assert_int_eq(stat(sub, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0700);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	ck_assert_uint_eq(st.st_uid, geteuid());
	ck_assert_uint_eq(st.st_nlink, 0);
	ck_assert_int_eq(st.st_size, 0);
	ck_assert_uint_eq(entries(sub), 0);
	ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
	/* read-write */
	ck_assert_int_eq(pwrite(fd, "fork", 4, 0), 4);
	char b[8] = "";
	ck_assert_int_eq(pread(fd, b, sizeof b - 1, 0), 4);
	ck_assert_str_eq(b, "fork");
	close(fd);

	/* in the existing private folder: two at once, distinct files */
	ck_assert_int_eq(setenv("KBOX_TEMPLATE_DIR", dir, 1), 0);
	int a = template_fork_file(err, sizeof err), b2 = template_fork_file(err, sizeof err);
	ck_assert_int_ge(a, 0);
	ck_assert_int_ge(b2, 0);
	struct stat sa, sb;
	ck_assert_int_eq(fstat(a, &sa), 0);
	ck_assert_int_eq(fstat(b2, &sb), 0);
	ck_assert(sa.st_ino != sb.st_ino);
	ck_assert_uint_eq(sa.st_nlink, 0);
	ck_assert_uint_eq(entries(dir), 1); /* "a" only */
	close(a);
	close(b2);
}
END_TEST

START_TEST(fork_file_refuses_a_shared_folder)
{
	const mode_t modes[] = { 0755, 0750, 0701, 0770, 0707 };
	for (unsigned i = 0; i < sizeof modes / sizeof modes[0]; i++) {
		ck_assert_int_eq(chmod(dir, modes[i]), 0);
		err[0] = '\0';
		ck_assert_int_eq(template_fork_file(err, sizeof err), -EPERM);
		ck_assert_ptr_nonnull(strstr(err, "not private"));
		ck_assert_uint_eq(entries(dir), 0);
	}
	ck_assert_int_eq(chmod(dir, 0700), 0);
	int fd = template_fork_file(err, sizeof err);
	ck_assert_int_ge(fd, 0);
	close(fd);
	/* a symlink to the folder is not followed */
	char link_path[128];
	snprintf(link_path, sizeof link_path, "%s-link", dir);
	ck_assert_int_eq(symlink(dir, link_path), 0);
	ck_assert_int_eq(setenv("KBOX_TEMPLATE_DIR", link_path, 1), 0);
	ck_assert_int_lt(template_fork_file(err, sizeof err), 0);
	ck_assert_int_eq(unlink(link_path), 0);
	/* a file in the folder's place */
	char file[128];
	snprintf(file, sizeof file, "%s/f", dir);
	int ffd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	ck_assert_int_ge(ffd, 0);
	close(ffd);
	ck_assert_int_eq(setenv("KBOX_TEMPLATE_DIR", file, 1), 0);
	ck_assert_int_lt(template_fork_file(err, sizeof err), 0);
}
END_TEST

Suite *snapshot_cmd_suite(void)
{
	return unit_suite_fixture("snapshot_cmd", "snapshot_cmd", setup, teardown, 0,
				  ls_lists_templates_without_using_them,
				  ls_empty_missing_and_unsafe, rm_by_name_key_and_prefix,
				  rm_refuses_ambiguous_and_unknown, rm_removes_only_templates,
				  prune_damaged_and_stale_temporaries, prune_unused_for_and_all,
				  touch_marks_a_template_used, expire_removes_only_long_unused_templates,
				  group_help_and_unknown,
				  fork_file_private_and_unnamed, fork_file_refuses_a_shared_folder);
}
