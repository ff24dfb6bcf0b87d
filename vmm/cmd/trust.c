#include "vmm/cmd/trust.h"

#include <bearssl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/datadir.h"
#include "lib/errbuf.h"
#include "lib/fileio.h"
#include "lib/secenv.h"
#include "vmm/cli.h"
#include "vmm/sandbox/config.h"

#define STORE_MAX_BYTES (4u << 20)

int trust_store_path(char *buf, size_t len)
{
	return datadir_path("KBOX_TRUST_FILE", "trusted", buf, len);
}

/* Feed the file at path to h, preceded by a tag and followed by its length,
 * so that no two (config, secrets) pairs give the same stream. */
static int hash_file(br_sha256_context *h, const char *tag, const char *path, bool missing_ok)
{
	br_sha256_update(h, tag, strlen(tag) + 1);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (missing_ok && e == ENOENT) {
			br_sha256_update(h, "absent", 7);
			return 0;
		}
		return -e;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	unsigned char buf[16384];
	unsigned long long total = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			return -e;
		}
		if (n == 0)
			break;
		br_sha256_update(h, buf, (size_t)n);
		total += (unsigned long long)n;
	}
	close(fd);
	char len[32];
	int k = snprintf(len, sizeof len, "\n%llu", total);
	br_sha256_update(h, len, (size_t)k + 1);
	return 0;
}

/* Whether path lies in dir (both absolute, canonical). */
static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	if (n == 1)
		return path[0] == '/';
	return strncmp(path, dir, n) == 0 && path[n] == '/';
}

/* The real path of path's folder joined with its last component, which
 * is not followed: where the file is, even when it is a symlink or does
 * not exist yet (its folder must).  A last component "." or ".." is
 * resolved whole. */
static int located(const char *path, char out[PATH_MAX])
{
	char dir[PATH_MAX], rdir[PATH_MAX];
	if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
		return -ENAMETOOLONG;
	char *slash = strrchr(dir, '/');
	const char *base = slash ? path + (slash - dir) + 1 : path;
	if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
		return realpath(path, out) ? 0 : -errno;
	if (slash) {
		*slash = '\0';
		if (slash == dir)
			snprintf(dir, sizeof dir, "/");
	} else {
		snprintf(dir, sizeof dir, ".");
	}
	if (!realpath(dir, rdir))
		return -errno;
	if (snprintf(out, PATH_MAX, "%s/%s", strcmp(rdir, "/") ? rdir : "", base) >= PATH_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/* realpath, also for a file that does not exist yet (its folder must). */
static int canonical(const char *path, char out[PATH_MAX])
{
	if (realpath(path, out))
		return 0;
	if (errno != ENOENT)
		return -errno;
	return located(path, out);
}

/* The folder of path, an absolute path to a file. */
static void folder_of(const char *path, char dir[PATH_MAX])
{
	snprintf(dir, PATH_MAX, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = '\0';
	else
		snprintf(dir, PATH_MAX, "/");
}

int trust_digest(const char *conf_real, const char *secrets, char hex[TRUST_HEX_LEN + 1],
		 char *err, size_t errlen)
{
	br_sha256_context h;
	br_sha256_init(&h);
	br_sha256_update(&h, "kbox-trust-v1", 14);
	int rc = hash_file(&h, "config", conf_real, false);
	if (rc) {
		errbuf_say(err, errlen, "%s: cannot read: %s", conf_real, strerror(-rc));
		return rc;
	}
	if (secrets) {
		char dir[PATH_MAX], sreal[PATH_MAX];
		folder_of(conf_real, dir);
		const char *sp = canonical(secrets, sreal) == 0 ? sreal : NULL;
		if (sp && under(sp, dir)) {
			br_sha256_update(&h, sp, strlen(sp) + 1);
			rc = hash_file(&h, "secrets", sp, true);
			if (rc) {
				errbuf_say(err, errlen, "%s: cannot read: %s", sp, strerror(-rc));
				return rc;
			}
		}
	}
	/* secrets.env next to the file feeds its ${VAR}s: mount sources,
	 * rules, name servers.  Nothing stops a repository from carrying
	 * one, so a change to it (a pull) is a change to the sandbox. */
	char env[PATH_MAX + 16];
	if (secenv_path(env, sizeof env, conf_real) < 0) {
		errbuf_say(err, errlen, "%s: path too long", conf_real);
		return -ENAMETOOLONG;
	}
	rc = hash_file(&h, "secrets.env", env, true);
	if (rc) {
		errbuf_say(err, errlen, "%s: cannot read: %s", env, strerror(-rc));
		return rc;
	}
	unsigned char out[br_sha256_SIZE];
	br_sha256_out(&h, out);
	for (size_t i = 0; i < sizeof out; i++)
		snprintf(hex + 2 * i, 3, "%02x", out[i]);
	return 0;
}

/* The store's bytes (NUL-terminated) in *out, NULL and 0 when there is no
 * store yet. */
static int read_store(const char *store, char **out)
{
	*out = NULL;
	size_t len;
	int rc = fileio_slurp(store, 0, STORE_MAX_BYTES, out, &len, NULL, NULL);
	if (rc == -ENOENT)
		return 0;
	return rc == -EISDIR ? -EINVAL : rc;
}

/* If line (len bytes, no newline) is "v1 HEX PATH" for path, *hex_out
 * points at its HEX and 1 is returned. */
static int line_is(const char *line, size_t len, const char *path, const char **hex_out)
{
	size_t plen = strlen(path);
	if (len != 3 + TRUST_HEX_LEN + 1 + plen || strncmp(line, "v1 ", 3) != 0 ||
	    line[3 + TRUST_HEX_LEN] != ' ' || memcmp(line + 4 + TRUST_HEX_LEN, path, plen) != 0)
		return 0;
	*hex_out = line + 3;
	return 1;
}

int trust_check(const char *store, const char *conf_real, const char *hex)
{
	char *buf;
	int rc = read_store(store, &buf);
	if (rc || !buf)
		return rc;
	int found = 0;
	for (char *p = buf; *p;) {
		char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		const char *h;
		if (line_is(p, len, conf_real, &h) && memcmp(h, hex, TRUST_HEX_LEN) == 0)
			found = 1;
		p += len + (nl ? 1 : 0);
	}
	free(buf);
	return found;
}

/* mkdir -p of store's directory, new components 0700. */
static int make_parent(const char *store)
{
	char dir[PATH_MAX];
	if (snprintf(dir, sizeof dir, "%s", store) >= (int)sizeof dir)
		return -ENAMETOOLONG;
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	return datadir_mkdirs(dir);
}

int trust_record(const char *store, const char *conf_real, const char *hex, char *err,
		 size_t errlen)
{
	if (conf_real[0] != '/' || strchr(conf_real, '\n')) {
		errbuf_say(err, errlen, "%s: only an absolute path without a newline can be trusted",
		    conf_real);
		return -EINVAL;
	}
	int rc = make_parent(store);
	if (rc) {
		errbuf_say(err, errlen, "%s: cannot create its folder: %s", store, strerror(-rc));
		return rc;
	}
	char lock[PATH_MAX], tmp[PATH_MAX];
	if (snprintf(lock, sizeof lock, "%s.lock", store) >= (int)sizeof lock ||
	    snprintf(tmp, sizeof tmp, "%s.tmp", store) >= (int)sizeof tmp) {
		errbuf_say(err, errlen, "%s: path too long", store);
		return -ENAMETOOLONG;
	}
	/* Neither follows a link: one planted there would send the record
	 * (or an emptied file) elsewhere. */
	int lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lfd < 0 || flock(lfd, LOCK_EX) < 0) {
		rc = -errno;
		errbuf_say(err, errlen, "%s: cannot lock: %s", lock, strerror(-rc));
		if (lfd >= 0)
			close(lfd);
		return rc;
	}
	char *buf = NULL;
	rc = read_store(store, &buf);
	if (rc) {
		errbuf_say(err, errlen, "%s: cannot read: %s", store, strerror(-rc));
		goto out;
	}
	/* The record without conf_real's line, then its new one. */
	char *text = NULL;
	size_t tlen = 0;
	FILE *f = open_memstream(&text, &tlen);
	if (!f) {
		rc = -errno;
		errbuf_say(err, errlen, "%s: cannot write: %s", store, strerror(-rc));
		goto out;
	}
	for (char *p = buf; p && *p;) {
		char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		const char *h;
		if (!line_is(p, len, conf_real, &h) && len)
			fprintf(f, "%.*s\n", (int)len, p);
		p += len + (nl ? 1 : 0);
	}
	if (hex)
		fprintf(f, "v1 %.*s %s\n", TRUST_HEX_LEN, hex, conf_real);
	rc = fclose(f) == 0 && text ? 0 : -ENOMEM;
	if (!rc)
		rc = fileio_write_atomic(AT_FDCWD, store, tmp, text, tlen, 0600);
	free(text);
	if (rc)
		errbuf_say(err, errlen, "%s: cannot write: %s", store, strerror(-rc));
out:
	free(buf);
	close(lfd);
	return rc;
}

/* Text from the file, for the terminal: a quoted YAML value can hold any
 * byte ("\e[2J"), and terminal controls could redraw the question the
 * user is about to answer.  Anything but printable ASCII is shown as \xNN. */
static void put_safe(FILE *f, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch >= 0x20 && ch < 0x7f && ch != '\\')
			fputc(ch, f);
		else
			fprintf(f, "\\x%02x", ch);
	}
}

/* One summary line: LABEL, then VALUE shown safely, then TAIL as is. */
static void line(FILE *f, const char *label, const char *value, const char *tail)
{
	fprintf(f, "  %-8s ", label);
	put_safe(f, value, strlen(value));
	fputs(tail, f);
}

/* What the file asks for, for the question on a terminal. */
static void summary(FILE *f, const char *real, const struct kbox_config *c)
{
	char dir[PATH_MAX];
	folder_of(real, dir);
	line(f, "mount", dir, " -> /workspace (read-write, unless a mount below is there)\n");
	for (unsigned i = 0; i < c->n_mounts; i++) {
		line(f, "mount", c->mounts[i].source, " -> ");
		put_safe(f, c->mounts[i].target, strlen(c->mounts[i].target));
		fputs(c->mounts[i].readonly ? " (read-only)\n" : " (read-write)\n", f);
	}
	for (unsigned i = 0; i < c->n_disks; i++) {
		line(f, "disk", c->disks[i].name, " -> ");
		put_safe(f, c->disks[i].target, strlen(c->disks[i].target));
		fputs(c->disks[i].readonly ? " (read-only)\n" : " (read-write)\n", f);
	}
	if (c->image)
		line(f, "image", c->image, "\n");
	line(f, "network", c->network_policy ? c->network_policy : "public (default)", "");
	for (size_t i = 0; i < c->n_allow; i++) {
		fputs(i ? ", " : "; allow ", f);
		put_safe(f, c->allow[i].s, strlen(c->allow[i].s));
	}
	for (size_t i = 0; i < c->n_hosts; i++) {
		fputs(i ? ", " : "; hosts ", f);
		put_safe(f, c->hosts[i].s, strlen(c->hosts[i].s));
	}
	fputc('\n', f);
	/* Who answers the guest's names, and which upstream certificates kbox
	 * accepts, decide where injected secrets go. */
	for (size_t i = 0; i < c->n_dns; i++)
		line(f, "dns", c->dns[i].s, " (name server kbox asks for the guest)\n");
	if (c->tls_extra_ca)
		line(f, "tls", c->tls_extra_ca, " (CA certificates trusted for upstream servers)\n");
	if (c->tls_intercept)
		line(f, "tls", c->tls_intercept, " (interception scope)\n");
	for (size_t i = 0; i < c->n_tls_bypass; i++)
		line(f, "tls", c->tls_bypass[i].s, " (not intercepted)\n");
	/* kbox appends to this file, which may be any the user can write. */
	if (c->audit_log)
		line(f, "log", c->audit_log, " (network decisions appended)\n");
	if (c->kernel)
		line(f, "kernel", c->kernel, "\n");
	if (c->initrd)
		line(f, "initrd", c->initrd, "\n");
	for (size_t i = 0; i < c->n_ports; i++)
		line(f, "port", c->ports[i].s, "\n");
	if (c->secrets)
		line(f, "secrets", c->secrets, "\n");
	for (size_t i = 0; i < c->n_env; i++) {
		const char *eq = strchr(c->env[i], '=');
		fprintf(f, "  %-8s ", "env");
		put_safe(f, c->env[i], eq ? (size_t)(eq - c->env[i]) : strlen(c->env[i]));
		fputs(" (value not shown)\n", f);
	}
	if (c->argv && c->argv[0])
		line(f, "command", c->argv[0], c->argv[1] ? " ...\n" : "\n");
}

int trust_project(const char *conf, const struct kbox_config *cfg, char *err, size_t errlen)
{
	char real[PATH_MAX], store[PATH_MAX], hex[TRUST_HEX_LEN + 1];
	/* Where the file was found, not where a symlink leads: relative
	 * paths, secrets.env and /workspace all mean that folder, so trust
	 * given to the link's target elsewhere does not carry over. */
	int rc = located(conf, real);
	if (rc) {
		errbuf_say(err, errlen, "%s: %s", conf, strerror(-rc));
		return rc;
	}
	rc = trust_store_path(store, sizeof store);
	if (rc) {
		errbuf_say(err, errlen, "%s: cannot find where trusted files are recorded (set HOME)",
		    conf);
		return rc;
	}
	rc = trust_digest(real, cfg->secrets, hex, err, errlen);
	if (rc)
		return rc;
	rc = trust_check(store, real, hex);
	if (rc < 0) {
		errbuf_say(err, errlen, "%s: cannot read: %s", store, strerror(-rc));
		return rc;
	}
	if (rc == 1)
		return 0;
	const char *why = "it is new, or changed since it was trusted (the file, its secrets file or secrets.env)";
	if (isatty(STDIN_FILENO) && isatty(STDERR_FILENO)) {
		fputs("kbox: ", stderr);
		put_safe(stderr, real, strlen(real));
		fprintf(stderr,
			": %s.\n"
			"A project's kbox.yaml decides what the sandbox can see and reach. It asks for:\n",
			why);
		summary(stderr, real, cfg);
		fprintf(stderr, "Read it first. Trust this file and go on? [y/N] ");
		fflush(stderr);
		char answer[16] = "";
		if (fgets(answer, sizeof answer, stdin) &&
		    (strcmp(answer, "y\n") == 0 || strcmp(answer, "yes\n") == 0 ||
		     strcmp(answer, "Y\n") == 0)) {
			/* The answer is what counts; the record only saves
			 * asking again.  A store that cannot be written (a
			 * read-only home) costs the record, not the run. */
			if (trust_record(store, real, hex, err, errlen) < 0) {
				fprintf(stderr, "kbox: %s; trusted for this run only (kbox will ask "
					"again; KBOX_TRUST_FILE names another place)\n", err);
				if (errlen)
					err[0] = '\0';
			}
			return 0;
		}
	}
	errbuf_say(err, errlen,
	    "%s: not trusted: %s; a project's kbox.yaml chooses mounts, network and secrets, "
	    "so read it, then run 'kbox trust %s' (or use --no-project, or --conf to use it once)",
	    conf, why, conf);
	return -EACCES;
}

static void trust_usage(FILE *f)
{
	fprintf(f,
		"Usage: kbox trust [PATH]            accept a project's kbox.yaml as it is now\n"
		"       kbox trust --remove [PATH]   forget it\n"
		"       kbox trust --list            every trusted file, and whether it changed\n"
		"\n"
		"'kbox run' without --conf uses ./kbox.yaml only once its content is trusted:\n"
		"it came with the project and chooses mounts, network policy, secrets and the\n"
		"host variables that enter the guest.  PATH is the file or its folder\n"
		"(default: ./kbox.yaml).  Trust covers the file's bytes and those of a\n"
		"secrets file inside the same folder; any change needs 'kbox trust' again\n"
		"(on a terminal, 'kbox run' asks instead).  The record lives in\n"
		"$KBOX_TRUST_FILE, else $XDG_DATA_HOME/kbox/trusted, else\n"
		"~/.local/share/kbox/trusted.\n");
}

static int list(const char *store)
{
	char *buf;
	int rc = read_store(store, &buf);
	if (rc) {
		fprintf(stderr, "kbox trust: %s: %s\n", store, strerror(-rc));
		return KBOX_EXIT_FAILURE;
	}
	for (char *p = buf; p && *p;) {
		char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (nl)
			*nl = '\0';
		if (len > 4 + TRUST_HEX_LEN && strncmp(p, "v1 ", 3) == 0) {
			const char *path = p + 4 + TRUST_HEX_LEN;
			struct kbox_config c;
			char e[512], hex[TRUST_HEX_LEN + 1];
			config_init(&c);
			const char *state = "changed";
			if (access(path, F_OK) < 0)
				state = "missing";
			else if (config_load(path, &c, e, sizeof e) == 0 &&
				 trust_digest(path, c.secrets, hex, e, sizeof e) == 0 &&
				 memcmp(hex, p + 3, TRUST_HEX_LEN) == 0)
				state = "trusted";
			config_free(&c);
			printf("%-8s %s\n", state, path);
		}
		p += len + (nl ? 1 : 0);
	}
	free(buf);
	return 0;
}

int trust_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "remove", no_argument, NULL, 'r' },
		{ "list", no_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int remove = 0, do_list = 0, ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (ch) {
		case 'r': remove = 1; break;
		case 'l': do_list = 1; break;
		case 'h': trust_usage(stdout); return 0;
		default: trust_usage(stderr); return KBOX_EXIT_FAILURE;
		}
	}
	if (argc - optind > 1 || (do_list && (remove || argc > optind))) {
		trust_usage(stderr);
		return KBOX_EXIT_FAILURE;
	}
	char store[PATH_MAX], err[1024];
	if (trust_store_path(store, sizeof store) < 0) {
		fprintf(stderr, "kbox trust: cannot find where to record trust (set HOME)\n");
		return KBOX_EXIT_FAILURE;
	}
	if (do_list)
		return list(store);
	char path[PATH_MAX], real[PATH_MAX];
	const char *arg = optind < argc ? argv[optind] : "kbox.yaml";
	struct stat st;
	if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(path, sizeof path, "%s/kbox.yaml", arg);
	else
		snprintf(path, sizeof path, "%s", arg);
	/* Keyed as kbox run finds it (trust_project), and loaded from there
	 * so that its relative paths mean the same. */
	int lr = located(path, real);
	if (lr) {
		int e = -lr;
		if (remove && e == ENOENT && path[0] == '/') {
			snprintf(real, sizeof real, "%s", path);
		} else {
			fprintf(stderr, "kbox trust: %s: %s\n", path, strerror(e));
			return KBOX_EXIT_FAILURE;
		}
	}
	if (remove) {
		if (trust_record(store, real, NULL, err, sizeof err) < 0) {
			fprintf(stderr, "kbox trust: %s\n", err);
			return KBOX_EXIT_FAILURE;
		}
		printf("no longer trusted: %s\n", real);
		return 0;
	}
	/* Loaded first: a file with mistakes is not worth trusting, and the
	 * load says which secrets file it names. */
	struct kbox_config c;
	char hex[TRUST_HEX_LEN + 1];
	config_init(&c);
	int rc = config_load(real, &c, err, sizeof err);
	if (!rc)
		rc = trust_digest(real, c.secrets, hex, err, sizeof err);
	if (!rc)
		rc = trust_record(store, real, hex, err, sizeof err);
	config_free(&c);
	if (rc) {
		fprintf(stderr, "kbox trust: %s\n", err);
		return KBOX_EXIT_FAILURE;
	}
	printf("trusted: %s (sha256 %.12s...)\n", real, hex);
	return 0;
}
