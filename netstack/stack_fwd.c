/* Forwarded ports of the network stack (stack_forward_parse, stack_forward_add
 * in stack.h): kbox listens on a host loopback address, and each
 * connection accepted there becomes a TCP connection from the gateway to
 * the guest's port, pumped like an outgoing flow (stack_tcp.c). */
#include "netstack/stack_priv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/errbuf.h"
#include "lwip/tcpip.h"

static err_t on_guest_connected(void *arg, struct tcp_pcb *pcb, err_t err)
{
	struct flow *f = arg;

	if (!f)
		return ERR_OK;
	f->s->st.fwd_accepted++;
	stack_flow_open(f);
	return ERR_OK;
}

/* A host connection accepted on w (fd): connect to the guest's port from
 * the gateway.  The host socket is not read until the guest accepted. */
static void fwd_start(struct stack *s, const struct fwd *w, int fd)
{
	struct policy_decision d = {.allow = true, .why = POLICY_WHY_EXCEPTION, .rule = w->label};
	ip_addr_t local, remote;
	struct tcp_pcb *pcb;
	struct flow *f;

	f = calloc(1, sizeof *f);
	if (!f) {
		close(fd);
		return;
	}
	f->s = s;
	f->fd = fd;
	f->inbound = true;
	f->state = FL_GUEST_CONNECTING;
	f->dst.family = 4;
	memcpy(f->dst.b, guest_ip, 4);
	f->dport = w->fw.guest_port;
	f->opened_ms = stack_now_ms();
	f->deadline_ms = f->opened_ms + s->cfg.connect_timeout_ms;
	stack_audit(s, "tcp", "in", &f->dst, f->dport, NULL, &d);
	IP_ADDR4(&local, gw_ip[0], gw_ip[1], gw_ip[2], gw_ip[3]);
	IP_ADDR4(&remote, guest_ip[0], guest_ip[1], guest_ip[2], guest_ip[3]);
	pcb = tcp_new_ip_type(IPADDR_TYPE_V4);
	if (!pcb)
		goto fail;
	if (tcp_bind(pcb, &local, 0) != ERR_OK) {
		tcp_close(pcb); /* a pcb that never connected: close frees it */
		goto fail;
	}
	/* The guest's segments arrive as guest:GUESTPORT -> gateway:ours. */
	f->ipv = 4;
	memcpy(f->ft.key.gip, guest_ip, 4);
	memcpy(f->ft.key.dip, gw_ip, 4);
	f->ft.key.gport = w->fw.guest_port;
	f->ft.key.dport = pcb->local_port;
	if (flowtab_insert(&s->ft, &f->ft) < 0) {
		tcp_close(pcb);
		goto fail;
	}
	s->st.flows = s->ft.n;
	f->pcb = pcb;
	tcp_arg(pcb, f);
	tcp_err(pcb, stack_flow_on_err);
	bool timer = stack_tcp_timer_running();

	if (tcp_connect(pcb, &remote, w->fw.guest_port, on_guest_connected) != ERR_OK) {
		s->st.fwd_refused++;
		stack_flow_abort(f);
		return;
	}
	if (!timer)
		tcpip_try_callback(stack_wake_lwip, NULL); /* see flow_connected */
	return;
fail:
	s->st.fwd_refused++;
	stack_flow_free(f, true);
}

void stack_fwd_accept(struct stack *s, struct fwd *w)
{
	int k;

	/* Bounded, so a connection storm cannot starve the guest's flows. */
	for (k = 0; k < 64; k++) {
		int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0) {
			fwd_start(s, w, fd);
			continue;
		}
		/* The pending connection stays queued and the listener
		 * readable: without a pause the caller's loop would spin.
		 * The timer tick (check_timeouts) resumes it. */
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			epoll_ctl(s->epfd, EPOLL_CTL_DEL, w->fd, NULL);
			w->paused = true;
		}
		return;
	}
}

static int parse_port(const char *s, size_t n, uint16_t *out)
{
	unsigned v = 0;
	size_t i;

	if (n == 0 || n > 5)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > 65535)
		return -EINVAL;
	*out = (uint16_t)v;
	return 0;
}

static bool is_loopback(const struct policy_addr *a)
{
	static const uint8_t lo6[16] = {[15] = 1};

	return a->family == 4 ? a->b[0] == 127 : memcmp(a->b, lo6, 16) == 0;
}

int stack_forward_parse(const char *spec, struct stack_forward *fw, char *err, size_t errlen)
{
	const char *gp, *hp;
	char addr[64];
	size_t alen;

	memset(fw, 0, sizeof *fw);
	gp = strrchr(spec, ':');
	if (!gp)
		return errbuf_fail(err, errlen, -EINVAL,
			       "-p takes [ADDR:]HOSTPORT:GUESTPORT, not '%.64s'", spec);
	if (parse_port(gp + 1, strlen(gp + 1), &fw->guest_port) < 0 || fw->guest_port == 0)
		return errbuf_fail(err, errlen, -EINVAL,
			       "-p '%.64s': the guest port must be a number from 1 to 65535", spec);
	/* The host port is what follows the last ':' before gp, or the start. */
	for (hp = gp; hp > spec && hp[-1] != ':'; hp--)
		;
	if (parse_port(hp, (size_t)(gp - hp), &fw->host_port) < 0)
		return errbuf_fail(err, errlen, -EINVAL,
			       "-p '%.64s': the host port must be a number from 0 (any free port) to 65535",
			       spec);
	if (hp == spec) {
		fw->host.family = 4;
		fw->host.b[0] = 127;
		fw->host.b[3] = 1;
		return 0;
	}
	alen = (size_t)(hp - 1 - spec);
	if (alen >= 2 && spec[0] == '[' && spec[alen - 1] == ']') {
		spec++;
		alen -= 2;
	}
	if (alen >= sizeof addr)
		return errbuf_fail(err, errlen, -EINVAL, "-p '%.64s': the address is too long", spec);
	memcpy(addr, spec, alen);
	addr[alen] = '\0';
	if (policy_addr_parse(addr, &fw->host) < 0)
		return errbuf_fail(err, errlen, -EINVAL,
			       "-p: '%s' is no IP address (write an IPv6 one as [::1])", addr);
	if (!is_loopback(&fw->host))
		return errbuf_fail(err, errlen, -EINVAL,
			       "-p: kbox listens only on loopback addresses (127.0.0.0/8 or [::1]), not %s: "
			       "a forwarded port must not be reachable from other machines", addr);
	return 0;
}

int stack_forward_add(struct stack *s, struct stack_forward *fw)
{
	struct epoll_event ev = {.events = EPOLLIN};
	struct sockaddr_storage ss;
	socklen_t sl;
	char ip[64];
	int fd, one = 1, r;
	struct fwd *w;

	if (!is_loopback(&fw->host) || fw->guest_port == 0)
		return -EINVAL;
	memset(&ss, 0, sizeof ss);
	if (fw->host.family == 4) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(fw->host_port);
		memcpy(&sin->sin_addr, fw->host.b, 4);
		sl = sizeof *sin;
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(fw->host_port);
		memcpy(&sin6->sin6_addr, fw->host.b, 16);
		sl = sizeof *sin6;
	}
	LOCK_TCPIP_CORE();
	if (s->nfwd >= STACK_MAX_FORWARDS) {
		UNLOCK_TCPIP_CORE();
		return -ENOSPC;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		goto fail;
	fw->host_port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
						      : ((struct sockaddr_in6 *)&ss)->sin6_port);
	/* Listener handles have no generation (the upper half is 0), so
	 * they can never be taken for a flow's (flowtab.h). */
	ev.data.u64 = s->nfwd + 1;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		goto fail;
	w = &s->fwd[s->nfwd++];
	w->fd = fd;
	w->fw = *fw;
	if (policy_addr_format(&fw->host, ip, sizeof ip) < 0)
		snprintf(ip, sizeof ip, "?");
	snprintf(w->label, sizeof w->label, fw->host.family == 6 ? "forward:[%s]:%u:%u" : "forward:%s:%u:%u", ip,
		 fw->host_port, fw->guest_port);
	UNLOCK_TCPIP_CORE();
	return 0;
fail:
	r = -errno;
	if (fd >= 0)
		close(fd);
	UNLOCK_TCPIP_CORE();
	return r;
}

void stack_fwd_resume(struct stack *s)
{
	size_t i;

	for (i = 0; i < s->nfwd; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i + 1};

		if (s->fwd[i].paused && epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->fwd[i].fd, &ev) == 0)
			s->fwd[i].paused = false;
	}
}
