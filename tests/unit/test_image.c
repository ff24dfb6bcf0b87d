/* Images: the JSON reader, manifest parsing, names, whiteouts, layers
 * written by real libarchive and applied to a real directory, and the
 * store (import, list, resolve, remove) in a temporary directory. */
#include <archive.h>
#include <archive_entry.h>
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/image/image.h"
/* The loader's table only, not its renaming macros: this file calls
 * libarchive directly (its write side), linked. */
#define ARCHIVE_LIB_SELF
#include "vmm/image/archive_lib.h"
#include "tests/lib/unit_suite.h"

static char tmp[64];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
	(void)sb;
	(void)flag;
	(void)f;
	chmod(p, 0700);
	return remove(p);
}

static void setup(void)
{
	strcpy(tmp, "/tmp/kbox-image-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
	nftw(tmp, rm_one, 32, FTW_DEPTH | FTW_PHYS);
}

#define TOKS 256

static int parse(struct image_json *j, struct image_json_tok *t, const char *s)
{
	return image_json_parse(j, s, strlen(s), t, TOKS);
}

START_TEST(json_values)
{
	struct image_json j;
	struct image_json_tok t[TOKS];
	char buf[64];
	ck_assert_int_eq(parse(&j, t, " {\"a\": [1, -2.5e3, true, null], \"b\": {\"c\": \"x\\ty\"},"
				      " \"a\": 7} "), 0);
	int a = image_json_get(&j, 0, "a");
	ck_assert_int_ge(a, 0);
	ck_assert_int_eq(j.tok[a].type, IMAGE_JSON_ARR);
	ck_assert_uint_eq(j.tok[a].count, 4);
	int e = image_json_elem(&j, a, 1);
	ck_assert_int_eq(j.tok[e].type, IMAGE_JSON_NUM);
	ck_assert_int_eq(memcmp(j.src + j.tok[e].start, "-2.5e3", 6), 0);
	ck_assert_int_eq(image_json_elem(&j, a, 4), -ENOENT);
	int c = image_json_get(&j, image_json_get(&j, 0, "b"), "c");
	ck_assert_int_eq(image_json_str(&j, c, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "x\ty");
	ck_assert_int_eq(image_json_get(&j, 0, "zz"), -ENOENT);
	ck_assert_int_eq(image_json_get(&j, a, "a"), -ENOENT);
	ck_assert_int_eq(image_json_str(&j, a, buf, sizeof buf), -EINVAL);
}
END_TEST

START_TEST(json_unicode)
{
	struct image_json j;
	struct image_json_tok t[TOKS];
	char buf[32];
	ck_assert_int_eq(parse(&j, t, "\"\\u00e9\\ud83d\\ude00\\/\\\"\""), 0);
	ck_assert_int_eq(image_json_str(&j, 0, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "\xc3\xa9\xf0\x9f\x98\x80/\"");
	ck_assert_int_eq(image_json_str(&j, 0, buf, 4), -ENAMETOOLONG);
	ck_assert_int_eq(parse(&j, t, "\"a\\u0000b\""), 0);
	ck_assert_int_eq(image_json_str(&j, 0, buf, sizeof buf), -EINVAL);
}
END_TEST

START_TEST(json_refused)
{
	struct image_json j;
	struct image_json_tok t[TOKS];
	static const char *const bad[] = {
		"", "{", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "[1 2]", "\"abc", "\"a\nb\"",
		"\"\\x\"", "\"\\u12g4\"", "01x", "-", "1.", "1e", "tru", "nul", "[] []",
		"{1:2}", "\"\\u12",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		ck_assert_msg(parse(&j, t, bad[i]) == -EINVAL, "accepted '%s'", bad[i]);
	char deep[80];
	for (int d = 32; d <= 33; d++) {
		memset(deep, '[', (size_t)d);
		memset(deep + d, ']', (size_t)d);
		deep[2 * d] = 0;
		ck_assert_int_eq(parse(&j, t, deep), d == 32 ? 0 : -EINVAL);
	}
	ck_assert_int_eq(image_json_parse(&j, "[1,2,3]", 7, t, 3), -E2BIG);
}
END_TEST

#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"
#define H3 "3333333333333333333333333333333333333333333333333333333333333333"

START_TEST(docker_manifest)
{
	static struct image_manifest m[2];
	const char *s = "[{\"Config\":\"" H1 ".json\",\"RepoTags\":[\"docker.io/library/alpine:3.19\","
			"\"Bad Name\",\"localhost:5000/x/y\"],\"Layers\":[\"abc/layer.tar\","
			"\"./blobs/sha256/" H2 "\"]}]";
	ck_assert_int_eq(image_parse_docker_manifest(s, strlen(s), m, 2), 1);
	ck_assert_str_eq(m[0].config, H1 ".json");
	ck_assert_str_eq(m[0].config_sha, H1);
	ck_assert_uint_eq(m[0].ntags, 2);
	ck_assert_str_eq(m[0].tag[0], "alpine:3.19");
	ck_assert_str_eq(m[0].tag[1], "y:latest");
	ck_assert_uint_eq(m[0].nlayers, 2);
	ck_assert_str_eq(m[0].layer[0], "abc/layer.tar");
	ck_assert_str_eq(m[0].layer_sha[0], "");
	ck_assert_str_eq(m[0].layer[1], "blobs/sha256/" H2);
	ck_assert_str_eq(m[0].layer_sha[1], H2);
	const char *two = "[{\"Config\":\"a\",\"Layers\":[]},{\"Config\":\"b\",\"Layers\":[]}]";
	ck_assert_int_eq(image_parse_docker_manifest(two, strlen(two), m, 1), -E2BIG);
	ck_assert_int_eq(image_parse_docker_manifest(two, strlen(two), m, 2), 2);
	static const char *const bad[] = { "{}", "[]", "[{\"Layers\":[]}]", "[{\"Config\":\"a\"}]",
					   "[{\"Config\":\"/etc/passwd\",\"Layers\":[]}]",
					   "[{\"Config\":\"a\",\"Layers\":[1]}]" };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		ck_assert_msg(image_parse_docker_manifest(bad[i], strlen(bad[i]), m, 2) == -EINVAL,
			      "accepted %s", bad[i]);
}
END_TEST

START_TEST(oci_index)
{
	struct image_oci_desc d;
	const char *s =
		"{\"manifests\":["
		"{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:" H1
		"\",\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\"}},"
		"{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:" H3
		"\",\"platform\":{\"os\":\"unknown\",\"architecture\":\"unknown\"}},"
		"{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:" H2
		"\",\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"},"
		"\"annotations\":{\"org.opencontainers.image.ref.name\":\"v2\"}}]}";
	ck_assert_int_eq(image_parse_oci_index(s, strlen(s), &d), 0);
	ck_assert_str_eq(d.sha, H2);
	ck_assert_str_eq(d.ref, "v2");
	ck_assert_int_eq(d.is_index, 0);
	const char *nested = "{\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
			     "\"digest\":\"sha256:" H3 "\",\"annotations\":{\"io.containerd.image.name\":"
			     "\"docker.io/library/busybox:1\"}}]}";
	ck_assert_int_eq(image_parse_oci_index(nested, strlen(nested), &d), 0);
	ck_assert_int_eq(d.is_index, 1);
	ck_assert_str_eq(d.ref, "docker.io/library/busybox:1");
	const char *none = "{\"manifests\":[{\"digest\":\"sha512:" H1 "\"},"
			   "{\"mediaType\":\"text/plain\",\"digest\":\"sha256:" H1 "\"}]}";
	ck_assert_int_eq(image_parse_oci_index(none, strlen(none), &d), -ENOENT);
	ck_assert_int_eq(image_parse_oci_index("[]", 2, &d), -EINVAL);
}
END_TEST

START_TEST(oci_manifest)
{
	static struct image_manifest m;
	const char *s = "{\"config\":{\"digest\":\"sha256:" H1 "\"},\"layers\":[{\"digest\":\"sha256:" H2
			"\"},{\"digest\":\"sha256:" H3 "\"}]}";
	ck_assert_int_eq(image_parse_oci_manifest(s, strlen(s), &m), 0);
	ck_assert_str_eq(m.config, "blobs/sha256/" H1);
	ck_assert_str_eq(m.config_sha, H1);
	ck_assert_uint_eq(m.nlayers, 2);
	ck_assert_str_eq(m.layer[1], "blobs/sha256/" H3);
	ck_assert_str_eq(m.layer_sha[1], H3);
	const char *bad = "{\"config\":{\"digest\":\"sha256:ABC\"},\"layers\":[]}";
	ck_assert_int_eq(image_parse_oci_manifest(bad, strlen(bad), &m), -EINVAL);
	char ids[4][IMAGE_HEX_LEN + 1];
	const char *cfg = "{\"rootfs\":{\"diff_ids\":[\"sha256:" H1 "\",\"sha256:" H2 "\"]}}";
	ck_assert_int_eq(image_parse_diff_ids(cfg, strlen(cfg), ids, 4), 2);
	ck_assert_str_eq(ids[1], H2);
	ck_assert_int_eq(image_parse_diff_ids(cfg, strlen(cfg), ids, 1), -EINVAL);
}
END_TEST

START_TEST(names)
{
	char n[IMAGE_NAME_MAX + 1], t[IMAGE_TAG_MAX + 1], r[IMAGE_REF_MAX];
	ck_assert_int_eq(image_ref_parse("alpine", n, sizeof n, t, sizeof t), 0);
	ck_assert_str_eq(n, "alpine");
	ck_assert_str_eq(t, "latest");
	ck_assert_int_eq(image_ref_parse("my-img_2.x:V1.0-rc_1", n, sizeof n, t, sizeof t), 0);
	ck_assert_str_eq(t, "V1.0-rc_1");
	static const char *const bad[] = { "", ":x", "a:", "Alpine", "a/b", "-a", "a:-x", "a:b:c",
					   "../x", "a b", ".hidden.list" };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		ck_assert_msg(image_ref_parse(bad[i], n, sizeof n, t, sizeof t) == -EINVAL,
			      "accepted '%s'", bad[i]);
	char longname[IMAGE_NAME_MAX + 2];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	ck_assert_int_eq(image_ref_parse(longname, n, sizeof n, t, sizeof t), -EINVAL);
	ck_assert_int_eq(image_ref_from_repo("docker.io/library/alpine:3.19", r, sizeof r), 0);
	ck_assert_str_eq(r, "alpine:3.19");
	ck_assert_int_eq(image_ref_from_repo("ghcr.io/o/tool@sha256:" H1, r, sizeof r), 0);
	ck_assert_str_eq(r, "tool:latest");
	ck_assert_int_eq(image_ref_from_repo("x/", r, sizeof r), -EINVAL);
}
END_TEST

START_TEST(whiteouts)
{
	char w[64];
	ck_assert_int_eq(image_whiteout("file", w, sizeof w), 0);
	ck_assert_int_eq(image_whiteout(".wh.file", w, sizeof w), 1);
	ck_assert_str_eq(w, "file");
	ck_assert_int_eq(image_whiteout(".wh..wh..opq", w, sizeof w), 2);
	ck_assert_int_eq(image_whiteout(".wh..wh.plnk", w, sizeof w), 3);
	ck_assert_int_eq(image_whiteout(".wh.", w, sizeof w), -EINVAL);
	ck_assert_int_eq(image_whiteout(".wh..", w, sizeof w), -EINVAL);
	ck_assert_int_eq(image_whiteout(".wh...", w, sizeof w), -EINVAL);
	ck_assert_int_eq(image_whiteout(".wh.abcdef", w, 4), -EINVAL);
}
END_TEST

/* A layer tar written by libarchive: type 'f' file (DATA), 'd' dir, 'l'
 * symlink to DATA, 'h' hard link to DATA. */
struct ent {
	char type;
	const char *path, *data;
};

static void mk_layer(const char *path, const struct ent *e, size_t n)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	ck_assert_int_eq(archive_write_open_filename(a, path), ARCHIVE_OK);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *ae = archive_entry_new();
		archive_entry_set_pathname(ae, e[i].path);
		archive_entry_set_perm(ae, e[i].type == 'd' ? 0755 : 0644);
		archive_entry_set_mtime(ae, 1700000000, 0);
		switch (e[i].type) {
		case 'f':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_size(ae, (la_int64_t)strlen(e[i].data));
			break;
		case 'd': archive_entry_set_filetype(ae, AE_IFDIR); break;
		case 'l':
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_symlink(ae, e[i].data);
			break;
		default:
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_hardlink(ae, e[i].data);
			break;
		}
		ck_assert_int_eq(archive_write_header(a, ae), ARCHIVE_OK);
		if (e[i].type == 'f')
			archive_write_data(a, e[i].data, strlen(e[i].data));
		archive_entry_free(ae);
	}
	archive_write_close(a);
	archive_write_free(a);
}

static int exists(int root, const char *p)
{
	struct stat sb;
	return fstatat(root, p, &sb, AT_SYMLINK_NOFOLLOW) == 0;
}

static void slurp(int root, const char *p, char *buf, size_t len)
{
	int fd = openat(root, p, O_RDONLY | O_NOFOLLOW);
	ck_assert_int_ge(fd, 0);
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	ck_assert_int_ge(n, 0);
	buf[n] = 0;
}

static int mk_root(const char *name)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/%s", tmp, name);
	ck_assert_int_eq(mkdir(p, 0755), 0);
	int fd = open(p, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(fd, 0);
	return fd;
}

START_TEST(layers_whiteouts)
{
	char l1[PATH_MAX], l2[PATH_MAX], buf[64];
	snprintf(l1, sizeof l1, "%s/l1.tar", tmp);
	snprintf(l2, sizeof l2, "%s/l2.tar", tmp);
	const struct ent e1[] = {
		{ 'd', "d", NULL }, { 'f', "d/x", "x" }, { 'd', "d/sub", NULL },
		{ 'f', "d/sub/y", "y" }, { 'f', "a", "a1" }, { 'f', "b", "b" },
		{ 'h', "c", "a" }, { 'l', "s", "/etc/passwd" }, { 'f', "deep/er/f", "f" },
	};
	const struct ent e2[] = {
		{ 'f', "d/z", "z" }, { 'f', "d/.wh..wh..opq", "" }, { 'f', ".wh.b", "" },
		{ 'f', "a", "a2" }, { 'f', ".wh.nothing", "" }, { 'f', "deep/.wh.er", "" },
	};
	mk_layer(l1, e1, sizeof e1 / sizeof *e1);
	mk_layer(l2, e2, sizeof e2 / sizeof *e2);
	int root = mk_root("root");
	struct image_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	ck_assert_int_eq(image_apply_layer(&ctx, root, l1), 0);
	struct stat sa, sc;
	ck_assert_int_eq(fstatat(root, "a", &sa, 0), 0);
	ck_assert_int_eq(fstatat(root, "c", &sc, 0), 0);
	ck_assert_uint_eq(sa.st_ino, sc.st_ino);
	char t[64];
	ssize_t n = readlinkat(root, "s", t, sizeof t);
	ck_assert_int_eq(n, 11);
	ck_assert_int_eq(memcmp(t, "/etc/passwd", 11), 0);
	ck_assert_int_eq(image_apply_layer(&ctx, root, l2), 0);
	ck_assert_msg(ctx.err[0] == 0, "%s", ctx.err);
	ck_assert(!exists(root, "d/x"));
	ck_assert(!exists(root, "d/sub"));
	ck_assert(exists(root, "d/z"));
	ck_assert(!exists(root, "b"));
	ck_assert(!exists(root, ".wh.b"));
	ck_assert(!exists(root, "d/.wh..wh..opq"));
	ck_assert(!exists(root, "deep/er"));
	ck_assert(exists(root, "deep"));
	slurp(root, "a", buf, sizeof buf);
	ck_assert_str_eq(buf, "a2");
	slurp(root, "c", buf, sizeof buf);
	ck_assert_str_eq(buf, "a1");
	close(root);
}
END_TEST

START_TEST(layers_refused)
{
	char l[PATH_MAX], out[256];
	snprintf(out, sizeof out, "%s/outside", tmp);
	ck_assert_int_eq(mkdir(out, 0755), 0);
	const struct ent through[] = { { 'l', "link", out }, { 'f', "link/pwned", "x" } };
	const struct ent dotdot[] = { { 'f', "a/../../pwned", "x" } };
	const struct ent hard[] = { { 'h', "h", "../outside" } };
	const struct ent relink[] = { { 'l', "up", ".." }, { 'f', "up/pwned", "x" } };
	const struct { const struct ent *e; size_t n; const char *msg; } cases[] = {
		{ through, 2, "symlink" }, { dotdot, 1, "'..'" }, { hard, 1, "outside" },
		{ relink, 2, "symlink" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char name[16];
		snprintf(name, sizeof name, "r%zu", i);
		snprintf(l, sizeof l, "%s/evil%zu.tar", tmp, i);
		mk_layer(l, cases[i].e, cases[i].n);
		int root = mk_root(name);
		struct image_ctx ctx;
		memset(&ctx, 0, sizeof ctx);
		ck_assert_int_lt(image_apply_layer(&ctx, root, l), 0);
		ck_assert_msg(strstr(ctx.err, cases[i].msg), "case %zu: %s", i, ctx.err);
		close(root);
	}
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/pwned", out);
	ck_assert_int_ne(access(p, F_OK), 0);
	snprintf(p, sizeof p, "%s/pwned", tmp);
	ck_assert_int_ne(access(p, F_OK), 0);
}
END_TEST

START_TEST(layers_capped)
{
	char l[PATH_MAX];
	snprintf(l, sizeof l, "%s/big.tar", tmp);
	const struct ent e[] = { { 'f', "a", "0123456789" }, { 'f', "b", "0123456789" },
				 { 'f', "c", "0123456789" } };
	mk_layer(l, e, 3);
	int root = mk_root("entries");
	struct image_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	ctx.max_entries = 2;
	ck_assert_int_eq(image_apply_layer(&ctx, root, l), -EFBIG);
	ck_assert_ptr_nonnull(strstr(ctx.err, "more than 2 entries"));
	close(root);
	root = mk_root("bytes");
	memset(&ctx, 0, sizeof ctx);
	ctx.max_bytes = 25;
	ck_assert_int_eq(image_apply_layer(&ctx, root, l), -EFBIG);
	ck_assert_ptr_nonnull(strstr(ctx.err, "more than 25 bytes"));
	close(root);
}
END_TEST

static void count(void *arg, const struct image_info *in)
{
	(void)in;
	(*(int *)arg)++;
}

START_TEST(store_ops)
{
	char store[256], src[256], p[PATH_MAX], dir[512], dir2[512];
	snprintf(store, sizeof store, "%s/store", tmp);
	snprintf(src, sizeof src, "%s/src", tmp);
	setenv("KBOX_IMAGE_DIR", store, 1);
	ck_assert_int_eq(mkdir(src, 0755), 0);
	snprintf(p, sizeof p, "%s/file", src);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fputs("content\n", f);
	fclose(f);
	snprintf(p, sizeof p, "%s/link", src);
	ck_assert_int_eq(symlink("/etc/passwd", p), 0);
	struct image_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	ck_assert_int_eq(image_import(&ctx, src, "one"), 0);
	ck_assert_str_eq(ctx.ref, "one:latest");
	char id[IMAGE_HEX_LEN + 1];
	memcpy(id, ctx.id, sizeof id);
	memset(&ctx, 0, sizeof ctx);
	ck_assert_int_eq(image_import(&ctx, src, "two:x"), 0);
	ck_assert_str_eq(ctx.id, id);
	ck_assert_int_eq(ctx.existed, 1);
	int n = 0;
	ck_assert_int_eq(image_list(&ctx, count, &n), 0);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(image_resolve("one", dir, sizeof dir), 0);
	char prefix[8];
	memcpy(prefix, id, 7);
	prefix[7] = 0;
	ck_assert_int_eq(image_resolve(prefix, dir2, sizeof dir2), 0);
	ck_assert_str_eq(dir, dir2);
	ck_assert_int_eq(image_resolve("./rel", dir2, sizeof dir2), 0);
	ck_assert_str_eq(dir2, "./rel");
	ck_assert_int_eq(image_resolve("nope", dir2, sizeof dir2), -ENOENT);
	snprintf(p, sizeof p, "%s/link", dir);
	char t[32];
	ck_assert_int_eq(readlink(p, t, sizeof t), 11);
	ck_assert_int_eq(image_import(&ctx, src, "Bad/Name"), -EINVAL);
	memset(&ctx, 0, sizeof ctx);
	ck_assert_int_eq(image_remove(&ctx, "one"), 0);
	ck_assert_int_eq(access(dir, F_OK), 0);
	ck_assert_int_eq(image_remove(&ctx, "two:x"), 0);
	ck_assert_int_ne(access(dir, F_OK), 0);
	memset(&ctx, 0, sizeof ctx);
	ck_assert_int_eq(image_remove(&ctx, "two:x"), -ENOENT);
	unsetenv("KBOX_IMAGE_DIR");
}
END_TEST

/* kbox loads libarchive on first use: every function found, and each one
 * the library's own function of that name. */
START_TEST(archive_lib_loads)
{
	char err[320] = "";
	ck_assert_int_eq(archive_lib_load(err, sizeof err), 0);
	ck_assert_str_eq(err, "");
	ck_assert_int_eq(archive_lib_load(err, sizeof err), 0);
	/* By where each pointer lands (not by &f: in an executable built
	 * without PIE that is the executable's own PLT entry). */
#define CHECK_SAME(f)                                                                              \
	{                                                                                          \
		Dl_info in;                                                                        \
		ck_assert_int_ne(dladdr(*(void **)&archive_lib.f, &in), 0);                        \
		ck_assert_ptr_nonnull(in.dli_sname);                                               \
		ck_assert_str_eq(in.dli_sname, #f);                                                \
		ck_assert_ptr_nonnull(strstr(in.dli_fname, ARCHIVE_LIB_SONAME));                   \
	}
	ARCHIVE_LIB_FUNCS(CHECK_SAME)
#undef CHECK_SAME
}
END_TEST

Suite *image_suite(void)
{
	return unit_suite_fixture("image", "image", setup, teardown, 0,
				  json_values, json_unicode, json_refused,
				  docker_manifest, oci_index, oci_manifest,
				  names, whiteouts, layers_whiteouts,
				  layers_refused, layers_capped, store_ops, archive_lib_loads);
}
