#include "vmm/klog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netstack/fileio.h"

void klog_init(struct klog *k)
{
	memset(k, 0, sizeof *k);
	k->fd = -1;
	k->exit_code = -1;
}

/* Copy the text after `marker` (to the end of the line) into out. */
static int after(const char *line, const char *marker, char *out, size_t outlen)
{
	const char *p = strstr(line, marker);
	if (!p)
		return 0;
	snprintf(out, outlen, "%s", p + strlen(marker));
	return 1;
}

static void parse_line(struct klog *k, const char *line)
{
	/* The kernel prints this as guest-init reboots with our command. */
	static const char exit_marker[] = "Restarting system with command 'kbox-exit=";
	const char *p = strstr(line, exit_marker);
	if (p) {
		/* Digits only: strtol alone would take "'" as 0 (success)
		 * and accept signs and spaces. */
		const char *num = p + sizeof exit_marker - 1;
		char *end;
		if (*num < '0' || *num > '9')
			return;
		long v = strtol(num, &end, 10);
		if (*end == '\'' && v >= 0 && v <= 255)
			k->exit_code = (int)v;
		return;
	}
	if (!k->panic && after(line, "Kernel panic - not syncing: ", k->panic_msg,
			       sizeof k->panic_msg)) {
		k->panic = 1;
		return;
	}
	if (after(line, "kbox-init: ", k->init_msg, sizeof k->init_msg))
		return;
	if (strstr(line, "Restarting system with command 'kbox-init-failed'"))
		k->init_failed = 1;
}

static void end_line(struct klog *k)
{
	/* Strip the CR of the console's CRLF. */
	while (k->len && (k->line[k->len - 1] == '\r' || k->line[k->len - 1] == '\n'))
		k->len--;
	k->line[k->len] = '\0';
	if (k->fd >= 0) {
		(void)fio_write_all(k->fd, k->line, k->len);
		(void)fio_write_all(k->fd, "\n", 1);
	}
	if (k->echo) {
		(void)fio_write_all(STDERR_FILENO, k->line, k->len);
		(void)fio_write_all(STDERR_FILENO, "\n", 1);
	}
	parse_line(k, k->line);
	k->len = 0;
}

void klog_write(void *ctx, const uint8_t *b, size_t n)
{
	struct klog *k = ctx;
	for (size_t i = 0; i < n; i++) {
		if (b[i] == '\n') {
			end_line(k);
			continue;
		}
		if (b[i] == '\0')
			continue;
		k->line[k->len++] = (char)b[i];
		if (k->len == KLOG_LINE - 1)
			end_line(k);
	}
}

void klog_flush(struct klog *k)
{
	if (k->len)
		end_line(k);
}
