#include "vmm/core/klog.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/datadir.h"
#include "lib/fileio.h"

void klog_init(struct klog *k)
{
	memset(k, 0, sizeof *k);
	k->fd = -1;
	k->exit_code = -1;
}

/* The default place, or -ENOENT when neither variable is absolute. */
static int klog_default(char *buf, size_t len)
{
	const char *st = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	int n;
	if (st && st[0] == '/')
		n = snprintf(buf, len, "%s/kbox/kernel.log", st);
	else if (home && home[0] == '/')
		n = snprintf(buf, len, "%s/.local/state/kbox/kernel.log", home);
	else
		return -ENOENT;
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Open path for the log; mkdirs makes its folder first.  fd or -errno. */
static int klog_try(const char *path, bool ours)
{
	if (ours) {
		char dir[PATH_MAX];
		const char *slash = strrchr(path, '/');
		size_t n = slash ? (size_t)(slash - path) : 0;
		if (n && n < sizeof dir) {
			memcpy(dir, path, n);
			dir[n] = '\0';
			int rc = datadir_mkdirs(dir);
			if (rc < 0)
				return rc;
		}
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY | O_CLOEXEC |
				    (ours ? O_NOFOLLOW : 0), 0600);
	return fd < 0 ? -errno : fd;
}

int klog_open(const char *path, const char *fallback, char *used, size_t usedlen, char *warn,
	      size_t warnlen)
{
	char def[PATH_MAX];
	int fd;
	used[0] = warn[0] = '\0';
	if (path)
		fd = klog_try(path, false);
	else if ((fd = klog_default(def, sizeof def)) == 0)
		fd = klog_try(path = def, true);
	if (fd >= 0) {
		snprintf(used, usedlen, "%s", path);
		return fd;
	}
	char why[PATH_MAX + 128];
	if (path)
		snprintf(why, sizeof why, "cannot write the kernel log %s: %s", path,
			 strerror(-fd));
	else
		snprintf(why, sizeof why, "no place for the kernel log (neither XDG_STATE_HOME "
			 "nor HOME is an absolute path)");
	int ffd = fallback ? klog_try(fallback, true) : -ENOENT;
	if (ffd >= 0) {
		snprintf(used, usedlen, "%s", fallback);
		snprintf(warn, warnlen, "%s; writing it to %s instead", why, fallback);
		return ffd;
	}
	if (fallback)
		snprintf(warn, warnlen, "%s; nor %s: %s; running without one (--kernel-log FILE "
			 "names a place)", why, fallback, strerror(-ffd));
	else
		snprintf(warn, warnlen, "%s; running without one (--kernel-log FILE names a place)",
			 why);
	return -1;
}

/* Copy the text after `marker` (to the end of the line) into out. */
static int after(const char *line, const char *marker, char *out, size_t outlen)
{
	const char *p = strstr(line, marker);
	if (!p)
		return 0;
	snprintf(out, outlen, "%s", p + strlen(marker));
	return 1;
}

static void parse_line(struct klog *k, const char *line)
{
	/* The kernel prints this as guest-init reboots with our command. */
	static const char exit_marker[] = "Restarting system with command 'kbox-exit=";
	const char *p = strstr(line, exit_marker);
	if (p) {
		/* Digits only: strtol alone would take "'" as 0 (success)
		 * and accept signs and spaces. */
		const char *num = p + sizeof exit_marker - 1;
		char *end;
		if (*num < '0' || *num > '9')
			return;
		long v = strtol(num, &end, 10);
		if (*end == '\'' && v >= 0 && v <= 255)
			k->exit_code = (int)v;
		return;
	}
	if (!k->panic && after(line, "Kernel panic - not syncing: ", k->panic_msg,
			       sizeof k->panic_msg)) {
		k->panic = 1;
		return;
	}
	if (after(line, "kbox-init: ", k->init_msg, sizeof k->init_msg))
		return;
	if (strstr(line, "Restarting system with command 'kbox-init-failed'"))
		k->init_failed = 1;
}

static void end_line(struct klog *k)
{
	/* Strip the CR of the console's CRLF. */
	while (k->len && (k->line[k->len - 1] == '\r' || k->line[k->len - 1] == '\n'))
		k->len--;
	k->line[k->len] = '\0';
	if (k->fd >= 0) {
		(void)fileio_write_all(k->fd, k->line, k->len);
		(void)fileio_write_all(k->fd, "\n", 1);
	}
	if (k->echo) {
		(void)fileio_write_all(STDERR_FILENO, k->line, k->len);
		(void)fileio_write_all(STDERR_FILENO, "\n", 1);
	}
	parse_line(k, k->line);
	k->len = 0;
}

void klog_write(void *ctx, const uint8_t *b, size_t n)
{
	struct klog *k = ctx;
	for (size_t i = 0; i < n; i++) {
		if (b[i] == '\n') {
			end_line(k);
			continue;
		}
		if (b[i] == '\0')
			continue;
		k->line[k->len++] = (char)b[i];
		if (k->len == KLOG_LINE - 1)
			end_line(k);
	}
}

void klog_flush(struct klog *k)
{
	if (k->len)
		end_line(k);
}
