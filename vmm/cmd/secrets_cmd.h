/* `kbox secrets reload NAME`: ask the running sandbox NAME to re-read its
 * secrets' values (the same as sending its kbox process SIGHUP). */
#ifndef KBOX_SECRETS_CMD_H
#define KBOX_SECRETS_CMD_H

/* argv[0] is "secrets".  Returns the exit code. */
int secrets_main(int argc, char **argv);

#endif
