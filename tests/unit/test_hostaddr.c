/* The host's own addresses by route look-up (netstack/hostaddr.h),
 * against the real kernel: in a network namespace this test makes (Check
 * runs each test in its own child, so the namespace dies with it), with
 * addresses added and removed while the socket is open, hundreds of
 * them, and a "local" route that no interface lists.  Needs root; says
 * so and passes without it. */
#include <check.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lwip/tcpip.h"
#include "netstack/hostaddr.h"
#include "vmm/sandbox/lockdown.h"
#include "tests/lib/unit_suite.h"

static struct policy_addr A(const char *s)
{
	struct policy_addr a;
	ck_assert_msg(policy_addr_parse(s, &a) == 0, "address %s", s);
	return a;
}

static bool local(struct hostaddr *h, const char *s)
{
	struct policy_addr a = A(s);
	return hostaddr_is_local(h, &a);
}

static void sh(const char *cmd)
{
	ck_assert_msg(system(cmd) == 0, "%s", cmd);
}

static bool own_namespace(void)
{
	if (geteuid() != 0 || unshare(CLONE_NEWNET) < 0) {
		printf("skip hostaddr: needs root to make a network namespace\n");
		return false;
	}
	sh("ip link set lo up");
	return true;
}

START_TEST(addresses_as_they_are_now)
{
	struct hostaddr h;
	if (!own_namespace())
		return;
	ck_assert_int_eq(hostaddr_open(&h), 0);
	ck_assert(local(&h, "127.0.0.1"));
	ck_assert(local(&h, "127.255.0.9"));
	ck_assert(!local(&h, "5.5.5.5")); /* no route at all */
	sh("ip addr add 5.5.5.5/32 dev lo");
	ck_assert(local(&h, "5.5.5.5"));
	ck_assert(!local(&h, "5.5.5.6"));
	/* on the loopback interface the whole prefix is delivered here
	 * (no list of addresses would show 5.8.0.2) */
	sh("ip addr add 5.8.0.1/24 dev lo");
	ck_assert(local(&h, "5.8.0.2"));
	/* on another interface its neighbours are not ours, its broadcast
	 * address is */
	sh("ip link add kbha0 type veth peer name kbha1 && ip addr add 5.8.1.1/24 brd + dev kbha0 && "
	   "ip link set kbha0 up && ip link set kbha1 up");
	ck_assert(local(&h, "5.8.1.1"));
	ck_assert(!local(&h, "5.8.1.2"));
	ck_assert(local(&h, "5.8.1.255"));
	/* hundreds of them: no list to overflow */
	sh("for i in $(seq 300); do echo addr add 5.6.$((i / 256)).$((i % 256))/32 dev lo; done | ip -batch -");
	ck_assert(local(&h, "5.6.0.1"));
	ck_assert(local(&h, "5.6.0.65"));
	ck_assert(local(&h, "5.6.1.44")); /* the 300th */
	/* a local route no interface lists (AnyIP) */
	sh("ip route add local 5.9.0.0/16 dev lo");
	ck_assert(local(&h, "5.9.3.3"));
	/* removed again */
	sh("ip addr del 5.5.5.5/32 dev lo");
	ck_assert(!local(&h, "5.5.5.5"));
	/* IPv4 installs the route before `ip` returns: the very next
	 * question sees it, every time */
	for (int i = 0; i < 30; i++) {
		sh("ip addr add 5.5.5.9/32 dev lo");
		ck_assert_msg(local(&h, "5.5.5.9"), "round %d: added, not seen", i);
		sh("ip addr del 5.5.5.9/32 dev lo");
		ck_assert_msg(!local(&h, "5.5.5.9"), "round %d: removed, still seen", i);
	}
	/* a default route makes everything else routable, not local */
	sh("ip route add default via 5.8.1.2");
	ck_assert(!local(&h, "8.8.8.8"));
	ck_assert(local(&h, "5.6.0.70"));
	ck_assert(h.failed == 0);
	ck_assert(h.asked >= 15);
	hostaddr_close(&h);
	/* closed: cannot tell, so the host's (fail closed) */
	ck_assert(local(&h, "8.8.8.8"));
}
END_TEST

START_TEST(ipv6)
{
	struct hostaddr h;
	if (!own_namespace())
		return;
	if (access("/proc/net/if_inet6", F_OK) != 0) {
		printf("skip hostaddr ipv6: no IPv6 in this kernel\n");
		return;
	}
	ck_assert_int_eq(hostaddr_open(&h), 0);
	sh("ip -6 addr add 2001:db8::5/128 dev lo nodad");
	/* IPv6 installs an address's local route from a work queue, a few
	 * milliseconds after `ip` returns (until then the kernel would not
	 * deliver to it either). */
	bool seen = false;
	for (int i = 0; i < 200 && !seen; i++) {
		seen = local(&h, "2001:db8::5");
		if (!seen)
			usleep(10000);
	}
	ck_assert(seen);
	ck_assert(!local(&h, "2001:db8::6"));
	ck_assert(h.failed == 0);
	hostaddr_close(&h);
}
END_TEST

/* kbox run opens the socket before lockdown_apply and asks on it after:
 * the look-up must need nothing the lock-down refuses (a refused call
 * would stop this child with SIGSYS).  Ends with _exit, since exit()'s
 * leak check makes calls the lock-down refuses; an assertion that fails
 * after the lock-down shows as SIGSYS, for the same reason. */
START_TEST(under_the_lockdown)
{
	struct hostaddr h;
	char err[256] = "";
	struct lockdown_cfg c = { .network = true };
	const char *fork_mode = getenv("CK_FORK");

	if (fork_mode && strcmp(fork_mode, "no") == 0) {
		printf("skip hostaddr under the lock-down: CK_FORK=no would lock the runner down\n");
		_exit(0);
	}
	ck_assert_int_eq(hostaddr_open(&h), 0);
	tcpip_init(NULL, NULL); /* lwIP's thread, as netdev_attach leaves it */
	ck_assert_msg(lockdown_apply(&c, err, sizeof err) == 0, "%s", err);
	ck_assert(local(&h, "127.0.0.1"));
	(void)local(&h, "192.0.2.1"); /* routed or not, but answered */
	ck_assert_msg(h.failed == 0, "%llu look-ups failed under the lock-down",
		      (unsigned long long)h.failed);
	/* Not _exit: ASan's hook before a noreturn call makes a call the
	 * lock-down refuses (sigaltstack); kbox itself runs without ASan. */
	syscall(SYS_exit_group, 0);
}
END_TEST

Suite *hostaddr_suite(void)
{
	Suite *s = suite_create("hostaddr");

	unit_suite_case_fixture(s, "core", NULL, NULL, 20, addresses_as_they_are_now,
				ipv6);
	TCase *tc = tcase_create("lockdown");
	tcase_set_timeout(tc, 20);
	tcase_add_exit_test(tc, under_the_lockdown, 0);
	suite_add_tcase(s, tc);
	return s;
}
