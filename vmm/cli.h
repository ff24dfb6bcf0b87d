/* What kbox's subcommands share on the command line. */
#ifndef KBOX_VMM_CLI_H
#define KBOX_VMM_CLI_H

#include <stddef.h>
#include <stdint.h>

/* Exit status for failures of kbox itself (as docker and podman do). */
#define KBOX_EXIT_FAILURE 125

/* Print "kbox: MESSAGE" and a newline on stderr and return
 * KBOX_EXIT_FAILURE, so a subcommand fails in one statement. */
__attribute__((format(printf, 1, 2)))
int cli_die(const char *fmt, ...);

/* Whether s asks for help: "-h" or "--help". */
int cli_is_help(const char *s);

/* The front of a command group such as `kbox disk`, whose argv[1] names
 * the subcommand: with none, help goes to stderr and the result is
 * KBOX_EXIT_FAILURE; with -h, --help or help, to stdout and the result is
 * 0; otherwise the result is -1: go on with argv[1]. */
int cli_group_help(int argc, char **argv, const char *help);

/* "kbox GROUP: unknown command 'CMD' (see 'kbox GROUP --help')" on stderr;
 * returns KBOX_EXIT_FAILURE. */
int cli_group_unknown(const char *group, const char *cmd);

/* v bytes for people into out: "512B", then binary units with one
 * decimal ("1.5K", "2.0G", up to T). */
void cli_human_bytes(uint64_t v, char *out, size_t len);

#endif
