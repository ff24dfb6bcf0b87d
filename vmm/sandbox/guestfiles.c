#include "vmm/sandbox/guestfiles.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/core/cpio.h"

/* The guest writes the name into /etc/hosts and its kernel: nothing that
 * could end a line or a field there. */
static bool hostname_ok(const char *h)
{
	size_t n = strlen(h);
	if (n == 0 || n > GUESTFILES_HOSTNAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)h[i]) && !strchr("-_.", h[i]))
			return false;
	return true;
}

int guestfiles_append(uint8_t **img, size_t *len, const char *const *env, size_t n, const char *ca_pem,
	      const char *hostname)
{
	size_t total = 0;
	if (hostname && !hostname_ok(hostname))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(env[i], '=');
		if (!eq || eq == env[i])
			return -EINVAL;
		total += strlen(env[i]) + 1;
		if (total > GUESTFILES_MAX_ENV_BYTES)
			return -EINVAL;
	}
	char *blob = malloc(total ? total : 1);
	if (!blob)
		return -ENOMEM;
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(env[i]) + 1;
		memcpy(blob + off, env[i], l);
		off += l;
	}
	struct cpio c;
	cpio_init(&c);
	cpio_add_dir(&c, "kbox");
	cpio_add_file(&c, "kbox/env", 0600, blob, total);
	if (ca_pem)
		cpio_add_file(&c, "kbox/ca.pem", 0644, ca_pem, strlen(ca_pem));
	if (hostname)
		cpio_add_file(&c, "kbox/hostname", 0644, hostname, strlen(hostname));
	free(blob);
	int rc = cpio_finish(&c);
	if (rc) {
		cpio_free(&c);
		return rc;
	}
	/* The kernel looks for the next archive's magic on a 4-byte
	 * boundary and skips the zero padding before it. */
	size_t pad = (4 - *len % 4) % 4;
	uint8_t *grown = realloc(*img, *len + pad + c.len);
	if (!grown) {
		cpio_free(&c);
		return -ENOMEM;
	}
	memset(grown + *len, 0, pad);
	memcpy(grown + *len + pad, c.buf, c.len);
	*img = grown;
	*len += pad + c.len;
	cpio_free(&c);
	return 0;
}
