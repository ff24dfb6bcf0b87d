/* Exec channel framing; see exec_proto.h and docs/exec-protocol.md. */
#include "proto/exec_proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

void exec_proto_rd_init(struct exec_proto_reader *r)
{
	r->start = 0;
	r->len = 0;
}

uint8_t *exec_proto_rd_space(struct exec_proto_reader *r, size_t *room)
{
	/* Slide the unread tail down only when the end is reached, so that a
	 * run of small frames costs no copying. */
	if (r->start + r->len == sizeof r->buf && r->start) {
		memmove(r->buf, r->buf + r->start, r->len);
		r->start = 0;
	}
	*room = sizeof r->buf - r->start - r->len;
	return r->buf + r->start + r->len;
}

void exec_proto_rd_commit(struct exec_proto_reader *r, size_t n)
{
	r->len += n;
}

int exec_proto_rd_next(struct exec_proto_reader *r, struct exec_proto_frame *f)
{
	if (r->len < EXEC_PROTO_HDR) {
		if (!r->len)
			r->start = 0;
		return 0;
	}
	const uint8_t *p = r->buf + r->start;
	uint32_t len = get_le32(p + 1);
	if (len > EXEC_PROTO_MAX_PAYLOAD)
		return -EPROTO;
	if (r->len - EXEC_PROTO_HDR < len)
		return 0;
	f->type = p[0];
	f->len = len;
	f->payload = p + EXEC_PROTO_HDR;
	r->start += EXEC_PROTO_HDR + len;
	r->len -= EXEC_PROTO_HDR + len;
	return 1;
}

int exec_proto_rd_partial(const struct exec_proto_reader *r)
{
	return r->len != 0;
}

int exec_proto_check(uint8_t type, uint32_t len)
{
	switch (type) {
	case EXEC_PROTO_EXEC:
	case EXEC_PROTO_STDIN:
	case EXEC_PROTO_STDOUT:
	case EXEC_PROTO_STDERR:
	case EXEC_PROTO_ERROR:
		return 0;
	case EXEC_PROTO_STDIN_EOF:
		return len == 0 ? 0 : -EPROTO;
	case EXEC_PROTO_SIGNAL:
	case EXEC_PROTO_RESIZE:
	case EXEC_PROTO_STARTED:
	case EXEC_PROTO_EXIT:
	case EXEC_PROTO_CREDIT:
		return len == 4 ? 0 : -EPROTO;
	default:
		return -EPROTO;
	}
}

void exec_proto_put_hdr(uint8_t *out, uint8_t type, uint32_t len)
{
	out[0] = type;
	put_le32(out + 1, len);
}

size_t exec_proto_put_u32(uint8_t *out, uint8_t type, uint32_t v)
{
	exec_proto_put_hdr(out, type, 4);
	put_le32(out + EXEC_PROTO_HDR, v);
	return EXEC_PROTO_HDR + 4;
}

size_t exec_proto_put_resize(uint8_t *out, uint16_t rows, uint16_t cols)
{
	exec_proto_put_hdr(out, EXEC_PROTO_RESIZE, 4);
	put_le16(out + EXEC_PROTO_HDR, rows);
	put_le16(out + EXEC_PROTO_HDR + 2, cols);
	return EXEC_PROTO_HDR + 4;
}

int exec_proto_get_u32(const struct exec_proto_frame *f, uint32_t *v)
{
	if (f->len != 4)
		return -EPROTO;
	*v = get_le32(f->payload);
	return 0;
}

int exec_proto_get_signal(const struct exec_proto_frame *f, int *signo)
{
	uint32_t v;
	if (f->type != EXEC_PROTO_SIGNAL || exec_proto_get_u32(f, &v) < 0 || v < 1 || v > 64)
		return -EPROTO;
	*signo = (int)v;
	return 0;
}

int exec_proto_get_resize(const struct exec_proto_frame *f, uint16_t *rows, uint16_t *cols)
{
	if (f->type != EXEC_PROTO_RESIZE || f->len != 4)
		return -EPROTO;
	*rows = get_le16(f->payload);
	*cols = get_le16(f->payload + 2);
	return 0;
}

/* Append a u32 or a string to a payload under construction, refusing to
 * grow it past the limit. */
struct enc {
	uint8_t *p;
	size_t len, cap;
};

static int enc_u32(struct enc *e, uint32_t v)
{
	if (e->cap - e->len < 4)
		return -E2BIG;
	put_le32(e->p + e->len, v);
	e->len += 4;
	return 0;
}

static int enc_str(struct enc *e, const char *s)
{
	size_t n = strlen(s) + 1;
	if (e->cap - e->len < n)
		return -E2BIG;
	memcpy(e->p + e->len, s, n);
	e->len += n;
	return 0;
}

static int enc_vec(struct enc *e, uint32_t count, char *const *v)
{
	int rc = enc_u32(e, count);
	for (uint32_t i = 0; !rc && i < count; i++)
		rc = v && v[i] ? enc_str(e, v[i]) : -EINVAL;
	return rc;
}

int exec_proto_encode_exec(const struct exec_proto_exec *req, uint8_t *out, size_t cap, size_t *n)
{
	if (!req->argc)
		return -EINVAL;
	if (cap < EXEC_PROTO_HDR)
		return -E2BIG;
	size_t room = cap - EXEC_PROTO_HDR;
	struct enc e = { out + EXEC_PROTO_HDR, 0, room < EXEC_PROTO_MAX_PAYLOAD ? room : EXEC_PROTO_MAX_PAYLOAD };
	int rc = enc_u32(&e, req->flags);
	if (!rc && e.cap - e.len < 4)
		rc = -E2BIG;
	if (!rc) {
		put_le16(e.p + e.len, req->rows);
		put_le16(e.p + e.len + 2, req->cols);
		e.len += 4;
		rc = enc_vec(&e, req->argc, req->argv);
	}
	if (!rc)
		rc = enc_vec(&e, req->envc, req->envp);
	if (!rc)
		rc = enc_str(&e, req->cwd ? req->cwd : "");
	if (rc)
		return rc;
	exec_proto_put_hdr(out, EXEC_PROTO_EXEC, (uint32_t)e.len);
	*n = EXEC_PROTO_HDR + e.len;
	return 0;
}

/* Cursor over a payload being decoded. */
struct dec {
	uint8_t *p;
	uint32_t off, len;
};

static int dec_u32(struct dec *d, uint32_t *v)
{
	if (d->len - d->off < 4)
		return -EPROTO;
	*v = get_le32(d->p + d->off);
	d->off += 4;
	return 0;
}

static int dec_str(struct dec *d, char **s)
{
	uint8_t *start = d->p + d->off;
	uint8_t *nul = memchr(start, 0, d->len - d->off);
	if (!nul)
		return -EPROTO;
	*s = (char *)start; /* bytes we own; the NUL was just found inside */
	d->off += (uint32_t)(nul - start) + 1;
	return 0;
}

/* A count is believable only if that many strings (at least one byte
 * each) fit in what is left of the payload; this bounds the allocation by
 * the payload size and rules out overflow in count + 1. */
static int dec_count(struct dec *d, uint32_t *count)
{
	if (dec_u32(d, count) < 0 || *count > d->len - d->off)
		return -EPROTO;
	return 0;
}

int exec_proto_decode_exec(uint8_t *payload, uint32_t len, struct exec_proto_exec *req)
{
	memset(req, 0, sizeof *req);
	if (len > EXEC_PROTO_MAX_PAYLOAD)
		return -EPROTO;
	struct dec d = { payload, 0, len };
	uint32_t flags, size, argc, envc;
	if (dec_u32(&d, &flags) < 0 || dec_u32(&d, &size) < 0 || dec_count(&d, &argc) < 0)
		return -EPROTO;
	if (argc == 0 || (flags & ~EXEC_PROTO_FLAG_TTY))
		return -EPROTO;
	uint32_t args_at = d.off;
	for (uint32_t i = 0; i < argc; i++) {
		char *s;
		if (dec_str(&d, &s) < 0)
			return -EPROTO;
	}
	if (dec_count(&d, &envc) < 0)
		return -EPROTO;
	/* Both counts are bounded by len (<= 64 KiB): no overflow here. */
	char **v = calloc((size_t)argc + envc + 2, sizeof *v);
	if (!v)
		return -ENOMEM;
	int rc = 0;
	for (uint32_t i = 0; !rc && i < envc; i++) {
		rc = dec_str(&d, &v[argc + 1 + i]);
		if (!rc && !strchr(v[argc + 1 + i], '='))
			rc = -EPROTO;
	}
	char *cwd = NULL;
	if (!rc)
		rc = dec_str(&d, &cwd);
	if (!rc && d.off != d.len)
		rc = -EPROTO;
	if (rc) {
		free(v);
		return rc;
	}
	struct dec a = { payload, args_at, len };
	for (uint32_t i = 0; i < argc; i++)
		dec_str(&a, &v[i]); /* already validated above */
	req->flags = flags;
	req->rows = (uint16_t)size;
	req->cols = (uint16_t)(size >> 16);
	req->argc = argc;
	req->argv = v;
	req->envc = envc;
	req->envp = v + argc + 1;
	req->cwd = cwd;
	return 0;
}

void exec_proto_exec_free(struct exec_proto_exec *req)
{
	free(req->argv);
	req->argv = NULL;
	req->envp = NULL;
}
