#include "vmm/sandbox/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/datadir.h"
#include "lib/errbuf.h"
#include "lib/fileio.h"

int sandbox_runtime_dir(char *buf, size_t len)
{
	const char *x = getenv("XDG_RUNTIME_DIR");
	int n;
	if (x && x[0] == '/')
		n = snprintf(buf, len, "%s/kbox", x);
	else if (geteuid() == 0)
		n = snprintf(buf, len, "/run/kbox");
	else
		n = snprintf(buf, len, "/tmp/kbox-%u", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	int rc = datadir_mkdirs(buf);
	if (rc < 0)
		return rc;
	/* Someone else's directory in a shared place is not ours to use. */
	struct stat st;
	if (lstat(buf, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
		return -EPERM;
	return 0;
}

int sandbox_name_ok(const char *name)
{
	return fileio_name_ok(name, SANDBOX_NAME_MAX, ".-");
}

static void paths(struct sandbox *sb, const char *rt, const char *name)
{
	snprintf(sb->name, sizeof sb->name, "%s", name);
	snprintf(sb->dir, sizeof sb->dir, "%s/%s", rt, name);
	snprintf(sb->sock, sizeof sb->sock, "%s/vsock.sock", sb->dir);
	snprintf(sb->klog, sizeof sb->klog, "%s/kernel.log", sb->dir);
	sb->lock = -1;
}

static int read_info(const struct sandbox *sb, struct sandbox_info *info)
{
	char path[sizeof sb->dir + 300];
	snprintf(path, sizeof path, "%s/info", sb->dir);
	memset(info, 0, sizeof *info);
	snprintf(info->name, sizeof info->name, "%s", sb->name);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	char line[512];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = '\0';
		const char *v = eq + 1;
		if (strcmp(line, "pid") == 0)
			info->pid = (pid_t)strtol(v, NULL, 10);
		else if (strcmp(line, "started") == 0)
			info->started = strtoll(v, NULL, 10);
		else if (strcmp(line, "cpus") == 0)
			info->cpus = (unsigned)strtoul(v, NULL, 10);
		else if (strcmp(line, "memory") == 0)
			info->memory_mib = strtoull(v, NULL, 10);
		else if (strcmp(line, "command") == 0)
			snprintf(info->command, sizeof info->command, "%s", v);
		else if (strcmp(line, "ports") == 0)
			snprintf(info->ports, sizeof info->ports, "%s", v);
	}
	fclose(f);
	info->alive = info->pid > 0 && (kill(info->pid, 0) == 0 || errno == EPERM);
	snprintf(path, sizeof path, "%s/image", sb->dir);
	f = fopen(path, "re");
	if (f) {
		if (!fgets(info->image, sizeof info->image, f))
			info->image[0] = '\0';
		info->image[strcspn(info->image, "\n")] = '\0';
		fclose(f);
	}
	return 0;
}

int sandbox_write_image(const struct sandbox *sb, const char *dir)
{
	char path[PATH_MAX], real[PATH_MAX + 1];
	/* `kbox image rm` finds users by stat: a relative path would be
	 * resolved against its directory, not ours. */
	if (!realpath(dir, real))
		return -errno;
	if (strchr(real, '\n'))
		return -EINVAL;
	snprintf(path, sizeof path, "%s/image", sb->dir);
	size_t n = strlen(real);
	real[n++] = '\n';
	return fileio_write_atomic(AT_FDCWD, path, NULL, real, n, 0600);
}

/* The files a sandbox (or a crashed one) leaves in its directory. */
static void remove_files(const struct sandbox *sb)
{
	static const char *const files[] = { "info", "image", "vsock.sock", "kernel.log", "output.log",
					     "run.args", "fork.sock" };
	char path[sizeof sb->dir + 300];
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", sb->dir, files[i]);
		unlink(path);
	}
	/* Hybrid vsock listeners for guest-initiated ports: vsock.sock_PORT. */
	DIR *d = opendir(sb->dir);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)))
			if (strncmp(e->d_name, "vsock.sock_", 11) == 0) {
				snprintf(path, sizeof path, "%s/%s", sb->dir, e->d_name);
				unlink(path);
			}
		closedir(d);
	}
}

void sandbox_release(struct sandbox *sb)
{
	int fd = sb->lock;
	/* Not our claim (kbox stop after a crash): a new run of the name may
	 * own the directory by now, and then it is not ours to empty. */
	if (fd < 0) {
		fd = open(sb->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
			close(fd);
			return;
		}
	}
	remove_files(sb);
	rmdir(sb->dir);
	/* Only now: a claim that waited must find the directory gone. */
	if (fd >= 0)
		close(fd);
	sb->lock = -1;
}

/* -EEXIST with the owner's pid when its info says. */
static int claim_busy(const struct sandbox *sb, char *err, size_t errlen)
{
	struct sandbox_info info;
	if (read_info(sb, &info) == 0 && info.alive)
		errbuf_say(err, errlen,
		       "a sandbox named '%s' is already running (pid %d); pick another --name "
		       "or 'kbox stop %s'", sb->name, (int)info.pid, sb->name);
	else
		errbuf_say(err, errlen,
		       "a sandbox named '%s' is starting (or stopping); pick another --name "
		       "or 'kbox stop %s'", sb->name, sb->name);
	return -EEXIST;
}

int sandbox_claim(struct sandbox *sb, const char *name, char *err, size_t errlen)
{
	if (!sandbox_name_ok(name))
		return errbuf_fail(err, errlen, -EINVAL,
			       "invalid sandbox name '%s': use 1-64 letters, digits, '_', '.' or '-'",
			       name);
	char rt[PATH_MAX - 128];
	int rc = sandbox_runtime_dir(rt, sizeof rt);
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "cannot use the runtime directory %s: %s", rt,
			       strerror(-rc));
	paths(sb, rt, name);
	/* Unix socket paths are short (sun_path), and guest-initiated vsock
	 * ports add "_PORT" to this one. */
	if (strlen(sb->sock) + 12 > 100)
		return errbuf_fail(err, errlen, -ENAMETOOLONG,
			       "the socket path %s is too long; use a shorter --name", sb->sock);
	/* The directory's flock says who owns the name: an info file alone
	 * cannot, as a starting sandbox has none yet. */
	for (int tries = 0; tries < 16; tries++) {
		struct stat held, now;
		if (mkdir(sb->dir, 0700) < 0 && errno != EEXIST) {
			rc = -errno;
			break;
		}
		int fd = open(sb->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ENOENT) /* its owner released it meanwhile */
				continue;
			rc = -errno;
			break;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int e = errno;
			close(fd);
			if (e != EWOULDBLOCK) {
				rc = -e;
				break;
			}
			return claim_busy(sb, err, errlen);
		}
		/* Removed (and perhaps made again) before we held it: the lock
		 * is on a directory nobody will use. */
		if (fstat(fd, &held) < 0 || lstat(sb->dir, &now) < 0 || held.st_dev != now.st_dev ||
		    held.st_ino != now.st_ino) {
			close(fd);
			continue;
		}
		struct sandbox_info info;
		if (read_info(sb, &info) == 0 && info.alive) { /* a kbox that does not lock */
			close(fd);
			return claim_busy(sb, err, errlen);
		}
		/* Left behind by a kbox that crashed: ours to clean. */
		remove_files(sb);
		sb->lock = fd;
		return 0;
	}
	if (rc == 0) /* it kept being removed under us */
		rc = -EAGAIN;
	return errbuf_fail(err, errlen, rc, "cannot create %s: %s", sb->dir, strerror(-rc));
}

int sandbox_write_info(const struct sandbox *sb, unsigned cpus, unsigned long long memory_mib,
		       char *const argv[])
{
	return sandbox_write_info_ports(sb, cpus, memory_mib, argv, NULL);
}

int sandbox_write_info_ports(const struct sandbox *sb, unsigned cpus, unsigned long long memory_mib,
			     char *const argv[], const char *ports)
{
	char path[PATH_MAX], *text = NULL;
	size_t len = 0;
	snprintf(path, sizeof path, "%s/info", sb->dir);
	FILE *f = open_memstream(&text, &len);
	if (!f)
		return -errno;
	fprintf(f, "pid=%d\nstarted=%lld\ncpus=%u\nmemory=%llu\ncommand=", (int)getpid(),
		(long long)time(NULL), cpus, memory_mib);
	for (size_t i = 0; argv && argv[i]; i++) {
		/* One line: control characters would break the format. */
		for (const char *c = argv[i]; *c; c++)
			fputc((unsigned char)*c < 0x20 ? '?' : *c, f);
		if (argv[i + 1])
			fputc(' ', f);
	}
	fputc('\n', f);
	if (ports && *ports && !strchr(ports, '\n'))
		fprintf(f, "ports=%s\n", ports);
	int rc = fclose(f) == 0 && text ? fileio_write_atomic(AT_FDCWD, path, NULL, text, len, 0600)
					: -ENOMEM;
	free(text);
	return rc;
}

int sandbox_write_args(const struct sandbox *sb, const char *cwd, int argc, char *const argv[])
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/run.args", sb->dir);
	size_t len = strlen(cwd) + 1;
	for (int i = 0; i < argc; i++)
		len += strlen(argv[i]) + 1;
	if (len > SANDBOX_ARGS_MAX)
		return -E2BIG;
	char *text = malloc(len), *at = text;
	if (!text)
		return -ENOMEM;
	at = stpcpy(at, cwd) + 1;
	for (int i = 0; i < argc; i++)
		at = stpcpy(at, argv[i]) + 1;
	int rc = fileio_write_atomic(AT_FDCWD, path, NULL, text, len, 0600);
	free(text);
	return rc;
}

int sandbox_read_args(const struct sandbox *sb, char **buf, char **cwd, int *argc, char ***argv)
{
	char path[PATH_MAX], *text;
	size_t len;
	snprintf(path, sizeof path, "%s/run.args", sb->dir);
	int rc = fileio_slurp(path, 0, SANDBOX_ARGS_MAX, &text, &len, NULL, NULL);
	if (rc < 0)
		return rc;
	/* NUL-terminated strings, the folder first and then at least "run". */
	unsigned n = 0;
	for (size_t i = 0; i < len; i++)
		n += text[i] == '\0';
	if (len == 0 || text[len - 1] != '\0' || n < 2 || text[0] != '/') {
		free(text);
		return -EBADMSG;
	}
	char **v = calloc(n, sizeof *v);
	if (!v) {
		free(text);
		return -ENOMEM;
	}
	*cwd = text;
	int c = 0;
	for (size_t off = strlen(text) + 1; off < len; off += strlen(text + off) + 1)
		v[c++] = text + off;
	v[c] = NULL;
	*buf = text;
	*argc = c;
	*argv = v;
	return 0;
}

int sandbox_lookup(const char *name, struct sandbox *sb, struct sandbox_info *info)
{
	if (!sandbox_name_ok(name))
		return -EINVAL;
	char rt[PATH_MAX - 128];
	int rc = sandbox_runtime_dir(rt, sizeof rt);
	if (rc < 0)
		return rc;
	paths(sb, rt, name);
	rc = read_info(sb, info);
	return rc == -ENOENT ? -ENOENT : rc;
}

int sandbox_each(void (*fn)(const struct sandbox_info *info, void *ctx), void *ctx)
{
	char rt[PATH_MAX - 128];
	int rc = sandbox_runtime_dir(rt, sizeof rt);
	if (rc < 0)
		return rc;
	DIR *d = opendir(rt);
	if (!d)
		return -errno;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!sandbox_name_ok(e->d_name))
			continue;
		struct sandbox sb;
		struct sandbox_info info;
		paths(&sb, rt, e->d_name);
		if (read_info(&sb, &info) < 0)
			continue;
		fn(&info, ctx);
		n++;
	}
	closedir(d);
	return n;
}
