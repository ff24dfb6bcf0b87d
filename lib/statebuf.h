/* Saved state as bytes: a growable little-endian writer and a bounded
 * reader, shared by the snapshot file (vmm/core/snapshot_file.c) and the
 * devices that save their own state into it.  Both latch their first
 * error, so a caller may chain puts or gets and check once at the end. */
#ifndef KBOX_LIB_STATEBUF_H
#define KBOX_LIB_STATEBUF_H

#include <stddef.h>
#include <stdint.h>

/* The largest buffer a writer grows to: no saved state comes near it. */
#define SB_MAX (256u << 20)

struct sb_writer {
	uint8_t *buf;
	size_t len, cap;
	int err; /* 0, or the first -ENOMEM / -EFBIG */
};

struct sb_reader {
	const uint8_t *p;
	size_t len, off;
	int err; /* 0, or -EBADMSG once a get ran past the end */
};

/* An empty writer; sb_free releases what it grew to.  Safe twice. */
void sb_init(struct sb_writer *w);
void sb_free(struct sb_writer *w);

/* Append n bytes (n may be 0), a little-endian u16/u32/u64, or zero bytes
 * up to the next multiple of align (a power of two <= 4096).  Nothing is
 * appended once the writer has failed. */
void sb_put(struct sb_writer *w, const void *p, size_t n);
void sb_u16(struct sb_writer *w, uint16_t v);
void sb_u32(struct sb_writer *w, uint32_t v);
void sb_u64(struct sb_writer *w, uint64_t v);
void sb_pad(struct sb_writer *w, size_t align);

/* Overwrite a u32/u64 already written at off (off + 4/8 <= w->len, else
 * the writer fails with -EINVAL). */
void sb_set_u32(struct sb_writer *w, size_t off, uint32_t v);
void sb_set_u64(struct sb_writer *w, size_t off, uint64_t v);

/* A reader over [p, p+len): nothing is copied, p must outlive it. */
void sb_reader_init(struct sb_reader *r, const void *p, size_t len);

/* Take n bytes into dst (or a u16/u32/u64).  Past the end the reader
 * fails, dst is zeroed and every later get returns zero too. */
void sb_get(struct sb_reader *r, void *dst, size_t n);
uint16_t sb_get_u16(struct sb_reader *r);
uint32_t sb_get_u32(struct sb_reader *r);
uint64_t sb_get_u64(struct sb_reader *r);

/* Bytes not yet taken (0 once failed). */
size_t sb_left(const struct sb_reader *r);

/* Little-endian loads and stores for callers that index by hand. */
static inline uint32_t sb_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t sb_le64(const uint8_t *p)
{
	return (uint64_t)sb_le32(p) | (uint64_t)sb_le32(p + 4) << 32;
}

#endif
