/* Audit log lines: exact format, escaping of hostile names (quotes,
 * newlines, control and non-ASCII bytes), bounds, and appending to a
 * real file with mode 0600. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netstack/audit.h"
#include "tests/lib/unit_suite.h"

START_TEST(format_lines)
{
	char buf[AUDIT_LINE_MAX];
	size_t n;
	struct policy_addr v4, v6;
	ck_assert_int_eq(policy_addr_parse("93.184.216.34", &v4), 0);
	ck_assert_int_eq(policy_addr_parse("2001:db8::1", &v6), 0);
	struct audit_event e = { .time_ms = 1700000000123ull, .proto = "tcp", .dst = &v4, .port = 443,
				 .name = "example.com", .allow = true, .rule = "mode:public" };
	ck_assert_int_eq(audit_format(&e, buf, sizeof buf, &n), 0);
	ck_assert_str_eq(buf, "{\"time\":\"2023-11-14T22:13:20.123Z\",\"proto\":\"tcp\",\"dst\":\"93.184.216.34:443\","
			      "\"name\":\"example.com\",\"decision\":\"allow\",\"rule\":\"mode:public\"}\n");
	ck_assert_uint_eq(n, strlen(buf));
	e.dst = &v6;
	e.name = NULL;
	e.allow = false;
	e.rule = "class:documentation";
	ck_assert_int_eq(audit_format(&e, buf, sizeof buf, &n), 0);
	ck_assert_ptr_nonnull(strstr(buf, "\"dst\":\"[2001:db8::1]:443\",\"decision\":\"deny\""));
	ck_assert_ptr_null(strstr(buf, "name"));
	e.dst = NULL;
	e.proto = "dns";
	e.name = "x.evil.com";
	ck_assert_int_eq(audit_format(&e, buf, sizeof buf, &n), 0);
	ck_assert_ptr_null(strstr(buf, "dst"));
	ck_assert_ptr_nonnull(strstr(buf, "\"proto\":\"dns\",\"name\":\"x.evil.com\""));
	/* A forwarded connection's decision, then its close with counts. */
	struct policy_addr g;
	ck_assert_int_eq(policy_addr_parse("10.0.2.15", &g), 0);
	struct audit_event in = { .time_ms = 0, .proto = "tcp", .direction = "in", .dst = &g, .port = 8000,
				  .allow = true, .rule = "forward:127.0.0.1:41000:8000" };
	ck_assert_int_eq(audit_format(&in, buf, sizeof buf, &n), 0);
	ck_assert_str_eq(buf, "{\"time\":\"1970-01-01T00:00:00.000Z\",\"proto\":\"tcp\",\"direction\":\"in\","
			      "\"dst\":\"10.0.2.15:8000\",\"decision\":\"allow\",\"rule\":\"forward:127.0.0.1:41000:8000\"}\n");
	in.close = true;
	in.bytes_up = 18446744073709551615ull;
	in.bytes_down = 7;
	in.duration_ms = 1500;
	ck_assert_int_eq(audit_format(&in, buf, sizeof buf, &n), 0);
	ck_assert_str_eq(buf, "{\"time\":\"1970-01-01T00:00:00.000Z\",\"proto\":\"tcp\",\"direction\":\"in\","
			      "\"dst\":\"10.0.2.15:8000\",\"event\":\"close\",\"bytes_up\":18446744073709551615,"
			      "\"bytes_down\":7,\"duration_ms\":1500}\n");
	in.error = "ECONNREFUSED";
	ck_assert_int_eq(audit_format(&in, buf, sizeof buf, &n), 0);
	ck_assert_ptr_nonnull(strstr(buf, "\"duration_ms\":1500,\"error\":\"ECONNREFUSED\"}\n"));
	in.error = NULL;
	/* A rate-limited kind of line says how many were left out. */
	struct audit_event u = { .time_ms = 0, .proto = "udp", .dst = &g, .port = 443, .rule = "udp:only-dns",
				 .suppressed = 42 };
	ck_assert_int_eq(audit_format(&u, buf, sizeof buf, &n), 0);
	ck_assert_str_eq(buf, "{\"time\":\"1970-01-01T00:00:00.000Z\",\"proto\":\"udp\",\"dst\":\"10.0.2.15:443\","
			      "\"decision\":\"deny\",\"rule\":\"udp:only-dns\",\"suppressed\":42}\n");
}
END_TEST

START_TEST(escaping_and_bounds)
{
	char buf[AUDIT_LINE_MAX];
	size_t n;
	struct audit_event e = { .time_ms = 0, .proto = "dns",
				 .name = "a\"b\\c\nd\x01\x7f\xff\",\"decision\":\"allow",
				 .rule = "deny:x" };
	ck_assert_int_eq(audit_format(&e, buf, sizeof buf, &n), 0);
	ck_assert_str_eq(buf, "{\"time\":\"1970-01-01T00:00:00.000Z\",\"proto\":\"dns\","
			      "\"name\":\"a\\\"b\\\\c\\u000ad\\u0001\\u007f\\u00ff\\\",\\\"decision\\\":\\\"allow\","
			      "\"decision\":\"deny\",\"rule\":\"deny:x\"}\n");
	ck_assert_ptr_eq(strchr(buf, '\n'), buf + n - 1);
	/* no shell command substitution survives, in case a shell reads it */
	e.name = "$(touch x)`id`";
	ck_assert_int_eq(audit_format(&e, buf, sizeof buf, &n), 0);
	ck_assert_ptr_nonnull(strstr(buf, "\"name\":\"\\u0024(touch x)\\u0060id\\u0060\""));
	ck_assert_ptr_null(strpbrk(buf, "$`"));
	/* the worst case still fits one line, cut to the bound */
	static char huge[AUDIT_RULE_MAX * 4];
	memset(huge, 0x01, sizeof huge - 1);
	e.name = huge;
	e.rule = huge;
	ck_assert_int_eq(audit_format(&e, buf, sizeof buf, &n), 0);
	ck_assert_uint_lt(n, AUDIT_LINE_MAX);
	ck_assert_ptr_eq(strchr(buf, '\n'), buf + n - 1);
	/* too small a buffer is an error, never an overflow */
	for (size_t len = 0; len < 60; len++)
		ck_assert_int_eq(audit_format(&e, buf, len, &n), -ENOSPC);
}
END_TEST

START_TEST(learn)
{
	struct audit_learn l;
	struct policy_addr a1, a6, meta;
	struct policy_decision ok = { .allow = true, .why = POLICY_WHY_PUBLIC, .rule = "mode:public" };
	struct policy_decision nomatch = { .allow = false, .why = POLICY_WHY_NO_MATCH, .rule = "allowlist" };
	struct policy_decision cls = { .allow = false, .why = POLICY_WHY_CLASS, .rule = "class:metadata" };
	struct policy_decision rule = { .allow = false, .why = POLICY_WHY_DENY_RULE, .rule = "deny:evil.test\nx" };
	char *text;
	ck_assert_int_eq(policy_addr_parse("93.184.216.34", &a1), 0);
	ck_assert_int_eq(policy_addr_parse("2001:db8::1", &a6), 0);
	ck_assert_int_eq(policy_addr_parse("169.254.169.254", &meta), 0);
	audit_learn_init(&l);
	/* Connections by name (deduplicated, case and trailing dot folded),
	 * by address without a name, DNS-only refusals. */
	ck_assert_int_eq(audit_learn_add(&l, "Example.COM.", &a1, 443, &ok), 0);
	ck_assert_int_eq(audit_learn_add(&l, "example.com", &a1, 443, &ok), 0);
	ck_assert_int_eq(audit_learn_add(&l, "example.com", &a1, 80, &nomatch), 0);
	ck_assert_int_eq(audit_learn_add(&l, NULL, &a6, 8443, &nomatch), 0);
	ck_assert_int_eq(audit_learn_add(&l, NULL, &meta, 80, &cls), 0);
	ck_assert_int_eq(audit_learn_add(&l, "evil.test", NULL, 0, &rule), 0);
	ck_assert_int_eq(audit_learn_add(&l, "api.test", NULL, 0, &nomatch), 0);
	ck_assert_int_eq(audit_learn_add(&l, "example.com", NULL, 0, &nomatch), 0);
	/* Names no rule could hold are not suggested. */
	ck_assert_int_eq(audit_learn_add(&l, "a\"b.test", NULL, 0, &nomatch), 0);
	ck_assert_int_eq(audit_learn_add(&l, "127.1", NULL, 0, &nomatch), 0);
	ck_assert_uint_eq(l.n, 7);
	ck_assert_uint_eq(l.allowed, 2);
	ck_assert_uint_eq(l.denied, 8);
	ck_assert_int_eq(audit_learn_format(&l, "public", 0, &text), 0);
	ck_assert_ptr_nonnull(strstr(text, "at 1970-01-01T00:00:00Z"));
	ck_assert_ptr_nonnull(strstr(text, "under policy 'public'\n# (10 decisions: 2 allowed, 8 denied)"));
	ck_assert_str_eq(strstr(text, "network:"), "network:\n"
						  "  policy: allowlist\n"
						  "  allow:\n"
						  "    # - \"169.254.169.254:80\"  # denied by class:metadata\n"
						  "    - \"[2001:db8::1]:8443\"\n"
						  "    - \"api.test\"  # refused at DNS: no port seen\n"
						  "    # - \"evil.test\"  # denied by deny:evil.test?x\n"
						  "    - \"example.com:80\"\n"
						  "    - \"example.com:443\"\n");
	free(text);
	audit_learn_free(&l);
	/* Nothing to allow: still a valid list. */
	audit_learn_init(&l);
	ck_assert_int_eq(audit_learn_add(&l, NULL, &meta, 80, &cls), 0);
	ck_assert_int_eq(audit_learn_format(&l, "public", 0, &text), 0);
	ck_assert_str_eq(strstr(text, "network:"), "network:\n"
						  "  policy: allowlist\n"
						  "  allow: []\n"
						  "    # - \"169.254.169.254:80\"  # denied by class:metadata\n");
	free(text);
	audit_learn_free(&l);
	/* Bounded: beyond AUDIT_LEARN_MAX destinations only counts grow. */
	audit_learn_init(&l);
	for (unsigned i = 0; i < AUDIT_LEARN_MAX + 10; i++)
		ck_assert_int_eq(audit_learn_add(&l, NULL, &a1, (uint16_t)(i + 1), &ok), 0);
	ck_assert_uint_eq(l.n, AUDIT_LEARN_MAX);
	ck_assert_uint_eq(l.lost, 10);
	ck_assert_int_eq(audit_learn_format(&l, "allowlist", 0, &text), 0);
	ck_assert_ptr_nonnull(strstr(text, "not recorded"));
	free(text);
	audit_learn_free(&l);
	/* Empty: a valid file with an empty list. */
	audit_learn_init(&l);
	ck_assert_int_eq(audit_learn_format(&l, "public", 0, &text), 0);
	ck_assert_ptr_nonnull(strstr(text, "  allow: []\n"));
	free(text);
}
END_TEST

START_TEST(file_append)
{
	char dir[] = "/tmp/kbox-audit-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char path[64];
	snprintf(path, sizeof path, "%s/audit.jsonl", dir);
	struct audit a;
	char err[512];
	ck_assert_int_eq(audit_open(&a, path, err, sizeof err), 0);
	struct policy_addr v4;
	ck_assert_int_eq(policy_addr_parse("10.0.0.1", &v4), 0);
	struct audit_event e = { .time_ms = 1, .proto = "tcp", .dst = &v4, .port = 22, .rule = "class:private" };
	ck_assert_int_eq(audit_write(&a, &e), 0);
	e.allow = true;
	ck_assert_int_eq(audit_write(&a, &e), 0);
	audit_close(&a);
	ck_assert_int_eq(audit_write(&a, &e), 0); /* off: a no-op */
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	char line[512];
	int lines = 0;
	while (fgets(line, sizeof line, f))
		lines++;
	fclose(f);
	ck_assert_int_eq(lines, 2);
	ck_assert_int_eq(audit_open(&a, "/nonexistent-dir/x", err, sizeof err), -ENOENT);
	unlink(path);
	rmdir(dir);
}
END_TEST

static void put_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	ck_assert_int_eq(chmod(path, mode), 0);
}

static off_t file_size(const char *path)
{
	struct stat st;
	ck_assert_int_eq(lstat(path, &st), 0);
	return st.st_size;
}

/* The log takes guest-chosen names: kbox writes it into no file the host
 * may run or source (a .bashrc, a git hook), and through no symlink. */
START_TEST(open_refuses_foreign_files)
{
	char dir[] = "/tmp/kbox-audit-XXXXXX", p[5][128], err[512];
	struct audit a;
	ck_assert_ptr_nonnull(mkdtemp(dir));
	static const char *const names[] = { "log", "bashrc", "hook", "link", "null" };
	for (int i = 0; i < 5; i++)
		snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);

	/* Every kind of line is recognised as ours. */
	struct policy_addr v4;
	ck_assert_int_eq(policy_addr_parse("10.0.0.1", &v4), 0);
	struct audit_event ev[] = {
		{ .time_ms = 1, .proto = "tcp", .dst = &v4, .port = 22, .rule = "x" },
		{ .time_ms = 2, .proto = "tcp", .dst = &v4, .port = 22, .close = true, .error = "E" },
		{ .time_ms = 3, .proto = "tls", .event = "intercept", .where = "h" },
		{ .time_ms = 4, .proto = "dns", .name = "$(x)", .suppressed = 3 },
	};
	for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) {
		char line[AUDIT_LINE_MAX];
		size_t n;
		ck_assert_int_eq(audit_format(&ev[i], line, sizeof line, &n), 0);
		ck_assert(audit_line_is_ours(line, n - 1));
		ck_assert(!audit_line_is_ours(line, n - 2));
	}
	ck_assert(!audit_line_is_ours("{\"time\":\"x\"}", 12));
	ck_assert(!audit_line_is_ours("", 0));

	/* A log of ours is appended to again. */
	ck_assert_int_eq(audit_open(&a, p[0], err, sizeof err), 0);
	ck_assert_int_eq(audit_write(&a, &ev[0]), 0);
	audit_close(&a);
	ck_assert_int_eq(audit_open(&a, p[0], err, sizeof err), 0);
	ck_assert_int_eq(audit_write(&a, &ev[1]), 0);
	audit_close(&a);
	off_t logsize = file_size(p[0]);

	/* Someone else's file, even if JSON-like, is left alone. */
	put_file(p[1], "export PATH=$HOME/bin:$PATH\n", 0644);
	ck_assert_int_eq(audit_open(&a, p[1], err, sizeof err), -EEXIST);
	ck_assert_int_eq(a.fd, -1);
	ck_assert_ptr_nonnull(strstr(err, p[1]));
	ck_assert_ptr_nonnull(strstr(err, "name a new file"));
	ck_assert_int_eq(file_size(p[1]), 28);
	put_file(p[1], "{\"time\":\"soon\"}\n", 0600);
	ck_assert_int_eq(audit_open(&a, p[1], err, sizeof err), -EEXIST);

	/* Anything executable, even empty or an old log of ours. */
	put_file(p[2], "", 0700);
	ck_assert_int_eq(audit_open(&a, p[2], err, sizeof err), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "executable"));
	ck_assert_int_eq(chmod(p[0], 0610), 0);
	ck_assert_int_eq(audit_open(&a, p[0], err, sizeof err), -EPERM);
	ck_assert_int_eq(chmod(p[0], 0600), 0);

	/* No symlink, even to a log of ours; a device is fine. */
	ck_assert_int_eq(symlink(p[0], p[3]), 0);
	ck_assert_int_eq(audit_open(&a, p[3], err, sizeof err), -ELOOP);
	ck_assert_ptr_nonnull(strstr(err, "symbolic link"));
	ck_assert_int_eq(file_size(p[0]), logsize);
	ck_assert_int_eq(symlink("/dev/null", p[4]), 0);
	ck_assert_int_eq(audit_open(&a, p[4], err, sizeof err), 0);
	ck_assert_int_eq(audit_write(&a, &ev[0]), 0);
	audit_close(&a);
	ck_assert_int_eq(audit_open(&a, "/dev/null", err, sizeof err), 0);
	audit_close(&a);
	ck_assert_int_lt(audit_open(&a, dir, err, sizeof err), 0);

	/* --learn replaces its own output only. */
	struct audit_learn l;
	audit_learn_init(&l);
	unlink(p[3]);
	int fd = audit_open_file(p[3], true, err, sizeof err);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(audit_learn_write(&l, "public", fd), 0);
	close(fd);
	ck_assert_int_gt(file_size(p[3]), 0);
	fd = audit_open_file(p[3], true, err, sizeof err);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(file_size(p[3]), 0);
	put_file(p[1], "echo hi\n", 0600);
	ck_assert_int_eq(audit_open_file(p[1], true, err, sizeof err), -EEXIST);
	ck_assert_int_eq(audit_open_file(p[2], true, err, sizeof err), -EPERM);
	unlink(p[4]);
	ck_assert_int_eq(symlink(p[3], p[4]), 0);
	ck_assert_int_eq(audit_open_file(p[4], true, err, sizeof err), -ELOOP);
	ck_assert_int_eq(file_size(p[1]), 8);

	for (int i = 0; i < 5; i++)
		unlink(p[i]);
	rmdir(dir);
}
END_TEST

Suite *audit_suite(void)
{
	return unit_suite("audit", "core", format_lines, escaping_and_bounds,
			  file_append, open_refuses_foreign_files, learn);
}
