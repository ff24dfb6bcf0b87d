#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/secenv.h"
#include "tests/lib/unit_suite.h"

#define ERRLEN 512

static char dir[64], file[96], envpath[96];

static void setup(void)
{
	strcpy(dir, "/tmp/kbox-senv-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof file, "%s/kbox.yaml", dir);
	snprintf(envpath, sizeof envpath, "%s/secrets.env", dir);
	unsetenv("KBOX_T_SENV");
	unsetenv("KBOX_T_SENV2");
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static void write_env(const char *text, size_t len)
{
	FILE *f = fopen(envpath, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	fclose(f);
}

/* Look VAR up in a fresh senv over text (written as secrets.env). */
static int lookup(const char *text, const char *var, char *val, size_t vlen, char *err)
{
	struct senv e;
	const char *v;
	if (text)
		write_env(text, strlen(text));
	ck_assert_int_eq(secenv_init(&e, file), 0);
	err[0] = '\0';
	int rc = secenv_lookup(&e, var, &v, err, ERRLEN);
	snprintf(val, vlen, "%s", rc == 0 && v ? v : "(unset)");
	secenv_free(&e);
	return rc;
}

/* text must be refused with -EINVAL and "DIR/secrets.env" + msg. */
static void expect_err(const char *text, const char *msg)
{
	char val[64], err[ERRLEN], want[ERRLEN];
	ck_assert_int_eq(lookup(text, "KBOX_T_SENV", val, sizeof val, err), -EINVAL);
	snprintf(want, sizeof want, "%s%s", envpath, msg);
	ck_assert_str_eq(err, want);
}

START_TEST(lines_and_quoting)
{
	char val[64], err[ERRLEN];
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "KBOX_T_SENV=plain\n", "plain" },
		{ "export KBOX_T_SENV=exported\n", "exported" },
		{ "  \texport\tKBOX_T_SENV=tabs", "tabs" },
		{ "KBOX_T_SENV=\"a # b\"  # comment\n", "a # b" },
		{ "KBOX_T_SENV='x\"y'\n", "x\"y" },
		{ "KBOX_T_SENV=a#b # c\n", "a#b" },
		{ "KBOX_T_SENV=trailing  \t\r\n", "trailing" },
		{ "KBOX_T_SENV=\n", "" },
		{ "KBOX_T_SENV=first\nKBOX_T_SENV=last\n", "last" },
		{ "# KBOX_T_SENV=commented\n\n", "(unset)" },
		{ "KBOX_T_SENV2=other\n", "(unset)" },
		{ "exportKBOX_T_SENV=x\n", "(unset)" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		ck_assert_msg(lookup(cases[i].text, "KBOX_T_SENV", val, sizeof val, err) == 0,
			      "case %zu: %s", i, err);
		ck_assert_msg(strcmp(val, cases[i].want) == 0, "case %zu: got '%s'", i, val);
	}
}
END_TEST

START_TEST(environment_first_file_optional)
{
	char val[64], err[ERRLEN];
	/* No file: only the environment counts, and that is no error. */
	ck_assert_int_eq(lookup(NULL, "KBOX_T_SENV", val, sizeof val, err), 0);
	ck_assert_str_eq(val, "(unset)");
	setenv("KBOX_T_SENV", "from-env", 1);
	ck_assert_int_eq(lookup("KBOX_T_SENV=from-file\n", "KBOX_T_SENV", val, sizeof val, err), 0);
	ck_assert_str_eq(val, "from-env");
	/* A variable set in the environment never reads a broken file. */
	ck_assert_int_eq(lookup("not a line\n", "KBOX_T_SENV", val, sizeof val, err), 0);
	ck_assert_str_eq(val, "from-env");
	unsetenv("KBOX_T_SENV");

	/* A file name without a directory looks in the current one. */
	struct senv e;
	ck_assert_int_eq(secenv_init(&e, "kbox.yaml"), 0);
	ck_assert_str_eq(e.path, "secrets.env");
	secenv_free(&e);
	secenv_free(&e);
}
END_TEST

START_TEST(errors_say_where_never_what)
{
	expect_err("GOOD=1\nnot a line\n", ":2:4: expected '=' after the name; write KEY=VALUE");
	expect_err("A = 1\n", ":1:2: expected '=' after the name; write KEY=VALUE");
	expect_err("\n=x\n", ":2:1: expected a line KEY=VALUE, a comment (#) or nothing");
	expect_err("1A=x\n", ":1:1: expected a line KEY=VALUE, a comment (#) or nothing");
	expect_err("A=\"open\n", ":1:3: the quoted value does not end on this line; expected a "
				     "closing \"");
	expect_err("A='v' x\n", ":1:7: text after the closing quote; expected the end of the "
				   "line or a # comment");
	expect_err("GOOD=sec\x01ret\n", ":1:9: the value of GOOD contains a control character; "
					 "expected printable text");
	expect_err("A=\"tab\there\"\n", ":1:7: the value of A contains a control character; "
					  "expected printable text");

	char val[64], err[ERRLEN], want[ERRLEN];
	write_env("A=x\0y\n", 6);
	ck_assert_int_eq(lookup(NULL, "KBOX_T_SENV", val, sizeof val, err), -EINVAL);
	snprintf(want, sizeof want, "%s: contains a NUL byte; expected a text file of KEY=VALUE "
				    "lines", envpath);
	ck_assert_str_eq(err, want);

	char *big = malloc(SECENV_MAX_BYTES + 2);
	memset(big, '#', SECENV_MAX_BYTES + 1);
	write_env(big, SECENV_MAX_BYTES);
	ck_assert_int_eq(lookup(NULL, "KBOX_T_SENV", val, sizeof val, err), 0);
	write_env(big, SECENV_MAX_BYTES + 1);
	free(big);
	ck_assert_int_eq(lookup(NULL, "KBOX_T_SENV", val, sizeof val, err), -EFBIG);
	snprintf(want, sizeof want, "%s: cannot read: larger than 64 KiB; expected a readable "
				    "file of KEY=VALUE lines", envpath);
	ck_assert_str_eq(err, want);

	unlink(envpath);
	ck_assert_int_eq(mkdir(envpath, 0700), 0);
	ck_assert_int_eq(lookup(NULL, "KBOX_T_SENV", val, sizeof val, err), -EISDIR);
	snprintf(want, sizeof want, "%s: cannot read: Is a directory; expected a readable file "
				    "of KEY=VALUE lines", envpath);
	ck_assert_str_eq(err, want);
	rmdir(envpath);
}
END_TEST

START_TEST(variable_name_characters)
{
	ck_assert(secenv_var_start('a') && secenv_var_start('Z') && secenv_var_start('_'));
	ck_assert(!secenv_var_start('0') && !secenv_var_start('-') && !secenv_var_start('\xc3'));
	ck_assert(secenv_var_char('0') && secenv_var_char('9') && secenv_var_char('_'));
	ck_assert(!secenv_var_char('.') && !secenv_var_char('$') && !secenv_var_char('\0'));
}
END_TEST

/* Expand val with a fresh senv (over whatever secrets.env there is). */
static int expand(const char *val, size_t max_name, size_t max_out, struct secenv_result *r,
		  char *err)
{
	struct senv e;
	ck_assert_int_eq(secenv_init(&e, file), 0);
	err[0] = '\0';
	int rc = secenv_expand(&e, val, strlen(val), max_name, max_out, r, err, ERRLEN);
	secenv_free(&e);
	return rc;
}

/* val must expand to want within the limits. */
static void expect_within(const char *val, size_t max_name, size_t max_out, const char *want)
{
	struct secenv_result r;
	char err[ERRLEN];
	ck_assert_msg(expand(val, max_name, max_out, &r, err) == 0, "'%.40s': %s", val, err);
	ck_assert_uint_eq(r.fault, 0);
	ck_assert_uint_eq(r.len, strlen(want));
	ck_assert_str_eq(r.str, want);
	free(r.str);
}

static void expect_expand(const char *val, const char *want)
{
	expect_within(val, SECENV_NAME_MAX, 1 << 20, want);
}

/* val must be refused with fault at byte at, naming name (NULL: none). */
static void expect_fault(const char *val, size_t max_name, size_t max_out,
			 enum secenv_fault fault, size_t at, const char *name)
{
	struct secenv_result r;
	char err[ERRLEN];
	ck_assert_int_eq(expand(val, max_name, max_out, &r, err), -EINVAL);
	ck_assert_msg(r.fault == fault, "'%s': fault %d", val, (int)r.fault);
	ck_assert_uint_eq(r.at, at);
	ck_assert_ptr_null(r.str);
	ck_assert_str_eq(err, "");
	if (name) {
		ck_assert_uint_eq(r.name_len, strlen(name));
		ck_assert(memcmp(r.name, name, r.name_len) == 0);
	} else {
		ck_assert_ptr_null(r.name);
	}
}

START_TEST(expand_dollars)
{
	setenv("KBOX_T_SENV", "v", 1);
	expect_expand("", "");
	expect_expand("plain", "plain");
	expect_expand("$$", "$");
	expect_expand("$$$$", "$$");
	expect_expand("$", "$");
	expect_expand("a$", "a$");
	expect_expand("$HOME $ x$-", "$HOME $ x$-");
	expect_expand("$${KBOX_T_SENV}", "${KBOX_T_SENV}");
	expect_expand("$$$${KBOX_T_SENV}", "$${KBOX_T_SENV}");
	expect_expand("$${KBOX_T_SENV", "${KBOX_T_SENV");
	expect_expand("${KBOX_T_SENV}", "v");
	expect_expand("<${KBOX_T_SENV}${KBOX_T_SENV}>$", "<vv>$");
	expect_expand("}${KBOX_T_SENV}}", "}v}");
	/* What a variable brings in is never expanded again. */
	setenv("KBOX_T_SENV", "${KBOX_T_SENV2}$$x$", 1);
	setenv("KBOX_T_SENV2", "no", 1);
	expect_expand("${KBOX_T_SENV}", "${KBOX_T_SENV2}$$x$");
	setenv("KBOX_T_SENV", "", 1);
	expect_expand("[${KBOX_T_SENV}]", "[]");
	unsetenv("KBOX_T_SENV");
	unsetenv("KBOX_T_SENV2");
}
END_TEST

START_TEST(expand_faults)
{
	expect_fault("${", SECENV_NAME_MAX, 100, SECENV_UNTERMINATED, 0, NULL);
	expect_fault("ab${KBOX_T_SENV", SECENV_NAME_MAX, 100, SECENV_UNTERMINATED, 2, NULL);
	expect_fault("$${${", SECENV_NAME_MAX, 100, SECENV_UNTERMINATED, 3, NULL);
	expect_fault("${}", SECENV_NAME_MAX, 100, SECENV_BAD_NAME, 0, "");
	expect_fault("x${A-B}", SECENV_NAME_MAX, 100, SECENV_BAD_NAME, 1, "A-B");
	expect_fault("${1A}", SECENV_NAME_MAX, 100, SECENV_BAD_NAME, 0, "1A");
	expect_fault("${ A}", SECENV_NAME_MAX, 100, SECENV_BAD_NAME, 0, " A");
	expect_fault("${A }", SECENV_NAME_MAX, 100, SECENV_BAD_NAME, 0, "A ");
	expect_fault("${\xc3\xa9}", SECENV_NAME_MAX, 100, SECENV_BAD_NAME, 0, "\xc3\xa9");
	expect_fault("${$}", SECENV_NAME_MAX, 100, SECENV_BAD_NAME, 0, "$");
	/* Nested: the name runs to the first '}', and is no name. */
	setenv("KBOX_T_SENV2", "B", 1);
	expect_fault("${A${KBOX_T_SENV2}}", SECENV_NAME_MAX, 100, SECENV_BAD_NAME, 0,
		     "A${KBOX_T_SENV2");
	unsetenv("KBOX_T_SENV2");
	expect_fault("a${KBOX_T_SENV}", SECENV_NAME_MAX, 100, SECENV_UNSET, 1, "KBOX_T_SENV");
	/* The first fault counts. */
	expect_fault("${KBOX_T_SENV}${", SECENV_NAME_MAX, 100, SECENV_UNSET, 0, "KBOX_T_SENV");
	expect_fault("${-}${KBOX_T_SENV}", SECENV_NAME_MAX, 100, SECENV_BAD_NAME, 0, "-");
}
END_TEST

START_TEST(expand_limits)
{
	/* Names: up to max_name are looked up, longer ones are not even when
	 * set; max_name is capped at SECENV_NAME_MAX. */
	char name[SECENV_NAME_MAX + 2], val[SECENV_NAME_MAX + 8];
	memset(name, 'N', sizeof name - 1);
	name[sizeof name - 1] = '\0';
	setenv(name, "long", 1);
	snprintf(val, sizeof val, "${%s}", name);
	expect_fault(val, SIZE_MAX, 100, SECENV_LONG_NAME, 0, name);
	unsetenv(name);
	name[SECENV_NAME_MAX] = '\0';
	setenv(name, "long", 1);
	snprintf(val, sizeof val, "${%s}", name);
	expect_expand(val, "long");
	expect_fault(val, SECENV_NAME_MAX - 1, 100, SECENV_LONG_NAME, 0, name);
	unsetenv(name);

	/* The result: max_out bytes at most, literal text counted too. */
	expect_within("", 8, 0, "");
	expect_within("abc", 8, 3, "abc");
	expect_within("$$$$", 8, 2, "$$");
	expect_fault("abcd", 8, 3, SECENV_TOO_BIG, 3, NULL);
	expect_fault("ab$$", 8, 2, SECENV_TOO_BIG, 2, NULL);

	/* Long values from secrets.env, the buffer growing many times over. */
	enum { VLEN = 4000, REFS = 10 };
	char *text = malloc(VLEN + 32), *big = malloc(REFS * 16 + 1), *want = malloc(REFS * VLEN + 2);
	ck_assert(text && big && want);
	memcpy(text, "KBOX_T_SENV=", 12);
	memset(text + 12, 'v', VLEN);
	strcpy(text + 12 + VLEN, "\n");
	write_env(text, strlen(text));
	big[0] = '\0';
	for (int i = 0; i < REFS; i++)
		strcat(big, "${KBOX_T_SENV}");
	strcat(big, "$");
	memset(want, 'v', REFS * VLEN);
	strcpy(want + REFS * VLEN, "$");
	expect_within(big, 64, REFS * VLEN + 1, want);
	expect_fault(big, 64, REFS * VLEN, SECENV_TOO_BIG, REFS * 14, NULL);
	expect_fault(big, 64, REFS * VLEN - 1, SECENV_TOO_BIG, (REFS - 1) * 14, NULL);
	free(text);
	free(big);
	free(want);
}
END_TEST

START_TEST(expand_broken_file)
{
	/* A bad secrets.env is secenv's message, not a fault in the value;
	 * it is read only once a variable is not in the environment. */
	struct secenv_result r;
	char err[ERRLEN], want[ERRLEN];
	write_env("not a line\n", 11);
	expect_expand("$$ $x", "$ $x");
	setenv("KBOX_T_SENV", "env", 1);
	expect_expand("${KBOX_T_SENV}", "env");
	unsetenv("KBOX_T_SENV");
	ck_assert_int_eq(expand("${KBOX_T_SENV}", 64, 100, &r, err), -EINVAL);
	ck_assert_uint_eq(r.fault, 0);
	ck_assert_ptr_null(r.str);
	snprintf(want, sizeof want, "%s:1:4: expected '=' after the name; write KEY=VALUE",
		 envpath);
	ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(secrets_env_path)
{
	char out[32];
	ck_assert_int_eq(secenv_path(out, sizeof out, "a/b/kbox.yaml"), 0);
	ck_assert_str_eq(out, "a/b/secrets.env");
	ck_assert_int_eq(secenv_path(out, sizeof out, "kbox.yaml"), 0);
	ck_assert_str_eq(out, "secrets.env");
	ck_assert_int_eq(secenv_path(out, sizeof out, "/x/"), 0);
	ck_assert_str_eq(out, "/x/secrets.env");
	/* Exactly full fits; a byte less is refused, never cut short. */
	ck_assert_int_eq(secenv_path(out, 15, "/x/y"), 0);
	ck_assert_str_eq(out, "/x/secrets.env");
	ck_assert_int_eq(secenv_path(out, 14, "/x/y"), -ENAMETOOLONG);
	ck_assert_str_eq(out, "");
	ck_assert_int_eq(secenv_path(out, 12, "name"), 0);
	ck_assert_int_eq(secenv_path(out, 11, "name"), -ENAMETOOLONG);
}
END_TEST

Suite *secenv_suite(void)
{
	return unit_suite_fixture("secenv", "secenv", setup, teardown, 0,
				  lines_and_quoting,
				  environment_first_file_optional,
				  errors_say_where_never_what,
				  variable_name_characters, expand_dollars,
				  expand_faults, expand_limits,
				  expand_broken_file, secrets_env_path);
}
