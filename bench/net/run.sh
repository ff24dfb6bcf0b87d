#!/bin/bash
# bench/net: kbox's network stack (netstack/, lwIP, through the TAP
# harness of tests/net) against slirp4netns and pasta (passt), with the
# same server and the same clients, in one run.
#
#   apt-get install -y --no-install-recommends slirp4netns passt iperf3   # once; the bench only
#   bench/net/run.sh [BUILD_DIR]                                     # root, /dev/net/tun
#
# Namespaces made here, and nothing else touched (TESTING.md):
#   kbox-bh-PID  the "host": netbench's HTTP server on 127.0.0.1:8080,
#                iperf3's server on 127.0.0.1:5201, the kbox harnesses,
#                slirp4netns and pasta; its only other
#                interface is one end of a veth pair (10.0.2.15/24, default
#                via 10.0.2.2: pasta copies it as its template);
#   kbox-bx-PID  the veth's other end, alone: what goes there stays there;
#   kbox-bk-PID  guest of kbox's stack (TAP, 10.0.2.15, gateway 10.0.2.2)
#                at MTU 65520, what kbox's virtio-net offers;
#   kbox-bK-PID  the same at MTU 1500 (a guest that does not take the MTU),
#                lwIP's segments merged into large frames (lib/gso.h);
#   kbox-bs-PID  guest of slirp4netns, MTU 1500 (its default);
#   kbox-bS-PID  guest of slirp4netns --mtu 65520;
#   kbox-bp-PID  guest of pasta (MTU 65520, its default).
# Each guest reaches the servers as 10.0.2.2:8080 and :5201, which every
# contestant maps to the host's loopback (kbox: host.kbox.internal with
# an allow rule for each port; slirp4netns and pasta: their gateway
# mapping). "direct" is the client in the host namespace on 127.0.0.1,
# the ceiling.
#
# Measures, REPS times with the contestants taking turns (medians):
#   down / up   curl GET / PUT of BULK_MB MiB (sizes checked), MiB/s
#   iperf_down / iperf_up   iperf3 -R / iperf3 for IPERF_S seconds, one
#               stream, MiB/s as its receiver counted them (when iperf3 is
#               installed)
#   bulk_errors transfers of these four that failed (a reset, a short
#               count): reported and left out of the medians
#   rate        RATE_THREADS threads of connect, GET /64, read to EOF,
#               close, for RATE_S seconds: requests/s
#   connect     LAT_N such requests one after another: connect() p50/p99
#               (until the SYN-ACK; kbox answers it once its host connect
#               succeeded) and the whole request p50, in ms
# Environment: BULK_MB (200), REPS (3), RATE_S (5), RATE_THREADS (8),
# LAT_N (300), IPERF_S (5), MAXTIME (900 s for the whole run, through
# timeout(1)), ONLY (a subset of "kbox kbox1500 slirp slirp65k pasta").
# Also: cpu_s_per_gib, the CPU seconds (user + system) the contestant's
# own process spent per GiB moved by the down and up transfers (the
# clients and the server are the same for all and are not counted).
# The last line, "bench-net ratios: down X up Y rps Z", is kbox's median
# over the best peer's (slirp4netns, pasta) for each row; a peer whose run
# had errors in that row does not count for it.
# Raw runs go to BUILD_DIR/bench/net.txt; everything made is removed on exit.
set -u
cd "$(dirname "$0")/../.."
TOP=$(pwd)
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
BULK_MB=${BULK_MB:-200}
REPS=${REPS:-3}
RATE_S=${RATE_S:-5}
RATE_THREADS=${RATE_THREADS:-8}
LAT_N=${LAT_N:-300}
IPERF_S=${IPERF_S:-5}
MAXTIME=${MAXTIME:-900}
PORT=8080
IPORT=5201

if [ -z "${KBOX_BENCH_NET_BOUNDED:-}" ]; then
	KBOX_BENCH_NET_BOUNDED=1 exec timeout -k 20 "$MAXTIME" "$0" "$@"
fi
if [ "$(id -u)" != 0 ] || [ ! -c /dev/net/tun ] || ! command -v ip >/dev/null || ! command -v curl >/dev/null; then
	echo "skip: bench/net needs root, /dev/net/tun, iproute2 and curl"
	exit 0
fi
# The TAP harness's build, H and nl_end_pids (it also unsets the proxy
# variables).
# shellcheck source=tests/net/lib.sh
. tests/net/lib.sh

mkdir -p "$BUILD/bench"
RAW=$BUILD/bench/net.txt
: >"$RAW"
NET_SAN=0 nl_build_harness "$BUILD/bench/net-harness" "$BUILD"
CF="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wvla -Wformat=2 -I. -O2 -g"
# shellcheck disable=SC2086
${CC:-cc} $CF -o "$BUILD/bench/netbench" bench/net/netbench.c -lpthread || exit 1
NB=$BUILD/bench/netbench

ID=$$
HNS=kbox-bh-$ID XNS=kbox-bx-$ID
declare -A GNS=([kbox]=kbox-bk-$ID [kbox1500]=kbox-bK-$ID [slirp]=kbox-bs-$ID [slirp65k]=kbox-bS-$ID
	[pasta]=kbox-bp-$ID)
declare -A MTU=([kbox]=65520 [kbox1500]=1500 [slirp]=1500 [slirp65k]=65520 [pasta]=65520)
declare -A PPID_OF=()
PEERS="kbox kbox1500"
if command -v slirp4netns >/dev/null; then
	PEERS="$PEERS slirp slirp65k"
else
	echo "# slirp4netns missing (apt-get install slirp4netns): its columns are left out"
fi
if command -v pasta >/dev/null; then
	PEERS="$PEERS pasta"
else
	echo "# pasta missing (apt-get install passt): its column is left out"
fi
IPERF=
if command -v iperf3 >/dev/null; then
	IPERF=1
else
	echo "# iperf3 missing (apt-get install iperf3): its rows are left out"
fi
if [ -n "${ONLY:-}" ]; then
	want=
	for p in $PEERS; do case " $ONLY " in *" $p "*) want="$want $p" ;; esac; done
	PEERS=${want# }
fi
T=$(mktemp -d /var/tmp/kbox-bench-net.XXXXXX)
PIDS=
cleanup() {
	nl_end_pids 3
	for n in "${GNS[@]}" "$HNS" "$XNS"; do ip netns del "$n" 2>/dev/null; done
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

G() { local p=$1; shift; ip netns exec "${GNS[$p]}" timeout 300 "$@"; }

ip netns add "$HNS" || exit 1
ip -n "$HNS" link set lo up
# pasta needs a routable interface to copy: one end of a veth pair whose
# other end sits alone in a namespace of ours, up, without an address.
ip netns add "$XNS" || exit 1
ip -n "$HNS" link add kbv0 type veth peer name kbv1 netns "$XNS" &&
	ip -n "$HNS" addr add 10.0.2.15/24 dev kbv0 &&
	ip -n "$HNS" link set kbv0 up &&
	ip -n "$XNS" link set kbv1 up &&
	ip -n "$HNS" route add default via 10.0.2.2 || exit 1
for p in direct $PEERS; do
	[ "$p" = direct ] && continue
	ip netns add "${GNS[$p]}" || exit 1
	ip -n "${GNS[$p]}" link set lo up
done
for n in "$HNS" "${GNS[@]}"; do
	ip netns exec "$n" sysctl -qw net.ipv4.ip_local_port_range="1024 65000" 2>/dev/null
done

ip netns exec "$HNS" "$NB" serve $PORT "$MAXTIME" >"$T/server.out" 2>&1 &
PIDS="$PIDS $!"
if [ -n "$IPERF" ]; then
	ip netns exec "$HNS" iperf3 -s -B 127.0.0.1 -p $IPORT >"$T/iperf.out" 2>&1 &
	PIDS="$PIDS $!"
fi

# kbox: the harness's stack on a TAP that then moves to the guest.
# start_kbox PEER TAP
HARNESSES=
start_kbox() {
	local p=$1 tap=$2 g=${GNS[$1]}
	ip netns exec "$HNS" "$BUILD/bench/net-harness" --tap "$tap" --lifetime "$MAXTIME" --gso on \
		--audit "$T/$p.audit" --allow host.kbox.internal:$PORT --allow host.kbox.internal:$IPORT \
		>"$T/$p.out" 2>"$T/$p.err" &
	HARNESSES="$HARNESSES $p:$!"
	PIDS="$PIDS $!"
	PPID_OF[$p]=$!
	for _ in $(seq 50); do grep -q '^ready' "$T/$p.out" 2>/dev/null && break; sleep 0.1; done
	grep -q '^ready' "$T/$p.out" || { echo "harness did not start:"; cat "$T/$p.err"; exit 1; }
	ip -n "$HNS" link set "$tap" netns "$g" &&
		ip -n "$g" addr add 10.0.2.15/24 dev "$tap" &&
		ip -n "$g" link set "$tap" mtu "${MTU[$p]}" up &&
		ip -n "$g" route add default via 10.0.2.2 || exit 1
}

for p in $PEERS; do
	case $p in
	kbox) start_kbox kbox "kbbt$ID"; continue ;;
	kbox1500) start_kbox kbox1500 "kbbu$ID"; continue ;;
	slirp) ip netns exec "$HNS" slirp4netns --configure --mtu=1500 --netns-type=path \
		"/run/netns/${GNS[$p]}" tap0 >"$T/$p.log" 2>&1 & ;;
	slirp65k) ip netns exec "$HNS" slirp4netns --configure --mtu=65520 --netns-type=path \
		"/run/netns/${GNS[$p]}" tap0 >"$T/$p.log" 2>&1 & ;;
	pasta) ip netns exec "$HNS" pasta -f -q --runas 0:0 --config-net -t none -u none -T none -U none \
		--netns "${GNS[$p]}" >"$T/$p.log" 2>&1 & ;;
	*) continue ;;
	esac
	PIDS="$PIDS $!"
	PPID_OF[$p]=$!
done

URL=http://10.0.2.2:$PORT
client() { # client PEER CMD...: CMD in PEER's guest namespace, or in the host's for direct
	local p=$1; shift
	if [ "$p" = direct ]; then H timeout 300 "$@"; else G "$p" "$@"; fi
}
addr_of() { if [ "$1" = direct ]; then echo 127.0.0.1; else echo 10.0.2.2; fi; }
for p in direct $PEERS; do
	ok=
	for _ in $(seq 100); do
		client "$p" curl -s -o /dev/null --max-time 1 "http://$(addr_of "$p"):$PORT/1" && { ok=1; break; }
		sleep 0.1
	done
	if [ -z "$ok" ]; then
		echo "$p: the server is not reachable"
		cat "$T/$p.log" 2>/dev/null
		exit 1
	fi
done
echo "# set-up done: $PEERS, and direct; $BULK_MB MiB bulk, $REPS runs, rate ${RATE_S}s x $RATE_THREADS, $LAT_N sequential requests"

# A failed transfer is left out of the medians and counted (bulk_errors)
# rather than ending the run: one contestant's reset must not lose the
# others' figures.
failed() { # failed PEER ROW WHY
	echo "# $1 $2: $3 (left out)"
	echo "$1 bulk_failed 1" >>"$RAW"
	echo "$1 failed_$2 1" >>"$RAW"
}
# cpu PEER: the CPU time (clock ticks, user + system, all threads) of
# PEER's process so far; nothing for direct.
cpu() {
	local pid=${PPID_OF[$1]:-}
	[ -n "$pid" ] && awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null
}
HZ=$(getconf CLK_TCK)
BYTES=$((BULK_MB * 1048576))
head -c "$BYTES" /dev/zero >"$T/bulk.bin"
r=0
while [ $r -lt "$REPS" ]; do
	for p in direct $PEERS; do
		a=$(addr_of "$p")
		c0=$(cpu "$p")
		out=$(client "$p" curl -sS -o /dev/null -w '%{size_download} %{speed_download}' "http://$a:$PORT/$BYTES")
		c1=$(cpu "$p")
		set -- $out
		if [ "${1:-0}" = "$BYTES" ]; then
			echo "$p down $(awk -v s="$2" 'BEGIN { printf "%.1f", s / 1048576 }')" >>"$RAW"
			[ -n "$c0" ] && echo "$p cpu_s_per_gib_down $(awk -v t=$((c1 - c0)) -v hz="$HZ" -v b="$BYTES" 'BEGIN { printf "%.2f", t / hz / (b / 1073741824) }')" >>"$RAW"
		else
			failed "$p" down "download got ${1:-nothing} bytes"
		fi
		c0=$(cpu "$p")
		out=$(client "$p" curl -sS -o "$T/put.out" -H 'Expect:' -T "$T/bulk.bin" -w '%{size_upload} %{speed_upload}' "http://$a:$PORT/up")
		c1=$(cpu "$p")
		set -- $out
		if [ "${1:-0}" = "$BYTES" ] && grep -q '^ok' "$T/put.out"; then
			echo "$p up $(awk -v s="$2" 'BEGIN { printf "%.1f", s / 1048576 }')" >>"$RAW"
			[ -n "$c0" ] && echo "$p cpu_s_per_gib_up $(awk -v t=$((c1 - c0)) -v hz="$HZ" -v b="$BYTES" 'BEGIN { printf "%.2f", t / hz / (b / 1073741824) }')" >>"$RAW"
		else
			failed "$p" up "upload sent ${1:-nothing} bytes"
		fi
		if [ -n "$IPERF" ]; then
			for dir in down up; do
				flag=
				[ $dir = down ] && flag=-R
				client "$p" iperf3 -c "$a" -p $IPORT -t "$IPERF_S" $flag -J >"$T/iperf.json" 2>&1
				v=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))["end"]["sum_received"]
print("%.1f" % (d["bytes"] / d["seconds"] / 1048576))' "$T/iperf.json" 2>/dev/null)
				if [ -n "$v" ]; then
					echo "$p iperf_$dir $v" >>"$RAW"
				else
					failed "$p" "iperf_$dir" "iperf3 $dir: $(head -c 300 "$T/iperf.json" | tr -s '\n' ' ')"
				fi
			done
		fi
		out=$(client "$p" "$NB" rate "$a" $PORT "$RATE_S" "$RATE_THREADS")
		echo "$p rate $(echo "$out" | sed -n 's/.*rps=\([0-9.]*\).*/\1/p')" >>"$RAW"
		echo "$p rate_errors $(echo "$out" | sed -n 's/.*errors=\([0-9]*\).*/\1/p')" >>"$RAW"
		out=$(client "$p" "$NB" latency "$a" $PORT "$LAT_N")
		for k in connect_p50_ms connect_p99_ms request_p50_ms; do
			echo "$p $k $(echo "$out" | sed -n "s/.*$k=\([0-9.]*\).*/\1/p")" >>"$RAW"
		done
	done
	r=$((r + 1))
	echo "# run $r of $REPS done"
done

median() { # median PEER METRIC
	awk -v p="$1" -v m="$2" '$1 == p && $2 == m { print $3 }' "$RAW" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
}
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f\n", a / b }'
}
echo
printf '%-22s' metric
for p in direct $PEERS; do printf '%10s' "$p"; done
echo
printf '%-22s' "MTU"
for p in direct $PEERS; do printf '%10s' "${MTU[$p]:-lo}"; done
for p in $PEERS; do [ "$p" != kbox ] && printf '%14s' "kbox/$p"; done
echo
errors() { awk -v p="$1" '$1 == p && $2 == "bulk_failed" { n++ } END { print n + 0 }' "$RAW"; }
for m in down up cpu_s_per_gib_down cpu_s_per_gib_up iperf_down iperf_up rate connect_p50_ms connect_p99_ms request_p50_ms rate_errors bulk_errors; do
	case $m in iperf_*) [ -z "$IPERF" ] && continue; label="$m (MiB/s)" ;; down | up) label="$m (MiB/s)" ;; rate) label="rate (req/s)" ;; cpu_s_per_gib_*) label=cpu_s/GiB_${m#cpu_s_per_gib_} ;; *) label=$m ;; esac
	printf '%-22s' "$label"
	if [ "$m" = bulk_errors ]; then
		for p in direct $PEERS; do printf '%10s' "$(errors "$p")"; done
		echo
		continue
	fi
	for p in direct $PEERS; do printf '%10s' "$(median "$p" "$m")"; done
	for p in $PEERS; do
		[ "$p" != kbox ] && [ "$m" != rate_errors ] && printf '%14s' "$(ratio "$(median kbox "$m")" "$(median "$p" "$m")")"
	done
	echo
done
echo "# kbox/PEER: above 1 means kbox is faster for MiB/s and req/s, slower for the ms and cpu rows."
echo "# kbox1500: a guest at MTU 1500, lwIP's 1460-byte segments merged into frames of up to 64 KiB."
# The best peer of a row: the highest median among slirp4netns and pasta
# whose runs had no error in that row.
best() { # best ROW
	local p v b=- bp=-
	for p in $PEERS; do
		case $p in kbox*) continue ;; esac
		if [ "$1" = rate ]; then
			[ "$(awk -v p="$p" '$1 == p && $2 == "rate_errors" { n += $3 } END { print n + 0 }' "$RAW")" = 0 ] || continue
		else
			grep -q "^$p failed_$1 " "$RAW" && continue
		fi
		v=$(median "$p" "$1")
		[ "$v" = - ] && continue
		if [ "$b" = - ] || awk -v a="$v" -v b="$b" 'BEGIN { exit !(a > b) }'; then b=$v bp=$p; fi
	done
	echo "$bp $b"
}
line="bench-net ratios:"
for m in down up rate; do
	set -- $(best $m)
	k=$(median kbox $m)
	[ "$m" = rate ] && [ "$(awk '$1 == "kbox" && $2 == "rate_errors" { n += $3 } END { print n + 0 }' "$RAW")" != 0 ] && k=-
	case $m in down | up) grep -q "^kbox failed_$m " "$RAW" && k=- ;; esac
	label=$m
	[ $m = rate ] && label=rps
	line="$line $label $(ratio "$k" "$2")"
	detail="${detail:-}${detail:+, }$label: kbox $k vs $1 $2"
done
echo "# ratios against the best working peer per row: $detail"
echo "# kbox's CPU per GiB moved: down $(median kbox cpu_s_per_gib_down) s, up $(median kbox cpu_s_per_gib_up) s"
for h in $HARNESSES; do
	p=${h%%:*} pid=${h#*:}
	kill -TERM "$pid" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	grep '^stats' "$T/$p.out" | sed "s/^/# $p /"
	errs=$(grep -o '"error":"[A-Z]*"' "$T/$p.audit" | sort | uniq -c | tr -s ' \n' ' ')
	[ -n "$errs" ] && echo "# $p audit log, failed host connects: $errs"
done
echo "# raw runs: $RAW"
echo "$line"
