/* kbox's own files against the shared folders (vmm/sandbox/hostfiles.c and
 * config_protect_mounts): paths through links, files not made yet, hard
 * links, the image root, and kbox's folders inside or around a share.
 * Real folders, files and links under /tmp. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/fs_passthrough.h"
#include "tests/lib/tmp_tree.h"
#include "tests/lib/unit_suite.h"
#include "vmm/sandbox/config.h"
#include "vmm/sandbox/hostfiles.h"
#include "vmm/sandbox/mounts.h"

static char top[64];

/* top/NAME, in a ring of 64 static buffers: enough for one test. */
static const char *at(const char *name)
{
	static char ring[64][PATH_MAX];
	static unsigned k;
	char *b = ring[k++ % 64];
	snprintf(b, PATH_MAX, "%s/%s", top, name);
	return b;
}

static void setup(void)
{
	ck_assert_int_eq(tmp_tree_make(top, sizeof top, "/tmp/hostfiles-XXXXXX"), 0);
	/* share/          a shared folder
	 * share/sub/      a folder in it
	 * out/            a folder outside it
	 * share/to-out -> ../out (a link in the share to outside)
	 * out/to-share -> ../share (a link outside to the share) */
	ck_assert_int_eq(mkdir(at("share"), 0700), 0);
	ck_assert_int_eq(mkdir(at("share/sub"), 0700), 0);
	ck_assert_int_eq(mkdir(at("out"), 0700), 0);
	ck_assert_int_eq(symlink("../out", at("share/to-out")), 0);
	ck_assert_int_eq(symlink(at("share"), at("out/to-share")), 0);
}

static void teardown(void)
{
	ck_assert_int_eq(tmp_tree_remove(top), 0);
}

static bool has_name(const struct hostfiles_walk *w, const char *n)
{
	for (size_t i = 0; i < w->n_names; i++)
		if (!strcmp(w->names[i], n))
			return true;
	return false;
}

START_TEST(walk_plain_missing_and_outside)
{
	struct hostfiles_root r;
	struct hostfiles_walk w;
	ck_assert_int_eq(hostfiles_root_of(at("share"), &r), 0);
	ck_assert_int_eq(tmp_tree_put(at("share/sub"), "audit.log", "x\n"), 0);
	ck_assert_int_eq(hostfiles_walk(at("share/sub/audit.log"), &r, 1, &w), 0);
	ck_assert_uint_eq(w.crossed, 1);
	ck_assert(w.exists);
	ck_assert_uint_eq(w.n_names, 1);
	ck_assert_str_eq(w.names[0], "audit.log");
	/* Not there yet: placed by its folder. */
	ck_assert_int_eq(hostfiles_walk(at("share/sub/new.yaml"), &r, 1, &w), 0);
	ck_assert_uint_eq(w.crossed, 1);
	ck_assert(!w.exists);
	ck_assert_str_eq(w.real, at("share/sub/new.yaml"));
	/* A folder that is missing too: the rest would be made in share. */
	ck_assert_int_eq(hostfiles_walk(at("share/nope/deeper/x.log"), &r, 1, &w), 0);
	ck_assert_uint_eq(w.crossed, 1);
	ck_assert_str_eq(w.names[0], "x.log");
	/* Outside, and a ".." that leaves the share. */
	ck_assert_int_eq(hostfiles_walk(at("out/x.log"), &r, 1, &w), 0);
	ck_assert_uint_eq(w.crossed, 0);
	ck_assert_int_eq(hostfiles_walk(at("share/sub/../../out/x.log"), &r, 1, &w), 0);
	ck_assert_uint_eq(w.crossed, 1); /* it went through the share */
	ck_assert_str_eq(w.real, at("out/x.log"));
	/* The share's folder itself, and an empty path. */
	ck_assert_int_eq(hostfiles_walk(at("share/"), &r, 1, &w), 0);
	ck_assert_uint_eq(w.crossed, 1);
	ck_assert_int_eq(hostfiles_walk("", &r, 1, &w), -EINVAL);
}
END_TEST

START_TEST(walk_through_links)
{
	struct hostfiles_root r;
	struct hostfiles_walk w;
	ck_assert_int_eq(hostfiles_root_of(at("share"), &r), 0);
	/* Another spelling of the share (a link outside it) is the share. */
	ck_assert_int_eq(hostfiles_walk(at("out/to-share/sub/learned.yaml"), &r, 1, &w), 0);
	ck_assert_uint_eq(w.crossed, 1);
	ck_assert_str_eq(w.real, at("share/sub/learned.yaml"));
	/* A link in the share to a folder outside: the file is outside, but
	 * the guest could replace the link, so the share counts. */
	ck_assert_int_eq(hostfiles_walk(at("share/to-out/k.log"), &r, 1, &w), 0);
	ck_assert_uint_eq(w.crossed, 1);
	ck_assert_str_eq(w.real, at("out/k.log"));
	/* The final name a link: both names, as written and the target's. */
	ck_assert_int_eq(tmp_tree_put(at("out"), "real.log", ""), 0);
	ck_assert_int_eq(symlink("../../out/real.log", at("share/sub/alias.log")), 0);
	ck_assert_int_eq(hostfiles_walk(at("share/sub/alias.log"), &r, 1, &w), 0);
	ck_assert_uint_eq(w.crossed, 1);
	ck_assert(w.exists);
	ck_assert(S_ISREG(w.st.st_mode));
	ck_assert(has_name(&w, "alias.log") && has_name(&w, "real.log"));
	/* A link outside to a file in the share. */
	ck_assert_int_eq(tmp_tree_put(at("share/sub"), "t.yaml", ""), 0);
	ck_assert_int_eq(symlink(at("share/sub/t.yaml"), at("out/t-link.yaml")), 0);
	ck_assert_int_eq(hostfiles_walk(at("out/t-link.yaml"), &r, 1, &w), 0);
	ck_assert_uint_eq(w.crossed, 1);
	ck_assert(has_name(&w, "t-link.yaml") && has_name(&w, "t.yaml"));
	/* A relative path, from inside the share. */
	char cwd[PATH_MAX];
	ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
	ck_assert_int_eq(chdir(at("share/sub")), 0);
	int rc = hostfiles_walk("audit.log", &r, 1, &w);
	ck_assert_int_eq(chdir(cwd), 0);
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(w.crossed, 1);
	/* A loop ends. */
	ck_assert_int_eq(symlink("loop2", at("out/loop1")), 0);
	ck_assert_int_eq(symlink("loop1", at("out/loop2")), 0);
	ck_assert_int_eq(hostfiles_walk(at("out/loop1"), &r, 1, &w), -ELOOP);
}
END_TEST

static bool has_pattern(const struct mount *m, const char *pat)
{
	for (size_t i = 0; i < m->hidden.n; i++)
		if (!strcmp(m->hidden.list[i], pat))
			return true;
	return false;
}

/* The command line's audit log and --learn file, the kernel log and a
 * file behind a link: their names are hidden in the share, with the
 * defaults kept. */
START_TEST(protect_hides_run_files)
{
	struct kbox_config c;
	struct mounts ms = { 0 };
	char err[512];
	const struct mount_spec sp = { .host = at("share"), .guest = "/w" };
	const struct mount_spec other = { .host = at("out"), .guest = "/o", .hidden.set = true };
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), 0);
	ck_assert_int_eq(mounts_add(&ms, &other, err, sizeof err), 0);
	ck_assert_int_eq(tmp_tree_put(at("share"), "audit.log", ""), 0);
	ck_assert_int_eq(symlink("sub/really.log", at("share/kernel.log")), 0);
	const struct config_hostfile extra[] = {
		{ at("share/audit.log"), "the audit log" },
		{ at("out/to-share/sub/learned.yaml"), "the --learn file" },
		{ at("share/kernel.log"), "the kernel log" },
		{ NULL, "nothing" },
	};
	config_init(&c);
	ck_assert_msg(config_protect_mounts(&c, NULL, extra, 4, &ms, err, sizeof err) == 0, "%s",
		      err);
	ck_assert(ms.m[0].hidden.set);
	ck_assert(has_pattern(&ms.m[0], "audit.log"));
	ck_assert(has_pattern(&ms.m[0], "learned.yaml"));
	ck_assert(has_pattern(&ms.m[0], "kernel.log"));
	ck_assert(has_pattern(&ms.m[0], "really.log"));
	ck_assert(has_pattern(&ms.m[0], FS_PASSTHROUGH_DEFAULT_HIDDEN[0])); /* the defaults stay */
	/* out: the learn file's path passes through out/to-share, a link
	 * the guest with /o could replace. */
	ck_assert(has_pattern(&ms.m[1], "learned.yaml"));
	ck_assert(!has_pattern(&ms.m[1], "audit.log"));
	ck_assert_uint_eq(c.n_protect, 2);
	mounts_free(&ms);
	config_free(&c);
}
END_TEST

/* A hard link cannot be hidden by name: refused, wherever the file is;
 * so is a file inside the image root. */
START_TEST(protect_refuses_hard_links_and_image_root)
{
	struct kbox_config c;
	struct mounts ms = { 0 };
	char err[512];
	const struct mount_spec sp = { .host = at("share"), .guest = "/w" };
	ck_assert_int_eq(mounts_add(&ms, &sp, err, sizeof err), 0);
	ck_assert_int_eq(tmp_tree_put(at("share"), "audit.log", ""), 0);
	ck_assert_int_eq(link(at("share/audit.log"), at("share/sub/innocent.txt")), 0);
	const struct config_hostfile in_share = { at("share/audit.log"), "the audit log" };
	config_init(&c);
	ck_assert_int_eq(config_protect_mounts(&c, NULL, &in_share, 1, &ms, err, sizeof err),
			 -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "the audit log"));
	ck_assert_ptr_nonnull(strstr(err, "2 names (hard links)"));
	/* Outside every share, but its other name could be in one. */
	ck_assert_int_eq(tmp_tree_put(at("out"), "learned.yaml", ""), 0);
	ck_assert_int_eq(link(at("out/learned.yaml"), at("out/other.yaml")), 0);
	const struct config_hostfile outside = { at("out/learned.yaml"), "the --learn file" };
	ck_assert_int_eq(config_protect_mounts(&c, NULL, &outside, 1, &ms, err, sizeof err),
			 -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "--learn"));
	/* Without a share nothing can reach it. */
	struct mounts none = { 0 };
	ck_assert_int_eq(config_protect_mounts(&c, NULL, &outside, 1, &none, err, sizeof err), 0);
	/* The image root hides nothing. */
	struct mounts img = { 0 };
	ck_assert_int_eq(mounts_set_image(&img, at("out"), err, sizeof err), 0);
	const struct config_hostfile in_root = { at("out/sub-missing.log"), "the kernel log" };
	ck_assert_int_eq(config_protect_mounts(&c, NULL, &in_root, 1, &img, err, sizeof err),
			 -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "image's root folder"));
	mounts_free(&img);
	mounts_free(&ms);
	config_free(&c);
}
END_TEST

START_TEST(folders_against_shares)
{
	char err[512];
	ck_assert_int_eq(mkdir(at("out/kbox"), 0700), 0);
	ck_assert_int_eq(mkdir(at("out/kbox/images"), 0700), 0);
	ck_assert_int_eq(mkdir(at("out/kbox/images/rootfs"), 0700), 0);
	ck_assert_int_eq(mkdir(at("out/kbox/ca"), 0700), 0);
	const struct hostfiles_folder data = { at("out/kbox"), "kbox's data folder" };
	const char *store = at("out/kbox/images");

	/* Unrelated folders. */
	struct hostfiles_share s = { at("share"), "/w", false };
	ck_assert_int_eq(hostfiles_check_folders(&data, 1, &s, 1, store, err, sizeof err), 0);
	/* A share holding the folder (a -v of its parent, of /). */
	s.host = at("out");
	ck_assert_int_eq(hostfiles_check_folders(&data, 1, &s, 1, store, err, sizeof err), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "kbox's data folder"));
	ck_assert_ptr_nonnull(strstr(err, "(/w in the guest)"));
	s.host = "/";
	ck_assert_int_eq(hostfiles_check_folders(&data, 1, &s, 1, store, err, sizeof err), -EPERM);
	/* Reached through a link in a share. */
	const struct hostfiles_folder via = { at("share/to-out/kbox"), "kbox's data folder" };
	s.host = at("share");
	ck_assert_int_eq(hostfiles_check_folders(&via, 1, &s, 1, store, err, sizeof err), -EPERM);
	/* Not made yet, but it would be made inside the share. */
	const struct hostfiles_folder later = { at("share/sub/state/kbox"), "kbox's runtime folder" };
	ck_assert_int_eq(hostfiles_check_folders(&later, 1, &s, 1, store, err, sizeof err), -EPERM);
	/* A share inside the folder. */
	s.host = at("out/kbox/ca");
	ck_assert_int_eq(hostfiles_check_folders(&data, 1, &s, 1, store, err, sizeof err), -EPERM);
	ck_assert_ptr_nonnull(strstr(err, "is inside kbox's data folder"));
	/* The image root may lie in the store, not elsewhere in the folder. */
	struct hostfiles_share root = { at("out/kbox/images/rootfs"), "/", true };
	ck_assert_int_eq(hostfiles_check_folders(&data, 1, &root, 1, store, err, sizeof err), 0);
	root.host = at("out/kbox/ca");
	ck_assert_int_eq(hostfiles_check_folders(&data, 1, &root, 1, store, err, sizeof err), -EPERM);
	/* A user share in the store is refused. */
	s.host = at("out/kbox/images/rootfs");
	ck_assert_int_eq(hostfiles_check_folders(&data, 1, &s, 1, store, err, sizeof err), -EPERM);
	/* A folder that cannot be resolved is none of the guest's business
	 * either; a share that vanished is reported. */
	const struct hostfiles_folder gone = { NULL, "none" };
	ck_assert_int_eq(hostfiles_check_folders(&gone, 1, &s, 1, store, err, sizeof err), 0);
	s.host = at("vanished");
	ck_assert_int_eq(hostfiles_check_folders(&data, 1, &s, 1, store, err, sizeof err), -ENOENT);
}
END_TEST

Suite *hostfiles_suite(void)
{
	return unit_suite_fixture("hostfiles", "core", setup, teardown, 0,
				  walk_plain_missing_and_outside,
				  walk_through_links, protect_hides_run_files,
				  protect_refuses_hard_links_and_image_root,
				  folders_against_shares);
}
