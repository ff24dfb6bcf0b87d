#!/bin/sh
# End-to-end tests: the real kbox binary, the real guest kernel and
# guest-init.  Boots are slow on PVM hosts (docs/pvm.md), so each boot
# checks several things and the CLI's own failures are tested without one.
#   tests/e2e/run.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
e2e_tmp

# check NAME EXPECTED_RC EXPECTED_STDOUT_FILE STDERR_PATTERN -- kbox args...
check() {
	what=$1 want_rc=$2 want_out=$3 err_pat=$4
	shift 5
	start=$(date +%s)
	timeout "$boot_timeout" "$kbox" "$@" > "$tmp/out" 2> "$tmp/err" < "${STDIN_FILE:-/dev/null}"
	rc=$?
	took=$(( $(date +%s) - start ))
	if [ "$rc" -ne "$want_rc" ]; then
		not_ok "$what (exit $rc, want $want_rc, ${took}s)" "$(tail -5 "$tmp/err")"
		return
	fi
	if [ -n "$want_out" ] && ! cmp -s "$tmp/out" "$want_out"; then
		not_ok "$what (stdout differs, ${took}s)" "$(diff "$want_out" "$tmp/out" | head -10)"
		return
	fi
	if [ -n "$err_pat" ] && ! grep -q -- "$err_pat" "$tmp/err"; then
		not_ok "$what (stderr lacks '$err_pat')" "$(head -5 "$tmp/err")"
		return
	fi
	ok "$what (${took}s)"
}

# --- kbox's own failures: exit 125 and one line that says what to do ---
check "unknown option" 125 "" "unknown option '--frobnicate'" -- run --frobnicate -- true
check "no command" 125 "" "no command given" -- run
check "bad --cpus" 125 "" "--cpus takes a number" -- run --cpus 0 -- true
check "bad --memory" 125 "" "--memory takes MiB" -- run --memory lots -- true
check "missing kernel" 125 "" "make kernel" -- run --kernel "$tmp/nope" -- true
printf 'not a kernel at all\n' > "$tmp/junk"
check "junk kernel" 125 "" "not a Linux kernel image" -- run --kernel "$tmp/junk" -- true
printf 'cpus: two\n' > "$tmp/bad.yaml"
check "bad config" 125 "" "bad.yaml:1:" -- run --conf "$tmp/bad.yaml" -- true
check "unknown subcommand" 125 "" "unknown command 'frob'" -- frob
"$kbox" --help | grep -q "run \[OPTIONS\]" && ok "kbox --help" || not_ok "kbox --help"
"$kbox" version | grep -q "^kbox " && ok "kbox version" || not_ok "kbox version"

e2e_need_kvm "the boots"

if "$kbox" doctor > "$tmp/doctor" 2>&1 && grep -q "^ok   /dev/kvm is usable" "$tmp/doctor"; then ok "doctor"
else not_ok "doctor" "$(cat "$tmp/doctor")"; fi

# --- boots of the real kernel ---
printf 'hi\n' > "$tmp/want-hi"
# Also: without --name the guest's host name is the generated sandbox name
# (in /etc/hosts too), and a home where the kernel log cannot go (nothing
# can be made under /dev/null, not even by root) costs one warning, not
# the run.
HOME=/dev/null/home XDG_STATE_HOME='' check "echo hi; exit 7 (host name kbox-PID; no usable home)" \
	7 "$tmp/want-hi" "kernel log .*; writing it to" -- run -- /bin/sh -c 'echo hi
	h=$(cat /proc/sys/kernel/hostname)
	case $h in kbox-[0-9]*) ;; *) echo "host name: $h" ;; esac
	grep -q "^127.0.1.1	$h\$" /etc/hosts || cat /etc/hosts
	exit 7'

printf '2\ngot line one\n' > "$tmp/want-smp"
printf 'line one\n' > "$tmp/stdin"
STDIN_FILE="$tmp/stdin" check "2 CPUs, stdin, death by SIGTERM is 143" 143 "$tmp/want-smp" "" \
	-- run --cpus 2 -- /bin/sh -c 'grep -c ^processor /proc/cpuinfo; read x; echo "got $x"; kill -TERM $$'

cat > "$tmp/sandbox.yaml" <<'YAML'
cpus: 1
memory: 192M
command: ["/bin/sh", "-c", "echo from config; awk '/MemTotal/ { exit !($2 > 150000 && $2 < 196608) }' /proc/meminfo"]
YAML
printf 'from config\n' > "$tmp/want-conf"
check "--conf sandbox.yaml (command, memory)" 0 "$tmp/want-conf" "" -- run --conf "$tmp/sandbox.yaml"

check "command not found is 127" 127 "" "" -- run -- /no/such/program

# --- a detached sandbox: kbox exec, ps, logs, stop ---
sbx="e2e-$$"
# 100 MiB of host random data, shared read-only, for the stdout check.
mkdir -p "$tmp/data"
head -c $((100 * 1024 * 1024)) /dev/urandom > "$tmp/data/blob100"
if out=$(timeout "$boot_timeout" "$kbox" run -d --name "$sbx" -v "$tmp/data:/data:ro" -- /bin/sh -c 'echo main started; exec sleep 100000' 2>"$tmp/err") &&
	[ "$out" = "$sbx" ]; then
	ok "run -d prints the name"
else
	not_ok "run -d prints the name (got '$out')" "$(cat "$tmp/err")"
fi
trap '"$kbox" stop -t 2 "$sbx" >/dev/null 2>&1; rm -rf "$tmp"' EXIT

"$kbox" ps > "$tmp/ps"
grep -q "^$sbx  *running .*sleep 100000" "$tmp/ps" && ok "ps lists it as running" ||
	not_ok "ps lists it as running" "$(cat "$tmp/ps")"

printf 'out\n' > "$tmp/want-out"
check "exec: exit code and stdout" 7 "$tmp/want-out" "" -- exec "$sbx" -- /bin/sh -c 'echo out; echo err >&2; exit 7'
grep -qx err "$tmp/err" && ok "exec: stderr arrives apart from stdout" || not_ok "exec: stderr apart" "$(cat "$tmp/err")"
printf 'v=42 /tmp\n' > "$tmp/want-env"
check "exec: -e and -w" 0 "$tmp/want-env" "" -- exec -e V=42 -w /tmp "$sbx" -- /bin/sh -c 'echo "v=$V $(pwd)"'
check "exec: SIGINT death is 130" 130 "" "" -- exec "$sbx" -- /bin/sh -c 'kill -INT $$'
check "exec: missing program is 127" 127 "" "" -- exec "$sbx" -- /no/such/program
printf '%s\n1\n' "$sbx" > "$tmp/want-name"
check "exec: the host name is the sandbox's name, in /etc/hosts too" 0 "$tmp/want-name" "" \
	-- exec "$sbx" -- /bin/sh -c "cat /proc/sys/kernel/hostname; grep -c '^127.0.1.1	$sbx\$' /etc/hosts"

# The run configuration set the guest's wall clock from the host's: the
# two agree within the exec round trip (the kernel's RTC, its only clock
# before, is a second coarse and read while it boots).
t0=$(date +%s)
g=$(timeout 60 "$kbox" exec "$sbx" -- date +%s 2>/dev/null)
t1=$(date +%s)
if [ -n "$g" ] && [ "$g" -ge $((t0 - 1)) ] && [ "$g" -le $((t1 + 1)) ]; then
	ok "the guest's clock is the host's (guest $g, host $t0..$t1)"
else
	not_ok "the guest's clock is the host's" "guest '$g', host $t0..$t1"
fi

# 100 MiB out through stdout, byte-exact.  Under PVM the guest kernel's
# emulated vsock path runs at ~0.35 MB/s (docs/pvm.md): about five minutes.
start=$(date +%s)
timeout 1800 "$kbox" exec "$sbx" -- cat /data/blob100 > "$tmp/back" 2> "$tmp/err"
took=$(( $(date +%s) - start ))
if cmp -s "$tmp/data/blob100" "$tmp/back"; then ok "exec: 100 MiB through stdout, byte-exact (${took}s)"
else not_ok "exec: 100 MiB through stdout (${took}s)" "$(wc -c < "$tmp/back") bytes; $(head -3 "$tmp/err")"; fi
rm -f "$tmp/back"

# Bytes in through stdin and back, compared.  Smaller on PVM hosts, where
# each way costs seconds per MiB.
# KBOX_E2E_STDIN_MB sets the size in MiB (default 100, 4 on PVM).
size=$(($(e2e_mb KBOX_E2E_STDIN_MB 4 100) * 1024 * 1024))
head -c "$size" /dev/urandom > "$tmp/blob"
STDIN_FILE="$tmp/blob" check "exec: $size bytes in through stdin" 0 "" "" -- exec "$sbx" -- /bin/sh -c 'cat > /tmp/blob'
timeout "$boot_timeout" "$kbox" exec "$sbx" -- cat /tmp/blob > "$tmp/back" 2> "$tmp/err"
if cmp -s "$tmp/blob" "$tmp/back"; then ok "exec: $size bytes in and back out, byte-exact"
else not_ok "exec: $size bytes in and back out" "$(wc -c < "$tmp/back") bytes; $(head -3 "$tmp/err")"; fi

# A terminal: script(1) gives kbox a pty of a known size.
if command -v script >/dev/null 2>&1; then
	# script's stdin stays open: an end of file there would be typed
	# into the terminal.
	mkfifo "$tmp/hold"
	sleep 60 > "$tmp/hold" &
	holder=$!
	TERM=xterm timeout 60 script -qec "stty rows 33 cols 101; $kbox exec -t $sbx -- /bin/sh -c 'tty; stty size'" /dev/null < "$tmp/hold" > "$tmp/tty" 2>&1
	kill "$holder" 2>/dev/null
	tr -d '\r\000' < "$tmp/tty" > "$tmp/tty.txt"
	if grep -q "^/dev/pts/[0-9]*$" "$tmp/tty.txt" && grep -qx "33 101" "$tmp/tty.txt"; then ok "exec -t: a tty of the caller's size"
	else not_ok "exec -t: a tty of the caller's size" "$(cat -v "$tmp/tty" | head -5)"; fi
else
	echo "# skipped exec -t: script(1) is not installed"
fi

"$kbox" logs "$sbx" > "$tmp/logs"
grep -qx "main started" "$tmp/logs" && ok "logs shows the main command's output" ||
	not_ok "logs shows the main command's output" "$(cat "$tmp/logs")"
if "$kbox" stop -t 5 "$sbx" && ! "$kbox" ps | grep -q "^$sbx "; then ok "stop ends it and ps forgets it"
else not_ok "stop ends it and ps forgets it"; fi
check "exec into a stopped sandbox fails clearly" 125 "" "no sandbox named" -- exec "$sbx" -- true

e2e_finish
