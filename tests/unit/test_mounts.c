/* `-v HOST:GUEST[:ro]` parsing and mounts_add: what is refused and why,
 * and which hidden list each mount's backend gets. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/sandbox/mounts.h"
#include "tests/lib/unit_suite.h"

static char dir[64], file[96], envf[96], pem[96];
static struct mounts ms;
static char err[512];

static void setup(void)
{
	strcpy(dir, "/tmp/kbox-mounts-unit.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof file, "%s/f", dir);
	FILE *f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	snprintf(envf, sizeof envf, "%s/.env", dir);
	snprintf(pem, sizeof pem, "%s/k.pem", dir);
	ck_assert_ptr_nonnull(f = fopen(envf, "w"));
	fclose(f);
	ck_assert_ptr_nonnull(f = fopen(pem, "w"));
	fclose(f);
	memset(&ms, 0, sizeof ms);
	err[0] = '\0';
}

static void teardown(void)
{
	unlink(file);
	unlink(envf);
	unlink(pem);
	rmdir(dir);
}

/* mounts_parse of host followed by rest. */
static int parse(const char *host, const char *rest)
{
	char arg[512];
	snprintf(arg, sizeof arg, "%s%s", host, rest);
	return mounts_parse(&ms, arg, err, sizeof err);
}

START_TEST(good)
{
	ck_assert_int_eq(parse(dir, ":/workspace"), 0);
	ck_assert_int_eq(parse(dir, ":/cfg/x/:ro"), 0);
	ck_assert_int_eq(parse(dir, ":/rw:rw"), 0);
	ck_assert_uint_eq(ms.n, 3);
	ck_assert_str_eq(ms.m[0].host, dir);
	ck_assert_str_eq(ms.m[0].guest, "/workspace");
	ck_assert(!ms.m[0].readonly);
	ck_assert_str_eq(ms.m[1].guest, "/cfg/x");
	ck_assert(ms.m[1].readonly);
	ck_assert(!ms.m[2].readonly);
	mounts_free(&ms);
}
END_TEST

START_TEST(host_with_colon)
{
	char sub[128];
	snprintf(sub, sizeof sub, "%s/a:b", dir);
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	ck_assert_int_eq(parse(sub, ":/w:ro"), 0);
	ck_assert_str_eq(ms.m[0].host, sub);
	ck_assert_str_eq(ms.m[0].guest, "/w");
	ck_assert(ms.m[0].readonly);
	rmdir(sub);
}
END_TEST

START_TEST(refused)
{
	static const char *const bad_guest[] = {
		"", ":", ":workspace", ":/", ":///", ":/a/../b", ":/a/./b", ":/a//b",
		":/a,b", ":/a b", ":/a\"b", ":/proc", ":/dev/x", ":/sys/", ":/a\tb",
		":/a:rx", ":/..",
	};
	for (size_t i = 0; i < sizeof bad_guest / sizeof *bad_guest; i++) {
		err[0] = '\0';
		ck_assert_msg(parse(dir, bad_guest[i]) < 0, "accepted %s", bad_guest[i]);
		ck_assert_msg(err[0] != '\0', "no message for %s", bad_guest[i]);
	}
	ck_assert_int_eq(mounts_parse(&ms, ":/w", err, sizeof err), -EINVAL);
	ck_assert_int_eq(parse(dir, "/missing:/w"), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "missing"));
	ck_assert_int_eq(parse(file, ":/w"), -ENOTDIR);
	ck_assert_ptr_nonnull(strstr(err, "not a directory"));
	char long_guest[MOUNTS_GUEST_MAX + 8];
	memset(long_guest, 'x', sizeof long_guest - 1);
	long_guest[0] = '/';
	long_guest[sizeof long_guest - 1] = '\0';
	char arg[512];
	snprintf(arg, sizeof arg, "%s:%s", dir, long_guest);
	ck_assert_int_eq(mounts_parse(&ms, arg, err, sizeof err), -ENAMETOOLONG);
	ck_assert_uint_eq(ms.n, 0);
}
END_TEST

START_TEST(limits)
{
	ck_assert_int_eq(parse(dir, ":/w"), 0);
	ck_assert_int_eq(parse(dir, ":/w/"), -EEXIST);
	for (unsigned i = 1; i < MOUNTS_MAX; i++) {
		char arg[256];
		snprintf(arg, sizeof arg, "%s:/m%u", dir, i);
		ck_assert_int_eq(mounts_parse(&ms, arg, err, sizeof err), 0);
	}
	ck_assert_int_eq(parse(dir, ":/one-more"), -E2BIG);
	ck_assert_ptr_nonnull(strstr(err, "too many"));
	ck_assert_uint_eq(ms.n, MOUNTS_MAX);
	mounts_free(&ms);
}
END_TEST

/* Serves mount m as mounts_attach would and looks name up in its root. */
static int lookup_in(const struct mount *m, const char *name)
{
	struct fs_passthrough_config fc;
	struct fs_passthrough *p;
	struct fuse_fs_entry e;
	mounts_fsp_config(m, 64, &fc);
	ck_assert_int_eq(fs_passthrough_new(&fc, &p), 0);
	int rc = fs_passthrough_ops.lookup(p, 1, name, &e);
	fs_passthrough_free(p);
	return rc;
}

START_TEST(add_with_hidden)
{
	static const char *const pats[] = { "*.pem", "secrets" };
	struct mount_spec sp = { .host = dir, .guest = "/workspace/", .readonly = true,
				 .hidden.list = pats, .hidden.n = 2, .hidden.set = true };
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), 0);
	ck_assert_uint_eq(ms.n, 1);
	ck_assert_str_eq(ms.m[0].guest, "/workspace");
	ck_assert(ms.m[0].readonly);

	struct fs_passthrough_config fc;
	mounts_fsp_config(&ms.m[0], 99, &fc);
	ck_assert_str_eq(fc.root, dir);
	ck_assert(fc.readonly);
	ck_assert_ptr_eq(fc.hidden.list, pats);
	ck_assert_uint_eq(fc.hidden.n, 2);
	ck_assert(fc.hidden.set);
	ck_assert_uint_eq(fc.max_fds, 99);
	/* The list replaces the defaults: .env shows, *.pem does not. */
	ck_assert_int_eq(lookup_in(&ms.m[0], "k.pem"), -ENOENT);
	ck_assert_int_eq(lookup_in(&ms.m[0], ".env"), 0);
	ck_assert_int_eq(lookup_in(&ms.m[0], "f"), 0);
	mounts_free(&ms);
}
END_TEST

/* hidden_extra adds to the defaults (no hidden list of its own). */
START_TEST(add_with_hidden_extra)
{
	static const char *const extra[] = { "*.pem" };
	struct mount_spec sp = { .host = dir, .guest = "/w", .hidden.extra = extra,
				 .hidden.n_extra = 1 };
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), 0);
	struct fs_passthrough_config fc;
	mounts_fsp_config(&ms.m[0], 99, &fc);
	ck_assert(!fc.hidden.set);
	ck_assert_ptr_eq(fc.hidden.extra, extra);
	ck_assert_uint_eq(fc.hidden.n_extra, 1);
	ck_assert_int_eq(lookup_in(&ms.m[0], "k.pem"), -ENOENT);
	ck_assert_int_eq(lookup_in(&ms.m[0], ".env"), -ENOENT);
	ck_assert_int_eq(lookup_in(&ms.m[0], "f"), 0);
	sp.guest = "/w2";
	sp.hidden.extra = NULL;
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), -EINVAL);
	mounts_free(&ms);
}
END_TEST

START_TEST(add_with_empty_hidden_list)
{
	struct mount_spec sp = { .host = dir, .guest = "/w", .hidden.set = true };
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), 0);
	struct fs_passthrough_config fc;
	mounts_fsp_config(&ms.m[0], 0, &fc);
	ck_assert(fc.hidden.set);
	ck_assert_uint_eq(fc.hidden.n, 0);
	ck_assert_int_eq(lookup_in(&ms.m[0], ".env"), 0);
	ck_assert_int_eq(lookup_in(&ms.m[0], "k.pem"), 0);
	mounts_free(&ms);
}
END_TEST

/* -v mounts and specs without a list keep the backend's defaults. */
START_TEST(default_hidden_list)
{
	ck_assert_int_eq(parse(dir, ":/v"), 0);
	struct mount_spec sp = { .host = dir, .guest = "/s" };
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), 0);
	for (unsigned i = 0; i < 2; i++) {
		struct fs_passthrough_config fc;
		mounts_fsp_config(&ms.m[i], 0, &fc);
		ck_assert(!fc.hidden.set);
		ck_assert_uint_eq(fc.hidden.n, 0);
		ck_assert_int_eq(lookup_in(&ms.m[i], ".env"), -ENOENT);
		ck_assert_int_eq(lookup_in(&ms.m[i], "k.pem"), 0);
	}
	mounts_free(&ms);
}
END_TEST

/* mounts_add shares -v's checks, with messages that name no option. */
START_TEST(add_refused)
{
	struct mount_spec sp = { .host = dir, .guest = "relative" };
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), -EINVAL);
	ck_assert_str_eq(err, "the guest path must be absolute, not 'relative'");
	sp.guest = "/proc/x";
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), -EINVAL);
	ck_assert_str_eq(err, "/proc belongs to the guest kernel; pick another guest path "
			      "than '/proc/x'");
	sp.guest = "/w";
	sp.host = "";
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), -EINVAL);
	ck_assert_str_eq(err, "the host path is empty");
	sp.host = file;
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), -ENOTDIR);
	sp.host = dir;
	sp.hidden.set = true;
	sp.hidden.n = 1;
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), -EINVAL);
	ck_assert_uint_eq(ms.n, 0);
	sp.hidden.n = 0;
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), 0);
	ck_assert_int_eq(parse(dir, ":/w"), -EEXIST);
	ck_assert_str_eq(err, "-v: two mounts on /w");
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), -EEXIST);
	ck_assert_str_eq(err, "two mounts on /w");
	for (unsigned i = 1; i < MOUNTS_MAX; i++) {
		char g[16];
		snprintf(g, sizeof g, "/m%u", i);
		sp.guest = g;
		ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), 0);
	}
	sp.guest = "/more";
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), -E2BIG);
	ck_assert_str_eq(err, "too many mounts (at most 8)");
	ck_assert_uint_eq(ms.n, MOUNTS_MAX);
	mounts_free(&ms);
}
END_TEST

/* The root image: read-only, nothing hidden, one only, and it takes a
 * slot. */
START_TEST(image)
{
	ck_assert_int_eq(mounts_set_image(&ms, "/nonexistent-kbox-image", err, sizeof err),
			 -ENOENT);
	ck_assert_int_eq(mounts_set_image(&ms, file, err, sizeof err), -ENOTDIR);
	ck_assert_int_eq(mounts_set_image(&ms, "", err, sizeof err), -EINVAL);
	ck_assert_uint_eq(ms.n, 0);
	ck_assert_int_eq(parse(dir, ":/w"), 0);
	ck_assert_int_eq(mounts_set_image(&ms, dir, err, sizeof err), 0);
	ck_assert_int_eq(mounts_set_image(&ms, dir, err, sizeof err), -EEXIST);
	ck_assert_uint_eq(ms.n, 2);
	const struct mount *m = &ms.m[1];
	ck_assert(m->root && !ms.m[0].root);
	ck_assert_str_eq(m->guest, "/");
	ck_assert_str_eq(m->host, dir);
	struct fs_passthrough_config fc;
	mounts_fsp_config(m, 0, &fc);
	ck_assert(fc.readonly);
	ck_assert(fc.hidden.set);
	ck_assert_uint_eq(fc.hidden.n, 0);
	ck_assert_int_eq(lookup_in(&ms.m[1], ".env"), 0);
	/* Guest root: kbox's own user for a folder, the image's owner for
	 * the image (root's here, the identity; a user's below). */
	struct idmap ids = mounts_ids(&ms.m[0]);
	ck_assert_uint_eq(ids.owner_uid, geteuid());
	ck_assert_uint_eq(ids.owner_gid, getegid());
	ids = mounts_ids(m);
	ck_assert_uint_eq(ids.owner_uid, geteuid());
	if (geteuid() == 0) {
		memset(&ms, 0, sizeof ms);
		ck_assert_int_eq(chown(dir, 1002, 1003), 0);
		ck_assert_int_eq(mounts_set_image(&ms, dir, err, sizeof err), 0);
		ids = mounts_ids(&ms.m[0]);
		ck_assert_uint_eq(ids.owner_uid, 1002);
		ck_assert_uint_eq(ids.owner_gid, 1003);
		ck_assert_int_eq(chown(dir, 0, 0), 0);
	}
	memset(&ms, 0, sizeof ms);
	ck_assert_int_eq(parse(dir, ":/w"), 0);
	ck_assert_int_eq(mounts_set_image(&ms, dir, err, sizeof err), 0);
	for (unsigned i = 2; i < MOUNTS_MAX; i++) {
		char g[16];
		snprintf(g, sizeof g, ":/m%u", i);
		ck_assert_int_eq(parse(dir, g), 0);
	}
	ck_assert_int_eq(parse(dir, ":/more"), -E2BIG);
	memset(&ms, 0, sizeof ms);
	for (unsigned i = 0; i < MOUNTS_MAX; i++) {
		char g[16];
		snprintf(g, sizeof g, ":/m%u", i);
		ck_assert_int_eq(parse(dir, g), 0);
	}
	ck_assert_int_eq(mounts_set_image(&ms, dir, err, sizeof err), -E2BIG);
	ck_assert_str_eq(err, "too many mounts (at most 8 with the image)");
	mounts_free(&ms);
}
END_TEST

Suite *mounts_suite(void)
{
	return unit_suite_fixture("mounts", "parse", setup, teardown, 0, good,
				  host_with_colon, refused, limits,
				  add_with_hidden, add_with_hidden_extra,
				  add_with_empty_hidden_list,
				  default_hidden_list, add_refused, image);
}
