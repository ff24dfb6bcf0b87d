/* Hidden-name patterns; see fs_hidden.h.
 *
 * Matching is fnmatch(3) with FNM_CASEFOLD, on the name (or path) as given
 * and on its folded form (fs_hidden_fold): what a case-insensitive or
 * dot-dropping host file system would take it for.  Folding only ever
 * hides more. */
#include "devices/fs_hidden.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

struct fs_hidden_pat {
	char *pat; /* without the anchoring '/' */
	/* Components when matched against the path from the root (the
	 * pattern had a leading '/' or has one inside), else 0. */
	unsigned ncomp;
	uint8_t first[32]; /* fs_hidden_first_bytes, for name patterns */
};

struct fsh {
	struct fs_hidden_pat *pats;
	size_t n;
	bool any_path; /* some pattern has ncomp > 0 */
};

/* Code points that a case-folding host (ext4 casefold, SMB, APFS, HFS+)
 * takes for plain ASCII, so that "\u017Fecrets.env" (long s) opens
 * secrets.env there: their Unicode case folding, simple upper or lower
 * case, or canonical decomposition is ASCII.  The last ones are the
 * characters HFS+ ignores in names (git refuses ".git" spelt with them for
 * the same reason); they fold to nothing.  On a directory that does fold,
 * the backend's spelling check (fs_passthrough.c) catches every other
 * spelling whatever this table says; the table keeps the guest from
 * creating such names anywhere. */
static const struct {
	const char *utf8, *ascii;
} fs_hidden_folds[] = {
	{ "\xc3\x9f", "ss" },	  /* U+00DF sharp s */
	{ "\xc4\xb0", "i" },	  /* U+0130 capital I with dot (lowercases to i) */
	{ "\xc4\xb1", "i" },	  /* U+0131 dotless i (uppercases to I) */
	{ "\xc5\xbf", "s" },	  /* U+017F long s */
	{ "\xcd\xbe", ";" },	  /* U+037E Greek question mark */
	{ "\xe1\xba\x9e", "ss" }, /* U+1E9E capital sharp s */
	{ "\xe1\xbf\xaf", "`" },  /* U+1FEF Greek varia */
	{ "\xe2\x84\xaa", "k" },  /* U+212A Kelvin sign */
	{ "\xef\xac\x80", "ff" }, /* U+FB00..FB06: Latin ligatures */
	{ "\xef\xac\x81", "fi" },
	{ "\xef\xac\x82", "fl" },
	{ "\xef\xac\x83", "ffi" },
	{ "\xef\xac\x84", "ffl" },
	{ "\xef\xac\x85", "st" },
	{ "\xef\xac\x86", "st" },
	{ "\xe2\x80\x8b", "" }, /* U+200B..200F: zero widths, marks */
	{ "\xe2\x80\x8c", "" },
	{ "\xe2\x80\x8d", "" },
	{ "\xe2\x80\x8e", "" },
	{ "\xe2\x80\x8f", "" },
	{ "\xe2\x80\xaa", "" }, /* U+202A..202E: embeddings */
	{ "\xe2\x80\xab", "" },
	{ "\xe2\x80\xac", "" },
	{ "\xe2\x80\xad", "" },
	{ "\xe2\x80\xae", "" },
	{ "\xe2\x81\xaa", "" }, /* U+206A..206F: deprecated formats */
	{ "\xe2\x81\xab", "" },
	{ "\xe2\x81\xac", "" },
	{ "\xe2\x81\xad", "" },
	{ "\xe2\x81\xae", "" },
	{ "\xe2\x81\xaf", "" },
	{ "\xef\xbb\xbf", "" }, /* U+FEFF zero width no-break space */
};

/* Drops the trailing dots and spaces of the component out[start..*len),
 * unless nothing else is left of it. */
static void fs_hidden_strip_tail(char *out, size_t start, size_t *len)
{
	size_t e = *len;
	while (e > start && (out[e - 1] == '.' || out[e - 1] == ' '))
		e--;
	if (e > start)
		*len = e;
}

/* in (a name, or a path from the root) as a folding host may read it,
 * into out, which has room for strlen(in) + 1 bytes (folding never
 * lengthens): the code points above replaced, and each component's
 * trailing dots and spaces dropped (vfat, exFAT and Windows servers drop
 * them, so "secrets.env." opens secrets.env).  ASCII case is left to
 * FNM_CASEFOLD.  Returns whether out differs from in. */
static bool fs_hidden_fold(const char *in, char *out)
{
	size_t o = 0, start = 0;

	for (size_t i = 0; in[i];) {
		size_t k = ARRAY_SIZE(fs_hidden_folds);
		if ((unsigned char)in[i] >= 0x80)
			for (k = 0; k < ARRAY_SIZE(fs_hidden_folds); k++)
				if (strncmp(in + i, fs_hidden_folds[k].utf8,
					    strlen(fs_hidden_folds[k].utf8)) == 0)
					break;
		if (k < ARRAY_SIZE(fs_hidden_folds)) {
			size_t l = strlen(fs_hidden_folds[k].ascii);
			memcpy(out + o, fs_hidden_folds[k].ascii, l);
			o += l;
			i += strlen(fs_hidden_folds[k].utf8);
			continue;
		}
		if (in[i] == '/') {
			fs_hidden_strip_tail(out, start, &o);
			start = o + 1;
		}
		out[o++] = in[i++];
	}
	fs_hidden_strip_tail(out, start, &o);
	out[o] = '\0';
	return strcmp(in, out) != 0;
}

/* Whether pattern pat matches s, or its folded form f (NULL: the same),
 * whatever the case of ASCII letters: a case-insensitive host serves
 * .ENV as .env, and hiding a harmless .ENV elsewhere costs nothing. */
static bool fs_hidden_match(const char *pat, const char *s, const char *f, int flags)
{
	flags |= FNM_CASEFOLD;
	return fnmatch(pat, s, flags) == 0 || (f && fnmatch(pat, f, flags) == 0);
}

/* The first bytes a name may have to match name pattern pat, as a bitmap
 * into first: every name of a big directory meets every pattern, and the
 * first byte rejects most at once.  A literal character in either case,
 * the members of a plain bracket expression ("[.#]"); anything else
 * (wildcards, ranges, classes, negation, escapes) allows every byte. */
static void fs_hidden_first_bytes(const char *pat, uint8_t first[32])
{
	unsigned char c = (unsigned char)pat[0];

	memset(first, 0, 32);
	if (c == '[') {
		const char *e = pat + 1;
		if (*e == ']')
			e++;
		while (*e && *e != ']' && !strchr("!^-[\\", *e))
			e++;
		if (*e == ']' && pat[1] != '!' && pat[1] != '^') {
			for (const char *m = pat + 1; m < e; m++) {
				unsigned char b = (unsigned char)*m;
				first[tolower(b) >> 3] |= (uint8_t)(1u << (tolower(b) & 7));
				first[toupper(b) >> 3] |= (uint8_t)(1u << (toupper(b) & 7));
			}
			return;
		}
	} else if (!strchr("*?\\", c)) {
		first[tolower(c) >> 3] |= (uint8_t)(1u << (tolower(c) & 7));
		first[toupper(c) >> 3] |= (uint8_t)(1u << (toupper(c) & 7));
		return;
	}
	memset(first, 0xff, 32);
}

static bool fs_hidden_may_start(const uint8_t first[32], const char *s)
{
	unsigned char c = (unsigned char)s[0];
	return first[c >> 3] & (1u << (c & 7));
}

/* Components of a path from the root ("" has none). */
static unsigned fs_hidden_depth(const char *path)
{
	unsigned n = path[0] != '\0';
	for (const char *c = path; *c; c++)
		n += *c == '/';
	return n;
}

/* Whether path (k components) matches the first k components of pattern
 * pat (which has more), whatever the ASCII case. */
static bool fs_hidden_prefix_match(const char *pat, unsigned k, const char *path)
{
	char pre[PATH_MAX];
	const char *e = pat;

	for (unsigned c = 0; c < k; c++) {
		e = strchr(e, '/');
		if (!e)
			return true; /* not reached: pat has more components */
		e++;
	}
	size_t len = (size_t)(e - pat) - 1;
	if (len >= sizeof pre)
		return true;
	memcpy(pre, pat, len);
	pre[len] = '\0';
	return fnmatch(pre, path, FNM_PATHNAME | FNM_CASEFOLD) == 0;
}

/* See fs_hidden.h.  As for lookups, the folded forms count too: what src
 * matched in either form, dst must match in the same form. */
bool fs_hidden_moves_hidden(const struct fsh *h, const char *src, const char *dst)
{
	char fsrc[PATH_MAX + NAME_MAX + 2], fdst[PATH_MAX + NAME_MAX + 2];
	unsigned ks = fs_hidden_depth(src), kd = fs_hidden_depth(dst);

	fs_hidden_fold(src, fsrc);
	fs_hidden_fold(dst, fdst);
	for (size_t i = 0; i < h->n; i++) {
		const struct fs_hidden_pat *pt = &h->pats[i];
		if (pt->ncomp <= ks)
			continue;
		bool raw = fs_hidden_prefix_match(pt->pat, ks, src);
		bool folded = fs_hidden_prefix_match(pt->pat, ks, fsrc);
		if (!raw && !folded)
			continue;
		if (kd != ks)
			return true;
		if (raw && !fs_hidden_prefix_match(pt->pat, ks, dst))
			return true;
		if (folded && !fs_hidden_prefix_match(pt->pat, ks, fdst))
			return true;
	}
	return false;
}

/* Components of pattern pat when it is matched against paths ('/'
 * separated), 0 for a pattern matched against names alone. */
static unsigned fs_hidden_components(const char *pat, bool anchored)
{
	if (!anchored && !strchr(pat, '/'))
		return 0;
	unsigned n = 1;
	for (const char *c = pat; *c; c++)
		n += *c == '/';
	return n;
}

/* Copies pattern pat into slot h->n. */
static int fs_hidden_add(struct fsh *h, const char *pat)
{
	struct fs_hidden_pat *pt = &h->pats[h->n];

	if (!pat || !pat[0])
		return -EINVAL;
	/* A leading "/" anchors the pattern at the mount root. */
	bool anchored = pat[0] == '/';
	pat += anchored;
	if (!pat[0])
		return -EINVAL;
	pt->pat = strdup(pat);
	if (!pt->pat)
		return -ENOMEM;
	pt->ncomp = fs_hidden_components(pat, anchored);
	fs_hidden_first_bytes(pat, pt->first);
	h->any_path |= pt->ncomp > 0;
	h->n++;
	return 0;
}

int fs_hidden_new(const char *const *a, size_t na, const char *const *b, size_t nb,
	    struct fsh **out)
{
	if ((na && !a) || (nb && !b) || !out)
		return -EINVAL;
	struct fsh *h = calloc(1, sizeof *h);
	if (!h)
		return -ENOMEM;
	h->pats = calloc(na + nb ? na + nb : 1, sizeof *h->pats);
	if (!h->pats) {
		free(h);
		return -ENOMEM;
	}
	for (size_t i = 0; i < na + nb; i++) {
		int rc = fs_hidden_add(h, i < na ? a[i] : b[i - na]);
		if (rc < 0) {
			fs_hidden_free(h);
			return rc;
		}
	}
	*out = h;
	return 0;
}

void fs_hidden_free(struct fsh *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n; i++)
		free(h->pats[i].pat);
	free(h->pats);
	free(h);
}

bool fs_hidden_needs_path(const struct fsh *h)
{
	return h->any_path;
}

int fs_hidden_hidden(const struct fsh *h, const char *dirrel, const char *name)
{
	char fname[NAME_MAX + 1];
	char path[PATH_MAX + NAME_MAX + 2], fpath[PATH_MAX + NAME_MAX + 2];
	const char *fn = NULL, *fp = NULL;
	bool have_path = false;

	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;
	if (fs_hidden_fold(name, fname))
		fn = fname;
	for (size_t i = 0; i < h->n; i++) {
		const struct fs_hidden_pat *pt = &h->pats[i];
		if (!pt->ncomp) {
			if (!fs_hidden_may_start(pt->first, name) &&
			    (!fn || !fs_hidden_may_start(pt->first, fn)))
				continue;
			if (fs_hidden_match(pt->pat, name, fn, 0))
				return 1;
			continue;
		}
		if (!have_path) {
			if (!dirrel || strlen(dirrel) >= PATH_MAX)
				return -ENAMETOOLONG;
			strcpy(path, dirrel);
			if (path[0])
				strcat(path, "/");
			strcat(path, name);
			if (fs_hidden_fold(path, fpath))
				fp = fpath;
			have_path = true;
		}
		if (fs_hidden_match(pt->pat, path, fp, FNM_PATHNAME))
			return 1;
	}
	return 0;
}
