#include "vmm/core/cpio.h"

#include "lib/grow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CPIO_NAME_MAX 1023u
#define CPIO_FILE_MAX 0xffffffffu /* c_filesize is 8 hex digits */

void cpio_init(struct cpio *c)
{
	memset(c, 0, sizeof *c);
}

void cpio_free(struct cpio *c)
{
	free(c->buf);
	memset(c, 0, sizeof *c);
}

static void append(struct cpio *c, const void *p, size_t n)
{
	if (c->err)
		return;
	if (n > SIZE_MAX - c->len - 4) {
		c->err = -ENOMEM;
		return;
	}
	size_t need = c->len + n + 4; /* room for padding */
	if (grow_array(&c->buf, &c->cap, need, 1, 1024, 0) < 0) {
		c->err = -ENOMEM;
		return;
	}
	if (n)
		memcpy(c->buf + c->len, p, n);
	c->len += n;
}

static void pad4(struct cpio *c)
{
	static const uint8_t zero[4];
	append(c, zero, (4 - (c->len & 3)) & 3);
}

static void entry(struct cpio *c, const char *name, unsigned mode, const void *data,
		  size_t len)
{
	if (c->err)
		return;
	size_t nl = strlen(name);
	if (nl == 0 || nl > CPIO_NAME_MAX || len > CPIO_FILE_MAX) {
		c->err = -EINVAL;
		return;
	}
	char hdr[111];
	snprintf(hdr, sizeof hdr,
		 "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X", ++c->ino, mode,
		 0u, 0u, 1u, 0u, (unsigned)len, 0u, 0u, 0u, 0u, (unsigned)(nl + 1), 0u);
	append(c, hdr, 110);
	append(c, name, nl + 1);
	pad4(c);
	append(c, data, len);
	pad4(c);
}

void cpio_add_dir(struct cpio *c, const char *name)
{
	entry(c, name, 040755, NULL, 0);
}

void cpio_add_file(struct cpio *c, const char *name, unsigned mode, const void *data,
		   size_t len)
{
	entry(c, name, 0100000 | (mode & 07777), data, len);
}

int cpio_finish(struct cpio *c)
{
	entry(c, "TRAILER!!!", 0, NULL, 0);
	return c->err;
}
