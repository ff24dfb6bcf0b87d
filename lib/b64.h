/* Base64 (RFC 4648) by the character and by the quantum, for the PEM files
 * of the CA and for secrets hidden in base64 inside HTTP requests. */
#ifndef KBOX_LIB_B64_H
#define KBOX_LIB_B64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The standard alphabet (section 4) and the URL-safe one (section 5), 64
 * characters each. */
extern const char b64_std[65];
extern const char b64_url[65];

/* The value (0 to 63) of c in the standard alphabet, or with url in the
 * URL-safe one; -1 for any other byte, '=' included. */
int b64_val(uint8_t c, bool url);

/* The four characters of the standard alphabet for the n bytes (1 to 3)
 * at s, padded with '=' when n is less than 3. */
void b64_quantum(const uint8_t *s, size_t n, char out[4]);

#endif
