#!/bin/sh
# bench/lockdown: what the lock-down (seccomp + Landlock, docs/security.md)
# costs, measured side by side in one run: runs alternate between
# `kbox run` with it and with --no-lockdown, so that a busy machine hurts
# both the same.
#
#   bench/lockdown/run.sh [N]     (N runs of each kind; default 3 on PVM hosts, 10 otherwise)
#
# Measures (medians):
#  boot-to-exit  `kbox run [--no-lockdown] -- true`, start to exit;
#  exec          `kbox exec S -- true` round trip into a detached sandbox
#                started with or without the lock-down (M exec's each, M=N*3).
# Prints one line per kind and the ratio locked/unlocked.  Nothing leaves
# the host: no network card is given (--network none).
set -eu
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
CC=${CC:-cc}
if [ -d /sys/module/kvm_pvm ]; then N=${1:-3}; else N=${1:-10}; fi
M=$((N * 3))
[ -x "$B/kbox" ] || { echo "bench/lockdown: $B/kbox missing (make all)" >&2; exit 1; }
[ -e /dev/kvm ] || { echo "bench/lockdown: skip, no /dev/kvm"; exit 0; }
# shellcheck source=bench/lib/lib.sh
. bench/lib/lib.sh
tmp=$(mktemp -d)
names=
cleanup() {
	for n in $names; do timeout 60 "$B/kbox" stop -t 5 "$n" >/dev/null 2>&1 || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench/lockdown: $N boots and $M exec round trips of each kind, alternating"
i=0
while [ $i -lt "$N" ]; do
	for kind in on off; do
		flag=
		[ $kind = off ] && flag=--no-lockdown
		t0=$(now)
		# shellcheck disable=SC2086
		"$B/kbox" run --network none $flag -- true >/dev/null 2>"$tmp/err" || {
			cat "$tmp/err" >&2
			exit 1
		}
		ms "$t0" "$(now)" >>"$tmp/boot-$kind"
	done
	i=$((i + 1))
done

for kind in on off; do
	flag=
	[ $kind = off ] && flag=--no-lockdown
	n=bench-ld-$kind-$$
	# shellcheck disable=SC2086
	"$B/kbox" run -d -n "$n" --network none $flag -- sleep 100000 >/dev/null
	names="$names $n"
done
i=0
while [ $i -lt "$M" ]; do
	for kind in on off; do
		t0=$(now)
		"$B/kbox" exec "bench-ld-$kind-$$" -- true
		ms "$t0" "$(now)" >>"$tmp/exec-$kind"
	done
	i=$((i + 1))
done

b_on=$(median <"$tmp/boot-on") b_off=$(median <"$tmp/boot-off")
e_on=$(median <"$tmp/exec-on") e_off=$(median <"$tmp/exec-off")
printf '%-14s %12s %14s %8s\n' measure "locked (ms)" "unlocked (ms)" ratio
printf '%-14s %12s %14s %8s\n' boot-to-exit "$b_on" "$b_off" "$(ratio "$b_on" "$b_off")"
printf '%-14s %12s %14s %8s\n' exec "$e_on" "$e_off" "$(ratio "$e_on" "$e_off")"
