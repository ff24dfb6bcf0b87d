#include "vmm/core/vm.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "lib/errbuf.h"
#include "vmm/core/boot.h"

#define KICK_SIGNAL SIGUSR1
#define TSS_ADDR    0xfffbd000ull

/* Guest RAM at a 2 MiB-aligned address.  KVM maps a guest page with a
 * 2 MiB entry of its nested page table only when the memslot's host and
 * guest addresses agree modulo 2 MiB and the host page is huge; otherwise
 * every 4 KiB the guest touches for the first time is its own nested page
 * fault (in the emulated lane ~0.3 ms each: a fresh guest writing 256 MiB
 * spent 18 of its 23 s on them).  NULL with errno on failure. */
static void *map_ram(uint64_t size)
{
	const uint64_t huge = 2ull << 20;
	uint8_t *p = mmap(NULL, size + huge, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	uint8_t *a = (uint8_t *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (a + size < p + size + huge)
		munmap(a + size, (size_t)(p + size + huge - (a + size)));
	return a;
}

int vm_is_pvm(void)
{
	const char *m = getenv("KBOX_KVM_MODE");
	if (m && strcmp(m, "pvm") == 0)
		return 1;
	if (m && strcmp(m, "hw") == 0)
		return 0;
	return access("/sys/module/kvm_pvm", F_OK) == 0;
}

unsigned vm_tsc_khz(struct vm *vm)
{
	if (vm->ncpus == 0 || vm->cpu[0].fd < 0)
		return 0;
	int khz = ioctl(vm->cpu[0].fd, KVM_GET_TSC_KHZ, 0);
	return khz > 0 ? (unsigned)khz : 0;
}

static void kick_handler(int sig) { (void)sig; }

int vm_create(struct vm *vm, unsigned ncpus, uint64_t mem_mib, char *err, size_t errlen)
{
	memset(vm, 0, sizeof *vm);
	vm->kvm_fd = vm->vm_fd = -1;
	vm->ram_file = -1;
	for (unsigned i = 0; i < VM_MAX_CPUS; i++)
		vm->cpu[i].fd = -1;
	pthread_mutex_init(&vm->irq_lock, NULL);
	if (ncpus == 0 || ncpus > VM_MAX_CPUS)
		return errbuf_fail(err, errlen, -EINVAL, "--cpus must be between 1 and %u", VM_MAX_CPUS);
	if (mem_mib < 64 || mem_mib > (1ull << 20))
		return errbuf_fail(err, errlen, -EINVAL, "--memory must be between 64 and 1048576 MiB");

	vm->kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (vm->kvm_fd < 0) {
		int e = errno;
		if (e == ENOENT)
			return errbuf_fail(err, errlen, -e,
				    "/dev/kvm does not exist: enable virtualization in the "
				    "firmware and load kvm_intel or kvm_amd");
		if (e == EACCES || e == EPERM)
			return errbuf_fail(err, errlen, -e,
				    "no permission to open /dev/kvm: add your user to the "
				    "'kvm' group (sudo usermod -aG kvm $USER) and log in again");
		return errbuf_fail(err, errlen, -e, "cannot open /dev/kvm: %s", strerror(e));
	}
	int api = ioctl(vm->kvm_fd, KVM_GET_API_VERSION, 0);
	if (api != KVM_API_VERSION)
		return errbuf_fail(err, errlen, -ENOTSUP, "/dev/kvm speaks API %d, kbox needs %d", api,
			    KVM_API_VERSION);
	static const struct { int cap; const char *name; } caps[] = {
		{ KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP" },
		{ KVM_CAP_IOEVENTFD, "KVM_CAP_IOEVENTFD" },
		{ KVM_CAP_IRQFD, "KVM_CAP_IRQFD" },
		{ KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY" },
		{ KVM_CAP_EXT_CPUID, "KVM_CAP_EXT_CPUID" },
	};
	for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
		if (ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, caps[i].cap) <= 0)
			return errbuf_fail(err, errlen, -ENOTSUP, "/dev/kvm lacks %s, which kbox needs",
				    caps[i].name);
	int rs = ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (rs < (int)sizeof(struct kvm_run))
		return errbuf_fail(err, errlen, -EIO, "KVM_GET_VCPU_MMAP_SIZE failed: %s", strerror(errno));
	vm->run_size = (size_t)rs;

	vm->vm_fd = ioctl(vm->kvm_fd, KVM_CREATE_VM, 0);
	if (vm->vm_fd < 0)
		return errbuf_fail(err, errlen, -errno, "KVM_CREATE_VM failed: %s", strerror(errno));
	if (ioctl(vm->vm_fd, KVM_SET_TSS_ADDR, (unsigned long)TSS_ADDR) < 0)
		return errbuf_fail(err, errlen, -errno, "KVM_SET_TSS_ADDR failed: %s", strerror(errno));
	uint64_t idmap = TSS_ADDR - 0x1000;
	ioctl(vm->vm_fd, KVM_SET_IDENTITY_MAP_ADDR, &idmap); /* VMX only; harmless elsewhere */
	if (ioctl(vm->vm_fd, KVM_CREATE_IRQCHIP, 0) < 0)
		return errbuf_fail(err, errlen, -errno, "KVM_CREATE_IRQCHIP failed: %s", strerror(errno));
	struct kvm_pit_config pit = { .flags = KVM_PIT_SPEAKER_DUMMY };
	if (ioctl(vm->vm_fd, KVM_CREATE_PIT2, &pit) < 0)
		return errbuf_fail(err, errlen, -errno, "KVM_CREATE_PIT2 failed: %s", strerror(errno));

	vm->ram_size = mem_mib << 20;
	vm->low_ram = vm->ram_size < BOOT_LOW_RAM_MAX ? vm->ram_size : BOOT_LOW_RAM_MAX;
	vm->high_ram = vm->ram_size - vm->low_ram;
	if ((vm->ram = map_ram(vm->ram_size)) == NULL)
		return errbuf_fail(err, errlen, -ENOMEM, "cannot reserve %llu MiB for guest RAM: %s",
			    (unsigned long long)mem_mib, strerror(errno));
	madvise(vm->ram, vm->ram_size, MADV_DONTDUMP);
	/* Hosts whose transparent huge pages are "madvise" (Debian's and
	 * Ubuntu's default) back RAM with 2 MiB pages only when asked.  Not
	 * under PVM, whose shadow paging has not been measured with them. */
	if (!vm_is_pvm())
		madvise(vm->ram, vm->ram_size, MADV_HUGEPAGE);
	struct kvm_userspace_memory_region r0 = {
		.slot = 0, .guest_phys_addr = 0, .memory_size = vm->low_ram,
		.userspace_addr = (uintptr_t)vm->ram,
	};
	if (ioctl(vm->vm_fd, KVM_SET_USER_MEMORY_REGION, &r0) < 0)
		return errbuf_fail(err, errlen, -errno, "KVM_SET_USER_MEMORY_REGION failed: %s",
			    strerror(errno));
	guest_mem_add_region(&vm->mem, 0, vm->low_ram, vm->ram);
	if (vm->high_ram) {
		struct kvm_userspace_memory_region r1 = {
			.slot = 1, .guest_phys_addr = BOOT_HIGH_RAM_BASE,
			.memory_size = vm->high_ram,
			.userspace_addr = (uintptr_t)vm->ram + vm->low_ram,
		};
		if (ioctl(vm->vm_fd, KVM_SET_USER_MEMORY_REGION, &r1) < 0)
			return errbuf_fail(err, errlen, -errno, "KVM_SET_USER_MEMORY_REGION failed: %s",
				    strerror(errno));
		guest_mem_add_region(&vm->mem, BOOT_HIGH_RAM_BASE, vm->high_ram,
			      (uint8_t *)vm->ram + vm->low_ram);
	}

	vm->ncpus = ncpus;
	for (unsigned i = 0; i < ncpus; i++) {
		struct vcpu *c = &vm->cpu[i];
		c->vm = vm;
		c->id = i;
		c->fd = ioctl(vm->vm_fd, KVM_CREATE_VCPU, (unsigned long)i);
		if (c->fd < 0)
			return errbuf_fail(err, errlen, -errno, "KVM_CREATE_VCPU %u failed: %s", i,
				    strerror(errno));
		c->run = mmap(NULL, vm->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
		if (c->run == MAP_FAILED) {
			c->run = NULL;
			return errbuf_fail(err, errlen, -errno, "cannot map vCPU %u state: %s", i,
				    strerror(errno));
		}
	}

	struct sigaction sa = { .sa_handler = kick_handler };
	sigemptyset(&sa.sa_mask);
	sigaction(KICK_SIGNAL, &sa, NULL);
	return 0;
}

static struct kvm_cpuid2 *supported_cpuid(int kvm_fd)
{
	for (unsigned n = 128; n <= 4096; n *= 2) {
		struct kvm_cpuid2 *c = calloc(1, sizeof *c + n * sizeof(struct kvm_cpuid_entry2));
		if (!c)
			return NULL;
		c->nent = n;
		if (ioctl(kvm_fd, KVM_GET_SUPPORTED_CPUID, c) == 0)
			return c;
		free(c);
		if (errno != E2BIG)
			return NULL;
	}
	return NULL;
}

static int setup_lapic(struct vcpu *c)
{
	struct kvm_lapic_state l;
	if (ioctl(c->fd, KVM_GET_LAPIC, &l) < 0)
		return -errno;
	/* LVT LINT0 as ExtINT (the PIC) and LINT1 as NMI, as firmware would
	 * leave them for a kernel that reads the MP table. */
	uint32_t lint0, lint1;
	memcpy(&lint0, l.regs + 0x350, 4);
	memcpy(&lint1, l.regs + 0x360, 4);
	lint0 = (lint0 & ~0x700u) | (7u << 8);
	lint1 = (lint1 & ~0x700u) | (4u << 8);
	memcpy(l.regs + 0x350, &lint0, 4);
	memcpy(l.regs + 0x360, &lint1, 4);
	if (ioctl(c->fd, KVM_SET_LAPIC, &l) < 0)
		return -errno;
	return 0;
}

static int setup_boot_regs(struct vcpu *c, uint64_t entry)
{
	struct kvm_sregs s;
	if (ioctl(c->fd, KVM_GET_SREGS, &s) < 0)
		return -errno;
	struct kvm_segment code = {
		.base = 0, .limit = 0xffffffff, .selector = 0x10, .type = 11,
		.present = 1, .dpl = 0, .db = 0, .s = 1, .l = 1, .g = 1,
	};
	struct kvm_segment data = code;
	data.selector = 0x18;
	data.type = 3;
	data.l = 0;
	data.db = 1;
	struct kvm_segment tss = {
		.base = 0, .limit = 0x67, .selector = 0x20, .type = 11, .present = 1, .s = 0,
	};
	s.cs = code;
	s.ds = s.es = s.fs = s.gs = s.ss = data;
	s.tr = tss;
	s.gdt.base = BOOT_GDT_ADDR;
	s.gdt.limit = 5 * 8 - 1;
	s.idt.base = 0;
	s.idt.limit = 0;
	s.cr3 = BOOT_PML4_ADDR;
	s.cr4 = 0x20;                 /* PAE */
	s.cr0 = 0x80000033;           /* PG, NE, ET, MP, PE */
	s.efer = 0x500;               /* LME, LMA */
	if (ioctl(c->fd, KVM_SET_SREGS, &s) < 0)
		return -errno;

	struct kvm_regs r = { 0 };
	r.rflags = 2;
	r.rip = entry;
	r.rsi = BOOT_PARAMS_ADDR;
	r.rsp = r.rbp = BOOT_STACK_TOP;
	if (ioctl(c->fd, KVM_SET_REGS, &r) < 0)
		return -errno;

	struct kvm_fpu f = { 0 };
	f.fcw = 0x37f;
	f.mxcsr = 0x1f80;
	if (ioctl(c->fd, KVM_SET_FPU, &f) < 0)
		return -errno;
	return 0;
}

int vm_setup_cpus(struct vm *vm, uint64_t entry, char *err, size_t errlen)
{
	struct kvm_cpuid2 *base = supported_cpuid(vm->kvm_fd);
	if (!base)
		return errbuf_fail(err, errlen, -EIO, "KVM_GET_SUPPORTED_CPUID failed: %s",
			    strerror(errno));
	size_t sz = sizeof *base + base->nent * sizeof(struct kvm_cpuid_entry2);
	struct kvm_cpuid2 *mine = malloc(sz);
	if (!mine) {
		free(base);
		return errbuf_fail(err, errlen, -ENOMEM, "out of memory");
	}
	int rc = 0;
	for (unsigned i = 0; i < vm->ncpus && rc == 0; i++) {
		struct vcpu *c = &vm->cpu[i];
		memcpy(mine, base, sz);
		for (unsigned e = 0; e < mine->nent; e++) {
			struct kvm_cpuid_entry2 *x = &mine->entries[e];
			switch (x->function) {
			case 1:
				/* Initial APIC ID, logical CPU count, hypervisor bit. */
				x->ebx = (x->ebx & 0x0000ffffu) | (i << 24) |
					 ((vm->ncpus & 0xff) << 16);
				x->ecx |= 1u << 31;
				break;
			case 0xb:
			case 0x1f:
				x->edx = i;
				break;
			}
		}
		if (ioctl(c->fd, KVM_SET_CPUID2, mine) < 0)
			rc = errbuf_fail(err, errlen, -errno, "KVM_SET_CPUID2 failed: %s", strerror(errno));
		else if ((rc = setup_lapic(c)) < 0)
			errbuf_fail(err, errlen, rc, "cannot set up the local APIC: %s", strerror(-rc));
		else if (i == 0 && (rc = setup_boot_regs(c, entry)) < 0)
			errbuf_fail(err, errlen, rc, "cannot set the boot CPU state: %s", strerror(-rc));
	}
	free(mine);
	free(base);
	return rc;
}

static int overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

int vm_add_pio(struct vm *vm, const struct vm_pio *h)
{
	if (h->len == 0 || (uint32_t)h->base + h->len > 0x10000)
		return -EINVAL;
	if (vm->npio >= VM_MAX_PIO)
		return -ENOSPC;
	for (unsigned i = 0; i < vm->npio; i++)
		if (overlaps(h->base, h->len, vm->pio[i].base, vm->pio[i].len))
			return -EINVAL;
	vm->pio[vm->npio++] = *h;
	return 0;
}

int vm_add_mmio(struct vm *vm, const struct vm_mmio *h)
{
	if (h->len == 0 || h->base + h->len < h->base)
		return -EINVAL;
	if (vm->nmmio >= VM_MAX_MMIO)
		return -ENOSPC;
	for (unsigned i = 0; i < vm->nmmio; i++)
		if (overlaps(h->base, h->len, vm->mmio[i].base, vm->mmio[i].len))
			return -EINVAL;
	vm->mmio[vm->nmmio++] = *h;
	return 0;
}

void vm_irq_line(struct vm *vm, unsigned irq, int level)
{
	struct kvm_irq_level l = { .irq = irq, .level = level ? 1 : 0 };
	ioctl(vm->vm_fd, KVM_IRQ_LINE, &l);
}

void vm_stop(struct vm *vm, enum vm_end why)
{
	int none = VM_END_NONE;
	atomic_compare_exchange_strong(&vm->end, &none, (int)why);
	for (unsigned i = 0; i < vm->ncpus; i++) {
		struct vcpu *c = &vm->cpu[i];
		if (c->run)
			__atomic_store_n(&c->run->immediate_exit, 1, __ATOMIC_SEQ_CST);
		if (c->started && !pthread_equal(c->thread, pthread_self()))
			pthread_kill(c->thread, KICK_SIGNAL);
	}
}

__attribute__((format(printf, 2, 3)))
static void vm_fail(struct vm *vm, const char *fmt, ...)
{
	int none = VM_END_NONE;
	char msg[sizeof vm->error];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (atomic_compare_exchange_strong(&vm->end, &none, (int)VM_END_ERROR))
		memcpy(vm->error, msg, sizeof msg);
	vm_stop(vm, VM_END_ERROR);
}

static uint8_t bcd(int v) { return (uint8_t)(((v / 10) << 4) | (v % 10)); }

/* The CMOS clock, read by a kernel without kvmclock for the wall time. */
static uint8_t cmos_read(struct vm *vm)
{
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	switch (vm->cmos_index & 0x7f) {
	case 0x00: return bcd(tm.tm_sec);
	case 0x02: return bcd(tm.tm_min);
	case 0x04: return bcd(tm.tm_hour);
	case 0x06: return bcd(tm.tm_wday + 1);
	case 0x07: return bcd(tm.tm_mday);
	case 0x08: return bcd(tm.tm_mon + 1);
	case 0x09: return bcd(tm.tm_year % 100);
	case 0x32: return bcd(19 + tm.tm_year / 100);
	case 0x0a: return 0x26; /* no update in progress */
	case 0x0b: return 0x02; /* 24-hour, BCD */
	case 0x0d: return 0x80; /* battery good */
	default: return 0;
	}
}

static uint8_t pio_in(struct vm *vm, uint16_t port)
{
	for (unsigned i = 0; i < vm->npio; i++) {
		const struct vm_pio *h = &vm->pio[i];
		if (port >= h->base && port - h->base < h->len)
			return h->in ? h->in(h->ctx, port - h->base) : 0xff;
	}
	if (port == 0x71)
		return cmos_read(vm);
	return 0xff;
}

static void pio_out(struct vm *vm, uint16_t port, uint8_t v)
{
	for (unsigned i = 0; i < vm->npio; i++) {
		const struct vm_pio *h = &vm->pio[i];
		if (port >= h->base && port - h->base < h->len) {
			if (h->out)
				h->out(h->ctx, port - h->base, v);
			return;
		}
	}
	if (port == 0x70)
		vm->cmos_index = v;
	/* Keyboard-controller pulse (reboot=k) or the reset control port. */
	else if ((port == 0x64 && v == 0xfe) || (port == 0xcf9 && (v & 0x04)))
		vm_stop(vm, VM_END_RESET);
}

static void handle_io(struct vcpu *c)
{
	struct kvm_run *r = c->run;
	struct vm *vm = c->vm;
	uint64_t total = (uint64_t)r->io.size * r->io.count;
	if (r->io.data_offset > vm->run_size || total > vm->run_size - r->io.data_offset) {
		vm_fail(vm, "vCPU %u: port I/O exit with data outside the run area", c->id);
		return;
	}
	uint8_t *d = (uint8_t *)r + r->io.data_offset;
	for (uint32_t n = 0; n < r->io.count; n++) {
		for (unsigned b = 0; b < r->io.size; b++) {
			uint16_t port = (uint16_t)(r->io.port + b);
			if (r->io.direction == KVM_EXIT_IO_OUT)
				pio_out(vm, port, *d);
			else
				*d = pio_in(vm, port);
			d++;
		}
	}
}

static void handle_mmio(struct vcpu *c)
{
	struct kvm_run *r = c->run;
	struct vm *vm = c->vm;
	unsigned len = r->mmio.len;
	if (len > sizeof r->mmio.data)
		len = sizeof r->mmio.data;
	uint64_t a = r->mmio.phys_addr;
	for (unsigned i = 0; i < vm->nmmio; i++) {
		const struct vm_mmio *h = &vm->mmio[i];
		if (a < h->base || a - h->base >= h->len)
			continue;
		if (r->mmio.is_write) {
			if (h->write)
				h->write(h->ctx, a - h->base, r->mmio.data, len);
		} else {
			memset(r->mmio.data, 0, sizeof r->mmio.data);
			if (h->read)
				h->read(h->ctx, a - h->base, r->mmio.data, len);
		}
		return;
	}
	if (!r->mmio.is_write)
		memset(r->mmio.data, 0xff, sizeof r->mmio.data);
}

static void report_internal_error(struct vcpu *c)
{
	struct kvm_run *r = c->run;
	struct kvm_regs regs;
	unsigned long long rip = 0;
	if (ioctl(c->fd, KVM_GET_REGS, &regs) == 0)
		rip = regs.rip;
	char bytes[200] = "";
	size_t off = 0;
	if (r->internal.suberror == KVM_INTERNAL_ERROR_EMULATION &&
	    r->emulation_failure.ndata >= 3 &&
	    (r->emulation_failure.flags & KVM_INTERNAL_ERROR_EMULATION_FLAG_INSTRUCTION_BYTES)) {
		unsigned n = r->emulation_failure.insn_size;
		if (n > sizeof r->emulation_failure.insn_bytes)
			n = sizeof r->emulation_failure.insn_bytes;
		off += (size_t)snprintf(bytes, sizeof bytes, "; instruction bytes:");
		for (unsigned i = 0; i < n; i++)
			off += (size_t)snprintf(bytes + off, sizeof bytes - off, " %02x",
						r->emulation_failure.insn_bytes[i]);
	} else {
		unsigned n = r->internal.ndata;
		if (n > sizeof r->internal.data / sizeof r->internal.data[0])
			n = sizeof r->internal.data / sizeof r->internal.data[0];
		off += (size_t)snprintf(bytes, sizeof bytes, "; data:");
		for (unsigned i = 0; i < n && off + 20 < sizeof bytes; i++)
			off += (size_t)snprintf(bytes + off, sizeof bytes - off, " %llx",
						(unsigned long long)r->internal.data[i]);
	}
	vm_fail(c->vm,
		"vCPU %u: KVM could not run the guest (internal error, suberror %u%s) at "
		"RIP 0x%llx%s",
		c->id, r->internal.suberror,
		r->internal.suberror == KVM_INTERNAL_ERROR_EMULATION ? ": emulation failure" : "",
		rip, bytes);
}

static void *vcpu_thread(void *arg)
{
	struct vcpu *c = arg;
	struct vm *vm = c->vm;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, KICK_SIGNAL);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	while (atomic_load(&vm->end) == VM_END_NONE) {
		if (ioctl(c->fd, KVM_RUN, 0) < 0) {
			if (errno == EINTR || errno == EAGAIN) {
				__atomic_store_n(&c->run->immediate_exit, 0, __ATOMIC_SEQ_CST);
				continue;
			}
			vm_fail(vm, "vCPU %u: KVM_RUN failed: %s", c->id, strerror(errno));
			break;
		}
		struct kvm_run *r = c->run;
		switch (r->exit_reason) {
		case KVM_EXIT_IO:
			handle_io(c);
			break;
		case KVM_EXIT_MMIO:
			handle_mmio(c);
			break;
		case KVM_EXIT_INTR:
			break;
		case KVM_EXIT_SHUTDOWN:
			vm_stop(vm, VM_END_TRIPLE_FAULT);
			break;
		case KVM_EXIT_SYSTEM_EVENT:
			vm_stop(vm, r->system_event.type == KVM_SYSTEM_EVENT_RESET ? VM_END_RESET
										: VM_END_POWEROFF);
			break;
		case KVM_EXIT_HLT:
			vm_stop(vm, VM_END_POWEROFF);
			break;
		case KVM_EXIT_INTERNAL_ERROR:
			report_internal_error(c);
			break;
		case KVM_EXIT_FAIL_ENTRY:
			vm_fail(vm, "vCPU %u: hardware refused to enter the guest (reason 0x%llx)",
				c->id,
				(unsigned long long)r->fail_entry.hardware_entry_failure_reason);
			break;
		default:
			vm_fail(vm, "vCPU %u: unexpected KVM exit %u", c->id, r->exit_reason);
			break;
		}
	}
	return NULL;
}

enum vm_end vm_run(struct vm *vm)
{
	/* vCPU threads inherit this mask: the kick signal is unblocked only
	 * inside them, so it never interrupts the rest of kbox. */
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, KICK_SIGNAL);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	for (unsigned i = 0; i < vm->ncpus; i++) {
		struct vcpu *c = &vm->cpu[i];
		if (pthread_create(&c->thread, NULL, vcpu_thread, c) != 0) {
			vm_fail(vm, "cannot start vCPU thread %u", i);
			break;
		}
		c->started = 1;
	}
	for (unsigned i = 0; i < vm->ncpus; i++)
		if (vm->cpu[i].started) {
			pthread_join(vm->cpu[i].thread, NULL);
			vm->cpu[i].started = 0;
		}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return (enum vm_end)atomic_load(&vm->end);
}

void vm_rearm(struct vm *vm)
{
	for (unsigned i = 0; i < vm->ncpus; i++)
		if (vm->cpu[i].run)
			__atomic_store_n(&vm->cpu[i].run->immediate_exit, 0, __ATOMIC_SEQ_CST);
	atomic_store(&vm->end, VM_END_NONE);
	vm->error[0] = '\0';
}

void vm_destroy(struct vm *vm)
{
	for (unsigned i = 0; i < VM_MAX_CPUS; i++) {
		struct vcpu *c = &vm->cpu[i];
		if (c->run)
			munmap(c->run, vm->run_size);
		if (c->fd >= 0)
			close(c->fd);
		c->run = NULL;
		c->fd = -1;
	}
	if (vm->ram)
		munmap(vm->ram, vm->ram_size);
	vm->ram = NULL;
	if (vm->ram_file >= 3)
		close(vm->ram_file);
	vm->ram_file = -1;
	if (vm->vm_fd >= 0)
		close(vm->vm_fd);
	if (vm->kvm_fd >= 0)
		close(vm->kvm_fd);
	vm->vm_fd = vm->kvm_fd = -1;
	pthread_mutex_destroy(&vm->irq_lock);
}
