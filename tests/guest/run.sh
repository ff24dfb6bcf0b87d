#!/bin/sh
# KVM-level tests: build the harness against kbox's VM code and run it on
# the test guest, then boot the same guest with the real kbox binary.
# Usage: tests/guest/run.sh BUILD_DIR [CASE | --build-only]
# KBOX_HARNESS_SKIP: case names to leave out (kbox-garbage: the real kbox
# on the garbage guest), with KBOX_HARNESS_SKIP_WHY saying why.
set -eu
B=${1:-build}
CASE=${2:-}
CC=${CC:-cc}
cd "$(dirname "$0")/../.."

if [ ! -e /dev/kvm ]; then
	echo "skip - /dev/kvm is absent: KVM-level tests need a KVM host"
	echo "0 passed, 0 failed"
	exit 0
fi

GUEST=$B/test-guest.elf
[ -f "$GUEST" ] || { echo "FAIL - $GUEST missing (make $B/test-guest.bin)"; exit 1; }

# KBOX_TIMEOUT_MULT (whole number) stretches the waits below and the
# harness's own watchdogs, for a loaded or emulated host.
mult=${KBOX_TIMEOUT_MULT:-1}
srcs="tests/guest/harness.c tests/guest/tg.h vmm/core/vm.c lib/guest_mem.c vmm/core/boot.c vmm/core/mptable.c
	vmm/core/serial.c vmm/core/virtio_bus.c devices/virtio_mmio.c devices/virtio_mmio_state.c devices/virtqueue.c
	devices/virtio_vsock.c devices/vsock_unix.c lib/errbuf.c lib/fileio.c lib/statebuf.c
	vmm/core/snapshot.c vmm/core/snapshot_file.c"
# Built here unless a build newer than every source is at hand (the
# hardware-KVM lane builds it on the host before it boots L1).
if [ ! -x "$B/kvm-harness" ] || [ -n "$(find $srcs lib/*.h vmm/*.h vmm/*/*.h devices/*.h netstack/*.h -newer "$B/kvm-harness" 2>/dev/null)" ]; then
	# shellcheck disable=SC2046
	$CC -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wvla \
		-O2 -g -I. -o "$B/kvm-harness" $(echo "$srcs" | tr ' \t\n' '\n\n\n' | grep '\.c$') -lpthread
fi
[ "$CASE" = --build-only ] && exit 0

out=$(mktemp)
trap 'rm -f "$out" "$out.rc" "$out.kbox"' EXIT
# The harness bounds each run itself; timeout is the backstop.
{ rc=0; timeout $((150 * mult)) "$B/kvm-harness" "$GUEST" $CASE || rc=$?; echo $rc >"$out.rc"; } |
	tee "$out"
rc=$(cat "$out.rc")

# The real kbox, with its real device set, fed garbage on every port by the
# guest's default configuration; the guest then prints the line the kernel
# prints for a "kbox-exit=7" reboot on COM1, which kbox passes on as 7.
p=0 f=0
if [ -n "$CASE" ]; then
	:
elif [ -n "${KBOX_HARNESS_SKIP:-}" ] && echo " $KBOX_HARNESS_SKIP " | grep -q ' kbox-garbage '; then
	echo "skip - kbox run of the garbage guest: named in KBOX_HARNESS_SKIP (${KBOX_HARNESS_SKIP_WHY:-no reason given})"
elif [ ! -x "$B/kbox" ]; then
	echo "FAIL - $B/kbox missing (make $B/kbox)"
	f=1
else
	t0=$(date +%s.%N)
	krc=0
	timeout $((60 * mult)) "$B/kbox" run --kernel "$GUEST" --cpus 1 --memory 64 -- garbage \
		>/dev/null 2>"$out.kbox" || krc=$?
	t1=$(date +%s.%N)
	secs=$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")
	if [ "$krc" = 7 ]; then
		echo "ok   - kbox run of the garbage guest exits 7 as the guest said (${secs} s)"
		p=1
	else
		echo "FAIL - kbox run of the garbage guest exited $krc, want 7 (${secs} s):"
		sed 's/^/       /' "$out.kbox"
		f=1
	fi
fi

last=$(tail -n 1 "$out")
hp=$(echo "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
hf=$(echo "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
if [ -z "$hp" ]; then
	echo "FAIL - the harness died (exit $rc) before its summary"
	hp=0 hf=1
fi
echo "$((hp + p)) passed, $((hf + f)) failed"
[ $((hf + f)) -eq 0 ] && [ "$rc" -eq 0 ]
