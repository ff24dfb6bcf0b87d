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

void klog_init(struct klog *k);

/* Console bytes from the guest (signature fits serial_init's output
 * callback).  Lines longer than KLOG_LINE are split. */
void klog_write(void *ctx, const uint8_t *b, size_t n);

/* Process a final partial line. */
void klog_flush(struct klog *k);

#endif
