#!/bin/sh
# bench/exec: the exec agent's vsock channel against the serial console, in
# one detached sandbox, run one after the other.
#
#   bench/exec/run.sh [N]     (N exec round trips; default 5 on PVM hosts, 50 otherwise)
#
# Environment: BUILD (default build), VSOCK_SIZE and SERIAL_SIZE in bytes
# (defaults: 4 MiB and 64 KiB on PVM hosts, 100 MiB and 4 MiB otherwise;
# the console moves one byte per port write, so it gets less), TIMEOUT
# (seconds per step; default 600 on PVM, 120 otherwise).
#
# Measures (medians for the latencies):
#  latency   `kbox exec S -- true`, start to exit, N times (vsock only: the
#            console has no way in).
#  output    `kbox exec S -- sh -c 'echo M'`: start until M has arrived on
#            kbox's stdout, against `sh -c 'echo M >/dev/console'`: start
#            until M is in the sandbox's kernel log (the serial path).
#  stream    SIZE bytes from `head -c SIZE /dev/zero` to the host through
#            exec's stdout, against the same bytes (as 'x') written to
#            /dev/console and counted in the kernel log; in MB/s.
# Nothing leaves the host: vsock and the console are host-local.
set -eu
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
CC=${CC:-cc}
pvm=0
[ -d /sys/module/kvm_pvm ] && pvm=1
if [ $pvm = 1 ]; then
	N=${1:-5}; VSOCK_SIZE=${VSOCK_SIZE:-4194304}; SERIAL_SIZE=${SERIAL_SIZE:-65536}
	TIMEOUT=${TIMEOUT:-600}
else
	N=${1:-50}; VSOCK_SIZE=${VSOCK_SIZE:-104857600}; SERIAL_SIZE=${SERIAL_SIZE:-4194304}
	TIMEOUT=${TIMEOUT:-120}
fi
[ -x "$B/kbox" ] || { echo "bench/exec: $B/kbox missing (make all)" >&2; exit 1; }
[ -e /dev/kvm ] || { echo "bench/exec: skip, no /dev/kvm"; exit 0; }
# shellcheck source=bench/lib/lib.sh
. bench/lib/lib.sh

NAME=bench-exec-$$
tmp=$(mktemp -d)
KLOG=$tmp/kernel.log
started=0
cleanup() {
	[ $started = 1 ] && timeout 60 "$B/kbox" stop -t 5 "$NAME" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

size() { wc -c <"$KLOG"; }

t0=$(now)
started=1
timeout "$TIMEOUT" "$B/kbox" run -d --name "$NAME" --kernel-log "$KLOG" -- sleep 100000 >/dev/null
echo "# host: $([ $pvm = 1 ] && echo PVM || echo KVM); sandbox $NAME up in $(ms "$t0" "$(now)") ms"

# Exec round trip.
: >"$tmp/lat"
i=0
while [ $i -lt "$N" ]; do
	i=$((i + 1))
	t0=$(now)
	timeout "$TIMEOUT" "$B/kbox" exec "$NAME" -- true
	ms "$t0" "$(now)" >>"$tmp/lat"
done

# A short line out: exec's stdout against the console.
: >"$tmp/out.vsock"
: >"$tmp/out.serial"
i=0
while [ $i -lt "$N" ]; do
	i=$((i + 1))
	m=bench-mark-$$-$i
	t0=$(now)
	got=$(timeout "$TIMEOUT" "$B/kbox" exec "$NAME" -- sh -c "echo $m")
	t1=$(now)
	[ "$got" = "$m" ] || { echo "bench/exec: exec printed '$got', not '$m'" >&2; exit 1; }
	ms "$t0" "$t1" >>"$tmp/out.vsock"

	off=$(size)
	"$TOOL" waitfor "$KLOG" "$off" "$m" 1 "$TIMEOUT" >"$tmp/seen" &
	w=$!
	t0=$(now)
	timeout "$TIMEOUT" "$B/kbox" exec "$NAME" -- sh -c "echo $m >/dev/console"
	t1=$(now)
	wait $w || { echo "bench/exec: '$m' never reached the kernel log" >&2; exit 1; }
	seen=$(cat "$tmp/seen")
	[ "$seen" -gt "$t1" ] && t1=$seen
	ms "$t0" "$t1" >>"$tmp/out.serial"
done

# Streams. The console's stream ends with a newline: kbox writes the kernel
# log a line at a time.
t0=$(now)
got=$(timeout "$TIMEOUT" "$B/kbox" exec "$NAME" -- head -c "$VSOCK_SIZE" /dev/zero | wc -c)
t1=$(now)
[ "$got" -eq "$VSOCK_SIZE" ] || { echo "bench/exec: vsock stream gave $got of $VSOCK_SIZE bytes" >&2; exit 1; }
vsock_ms=$(ms "$t0" "$t1")

off=$(size)
"$TOOL" waitfor "$KLOG" "$off" x "$SERIAL_SIZE" "$TIMEOUT" >"$tmp/seen" &
w=$!
t0=$(now)
timeout "$TIMEOUT" "$B/kbox" exec "$NAME" -- \
	sh -c "{ head -c $SERIAL_SIZE /dev/zero | tr '\\0' x; echo; } >/dev/console"
wait $w || { echo "bench/exec: the console did not deliver $SERIAL_SIZE bytes in ${TIMEOUT}s" >&2; exit 1; }
serial_ms=$(ms "$t0" "$(cat "$tmp/seen")")

timeout 60 "$B/kbox" stop -t 5 "$NAME" >/dev/null
started=0
if "$B/kbox" ps | awk 'NR > 1 { print $1 }' | grep -qx "$NAME"; then
	echo "bench/exec: $NAME still listed by 'kbox ps'" >&2
	exit 1
fi

lat=$(median <"$tmp/lat")
ov=$(median <"$tmp/out.vsock")
os=$(median <"$tmp/out.serial")
rv=$(awk -v b="$VSOCK_SIZE" -v t="$vsock_ms" 'BEGIN { printf "%.2f\n", b / 1e6 / (t / 1e3) }')
rs=$(awk -v b="$SERIAL_SIZE" -v t="$serial_ms" 'BEGIN { printf "%.4f\n", b / 1e6 / (t / 1e3) }')
echo "# medians over $N runs; streams: vsock $VSOCK_SIZE bytes in $vsock_ms ms," \
	"serial $SERIAL_SIZE bytes in $serial_ms ms"
printf '%-28s %12s %12s %14s\n' metric vsock serial vsock/serial
printf '%-28s %12s %12s %14s\n' "exec true round trip (ms)" "$lat" - -
printf '%-28s %12s %12s %14s\n' "line out, start to host (ms)" "$ov" "$os" "$(ratio "$ov" "$os")"
printf '%-28s %12s %12s %14s\n' "stream (MB/s)" "$rv" "$rs" "$(ratio "$rv" "$rs")"
if [ $pvm = 1 ]; then
	echo "# PVM host: every guest syscall, fault and interrupt runs in an emulated kernel;"
	echo "# the ratios say more than the absolute figures (docs/benchmarks.md)."
fi
