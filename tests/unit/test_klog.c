/* Kernel console watcher: bytes arrive in whatever pieces the UART hands
 * over; lines go to the log file exactly and the markers kbox acts on are
 * recognised only when well formed. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/tmp_tree.h"
#include "tests/lib/unit_suite.h"
#include "vmm/core/klog.h"

static void feed_str(struct klog *k, const char *s)
{
	klog_write(k, (const uint8_t *)s, strlen(s));
}

/* Same text one byte per call, as the UART delivers it. */
static void feed_bytewise(struct klog *k, const char *s)
{
	for (; *s; s++)
		klog_write(k, (const uint8_t *)s, 1);
}

static int exit_code_of(const char *text)
{
	struct klog k;
	klog_init(&k);
	feed_str(&k, text);
	klog_flush(&k);
	return k.exit_code;
}

START_TEST(exit_marker_bytewise_crlf)
{
	struct klog k;
	klog_init(&k);
	ck_assert_int_eq(k.exit_code, -1);
	feed_bytewise(&k, "[    1.234] reboot: Restarting system with command 'kbox-exit=7'\r\n");
	ck_assert_int_eq(k.exit_code, 7);
	ck_assert_int_eq(k.panic, 0);
	ck_assert_int_eq(k.init_failed, 0);
}
END_TEST

START_TEST(exit_marker_odd_chunks)
{
	static const char text[] = "noise\r\nreboot: Restarting system with command "
				   "'kbox-exit=255'\r\nafter\r\n";
	/* Every split point between two chunks. */
	for (size_t cut = 0; cut <= sizeof text - 1; cut++) {
		struct klog k;
		klog_init(&k);
		klog_write(&k, (const uint8_t *)text, cut);
		klog_write(&k, (const uint8_t *)text + cut, sizeof text - 1 - cut);
		ck_assert_int_eq(k.exit_code, 255);
	}
}
END_TEST

START_TEST(exit_marker_values)
{
	const char *pre = "reboot: Restarting system with command 'kbox-exit=";
	char line[128];
	const struct {
		const char *tail;
		int want;
	} cases[] = {
		{ "0'", 0 },      { "1'", 1 },    { "255'", 255 }, { "007'", 7 },
		{ "300'", -1 },   { "256'", -1 }, { "7x'", -1 },   { "7", -1 },
		{ "7\"", -1 },    { "'", -1 },    { "-1'", -1 },   { "-0'", -1 },
		{ "+7'", -1 },    { " 7'", -1 },  { "x'", -1 },
		{ "99999999999999999999999'", -1 },
	};
	for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(line, sizeof line, "%s%s\n", pre, cases[i].tail);
		ck_assert_msg(exit_code_of(line) == cases[i].want, "%s: got %d, want %d", line,
			      exit_code_of(line), cases[i].want);
	}
	/* Without the kernel's wording it is just text. */
	ck_assert_int_eq(exit_code_of("kbox-exit=7'\n"), -1);
	ck_assert_int_eq(exit_code_of("Restarting system with command 'kbox-exit=7\n'\n"), -1);
}
END_TEST

START_TEST(malformed_marker_keeps_earlier_code)
{
	struct klog k;
	klog_init(&k);
	feed_str(&k, "reboot: Restarting system with command 'kbox-exit=3'\n");
	feed_str(&k, "reboot: Restarting system with command 'kbox-exit=3000'\n");
	ck_assert_int_eq(k.exit_code, 3);
}
END_TEST

START_TEST(panic_captured_once)
{
	struct klog k;
	klog_init(&k);
	feed_bytewise(&k, "[    2.0] Kernel panic - not syncing: VFS: Unable to mount root fs\r\n");
	ck_assert_int_eq(k.panic, 1);
	ck_assert_str_eq(k.panic_msg, "VFS: Unable to mount root fs");
	/* The first panic is the cause; later ones are echoes. */
	feed_str(&k, "Kernel panic - not syncing: second\n");
	ck_assert_str_eq(k.panic_msg, "VFS: Unable to mount root fs");
	ck_assert_int_eq(k.exit_code, -1);
}
END_TEST

START_TEST(init_failure_markers)
{
	struct klog k;
	klog_init(&k);
	feed_str(&k, "kbox-init: cannot mount /proc: No such device\r\n");
	ck_assert_str_eq(k.init_msg, "cannot mount /proc: No such device");
	ck_assert_int_eq(k.init_failed, 0);
	feed_str(&k, "reboot: Restarting system with command 'kbox-init-failed'\r\n");
	ck_assert_int_eq(k.init_failed, 1);
	ck_assert_int_eq(k.exit_code, -1);
	ck_assert_int_eq(k.panic, 0);
}
END_TEST

START_TEST(partial_line_needs_flush)
{
	struct klog k;
	klog_init(&k);
	feed_str(&k, "reboot: Restarting system with command 'kbox-exit=9'");
	ck_assert_int_eq(k.exit_code, -1);
	klog_flush(&k);
	ck_assert_int_eq(k.exit_code, 9);
	klog_flush(&k);
	ck_assert_int_eq(k.exit_code, 9);
}
END_TEST

START_TEST(long_lines_split)
{
	struct klog k;
	klog_init(&k);
	size_t n = 5 * KLOG_LINE + 17;
	uint8_t *b = malloc(n);
	ck_assert_ptr_nonnull(b);
	memset(b, 'L', n);
	klog_write(&k, b, n);
	ck_assert_uint_lt(k.len, KLOG_LINE);
	/* A panic marker beyond the first chunk of a long line is seen in
	 * the piece it lands in; the buffer never overflows. */
	memcpy(b + 2 * KLOG_LINE, "Kernel panic - not syncing: deep", 32);
	klog_write(&k, b, n);
	klog_flush(&k);
	ck_assert_uint_eq(k.len, 0);
	ck_assert_int_eq(k.panic, 1);
	ck_assert_mem_eq(k.panic_msg, "deepLLL", 7);
	ck_assert_uint_lt(strlen(k.panic_msg), KLOG_LINE);
	free(b);
}
END_TEST

START_TEST(nul_bytes_dropped)
{
	struct klog k;
	klog_init(&k);
	static const uint8_t b[] = "reboot: Restarting system\0 with command 'kbox-exit=4'\n";
	klog_write(&k, b, sizeof b - 1);
	ck_assert_int_eq(k.exit_code, 4);
}
END_TEST

/* The log file receives each line once, CR stripped, in order. */
START_TEST(log_file_exact)
{
	char path[] = "/tmp/kbox-klog-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	unlink(path);
	struct klog k;
	klog_init(&k);
	k.fd = fd;
	feed_bytewise(&k, "Linux version 6.1\r\n");
	feed_str(&k, "a\r\n\r\nb");
	feed_str(&k, "c\n");
	char *longl = malloc(KLOG_LINE + 10);
	ck_assert_ptr_nonnull(longl);
	memset(longl, 'x', KLOG_LINE + 9);
	longl[KLOG_LINE + 9] = '\0';
	feed_str(&k, longl);
	feed_str(&k, "\ntail");
	klog_flush(&k);

	char expect[2048];
	int el = snprintf(expect, sizeof expect, "Linux version 6.1\na\n\nbc\n%.*s\n%s\ntail\n",
			  KLOG_LINE - 1, longl, longl + KLOG_LINE - 1);
	ck_assert_int_lt(el, (int)sizeof expect);
	char got[2048];
	ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
	ssize_t gl = read(fd, got, sizeof got);
	ck_assert_int_eq(gl, el);
	ck_assert_mem_eq(got, expect, (size_t)el);
	close(fd);
	free(longl);
}
END_TEST

/* HOME and XDG_STATE_HOME as a test sets them; restored by env_restore. */
static char *saved_home, *saved_state;

static void env_save(const char *home, const char *state)
{
	const char *h = getenv("HOME"), *st = getenv("XDG_STATE_HOME");
	saved_home = h ? strdup(h) : NULL;
	saved_state = st ? strdup(st) : NULL;
	if (home)
		setenv("HOME", home, 1);
	else
		unsetenv("HOME");
	if (state)
		setenv("XDG_STATE_HOME", state, 1);
	else
		unsetenv("XDG_STATE_HOME");
}

static void env_restore(void)
{
	if (saved_home)
		setenv("HOME", saved_home, 1);
	else
		unsetenv("HOME");
	if (saved_state)
		setenv("XDG_STATE_HOME", saved_state, 1);
	else
		unsetenv("XDG_STATE_HOME");
	free(saved_home);
	free(saved_state);
	saved_home = saved_state = NULL;
}

/* The default place: under XDG_STATE_HOME, folders made, no warning. */
START_TEST(open_default_under_state_home)
{
	char d[64], want[128], used[256], warn[512];
	ck_assert_int_eq(tmp_tree_make(d, sizeof d, "/tmp/klog-XXXXXX"), 0);
	env_save("/dev/null/home", d);
	int fd = klog_open(NULL, "/dev/null/fallback.log", used, sizeof used, warn, sizeof warn);
	env_restore();
	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(want, sizeof want, "%s/kbox/kernel.log", d);
	ck_assert_str_eq(used, want);
	ck_assert_str_eq(warn, "");
	ck_assert_int_eq(access(want, W_OK), 0);
	ck_assert_int_eq(tmp_tree_remove(d), 0);
}
END_TEST

/* A home that cannot hold ~/.local/state (one that cannot be made, a
 * file in the way, nothing set, a relative one): the fallback, and one
 * line saying why.  (Paths under /dev/null fail for root too.) */
START_TEST(open_falls_back_when_home_unusable)
{
	char d[64], fb[128], home[128], used[256], warn[512];
	ck_assert_int_eq(tmp_tree_make(d, sizeof d, "/tmp/klog-XXXXXX"), 0);
	snprintf(fb, sizeof fb, "%s/.kernel.log", d);
	ck_assert_int_eq(tmp_tree_put(d, "file", "x"), 0);
	const char *homes[] = { "/dev/null/home", home, NULL, "relative/home" };
	snprintf(home, sizeof home, "%s/file", d); /* a file: mkdir gives ENOTDIR */
	for (size_t i = 0; i < sizeof homes / sizeof homes[0]; i++) {
		env_save(homes[i], NULL);
		int fd = klog_open(NULL, fb, used, sizeof used, warn, sizeof warn);
		env_restore();
		ck_assert_msg(fd >= 0, "home %s", homes[i] ? homes[i] : "(unset)");
		close(fd);
		ck_assert_str_eq(used, fb);
		ck_assert_ptr_nonnull(strstr(warn, "; writing it to "));
		ck_assert_ptr_nonnull(strstr(warn, fb));
		ck_assert_ptr_null(strchr(warn, '\n'));
		if (i == 1)
			ck_assert_ptr_nonnull(strstr(warn, "Not a directory"));
		if (i >= 2)
			ck_assert_ptr_nonnull(strstr(warn, "neither XDG_STATE_HOME nor HOME"));
	}
	ck_assert_int_eq(tmp_tree_remove(d), 0);
}
END_TEST

/* A symbolic link where kbox's own log goes is not followed; a path the
 * user named is; a named path that fails falls back too; with no place
 * at all the run goes on without a log (-1, used ""). */
START_TEST(open_links_named_paths_and_no_place)
{
	char d[64], p[128], tgt[128], fb[128], used[256], warn[512];
	ck_assert_int_eq(tmp_tree_make(d, sizeof d, "/tmp/klog-XXXXXX"), 0);
	snprintf(fb, sizeof fb, "%s/.kernel.log", d);
	snprintf(tgt, sizeof tgt, "%s/target", d);
	snprintf(p, sizeof p, "%s/kbox", d);
	ck_assert_int_eq(mkdir(p, 0700), 0);
	snprintf(p, sizeof p, "%s/kbox/kernel.log", d);
	ck_assert_int_eq(symlink(tgt, p), 0);
	env_save(NULL, d);
	int fd = klog_open(NULL, fb, used, sizeof used, warn, sizeof warn);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_str_eq(used, fb);
	ck_assert_int_eq(access(tgt, F_OK), -1);

	fd = klog_open(p, fb, used, sizeof used, warn, sizeof warn);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_str_eq(used, p);
	ck_assert_str_eq(warn, "");
	ck_assert_int_eq(access(tgt, F_OK), 0);

	fd = klog_open("/dev/null/k.log", fb, used, sizeof used, warn, sizeof warn);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_str_eq(used, fb);
	ck_assert_ptr_nonnull(strstr(warn, "cannot write the kernel log /dev/null/k.log"));

	fd = klog_open("/dev/null/k.log", "/dev/null/fb.log", used, sizeof used, warn,
		       sizeof warn);
	ck_assert_int_eq(fd, -1);
	ck_assert_str_eq(used, "");
	ck_assert_ptr_nonnull(strstr(warn, "running without one"));
	fd = klog_open("/dev/null/k.log", NULL, used, sizeof used, warn, sizeof warn);
	ck_assert_int_eq(fd, -1);
	env_restore();
	ck_assert_int_eq(tmp_tree_remove(d), 0);
}
END_TEST

Suite *klog_suite(void)
{
	return unit_suite("klog", "core", exit_marker_bytewise_crlf,
			  exit_marker_odd_chunks, exit_marker_values,
			  malformed_marker_keeps_earlier_code,
			  panic_captured_once, init_failure_markers,
			  partial_line_needs_flush, long_lines_split,
			  nul_bytes_dropped, log_file_exact,
			  open_default_under_state_home,
			  open_falls_back_when_home_unusable,
			  open_links_named_paths_and_no_place);
}
