#!/bin/bash
# IPv6 through the netstack on a TAP device, with the host kernel as the
# guest (TESTING.md, layer 2): the guest namespace gets kbox's fixed IPv6
# addressing (fd6b:626f:7800::f/64, default route via ::2, as guest-init
# sets it) beside IPv4, and a "remote" namespace joined to the host one by
# a veth pair holds a server at a global-looking IPv6 address (only in
# namespaces made here, so nothing leaves the machine).  Checks: neighbor
# discovery for the gateway, ICMPv6 echo, AAAA answers (the resolver's,
# a pinned name's, host.kbox.internal's), HTTP over IPv6 to the remote
# server byte-exact both ways (10 MiB each way), the gateway's IPv6
# address reaching the host's loopback as host.kbox.internal, the IPv6
# forms of blocked destinations (ULA, NAT64 and IPv4-mapped forms of
# private IPv4, the gateway's own link-local neighbours) reset fast and
# audited, UDP over IPv6 refused with ICMPv6, allowlist mode judging
# IPv6 addresses by name, and a sanitizer-clean harness.  Needs root and
# /dev/net/tun.  One line per check, then "N passed, N failed".
# Usage: tests/net/ipv6.sh [BUILD_DIR]   (NET_SAN=0: build without sanitizers)
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/net/lib.sh
. tests/net/lib.sh
nl_require curl python3
nl_build_harness "${1:-build}/net/harness" "${1:-build}"
nl_namespaces kbox-n6h kbox-n6g kb6tap
FNS=kbox-n6f-$$
trap 'nl_cleanup; ip netns del "$FNS" 2>/dev/null' EXIT
GW6=fd6b:626f:7800::2
GUEST6=fd6b:626f:7800::f
FAR6=2a01:5:7::1
{
	ip netns add "$FNS" &&
		ip -n "$HNS" link add kb6v0 type veth peer name kb6v1 netns "$FNS" &&
		ip -n "$HNS" addr add 2a01:5:7::2/64 dev kb6v0 nodad && ip -n "$HNS" link set kb6v0 up &&
		ip -n "$FNS" addr add "$FAR6/64" dev kb6v1 nodad && ip -n "$FNS" link set kb6v1 up &&
		ip -n "$FNS" link set lo up
} || bad "remote namespace"

mkdir -p "$T/www"
echo "hello over six" >"$T/www/small.txt"
head -c 10485760 /dev/urandom >"$T/www/big.bin"
BIGSUM=$(sha256sum <"$T/www/big.bin" | cut -d' ' -f1)
ip netns exec "$FNS" python3 tests/net/server.py "$FAR6" 8004 "$T/www" &
PIDS="$PIDS $!"
ip netns exec "$HNS" python3 tests/net/server.py 127.0.0.1 8000 "$T/www" &
PIDS="$PIDS $!"
for _ in $(seq 50); do
	ip netns exec "$FNS" python3 -c "import socket; socket.create_connection(('$FAR6', 8004), 1)" 2>/dev/null &&
		H python3 -c "import socket; socket.create_connection(('127.0.0.1', 8000), 1)" 2>/dev/null && break
	sleep 0.1
done

# The guest's IPv6 as guest-init sets it: a static address without
# duplicate address detection, no router discovery.
guest6() {
	ip netns exec "$GNS" sysctl -qw net.ipv6.conf."$TAP".accept_ra=0 net.ipv6.conf."$TAP".accept_dad=0 &&
		ip -n "$GNS" addr add "$GUEST6/64" dev "$TAP" nodad &&
		ip -n "$GNS" -6 route add default via "$GW6" dev "$TAP"
}

AUDIT=$T/audit.log
start_harness "$T/h.out" "$T/h.err" --audit "$AUDIT" --allow host.kbox.internal:8000 \
	--resolve six.test="$FAR6" --resolve ula.test=fd00::5 --resolve dual.test=5.7.0.1 --resolve dual.test="$FAR6" \
	--add-host pin6.test:"$FAR6"
guest6 || bad "guest IPv6 set-up"

# --- the link ---
out=$(G python3 - <<'PY' 2>&1
import socket, struct
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.settimeout(2)
s.sendto(struct.pack("!BBHHH", 128, 0, 0, 0x4b42, 1) + b"kbox-ping6", ("fd6b:626f:7800::2", 0))
while True:  # the socket sees every ICMPv6 message: skip neighbor discovery
    r = s.recv(200)  # the kernel checks the checksum and strips the header
    if r[0] != 135 and r[0] != 136:
        break
print("reply" if r[0] == 129 and r[4:6] == b"KB" and r[8:] == b"kbox-ping6" else "bad %r" % r)
PY
)
check "ICMPv6 echo to the gateway" "reply" "$out"
check "neighbor discovery: the gateway is at its MAC" "52:55:0a:00:02:02" \
	"$(ip -n "$GNS" -6 neigh show "$GW6" dev "$TAP" | awk '{for (i = 1; i < NF; i++) if ($i == "lladdr") print $(i + 1)}')"

# --- DNS ---
check "DNS: AAAA from the resolver" "$FAR6" "$(G getent ahostsv6 six.test | awk 'NR==1{print $1}')"
check "DNS: AAAA of a pinned name" "$FAR6" "$(G getent ahostsv6 pin6.test | awk 'NR==1{print $1}')"
check "DNS: AAAA of host.kbox.internal is the gateway's" "$GW6" \
	"$(G getent ahostsv6 host.kbox.internal | awk 'NR==1{print $1}')"
check "DNS: a ULA answer is dropped (rebinding)" "" "$(G getent ahostsv6 ula.test | awk 'NR==1{print $1}')"

# --- TCP over IPv6 ---
check "curl -6: small file by address" "hello over six" "$(G curl -6 -sS --max-time 10 "http://[$FAR6]:8004/small.txt")"
check "curl -6: small file by name" "hello over six" "$(G curl -6 -sS --max-time 10 http://six.test:8004/small.txt)"
G curl -6 -sS --max-time 60 -o "$T/dl.bin" "http://[$FAR6]:8004/big.bin"
check "curl -6: 10 MiB download, sha256" "$BIGSUM" "$(sha256sum <"$T/dl.bin" | cut -d' ' -f1)"
check "curl -6: 10 MiB upload, sha256" "$BIGSUM" \
	"$(G curl -6 -sS --max-time 60 --data-binary @"$T/www/big.bin" "http://[$FAR6]:8004/sha")"
check "python: 64 MiB each way checked piece by piece" "ok ok" \
	"$(G python3 tests/net/bulk.py get "$FAR6" 8004 67108864 6 | cut -d' ' -f1) $(G python3 tests/net/bulk.py put "$FAR6" 8004 67108864 7 | cut -d' ' -f1)"
check "curl -6: the gateway's address is the host's loopback" "hello over six" \
	"$(G curl -6 -sS --max-time 10 "http://[$GW6]:8000/small.txt")"
check "curl: host.kbox.internal by IPv6" "hello over six" \
	"$(G curl -6 -sS --max-time 10 http://host.kbox.internal:8000/small.txt)"
n=0
for i in $(seq 20); do G curl -6 -sS --max-time 10 -o /dev/null "http://[$FAR6]:8004/small.txt" && n=$((n + 1)); done
check "curl -6: 20 connections one after another" 20 "$n"

# --- refused over IPv6: reset at once, audited ---
refused() { # NAME URL: curl fails within 1 s
	local t0 t1 rc
	t0=$(date +%s%N)
	G curl -6 -sS --max-time 5 -o /dev/null "$2" 2>/dev/null
	rc=$?
	t1=$(date +%s%N)
	if [ $rc != 0 ] && [ $(((t1 - t0) / 1000000)) -lt 1000 ]; then ok "$1"; else
		bad "$1" "rc $rc, $(((t1 - t0) / 1000000)) ms"; fi
}
refused "refused: ULA fd00::5" "http://[fd00::5]:80/"
refused "refused: NAT64 form of 10.0.0.1" "http://[64:ff9b::a00:1]:80/"
refused "refused: NAT64 form of 127.0.0.1" "http://[64:ff9b::7f00:1]:8000/"
refused "refused: IPv4-compatible ::127.0.0.1" "http://[::127.0.0.1]:8000/"
refused "refused: the guest's own prefix" "http://[fd6b:626f:7800::9]:80/"
refused "refused: 6to4 form of 192.168.1.1" "http://[2002:c0a8:101::1]:80/"
sleep 0.3
grep -q '"dst":"\[fd00::5\]:80",.*"decision":"deny","rule":"class:' "$AUDIT" && ok "audit: the ULA refusal" ||
	bad "audit: the ULA refusal" "$(grep -m2 fd00 "$AUDIT")"
grep -q "\"dst\":\"\[$FAR6\]:8004\",.*\"decision\":\"allow\"" "$AUDIT" && ok "audit: the allowed IPv6 connection" ||
	bad "audit: the allowed IPv6 connection" "$(tail -3 "$AUDIT")"

# --- UDP over IPv6: refused with ICMPv6 port unreachable ---
out=$(G python3 - <<PY 2>&1
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.settimeout(2)
s.connect(("$FAR6", 443))
s.send(b"quic?")
try:
    s.recv(100)
    print("answered")
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")
PY
)
check "UDP over IPv6: port unreachable at once" "refused" "$out"
stop_harness
nl_sanitizers_clean "harness: no sanitizer reports" "$T/h.err"

# --- allowlist mode: an IPv6 address is judged by the name that gave it ---
start_harness "$T/a.out" "$T/a.err" --audit "$T/a.log" --mode allowlist --allow six.test \
	--resolve six.test="$FAR6" --resolve other.test="$FAR6"
guest6 || bad "guest IPv6 set-up (allowlist)"
check "allowlist: the allowed name over IPv6" "hello over six" \
	"$(G curl -6 -sS --max-time 10 http://six.test:8004/small.txt)"
G curl -6 -sS --max-time 5 -o /dev/null "http://[2a01:5:7::3]:8004/" 2>/dev/null &&
	bad "allowlist: an address without a name is refused" || ok "allowlist: an address without a name is refused"
stop_harness
nl_sanitizers_clean "harness (allowlist): no sanitizer reports" "$T/a.err"
finish
