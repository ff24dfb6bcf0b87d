#include "vmm/cmd/ca_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/fileio.h"
#include "netstack/tls_cert.h"
#include "vmm/cli.h"

static void usage(FILE *f)
{
	fprintf(f, "Usage: kbox ca COMMAND\n"
		   "\n"
		   "The local CA whose certificates kbox shows a sandbox when it intercepts\n"
		   "TLS (docs/tls.md).  It lives in $KBOX_CA_DIR, else $XDG_DATA_HOME/kbox/ca,\n"
		   "else ~/.local/share/kbox/ca, and is created on first use.\n"
		   "\n"
		   "Commands:\n"
		   "  path                      print the CA directory\n"
		   "  init                      create the CA if missing; print its certificate's path\n"
		   "  show                      print the CA certificate (PEM)\n"
		   "  mint [--key FILE] NAME... print the chain (leaf, CA) minted for each NAME\n"
		   "                            (a DNS name or IP address), PEM; --key writes the\n"
		   "                            leaf private key to FILE (0600) for a test server\n");
}

static int open_ca(const char *dir, struct tls_cert_ca **ca)
{
	char err[512] = "";
	int rc = tls_cert_ca_open(dir, ca, err, sizeof err);
	if (rc)
		fprintf(stderr, "kbox ca: %s\n", err[0] ? err : strerror(-rc));
	return rc;
}

static int write_key(const char *path, const br_ec_private_key *key)
{
	char *pem;
	int rc = tls_cert_key_pem(key, &pem);
	if (rc)
		return rc;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || fchmod(fd, 0600) < 0) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
	} else {
		rc = fileio_write_all(fd, pem, strlen(pem));
		if (close(fd) < 0 && !rc)
			rc = -errno;
	}
	explicit_bzero(pem, strlen(pem));
	free(pem);
	return rc;
}

/* Print the chain for each of NAMES (N of them); then write the leaf key
 * to KEY_OUT if asked. */
static int mint(struct tls_cert_ca *ca, char **names, int n, const char *key_out)
{
	const br_ec_private_key *key = NULL;
	for (int i = 0; i < n; i++) {
		const br_x509_certificate *chain;
		size_t len;
		int rc = tls_cert_leaf(ca, names[i], &chain, &len, &key);
		if (rc) {
			fprintf(stderr, "kbox ca mint: %s: %s\n", names[i],
				rc == -EINVAL ? "not a DNS name or IP address" : strerror(-rc));
			return 1;
		}
		for (size_t c = 0; c < len; c++) {
			char *pem;
			if (tls_cert_pem_encode("CERTIFICATE", chain[c].data, chain[c].data_len, &pem))
				return 1;
			fputs(pem, stdout);
			free(pem);
		}
	}
	if (key_out) {
		int rc = write_key(key_out, key);
		if (rc) {
			fprintf(stderr, "kbox ca mint: cannot write %s: %s\n", key_out,
				strerror(-rc));
			return 1;
		}
	}
	return 0;
}

int ca_main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return KBOX_EXIT_FAILURE;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
		usage(stdout);
		return 0;
	}
	int mint_cmd = strcmp(cmd, "mint") == 0;
	if (strcmp(cmd, "path") && strcmp(cmd, "init") && strcmp(cmd, "show") && !mint_cmd) {
		fprintf(stderr, "kbox ca: unknown command '%s' (see 'kbox ca --help')\n", cmd);
		return KBOX_EXIT_FAILURE;
	}
	if (!mint_cmd && argc > 2) {
		fprintf(stderr, "kbox ca %s takes no arguments\n", cmd);
		return KBOX_EXIT_FAILURE;
	}
	const char *key_out = NULL;
	int first = 2;
	if (mint_cmd && argc > 2 && strcmp(argv[2], "--key") == 0) {
		if (argc < 4) {
			fprintf(stderr, "kbox ca mint: --key needs a file name\n");
			return KBOX_EXIT_FAILURE;
		}
		key_out = argv[3];
		first = 4;
	}
	if (mint_cmd && first >= argc) {
		fprintf(stderr, "kbox ca mint: name a host (see 'kbox ca --help')\n");
		return KBOX_EXIT_FAILURE;
	}
	char dir[PATH_MAX - 16];
	int rc = tls_cert_ca_default_dir(dir, sizeof dir);
	if (rc) {
		fprintf(stderr, "kbox ca: no CA directory: set KBOX_CA_DIR or HOME to an "
				"absolute path\n");
		return 1;
	}
	if (strcmp(cmd, "path") == 0) {
		printf("%s\n", dir);
		return 0;
	}
	struct tls_cert_ca *ca;
	if (open_ca(dir, &ca))
		return 1;
	int ret = 0;
	if (strcmp(cmd, "init") == 0)
		printf("%s/ca.pem\n", dir);
	else if (strcmp(cmd, "show") == 0)
		fputs(tls_cert_ca_pem(ca), stdout);
	else
		ret = mint(ca, argv + first, argc - first, key_out);
	tls_cert_ca_free(ca);
	if (fflush(stdout) != 0 && ret == 0)
		ret = 1;
	return ret;
}
