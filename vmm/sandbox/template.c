#include "vmm/sandbox/template.h"

#include <bearssl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/datadir.h"
#include "lib/errbuf.h"

int template_dir(char *buf, size_t len, bool create, char *err, size_t errlen)
{
	const char *v = getenv("KBOX_TEMPLATE_DIR");
	int n;
	if (v && v[0] == '/')
		n = snprintf(buf, len, "%s", v);
	else if ((v = getenv("XDG_CACHE_HOME")) && v[0] == '/')
		n = snprintf(buf, len, "%s/kbox/templates", v);
	else if ((v = getenv("HOME")) && v[0] == '/')
		n = snprintf(buf, len, "%s/.cache/kbox/templates", v);
	else
		return errbuf_fail(err, errlen, -ENOENT,
				   "no folder for templates: HOME is not an absolute path");
	if (n < 0 || (size_t)n >= len)
		return errbuf_fail(err, errlen, -ENAMETOOLONG, "the templates' folder name is too long");
	int rc = create ? datadir_mkdirs(buf) : 0;
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "cannot make %s: %s", buf, strerror(-rc));
	return 0;
}

int template_fork_file(char *err, size_t errlen)
{
	char dir[PATH_MAX];
	int rc = template_dir(dir, sizeof dir, true, err, errlen);
	return rc < 0 ? rc : snapshot_file_make_unnamed(dir, err, errlen);
}

static int hash_file(br_sha256_context *h, const char *what, const char *path, char *err,
		     size_t errlen)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return errbuf_fail(err, errlen, -errno, "%s %s: %s", what, path, strerror(errno));
	char line[4200];
	int n = snprintf(line, sizeof line, "%s %s dev %llu ino %llu size %lld mtime %lld.%09ld ctime %lld.%09ld\n",
			 what, path, (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
			 (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
			 (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
	if (n < 0 || (size_t)n >= sizeof line)
		return errbuf_fail(err, errlen, -ENAMETOOLONG, "%s: the path is too long", what);
	br_sha256_update(h, line, (size_t)n);
	return 0;
}

int template_key(const struct template_inputs *in, uint8_t key[SNAPSHOT_FILE_KEY_LEN],
		 char name[TEMPLATE_NAME_LEN + 1], char *err, size_t errlen)
{
	br_sha256_context h;
	br_sha256_init(&h);
	static const char head[] = "kbox template 1\n";
	br_sha256_update(&h, head, sizeof head - 1);
	int rc;
	/* kbox's own binary: its device models and guest protocol are part
	 * of what the template holds. */
	if ((rc = hash_file(&h, "kbox", "/proc/self/exe", err, errlen)) < 0 ||
	    (rc = hash_file(&h, "kernel", in->kernel, err, errlen)) < 0 ||
	    (rc = hash_file(&h, "initrd", in->initrd, err, errlen)) < 0)
		return rc;
	char line[128];
	int n = snprintf(line, sizeof line, "cpus %u memory %llu tsc %u kvm %s\ncmdline ", in->cpus,
			 (unsigned long long)in->memory_mib, in->tsc_khz, in->pvm ? "pvm" : "hw");
	br_sha256_update(&h, line, (size_t)n);
	br_sha256_update(&h, in->cmdline, strlen(in->cmdline) + 1);
	br_sha256_update(&h, in->devices, strlen(in->devices) + 1);
	br_sha256_out(&h, key);
	static const char hex[] = "0123456789abcdef";
	char *p = name + sizeof TEMPLATE_PREFIX - 1;
	memcpy(name, TEMPLATE_PREFIX, sizeof TEMPLATE_PREFIX - 1);
	for (unsigned i = 0; i < SNAPSHOT_FILE_KEY_LEN; i++) {
		*p++ = hex[key[i] >> 4];
		*p++ = hex[key[i] & 15];
	}
	memcpy(p, TEMPLATE_SUFFIX, sizeof TEMPLATE_SUFFIX);
	return 0;
}

int template_name_ok(const char *name)
{
	size_t pl = sizeof TEMPLATE_PREFIX - 1;
	if (strlen(name) != TEMPLATE_NAME_LEN || strncmp(name, TEMPLATE_PREFIX, pl) != 0 ||
	    strcmp(name + pl + 2 * SNAPSHOT_FILE_KEY_LEN, TEMPLATE_SUFFIX) != 0)
		return 0;
	for (size_t i = pl; i < pl + 2 * SNAPSHOT_FILE_KEY_LEN; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return 0;
	return 1;
}

int template_touch(const char *dir, const char *name)
{
	if (!template_name_ok(name))
		return -EINVAL;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int rc = fd < 0 ? -errno : 0;
	close(dfd);
	if (rc < 0)
		return rc;
	struct stat st;
	const struct timespec t[2] = { { .tv_nsec = UTIME_NOW }, { .tv_nsec = UTIME_OMIT } };
	if (fstat(fd, &st) < 0)
		rc = -errno;
	else if (!S_ISREG(st.st_mode))
		rc = -EINVAL;
	else if (futimens(fd, t) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

long template_expire(const char *dir, const char *keep, long days, uint64_t *freed)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	DIR *d = fdopendir(dfd);
	if (!d) {
		int e = errno;
		close(dfd);
		return -e;
	}
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	long count = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (!template_name_ok(e->d_name) || (keep && strcmp(e->d_name, keep) == 0) ||
		    fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
		    st.st_uid != geteuid() || st.st_nlink != 1 ||
		    now.tv_sec - st.st_atim.tv_sec <= days * 86400L ||
		    now.tv_sec - st.st_mtim.tv_sec <= days * 86400L)
			continue;
		if (unlinkat(dfd, e->d_name, 0) < 0)
			continue;
		count++;
		if (freed)
			*freed += (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return count;
}
