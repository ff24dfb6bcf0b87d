/* The pure parts of the lock-down: the refusal report, the Landlock
 * rights per kind of path and ABI, the setuid check.  Applying the
 * lock-down itself is proven on the real binary by tests/lockdown/run.sh
 * (a sanitizer's run-time would not survive the allowlist). */
#include <check.h>
#include <string.h>

#include <linux/landlock.h>

#include "vmm/sandbox/lockdown.h"
#include "tests/lib/unit_suite.h"

START_TEST(refusal_names_call_and_request)
{
	char b[256];
	size_t n = lockdown_format_refusal(b, sizeof b, 59, "execve", false, 0);
	ck_assert_uint_lt(n, sizeof b);
	ck_assert_int_eq(b[n - 1], '\n');
	b[n] = '\0';
	ck_assert_ptr_nonnull(strstr(b, "kbox: lock-down: system call 59 (execve) is not allowed"));
	ck_assert_ptr_null(strstr(b, "request"));

	n = lockdown_format_refusal(b, sizeof b, 16, "ioctl", true, 0xae80);
	b[n] = '\0';
	ck_assert_ptr_nonnull(strstr(b, "system call 16 (ioctl) request 0xae80 is"));

	n = lockdown_format_refusal(b, sizeof b, 999, NULL, false, 0);
	b[n] = '\0';
	ck_assert_ptr_nonnull(strstr(b, "system call 999 is not allowed"));

	n = lockdown_format_refusal(b, sizeof b, -1, "", false, 0);
	b[n] = '\0';
	ck_assert_ptr_nonnull(strstr(b, "system call -1 is not allowed"));
}
END_TEST

START_TEST(refusal_never_overflows)
{
	char b[64];
	for (size_t len = 0; len <= 40; len++) {
		memset(b, 'x', sizeof b);
		size_t n = lockdown_format_refusal(b, len, 123456, "a_long_system_call_name", true,
						   ~0ul);
		ck_assert_uint_le(n, len);
		if (len)
			ck_assert_int_eq(b[n - 1], '\n');
		ck_assert_int_eq(b[len], 'x');
	}
}
END_TEST

START_TEST(landlock_rights_follow_the_abi)
{
	ck_assert_uint_eq(lockdown_ll_handled(0), 0);
	ck_assert_uint_eq(lockdown_ll_access(0, LD_MOUNT_RW), 0);
	/* ABI 1 knows neither REFER nor TRUNCATE: asking for them would make
	 * landlock_add_rule fail with EINVAL. */
	uint64_t v1 = lockdown_ll_handled(1);
	ck_assert(!(v1 & LANDLOCK_ACCESS_FS_REFER));
	ck_assert(!(lockdown_ll_access(1, LD_MOUNT_RW) & LANDLOCK_ACCESS_FS_REFER));
	ck_assert(lockdown_ll_access(2, LD_MOUNT_RW) & LANDLOCK_ACCESS_FS_REFER);
	ck_assert(!(lockdown_ll_handled(2) & (1ULL << 14)));
	ck_assert(lockdown_ll_handled(3) & (1ULL << 14));   /* TRUNCATE */
	ck_assert(!(lockdown_ll_handled(4) & (1ULL << 15)));
	ck_assert(lockdown_ll_handled(5) & (1ULL << 15));   /* IOCTL_DEV */
	for (int abi = 1; abi <= 8; abi++)
		for (int k = LD_MOUNT_RW; k <= LD_RESOLVER_FILE; k++)
			ck_assert_uint_eq(lockdown_ll_access(abi, k) & ~lockdown_ll_handled(abi), 0);
}
END_TEST

START_TEST(landlock_rights_are_narrow)
{
	const uint64_t write = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_FILE |
			       LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
			       LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_SYM |
			       LANDLOCK_ACCESS_FS_REFER | (1ULL << 14);
	const uint64_t never = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
			       LANDLOCK_ACCESS_FS_MAKE_BLOCK | (1ULL << 15);
	/* FIFOs and sockets: in read-write mounts only. */
	const uint64_t nodes = LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO;
	for (int k = LD_MOUNT_RW; k <= LD_RESOLVER_FILE; k++) {
		ck_assert_uint_eq(lockdown_ll_access(7, k) & never, 0);
		ck_assert_uint_eq(lockdown_ll_access(7, k) & nodes, k == LD_MOUNT_RW ? nodes : 0);
	}
	ck_assert_uint_eq(lockdown_ll_access(7, LD_MOUNT_RO) & write, 0);
	ck_assert_uint_eq(lockdown_ll_access(7, LD_RESOLVER_FILE), LANDLOCK_ACCESS_FS_READ_FILE);
	ck_assert_uint_eq(lockdown_ll_access(7, LD_LOG_FILE), LANDLOCK_ACCESS_FS_WRITE_FILE);
	ck_assert(lockdown_ll_access(7, LD_MOUNT_RW) & LANDLOCK_ACCESS_FS_WRITE_FILE);
	/* The sandbox dir is emptied, never written: its files exist
	 * before lock-down. */
	ck_assert_uint_eq(lockdown_ll_access(7, LD_SANDBOX_DIR) &
				  (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_MAKE_REG |
				   LANDLOCK_ACCESS_FS_READ_FILE),
			  0);
	ck_assert_uint_eq(lockdown_ll_access(7, LD_RUNTIME_DIR), LANDLOCK_ACCESS_FS_REMOVE_DIR);
}
END_TEST

START_TEST(setuid_start_is_detected)
{
	ck_assert_int_eq(lockdown_ids_differ(1000, 1000, 1000, 1000), 0);
	ck_assert_int_eq(lockdown_ids_differ(1000, 0, 1000, 1000), 1);
	ck_assert_int_eq(lockdown_ids_differ(1000, 1000, 1000, 0), 1);
	ck_assert_int_eq(lockdown_ids_differ(0, 0, 0, 0), 0);
}
END_TEST

Suite *lockdown_suite(void)
{
	return unit_suite("lockdown", "core", refusal_names_call_and_request,
			  refusal_never_overflows,
			  landlock_rights_follow_the_abi,
			  landlock_rights_are_narrow, setuid_start_is_detected);
}
