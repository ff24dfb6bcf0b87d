#include "vmm/cmd/lifecycle.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vmm/cli.h"
#include "vmm/sandbox/agent_conn.h"
#include "vmm/sandbox/exec_client.h"
#include "vmm/sandbox/lockdown.h"
#include "vmm/sandbox/sandbox.h"

#define MAX_ENV 256

/* A sandbox that exists and whose kbox process is alive, or an error
 * message that says what to do. */
static int find_running(const char *name, struct sandbox *sb, struct sandbox_info *info)
{
	int rc = sandbox_lookup(name, sb, info);
	if (rc == -EINVAL)
		return cli_die("invalid sandbox name '%s'", name);
	if (rc < 0)
		return cli_die("no sandbox named '%s' (see 'kbox ps')", name);
	if (!info->alive)
		return cli_die("sandbox '%s' is not running any more (its kbox process %d is gone)",
			   name, (int)info->pid);
	return 0;
}

/* Before the command reads bytes a compromised sandbox may have written
 * (docs/security.md). */
static int lock_client(enum lockdown_client kind, const char *dir)
{
	char err[256];
	if (lockdown_client(kind, dir, err, sizeof err) < 0)
		return cli_die("%s", err);
	return 0;
}

static void exec_usage(FILE *f)
{
	fprintf(f, "Usage: kbox exec [-t] [-e K=V]... [-w DIR] NAME -- COMMAND [ARG...]\n"
		   "\n"
		   "Run COMMAND inside the running sandbox NAME and exit with its status.\n"
		   "  -t, --tty          give COMMAND a terminal\n"
		   "  -e, --env K=V      environment variable (repeatable)\n"
		   "  -w, --workdir DIR  directory COMMAND starts in (default /)\n");
}

int exec_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tty", no_argument, NULL, 't' },
		{ "env", required_argument, NULL, 'e' },
		{ "workdir", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *env[MAX_ENV];
	unsigned ne = 0;
	const char *workdir = "";
	int tty = 0, c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:te:w:h", opts, NULL)) != -1) {
		switch (c) {
		case 't': tty = 1; break;
		case 'w': workdir = optarg; break;
		case 'e':
			if (!strchr(optarg, '=') || optarg[0] == '=')
				return cli_die("--env takes KEY=VALUE, not '%s'", optarg);
			if (ne >= MAX_ENV - 4)
				return cli_die("too many --env options");
			env[ne++] = optarg;
			break;
		case 'h': exec_usage(stdout); return 0;
		case ':': return cli_die("option '%s' needs a value", argv[optind - 1]);
		default: return cli_die("unknown option '%s' (see 'kbox exec --help')", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return cli_die("which sandbox? kbox exec NAME -- COMMAND");
	const char *name = argv[optind++];
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind >= argc)
		return cli_die("no command given: kbox exec NAME -- COMMAND");
	struct sandbox sb;
	struct sandbox_info info;
	if (find_running(name, &sb, &info) || lock_client(LD_CLIENT_EXEC, NULL))
		return KBOX_EXIT_FAILURE;
	int fd = agent_conn_open(sb.sock, AGENT_PORT, 30000, NULL);
	if (fd < 0)
		return cli_die("cannot reach the exec agent in '%s': %s (is it still booting?)", name,
			   strerror(-fd));

	const char *envp[MAX_ENV];
	unsigned n = 0;
	static char termvar[128];
	const char *term = tty ? getenv("TERM") : NULL;
	snprintf(termvar, sizeof termvar, "TERM=%s", term && *term ? term : "dumb");
	/* The user's entries first: the first of a name wins. */
	for (unsigned i = 0; i < ne; i++)
		envp[n++] = env[i];
	envp[n++] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	envp[n++] = "HOME=/root";
	envp[n++] = termvar;
	envp[n] = NULL;
	struct exec_proto_exec req = {
		.flags = tty ? EXEC_PROTO_FLAG_TTY : 0,
		.argc = (uint32_t)(argc - optind),
		.argv = argv + optind,
		.envc = n,
		.envp = (char **)envp,
		.cwd = workdir,
	};
	int code = exec_client_run(fd, &req);
	close(fd);
	if (code < 0)
		return cli_die("lost the connection to '%s' before the command finished: %s", name,
			   strerror(-code));
	return code;
}

static void fmt_uptime(long long secs, char *buf, size_t len)
{
	if (secs < 0)
		secs = 0;
	if (secs < 120)
		snprintf(buf, len, "%llds", secs);
	else if (secs < 7200)
		snprintf(buf, len, "%lldm", secs / 60);
	else if (secs < 172800)
		snprintf(buf, len, "%lldh", secs / 3600);
	else
		snprintf(buf, len, "%lldd", secs / 86400);
}

static void ps_row(const struct sandbox_info *i, void *ctx)
{
	(void)ctx;
	char up[32];
	fmt_uptime((long long)time(NULL) - i->started, up, sizeof up);
	printf("%-20s %-8s %-8s %4u %8llu  %-24s %s\n", i->name, i->alive ? "running" : "stale",
	       i->alive ? up : "-", i->cpus, i->memory_mib, i->ports[0] ? i->ports : "-", i->command);
}

int ps_main(int argc, char **argv)
{
	if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		printf("Usage: kbox ps\n\nList sandboxes: name, state, uptime, CPUs, memory "
		       "(MiB), forwarded ports\n(HOST->GUEST, from -p) and command.\nA 'stale' one was left by a kbox that died; 'kbox stop' "
		       "cleans it.\n");
		return 0;
	}
	if (argc > 1)
		return cli_die("kbox ps takes no arguments");
	char rt[4096];
	int r = sandbox_runtime_dir(rt, sizeof rt);
	if (r < 0)
		return cli_die("cannot use the runtime directory: %s", strerror(-r));
	if (lock_client(LD_CLIENT_PS, rt))
		return KBOX_EXIT_FAILURE;
	printf("%-20s %-8s %-8s %4s %8s  %-24s %s\n", "NAME", "STATE", "UPTIME", "CPUS", "MEMORY",
	       "PORTS", "COMMAND");
	int n = sandbox_each(ps_row, NULL);
	if (n < 0)
		return cli_die("cannot list sandboxes: %s", strerror(-n));
	return 0;
}

static int alive(pid_t pid)
{
	return kill(pid, 0) == 0 || errno == EPERM;
}

int stop_main(int argc, char **argv)
{
	int timeout = 10, c;
	static const struct option opts[] = {
		{ "time", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":t:h", opts, NULL)) != -1) {
		switch (c) {
		case 't': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || v < 0 || v > 3600)
				return cli_die("--time takes seconds from 0 to 3600, not '%s'", optarg);
			timeout = (int)v;
			break;
		}
		case 'h':
			printf("Usage: kbox stop [-t SECONDS] NAME...\n\nAsk each sandbox's command "
			       "to stop (SIGTERM), then end the VM after SECONDS\n(default 10).\n");
			return 0;
		case ':': return cli_die("option '%s' needs a value", argv[optind - 1]);
		default: return cli_die("unknown option '%s' (see 'kbox stop --help')", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return cli_die("which sandbox? kbox stop NAME");
	char rt[4096];
	int rc = sandbox_runtime_dir(rt, sizeof rt);
	if (rc < 0)
		return cli_die("cannot use the runtime directory: %s", strerror(-rc));
	if (lock_client(LD_CLIENT_STOP, rt))
		return KBOX_EXIT_FAILURE;
	for (int i = optind; i < argc; i++) {
		struct sandbox sb;
		struct sandbox_info info;
		int r = sandbox_lookup(argv[i], &sb, &info);
		if (r < 0) {
			rc = cli_die("no sandbox named '%s' (see 'kbox ps')", argv[i]);
			continue;
		}
		if (info.alive) {
			kill(info.pid, SIGTERM);
			for (int t = 0; t < timeout * 10 && alive(info.pid); t++)
				nanosleep(&(struct timespec){ .tv_nsec = 100000000 }, NULL);
			if (alive(info.pid)) {
				kill(info.pid, SIGKILL);
				for (int t = 0; t < 50 && alive(info.pid); t++)
					nanosleep(&(struct timespec){ .tv_nsec = 100000000 }, NULL);
			}
		}
		/* A kbox that was killed leaves its directory behind. */
		if (!alive(info.pid))
			sandbox_release(&sb);
	}
	return rc;
}

int logs_main(int argc, char **argv)
{
	int follow = 0;
	int i = 1;
	if (i < argc && (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)) {
		printf("Usage: kbox logs [-f] NAME\n\nPrint the output of a detached sandbox's "
		       "command; -f keeps following it\nuntil the sandbox stops.\n");
		return 0;
	}
	if (i < argc && (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--follow") == 0)) {
		follow = 1;
		i++;
	}
	if (i != argc - 1)
		return cli_die("usage: kbox logs [-f] NAME");
	struct sandbox sb;
	struct sandbox_info info;
	if (sandbox_lookup(argv[i], &sb, &info) < 0)
		return cli_die("no sandbox named '%s' (see 'kbox ps')", argv[i]);
	char path[sizeof sb.dir + 16];
	snprintf(path, sizeof path, "%s/output.log", sb.dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return cli_die("sandbox '%s' has no log (only detached sandboxes keep one)", argv[i]);
	if (lock_client(LD_CLIENT_LOGS, NULL)) {
		close(fd);
		return KBOX_EXIT_FAILURE;
	}
	char buf[65536];
	for (;;) {
		ssize_t r = read(fd, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			close(fd);
			return cli_die("cannot read %s: %s", path, strerror(errno));
		}
		if (r == 0) {
			if (!follow || !alive(info.pid))
				break;
			nanosleep(&(struct timespec){ .tv_nsec = 200000000 }, NULL);
			continue;
		}
		if (fwrite(buf, 1, (size_t)r, stdout) != (size_t)r)
			break;
		fflush(stdout);
	}
	close(fd);
	return 0;
}
