/* What kbox's subcommands share on the command line. */
#ifndef KBOX_VMM_CLI_H
#define KBOX_VMM_CLI_H

/* Exit status for failures of kbox itself (as docker and podman do). */
#define KBOX_EXIT_FAILURE 125

/* Print "kbox: MESSAGE" and a newline on stderr and return
 * KBOX_EXIT_FAILURE, so a subcommand fails in one statement. */
__attribute__((format(printf, 1, 2)))
int cli_die(const char *fmt, ...);

#endif
