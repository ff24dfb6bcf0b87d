/* Trust anchors: PEM through BearSSL's streaming decoder, each
 * certificate through br_x509_decoder; every anchor lives in one
 * allocation (DN then key bytes) owned by the set. */
#include "netstack/tls_trust.h"
#include "lib/errbuf.h"
#include "lib/fileio.h"
#include "lib/grow.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tls_trust {
	br_x509_trust_anchor *ta;
	size_t n, cap;
};

/* A bounded growing buffer, for a DN or a certificate's DER. */
struct acc {
	unsigned char *buf;
	size_t len, cap, max;
	bool over;
};

static void acc_push(void *ctx, const void *p, size_t k)
{
	struct acc *a = ctx;
	if (a->over)
		return;
	if (k > a->max - a->len) {
		a->over = true;
		return;
	}
	if (grow_array(&a->buf, &a->cap, a->len + k, 1, 1024, a->max) < 0) {
		a->over = true;
		return;
	}
	memcpy(a->buf + a->len, p, k);
	a->len += k;
}

int tls_trust_new(struct tls_trust **out)
{
	*out = calloc(1, sizeof **out);
	return *out ? 0 : -ENOMEM;
}

int tls_trust_add_der(struct tls_trust *t, const unsigned char *der, size_t len)
{
	if (t->n >= TLS_TRUST_MAX)
		return -ENOSPC;
	struct acc dn = { .max = TLS_TRUST_DN_MAX };
	br_x509_decoder_context dc;
	br_x509_decoder_init(&dc, acc_push, &dn);
	br_x509_decoder_push(&dc, der, len);
	const br_x509_pkey *pk = br_x509_decoder_get_pkey(&dc);
	int rc = -EINVAL;
	if (!pk || dn.over || dn.len == 0 || br_x509_decoder_last_error(&dc) != 0)
		goto out;
	size_t k1 = pk->key_type == BR_KEYTYPE_RSA ? pk->key.rsa.nlen : pk->key.ec.qlen;
	size_t k2 = pk->key_type == BR_KEYTYPE_RSA ? pk->key.rsa.elen : 0;
	if ((pk->key_type != BR_KEYTYPE_RSA && pk->key_type != BR_KEYTYPE_EC) || k1 == 0)
		goto out;
	rc = -ENOMEM;
	if (grow_array(&t->ta, &t->cap, t->n + 1, sizeof *t->ta, 64, 0) < 0)
		goto out;
	unsigned char *blk = malloc(dn.len + k1 + k2);
	rc = -ENOMEM;
	if (!blk)
		goto out;
	br_x509_trust_anchor *a = &t->ta[t->n];
	memset(a, 0, sizeof *a);
	memcpy(blk, dn.buf, dn.len);
	a->dn.data = blk;
	a->dn.len = dn.len;
	a->flags = br_x509_decoder_isCA(&dc) ? BR_X509_TA_CA : 0;
	a->pkey.key_type = pk->key_type;
	if (pk->key_type == BR_KEYTYPE_RSA) {
		a->pkey.key.rsa.n = blk + dn.len;
		a->pkey.key.rsa.nlen = k1;
		memcpy(a->pkey.key.rsa.n, pk->key.rsa.n, k1);
		a->pkey.key.rsa.e = blk + dn.len + k1;
		a->pkey.key.rsa.elen = k2;
		memcpy(a->pkey.key.rsa.e, pk->key.rsa.e, k2);
	} else {
		a->pkey.key.ec.curve = pk->key.ec.curve;
		a->pkey.key.ec.q = blk + dn.len;
		a->pkey.key.ec.qlen = k1;
		memcpy(a->pkey.key.ec.q, pk->key.ec.q, k1);
	}
	t->n++;
	rc = 0;
out:
	free(dn.buf);
	return rc;
}

int tls_trust_add_pem(struct tls_trust *t, const char *text, size_t len, size_t *added, size_t *skipped)
{
	br_pem_decoder_context pc;
	struct acc der = { .max = TLS_TRUST_CERT_MAX };
	size_t nadd = 0, nskip = 0;
	bool in_obj = false, is_cert = false;
	int rc = 0;
	br_pem_decoder_init(&pc);
	/* A final newline, so that an END line at the very end counts. */
	for (int pass = 0; pass < 2 && rc == 0; pass++) {
		const char *p = pass == 0 ? text : "\n";
		size_t left = pass == 0 ? len : 1;
		while (left > 0 && rc == 0) {
			size_t k = br_pem_decoder_push(&pc, p, left);
			p += k;
			left -= k;
			switch (br_pem_decoder_event(&pc)) {
			case BR_PEM_BEGIN_OBJ:
				in_obj = true;
				is_cert = strcmp(br_pem_decoder_name(&pc), "CERTIFICATE") == 0;
				der.len = 0;
				der.over = false;
				br_pem_decoder_setdest(&pc, is_cert ? acc_push : NULL, &der);
				break;
			case BR_PEM_END_OBJ:
				in_obj = false;
				if (!is_cert)
					break;
				rc = der.over ? -EINVAL : tls_trust_add_der(t, der.buf, der.len);
				if (rc == -EINVAL) {
					nskip++;
					rc = 0;
				} else if (rc == 0) {
					nadd++;
				}
				break;
			case BR_PEM_ERROR:
				rc = -EINVAL;
				break;
			default:
				break;
			}
		}
	}
	if (rc == 0 && in_obj)
		rc = -EINVAL;
	free(der.buf);
	if (added)
		*added = nadd;
	if (skipped)
		*skipped = nskip;
	return rc;
}

/* PATH whole, NUL-terminated; anything but a regular file is -EINVAL. */
static int read_file(const char *path, char **text, size_t *len)
{
	int rc = fileio_slurp(path, 0, TLS_TRUST_FILE_MAX, text, len, NULL, NULL);
	return rc == -EISDIR ? -EINVAL : rc;
}

int tls_trust_add_file(struct tls_trust *t, const char *path, int strict, char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0, added = 0, skipped = 0;
	int rc = read_file(path, &text, &len);
	if (rc < 0) {
		errbuf_say(err, errlen, "%s: %s", path, strerror(-rc));
		return rc;
	}
	rc = tls_trust_add_pem(t, text, len, &added, &skipped);
	free(text);
	if (rc == 0 && (added == 0 || (strict && skipped > 0)))
		rc = -EINVAL;
	if (rc < 0 && err) {
		if (rc == -EINVAL && added + skipped == 0)
			errbuf_say(err, errlen,
			       "%s: no PEM certificate found (expected -----BEGIN CERTIFICATE-----)",
			       path);
		else if (rc == -EINVAL)
			errbuf_say(err, errlen,
			       "%s: %zu of %zu certificates could not be used (RSA or EC keys only)",
			       path, skipped, added + skipped);
		else
			errbuf_say(err, errlen, "%s: %s", path, strerror(-rc));
	}
	return rc;
}

int tls_trust_load(const char *bundle, const char *extra, struct tls_trust **out, char *err, size_t errlen)
{
	struct tls_trust *t;
	int rc = tls_trust_new(&t);
	if (rc < 0)
		return rc;
	if (!bundle)
		bundle = TLS_TRUST_DEFAULT_BUNDLE;
	if (bundle[0])
		rc = tls_trust_add_file(t, bundle, 0, err, errlen);
	if (rc == 0 && extra && extra[0])
		rc = tls_trust_add_file(t, extra, 1, err, errlen);
	if (rc < 0) {
		tls_trust_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

const br_x509_trust_anchor *tls_trust_anchors(const struct tls_trust *t, size_t *n)
{
	*n = t->n;
	return t->ta;
}

void tls_trust_free(struct tls_trust *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		free(t->ta[i].dn.data);
	free(t->ta);
	free(t);
}
