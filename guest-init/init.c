/* guest-init: PID 1 of a kbox guest.
 *
 * Mounts the basic filesystems, starts the exec agent on vsock (through
 * which kbox runs every command, the main one included) and reaps orphans
 * until kbox stops the VM.  When it cannot go on it says why in the kernel
 * log and reboots with the command "kbox-init-failed", which kbox reports.
 * Every system call here is emulated on PVM hosts, so it does as little as
 * it can. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest-init/agent.h"
#include "vmm/exec_proto.h"

/* reboot(2) ABI values, spelled out so that guest-init builds against any
 * libc's headers (musl does not ship <linux/reboot.h>). */
#define REBOOT_MAGIC1 0xfee1deadu
#define REBOOT_MAGIC2 672274793u
#define REBOOT_CMD_RESTART2 0xa1b2c3d4u


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

	pid_t agent = fork();
	if (agent < 0)
		die("fork: %s", strerror(errno));
	if (agent == 0) {
		int rc = agent_serve(EP_VSOCK_PORT);
		say("exec agent stopped: %s", strerror(-rc));
		_exit(1);
	}

	/* From here guest-init only reaps orphans: kbox runs every command
	 * through the agent and stops the VM itself. */
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, 0);
		if (p == agent)
			die("the exec agent exited (status %d)", st);
		if (p < 0 && errno == ECHILD)
			pause();
	}
}
