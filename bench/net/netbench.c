/* netbench: the HTTP server and the short-connection client of bench/net.
 *
 *   netbench serve PORT LIFETIME_S
 *       A minimal HTTP/1.1 server on 127.0.0.1:PORT, a thread per
 *       connection, one request per connection ("Connection: close"):
 *       GET /N answers N bytes; PUT or POST reads the body
 *       (Content-Length) and answers "ok".  Ends after LIFETIME_S.
 *   netbench rate ADDR PORT SECONDS THREADS
 *       THREADS threads, each in a loop for SECONDS: connect, GET /64,
 *       read to EOF, close.  Prints "requests=N rps=R errors=E".
 *   netbench latency ADDR PORT COUNT
 *       COUNT of the same requests one after the other; prints
 *       "connect_p50_ms=… connect_p99_ms=… request_p50_ms=… request_p99_ms=…"
 *       (connect: connect() until it returned, i.e. the SYN-ACK; request:
 *       socket() until the whole response and the server's FIN arrived).
 *
 * Fast enough not to be what is measured: the server writes from a fixed
 * 1 MiB buffer and reads into one, with no parsing beyond the request
 * line and Content-Length. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF (1u << 20)
#define HDR_MAX 8192u
#define MAX_SAMPLES 100000u

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int write_all(int fd, const void *b, size_t n)
{
	const char *p = b;

	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* ---- server ---- */

static char *zeros;

static void *serve_one(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char hdr[HDR_MAX + 1], *end = NULL, *cl;
	size_t have = 0;
	unsigned long long n = 0, body = 0, extra;

	while (!end && have < HDR_MAX) {
		ssize_t r = recv(fd, hdr + have, HDR_MAX - have, 0);

		if (r <= 0)
			goto out;
		have += (size_t)r;
		hdr[have] = '\0';
		end = strstr(hdr, "\r\n\r\n");
	}
	if (!end)
		goto out;
	extra = have - (size_t)(end + 4 - hdr);
	*end = '\0';
	if (strncmp(hdr, "GET /", 5) == 0) {
		char head[160];
		int hl;

		n = strtoull(hdr + 5, NULL, 10);
		hl = snprintf(head, sizeof head,
			      "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nConnection: close\r\n\r\n", n);
		if (write_all(fd, head, (size_t)hl) < 0)
			goto out;
		while (n > 0) {
			size_t c = n < BUF ? (size_t)n : BUF;

			if (write_all(fd, zeros, c) < 0)
				goto out;
			n -= c;
		}
	} else {
		static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
		char *buf;

		for (cl = hdr; (cl = strchr(cl, '\n')) != NULL;) {
			cl++;
			if (strncasecmp(cl, "content-length:", 15) == 0)
				body = strtoull(cl + 15, NULL, 10);
		}
		body = body > extra ? body - extra : 0;
		buf = malloc(BUF);
		while (buf && body > 0) {
			ssize_t r = recv(fd, buf, BUF, 0);

			if (r <= 0)
				break;
			body = (unsigned long long)r >= body ? 0 : body - (unsigned long long)r;
		}
		free(buf);
		if (body == 0)
			write_all(fd, ok, sizeof ok - 1);
	}
out:
	shutdown(fd, SHUT_WR);
	/* Drain what the client still sends, so that close sends no reset. */
	while (recv(fd, hdr, HDR_MAX, 0) > 0)
		;
	close(fd);
	return NULL;
}

static void on_alarm(int sig)
{
	(void)sig;
	_exit(0);
}

static int serve(int port, int lifetime)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int one = 1, lfd;
	pthread_attr_t at;

	zeros = calloc(1, BUF);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (!zeros || lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(lfd, (struct sockaddr *)&sin, sizeof sin) < 0 || listen(lfd, 4096) < 0) {
		perror("netbench serve");
		return 1;
	}
	signal(SIGALRM, on_alarm);
	alarm((unsigned)lifetime);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 * 1024);
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		pthread_t t;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0)
			continue;
		if (pthread_create(&t, &at, serve_one, (void *)(intptr_t)fd) != 0)
			close(fd);
	}
}

/* ---- clients ---- */

static struct sockaddr_in dst;
static double deadline;
static atomic_ulong done_ok, errors;

/* One short request; its connect and total times in seconds. */
static int one_request(double *conn, double *total)
{
	static const char req[] = "GET /64 HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
	char b[4096];
	size_t got = 0;
	double t0 = now_s(), t1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ssize_t r;

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&dst, sizeof dst) < 0) {
		close(fd);
		return -1;
	}
	t1 = now_s();
	if (write_all(fd, req, sizeof req - 1) < 0) {
		close(fd);
		return -1;
	}
	while ((r = recv(fd, b, sizeof b, 0)) > 0)
		got += (size_t)r;
	close(fd);
	if (r < 0 || got < 64)
		return -1;
	*conn = t1 - t0;
	*total = now_s() - t0;
	return 0;
}

static void *rate_thread(void *arg)
{
	double c, t;

	(void)arg;
	while (now_s() < deadline) {
		if (one_request(&c, &t) == 0)
			atomic_fetch_add(&done_ok, 1);
		else
			atomic_fetch_add(&errors, 1);
	}
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);

	return n ? v[i] * 1000.0 : -1;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "serve") == 0)
		return serve(atoi(argv[2]), atoi(argv[3]));
	if (argc >= 5 && inet_pton(AF_INET, argv[2], &dst.sin_addr) == 1) {
		dst.sin_family = AF_INET;
		dst.sin_port = htons((uint16_t)atoi(argv[3]));
		signal(SIGPIPE, SIG_IGN);
		if (argc == 6 && strcmp(argv[1], "rate") == 0) {
			int secs = atoi(argv[4]), nt = atoi(argv[5]), i;
			pthread_t t[256];
			double t0;

			if (nt < 1 || nt > 256)
				return 2;
			t0 = now_s();
			deadline = t0 + secs;
			for (i = 0; i < nt; i++)
				pthread_create(&t[i], NULL, rate_thread, NULL);
			for (i = 0; i < nt; i++)
				pthread_join(t[i], NULL);
			printf("requests=%lu rps=%.1f errors=%lu\n", atomic_load(&done_ok),
			       (double)atomic_load(&done_ok) / (now_s() - t0), atomic_load(&errors));
			return 0;
		}
		if (argc == 5 && strcmp(argv[1], "latency") == 0) {
			size_t n = (size_t)atol(argv[4]), k = 0, i;
			double *c = calloc(MAX_SAMPLES, sizeof *c), *t = calloc(MAX_SAMPLES, sizeof *t);

			if (!c || !t || n > MAX_SAMPLES)
				return 2;
			for (i = 0; i < n; i++)
				if (one_request(&c[k], &t[k]) == 0)
					k++;
			qsort(c, k, sizeof *c, cmp_double);
			qsort(t, k, sizeof *t, cmp_double);
			printf("connect_p50_ms=%.3f connect_p99_ms=%.3f request_p50_ms=%.3f request_p99_ms=%.3f errors=%zu\n",
			       pct(c, k, 0.5), pct(c, k, 0.99), pct(t, k, 0.5), pct(t, k, 0.99), n - k);
			return 0;
		}
	}
	fprintf(stderr, "usage: netbench serve PORT LIFETIME_S | rate ADDR PORT SECONDS THREADS | "
			"latency ADDR PORT COUNT\n");
	return 2;
}
