/* Writer for the "newc" cpio format the kernel unpacks as initramfs.
 * kbox appends one such archive to the initrd to hand the guest its
 * command, so guest-init needs no parsing of the kernel command line. */
#ifndef KBOX_CPIO_H
#define KBOX_CPIO_H

#include <stddef.h>
#include <stdint.h>

struct cpio {
	uint8_t *buf;
	size_t len, cap;
	unsigned ino;
	int err; /* first error (-ENOMEM, -EINVAL); later calls do nothing */
};

/* An empty archive, no memory held yet. */
void cpio_init(struct cpio *c);

/* Free the archive's buffer and leave c empty, as after cpio_init; safe
 * after any error and on an archive already freed. */
void cpio_free(struct cpio *c);

/* Append a directory (mode 0755) or a regular file with the given mode
 * bits and contents.  Names are relative ("kbox/argv"), at most 1023
 * bytes, without NUL.  Errors are sticky in c->err. */
void cpio_add_dir(struct cpio *c, const char *name);
void cpio_add_file(struct cpio *c, const char *name, unsigned mode, const void *data,
		   size_t len);

/* Append the trailer.  Returns 0 or the first error; the archive is
 * c->buf[0..c->len), a multiple of 4 bytes long. */
int cpio_finish(struct cpio *c);

#endif
