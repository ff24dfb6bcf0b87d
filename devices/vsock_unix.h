/* Unix-socket backend for the vsock device, compatible with Firecracker's
 * hybrid vsock: a guest connection to host port P becomes a connection to
 * the Unix socket "<path>_P"; a host program connects to the control
 * socket <path> (or hands a connected fd to vsock_unix_adopt), writes
 * "CONNECT <port>\n", receives "OK <local port>\n" once the guest accepts,
 * and the stream is then spliced to the guest.
 *
 * Every fd is non-blocking; nothing here blocks or owns a thread: the VMM's
 * event loop polls the fds from vsock_unix_pollfds and passes the result to
 * vsock_unix_handle, under the same serialization as the device. */
#ifndef KBOX_VSOCK_UNIX_H
#define KBOX_VSOCK_UNIX_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#include "devices/virtio_vsock.h"

#define VU_MAX (VIRTIO_VSOCK_MAX_CONNS + 8)
#define VU_OUTBUF 16384
#define VU_LINE 32

struct vu_entry {
	int fd;                  /* -1 when the slot is free */
	struct virtio_vsock_conn *conn; /* NULL while a control line is awaited */
	bool ctrl;               /* came in on the control socket */
	bool closing;            /* guest shut down both ways */
	bool fd_wr_shut;         /* shutdown(SHUT_WR) done */
	bool rd_eof;             /* fd gave EOF: stop polling for input */
	bool hup;                /* fd hung up: stop polling it at all */
	char line[VU_LINE];
	unsigned line_len;
	/* Guest data not yet written to fd: VU_OUTBUF bytes, allocated with
	 * the slot and freed with it (72 idle slots' buffers would be over a
	 * MiB of memory each sandbox writes for nothing). */
	uint8_t *out;
	unsigned out_off, out_len;
};

struct vsock_unix {
	struct virtio_vsock *vs;
	char path[100];
	int listen_fd;           /* -1 if there is no control socket */
	struct vu_entry e[VU_MAX];
	/* vsock_unix_notice: a guest request for this host port is refused
	 * and counted on notice_fd (an eventfd) instead; -1: none. */
	int notice_fd;
	uint32_t notice_port;
};

/* Become the backend of vs (sets vs->backend and backend_ctx; call after
 * virtio_vsock_init).  path is the base name for "<path>_<port>" and, when listen
 * is true, the control socket bound there (mode 0600; a stale socket left
 * by a dead process is replaced, a live one gives -EADDRINUSE).  Returns 0
 * or a negative errno. */
int vsock_unix_init(struct vsock_unix *u, struct virtio_vsock *vs, const char *path, bool listen);

/* From now on a guest's connection request to host port port is not
 * passed on: it is refused (a reset, no connection is made) and 1 is
 * added to the eventfd notice_fd, which stays the caller's.  notice_fd
 * -1 turns it off.  Used as a one-way signal from guest-init ("ready")
 * that leaves no connection behind. */
void vsock_unix_notice(struct vsock_unix *u, uint32_t port, int notice_fd);

/* Take ownership of a connected stream fd that will speak the CONNECT
 * protocol (e.g. handed over by the VMM's own control socket).  Returns 0
 * or -ENOSPC (fd is then closed). */
int vsock_unix_adopt(struct vsock_unix *u, int fd);

/* Fill pfds (at most max) with the fds and events to wait for.  Returns
 * the count. */
unsigned vsock_unix_pollfds(struct vsock_unix *u, struct pollfd *pfds, unsigned max);

/* Act on the readiness poll() reported for pfds[0..n) as filled by
 * vsock_unix_pollfds.  Never blocks. */
void vsock_unix_handle(struct vsock_unix *u, const struct pollfd *pfds, unsigned n);

/* Close every fd and remove the control socket.  Call before
 * virtio_vsock_destroy, or after it (connections are then already gone). */
void vsock_unix_destroy(struct vsock_unix *u);

#endif
