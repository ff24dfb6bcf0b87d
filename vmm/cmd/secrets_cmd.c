#include "vmm/cmd/secrets_cmd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "vmm/cli.h"
#include "vmm/sandbox/sandbox.h"

static void usage(FILE *f)
{
	fprintf(f, "Usage: kbox secrets reload NAME\n"
		   "\n"
		   "Make the running sandbox NAME re-read the values of its secrets (from\n"
		   "its --secret-conf file, the environment it started with and secrets.env)\n"
		   "without a restart; the guest keeps its placeholders.  The result is\n"
		   "written to the sandbox's output ('kbox logs NAME' for a detached one).\n"
		   "A failed reload changes nothing.  'kill -HUP PID' does the same.\n");
}

int secrets_main(int argc, char **argv)
{
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage(stdout);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "reload") == 0 &&
	    (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
		usage(stdout);
		return 0;
	}
	if (argc != 3 || strcmp(argv[1], "reload") != 0) {
		usage(stderr);
		return KBOX_EXIT_FAILURE;
	}
	const char *name = argv[2];
	if (!sandbox_name_ok(name)) {
		fprintf(stderr, "kbox: '%s' is not a sandbox name (see 'kbox ps')\n", name);
		return KBOX_EXIT_FAILURE;
	}
	struct sandbox sb;
	struct sandbox_info info;
	int rc = sandbox_lookup(name, &sb, &info);
	if (rc < 0 || !info.alive || info.pid <= 0) {
		fprintf(stderr, "kbox: no running sandbox '%s' (see 'kbox ps')\n", name);
		return KBOX_EXIT_FAILURE;
	}
	if (kill(info.pid, SIGHUP) < 0) {
		fprintf(stderr, "kbox: cannot signal sandbox '%s' (pid %d): %s\n", name, (int)info.pid,
			strerror(errno));
		return KBOX_EXIT_FAILURE;
	}
	printf("asked sandbox '%s' to reload its secrets\n", name);
	return 0;
}
