/* Exec client; see exec_client.h and docs/exec-protocol.md.
 *
 * Signals arrive through a self-pipe so that the event loop handles them
 * like any other input.  The socket is non-blocking; fds 0-2 are shared
 * with the user's shell and keep their blocking mode, so output is
 * written with blocking writes that a signal interrupts (handlers are
 * installed without SA_RESTART). */
#include "vmm/sandbox/exec_client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <termios.h>
#include <unistd.h>

/* Room for one stdin frame plus the small control frames queued behind
 * it. */
#define OUT_CAP (EXEC_PROTO_MAX_FRAME + 256)

static const int caught[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH, SIGCONT };
#define NCAUGHT (sizeof caught / sizeof caught[0])

static int sig_wfd = -1;

struct client {
	int sock;
	bool tty;
	bool raw;            /* fd 0's terminal is in raw mode */
	struct termios saved;
	int sigp[2];
	struct sigaction old[NCAUGHT];
	struct sigaction old_pipe;
	bool stdin_open;
	bool stdout_broken;
	bool sock_broken;    /* writes failed: stop sending, keep reading */
	bool exited;
	int status;
	uint32_t credit;     /* STDIN bytes the agent will take */
	/* tty: what was typed before raw mode, read as canonical lines
	 * (take_typeahead), sent before anything read later. */
	size_t pre_off, pre_len;
	bool pre_eof;        /* an end-of-file was typed after pre */
	uint8_t pre[4096];
	size_t out_off, out_len;
	uint8_t out[OUT_CAP];
	struct exec_proto_reader rd;
};

static void on_signal(int signo)
{
	int e = errno;
	uint8_t b = (uint8_t)signo;
	ssize_t w = write(sig_wfd, &b, 1);
	(void)w; /* a full pipe already holds a wake-up */
	errno = e;
}

static uint8_t *out_room(struct client *c, size_t n)
{
	if (c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	if (OUT_CAP - c->out_len < n && c->out_off) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	return OUT_CAP - c->out_len >= n ? c->out + c->out_len : NULL;
}

static void flush_some(struct client *c)
{
	while (!c->sock_broken && c->out_off < c->out_len) {
		ssize_t w = write(c->sock, c->out + c->out_off, c->out_len - c->out_off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			return;
		if (w <= 0) {
			c->sock_broken = true;
			break;
		}
		c->out_off += (size_t)w;
	}
	if (c->sock_broken)
		c->out_off = c->out_len = 0;
}

/* Control frames are 9 bytes and the buffer keeps room for a burst of
 * them; past that, a signal storm is coalesced by dropping. */
static void queue_signal(struct client *c, int signo)
{
	uint8_t *p = out_room(c, EXEC_PROTO_HDR + 4);
	if (p)
		c->out_len += exec_proto_put_u32(p, EXEC_PROTO_SIGNAL, (uint32_t)signo);
}

static void set_raw(struct client *c)
{
	struct termios t = c->saved;
	cfmakeraw(&t);
	tcsetattr(0, TCSADRAIN, &t);
	c->raw = true;
}

static void restore_term(struct client *c)
{
	if (c->raw)
		tcsetattr(0, TCSADRAIN, &c->saved);
	c->raw = false;
}

static void handle_signals(struct client *c)
{
	uint8_t sigs[64];
	ssize_t n;
	while ((n = read(c->sigp[0], sigs, sizeof sigs)) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			int signo = sigs[i];
			if (signo == SIGWINCH) {
				struct winsize ws;
				uint8_t *p;
				if (c->tty && ioctl(0, TIOCGWINSZ, &ws) == 0 &&
				    (p = out_room(c, EXEC_PROTO_HDR + 4)))
					c->out_len += exec_proto_put_resize(p, ws.ws_row, ws.ws_col);
			} else if (signo == SIGCONT) {
				/* A job-control shell may have reset the
				 * terminal while we were stopped. */
				if (c->raw)
					set_raw(c);
			} else {
				queue_signal(c, signo);
			}
		}
	}
	flush_some(c);
}

/* Write all of buf to fd 1 or 2, handling signals while blocked.
 * Returns 0 or -EPIPE. */
static int write_local(struct client *c, int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t w = write(fd, buf, len);
		if (w > 0) {
			buf += w;
			len -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EAGAIN) {
			struct pollfd p[2] = { { fd, POLLOUT, 0 }, { c->sigp[0], POLLIN, 0 } };
			poll(p, 2, -1);
		} else if (w < 0 && errno != EINTR) {
			return -EPIPE;
		}
		handle_signals(c);
	}
	return 0;
}

/* Show the guest's message without letting it drive the terminal: ASCII
 * controls and UTF-8-encoded C1 controls become '?'. */
static void print_error(struct client *c, const uint8_t *msg, uint32_t len)
{
	static const char prefix[] = "kbox: ";
	char text[600];
	size_t n = 0;
	memcpy(text, prefix, sizeof prefix - 1);
	n = sizeof prefix - 1;
	for (uint32_t i = 0; i < len && n < sizeof text - 3; i++) {
		uint8_t b = msg[i];
		if (b == 0xc2 && i + 1 < len && msg[i + 1] >= 0x80 && msg[i + 1] <= 0x9f) {
			text[n++] = '?';
			i++;
		} else {
			text[n++] = b < 0x20 || b == 0x7f ? '?' : (char)b;
		}
	}
	if (c->raw)
		text[n++] = '\r';
	text[n++] = '\n';
	write_local(c, 2, (const uint8_t *)text, n);
}

static int handle_frame(struct client *c, const struct exec_proto_frame *f)
{
	if (exec_proto_check(f->type, f->len) < 0)
		return -EPROTO;
	uint32_t v;
	switch (f->type) {
	case EXEC_PROTO_STARTED:
		return 0;
	case EXEC_PROTO_STDOUT:
		if (!c->stdout_broken && write_local(c, 1, f->payload, f->len) < 0) {
			c->stdout_broken = true;
			queue_signal(c, SIGPIPE);
			flush_some(c);
		}
		return 0;
	case EXEC_PROTO_STDERR:
		write_local(c, 2, f->payload, f->len);
		return 0;
	case EXEC_PROTO_CREDIT:
		exec_proto_get_u32(f, &v);
		/* The agent's buffer is EXEC_PROTO_STDIN_WINDOW; more credit than
		 * that is a lie, capped rather than trusted. */
		c->credit = v > EXEC_PROTO_STDIN_WINDOW - c->credit ? EXEC_PROTO_STDIN_WINDOW : c->credit + v;
		return 0;
	case EXEC_PROTO_EXIT:
		exec_proto_get_u32(f, &v);
		c->exited = true;
		c->status = v > 255 ? 255 : (int)v;
		return 0;
	case EXEC_PROTO_ERROR:
		print_error(c, f->payload, f->len);
		return 0;
	default:
		return -EPROTO; /* a host→guest type */
	}
}

static int read_sock(struct client *c)
{
	size_t room;
	uint8_t *p = exec_proto_rd_space(&c->rd, &room);
	ssize_t r = read(c->sock, p, room);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ECONNRESET;
	exec_proto_rd_commit(&c->rd, (size_t)r);
	struct exec_proto_frame f;
	int rc;
	while (!c->exited && (rc = exec_proto_rd_next(&c->rd, &f)) > 0) {
		rc = handle_frame(c, &f);
		if (rc < 0)
			return rc;
	}
	return c->exited ? 0 : rc;
}

/* Input typed before the terminal goes raw sits in the line discipline as
 * canonical lines, an end-of-file (^D) among them as a marker that raw
 * mode would hand out as a NUL byte: `script </dev/null` types one at
 * once.  Read those lines now, still canonical (poll says a whole line or
 * a marker is there, so read does not block), and stop at the first
 * end-of-file: what follows it is input for later, and raw mode keeps it
 * in order behind pre. */
static void take_typeahead(struct client *c)
{
	while (c->pre_len < sizeof c->pre) {
		struct pollfd p = { 0, POLLIN, 0 };
		if (poll(&p, 1, 0) != 1 || !(p.revents & POLLIN))
			return;
		ssize_t r = read(0, c->pre + c->pre_len, sizeof c->pre - c->pre_len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			c->pre_eof = r == 0;
			return;
		}
		c->pre_len += (size_t)r;
	}
}

static bool pre_pending(const struct client *c)
{
	return c->pre_off < c->pre_len || c->pre_eof;
}

static void read_stdin(struct client *c)
{
	uint8_t *p = out_room(c, EXEC_PROTO_MAX_FRAME);
	if (!p)
		return;
	size_t want = c->credit < EXEC_PROTO_MAX_PAYLOAD ? c->credit : EXEC_PROTO_MAX_PAYLOAD;
	ssize_t r;
	if (c->pre_off < c->pre_len) {
		r = (ssize_t)(c->pre_len - c->pre_off < want ? c->pre_len - c->pre_off : want);
		memcpy(p + EXEC_PROTO_HDR, c->pre + c->pre_off, (size_t)r);
		c->pre_off += (size_t)r;
	} else if (c->pre_eof) {
		c->pre_eof = false;
		r = 0;
	} else {
		r = read(0, p + EXEC_PROTO_HDR, want);
	}
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (r <= 0) { /* EOF, or an error that ends input the same way */
		c->stdin_open = false;
		exec_proto_put_hdr(p, EXEC_PROTO_STDIN_EOF, 0);
		c->out_len += EXEC_PROTO_HDR;
		return;
	}
	exec_proto_put_hdr(p, EXEC_PROTO_STDIN, (uint32_t)r);
	c->out_len += EXEC_PROTO_HDR + (size_t)r;
	c->credit -= (uint32_t)r;
}

static int loop(struct client *c)
{
	while (!c->exited) {
		bool sending = c->out_off < c->out_len;
		bool want_in = c->stdin_open && c->credit && !sending && !c->sock_broken;
		/* Typed-ahead input is ready without fd 0. */
		bool pre = want_in && pre_pending(c);
		struct pollfd p[3] = {
			{ c->sock, POLLIN | (sending ? POLLOUT : 0), 0 },
			{ want_in && !pre ? 0 : -1, POLLIN, 0 },
			{ c->sigp[0], POLLIN, 0 },
		};
		if (poll(p, 3, pre ? 0 : -1) < 0 && errno != EINTR)
			return -errno;
		if (p[2].revents & POLLIN)
			handle_signals(c);
		if (p[1].revents || pre)
			read_stdin(c);
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			int rc = read_sock(c);
			if (rc < 0)
				return rc;
		}
		flush_some(c);
	}
	return c->status;
}

int exec_client_run(int fd, const struct exec_proto_exec *req)
{
	struct client *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->sock = fd;
	c->stdin_open = true;
	c->tty = req->flags & EXEC_PROTO_FLAG_TTY;
	exec_proto_rd_init(&c->rd);
	struct exec_proto_exec r = *req;
	struct winsize ws;
	if (c->tty && !r.rows && !r.cols && ioctl(0, TIOCGWINSZ, &ws) == 0) {
		r.rows = ws.ws_row;
		r.cols = ws.ws_col;
	}
	int rc = exec_proto_encode_exec(&r, c->out, OUT_CAP, &c->out_len);
	if (rc < 0) {
		free(c);
		return rc;
	}
	if (pipe2(c->sigp, O_CLOEXEC | O_NONBLOCK) < 0) {
		rc = -errno;
		free(c);
		return rc;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	sig_wfd = c->sigp[1];
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < NCAUGHT; i++)
		sigaction(caught[i], &sa, &c->old[i]);
	struct sigaction ign = { .sa_handler = SIG_IGN };
	sigemptyset(&ign.sa_mask);
	sigaction(SIGPIPE, &ign, &c->old_pipe);
	if (c->tty && isatty(0) && tcgetattr(0, &c->saved) == 0) {
		if (c->saved.c_lflag & ICANON)
			take_typeahead(c);
		set_raw(c);
	}

	rc = loop(c);

	restore_term(c);
	sigaction(SIGPIPE, &c->old_pipe, NULL);
	for (size_t i = 0; i < NCAUGHT; i++)
		sigaction(caught[i], &c->old[i], NULL);
	sig_wfd = -1;
	close(c->sigp[0]);
	close(c->sigp[1]);
	free(c);
	return rc;
}

