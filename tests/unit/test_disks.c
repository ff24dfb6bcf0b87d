/* Disk volumes (vmm/sandbox/disks.c): --disk parsing and its refusals,
 * sizes, and real volumes in a temporary disk folder: made and formatted
 * (with the host's mkfs.ext4) on first use, kept, locked against a second
 * sandbox, grown, refused smaller, listed and removed. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/sandbox/disks.h"
#include "tests/lib/unit_suite.h"

static char dir[64];
static char err[1024];

static void setup(void)
{
	strcpy(dir, "/tmp/kbox-disks-unit.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	setenv("KBOX_DISK_DIR", dir, 1);
	err[0] = '\0';
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
	unsetenv("KBOX_DISK_DIR");
}

static int parse1(const char *arg)
{
	static struct disks ds;
	memset(&ds, 0, sizeof ds);
	return disks_parse(&ds, arg, err, sizeof err);
}

START_TEST(parse_good)
{
	static struct disks ds;
	memset(&ds, 0, sizeof ds);
	ck_assert_int_eq(disks_parse(&ds, "containers:/var/lib/containers", err, sizeof err), 0);
	ck_assert_int_eq(disks_parse(&ds, "data.1:/data/:size=1G:ro", err, sizeof err), 0);
	ck_assert_int_eq(disks_parse(&ds, "x_y-z:/x:rw:size=64MiB", err, sizeof err), 0);
	ck_assert_uint_eq(ds.n, 3);
	ck_assert_str_eq(ds.d[0].name, "containers");
	ck_assert_str_eq(ds.d[0].guest, "/var/lib/containers");
	ck_assert_uint_eq(ds.d[0].size, DISKS_SIZE_DEFAULT);
	ck_assert(!ds.d[0].size_set && !ds.d[0].readonly);
	ck_assert_str_eq(ds.d[1].guest, "/data");
	ck_assert_uint_eq(ds.d[1].size, 1ull << 30);
	ck_assert(ds.d[1].size_set && ds.d[1].readonly);
	ck_assert_uint_eq(ds.d[2].size, 64ull << 20);
	ck_assert(!ds.d[2].readonly);
	ck_assert_int_eq(disks_parse(&ds, "four:/four", err, sizeof err), 0);
	ck_assert_int_eq(disks_parse(&ds, "five:/five", err, sizeof err), -E2BIG);
	ck_assert_ptr_nonnull(strstr(err, "at most 4"));
}
END_TEST

START_TEST(parse_bad)
{
	static const struct { const char *arg, *msg; } bad[] = {
		{ "", "NAME:GUEST_PATH" },
		{ "name", "NAME:GUEST_PATH" },
		{ ":/x", "NAME:GUEST_PATH" },
		{ "-x:/x", "volume name" },
		{ ".x:/x", "volume name" },
		{ "../x:/x", "volume name" },
		{ "a/b:/x", "volume name" },
		{ "abcdefghijklmnopqrstu:/x", "volume name" }, /* 21 bytes */
		{ "a b:/x", "volume name" },
		{ "x:relative", "absolute" },
		{ "x:", "absolute" },
		{ "x:/", "root" },
		{ "x:/proc/x", "/proc" },
		{ "x:/dev", "/dev" },
		{ "x:/a/../b", "'..'" },
		{ "x:/a,b", "','" },
		{ "x:/a:size=", "not a number" },
		{ "x:/a:size=8Q", "unknown unit" },
		{ "x:/a:size=1M", "out of range" },
		{ "x:/a:size=2T", "out of range" },
		{ "x:/a:size=99999999999999999999999", "too large" },
		{ "x:/a:size=18446744073709551615T", "too large" },
		{ "x:/a:size=-1G", "not a number" },
		{ "x:/a:ro:ro", "at most once" },
		{ "x:/a:ro:rw", "at most once" },
		{ "x:/a:size=1G:size=2G", "at most once" },
		{ "x:/a:bogus", "not size=SIZE" },
		{ "x:/a:", "not size=SIZE" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		err[0] = '\0';
		ck_assert_msg(parse1(bad[i].arg) < 0, "accepted '%s'", bad[i].arg);
		ck_assert_msg(strstr(err, bad[i].msg), "'%s': message '%s' lacks '%s'", bad[i].arg,
			      err, bad[i].msg);
	}
	static struct disks ds;
	memset(&ds, 0, sizeof ds);
	ck_assert_int_eq(disks_parse(&ds, "a:/a", err, sizeof err), 0);
	ck_assert_int_eq(disks_parse(&ds, "a:/b", err, sizeof err), -EEXIST);
	ck_assert_ptr_nonnull(strstr(err, "twice"));
	ck_assert_int_eq(disks_parse(&ds, "b:/a/sub", err, sizeof err), -EEXIST);
	ck_assert_int_eq(disks_parse(&ds, "c:/", err, sizeof err), -EINVAL);
	ck_assert_uint_eq(ds.n, 1);
	char longarg[1000];
	memset(longarg, 'a', sizeof longarg - 1);
	longarg[sizeof longarg - 1] = '\0';
	ck_assert_int_lt(parse1(longarg), 0);
}
END_TEST

START_TEST(sizes)
{
	uint64_t v;
	ck_assert_int_eq(disks_parse_size("8G", &v, err, sizeof err), 0);
	ck_assert_uint_eq(v, 8ull << 30);
	ck_assert_int_eq(disks_parse_size("1T", &v, err, sizeof err), 0);
	ck_assert_uint_eq(v, 1ull << 40);
	ck_assert_int_eq(disks_parse_size("65536k", &v, err, sizeof err), 0);
	ck_assert_uint_eq(v, 64ull << 20);
	ck_assert_int_eq(disks_parse_size("67108864", &v, err, sizeof err), 0);
	ck_assert_uint_eq(v, 64ull << 20);
	ck_assert_int_eq(disks_parse_size("512MB", &v, err, sizeof err), 0);
	ck_assert_uint_eq(v, 512ull << 20);
	ck_assert_int_eq(disks_parse_size("67108863", &v, err, sizeof err), -ERANGE);
	ck_assert_int_eq(disks_parse_size("G", &v, err, sizeof err), -EINVAL);
	ck_assert_int_eq(disks_parse_size("1GiBx", &v, err, sizeof err), -EINVAL);
	ck_assert_int_eq(disks_parse_size("1iB", &v, err, sizeof err), -EINVAL);
}
END_TEST

static int has_mkfs(void)
{
	return access("/usr/sbin/mkfs.ext4", X_OK) == 0 || access("/sbin/mkfs.ext4", X_OK) == 0;
}

static void open_one(struct disks *ds, const char *spec)
{
	memset(ds, 0, sizeof *ds);
	ck_assert_int_eq(disks_parse(ds, spec, err, sizeof err), 0);
}

/* Whether the file at path holds an ext4 superblock (magic 0xEF53 at
 * byte 1080). */
static int is_ext4(const char *path)
{
	unsigned char m[2];
	int fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, m, 2, 1080), 2);
	close(fd);
	return m[0] == 0x53 && m[1] == 0xef;
}

START_TEST(create_lock_grow_rm)
{
	if (!has_mkfs())
		return; /* e2fsprogs is in 'make deps'; the e2e suite needs it too */
	static struct disks a, b, c;
	open_one(&a, "vol:/data:size=128M");
	ck_assert_msg(disks_open(&a, err, sizeof err) == 0, "%s", err);
	ck_assert(a.d[0].created && !a.d[0].grown);
	ck_assert_uint_eq(a.d[0].size, 128ull << 20);
	ck_assert_uint_eq(a.d[0].be.size, 128ull << 20);
	ck_assert(is_ext4(a.d[0].path));
	struct stat st;
	ck_assert_int_eq(stat(a.d[0].path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	/* Sparse: far less allocated than its size. */
	ck_assert_int_lt((long long)st.st_blocks * 512, 32ll << 20);

	/* A second sandbox: refused, read-write or read-only. */
	open_one(&b, "vol:/data");
	ck_assert_int_eq(disks_open(&b, err, sizeof err), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "in use by another sandbox"));
	disks_free(&b);
	open_one(&b, "vol:/data:ro");
	ck_assert_int_eq(disks_open(&b, err, sizeof err), -EBUSY);
	disks_free(&b);
	ck_assert_int_eq(disks_remove("vol", err, sizeof err), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err, "in use"));
	disks_free(&a);

	/* Kept: opened again, not made again; the default size is its own. */
	open_one(&a, "vol:/data");
	ck_assert_int_eq(disks_open(&a, err, sizeof err), 0);
	ck_assert(!a.d[0].created && !a.d[0].grown);
	ck_assert_uint_eq(a.d[0].size, 128ull << 20);
	disks_free(&a);

	/* Read-only users share it; a writer is kept out meanwhile. */
	open_one(&a, "vol:/data:ro");
	open_one(&b, "vol:/d2:ro");
	ck_assert_int_eq(disks_open(&a, err, sizeof err), 0);
	ck_assert_int_eq(disks_open(&b, err, sizeof err), 0);
	ck_assert(a.d[0].be.read_only);
	open_one(&c, "vol:/data");
	ck_assert_int_eq(disks_open(&c, err, sizeof err), -EBUSY);
	disks_free(&c);
	disks_free(&a);
	disks_free(&b);

	/* Smaller: refused, file untouched; larger: grown (not when read-only). */
	open_one(&a, "vol:/data:size=64M");
	ck_assert_int_eq(disks_open(&a, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "cannot shrink"));
	disks_free(&a);
	open_one(&a, "vol:/data:size=256M:ro");
	ck_assert_int_eq(disks_open(&a, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "cannot grow"));
	disks_free(&a);
	ck_assert_int_eq(stat(a.d[0].path, &st), 0);
	ck_assert_int_eq(st.st_size, 128ll << 20);
	open_one(&a, "vol:/data:size=256M");
	ck_assert_int_eq(disks_open(&a, err, sizeof err), 0);
	ck_assert(a.d[0].grown);
	ck_assert_uint_eq(a.d[0].be.size, 256ull << 20);
	disks_free(&a);

	/* A read-only disk must exist. */
	open_one(&a, "nothere:/x:ro");
	ck_assert_int_eq(disks_open(&a, err, sizeof err), -ENOENT);
	disks_free(&a);

	ck_assert_int_eq(disks_remove("vol", err, sizeof err), 0);
	ck_assert_int_eq(disks_remove("vol", err, sizeof err), -ENOENT);
	ck_assert_int_eq(disks_remove("../x", err, sizeof err), -EINVAL);
}
END_TEST

struct seen { unsigned n; struct disks_volume v[8]; };
static void note(const struct disks_volume *v, void *ctx)
{
	struct seen *s = ctx;
	if (s->n < 8)
		s->v[s->n++] = *v;
}

START_TEST(list_and_hostile_folder)
{
	if (!has_mkfs())
		return;
	static struct disks a;
	open_one(&a, "one:/one:size=64M");
	ck_assert_int_eq(disks_open(&a, err, sizeof err), 0);
	/* Things in the folder that are not volumes, or not files. */
	char p[256];
	snprintf(p, sizeof p, "%s/notes.txt", dir);
	close(open(p, O_CREAT | O_WRONLY, 0600));
	snprintf(p, sizeof p, "%s/bad name.img", dir);
	close(open(p, O_CREAT | O_WRONLY, 0600));
	snprintf(p, sizeof p, "%s/adir.img", dir);
	ck_assert_int_eq(mkdir(p, 0700), 0);
	snprintf(p, sizeof p, "%s/link.img", dir);
	ck_assert_int_eq(symlink("/etc/passwd", p), 0);
	struct seen s = { 0 };
	ck_assert_int_eq(disks_each(note, &s), 0);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_str_eq(s.v[0].name, "one");
	ck_assert_uint_eq(s.v[0].size, 64ull << 20);
	ck_assert_int_gt(s.v[0].allocated, 0);
	ck_assert_int_eq(s.v[0].in_use, 1);
	disks_free(&a);
	s.n = 0;
	ck_assert_int_eq(disks_each(note, &s), 0);
	ck_assert_int_eq(s.v[0].in_use, 0);

	/* A symlink in the volume's place is never opened; rm drops the link only. */
	static struct disks b;
	open_one(&b, "link:/l");
	ck_assert_int_eq(disks_open(&b, err, sizeof err), -ELOOP);
	ck_assert_ptr_nonnull(strstr(err, "symbolic link"));
	disks_free(&b);
	open_one(&b, "adir:/l");
	ck_assert_int_lt(disks_open(&b, err, sizeof err), 0);
	disks_free(&b);
	ck_assert_int_eq(disks_remove("link", err, sizeof err), 0);
	ck_assert_int_eq(access("/etc/passwd", R_OK), 0);
	/* A file kbox did not make, too small to be a volume. */
	snprintf(p, sizeof p, "%s/tiny.img", dir);
	close(open(p, O_CREAT | O_WRONLY, 0600));
	open_one(&b, "tiny:/t");
	ck_assert_int_eq(disks_open(&b, err, sizeof err), -EINVAL);
	disks_free(&b);
	snprintf(p, sizeof p, "%s/adir.img", dir);
	rmdir(p);
}
END_TEST

Suite *disks_suite(void)
{
	return unit_suite_fixture("disks", "core", setup, teardown, 60,
				  parse_good, parse_bad, sizes,
				  create_lock_grow_rm, list_and_hostile_folder);
}
