/* Exec channel wire format (docs/exec-protocol.md): a stream of frames,
 * each 1 byte type, 4 bytes little-endian payload length, payload.  Pure
 * encoding and decoding, no I/O and only libc, so that the host (kbox) and
 * the guest agent (guest-init, built with musl) share one implementation.
 * Every input is treated as hostile: a decoder never reads past the bytes
 * it was given and returns -EPROTO for anything malformed. */
#ifndef KBOX_EXEC_PROTO_H
#define KBOX_EXEC_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define EXEC_PROTO_HDR 5u
#define EXEC_PROTO_MAX_PAYLOAD 65536u
#define EXEC_PROTO_MAX_FRAME (EXEC_PROTO_HDR + EXEC_PROTO_MAX_PAYLOAD)

/* Bytes of STDIN payload the agent grants at the start of a session, and
 * the most a host may ever have outstanding: the agent's stdin buffer. */
#define EXEC_PROTO_STDIN_WINDOW 65536u

#define EXEC_PROTO_FLAG_TTY 1u

/* The guest vsock port the agent listens on. */
#define EXEC_PROTO_VSOCK_PORT 1024u

enum exec_proto_type {
	/* host → guest */
	EXEC_PROTO_EXEC = 0x01,
	EXEC_PROTO_STDIN = 0x02,
	EXEC_PROTO_STDIN_EOF = 0x03,
	EXEC_PROTO_SIGNAL = 0x04,
	EXEC_PROTO_RESIZE = 0x05,
	/* guest → host */
	EXEC_PROTO_STARTED = 0x81,
	EXEC_PROTO_STDOUT = 0x82,
	EXEC_PROTO_STDERR = 0x83,
	EXEC_PROTO_EXIT = 0x84,
	EXEC_PROTO_ERROR = 0x85,
	EXEC_PROTO_CREDIT = 0x86,
};

/* A command to run.  argv and envp are NULL-terminated; after
 * exec_proto_decode_exec they point into the decoded payload, which must outlive
 * the request. */
struct exec_proto_exec {
	uint32_t flags;   /* EXEC_PROTO_FLAG_* */
	uint16_t rows, cols;
	uint32_t argc;    /* >= 1 */
	char **argv;
	uint32_t envc;
	char **envp;      /* "K=V" strings */
	const char *cwd;  /* "" means "/" */
};

/* Incremental frame reader: the caller appends stream bytes at
 * exec_proto_rd_space() and then takes whole frames with exec_proto_rd_next().  The buffer
 * holds one maximal frame, so memory stays bounded whatever the peer
 * sends. */
struct exec_proto_reader {
	size_t start, len; /* unread bytes are buf[start, start + len) */
	uint8_t buf[EXEC_PROTO_MAX_FRAME];
};

/* One frame inside an exec_proto_reader; payload is valid until the next call on
 * the reader. */
struct exec_proto_frame {
	uint8_t type;
	uint32_t len;
	const uint8_t *payload;
};

/* Make r empty. */
void exec_proto_rd_init(struct exec_proto_reader *r);

/* Where the next stream bytes go: returns a pointer and stores the room
 * left in *room (0 when a whole frame is waiting: take it first). */
uint8_t *exec_proto_rd_space(struct exec_proto_reader *r, size_t *room);

/* Record that n bytes (n <= room from exec_proto_rd_space) were stored. */
void exec_proto_rd_commit(struct exec_proto_reader *r, size_t n);

/* Take the next complete frame.  Returns 1 and fills *f, 0 if more bytes
 * are needed, or -EPROTO if the header announces a payload larger than
 * EXEC_PROTO_MAX_PAYLOAD (the stream cannot be resynchronized: close it). */
int exec_proto_rd_next(struct exec_proto_reader *r, struct exec_proto_frame *f);

/* Whether bytes of an incomplete frame are buffered (a stream that ends
 * now was cut in the middle of a frame). */
int exec_proto_rd_partial(const struct exec_proto_reader *r);

/* Check the payload length a frame type requires and that the type is
 * known.  Returns 0 or -EPROTO.  Data frames (STDIN, STDOUT, STDERR,
 * ERROR) take any length; EXEC's payload is checked by exec_proto_decode_exec. */
int exec_proto_check(uint8_t type, uint32_t len);

/* Write a frame header for type and len at out (EXEC_PROTO_HDR bytes). */
void exec_proto_put_hdr(uint8_t *out, uint8_t type, uint32_t len);

/* Write a frame whose payload is one u32 (SIGNAL, STARTED, EXIT, CREDIT)
 * at out.  Returns its size (EXEC_PROTO_HDR + 4). */
size_t exec_proto_put_u32(uint8_t *out, uint8_t type, uint32_t v);

/* Write a RESIZE frame at out.  Returns its size (EXEC_PROTO_HDR + 4). */
size_t exec_proto_put_resize(uint8_t *out, uint16_t rows, uint16_t cols);

/* Read the u32 payload of a 4-byte frame.  Returns 0 or -EPROTO. */
int exec_proto_get_u32(const struct exec_proto_frame *f, uint32_t *v);

/* Decode a SIGNAL payload; signo must be 1..64.  Returns 0 or -EPROTO. */
int exec_proto_get_signal(const struct exec_proto_frame *f, int *signo);

/* Decode a RESIZE payload.  Returns 0 or -EPROTO. */
int exec_proto_get_resize(const struct exec_proto_frame *f, uint16_t *rows, uint16_t *cols);

/* Encode req as a complete EXEC frame into out (cap bytes).  Stores the
 * frame size in *n.  Returns 0, -EINVAL if argc is 0 or a vector is
 * shorter than its count, or -E2BIG if the payload would exceed
 * EXEC_PROTO_MAX_PAYLOAD or cap. */
int exec_proto_encode_exec(const struct exec_proto_exec *req, uint8_t *out, size_t cap, size_t *n);

/* Decode an EXEC payload in place (strings stay in payload, which must be
 * writable and outlive *req).  Allocates req->argv and req->envp in one
 * block; free it with exec_proto_exec_free.  Returns 0, -EPROTO for a malformed
 * payload (truncated, counts larger than the payload, a string without
 * its NUL, argc 0, bytes left over), or -ENOMEM. */
int exec_proto_decode_exec(uint8_t *payload, uint32_t len, struct exec_proto_exec *req);

/* Free what exec_proto_decode_exec allocated (safe on a zeroed request). */
void exec_proto_exec_free(struct exec_proto_exec *req);

#endif
