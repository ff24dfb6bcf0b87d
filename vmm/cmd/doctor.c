#include "vmm/cmd/doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kvm.h>
#include <linux/landlock.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "netstack/tls_cert.h"
#include "vmm/core/paths.h"
#include "vmm/core/vm.h"
#include "vmm/sandbox/sandbox.h"
#include "vmm/sandbox/template.h"

static int failures;

__attribute__((format(printf, 2, 3)))
static void line(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s ", ok ? "ok  " : "FAIL");
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	if (!ok)
		failures++;
}

/* Whether runs start from templates here (docs/snapshots.md), and
 * whether their folder is usable. */
static void check_templates(void)
{
	const char *env = getenv("KBOX_TEMPLATES");
	if (env && strcmp(env, "off") == 0) {
		line(1, "templates: off (KBOX_TEMPLATES=off): every run boots cold");
		return;
	}
	char dir[PATH_MAX], err[256];
	if (template_dir(dir, sizeof dir, false, err, sizeof err) < 0) {
		line(0, "templates: %s: runs boot cold", err);
		return;
	}
	struct stat st;
	if (lstat(dir, &st) < 0) {
		line(1, "templates: none yet; the first run of each layout makes one in %s", dir);
		return;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
		line(0, "templates: %s is not a folder private to you (mode 0700, yours, no "
			"symlink): runs boot cold; remove it or chmod 700 it", dir);
	else
		line(1, "templates: in %s ('kbox snapshot ls' lists them)", dir);
}

static void check_kvm(int pvm)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			line(0, "/dev/kvm does not exist: enable virtualization in the firmware "
				"and load kvm_intel or kvm_amd");
		else if (errno == EACCES || errno == EPERM)
			line(0, "/dev/kvm is not accessible: sudo usermod -aG kvm $USER, then log "
				"in again");
		else
			line(0, "/dev/kvm: %s", strerror(errno));
		return;
	}
	int api = ioctl(fd, KVM_GET_API_VERSION, 0);
	close(fd);
	if (api != KVM_API_VERSION) {
		line(0, "/dev/kvm speaks API %d, kbox needs %d", api, KVM_API_VERSION);
		return;
	}
	line(1, "/dev/kvm is usable: %s",
	     pvm ? "PVM (no hardware virtualization: a cold boot takes tens of seconds, a "
		   "start from a template a few; docs/pvm.md)"
		 : "hardware KVM");
}

static void check_file(const char *what, const char *name, const char *fix)
{
	char path[PATH_MAX];
	paths_default(name, path, sizeof path);
	struct stat st;
	if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, R_OK) == 0)
		line(1, "%s: %s", what, path);
	else
		line(0, "%s missing (%s): %s", what, path, fix);
}

/* The CA is made on first TLS use, so its absence is fine; a broken one
 * (half missing, key readable by others, expired) stops interception. */
static void check_ca(void)
{
	char dir[PATH_MAX - 16], key[PATH_MAX], cert[PATH_MAX], err[512] = "";
	if (tls_cert_ca_default_dir(dir, sizeof dir) < 0) {
		line(0, "TLS CA: no directory for it: set KBOX_CA_DIR or HOME to an absolute path");
		return;
	}
	snprintf(key, sizeof key, "%s/ca.key", dir);
	snprintf(cert, sizeof cert, "%s/ca.pem", dir);
	if (access(key, F_OK) < 0 && access(cert, F_OK) < 0) {
		line(1, "TLS CA: none yet in %s; made on first TLS use, or now by 'kbox ca init'",
		     dir);
		return;
	}
	struct tls_cert_ca *ca;
	if (tls_cert_ca_open(dir, &ca, err, sizeof err) < 0) {
		line(0, "TLS CA: %s", err);
		return;
	}
	time_t end = tls_cert_ca_not_after(ca);
	tls_cert_ca_free(ca);
	struct tm tm;
	char day[32] = "?";
	if (gmtime_r(&end, &tm))
		strftime(day, sizeof day, "%Y-%m-%d", &tm);
	if (end - time(NULL) < 30 * 86400)
		line(0, "TLS CA %s expires on %s: remove ca.key and ca.pem to make a new one", cert,
		     day);
	else
		line(1, "TLS CA: %s (key private to you), valid until %s", cert, day);
}

int doctor_main(int argc, char **argv)
{
	(void)argv;
	if (argc > 1) {
		printf("Usage: kbox doctor\n\nCheck that kbox can run here and say how to fix "
		       "what is missing.\n");
		return argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
			       ? 0
			       : 125;
	}
	failures = 0;
	int pvm = vm_is_pvm();
	check_kvm(pvm);
	check_file("guest kernel", pvm ? "kernel/vmlinux-pvm" : "kernel/vmlinux-std",
		   "run 'make kernel'");
	check_file("initramfs", "initramfs.cpio", "run 'make'");

	char rt[PATH_MAX - 128];
	int rc = sandbox_runtime_dir(rt, sizeof rt);
	if (rc == 0 && access(rt, W_OK) == 0)
		line(1, "runtime directory: %s", rt);
	else
		line(0, "runtime directory %s is not usable (%s): set XDG_RUNTIME_DIR to a "
			"private directory", rt, strerror(rc ? -rc : errno));

	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	if (abi > 0)
		line(1, "Landlock ABI %ld: kbox confines its own file access", abi);
	else
		line(1, "no Landlock in this kernel (%s): kbox runs with seccomp only; a 5.13+ "
			"kernel with lsm=landlock adds file confinement", strerror(errno));
	check_ca();
	check_templates();
	if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0)
		line(1, "seccomp filters available");
	else
		line(0, "seccomp is not available: kbox's lock-down needs CONFIG_SECCOMP_FILTER");
	if (getuid() == 0)
		printf("note root is not needed: a user in the 'kvm' group can run kbox\n");
	return failures ? 1 : 0;
}
