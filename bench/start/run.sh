#!/bin/sh
# bench/start: kbox run booted cold (--cold) against kbox run started from a
# template (docs/snapshots.md), in one run, the two kinds of run taking
# turns (cold, template, cold, template, ...) so that the machine's noise
# falls on both.
#
#   bench/start/run.sh [ITERATIONS [BUILD_DIR]]   (default: 1 on PVM hosts, 5 otherwise)
#
# Environment: BUILD (default build; BUILD_DIR wins), OUT (where the raw runs
# go, default BUILD/bench), NS (how many sandboxes at once in the memory
# rows, default "1 4 8", "1 4" on PVM hosts, where 8 cold boots at once on 2
# cores take minutes), SETTLE (seconds the sandboxes idle before their
# memory is read, default 2), TIMEOUT (seconds per kbox run; default 600 on
# PVM, 30 times KBOX_TIMEOUT_MULT otherwise), EMULATED=WHAT (this machine is
# itself emulated; the hardware-KVM lane sets EMULATED=tcg: tests/hwkvm,
# make hw-bench-start), which the output then states.  With
# KBOX_TEMPLATES=off the script says so and measures nothing.  Templates
# go to a fresh folder of the script's own
# (KBOX_TEMPLATE_DIR), so the user's cache is neither used nor touched.
#
# Measures (medians over the iterations; the first cold run and the run
# that makes the template are shown apart, outside the medians: the one
# fills the page cache with the kernel and initramfs, the other boots cold
# and saves the template on the way):
#  true   `kbox run -- true`, start of the process to its exit.
#  first  `kbox run -- echo ready`, start of the process to the first byte
#         on its stdout (benchtool out: a pipe, read as bytes come), and to
#         its exit.
#  memory N sandboxes at once (`kbox run -d --name ... -- sleep 600`, all
#         started together), cold or all from the one template; once every
#         `kbox run -d` has returned (the command runs) and SETTLE seconds
#         more: the sum over their kbox processes of Rss, of Pss and of
#         their private pages (/proc/PID/smaps_rollup; Pss shares each page
#         among the processes that map it, so the template's pages count
#         once in all), and how far MemAvailable (/proc/meminfo, the whole
#         machine's) fell from just before the start.
#         Also the time until all N were up. Then `kbox stop`.
# A template run counts only when it started from the template: the
# template folder must hold the one file the making run saved, unchanged
# (a template that does not load is removed and the run boots cold), and
# a cold run must not add one.
#  fork   one sandbox (`kbox run -d -- sleep 600`, from the template), then
#         ITERATIONS times `kbox fork --verbose` of it, each copy stopped
#         before the next: the original's pause as kbox fork reports it
#         (the save of its state and RAM, the vCPUs stopped), and the
#         time from kbox fork's start to its return (the copy up and
#         configured); beside it the 1-at-once "all up" of sandboxes
#         started from the template (kbox run -d).
# No network is used beyond kbox's own default.
set -eu
cd "$(dirname "$0")/../.." || exit 2
B=${2:-${BUILD:-build}}
CC=${CC:-cc}
SETTLE=${SETTLE:-2}

pvm=0
[ -d /sys/module/kvm_pvm ] && pvm=1
if [ $pvm = 1 ]; then
	ITER=${1:-1}; NS=${NS:-1 4}; TIMEOUT=${TIMEOUT:-600}
else
	ITER=${1:-5}; NS=${NS:-1 4 8}; TIMEOUT=${TIMEOUT:-$((30 * ${KBOX_TIMEOUT_MULT:-1}))}
fi
nested=0
grep -qw hypervisor /proc/cpuinfo 2>/dev/null && nested=1
EMULATED=${EMULATED:-}
[ -x "$B/kbox" ] || { echo "bench/start: $B/kbox missing (make all; make kernel)" >&2; exit 1; }
[ -e /dev/kvm ] || { echo "bench/start: skip, no /dev/kvm"; exit 0; }
if [ "${KBOX_TEMPLATES:-}" = off ]; then
	echo "bench/start: skip, KBOX_TEMPLATES=off: kbox run uses no templates"; exit 0
fi
for n in $NS; do
	case $n in '' | *[!0-9]* | 0*) echo "bench/start: NS holds counts from 1 up, not '$n'" >&2; exit 2 ;; esac
done

# benchtool ($TOOL) and now, ms, median, ratio.
. bench/lib/lib.sh

tmp=$(mktemp -d)
export KBOX_TEMPLATE_DIR="$tmp/templates"
mkdir -m 0700 "$KBOX_TEMPLATE_DIR"
OUT=${OUT:-$B/bench}
mkdir -p "$OUT"
RES=$OUT/start.txt
MEMRES=$OUT/start-memory.txt
: >"$RES"
: >"$MEMRES"
: >"$tmp/names"
# Where kbox keeps its sandboxes (vmm/sandbox/sandbox.c), for the pids.
case ${XDG_RUNTIME_DIR:-} in
/*) RT=$XDG_RUNTIME_DIR/kbox ;;
*) if [ "$(id -u)" = 0 ]; then RT=/run/kbox; else RT=/tmp/kbox-$(id -u); fi ;;
esac
cleanup() {
	while read -r n; do
		timeout 60 "$B/kbox" stop -t 5 "$n" >/dev/null 2>&1 || true
	done <"$tmp/names"
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pass=0 fail=0
bad() { echo "bench/start: $*" >&2; fail=$((fail + 1)); }
# The template folder's files with their inode and modification time (a
# restore sets the atime, and with it the ctime: kbox snapshot's "last
# used"; a new template is a new inode).
tplstate() { (cd "$KBOX_TEMPLATE_DIR" && find . -type f -printf '%p %i %T@\n' | sort); }

# one NAME KIND WANT -- CMD...: one foreground run through benchtool out;
# appends "NAME KIND first_ms exit_ms bytes status ok" to $RES.  KIND: cold
# (cold0: round 0's), make or tpl (checked against the template folder); WANT: the stdout's
# length when right.
one() {
	name=$1 kind=$2 want=$3
	shift 4
	before=$(tplstate)
	m_first_ms=-1 m_exit_ms=-1 m_bytes=-1 m_status=error
	line=$("$TOOL" out "$TIMEOUT" -- "$@" 2>>"$tmp/run.err")
	eval "$(echo "$line" | tr ' ' '\n' | sed -n 's/^\([a-z_]*\)=\([-a-z0-9.]*\)$/m_\1=\2/p')"
	after=$(tplstate)
	ok=1
	if [ "$m_status" != 0 ] || [ "$m_bytes" != "$want" ]; then
		bad "$name ($kind): status $m_status, $m_bytes bytes out (want 0 and $want); $tmp/run.err:"
		tail -n 5 "$tmp/run.err" >&2
		ok=0
	fi
	case $kind in
	make)
		if [ -n "$before" ] || [ "$(echo "$after" | grep -c .)" != 1 ]; then
			bad "$name: the making run left no template (or more than one): '$after'"
			ok=0
		fi ;;
	*)
		if [ "$before" != "$after" ]; then
			bad "$name ($kind): the template folder changed ('$before' -> '$after'):" \
				"the run did not start from the template"
			ok=0
		fi ;;
	esac
	[ $ok = 1 ] && pass=$((pass + 1))
	echo "$name $kind $m_first_ms $m_exit_ms $m_bytes $m_status $ok" | tee -a "$RES"
}
# true and echo, cold (--cold) or from the template.
run_true() { one true "$1" 0 -- "$B/kbox" run ${2:+"$2"} -- true; }
run_echo() { one echo "$1" 6 -- "$B/kbox" run ${2:+"$2"} -- echo ready; }

mem_avail() { awk '/^MemAvailable:/ { print $2 }' /proc/meminfo; }
# group KIND N: N detached sandboxes at once (cold or tpl), their memory
# once all are up and idle, then stopped.  Appends "KIND N up_ms rss_kib
# pss_kib avail_drop_kib ok" to $MEMRES.
group() {
	kind=$1 n=$2
	flag=
	[ "$kind" = cold ] && flag=--cold
	before=$(tplstate)
	a0=$(mem_avail)
	t0=$(now)
	i=0 pids=
	while [ $i -lt "$n" ]; do
		i=$((i + 1))
		nm=bs$$-$kind$n-$i
		echo "$nm" >>"$tmp/names"
		timeout "$TIMEOUT" "$B/kbox" run -d ${flag:+"$flag"} --name "$nm" -- sleep 600 \
			>/dev/null 2>>"$tmp/$nm.err" &
		pids="$pids $!"
	done
	up=0
	for p in $pids; do
		wait "$p" && up=$((up + 1))
	done
	up_ms=$(ms "$t0" "$(now)")
	sleep "$SETTLE"
	rss=0 pss=0 priv=0 seen=0
	i=0
	while [ $i -lt "$n" ]; do
		i=$((i + 1))
		nm=bs$$-$kind$n-$i
		pid=$(sed -n 's/^pid=\([0-9]*\)$/\1/p' "$RT/$nm/info" 2>/dev/null || true)
		if [ -z "$pid" ] || [ ! -r "/proc/$pid/smaps_rollup" ]; then
			bad "$nm: no kbox process to read ($RT/$nm/info); $tmp/$nm.err:"
			tail -n 5 "$tmp/$nm.err" >&2 || true
			continue
		fi
		rpu=$(awk '/^Rss:/ { r = $2 } /^Pss:/ { p = $2 } /^Private_(Clean|Dirty):/ { u += $2 }
			END { print r + 0, p + 0, u + 0 }' "/proc/$pid/smaps_rollup")
		set -f
		# shellcheck disable=SC2086
		set -- $rpu
		set +f
		rss=$((rss + $1)) pss=$((pss + $2)) priv=$((priv + $3)) seen=$((seen + 1))
	done
	drop=$((a0 - $(mem_avail)))
	while read -r nm; do
		case $nm in bs$$-$kind$n-*) timeout 60 "$B/kbox" stop -t 5 "$nm" >/dev/null 2>&1 || true ;; esac
	done <"$tmp/names"
	ok=1
	if [ $up != "$n" ] || [ $seen != "$n" ]; then
		bad "$kind x$n: $up of $n came up, $seen read"
		ok=0
	fi
	if [ "$before" != "$(tplstate)" ]; then
		bad "$kind x$n: the template folder changed: not all started from the template"
		ok=0
	fi
	[ $ok = 1 ] && pass=$((pass + 1))
	echo "$kind $n $up_ms $rss $pss $priv $drop $ok" | tee -a "$MEMRES"
}

if [ $pvm = 1 ]; then lane="PVM"
elif [ -n "$EMULATED" ]; then lane="emulated hardware KVM (EMULATED=$EMULATED)"
elif [ $nested = 1 ]; then lane="KVM, nested (hypervisor CPU flag)"
else lane="hardware KVM"; fi
echo "# lane: $lane; $ITER iteration(s), NS=\"$NS\", timeout ${TIMEOUT}s, $(nproc) CPUs"
echo "# run kind first_ms exit_ms stdout_bytes status ok"
# Round 0, outside the medians: a cold run (the page cache) and the making run.
run_true cold0 --cold
run_true make
i=0
while [ $i -lt "$ITER" ]; do
	i=$((i + 1))
	run_true cold --cold
	run_true tpl
	run_echo cold --cold
	run_echo tpl
done
# fork: copies of one running sandbox, one after the other.
FORKRES=$OUT/start-fork.txt
: >"$FORKRES"
echo "# fork: i pause_ms up_ms ok"
src=bs$$-fsrc
echo "$src" >>"$tmp/names"
if timeout "$TIMEOUT" "$B/kbox" run -d --name "$src" -- sleep 600 >/dev/null 2>"$tmp/fsrc.err"; then
	i=0
	while [ $i -lt "$ITER" ]; do
		i=$((i + 1))
		cp=bs$$-fork$i
		echo "$cp" >>"$tmp/names"
		t0=$(now)
		ok=1
		timeout "$TIMEOUT" "$B/kbox" fork --verbose "$src" "$cp" >"$tmp/fork.out" 2>"$tmp/fork.err" || ok=0
		up_ms=$(ms "$t0" "$(now)")
		pause=$(sed -n 's/.* paused \([0-9.]*\) ms.*/\1/p' "$tmp/fork.err" | head -n 1)
		[ -n "$pause" ] && [ "$(cat "$tmp/fork.out")" = "$cp" ] || ok=0
		if [ $ok = 1 ]; then pass=$((pass + 1))
		else bad "fork $i: $(tail -n 3 "$tmp/fork.err")"; pause=-1; fi
		timeout 60 "$B/kbox" stop -t 5 "$cp" >/dev/null 2>&1 || true
		echo "fork $i ${pause:--1} $up_ms $ok" | tee -a "$FORKRES"
	done
	timeout 60 "$B/kbox" stop -t 5 "$src" >/dev/null 2>&1 || true
else
	bad "fork: the original did not start: $(tail -n 3 "$tmp/fsrc.err")"
fi
echo "# memory: kind N all_up_ms rss_kib pss_kib private_kib memavailable_drop_kib ok"
for n in $NS; do
	group cold "$n"
	group tpl "$n"
done

# med NAME KIND COLUMN: the median over the good runs (round 0's are
# cold0 and make).
med() {
	awk -v n="$1" -v k="$2" -v c="$3" '$1 == n && $2 == k && $7 == 1 && $c >= 0 { print $c }' "$RES" |
		median
}
# first_of KIND COLUMN: round 0's run of KIND.
first_of() { awk -v k="$1" -v c="$2" '$1 == "true" && $2 == k { print $c; exit }' "$RES"; }
memv() { awk -v k="$1" -v n="$2" -v c="$3" '$1 == k && $2 == n && $8 == 1 { v = $c } END { print (v == "" ? "-" : v) }' "$MEMRES"; }
mib() { awk -v v="$1" 'BEGIN { if (v == "-") print "-"; else printf "%.1f\n", v / 1024 }'; }
# lib.sh's ratio, with "-" for a missing value.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b <= 0) print "-"; else printf "%.2f\n", a / b }'; }

row() { printf '%-46s %12s %12s %12s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }

echo
echo "# lane: $lane; medians of $ITER"
printf '%-46s %12s %12s %12s\n' row cold template cold/template
row "kbox run -- true, start to exit (ms)" "$(med true cold 4)" "$(med true tpl 4)"
row "kbox run -- echo ready, to 1st byte (ms)" "$(med echo cold 3)" "$(med echo tpl 3)"
row "kbox run -- echo ready, to exit (ms)" "$(med echo cold 4)" "$(med echo tpl 4)"
for n in $NS; do
	row "$n at once: all up (ms)" "$(memv cold "$n" 3)" "$(memv tpl "$n" 3)"
	row "$n at once: sum of RSS (MiB)" "$(mib "$(memv cold "$n" 4)")" "$(mib "$(memv tpl "$n" 4)")"
	row "$n at once: sum of PSS (MiB)" "$(mib "$(memv cold "$n" 5)")" "$(mib "$(memv tpl "$n" 5)")"
	row "$n at once: sum of private (MiB)" "$(mib "$(memv cold "$n" 6)")" "$(mib "$(memv tpl "$n" 6)")"
	row "$n at once: MemAvailable drop (MiB)" "$(mib "$(memv cold "$n" 7)")" "$(mib "$(memv tpl "$n" 7)")"
done
echo "# outside the medians: the first cold run $(first_of cold0 4) ms (page cache);" \
	"the making run (boots cold, saves the template) $(first_of make 4) ms"
lo=$(echo "$NS" | tr ' ' '\n' | grep . | sort -n | head -n 1)
hi=$(echo "$NS" | tr ' ' '\n' | grep . | sort -n | tail -n 1)
if [ "$lo" != "$hi" ]; then
	# over KIND COLUMN: the largest N's value over the smallest's, as "R x".
	over() { ratio "$(memv "$1" "$hi" "$2")" "$(memv "$1" "$lo" "$2")" | sed 's/^[0-9.]*$/&x/'; }
	echo "# $hi restored / $lo restored: RSS $(over tpl 4) (target for 8 / 1: under 3x)," \
		"PSS $(over tpl 5), private $(over tpl 6), MemAvailable drop $(over tpl 7);" \
		"cold: RSS $(over cold 4), PSS $(over cold 5)"
fi
fmed() { awk -v c="$1" '$5 == 1 && $c >= 0 { print $c }' "$FORKRES" | median; }
printf '%-46s %12s %12s %12s\n' "fork" "kbox fork" "run -d (tpl)" "fork/run -d"
row "up: kbox fork vs kbox run -d from the template (ms)" "$(fmed 4)" "$(memv tpl "$lo" 3)"
echo "# kbox fork: the original paused $(fmed 3) ms (median of $ITER; save of vCPUs, devices, RAM)"
echo "# RSS counts the template's pages in every sandbox that maps them; PSS shares them out;"
echo "# private: pages mapped by one process only (Private_Clean + Private_Dirty). MemAvailable is"
echo "# the whole machine's: other work moves it (a negative drop: memory was freed meanwhile)."
if [ $pvm = 1 ]; then
	echo "# PVM host: guest ring 0 is emulated; times measure the emulator more than kbox."
fi
if [ -n "$EMULATED" ]; then
	echo "# EMULATED ($EMULATED): this machine is itself a guest in software emulation; absolute"
	echo "# times say nothing about hardware: ONLY THE RATIOS (same run, same kernel) mean something."
elif [ $nested = 1 ]; then
	echo "# nested: this machine is itself a virtual machine (hypervisor CPU flag)."
fi
echo "# raw runs: $RES, $MEMRES, $FORKRES"
if [ -n "$EMULATED" ]; then
	# An emulated machine's files go with it: the raw runs into the output.
	sed 's/^/# raw: /' "$RES"
	sed 's/^/# raw memory: /' "$MEMRES"
	sed 's/^/# raw fork: /' "$FORKRES"
fi
echo "bench-start: $pass passed, $fail failed"
[ $fail = 0 ]
