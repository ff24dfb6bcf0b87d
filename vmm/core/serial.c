#include "vmm/core/serial.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

enum {
	R_DATA = 0, R_IER = 1, R_IIR = 2, R_LCR = 3, R_MCR = 4, R_LSR = 5, R_MSR = 6, R_SCR = 7,
};
#define IER_RDI   0x01
#define IER_THRI  0x02
#define IER_RLSI  0x04
#define IER_MSI   0x08
#define IIR_NONE  0x01
#define IIR_THRI  0x02
#define IIR_RDI   0x04
#define IIR_FIFO  0xc0
#define LCR_DLAB  0x80
#define MCR_LOOP  0x10
#define MCR_MASK  0x1f
#define LSR_DR    0x01
#define LSR_THRE  0x20
#define LSR_TEMT  0x40
#define FCR_EN    0x01
#define FCR_CLR_RX 0x02

void serial_init(struct serial *s, struct irq_sink *irq,
		 void (*out)(void *ctx, const uint8_t *b, size_t n), void *ctx)
{
	memset(s, 0, sizeof *s);
	pthread_mutex_init(&s->lock, NULL);
	s->irq = irq;
	s->out = out;
	s->out_ctx = ctx;
	s->dll = 0x0c; /* 9600 baud, as after a hardware reset */
	s->mcr = 0x08;
}

void serial_destroy(struct serial *s)
{
	pthread_mutex_destroy(&s->lock);
}

/* Highest-priority pending source, encoded as IIR bits 0-3. */
static uint8_t iir_source(const struct serial *s)
{
	if ((s->ier & IER_RDI) && s->rx_len)
		return IIR_RDI;
	if ((s->ier & IER_THRI) && s->thre_pending)
		return IIR_THRI;
	return IIR_NONE;
}

static void update_irq(struct serial *s)
{
	int level = iir_source(s) != IIR_NONE;
	if (level == s->irq_level)
		return;
	s->irq_level = level;
	if (level)
		irq_sink_raise(s->irq);
	else
		irq_sink_lower(s->irq);
}

uint8_t serial_in(struct serial *s, unsigned off)
{
	uint8_t v = 0xff;
	pthread_mutex_lock(&s->lock);
	switch (off) {
	case R_DATA:
		if (s->lcr & LCR_DLAB) {
			v = s->dll;
			break;
		}
		v = 0;
		if (s->rx_len) {
			v = s->rx[s->rx_head];
			s->rx_head = (s->rx_head + 1) % SERIAL_FIFO;
			s->rx_len--;
		}
		break;
	case R_IER:
		v = (s->lcr & LCR_DLAB) ? s->dlm : s->ier;
		break;
	case R_IIR:
		v = iir_source(s);
		/* Reading IIR acknowledges a THRE interrupt. */
		if (v == IIR_THRI)
			s->thre_pending = 0;
		if (s->fcr & FCR_EN)
			v |= IIR_FIFO;
		break;
	case R_LCR:
		v = s->lcr;
		break;
	case R_MCR:
		v = s->mcr;
		break;
	case R_LSR:
		v = LSR_THRE | LSR_TEMT | (s->rx_len ? LSR_DR : 0);
		break;
	case R_MSR:
		if (s->mcr & MCR_LOOP) {
			/* Loopback wires RTS→CTS, DTR→DSR, OUT1→RI, OUT2→DCD;
			 * the 8250 probe checks exactly this. */
			v = (uint8_t)(((s->mcr & 0x02) << 3) | ((s->mcr & 0x01) << 5) |
				      ((s->mcr & 0x04) << 4) | ((s->mcr & 0x08) << 4));
		} else {
			v = 0xb0; /* DCD, DSR, CTS: a cable is attached */
		}
		break;
	case R_SCR:
		v = s->scr;
		break;
	}
	update_irq(s);
	pthread_mutex_unlock(&s->lock);
	return v;
}

void serial_out(struct serial *s, unsigned off, uint8_t v)
{
	pthread_mutex_lock(&s->lock);
	switch (off) {
	case R_DATA:
		if (s->lcr & LCR_DLAB) {
			s->dll = v;
			break;
		}
		if (s->mcr & MCR_LOOP) {
			if (s->rx_len < SERIAL_FIFO) {
				s->rx[(s->rx_head + s->rx_len) % SERIAL_FIFO] = v;
				s->rx_len++;
			}
		} else if (s->out) {
			s->out(s->out_ctx, &v, 1);
		}
		/* The byte left at once, so the holding register is empty
		 * again and, if enabled, says so by interrupt. */
		s->thre_pending = 1;
		break;
	case R_IER:
		if (s->lcr & LCR_DLAB) {
			s->dlm = v;
			break;
		}
		/* Enabling THRI while the transmitter is empty raises the
		 * interrupt, as on a real 16550A. */
		if ((v & IER_THRI) && !(s->ier & IER_THRI))
			s->thre_pending = 1;
		s->ier = v & 0x0f;
		break;
	case R_IIR: /* FCR on write */
		s->fcr = v & 0xc9;
		if (v & FCR_CLR_RX) {
			s->rx_len = 0;
			s->rx_head = 0;
		}
		break;
	case R_LCR:
		s->lcr = v;
		break;
	case R_MCR:
		s->mcr = v & MCR_MASK;
		break;
	case R_SCR:
		s->scr = v;
		break;
	default:
		break;
	}
	update_irq(s);
	pthread_mutex_unlock(&s->lock);
}

size_t serial_feed(struct serial *s, const uint8_t *b, size_t n)
{
	size_t took = 0;
	pthread_mutex_lock(&s->lock);
	while (took < n && s->rx_len < SERIAL_FIFO && !(s->mcr & MCR_LOOP)) {
		s->rx[(s->rx_head + s->rx_len) % SERIAL_FIFO] = b[took++];
		s->rx_len++;
	}
	update_irq(s);
	pthread_mutex_unlock(&s->lock);
	return took;
}

unsigned serial_rx_pending(struct serial *s)
{
	pthread_mutex_lock(&s->lock);
	unsigned n = s->rx_len;
	pthread_mutex_unlock(&s->lock);
	return n;
}

#define SERIAL_STATE_VERSION 1u

int serial_state_save(struct serial *s, struct statebuf_writer *w, char *err, size_t errlen)
{
	uint8_t b[SERIAL_STATE_LEN] = { 0 };
	pthread_mutex_lock(&s->lock);
	unsigned waiting = s->rx_len;
	b[0] = SERIAL_STATE_VERSION;
	b[1] = s->ier;
	b[2] = s->lcr;
	b[3] = s->mcr;
	b[4] = s->scr;
	b[5] = s->dll;
	b[6] = s->dlm;
	b[7] = s->fcr;
	b[8] = (uint8_t)(s->thre_pending != 0);
	pthread_mutex_unlock(&s->lock);
	if (waiting) {
		snprintf(err, errlen, "serial port: %u received byte(s) not read yet", waiting);
		return -EBUSY;
	}
	statebuf_put(w, b, sizeof b);
	return w->err;
}

int serial_state_load(struct serial *s, const uint8_t *blob, size_t len, char *err, size_t errlen)
{
	if (len != SERIAL_STATE_LEN || blob[0] != SERIAL_STATE_VERSION) {
		snprintf(err, errlen, "serial port: state of %zu bytes, version %u (expected %u, %u)",
			 len, len ? blob[0] : 0, SERIAL_STATE_LEN, SERIAL_STATE_VERSION);
		return -EINVAL;
	}
	bool pad = false;
	for (unsigned i = 9; i < SERIAL_STATE_LEN; i++)
		pad |= blob[i] != 0;
	if ((blob[1] & ~0x0fu) || (blob[3] & ~(unsigned)MCR_MASK) || (blob[7] & ~0xc9u) ||
	    blob[8] > 1 || pad) {
		snprintf(err, errlen, "serial port: a register holds bits a guest cannot set");
		return -EINVAL;
	}
	pthread_mutex_lock(&s->lock);
	s->ier = blob[1];
	s->lcr = blob[2];
	s->mcr = blob[3];
	s->scr = blob[4];
	s->dll = blob[5];
	s->dlm = blob[6];
	s->fcr = blob[7];
	s->thre_pending = blob[8];
	s->rx_len = s->rx_head = 0;
	/* The line's level is in the interrupt controller's restored state;
	 * only the UART's own idea of it is set here. */
	s->irq_level = iir_source(s) != IIR_NONE;
	pthread_mutex_unlock(&s->lock);
	return 0;
}
