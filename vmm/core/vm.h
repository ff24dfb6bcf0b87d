/* The virtual machine: /dev/kvm, guest RAM, in-kernel irqchip and PIT,
 * vCPU threads and the port/MMIO buses devices hang off. */
#ifndef KBOX_VM_H
#define KBOX_VM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/guest_mem.h"

#define VM_MAX_CPUS 64u
#define VM_MAX_PIO  16u
#define VM_MAX_MMIO 16u

/* Why the VM stopped. */
enum vm_end {
	VM_END_NONE = 0,
	VM_END_RESET,       /* the guest asked for a reboot (reboot=k, reset event) */
	VM_END_POWEROFF,    /* a shutdown system event */
	VM_END_TRIPLE_FAULT,/* KVM_EXIT_SHUTDOWN */
	VM_END_STOPPED,     /* the host asked (vm_stop) */
	VM_END_ERROR,       /* a vCPU could not go on; see vm.error */
};

struct vm_pio {
	uint16_t base, len;
	uint8_t (*in)(void *ctx, unsigned off);
	void (*out)(void *ctx, unsigned off, uint8_t v);
	void *ctx;
};

struct vm_mmio {
	uint64_t base, len;
	void (*read)(void *ctx, uint64_t off, uint8_t *data, unsigned len);
	void (*write)(void *ctx, uint64_t off, const uint8_t *data, unsigned len);
	void *ctx;
};

struct vm;

struct vcpu {
	struct vm *vm;
	unsigned id;
	int fd;
	struct kvm_run *run;
	pthread_t thread;
	int started;
};

struct vm {
	int kvm_fd, vm_fd;
	size_t run_size;
	void *ram;
	uint64_t ram_size, low_ram, high_ram;
	/* RAM restored from a snapshot is a private mapping of this file
	 * (a descriptor >= 3, else -1) at ram_file_off: where the pages the
	 * guest has not written since come from (snapshot_ram_known_zero). */
	int ram_file;
	uint64_t ram_file_off;
	struct guest_mem mem;
	unsigned ncpus;
	struct vcpu cpu[VM_MAX_CPUS];
	struct vm_pio pio[VM_MAX_PIO];
	unsigned npio;
	struct vm_mmio mmio[VM_MAX_MMIO];
	unsigned nmmio;
	atomic_int end;        /* enum vm_end; first writer wins */
	char error[512];       /* set with VM_END_ERROR */
	pthread_mutex_t irq_lock;
	uint8_t cmos_index;
};

/* Open /dev/kvm and create a VM with ncpus vCPUs and mem_mib MiB of RAM
 * (below 3 GiB, the rest above 4 GiB), an in-kernel irqchip and PIT.
 * Returns 0, or a negative errno with err holding one line for the user
 * that says what to do. */
int vm_create(struct vm *vm, unsigned ncpus, uint64_t mem_mib, char *err, size_t errlen);

/* Put every vCPU in its initial state: CPUID from KVM_GET_SUPPORTED_CPUID
 * with each CPU's own APIC ID, LAPIC LINT0/LINT1 wiring, and for vCPU 0 the
 * 64-bit boot protocol state (long mode, identity paging from boot.h,
 * RIP = entry, RSI = boot_params).  Others wait for INIT/SIPI. */
int vm_setup_cpus(struct vm *vm, uint64_t entry, char *err, size_t errlen);

/* Register port or MMIO handlers.  Returns 0 or -ENOSPC/-EINVAL (zero
 * length or overlap with an existing handler). */
int vm_add_pio(struct vm *vm, const struct vm_pio *h);
int vm_add_mmio(struct vm *vm, const struct vm_mmio *h);

/* Drive an interrupt line of the in-kernel IO-APIC/PIC. */
void vm_irq_line(struct vm *vm, unsigned irq, int level);

/* Start one thread per vCPU and wait until the VM ends. */
enum vm_end vm_run(struct vm *vm);

/* End the VM from any thread (first reason wins) and kick every vCPU out
 * of KVM_RUN. */
void vm_stop(struct vm *vm, enum vm_end why);

/* Make a VM that vm_stop ended runnable again (vm_run may be called
 * anew): the end reason cleared, every vCPU's immediate_exit too.  Only
 * while no vCPU thread runs. */
void vm_rearm(struct vm *vm);

/* Unmap RAM and every vCPU's run area and close the vCPU, VM and
 * /dev/kvm fds.  Safe after a vm_create that failed; the vCPU threads
 * must have ended (vm_run has returned, or never ran). */
void vm_destroy(struct vm *vm);

/* The guest TSC frequency in kHz (KVM_GET_TSC_KHZ on vCPU 0), or 0 if KVM
 * cannot say.  A kernel told this skips calibrating against the PIT. */
unsigned vm_tsc_khz(struct vm *vm);

/* 1 if /dev/kvm is PVM (the kvm_pvm module), not hardware virtualization.
 * KBOX_KVM_MODE=pvm|hw overrides the probe. */
int vm_is_pvm(void);

#endif
