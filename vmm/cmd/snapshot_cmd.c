/* `kbox snapshot ls|rm|prune`: list and remove the templates `kbox run`
 * keeps (vmm/sandbox/template.h).  Only names template_name_ok accepts,
 * and the temporaries of snapshot_file_write, are ever looked at in the
 * folder; files are removed with unlinkat on the folder's descriptor
 * (which follows no symlink) and only when they are regular files. */
#include "vmm/cmd/snapshot_cmd.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vmm/cli.h"
#include "vmm/core/snapshot_file.h"
#include "vmm/sandbox/template.h"

/* A temporary of snapshot_file_write (".NAME.tmp-PID") this long
 * untouched belongs to a write that died: a live one writes, so moves
 * its mtime, all along. */
#define STALE_TEMP_SECONDS (10 * 60)
#define SHORT_HEX 12  /* hex digits of the key ls shows */
#define MIN_PREFIX 4  /* fewest hex digits rm takes */
#define KEY_HEX (2 * SNAPSHOT_FILE_KEY_LEN)
#define KEY_OFF (sizeof TEMPLATE_PREFIX - 1)
#define TEMP_MAX (1 + TEMPLATE_NAME_LEN + 5 + 20)

static const char *const help_main =
	"Usage: kbox snapshot COMMAND [ARGS...]\n"
	"\n"
	"Templates: snapshots of a booted guest that 'kbox run' starts from\n"
	"instead of booting the kernel, one per boot layout (kernel, initrd,\n"
	"vCPUs, memory, devices, kbox binary), made by the first run of each.\n"
	"They live in $KBOX_TEMPLATE_DIR, else $XDG_CACHE_HOME/kbox/templates,\n"
	"else ~/.cache/kbox/templates; removing one costs the next run of its\n"
	"layout a cold boot, nothing else.  A run that makes a template\n"
	"removes the others no run started from for 30 days.\n"
	"\n"
	"Commands:\n"
	"  ls                    list templates: name, vCPUs, memory, size, disk\n"
	"                        space, when made and last used\n"
	"  rm NAME|PREFIX...     remove templates\n"
	"  prune [--all] [--unused-for DAYS]\n"
	"                        remove damaged templates and unfinished writes,\n"
	"                        and with the options unused or all templates\n"
	"\n"
	"'kbox snapshot COMMAND --help' says more.\n";

static const char *const help_ls =
	"Usage: kbox snapshot ls\n"
	"\n"
	"One line per template: NAME (the first hex digits of its key, which\n"
	"'kbox snapshot rm' takes), CPUS and MEMORY it was made for, SIZE of\n"
	"the file and ON DISK (what it takes: guest RAM that was zero is a\n"
	"hole), MADE and LAST USED (the last run that started from it), local\n"
	"time.  A file kbox would not start from (cut short, made by another\n"
	"kbox version, not private to you) says 'damaged:' and why; 'kbox\n"
	"snapshot prune' removes those.  Then a total.  Guest RAM is not read.\n";

static const char *const help_rm =
	"Usage: kbox snapshot rm NAME|PREFIX...\n"
	"\n"
	"Remove each template named: by its file name (t-KEY.snap), its key\n"
	"(64 hex digits) or the start of its key (at least 4 hex digits, as\n"
	"'kbox snapshot ls' shows) that no other template shares.  An unknown\n"
	"or ambiguous name removes nothing; the others are still removed, and\n"
	"kbox exits non-zero.  A running sandbox started from a template keeps\n"
	"running.\n";

static const char *const help_prune =
	"Usage: kbox snapshot prune [--all] [--unused-for DAYS]\n"
	"\n"
	"Remove damaged templates (those kbox would not start from, e.g. made\n"
	"by another kbox version) and what writes that did not finish left\n"
	"(untouched for 10 minutes).  Also:\n"
	"  --unused-for DAYS   templates no run has started from for DAYS days\n"
	"                      (their last use as 'kbox snapshot ls' shows it)\n"
	"  --all               every template\n"
	"Prints what it removed and the disk space freed.\n";

enum state { ST_OK, ST_DAMAGED, ST_UNREADABLE, ST_NOT_FILE };

struct entry {
	char name[TEMPLATE_NAME_LEN + 1];
	struct stat st; /* lstat, with the access time from before ls read it */
	enum state state;
	uint32_t ncpus;
	uint64_t ram;
	char why[512];
	unsigned short_len;
	bool removed;
};

struct temp {
	char name[TEMP_MAX + 1];
	struct stat st;
};

struct cache {
	char dir[PATH_MAX];
	int dfd; /* -1: no folder */
	struct entry *e;
	size_t n, cap;
	struct temp *t;
	size_t nt, capt;
};

static void cache_free(struct cache *c)
{
	if (c->dfd >= 0)
		close(c->dfd);
	free(c->e);
	free(c->t);
}

/* ".t-KEY.snap.tmp-PID", as snapshot_file_write names its temporary. */
static int temp_name_ok(const char *name)
{
	if (name[0] != '.')
		return 0;
	size_t n = strlen(name);
	if (n <= 1 + TEMPLATE_NAME_LEN + 5 || n > TEMP_MAX)
		return 0;
	char t[TEMPLATE_NAME_LEN + 1];
	memcpy(t, name + 1, TEMPLATE_NAME_LEN);
	t[TEMPLATE_NAME_LEN] = 0;
	if (!template_name_ok(t) || strncmp(name + 1 + TEMPLATE_NAME_LEN, ".tmp-", 5) != 0)
		return 0;
	for (const char *p = name + 1 + TEMPLATE_NAME_LEN + 5; *p; p++)
		if (*p < '0' || *p > '9')
			return 0;
	return 1;
}

/* "snapshot DIR/NAME is too short" reads "file is too short" on a line
 * that names the template already. */
static void set_why(struct entry *e, const char *dir, const char *err)
{
	char head[PATH_MAX + TEMPLATE_NAME_LEN + 16];
	snprintf(head, sizeof head, "snapshot %s/%s", dir, e->name);
	size_t hl = strlen(head);
	if (strncmp(err, head, hl) == 0)
		snprintf(e->why, sizeof e->why, "file%s", err + hl);
	else
		snprintf(e->why, sizeof e->why, "%s", err);
}

static const char *nonfile_kind(const struct stat *st)
{
	return S_ISLNK(st->st_mode) ? "a symbolic link" : S_ISDIR(st->st_mode) ? "a folder"
											: "not a regular file";
}

/* Check a template as kbox run would open it, without touching its RAM
 * and without making it look used: the read of its metadata may move
 * the access time (relatime), which is put back. */
static void check_entry(struct cache *c, struct entry *e)
{
	if (!S_ISREG(e->st.st_mode)) {
		e->state = ST_NOT_FILE;
		snprintf(e->why, sizeof e->why, "%s", nonfile_kind(&e->st));
		return;
	}
	struct snapshot_file_file f;
	char err[512];
	int rc = snapshot_file_open(c->dir, e->name, &f, err, sizeof err);
	if (rc < 0) {
		e->state = rc == -EBADMSG || rc == -EPROTO || rc == -EPERM || rc == -EACCES ||
				   rc == -ELOOP
			   ? ST_DAMAGED
			   : ST_UNREADABLE;
		set_why(e, c->dir, err);
		return;
	}
	e->state = ST_OK;
	e->ncpus = f.v.layout.ncpus;
	e->ram = f.v.layout.ram_size;
	struct stat now;
	if (fstat(f.fd, &now) == 0 && now.st_ino == e->st.st_ino && now.st_dev == e->st.st_dev) {
		const struct timespec t[2] = { e->st.st_atim, { .tv_nsec = UTIME_OMIT } };
		struct timespec atime = e->st.st_atim;
		e->st = now;
		if (futimens(f.fd, t) == 0)
			e->st.st_atim = atime;
	}
	snapshot_file_close(&f);
}

static int add_entry(struct cache *c, const char *name, const struct stat *st)
{
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 16;
		struct entry *ne = realloc(c->e, nc * sizeof *ne);
		if (!ne)
			return -ENOMEM;
		c->e = ne;
		c->cap = nc;
	}
	struct entry *e = &c->e[c->n++];
	memset(e, 0, sizeof *e);
	memcpy(e->name, name, TEMPLATE_NAME_LEN + 1); /* template_name_ok: that long */
	e->st = *st;
	return 0;
}

static int add_temp(struct cache *c, const char *name, const struct stat *st)
{
	if (c->nt == c->capt) {
		size_t nc = c->capt ? c->capt * 2 : 4;
		struct temp *nt = realloc(c->t, nc * sizeof *nt);
		if (!nt)
			return -ENOMEM;
		c->t = nt;
		c->capt = nc;
	}
	struct temp *t = &c->t[c->nt++];
	memcpy(t->name, name, strlen(name) + 1); /* temp_name_ok: at most TEMP_MAX */
	t->st = *st;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

static unsigned common_hex(const struct entry *a, const struct entry *b)
{
	unsigned i = 0;
	while (i < KEY_HEX && a->name[KEY_OFF + i] == b->name[KEY_OFF + i])
		i++;
	return i;
}

/* The folder and what is in it, each template checked.  0 (a missing
 * folder is an empty one: c->dfd -1), or KBOX_EXIT_FAILURE with the line
 * written. */
static int cache_load(struct cache *c, const char *cmd)
{
	memset(c, 0, sizeof *c);
	c->dfd = -1;
	char err[512];
	if (template_dir(c->dir, sizeof c->dir, false, err, sizeof err) < 0)
		return cli_die("snapshot %s: %s", cmd, err);
	int dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		if (errno == ENOENT)
			return 0;
		return cli_die("snapshot %s: the templates' folder %s: %s", cmd, c->dir,
			       strerror(errno));
	}
	c->dfd = dfd;
	struct stat st;
	if (fstat(dfd, &st) < 0)
		return cli_die("snapshot %s: %s: %s", cmd, c->dir, strerror(errno));
	if (st.st_uid != geteuid() || (st.st_mode & 077))
		return cli_die("snapshot %s: the templates' folder %s is not private to this user "
			       "(owner %u, mode %03o; want %u, 0700): kbox run does not use it either",
			       cmd, c->dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777),
			       (unsigned)geteuid());
	int lfd = dup(dfd);
	DIR *d = lfd < 0 ? NULL : fdopendir(lfd);
	if (!d) {
		int e = errno;
		if (lfd >= 0)
			close(lfd);
		return cli_die("snapshot %s: cannot read %s: %s", cmd, c->dir, strerror(e));
	}
	int rc = 0;
	struct dirent *de;
	errno = 0;
	while (rc == 0 && (de = readdir(d))) {
		int tpl = template_name_ok(de->d_name), tmp = !tpl && temp_name_ok(de->d_name);
		if (!tpl && !tmp)
			continue;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone meanwhile */
		if (tpl)
			rc = add_entry(c, de->d_name, &st);
		else if (S_ISREG(st.st_mode))
			rc = add_temp(c, de->d_name, &st);
		errno = 0;
	}
	int e = rc < 0 ? -rc : errno;
	closedir(d);
	if (e)
		return cli_die("snapshot %s: cannot read %s: %s", cmd, c->dir, strerror(e));
	if (c->n)
		qsort(c->e, c->n, sizeof *c->e, by_name);
	for (size_t i = 0; i < c->n; i++) {
		unsigned s = SHORT_HEX;
		if (i > 0 && common_hex(&c->e[i - 1], &c->e[i]) + 1 > s)
			s = common_hex(&c->e[i - 1], &c->e[i]) + 1;
		if (i + 1 < c->n && common_hex(&c->e[i], &c->e[i + 1]) + 1 > s)
			s = common_hex(&c->e[i], &c->e[i + 1]) + 1;
		c->e[i].short_len = s > KEY_HEX ? KEY_HEX : s;
		check_entry(c, &c->e[i]);
	}
	return 0;
}

static void fmt_time(const struct timespec *t, char *out, size_t len)
{
	struct tm tm;
	time_t s = t->tv_sec;
	if (!localtime_r(&s, &tm) || strftime(out, len, "%Y-%m-%d %H:%M", &tm) == 0)
		snprintf(out, len, "?");
}

static uint64_t disk_bytes(const struct stat *st) { return (uint64_t)st->st_blocks * 512; }

static int ls_main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (cli_is_help(argv[i])) {
			fputs(help_ls, stdout);
			return 0;
		}
		return cli_die("snapshot ls: unknown argument '%s' (see 'kbox snapshot ls --help')",
			       argv[i]);
	}
	struct cache c;
	if (cache_load(&c, "ls")) {
		cache_free(&c);
		return KBOX_EXIT_FAILURE;
	}
	if (c.n == 0) {
		printf("no templates in %s\n", c.dir);
		cache_free(&c);
		return 0;
	}
	int w = SHORT_HEX;
	for (size_t i = 0; i < c.n; i++)
		if ((int)c.e[i].short_len > w)
			w = (int)c.e[i].short_len;
	printf("%-*s  %4s  %7s  %7s  %7s  %-16s  %s\n", w, "NAME", "CPUS", "MEMORY", "SIZE",
	       "ON DISK", "MADE", "LAST USED");
	uint64_t size = 0, disk = 0;
	for (size_t i = 0; i < c.n; i++) {
		const struct entry *e = &c.e[i];
		char cpus[16] = "-", mem[32] = "-", sz[32], dk[32], made[32], used[32];
		if (e->state == ST_OK) {
			snprintf(cpus, sizeof cpus, "%u", e->ncpus);
			cli_human_bytes(e->ram, mem, sizeof mem);
		}
		cli_human_bytes((uint64_t)e->st.st_size, sz, sizeof sz);
		cli_human_bytes(disk_bytes(&e->st), dk, sizeof dk);
		fmt_time(&e->st.st_mtim, made, sizeof made);
		fmt_time(&e->st.st_atim, used, sizeof used);
		printf("%-*.*s  %4s  %7s  %7s  %7s  %-16s  %s%s%s\n", w, (int)e->short_len,
		       e->name + KEY_OFF, cpus, mem, sz, dk, made, used,
		       e->state == ST_OK ? "" : e->state == ST_DAMAGED ? "  damaged: "
					    : e->state == ST_UNREADABLE ? "  cannot check: "
									  : "  not a template: ",
		       e->state == ST_OK ? "" : e->why);
		if (S_ISREG(e->st.st_mode)) {
			size += (uint64_t)e->st.st_size;
			disk += disk_bytes(&e->st);
		}
	}
	char sz[32], dk[32];
	cli_human_bytes(size, sz, sizeof sz);
	cli_human_bytes(disk, dk, sizeof dk);
	printf("%zu template%s in %s: %s, %s on disk\n", c.n, c.n == 1 ? "" : "s", c.dir, sz, dk);
	if (c.nt)
		printf("%zu unfinished write%s ('kbox snapshot prune' removes one untouched for "
		       "%d minutes)\n", c.nt, c.nt == 1 ? "" : "s", STALE_TEMP_SECONDS / 60);
	cache_free(&c);
	return 0;
}

/* The hex digits arg gives for a key into hex (lower case): from a file
 * name, a key or a prefix ("t-" before it allowed).  Their count, or 0 if
 * arg is none of these. */
static size_t arg_hex(const char *arg, char hex[KEY_HEX + 1])
{
	if (template_name_ok(arg)) {
		memcpy(hex, arg + KEY_OFF, KEY_HEX);
		hex[KEY_HEX] = 0;
		return KEY_HEX;
	}
	if (strncmp(arg, TEMPLATE_PREFIX, KEY_OFF) == 0)
		arg += KEY_OFF;
	size_t n = strlen(arg);
	if (n < MIN_PREFIX || n > KEY_HEX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!isxdigit((unsigned char)arg[i]))
			return 0;
		hex[i] = (char)tolower((unsigned char)arg[i]);
	}
	hex[n] = 0;
	return n;
}

/* The one template arg names: its index, or -1 with the line written. */
static long resolve(const struct cache *c, const char *arg)
{
	char hex[KEY_HEX + 1];
	size_t n = arg_hex(arg, hex);
	if (n == 0) {
		cli_die("snapshot rm: '%s' does not name a template (t-KEY.snap, its key, or at "
			"least %d hex digits it starts with): nothing removed for it",
			arg, MIN_PREFIX);
		return -1;
	}
	long found = -1;
	size_t matches = 0;
	char some[3 * (KEY_HEX + 2) + 8] = "";
	for (size_t i = 0; i < c->n; i++) {
		if (strncmp(c->e[i].name + KEY_OFF, hex, n) != 0)
			continue;
		if (matches < 3) {
			size_t l = strlen(some);
			snprintf(some + l, sizeof some - l, "%s%.*s", matches ? ", " : "",
				 (int)c->e[i].short_len, c->e[i].name + KEY_OFF);
		}
		matches++;
		found = (long)i;
	}
	if (matches == 0) {
		cli_die("snapshot rm: no template '%s' in %s", arg, c->dir);
		return -1;
	}
	if (matches > 1) {
		cli_die("snapshot rm: '%s' is ambiguous: %zu templates start with it (%s%s): "
			"nothing removed for it", arg, matches, some, matches > 3 ? ", ..." : "");
		return -1;
	}
	return found;
}

/* Remove name from the folder if it is still the regular file st says
 * (a run may have saved a new template under the name meanwhile). */
static int remove_file(const struct cache *c, const char *name, const struct stat *st,
		       const char *cmd)
{
	struct stat now;
	if (fstatat(c->dfd, name, &now, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			return 0; /* someone else removed it */
		return cli_die("snapshot %s: %s/%s: %s", cmd, c->dir, name, strerror(errno));
	}
	if (!S_ISREG(now.st_mode) || now.st_ino != st->st_ino || now.st_dev != st->st_dev)
		return cli_die("snapshot %s: %s/%s changed meanwhile: not removed", cmd, c->dir,
			       name);
	if (unlinkat(c->dfd, name, 0) < 0 && errno != ENOENT)
		return cli_die("snapshot %s: cannot remove %s/%s: %s", cmd, c->dir, name,
			       strerror(errno));
	return 0;
}

static int rm_main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (cli_is_help(argv[i])) {
			fputs(help_rm, stdout);
			return 0;
		}
	if (argc < 2)
		return cli_die("snapshot rm: which template? kbox snapshot rm NAME|PREFIX... "
			       "('kbox snapshot ls' lists them)");
	struct cache c;
	if (cache_load(&c, "rm")) {
		cache_free(&c);
		return KBOX_EXIT_FAILURE;
	}
	int rc = 0;
	for (int i = 1; i < argc; i++) {
		long k = resolve(&c, argv[i]);
		if (k < 0) {
			rc = KBOX_EXIT_FAILURE;
			continue;
		}
		struct entry *e = &c.e[k];
		if (e->removed)
			continue; /* named twice */
		if (!S_ISREG(e->st.st_mode)) {
			rc = cli_die("snapshot rm: %s/%s is %s, not a template: not removed", c.dir,
				     e->name, e->why);
			continue;
		}
		if (remove_file(&c, e->name, &e->st, "rm")) {
			rc = KBOX_EXIT_FAILURE;
			continue;
		}
		e->removed = true;
		printf("removed %s\n", e->name);
	}
	cache_free(&c);
	return rc;
}

static int parse_days(const char *s, long *days)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > 36500)
		return -1;
	*days = v;
	return 0;
}

static int prune_main(int argc, char **argv)
{
	bool all = false;
	long days = -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (cli_is_help(a)) {
			fputs(help_prune, stdout);
			return 0;
		}
		if (strcmp(a, "--all") == 0) {
			all = true;
		} else if (strcmp(a, "--unused-for") == 0 || strncmp(a, "--unused-for=", 13) == 0) {
			const char *v = a[12] == '=' ? a + 13 : i + 1 < argc ? argv[++i] : NULL;
			if (!v || parse_days(v, &days) < 0)
				return cli_die("snapshot prune: --unused-for takes a number of days "
					       "(0 to 36500), not '%s'", v ? v : "");
		} else {
			return cli_die("snapshot prune: unknown argument '%s' (usage: kbox snapshot "
				       "prune [--all] [--unused-for DAYS])", a);
		}
	}
	struct cache c;
	if (cache_load(&c, "prune")) {
		cache_free(&c);
		return KBOX_EXIT_FAILURE;
	}
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	int rc = 0;
	size_t count = 0;
	uint64_t freed = 0;
	for (size_t i = 0; i < c.n; i++) {
		struct entry *e = &c.e[i];
		char why[600], when[32];
		if (e->state == ST_NOT_FILE)
			continue;
		if (e->state == ST_UNREADABLE) {
			fprintf(stderr, "kbox: snapshot prune: kept %s: cannot check it (%s)\n",
				e->name, e->why);
			continue;
		}
		fmt_time(&e->st.st_atim, when, sizeof when);
		if (e->state == ST_DAMAGED)
			snprintf(why, sizeof why, "damaged: %s", e->why);
		else if (all)
			snprintf(why, sizeof why, "--all");
		else if (days >= 0 && now.tv_sec - e->st.st_atim.tv_sec >= days * 86400L)
			snprintf(why, sizeof why, "last used %s", when);
		else
			continue;
		if (remove_file(&c, e->name, &e->st, "prune")) {
			rc = KBOX_EXIT_FAILURE;
			continue;
		}
		char dk[32];
		cli_human_bytes(disk_bytes(&e->st), dk, sizeof dk);
		printf("removed %.*s  %s  (%s)\n", (int)e->short_len, e->name + KEY_OFF, dk, why);
		count++;
		freed += disk_bytes(&e->st);
	}
	for (size_t i = 0; i < c.nt; i++) {
		struct temp *t = &c.t[i];
		if (now.tv_sec - t->st.st_mtim.tv_sec < STALE_TEMP_SECONDS)
			continue;
		if (remove_file(&c, t->name, &t->st, "prune")) {
			rc = KBOX_EXIT_FAILURE;
			continue;
		}
		char dk[32], when[32];
		cli_human_bytes(disk_bytes(&t->st), dk, sizeof dk);
		fmt_time(&t->st.st_mtim, when, sizeof when);
		printf("removed %s  %s  (a write that did not finish, %s)\n", t->name, dk, when);
		count++;
		freed += disk_bytes(&t->st);
	}
	char fr[32];
	cli_human_bytes(freed, fr, sizeof fr);
	if (count)
		printf("%zu file%s removed, %s freed on disk\n", count, count == 1 ? "" : "s", fr);
	else
		printf("nothing to remove in %s\n", c.dir);
	cache_free(&c);
	return rc;
}

int snapshot_main(int argc, char **argv)
{
	int rc = cli_group_help(argc, argv, help_main);
	if (rc >= 0)
		return rc;
	const char *c = argv[1];
	if (strcmp(c, "ls") == 0 || strcmp(c, "list") == 0)
		return ls_main(argc - 1, argv + 1);
	if (strcmp(c, "rm") == 0 || strcmp(c, "remove") == 0)
		return rm_main(argc - 1, argv + 1);
	if (strcmp(c, "prune") == 0)
		return prune_main(argc - 1, argv + 1);
	return cli_group_unknown("snapshot", c);
}
