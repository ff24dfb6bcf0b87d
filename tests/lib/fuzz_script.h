/* The input of a device fuzz target read as a script: opcode bytes and
 * fixed-size arguments, taken in turn, zeros once the input runs out (so
 * every prefix of an input is a whole script).  Also the steps the virtio
 * targets share: raw bytes into guest RAM and a raw register write.
 * Header-only, for the same reason as fake_virtio.h. */
#ifndef KBOX_TESTS_FUZZ_SCRIPT_H
#define KBOX_TESTS_FUZZ_SCRIPT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tests/lib/fake_virtio.h"

struct fz_input {
	const uint8_t *p;
	size_t left;
};

/* Fill out with the next n bytes of the script, zeros past its end. */
static inline void fz_take(struct fz_input *in, void *out, size_t n)
{
	size_t k = n < in->left ? n : in->left;
	memset(out, 0, n);
	memcpy(out, in->p, k);
	in->p += k;
	in->left -= k;
}

/* Step: an offset (4 bytes) and a length (1 byte), then that many script
 * bytes into guest RAM at area + offset % (size - 256); size must exceed
 * 256 and the area lie in the fake RAM. */
static inline void fz_poke_ram(struct fz_input *in, const struct fv_driver *d, uint64_t area,
			       uint64_t size)
{
	uint32_t off;
	uint8_t len;
	fz_take(in, &off, 4);
	fz_take(in, &len, 1);
	fz_take(in, fv_at(d, area + off % (size - 256), len), len);
}

/* Step: a register offset (2 bytes) and a value (4 bytes), written as a
 * 32-bit access unless it is one of the queue-address registers
 * (0x80-0xff), so that the rings stay where the driver put them. */
static inline void fz_poke_reg(struct fz_input *in, const struct fv_driver *d)
{
	uint16_t off;
	uint32_t v;
	fz_take(in, &off, 2);
	fz_take(in, &v, 4);
	off &= 0xffc;
	if (off < FV_R_QUEUE_DESC || off >= VIRTIO_MMIO_CONFIG)
		fv_wr(d, off, v);
}

/* Step: a count byte, then up to 7 byte flips, each an offset (2 bytes)
 * and a mask (1) XORed into buf[from + offset % (len - from)]; none once
 * len is 0, and the flip's bytes are still taken when len <= from. */
static inline void fz_flips(struct fz_input *in, uint8_t *buf, size_t len, size_t from)
{
	uint8_t n;
	fz_take(in, &n, 1);
	for (unsigned i = 0; i < n % 8u && len; i++) {
		uint16_t at;
		uint8_t x;
		fz_take(in, &at, 2);
		fz_take(in, &x, 1);
		if (len > from)
			buf[from + at % (len - from)] ^= x;
	}
}

#endif
