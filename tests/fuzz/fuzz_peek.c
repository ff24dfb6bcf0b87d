/* Input: the first bytes of a client's TCP stream (netstack/peek.h).
 *   - peek_parse must never read outside them;
 *   - what it reports must hold: a status it knows, 1..PEEK_NAMES names
 *     only with PEEK_NAMES_FOUND, each a normalised DNS name (lower case,
 *     no trailing dot, not numeric), with where it came from;
 *   - a verdict never turns back into "more, please" when bytes are
 *     appended, except that none is reached from fewer bytes than the
 *     prefix that needed more (checked on every prefix up to 512). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "netstack/peek.h"

static int check(const uint8_t *data, size_t size)
{
	struct peek_result r;
	int st = peek_parse(data, size, &r);

	if (st < PEEK_NEED_MORE || st > PEEK_BAD)
		abort();
	if ((st == PEEK_NAMES_FOUND) != (r.n > 0) || r.n > PEEK_NAMES)
		abort();
	for (size_t i = 0; i < r.n; i++) {
		char again[POLICY_NAME_MAX + 1];

		if (!r.what[i] || policy_name_normalize(r.name[i], again) < 0 || strcmp(again, r.name[i]) != 0 ||
		    policy_name_is_numeric(r.name[i]))
			abort();
	}
	if ((st == PEEK_BAD || st == PEEK_NONE) && !r.why)
		abort();
	return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A copy of exactly size bytes, so that ASan sees any over-read. */
	uint8_t *b = malloc(size ? size : 1);
	int last = PEEK_NEED_MORE;

	if (!b)
		return 0;
	memcpy(b, data, size);
	for (size_t n = 0; n <= size && n <= 512; n++) {
		int st = check(b, n);

		/* Once an HTTP head or a hello is judged, more bytes do not
		 * unjudge it (a TLS hello is judged on its own records). */
		if (last != PEEK_NEED_MORE && st == PEEK_NEED_MORE)
			abort();
		last = st;
	}
	check(b, size);
	free(b);
	return 0;
}
