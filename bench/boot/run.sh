#!/bin/sh
# bench/boot: kbox against QEMU's microvm machine, same kernel build, same
# initramfs, same kernel command-line switches, run one after the other.
#
#   bench/boot/run.sh [ITERATIONS [BUILD_DIR]]   (default: 1 on PVM hosts, 10 otherwise)
#
# Set-up (Debian, once): apt-get install -y --no-install-recommends \
#                            qemu-system-x86 gnuplot-nox
# Without QEMU the kbox columns are still measured. No network is used: the
# guests have no network device and QEMU's monitor is off.
#
# Environment: BUILD (default build; BUILD_DIR wins), OUT (where the raw runs
# and the chart go, default BUILD/bench), MEM (MiB, default 256), QEMU_CPU
# (default host), TIMEOUT (seconds per boot; default 240 on PVM, 20 otherwise,
# times KBOX_TIMEOUT_MULT), BZ=0 skips kbox on the bzImage (two slow boots on
# PVM hosts), QEMU (the binary; QEMU= for kbox only), EMULATED=WHAT says
# that this machine is itself emulated (the hardware-KVM lane sets
# EMULATED=tcg: tests/hwkvm, make hw-bench), which the output then states; a
# `hypervisor` CPU flag alone gets a note too.
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
#  phases the guest's own printk timestamps (printk.time=1) in the verbose
#         runs of "first", each the time of a line the kernel prints at a
#         phase's end: setup_arch ("Kernel command line:", printed just after
#         it; the clock starts inside it, at kvm-clock's set-up), core init
#         (to "devtmpfs: initialized", i.e. driver_init()), driver init (the
#         initcalls, to "Run /init as init process"), the first exec of the
#         user's command (it writes "kbox-bench: first exec" to /dev/kmsg)
#         and from there to "reboot:" (when the guest got that far before
#         its VMM stopped it). Decompression happens before the
#         kernel has a clock: its row is kbox's first byte on the bzImage
#         minus that on the vmlinux (none for a vmlinux).
# QEMU cannot load a vmlinux without a PVH note (ours has none), so it boots
# the bzImage of the same build; kbox is measured on both.
set -eu
cd "$(dirname "$0")/../.."
B=${2:-${BUILD:-build}}
MEM=${MEM:-256}
QEMU_CPU=${QEMU_CPU:-host}
BZ=${BZ:-1}
CC=${CC:-cc}

pvm=0
[ -d /sys/module/kvm_pvm ] && pvm=1
if [ $pvm = 1 ]; then
	variant=pvm; ITER=${1:-1}; TIMEOUT=${TIMEOUT:-240}
else
	variant=std; ITER=${1:-10}; TIMEOUT=${TIMEOUT:-$((20 * ${KBOX_TIMEOUT_MULT:-1}))}
fi
nested=0
grep -qw hypervisor /proc/cpuinfo 2>/dev/null && nested=1
EMULATED=${EMULATED:-}
VMLINUX=$B/kernel/vmlinux-$variant
BZIMAGE=$B/kernel/bzImage-$variant
INITRD=$B/initramfs.cpio
for f in "$B/kbox" "$VMLINUX" "$INITRD"; do
	[ -e "$f" ] || { echo "bench/boot: $f missing (make all; make kernel)" >&2; exit 1; }
done
[ -e /dev/kvm ] || { echo "bench/boot: skip, no /dev/kvm"; exit 0; }
QEMU=${QEMU-$(command -v qemu-system-x86_64 || true)}
if [ -z "$QEMU" ]; then
	echo "bench/boot: qemu-system-x86_64 not found; kbox only" \
		"(apt-get install qemu-system-x86)" >&2
elif [ ! -e "$BZIMAGE" ]; then
	echo "bench/boot: $BZIMAGE missing; kbox only" >&2
	QEMU=
fi
QEMU_VERSION=$([ -n "$QEMU" ] && "$QEMU" --version | head -n 1 || echo "no QEMU")

# benchtool ($TOOL), built as bench/exec and bench/lockdown build it.
. bench/lib/lib.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
mkfifo "$tmp/con"
OUT=${OUT:-$B/bench}
mkdir -p "$OUT"
RES=$OUT/boot.txt
PHASES=$OUT/boot-phases.txt
: >"$RES"
: >"$PHASES"

# One boot; appends "NAME first vmm exit status" to $RES and echoes it.
# $1 name, $2 marker for the RSS sample, rest: command (console to $tmp/con);
# $END, if set, is the console line that ends the run (benchtool boot).
# $LOG, if set, gets the console's lines with their arrival (benchtool -l).
END=
LOG=
INIT_MARK=" as init process"
measure() {
	name=$1 marker=$2
	shift 2
	m_first_ms=-1 m_end_ms=-1 m_exit_ms=-1 m_status=error m_rss_kib=-1 m_guest_kib=0
	line=$("$TOOL" boot ${LOG:+-l "$LOG"} "$tmp/con" "$marker" "$TIMEOUT" ${END:+"$END"} -- "$@" \
		2>>"$tmp/$name.err")
	eval "$(echo "$line" | tr ' ' '\n' | sed -n 's/^\([a-z_]*\)=\(.*\)$/m_\1=\2/p')"
	vmm=-1
	[ "$m_rss_kib" -ge 0 ] && vmm=$((m_rss_kib - m_guest_kib))
	# Where the VMM cannot end the guest itself, the reset request is the end.
	ex=$m_exit_ms
	[ -n "$END" ] && ex=$m_end_ms
	echo "$name $m_first_ms $vmm $ex $m_status" | tee -a "$RES"
}

# The printk line the user's command writes in the verbose runs, at level 2
# so that it shows whatever the console's level.
EXEC_MARK="kbox-bench: first exec"
# phases NAME LOG: one line of $PHASES from the console log of a verbose run:
# "NAME cmdline_ms devtmpfs_ms runinit_ms exec_ms reboot_ms", the guest's
# printk timestamps (ms) of the lines that end the phases (-1: not seen).
phases() {
	awk -v n="$1" -v em="$EXEC_MARK" -F'\t' '
	function ts(s) { sub(/^\[ */, "", s); sub(/\].*/, "", s); return s * 1000 }
	$2 !~ /^\[ *[0-9]+\.[0-9]+\] / { next }
	{ l = $2 }
	c < 0 && index(l, "] Kernel command line:") { c = ts(l) }
	d < 0 && index(l, "] devtmpfs: initialized") { d = ts(l) }
	r < 0 && index(l, "] Run /") && index(l, " as init process") { r = ts(l) }
	# The line itself, not the command line that holds the init script.
	e < 0 && index(l, "] " em) { e = ts(l) }
	b < 0 && index(l, "] reboot: ") { b = ts(l) }
	BEGIN { c = d = r = e = b = -1 }
	END { printf "%s %.1f %.1f %.1f %.1f %.1f\n", n, c, d, r, e, b }' "$2" >>"$PHASES"
}

# kbox's own command line on this host (PVM switches, tsc_early_khz): QEMU
# gets the same, minus kbox's vsock device.
CMDLINE=
kbox_first() {
	LOG=$tmp/$1.log
	measure "$1" "$INIT_MARK" "$B/kbox" run --verbose --memory "$MEM" --kernel "$2" \
		--initrd "$INITRD" --kernel-log "$tmp/con" --append "earlyprintk=serial printk.time=1" \
		-- sh -c "echo '<2>$EXEC_MARK' >/dev/kmsg"
	LOG=
	phases "$1" "$tmp/$1.log"
	if [ -z "$CMDLINE" ]; then
		CMDLINE=$(sed -n 's/^kbox: sandbox .*command line: //p' "$tmp/$1.err" | head -n 1 |
			sed 's/ virtio_mmio.device=[^ ]*//g; s/ earlyprintk=serial//; s/ printk.time=1//')
	fi
}
kbox_exit() {
	measure "$1" "$INIT_MARK" "$B/kbox" run --memory "$MEM" --kernel "$2" \
		--initrd "$INITRD" --kernel-log "$tmp/con" --append printk.time=1 -- true
}
# $3: init and its arguments (the kernel passes what follows "--" to init).
qemu() {
	name=$1 append=$2
	END="reboot: Restarting system"
	measure "$name" "$INIT_MARK" "$QEMU" -M microvm,x-option-roms=off,rtc=off \
		-enable-kvm -cpu "$QEMU_CPU" -m "$MEM" -smp 1 -nodefaults -no-user-config \
		-display none -monitor none -serial "file:$tmp/con" -no-reboot \
		-kernel "$BZIMAGE" -initrd "$INITRD" \
		-append "$CMDLINE $append printk.time=1 $3"
	END=
}

echo "# host: $([ $pvm = 1 ] && echo PVM || echo KVM)${EMULATED:+, EMULATED=$EMULATED (only ratios mean something)}," \
	"$ITER iteration(s), ${MEM} MiB, timeout ${TIMEOUT}s, $QEMU_VERSION"
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
		# The initramfs has no /dev nodes: devtmpfs first, as guest-init
		# mounts it before kbox's command runs.
		LOG=$tmp/qemu-first.log
		sh_init="mount -t devtmpfs dev /dev; echo '<2>$EXEC_MARK' >/dev/kmsg; exec reboot -f"
		qemu qemu-first "earlyprintk=serial" "rdinit=/bin/sh -- -c \"$sh_init\""
		LOG=
		phases qemu-first "$tmp/qemu-first.log"
		qemu qemu-exit "quiet" "rdinit=/sbin/reboot -- -f"
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

# Median of phase $2 over the verbose runs named $1 (both of its ends seen).
pmed() {
	awk -v n="$1" -v k="$2" '$1 == n {
		c = $2; d = $3; r = $4; e = $5; b = $6; v = -1
		if (k == "setup" && c >= 0) v = c
		if (k == "core" && c >= 0 && d >= c) v = d - c
		if (k == "drivers" && d >= 0 && r >= d) v = r - d
		if (k == "runinit" && r >= 0) v = r
		if (k == "exec" && r >= 0 && e >= r) v = e - r
		if (k == "reboot" && e >= 0 && b >= e) v = b - e
		if (k == "total" && b >= 0) v = b
		if (v >= 0) printf "%.1f\n", v }' "$PHASES" |
		sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'
}
prow() {
	k=$(pmed kbox-first "$2") kb=$(pmed kbox-bz-first "$2") q=$(pmed qemu-first "$2")
	printf '%-34s %10s %10s %10s %10s %12s\n' "$1" "$k" "$kb" "$q" "$(ratio "$k" "$q")" "$(ratio "$kb" "$q")"
}
echo
echo "# guest boot phases (the verbose runs of the first row; printk.time=1, guest clock, ms, medians)"
printf '%-34s %10s %10s %10s %10s %12s\n' phase kbox kbox-bz qemu kbox/qemu kbox-bz/qemu
# Decompression runs before the kernel has a clock: kbox's first byte on the
# bzImage minus that on the vmlinux, on the host's clock (QEMU cannot boot
# the vmlinux, so it has no such difference).
dz=$(awk -v a="$(med kbox-bz-first 2)" -v b="$(med kbox-first 2)" \
	'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.1f\n", a - b }')
printf '%-34s %10s %10s %10s %10s %12s\n' "decompress (host clock)" none "$dz" "-" "-" "-"
prow "setup_arch (to Kernel command line)" setup
prow "core init (to devtmpfs: initialized)" core
prow "driver init (initcalls, to Run /init)" drivers
prow "Run /init (since the clock started)" runinit
prow "Run /init to the command's 1st line" exec
prow "the command's 1st line to reboot:" reboot
prow "reboot: (since the clock started)" total
echo "# kbox's /init is guest-init (mounts, exec agent over vsock) running sh; QEMU's is busybox sh"
echo "# mounting devtmpfs, so the two rows after Run /init compare different user-space work."
if [ $pvm = 1 ]; then
	echo "# PVM host: guest ring 0 is emulated; times measure the emulator, not the VMMs."
	echo "# Only the RSS row compares the VMMs themselves (docs/benchmarks.md)."
fi
if [ -n "$EMULATED" ]; then
	echo "# EMULATED ($EMULATED): this machine is itself a guest in software emulation, and both"
	echo "# VMMs run on its nested KVM. Absolute times say nothing about hardware: ONLY THE RATIOS"
	echo "# (kbox/qemu, same run, same kernel, initramfs, RAM and vCPU) mean something."
elif [ $nested = 1 ]; then
	echo "# nested: this machine is itself a virtual machine (hypervisor CPU flag); the times include"
	echo "# the outer hypervisor's share, and under emulation only the ratios mean something."
fi
echo "# raw runs: $RES, phases: $PHASES"
if [ -n "$EMULATED" ]; then
	# An emulated machine's files go with it: the raw runs into the output.
	sed 's/^/# raw: /' "$RES"
	sed 's/^/# raw phases: /' "$PHASES"
fi

if command -v gnuplot >/dev/null; then
	awk -F'\t' 'NR <= 1 || NR == 3 { print }' "$tmp/plot.dat" >"$tmp/time.dat" || true
	gnuplot <<EOF 2>/dev/null && echo "# chart: $OUT/boot.png" || true
set terminal png size 800,400
set output "$OUT/boot.png"
set title "kbox vs QEMU microvm: boot ($( [ $pvm = 1 ] && echo PVM || echo KVM ) host, ms)"
set style data histograms
set style fill solid 0.8
set datafile separator "\t"
set key top left
set yrange [0:*]
plot "$tmp/time.dat" using 2:xtic(1) title "kbox (vmlinux)", '' using 3 title "kbox (bzImage)", '' using 4 title "QEMU microvm (bzImage)"
EOF
fi

# A summary line for harnesses that count (tests/hwkvm: make hw-bench): a
# boot passes when it reached its end (kbox: exit status 0; QEMU: its reboot
# line), a verbose run's log when every phase line was seen in it.
awk '{ ok = ($1 ~ /^qemu/) ? ($4 >= 0 && $5 != "timeout") : ($5 == "0"); if (ok) p++; else f++ }
	END { printf "%d %d\n", p, f }' "$RES" >"$tmp/sum"
# (The reboot line is not required: kbox may stop the guest as soon as the
# exec agent reported the command's exit, before the kernel prints it.)
awk '{ ok = 1; for (i = 2; i <= 5; i++) if ($i < 0) ok = 0; if (ok) p++; else f++ }
	END { printf "%d %d\n", p, f }' "$PHASES" >>"$tmp/sum"
awk '{ p += $1; f += $2 } END { printf "bench-boot: %d passed, %d failed\n", p, f; exit f > 0 }' "$tmp/sum"
