/* Growable wipe-on-free buffer (see wbuf.h). */
#include "lib/wbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WBUF_MIN_CAP 256u

int wbuf_reserve(struct wbuf *b, size_t more)
{
	/* First, so that no sum below can wrap. */
	if (more > SIZE_MAX / 4 - (b->len - b->off))
		return -ENOMEM;
	if (b->off && b->len + more > b->cap) {
		memmove(b->p, b->p + b->off, b->len - b->off);
		explicit_bzero(b->p + (b->len - b->off), b->off);
		b->len -= b->off;
		b->off = 0;
	}
	if (b->len + more <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : WBUF_MIN_CAP;
	while (cap < b->len + more)
		cap *= 2;
	/* Never realloc: it would free the old block unwiped. */
	uint8_t *p = malloc(cap);
	if (!p)
		return -ENOMEM;
	if (b->len)
		memcpy(p, b->p, b->len);
	if (b->p) {
		explicit_bzero(b->p, b->cap);
		free(b->p);
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

int wbuf_put(struct wbuf *b, const void *d, size_t n)
{
	if (!n)
		return 0;
	int rc = wbuf_reserve(b, n);
	if (rc)
		return rc;
	memcpy(b->p + b->len, d, n);
	b->len += n;
	return 0;
}

int wbuf_puts(struct wbuf *b, const char *s)
{
	return wbuf_put(b, s, strlen(s));
}

void wbuf_drop(struct wbuf *b, size_t n)
{
	b->off += n;
	if (b->off >= b->len)
		b->off = b->len = 0;
}

void wbuf_trim(struct wbuf *b, size_t n)
{
	if (n > b->len - b->off)
		n = b->len - b->off;
	b->len -= n;
	if (n)
		explicit_bzero(b->p + b->len, n);
}

void wbuf_reset(struct wbuf *b)
{
	if (b->p)
		explicit_bzero(b->p, b->len);
	b->off = b->len = 0;
}

void wbuf_free(struct wbuf *b)
{
	if (b->p) {
		explicit_bzero(b->p, b->cap);
		free(b->p);
	}
	memset(b, 0, sizeof *b);
}
