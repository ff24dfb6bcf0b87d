/* The host's own addresses by route look-up: see hostaddr.h. */
#include "netstack/hostaddr.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int hostaddr_open(struct hostaddr *h)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };

	memset(h, 0, sizeof *h);
	h->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (h->fd < 0)
		return -errno;
	if (bind(h->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = -errno;

		close(h->fd);
		h->fd = -1;
		return e;
	}
	pthread_mutex_init(&h->m, NULL);
	return 0;
}

void hostaddr_close(struct hostaddr *h)
{
	if (h->fd < 0)
		return;
	close(h->fd);
	h->fd = -1;
	pthread_mutex_destroy(&h->m);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

enum { HOSTADDR_LOCAL = 1, HOSTADDR_NOT_LOCAL = 0, HOSTADDR_UNKNOWN = -1 };

/* The answer to question seq in buf[0, n): HOSTADDR_LOCAL, HOSTADDR_NOT_LOCAL,
 * HOSTADDR_UNKNOWN (an answer we cannot read), or 2 when buf holds no answer
 * to seq (an old question's, which a timeout left behind). */
static int read_answer(const uint8_t *buf, size_t n, uint32_t seq)
{
	size_t off = 0;

	/* By hand rather than NLMSG_OK/NLMSG_NEXT, whose mixed signs
	 * clang's -Wsign-compare refuses: each message must fit what is
	 * left, and the walk ends at the buffer's end. */
	while (n - off >= sizeof(struct nlmsghdr)) {
		const struct nlmsghdr *m = (const struct nlmsghdr *)(buf + off);
		size_t len = m->nlmsg_len;

		if (len < sizeof *m || len > n - off)
			return HOSTADDR_UNKNOWN;
		off += NLMSG_ALIGN(len) < n - off ? NLMSG_ALIGN(len) : n - off;
		if (m->nlmsg_seq != seq)
			continue;
		if (m->nlmsg_type == NLMSG_ERROR) {
			const struct nlmsgerr *e = NLMSG_DATA(m);

			if (m->nlmsg_len < NLMSG_LENGTH(sizeof *e))
				return HOSTADDR_UNKNOWN;
			/* No route: a connection could reach nothing, local or
			 * not.  Anything else (EINVAL included: a question we
			 * got wrong) is not knowing. */
			switch (-e->error) {
			case ENETUNREACH:
			case EHOSTUNREACH:
			case EACCES:
			case EAFNOSUPPORT:
				return HOSTADDR_NOT_LOCAL;
			default:
				return HOSTADDR_UNKNOWN;
			}
		}
		if (m->nlmsg_type == RTM_NEWROUTE) {
			const struct rtmsg *r = NLMSG_DATA(m);

			if (m->nlmsg_len < NLMSG_LENGTH(sizeof *r))
				return HOSTADDR_UNKNOWN;
			switch (r->rtm_type) {
			case RTN_UNICAST:
			case RTN_UNREACHABLE:
			case RTN_PROHIBIT:
			case RTN_BLACKHOLE:
			case RTN_THROW:
				return HOSTADDR_NOT_LOCAL;
			default: /* local, broadcast, anycast, multicast, and types we do not know */
				return HOSTADDR_LOCAL;
			}
		}
		return HOSTADDR_UNKNOWN;
	}
	return 2;
}

static int ask(struct hostaddr *h, const struct policy_addr *a)
{
	union {
		struct nlmsghdr n;
		uint8_t b[NLMSG_SPACE(sizeof(struct rtmsg)) + RTA_SPACE(16)];
	} req;
	union {
		struct nlmsghdr n;
		uint8_t b[8192];
	} ans;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	size_t alen = a->family == 4 ? 4 : 16;
	struct rtmsg *r;
	struct rtattr *rta;
	int64_t end;

	if (h->fd < 0 || (a->family != 4 && a->family != 6))
		return HOSTADDR_UNKNOWN;
	memset(&req, 0, sizeof req);
	req.n.nlmsg_len = NLMSG_LENGTH(sizeof *r);
	req.n.nlmsg_type = RTM_GETROUTE;
	req.n.nlmsg_flags = NLM_F_REQUEST;
	req.n.nlmsg_seq = ++h->seq;
	r = NLMSG_DATA(&req.n);
	r->rtm_family = a->family == 4 ? AF_INET : AF_INET6;
	r->rtm_dst_len = (unsigned char)(alen * 8);
	rta = (struct rtattr *)(req.b + NLMSG_ALIGN(req.n.nlmsg_len));
	rta->rta_type = RTA_DST;
	rta->rta_len = (unsigned short)RTA_LENGTH(alen);
	memcpy(RTA_DATA(rta), a->b, alen);
	req.n.nlmsg_len = NLMSG_ALIGN(req.n.nlmsg_len) + RTA_ALIGN(rta->rta_len);
	if (sendto(h->fd, &req, req.n.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel) !=
	    (ssize_t)req.n.nlmsg_len)
		return HOSTADDR_UNKNOWN;
	/* The kernel queues its answer before sendto returns; the wait is
	 * only for a kernel that one day does not. */
	end = mono_ms() + HOSTADDR_TIMEOUT_MS;
	for (;;) {
		struct sockaddr_nl from;
		socklen_t fl = sizeof from;
		ssize_t n = recvfrom(h->fd, &ans, sizeof ans, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		int v;

		if (n < 0) {
			struct pollfd p = { .fd = h->fd, .events = POLLIN };
			int64_t left = end - mono_ms();

			if ((errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || left <= 0)
				return HOSTADDR_UNKNOWN;
			poll(&p, 1, (int)left);
			continue;
		}
		if (fl < sizeof from || from.nl_pid != 0)
			continue; /* only the kernel answers */
		v = read_answer(ans.b, (size_t)n, h->seq);
		if (v != 2)
			return v;
	}
}

bool hostaddr_is_local(struct hostaddr *h, const struct policy_addr *a)
{
	int v;

	if (h->fd < 0)
		return true;
	pthread_mutex_lock(&h->m);
	v = ask(h, a);
	h->asked++;
	if (v == HOSTADDR_UNKNOWN)
		h->failed++;
	pthread_mutex_unlock(&h->m);
	return v != HOSTADDR_NOT_LOCAL;
}

bool hostaddr_pol_host(void *ctx, const struct policy_addr *a)
{
	return hostaddr_is_local(ctx, a);
}
