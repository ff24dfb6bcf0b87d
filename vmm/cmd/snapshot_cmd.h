/* `kbox snapshot ls|rm|prune`: the template cache of `kbox run`
 * (docs/snapshots.md, "Managing templates"). */
#ifndef KBOX_SNAPSHOT_CMD_H
#define KBOX_SNAPSHOT_CMD_H

/* argv[0] is "snapshot".  Returns the exit code. */
int snapshot_main(int argc, char **argv);

#endif
