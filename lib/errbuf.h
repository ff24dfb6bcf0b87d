/* The message a failing call leaves in its caller's error buffer: most of
 * kbox's functions take (char *err, size_t errlen), either of which may be
 * NULL or 0 when the caller wants no message. */
#ifndef KBOX_LIB_ERRBUF_H
#define KBOX_LIB_ERRBUF_H

#include <stddef.h>

/* printf into err (errlen bytes, always NUL-terminated, cut to fit);
 * nothing when err is NULL or errlen 0. */
__attribute__((format(printf, 3, 4)))
void errbuf_say(char *err, size_t errlen, const char *fmt, ...);

/* errbuf_say, then return rc: a failure reported and returned in one
 * statement. */
__attribute__((format(printf, 4, 5)))
int errbuf_fail(char *err, size_t errlen, int rc, const char *fmt, ...);

#endif
