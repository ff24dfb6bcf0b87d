#!/bin/bash
# The exec agent and client against each other on the host over a
# socketpair or an AF_UNIX listener (tests/exec/loopback.c): exit codes,
# separated streams, 100 MiB out and 10 MiB in byte-exact, a tty, signals,
# backpressure corner cases, concurrency.  One line per check, then
# "N passed, N failed"; exits non-zero on failure.  Every command runs
# under a timeout.  Usage: tests/exec/run.sh [BUILD_DIR]
set -u
cd "$(dirname "$0")/../.."
B=${1:-build}/exec
mkdir -p "$B"
T=$(mktemp -d)
SERVER= HYB=
cleanup() {
	[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null
	[ -n "$HYB" ] && kill "$HYB" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT

pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1${2:+: $2}"; fail=$((fail + 1)); }
# check NAME EXPECTED ACTUAL
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$2', got '$3'"; fi; }

SRCS="tests/exec/loopback.c guest-init/agent.c guest-init/senv.c proto/exec_proto.c vmm/sandbox/exec_client.c vmm/sandbox/agent_conn.c"
CF="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wvla -Wformat=2 -I."
if ! ${CC:-cc} $CF -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer -o "$B/loopback-san" $SRCS ||
	! ${CC:-cc} $CF -O2 -g -o "$B/loopback" $SRCS; then
	echo "FAIL build"
	echo "0 passed, 1 failed"
	exit 1
fi
if command -v musl-gcc >/dev/null; then
	if musl-gcc $CF -Os -static -o "$B/agent-musl.o" -c guest-init/agent.c &&
		musl-gcc $CF -Os -static -o "$B/proto-musl.o" -c proto/exec_proto.c; then
		ok "agent and codec build for the guest (musl, static)"
	else
		bad "agent and codec build for the guest (musl, static)"
	fi
else
	echo "skip musl build of the agent: musl-gcc not installed"
fi

# Functional checks run under ASan+UBSan; the throughput figure comes from
# the optimized build.
L="timeout 60 $B/loopback-san"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0

$L -- true </dev/null; check "exit 0" 0 $?
$L -- sh -c 'exit 7' </dev/null; check "exit 7" 7 $?
$L -- /no/such/program </dev/null 2>"$T/err"; rc=$?
check "missing program gives 127" 127 $rc
grep -q "No such file" "$T/err" && ok "missing program is reported" || bad "missing program is reported" "$(cat "$T/err")"
$L -w /no/such/dir -- true </dev/null 2>/dev/null; check "bad working directory gives 126" 126 $?
$L -- sh -c 'kill -TERM $$' </dev/null; check "SIGTERMed command gives 143" 143 $?

$L -- sh -c 'echo to-out; echo to-err >&2' </dev/null >"$T/o" 2>"$T/e"
check "stdout and stderr separated" "to-out|to-err" "$(cat "$T/o")|$(cat "$T/e")"

$L -e FOO=bar -w /tmp -- sh -c 'echo "$FOO $(pwd)"; command -v sh >/dev/null && echo path' \
	</dev/null >"$T/o"
check "env, cwd and default PATH" "bar /tmp|path" "$(tr '\n' '|' <"$T/o" | sed 's/|$//')"

head -c $((100 << 20)) /dev/urandom >"$T/big"
want=$(sha256sum <"$T/big" | cut -d' ' -f1)
got=$($L -- cat "$T/big" </dev/null | sha256sum | cut -d' ' -f1)
check "100 MiB through stdout byte-exact (sanitized build)" "$want" "$got"
start=$(date +%s%N)
got=$(timeout 60 "$B/loopback" -- cat "$T/big" </dev/null | sha256sum | cut -d' ' -f1)
end=$(date +%s%N)
check "100 MiB through stdout byte-exact (optimized build)" "$want" "$got"
ms=$(((end - start) / 1000000))
start=$(date +%s%N)
timeout 60 "$B/loopback" -- head -c $((100 << 20)) /dev/zero </dev/null >/dev/null
end=$(date +%s%N)
ms0=$(((end - start) / 1000000))
echo "info 100 MiB stdout: $ms ms with sha256sum in the pipe, $ms0 ms to /dev/null" \
	"($((100 * 1000 / (ms0 > 0 ? ms0 : 1))) MiB/s)"

head -c $((10 << 20)) /dev/urandom >"$T/ten"
want=$(sha256sum <"$T/ten" | cut -d' ' -f1)
got=$($L -- cat <"$T/ten" | sha256sum | cut -d' ' -f1)
check "10 MiB through stdin and cat byte-exact" "$want" "$got"

out=$($L -t -r 33 -c 101 -- tty </dev/null); rc=$?
case "$out" in /dev/pts/*) check "tty: tty succeeds" 0 $rc ;; *) bad "tty: tty succeeds" "rc $rc, '$out'" ;; esac
out=$($L -t -r 33 -c 101 -- stty size </dev/null | tr -d '\r')
check "tty: stty size matches the request" "33 101" "$out"
out=$($L -t -- sh -c 'test -t 0 && test -t 1 && test -t 2 && echo all' </dev/null | tr -d '\r')
check "tty: stdin, stdout and stderr are the terminal" "all" "$out"
out=$(printf 'hello\n' | $L -t -- sh -c 'read x; echo "got:$x"' | tr -d '\r' | grep '^got:')
check "tty: stdin reaches the command" "got:hello" "$out"
printf 'a\nno newline' | $L -t -- cat >/dev/null; check "tty: stdin EOF ends cat" 0 $?

# The client on a real terminal (script(1) gives it one): the size comes
# from the terminal, raw mode is undone afterwards, SIGWINCH resizes.
if command -v script >/dev/null; then
	cat >"$T/tty.sh" <<'EOF2'
L=$1 T=$2
stty rows 20 cols 70
before=$(stty -g)
$L -t -- stty size >"$T/tty1"
[ "$before" = "$(stty -g)" ] && echo restored >"$T/tty2"
$L -t -- sh -c 'sleep 1; stty size' </dev/tty >"$T/tty3" &
sleep 0.4
stty rows 41 cols 91
wait
EOF2
	# script's stdin stays open (an EOF there would be typed into the
	# terminal as input).
	exec 3< <(exec sleep 30 2>/dev/null)
	keep=$!
	timeout 30 script -qec "bash $T/tty.sh $B/loopback-san $T" /dev/null <&3 >/dev/null 2>&1
	exec 3<&-
	kill $keep 2>/dev/null
	check "terminal: size taken from the local terminal" "20 70" "$(tr -d '\r' <"$T/tty1" 2>/dev/null)"
	check "terminal: raw mode restored on return" "restored" "$(cat "$T/tty2" 2>/dev/null)"
	check "terminal: SIGWINCH sends the new size" "41 91" "$(tr -d '\r' <"$T/tty3" 2>/dev/null)"
	# script's stdin at end-of-file: script types the end-of-file (^D)
	# into the terminal at once, before the client starts (the sleep), so
	# it waits there as a canonical-mode marker that raw mode would read
	# as a NUL byte.  It must reach the command as an end-of-file.
	out=$(timeout 30 script -qc "sleep 0.3; $B/loopback-san -t -- echo abc" /dev/null </dev/null |
		od -An -tx1 | tr -s ' \n' ' ')
	check "terminal: stdin at end-of-file adds no byte (echo abc)" " 61 62 63 0d 0a " "$out"
	timeout 30 script -qec "sleep 0.3; $B/loopback-san -t -- cat" /dev/null </dev/null >/dev/null 2>&1
	check "terminal: cat ends on the host's end-of-file" 0 $?
	out=$(printf 'one\n' | timeout 30 script -qc "sleep 0.3; $B/loopback-san -t -- cat" /dev/null |
		tr -d '\r' | grep -c '^one$')
	check "terminal: a line typed ahead reaches cat (echoed twice, then cat's copy)" 3 "$out"
else
	echo "skip terminal checks: script(1) not installed"
fi

# Signals: wait until the command runs, then signal the client.
signal_test() { # NAME SIGNAL EXPECTED [stdin source]
	local src=${4:-/dev/null}
	rm -f "$T/ready"
	$L -- sh -c 'echo ready >'"$T/ready"'; exec sleep 30' <"$src" >/dev/null &
	local pid=$! i=0
	while [ ! -s "$T/ready" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
	kill -"$2" $pid
	wait $pid
	check "$1" "$3" $?
}
signal_test "SIGINT forwarded: sleep gives 130" INT 130
signal_test "SIGTERM forwarded: sleep gives 143" TERM 143
signal_test "SIGHUP forwarded: sleep gives 129" HUP 129
mkfifo "$T/fifo"
(yes >"$T/fifo" 2>/dev/null) &
yes_pid=$!
signal_test "SIGINT not stuck behind stdin the command never reads" INT 130 "$T/fifo"
kill $yes_pid 2>/dev/null

($L -- yes </dev/null 2>/dev/null; echo $? >"$T/rc") | head -c 4 >/dev/null
check "closed stdout sends SIGPIPE: yes gives 141" 141 "$(cat "$T/rc")"

start=$(date +%s%N)
out=$($L -- sh -c 'sleep 5 >/dev/null & echo hi' </dev/null)
end=$(date +%s%N)
check "exit is not held back by a background child" "hi" "$out"
[ $(((end - start) / 1000000)) -lt 3000 ] && ok "... and returns at once" ||
	bad "... and returns at once" "$(((end - start) / 1000000)) ms"
start=$(date +%s%N)
out=$($L -- sh -c 'sleep 5 & echo hi' </dev/null)
end=$(date +%s%N)
[ $(((end - start) / 1000000)) -lt 3000 ] && ok "background child holding stdout: EXIT after quiet output" ||
	bad "background child holding stdout: EXIT after quiet output" "$(((end - start) / 1000000)) ms"

# Many execs at once against one listening agent.
"$B/loopback-san" -l "$T/sock" &
SERVER=$!
i=0
while [ ! -S "$T/sock" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
start=$(date +%s%N)
pids=
for n in $(seq 1 20); do
	$L -s "$T/sock" -- sh -c 'sleep 1; echo "$0"; exit $(($0 % 5))' "$n" </dev/null >"$T/c.$n" &
	pids="$pids $!"
done
cbad=0 n=0
for p in $pids; do
	n=$((n + 1))
	wait "$p"; rc=$?
	[ "$rc" = $((n % 5)) ] && [ "$(cat "$T/c.$n")" = "$n" ] || cbad=$((cbad + 1))
done
end=$(date +%s%N)
check "20 concurrent execs: output and exit code each" 0 $cbad
[ $(((end - start) / 1000000)) -lt 10000 ] && ok "... and they ran in parallel" ||
	bad "... and they ran in parallel" "$(((end - start) / 1000000)) ms for 20 x 1 s"

# Through a fake hybrid vsock socket, as kbox exec connects.
"$B/loopback-san" -H "$T/hyb" -p 1024 &
HYB=$!
i=0
while [ ! -S "$T/hyb" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
out=$($L -s "$T/hyb" -p 1024 -- echo via-connect </dev/null)
check "hybrid vsock CONNECT handshake, then the session" "via-connect" "$out"
$L -s "$T/hyb" -p 1025 -- true </dev/null 2>"$T/err"
grep -q "refused" "$T/err" && ok "a refused CONNECT is reported" || bad "a refused CONNECT is reported" "$(cat "$T/err")"
kill $HYB 2>/dev/null

$L -- sh -c 'kill -KILL $PPID; sleep 5' </dev/null 2>"$T/err"; rc=$?
[ $rc = 255 ] && grep -q "reset" "$T/err" && ok "agent dying mid-session gives an error, not a hang" ||
	bad "agent dying mid-session gives an error, not a hang" "rc $rc, $(cat "$T/err")"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
