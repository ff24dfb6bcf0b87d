/* Real values out of guest-bound bytes, length-preserving (see scrub.h).
 *
 * Per secret the scrubber keeps a copy of the value (to notice a reload),
 * the replacement bytes (placeholder, then '*', as long as the value) and,
 * for each of the three base64 alignments in both alphabets, the
 * characters wholly determined by the value, with their replacements and
 * the bits the value contributes to the character before and after.  A
 * table of the bytes that may begin any form keeps the scan at one lookup
 * per byte for bytes that begin nothing. */
#include "netstack/scrub.h"
#include "lib/b64.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { S_NO, S_YES, S_MORE };

struct sc_b64 {
	size_t nf;          /* characters wholly from the value; 0: form unused */
	uint8_t *full;      /* those characters */
	uint8_t *rep;       /* and what replaces them */
	unsigned lead_bits; /* low bits of the character before that are the value's */
	unsigned lead_val;  /* those bits of the value */
	unsigned lead_rep;
	unsigned tail_bits; /* high bits of the character after that are the value's */
	unsigned tail_rep;  /* already in place (shifted) */
	bool url;
};

struct sc_ent {
	const struct secret *s;
	uint8_t *val; /* copy of the value when the patterns were built */
	size_t vlen;
	uint8_t *rep; /* vlen bytes */
	struct sc_b64 b[6];
};

/* A form that may begin at a byte: entry ENT's text (FORM < 0) or its
 * base64 pattern FORM. */
struct sc_cand {
	uint16_t ent;
	int8_t form;
};

struct scrub {
	const struct secrets *set;
	struct sc_ent *e;
	size_t n;
	bool first[256];
	uint8_t pair[65536 / 8]; /* two bytes that may begin some form (a superset) */
	uint32_t cstart[257]; /* the candidates for byte b: cand[cstart[b], cstart[b + 1]) */
	struct sc_cand *cand;
	bool lead[2][64]; /* 6-bit values that may be a pattern's character before, per alphabet */
	size_t hold;
	bool interactive;
};

static void wipe_free(void *p, size_t n)
{
	if (p) {
		explicit_bzero(p, n);
		free(p);
	}
}

static void drop_patterns(struct scrub *s)
{
	for (size_t i = 0; i < s->n; i++) {
		struct sc_ent *e = &s->e[i];
		for (int t = 0; t < 6; t++) {
			wipe_free(e->b[t].full, e->b[t].nf);
			wipe_free(e->b[t].rep, e->b[t].nf);
		}
		wipe_free(e->val, e->vlen);
		wipe_free(e->rep, e->vlen);
	}
	free(s->e);
	free(s->cand);
	s->cand = NULL;
	s->e = NULL;
	s->n = 0;
	s->hold = 0;
	memset(s->first, 0, sizeof s->first);
	memset(s->pair, 0, sizeof s->pair);
	memset(s->lead, 0, sizeof s->lead);
}

/* The 6-bit value of base64 character K of (SHIFT zero bytes, B[0, V),
 * zero bytes). */
static unsigned bits6(const uint8_t *b, size_t v, unsigned shift, size_t k)
{
	unsigned r = 0;
	for (unsigned j = 0; j < 6; j++) {
		size_t bit = 6 * k + j, byte = bit / 8;
		unsigned x = byte < shift || byte >= shift + v ? 0 : b[byte - shift];
		r = (r << 1) | ((x >> (7 - bit % 8)) & 1);
	}
	return r;
}

static int build_b64(struct sc_ent *e, int t)
{
	struct sc_b64 *p = &e->b[t];
	unsigned shift = (unsigned)(t % 3);
	bool url = t >= 3;
	const char *alpha = url ? b64_url : b64_std;
	size_t from = 8 * (size_t)shift, to = 8 * ((size_t)shift + e->vlen);
	size_t k0 = (from + 5) / 6, k1 = to / 6;
	p->url = url;
	if (e->vlen < 3 || k1 <= k0 + 1)
		return 0; /* too short to tell from other text */
	p->nf = k1 - k0;
	p->full = malloc(p->nf);
	p->rep = malloc(p->nf);
	if (!p->full || !p->rep)
		return -ENOMEM;
	for (size_t k = k0; k < k1; k++) {
		p->full[k - k0] = (uint8_t)alpha[bits6(e->val, e->vlen, shift, k)];
		p->rep[k - k0] = (uint8_t)alpha[bits6(e->rep, e->vlen, shift, k)];
	}
	if (from % 6) {
		p->lead_bits = (unsigned)(6 * k0 - from);
		p->lead_val = bits6(e->val, e->vlen, shift, k0 - 1) & ((1u << p->lead_bits) - 1);
		p->lead_rep = bits6(e->rep, e->vlen, shift, k0 - 1) & ((1u << p->lead_bits) - 1);
	}
	if (to % 6) {
		p->tail_bits = (unsigned)(to - 6 * k1);
		unsigned mask = ((1u << p->tail_bits) - 1) << (6 - p->tail_bits);
		p->tail_rep = bits6(e->rep, e->vlen, shift, k1) & mask;
	}
	return 0;
}

/* Whether entry E's form FORM (-1: text) may begin with byte B. */
static bool may_begin(const struct sc_ent *e, int form, unsigned b)
{
	if (!e->vlen)
		return false;
	if (form < 0)
		return b == e->val[0] || b == '%' || b == '\\' || (e->val[0] == ' ' && b == '+');
	return e->b[form].nf && e->b[form].full[0] == b;
}

static void mark_pair(struct scrub *s, unsigned a, unsigned b)
{
	unsigned k = a << 8 | b;
	s->pair[k >> 3] |= (uint8_t)(1u << (k & 7));
}

static bool pair_may(const struct scrub *s, unsigned a, unsigned b)
{
	unsigned k = a << 8 | b;
	return s->pair[k >> 3] >> (k & 7) & 1;
}

/* The bytes that may begin character C of a value in text form. */
static size_t begins(uint8_t c, uint8_t out[4])
{
	size_t n = 0;
	out[n++] = c;
	out[n++] = '%';
	out[n++] = '\\';
	if (c == ' ')
		out[n++] = '+';
	return n;
}

/* The pairs of bytes that may begin entry E in any form: the scan skips
 * every position whose pair is not one of them. */
static void mark_pairs(struct scrub *s, const struct sc_ent *e)
{
	static const char hex[] = "0123456789ABCDEF";
	uint8_t v0 = e->val[0], b1[4];
	/* The first character written plainly (or '+' for a space). */
	size_t nb = e->vlen > 1 ? begins(e->val[1], b1) : 0;
	uint8_t lit[2] = { v0, '+' };
	for (int l = 0; l < (v0 == ' ' ? 2 : 1); l++) {
		if (e->vlen == 1)
			for (unsigned b = 0; b < 256; b++)
				mark_pair(s, lit[l], b);
		for (size_t j = 0; j < nb; j++)
			mark_pair(s, lit[l], b1[j]);
	}
	/* ... as %XX, \u00XX or a short JSON escape. */
	mark_pair(s, '%', (uint8_t)hex[v0 >> 4]);
	mark_pair(s, '%', (uint8_t)(hex[v0 >> 4] | 0x20));
	mark_pair(s, '\\', 'u');
	mark_pair(s, '\\', 'U');
	if (v0 == '"' || v0 == '\\' || v0 == '/')
		mark_pair(s, '\\', v0);
	for (int t = 0; t < 6; t++)
		if (e->b[t].nf)
			mark_pair(s, e->b[t].full[0], e->b[t].full[1]);
}

/* Per byte, the forms that may begin there, in entry order, text first:
 * the scan then looks only at those. */
static int index_candidates(struct scrub *s)
{
	size_t total = 0;
	for (unsigned b = 0; b < 256; b++)
		for (size_t j = 0; j < s->n; j++)
			for (int f = -1; f < 6; f++)
				total += may_begin(&s->e[j], f, b);
	s->cand = calloc(total ? total : 1, sizeof *s->cand);
	if (!s->cand)
		return -ENOMEM;
	size_t k = 0;
	for (unsigned b = 0; b < 256; b++) {
		s->cstart[b] = (uint32_t)k;
		for (size_t j = 0; j < s->n; j++)
			for (int f = -1; f < 6; f++)
				if (may_begin(&s->e[j], f, b))
					s->cand[k++] = (struct sc_cand){ .ent = (uint16_t)j, .form = (int8_t)f };
	}
	s->cstart[256] = (uint32_t)k;
	for (size_t j = 0; j < s->n; j++)
		if (s->e[j].vlen)
			mark_pairs(s, &s->e[j]);
	return 0;
}

static int build(struct scrub *s)
{
	drop_patterns(s);
	size_t n = secrets_count(s->set);
	if (!n)
		return 0;
	s->e = calloc(n, sizeof *s->e);
	if (!s->e)
		return -ENOMEM;
	s->n = n;
	for (size_t i = 0; i < n; i++) {
		const struct secret *sec = secrets_at(s->set, i);
		struct sc_ent *e = &s->e[i];
		e->s = sec;
		e->vlen = sec->value_len;
		e->val = malloc(e->vlen ? e->vlen : 1);
		e->rep = malloc(e->vlen ? e->vlen : 1);
		if (!e->val || !e->rep) {
			drop_patterns(s);
			return -ENOMEM;
		}
		memcpy(e->val, sec->value, e->vlen);
		const char *ph = secrets_placeholder(sec);
		size_t pl = strlen(ph);
		memset(e->rep, '*', e->vlen);
		if (e->vlen >= pl)
			memcpy(e->rep, ph, pl);
		if (!e->vlen)
			continue;
		for (int t = 0; t < 6; t++) {
			if (build_b64(e, t) < 0) {
				drop_patterns(s);
				return -ENOMEM;
			}
		}
		/* The URL alphabet differs only in two characters: drop its
		 * patterns where they are the standard ones. */
		for (int t = 3; t < 6; t++) {
			struct sc_b64 *u = &e->b[t], *d = &e->b[t - 3];
			if (u->nf && u->nf == d->nf && !memcmp(u->full, d->full, u->nf)) {
				wipe_free(u->full, u->nf);
				wipe_free(u->rep, u->nf);
				memset(u, 0, sizeof *u);
			}
		}
		s->first[e->val[0]] = true;
		if (e->val[0] == ' ')
			s->first['+'] = true;
		for (int t = 0; t < 6; t++) {
			const struct sc_b64 *p = &e->b[t];
			if (!p->nf)
				continue;
			s->first[p->full[0]] = true;
			unsigned m = (1u << p->lead_bits) - 1;
			for (unsigned v = 0; p->lead_bits && v < 64; v++)
				if ((v & m) == p->lead_val)
					s->lead[p->url][v] = true;
		}
		if (6 * e->vlen - 1 > s->hold)
			s->hold = 6 * e->vlen - 1;
	}
	s->first['%'] = s->first['\\'] = true;
	return index_candidates(s);
}

/* Whether the built patterns are those of the set's current values. */
static bool current(const struct scrub *s)
{
	size_t n = secrets_count(s->set);
	if (n != s->n)
		return false;
	for (size_t i = 0; i < n; i++) {
		const struct secret *sec = secrets_at(s->set, i);
		const struct sc_ent *e = &s->e[i];
		if (e->s != sec || e->vlen != sec->value_len || memcmp(e->val, sec->value, e->vlen) != 0)
			return false;
	}
	return true;
}

int scrub_new(const struct secrets *set, struct scrub **out)
{
	struct scrub *s = calloc(1, sizeof *s);
	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->set = set;
	if (build(s) < 0) {
		free(s);
		return -ENOMEM;
	}
	*out = s;
	return 0;
}

static int hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The value V at S[I], each character plain or escaped.  S_YES with *END,
 * S_NO, or S_MORE when the data ends before it can be told. */
static int match_text(const uint8_t *s, size_t n, size_t i, const uint8_t *v, size_t vlen, bool final,
		      size_t *end)
{
	size_t p = i;
	for (size_t k = 0; k < vlen; k++) {
		uint8_t c = v[k], x;
		size_t adv = 0;
		if (p >= n)
			return final ? S_NO : S_MORE;
		x = s[p];
		if (x == '%') {
			if (p + 2 >= n) {
				if (!final)
					return S_MORE;
			} else {
				int h1 = hexval(s[p + 1]), h2 = hexval(s[p + 2]);
				if (h1 >= 0 && h2 >= 0 && h1 * 16 + h2 == c)
					adv = 3;
			}
		} else if (x == '\\') {
			if (p + 1 >= n) {
				if (!final)
					return S_MORE;
			} else if (s[p + 1] == c && (c == '"' || c == '\\' || c == '/')) {
				adv = 2;
			} else if (s[p + 1] == 'u' || s[p + 1] == 'U') {
				if (p + 5 >= n) {
					if (!final)
						return S_MORE;
				} else {
					int d = 0;
					for (size_t j = 2; j < 6 && d >= 0; j++) {
						int h = hexval(s[p + j]);
						d = h < 0 ? -1 : d * 16 + h;
					}
					if (d == c)
						adv = 6;
				}
			}
		}
		if (!adv) {
			if (x != c && !(c == ' ' && x == '+'))
				return S_NO;
			adv = 1;
		}
		p += adv;
	}
	*end = p;
	return S_YES;
}

static int match_b64(const struct sc_b64 *p, uint8_t *s, size_t n, size_t i, bool final)
{
	if (!p->nf || s[i] != p->full[0])
		return S_NO;
	size_t k = 1;
	while (k < p->nf && i + k < n && s[i + k] == p->full[k])
		k++;
	if (k < p->nf)
		return i + k == n && !final ? S_MORE : S_NO;
	if (p->tail_bits && i + k == n && !final)
		return S_MORE;
	return S_YES;
}

static void replace_b64(const struct sc_b64 *p, uint8_t *s, size_t n, size_t i)
{
	const char *alpha = p->url ? b64_url : b64_std;
	memcpy(s + i, p->rep, p->nf);
	int v;
	/* The character before holds the value's first bits only when its
	 * low bits are those bits; otherwise it holds nothing of the value
	 * and stays (scrub_run's hold-back also waits only for such a one,
	 * so a stream and one call agree). */
	if (p->lead_bits && i > 0 && (v = b64_val(s[i - 1], p->url)) >= 0 &&
	    ((unsigned)v & ((1u << p->lead_bits) - 1)) == p->lead_val) {
		unsigned m = (1u << p->lead_bits) - 1;
		s[i - 1] = (uint8_t)alpha[((unsigned)v & ~m) | p->lead_rep];
	}
	size_t t = i + p->nf;
	if (p->tail_bits && t < n && (v = b64_val(s[t], p->url)) >= 0) {
		unsigned m = ((1u << p->tail_bits) - 1) << (6 - p->tail_bits);
		s[t] = (uint8_t)alpha[((unsigned)v & ~m & 63) | p->tail_rep];
	}
}

size_t scrub_run(struct scrub *s, uint8_t *buf, size_t n, bool final, scrub_hit_fn hit, void *ctx)
{
	if (!current(s) && build(s) < 0)
		return (size_t)-1;
	if (!s->n)
		return n;
	size_t decided = n, i = 0;
	const bool *first = s->first;
	while (i < n) {
		while (i + 1 < n && !pair_may(s, buf[i], buf[i + 1]))
			i++;
		if (i + 1 == n && !first[buf[i]])
			i++;
		if (i == n)
			break;
		size_t next = i + 1;
		for (uint32_t c = s->cstart[buf[i]]; c < s->cstart[buf[i] + 1]; c++) {
			const struct sc_ent *e = &s->e[s->cand[c].ent];
			int form = s->cand[c].form, r;
			if (form < 0) {
				size_t end;
				r = match_text(buf, n, i, e->val, e->vlen, final, &end);
				if (r == S_YES) {
					size_t len = end - i;
					const char *ph = secrets_placeholder(e->s);
					size_t pl = strlen(ph);
					memset(buf + i, '*', len);
					if (len >= pl)
						memcpy(buf + i, ph, pl);
					if (hit)
						hit(ctx, e->s);
					next = end;
					break;
				}
				if (r == S_MORE && i < decided)
					decided = i;
				continue;
			}
			const struct sc_b64 *p = &e->b[form];
			r = match_b64(p, buf, n, i, final);
			if (r == S_MORE) {
				size_t at = p->lead_bits && i > 0 ? i - 1 : i;
				if (at < decided)
					decided = at;
			} else if (r == S_YES) {
				replace_b64(p, buf, n, i);
				if (hit)
					hit(ctx, e->s);
				next = i + p->nf;
				break;
			}
		}
		i = next;
	}
	if (final)
		return n;
	/* The last byte may be the character that mixes the bits of a value's
	 * first byte with the byte before: it is rewritten with the match,
	 * so it waits for the next bytes (unless interactive). */
	if (!s->interactive && decided == n && n > 0) {
		int v = b64_val(buf[n - 1], false), u = b64_val(buf[n - 1], true);
		if ((v >= 0 && s->lead[0][v]) || (u >= 0 && s->lead[1][u]))
			decided = n - 1;
	}
	return decided;
}

void scrub_set_interactive(struct scrub *s, bool on)
{
	s->interactive = on;
}

size_t scrub_holdback(struct scrub *s)
{
	if (!current(s) && build(s) < 0)
		return 0;
	return s->hold;
}

void scrub_free(struct scrub *s)
{
	if (!s)
		return;
	drop_patterns(s);
	free(s);
}
