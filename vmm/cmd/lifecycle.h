/* Commands that act on running sandboxes: exec, ps, stop, logs. */
#ifndef KBOX_LIFECYCLE_H
#define KBOX_LIFECYCLE_H

/* Each takes argv with argv[0] = the subcommand's name and returns the
 * process exit status (125 for kbox's own failures). */
int exec_main(int argc, char **argv);
int ps_main(int argc, char **argv);
int stop_main(int argc, char **argv);
int logs_main(int argc, char **argv);

#endif
