# shellcheck shell=bash
# Shared by the tests that run tests/net/harness (the netstack on a TAP
# device) with the host kernel as the guest: tests/net/run.sh and
# tests/tls/intercept.sh (bench/net/run.sh takes its harness build and
# nl_end_pids).  Source it from bash at the repository root.
#
# The tests call ok, bad, check, finish, H, G, start_harness and
# stop_harness throughout; the nl_ functions set things up once.
#
# Network safety (TESTING.md): everything here happens on loopback or in
# the two namespaces nl_namespaces makes, which cleanup deletes on exit.
# The "host" namespace ($HNS) has only its loopback, so nothing the stack
# dials can leave the machine; the "guest" namespace ($GNS) gets the TAP
# device and a resolv.conf naming the stack's gateway, 10.0.2.2, so no
# name is ever resolved through the host's resolver.

unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY

# One line per check, then "N passed, N failed"; finish exits non-zero on
# any failure.
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1${2:+: $2}"; fail=$((fail + 1)); }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$2', got '$3'"; fi; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; exit; }

# nl_require [CMD...]: skip the whole test (exit 0) unless we are root
# with /dev/net/tun, iproute2 and every CMD.
nl_require() {
	local c need="root, /dev/net/tun, iproute2" have=1
	[ "$(id -u)" = 0 ] && [ -c /dev/net/tun ] && command -v ip >/dev/null || have=
	for c in "$@"; do
		need="$need, $c"
		command -v "$c" >/dev/null || have=
	done
	if [ -z "$have" ]; then
		echo "SKIP: needs $need"
		finish
	fi
}

# nl_build_harness OUT BUILD: build tests/net/harness with the netstack
# and vmm/sandbox/tlsconf.c (interception set up as kbox run does) into OUT
# (start_harness runs it), under ASan+UBSan unless NET_SAN=0, against the
# lwIP the Makefile builds into BUILD/lwip; a failed build ends the test.
nl_build_harness() {
	local cf opt lw=$2/lwip
	if ! make -s BUILD="$2" "$lw/liblwip.a"; then
		bad "lwIP builds"
		finish
	fi
	cf="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wvla -Wformat=2 -I. -I$lw/include"
	if [ "${NET_SAN:-1}" = 1 ]; then
		opt="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
	else
		opt="-O2 -g"
	fi
	mkdir -p "$(dirname "$1")"
	# shellcheck disable=SC2086,SC2046
	if ! ${CC:-cc} $cf $opt -o "$1" tests/net/harness.c tests/net/tap.c lib/*.c netstack/*.c vmm/sandbox/tlsconf.c "$lw/liblwip.a" \
		-lbearssl -lyaml -lpthread; then
		bad "harness builds"
		finish
	fi
	HARNESS_BIN=$1
}

# nl_namespaces HOST_NS GUEST_NS TAP: make the two namespaces (names get
# this shell's PID appended, so parallel runs do not meet) with loopback
# up, the guest's resolv.conf and hosts, and a scratch directory $T; sets
# HNS, GNS, TAP, T and PIDS (processes that cleanup ends) and the traps
# that undo it all on exit.
nl_namespaces() {
	HNS=$1-$$ GNS=$2-$$ TAP=$3$$
	T=$(mktemp -d)
	PIDS=
	trap nl_cleanup EXIT
	trap 'exit 1' INT TERM
	ip netns add "$HNS" && ip netns add "$GNS" || { bad "namespaces"; finish; }
	ip -n "$HNS" link set lo up
	ip -n "$GNS" link set lo up
	# `ip netns exec` binds these over /etc in the guest namespace only.
	mkdir -p "/etc/netns/$GNS"
	echo "nameserver 10.0.2.2" >"/etc/netns/$GNS/resolv.conf"
	printf '127.0.0.1 localhost\n::1 localhost\n' >"/etc/netns/$GNS/hosts"
}

# End the processes in PIDS (TERM, up to 2 s, then KILL), delete both
# namespaces and the scratch files.
nl_cleanup() {
	nl_end_pids 2
	ip netns del "$HNS" 2>/dev/null
	ip netns del "$GNS" 2>/dev/null
	rm -rf "/etc/netns/$GNS" "$T"
}

# nl_end_pids SECONDS: end the processes in PIDS: TERM, then KILL for any
# still there after SECONDS.
nl_end_pids() {
	local p alive
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	for _ in $(seq $(($1 * 10))); do
		alive=
		for p in $PIDS; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ -z "$alive" ] && break
		sleep 0.1
	done
	for p in $PIDS; do kill -KILL "$p" 2>/dev/null; done
}

# Run a command in the host namespace; in the guest namespace, bounded by
# TMO seconds (30) and with GUEST_ENV (an array of NAME=VALUE) set.
GUEST_ENV=()
H() { ip netns exec "$HNS" "$@"; }
G() { ip netns exec "$GNS" timeout "${TMO:-30}" env "${GUEST_ENV[@]}" "$@"; }

# start_harness OUT ERR ARGS...: the stack in the host namespace on a new
# $TAP (with ARGS; it ends itself after NL_LIFETIME seconds, 150), then the
# TAP moved into the guest namespace as 10.0.2.15/24 with its default
# route via the stack, at MTU NL_MTU (65520, what virtio-net offers);
# sets HARNESS to its PID.  Variables assigned on the
# call reach the harness's environment.  A failure ends the test.
start_harness() {
	local out=$1 err=$2
	shift 2
	ip netns exec "$HNS" "$HARNESS_BIN" --tap "$TAP" --lifetime "${NL_LIFETIME:-150}" "$@" \
		>"$out" 2>"$err" &
	HARNESS=$!
	PIDS="$PIDS $HARNESS"
	for _ in $(seq 100); do grep -q '^ready' "$out" 2>/dev/null && break; sleep 0.1; done
	if ! grep -q '^ready' "$out"; then
		bad "harness starts" "$(cat "$err")"
		finish
	fi
	ip -n "$HNS" link set "$TAP" netns "$GNS" &&
		ip -n "$GNS" addr add 10.0.2.15/24 dev "$TAP" &&
		ip -n "$GNS" link set "$TAP" mtu "${NL_MTU:-65520}" up &&
		ip -n "$GNS" route add default via 10.0.2.2 || { bad "guest namespace set-up"; finish; }
}

# Ask the last harness to stop and wait up to 5 s for it (it prints its
# stats on the way out).
stop_harness() {
	kill -TERM "$HARNESS" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$HARNESS" 2>/dev/null || break; sleep 0.1; done
}

# nl_sanitizers_clean NAME FILE...: one check that no sanitizer reported
# in the harness's stderr files.
nl_sanitizers_clean() {
	local name=$1
	shift
	if grep -q "ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error" "$@"; then
		bad "$name" "$(grep -h -m3 "ERROR\|runtime error" "$@")"
	else
		ok "$name"
	fi
}
