/* libFuzzer target for the sandbox.yaml loader: any bytes must give either
 * a config within the documented ranges or one printable error line, and
 * an error must leave the config it was loaded over untouched. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/sandbox/config.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char base[] = "cpus: 3\nkernel: /k\ncommand: [a, b]\nenv: {A: x}\n"
				   "network: {policy: none}\n";
	struct kbox_config c;
	char err[256];

	/* Load over an existing config, so replacing and keeping fields is
	 * exercised as well as parsing. */
	config_init(&c);
	check(config_load_buf("dir/base.yaml", base, sizeof base - 1, &c, err, sizeof err) == 0);
	int rc = config_load_buf("dir/fuzz.yaml", (const char *)data, size, &c, err, sizeof err);
	if (rc == 0) {
		check(c.cpus >= CONFIG_CPUS_MIN && c.cpus <= CONFIG_CPUS_MAX);
		check(c.memory_mib == 0 || (c.memory_mib >= CONFIG_MEMORY_MIN_MIB &&
					    c.memory_mib <= CONFIG_MEMORY_MAX_MIB));
		check(c.verbose >= -1 && c.verbose <= 1);
		check(c.kernel && c.kernel[0]);
		check(!c.initrd || c.initrd[0]);
		check(c.argv && c.argv[0] && c.argv[0][0]);
		check(c.env && c.n_env <= CONFIG_ENV_MAX);
		for (size_t i = 0; i < c.n_env; i++)
			check(c.env[i][0] && c.env[i][0] != '=' && strchr(c.env[i], '='));
		check(!strcmp(c.network_policy, "none") || !strcmp(c.network_policy, "public") ||
		      !strcmp(c.network_policy, "allowlist"));
		check(!c.workdir || c.workdir[0] == '/');
		check(!c.tls_intercept || !strcmp(c.tls_intercept, "all") ||
		      !strcmp(c.tls_intercept, "secrets"));
		check(c.n_ports <= CONFIG_LIST_MAX && c.n_allow <= CONFIG_LIST_MAX &&
		      c.n_deny <= CONFIG_LIST_MAX && c.n_hosts <= CONFIG_LIST_MAX &&
		      c.n_tls_bypass <= CONFIG_LIST_MAX);
		for (size_t i = 0; i < c.n_ports; i++)
			check(strchr(c.ports[i].s, ':') && c.ports[i].line >= 1);
		for (size_t i = 0; i < c.n_hosts; i++)
			check(strchr(c.hosts[i].s, ':') != NULL);
	} else {
		check(rc < 0);
		check(strncmp(err, "dir/fuzz.yaml:", 14) == 0);
		for (const char *p = err; *p; p++)
			check(*p >= 0x20 && *p < 0x7f);
		check(c.cpus == 3 && strcmp(c.kernel, "/k") == 0 && c.memory_mib == 0 &&
		      !c.initrd && c.verbose == -1);
		check(strcmp(c.argv[0], "a") == 0 && strcmp(c.argv[1], "b") == 0 && !c.argv[2]);
		check(c.n_env == 1 && strcmp(c.env[0], "A=x") == 0);
		check(strcmp(c.network_policy, "none") == 0 && !c.workdir && !c.ports && !c.image);
	}
	config_free(&c);
	return 0;
}
