#include "lib/statebuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void statebuf_init(struct statebuf_writer *w) { memset(w, 0, sizeof *w); }

void statebuf_free(struct statebuf_writer *w)
{
	free(w->buf);
	memset(w, 0, sizeof *w);
}

static int reserve(struct statebuf_writer *w, size_t n)
{
	if (w->err)
		return -1;
	if (n > STATEBUF_MAX || w->len > STATEBUF_MAX - n) {
		w->err = -EFBIG;
		return -1;
	}
	if (w->len + n <= w->cap)
		return 0;
	size_t cap = w->cap ? w->cap : 256;
	while (cap < w->len + n)
		cap *= 2;
	uint8_t *b = realloc(w->buf, cap);
	if (!b) {
		w->err = -ENOMEM;
		return -1;
	}
	w->buf = b;
	w->cap = cap;
	return 0;
}

void statebuf_put(struct statebuf_writer *w, const void *p, size_t n)
{
	if (reserve(w, n) < 0 || n == 0)
		return;
	memcpy(w->buf + w->len, p, n);
	w->len += n;
}

static void put_le(struct statebuf_writer *w, uint64_t v, unsigned n)
{
	uint8_t b[8];
	for (unsigned i = 0; i < n; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	statebuf_put(w, b, n);
}

void statebuf_u16(struct statebuf_writer *w, uint16_t v) { put_le(w, v, 2); }
void statebuf_u32(struct statebuf_writer *w, uint32_t v) { put_le(w, v, 4); }
void statebuf_u64(struct statebuf_writer *w, uint64_t v) { put_le(w, v, 8); }

void statebuf_pad(struct statebuf_writer *w, size_t align)
{
	static const uint8_t zero[4096];
	if (align == 0 || align > sizeof zero || (align & (align - 1))) {
		if (!w->err)
			w->err = -EINVAL;
		return;
	}
	statebuf_put(w, zero, (align - (w->len & (align - 1))) & (align - 1));
}

static void set_le(struct statebuf_writer *w, size_t off, uint64_t v, unsigned n)
{
	if (w->err)
		return;
	if (off > w->len || w->len - off < n) {
		w->err = -EINVAL;
		return;
	}
	for (unsigned i = 0; i < n; i++)
		w->buf[off + i] = (uint8_t)(v >> (8 * i));
}

void statebuf_set_u32(struct statebuf_writer *w, size_t off, uint32_t v) { set_le(w, off, v, 4); }
void statebuf_set_u64(struct statebuf_writer *w, size_t off, uint64_t v) { set_le(w, off, v, 8); }

void statebuf_reader_init(struct statebuf_reader *r, const void *p, size_t len)
{
	*r = (struct statebuf_reader){ .p = p, .len = p ? len : 0 };
}

void statebuf_get(struct statebuf_reader *r, void *dst, size_t n)
{
	if (r->err || n > r->len - r->off) {
		r->err = -EBADMSG;
		if (n)
			memset(dst, 0, n);
		return;
	}
	if (n)
		memcpy(dst, r->p + r->off, n);
	r->off += n;
}

static uint64_t get_le(struct statebuf_reader *r, unsigned n)
{
	uint8_t b[8];
	uint64_t v = 0;
	statebuf_get(r, b, n);
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)b[i] << (8 * i);
	return v;
}

uint16_t statebuf_get_u16(struct statebuf_reader *r) { return (uint16_t)get_le(r, 2); }
uint32_t statebuf_get_u32(struct statebuf_reader *r) { return (uint32_t)get_le(r, 4); }
uint64_t statebuf_get_u64(struct statebuf_reader *r) { return get_le(r, 8); }

size_t statebuf_left(const struct statebuf_reader *r) { return r->err ? 0 : r->len - r->off; }
