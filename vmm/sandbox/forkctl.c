#include "vmm/sandbox/forkctl.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/errbuf.h"
#include "lib/statebuf.h"

#define REQ_MAGIC "KBOXFRK1"
#define REQ_LEN (8 + FORKCTL_KEY_LEN)
#define ANS_MAGIC "KBOXFRA1"
/* magic, status, pause and state in microseconds, file bytes, message length, message */
#define ANS_HDR (8 + 4 + 8 + 8 + 8 + 4)
#define ANS_MAX (ANS_HDR + FORKCTL_MSG_MAX)

static int sock_path(const char *dir, struct sockaddr_un *a)
{
	memset(a, 0, sizeof *a);
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path, sizeof a->sun_path, "%s/fork.sock", dir);
	return n < 0 || (size_t)n >= sizeof a->sun_path ? -ENAMETOOLONG : 0;
}

int forkctl_listen(const char *dir, char *err, size_t errlen)
{
	struct sockaddr_un a;
	if (sock_path(dir, &a) < 0)
		return errbuf_fail(err, errlen, -ENAMETOOLONG, "%s/fork.sock: path too long", dir);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errbuf_fail(err, errlen, -errno, "fork socket: %s", strerror(errno));
	unlink(a.sun_path); /* left by a kbox that died under this claim's name */
	if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4) < 0) {
		int e = errno;
		close(fd);
		return errbuf_fail(err, errlen, -e, "fork socket %s: %s", a.sun_path, strerror(e));
	}
	return fd;
}

/* Close every descriptor a control message brought. */
static void close_passed(struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof fd, sizeof fd);
			close(fd);
		}
	}
}

int forkctl_accept(int lfd, uint8_t key[FORKCTL_KEY_LEN], int *file_fd)
{
	for (;;) {
		int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return -errno;
		}
		uint8_t buf[REQ_LEN + 1];
		union {
			char b[CMSG_SPACE(sizeof(int) * 4)];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = { buf, sizeof buf };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
				    .msg_controllen = sizeof ctl.b };
		ssize_t n;
		struct pollfd p = { .fd = cfd, .events = POLLIN };
		/* A client that connects and says nothing is not waited for long. */
		if (poll(&p, 1, 5000) <= 0) {
			close(cfd);
			continue;
		}
		do
			n = recvmsg(cfd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
		int got = -1, count = 0;
		for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				count += (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
				if (count == 1)
					memcpy(&got, CMSG_DATA(c), sizeof got);
			}
		if (n == REQ_LEN && !(m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && count == 1 &&
		    memcmp(buf, REQ_MAGIC, 8) == 0) {
			memcpy(key, buf + 8, FORKCTL_KEY_LEN);
			*file_fd = got;
			return cfd;
		}
		if (n >= 0)
			close_passed(&m);
		struct forkctl_answer a = { .status = -EPROTO };
		snprintf(a.msg, sizeof a.msg, "malformed fork request");
		forkctl_reply(cfd, &a);
	}
}

/* A duration in ms as whole microseconds; a negative, NaN or huge one
 * as 0 (a conversion out of range would be undefined). */
static uint64_t us_of(double ms)
{
	return ms >= 0 && ms < 1e15 ? (uint64_t)(ms * 1000.0) : 0;
}

void forkctl_reply(int cfd, const struct forkctl_answer *a)
{
	struct statebuf_writer w;
	statebuf_init(&w);
	size_t ml = strnlen(a->msg, FORKCTL_MSG_MAX);
	statebuf_put(&w, ANS_MAGIC, 8);
	statebuf_u32(&w, (uint32_t)a->status);
	statebuf_u64(&w, us_of(a->pause_ms));
	statebuf_u64(&w, us_of(a->state_ms));
	statebuf_u64(&w, a->file_bytes);
	statebuf_u32(&w, (uint32_t)ml);
	statebuf_put(&w, a->msg, ml);
	if (!w.err) {
		ssize_t n = send(cfd, w.buf, w.len, MSG_NOSIGNAL);
		(void)n; /* kbox fork gone: nothing to tell */
	}
	statebuf_free(&w);
	close(cfd);
}

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)(t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* The answer's bytes, checked: the magic, a status that is 0 or an
 * errno, a message of its stated length, printable. */
static int parse_answer(const uint8_t *b, size_t n, struct forkctl_answer *a)
{
	struct statebuf_reader r;
	statebuf_reader_init(&r, b, n);
	char magic[8];
	statebuf_get(&r, magic, 8);
	int32_t status = (int32_t)statebuf_get_u32(&r);
	uint64_t pause_us = statebuf_get_u64(&r), state_us = statebuf_get_u64(&r);
	uint64_t bytes = statebuf_get_u64(&r);
	uint32_t ml = statebuf_get_u32(&r);
	if (r.err || memcmp(magic, ANS_MAGIC, 8) != 0 || status > 0 || status < -4095 ||
	    ml > FORKCTL_MSG_MAX || statebuf_left(&r) != ml)
		return -EPROTO;
	memset(a, 0, sizeof *a);
	a->status = status;
	a->pause_ms = (double)pause_us / 1000.0;
	a->state_ms = (double)state_us / 1000.0;
	a->file_bytes = bytes;
	statebuf_get(&r, a->msg, ml);
	for (uint32_t i = 0; i < ml; i++)
		if ((unsigned char)a->msg[i] < 0x20 || (unsigned char)a->msg[i] > 0x7e)
			a->msg[i] = '?';
	a->msg[ml] = '\0';
	return 0;
}

int forkctl_request(const char *dir, const uint8_t key[FORKCTL_KEY_LEN], int file_fd, int timeout_ms,
		    struct forkctl_answer *a, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	if (sock_path(dir, &sa) < 0)
		return errbuf_fail(err, errlen, -ENAMETOOLONG, "%s/fork.sock: path too long", dir);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errbuf_fail(err, errlen, -errno, "socket: %s", strerror(errno));
	int rc = 0;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		rc = errbuf_fail(err, errlen, -errno, "%s: %s", sa.sun_path, strerror(errno));
		goto out;
	}
	uint8_t req[REQ_LEN];
	memcpy(req, REQ_MAGIC, 8);
	memcpy(req + 8, key, FORKCTL_KEY_LEN);
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	memset(&ctl, 0, sizeof ctl);
	struct iovec iov = { req, sizeof req };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			    .msg_controllen = sizeof ctl.b };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &file_fd, sizeof file_fd);
	ssize_t n;
	do
		n = sendmsg(fd, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof req) {
		rc = errbuf_fail(err, errlen, n < 0 ? -errno : -EIO, "cannot send the fork request: %s",
				 n < 0 ? strerror(errno) : "short");
		goto out;
	}
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	uint8_t ans[ANS_MAX + 1];
	for (;;) {
		long left = timeout_ms - elapsed_ms(&t0);
		if (left <= 0) {
			rc = errbuf_fail(err, errlen, -ETIMEDOUT, "no answer in %.1f s",
					 timeout_ms / 1000.0);
			goto out;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int pr = poll(&p, 1, (int)(left < 1000 ? left : 1000));
		if (pr < 0 && errno != EINTR) {
			rc = errbuf_fail(err, errlen, -errno, "poll: %s", strerror(errno));
			goto out;
		}
		if (pr > 0)
			break;
	}
	do
		n = recv(fd, ans, sizeof ans, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		rc = errbuf_fail(err, errlen, -ECONNRESET,
				 "the sandbox closed the connection without an answer");
		goto out;
	}
	if (parse_answer(ans, (size_t)n, a) < 0)
		rc = errbuf_fail(err, errlen, -EPROTO, "the sandbox's answer is malformed");
out:
	close(fd);
	return rc;
}
