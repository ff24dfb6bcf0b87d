#!/bin/bash
# What kbox pays per SYN to tell the host's own addresses from others
# (netstack/hostaddr.h), measured in a network namespace made here (and
# removed again) with ADDRS addresses on its loopback and a veth pair to
# a second one, so that the look-up has a routed remote address to find.
# Nothing is sent: the kernel answers route look-ups from its tables.
#
#   bench/net/hostaddr.sh [ADDRS] [ROUNDS]   # root; ADDRS 100, ROUNDS 20000
set -eu
cd "$(dirname "$0")/../.."
ADDRS=${1:-100} ROUNDS=${2:-20000}
NS=kbox-ha-$$ FAR=kbox-hf-$$ BIN=$(mktemp)
trap 'ip netns del "$NS" 2>/dev/null; ip netns del "$FAR" 2>/dev/null; rm -f "$BIN"' EXIT
cc -std=c11 -D_GNU_SOURCE -O2 -I. -o "$BIN" bench/net/hostaddr.c netstack/hostaddr.c netstack/policy.c \
	lib/errbuf.c lib/grow.c -lpthread
ip netns add "$NS"
ip netns add "$FAR"
ip -n "$NS" link set lo up
for i in $(seq "$ADDRS"); do echo "addr add 5.6.$((i / 256)).$((i % 256))/32 dev lo"; done | ip -n "$NS" -batch -
ip -n "$NS" link add kbv0 type veth peer name kbv1 netns "$FAR"
ip -n "$NS" addr add 5.7.0.2/24 dev kbv0
ip -n "$NS" link set kbv0 up
echo "$ADDRS addresses on the host's loopback, $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
ip netns exec "$NS" "$BIN" "$ROUNDS"
