#include "guest-init/senv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HOSTS_MAX (1u << 20)
#define SENV_MAX_VARS 1024u
#define BUNDLE_MAX (8u << 20)

static char *env_blob;
static char **base_env;
static size_t base_n;
static char *ca_pem;
static size_t ca_len;
static char *hostname;

/* Read a whole regular file of at most max bytes; NUL-terminated copy. */
static int slurp(const char *path, size_t max, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		close(fd);
		return -EINVAL;
	}
	char *b = malloc((size_t)st.st_size + 1);
	if (!b) {
		close(fd);
		return -ENOMEM;
	}
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	b[got] = '\0';
	*out = b;
	*len = got;
	return 0;
}

static bool valid_entry(const char *e)
{
	const char *eq = strchr(e, '=');
	return eq && eq != e;
}

/* A NUL-terminated copy of b[0, n), or NULL. */
static char *copy(const char *b, size_t n)
{
	char *c = malloc(n + 1);
	if (c) {
		memcpy(c, b, n);
		c[n] = '\0';
	}
	return c;
}

void senv_take(const char *env, size_t env_len, const char *ca, size_t ca_len_in, const char *host,
	       size_t host_len)
{
	if (env_len && (env_blob = copy(env, env_len))) {
		base_env = calloc(SENV_MAX_VARS, sizeof *base_env);
		/* Entries are NUL-separated (proto/runcfg.c checked them);
		 * a malformed one would be skipped rather than trusted. */
		for (size_t off = 0; base_env && off < env_len && base_n < SENV_MAX_VARS;) {
			char *e = env_blob + off;
			size_t l = strlen(e);
			if (valid_entry(e))
				base_env[base_n++] = e;
			off += l + 1;
		}
	}
	if (ca_len_in && (ca_pem = copy(ca, ca_len_in)))
		ca_len = ca_len_in;
	if (host_len && host_len <= 64 && memchr(host, '\0', host_len) == NULL)
		hostname = copy(host, host_len);
}

static int mkdir_p(const char *dir)
{
	char p[256];
	if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
		return -ENAMETOOLONG;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int write_file(const char *path, const char *a, size_t alen, const char *b, size_t blen)
{
	char tmp[256];
	snprintf(tmp, sizeof tmp, "%s.kbox-new", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	const char *parts[2] = { a, b };
	size_t lens[2] = { alen, blen };
	for (int i = 0; i < 2; i++) {
		for (size_t off = 0; off < lens[i];) {
			ssize_t w = write(fd, parts[i] + off, lens[i] - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				int e = errno ? errno : EIO;
				close(fd);
				unlink(tmp);
				return -e;
			}
			off += (size_t)w;
		}
	}
	if (close(fd) < 0 || rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		return -e;
	}
	return 0;
}

int senv_install_ca(void)
{
	if (!ca_pem)
		return 0;
	int rc = mkdir_p(SENV_CA_DIR);
	if (!rc)
		rc = write_file(SENV_CA_DIR "/ca.pem", ca_pem, ca_len, "", 0);
	if (rc)
		return rc;
	/* The system bundle keeps the image's own roots and gains ours, so
	 * programs that read only the default path trust kbox's leaves. */
	char *old = NULL;
	size_t old_len = 0;
	if (slurp(SENV_BUNDLE, BUNDLE_MAX, &old, &old_len) < 0)
		old = NULL;
	rc = mkdir_p(SENV_BUNDLE_DIR);
	if (!rc) {
		bool nl = old_len > 0 && old[old_len - 1] != '\n';
		char *joined = malloc(old_len + 1 + ca_len);
		if (!joined) {
			rc = -ENOMEM;
		} else {
			if (old_len)
				memcpy(joined, old, old_len);
			if (nl)
				joined[old_len] = '\n';
			memcpy(joined + old_len + nl, ca_pem, ca_len);
			rc = write_file(SENV_BUNDLE, joined, old_len + nl + ca_len, "", 0);
			free(joined);
		}
	}
	free(old);
	return rc;
}

/* The host name to the kernel and its "127.0.1.1 NAME" line to
 * /etc/hosts; with drop_old, the lines an earlier name left (127.0.1.1)
 * go first. */
static int put_hostname(bool drop_old)
{
	if (!hostname)
		return 0;
	if (sethostname(hostname, strlen(hostname)) < 0)
		return -errno;
	/* An image's own /etc/hosts keeps its lines; the initramfs has
	 * none, so it gets localhost too. */
	static const char base[] = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
	char *old = NULL;
	size_t old_len = 0;
	if (slurp("/etc/hosts", HOSTS_MAX, &old, &old_len) < 0)
		old = NULL;
	size_t keep = old_len;
	if (old && drop_old) {
		keep = 0;
		for (size_t at = 0; at < old_len;) {
			const char *nl = memchr(old + at, '\n', old_len - at);
			size_t l = nl ? (size_t)(nl - (old + at)) + 1 : old_len - at;
			if (!(l >= 10 && memcmp(old + at, "127.0.1.1\t", 10) == 0)) {
				memmove(old + keep, old + at, l);
				keep += l;
			}
			at += l;
		}
	}
	char line[96];
	int n = snprintf(line, sizeof line, "%s127.0.1.1\t%s\n",
			 keep && old[keep - 1] != '\n' ? "\n" : "", hostname);
	int rc = mkdir_p("/etc");
	if (!rc)
		rc = write_file("/etc/hosts", old ? old : base, old ? keep : sizeof base - 1, line,
				(size_t)n);
	free(old);
	return rc;
}

int senv_set_hostname(void)
{
	return put_hostname(false);
}

int senv_rename_host(const char *host, size_t host_len)
{
	if (!host_len || host_len > 64 || memchr(host, '\0', host_len))
		return -EINVAL;
	char *h = copy(host, host_len);
	if (!h)
		return -ENOMEM;
	free(hostname);
	hostname = h;
	return put_hostname(true);
}

static size_t name_len(const char *e)
{
	const char *eq = strchr(e, '=');
	return eq ? (size_t)(eq - e) : strlen(e);
}

char **senv_merge(char *const *req, size_t n, size_t extra)
{
	char **out = calloc(base_n + n + extra + 1, sizeof *out);
	if (!out)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < base_n; i++) {
		size_t nl = name_len(base_env[i]);
		bool overridden = false;
		for (size_t j = 0; j < n && !overridden; j++)
			overridden = name_len(req[j]) == nl && strncmp(req[j], base_env[i], nl) == 0;
		if (!overridden)
			out[k++] = base_env[i];
	}
	for (size_t j = 0; j < n; j++)
		out[k++] = req[j];
	return out;
}
