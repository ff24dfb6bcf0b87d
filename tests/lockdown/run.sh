#!/bin/sh
# Lock-down tests (docs/security.md) on the real binary.
#   tests/lockdown/run.sh [BUILD_DIR]       after `make all` and the kernel
# A second kbox is built into BUILD_DIR/lockdown with -DKBOX_TEST_HOOKS: its
# KBOX_TEST_LOCKDOWN variable makes the process act right after lock-down
# (vmm/sandbox/lockdown.c, test_hooks), so refusals are tested from inside it.
# The hook tests stop before the guest boots; four boots of the real
# kbox show that the guest still works locked down.  Network traffic
# stays on loopback (an HTTP server on 127.0.0.1, and a DNS server on the
# loopback of a network namespace the test makes).
set -u
build=${1:-build}
kbox="$build/kbox"
hooked="$build/lockdown/kbox"
pass=0
fail=0
T=$(mktemp -d)
srv=
cleanup() {
	[ -n "$srv" ] && kill "$srv" 2>/dev/null
	"$kbox" stop "ld-test-$$" >/dev/null 2>&1
	rm -rf "$T"
}
trap cleanup EXIT
boot_timeout=${KBOX_E2E_TIMEOUT:-600}
# KBOX_TIMEOUT_MULT (whole number) stretches the fixed waits for a loaded
# or emulated host.
t60=$((60 * ${KBOX_TIMEOUT_MULT:-1}))

ok() { pass=$((pass + 1)); echo "ok - $1"; }
not_ok() {
	fail=$((fail + 1))
	echo "not ok - $1"
	[ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/#   /'
}
# expect NAME CONDITION-OUTPUT: CONDITION is a shell test run by eval.
expect() { if eval "$2"; then ok "$1"; else not_ok "$1" "$(tail -5 "$T/err" 2>/dev/null)"; fi; }

[ -x "$kbox" ] && [ -f "$build/initramfs.cpio" ] || {
	echo "tests/lockdown: run 'make all' first"
	exit 1
}
make -s BUILD="$build/lockdown" CFLAGS="-O2 -g -DKBOX_TEST_HOOKS" "$build/lockdown/kbox" || {
	echo "tests/lockdown: cannot build the test-hook kbox"
	exit 1
}
# The hooked binary finds the kernel and initramfs next to itself.
# (Made only when missing: an ordinary user may run this on a build folder
# root made, as the hardware-KVM lane does.)
[ "$(readlink "$build/lockdown/kernel")" = ../kernel ] || ln -sfn ../kernel "$build/lockdown/kernel"
[ "$(readlink "$build/lockdown/initramfs.cpio")" = ../initramfs.cpio ] ||
	ln -sf ../initramfs.cpio "$build/lockdown/initramfs.cpio"

mkdir -p "$T/home/.ssh" "$T/work" "$T/www"
# Sandbox dirs (a refusal leaves its dir stale; -d keeps its output) stay
# in $T.
mkdir -m 700 "$T/rt"
export XDG_RUNTIME_DIR="$T/rt"
echo "PRIVATE KEY" > "$T/home/.ssh/id_ed25519"
echo "input" > "$T/work/in.txt"
secret="$T/home/.ssh/id_ed25519"

# ---- inside the locked-down process (no boot) --------------------------
KBOX_TEST_LOCKDOWN="execve" timeout $t60 "$hooked" run -- true >"$T/out" 2>"$T/err"
rc=$?
expect "a system call outside the allowlist stops kbox with exit 125" '[ $rc -eq 125 ]'
expect "kbox names the refused call (execve, 59)" \
	'grep -q "kbox: lock-down: system call 59 (execve) is not allowed" "$T/err"'
expect "the refused call did not run" '! grep -q escaped "$T/out" "$T/err"'

# A shared object in a -v folder (readable under Landlock) that the host
# itself can load: after lock-down its executable mapping is refused with
# EPERM, so dlopen fails and kbox goes on (glibc's NSS modules load so).
printf 'int kbox_probe(void) { return 7; }\n' > "$T/probe.c"
cc -shared -fPIC -o "$T/work/probe.so" "$T/probe.c" 2>"$T/cc.err" &&
	python3 -c 'import ctypes, sys; sys.exit(ctypes.CDLL(sys.argv[1]).kbox_probe() != 7)' \
		"$T/work/probe.so"
expect "a test shared object builds and loads on the host" '[ $? -eq 0 ]'
KBOX_TEST_LOCKDOWN="open:$secret;open:/etc/shadow;open:$T/work/in.txt;fd:40;lwip-open:$secret;lwip-open:$T/work/in.txt;dlopen:$T/work/probe.so;execve" \
	timeout $t60 "$hooked" run -v "$T/work:/w" -- true >"$T/out" 2>"$T/err" 40<"$secret"
expect "no new executable memory: dlopen fails with EPERM, and kbox goes on" \
	'grep -q "dlopen $T/work/probe.so: failed" "$T/err" &&
	 ! grep -q "system call 9 (mmap)\|system call 10 (mprotect)" "$T/err"'
expect "after lock-down a host file outside the allowed set cannot be opened" \
	'grep -q "open $secret: Permission denied" "$T/err"'
expect "nor from lwIP's thread, started before the lock-down" \
	'grep -q "lwip open $secret: Permission denied" "$T/err"'
expect "lwIP's thread is in the same domain, not shut out (a -v folder opens)" \
	'grep -q "lwip open $T/work/in.txt: ok" "$T/err"'
expect "nor a system file (/etc/shadow)" \
	'grep -q "open /etc/shadow: Permission denied" "$T/err"'
expect "a file in a -v folder can" 'grep -q "open $T/work/in.txt: ok" "$T/err"'
expect "an inherited fd (40, the secret) was closed at start" \
	'grep -q "fd 40: closed" "$T/err"'

# A setuid install is refused before anything else happens.
mkdir -p "$T/suid"
cp "$kbox" "$T/suid/kbox"
chmod 755 "$T" "$T/suid"
chmod 4755 "$T/suid/kbox"
if command -v setpriv >/dev/null && [ "$(id -u)" = 0 ]; then
	setpriv --reuid=65534 --regid=65534 --clear-groups "$T/suid/kbox" run -- true \
		>"$T/out" 2>"$T/err"
	rc=$?
	expect "a setuid kbox refuses to run (exit 125, says why)" \
		'[ $rc -eq 125 ] && grep -q "setuid" "$T/err"'
else
	echo "skip - setuid refusal (needs root and setpriv to start it as another user)"
fi

# ---- real boots, locked down -------------------------------------------
echo "webpage" > "$T/www/page.txt"
python3 -c '
import http.server, os, sys
os.chdir(sys.argv[1])
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
open(sys.argv[2] + ".tmp", "w").write(str(s.server_address[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
s.serve_forever()' "$T/www" "$T/port" &
srv=$!
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -f "$T/port" ] && break; sleep 0.5; done
port=$(cat "$T/port" 2>/dev/null || echo 1)

start=$(date +%s)
timeout "$boot_timeout" "$kbox" run --verbose -v "$T/work:/w" \
	--allow "host.kbox.internal:$port" -- sh -c "
cat /w/in.txt
echo made > /w/out.txt && mkdir /w/d && mv /w/out.txt /w/d/ && ln -s d/out.txt /w/l && rm /w/l
wget -qO- http://host.kbox.internal:$port/page.txt
exit 7" >"$T/out" 2>"$T/err" </dev/null
rc=$?
took=$(($(date +%s) - start))
expect "boot 1: the command's exit code comes back (7, ${took}s)" '[ $rc -eq 7 ]'
expect "boot 1: --verbose lists the active lock-downs" \
	'grep -q "kbox: lock-down: no_new_privs; seccomp allowlist" "$T/err" &&
	 grep -q "Landlock ABI" "$T/err"'
expect "boot 1: nothing was refused" '! grep -q "is not allowed" "$T/err"'
expect "boot 1: virtio-fs reads a -v folder" 'grep -q "^input" "$T/out"'
expect "boot 1: virtio-fs creates, renames, links and removes" \
	'[ "$(cat "$T/work/d/out.txt" 2>/dev/null)" = made ] && [ ! -e "$T/work/l" ]'
expect "boot 1: the network reaches the host's loopback" 'grep -q "^webpage" "$T/out"'

start=$(date +%s)
timeout "$boot_timeout" "$kbox" run -- true >"$T/out" 2>"$T/err" </dev/null
rc=$?
took=$(($(date +%s) - start))
expect "boot 2: kbox run -- true (${took}s)" '[ $rc -eq 0 ] && ! grep -q "is not allowed" "$T/err"'

# ---- as an ordinary user: /dev/kvm is its only privilege ----------------
# A copy of the device node owned by uid 65534 is bound over /dev/kvm in
# a mount namespace of the test's own, so the host's node is untouched.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && command -v unshare >/dev/null; then
	u="$T/user"
	mkdir -m 700 "$u" && chown 65534:65534 "$u" && chmod 711 "$T" &&
		mknod -m 600 "$u/kvm" c 10 232 && chown 65534:65534 "$u/kvm"
	timeout "$boot_timeout" unshare -m sh -c 'mount --bind "$1/kvm" /dev/kvm &&
		exec setpriv --reuid=65534 --regid=65534 --clear-groups \
		env -i PATH=/usr/bin:/bin HOME="$1" XDG_RUNTIME_DIR="$1" "$2" run -- /bin/sh -c "echo user-ok"' \
		sh "$u" "$(realpath "$kbox")" >"$T/out" 2>"$T/err" </dev/null
	rc=$?
	expect "boot as uid 65534 with nothing but /dev/kvm access (exit $rc)" \
		'[ $rc -eq 0 ] && grep -qx user-ok "$T/out" && ! grep -q "is not allowed" "$T/err"'
	chmod 700 "$T"
else
	echo "skip - boot as an ordinary user (needs root, setpriv and unshare to set it up)"
fi

name="ld-test-$$"
timeout "$boot_timeout" "$kbox" run -d -n "$name" -v "$T/work:/w:ro" -- sleep 600 \
	>"$T/out" 2>"$T/err" </dev/null
rc=$?
expect "boot 3: kbox run -d starts" '[ $rc -eq 0 ] && grep -qx "$name" "$T/out"'
timeout $t60 "$kbox" exec "$name" -- cat /w/in.txt >"$T/out" 2>"$T/err" </dev/null
rc=$?
expect "boot 3: kbox exec runs in the locked-down sandbox" \
	'[ $rc -eq 0 ] && grep -qx input "$T/out"'
timeout $t60 "$kbox" exec "$name" -- sh -c 'echo x > /w/no' >"$T/out" 2>"$T/err" </dev/null
rc=$?
expect "boot 3: a :ro folder stays read-only (exit $rc)" '[ $rc -ne 0 ] && [ ! -e "$T/work/no" ]'
timeout $t60 "$kbox" exec "$name" -- sh -c 'exit 3' >"$T/out" 2>"$T/err" </dev/null
rc=$?
expect "boot 3: exec exit codes come back (3)" '[ $rc -eq 3 ]'
# The client commands read what the sandbox sends: they are locked down
# before they do (vmm/sandbox/lockdown.c, lockdown_client).
timeout $t60 "$hooked" exec "$name" -- cat /w/in.txt >"$T/out" 2>"$T/err" </dev/null
rc=$?
expect "client: kbox exec works locked down (exit $rc)" '[ $rc -eq 0 ] && grep -qx input "$T/out"'
# exec and logs open no file at all once locked down: openat itself stops them.
KBOX_TEST_LOCKDOWN="open:$secret" timeout $t60 "$hooked" exec "$name" -- true \
	>"$T/out" 2>"$T/err" </dev/null
rc=$?
expect "client: kbox exec cannot open a host file (openat refused, exit $rc)" \
	'[ $rc -eq 125 ] && grep -q "system call 257 (openat) is not allowed" "$T/err" &&
	 ! grep -q "open $secret: ok" "$T/err"'
KBOX_TEST_LOCKDOWN="execve" timeout $t60 "$hooked" exec "$name" -- true >"$T/out" 2>"$T/err" </dev/null
rc=$?
expect "client: a call outside kbox exec's allowlist stops it (exit $rc, execve named)" \
	'[ $rc -eq 125 ] && grep -q "system call 59 (execve) is not allowed" "$T/err"'
KBOX_TEST_LOCKDOWN="open:$secret" timeout $t60 "$hooked" ps >"$T/out" 2>"$T/err" </dev/null
rc=$?
expect "client: kbox ps works locked down and cannot open a host file" \
	'[ $rc -eq 0 ] && grep -q "^$name .*running" "$T/out" &&
	 grep -q "open $secret: Permission denied" "$T/err"'
# The sandbox's output is gone with it, so look before stopping: a
# refused call would have printed its line there.
"$hooked" logs "$name" >"$T/log" 2>"$T/err"
rc=$?
expect "boot 3: kbox logs answers while it runs, locked down (exit $rc)" '[ $rc -eq 0 ]'
expect "boot 3: nothing was refused" '! grep -q "is not allowed" "$T/log"'
KBOX_TEST_LOCKDOWN="open:$secret" "$hooked" logs "$name" >"$T/out" 2>"$T/err"
rc=$?
expect "client: kbox logs cannot open a host file (openat refused, exit $rc)" \
	'[ $rc -eq 125 ] && grep -q "system call 257 (openat) is not allowed" "$T/err"'
KBOX_TEST_LOCKDOWN="open:$secret" timeout $t60 "$hooked" stop "$name" >"$T/out" 2>"$T/err" </dev/null
rc=$?
expect "boot 3: kbox stop ends it, locked down (exit $rc)" \
	'[ $rc -eq 0 ] && grep -q "open $secret: Permission denied" "$T/err"'
sleep 1
expect "boot 3: gone from kbox ps" '! "$kbox" ps | grep -q "^$name .*running"'
expect "boot 3: its runtime directory was removed" '[ ! -e "$T/rt/kbox/$name" ]'

# ---- boot 4: the host's resolver, locked down ---------------------------
# kbox answers the guest's DNS through glibc's getaddrinfo, which reads
# nsswitch.conf and may try to load NSS modules: a desktop's list names
# modules that are missing here (mdns4_minimal, resolve, myhostname) and
# some that exist (systemd, hesiod).  None of that may trip the seccomp
# filter or Landlock.  In a mount and network namespace of the test's own,
# that list and a resolv.conf naming 127.0.0.1 are bound over the host's
# files, and a DNS server on that namespace's loopback answers; nothing
# leaves the namespace.
if command -v unshare >/dev/null && [ "$(id -u)" = 0 ]; then
	dns=$(cd "$(dirname "$0")/../lib" && pwd)/dns_responder.py
	printf 'nameserver 127.0.0.1\noptions timeout:2 attempts:2\n' > "$T/resolv.conf"
	printf 'hosts: files mdns4_minimal [NOTFOUND=return] resolve [!UNAVAIL=return] myhostname systemd hesiod dns\n' \
		> "$T/nsswitch.conf"
	cat > "$T/ns.sh" <<NSEOF
ip link set lo up || exit 90
mount --bind "$T/resolv.conf" /etc/resolv.conf || exit 91
mount --bind "$T/nsswitch.conf" /etc/nsswitch.conf || exit 92
python3 "$dns" 53 "$T/dns.up" "$T/dns.log" probe.kbox-ld.test=1.2.3.4 2>"$T/dns.err" &
p=\$!
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -f "$T/dns.up" ] && break; sleep 0.5; done
timeout "$boot_timeout" "$kbox" run --verbose -- sh -c 'nslookup probe.kbox-ld.test' </dev/null
rc=\$?
kill \$p
exit \$rc
NSEOF
	start=$(date +%s)
	unshare -mn sh "$T/ns.sh" >"$T/out" 2>"$T/err"
	rc=$?
	took=$(($(date +%s) - start))
	expect "boot 4: a name answered through the host's resolver and NSS list (exit $rc, ${took}s)" \
		'[ $rc -eq 0 ] && grep -q "1\.2\.3\.4" "$T/out"'
	expect "boot 4: locked down, and nothing was refused" \
		'grep -q "kbox: lock-down: no_new_privs; seccomp allowlist" "$T/err" &&
		 ! grep -q "is not allowed" "$T/err"'
	expect "boot 4: the question reached the namespace's DNS server" \
		'grep -q "^probe.kbox-ld.test 1$" "$T/dns.log"'
else
	echo "skip - boot 4: the host's resolver (needs root and unshare)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
