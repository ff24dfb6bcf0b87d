#include "vmm/cli.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int cli_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("kbox: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return KBOX_EXIT_FAILURE;
}

int cli_is_help(const char *s)
{
	return strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0;
}

int cli_group_help(int argc, char **argv, const char *help)
{
	if (argc < 2) {
		fputs(help, stderr);
		return KBOX_EXIT_FAILURE;
	}
	if (cli_is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
		fputs(help, stdout);
		return 0;
	}
	return -1;
}

int cli_group_unknown(const char *group, const char *cmd)
{
	fprintf(stderr, "kbox %s: unknown command '%s' (see 'kbox %s --help')\n", group, cmd, group);
	return KBOX_EXIT_FAILURE;
}

void cli_human_bytes(uint64_t v, char *out, size_t len)
{
	static const char units[] = "BKMGT";
	unsigned u = 0;
	double d = (double)v;
	while (d >= 1024 && u < sizeof units - 2) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(out, len, "%" PRIu64 "B", v);
	else
		snprintf(out, len, "%.1f%c", d, units[u]);
}
