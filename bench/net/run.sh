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
#   kbox-bk-PID  guest of kbox's stack (TAP, 10.0.2.15, gateway 10.0.2.2),
#                merged TCP segments towards the guest (lib/gso.h);
#   kbox-bK-PID  the same without them (--gso off: one frame per segment);
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
# timeout(1)), ONLY (a subset of "kbox kbox0 slirp slirp65k pasta").
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
declare -A GNS=([kbox]=kbox-bk-$ID [kbox0]=kbox-bK-$ID [slirp]=kbox-bs-$ID [slirp65k]=kbox-bS-$ID
	[pasta]=kbox-bp-$ID)
PEERS="kbox kbox0"
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
# start_kbox PEER TAP GSO
HARNESSES=
start_kbox() {
	local p=$1 tap=$2 g=${GNS[$1]}
	ip netns exec "$HNS" "$BUILD/bench/net-harness" --tap "$tap" --lifetime "$MAXTIME" --gso "$3" \
		--audit "$T/$p.audit" --allow host.kbox.internal:$PORT --allow host.kbox.internal:$IPORT \
		>"$T/$p.out" 2>"$T/$p.err" &
	HARNESSES="$HARNESSES $p:$!"
	PIDS="$PIDS $!"
	for _ in $(seq 50); do grep -q '^ready' "$T/$p.out" 2>/dev/null && break; sleep 0.1; done
	grep -q '^ready' "$T/$p.out" || { echo "harness did not start:"; cat "$T/$p.err"; exit 1; }
	ip -n "$HNS" link set "$tap" netns "$g" &&
		ip -n "$g" addr add 10.0.2.15/24 dev "$tap" &&
		ip -n "$g" link set "$tap" up &&
		ip -n "$g" route add default via 10.0.2.2 || exit 1
}

for p in $PEERS; do
	case $p in
	kbox) start_kbox kbox "kbbt$ID" on; continue ;;
	kbox0) start_kbox kbox0 "kbbu$ID" off; continue ;;
	slirp) ip netns exec "$HNS" slirp4netns --configure --mtu=1500 --netns-type=path \
		"/run/netns/${GNS[$p]}" tap0 >"$T/$p.log" 2>&1 & ;;
	slirp65k) ip netns exec "$HNS" slirp4netns --configure --mtu=65520 --netns-type=path \
		"/run/netns/${GNS[$p]}" tap0 >"$T/$p.log" 2>&1 & ;;
	pasta) ip netns exec "$HNS" pasta -f -q --runas 0:0 --config-net -t none -u none -T none -U none \
		--netns "${GNS[$p]}" >"$T/$p.log" 2>&1 & ;;
	*) continue ;;
	esac
	PIDS="$PIDS $!"
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
failed() {
	echo "# $1: $2 (left out)"
	echo "$1 bulk_failed 1" >>"$RAW"
}
BYTES=$((BULK_MB * 1048576))
head -c "$BYTES" /dev/zero >"$T/bulk.bin"
r=0
while [ $r -lt "$REPS" ]; do
	for p in direct $PEERS; do
		a=$(addr_of "$p")
		out=$(client "$p" curl -sS -o /dev/null -w '%{size_download} %{speed_download}' "http://$a:$PORT/$BYTES")
		set -- $out
		if [ "${1:-0}" = "$BYTES" ]; then
			echo "$p down $(awk -v s="$2" 'BEGIN { printf "%.1f", s / 1048576 }')" >>"$RAW"
		else
			failed "$p" "download got ${1:-nothing} bytes"
		fi
		out=$(client "$p" curl -sS -o "$T/put.out" -H 'Expect:' -T "$T/bulk.bin" -w '%{size_upload} %{speed_upload}' "http://$a:$PORT/up")
		set -- $out
		if [ "${1:-0}" = "$BYTES" ] && grep -q '^ok' "$T/put.out"; then
			echo "$p up $(awk -v s="$2" 'BEGIN { printf "%.1f", s / 1048576 }')" >>"$RAW"
		else
			failed "$p" "upload sent ${1:-nothing} bytes"
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
					failed "$p" "iperf3 $dir: $(head -c 300 "$T/iperf.json" | tr -s '\n' ' ')"
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
for p in $PEERS; do [ "$p" != kbox ] && printf '%14s' "kbox/$p"; done
echo
errors() { awk -v p="$1" '$1 == p && $2 == "bulk_failed" { n++ } END { print n + 0 }' "$RAW"; }
for m in down up iperf_down iperf_up rate connect_p50_ms connect_p99_ms request_p50_ms rate_errors bulk_errors; do
	case $m in iperf_*) [ -z "$IPERF" ] && continue; label="$m (MiB/s)" ;; down | up) label="$m (MiB/s)" ;; rate) label="rate (req/s)" ;; *) label=$m ;; esac
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
echo "# kbox/PEER: above 1 means kbox is faster for MiB/s and req/s, slower for the ms rows."
echo "# kbox, kbox0: lwIP's fixed MSS 1460 (MTU 1500), kbox with segments merged into frames of up to 64 KiB;"
echo "# slirp65k and pasta use a 65520-byte MTU."
for h in $HARNESSES; do
	p=${h%%:*} pid=${h#*:}
	kill -TERM "$pid" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	grep '^stats' "$T/$p.out" | sed "s/^/# $p /"
	errs=$(grep -o '"error":"[A-Z]*"' "$T/$p.audit" | sort | uniq -c | tr -s ' \n' ' ')
	[ -n "$errs" ] && echo "# $p audit log, failed host connects: $errs"
done
echo "# raw runs: $RAW"
