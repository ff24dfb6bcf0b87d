/* guest-init: PID 1 of a kbox guest.
 *
 * Mounts the basic filesystems, runs the command kbox put in /kbox (argv,
 * env, workdir, one NUL-terminated string per entry) with the command
 * channel (/dev/ttyS1) as its stdin/stdout/stderr, reaps every process,
 * and powers off, handing the exit status to kbox in the restart command
 * string the kernel prints as it goes down ("kbox-exit=N").  Everything
 * here is a system call that the slow PVM path has to emulate, so it does
 * as little as it can. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

/* reboot(2) ABI values, spelled out so that guest-init builds against any
 * libc's headers (musl does not ship <linux/reboot.h>). */
#define REBOOT_MAGIC1 0xfee1deadu
#define REBOOT_MAGIC2 672274793u
#define REBOOT_CMD_RESTART2 0xa1b2c3d4u

#define CHANNEL "/dev/ttyS1"
#define MAX_ARGS 4096
#define MAX_FILE (1 << 20)

__attribute__((format(printf, 1, 2)))
static void say(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof msg)
		n = sizeof msg - 1;
	int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		dprintf(fd, "<3>kbox-init: %.*s\n", n, msg);
		close(fd);
	}
}

__attribute__((noreturn))
static void power_off(const char *why)
{
	sync();
	syscall(SYS_reboot, REBOOT_MAGIC1, REBOOT_MAGIC2, REBOOT_CMD_RESTART2, why);
	/* Only reached if the kernel refused: stay alive, PID 1 must not exit. */
	for (;;)
		pause();
}

__attribute__((format(printf, 1, 2), noreturn))
static void die(const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	say("%s", msg);
	power_off("kbox-init-failed");
}

static void mount_fs(const char *src, const char *dst, const char *type, unsigned long fl,
		     const char *opts)
{
	mkdir(dst, 0755);
	if (mount(src, dst, type, fl, opts) < 0 && errno != EBUSY)
		die("mount %s on %s: %s", type, dst, strerror(errno));
}

/* Read a file of NUL-terminated strings into a NULL-terminated vector.
 * Missing file gives an empty vector when optional. */
static char **read_strings(const char *path, int optional)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (optional && errno == ENOENT) {
			char **v = calloc(1, sizeof *v);
			if (!v)
				die("out of memory");
			return v;
		}
		die("cannot open %s: %s", path, strerror(errno));
	}
	char *buf = malloc(MAX_FILE + 1);
	if (!buf)
		die("out of memory");
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fd, buf + len, MAX_FILE - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("read %s: %s", path, strerror(errno));
		if (r == 0)
			break;
		len += (size_t)r;
		if (len == MAX_FILE)
			die("%s is larger than %d bytes", path, MAX_FILE);
	}
	close(fd);
	if (len && buf[len - 1] != '\0')
		die("%s is not a list of NUL-terminated strings", path);
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		n += buf[i] == '\0';
	if (n > MAX_ARGS)
		die("%s has more than %d entries", path, MAX_ARGS);
	char **v = calloc(n + 1, sizeof *v);
	if (!v)
		die("out of memory");
	size_t k = 0;
	for (size_t i = 0; i < len; i += strlen(buf + i) + 1)
		v[k++] = buf + i;
	return v;
}

static int open_channel(void)
{
	int fd = open(CHANNEL, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		die("cannot open the command channel %s: %s", CHANNEL, strerror(errno));
	struct termios t;
	if (tcgetattr(fd, &t) == 0) {
		/* Bytes pass untouched both ways; canonical input only so that
		 * kbox can signal end of input with VEOF. */
		t.c_iflag = 0;
		t.c_oflag = 0;
		t.c_lflag = ICANON;
		t.c_cflag = CS8 | CREAD | CLOCAL;
		t.c_cc[VEOF] = 4;
		cfsetispeed(&t, B115200);
		cfsetospeed(&t, B115200);
		tcsetattr(fd, TCSANOW, &t);
	}
	return fd;
}

int main(void)
{
	if (getpid() != 1)
		die("must run as PID 1");
	mount_fs("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount_fs("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount_fs("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	mount_fs("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666,mode=0620");
	mount_fs("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mount_fs("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mount_fs("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");

	char **argv = read_strings("/kbox/argv", 0);
	char **envp = read_strings("/kbox/env", 1);
	char **wd = read_strings("/kbox/workdir", 1);
	if (!argv[0])
		die("no command to run");

	int ch = open_channel();
	pid_t child = fork();
	if (child < 0)
		die("fork: %s", strerror(errno));
	if (child == 0) {
		setsid();
		ioctl(ch, TIOCSCTTY, 0);
		dup2(ch, 0);
		dup2(ch, 1);
		dup2(ch, 2);
		const char *dir = wd[0] ? wd[0] : "/";
		if (chdir(dir) < 0) {
			dprintf(2, "kbox: cannot enter %s: %s\n", dir, strerror(errno));
			_exit(126);
		}
		execvpe(argv[0], argv, envp);
		int e = errno;
		dprintf(2, "kbox: %s: %s\n", argv[0], strerror(e));
		_exit(e == ENOENT ? 127 : 126);
	}

	int code = 0;
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, 0);
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			die("waitpid: %s", strerror(errno));
		if (p != child)
			continue;
		code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		break;
	}
	/* The command's last bytes may still sit in the tty's buffer. */
	tcdrain(ch);
	kill(-1, SIGKILL);
	char why[32];
	snprintf(why, sizeof why, "kbox-exit=%d", code);
	power_off(why);
}
