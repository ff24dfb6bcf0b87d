/* Container images: manifest parsing, layer application and the store. */
#include "vmm/image.h"

#include <archive.h>
#include <archive_entry.h>
#include <bearssl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "lib/datadir.h"
#include "vmm/sandbox.h"

#define JSON_MAX_DEPTH 32
#define JSON_FILE_MAX (8u << 20)
#define PATH_DEPTH_MAX 200
#define OUTER_MEMBERS_MAX 65536
#define LINK_HOPS_MAX 8
#define XATTR_MAX 32
#define XATTR_VALUE_MAX 65536
#define DEFAULT_MAX_BYTES (64ull << 30)
#define DEFAULT_MAX_ENTRIES (4ull << 20)

#if defined(__x86_64__)
#define HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define HOST_ARCH "arm64"
#else
#define HOST_ARCH "unknown"
#endif

/* ---------------------------------------------------------------- JSON */

struct jparse {
	const char *s;
	size_t len, pos;
	struct image_json_tok *tok;
	uint32_t n, cap;
};

static void jp_ws(struct jparse *p)
{
	while (p->pos < p->len) {
		char c = p->s[p->pos];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

static int jp_new(struct jparse *p, uint8_t type, size_t start)
{
	if (p->n >= p->cap)
		return -E2BIG;
	struct image_json_tok *t = &p->tok[p->n];
	memset(t, 0, sizeof *t);
	t->type = type;
	t->start = (uint32_t)start;
	return (int)p->n++;
}

static int is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int jp_string(struct jparse *p)
{
	size_t start = ++p->pos;
	while (p->pos < p->len) {
		unsigned char c = (unsigned char)p->s[p->pos];
		if (c == '"') {
			int t = jp_new(p, IMAGE_JSON_STR, start);
			if (t < 0)
				return t;
			p->tok[t].len = (uint32_t)(p->pos - start);
			p->tok[t].next = p->n;
			p->pos++;
			return t;
		}
		if (c < 0x20)
			return -EINVAL;
		if (c == '\\') {
			if (++p->pos >= p->len)
				return -EINVAL;
			c = (unsigned char)p->s[p->pos];
			if (c == 'u') {
				if (p->len - p->pos < 5)
					return -EINVAL;
				for (int i = 1; i <= 4; i++)
					if (!is_hex(p->s[p->pos + (size_t)i]))
						return -EINVAL;
				p->pos += 4;
			} else if (!c || !strchr("\"\\/bfnrt", c)) {
				return -EINVAL;
			}
		}
		p->pos++;
	}
	return -EINVAL;
}

static int jp_digits(struct jparse *p)
{
	size_t s = p->pos;
	while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
		p->pos++;
	return p->pos > s ? 0 : -EINVAL;
}

static int jp_number(struct jparse *p)
{
	size_t start = p->pos;
	if (p->s[p->pos] == '-')
		p->pos++;
	if (p->pos < p->len && p->s[p->pos] == '0')
		p->pos++;
	else if (jp_digits(p) < 0)
		return -EINVAL;
	if (p->pos < p->len && p->s[p->pos] == '.') {
		p->pos++;
		if (jp_digits(p) < 0)
			return -EINVAL;
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
		p->pos++;
		if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		if (jp_digits(p) < 0)
			return -EINVAL;
	}
	int t = jp_new(p, IMAGE_JSON_NUM, start);
	if (t < 0)
		return t;
	p->tok[t].len = (uint32_t)(p->pos - start);
	p->tok[t].next = p->n;
	return t;
}

static int jp_value(struct jparse *p, int depth)
{
	jp_ws(p);
	if (p->pos >= p->len)
		return -EINVAL;
	char c = p->s[p->pos];
	if (c == '"')
		return jp_string(p);
	if (c == '-' || (c >= '0' && c <= '9'))
		return jp_number(p);
	if (c != '{' && c != '[') {
		static const char *const lits[] = { "true", "false", "null" };
		for (size_t i = 0; i < 3; i++) {
			size_t l = strlen(lits[i]);
			if (p->len - p->pos >= l && memcmp(p->s + p->pos, lits[i], l) == 0) {
				int t = jp_new(p, IMAGE_JSON_LIT, p->pos);
				if (t < 0)
					return t;
				p->tok[t].len = (uint32_t)l;
				p->tok[t].next = p->n;
				p->pos += l;
				return t;
			}
		}
		return -EINVAL;
	}
	if (depth >= JSON_MAX_DEPTH)
		return -EINVAL;
	char close = c == '{' ? '}' : ']';
	int t = jp_new(p, c == '{' ? IMAGE_JSON_OBJ : IMAGE_JSON_ARR, p->pos);
	if (t < 0)
		return t;
	p->pos++;
	jp_ws(p);
	if (p->pos < p->len && p->s[p->pos] == close) {
		p->pos++;
	} else {
		for (;;) {
			if (c == '{') {
				jp_ws(p);
				if (p->pos >= p->len || p->s[p->pos] != '"')
					return -EINVAL;
				int k = jp_string(p);
				if (k < 0)
					return k;
				jp_ws(p);
				if (p->pos >= p->len || p->s[p->pos] != ':')
					return -EINVAL;
				p->pos++;
			}
			int v = jp_value(p, depth + 1);
			if (v < 0)
				return v;
			p->tok[t].count++;
			jp_ws(p);
			if (p->pos >= p->len)
				return -EINVAL;
			if (p->s[p->pos] == ',') {
				p->pos++;
				continue;
			}
			if (p->s[p->pos] != close)
				return -EINVAL;
			p->pos++;
			break;
		}
	}
	p->tok[t].len = (uint32_t)(p->pos - p->tok[t].start);
	p->tok[t].next = p->n;
	return t;
}

int image_json_parse(struct image_json *j, const char *src, size_t len,
		     struct image_json_tok *tok, uint32_t cap)
{
	if (len > INT32_MAX)
		return -E2BIG;
	struct jparse p = { .s = src, .len = len, .tok = tok, .cap = cap };
	int r = jp_value(&p, 0);
	if (r < 0)
		return r;
	jp_ws(&p);
	if (p.pos != len)
		return -EINVAL;
	j->src = src;
	j->tok = tok;
	j->n = p.n;
	return 0;
}

static int json_key_is(const struct image_json *j, uint32_t t, const char *key)
{
	char buf[128];
	return image_json_str(j, (int)t, buf, sizeof buf) == 0 && strcmp(buf, key) == 0;
}

int image_json_get(const struct image_json *j, int obj, const char *key)
{
	if (obj < 0 || (uint32_t)obj >= j->n || j->tok[obj].type != IMAGE_JSON_OBJ)
		return -ENOENT;
	uint32_t i = (uint32_t)obj + 1;
	for (uint32_t k = 0; k < j->tok[obj].count; k++) {
		if (json_key_is(j, i, key))
			return (int)i + 1;
		i = j->tok[i + 1].next;
	}
	return -ENOENT;
}

int image_json_elem(const struct image_json *j, int arr, uint32_t idx)
{
	if (arr < 0 || (uint32_t)arr >= j->n || j->tok[arr].type != IMAGE_JSON_ARR ||
	    idx >= j->tok[arr].count)
		return -ENOENT;
	uint32_t i = (uint32_t)arr + 1;
	while (idx--)
		i = j->tok[i].next;
	return (int)i;
}

static unsigned hex4(const char *s)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		v = v << 4 | (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
	}
	return v;
}

int image_json_str(const struct image_json *j, int t, char *out, size_t len)
{
	if (t < 0 || (uint32_t)t >= j->n || j->tok[t].type != IMAGE_JSON_STR || !len)
		return -EINVAL;
	/* The parser checked every escape, so the look-aheads stay inside. */
	const char *s = j->src + j->tok[t].start;
	size_t n = j->tok[t].len, o = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned cp = (unsigned char)s[i];
		int unicode = 0;
		if (cp == '\\') {
			char e = s[++i];
			switch (e) {
			case 'b': cp = '\b'; break;
			case 'f': cp = '\f'; break;
			case 'n': cp = '\n'; break;
			case 'r': cp = '\r'; break;
			case 't': cp = '\t'; break;
			case 'u':
				unicode = 1;
				cp = hex4(s + i + 1);
				i += 4;
				if (cp >= 0xd800 && cp < 0xdc00 && i + 6 < n && s[i + 1] == '\\' &&
				    s[i + 2] == 'u') {
					unsigned lo = hex4(s + i + 3);
					if (lo >= 0xdc00 && lo < 0xe000) {
						cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
						i += 6;
					}
				}
				if (!cp)
					return -EINVAL;
				break;
			default: cp = (unsigned char)e; break;
			}
		}
		unsigned char u[4];
		size_t k;
		if (cp < 0x80 || !unicode) {
			u[0] = (unsigned char)cp;
			k = 1;
		} else if (cp < 0x800) {
			u[0] = (unsigned char)(0xc0 | cp >> 6);
			u[1] = (unsigned char)(0x80 | (cp & 0x3f));
			k = 2;
		} else if (cp < 0x10000) {
			u[0] = (unsigned char)(0xe0 | cp >> 12);
			u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
			u[2] = (unsigned char)(0x80 | (cp & 0x3f));
			k = 3;
		} else {
			u[0] = (unsigned char)(0xf0 | cp >> 18);
			u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
			u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
			u[3] = (unsigned char)(0x80 | (cp & 0x3f));
			k = 4;
		}
		if (o + k >= len)
			return -ENAMETOOLONG;
		memcpy(out + o, u, k);
		o += k;
	}
	out[o] = 0;
	return 0;
}

/* Parses BUF with a token array sized for it (every token but the first
 * takes at least two bytes of text). */
static int json_load(struct image_json *j, const char *buf, size_t len)
{
	if (len > JSON_FILE_MAX)
		return -E2BIG;
	uint32_t cap = (uint32_t)(len / 2 + 2);
	struct image_json_tok *tok = calloc(cap, sizeof *tok);
	if (!tok)
		return -ENOMEM;
	int r = image_json_parse(j, buf, len, tok, cap);
	if (r < 0)
		free(tok);
	return r;
}

static int json_str_at(const struct image_json *j, int obj, const char *key, char *out,
		       size_t len)
{
	int t = image_json_get(j, obj, key);
	return t < 0 ? t : image_json_str(j, t, out, len);
}

/* ----------------------------------------------------------- Manifests */

static int hex64_ok(const char *h)
{
	for (int i = 0; i < IMAGE_HEX_LEN; i++)
		if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
			return 0;
	return h[IMAGE_HEX_LEN] == 0;
}

/* "sha256:HEX" into HEX; other algorithms are refused. */
static int digest_hex(const char *d, char *hex)
{
	if (strncmp(d, "sha256:", 7) != 0 || !hex64_ok(d + 7))
		return -EINVAL;
	memcpy(hex, d + 7, IMAGE_HEX_LEN + 1);
	return 0;
}

/* The sha256 a member path names: blobs/sha256/HEX or HEX.json. */
static void member_sha(const char *path, char *hex)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	hex[0] = 0;
	char tmp[IMAGE_HEX_LEN + 1];
	if (strlen(base) < IMAGE_HEX_LEN)
		return;
	memcpy(tmp, base, IMAGE_HEX_LEN);
	tmp[IMAGE_HEX_LEN] = 0;
	if (!hex64_ok(tmp))
		return;
	const char *rest = base + IMAGE_HEX_LEN;
	if ((*rest == 0 && strncmp(path, "blobs/sha256/", 13) == 0) || strcmp(rest, ".json") == 0)
		memcpy(hex, tmp, sizeof tmp);
}

static int member_path(const struct image_json *j, int t, char *out)
{
	char raw[IMAGE_MEMBER_MAX];
	int r = image_json_str(j, t, raw, sizeof raw);
	if (r < 0)
		return -EINVAL;
	const char *p = raw;
	while (p[0] == '.' && p[1] == '/')
		p += 2;
	if (!*p || *p == '/')
		return -EINVAL;
	strcpy(out, p);
	return 0;
}

static void add_tag(struct image_manifest *m, const char *repo)
{
	char ref[IMAGE_REF_MAX];
	if (m->ntags >= IMAGE_MAX_TAGS || image_ref_from_repo(repo, ref, sizeof ref) < 0)
		return;
	for (unsigned i = 0; i < m->ntags; i++)
		if (strcmp(m->tag[i], ref) == 0)
			return;
	strcpy(m->tag[m->ntags++], ref);
}

int image_parse_docker_manifest(const char *buf, size_t len, struct image_manifest *out,
				unsigned max)
{
	struct image_json j;
	int r = json_load(&j, buf, len);
	if (r < 0)
		return r;
	r = -EINVAL;
	if (j.tok[0].type != IMAGE_JSON_ARR || j.tok[0].count == 0)
		goto out;
	if (j.tok[0].count > max) {
		r = -E2BIG;
		goto out;
	}
	for (uint32_t i = 0; i < j.tok[0].count; i++) {
		struct image_manifest *m = &out[i];
		memset(m, 0, sizeof *m);
		int o = image_json_elem(&j, 0, i);
		int c = image_json_get(&j, o, "Config");
		if (c < 0 || member_path(&j, c, m->config) < 0)
			goto out;
		member_sha(m->config, m->config_sha);
		int tags = image_json_get(&j, o, "RepoTags");
		for (uint32_t k = 0; tags >= 0 && j.tok[tags].type == IMAGE_JSON_ARR &&
				     k < j.tok[tags].count; k++) {
			char repo[512];
			if (image_json_str(&j, image_json_elem(&j, tags, k), repo, sizeof repo) == 0)
				add_tag(m, repo);
		}
		int layers = image_json_get(&j, o, "Layers");
		if (layers < 0 || j.tok[layers].type != IMAGE_JSON_ARR)
			goto out;
		if (j.tok[layers].count > IMAGE_MAX_LAYERS) {
			r = -E2BIG;
			goto out;
		}
		for (uint32_t k = 0; k < j.tok[layers].count; k++) {
			if (member_path(&j, image_json_elem(&j, layers, k), m->layer[k]) < 0)
				goto out;
			member_sha(m->layer[k], m->layer_sha[k]);
		}
		m->nlayers = j.tok[layers].count;
	}
	r = (int)j.tok[0].count;
out:
	free(j.tok);
	return r;
}

static int media_kind(const char *mt)
{
	if (!*mt || strcmp(mt, "application/vnd.oci.image.manifest.v1+json") == 0 ||
	    strcmp(mt, "application/vnd.docker.distribution.manifest.v2+json") == 0)
		return 0;
	if (strcmp(mt, "application/vnd.oci.image.index.v1+json") == 0 ||
	    strcmp(mt, "application/vnd.docker.distribution.manifest.list.v2+json") == 0)
		return 1;
	return -1;
}

int image_parse_oci_index(const char *buf, size_t len, struct image_oci_desc *out)
{
	struct image_json j;
	int r = json_load(&j, buf, len);
	if (r < 0)
		return r;
	int best_score = 0;
	int list = image_json_get(&j, 0, "manifests");
	r = -EINVAL;
	if (list < 0 || j.tok[list].type != IMAGE_JSON_ARR)
		goto out;
	r = -ENOENT;
	memset(out, 0, sizeof *out);
	for (uint32_t i = 0; i < j.tok[list].count; i++) {
		int d = image_json_elem(&j, list, i);
		char mt[128] = "", dig[80], os[32] = "", arch[32] = "";
		if (image_json_get(&j, d, "mediaType") >= 0 &&
		    json_str_at(&j, d, "mediaType", mt, sizeof mt) < 0)
			continue;
		int kind = media_kind(mt);
		char hex[IMAGE_HEX_LEN + 1];
		if (kind < 0 || json_str_at(&j, d, "digest", dig, sizeof dig) < 0 ||
		    digest_hex(dig, hex) < 0)
			continue;
		int plat = image_json_get(&j, d, "platform");
		int score = 2;
		if (plat >= 0) {
			json_str_at(&j, plat, "os", os, sizeof os);
			json_str_at(&j, plat, "architecture", arch, sizeof arch);
			if (strcmp(os, "unknown") == 0 || strcmp(arch, "unknown") == 0)
				continue;
			score = strcmp(os, "linux") == 0 && strcmp(arch, HOST_ARCH) == 0 ? 3 : 1;
		}
		if (score <= best_score)
			continue;
		best_score = score;
		memcpy(out->sha, hex, sizeof hex);
		out->is_index = kind;
		out->ref[0] = 0;
		int ann = image_json_get(&j, d, "annotations");
		if (json_str_at(&j, ann, "io.containerd.image.name", out->ref, sizeof out->ref) < 0 &&
		    json_str_at(&j, ann, "org.opencontainers.image.ref.name", out->ref,
				sizeof out->ref) < 0)
			out->ref[0] = 0;
		r = 0;
	}
out:
	free(j.tok);
	return r;
}

static int descriptor(const struct image_json *j, int d, char *path, char *hex)
{
	char dig[80];
	if (json_str_at(j, d, "digest", dig, sizeof dig) < 0 || digest_hex(dig, hex) < 0)
		return -EINVAL;
	memcpy(path, "blobs/sha256/", 13);
	memcpy(path + 13, hex, IMAGE_HEX_LEN + 1);
	return 0;
}

int image_parse_oci_manifest(const char *buf, size_t len, struct image_manifest *out)
{
	struct image_json j;
	int r = json_load(&j, buf, len);
	if (r < 0)
		return r;
	memset(out, 0, sizeof *out);
	r = -EINVAL;
	int layers = image_json_get(&j, 0, "layers");
	if (descriptor(&j, image_json_get(&j, 0, "config"), out->config, out->config_sha) < 0 ||
	    layers < 0 || j.tok[layers].type != IMAGE_JSON_ARR)
		goto out;
	if (j.tok[layers].count > IMAGE_MAX_LAYERS) {
		r = -E2BIG;
		goto out;
	}
	for (uint32_t k = 0; k < j.tok[layers].count; k++)
		if (descriptor(&j, image_json_elem(&j, layers, k), out->layer[k],
			       out->layer_sha[k]) < 0)
			goto out;
	out->nlayers = j.tok[layers].count;
	r = 0;
out:
	free(j.tok);
	return r;
}

int image_parse_diff_ids(const char *buf, size_t len, char (*hex)[IMAGE_HEX_LEN + 1],
			 unsigned max)
{
	struct image_json j;
	int r = json_load(&j, buf, len);
	if (r < 0)
		return r;
	r = -EINVAL;
	int ids = image_json_get(&j, image_json_get(&j, 0, "rootfs"), "diff_ids");
	if (ids < 0 || j.tok[ids].type != IMAGE_JSON_ARR || j.tok[ids].count > max)
		goto out;
	for (uint32_t k = 0; k < j.tok[ids].count; k++) {
		char dig[80];
		if (image_json_str(&j, image_json_elem(&j, ids, k), dig, sizeof dig) < 0 ||
		    digest_hex(dig, hex[k]) < 0)
			goto out;
	}
	r = (int)j.tok[ids].count;
out:
	free(j.tok);
	return r;
}

/* --------------------------------------------------------------- Names */

static int name_char(char c, int first)
{
	if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
		return 1;
	return !first && (c == '.' || c == '_' || c == '-');
}

static int tag_char(char c, int first)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
		return 1;
	return !first && (c == '.' || c == '-');
}

int image_ref_parse(const char *in, char *name, size_t nlen, char *tag, size_t tlen)
{
	const char *colon = strchr(in, ':');
	size_t nl = colon ? (size_t)(colon - in) : strlen(in);
	const char *t = colon ? colon + 1 : "latest";
	size_t tl = strlen(t);
	if (!nl || nl > IMAGE_NAME_MAX || nl >= nlen || !tl || tl > IMAGE_TAG_MAX || tl >= tlen)
		return -EINVAL;
	for (size_t i = 0; i < nl; i++)
		if (!name_char(in[i], i == 0))
			return -EINVAL;
	for (size_t i = 0; i < tl; i++)
		if (!tag_char(t[i], i == 0))
			return -EINVAL;
	memcpy(name, in, nl);
	name[nl] = 0;
	memcpy(tag, t, tl + 1);
	return 0;
}

int image_ref_from_repo(const char *repo, char *out, size_t len)
{
	char buf[512];
	if (strlen(repo) >= sizeof buf)
		return -EINVAL;
	strcpy(buf, repo);
	char *at = strchr(buf, '@');
	if (at)
		*at = 0;
	char *last = strrchr(buf, '/');
	last = last ? last + 1 : buf;
	char name[IMAGE_NAME_MAX + 1], tag[IMAGE_TAG_MAX + 1];
	if (image_ref_parse(last, name, sizeof name, tag, sizeof tag) < 0)
		return -EINVAL;
	if ((size_t)snprintf(out, len, "%s:%s", name, tag) >= len)
		return -EINVAL;
	return 0;
}

int image_whiteout(const char *base, char *what, size_t len)
{
	if (strncmp(base, ".wh.", 4) != 0)
		return 0;
	if (strcmp(base, ".wh..wh..opq") == 0)
		return 2;
	if (strncmp(base, ".wh..wh.", 8) == 0)
		return 3;
	const char *n = base + 4;
	if (!*n || strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || strchr(n, '/') ||
	    strlen(n) >= len)
		return -EINVAL;
	strcpy(what, n);
	return 1;
}

/* ------------------------------------------------------ Writing a tree */

__attribute__((format(printf, 3, 4)))
static int fail(struct image_ctx *ctx, int err, const char *fmt, ...)
{
	if (!ctx->err[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
		va_end(ap);
	}
	return err < 0 ? err : -EIO;
}

/* Canonical relative form of an archive path: no "./", empty or "."
 * components.  ".." anywhere and absolute paths are refused (-EPERM); ""
 * is the root itself. */
static int path_norm(const char *in, char *out, size_t len)
{
	if (in[0] == '/' && in[strspn(in, "/")])
		return -EPERM;
	size_t o = 0;
	unsigned depth = 0;
	const char *p = in;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = strchrnul(p, '/');
		size_t cl = (size_t)(e - p);
		if (cl == 1 && p[0] == '.') {
			p = e;
			continue;
		}
		if (cl == 2 && p[0] == '.' && p[1] == '.')
			return -EPERM;
		if (cl > NAME_MAX || ++depth > PATH_DEPTH_MAX || o + 1 + cl + 1 > len)
			return -ENAMETOOLONG;
		if (o)
			out[o++] = '/';
		memcpy(out + o, p, cl);
		o += cl;
		p = e;
	}
	out[o] = 0;
	return 0;
}

/* openat2 beneath DIRFD, refusing every symlink on the way (the final
 * component included), so nothing an archive laid down can redirect a
 * write to the host. */
static int open_beneath(int dirfd, const char *path, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
			   RESOLVE_NO_XDEV,
	};
	long fd = syscall(SYS_openat2, dirfd, path[0] ? path : ".", &how, sizeof how);
	return fd < 0 ? -errno : (int)fd;
}

/* A directory stream on FD, which it takes over: closed when no stream
 * can be made (NULL, out of memory). */
static DIR *dir_stream(int fd)
{
	DIR *d = fdopendir(fd);
	if (!d)
		close(fd);
	return d;
}

/* NAME in DFD as a directory stream, opened O_RDONLY | O_DIRECTORY |
 * O_CLOEXEC | oflags: NULL with errno set (openat's, or ENOMEM). */
static DIR *dir_open(int dfd, const char *name, int oflags)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | oflags);
	if (fd < 0)
		return NULL;
	DIR *d = dir_stream(fd);
	if (!d)
		errno = ENOMEM;
	return d;
}

/* Removes NAME in DFD, a whole tree if it is a directory; never follows
 * a symlink. */
static int remove_tree(int dfd, const char *name, unsigned depth)
{
	if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	if (depth > PATH_DEPTH_MAX + 8)
		return -ELOOP;
	/* Unprivileged owners may have left a directory unreadable. */
	fchmodat(dfd, name, 0700, 0);
	DIR *d = dir_open(dfd, name, O_NOFOLLOW);
	if (!d)
		return -errno;
	int fd = dirfd(d), r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		int rr = remove_tree(fd, de->d_name, depth + 1);
		if (rr < 0 && !r)
			r = rr;
	}
	closedir(d);
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && !r)
		r = -errno;
	return r;
}

struct dirfix {
	char *path;
	size_t seq;
	mode_t mode;
	struct timespec mtime;
};

struct writer {
	struct image_ctx *ctx;
	int rootfd, is_root;
	const char *what; /* "layer 2 (blobs/sha256/...)": names the culprit */
	uint64_t bytes, entries, max_bytes, max_entries;
	struct dirfix *fix;
	size_t nfix, capfix;
};

struct wmeta {
	mode_t mode;
	uid_t uid;
	gid_t gid;
	struct timespec mtime;
};

struct xat {
	const char *name;
	const void *val;
	size_t len;
};

static void writer_init(struct writer *w, struct image_ctx *ctx, int rootfd)
{
	memset(w, 0, sizeof *w);
	w->ctx = ctx;
	w->rootfd = rootfd;
	w->is_root = geteuid() == 0;
	w->max_bytes = ctx->max_bytes ? ctx->max_bytes : DEFAULT_MAX_BYTES;
	w->max_entries = ctx->max_entries ? ctx->max_entries : DEFAULT_MAX_ENTRIES;
	w->what = "image";
}

static void writer_free(struct writer *w)
{
	for (size_t i = 0; i < w->nfix; i++)
		free(w->fix[i].path);
	free(w->fix);
	w->fix = NULL;
	w->nfix = w->capfix = 0;
}

static int path_error(struct writer *w, int err, const char *path)
{
	if (err == -ELOOP || err == -EXDEV)
		return fail(w->ctx, -EPERM,
			    "%s: '%s' goes through a symlink: refusing the archive (an entry may "
			    "not write through a link laid down before it)",
			    w->what, path);
	if (err == -ENOTDIR)
		return fail(w->ctx, err, "%s: '%s': a parent is not a directory", w->what, path);
	return fail(w->ctx, err, "%s: '%s': %s", w->what, path, strerror(-err));
}

/* Opens the directory holding PATH beneath the root (creating missing
 * ones when CREATE) and points *LEAF at PATH's last component. */
static int open_parent(struct writer *w, const char *path, int create, const char **leaf)
{
	const char *slash = strrchr(path, '/');
	*leaf = slash ? slash + 1 : path;
	char dir[PATH_MAX];
	size_t dl = slash ? (size_t)(slash - path) : 0;
	memcpy(dir, path, dl);
	dir[dl] = 0;
	int fd = open_beneath(w->rootfd, dir, O_PATH | O_DIRECTORY);
	if (fd != -ENOENT || !create)
		return fd;
	fd = open_beneath(w->rootfd, "", O_PATH | O_DIRECTORY);
	char *p = dir;
	while (fd >= 0 && *p) {
		char *e = strchrnul(p, '/');
		char save = *e;
		*e = 0;
		if (mkdirat(fd, p, 0755) < 0 && errno != EEXIST) {
			int r = -errno;
			close(fd);
			return r;
		}
		int nfd = open_beneath(fd, p, O_PATH | O_DIRECTORY);
		close(fd);
		fd = nfd;
		*e = save;
		p = save ? e + 1 : e;
	}
	return fd;
}

/* Makes room for a new LEAF in PFD: removes what is there, except a
 * directory when KEEP_DIR (returns 1 then). */
static int clear_leaf(int pfd, const char *leaf, int keep_dir)
{
	struct stat st;
	if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(st.st_mode))
		return keep_dir ? 1 : remove_tree(pfd, leaf, 0);
	return unlinkat(pfd, leaf, 0) < 0 ? -errno : 0;
}

static int count_entry(struct writer *w)
{
	if (++w->entries > w->max_entries)
		return fail(w->ctx, -EFBIG, "%s: more than %llu entries: refusing the image",
			    w->what, (unsigned long long)w->max_entries);
	return 0;
}

static void set_xattrs(struct writer *w, int fd, const struct xat *x, unsigned nx)
{
	for (unsigned i = 0; i < nx; i++) {
		if (strncmp(x[i].name, "user.", 5) != 0 &&
		    strcmp(x[i].name, "security.capability") != 0)
			continue;
		if (fsetxattr(fd, x[i].name, x[i].val, x[i].len, 0) < 0)
			w->ctx->xattrs_skipped++;
	}
}

/* Owner, then mode (a chown clears set-id bits), then xattrs (a chown
 * clears security.capability), then times. */
static void set_meta_fd(struct writer *w, int fd, const struct wmeta *m, const struct xat *x,
			unsigned nx, int times)
{
	if (w->is_root) {
		if (fchown(fd, m->uid, m->gid) < 0)
			w->ctx->owners_skipped++;
	} else if (m->uid != geteuid() || m->gid != getegid()) {
		w->ctx->owners_skipped++;
	}
	fchmod(fd, m->mode & 07777);
	set_xattrs(w, fd, x, nx);
	if (times) {
		struct timespec ts[2] = { m->mtime, m->mtime };
		futimens(fd, ts);
	}
}

typedef ssize_t (*reader_fn)(void *arg, void *buf, size_t len);

static int wr_file(struct writer *w, const char *path, const struct wmeta *m,
		   const struct xat *x, unsigned nx, reader_fn rd, void *arg)
{
	const char *leaf;
	int pfd = open_parent(w, path, 1, &leaf);
	if (pfd < 0)
		return path_error(w, pfd, path);
	int r = clear_leaf(pfd, leaf, 0);
	int fd = -1;
	if (r == 0) {
		fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			r = -errno;
	}
	close(pfd);
	if (r < 0)
		return path_error(w, r, path);
	static char buf[1 << 16];
	for (;;) {
		ssize_t n = rd(arg, buf, sizeof buf);
		if (n < 0) {
			r = fail(w->ctx, (int)n, "%s: reading '%s' failed", w->what, path);
			break;
		}
		if (n == 0)
			break;
		w->bytes += (uint64_t)n;
		if (w->bytes > w->max_bytes) {
			r = fail(w->ctx, -EFBIG, "%s: more than %llu bytes of files: refusing the image",
				 w->what, (unsigned long long)w->max_bytes);
			break;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t k = write(fd, buf + off, (size_t)(n - off));
			if (k < 0) {
				r = fail(w->ctx, -errno, "writing '%s': %s", path, strerror(errno));
				break;
			}
			off += k;
		}
		if (r < 0)
			break;
	}
	if (r >= 0)
		set_meta_fd(w, fd, m, x, nx, 1);
	close(fd);
	return r < 0 ? r : 0;
}

static int fix_add(struct writer *w, const char *path, const struct wmeta *m)
{
	if (w->nfix == w->capfix) {
		size_t cap = w->capfix ? w->capfix * 2 : 64;
		struct dirfix *n = realloc(w->fix, cap * sizeof *n);
		if (!n)
			return -ENOMEM;
		w->fix = n;
		w->capfix = cap;
	}
	char *p = strdup(path);
	if (!p)
		return -ENOMEM;
	w->fix[w->nfix] = (struct dirfix){ p, w->nfix, m->mode, m->mtime };
	w->nfix++;
	return 0;
}

static int wr_dir(struct writer *w, const char *path, const struct wmeta *m,
		  const struct xat *x, unsigned nx)
{
	const char *leaf;
	int pfd = open_parent(w, path, 1, &leaf);
	if (pfd < 0)
		return path_error(w, pfd, path);
	int r = clear_leaf(pfd, leaf, 1);
	if (r == 0 && mkdirat(pfd, leaf, 0700) < 0)
		r = -errno;
	int fd = -1;
	if (r >= 0 && (fd = openat(pfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		r = -errno;
	close(pfd);
	if (r < 0)
		return path_error(w, r, path);
	/* Mode and time wait for fix_apply: a read-only directory must still
	 * take its children, and every child changes the time. */
	struct wmeta own = *m;
	own.mode = 0700;
	set_meta_fd(w, fd, &own, x, nx, 0);
	close(fd);
	return fix_add(w, path, m) < 0 ? fail(w->ctx, -ENOMEM, "out of memory") : 0;
}

static int fix_cmp(const void *a, const void *b)
{
	const struct dirfix *x = a, *y = b;
	int c = strcmp(x->path, y->path);
	return c ? c : (x->seq < y->seq ? -1 : x->seq > y->seq);
}

/* Gives directories their modes and times, deepest first (a parent that
 * is not writable for its owner comes last) and the last word for a path
 * that appeared more than once. */
static void fix_apply(struct writer *w)
{
	if (w->nfix)
		qsort(w->fix, w->nfix, sizeof *w->fix, fix_cmp);
	for (size_t i = w->nfix; i-- > 0;) {
		if (i + 1 < w->nfix && strcmp(w->fix[i].path, w->fix[i + 1].path) == 0)
			continue;
		int fd = open_beneath(w->rootfd, w->fix[i].path, O_RDONLY | O_DIRECTORY);
		if (fd < 0)
			continue; /* removed by a later layer */
		fchmod(fd, w->fix[i].mode & 07777);
		struct timespec ts[2] = { w->fix[i].mtime, w->fix[i].mtime };
		futimens(fd, ts);
		close(fd);
	}
	writer_free(w);
}

/* A symlink to TARGET or, with TARGET NULL, a FIFO; either gets the
 * entry's owner and mtime, on itself, not on what a link names. */
static int wr_special(struct writer *w, const char *path, const char *target,
		      const struct wmeta *m)
{
	const char *leaf;
	int pfd = open_parent(w, path, 1, &leaf);
	if (pfd < 0)
		return path_error(w, pfd, path);
	int r = clear_leaf(pfd, leaf, 0);
	if (r == 0 && (target ? symlinkat(target, pfd, leaf)
			      : mknodat(pfd, leaf, S_IFIFO | (m->mode & 0777), 0)) < 0)
		r = -errno;
	if (r == 0) {
		if (w->is_root && fchownat(pfd, leaf, m->uid, m->gid, AT_SYMLINK_NOFOLLOW) < 0)
			w->ctx->owners_skipped++;
		struct timespec ts[2] = { m->mtime, m->mtime };
		utimensat(pfd, leaf, ts, AT_SYMLINK_NOFOLLOW);
	}
	close(pfd);
	return r < 0 ? path_error(w, r, path) : 0;
}

/* A hard link to TARGET, an earlier entry: both resolved beneath the root,
 * so a link can only ever join two files of the image. */
static int wr_link(struct writer *w, const char *path, const char *target)
{
	const char *leaf, *tleaf;
	int tfd = open_parent(w, target, 0, &tleaf);
	if (tfd < 0)
		return tfd == -ENOENT ? fail(w->ctx, -ENOENT, "%s: hard link '%s' to missing '%s'",
					     w->what, path, target)
				      : path_error(w, tfd, target);
	int pfd = open_parent(w, path, 1, &leaf);
	if (pfd < 0) {
		close(tfd);
		return path_error(w, pfd, path);
	}
	int r = 0;
	if (strcmp(path, target) != 0) {
		r = clear_leaf(pfd, leaf, 0);
		if (r == 0 && linkat(tfd, tleaf, pfd, leaf, 0) < 0)
			r = -errno;
	}
	close(pfd);
	close(tfd);
	if (r < 0)
		return fail(w->ctx, r, "%s: hard link '%s' to '%s': %s", w->what, path, target,
			    strerror(-r));
	return 0;
}

/* ---------------------------------------------------------------- Layers */

static int layer_open(struct writer *w, int at, const char *name, struct archive **out)
{
	int fd = openat(at, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(w->ctx, -errno, "%s: %s", w->what, strerror(errno));
	struct archive *a = archive_read_new();
	if (!a) {
		close(fd);
		return fail(w->ctx, -ENOMEM, "out of memory");
	}
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_empty(a);
	if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK) {
		int r = fail(w->ctx, -EINVAL, "%s: not a tar: %s", w->what, archive_error_string(a));
		archive_read_free(a);
		close(fd);
		return r;
	}
	/* libarchive reads FD but leaves closing it to us. */
	*out = a;
	return fd;
}

static void layer_close(struct archive *a, int fd)
{
	archive_read_free(a);
	close(fd);
}

static int entry_path(struct writer *w, struct archive_entry *e, char *out, size_t len)
{
	const char *raw = archive_entry_pathname(e);
	if (!raw)
		return fail(w->ctx, -EINVAL, "%s: an entry has no usable name", w->what);
	int r = path_norm(raw, out, len);
	if (r == -EPERM)
		return fail(w->ctx, r, "%s: entry '%s' %s: refusing the archive", w->what, raw,
			    raw[0] == '/' ? "has an absolute path" : "climbs out with '..'");
	if (r < 0)
		return fail(w->ctx, r, "%s: entry name too long or too deep", w->what);
	return 0;
}

/* Splits P into its directory (into DIR) and last component. */
static const char *split_dir(const char *p, char *dir)
{
	const char *slash = strrchr(p, '/');
	size_t dl = slash ? (size_t)(slash - p) : 0;
	memcpy(dir, p, dl);
	dir[dl] = 0;
	return slash ? slash + 1 : p;
}

/* One pass over a layer's entries: FN gets each one with its normalised
 * path P; a non-zero return ends the pass with it. */
static int layer_pass(struct writer *w, int at, const char *name,
		      int (*fn)(struct writer *w, struct archive *a, struct archive_entry *e,
				const char *p))
{
	struct archive *a = NULL;
	int fd = layer_open(w, at, name, &a);
	if (fd < 0)
		return fd;
	struct archive_entry *e;
	int r = 0, ar;
	while (r == 0 && (ar = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		char p[PATH_MAX];
		r = entry_path(w, e, p, sizeof p);
		if (r == 0)
			r = fn(w, a, e, p);
	}
	if (r == 0 && ar != ARCHIVE_EOF)
		r = fail(w->ctx, -EINVAL, "%s: %s", w->what, archive_error_string(a));
	layer_close(a, fd);
	return r;
}

/* A layer's whiteouts only hide what the layers below it brought, so they
 * all go before any of its files are written (a pass of their own). */
static int whiteout_entry(struct writer *w, struct archive *a, struct archive_entry *e,
			  const char *p)
{
	char dir[PATH_MAX], what[NAME_MAX + 1];
	int k = image_whiteout(split_dir(p, dir), what, sizeof what);
	if (k < 0)
		return fail(w->ctx, -EINVAL, "%s: bad whiteout '%s'", w->what, p);
	if (k != 1 && k != 2)
		return 0;
	int dfd = open_beneath(w->rootfd, dir, O_RDONLY | O_DIRECTORY);
	if (dfd == -ENOENT)
		return 0;
	if (dfd < 0)
		return path_error(w, dfd, p);
	int r = 0;
	if (k == 1) {
		r = clear_leaf(dfd, what, 0);
		close(dfd);
	} else {
		DIR *d = dir_stream(dfd);
		if (!d)
			return -ENOMEM;
		struct dirent *de;
		while (r == 0 && (de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				r = remove_tree(dirfd(d), de->d_name, 0);
		closedir(d);
	}
	return r < 0 ? fail(w->ctx, r, "%s: whiteout '%s': %s", w->what, p, strerror(-r)) : 0;
}

static ssize_t archive_reader(void *arg, void *buf, size_t len)
{
	la_ssize_t n = archive_read_data(arg, buf, len);
	return n < 0 ? -EIO : (ssize_t)n;
}

static unsigned entry_xattrs(struct archive_entry *e, struct xat *x)
{
	unsigned n = 0;
	archive_entry_xattr_reset(e);
	const char *name;
	const void *val;
	size_t size;
	while (n < XATTR_MAX && archive_entry_xattr_next(e, &name, &val, &size) == ARCHIVE_OK)
		if (name && size <= XATTR_VALUE_MAX)
			x[n++] = (struct xat){ name, val, size };
	return n;
}

static int layer_entry(struct writer *w, struct archive *a, struct archive_entry *e,
		       const char *p)
{
	char dir[PATH_MAX], what[NAME_MAX + 1];
	int r = count_entry(w);
	if (r < 0)
		return r;
	if (!p[0] || image_whiteout(split_dir(p, dir), what, sizeof what) != 0)
		return 0;
	struct wmeta m = {
		.mode = archive_entry_perm(e),
		.uid = (uid_t)archive_entry_uid(e),
		.gid = (gid_t)archive_entry_gid(e),
		.mtime = { archive_entry_mtime(e), archive_entry_mtime_nsec(e) },
	};
	struct xat x[XATTR_MAX];
	unsigned nx = entry_xattrs(e, x);
	const char *hl = archive_entry_hardlink(e);
	if (hl) {
		char t[PATH_MAX];
		if (path_norm(hl, t, sizeof t) < 0)
			return fail(w->ctx, -EPERM, "%s: hard link '%s' points outside the image ('%s'): "
				    "refusing the archive", w->what, p, hl);
		return wr_link(w, p, t);
	}
	switch (archive_entry_filetype(e)) {
	case AE_IFREG: return wr_file(w, p, &m, x, nx, archive_reader, a);
	case AE_IFDIR: return wr_dir(w, p, &m, x, nx);
	case AE_IFLNK: {
		const char *t = archive_entry_symlink(e);
		if (!t || !*t || strlen(t) >= PATH_MAX)
			return fail(w->ctx, -EINVAL, "%s: symlink '%s' has no usable target", w->what, p);
		return wr_special(w, p, t, &m);
	}
	case AE_IFIFO: return wr_special(w, p, NULL, &m);
	case AE_IFCHR:
	case AE_IFBLK: w->ctx->devices_skipped++; return 0;
	default: return 0;
	}
}

static int apply_layer(struct writer *w, int at, const char *name)
{
	int r = layer_pass(w, at, name, whiteout_entry);
	return r < 0 ? r : layer_pass(w, at, name, layer_entry);
}

int image_apply_layer(struct image_ctx *ctx, int rootfd, const char *path)
{
	struct writer w;
	writer_init(&w, ctx, rootfd);
	w.what = path;
	int r = apply_layer(&w, AT_FDCWD, path);
	if (r == 0)
		fix_apply(&w);
	writer_free(&w);
	return r;
}

/* ----------------------------------------------------------------- Store */

struct store {
	char dir[PATH_MAX];
	int fd;
};

int image_store_dir(char *buf, size_t len)
{
	const char *e = getenv("KBOX_IMAGE_DIR");
	int n;
	if (e && *e) {
		n = snprintf(buf, len, "%s", e);
	} else if ((e = getenv("XDG_DATA_HOME")) && e[0] == '/') {
		n = snprintf(buf, len, "%s/kbox/images", e);
	} else {
		e = getenv("HOME");
		if (!e || !*e)
			return -ENOENT;
		n = snprintf(buf, len, "%s/.local/share/kbox/images", e);
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int store_open(struct image_ctx *ctx, struct store *st, int create)
{
	st->fd = -1;
	int r = image_store_dir(st->dir, sizeof st->dir);
	if (r < 0)
		return fail(ctx, r, "no image store: set KBOX_IMAGE_DIR or HOME");
	if (create && (r = dd_mkdirs(st->dir)) < 0)
		return fail(ctx, r, "cannot create the image store %s: %s", st->dir, strerror(-r));
	st->fd = open(st->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->fd < 0)
		return errno == ENOENT && !create ? -ENOENT
						  : fail(ctx, -errno, "image store %s: %s", st->dir,
							 strerror(errno));
	static const char *const sub[] = { "rootfs", "meta", "refs", "tmp" };
	for (size_t i = 0; create && i < 4; i++)
		if (mkdirat(st->fd, sub[i], 0700) < 0 && errno != EEXIST)
			return fail(ctx, -errno, "image store %s/%s: %s", st->dir, sub[i],
				    strerror(errno));
	return 0;
}

static void store_close(struct store *st)
{
	if (st->fd >= 0)
		close(st->fd);
	st->fd = -1;
}

/* The store-wide lock: commits and removals take it, so a name and the
 * rootfs it names always change together. */
static int store_lock(struct image_ctx *ctx, struct store *st)
{
	int fd = openat(st->fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		int r = fail(ctx, -errno, "locking the image store: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return r;
	}
	return fd;
}

static void rand_name(char *buf, size_t len, const char *prefix)
{
	uint32_t v = 0;
	if (getrandom(&v, sizeof v, 0) != sizeof v)
		v = (uint32_t)time(NULL) ^ (uint32_t)clock();
	snprintf(buf, len, "%s-%d-%08x", prefix, (int)getpid(), v);
}

/* Work dirs of loads that died: their flock is free (or, for a removal in
 * progress and a dir not locked yet, they are old). */
static void tmp_sweep(struct store *st)
{
	DIR *d = dir_open(st->fd, "tmp", 0);
	if (!d)
		return;
	int tfd = dirfd(d);
	struct dirent *de;
	time_t now = time(NULL);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		struct stat sb;
		if (fstatat(tfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || now - sb.st_mtime < 60)
			continue;
		char lk[NAME_MAX + 8];
		snprintf(lk, sizeof lk, "%s/.lock", de->d_name);
		int lfd = openat(tfd, lk, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) < 0) {
			close(lfd);
			continue;
		}
		remove_tree(tfd, de->d_name, 0);
		if (lfd >= 0)
			close(lfd);
	}
	closedir(d);
}

struct work {
	char name[64];
	int fd, lockfd;
};

static int work_open(struct image_ctx *ctx, struct store *st, struct work *wk)
{
	wk->fd = wk->lockfd = -1;
	tmp_sweep(st);
	for (int tries = 0; tries < 16; tries++) {
		char path[80];
		rand_name(wk->name, sizeof wk->name, "load");
		snprintf(path, sizeof path, "tmp/%s", wk->name);
		if (mkdirat(st->fd, path, 0700) < 0) {
			if (errno == EEXIST)
				continue;
			return fail(ctx, -errno, "%s/%s: %s", st->dir, path, strerror(errno));
		}
		wk->fd = openat(st->fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (wk->fd < 0)
			return fail(ctx, -errno, "%s/%s: %s", st->dir, path, strerror(errno));
		wk->lockfd = openat(wk->fd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (wk->lockfd < 0 || flock(wk->lockfd, LOCK_EX) < 0)
			return fail(ctx, -errno, "%s/%s/.lock: %s", st->dir, path, strerror(errno));
		return 0;
	}
	return fail(ctx, -EEXIST, "cannot make a work directory in %s/tmp", st->dir);
}

static void work_close(struct store *st, struct work *wk)
{
	if (wk->fd >= 0) {
		char path[80];
		snprintf(path, sizeof path, "tmp/%s", wk->name);
		remove_tree(st->fd, path, 0);
		close(wk->fd);
	}
	if (wk->lockfd >= 0)
		close(wk->lockfd);
	wk->fd = wk->lockfd = -1;
}

static int read_ref(struct store *st, const char *nametag, char *id)
{
	char path[IMAGE_REF_MAX + 8], buf[IMAGE_HEX_LEN + 2];
	snprintf(path, sizeof path, "refs/%s", nametag);
	int fd = openat(st->fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof buf);
	close(fd);
	if (n < IMAGE_HEX_LEN)
		return -EINVAL;
	buf[IMAGE_HEX_LEN] = 0;
	if (!hex64_ok(buf))
		return -EINVAL;
	memcpy(id, buf, IMAGE_HEX_LEN + 1);
	return 0;
}

static int write_ref(struct image_ctx *ctx, struct store *st, const char *nametag,
		     const char *id)
{
	char tmp[96], path[IMAGE_REF_MAX + 8], line[IMAGE_HEX_LEN + 2];
	rand_name(tmp + 4, sizeof tmp - 4, "ref");
	memcpy(tmp, "tmp/", 4);
	snprintf(path, sizeof path, "refs/%s", nametag);
	snprintf(line, sizeof line, "%s\n", id);
	int fd = openat(st->fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return fail(ctx, -errno, "writing %s/%s: %s", st->dir, tmp, strerror(errno));
	int r = write(fd, line, strlen(line)) == (ssize_t)strlen(line) ? 0 : -EIO;
	close(fd);
	if (r == 0 && renameat(st->fd, tmp, st->fd, path) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(st->fd, tmp, 0);
		return fail(ctx, r, "writing %s/%s: %s", st->dir, path, strerror(-r));
	}
	return 0;
}

/* Calls FN for every ref; stops at a non-zero return. */
static int refs_each(struct store *st, int (*fn)(void *arg, const char *nametag, const char *id),
		     void *arg)
{
	DIR *d = dir_open(st->fd, "refs", 0);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	struct dirent *de;
	int r = 0;
	while (!r && (de = readdir(d))) {
		char id[IMAGE_HEX_LEN + 1];
		if (de->d_name[0] != '.' && read_ref(st, de->d_name, id) == 0)
			r = fn(arg, de->d_name, id);
	}
	closedir(d);
	return r;
}

static int ref_is(void *arg, const char *nametag, const char *id)
{
	return strcmp(id, arg) == 0;
}

struct users {
	struct stat root; /* the image's rootfs */
	char *names;
	size_t len, used;
	unsigned n;
};

static void user_of(const struct sandbox_info *info, void *arg)
{
	struct users *u = arg;
	struct stat sb;
	/* By inode: the recorded path may reach the store another way. */
	if (!info->alive || !info->image[0] || stat(info->image, &sb) < 0 ||
	    sb.st_dev != u->root.st_dev || sb.st_ino != u->root.st_ino)
		return;
	u->n++;
	if (u->names && u->used < u->len) {
		int k = snprintf(u->names + u->used, u->len - u->used, "%s%s", u->used ? ", " : "",
				 info->name);
		u->used += k > 0 ? (size_t)k : 0;
	}
}

/* The running sandboxes whose root is image ID's rootfs: their number,
 * and their names joined by ", " in names (len bytes; may be NULL). */
static unsigned image_users(struct store *st, const char *id, char *names, size_t len)
{
	struct users u = { .names = names, .len = len };
	char path[80];
	if (names && len)
		names[0] = 0;
	snprintf(path, sizeof path, "rootfs/%s", id);
	if (fstatat(st->fd, path, &u.root, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	sandbox_each(user_of, &u);
	return u.n;
}

struct ref_counter {
	const char *id;
	int *n;
};

static int ref_count(void *arg, const char *nametag, const char *id)
{
	const struct ref_counter *c = arg;
	if (strcmp(id, c->id) == 0)
		(*c->n)++;
	return 0;
}

/* Removes image ID's rootfs and metadata once no name is left for it and
 * no running sandbox uses it (deleting files under a sandbox would break
 * it; a later sweep_unused frees them); the rootfs leaves rootfs/ in one
 * rename, so it is never seen half deleted.  Called with the store lock
 * held. */
static void gc_id(struct store *st, const char *id)
{
	if (refs_each(st, ref_is, (void *)id) != 0 || image_users(st, id, NULL, 0) > 0)
		return;
	char from[80], to[128];
	snprintf(from, sizeof from, "rootfs/%s", id);
	rand_name(to + 4, sizeof to - 4, "rm");
	memcpy(to, "tmp/", 4);
	if (renameat(st->fd, from, st->fd, to) == 0)
		remove_tree(st->fd, to, 0);
	snprintf(from, sizeof from, "meta/%s", id);
	unlinkat(st->fd, from, 0);
}

/* Frees every image left without a name and no longer in use (kept by
 * gc_id while a sandbox ran on it).  Called with the store lock held. */
static void sweep_unused(struct store *st)
{
	DIR *d = dir_open(st->fd, "rootfs", 0);
	if (!d)
		return;
	char ids[64][IMAGE_HEX_LEN + 1];
	unsigned n = 0;
	struct dirent *de;
	/* Collected first: gc_id renames entries out of this directory. */
	while ((de = readdir(d)) && n < 64)
		if (strlen(de->d_name) == IMAGE_HEX_LEN && refs_each(st, ref_is, de->d_name) == 0)
			memcpy(ids[n++], de->d_name, IMAGE_HEX_LEN + 1);
	closedir(d);
	for (unsigned i = 0; i < n; i++)
		gc_id(st, ids[i]);
}

struct prefix_find {
	const char *prefix;
	size_t len;
	char id[IMAGE_HEX_LEN + 1];
	int found;
};

/* The one image whose id starts with PREFIX (after an optional
 * "sha256:"): 0, -ENOENT or -ENOTUNIQ. */
static int find_id_prefix(struct store *st, const char *prefix, char *id)
{
	if (strncmp(prefix, "sha256:", 7) == 0)
		prefix += 7;
	size_t pl = strlen(prefix);
	if (!pl || pl > IMAGE_HEX_LEN)
		return -ENOENT;
	for (size_t i = 0; i < pl; i++)
		if (!((prefix[i] >= '0' && prefix[i] <= '9') || (prefix[i] >= 'a' && prefix[i] <= 'f')))
			return -ENOENT;
	int dfd = openat(st->fd, "rootfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -ENOENT;
	DIR *d = dir_stream(dfd);
	if (!d)
		return -ENOMEM;
	int found = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!hex64_ok(de->d_name) || strncmp(de->d_name, prefix, pl) != 0)
			continue;
		if (found++)
			break;
		memcpy(id, de->d_name, IMAGE_HEX_LEN + 1);
	}
	closedir(d);
	return found == 0 ? -ENOENT : found > 1 ? -ENOTUNIQ : 0;
}

/* Looks REF up as NAME[:TAG], then as an id prefix. */
static int lookup(struct store *st, const char *ref, char *id, char *nametag)
{
	char name[IMAGE_NAME_MAX + 1], tag[IMAGE_TAG_MAX + 1];
	nametag[0] = 0;
	if (image_ref_parse(ref, name, sizeof name, tag, sizeof tag) == 0) {
		snprintf(nametag, IMAGE_REF_MAX, "%s:%s", name, tag);
		if (read_ref(st, nametag, id) == 0)
			return 0;
		nametag[0] = 0;
	}
	return find_id_prefix(st, ref, id);
}

static uint64_t tree_size(int fd, unsigned depth)
{
	DIR *d = dir_stream(fd);
	if (!d)
		return 0;
	uint64_t sum = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat sb;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		/* Each of N hard links counts 1/N: the whole file once. */
		if (S_ISREG(sb.st_mode))
			sum += (uint64_t)sb.st_size / (sb.st_nlink ? sb.st_nlink : 1);
		else if (S_ISDIR(sb.st_mode) && depth < PATH_DEPTH_MAX + 8) {
			int c = openat(dirfd(d), de->d_name,
				       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (c >= 0)
				sum += tree_size(c, depth + 1);
		}
	}
	closedir(d);
	return sum;
}

/* Puts the finished tree work/rootfs in the store as ID (unless it is
 * there already) and points every name in NAMES at it. */
static int commit(struct image_ctx *ctx, struct store *st, struct work *wk, const char *id,
		  int built, const char *source, char (*names)[IMAGE_REF_MAX], unsigned nnames)
{
	int lk = store_lock(ctx, st);
	if (lk < 0)
		return lk;
	char path[96];
	int r = 0;
	struct stat sb;
	snprintf(path, sizeof path, "rootfs/%s", id);
	int there = fstatat(st->fd, path, &sb, AT_SYMLINK_NOFOLLOW) == 0;
	if (!there && !built) {
		r = fail(ctx, -EAGAIN, "image %.12s was removed while loading: load it again", id);
	} else if (!there) {
		int rfd = openat(wk->fd, "rootfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		uint64_t size = rfd >= 0 ? tree_size(rfd, 0) : 0;
		char meta[512];
		int n = snprintf(meta, sizeof meta, "size %llu\ncreated %lld\nsource %s\n",
				 (unsigned long long)size, (long long)time(NULL), source);
		int fd = openat(wk->fd, "meta", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, meta, (size_t)n) != n)
			r = fail(ctx, -EIO, "writing the image metadata in %s/tmp", st->dir);
		if (fd >= 0)
			close(fd);
		char mpath[96];
		snprintf(mpath, sizeof mpath, "meta/%s", id);
		if (r == 0 && (renameat(wk->fd, "meta", st->fd, mpath) < 0 ||
			       renameat(wk->fd, "rootfs", st->fd, path) < 0))
			r = fail(ctx, -errno, "storing image %.12s in %s: %s", id, st->dir,
				 strerror(errno));
	}
	for (unsigned i = 0; r == 0 && i < nnames; i++) {
		char old[IMAGE_HEX_LEN + 1];
		int had = read_ref(st, names[i], old) == 0 && strcmp(old, id) != 0;
		r = write_ref(ctx, st, names[i], id);
		if (r == 0 && had)
			gc_id(st, old);
	}
	if (r == 0)
		sweep_unused(st);
	close(lk);
	if (r == 0) {
		memcpy(ctx->id, id, IMAGE_HEX_LEN + 1);
		if (nnames)
			memcpy(ctx->ref, names[0], IMAGE_REF_MAX);
		else
			ctx->ref[0] = 0;
		ctx->existed = there;
	}
	return r;
}

/* --------------------------------------------------------------- Loading */

struct member {
	char *path, *link; /* link: the member a symlink or hard link stands for */
	uint64_t size;
	char sha[IMAGE_HEX_LEN + 1];
	unsigned blob; /* staged as work/b<blob> */
};

struct load {
	struct image_ctx *ctx;
	struct store st;
	struct work wk;
	struct member *m;
	size_t n, cap;
	const char *file;
};

static void sha_hex(br_sha256_context *h, char *hex)
{
	unsigned char d[32];
	br_sha256_out(h, d);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* DIR/TARGET with ".." taken back (never above the archive root). */
static int join_rel(const char *dir, const char *target, char *out, size_t len)
{
	char buf[PATH_MAX * 2];
	snprintf(buf, sizeof buf, "%s/%s", target[0] == '/' ? "" : dir, target);
	size_t o = 0;
	for (char *p = buf, *e; *p; p = e) {
		while (*p == '/')
			p++;
		e = strchrnul(p, '/');
		size_t cl = (size_t)(e - p);
		if (!cl || (cl == 1 && *p == '.'))
			continue;
		if (cl == 2 && p[0] == '.' && p[1] == '.') {
			if (!o)
				return -EPERM;
			while (o && out[o - 1] != '/')
				o--;
			if (o)
				o--;
			continue;
		}
		if (o + 1 + cl + 1 > len)
			return -ENAMETOOLONG;
		if (o)
			out[o++] = '/';
		memcpy(out + o, p, cl);
		o += cl;
	}
	out[o] = 0;
	return 0;
}

static struct member *find_member(struct load *l, const char *path)
{
	for (int hops = 0; hops <= LINK_HOPS_MAX; hops++) {
		struct member *m = NULL;
		for (size_t i = 0; i < l->n && !m; i++)
			if (strcmp(l->m[i].path, path) == 0)
				m = &l->m[i];
		if (!m || !m->link)
			return m;
		path = m->link;
	}
	return NULL;
}

static void progress(struct image_ctx *ctx, const char *phase, uint64_t done, uint64_t total)
{
	if (ctx->progress)
		ctx->progress(ctx->progress_arg, phase, done, total);
}

static int stage_member(struct load *l, struct archive *a, struct member *m, uint64_t *staged,
			uint64_t total)
{
	char name[32];
	snprintf(name, sizeof name, "b%u", m->blob);
	int fd = openat(l->wk.fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return fail(l->ctx, -errno, "staging %s: %s", m->path, strerror(errno));
	uint64_t max = l->ctx->max_bytes ? l->ctx->max_bytes : DEFAULT_MAX_BYTES;
	br_sha256_context h;
	br_sha256_init(&h);
	static char buf[1 << 16];
	int r = 0;
	uint64_t last = 0;
	for (;;) {
		la_ssize_t n = archive_read_data(a, buf, sizeof buf);
		if (n < 0) {
			r = fail(l->ctx, -EIO, "%s: %s", l->file, archive_error_string(a));
			break;
		}
		if (n == 0)
			break;
		m->size += (uint64_t)n;
		*staged += (uint64_t)n;
		if (*staged > max) {
			r = fail(l->ctx, -EFBIG, "%s: more than %llu bytes: refusing the archive",
				 l->file, (unsigned long long)max);
			break;
		}
		br_sha256_update(&h, buf, (size_t)n);
		if (write(fd, buf, (size_t)n) != n) {
			r = fail(l->ctx, -EIO, "staging %s in %s/tmp: %s", m->path, l->st.dir,
				 strerror(errno));
			break;
		}
		if (m->size - last >= (4u << 20)) {
			last = m->size;
			progress(l->ctx, "reading", (uint64_t)archive_filter_bytes(a, -1), total);
		}
	}
	close(fd);
	sha_hex(&h, m->sha);
	return r;
}

/* Reads the whole archive once: every file is copied into the work dir
 * and hashed on the way, so the manifests can be read in any order and
 * every blob checked against its digest before any layer is applied. */
static int stage_archive(struct load *l)
{
	int fd = open(l->file, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0) {
		int r = fail(l->ctx, -errno, "%s: %s", l->file, strerror(errno));
		if (fd >= 0)
			close(fd);
		return r;
	}
	uint64_t total = (uint64_t)sb.st_size, staged = 0;
	struct archive *a = archive_read_new();
	if (!a) {
		close(fd);
		return fail(l->ctx, -ENOMEM, "out of memory");
	}
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	int r = 0, ar;
	if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK) {
		r = fail(l->ctx, -EINVAL, "%s: not a tar archive: %s", l->file, archive_error_string(a));
		goto out;
	}
	struct archive_entry *e;
	while (r == 0 && (ar = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *raw = archive_entry_pathname(e);
		char p[PATH_MAX], dir[PATH_MAX], link[PATH_MAX] = "";
		if (!raw || path_norm(raw, p, sizeof p) < 0) {
			r = fail(l->ctx, -EPERM, "%s: member '%s' has an unusable path", l->file,
				 raw ? raw : "?");
			break;
		}
		const char *hl = archive_entry_hardlink(e);
		int type = archive_entry_filetype(e);
		if (hl) {
			if (path_norm(hl, link, sizeof link) < 0)
				r = -EPERM;
		} else if (type == AE_IFLNK) {
			split_dir(p, dir);
			const char *t = archive_entry_symlink(e);
			if (!t || join_rel(dir, t, link, sizeof link) < 0)
				r = -EPERM;
		} else if (type != AE_IFREG) {
			continue;
		}
		if (r < 0) {
			r = fail(l->ctx, r, "%s: member '%s' links outside the archive", l->file, p);
			break;
		}
		if (l->n == l->cap) {
			size_t cap = l->cap ? l->cap * 2 : 64;
			struct member *nm = cap <= OUTER_MEMBERS_MAX ? realloc(l->m, cap * sizeof *nm) : NULL;
			if (!nm) {
				r = fail(l->ctx, -E2BIG, "%s: too many members", l->file);
				break;
			}
			l->m = nm;
			l->cap = cap;
		}
		struct member *m = &l->m[l->n];
		memset(m, 0, sizeof *m);
		m->blob = (unsigned)l->n;
		m->path = strdup(p);
		m->link = link[0] ? strdup(link) : NULL;
		l->n++;
		if (!m->path || (link[0] && !m->link))
			r = fail(l->ctx, -ENOMEM, "out of memory");
		else if (!link[0])
			r = stage_member(l, a, m, &staged, total);
		progress(l->ctx, "reading", (uint64_t)archive_filter_bytes(a, -1), total);
	}
	if (r == 0 && ar != ARCHIVE_EOF)
		r = fail(l->ctx, -EINVAL, "%s: %s", l->file, archive_error_string(a));
out:
	archive_read_free(a);
	close(fd);
	return r;
}

/* The member PATH, checked against the sha256 EXPECT (when known). */
static struct member *checked(struct load *l, const char *path, const char *expect,
			      const char *what, int *r)
{
	struct member *m = find_member(l, path);
	if (!m) {
		*r = fail(l->ctx, -ENOENT, "%s: %s '%s' is missing from the archive", l->file, what,
			  path);
		return NULL;
	}
	if (expect[0] && strcmp(m->sha, expect) != 0) {
		*r = fail(l->ctx, -EBADMSG, "%s: %s '%s' has sha256 %.12s, the manifest says %.12s: "
			  "the archive is corrupt or was tampered with", l->file, what, path, m->sha,
			  expect);
		return NULL;
	}
	return m;
}

static int read_member(struct load *l, struct member *m, char **buf)
{
	if (m->size > JSON_FILE_MAX)
		return fail(l->ctx, -E2BIG, "%s: '%s' is too large for a manifest", l->file, m->path);
	char name[32];
	snprintf(name, sizeof name, "b%u", m->blob);
	int fd = openat(l->wk.fd, name, O_RDONLY | O_CLOEXEC);
	*buf = malloc(m->size + 1);
	ssize_t n = fd >= 0 && *buf ? read(fd, *buf, m->size) : -1;
	if (fd >= 0)
		close(fd);
	if (n != (ssize_t)m->size) {
		free(*buf);
		*buf = NULL;
		return fail(l->ctx, -EIO, "%s: reading '%s' back failed", l->file, m->path);
	}
	(*buf)[n] = 0;
	return (int)n;
}

static int docker_images(struct load *l, struct image_manifest *im)
{
	int r = 0;
	char *buf;
	struct member *m = checked(l, "manifest.json", "", "manifest", &r);
	if (!m || (r = read_member(l, m, &buf)) < 0)
		return r;
	int n = image_parse_docker_manifest(buf, (size_t)r, im, IMAGE_MAX_PER_ARCHIVE);
	free(buf);
	if (n < 0)
		return fail(l->ctx, n, "%s: manifest.json is not a docker image manifest", l->file);
	for (int i = 0; i < n; i++) {
		struct member *c = checked(l, im[i].config, im[i].config_sha, "config", &r);
		if (!c || (r = read_member(l, c, &buf)) < 0)
			return r;
		char (*ids)[IMAGE_HEX_LEN + 1] = calloc(IMAGE_MAX_LAYERS, sizeof *ids);
		int nids = ids ? image_parse_diff_ids(buf, (size_t)r, ids, IMAGE_MAX_LAYERS) : -ENOMEM;
		free(buf);
		/* Layers named by their digest are checked against it; the
		 * others (<id>/layer.tar) against the config's diff_ids. */
		for (unsigned k = 0; k < im[i].nlayers && r >= 0; k++) {
			if (im[i].layer_sha[k][0])
				continue;
			if (nids != (int)im[i].nlayers)
				r = fail(l->ctx, -EBADMSG, "%s: the config does not list a digest for "
					 "each layer, so they cannot be checked", l->file);
			else
				memcpy(im[i].layer_sha[k], ids[k], IMAGE_HEX_LEN + 1);
		}
		free(ids);
		if (r < 0)
			return r;
	}
	return n;
}

/* Lower-case FILE's base name without its extensions, as an image name. */
static void name_from_file(const char *file, const char *tag, char *out, size_t len)
{
	const char *b = strrchr(file, '/');
	b = b ? b + 1 : file;
	char name[IMAGE_NAME_MAX + 1];
	size_t n = 0;
	for (; b[n] && b[n] != '.' && n < IMAGE_NAME_MAX; n++) {
		char c = b[n] >= 'A' && b[n] <= 'Z' ? (char)(b[n] + 32) : b[n];
		name[n] = name_char(c, n == 0) ? c : n ? '-' : 'x';
	}
	if (!n)
		name[n++] = 'x';
	name[n] = 0;
	char t[IMAGE_TAG_MAX + 1], nm[IMAGE_NAME_MAX + 1], ref[IMAGE_REF_MAX];
	snprintf(ref, sizeof ref, "%s:%s", name, tag && *tag ? tag : "latest");
	if (image_ref_parse(ref, nm, sizeof nm, t, sizeof t) < 0)
		snprintf(ref, sizeof ref, "%s:latest", name);
	snprintf(out, len, "%s", ref);
}

static int oci_image(struct load *l, struct image_manifest *im)
{
	int r = 0;
	char *buf;
	struct image_oci_desc d;
	struct member *m = checked(l, "index.json", "", "index", &r);
	if (!m || (r = read_member(l, m, &buf)) < 0)
		return r;
	r = image_parse_oci_index(buf, (size_t)r, &d);
	free(buf);
	char ref[IMAGE_REF_MAX];
	snprintf(ref, sizeof ref, "%s", d.ref);
	/* One nested index (a multi-platform image) is followed. */
	for (int depth = 0; r == 0 && d.is_index; depth++) {
		char path[IMAGE_MEMBER_MAX];
		snprintf(path, sizeof path, "blobs/sha256/%s", d.sha);
		if (depth || !(m = checked(l, path, d.sha, "index", &r)) ||
		    (r = read_member(l, m, &buf)) < 0) {
			if (depth)
				r = fail(l->ctx, -EINVAL, "%s: indexes nested too deep", l->file);
			return r;
		}
		r = image_parse_oci_index(buf, (size_t)r, &d);
		free(buf);
	}
	if (r < 0)
		return fail(l->ctx, r, "%s: index.json lists no image manifest for linux/%s",
			    l->file, HOST_ARCH);
	char path[IMAGE_MEMBER_MAX];
	snprintf(path, sizeof path, "blobs/sha256/%s", d.sha);
	if (!(m = checked(l, path, d.sha, "manifest", &r)) || (r = read_member(l, m, &buf)) < 0)
		return r;
	r = image_parse_oci_manifest(buf, (size_t)r, im);
	free(buf);
	if (r < 0)
		return fail(l->ctx, r, "%s: the image manifest is not valid", l->file);
	if (strchr(ref, '/') || strchr(ref, ':'))
		add_tag(im, ref);
	else if (ref[0])
		name_from_file(l->file, ref, im->tag[im->ntags++], IMAGE_REF_MAX);
	return 1;
}

static int load_one(struct load *l, struct image_manifest *im, const char *ref)
{
	int r = 0;
	struct member *cfg = checked(l, im->config, im->config_sha, "config", &r);
	if (!cfg)
		return r;
	struct member *layers[IMAGE_MAX_LAYERS];
	for (unsigned k = 0; k < im->nlayers; k++) {
		if (!im->layer_sha[k][0])
			return fail(l->ctx, -EBADMSG, "%s: layer %u has no digest to check", l->file, k + 1);
		if (!(layers[k] = checked(l, im->layer[k], im->layer_sha[k], "layer", &r)))
			return r;
	}
	char names[IMAGE_MAX_TAGS][IMAGE_REF_MAX];
	unsigned nnames = 0;
	if (ref) {
		char n[IMAGE_NAME_MAX + 1], t[IMAGE_TAG_MAX + 1];
		image_ref_parse(ref, n, sizeof n, t, sizeof t);
		snprintf(names[nnames++], IMAGE_REF_MAX, "%s:%s", n, t);
	} else {
		for (unsigned i = 0; i < im->ntags; i++)
			memcpy(names[nnames++], im->tag[i], IMAGE_REF_MAX);
		if (!nnames)
			name_from_file(l->file, NULL, names[nnames++], IMAGE_REF_MAX);
	}
	char path[96];
	struct stat sb;
	snprintf(path, sizeof path, "rootfs/%s", cfg->sha);
	int built = 0;
	if (fstatat(l->st.fd, path, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
		remove_tree(l->wk.fd, "rootfs", 0);
		int rootfd = mkdirat(l->wk.fd, "rootfs", 0755) < 0 ? -1
			     : openat(l->wk.fd, "rootfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (rootfd < 0)
			return fail(l->ctx, -errno, "%s/tmp: %s", l->st.dir, strerror(errno));
		struct writer w;
		writer_init(&w, l->ctx, rootfd);
		for (unsigned k = 0; k < im->nlayers && r == 0; k++) {
			char what[IMAGE_MEMBER_MAX + 32], blob[32];
			snprintf(what, sizeof what, "layer %u (%s)", k + 1, im->layer[k]);
			snprintf(blob, sizeof blob, "b%u", layers[k]->blob);
			w.what = what;
			progress(l->ctx, "applying layer", k + 1, im->nlayers);
			r = apply_layer(&w, l->wk.fd, blob);
		}
		if (r == 0)
			fix_apply(&w);
		writer_free(&w);
		fchmod(rootfd, 0755);
		close(rootfd);
		if (r < 0)
			return r;
		built = 1;
	}
	char source[300];
	const char *b = strrchr(l->file, '/');
	snprintf(source, sizeof source, "load:%s", b ? b + 1 : l->file);
	return commit(l->ctx, &l->st, &l->wk, cfg->sha, built, source, names, nnames);
}

int image_load(struct image_ctx *ctx, const char *file, const char *ref)
{
	char n[IMAGE_NAME_MAX + 1], t[IMAGE_TAG_MAX + 1];
	if (ref && image_ref_parse(ref, n, sizeof n, t, sizeof t) < 0)
		return fail(ctx, -EINVAL, "'%s' is not a valid image name: use NAME[:TAG] with "
			    "NAME of a-z 0-9 . _ - (no '/')", ref);
	struct load l = { .ctx = ctx, .file = file, .wk = { .fd = -1, .lockfd = -1 } };
	struct image_manifest *im = calloc(IMAGE_MAX_PER_ARCHIVE, sizeof *im);
	int r = im ? store_open(ctx, &l.st, 1) : fail(ctx, -ENOMEM, "out of memory");
	if (r == 0)
		r = work_open(ctx, &l.st, &l.wk);
	if (r == 0)
		r = stage_archive(&l);
	int nimg = 0;
	if (r == 0) {
		if (find_member(&l, "manifest.json"))
			nimg = docker_images(&l, im);
		else if (find_member(&l, "index.json"))
			nimg = oci_image(&l, im);
		else
			nimg = fail(ctx, -EINVAL, "%s is neither a 'docker save' archive (manifest.json) "
				    "nor an OCI image layout (index.json)", file);
		r = nimg < 0 ? nimg : 0;
	}
	if (r == 0 && ref && nimg != 1)
		r = fail(ctx, -EINVAL, "%s holds %d images: --name can only name one", file, nimg);
	for (int i = 0; r == 0 && i < nimg; i++)
		r = load_one(&l, &im[i], ref);
	work_close(&l.st, &l.wk);
	store_close(&l.st);
	for (size_t i = 0; i < l.n; i++) {
		free(l.m[i].path);
		free(l.m[i].link);
	}
	free(l.m);
	free(im);
	return r;
}

/* ------------------------------------------------------------- Importing */

struct import {
	struct writer *w;
	br_sha256_context h;
	struct { dev_t dev; ino_t ino; char *path; } *links;
	size_t nlinks, caplinks;
};

struct file_src {
	int fd;
	br_sha256_context *h;
};

static ssize_t file_reader(void *arg, void *buf, size_t len)
{
	struct file_src *s = arg;
	ssize_t n = read(s->fd, buf, len);
	if (n < 0)
		return -errno;
	br_sha256_update(s->h, buf, (size_t)n);
	return n;
}

/* The xattrs kbox keeps (user.*, security.capability) of FD, into BUF. */
static unsigned fd_xattrs(int fd, struct xat *x, char *buf, size_t len)
{
	char names[4096];
	ssize_t nl = flistxattr(fd, names, sizeof names);
	unsigned n = 0;
	size_t used = 0;
	for (ssize_t i = 0; i < nl && n < XATTR_MAX; i += (ssize_t)strlen(names + i) + 1) {
		const char *name = names + i;
		if (strncmp(name, "user.", 5) != 0 && strcmp(name, "security.capability") != 0)
			continue;
		size_t nlen = strlen(name) + 1;
		if (used + nlen >= len)
			break;
		memcpy(buf + used, name, nlen);
		ssize_t vl = fgetxattr(fd, name, buf + used + nlen, len - used - nlen);
		if (vl < 0)
			continue;
		x[n++] = (struct xat){ buf + used, buf + used + nlen, (size_t)vl };
		used += nlen + (size_t)vl;
	}
	return n;
}

/* Feeds one entry's identity into the tree digest: the id of an import is
 * the digest of names, types, owners, modes, link targets and contents
 * (not times), in sorted order. */
static void hash_entry(struct import *im, const char *path, const struct stat *sb,
		       const char *extra)
{
	char rec[128];
	int n = snprintf(rec, sizeof rec, "%o %u %u %llu", (unsigned)sb->st_mode,
			 (unsigned)sb->st_uid, (unsigned)sb->st_gid,
			 S_ISREG(sb->st_mode) ? (unsigned long long)sb->st_size : 0ull);
	br_sha256_update(&im->h, path, strlen(path) + 1);
	br_sha256_update(&im->h, rec, (size_t)n + 1);
	br_sha256_update(&im->h, extra, strlen(extra) + 1);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int import_link(struct import *im, const struct stat *sb, const char *path,
		       const char **first)
{
	for (size_t i = 0; i < im->nlinks; i++)
		if (im->links[i].dev == sb->st_dev && im->links[i].ino == sb->st_ino) {
			*first = im->links[i].path;
			return 0;
		}
	*first = NULL;
	if (im->nlinks == im->caplinks) {
		size_t cap = im->caplinks ? im->caplinks * 2 : 16;
		void *n = realloc(im->links, cap * sizeof *im->links);
		if (!n)
			return -ENOMEM;
		im->links = n;
		im->caplinks = cap;
	}
	char *p = strdup(path);
	if (!p)
		return -ENOMEM;
	im->links[im->nlinks].dev = sb->st_dev;
	im->links[im->nlinks].ino = sb->st_ino;
	im->links[im->nlinks++].path = p;
	return 0;
}

static int import_entry(struct import *im, int sfd, const char *name, const char *path,
			unsigned depth);

static int import_dir(struct import *im, int sfd, const char *rel, unsigned depth)
{
	int dfd = dup(sfd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return fail(im->w->ctx, -errno, "%s: %s", rel, strerror(errno));
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 32;
			char **nn = realloc(names, cap * sizeof *nn);
			if (!nn) {
				r = -ENOMEM;
				break;
			}
			names = nn;
		}
		if (!(names[n] = strdup(de->d_name))) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (r < 0)
		r = fail(im->w->ctx, r, "out of memory");
	qsort(names, n, sizeof *names, name_cmp);
	for (size_t i = 0; i < n && r == 0; i++) {
		char path[PATH_MAX];
		if ((size_t)snprintf(path, sizeof path, "%s%s%s", rel, *rel ? "/" : "", names[i]) >=
		    sizeof path)
			r = fail(im->w->ctx, -ENAMETOOLONG, "%s/%s: path too long", rel, names[i]);
		else
			r = import_entry(im, sfd, names[i], path, depth);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

static int import_entry(struct import *im, int sfd, const char *name, const char *path,
			unsigned depth)
{
	struct writer *w = im->w;
	struct stat sb;
	int r = count_entry(w);
	if (r < 0)
		return r;
	if (fstatat(sfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(w->ctx, -errno, "%s: %s", path, strerror(errno));
	struct wmeta m = { sb.st_mode, sb.st_uid, sb.st_gid, sb.st_mtim };
	struct xat x[XATTR_MAX];
	static char xbuf[XATTR_VALUE_MAX * 2];
	if (S_ISDIR(sb.st_mode)) {
		if (depth >= PATH_DEPTH_MAX)
			return fail(w->ctx, -ELOOP, "%s: nested too deep", path);
		int fd = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return fail(w->ctx, -errno, "%s: %s", path, strerror(errno));
		hash_entry(im, path, &sb, "");
		r = wr_dir(w, path, &m, x, fd_xattrs(fd, x, xbuf, sizeof xbuf));
		if (r == 0)
			r = import_dir(im, fd, path, depth + 1);
		close(fd);
	} else if (S_ISREG(sb.st_mode)) {
		const char *first = NULL;
		if (sb.st_nlink > 1 && (r = import_link(im, &sb, path, &first)) < 0)
			return fail(w->ctx, r, "out of memory");
		hash_entry(im, path, &sb, first ? first : "");
		if (first)
			return wr_link(w, path, first);
		int fd = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return fail(w->ctx, -errno, "%s: %s", path, strerror(errno));
		struct file_src src = { fd, &im->h };
		r = wr_file(w, path, &m, x, fd_xattrs(fd, x, xbuf, sizeof xbuf), file_reader, &src);
		close(fd);
	} else if (S_ISLNK(sb.st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(sfd, name, t, sizeof t - 1);
		if (n <= 0)
			return fail(w->ctx, -EINVAL, "%s: unreadable symlink", path);
		t[n] = 0;
		hash_entry(im, path, &sb, t);
		r = wr_special(w, path, t, &m);
	} else if (S_ISFIFO(sb.st_mode)) {
		hash_entry(im, path, &sb, "");
		r = wr_special(w, path, NULL, &m);
	} else if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)) {
		w->ctx->devices_skipped++;
	}
	return r;
}

int image_import(struct image_ctx *ctx, const char *dir, const char *ref)
{
	char n[IMAGE_NAME_MAX + 1], t[IMAGE_TAG_MAX + 1], names[1][IMAGE_REF_MAX];
	if (!ref || image_ref_parse(ref, n, sizeof n, t, sizeof t) < 0)
		return fail(ctx, -EINVAL, "'%s' is not a valid image name: use NAME[:TAG] with "
			    "NAME of a-z 0-9 . _ - (no '/')", ref ? ref : "");
	snprintf(names[0], sizeof names[0], "%s:%s", n, t);
	int sfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0)
		return fail(ctx, -errno, "%s: %s", dir, strerror(errno));
	struct store st = { .fd = -1 };
	struct work wk = { .fd = -1, .lockfd = -1 };
	struct writer w;
	struct import im = { .w = &w };
	br_sha256_init(&im.h);
	int rootfd = -1;
	int r = store_open(ctx, &st, 1);
	if (r == 0)
		r = work_open(ctx, &st, &wk);
	if (r == 0) {
		rootfd = mkdirat(wk.fd, "rootfs", 0755) < 0 ? -1
			 : openat(wk.fd, "rootfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (rootfd < 0)
			r = fail(ctx, -errno, "%s/tmp: %s", st.dir, strerror(errno));
	}
	writer_init(&w, ctx, rootfd);
	w.what = dir;
	if (r == 0) {
		struct stat sb;
		fstat(sfd, &sb);
		hash_entry(&im, "", &sb, "");
		progress(ctx, "copying", 0, 0);
		r = import_dir(&im, sfd, "", 0);
		if (r == 0) {
			fix_apply(&w);
			struct wmeta m = { sb.st_mode, sb.st_uid, sb.st_gid, sb.st_mtim };
			set_meta_fd(&w, rootfd, &m, NULL, 0, 1);
		}
	}
	writer_free(&w);
	if (r == 0) {
		char id[IMAGE_HEX_LEN + 1], source[PATH_MAX + 16], real[PATH_MAX];
		sha_hex(&im.h, id);
		snprintf(source, sizeof source, "import:%s", realpath(dir, real) ? real : dir);
		r = commit(ctx, &st, &wk, id, 1, source, names, 1);
	}
	if (rootfd >= 0)
		close(rootfd);
	for (size_t i = 0; i < im.nlinks; i++)
		free(im.links[i].path);
	free(im.links);
	work_close(&st, &wk);
	store_close(&st);
	close(sfd);
	return r;
}

/* ------------------------------------------------ Listing and removing */

struct list_acc {
	struct store *st;
	struct image_info *v;
	size_t n, cap;
};

static void read_meta(struct store *st, struct image_info *info)
{
	char path[96], buf[1024];
	snprintf(path, sizeof path, "meta/%s", info->id);
	int fd = openat(st->fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	for (char *line = buf, *e; *line; line = e) {
		e = strchrnul(line, '\n');
		if (*e)
			*e++ = 0;
		unsigned long long v;
		long long c;
		if (sscanf(line, "size %llu", &v) == 1)
			info->size = v;
		else if (sscanf(line, "created %lld", &c) == 1)
			info->created = c;
		else if (strncmp(line, "source ", 7) == 0)
			snprintf(info->source, sizeof info->source, "%s", line + 7);
	}
}

static int list_add(void *arg, const char *nametag, const char *id)
{
	struct list_acc *a = arg;
	char path[96];
	struct stat sb;
	snprintf(path, sizeof path, "rootfs/%s", id);
	if (fstatat(a->st->fd, path, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 16;
		struct image_info *n = realloc(a->v, cap * sizeof *n);
		if (!n)
			return -ENOMEM;
		a->v = n;
		a->cap = cap;
	}
	struct image_info *info = &a->v[a->n++];
	memset(info, 0, sizeof *info);
	snprintf(info->ref, sizeof info->ref, "%s", nametag);
	memcpy(info->id, id, IMAGE_HEX_LEN + 1);
	read_meta(a->st, info);
	return 0;
}

static int info_cmp(const void *a, const void *b)
{
	return strcmp(((const struct image_info *)a)->ref, ((const struct image_info *)b)->ref);
}

int image_list(struct image_ctx *ctx, void (*fn)(void *arg, const struct image_info *),
	       void *arg)
{
	struct store st;
	int r = store_open(ctx, &st, 0);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	struct list_acc a = { .st = &st };
	r = refs_each(&st, list_add, &a);
	if (r < 0)
		r = fail(ctx, r, "listing %s/refs: %s", st.dir, strerror(-r));
	qsort(a.v, a.n, sizeof *a.v, info_cmp);
	for (size_t i = 0; r == 0 && i < a.n; i++)
		fn(arg, &a.v[i]);
	free(a.v);
	store_close(&st);
	return r;
}

struct unref {
	struct store *st;
	const char *id;
};

static int unref_id(void *arg, const char *nametag, const char *id)
{
	struct unref *u = arg;
	char path[IMAGE_REF_MAX + 8];
	if (strcmp(id, u->id) == 0) {
		snprintf(path, sizeof path, "refs/%s", nametag);
		unlinkat(u->st->fd, path, 0);
	}
	return 0;
}

int image_remove(struct image_ctx *ctx, const char *ref)
{
	struct store st;
	int r = store_open(ctx, &st, 0);
	if (r < 0)
		return r == -ENOENT ? fail(ctx, r, "no image '%s' (the store is empty)", ref) : r;
	int lk = store_lock(ctx, &st);
	if (lk < 0) {
		store_close(&st);
		return lk;
	}
	char id[IMAGE_HEX_LEN + 1], nametag[IMAGE_REF_MAX], path[IMAGE_REF_MAX + 8];
	int names = 0;
	ctx->users[0] = 0;
	r = lookup(&st, ref, id, nametag);
	if (r == 0 && nametag[0])
		refs_each(&st, ref_count, &(struct ref_counter){ id, &names });
	if (r == -ENOTUNIQ)
		r = fail(ctx, r, "'%s' matches several image ids: give more digits", ref);
	else if (r < 0)
		r = fail(ctx, r, "no image '%s' (see 'kbox image ls')", ref);
	/* Only the last name's removal would take the files away. */
	else if ((!nametag[0] || names <= 1) &&
		 image_users(&st, id, ctx->users, sizeof ctx->users) > 0 && !ctx->force)
		r = fail(ctx, -EBUSY, "image '%s' (id %.12s) is in use by running sandbox(es): %s; "
				      "stop them first ('kbox stop NAME'), or use --force",
			 ref, id, ctx->users);
	else if (nametag[0]) {
		snprintf(path, sizeof path, "refs/%s", nametag);
		unlinkat(st.fd, path, 0);
	} else {
		struct unref u = { &st, id };
		refs_each(&st, unref_id, &u);
	}
	if (r == 0) {
		gc_id(&st, id);
		sweep_unused(&st);
		memcpy(ctx->id, id, sizeof id);
		snprintf(ctx->ref, sizeof ctx->ref, "%s", nametag);
	}
	close(lk);
	store_close(&st);
	return r;
}

int image_resolve(const char *ref, char *dir, size_t len)
{
	if (strchr(ref, '/') || ref[0] == '.')
		return (size_t)snprintf(dir, len, "%s", ref) >= len ? -ENAMETOOLONG : 0;
	struct image_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	struct store st;
	int r = store_open(&ctx, &st, 0);
	if (r < 0)
		return r == -ENAMETOOLONG ? r : -ENOENT;
	char id[IMAGE_HEX_LEN + 1], nametag[IMAGE_REF_MAX];
	r = lookup(&st, ref, id, nametag);
	if (r == 0 && (size_t)snprintf(dir, len, "%s/rootfs/%s", st.dir, id) >= len)
		r = -ENAMETOOLONG;
	store_close(&st);
	return r;
}

int image_store_hold(void)
{
	struct image_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	struct store st;
	int r = store_open(&ctx, &st, 0);
	if (r < 0)
		return r;
	int fd = openat(st.fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_SH) < 0) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		fd = r;
	}
	store_close(&st);
	return fd;
}
