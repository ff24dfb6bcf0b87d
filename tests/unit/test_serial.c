/* 16550A model: the register dance Linux's 8250 driver does to probe and
 * drive it, and exact interrupt line transitions. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "vmm/core/serial.h"
#include "tests/lib/unit_suite.h"

enum { DATA = 0, IER = 1, IIR = 2, FCR = 2, LCR = 3, MCR = 4, LSR = 5, MSR = 6, SCR = 7 };

struct counting_sink {
	struct irq_sink sink;
	int level, raises, lowers, redundant;
};

static void count_level(struct irq_sink *s, int level)
{
	struct counting_sink *c = (struct counting_sink *)s;
	if (level == c->level)
		c->redundant++;
	if (level)
		c->raises++;
	else
		c->lowers++;
	c->level = level;
}

struct capture {
	uint8_t b[256];
	size_t n;
};

static void capture_out(void *ctx, const uint8_t *b, size_t n)
{
	struct capture *c = ctx;
	ck_assert_uint_le(c->n + n, sizeof c->b);
	memcpy(c->b + c->n, b, n);
	c->n += n;
}

static struct serial uart;
static struct counting_sink irq;
static struct capture out;

static void uart_setup(void)
{
	memset(&irq, 0, sizeof irq);
	irq.sink.set_level = count_level;
	memset(&out, 0, sizeof out);
	serial_init(&uart, &irq.sink, capture_out, &out);
}

static void uart_teardown(void)
{
	serial_destroy(&uart);
}

START_TEST(loopback_msr_probe)
{
	/* What serial8250's autoconfig checks before trusting a port. */
	serial_out(&uart, MCR, 0x1a);
	ck_assert_uint_eq(serial_in(&uart, MSR) & 0xf0, 0x90);
	serial_out(&uart, MCR, 0x1f);
	ck_assert_uint_eq(serial_in(&uart, MSR) & 0xf0, 0xf0);
	serial_out(&uart, MCR, 0x10);
	ck_assert_uint_eq(serial_in(&uart, MSR) & 0xf0, 0x00);
	serial_out(&uart, MCR, 0x03);
	ck_assert_uint_eq(serial_in(&uart, MCR), 0x03);
	/* Out of loopback a cable is attached: CTS, DSR, DCD. */
	ck_assert_uint_eq(serial_in(&uart, MSR) & 0xb0, 0xb0);
}
END_TEST

START_TEST(scratch_and_lcr_hold_values)
{
	for (unsigned v = 0; v < 256; v += 37) {
		serial_out(&uart, SCR, (uint8_t)v);
		ck_assert_uint_eq(serial_in(&uart, SCR), v);
	}
	serial_out(&uart, LCR, 0x03);
	ck_assert_uint_eq(serial_in(&uart, LCR), 0x03);
	/* IER keeps only its four defined bits. */
	serial_out(&uart, IER, 0xff);
	ck_assert_uint_eq(serial_in(&uart, IER), 0x0f);
	serial_out(&uart, IER, 0);
}
END_TEST

START_TEST(divisor_latch_behind_dlab)
{
	serial_out(&uart, IER, 0x05);
	serial_out(&uart, LCR, 0x83);
	serial_out(&uart, DATA, 0x01);
	serial_out(&uart, IER, 0x02);
	ck_assert_uint_eq(serial_in(&uart, DATA), 0x01);
	ck_assert_uint_eq(serial_in(&uart, IER), 0x02);
	ck_assert_uint_eq(out.n, 0); /* a divisor write is not output */
	serial_out(&uart, LCR, 0x03);
	ck_assert_uint_eq(serial_in(&uart, IER), 0x05);
	serial_out(&uart, LCR, 0x83);
	ck_assert_uint_eq(serial_in(&uart, DATA), 0x01);
	ck_assert_uint_eq(serial_in(&uart, IER), 0x02);
}
END_TEST

START_TEST(fifo_detected_as_16550a)
{
	ck_assert_uint_eq(serial_in(&uart, IIR) & 0xc0, 0);
	serial_out(&uart, FCR, 0x01);
	ck_assert_uint_eq(serial_in(&uart, IIR) >> 6, 3);
	serial_out(&uart, FCR, 0x00);
	ck_assert_uint_eq(serial_in(&uart, IIR) >> 6, 0);
}
END_TEST

START_TEST(out_of_range_offsets)
{
	ck_assert_uint_eq(serial_in(&uart, 8), 0xff);
	ck_assert_uint_eq(serial_in(&uart, 0xffffffffu), 0xff);
	serial_out(&uart, 8, 0x41);
	serial_out(&uart, 1000, 0x41);
	ck_assert_uint_eq(out.n, 0);
	ck_assert_uint_eq(serial_in(&uart, SCR), 0);
	ck_assert_int_eq(irq.raises, 0);
}
END_TEST

START_TEST(thre_interrupt_cycle)
{
	ck_assert_uint_eq(serial_in(&uart, IIR) & 0x0f, 0x01);
	ck_assert_uint_eq(serial_in(&uart, LSR) & 0x60, 0x60);
	/* Enabling THRI with the transmitter empty raises at once. */
	serial_out(&uart, IER, 0x02);
	ck_assert_int_eq(irq.level, 1);
	ck_assert_int_eq(irq.raises, 1);
	/* Reading IIR names the source and takes the interrupt. */
	ck_assert_uint_eq(serial_in(&uart, IIR) & 0x0f, 0x02);
	ck_assert_int_eq(irq.level, 0);
	ck_assert_uint_eq(serial_in(&uart, IIR) & 0x0f, 0x01);
	/* Writing IER again with THRI already on does not re-arm it. */
	serial_out(&uart, IER, 0x02);
	ck_assert_int_eq(irq.raises, 1);
	/* Each byte written raises again once it has gone. */
	for (int i = 0; i < 3; i++) {
		serial_out(&uart, DATA, (uint8_t)('a' + i));
		ck_assert_int_eq(irq.level, 1);
		ck_assert_uint_eq(serial_in(&uart, IIR) & 0x0f, 0x02);
		ck_assert_int_eq(irq.level, 0);
	}
	ck_assert_int_eq(irq.raises, 4);
	ck_assert_int_eq(irq.lowers, 4);
	ck_assert_int_eq(irq.redundant, 0);
	ck_assert_uint_eq(out.n, 3);
	ck_assert_mem_eq(out.b, "abc", 3);
}
END_TEST

START_TEST(thre_masked_then_unmasked)
{
	/* A byte sent with THRI off leaves the line quiet; turning THRI on
	 * then reports the empty transmitter. */
	serial_out(&uart, DATA, 'x');
	ck_assert_int_eq(irq.raises, 0);
	serial_out(&uart, IER, 0x02);
	ck_assert_int_eq(irq.level, 1);
	serial_out(&uart, IER, 0x00);
	ck_assert_int_eq(irq.level, 0);
	ck_assert_int_eq(irq.redundant, 0);
}
END_TEST

START_TEST(rx_fifo_and_data_interrupt)
{
	serial_out(&uart, IER, 0x01);
	ck_assert_int_eq(irq.raises, 0);
	ck_assert_uint_eq(serial_in(&uart, LSR) & 0x01, 0);
	uint8_t in[40];
	for (unsigned i = 0; i < sizeof in; i++)
		in[i] = (uint8_t)(0x30 + i);
	/* The FIFO takes 16; the rest is offered again later. */
	ck_assert_uint_eq(serial_feed(&uart, in, sizeof in), SERIAL_FIFO);
	ck_assert_uint_eq(serial_rx_pending(&uart), SERIAL_FIFO);
	ck_assert_uint_eq(serial_feed(&uart, in, 1), 0);
	ck_assert_int_eq(irq.level, 1);
	ck_assert_int_eq(irq.raises, 1);
	ck_assert_uint_eq(serial_in(&uart, IIR) & 0x0f, 0x04);
	ck_assert_uint_eq(serial_in(&uart, LSR) & 0x01, 0x01);
	for (unsigned i = 0; i < 10; i++)
		ck_assert_uint_eq(serial_in(&uart, DATA), in[i]);
	/* Wraps around the ring. */
	ck_assert_uint_eq(serial_feed(&uart, in + 16, 24), 10);
	ck_assert_int_eq(irq.raises, 1);
	for (unsigned i = 10; i < 26; i++)
		ck_assert_uint_eq(serial_in(&uart, DATA), in[i]);
	ck_assert_uint_eq(serial_rx_pending(&uart), 0);
	ck_assert_uint_eq(serial_in(&uart, LSR) & 0x01, 0);
	ck_assert_int_eq(irq.level, 0);
	ck_assert_int_eq(irq.lowers, 1);
	ck_assert_uint_eq(serial_in(&uart, DATA), 0); /* empty reads 0 */
	ck_assert_int_eq(irq.redundant, 0);
}
END_TEST

START_TEST(rx_priority_over_thre)
{
	serial_out(&uart, IER, 0x03);
	ck_assert_int_eq(irq.raises, 1);
	const uint8_t c = 'k';
	ck_assert_uint_eq(serial_feed(&uart, &c, 1), 1);
	ck_assert_int_eq(irq.raises, 1); /* already high: no second raise */
	ck_assert_uint_eq(serial_in(&uart, IIR) & 0x0f, 0x04);
	/* The THRE source was not the one named, so it is still pending. */
	ck_assert_uint_eq(serial_in(&uart, DATA), 'k');
	ck_assert_int_eq(irq.level, 1);
	ck_assert_uint_eq(serial_in(&uart, IIR) & 0x0f, 0x02);
	ck_assert_int_eq(irq.level, 0);
	ck_assert_int_eq(irq.redundant, 0);
}
END_TEST

START_TEST(fcr_clears_rx)
{
	const uint8_t b[5] = "hello";
	ck_assert_uint_eq(serial_feed(&uart, b, 5), 5);
	serial_out(&uart, IER, 0x01);
	ck_assert_int_eq(irq.level, 1);
	serial_out(&uart, FCR, 0x03);
	ck_assert_uint_eq(serial_rx_pending(&uart), 0);
	ck_assert_int_eq(irq.level, 0);
}
END_TEST

START_TEST(loopback_routes_tx_to_rx)
{
	serial_out(&uart, MCR, 0x10);
	serial_out(&uart, DATA, 0x55);
	ck_assert_uint_eq(out.n, 0);
	ck_assert_uint_eq(serial_in(&uart, LSR) & 0x01, 0x01);
	ck_assert_uint_eq(serial_in(&uart, DATA), 0x55);
	/* The host cannot inject while the guest is looping back. */
	const uint8_t c = 1;
	ck_assert_uint_eq(serial_feed(&uart, &c, 1), 0);
	/* A full loopback FIFO drops rather than overflows. */
	for (int i = 0; i < 3 * SERIAL_FIFO; i++)
		serial_out(&uart, DATA, (uint8_t)i);
	ck_assert_uint_eq(serial_rx_pending(&uart), SERIAL_FIFO);
	for (int i = 0; i < SERIAL_FIFO; i++)
		ck_assert_uint_eq(serial_in(&uart, DATA), i);
}
END_TEST

START_TEST(null_sink_and_output)
{
	struct serial u;
	serial_init(&u, NULL, NULL, NULL);
	serial_out(&u, IER, 0x03);
	serial_out(&u, DATA, 'z');
	const uint8_t c = 'q';
	ck_assert_uint_eq(serial_feed(&u, &c, 1), 1);
	ck_assert_uint_eq(serial_in(&u, IIR) & 0x0f, 0x04);
	ck_assert_uint_eq(serial_in(&u, DATA), 'q');
	serial_destroy(&u);
}
END_TEST

START_TEST(guest_garbage_keeps_invariants)
{
	/* Every write to every register, then the FIFO still holds at most
	 * 16 bytes and the sink saw every level change the model made. */
	serial_destroy(&uart);
	serial_init(&uart, &irq.sink, NULL, NULL);
	uint32_t x = 12345;
	for (int i = 0; i < 20000; i++) {
		x = x * 1103515245u + 12345u;
		unsigned off = (x >> 8) & 7;
		if (x & 0x80000000u)
			serial_out(&uart, off, (uint8_t)(x >> 16));
		else
			(void)serial_in(&uart, off);
		if ((x & 0xff) == 7) {
			const uint8_t b[20] = { 0 };
			ck_assert_uint_le(serial_feed(&uart, b, sizeof b), SERIAL_FIFO);
		}
		ck_assert_uint_le(serial_rx_pending(&uart), SERIAL_FIFO);
		ck_assert_int_eq(irq.level, uart.irq_level);
	}
	ck_assert_int_eq(irq.redundant, 0);
}
END_TEST

Suite *serial_suite(void)
{
	return unit_suite_fixture("serial", "core", uart_setup, uart_teardown,
				  0, loopback_msr_probe,
				  scratch_and_lcr_hold_values,
				  divisor_latch_behind_dlab,
				  fifo_detected_as_16550a, out_of_range_offsets,
				  thre_interrupt_cycle,
				  thre_masked_then_unmasked,
				  rx_fifo_and_data_interrupt,
				  rx_priority_over_thre, fcr_clears_rx,
				  loopback_routes_tx_to_rx,
				  null_sink_and_output,
				  guest_garbage_keeps_invariants);
}
