#include "lib/errbuf.h"

#include <stdarg.h>
#include <stdio.h>

__attribute__((format(printf, 3, 0)))
static void errbuf_vsay(char *err, size_t errlen, const char *fmt, va_list ap)
{
	if (err && errlen)
		vsnprintf(err, errlen, fmt, ap);
}

void errbuf_say(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	errbuf_vsay(err, errlen, fmt, ap);
	va_end(ap);
}

int errbuf_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	errbuf_vsay(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}
