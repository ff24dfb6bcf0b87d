#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/image/image.h"
#include "vmm/sandbox/sandbox.h"
#include "tests/lib/unit_suite.h"

static char rt[64];

/* Each test gets its own runtime directory through XDG_RUNTIME_DIR. */
static void setup(void)
{
	snprintf(rt, sizeof rt, "/tmp/kbox-sbtest-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(rt));
	setenv("XDG_RUNTIME_DIR", rt, 1);
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", rt);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(names)
{
	ck_assert(sandbox_name_ok("dev"));
	ck_assert(sandbox_name_ok("a.b_c-9"));
	ck_assert(!sandbox_name_ok(""));
	ck_assert(!sandbox_name_ok(".hidden.list"));
	ck_assert(!sandbox_name_ok("-rf"));
	ck_assert(!sandbox_name_ok("a/b"));
	ck_assert(!sandbox_name_ok(".."));
	ck_assert(!sandbox_name_ok("sp ace"));
	char longname[70];
	memset(longname, 'x', 65);
	longname[65] = '\0';
	ck_assert(!sandbox_name_ok(longname));
	longname[64] = '\0';
	ck_assert(sandbox_name_ok(longname));
}
END_TEST

START_TEST(claim_info_lookup_release)
{
	struct sandbox sb, sb2;
	struct sandbox_info info;
	char err[256];
	ck_assert_int_eq(sandbox_claim(&sb, "one", err, sizeof err), 0);
	struct stat st;
	ck_assert_int_eq(stat(sb.dir, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	char *argv[] = { "sh", "-c", "echo\nnewline", NULL };
	ck_assert_int_eq(sandbox_write_info(&sb, 2, 300, argv), 0);
	ck_assert_int_eq(sandbox_lookup("one", &sb2, &info), 0);
	ck_assert_int_eq(info.pid, getpid());
	ck_assert(info.alive);
	ck_assert_uint_eq(info.cpus, 2);
	ck_assert_uint_eq(info.memory_mib, 300);
	/* A control character in argv cannot break the one-line format. */
	ck_assert_str_eq(info.command, "sh -c echo?newline");
	/* This process is alive, so the name is taken. */
	ck_assert_int_eq(sandbox_claim(&sb2, "one", err, sizeof err), -EEXIST);
	ck_assert_ptr_nonnull(strstr(err, "already running"));
	sandbox_release(&sb);
	ck_assert_int_eq(stat(sb.dir, &st), -1);
	ck_assert_int_eq(sandbox_lookup("one", &sb2, &info), -ENOENT);
}
END_TEST

START_TEST(stale_directory_is_reclaimed)
{
	struct sandbox sb;
	char err[256], path[4200];
	ck_assert_int_eq(sandbox_claim(&sb, "old", err, sizeof err), 0);
	/* A pid that cannot exist stands for a kbox that crashed. */
	snprintf(path, sizeof path, "%s/info", sb.dir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "pid=2147483646\nstarted=0\ncpus=1\nmemory=64\ncommand=x\n");
	fclose(f);
	snprintf(path, sizeof path, "%s/vsock.sock_1234", sb.dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	struct sandbox_info info;
	/* The crash also dropped its lock on the directory. */
	close(sb.lock);
	ck_assert_int_eq(sandbox_lookup("old", &sb, &info), 0);
	ck_assert(!info.alive);
	ck_assert_int_eq(sandbox_claim(&sb, "old", err, sizeof err), 0);
	ck_assert_int_eq(access(path, F_OK), -1);
	/* kbox stop cleaning up after the crash leaves the new owner alone. */
	struct sandbox other;
	ck_assert_int_eq(sandbox_lookup("old", &other, &info), -ENOENT);
	sandbox_release(&other);
	ck_assert_int_eq(access(sb.dir, F_OK), 0);
	sandbox_release(&sb);
	ck_assert_int_eq(access(sb.dir, F_OK), -1);
}
END_TEST

/* Two claims of one name at the same moment, each in its own process (the
 * way two `kbox run --name` start): exactly one wins, and the loser
 * leaves the winner's directory alone, although the winner has written
 * no info file yet. */
START_TEST(concurrent_claims_one_wins)
{
	for (int round = 0; round < 200; round++) {
		int go[2], res[2], done[2];
		pid_t kid[2];
		ck_assert_int_eq(pipe(go), 0);
		ck_assert_int_eq(pipe(res), 0);
		ck_assert_int_eq(pipe(done), 0);
		for (int k = 0; k < 2; k++) {
			kid[k] = fork();
			ck_assert_int_ge(kid[k], 0);
			if (kid[k] == 0) {
				struct sandbox sb;
				char err[256], c, ok;
				close(go[1]);
				close(res[0]);
				close(done[1]);
				if (read(go[0], &c, 1) != 0)
					_exit(2);
				ok = sandbox_claim(&sb, "race", err, sizeof err) == 0;
				struct stat st;
				/* The winner's directory must survive the loser. */
				if (write(res[1], &ok, 1) != 1 || read(done[0], &c, 1) != 0)
					_exit(2);
				if (ok && stat(sb.dir, &st) < 0)
					_exit(3);
				if (ok)
					sandbox_release(&sb);
				_exit(0);
			}
		}
		close(go[0]);
		close(res[1]);
		close(done[0]);
		close(go[1]); /* both start now */
		char r[2];
		ck_assert_int_eq(read(res[0], &r[0], 1), 1);
		ck_assert_int_eq(read(res[0], &r[1], 1), 1);
		close(done[1]);
		close(res[0]);
		for (int k = 0; k < 2; k++) {
			int status;
			ck_assert_int_eq(waitpid(kid[k], &status, 0), kid[k]);
			ck_assert(WIFEXITED(status));
			ck_assert_int_eq(WEXITSTATUS(status), 0);
		}
		ck_assert_msg(r[0] + r[1] == 1, "round %d: %d claims won", round, r[0] + r[1]);
	}
}
END_TEST

/* A relative root is recorded as an absolute path, which `kbox image rm`
 * (running elsewhere) can stat. */
START_TEST(image_recorded_absolute)
{
	struct sandbox sb, sb2;
	struct sandbox_info info;
	char err[256], want[PATH_MAX], cwd[PATH_MAX], path[4200];
	ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
	snprintf(path, sizeof path, "%s/rootfs", rt);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	ck_assert_ptr_nonnull(realpath(path, want));
	ck_assert_int_eq(sandbox_claim(&sb, "img", err, sizeof err), 0);
	char *argv[] = { "true", NULL };
	ck_assert_int_eq(sandbox_write_info(&sb, 1, 64, argv), 0);
	ck_assert_int_eq(chdir(rt), 0);
	ck_assert_int_eq(sandbox_write_image(&sb, "./rootfs/."), 0);
	ck_assert_int_eq(sandbox_write_image(&sb, "./missing"), -ENOENT);
	ck_assert_int_eq(chdir(cwd), 0);
	ck_assert_int_eq(sandbox_lookup("img", &sb2, &info), 0);
	ck_assert_str_eq(info.image, want);
	sandbox_release(&sb);
}
END_TEST

/* `kbox run --image` records its rootfs holding the store's lock: a
 * removal waits until the record is there. */
START_TEST(store_hold_blocks_removal)
{
	char store[4200];
	snprintf(store, sizeof store, "%s/images", rt);
	setenv("KBOX_IMAGE_DIR", store, 1);
	ck_assert_int_eq(image_store_hold(), -ENOENT); /* no store: nothing to hold */
	ck_assert_int_eq(mkdir(store, 0700), 0);
	int hold = image_store_hold();
	ck_assert_int_ge(hold, 0);
	pid_t kid = fork();
	ck_assert_int_ge(kid, 0);
	if (kid == 0) {
		struct image_ctx ctx;
		memset(&ctx, 0, sizeof ctx);
		close(hold); /* the lock is the parent's */
		_exit(image_remove(&ctx, "nosuch") == -ENOENT ? 0 : 1);
	}
	int status;
	usleep(300 * 1000);
	ck_assert_int_eq(waitpid(kid, &status, WNOHANG), 0); /* still waiting for the lock */
	close(hold);
	ck_assert_int_eq(waitpid(kid, &status, 0), kid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	unsetenv("KBOX_IMAGE_DIR");
}
END_TEST

static int seen;
static void count(const struct sandbox_info *i, void *ctx)
{
	(void)ctx;
	seen += strcmp(i->name, "a") == 0 || strcmp(i->name, "b") == 0;
}

START_TEST(each_lists_all)
{
	struct sandbox a, b;
	char err[256];
	char *argv[] = { "true", NULL };
	ck_assert_int_eq(sandbox_claim(&a, "a", err, sizeof err), 0);
	ck_assert_int_eq(sandbox_claim(&b, "b", err, sizeof err), 0);
	ck_assert_int_eq(sandbox_write_info(&a, 1, 64, argv), 0);
	ck_assert_int_eq(sandbox_write_info(&b, 1, 64, argv), 0);
	seen = 0;
	ck_assert_int_eq(sandbox_each(count, NULL), 2);
	ck_assert_int_eq(seen, 2);
	sandbox_release(&a);
	sandbox_release(&b);
}
END_TEST

START_TEST(bad_names_and_long_paths_refused)
{
	struct sandbox sb;
	char err[256];
	ck_assert_int_eq(sandbox_claim(&sb, "../etc", err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "invalid sandbox name"));
	/* A runtime dir deep enough that the socket path would not fit. */
	char deep[200];
	snprintf(deep, sizeof deep, "%s/%s", rt,
		 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	ck_assert_int_eq(mkdir(deep, 0700), 0);
	setenv("XDG_RUNTIME_DIR", deep, 1);
	char name[65];
	memset(name, 'n', 64);
	name[64] = '\0';
	ck_assert_int_eq(sandbox_claim(&sb, name, err, sizeof err), -ENAMETOOLONG);
	ck_assert_ptr_nonnull(strstr(err, "shorter --name"));
}
END_TEST

/* ---- run.args: how kbox fork starts a sandbox's copy ---- */

static void put_args_file(const struct sandbox *sb, const void *buf, size_t len)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/run.args", sb->dir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static int read_args(const struct sandbox *sb, char **buf, char **cwd, int *argc, char ***argv)
{
	*buf = *cwd = NULL;
	*argv = NULL;
	*argc = -1;
	return sandbox_read_args(sb, buf, cwd, argc, argv);
}

START_TEST(args_round_trip)
{
	struct sandbox sb;
	char err[256];
	ck_assert_int_eq(sandbox_claim(&sb, "one", err, sizeof err), 0);
	char *argv[] = { "run", "-e", "A=with space", "", "-w", "/in guest", "--", "sh", "-c",
			 "echo one\necho two", "\t", "\xc3\xa9", NULL };
	int n = (int)(sizeof argv / sizeof argv[0]) - 1;
	ck_assert_int_eq(sandbox_write_args(&sb, "/home/u/my project", n, argv), 0);
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/run.args", sb.dir);
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);

	char *buf, *cwd, **v;
	int c;
	ck_assert_int_eq(read_args(&sb, &buf, &cwd, &c, &v), 0);
	ck_assert_str_eq(cwd, "/home/u/my project");
	ck_assert_int_eq(c, n);
	for (int i = 0; i < n; i++)
		ck_assert_str_eq(v[i], argv[i]);
	ck_assert_ptr_null(v[n]);
	free(v);
	free(buf);

	/* written again: replaced whole; a lone "run" and the root folder */
	char *one[] = { "run", NULL };
	ck_assert_int_eq(sandbox_write_args(&sb, "/", 1, one), 0);
	ck_assert_int_eq(read_args(&sb, &buf, &cwd, &c, &v), 0);
	ck_assert_str_eq(cwd, "/");
	ck_assert_int_eq(c, 1);
	ck_assert_str_eq(v[0], "run");
	ck_assert_ptr_null(v[1]);
	free(v);
	free(buf);
	/* released: the file goes with the folder */
	sandbox_release(&sb);
	ck_assert_int_eq(stat(path, &st), -1);
}
END_TEST

START_TEST(args_size_cap)
{
	struct sandbox sb;
	char err[256];
	ck_assert_int_eq(sandbox_claim(&sb, "one", err, sizeof err), 0);
	/* "/w\0run\0" and one argument filling the rest: exactly the cap */
	size_t fill = SANDBOX_ARGS_MAX - 3 - 4 - 1;
	char *big = malloc(fill + 2);
	ck_assert_ptr_nonnull(big);
	memset(big, 'a', fill + 1);
	big[fill] = '\0';
	char *argv[] = { "run", big, NULL };
	ck_assert_int_eq(sandbox_write_args(&sb, "/w", 2, argv), 0);
	char *buf, *cwd, **v;
	int c;
	ck_assert_int_eq(read_args(&sb, &buf, &cwd, &c, &v), 0);
	ck_assert_int_eq(c, 2);
	ck_assert_uint_eq(strlen(v[1]), fill);
	free(v);
	free(buf);
	/* one byte more: refused, the file as it was */
	big[fill] = 'a';
	big[fill + 1] = '\0';
	ck_assert_int_eq(sandbox_write_args(&sb, "/w", 2, argv), -E2BIG);
	ck_assert_int_eq(read_args(&sb, &buf, &cwd, &c, &v), 0);
	ck_assert_uint_eq(strlen(v[1]), fill);
	free(v);
	free(buf);
	/* a file past the cap (not written by kbox) is not read */
	char *huge = calloc(1, SANDBOX_ARGS_MAX + 1);
	ck_assert_ptr_nonnull(huge);
	memcpy(huge, "/w\0run", 6);
	put_args_file(&sb, huge, SANDBOX_ARGS_MAX + 1);
	ck_assert_int_eq(read_args(&sb, &buf, &cwd, &c, &v), -EFBIG);
	ck_assert_ptr_null(buf);
	ck_assert_ptr_null(v);
	free(huge);
	free(big);
	sandbox_release(&sb);
}
END_TEST

START_TEST(args_malformed_refused)
{
	struct sandbox sb;
	char err[256];
	ck_assert_int_eq(sandbox_claim(&sb, "one", err, sizeof err), 0);
	char *buf, *cwd, **v;
	int c;
	ck_assert_int_eq(read_args(&sb, &buf, &cwd, &c, &v), -ENOENT);
	static const struct {
		const char *b;
		size_t len;
	} bad[] = {
		{ "", 0 },                     /* empty */
		{ "/w\0run", 6 },              /* no trailing NUL */
		{ "/w\0run\0sh", 9 },          /* the last argument cut */
		{ "w\0run\0", 6 },             /* a relative folder */
		{ "\0run\0", 5 },              /* no folder */
		{ "/w\0", 3 },                 /* no argument */
		{ "/w", 2 },                   /* nothing but a folder, unended */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		put_args_file(&sb, bad[i].b, bad[i].len);
		ck_assert_msg(read_args(&sb, &buf, &cwd, &c, &v) == -EBADMSG, "case %zu", i);
		ck_assert_ptr_null(buf);
		ck_assert_ptr_null(v);
	}
	/* one empty argument is one argument */
	put_args_file(&sb, "/w\0\0", 4);
	ck_assert_int_eq(read_args(&sb, &buf, &cwd, &c, &v), 0);
	ck_assert_int_eq(c, 1);
	ck_assert_str_eq(v[0], "");
	free(v);
	free(buf);
	/* a folder in the file's place */
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/run.args", sb.dir);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	ck_assert_int_eq(read_args(&sb, &buf, &cwd, &c, &v), -EISDIR);
	ck_assert_int_eq(rmdir(path), 0);
	sandbox_release(&sb);
}
END_TEST

Suite *sandbox_suite(void)
{
	/* 400 forks under ASan take a few seconds on a loaded 2-core host:
	 * more than Check's default 4 s. */
	return unit_suite_fixture("sandbox", "core", setup, teardown, 60, names,
				  claim_info_lookup_release,
				  stale_directory_is_reclaimed, each_lists_all,
				  bad_names_and_long_paths_refused,
				  concurrent_claims_one_wins,
				  image_recorded_absolute,
				  store_hold_blocks_removal, args_round_trip, args_size_cap,
				  args_malformed_refused);
}
