/* Container images: Docker and OCI manifests and image names (image.h). */
#include "vmm/image/image_priv.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------- Manifests */

int image_hex64_ok(const char *h)
{
	for (int i = 0; i < IMAGE_HEX_LEN; i++)
		if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
			return 0;
	return h[IMAGE_HEX_LEN] == 0;
}

/* "sha256:HEX" into HEX; other algorithms are refused. */
static int digest_hex(const char *d, char *hex)
{
	if (strncmp(d, "sha256:", 7) != 0 || !image_hex64_ok(d + 7))
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
	if (!image_hex64_ok(tmp))
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

void image_add_tag(struct image_manifest *m, const char *repo)
{
	char ref[IMAGE_REF_MAX];
	if (m->ntags >= IMAGE_MAX_TAGS || image_ref_from_repo(repo, ref, sizeof ref) < 0)
		return;
	for (unsigned i = 0; i < m->ntags; i++)
		if (strcmp(m->tag[i], ref) == 0)
			return;
	strcpy(m->tag[m->ntags++], ref);
}

/* How many elements the array at token t has, at most max: -EINVAL when t
 * is absent or not an array, -E2BIG when it has more. */
static int json_array_len(const struct image_json *j, int t, uint32_t max)
{
	if (t < 0 || j->tok[t].type != IMAGE_JSON_ARR)
		return -EINVAL;
	return j->tok[t].count > max ? -E2BIG : (int)j->tok[t].count;
}

int image_parse_docker_manifest(const char *buf, size_t len, struct image_manifest *out,
				unsigned max)
{
	struct image_json j;
	int r = image_json_load(&j, buf, len);
	if (r < 0)
		return r;
	int n = json_array_len(&j, 0, max);
	r = n < 0 ? n : -EINVAL;
	if (n <= 0)
		goto out;
	for (int i = 0; i < n; i++) {
		struct image_manifest *m = &out[i];
		memset(m, 0, sizeof *m);
		int o = image_json_elem(&j, 0, (uint32_t)i);
		int c = image_json_get(&j, o, "Config");
		if (c < 0 || member_path(&j, c, m->config) < 0)
			goto out;
		member_sha(m->config, m->config_sha);
		int tags = image_json_get(&j, o, "RepoTags");
		int ntags = json_array_len(&j, tags, UINT32_MAX);
		for (int k = 0; k < ntags; k++) {
			char repo[512];
			if (image_json_str(&j, image_json_elem(&j, tags, (uint32_t)k), repo, sizeof repo) == 0)
				image_add_tag(m, repo);
		}
		int layers = image_json_get(&j, o, "Layers");
		int nlayers = json_array_len(&j, layers, IMAGE_MAX_LAYERS);
		if (nlayers < 0) {
			r = nlayers;
			goto out;
		}
		for (int k = 0; k < nlayers; k++) {
			if (member_path(&j, image_json_elem(&j, layers, (uint32_t)k), m->layer[k]) < 0)
				goto out;
			member_sha(m->layer[k], m->layer_sha[k]);
		}
		m->nlayers = (unsigned)nlayers;
	}
	r = n;
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
	int r = image_json_load(&j, buf, len);
	if (r < 0)
		return r;
	int best_score = 0;
	int list = image_json_get(&j, 0, "manifests");
	r = -EINVAL;
	if (json_array_len(&j, list, UINT32_MAX) < 0)
		goto out;
	r = -ENOENT;
	memset(out, 0, sizeof *out);
	for (uint32_t i = 0; i < j.tok[list].count; i++) {
		int d = image_json_elem(&j, list, i);
		char mt[128] = "", dig[80], os[32] = "", arch[32] = "";
		if (image_json_get(&j, d, "mediaType") >= 0 &&
		    image_json_str_at(&j, d, "mediaType", mt, sizeof mt) < 0)
			continue;
		int kind = media_kind(mt);
		char hex[IMAGE_HEX_LEN + 1];
		if (kind < 0 || image_json_str_at(&j, d, "digest", dig, sizeof dig) < 0 ||
		    digest_hex(dig, hex) < 0)
			continue;
		int plat = image_json_get(&j, d, "platform");
		int score = 2;
		if (plat >= 0) {
			image_json_str_at(&j, plat, "os", os, sizeof os);
			image_json_str_at(&j, plat, "architecture", arch, sizeof arch);
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
		if (image_json_str_at(&j, ann, "io.containerd.image.name", out->ref, sizeof out->ref) < 0 &&
		    image_json_str_at(&j, ann, "org.opencontainers.image.ref.name", out->ref,
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
	if (image_json_str_at(j, d, "digest", dig, sizeof dig) < 0 || digest_hex(dig, hex) < 0)
		return -EINVAL;
	memcpy(path, "blobs/sha256/", 13);
	memcpy(path + 13, hex, IMAGE_HEX_LEN + 1);
	return 0;
}

int image_parse_oci_manifest(const char *buf, size_t len, struct image_manifest *out)
{
	struct image_json j;
	int r = image_json_load(&j, buf, len);
	if (r < 0)
		return r;
	memset(out, 0, sizeof *out);
	r = -EINVAL;
	int layers = image_json_get(&j, 0, "layers");
	int nlayers = json_array_len(&j, layers, IMAGE_MAX_LAYERS);
	if (descriptor(&j, image_json_get(&j, 0, "config"), out->config, out->config_sha) < 0)
		goto out;
	if (nlayers < 0) {
		r = nlayers;
		goto out;
	}
	for (int k = 0; k < nlayers; k++)
		if (descriptor(&j, image_json_elem(&j, layers, (uint32_t)k), out->layer[k],
			       out->layer_sha[k]) < 0)
			goto out;
	out->nlayers = (unsigned)nlayers;
	r = 0;
out:
	free(j.tok);
	return r;
}

int image_parse_diff_ids(const char *buf, size_t len, char (*hex)[IMAGE_HEX_LEN + 1],
			 unsigned max)
{
	struct image_json j;
	int r = image_json_load(&j, buf, len);
	if (r < 0)
		return r;
	r = -EINVAL;
	int ids = image_json_get(&j, image_json_get(&j, 0, "rootfs"), "diff_ids");
	/* More than max is refused as malformed, not as too large. */
	int n = json_array_len(&j, ids, max);
	if (n < 0)
		goto out;
	for (int k = 0; k < n; k++) {
		char dig[80];
		if (image_json_str(&j, image_json_elem(&j, ids, (uint32_t)k), dig, sizeof dig) < 0 ||
		    digest_hex(dig, hex[k]) < 0)
			goto out;
	}
	r = n;
out:
	free(j.tok);
	return r;
}

/* --------------------------------------------------------------- Names */

int image_name_char(char c, int first)
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
		if (!image_name_char(in[i], i == 0))
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
