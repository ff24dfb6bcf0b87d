/* kbox: run a command, or a coding agent, in a microVM it cannot talk its
 * way out of. */
#include <stdio.h>
#include <string.h>

#include "vmm/cli.h"
#include "vmm/cmd/ca_cmd.h"
#include "vmm/cmd/disk_cmd.h"
#include "vmm/cmd/doctor.h"
#include "vmm/cmd/fork.h"
#include "vmm/cmd/lifecycle.h"
#include "vmm/cmd/run.h"
#include "vmm/cmd/secrets_cmd.h"
#include "vmm/cmd/snapshot_cmd.h"
#include "vmm/cmd/trust.h"
#include "vmm/image/image.h"

#ifndef KBOX_VERSION
#define KBOX_VERSION "0.1.0-dev"
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kbox COMMAND [ARGS...]\n"
		"\n"
		"Commands:\n"
		"  run [OPTIONS] -- CMD [ARG...]   boot a microVM and run CMD inside it\n"
		"  exec [OPTIONS] NAME -- CMD      run CMD inside the running sandbox NAME\n"
		"  fork [OPTIONS] NAME NEW         start NEW as a copy of the running sandbox NAME\n"
		"  ps                              list sandboxes\n"
		"  stop [-t SECONDS] NAME...       stop sandboxes\n"
		"  logs [-f] NAME                  output of a detached sandbox's command\n"
		"  image load|import|ls|rm|path    root file system images for run --image\n"
		"  disk ls|rm                      disk volumes for run --disk\n"
		"  snapshot ls|rm|prune            templates kbox run starts from\n"
		"  doctor                          check that kbox can run here\n"
		"  ca path|init|show|mint NAME     the local CA for TLS interception\n"
		"  secrets reload NAME             re-read a running sandbox's secret values\n"
		"  trust [--remove|--list] [PATH]  accept a project's kbox.yaml for kbox run\n"
		"  version                         print kbox's version\n"
		"  help                            this help\n"
		"\n"
		"'kbox COMMAND --help' lists a command's options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return KBOX_EXIT_FAILURE;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "run") == 0)
		return run_main(argc - 1, argv + 1);
	if (strcmp(cmd, "exec") == 0)
		return exec_main(argc - 1, argv + 1);
	if (strcmp(cmd, "fork") == 0)
		return fork_main(argc - 1, argv + 1);
	if (strcmp(cmd, "ps") == 0)
		return ps_main(argc - 1, argv + 1);
	if (strcmp(cmd, "stop") == 0)
		return stop_main(argc - 1, argv + 1);
	if (strcmp(cmd, "logs") == 0)
		return logs_main(argc - 1, argv + 1);
	if (strcmp(cmd, "image") == 0)
		return image_main(argc - 1, argv + 1);
	if (strcmp(cmd, "disk") == 0)
		return disk_main(argc - 1, argv + 1);
	if (strcmp(cmd, "snapshot") == 0)
		return snapshot_main(argc - 1, argv + 1);
	if (strcmp(cmd, "doctor") == 0)
		return doctor_main(argc - 1, argv + 1);
	if (strcmp(cmd, "ca") == 0)
		return ca_main(argc - 1, argv + 1);
	if (strcmp(cmd, "secrets") == 0)
		return secrets_main(argc - 1, argv + 1);
	if (strcmp(cmd, "trust") == 0)
		return trust_main(argc - 1, argv + 1);
	if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
		printf("kbox %s\n", KBOX_VERSION);
		return 0;
	}
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "kbox: unknown command '%s' (see 'kbox --help')\n", cmd);
	return KBOX_EXIT_FAILURE;
}
