#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/fileio.h"
#include "tests/lib/unit_suite.h"

static char dir[64], file[128];

static void put(const char *path, const char *text, size_t n)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/kbox-fileio-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof file, "%s/f", dir);
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(slurp_whole_file)
{
	put(file, "ab\0cd", 5);
	char *buf = NULL;
	size_t len = 0;
	struct stat st;
	const char *stage = NULL;
	ck_assert_int_eq(fileio_slurp(file, 0, 5, &buf, &len, &st, &stage), 0);
	ck_assert_uint_eq(len, 5);
	ck_assert_mem_eq(buf, "ab\0cd", 6);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_int_eq(st.st_size, 5);
	ck_assert_str_eq(stage, "read");
	free(buf);

	put(file, "", 0);
	ck_assert_int_eq(fileio_slurp(file, 0, 5, &buf, &len, NULL, NULL), 0);
	ck_assert_uint_eq(len, 0);
	ck_assert_str_eq(buf, "");
	free(buf);
}
END_TEST

START_TEST(slurp_refusals)
{
	char *buf = NULL;
	size_t len = 7;
	const char *stage = NULL;
	put(file, "123456", 6);
	ck_assert_int_eq(fileio_slurp(file, 0, 5, &buf, &len, NULL, &stage), -EFBIG);
	ck_assert_str_eq(stage, "stat");
	ck_assert_int_eq(fileio_slurp(dir, 0, 5, &buf, &len, NULL, &stage), -EISDIR);
	ck_assert_str_eq(stage, "stat");

	char missing[160];
	snprintf(missing, sizeof missing, "%s/none", dir);
	ck_assert_int_eq(fileio_slurp(missing, 0, 5, &buf, &len, NULL, &stage), -ENOENT);
	ck_assert_str_eq(stage, "open");

	/* Waiting on a FIFO nobody writes would hang the test. */
	char fifo[160];
	snprintf(fifo, sizeof fifo, "%s/fifo", dir);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	ck_assert_int_eq(fileio_slurp(fifo, O_NONBLOCK, 5, &buf, &len, NULL, &stage), -EINVAL);
	ck_assert_str_eq(stage, "stat");

	char link[160];
	snprintf(link, sizeof link, "%s/link", dir);
	ck_assert_int_eq(symlink(file, link), 0);
	ck_assert_int_eq(fileio_slurp(link, O_NOFOLLOW, 10, &buf, &len, NULL, &stage), -ELOOP);
	ck_assert_ptr_null(buf);
	ck_assert_uint_eq(len, 7);
	ck_assert_int_eq(fileio_slurp(link, 0, 10, &buf, &len, NULL, NULL), 0);
	ck_assert_str_eq(buf, "123456");
	free(buf);
}
END_TEST

START_TEST(write_all_writes_everything)
{
	static char big[1 << 20];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (char)('a' + i % 26);
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fileio_write_all(fd, big, sizeof big), 0);
	ck_assert_int_eq(fileio_write_all(fd, big, 0), 0);
	ck_assert_int_eq(close(fd), 0);
	char *buf;
	size_t len;
	ck_assert_int_eq(fileio_slurp(file, 0, sizeof big, &buf, &len, NULL, NULL), 0);
	ck_assert_uint_eq(len, sizeof big);
	ck_assert_mem_eq(buf, big, sizeof big);
	free(buf);

	fd = open(file, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fileio_write_all(fd, "x", 1), -EBADF);
	close(fd);
}
END_TEST

START_TEST(positioned_read_and_write)
{
	char got[8];
	int fd = open(file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fileio_pwrite_all(fd, "world", 5, 6), 0);
	ck_assert_int_eq(fileio_pwrite_all(fd, "hello ", 6, 0), 0);
	/* The file offset is not moved. */
	ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), 0);
	ck_assert_int_eq(fileio_pread_all(fd, got, 5, 6), 0);
	ck_assert_mem_eq(got, "world", 5);
	ck_assert_int_eq(fileio_pread_all(fd, got, 0, 11), 0);
	/* Past the end, and across it: the file ends first. */
	ck_assert_int_eq(fileio_pread_all(fd, got, 1, 11), -ENODATA);
	ck_assert_int_eq(fileio_pread_all(fd, got, 8, 6), -ENODATA);
	ck_assert_mem_eq(got, "world", 5);
	close(fd);
	ck_assert_int_eq(fileio_pread_all(fd, got, 1, 0), -EBADF);
	ck_assert_int_eq(fileio_pwrite_all(fd, "x", 1, 0), -EBADF);
}
END_TEST

START_TEST(names)
{
	ck_assert(fileio_name_ok("a", 3, "."));
	ck_assert(fileio_name_ok("A-z_0.9", 7, "."));
	ck_assert(fileio_name_ok("-x", 2, "."));
	ck_assert(!fileio_name_ok("-x", 2, ".-"));
	ck_assert(!fileio_name_ok("", 3, "."));
	ck_assert(!fileio_name_ok("abcd", 3, "."));
	ck_assert(!fileio_name_ok(".", 3, "."));
	ck_assert(!fileio_name_ok("..", 3, "."));
	ck_assert(!fileio_name_ok(".a", 3, "."));
	ck_assert(fileio_name_ok(".a", 3, ""));
	ck_assert(!fileio_name_ok("a/b", 3, "."));
	ck_assert(!fileio_name_ok("a b", 3, "."));
	ck_assert(!fileio_name_ok("\xc3\xa9", 3, "."));
}
END_TEST

START_TEST(slurp_procfs_file)
{
	/* procfs reports size 0: the buffer grows past what stat said. */
	char *buf = NULL;
	size_t len = 0;
	ck_assert_int_eq(fileio_slurp("/proc/self/status", 0, 1 << 20, &buf, &len, NULL, NULL), 0);
	ck_assert_uint_gt(len, 0);
	ck_assert_ptr_nonnull(strstr(buf, "Name:"));
	free(buf);
	ck_assert_int_eq(fileio_slurp("/proc/self/status", 0, 8, &buf, &len, NULL, NULL), -EFBIG);
}
END_TEST

START_TEST(write_atomic_replaces)
{
	put(file, "old", 3);
	char tmp[160], *buf;
	size_t len;
	struct stat st;
	snprintf(tmp, sizeof tmp, "%s.tmp", file);
	/* A symlink planted at the temporary name is refused, not followed;
	 * a file left there is replaced. */
	char victim[160];
	snprintf(victim, sizeof victim, "%s/victim", dir);
	put(victim, "keep", 4);
	ck_assert_int_eq(symlink(victim, tmp), 0);
	ck_assert_int_eq(fileio_write_atomic(AT_FDCWD, file, NULL, "new!", 4, 0644), -ELOOP);
	ck_assert_int_eq(unlink(tmp), 0);
	ck_assert_int_eq(link(victim, tmp), 0);
	mode_t old = umask(077);
	ck_assert_int_eq(fileio_write_atomic(AT_FDCWD, file, NULL, "new!", 4, 0644), 0);
	umask(old);
	ck_assert_int_eq(fileio_slurp(file, 0, 16, &buf, &len, &st, NULL), 0);
	ck_assert_str_eq(buf, "new!");
	ck_assert_uint_eq(st.st_mode & 07777, 0644);
	free(buf);
	ck_assert_int_eq(access(tmp, F_OK), -1);
	ck_assert_int_eq(fileio_slurp(victim, 0, 16, &buf, &len, NULL, NULL), 0);
	ck_assert_str_eq(buf, "keep");
	free(buf);

	/* Relative to a folder, with a temporary name of the caller's. */
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(dfd, 0);
	ck_assert_int_eq(mkdir(tmp, 0700), 0);
	ck_assert_int_eq(fileio_write_atomic(dfd, "f", "f.tmp", "x", 1, 0600), -EISDIR);
	ck_assert_int_eq(fileio_slurp(file, 0, 16, &buf, &len, NULL, NULL), 0);
	ck_assert_str_eq(buf, "new!");
	free(buf);
	ck_assert_int_eq(fileio_write_atomic(dfd, "f", "other", "x", 1, 0600), 0);
	ck_assert_int_eq(fileio_slurp(file, 0, 16, &buf, &len, NULL, NULL), 0);
	ck_assert_str_eq(buf, "x");
	free(buf);
	ck_assert_int_eq(fileio_write_atomic(dfd, "nosuch/f", NULL, "x", 1, 0600), -ENOENT);
	close(dfd);
}
END_TEST

Suite *fileio_suite(void)
{
	return unit_suite_fixture("fileio", "fileio", setup, teardown, 0,
				  slurp_whole_file, slurp_refusals,
				  write_all_writes_everything,
				  slurp_procfs_file, write_atomic_replaces,
				  positioned_read_and_write, names);
}
