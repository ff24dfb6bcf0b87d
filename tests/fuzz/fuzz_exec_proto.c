/* Input: the first byte picks how the rest is cut into reads (1..256
 * bytes each); the rest is an exec channel byte stream.  Every frame is
 * checked and decoded by its type as either end would.  A decoded EXEC
 * must encode back to the same bytes.  Nothing may crash, leak or read
 * out of bounds (the EXEC payload is copied to a buffer of exact size so
 * ASan sees any overread). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/exec_proto.h"

static struct exec_proto_reader rd;
static uint8_t reenc[EXEC_PROTO_MAX_FRAME];

static void decode(const struct exec_proto_frame *f)
{
	if (exec_proto_check(f->type, f->len) < 0)
		return;
	uint32_t v;
	int signo;
	uint16_t rows, cols;
	switch (f->type) {
	case EXEC_PROTO_EXEC: {
		uint8_t *p = malloc(f->len ? f->len : 1);
		if (!p)
			return;
		memcpy(p, f->payload, f->len);
		struct exec_proto_exec req;
		if (exec_proto_decode_exec(p, f->len, &req) == 0) {
			size_t n;
			if (exec_proto_encode_exec(&req, reenc, sizeof reenc, &n) != 0 ||
			    n != EXEC_PROTO_HDR + f->len || memcmp(reenc + EXEC_PROTO_HDR, f->payload, f->len))
				abort();
			exec_proto_exec_free(&req);
		}
		free(p);
		break;
	}
	case EXEC_PROTO_SIGNAL:
		if (exec_proto_get_signal(f, &signo) == 0 && (signo < 1 || signo > 64))
			abort();
		break;
	case EXEC_PROTO_RESIZE:
		exec_proto_get_resize(f, &rows, &cols);
		break;
	case EXEC_PROTO_STARTED:
	case EXEC_PROTO_EXIT:
	case EXEC_PROTO_CREDIT:
		if (exec_proto_get_u32(f, &v) != 0)
			abort();
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	size_t chunk = (size_t)data[0] + 1;
	data++;
	size--;
	exec_proto_rd_init(&rd);
	while (size) {
		size_t room;
		uint8_t *dst = exec_proto_rd_space(&rd, &room);
		if (!room)
			abort(); /* a whole frame is always taken before this */
		size_t k = size < chunk ? size : chunk;
		if (k > room)
			k = room;
		memcpy(dst, data, k);
		exec_proto_rd_commit(&rd, k);
		data += k;
		size -= k;
		struct exec_proto_frame f;
		int rc;
		while ((rc = exec_proto_rd_next(&rd, &f)) == 1)
			decode(&f);
		if (rc < 0)
			return 0;
	}
	return 0;
}
