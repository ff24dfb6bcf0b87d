#include "vmm/cmd/run.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/datadir.h"
#include "lib/errbuf.h"
#include "lib/fileio.h"
#include "netstack/tls_cert.h"
#include "proto/runcfg.h"
#include "vmm/cli.h"
#include "vmm/cmd/trust.h"
#include "vmm/core/boot.h"
#include "vmm/core/klog.h"
#include "vmm/core/mptable.h"
#include "vmm/core/paths.h"
#include "vmm/core/serial.h"
#include "vmm/core/snapshot.h"
#include "vmm/core/virtio_bus.h"
#include "vmm/core/vm.h"
#include "vmm/image/image.h"
#include "vmm/sandbox/agent_conn.h"
#include "vmm/sandbox/config.h"
#include "vmm/sandbox/disks.h"
#include "vmm/sandbox/exec_client.h"
#include "vmm/sandbox/forkctl.h"
#include "vmm/sandbox/hostfiles.h"
#include "vmm/sandbox/lockdown.h"
#include "vmm/sandbox/mounts.h"
#include "vmm/sandbox/netdev.h"
#include "vmm/sandbox/sandbox.h"
#include "vmm/sandbox/template.h"
#include "vmm/sandbox/tlsconf.h"
#include "vmm/sandbox/vsockdev.h"

#define COM1_BASE 0x3f8
#define COM1_IRQ  4
#define GUEST_CID 3
#define MAX_ENV   256
#define MAX_IMAGE (512ull << 20)

/* Switches for a guest kernel that is not PVM-aware running on a PVM host
 * (docs/pvm.md says which instruction each one avoids, and why RCU's stall
 * warnings are off there: the guest's clock leaps, and ring 0 is emulated). */
static const char PVM_CMDLINE[] =
	" noxsave clearcpuid=smap,popcnt,cx16,fsgsbase rcupdate.rcu_cpu_stall_suppress=1";

/* KBOX_PVM_CMDLINE replaces the PVM switches: for finding out which ones a
 * new kernel or host still needs (docs/pvm.md). */
static const char *pvm_cmdline(void)
{
	static char buf[512];
	const char *e = getenv("KBOX_PVM_CMDLINE");
	if (!e)
		return PVM_CMDLINE;
	snprintf(buf, sizeof buf, " %s", e);
	return buf;
}

struct run_opts {
	unsigned cpus;
	uint64_t memory_mib;
	const char *kernel, *initrd, *conf, *klog_path, *append, *name, *workdir, *image;
	int verbose, detach, tty, no_lockdown, cold;
	char **argv;
	const char *env[MAX_ENV];
	unsigned nenv;
	/* The sandbox-wide environment (every command, kbox exec's too) and
	 * kbox's CA: handed to guest-init in the run configuration
	 * (proto/runcfg.h). */
	const char *senv[MAX_ENV];
	unsigned nsenv;
	const char *ca_pem;
	struct mounts *mounts;
	struct disks *disks;
	struct netdev *net;
	struct tlsconf *tls;
	const char *secret_conf; /* --secret-conf */
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
		"  -n, --name NAME       sandbox name for 'kbox exec/ps/stop/logs' and the\n"
		"                        guest's host name (default kbox-PID)\n"
		"  -d, --detach          start in the background; print the name and return\n"
		"  -t, --tty             give COMMAND a terminal (interactive programs)\n"
		"  -e, --env K=V         set an environment variable for COMMAND (repeatable)\n"
		"  -w, --workdir DIR     directory COMMAND starts in (default /)\n"
		"  -v, --volume HOST:GUEST[:ro]\n"
		"                        share the host folder HOST at GUEST in the guest,\n"
		"                        read-only with :ro (repeatable, at most %u); .env*,\n"
		"                        secrets.env*, kbox.yaml* and their editor copies\n"
		"                        stay hidden, whatever the case\n"
		"      --disk NAME:GUEST_PATH[:size=SIZE][:ro]\n"
		"                        a disk volume (ext4) mounted at GUEST_PATH: kept in\n"
		"                        kbox's data folder, made on first use with SIZE\n"
		"                        (default 8G, 64M to 1T; a larger SIZE later grows it),\n"
		"                        kept across runs; one sandbox at a time read-write\n"
		"                        (repeatable, at most %u; 'kbox disk ls|rm')\n"
		"      --kernel PATH     guest kernel: vmlinux ELF or bzImage\n"
		"                        (default: the one built by 'make kernel' for this host)\n"
		"      --initrd PATH     initramfs (default: build/initramfs.cpio)\n"
		"      --image NAME|DIR  an image from 'kbox image ls', or a root filesystem\n"
		"                        folder (a path with '/', e.g. made with debootstrap),\n"
		"                        shared read-only under a writable layer in guest RAM\n"
		"                        that vanishes with the sandbox (default: the initramfs)\n"
		"      --conf FILE       sandbox.yaml (docs/config.md; its mounts come before\n"
		"                        the -v ones)\n"
		"      --no-project      do not look for ./kbox.yaml (see below)\n"
		"      --kernel-log FILE where the guest kernel's log goes\n"
		"                        (default: $XDG_STATE_HOME/kbox/kernel.log, else\n"
		"                        ~/.local/state/kbox/kernel.log; if that cannot be\n"
		"                        written, the runtime folder's .kernel.log)\n"
		"      --append ARGS     extra kernel command-line arguments\n"
		"      --network MODE    none (no NIC), public (default: the internet but no\n"
		"                        private, loopback, link-local or host addresses) or\n"
		"                        allowlist (only what --allow names)\n"
		"      --allow RULE      allow a destination: name, *.suffix, address or CIDR,\n"
		"                        with :PORT; host.kbox.internal:PORT reaches the\n"
		"                        host's 127.0.0.1:PORT (repeatable)\n"
		"      --deny RULE       deny a destination; beats every allow (repeatable)\n"
		"      --audit-log FILE  append every network decision to FILE (JSON lines)\n"
		"      --add-host NAME:ADDR\n"
		"                        our DNS answers NAME with ADDR and never asks the\n"
		"                        host's resolver; connections are still judged by the\n"
		"                        policy under NAME (repeatable)\n"
		"      --dns ADDR[:PORT] a name server kbox asks for the guest instead of the\n"
		"                        host's resolver (IPv6: [ADDR]:PORT; repeatable, at\n"
		"                        most 3, tried in order; replaces the file's\n"
		"                        network.dns); answers pass the same rebinding and\n"
		"                        policy checks; kbox, not the guest, reaches them\n"
		"      --learn FILE      record every destination the guest tries (the policy\n"
		"                        still applies) and write a suggested allowlist to FILE\n"
		"  -p, --publish [ADDR:]HOSTPORT:GUESTPORT\n"
		"                        forward the host's ADDR:HOSTPORT (loopback only,\n"
		"                        default 127.0.0.1; HOSTPORT 0 picks a free port) to\n"
		"                        the guest's GUESTPORT (repeatable; 'kbox ps' shows them)\n"
		"      --secret-conf FILE\n"
		"                        secrets.yaml (docs/secrets.md): the guest sees only\n"
		"                        placeholders ($KBOX_NAME); kbox puts the real values\n"
		"                        into HTTPS requests to the hosts each secret allows\n"
		"      --tls-intercept all|secrets\n"
		"                        which TLS connections kbox opens: only those to hosts\n"
		"                        a secret may go to (default), or all with a server name\n"
		"      --tls-bypass HOST never intercept HOST (or *.suffix) (repeatable)\n"
		"      --tls-extra-ca FILE\n"
		"                        PEM CA certificates trusted for upstream servers\n"
		"                        besides the host's bundle\n"
		"      --cold            boot the kernel instead of starting from a template\n"
		"                        (a snapshot of a booted guest, made by the first\n"
		"                        run of each layout, in ~/.cache/kbox/templates;\n"
		"                        KBOX_TEMPLATES=off: never; 'kbox snapshot ls'\n"
		"                        lists them)\n"
		"      --verbose         kernel log and kbox's decisions on stderr\n"
		"      --no-lockdown     no seccomp/Landlock confinement of kbox (debugging)\n"
		"  -h, --help            this help\n"
		"\n"
		"Options on the command line override the same settings in --conf.\n"
		"Without --conf, a kbox.yaml in the current directory is the config and\n"
		"that directory the project: shared read-write at /workspace (unless the\n"
		"file mounts something there), where COMMAND starts, once its content\n"
		"is trusted ('kbox trust'; on a terminal kbox asks).  kbox.yaml,\n"
		"secrets.env and the file's secrets file are hidden from the guest.\n"
		"A detached sandbox stops when COMMAND exits or on 'kbox stop NAME';\n"
		"'kbox logs NAME' shows COMMAND's output.  Without -v the guest sees no\n"
		"host files.\n",
		VM_MAX_CPUS, MOUNTS_MAX, DISKS_MAX);
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

/* A kernel or initramfs image: a regular file of 1 byte to 512 MiB, into
 * a malloc'd *data.  0 or a negative errno with the message in err. */
static int read_image(const char *path, uint8_t **data, size_t *len, char *err, size_t errlen)
{
	char *buf;
	const char *stage;
	int rc = fileio_slurp(path, 0, MAX_IMAGE, &buf, len, NULL, &stage);
	if (rc == -ENOMEM)
		return errbuf_fail(err, errlen, rc, "out of memory reading %s", path);
	if (rc == -EFBIG)
		return errbuf_fail(err, errlen, rc, "%s is larger than 512 MiB", path);
	if (rc < 0 && strcmp(stage, "open") == 0)
		return errbuf_fail(err, errlen, rc, "cannot open %s: %s", path, strerror(-rc));
	if (rc < 0 && strcmp(stage, "stat") == 0)
		return errbuf_fail(err, errlen, -EINVAL, "%s is not a regular file", path);
	if (rc < 0)
		return errbuf_fail(err, errlen, -EIO, "cannot read %s: %s", path, strerror(-rc));
	if (*len == 0) {
		free(buf);
		return errbuf_fail(err, errlen, -EFBIG, "%s is empty", path);
	}
	*data = (uint8_t *)buf;
	return 0;
}

/* The project folder (the current directory) at /workspace, unless a mount
 * is there already; COMMAND starts in /workspace unless told otherwise. */
static int project_mount(struct run_opts *o)
{
	static char cwd[PATH_MAX];
	char err[512];
	if (!o->workdir)
		o->workdir = "/workspace";
	for (unsigned i = 0; i < o->mounts->n; i++)
		if (strcmp(o->mounts->m[i].guest, "/workspace") == 0)
			return 0;
	for (unsigned i = 0; i < o->disks->n; i++)
		if (strcmp(o->disks->d[i].guest, "/workspace") == 0)
			return 0;
	if (!getcwd(cwd, sizeof cwd))
		return cli_die("cannot find the current directory: %s", strerror(errno));
	const struct mount_spec sp = { .host = cwd, .guest = "/workspace" };
	if (mounts_add(o->mounts, &sp, err, sizeof err) < 0)
		return cli_die("project folder %s: %s", cwd, err);
	return 0;
}

enum { OPT_NETWORK = 0x100, OPT_ALLOW, OPT_DENY, OPT_AUDIT_LOG, OPT_IMAGE, OPT_NO_PROJECT };

/* The network options beyond the ones above. */
enum { OPT_ADD_HOST = 0x200, OPT_LEARN, OPT_DNS, OPT_COLD };

/* Secrets and TLS interception. */
enum { OPT_SECRET_CONF = 0x300, OPT_TLS_INTERCEPT, OPT_TLS_BYPASS, OPT_TLS_EXTRA_CA };

/* Disk volumes. */
enum { OPT_DISK = 0x400 };

/* A disk is mounted before the shared folders (guest-init), so none may
 * lie inside a share or on one. */
static int check_disk_paths(const struct run_opts *o)
{
	for (unsigned i = 0; i < o->disks->n; i++)
		for (unsigned j = 0; j < o->mounts->n; j++) {
			const char *d = o->disks->d[i].guest, *m = o->mounts->m[j].guest;
			size_t l = strlen(m);
			if (o->mounts->m[j].root)
				continue;
			if (strncmp(d, m, l) == 0 && (d[l] == '\0' || d[l] == '/'))
				return cli_die("the disk %s on %s is %s the shared folder on %s; "
					       "pick another guest path", o->disks->d[i].name, d,
					       d[l] ? "inside" : "on", m);
		}
	return 0;
}

static int parse_args(int argc, char **argv, struct run_opts *o, struct kbox_config *cfg)
{
	static const struct option opts[] = {
		{ "cpus", required_argument, NULL, 'c' },
		{ "memory", required_argument, NULL, 'm' },
		{ "name", required_argument, NULL, 'n' },
		{ "detach", no_argument, NULL, 'd' },
		{ "tty", no_argument, NULL, 't' },
		{ "env", required_argument, NULL, 'e' },
		{ "workdir", required_argument, NULL, 'w' },
		{ "kernel", required_argument, NULL, 'K' },
		{ "initrd", required_argument, NULL, 'I' },
		{ "conf", required_argument, NULL, 'C' },
		{ "kernel-log", required_argument, NULL, 'L' },
		{ "append", required_argument, NULL, 'A' },
		{ "volume", required_argument, NULL, 'v' },
		{ "disk", required_argument, NULL, OPT_DISK },
		{ "verbose", no_argument, NULL, 'V' },
		{ "no-lockdown", no_argument, NULL, 'N' },
		{ "network", required_argument, NULL, OPT_NETWORK },
		{ "allow", required_argument, NULL, OPT_ALLOW },
		{ "deny", required_argument, NULL, OPT_DENY },
		{ "audit-log", required_argument, NULL, OPT_AUDIT_LOG },
		{ "publish", required_argument, NULL, 'p' },
		{ "add-host", required_argument, NULL, OPT_ADD_HOST },
		{ "learn", required_argument, NULL, OPT_LEARN },
		{ "dns", required_argument, NULL, OPT_DNS },
		{ "image", required_argument, NULL, OPT_IMAGE },
		{ "no-project", no_argument, NULL, OPT_NO_PROJECT },
		{ "cold", no_argument, NULL, OPT_COLD },
		{ "secret-conf", required_argument, NULL, OPT_SECRET_CONF },
		{ "tls-intercept", required_argument, NULL, OPT_TLS_INTERCEPT },
		{ "tls-bypass", required_argument, NULL, OPT_TLS_BYPASS },
		{ "tls-extra-ca", required_argument, NULL, OPT_TLS_EXTRA_CA },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *vols[MOUNTS_MAX], *disks[DISKS_MAX];
	unsigned nvols = 0, ndisks = 0;
	int no_project = 0, project = 0;
	uint64_t v;
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:c:m:n:dte:w:v:p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (parse_uint(optarg, VM_MAX_CPUS, &v) || v == 0)
				return cli_die("--cpus takes a number from 1 to %u, not '%s'",
					   VM_MAX_CPUS, optarg);
			o->cpus = (unsigned)v;
			break;
		case 'm':
			if (parse_uint(optarg, 1u << 20, &v) || v < 64)
				return cli_die("--memory takes MiB from 64 to 1048576, not '%s'",
					   optarg);
			o->memory_mib = v;
			break;
		case 'n':
			if (!sandbox_name_ok(optarg))
				return cli_die("--name takes 1-64 letters, digits, '_', '.' or '-', "
					   "not '%s'", optarg);
			o->name = optarg;
			break;
		case 'd': o->detach = 1; break;
		case 't': o->tty = 1; break;
		case 'e':
			if (!strchr(optarg, '=') || optarg[0] == '=')
				return cli_die("--env takes KEY=VALUE, not '%s'", optarg);
			if (o->nenv >= MAX_ENV - 4)
				return cli_die("too many --env options (at most %d)", MAX_ENV - 4);
			o->env[o->nenv++] = optarg;
			break;
		case 'w': o->workdir = optarg; break;
		case 'K': o->kernel = optarg; break;
		case 'I': o->initrd = optarg; break;
		case 'C': o->conf = optarg; break;
		case 'L': o->klog_path = optarg; break;
		case 'A': o->append = optarg; break;
		case 'v':
			/* Added after --conf's mounts, which come first. */
			if (nvols >= MOUNTS_MAX)
				return cli_die("too many -v mounts (at most %d)", MOUNTS_MAX);
			vols[nvols++] = optarg;
			break;
		case OPT_DISK:
			/* Added after --conf's disks, which come first. */
			if (ndisks >= DISKS_MAX)
				return cli_die("too many --disk options (at most %u)", DISKS_MAX);
			disks[ndisks++] = optarg;
			break;
		case 'V': o->verbose = 1; break;
		case 'N': o->no_lockdown = 1; break;
		case OPT_NETWORK:
		case OPT_ALLOW:
		case OPT_DENY: {
			char err[512];
			if ((c == OPT_NETWORK ? netdev_set_mode(o->net, optarg, err, sizeof err)
					      : netdev_add_rule(o->net, optarg, c == OPT_DENY, err,
								sizeof err)) < 0)
				return cli_die("%s", err);
			break;
		}
		case OPT_AUDIT_LOG: o->net->audit_path = optarg; break;
		case OPT_LEARN: o->net->learn_path = optarg; break;
		case 'p':
		case OPT_DNS:
		case OPT_ADD_HOST: {
			char err[512];
			if ((c == 'p'       ? netdev_add_forward(o->net, optarg, err, sizeof err)
			     : c == OPT_DNS ? netdev_add_dns(o->net, optarg, err, sizeof err)
					    : netdev_add_host(o->net, optarg, err, sizeof err)) < 0)
				return cli_die("%s", err);
			break;
		}
		case OPT_IMAGE: o->image = optarg; break;
		case OPT_NO_PROJECT: no_project = 1; break;
		case OPT_COLD: o->cold = 1; break;
		case OPT_SECRET_CONF: o->secret_conf = optarg; break;
		case OPT_TLS_EXTRA_CA: o->tls->extra_ca = optarg; break;
		case OPT_TLS_INTERCEPT:
		case OPT_TLS_BYPASS: {
			char err[512];
			if ((c == OPT_TLS_INTERCEPT ? tlsconf_set_scope(o->tls, optarg, err, sizeof err)
						    : tlsconf_add_bypass(o->tls, optarg, err, sizeof err)) < 0)
				return cli_die("%s", err);
			break;
		}
		case 'h':
			run_usage(stdout);
			return -1;
		case ':':
			return cli_die("option '%s' needs a value (see 'kbox run --help')",
				   argv[optind - 1]);
		default:
			return cli_die("unknown option '%s' (see 'kbox run --help')", argv[optind - 1]);
		}
	}
	/* A dangling kbox.yaml symlink counts, so its error is shown. */
	if (!o->conf && !no_project &&
	    faccessat(AT_FDCWD, "kbox.yaml", F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		o->conf = "kbox.yaml";
		project = 1;
	}
	if (o->conf) {
		char err[512];
		if (config_load(o->conf, cfg, err, sizeof err) < 0)
			return cli_die("%s", err);
		if (project && trust_project(o->conf, cfg, err, sizeof err) < 0)
			return cli_die("%s", err);
		if (!o->workdir)
			o->workdir = cfg->workdir;
		/* Sandbox-wide, so kbox exec's commands get it too; -e still
		 * wins for COMMAND. */
		for (size_t i = 0; i < cfg->n_env; i++) {
			if (o->nsenv >= MAX_ENV)
				return cli_die("%s: too many environment variables (at most %d)",
					   o->conf, MAX_ENV);
			o->senv[o->nsenv++] = cfg->env[i];
		}
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
		for (unsigned i = 0; i < cfg->n_mounts; i++) {
			const struct config_mount *cm = &cfg->mounts[i];
			const struct mount_spec sp = {
				.host = cm->source, .guest = cm->target, .readonly = cm->readonly,
				.hidden = { .list = (const char *const *)cm->hidden,
					    .n = cm->n_hidden, .set = cm->hidden_set,
					    .extra = (const char *const *)cm->hidden_extra,
					    .n_extra = cm->n_hidden_extra },
			};
			if (mounts_add(o->mounts, &sp, err, sizeof err) < 0)
				return cli_die("%s:%u:%u: mounts[%u]: %s", o->conf, cm->line, cm->col, i,
					   err);
		}
		for (unsigned i = 0; i < cfg->n_disks; i++) {
			const struct config_disk *cd = &cfg->disks[i];
			if (disks_add(o->disks, cd->name, cd->target, cd->size, cd->readonly, err,
				      sizeof err) < 0)
				return cli_die("%s:%u:%u: disks[%u]: %s", o->conf, cd->line, cd->col, i,
					       err);
		}
		if (netdev_apply_config(o->net, cfg, o->conf, err, sizeof err) < 0)
			return cli_die("%s", err);
		if (o->tls->scope < 0 && cfg->tls_intercept &&
		    tlsconf_set_scope(o->tls, cfg->tls_intercept, err, sizeof err) < 0)
			return cli_die("%s: tls.intercept: %s", o->conf, err);
		for (size_t i = 0; i < cfg->n_tls_bypass; i++)
			if (tlsconf_add_bypass(o->tls, cfg->tls_bypass[i].s, err, sizeof err) < 0)
				return cli_die("%s:%u:%u: %s", o->conf, cfg->tls_bypass[i].line,
					   cfg->tls_bypass[i].col, err);
		if (!o->tls->extra_ca)
			o->tls->extra_ca = cfg->tls_extra_ca;
	}
	/* --secret-conf wins over the file's, and is hidden like it. */
	if (o->secret_conf) {
		char *dup = strdup(o->secret_conf);
		if (!dup)
			return cli_die("out of memory");
		free(cfg->secrets);
		cfg->secrets = dup;
	}
	o->tls->secrets_path = cfg->secrets;
	for (unsigned i = 0; i < nvols; i++) {
		char err[512];
		if (mounts_parse(o->mounts, vols[i], err, sizeof err) < 0)
			return cli_die("%s", err);
	}
	for (unsigned i = 0; i < ndisks; i++) {
		char err[512];
		if (disks_parse(o->disks, disks[i], err, sizeof err) < 0)
			return cli_die("--disk %s: %s", disks[i], err);
	}
	if (project) {
		int rc = project_mount(o);
		if (rc)
			return rc;
	}
	if (!o->image)
		o->image = cfg->image;
	if (o->image) {
		char err[512], dir[PATH_MAX];
		int rc = image_resolve(o->image, dir, sizeof dir);
		if (rc == -ENOTUNIQ)
			return cli_die("--image %s: matches several image ids; give more digits",
				   o->image);
		if (rc < 0)
			return cli_die("--image %s: no such image (see 'kbox image ls'; a folder "
				   "needs a '/', e.g. ./%s)", o->image, o->image);
		if (mounts_set_image(o->mounts, dir, err, sizeof err) < 0)
			return cli_die("%s", err);
	}
	if (check_disk_paths(o))
		return KBOX_EXIT_FAILURE;
	if (optind < argc)
		o->argv = argv + optind;
	else if (cfg->argv)
		o->argv = cfg->argv;
	else
		return cli_die("no command given: kbox run [OPTIONS] -- COMMAND [ARG...]");
	if (o->tty && o->detach)
		return cli_die("--tty and --detach do not go together; use 'kbox exec -t' later");
	return 0;
}

/* Keep kbox's own files from the guest (docs/security.md, "kbox's own
 * files"): the names of the files it reads and writes for the host are
 * hidden in the shares their paths pass through, and a share that holds
 * one of its folders, or lies inside one, is refused.  After the kernel
 * log is open (its place is known then) and before the mounts are
 * served.  0, or the exit code with the message written. */
static int protect_host_files(const struct run_opts *o, struct kbox_config *cfg,
			      const struct sandbox *sb, const char *klog)
{
	char err[1024], trust[PATH_MAX], data[PATH_MAX], ca[PATH_MAX], store[PATH_MAX];
	char runtime[sizeof sb->dir], trust_tmp[PATH_MAX + 8], trust_lock[PATH_MAX + 8];
	bool have_trust = trust_store_path(trust, sizeof trust) == 0;
	if (!have_trust)
		trust[0] = '\0';
	/* kbox trust writes the record through these two (vmm/cmd/trust.c). */
	snprintf(trust_tmp, sizeof trust_tmp, "%s.tmp", trust);
	snprintf(trust_lock, sizeof trust_lock, "%s.lock", trust);
	const struct config_hostfile extra[] = {
		{ o->net->audit_path, "the audit log" },
		{ o->net->learn_path, "the --learn file" },
		{ klog, "the kernel log" },
		{ have_trust ? trust : NULL, "the trust record" },
		{ have_trust ? trust_tmp : NULL, "the trust record's temporary file" },
		{ have_trust ? trust_lock : NULL, "the trust record's lock" },
		{ o->tls->extra_ca, "the extra CA file (--tls-extra-ca)" },
	};
	if (config_protect_mounts(cfg, o->conf, extra, sizeof extra / sizeof extra[0], o->mounts, err,
				  sizeof err) < 0)
		return cli_die("%s", err);
	snprintf(runtime, sizeof runtime, "%s", sb->dir);
	char *slash = strrchr(runtime, '/');
	if (slash && slash != runtime)
		*slash = '\0';
	char disk_dir[PATH_MAX];
	bool have_disks = disks_dir(disk_dir, sizeof disk_dir) == 0;
	bool have_store = image_store_dir(store, sizeof store) == 0;
	bool have_data = datadir_path(NULL, "", data, sizeof data) == 0;
	if (have_data && strlen(data) > 1 && data[strlen(data) - 1] == '/')
		data[strlen(data) - 1] = '\0';
	const struct hostfiles_folder folders[] = {
		{ have_data ? data : NULL,
		  "kbox's data folder (its CA key, the trust record, images)" },
		{ tls_cert_ca_default_dir(ca, sizeof ca) == 0 ? ca : NULL, "kbox's CA folder" },
		{ have_store ? store : NULL, "kbox's image store" },
		{ have_disks ? disk_dir : NULL, "kbox's disk folder (volumes)" },
		{ runtime, "kbox's runtime folder (sandboxes' sockets and output)" },
	};
	struct hostfiles_share shares[MOUNTS_MAX];
	for (unsigned i = 0; i < o->mounts->n; i++)
		shares[i] = (struct hostfiles_share){ o->mounts->m[i].host,
					       o->mounts->m[i].root ? "/" : o->mounts->m[i].guest,
					       o->mounts->m[i].root };
	if (hostfiles_check_folders(folders, sizeof folders / sizeof folders[0], shares, o->mounts->n,
			     have_store ? store : NULL, err, sizeof err) < 0)
		return cli_die("%s", err);
	return 0;
}

/* SIGHUP: re-read the secrets' values (kbox secrets reload). */
static void *reload_main(void *arg)
{
	struct tlsconf *t = arg;
	sigset_t hup;
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	for (;;) {
		char err[512];
		if (sigwaitinfo(&hup, NULL) != SIGHUP)
			continue;
		if (tlsconf_reload(t, err, sizeof err) < 0)
			fprintf(stderr, "kbox: secrets not reloaded: %s\n", err);
		else
			fprintf(stderr, "kbox: secrets reloaded from %s\n", t->secrets_path);
	}
	return NULL;
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

/* Everything the VM thread and the main thread share. */
struct session {
	struct vm vm;
	struct virtio_bus bus;
	struct vsockdev vd;
	struct serial com1;
	struct line_irq irq1;
	struct klog kl;
	atomic_int agent_fd;  /* the main command's connection, -1 if none */
	atomic_int vm_done;
	atomic_int pausing;   /* the VM is stopped to be saved, not ended */
	enum vm_end end;
};

/* SIGTERM/SIGINT/SIGHUP before the main command runs (exec_client_run forwards
 * them to the command while it does): give up waiting for the agent. */
static atomic_int *stop_flag;
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
	stop_signal = sig;
	if (stop_flag)
		atomic_store(stop_flag, 1);
}

static void *vm_thread(void *arg)
{
	struct session *s = arg;
	s->end = vm_run(&s->vm);
	if (atomic_load(&s->pausing) && s->end == VM_END_STOPPED)
		return NULL; /* paused by the main thread, which resumes it */
	atomic_store(&s->vm_done, 1);
	/* Wake the main thread if it is still talking to a guest that is
	 * gone. */
	int fd = atomic_load(&s->agent_fd);
	if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
	return NULL;
}

/* -d: the parent waits for the child to report that the sandbox is up
 * (one byte: 0 ok, else failure), prints its name and returns. */
static int detach(int *ready_fd, const char *name)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return cli_die("cannot create a pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		return cli_die("cannot fork: %s", strerror(errno));
	if (pid == 0) {
		close(p[0]);
		*ready_fd = p[1];
		setsid();
		return 0;
	}
	close(p[1]);
	unsigned char b = 1;
	ssize_t r;
	do
		r = read(p[0], &b, 1);
	while (r < 0 && errno == EINTR);
	close(p[0]);
	if (r == 1 && b == 0) {
		/* The child is up; the parent's job is done. */
		if (name)
			printf("%s\n", name);
		else
			printf("kbox-%d\n", (int)pid);
		return -1;
	}
	int st;
	waitpid(pid, &st, 0);
	return KBOX_EXIT_FAILURE;
}

static void report_ready(int *ready_fd, unsigned char v)
{
	if (*ready_fd < 0)
		return;
	ssize_t w = write(*ready_fd, &v, 1);
	(void)w;
	close(*ready_fd);
	*ready_fd = -1;
}

/* Everything one `kbox run` holds, each part released by run_cleanup
 * alone.  static (run_main's): the devices live on the bus, and the VM
 * thread may still be unwinding when run_main returns. */
struct run {
	struct run_opts o;
	struct kbox_config cfg;
	struct mounts mnt;
	struct disks dsk;
	struct netdev net;
	struct tlsconf tls;
	struct session s;
	struct sandbox sb;
	int pvm;
	char kpath[PATH_MAX], ipath[PATH_MAX], defname[32];
	int ready_fd;  /* -d: the pipe to the waiting parent, else -1 */
	bool began;    /* the session's parts are set up (run_begin) */
	bool claimed, vm_made, bus_made, vmt_started;
	bool runcfg_refused; /* said by send_runcfg: no second message */
	int klog_fd;
	char klog_used[PATH_MAX];
	uint8_t *kimg, *initrd;
	size_t klen, ilen;
	struct boot_image k;
	uint64_t initrd_addr;
	char cmdline[4096];
	/* The run configuration's settings (the kbox.* words the devices
	 * added to cmdline) and the entropy drawn for it before the
	 * lock-down (send_runcfg). */
	char words[RUNCFG_WORDS_MAX + 1];
	uint8_t entropy[256];
	char *env; /* the sandbox-wide environment, NUL-terminated entries */
	size_t env_len;
	pthread_t vmt;
	/* The template (docs/snapshots.md): none, one to make from this
	 * boot, or one to start from. */
	enum { TPL_OFF, TPL_MAKE, TPL_USE } tpl;
	char tpl_dir[PATH_MAX];
	char tpl_name[TEMPLATE_NAME_LEN + 1];
	uint8_t tpl_key[SNAPSHOT_FILE_KEY_LEN];
	int ready_efd;  /* TPL_MAKE: counts guest-init's "waiting" knock */
	bool retry_cold; /* the template failed to load: run again, cold */
	/* kbox run's own arguments, recorded for kbox fork. */
	int argc;
	char **argv;
	/* kbox fork (docs/snapshots.md, "Fork"): the layout key this
	 * sandbox's copies must have; the fork socket and the thread that
	 * serves it; vm_lock orders its pause against the end of the VM. */
	bool have_layout;
	uint8_t layout_key[SNAPSHOT_FILE_KEY_LEN];
	int fork_lfd, pagemap_fd;
	pthread_t fkt;
	bool fkt_started, vm_ended;
	pthread_mutex_t vm_lock;
};

/* Set by fork_main: this run is the copy NEW of the running sandbox
 * FROM, restored from its state instead of booted. */
static const char *fork_from, *fork_new;
static bool fork_verbose;

/* r is zero (a static one is at first: its pages untouched cost no
 * memory until written, so it is not cleared again). */
static void run_init(struct run *r)
{
	netdev_init(&r->net);
	tlsconf_init(&r->tls);
	config_init(&r->cfg);
	r->o.mounts = &r->mnt;
	r->o.disks = &r->dsk;
	r->o.net = &r->net;
	r->o.tls = &r->tls;
	r->ready_fd = -1;
	r->klog_fd = -1;
	r->ready_efd = -1;
	r->fork_lfd = -1;
	r->pagemap_fd = -1;
	pthread_mutex_init(&r->vm_lock, NULL);
}

/* The options, the config and what TLS interception loads, then what the
 * host decides (PVM or not).  0, -1 after --help, or the exit code with
 * the message written. */
static int run_configure(struct run *r, int argc, char **argv)
{
	struct run_opts *o = &r->o;
	int rc = parse_args(argc, argv, o, &r->cfg);
	if (!rc && fork_new) {
		/* The copy: its own name, in the background, from the
		 * original's state (never a template), and the forwarded
		 * ports on free host ports (the original holds its own). */
		o->name = fork_new;
		o->detach = 1;
		o->tty = 0;
		o->cold = 1;
		for (size_t i = 0; i < r->net.nfwd; i++)
			r->net.fwd[i].host_port = 0;
		/* --learn is the original's session: two processes would
		 * write one suggestion file over each other. */
		r->net.learn_path = NULL;
		for (unsigned i = 0; i < r->dsk.n; i++)
			if (!r->dsk.d[i].readonly)
				rc = cli_die("cannot fork %s: it has the disk %s read-write, which two "
					     "sandboxes cannot share (a read-only disk can be)",
					     fork_from, r->dsk.d[i].name);
	}
	if (!rc) {
		char terr[512];
		if (tlsconf_load(&r->tls, terr, sizeof terr) < 0)
			rc = cli_die("%s", terr);
	}
	if (rc)
		return rc;
	if (r->tls.secrets) {
		/* SIGHUP (kbox secrets reload) goes to the reload thread only:
		 * blocked here, before any thread exists, so every thread
		 * inherits the block and the reload thread waits for it. */
		sigset_t hup;
		sigemptyset(&hup);
		sigaddset(&hup, SIGHUP);
		pthread_sigmask(SIG_BLOCK, &hup, NULL);
	}
	if (tlsconf_active(&r->tls)) {
		/* Placeholders and the CA variables join the sandbox-wide
		 * environment, unless the config sets the same names. */
		const char *tenv[MAX_ENV];
		size_t tn = tlsconf_guest_env(&r->tls, tenv, MAX_ENV);
		for (size_t i = 0; i < tn && o->nsenv < MAX_ENV; i++) {
			size_t nl = strcspn(tenv[i], "=");
			bool dup = false;
			for (unsigned j = 0; j < o->nsenv && !dup; j++)
				dup = strncmp(o->senv[j], tenv[i], nl + 1) == 0;
			if (!dup)
				o->senv[o->nsenv++] = tenv[i];
		}
		o->ca_pem = tlsconf_ca_pem(&r->tls);
		r->net.icpt = tlsconf_icpt(&r->tls);
	}

	r->pvm = vm_is_pvm();
	if (!o->cpus)
		o->cpus = 1;
	if (!o->memory_mib)
		o->memory_mib = r->pvm ? 256 : 512;
	if (!o->kernel) {
		paths_default(r->pvm ? "kernel/vmlinux-pvm" : "kernel/vmlinux-std", r->kpath,
			      sizeof r->kpath);
		o->kernel = r->kpath;
	}
	if (!o->initrd) {
		paths_default("initramfs.cpio", r->ipath, sizeof r->ipath);
		o->initrd = r->ipath;
	}
	return 0;
}

/* The sandbox's name, and the session's parts in their idle state. */
static void run_begin(struct run *r)
{
	struct run_opts *o = &r->o;
	if (!o->name) {
		snprintf(r->defname, sizeof r->defname, "kbox-%d", (int)getpid());
		o->name = r->defname;
	}
	if (o->verbose)
		fprintf(stderr, "kbox: /dev/kvm is %s; kernel %s, %u vCPU(s), %llu MiB\n",
			r->pvm ? "PVM (no hardware virtualization: PVM-compat kernel and switches)"
			       : "hardware KVM",
			o->kernel, o->cpus, (unsigned long long)o->memory_mib);
	atomic_store(&r->s.agent_fd, -1);
	klog_init(&r->s.kl);
	serial_init(&r->s.com1, NULL, NULL, NULL);
	r->began = true;
}

/* The sandbox's runtime folder, the kernel log, and kbox's own files kept
 * from the shares. */
static int claim_sandbox(struct run *r)
{
	char err[512];
	if (sandbox_claim(&r->sb, r->o.name, err, sizeof err) < 0)
		return cli_die("%s", err);
	r->claimed = true;
	/* The runtime folder is the user's own (sandbox_runtime_dir checks):
	 * the kernel log's place when the state folder cannot be written.
	 * Opened before -d sends stderr to output.log, so a warning is seen. */
	char klog_fallback[sizeof r->sb.dir + 16];
	snprintf(klog_fallback, sizeof klog_fallback, "%s", r->sb.dir);
	char *rtslash = strrchr(klog_fallback, '/');
	if (rtslash)
		snprintf(rtslash, sizeof klog_fallback - (size_t)(rtslash - klog_fallback),
			 "/.kernel.log");
	r->klog_fd = klog_open(r->o.klog_path, rtslash ? klog_fallback : NULL, r->klog_used,
			       sizeof r->klog_used, err, sizeof err);
	if (err[0])
		fprintf(stderr, "kbox: %s\n", err);
	int rc = protect_host_files(&r->o, &r->cfg, &r->sb, r->klog_fd >= 0 ? r->klog_used : NULL);
	if (rc)
		return rc;
	if (!r->klog_used[0])
		snprintf(r->klog_used, sizeof r->klog_used, "none (see the warning above)");
	return 0;
}

/* What `kbox ps` and `kbox image rm` see of the sandbox. */
static int record_sandbox(struct run *r)
{
	struct run_opts *o = &r->o;
	/* `kbox image rm` must see that this sandbox runs on the image, from
	 * before the root folder is opened: it counts only sandboxes whose
	 * info names a live pid (rewritten with the ports once bound).  The
	 * store's lock (shared) closes the gap since --image was resolved: a
	 * removal either ended before (the rootfs is gone, recording fails)
	 * or waits and then sees the record. */
	int hold = o->image ? image_store_hold() : -ENOENT;
	int ir = sandbox_write_info(&r->sb, o->cpus, o->memory_mib, o->argv);
	char cwd[PATH_MAX];
	if (!ir && getcwd(cwd, sizeof cwd))
		ir = sandbox_write_args(&r->sb, cwd, r->argc, r->argv);
	for (unsigned i = 0; !ir && i < o->mounts->n; i++)
		if (o->mounts->m[i].root)
			ir = sandbox_write_image(&r->sb, o->mounts->m[i].host);
	if (hold >= 0)
		close(hold);
	if (ir == -ENOENT)
		return cli_die("--image %s: its root folder is gone (removed meanwhile?)", o->image);
	if (ir < 0)
		return cli_die("cannot record the sandbox in %s: %s", r->sb.dir, strerror(-ir));
	return 0;
}

/* The disk volumes, made when new and locked for the VM's life. */
static int open_disks(struct run *r)
{
	char err[1024];
	if (disks_open(&r->dsk, err, sizeof err) < 0)
		return cli_die("%s", err);
	for (unsigned i = 0; r->o.verbose && i < r->dsk.n; i++)
		fprintf(stderr, "kbox: disk %s (%s%s, %llu MiB) at %s%s\n", r->dsk.d[i].name,
			r->dsk.d[i].path, r->dsk.d[i].created ? ", new" : r->dsk.d[i].grown ? ", grown" : "",
			(unsigned long long)(r->dsk.d[i].size >> 20), r->dsk.d[i].guest,
			r->dsk.d[i].readonly ? ", read-only" : "");
	return 0;
}

/* -d: stdin from /dev/null, stdout and stderr to the sandbox's
 * output.log (`kbox logs`). */
static int redirect_output(struct run *r)
{
	if (!r->o.detach)
		return 0;
	char out_path[sizeof r->sb.dir + 16];
	snprintf(out_path, sizeof out_path, "%s/output.log", r->sb.dir);
	int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd < 0 || nul < 0)
		return cli_die("cannot create %s: %s", out_path, strerror(errno));
	dup2(nul, 0);
	dup2(fd, 1);
	dup2(fd, 2);
	close(fd);
	close(nul);
	return 0;
}

/* The kernel and the initramfs; what guest-init gets besides (the
 * environment, the CA, the host name) checked for the run configuration. */
static int load_boot_files(struct run *r)
{
	struct run_opts *o = &r->o;
	size_t total = 0;
	for (unsigned i = 0; i < o->nsenv; i++)
		total += strlen(o->senv[i]) + 1;
	if (total > RUNCFG_ENV_MAX)
		return cli_die("the sandbox's environment is too large for the guest (%zu bytes, at most %u)",
			       total, RUNCFG_ENV_MAX);
	if (!(r->env = malloc(total ? total : 1)))
		return cli_die("out of memory");
	for (unsigned i = 0; i < o->nsenv; i++) {
		size_t l = strlen(o->senv[i]) + 1;
		memcpy(r->env + r->env_len, o->senv[i], l);
		r->env_len += l;
	}
	if (!runcfg_text_ok(RUNCFG_ENV, r->env, r->env_len))
		return cli_die("cannot hand the guest its environment: an entry is not NAME=VALUE");
	if (o->ca_pem && !runcfg_text_ok(RUNCFG_CA, o->ca_pem, strlen(o->ca_pem)))
		return cli_die("cannot hand the guest kbox's CA: it is not PEM text of at most %u bytes",
			       RUNCFG_CA_MAX);
	if (!runcfg_text_ok(RUNCFG_HOSTNAME, r->sb.name, strlen(r->sb.name)))
		return cli_die("the sandbox name '%s' cannot be the guest's host name", r->sb.name);
	return 0;
}

/* The kernel, the initramfs and the MP table in the VM's RAM (a cold
 * boot). */
static int place_kernel(struct run *r)
{
	struct run_opts *o = &r->o;
	struct vm *vm = &r->s.vm;
	char err[512];
	if (read_image(o->kernel, &r->kimg, &r->klen, err, sizeof err) < 0)
		return cli_die("%s (build it with 'make kernel', or pass --kernel PATH)", err);
	if (read_image(o->initrd, &r->initrd, &r->ilen, err, sizeof err) < 0)
		return cli_die("%s (build it with 'make', or pass --initrd PATH)", err);
	if (boot_load_kernel(&vm->mem, r->kimg, r->klen, &r->k, err, sizeof err) < 0)
		return cli_die("%s: %s", o->kernel, err);
	if (boot_place_initrd(&vm->mem, &r->k, r->initrd, r->ilen, &r->initrd_addr, err,
			      sizeof err) < 0)
		return cli_die("%s", err);
	if (mptable_write(&vm->mem, o->cpus) < 0)
		return cli_die("cannot write the MP table");
	return 0;
}

/* The VM, and the start of the kernel command line. */
static int create_vm(struct run *r)
{
	struct run_opts *o = &r->o;
	struct vm *vm = &r->s.vm;
	char err[512];
	r->vm_made = true; /* vm_destroy undoes a vm_create that failed half-way */
	if (vm_create(vm, o->cpus, o->memory_mib, err, sizeof err) < 0)
		return cli_die("%s", err);
	/* Without kvmclock (the PVM variant) the kernel would calibrate the
	 * TSC against the PIT, which fails under emulation. */
	char tsc[40] = "";
	unsigned khz = r->pvm ? vm_tsc_khz(vm) : 0;
	if (khz)
		snprintf(tsc, sizeof tsc, " tsc_early_khz=%u", khz);
	snprintf(r->cmdline, sizeof r->cmdline,
		 "console=ttyS0 reboot=k panic=-1 8250.nr_uarts=1 mitigations=off%s%s%s",
		 o->verbose ? "" : " quiet", r->pvm ? pvm_cmdline() : "", tsc);
	return 0;
}

/* The device thread and the devices on it (vsock, the shared folders,
 * the NIC), each adding itself to the kernel command line. */
static int attach_devices(struct run *r)
{
	struct session *s = &r->s;
	char err[512];
	if (virtio_bus_init(&s->bus, &s->vm) < 0)
		return cli_die("cannot set up the device thread: %s", strerror(errno));
	r->bus_made = true;
	if (vsockdev_attach(&s->vd, &s->bus, GUEST_CID, r->sb.sock, r->cmdline, sizeof r->cmdline,
			    err, sizeof err) < 0 ||
	    mounts_attach(&r->mnt, &s->bus, r->cmdline, sizeof r->cmdline, err, sizeof err) < 0 ||
	    netdev_attach(&r->net, &s->bus, r->cmdline, sizeof r->cmdline, err, sizeof err) < 0 ||
	    disks_attach(&r->dsk, &s->bus, r->cmdline, sizeof r->cmdline, err, sizeof err) < 0)
		return cli_die("%s", err);
	/* What is this run's and not the boot layout's goes to guest-init
	 * in its run configuration, not on the command line. */
	if (boot_cmdline_take(r->cmdline, "kbox.", r->words, sizeof r->words) < 0)
		return cli_die("the shares and disks are too many for the run configuration");
	size_t got = 0;
	while (got < sizeof r->entropy) {
		ssize_t n = getrandom(r->entropy + got, sizeof r->entropy - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return cli_die("cannot draw random bytes for the guest: %s", strerror(errno));
		got += (size_t)n;
	}
	return 0;
}

/* The finished kernel command line: --append after the devices'. */
static int finish_cmdline(struct run *r)
{
	struct run_opts *o = &r->o;
	if (o->append) {
		size_t used = strlen(r->cmdline);
		if (snprintf(r->cmdline + used, sizeof r->cmdline - used, " %s", o->append) >=
		    (int)(sizeof r->cmdline - used))
			return cli_die("--append is too long");
	}
	return 0;
}

/* boot_params in guest RAM; the images' copies in kbox's memory are no
 * longer needed. */
static int write_boot_params(struct run *r)
{
	struct run_opts *o = &r->o;
	char err[512];
	struct boot_setup bs = {
		.low_ram = r->s.vm.low_ram, .high_ram = r->s.vm.high_ram, .cmdline = r->cmdline,
		.initrd_addr = r->initrd_addr, .initrd_len = r->ilen,
	};
	if (boot_write_params(&r->s.vm.mem, &r->k, &bs, err, sizeof err) < 0)
		return cli_die("%s", err);
	free(r->kimg);
	free(r->initrd);
	r->kimg = r->initrd = NULL;
	if (o->verbose)
		fprintf(stderr, "kbox: sandbox %s, kernel entry 0x%llx, command line: %s\n",
			r->sb.name, (unsigned long long)r->k.entry, r->cmdline);
	return 0;
}

/* COM1 writing to the kernel log. */
static void setup_console(struct run *r)
{
	struct session *s = &r->s;
	s->kl.fd = r->klog_fd;
	s->kl.echo = r->o.verbose;
	s->irq1 = (struct line_irq){ { line_irq_set }, &s->vm, COM1_IRQ };
	serial_destroy(&s->com1);
	serial_init(&s->com1, &s->irq1.sink, klog_write, &s->kl);
	vm_add_pio(&s->vm, &(struct vm_pio){ COM1_BASE, 8, uart_in, uart_out, &s->com1 });
}

/* A cold boot: kernel, initramfs and boot_params in RAM, the vCPUs at
 * the kernel's entry. */
static int boot_cold(struct run *r)
{
	char err[512];
	if (place_kernel(r) || write_boot_params(r))
		return KBOX_EXIT_FAILURE;
	if (vm_setup_cpus(&r->s.vm, r->k.entry, err, sizeof err) < 0)
		return cli_die("%s", err);
	return 0;
}

static int uart_save(void *ctx, struct statebuf_writer *w, char *err, size_t errlen)
{
	return serial_state_save(ctx, w, err, errlen);
}

static int uart_load(void *ctx, const uint8_t *blob, size_t len, char *err, size_t errlen)
{
	return serial_state_load(ctx, blob, len, err, errlen);
}

/* What a template (or, with fork, a fork's copy: virtio_bus_fork_devs)
 * holds besides the VM: the bus's devices and COM1. */
static unsigned snapshot_devs(struct run *r, struct snapshot_dev *d, unsigned max, bool fork)
{
	unsigned n = fork ? virtio_bus_fork_devs(&r->s.bus, d, max - 1)
			  : virtio_bus_snapshot_devs(&r->s.bus, d, max - 1);
	d[n] = (struct snapshot_dev){ "uart", VIRTIO_BUS_MAX_DEVS, &r->s.com1, uart_save, uart_load };
	return n + 1;
}

/* dir/name of the run's template. */
static void template_path(const struct run *r, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", r->tpl_dir, r->tpl_name);
}

/* The key of the run's boot layout (a template's, and what a fork's
 * copy must match: vmm/sandbox/template.h), when it can be had. */
static void compute_layout(struct run *r)
{
	struct run_opts *o = &r->o;
	char devs[8192], err[512];
	if (virtio_bus_describe(&r->s.bus, devs, sizeof devs) < 0)
		return;
	struct template_inputs in = {
		.kernel = o->kernel, .initrd = o->initrd, .cpus = o->cpus, .memory_mib = o->memory_mib,
		.tsc_khz = vm_tsc_khz(&r->s.vm), .pvm = r->pvm != 0, .cmdline = r->cmdline,
		.devices = devs,
	};
	if (template_key(&in, r->layout_key, r->tpl_name, err, sizeof err) < 0) {
		if (o->verbose)
			fprintf(stderr, "kbox: no layout key (no template, no fork): %s\n", err);
		return;
	}
	memcpy(r->tpl_key, r->layout_key, sizeof r->tpl_key);
	r->have_layout = true;
}

/* Whether this run starts from a template, makes one, or neither: the
 * key of its boot layout, and the file if there is one.  Off with
 * --cold or KBOX_TEMPLATES=off.  On PVM too: a restored guest's TSC has
 * moved on by the template's age there, which the PVM kernel's
 * timekeeping takes in its stride (docs/snapshots.md). */
static void choose_template(struct run *r)
{
	struct run_opts *o = &r->o;
	const char *env = getenv("KBOX_TEMPLATES");
	bool off = env && strcmp(env, "off") == 0;
	r->tpl = TPL_OFF;
	if (o->cold || off)
		return;
	char err[512] = "the layout has no key";
	if (!r->have_layout ||
	    template_dir(r->tpl_dir, sizeof r->tpl_dir, true, err, sizeof err) < 0) {
		if (o->verbose)
			fprintf(stderr, "kbox: booting cold, no template: %s\n", err);
		return;
	}
	char path[PATH_MAX + sizeof r->tpl_name + 1];
	template_path(r, path, sizeof path);
	r->tpl = access(path, F_OK) == 0 ? TPL_USE : TPL_MAKE;
	if (r->tpl == TPL_MAKE) {
		r->ready_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (r->ready_efd < 0) {
			r->tpl = TPL_OFF;
			return;
		}
		vsock_unix_notice(&r->s.vd.vu, RUNCFG_READY_PORT, r->ready_efd);
	}
	if (o->verbose)
		fprintf(stderr, "kbox: template %s/%s: %s\n", r->tpl_dir, r->tpl_name,
			r->tpl == TPL_USE ? "starting from it" : "none yet, booting cold to make it");
}

/* After a restore: guest RAM is now a private mapping of a file, which
 * never takes transparent huge pages, so they would serve only kbox's own
 * buffers, thread stacks and malloc's mappings, and there they cost: with
 * THP "always" (Debian's default) one byte written in an aligned 2 MiB
 * range of such a mapping takes 2 MiB.  Off for this process, a restored
 * sandbox's private memory is what it writes (docs/snapshots.md, memory). */
static void no_huge_pages(void)
{
	prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
}

/* Start from the template: RAM mapped from it copy-on-write, the vCPUs,
 * the interrupt controllers, clock and devices as saved.  A template
 * that does not load is removed, with one warning, and the run starts
 * again cold (retry_cold). */
static int restore_template(struct run *r)
{
	struct snapshot_dev devs[VIRTIO_BUS_MAX_DEVS + 1];
	unsigned n = snapshot_devs(r, devs, VIRTIO_BUS_MAX_DEVS + 1, false);
	struct snapshot_stats st;
	char err[512];
	if (snapshot_restore(&r->s.vm, r->tpl_key, devs, n, r->tpl_dir, r->tpl_name, &st, err,
			     sizeof err) < 0) {
		fprintf(stderr, "kbox: warning: the template %s does not load (%s); removed, "
				"booting cold\n", r->tpl_name, err);
		char path[PATH_MAX + sizeof r->tpl_name + 1];
		template_path(r, path, sizeof path);
		unlink(path);
		r->retry_cold = true;
		return KBOX_EXIT_FAILURE;
	}
	no_huge_pages();
	template_touch(r->tpl_dir, r->tpl_name); /* last used: kbox snapshot ls, prune */
	if (r->o.verbose)
		fprintf(stderr, "kbox: restored %s in %.1f ms (state %.1f ms)\n", r->tpl_name, st.ms,
			st.state_ms);
	return 0;
}

/* ---- kbox fork ------------------------------------------------------ */

/* Refuse a fork request with a reason. */
static void fork_refuse(int cfd, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fork_refuse(int cfd, int status, const char *fmt, ...)
{
	struct forkctl_answer a = { .status = status };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(a.msg, sizeof a.msg, fmt, ap);
	va_end(ap);
	forkctl_reply(cfd, &a);
}

static bool pause_vm(struct run *r);
static int resume_vm(struct run *r);
static void sleep_ms(long ms);

static double ms_between(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

/* Answer a fork's request: saved into file_fd, the guest paused pause
 * ms of which state_ms for the state. */
static void fork_reply_saved(int cfd, int file_fd, double pause, double state_ms)
{
	struct stat st;
	struct forkctl_answer a = { .pause_ms = pause, .state_ms = state_ms };
	a.file_bytes = fstat(file_fd, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
	forkctl_reply(cfd, &a);
}

/* The RAM half of a fork's save, in a child process (fork(2): its copy
 * of guest RAM is the paused guest's, copy-on-write, while the parent
 * resumes the VM): the metadata and RAM into file_fd, then the answer
 * on cfd once the parent has said how long the guest was paused
 * (pause_rd).  Never returns. */
static void fork_writer(struct run *r, int cfd, int file_fd, int pause_rd,
			const struct statebuf_writer *meta, const uint8_t *known_zero, double state_ms)
{
	char err[FORKCTL_MSG_MAX] = "";
	int rc = snapshot_file_write_fd(file_fd, meta, r->s.vm.ram, r->s.vm.ram_size, known_zero,
					err, sizeof err);
	double pause = -1;
	ssize_t n;
	do
		n = read(pause_rd, &pause, sizeof pause);
	while (n < 0 && errno == EINTR);
	if (rc < 0)
		fork_refuse(cfd, rc, "%s", err);
	else
		fork_reply_saved(cfd, file_fd, n == (ssize_t)sizeof pause ? pause : -1, state_ms);
	_exit(0);
}

/* Save the running sandbox into file_fd for a copy: paused, every
 * device's fork state (a device busy for a moment gets a few more
 * tries); then a child process writes RAM from its copy-on-write view
 * while the VM goes on, and answers (fork_writer).  Where no child can
 * be made, RAM is written with the VM paused.  The caller holds
 * vm_lock. */
static void fork_save(struct run *r, int cfd, int file_fd)
{
	struct snapshot_stats st;
	char err[FORKCTL_MSG_MAX] = "";
	int rc = -EAGAIN;
	struct statebuf_writer meta;
	statebuf_init(&meta);
	struct timespec t0, t1, t2;
	int pp[2] = { -1, -1 };
	pid_t pid = -1;
	for (unsigned attempt = 0; attempt < 10 && (rc == -EAGAIN || rc == -EBUSY); attempt++) {
		if (attempt) {
			if (resume_vm(r))
				goto dead;
			sleep_ms(20);
		}
		statebuf_free(&meta);
		statebuf_init(&meta);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (!pause_vm(r)) {
			statebuf_free(&meta);
			fork_refuse(cfd, -ESHUTDOWN, "the sandbox ended");
			return;
		}
		struct snapshot_dev devs[VIRTIO_BUS_MAX_DEVS + 1];
		unsigned n = snapshot_devs(r, devs, VIRTIO_BUS_MAX_DEVS + 1, true);
		rc = snapshot_save_state(&r->s.vm, r->layout_key, devs, n, &meta, &st, err, sizeof err);
	}
	/* The pages that need not be read (never touched, or a hole of the
	 * file RAM came from): without them the writer would read all of
	 * RAM, and from a template's holes fill the page cache with zeros. */
	uint8_t *known_zero = NULL;
	if (rc == 0 && r->pagemap_fd >= 0)
		snapshot_ram_known_zero(&r->s.vm, r->pagemap_fd, &known_zero);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc == 0 && pipe2(pp, O_CLOEXEC) == 0) {
		signal(SIGCHLD, SIG_IGN); /* the writer is reaped by the kernel */
		pid = fork();
		if (pid == 0) {
			close(pp[1]);
			fork_writer(r, cfd, file_fd, pp[0], &meta, known_zero, ms_between(&t0, &t1));
		}
	}
	if (rc == 0 && pid < 0) {
		/* No child: the RAM now, the guest still paused. */
		rc = snapshot_file_write_fd(file_fd, &meta, r->s.vm.ram, r->s.vm.ram_size, known_zero,
					    err, sizeof err);
	}
	free(known_zero);
	statebuf_free(&meta);
	if (resume_vm(r))
		goto dead;
	clock_gettime(CLOCK_MONOTONIC, &t2);
	double pause = ms_between(&t0, &t2);
	if (pid > 0) {
		/* The writer answers once RAM is written; it gets the pause. */
		ssize_t w = write(pp[1], &pause, sizeof pause);
		(void)w;
		close(pp[0]);
		close(pp[1]);
		close(cfd);
	} else {
		if (pp[0] >= 0) {
			close(pp[0]);
			close(pp[1]);
		}
		if (rc < 0) {
			fork_refuse(cfd, rc, "%s", err);
			return;
		}
		fork_reply_saved(cfd, file_fd, pause, ms_between(&t0, &t1));
	}
	if (r->o.verbose)
		fprintf(stderr, "kbox: forked: paused %.1f ms (state %.1f ms)%s\n", pause,
			ms_between(&t0, &t1), pid > 0 ? ", RAM written by a child" : "");
	return;
dead:
	/* The VM could not go on: this sandbox ends (vm_done).  A writer
	 * already made still answers for the copy (its state was taken). */
	statebuf_free(&meta);
	atomic_store(&r->s.vm_done, 1);
	int afd = atomic_load(&r->s.agent_fd);
	if (afd >= 0)
		shutdown(afd, SHUT_RDWR);
	if (pp[0] >= 0) {
		close(pp[0]);
		close(pp[1]); /* the writer reads no pause: it says -1 */
	}
	if (pid > 0)
		close(cfd);
	else
		fork_refuse(cfd, -EIO, "the sandbox could not be resumed");
}

/* The fork socket's thread: one request at a time, until the socket is
 * shut down (run_cleanup). */
static void *fork_thread(void *arg)
{
	struct run *r = arg;
	for (;;) {
		uint8_t key[FORKCTL_KEY_LEN];
		int file_fd = -1;
		int cfd = forkctl_accept(r->fork_lfd, key, &file_fd);
		if (cfd < 0)
			return NULL;
		pthread_mutex_lock(&r->vm_lock);
		if (r->vm_ended || !r->vmt_started || atomic_load(&r->s.vm_done))
			fork_refuse(cfd, -ESHUTDOWN, "the sandbox is not running");
		else if (!r->have_layout)
			fork_refuse(cfd, -ENOTSUP, "the sandbox's layout has no key");
		else if (memcmp(key, r->layout_key, sizeof key) != 0)
			fork_refuse(cfd, -ESTALE,
				    "the copy's layout differs from the sandbox's (another kbox "
				    "build, kernel or initramfs since it started, or its config "
				    "changed: cpus, memory, shares, disks, network)");
		else
			fork_save(r, cfd, file_fd);
		pthread_mutex_unlock(&r->vm_lock);
		close(file_fd);
	}
}

/* The fork socket, made before the lock-down (bind is not allowed
 * after it); its thread starts once the VM runs (fork_serve). */
static int fork_listen(struct run *r)
{
	char err[512];
	/* For the writer's map of pages that need not be read; Landlock
	 * keeps /proc closed after the lock-down. */
	r->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	r->fork_lfd = forkctl_listen(r->sb.dir, err, sizeof err);
	if (r->fork_lfd < 0 && r->o.verbose)
		fprintf(stderr, "kbox: %s (kbox fork cannot copy this sandbox)\n", err);
	return 0;
}

static void fork_serve(struct run *r)
{
	if (r->fork_lfd >= 0 && pthread_create(&r->fkt, NULL, fork_thread, r) == 0)
		r->fkt_started = true;
}

/* The copy's side: ask the sandbox fork_from to save itself into an
 * unnamed private file, then restore from that file (RAM copy-on-write,
 * every device through its fork state).  The file is hostile input
 * like a template: the original runs a guest. */
static int fork_restore(struct run *r)
{
	char err[512];
	if (!r->have_layout)
		return cli_die("cannot fork %s: this kbox cannot key the sandbox's layout", fork_from);
	struct sandbox from;
	struct sandbox_info info;
	if (sandbox_lookup(fork_from, &from, &info) < 0 || !info.alive)
		return cli_die("cannot fork %s: it is not running", fork_from);
	int fd = template_fork_file(err, sizeof err);
	if (fd < 0)
		return cli_die("cannot fork %s: %s", fork_from, err);
	struct forkctl_answer a;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = forkctl_request(from.dir, r->layout_key, fd, 300 * 1000, &a, err, sizeof err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc < 0) {
		close(fd);
		return cli_die("cannot fork %s: %s", fork_from, err);
	}
	if (a.status < 0) {
		close(fd);
		return cli_die("cannot fork %s: %s", fork_from, a.msg[0] ? a.msg : strerror(-a.status));
	}
	struct snapshot_dev devs[VIRTIO_BUS_MAX_DEVS + 1];
	unsigned n = snapshot_devs(r, devs, VIRTIO_BUS_MAX_DEVS + 1, true);
	struct snapshot_stats st;
	rc = snapshot_restore_fd(&r->s.vm, r->layout_key, devs, n, fd, &st, err, sizeof err);
	close(fd); /* the RAM mapping holds the file */
	if (rc < 0)
		return cli_die("cannot start %s from %s's state: %s", r->sb.name, fork_from, err);
	no_huge_pages();
	double ask = ms_between(&t0, &t1);
	if (fork_verbose || r->o.verbose)
		fprintf(stderr, "kbox: fork of %s: %s paused %.1f ms (state %.1f ms), %llu MiB "
				"written, request %.1f ms; restored in %.1f ms\n",
			fork_from, fork_from, a.pause_ms, a.state_ms,
			(unsigned long long)(a.file_bytes >> 20), ask, st.ms);
	return 0;
}

/* The copy has no main command of its own: the original's processes
 * go on in it (those attached to an exec session got a hangup).  It
 * runs until kbox stop or the guest's end. */
static int fork_wait(struct run *r)
{
	report_ready(&r->ready_fd, 0);
	while (!atomic_load(&r->s.vm_done) && !stop_signal)
		sleep_ms(100);
	return 0;
}

/* The forwarded ports on stderr and in the sandbox's info, and the stop
 * signals caught. */
static void publish_and_catch_signals(struct run *r)
{
	char ports[256];
	netdev_ports(&r->net, ports, sizeof ports);
	if (ports[0])
		fprintf(stderr, "kbox: forwarded ports (host->guest): %s\n", ports);
	sandbox_write_info_ports(&r->sb, r->o.cpus, r->o.memory_mib, r->o.argv, ports);
	signal(SIGPIPE, SIG_IGN);
	stop_flag = &r->s.vm_done;
	struct sigaction sa = { .sa_handler = on_stop_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

/* Everything the guest needs exists and no VM thread runs yet: the
 * secrets' reload thread, then the lock-down (docs/security.md). */
static int lock_down(struct run *r)
{
	char err[512];
	const char *reread[2];
	struct lockdown_cfg lc = {
		.mounts = &r->mnt, .sandbox_dir = r->sb.dir,
		.klog_path = r->klog_fd >= 0 ? r->klog_used : NULL,
		.network = netdev_enabled(&r->net), .verbose = r->o.verbose, .off = r->o.no_lockdown,
		.read_files = reread, .n_read_files = tlsconf_read_files(&r->tls, reread, 2),
	};
	if (r->tls.secrets) {
		/* SIGHUP was blocked at start-up, before any thread. */
		r->tls.stack_running = netdev_enabled(&r->net);
		pthread_t rt;
		if (pthread_create(&rt, NULL, reload_main, &r->tls) != 0)
			return cli_die("cannot start the secrets reload thread");
		pthread_detach(rt);
	}
	if (lockdown_apply(&lc, err, sizeof err) < 0)
		return cli_die("%s", err);
	return 0;
}

static int start_vm(struct run *r)
{
	if (virtio_bus_start(&r->s.bus) < 0 || pthread_create(&r->vmt, NULL, vm_thread, &r->s) != 0)
		return cli_die("cannot start the VM threads");
	r->vmt_started = true;
	return 0;
}

/* The vCPU threads and the device thread stopped and waited for. */
static void stop_threads(struct run *r)
{
	vm_stop(&r->s.vm, VM_END_STOPPED);
	pthread_join(r->vmt, NULL);
	r->vmt_started = false;
	virtio_bus_stop(&r->s.bus);
}

/* Stop the vCPUs and the device thread to save the VM; false when the
 * guest ended by itself meanwhile (then it is over: vm_done is set). */
static bool pause_vm(struct run *r)
{
	struct session *s = &r->s;
	atomic_store(&s->pausing, 1);
	stop_threads(r);
	atomic_store(&s->pausing, 0);
	if (s->end != VM_END_STOPPED) {
		atomic_store(&s->vm_done, 1);
		return false;
	}
	return true;
}

static int resume_vm(struct run *r)
{
	vm_rearm(&r->s.vm);
	return start_vm(r);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* KBOX_TIMING=1: each step of the start on stderr, in ms since kbox
 * began (docs/benchmarks.md); not an option, so that it changes nothing
 * of the guest (--verbose is on its command line). */
static struct timespec run_t0;
static void timing(const char *step)
{
	static int on = -1;
	if (on < 0) {
		const char *v = getenv("KBOX_TIMING");
		on = v && strcmp(v, "1") == 0;
	}
	if (!on)
		return;
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	double ms = (double)(t.tv_sec - run_t0.tv_sec) * 1e3 + (double)(t.tv_nsec - run_t0.tv_nsec) / 1e6;
	fprintf(stderr, "kbox: timing: %8.1f ms %s\n", ms, step);
}

/* This run boots cold to make the template: once guest-init knocks
 * (it waits for its configuration, nothing of the run is in the guest
 * yet), pause, save, then lock kbox down and let the guest go on.  The
 * lock-down comes after the save (the save writes the cache and reads
 * the vCPUs' state; up to here the guest ran only its kernel and
 * guest-init).  A template that cannot be made costs one warning, not
 * the run.  0, or the exit code when the lock-down or the restart
 * failed. */
static int make_template(struct run *r)
{
	struct session *s = &r->s;
	struct pollfd p = { .fd = r->ready_efd, .events = POLLIN };
	while (!atomic_load(&s->vm_done) && !stop_signal && poll(&p, 1, 100) <= 0)
		;
	bool ready = p.revents & POLLIN;
	vsock_unix_notice(&s->vd.vu, 0, -1);
	if (!ready)
		return 0; /* the guest is gone or kbox is told to stop: run_command says so */
	char err[512] = "";
	int rc = -EAGAIN;
	struct snapshot_stats st;
	/* guest-init's knock was refused with a reset: give it the moment
	 * to take it and block in accept, then try; a device still busy
	 * (the reset not yet delivered) gets a few more moments. */
	for (unsigned attempt = 0; attempt < 10 && (rc == -EAGAIN || rc == -EBUSY); attempt++) {
		sleep_ms(attempt ? 50 : 20);
		if (!pause_vm(r))
			return 0;
		struct snapshot_dev devs[VIRTIO_BUS_MAX_DEVS + 1];
		unsigned n = snapshot_devs(r, devs, VIRTIO_BUS_MAX_DEVS + 1, false);
		rc = snapshot_save(&s->vm, r->tpl_key, devs, n, r->tpl_dir, r->tpl_name, &st, err,
				   sizeof err);
		if ((rc == -EAGAIN || rc == -EBUSY) && attempt < 9 && resume_vm(r))
			return KBOX_EXIT_FAILURE;
	}
	if (rc < 0)
		fprintf(stderr, "kbox: warning: no template made: %s\n", err);
	else if (r->o.verbose)
		fprintf(stderr, "kbox: template saved: %s, %.1f ms (state %.1f ms), %llu MiB file, "
				"%llu KiB on disk\n", r->tpl_name, st.ms, st.state_ms,
			(unsigned long long)(st.file_bytes >> 20), (unsigned long long)(st.disk_bytes >> 10));
	/* A cache, not a store: a new template is the moment to let go of
	 * those no run started from for a month (another kbox build's, an
	 * older kernel's, a layout no longer used).  Before the lock-down,
	 * which forbids unlinking. */
	if (rc >= 0) {
		uint64_t freed = 0;
		long gone = template_expire(r->tpl_dir, r->tpl_name, TEMPLATE_EXPIRE_DAYS, &freed);
		if (gone > 0 && r->o.verbose)
			fprintf(stderr, "kbox: %ld template%s unused for %d days removed, %llu KiB freed\n",
				gone, gone == 1 ? "" : "s", TEMPLATE_EXPIRE_DAYS,
				(unsigned long long)(freed >> 10));
	}
	if (lock_down(r) || resume_vm(r))
		return KBOX_EXIT_FAILURE;
	return 0;
}

/* Give guest-init its run configuration (proto/runcfg.h) once it
 * listens: the settings words, the wall clock, the entropy; its answer
 * comes when it is ready for commands (the exec agent listens).  The
 * connection, which after the answer is the main command's exec session
 * (docs/run-config.md), or a negative errno (-EPROTO when guest-init
 * refused it, said on stderr; -ESHUTDOWN when the guest ended first). */
static int send_runcfg(struct run *r)
{
	static uint8_t msg[RUNCFG_MAX];
	int fd = agent_conn_open(r->sb.sock, RUNCFG_VSOCK_PORT, -1, &r->s.vm_done);
	if (fd < 0)
		return fd;
	timing("run configuration: connected");
	/* The clock once guest-init listens (the boot took a while). */
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct runcfg c = {
		.words = r->words, .words_len = strlen(r->words),
		.clock_sec = (uint64_t)now.tv_sec, .clock_nsec = (uint32_t)now.tv_nsec,
		.entropy = r->entropy, .entropy_len = sizeof r->entropy,
		.env = r->env, .env_len = r->env_len,
		.ca = r->o.ca_pem, .ca_len = r->o.ca_pem ? strlen(r->o.ca_pem) : 0,
		.hostname = r->sb.name, .hostname_len = strlen(r->sb.name),
	};
	size_t n;
	int rc = runcfg_encode(&c, msg, sizeof msg, &n);
	explicit_bzero(r->entropy, sizeof r->entropy);
	/* What was encoded, not all 512 KiB: a page never written costs
	 * nothing, one cleared does (a failed encode may have written any). */
	size_t used = rc == 0 ? n : sizeof msg;
	if (rc == 0)
		rc = fileio_write_all(fd, msg, n);
	explicit_bzero(msg, used);
	timing("run configuration: sent");
	char answer[64];
	ssize_t got = 0;
	/* The answer comes once guest-init is ready for commands (its
	 * mounts, network and exec agent: seconds on a slow host), or never
	 * when the guest ends first.  One byte: what follows a 0 is the
	 * session's. */
	while (rc == 0) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int pr = poll(&p, 1, 100);
		if (pr < 0 && errno != EINTR) {
			rc = -errno;
		} else if (pr > 0) {
			got = read(fd, answer, 1);
			if (got < 0 && errno == EINTR)
				continue;
			rc = got < 0 ? -errno : got == 0 ? -ECONNRESET : 0;
			break;
		} else if (atomic_load(&r->s.vm_done)) {
			rc = -ESHUTDOWN;
		}
	}
	if (rc == 0 && answer[0] != 0) {
		/* The reason follows at once, and guest-init closes. */
		while (got < (ssize_t)sizeof answer - 1) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			int pr = poll(&p, 1, 1000);
			if (pr < 0 && errno == EINTR)
				continue;
			if (pr <= 0)
				break;
			ssize_t more = read(fd, answer + got, sizeof answer - 1 - (size_t)got);
			if (more < 0 && errno == EINTR)
				continue;
			if (more <= 0)
				break;
			got += more;
		}
		answer[got] = '\0';
		close(fd);
		fprintf(stderr, "kbox: guest-init refused its run configuration: %s\n", answer + 1);
		r->runcfg_refused = true;
		return -EPROTO;
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* The main command, through the exec agent like 'kbox exec', on the
 * run configuration's connection (send_runcfg).  Its exit code
 * (exec_client_run's), or a negative errno: send_runcfg's or the
 * session's (exec_client_run). */
static int run_command(struct run *r)
{
	struct run_opts *o = &r->o;
	struct session *s = &r->s;
	int fd = send_runcfg(r);
	if (fd < 0)
		return fd;
	timing("guest ready (run configuration taken)");
	atomic_store(&s->agent_fd, fd);
	if (atomic_load(&s->vm_done))
		shutdown(fd, SHUT_RDWR);
	report_ready(&r->ready_fd, 0);
	const char *envp[MAX_ENV];
	unsigned ne = 0;
	const char *term = o->tty ? getenv("TERM") : NULL;
	static char termvar[128];
	snprintf(termvar, sizeof termvar, "TERM=%s", term && *term ? term : "dumb");
	/* The user's entries first: the first of a name wins. */
	for (unsigned i = 0; i < o->nenv; i++)
		envp[ne++] = o->env[i];
	envp[ne++] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	envp[ne++] = "HOME=/root";
	envp[ne++] = termvar;
	envp[ne] = NULL;
	unsigned argc = 0;
	while (o->argv[argc])
		argc++;
	struct exec_proto_exec req = {
		.flags = o->tty ? EXEC_PROTO_FLAG_TTY : 0,
		.argc = argc,
		.argv = o->argv,
		.envc = ne,
		.envp = (char **)envp,
		.cwd = o->workdir ? o->workdir : "",
	};
	int code = exec_client_run(fd, &req);
	timing("command ended");
	atomic_store(&s->agent_fd, -1);
	close(fd);
	return code;
}

/* The VM and its device thread stopped, the kernel log flushed; after
 * any fork's save (vm_lock), and none after it. */
static void stop_vm(struct run *r)
{
	pthread_mutex_lock(&r->vm_lock);
	r->vm_ended = true;
	if (r->vmt_started)
		stop_threads(r);
	pthread_mutex_unlock(&r->vm_lock);
	klog_flush(&r->s.kl);
	if (r->o.verbose)
		netdev_report(&r->net, stderr);
}

/* kbox run's exit code from what run_command returned and how the guest
 * ended, with the message written when kbox or the guest failed. */
static int run_outcome(const struct run *r, int code)
{
	const struct session *s = &r->s;
	const char *klog = r->klog_used;
	if (code >= 0)
		return code;
	if (stop_signal)
		return 128 + stop_signal;
	if (r->runcfg_refused)
		return KBOX_EXIT_FAILURE;
	if (s->end == VM_END_ERROR)
		return cli_die("%s%s; kernel log: %s", s->vm.error,
			       r->pvm ? " (PVM host: the guest ran an instruction its emulator lacks)"
				      : "",
			       klog);
	if (s->kl.exit_code >= 0)
		return s->kl.exit_code;
	if (s->kl.panic)
		return cli_die("the guest kernel panicked: %s; kernel log: %s", s->kl.panic_msg, klog);
	if (s->kl.init_failed)
		return cli_die("guest-init failed: %s; kernel log: %s", s->kl.init_msg, klog);
	if (s->end == VM_END_STOPPED)
		return cli_die("lost the connection to the guest's exec agent (%s); kernel log: %s",
			       strerror(-code), klog);
	return cli_die("the guest stopped (%s) before the command finished; kernel log: %s",
		       s->end == VM_END_TRIPLE_FAULT ? "triple fault"
		       : s->end == VM_END_RESET      ? "reset"
						     : "power off",
		       klog);
}

/* The sandbox from its claim to the guest's end, one step after the
 * other; whatever a failed step leaves is run_cleanup's.  The exit code,
 * with the message written when kbox or the guest failed. */
static int run_sandbox(struct run *r)
{
	timing("configured");
	if (claim_sandbox(r) || record_sandbox(r) || open_disks(r) ||
	    (!fork_from && redirect_output(r)) || load_boot_files(r) || create_vm(r))
		return KBOX_EXIT_FAILURE;
	timing("VM made");
	if (attach_devices(r) || finish_cmdline(r))
		return KBOX_EXIT_FAILURE;
	timing("devices attached");
	compute_layout(r);
	fork_listen(r);
	if (fork_from) {
		setup_console(r);
		if (fork_restore(r) || redirect_output(r))
			return KBOX_EXIT_FAILURE;
		timing("restored from the original");
		publish_and_catch_signals(r);
		if (lock_down(r) || start_vm(r))
			return KBOX_EXIT_FAILURE;
		fork_serve(r);
		int rc = send_runcfg(r);
		if (rc >= 0)
			close(rc);
		if (rc < 0 && !atomic_load(&r->s.vm_done))
			fprintf(stderr, "kbox: the copy's guest did not take its new name and entropy: "
					"%s\n", strerror(-rc));
		timing("configured (name, clock, entropy)");
		int code = fork_wait(r);
		stop_vm(r);
		return code;
	}
	choose_template(r);
	setup_console(r);
	if (r->tpl == TPL_USE ? restore_template(r) : boot_cold(r))
		return KBOX_EXIT_FAILURE;
	timing(r->tpl == TPL_USE ? "restored" : "kernel loaded");
	publish_and_catch_signals(r);
	if (r->tpl == TPL_MAKE) {
		if (start_vm(r) || make_template(r))
			return KBOX_EXIT_FAILURE;
		timing("template saved, VM resumed");
	} else if (lock_down(r) || start_vm(r)) {
		return KBOX_EXIT_FAILURE;
	}
	timing("vCPUs started");
	fork_serve(r);
	int code = run_command(r);
	stop_vm(r);
	timing("VM stopped");
	return run_outcome(r, code);
}

/* The one unwinding path: every part run_init to run_sandbox set up, in
 * the reverse order of its making (the NIC after the bus: no thread
 * calls it then). */
static void run_cleanup(struct run *r)
{
	struct session *s = &r->s;
	report_ready(&r->ready_fd, 1);
	if (r->fkt_started) {
		/* accept gives up once the socket is shut down */
		pthread_mutex_lock(&r->vm_lock);
		r->vm_ended = true;
		pthread_mutex_unlock(&r->vm_lock);
		shutdown(r->fork_lfd, SHUT_RDWR);
		pthread_join(r->fkt, NULL);
		r->fkt_started = false;
	}
	if (r->fork_lfd >= 0) {
		close(r->fork_lfd);
		r->fork_lfd = -1;
	}
	if (r->pagemap_fd >= 0) {
		close(r->pagemap_fd);
		r->pagemap_fd = -1;
	}
	if (r->vmt_started) {
		vm_stop(&s->vm, VM_END_STOPPED);
		pthread_join(r->vmt, NULL);
	}
	if (r->bus_made)
		virtio_bus_destroy(&s->bus);
	if (r->began) {
		char err[512];
		if (netdev_write_learned(&r->net, err, sizeof err) < 0)
			fprintf(stderr, "kbox: %s\n", err);
	}
	netdev_destroy(&r->net);
	mounts_free(&r->mnt);
	disks_free(&r->dsk);
	if (r->began) {
		vsockdev_destroy(&s->vd);
		if (r->vm_made)
			vm_destroy(&s->vm);
		if (r->klog_fd >= 0)
			close(r->klog_fd);
		serial_destroy(&s->com1);
	}
	if (r->claimed)
		sandbox_release(&r->sb);
	if (r->ready_efd >= 0)
		close(r->ready_efd);
	free(r->initrd);
	free(r->env);
	free(r->kimg);
	tlsconf_free(&r->tls);
	config_free(&r->cfg);
	pthread_mutex_destroy(&r->vm_lock);
}

int run_main(int argc, char **argv)
{
	char perr[256];
	clock_gettime(CLOCK_MONOTONIC, &run_t0);
	if (lockdown_prepare(perr, sizeof perr) < 0)
		return cli_die("%s", perr);
	static struct run r;
	run_init(&r);
	r.argc = argc;
	r.argv = argv;
	int rc = run_configure(&r, argc, argv);
	if (!rc && r.o.detach)
		rc = detach(&r.ready_fd, r.o.name); /* the parent returns here */
	if (!rc) {
		run_begin(&r);
		rc = run_sandbox(&r);
	}
	if (r.retry_cold) {
		/* The template did not load (said, and removed): everything
		 * again from the options, booting cold. */
		int ready_fd = r.ready_fd;
		r.ready_fd = -1;
		run_cleanup(&r);
		memset(&r, 0, sizeof r);
		run_init(&r);
		r.argc = argc;
		r.argv = argv;
		r.ready_fd = ready_fd;
		rc = run_configure(&r, argc, argv);
		r.o.cold = 1;
		if (!rc) {
			run_begin(&r);
			rc = run_sandbox(&r);
		}
	}
	run_cleanup(&r);
	timing("cleaned up");
	return rc < 0 ? 0 : rc;
}

int run_fork(const char *from, const char *new_name, int verbose, int argc, char **argv)
{
	fork_from = from;
	fork_new = new_name;
	fork_verbose = verbose != 0;
	return run_main(argc, argv);
}
