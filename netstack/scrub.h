/* Finding real secret values in bytes headed for the guest and replacing
 * them, in place and without changing the length, by their placeholder
 * (docs/secrets.md, "Responses").  The response filter (http_resp) runs
 * every byte an intercepted upstream sends through this, so that a server
 * that reflects a request kbox substituted into cannot hand the guest the
 * value it never held.
 *
 * Forms recognised, for every secret of the set:
 *   - the value as it is, each character of it possibly written as %XX
 *     (either case), as a JSON escape (\u00XX, or \" \\ \/), or a space
 *     as '+' (form encoding), freely mixed: the forms the request side
 *     decodes;
 *   - the value inside base64 text, standard or URL-safe alphabet, at any
 *     of the three byte alignments, padded or not; so Basic credentials
 *     "user:value" and JWT-style segments are covered.
 * Replacement keeps the length of what matched, so a Content-Length or a
 * WebSocket frame length stays right: the matched text becomes the
 * placeholder "$KBOX_NAME" followed by '*' up to the same length, or only
 * '*' when the match is shorter than the placeholder; inside base64 the
 * value's bytes are replaced by such a string of the same byte count and
 * re-encoded in place (the characters that mix the value's bits with its
 * neighbours' keep the neighbours' bits).
 *
 * Streaming: scrub_run says how many leading bytes are decided; the rest
 * may be the beginning of a value cut by the end of the data and must be
 * presented again with what follows.  At most scrub_holdback(s) bytes are
 * ever held back.  Not recognised: a value split by something else than a
 * boundary between calls (line-wrapped base64, a chunk-size line is the
 * caller's to remove), compressed, encrypted, or otherwise transformed
 * (hex, reversed, a substring). */
#ifndef KBOX_NETSTACK_SCRUB_H
#define KBOX_NETSTACK_SCRUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netstack/secrets.h"

struct scrub;

/* A scrubber for SET (may be NULL: nothing to find).  SET must outlive
 * it; secrets_reload may change the values between calls (they are
 * compared on every call and the patterns rebuilt).  0 or -ENOMEM. */
int scrub_new(const struct secrets *set, struct scrub **out);

/* Called once per replacement with the secret found (never its value). */
typedef void (*scrub_hit_fn)(void *ctx, const struct secret *s);

/* Replace every value found in BUF[0, N) in place.  Returns how many
 * leading bytes are decided (all N when FINAL, or when nothing could
 * continue past the end); the caller passes the undecided rest again,
 * first, in the next call.  HIT (may be NULL) is told of each
 * replacement.  Returns (size_t)-1 when the patterns could not be rebuilt
 * after a reload (out of memory): the caller must not pass BUF on. */
size_t scrub_run(struct scrub *s, uint8_t *buf, size_t n, bool final, scrub_hit_fn hit, void *ctx);

/* For a stream whose messages must not wait (after a protocol switch):
 * ON makes scrub_run hold nothing back only because the last byte could
 * be the base64 character that mixes a value's first bits with the byte
 * before it; such a character, when the value's remaining characters come
 * in a later call, then keeps its bits (at most 4 bits of the value's
 * first byte).  Off by default. */
void scrub_set_interactive(struct scrub *s, bool on);

/* The most bytes scrub_run ever leaves undecided for the current set
 * (its longest form minus one; 0 when there is nothing to find). */
size_t scrub_holdback(struct scrub *s);

/* Free S (NULL is fine), wiping the patterns: they are derived from real
 * values. */
void scrub_free(struct scrub *s);

#endif
