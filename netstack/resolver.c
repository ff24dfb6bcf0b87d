#include "netstack/resolver.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

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
	char name[POL_NAME_MAX + 1];
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
		struct dns_rr r = { .ttl = NRES_TTL };
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

int nres_resolve(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out, size_t max,
		 size_t *n)
{
	(void)ctx;
	*n = 0;
	size_t len = name ? strnlen(name, POL_NAME_MAX + 1) : 0;
	if (len == 0 || len > POL_NAME_MAX || (qtype != DNS_TYPE_A && qtype != DNS_TYPE_AAAA))
		return -EINVAL;
	if (atomic_fetch_add(&pending, 1) >= NRES_MAX_PENDING) {
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
	dl.tv_sec += NRES_TIMEOUT_MS / 1000;
	dl.tv_nsec += (long)(NRES_TIMEOUT_MS % 1000) * 1000000L;
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
