/* kbox's own files against the shared folders; see hostfiles.h. */
#include "vmm/sandbox/hostfiles.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/errbuf.h"

#define MAX_LINKS 40 /* as the kernel's path walk */

int hostfiles_root_of(const char *path, struct hostfiles_root *root)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return -errno;
	root->dev = st.st_dev;
	root->ino = st.st_ino;
	return 0;
}

uint32_t hostfiles_holders(const char *real, const struct hostfiles_root *roots, size_t n)
{
	char p[PATH_MAX];
	uint32_t bits = 0;
	if (snprintf(p, sizeof p, "%s", real) >= (int)sizeof p || p[0] != '/')
		return 0;
	for (;;) {
		struct stat st;
		if (stat(p, &st) == 0)
			for (size_t i = 0; i < n && i < HOSTFILES_MAX_ROOTS; i++)
				if (st.st_dev == roots[i].dev && st.st_ino == roots[i].ino)
					bits |= 1u << i;
		char *slash = strrchr(p, '/');
		if (slash == p) {
			if (!p[1])
				break;
			p[1] = '\0';
		} else {
			*slash = '\0';
		}
	}
	return bits;
}

/* Record name (one component, len bytes) unless it is empty, "." or
 * "..", already there, or there is no room left. */
static void add_name(struct hostfiles_walk *w, const char *name, size_t len)
{
	if (len == 0 || len > NAME_MAX || (len == 1 && name[0] == '.') ||
	    (len == 2 && name[0] == '.' && name[1] == '.'))
		return;
	for (size_t i = 0; i < w->n_names; i++)
		if (strlen(w->names[i]) == len && memcmp(w->names[i], name, len) == 0)
			return;
	if (w->n_names == HOSTFILES_MAX_NAMES)
		return;
	memcpy(w->names[w->n_names], name, len);
	w->names[w->n_names++][len] = '\0';
}

/* The last component of path: *len bytes at the returned pointer
 * (trailing slashes ignored). */
static const char *last_name(const char *path, size_t *len)
{
	size_t end = strlen(path);
	while (end > 1 && path[end - 1] == '/')
		end--;
	size_t start = end;
	while (start > 0 && path[start - 1] != '/')
		start--;
	*len = end - start;
	return path + start;
}

/* cur = cur + "/" + name (name len bytes), or -ENAMETOOLONG. */
static int join(char *out, size_t cap, const char *cur, const char *name, size_t len)
{
	int n = snprintf(out, cap, "%s%s%.*s", cur, strcmp(cur, "/") ? "/" : "", (int)len, name);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int hostfiles_walk(const char *path, const struct hostfiles_root *roots, size_t n, struct hostfiles_walk *w)
{
	memset(w, 0, sizeof *w);
	if (!path || !*path || n > HOSTFILES_MAX_ROOTS)
		return -EINVAL;
	char cur[PATH_MAX], cand[PATH_MAX];
	/* What is left to resolve; a link's target is spliced in front. */
	char rest[2 * PATH_MAX], tmp[2 * PATH_MAX];
	if (snprintf(rest, sizeof rest, "%s", path) >= (int)sizeof rest)
		return -ENAMETOOLONG;
	if (path[0] == '/')
		snprintf(cur, sizeof cur, "/");
	else if (!getcwd(cur, sizeof cur))
		return -errno;
	size_t nl;
	const char *name = last_name(path, &nl);
	add_name(w, name, nl);
	w->crossed |= hostfiles_holders(cur, roots, n);
	unsigned links = 0;
	size_t at = 0;
	for (;;) {
		while (rest[at] == '/')
			at++;
		if (!rest[at]) {
			/* The path named a folder ("/", "a/.."): cur is it. */
			snprintf(w->real, sizeof w->real, "%s", cur);
			if (stat(cur, &w->st) == 0)
				w->exists = true;
			w->crossed |= hostfiles_holders(cur, roots, n);
			return 0;
		}
		const char *comp = rest + at;
		size_t len = strcspn(comp, "/");
		size_t next = at + len;
		while (rest[next] == '/')
			next++;
		bool last = !rest[next];
		at = next;
		if (len == 1 && comp[0] == '.')
			continue;
		if (len == 2 && comp[0] == '.' && comp[1] == '.') {
			char *slash = strrchr(cur, '/');
			if (slash == cur)
				cur[1] = '\0';
			else
				*slash = '\0';
			w->crossed |= hostfiles_holders(cur, roots, n);
			continue;
		}
		int rc = join(cand, sizeof cand, cur, comp, len);
		if (rc)
			return rc;
		struct stat st;
		if (lstat(cand, &st) < 0) {
			if (errno != ENOENT)
				return -errno;
			/* Created here (or, for a missing folder, below
			 * here) when it is created at all. */
			if (snprintf(w->real, sizeof w->real, "%s%s%s", cand, last ? "" : "/",
				     last ? "" : rest + at) >= (int)sizeof w->real)
				return -ENAMETOOLONG;
			return 0;
		}
		if (S_ISLNK(st.st_mode)) {
			if (++links > MAX_LINKS)
				return -ELOOP;
			char target[PATH_MAX];
			ssize_t tl = readlink(cand, target, sizeof target - 1);
			if (tl < 0)
				return -errno;
			if (tl == 0)
				return -ENOENT;
			target[tl] = '\0';
			if (last) {
				name = last_name(target, &nl);
				add_name(w, name, nl);
			}
			if (snprintf(tmp, sizeof tmp, "%s%s%s", target, last ? "" : "/",
				     rest + at) >= (int)sizeof tmp)
				return -ENAMETOOLONG;
			memcpy(rest, tmp, strlen(tmp) + 1);
			at = 0;
			if (target[0] == '/') {
				snprintf(cur, sizeof cur, "/");
				w->crossed |= hostfiles_holders(cur, roots, n);
			}
			continue;
		}
		if (!last) {
			if (!S_ISDIR(st.st_mode))
				return -ENOTDIR;
			memcpy(cur, cand, strlen(cand) + 1);
			w->crossed |= hostfiles_holders(cur, roots, n);
			continue;
		}
		w->exists = true;
		w->st = st;
		memcpy(w->real, cand, strlen(cand) + 1);
		if (S_ISDIR(st.st_mode))
			w->crossed |= hostfiles_holders(cand, roots, n);
		return 0;
	}
}

int hostfiles_check_folders(const struct hostfiles_folder *f, size_t nf, const struct hostfiles_share *s, size_t ns,
		     const char *image_store, char *err, size_t errlen)
{
	struct hostfiles_root roots[HOSTFILES_MAX_ROOTS], store;
	bool have_store = image_store && hostfiles_root_of(image_store, &store) == 0;
	if (ns > HOSTFILES_MAX_ROOTS)
		return -EINVAL;
	for (size_t i = 0; i < ns; i++) {
		int rc = hostfiles_root_of(s[i].host, &roots[i]);
		if (rc < 0)
			return errbuf_fail(err, errlen, rc, "shared folder %s: %s", s[i].host,
				       strerror(-rc));
	}
	for (size_t k = 0; k < nf; k++) {
		struct hostfiles_walk w;
		if (!f[k].path || hostfiles_walk(f[k].path, roots, ns, &w) < 0)
			continue; /* kbox cannot reach it either */
		for (size_t i = 0; i < ns; i++)
			if (w.crossed & (1u << i))
				return errbuf_fail(err, errlen, -EPERM,
					       "%s %s is inside the shared folder %s (%s in the "
					       "guest), or reached through it: the guest could read "
					       "or rewrite it; share a folder that does not hold it, "
					       "or move it (docs/security.md)",
					       f[k].what, f[k].path, s[i].host, s[i].guest);
		if (!w.exists || !S_ISDIR(w.st.st_mode))
			continue;
		struct hostfiles_root fr = { w.st.st_dev, w.st.st_ino };
		for (size_t i = 0; i < ns; i++) {
			char *real = realpath(s[i].host, NULL);
			if (!real)
				return errbuf_fail(err, errlen, -errno, "shared folder %s: %s", s[i].host,
					       strerror(errno));
			bool inside = hostfiles_holders(real, &fr, 1) != 0;
			/* An image's root folder lives in the store, and the
			 * guest gets it read-only. */
			if (inside && s[i].image && have_store && hostfiles_holders(real, &store, 1))
				inside = false;
			free(real);
			if (inside)
				return errbuf_fail(err, errlen, -EPERM,
					       "the shared folder %s (%s in the guest) is inside %s "
					       "%s: the guest could read or rewrite kbox's files "
					       "there; share another folder",
					       s[i].host, s[i].guest, f[k].what, f[k].path);
		}
	}
	return 0;
}
