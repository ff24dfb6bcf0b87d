/* `kbox disk ls|rm`: the disk volumes of `kbox run --disk` (docs/disks.md). */
#ifndef KBOX_DISK_CMD_H
#define KBOX_DISK_CMD_H

/* argv[0] is "disk".  Returns the exit code. */
int disk_main(int argc, char **argv);

#endif
