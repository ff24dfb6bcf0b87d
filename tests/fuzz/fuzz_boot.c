/* libFuzzer target for the kernel loader: any bytes as a kernel image
 * against a small guest RAM.  A refusal must be a known errno with a
 * message; a loaded image must lie inside RAM above the boot area with its
 * entry inside it, and the initrd and zero page must then go in cleanly. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/core/boot.h"

#define RAM_SIZE (32u << 20)

static void check(int ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Allocated once: a fresh 32 MiB per input would dominate the run. */
	static uint8_t *ram;
	static struct guest_mem gm;
	static const uint8_t initrd[3000] = { '0', '7', '0', '7', '0', '1' };
	if (!ram) {
		ram = calloc(1, RAM_SIZE);
		check(ram && guest_mem_add_region(&gm, 0, RAM_SIZE, ram) == 0);
	}

	struct boot_image k;
	char err[256];
	err[0] = '\0';
	int rc = boot_load_kernel(&gm, data, size, &k, err, sizeof err);
	if (rc < 0) {
		check(rc == -ENOEXEC || rc == -EINVAL || rc == -ENOMEM);
		check(err[0] != '\0' && memchr(err, '\0', sizeof err) != NULL);
		return 0;
	}
	check(rc == 0);
	check(k.kind == BOOT_ELF || k.kind == BOOT_BZIMAGE);
	check(k.load_start >= BOOT_HIMEM_START && k.load_start < k.load_end);
	check(guest_mem_ptr(&gm, k.load_start, k.load_end - k.load_start) != NULL);
	check(k.entry >= k.load_start && k.entry < k.load_end);
	check(k.setup_hdr_len <= sizeof k.setup_hdr);

	uint64_t at = 0;
	rc = boot_place_initrd(&gm, &k, initrd, sizeof initrd, &at, err, sizeof err);
	if (rc == 0) {
		check((at & 0xfff) == 0 && at >= k.load_end);
		check(at + sizeof initrd <= (uint64_t)k.initrd_max + 1);
		check(memcmp(ram + at, initrd, sizeof initrd) == 0);
	} else {
		check(rc == -ENOMEM && err[0] != '\0');
		at = 0;
	}

	struct boot_setup s = { .low_ram = RAM_SIZE, .cmdline = "console=ttyS0 reboot=k panic=-1",
				.initrd_addr = at, .initrd_len = rc == 0 ? sizeof initrd : 0 };
	rc = boot_write_params(&gm, &k, &s, err, sizeof err);
	check(rc == 0 || (rc == -E2BIG && k.cmdline_max < strlen(s.cmdline)));
	return 0;
}
