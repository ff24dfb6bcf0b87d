#include "vmm/core/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#include "lib/errbuf.h"
#include "vmm/core/boot.h"

#define MSR_IA32_TSC 0x10u

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static const struct {
	int cap;
	const char *name;
	int needed;
} caps[] = {
	{ KVM_CAP_IMMEDIATE_EXIT, "IMMEDIATE_EXIT", 1 },
	{ KVM_CAP_VCPU_EVENTS, "VCPU_EVENTS", 1 },
	{ KVM_CAP_DEBUGREGS, "DEBUGREGS", 1 },
	{ KVM_CAP_MP_STATE, "MP_STATE", 1 },
	{ KVM_CAP_ADJUST_CLOCK, "ADJUST_CLOCK", 1 },
	{ KVM_CAP_PIT_STATE2, "PIT_STATE2", 1 },
	{ KVM_CAP_XSAVE, "XSAVE", 0 },
	{ KVM_CAP_XSAVE2, "XSAVE2", 0 },
	{ KVM_CAP_XCRS, "XCRS", 0 },
	{ KVM_CAP_GET_TSC_KHZ, "GET_TSC_KHZ", 0 },
	{ KVM_CAP_TSC_CONTROL, "TSC_CONTROL", 0 },
};

static int cap(struct vm *vm, int c)
{
	int r = ioctl(vm->vm_fd, KVM_CHECK_EXTENSION, c);
	return r < 0 ? 0 : r;
}

int snapshot_probe(struct vm *vm, char *report, size_t replen, char *why, size_t whylen)
{
	int rc = 0;
	size_t off = 0;
	if (report && replen)
		report[0] = 0;
	for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
		int v = cap(vm, caps[i].cap);
		if (report && off < replen)
			off += (size_t)snprintf(report + off, replen - off, "%s%s=%d", off ? " " : "",
						caps[i].name, v);
		if (caps[i].needed && v <= 0 && rc == 0)
			rc = errbuf_fail(why, whylen, -ENOTSUP,
				     "this /dev/kvm lacks KVM_CAP_%s, which snapshots need",
				     caps[i].name);
	}
	return rc;
}

/* The XSAVE area this KVM hands out: 0 without XSAVE. */
static size_t xsave_size(struct vm *vm)
{
	if (cap(vm, KVM_CAP_XSAVE) <= 0)
		return 0;
	int n = cap(vm, KVM_CAP_XSAVE2);
	return n > (int)sizeof(struct kvm_xsave) ? (size_t)n : sizeof(struct kvm_xsave);
}

static struct kvm_msr_list *msr_index_list(struct vm *vm)
{
	struct kvm_msr_list probe = { .nmsrs = 0 };
	if (ioctl(vm->kvm_fd, KVM_GET_MSR_INDEX_LIST, &probe) < 0 && errno != E2BIG)
		return NULL;
	if (probe.nmsrs == 0 || probe.nmsrs > SNAPSHOT_FILE_MAX_MSRS)
		return NULL;
	struct kvm_msr_list *l = calloc(1, sizeof *l + probe.nmsrs * sizeof l->indices[0]);
	if (!l)
		return NULL;
	l->nmsrs = probe.nmsrs;
	if (ioctl(vm->kvm_fd, KVM_GET_MSR_INDEX_LIST, l) < 0) {
		free(l);
		return NULL;
	}
	return l;
}

/* Every MSR of the list this vCPU will give, the TSC first: KVM_GET_MSRS
 * reads in order and stops at the first it refuses, which is then left
 * out and the rest read again. */
static struct kvm_msrs *read_msrs(int fd, const struct kvm_msr_list *l)
{
	size_t cap = (size_t)l->nmsrs + 1;
	struct kvm_msrs *m = calloc(1, sizeof *m + cap * sizeof m->entries[0]);
	struct kvm_msrs *w = calloc(1, sizeof *w + cap * sizeof w->entries[0]);
	if (!m || !w)
		goto fail;
	unsigned n = 0;
	m->entries[n++].index = MSR_IA32_TSC;
	for (unsigned i = 0; i < l->nmsrs; i++)
		if (l->indices[i] != MSR_IA32_TSC)
			m->entries[n++].index = l->indices[i];
	unsigned done = 0;
	while (done < n) {
		w->nmsrs = n - done;
		memcpy(w->entries, &m->entries[done], (n - done) * sizeof w->entries[0]);
		int r = ioctl(fd, KVM_GET_MSRS, w);
		if (r < 0 || (unsigned)r > n - done)
			goto fail;
		memcpy(&m->entries[done], w->entries, (size_t)r * sizeof w->entries[0]);
		done += (unsigned)r;
		if (done < n) {
			memmove(&m->entries[done], &m->entries[done + 1],
				(n - done - 1) * sizeof m->entries[0]);
			n--;
		}
	}
	m->nmsrs = n;
	free(w);
	return m;
fail:
	free(m);
	free(w);
	return NULL;
}

static struct kvm_cpuid2 *read_cpuid(int fd)
{
	struct kvm_cpuid2 *c = calloc(1, sizeof *c + SNAPSHOT_FILE_MAX_CPUID * sizeof c->entries[0]);
	if (!c)
		return NULL;
	c->nent = SNAPSHOT_FILE_MAX_CPUID;
	if (ioctl(fd, KVM_GET_CPUID2, c) < 0 || c->nent == 0) {
		free(c);
		return NULL;
	}
	return c;
}

/* Re-enter each vCPU once without running it: KVM completes the port or
 * MMIO access it exited on before it looks at immediate_exit. */
static int complete_io(struct vm *vm, char *err, size_t errlen)
{
	for (unsigned i = 0; i < vm->ncpus; i++) {
		struct vcpu *c = &vm->cpu[i];
		__atomic_store_n(&c->run->immediate_exit, 1, __ATOMIC_SEQ_CST);
		int r = ioctl(c->fd, KVM_RUN, 0);
		int e = errno;
		__atomic_store_n(&c->run->immediate_exit, 0, __ATOMIC_SEQ_CST);
		if (r == 0)
			return errbuf_fail(err, errlen, -EAGAIN,
				       "vCPU %u exited again while its last access completed "
				       "(exit %u): resume the VM and save later",
				       i, c->run->exit_reason);
		if (e != EINTR)
			return errbuf_fail(err, errlen, -e, "vCPU %u: KVM_RUN to complete its last "
						       "access failed: %s", i, strerror(e));
	}
	return 0;
}

#define GET(fd, req, p, what)                                                              \
	do {                                                                               \
		if (ioctl(fd, req, p) < 0) {                                               \
			rc = errbuf_fail(err, errlen, -errno, "%s failed: %s", what,            \
				     strerror(errno));                                     \
			goto out;                                                          \
		}                                                                          \
	} while (0)

static int save_cpu(struct vm *vm, unsigned i, const struct kvm_msr_list *ml, size_t xs,
		    struct snapshot_file_builder *b, struct snapshot_stats *st, char *err, size_t errlen)
{
	int fd = vm->cpu[i].fd, rc = 0;
	struct kvm_regs regs;
	struct kvm_sregs sregs;
	struct kvm_fpu fpu;
	struct kvm_xcrs xcrs;
	struct kvm_lapic_state lapic;
	struct kvm_mp_state mp;
	struct kvm_vcpu_events ev;
	struct kvm_debugregs dr;
	struct kvm_msrs *msrs = NULL;
	struct kvm_cpuid2 *cpuid = NULL;
	void *xsave = NULL;

	snapshot_file_build_section(b, SNAPSHOT_FILE_SEC_CPU, i);
	/* The MP state first: reading it makes KVM take a pending INIT or
	 * SIPI, which resets the vCPU or points it at the SIPI vector, so the
	 * registers are only final after it.  (Read last, a SIPI taken there
	 * was lost: the vCPU came back runnable at the reset vector.) */
	GET(fd, KVM_GET_MP_STATE, &mp, "KVM_GET_MP_STATE");
	GET(fd, KVM_GET_REGS, &regs, "KVM_GET_REGS");
	GET(fd, KVM_GET_SREGS, &sregs, "KVM_GET_SREGS");
	snapshot_file_build_rec(b, SNAPSHOT_FILE_C_REGS, &regs, sizeof regs);
	snapshot_file_build_rec(b, SNAPSHOT_FILE_C_SREGS, &sregs, sizeof sregs);
	if (xs) {
		xsave = calloc(1, xs);
		if (!xsave) {
			rc = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
			goto out;
		}
		GET(fd, xs > sizeof(struct kvm_xsave) ? KVM_GET_XSAVE2 : KVM_GET_XSAVE, xsave,
		    "KVM_GET_XSAVE");
		snapshot_file_build_rec(b, SNAPSHOT_FILE_C_XSAVE, xsave, xs);
		if (cap(vm, KVM_CAP_XCRS) > 0) {
			GET(fd, KVM_GET_XCRS, &xcrs, "KVM_GET_XCRS");
			snapshot_file_build_rec(b, SNAPSHOT_FILE_C_XCRS, &xcrs, sizeof xcrs);
		}
	} else {
		GET(fd, KVM_GET_FPU, &fpu, "KVM_GET_FPU");
		snapshot_file_build_rec(b, SNAPSHOT_FILE_C_FPU, &fpu, sizeof fpu);
	}
	GET(fd, KVM_GET_LAPIC, &lapic, "KVM_GET_LAPIC");
	GET(fd, KVM_GET_VCPU_EVENTS, &ev, "KVM_GET_VCPU_EVENTS");
	GET(fd, KVM_GET_DEBUGREGS, &dr, "KVM_GET_DEBUGREGS");
	snapshot_file_build_rec(b, SNAPSHOT_FILE_C_LAPIC, &lapic, sizeof lapic);
	snapshot_file_build_rec(b, SNAPSHOT_FILE_C_MP_STATE, &mp, sizeof mp);
	snapshot_file_build_rec(b, SNAPSHOT_FILE_C_EVENTS, &ev, sizeof ev);
	snapshot_file_build_rec(b, SNAPSHOT_FILE_C_DEBUGREGS, &dr, sizeof dr);
	msrs = read_msrs(fd, ml);
	if (!msrs || msrs->nmsrs == 0) {
		rc = errbuf_fail(err, errlen, -EIO, "vCPU %u: KVM_GET_MSRS failed", i);
		goto out;
	}
	snapshot_file_build_rec(b, SNAPSHOT_FILE_C_MSRS, msrs->entries, msrs->nmsrs * sizeof msrs->entries[0]);
	cpuid = read_cpuid(fd);
	if (!cpuid) {
		rc = errbuf_fail(err, errlen, -EIO, "vCPU %u: KVM_GET_CPUID2 failed: %s", i,
			     strerror(errno));
		goto out;
	}
	snapshot_file_build_rec(b, SNAPSHOT_FILE_C_CPUID, cpuid->entries, cpuid->nent * sizeof cpuid->entries[0]);
	if (st) {
		st->msrs = msrs->nmsrs;
		st->xsave_bytes = (unsigned)xs;
	}
out:
	free(xsave);
	free(msrs);
	free(cpuid);
	return rc;
}

static int save_vm_state(struct vm *vm, struct snapshot_file_builder *b, char *err, size_t errlen)
{
	int rc = 0, fd = vm->vm_fd;
	struct kvm_clock_data clock = { 0 };
	struct kvm_pit_state2 pit;
	static const struct { uint32_t tag, chip; } chips[] = {
		{ SNAPSHOT_FILE_V_PIC0, KVM_IRQCHIP_PIC_MASTER },
		{ SNAPSHOT_FILE_V_PIC1, KVM_IRQCHIP_PIC_SLAVE },
		{ SNAPSHOT_FILE_V_IOAPIC, KVM_IRQCHIP_IOAPIC },
	};
	snapshot_file_build_section(b, SNAPSHOT_FILE_SEC_VM, 0);
	GET(fd, KVM_GET_CLOCK, &clock, "KVM_GET_CLOCK");
	GET(fd, KVM_GET_PIT2, &pit, "KVM_GET_PIT2");
	snapshot_file_build_rec(b, SNAPSHOT_FILE_V_CLOCK, &clock, sizeof clock);
	snapshot_file_build_rec(b, SNAPSHOT_FILE_V_PIT2, &pit, sizeof pit);
	for (size_t i = 0; i < sizeof chips / sizeof chips[0]; i++) {
		struct kvm_irqchip ic = { .chip_id = chips[i].chip };
		GET(fd, KVM_GET_IRQCHIP, &ic, "KVM_GET_IRQCHIP");
		snapshot_file_build_rec(b, chips[i].tag, &ic.chip, sizeof ic.chip);
	}
out:
	return rc;
}

static int check_devs(const struct snapshot_dev *devs, unsigned ndev, char *err, size_t errlen)
{
	if (ndev > SNAPSHOT_FILE_MAX_DEVS)
		return errbuf_fail(err, errlen, -EINVAL, "too many devices for a snapshot");
	for (unsigned i = 0; i < ndev; i++) {
		size_t n = strlen(devs[i].name);
		if (n == 0 || n > 31 || strspn(devs[i].name, "abcdefghijklmnopqrstuvwxyz0123456789_-") != n ||
		    devs[i].slot >= SNAPSHOT_FILE_MAX_DEVS || !devs[i].save || !devs[i].load)
			return errbuf_fail(err, errlen, -EINVAL, "device '%s' cannot be saved",
				       devs[i].name);
		for (unsigned j = 0; j < i; j++)
			if (devs[j].slot == devs[i].slot)
				return errbuf_fail(err, errlen, -EINVAL, "devices '%s' and '%s' share slot %u",
					       devs[j].name, devs[i].name, devs[i].slot);
	}
	return 0;
}

int snapshot_save_state(struct vm *vm, const uint8_t key[SNAPSHOT_FILE_KEY_LEN],
		      const struct snapshot_dev *devs, unsigned ndev, struct statebuf_writer *meta,
		      struct snapshot_stats *st, char *err, size_t errlen)
{
	for (unsigned i = 0; i < vm->ncpus; i++)
		if (vm->cpu[i].started)
			return errbuf_fail(err, errlen, -EBUSY, "cannot save a VM whose vCPUs run");
	int rc = snapshot_probe(vm, NULL, 0, err, errlen);
	if (rc < 0 || (rc = check_devs(devs, ndev, err, errlen)) < 0)
		return rc;
	if ((rc = complete_io(vm, err, errlen)) < 0)
		return rc;
	struct kvm_msr_list *ml = msr_index_list(vm);
	if (!ml)
		return errbuf_fail(err, errlen, -EIO, "KVM_GET_MSR_INDEX_LIST failed");
	size_t xs = xsave_size(vm);
	struct snapshot_file_builder b;
	snapshot_file_build_init(&b);
	struct snapshot_file_layout l = { .ncpus = vm->ncpus, .tsc_khz = vm_tsc_khz(vm),
				  .ram_size = vm->ram_size, .low_ram = vm->low_ram,
				  .high_base = vm->high_ram ? BOOT_HIGH_RAM_BASE : 0 };
	memcpy(l.key, key, SNAPSHOT_FILE_KEY_LEN);
	snapshot_file_build_layout(&b, &l);
	if ((rc = save_vm_state(vm, &b, err, errlen)) < 0)
		goto out;
	for (unsigned i = 0; i < vm->ncpus; i++)
		if ((rc = save_cpu(vm, i, ml, xs, &b, st, err, errlen)) < 0)
			goto out;
	for (unsigned i = 0; i < ndev; i++) {
		struct statebuf_writer w;
		statebuf_init(&w);
		rc = devs[i].save(devs[i].ctx, &w, err, errlen);
		if (rc == 0 && w.err)
			rc = errbuf_fail(err, errlen, w.err, "device '%s': cannot hold its state",
				     devs[i].name);
		if (rc == 0 && w.len > SNAPSHOT_FILE_MAX_DEV_BLOB)
			rc = errbuf_fail(err, errlen, -EFBIG, "device '%s': state too large",
				     devs[i].name);
		if (rc == 0) {
			snapshot_file_build_section(&b, SNAPSHOT_FILE_SEC_DEV, devs[i].slot);
			snapshot_file_build_rec(&b, SNAPSHOT_FILE_D_NAME, devs[i].name, strlen(devs[i].name));
			snapshot_file_build_rec(&b, SNAPSHOT_FILE_D_BLOB, w.buf, w.len);
		}
		statebuf_free(&w);
		if (rc < 0)
			goto out;
	}
	if ((rc = snapshot_file_build_finish(&b, vm->ram_size, meta)) < 0)
		errbuf_fail(err, errlen, rc, "cannot build the snapshot: %s", strerror(-rc));
out:
	snapshot_file_build_free(&b);
	free(ml);
	return rc;
}

int snapshot_save(struct vm *vm, const uint8_t key[SNAPSHOT_FILE_KEY_LEN], const struct snapshot_dev *devs,
	      unsigned ndev, const char *dir, const char *name, struct snapshot_stats *st, char *err,
	      size_t errlen)
{
	double t0 = now_ms();
	if (st)
		memset(st, 0, sizeof *st);
	struct statebuf_writer meta;
	statebuf_init(&meta);
	int rc = snapshot_save_state(vm, key, devs, ndev, &meta, st, err, errlen);
	double t1 = now_ms();
	if (rc == 0) {
		/* Pages never touched are not read (a template is made before
		 * any lock-down: /proc is open then). */
		uint8_t *known_zero = NULL;
		int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
		if (pm >= 0) {
			snapshot_ram_known_zero(vm, pm, &known_zero);
			close(pm);
		}
		rc = snapshot_file_write_known(dir, name, &meta, vm->ram, vm->ram_size, known_zero, err,
					       errlen);
		free(known_zero);
	}
	if (rc == 0 && st) {
		st->state_ms = t1 - t0;
		struct snapshot_file_file f;
		if (snapshot_file_open(dir, name, &f, NULL, 0) == 0) {
			st->file_bytes = f.size;
			st->disk_bytes = f.disk_bytes;
			snapshot_file_close(&f);
		}
	}
	statebuf_free(&meta);
	if (st && rc == 0)
		st->ms = now_ms() - t0;
	return rc;
}

#define SET(fd, req, p, what)                                                              \
	do {                                                                               \
		if (ioctl(fd, req, p) < 0) {                                               \
			rc = errbuf_fail(err, errlen, -errno, "vCPU %u: %s of the snapshot failed: %s", \
				     i, what, strerror(errno));                            \
			goto out;                                                          \
		}                                                                          \
	} while (0)

/* A record copied into an aligned structure of exactly its size. */
static void take(const struct snapshot_file_sec *s, uint32_t tag, void *dst, size_t n)
{
	const uint8_t *d;
	uint32_t len;
	memset(dst, 0, n);
	if (snapshot_file_rec(s, tag, &d, &len) == 0 && len == n)
		memcpy(dst, d, n);
}

static int restore_cpu(struct vm *vm, unsigned i, const struct snapshot_file_sec *s, size_t xs,
		       char *err, size_t errlen)
{
	int fd = vm->cpu[i].fd, rc = 0;
	const uint8_t *d;
	uint32_t len;
	struct kvm_cpuid2 *cpuid = NULL;
	struct kvm_msrs *msrs = NULL;
	void *xsave = NULL;

	snapshot_file_rec(s, SNAPSHOT_FILE_C_CPUID, &d, &len);
	unsigned nent = len / sizeof(struct kvm_cpuid_entry2);
	cpuid = calloc(1, sizeof *cpuid + len);
	if (!cpuid)
		return errbuf_fail(err, errlen, -ENOMEM, "out of memory");
	cpuid->nent = nent;
	memcpy(cpuid->entries, d, len);
	SET(fd, KVM_SET_CPUID2, cpuid, "KVM_SET_CPUID2");

	struct kvm_sregs sregs;
	struct kvm_regs regs;
	take(s, SNAPSHOT_FILE_C_SREGS, &sregs, sizeof sregs);
	take(s, SNAPSHOT_FILE_C_REGS, &regs, sizeof regs);
	SET(fd, KVM_SET_SREGS, &sregs, "KVM_SET_SREGS");
	SET(fd, KVM_SET_REGS, &regs, "KVM_SET_REGS");

	if (snapshot_file_rec(s, SNAPSHOT_FILE_C_XSAVE, &d, &len) == 0) {
		if (len != xs) {
			rc = errbuf_fail(err, errlen, -EINVAL,
				     "vCPU %u: the snapshot's XSAVE area is %u bytes, this KVM's %zu",
				     i, len, xs);
			goto out;
		}
		xsave = malloc(len);
		if (!xsave) {
			rc = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
			goto out;
		}
		memcpy(xsave, d, len);
		SET(fd, KVM_SET_XSAVE, xsave, "KVM_SET_XSAVE");
		if (snapshot_file_rec(s, SNAPSHOT_FILE_C_XCRS, &d, &len) == 0) {
			struct kvm_xcrs xcrs;
			take(s, SNAPSHOT_FILE_C_XCRS, &xcrs, sizeof xcrs);
			SET(fd, KVM_SET_XCRS, &xcrs, "KVM_SET_XCRS");
		}
	} else {
		if (xs) {
			rc = errbuf_fail(err, errlen, -EINVAL,
				     "vCPU %u: the snapshot has no XSAVE area, this KVM uses one", i);
			goto out;
		}
		struct kvm_fpu fpu;
		take(s, SNAPSHOT_FILE_C_FPU, &fpu, sizeof fpu);
		SET(fd, KVM_SET_FPU, &fpu, "KVM_SET_FPU");
	}

	/* The LAPIC before the MSRs: a TSC deadline is kept only once the
	 * timer is in deadline mode, and it counts from the TSC, set first. */
	struct kvm_lapic_state lapic;
	take(s, SNAPSHOT_FILE_C_LAPIC, &lapic, sizeof lapic);
	SET(fd, KVM_SET_LAPIC, &lapic, "KVM_SET_LAPIC");

	snapshot_file_rec(s, SNAPSHOT_FILE_C_MSRS, &d, &len);
	unsigned n = len / sizeof(struct kvm_msr_entry);
	msrs = calloc(1, sizeof *msrs + len);
	if (!msrs) {
		rc = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	msrs->nmsrs = n;
	memcpy(msrs->entries, d, len);
	for (unsigned k = 0; k < n; k++)
		msrs->entries[k].reserved = 0;
	int r = ioctl(fd, KVM_SET_MSRS, msrs);
	if (r < 0 || (unsigned)r != n) {
		rc = errbuf_fail(err, errlen, r < 0 ? -errno : -EINVAL,
			     "vCPU %u: KVM_SET_MSRS took %d of the snapshot's %u MSRs (MSR 0x%x "
			     "refused)", i, r, n, r >= 0 && (unsigned)r < n ? msrs->entries[r].index : 0);
		goto out;
	}

	struct kvm_mp_state mp;
	struct kvm_vcpu_events ev;
	struct kvm_debugregs dr;
	take(s, SNAPSHOT_FILE_C_MP_STATE, &mp, sizeof mp);
	take(s, SNAPSHOT_FILE_C_EVENTS, &ev, sizeof ev);
	take(s, SNAPSHOT_FILE_C_DEBUGREGS, &dr, sizeof dr);
	SET(fd, KVM_SET_MP_STATE, &mp, "KVM_SET_MP_STATE");
	/* GET leaves these two out of flags though it fills them in. */
	ev.flags |= KVM_VCPUEVENT_VALID_NMI_PENDING | KVM_VCPUEVENT_VALID_SIPI_VECTOR;
	SET(fd, KVM_SET_VCPU_EVENTS, &ev, "KVM_SET_VCPU_EVENTS");
	dr.flags = 0;
	SET(fd, KVM_SET_DEBUGREGS, &dr, "KVM_SET_DEBUGREGS");
out:
	free(cpuid);
	free(msrs);
	free(xsave);
	return rc;
}

static int restore_vm_state(struct vm *vm, const struct snapshot_file_sec *s, char *err, size_t errlen)
{
	int rc = 0, fd = vm->vm_fd;
	unsigned i = 0; /* for SET's message: the VM's own state */
	struct kvm_pit_state2 pit;
	take(s, SNAPSHOT_FILE_V_PIT2, &pit, sizeof pit);
	SET(fd, KVM_SET_PIT2, &pit, "KVM_SET_PIT2");
	static const struct { uint32_t tag, chip; } chips[] = {
		{ SNAPSHOT_FILE_V_PIC0, KVM_IRQCHIP_PIC_MASTER },
		{ SNAPSHOT_FILE_V_PIC1, KVM_IRQCHIP_PIC_SLAVE },
		{ SNAPSHOT_FILE_V_IOAPIC, KVM_IRQCHIP_IOAPIC },
	};
	for (size_t k = 0; k < sizeof chips / sizeof chips[0]; k++) {
		struct kvm_irqchip ic = { .chip_id = chips[k].chip };
		take(s, chips[k].tag, &ic.chip, sizeof ic.chip);
		SET(fd, KVM_SET_IRQCHIP, &ic, "KVM_SET_IRQCHIP");
	}
	struct kvm_clock_data clock;
	take(s, SNAPSHOT_FILE_V_CLOCK, &clock, sizeof clock);
	/* Only the clock's value: the host-time fields are the saving
	 * host's, and flags asking KVM to use them would be hostile here. */
	clock.flags = 0;
	clock.realtime = clock.host_tsc = 0;
	SET(fd, KVM_SET_CLOCK, &clock, "KVM_SET_CLOCK");
out:
	return rc;
}

static int restore_devs(const struct snapshot_file_view *v, const struct snapshot_dev *devs, unsigned ndev,
			char *err, size_t errlen)
{
	if (v->ndev != ndev)
		return errbuf_fail(err, errlen, -EINVAL, "the snapshot holds %u devices, this VM has %u",
			       v->ndev, ndev);
	for (unsigned i = 0; i < ndev; i++) {
		const struct snapshot_file_sec *s = snapshot_file_find(v, SNAPSHOT_FILE_SEC_DEV, devs[i].slot);
		const uint8_t *d;
		uint32_t len;
		if (!s)
			return errbuf_fail(err, errlen, -EINVAL, "the snapshot has no state for device '%s'",
				       devs[i].name);
		snapshot_file_rec(s, SNAPSHOT_FILE_D_NAME, &d, &len);
		if (len != strlen(devs[i].name) || memcmp(d, devs[i].name, len) != 0)
			return errbuf_fail(err, errlen, -EINVAL,
				       "the snapshot's device in slot %u is '%.*s', not '%s'",
				       devs[i].slot, (int)len, (const char *)d, devs[i].name);
		snapshot_file_rec(s, SNAPSHOT_FILE_D_BLOB, &d, &len);
		int rc = devs[i].load(devs[i].ctx, d, len, err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Restore from f, opened and checked; name says which file in errors. */
static int restore_from(struct vm *vm, const uint8_t key[SNAPSHOT_FILE_KEY_LEN],
			const struct snapshot_dev *devs, unsigned ndev, struct snapshot_file_file *pf,
			const char *name, double t0, struct snapshot_stats *st, char *err,
			size_t errlen)
{
	struct snapshot_file_file f = *pf;
	int rc = 0;
	const struct snapshot_file_layout *l = &f.v.layout;
	unsigned khz = vm_tsc_khz(vm);
	size_t xs = xsave_size(vm);
	if (memcmp(l->key, key, SNAPSHOT_FILE_KEY_LEN) != 0)
		rc = errbuf_fail(err, errlen, -ESTALE, "snapshot %s was made for another boot layout",
			     name);
	else if (l->ncpus != vm->ncpus || l->ram_size != vm->ram_size ||
		 l->low_ram != vm->low_ram ||
		 l->high_base != (vm->high_ram ? BOOT_HIGH_RAM_BASE : 0))
		rc = errbuf_fail(err, errlen, -ESTALE,
			     "snapshot %s is of %u vCPUs and %llu MiB, this VM has %u and %llu", name,
			     l->ncpus, (unsigned long long)(l->ram_size >> 20), vm->ncpus,
			     (unsigned long long)(vm->ram_size >> 20));
	else if (l->tsc_khz != khz)
		rc = errbuf_fail(err, errlen, -ESTALE,
			     "snapshot %s was made at a TSC of %u kHz, this host's is %u kHz", name,
			     l->tsc_khz, khz);
	if (rc < 0)
		goto out;
	void *ram = mmap(vm->ram, vm->ram_size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE, f.fd, (off_t)f.v.ram_off);
	if (ram == MAP_FAILED) {
		rc = errbuf_fail(err, errlen, -errno, "cannot map the snapshot's RAM: %s",
			     strerror(errno));
		goto out;
	}
	madvise(vm->ram, vm->ram_size, MADV_DONTDUMP);
	if (vm->ram_file >= 3)
		close(vm->ram_file);
	vm->ram_file = fcntl(f.fd, F_DUPFD_CLOEXEC, 3);
	vm->ram_file_off = f.v.ram_off;
	double t1 = now_ms();
	if ((rc = restore_vm_state(vm, snapshot_file_find(&f.v, SNAPSHOT_FILE_SEC_VM, 0), err, errlen)) < 0)
		goto out;
	for (unsigned i = 0; i < vm->ncpus; i++)
		if ((rc = restore_cpu(vm, i, snapshot_file_find(&f.v, SNAPSHOT_FILE_SEC_CPU, i), xs, err, errlen)) < 0)
			goto out;
	if ((rc = restore_devs(&f.v, devs, ndev, err, errlen)) < 0)
		goto out;
	if (st) {
		st->state_ms = now_ms() - t1;
		st->file_bytes = f.size;
		st->disk_bytes = f.disk_bytes;
		const uint8_t *d;
		uint32_t len;
		if (snapshot_file_rec(snapshot_file_find(&f.v, SNAPSHOT_FILE_SEC_CPU, 0), SNAPSHOT_FILE_C_MSRS, &d, &len) == 0)
			st->msrs = len / (unsigned)sizeof(struct kvm_msr_entry);
		st->xsave_bytes = (unsigned)xs;
	}
out:
	if (st && rc == 0)
		st->ms = now_ms() - t0;
	return rc;
}

int snapshot_restore(struct vm *vm, const uint8_t key[SNAPSHOT_FILE_KEY_LEN], const struct snapshot_dev *devs,
		 unsigned ndev, const char *dir, const char *name, struct snapshot_stats *st,
		 char *err, size_t errlen)
{
	double t0 = now_ms();
	if (st)
		memset(st, 0, sizeof *st);
	int rc = snapshot_probe(vm, NULL, 0, err, errlen);
	if (rc < 0 || (rc = check_devs(devs, ndev, err, errlen)) < 0)
		return rc;
	struct snapshot_file_file f;
	if ((rc = snapshot_file_open(dir, name, &f, err, errlen)) < 0)
		return rc;
	rc = restore_from(vm, key, devs, ndev, &f, name, t0, st, err, errlen);
	snapshot_file_close(&f);
	return rc;
}

int snapshot_restore_fd(struct vm *vm, const uint8_t key[SNAPSHOT_FILE_KEY_LEN], const struct snapshot_dev *devs,
			unsigned ndev, int fd, struct snapshot_stats *st, char *err, size_t errlen)
{
	double t0 = now_ms();
	if (st)
		memset(st, 0, sizeof *st);
	int rc = snapshot_probe(vm, NULL, 0, err, errlen);
	if (rc < 0 || (rc = check_devs(devs, ndev, err, errlen)) < 0)
		return rc;
	struct snapshot_file_file f;
	if ((rc = snapshot_file_open_fd(fd, &f, err, errlen)) < 0)
		return rc;
	rc = restore_from(vm, key, devs, ndev, &f, "file", t0, st, err, errlen);
	snapshot_file_close(&f);
	return rc;
}

/* ---- pages known to be zero ------------------------------------------ */

#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)

int snapshot_ram_known_zero(const struct vm *vm, int pagemap_fd, uint8_t **out)
{
	uint64_t pages = vm->ram_size / SNAPSHOT_FILE_PAGE;
	uint8_t *bits = calloc((size_t)(pages + 7) / 8, 1);
	if (!bits)
		return -ENOMEM;
	/* Pages the guest has not touched since the mapping was made: in an
	 * anonymous mapping zero; in a file's private mapping the file's
	 * bytes, zero where the file has a hole.  Start from "zero" and take
	 * back the file's data. */
	memset(bits, 0xff, (size_t)(pages + 7) / 8);
	if (vm->ram_file >= 3) {
		off_t end = (off_t)(vm->ram_file_off + vm->ram_size);
		off_t at = (off_t)vm->ram_file_off;
		while (at < end) {
			off_t data = lseek(vm->ram_file, at, SEEK_DATA);
			if (data < 0 && errno == ENXIO)
				break; /* holes to the end */
			if (data < 0)
				goto unknown;
			if (data >= end)
				break;
			off_t hole = lseek(vm->ram_file, data, SEEK_HOLE);
			if (hole < 0)
				goto unknown;
			if (hole > end)
				hole = end;
			uint64_t p0 = (uint64_t)(data - (off_t)vm->ram_file_off) / SNAPSHOT_FILE_PAGE;
			uint64_t p1 = ((uint64_t)(hole - (off_t)vm->ram_file_off) + SNAPSHOT_FILE_PAGE - 1) /
				      SNAPSHOT_FILE_PAGE;
			for (uint64_t p = p0; p < p1 && p < pages; p++)
				bits[p / 8] &= (uint8_t)~(1u << (p % 8));
			at = hole;
		}
	}
	/* Then every page the process has in memory or in swap: looked at. */
	uint64_t buf[4096];
	uint64_t first = (uint64_t)(uintptr_t)vm->ram / SNAPSHOT_FILE_PAGE;
	for (uint64_t p = 0; p < pages;) {
		uint64_t n = pages - p < 4096 ? pages - p : 4096;
		ssize_t got = pread(pagemap_fd, buf, n * 8, (off_t)((first + p) * 8));
		if (got != (ssize_t)(n * 8))
			goto unknown;
		for (uint64_t k = 0; k < n; k++)
			if (buf[k] & (PM_PRESENT | PM_SWAPPED))
				bits[(p + k) / 8] &= (uint8_t)~(1u << ((p + k) % 8));
		p += n;
	}
	*out = bits;
	return 0;
unknown:
	free(bits);
	return -EIO;
}
