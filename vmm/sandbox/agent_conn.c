#include "vmm/sandbox/agent_conn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int agent_conn_open_once(const char *sock, unsigned port, int timeout_ms)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(sock) >= sizeof a.sun_path)
		return -ENAMETOOLONG;
	strcpy(a.sun_path, sock);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	char req[32];
	int n = snprintf(req, sizeof req, "CONNECT %u\n", port);
	if (write(fd, req, (size_t)n) != n) {
		int e = errno ? errno : EIO;
		close(fd);
		return -e;
	}
	/* Read the reply a byte at a time: the stream that follows it is the
	 * guest's and must not be consumed here. */
	char line[64];
	size_t len = 0;
	long long deadline = now_ms() + timeout_ms;
	while (len < sizeof line - 1) {
		long long left = deadline - now_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = left > 0 ? poll(&p, 1, (int)left) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			close(fd);
			return r == 0 ? -ETIMEDOUT : -errno;
		}
		ssize_t got = read(fd, line + len, 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			close(fd);
			return -ECONNREFUSED;
		}
		if (line[len] == '\n') {
			line[len] = '\0';
			size_t d = 3;
			while (line[d] >= '0' && line[d] <= '9')
				d++;
			if (strncmp(line, "OK ", 3) == 0 && d > 3 && line[d] == '\0')
				return fd;
			close(fd);
			return -ECONNREFUSED;
		}
		len++;
	}
	close(fd);
	return -EPROTO;
}

int agent_conn_open(const char *sock, unsigned port, int timeout_ms, atomic_int *stop)
{
	long long deadline = now_ms() + timeout_ms;
	/* Tries 1, 2, 4 ... ms apart, then every 100 ms: a restored guest
	 * listens within milliseconds, a booting one takes seconds, and a
	 * refused try costs the guest one reset. */
	long wait_ms = 1;
	for (;;) {
		if (stop && atomic_load(stop))
			return -ESHUTDOWN;
		int fd = agent_conn_open_once(sock, port, 5000);
		if (fd >= 0)
			return fd;
		if (fd != -ECONNREFUSED && fd != -ECONNRESET && fd != -ETIMEDOUT && fd != -ENOENT)
			return fd;
		if (timeout_ms >= 0 && now_ms() >= deadline)
			return -ETIMEDOUT;
		nanosleep(&(struct timespec){ .tv_nsec = wait_ms * 1000000 }, NULL);
		wait_ms = wait_ms * 2 > 100 ? 100 : wait_ms * 2;
	}
}
