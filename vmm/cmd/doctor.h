/* `kbox doctor`: can kbox run here, and if not, what to do. */
#ifndef KBOX_DOCTOR_H
#define KBOX_DOCTOR_H

/* Checks /dev/kvm (access and mode), the guest kernel and initramfs, the
 * runtime directory and the kernel features the lock-down uses; prints one
 * line per check with the fix for each failure.  Returns 0 if kbox can run,
 * 1 if a check failed. */
int doctor_main(int argc, char **argv);

#endif
