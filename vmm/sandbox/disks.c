#include "vmm/sandbox/disks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/datadir.h"
#include "lib/errbuf.h"
#include "vmm/core/boot.h"
#include "vmm/sandbox/mounts.h"

/* The kernel's own limit on its command line (x86 COMMAND_LINE_SIZE - 1). */
#define SUFFIX ".img"

bool disks_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > DISKS_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
			return false;
	}
	return true;
}

int disks_parse_size(const char *s, uint64_t *out, char *err, size_t errlen)
{
	static const char expected[] = "a size such as 8G, 512M or 1T (64M to 1T)";
	uint64_t v = 0;
	size_t i = 0;
	while (s[i] >= '0' && s[i] <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return errbuf_fail(err, errlen, -ERANGE, "size '%.32s' is too large; expected %s",
					   s, expected);
		v = v * 10 + (uint64_t)(s[i] - '0');
		i++;
	}
	if (i == 0)
		return errbuf_fail(err, errlen, -EINVAL, "size '%.32s' is not a number; expected %s", s,
				   expected);
	unsigned shift = 0;
	const char *u = s + i;
	switch (*u) {
	case 'k': case 'K': shift = 10; u++; break;
	case 'm': case 'M': shift = 20; u++; break;
	case 'g': case 'G': shift = 30; u++; break;
	case 't': case 'T': shift = 40; u++; break;
	default: break;
	}
	if (shift && (strcmp(u, "iB") == 0 || strcmp(u, "B") == 0))
		u += strlen(u);
	if (*u)
		return errbuf_fail(err, errlen, -EINVAL, "size '%.32s' has an unknown unit; expected %s",
				   s, expected);
	if (shift && v > (UINT64_MAX >> shift))
		return errbuf_fail(err, errlen, -ERANGE, "size '%.32s' is too large; expected %s", s,
				   expected);
	v <<= shift;
	if (v < DISKS_SIZE_MIN || v > DISKS_SIZE_MAX)
		return errbuf_fail(err, errlen, -ERANGE, "size '%.32s' is out of range; expected %s",
				   s, expected);
	*out = v;
	return 0;
}

static bool under(const char *path, const char *dir)
{
	size_t l = strlen(dir);
	return strncmp(path, dir, l) == 0 && (path[l] == '\0' || path[l] == '/');
}

int disks_add(struct disks *ds, const char *name, const char *guest, uint64_t size, bool ro,
	      char *err, size_t errlen)
{
	if (ds->n >= DISKS_MAX)
		return errbuf_fail(err, errlen, -E2BIG, "too many disks (at most %u)", DISKS_MAX);
	if (!disks_name_ok(name))
		return errbuf_fail(err, errlen, -EINVAL,
				   "the volume name '%.40s' is not 1-%u letters, digits, '_', '.' "
				   "or '-' starting with a letter or digit", name, DISKS_NAME_MAX);
	if (size && (size < DISKS_SIZE_MIN || size > DISKS_SIZE_MAX))
		return errbuf_fail(err, errlen, -ERANGE, "the size of %s is out of range (64M to 1T)",
				   name);
	struct disk *d = &ds->d[ds->n];
	memset(d, 0, sizeof *d);
	d->fd = -1;
	char g[MOUNTS_GUEST_MAX + 1];
	int rc = mounts_guest_path(guest, strlen(guest), g, "", err, errlen);
	if (rc < 0)
		return rc;
	for (unsigned i = 0; i < ds->n; i++) {
		if (strcmp(ds->d[i].name, name) == 0)
			return errbuf_fail(err, errlen, -EEXIST, "the volume %s is given twice", name);
		if (under(g, ds->d[i].guest) || under(ds->d[i].guest, g))
			return errbuf_fail(err, errlen, -EEXIST,
					   "the disks on %s and %s are inside one another",
					   ds->d[i].guest, g);
	}
	snprintf(d->name, sizeof d->name, "%s", name);
	snprintf(d->guest, sizeof d->guest, "%s", g);
	d->size = size ? size : DISKS_SIZE_DEFAULT;
	d->size_set = size != 0;
	d->readonly = ro;
	ds->n++;
	return 0;
}

int disks_parse(struct disks *ds, const char *arg, char *err, size_t errlen)
{
	static const char usage[] = "expected NAME:GUEST_PATH[:size=SIZE][:ro]";
	char buf[512];
	if (strlen(arg) >= sizeof buf)
		return errbuf_fail(err, errlen, -EINVAL, "too long; %s", usage);
	snprintf(buf, sizeof buf, "%s", arg);
	char *colon = strchr(buf, ':');
	if (!colon || colon == buf)
		return errbuf_fail(err, errlen, -EINVAL, "no NAME:GUEST_PATH; %s", usage);
	*colon = '\0';
	char *guest = colon + 1, *opt = strchr(guest, ':');
	if (opt)
		*opt++ = '\0';
	uint64_t size = 0;
	bool ro = false, size_seen = false, mode_seen = false;
	while (opt) {
		char *next = strchr(opt, ':');
		if (next)
			*next++ = '\0';
		if (strncmp(opt, "size=", 5) == 0 && !size_seen) {
			int rc = disks_parse_size(opt + 5, &size, err, errlen);
			if (rc < 0)
				return rc;
			size_seen = true;
		} else if ((strcmp(opt, "ro") == 0 || strcmp(opt, "rw") == 0) && !mode_seen) {
			ro = opt[1] == 'o';
			mode_seen = true;
		} else {
			return errbuf_fail(err, errlen, -EINVAL,
					   "'%.32s' is not size=SIZE, ro or rw (each at most once); %s",
					   opt, usage);
		}
		opt = next;
	}
	return disks_add(ds, buf, guest, size, ro, err, errlen);
}

int disks_dir(char *buf, size_t len)
{
	return datadir_path("KBOX_DISK_DIR", "disks", buf, len);
}

/* An open-file-description lock on all of fd: F_WRLCK or F_RDLCK, never
 * waiting.  0, -EBUSY when someone else holds a conflicting one, or
 * another negative errno. */
static int lock_fd(int fd, short type)
{
	struct flock l = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
	if (fcntl(fd, F_OFD_SETLK, &l) == 0)
		return 0;
	return errno == EAGAIN || errno == EACCES ? -EBUSY : -errno;
}

/* Where mkfs.ext4 is: $PATH, then the sbin folders a user's PATH often
 * lacks. */
static int find_mkfs(char *out, size_t len)
{
	const char *path = getenv("PATH");
	char dirs[4096];
	snprintf(dirs, sizeof dirs, "%s:/usr/sbin:/sbin", path ? path : "");
	char *save;
	for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		if (d[0] != '/')
			continue;
		int n = snprintf(out, len, "%s/mkfs.ext4", d);
		if (n > 0 && (size_t)n < len && access(out, X_OK) == 0)
			return 0;
	}
	return -ENOENT;
}

/* mkfs.ext4 on the new, sparse file at path: root's root directory, no
 * journal zeroing (the file reads as zeros already), quiet.  Its output
 * goes into err on failure. */
static int format(const char *path, const char *name, char *err, size_t errlen)
{
	char mkfs[PATH_MAX];
	if (find_mkfs(mkfs, sizeof mkfs) < 0)
		return errbuf_fail(err, errlen, -ENOENT,
				   "cannot make the volume %s: mkfs.ext4 not found (install "
				   "e2fsprogs)", name);
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return errbuf_fail(err, errlen, -errno, "cannot make the volume %s: %s", name,
				   strerror(errno));
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return errbuf_fail(err, errlen, -e, "cannot make the volume %s: %s", name, strerror(e));
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY);
		if (nul >= 0)
			dup2(nul, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		/* E2FSPROGS_FAKE_TIME and the like are not ours to honour: a
		 * clean environment with a PATH for mke2fs's own helpers. */
		char *const argv[] = { mkfs, "-q", "-F", "-t", "ext4", "-E",
				       "root_owner=0:0,lazy_journal_init=1",
				       (char *)path, NULL };
		char *const envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
		execve(mkfs, argv, envp);
		_exit(127);
	}
	close(p[1]);
	char out[512];
	size_t got = 0;
	for (;;) {
		ssize_t r = read(p[0], out + got, sizeof out - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == sizeof out - 1) {
			char sink[256];
			while (read(p[0], sink, sizeof sink) > 0)
				;
			break;
		}
	}
	close(p[0]);
	out[got] = '\0';
	for (size_t i = 0; i < got; i++)
		if (out[i] == '\n' || (unsigned char)out[i] < ' ')
			out[i] = ' ';
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return errbuf_fail(err, errlen, -errno, "cannot make the volume %s: %s", name,
					   strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return errbuf_fail(err, errlen, -EIO, "cannot make the volume %s: %s failed (%s%d)%s%s",
				   name, mkfs, WIFEXITED(st) ? "status " : "signal ",
				   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), got ? ": " : "",
				   out);
	return 0;
}

/* A new volume at d->path: a temporary file in the folder, sized and
 * formatted, then linked into place, so that a volume either exists whole
 * or not at all, and two sandboxes making the same one at once end up
 * with one.  Returns 0 (d->path exists; maybe the other's), or a negative
 * errno with err set. */
static int create(struct disk *d, int dirfd, const char *dir, char *err, size_t errlen)
{
	char tmp[PATH_MAX];
	int n = snprintf(tmp, sizeof tmp, "%s/.%s%s.tmp.%d", dir, d->name, SUFFIX, (int)getpid());
	if (n < 0 || (size_t)n >= sizeof tmp)
		return errbuf_fail(err, errlen, -ENAMETOOLONG, "the disk folder's path is too long");
	unlink(tmp);
	int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return errbuf_fail(err, errlen, -errno, "cannot make the volume %s in %s: %s", d->name,
				   dir, strerror(errno));
	int rc = 0;
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)d->size) < 0) {
		rc = errbuf_fail(err, errlen, -errno, "cannot make the volume %s in %s: %s", d->name,
				 dir, strerror(errno));
		goto out;
	}
	if ((rc = format(tmp, d->name, err, errlen)) < 0)
		goto out;
	if (fsync(fd) < 0) {
		rc = errbuf_fail(err, errlen, -errno, "cannot make the volume %s: %s", d->name,
				 strerror(errno));
		goto out;
	}
	char name[DISKS_NAME_MAX + sizeof SUFFIX];
	snprintf(name, sizeof name, "%s%s", d->name, SUFFIX);
	char tname[PATH_MAX];
	snprintf(tname, sizeof tname, "%s", strrchr(tmp, '/') + 1);
	if (linkat(dirfd, tname, dirfd, name, 0) < 0 && errno != EEXIST)
		rc = errbuf_fail(err, errlen, -errno, "cannot make the volume %s: %s", d->name,
				 strerror(errno));
	else if (rc == 0)
		d->created = true;
out:
	close(fd);
	unlink(tmp);
	return rc;
}

/* Open, lock and check one volume, making it if it does not exist. */
static int open_one(struct disk *d, int dirfd, const char *dir, char *err, size_t errlen)
{
	char name[DISKS_NAME_MAX + 1];
	memcpy(name, d->name, sizeof name);
	int n = snprintf(d->path, sizeof d->path, "%s/%s%s", dir, name, SUFFIX);
	if (n < 0 || (size_t)n >= sizeof d->path)
		return errbuf_fail(err, errlen, -ENAMETOOLONG, "the disk folder's path is too long");
	for (int attempt = 0; attempt < 4; attempt++) {
		int fd = open(d->path, (d->readonly ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC |
				       O_NOCTTY | O_NONBLOCK);
		if (fd < 0 && errno == ENOENT) {
			if (d->readonly)
				return errbuf_fail(err, errlen, -ENOENT,
						   "no volume %s (a read-only disk must exist; see "
						   "'kbox disk ls')", d->name);
			int rc = create(d, dirfd, dir, err, errlen);
			if (rc < 0)
				return rc;
			continue;
		}
		if (fd < 0)
			return errbuf_fail(err, errlen, -errno, "cannot open the volume %s: %s", d->path,
					   errno == ELOOP ? "it is a symbolic link" : strerror(errno));
		struct stat st, now;
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			close(fd);
			return errbuf_fail(err, errlen, -EINVAL, "the volume %s is not a regular file",
					   d->path);
		}
		int rc = lock_fd(fd, d->readonly ? F_RDLCK : F_WRLCK);
		if (rc == -EBUSY) {
			close(fd);
			return errbuf_fail(err, errlen, -EBUSY,
					   "the volume %s is in use by another sandbox%s; stop that "
					   "one first (see 'kbox ps' and 'kbox disk ls')", d->name,
					   d->readonly ? " read-write" : "");
		}
		if (rc < 0) {
			close(fd);
			return errbuf_fail(err, errlen, rc, "cannot lock the volume %s: %s", d->path,
					   strerror(-rc));
		}
		/* Removed (kbox disk rm) between the open and the lock: again. */
		if (stat(d->path, &now) < 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
			close(fd);
			continue;
		}
		uint64_t have = (uint64_t)st.st_size;
		if (d->size_set && d->size < have) {
			close(fd);
			return errbuf_fail(err, errlen, -EINVAL,
					   "the volume %s has %llu MiB, size= asks for %llu MiB; a "
					   "volume cannot shrink (leave size= out, or 'kbox disk rm "
					   "%s' to start afresh)", d->name,
					   (unsigned long long)(have >> 20),
					   (unsigned long long)(d->size >> 20), d->name);
		}
		if (d->size_set && d->size > have) {
			if (d->readonly) {
				close(fd);
				return errbuf_fail(err, errlen, -EINVAL,
						   "the volume %s has %llu MiB; a read-only disk cannot "
						   "grow to size= %llu MiB", d->name,
						   (unsigned long long)(have >> 20),
						   (unsigned long long)(d->size >> 20));
			}
			if (ftruncate(fd, (off_t)d->size) < 0) {
				int e = errno;
				close(fd);
				return errbuf_fail(err, errlen, -e, "cannot grow the volume %s: %s",
						   d->name, strerror(e));
			}
			d->grown = true;
		} else {
			d->size = have;
		}
		if (d->size < DISKS_SIZE_MIN || d->size > DISKS_SIZE_MAX) {
			close(fd);
			return errbuf_fail(err, errlen, -EINVAL,
					   "the volume %s has %llu bytes, outside 64M to 1T (not made "
					   "by kbox?)", d->path, (unsigned long long)d->size);
		}
		d->fd = fd;
		/* The backend opens the very file that is locked. */
		char self[64];
		snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
		struct blk_file_opts bo = { .read_only = d->readonly };
		if ((rc = blk_file_open(self, &bo, &d->be)) < 0)
			return errbuf_fail(err, errlen, rc, "cannot open the volume %s: %s", d->path,
					   strerror(-rc));
		d->be_open = true;
		return 0;
	}
	return errbuf_fail(err, errlen, -EAGAIN, "the volume %s keeps changing under kbox",
			   d->path);
}

int disks_open(struct disks *ds, char *err, size_t errlen)
{
	if (ds->n == 0)
		return 0;
	char dir[PATH_MAX];
	int rc = disks_dir(dir, sizeof dir);
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "no disk folder: set KBOX_DISK_DIR or HOME");
	if ((rc = datadir_mkdirs(dir)) < 0)
		return errbuf_fail(err, errlen, rc, "cannot create the disk folder %s: %s", dir,
				   strerror(-rc));
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return errbuf_fail(err, errlen, -errno, "cannot open the disk folder %s: %s", dir,
				   strerror(errno));
	for (unsigned i = 0; i < ds->n && rc == 0; i++)
		rc = open_one(&ds->d[i], dirfd, dir, err, errlen);
	close(dirfd);
	return rc;
}

int disks_attach(struct disks *ds, struct virtio_bus *b, char *cmdline, size_t cmdlen, char *err,
		 size_t errlen)
{
	int rc = 0;
	for (unsigned i = 0; i < ds->n && !rc; i++) {
		struct disk *d = &ds->d[i];
		if (!d->be_open)
			return errbuf_fail(err, errlen, -EBADF, "the volume %s is not open", d->name);
		struct virtio_blk_opts o = { .serial = d->name };
		if ((rc = virtio_blk_init(&d->blk, &d->be, &o)) < 0)
			return errbuf_fail(err, errlen, rc, "cannot set up the disk %s: %s", d->name,
					   strerror(-rc));
		rc = virtio_bus_add(b, &d->blk.dev, NULL, cmdline, cmdlen, err, errlen);
	}
	if (rc < 0)
		return rc;
	for (unsigned i = 0; i < ds->n && !rc; i++)
		rc = boot_cmdline_append(cmdline, cmdlen, "%s%s:%s:%s%s", i ? "," : " kbox.disks=",
					 ds->d[i].name, ds->d[i].guest,
					 ds->d[i].readonly ? "ro" : "rw", ds->d[i].grown ? ":grow" : "");
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "the disks do not fit on the kernel command "
				   "line (%u bytes at most); use shorter guest paths",
				   BOOT_KERNEL_CMDLINE_MAX);
	return rc;
}

void disks_free(struct disks *ds)
{
	for (unsigned i = 0; i < ds->n; i++) {
		struct disk *d = &ds->d[i];
		if (d->be_open)
			blk_file_close(&d->be);
		d->be_open = false;
		if (d->fd >= 0)
			close(d->fd);
		d->fd = -1;
	}
}

/* NAME of "NAME.img" into out when it is a volume's file name. */
static bool volume_name(const char *file, char *out)
{
	size_t l = strlen(file), sl = strlen(SUFFIX);
	if (l <= sl || l - sl > DISKS_NAME_MAX || strcmp(file + l - sl, SUFFIX) != 0)
		return false;
	memcpy(out, file, l - sl);
	out[l - sl] = '\0';
	return disks_name_ok(out);
}

int disks_each(void (*fn)(const struct disks_volume *v, void *ctx), void *ctx)
{
	char dir[PATH_MAX];
	int rc = disks_dir(dir, sizeof dir);
	if (rc < 0)
		return rc;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	DIR *dp = fdopendir(dfd);
	if (!dp) {
		close(dfd);
		return -errno;
	}
	struct dirent *e;
	while ((e = readdir(dp))) {
		struct disks_volume v = { .in_use = -1 };
		if (!volume_name(e->d_name, v.name))
			continue;
		int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		v.size = (uint64_t)st.st_size;
		v.allocated = (uint64_t)st.st_blocks * 512u;
		/* Ask without taking: a lock taken here, even for an instant,
		 * could turn a starting sandbox away. */
		struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
		if (fcntl(fd, F_OFD_GETLK, &l) == 0)
			v.in_use = l.l_type != F_UNLCK;
		close(fd);
		fn(&v, ctx);
	}
	closedir(dp);
	return 0;
}

int disks_remove(const char *name, char *err, size_t errlen)
{
	if (!disks_name_ok(name))
		return errbuf_fail(err, errlen, -EINVAL, "'%.40s' is not a volume name", name);
	char dir[PATH_MAX], path[PATH_MAX];
	int rc = disks_dir(dir, sizeof dir);
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "no disk folder: set KBOX_DISK_DIR or HOME");
	int n = snprintf(path, sizeof path, "%s/%s%s", dir, name, SUFFIX);
	if (n < 0 || (size_t)n >= sizeof path)
		return errbuf_fail(err, errlen, -ENAMETOOLONG, "the disk folder's path is too long");
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0 && errno == ELOOP) {
		/* Not one kbox made: the link goes, whatever it points at stays. */
		if (unlink(path) < 0)
			return errbuf_fail(err, errlen, -errno, "cannot remove %s: %s", path,
					   strerror(errno));
		return 0;
	}
	if (fd < 0 && errno == ENOENT)
		return errbuf_fail(err, errlen, -ENOENT, "no volume %s (see 'kbox disk ls')", name);
	if (fd < 0)
		return errbuf_fail(err, errlen, -errno, "cannot open the volume %s: %s", name,
				   strerror(errno));
	rc = lock_fd(fd, F_WRLCK);
	if (rc == -EBUSY) {
		close(fd);
		return errbuf_fail(err, errlen, -EBUSY,
				   "the volume %s is in use by a running sandbox; stop it first "
				   "(see 'kbox ps')", name);
	}
	struct stat st, now;
	if (rc == 0 && (fstat(fd, &st) < 0 || stat(path, &now) < 0 || st.st_ino != now.st_ino ||
			st.st_dev != now.st_dev))
		rc = -EAGAIN;
	if (rc == 0 && unlink(path) < 0)
		rc = -errno;
	close(fd);
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "cannot remove the volume %s: %s", name,
				   rc == -EAGAIN ? "it changed meanwhile; try again" : strerror(-rc));
	return 0;
}
