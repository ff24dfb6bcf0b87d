/* guest-init: PID 1 of a kbox guest.
 *
 * It first does what every run shares: the basic file systems and the
 * network's links, addresses and routes (kbox's addressing is fixed).
 * Then it waits on vsock for its run configuration (proto/runcfg.h): the
 * host's entropy and wall clock, and the kbox.mounts=, kbox.disks= and
 * kbox.root= words, which used to come on the kernel command line, so that
 * nothing per-run is in the guest before that point (a snapshot taken
 * there serves every run: docs/snapshots.md).
 * With kbox.root=TAG (kbox run --image) it
 * makes a new root: the image's virtio-fs tag read-only, under an overlay
 * whose writable layer is a tmpfs, and switches into it with the basic
 * file systems (it keeps running
 * from the initramfs it was loaded from; nothing it does later needs a file
 * of the initramfs).  Then it writes resolv.conf, mounts the disks and the host
 * folders kbox shares (virtio-fs tags listed in kbox.mounts=), starts the exec
 * agent on vsock (through
 * which kbox runs every command, the main one included) and reaps orphans
 * until kbox stops the VM.  When it cannot go on it says why in the kernel
 * log and reboots with the command "kbox-init-failed", which kbox reports.
 * Every system call here is emulated on PVM hosts, so it does as little as
 * it can. */
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guest-init/agent.h"
#include "guest-init/senv.h"
#include "proto/exec_proto.h"
#include "proto/runcfg.h"

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

/* mkdir -p of an absolute path; errors surface in the mount that follows. */
static void make_dirs(char *path)
{
	for (char *s = path + 1; *s; s++) {
		if (*s == '/') {
			*s = '\0';
			mkdir(path, 0755);
			*s = '/';
		}
	}
	mkdir(path, 0755);
}

/* The values of kbox.mounts=, kbox.disks= and kbox.root= among the
 * space-separated words of line (NULL when absent), pointing into it. */
static void parse_words(char *line, char **mounts, char **disks, char **root)
{
	char *save;
	*mounts = *disks = *root = NULL;
	for (char *w = strtok_r(line, " \n", &save); w; w = strtok_r(NULL, " \n", &save)) {
		if (strncmp(w, "kbox.mounts=", 12) == 0)
			*mounts = w + 12;
		else if (strncmp(w, "kbox.disks=", 11) == 0)
			*disks = w + 11;
		else if (strncmp(w, "kbox.root=", 10) == 0)
			*root = w + 10;
	}
}

/* Read exactly n bytes from fd: 0, or -1 at an early end or error. */
static int read_full(int fd, uint8_t *b, size_t n)
{
	while (n > 0) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* <linux/random.h>'s ioctls, spelled out as the others here. */
#define KBOX_RNDADDENTROPY 0x40085203u /* _IOW('R', 0x03, int[2]) */
#define KBOX_RNDRESEEDCRNG 0x5207u     /* _IO('R', 0x07) */

/* Credit the host's random bytes to the kernel's pool and reseed the
 * CRNG at once, so that two guests restored from one snapshot never
 * produce the same random numbers. */
static void add_entropy(const uint8_t *b, size_t n)
{
	static struct {
		int entropy_count;
		int buf_size;
		uint8_t buf[RUNCFG_ENTROPY_MAX];
	} rp;
	if (n > sizeof rp.buf)
		n = sizeof rp.buf;
	rp.entropy_count = (int)(n * 8);
	rp.buf_size = (int)n;
	memcpy(rp.buf, b, n);
	int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, KBOX_RNDADDENTROPY, &rp) < 0 || ioctl(fd, KBOX_RNDRESEEDCRNG) < 0)
		say("adding the host's entropy: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
	memset(&rp, 0, sizeof rp);
}

/* One run configuration from cfd into msg (RUNCFG_MAX bytes), decoded
 * into c: its length, or -1 when it is refused (answered 1 and a reason,
 * cfd closed; what was read is cleared). */
static long read_runcfg(int cfd, uint8_t *msg, struct runcfg *c)
{
	const char *why = NULL;
	long len = -1;
	if (read_full(cfd, msg, RUNCFG_HDR) < 0)
		why = "short message";
	else if ((len = runcfg_message_len(msg)) < 0)
		why = "bad header";
	else if (read_full(cfd, msg + RUNCFG_HDR, (size_t)len - RUNCFG_HDR) < 0)
		why = "short message";
	else if (runcfg_decode(msg, (size_t)len, c) < 0)
		why = "malformed";
	if (!why)
		return len;
	/* What may have been read (the header's length, checked, or the
	 * header alone): the rest of msg was never written. */
	memset(msg, 0, len > 0 ? (size_t)len : RUNCFG_HDR);
	char r[64];
	int n = snprintf(r, sizeof r, "%c%s", 1, why);
	if (write(cfd, r, (size_t)n) < 0) {
		/* the host went away: it tries again or stops the VM */
	}
	close(cfd);
	say("run configuration refused: %s", why);
	return -1;
}

/* What every run configuration brings for this guest alone: the host's
 * entropy and its wall clock. */
static void take_entropy_and_clock(const struct runcfg *c)
{
	add_entropy(c->entropy, c->entropy_len);
	struct timespec ts = { (time_t)c->clock_sec, (long)c->clock_nsec };
	if (clock_settime(CLOCK_REALTIME, &ts) < 0)
		say("set the clock: %s", strerror(errno));
}

/* The run configuration's connection, from its message until the main
 * command's session takes it (main). */
static int runcfg_fd = -1;

/* Answer a run configuration with byte 0: taken and applied (the first
 * one once the exec agent listens).  The connection stays open. */
static void answer_ok(int fd)
{
	uint8_t ok = 0;
	if (write(fd, &ok, 1) < 0)
		say("answer the run configuration: %s", strerror(errno));
}

/* The run configuration (proto/runcfg.h, docs/run-config.md): wait on
 * vsock for kbox to send it, answer 0 when it is whole and valid (1 and
 * a reason otherwise, and wait for the next try), take the host's
 * entropy and wall clock, keep the environment, CA and host name
 * (guest-init/senv.h), and return the settings words, whose
 * kbox.mounts=, kbox.disks= and kbox.root= parse_words reads; the answer
 * (byte 0) comes from main once the exec agent listens.  Nothing per-run
 * happens before this: no mount of a share, no network. */
static char *wait_runcfg(void)
{
	static uint8_t msg[RUNCFG_MAX];
	static char words[RUNCFG_WORDS_MAX + 1];
	int lfd = agent_vsock_listen(RUNCFG_VSOCK_PORT, 1);
	if (lfd < 0)
		die("listen for the run configuration: %s", strerror(-lfd));
	/* Say "waiting" to the host: kbox refuses the request, so no
	 * connection is left behind for a template to hold. */
	agent_vsock_knock(2, RUNCFG_READY_PORT);
	for (;;) {
		int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0) {
			if (errno != EINTR && errno != ECONNABORTED)
				die("accept the run configuration: %s", strerror(errno));
			continue;
		}
		struct runcfg c;
		long len = read_runcfg(cfd, msg, &c);
		if (len < 0)
			continue;
		take_entropy_and_clock(&c);
		memcpy(words, c.words, c.words_len);
		words[c.words_len] = '\0';
		senv_take(c.env, c.env_len, c.ca, c.ca_len, c.hostname, c.hostname_len);
		/* Only what was read: each page of msg first written costs a
		 * restored guest a copy of it (half a MiB of them in all). */
		memset(msg, 0, (size_t)len);
		close(lfd);
		runcfg_fd = cfd; /* answered in main */
		return words;
	}
}

/* After a fork (kbox fork, docs/snapshots.md) the copy's kbox sends a
 * run configuration again: its own entropy (the copy must not draw the
 * original's random numbers), the wall clock and the new sandbox's name
 * as host name; the rest (mounts, environment, CA) is the original's
 * and stays.  Served by a child of PID 1 on the run configuration's
 * port, only to the host, answered 0 once applied. */
static void serve_refresh(void)
{
	static uint8_t msg[RUNCFG_MAX];
	int lfd = agent_vsock_listen(RUNCFG_VSOCK_PORT, 1);
	if (lfd < 0) {
		say("listen for a fork's configuration: %s", strerror(-lfd));
		return;
	}
	for (;;) {
		int cfd = agent_vsock_accept_host(lfd);
		if (cfd < 0) {
			say("accept a fork's configuration: %s", strerror(-cfd));
			return;
		}
		struct runcfg c;
		long len = read_runcfg(cfd, msg, &c);
		if (len < 0)
			continue;
		take_entropy_and_clock(&c);
		if (c.hostname_len) {
			int hn = senv_rename_host(c.hostname, c.hostname_len);
			if (hn < 0)
				say("setting the host name: %s", strerror(-hn));
		}
		memset(msg, 0, (size_t)len);
		answer_ok(cfd);
		close(cfd);
	}
}

/* Move the mount at path (of the initramfs) to the same path under root. */
static void move_into(const char *root, const char *path)
{
	char dst[64];
	snprintf(dst, sizeof dst, "%s%s", root, path);
	mkdir(dst, 0755);
	if (mount(path, dst, NULL, MS_MOVE, NULL) < 0)
		die("move %s into the new root: %s", path, strerror(errno));
}

/* The root image: virtio-fs tag read-only on /kbox/image, a tmpfs on
 * /kbox/rw for the overlay's upper and work directories (every write of
 * the sandbox lands there, in guest RAM, and the image stays untouched),
 * the overlay on /kbox/root; then /proc and /dev move into it and it
 * becomes "/".  rootfs cannot be pivoted away, hence the move over "/" and
 * chroot (what switch_root does); the initramfs stays in memory, unused. */
static void switch_to_image(const char *tag)
{
	static const char root[] = "/kbox/root";
	mkdir("/kbox", 0755);
	mkdir("/kbox/image", 0755);
	if (mount(tag, "/kbox/image", "virtiofs", MS_RDONLY | MS_NODEV, NULL) < 0)
		die("mount the root image %s: %s", tag, strerror(errno));
	mount_fs("tmpfs", "/kbox/rw", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	mkdir("/kbox/rw/upper", 0755);
	mkdir("/kbox/rw/work", 0755);
	mount_fs("overlay", root, "overlay", 0,
		 "lowerdir=/kbox/image,upperdir=/kbox/rw/upper,workdir=/kbox/rw/work");
	move_into(root, "/proc");
	move_into(root, "/dev"); /* with /dev/pts and /dev/shm */
	move_into(root, "/sys"); /* with /sys/fs/cgroup */
	move_into(root, "/tmp");
	move_into(root, "/run");
	if (chdir(root) < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 ||
	    chdir("/") < 0)
		die("switch to the root image: %s", strerror(errno));
}

/* list: kbox.mounts=TAG:PATH:rw|ro[,...] (vmm/sandbox/mounts.c writes it; paths hold
 * no ',', ':' or spaces).  Every share must be mounted before the agent runs
 * a command, so any failure stops the guest. */
static void mount_shares(char *list)
{
	char *save;
	if (!list)
		return;
	for (char *e = strtok_r(list, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		char *path = strchr(e, ':');
		char *mode = path ? strchr(path + 1, ':') : NULL;
		if (!mode || path[1] != '/')
			die("bad kbox.mounts entry '%s'", e);
		*path++ = '\0';
		*mode++ = '\0';
		unsigned long fl = MS_NOSUID | MS_NODEV;
		if (strcmp(mode, "ro") == 0)
			fl |= MS_RDONLY;
		else if (strcmp(mode, "rw") != 0)
			die("bad kbox.mounts mode '%s' for %s", mode, path);
		make_dirs(path);
		if (mount(e, path, "virtiofs", fl, NULL) < 0)
			die("mount the host folder %s on %s: %s", e, path, strerror(errno));
	}
}

/* ioctl numbers, spelled out as for reboot: <linux/fs.h> BLKGETSIZE64 and
 * <linux/ext4.h>'s EXT4_IOC_RESIZE_FS. */
#define KBOX_BLKGETSIZE64 _IOR(0x12, 114, size_t)
#define KBOX_EXT4_IOC_RESIZE_FS _IOW('f', 16, uint64_t)
#define KBOX_BLKFLSBUF _IO(0x12, 97)

/* Forget what the kernel cached of dev's blocks.  A guest started from a
 * template read the first blocks of whatever disk the template's boot
 * had (the partition scan); this run's disk is another. */
static void drop_cached_blocks(const char *dev)
{
	int fd = open(dev, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, KBOX_BLKFLSBUF, 0) < 0)
		say("drop the cached blocks of %s: %s", dev, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* The /dev/vdX whose virtio-blk serial is name (kbox gives each volume
 * its name as serial; the order of the devices means nothing), into dev. */
static int find_disk(const char *name, char *dev, size_t len)
{
	for (char c = 'a'; c <= 'z'; c++) {
		char path[64], serial[32];
		snprintf(path, sizeof path, "/sys/block/vd%c/serial", c);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, serial, sizeof serial - 1);
		close(fd);
		if (n < 0)
			continue;
		while (n > 0 && (serial[n - 1] == '\n' || serial[n - 1] == '\0'))
			n--;
		serial[n] = '\0';
		if (strcmp(serial, name) == 0) {
			snprintf(dev, len, "/dev/vd%c", c);
			return 0;
		}
	}
	return -ENOENT;
}

/* The ext4 on path fills its device: after kbox made the volume larger. */
static void grow_fs(const char *dev, const char *path)
{
	int dfd = open(dev, O_RDONLY | O_CLOEXEC);
	uint64_t bytes = 0;
	if (dfd < 0 || ioctl(dfd, KBOX_BLKGETSIZE64, &bytes) < 0) {
		say("size of %s: %s", dev, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return;
	}
	close(dfd);
	struct statfs sf;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstatfs(fd, &sf) < 0 || sf.f_bsize <= 0) {
		say("grow the disk on %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	uint64_t blocks = bytes / (uint64_t)sf.f_bsize;
	if (ioctl(fd, KBOX_EXT4_IOC_RESIZE_FS, &blocks) < 0)
		say("grow the disk on %s to %llu blocks: %s", path, (unsigned long long)blocks,
		    strerror(errno));
	close(fd);
}

/* list: kbox.disks=NAME:PATH:rw|ro[:grow][,...] (vmm/sandbox/disks.c
 * writes it).  Each volume is ext4; a read-only one is mounted without
 * replaying its journal (the device refuses writes).  Any failure stops
 * the guest, as for the shares.  Returns whether any disk was mounted; the
 * read-write ones' paths go into rw (at most 8), their number *nrw. */
static int mount_disks(char *list, const char **rw, unsigned *nrw)
{
	char *save;
	int any = 0;
	*nrw = 0;
	if (!list)
		return 0;
	for (char *e = strtok_r(list, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		char *path = strchr(e, ':');
		char *mode = path ? strchr(path + 1, ':') : NULL;
		if (!mode || path[1] != '/')
			die("bad kbox.disks entry '%s'", e);
		*path++ = '\0';
		*mode++ = '\0';
		char *flag = strchr(mode, ':');
		if (flag)
			*flag++ = '\0';
		unsigned long fl = 0;
		const char *opts = NULL;
		if (strcmp(mode, "ro") == 0) {
			fl |= MS_RDONLY;
			opts = "noload";
		} else if (strcmp(mode, "rw") != 0) {
			die("bad kbox.disks mode '%s' for %s", mode, path);
		}
		char dev[32];
		if (find_disk(e, dev, sizeof dev) < 0)
			die("no disk with the serial %s", e);
		make_dirs(path);
		drop_cached_blocks(dev);
		if (mount(dev, path, "ext4", fl, opts) < 0)
			die("mount the disk %s (%s) on %s: %s", e, dev, path, strerror(errno));
		if (flag && strcmp(flag, "grow") == 0 && !(fl & MS_RDONLY))
			grow_fs(dev, path);
		if (!(fl & MS_RDONLY) && *nrw < 8)
			rw[(*nrw)++] = path;
		any = 1;
	}
	return any;
}

/* Put an IPv4 address (dotted quad) into sa. */
static void sin_set(struct sockaddr *sa, const char *ip)
{
	struct sockaddr_in *in = (struct sockaddr_in *)sa;
	memset(in, 0, sizeof *in);
	in->sin_family = AF_INET;
	inet_pton(AF_INET, ip, &in->sin_addr);
}

static int if_up(int s, const char *name)
{
	struct ifreq r;
	memset(&r, 0, sizeof r);
	snprintf(r.ifr_name, sizeof r.ifr_name, "%s", name);
	if (ioctl(s, SIOCGIFFLAGS, &r) < 0)
		return -errno;
	r.ifr_flags |= IFF_UP | IFF_RUNNING;
	return ioctl(s, SIOCSIFFLAGS, &r) < 0 ? -errno : 0;
}

/* Write value to the sysctl file path; failures are logged. */
static void sysctl_set(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, value, strlen(value)) < 0)
		say("%s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* The kernel's struct in6_ifreq (<linux/ipv6.h>, not in musl's headers). */
struct kbox_in6_ifreq {
	struct in6_addr ifr6_addr;
	uint32_t ifr6_prefixlen;
	int ifr6_ifindex;
};

/* eth0's IPv6 before it comes up: no router discovery, no address
 * autoconfiguration, no duplicate address detection (kbox's stack is
 * the only other node on the link, and DAD would hold the address
 * back for a second). */
static void net6_prepare(void)
{
	if (access("/proc/sys/net/ipv6/conf/eth0", F_OK) < 0)
		return; /* a kernel without IPv6 */
	sysctl_set("/proc/sys/net/ipv6/conf/eth0/accept_ra", "0");
	sysctl_set("/proc/sys/net/ipv6/conf/eth0/autoconf", "0");
	sysctl_set("/proc/sys/net/ipv6/conf/eth0/accept_dad", "0");
	sysctl_set("/proc/sys/net/ipv6/conf/eth0/dad_transmits", "0");
	sysctl_set("/proc/sys/net/ipv6/conf/eth0/router_solicitations", "0");
}

/* eth0's IPv6 address fd6b:626f:7800::f/64 and the default route via
 * the gateway fd6b:626f:7800::2 (netstack/stack.h). */
static void net6_up(void)
{
	int s = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return; /* a kernel without IPv6: IPv4 only */
	unsigned idx = if_nametoindex("eth0");
	struct kbox_in6_ifreq r;
	memset(&r, 0, sizeof r);
	inet_pton(AF_INET6, "fd6b:626f:7800::f", &r.ifr6_addr);
	r.ifr6_prefixlen = 64;
	r.ifr6_ifindex = (int)idx;
	if (idx == 0 || (ioctl(s, SIOCSIFADDR, &r) < 0 && errno != EEXIST))
		say("eth0 IPv6 address: %s", strerror(errno));
	struct in6_rtmsg rt;
	memset(&rt, 0, sizeof rt);
	inet_pton(AF_INET6, "fd6b:626f:7800::2", &rt.rtmsg_gateway);
	rt.rtmsg_flags = RTF_UP | RTF_GATEWAY;
	rt.rtmsg_metric = 1;
	rt.rtmsg_ifindex = (int)idx;
	if (idx != 0 && ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST)
		say("IPv6 default route: %s", strerror(errno));
	close(s);
}

/* The fixed addressing of kbox's network (docs/network.md): lo, and eth0
 * when kbox gave the guest a NIC (not with --network none).  Failures are
 * logged, not fatal: commands that need no network still run. */
static void net_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		say("no IPv4 socket: %s", strerror(errno));
		return;
	}
	int e = if_up(s, "lo");
	if (e < 0)
		say("bring lo up: %s", strerror(-e));
	struct ifreq r;
	memset(&r, 0, sizeof r);
	snprintf(r.ifr_name, sizeof r.ifr_name, "eth0");
	if (ioctl(s, SIOCGIFFLAGS, &r) < 0) {
		close(s); /* no NIC: --network none */
		return;
	}
	net6_prepare();
	sin_set(&r.ifr_addr, "10.0.2.15");
	if (ioctl(s, SIOCSIFADDR, &r) < 0)
		say("eth0 address: %s", strerror(errno));
	sin_set(&r.ifr_netmask, "255.255.255.0");
	if (ioctl(s, SIOCSIFNETMASK, &r) < 0)
		say("eth0 netmask: %s", strerror(errno));
	if ((e = if_up(s, "eth0")) < 0)
		say("bring eth0 up: %s", strerror(-e));
	struct rtentry rt;
	memset(&rt, 0, sizeof rt);
	sin_set(&rt.rt_dst, "0.0.0.0");
	sin_set(&rt.rt_genmask, "0.0.0.0");
	sin_set(&rt.rt_gateway, "10.0.2.2");
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	static char eth0[] = "eth0";
	rt.rt_dev = eth0;
	if (ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST)
		say("default route: %s", strerror(errno));
	close(s);
	net6_up();
}

/* kbox's resolver in the final root's /etc/resolv.conf, when the guest
 * has a NIC. */
static void write_resolv(void)
{
	if (access("/sys/class/net/eth0", F_OK) < 0)
		return; /* --network none */
	mkdir("/etc", 0755);
	int fd = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || dprintf(fd, "nameserver 10.0.2.2\n") < 0)
		say("write /etc/resolv.conf: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
}

int main(void)
{
	if (getpid() != 1)
		die("must run as PID 1");
	mount_fs("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount_fs("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	/* What is the same for every run comes before the run
	 * configuration, so that a template holds it done: the basic file
	 * systems (moved into an image's root with it) and the network's
	 * links, addresses and routes (kbox's addressing is fixed). */
	mount_fs("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	/* cgroup v2 for container engines (podman's cgroupfs manager,
	 * docs/disks.md): sysfs has /sys/fs/cgroup only when the kernel has
	 * cgroups; without it (or the mount) nothing else changes. */
	if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  NULL) < 0 && errno != ENOENT && errno != ENODEV && errno != EBUSY)
		say("mount cgroup2 on /sys/fs/cgroup: %s", strerror(errno));
	mount_fs("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666,mode=0620");
	mount_fs("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mount_fs("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mount_fs("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	net_up();
	char *shares, *disks, *image;
	parse_words(wait_runcfg(), &shares, &disks, &image);
	if (image)
		switch_to_image(image);
	write_resolv();
	/* Disks before the shares: kbox refuses a disk inside a share. */
	static const char *rw_disks[8];
	unsigned n_rw = 0;
	if (mount_disks(disks, rw_disks, &n_rw))
		agent_sync_on_exit(rw_disks, n_rw);
	mount_shares(shares);

	int ca = senv_install_ca();
	if (ca < 0)
		say("installing kbox's CA: %s", strerror(-ca));
	int hn = senv_set_hostname();
	if (hn < 0)
		say("setting the host name: %s", strerror(-hn));

	int lfd = agent_vsock_listen(EXEC_PROTO_VSOCK_PORT, 64);
	if (lfd < 0)
		die("listen for the exec agent: %s", strerror(-lfd));
	pid_t agent = fork();
	if (agent < 0)
		die("fork: %s", strerror(errno));
	if (agent == 0) {
		close(runcfg_fd);
		int rc = agent_serve_listener(lfd);
		say("exec agent stopped: %s", strerror(-rc));
		_exit(1);
	}
	close(lfd);
	/* The answer; then the run configuration's connection is the main
	 * command's exec session (docs/run-config.md), served by a child
	 * (kbox's EXEC request may be waiting in it already). */
	answer_ok(runcfg_fd);
	pid_t first = fork();
	if (first < 0)
		die("fork: %s", strerror(errno));
	if (first == 0)
		_exit(agent_serve_fd(runcfg_fd) < 0 ? 1 : 0);
	close(runcfg_fd);
	runcfg_fd = -1;
	pid_t refresher = fork();
	if (refresher == 0) {
		serve_refresh();
		_exit(1);
	}
	if (refresher < 0)
		say("fork: %s (a fork of this sandbox keeps its host name and entropy)",
		    strerror(errno));

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
