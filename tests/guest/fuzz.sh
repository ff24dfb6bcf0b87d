#!/bin/sh
# The malicious-guest fuzzer (tests/guest/fuzz.c): builds the test guest,
# the ASan+UBSan objects of every module and the fuzz harness, and runs it.
# Usage: tests/guest/fuzz.sh [BUILD_DIR] [SECONDS]
#   SEED=N replays a run; VCPUS=1 or 2 (default 2) guest drivers at once.
set -eu
B=${1:-build}
SECS=${2:-30}
CC=${CC:-cc}
cd "$(dirname "$0")/../.."

if [ ! -e /dev/kvm ]; then
	echo "skip - /dev/kvm is absent: the guest fuzzer needs a KVM host"
	echo "0 passed, 0 failed"
	exit 0
fi

# The VM, the bus, the mounts, the shared pieces (lib/) and every device
# and network module: what `kbox run` wires the guest's devices with.
srcs=$(ls vmm/core/vm.c vmm/core/boot.c vmm/core/mptable.c vmm/core/virtio_bus.c vmm/sandbox/mounts.c \
	lib/*.c devices/*.c netstack/*.c)
objs=$(for s in $srcs; do printf '%s ' "$B/san/${s%.c}.o"; done)
# Same objects as `make unit` builds (the Makefile's sanitizer rule).
make -s BUILD="$B" "$B/test-guest.bin" "$B/lwip/liblwip.a" $objs
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
$CC -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wvla -Wformat=2 -fno-strict-aliasing \
	-O1 -g $SAN -I. -I"$B/lwip/include" $(pkg-config --cflags yaml-0.1) -o "$B/guest-fuzz" \
	tests/guest/fuzz.c $objs "$B/lwip/liblwip.a" $(pkg-config --libs yaml-0.1) -lbearssl -lseccomp -lpthread

seed=${SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A small quarantine keeps ASan's own memory out of the RSS check; leaks
# are LeakSanitizer's to find at exit.
rc=0
ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=16:abort_on_error=0 \
UBSAN_OPTIONS=print_stacktrace=1 \
	timeout $((SECS + 120)) "$B/guest-fuzz" "$B/test-guest.elf" "$SECS" "$seed" "$tmp" \
	"${VCPUS:-2}" || rc=$?
if [ "$rc" -ne 0 ]; then
	echo "FAIL - guest-fuzz exited $rc; replay with:" \
		"SEED=$seed VCPUS=${VCPUS:-2} tests/guest/fuzz.sh $B $SECS"
	exit 1
fi
