#include "proto/runcfg.h"

#include <errno.h>
#include <string.h>

static const uint8_t magic[4] = {'K', 'B', 'R', 'C'};

static void put16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *b, uint32_t v)
{
	put16(b, (uint16_t)v);
	put16(b + 2, (uint16_t)(v >> 16));
}

static uint16_t get16(const uint8_t *b)
{
	return (uint16_t)(b[0] | b[1] << 8);
}

static uint32_t get32(const uint8_t *b)
{
	return (uint32_t)get16(b) | (uint32_t)get16(b + 2) << 16;
}

static int words_ok(const char *w, size_t n)
{
	if (n > RUNCFG_WORDS_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)w[i] < 0x20 || (unsigned char)w[i] > 0x7e)
			return 0;
	return 1;
}

static uint8_t *put_rec(uint8_t *p, uint16_t type, const void *v, size_t len)
{
	put16(p, type);
	put32(p + 2, (uint32_t)len);
	if (len)
		memcpy(p + RUNCFG_REC_HDR, v, len);
	return p + RUNCFG_REC_HDR + len;
}

int runcfg_encode(const struct runcfg *c, uint8_t *out, size_t cap, size_t *n)
{
	uint8_t clk[12], *p;
	size_t total;

	if ((c->words_len && !c->words) || !words_ok(c->words, c->words_len) || c->clock_nsec >= 1000000000u ||
	    !c->entropy || c->entropy_len < RUNCFG_ENTROPY_MIN || c->entropy_len > RUNCFG_ENTROPY_MAX)
		return -EINVAL;
	total = RUNCFG_HDR + 3 * RUNCFG_REC_HDR + c->words_len + sizeof clk + c->entropy_len;
	if (total > RUNCFG_MAX)
		return -EINVAL;
	if (total > cap)
		return -ENOSPC;
	memcpy(out, magic, 4);
	put16(out + 4, RUNCFG_VERSION);
	put32(out + 6, (uint32_t)(total - RUNCFG_HDR));
	put32(clk, (uint32_t)c->clock_sec);
	put32(clk + 4, (uint32_t)(c->clock_sec >> 32));
	put32(clk + 8, c->clock_nsec);
	p = put_rec(out + RUNCFG_HDR, RUNCFG_WORDS, c->words, c->words_len);
	p = put_rec(p, RUNCFG_CLOCK, clk, sizeof clk);
	put_rec(p, RUNCFG_ENTROPY, c->entropy, c->entropy_len);
	*n = total;
	return 0;
}

long runcfg_message_len(const uint8_t hdr[RUNCFG_HDR])
{
	uint32_t body;

	if (memcmp(hdr, magic, 4) != 0 || get16(hdr + 4) != RUNCFG_VERSION)
		return -EPROTO;
	body = get32(hdr + 6);
	if (body > RUNCFG_MAX - RUNCFG_HDR)
		return -EPROTO;
	return (long)(RUNCFG_HDR + body);
}

int runcfg_decode(const uint8_t *buf, size_t len, struct runcfg *c)
{
	unsigned seen = 0;
	size_t off;
	long want;

	memset(c, 0, sizeof *c);
	if (len < RUNCFG_HDR)
		return -EPROTO;
	want = runcfg_message_len(buf);
	if (want < 0 || (size_t)want != len)
		return -EPROTO;
	for (off = RUNCFG_HDR; off < len;) {
		uint16_t type;
		uint32_t rlen;
		const uint8_t *v;

		if (len - off < RUNCFG_REC_HDR)
			return -EPROTO;
		type = get16(buf + off);
		rlen = get32(buf + off + 2);
		off += RUNCFG_REC_HDR;
		if (rlen > len - off)
			return -EPROTO;
		v = buf + off;
		off += rlen;
		if (type >= RUNCFG_OPTIONAL)
			continue;
		if (type < RUNCFG_WORDS || type > RUNCFG_ENTROPY || (seen & 1u << type))
			return -EPROTO;
		seen |= 1u << type;
		switch (type) {
		case RUNCFG_WORDS:
			if (!words_ok((const char *)v, rlen))
				return -EPROTO;
			c->words = (const char *)v;
			c->words_len = rlen;
			break;
		case RUNCFG_CLOCK:
			if (rlen != 12 || get32(v + 8) >= 1000000000u)
				return -EPROTO;
			c->clock_sec = (uint64_t)get32(v) | (uint64_t)get32(v + 4) << 32;
			c->clock_nsec = get32(v + 8);
			break;
		case RUNCFG_ENTROPY:
			if (rlen < RUNCFG_ENTROPY_MIN || rlen > RUNCFG_ENTROPY_MAX)
				return -EPROTO;
			c->entropy = v;
			c->entropy_len = rlen;
			break;
		}
	}
	if (seen != (1u << RUNCFG_WORDS | 1u << RUNCFG_CLOCK | 1u << RUNCFG_ENTROPY))
		return -EPROTO;
	return 0;
}
