#!/bin/bash
# TLS interception and secret substitution end to end, through the real
# network stack on a TAP device (tests/net/harness) with the host kernel
# as the guest.  Two namespaces made here:
#   kbox-th-PID   the "host": the harness and HTTPS test servers
#                 (tests/tls/upstream.py, certificates from a test CA made
#                 here and trusted through --tls-extra-ca) on its loopback;
#   kbox-tg-PID   the "guest": the TAP device and real curl, python3,
#                 node and git, which trust only kbox's CA (made here too).
# The guest only ever holds the placeholder $KBOX_TOKEN; the checks are
# that the server receives the real value exactly where the secret allows
# it, and that every attack leaks nothing: a placeholder in the query,
# Host != SNI, a spoofed SNI, a redirect to a port the secret is fine
# for but a server that is not trusted, a TLS-1.3-only client, HTTP/2
# prior knowledge, an upstream with an untrusted certificate.
# Usage: tests/tls/intercept.sh [BUILD_DIR]   (NET_SAN=0: no sanitizers)
set -u
cd "$(dirname "$0")/../.."
# shellcheck source=tests/net/lib.sh
. tests/net/lib.sh
nl_require openssl
nl_build_harness "${1:-build}/tls/harness" "${1:-build}"
nl_namespaces kbox-th kbox-tg kbtls
# A second "remote" address in the host namespace (not 127/8, which the
# guest namespace would keep for itself).
ip -n "$HNS" addr add 10.99.0.1/32 dev lo || bad "second address in the host namespace"

# --- certificates: the upstream's test CA, a server leaf, a stranger's ---
mk_ca() { # DIR NAME
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=$2" \
		-keyout "$1.key" -out "$1.pem" -addext basicConstraints=critical,CA:TRUE \
		-addext keyUsage=critical,keyCertSign >/dev/null 2>&1
}
mk_leaf() { # CA OUT NAME
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$3" -keyout "$2.key" \
		-out "$2.csr" >/dev/null 2>&1 &&
		openssl x509 -req -in "$2.csr" -CA "$1.pem" -CAkey "$1.key" -CAcreateserial -days 1 \
			-extfile <(printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth\n' "$3") \
			-out "$2.pem" >/dev/null 2>&1
}
mk_ca "$T/upca" "kbox test upstream CA" && mk_leaf "$T/upca" "$T/srv" host.kbox.internal &&
	mk_leaf "$T/upca" "$T/other" other.test &&
	mk_ca "$T/evilca" "unknown CA" && mk_leaf "$T/evilca" "$T/evil" host.kbox.internal ||
	{ bad "test certificates"; finish; }

# --- the secret, its value only in the harness's environment ---
REAL="real-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
cat >"$T/secrets.yaml" <<'EOF'
TOKEN:
  value: "${TOKEN}"
  allow: ["host.kbox.internal"]
  substitution:
    headers: true
    header_fields: ["authorization"]
    query: false
    body: false
EOF

# --- a bare repository for git over smart HTTPS (clone and push) ---
(
	set -e
	git init -q "$T/src"
	cd "$T/src"
	echo one >f && git add f && git -c user.name=t -c user.email=t@t commit -qm one
	git clone -q --bare "$T/src" "$T/git/repo.git"
	git -C "$T/git/repo.git" config http.receivepack true
) || bad "test repository"

# The guest's view, as kbox run sets it up: the CA variables, the placeholder.
GUEST_ENV=(SSL_CERT_FILE="$T/ca/ca.pem" CURL_CA_BUNDLE="$T/ca/ca.pem" REQUESTS_CA_BUNDLE="$T/ca/ca.pem"
	NODE_EXTRA_CA_CERTS="$T/ca/ca.pem" GIT_SSL_CAINFO="$T/ca/ca.pem" TOKEN='$KBOX_TOKEN')

ip netns exec "$HNS" python3 tests/tls/upstream.py 127.0.0.1 8443 "$T/srv.pem" "$T/srv.key" "$T/seen.log" "$T/git" 8444 2>"$T/upstream.err" &
PIDS="$PIDS $!"
# A second, trusted server under another name the secret may not go to.
ip netns exec "$HNS" python3 tests/tls/upstream.py 10.99.0.1 8445 "$T/other.pem" "$T/other.key" "$T/other.log" "$T/git" \
	2>"$T/other.err" &
PIDS="$PIDS $!"
ip netns exec "$HNS" python3 tests/tls/upstream.py 127.0.0.1 8444 "$T/evil.pem" "$T/evil.key" "$T/evil.log" "$T/git" 2>"$T/evil.err" &
PIDS="$PIDS $!"

NL_LIFETIME=200 TOKEN="$REAL" start_harness "$T/harness.out" "$T/harness.err" --audit "$T/audit.log" \
	--allow host.kbox.internal:8443 --allow host.kbox.internal:8444 \
	--add-host other.test:10.99.0.1 --allow 10.99.0.1:8445 \
	--secret-conf "$T/secrets.yaml" --tls-intercept all --tls-extra-ca "$T/upca.pem" --ca-dir "$T/ca"
for _ in $(seq 50); do
	H curl -sk -o /dev/null --max-time 1 https://127.0.0.1:8443/ready && break
	sleep 0.1
done
ok "set-up: stack on $TAP, kbox CA in $T/ca, upstream test CA trusted as extra"

URL=https://host.kbox.internal:8443
count() { local n; n=$(grep -c -e "$1" "$T/seen.log" 2>/dev/null); echo "${n:-0}"; }
seen_real() { count "Bearer $REAL"; }
leaked_placeholder() { count 'KBOX_TOKEN'; }
nseen() { local n; n=$(wc -l <"$T/seen.log" 2>/dev/null); echo "${n:-0}"; }

# --- the real value reaches the allowed host, the guest sees only the placeholder ---
before=$(seen_real)
out=$(G curl -sS --max-time 20 -H 'Authorization: Bearer $KBOX_TOKEN' "$URL/echo" 2>&1)
if [ "$out" = "ok" ] && [ "$(seen_real)" = $((before + 1)) ] && [ "$(leaked_placeholder)" = 0 ]; then
	ok "curl: the server got the real value in Authorization"
else
	bad "curl substitution" "out='$out' seen=$(seen_real) $(tail -1 "$T/seen.log" 2>/dev/null)"
fi
case "$out" in *"$REAL"*) bad "curl saw the real value" ;; esac

before=$(seen_real)
out=$(G python3 -c '
import os, urllib.request
r = urllib.request.Request("'"$URL"'/echo", headers={"Authorization": "Bearer " + os.environ["TOKEN"]})
print(urllib.request.urlopen(r, timeout=20).read().decode().strip())' 2>&1)
[ "$out" = "ok" ] && [ "$(seen_real)" = $((before + 1)) ] && ok "python3 urllib: substituted" ||
	bad "python3 urllib" "$out"

if G python3 -c 'import requests' 2>/dev/null; then
	before=$(seen_real)
	out=$(G python3 -c '
import os, requests
print(requests.get("'"$URL"'/echo", headers={"Authorization": "Bearer " + os.environ["TOKEN"]}, timeout=20).text.strip())' 2>&1)
	[ "$out" = "ok" ] && [ "$(seen_real)" = $((before + 1)) ] && ok "python3 requests: substituted" ||
		bad "python3 requests" "$out"
else
	echo "skip python3 requests: not installed"
fi

if command -v node >/dev/null; then
	before=$(seen_real)
	out=$(G node -e '
fetch("'"$URL"'/echo", {headers: {Authorization: "Bearer " + process.env.TOKEN}})
  .then(r => r.text()).then(t => console.log(t.trim())).catch(e => { console.log("ERR " + e.cause); process.exit(1); });' 2>&1)
	[ "$out" = "ok" ] && [ "$(seen_real)" = $((before + 1)) ] && ok "node fetch: substituted" ||
		bad "node fetch" "$out"
else
	echo "skip node fetch: no node"
fi

# Basic credentials: the placeholder inside base64 is found and replaced.
before=$(count "Basic $(printf 'u:%s' "$REAL" | base64 -w0)")
out=$(G curl -sS --max-time 20 -u 'u:$KBOX_TOKEN' "$URL/echo" 2>&1)
after=$(count "Basic $(printf 'u:%s' "$REAL" | base64 -w0)")
[ "$out" = ok ] && [ "$after" = $((before + 1)) ] && ok "curl -u: the placeholder inside Basic credentials substituted" ||
	bad "Basic credentials" "$out"

# git clone and push over smart HTTPS, the token in an extra header.
before=$(seen_real)
if G git -c http.extraHeader='Authorization: Bearer $KBOX_TOKEN' clone -q "$URL/git/repo.git" "$T/clone" 2>"$T/git.err" &&
	(cd "$T/clone" && echo two >g && git add g && git -c user.name=t -c user.email=t@t commit -qm two) &&
	G git -C "$T/clone" -c http.extraHeader='Authorization: Bearer $KBOX_TOKEN' push -q origin HEAD 2>>"$T/git.err" &&
	[ "$(git -C "$T/git/repo.git" log --format=%s -1)" = two ]; then
	ok "git clone and push over HTTPS through the interception ($(($(seen_real) - before)) requests with the real token)"
else
	bad "git clone/push" "$(tail -3 "$T/git.err")"
fi
[ "$(leaked_placeholder)" = 0 ] && ok "no placeholder ever reached the server" ||
	bad "placeholder reached the server" "$(grep KBOX_TOKEN "$T/seen.log" | head -2)"

# --- responses: what a server reflects comes back as the placeholder ---
# The server echoes the request (head and body, the value in a header
# too), the value in many encodings, in a chunked body cut every few
# bytes, gzip-compressed; TRACE.  The guest must never see the value.
no_value() { # FILE: none of the value's forms (tests/tls/upstream.py's) is in FILE
	python3 - "$REAL" "$1" <<'PY'
import base64, sys
v, f = sys.argv[1].encode(), open(sys.argv[2], "rb").read()
forms = [v, base64.b64encode(v), base64.b64encode(b"x" + v)[2:-2], base64.b64encode(b"xy" + v + b"z")[3:-3],
         base64.urlsafe_b64encode(b"\xfb" + v)[2:-2], base64.b64encode(b"user:" + v)[8:-4],
         "".join("%%%02X" % c for c in v).encode(), "".join("%%%02x" % c for c in v).encode(),
         "".join("\\u%04x" % c for c in v).encode(), v[2:-2]]
hit = [i for i, x in enumerate(forms) if x in f]
sys.exit(1 if hit else 0)
PY
}
before=$(seen_real)
G curl -sS --max-time 20 --compressed -D "$T/r.head" -o "$T/r.body" -H 'Authorization: Bearer $KBOX_TOKEN' "$URL/reflect" 2>"$T/r.err"
rc=$?
if [ $rc = 0 ] && [ "$(seen_real)" = $((before + 1)) ] && no_value "$T/r.head" && no_value "$T/r.body" &&
	grep -q '^X-Echo-Authorization: \$KBOX_TOKEN\*' "$T/r.head" && grep -q 'Bearer \$KBOX_TOKEN\*' "$T/r.body" &&
	grep -q '"accept-encoding": "identity"' "$T/seen.log"; then
	ok "a reflected request (head, body, header): the guest sees the placeholder, the server got the value and Accept-Encoding: identity"
else
	bad "reflected request" "rc=$rc $(cat "$T/r.err") $(head -c 600 "$T/r.head" "$T/r.body")"
fi
G curl -sS --max-time 20 -o "$T/e.body" -H 'Authorization: Bearer $KBOX_TOKEN' "$URL/reflect-enc" 2>"$T/e.err"
rc=$?
if [ $rc = 0 ] && no_value "$T/e.body" && [ "$(grep -o 'KBOX_TOKEN' "$T/e.body" | wc -l)" -ge 3 ]; then
	ok "the value reflected in base64 (padded, unpadded, shifted, URL-safe), Basic, percent and JSON escapes: all replaced"
else
	bad "reflected encodings" "rc=$rc $(cat "$T/e.err") $(head -c 900 "$T/e.body")"
fi
for n in 1 5 13; do
	G curl -sS --max-time 20 -D "$T/c.head" -o "$T/c.body" --raw -H 'Authorization: Bearer $KBOX_TOKEN' \
		"$URL/reflect-chunked?$n" 2>"$T/c.err"
	rc=$?
	G curl -sS --max-time 20 -o "$T/c2.body" -H 'Authorization: Bearer $KBOX_TOKEN' "$URL/reflect-chunked?$n" 2>>"$T/c.err"
	rc2=$?
	if [ $rc = 0 ] && [ $rc2 = 0 ] && no_value "$T/c.body" && no_value "$T/c2.body" && no_value "$T/c.head" &&
		grep -q 'Bearer \$KBOX_TOKEN\*' "$T/c2.body" && grep -q 'X-Trailer-Echo: \$KBOX_TOKEN' "$T/c.body"; then
		ok "a chunked reflection cut every $n bytes: re-chunked, trailer too, no value"
	else
		bad "chunked reflection ($n)" "rc=$rc/$rc2 $(cat "$T/c.err") $(head -c 600 "$T/c.body")"
	fi
done
# 100-continue (the server's interim 100, then the reflection) and two
# pipelined requests in one write: each response scrubbed, framing kept.
head -c 3000 /dev/zero | tr '\0' 'b' >"$T/body.bin"
G curl -sS --max-time 20 -o "$T/x.body" -H 'Expect: 100-continue' -H 'Authorization: Bearer $KBOX_TOKEN' \
	--data-binary @"$T/body.bin" "$URL/reflect" 2>"$T/x.err"
rc=$?
[ $rc = 0 ] && no_value "$T/x.body" && grep -q 'Bearer \$KBOX_TOKEN\*' "$T/x.body" &&
	ok "Expect: 100-continue: the reflection after the interim response is scrubbed" ||
	bad "100-continue" "rc=$rc $(cat "$T/x.err")"
G python3 -c '
import socket, ssl, sys
c = ssl.create_default_context()
s = c.wrap_socket(socket.create_connection(("host.kbox.internal", 8443), timeout=20), server_hostname="host.kbox.internal")
r = b"GET /reflect HTTP/1.1\r\nHost: host.kbox.internal\r\nAuthorization: Bearer $KBOX_TOKEN\r\n\r\n"
s.sendall(r + r.replace(b"/reflect", b"/reflect-chunked?3") + r.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
out = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    out += d
sys.stdout.buffer.write(out)' >"$T/p.out" 2>"$T/p.err"
if no_value "$T/p.out" && [ "$(grep -c '^HTTP/1.1 200' "$T/p.out")" = 3 ] && [ "$(grep -c 'X-Trailer-Echo: \$KBOX_TOKEN' "$T/p.out")" = 1 ]; then
	ok "three pipelined requests: three responses, each scrubbed"
else
	bad "pipelined" "$(cat "$T/p.err") $(head -c 400 "$T/p.out")"
fi
out=$(G curl -sS --max-time 20 --compressed -w '\n%{http_code}' -H 'Authorization: Bearer $KBOX_TOKEN' "$URL/gzip" 2>&1)
case "$out" in *"compressed"*502) grep -q '"event":"response-refused".*"status":502' "$T/audit.log" &&
	ok "a compressed response where kbox asked for identity: 502 from kbox, audited" || bad "gzip audit" ;;
*) bad "compressed response" "$out" ;; esac
n=$(nseen)
out=$(G curl -sS --max-time 20 -X TRACE -w '\n%{http_code}' -H 'Authorization: Bearer $KBOX_TOKEN' "$URL/" 2>&1)
case "$out" in *405) [ "$(nseen)" = "$n" ] && ok "TRACE: 405 from kbox, nothing sent" || bad "TRACE reached the server" ;;
*) bad "TRACE" "$out" ;; esac

# --- attacks ---
n=$(nseen)
out=$(G curl -sS --max-time 20 "$URL/echo?key=\$KBOX_TOKEN" 2>&1)
case "$out" in *kbox*) [ "$(nseen)" = "$n" ] && ok "placeholder in the query (off): 403 from kbox, nothing sent" || bad "query leak" ;;
*) bad "placeholder in the query" "$out" ;; esac

# The head may have gone before the body was seen: what matters is that
# neither the placeholder nor the value did.
out=$(G curl -sS --max-time 20 --data-urlencode 'k=$KBOX_TOKEN' "$URL/echo" 2>&1)
case "$out" in *kbox*) [ "$(count KBOX_TOKEN)" = 0 ] && [ "$(count "$REAL\"}")" = 0 ] &&
	ok "percent-encoded placeholder in the body (off): blocked, not sent" || bad "body leak" ;;
*) bad "placeholder in the body" "$out" ;; esac

out=$(G curl -sS --max-time 20 -H 'Authorization: Bearer $KBOX_TOKEN' https://other.test:8445/echo 2>&1)
case "$out" in *"may only be sent to host.kbox.internal"*)
	[ ! -s "$T/other.log" ] && ok "placeholder to a host the secret does not allow: 403 from kbox, nothing sent" ||
		bad "other host got the request" ;;
*) bad "placeholder to another host" "$out" ;; esac
out=$(G curl -sS --max-time 20 https://other.test:8445/echo 2>&1)
[ "$out" = ok ] && ok "the same host without a placeholder works (intercepted, scope all)" || bad "other host" "$out"
# A host no secret may go to gets no "identity" (its responses may be
# compressed) and is still scrubbed.
G curl -sS --max-time 20 --compressed -o "$T/o.body" https://other.test:8445/reflect 2>"$T/o.err" &&
	! grep -q '"accept-encoding": "identity"' "$T/other.log" &&
	ok "a host without secrets: its Accept-Encoding is left alone" || bad "other host reflection" "$(cat "$T/o.err")"

n=$(nseen)
out=$(G curl -sS --max-time 20 -H 'Host: other.example' -H 'Authorization: Bearer $KBOX_TOKEN' "$URL/echo" 2>&1)
[ "$(nseen)" = "$n" ] && [ -n "$out" ] && [ "$out" != ok ] && ok "Host != SNI: refused by kbox (${out%%$'\n'*})" ||
	bad "Host != SNI" "$out"

n=$(nseen)
out=$(G curl -sS --max-time 20 --resolve spoof.example:8443:10.0.2.2 -H 'Authorization: Bearer $KBOX_TOKEN' \
	https://spoof.example:8443/echo 2>&1)
[ "$(nseen)" = "$n" ] && grep -q '"event":"tls-refuse".*not a name our DNS gave' "$T/audit.log" &&
	ok "spoofed SNI (a name our DNS never gave for the address): reset, audited" || bad "SNI spoofing" "$out"

n=$(nseen)
out=$(G curl -sS --max-time 20 -H 'Authorization: Bearer $KBOX_TOKEN' https://host.kbox.internal:8444/echo 2>&1)
[ ! -s "$T/evil.log" ] && grep -q '"event":"tls-fail"' "$T/audit.log" &&
	ok "upstream with an untrusted certificate: the guest's handshake fails, nothing sent" || bad "untrusted upstream" "$out"

out=$(G curl -sS --max-time 20 -L -H 'Authorization: Bearer $KBOX_TOKEN' "$URL/redirect" 2>&1)
[ ! -s "$T/evil.log" ] && ok "redirect to another server: the token never reaches it" || bad "redirect leak" "$out"

out=$(G curl -sS --max-time 20 --tlsv1.3 "$URL/echo" 2>&1)
[ "$out" != ok ] && grep -q 'tls-fail' "$T/audit.log" && ok "TLS-1.3-only client: a clean failure (${out##*curl: })" ||
	bad "TLS 1.3 only" "$out"

# A client that cannot finish the handshake with kbox ends at once, with
# an alert, and the audit log says why: a cipher kbox does not offer
# (static RSA), and busybox wget's own TLS.
t0=$(date +%s%N)
out=$(G timeout 15 openssl s_client -connect host.kbox.internal:8443 -servername host.kbox.internal -tls1_2 \
	-cipher AES128-SHA -CAfile "$T/ca/ca.pem" </dev/null 2>&1)
ms=$((($(date +%s%N) - t0) / 1000000))
case "$out" in *"alert handshake failure"*)
	[ $ms -lt 5000 ] && grep -q '"event":"tls-fail".*guest TLS for host.kbox.internal failed: sent fatal alert handshake_failure' "$T/audit.log" &&
		ok "a client with no cipher kbox offers: handshake_failure alert in $ms ms, audited" ||
		bad "no common cipher: slow or not audited" "$ms ms $(grep tls-fail "$T/audit.log" | tail -2)" ;;
*) bad "no common cipher: no alert" "$ms ms: $(echo "$out" | grep -i -m3 'alert\|error\|errno')" ;; esac
# A client that does not trust the kbox CA ends its own handshake with an
# alert; the audit log names the likely cause.
t0=$(date +%s%N)
out=$(G curl -sS --max-time 20 --cacert "$T/upca.pem" "$URL/echo" 2>&1)
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$out" != ok ] && [ $ms -lt 5000 ] && grep -q '"event":"tls-fail".*does not trust the kbox CA' "$T/audit.log" &&
	ok "a client that does not trust the kbox CA: fails in $ms ms, audited as such" ||
	bad "untrusting client" "$ms ms: $out"
# busybox wget's own TLS (the issue's client that waited for its timeout).
if command -v busybox >/dev/null && busybox wget --help 2>&1 | grep -q -- '--no-check-certificate'; then
	t0=$(date +%s%N)
	out=$(G env -i PATH=/usr/bin:/bin busybox wget -q -O - --header 'Authorization: Bearer $KBOX_TOKEN' \
		"$URL/reflect" 2>&1)
	ms=$((($(date +%s%N) - t0) / 1000000))
	case "$out" in *"$REAL"*) bad "busybox wget saw the real value" ;; esac
	if [ $ms -lt 5000 ] && grep -v '"proto":"tcp"\|"proto":"dns"' "$T/audit.log" | tail -1 | grep -q '"event":"tls-fail"'; then
		ok "busybox wget's TLS: ends in $ms ms (${out##*wget: }), audited: $(grep '"event":"tls-fail"' "$T/audit.log" |
			tail -1 | sed 's/.*"reason":"\([^"]*\)".*/\1/')"
	elif [ $ms -lt 5000 ] && [ -n "$out" ]; then
		ok "busybox wget's TLS: done in $ms ms"
	else
		bad "busybox wget" "$ms ms: $out"
	fi
fi
# A record BearSSL cannot read in the middle of the handshake (python's
# own ClientHello, then a record of an unknown type): BearSSL ends such a
# handshake without an alert; kbox sends one, so the client does not wait.
out=$(G python3 -c '
import socket, ssl, time
ctx = ssl.create_default_context(cafile="'"$T/ca/ca.pem"'")
ctx.maximum_version = ssl.TLSVersion.TLSv1_2
inc, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
o = ctx.wrap_bio(inc, outb, server_hostname="host.kbox.internal")
try:
    o.do_handshake()
except ssl.SSLWantReadError:
    pass
s = socket.create_connection(("host.kbox.internal", 8443), timeout=10)
s.sendall(outb.read())
buf = b""
while b"\x0e\x00\x00\x00" not in buf:
    d = s.recv(65536)
    if not d:
        break
    buf += d
t0 = time.time()
s.sendall(b"\x63\x03\x03\x00\x01\x00")
got = b""
while True:
    d = s.recv(100)
    if not d:
        break
    got += d
print("alert" if got[:1] == b"\x15" else "none", got.hex(), int((time.time() - t0) * 1000))' 2>&1)
case "$out" in "alert 15030300020"*)
	grep -q '"event":"tls-fail".*guest TLS for host.kbox.internal failed' "$T/audit.log" &&
		ok "a handshake broken by the client: a fatal alert at once (${out#alert }), audited" || bad "broken handshake audit" ;;
*) bad "broken handshake: no alert" "$out" ;; esac

# HTTP/2 spoken inside TLS without asking for it by ALPN.
out=$(G python3 -c '
import socket, ssl
c = ssl.create_default_context()
s = c.wrap_socket(socket.create_connection(("host.kbox.internal", 8443), timeout=20), server_hostname="host.kbox.internal")
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(9))
print(s.recv(200).decode(errors="replace").splitlines()[0])' 2>&1)
case "$out" in "HTTP/1.1 4"*) ok "HTTP/2 prior knowledge inside TLS: refused by kbox ($out)" ;;
*) bad "h2 prior knowledge" "$out" ;; esac

out=$(G curl -sS --max-time 20 --http2 -H 'Authorization: Bearer $KBOX_TOKEN' "$URL/echo" 2>&1)
[ "$out" = ok ] && ok "curl --http2 falls back to HTTP/1.1 through kbox" || bad "curl --http2" "$out"

# --- the audit log ---
grep -q '"event":"secret-substituted","secret":"TOKEN"' "$T/audit.log" && ok "audit: substitutions recorded" ||
	bad "audit substitutions"
grep -q '"event":"secret-blocked","secret":"TOKEN"' "$T/audit.log" && ok "audit: blocks recorded" || bad "audit blocks"
grep -q '"event":"secret-scrubbed","secret":"TOKEN","where":"response"' "$T/audit.log" &&
	ok "audit: values replaced in responses recorded" || bad "audit scrubbed" "$(grep -m1 scrubbed "$T/audit.log")"
if grep -q "$REAL" "$T/audit.log" "$T/harness.out" "$T/harness.err"; then
	bad "the real value appears in kbox's logs"
else
	ok "the real value is in no log"
fi

stop_harness
grep -q '^stats tls_intercepted=[1-9]' "$T/harness.out" && ok "harness: $(grep '^stats tls' "$T/harness.out")" ||
	bad "harness stats" "$(tail -3 "$T/harness.out") $(tail -5 "$T/harness.err")"
nl_sanitizers_clean "no sanitizer report" "$T/harness.err"
finish
