/* kbox fork's socket (vmm/sandbox/forkctl.c) over a real SOCK_SEQPACKET
 * socket in a temporary folder: a server thread accepts and answers as
 * the sandbox's kbox does; the client side is forkctl_request or raw
 * messages a hostile client (or server) would send. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/statebuf.h"
#include "vmm/sandbox/forkctl.h"
#include "tests/lib/unit_suite.h"

#define REQ_LEN (8 + FORKCTL_KEY_LEN)
/* The answer's fixed part: magic, status, pause, state, file bytes, length. */
#define ANS_HDR (8 + 4 + 8 + 8 + 8 + 4)

static char dir[64];
static char err[512];
static uint8_t key[FORKCTL_KEY_LEN];

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/kbox-forkctl-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	for (unsigned i = 0; i < FORKCTL_KEY_LEN; i++)
		key[i] = (uint8_t)(0xa0 + i);
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1000.0 + (double)t.tv_nsec / 1e6;
}

/* An unnamed private file for the fork, as kbox fork makes it. */
static int fork_file(void)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	return fd;
}

/* ---- the sandbox's side: forkctl_accept and forkctl_reply ---- */

struct server {
	int lfd;
	int rc;                      /* forkctl_accept's */
	uint8_t key[FORKCTL_KEY_LEN];
	struct forkctl_answer answer; /* what it replies */
	const char *write;           /* written into the file it gets */
	pthread_t thread;
};

static void *serve_one(void *p)
{
	struct server *s = p;
	int fd = -1;
	s->rc = forkctl_accept(s->lfd, s->key, &fd);
	if (s->rc < 0)
		return NULL;
	if (s->write && pwrite(fd, s->write, strlen(s->write), 0) != (ssize_t)strlen(s->write))
		s->answer.status = -EIO;
	close(fd);
	forkctl_reply(s->rc, &s->answer);
	return NULL;
}

static void server_start(struct server *s)
{
	s->lfd = forkctl_listen(dir, err, sizeof err);
	ck_assert_int_ge(s->lfd, 0);
	ck_assert_int_eq(pthread_create(&s->thread, NULL, serve_one, s), 0);
}

static void server_join(struct server *s)
{
	ck_assert_int_eq(pthread_join(s->thread, NULL), 0);
	close(s->lfd);
}

START_TEST(request_answered)
{
	struct server s = { .write = "the sandbox saved itself here",
			    .answer = { .status = 0, .pause_ms = 12.5, .state_ms = 3.25,
					.file_bytes = 1ull << 33 } };
	snprintf(s.answer.msg, sizeof s.answer.msg, "saved");
	server_start(&s);
	struct stat st;
	char path[128];
	snprintf(path, sizeof path, "%s/fork.sock", dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));

	int ffd = fork_file();
	struct forkctl_answer a;
	memset(&a, 0x55, sizeof a);
	ck_assert_int_eq(forkctl_request(dir, key, ffd, 10000, &a, err, sizeof err), 0);
	server_join(&s);
	ck_assert_int_ge(s.rc, 0);
	ck_assert_mem_eq(s.key, key, FORKCTL_KEY_LEN);
	ck_assert_int_eq(a.status, 0);
	ck_assert(a.pause_ms == 12.5 && a.state_ms == 3.25);
	ck_assert(a.file_bytes == 1ull << 33);
	ck_assert_str_eq(a.msg, "saved");
	/* the server wrote through the descriptor it was sent */
	char buf[64] = "";
	ck_assert_int_eq(pread(ffd, buf, sizeof buf - 1, 0), (ssize_t)strlen(s.write));
	ck_assert_str_eq(buf, s.write);
	close(ffd);
}
END_TEST

/* A refusal comes back with its errno and line; the longest line whole,
 * a longer one cut to it. */
START_TEST(refusal_answered)
{
	struct server s = { .answer = { .status = -EBUSY } };
	snprintf(s.answer.msg, sizeof s.answer.msg, "vsock: 1 connection(s) open");
	server_start(&s);
	int ffd = fork_file();
	struct forkctl_answer a;
	ck_assert_int_eq(forkctl_request(dir, key, ffd, 10000, &a, err, sizeof err), 0);
	server_join(&s);
	ck_assert_int_eq(a.status, -EBUSY);
	ck_assert_str_eq(a.msg, "vsock: 1 connection(s) open");

	memset(&s, 0, sizeof s);
	s.answer.status = -ENOSPC;
	memset(s.answer.msg, 'm', FORKCTL_MSG_MAX);
	s.answer.msg[FORKCTL_MSG_MAX] = '\0';
	server_start(&s);
	ck_assert_int_eq(forkctl_request(dir, key, ffd, 10000, &a, err, sizeof err), 0);
	server_join(&s);
	ck_assert_int_eq(a.status, -ENOSPC);
	ck_assert_uint_eq(strlen(a.msg), FORKCTL_MSG_MAX);
	close(ffd);
}
END_TEST

/* ---- hostile clients ---- */

/* Send len bytes of buf with the n descriptors fds (none when n is 0)
 * on a new connection; return the connection. */
static int raw_send(const void *buf, size_t len, const int *fds, unsigned n)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/fork.sock", dir);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	union {
		char b[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} ctl;
	memset(&ctl, 0, sizeof ctl);
	struct iovec iov = { (void *)buf, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n) {
		ck_assert_uint_le(n, 8);
		m.msg_control = ctl.b;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	}
	ck_assert_int_eq(sendmsg(fd, &m, MSG_NOSIGNAL), (ssize_t)len);
	return fd;
}

/* The answer on fd is -EPROTO, well formed. */
static void expect_eproto(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 10000), 1);
	uint8_t b[ANS_HDR + FORKCTL_MSG_MAX + 1];
	ssize_t n = recv(fd, b, sizeof b, 0);
	ck_assert_int_ge(n, ANS_HDR);
	ck_assert_mem_eq(b, "KBOXFRA1", 8);
	ck_assert_int_eq((int32_t)statebuf_le32(b + 8), -EPROTO);
	uint32_t ml = statebuf_le32(b + ANS_HDR - 4);
	ck_assert_uint_eq((size_t)n, ANS_HDR + ml);
	ck_assert_int_eq(strncmp((char *)b + ANS_HDR, "malformed fork request", ml), 0);
	/* one request per connection: closed after the answer */
	ck_assert_int_eq(recv(fd, b, sizeof b, 0), 0);
	close(fd);
}

/* The server closed the write end it was given: the read end sees EOF
 * (the client's own copy is closed already). */
static void expect_closed(int rfd)
{
	char c;
	ck_assert_int_eq(read(rfd, &c, 1), 0);
	close(rfd);
}

START_TEST(malformed_requests_skipped)
{
	struct server s = { .write = "ok" };
	server_start(&s);
	uint8_t req[REQ_LEN + 8];
	memcpy(req, "KBOXFRK1", 8);
	memcpy(req + 8, key, FORKCTL_KEY_LEN);
	memset(req + REQ_LEN, 0, 8);
	int p[2], q[2];

	/* one byte short, one byte more, a whole request and more */
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	int c = raw_send(req, REQ_LEN - 1, &p[1], 1);
	close(p[1]);
	expect_eproto(c);
	expect_closed(p[0]);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	c = raw_send(req, REQ_LEN + 1, &p[1], 1);
	close(p[1]);
	expect_eproto(c);
	expect_closed(p[0]);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	c = raw_send(req, sizeof req, &p[1], 1);
	close(p[1]);
	expect_eproto(c);
	expect_closed(p[0]);
	/* another magic */
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	req[7] = '2';
	c = raw_send(req, REQ_LEN, &p[1], 1);
	req[7] = '1';
	close(p[1]);
	expect_eproto(c);
	expect_closed(p[0]);
	/* no descriptor */
	expect_eproto(raw_send(req, REQ_LEN, NULL, 0));
	/* two descriptors: both closed */
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(q, O_CLOEXEC), 0);
	int two[2] = { p[1], q[1] };
	c = raw_send(req, REQ_LEN, two, 2);
	close(p[1]);
	close(q[1]);
	expect_eproto(c);
	expect_closed(p[0]);
	expect_closed(q[0]);
	/* more than the server makes room for: all closed */
	int many[6], rd[6];
	for (unsigned i = 0; i < 6; i++) {
		ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
		rd[i] = p[0];
		many[i] = p[1];
	}
	c = raw_send(req, REQ_LEN, many, 6);
	for (unsigned i = 0; i < 6; i++)
		close(many[i]);
	expect_eproto(c);
	for (unsigned i = 0; i < 6; i++)
		expect_closed(rd[i]);
	/* a connection that says nothing and goes */
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/fork.sock", dir);
	c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(connect(c, (struct sockaddr *)&sa, sizeof sa), 0);
	close(c);

	/* the server is still there for the next, well-formed one */
	int ffd = fork_file();
	struct forkctl_answer a;
	ck_assert_int_eq(forkctl_request(dir, key, ffd, 10000, &a, err, sizeof err), 0);
	server_join(&s);
	ck_assert_int_eq(a.status, 0);
	ck_assert_mem_eq(s.key, key, FORKCTL_KEY_LEN);
	char buf[8] = "";
	ck_assert_int_eq(pread(ffd, buf, sizeof buf - 1, 0), 2);
	ck_assert_str_eq(buf, "ok");
	close(ffd);
}
END_TEST

/* ---- hostile or silent servers ---- */

struct fake {
	int lfd;
	const uint8_t *answer; /* NULL: close without one */
	size_t len;
	bool silent;           /* take the request, never answer */
	int quit;              /* eventfd-like: a pipe's read end to wait on */
	pthread_t thread;
};

static void *fake_serve(void *p)
{
	struct fake *f = p;
	int cfd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (cfd < 0)
		return NULL;
	uint8_t buf[REQ_LEN];
	union {
		char b[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { buf, sizeof buf };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			    .msg_controllen = sizeof ctl.b };
	if (recvmsg(cfd, &m, MSG_CMSG_CLOEXEC) > 0)
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof fd, sizeof fd);
				close(fd);
			}
	if (f->silent) {
		char x;
		ssize_t n = read(f->quit, &x, 1); /* until the test is done */
		(void)n;
	} else if (f->answer) {
		ssize_t n = send(cfd, f->answer, f->len, MSG_NOSIGNAL);
		(void)n;
	}
	close(cfd);
	return NULL;
}

/* Run forkctl_request against a fake server answering len bytes of b. */
static int ask_fake(const uint8_t *b, size_t len, struct forkctl_answer *a)
{
	struct fake f = { .answer = b, .len = len, .quit = -1 };
	f.lfd = forkctl_listen(dir, err, sizeof err);
	ck_assert_int_ge(f.lfd, 0);
	ck_assert_int_eq(pthread_create(&f.thread, NULL, fake_serve, &f), 0);
	int ffd = fork_file();
	int rc = forkctl_request(dir, key, ffd, 10000, a, err, sizeof err);
	ck_assert_int_eq(pthread_join(f.thread, NULL), 0);
	close(f.lfd);
	close(ffd);
	return rc;
}

/* An answer as forkctl_reply lays it out, with the fields given. */
static size_t answer_bytes(uint8_t *b, const char *magic, uint32_t status, uint32_t ml,
			   const char *msg, size_t msg_len)
{
	struct statebuf_writer w;
	statebuf_init(&w);
	statebuf_put(&w, magic, 8);
	statebuf_u32(&w, status);
	statebuf_u64(&w, 1500);
	statebuf_u64(&w, 250);
	statebuf_u64(&w, 8192);
	statebuf_u32(&w, ml);
	statebuf_put(&w, msg, msg_len);
	ck_assert_int_eq(w.err, 0);
	size_t n = w.len;
	memcpy(b, w.buf, n);
	statebuf_free(&w);
	return n;
}

START_TEST(malformed_answers_refused)
{
	uint8_t b[1024];
	struct forkctl_answer a;
	/* the fake's well-formed answer is taken, figures and all */
	size_t n = answer_bytes(b, "KBOXFRA1", 0, 2, "ok", 2);
	ck_assert_int_eq(ask_fake(b, n, &a), 0);
	ck_assert_int_eq(a.status, 0);
	ck_assert(a.pause_ms == 1.5 && a.state_ms == 0.25 && a.file_bytes == 8192);
	ck_assert_str_eq(a.msg, "ok");
	n = answer_bytes(b, "KBOXFRA1", (uint32_t)-4095, 0, "", 0);
	ck_assert_int_eq(ask_fake(b, n, &a), 0);
	ck_assert_int_eq(a.status, -4095);
	ck_assert_str_eq(a.msg, "");

	/* another magic */
	n = answer_bytes(b, "KBOXFRA2", 0, 2, "ok", 2);
	ck_assert_int_eq(ask_fake(b, n, &a), -EPROTO);
	ck_assert_ptr_nonnull(strstr(err, "malformed"));
	/* a status that is no errno */
	const uint32_t statuses[] = { 1, 0x7fffffffu, (uint32_t)-4096, 0x80000000u };
	for (unsigned i = 0; i < 4; i++) {
		n = answer_bytes(b, "KBOXFRA1", statuses[i], 2, "ok", 2);
		ck_assert_int_eq(ask_fake(b, n, &a), -EPROTO);
	}
	/* a message length that is not the message's */
	n = answer_bytes(b, "KBOXFRA1", 0, 3, "ok", 2);
	ck_assert_int_eq(ask_fake(b, n, &a), -EPROTO);
	n = answer_bytes(b, "KBOXFRA1", 0, 1, "ok", 2);
	ck_assert_int_eq(ask_fake(b, n, &a), -EPROTO);
	static char big[FORKCTL_MSG_MAX + 1];
	memset(big, 'x', sizeof big);
	n = answer_bytes(b, "KBOXFRA1", 0, sizeof big, big, sizeof big);
	ck_assert_int_eq(ask_fake(b, n, &a), -EPROTO);
	n = answer_bytes(b, "KBOXFRA1", 0, 0xffffffffu, "ok", 2);
	ck_assert_int_eq(ask_fake(b, n, &a), -EPROTO);
	/* every cut of a good answer */
	uint8_t good[64];
	size_t gl = answer_bytes(good, "KBOXFRA1", 0, 2, "ok", 2);
	for (size_t len = 1; len < gl; len++)
		ck_assert_int_eq(ask_fake(good, len, &a), -EPROTO);
	/* no answer at all */
	ck_assert_int_eq(ask_fake(NULL, 0, &a), -ECONNRESET);
	ck_assert_ptr_nonnull(strstr(err, "without an answer"));
}
END_TEST

START_TEST(control_bytes_replaced)
{
	uint8_t b[1024];
	struct forkctl_answer a;
	const char msg[] = "line\none\ttab\x1b[31mred\x7f\xc3\xa9\r";
	size_t n = answer_bytes(b, "KBOXFRA1", (uint32_t)-EBUSY, sizeof msg - 1, msg, sizeof msg - 1);
	ck_assert_int_eq(ask_fake(b, n, &a), 0);
	ck_assert_int_eq(a.status, -EBUSY);
	ck_assert_str_eq(a.msg, "line?one?tab?[31mred????");
	/* a NUL inside: replaced too, the line stays whole */
	n = answer_bytes(b, "KBOXFRA1", (uint32_t)-EBUSY, 5, "ab\0cd", 5);
	ck_assert_int_eq(ask_fake(b, n, &a), 0);
	ck_assert_str_eq(a.msg, "ab?cd");
}
END_TEST

START_TEST(request_times_out)
{
	int q[2];
	ck_assert_int_eq(pipe2(q, O_CLOEXEC), 0);
	struct fake f = { .silent = true, .quit = q[0] };
	f.lfd = forkctl_listen(dir, err, sizeof err);
	ck_assert_int_ge(f.lfd, 0);
	ck_assert_int_eq(pthread_create(&f.thread, NULL, fake_serve, &f), 0);
	int ffd = fork_file();
	struct forkctl_answer a;
	double t0 = now_ms();
	ck_assert_int_eq(forkctl_request(dir, key, ffd, 300, &a, err, sizeof err), -ETIMEDOUT);
	double took = now_ms() - t0;
	ck_assert(took >= 290 && took < 5000);
	ck_assert_ptr_nonnull(strstr(err, "no answer"));
	close(q[1]); /* the fake ends */
	ck_assert_int_eq(pthread_join(f.thread, NULL), 0);
	close(q[0]);

	/* nobody even accepts: the request waits in the backlog, then times out */
	t0 = now_ms();
	ck_assert_int_eq(forkctl_request(dir, key, ffd, 200, &a, err, sizeof err), -ETIMEDOUT);
	ck_assert(now_ms() - t0 >= 190);
	close(f.lfd);
	close(ffd);
}
END_TEST

START_TEST(listen_and_connect_errors)
{
	struct forkctl_answer a;
	int ffd = fork_file();
	/* nobody listens */
	ck_assert_int_eq(forkctl_request(dir, key, ffd, 1000, &a, err, sizeof err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "fork.sock"));
	/* a socket left by a kbox that died: replaced; once closed, refused */
	int l1 = forkctl_listen(dir, err, sizeof err);
	ck_assert_int_ge(l1, 0);
	close(l1);
	ck_assert_int_eq(forkctl_request(dir, key, ffd, 1000, &a, err, sizeof err), -ECONNREFUSED);
	int l2 = forkctl_listen(dir, err, sizeof err);
	ck_assert_int_ge(l2, 0);
	close(l2);
	/* a folder name too long for a socket address */
	char longdir[200];
	memset(longdir, 'd', sizeof longdir - 1);
	longdir[0] = '/';
	longdir[sizeof longdir - 1] = '\0';
	ck_assert_int_eq(forkctl_listen(longdir, err, sizeof err), -ENAMETOOLONG);
	ck_assert_int_eq(forkctl_request(longdir, key, ffd, 1000, &a, err, sizeof err), -ENAMETOOLONG);
	/* no folder */
	char none[128];
	snprintf(none, sizeof none, "%s/absent", dir);
	ck_assert_int_eq(forkctl_listen(none, err, sizeof err), -ENOENT);
	close(ffd);
}
END_TEST

Suite *forkctl_suite(void)
{
	return unit_suite_fixture("forkctl", "forkctl", setup, teardown, 30, request_answered,
				  refusal_answered, malformed_requests_skipped,
				  malformed_answers_refused, control_bytes_replaced,
				  request_times_out, listen_and_connect_errors);
}
