#include "vmm/cmd/fork.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/cli.h"
#include "vmm/cmd/run.h"
#include "vmm/sandbox/sandbox.h"

void fork_usage(FILE *f)
{
	fprintf(f,
		"Usage: kbox fork [OPTIONS] NAME NEW\n"
		"\n"
		"Start the sandbox NEW as a copy of the running sandbox NAME, which goes on:\n"
		"NAME is paused for a moment while its vCPUs, devices (the shared folders'\n"
		"open files and known inodes among them) and RAM are taken (RAM copy-on-\n"
		"write, written out while NAME runs again), then NEW starts from that\n"
		"state in the background and kbox prints NEW.\n"
		"\n"
		"NEW has NAME's files, processes and memory, and NAME's settings (shares,\n"
		"network policy, secrets, image); its own host name (NEW), entropy, clock\n"
		"and writable layer; forwarded ports on free host ports ('kbox ps'); no\n"
		"--learn file (NAME's session writes it).  In NEW the network connections\n"
		"and exec sessions of NAME are reset: commands attached to one (NAME's main\n"
		"command among them) get a hangup, other processes go on.  NEW runs until\n"
		"'kbox stop NEW'.\n"
		"\n"
		"Refused: a NAME with a read-write disk (--disk), one started by another\n"
		"kbox build, kernel or initramfs, or whose config changed since.\n"
		"\n"
		"Options:\n"
		"      --verbose         say how long NAME was paused and the copy's figures\n"
		"  -h, --help            this help\n");
}

int fork_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "verbose", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int verbose = 0, c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'V': verbose = 1; break;
		case 'h': fork_usage(stdout); return 0;
		default:
			return cli_die("unknown option '%s' (see 'kbox fork --help')", argv[optind - 1]);
		}
	}
	if (argc - optind != 2)
		return cli_die("kbox fork takes NAME and NEW (see 'kbox fork --help')");
	const char *name = argv[optind], *new_name = argv[optind + 1];
	if (!sandbox_name_ok(new_name))
		return cli_die("NEW takes 1-64 letters, digits, '_', '.' or '-', not '%s'", new_name);
	if (strcmp(name, new_name) == 0)
		return cli_die("NEW must differ from NAME");
	struct sandbox sb;
	struct sandbox_info info;
	int rc = sandbox_lookup(name, &sb, &info);
	if (rc == -EINVAL)
		return cli_die("invalid sandbox name '%s'", name);
	if (rc < 0)
		return cli_die("no sandbox named '%s' (see 'kbox ps')", name);
	if (!info.alive)
		return cli_die("sandbox '%s' is not running any more (its kbox process %d is gone)",
			       name, (int)info.pid);
	char *buf, *cwd, **rargv;
	int rargc;
	rc = sandbox_read_args(&sb, &buf, &cwd, &rargc, &rargv);
	if (rc < 0)
		return cli_die("cannot fork '%s': how it was started is not recorded (%s; a kbox "
			       "older than kbox fork started it?)", name, strerror(-rc));
	/* Its relative paths and its project's kbox.yaml are the folder's. */
	if (chdir(cwd) < 0) {
		rc = cli_die("cannot fork '%s': its folder %s: %s", name, cwd, strerror(errno));
	} else {
		rc = run_fork(name, new_name, verbose, rargc, rargv);
	}
	free(rargv);
	free(buf);
	return rc;
}
