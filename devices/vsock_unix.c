#include "devices/vsock_unix.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static struct vu_entry *new_entry(struct vsock_unix *u, int fd)
{
	for (unsigned i = 0; i < VU_MAX; i++) {
		struct vu_entry *e = &u->e[i];
		if (e->fd < 0) {
			uint8_t *out = malloc(VU_OUTBUF);
			if (!out)
				return NULL;
			memset(e, 0, sizeof *e);
			e->fd = fd;
			e->out = out;
			return e;
		}
	}
	return NULL;
}

static void drop_entry(struct vu_entry *e)
{
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
	e->conn = NULL;
	free(e->out);
	e->out = NULL;
	e->out_off = e->out_len = 0;
}

/* Close fd and RST the guest side. */
static void abort_entry(struct vsock_unix *u, struct vu_entry *e)
{
	struct virtio_vsock_conn *c = e->conn;
	drop_entry(e);
	if (c) {
		c->user = NULL;
		virtio_vsock_host_close(u->vs, c);
	}
}

static int unix_addr(struct sockaddr_un *sa, const char *path)
{
	memset(sa, 0, sizeof *sa);
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sa->sun_path)
		return -ENAMETOOLONG;
	strcpy(sa->sun_path, path);
	return 0;
}

/* Write buffered guest data, then pull more from the device while the fd
 * takes it.  Once all is out and the guest is done sending, pass EOF on. */
static void pump_out(struct vsock_unix *u, struct vu_entry *e)
{
	for (;;) {
		if (e->out_len == 0) {
			if (!e->conn)
				return;
			e->out_off = 0;
			e->out_len = (unsigned)virtio_vsock_host_recv(u->vs, e->conn, e->out, VU_OUTBUF);
			/* The device's callbacks during that call may have
			 * dropped the entry (a failed read on its fd). */
			if (e->fd < 0)
				return;
			if (e->out_len == 0)
				break;
		}
		ssize_t n = send(e->fd, e->out + e->out_off, e->out_len, MSG_NOSIGNAL);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			abort_entry(u, e);
			return;
		}
		e->out_off += (unsigned)n;
		e->out_len -= (unsigned)n;
	}
	if (e->conn && (e->conn->peer_shut & VIRTIO_VSOCK_SHUT_SEND) && !e->fd_wr_shut) {
		shutdown(e->fd, SHUT_WR);
		e->fd_wr_shut = true;
	}
	if (e->closing)
		abort_entry(u, e); /* RST completes the guest's clean close */
}

/* Read from fd into the device as far as guest-bound buffer room allows. */
static void pump_in(struct vsock_unix *u, struct vu_entry *e)
{
	uint8_t buf[16384];

	while (e->conn && e->fd >= 0) {
		size_t room = virtio_vsock_host_send_room(e->conn);
		if (room == 0)
			return;
		ssize_t n = recv(e->fd, buf, room < sizeof buf ? room : sizeof buf, 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n < 0) {
			abort_entry(u, e);
			return;
		}
		if (n == 0) {
			e->rd_eof = true;
			virtio_vsock_host_shutdown(u->vs, e->conn, VIRTIO_VSOCK_SHUT_SEND);
			return;
		}
		/* room was checked, so everything read is taken */
		virtio_vsock_host_send(u->vs, e->conn, buf, (size_t)n);
	}
}

/* "CONNECT <port>\n" on a control connection. */
static void read_ctrl_line(struct vsock_unix *u, struct vu_entry *e)
{
	while (e->line_len < VU_LINE) {
		ssize_t n = recv(e->fd, e->line + e->line_len, 1, 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0)
			break;
		if (e->line[e->line_len++] != '\n')
			continue;
		e->line[e->line_len - 1] = 0;
		char *end;
		if (strncmp(e->line, "CONNECT ", 8) != 0 || e->line[8] < '0' || e->line[8] > '9')
			break;
		errno = 0;
		unsigned long port = strtoul(e->line + 8, &end, 10);
		if (errno || *end || port > UINT32_MAX)
			break;
		struct virtio_vsock_conn *c;
		if (virtio_vsock_host_connect(u->vs, (uint32_t)port, e, &c) < 0)
			break;
		e->conn = c;
		return;
	}
	drop_entry(e); /* bad line, EOF or refused */
}

static struct vu_entry *entry_of(struct virtio_vsock_conn *c)
{
	return c->user;
}

static int cb_connect_request(void *ctx, struct virtio_vsock_conn *c, uint32_t port)
{
	struct vsock_unix *u = ctx;
	char path[sizeof u->path + 16];
	struct sockaddr_un sa;

	if (u->notice_fd >= 0 && port == u->notice_port) {
		uint64_t one = 1;
		ssize_t w = write(u->notice_fd, &one, sizeof one);
		(void)w; /* an eventfd counter does not overflow at this rate */
		return -ECONNREFUSED;
	}

	snprintf(path, sizeof path, "%s_%u", u->path, port);
	if (unix_addr(&sa, path) < 0)
		return -ENAMETOOLONG;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A Unix connect completes at once or fails; EAGAIN means the
	 * listener's backlog is full, which we treat as a refusal. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	struct vu_entry *e = new_entry(u, fd);
	if (!e) {
		close(fd);
		return -ENOSPC;
	}
	e->conn = c;
	c->user = e;
	return 0;
}

static void cb_connected(void *ctx, struct virtio_vsock_conn *c, int err)
{
	struct vsock_unix *u = ctx;
	struct vu_entry *e = entry_of(c);
	char ok[VU_LINE];

	if (!e)
		return;
	if (err < 0) {
		e->conn = NULL;
		drop_entry(e);
		return;
	}
	int len = snprintf(ok, sizeof ok, "OK %u\n", c->local_port);
	/* A fresh socket always has room for a dozen bytes. */
	if (send(e->fd, ok, (size_t)len, MSG_NOSIGNAL) != len)
		abort_entry(u, e);
}

static void cb_readable(void *ctx, struct virtio_vsock_conn *c)
{
	if (entry_of(c))
		pump_out(ctx, entry_of(c));
}

static void cb_writable(void *ctx, struct virtio_vsock_conn *c)
{
	if (entry_of(c))
		pump_in(ctx, entry_of(c));
}

static void cb_shutdown(void *ctx, struct virtio_vsock_conn *c, uint32_t flags)
{
	struct vu_entry *e = entry_of(c);

	if (!e)
		return;
	if (flags == (VIRTIO_VSOCK_SHUT_RCV | VIRTIO_VSOCK_SHUT_SEND))
		e->closing = true;
	pump_out(ctx, e);
}

static void cb_closed(void *ctx, struct virtio_vsock_conn *c)
{
	struct vu_entry *e = entry_of(c);

	if (!e)
		return;
	/* Guest data already taken still goes out before the fd closes; the
	 * best we can do without blocking is one attempt. */
	if (e->out_len)
		send(e->fd, e->out + e->out_off, e->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
	e->conn = NULL;
	drop_entry(e);
}

static const struct virtio_vsock_backend unix_backend = {
	.connect_request = cb_connect_request,
	.connected = cb_connected,
	.readable = cb_readable,
	.writable = cb_writable,
	.shutdown = cb_shutdown,
	.closed = cb_closed,
};

void vsock_unix_notice(struct vsock_unix *u, uint32_t port, int notice_fd)
{
	u->notice_port = port;
	u->notice_fd = notice_fd;
}

static int bind_control(struct vsock_unix *u)
{
	struct sockaddr_un sa;
	int r = unix_addr(&sa, u->path);
	if (r < 0)
		return r;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno == EADDRINUSE) {
		/* Replace the socket only if nobody answers on it. */
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
		if (probe >= 0)
			close(probe);
		if (live) {
			close(fd);
			return -EADDRINUSE;
		}
		unlink(u->path);
		if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
			errno = 0;
	} else {
		errno = 0;
	}
	if (errno || chmod(u->path, 0600) < 0 || listen(fd, 16) < 0) {
		r = errno ? -errno : -EIO;
		close(fd);
		return r;
	}
	u->listen_fd = fd;
	return 0;
}

int vsock_unix_init(struct vsock_unix *u, struct virtio_vsock *vs, const char *path, bool listen_ctl)
{
	memset(u, 0, sizeof *u);
	u->listen_fd = -1;
	u->notice_fd = -1;
	for (unsigned i = 0; i < VU_MAX; i++)
		u->e[i].fd = -1;
	if (strlen(path) >= sizeof u->path)
		return -ENAMETOOLONG;
	strcpy(u->path, path);
	u->vs = vs;
	if (listen_ctl) {
		int r = bind_control(u);
		if (r < 0)
			return r;
	}
	vs->backend = &unix_backend;
	vs->backend_ctx = u;
	return 0;
}

int vsock_unix_adopt(struct vsock_unix *u, int fd)
{
	int fl = fcntl(fd, F_GETFL);
	struct vu_entry *e = fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? NULL : new_entry(u, fd);
	if (!e) {
		close(fd);
		return -ENOSPC;
	}
	e->ctrl = true;
	return 0;
}

unsigned vsock_unix_pollfds(struct vsock_unix *u, struct pollfd *pfds, unsigned max)
{
	unsigned n = 0;

	if (u->listen_fd >= 0 && n < max)
		pfds[n++] = (struct pollfd){ .fd = u->listen_fd, .events = POLLIN };
	for (unsigned i = 0; i < VU_MAX && n < max; i++) {
		struct vu_entry *e = &u->e[i];
		/* poll() reports a hang-up whatever we ask for, so a hung-up fd
		 * stays out of the set rather than spin the loop; the guest's
		 * close or a failed write ends it. */
		if (e->fd < 0 || e->hup)
			continue;
		short ev = 0;
		if (!e->rd_eof && (!e->conn || virtio_vsock_host_send_room(e->conn)))
			ev |= POLLIN;
		if (e->out_len)
			ev |= POLLOUT;
		pfds[n++] = (struct pollfd){ .fd = e->fd, .events = ev };
	}
	return n;
}

static struct vu_entry *find_fd(struct vsock_unix *u, int fd)
{
	for (unsigned i = 0; i < VU_MAX; i++)
		if (u->e[i].fd == fd && fd >= 0)
			return &u->e[i];
	return NULL;
}

void vsock_unix_handle(struct vsock_unix *u, const struct pollfd *pfds, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (!pfds[i].revents)
			continue;
		if (pfds[i].fd == u->listen_fd) {
			int fd = accept4(u->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd >= 0)
				vsock_unix_adopt(u, fd);
			continue;
		}
		/* Earlier work may have closed and even reused this fd. */
		struct vu_entry *e = find_fd(u, pfds[i].fd);
		if (!e)
			continue;
		if (!e->conn) {
			read_ctrl_line(u, e);
			continue;
		}
		if (pfds[i].revents & (POLLOUT | POLLERR | POLLHUP))
			pump_out(u, e);
		if (e->fd >= 0 && e->conn && (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)))
			pump_in(u, e);
		if (e->fd >= 0 && (pfds[i].revents & (POLLHUP | POLLERR)))
			e->hup = true;
	}
}

void vsock_unix_destroy(struct vsock_unix *u)
{
	for (unsigned i = 0; i < VU_MAX; i++)
		if (u->e[i].fd >= 0)
			abort_entry(u, &u->e[i]);
	if (u->listen_fd >= 0) {
		close(u->listen_fd);
		unlink(u->path);
		u->listen_fd = -1;
	}
}
