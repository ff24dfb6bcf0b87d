#include "vmm/sandbox/lockdown.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lwip/tcpip.h>
#include <pthread.h>
#include <linux/kvm.h>
#include <linux/landlock.h>
#include <linux/netlink.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#ifdef KBOX_TEST_HOOKS
#include <dlfcn.h>
#endif

#include "lib/errbuf.h"
#include "vmm/cli.h"
#include "vmm/sandbox/mounts.h"

/* Debian's headers are older than the running kernels: the rights and
 * ruleset fields added after Linux 6.1, from the Landlock ABI. */
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0)
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif

/* struct landlock_ruleset_attr as of ABI 6; older kernels accept the
 * larger size as long as the fields they do not know are zero. */
struct ld_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};

#define LD_FS_V1 ((1ULL << 13) - 1) /* EXECUTE .. MAKE_SYM */

int lockdown_ids_differ(unsigned uid, unsigned euid, unsigned gid, unsigned egid)
{
	return uid != euid || gid != egid;
}

uint64_t lockdown_ll_handled(int abi)
{
	if (abi < 1)
		return 0;
	uint64_t fs = LD_FS_V1;
	if (abi >= 2)
		fs |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		fs |= LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi >= 5)
		fs |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return fs;
}

uint64_t lockdown_ll_access(int abi, enum lockdown_path_kind kind)
{
	uint64_t a = 0;
	switch (kind) {
	case LD_MOUNT_RW:
		/* What fs_passthrough does for the guest: no execute (kbox
		 * runs nothing), no devices (mknod makes regular files, FIFOs
		 * and sockets only). */
		a = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR |
		    LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
		    LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_DIR |
		    LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SYM |
		    LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_SOCK |
		    LANDLOCK_ACCESS_FS_REFER | LANDLOCK_ACCESS_FS_TRUNCATE;
		break;
	case LD_MOUNT_RO:
		a = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
		break;
	case LD_SANDBOX_DIR:
		/* sandbox_release lists it and unlinks the sockets and info
		 * file; everything in it was created before lock-down. */
		a = LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE;
		break;
	case LD_RUNTIME_DIR:
		/* Only for the final rmdir of the (then empty) sandbox dir. */
		a = LANDLOCK_ACCESS_FS_REMOVE_DIR;
		break;
	case LD_RESOLVER_FILE:
		/* getaddrinfo for the guest's DNS queries reads these on
		 * every lookup. */
		a = LANDLOCK_ACCESS_FS_READ_FILE;
		break;
	case LD_READ_FILE:
		/* Re-read on request (secrets reload): reading only. */
		a = LANDLOCK_ACCESS_FS_READ_FILE;
		break;
	case LD_LOG_FILE:
		/* Written through an fd opened before lock-down; the rule
		 * keeps the file the only one kbox could reopen for writing
		 * outside the mounts. */
		a = LANDLOCK_ACCESS_FS_WRITE_FILE;
		break;
	}
	return a & lockdown_ll_handled(abi);
}

int lockdown_prepare(char *err, size_t errlen)
{
	if (lockdown_ids_differ((unsigned)getuid(), (unsigned)geteuid(), (unsigned)getgid(),
				(unsigned)getegid()))
		return errbuf_fail(err, errlen, -EPERM,
			       "kbox must not be installed setuid or setgid; run it as a user in the "
			       "kvm group instead (docs/security.md)");
	/* Whatever the parent leaked (its sockets, files) is not ours. */
	if (syscall(SYS_close_range, 3u, ~0u, 0u) < 0) {
		int e = errno;
		return errbuf_fail(err, errlen, -e, "cannot close inherited file descriptors: %s",
			       strerror(e));
	}
	/* A core dump would hold guest memory, and with it the agent's
	 * secrets. */
	struct rlimit rl = { 0, 0 };
	if (setrlimit(RLIMIT_CORE, &rl) < 0) {
		int e = errno;
		return errbuf_fail(err, errlen, -e, "cannot turn core dumps off: %s", strerror(e));
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		int e = errno;
		return errbuf_fail(err, errlen, -e, "cannot read the open-file limit: %s", strerror(e));
	}
	rlim_t n = rl.rlim_max < LOCKDOWN_NOFILE ? rl.rlim_max : LOCKDOWN_NOFILE;
	rl.rlim_cur = rl.rlim_max = n;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		int e = errno;
		return errbuf_fail(err, errlen, -e, "cannot set the open-file limit to %llu: %s",
			       (unsigned long long)n, strerror(e));
	}
	return 0;
}

/* ---- the refusal report ---------------------------------------------- */

#define LD_NAMES    512 /* above every x86-64 system call number */
#define LD_NAME_MAX 24

/* Names resolved before the filter goes in: the SIGSYS handler can use
 * neither malloc nor libseccomp. */
static char ld_names[LD_NAMES][LD_NAME_MAX];

static size_t put_str(char *buf, size_t len, size_t at, const char *s)
{
	while (*s && at < len)
		buf[at++] = *s++;
	return at;
}

static size_t put_num(char *buf, size_t len, size_t at, unsigned long v, unsigned base)
{
	char d[24];
	size_t n = 0;
	do {
		d[n++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	while (n && at < len)
		buf[at++] = d[--n];
	return at;
}

size_t lockdown_format_refusal(char *buf, size_t len, long nr, const char *name,
			       bool is_ioctl, unsigned long request)
{
	if (len == 0)
		return 0;
	size_t cap = len - 1; /* room for the final newline */
	size_t at = put_str(buf, cap, 0, "kbox: lock-down: system call ");
	if (nr < 0) {
		at = put_str(buf, cap, at, "-");
		at = put_num(buf, cap, at, (unsigned long)-(nr + 1) + 1, 10);
	} else {
		at = put_num(buf, cap, at, (unsigned long)nr, 10);
	}
	if (name && *name) {
		at = put_str(buf, cap, at, " (");
		at = put_str(buf, cap, at, name);
		at = put_str(buf, cap, at, ")");
	}
	if (is_ioctl) {
		at = put_str(buf, cap, at, " request 0x");
		at = put_num(buf, cap, at, request, 16);
	}
	at = put_str(buf, cap, at,
		     " is not allowed; kbox stopped (a kbox bug, or a guest exploiting "
		     "one: see docs/security.md)");
	buf[at++] = '\n';
	return at;
}

static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
	(void)sig;
	long nr = si->si_syscall;
	const char *name = nr >= 0 && nr < LD_NAMES ? ld_names[nr] : NULL;
	unsigned long req = 0;
#ifdef __x86_64__
	req = (unsigned long)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RSI];
#else
	(void)ctx;
#endif
	char msg[256];
	size_t n = lockdown_format_refusal(msg, sizeof msg, nr, name,
					   nr == SCMP_SYS(ioctl), req);
	ssize_t w = write(STDERR_FILENO, msg, n);
	(void)w;
	_exit(KBOX_EXIT_FAILURE);
}

static void resolve_names(void)
{
	for (int nr = 0; nr < LD_NAMES; nr++) {
		char *s = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
		if (s)
			snprintf(ld_names[nr], LD_NAME_MAX, "%s", s);
		free(s);
	}
}

/* ---- seccomp ----------------------------------------------------------- */

/* System calls allowed with any arguments, each with the reason kbox
 * still needs it once the guest runs. */
static const int ld_plain[] = {
	/* I/O on fds that already exist */
	SCMP_SYS(read),            /* eventfds, sockets, stdin, guest file reads */
	SCMP_SYS(write),           /* eventfds, sockets, stdout/stderr, kernel log */
	SCMP_SYS(pread64),         /* virtio-fs reads at an offset */
	SCMP_SYS(pwrite64),        /* virtio-fs writes at an offset */
	SCMP_SYS(preadv),          /* virtio-fs reads into guest buffers */
	SCMP_SYS(pwritev),         /* virtio-fs writes from guest buffers */
	SCMP_SYS(close),           /* vsock connections, virtio-fs handles, teardown */
	SCMP_SYS(poll),            /* device thread, exec client, agent connect */
	SCMP_SYS(lseek),           /* virtio-fs lseek (SEEK_DATA/HOLE) */
	SCMP_SYS(pipe2),           /* exec client's signal self-pipe */
	/* memory and threads */
	SCMP_SYS(brk),             /* malloc */
	SCMP_SYS(munmap),          /* free of large blocks, thread stacks, teardown */
	SCMP_SYS(mremap),          /* realloc of large blocks */
	SCMP_SYS(madvise),         /* glibc returns exited threads' stacks */
	SCMP_SYS(futex),           /* mutexes, pthread_join */
	SCMP_SYS(set_robust_list), /* every new thread */
	SCMP_SYS(rseq),            /* every new thread */
	SCMP_SYS(sched_yield),     /* glibc lock back-off */
	SCMP_SYS(exit),            /* a thread ends */
	SCMP_SYS(exit_group),      /* kbox ends */
	/* signals */
	SCMP_SYS(rt_sigprocmask),  /* vCPU kick signal is unblocked per thread */
	SCMP_SYS(rt_sigreturn),    /* return from any signal handler */
	SCMP_SYS(restart_syscall), /* a call interrupted by a stop signal */
	SCMP_SYS(getpid),          /* glibc, raise() */
	SCMP_SYS(gettid),          /* glibc, pthread_kill() */
	/* time */
	SCMP_SYS(clock_gettime),   /* timeouts; vDSO fallback */
	SCMP_SYS(clock_nanosleep), /* agent connect retries (nanosleep) */
	SCMP_SYS(rt_sigtimedwait), /* the secrets-reload thread waits for SIGHUP */
	/* Unix sockets (AF_UNIX only, see socket below) */
	SCMP_SYS(connect),         /* agent control socket, guest-initiated vsock */
	SCMP_SYS(accept4),         /* host side connecting on the control socket */
	SCMP_SYS(shutdown),        /* half-closes on vsock connections */
	SCMP_SYS(sendto),          /* send() on vsock connections */
	SCMP_SYS(recvfrom),        /* recv() on vsock connections */
	/* virtio-fs: files under the -v folders (Landlock keeps it there) */
	SCMP_SYS(openat),          /* reopen through /proc/self/fd, opendir */
	SCMP_SYS(openat2),         /* RESOLVE_BENEATH lookups */
	SCMP_SYS(newfstatat),      /* stat, fstat */
	SCMP_SYS(fstat),           /* stdio on old glibc paths */
	SCMP_SYS(readlinkat),      /* READLINK, path of an fd */
	SCMP_SYS(getdents64),      /* READDIR, runtime dir clean-up */
	SCMP_SYS(mkdirat),         /* MKDIR */
	SCMP_SYS(mknodat),         /* MKNOD (files, FIFOs, sockets) */
	SCMP_SYS(symlinkat),       /* SYMLINK */
	SCMP_SYS(unlinkat),        /* UNLINK, RMDIR */
	SCMP_SYS(linkat),          /* LINK */
	SCMP_SYS(renameat),        /* RENAME (glibc's renameat2 without flags) */
	SCMP_SYS(renameat2),       /* RENAME2 with flags */
	SCMP_SYS(fchownat),        /* SETATTR uid/gid */
	SCMP_SYS(chmod),           /* SETATTR mode through /proc/self/fd */
	SCMP_SYS(fchmod),          /* SETATTR mode on a handle, CREATE's mode */
	SCMP_SYS(utimensat),       /* SETATTR times */
	SCMP_SYS(truncate),        /* SETATTR size without a handle */
	SCMP_SYS(ftruncate),       /* SETATTR size with a handle */
	SCMP_SYS(faccessat),       /* ACCESS */
	SCMP_SYS(faccessat2),      /* ACCESS with AT_EMPTY_PATH */
	SCMP_SYS(fallocate),       /* FALLOCATE */
	SCMP_SYS(fsync),           /* FSYNC */
	SCMP_SYS(fdatasync),       /* FSYNC with datasync */
	SCMP_SYS(fstatfs),         /* STATFS */
	SCMP_SYS(getxattr),        /* GETXATTR */
	SCMP_SYS(setxattr),        /* SETXATTR */
	SCMP_SYS(listxattr),       /* LISTXATTR */
	SCMP_SYS(removexattr),     /* REMOVEXATTR */
	/* exit clean-up of the sandbox's runtime directory */
	SCMP_SYS(unlink),          /* control socket, info file */
	SCMP_SYS(rmdir),           /* the sandbox directory */
	/* kbox fork (the fork socket, made before the lock-down) */
	SCMP_SYS(recvmsg),         /* the fork file's descriptor from kbox fork */
	SCMP_SYS(geteuid),         /* the fork file must be the user's own */
};

/* Added when the guest has a network (socket families are checked
 * apart). */
static const int ld_net[] = {
	SCMP_SYS(epoll_wait),      /* netstack: host sockets and its timer */
	SCMP_SYS(epoll_pwait),     /* the same, where glibc picks it */
	SCMP_SYS(epoll_ctl),       /* netstack: flows come and go */
	SCMP_SYS(timerfd_settime), /* netstack: lwIP timer */
	SCMP_SYS(setsockopt),      /* netstack: SO_LINGER for resets */
	SCMP_SYS(getsockopt),      /* netstack: SO_ERROR of a connect */
	SCMP_SYS(getsockname),     /* getaddrinfo: source address, netlink */
	SCMP_SYS(bind),            /* getaddrinfo: the netlink socket */
	SCMP_SYS(sendmmsg),        /* resolver: A and AAAA queries together */
	SCMP_SYS(recvmsg),         /* getaddrinfo: netlink replies */
	SCMP_SYS(uname),           /* resolver: the host name for search */
	SCMP_SYS(getrandom),       /* TLS interception: leaf serials, engine seeds; --dns query ids */
};

/* ioctl requests allowed: the KVM ones the VM threads still make, and the
 * terminal ones of `kbox run -t` (on fds 0-2 only). */
static const unsigned long ld_kvm_ioctls[] = {
	KVM_RUN,      /* vCPU threads */
	KVM_IRQ_LINE, /* serial port interrupt */
	KVM_GET_REGS, /* RIP for the report of a KVM internal error */
	/* kbox fork: the paused VM's state read into the fork's file
	 * (vmm/core/snapshot.c); reading only, the VM's own */
	KVM_CHECK_EXTENSION, KVM_GET_MSR_INDEX_LIST, KVM_GET_TSC_KHZ, KVM_GET_SREGS,
	KVM_GET_FPU, KVM_GET_XSAVE, KVM_GET_XSAVE2, KVM_GET_XCRS, KVM_GET_LAPIC, KVM_GET_MSRS,
	KVM_GET_MP_STATE, KVM_GET_VCPU_EVENTS, KVM_GET_DEBUGREGS, KVM_GET_CPUID2, KVM_GET_PIT2,
	KVM_GET_IRQCHIP, KVM_GET_CLOCK,
};
static const unsigned long ld_tty_ioctls[] = {
	TCGETS,     /* isatty, tcgetattr */
	TCSETS,     /* tcsetattr TCSANOW */
	TCSETSW,    /* tcsetattr TCSADRAIN: raw mode and its restore */
	TCSETSF,    /* tcsetattr TCSAFLUSH */
	TIOCGWINSZ, /* terminal size for the guest's pty */
};
/* fcntl commands: non-blocking mode and virtio-fs byte-range locks. */
static const int ld_fcntls[] = { F_GETFL, F_SETFL, F_GETFD, F_SETFD, F_OFD_GETLK, F_OFD_SETLK };

/* SCMP_An leaves datum_b to the compiler's zeroing, which clang's
 * -Wmissing-field-initializers refuses. */
static struct scmp_arg_cmp arg(unsigned n, enum scmp_compare op, scmp_datum_t a, scmp_datum_t b)
{
	return (struct scmp_arg_cmp){ .arg = n, .op = op, .datum_a = a, .datum_b = b };
}

static int seccomp_build(bool net, scmp_filter_ctx *out, unsigned *count)
{
	/* TRAP rather than KILL_PROCESS so that kbox can say what happened;
	 * the handler exits at once, and SIGSYS can neither be re-handled
	 * (rt_sigaction on it is refused below) nor blocked (the kernel
	 * then kills the process). */
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_TRAP);
	if (!f)
		return -ENOMEM;
	int rc = 0;
	unsigned n = 0;
#define ADD(action, nr, ...)                                                   \
	do {                                                                   \
		if (!rc) {                                                     \
			rc = seccomp_rule_add(f, action, nr, __VA_ARGS__);     \
			n++;                                                   \
		}                                                              \
	} while (0)
	/* A 32-bit (int 0x80) or x32 system call is never kbox's. */
	if (seccomp_attr_set(f, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_TRAP) < 0)
		rc = -EINVAL;
	/* Every existing thread gets the filter, not only this one. */
	if (!rc && seccomp_attr_set(f, SCMP_FLTATR_CTL_TSYNC, 1) < 0)
		rc = -EINVAL;
	for (size_t i = 0; i < sizeof ld_plain / sizeof ld_plain[0]; i++)
		ADD(SCMP_ACT_ALLOW, ld_plain[i], 0);
	for (size_t i = 0; i < sizeof ld_kvm_ioctls / sizeof ld_kvm_ioctls[0]; i++)
		ADD(SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
		    arg(1, SCMP_CMP_EQ, ld_kvm_ioctls[i], 0));
	for (size_t i = 0; i < sizeof ld_tty_ioctls / sizeof ld_tty_ioctls[0]; i++)
		ADD(SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 2, arg(0, SCMP_CMP_LE, 2, 0),
		    arg(1, SCMP_CMP_EQ, ld_tty_ioctls[i], 0));
	for (size_t i = 0; i < sizeof ld_fcntls / sizeof ld_fcntls[0]; i++)
		ADD(SCMP_ACT_ALLOW, SCMP_SYS(fcntl), 1,
		    arg(1, SCMP_CMP_EQ, (scmp_datum_t)ld_fcntls[i], 0));
	/* Malloc, thread stacks: never new executable memory. */
	ADD(SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1, arg(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	ADD(SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1, arg(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	/* An executable mapping is refused with EPERM rather than stopping
	 * kbox: glibc loads code on demand (getaddrinfo's NSS modules named in
	 * nsswitch.conf), and a dlopen that fails makes it skip that module as
	 * a missing one.  Landlock keeps such files unreadable anyway; this
	 * covers a kernel without it. */
	ADD(SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mmap), 1,
	    arg(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
	ADD(SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mprotect), 1,
	    arg(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
	/* pthread_create: threads only, never a new process. */
	ADD(SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
	    arg(0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
	/* kbox fork's RAM writer: glibc's fork(), exactly its flags (a copy
	 * that shares nothing; it inherits this filter and Landlock, and
	 * there is no execve). */
	ADD(SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
	    arg(0, SCMP_CMP_EQ, CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD, 0));
	/* clone3's flags sit in memory a filter cannot read: glibc falls
	 * back to clone on ENOSYS. */
	ADD(SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	/* Only Unix sockets, as the vsock bridge makes. */
	ADD(SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, arg(0, SCMP_CMP_EQ, AF_UNIX, 0));
	/* Exec client and stop signals; not SIGSYS, whose handler reports a
	 * refusal. */
	ADD(SCMP_ACT_ALLOW, SCMP_SYS(rt_sigaction), 1, arg(0, SCMP_CMP_NE, SIGSYS, 0));
	/* vm_stop kicks vCPU threads: only threads of this process. */
	ADD(SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1, arg(0, SCMP_CMP_EQ, (scmp_datum_t)getpid(), 0));
	/* getrlimit (glibc uses prlimit64): reading only, own process. */
	ADD(SCMP_ACT_ALLOW, SCMP_SYS(prlimit64), 2, arg(0, SCMP_CMP_EQ, 0, 0),
	    arg(2, SCMP_CMP_EQ, 0, 0));
	if (net) {
		/* netstack: host TCP for the guest's flows (policy-checked
		 * in netstack/policy.c); getaddrinfo: UDP to the name
		 * servers, UDP connects to order the answers, and a
		 * NETLINK_ROUTE socket for the host's addresses (and
		 * netstack/hostaddr.c's own, opened before this, asks the
		 * kernel's routes on it per connection with sendto,
		 * recvfrom and poll: nothing new); with --dns
		 * (netstack/resolver.h), connected UDP and, after a truncated
		 * answer, TCP to the configured servers (connect, sendto,
		 * recvfrom, poll: already allowed). */
		ADD(SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, arg(0, SCMP_CMP_EQ, AF_INET, 0));
		ADD(SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, arg(0, SCMP_CMP_EQ, AF_INET6, 0));
		ADD(SCMP_ACT_ALLOW, SCMP_SYS(socket), 2, arg(0, SCMP_CMP_EQ, AF_NETLINK, 0),
		    arg(2, SCMP_CMP_EQ, NETLINK_ROUTE, 0));
		for (size_t i = 0; i < sizeof ld_net / sizeof ld_net[0]; i++)
			ADD(SCMP_ACT_ALLOW, ld_net[i], 0);
		/* glibc's resolver sizes a UDP reply before reading it. */
		ADD(SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1, arg(1, SCMP_CMP_EQ, FIONREAD, 0));
	}
#undef ADD
	if (rc < 0) {
		seccomp_release(f);
		return rc;
	}
	*out = f;
	*count = n;
	return 0;
}

/* ---- Landlock -------------------------------------------------------- */

/* What glibc's getaddrinfo reads ("files dns" in nsswitch.conf; both
 * are built into libc since 2.34, so no module is loaded). */
static const char *const ld_resolver[] = {
	"/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf", "/etc/host.conf", "/etc/gai.conf",
};

static int ll_abi(void)
{
	long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	return v < 0 ? -errno : (int)v;
}

static int ll_add(int ruleset, const char *path, uint64_t access, char *err, size_t errlen)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		return errbuf_fail(err, errlen, -e, "lock-down: cannot open %s: %s", path, strerror(e));
	}
	struct landlock_path_beneath_attr pb = { .allowed_access = access, .parent_fd = fd };
	long r = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
	int e = errno;
	close(fd);
	if (r < 0)
		return errbuf_fail(err, errlen, -e, "lock-down: Landlock refused a rule for %s: %s",
			       path, strerror(e));
	return 0;
}

static int ll_create(const struct ld_ruleset_attr *attr, char *err, size_t errlen)
{
	int rs = (int)syscall(SYS_landlock_create_ruleset, attr, sizeof *attr, 0);
	if (rs < 0) {
		int e = errno;
		return errbuf_fail(err, errlen, -e, "lock-down: cannot create a Landlock ruleset: %s",
			       strerror(e));
	}
	return rs;
}

static int ll_restrict(int ruleset, char *err, size_t errlen)
{
	if (syscall(SYS_landlock_restrict_self, ruleset, 0) < 0) {
		int rc = -errno;
		return errbuf_fail(err, errlen, rc, "lock-down: Landlock refused to apply: %s",
			       strerror(-rc));
	}
	return 0;
}

static int no_new_privs(char *err, size_t errlen)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		int e = errno;
		return errbuf_fail(err, errlen, -e, "lock-down: cannot set no_new_privs: %s",
			       strerror(e));
	}
	return 0;
}

/* The handler that names a refused system call, with the names it needs
 * looked up while that is still allowed. */
static int catch_sigsys(char *err, size_t errlen)
{
	resolve_names();
	struct sigaction sa = { .sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO };
	sigfillset(&sa.sa_mask);
	if (sigaction(SIGSYS, &sa, NULL) < 0) {
		int e = errno;
		return errbuf_fail(err, errlen, -e, "lock-down: cannot catch SIGSYS: %s", strerror(e));
	}
	return 0;
}

/* Loads allowlist f, for which its builder returned built (negative: it
 * could not be built, and there is nothing to release); hint follows the
 * message when loading fails. */
static int seccomp_install(int built, scmp_filter_ctx f, const char *hint, char *err,
			   size_t errlen)
{
	if (built < 0)
		return errbuf_fail(err, errlen, built,
			       "lock-down: cannot build the system-call allowlist: %s",
			       strerror(-built));
	int rc = seccomp_load(f);
	seccomp_release(f);
	if (rc < 0)
		errbuf_say(err, errlen, "lock-down: cannot install the system-call allowlist: %s%s",
		       strerror(-rc), hint);
	return rc;
}

/* Threads that exist now keep an unrestricted filesystem view: Landlock
 * applies to the calling thread and those it creates later only. */
static int thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* lwIP's thread exists before lock-down (netdev_attach starts it) and
 * Landlock binds only the calling thread and its later children: that
 * thread joins the same domain from inside, through a callback lwIP runs
 * on it, and the caller waits for its answer. */
#define LD_LWIP_WAIT_S 5

struct ld_remote {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int ruleset; /* -1: just report back (a test hook's probe) */
	int rc;
	bool done;
	void (*probe)(void);
};

static struct ld_remote ld_lwip = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
				    -1, 0, false, NULL };
static bool ld_lwip_running; /* lwIP's thread exists: a callback may be posted */

static void ld_on_lwip(void *arg)
{
	struct ld_remote *r = arg;
	int rc = 0;
	if (r->ruleset >= 0 &&
	    (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	     syscall(SYS_landlock_restrict_self, r->ruleset, 0) < 0))
		rc = -errno;
	if (r->probe)
		r->probe();
	pthread_mutex_lock(&r->lock);
	r->rc = rc;
	r->done = true;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

/* Run ld_on_lwip on lwIP's thread with ruleset (or -1) and probe; 0, the
 * callback's error, or -ETIMEDOUT if lwIP did not run it in time. */
static int ld_on_lwip_thread(int ruleset, void (*probe)(void))
{
	struct ld_remote *r = &ld_lwip;
	pthread_mutex_lock(&r->lock);
	r->ruleset = ruleset;
	r->probe = probe;
	r->done = false;
	r->rc = 0;
	pthread_mutex_unlock(&r->lock);
	if (tcpip_callback(ld_on_lwip, r) != ERR_OK)
		return -EAGAIN;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += LD_LWIP_WAIT_S;
	pthread_mutex_lock(&r->lock);
	int e = 0;
	while (!r->done && e != ETIMEDOUT)
		e = pthread_cond_timedwait(&r->cond, &r->lock, &until);
	int rc = r->done ? r->rc : -ETIMEDOUT;
	pthread_mutex_unlock(&r->lock);
	return rc;
}

static int landlock_apply(const struct lockdown_cfg *c, int abi, char *summary, size_t slen,
			  char *err, size_t errlen)
{
	struct ld_ruleset_attr attr = { .handled_access_fs = lockdown_ll_handled(abi) };
	/* kbox never listens on TCP; it dials out only for a guest's NIC,
	 * whose destinations netstack/policy.c judges. */
	if (abi >= 4)
		attr.handled_access_net = LANDLOCK_ACCESS_NET_BIND_TCP |
					  (c->network ? 0 : LANDLOCK_ACCESS_NET_CONNECT_TCP);
	if (abi >= 6)
		attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
	int rs = ll_create(&attr, err, errlen);
	if (rs < 0)
		return rs;
	int rc = 0;
	unsigned rw = 0, ro = 0;
	for (unsigned i = 0; c->mounts && i < c->mounts->n && !rc; i++) {
		const struct mount *m = &c->mounts->m[i];
		rc = ll_add(rs, m->host,
			    lockdown_ll_access(abi, m->readonly ? LD_MOUNT_RO : LD_MOUNT_RW), err,
			    errlen);
		if (m->readonly)
			ro++;
		else
			rw++;
	}
	if (!rc && c->sandbox_dir) {
		rc = ll_add(rs, c->sandbox_dir, lockdown_ll_access(abi, LD_SANDBOX_DIR), err,
			    errlen);
		char parent[PATH_MAX];
		snprintf(parent, sizeof parent, "%s", c->sandbox_dir);
		char *slash = strrchr(parent, '/');
		if (!rc && slash && slash != parent) {
			*slash = '\0';
			rc = ll_add(rs, parent, lockdown_ll_access(abi, LD_RUNTIME_DIR), err,
				    errlen);
		}
	}
	if (!rc && c->klog_path)
		rc = ll_add(rs, c->klog_path, lockdown_ll_access(abi, LD_LOG_FILE), err, errlen);
	for (size_t i = 0; !rc && i < c->n_read_files; i++) {
		rc = ll_add(rs, c->read_files[i], lockdown_ll_access(abi, LD_READ_FILE), err, errlen);
		if (rc == -ENOENT)
			rc = 0;
	}
	for (size_t i = 0; c->network && !rc && i < sizeof ld_resolver / sizeof ld_resolver[0];
	     i++) {
		rc = ll_add(rs, ld_resolver[i], lockdown_ll_access(abi, LD_RESOLVER_FILE), err,
			    errlen);
		if (rc == -ENOENT)
			rc = 0;
	}
	if (!rc)
		rc = ll_restrict(rs, err, errlen);
	ld_lwip_running = c->network;
	if (!rc && c->network && (rc = ld_on_lwip_thread(rs, NULL)) < 0)
		errbuf_say(err, errlen, "lock-down: cannot apply Landlock on lwIP's thread: %s",
		       strerror(-rc));
	close(rs);
	if (rc)
		return rc;
	snprintf(summary, slen,
		 "Landlock ABI %d (files: %u read-write and %u read-only folder(s), the "
		 "sandbox dir, the kernel log%s%s%s)",
		 abi, rw, ro, c->network ? ", resolver config" : "",
		 abi < 4 ? "" : c->network ? "; no TCP listening" : "; no TCP at all",
		 abi >= 6 ? "; signals and abstract sockets scoped" : "");
	return 0;
}

/* ---- test hooks ------------------------------------------------------ */

#ifdef KBOX_TEST_HOOKS
static const char *hook_path;

static void hook_open(void)
{
	int fd = open(hook_path, O_RDONLY | O_CLOEXEC);
	fprintf(stderr, "kbox: test hook: lwip open %s: %s\n", hook_path,
		fd >= 0 ? "ok" : strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* KBOX_TEST_LOCKDOWN="act;act;...", run right after lock-down:
 *   open:PATH       try to open PATH for reading, print the outcome
 *   lwip-open:PATH  the same from lwIP's thread (needs a network)
 *   fd:N            print what fd N refers to (or that it is closed)
 *   dlopen:PATH     load the shared object PATH, print the outcome
 *   execve          try to run /bin/sh: the allowlist must stop kbox */
static void test_hooks(void)
{
	const char *env = getenv("KBOX_TEST_LOCKDOWN");
	if (!env)
		return;
	char acts[1024];
	snprintf(acts, sizeof acts, "%s", env);
	char *save = NULL;
	for (char *a = strtok_r(acts, ";", &save); a; a = strtok_r(NULL, ";", &save)) {
		if (strncmp(a, "open:", 5) == 0) {
			int fd = open(a + 5, O_RDONLY | O_CLOEXEC);
			fprintf(stderr, "kbox: test hook: open %s: %s\n", a + 5,
				fd >= 0 ? "ok" : strerror(errno));
			if (fd >= 0)
				close(fd);
		} else if (strncmp(a, "lwip-open:", 10) == 0) {
			hook_path = a + 10;
			int rc = ld_lwip_running ? ld_on_lwip_thread(-1, hook_open) : -ESRCH;
			if (rc < 0)
				fprintf(stderr, "kbox: test hook: lwip open: %s\n", strerror(-rc));
		} else if (strncmp(a, "fd:", 3) == 0) {
			char link[64], target[PATH_MAX];
			snprintf(link, sizeof link, "/proc/self/fd/%s", a + 3);
			ssize_t n = readlinkat(AT_FDCWD, link, target, sizeof target - 1);
			target[n > 0 ? n : 0] = '\0';
			fprintf(stderr, "kbox: test hook: fd %s: %s\n", a + 3,
				n > 0 ? target : "closed");
		} else if (strncmp(a, "dlopen:", 7) == 0) {
			void *h = dlopen(a + 7, RTLD_NOW | RTLD_LOCAL);
			fprintf(stderr, "kbox: test hook: dlopen %s: %s\n", a + 7,
				h ? "loaded" : "failed");
			if (h)
				dlclose(h);
		} else if (strcmp(a, "execve") == 0) {
			char *argv[] = { "sh", "-c", "echo escaped", NULL };
			execve("/bin/sh", argv, NULL);
			fprintf(stderr, "kbox: test hook: execve: %s\n", strerror(errno));
		}
	}
}
#endif

/* ---- the client commands ---------------------------------------------- */

/* System calls every client command still makes, each with its reason. */
static const int ld_client_plain[] = {
	SCMP_SYS(read),            /* the agent socket, stdin, the log, info files */
	SCMP_SYS(write),           /* stdout/stderr, the agent socket, signal pipe */
	SCMP_SYS(close),           /* sockets, files */
	SCMP_SYS(poll),            /* exec's event loop, the agent handshake */
	SCMP_SYS(lseek),           /* stdio on exit */
	SCMP_SYS(brk),             /* malloc */
	SCMP_SYS(munmap),          /* free of large blocks */
	SCMP_SYS(mremap),          /* realloc of large blocks */
	SCMP_SYS(madvise),         /* malloc trimming */
	SCMP_SYS(futex),           /* glibc's internal locks */
	SCMP_SYS(exit),            /* the thread ends */
	SCMP_SYS(exit_group),      /* the command ends */
	SCMP_SYS(rt_sigprocmask),  /* glibc around signal handlers */
	SCMP_SYS(rt_sigreturn),    /* return from exec's forwarding handlers */
	SCMP_SYS(restart_syscall), /* a call interrupted by a stop signal */
	SCMP_SYS(getpid),          /* glibc */
	SCMP_SYS(gettid),          /* glibc */
	SCMP_SYS(clock_gettime),   /* timeouts, uptime; vDSO fallback */
	SCMP_SYS(clock_nanosleep), /* agent connect retries, stop and logs -f waits */
	SCMP_SYS(fstat),           /* stdio sizing its buffers */
};

/* What each command needs on top, files only in the directory given. */
static const int ld_client_exec[] = {
	SCMP_SYS(connect),  /* the sandbox's control socket */
	SCMP_SYS(pipe2),    /* the signal self-pipe */
	SCMP_SYS(sendto),   /* send() on the agent socket */
	SCMP_SYS(recvfrom), /* recv() on the agent socket */
};
static const int ld_client_dir[] = {
	SCMP_SYS(openat),     /* info files, the log, listing the runtime dir */
	SCMP_SYS(getdents64), /* listing the runtime dir */
	SCMP_SYS(newfstatat), /* lstat of the runtime dir */
	SCMP_SYS(fcntl),      /* opendir's FD_CLOEXEC */
	SCMP_SYS(mkdirat),    /* the runtime dir exists already: EEXIST */
	SCMP_SYS(mkdir),      /* the same, older glibc */
	SCMP_SYS(geteuid),    /* whose runtime dir, and is it theirs */
};
static const int ld_client_stop[] = {
	SCMP_SYS(unlink),   /* a stopped sandbox's sockets and info file */
	SCMP_SYS(unlinkat), /* the same */
	SCMP_SYS(rmdir),    /* its directory */
	SCMP_SYS(flock),    /* only if no new run of the name owns it (sandbox_release) */
};

static int client_seccomp(enum lockdown_client kind, scmp_filter_ctx *out)
{
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_TRAP);
	if (!f)
		return -ENOMEM;
	int rc = seccomp_attr_set(f, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_TRAP) < 0 ? -EINVAL : 0;
#define ADDC(nr, ...)                                                          \
	do {                                                                   \
		if (!rc)                                                       \
			rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, __VA_ARGS__);  \
	} while (0)
#define ADDALL(list)                                                           \
	for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)               \
		ADDC(list[i], 0)
	ADDALL(ld_client_plain);
	ADDC(SCMP_SYS(mmap), 1, arg(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	ADDC(SCMP_SYS(mprotect), 1, arg(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	ADDC(SCMP_SYS(rt_sigaction), 1, arg(0, SCMP_CMP_NE, SIGSYS, 0));
	/* stdio's fstat, as glibc makes it: on an fd, no path. */
	ADDC(SCMP_SYS(newfstatat), 1, arg(3, SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH, AT_EMPTY_PATH));
	/* Whether a sandbox's kbox is alive: signal 0 only. */
	ADDC(SCMP_SYS(kill), 1, arg(1, SCMP_CMP_EQ, 0, 0));
	switch (kind) {
	case LD_CLIENT_EXEC:
		ADDALL(ld_client_exec);
		ADDC(SCMP_SYS(socket), 1, arg(0, SCMP_CMP_EQ, AF_UNIX, 0));
		ADDC(SCMP_SYS(fcntl), 1, arg(1, SCMP_CMP_EQ, F_GETFL, 0));
		ADDC(SCMP_SYS(fcntl), 1, arg(1, SCMP_CMP_EQ, F_SETFL, 0));
		/* -t: the terminal on fds 0-2 only. */
		for (size_t i = 0; i < sizeof ld_tty_ioctls / sizeof ld_tty_ioctls[0]; i++)
			ADDC(SCMP_SYS(ioctl), 2, arg(0, SCMP_CMP_LE, 2, 0),
			     arg(1, SCMP_CMP_EQ, ld_tty_ioctls[i], 0));
		break;
	case LD_CLIENT_STOP:
		ADDALL(ld_client_stop);
		ADDC(SCMP_SYS(kill), 1, arg(1, SCMP_CMP_EQ, SIGTERM, 0));
		ADDC(SCMP_SYS(kill), 1, arg(1, SCMP_CMP_EQ, SIGKILL, 0));
		ADDALL(ld_client_dir);
		break;
	case LD_CLIENT_PS:
		ADDALL(ld_client_dir);
		break;
	case LD_CLIENT_LOGS: /* its log is open already */
		break;
	}
	/* isatty() on stdout, by stdio. */
	ADDC(SCMP_SYS(ioctl), 2, arg(0, SCMP_CMP_LE, 2, 0), arg(1, SCMP_CMP_EQ, TCGETS, 0));
#undef ADDALL
#undef ADDC
	if (rc < 0) {
		seccomp_release(f);
		return rc;
	}
	*out = f;
	return 0;
}

/* Landlock for a client: every filesystem right handled, dir (if any)
 * granted access; no TCP at all; signals to other processes only if
 * may_signal (stop's job).  0, or -EOPNOTSUPP without Landlock. */
static int client_landlock(const char *dir, uint64_t access, bool may_signal, char *err,
			   size_t errlen)
{
	int abi = ll_abi();
	if (abi < 1)
		return -EOPNOTSUPP;
	struct ld_ruleset_attr attr = { .handled_access_fs = lockdown_ll_handled(abi) };
	if (abi >= 4)
		attr.handled_access_net =
			LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
	if (abi >= 6)
		attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET |
			      (may_signal ? 0 : LANDLOCK_SCOPE_SIGNAL);
	int rs = ll_create(&attr, err, errlen);
	if (rs < 0)
		return rs;
	int rc = dir ? ll_add(rs, dir, access & lockdown_ll_handled(abi), err, errlen) : 0;
	if (!rc)
		rc = ll_restrict(rs, err, errlen);
	close(rs);
	return rc;
}

int lockdown_client(enum lockdown_client kind, const char *dir, char *err, size_t errlen)
{
	int nnp = no_new_privs(err, errlen);
	if (nnp < 0)
		return nnp;
	uint64_t access = 0;
	switch (kind) {
	case LD_CLIENT_EXEC: /* the control socket: connect is no filesystem right */
	case LD_CLIENT_LOGS: /* its log is open already */
		dir = NULL;
		break;
	case LD_CLIENT_PS:
		access = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
		break;
	case LD_CLIENT_STOP:
		access = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR |
			 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR;
		break;
	}
	/* Without Landlock the allowlist still holds: kbox run already
	 * warned about that kernel, a client says nothing. */
	int rc = client_landlock(dir, access, kind == LD_CLIENT_STOP, err, errlen);
	if (rc < 0 && rc != -EOPNOTSUPP)
		return rc;
	if ((rc = catch_sigsys(err, errlen)) < 0)
		return rc;
	scmp_filter_ctx f = NULL;
	rc = client_seccomp(kind, &f);
	if ((rc = seccomp_install(rc, f, "", err, errlen)) < 0)
		return rc;
#ifdef KBOX_TEST_HOOKS
	test_hooks();
#endif
	return 0;
}

/* ---- lockdown_apply ----------------------------------------------------- */

int lockdown_apply(const struct lockdown_cfg *c, char *err, size_t errlen)
{
	if (c->off) {
		if (c->verbose)
			fprintf(stderr, "kbox: lock-down: off (--no-lockdown)\n");
		return 0;
	}
	int nnp = no_new_privs(err, errlen);
	if (nnp < 0)
		return nnp;
	/* Every fd kbox needs exists now: no raising the limit later (the
	 * allowlist refuses setrlimit anyway), and nothing is ever locked
	 * in memory. */
	struct rlimit rl = { 0, 0 };
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_max = rl.rlim_cur;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	setrlimit(RLIMIT_MEMLOCK, &(struct rlimit){ 0, 0 });

	/* glibc reads /etc/localtime on the first time conversion, even
	 * gmtime_r (the CMOS clock): now, while it still may. */
	tzset();

	char ll[320];
	int abi = ll_abi();
	if (abi >= 1) {
		int threads = thread_count();
		int rc = landlock_apply(c, abi, ll, sizeof ll, err, errlen);
		if (rc < 0)
			return rc;
		/* Any thread but this one and lwIP's would escape it. */
		int left = threads - 1 - (c->network ? 1 : 0);
		if (c->verbose && left > 0) {
			size_t l = strlen(ll);
			snprintf(ll + l, sizeof ll - l,
				 " on all threads but %d started before it", left);
		} else if (c->verbose && c->network) {
			size_t l = strlen(ll);
			snprintf(ll + l, sizeof ll - l, " on every thread, lwIP's included");
		}
	} else {
		fprintf(stderr,
			"kbox: warning: this kernel has no Landlock (%s); kbox's own file "
			"access is limited by the system-call allowlist only\n",
			strerror(-abi));
		snprintf(ll, sizeof ll, "Landlock unavailable");
	}

	int rc = catch_sigsys(err, errlen);
	if (rc < 0)
		return rc;
	scmp_filter_ctx f = NULL;
	unsigned rules = 0;
	rc = seccomp_build(c->network, &f, &rules);
	rc = seccomp_install(rc, f, " (--no-lockdown runs without it, for debugging only)", err,
			     errlen);
	if (rc < 0)
		return rc;
	if (c->verbose)
		fprintf(stderr,
			"kbox: lock-down: no_new_privs; seccomp allowlist (%u rules, all threads, "
			"others stop kbox); %s; open files <= %llu, no memory locking, no core "
			"dumps\n",
			rules, ll, (unsigned long long)rl.rlim_cur);
#ifdef KBOX_TEST_HOOKS
	test_hooks();
#endif
	return 0;
}
