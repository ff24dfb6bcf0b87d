#!/bin/sh
# End-to-end test of secrets and TLS interception in the VM, lock-down on:
# the guest's environment holds only the placeholder, the kbox CA is in
# its trust store and the CA variables point there, the real value is
# nowhere in the guest; a ClientHello sent from the guest to a TLS server
# on the host's loopback (host.kbox.internal, its certificate from a test
# CA given with --tls-extra-ca) makes kbox mint a leaf and answer with its
# own handshake, under the seccomp allowlist; `kbox secrets reload`
# re-reads the values of a detached sandbox, and a broken secrets.env
# changes nothing.  Nothing leaves the machine (host.kbox.internal is the
# host's loopback; no other name is resolved).
#   tests/e2e/secrets.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
srv_pid=
name=kbox-secrets-$$
cleanup() {
	[ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null
	"$kbox" stop "$name" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
command -v openssl >/dev/null || e2e_skip "openssl is missing"

export KBOX_CA_DIR="$tmp/ca"
real="real-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
mkdir -p "$tmp/proj"
cat >"$tmp/proj/secrets.yaml" <<'EOF'
TOKEN:
  value: "${TOKEN}"
  allow: ["host.kbox.internal"]
  substitution:
    headers: true
    header_fields: ["authorization"]
EOF
echo "TOKEN=$real" >"$tmp/proj/secrets.env"

# --- refusals, no boot ---
printf 'TOKEN:\n  value: "${NOPE_NOT_SET}"\n  allow: [a.example]\n' >"$tmp/bad.yaml"
"$kbox" run --secret-conf "$tmp/bad.yaml" -- true >/dev/null 2>"$tmp/err"
rc=$?
if [ "$rc" = 125 ] && grep -q 'NOPE_NOT_SET' "$tmp/err"; then ok "a secret without a value is refused before boot"
else not_ok "missing secret value" "$(cat "$tmp/err")"; fi
"$kbox" run --tls-intercept sometimes -- true >/dev/null 2>"$tmp/err"
[ $? = 125 ] && grep -q 'all or secrets' "$tmp/err" && ok "--tls-intercept takes all or secrets" ||
	not_ok "--tls-intercept" "$(cat "$tmp/err")"
"$kbox" run --tls-bypass 'bad name!' -- true >/dev/null 2>"$tmp/err"
[ $? = 125 ] && ok "--tls-bypass refuses a bad name" || not_ok "--tls-bypass" "$(cat "$tmp/err")"

# --- a TLS server on the host's loopback, certificate from a test CA ---
e2e_test_ca "test CA"
port=$(e2e_free_port)
mkdir -p "$tmp/git"
python3 tests/tls/upstream.py 127.0.0.1 "$port" "$tmp/srv.pem" "$tmp/srv.key" "$tmp/seen.log" "$tmp/git" \
	2>"$tmp/upstream.err" &
srv_pid=$!

# A TLS 1.2 ClientHello for host.kbox.internal, made on the host: the guest
# has no TLS client, but sending these bytes makes kbox intercept.
mkdir -p "$tmp/share"
python3 - "$tmp/share/hello.bin" <<'EOF'
import ssl, sys
c = ssl.create_default_context()
c.maximum_version = ssl.TLSVersion.TLSv1_2
i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
s = c.wrap_bio(i, o, server_hostname="host.kbox.internal")
try:
    s.do_handshake()
except ssl.SSLWantReadError:
    pass
open(sys.argv[1], "wb").write(o.read())
EOF

# The value to look for, kept in the test's share (not searched).
printf '%s\n' "$real" >"$tmp/share/pattern"
cat >"$tmp/share/checks.sh" <<EOF
echo "env TOKEN=\$TOKEN"
echo "env SSL_CERT_FILE=\$SSL_CERT_FILE NODE_EXTRA_CA_CERTS=\$NODE_EXTRA_CA_CERTS"
grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt /etc/kbox/ca.pem | tr '\n' ' '; echo
if grep -rqsF -f /share/pattern /etc /kbox /tmp /root /proc/1/environ /proc/self/environ; then echo LEAK; else echo noleak; fi
# The ClientHello, then stdin held open while kbox first completes its
# own handshake with the upstream server and then answers: poll for the
# answer (up to 40 s on a loaded host) rather than guess a wait.
( (cat /share/hello.bin; sleep 40) | timeout 40 nc host.kbox.internal $port >/tmp/tls.out ) </dev/null 2>/dev/null &
i=0
while [ \$i -lt 40 ] && [ "\$(wc -c </tmp/tls.out 2>/dev/null || echo 0)" -lt 100 ]; do sleep 1; i=\$((i + 1)); done
sleep 1
echo "tlsbytes \$(wc -c </tmp/tls.out 2>/dev/null || echo 0)"
EOF

out=$(timeout "$boot_timeout" "$kbox" run --secret-conf "$tmp/proj/secrets.yaml" --tls-extra-ca "$tmp/upca.pem" \
	--allow "host.kbox.internal:$port" --audit-log "$tmp/audit.log" -v "$tmp/share:/share:ro" \
	-- /bin/sh /share/checks.sh 2>"$tmp/run.err")
rc=$?
[ "$rc" = 0 ] && ok "boot with secrets, interception and the lock-down" ||
	not_ok "boot (rc $rc)" "$(tail -5 "$tmp/run.err")"
printf '%s\n' "$out" | grep -qx 'env TOKEN=\$KBOX_TOKEN' && ok "the guest's TOKEN is the placeholder" ||
	not_ok "placeholder" "$out"
printf '%s\n' "$out" | grep -q 'SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt NODE_EXTRA_CA_CERTS=/etc/kbox/ca.pem' &&
	ok "the CA variables point at the bundle and the CA" || not_ok "CA variables" "$out"
printf '%s\n' "$out" | grep -q 'ca-certificates.crt:1 /etc/kbox/ca.pem:1' && ok "kbox's CA is in the guest's bundle" ||
	not_ok "CA in the bundle" "$out"
printf '%s\n' "$out" | grep -qx noleak && ok "the real value is nowhere in the guest" || not_ok "leak" "$out"
n=$(printf '%s\n' "$out" | sed -n 's/^tlsbytes //p')
if [ "${n:-0}" -gt 100 ] && grep -q '"event":"tls-intercept"' "$tmp/audit.log"; then
	ok "a guest ClientHello is intercepted: kbox answered with $n bytes of handshake"
else
	not_ok "interception from the guest" "tlsbytes=$n; $(cat "$tmp/audit.log" 2>/dev/null | tail -3)"
fi
grep -q "$real" "$tmp/audit.log" "$tmp/run.err" && not_ok "the real value reached kbox's logs" ||
	ok "the real value is in no log"

# --- reload of a detached sandbox ---
if timeout "$boot_timeout" "$kbox" run -d -n "$name" --secret-conf "$tmp/proj/secrets.yaml" -- sleep 600 \
	>"$tmp/d.out" 2>"$tmp/d.err"; then
	echo "TOKEN=new-$real" >"$tmp/proj/secrets.env"
	"$kbox" secrets reload "$name" >/dev/null 2>"$tmp/r.err" || not_ok "secrets reload" "$(cat "$tmp/r.err")"
	sleep 2
	"$kbox" logs "$name" >"$tmp/logs" 2>&1
	grep -q 'secrets reloaded' "$tmp/logs" && ok "kbox secrets reload: values re-read" ||
		not_ok "reload" "$(cat "$tmp/logs")"
	echo 'TOKEN="unterminated' >"$tmp/proj/secrets.env"
	"$kbox" secrets reload "$name" >/dev/null 2>&1
	sleep 2
	"$kbox" logs "$name" >"$tmp/logs" 2>&1
	if grep -q 'secrets not reloaded' "$tmp/logs" && ! grep -q "$real" "$tmp/logs"; then
		ok "a broken secrets.env: not reloaded, said so, no value in the message"
	else
		not_ok "broken reload" "$(cat "$tmp/logs")"
	fi
	"$kbox" ps | grep -q "$name" && ok "the sandbox still runs after both reloads" || not_ok "sandbox died"
	"$kbox" stop "$name" >/dev/null 2>&1
else
	not_ok "detached boot" "$(cat "$tmp/d.err")"
fi
"$kbox" secrets reload no-such-sandbox >/dev/null 2>&1
[ $? = 125 ] && ok "reload of an unknown sandbox: exit 125" || not_ok "reload unknown"

e2e_finish
