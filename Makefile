# kbox — see README.md.  `make` builds kbox, guest-init and the initramfs;
# `make kernel` builds the guest kernels; `make check` runs every test.

CC       ?= cc
CLANG    ?= clang
BUILD    ?= build
CFLAGS   ?= -O2 -g
KBOX_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow \
	-Wno-unused-parameter -Wvla -Wformat=2 -fno-strict-aliasing -I. \
	-MMD -MP
PKGS     := yaml-0.1 libarchive
# lwIP: Debian's source package built with kbox's options (deps/lwip/),
# cached outside the checkout; every object sees those headers.
LWIP     := $(BUILD)/lwip
LWIP_LIB := $(LWIP)/liblwip.a
KBOX_CFLAGS += -I$(LWIP)/include $(shell pkg-config --cflags $(PKGS))
# libarchive is not linked: vmm/image/archive_lib.c loads it when an image
# is first read (its dependencies would cost every kbox process's start).
LDLIBS   := $(LWIP_LIB) $(shell pkg-config --libs yaml-0.1) -lbearssl -lseccomp -lpthread
SAN      := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

# Every module source joins kbox and the unit tests; adding a file is enough.
LIB_SRCS := $(sort $(filter-out vmm/cmd/main.c,$(wildcard lib/*.c proto/*.c devices/*.c netstack/*.c vmm/*.c vmm/*/*.c)))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
SAN_OBJS := $(LIB_SRCS:%.c=$(BUILD)/san/%.o)
UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
UNIT_OBJS := $(UNIT_SRCS:%.c=$(BUILD)/san/%.o) $(BUILD)/san/tests/unit/main.o
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/fuzz/%)

DEB_PACKAGES := build-essential clang pkg-config linux-source-6.1 flex bison bc \
	libelf-dev libssl-dev cpio busybox-static libyaml-dev check \
	libbearssl-dev dpkg-dev libseccomp-dev xz-utils patch python3 musl-tools \
	iproute2 curl git sqlite3 bsdutils libarchive-dev openssl ca-certificates python3-requests debootstrap \
	qemu-system-x86 kmod e2fsprogs \
	dosfstools python3-fusepy

.PHONY: all kernel check unit layering link-check kvm-tests hw-prep hw-toolchain hw-smoke hw-workflow hw-tests pvm-smoke pvm-e2e fuse-tests exec-tests net-tests tls-tests lockdown-tests e2e guest-fuzz toolchain-image agent-tests fuzz fuzz-smoke deps clean
all: $(BUILD)/kbox $(BUILD)/guest-init $(BUILD)/initramfs.cpio

deps:
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(DEB_PACKAGES)

$(LWIP_LIB): deps/lwip/build.sh deps/lwip/lwipopts.h
	CC="$(CC)" deps/lwip/build.sh $(LWIP)

# An option changes the layout of lwIP's structures: everything rebuilds.
$(BUILD)/obj/%.o: %.c $(LWIP_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(KBOX_CFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/san/%.o: %.c $(LWIP_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(KBOX_CFLAGS) -O1 -g $(SAN) -c -o $@ $<

$(BUILD)/kbox: $(BUILD)/obj/vmm/cmd/main.o $(LIB_OBJS)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# guest-init is PID 1 in the guest: static, no dependencies.  musl keeps it
# small (every byte of the initramfs is copied by the guest kernel, which
# is slow under PVM); glibc's static build works too.
GUEST_CC ?= $(shell command -v musl-gcc >/dev/null 2>&1 && echo musl-gcc || echo $(CC))
GUEST_SRCS := $(sort $(wildcard guest-init/*.c)) proto/exec_proto.c proto/runcfg.c
$(BUILD)/guest-init: $(GUEST_SRCS) $(wildcard guest-init/*.h) proto/exec_proto.h proto/runcfg.h
	@mkdir -p $(dir $@)
	$(GUEST_CC) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Os -static -s -I. -o $@ $(GUEST_SRCS)

$(BUILD)/initramfs.cpio: $(BUILD)/guest-init guest-init/mkinitramfs.sh
	guest-init/mkinitramfs.sh $(BUILD)/guest-init $@

kernel:
	kernel-config/build.sh std $(BUILD)/kernel
	kernel-config/build.sh pvm $(BUILD)/kernel

# Unit tests: Check, always under ASan+UBSan (leaks included).
$(BUILD)/san/tests/unit/suites.h: $(UNIT_SRCS) tests/unit/gen-suites.sh
	@mkdir -p $(dir $@)
	tests/unit/gen-suites.sh $(UNIT_SRCS) > $@

$(BUILD)/san/tests/unit/main.o: tests/unit/main.c $(BUILD)/san/tests/unit/suites.h
	@mkdir -p $(dir $@)
	$(CC) $(KBOX_CFLAGS) -I$(BUILD)/san/tests/unit -O1 -g $(SAN) -c -o $@ $<

$(BUILD)/unit-tests: $(UNIT_OBJS) $(SAN_OBJS)
	$(CC) $(SAN) -o $@ $^ $(shell pkg-config --libs check libarchive) $(LDLIBS)

# Check's per-test timeouts (4 s unless a suite sets its own) are meant for
# a quiet machine; CK_TIMEOUT_MULTIPLIER stretches them for a loaded one.
unit: $(BUILD)/unit-tests layering link-check
	CK_TIMEOUT_MULTIPLIER=$${CK_TIMEOUT_MULTIPLIER:-4} ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
		UBSAN_OPTIONS=print_stacktrace=1 $(BUILD)/unit-tests

# kbox's start: libarchive (and its dependencies: libxml2, ICU, libstdc++)
# is loaded when an image is read (vmm/image/archive_lib.c), never linked;
# linked, it cost every kbox process several ms before main.
link-check: $(BUILD)/kbox
	@needed=$$(readelf -d $(BUILD)/kbox) || { echo "link-check: readelf failed"; exit 1; }; \
	if echo "$$needed" | grep -q 'NEEDED.*libarchive'; then \
		echo "link-check: $(BUILD)/kbox links libarchive; vmm/image/archive_lib.c loads it on use"; exit 1; fi
	@echo "link-check: kbox does not link libarchive"

# The layering, enforced (make unit runs it): lib/ and proto/ stand on
# their own, devices/ and netstack/ use only themselves and lib/,
# guest-init/ only proto/, and vmm/ sits on top of them all.  Inside vmm/
# the same holds a floor higher: core/ (the VM) uses lib/ and devices/,
# sandbox/ (what `kbox run` wires to it) core/ and every lower folder,
# image/ (the store) sandbox/ and below, and cmd/ (the subcommands) sits on
# top; vmm/cli.h, the exit status and error line, is for all of vmm/.  A
# lower folder's #include of a higher one fails the grep (a type or an
# inline function, which no link sees); its objects, linked with a bare
# main() and the folders it may use alone, fail the link on any call up
# the tree.  guest-init/ needs only the grep: its build compiles nothing
# but it and proto/.
LAYER_DIRS := lib proto devices netstack vmm guest-init tests
VMM_LAYER_DIRS := lib proto devices netstack vmm/core vmm/sandbox vmm/image vmm/cmd guest-init tests
empty :=
space := $(empty) $(empty)
# $(call layer,FOLDER,FOLDERS IT MAY USE[,THE FOLDERS IT IS CHECKED AGAINST])
# (a FOLDER IT MAY USE names a file too: vmm/cli is vmm/cli.o)
define layer
.PHONY: layering-$(1)
layering: layering-$(1)
layering-$(1): $(BUILD)/san/layering-main.o $(filter $(foreach d,$(1) $(2),$(BUILD)/san/$(d)/% $(BUILD)/san/$(d).o),$(SAN_OBJS))
	@if grep -nE '^\s*#\s*include\s*["<]($(subst $(space),|,$(filter-out $(1) $(2),$(or $(3),$(LAYER_DIRS)))))/' $(1)/*.[ch]; then \
		echo "layering: $(1)/ may include only $(1)/ $(addsuffix /,$(2)) (README.md, Layout)"; exit 1; fi
	@mkdir -p $(BUILD)/layering
	@$(CC) $(SAN) -o $(BUILD)/layering/$(subst /,-,$(1)) $$(filter %.o,$$^) $(LDLIBS) 2>$(BUILD)/layering/$(subst /,-,$(1)).log || \
		{ grep -o "undefined reference to .*" $(BUILD)/layering/$(subst /,-,$(1)).log | sort -u; \
		echo "layering: $(1)/ calls outside $(1)/ $(addsuffix /,$(2)) (README.md, Layout)"; exit 1; }
endef
$(eval $(call layer,lib,))
$(eval $(call layer,proto,))
$(eval $(call layer,devices,lib))
$(eval $(call layer,netstack,lib))
$(eval $(call layer,guest-init,proto))
$(eval $(call layer,vmm/core,lib devices,$(VMM_LAYER_DIRS)))
$(eval $(call layer,vmm/sandbox,vmm/core vmm/cli lib proto devices netstack,$(VMM_LAYER_DIRS)))
$(eval $(call layer,vmm/image,vmm/sandbox vmm/core vmm/cli lib proto devices netstack,$(VMM_LAYER_DIRS)))
layering:
	@echo "layering: lib/ proto/ devices/ netstack/ guest-init/, and vmm/'s core/ sandbox/ image/, stand without the folders above them"

$(BUILD)/san/layering-main.o:
	@mkdir -p $(dir $@)
	printf 'int main(void) { return 0; }\n' | $(CC) -x c -c -o $@ -

# KVM-level tests: a freestanding guest that works in ring 3.
kvm-tests: all $(BUILD)/test-guest.bin tests/guest/harness.c tests/guest/run.sh
	tests/guest/run.sh $(BUILD)

$(BUILD)/test-guest.bin: tests/guest/guest.S tests/guest/guest.ld
	@mkdir -p $(dir $@)
	$(CC) -nostdlib -static -Wl,-T,tests/guest/guest.ld -Wl,--build-id=none -o $(BUILD)/test-guest.elf tests/guest/guest.S
	objcopy -O binary $(BUILD)/test-guest.elf $@

# The FUSE server mounted through /dev/fuse, exercised by real programs.
$(BUILD)/fuse/kbox-fuse-mount: tests/fuse/kbox-fuse-mount.c $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(KBOX_CFLAGS) $(CFLAGS) -o $@ $^ $(LDLIBS)

fuse-tests: $(BUILD)/fuse/kbox-fuse-mount
	tests/fuse/run.sh $(BUILD)

# The exec agent and client against each other on the host.
exec-tests:
	tests/exec/run.sh $(BUILD)

# The network stack on a TAP device in namespaces of its own, with real
# clients (curl, git, python3, node) on the "guest" side.
net-tests: $(LWIP_LIB)
	tests/net/run.sh $(BUILD)
	tests/net/ipv6.sh $(BUILD)

# TLS: the kbox CA's certificates against strict verifiers, the
# interception engine between real clients and servers on loopback, and
# secret substitution through the stack on a TAP device.
tls-tests: $(BUILD)/kbox
	tests/tls/verify-certs.sh $(BUILD)/kbox
	tests/tls/mitm-loopback.sh $(BUILD)
	tests/tls/intercept.sh $(BUILD)

# The malicious guest: ring 3 drives every device with hostile input for
# SECONDS (SEED= replays a run).
SECONDS ?= 60
guest-fuzz: all
	tests/guest/fuzz.sh $(BUILD) $(SECONDS)

# The toolchain image: Debian bookworm + git, curl, python3, node, gcc and
# OpenCode (npm), imported as "toolchain" (docs/agent.md).  Root; network:
# Debian's archive and the npm registry only.  Cached: FORCE=1 rebuilds.
toolchain-image: $(BUILD)/kbox
	images/toolchain/build.sh $(BUILD)

# OpenCode end to end in the toolchain image (about 9 minutes on a PVM
# host; KBOX_E2E_TUI=1 adds the terminal UI).  Not in check: it needs the
# image, hence the network, and a long time under PVM.
agent-tests: all toolchain-image
	tests/e2e/opencode.sh $(BUILD)

# The lock-down: a test-hook build refuses what it must, and real boots
# still work with it on, here on this host's /dev/kvm (check runs it on
# the hardware-KVM lane, in hw-tests, as the user and as root).
lockdown-tests: all kernel
	tests/lockdown/run.sh $(BUILD)

# End to end: the real kernel and guest-init, on this host's /dev/kvm
# (PVM here: 20-100 s a boot, so CI runs only pvm-smoke on it; the full
# set runs on the emulated hardware-KVM lane, hw-tests, in CI).
E2E_SUITES := run fs net config image image-store secrets disk template fork
pvm-e2e: all kernel
	@set -e; for s in $(E2E_SUITES); do tests/e2e/$$s.sh $(BUILD); done
e2e: pvm-e2e

# One boot of each of exec, fs, net, secrets and image on this host's
# /dev/kvm, so that the pvm kernel stays proven.
pvm-smoke: all kernel
	tests/e2e/smoke.sh $(BUILD)

# The emulated hardware-KVM lane (docs/testing.md): an L1 Debian kernel
# under QEMU TCG with AMD SVM, kvm_amd inside, kbox booting vmlinux-std as
# an ordinary user.  What L1 runs is built here first (compiling inside
# L1 costs minutes).
# As root (CI), it also builds the toolchain image (cached in root's store;
# Debian's archive and the npm registry) for the workflow and agent suites,
# which skip without it.
hw-prep: all kernel $(BUILD)/test-guest.bin
	KBOX_TIMEOUT_MULT=1 tests/guest/run.sh $(BUILD) --build-only
	$(MAKE) -s BUILD=$(BUILD)/lockdown CFLAGS="-O2 -g -DKBOX_TEST_HOOKS" $(BUILD)/lockdown/kbox
	ln -sfn ../kernel $(BUILD)/lockdown/kernel
	ln -sf ../initramfs.cpio $(BUILD)/lockdown/initramfs.cpio


# e2e-workflow and e2e-agents need the toolchain image (hw-toolchain builds
# it when run as root, as in CI, ~6.5 minutes; else sudo make toolchain-image) and run as
# the ordinary user only (docs/agent.md); make hw-workflow runs just them.
# e2e-podman needs it too (podman in the guest, docs/disks.md), both ways.
HW_SUITES := smoke kvm lockdown $(E2E_SUITES:%=e2e-%) e2e-workflow@user e2e-agents@user e2e-podman
# The toolchain image, built when run as root (cached in root's store).
hw-toolchain: all
	@if [ "$$(id -u)" = 0 ]; then images/toolchain/build.sh $(BUILD); \
	else echo "hw-toolchain: not root: the workflow and agents suites use root's toolchain image if there is one (sudo make toolchain-image)"; fi

hw-smoke: hw-prep
	KBOX_HWKVM_NAME=hw-smoke tests/hwkvm/run.sh $(BUILD) smoke

hw-workflow: hw-prep hw-toolchain
	KBOX_HWKVM_NAME=hw-workflow tests/hwkvm/run.sh $(BUILD) e2e-workflow@user e2e-agents@user

# bench/agent: kbox run to each agent's first request, beside the agent on
# the host (docs/benchmarks.md); needs root and the toolchain image.
.PHONY: bench-agent hw-bench-agent
bench-agent: all kernel
	bench/agent/run.sh 3 $(BUILD)

hw-bench-agent: hw-prep
	KBOX_HWKVM_NAME=hw-bench-agent KBOX_HWKVM_SUITE_TIMEOUT=1800 tests/hwkvm/run.sh $(BUILD) bench-agent bench-agent-opencode

# Two lanes side by side in L1 (KBOX_HWKVM_JOBS=2, shared by the suites'
# rough costs): one lane's waits are the other's time to run.
hw-tests: hw-prep hw-toolchain
	KBOX_HWKVM_NAME=hw-tests KBOX_HWKVM_JOBS=$${KBOX_HWKVM_JOBS:-2} tests/hwkvm/run.sh $(BUILD) $(HW_SUITES)

# bench/boot inside L1: kbox against QEMU's microvm, both on L1's nested
# KVM (docs/benchmarks.md).  A benchmark, not a timed test: not in hw-tests.
# benchtool is built here, as L1's user cannot write to the build folder.
.PHONY: hw-bench
hw-bench: hw-prep
	B=$(BUILD) CC=$(CC) sh -c '. bench/lib/lib.sh'
	KBOX_HWKVM_NAME=hw-bench tests/hwkvm/run.sh $(BUILD) bench-boot

# bench/start: kbox run booted cold against started from a template, and
# the memory of 1, 4, 8 sandboxes either way (docs/benchmarks.md).  A
# benchmark, not a test: not in check.  ITER=N sets the iterations (the
# script's default: 1 on PVM hosts, 5 otherwise).
.PHONY: bench-start hw-bench-start
bench-start: all kernel
	bench/start/run.sh "$(ITER)" $(BUILD)

# The same inside L1 (tests/hwkvm), as the ordinary user; benchtool is
# built here, as for hw-bench.
hw-bench-start: hw-prep
	B=$(BUILD) CC=$(CC) sh -c '. bench/lib/lib.sh'
	KBOX_HWKVM_NAME=hw-bench-start tests/hwkvm/run.sh $(BUILD) bench-start

# A cold and a restored kbox run step by step (KBOX_TIMING), in L1.
.PHONY: hw-bench-start-steps
hw-bench-start-steps: hw-prep
	B=$(BUILD) CC=$(CC) sh -c '. bench/lib/lib.sh'
	KBOX_HWKVM_NAME=hw-bench-start-steps tests/hwkvm/run.sh $(BUILD) bench-start-steps

# CI: the host-side layers, the PVM smoke, every suite on the emulated
# hardware-KVM lane (as the ordinary user and as root), then the hostile
# guest against the real kbox.
check: unit fuzz-smoke kvm-tests fuse-tests exec-tests net-tests tls-tests pvm-smoke hw-tests
	$(MAKE) guest-fuzz SECONDS=30

# libFuzzer targets; FUZZ_SECONDS bounds each run.
FUZZ_SECONDS ?= 30
FUZZ_OBJS := $(LIB_SRCS:%.c=$(BUILD)/fuzzobj/%.o)
$(BUILD)/fuzzobj/%.o: %.c $(LWIP_LIB)
	@mkdir -p $(dir $@)
	$(CLANG) $(KBOX_CFLAGS) -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -c -o $@ $<

$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_OBJS)
	@mkdir -p $(dir $@)
	$(CLANG) $(KBOX_CFLAGS) -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ $< $(FUZZ_OBJS) $(LDLIBS)

fuzz: $(FUZZ_BINS)
	@set -e; for f in $(FUZZ_BINS); do \
		n=$$(basename $$f); mkdir -p tests/fuzz/corpus/$$n $(BUILD)/fuzz/new-$$n; \
		echo "fuzz: $$n for $(FUZZ_SECONDS)s"; \
		if ! $$f -max_total_time=$(FUZZ_SECONDS) -timeout=10 -artifact_prefix=$(BUILD)/fuzz/$$n- \
			$(BUILD)/fuzz/new-$$n tests/fuzz/corpus/$$n > $(BUILD)/fuzz/$$n.log 2>&1; then \
			tail -40 $(BUILD)/fuzz/$$n.log; echo "fuzz: $$n FAILED"; exit 1; fi; \
		grep -E "^Done [0-9]+ runs" $(BUILD)/fuzz/$$n.log || true; \
	done

# CI's short pass: every target, a few seconds each, from the kept corpus.
fuzz-smoke:
	$(MAKE) fuzz FUZZ_SECONDS=$${FUZZ_SECONDS:-10}

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
