#include "lib/b64.h"

const char b64_std[65] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const char b64_url[65] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int b64_val(uint8_t c, bool url)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == (url ? '-' : '+'))
		return 62;
	if (c == (url ? '_' : '/'))
		return 63;
	return -1;
}

void b64_quantum(const uint8_t *s, size_t n, char out[4])
{
	unsigned v = (unsigned)s[0] << 16;
	if (n > 1)
		v |= (unsigned)s[1] << 8;
	if (n > 2)
		v |= s[2];
	out[0] = b64_std[v >> 18];
	out[1] = b64_std[(v >> 12) & 63];
	out[2] = n > 1 ? b64_std[(v >> 6) & 63] : '=';
	out[3] = n > 2 ? b64_std[v & 63] : '=';
}
