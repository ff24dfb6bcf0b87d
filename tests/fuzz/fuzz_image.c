/* libFuzzer target for the image manifest readers: any bytes given as
 * manifest.json, index.json, an image manifest or a config must give a
 * clean error or results within bounds (digests of 64 hex digits, member
 * paths neither absolute nor empty, valid names); every string token of a
 * document that parses must decode or be refused without overrunning. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/image/image.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static void check_sha(const char *h)
{
	size_t n = strlen(h);
	check(n == 0 || n == IMAGE_HEX_LEN);
	for (size_t i = 0; i < n; i++)
		check((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'));
}

static void check_manifest(const struct image_manifest *m)
{
	check(m->config[0] && m->config[0] != '/');
	check_sha(m->config_sha);
	check(m->nlayers <= IMAGE_MAX_LAYERS && m->ntags <= IMAGE_MAX_TAGS);
	for (unsigned k = 0; k < m->nlayers; k++) {
		check(m->layer[k][0] && m->layer[k][0] != '/');
		check_sha(m->layer_sha[k]);
	}
	for (unsigned k = 0; k < m->ntags; k++) {
		char n[IMAGE_NAME_MAX + 1], t[IMAGE_TAG_MAX + 1];
		check(image_ref_parse(m->tag[k], n, sizeof n, t, sizeof t) == 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct image_manifest m[IMAGE_MAX_PER_ARCHIVE];
	const char *s = (const char *)data;
	int n = image_parse_docker_manifest(s, size, m, IMAGE_MAX_PER_ARCHIVE);
	check(n == -EINVAL || n == -E2BIG || (n >= 1 && n <= IMAGE_MAX_PER_ARCHIVE));
	for (int i = 0; i < n; i++)
		check_manifest(&m[i]);

	struct image_oci_desc d;
	int r = image_parse_oci_index(s, size, &d);
	check(r == 0 || r == -EINVAL || r == -ENOENT || r == -E2BIG);
	if (r == 0) {
		check(strlen(d.sha) == IMAGE_HEX_LEN);
		check_sha(d.sha);
	}

	r = image_parse_oci_manifest(s, size, &m[0]);
	check(r == 0 || r == -EINVAL || r == -E2BIG);
	if (r == 0)
		check_manifest(&m[0]);

	char ids[4][IMAGE_HEX_LEN + 1];
	r = image_parse_diff_ids(s, size, ids, 4);
	check(r == -EINVAL || r == -E2BIG || (r >= 0 && r <= 4));

	static struct image_json_tok tok[512];
	struct image_json j;
	if (image_json_parse(&j, s, size, tok, 512) == 0) {
		check(j.n >= 1 && j.n <= 512 && tok[0].next == j.n);
		char buf[16];
		for (uint32_t i = 0; i < j.n; i++) {
			check(tok[i].next > i && tok[i].next <= j.n);
			check((size_t)tok[i].start + tok[i].len <= size);
			r = image_json_str(&j, (int)i, buf, sizeof buf);
			check(r == 0 ? strlen(buf) < sizeof buf : r == -EINVAL || r == -ENAMETOOLONG);
		}
	}

	/* Names and whiteouts take NUL-terminated strings. */
	char str[300];
	size_t l = size < sizeof str - 1 ? size : sizeof str - 1;
	memcpy(str, data, l);
	str[l] = 0;
	char nm[IMAGE_NAME_MAX + 1], tg[IMAGE_TAG_MAX + 1], ref[IMAGE_REF_MAX], what[256];
	if (image_ref_parse(str, nm, sizeof nm, tg, sizeof tg) == 0)
		check(strlen(nm) <= IMAGE_NAME_MAX && strlen(tg) <= IMAGE_TAG_MAX);
	if (image_ref_from_repo(str, ref, sizeof ref) == 0)
		check(image_ref_parse(ref, nm, sizeof nm, tg, sizeof tg) == 0);
	r = image_whiteout(str, what, sizeof what);
	check(r >= -EINVAL && r <= 3);
	if (r == 1)
		check(what[0] && !strchr(what, '/'));
	return 0;
}
