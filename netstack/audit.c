/* JSON-lines audit log; see audit.h. */
#include "netstack/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
 * output is plain ASCII and always valid JSON. */
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
		} else if (c < 0x20 || c >= 0x7f) {
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
		if (pol_addr_format(e->dst, ip, sizeof ip) < 0)
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
	} else {
		rc = rc ? rc : puts_(buf, len, &pos, e->allow ? ",\"decision\":\"allow\",\"rule\":" : ",\"decision\":\"deny\",\"rule\":");
		rc = rc ? rc : put_str(buf, len, &pos, e->rule ? e->rule : "", AUDIT_RULE_MAX);
	}
	rc = rc ? rc : puts_(buf, len, &pos, "}\n");
	if (rc)
		return rc;
	*n = pos;
	return 0;
}

int audit_open(struct audit *a, const char *path)
{
	a->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	return a->fd < 0 ? -errno : 0;
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
