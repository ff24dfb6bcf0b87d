/* A growable byte buffer for bytes that may hold secrets (real credential
 * values before they are scrubbed or after they are substituted): every
 * block it lets go of is wiped first, when it grows, is reset or is freed.
 * Its live bytes are p[off, len); a zeroed struct is an empty buffer. */
#ifndef KBOX_LIB_WBUF_H
#define KBOX_LIB_WBUF_H

#include <stddef.h>
#include <stdint.h>

struct wbuf {
	uint8_t *p;
	size_t off, len, cap;
};

/* How many live bytes b holds. */
static inline size_t wbuf_size(const struct wbuf *b)
{
	return b->len - b->off;
}

/* The first live byte, or NULL when b never held any. */
static inline uint8_t *wbuf_data(const struct wbuf *b)
{
	return b->p ? b->p + b->off : NULL;
}

/* Make room for more bytes after the live ones (moving them to the front
 * first if that is enough), wiping the old block when a larger one takes
 * its place.  0, or -ENOMEM (b unchanged). */
int wbuf_reserve(struct wbuf *b, size_t more);

/* Append d[0, n) (0 or -ENOMEM, b unchanged); wbuf_puts appends a string
 * without its NUL. */
int wbuf_put(struct wbuf *b, const void *d, size_t n);
int wbuf_puts(struct wbuf *b, const char *s);

/* Drop the first n live bytes (all of them if n is more).  Not wiped:
 * callers drop only bytes that are safe to leave (scrubbed output, the
 * decided part of a window); wbuf_reset and wbuf_free wipe the rest. */
void wbuf_drop(struct wbuf *b, size_t n);

/* Take the last n live bytes back off the end (n at most wbuf_size), wiped. */
void wbuf_trim(struct wbuf *b, size_t n);

/* Wipe the live bytes and empty b, keeping its block. */
void wbuf_reset(struct wbuf *b);

/* Wipe and free the whole block; b is then a zeroed, empty buffer. */
void wbuf_free(struct wbuf *b);

#endif
