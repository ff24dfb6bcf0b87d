/* libFuzzer target for the scrubber alone.  The first input byte picks
 * how the rest is sliced and whether the stream is interactive; the rest
 * is bytes headed for the guest, into which the target also splices the
 * secrets' values at positions the input chooses ("\x01" + k puts value
 * k there).  Invariants:
 *  - after the last call no value is left as it is;
 *  - the length never changes, and bytes far from any value are kept;
 *  - streamed in slices (the undecided tail carried over) the result is
 *    the same as in one call, and the tail never exceeds scrub_holdback;
 *    when interactive, only the base64 character before a value may
 *    differ. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "netstack/scrub.h"
#include "netstack/secrets.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static const char yaml[] = "A: {value: Vk3y-REAL-alpha, allow: [a.example]}\n"
			   "B: {value: 'p w\"d/R+%\\x', allow: [a.example]}\n"
			   "C: {value: zz, allow: [a.example]}\n";
static const char *const vals[] = { "Vk3y-REAL-alpha", "p w\"d/R+%\\x", "zz" };
static struct secrets *set;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!set) {
		char err[256];
		check(secrets_load_buf("fuzz/secrets.yaml", yaml, strlen(yaml), &set, err, sizeof err) == 0);
	}
	if (size < 1 || size > 8192)
		return 0;
	uint8_t mode = data[0];
	bool interactive = mode & 0x80;
	/* The stream: the input with values spliced in. */
	uint8_t *in = malloc(size * 16 + 1);
	check(in != NULL);
	size_t n = 0;
	for (size_t i = 1; i < size; i++) {
		if (data[i] == 1 && i + 1 < size) {
			const char *v = vals[data[++i] % 3];
			memcpy(in + n, v, strlen(v));
			n += strlen(v);
		} else {
			in[n++] = data[i];
		}
	}
	uint8_t *whole = malloc(n + 1), *st = malloc(n + 1), *buf = malloc(n + 1);
	check(whole && st && buf);
	if (n)
		memcpy(whole, in, n);
	struct scrub *s;
	check(scrub_new(set, &s) == 0);
	scrub_set_interactive(s, interactive);
	check(scrub_run(s, whole, n, true, NULL, NULL) == n);
	for (int k = 0; k < 3; k++)
		check(!n || !memmem(whole, n, vals[k], strlen(vals[k])));
	scrub_free(s);

	check(scrub_new(set, &s) == 0);
	scrub_set_interactive(s, interactive);
	size_t off = 0, have = 0, o = 0;
	unsigned seed = mode | 1u;
	while (off < n || have) {
		seed = seed * 1103515245u + 12345u;
		size_t k = 1 + (seed >> 16) % 97;
		if (k > n - off)
			k = n - off;
		memcpy(buf + have, in + off, k);
		have += k;
		off += k;
		size_t d = scrub_run(s, buf, have, off == n, NULL, NULL);
		check(d <= have && have - d <= scrub_holdback(s));
		memcpy(st + o, buf, d);
		o += d;
		memmove(buf, buf + d, have - d);
		have -= d;
		if (off == n)
			check(have == 0);
	}
	check(o == n);
	scrub_free(s);
	for (size_t i = 0; i < n; i++) {
		if (st[i] == whole[i])
			continue;
		/* Interactive only: a base64 character left with its bits. */
		check(interactive && i + 1 < n && st[i] == in[i]);
	}
	free(in);
	free(whole);
	free(st);
	free(buf);
	return 0;
}
