/* `kbox run`: boot a guest, run one command in it, pass its exit code on. */
#ifndef KBOX_RUN_H
#define KBOX_RUN_H

#include <stdio.h>

/* Entry point for `kbox run ARGS…` (argv[0] is "run").  Returns the
 * process exit status: the command's own, 128+N for a signal, or
 * KBOX_EXIT_FAILURE (vmm/cli.h) with one line on stderr saying what to do. */
int run_main(int argc, char **argv);

/* kbox fork: run_main with argv, the arguments the sandbox from was
 * started with, as the copy named new_name of from (restored from its
 * state, detached; vmm/cmd/fork.h).  verbose: the copy's figures on
 * stderr. */
int run_fork(const char *from, const char *new_name, int verbose, int argc, char **argv);

/* Help text for `kbox run --help`. */
void run_usage(FILE *f);

#endif
