#include "netstack/resolver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/errbuf.h"
#include "netstack/policy.h"

/* Shared by the asker and the worker; the last of the two frees it. */
struct job {
	pthread_mutex_t m;
	pthread_cond_t c;
	int refs;
	bool done;
	int family;
	int gai;
	struct addrinfo *res;
	char name[POLICY_NAME_MAX + 1];
};

static atomic_uint pending;

static void job_put(struct job *j)
{
	pthread_mutex_lock(&j->m);
	bool last = --j->refs == 0;
	pthread_mutex_unlock(&j->m);
	if (!last)
		return;
	if (j->res)
		freeaddrinfo(j->res);
	pthread_cond_destroy(&j->c);
	pthread_mutex_destroy(&j->m);
	free(j);
}

static void *worker(void *arg)
{
	struct job *j = arg;
	struct addrinfo hints = { .ai_family = j->family, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	int g = getaddrinfo(j->name, NULL, &hints, &res);

	pthread_mutex_lock(&j->m);
	j->gai = g;
	j->res = g == 0 ? res : NULL;
	j->done = true;
	pthread_cond_signal(&j->c);
	pthread_mutex_unlock(&j->m);
	atomic_fetch_sub(&pending, 1);
	job_put(j);
	return NULL;
}

/* Copy the answers of the family asked for, without duplicates (one per
 * socket type would otherwise repeat). */
static size_t collect(const struct job *j, struct dns_rr *out, size_t max)
{
	size_t n = 0;

	for (const struct addrinfo *a = j->res; a && n < max; a = a->ai_next) {
		struct dns_rr r = { .ttl = RESOLVER_TTL };
		if (a->ai_family == AF_INET && j->family == AF_INET &&
		    a->ai_addrlen >= sizeof(struct sockaddr_in)) {
			r.addr.family = 4;
			memcpy(r.addr.b, &((const struct sockaddr_in *)a->ai_addr)->sin_addr, 4);
		} else if (a->ai_family == AF_INET6 && j->family == AF_INET6 &&
			   a->ai_addrlen >= sizeof(struct sockaddr_in6)) {
			r.addr.family = 6;
			memcpy(r.addr.b, &((const struct sockaddr_in6 *)a->ai_addr)->sin6_addr, 16);
		} else {
			continue;
		}
		bool dup = false;
		for (size_t i = 0; i < n && !dup; i++)
			dup = memcmp(&out[i].addr, &r.addr, sizeof r.addr) == 0;
		if (!dup)
			out[n++] = r;
	}
	return n;
}

int resolver_resolve(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out, size_t max,
		     size_t *n)
{
	(void)ctx;
	*n = 0;
	size_t len = name ? strnlen(name, POLICY_NAME_MAX + 1) : 0;
	if (len == 0 || len > POLICY_NAME_MAX || (qtype != DNS_TYPE_A && qtype != DNS_TYPE_AAAA))
		return -EINVAL;
	if (atomic_fetch_add(&pending, 1) >= RESOLVER_MAX_PENDING) {
		atomic_fetch_sub(&pending, 1);
		return -EAGAIN;
	}
	struct job *j = calloc(1, sizeof *j);
	if (!j) {
		atomic_fetch_sub(&pending, 1);
		return -ENOMEM;
	}
	pthread_mutex_init(&j->m, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&j->c, &ca);
	pthread_condattr_destroy(&ca);
	j->refs = 2;
	j->family = qtype == DNS_TYPE_A ? AF_INET : AF_INET6;
	memcpy(j->name, name, len);

	pthread_attr_t at;
	pthread_t t;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	int e = pthread_create(&t, &at, worker, j);
	pthread_attr_destroy(&at);
	if (e != 0) {
		atomic_fetch_sub(&pending, 1);
		j->refs = 1;
		job_put(j);
		return -e;
	}

	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += RESOLVER_TIMEOUT_MS / 1000;
	dl.tv_nsec += (long)(RESOLVER_TIMEOUT_MS % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	int rc = -ETIMEDOUT;
	pthread_mutex_lock(&j->m);
	while (!j->done && pthread_cond_timedwait(&j->c, &j->m, &dl) != ETIMEDOUT)
		;
	if (j->done) {
		switch (j->gai) {
		case 0:
			*n = collect(j, out, max);
			rc = DNS_RCODE_NOERROR;
			break;
		case EAI_NONAME:
			rc = DNS_RCODE_NXDOMAIN;
			break;
		case EAI_NODATA:
		case EAI_ADDRFAMILY:
			rc = DNS_RCODE_NOERROR;
			break;
		default:
			rc = -EIO;
		}
	}
	pthread_mutex_unlock(&j->m);
	job_put(j);
	return rc;
}

/* ---- configured upstream servers ------------------------------------- */

int resolver_server_parse(const char *spec, struct resolver_server *s, char *err, size_t errlen)
{
	static const char expected[] = "expected ADDR or ADDR:PORT (IPv6: ADDR or [ADDR]:PORT), "
				       "PORT from 1 to 65535";
	char host[INET6_ADDRSTRLEN + 1];
	const char *h = spec, *port = NULL;
	size_t hl;

	memset(s, 0, sizeof *s);
	const char *colon = strchr(spec, ':');
	if (spec[0] == '[') {
		const char *close = strchr(spec, ']');
		if (!close || (close[1] && close[1] != ':'))
			return errbuf_fail(err, errlen, -EINVAL, "'%.80s': bad brackets; %s", spec,
				       expected);
		h = spec + 1;
		hl = (size_t)(close - h);
		port = close[1] ? close + 2 : NULL;
	} else if (colon && strchr(colon + 1, ':')) {
		hl = strlen(spec); /* bare IPv6, no port */
	} else {
		hl = colon ? (size_t)(colon - spec) : strlen(spec);
		port = colon ? colon + 1 : NULL;
	}
	unsigned p = RESOLVER_DEFAULT_PORT;
	if (port) {
		size_t pl = strlen(port);
		p = 0;
		if (pl == 0 || pl > 5 || strspn(port, "0123456789") != pl || port[0] == '0')
			return errbuf_fail(err, errlen, -EINVAL, "'%.80s': bad port; %s", spec,
				       expected);
		for (size_t i = 0; i < pl; i++)
			p = p * 10 + (unsigned)(port[i] - '0');
		if (p > 65535)
			return errbuf_fail(err, errlen, -EINVAL, "'%.80s': port %u is out of range; %s",
				       spec, p, expected);
	}
	if (hl == 0 || hl >= sizeof host)
		return errbuf_fail(err, errlen, -EINVAL, "'%.80s' is not an IP address; %s", spec,
			       expected);
	memcpy(host, h, hl);
	host[hl] = '\0';
	struct sockaddr_in *v4 = (struct sockaddr_in *)&s->sa;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&s->sa;
	bool bad;
	if (spec[0] != '[' && inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		uint8_t b0 = ((const uint8_t *)&v4->sin_addr)[0];
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)p);
		s->len = sizeof *v4;
		bad = v4->sin_addr.s_addr == 0 || (b0 >= 224 && b0 <= 239) ||
		      v4->sin_addr.s_addr == 0xffffffffu;
	} else if (strchr(host, ':') && inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)p);
		s->len = sizeof *v6;
		bad = IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr) || IN6_IS_ADDR_MULTICAST(&v6->sin6_addr);
	} else {
		return errbuf_fail(err, errlen, -EINVAL,
			       "'%.80s' is not an IP address (a name server is given by "
			       "address, not by name); %s", spec, expected);
	}
	if (bad)
		return errbuf_fail(err, errlen, -EINVAL,
			       "'%.80s': not a unicast address; expected the address of a "
			       "name server", spec);
	return 0;
}

int resolver_upstream_add(struct resolver_upstream *u, const char *spec, char *err, size_t errlen)
{
	if (u->n >= RESOLVER_MAX_SERVERS)
		return errbuf_fail(err, errlen, -ENOSPC,
			       "more than %u name servers; expected at most %u", RESOLVER_MAX_SERVERS,
			       RESOLVER_MAX_SERVERS);
	int r = resolver_server_parse(spec, &u->srv[u->n], err, errlen);
	if (r == 0)
		u->n++;
	return r;
}

int resolver_answer(const uint8_t *pkt, size_t len, const struct dns_query *q, struct dns_rr *out,
		    size_t max, size_t *n)
{
	int rcode;
	int r = dns_parse_response(pkt, len, q, &rcode, out, max, n);
	if (r < 0)
		return r;
	if (rcode == DNS_RCODE_NOERROR || rcode == DNS_RCODE_NXDOMAIN) {
		if (rcode == DNS_RCODE_NXDOMAIN)
			*n = 0;
		return rcode;
	}
	*n = 0;
	return -EAGAIN;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Wait for ev on fd until the deadline: 0, -ETIMEDOUT or a negative errno. */
static int wait_fd(int fd, short ev, uint64_t deadline)
{
	for (;;) {
		uint64_t now = mono_ms();
		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd pfd = { .fd = fd, .events = ev };
		int r = poll(&pfd, 1, (int)(deadline - now));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r > 0)
			return 0;
	}
}

static bool same_peer(const struct resolver_server *s, const struct sockaddr_storage *from,
		      socklen_t flen)
{
	if (from->ss_family != s->sa.ss_family)
		return false;
	if (from->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)from, *b = (const void *)&s->sa;
		return flen >= sizeof *a && a->sin_port == b->sin_port &&
		       a->sin_addr.s_addr == b->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *a = (const void *)from, *b = (const void *)&s->sa;
	return flen >= sizeof *a && a->sin6_port == b->sin6_port &&
	       memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0;
}

/* A non-blocking socket connected to s (UDP: the kernel then drops
 * datagrams from elsewhere; TCP: the connect may still be under way). */
static int open_to(const struct resolver_server *s, int type)
{
	int fd = socket(s->sa.ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)&s->sa, s->len) < 0 && errno != EINPROGRESS) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

static int send_all(int fd, const uint8_t *b, size_t len, uint64_t deadline)
{
	while (len > 0) {
		ssize_t w = send(fd, b, len, MSG_NOSIGNAL);
		if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			int r = wait_fd(fd, POLLOUT, deadline);
			if (r < 0)
				return r;
			continue;
		}
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		b += w;
		len -= (size_t)w;
	}
	return 0;
}

static int recv_all(int fd, uint8_t *b, size_t len, uint64_t deadline)
{
	while (len > 0) {
		ssize_t r = recv(fd, b, len, 0);
		if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
			int e = wait_fd(fd, POLLIN, deadline);
			if (e < 0)
				return e;
			continue;
		}
		if (r <= 0)
			return r < 0 ? -errno : -ECONNRESET;
		b += r;
		len -= (size_t)r;
	}
	return 0;
}

/* The question again over TCP (RFC 7766), after a truncated answer. */
static int ask_tcp(const struct resolver_server *s, const uint8_t *qm, size_t qlen,
		   const struct dns_query *q, uint64_t deadline, struct dns_rr *out, size_t max,
		   size_t *n)
{
	uint8_t hdr[2] = { (uint8_t)(qlen >> 8), (uint8_t)qlen };
	uint8_t *buf = NULL;
	int fd = open_to(s, SOCK_STREAM), r;
	if (fd < 0)
		return fd;
	r = wait_fd(fd, POLLOUT, deadline);
	if (r == 0) {
		int soerr = 0;
		socklen_t sl = sizeof soerr;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			r = -errno;
		else if (soerr)
			r = -soerr;
	}
	if (r == 0)
		r = send_all(fd, hdr, 2, deadline);
	if (r == 0)
		r = send_all(fd, qm, qlen, deadline);
	if (r == 0)
		r = recv_all(fd, hdr, 2, deadline);
	size_t len = (size_t)hdr[0] << 8 | hdr[1];
	if (r == 0 && !(buf = malloc(len ? len : 1)))
		r = -ENOMEM;
	if (r == 0)
		r = recv_all(fd, buf, len, deadline);
	if (r == 0) {
		r = resolver_answer(buf, len, q, out, max, n);
		/* Over TCP the peer is the server: a bad message is its failure. */
		if (r == -EPROTO || r == -EMSGSIZE)
			r = -EAGAIN;
	}
	free(buf);
	close(fd);
	return r;
}

/* One attempt at one server: DNS_RCODE_NOERROR/NXDOMAIN, -EAGAIN (the
 * server failed or refused), -ETIMEDOUT, or another negative errno. */
static int ask_udp(const struct resolver_server *s, const char *name, uint16_t qtype, unsigned ms,
		   struct dns_rr *out, size_t max, size_t *n)
{
	uint8_t qm[DNS_MAX_MSG], rm[DNS_MAX_MSG];
	struct dns_query q;
	size_t qlen;
	uint16_t id;

	if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
		return -EIO;
	int r = dns_build_query(id, name, qtype, qm, sizeof qm, &qlen);
	if (r < 0)
		return r;
	if (dns_parse_query(qm, qlen, &q) < 0)
		return -EINVAL;
	uint64_t deadline = mono_ms() + ms;
	int fd = open_to(s, SOCK_DGRAM);
	if (fd < 0)
		return fd;
	ssize_t w = send(fd, qm, qlen, MSG_NOSIGNAL);
	r = w == (ssize_t)qlen ? -ETIMEDOUT : w < 0 ? -errno : -EIO;
	while (w == (ssize_t)qlen) {
		/* Datagrams that keep coming never let recvfrom say EAGAIN, so
		 * the time is checked here too: forgeries sent back to back
		 * must not hold the attempt open past its deadline. */
		if (mono_ms() >= deadline) {
			r = -ETIMEDOUT;
			break;
		}
		struct sockaddr_storage from;
		socklen_t flen = sizeof from;
		ssize_t got = recvfrom(fd, rm, sizeof rm, 0, (struct sockaddr *)&from, &flen);
		if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
			r = wait_fd(fd, POLLIN, deadline);
			if (r < 0)
				break;
			continue;
		}
		if (got < 0) {
			r = -errno; /* ECONNREFUSED: nothing listens there */
			break;
		}
		if (!same_peer(s, &from, flen))
			continue;
		r = resolver_answer(rm, (size_t)got, &q, out, max, n);
		if (r == -EMSGSIZE)
			r = ask_tcp(s, qm, qlen, &q, deadline, out, max, n);
		if (r != -EPROTO)
			break;
		r = -ETIMEDOUT; /* a forgery or garbage: keep listening */
	}
	close(fd);
	return r;
}

int resolver_upstream_resolve(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out,
			      size_t max, size_t *n)
{
	const struct resolver_upstream *u = ctx;
	bool done[RESOLVER_MAX_SERVERS] = { false };
	bool failed = false;
	*n = 0;
	size_t len = name ? strnlen(name, POLICY_NAME_MAX + 1) : 0;
	if (!u || u->n == 0 || u->n > RESOLVER_MAX_SERVERS || len == 0 || len > POLICY_NAME_MAX ||
	    (qtype != DNS_TYPE_A && qtype != DNS_TYPE_AAAA))
		return -EINVAL;
	unsigned ms = u->try_ms ? u->try_ms : RESOLVER_TRY_MS;
	for (unsigned round = 0; round < RESOLVER_ROUNDS; round++) {
		for (size_t i = 0; i < u->n; i++) {
			if (done[i])
				continue;
			size_t got = 0;
			int r = ask_udp(&u->srv[i], name, qtype, ms, out, max, &got);
			if (r >= 0) {
				*n = got;
				return r;
			}
			if (r == -EINVAL)
				return r;
			/* Only a timeout is worth a retry; the others said no. */
			if (r != -ETIMEDOUT) {
				done[i] = true;
				failed = true;
			}
		}
	}
	return failed ? -EIO : -ETIMEDOUT;
}
