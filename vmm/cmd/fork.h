/* `kbox fork NAME NEW`: a copy of a running sandbox (docs/snapshots.md,
 * "Fork"). */
#ifndef KBOX_FORK_H
#define KBOX_FORK_H

#include <stdio.h>

/* Entry point (argv[0] is "fork"); the process exit status (125 for
 * kbox's own failures, with one line on stderr). */
int fork_main(int argc, char **argv);

/* Help text for `kbox fork --help`. */
void fork_usage(FILE *f);

#endif
