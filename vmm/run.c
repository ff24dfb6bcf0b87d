#include "vmm/run.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vmm/boot.h"
#include "vmm/config.h"
#include "vmm/cpio.h"
#include "vmm/klog.h"
#include "vmm/mptable.h"
#include "vmm/paths.h"
#include "vmm/serial.h"
#include "vmm/vm.h"

#define COM1_BASE 0x3f8
#define COM1_IRQ  4
#define COM2_BASE 0x2f8
#define COM2_IRQ  3
#define MAX_IMAGE (512ull << 20)

/* Switches for a guest kernel that is not PVM-aware running on a PVM host
 * (docs/pvm.md says which instruction each one avoids). */
static const char PVM_CMDLINE[] =
	" noxsave clearcpuid=smap,popcnt,cx16,fsgsbase,rdrand,rdseed,invpcid,rdpid";

struct run_opts {
	unsigned cpus;
	uint64_t memory_mib;
	const char *kernel, *initrd, *conf, *klog_path, *append;
	int verbose;
	char **argv;
};

void run_usage(FILE *f)
{
	fprintf(f,
		"Usage: kbox run [OPTIONS] -- COMMAND [ARG...]\n"
		"\n"
		"Boot a microVM, run COMMAND inside it and exit with COMMAND's exit code\n"
		"(128+N if it was killed by signal N; 125 if kbox itself failed).\n"
		"\n"
		"Options:\n"
		"  -c, --cpus N          virtual CPUs (1-%u; default 1)\n"
		"  -m, --memory MIB      guest RAM in MiB (default 512; 256 on PVM hosts)\n"
		"      --kernel PATH     guest kernel: vmlinux ELF or bzImage\n"
		"                        (default: the one built by 'make kernel' for this host)\n"
		"      --initrd PATH     initramfs (default: build/initramfs.cpio)\n"
		"      --conf FILE       sandbox.yaml with cpus, memory, kernel, initrd, command\n"
		"      --kernel-log FILE where the guest kernel's log goes\n"
		"                        (default: $XDG_STATE_HOME/kbox/kernel.log)\n"
		"      --append ARGS     extra kernel command-line arguments\n"
		"  -v, --verbose         kernel log and kbox's decisions on stderr\n"
		"  -h, --help            this help\n"
		"\n"
		"Options on the command line override the same settings in --conf.\n"
		"Standard input reaches COMMAND line by line; its end is passed on as\n"
		"end of file.\n",
		VM_MAX_CPUS);
}

__attribute__((format(printf, 1, 2)))
static int die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("kbox: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return KBOX_EXIT_FAILURE;
}

static int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	if (!s || !*s)
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || s[0] == '-' || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int read_file(const char *path, uint8_t **data, size_t *len, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -errno;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s is not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	if ((uint64_t)st.st_size > MAX_IMAGE || st.st_size == 0) {
		snprintf(err, errlen, "%s is %s", path, st.st_size ? "larger than 512 MiB" : "empty");
		close(fd);
		return -EFBIG;
	}
	uint8_t *buf = malloc((size_t)st.st_size);
	if (!buf) {
		close(fd);
		snprintf(err, errlen, "out of memory reading %s", path);
		return -ENOMEM;
	}
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			snprintf(err, errlen, "cannot read %s: %s", path,
				 r < 0 ? strerror(errno) : "file shrank while reading");
			free(buf);
			close(fd);
			return -EIO;
		}
		got += (size_t)r;
	}
	close(fd);
	*data = buf;
	*len = got;
	return 0;
}

/* The archive that tells guest-init what to run. */
static int command_archive(char **argv, struct cpio *c)
{
	size_t alen = 0;
	for (char **a = argv; *a; a++)
		alen += strlen(*a) + 1;
	char *abuf = malloc(alen ? alen : 1);
	if (!abuf)
		return -ENOMEM;
	size_t off = 0;
	for (char **a = argv; *a; a++) {
		size_t n = strlen(*a) + 1;
		memcpy(abuf + off, *a, n);
		off += n;
	}
	static const char env[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\0"
				  "HOME=/root\0TERM=dumb\0";
	cpio_init(c);
	cpio_add_dir(c, "kbox");
	cpio_add_file(c, "kbox/argv", 0644, abuf, alen);
	cpio_add_file(c, "kbox/env", 0644, env, sizeof env - 1);
	free(abuf);
	return cpio_finish(c);
}

static void out_stdout(void *ctx, const uint8_t *b, size_t n)
{
	(void)ctx;
	while (n) {
		ssize_t w = write(STDOUT_FILENO, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* stdout gone: the command's output is dropped */
		b += w;
		n -= (size_t)w;
	}
}

struct line_irq {
	struct irq_sink sink;
	struct vm *vm;
	unsigned irq;
};

static void line_irq_set(struct irq_sink *s, int level)
{
	struct line_irq *l = (struct line_irq *)s;
	vm_irq_line(l->vm, l->irq, level);
}

static uint8_t uart_in(void *ctx, unsigned off) { return serial_in(ctx, off); }
static void uart_out(void *ctx, unsigned off, uint8_t v) { serial_out(ctx, off, v); }

struct stdin_pump {
	struct serial *uart;
	struct vm *vm;
};

/* Host stdin → the command channel, at the pace the guest drains the
 * UART.  End of input becomes VEOF (twice after a partial line, as a
 * terminal user would type it). */
static void *stdin_thread(void *arg)
{
	struct stdin_pump *p = arg;
	uint8_t buf[4096];
	int at_line_start = 1;
	for (;;) {
		ssize_t r = read(STDIN_FILENO, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		at_line_start = buf[r - 1] == '\n';
		size_t off = 0;
		while (off < (size_t)r) {
			if (atomic_load(&p->vm->end) != VM_END_NONE)
				return NULL;
			size_t took = serial_feed(p->uart, buf + off, (size_t)r - off);
			off += took;
			if (!took)
				nanosleep(&(struct timespec){ .tv_nsec = 2000000 }, NULL);
		}
	}
	static const uint8_t eof[2] = { 4, 4 };
	size_t want = at_line_start ? 1 : 2, off = 0;
	while (off < want && atomic_load(&p->vm->end) == VM_END_NONE) {
		size_t took = serial_feed(p->uart, eof + off, want - off);
		off += took;
		if (!took)
			nanosleep(&(struct timespec){ .tv_nsec = 2000000 }, NULL);
	}
	return NULL;
}

static int open_klog(const char *path, char *used, size_t usedlen)
{
	char def[PATH_MAX];
	if (!path) {
		const char *st = getenv("XDG_STATE_HOME");
		const char *home = getenv("HOME");
		if (st && *st)
			snprintf(def, sizeof def, "%s/kbox", st);
		else
			snprintf(def, sizeof def, "%s/.local/state/kbox", home && *home ? home : "/tmp");
		/* mkdir -p of the state directory, one component at a time. */
		for (char *s = def + 1; *s; s++) {
			if (*s == '/') {
				*s = '\0';
				mkdir(def, 0700);
				*s = '/';
			}
		}
		mkdir(def, 0700);
		size_t l = strlen(def);
		snprintf(def + l, sizeof def - l, "/kernel.log");
		path = def;
	}
	snprintf(used, usedlen, "%s", path);
	return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
}

static int parse_args(int argc, char **argv, struct run_opts *o, struct kbox_config *cfg)
{
	static const struct option opts[] = {
		{ "cpus", required_argument, NULL, 'c' },
		{ "memory", required_argument, NULL, 'm' },
		{ "kernel", required_argument, NULL, 'K' },
		{ "initrd", required_argument, NULL, 'I' },
		{ "conf", required_argument, NULL, 'C' },
		{ "kernel-log", required_argument, NULL, 'L' },
		{ "append", required_argument, NULL, 'A' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t v;
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+c:m:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (parse_uint(optarg, VM_MAX_CPUS, &v) || v == 0)
				return die("--cpus takes a number from 1 to %u, not '%s'",
					   VM_MAX_CPUS, optarg);
			o->cpus = (unsigned)v;
			break;
		case 'm':
			if (parse_uint(optarg, 1u << 20, &v) || v < 64)
				return die("--memory takes MiB from 64 to 1048576, not '%s'",
					   optarg);
			o->memory_mib = v;
			break;
		case 'K': o->kernel = optarg; break;
		case 'I': o->initrd = optarg; break;
		case 'C': o->conf = optarg; break;
		case 'L': o->klog_path = optarg; break;
		case 'A': o->append = optarg; break;
		case 'v': o->verbose = 1; break;
		case 'h':
			run_usage(stdout);
			return -1;
		case ':':
			return die("option '%s' needs a value (see 'kbox run --help')",
				   argv[optind - 1]);
		default:
			return die("unknown option '%s' (see 'kbox run --help')", argv[optind - 1]);
		}
	}
	if (o->conf) {
		char err[512];
		if (config_load(o->conf, cfg, err, sizeof err) < 0)
			return die("%s", err);
		if (!o->cpus)
			o->cpus = cfg->cpus;
		if (!o->memory_mib)
			o->memory_mib = cfg->memory_mib;
		if (!o->kernel)
			o->kernel = cfg->kernel;
		if (!o->initrd)
			o->initrd = cfg->initrd;
		if (!o->verbose && cfg->verbose == 1)
			o->verbose = 1;
	}
	if (optind < argc)
		o->argv = argv + optind;
	else if (cfg->argv)
		o->argv = cfg->argv;
	else
		return die("no command given: kbox run [OPTIONS] -- COMMAND [ARG...]");
	return 0;
}

int run_main(int argc, char **argv)
{
	struct run_opts o = { 0 };
	struct kbox_config cfg;
	config_init(&cfg);
	int rc = parse_args(argc, argv, &o, &cfg);
	if (rc) {
		config_free(&cfg);
		return rc < 0 ? 0 : rc;
	}

	int pvm = vm_is_pvm();
	if (!o.cpus)
		o.cpus = 1;
	if (!o.memory_mib)
		o.memory_mib = pvm ? 256 : 512;
	char kpath[PATH_MAX], ipath[PATH_MAX];
	if (!o.kernel) {
		paths_default(pvm ? "kernel/vmlinux-pvm" : "kernel/vmlinux-std", kpath, sizeof kpath);
		o.kernel = kpath;
	}
	if (!o.initrd) {
		paths_default("initramfs.cpio", ipath, sizeof ipath);
		o.initrd = ipath;
	}
	if (o.verbose)
		fprintf(stderr, "kbox: /dev/kvm is %s; kernel %s, %u vCPU(s), %llu MiB\n",
			pvm ? "PVM (no hardware virtualization: PVM-compat kernel and switches)"
			    : "hardware KVM",
			o.kernel, o.cpus, (unsigned long long)o.memory_mib);

	char err[512];
	uint8_t *kimg = NULL, *initrd = NULL, *all = NULL;
	size_t klen = 0, ilen = 0;
	struct cpio cmd;
	cpio_init(&cmd);
	static struct vm vm; /* static: the stdin thread may outlive this frame */
	int vm_made = 0;
	static struct klog kl;
	klog_init(&kl);
	static struct serial com1, com2;
	serial_init(&com1, NULL, NULL, NULL);
	serial_init(&com2, NULL, NULL, NULL);
	rc = KBOX_EXIT_FAILURE;

	if (read_file(o.kernel, &kimg, &klen, err, sizeof err) < 0) {
		die("%s (build it with 'make kernel', or pass --kernel PATH)", err);
		goto out;
	}
	if (read_file(o.initrd, &initrd, &ilen, err, sizeof err) < 0) {
		die("%s (build it with 'make', or pass --initrd PATH)", err);
		goto out;
	}
	if (command_archive(o.argv, &cmd) < 0) {
		die("the command is too large to hand to the guest");
		goto out;
	}
	/* The kernel unpacks concatenated archives; each starts 4-aligned. */
	size_t base = (ilen + 3) & ~(size_t)3;
	all = calloc(1, base + cmd.len);
	if (!all) {
		die("out of memory");
		goto out;
	}
	memcpy(all, initrd, ilen);
	memcpy(all + base, cmd.buf, cmd.len);

	if (vm_create(&vm, o.cpus, o.memory_mib, err, sizeof err) < 0) {
		vm_made = 1;
		die("%s", err);
		goto out;
	}
	vm_made = 1;
	struct boot_image k;
	if (boot_load_kernel(&vm.mem, kimg, klen, &k, err, sizeof err) < 0) {
		die("%s: %s", o.kernel, err);
		goto out;
	}
	uint64_t initrd_addr;
	if (boot_place_initrd(&vm.mem, &k, all, base + cmd.len, &initrd_addr, err,
			      sizeof err) < 0) {
		die("%s", err);
		goto out;
	}
	if (mptable_write(&vm.mem, o.cpus) < 0) {
		die("cannot write the MP table");
		goto out;
	}
	/* Without kvmclock (the PVM variant) the kernel would calibrate the
	 * TSC against the PIT, which fails under emulation. */
	char tsc[40] = "";
	unsigned khz = pvm ? vm_tsc_khz(&vm) : 0;
	if (khz)
		snprintf(tsc, sizeof tsc, " tsc_early_khz=%u", khz);
	char cmdline[4096];
	snprintf(cmdline, sizeof cmdline,
		 "console=ttyS0 reboot=k panic=-1 8250.nr_uarts=2 mitigations=off%s%s%s%s%s",
		 o.verbose ? "" : " quiet", pvm ? PVM_CMDLINE : "", tsc, o.append ? " " : "",
		 o.append ? o.append : "");
	if (strlen(cmdline) >= sizeof cmdline - 1) {
		die("--append is too long");
		goto out;
	}
	struct boot_setup bs = {
		.low_ram = vm.low_ram, .high_ram = vm.high_ram, .cmdline = cmdline,
		.initrd_addr = initrd_addr, .initrd_len = base + cmd.len,
	};
	if (boot_write_params(&vm.mem, &k, &bs, err, sizeof err) < 0) {
		die("%s", err);
		goto out;
	}
	if (o.verbose)
		fprintf(stderr, "kbox: kernel entry 0x%llx, command line: %s\n",
			(unsigned long long)k.entry, cmdline);

	char klog_used[PATH_MAX];
	int klog_fd = open_klog(o.klog_path, klog_used, sizeof klog_used);
	if (klog_fd < 0) {
		die("cannot write the kernel log %s: %s", klog_used, strerror(errno));
		goto out;
	}
	kl.fd = klog_fd;
	kl.echo = o.verbose;

	struct line_irq irq1 = { { line_irq_set }, &vm, COM1_IRQ };
	struct line_irq irq2 = { { line_irq_set }, &vm, COM2_IRQ };
	serial_destroy(&com1);
	serial_destroy(&com2);
	serial_init(&com1, &irq1.sink, klog_write, &kl);
	serial_init(&com2, &irq2.sink, out_stdout, NULL);
	vm_add_pio(&vm, &(struct vm_pio){ COM1_BASE, 8, uart_in, uart_out, &com1 });
	vm_add_pio(&vm, &(struct vm_pio){ COM2_BASE, 8, uart_in, uart_out, &com2 });

	if (vm_setup_cpus(&vm, k.entry, err, sizeof err) < 0) {
		die("%s", err);
		goto out;
	}
	signal(SIGPIPE, SIG_IGN);
	static struct stdin_pump pump;
	pump = (struct stdin_pump){ &com2, &vm };
	pthread_t pump_thread;
	if (pthread_create(&pump_thread, NULL, stdin_thread, &pump) == 0)
		pthread_detach(pump_thread);

	enum vm_end end = vm_run(&vm);
	klog_flush(&kl);
	if (end == VM_END_ERROR) {
		die("%s%s; kernel log: %s", vm.error,
		    pvm ? " (PVM host: the guest ran an instruction its emulator lacks)" : "",
		    klog_used);
	} else if (kl.exit_code >= 0) {
		rc = kl.exit_code;
	} else if (kl.panic) {
		die("the guest kernel panicked: %s; kernel log: %s", kl.panic_msg, klog_used);
	} else if (kl.init_failed) {
		die("guest-init failed: %s; kernel log: %s", kl.init_msg, klog_used);
	} else {
		die("the guest stopped (%s) before the command finished; kernel log: %s",
		    end == VM_END_TRIPLE_FAULT ? "triple fault" :
		    end == VM_END_RESET ? "reset" : "power off", klog_used);
	}
	close(klog_fd);
out:
	if (vm_made)
		vm_destroy(&vm);
	serial_destroy(&com1);
	serial_destroy(&com2);
	cpio_free(&cmd);
	free(all);
	free(initrd);
	free(kimg);
	config_free(&cfg);
	return rc;
}
