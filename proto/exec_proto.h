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

#define EP_HDR 5u
#define EP_MAX_PAYLOAD 65536u
#define EP_MAX_FRAME (EP_HDR + EP_MAX_PAYLOAD)

/* Bytes of STDIN payload the agent grants at the start of a session, and
 * the most a host may ever have outstanding: the agent's stdin buffer. */
#define EP_STDIN_WINDOW 65536u

#define EP_FLAG_TTY 1u

/* The guest vsock port the agent listens on. */
#define EP_VSOCK_PORT 1024u

enum ep_type {
	/* host → guest */
	EP_EXEC = 0x01,
	EP_STDIN = 0x02,
	EP_STDIN_EOF = 0x03,
	EP_SIGNAL = 0x04,
	EP_RESIZE = 0x05,
	/* guest → host */
	EP_STARTED = 0x81,
	EP_STDOUT = 0x82,
	EP_STDERR = 0x83,
	EP_EXIT = 0x84,
	EP_ERROR = 0x85,
	EP_CREDIT = 0x86,
};

/* A command to run.  argv and envp are NULL-terminated; after
 * ep_decode_exec they point into the decoded payload, which must outlive
 * the request. */
struct ep_exec {
	uint32_t flags;   /* EP_FLAG_* */
	uint16_t rows, cols;
	uint32_t argc;    /* >= 1 */
	char **argv;
	uint32_t envc;
	char **envp;      /* "K=V" strings */
	const char *cwd;  /* "" means "/" */
};

/* Incremental frame reader: the caller appends stream bytes at
 * ep_rd_space() and then takes whole frames with ep_rd_next().  The buffer
 * holds one maximal frame, so memory stays bounded whatever the peer
 * sends. */
struct ep_reader {
	size_t start, len; /* unread bytes are buf[start, start + len) */
	uint8_t buf[EP_MAX_FRAME];
};

/* One frame inside an ep_reader; payload is valid until the next call on
 * the reader. */
struct ep_frame {
	uint8_t type;
	uint32_t len;
	const uint8_t *payload;
};

/* Make r empty. */
void ep_rd_init(struct ep_reader *r);

/* Where the next stream bytes go: returns a pointer and stores the room
 * left in *room (0 when a whole frame is waiting: take it first). */
uint8_t *ep_rd_space(struct ep_reader *r, size_t *room);

/* Record that n bytes (n <= room from ep_rd_space) were stored. */
void ep_rd_commit(struct ep_reader *r, size_t n);

/* Take the next complete frame.  Returns 1 and fills *f, 0 if more bytes
 * are needed, or -EPROTO if the header announces a payload larger than
 * EP_MAX_PAYLOAD (the stream cannot be resynchronized: close it). */
int ep_rd_next(struct ep_reader *r, struct ep_frame *f);

/* Whether bytes of an incomplete frame are buffered (a stream that ends
 * now was cut in the middle of a frame). */
int ep_rd_partial(const struct ep_reader *r);

/* Check the payload length a frame type requires and that the type is
 * known.  Returns 0 or -EPROTO.  Data frames (STDIN, STDOUT, STDERR,
 * ERROR) take any length; EXEC's payload is checked by ep_decode_exec. */
int ep_check(uint8_t type, uint32_t len);

/* Write a frame header for type and len at out (EP_HDR bytes). */
void ep_put_hdr(uint8_t *out, uint8_t type, uint32_t len);

/* Write a frame whose payload is one u32 (SIGNAL, STARTED, EXIT, CREDIT)
 * at out.  Returns its size (EP_HDR + 4). */
size_t ep_put_u32(uint8_t *out, uint8_t type, uint32_t v);

/* Write a RESIZE frame at out.  Returns its size (EP_HDR + 4). */
size_t ep_put_resize(uint8_t *out, uint16_t rows, uint16_t cols);

/* Read the u32 payload of a 4-byte frame.  Returns 0 or -EPROTO. */
int ep_get_u32(const struct ep_frame *f, uint32_t *v);

/* Decode a SIGNAL payload; signo must be 1..64.  Returns 0 or -EPROTO. */
int ep_get_signal(const struct ep_frame *f, int *signo);

/* Decode a RESIZE payload.  Returns 0 or -EPROTO. */
int ep_get_resize(const struct ep_frame *f, uint16_t *rows, uint16_t *cols);

/* Encode req as a complete EXEC frame into out (cap bytes).  Stores the
 * frame size in *n.  Returns 0, -EINVAL if argc is 0 or a vector is
 * shorter than its count, or -E2BIG if the payload would exceed
 * EP_MAX_PAYLOAD or cap. */
int ep_encode_exec(const struct ep_exec *req, uint8_t *out, size_t cap, size_t *n);

/* Decode an EXEC payload in place (strings stay in payload, which must be
 * writable and outlive *req).  Allocates req->argv and req->envp in one
 * block; free it with ep_exec_free.  Returns 0, -EPROTO for a malformed
 * payload (truncated, counts larger than the payload, a string without
 * its NUL, argc 0, bytes left over), or -ENOMEM. */
int ep_decode_exec(uint8_t *payload, uint32_t len, struct ep_exec *req);

/* Free what ep_decode_exec allocated (safe on a zeroed request). */
void ep_exec_free(struct ep_exec *req);

#endif
