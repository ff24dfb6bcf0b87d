/* The network stack's DNS answerer (stack.h, docs/network.md): the
 * guest's questions to the gateway are judged by the policy, answered
 * here for the host alias and pinned names, and otherwise handed to the
 * host resolver.
 *
 * Those questions go to a queue served by a pool of threads (rp below)
 * that never take the core lock; an answer comes back on the stack's
 * done list and its eventfd, and stack_dispatch sends the reply under the
 * lock (stack_dns_collect). */
#include "netstack/stack_priv.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/errbuf.h"

/* A question waiting for the host resolver, with what its reply needs. */
struct dq {
	struct dq *next;
	struct stack *s;
	struct dns_query q;
	uint8_t qmsg[DNS_MAX_MSG]; /* the query, up to the end of its question */
	uint8_t mac[6];            /* the guest's, and its port */
	uint16_t sport;
	char norm[POLICY_NAME_MAX + 1];
	/* the resolver's answer */
	int rc;
	size_t n;
	struct dns_rr rr[DNS_MAX_ANSWERS];
};

/* The resolver threads, process-wide like lwIP: they outlive any one
 * stack.  rp.m guards the queue, the thread count and every stack's
 * dns_done and dns_running; it is never held while the core lock is
 * taken. */
static struct {
	pthread_mutex_t m;
	pthread_cond_t work, idle;
	struct dq *head, *tail;
	unsigned threads;
} rp = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0};

static void *rp_worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&rp.m);
	for (;;) {
		struct dq *j;
		struct stack *s;
		uint64_t one = 1;

		while (!rp.head)
			pthread_cond_wait(&rp.work, &rp.m);
		j = rp.head;
		rp.head = j->next;
		if (!rp.head)
			rp.tail = NULL;
		s = j->s;
		s->dns_running++; /* stack_destroy waits for it: s and its cfg stay */
		pthread_mutex_unlock(&rp.m);
		j->n = 0;
		j->rc = s->cfg.resolve(s->cfg.resolve_ctx, j->norm, j->q.qtype, j->rr, DNS_MAX_ANSWERS, &j->n);
		pthread_mutex_lock(&rp.m);
		j->next = s->dns_done;
		s->dns_done = j;
		if (write(s->efd, &one, sizeof one) < 0) {
			/* the counter is saturated: the fd is readable anyway */
		}
		if (--s->dns_running == 0)
			pthread_cond_broadcast(&rp.idle);
	}
	return NULL;
}

/* Start the resolver threads unless they run: 0, or -EAGAIN if none
 * could be started (tried again on the next question).  Started by the
 * first question rather than by stack_create, so that they are children of
 * a thread that asks (kbox's device or vCPU thread) and inherit its
 * lock-down, Landlock included; the seccomp allowlist lets a thread make
 * threads. */
static int rp_ensure(void)
{
	sigset_t all, old;
	int r;

	pthread_mutex_lock(&rp.m);
	if (rp.threads == 0) {
		/* Signals are for the threads that wait for them, never these;
		 * but not the ones a fault raises in the thread itself (SIGSYS
		 * is how the lock-down reports a refused call: blocked, the
		 * kernel would kill kbox without a word). */
		sigfillset(&all);
		sigdelset(&all, SIGSYS);
		sigdelset(&all, SIGSEGV);
		sigdelset(&all, SIGBUS);
		sigdelset(&all, SIGFPE);
		sigdelset(&all, SIGILL);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		while (rp.threads < STACK_DNS_WORKERS) {
			pthread_t t;

			if (pthread_create(&t, NULL, rp_worker, NULL) != 0)
				break;
			pthread_detach(t);
			rp.threads++;
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	r = rp.threads ? 0 : -EAGAIN;
	pthread_mutex_unlock(&rp.m);
	return r;
}

/* Reply to q (parsed from qmsg) to the guest's MAC and port. */
static void dns_send(struct stack *s, const uint8_t mac[6], uint16_t port, const struct dns_query *q,
		     const uint8_t *qmsg, int rcode, const struct policy_addr *a, size_t n, uint32_t ttl)
{
	uint8_t msg[DNS_MAX_MSG];
	size_t len, fl;

	if (dns_build_reply(q, qmsg, rcode, a, n, ttl, msg, sizeof msg, &len) < 0)
		return;
	if (frame_build_udp(mac, gw_mac, gw_ip, STACK_DNS_PORT, guest_ip, port, msg, len, s->tx, sizeof s->tx, &fl) == 0)
		stack_send_frame(s, fl);
}

static void dns_reply(struct stack *s, const struct frame_pkt *p, const struct dns_query *q, int rcode,
		      const struct policy_addr *a, size_t n, uint32_t ttl)
{
	dns_send(s, p->eth_src, p->sport, q, p->data, rcode, a, n, ttl);
}

/* A question refused before the resolver saw it, for asking too fast or
 * too much at once: told in the log, itself rate-limited. */
static void dns_refuse_load(struct stack *s, const struct frame_pkt *p, const struct dns_query *q, const char *rule)
{
	if (stack_bucket_take(&s->dns_rate_log, stack_now_ms())) {
		struct audit_event e = {
			.time_ms = stack_wall_ms(),
			.proto = "dns",
			.name = q->name,
			.allow = false,
			.rule = rule,
			.suppressed = s->dns_unlogged,
		};

		audit_write(s->cfg.audit, &e);
		s->dns_unlogged = 0;
	} else {
		s->dns_unlogged++;
	}
	dns_reply(s, p, q, DNS_RCODE_REFUSED, NULL, 0, 0);
}

/* Hand an allowed question to the resolver threads; the reply goes out
 * from dns_answered. */
static void dns_ask(struct stack *s, const struct frame_pkt *p, const struct dns_query *q, const char *norm)
{
	struct dq *j;

	if (s->st.dns_inflight >= STACK_DNS_INFLIGHT) {
		s->st.dns_busy_refused++;
		dns_refuse_load(s, p, q, "dns:busy");
		return;
	}
	/* Each question costs the host a resolver call: a guest asking too
	 * fast is refused at once. */
	if (!stack_bucket_take(&s->dns_rate, stack_now_ms())) {
		s->st.dns_rate_refused++;
		dns_refuse_load(s, p, q, "dns:rate");
		return;
	}
	j = rp_ensure() == 0 ? malloc(sizeof *j) : NULL;
	if (!j || q->qend > sizeof j->qmsg || q->qend > p->data_len) {
		free(j);
		dns_reply(s, p, q, DNS_RCODE_SERVFAIL, NULL, 0, 0);
		return;
	}
	j->next = NULL;
	j->s = s;
	j->q = *q;
	memcpy(j->qmsg, p->data, q->qend);
	memcpy(j->mac, p->eth_src, 6);
	j->sport = p->sport;
	memcpy(j->norm, norm, sizeof j->norm);
	s->st.dns_inflight++;
	pthread_mutex_lock(&rp.m);
	if (rp.tail)
		rp.tail->next = j;
	else
		rp.head = j;
	rp.tail = j;
	pthread_cond_signal(&rp.work);
	pthread_mutex_unlock(&rp.m);
}

/* The resolver answered j: the rebinding filter, the name memory, the
 * reply. */
static void dns_answered(struct stack *s, struct dq *j)
{
	struct policy_decision d;
	struct policy_addr a[DNS_MAX_ANSWERS];
	uint32_t ttl = DNS_MEMO_MAX_TTL;
	size_t n = j->n, kept, i;
	int r = j->rc;

	if (r < 0 || r > 15) {
		dns_send(s, j->mac, j->sport, &j->q, j->qmsg, DNS_RCODE_SERVFAIL, NULL, 0, 0);
		return;
	}
	if (n > DNS_MAX_ANSWERS)
		n = DNS_MAX_ANSWERS;
	kept = dns_filter_answers(s->cfg.policy, j->norm, j->rr, n, &d);
	if (n > 0 && kept == 0) {
		/* Every answer was refused (rebinding or allowlist). */
		stack_audit(s, "dns", NULL, NULL, 0, j->q.name, &d);
		dns_send(s, j->mac, j->sport, &j->q, j->qmsg, DNS_RCODE_REFUSED, NULL, 0, 0);
		return;
	}
	for (i = 0; i < kept; i++) {
		a[i] = j->rr[i].addr;
		if (j->rr[i].ttl < ttl)
			ttl = j->rr[i].ttl;
		dns_memo_put(&s->memo, j->norm, &j->rr[i].addr, j->rr[i].ttl, stack_now_ms() / 1000);
	}
	dns_send(s, j->mac, j->sport, &j->q, j->qmsg, r, a, kept, ttl);
}

/* Send the replies whose answers are in. */
void stack_dns_collect(struct stack *s)
{
	struct dq *j, *next;
	uint64_t v;

	if (read(s->efd, &v, sizeof v) < 0) {
		/* nothing counted: the list may still hold answers */
	}
	pthread_mutex_lock(&rp.m);
	j = s->dns_done;
	s->dns_done = NULL;
	pthread_mutex_unlock(&rp.m);
	for (; j; j = next) {
		next = j->next;
		dns_answered(s, j);
		free(j);
		s->st.dns_inflight--;
	}
}

/* Whether name is pinned (--add-host); if so, its addresses that fit
 * qtype go to out[0, *n) (at most DNS_MAX_ANSWERS).  The user's own
 * mapping skips the rebinding filter: a private address is what they
 * asked for, and connections to it are still judged by the policy. */
static bool pinned_answer(const struct stack *s, const char *name, uint16_t qtype, struct policy_addr *out, size_t *n)
{
	bool found = false;
	size_t i;

	*n = 0;
	for (i = 0; i < s->cfg.nhosts; i++) {
		const struct stack_host *h = &s->cfg.hosts[i];

		if (strcmp(h->name, name) != 0)
			continue;
		found = true;
		if ((h->addr.family == 4) == (qtype == DNS_TYPE_A) && *n < DNS_MAX_ANSWERS)
			out[(*n)++] = h->addr;
	}
	return found;
}

int stack_host_parse(const char *spec, struct stack_host *h, char *err, size_t errlen)
{
	const char *colon = strchr(spec, ':');
	char name[POLICY_NAME_MAX + 2], addr[64];
	size_t nlen, alen;
	const char *a;

	memset(h, 0, sizeof *h);
	if (!colon || colon == spec || !colon[1])
		return errbuf_fail(err, errlen, -EINVAL, "'%.64s' is not NAME:ADDR", spec);
	nlen = (size_t)(colon - spec);
	if (nlen >= sizeof name)
		return errbuf_fail(err, errlen, -EINVAL, "'%.64s...': the name is too long", spec);
	memcpy(name, spec, nlen);
	name[nlen] = '\0';
	if (policy_name_normalize(name, h->name) < 0 || policy_name_is_numeric(h->name) || strchr(h->name, '*'))
		return errbuf_fail(err, errlen, -EINVAL, "'%.64s': '%s' is no DNS name", spec, name);
	if (strcmp(h->name, POLICY_HOST_NAME) == 0)
		return errbuf_fail(err, errlen, -EINVAL,
			       "%s is kbox's own name for the host and cannot be pinned",
			       POLICY_HOST_NAME);
	a = colon + 1;
	alen = strlen(a);
	if (alen >= 2 && a[0] == '[' && a[alen - 1] == ']') {
		a++;
		alen -= 2;
	}
	if (alen < sizeof addr) {
		memcpy(addr, a, alen);
		addr[alen] = '\0';
		if (policy_addr_parse(addr, &h->addr) == 0)
			return 0;
	}
	return errbuf_fail(err, errlen, -EINVAL, "'%.64s': '%.64s' is no IP address", spec, colon + 1);
}

void stack_dns_input(struct stack *s, const struct frame_pkt *p)
{
	struct dns_query q;
	struct policy_decision d;
	struct policy_addr a[DNS_MAX_ANSWERS];
	char norm[POLICY_NAME_MAX + 1];
	size_t n = 0, i;
	int r;

	r = dns_parse_query(p->data, p->data_len, &q);
	if (r == -EBADMSG)
		return;
	s->st.dns_queries++;
	if (r < 0) {
		dns_reply(s, p, &q, r == -ENOTSUP ? DNS_RCODE_NOTIMP : DNS_RCODE_FORMERR, NULL, 0, 0);
		return;
	}
	policy_check_name(s->cfg.policy, q.name, &d);
	if (d.allow && policy_name_normalize(q.name, norm) < 0)
		d.allow = false;
	/* A pinned name is answered here and never asked upstream, so an
	 * allowlist without a rule for it need not refuse it (its
	 * connections are judged all the same). */
	if (!d.allow && d.why == POLICY_WHY_NO_MATCH && policy_name_normalize(q.name, norm) == 0 &&
	    pinned_answer(s, norm, q.qtype, a, &n))
		d = (struct policy_decision){true, POLICY_WHY_ALLOW_RULE, "add-host"};
	stack_audit(s, "dns", NULL, NULL, 0, q.name, &d);
	if (!d.allow) {
		dns_reply(s, p, &q, DNS_RCODE_REFUSED, NULL, 0, 0);
		return;
	}
	if (q.qtype != DNS_TYPE_A && q.qtype != DNS_TYPE_AAAA) {
		dns_reply(s, p, &q, DNS_RCODE_NOERROR, NULL, 0, 0);
		return;
	}
	if (strcmp(norm, POLICY_HOST_NAME) == 0) {
		/* Ours: the gateway stands for the host (see decide). */
		memset(&a[0], 0, sizeof a[0]);
		a[0].family = q.qtype == DNS_TYPE_A ? 4 : 6;
		memcpy(a[0].b, q.qtype == DNS_TYPE_A ? gw_ip : gw_ip6, q.qtype == DNS_TYPE_A ? 4 : 16);
		n = 1;
		dns_reply(s, p, &q, DNS_RCODE_NOERROR, a, n, DNS_MEMO_MIN_TTL);
		return;
	}
	if (pinned_answer(s, norm, q.qtype, a, &n)) {
		for (i = 0; i < n; i++)
			dns_memo_put(&s->memo, norm, &a[i], DNS_MEMO_MIN_TTL, stack_now_ms() / 1000);
		dns_reply(s, p, &q, DNS_RCODE_NOERROR, a, n, DNS_MEMO_MIN_TTL);
		return;
	}
	if (!s->cfg.resolve) {
		dns_reply(s, p, &q, DNS_RCODE_SERVFAIL, NULL, 0, 0);
		return;
	}
	dns_ask(s, p, &q, norm);
}

void stack_dns_drop_all(struct stack *s)
{
	struct dq **pp, *j, *next;

	pthread_mutex_lock(&rp.m);
	rp.tail = NULL;
	for (pp = &rp.head; *pp;) {
		j = *pp;
		if (j->s == s) {
			*pp = j->next;
			free(j);
		} else {
			rp.tail = j;
			pp = &j->next;
		}
	}
	while (s->dns_running)
		pthread_cond_wait(&rp.idle, &rp.m);
	j = s->dns_done;
	s->dns_done = NULL;
	pthread_mutex_unlock(&rp.m);
	for (; j; j = next) {
		next = j->next;
		free(j);
	}
}
