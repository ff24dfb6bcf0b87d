/* JSON-lines audit log; see audit.h. */
#include "netstack/audit.h"

#include "lib/grow.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/errbuf.h"

/* Append to buf[*pos, len), keeping one byte for the NUL. */
static int put(char *buf, size_t len, size_t *pos, const char *s, size_t n)
{
	if (len - *pos <= n)
		return -ENOSPC;
	memcpy(buf + *pos, s, n);
	*pos += n;
	buf[*pos] = '\0';
	return 0;
}

static int puts_(char *buf, size_t len, size_t *pos, const char *s)
{
	return put(buf, len, pos, s, strlen(s));
}

/* A JSON string of at most max bytes of s.  Control characters, DEL and
 * bytes >= 0x80 (guest names need not be UTF-8) become \u00XX, so the
 * output is plain ASCII and always valid JSON.  So do '$' and '`': a
 * shell that ever reads a line (a log misplaced where one is sourced)
 * finds no command substitution in it. */
static int put_str(char *buf, size_t len, size_t *pos, const char *s, size_t max)
{
	int rc = put(buf, len, pos, "\"", 1);
	for (size_t i = 0; rc == 0 && s[i] && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			rc = put(buf, len, pos, esc, 2);
		} else if (c < 0x20 || c >= 0x7f || c == '$' || c == '`') {
			snprintf(esc, sizeof esc, "\\u%04x", c);
			rc = put(buf, len, pos, esc, 6);
		} else {
			rc = put(buf, len, pos, (const char *)&c, 1);
		}
	}
	return rc ? rc : put(buf, len, pos, "\"", 1);
}

int audit_format(const struct audit_event *e, char *buf, size_t len, size_t *n)
{
	size_t pos = 0;
	char tmp[160];
	if (len == 0)
		return -ENOSPC;
	time_t secs = (time_t)(e->time_ms / 1000);
	struct tm tm;
	if (!gmtime_r(&secs, &tm))
		memset(&tm, 0, sizeof tm);
	snprintf(tmp, sizeof tmp, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(e->time_ms % 1000));
	int rc = puts_(buf, len, &pos, "{\"time\":\"");
	rc = rc ? rc : puts_(buf, len, &pos, tmp);
	rc = rc ? rc : puts_(buf, len, &pos, "\",\"proto\":");
	rc = rc ? rc : put_str(buf, len, &pos, e->proto ? e->proto : "", 16);
	if (e->direction) {
		rc = rc ? rc : puts_(buf, len, &pos, ",\"direction\":");
		rc = rc ? rc : put_str(buf, len, &pos, e->direction, 8);
	}
	if (e->dst) {
		char ip[64];
		if (policy_addr_format(e->dst, ip, sizeof ip) < 0)
			snprintf(ip, sizeof ip, "invalid");
		snprintf(tmp, sizeof tmp, e->dst->family == 6 ? "[%s]:%u" : "%s:%u", ip, e->port);
		rc = rc ? rc : puts_(buf, len, &pos, ",\"dst\":");
		rc = rc ? rc : put_str(buf, len, &pos, tmp, sizeof tmp);
	}
	if (e->name) {
		rc = rc ? rc : puts_(buf, len, &pos, ",\"name\":");
		rc = rc ? rc : put_str(buf, len, &pos, e->name, AUDIT_NAME_MAX);
	}
	if (e->close) {
		snprintf(tmp, sizeof tmp, ",\"event\":\"close\",\"bytes_up\":%llu,\"bytes_down\":%llu,\"duration_ms\":%llu",
			 (unsigned long long)e->bytes_up, (unsigned long long)e->bytes_down,
			 (unsigned long long)e->duration_ms);
		rc = rc ? rc : puts_(buf, len, &pos, tmp);
		if (e->error) {
			rc = rc ? rc : puts_(buf, len, &pos, ",\"error\":");
			rc = rc ? rc : put_str(buf, len, &pos, e->error, 32);
		}
	} else if (e->event) {
		rc = rc ? rc : puts_(buf, len, &pos, ",\"event\":");
		rc = rc ? rc : put_str(buf, len, &pos, e->event, 32);
		if (e->secret) {
			rc = rc ? rc : puts_(buf, len, &pos, ",\"secret\":");
			rc = rc ? rc : put_str(buf, len, &pos, e->secret, 64);
		}
		if (e->where) {
			rc = rc ? rc : puts_(buf, len, &pos, ",\"where\":");
			rc = rc ? rc : put_str(buf, len, &pos, e->where, 160);
		}
		if (e->status) {
			snprintf(tmp, sizeof tmp, ",\"status\":%d", e->status);
			rc = rc ? rc : puts_(buf, len, &pos, tmp);
		}
		rc = rc ? rc : puts_(buf, len, &pos, e->allow ? ",\"decision\":\"allow\"" : ",\"decision\":\"deny\"");
		if (e->reason) {
			rc = rc ? rc : puts_(buf, len, &pos, ",\"reason\":");
			rc = rc ? rc : put_str(buf, len, &pos, e->reason, AUDIT_RULE_MAX);
		}
	} else {
		rc = rc ? rc : puts_(buf, len, &pos, e->allow ? ",\"decision\":\"allow\",\"rule\":" : ",\"decision\":\"deny\",\"rule\":");
		rc = rc ? rc : put_str(buf, len, &pos, e->rule ? e->rule : "", AUDIT_RULE_MAX);
	}
	if (e->suppressed) {
		snprintf(tmp, sizeof tmp, ",\"suppressed\":%llu", (unsigned long long)e->suppressed);
		rc = rc ? rc : puts_(buf, len, &pos, tmp);
	}
	rc = rc ? rc : puts_(buf, len, &pos, "}\n");
	if (rc)
		return rc;
	*n = pos;
	return 0;
}

/* The first line audit_format writes for any event: its fixed start, a
 * timestamp ('9': a digit) and a protocol. */
static const char audit_head[] = "{\"time\":\"9999-99-99T99:99:99.999Z\",\"proto\":\"";
static const char learn_head[] = "# A suggested network allowlist, written by kbox run --learn";

bool audit_line_is_ours(const char *s, size_t n)
{
	size_t k = sizeof audit_head - 1;
	if (n <= k || s[n - 1] != '}')
		return false;
	for (size_t i = 0; i < k; i++)
		if (audit_head[i] == '9' ? s[i] < '0' || s[i] > '9' : s[i] != audit_head[i])
			return false;
	/* Plain printable ASCII: what put_str leaves of any string. */
	for (size_t i = k; i < n; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
	return memmem(s, n, ",\"decision\":\"", 13) || memmem(s, n, ",\"event\":\"", 10);
}

/* Whether the regular file open in fd (reopened read-only through path)
 * starts with a line kbox wrote: an audit line, or learn's header.  A
 * file that changed under us (another inode) is not. */
static bool file_is_ours(int fd, const char *path, bool learn)
{
	char buf[AUDIT_LINE_MAX + 1];
	struct stat w, r;
	bool ours = false;
	int rfd = open(path, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (rfd < 0)
		return false;
	if (fstat(fd, &w) == 0 && fstat(rfd, &r) == 0 && w.st_dev == r.st_dev && w.st_ino == r.st_ino) {
		ssize_t n = pread(rfd, buf, sizeof buf, 0);
		char *nl = n > 0 ? memchr(buf, '\n', (size_t)n) : NULL;
		if (nl && learn)
			ours = (size_t)(nl - buf) >= sizeof learn_head - 1 &&
			       memcmp(buf, learn_head, sizeof learn_head - 1) == 0;
		else if (nl)
			ours = audit_line_is_ours(buf, (size_t)(nl - buf));
	}
	close(rfd);
	return ours;
}

/* /dev/stderr and the like: one of kbox's own fds, which its user set up
 * (a terminal, or a file the shell redirected to on purpose). */
static bool fd_alias(const char *path)
{
	static const char *const alias[] = { "/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2",
					     "/proc/self/fd/1", "/proc/self/fd/2" };
	for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
		if (strcmp(path, alias[i]) == 0)
			return true;
	return false;
}

int audit_open_file(const char *path, bool learn, char *err, size_t errlen)
{
	const char *what = learn ? "--learn" : "the audit log (network.audit_log, --audit-log)";
	const char *why = learn ? "kbox would replace it with a YAML allowlist"
				: "kbox appends names the guest chose to it";
	int mode = O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | (learn ? 0 : O_APPEND);
	struct stat st;
	bool linked = false, own_fd = fd_alias(path);
	int fd = open(path, own_fd ? mode & ~O_NOFOLLOW : mode);
	int r = -errno;

	if (fd < 0 && r == -ENOENT && !own_fd)
		fd = open(path, mode | O_CREAT | O_EXCL, 0600);
	else if (fd < 0 && r == -ELOOP) {
		/* A link only to a terminal or a pipe. */
		if (stat(path, &st) < 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
			return errbuf_fail(err, errlen, -ELOOP,
				       "%s: %s is a symbolic link: %s, so it follows none; name the file "
				       "itself", what, path, why);
		fd = open(path, mode & ~O_NOFOLLOW);
		linked = true;
	}
	if (fd < 0 || fstat(fd, &st) < 0) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		return errbuf_fail(err, errlen, r, "%s: cannot write %s: %s", what, path, strerror(-r));
	}
	if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))
		return fd;
	if (linked) { /* it was a device a moment ago */
		errbuf_say(err, errlen, "%s: %s is a symbolic link: %s, so it follows none; name the "
		       "file itself", what, path, why);
		r = -ELOOP;
	} else if (!S_ISREG(st.st_mode)) {
		errbuf_say(err, errlen, "%s: %s is not a regular file: name a file", what, path);
		r = -EINVAL;
	} else if (st.st_mode & 0111) {
		errbuf_say(err, errlen,
		       "%s: %s is executable: %s, so it writes to no file that may be run; "
		       "name a new file (or chmod a-x it)", what, path, why);
		r = -EPERM;
	} else if (st.st_size > 0 && !own_fd && !file_is_ours(fd, path, learn)) {
		errbuf_say(err, errlen,
		       "%s: %s is not empty and was not written by kbox (its first line is not "
		       "%s): %s, so it writes into no other file; name a new file or remove "
		       "this one", what, path, learn ? "a --learn header" : "an audit log line",
		       why);
		r = -EEXIST;
	} else if (learn && ftruncate(fd, 0) < 0) {
		r = -errno;
		errbuf_say(err, errlen, "%s: cannot write %s: %s", what, path, strerror(-r));
	} else {
		return fd;
	}
	close(fd);
	return r;
}

int audit_open(struct audit *a, const char *path, char *err, size_t errlen)
{
	a->fd = audit_open_file(path, false, err, errlen);
	if (a->fd >= 0)
		return 0;
	int r = a->fd;
	a->fd = -1;
	return r;
}

int audit_write(struct audit *a, const struct audit_event *e)
{
	char line[AUDIT_LINE_MAX];
	size_t n;
	if (a->fd < 0)
		return 0;
	int rc = audit_format(e, line, sizeof line, &n);
	if (rc < 0)
		return rc;
	ssize_t w;
	do
		w = write(a->fd, line, n);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		return -errno;
	return (size_t)w == n ? 0 : -EIO;
}

void audit_close(struct audit *a)
{
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
}

void audit_learn_init(struct audit_learn *l)
{
	memset(l, 0, sizeof *l);
}

void audit_learn_free(struct audit_learn *l)
{
	free(l->e);
	audit_learn_init(l);
}

int audit_learn_add(struct audit_learn *l, const char *name, const struct policy_addr *dst, uint16_t port,
		    const struct policy_decision *d)
{
	char target[POLICY_NAME_MAX + 3];
	struct audit_learn_entry *e = NULL;
	bool widen = d->allow || d->why == POLICY_WHY_NO_MATCH;
	size_t i;

	if (d->allow)
		l->allowed++;
	else
		l->denied++;
	if (name) {
		/* Names come from the guest: keep only what a rule can say. */
		if (policy_name_normalize(name, target) < 0 || policy_name_is_numeric(target))
			return 0;
		for (i = 0; target[i]; i++)
			if (!(target[i] == '-' || target[i] == '.' || target[i] == '_' ||
			      (target[i] >= 'a' && target[i] <= 'z') || (target[i] >= '0' && target[i] <= '9')))
				return 0;
	} else if (dst) {
		char ip[64];

		if (policy_addr_format(dst, ip, sizeof ip) < 0)
			return 0;
		snprintf(target, sizeof target, dst->family == 6 ? "[%s]" : "%s", ip);
	} else {
		return 0;
	}
	for (i = 0; i < l->n; i++)
		if (l->e[i].port == port && strcmp(l->e[i].target, target) == 0) {
			e = &l->e[i];
			break;
		}
	if (!e) {
		if (l->n == AUDIT_LEARN_MAX) {
			l->lost++;
			return 0;
		}
		if (grow_array(&l->e, &l->cap, l->n + 1, sizeof *l->e, 64, 0) < 0) {
			l->lost++;
			return -ENOMEM;
		}
		e = &l->e[l->n++];
		memset(e, 0, sizeof *e);
		snprintf(e->target, sizeof e->target, "%s", target);
		e->port = port;
		e->widen = true;
	}
	e->count++;
	if (d->allow)
		e->allowed = true;
	/* One denial by a deny rule, class or the host keeps it out. */
	if (!widen && e->widen) {
		e->widen = false;
		snprintf(e->why, sizeof e->why, "%s", d->rule ? d->rule : "denied");
		for (i = 0; e->why[i]; i++) /* it goes into a YAML comment: one line */
			if ((unsigned char)e->why[i] < 0x20 || e->why[i] == 0x7f)
				e->why[i] = '?';
	}
	return 0;
}

static int learn_cmp(const void *a, const void *b)
{
	const struct audit_learn_entry *x = a, *y = b;
	int c = strcmp(x->target, y->target);

	return c ? c : (int)x->port - (int)y->port;
}

/* Whether target has a connection on some port, making its DNS-only
 * (port 0) entry redundant. */
static bool has_port(const struct audit_learn_entry *e, size_t n, const char *target)
{
	for (size_t i = 0; i < n; i++)
		if (e[i].port != 0 && strcmp(e[i].target, target) == 0)
			return true;
	return false;
}

int audit_learn_format(const struct audit_learn *l, const char *mode, uint64_t now, char **out)
{
	struct audit_learn_entry *e = NULL;
	size_t cap, pos = 0, i, active = 0;
	char *buf;
	time_t t = (time_t)now;
	struct tm tm;
	char when[32];
	int k;

	if (l->n) {
		if (!(e = malloc(l->n * sizeof *e)))
			return -ENOMEM;
		memcpy(e, l->e, l->n * sizeof *e);
		qsort(e, l->n, sizeof *e, learn_cmp);
	}
	cap = 2048 + l->n * (sizeof e->target + sizeof e->why + 64);
	buf = malloc(cap);
	if (!buf) {
		free(e);
		return -ENOMEM;
	}
	for (i = 0; i < l->n; i++)
		active += e[i].widen && !(e[i].port == 0 && has_port(e, l->n, e[i].target));
	if (!gmtime_r(&t, &tm))
		memset(&tm, 0, sizeof tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	/* Every write below fits: cap allows for the longest entry. */
	k = snprintf(buf, cap,
		     "# A suggested network allowlist, written by kbox run --learn at %s.\n"
		     "# It lists every destination the guest tried under policy '%s'\n"
		     "# (%llu decisions: %llu allowed, %llu denied%s).  --learn never widens the\n"
		     "# policy: what was denied stayed denied and is listed so you can decide.\n"
		     "# Names are used wherever the guest's DNS gave one; an address appears only\n"
		     "# when no name was seen.  A name without a port was refused at DNS, so no\n"
		     "# connection (and no port) was ever seen.  Entries a deny rule, a blocked\n"
		     "# address class or the host itself refused are commented out: uncommenting\n"
		     "# one opens it.  Review before use.\n"
		     "network:\n"
		     "  policy: allowlist\n"
		     "  allow:%s\n",
		     when, mode ? mode : "?", (unsigned long long)(l->allowed + l->denied),
		     (unsigned long long)l->allowed, (unsigned long long)l->denied,
		     l->lost ? "; some destinations were not recorded: too many" : "", active ? "" : " []");
	pos = k > 0 ? (size_t)k : 0;
	for (i = 0; i < l->n; i++) {
		char rule[sizeof e->target + 8];

		if (e[i].port == 0 && has_port(e, l->n, e[i].target))
			continue;
		if (e[i].port)
			snprintf(rule, sizeof rule, "%s:%u", e[i].target, e[i].port);
		else
			snprintf(rule, sizeof rule, "%s", e[i].target);
		if (e[i].widen)
			k = snprintf(buf + pos, cap - pos, "    - \"%s\"%s\n", rule,
				     e[i].port ? "" : "  # refused at DNS: no port seen");
		else
			k = snprintf(buf + pos, cap - pos, "    # - \"%s\"  # denied by %s\n", rule, e[i].why);
		if (k > 0 && (size_t)k < cap - pos)
			pos += (size_t)k;
	}
	free(e);
	*out = buf;
	return 0;
}

int audit_learn_write(const struct audit_learn *l, const char *mode, int fd)
{
	struct timespec ts;
	char *text;
	size_t len, done = 0;
	int r;

	clock_gettime(CLOCK_REALTIME, &ts);
	if ((r = audit_learn_format(l, mode, (uint64_t)ts.tv_sec, &text)) < 0)
		return r;
	len = strlen(text);
	while (done < len) {
		ssize_t w = write(fd, text + done, len - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			r = w < 0 ? -errno : -EIO;
			break;
		}
		done += (size_t)w;
	}
	free(text);
	return r;
}
