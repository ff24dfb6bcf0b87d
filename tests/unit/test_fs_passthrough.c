/* The passthrough backend alone, through its ops table with no FUSE
 * server in front: the node table (lookup counts, FORGET, the fd cap and
 * reopening by name), the handle table, the name rules and reset.  The
 * FUSE wire and the backend together: test_fuse_server.c. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "devices/fs_passthrough.h"
#include "tests/lib/tmp_tree.h"
#include "tests/lib/unit_suite.h"

static char dir[64];
static struct fs_passthrough *fs;

static void put(const char *name, const char *text)
{
	ck_assert_int_eq(tmp_tree_put(dir, name, text), 0);
}

static void serve(unsigned max_fds)
{
	struct fs_passthrough_config c = {.root = dir, .max_fds = max_fds};

	ck_assert_int_eq(fs_passthrough_new(&c, &fs), 0);
}

static void setup(void)
{
	char p[128];

	ck_assert_int_eq(tmp_tree_make(dir, sizeof dir, "/tmp/kbox-fsp-unit.XXXXXX"), 0);
	put("a", "hello");
	put("b", "world");
	put(".env", "SECRET=1");
	snprintf(p, sizeof p, "%s/sub", dir);
	ck_assert_int_eq(mkdir(p, 0755), 0);
	put("sub/c", "deep");
	fs = NULL;
}

static void teardown(void)
{
	fs_passthrough_free(fs);
	fs = NULL;
	tmp_tree_remove(dir);
}

/* The nodeid of name in parent, looked up once more. */
static uint64_t look(uint64_t parent, const char *name)
{
	struct fuse_fs_entry e;

	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, parent, name, &e), 0);
	return e.nodeid;
}

/* Reads file node id through a fresh handle into buf (NUL-terminated). */
static ssize_t read_node(uint64_t id, char *buf, size_t size)
{
	uint64_t fh;
	struct iovec iov = {.iov_base = buf, .iov_len = size - 1};

	int rc = fs_passthrough_ops.open(fs, id, O_RDONLY, &fh);
	if (rc < 0)
		return rc;
	ssize_t n = fs_passthrough_ops.read(fs, fh, &iov, 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	ck_assert_int_eq(fs_passthrough_ops.release(fs, fh), 0);
	return n;
}

START_TEST(new_checks_its_config)
{
	struct fs_passthrough_config c = {.root = "/nonexistent-kbox-root"};
	char file[128];

	ck_assert_int_eq(fs_passthrough_new(NULL, &fs), -EINVAL);
	ck_assert_int_eq(fs_passthrough_new(&c, NULL), -EINVAL);
	ck_assert_int_eq(fs_passthrough_new(&c, &fs), -ENOENT);
	snprintf(file, sizeof file, "%s/a", dir);
	c.root = file;
	ck_assert_int_eq(fs_passthrough_new(&c, &fs), -ENOTDIR);
	fs = NULL;
	fs_passthrough_free(NULL);
}
END_TEST

START_TEST(lookups_counted_and_forgotten)
{
	serve(0);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 0);
	uint64_t a = look(1, "a");
	ck_assert_uint_eq(look(1, "a"), a);
	uint64_t sub = look(1, "sub");
	uint64_t c = look(sub, "c");
	ck_assert_uint_ne(a, sub);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 3);
	/* One of a's two lookups: it stays. */
	fs_passthrough_ops.forget(fs, a, 1);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 3);
	fs_passthrough_ops.forget(fs, a, 1);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 2);
	/* A child keeps its parent, whatever FORGET says of the parent. */
	fs_passthrough_ops.forget(fs, sub, 5);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 2);
	fs_passthrough_ops.forget(fs, c, 1);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 0);
	/* Gone, the root, and never known: nothing happens. */
	fs_passthrough_ops.forget(fs, a, 1);
	fs_passthrough_ops.forget(fs, 1, 1);
	fs_passthrough_ops.forget(fs, 0, 1);
	fs_passthrough_ops.forget(fs, 1u << 30, 1);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 0);
	struct stat st;
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs, a, FUSE_FS_NO_FH, &st), -ESTALE);
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs, 1, FUSE_FS_NO_FH, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
}
END_TEST

START_TEST(names_refused_and_hidden)
{
	struct fuse_fs_entry e;

	serve(0);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, 1, "", &e), -EINVAL);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, 1, ".", &e), -EINVAL);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, 1, "..", &e), -EINVAL);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, 1, "sub/c", &e), -EINVAL);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, 1, ".env", &e), -ENOENT);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, 1, ".ENV", &e), -ENOENT);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, 1, "missing", &e), -ENOENT);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, 0, "a", &e), -ESTALE);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, 999, "a", &e), -ESTALE);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, look(1, "a"), "x", &e), -ENOTDIR);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 1);
}
END_TEST

START_TEST(symlinks_never_followed)
{
	char p[128], buf[64];
	struct fuse_fs_entry e;
	uint64_t fh;

	snprintf(p, sizeof p, "%s/l", dir);
	ck_assert_int_eq(symlink("/etc", p), 0);
	serve(0);
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, 1, "l", &e), 0);
	ck_assert(S_ISLNK(e.st.st_mode));
	ck_assert_int_eq(fs_passthrough_ops.lookup(fs, e.nodeid, "passwd", &e), -ENOTDIR);
	uint64_t l = look(1, "l");
	ck_assert_int_lt(fs_passthrough_ops.open(fs, l, O_RDONLY, &fh), 0);
	ck_assert_int_eq(fs_passthrough_ops.readlink(fs, l, buf, sizeof buf), 4);
	ck_assert_int_eq(memcmp(buf, "/etc", 4), 0);
}
END_TEST

START_TEST(handles_open_read_release)
{
	char buf[64];
	uint64_t fh, dh;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};

	serve(0);
	unsigned base = fs_passthrough_open_fds(fs);
	uint64_t a = look(1, "a");
	ck_assert_int_eq(read_node(a, buf, sizeof buf), 5);
	ck_assert_str_eq(buf, "hello");
	ck_assert_int_eq(fs_passthrough_ops.open(fs, a, O_RDONLY, &fh), 0);
	ck_assert_int_eq(fs_passthrough_ops.opendir(fs, 1, &dh), 0);
	ck_assert_uint_ne(fh, dh);
	/* A directory handle is no file handle, and the other way round. */
	ck_assert_int_eq(fs_passthrough_ops.read(fs, dh, &iov, 1, 0), -EBADF);
	ck_assert_int_eq(fs_passthrough_ops.releasedir(fs, fh), -EBADF);
	ck_assert_int_eq(fs_passthrough_ops.release(fs, dh), -EBADF);
	ck_assert_int_eq(fs_passthrough_ops.read(fs, 12345, &iov, 1, 0), -EBADF);
	ck_assert_int_eq(fs_passthrough_ops.release(fs, fh), 0);
	ck_assert_int_eq(fs_passthrough_ops.release(fs, fh), -EBADF);
	ck_assert_int_eq(fs_passthrough_ops.read(fs, fh, &iov, 1, 0), -EBADF);
	ck_assert_int_eq(fs_passthrough_ops.releasedir(fs, dh), 0);
	/* Freed handles are taken again rather than the table growing. */
	ck_assert_int_eq(fs_passthrough_ops.open(fs, a, O_RDONLY, &dh), 0);
	ck_assert_uint_le(dh, 1);
	ck_assert_int_eq(fs_passthrough_ops.release(fs, dh), 0);
	/* Only a's node fd is left of it all. */
	ck_assert_uint_le(fs_passthrough_open_fds(fs), base + 1);
	ck_assert_int_eq(fs_passthrough_ops.open(fs, 999, O_RDONLY, &fh), -ESTALE);
}
END_TEST

START_TEST(fd_cap_reopens_by_name)
{
	char name[16], want[16], buf[64];
	uint64_t id[12];
	struct stat st;

	for (int i = 0; i < 12; i++) {
		snprintf(name, sizeof name, "f%d", i);
		put(name, name);
	}
	serve(4);
	for (int i = 0; i < 12; i++) {
		snprintf(name, sizeof name, "f%d", i);
		id[i] = look(1, name);
		ck_assert_int_eq(fs_passthrough_ops.getattr(fs, id[i], FUSE_FS_NO_FH, &st), 0);
		ck_assert_uint_le(fs_passthrough_open_fds(fs), 4);
	}
	/* Every node still answers, its fd reopened once the cap closed it. */
	for (int i = 0; i < 12; i++) {
		snprintf(want, sizeof want, "f%d", i);
		ck_assert_int_eq(read_node(id[i], buf, sizeof buf), (ssize_t)strlen(want));
		ck_assert_str_eq(buf, want);
		ck_assert_uint_le(fs_passthrough_open_fds(fs), 4);
	}
}
END_TEST

START_TEST(reopen_checks_identity)
{
	char p[128];
	struct stat st;

	serve(1);
	uint64_t a = look(1, "a");
	uint64_t b = look(1, "b");
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs, a, FUSE_FS_NO_FH, &st), 0);
	/* b takes the one fd: a's is closed. */
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs, b, FUSE_FS_NO_FH, &st), 0);
	/* Another file under a's name is not a. */
	snprintf(p, sizeof p, "%s/a", dir);
	ck_assert_int_eq(rename(p, "/tmp/kbox-fsp-unit-moved"), 0);
	put("a", "other");
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs, a, FUSE_FS_NO_FH, &st), -ESTALE);
	unlink("/tmp/kbox-fsp-unit-moved");
	/* A fresh lookup finds the new file. */
	uint64_t a2 = look(1, "a");
	ck_assert_uint_ne(a2, a);
	ck_assert_int_eq(fs_passthrough_ops.getattr(fs, a2, FUSE_FS_NO_FH, &st), 0);
}
END_TEST

START_TEST(renamed_node_keeps_its_name)
{
	char buf[64];

	serve(2);
	uint64_t sub = look(1, "sub");
	uint64_t c = look(sub, "c");
	ck_assert_int_eq(fs_passthrough_ops.rename(fs, sub, "c", 1, "moved", 0), 0);
	/* Reopened by its new name in its new parent (the cap of two fds
	 * closes it whenever another node is used). */
	ck_assert_int_eq(read_node(look(1, "a"), buf, sizeof buf), 5);
	ck_assert_int_eq(read_node(c, buf, sizeof buf), 4);
	ck_assert_str_eq(buf, "deep");
	ck_assert_uint_eq(look(1, "moved"), c);
}
END_TEST

START_TEST(reset_forgets_everything)
{
	uint64_t fh, dh;
	char buf[8];
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};

	serve(0);
	unsigned base = fs_passthrough_open_fds(fs);
	uint64_t a = look(1, "a");
	uint64_t sub = look(1, "sub");
	look(sub, "c");
	ck_assert_int_eq(fs_passthrough_ops.open(fs, a, O_RDONLY, &fh), 0);
	ck_assert_int_eq(fs_passthrough_ops.opendir(fs, sub, &dh), 0);
	ck_assert_uint_gt(fs_passthrough_open_fds(fs), base);
	fs_passthrough_ops.reset(fs);
	ck_assert_uint_eq(fs_passthrough_inodes(fs), 0);
	ck_assert_uint_eq(fs_passthrough_open_fds(fs), base);
	ck_assert_int_eq(fs_passthrough_ops.read(fs, fh, &iov, 1, 0), -EBADF);
	ck_assert_int_eq(fs_passthrough_ops.releasedir(fs, dh), -EBADF);
	/* The root is still served, and found again by what it holds. */
	uint64_t a2 = look(1, "a");
	ck_assert_int_eq(read_node(a2, buf, sizeof buf), 5);
}
END_TEST

Suite *fs_passthrough_suite(void)
{
	return unit_suite_fixture("fs_passthrough", "core", setup, teardown, 0,
				  new_checks_its_config,
				  lookups_counted_and_forgotten,
				  names_refused_and_hidden,
				  symlinks_never_followed,
				  handles_open_read_release,
				  fd_cap_reopens_by_name,
				  reopen_checks_identity,
				  renamed_node_keeps_its_name,
				  reset_forgets_everything);
}
