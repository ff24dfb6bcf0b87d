/* The netstack on a TAP device, for tests/net/run.sh: the other end of
 * the TAP is a network namespace where real programs play the guest.
 *
 *   harness --tap NAME --audit FILE [--mode M] [--allow R]... [--deny R]...
 *           [--resolve NAME=A.B.C.D]... [--forward [ADDR:]HOSTPORT:GUESTPORT]...
 *           [--add-host NAME:ADDR]... [--learn FILE]
 *           [--lifetime SECONDS] [--gso on|off] [--buf-cap BYTES]
 *           [--secret-conf FILE] [--tls-intercept all|secrets] [--tls-bypass NAME]...
 *           [--tls-extra-ca FILE] [--ca-dir DIR]
 *
 * Prints "forward ADDR:PORT GUESTPORT" for each forwarded port (as bound)
 * and "ready" once the TAP exists, then serves until SIGTERM/SIGINT or
 * the lifetime (default 150 s) ends, and prints its counters to stdout.
 * The resolver is a fixed table (names not in it get NXDOMAIN): the test
 * never asks a real DNS server.
 *
 * The TAP carries a virtio_net_hdr before each frame (IFF_VNET_HDR), so
 * with --gso on (the default) the stack's merged TCP segments go to the
 * namespace's kernel as one large frame each (lib/gso.h), as they go
 * to a guest's virtio-net driver.  No offload is enabled for the other
 * direction (TUNSETOFFLOAD): the kernel sends us plain, checksummed
 * frames of at most the MTU, which is what lwIP's MSS expects. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "netstack/audit.h"
#include "netstack/dns.h"
#include "netstack/hostaddr.h"
#include "netstack/intercept.h"
#include "netstack/policy.h"
#include "netstack/stack.h"
#include "tests/net/tap.h"
#include "vmm/sandbox/tlsconf.h"

#define MAX_TABLE 64

struct entry {
	char name[POLICY_NAME_MAX + 1];
	struct policy_addr addr;
};

static struct entry table[MAX_TABLE];
static size_t ntable;
static volatile sig_atomic_t stop;
static int tap_fd = -1;
static unsigned long tap_drops;

static void on_signal(int sig)
{
	stop = 1;
}

static void tap_out_gso(void *ctx, const struct gso_hdr *h, const uint8_t *frame, size_t len)
{
	struct iovec iov[2] = {{.iov_base = (void *)h, .iov_len = sizeof *h}, {.iov_base = (void *)frame, .iov_len = len}};

	/* The kernel queues the frame or drops it; TCP recovers from drops. */
	if (writev(tap_fd, iov, 2) != (ssize_t)(sizeof *h + len))
		tap_drops++;
}

static void tap_out(void *ctx, const uint8_t *frame, size_t len)
{
	static const struct gso_hdr none;

	tap_out_gso(ctx, &none, frame, len);
}

static int resolve(void *ctx, const char *name, uint16_t qtype, struct dns_rr *out, size_t max, size_t *n)
{
	size_t i;
	int found = 0;

	*n = 0;
	/* What reached "upstream", for the tests that check what never may. */
	printf("resolve %s\n", name);
	fflush(stdout);
	for (i = 0; i < ntable; i++) {
		if (strcmp(table[i].name, name) != 0)
			continue;
		found = 1;
		if ((qtype == DNS_TYPE_A) != (table[i].addr.family == 4) || *n == max)
			continue;
		out[*n].addr = table[i].addr;
		out[*n].ttl = 60;
		(*n)++;
	}
	return found ? DNS_RCODE_NOERROR : DNS_RCODE_NXDOMAIN;
}

static void usage(void)
{
	fprintf(stderr, "usage: harness --tap NAME --audit FILE [--mode M] [--allow R]... [--deny R]...\n"
			"               [--resolve NAME=ADDR]... [--forward [ADDR:]HOSTPORT:GUESTPORT]...\n"
			"               [--add-host NAME:ADDR]... [--learn FILE]\n"
			"               [--lifetime SECONDS] [--gso on|off] [--buf-cap BYTES]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *tap = NULL, *audit_path = NULL, *learn_path = NULL;
	static const char *const modes[] = {"none", "public", "allowlist"};
	struct audit_learn learn;
	char err[256], ifname[16];
	struct stack_config cfg;
	struct stack_stats st;
	struct audit au;
	struct policy pol;
	struct stack *s;
	enum policy_mode mode = POLICY_MODE_PUBLIC;
	long lifetime = 150;
	int gso = 1;
	unsigned long long buf_cap = 0; /* 0: the stack's default */
	time_t end;
	static uint8_t buf[65536];
	struct stack_forward fwd[STACK_MAX_FORWARDS];
	static struct stack_host hosts[STACK_MAX_HOSTS];
	size_t nhosts = 0;
	size_t nfwd = 0, j;
	int i, r;
	/* TLS interception, as kbox run sets it up (vmm/sandbox/tlsconf.c). */
	static struct tlsconf tls;
	static struct hostaddr ha;

	policy_init(&pol, POLICY_MODE_PUBLIC);
	tlsconf_init(&tls);
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage();
		i++;
		if (strcmp(a, "--tap") == 0) {
			tap = v;
		} else if (strcmp(a, "--audit") == 0) {
			audit_path = v;
		} else if (strcmp(a, "--mode") == 0) {
			if (policy_parse_mode(v, &mode) < 0)
				usage();
		} else if (strcmp(a, "--allow") == 0 || strcmp(a, "--deny") == 0) {
			char rule[512];

			snprintf(rule, sizeof rule, "%s:%s", a + 2, v);
			if (policy_add_rule(&pol, rule, err, sizeof err) < 0) {
				fprintf(stderr, "harness: %s: %s\n", v, err);
				return 2;
			}
		} else if (strcmp(a, "--resolve") == 0) {
			const char *eq = strchr(v, '=');

			if (!eq || ntable == MAX_TABLE || (size_t)(eq - v) > POLICY_NAME_MAX)
				usage();
			memcpy(table[ntable].name, v, (size_t)(eq - v));
			table[ntable].name[eq - v] = '\0';
			if (policy_addr_parse(eq + 1, &table[ntable].addr) < 0)
				usage();
			ntable++;
		} else if (strcmp(a, "--forward") == 0) {
			if (nfwd == STACK_MAX_FORWARDS || stack_forward_parse(v, &fwd[nfwd], err, sizeof err) < 0) {
				fprintf(stderr, "harness: %s\n", err);
				return 2;
			}
			nfwd++;
		} else if (strcmp(a, "--add-host") == 0) {
			if (nhosts == STACK_MAX_HOSTS || stack_host_parse(v, &hosts[nhosts], err, sizeof err) < 0) {
				fprintf(stderr, "harness: %s\n", err);
				return 2;
			}
			nhosts++;
		} else if (strcmp(a, "--learn") == 0) {
			learn_path = v;
		} else if (strcmp(a, "--secret-conf") == 0) {
			tls.secrets_path = v;
		} else if (strcmp(a, "--tls-extra-ca") == 0) {
			tls.extra_ca = v;
		} else if (strcmp(a, "--ca-dir") == 0) {
			tls.ca_dir = v;
		} else if (strcmp(a, "--tls-intercept") == 0) {
			if (tlsconf_set_scope(&tls, v, err, sizeof err) < 0) {
				fprintf(stderr, "harness: %s\n", err);
				return 2;
			}
		} else if (strcmp(a, "--tls-bypass") == 0) {
			if (tlsconf_add_bypass(&tls, v, err, sizeof err) < 0) {
				fprintf(stderr, "harness: %s\n", err);
				return 2;
			}
		} else if (strcmp(a, "--lifetime") == 0) {
			lifetime = atol(v);
		} else if (strcmp(a, "--gso") == 0) {
			gso = strcmp(v, "off") != 0;
		} else if (strcmp(a, "--buf-cap") == 0) {
			buf_cap = strtoull(v, NULL, 10);
		} else {
			usage();
		}
	}
	if (!tap || !audit_path)
		usage();
	pol.mode = mode;
	/* The host's own addresses, as kbox run judges them (vmm/sandbox/netdev.c). */
	if ((r = hostaddr_open(&ha)) < 0) {
		fprintf(stderr, "harness: setup: %s\n", strerror(-r));
		return 1;
	}
	policy_set_host_fn(&pol, hostaddr_pol_host, &ha);
	if (audit_open(&au, audit_path, err, sizeof err) < 0) {
		fprintf(stderr, "harness: %s\n", err);
		return 1;
	}
	tap_fd = tap_open(tap, (int)sizeof(struct gso_hdr), ifname, sizeof ifname);
	if (tap_fd < 0) {
		fprintf(stderr, "harness: tap %s: %s\n", tap, strerror(-tap_fd));
		return 1;
	}
	memset(&cfg, 0, sizeof cfg);
	cfg.policy = &pol;
	cfg.audit = &au;
	cfg.output = tap_out;
	if (gso)
		cfg.output_gso = tap_out_gso;
	cfg.resolve = resolve;
	cfg.hosts = hosts;
	cfg.nhosts = nhosts;
	audit_learn_init(&learn);
	cfg.learn = learn_path ? &learn : NULL;
	cfg.connect_timeout_ms = 3000;
	cfg.buf_cap = (size_t)buf_cap;
	if (tlsconf_active(&tls)) {
		char msg[512];

		if (!tls.ca_dir) {
			fprintf(stderr, "harness: interception needs --ca-dir\n");
			return 2;
		}
		if (tlsconf_load(&tls, msg, sizeof msg) < 0) {
			fprintf(stderr, "harness: interception: %s\n", msg);
			return 2;
		}
		cfg.icpt = tlsconf_icpt(&tls);
	}
	r = stack_create(&cfg, &s);
	if (r < 0) {
		fprintf(stderr, "harness: stack_create: %s\n", strerror(-r));
		return 1;
	}
	for (j = 0; j < nfwd; j++) {
		char ip[64];

		policy_addr_format(&fwd[j].host, ip, sizeof ip);
		if ((r = stack_forward_add(s, &fwd[j])) < 0) {
			fprintf(stderr, "harness: forward %s:%u: %s\n", ip, fwd[j].host_port, strerror(-r));
			return 1;
		}
		printf("forward %s:%u %u\n", ip, fwd[j].host_port, fwd[j].guest_port);
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	printf("ready %s\n", ifname);
	fflush(stdout);
	end = time(NULL) + lifetime;
	while (!stop && time(NULL) < end) {
		struct pollfd pfd[2] = {{.fd = tap_fd, .events = POLLIN}, {.fd = stack_fd(s), .events = POLLIN}};
		int k;

		if (poll(pfd, 2, 200) < 0)
			continue;
		/* Bounded batches, so neither side starves the other. */
		for (k = 0; k < 256; k++) {
			ssize_t n = read(tap_fd, buf, sizeof buf);

			if (n < 0 && errno != EAGAIN && errno != EINTR) {
				fprintf(stderr, "harness: tap read: %s\n", strerror(errno));
				stop = 1; /* the device is gone */
			}
			if (n <= 0)
				break;
			/* Nothing asked for offloads this way: a header that
			 * wants one is not ours to honour. */
			if ((size_t)n < sizeof(struct gso_hdr) || (buf[0] & GSO_F_NEEDS_CSUM) || buf[1] != GSO_TYPE_NONE)
				continue;
			stack_input(s, buf + sizeof(struct gso_hdr), (size_t)n - sizeof(struct gso_hdr));
		}
		stack_dispatch(s);
	}
	stack_get_stats(s, &st);
	printf("stats frames_in=%llu dropped=%llu tcp_allowed=%llu tcp_denied=%llu tcp_failed=%llu dns=%llu "
	       "to_host=%llu to_guest=%llu fwd_accepted=%llu fwd_refused=%llu udp_refused=%llu dns_rate_refused=%llu dns_busy_refused=%llu flows=%zu tap_drops=%lu\n",
	       (unsigned long long)st.frames_in, (unsigned long long)st.frames_dropped,
	       (unsigned long long)st.tcp_allowed, (unsigned long long)st.tcp_denied,
	       (unsigned long long)st.tcp_failed, (unsigned long long)st.dns_queries,
	       (unsigned long long)st.bytes_to_host, (unsigned long long)st.bytes_to_guest,
	       (unsigned long long)st.fwd_accepted, (unsigned long long)st.fwd_refused,
	       (unsigned long long)st.udp_refused, (unsigned long long)st.dns_rate_refused,
	       (unsigned long long)st.dns_busy_refused, st.flows, tap_drops);
	printf("stats tls_intercepted=%llu tls_refused=%llu buffered=%zu buffered_peak=%zu\n",
	       (unsigned long long)st.tls_intercepted, (unsigned long long)st.tls_refused, st.buffered,
	       st.buffered_peak);
	fflush(stdout);
	stack_destroy(s);
	tlsconf_free(&tls);
	if (learn_path) {
		int fd = open(learn_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		if (fd < 0 || audit_learn_write(&learn, modes[mode], fd) < 0)
			fprintf(stderr, "harness: cannot write %s\n", learn_path);
		if (fd >= 0)
			close(fd);
	}
	audit_learn_free(&learn);
	close(tap_fd);
	audit_close(&au);
	policy_free(&pol);
	hostaddr_close(&ha);
	return 0;
}
