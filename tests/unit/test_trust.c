#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/cmd/trust.h"
#include "vmm/sandbox/config.h"
#include "tests/lib/unit_suite.h"

static char dir[64], conf[256], store[256];

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static char *slurp(const char *path)
{
	static char buf[8192];
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/kbox-trust-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(conf, sizeof conf, "%s/kbox.yaml", dir);
	/* In a folder of its own that does not exist yet. */
	snprintf(store, sizeof store, "%s/state/kbox/trusted", dir);
	put(conf, "cpus: 1\n");
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static void digest(const char *secrets, char hex[TRUST_HEX_LEN + 1])
{
	char err[256] = "";
	ck_assert_msg(trust_digest(conf, secrets, hex, err, sizeof err) == 0, "%s", err);
	ck_assert_uint_eq(strlen(hex), TRUST_HEX_LEN);
	ck_assert_uint_eq(strspn(hex, "0123456789abcdef"), TRUST_HEX_LEN);
}

START_TEST(digest_follows_content)
{
	char a[TRUST_HEX_LEN + 1], b[TRUST_HEX_LEN + 1], c[TRUST_HEX_LEN + 1];
	digest(NULL, a);
	digest(NULL, b);
	ck_assert_str_eq(a, b);
	put(conf, "cpus: 2\n");
	digest(NULL, c);
	ck_assert_str_ne(a, c);
	/* One byte more is a change too. */
	put(conf, "cpus: 1\n\n");
	digest(NULL, c);
	ck_assert_str_ne(a, c);
}
END_TEST

START_TEST(digest_covers_secrets_env)
{
	char none[TRUST_HEX_LEN + 1], one[TRUST_HEX_LEN + 1], two[TRUST_HEX_LEN + 1];
	char env[PATH_MAX];
	snprintf(env, sizeof env, "%s/secrets.env", dir);
	digest(NULL, none);
	put(env, "DIR=/home\n");
	digest(NULL, one);
	ck_assert_str_ne(none, one);
	put(env, "DIR=/root\n");
	digest(NULL, two);
	ck_assert_str_ne(one, two);
	unlink(env);
	digest(NULL, two);
	ck_assert_str_eq(none, two);
}
END_TEST

START_TEST(digest_covers_project_secrets_only)
{
	char none[TRUST_HEX_LEN + 1], absent[TRUST_HEX_LEN + 1], one[TRUST_HEX_LEN + 1],
		two[TRUST_HEX_LEN + 1], out1[TRUST_HEX_LEN + 1], out2[TRUST_HEX_LEN + 1];
	char sec[PATH_MAX], outside[PATH_MAX];
	snprintf(sec, sizeof sec, "%s/secrets.yaml", dir);
	digest(NULL, none);
	/* A secrets file in the project that does not exist yet counts as
	 * absent: creating it is a change. */
	digest(sec, absent);
	ck_assert_str_ne(none, absent);
	put(sec, "a: {value: x, allow: [example.com]}\n");
	digest(sec, one);
	ck_assert_str_ne(absent, one);
	put(sec, "a: {value: x, allow: [example.org]}\n");
	digest(sec, two);
	ck_assert_str_ne(one, two);
	/* The same file reached through ".." inside the folder is the same. */
	char sub[128], via[PATH_MAX];
	snprintf(sub, sizeof sub, "%s/sub", dir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	snprintf(via, sizeof via, "%s/../secrets.yaml", sub);
	digest(via, out1);
	ck_assert_str_eq(out1, two);
	/* A secrets file outside the folder is the user's own: not hashed. */
	snprintf(outside, sizeof outside, "%s-outside.yaml", dir);
	put(outside, "a: 1\n");
	digest(outside, out1);
	put(outside, "a: 2\n");
	digest(outside, out2);
	ck_assert_str_eq(out1, out2);
	ck_assert_str_eq(out1, none);
	unlink(outside);
}
END_TEST

START_TEST(record_check_replace_remove)
{
	char a[TRUST_HEX_LEN + 1], b[TRUST_HEX_LEN + 1], err[256];
	digest(NULL, a);
	ck_assert_int_eq(trust_check(store, conf, a), 0); /* no store yet */
	ck_assert_int_eq(trust_record(store, conf, a, err, sizeof err), 0);
	ck_assert_int_eq(trust_check(store, conf, a), 1);
	struct stat st;
	ck_assert_int_eq(stat(store, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	char parent[PATH_MAX];
	snprintf(parent, sizeof parent, "%s/state", dir);
	ck_assert_int_eq(stat(parent, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0700);
	/* Another path with the same digest is not trusted. */
	char other[PATH_MAX];
	snprintf(other, sizeof other, "%s/other/kbox.yaml", dir);
	ck_assert_int_eq(trust_check(store, other, a), 0);
	/* A prefix of the path is not the path. */
	char prefix[PATH_MAX];
	snprintf(prefix, sizeof prefix, "%s/kbox.yam", dir);
	ck_assert_int_eq(trust_check(store, prefix, a), 0);
	ck_assert_int_eq(trust_record(store, other, a, err, sizeof err), 0);
	put(conf, "cpus: 3\n");
	digest(NULL, b);
	ck_assert_int_eq(trust_check(store, conf, b), 0);
	/* Recording the new digest replaces the old line. */
	ck_assert_int_eq(trust_record(store, conf, b, err, sizeof err), 0);
	ck_assert_int_eq(trust_check(store, conf, b), 1);
	ck_assert_int_eq(trust_check(store, conf, a), 0);
	ck_assert_int_eq(trust_check(store, other, a), 1);
	const char *text = slurp(store);
	ck_assert_ptr_nonnull(text);
	/* One line per path: the old digest is gone. */
	size_t lines = 0;
	for (const char *p = text; (p = strstr(p, conf)) != NULL; p++)
		lines++;
	ck_assert_uint_eq(lines, 1);
	/* Remove: only that path goes. */
	ck_assert_int_eq(trust_record(store, conf, NULL, err, sizeof err), 0);
	ck_assert_int_eq(trust_check(store, conf, b), 0);
	ck_assert_int_eq(trust_check(store, other, a), 1);
	/* No temporary file left behind. */
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s.tmp", store);
	ck_assert_int_eq(access(tmp, F_OK), -1);
}
END_TEST

START_TEST(foreign_lines_kept)
{
	char a[TRUST_HEX_LEN + 1], err[256];
	digest(NULL, a);
	ck_assert_int_eq(trust_record(store, conf, a, err, sizeof err), 0);
	FILE *f = fopen(store, "a");
	ck_assert_ptr_nonnull(f);
	fputs("# a note of the user's\nv2 something newer\ngarbage", f);
	fclose(f);
	/* A hand-made line with the path but a short digest trusts nothing. */
	f = fopen(store, "a");
	fprintf(f, "\nv1 abcd %s\n", conf);
	fclose(f);
	ck_assert_int_eq(trust_check(store, conf, a), 1);
	ck_assert_int_eq(trust_record(store, conf, NULL, err, sizeof err), 0);
	ck_assert_int_eq(trust_check(store, conf, a), 0);
	const char *text = slurp(store);
	ck_assert_ptr_nonnull(strstr(text, "# a note of the user's\n"));
	ck_assert_ptr_nonnull(strstr(text, "v2 something newer\n"));
	ck_assert_ptr_nonnull(strstr(text, "garbage\n"));
}
END_TEST

START_TEST(refuses_bad_paths)
{
	char a[TRUST_HEX_LEN + 1], err[256] = "";
	digest(NULL, a);
	ck_assert_int_eq(trust_record(store, "relative/kbox.yaml", a, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "absolute"));
	ck_assert_int_eq(trust_record(store, "/x\n/kbox.yaml", a, err, sizeof err), -EINVAL);
	ck_assert_int_eq(access(store, F_OK), -1);
	/* A config that cannot be read gives its reason. */
	ck_assert_int_eq(trust_digest("/nonexistent/kbox.yaml", NULL, a, err, sizeof err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/kbox.yaml"));
	/* A folder where the store should be is an error, not "untrusted". */
	ck_assert_int_eq(mkdir(dir, 0700) == 0 || errno == EEXIST, 1);
	ck_assert_int_eq(trust_check(dir, conf, a), -EINVAL);
	/* So is a store too big to be one. */
	char big[300];
	snprintf(big, sizeof big, "%s/big", dir);
	put(big, "");
	ck_assert_int_eq(truncate(big, 5 << 20), 0);
	ck_assert_int_eq(trust_check(big, conf, a), -EFBIG);
}
END_TEST

/* A link planted at the record's temporary or lock name is not followed:
 * the file it points at stays as it was. */
START_TEST(planted_links_not_followed)
{
	char a[TRUST_HEX_LEN + 1], err[256] = "", victim[300], tmp[300], lock[300];
	digest(NULL, a);
	ck_assert_int_eq(trust_record(store, conf, a, err, sizeof err), 0);
	snprintf(victim, sizeof victim, "%s/victim", dir);
	put(victim, "keep me\n");
	snprintf(tmp, sizeof tmp, "%s.tmp", store);
	ck_assert_int_eq(symlink(victim, tmp), 0);
	ck_assert_int_eq(trust_record(store, conf, a, err, sizeof err), -ELOOP);
	ck_assert_str_eq(slurp(victim), "keep me\n");
	ck_assert_int_eq(unlink(tmp), 0);
	snprintf(lock, sizeof lock, "%s.lock", store);
	ck_assert_int_eq(unlink(lock), 0);
	ck_assert_int_eq(symlink(victim, lock), 0);
	ck_assert_int_eq(trust_record(store, conf, a, err, sizeof err), -ELOOP);
	ck_assert_str_eq(slurp(victim), "keep me\n");
}
END_TEST

START_TEST(store_path_from_environment)
{
	char buf[PATH_MAX];
	const char *old_home = getenv("HOME"), *old_x = getenv("XDG_DATA_HOME"),
		   *old_k = getenv("KBOX_TRUST_FILE");
	char *h = old_home ? strdup(old_home) : NULL, *x = old_x ? strdup(old_x) : NULL,
	     *k = old_k ? strdup(old_k) : NULL;
	setenv("HOME", "/home/u", 1);
	unsetenv("XDG_DATA_HOME");
	unsetenv("KBOX_TRUST_FILE");
	ck_assert_int_eq(trust_store_path(buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "/home/u/.local/share/kbox/trusted");
	setenv("XDG_DATA_HOME", "relative", 1); /* ignored: not absolute */
	ck_assert_int_eq(trust_store_path(buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "/home/u/.local/share/kbox/trusted");
	setenv("XDG_DATA_HOME", "/d", 1);
	ck_assert_int_eq(trust_store_path(buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "/d/kbox/trusted");
	setenv("KBOX_TRUST_FILE", "/t/file", 1);
	ck_assert_int_eq(trust_store_path(buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "/t/file");
	ck_assert_int_eq(trust_store_path(buf, 4), -ENAMETOOLONG);
	unsetenv("KBOX_TRUST_FILE");
	unsetenv("XDG_DATA_HOME");
	unsetenv("HOME");
	ck_assert_int_eq(trust_store_path(buf, sizeof buf), -ENOENT);
	if (h)
		setenv("HOME", h, 1);
	if (x)
		setenv("XDG_DATA_HOME", x, 1);
	if (k)
		setenv("KBOX_TRUST_FILE", k, 1);
	free(h);
	free(x);
	free(k);
}
END_TEST

START_TEST(project_refused_until_recorded)
{
	char err[512] = "";
	struct kbox_config c;
	config_init(&c);
	ck_assert_int_eq(config_load(conf, &c, err, sizeof err), 0);
	char *old = getenv("KBOX_TRUST_FILE") ? strdup(getenv("KBOX_TRUST_FILE")) : NULL;
	setenv("KBOX_TRUST_FILE", store, 1);
	/* The unit tests run without a terminal on stdin: no question. */
	if (!isatty(STDIN_FILENO)) {
		ck_assert_int_eq(trust_project(conf, &c, err, sizeof err), -EACCES);
		ck_assert_ptr_nonnull(strstr(err, "not trusted"));
		ck_assert_ptr_nonnull(strstr(err, "kbox trust"));
	}
	char hex[TRUST_HEX_LEN + 1];
	digest(NULL, hex);
	ck_assert_int_eq(trust_record(store, conf, hex, err, sizeof err), 0);
	ck_assert_int_eq(trust_project(conf, &c, err, sizeof err), 0);
	if (old)
		setenv("KBOX_TRUST_FILE", old, 1);
	else
		unsetenv("KBOX_TRUST_FILE");
	free(old);
	config_free(&c);
}
END_TEST

/* trust_project in folder at with kbox.yaml found there, as kbox run does. */
static int project_in(const char *at, char *err, size_t errlen)
{
	struct kbox_config c;
	int here = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(here, 0);
	ck_assert_int_eq(chdir(at), 0);
	config_init(&c);
	int rc = config_load("kbox.yaml", &c, err, errlen);
	ck_assert_msg(rc == 0, "%s", err);
	setenv("KBOX_TRUST_FILE", store, 1);
	rc = trust_project("kbox.yaml", &c, err, errlen);
	unsetenv("KBOX_TRUST_FILE");
	config_free(&c);
	ck_assert_int_eq(fchdir(here), 0);
	close(here);
	return rc;
}

/* A kbox.yaml that is a symlink is trusted where it is: its relative
 * paths, secrets file and /workspace are that folder's, so trust given to
 * the target elsewhere does not carry over, and 'kbox trust' in the
 * folder agrees with kbox run. */
START_TEST(symlinked_config_trusted_where_found)
{
	char err[512] = "", other[128], link[192], hex[TRUST_HEX_LEN + 1];
	put(conf, "secrets: secrets.yaml\n");
	snprintf(other, sizeof other, "%s/clone", dir);
	ck_assert_int_eq(mkdir(other, 0700), 0);
	snprintf(link, sizeof link, "%s/kbox.yaml", other);
	ck_assert_int_eq(symlink(conf, link), 0);
	snprintf(link, sizeof link, "%s/secrets.yaml", other);
	put(link, "secrets: {}\n");
	/* The target trusted as kbox run in its own folder would record it. */
	struct kbox_config c;
	config_init(&c);
	ck_assert_int_eq(config_load(conf, &c, err, sizeof err), 0);
	ck_assert_int_eq(trust_digest(conf, c.secrets, hex, err, sizeof err), 0);
	config_free(&c);
	ck_assert_int_eq(trust_record(store, conf, hex, err, sizeof err), 0);
	if (isatty(STDIN_FILENO))
		return;
	ck_assert_int_eq(project_in(dir, err, sizeof err), 0);
	/* The clone's link is another place, with its own secrets file. */
	ck_assert_int_eq(project_in(other, err, sizeof err), -EACCES);
	/* Also when the target names no secrets file. */
	put(conf, "cpus: 1\n");
	config_init(&c);
	ck_assert_int_eq(config_load(conf, &c, err, sizeof err), 0);
	ck_assert_int_eq(trust_digest(conf, c.secrets, hex, err, sizeof err), 0);
	config_free(&c);
	ck_assert_int_eq(trust_record(store, conf, hex, err, sizeof err), 0);
	ck_assert_int_eq(project_in(dir, err, sizeof err), 0);
	ck_assert_int_eq(project_in(other, err, sizeof err), -EACCES);
	/* 'kbox trust FOLDER' records the link as kbox run looks it up. */
	put(conf, "secrets: secrets.yaml\n");
	setenv("KBOX_TRUST_FILE", store, 1);
	char *argv[] = { "trust", other, NULL };
	int code = trust_main(2, argv);
	unsetenv("KBOX_TRUST_FILE");
	ck_assert_int_eq(code, 0);
	ck_assert_int_eq(project_in(other, err, sizeof err), 0);
	/* Its secrets file is covered. */
	put(link, "secrets: {}\n# changed\n");
	ck_assert_int_eq(project_in(other, err, sizeof err), -EACCES);
}
END_TEST

/* Reads what is waiting on the pty's master side into buf. */
static size_t drain(int master, char *buf, size_t len)
{
	size_t got = 0;
	for (;;) {
		struct pollfd p = { .fd = master, .events = POLLIN };
		if (got + 1 >= len || poll(&p, 1, 200) <= 0)
			break;
		ssize_t n = read(master, buf + got, len - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	return got;
}

/* A quoted value can hold terminal controls; the question on a terminal
 * shows them as \xNN, so the file cannot redraw what the user reads. */
START_TEST(question_shows_no_terminal_controls)
{
	char err[512] = "", out[8192];
	put(conf, "command: [\"\\e[2J\\e[Hharmless\", \"x\"]\n"
		  "mounts: [{source: \"d\\e]0;title\\a\", target: /mnt}]\n"
		  "secrets: \"s\\e[1A.yaml\"\n"
		  "network:\n  hosts: {h.example: 10.0.0.1}\n"
		  "  dns: [192.0.2.53]\n  audit_log: ../../.bashrc\n"
		  "tls: {extra_ca: ca.pem, bypass: [b.example]}\n");
	struct kbox_config c;
	config_init(&c);
	ck_assert_msg(config_load(conf, &c, err, sizeof err) == 0, "%s", err);
	ck_assert_ptr_nonnull(strchr(c.argv[0], 0x1b));
	int master = posix_openpt(O_RDWR | O_NOCTTY);
	ck_assert_int_ge(master, 0);
	ck_assert_int_eq(grantpt(master), 0);
	ck_assert_int_eq(unlockpt(master), 0);
	int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
	ck_assert_int_ge(slave, 0);
	ck_assert_int_eq(write(master, "n\n", 2), 2);
	int in = dup(STDIN_FILENO), errfd = dup(STDERR_FILENO);
	dup2(slave, STDIN_FILENO);
	dup2(slave, STDERR_FILENO);
	setenv("KBOX_TRUST_FILE", store, 1);
	int rc = trust_project(conf, &c, err, sizeof err);
	unsetenv("KBOX_TRUST_FILE");
	fflush(stderr);
	dup2(errfd, STDERR_FILENO);
	dup2(in, STDIN_FILENO);
	close(errfd);
	close(in);
	close(slave);
	drain(master, out, sizeof out);
	close(master);
	config_free(&c);
	ck_assert_int_eq(rc, -EACCES);
	ck_assert_msg(strstr(out, "Trust this file") != NULL, "%s", out);
	ck_assert_ptr_null(strchr(out, 0x1b));
	ck_assert_ptr_null(strchr(out, 0x07));
	ck_assert_ptr_nonnull(strstr(out, "\\x1b[2J\\x1b[Hharmless ..."));
	ck_assert_ptr_nonnull(strstr(out, "d\\x1b]0;title\\x07 -> /mnt"));
	ck_assert_ptr_nonnull(strstr(out, "s\\x1b[1A.yaml"));
	/* What decides where secrets go, and a file kbox would append to. */
	ck_assert_ptr_nonnull(strstr(out, "dns      192.0.2.53"));
	ck_assert_ptr_nonnull(strstr(out, "/ca.pem (CA certificates"));
	ck_assert_ptr_nonnull(strstr(out, "b.example (not intercepted)"));
	ck_assert_ptr_nonnull(strstr(out, "/../../.bashrc (network decisions appended)"));
}
END_TEST

Suite *trust_suite(void)
{
	return unit_suite_fixture("trust", "trust", setup, teardown, 0,
				  digest_follows_content,
				  planted_links_not_followed,
				  digest_covers_project_secrets_only,
				  digest_covers_secrets_env,
				  record_check_replace_remove,
				  foreign_lines_kept, refuses_bad_paths,
				  store_path_from_environment,
				  project_refused_until_recorded,
				  question_shows_no_terminal_controls,
				  symlinked_config_trusted_where_found);
}
