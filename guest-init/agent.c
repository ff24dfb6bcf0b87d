/* Exec agent; see agent.h and docs/exec-protocol.md.
 *
 * One handler process per connection runs one command.  Its event loop
 * keeps every buffer bounded: output is read from the command only when
 * the previous frame has left for the socket, and stdin is bounded by the
 * credit the agent grants (EXEC_PROTO_CREDIT), so the socket is always read and a
 * SIGNAL is never stuck behind stdin the command does not consume. */
#include "guest-init/agent.h"
#include "guest-init/senv.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "proto/exec_proto.h"

#define DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
/* After the command exits, output that stays quiet this long is left to
 * whatever background process still holds the pipe or tty. */
#define QUIET_MS 100
/* Without pidfd_open, how often to look for the command's exit. */
#define REAP_MS 50
#define OUT_CAP (EXEC_PROTO_MAX_FRAME + 64)

/* agent_sync_on_exit: sync() before each EXIT, and the read-write disks'
 * journals emptied (guest-init mounted a disk). */
static int sync_on_exit;
static const char *const *sync_paths;
static unsigned n_sync_paths;

/* ioctl numbers spelled out (musl has no <linux/fs.h>): FIFREEZE, FITHAW. */
#define AGENT_FIFREEZE _IOWR('X', 119, int)
#define AGENT_FITHAW _IOWR('X', 120, int)

/* What a command wrote reaches the disks before its EXIT: kbox ends the VM
 * right after the main command's, without unmounting.  A freeze and thaw
 * of each read-write disk also checkpoints ext4's journal, so the volume
 * left behind needs no replay (the next mount, or a host tool, sees the
 * filesystem as it is). */
static void sync_disks(void)
{
	sync();
	for (unsigned i = 0; i < n_sync_paths; i++) {
		int fd = open(sync_paths[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			continue;
		int z = 0;
		if (ioctl(fd, AGENT_FIFREEZE, &z) == 0)
			ioctl(fd, AGENT_FITHAW, &z);
		close(fd);
	}
}

extern char **environ;

/* The vsock address, spelled out: musl ships no <linux/vm_sockets.h>. */
struct agent_sockaddr_vm {
	sa_family_t svm_family;
	unsigned short svm_reserved1;
	unsigned int svm_port;
	unsigned int svm_cid;
	unsigned char svm_zero[sizeof(struct sockaddr) - sizeof(sa_family_t) -
			       sizeof(unsigned short) - 2 * sizeof(unsigned int)];
};
#define AGENT_VMADDR_CID_ANY 0xffffffffu

/* How a command failed to start, sent back by the child over a
 * close-on-exec pipe. */
enum { STAGE_SETUP, STAGE_CHDIR, STAGE_EXEC };

struct sess {
	int sock;
	pid_t pid;
	int pidfd;        /* -1 if unavailable or the command was reaped */
	int master;       /* pty master in tty mode, else -1 */
	int in_fd;        /* command's stdin, -1 once closed or broken */
	int out_fd, err_fd; /* command's output, -1 at EOF */
	bool exited;
	int status;       /* exit code or 128 + signal */
	bool eof_pending; /* STDIN_EOF arrived; act on it once in[] drains */
	unsigned veof_left; /* tty: VEOF bytes still to write */
	uint8_t veof;
	uint8_t last_in;  /* last stdin byte received, for tty EOF */
	uint32_t window;  /* stdin bytes the host may still send */
	uint32_t owed;    /* stdin bytes consumed but not yet granted back */
	size_t in_off, in_len;
	size_t out_off, out_len;
	struct exec_proto_reader rd;
	uint8_t in[EXEC_PROTO_STDIN_WINDOW];
	uint8_t out[OUT_CAP];
};

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Pipes must not land on fds 0-2, or dup2 in the child would be a no-op
 * that keeps close-on-exec. */
static void ensure_stdio(void)
{
	for (;;) {
		int fd = open("/dev/null", O_RDWR);
		if (fd < 0)
			return;
		if (fd > 2) {
			close(fd);
			return;
		}
	}
}

static void close_fd(struct sess *s, int *fd)
{
	if (*fd >= 0 && *fd != s->master)
		close(*fd);
	*fd = -1;
}

/* Room for n more bytes at the end of out[], sliding unsent bytes down
 * when that makes room. */
static uint8_t *out_room(struct sess *s, size_t n)
{
	if (s->out_off == s->out_len)
		s->out_off = s->out_len = 0;
	if (OUT_CAP - s->out_len < n && s->out_off) {
		memmove(s->out, s->out + s->out_off, s->out_len - s->out_off);
		s->out_len -= s->out_off;
		s->out_off = 0;
	}
	return OUT_CAP - s->out_len >= n ? s->out + s->out_len : NULL;
}

static void queue_u32(struct sess *s, uint8_t type, uint32_t v)
{
	uint8_t *p = out_room(s, EXEC_PROTO_HDR + 4);
	if (p) /* callers check room first; control frames are tiny */
		s->out_len += exec_proto_put_u32(p, type, v);
}

static void queue_error(struct sess *s, const char *msg)
{
	size_t n = strlen(msg);
	if (n > 512)
		n = 512;
	uint8_t *p = out_room(s, EXEC_PROTO_HDR + n);
	if (!p)
		return;
	exec_proto_put_hdr(p, EXEC_PROTO_ERROR, (uint32_t)n);
	memcpy(p + EXEC_PROTO_HDR, msg, n);
	s->out_len += EXEC_PROTO_HDR + n;
}

/* Write what out[] holds without blocking.  Returns 0 or -ECONNRESET. */
static int flush_some(struct sess *s)
{
	while (s->out_off < s->out_len) {
		ssize_t w = write(s->sock, s->out + s->out_off, s->out_len - s->out_off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			return 0;
		if (w <= 0)
			return -ECONNRESET;
		s->out_off += (size_t)w;
	}
	return 0;
}

/* Send all of out[], discarding what the host still sends meanwhile (the
 * session is over).  Returns 0 or -ECONNRESET. */
static int flush_all(struct sess *s)
{
	uint8_t scratch[4096];
	while (s->out_off < s->out_len) {
		struct pollfd p = { s->sock, POLLIN | POLLOUT, 0 };
		if (poll(&p, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (p.revents & POLLIN) {
			ssize_t r = read(s->sock, scratch, sizeof scratch);
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
				return -ECONNRESET;
		}
		if (flush_some(s) < 0)
			return -ECONNRESET;
		if (p.revents & (POLLERR | POLLHUP) && !(p.revents & POLLOUT))
			return -ECONNRESET;
	}
	return 0;
}

static int status_code(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return 255;
}

static void try_reap(struct sess *s)
{
	int st;
	pid_t p = waitpid(s->pid, &st, WNOHANG);
	if (p != s->pid)
		return;
	s->exited = true;
	s->status = status_code(st);
	if (s->pidfd >= 0)
		close(s->pidfd);
	s->pidfd = -1;
}

/* The command's stdin is gone: what was buffered or arrives later is
 * dropped and granted back, so the host never stalls on it. */
static void drop_stdin(struct sess *s)
{
	s->owed += (uint32_t)(s->in_len - s->in_off);
	s->in_off = s->in_len = 0;
	s->veof_left = 0;
	s->eof_pending = false; /* or a tty master would poll writable forever */
	close_fd(s, &s->in_fd);
}

static void write_stdin(struct sess *s)
{
	while (s->in_fd >= 0 && s->in_off < s->in_len) {
		ssize_t w = write(s->in_fd, s->in + s->in_off, s->in_len - s->in_off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			return;
		if (w <= 0) {
			drop_stdin(s);
			return;
		}
		s->in_off += (size_t)w;
		s->owed += (uint32_t)w;
	}
	if (s->in_off == s->in_len)
		s->in_off = s->in_len = 0;
	if (!s->eof_pending || s->in_fd < 0)
		return;
	if (s->master < 0) {
		close_fd(s, &s->in_fd);
		s->eof_pending = false;
		return;
	}
	while (s->veof_left) {
		ssize_t w = write(s->master, &s->veof, 1);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			return;
		if (w <= 0) {
			drop_stdin(s);
			break;
		}
		s->veof_left--;
	}
	s->eof_pending = false;
}

static void deliver_signal(struct sess *s, int signo)
{
	if (s->exited)
		return;
	/* In tty mode the signal goes where the terminal would send it: the
	 * foreground job, which may be a pipeline a shell started. */
	pid_t pg = s->master >= 0 ? tcgetpgrp(s->master) : -1;
	if (pg <= 0 || kill(-pg, signo) < 0) {
		if (kill(-s->pid, signo) < 0)
			kill(s->pid, signo);
	}
}

static int handle_frame(struct sess *s, const struct exec_proto_frame *f)
{
	if (exec_proto_check(f->type, f->len) < 0)
		return -EPROTO;
	switch (f->type) {
	case EXEC_PROTO_STDIN:
		if (f->len > s->window)
			return -EPROTO;
		s->window -= f->len;
		if (s->in_fd < 0 || s->eof_pending) {
			s->owed += f->len;
			return 0;
		}
		/* Credit keeps buffered + window + owed == EXEC_PROTO_STDIN_WINDOW,
		 * so after sliding down the frame always fits. */
		if (s->in_len + f->len > sizeof s->in) {
			memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
			s->in_len -= s->in_off;
			s->in_off = 0;
		}
		memcpy(s->in + s->in_len, f->payload, f->len);
		s->in_len += f->len;
		if (f->len)
			s->last_in = f->payload[f->len - 1];
		return 0;
	case EXEC_PROTO_STDIN_EOF:
		if (s->in_fd >= 0 && !s->eof_pending) {
			s->eof_pending = true;
			/* VEOF ends input only at the start of a line; a
			 * first one flushes a partial line. */
			s->veof_left = s->last_in && s->last_in != '\n' ? 2 : 1;
		}
		return 0;
	case EXEC_PROTO_SIGNAL: {
		int signo;
		if (exec_proto_get_signal(f, &signo) < 0)
			return -EPROTO;
		deliver_signal(s, signo);
		return 0;
	}
	case EXEC_PROTO_RESIZE: {
		uint16_t rows, cols;
		if (exec_proto_get_resize(f, &rows, &cols) < 0)
			return -EPROTO;
		if (s->master >= 0) {
			struct winsize ws = { .ws_row = rows, .ws_col = cols };
			ioctl(s->master, TIOCSWINSZ, &ws);
		}
		return 0;
	}
	default:
		return -EPROTO; /* a second EXEC, or a guest→host type */
	}
}

/* Read from the host and act on every complete frame.  Returns 0,
 * -EPROTO or -ECONNRESET. */
static int read_sock(struct sess *s)
{
	size_t room;
	uint8_t *p = exec_proto_rd_space(&s->rd, &room);
	ssize_t r = read(s->sock, p, room);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (r <= 0)
		return -ECONNRESET;
	exec_proto_rd_commit(&s->rd, (size_t)r);
	struct exec_proto_frame f;
	int rc;
	while ((rc = exec_proto_rd_next(&s->rd, &f)) > 0) {
		rc = handle_frame(s, &f);
		if (rc < 0)
			return rc;
	}
	return rc;
}

/* Read one chunk of the command's output into a frame. */
static void read_output(struct sess *s, int *fd, uint8_t type)
{
	uint8_t *p = out_room(s, EXEC_PROTO_MAX_FRAME);
	if (!p)
		return;
	ssize_t r = read(*fd, p + EXEC_PROTO_HDR, EXEC_PROTO_MAX_PAYLOAD);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r <= 0) { /* EOF, or EIO from a pty whose slave side closed */
		if (*fd == s->master)
			drop_stdin(s);
		close_fd(s, fd);
		return;
	}
	exec_proto_put_hdr(p, type, (uint32_t)r);
	s->out_len += EXEC_PROTO_HDR + (size_t)r;
}

static void grant_credit(struct sess *s)
{
	if (!s->owed)
		return;
	bool idle = s->in_off == s->in_len;
	if ((s->owed >= EXEC_PROTO_STDIN_WINDOW / 4 || idle) && out_room(s, EXEC_PROTO_HDR + 4)) {
		s->window += s->owed;
		queue_u32(s, EXEC_PROTO_CREDIT, s->owed);
		s->owed = 0;
	}
}

enum { SLOT_SOCK, SLOT_IN, SLOT_OUT, SLOT_ERR, SLOT_PID, SLOT_N };

static int pump(struct sess *s)
{
	for (;;) {
		grant_credit(s);
		if (s->exited && s->out_fd < 0 && s->err_fd < 0)
			return 0;
		bool sending = s->out_off < s->out_len;
		bool writing = s->in_off < s->in_len || s->eof_pending;
		struct pollfd p[SLOT_N];
		short ev[SLOT_N] = {
			[SLOT_SOCK] = POLLIN | (sending ? POLLOUT : 0),
			[SLOT_IN] = writing ? POLLOUT : 0,
			[SLOT_OUT] = sending ? 0 : POLLIN,
			[SLOT_ERR] = sending ? 0 : POLLIN,
			[SLOT_PID] = POLLIN,
		};
		int fds[SLOT_N] = { s->sock, s->in_fd, s->out_fd, s->err_fd, s->pidfd };
		if (s->master >= 0) { /* one fd both ways: one entry */
			ev[SLOT_OUT] |= ev[SLOT_IN];
			fds[SLOT_IN] = -1;
		}
		/* An fd with nothing wanted stays out, or its POLLHUP would
		 * wake us in a loop. */
		for (int i = 0; i < SLOT_N; i++) {
			p[i].fd = ev[i] && fds[i] >= 0 ? fds[i] : -1;
			p[i].events = ev[i];
			p[i].revents = 0;
		}
		int timeout = -1;
		if (!s->exited && s->pidfd < 0)
			timeout = REAP_MS;
		bool was_exited = s->exited;
		if (was_exited && !sending)
			timeout = QUIET_MS;
		int n = poll(p, SLOT_N, timeout);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0 && was_exited)
			return 0; /* output went quiet after the exit */
		if (!s->exited && (s->pidfd < 0 || p[SLOT_PID].revents))
			try_reap(s);
		const short any = POLLIN | POLLOUT | POLLHUP | POLLERR;
		if (p[SLOT_SOCK].revents & (POLLIN | POLLHUP | POLLERR)) {
			int rc = read_sock(s);
			if (rc < 0)
				return rc;
		}
		if (flush_some(s) < 0)
			return -ECONNRESET;
		if (p[SLOT_IN].revents & any || (s->master >= 0 && p[SLOT_OUT].revents & any))
			write_stdin(s);
		if (p[SLOT_OUT].revents & (POLLIN | POLLHUP | POLLERR) && ev[SLOT_OUT] & POLLIN &&
		    s->out_fd >= 0)
			read_output(s, &s->out_fd, EXEC_PROTO_STDOUT);
		if (p[SLOT_ERR].revents & any && s->err_fd >= 0 && s->out_off == s->out_len)
			read_output(s, &s->err_fd, EXEC_PROTO_STDERR);
		if (flush_some(s) < 0)
			return -ECONNRESET;
	}
}

static void reset_signals(void)
{
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	/* exec keeps ignored signals ignored; the command starts clean. */
	for (int i = 1; i < 32; i++)
		if (i != SIGKILL && i != SIGSTOP)
			signal(i, SIG_DFL);
}

__attribute__((noreturn))
static void child_fail(int errfd, int stage, int err)
{
	int msg[2] = { stage, err };
	ssize_t w = write(errfd, msg, sizeof msg);
	(void)w;
	_exit(stage == STAGE_EXEC && err == ENOENT ? 127 : 126);
}

/* In the forked child: become the command. */
__attribute__((noreturn))
static void child_exec(const struct exec_proto_exec *req, char **envp, const char *slave, int fin,
		       int fout, int ferr, int errfd)
{
	reset_signals();
	setsid();
	if (slave) {
		int t = open(slave, O_RDWR);
		if (t < 0 || ioctl(t, TIOCSCTTY, 0) < 0)
			child_fail(errfd, STAGE_SETUP, errno);
		fin = fout = ferr = t;
	}
	if (dup2(fin, 0) < 0 || dup2(fout, 1) < 0 || dup2(ferr, 2) < 0)
		child_fail(errfd, STAGE_SETUP, errno);
	if (fin > 2)
		close(fin);
	const char *dir = req->cwd[0] ? req->cwd : "/";
	if (chdir(dir) < 0)
		child_fail(errfd, STAGE_CHDIR, errno);
	/* execvp searches the PATH of environ, so the request's PATH must be
	 * in force before the search. */
	environ = envp;
	execvp(req->argv[0], req->argv);
	child_fail(errfd, STAGE_EXEC, errno);
}

/* The sandbox-wide environment overridden by the request's, with a
 * default PATH if neither has one. */
static char **make_env(const struct exec_proto_exec *req)
{
	char **e = senv_merge(req->envp, req->envc, 1);
	if (!e)
		return NULL;
	size_t n = 0;
	bool has_path = false;
	for (; e[n]; n++)
		has_path |= strncmp(e[n], "PATH=", 5) == 0;
	if (!has_path)
		e[n] = (char *)DEFAULT_PATH; /* execve does not write it */
	return e;
}

static int open_pty(struct sess *s, const struct exec_proto_exec *req, char *slave, size_t len)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return -errno;
	unsigned n;
	if (grantpt(m) < 0 || unlockpt(m) < 0 || ioctl(m, TIOCGPTN, &n) < 0) {
		int e = errno;
		close(m);
		return -e;
	}
	snprintf(slave, len, "/dev/pts/%u", n);
	struct winsize ws = { .ws_row = req->rows, .ws_col = req->cols };
	ioctl(m, TIOCSWINSZ, &ws);
	struct termios t;
	s->veof = tcgetattr(m, &t) == 0 && t.c_cc[VEOF] ? t.c_cc[VEOF] : 4;
	s->master = s->in_fd = s->out_fd = m;
	return 0;
}

/* Start the command.  Returns 0 (started, or failed with ERROR and EXIT
 * queued and s->exited set) or a negative errno. */
static int start(struct sess *s, const struct exec_proto_exec *req)
{
	char **envp = make_env(req);
	if (!envp)
		return -ENOMEM;
	char slave[32];
	int pin[2] = { -1, -1 }, pout[2] = { -1, -1 }, perr[2] = { -1, -1 }, pst[2];
	int rc = 0;
	if (req->flags & EXEC_PROTO_FLAG_TTY)
		rc = open_pty(s, req, slave, sizeof slave);
	else if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 ||
		 pipe2(perr, O_CLOEXEC) < 0)
		rc = -errno;
	if (!rc && pipe2(pst, O_CLOEXEC) < 0)
		rc = -errno;
	if (rc) {
		free(envp);
		for (int i = 0; i < 2; i++) {
			if (pin[i] >= 0)
				close(pin[i]);
			if (pout[i] >= 0)
				close(pout[i]);
			if (perr[i] >= 0)
				close(perr[i]);
		}
		return rc;
	}
	pid_t pid = fork();
	if (pid == 0) {
		bool tty = s->master >= 0;
		child_exec(req, envp, tty ? slave : NULL, pin[0], pout[1], perr[1], pst[1]);
	}
	int fork_err = errno;
	free(envp);
	close(pst[1]);
	if (s->master < 0) {
		close(pin[0]);
		close(pout[1]);
		close(perr[1]);
		s->in_fd = pin[1];
		s->out_fd = pout[0];
		s->err_fd = perr[0];
	}
	if (pid < 0) {
		close(pst[0]);
		return -fork_err;
	}
	s->pid = pid;
	int msg[2];
	ssize_t r;
	do
		r = read(pst[0], msg, sizeof msg);
	while (r < 0 && errno == EINTR);
	close(pst[0]);
	if (r != (ssize_t)sizeof msg) {
		s->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		queue_u32(s, EXEC_PROTO_STARTED, (uint32_t)pid);
		s->window = EXEC_PROTO_STDIN_WINDOW;
		queue_u32(s, EXEC_PROTO_CREDIT, EXEC_PROTO_STDIN_WINDOW);
		return 0;
	}
	char text[512];
	if (msg[0] == STAGE_CHDIR)
		snprintf(text, sizeof text, "cannot enter %s: %s", req->cwd, strerror(msg[1]));
	else if (msg[0] == STAGE_EXEC)
		snprintf(text, sizeof text, "%s: %s", req->argv[0], strerror(msg[1]));
	else
		snprintf(text, sizeof text, "cannot set up the terminal: %s", strerror(msg[1]));
	queue_error(s, text);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	s->exited = true;
	s->status = status_code(st);
	close_fd(s, &s->in_fd);
	close_fd(s, &s->out_fd);
	close_fd(s, &s->err_fd);
	return 0;
}

/* Read frames until the first one is complete; it must be EXEC.  Returns
 * a malloc'd copy of its payload (so that later reads cannot overwrite
 * the strings) or NULL with *err set. */
static uint8_t *read_exec(struct sess *s, uint32_t *len, int *err)
{
	struct exec_proto_frame f;
	int rc;
	while ((rc = exec_proto_rd_next(&s->rd, &f)) == 0) {
		size_t room;
		uint8_t *p = exec_proto_rd_space(&s->rd, &room);
		ssize_t r = read(s->sock, p, room);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			*err = -ECONNRESET;
			return NULL;
		}
		exec_proto_rd_commit(&s->rd, (size_t)r);
	}
	if (rc < 0 || f.type != EXEC_PROTO_EXEC) {
		*err = -EPROTO;
		return NULL;
	}
	uint8_t *copy = malloc(f.len ? f.len : 1);
	if (!copy) {
		*err = -ENOMEM;
		return NULL;
	}
	memcpy(copy, f.payload, f.len);
	*len = f.len;
	return copy;
}

int agent_serve_fd(int fd)
{
	signal(SIGPIPE, SIG_IGN);
	signal(SIGCHLD, SIG_DFL);
	ensure_stdio();
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	struct sess *s = calloc(1, sizeof *s);
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	s->sock = fd;
	s->pidfd = s->master = s->in_fd = s->out_fd = s->err_fd = -1;
	exec_proto_rd_init(&s->rd);
	int rc = 0;
	uint32_t len = 0;
	uint8_t *payload = read_exec(s, &len, &rc);
	struct exec_proto_exec req = { 0 };
	if (payload) {
		rc = exec_proto_decode_exec(payload, len, &req);
		if (rc == -EPROTO)
			queue_error(s, "malformed EXEC request");
	}
	if (!rc)
		rc = start(s, &req);
	if (payload && rc && rc != -EPROTO) {
		char text[128];
		snprintf(text, sizeof text, "cannot start the command: %s", strerror(-rc));
		queue_error(s, text);
	}
	exec_proto_exec_free(&req);
	free(payload);
	set_nonblock(fd);
	if (!rc && !s->exited) {
		if (s->in_fd >= 0)
			set_nonblock(s->in_fd);
		if (s->out_fd >= 0)
			set_nonblock(s->out_fd);
		if (s->err_fd >= 0)
			set_nonblock(s->err_fd);
		rc = pump(s);
	}
	if (!rc) {
		if (sync_on_exit)
			sync_disks();
		queue_u32(s, EXEC_PROTO_EXIT, (uint32_t)s->status);
		rc = flush_all(s);
	} else {
		if (s->pid > 0 && !s->exited)
			kill(-s->pid, SIGHUP);
		flush_all(s); /* best effort: the ERROR, if the host listens */
	}
	close_fd(s, &s->in_fd);
	close_fd(s, &s->out_fd);
	close_fd(s, &s->err_fd);
	if (s->master >= 0)
		close(s->master);
	if (s->pidfd >= 0)
		close(s->pidfd);
	close(fd);
	free(s);
	return rc;
}

void agent_sync_on_exit(const char *const *rw_paths, unsigned n)
{
	sync_on_exit = 1;
	sync_paths = rw_paths;
	n_sync_paths = n;
}

int agent_serve_listener(int lfd)
{
	ensure_stdio();
	/* Handlers are reaped by the kernel; each resets SIGCHLD for the
	 * command it waits for. */
	signal(SIGCHLD, SIG_IGN);
	fcntl(lfd, F_SETFD, FD_CLOEXEC);
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOMEM ||
			    errno == ENOBUFS) {
				poll(NULL, 0, 100); /* let handlers finish */
				continue;
			}
			return -errno;
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(lfd);
			_exit(agent_serve_fd(fd) < 0 ? 1 : 0);
		}
		close(fd); /* on fork failure the host sees the connection drop */
	}
}

int agent_vsock_listen(unsigned port, int backlog)
{
	int lfd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -errno;
	struct agent_sockaddr_vm a = {
		.svm_family = AF_VSOCK,
		.svm_port = port,
		.svm_cid = AGENT_VMADDR_CID_ANY,
	};
	if (bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, backlog) < 0) {
		int e = errno;
		close(lfd);
		return -e;
	}
	return lfd;
}

int agent_vsock_accept_host(int lfd)
{
	for (;;) {
		struct agent_sockaddr_vm a;
		socklen_t al = sizeof a;
		int fd = accept4(lfd, (struct sockaddr *)&a, &al, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return -errno;
		}
		if (al >= sizeof a && a.svm_cid == 2)
			return fd;
		close(fd); /* a guest process, not kbox */
	}
}

void agent_vsock_knock(unsigned cid, unsigned port)
{
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	struct agent_sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_port = port, .svm_cid = cid };
	if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
		/* accepted after all: nothing is said either way */
	}
	close(fd);
}

int agent_serve(unsigned port)
{
	int lfd = agent_vsock_listen(port, 64);
	if (lfd < 0)
		return lfd;
	int rc = agent_serve_listener(lfd);
	close(lfd);
	return rc;
}
