#include "vmm/sandbox/mounts.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/errbuf.h"
#include "vmm/core/boot.h"

/* The kernel's own limit on its command line (x86 COMMAND_LINE_SIZE - 1). */

static bool guest_char_ok(char c)
{
	return c > ' ' && c < 0x7f && c != ',' && c != ':' && c != '"';
}

/* Whether path equals dir or lies below it. */
static bool under(const char *path, const char *dir)
{
	size_t l = strlen(dir);
	return strncmp(path, dir, l) == 0 && (path[l] == '\0' || path[l] == '/');
}

int mounts_guest_path(const char *g, size_t len, char *out, const char *who, char *err,
		      size_t errlen)
{
	while (len > 1 && g[len - 1] == '/')
		len--;
	if (len == 0 || g[0] != '/')
		return errbuf_fail(err, errlen, -EINVAL,
			       "%sthe guest path must be absolute, not '%.*s'", who, (int)len, g);
	if (len > MOUNTS_GUEST_MAX)
		return errbuf_fail(err, errlen, -ENAMETOOLONG,
			       "%sthe guest path is longer than %d bytes", who, MOUNTS_GUEST_MAX);
	memcpy(out, g, len);
	out[len] = '\0';
	for (size_t i = 0; i < len; i++) {
		if (!guest_char_ok(out[i]))
			return errbuf_fail(err, errlen, -EINVAL,
				       "%sthe guest path '%s' may not contain ',', ':', '\"', spaces "
				       "or control characters", who, out);
	}
	if (strcmp(out, "/") == 0)
		return errbuf_fail(err, errlen, -EINVAL, "%scannot mount over the guest's root '/'",
			       who);
	for (const char *c = out + 1;; ) {
		const char *e = strchr(c, '/');
		size_t cl = e ? (size_t)(e - c) : strlen(c);
		if (cl == 0 || (cl == 1 && c[0] == '.') || (cl == 2 && c[0] == '.' && c[1] == '.'))
			return errbuf_fail(err, errlen, -EINVAL,
				       "%sthe guest path '%s' has an empty, '.' or '..' component",
				       who, out);
		if (!e)
			break;
		c = e + 1;
	}
	static const char *const reserved[] = { "/proc", "/sys", "/dev" };
	for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++) {
		if (under(out, reserved[i]))
			return errbuf_fail(err, errlen, -EINVAL,
				       "%s%s belongs to the guest kernel; pick another "
				       "guest path than '%s'", who, reserved[i], out);
	}
	return 0;
}

/* The checks shared by -v and mounts_add; fills the next slot and counts
 * it only when everything is right. */
static int add(struct mounts *ms, const char *host, size_t hl, const char *guest, size_t gl,
	       bool ro, const char *who, char *err, size_t errlen, struct mount **out)
{
	if (ms->n >= MOUNTS_MAX)
		return errbuf_fail(err, errlen, -E2BIG, "%stoo many mounts (at most %d)", who,
			       MOUNTS_MAX);
	struct mount *m = &ms->m[ms->n];
	if (hl == 0)
		return errbuf_fail(err, errlen, -EINVAL, "%sthe host path is empty", who);
	if (hl >= sizeof m->host)
		return errbuf_fail(err, errlen, -ENAMETOOLONG, "%sthe host path is too long", who);
	memcpy(m->host, host, hl);
	m->host[hl] = '\0';
	int rc = mounts_guest_path(guest, gl, m->guest, who, err, errlen);
	if (rc < 0)
		return rc;
	struct stat st;
	if (stat(m->host, &st) < 0) {
		rc = -errno;
		return errbuf_fail(err, errlen, rc, "%scannot use %s: %s", who, m->host,
			       strerror(errno));
	}
	if (!S_ISDIR(st.st_mode))
		return errbuf_fail(err, errlen, -ENOTDIR,
			       "%s%s is not a directory (only folders can be shared)", who,
			       m->host);
	for (unsigned i = 0; i < ms->n; i++) {
		if (strcmp(ms->m[i].guest, m->guest) == 0)
			return errbuf_fail(err, errlen, -EEXIST, "%stwo mounts on %s", who, m->guest);
	}
	m->readonly = ro;
	m->hidden = (struct fs_hidden_spec){ 0 };
	m->root = false;
	m->fs = NULL;
	m->srv = NULL;
	ms->n++;
	*out = m;
	return 0;
}

int mounts_add(struct mounts *ms, const struct mount_spec *s, char *err, size_t errlen)
{
	struct mount *m;
	if ((s->hidden.set && s->hidden.n && !s->hidden.list) ||
	    (s->hidden.n_extra && !s->hidden.extra))
		return errbuf_fail(err, errlen, -EINVAL, "no hidden patterns given");
	int rc = add(ms, s->host, strlen(s->host), s->guest, strlen(s->guest), s->readonly, "",
		     err, errlen, &m);
	if (rc < 0)
		return rc;
	m->hidden = s->hidden;
	return 0;
}

int mounts_parse(struct mounts *ms, const char *arg, char *err, size_t errlen)
{
	if (ms->n >= MOUNTS_MAX)
		return errbuf_fail(err, errlen, -E2BIG,
			       "too many -v mounts (at most %d, with those of --conf)", MOUNTS_MAX);
	size_t end = strlen(arg);
	bool ro = false;
	const char *colon = strrchr(arg, ':');
	if (colon && (strcmp(colon, ":ro") == 0 || strcmp(colon, ":rw") == 0)) {
		ro = colon[2] == 'o';
		end = (size_t)(colon - arg);
	}
	colon = NULL;
	for (size_t i = end; i-- > 0;) {
		if (arg[i] == ':') {
			colon = arg + i;
			break;
		}
	}
	if (!colon || colon == arg)
		return errbuf_fail(err, errlen, -EINVAL,
			       "-v takes HOST:GUEST or HOST:GUEST:ro, not '%s'", arg);
	size_t hl = (size_t)(colon - arg);
	struct mount *m;
	return add(ms, arg, hl, colon + 1, end - hl - 1, ro, "-v: ", err, errlen, &m);
}

int mounts_set_image(struct mounts *ms, const char *dir, char *err, size_t errlen)
{
	for (unsigned i = 0; i < ms->n; i++) {
		if (ms->m[i].root)
			return errbuf_fail(err, errlen, -EEXIST, "only one root image");
	}
	if (ms->n >= MOUNTS_MAX)
		return errbuf_fail(err, errlen, -E2BIG, "too many mounts (at most %d with the image)",
			       MOUNTS_MAX);
	struct mount *m = &ms->m[ms->n];
	size_t hl = strlen(dir);
	if (hl == 0 || hl >= sizeof m->host) {
		errbuf_say(err, errlen, "the image path is %s", hl ? "too long" : "empty");
		return hl ? -ENAMETOOLONG : -EINVAL;
	}
	struct stat st;
	if (stat(dir, &st) < 0) {
		int rc = -errno;
		return errbuf_fail(err, errlen, rc, "cannot use the image %s: %s", dir,
			       strerror(errno));
	}
	if (!S_ISDIR(st.st_mode))
		return errbuf_fail(err, errlen, -ENOTDIR,
			       "the image %s is not a directory (a root filesystem "
			       "folder, e.g. made with debootstrap)", dir);
	/* The image is the system, not the user's files: nothing hidden, and
	 * the host refuses every write to it. */
	*m = (struct mount){ .readonly = true, .hidden.set = true, .root = true,
			     .image_uid = st.st_uid, .image_gid = st.st_gid };
	memcpy(m->host, dir, hl + 1);
	strcpy(m->guest, "/");
	ms->n++;
	return 0;
}

void mounts_fsp_config(const struct mount *m, unsigned max_fds, struct fs_passthrough_config *fc)
{
	*fc = (struct fs_passthrough_config){ .root = m->host, .readonly = m->readonly,
					      .hidden = m->hidden, .max_fds = max_fds };
}

struct idmap mounts_ids(const struct mount *m)
{
	/* An image imported with sudo is root's (the identity); one a user
	 * imported is that user's, who is then its guest root. */
	return m->root ? idmap_owner(m->image_uid, m->image_gid) :
			 idmap_owner(geteuid(), getegid());
}

static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int mounts_attach(struct mounts *ms, struct virtio_bus *b, char *cmdline, size_t cmdlen,
		  char *err, size_t errlen)
{
	if (ms->n == 0)
		return 0;
	raise_fd_limit();
	struct rlimit rl = { 1024, 1024 };
	getrlimit(RLIMIT_NOFILE, &rl);
	/* Share the fd budget between mounts, leaving room for kbox itself. */
	rlim_t cap = (rl.rlim_cur > 256 ? rl.rlim_cur - 192 : 64) / ms->n;
	if (cap > 1u << 20)
		cap = 1u << 20;
	if (cap < 64)
		cap = 64;
	const struct fuse_server_config sc = {
		.max_write = VIRTIO_FS_MAX_WRITE,
		.entry_timeout = 1.0,
		.attr_timeout = 1.0,
		.posix_locks = true,
	};
	/* Nothing in the guest changes an image, so its names and attributes
	 * may be cached far longer: a toolchain's many stat calls stay in the
	 * guest. */
	const struct fuse_server_config image_sc = {
		.max_write = VIRTIO_FS_MAX_WRITE,
		.entry_timeout = 60.0,
		.attr_timeout = 60.0,
		.posix_locks = true,
	};
	for (unsigned i = 0; i < ms->n; i++) {
		struct mount *m = &ms->m[i];
		char tag[16];
		snprintf(tag, sizeof tag, "kbox%u", i);
		struct fs_passthrough_config fc;
		mounts_fsp_config(m, (unsigned)cap, &fc);
		int rc = fs_passthrough_new(&fc, &m->fs);
		if (rc < 0)
			return errbuf_fail(err, errlen, rc, "cannot serve %s: %s", m->host,
				       strerror(-rc));
		struct fuse_server_config c = m->root ? image_sc : sc;
		c.ids = mounts_ids(m);
		if ((rc = fuse_server_new(&fs_passthrough_ops, m->fs, &c, &m->srv)) < 0 ||
		    (rc = virtio_fs_init(&m->vfs, m->srv, tag)) < 0)
			return errbuf_fail(err, errlen, rc, "cannot set up the file server: %s",
				       strerror(-rc));
		if ((rc = virtio_bus_add(b, &m->vfs.dev, NULL, cmdline, cmdlen, err, errlen)) < 0)
			return rc;
	}
	/* The list first, then the root: kbox.root= must not split it. */
	bool first = true;
	int rc = 0;
	for (unsigned i = 0; i < ms->n && !rc; i++) {
		if (ms->m[i].root)
			continue;
		rc = boot_cmdline_append(cmdline, cmdlen, "%skbox%u:%s:%s",
					 first ? " kbox.mounts=" : ",", i, ms->m[i].guest,
					 ms->m[i].readonly ? "ro" : "rw");
		first = false;
	}
	for (unsigned i = 0; i < ms->n && !rc; i++)
		if (ms->m[i].root)
			rc = boot_cmdline_append(cmdline, cmdlen, " kbox.root=kbox%u", i);
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "the mounts do not fit on the kernel command "
				   "line (%u bytes at most); use shorter guest paths",
				   BOOT_KERNEL_CMDLINE_MAX);
	return rc;
}

void mounts_free(struct mounts *ms)
{
	for (unsigned i = 0; i < ms->n; i++) {
		fuse_server_free(ms->m[i].srv);
		fs_passthrough_free(ms->m[i].fs);
		ms->m[i].srv = NULL;
		ms->m[i].fs = NULL;
	}
}
