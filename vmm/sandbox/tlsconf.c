#include "vmm/sandbox/tlsconf.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/errbuf.h"
#include "lib/secenv.h"
#include "lwip/tcpip.h"
#include "netstack/tls_sni.h"

static const char *const CA_ENV[] = {
	"SSL_CERT_FILE=" TLSCONF_GUEST_BUNDLE,
	"REQUESTS_CA_BUNDLE=" TLSCONF_GUEST_BUNDLE,
	"CURL_CA_BUNDLE=" TLSCONF_GUEST_BUNDLE,
	"GIT_SSL_CAINFO=" TLSCONF_GUEST_BUNDLE,
	"CODEX_CA_CERTIFICATE=" TLSCONF_GUEST_BUNDLE,
	/* Node (and Bun) add these to their built-in roots. */
	"NODE_EXTRA_CA_CERTS=" TLSCONF_GUEST_CA,
};

void tlsconf_init(struct tlsconf *t)
{
	memset(t, 0, sizeof *t);
	t->scope = -1;
}

int tlsconf_set_scope(struct tlsconf *t, const char *word, char *err, size_t errlen)
{
	if (strcmp(word, "all") == 0)
		t->scope = INTERCEPT_SCOPE_ALL;
	else if (strcmp(word, "secrets") == 0)
		t->scope = INTERCEPT_SCOPE_SECRETS;
	else {
		return errbuf_fail(err, errlen, -EINVAL,
			       "--tls-intercept: '%.64s' is not a scope; use all or secrets", word);
	}
	return 0;
}

int tlsconf_add_bypass(struct tlsconf *t, const char *host, char *err, size_t errlen)
{
	if (t->n_bypass == INTERCEPT_BYPASS_MAX)
		return errbuf_fail(err, errlen, -ENOSPC, "--tls-bypass: at most %u names",
			       INTERCEPT_BYPASS_MAX);
	const char *name = host[0] == '*' && host[1] == '.' ? host + 2 : host;
	char norm[TLS_NAME_MAX + 1];
	if (tls_sni_name_normalize(name, strlen(name), norm) < 0)
		return errbuf_fail(err, errlen, -EINVAL,
			       "--tls-bypass: '%.64s' is not a host name or *.suffix", host);
	size_t i = t->n_bypass;
	snprintf(t->bypass_norm[i], sizeof t->bypass_norm[i], "%s%s", name == host ? "" : "*.", norm);
	t->bypass_ptr[i] = t->bypass_norm[i];
	t->n_bypass++;
	return 0;
}

bool tlsconf_active(const struct tlsconf *t)
{
	return t->secrets_path || t->scope == INTERCEPT_SCOPE_ALL;
}

int tlsconf_load(struct tlsconf *t, char *err, size_t errlen)
{
	if (!tlsconf_active(t))
		return 0;
	char msg[512];
	int rc;
	if (t->secrets_path && (rc = secrets_load(t->secrets_path, &t->secrets, msg, sizeof msg)) < 0)
		return errbuf_fail(err, errlen, rc, "%s", msg);
	/* A name too long to fit leaves no secrets.env to list: none could be
	 * opened by it. */
	if (t->secrets_path)
		secenv_path(t->secrets_env, sizeof t->secrets_env, t->secrets_path);
	char dir[PATH_MAX];
	const char *ca_dir = t->ca_dir;
	if (!ca_dir && (rc = tls_cert_ca_default_dir(dir, sizeof dir)) < 0)
		return errbuf_fail(err, errlen, rc, "no place for kbox's CA: set KBOX_CA_DIR or HOME");
	if ((rc = tls_cert_ca_open(ca_dir ? ca_dir : dir, &t->ca, msg, sizeof msg)) < 0)
		return errbuf_fail(err, errlen, rc, "%s", msg);
	if ((rc = tls_trust_load(NULL, t->extra_ca, &t->trust, msg, sizeof msg)) < 0)
		return errbuf_fail(err, errlen, rc, "%s", msg);
	t->icpt.ca = t->ca;
	t->icpt.trust = t->trust;
	t->icpt.secrets = t->secrets;
	t->icpt.scope = t->scope < 0 ? INTERCEPT_SCOPE_SECRETS : (enum intercept_scope)t->scope;
	t->icpt.bypass = t->bypass_ptr;
	t->icpt.n_bypass = t->n_bypass;
	return 0;
}

const struct intercept_config *tlsconf_icpt(const struct tlsconf *t)
{
	return t->ca ? &t->icpt : NULL;
}

size_t tlsconf_guest_env(const struct tlsconf *t, const char **out, size_t max)
{
	size_t n = 0;
	if (!t->ca)
		return 0;
	for (size_t i = 0; i < sizeof CA_ENV / sizeof CA_ENV[0] && n < max; i++)
		out[n++] = CA_ENV[i];
	if (t->secrets && n < max) {
		size_t k = secrets_env(t->secrets, out + n, max - n);
		n += k < max - n ? k : max - n;
	}
	return n;
}

const char *tlsconf_ca_pem(const struct tlsconf *t)
{
	return t->ca ? tls_cert_ca_pem(t->ca) : NULL;
}

int tlsconf_reload(struct tlsconf *t, char *err, size_t errlen)
{
	if (!t->secrets)
		return errbuf_fail(err, errlen, -ENOENT, "no secrets file to reload (--secret-conf)");
	if (t->stack_running)
		LOCK_TCPIP_CORE();
	int rc = secrets_reload(t->secrets, t->secrets_path, NULL, err, errlen);
	if (t->stack_running)
		UNLOCK_TCPIP_CORE();
	return rc;
}

size_t tlsconf_read_files(const struct tlsconf *t, const char **out, size_t max)
{
	size_t n = 0;
	if (t->secrets_path && n < max)
		out[n++] = t->secrets_path;
	if (t->secrets_env[0] && n < max)
		out[n++] = t->secrets_env;
	return n;
}

void tlsconf_free(struct tlsconf *t)
{
	secrets_free(t->secrets);
	tls_trust_free(t->trust);
	tls_cert_ca_free(t->ca);
	t->secrets = NULL;
	t->trust = NULL;
	t->ca = NULL;
}
