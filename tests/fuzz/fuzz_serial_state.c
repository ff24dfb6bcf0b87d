/* libFuzzer target for serial_state_load: a length byte (taken modulo
 * SERIAL_STATE_LEN + 4, so wrong lengths are tried too), that many bytes
 * of saved UART state, then a script of guest port accesses and host
 * input (fuzz_script.h).  A refused state leaves the UART as it was; an
 * accepted one holds only what a guest could have set and saves back to
 * the same bytes.  From there no access may break the model's invariants
 * (FIFO bounded, the line's level as the model says, never driven to
 * the level it already has), and whatever the script reached saves and
 * loads again. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/fuzz_script.h"
#include "vmm/core/serial.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

struct line {
	struct irq_sink sink;
	int level;
};

static void set_level(struct irq_sink *s, int level)
{
	struct line *l = (struct line *)s;
	check(level != l->level); /* the model drives changes only */
	l->level = level;
}

static void drop_out(void *ctx, const uint8_t *b, size_t n)
{
	(void)ctx;
	(void)b;
	check(n == 1);
}

/* The registers a load may set, and the derived level, consistent. */
static void check_registers(const struct serial *s)
{
	check((s->ier & ~0x0fu) == 0 && (s->mcr & ~0x1fu) == 0 && (s->fcr & ~0xc9u) == 0);
	check(s->thre_pending == 0 || s->thre_pending == 1);
	check(s->rx_len <= SERIAL_FIFO && s->rx_head < SERIAL_FIFO);
	int want = ((s->ier & 0x01) && s->rx_len) || ((s->ier & 0x02) && s->thre_pending);
	check(s->irq_level == want);
}

static int save(struct serial *s, uint8_t out[SERIAL_STATE_LEN])
{
	struct statebuf_writer w;
	char err[128] = "";
	statebuf_init(&w);
	int rc = serial_state_save(s, &w, err, sizeof err);
	if (rc == 0) {
		check(w.len == SERIAL_STATE_LEN);
		memcpy(out, w.buf, SERIAL_STATE_LEN);
	} else {
		check(rc == -EBUSY && err[0] && w.len == 0 && s->rx_len > 0);
	}
	statebuf_free(&w);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_input in = { data, size };
	uint8_t len8, blob[SERIAL_STATE_LEN + 4], again[SERIAL_STATE_LEN];
	struct line line = { .sink.set_level = set_level };
	struct serial s, fresh;
	char err[256] = "";

	fz_take(&in, &len8, 1);
	size_t len = len8 % (SERIAL_STATE_LEN + 4);
	fz_take(&in, blob, len);
	serial_init(&s, &line.sink, drop_out, NULL);
	serial_init(&fresh, NULL, NULL, NULL);
	int rc = serial_state_load(&s, blob, len, err, sizeof err);
	if (rc < 0) {
		/* refused: nothing taken */
		check(rc == -EINVAL && err[0]);
		check(s.ier == fresh.ier && s.lcr == fresh.lcr && s.mcr == fresh.mcr &&
		      s.scr == fresh.scr && s.dll == fresh.dll && s.dlm == fresh.dlm &&
		      s.fcr == fresh.fcr && s.thre_pending == fresh.thre_pending &&
		      s.irq_level == fresh.irq_level);
	} else {
		check(rc == 0 && len == SERIAL_STATE_LEN);
		check_registers(&s);
		check(save(&s, again) == 0 && memcmp(again, blob, SERIAL_STATE_LEN) == 0);
	}
	/* the interrupt controller's restored level is the UART's */
	line.level = s.irq_level;

	/* Steps of two bytes: what (port offset in bits 0-2; bit 3 write,
	 * bit 4 host input of value % 24 bytes instead) and a value. */
	for (unsigned steps = 0; in.left && steps < 4096; steps++) {
		uint8_t op[2];
		fz_take(&in, op, 2);
		if (op[0] & 0x10) {
			uint8_t b[24];
			unsigned n = op[1] % sizeof b;
			fz_take(&in, b, n);
			unsigned before = serial_rx_pending(&s);
			size_t took = serial_feed(&s, b, n);
			check(took <= n && before + took <= SERIAL_FIFO);
		} else if (op[0] & 0x08) {
			serial_out(&s, op[0] & 7u, op[1]);
		} else {
			(void)serial_in(&s, op[0] & 7u);
		}
		check_registers(&s);
		check(line.level == s.irq_level);
	}

	/* Whatever state the script reached saves (unless bytes wait) and
	 * loads into a fresh UART, which then saves the same. */
	if (save(&s, again) == 0) {
		uint8_t third[SERIAL_STATE_LEN];
		check(serial_state_load(&fresh, again, sizeof again, err, sizeof err) == 0);
		check_registers(&fresh);
		check(save(&fresh, third) == 0 && memcmp(again, third, sizeof third) == 0);
	}
	serial_destroy(&fresh);
	serial_destroy(&s);
	return 0;
}
