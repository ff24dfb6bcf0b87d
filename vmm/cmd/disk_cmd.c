/* `kbox disk ls|rm`: list and remove the disk volumes (vmm/sandbox/disks.h). */
#include "vmm/cmd/disk_cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/cli.h"
#include "vmm/sandbox/disks.h"

static const char *const help_main =
	"Usage: kbox disk COMMAND [ARGS...]\n"
	"\n"
	"Disk volumes for 'kbox run --disk NAME:GUEST_PATH[:size=SIZE][:ro]': ext4\n"
	"filesystems in sparse files NAME.img, kept across runs in $KBOX_DISK_DIR,\n"
	"else $XDG_DATA_HOME/kbox/disks, else ~/.local/share/kbox/disks.  A run\n"
	"makes a volume the first time its NAME is used.\n"
	"\n"
	"Commands:\n"
	"  ls [-b]        list volumes: NAME, SIZE, ALLOCATED (host disk space it\n"
	"                 takes), IN USE (a running sandbox holds it)\n"
	"  rm NAME...     remove volumes and everything on them\n"
	"\n"
	"'kbox disk COMMAND --help' says more.\n";

static const char *const help_ls =
	"Usage: kbox disk ls [-b|--bytes]\n"
	"\n"
	"List the volumes: NAME, SIZE (what the guest sees), ALLOCATED (the host\n"
	"disk space the sparse file takes), IN USE (yes while a running sandbox\n"
	"holds it).  Sizes are binary (1G = 1024 MiB); -b prints bytes.\n";

static const char *const help_rm =
	"Usage: kbox disk rm NAME...\n"
	"\n"
	"Remove each volume with everything stored on it.  A volume a running\n"
	"sandbox uses is not removed (stop the sandbox first); the others still\n"
	"are.  Exits non-zero if any NAME was not removed.\n";

struct ls_state {
	struct disks_volume *v;
	size_t n, cap;
	int oom;
};

static void collect(const struct disks_volume *v, void *ctx)
{
	struct ls_state *s = ctx;
	if (s->n == s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 16;
		struct disks_volume *nv = realloc(s->v, nc * sizeof *nv);
		if (!nv) {
			s->oom = 1;
			return;
		}
		s->v = nv;
		s->cap = nc;
	}
	s->v[s->n++] = *v;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct disks_volume *)a)->name, ((const struct disks_volume *)b)->name);
}

static int ls_main(int argc, char **argv)
{
	int bytes = 0;
	for (int i = 1; i < argc; i++) {
		if (cli_is_help(argv[i])) {
			fputs(help_ls, stdout);
			return 0;
		}
		if (strcmp(argv[i], "-b") == 0 || strcmp(argv[i], "--bytes") == 0)
			bytes = 1;
		else
			return cli_die("disk ls: unknown argument '%s' (see 'kbox disk ls --help')",
				       argv[i]);
	}
	struct ls_state s = { 0 };
	int rc = disks_each(collect, &s);
	if (rc < 0 && rc != -ENOENT) {
		free(s.v);
		return cli_die("disk ls: cannot read the disk folder: %s", strerror(-rc));
	}
	if (s.oom) {
		free(s.v);
		return cli_die("disk ls: out of memory");
	}
	qsort(s.v, s.n, sizeof *s.v, by_name);
	printf("%-20s  %14s  %14s  %s\n", "NAME", "SIZE", "ALLOCATED", "IN USE");
	for (size_t i = 0; i < s.n; i++) {
		char sz[32], al[32];
		if (bytes) {
			snprintf(sz, sizeof sz, "%" PRIu64, s.v[i].size);
			snprintf(al, sizeof al, "%" PRIu64, s.v[i].allocated);
		} else {
			cli_human_bytes(s.v[i].size, sz, sizeof sz);
			cli_human_bytes(s.v[i].allocated, al, sizeof al);
		}
		printf("%-20s  %14s  %14s  %s\n", s.v[i].name, sz, al,
		       s.v[i].in_use < 0 ? "?" : s.v[i].in_use ? "yes" : "no");
	}
	free(s.v);
	return 0;
}

static int rm_main(int argc, char **argv)
{
	if (argc < 2)
		return cli_die("disk rm: which volume? kbox disk rm NAME...");
	for (int i = 1; i < argc; i++)
		if (cli_is_help(argv[i])) {
			fputs(help_rm, stdout);
			return 0;
		}
	int rc = 0;
	for (int i = 1; i < argc; i++) {
		char err[512];
		if (disks_remove(argv[i], err, sizeof err) < 0)
			rc = cli_die("disk rm: %s", err);
		else
			printf("%s\n", argv[i]);
	}
	return rc;
}

int disk_main(int argc, char **argv)
{
	int rc = cli_group_help(argc, argv, help_main);
	if (rc >= 0)
		return rc;
	const char *c = argv[1];
	if (strcmp(c, "ls") == 0 || strcmp(c, "list") == 0)
		return ls_main(argc - 1, argv + 1);
	if (strcmp(c, "rm") == 0 || strcmp(c, "remove") == 0)
		return rm_main(argc - 1, argv + 1);
	return cli_group_unknown("disk", c);
}
