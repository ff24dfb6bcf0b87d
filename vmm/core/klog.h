/* The guest kernel's console: written to a log file (and stderr with
 * --verbose) and watched for the few lines kbox acts on: guest-init's
 * exit status, a kernel panic, guest-init's own failure. */
#ifndef KBOX_KLOG_H
#define KBOX_KLOG_H

#include <stddef.h>
#include <stdint.h>

#define KLOG_LINE 512

struct klog {
	int fd;        /* log file, -1 for none */
	int echo;      /* also copy to stderr */
	char line[KLOG_LINE];
	size_t len;
	int exit_code; /* from "kbox-exit=N", -1 until seen */
	int panic;
	char panic_msg[KLOG_LINE];
	int init_failed;
	char init_msg[KLOG_LINE];
};

/* A log with no file yet (fd -1, no echo) that has seen nothing: no
 * exit status (-1), no panic, no guest-init failure. */
void klog_init(struct klog *k);

/* Open the kernel log for this run (created 0600, emptied): path when
 * given, else $XDG_STATE_HOME/kbox/kernel.log, else
 * $HOME/.local/state/kbox/kernel.log (absolute variables only; missing
 * folders made 0700).  The log is a convenience, so a place that cannot
 * be written (no home, a read-only one) never fails the run: fallback
 * (the runtime folder's file, may be NULL) is tried instead, and warn
 * gets one line for the user saying why.  kbox's own places are opened
 * without following a symbolic link; a path the user named is opened as
 * named (it may be /dev/stderr).
 *
 * Returns the open fd with its path in used, or -1 with used "" and the
 * reason in warn when no place could be written.  warn is "" when the
 * first choice worked. */
int klog_open(const char *path, const char *fallback, char *used, size_t usedlen, char *warn,
	      size_t warnlen);

/* Console bytes from the guest (signature fits serial_init's output
 * callback).  Lines longer than KLOG_LINE are split. */
void klog_write(void *ctx, const uint8_t *b, size_t n);

/* Process a final partial line. */
void klog_flush(struct klog *k);

#endif
