/* Host <-> guest ids (devices/idmap.c), and what the FUSE server does with
 * them: attributes, chown, the owner and mode of what the guest makes, and
 * the FIFOs and sockets a read-write mount allows.  Raw FUSE requests on a
 * server over a fresh temporary directory.  The ownership cases need root
 * (to give files to other users, and to drop to one); without it they say
 * so and check only what an ordinary user can. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "devices/fs_passthrough.h"
#include "devices/fuse_server.h"
#include "devices/idmap.h"
#include "tests/lib/tmp_tree.h"
#include "tests/lib/unit_suite.h"

/* The user the tests pretend kbox runs as (kuser on the dev machines). */
#define OWNER 1002u
#define OTHER 4242u

static char dir[64];
static struct fs_passthrough *fs;
static struct fuse_server *srv;
static uint8_t req[64 * 1024];
static uint8_t rep[128 * 1024];
static uint64_t next_unique = 1;
/* The request's own ids, as the guest kernel fills fuse_in_header. */
static uint32_t req_uid, req_gid;

START_TEST(identity_when_owner_is_root)
{
	struct idmap m = { 0 };
	uint32_t h = 7;

	ck_assert_uint_eq(idmap_uid_to_guest(&m, 0), 0);
	ck_assert_uint_eq(idmap_uid_to_guest(&m, OWNER), OWNER);
	ck_assert_uint_eq(idmap_gid_to_guest(&m, 65534), 65534);
	ck_assert(idmap_uid_to_host(&m, 0, &h) && h == 0);
	ck_assert(idmap_gid_to_host(&m, OWNER, &h) && h == OWNER);
	ck_assert(idmap_uid_to_host(&m, 65534, &h) && h == 65534);
	/* chown's "no change" is never an id to give. */
	h = 7;
	ck_assert(!idmap_uid_to_host(&m, UINT32_MAX, &h));
	ck_assert(!idmap_gid_to_host(&m, UINT32_MAX, &h));
	ck_assert_uint_eq(h, 7);
}
END_TEST

START_TEST(owner_is_guest_root)
{
	struct idmap m = idmap_owner(OWNER, 100);
	uint32_t h = 7;

	/* Users. */
	ck_assert_uint_eq(idmap_uid_to_guest(&m, OWNER), 0);
	ck_assert_uint_eq(idmap_uid_to_guest(&m, 0), IDMAP_OVERFLOW);
	ck_assert_uint_eq(idmap_uid_to_guest(&m, OTHER), OTHER);
	ck_assert_uint_eq(idmap_uid_to_guest(&m, 100), 100);
	ck_assert(idmap_uid_to_host(&m, 0, &h) && h == OWNER);
	ck_assert(idmap_uid_to_host(&m, OTHER, &h) && h == OTHER);
	ck_assert(idmap_uid_to_host(&m, 65534, &h) && h == 65534);
	h = 7;
	ck_assert(!idmap_uid_to_host(&m, OWNER, &h));
	ck_assert_uint_eq(h, 7);
	/* Groups, by their own owner: uid OWNER is an ordinary gid. */
	ck_assert_uint_eq(idmap_gid_to_guest(&m, 100), 0);
	ck_assert_uint_eq(idmap_gid_to_guest(&m, 0), IDMAP_OVERFLOW);
	ck_assert_uint_eq(idmap_gid_to_guest(&m, OWNER), OWNER);
	ck_assert(idmap_gid_to_host(&m, 0, &h) && h == 100);
	ck_assert(idmap_gid_to_host(&m, OWNER, &h) && h == OWNER);
	ck_assert(!idmap_gid_to_host(&m, 100, &h));
	/* No two host ids but root and 65534 meet in one guest id. */
	for (uint32_t host = 0; host < 70000; host++) {
		uint32_t g = idmap_uid_to_guest(&m, host);
		if (host != 0 && host != 65534) {
			ck_assert(idmap_uid_to_host(&m, g, &h));
			ck_assert_uint_eq(h, host);
		}
	}
}
END_TEST

static char *path_of(const char *name)
{
	static char p[2][160];
	static int k;
	k ^= 1;
	snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
	return p[k];
}

static void setup(void)
{
	ck_assert_int_eq(tmp_tree_make(dir, sizeof dir, "/tmp/kbox-idmap-unit.XXXXXX"),
			 0);
	ck_assert_int_eq(tmp_tree_put(dir, "mine", "m"), 0);
	ck_assert_int_eq(tmp_tree_put(dir, "roots", "r"), 0);
	ck_assert_int_eq(tmp_tree_put(dir, "others", "o"), 0);
	req_uid = req_gid = 0;
	umask(022);
}

static void teardown(void)
{
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	srv = NULL;
	fs = NULL;
	ck_assert_int_eq(tmp_tree_remove(dir), 0);
}

/* The tree as the user OWNER would have it, one file root's and one
 * another user's; root only. */
static void own_tree(void)
{
	ck_assert_int_eq(chown(dir, OWNER, OWNER), 0);
	ck_assert_int_eq(chown(path_of("mine"), OWNER, OWNER), 0);
	ck_assert_int_eq(chown(path_of("others"), OTHER, OTHER), 0);
}

static void serve_ids(struct idmap ids)
{
	struct fs_passthrough_config c = { .root = dir, .hidden.set = true };
	struct fuse_server_config sc = { .entry_timeout = 1,
					 .attr_timeout = 1,
					 .ids = ids };
	ck_assert_int_eq(fs_passthrough_new(&c, &fs), 0);
	ck_assert_int_eq(fuse_server_new(&fs_passthrough_ops, fs, &sc, &srv), 0);
}

static int call(uint32_t op, uint64_t nodeid, const void *arg, size_t arglen,
		const char *name)
{
	struct fuse_in_header h = { 0 };
	struct fuse_out_header oh;
	size_t len = sizeof h;

	if (arglen)
		memcpy(req + len, arg, arglen);
	len += arglen;
	if (name) {
		memcpy(req + len, name, strlen(name) + 1);
		len += strlen(name) + 1;
	}
	h.len = (uint32_t)len;
	h.opcode = op;
	h.unique = next_unique++;
	h.nodeid = nodeid;
	h.uid = req_uid;
	h.gid = req_gid;
	memcpy(req, &h, sizeof h);
	ssize_t n = fuse_server_handle_buf(srv, req, len, rep, sizeof rep);
	ck_assert_int_ge(n, (ssize_t)sizeof oh);
	memcpy(&oh, rep, sizeof oh);
	ck_assert_uint_eq(oh.len, (uint32_t)n);
	return oh.error;
}

static const void *body(void)
{
	return rep + sizeof(struct fuse_out_header);
}

static void start(struct idmap ids)
{
	struct fuse_init_in in = { .major = 7, .minor = 38,
				   .max_readahead = 1 << 17,
				   .flags = 0xffffffffu };
	serve_ids(ids);
	ck_assert_int_eq(call(FUSE_INIT, 0, &in, sizeof in, NULL), 0);
}

/* The entry of a LOOKUP that must succeed. */
static struct fuse_entry_out lookup_ok(const char *name)
{
	struct fuse_entry_out e;
	ck_assert_int_eq(call(FUSE_LOOKUP, FUSE_ROOT_ID, NULL, 0, name), 0);
	memcpy(&e, body(), sizeof e);
	return e;
}

static struct stat host_stat(const char *name)
{
	struct stat st;
	ck_assert_int_eq(lstat(path_of(name), &st), 0);
	return st;
}

static int chown_req(uint64_t node, uint32_t valid, uint32_t uid, uint32_t gid,
		     uint32_t mode)
{
	struct fuse_setattr_in sa = { .valid = valid, .uid = uid, .gid = gid,
				      .mode = mode };
	return call(FUSE_SETATTR, node, &sa, sizeof sa, NULL);
}

START_TEST(attributes_are_mapped)
{
	if (geteuid() != 0) {
		puts("idmap attributes_are_mapped: not root, ownership not checked");
		return;
	}
	own_tree();
	start(idmap_owner(OWNER, OWNER));
	struct fuse_entry_out e = lookup_ok("mine");
	ck_assert_uint_eq(e.attr.uid, 0);
	ck_assert_uint_eq(e.attr.gid, 0);
	e = lookup_ok("roots");
	ck_assert_uint_eq(e.attr.uid, IDMAP_OVERFLOW);
	ck_assert_uint_eq(e.attr.gid, IDMAP_OVERFLOW);
	e = lookup_ok("others");
	ck_assert_uint_eq(e.attr.uid, OTHER);
	struct fuse_getattr_in ga = { 0 };
	ck_assert_int_eq(call(FUSE_GETATTR, FUSE_ROOT_ID, &ga, sizeof ga, NULL), 0);
	ck_assert_uint_eq(((const struct fuse_attr_out *)body())->attr.uid, 0);
	/* READDIRPLUS entries carry the same attributes. */
	ck_assert_int_eq(tmp_tree_put(dir, "fresh", "f"), 0);
	ck_assert_int_eq(chown(path_of("fresh"), OWNER, OTHER), 0);
	struct fuse_read_in rd = { .size = 64 * 1024 };
	ck_assert_int_eq(call(FUSE_READDIRPLUS, FUSE_ROOT_ID, &rd, sizeof rd, NULL), 0);
	size_t len = ((const struct fuse_out_header *)rep)->len - sizeof(struct fuse_out_header);
	unsigned seen = 0;
	for (size_t off = 0; off < len;) {
		const struct fuse_direntplus *d =
			(const void *)((const uint8_t *)body() + off);
		if (d->dirent.namelen == 4 && memcmp(d->dirent.name, "mine", 4) == 0 &&
		    d->entry_out.nodeid == 0)
			seen++; /* held already: no attributes, by design */
		if (d->dirent.namelen == 5 && memcmp(d->dirent.name, "fresh", 5) == 0 &&
		    d->entry_out.attr.uid == 0 && d->entry_out.attr.gid == OTHER)
			seen++;
		off += FUSE_DIRENTPLUS_SIZE(d);
	}
	ck_assert_uint_eq(seen, 2);

	/* The identity map (kbox as root) shows the host's ids. */
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	start((struct idmap){ 0 });
	ck_assert_uint_eq(lookup_ok("mine").attr.uid, OWNER);
	ck_assert_uint_eq(lookup_ok("roots").attr.uid, 0);
}
END_TEST

START_TEST(chown_maps_back_or_refuses)
{
	if (geteuid() != 0) {
		puts("idmap chown_maps_back_or_refuses: not root, not checked");
		return;
	}
	own_tree();
	start(idmap_owner(OWNER, OWNER));
	uint64_t others = lookup_ok("others").nodeid;
	uint64_t mine = lookup_ok("mine").nodeid;
	/* Guest root is the owner on the host. */
	ck_assert_int_eq(chown_req(others, FATTR_UID | FATTR_GID, 0, 0, 0), 0);
	ck_assert_uint_eq(((const struct fuse_attr_out *)body())->attr.uid, 0);
	ck_assert_uint_eq(host_stat("others").st_uid, OWNER);
	ck_assert_uint_eq(host_stat("others").st_gid, OWNER);
	/* Another id is itself (the server runs as root here: it can give
	 * it). */
	ck_assert_int_eq(chown_req(mine, FATTR_UID, OTHER, 0, 0), 0);
	ck_assert_uint_eq(host_stat("mine").st_uid, OTHER);
	ck_assert_uint_eq(((const struct fuse_attr_out *)body())->attr.uid, OTHER);
	/* The owner's own number has no host id: EPERM, and the mode that
	 * came in the same request is not applied either. */
	mode_t before = host_stat("mine").st_mode;
	ck_assert_int_eq(chown_req(mine, FATTR_UID | FATTR_MODE, OWNER, 0, 0600),
			 -EPERM);
	ck_assert_int_eq(chown_req(mine, FATTR_GID | FATTR_MODE, 0, OWNER, 0600),
			 -EPERM);
	ck_assert_uint_eq(host_stat("mine").st_uid, OTHER);
	ck_assert_uint_eq(host_stat("mine").st_mode, before);
	ck_assert_int_eq(chown_req(mine, FATTR_UID, UINT32_MAX, 0, 0), -EPERM);
}
END_TEST

/* kbox as an ordinary user: the test process becomes OWNER, and the host
 * refuses what that user could not do, with nothing changed. */
START_TEST(chown_as_ordinary_user)
{
	if (geteuid() != 0) {
		puts("idmap chown_as_ordinary_user: not root, cannot become a user");
		return;
	}
	own_tree();
	ck_assert_int_eq(chown(path_of("roots"), OWNER, OWNER), 0);
	ck_assert_int_eq(setgroups(0, NULL), 0);
	ck_assert_int_eq(setresgid(OWNER, OWNER, OWNER), 0);
	ck_assert_int_eq(setresuid(OWNER, OWNER, OWNER), 0);
	start(idmap_owner(OWNER, OWNER));
	uint64_t mine = lookup_ok("mine").nodeid;
	uint64_t others = lookup_ok("others").nodeid;
	mode_t before = host_stat("mine").st_mode;
	/* To root (the guest's own id, the owner on the host): fine. */
	ck_assert_int_eq(chown_req(mine, FATTR_UID | FATTR_GID, 0, 0, 0), 0);
	/* To another user: the host says EPERM, mode untouched. */
	ck_assert_int_eq(chown_req(mine, FATTR_UID | FATTR_MODE, OTHER, 0, 0600),
			 -EPERM);
	ck_assert_uint_eq(host_stat("mine").st_uid, OWNER);
	ck_assert_uint_eq(host_stat("mine").st_mode, before);
	/* Another user's file cannot be taken. */
	ck_assert_int_eq(chown_req(others, FATTR_UID, 0, 0, 0), -EPERM);
	ck_assert_uint_eq(host_stat("others").st_uid, OTHER);
	/* What guest root makes is the user's on the host, root's in the
	 * guest. */
	struct fuse_mkdir_in mk = { .mode = 0755 };
	ck_assert_int_eq(call(FUSE_MKDIR, FUSE_ROOT_ID, &mk, sizeof mk, "d"), 0);
	ck_assert_uint_eq(((const struct fuse_entry_out *)body())->attr.uid, 0);
	ck_assert_uint_eq(host_stat("d").st_uid, OWNER);
	/* A guest user other than root: the host cannot give it the file,
	 * which stays the user's (guest root's), and the create works. */
	req_uid = req_gid = OTHER;
	struct fuse_create_in cr = { .flags = O_WRONLY, .mode = S_IFREG | 0640 };
	ck_assert_int_eq(call(FUSE_CREATE, FUSE_ROOT_ID, &cr, sizeof cr, "f"), 0);
	ck_assert_uint_eq(((const struct fuse_entry_out *)body())->attr.uid, 0);
	ck_assert_uint_eq(host_stat("f").st_uid, OWNER);
	ck_assert_uint_eq(host_stat("f").st_mode & 07777, 0640);
}
END_TEST

START_TEST(new_nodes_get_the_request_owner)
{
	if (geteuid() != 0) {
		puts("idmap new_nodes_get_the_request_owner: not root, not checked");
		return;
	}
	own_tree();
	start(idmap_owner(OWNER, OWNER));
	/* Guest root: the owner on the host (the server, root here, made it
	 * root's and gives it away). */
	struct fuse_create_in cr = { .flags = O_WRONLY, .mode = S_IFREG | 0644 };
	ck_assert_int_eq(call(FUSE_CREATE, FUSE_ROOT_ID, &cr, sizeof cr, "r"), 0);
	const struct fuse_entry_out *e = body();
	ck_assert_uint_eq(e->attr.uid, 0);
	ck_assert_uint_eq(e->attr.gid, 0);
	ck_assert_uint_eq(host_stat("r").st_uid, OWNER);
	ck_assert_uint_eq(host_stat("r").st_gid, OWNER);
	/* Guest user OTHER: host user OTHER, for every kind of node. */
	req_uid = req_gid = OTHER;
	ck_assert_int_eq(call(FUSE_CREATE, FUSE_ROOT_ID, &cr, sizeof cr, "o"), 0);
	ck_assert_uint_eq(host_stat("o").st_uid, OTHER);
	struct fuse_mkdir_in mk = { .mode = 0755 };
	ck_assert_int_eq(call(FUSE_MKDIR, FUSE_ROOT_ID, &mk, sizeof mk, "od"), 0);
	ck_assert_uint_eq(((const struct fuse_entry_out *)body())->attr.uid, OTHER);
	ck_assert_uint_eq(host_stat("od").st_gid, OTHER);
	char sl[16] = "ol\0target";
	ck_assert_int_eq(call(FUSE_SYMLINK, FUSE_ROOT_ID, sl, 10, NULL), 0);
	ck_assert_uint_eq(host_stat("ol").st_uid, OTHER);
	struct fuse_mknod_in mn = { .mode = S_IFIFO | 0644 };
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "op"), 0);
	ck_assert_uint_eq(host_stat("op").st_uid, OTHER);
	/* A create that finds an existing file changes none of it. */
	req_uid = req_gid = 0;
	cr.mode = S_IFREG | 0777;
	ck_assert_int_eq(call(FUSE_CREATE, FUSE_ROOT_ID, &cr, sizeof cr, "o"), 0);
	ck_assert_uint_eq(host_stat("o").st_uid, OTHER);
	ck_assert_uint_eq(host_stat("o").st_mode & 07777, 0644);
	/* A setgid directory gives its group, whoever asks. */
	ck_assert_int_eq(mkdir(path_of("sg"), 0775), 0);
	ck_assert_int_eq(chown(path_of("sg"), OWNER, 777), 0);
	ck_assert_int_eq(chmod(path_of("sg"), 02775), 0);
	uint64_t sg = lookup_ok("sg").nodeid;
	ck_assert_int_eq(call(FUSE_MKDIR, sg, &mk, sizeof mk, "in"), 0);
	ck_assert_uint_eq(host_stat("sg/in").st_gid, 777);
	ck_assert_uint_eq(host_stat("sg/in").st_uid, OWNER);
	/* The owner's own number as a request uid has no host id: the node
	 * keeps what the host gave it. */
	req_uid = req_gid = OWNER;
	ck_assert_int_eq(call(FUSE_MKDIR, FUSE_ROOT_ID, &mk, sizeof mk, "u"), 0);
	ck_assert_uint_eq(host_stat("u").st_uid, 0);
	ck_assert_uint_eq(((const struct fuse_entry_out *)body())->attr.uid,
			  IDMAP_OVERFLOW);
}
END_TEST

/* The guest kernel applied the guest's umask: the host process's (022
 * here) must not apply again. */
START_TEST(umask_applied_once)
{
	start((struct idmap){ 0 });
	struct fuse_mkdir_in mk = { .mode = 0777 };
	ck_assert_int_eq(call(FUSE_MKDIR, FUSE_ROOT_ID, &mk, sizeof mk, "d"), 0);
	ck_assert_uint_eq(((const struct fuse_entry_out *)body())->attr.mode & 07777,
			  0777);
	ck_assert_uint_eq(host_stat("d").st_mode & 07777, 0777);
	mk.mode = 01777;
	ck_assert_int_eq(call(FUSE_MKDIR, FUSE_ROOT_ID, &mk, sizeof mk, "t"), 0);
	ck_assert_uint_eq(host_stat("t").st_mode & 07777, 01777);
	struct fuse_create_in cr = { .flags = O_WRONLY, .mode = S_IFREG | 0620 };
	ck_assert_int_eq(call(FUSE_CREATE, FUSE_ROOT_ID, &cr, sizeof cr, "c"), 0);
	ck_assert_uint_eq(host_stat("c").st_mode & 07777, 0620);
	cr.mode = S_IFREG | 0666;
	ck_assert_int_eq(call(FUSE_CREATE, FUSE_ROOT_ID, &cr, sizeof cr, "c2"), 0);
	ck_assert_uint_eq(((const struct fuse_entry_out *)body())->attr.mode & 07777,
			  0666);
	ck_assert_uint_eq(host_stat("c2").st_mode & 07777, 0666);
	/* setuid is still stripped. */
	cr.mode = S_IFREG | 04777;
	ck_assert_int_eq(call(FUSE_CREATE, FUSE_ROOT_ID, &cr, sizeof cr, "s"), 0);
	ck_assert_uint_eq(host_stat("s").st_mode & 07777, 0777);
	struct fuse_mknod_in mn = { .mode = S_IFREG | 06777 };
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "n"), 0);
	ck_assert_uint_eq(host_stat("n").st_mode & 07777, 0777);
	mn.mode = S_IFIFO | 0666;
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "p"), 0);
	ck_assert_uint_eq(host_stat("p").st_mode & 07777, 0666);
	/* A mode the guest masked itself stays as sent. */
	mk.mode = 0750;
	ck_assert_int_eq(call(FUSE_MKDIR, FUSE_ROOT_ID, &mk, sizeof mk, "m"), 0);
	ck_assert_uint_eq(host_stat("m").st_mode & 07777, 0750);
}
END_TEST

START_TEST(fifos_and_sockets)
{
	start((struct idmap){ 0 });
	struct fuse_mknod_in mn = { .mode = S_IFIFO | 0644, .rdev = 0x103 };
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "p"), 0);
	const struct fuse_entry_out *e = body();
	ck_assert(S_ISFIFO(e->attr.mode));
	ck_assert_uint_eq(e->attr.rdev, 0);
	uint64_t p = e->nodeid;
	ck_assert(S_ISFIFO(host_stat("p").st_mode));
	mn.mode = S_IFSOCK | 0755;
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "s"), 0);
	ck_assert(S_ISSOCK(host_stat("s").st_mode));
	/* Devices stay refused. */
	mn.mode = S_IFCHR | 0644;
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "c"), -EPERM);
	mn.mode = S_IFBLK | 0644;
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "b"), -EPERM);
	mn.mode = 0170000 | 0644;
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "x"), -EPERM);
	ck_assert_int_eq(access(path_of("c"), F_OK), -1);
	/* The server never opens one (with no writer an open would block a
	 * server thread for good): the guest kernel serves FIFOs itself. */
	struct fuse_open_in op = { .flags = O_RDONLY };
	ck_assert_int_eq(call(FUSE_OPEN, p, &op, sizeof op, NULL), -EACCES);
	op.flags = O_WRONLY;
	ck_assert_int_eq(call(FUSE_OPEN, p, &op, sizeof op, NULL), -EACCES);
	struct fuse_create_in cr = { .flags = O_RDONLY, .mode = S_IFREG | 0644 };
	ck_assert_int_eq(call(FUSE_CREATE, FUSE_ROOT_ID, &cr, sizeof cr, "p"), -EACCES);
	/* chmod of a FIFO the host made works as on a file; a device's
	 * mode stays out of reach. */
	ck_assert_int_eq(mkfifo(path_of("hostfifo"), 0600), 0);
	uint64_t hf = lookup_ok("hostfifo").nodeid;
	ck_assert_int_eq(chown_req(hf, FATTR_MODE, 0, 0, 0640), 0);
	ck_assert_uint_eq(((const struct fuse_attr_out *)body())->attr.mode & 07777, 0640);
	ck_assert_uint_eq(host_stat("hostfifo").st_mode & 07777, 0640);
	ck_assert_int_eq(chown_req(hf, FATTR_MODE, 0, 0, 04755), 0);
	ck_assert_uint_eq(host_stat("hostfifo").st_mode & 07777, 0755);
	if (geteuid() == 0) {
		ck_assert_int_eq(mknod(path_of("hostnull"), S_IFCHR | 0600, makedev(1, 3)), 0);
		uint64_t hn = lookup_ok("hostnull").nodeid;
		ck_assert_int_eq(chown_req(hn, FATTR_MODE, 0, 0, 0666), -EOPNOTSUPP);
		ck_assert_uint_eq(host_stat("hostnull").st_mode & 07777, 0600);
	}
	/* Read-only mounts make none. */
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	struct fs_passthrough_config c = { .root = dir, .readonly = true };
	ck_assert_int_eq(fs_passthrough_new(&c, &fs), 0);
	ck_assert_int_eq(fuse_server_new(&fs_passthrough_ops, fs, NULL, &srv), 0);
	struct fuse_init_in in = { .major = 7, .minor = 38 };
	ck_assert_int_eq(call(FUSE_INIT, 0, &in, sizeof in, NULL), 0);
	mn.mode = S_IFIFO | 0644;
	ck_assert_int_eq(call(FUSE_MKNOD, FUSE_ROOT_ID, &mn, sizeof mn, "q"), -EROFS);
}
END_TEST

/* Whoever runs the tests (root in CI, a user on a laptop) is guest root,
 * as kbox makes it: their files are root's, what guest root makes is
 * theirs, and a chown only root could do is refused unless they are. */
START_TEST(running_user_is_guest_root)
{
	uid_t me = geteuid();
	gid_t my_gid = getegid();
	start(idmap_owner(me, my_gid));
	struct fuse_entry_out e = lookup_ok("mine");
	ck_assert_uint_eq(e.attr.uid, 0);
	ck_assert_uint_eq(e.attr.gid, 0);
	struct fuse_create_in cr = { .flags = O_WRONLY, .mode = S_IFREG | 0664 };
	ck_assert_int_eq(call(FUSE_CREATE, FUSE_ROOT_ID, &cr, sizeof cr, "n"), 0);
	ck_assert_uint_eq(((const struct fuse_entry_out *)body())->attr.uid, 0);
	ck_assert_uint_eq(host_stat("n").st_uid, me);
	ck_assert_uint_eq(host_stat("n").st_mode & 07777, 0664);
	int rc = chown_req(e.nodeid, FATTR_UID | FATTR_MODE, OTHER, 0, 0600);
	if (me == 0) {
		ck_assert_int_eq(rc, 0);
		ck_assert_uint_eq(host_stat("mine").st_uid, OTHER);
	} else {
		ck_assert_int_eq(rc, -EPERM);
		ck_assert_uint_eq(host_stat("mine").st_uid, me);
		ck_assert_uint_eq(host_stat("mine").st_mode & 07777, 0644);
	}
}
END_TEST

Suite *idmap_suite(void)
{
	Suite *s = suite_create("idmap");

	unit_suite_case(s, "map", identity_when_owner_is_root, owner_is_guest_root);
	unit_suite_case_fixture(s, "server", setup, teardown, 0,
				running_user_is_guest_root, attributes_are_mapped,
				chown_maps_back_or_refuses, chown_as_ordinary_user,
				new_nodes_get_the_request_owner, umask_applied_once,
				fifos_and_sockets);
	return s;
}
