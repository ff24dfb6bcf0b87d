/* Saved state as bytes: a growable little-endian writer and a bounded
 * reader, shared by the snapshot file (vmm/core/snapshot_file.c) and the
 * devices that save their own state into it.  Both latch their first
 * error, so a caller may chain puts or gets and check once at the end. */
#ifndef KBOX_LIB_STATEBUF_H
#define KBOX_LIB_STATEBUF_H

#include <stddef.h>
#include <stdint.h>

/* The largest buffer a writer grows to: no saved state comes near it. */
#define STATEBUF_MAX (256u << 20)

struct statebuf_writer {
	uint8_t *buf;
	size_t len, cap;
	int err; /* 0, or the first -ENOMEM / -EFBIG */
};

struct statebuf_reader {
	const uint8_t *p;
	size_t len, off;
	int err; /* 0, or -EBADMSG once a get ran past the end */
};

/* An empty writer; statebuf_free releases what it grew to.  Safe twice. */
void statebuf_init(struct statebuf_writer *w);
void statebuf_free(struct statebuf_writer *w);

/* Append n bytes (n may be 0), a little-endian u16/u32/u64, or zero bytes
 * up to the next multiple of align (a power of two <= 4096).  Nothing is
 * appended once the writer has failed. */
void statebuf_put(struct statebuf_writer *w, const void *p, size_t n);
void statebuf_u16(struct statebuf_writer *w, uint16_t v);
void statebuf_u32(struct statebuf_writer *w, uint32_t v);
void statebuf_u64(struct statebuf_writer *w, uint64_t v);
void statebuf_pad(struct statebuf_writer *w, size_t align);

/* Overwrite a u32/u64 already written at off (off + 4/8 <= w->len, else
 * the writer fails with -EINVAL). */
void statebuf_set_u32(struct statebuf_writer *w, size_t off, uint32_t v);
void statebuf_set_u64(struct statebuf_writer *w, size_t off, uint64_t v);

/* A reader over [p, p+len): nothing is copied, p must outlive it. */
void statebuf_reader_init(struct statebuf_reader *r, const void *p, size_t len);

/* Take n bytes into dst (or a u16/u32/u64).  Past the end the reader
 * fails, dst is zeroed and every later get returns zero too. */
void statebuf_get(struct statebuf_reader *r, void *dst, size_t n);
uint16_t statebuf_get_u16(struct statebuf_reader *r);
uint32_t statebuf_get_u32(struct statebuf_reader *r);
uint64_t statebuf_get_u64(struct statebuf_reader *r);

/* Bytes not yet taken (0 once failed). */
size_t statebuf_left(const struct statebuf_reader *r);

/* Little-endian loads and stores for callers that index by hand. */
static inline uint32_t statebuf_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t statebuf_le64(const uint8_t *p)
{
	return (uint64_t)statebuf_le32(p) | (uint64_t)statebuf_le32(p + 4) << 32;
}

#endif
