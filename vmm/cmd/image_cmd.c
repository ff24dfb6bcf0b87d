/* `kbox image load|import|ls|rm|path`: the command line of the image store. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vmm/cli.h"
#include "vmm/image/image.h"

static const char *const help_main =
	"Usage: kbox image COMMAND [ARGS...]\n"
	"\n"
	"Root file systems for 'kbox run --image NAME', kept once in a store that\n"
	"every sandbox shares read-only ($KBOX_IMAGE_DIR, else\n"
	"$XDG_DATA_HOME/kbox/images, else ~/.local/share/kbox/images).\n"
	"\n"
	"Commands:\n"
	"  load FILE.tar [--name NAME[:TAG]]   load a 'docker save' archive or an OCI\n"
	"                                      image layout in a tar\n"
	"  import DIR --name NAME[:TAG]        copy the folder DIR in as an image\n"
	"  ls                                  list images\n"
	"  rm [-f] NAME[:TAG]|ID...            remove names (and an image with none left)\n"
	"  path NAME[:TAG]|ID                  print an image's root folder\n"
	"\n"
	"'kbox image COMMAND --help' says more.\n";

static const char *const help_load =
	"Usage: kbox image load FILE.tar [--name NAME[:TAG]] [-q]\n"
	"\n"
	"Load the image(s) of a 'docker save' archive or of an OCI image layout in a\n"
	"tar (plain or compressed): every blob is checked against its sha256, the\n"
	"layers are applied in order (whiteouts, opaque folders, owners, modes,\n"
	"xattrs, hard links; symlinks stay links and are never followed).  An entry\n"
	"that would land outside the image refuses the whole archive.  Without\n"
	"--name the archive's own tags name it (alpine:3.19 for\n"
	"docker.io/library/alpine:3.19), else FILE's name.\n"
	"\n"
	"  --name NAME[:TAG]  name it (NAME: a-z 0-9 . _ -; TAG defaults to latest)\n"
	"  -q, --quiet        no progress bar\n";

static const char *const help_import =
	"Usage: kbox image import DIR --name NAME[:TAG]\n"
	"\n"
	"Copy the folder DIR (e.g. made with debootstrap) into the store as an image.\n"
	"Symlinks are copied as links, device nodes skipped; owners are kept when\n"
	"run as root.  The image id is a digest of the tree, so importing the same\n"
	"tree twice stores it once.\n";

static const char *const help_ls =
	"Usage: kbox image ls\n"
	"\n"
	"List the images: NAME, ID (first 12 hex digits), SIZE, CREATED, SOURCE.\n";

static const char *const help_rm =
	"Usage: kbox image rm [-f] NAME[:TAG]|ID...\n"
	"\n"
	"Remove a name; with an id (or a unique prefix of one), every name of that\n"
	"image.  The image's files go when no name is left.  An image that a\n"
	"running sandbox uses is not removed (the sandboxes are named).\n"
	"\n"
	"  -f, --force  remove its names anyway: the running sandboxes keep their\n"
	"               whole root file system, whose files are freed by a later\n"
	"               'kbox image rm', 'load' or 'import' once they stopped\n";

static const char *const help_path =
	"Usage: kbox image path NAME[:TAG]|ID\n"
	"\n"
	"Print the root folder of an image (what 'kbox run --image' uses).\n";

__attribute__((format(printf, 2, 3)))
static int die(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "kbox image %s: ", cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return KBOX_EXIT_FAILURE;
}

struct bar {
	struct timespec last;
	int shown;
};

static void bar_progress(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	struct bar *b = arg;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	long ms = (now.tv_sec - b->last.tv_sec) * 1000 + (now.tv_nsec - b->last.tv_nsec) / 1000000;
	int is_bytes = strcmp(phase, "reading") == 0;
	if (b->shown && ms < 100 && !(is_bytes && done == total))
		return;
	b->last = now;
	b->shown = 1;
	if (is_bytes && total) {
		unsigned pct = (unsigned)(done * 100 / total);
		if (pct > 100)
			pct = 100;
		char bar[31];
		memset(bar, '#', pct * 30 / 100);
		memset(bar + pct * 30 / 100, '.', 30 - pct * 30 / 100);
		bar[30] = 0;
		fprintf(stderr, "\r\033[Kreading  [%s] %3u%% %.1f/%.1f MiB", bar, pct,
			(double)done / 1048576.0, (double)total / 1048576.0);
	} else if (total) {
		fprintf(stderr, "\r\033[K%s %llu/%llu", phase, (unsigned long long)done,
			(unsigned long long)total);
	} else {
		fprintf(stderr, "\r\033[K%s...", phase);
	}
	fflush(stderr);
}

static void bar_end(struct bar *b)
{
	if (b->shown)
		fprintf(stderr, "\r\033[K");
}

static void notes(const struct image_ctx *ctx)
{
	if (ctx->devices_skipped)
		fprintf(stderr, "kbox image: note: %u device node(s) skipped\n", ctx->devices_skipped);
	if (ctx->owners_skipped && geteuid())
		fprintf(stderr, "kbox image: note: not root, so %u entries belong to you rather "
			"than to their owners in the image\n", ctx->owners_skipped);
	else if (ctx->owners_skipped)
		fprintf(stderr, "kbox image: note: %u owner(s) could not be set\n",
			ctx->owners_skipped);
	if (ctx->xattrs_skipped)
		fprintf(stderr, "kbox image: note: %u extended attribute(s) not kept (not permitted "
			"or not supported here)\n", ctx->xattrs_skipped);
}

static int load_main(int argc, char **argv)
{
	const char *file = NULL, *name = NULL;
	int quiet = 0;
	for (int i = 1; i < argc; i++) {
		if (cli_is_help(argv[i])) {
			fputs(help_load, stdout);
			return 0;
		} else if (strcmp(argv[i], "--name") == 0 || strcmp(argv[i], "-n") == 0) {
			if (++i == argc)
				return die("load", "--name needs a value (see 'kbox image load --help')");
			name = argv[i];
		} else if (strncmp(argv[i], "--name=", 7) == 0) {
			name = argv[i] + 7;
		} else if (strcmp(argv[i], "-q") == 0 || strcmp(argv[i], "--quiet") == 0) {
			quiet = 1;
		} else if (argv[i][0] == '-' || file) {
			return die("load", "unexpected '%s' (see 'kbox image load --help')", argv[i]);
		} else {
			file = argv[i];
		}
	}
	if (!file)
		return die("load", "which archive? (see 'kbox image load --help')");
	struct image_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	struct bar b = { { 0, 0 }, 0 };
	if (!quiet && isatty(2)) {
		ctx.progress = bar_progress;
		ctx.progress_arg = &b;
	}
	int r = image_load(&ctx, file, name);
	bar_end(&b);
	if (r < 0)
		return die("load", "%s", ctx.err[0] ? ctx.err : strerror(-r));
	notes(&ctx);
	printf("Loaded %s (id %.12s)%s\n", ctx.ref, ctx.id, ctx.existed ? ", already stored" : "");
	return 0;
}

static int import_main(int argc, char **argv)
{
	const char *dir = NULL, *name = NULL;
	for (int i = 1; i < argc; i++) {
		if (cli_is_help(argv[i])) {
			fputs(help_import, stdout);
			return 0;
		} else if (strcmp(argv[i], "--name") == 0 || strcmp(argv[i], "-n") == 0) {
			if (++i == argc)
				return die("import", "--name needs a value");
			name = argv[i];
		} else if (strncmp(argv[i], "--name=", 7) == 0) {
			name = argv[i] + 7;
		} else if (argv[i][0] == '-' || dir) {
			return die("import", "unexpected '%s' (see 'kbox image import --help')", argv[i]);
		} else {
			dir = argv[i];
		}
	}
	if (!dir || !name)
		return die("import", "usage: kbox image import DIR --name NAME[:TAG]");
	struct image_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	struct bar b = { { 0, 0 }, 0 };
	if (isatty(2)) {
		ctx.progress = bar_progress;
		ctx.progress_arg = &b;
	}
	int r = image_import(&ctx, dir, name);
	bar_end(&b);
	if (r < 0)
		return die("import", "%s", ctx.err[0] ? ctx.err : strerror(-r));
	notes(&ctx);
	printf("Imported %s (id %.12s)%s\n", ctx.ref, ctx.id, ctx.existed ? ", already stored" : "");
	return 0;
}

static void print_info(void *arg, const struct image_info *in)
{
	char when[32] = "-";
	if (in->created) {
		time_t t = (time_t)in->created;
		struct tm tm;
		if (localtime_r(&t, &tm))
			strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
	}
	double sz = (double)in->size;
	const char *unit = "B";
	static const char *const units[] = { "kB", "MB", "GB", "TB" };
	for (int i = 0; i < 4 && sz >= 1000.0; i++) {
		sz /= 1000.0;
		unit = units[i];
	}
	printf("%-32s %.12s  %7.1f%-2s  %-16s  %s\n", in->ref, in->id, sz, unit, when, in->source);
}

static int ls_main(int argc, char **argv)
{
	if (argc > 1) {
		if (cli_is_help(argv[1])) {
			fputs(help_ls, stdout);
			return 0;
		}
		return die("ls", "unexpected '%s' (see 'kbox image ls --help')", argv[1]);
	}
	printf("%-32s %-12s  %9s  %-16s  %s\n", "NAME", "ID", "SIZE", "CREATED", "SOURCE");
	struct image_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	int r = image_list(&ctx, print_info, NULL);
	if (r < 0)
		return die("ls", "%s", ctx.err[0] ? ctx.err : strerror(-r));
	return 0;
}

static int rm_main(int argc, char **argv)
{
	if (argc < 2)
		return die("rm", "which image? (see 'kbox image rm --help')");
	for (int i = 1; i < argc; i++)
		if (cli_is_help(argv[i])) {
			fputs(help_rm, stdout);
			return 0;
		}
	int force = 0, refs = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--force") == 0)
			force = 1;
		else if (argv[i][0] == '-')
			return die("rm", "unknown option '%s' (see 'kbox image rm --help')", argv[i]);
		else
			refs++;
	}
	if (!refs)
		return die("rm", "which image? (see 'kbox image rm --help')");
	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-')
			continue;
		struct image_ctx ctx;
		memset(&ctx, 0, sizeof ctx);
		ctx.force = force;
		int r = image_remove(&ctx, argv[i]);
		if (r < 0)
			return die("rm", "%s", ctx.err[0] ? ctx.err : strerror(-r));
		printf("Removed %s (id %.12s)\n", ctx.ref[0] ? ctx.ref : argv[i], ctx.id);
		if (ctx.users[0])
			printf("Still in use by running sandbox(es) %s: they keep its files, which "
			       "are freed once they stopped (by a later 'kbox image rm', 'load' or "
			       "'import')\n", ctx.users);
	}
	return 0;
}

static int path_main(int argc, char **argv)
{
	if (argc == 2 && cli_is_help(argv[1])) {
		fputs(help_path, stdout);
		return 0;
	}
	if (argc != 2)
		return die("path", "usage: kbox image path NAME[:TAG]|ID");
	char dir[PATH_MAX];
	int r = image_resolve(argv[1], dir, sizeof dir);
	if (r == -ENOTUNIQ)
		return die("path", "'%s' matches several image ids: give more digits", argv[1]);
	if (r < 0)
		return die("path", "no image '%s' (see 'kbox image ls')", argv[1]);
	printf("%s\n", dir);
	return 0;
}

int image_main(int argc, char **argv)
{
	int rc = cli_group_help(argc, argv, help_main);
	if (rc >= 0)
		return rc;
	const char *c = argv[1];
	if (strcmp(c, "load") == 0)
		return load_main(argc - 1, argv + 1);
	if (strcmp(c, "import") == 0)
		return import_main(argc - 1, argv + 1);
	if (strcmp(c, "ls") == 0 || strcmp(c, "list") == 0)
		return ls_main(argc - 1, argv + 1);
	if (strcmp(c, "rm") == 0 || strcmp(c, "remove") == 0)
		return rm_main(argc - 1, argv + 1);
	if (strcmp(c, "path") == 0)
		return path_main(argc - 1, argv + 1);
	return cli_group_unknown("image", c);
}
