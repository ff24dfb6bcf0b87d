/* Input: a run configuration message as kbox would send it to guest-init
 * (proto/runcfg.h), hostile.  It is copied to a buffer of exact size (so
 * ASan sees any overread) and decoded; a decoded configuration must
 * encode again and decode to the same values.  Nothing may crash, leak or
 * read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/runcfg.h"

static uint8_t reenc[RUNCFG_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct runcfg c, d;
	uint8_t *p = malloc(size ? size : 1);
	size_t n;

	if (!p)
		return 0;
	memcpy(p, data, size);
	if (size >= RUNCFG_HDR)
		(void)runcfg_message_len(p);
	if (runcfg_decode(p, size, &c) == 0) {
		if (runcfg_encode(&c, reenc, sizeof reenc, &n) != 0 || runcfg_decode(reenc, n, &d) != 0 ||
		    d.words_len != c.words_len || (c.words_len && memcmp(d.words, c.words, c.words_len) != 0) ||
		    d.clock_sec != c.clock_sec || d.clock_nsec != c.clock_nsec || d.entropy_len != c.entropy_len ||
		    memcmp(d.entropy, c.entropy, c.entropy_len) != 0 || d.env_len != c.env_len ||
		    (c.env_len && memcmp(d.env, c.env, c.env_len) != 0) || d.ca_len != c.ca_len || (c.ca_len && memcmp(d.ca, c.ca, c.ca_len) != 0) ||
		    d.hostname_len != c.hostname_len || (c.hostname_len && memcmp(d.hostname, c.hostname, c.hostname_len) != 0))
			abort();
	}
	free(p);
	return 0;
}
