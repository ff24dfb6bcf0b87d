/* Hidden names in the passthrough backend, through the FUSE server: case
 * and folded spellings, the editor and backup copies the defaults cover,
 * hidden_extra, renames that would move a hidden path out from under its
 * pattern, and nodes the host renamed to a hidden name after the guest
 * looked them up.  Each test serves a fresh temporary directory. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/fs_hidden.h"
#include "devices/fs_passthrough.h"
#include "devices/fuse_server.h"
#include "tests/lib/tmp_tree.h"
#include "tests/lib/unit_suite.h"

static char dir[64];
static struct fs_passthrough *fs;
static struct fuse_server *srv;
static uint8_t req[64 * 1024];
static uint8_t rep[64 * 1024];
static uint64_t next_unique = 1;

static void put(const char *name, const char *text)
{
	ck_assert_int_eq(tmp_tree_put(dir, name, text), 0);
}

static void mkdir_host(const char *name)
{
	char p[256];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	ck_assert_int_eq(mkdir(p, 0755), 0);
}

/* A host-side rename inside the served tree (or out of it with an
 * absolute to). */
static void rename_host(const char *from, const char *to)
{
	char a[256], b[256];
	snprintf(a, sizeof a, "%s/%s", dir, from);
	if (to[0] == '/')
		snprintf(b, sizeof b, "%s", to);
	else
		snprintf(b, sizeof b, "%s/%s", dir, to);
	ck_assert_int_eq(rename(a, b), 0);
}

static bool exists_host(const char *name)
{
	char p[256];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

static void setup(void)
{
	ck_assert_int_eq(tmp_tree_make(dir, sizeof dir, "/tmp/kbox-fshide-unit.XXXXXX"), 0);
}

static void teardown(void)
{
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	srv = NULL;
	fs = NULL;
	ck_assert_int_eq(tmp_tree_remove(dir), 0);
}

/* Serves dir with c (its root filled in) and sends INIT. */
static void serve(struct fs_passthrough_config c)
{
	struct fuse_server_config sc = { .entry_timeout = 1, .attr_timeout = 1 };
	struct {
		struct fuse_in_header h;
		struct fuse_init_in in;
	} init = { { sizeof init, FUSE_INIT, 1, 0, 0, 0, 0, 0, 0 },
		   { .major = 7, .minor = 38, .flags = 0xffffffffu } };

	c.root = dir;
	ck_assert_int_eq(fs_passthrough_new(&c, &fs), 0);
	ck_assert_int_eq(fuse_server_new(&fs_passthrough_ops, fs, &sc, &srv), 0);
	ck_assert_int_gt(fuse_server_handle_buf(srv, &init, sizeof init, rep, sizeof rep), 0);
}

/* Sends one request (header, fixed argument, up to two names) and returns
 * the reply's error. */
static int call(uint32_t op, uint64_t nodeid, const void *arg, size_t arglen,
		const char *n1, const char *n2)
{
	struct fuse_in_header h = { 0 };
	size_t len = sizeof h;
	struct fuse_out_header oh;

	if (arglen)
		memcpy(req + len, arg, arglen);
	len += arglen;
	const char *names[2] = { n1, n1 ? n2 : NULL };
	for (int i = 0; i < 2 && names[i]; i++) {
		memcpy(req + len, names[i], strlen(names[i]) + 1);
		len += strlen(names[i]) + 1;
	}
	h.len = (uint32_t)len;
	h.opcode = op;
	h.unique = next_unique++;
	h.nodeid = nodeid;
	memcpy(req, &h, sizeof h);
	ssize_t n = fuse_server_handle_buf(srv, req, len, rep, sizeof rep);
	ck_assert_int_ge(n, (ssize_t)sizeof oh);
	memcpy(&oh, rep, sizeof oh);
	return oh.error;
}

static int lookup(uint64_t parent, const char *name, uint64_t *node)
{
	struct fuse_entry_out e;
	int err = call(FUSE_LOOKUP, parent, NULL, 0, name, NULL);
	if (err == 0 && node) {
		memcpy(&e, rep + sizeof(struct fuse_out_header), sizeof e);
		*node = e.nodeid;
	}
	return err;
}

static uint64_t lookup_ok(uint64_t parent, const char *name)
{
	uint64_t node = 0;
	ck_assert_int_eq(lookup(parent, name, &node), 0);
	return node;
}

static int create(uint64_t parent, const char *name)
{
	struct fuse_create_in in = { .flags = O_RDWR, .mode = S_IFREG | 0600 };
	return call(FUSE_CREATE, parent, &in, sizeof in, name, NULL);
}

static int rename2(uint64_t parent, const char *name, uint64_t newparent,
		   const char *newname, uint32_t flags)
{
	struct fuse_rename2_in rn = { .newdir = newparent, .flags = flags };
	return call(FUSE_RENAME2, parent, &rn, sizeof rn, name, newname);
}

/* The names a READDIR of the root lists, each followed by a space. */
static void root_names(char *out, size_t size)
{
	struct fuse_read_in rd = { .fh = 0, .size = 32768 };
	ck_assert_int_eq(call(FUSE_READDIR, FUSE_ROOT_ID, &rd, sizeof rd, NULL, NULL), 0);
	const struct fuse_out_header *oh = (const void *)rep;
	const uint8_t *p = rep + sizeof *oh;
	size_t n = oh->len - sizeof *oh;
	out[0] = '\0';
	while (n >= sizeof(struct fuse_dirent)) {
		struct fuse_dirent de;
		memcpy(&de, p, sizeof de);
		size_t rec = FUSE_DIRENT_ALIGN(sizeof de + de.namelen);
		ck_assert_uint_ge(n, rec);
		strncat(out, (const char *)p + sizeof de, de.namelen);
		strncat(out, " ", size - strlen(out) - 1);
		p += rec;
		n -= rec;
	}
}

/* The defaults are matched without regard to ASCII case: on a
 * case-insensitive host .ENV opens .env.  Here the host is case-sensitive,
 * so each spelling is a file of its own, and each must be hidden. */
START_TEST(case_insensitive)
{
	static const char *const names[] = { ".ENV", ".Env", ".eNv.LOCAL",
					     "SECRETS.ENV", "Kbox.Yaml" };
	char listed[1024];
	serve((struct fs_passthrough_config){ 0 });
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		put(names[i], "SECRET=1");
		ck_assert_int_eq(lookup(FUSE_ROOT_ID, names[i], NULL), -ENOENT);
	}
	put("visible", "x");
	root_names(listed, sizeof listed);
	ck_assert_ptr_nonnull(strstr(listed, "visible "));
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		ck_assert_ptr_null(strstr(listed, names[i]));
	ck_assert_int_eq(create(FUSE_ROOT_ID, ".ENV.prod"), -EACCES);
	ck_assert_int_eq(create(FUSE_ROOT_ID, "Secrets.Env"), -EACCES);
	/* A pattern of the mount's own list too, and a path pattern. */
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	mkdir_host("Config");
	put("Config/Secret.JSON", "k");
	const char *const pats[] = { "*.pem", "config/secret.json" };
	put("KEY.PEM", "k");
	serve((struct fs_passthrough_config){ .hidden.list = pats, .hidden.n = 2, .hidden.set = true });
	ck_assert_int_eq(lookup(FUSE_ROOT_ID, "KEY.PEM", NULL), -ENOENT);
	uint64_t cfg = lookup_ok(FUSE_ROOT_ID, "Config");
	ck_assert_int_eq(lookup(cfg, "Secret.JSON", NULL), -ENOENT);
}
END_TEST

/* Spellings a folding host takes for a protected name: trailing dots and
 * spaces (vfat, exFAT, Windows servers drop them), the non-ASCII letters
 * whose case folding is ASCII, characters HFS+ ignores. */
START_TEST(folded_spellings)
{
	static const char *const names[] = {
		"secrets.env.", "secrets.env ", "kbox.yaml. .", ".env...",
		"\xc5\xbf" "ecrets.env",       /* long s */
		"\xe2\x84\xaa" "box.yaml",     /* Kelvin sign */
		"kbox.y\xe2\x80\x8b" "aml",    /* zero width space */
		"\xef\xbb\xbf" ".env",	       /* BOM */
	};
	serve((struct fs_passthrough_config){ 0 });
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		put(names[i], "SECRET=1");
		ck_assert_msg(lookup(FUSE_ROOT_ID, names[i], NULL) == -ENOENT,
			      "%s visible", names[i]);
		ck_assert_int_eq(create(FUSE_ROOT_ID, names[i]), -EACCES);
	}
	/* A mount's own patterns, which have no '*' at the end to cover
	 * what a host drops. */
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	const char *const pats[] = { "*.pem", "id_rsa" };
	serve((struct fs_passthrough_config){ .hidden.list = pats, .hidden.n = 2, .hidden.set = true });
	static const char *const own[] = { "key.pem.", "key.pem ", "ID_RSA. ",
					   "\xc4\xb1" "d_rsa" /* dotless i */ };
	for (size_t i = 0; i < sizeof own / sizeof *own; i++) {
		put(own[i], "k");
		ck_assert_msg(lookup(FUSE_ROOT_ID, own[i], NULL) == -ENOENT,
			      "%s visible", own[i]);
		ck_assert_int_eq(create(FUSE_ROOT_ID, own[i]), -EACCES);
	}
	/* Folding leaves other names alone. */
	put("notes.", "x");
	put("a b", "x");
	put("\xc5\xbf" "ample", "x");
	lookup_ok(FUSE_ROOT_ID, "notes.");
	lookup_ok(FUSE_ROOT_ID, "a b");
	lookup_ok(FUSE_ROOT_ID, "\xc5\xbf" "ample");
}
END_TEST

/* The copies editors and tools leave of the protected names are hidden
 * by default; similar names that are not copies stay visible. */
START_TEST(default_copies)
{
	static const char *const hidden[] = {
		".env~", "#secrets.env#", ".secrets.env.swp", "secrets.env.bak",
		".env.save", ".env.swp", "#.env#", ".#kbox.yaml", "kbox.yaml.orig",
		"secrets.env.~1~", ".kbox.yaml.un~", ".secrets.env.Xa81Bc", ".envrc",
		"secrets.env___jb_old___", "kbox.yaml.kate-swp",
	};
	static const char *const shown[] = { "env", "prod.env", "secrets",
					     "kbox.yml", "my-secrets.env", "x.env~" };
	serve((struct fs_passthrough_config){ 0 });
	for (size_t i = 0; i < sizeof hidden / sizeof *hidden; i++) {
		put(hidden[i], "SECRET=1");
		ck_assert_msg(lookup(FUSE_ROOT_ID, hidden[i], NULL) == -ENOENT,
			      "%s visible", hidden[i]);
	}
	for (size_t i = 0; i < sizeof shown / sizeof *shown; i++) {
		put(shown[i], "x");
		lookup_ok(FUSE_ROOT_ID, shown[i]);
	}
}
END_TEST

/* hidden_extra adds to the list in force: the defaults, or the mount's
 * own (even an empty one). */
START_TEST(hidden_extra_adds)
{
	const char *const extra[] = { "*.pem", "/top-only", "[a-c]*.key", "[]x]y" };
	put(".env", "SECRET=1");
	put("B.KEY", "k");
	put("]y", "k");
	put("d.key", "k");
	put("key.pem", "k");
	put("top-only", "t");
	put("a", "a");
	mkdir_host("sub");
	put("sub/top-only", "t");
	serve((struct fs_passthrough_config){ .hidden.extra = extra, .hidden.n_extra = 4 });
	/* First bytes of bracket expressions, ranges included, any case. */
	ck_assert_int_eq(lookup(FUSE_ROOT_ID, "B.KEY", NULL), -ENOENT);
	ck_assert_int_eq(lookup(FUSE_ROOT_ID, "]y", NULL), -ENOENT);
	lookup_ok(FUSE_ROOT_ID, "d.key");
	ck_assert_int_eq(lookup(FUSE_ROOT_ID, ".env", NULL), -ENOENT);
	ck_assert_int_eq(lookup(FUSE_ROOT_ID, "key.pem", NULL), -ENOENT);
	ck_assert_int_eq(lookup(FUSE_ROOT_ID, "top-only", NULL), -ENOENT);
	lookup_ok(lookup_ok(FUSE_ROOT_ID, "sub"), "top-only");
	lookup_ok(FUSE_ROOT_ID, "a");
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	serve((struct fs_passthrough_config){ .hidden.set = true, .hidden.extra = extra,
				   .hidden.n_extra = 1 });
	lookup_ok(FUSE_ROOT_ID, ".env");
	ck_assert_int_eq(lookup(FUSE_ROOT_ID, "key.pem", NULL), -ENOENT);
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	srv = NULL;
	fs = NULL;
	const char *const bad[] = { "/" };
	struct fs_passthrough_config c = { .root = dir, .hidden.extra = bad, .hidden.n_extra = 1 };
	ck_assert_int_eq(fs_passthrough_new(&c, &fs), -EINVAL);
	c.hidden.extra = NULL;
	ck_assert_int_eq(fs_passthrough_new(&c, &fs), -EINVAL);
	fs = NULL;
}
END_TEST

/* -H config/secret.json, then mv config cfg; cat cfg/secret.json: a
 * rename that would move a hidden path out from under its pattern is
 * refused, whichever ancestor moves and however. */
START_TEST(rename_keeps_path_patterns)
{
	const char *const pats[] = { "config/secret.json", "a/b/c/key", "*/deep.txt" };
	mkdir_host("config");
	put("config/secret.json", "k");
	put("config/other.json", "o");
	mkdir_host("a");
	mkdir_host("a/b");
	mkdir_host("a/b/c");
	put("a/b/c/key", "k");
	mkdir_host("a/x");
	mkdir_host("elsewhere");
	mkdir_host("d");
	put("d/deep.txt", "k");
	serve((struct fs_passthrough_config){ .hidden.list = pats, .hidden.n = 3, .hidden.set = true });
	uint64_t config = lookup_ok(FUSE_ROOT_ID, "config");
	uint64_t a = lookup_ok(FUSE_ROOT_ID, "a");
	uint64_t b = lookup_ok(a, "b");
	uint64_t el = lookup_ok(FUSE_ROOT_ID, "elsewhere");
	ck_assert_int_eq(lookup(config, "secret.json", NULL), -ENOENT);
	/* Every ancestor, to any other name or place. */
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "config", FUSE_ROOT_ID, "cfg", 0), -EACCES);
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "config", el, "config", 0), -EACCES);
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "a", FUSE_ROOT_ID, "z", 0), -EACCES);
	ck_assert_int_eq(rename2(a, "b", a, "y", 0), -EACCES);
	ck_assert_int_eq(rename2(b, "c", b, "d", 0), -EACCES);
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "config", FUSE_ROOT_ID, "cfg",
				 RENAME_NOREPLACE),
			 -EACCES);
	/* RENAME_EXCHANGE moves both: either side may be the ancestor. */
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "elsewhere", FUSE_ROOT_ID, "config",
				 RENAME_EXCHANGE),
			 -EACCES);
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "config", FUSE_ROOT_ID, "elsewhere",
				 RENAME_EXCHANGE),
			 -EACCES);
	ck_assert(exists_host("config/secret.json") && exists_host("a/b/c/key"));
	/* What keeps the pattern matching, or holds nothing it names, moves. */
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "d", FUSE_ROOT_ID, "e", 0), 0);
	uint64_t e = lookup_ok(FUSE_ROOT_ID, "e");
	ck_assert_int_eq(lookup(e, "deep.txt", NULL), -ENOENT);
	ck_assert_int_eq(rename2(config, "other.json", FUSE_ROOT_ID, "other.json", 0), 0);
	ck_assert_int_eq(rename2(a, "x", a, "w", 0), 0);
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "elsewhere", FUSE_ROOT_ID, "el2", 0), 0);
	/* A file has nothing below it: one named like an ancestor moves. */
	mkdir_host("f");
	put("f/config", "f");
	uint64_t f = lookup_ok(FUSE_ROOT_ID, "f");
	ck_assert_int_eq(rename2(f, "config", FUSE_ROOT_ID, "fileconfig", 0), 0);
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "fileconfig", f, "config", 0), 0);
	/* A leading wildcard keeps every directory at that depth where it
	 * is: nothing is looked for below it (it may be made later). */
	mkdir_host("fresh");
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "fresh", FUSE_ROOT_ID, "fresh2", 0), 0);
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "fresh2", a, "fresh", 0), -EACCES);
	/* Renaming a directory onto itself changes nothing. */
	ck_assert_int_eq(rename2(FUSE_ROOT_ID, "config", FUSE_ROOT_ID, "config", 0), 0);
}
END_TEST

/* A node the guest looked up keeps its fd; the host then renames the file
 * to a hidden name, into a hidden folder, or out of the mount: opening,
 * listing, linking and xattrs of that node check the name it has now. */
START_TEST(host_rename_rechecked)
{
	struct fuse_open_in op = { .flags = O_RDONLY };
	struct fuse_getattr_in ga = { 0 };
	struct fuse_link_in ln;
	struct fuse_getxattr_in gx = { .size = 64 };
	char out[128];
	put("notes", "SECRET=1");
	put("plain", "p");
	put("leaves", "l");
	mkdir_host("docs");
	put("docs/in", "i");
	mkdir_host("secrets.env.d");
	put("moving", "m");
	serve((struct fs_passthrough_config){ 0 });
	uint64_t notes = lookup_ok(FUSE_ROOT_ID, "notes");
	uint64_t plain = lookup_ok(FUSE_ROOT_ID, "plain");
	uint64_t leaves = lookup_ok(FUSE_ROOT_ID, "leaves");
	uint64_t docs = lookup_ok(FUSE_ROOT_ID, "docs");
	uint64_t moving = lookup_ok(FUSE_ROOT_ID, "moving");
	/* GETATTR opens each node's fd, which then follows the inode. */
	ck_assert_int_eq(call(FUSE_GETATTR, notes, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, plain, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, leaves, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, docs, &ga, sizeof ga, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_GETATTR, moving, &ga, sizeof ga, NULL, NULL), 0);
	rename_host("notes", ".env");
	rename_host("docs", ".env.d");
	rename_host("moving", "secrets.env.d/moving");
	snprintf(out, sizeof out, "%s.outside", dir);
	rename_host("leaves", out);
	ck_assert_int_eq(call(FUSE_OPEN, notes, &op, sizeof op, NULL, NULL), -ESTALE);
	ck_assert_int_eq(call(FUSE_OPEN, moving, &op, sizeof op, NULL, NULL), -ESTALE);
	ck_assert_int_eq(call(FUSE_OPEN, leaves, &op, sizeof op, NULL, NULL), -ESTALE);
	/* No OPENDIR (INIT took FUSE_NO_OPENDIR_SUPPORT): READDIR by node. */
	struct fuse_read_in rd = { .size = 4096 };
	ck_assert_int_eq(call(FUSE_READDIR, docs, &rd, sizeof rd, NULL, NULL), -ESTALE);
	ln.oldnodeid = notes;
	ck_assert_int_eq(call(FUSE_LINK, FUSE_ROOT_ID, &ln, sizeof ln, "copy", NULL), -ESTALE);
	ck_assert(!exists_host("copy"));
	ck_assert_int_eq(call(FUSE_GETXATTR, notes, &gx, sizeof gx, "user.x", NULL), -ESTALE);
	/* An inode that kept a visible name opens as before, and so does
	 * one the guest itself unlinked while holding it. */
	ck_assert_int_eq(call(FUSE_OPEN, plain, &op, sizeof op, NULL, NULL), 0);
	ck_assert_int_eq(call(FUSE_UNLINK, FUSE_ROOT_ID, NULL, 0, "plain", NULL), 0);
	ck_assert_int_eq(call(FUSE_OPEN, plain, &op, sizeof op, NULL, NULL), 0);
	ck_assert_int_eq(unlink(out), 0);
}
END_TEST

/* The pattern set on its own: names, paths, folded forms, renames. */
START_TEST(pattern_set)
{
	const char *const a[] = { ".env*", "/top", "config/*.json" };
	const char *const b[] = { "id_rsa" };
	const char *const bad[] = { "" };
	struct fsh *h;
	ck_assert_int_eq(fs_hidden_new(a, 3, b, 1, &h), 0);
	ck_assert(fs_hidden_needs_path(h));
	ck_assert_int_eq(fs_hidden_hidden(h, "", ".ENV.local"), 1);
	ck_assert_int_eq(fs_hidden_hidden(h, "x/y", "ID_RSA  .."), 1);
	ck_assert_int_eq(fs_hidden_hidden(h, "", "top"), 1);
	ck_assert_int_eq(fs_hidden_hidden(h, "sub", "top"), 0);
	ck_assert_int_eq(fs_hidden_hidden(h, "Config.", "A.JSON"), 1);
	ck_assert_int_eq(fs_hidden_hidden(h, "config/deeper", "a.json"), 0);
	ck_assert_int_eq(fs_hidden_hidden(h, "", "env"), 0);
	char longname[NAME_MAX + 2];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	ck_assert_int_eq(fs_hidden_hidden(h, "", longname), -ENAMETOOLONG);
	ck_assert_int_eq(fs_hidden_hidden(h, NULL, "a.json"), -ENAMETOOLONG);
	/* config's own renames: away, deeper, to a name that still matches. */
	ck_assert(fs_hidden_moves_hidden(h, "config", "cfg"));
	ck_assert(fs_hidden_moves_hidden(h, "CONFIG", "cfg"));
	ck_assert(fs_hidden_moves_hidden(h, "config", "x/config"));
	ck_assert(!fs_hidden_moves_hidden(h, "config", "config"));
	ck_assert(!fs_hidden_moves_hidden(h, "config", "CONFIG"));
	ck_assert(!fs_hidden_moves_hidden(h, "other", "cfg"));
	ck_assert(!fs_hidden_moves_hidden(h, "config/sub", "elsewhere"));
	fs_hidden_free(h);
	ck_assert_int_eq(fs_hidden_new(bad, 1, NULL, 0, &h), -EINVAL);
	ck_assert_int_eq(fs_hidden_new(NULL, 1, NULL, 0, &h), -EINVAL);
	ck_assert_int_eq(fs_hidden_new(NULL, 0, NULL, 0, &h), 0);
	ck_assert(!fs_hidden_needs_path(h));
	ck_assert_int_eq(fs_hidden_hidden(h, NULL, ".env"), 0);
	fs_hidden_free(h);
	fs_hidden_free(NULL);
}
END_TEST

Suite *fs_hidden_suite(void)
{
	return unit_suite_fixture("fs_hidden", "core", setup, teardown, 0,
				  pattern_set, case_insensitive,
				  folded_spellings, default_copies,
				  hidden_extra_adds, rename_keeps_path_patterns,
				  host_rename_rechecked);
}
