#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/sandbox/config.h"
#include "vmm/sandbox/mounts.h"
#include "tests/lib/unit_suite.h"

#define ERRLEN 512
#define ALL_KEYS                                                                  \
	"cpus, memory, kernel, initrd, command, verbose, mounts, disks, image, workdir, env, " \
	"network, ports, tls, secrets"

/* Loads text as "dir/t.yaml" into a fresh config that the caller frees. */
static int load(const char *text, struct kbox_config *c, char *err)
{
	config_init(c);
	return config_load_buf("dir/t.yaml", text, strlen(text), c, err, ERRLEN);
}

/* text must fail with -EINVAL and exactly msg, leaving nothing set. */
static void expect_err(const char *text, const char *msg)
{
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_int_eq(load(text, &c, err), -EINVAL);
	ck_assert_str_eq(err, msg);
	ck_assert_uint_eq(c.cpus, 0);
	ck_assert_uint_eq(c.memory_mib, 0);
	ck_assert_ptr_null(c.kernel);
	ck_assert_ptr_null(c.initrd);
	ck_assert_ptr_null(c.argv);
	ck_assert_int_eq(c.verbose, -1);
	ck_assert_ptr_null(c.mounts);
	ck_assert_uint_eq(c.n_mounts, 0);
	config_free(&c);
}

static void expect_argv(char **argv, const char *const *want, size_t n)
{
	ck_assert_ptr_nonnull(argv);
	for (size_t i = 0; i < n; i++)
		ck_assert_str_eq(argv[i], want[i]);
	ck_assert_ptr_null(argv[n]);
}

/* ---- valid files ------------------------------------------------------- */

START_TEST(full_block_file)
{
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_int_eq(load("# a sandbox\n"
			      "cpus: 2\n"
			      "memory: 2G   # binary units\n"
			      "kernel: build/vmlinux\n"
			      "initrd: /boot/initramfs.cpio\n"
			      "command:\n"
			      "  - python3\n"
			      "  - -c\n"
			      "  - 'print(1)'\n"
			      "verbose: true\n",
			      &c, err),
			 0);
	ck_assert_str_eq(err, "");
	ck_assert_uint_eq(c.cpus, 2);
	ck_assert_uint_eq(c.memory_mib, 2048);
	ck_assert_str_eq(c.kernel, "dir/build/vmlinux");
	ck_assert_str_eq(c.initrd, "/boot/initramfs.cpio");
	static const char *const want[] = { "python3", "-c", "print(1)" };
	expect_argv(c.argv, want, 3);
	ck_assert_int_eq(c.verbose, 1);
	config_free(&c);
	config_free(&c);
	ck_assert_ptr_null(c.kernel);
	ck_assert_int_eq(c.verbose, -1);
}
END_TEST

START_TEST(flow_style_and_unset_keys)
{
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_int_eq(load("{cpus: 64, command: [sleep, 5, \"\"]}", &c, err), 0);
	ck_assert_uint_eq(c.cpus, 64);
	static const char *const want[] = { "sleep", "5", "" };
	expect_argv(c.argv, want, 3);
	ck_assert_uint_eq(c.memory_mib, 0);
	ck_assert_ptr_null(c.kernel);
	ck_assert_ptr_null(c.initrd);
	ck_assert_int_eq(c.verbose, -1);
	config_free(&c);
}
END_TEST

START_TEST(empty_files_set_nothing)
{
	static const char *const texts[] = { "",	 "# only a comment\n", "---\n",
					     "---\n...\n", "~\n",	       "\xef\xbb\xbf" };
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		struct kbox_config c;
		char err[ERRLEN];
		ck_assert_int_eq(load(texts[i], &c, err), 0);
		ck_assert_uint_eq(c.cpus, 0);
		ck_assert_ptr_null(c.argv);
		ck_assert_int_eq(c.verbose, -1);
		config_free(&c);
	}
}
END_TEST

START_TEST(memory_forms)
{
	static const struct {
		const char *text;
		uint64_t mib;
	} t[] = {
		{ "memory: 64", 64 },	       { "memory: 65536", 65536 }, { "memory: '1024'", 1024 },
		{ "memory: 512M", 512 },       { "memory: 512mb", 512 },   { "memory: 512MiB", 512 },
		{ "memory: 2G", 2048 },	       { "memory: 2g", 2048 },	   { "memory: 2GB", 2048 },
		{ "memory: 2GiB", 2048 },      { "memory: 2 GiB", 2048 },  { "memory: 64G", 65536 },
		{ "memory: \"768 M\"", 768 },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct kbox_config c;
		char err[ERRLEN];
		ck_assert_msg(load(t[i].text, &c, err) == 0, "%s: %s", t[i].text, err);
		ck_assert_uint_eq(c.memory_mib, t[i].mib);
		config_free(&c);
	}
}
END_TEST

START_TEST(bool_forms)
{
	static const struct {
		const char *text;
		int v;
	} t[] = {
		{ "verbose: true", 1 }, { "verbose: True", 1 },	  { "verbose: yes", 1 },
		{ "verbose: on", 1 },	{ "verbose: 'true'", 1 }, { "verbose: false", 0 },
		{ "verbose: FALSE", 0 }, { "verbose: no", 0 },	  { "verbose: off", 0 },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct kbox_config c;
		char err[ERRLEN];
		ck_assert_msg(load(t[i].text, &c, err) == 0, "%s: %s", t[i].text, err);
		ck_assert_int_eq(c.verbose, t[i].v);
		config_free(&c);
	}
}
END_TEST

START_TEST(command_string_runs_through_sh)
{
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_int_eq(load("command: echo hi | wc -c; exit 7\n", &c, err), 0);
	static const char *const want[] = { "/bin/sh", "-c", "echo hi | wc -c; exit 7" };
	expect_argv(c.argv, want, 3);
	config_free(&c);
	ck_assert_int_eq(load("command: >-\n  make\n  test\n", &c, err), 0);
	static const char *const folded[] = { "/bin/sh", "-c", "make test" };
	expect_argv(c.argv, folded, 3);
	config_free(&c);
}
END_TEST

START_TEST(relative_paths_follow_the_file)
{
	static const struct {
		const char *name, *path, *want;
	} t[] = {
		{ "sandbox.yaml", "vmlinux", "vmlinux" },
		{ "proj/sandbox.yaml", "vmlinux", "proj/vmlinux" },
		{ "/etc/kbox/s.yaml", "../k/bzImage", "/etc/kbox/../k/bzImage" },
		{ "/s.yaml", "vmlinux", "/vmlinux" },
		{ "proj/sandbox.yaml", "/abs/vmlinux", "/abs/vmlinux" },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		char text[256], err[ERRLEN];
		struct kbox_config c;
		snprintf(text, sizeof text, "kernel: %s\ninitrd: %s\n", t[i].path, t[i].path);
		config_init(&c);
		ck_assert_int_eq(config_load_buf(t[i].name, text, strlen(text), &c, err, ERRLEN), 0);
		ck_assert_str_eq(c.kernel, t[i].want);
		ck_assert_str_eq(c.initrd, t[i].want);
		config_free(&c);
	}
}
END_TEST

/* Loading overlays only what the file sets, and an error changes nothing. */
START_TEST(load_overlays_and_errors_keep_config)
{
	struct kbox_config c;
	char err[ERRLEN];
	const char *a = "cpus: 2\nkernel: /a\ncommand: [a]\nverbose: on\n";
	const char *b = "kernel: /b\ncommand: b c\n";
	const char *bad = "memory: 4G\nkernel: /c\ncpus: 0\n";
	config_init(&c);
	ck_assert_int_eq(config_load_buf("a.yaml", a, strlen(a), &c, err, ERRLEN), 0);
	ck_assert_int_eq(config_load_buf("b.yaml", b, strlen(b), &c, err, ERRLEN), 0);
	ck_assert_uint_eq(c.cpus, 2);
	ck_assert_str_eq(c.kernel, "/b");
	static const char *const want[] = { "/bin/sh", "-c", "b c" };
	expect_argv(c.argv, want, 3);
	ck_assert_int_eq(c.verbose, 1);
	ck_assert_int_eq(config_load_buf("c.yaml", bad, strlen(bad), &c, err, ERRLEN), -EINVAL);
	ck_assert_str_eq(err, "c.yaml:3:7: cpus: 0 is out of range; expected an integer from 1 to 64");
	ck_assert_uint_eq(c.memory_mib, 0);
	ck_assert_str_eq(c.kernel, "/b");
	ck_assert_uint_eq(c.cpus, 2);
	config_free(&c);
}
END_TEST

/* ---- every error kind -------------------------------------------------- */

START_TEST(wrong_types)
{
	expect_err("cpus: two", "dir/t.yaml:1:7: cpus: 'two' is not an integer; "
				"expected an integer from 1 to 64");
	expect_err("cpus: 2.0", "dir/t.yaml:1:7: cpus: '2.0' is not an integer; "
				"expected an integer from 1 to 64");
	expect_err("cpus: 0x2", "dir/t.yaml:1:7: cpus: '0x2' is not an integer; "
				"expected an integer from 1 to 64");
	expect_err("cpus: 010", "dir/t.yaml:1:7: cpus: '010' is not an integer; "
				"expected an integer from 1 to 64");
	expect_err("cpus:\n  - 1\n", "dir/t.yaml:2:3: cpus: got a list; "
				     "expected an integer from 1 to 64");
	expect_err("cpus:\n", "dir/t.yaml:1:6: cpus: got an empty value; "
			      "expected an integer from 1 to 64");
	expect_err("memory: lots", "dir/t.yaml:1:9: memory: 'lots' is not a size; "
				   "expected MiB from 64 to 65536, or a size like 512M or 2G");
	expect_err("memory: 1.5G", "dir/t.yaml:1:9: memory: '1.5G' is not a size; "
				   "expected MiB from 64 to 65536, or a size like 512M or 2G");
	expect_err("memory: 2T", "dir/t.yaml:1:9: memory: '2T' is not a size; "
				 "expected MiB from 64 to 65536, or a size like 512M or 2G");
	expect_err("memory: {a: 1}", "dir/t.yaml:1:9: memory: got a mapping; "
				     "expected MiB from 64 to 65536, or a size like 512M or 2G");
	expect_err("kernel: [a]", "dir/t.yaml:1:9: kernel: got a list; "
				  "expected a path to a kernel image (vmlinux or bzImage)");
	expect_err("kernel: ~", "dir/t.yaml:1:9: kernel: got an empty value; "
				"expected a path to a kernel image (vmlinux or bzImage)");
	expect_err("initrd: ''", "dir/t.yaml:1:9: initrd: empty path; "
				 "expected a path to an initramfs (cpio) file");
	expect_err("initrd: ~/x.cpio", "dir/t.yaml:1:9: initrd: '~' is not expanded; expected an "
				       "absolute path or one relative to the config file");
	expect_err("verbose: maybe", "dir/t.yaml:1:10: verbose: 'maybe' is not a boolean; "
				     "expected true or false");
	expect_err("verbose: 1", "dir/t.yaml:1:10: verbose: '1' is not a boolean; "
				 "expected true or false");
	expect_err("command: {a: b}", "dir/t.yaml:1:10: command: got a mapping; expected a "
				      "command line string or a list of strings (program and "
				      "arguments)");
	expect_err("command: [ls, [a]]", "dir/t.yaml:1:15: command[1]: got a list; "
					 "expected a string (write \"\" for an empty argument)");
	expect_err("command: [ls, ~]", "dir/t.yaml:1:15: command[1]: got an empty value; "
				       "expected a string (write \"\" for an empty argument)");
}
END_TEST

START_TEST(out_of_range)
{
	expect_err("cpus: 0", "dir/t.yaml:1:7: cpus: 0 is out of range; "
			      "expected an integer from 1 to 64");
	expect_err("cpus: 65", "dir/t.yaml:1:7: cpus: 65 is out of range; "
			       "expected an integer from 1 to 64");
	expect_err("cpus: -1", "dir/t.yaml:1:7: cpus: -1 is out of range; "
			       "expected an integer from 1 to 64");
	expect_err("cpus: 18446744073709551617", "dir/t.yaml:1:7: cpus: 18446744073709551617 is "
						 "out of range; expected an integer from 1 to 64");
	expect_err("memory: 63", "dir/t.yaml:1:9: memory: 63 is out of range; "
				 "expected MiB from 64 to 65536, or a size like 512M or 2G");
	expect_err("memory: 65537", "dir/t.yaml:1:9: memory: 65537 is out of range; "
				    "expected MiB from 64 to 65536, or a size like 512M or 2G");
	expect_err("memory: 65G", "dir/t.yaml:1:9: memory: 65G is out of range; "
				  "expected MiB from 64 to 65536, or a size like 512M or 2G");
	expect_err("memory: 99999999999999999999999G",
		   "dir/t.yaml:1:9: memory: 99999999999999999999999G is out of range; "
		   "expected MiB from 64 to 65536, or a size like 512M or 2G");
	expect_err("memory: -2G", "dir/t.yaml:1:9: memory: -2G is out of range; "
				  "expected MiB from 64 to 65536, or a size like 512M or 2G");
}
END_TEST

START_TEST(unknown_keys)
{
	expect_err("cpu: 2", "dir/t.yaml:1:1: unknown key 'cpu'; did you mean 'cpus'?");
	expect_err("cpus: 1\nmemroy: 512\n",
		   "dir/t.yaml:2:1: unknown key 'memroy'; did you mean 'memory'?");
	expect_err("Kernel: x", "dir/t.yaml:1:1: unknown key 'Kernel'; did you mean 'kernel'?");
	expect_err("verbos: true", "dir/t.yaml:1:1: unknown key 'verbos'; did you mean 'verbose'?");
	expect_err("comand: ls", "dir/t.yaml:1:1: unknown key 'comand'; did you mean 'command'?");
	expect_err("initdr: x", "dir/t.yaml:1:1: unknown key 'initdr'; did you mean 'initrd'?");
	expect_err("colour: red", "dir/t.yaml:1:1: unknown key 'colour'; expected one of: " ALL_KEYS);
	expect_err("x: 1", "dir/t.yaml:1:1: unknown key 'x'; expected one of: " ALL_KEYS);
	expect_err("\"cp\\0us\": 1", "dir/t.yaml:1:1: unknown key 'cp\\x00us'; did you mean "
				     "'cpus'?");
}
END_TEST

START_TEST(structure_errors)
{
	expect_err("cpus: 1\ncpus: 2\n",
		   "dir/t.yaml:2:1: duplicate key 'cpus' (first at line 1); expected each key once");
	expect_err("- cpus: 1\n", "dir/t.yaml:1:1: the top level is a list; expected a mapping "
				  "of keys such as 'cpus: 2'");
	expect_err("hello\n", "dir/t.yaml:1:1: the top level is a single value; expected a "
			      "mapping of keys such as 'cpus: 2'");
	expect_err("[a]: 1\n", "dir/t.yaml:1:1: a key is a list; expected a key name such as "
			       "'cpus'");
	expect_err("cpus: 1\n---\ncpus: 2\n", "dir/t.yaml:2:1: a second YAML document starts "
					      "here; expected one document (remove the extra "
					      "'---')");
	expect_err("cpus: !!int 2\n", "dir/t.yaml:1:7: tag 'tag:yaml.org,2002:int' is not "
				      "allowed; expected an untagged value");
}
END_TEST

START_TEST(empty_commands)
{
	expect_err("command: []", "dir/t.yaml:1:10: command: empty command; expected a list "
				  "with at least the program to run");
	expect_err("command: ''", "dir/t.yaml:1:10: command: empty command; expected a command "
				  "line string or a list of strings (program and arguments)");
	expect_err("command: \" \\t \"", "dir/t.yaml:1:10: command: empty command; expected a "
					 "command line string or a list of strings (program "
					 "and arguments)");
	expect_err("command:", "dir/t.yaml:1:9: command: got an empty value; expected a command "
			       "line string or a list of strings (program and arguments)");
	expect_err("command: ['', x]", "dir/t.yaml:1:11: command[0]: empty program name; "
				       "expected the program to run");
}
END_TEST

START_TEST(syntax_errors)
{
	expect_err("cpus: 1\ncommand: [ls,\n", "dir/t.yaml:3:1: invalid YAML: did not find "
					       "expected node content (while parsing a flow node "
					       "at line 3, column 1); expected valid YAML syntax");
	expect_err("cpus: 1\nmemory: a: b\n", "dir/t.yaml:2:10: invalid YAML: mapping values "
					      "are not allowed in this context; expected valid "
					      "YAML syntax");
	expect_err("cpus: 1\n\tmemory: 2\n", "dir/t.yaml:2:1: invalid YAML: found a tab "
					     "character that violates indentation (while "
					     "scanning a plain scalar at line 1, column 7); "
					     "expected valid YAML syntax");
	expect_err("kernel: \"abc\n", "dir/t.yaml:2:1: invalid YAML: found unexpected end of "
				      "stream (while scanning a quoted scalar at line 1, column "
				      "9); expected valid YAML syntax");
}
END_TEST

/* ---- hostile input ----------------------------------------------------- */

START_TEST(anchors_and_aliases_refused)
{
	expect_err("cpus: &n 2\n", "dir/t.yaml:1:7: anchor '&n' is not allowed; expected plain "
				   "values (anchors and aliases are refused)");
	expect_err("command: *x\n", "dir/t.yaml:1:10: alias '*x' is not allowed; expected plain "
				    "values (anchors and aliases are refused)");
	/* Billion laughs: refused at the first anchor, before anything grows. */
	expect_err("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
		   "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
		   "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
		   "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
		   "dir/t.yaml:1:4: anchor '&a' is not allowed; expected plain values (anchors "
		   "and aliases are refused)");
	expect_err("<<: *base\n", "dir/t.yaml:1:5: alias '*base' is not allowed; expected plain "
				  "values (anchors and aliases are refused)");
}
END_TEST

static char *repeat(const char *head, const char *unit, size_t n, const char *tail)
{
	size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
	char *s = malloc(hl + ul * n + tl + 1);
	ck_assert_ptr_nonnull(s);
	memcpy(s, head, hl);
	for (size_t i = 0; i < n; i++)
		memcpy(s + hl + i * ul, unit, ul);
	memcpy(s + hl + ul * n, tail, tl + 1);
	return s;
}

START_TEST(deep_nesting_refused)
{
	char *flow = repeat("", "[", CONFIG_MAX_BYTES - 1, "");
	expect_err(flow, "dir/t.yaml:1:17: nesting deeper than 16 levels; expected a flatter "
			 "structure");
	free(flow);
	char *maps = repeat("a: ", "{a: ", 100000, "");
	expect_err(maps, "dir/t.yaml:1:64: nesting deeper than 16 levels; expected a flatter "
			 "structure");
	free(maps);
	/* Sixteen levels are still fine for the parser, and only then the
	 * schema objects. */
	char *ok = repeat("cpus: ", "[", 15, "]]]]]]]]]]]]]]]");
	expect_err(ok, "dir/t.yaml:1:7: cpus: got a list; expected an integer from 1 to 64");
	free(ok);
}
END_TEST

START_TEST(too_many_nodes_refused)
{
	char *wide = repeat("command: [", "a,", 70000, "]");
	expect_err(wide, "dir/t.yaml:1:131077: more than 65536 values in the file; expected a "
			 "smaller config");
	free(wide);
	/* Just under the cap: a big argv loads. */
	char *big = repeat("command: [", "a,", 60000, "]");
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_int_eq(load(big, &c, err), 0);
	ck_assert_str_eq(c.argv[59999], "a");
	ck_assert_ptr_null(c.argv[60000]);
	config_free(&c);
	free(big);
}
END_TEST

START_TEST(huge_scalars)
{
	/* A 1 MiB command line: the file limit is the bound. */
	size_t n = CONFIG_MAX_BYTES - strlen("command: \"\"\n");
	char *fits = repeat("command: \"", "x", n, "\"\n");
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_int_eq(strlen(fits), CONFIG_MAX_BYTES);
	ck_assert_int_eq(load(fits, &c, err), 0);
	ck_assert_uint_eq(strlen(c.argv[2]), n);
	config_free(&c);
	free(fits);

	char *over = repeat("command: \"", "x", n + 1, "\"\n");
	config_init(&c);
	ck_assert_int_eq(config_load_buf("dir/t.yaml", over, strlen(over), &c, err, ERRLEN),
			 -EFBIG);
	ck_assert_str_eq(err, "dir/t.yaml: file is larger than 1048576 bytes; expected a "
			      "smaller config");
	config_free(&c);
	free(over);

	/* A huge value is shortened in the message. */
	char *word = repeat("cpus: ", "9", 500000, "");
	expect_err(word, "dir/t.yaml:1:7: cpus: 9999999999999999999999999999999999999999... is "
			 "out of range; expected an integer from 1 to 64");
	free(word);
	char *key = repeat("", "k", 500000, ": 1\n");
	expect_err(key, "dir/t.yaml:1:500001: invalid YAML: mapping values are not allowed in "
			"this context; expected valid YAML syntax");
	free(key);
	char *qkey = repeat("? ", "k", 500000, "\n: 1\n");
	expect_err(qkey, "dir/t.yaml:1:3: unknown key "
			 "'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...'; expected one of: " ALL_KEYS);
	free(qkey);
	char *path = repeat("kernel: ", "p", 5000, "\n");
	expect_err(path, "dir/t.yaml:1:9: kernel: path is longer than 4095 bytes; expected a "
			 "path to a kernel image (vmlinux or bzImage)");
	free(path);
}
END_TEST

START_TEST(nul_bytes_and_bad_utf8)
{
	struct kbox_config c;
	char err[ERRLEN];
	static const char raw[] = "cpus: 2\nkernel: a\0b\n";
	config_init(&c);
	ck_assert_int_eq(config_load_buf("dir/t.yaml", raw, sizeof raw - 1, &c, err, ERRLEN),
			 -EINVAL);
	ck_assert_str_eq(err, "dir/t.yaml:2:10: invalid text: control characters are not "
			      "allowed (0x0); expected UTF-8 text without control characters");
	ck_assert_uint_eq(c.cpus, 0);
	config_free(&c);

	expect_err("kernel: \"a\\0b\"", "dir/t.yaml:1:9: kernel: contains a NUL byte; expected a "
					"path to a kernel image (vmlinux or bzImage)");
	expect_err("command: [ls, \"a\\0\"]", "dir/t.yaml:1:15: command[1]: contains a NUL "
					      "byte; expected a string (write \"\" for an empty "
					      "argument)");
	expect_err("cpus: 2\ncommand: \xc3\x28\n", "dir/t.yaml:2:11: invalid text: invalid "
						   "trailing UTF-8 octet (0x28); expected "
						   "UTF-8 text without control characters");
	expect_err("cpus: \xff\n", "dir/t.yaml:1:7: invalid text: invalid leading UTF-8 octet "
				   "(0xff); expected UTF-8 text without control characters");
	expect_err("cpus: \x1b[31m\n", "dir/t.yaml:1:7: invalid text: control characters are "
				       "not allowed (0x1b); expected UTF-8 text without control "
				       "characters");
	/* Escapes decode to bytes that must not reach the terminal raw. */
	expect_err("\"\\e[2J\\n\": 1", "dir/t.yaml:1:1: unknown key '\\x1b[2J\\x0a'; expected "
				       "one of: " ALL_KEYS);
	expect_err("\"\\u00e9t\\u00e9\": 1", "dir/t.yaml:1:1: unknown key "
					     "'\\xc3\\xa9t\\xc3\\xa9'; expected one of: " ALL_KEYS);
}
END_TEST

/* The error buffer is never overrun, and may be absent. */
START_TEST(error_buffer_edges)
{
	struct kbox_config c;
	char small[16];
	config_init(&c);
	ck_assert_int_eq(config_load_buf("dir/t.yaml", "cpus: x", 7, &c, NULL, 0), -EINVAL);
	ck_assert_int_eq(config_load_buf("dir/t.yaml", "cpus: x", 7, &c, small, 1), -EINVAL);
	ck_assert_str_eq(small, "");
	ck_assert_int_eq(config_load_buf("dir/t.yaml", "cpus: x", 7, &c, small, sizeof small),
			 -EINVAL);
	ck_assert_str_eq(small, "dir/t.yaml:1:7:");
	ck_assert_int_eq(config_load_buf("a\nb.yaml", "cpus: x", 7, &c, small, sizeof small),
			 -EINVAL);
	ck_assert_str_eq(small, "a\\x0ab.yaml:1:7");
	config_free(&c);
}
END_TEST

/* ---- files ------------------------------------------------------------- */

static char tmpdir[64];

static void make_tmpdir(void)
{
	strcpy(tmpdir, "/tmp/kbox-config-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void write_file(const char *path, const char *text, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
}

START_TEST(files_load_and_fail_clearly)
{
	char path[128], path2[128], msg[ERRLEN], err[ERRLEN];
	struct kbox_config c;
	make_tmpdir();
	config_init(&c);

	snprintf(path, sizeof path, "%s/sandbox.yaml", tmpdir);
	const char *text = "cpus: 3\nkernel: vmlinux\ncommand: [true]\n";
	write_file(path, text, strlen(text));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), 0);
	ck_assert_uint_eq(c.cpus, 3);
	snprintf(path2, sizeof path2, "%s/vmlinux", tmpdir);
	ck_assert_str_eq(c.kernel, path2);
	config_free(&c);

	const char *bad = "cpus: 3\nverbose: sometimes\n";
	write_file(path, bad, strlen(bad));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:2:10: verbose: 'sometimes' is not a boolean; expected "
				  "true or false", path);
	ck_assert_str_eq(err, msg);

	snprintf(path2, sizeof path2, "%s/missing.yaml", tmpdir);
	ck_assert_int_eq(config_load(path2, &c, err, sizeof err), -ENOENT);
	snprintf(msg, sizeof msg, "%s: cannot open: No such file or directory; expected a "
				  "readable config file", path2);
	ck_assert_str_eq(err, msg);

	ck_assert_int_eq(config_load(tmpdir, &c, err, sizeof err), -EISDIR);
	snprintf(msg, sizeof msg, "%s: is a directory; expected a regular YAML file", tmpdir);
	ck_assert_str_eq(err, msg);

	/* A FIFO must be refused, not waited on. */
	snprintf(path2, sizeof path2, "%s/fifo.yaml", tmpdir);
	ck_assert_int_eq(mkfifo(path2, 0600), 0);
	ck_assert_int_eq(config_load(path2, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s: is not a regular file; expected a regular YAML file",
		 path2);
	ck_assert_str_eq(err, msg);
	unlink(path2);

	if (geteuid() != 0) {
		ck_assert_int_eq(chmod(path, 0), 0);
		ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EACCES);
		snprintf(msg, sizeof msg, "%s: cannot open: Permission denied; expected a "
					  "readable config file", path);
		ck_assert_str_eq(err, msg);
	}
	unlink(path);

	char *huge = repeat("", "#", CONFIG_MAX_BYTES + 1, "");
	write_file(path, huge, CONFIG_MAX_BYTES + 1);
	free(huge);
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EFBIG);
	snprintf(msg, sizeof msg, "%s: file is larger than 1048576 bytes; expected a smaller "
				  "config", path);
	ck_assert_str_eq(err, msg);
	unlink(path);

	ck_assert_uint_eq(c.cpus, 0);
	config_free(&c);
	ck_assert_int_eq(rmdir(tmpdir), 0);
}
END_TEST

/* ---- mounts ------------------------------------------------------------ */

START_TEST(mounts_section)
{
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_msg(load("mounts:\n"
			   "  - source: ./\n"
			   "    target: /workspace\n"
			   "    readonly: false\n"
			   "    hidden: [\".env\", \"*.pem\", \"secrets/\", \"/cfg/key\"]\n"
			   "  - {source: /srv/data, target: /data, readonly: yes, hidden: []}\n"
			   "  - target: /x\n"
			   "    source: x\n"
			   "    hidden_extra: [\"*.pem\", \"keys/\"]\n",
			   &c, err) == 0, "%s", err);
	ck_assert_uint_eq(c.n_mounts, 3);
	const struct config_mount *m = c.mounts;
	ck_assert_str_eq(m[0].source, "dir/./");
	ck_assert_str_eq(m[0].target, "/workspace");
	ck_assert(!m[0].readonly);
	ck_assert(m[0].hidden_set);
	ck_assert_uint_eq(m[0].n_hidden, 4);
	ck_assert_str_eq(m[0].hidden[0], ".env");
	ck_assert_str_eq(m[0].hidden[1], "*.pem");
	ck_assert_str_eq(m[0].hidden[2], "secrets");
	ck_assert_str_eq(m[0].hidden[3], "/cfg/key");
	ck_assert_uint_eq(m[0].line, 2);
	ck_assert_uint_eq(m[0].col, 5);
	ck_assert_str_eq(m[1].source, "/srv/data");
	ck_assert(m[1].readonly);
	ck_assert(m[1].hidden_set);
	ck_assert_uint_eq(m[1].n_hidden, 0);
	ck_assert_uint_eq(m[1].line, 6);
	ck_assert_str_eq(m[2].source, "dir/x");
	ck_assert_str_eq(m[2].target, "/x");
	ck_assert(!m[2].readonly);
	ck_assert(!m[2].hidden_set);
	ck_assert_ptr_null(m[2].hidden);
	ck_assert_uint_eq(m[2].n_hidden_extra, 2);
	ck_assert_str_eq(m[2].hidden_extra[0], "*.pem");
	ck_assert_str_eq(m[2].hidden_extra[1], "keys");
	ck_assert_ptr_null(m[0].hidden_extra);
	config_free(&c);
	ck_assert_ptr_null(c.mounts);

	/* An empty list is set (and replaces an earlier file's mounts). */
	ck_assert_int_eq(load("mounts: [{source: /a, target: /a}]", &c, err), 0);
	const char *none = "mounts: []";
	ck_assert_int_eq(config_load_buf("b.yaml", none, strlen(none), &c, err, ERRLEN), 0);
	ck_assert_ptr_nonnull(c.mounts);
	ck_assert_uint_eq(c.n_mounts, 0);
	config_free(&c);

	/* The most mounts and patterns allowed. */
	char text[8192];
	size_t o = (size_t)snprintf(text, sizeof text, "mounts:\n");
	for (unsigned i = 0; i < MOUNTS_MAX; i++)
		o += (size_t)snprintf(text + o, sizeof text - o,
				      "  - {source: /s, target: /t%u}\n", i);
	ck_assert_int_eq(load(text, &c, err), 0);
	ck_assert_uint_eq(c.n_mounts, MOUNTS_MAX);
	config_free(&c);
	o = (size_t)snprintf(text, sizeof text, "mounts:\n  - source: /s\n    target: /t\n"
						"    hidden:\n");
	for (unsigned i = 0; i < CONFIG_HIDDEN_MAX; i++)
		o += (size_t)snprintf(text + o, sizeof text - o, "      - p%u\n", i);
	ck_assert_int_eq(load(text, &c, err), 0);
	ck_assert_uint_eq(c.mounts[0].n_hidden, CONFIG_HIDDEN_MAX);
	ck_assert_str_eq(c.mounts[0].hidden[CONFIG_HIDDEN_MAX - 1], "p63");
	config_free(&c);
}
END_TEST

START_TEST(mounts_errors)
{
	expect_err("mounts: /w", "dir/t.yaml:1:9: mounts: got '/w'; expected a list of "
				 "mappings with source and target");
	expect_err("mounts:\n", "dir/t.yaml:1:8: mounts: got an empty value; expected a list "
				"of mappings with source and target");
	expect_err("mounts: {source: a}", "dir/t.yaml:1:9: mounts: got a mapping; expected a "
					  "list of mappings with source and target");
	expect_err("mounts:\n  - ./:/w\n", "dir/t.yaml:2:5: mounts[0]: got './:/w'; expected "
					   "a mapping with source and target");
	expect_err("mounts:\n  - [a]\n", "dir/t.yaml:2:5: mounts[0]: got a list; expected a "
					 "mapping with source and target");
	/* Missing keys point at the entry. */
	expect_err("mounts:\n  - target: /w\n", "dir/t.yaml:2:5: mounts[0]: no source; expected "
						"the host directory to share (source: ./)");
	expect_err("mounts:\n  - {source: a, target: /a}\n  - source: ./\n    readonly: true\n",
		   "dir/t.yaml:3:5: mounts[1]: no target; expected the guest path (target: "
		   "/workspace)");
	/* Unknown and repeated keys. */
	expect_err("mounts:\n  - source: a\n    targte: /w\n",
		   "dir/t.yaml:3:5: mounts[0]: unknown key 'targte'; expected source, target, "
		   "readonly, hidden or hidden_extra");
	expect_err("mounts:\n  - source: a\n    source: b\n",
		   "dir/t.yaml:3:5: mounts[0]: duplicate key 'source' (first at line 2); "
		   "expected each key once");
	expect_err("mounts:\n  - {[a]: b}\n", "dir/t.yaml:2:6: mounts[0]: a key is a list; "
					      "expected source, target, readonly, hidden or "
					      "hidden_extra");
	/* Wrong types. */
	expect_err("mounts:\n  - {source: [a], target: /w}\n",
		   "dir/t.yaml:2:14: mounts[0].source: got a list; expected the host directory "
		   "to share");
	expect_err("mounts:\n  - {source: '', target: /w}\n",
		   "dir/t.yaml:2:14: mounts[0].source: empty path; expected the host directory "
		   "to share");
	expect_err("mounts:\n  - {source: ~/p, target: /w}\n",
		   "dir/t.yaml:2:14: mounts[0].source: '~' is not expanded; expected an absolute "
		   "path or one relative to the config file");
	expect_err("mounts:\n  - {source: a, target: {x: 1}}\n",
		   "dir/t.yaml:2:25: mounts[0].target: got a mapping; expected an absolute guest "
		   "path such as /workspace");
	expect_err("mounts:\n  - {source: a, target: \"\"}\n",
		   "dir/t.yaml:2:25: mounts[0].target: empty path; expected an absolute guest "
		   "path such as /workspace");
	expect_err("mounts:\n  - {source: a, target: /w, readonly: ro}\n",
		   "dir/t.yaml:2:39: mounts[0].readonly: 'ro' is not a boolean; expected true "
		   "or false");
	expect_err("mounts:\n  - {source: a, target: /w, hidden: .env}\n",
		   "dir/t.yaml:2:37: mounts[0].hidden: got '.env'; expected a list of patterns "
		   "such as [\".env\", \"*.pem\"] ([] hides nothing)");
	expect_err("mounts:\n  - {source: a, target: /w, hidden_extra: .env}\n",
		   "dir/t.yaml:2:43: mounts[0].hidden_extra: got '.env'; expected a list of "
		   "patterns such as [\".env\", \"*.pem\"] ([] hides nothing)");
	expect_err("mounts:\n  - {source: a, target: /w, hidden_extra: [x, //]}\n",
		   "dir/t.yaml:2:47: mounts[0].hidden_extra[1]: '/' alone would hide the whole "
		   "mount; expected a glob pattern such as \".env\" or \"*.pem\"");
	expect_err("mounts:\n  - {source: a, target: /w, hidden: [a, [b]]}\n",
		   "dir/t.yaml:2:41: mounts[0].hidden[1]: got a list; expected a glob pattern "
		   "such as \".env\" or \"*.pem\"");
	expect_err("mounts:\n  - {source: a, target: /w, hidden: [a, ~]}\n",
		   "dir/t.yaml:2:41: mounts[0].hidden[1]: got an empty value; expected a glob "
		   "pattern such as \".env\" or \"*.pem\"");
}
END_TEST

START_TEST(mounts_limits)
{
	/* Bad patterns. */
	expect_err("mounts:\n  - source: a\n    target: /w\n    hidden: ['']\n",
		   "dir/t.yaml:4:14: mounts[0].hidden[0]: empty pattern; expected a glob "
		   "pattern such as \".env\" or \"*.pem\"");
	expect_err("mounts:\n  - source: a\n    target: /w\n    hidden: [x, //]\n",
		   "dir/t.yaml:4:17: mounts[0].hidden[1]: '/' alone would hide the whole mount; "
		   "expected a glob pattern such as \".env\" or \"*.pem\"");
	char text[8192], msg[ERRLEN];
	char pat[CONFIG_HIDDEN_LEN_MAX + 2];
	memset(pat, 'p', sizeof pat - 1);
	pat[sizeof pat - 1] = '\0';
	snprintf(text, sizeof text, "mounts:\n  - source: a\n    target: /w\n    hidden: [%s]\n",
		 pat);
	expect_err(text, "dir/t.yaml:4:14: mounts[0].hidden[0]: pattern is longer than 255 "
			 "bytes; expected a glob pattern such as \".env\" or \"*.pem\"");
	/* 255 bytes plus a trailing '/' is fine. */
	pat[sizeof pat - 2] = '/';
	snprintf(text, sizeof text, "mounts:\n  - source: a\n    target: /w\n    hidden: [%s]\n",
		 pat);
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_msg(load(text, &c, err) == 0, "%s", err);
	ck_assert_uint_eq(strlen(c.mounts[0].hidden[0]), CONFIG_HIDDEN_LEN_MAX);
	config_free(&c);
	/* Too many patterns: the first one over is named. */
	size_t o = (size_t)snprintf(text, sizeof text, "mounts:\n  - source: /s\n    target: "
						       "/t\n    hidden:\n");
	for (unsigned i = 0; i <= CONFIG_HIDDEN_MAX; i++)
		o += (size_t)snprintf(text + o, sizeof text - o, "      - p%u\n", i);
	snprintf(msg, sizeof msg, "dir/t.yaml:%u:9: mounts[0].hidden: more than %u patterns; "
				  "expected at most %u", 5 + CONFIG_HIDDEN_MAX, CONFIG_HIDDEN_MAX,
		 CONFIG_HIDDEN_MAX);
	expect_err(text, msg);
	/* Too many mounts: the first one over is named. */
	o = (size_t)snprintf(text, sizeof text, "mounts:\n");
	for (unsigned i = 0; i <= MOUNTS_MAX; i++)
		o += (size_t)snprintf(text + o, sizeof text - o,
				      "  - {source: /s, target: /t%u}\n", i);
	snprintf(msg, sizeof msg, "dir/t.yaml:%u:5: mounts: more than %d mounts; expected at "
				  "most %d", 2 + MOUNTS_MAX, MOUNTS_MAX, MOUNTS_MAX);
	expect_err(text, msg);
	/* A NUL inside a pattern. */
	expect_err("mounts: [{source: a, target: /w, hidden: [\"a\\0b\"]}]",
		   "dir/t.yaml:1:43: mounts[0].hidden[0]: contains a NUL byte; expected a glob "
		   "pattern such as \".env\" or \"*.pem\"");
}
END_TEST

/* The documented example must stay loadable (run from the repository root,
 * as `make unit` does). */
/* ---- image, workdir, env, network, ports, tls, secrets ---------------- */

START_TEST(later_sections_load)
{
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_msg(load("image: ./rootfs\n"
			   "workdir: /workspace/src\n"
			   "env:\n"
			   "  PORT: 8080\n"
			   "  EMPTY: \"\"\n"
			   "network:\n"
			   "  policy: allowlist\n"
			   "  allow: [example.com, \"*.github.com:443\", \"10.0.2.2:8080\"]\n"
			   "  deny: [10.0.0.0/8, evil.example]\n"
			   "  hosts: {db.local: 10.0.2.5, v6.local: \"fd00::5\"}\n"
			   "  audit_log: logs/net.jsonl\n"
			   "ports: [8080, \"3000:80\", \"127.0.0.1:2222:22\", \"[::1]:5432:5432\", \"0:9\"]\n"
			   "tls:\n"
			   "  intercept: secrets\n"
			   "  bypass: [\"*.internal.example\", pinned.example]\n"
			   "  extra_ca: /etc/ssl/corp.pem\n"
			   "secrets: secrets.yaml\n",
			   &c, err) == 0, "%s", err);
	ck_assert_str_eq(c.image, "dir/./rootfs");
	ck_assert_str_eq(c.workdir, "/workspace/src");
	ck_assert_uint_eq(c.n_env, 2);
	ck_assert_str_eq(c.env[0], "PORT=8080");
	ck_assert_str_eq(c.env[1], "EMPTY=");
	ck_assert_str_eq(c.network_policy, "allowlist");
	ck_assert_uint_eq(c.n_allow, 3);
	ck_assert_str_eq(c.allow[1].s, "*.github.com:443");
	ck_assert_uint_eq(c.allow[1].line, 8);
	ck_assert_uint_eq(c.allow[1].col, 24);
	ck_assert_uint_eq(c.n_deny, 2);
	ck_assert_str_eq(c.deny[0].s, "10.0.0.0/8");
	ck_assert_uint_eq(c.n_hosts, 2);
	ck_assert_str_eq(c.hosts[0].s, "db.local:10.0.2.5");
	ck_assert_str_eq(c.hosts[1].s, "v6.local:fd00::5");
	ck_assert_str_eq(c.audit_log, "dir/logs/net.jsonl");
	ck_assert_uint_eq(c.n_ports, 5);
	ck_assert_str_eq(c.ports[4].s, "0:9");
	ck_assert_str_eq(c.ports[0].s, "8080:8080");
	ck_assert_str_eq(c.ports[1].s, "3000:80");
	ck_assert_str_eq(c.ports[2].s, "127.0.0.1:2222:22");
	ck_assert_str_eq(c.ports[3].s, "[::1]:5432:5432");
	ck_assert_str_eq(c.tls_intercept, "secrets");
	ck_assert_uint_eq(c.n_tls_bypass, 2);
	ck_assert_str_eq(c.tls_bypass[0].s, "*.internal.example");
	ck_assert_str_eq(c.tls_extra_ca, "/etc/ssl/corp.pem");
	ck_assert_str_eq(c.secrets, "dir/secrets.yaml");
	config_free(&c);

	/* A list env, and an image name rather than a directory. */
	ck_assert_int_eq(load("env: [\"A=1\", \"B==x\", \"C=\"]\nimage: debian-dev\n", &c, err),
			 0);
	ck_assert_uint_eq(c.n_env, 3);
	ck_assert_str_eq(c.env[1], "B==x");
	ck_assert_str_eq(c.env[2], "C=");
	ck_assert_str_eq(c.image, "debian-dev");
	config_free(&c);
	ck_assert_int_eq(load("image: .rootfs\n", &c, err), 0);
	ck_assert_str_eq(c.image, "dir/.rootfs");
	config_free(&c);
}
END_TEST

START_TEST(later_sections_errors)
{
	expect_err("image: \"a b\"", "dir/t.yaml:1:8: image: 'a b' is not an image name; "
				     "expected letters, digits and . _ - : @ +, or a directory "
				     "written with a '/' (./a b)");
	expect_err("workdir: src", "dir/t.yaml:1:10: workdir: 'src' is not absolute; expected "
				   "an absolute guest path such as /workspace");
	expect_err("workdir: /a/../b", "dir/t.yaml:1:10: workdir: '/a/../b' has a '.' or '..' "
				       "component; expected an absolute guest path such as "
				       "/workspace");
	expect_err("env: x", "dir/t.yaml:1:6: env: got 'x'; expected a mapping NAME: VALUE or a "
			     "list of \"NAME=VALUE\"");
	expect_err("env:\n  1A: x\n", "dir/t.yaml:2:3: env: '1A' is not a variable name; "
				      "expected letters, digits and '_', not starting with a "
				      "digit");
	expect_err("env: [\"A-B=1\"]", "dir/t.yaml:1:7: env: 'A-B' is not a variable name; "
				       "expected letters, digits and '_', not starting with a "
				       "digit");
	expect_err("env: [A]", "dir/t.yaml:1:7: env[0]: 'A' has no '='; expected \"NAME=VALUE\"");
	expect_err("env:\n  A: 1\n  A: 2\n", "dir/t.yaml:3:3: env: A is set twice; expected each "
					   "name once");
	expect_err("env:\n  A:\n", "dir/t.yaml:2:5: env.A: got an empty value; expected a value "
				   "(write \"\" for an empty one)");
	expect_err("network: {policy: open}", "dir/t.yaml:1:19: network.policy: 'open' is not "
					      "valid; expected none, public or allowlist");
	expect_err("network:\n  alow: []\n", "dir/t.yaml:2:3: network: unknown key 'alow'; did "
					   "you mean 'allow'?");
	expect_err("network:\n  allow: example.com\n",
		   "dir/t.yaml:2:10: network.allow: got 'example.com'; expected a list of rules "
		   "(example.com, *.github.com:443, 203.0.113.0/24)");
	/* Bad CIDR, checked by the policy's own parser. */
	expect_err("network:\n  allow:\n    - 10.0.0.0/33\n",
		   "dir/t.yaml:3:7: network.allow[0]: bad prefix length \"/33\" for 10.0.0.0 (0 "
		   "to 32); expected a rule such as example.com, *.github.com:443 or "
		   "203.0.113.0/24");
	expect_err("network:\n  deny: [\"1.2.3.4:99999\"]\n",
		   "dir/t.yaml:2:10: network.deny[0]: \"deny:1.2.3.4:99999\": bad port \"99999\" "
		   "(1 to 65535); expected a rule such as example.com, *.github.com:443 or "
		   "203.0.113.0/24");
	expect_err("network:\n  hosts: {db: 10.0.0.300}\n",
		   "dir/t.yaml:2:15: network.hosts.db: '10.0.0.300' is not an IP address; expected "
		   "an IPv4 address such as 10.0.2.5 or an IPv6 one");
	expect_err("network:\n  hosts: {\"a b\": 10.0.0.3}\n",
		   "dir/t.yaml:2:11: network.hosts: 'a b' is not a host name; expected a name such "
		   "as db.local");
	expect_err("ports: [0]", "dir/t.yaml:1:9: ports[0]: 0 is not a port number; expected "
				 "\"HOSTPORT:GUESTPORT\" or \"127.0.0.1:HOSTPORT:GUESTPORT\" with "
				 "ports from 1 to 65535 (HOSTPORT 0: any free port)");
	expect_err("ports: [\"80:65536\"]",
		   "dir/t.yaml:1:9: ports[0]: '80:65536': bad port number; expected "
		   "\"HOSTPORT:GUESTPORT\" or \"127.0.0.1:HOSTPORT:GUESTPORT\" with ports from 1 "
		   "to 65535 (HOSTPORT 0: any free port)");
	expect_err("ports: [\"0.0.0.0:80:80\"]",
		   "dir/t.yaml:1:9: ports[0]: '0.0.0.0:80:80': 0.0.0.0 is not a loopback address; "
		   "expected 127.0.0.1 or [::1] (ports are only published on the host's "
		   "loopback)");
	expect_err("ports: [\"::1:80:80\"]", "dir/t.yaml:1:9: ports[0]: '::1:80:80': write an "
					     "IPv6 address in brackets ([::1]:80:80)");
	expect_err("tls: {intercept: none}", "dir/t.yaml:1:18: tls.intercept: 'none' is not "
					     "valid; expected all or secrets");
	expect_err("tls: {bypas: []}", "dir/t.yaml:1:7: tls: unknown key 'bypas'; did you mean "
				       "'bypass'?");
	expect_err("tls: {bypass: [\"a/b\"]}", "dir/t.yaml:1:16: tls.bypass[0]: 'a/b' is not a "
					   "host name; expected a name such as example.com or "
					   "*.example.com");
	expect_err("tls: [all]", "dir/t.yaml:1:6: tls: got a list; expected a mapping with "
				 "intercept, bypass or extra_ca");
	expect_err("secrets: \"\"", "dir/t.yaml:1:10: secrets: empty path; expected a path to a "
				    "secrets.yaml file");
	expect_err("netwrok: {}", "dir/t.yaml:1:1: unknown key 'netwrok'; did you mean "
				  "'network'?");
}
END_TEST

/* network.dns: a list of servers, or {servers, rate}. */
START_TEST(network_dns)
{
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_msg(load("network:\n  dns: [10.0.0.53, \"[fd00::53]:5353\", \"127.0.0.1:5353\"]\n",
			   &c, err) == 0, "%s", err);
	ck_assert_uint_eq(c.n_dns, 3);
	ck_assert_str_eq(c.dns[0].s, "10.0.0.53");
	ck_assert_str_eq(c.dns[1].s, "[fd00::53]:5353");
	ck_assert_uint_eq(c.dns[1].line, 2);
	ck_assert_uint_eq(c.dns[1].col, 20);
	ck_assert_uint_eq(c.dns_rate, 0);
	config_free(&c);
	ck_assert_msg(load("network:\n  dns:\n    servers:\n      - fd00::53\n    rate: 100\n", &c,
			   err) == 0, "%s", err);
	ck_assert_uint_eq(c.n_dns, 1);
	ck_assert_str_eq(c.dns[0].s, "fd00::53");
	ck_assert_uint_eq(c.dns[0].line, 4);
	ck_assert_uint_eq(c.dns_rate, 100);
	config_free(&c);
	/* The rate alone keeps the host's resolver. */
	ck_assert_msg(load("network: {dns: {rate: 5}}\n", &c, err) == 0, "%s", err);
	ck_assert_ptr_null(c.dns);
	ck_assert_uint_eq(c.dns_rate, 5);
	config_free(&c);

	expect_err("network:\n  dns: 10.0.0.53\n",
		   "dir/t.yaml:2:8: network.dns: got '10.0.0.53'; expected a list of name server "
		   "addresses (10.0.0.53, 10.0.0.53:5353, \"[fd00::53]:5353\"), or a mapping with "
		   "servers and rate");
	expect_err("network:\n  dns: []\n",
		   "dir/t.yaml:2:8: network.dns: an empty list; expected at least one of name server "
		   "addresses (10.0.0.53, 10.0.0.53:5353, \"[fd00::53]:5353\") (leave it out to use "
		   "the host's resolver)");
	expect_err("network:\n  dns: [dns.example]\n",
		   "dir/t.yaml:2:9: network.dns[0]: 'dns.example' is not an IP address (a name "
		   "server is given by address, not by name); expected ADDR or ADDR:PORT (IPv6: "
		   "ADDR or [ADDR]:PORT), PORT from 1 to 65535");
	expect_err("network:\n  dns: [\"10.0.0.53:70000\"]\n",
		   "dir/t.yaml:2:9: network.dns[0]: '10.0.0.53:70000': port 70000 is out of range; "
		   "expected ADDR or ADDR:PORT (IPv6: ADDR or [ADDR]:PORT), PORT from 1 to 65535");
	expect_err("network:\n  dns: [\"10.0.0.53:x\"]\n",
		   "dir/t.yaml:2:9: network.dns[0]: '10.0.0.53:x': bad port; expected ADDR or "
		   "ADDR:PORT (IPv6: ADDR or [ADDR]:PORT), PORT from 1 to 65535");
	expect_err("network:\n  dns: [0.0.0.0]\n",
		   "dir/t.yaml:2:9: network.dns[0]: '0.0.0.0': not a unicast address; expected the "
		   "address of a name server");
	expect_err("network:\n  dns: [1.1.1.1, 1.0.0.1, 8.8.8.8, 8.8.4.4]\n",
		   "dir/t.yaml:2:36: network.dns: more than 3 entries; expected at most 3");
	expect_err("network:\n  dns: [[1.1.1.1]]\n",
		   "dir/t.yaml:2:9: network.dns[0]: got a list; expected name server addresses "
		   "(10.0.0.53, 10.0.0.53:5353, \"[fd00::53]:5353\")");
	expect_err("network:\n  dns: {servers: 1.1.1.1}\n",
		   "dir/t.yaml:2:18: network.dns.servers: got '1.1.1.1'; expected a list of name "
		   "server addresses (10.0.0.53, 10.0.0.53:5353, \"[fd00::53]:5353\")");
	expect_err("network:\n  dns: {server: [1.1.1.1]}\n",
		   "dir/t.yaml:2:9: network.dns: unknown key 'server'; did you mean 'servers'?");
	expect_err("network:\n  dns: {rate: 0}\n",
		   "dir/t.yaml:2:15: network.dns.rate: 0 is out of range; expected an integer "
		   "from 1 to 10000");
	expect_err("network:\n  dns: {rate: fast}\n",
		   "dir/t.yaml:2:15: network.dns.rate: 'fast' is not an integer; expected an "
		   "integer from 1 to 10000");
	expect_err("network:\n  dns: {rate: 5, rate: 6}\n",
		   "dir/t.yaml:2:18: network.dns: duplicate key 'rate' (first at line 2); "
		   "expected each key once");
}
END_TEST

/* ---- ${VAR} ------------------------------------------------------------ */

START_TEST(variables_expand)
{
	char path[128], senv[128], err[ERRLEN], msg[ERRLEN];
	struct kbox_config c;
	make_tmpdir();
	config_init(&c);
	snprintf(path, sizeof path, "%s/kbox.yaml", tmpdir);
	snprintf(senv, sizeof senv, "%s/secrets.env", tmpdir);
	const char *vars = "# the project's secrets\n"
			   "export API_KEY=sk-123\n"
			   "QUOTED=\"a # b\"  # a comment\n"
			   "SINGLE='x\"y'\n"
			   "HASH=a#b # c\n"
			   "KBOX_T_HOST=from-file\n"
			   "EMPTY=\r\n";
	write_file(senv, vars, strlen(vars));
	ck_assert_int_eq(setenv("KBOX_T_HOST", "from-host", 1), 0);
	const char *text = "env:\n"
			   "  KEY: ${API_KEY}\n"
			   "  Q: \"${QUOTED}|${SINGLE}|${HASH}|[${EMPTY}]\"\n"
			   "  H: ${KBOX_T_HOST}\n"
			   "  LIT: \"$$HOME $HOME $ $${X}\"\n"
			   "workdir: /w/${KBOX_T_HOST}\n";
	write_file(path, text, strlen(text));
	ck_assert_msg(config_load(path, &c, err, sizeof err) == 0, "%s", err);
	ck_assert_str_eq(c.env[0], "KEY=sk-123");
	ck_assert_str_eq(c.env[1], "Q=a # b|x\"y|a#b|[]");
	ck_assert_str_eq(c.env[2], "H=from-host"); /* the host wins */
	ck_assert_str_eq(c.env[3], "LIT=$HOME $HOME $ ${X}");
	ck_assert_str_eq(c.workdir, "/w/from-host");
	config_free(&c);

	/* Missing everywhere: the message says where to put it. */
	text = "cpus: 1\nenv:\n  A: \"x${KBOX_T_NOPE}\"\n";
	write_file(path, text, strlen(text));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:3:6: ${KBOX_T_NOPE} is not set; export KBOX_T_NOPE or "
				  "add KBOX_T_NOPE=... to %s", path, senv);
	ck_assert_str_eq(err, msg);
	ck_assert_uint_eq(c.cpus, 0);

	text = "env:\n  A: \"${A-B}\"\n";
	write_file(path, text, strlen(text));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:2:6: '${A-B}' is not a variable name; expected ${NAME} "
				  "with letters, digits and '_' (write $$ for a literal '$')",
		 path);
	ck_assert_str_eq(err, msg);
	/* Names up to 128 bytes are looked up; a longer one is not set, even
	 * in the environment. */
	char name[130], longtext[200];
	memset(name, 'N', 129);
	name[129] = '\0';
	setenv(name, "long-value", 1);
	snprintf(longtext, sizeof longtext, "env:\n  A: \"${%s}\"\n", name);
	write_file(path, longtext, strlen(longtext));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "} is not set; export NNN"));
	unsetenv(name);
	name[128] = '\0';
	setenv(name, "long-value", 1);
	snprintf(longtext, sizeof longtext, "env:\n  A: \"${%s}\"\n", name);
	write_file(path, longtext, strlen(longtext));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), 0);
	ck_assert_str_eq(c.env[0], "A=long-value");
	config_free(&c);
	unsetenv(name);
	text = "env:\n  A: \"${A\"\n";
	write_file(path, text, strlen(text));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:2:6: unterminated '${'; expected ${NAME} (write $$ for a "
				  "literal '$')", path);
	ck_assert_str_eq(err, msg);

	/* Messages quote what was written, never what a variable held. */
	vars = "PORT=99999\nIP=300.1.1.1\n";
	write_file(senv, vars, strlen(vars));
	text = "ports: [\"${PORT}\"]\nnetwork:\n  hosts: {db: \"${IP}\"}\n";
	write_file(path, text, strlen(text));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:1:9: ports[0]: what '${PORT}' expands to is not valid (a "
				  "value from a variable is not shown); expected "
				  "\"[IP:]HOSTPORT:GUESTPORT\" entries", path);
	ck_assert_str_eq(err, msg);
	text = "network:\n  hosts: {db: \"${IP}\"}\n";
	write_file(path, text, strlen(text));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:2:15: network.hosts.db: '${IP}' is not an IP address; "
				  "expected an IPv4 address such as 10.0.2.5 or an IPv6 one", path);
	ck_assert_str_eq(err, msg);

	/* A broken secrets.env is reported with its own line. */
	vars = "GOOD=1\nnot a line\n";
	write_file(senv, vars, strlen(vars));
	text = "env:\n  A: ${GOOD}\n";
	write_file(path, text, strlen(text));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:2:4: expected '=' after the name; write KEY=VALUE", senv);
	ck_assert_str_eq(err, msg);
	vars = "A=\"open\n";
	write_file(senv, vars, strlen(vars));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:1:3: the quoted value does not end on this line; expected "
				  "a closing \"", senv);
	ck_assert_str_eq(err, msg);
	vars = "A = 1\n";
	write_file(senv, vars, strlen(vars));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:1:2: expected '=' after the name; write KEY=VALUE", senv);
	ck_assert_str_eq(err, msg);
	vars = "\n=x\n";
	write_file(senv, vars, strlen(vars));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:2:1: expected a line KEY=VALUE, a comment (#) or nothing",
		 senv);
	ck_assert_str_eq(err, msg);
	/* Values are never shown, only where the problem is. */
	vars = "GOOD=sec\x01ret\n";
	write_file(senv, vars, strlen(vars));
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:1:9: the value of GOOD contains a control character; "
				  "expected printable text", senv);
	ck_assert_str_eq(err, msg);
	/* Unreadable: a directory where the file should be. */
	unlink(senv);
	ck_assert_int_eq(mkdir(senv, 0700), 0);
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EISDIR);
	snprintf(msg, sizeof msg, "%s: cannot read: Is a directory; expected a readable file "
				  "of KEY=VALUE lines", senv);
	ck_assert_str_eq(err, msg);
	rmdir(senv);
	/* Without a secrets.env only the host environment counts. */
	ck_assert_int_eq(config_load(path, &c, err, sizeof err), -EINVAL);
	snprintf(msg, sizeof msg, "%s:2:6: ${GOOD} is not set; export GOOD or add GOOD=... to "
				  "%s", path, senv);
	ck_assert_str_eq(err, msg);
	unlink(path);
	rmdir(tmpdir);
	unsetenv("KBOX_T_HOST");
}
END_TEST

/* ---- hiding the sandbox's own files ------------------------------------ */

static bool has_pattern(const struct mount *m, const char *pat)
{
	for (size_t i = 0; i < m->hidden.n; i++)
		if (strcmp(m->hidden.list[i], pat) == 0)
			return true;
	return false;
}

START_TEST(protect_mounts_hides_config_files)
{
	char proj[128], sub[160], other[160], conf[192], err[ERRLEN];
	struct kbox_config c;
	struct mounts ms = { 0 };
	make_tmpdir();
	snprintf(proj, sizeof proj, "%s/proj", tmpdir);
	snprintf(sub, sizeof sub, "%s/proj/cfg", tmpdir);
	snprintf(other, sizeof other, "%s/other", tmpdir);
	ck_assert_int_eq(mkdir(proj, 0700), 0);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	ck_assert_int_eq(mkdir(other, 0700), 0);
	snprintf(conf, sizeof conf, "%s/kbox.yaml", proj);
	const char *text = "secrets: cfg/keys[1].yaml\nnetwork:\n  audit_log: cfg/net.log\n";
	write_file(conf, text, strlen(text));
	config_init(&c);
	ck_assert_msg(config_load(conf, &c, err, sizeof err) == 0, "%s", err);

	/* hidden: [] on the project, a -v of its parent with the default
	 * list, the cfg folder itself, and an unrelated folder. */
	const struct mount_spec none = { .host = proj, .guest = "/workspace", .hidden.set = true };
	const struct mount_spec parent = { .host = tmpdir, .guest = "/all" };
	const struct mount_spec cfgdir = { .host = sub, .guest = "/cfg" };
	const struct mount_spec unrelated = { .host = other, .guest = "/other" };
	ck_assert_int_eq(mounts_add(&ms, &none, err, sizeof err), 0);
	ck_assert_int_eq(mounts_add(&ms, &parent, err, sizeof err), 0);
	ck_assert_int_eq(mounts_add(&ms, &cfgdir, err, sizeof err), 0);
	ck_assert_int_eq(mounts_add(&ms, &unrelated, err, sizeof err), 0);
	ck_assert_int_eq(config_protect_mounts(&c, conf, NULL, 0, &ms, err, sizeof err), 0);

	ck_assert(ms.m[0].hidden.set);
	ck_assert_uint_eq(ms.m[0].hidden.n, 4);
	ck_assert(has_pattern(&ms.m[0], "kbox.yaml"));
	ck_assert(has_pattern(&ms.m[0], "secrets.env")); /* absent, still covered */
	ck_assert(has_pattern(&ms.m[0], "keys\\[1].yaml"));
	ck_assert(has_pattern(&ms.m[0], "net.log"));
	/* The parent keeps the default list and gains the files' names. */
	ck_assert(ms.m[1].hidden.set);
	size_t ndef = 0;
	while (FS_PASSTHROUGH_DEFAULT_HIDDEN[ndef])
		ndef++;
	ck_assert(has_pattern(&ms.m[1], FS_PASSTHROUGH_DEFAULT_HIDDEN[0]));
	ck_assert(has_pattern(&ms.m[1], "keys\\[1].yaml"));
	ck_assert_uint_eq(ms.m[1].hidden.n, ndef + 4);
	/* Only what lies below a mount's root counts: the secrets file's
	 * own secrets.env is in cfg, the config's is not. */
	ck_assert_uint_eq(ms.m[2].hidden.n, ndef + 3);
	ck_assert(has_pattern(&ms.m[2], "net.log"));
	ck_assert(has_pattern(&ms.m[2], "secrets.env"));
	ck_assert(!ms.m[3].hidden.set);
	ck_assert_uint_eq(c.n_protect, 3);

	mounts_free(&ms);
	config_free(&c);
	ck_assert_ptr_null(c.protect);
	unlink(conf);
	rmdir(sub);
	rmdir(proj);
	rmdir(other);
	rmdir(tmpdir);
}
END_TEST

START_TEST(literal_patterns)
{
	char *p = config_literal_pattern("a*b?c[d]\\e.yaml");
	ck_assert_str_eq(p, "a\\*b\\?c\\[d]\\\\e.yaml");
	free(p);
}
END_TEST

/* Every example file loads, so the documented set stays valid.  secrets.yaml
 * is the secrets file's own format, not a sandbox config. */
START_TEST(every_example_loads)
{
	DIR *d = opendir("examples");
	struct dirent *e;
	unsigned n = 0;
	ck_assert_ptr_nonnull(d);
	/* kbox.yaml takes the user's git identity from the environment. */
	ck_assert_int_eq(setenv("GIT_AUTHOR_NAME", "A. Developer", 0), 0);
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len < 5 || strcmp(e->d_name + len - 5, ".yaml") != 0 ||
		    strcmp(e->d_name, "secrets.yaml") == 0)
			continue;
		char path[300], err[ERRLEN];
		struct kbox_config c;
		snprintf(path, sizeof path, "examples/%s", e->d_name);
		config_init(&c);
		ck_assert_msg(config_load(path, &c, err, sizeof err) == 0, "%s", err);
		config_free(&c);
		n++;
	}
	closedir(d);
	ck_assert_uint_ge(n, 2);
}
END_TEST

START_TEST(example_file_loads)
{
	struct kbox_config c;
	char err[ERRLEN];
	config_init(&c);
	ck_assert_msg(config_load("examples/sandbox.yaml", &c, err, sizeof err) == 0, "%s", err);
	ck_assert_uint_eq(c.cpus, 2);
	ck_assert_uint_eq(c.memory_mib, 2048);
	ck_assert_ptr_null(c.kernel);
	ck_assert_ptr_null(c.initrd);
	static const char *const want[] = { "/bin/sh", "-c",
					    "echo hi from the guest in $PWD; exit 7" };
	expect_argv(c.argv, want, 3);
	ck_assert_int_eq(c.verbose, 0);
	ck_assert_uint_eq(c.n_mounts, 1);
	ck_assert_str_eq(c.mounts[0].source, "examples/../");
	ck_assert_str_eq(c.mounts[0].target, "/workspace");
	ck_assert(!c.mounts[0].readonly);
	ck_assert(c.mounts[0].hidden_set);
	ck_assert_uint_eq(c.mounts[0].n_hidden, 4);
	ck_assert_str_eq(c.mounts[0].hidden[3], "secrets");
	ck_assert_str_eq(c.workdir, "/workspace");
	ck_assert_uint_eq(c.n_env, 2);
	ck_assert_str_eq(c.env[1], "MAKEFLAGS=-j2");
	ck_assert_str_eq(c.network_policy, "allowlist");
	ck_assert_uint_eq(c.n_allow, 4);
	ck_assert_uint_eq(c.n_deny, 1);
	ck_assert_str_eq(c.hosts[0].s, "db.internal:10.0.2.50");
	ck_assert_ptr_null(c.audit_log);
	ck_assert_str_eq(c.ports[0].s, "3000:3000");
	ck_assert_str_eq(c.tls_intercept, "secrets");
	ck_assert_ptr_null(c.secrets);
	config_free(&c);
}
END_TEST


/* ---- disks -------------------------------------------------------------- */

START_TEST(disks_section)
{
	struct kbox_config c;
	char err[ERRLEN];
	ck_assert_msg(load("disks:\n"
			   "  - containers:/var/lib/containers:size=16G\n"
			   "  - name: cache\n"
			   "    target: /cache/\n"
			   "    size: 1G\n"
			   "    readonly: true\n"
			   "  - {name: plain, target: /plain}\n",
			   &c, err) == 0, "%s", err);
	ck_assert_uint_eq(c.n_disks, 3);
	ck_assert_str_eq(c.disks[0].name, "containers");
	ck_assert_str_eq(c.disks[0].target, "/var/lib/containers");
	ck_assert_uint_eq(c.disks[0].size, 16ull << 30);
	ck_assert(!c.disks[0].readonly);
	ck_assert_str_eq(c.disks[1].name, "cache");
	ck_assert_str_eq(c.disks[1].target, "/cache");
	ck_assert_uint_eq(c.disks[1].size, 1ull << 30);
	ck_assert(c.disks[1].readonly);
	ck_assert_uint_eq(c.disks[2].size, 0);
	ck_assert_uint_eq(c.disks[2].line, 7);
	/* A later file's disks replace the earlier ones. */
	ck_assert_int_eq(config_load_buf("dir/u.yaml", "disks: [\"x:/x\"]\n", 15, &c, err, ERRLEN), 0);
	ck_assert_uint_eq(c.n_disks, 1);
	ck_assert_str_eq(c.disks[0].name, "x");
	config_free(&c);
}
END_TEST

START_TEST(disks_refused)
{
	expect_err("disks: a:/a", "dir/t.yaml:1:8: disks: got 'a:/a'; expected a list of "
				  "\"NAME:GUEST_PATH[:size=SIZE][:ro]\" or of mappings with name and "
				  "target");
	expect_err("disks: [a:/a, b:/b, c:/c, d:/d, e:/e]",
		   "dir/t.yaml:1:33: disks: more than 4 disks; expected at most 4");
	expect_err("disks: [\"a\"]", "dir/t.yaml:1:9: disks[0]: no NAME:GUEST_PATH; expected "
				     "NAME:GUEST_PATH[:size=SIZE][:ro]");
	expect_err("disks: [\"a:/a:size=3X\"]", "dir/t.yaml:1:9: disks[0]: size '3X' has an "
						"unknown unit; expected a size such as 8G, 512M "
						"or 1T (64M to 1T)");
	expect_err("disks: [a:/a, a:/b]", "dir/t.yaml:1:15: disks[1]: the volume a is given twice");
	expect_err("disks: [{name: a}]", "dir/t.yaml:1:9: disks[0]: no target; expected the guest "
				   "path (target: /var/lib/containers)");
	expect_err("disks: [{target: /a}]", "dir/t.yaml:1:9: disks[0]: no name; expected the "
				      "volume's name (name: containers)");
	expect_err("disks: [{name: a, target: /a, sise: 1G}]",
		   "dir/t.yaml:1:31: disks[0]: unknown key 'sise'; expected name, target, size or "
		   "readonly");
	expect_err("disks: [{name: a, target: /a, name: b}]",
		   "dir/t.yaml:1:31: disks[0]: duplicate key 'name' (first at line 1); expected "
		   "each key once");
	expect_err("disks: [{name: a, target: /a, size: 1M}]",
		   "dir/t.yaml:1:37: disks[0].size: '1M' is not a size from 64M to 1T; expected a "
		   "size such as 8G or 512M");
	expect_err("disks: [{name: a, target: /a, readonly: maybe}]",
		   "dir/t.yaml:1:41: disks[0].readonly: 'maybe' is not a boolean; expected true or "
		   "false");
	expect_err("disks: [{name: ../a, target: /a}]",
		   "dir/t.yaml:1:9: disks[0]: the volume name '../a' is not 1-20 letters, digits, "
		   "'_', '.' or '-' starting with a letter or digit");
	expect_err("disks: [{name: a, target: /proc/a}]",
		   "dir/t.yaml:1:9: disks[0]: /proc belongs to the guest kernel; pick another guest "
		   "path than '/proc/a'");
	expect_err("disks: [[a]]", "dir/t.yaml:1:9: disks[0]: got a list; expected "
				   "\"NAME:GUEST_PATH[:size=SIZE][:ro]\" or a mapping with name and "
				   "target");
}
END_TEST

Suite *config_suite(void)
{
	Suite *s = suite_create("config");

	unit_suite_case(s, "valid", disks_section, disks_refused, full_block_file,
			flow_style_and_unset_keys, empty_files_set_nothing,
			memory_forms, bool_forms, command_string_runs_through_sh,
			relative_paths_follow_the_file,
			load_overlays_and_errors_keep_config, example_file_loads,
			mounts_section, later_sections_load, variables_expand,
			protect_mounts_hides_config_files, literal_patterns,
			every_example_loads);
	unit_suite_case(s, "errors", wrong_types, out_of_range, unknown_keys,
			structure_errors, empty_commands, syntax_errors,
			files_load_and_fail_clearly, mounts_errors, mounts_limits,
			later_sections_errors, network_dns);
	unit_suite_case_fixture(s, "hostile", NULL, NULL, 30,
				anchors_and_aliases_refused, deep_nesting_refused,
				too_many_nodes_refused, huge_scalars,
				nul_bytes_and_bad_utf8, error_buffer_edges);
	return s;
}
