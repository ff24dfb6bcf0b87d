/* The stack's DNS answers do not wait for the host resolver under the
 * stack's lock: with a resolver that takes 1.5 s over one name, other
 * questions are answered and a TCP connection opens meanwhile; the slow
 * answer still arrives, filtered and remembered like any other; questions
 * beyond STACK_DNS_INFLIGHT waiting are REFUSED at once; and a stack
 * destroyed with questions under way waits for the resolver calls and
 * leaks nothing.  The resolver is a callback over a fixed table (no real
 * name is ever resolved); the only socket is a listener on 127.0.0.1. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/frame.h"
#include "netstack/stack.h"
#include "tests/lib/unit_suite.h"

static const uint8_t gmac[6] = {0x02, 0, 0, 0, 0, 0x15};
static const uint8_t wmac[6] = STACK_GATEWAY_MAC;
static const uint8_t gip[4] = STACK_GUEST_IP;
static const uint8_t wip[4] = STACK_GATEWAY_IP;

#define SLOW_MS 1500
#define MAX_SEEN 1024

/* What the stack sent the guest, from any thread. */
static pthread_mutex_t seen_m = PTHREAD_MUTEX_INITIALIZER;
static struct reply {
	uint16_t id;
	int rcode;
	unsigned answers;
	uint64_t at_ms;
} seen[MAX_SEEN];
static size_t nseen;
static uint64_t synack_ms;

/* The resolver: "slow.test" after SLOW_MS, "gate.test" once the gate
 * opens, the rest at once; "private.test" points at 10.1.2.3 (rebinding). */
static pthread_mutex_t gate_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_c = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static unsigned calls;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void output(void *ctx, const uint8_t *frame, size_t len)
{
	struct frame_pkt p;

	(void)ctx;
	if (frame_parse(frame, len, &p) < 0 || memcmp(p.eth_dst, gmac, 6) != 0)
		return;
	pthread_mutex_lock(&seen_m);
	if (p.proto == FRAME_IP_UDP && p.sport == STACK_DNS_PORT && p.data_len >= 12 && nseen < MAX_SEEN) {
		seen[nseen].id = (uint16_t)(p.data[0] << 8 | p.data[1]);
		seen[nseen].rcode = p.data[3] & 15;
		seen[nseen].answers = (unsigned)(p.data[6] << 8 | p.data[7]);
		seen[nseen].at_ms = now_ms();
		nseen++;
	} else if (p.proto == FRAME_IP_TCP && p.tcp_flags == (FRAME_TCP_SYN | FRAME_TCP_ACK) && !synack_ms) {
		synack_ms = now_ms();
	}
	pthread_mutex_unlock(&seen_m);
}

static int resolve(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out, size_t max, size_t *n)
{
	(void)ctx;
	pthread_mutex_lock(&gate_m);
	calls++;
	if (strcmp(name, "gate.test") == 0)
		while (!gate_open)
			pthread_cond_wait(&gate_c, &gate_m);
	pthread_mutex_unlock(&gate_m);
	if (strcmp(name, "slow.test") == 0)
		usleep(SLOW_MS * 1000);
	*n = 0;
	if (qtype != DNS_TYPE_A || max < 1)
		return DNS_RCODE_NOERROR;
	out[0].addr.family = 4;
	memcpy(out[0].addr.b, strcmp(name, "private.test") == 0 ? (uint8_t[4]){10, 1, 2, 3}
								  : (uint8_t[4]){93, 184, 216, 34},
	       4);
	out[0].ttl = 60;
	*n = 1;
	return strcmp(name, "nosuch.test") == 0 ? DNS_RCODE_NXDOMAIN : DNS_RCODE_NOERROR;
}

static void send_query(struct stack *s, uint16_t id, const char *name)
{
	uint8_t q[300], f[FRAME_MAX];
	size_t len = 12, n;
	const char *l = name;

	memset(q, 0, 12);
	q[0] = (uint8_t)(id >> 8);
	q[1] = (uint8_t)id;
	q[2] = 0x01; /* RD */
	q[5] = 1;    /* one question */
	while (*l) {
		const char *dot = strchr(l, '.');
		size_t ll = dot ? (size_t)(dot - l) : strlen(l);

		q[len++] = (uint8_t)ll;
		memcpy(q + len, l, ll);
		len += ll;
		l += ll + (dot ? 1 : 0);
	}
	q[len++] = 0;
	q[len++] = 0;
	q[len++] = DNS_TYPE_A;
	q[len++] = 0;
	q[len++] = DNS_CLASS_IN;
	ck_assert_int_eq(frame_build_udp(wmac, gmac, gip, 40000, wip, STACK_DNS_PORT, q, len, f, sizeof f, &n), 0);
	stack_input(s, f, n);
}

/* The guest's SYN from port 41000 to the gateway's port. */
static void send_syn(struct stack *s, uint16_t port)
{
	uint8_t f[54] = {0}, ph[12 + 20] = {0};
	uint8_t *ip = f + 14, *tcp = f + 34;

	memcpy(f, wmac, 6);
	memcpy(f + 6, gmac, 6);
	frame_put16(f + 12, 0x0800);
	ip[0] = 0x45;
	frame_put16(ip + 2, 40);
	ip[8] = 64;
	ip[9] = 6;
	memcpy(ip + 12, gip, 4);
	memcpy(ip + 16, wip, 4);
	frame_put16(ip + 10, frame_csum(ip, 20, 0));
	frame_put16(tcp, 41000);
	frame_put16(tcp + 2, port);
	frame_put16(tcp + 4, 0x1234);
	tcp[12] = 5 << 4;
	tcp[13] = FRAME_TCP_SYN;
	frame_put16(tcp + 14, 65535);
	memcpy(ph, gip, 4);
	memcpy(ph + 4, wip, 4);
	ph[9] = 6;
	frame_put16(ph + 10, 20);
	memcpy(ph + 12, tcp, 20);
	frame_put16(tcp + 16, frame_csum(ph, sizeof ph, 0));
	stack_input(s, f, sizeof f);
}

static const struct reply *find(uint16_t id)
{
	const struct reply *r = NULL;
	size_t i;

	pthread_mutex_lock(&seen_m);
	for (i = 0; i < nseen && !r; i++)
		if (seen[i].id == id)
			r = &seen[i];
	pthread_mutex_unlock(&seen_m);
	return r;
}

static size_t count(int rcode)
{
	size_t i, c = 0;

	pthread_mutex_lock(&seen_m);
	for (i = 0; i < nseen; i++)
		c += seen[i].rcode == rcode;
	pthread_mutex_unlock(&seen_m);
	return c;
}

/* Dispatch until the reply to id is in or ms passed. */
static const struct reply *wait_for(struct stack *s, uint16_t id, unsigned ms)
{
	uint64_t end = now_ms() + ms;
	const struct reply *r;

	while (!(r = find(id)) && now_ms() < end) {
		struct pollfd pfd = {.fd = stack_fd(s), .events = POLLIN};

		poll(&pfd, 1, 10);
		stack_dispatch(s);
	}
	return r;
}

static unsigned started_calls(void)
{
	unsigned c;

	pthread_mutex_lock(&gate_m);
	c = calls;
	pthread_mutex_unlock(&gate_m);
	return c;
}

static bool got_synack(void)
{
	bool r;

	pthread_mutex_lock(&seen_m);
	r = synack_ms != 0;
	pthread_mutex_unlock(&seen_m);
	return r;
}

static void reset_seen(void)
{
	pthread_mutex_lock(&seen_m);
	nseen = 0;
	synack_ms = 0;
	pthread_mutex_unlock(&seen_m);
	pthread_mutex_lock(&gate_m);
	gate_open = false;
	calls = 0;
	pthread_mutex_unlock(&gate_m);
}

START_TEST(slow_name_stalls_nothing)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sin;
	struct policy pol;
	struct audit au = {.fd = -1};
	struct stack_config cfg = {.policy = &pol, .audit = &au, .output = output, .resolve = resolve};
	const struct reply *slow, *fast, *priv, *none;
	struct stack_stats st;
	char rule[64], err[256];
	uint64_t t0;
	struct stack *s;
	int lfd, c;

	reset_seen();
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sin, sizeof sin), 0);
	ck_assert_int_eq(listen(lfd, 4), 0);
	ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sin, &sl), 0);
	policy_init(&pol, POLICY_MODE_PUBLIC);
	snprintf(rule, sizeof rule, "host.kbox.internal:%u", ntohs(sin.sin_port));
	ck_assert_int_eq(policy_add_rule(&pol, rule, err, sizeof err), 0);
	ck_assert_int_eq(stack_create(&cfg, &s), 0);

	t0 = now_ms();
	send_query(s, 1, "slow.test");
	send_query(s, 2, "fast.test");
	send_query(s, 3, "private.test");
	send_query(s, 4, "nosuch.test");
	send_syn(s, ntohs(sin.sin_port));
	fast = wait_for(s, 2, 1000);
	ck_assert_ptr_nonnull(fast);
	ck_assert_int_eq(fast->rcode, DNS_RCODE_NOERROR);
	ck_assert_uint_eq(fast->answers, 1);
	ck_assert_uint_lt(fast->at_ms - t0, SLOW_MS / 2);
	/* The rebinding filter and NXDOMAIN, unchanged. */
	priv = wait_for(s, 3, 1000);
	ck_assert_ptr_nonnull(priv);
	ck_assert_int_eq(priv->rcode, DNS_RCODE_REFUSED);
	none = wait_for(s, 4, 1000);
	ck_assert_ptr_nonnull(none);
	ck_assert_int_eq(none->rcode, DNS_RCODE_NXDOMAIN);
	/* The TCP connection opened (host connect, SYN-ACK) meanwhile. */
	while (!got_synack() && now_ms() < t0 + SLOW_MS - 200) {
		struct pollfd pfd = {.fd = stack_fd(s), .events = POLLIN};

		poll(&pfd, 1, 10);
		stack_dispatch(s);
	}
	stack_get_stats(s, &st);
	ck_assert_msg(got_synack(), "no SYN-ACK: tcp allowed %llu denied %llu failed %llu, frames %llu dropped %llu",
		      (unsigned long long)st.tcp_allowed, (unsigned long long)st.tcp_denied,
		      (unsigned long long)st.tcp_failed, (unsigned long long)st.frames_in,
		      (unsigned long long)st.frames_dropped);
	c = accept(lfd, NULL, NULL);
	ck_assert_int_ge(c, 0);
	ck_assert_ptr_null(find(1));
	stack_get_stats(s, &st);
	ck_assert_uint_eq(st.dns_inflight, 1);
	ck_assert_uint_eq(st.tcp_allowed, 1);

	/* The slow answer still comes, in its time. */
	slow = wait_for(s, 1, SLOW_MS + 2000);
	ck_assert_ptr_nonnull(slow);
	ck_assert_int_eq(slow->rcode, DNS_RCODE_NOERROR);
	ck_assert_uint_eq(slow->answers, 1);
	ck_assert_uint_ge(slow->at_ms - t0, SLOW_MS - 50);
	stack_get_stats(s, &st);
	ck_assert_uint_eq(st.dns_inflight, 0);
	ck_assert_uint_eq(st.dns_queries, 4);
	close(c);
	stack_destroy(s);
	close(lfd);
	policy_free(&pol);
}
END_TEST

static int all_answered(struct stack *s)
{
	struct stack_stats st;

	stack_get_stats(s, &st);
	return st.dns_inflight == 0;
}

START_TEST(inflight_bound)
{
	struct policy pol;
	struct audit au = {.fd = -1};
	struct stack_config cfg = {.policy = &pol, .audit = &au, .output = output, .resolve = resolve};
	struct stack_stats st;
	uint64_t end;
	uint16_t id = 1;
	struct stack *s;

	reset_seen();
	policy_init(&pol, POLICY_MODE_PUBLIC);
	ck_assert_int_eq(stack_create(&cfg, &s), 0);
	/* The rate cap lets STACK_DNS_BURST through at once and refills, so
	 * keep asking until the bound, not the rate, refuses. */
	end = now_ms() + 4000 + 1000 * STACK_DNS_INFLIGHT / STACK_DNS_PER_SEC;
	for (;;) {
		send_query(s, id++, "gate.test");
		stack_get_stats(s, &st);
		if (st.dns_busy_refused > 0 || now_ms() > end)
			break;
		if (st.dns_rate_refused > 0)
			usleep(20000);
	}
	ck_assert_uint_eq(st.dns_busy_refused, 1);
	ck_assert_uint_eq(st.dns_inflight, STACK_DNS_INFLIGHT);
	ck_assert_uint_eq(count(DNS_RCODE_NOERROR), 0);
	ck_assert_uint_eq(count(DNS_RCODE_REFUSED), (size_t)(st.dns_rate_refused + 1));
	/* Every other name still waits behind the gate's workers: that is
	 * the price of STACK_DNS_WORKERS.  Open it: all answered. */
	pthread_mutex_lock(&gate_m);
	ck_assert_uint_le(calls, STACK_DNS_WORKERS);
	gate_open = true;
	pthread_cond_broadcast(&gate_c);
	pthread_mutex_unlock(&gate_m);
	end = now_ms() + 5000;
	while (!all_answered(s) && now_ms() < end) {
		struct pollfd pfd = {.fd = stack_fd(s), .events = POLLIN};

		poll(&pfd, 1, 10);
		stack_dispatch(s);
	}
	ck_assert(all_answered(s));
	ck_assert_uint_eq(count(DNS_RCODE_NOERROR), STACK_DNS_INFLIGHT);
	stack_destroy(s);
	policy_free(&pol);
}
END_TEST

START_TEST(destroy_while_resolving)
{
	struct policy pol;
	struct audit au = {.fd = -1};
	struct stack_config cfg = {.policy = &pol, .audit = &au, .output = output, .resolve = resolve};
	struct stack *s;
	uint64_t t0;
	uint16_t i;

	reset_seen();
	policy_init(&pol, POLICY_MODE_PUBLIC);
	ck_assert_int_eq(stack_create(&cfg, &s), 0);
	/* More slow questions than workers: some run, the rest queue. */
	for (i = 1; i <= 2 * STACK_DNS_WORKERS; i++)
		send_query(s, i, "slow.test");
	t0 = now_ms() + 2000;
	while (started_calls() < STACK_DNS_WORKERS && now_ms() < t0)
		usleep(5000);
	ck_assert_uint_eq(started_calls(), STACK_DNS_WORKERS);
	t0 = now_ms();
	stack_destroy(s);
	/* Waited for the calls under way (one round), not for the queue. */
	ck_assert_uint_ge(now_ms() - t0, SLOW_MS / 2);
	ck_assert_uint_lt(now_ms() - t0, 2 * SLOW_MS);
	ck_assert_uint_eq(nseen, 0);
	/* The threads serve the next stack. */
	ck_assert_int_eq(stack_create(&cfg, &s), 0);
	send_query(s, 7, "fast.test");
	ck_assert_ptr_nonnull(wait_for(s, 7, 2000));
	stack_destroy(s);
	policy_free(&pol);
}
END_TEST

Suite *stack_dns_suite(void)
{
	return unit_suite_fixture("stack_dns", "core", NULL, NULL, 30,
				  slow_name_stalls_nothing, inflight_bound,
				  destroy_while_resolving);
}
