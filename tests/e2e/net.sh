#!/bin/sh
# End-to-end test of the guest's network: virtio-net + kbox's stack with the
# real kernel and guest-init.  A Python HTTP server on the host's 127.0.0.1
# is reached from the guest as host.kbox.internal:PORT (an exception rule);
# blocked destinations (the metadata address, a private address, a host
# port without an exception) must fail fast.  Nothing leaves the machine:
# the stack judges every connection before any host connect(), the only
# destinations it is allowed to dial are on the host's loopback, and the
# only names resolved are host.kbox.internal, which kbox answers itself,
# and names under kbox-e2e.test, which a Python DNS responder on the host's
# 127.0.0.1 answers (--dns 127.0.0.1:PORT) (TESTING.md).  Three boots: one
# with the NIC, one detached serving HTTP on a forwarded port (-p, curl on
# the host's loopback), one with --network none.
#   tests/e2e/net.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
srv_pid=
dns_pid=
cleanup() {
	[ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null
	[ -n "$dns_pid" ] && kill "$dns_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# --- refusals, no boot ---
e2e_refuse "unknown mode" "none, public or allowlist" --network open
e2e_refuse "numeric short form" "--allow '127.1'" --allow 127.1
e2e_refuse "bare * deny" "--deny" --deny '*'
e2e_refuse "-p on a non-loopback address" "loopback" -p 0.0.0.0:8080:80
e2e_refuse "-p without a guest port" "guest port" -p 8080:0
e2e_refuse "-p with --network none" "network none" --network none -p 8080:80
e2e_refuse "--dns with a name" "--dns: 'dns.example' is not an IP address" --dns dns.example
e2e_refuse "--dns with port 0" "--dns: '127.0.0.1:0': bad port" --dns 127.0.0.1:0
e2e_refuse "--dns IPv6 with a port, no brackets" "not an IP address" --dns fd00::53:5353x
e2e_refuse "more than 3 --dns" "more than 3 name servers" --dns 127.0.0.1 --dns 127.0.0.2 --dns 127.0.0.3 --dns 127.0.0.4
# The audit log and --learn take guest-chosen text: never into a file the
# host may run or source, nor through a symlink; /dev/stderr still works.
printf 'echo hi\n' > "$tmp/rc"
: > "$tmp/hook"
chmod 755 "$tmp/hook"
ln -s "$tmp/rc" "$tmp/link"
e2e_refuse "audit log into a file kbox did not write" "rc is not empty and was not written by kbox" --audit-log "$tmp/rc"
e2e_refuse "audit log into an executable file" "hook is executable" --audit-log "$tmp/hook"
e2e_refuse "audit log through a symlink" "link is a symbolic link" --audit-log "$tmp/link"
e2e_refuse "--learn over a file kbox did not write" "--learn: .*rc is not empty" --learn "$tmp/rc"
e2e_refuse "--learn through a symlink" "--learn: .*link is a symbolic link" --learn "$tmp/link"
e2e_refuse "audit log on /dev/stderr opens (--learn refused after it)" "--learn: .*rc is not empty" \
	--audit-log /dev/stderr --learn "$tmp/rc"
host_check "the refused file is untouched" test "$(cat "$tmp/rc")" = "echo hi"

e2e_need_kvm "the boots"

# --- the host's server, on loopback only ---
mkdir -p "$tmp/www"
head -c 300000 /dev/urandom > "$tmp/www/file"
cat > "$tmp/srv.py" <<'EOF'
import functools, http.server, os, sys
class H(http.server.SimpleHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n) if 0 <= n <= (1 << 24) else b""
        with open(os.path.join(sys.argv[1], "upload"), "wb") as f:
            f.write(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
h = functools.partial(H, directory=sys.argv[1])
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
with open(sys.argv[2], "w") as f:
    f.write(str(s.server_address[1]))
s.serve_forever()
EOF
python3 "$tmp/srv.py" "$tmp/www" "$tmp/port" 2> "$tmp/srv.log" &
srv_pid=$!
e2e_wait_file "$tmp/port"
port=$(cat "$tmp/port" 2>/dev/null)
if [ -z "$port" ]; then
	not_ok "host HTTP server started"
	echo "$pass passed, $fail failed"
	exit 1
fi
# --- a DNS server on the host's loopback for --dns: names under
# kbox-e2e.test only (probe: a public address, rebind: a private one,
# others NXDOMAIN); each question logged as "NAME TYPE" ---
python3 "$(dirname "$0")/../lib/dns_responder.py" 0 "$tmp/dnsport" "$tmp/dns.log" \
	probe.kbox-e2e.test=1.2.3.4 rebind.kbox-e2e.test=10.1.2.3 2> "$tmp/dns.err" &
dns_pid=$!
e2e_wait_file "$tmp/dnsport"
dnsport=$(cat "$tmp/dnsport" 2>/dev/null)
[ -n "$dnsport" ] || not_ok "host DNS server started"

# A host port without an exception: nothing needs to listen there, the
# policy refuses before any connect().
closed=$((port == 65535 ? port - 1 : port + 1))

filesum=$(md5sum < "$tmp/www/file" | cut -d' ' -f1)
# The guest's checks go to stderr as "ok NAME" / "not ok NAME"; stdout is
# the downloaded file, byte for byte.
cat > "$tmp/guest.sh" <<EOF
t() { name=\$1; shift; if "\$@" > /tmp/out 2>&1; then echo "ok \$name"; else echo "not ok \$name: \$(head -c 200 /tmp/out)"; fi; }
# fast_fail NAME URL: wget must be refused (a reset, so ECONNREFUSED), within
# 3 s more than the guest's own kernel takes to refuse a loopback port
# with the same commands (\$base: every process costs ~0.4 s on an idle PVM
# host and several seconds on a loaded one; a dropped SYN would hang until
# the timeout).  This busybox's wget has no -T, so timeout bounds it.
fast_fail() {
	s=\$(date +%s)
	if timeout 10 wget -qO /dev/null "\$2" > /tmp/out 2>&1; then echo "not ok \$1 (succeeded)"; return; fi
	d=\$((\$(date +%s) - s))
	if ! grep -q 'refused' /tmp/out; then echo "not ok \$1: \$(head -c 200 /tmp/out)"
	elif [ \$d -le \$((base + 3)) ]; then echo "ok \$1 (\${d}s, local refusal \${base}s)"
	else echo "not ok \$1: took \${d}s, local refusal \${base}s"; fi
}
s=\$(date +%s)
timeout 10 wget -qO /dev/null http://127.0.0.1:9/ > /dev/null 2>&1
base=\$((\$(date +%s) - s))
{
t "eth0 has 10.0.2.15/24" sh -c "ip addr show eth0 | grep -q 'inet 10.0.2.15/24'"
t "default route via 10.0.2.2" sh -c "ip route | grep -q 'default via 10.0.2.2 dev eth0'"
t "resolv.conf points at the gateway" grep -qx 'nameserver 10.0.2.2' /etc/resolv.conf
t "lo is up" sh -c "ip addr show lo | grep -q 'inet 127.0.0.1'"
t "gateway answers ping" ping -c 1 -W 3 10.0.2.2
t "host.kbox.internal resolves to the gateway" sh -c "nslookup host.kbox.internal | grep -q 10.0.2.2"
t "a name is answered by the --dns server" sh -c "nslookup probe.kbox-e2e.test | grep -q 1.2.3.4"
t "a private address from it is refused (rebinding)" sh -c "! nslookup rebind.kbox-e2e.test 2>&1 | grep -q 10.1.2.3"
fast_fail "metadata address refused" http://169.254.169.254/
fast_fail "private address refused" http://10.9.9.9/
fast_fail "host port without exception refused" http://host.kbox.internal:$closed/
t "eth0 has fd6b:626f:7800::f/64" sh -c "ip -6 addr show eth0 | grep -q 'inet6 fd6b:626f:7800::f/64'"
t "the IPv6 address is usable at once (not tentative)" sh -c "! ip -6 addr show eth0 | grep -q tentative"
t "IPv6 default route via fd6b:626f:7800::2" sh -c "ip -6 route | grep -q 'default via fd6b:626f:7800::2 dev eth0'"
t "gateway answers ping over IPv6" ping -6 -c 1 -W 3 fd6b:626f:7800::2
t "host.kbox.internal has the gateway's IPv6 address" sh -c "nslookup -type=AAAA host.kbox.internal | grep -q fd6b:626f:7800::2"
t "wget over IPv6 from the host, byte-exact" sh -c "wget -qO- 'http://[fd6b:626f:7800::2]:$port/file' | md5sum | grep -q $filesum"
fast_fail "ULA address over IPv6 refused" 'http://[fd00::1]/'
fast_fail "NAT64 form of the metadata address refused" 'http://[64:ff9b::a9fe:a9fe]/'
# Text: busybox wget posts the file as a C string (up to its first NUL).
head -c 150000 /dev/urandom | base64 > /tmp/up
echo "md5-up \$(md5sum < /tmp/up | cut -d' ' -f1) \$(wc -c < /tmp/up)"
t "upload 200 kB to the host" wget -qO /dev/null --post-file /tmp/up http://host.kbox.internal:$port/up
echo done
} >&2
wget -qO- http://host.kbox.internal:$port/file
EOF

start=$(date +%s)
timeout "$boot_timeout" "$kbox" run --allow "host.kbox.internal:$port" --audit-log "$tmp/audit" \
	--dns "127.0.0.1:${dnsport:-9}" -- sh -c "$(cat "$tmp/guest.sh")" > "$tmp/out" 2> "$tmp/err"
rc=$?
echo "# boot with the NIC and the checks: $(( $(date +%s) - start ))s"
host_check "guest script ran (exit $rc)" [ "$rc" -eq 0 ]
grep -q '^done$' "$tmp/err" || not_ok "guest checks ran to the end" "$(tail -5 "$tmp/err")"
e2e_guest_results "guest: " "$tmp/err"
host_check "wget from host.kbox.internal returns the file byte-exact" cmp -s "$tmp/out" "$tmp/www/file"
up_md5=$(md5sum < "$tmp/www/upload" 2>/dev/null | cut -d' ' -f1)
up_len=$(stat -c %s "$tmp/www/upload" 2>/dev/null)
host_check "the upload arrived byte-exact ($up_len bytes)" grep -qx "md5-up $up_md5 *$up_len" "$tmp/err"
host_check "the upload is over 200 kB" [ "${up_len:-0}" -gt 200000 ]
audit_has() { grep "\"dst\":\"$1\"" "$tmp/audit" 2>/dev/null | grep -q "\"decision\":\"$2\""; }
host_check "audit: host.kbox.internal:$port allowed" audit_has "127.0.0.1:$port" allow
host_check "audit: metadata denied" audit_has "169.254.169.254:80" deny
host_check "audit: 10.9.9.9 denied" audit_has "10.9.9.9:80" deny
host_check "audit: host port $closed denied" audit_has "127.0.0.1:$closed" deny
host_check "audit: [fd00::1]:80 denied" audit_has '\[fd00::1\]:80' deny
host_check "audit: the gateway's IPv6 address dialled as 127.0.0.1" \
	sh -c "[ \$(grep -c '\"dst\":\"127.0.0.1:$port\".*\"decision\":\"allow\"' '$tmp/audit') -ge 2 ]"
host_check "audit: DNS question for host.kbox.internal" grep -q '"proto":"dns".*"name":"host.kbox.internal"' "$tmp/audit"
host_check "the --dns server got the guest's question" grep -qx 'probe.kbox-e2e.test 1' "$tmp/dns.log"
host_check "host.kbox.internal never reached it" sh -c "! grep -q host.kbox.internal '$tmp/dns.log'"
host_check "audit: the rebinding answer denied" grep -q '"proto":"dns".*"name":"rebind.kbox-e2e.test".*"decision":"deny"' "$tmp/audit"
if [ $fail -ne 0 ]; then
	echo "# audit log:"; sed 's/^/#   /' "$tmp/audit" 2>/dev/null | head -20
fi

# --- a forwarded port: busybox httpd in a detached guest, curl on the host ---
sbx="kbox-e2e-net-$$"  # not $name: host_check sets that
start=$(date +%s)
timeout "$boot_timeout" "$kbox" run -d -n "$sbx" -p 127.0.0.1:0:8000 --audit-log "$tmp/audit-fwd" \
	-- sh -c 'mkdir -p /www && echo "hello from the guest" > /www/index.html && exec httpd -f -p 8000 -h /www' \
	> "$tmp/fwd-out" 2> "$tmp/fwd-err"
rc=$?
host_check "-d with -p starts (exit $rc)" [ "$rc" -eq 0 ]
fwd=$("$kbox" ps | awk -v n="$sbx" '$1 == n {print $6}')
fwd=${fwd%%->*}
case $fwd in
127.0.0.1:[1-9]*) ok "kbox ps shows the forwarded port ($fwd)" ;;
*) not_ok "kbox ps shows the forwarded port" "$("$kbox" ps)" ;;
esac
# httpd may start a moment after the agent: retry for a while.
got=
i=0
while [ $i -lt 30 ] && [ -n "$fwd" ]; do
	got=$(curl -sS --max-time 5 "http://$fwd/index.html" 2>/dev/null) && [ -n "$got" ] && break
	sleep 1
	i=$((i + 1))
done
echo "# forwarded port answered after $(( $(date +%s) - start ))s"
host_check "curl on the host reaches httpd in the guest through -p" [ "$got" = "hello from the guest" ]
host_check "audit: the forwarded connection, incoming" \
	grep -q '"proto":"tcp","direction":"in","dst":"10.0.2.15:8000","decision":"allow"' "$tmp/audit-fwd"
"$kbox" stop -t 5 "$sbx" > /dev/null 2>&1
host_check "audit: its close line with byte counts" grep -q '"direction":"in".*"event":"close","bytes_up":[1-9]' "$tmp/audit-fwd"

start=$(date +%s)
timeout "$boot_timeout" "$kbox" run --network none \
	-- sh -c 'if [ -e /sys/class/net/eth0 ]; then echo eth0; else echo no-eth0; fi; ls /sys/class/net' \
	> "$tmp/out2" 2> "$tmp/err2"
rc=$?
echo "# boot with --network none: $(( $(date +%s) - start ))s"
host_check "--network none: guest has no eth0 (exit $rc)" grep -qx no-eth0 "$tmp/out2"
host_check "--network none: lo is there" grep -qx lo "$tmp/out2"

e2e_finish
