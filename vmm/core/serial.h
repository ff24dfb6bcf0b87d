/* A 16550A UART as Linux's 8250 driver sees it: enough of the register
 * file for probing, a 16-byte receive FIFO fed by the host, transmit that
 * completes at once, and the THRE/RDA interrupts that the tty layer waits
 * for.  Pure device model: output goes to a callback, the interrupt line
 * to an irq_sink. */
#ifndef KBOX_SERIAL_H
#define KBOX_SERIAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/irq_sink.h"
#include "lib/statebuf.h"

#define SERIAL_FIFO 16

struct serial {
	pthread_mutex_t lock;
	uint8_t ier, lcr, mcr, lsr_extra, scr, dll, dlm, fcr;
	int thre_pending; /* THR-empty interrupt armed and not yet taken */
	uint8_t rx[SERIAL_FIFO];
	unsigned rx_head, rx_len;
	int irq_level;
	struct irq_sink *irq;
	void (*out)(void *ctx, const uint8_t *b, size_t n);
	void *out_ctx;
};

/* Initialise a UART whose transmitted bytes go to out(ctx, …) (may be
 * NULL to drop them) and whose interrupt line is irq (may be NULL). */
void serial_init(struct serial *s, struct irq_sink *irq,
		 void (*out)(void *ctx, const uint8_t *b, size_t n), void *ctx);

/* Release the UART's lock; neither a vCPU nor the host input may call in
 * any more. */
void serial_destroy(struct serial *s);

/* Guest port access at offset 0..7 from the UART's base.  Offsets outside
 * that range read 0xff and ignore writes. */
uint8_t serial_in(struct serial *s, unsigned off);
void serial_out(struct serial *s, unsigned off, uint8_t v);

/* Host input: queue up to n bytes for the guest to read; returns how many
 * were taken (the rest must be offered again later, after the guest has
 * drained the FIFO). */
size_t serial_feed(struct serial *s, const uint8_t *b, size_t n);

/* Bytes of receive FIFO the guest has not read yet. */
unsigned serial_rx_pending(struct serial *s);

/* The UART's registers for a snapshot (docs/snapshots.md): 16 bytes, the
 * receive FIFO excluded (host input, which a template never has; a save
 * with bytes waiting there is refused with -EBUSY).  serial_state_load
 * checks the exact length, a version byte and that no bit is set that a
 * guest could not have set (the register masks serial_out applies), then
 * takes the registers and the interrupt line's level from them.  0 or a
 * negative errno with a line in err. */
#define SERIAL_STATE_LEN 16u
int serial_state_save(struct serial *s, struct statebuf_writer *w, char *err, size_t errlen);
int serial_state_load(struct serial *s, const uint8_t *blob, size_t len, char *err, size_t errlen);

#endif
