/* A loopback-only test proxy around the interception engine, for real
 * clients (tests/tls/mitm-loopback.sh): it listens on 127.0.0.1, reads
 * each client's ClientHello with tls_sni, and runs a struct mitm between
 * the client and an upstream TLS server on 127.0.0.1 (the stand-in for
 * "the address the guest dialled").  One child process per connection;
 * the parent exits after --max connections.  Each connection ends with
 * one line on stdout: "mitm SNI ok up=N down=N" or "mitm SNI fail: WHY".
 *
 * Usage: mitm_proxy --port P --upstream-port U --ca-dir DIR
 *                   [--extra-ca FILE] [--bundle FILE|""] [--max N]
 *                   [--filter upper-secret]
 * With --port 0 the chosen port is printed first ("port N").  The
 * upper-secret filter rewrites the value of an "x-secret:" header line to
 * upper case (a length-preserving change the server can see). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netstack/tls_cert.h"
#include "netstack/tls_mitm.h"
#include "netstack/tls_sni.h"
#include "netstack/tls_trust.h"

#define IO_TIMEOUT_MS 20000

/* Upper-cases x-secret values; keeps the state of the current line start. */
struct upper {
	char line[16];
	size_t len;      /* bytes of the current line seen, capped at sizeof line */
	bool in_secret;  /* inside an x-secret value */
};

static int upper_up(void *ctx, struct tls_mitm_io *io)
{
	struct upper *u = ctx;
	size_t k = io->in_len < io->out_cap ? io->in_len : io->out_cap;
	for (size_t i = 0; i < k; i++) {
		uint8_t c = io->in[i];
		if (u->in_secret && c >= 'a' && c <= 'z')
			c = (uint8_t)(c - 'a' + 'A');
		io->out[i] = c;
		if (c == '\n') {
			u->len = 0;
			u->in_secret = false;
			continue;
		}
		if (u->len < sizeof u->line)
			u->line[u->len++] = (char)c;
		if (u->len == 9 && strncasecmp(u->line, "x-secret:", 9) == 0)
			u->in_secret = true;
	}
	io->taken = io->made = k;
	return TLS_MITM_FILTER_OK;
}

static const struct tls_mitm_filter_ops upper_ops = { .up = upper_up };

/* A side's bytes read from its socket but not yet taken by the engine. */
struct carry {
	uint8_t buf[16384];
	size_t len, off;
	bool eof, eof_told; /* EOF read from the socket; told to the engine */
};

static int flush_out(struct mitm *m, int fd, bool guest)
{
	for (;;) {
		size_t n;
		const uint8_t *p = guest ? tls_mitm_guest_out(m, &n) : tls_mitm_upstream_out(m, &n);
		if (!p || n == 0)
			return 0;
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0)
			return errno == EAGAIN ? 0 : -errno;
		if (guest)
			tls_mitm_guest_out_done(m, (size_t)k);
		else
			tls_mitm_upstream_out_done(m, (size_t)k);
	}
}

static void feed(struct mitm *m, struct carry *c, bool guest)
{
	while (c->off < c->len) {
		size_t taken = 0;
		int rc = guest ? tls_mitm_guest_in(m, c->buf + c->off, c->len - c->off, &taken)
			       : tls_mitm_upstream_in(m, c->buf + c->off, c->len - c->off, &taken);
		if (rc < 0) {
			c->off = c->len; /* the engine takes no more from this side */
			break;
		}
		if (taken == 0)
			break;
		c->off += taken;
	}
	if (c->off == c->len && c->eof && !c->eof_told) {
		if (guest)
			tls_mitm_close_guest(m);
		else
			tls_mitm_close_upstream(m);
		c->eof_told = true;
	}
}

static int read_side(int fd, struct carry *c)
{
	ssize_t k = recv(fd, c->buf, sizeof c->buf, MSG_DONTWAIT);
	if (k < 0)
		return errno == EAGAIN ? 0 : -errno;
	c->off = 0;
	c->len = (size_t)k;
	c->eof = k == 0;
	return 0;
}

/* Records go out as the engine makes them: Nagle would hold a
 * handshake flight's last record for a delayed ACK (~40 ms). */
static void nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	nodelay(fd);
	return fd;
}

static void serve(int g, int uport, struct tls_cert_ca *ca, const struct tls_trust *trust, bool filter)
{
	struct carry gc = { 0 }, uc = { 0 };
	struct tls_hello h;
	int st = TLS_SNI_NEED_MORE;
	/* The caller's side of the contract: hold the first bytes until the
	 * hello can be judged. */
	while (st == TLS_SNI_NEED_MORE && gc.len < sizeof gc.buf) {
		struct pollfd p = { .fd = g, .events = POLLIN };
		if (poll(&p, 1, IO_TIMEOUT_MS) <= 0)
			break;
		ssize_t k = recv(g, gc.buf + gc.len, sizeof gc.buf - gc.len, 0);
		if (k <= 0)
			break;
		gc.len += (size_t)k;
		st = tls_sni_parse(gc.buf, gc.len, &h);
	}
	if (st != TLS_SNI_OK || !h.has_sni || h.sni_invalid) {
		printf("mitm - refused: %s\n", st == TLS_SNI_OK ? "no usable SNI" : h.why ? h.why : "no ClientHello");
		return;
	}
	int u = dial(uport);
	if (u < 0) {
		printf("mitm %s fail: upstream connect: %s\n", h.sni, strerror(errno));
		return;
	}
	struct upper up = { 0 };
	struct tls_mitm_config cfg = { .ca = ca, .trust = trust, .filter = filter ? &upper_ops : NULL };
	struct mitm *m;
	int rc = tls_mitm_new(&cfg, h.sni, &up, &m);
	if (rc < 0) {
		printf("mitm %s fail: tls_mitm_new: %s\n", h.sni, strerror(-rc));
		close(u);
		return;
	}
	const char *why = NULL;
	for (;;) {
		feed(m, &gc, true);
		feed(m, &uc, false);
		if (flush_out(m, g, true) < 0 || flush_out(m, u, false) < 0) {
			why = "socket error";
			break;
		}
		unsigned w = tls_mitm_want(m);
		if (w & TLS_MITM_DONE)
			break;
		struct pollfd p[2] = { { .fd = g }, { .fd = u } };
		if ((w & TLS_MITM_WANT_GUEST_IN) && gc.off == gc.len && !gc.eof)
			p[0].events |= POLLIN;
		if (w & TLS_MITM_WANT_GUEST_OUT)
			p[0].events |= POLLOUT;
		if ((w & TLS_MITM_WANT_UP_IN) && uc.off == uc.len && !uc.eof)
			p[1].events |= POLLIN;
		if (w & TLS_MITM_WANT_UP_OUT)
			p[1].events |= POLLOUT;
		if (!p[0].events && !p[1].events) {
			why = "stalled";
			break;
		}
		if (poll(p, 2, IO_TIMEOUT_MS) <= 0) {
			why = "timeout";
			break;
		}
		if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && (p[0].events & POLLIN) && read_side(g, &gc) < 0)
			gc.len = gc.off = 0, gc.eof = true;
		if ((p[1].revents & (POLLIN | POLLHUP | POLLERR)) && (p[1].events & POLLIN) && read_side(u, &uc) < 0)
			uc.len = uc.off = 0, uc.eof = true;
	}
	uint64_t nu, nd;
	tls_mitm_counts(m, &nu, &nd);
	if (tls_mitm_error(m))
		printf("mitm %s fail: %s\n", h.sni, tls_mitm_error(m));
	else if (why)
		printf("mitm %s fail: %s\n", h.sni, why);
	else
		printf("mitm %s ok up=%llu down=%llu\n", h.sni, (unsigned long long)nu, (unsigned long long)nd);
	tls_mitm_free(m);
	close(u);
}

int main(int argc, char **argv)
{
	int port = 0, uport = 0, max = 1;
	const char *ca_dir = NULL, *extra = NULL, *bundle = "";
	bool filter = false;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--filter") && v && !strcmp(v, "upper-secret"))
			filter = true;
		else if (!v)
			goto usage;
		else if (!strcmp(argv[i], "--port"))
			port = atoi(v);
		else if (!strcmp(argv[i], "--upstream-port"))
			uport = atoi(v);
		else if (!strcmp(argv[i], "--ca-dir"))
			ca_dir = v;
		else if (!strcmp(argv[i], "--extra-ca"))
			extra = v;
		else if (!strcmp(argv[i], "--bundle"))
			bundle = v;
		else if (!strcmp(argv[i], "--max"))
			max = atoi(v);
		else
			goto usage;
		i++;
	}
	if (!ca_dir || uport <= 0 || max <= 0)
		goto usage;
	char err[512];
	struct tls_cert_ca *ca;
	struct tls_trust *trust;
	if (tls_cert_ca_open(ca_dir, &ca, err, sizeof err) < 0 || tls_trust_load(bundle, extra, &trust, err, sizeof err) < 0) {
		fprintf(stderr, "mitm_proxy: %s\n", err);
		return 1;
	}
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t alen = sizeof a;
	if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 16) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &alen) < 0) {
		perror("mitm_proxy: listen");
		return 1;
	}
	/* Children are reaped by the kernel: none is left a zombie when
	 * this process is killed (PID 1 here may not reap orphans). */
	signal(SIGCHLD, SIG_IGN);
	printf("port %d\n", ntohs(a.sin_port));
	fflush(stdout);
	for (int n = 0; n < max; n++) {
		int g = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		if (g < 0)
			break;
		pid_t pid = fork();
		if (pid == 0) {
			close(l);
			nodelay(g);
			alarm(60); /* a test connection never lives longer */
			serve(g, uport, ca, trust, filter);
			fflush(stdout);
			_exit(0);
		}
		close(g);
	}
	close(l);
	while (wait(NULL) > 0)
		;
	tls_trust_free(trust);
	tls_cert_ca_free(ca);
	return 0;
usage:
	fprintf(stderr, "usage: mitm_proxy --port P --upstream-port U --ca-dir DIR [--extra-ca FILE] "
			"[--bundle FILE] [--max N] [--filter upper-secret]\n");
	return 2;
}
