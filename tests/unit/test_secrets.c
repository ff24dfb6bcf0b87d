#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netstack/secrets.h"
#include "tests/lib/unit_suite.h"

#define ERRLEN 512

static char dir[64];

static void write_file(const char *name, const char *text)
{
	char path[128];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static void setup(void)
{
	strcpy(dir, "/tmp/kbox-secrets-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	setenv("KBOX_T_TOKEN", "tok-123", 1);
	unsetenv("KBOX_T_UNSET");
	unsetenv("KBOX_T_FROMFILE");
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* Write text as DIR/s.yaml and load it. */
static int load(const char *text, struct secrets **set, char *err)
{
	char path[128];
	write_file("s.yaml", text);
	snprintf(path, sizeof path, "%s/s.yaml", dir);
	return secrets_load(path, set, err, ERRLEN);
}

/* text must fail with -EINVAL and the message "DIR/s.yaml:" + msg. */
static void expect_err(const char *text, const char *msg)
{
	struct secrets *set = (struct secrets *)1;
	char err[ERRLEN], want[ERRLEN];
	ck_assert_int_eq(load(text, &set, err), -EINVAL);
	ck_assert_ptr_null(set);
	snprintf(want, sizeof want, "%s/s.yaml:%s", dir, msg);
	ck_assert_str_eq(err, want);
}

START_TEST(loads_the_documented_shape)
{
	struct secrets *set;
	char err[ERRLEN];
	ck_assert_int_eq(load("OPENCODE_API_KEY:\n"
			      "  value: \"Bearer ${KBOX_T_TOKEN}\"\n"
			      "  allow: [\"opencode.ai\", \"*.Anthropic.com.\"]\n"
			      "  substitution:\n"
			      "    headers: true\n"
			      "    header_fields: [\"Authorization\", \"x-api-key\"]\n"
			      "    query: false\n"
			      "    body: true\n"
			      "GH: {value: lit$$eral$x$, allow: [github.com]}\n",
			      &set, err),
			 0);
	ck_assert_uint_eq(secrets_count(set), 2);
	const struct secret *s = secrets_at(set, 0);
	ck_assert_str_eq(s->name, "OPENCODE_API_KEY");
	ck_assert_str_eq(secrets_placeholder(s), "$KBOX_OPENCODE_API_KEY");
	ck_assert_str_eq(s->value, "Bearer tok-123");
	ck_assert_uint_eq(s->value_len, 14);
	ck_assert_uint_eq(s->n_allow, 2);
	ck_assert_str_eq(s->allow[1], "*.anthropic.com");
	ck_assert(s->sub_headers && !s->sub_query && s->sub_body);
	ck_assert_uint_eq(s->n_fields, 2);
	ck_assert_str_eq(s->fields[0], "authorization");
	const struct secret *g = secrets_find(set, "GH", 2);
	ck_assert_ptr_eq(g, secrets_at(set, 1));
	ck_assert_str_eq(g->value, "lit$eral$x$");
	/* Defaults: headers on, every field, query and body off. */
	ck_assert(g->sub_headers && !g->sub_query && !g->sub_body && g->n_fields == 0);
	ck_assert_ptr_null(secrets_at(set, 2));
	ck_assert_ptr_null(secrets_find(set, "G", 1));

	const char *env[3] = { NULL, NULL, NULL };
	ck_assert_uint_eq(secrets_env(set, env, 1), 2);
	ck_assert_str_eq(env[0], "OPENCODE_API_KEY=$KBOX_OPENCODE_API_KEY");
	ck_assert_ptr_null(env[1]);
	ck_assert_uint_eq(secrets_env(set, env, 3), 2);
	ck_assert_str_eq(env[1], "GH=$KBOX_GH");

	char buf[128];
	secrets_describe_allow(s, buf, sizeof buf);
	ck_assert_str_eq(buf, "opencode.ai, *.anthropic.com");
	secrets_describe_fields(s, buf, sizeof buf);
	ck_assert_str_eq(buf, "authorization, x-api-key");
	secrets_describe_fields(g, buf, sizeof buf);
	ck_assert_str_eq(buf, "all header fields");
	secrets_free(set);
}
END_TEST

START_TEST(empty_file_is_an_empty_set)
{
	struct secrets *set;
	char err[ERRLEN];
	ck_assert_int_eq(load("# nothing yet\n", &set, err), 0);
	ck_assert_uint_eq(secrets_count(set), 0);
	secrets_free(set);
	secrets_free(NULL);
	ck_assert_uint_eq(secrets_count(NULL), 0);
}
END_TEST

START_TEST(values_from_secrets_env)
{
	struct secrets *set;
	char err[ERRLEN];
	write_file("secrets.env", "# the real ones\n"
				  "\n"
				  "KBOX_T_FROMFILE=\"from file\"  # quoted\n"
				  "export KBOX_T_OTHER='single'\n"
				  "KBOX_T_PLAIN=a b #c\r\n"
				  "KBOX_T_TOKEN=not-this-one\n");
	ck_assert_int_eq(load("A: {value: \"${KBOX_T_FROMFILE}|${KBOX_T_OTHER}|${KBOX_T_PLAIN}|"
			      "${KBOX_T_TOKEN}\", allow: [x.example]}\n",
			      &set, err),
			 0);
	/* The process environment wins over the file. */
	ck_assert_str_eq(secrets_at(set, 0)->value, "from file|single|a b|tok-123");
	secrets_free(set);
}
END_TEST

START_TEST(missing_variable_says_where_to_set_it)
{
	char want[ERRLEN];
	snprintf(want, sizeof want,
		 "2:10: secret K: ${KBOX_T_UNSET} is not set; expected KBOX_T_UNSET in kbox's "
		 "environment or a line KBOX_T_UNSET=... in %s/secrets.env",
		 dir);
	expect_err("K:\n  value: ${KBOX_T_UNSET}\n  allow: [a.example]\n", want);

	/* Names up to 255 bytes are looked up; a longer one is no variable,
	 * even when set. */
	char name[257], text[400];
	memset(name, 'N', 256);
	name[256] = '\0';
	setenv(name, "long-value", 1);
	snprintf(text, sizeof text, "K: {value: \"x${%s}\", allow: [a.example]}\n", name);
	expect_err(text, "1:12: secret K: '${' at byte 2 of the value does not start a variable; "
			 "expected ${NAME} with NAME made of letters, digits and '_' (write $$ "
			 "for a literal $)");
	unsetenv(name);
	name[255] = '\0';
	setenv(name, "long-value", 1);
	snprintf(text, sizeof text, "K: {value: \"x${%s}\", allow: [a.example]}\n", name);
	struct secrets *set;
	char err[ERRLEN];
	ck_assert_int_eq(load(text, &set, err), 0);
	ck_assert_str_eq(secrets_at(set, 0)->value, "xlong-value");
	secrets_free(set);
	unsetenv(name);
}
END_TEST

START_TEST(secrets_env_errors_have_positions_and_no_values)
{
	struct secrets *set;
	char err[ERRLEN], want[ERRLEN];
	write_file("secrets.env", "GOOD=1\nKBOX_T_FROMFILE \"hunter2\"\n");
	ck_assert_int_eq(load("A: {value: \"${KBOX_T_FROMFILE}\", allow: [x.example]}\n", &set, err),
			 -EINVAL);
	snprintf(want, sizeof want,
		 "%s/secrets.env:2:16: expected '=' after the name; write KEY=VALUE", dir);
	ck_assert_str_eq(err, want);
	write_file("secrets.env", "KBOX_T_FROMFILE=\"hunter2\n");
	ck_assert_int_eq(load("A: {value: \"${KBOX_T_FROMFILE}\", allow: [x.example]}\n", &set, err),
			 -EINVAL);
	ck_assert_ptr_null(strstr(err, "hunter2"));
	ck_assert_ptr_nonnull(strstr(err, "secrets.env:1:17: the quoted value does not end"));
	write_file("secrets.env", "KBOX_T_FROMFILE=hun\ater2\n");
	ck_assert_int_eq(load("A: {value: \"${KBOX_T_FROMFILE}\", allow: [x.example]}\n", &set, err),
			 -EINVAL);
	ck_assert_ptr_null(strstr(err, "hun"));
	ck_assert_ptr_nonnull(strstr(err, "the value of KBOX_T_FROMFILE contains a control"));
}
END_TEST

START_TEST(values_never_appear_in_errors)
{
	struct secrets *set;
	char err[ERRLEN];
	static const char *const bad[] = {
		"A: {value: \"sk-SECRETVALUE ${x-y}\", allow: [x.example]}\n",
		"A: {value: \"sk-SECRETVALUE ${\", allow: [x.example]}\n",
		"A: {value: \"sk-SECRETVALUE\\n\", allow: [x.example]}\n",
		"A: {value: \"sk-SECRETVALUE\", allow: []}\n",
		"A: {value: \"sk-SECRETVALUE\"}\n",
		"A: {value: \"sk-SECRETVALUE\", allow: [x.example], bogus: 1}\n",
		"A: {value: \"sk-SECRETVALUE\", allow: [x.example]}\nA: {value: x, allow: [y.z]}\n",
		"A: {value: \"sk-SECRETVALUE\", allow: [x.example]\n",
		"A: {value: 'sk-SECRETVALUE\", allow: [x.example]}\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		ck_assert_int_lt(load(bad[i], &set, err), 0);
		ck_assert_msg(!strstr(err, "SECRETVALUE"), "case %zu leaks: %s", i, err);
		ck_assert_msg(strlen(err) > 0, "case %zu: no message", i);
	}
	setenv("KBOX_T_CTRL", "sk-SECRETVALUE\r\nX: y", 1);
	ck_assert_int_eq(load("A: {value: \"${KBOX_T_CTRL}\", allow: [x.example]}\n", &set, err),
			 -EINVAL);
	ck_assert_ptr_null(strstr(err, "SECRETVALUE"));
	ck_assert_ptr_nonnull(strstr(err, "contains a control character (byte 15)"));
	unsetenv("KBOX_T_CTRL");
}
END_TEST

START_TEST(shape_errors)
{
	expect_err("- a\n", "1:1: the top level is a list; expected a mapping of secret names "
			    "such as 'OPENCODE_API_KEY:'");
	expect_err("lower: {value: x, allow: [a.b]}\n",
		   "1:1: this key is not a valid secret name (not shown: it may be a value); "
		   "expected 1 to 64 characters of A-Z, 0-9 and '_', not starting with a digit");
	expect_err("1A: {value: x, allow: [a.b]}\n",
		   "1:1: this key is not a valid secret name (not shown: it may be a value); "
		   "expected 1 to 64 characters of A-Z, 0-9 and '_', not starting with a digit");
	/* A value indented wrongly becomes a key: the message must not show it. */
	expect_err("A:\n  value: x\n  allow: [a.b]\nsk-live-0123456789abcdef: 1\n",
		   "4:1: this key is not a valid secret name (not shown: it may be a value); "
		   "expected 1 to 64 characters of A-Z, 0-9 and '_', not starting with a digit");
	expect_err("A: x\n", "1:4: secret A is a single value; expected a mapping with value, "
			     "allow and substitution");
	expect_err("A: {value: x}\n", "1:1: secret A has no allow list; expected allow: "
				      "[\"host.example\"] naming where the value may be sent");
	expect_err("A: {allow: [a.b]}\n",
		   "1:1: secret A has no value; expected value: \"${A}\"");
	expect_err("A: {value: x, allow: [a.b], alow: 1}\n",
		   "1:29: secret A: unknown key 'alow'; expected one of: value, allow, "
		   "substitution");
	expect_err("A: {value: x, value: y, allow: [a.b]}\n",
		   "1:15: secret A: duplicate key 'value' (first at line 1); expected each key "
		   "once");
	expect_err("A: {value: x, allow: a.b}\n",
		   "1:22: secret A: allow is a single value; expected a list such as [\"a\", "
		   "\"b\"]");
	expect_err("A: {value: x, allow: [\"a..b\"]}\n",
		   "1:23: secret A: 'a..b' is not a host name; expected a name such as "
		   "\"api.example.com\" or \"*.example.com\"");
	expect_err("A: {value: x, allow: [\"*\"]}\n",
		   "1:23: secret A: '*' is not a host name; expected a name such as "
		   "\"api.example.com\" or \"*.example.com\"");
	expect_err("A: {value: x, allow: [[a]]}\n",
		   "1:23: secret A: an entry of allow is a list; expected a name");
	expect_err("A: {value: x, allow: [a.b], substitution: {query: yes}}\n",
		   "1:51: secret A: substitution.query is not a boolean; expected true or false");
	expect_err("A: {value: x, allow: [a.b], substitution: {cookies: true}}\n",
		   "1:44: secret A: unknown key 'substitution.cookies'; expected one of: "
		   "headers, header_fields, query, body");
	expect_err("A: {value: x, allow: [a.b], substitution: {header_fields: [\"a b\"]}}\n",
		   "1:60: secret A: 'a b' is not a header field name; expected a name such as "
		   "\"authorization\"");
	expect_err("A: {value: x, allow: [a.b], substitution: [1]}\n",
		   "1:43: secret A: substitution is a list; expected a mapping with headers, "
		   "header_fields, query and body");
	expect_err("A: {value: x, allow: [a.b]}\nA: {value: y, allow: [a.b]}\n",
		   "2:1: duplicate secret A; expected each name once");
	expect_err("A: {value: \"\", allow: [a.b]}\n",
		   "1:12: secret A: the value is empty; expected a non-empty value");
	expect_err("A: {value: [x], allow: [a.b]}\n",
		   "1:12: secret A: value is a list; expected a string such as \"${A}\"");
}
END_TEST

START_TEST(hostile_yaml_is_bounded)
{
	expect_err("A: &x {value: v, allow: [a.b]}\nB: *x\n",
		   "1:4: anchor '&x' is not allowed; expected plain values (anchors and aliases "
		   "are refused)");
	expect_err("A: !!str x\n", "1:4: tag 'tag:yaml.org,2002:str' is not allowed; expected "
				   "an untagged value");
	expect_err("---\nA: 1\n---\nB: 2\n",
		   "3:1: a second YAML document starts here; expected one document (remove "
		   "the extra '---')");
	expect_err("A: [[[[[[[[[[1]]]]]]]]]]\n",
		   "1:11: nesting deeper than 8 levels; expected a flatter structure");

	char *big = malloc(70 * 64 + 1);
	size_t o = 0;
	for (int i = 0; i < 65; i++)
		o += (size_t)sprintf(big + o, "S%d: {value: v, allow: [a.b]}\n", i);
	expect_err(big, "1:1: 65 secrets; expected at most 64");
	free(big);

	struct secrets *set;
	char err[ERRLEN];
	char *huge = malloc(SECRETS_MAX_BYTES + 2);
	memset(huge, '#', SECRETS_MAX_BYTES + 1);
	huge[SECRETS_MAX_BYTES + 1] = '\0';
	ck_assert_int_eq(load(huge, &set, err), -EFBIG);
	ck_assert_ptr_nonnull(strstr(err, "file is larger than 262144 bytes"));
	ck_assert_int_eq(secrets_load_buf("x/y.yaml", huge, SECRETS_MAX_BYTES + 1, &set, err,
					  ERRLEN),
			 -EFBIG);
	free(huge);

	char vbig[SECRETS_VALUE_MAX + 64];
	o = (size_t)sprintf(vbig, "A: {allow: [a.b], value: ");
	memset(vbig + o, 'v', SECRETS_VALUE_MAX + 1);
	strcpy(vbig + o + SECRETS_VALUE_MAX + 1, "}\n");
	expect_err(vbig, "1:26: secret A: the value is longer than 4096 bytes; expected a "
			 "shorter value");

	ck_assert_int_eq(secrets_load("/nonexistent/kbox/s.yaml", &set, err, ERRLEN), -ENOENT);
	ck_assert_str_eq(err, "/nonexistent/kbox/s.yaml: cannot open: No such file or "
			      "directory; expected a readable secrets file");
	ck_assert_int_eq(secrets_load("/tmp", &set, err, ERRLEN), -EINVAL);
}
END_TEST

START_TEST(hosts_match)
{
	struct secrets *set;
	char err[ERRLEN];
	ck_assert_int_eq(load("A: {value: v, allow: [opencode.ai, \"*.anthropic.com\"]}\n", &set,
			      err),
			 0);
	const struct secret *s = secrets_at(set, 0);
	static const struct {
		const char *host;
		bool ok;
	} cases[] = {
		{ "opencode.ai", true },        { "OpenCode.AI", true },
		{ "opencode.ai.", true },       { "api.opencode.ai", false },
		{ "xopencode.ai", false },      { "opencode.a", false },
		{ "api.anthropic.com", true },  { "a.b.anthropic.com", true },
		{ "API.Anthropic.COM.", true }, { "anthropic.com", false },
		{ "evilanthropic.com", false }, { "anthropic.com.evil", false },
		{ "", false },                  { ".", false },
		{ ".anthropic.com", false },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		ck_assert_msg(secrets_hosts_match(s, cases[i].host) == cases[i].ok, "host '%s'",
			      cases[i].host);
	secrets_free(set);
}
END_TEST

START_TEST(reload_replaces_values_or_nothing)
{
	struct secrets *set;
	char err[ERRLEN], path[128];
	snprintf(path, sizeof path, "%s/s.yaml", dir);
	write_file("secrets.env", "KBOX_T_FROMFILE=one\n");
	ck_assert_int_eq(load("A: {value: \"${KBOX_T_FROMFILE}\", allow: [a.example]}\n"
			      "B: {value: \"b-${KBOX_T_FROMFILE}\", allow: [b.example]}\n",
			      &set, err),
			 0);
	const struct secret *a = secrets_at(set, 0), *b = secrets_at(set, 1);

	write_file("secrets.env", "KBOX_T_FROMFILE=two\n");
	ck_assert_int_eq(secrets_reload(set, path, "A", err, ERRLEN), 0);
	ck_assert_ptr_eq(secrets_at(set, 0), a);
	ck_assert_str_eq(a->value, "two");
	ck_assert_str_eq(b->value, "b-one");
	ck_assert_int_eq(secrets_reload(set, path, NULL, err, ERRLEN), 0);
	ck_assert_str_eq(b->value, "b-two");

	/* A broken file changes nothing. */
	write_file("secrets.env", "KBOX_T_FROMFILE=three\n");
	write_file("s.yaml", "A: {value: \"${KBOX_T_FROMFILE}\", allow: [a.example]}\n"
			     "B: {value: \"${KBOX_T_UNSET}\", allow: [b.example]}\n");
	ck_assert_int_eq(secrets_reload(set, path, "A", err, ERRLEN), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "${KBOX_T_UNSET} is not set"));
	ck_assert_str_eq(a->value, "two");

	/* The names are fixed for the sandbox's life. */
	write_file("s.yaml", "A: {value: \"${KBOX_T_FROMFILE}\", allow: [c.example]}\n");
	ck_assert_int_eq(secrets_reload(set, path, NULL, err, ERRLEN), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "secrets were added or removed"));
	ck_assert_int_eq(secrets_reload(set, path, "B", err, ERRLEN), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "no secret B in the file any more"));
	ck_assert_int_eq(secrets_reload(set, path, "C", err, ERRLEN), -ENOENT);
	ck_assert_str_eq(a->value, "two");
	ck_assert(secrets_hosts_match(a, "a.example"));

	/* One secret: value and rules both follow the file. */
	ck_assert_int_eq(secrets_reload(set, path, "A", err, ERRLEN), 0);
	ck_assert_str_eq(a->value, "three");
	ck_assert(!secrets_hosts_match(a, "a.example"));
	ck_assert(secrets_hosts_match(a, "c.example"));
	secrets_free(set);
}
END_TEST

START_TEST(example_file_loads)
{
	struct secrets *set;
	char err[ERRLEN];
	setenv("OPENCODE_API_KEY", "sk-example", 1);
	setenv("GITHUB_TOKEN", "ghp-example", 1);
	ck_assert_msg(secrets_load("examples/secrets.yaml", &set, err, ERRLEN) == 0, "%s", err);
	ck_assert_uint_eq(secrets_count(set), 2);
	const struct secret *o = secrets_find(set, "OPENCODE_API_KEY", 16);
	ck_assert_str_eq(o->value, "sk-example");
	ck_assert(secrets_hosts_match(o, "api.anthropic.com"));
	const struct secret *g = secrets_find(set, "GITHUB_TOKEN", 12);
	ck_assert(g->sub_headers && g->n_fields == 1 && !g->sub_query && !g->sub_body);
	secrets_free(set);
}
END_TEST

Suite *secrets_suite(void)
{
	return unit_suite_fixture("secrets", "secrets", setup, teardown, 0,
				  loads_the_documented_shape,
				  empty_file_is_an_empty_set,
				  values_from_secrets_env,
				  missing_variable_says_where_to_set_it,
				  secrets_env_errors_have_positions_and_no_values,
				  values_never_appear_in_errors, shape_errors,
				  hostile_yaml_is_bounded, hosts_match,
				  reload_replaces_values_or_nothing,
				  example_file_loads);
}
