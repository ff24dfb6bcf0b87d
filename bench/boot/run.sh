#!/bin/sh
# bench/boot: kbox against QEMU's microvm machine, same kernel build, same
# initramfs, same kernel command-line switches, run one after the other.
#
#   bench/boot/run.sh [ITERATIONS]        (default: 1 on PVM hosts, 10 otherwise)
#
# Set-up (Debian, once): apt-get install -y --no-install-recommends \
#                            qemu-system-x86 gnuplot-nox
# Without QEMU the kbox columns are still measured. No network is used: the
# guests have no network device and QEMU's monitor is off.
#
# Environment: BUILD (default build), MEM (MiB, default 256), QEMU_CPU
# (default host), TIMEOUT (seconds per boot; default 240 on PVM, 20 otherwise),
# BZ=0 skips kbox on the bzImage (two slow boots on PVM hosts).
#
# Measures, per run (medians over the iterations):
#  first  start of the process to the first byte on the serial console, with
#         `earlyprintk=serial` appended for both: the kernel prints from
#         setup_arch(), its first C code after the entry. The closest both
#         VMMs can show to "first guest instruction" without a hook.
#  vmm    RSS of the VMM beyond guest RAM: total Rss minus the Rss of the
#         largest anonymous mapping (guest RAM), sampled from /proc/PID/smaps
#         when the console shows "Run /init".
#  exit   start to exit: `kbox run -- true` as a user runs it (quiet) against
#         QEMU booting the same kernel and initramfs into busybox
#         `reboot -f` (rdinit=/sbin/reboot -- -f). QEMU's end is the
#         console's "reboot: Restarting system" line, after which it is
#         stopped: microvm has no i8042 for reboot=k, the kernel then falls
#         back to a real-mode restart that PVM cannot emulate, and the kernel
#         has neither ACPI nor /dev/port for another way out.
# QEMU cannot load a vmlinux without a PVH note (ours has none), so it boots
# the bzImage of the same build; kbox is measured on both.
set -eu
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
MEM=${MEM:-256}
QEMU_CPU=${QEMU_CPU:-host}
BZ=${BZ:-1}
CC=${CC:-cc}

pvm=0
[ -d /sys/module/kvm_pvm ] && pvm=1
if [ $pvm = 1 ]; then
	variant=pvm; ITER=${1:-1}; TIMEOUT=${TIMEOUT:-240}
else
	variant=std; ITER=${1:-10}; TIMEOUT=${TIMEOUT:-20}
fi
VMLINUX=$B/kernel/vmlinux-$variant
BZIMAGE=$B/kernel/bzImage-$variant
INITRD=$B/initramfs.cpio
for f in "$B/kbox" "$VMLINUX" "$INITRD"; do
	[ -e "$f" ] || { echo "bench/boot: $f missing (make all; make kernel)" >&2; exit 1; }
done
[ -e /dev/kvm ] || { echo "bench/boot: skip, no /dev/kvm"; exit 0; }
QEMU=$(command -v qemu-system-x86_64 || true)
if [ -z "$QEMU" ]; then
	echo "bench/boot: qemu-system-x86_64 not found; kbox only" \
		"(apt-get install qemu-system-x86)" >&2
elif [ ! -e "$BZIMAGE" ]; then
	echo "bench/boot: $BZIMAGE missing; kbox only" >&2
	QEMU=
fi

# benchtool ($TOOL), built as bench/exec and bench/lockdown build it.
. bench/lib/lib.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
mkfifo "$tmp/con"
RES=$B/bench/boot.txt
: >"$RES"

# One boot; appends "NAME first vmm exit status" to $RES and echoes it.
# $1 name, $2 marker for the RSS sample, rest: command (console to $tmp/con);
# $END, if set, is the console line that ends the run (benchtool boot).
END=
INIT_MARK=" as init process"
measure() {
	name=$1 marker=$2
	shift 2
	m_first_ms=-1 m_end_ms=-1 m_exit_ms=-1 m_status=error m_rss_kib=-1 m_guest_kib=0
	line=$("$TOOL" boot "$tmp/con" "$marker" "$TIMEOUT" ${END:+"$END"} -- "$@" 2>>"$tmp/$name.err")
	eval "$(echo "$line" | tr ' ' '\n' | sed -n 's/^\([a-z_]*\)=\(.*\)$/m_\1=\2/p')"
	vmm=-1
	[ "$m_rss_kib" -ge 0 ] && vmm=$((m_rss_kib - m_guest_kib))
	# Where the VMM cannot end the guest itself, the reset request is the end.
	ex=$m_exit_ms
	[ -n "$END" ] && ex=$m_end_ms
	echo "$name $m_first_ms $vmm $ex $m_status" | tee -a "$RES"
}

# kbox's own command line on this host (PVM switches, tsc_early_khz): QEMU
# gets the same, minus kbox's vsock device.
CMDLINE=
kbox_first() {
	measure "$1" "$INIT_MARK" "$B/kbox" run --verbose --memory "$MEM" --kernel "$2" \
		--initrd "$INITRD" --kernel-log "$tmp/con" --append earlyprintk=serial -- true
	if [ -z "$CMDLINE" ]; then
		CMDLINE=$(sed -n 's/^kbox: sandbox .*command line: //p' "$tmp/$1.err" | head -n 1 |
			sed 's/ virtio_mmio.device=[^ ]*//g; s/ earlyprintk=serial//')
	fi
}
kbox_exit() {
	measure "$1" "$INIT_MARK" "$B/kbox" run --memory "$MEM" --kernel "$2" \
		--initrd "$INITRD" --kernel-log "$tmp/con" -- true
}
qemu() {
	name=$1 append=$2
	END="reboot: Restarting system"
	measure "$name" "$INIT_MARK" "$QEMU" -M microvm,x-option-roms=off,rtc=off \
		-enable-kvm -cpu "$QEMU_CPU" -m "$MEM" -smp 1 -nodefaults -no-user-config \
		-display none -monitor none -serial "file:$tmp/con" -no-reboot \
		-kernel "$BZIMAGE" -initrd "$INITRD" \
		-append "$CMDLINE $append rdinit=/sbin/reboot -- -f"
	END=
}

echo "# host: $([ $pvm = 1 ] && echo PVM || echo KVM), $ITER iteration(s), ${MEM} MiB, timeout ${TIMEOUT}s"
echo "# run first_ms vmm_rss_kib exit_ms status"
i=0
while [ $i -lt "$ITER" ]; do
	i=$((i + 1))
	kbox_first kbox-first "$VMLINUX"
	kbox_exit kbox-exit "$VMLINUX"
	if [ -n "$QEMU" ] && [ "$BZ" = 1 ]; then
		kbox_first kbox-bz-first "$BZIMAGE"
		kbox_exit kbox-bz-exit "$BZIMAGE"
	fi
	if [ -n "$QEMU" ]; then
		# kbox's verbose mode drops "quiet": the same for QEMU.
		qemu qemu-first "earlyprintk=serial"
		qemu qemu-exit "quiet"
	fi
done
if [ -z "$CMDLINE" ]; then
	echo "bench/boot: kbox did not report its command line; see $tmp" >&2
fi

# Median of column $2 over the runs named $1 that finished (status 0 for
# kbox, any exit for QEMU: its reset ends with status 0 too).
med() {
	awk -v n="$1" -v c="$2" '$1 == n && $5 != "timeout" && $c >= 0 { print $c }' "$RES" |
		sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'
}
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b <= 0) print "-"; else printf "%.2f\n", a / b }'
}
echo
echo "# medians; kbox boots vmlinux (its default), kbox-bz and QEMU the bzImage"
printf '%-26s %12s %12s %12s %10s %10s\n' metric kbox kbox-bz qemu kbox/qemu kbox-bz/qemu
row() {
	k=$(med "kbox-$2" "$3") kb=$(med "kbox-bz-$2" "$3") q=$(med "qemu-$2" "$3")
	printf '%-26s %12s %12s %12s %10s %10s\n' "$1" "$k" "$kb" "$q" "$(ratio "$k" "$q")" "$(ratio "$kb" "$q")"
	printf '%s\t%s\t%s\t%s\n' "$1" "$k" "$kb" "$q" | sed 's/\t-/\t0/g' >>"$tmp/plot.dat"
}
row "first console byte (ms)" first 2
row "VMM RSS - guest RAM (KiB)" first 3
row "boot to exit (ms)" exit 4
if [ $pvm = 1 ]; then
	echo "# PVM host: guest ring 0 is emulated; times measure the emulator, not the VMMs."
	echo "# Only the RSS row compares the VMMs themselves (docs/benchmarks.md)."
fi
echo "# raw runs: $RES"

if command -v gnuplot >/dev/null; then
	awk -F'\t' 'NR <= 1 || NR == 3 { print }' "$tmp/plot.dat" >"$tmp/time.dat" || true
	gnuplot <<EOF 2>/dev/null && echo "# chart: $B/bench/boot.png" || true
set terminal png size 800,400
set output "$B/bench/boot.png"
set title "kbox vs QEMU microvm: boot ($( [ $pvm = 1 ] && echo PVM || echo KVM ) host, ms)"
set style data histograms
set style fill solid 0.8
set datafile separator "\t"
set key top left
set yrange [0:*]
plot "$tmp/time.dat" using 2:xtic(1) title "kbox (vmlinux)", '' using 3 title "kbox (bzImage)", '' using 4 title "QEMU microvm (bzImage)"
EOF
fi
