/*
 * Freestanding test guest for the KVM-level tests (tests/guest/harness.c).
 *
 * On PVM hosts guest ring 0 is emulated instruction by instruction and is
 * ~1000x slower than ring 3, which runs natively (docs/PVM.md).  So ring 0
 * only does the short set-up every CPU needs -- GDT with user segments, a
 * TSS per CPU, an IDT, page tables with the U bit, and for the bootstrap
 * CPU the INIT/SIPI/SIPI that starts the others -- and then every CPU drops
 * to ring 3, where the MMIO work runs.
 *
 * Port I/O stays in ring 0: under PVM, ring 3 always runs with IOPL 0 and
 * IF 1 whatever iretq asked for, so `out` there raises #GP (MODE_IOPL
 * probes exactly that).  Ring 3 comes back to ring 0 through one `ud2` at
 * finish_gate, which the #UD handler recognises by its address.
 *
 * The harness overwrites the configuration block `cfg` at TG_CFG (0x200000,
 * struct tg_cfg in harness.c) before the first instruction runs.  Its defaults (garbage mode, one CPU, exit digit
 * 7) make the image useful on its own: `kbox run --kernel test-guest.elf`
 * feeds garbage to every port of the real kbox and then prints the line
 * Linux prints for "reboot kbox-exit=7" on COM1, which kbox takes as the
 * command's exit code.
 *
 * Protocol (mirrored in harness.c; keep the two in step):
 *   port  TG_PORT + 16*cpu: +0 out8 hello(cpu), +4 out32 x(cpu,k),
 *                           +8 in32 y(cpu,k), +12 in8 string s(cpu,n),
 *                           +13 out8 its echo, +14 out8 the IOPL probe
 *   mmio  TG_MMIO + 4K*cpu: +0 w32 hello(cpu), +8 w64 X(cpu,k),
 *                           +0x10 r32 Y(cpu,k), +0x18 w8 guest-side errors,
 *                           +0x20 w64 address of the instruction that will
 *                           fault, +0x28 w64 TG_DONE_MAGIC when garbage is
 *                           done, +0x30 w64 RFLAGS as seen in ring 3
 *   port  TG_EXC_PORT: ring-0 exception report, committed by TG_EXC_MAGIC.
 *   mmio  TG_MMIO + 0x38: w64 one report of a ring-3 script (MODE_SCRIPT)
 *   mmio  TG_MMIO + 0x40: w64 end of one script pass (SOP_NEXT): the
 *                         harness writes the next script before it returns
 *
 * MODE_SCRIPT makes ring 3 a virtio-mmio driver for the device at
 * cfg_virtio_base, following a script of 32-byte ops the harness writes to
 * guest RAM (cfg_script): every register access, ring and packet store is
 * done here, in ring 3, so it takes the real MMIO exit and ioeventfd path.
 * Ring 0 routes the device's IRQ (cfg_virtio_irq) through the IO-APIC to
 * IRQ_VEC and only counts those interrupts (irq_count), which ring 3 reports.
 */

#define TG_CFG          0x200000
#define TG_MAX_CPUS     8
#define TG_PORT         0x600
#define TG_EXC_PORT     0x6e0
#define TG_MMIO         0xcf000000 /* below kbox's virtio-mmio bus at 0xd0000000 */
#define TG_EXC_MAGIC    0x45584350
#define TG_DONE_MAGIC   0x454e4f4420424b47
#define TG_CFG_MAGIC    0x3147544b
#define TRAMP           0x10000 /* below 1 MiB, free in kbox's boot layout */
#define LAPIC           0xfee00000

#define MODE_EXITS      0
#define MODE_GARBAGE    1
#define MODE_FAULT      2
#define MODE_IOPL       3
#define MODE_SCRIPT     4
#define IRQ_VEC         0x40 /* the virtio slot's IRQ, routed by the IO-APIC */
#define IOAPIC          0xfec00000
#define FINISH_RESET    0
#define FINISH_TRIPLE   1

#define SEL_KCODE32     0x08
#define SEL_KCODE       0x10
#define SEL_KDATA       0x18
#define SEL_UDATA       0x23
#define SEL_UCODE       0x2b
#define SEL_TSS0        0x30

/* ---------------------------------------------------------------- ring 0 */

	.section .ktext, "ax"
	.code64
	.globl _start
_start:
	cli
	lgdt gdt_ptr(%rip)
	mov $SEL_KDATA, %eax
	mov %eax, %ds
	mov %eax, %es
	mov %eax, %ss
	pushq $SEL_KCODE
	lea 1f(%rip), %rax
	push %rax
	lretq
1:	mov $pml4, %eax
	mov %rax, %cr3
	call build_idt

	cmpl $1, cfg_ncpus(%rip)
	jbe cpu_common
	/* Start the other CPUs the way firmware does: the in-kernel LAPIC
	 * resets them on INIT and starts them in real mode at TRAMP on SIPI. */
	lea tramp_start(%rip), %rsi
	mov $TRAMP, %edi
	mov $(tramp_end - tramp_start), %ecx
	rep movsb
	mov $LAPIC, %esi
	movl $0x1ff, 0xf0(%rsi)                 /* SVR: APIC on, spurious 0xff */
	movl $0, 0x310(%rsi)
	movl $0x000c4500, 0x300(%rsi)           /* INIT, all but self */
	movl $(0x000c4600 | (TRAMP >> 12)), 0x300(%rsi) /* SIPI */
	movl $(0x000c4600 | (TRAMP >> 12)), 0x300(%rsi)
	jmp cpu_common

/* Every CPU, in long mode on our GDT and page tables: find out who we are,
 * take our own stacks and TSS, do the port I/O part of the run, and go to
 * ring 3 with the CPU index and the mismatches seen so far. */
cpu_common:
	mov $SEL_KDATA, %eax
	mov %eax, %ds
	mov %eax, %es
	mov %eax, %ss
	xor %eax, %eax
	mov %eax, %fs
	mov %eax, %gs
	mov $LAPIC, %esi
	mov 0x20(%rsi), %ebx
	shr $24, %ebx                           /* APIC ID = vCPU index */
	cmp $TG_MAX_CPUS, %ebx
	jae dead

	lea 1(%rbx), %eax
	shl $12, %eax
	lea kstacks(%rip), %rsp
	add %rax, %rsp

	mov %ebx, %edi
	shl $7, %edi
	lea tss_area(%rip), %rax
	add %rax, %rdi                          /* this CPU's TSS */
	mov %rsp, 4(%rdi)                       /* RSP0 */
	movw $104, 0x66(%rdi)                   /* no I/O bitmap: IOPL decides */

	/* 16-byte available 64-bit TSS descriptor for base %rdi, limit 0x67 */
	mov %rdi, %rax
	mov %eax, %ecx
	and $0xffffff, %ecx
	shl $16, %rcx
	or $0x67, %rcx
	movabs $0x0000890000000000, %rdx
	or %rdx, %rcx
	mov %rax, %rdx
	shr $24, %rdx
	and $0xff, %edx
	shl $56, %rdx
	or %rdx, %rcx
	mov %ebx, %edx
	shl $4, %edx
	lea gdt_tss(%rip), %r8
	mov %rcx, (%r8,%rdx)
	shr $32, %rax
	mov %rax, 8(%r8,%rdx)
	lea SEL_TSS0(%rdx), %eax
	ltr %ax

	/* The triple-fault run has no IDT at all: the first exception in
	 * ring 3 cannot be delivered, nor can #GP or #DF. */
	cmpl $FINISH_TRIPLE, cfg_finish(%rip)
	je 2f
	lidt idt_ptr(%rip)
	jmp 3f
2:	lidt null_idt_ptr(%rip)
3:
	mov %ebx, %r15d
	mov %ebx, %r14d
	shl $4, %r14d
	add $TG_PORT, %r14d
	xor %r12d, %r12d
	mov cfg_mode(%rip), %eax
	cmp $MODE_GARBAGE, %eax
	jne 4f
	call port_garbage
	jmp 5f
4:	mov %r14d, %edx
	mov %r15d, %eax
	out %al, (%dx)                          /* hello */
	cmpl $MODE_SCRIPT, cfg_mode(%rip)
	jne 6f
	call irq_route
6:	cmpl $MODE_EXITS, cfg_mode(%rip)
	jne 5f
	call port_rounds
5:
	lea 1(%rbx), %eax
	shl $12, %eax
	lea ustacks(%rip), %rcx
	add %rcx, %rax
	pushq $SEL_UDATA
	push %rax
	cmpl $MODE_SCRIPT, cfg_mode(%rip)
	je 7f
	pushq $0x3002                           /* IOPL 3, interrupts off */
	jmp 8f
7:	pushq $0x202                            /* interrupts on, to count them */
8:
	pushq $SEL_UCODE
	lea user_main(%rip), %rax
	push %rax
	mov %ebx, %edi
	mov %r12d, %esi
	iretq

/* Only the virtio slots' IRQs may interrupt: the PIC and LINT0 masked,
 * the LAPIC on, the IO-APIC pins cfg_virtio_irq .. +VIRTIO_PINS-1 (one per
 * device on the bus) edge-triggered to IRQ_VEC on APIC 0. */
#define VIRTIO_PINS 4
irq_route:
	mov $0xff, %al
	out %al, $0x21
	out %al, $0xa1
	mov $LAPIC, %esi
	movl $0x1ff, 0xf0(%rsi)
	movl $0x10000, 0x350(%rsi)
	mov $IOAPIC, %esi
	mov cfg_virtio_irq(%rip), %eax
	lea VIRTIO_PINS(%rax), %ecx
2:	cmp $24, %eax                           /* the IO-APIC has 24 pins */
	jae 1f
	cmp %ecx, %eax
	jae 1f
	lea 0x11(,%rax,2), %edx
	mov %edx, (%rsi)
	movl $0, 0x10(%rsi)                     /* destination APIC 0 */
	dec %edx
	mov %edx, (%rsi)
	movl $IRQ_VEC, 0x10(%rsi)               /* fixed, edge, unmasked */
	inc %eax
	jmp 2b
1:	ret

/* x(cpu,k) out, y(cpu,k) in and checked, for k < cfg_rounds, then 64
 * bytes s(cpu,n) = 7n + 31cpu + 1 in by rep insb, checked and echoed by
 * rep outsb; mismatches counted in %r12d. */
port_rounds:
	xor %ebx, %ebx
1:	cmp cfg_rounds(%rip), %ebx
	jae 2f
	call xval
	lea 4(%r14), %edx
	out %eax, (%dx)
	lea 8(%r14), %edx
	in (%dx), %eax
	mov %eax, %ecx
	call yval
	cmp %eax, %ecx
	je 3f
	inc %r12d
3:	inc %ebx
	jmp 1b

	/* String input: KVM may carry a whole rep ins in one exit, so this
	 * checks that every byte of such an exit comes back in order. */
2:	mov %r15d, %eax
	shl $6, %eax
	lea kbuf(%rip), %rdi
	add %rax, %rdi
	mov %rdi, %rsi
	lea 12(%r14), %edx
	mov $64, %ecx
	rep insb
	imul $31, %r15d, %r8d
	xor %ecx, %ecx
4:	imul $7, %ecx, %eax
	lea 1(%rax,%r8), %eax
	cmp %al, (%rsi,%rcx)
	je 5f
	inc %r12d
5:	inc %ecx
	cmp $64, %ecx
	jb 4b
	lea 13(%r14), %edx
	mov $64, %ecx
	rep outsb                               /* and echo it back */
	mov %r15d, %ebx
	ret

/* The CPUs share the ports 0..0xffff out between them (this runs in
 * emulated ring 0, so each port costs microseconds): a write of random
 * size and value to each, then a read of random size.  Only the two reset
 * triggers are tamed (0x64 <- 0xfe, 0xcf9 bit 2), with byte accesses near
 * them so no wider write reaches them: a reset is legitimate guest
 * behaviour, not what this run probes.  Then string I/O, a page through one
 * exit each, the first to the UART after setting its line back to normal so
 * the harness can count the bytes.  Finally the PIC is put back in a
 * known, fully masked state: ring 3 runs with interrupts on under PVM and
 * must not take one the garbage armed. */
port_garbage:
	call rnd_seed
	mov cfg_ncpus(%rip), %ecx
	cmp $1, %ecx
	adc $0, %ecx                            /* 0 CPUs means 1 */
	mov %r15d, %eax
	inc %eax
	shl $16, %eax
	xor %edx, %edx
	div %ecx
	mov %eax, %r9d                          /* end: (id+1) * 64K / ncpus */
	mov %r15d, %eax
	shl $16, %eax
	xor %edx, %edx
	div %ecx
	mov %eax, %ebx                          /* start: id * 64K / ncpus */
1:	cmp %r9d, %ebx
	jae 11f
	call rnd
	mov %ebx, %edx
	lea -0x61(%rbx), %ecx
	cmp $4, %ecx
	jb 7f
	lea -0xcf6(%rbx), %ecx
	cmp $4, %ecx
	jb 7f
	mov %rax, %rcx
	shr $32, %rcx
	and $3, %ecx
	jz 2f
	cmp $1, %ecx
	je 3f
	out %eax, (%dx)
	jmp 4f
2:	out %al, (%dx)
	jmp 4f
3:	out %ax, (%dx)
4:	mov %rax, %rcx
	shr $40, %rcx
	and $3, %ecx
	jz 5f
	cmp $1, %ecx
	je 6f
	in (%dx), %eax
	jmp 9f
5:	in (%dx), %al
	jmp 9f
6:	in (%dx), %ax
	jmp 9f
7:	cmp $0x64, %ebx
	jne 8f
	cmp $0xfe, %al
	jne 8f
	xor %eax, %eax
8:	cmp $0xcf9, %ebx
	jne 10f
	and $0xfb, %al
10:	out %al, (%dx)
	in (%dx), %al
9:	inc %ebx
	jmp 1b

11:	call uart_sane
	lea iobuf(%rip), %rsi
	mov $0x3f8, %edx
	mov $4096, %ecx
	rep outsb
	lea iobuf(%rip), %rdi
	mov $4096, %ecx
	rep insb
	lea iobuf(%rip), %rsi
	mov $0x1234, %edx
	mov $1024, %ecx
	rep outsl
	lea iobuf(%rip), %rdi
	mov $1024, %ecx
	rep insl

	mov $0x11, %al                          /* ICW1: init, ICW4 follows */
	out %al, $0x20
	out %al, $0xa0
	mov $0x20, %al                          /* ICW2: vectors 0x20.. */
	out %al, $0x21
	mov $0x28, %al
	out %al, $0xa1
	mov $0x04, %al                          /* ICW3: slave on IRQ2 */
	out %al, $0x21
	mov $0x02, %al
	out %al, $0xa1
	mov $0x01, %al                          /* ICW4: 8086 mode */
	out %al, $0x21
	out %al, $0xa1
	mov $0xff, %al                          /* mask everything */
	out %al, $0x21
	out %al, $0xa1
	mov %r15d, %ebx
	ret

dead:
	cli
	hlt
	jmp dead

/* Interrupt gates for all 256 vectors, each pointing at its 16-byte stub,
 * so a stray interrupt is reported by number rather than as a #GP. */
build_idt:
	lea idt(%rip), %rdi
	lea exc_stubs(%rip), %rsi
	xor %ecx, %ecx
1:	mov %rsi, %rax
	movzwl %ax, %edx
	or $(SEL_KCODE << 16), %edx
	mov %rax, %r8
	shr $16, %r8
	and $0xffff, %r8d
	shl $48, %r8
	movabs $0x00008e0000000000, %r9
	or %r9, %r8
	or %rdx, %r8
	mov %r8, (%rdi)
	shr $32, %rax
	mov %rax, 8(%rdi)
	add $16, %rdi
	add $16, %rsi
	inc %ecx
	cmp $256, %ecx
	jb 1b
	ret

	.balign 16
exc_stubs:
	.set v, 0
	.rept 256
	.balign 16
	.if (v == 8) || (v >= 10 && v <= 14) || (v == 17) || (v == 21) || (v == 29) || (v == 30)
	.else
	pushq $0                                /* no error code from the CPU */
	.endif
	pushq $v
	jmp exc_common
	.set v, v + 1
	.endr

/* #UD at finish_gate is ring 3 asking to end the run: say the exit code
 * on COM1 for kbox, then reset.  Anything else is reported to the harness
 * -- vector, error code, RIP, CS|cpu<<16 -- before the reset. */
exc_common:
	cmpq $IRQ_VEC, (%rsp)
	jne 0f
	lock incq irq_count(%rip)
	push %rsi
	mov $LAPIC, %esi
	movl $0, 0xb0(%rsi)                     /* EOI */
	pop %rsi
	add $16, %rsp
	iretq
0:	cmpq $6, (%rsp)
	jne 1f
	cmpq $SEL_UCODE, 24(%rsp)
	jne 1f
	lea finish_gate(%rip), %rax
	cmp %rax, 16(%rsp)
	jne 1f
	call uart_sane
	mov cfg_exit_digit(%rip), %eax
	and $7, %eax
	add $'0', %eax
	mov %al, exit_digit(%rip)
	lea exit_msg(%rip), %rsi
	mov $0x3f8, %edx
	mov $(exit_msg_end - exit_msg), %ecx
	rep outsb
	jmp 2f
1:
	mov $TG_EXC_PORT, %edx
	mov (%rsp), %eax
	out %eax, (%dx)
	add $4, %edx
	mov 8(%rsp), %eax
	out %eax, (%dx)
	add $4, %edx
	mov 16(%rsp), %eax
	out %eax, (%dx)
	add $4, %edx
	mov 20(%rsp), %eax
	out %eax, (%dx)
	add $4, %edx
	mov $LAPIC, %esi
	mov 0x20(%rsi), %eax
	shr $24, %eax
	shl $16, %eax
	movzwl 24(%rsp), %ecx
	or %ecx, %eax
	out %eax, (%dx)
	mov $(TG_EXC_PORT + 0x1c), %edx
	mov $TG_EXC_MAGIC, %eax
	out %eax, (%dx)
2:	mov $0xfe, %al
	out %al, $0x64
	jmp dead

/* COM1 back to 8N1 with DLAB off and no loopback, whatever was written
 * to it before, so that THR writes come out. */
uart_sane:
	mov $0x3fb, %edx
	mov $0x03, %al
	out %al, (%dx)
	mov $0x3fc, %edx
	mov $0x0b, %al                          /* DTR, RTS, OUT2 */
	out %al, (%dx)
	ret

/* Copied to TRAMP and entered there by each SIPI'd CPU in real mode with
 * CS = TRAMP >> 4: protected mode, then long mode on our page tables. */
	.code16
	.balign 16
tramp_start:
	cli
	mov %cs, %ax
	mov %ax, %ds
	lgdtl (tr_gdt_ptr - tramp_start)
	mov %cr0, %eax
	or $1, %eax
	mov %eax, %cr0
	ljmpl $SEL_KCODE32, $(TRAMP + tr_pm32 - tramp_start)
	.code32
tr_pm32:
	mov $SEL_KDATA, %eax
	mov %eax, %ds
	mov %eax, %es
	mov %eax, %ss
	mov %cr4, %eax
	or $0x20, %eax                          /* PAE */
	mov %eax, %cr4
	mov $pml4, %eax
	mov %eax, %cr3
	mov $0xc0000080, %ecx                   /* EFER.LME */
	rdmsr
	or $0x100, %eax
	wrmsr
	mov %cr0, %eax
	or $0x80000000, %eax
	mov %eax, %cr0
	ljmp $SEL_KCODE, $cpu_common
	.balign 4
tr_gdt_ptr:
	.word gdt_end - gdt - 1
	.long gdt
tramp_end:
	.code64

	.section .kdata, "aw"
	.balign 4096
/* Identity map of 4 GiB in 2 MiB pages.  The first 2 MiB (this image's
 * ring-0 part, the boot area, the trampoline) and the LAPIC/IO-APIC page are
 * supervisor-only; everything else is open to ring 3. */
pml4:
	.quad pdpt + 7
	.fill 511, 8, 0
pdpt:
	.quad pd + 7, pd + 0x1007, pd + 0x2007, pd + 0x3007
	.fill 508, 8, 0
pd:
	.set a, 0
	.rept 2048
	.if (a == 0) || (a == 0xfec00000)
	.quad a + 0x83
	.else
	.quad a + 0x87
	.endif
	.set a, a + 0x200000
	.endr

	.balign 16
gdt:
	.quad 0
	.quad 0x00cf9a000000ffff                /* 0x08 ring-0 code, 32-bit */
	.quad 0x00af9a000000ffff                /* 0x10 ring-0 code, 64-bit */
	.quad 0x00cf92000000ffff                /* 0x18 ring-0 data */
	.quad 0x00cff2000000ffff                /* 0x20 ring-3 data */
	.quad 0x00affa000000ffff                /* 0x28 ring-3 code, 64-bit */
gdt_tss:
	.fill TG_MAX_CPUS * 2, 8, 0             /* 0x30 + 16*cpu, filled per CPU */
gdt_end:

gdt_ptr:
	.word gdt_end - gdt - 1
	.quad gdt
idt_ptr:
	.word 256 * 16 - 1
	.quad idt
null_idt_ptr:
	.word 0
	.quad 0

	.balign 16
idt:
	.fill 256 * 2, 8, 0
	.balign 64
kbuf:
	.fill TG_MAX_CPUS * 64, 1, 0
	.balign 128
tss_area:
	.fill TG_MAX_CPUS * 128, 1, 0
	.balign 4096
kstacks:
	.fill TG_MAX_CPUS * 4096, 1, 0

/* ---------------------------------------------------------------- ring 3 */

	.section .udata, "aw"
cfg:
cfg_magic:      .long TG_CFG_MAGIC
cfg_ncpus:      .long 1
cfg_mode:       .long MODE_GARBAGE
cfg_finish:     .long FINISH_RESET
cfg_rounds:     .long 64
cfg_seed:       .long 0x2545f491
cfg_mmio_pages: .long 8192                  /* through the virtio-mmio bus */
cfg_exit_digit: .long 7
cfg_mmio_base:  .quad TG_MMIO
cfg_virtio_base: .quad 0xd0000000                /* VIRTIO_BUS_BASE: kbox's first device */
cfg_virtio_hits: .long 4096
cfg_virtio_irq: .long 5                     /* VIRTIO_BUS_FIRST_IRQ */
cfg_script:     .quad 0
	.balign 64
done_count:     .long 0
	.balign 8
irq_count:      .quad 0
/* What Linux prints when guest-init reboots with kbox's exit command. */
exit_msg:       .ascii "\nreboot: Restarting system with command 'kbox-exit="
exit_digit:     .ascii "0'\n"
exit_msg_end:
	.balign 4096
iobuf:
	.fill 4096, 1, 0
ustacks:
	.fill TG_MAX_CPUS * 4096, 1, 0

	.section .utext, "ax"
/* %edi = CPU index, %esi = mismatches ring 0 saw.  Kept for the whole
 * run: %r15d index, %r13 its MMIO window, %r12d mismatches. */
user_main:
	mov %edi, %r15d
	mov %esi, %r12d
	mov %edi, %r14d
	shl $4, %r14d
	add $TG_PORT, %r14d
	mov %edi, %r13d
	shl $12, %r13d
	mov $TG_MMIO, %eax
	add %rax, %r13
	mov cfg_mode(%rip), %eax
	cmp $MODE_GARBAGE, %eax
	je mmio_garbage
	cmp $MODE_FAULT, %eax
	je fault
	cmp $MODE_IOPL, %eax
	je iopl
	cmp $MODE_SCRIPT, %eax
	je script

exits:
	mov %r15d, (%r13)
	xor %ebx, %ebx
1:	cmp cfg_rounds(%rip), %ebx
	jae 2f
	call xval
	mov %eax, %ecx
	not %ecx
	shl $32, %rax
	or %rcx, %rax
	mov %rax, 8(%r13)
	mov 0x10(%r13), %ecx
	call yval
	xor $0x55555555, %eax
	cmp %eax, %ecx
	je 3f
	inc %r12d
3:	inc %ebx
	jmp 1b
2:	mov %r12b, 0x18(%r13)
	jmp finish

/* x(cpu,k) in %eax for k = %ebx; clobbers only %r8. */
xval:
	imul $0x9e3779b1, %ebx, %eax
	mov %r15d, %r8d
	shl $16, %r8d
	xor %r8d, %eax
	xor $0xa5000000, %eax
	ret

/* y(cpu,k) = 5*x + cpu, the value the harness answers with. */
yval:
	call xval
	lea (%rax,%rax,4), %eax
	add %r15d, %eax
	ret

/* hlt at CPL 3 must raise #GP(0) through the IDT with CS = SEL_UCODE. */
fault:
	lea fault_insn(%rip), %rax
	mov %rax, 0x20(%r13)
fault_insn:
	hlt
	jmp finish

/* What ring 3 really runs with, then one port write: it reaches the port
 * (hardware KVM honours IOPL 3) or raises #GP at iopl_insn (PVM). */
iopl:
	pushfq
	pop %rax
	mov %rax, 0x30(%r13)
	lea iopl_insn(%rip), %rax
	mov %rax, 0x20(%r13)
	lea 14(%r14), %edx
	mov $0x5a, %al
iopl_insn:
	out %al, (%dx)
	jmp finish

/* The script interpreter: ops of four qwords {op | mask << 32, a, b, c}
 * from cfg_script + 256 KiB * cpu until SOP_END (or an unknown op).  Reports go to
 * 0x38(%r13) one qword each; a poll reports the value it last saw, with
 * bit 32 set if it gave up after c tries.  %rbp = the device window. */
#define SOP_END   0
#define SOP_MW    1 /* write32 b to register a */
#define SOP_MR    2 /* read32 register a, report it */
#define SOP_ST    3 /* store the c low bytes (1, 2, 4, 8) of b at address a */
#define SOP_WAIT  4 /* poll the u16 at a until it is b, at most c times */
#define SOP_MWAIT 5 /* poll register a until (value & mask) == b, c times */
#define SOP_REP   6 /* report c qwords from address a */
#define SOP_IRQS  7 /* report irq_count */
#define SOP_NEXT  8 /* write b to TG_MMIO+0x40 (the harness rewrites the
		       script meanwhile), then start the script again */
#define SOP_MWX   9 /* write the c low bytes (1, 2, 4, 8) of b to register a */
#define SOP_MRX  10 /* read c bytes (1, 2, 4, 8) of register a, report them */
script:
	mov %r15, %rsi
	shl $18, %rsi                           /* vCPU n's script: +n * 256 KiB */
	add cfg_script(%rip), %rsi
	mov cfg_virtio_base(%rip), %rbp
1:	mov (%rsi), %rax
	mov 8(%rsi), %rdi
	mov 16(%rsi), %rdx
	mov 24(%rsi), %rcx
	add $32, %rsi
	mov %rax, %r9
	shr $32, %r9                            /* mask */
	cmp $SOP_MW, %eax
	je 10f
	cmp $SOP_MR, %eax
	je 20f
	cmp $SOP_ST, %eax
	je 30f
	cmp $SOP_WAIT, %eax
	je 40f
	cmp $SOP_MWAIT, %eax
	je 50f
	cmp $SOP_REP, %eax
	je 60f
	cmp $SOP_IRQS, %eax
	je 70f
	cmp $SOP_NEXT, %eax
	je 80f
	cmp $SOP_MWX, %eax
	je 90f
	cmp $SOP_MRX, %eax
	je 95f
	jmp finish
10:	mov %edx, (%rbp,%rdi)
	jmp 1b
20:	mov (%rbp,%rdi), %eax
	mov %rax, 0x38(%r13)
	jmp 1b
30:	cmp $1, %ecx
	jne 31f
	mov %dl, (%rdi)
	jmp 1b
31:	cmp $2, %ecx
	jne 32f
	mov %dx, (%rdi)
	jmp 1b
32:	cmp $4, %ecx
	jne 33f
	mov %edx, (%rdi)
	jmp 1b
33:	mov %rdx, (%rdi)
	jmp 1b
40:	movzwl (%rdi), %eax
	cmp %dx, %ax
	je 41f
	pause
	dec %rcx
	jnz 40b
	bts $32, %rax
41:	mov %rax, 0x38(%r13)
	jmp 1b
50:	mov (%rbp,%rdi), %eax
	mov %eax, %r8d
	and %r9d, %r8d
	cmp %edx, %r8d
	je 41b
	dec %rcx
	jnz 50b
	bts $32, %rax
	jmp 41b
60:	test %rcx, %rcx
	jz 1b
	mov (%rdi), %rax
	mov %rax, 0x38(%r13)
	add $8, %rdi
	dec %rcx
	jmp 60b
70:	mov irq_count(%rip), %rax
	mov %rax, 0x38(%r13)
	jmp 1b
80:	mov %rdx, 0x40(%r13)
	jmp script
90:	lea (%rbp,%rdi), %rdi
	cmp $1, %ecx
	jne 91f
	mov %dl, (%rdi)
	jmp 1b
91:	cmp $2, %ecx
	jne 92f
	mov %dx, (%rdi)
	jmp 1b
92:	cmp $4, %ecx
	jne 93f
	mov %edx, (%rdi)
	jmp 1b
93:	mov %rdx, (%rdi)
	jmp 1b
95:	lea (%rbp,%rdi), %rdi
	xor %eax, %eax
	cmp $1, %ecx
	jne 96f
	mov (%rdi), %al
	jmp 41b
96:	cmp $2, %ecx
	jne 97f
	mov (%rdi), %ax
	jmp 41b
97:	cmp $4, %ecx
	jne 98f
	mov (%rdi), %eax
	jmp 41b
98:	mov (%rdi), %rax
	jmp 41b

/* xorshift64 state in %r10, seeded from cfg_seed and the CPU index. */
rnd_seed:
	mov cfg_seed(%rip), %r10d
	lea 1(%r15), %eax
	movabs $0x9e3779b97f4a7c15, %rcx
	imul %rcx, %rax
	xor %rax, %r10
	or $1, %r10
	ret

/* Next xorshift64 value in %rax; clobbers %r11. */
rnd:
	mov %r10, %r11
	shl $13, %r11
	xor %r11, %r10
	mov %r10, %r11
	shr $7, %r11
	xor %r11, %r10
	mov %r10, %r11
	shl $17, %r11
	xor %r11, %r10
	mov %r10, %rax
	ret

/* One access of random size, offset (unaligned and page-crossing ones
 * included) and value per MMIO page, then a read of the same. */
mmio_garbage:
	call rnd_seed
	mov cfg_mmio_base(%rip), %rsi
	mov cfg_mmio_pages(%rip), %ebp
	xor %ebx, %ebx
1:	cmp %ebp, %ebx
	jae 6f
	call rnd
	mov %rbx, %rdi
	shl $12, %rdi
	add %rsi, %rdi
	mov %eax, %ecx
	and $0xfff, %ecx
	add %rcx, %rdi
	mov %rax, %rdx
	ror $17, %rdx
	mov %rax, %rcx
	shr $32, %rcx
	and $3, %ecx
	jz 2f
	cmp $1, %ecx
	je 3f
	cmp $2, %ecx
	je 4f
	mov %rdx, (%rdi)
	mov (%rdi), %rdx
	jmp 5f
2:	mov %dl, (%rdi)
	mov (%rdi), %dl
	jmp 5f
3:	mov %dx, (%rdi)
	mov (%rdi), %dx
	jmp 5f
4:	mov %edx, (%rdi)
	mov (%rdi), %edx
5:	inc %ebx
	jmp 1b

	/* A virtio-mmio register file gets far more: aligned dwords anywhere
	 * in its registers, values biased towards the small numbers its
	 * registers take (status bits, queue indexes, "ready"), a read after
	 * every write. */
6:	mov cfg_virtio_base(%rip), %rsi
	mov cfg_virtio_hits(%rip), %ebp
	xor %ebx, %ebx
1:	cmp %ebp, %ebx
	jae 7f
	call rnd
	mov %eax, %ecx
	and $0x1fc, %ecx
	lea (%rsi,%rcx), %rdi
	mov %rax, %rdx
	shr $32, %rdx
	mov %eax, %ecx
	shr $10, %ecx
	and $3, %ecx
	jz 3f
	cmp $1, %ecx
	je 2f
	and $0xf, %edx
	cmp $2, %ecx
	je 3f
	and $1, %edx
	jmp 3f
2:	and $0xff, %edx
3:	mov %edx, (%rdi)
	mov (%rdi), %edx
	inc %ebx
	jmp 1b
7:	movabs $TG_DONE_MAGIC, %rax
	mov %rax, 0x28(%r13)

/* The last CPU to arrive ends the VM through the #UD at finish_gate: a
 * reset, or with no IDT a triple fault.  The others wait to be stopped. */
finish:
	mov $1, %eax
	lock xadd %eax, done_count(%rip)
	inc %eax
	cmp cfg_ncpus(%rip), %eax
	jae finish_gate
1:	pause
	jmp 1b
finish_gate:
	ud2
	jmp 1b
