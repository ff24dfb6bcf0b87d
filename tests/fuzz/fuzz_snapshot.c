/* libFuzzer target for the snapshot loader's checks (snapshot_file_parse): any
 * bytes as a snapshot's metadata.  The first byte chooses whether the
 * checksum is made good first (most inputs) so the structural checks are
 * reached, and how the file's size relates to the header's RAM fields.
 * An accepted file must keep every promise the loader relies on: sections
 * and records inside the metadata, every required record present at its
 * exact size, a CPU section per vCPU, RAM ending the file. */
#include <errno.h>
#include <linux/kvm.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/core/snapshot_file.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static volatile uint8_t sink;

/* Touch every byte of a record, so ASan sees any that lies outside. */
static void touch(const uint8_t *d, uint32_t n)
{
	uint8_t x = 0;
	for (uint32_t i = 0; i < n; i++)
		x ^= d[i];
	sink = x;
}

static void need(const struct snapshot_file_sec *s, uint32_t tag, uint32_t len)
{
	const uint8_t *d;
	uint32_t n;
	check(snapshot_file_rec(s, tag, &d, &n) == 0 && n == len);
	touch(d, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1u << 20))
		return 0;
	uint8_t mode = data[0];
	size_t len = size - 1;
	uint8_t *meta = malloc(len ? len : 1);
	check(meta != NULL);
	memcpy(meta, data + 1, len);
	if (!(mode & 1))
		snapshot_file_seal(meta, len);
	uint64_t fsize = (uint64_t)mode << 12;
	if (!(mode & 2) && len >= SNAPSHOT_FILE_HDR_LEN) {
		uint64_t off = statebuf_le64(meta + 32), ram = statebuf_le64(meta + 40);
		fsize = off + ram >= off ? off + ram : 0;
	}
	struct snapshot_file_view v;
	char err[256] = "";
	int rc = snapshot_file_parse(meta, len, fsize, &v, err, sizeof err);
	if (rc < 0) {
		check(rc == -EBADMSG || rc == -EPROTO);
		check(err[0] != 0);
		free(meta);
		return 0;
	}
	check(v.meta_len == len && v.ram_off >= len && v.ram_off % SNAPSHOT_FILE_PAGE == 0);
	check(v.ram_len == v.layout.ram_size && v.ram_off + v.ram_len == fsize);
	check(v.layout.ncpus >= 1 && v.layout.ncpus <= SNAPSHOT_FILE_MAX_CPUS);
	check(v.layout.low_ram <= v.layout.ram_size);
	for (unsigned i = 0; i < v.nsec; i++) {
		const struct snapshot_file_sec *s = &v.sec[i];
		check(s->data >= meta && s->len <= len && (size_t)(s->data - meta) <= len - s->len);
		touch(s->data, (uint32_t)s->len);
	}
	const struct snapshot_file_sec *vs = snapshot_file_find(&v, SNAPSHOT_FILE_SEC_VM, 0);
	check(vs != NULL);
	need(vs, SNAPSHOT_FILE_V_CLOCK, sizeof(struct kvm_clock_data));
	need(vs, SNAPSHOT_FILE_V_PIT2, sizeof(struct kvm_pit_state2));
	need(vs, SNAPSHOT_FILE_V_IOAPIC, sizeof(((struct kvm_irqchip *)0)->chip));
	for (unsigned c = 0; c < v.layout.ncpus; c++) {
		const struct snapshot_file_sec *s = snapshot_file_find(&v, SNAPSHOT_FILE_SEC_CPU, c);
		check(s != NULL);
		need(s, SNAPSHOT_FILE_C_REGS, sizeof(struct kvm_regs));
		need(s, SNAPSHOT_FILE_C_SREGS, sizeof(struct kvm_sregs));
		need(s, SNAPSHOT_FILE_C_LAPIC, sizeof(struct kvm_lapic_state));
		need(s, SNAPSHOT_FILE_C_EVENTS, sizeof(struct kvm_vcpu_events));
		const uint8_t *d;
		uint32_t n;
		check(snapshot_file_rec(s, SNAPSHOT_FILE_C_MSRS, &d, &n) == 0 && n && n % 16 == 0 &&
		      n <= SNAPSHOT_FILE_MAX_MSRS * 16);
		touch(d, n);
		check(snapshot_file_rec(s, SNAPSHOT_FILE_C_CPUID, &d, &n) == 0 && n &&
		      n % sizeof(struct kvm_cpuid_entry2) == 0);
		touch(d, n);
		int fpu = snapshot_file_rec(s, SNAPSHOT_FILE_C_FPU, &d, &n) == 0;
		int xs = snapshot_file_rec(s, SNAPSHOT_FILE_C_XSAVE, &d, &n) == 0;
		check(fpu != xs);
		if (xs)
			check(n >= sizeof(struct kvm_xsave) && n % 64 == 0);
	}
	check(snapshot_file_find(&v, SNAPSHOT_FILE_SEC_CPU, v.layout.ncpus) == NULL);
	for (unsigned i = 0; i < v.nsec; i++)
		if (v.sec[i].type == SNAPSHOT_FILE_SEC_DEV) {
			const uint8_t *d;
			uint32_t n;
			check(snapshot_file_rec(&v.sec[i], SNAPSHOT_FILE_D_NAME, &d, &n) == 0 && n >= 1 && n <= 31);
			check(snapshot_file_rec(&v.sec[i], SNAPSHOT_FILE_D_BLOB, &d, &n) == 0 &&
			      n <= SNAPSHOT_FILE_MAX_DEV_BLOB);
			touch(d, n);
		}
	free(meta);
	return 0;
}
