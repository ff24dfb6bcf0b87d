#!/bin/sh
# The hardware-KVM smoke (make hw-smoke), run inside L1 by an ordinary user
# in the kvm group: kbox sees hardware KVM, boots vmlinux-std, passes the
# exit code through, gives the guest the CPUs it asked for and shares a
# folder both ways.
#   tests/hwkvm/smoke.sh BUILD_DIR
. "$(dirname "$0")/../e2e/lib.sh"
e2e_tmp

"$kbox" doctor >"$tmp/doctor" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q '/dev/kvm is usable: hardware KVM' "$tmp/doctor"; then
	ok "kbox doctor: all ok, hardware KVM"
else
	not_ok "kbox doctor: all ok, hardware KVM (exit $rc)" "$(cat "$tmp/doctor")"
fi
if [ "$(id -u)" -ne 0 ] && id -nG | grep -qw kvm; then
	ok "runs as an ordinary user ($(id -un), uid $(id -u)) in the kvm group"
else
	not_ok "runs as an ordinary user in the kvm group" "$(id)"
fi

t0=$(date +%s.%N)
timeout "$boot_timeout" "$kbox" run -- sh -c 'echo hi; exit 7' >"$tmp/out" 2>"$tmp/err"
rc=$?
secs=$(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }")
if [ $rc -eq 7 ] && [ "$(cat "$tmp/out")" = hi ]; then
	ok "vmlinux-std runs sh -c 'echo hi; exit 7': hi, exit 7 (${secs}s)"
else
	not_ok "vmlinux-std runs sh -c 'echo hi; exit 7' (exit $rc, want 7)" "$(tail -5 "$tmp/err"; cat "$tmp/out")"
fi

timeout "$boot_timeout" "$kbox" run --verbose -- true >/dev/null 2>"$tmp/err"
if grep -q '^kbox: /dev/kvm is hardware KVM; kernel .*/vmlinux-std,' "$tmp/err"; then
	ok "kbox picked hardware KVM and vmlinux-std"
else
	not_ok "kbox picked hardware KVM and vmlinux-std" "$(grep '^kbox:' "$tmp/err" | head -5)"
fi

n=$(timeout "$boot_timeout" "$kbox" run --cpus 2 -- nproc 2>"$tmp/err")
if [ "$n" = 2 ]; then
	ok "--cpus 2: the guest has 2 CPUs"
else
	not_ok "--cpus 2: the guest has 2 CPUs (it says '$n')" "$(tail -5 "$tmp/err")"
fi

mkdir "$tmp/share"
echo from-host >"$tmp/share/in.txt"
out=$(timeout "$boot_timeout" "$kbox" run -v "$tmp/share:/share" -- \
	sh -c 'cat /share/in.txt && echo from-guest > /share/out.txt' 2>"$tmp/err")
if [ "$out" = from-host ]; then
	ok "-v: the guest reads a host file"
else
	not_ok "-v: the guest reads a host file (got '$out')" "$(tail -5 "$tmp/err")"
fi
if [ "$(cat "$tmp/share/out.txt" 2>/dev/null)" = from-guest ] &&
	[ "$(stat -c %u "$tmp/share/out.txt")" = "$(id -u)" ]; then
	ok "-v: the guest writes a file the user owns on the host"
else
	not_ok "-v: the guest writes a file the user owns on the host" "$(ls -ln "$tmp/share")"
fi

echo "$pass passed, $fail failed" | sed 's/^/hw-smoke: /'
[ "$fail" -eq 0 ]
