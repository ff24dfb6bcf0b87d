#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netstack/secenv.h"

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
	ck_assert_int_eq(senv_init(&e, file), 0);
	err[0] = '\0';
	int rc = senv_lookup(&e, var, &v, err, ERRLEN);
	snprintf(val, vlen, "%s", rc == 0 && v ? v : "(unset)");
	senv_free(&e);
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
	ck_assert_int_eq(senv_init(&e, "kbox.yaml"), 0);
	ck_assert_str_eq(e.path, "secrets.env");
	senv_free(&e);
	senv_free(&e);
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

	char *big = malloc(SENV_MAX_BYTES + 2);
	memset(big, '#', SENV_MAX_BYTES + 1);
	write_env(big, SENV_MAX_BYTES);
	ck_assert_int_eq(lookup(NULL, "KBOX_T_SENV", val, sizeof val, err), 0);
	write_env(big, SENV_MAX_BYTES + 1);
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
	ck_assert(senv_var_start('a') && senv_var_start('Z') && senv_var_start('_'));
	ck_assert(!senv_var_start('0') && !senv_var_start('-') && !senv_var_start('\xc3'));
	ck_assert(senv_var_char('0') && senv_var_char('9') && senv_var_char('_'));
	ck_assert(!senv_var_char('.') && !senv_var_char('$') && !senv_var_char('\0'));
}
END_TEST

Suite *secenv_suite(void)
{
	Suite *s = suite_create("secenv");
	TCase *tc = tcase_create("secenv");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, lines_and_quoting);
	tcase_add_test(tc, environment_first_file_optional);
	tcase_add_test(tc, errors_say_where_never_what);
	tcase_add_test(tc, variable_name_characters);
	suite_add_tcase(s, tc);
	return s;
}
