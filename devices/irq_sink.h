/* How a device model raises its interrupt without knowing about KVM. */
#ifndef KBOX_IRQ_SINK_H
#define KBOX_IRQ_SINK_H

/* The VMM's sink writes to an irqfd (edge) or drives KVM_IRQ_LINE (level);
 * tests count calls.  set_level(…, 1) asserts the line, 0 deasserts it;
 * an edge-only sink may ignore 0.  Must be safe to call from any thread. */
struct irq_sink {
	void (*set_level)(struct irq_sink *s, int level);
};

/* Assert s's line (for an edge sink: send one interrupt).  A NULL sink,
 * or one without set_level, does nothing, so a device made without an
 * interrupt (a unit test's) needs no checks of its own. */
static inline void irq_sink_raise(struct irq_sink *s)
{
	if (s && s->set_level)
		s->set_level(s, 1);
}

/* Deassert s's line; NULL-safe like irq_sink_raise. */
static inline void irq_sink_lower(struct irq_sink *s)
{
	if (s && s->set_level)
		s->set_level(s, 0);
}

#endif
