/* `kbox ca`: the per-user CA that TLS interception signs with. */
#ifndef KBOX_CA_CMD_H
#define KBOX_CA_CMD_H

/* `kbox ca path|init|show|mint [--key FILE] NAME...` (argv[0] is "ca").
 * Prints what was asked on stdout, one-line errors with the fix on
 * stderr.  Returns 0, 1 when the CA cannot be used, 125 on a usage
 * error. */
int ca_main(int argc, char **argv);

#endif
