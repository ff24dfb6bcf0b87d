/* 16550A model: the register dance Linux's 8250 driver does to probe and
 * drive it, and exact interrupt line transitions. */
#include <check.h>
#include <errno.h>
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

/* ---- saved state (docs/snapshots.md) ---- */

/* A guest that set every register: divisor 0x0180, 8N1, FIFO on,
 * RDI|THRI|RLSI|MSI, DTR|RTS|OUT2, a scratch value, THRE pending. */
static void program_uart(struct serial *u)
{
	serial_out(u, LCR, 0x83);
	serial_out(u, DATA, 0x80);
	serial_out(u, IER, 0x01);
	serial_out(u, LCR, 0x1b);
	serial_out(u, FCR, 0xcf); /* kept as 0xc9; the clear bits act once */
	serial_out(u, IER, 0xff);
	serial_out(u, MCR, 0x0b);
	serial_out(u, SCR, 0x5a);
}

/* The state of u saved into b (SERIAL_STATE_LEN bytes). */
static void save_blob(struct serial *u, uint8_t *b)
{
	struct statebuf_writer w;
	char err[128] = "";
	statebuf_init(&w);
	ck_assert_int_eq(serial_state_save(u, &w, err, sizeof err), 0);
	ck_assert_uint_eq(w.len, SERIAL_STATE_LEN);
	memcpy(b, w.buf, SERIAL_STATE_LEN);
	statebuf_free(&w);
}

static void assert_same_registers(struct serial *a, struct serial *b)
{
	ck_assert_uint_eq(a->ier, b->ier);
	ck_assert_uint_eq(a->lcr, b->lcr);
	ck_assert_uint_eq(a->mcr, b->mcr);
	ck_assert_uint_eq(a->scr, b->scr);
	ck_assert_uint_eq(a->dll, b->dll);
	ck_assert_uint_eq(a->dlm, b->dlm);
	ck_assert_uint_eq(a->fcr, b->fcr);
	ck_assert_int_eq(a->thre_pending, b->thre_pending);
	ck_assert_int_eq(a->irq_level, b->irq_level);
	ck_assert_uint_eq(a->rx_len, b->rx_len);
}

START_TEST(state_round_trip)
{
	uint8_t b[SERIAL_STATE_LEN], again[SERIAL_STATE_LEN];
	struct serial u;
	struct counting_sink irq2 = { .sink.set_level = count_level };
	char err[128] = "";

	program_uart(&uart);
	ck_assert_int_eq(uart.irq_level, 1); /* THRE pending with THRI on */
	save_blob(&uart, b);
	ck_assert_uint_eq(b[0], 1);
	serial_init(&u, &irq2.sink, capture_out, &out);
	irq2.level = irq.level; /* as the restored interrupt controller has it */
	ck_assert_int_eq(serial_state_load(&u, b, sizeof b, err, sizeof err), 0);
	assert_same_registers(&uart, &u);
	save_blob(&u, again); /* saving the loaded UART gives the same bytes */
	ck_assert_mem_eq(again, b, sizeof b);
	/* the line's level comes from the interrupt controller's state:
	 * loading does not drive it */
	ck_assert_int_eq(irq2.raises + irq2.lowers, 0);
	/* what the guest reads back is the same on both */
	static const unsigned offs[] = { LCR, MCR, LSR, MSR, SCR, IER };
	for (unsigned i = 0; i < sizeof offs / sizeof offs[0]; i++)
		ck_assert_uint_eq(serial_in(&u, offs[i]), serial_in(&uart, offs[i]));
	serial_out(&u, LCR, 0x9b);
	serial_out(&uart, LCR, 0x9b);
	ck_assert_uint_eq(serial_in(&u, DATA), 0x80);
	ck_assert_uint_eq(serial_in(&u, IER), serial_in(&uart, IER));
	serial_out(&u, LCR, 0x1b);
	serial_out(&uart, LCR, 0x1b);
	/* the pending THRE interrupt is taken on the loaded UART as on the
	 * first: IIR names it (FIFO bits set) and the line goes low once */
	ck_assert_uint_eq(serial_in(&u, IIR), 0xc2);
	ck_assert_int_eq(irq2.lowers, 1);
	ck_assert_uint_eq(serial_in(&u, IIR), 0xc1);
	ck_assert_uint_eq(serial_in(&uart, IIR), 0xc2);
	assert_same_registers(&uart, &u);
	/* and it goes on: output, and a byte from the host */
	serial_out(&u, DATA, 'r');
	ck_assert_uint_eq(out.n, 1);
	ck_assert_uint_eq(out.b[0], 'r');
	ck_assert_int_eq(irq2.raises, 1);
	const uint8_t c = 'k';
	ck_assert_uint_eq(serial_feed(&u, &c, 1), 1);
	ck_assert_uint_eq(serial_in(&u, IIR) & 0x0f, 0x04);
	ck_assert_uint_eq(serial_in(&u, DATA), 'k');
	ck_assert_int_eq(irq2.redundant, 0);
	serial_destroy(&u);
	/* a fresh UART's state loads too (reset values) */
	serial_destroy(&uart);
	serial_init(&uart, &irq.sink, NULL, NULL);
	save_blob(&uart, again);
	serial_init(&u, NULL, NULL, NULL);
	u.scr = 0x77;
	ck_assert_int_eq(serial_state_load(&u, again, sizeof again, err, sizeof err), 0);
	assert_same_registers(&uart, &u);
	ck_assert_uint_eq(u.dll, 0x0c);
	ck_assert_uint_eq(u.mcr, 0x08);
	serial_destroy(&u);
}
END_TEST

/* Each bad blob is refused with -EINVAL and a line, the UART untouched. */
static void assert_refused(const uint8_t *b, size_t len)
{
	struct serial before = uart;
	char err[128] = "";
	ck_assert_int_eq(serial_state_load(&uart, b, len, err, sizeof err), -EINVAL);
	ck_assert_str_ne(err, "");
	ck_assert_ptr_nonnull(strstr(err, "serial port"));
	assert_same_registers(&before, &uart);
}

START_TEST(state_load_refuses_bad_blobs)
{
	uint8_t good[SERIAL_STATE_LEN], b[SERIAL_STATE_LEN + 1];
	char err[128];
	program_uart(&uart);
	save_blob(&uart, good);
	serial_out(&uart, SCR, 0x11); /* loads that fail leave this */
	serial_out(&uart, IER, 0x00);

	memcpy(b, good, sizeof good);
	b[SERIAL_STATE_LEN] = 0;
	assert_refused(b, SERIAL_STATE_LEN + 1);
	assert_refused(b, SERIAL_STATE_LEN - 1);
	assert_refused(b, 1);
	ck_assert_int_eq(serial_state_load(&uart, NULL, 0, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "state of 0 bytes"));
	static const struct {
		unsigned at;
		uint8_t v;
	} bad[] = {
		{ 0, 0 },    { 0, 2 },    { 0, 0xff },          /* version */
		{ 1, 0x10 }, { 1, 0x80 }, { 1, 0x1f },          /* IER above 0x0f */
		{ 3, 0x20 }, { 3, 0x40 }, { 3, 0xff },          /* MCR above 0x1f */
		{ 7, 0x02 }, { 7, 0x04 }, { 7, 0x10 }, { 7, 0x20 }, { 7, 0xff }, /* FCR outside 0xc9 */
		{ 8, 2 },    { 8, 0xff },                        /* thre_pending */
	};
	for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memcpy(b, good, sizeof good);
		b[bad[i].at] = bad[i].v;
		assert_refused(b, SERIAL_STATE_LEN);
	}
	for (unsigned at = 9; at < SERIAL_STATE_LEN; at++) {
		memcpy(b, good, sizeof good);
		b[at] = 1;
		assert_refused(b, SERIAL_STATE_LEN);
	}
	ck_assert_uint_eq(uart.scr, 0x11);
	/* the bounds themselves pass */
	memcpy(b, good, sizeof good);
	b[1] = 0x0f, b[3] = 0x1f, b[7] = 0xc9, b[8] = 1, b[2] = 0xff, b[4] = 0xff;
	ck_assert_int_eq(serial_state_load(&uart, b, SERIAL_STATE_LEN, err, sizeof err), 0);
	ck_assert_uint_eq(uart.mcr, 0x1f);
	ck_assert_uint_eq(uart.scr, 0xff);
}
END_TEST

START_TEST(state_save_refuses_received_bytes)
{
	struct statebuf_writer w;
	char err[128] = "";
	statebuf_init(&w);
	serial_out(&uart, MCR, 0x10); /* loopback: the byte comes back in */
	serial_out(&uart, DATA, 0x42);
	ck_assert_uint_eq(serial_rx_pending(&uart), 1);
	ck_assert_int_eq(serial_state_save(&uart, &w, err, sizeof err), -EBUSY);
	ck_assert_str_eq(err, "serial port: 1 received byte(s) not read yet");
	ck_assert_uint_eq(w.len, 0);
	ck_assert_uint_eq(serial_in(&uart, DATA), 0x42);
	ck_assert_int_eq(serial_state_save(&uart, &w, err, sizeof err), 0);
	ck_assert_uint_eq(w.len, SERIAL_STATE_LEN);
	/* host input waiting counts the same */
	serial_out(&uart, MCR, 0x00);
	const uint8_t in[3] = "abc";
	ck_assert_uint_eq(serial_feed(&uart, in, 3), 3);
	ck_assert_int_eq(serial_state_save(&uart, &w, err, sizeof err), -EBUSY);
	ck_assert_uint_eq(w.len, SERIAL_STATE_LEN);
	/* loading a state drops what was received before */
	ck_assert_int_eq(serial_state_load(&uart, w.buf, w.len, err, sizeof err), 0);
	ck_assert_uint_eq(serial_rx_pending(&uart), 0);
	statebuf_free(&w);
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
				  guest_garbage_keeps_invariants,
				  state_round_trip,
				  state_load_refuses_bad_blobs,
				  state_save_refuses_received_bytes);
}
