#include "vmm/cli.h"

#include <stdarg.h>
#include <stdio.h>

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
