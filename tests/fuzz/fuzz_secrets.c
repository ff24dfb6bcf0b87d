/* libFuzzer target for the secrets.yaml loader: any bytes give either a set
 * whose every secret meets the documented rules, or one printable error
 * line naming the file; the real value taken from the environment never
 * appears in a message unless the input itself spells it out. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netstack/secrets.h"

#define REAL "Fz-real-VALUE-91"

static void check(int ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool init;
	if (!init) {
		setenv("KBOX_FUZZ", REAL, 1);
		setenv("KBOX_FUZZ_CTRL", REAL "\r\nX: y", 1);
		init = true;
	}
	struct secrets *set = NULL;
	char err[512];
	/* The directory does not exist, so secrets.env is absent. */
	int rc = secrets_load_buf("/nonexistent-kbox-fuzz/s.yaml", (const char *)data, size, &set,
				  err, sizeof err);
	if (rc) {
		check(rc < 0 && set == NULL);
		check(strncmp(err, "/nonexistent-kbox-fuzz/", 23) == 0);
		for (const char *p = err; *p; p++)
			check(*p >= 0x20 && *p < 0x7f);
		if (!memmem(data, size, REAL, strlen(REAL)))
			check(!strstr(err, REAL));
		return 0;
	}
	check(secrets_count(set) <= SECRETS_MAX);
	for (size_t i = 0; i < secrets_count(set); i++) {
		const struct secret *s = secrets_at(set, i);
		size_t nl = strlen(s->name);
		check(nl >= 1 && nl <= SECRETS_NAME_MAX);
		check(strncmp(secrets_placeholder(s), "$KBOX_", 6) == 0 &&
		      strcmp(secrets_placeholder(s) + 6, s->name) == 0);
		check(strncmp(s->env, s->name, nl) == 0 && s->env[nl] == '=' &&
		      strcmp(s->env + nl + 1, s->placeholder) == 0);
		check(secrets_find(set, s->name, nl) == s);
		check(s->value_len >= 1 && s->value_len <= SECRETS_VALUE_MAX &&
		      strlen(s->value) == s->value_len);
		for (size_t k = 0; k < s->value_len; k++)
			check((unsigned char)s->value[k] >= 0x20 && s->value[k] != 0x7f);
		check(s->n_allow >= 1 && s->n_allow <= SECRETS_ALLOW_MAX);
		check(s->n_fields <= SECRETS_FIELDS_MAX);
		for (size_t a = 0; a < s->n_allow; a++) {
			const char *h = s->allow[a];
			if (h[0] == '*') {
				char sub[300];
				snprintf(sub, sizeof sub, "x%s", h + 1);
				check(secrets_hosts_match(s, sub));
			} else {
				check(secrets_hosts_match(s, h));
			}
		}
	}
	secrets_free(set);
	return 0;
}
