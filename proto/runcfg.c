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

static int printable(const char *t, size_t n, int pem)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)t[i];
		if ((ch < 0x20 || ch > 0x7e) && !(pem && (ch == '\n' || ch == '\r' || ch == '\t')))
			return 0;
	}
	return 1;
}

/* NUL-terminated NAME=VALUE entries, NAME not empty, nothing after the
 * last NUL. */
static int env_ok(const char *t, size_t n)
{
	size_t off = 0;

	if (n > RUNCFG_ENV_MAX || (n && t[n - 1] != '\0'))
		return 0;
	while (off < n) {
		const char *e = t + off;
		size_t l = strlen(e); /* stops at the final NUL at the latest */
		const char *eq = memchr(e, '=', l);
		if (!eq || eq == e)
			return 0;
		off += l + 1;
	}
	return 1;
}

int runcfg_text_ok(enum runcfg_type type, const char *t, size_t n)
{
	if (n && !t)
		return 0;
	switch (type) {
	case RUNCFG_WORDS:
		return n <= RUNCFG_WORDS_MAX && printable(t, n, 0);
	case RUNCFG_ENV:
		return env_ok(t, n);
	case RUNCFG_CA:
		return n <= RUNCFG_CA_MAX && printable(t, n, 1);
	case RUNCFG_HOSTNAME:
		if (n > RUNCFG_HOSTNAME_MAX)
			return 0;
		for (size_t i = 0; i < n; i++) {
			char ch = t[i];
			if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
			      ch == '.' || ch == '_' || ch == '-'))
				return 0;
		}
		return 1;
	default:
		return 0;
	}
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

	if (!runcfg_text_ok(RUNCFG_WORDS, c->words, c->words_len) || !runcfg_text_ok(RUNCFG_ENV, c->env, c->env_len) ||
	    !runcfg_text_ok(RUNCFG_CA, c->ca, c->ca_len) ||
	    !runcfg_text_ok(RUNCFG_HOSTNAME, c->hostname, c->hostname_len) || c->clock_nsec >= 1000000000u ||
	    !c->entropy || c->entropy_len < RUNCFG_ENTROPY_MIN || c->entropy_len > RUNCFG_ENTROPY_MAX)
		return -EINVAL;
	total = RUNCFG_HDR + 3 * RUNCFG_REC_HDR + c->words_len + sizeof clk + c->entropy_len;
	total += c->env_len ? RUNCFG_REC_HDR + c->env_len : 0;
	total += c->ca_len ? RUNCFG_REC_HDR + c->ca_len : 0;
	total += c->hostname_len ? RUNCFG_REC_HDR + c->hostname_len : 0;
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
	p = put_rec(p, RUNCFG_ENTROPY, c->entropy, c->entropy_len);
	if (c->env_len)
		p = put_rec(p, RUNCFG_ENV, c->env, c->env_len);
	if (c->ca_len)
		p = put_rec(p, RUNCFG_CA, c->ca, c->ca_len);
	if (c->hostname_len)
		put_rec(p, RUNCFG_HOSTNAME, c->hostname, c->hostname_len);
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
		if (type < RUNCFG_WORDS || type > RUNCFG_HOSTNAME || (seen & 1u << type))
			return -EPROTO;
		seen |= 1u << type;
		switch (type) {
		case RUNCFG_WORDS:
		case RUNCFG_ENV:
		case RUNCFG_CA:
		case RUNCFG_HOSTNAME:
			/* An optional text is sent only when not empty. */
			if (!runcfg_text_ok(type, (const char *)v, rlen) || (type != RUNCFG_WORDS && rlen == 0))
				return -EPROTO;
			if (type == RUNCFG_WORDS) {
				c->words = (const char *)v;
				c->words_len = rlen;
			} else if (type == RUNCFG_ENV) {
				c->env = (const char *)v;
				c->env_len = rlen;
			} else if (type == RUNCFG_CA) {
				c->ca = (const char *)v;
				c->ca_len = rlen;
			} else {
				c->hostname = (const char *)v;
				c->hostname_len = rlen;
			}
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
	if ((seen & (1u << RUNCFG_WORDS | 1u << RUNCFG_CLOCK | 1u << RUNCFG_ENTROPY)) !=
	    (1u << RUNCFG_WORDS | 1u << RUNCFG_CLOCK | 1u << RUNCFG_ENTROPY))
		return -EPROTO;
	return 0;
}
