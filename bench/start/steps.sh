#!/bin/sh
# bench/start/steps.sh: where a cold and a restored `kbox run -- true`
# spend their time, step by step (KBOX_TIMING=1, docs/benchmarks.md), in one
# run, the two kinds taking turns as in bench/start/run.sh.
#
#   bench/start/steps.sh [ROUNDS [BUILD_DIR]]   (default 5 rounds; 1 on PVM hosts)
#   make hw-bench-start-steps                   (in L1, as the ordinary user)
#
# Prints each step's median time, from the step before it, for the cold
# and the template runs; kbox's own total (to "cleaned up"); the time
# from the process's start to its exit (benchtool out); the span a
# template replaces (devices attached to guest-init's connection: the
# kernel's load and boot, or the restore and resume); and the ratios
# cold / template of those three.  The run that makes
# the template is outside the medians.  Templates go to a fresh folder of
# the script's own (KBOX_TEMPLATE_DIR): the user's cache is neither used
# nor touched.  A run passes when it exits 0, a template run only when its
# steps say it was restored; a failed run stays out of the medians.  The
# last line is "bench-start-steps: N passed, M failed".  Environment: BUILD
# (BUILD_DIR wins), CC (for benchtool), TIMEOUT (seconds per run: 600 on
# PVM, else 30 times KBOX_TIMEOUT_MULT).
set -u
cd "$(dirname "$0")/../.." || exit 2
B=${2:-${BUILD:-build}}
CC=${CC:-cc}
pvm=0
[ -d /sys/module/kvm_pvm ] && pvm=1
if [ $pvm = 1 ]; then
	rounds=${1:-1} TIMEOUT=${TIMEOUT:-600}
else
	rounds=${1:-5} TIMEOUT=${TIMEOUT:-$((30 * ${KBOX_TIMEOUT_MULT:-1}))}
fi
case $rounds in '' | *[!0-9]* | 0*) echo "usage: bench/start/steps.sh [ROUNDS [BUILD_DIR]]" >&2; exit 2 ;; esac
[ -x "$B/kbox" ] || { echo "bench-start-steps: $B/kbox is missing (make all; make kernel)" >&2; exit 2; }
[ -e /dev/kvm ] || { echo "bench-start-steps: skip, no /dev/kvm"; exit 0; }
if [ "${KBOX_TEMPLATES:-}" = off ]; then
	echo "bench-start-steps: skip, KBOX_TEMPLATES=off: kbox run uses no templates"; exit 0
fi
# benchtool ($TOOL)
. bench/lib/lib.sh

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
export KBOX_TEMPLATE_DIR="$tmp/templates" KBOX_TIMING=1
mkdir -m 0700 "$KBOX_TEMPLATE_DIR"
pass=0
fail=0
# one KIND N [OPTION]: one `kbox run [OPTION] -- true`; its steps, and the
# time from its start to its exit, to $tmp/KIND.N.
one() {
	kind=$1 n=$2
	shift 2
	f=$tmp/$kind.$n
	line=$("$TOOL" out "$TIMEOUT" -- "$B/kbox" run "$@" -- true 2>"$f")
	m_exit_ms=-1 m_status=error
	eval "$(echo "$line" | tr ' ' '\n' | sed -n 's/^\(exit_ms\|status\)=\([-a-z0-9.]*\)$/m_\1=\2/p')"
	echo "kbox: timing: $m_exit_ms ms from its start to its exit (total)" >>"$f"
	if [ "$m_status" != 0 ]; then
		echo "not ok - $kind run $n: status $m_status:"
		sed 's/^/#   /' "$f"
	elif [ "$kind" = template ] && ! grep -q ' ms restored$' "$f"; then
		echo "not ok - $kind run $n did not start from the template:"
		sed 's/^/#   /' "$f"
	else
		pass=$((pass + 1))
		return
	fi
	mv "$f" "$tmp/failed.$kind.$n" # out of the medians
	fail=$((fail + 1))
}
# The making run boots cold and saves the template.
one make 0
if [ -f "$tmp/make.0" ] && ! grep -q ' ms template saved' "$tmp/make.0"; then
	echo "not ok - the making run saved no template:"
	sed 's/^/#   /' "$tmp/make.0"
	pass=$((pass - 1)) fail=$((fail + 1))
fi
i=1
while [ "$i" -le "$rounds" ]; do
	one cold "$i" --cold
	one template "$i"
	i=$((i + 1))
done
# Each run's steps as "KIND<TAB>STEP<TAB>ms from the step before", then
# the medians over the runs that have the step, in the order first seen.
# One more line per run: the span a template replaces, from the devices
# attached to guest-init's connection for its run configuration (a cold
# run loads the kernel and boots in it, a template run restores and
# resumes), and the ratios of the medians of that span and of the totals.
span="boot / restore to guest-init connected (span)"
for kind in cold template; do
	for f in "$tmp/$kind".*; do
		[ -f "$f" ] || continue
		sed -n 's/^kbox: timing: *\([-0-9.]*\) ms \(.*\)$/\1\t\2/p' "$f" |
			awk -F'\t' -v k="$kind" '
				$2 ~ /\(total\)$/ { print k "\t" $2 "\t" $1; next }
				$2 == "kernel loaded" || $2 == "restored" { $2 = "kernel loaded / template restored" }
				$2 == "devices attached" { dev = $1 }
				$2 == "run configuration: connected" && dev != "" { conn = $1 - dev }
				{ print k "\t" $2 "\t" $1 - prev; prev = $1; total = $1 }
				END {
					print k "\tin kbox, to \"cleaned up\" (total)\t" total
					if (conn != "") print k "\t" span "\t" conn
				}' span="$span"
	done
done | awk -F'\t' -v rounds="$rounds" '
	function median(list,    a, n, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	!($2 in seen) { seen[$2] = 1; order[++ns] = $2 }
	{ v[$1, $2] = v[$1, $2] " " $3 }
	END {
		printf "# medians of %s rounds, ms; each step from the one before it\n", rounds
		printf "%-50s %10s %10s\n", "step", "cold", "template"
		for (i = 1; i <= ns; i++) {
			s = order[i]
			c = (("cold", s) in v) ? sprintf("%.1f", median(v["cold", s])) : "-"
			t = (("template", s) in v) ? sprintf("%.1f", median(v["template", s])) : "-"
			printf "%-50s %10s %10s\n", s, c, t
			if (s ~ /\((total|span)\)$/ && c != "-" && t != "-" && t + 0 > 0)
				ratio[++nr] = sprintf("%s %.2fx", s, c / t)
		}
		for (i = 1; i <= nr; i++)
			printf "# cold / template: %s\n", ratio[i]
	}'
echo "bench-start-steps: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
