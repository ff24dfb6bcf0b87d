#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/yamltree.h"
#include "tests/lib/unit_suite.h"

#define ERRLEN 512

static const struct yamltree_rules plain_rules = {
	.max_depth = 3,
	.max_nodes = 8,
	.smaller = "thing",
};

static const struct yamltree_rules secret_rules = {
	.max_depth = 3,
	.max_nodes = 8,
	.smaller = "thing",
	.secret = true,
};

static int parse(const char *text, const struct yamltree_rules *r, struct yamltree_node **root, char *err)
{
	return yamltree_parse(text, strlen(text), r, "f.yaml", err, ERRLEN, root);
}

/* text must fail with -EINVAL and exactly "f.yaml:" + msg. */
static void expect_err(const char *text, const struct yamltree_rules *r, const char *msg)
{
	struct yamltree_node *root = (struct yamltree_node *)1;
	char err[ERRLEN], want[ERRLEN];
	ck_assert_int_eq(parse(text, r, &root, err), -EINVAL);
	ck_assert_ptr_null(root);
	snprintf(want, sizeof want, "f.yaml:%s", msg);
	ck_assert_str_eq(err, want);
}

START_TEST(builds_the_tree_with_positions)
{
	const struct yamltree_rules wide = { .max_depth = 3, .max_nodes = 100, .smaller = "x" };
	struct yamltree_node *root;
	char err[ERRLEN];
	ck_assert_int_eq(parse("a: 1\nb: [x, 'y']\nc:\n", &wide, &root, err), 0);
	ck_assert_int_eq(root->kind, YAMLTREE_MAP);
	ck_assert_uint_eq(root->n, 6);
	const struct yamltree_node *b = root->kids[3];
	ck_assert_int_eq(b->kind, YAMLTREE_SEQ);
	ck_assert_uint_eq(b->line, 2);
	ck_assert_uint_eq(b->col, 4);
	ck_assert_str_eq(b->kids[0]->str, "x");
	ck_assert(b->kids[0]->plain);
	ck_assert(!b->kids[1]->plain);
	ck_assert_uint_eq(b->kids[1]->col, 8);
	ck_assert(yamltree_is_null(root->kids[5]));
	ck_assert(!yamltree_is_null(b->kids[1]));
	ck_assert_str_eq(yamltree_kind_name(b), "a list");
	ck_assert_str_eq(yamltree_kind_name(root), "a mapping");
	ck_assert_str_eq(yamltree_kind_name(root->kids[5]), "an empty value");
	yamltree_free(root);

	/* Quoted nulls are text; NUL bytes survive with their length. */
	ck_assert_int_eq(parse("[\"null\", null, ~, \"a\\0b\"]", &wide, &root, err), 0);
	ck_assert(!yamltree_is_null(root->kids[0]));
	ck_assert(yamltree_is_null(root->kids[1]));
	ck_assert(yamltree_is_null(root->kids[2]));
	ck_assert_uint_eq(root->kids[3]->len, 3);
	yamltree_free(root);

	ck_assert_int_eq(parse("", &plain_rules, &root, err), 0);
	ck_assert_ptr_null(root);
	ck_assert_int_eq(parse("# only a comment\n", &plain_rules, &root, err), 0);
	ck_assert_ptr_null(root);
	yamltree_free(NULL);
}
END_TEST

START_TEST(decoration_refused)
{
	expect_err("a: &n 1\n", &plain_rules,
		   "1:4: anchor '&n' is not allowed; expected plain values (anchors and aliases "
		   "are refused)");
	expect_err("a: !!int 1\n", &plain_rules,
		   "1:4: tag 'tag:yaml.org,2002:int' is not allowed; expected an untagged value");
	expect_err("[!x {}]\n", &plain_rules,
		   "1:2: tag '!x' is not allowed; expected an untagged value");
	expect_err("a: *tok\n", &plain_rules,
		   "1:4: alias '*tok' is not allowed; expected plain values (anchors and aliases "
		   "are refused)");
	/* A secret file never quotes an alias: "value: *token" is one. */
	expect_err("a: *tok\n", &secret_rules,
		   "1:4: an alias is not allowed; expected plain values (anchors and aliases are "
		   "refused)");
	expect_err("a: 1\n---\nb: 2\n", &plain_rules,
		   "2:1: a second YAML document starts here; expected one document (remove the "
		   "extra '---')");
}
END_TEST

START_TEST(limits_hold)
{
	struct yamltree_node *root;
	char err[ERRLEN];
	ck_assert_int_eq(parse("[[[1]]]", &plain_rules, &root, err), 0);
	yamltree_free(root);
	expect_err("[[[[1]]]]", &plain_rules,
		   "1:4: nesting deeper than 3 levels; expected a flatter structure");
	ck_assert_int_eq(parse("[1, 2, 3, 4, 5, 6, 7]", &plain_rules, &root, err), 0);
	yamltree_free(root);
	expect_err("[1, 2, 3, 4, 5, 6, 7, 8]", &plain_rules,
		   "1:23: more than 8 values in the file; expected a smaller thing");
	/* Depth is capped at YAMLTREE_DEPTH_MAX whatever a caller asks. */
	struct yamltree_rules deep = { .max_depth = 1000, .max_nodes = 1000, .smaller = "x" };
	char text[64];
	memset(text, '[', 17);
	memset(text + 17, ']', 17);
	text[34] = '\0';
	char want[ERRLEN];
	snprintf(want, sizeof want, "f.yaml:1:17: nesting deeper than %u levels; expected a "
				    "flatter structure", YAMLTREE_DEPTH_MAX);
	ck_assert_int_eq(parse(text, &deep, &root, err), -EINVAL);
	ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(syntax_errors_have_positions)
{
	expect_err("a: [1, 2\n", &plain_rules,
		   "2:1: invalid YAML: did not find expected ',' or ']' (while parsing a flow "
		   "sequence at line 1, column 4); expected valid YAML syntax");
	expect_err("a: 1\nb: \x01\n", &plain_rules,
		   "2:4: invalid text: control characters are not allowed (0x1); expected UTF-8 "
		   "text without control characters");
	/* The refused byte may belong to a value. */
	expect_err("a: 1\nb: \x01\n", &secret_rules,
		   "2:4: invalid text: control characters are not allowed; expected UTF-8 text "
		   "without control characters");
	/* Columns count characters, not bytes. */
	expect_err("\xc3\xa9\xc3\xa9: \xff\n", &plain_rules,
		   "1:5: invalid text: invalid leading UTF-8 octet (0xff); expected UTF-8 text "
		   "without control characters");
}
END_TEST

START_TEST(messages_are_safe_lines)
{
	char out[YAMLTREE_SHOW_BUF], err[16];
	yamltree_show(out, sizeof out, "a\\b\n\xff", 5, YAMLTREE_SHOW_MAX);
	ck_assert_str_eq(out, "a\\x5cb\\x0a\\xff");
	yamltree_show(out, sizeof out, "abcdef", 6, 3);
	ck_assert_str_eq(out, "abc...");
	char big[YAMLTREE_SHOW_MAX * 2];
	memset(big, 1, sizeof big);
	yamltree_show(out, sizeof out, big, sizeof big, YAMLTREE_SHOW_MAX);
	ck_assert_uint_eq(strlen(out), 4 * YAMLTREE_SHOW_MAX + 3);

	ck_assert_int_eq(yamltree_err(err, sizeof err, "n", 0, 0, "%s", "whole"), -EINVAL);
	ck_assert_str_eq(err, "n: whole");
	ck_assert_int_eq(yamltree_err(err, sizeof err, "n", 2, 3, "a long message"), -EINVAL);
	ck_assert_str_eq(err, "n:2:3: a long m");
	ck_assert_int_eq(yamltree_err(NULL, 0, "n", 1, 1, "x"), -EINVAL);
	ck_assert_int_eq(yamltree_nomem(err, sizeof err, "n"), -ENOMEM);
	ck_assert_int_eq(yamltree_nomem(NULL, 0, "n"), -ENOMEM);
}
END_TEST

START_TEST(slurp_reads_regular_files_only)
{
	char dir[] = "/tmp/kbox-yt-XXXXXX", path[64], *buf;
	const char *stage;
	size_t len;
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/f", dir);
	ck_assert_int_eq(yamltree_slurp(path, 8, &buf, &len, &stage), -ENOENT);
	ck_assert_str_eq(stage, "open");
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("12345678", f);
	fclose(f);
	ck_assert_int_eq(yamltree_slurp(path, 8, &buf, &len, &stage), 0);
	ck_assert_uint_eq(len, 8);
	ck_assert_str_eq(buf, "12345678");
	free(buf);
	ck_assert_int_eq(yamltree_slurp(path, 7, &buf, &len, &stage), -EFBIG);
	ck_assert_int_eq(yamltree_slurp(dir, 8, &buf, &len, &stage), -EISDIR);
	unlink(path);
	/* A FIFO is refused at once, not waited on. */
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	ck_assert_int_eq(yamltree_slurp(path, 8, &buf, &len, &stage), -EINVAL);
	ck_assert_str_eq(stage, "stat");
	unlink(path);
	rmdir(dir);
}
END_TEST

Suite *yamltree_suite(void)
{
	return unit_suite("yamltree", "yamltree",
			  builds_the_tree_with_positions, decoration_refused,
			  limits_hold, syntax_errors_have_positions,
			  messages_are_safe_lines,
			  slurp_reads_regular_files_only);
}
