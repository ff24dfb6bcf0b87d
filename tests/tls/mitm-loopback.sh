#!/bin/bash
# The interception engine with real clients, all on 127.0.0.1
# (TESTING.md: loopback only, no name ever resolved).  tests/tls/mitm_proxy
# runs the engine between the clients and upstream TLS servers that use
# their own test CA (RSA, made here with openssl; given to the proxy as
# the extra CA, the host bundle is not used).  Clients trust only the
# kbox CA (a fresh one in a temporary directory) and reach the proxy with
# --resolve / a fixed address, so every name stays local.
# Checks: curl GET (ALPN http/1.1 although it offers h2), a header rewritten
# by a filter, 1 MiB up and 1 MiB down with sha256, python3 urllib GET and
# POST, node https, `openssl s_server -www` as the upstream; refusals: a
# TLS-1.3-only curl (protocol_version alert, reason logged), a curl that
# does not trust the kbox CA (reason logged), upstream
# certificates for another name, from an unknown CA and expired (the
# client's handshake fails, the upstream sees no request), HTTP/2 prior
# knowledge.
# One line per check, then "N passed, N failed"; non-zero exit on failure.
# Usage: tests/tls/mitm-loopback.sh [BUILD_DIR]
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
P=$BUILD/tls/mitm_proxy
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY

pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1${2:+: $2}"; fail=$((fail + 1)); }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected '$2', got '$3'"; fi; }
has() { if grep -q -- "$3" "$2"; then ok "$1"; else bad "$1" "no '$3' in $2: $(tail -3 "$2" | tr '\n' '|')"; fi; }

SRCS="tests/tls/mitm_proxy.c netstack/tls_sni.c netstack/tls_trust.c netstack/tls_mitm.c
	netstack/tls_cert.c lib/datadir.c lib/b64.c lib/errbuf.c lib/fileio.c lib/grow.c"
stale=0
[ -x "$P" ] || stale=1
for s in $SRCS lib/*.h netstack/*.h; do [ "$s" -nt "$P" ] && stale=1; done
if [ $stale = 1 ]; then
	mkdir -p "$BUILD/tls"
	# shellcheck disable=SC2086
	cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wvla -I. -O2 -g \
		-o "$P" $SRCS -lbearssl -lpthread || exit 1
fi

T=$(mktemp -d /tmp/kbox-mitm-XXXXXX)
PIDS=()
cleanup() {
	# timeout(1) passes the TERM on to the command it runs
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
NAME=api.example.test

# --- certificates: the upstream test CA (RSA) and its leaves ---
ossl() { openssl "$@" >/dev/null 2>&1 || { echo "openssl $1 failed"; exit 1; }; }
ossl req -x509 -newkey rsa:2048 -nodes -keyout "$T/up-ca.key" -out "$T/up-ca.pem" -days 2 \
	-subj "/CN=kbox upstream test CA" -addext "basicConstraints=critical,CA:TRUE" \
	-addext "keyUsage=critical,keyCertSign,cRLSign"
ossl req -x509 -newkey rsa:2048 -nodes -keyout "$T/rogue-ca.key" -out "$T/rogue-ca.pem" -days 2 \
	-subj "/CN=kbox rogue test CA" -addext "basicConstraints=critical,CA:TRUE"
leaf() { # name ca out
	printf 'subjectAltName=DNS:%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' "$1" > "$T/$3.ext"
	ossl req -newkey rsa:2048 -nodes -keyout "$T/$3.key" -out "$T/$3.csr" -subj "/CN=$1"
	ossl x509 -req -in "$T/$3.csr" -CA "$T/$2.pem" -CAkey "$T/$2.key" -CAcreateserial -days 2 \
		-extfile "$T/$3.ext" -out "$T/$3.pem"
}
leaf $NAME up-ca good
leaf other.example.test up-ca wrongname
leaf $NAME rogue-ca rogue
# an expired leaf (openssl ca takes explicit dates)
touch "$T/index.txt"
echo 01 > "$T/serial"
printf '[ca]\ndefault_ca=d\n[d]\ndatabase=%s/index.txt\nnew_certs_dir=%s\nserial=%s/serial\ndefault_md=sha256\npolicy=p\nx509_extensions=e\n[p]\ncommonName=supplied\n[e]\nsubjectAltName=DNS:%s\nbasicConstraints=CA:FALSE\n' \
	"$T" "$T" "$T" "$NAME" > "$T/ca.cnf"
cp "$T/good.key" "$T/expired.key"
ossl ca -batch -config "$T/ca.cnf" -cert "$T/up-ca.pem" -keyfile "$T/up-ca.key" -in "$T/good.csr" \
	-out "$T/expired.pem" -startdate 20200101000000Z -enddate 20200102000000Z -notext

# --- upstream servers: python3 (echo) and openssl s_server -www ---
cat > "$T/server.py" <<'EOF'
import hashlib, http.server, ssl, sys, threading
cert, key, log = sys.argv[1], sys.argv[2], sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        open(log, "a").write("GET %s\n" % self.path)
        if self.path.startswith("/big/"):
            n = int(self.path[5:])
            self.reply(bytes((i * 7 + 3) & 0xff for i in range(n)))
        else:
            self.reply(("path=%s x-secret=%s\n" % (self.path, self.headers.get("x-secret"))).encode())
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        open(log, "a").write("POST %s %d\n" % (self.path, n))
        self.reply(("len=%d sha256=%s\n" % (n, hashlib.sha256(body).hexdigest())).encode())
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
threading.Timer(120, s.shutdown).start()
s.serve_forever()
EOF
# Both start a process in this shell (not in a $(...) subshell, so that
# cleanup knows its PID), wait for its port and leave it in $PORT.
start_server() { # cert-basename
	timeout 130 python3 "$T/server.py" "$T/$1.pem" "$T/$1.key" "$T/$1.log" > "$T/$1.port" 2>"$T/$1.err" &
	PIDS+=($!)
	for _ in $(seq 50); do [ -s "$T/$1.port" ] && break; sleep 0.1; done
	touch "$T/$1.log"
	PORT=$(cat "$T/$1.port")
}
start_proxy() { # tag upstream-port [args]
	local tag=$1 up=$2
	shift 2
	timeout 130 "$P" --port 0 --upstream-port "$up" --ca-dir "$T/kbox" --bundle "" \
		--extra-ca "$T/up-ca.pem" --max 50 "$@" > "$T/proxy-$tag.log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 50); do grep -q '^port ' "$T/proxy-$tag.log" 2>/dev/null && break; sleep 0.1; done
	PORT=$(sed -n 's/^port //p' "$T/proxy-$tag.log")
}

start_server good; UP=$PORT
start_server wrongname; UPW=$PORT
start_server rogue; UPR=$PORT
start_server expired; UPE=$PORT
[ -n "$UP" ] && [ -n "$UPW" ] && [ -n "$UPR" ] && [ -n "$UPE" ] || { echo "servers did not start: $(cat "$T"/*.err)"; exit 1; }
start_proxy good "$UP" --filter upper-secret; PX=$PORT
[ -n "$PX" ] || { echo "proxy did not start: $(cat "$T/proxy-good.log")"; exit 1; }
KCA=$T/kbox/ca.pem
C=(curl -sS --max-time 20 --cacert "$KCA" --resolve "$NAME:$PX:127.0.0.1")

# --- through the interception ---
out=$("${C[@]}" -w ' %{http_version}' -H 'x-secret: placeholder-abc' "https://$NAME:$PX/hello" 2>&1)
check "curl GET, ALPN http/1.1, filter rewrote x-secret" "path=/hello x-secret=PLACEHOLDER-ABC
 1.1" "$out"
head -c 1048576 /dev/urandom > "$T/up.bin"
want="len=1048576 sha256=$(sha256sum "$T/up.bin" | cut -d' ' -f1)"
out=$("${C[@]}" --data-binary @"$T/up.bin" "https://$NAME:$PX/upload" 2>&1)
check "curl POST 1 MiB, sha256 at the server" "$want" "$out"
python3 -c 'import sys; sys.stdout.buffer.write(bytes((i * 7 + 3) & 0xff for i in range(1048576)))' > "$T/down.bin"
"${C[@]}" -o "$T/got.bin" "https://$NAME:$PX/big/1048576" 2>"$T/curl.err"
check "curl GET 1 MiB, byte-exact" "$(sha256sum < "$T/down.bin")" "$(sha256sum < "$T/got.bin" 2>/dev/null)"

cat > "$T/client.py" <<'EOF'
import http.client, socket, ssl, sys, urllib.request
port, ca, name = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class Conn(http.client.HTTPSConnection):
    # the name stays in the URL (SNI, Host, verification); the socket goes to 127.0.0.1
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self._create_connection = lambda addr, *r, **kw: socket.create_connection(("127.0.0.1", port), *r, **kw)
class Handler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(Conn, req, context=self._context)
ctx = ssl.create_default_context(cafile=ca)
opener = urllib.request.build_opener(Handler(context=ctx))
r = opener.open("https://%s:%d/py" % (name, port), timeout=20)
print(r.status, r.read().decode().strip())
r = opener.open("https://%s:%d/py" % (name, port), data=b"z" * 100000, timeout=20)
print(r.status, r.read().decode().strip())
EOF
out=$(timeout 30 python3 "$T/client.py" "$PX" "$KCA" "$NAME" 2>&1)
check "python3 urllib GET and POST" "200 path=/py x-secret=None
200 len=100000 sha256=$(head -c 100000 /dev/zero | tr '\0' z | sha256sum | cut -d' ' -f1)" "$out"

if command -v node >/dev/null; then
	out=$(timeout 30 node -e '
const https = require("https"), fs = require("fs");
const [port, ca, name] = process.argv.slice(1);
https.get({ host: "127.0.0.1", port, servername: name, headers: { host: name + ":" + port, "x-secret": "node" },
            ca: fs.readFileSync(ca), path: "/node" }, (r) => {
  let b = ""; r.on("data", (d) => b += d); r.on("end", () => console.log(r.statusCode, b.trim()));
}).on("error", (e) => console.log("error", e.message));' "$PX" "$KCA" "$NAME" 2>&1)
	check "node https GET" "200 path=/node x-secret=NODE" "$out"
fi

# openssl s_server -www as the upstream (its own TLS stack on the far side)
OSP=$((20000 + RANDOM % 20000))
timeout 60 openssl s_server -accept "127.0.0.1:$OSP" -cert "$T/good.pem" -key "$T/good.key" -www -quiet \
	> "$T/s_server.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$OSP") 2>/dev/null && break; sleep 0.1; done
start_proxy s_server "$OSP"; PXO=$PORT
out=$(curl -sS --max-time 20 --cacert "$KCA" --resolve "$NAME:$PXO:127.0.0.1" "https://$NAME:$PXO/" 2>&1 | head -c 2000)
case $out in *"s_server -accept"*) ok "openssl s_server -www upstream" ;; *) bad "openssl s_server -www upstream" "$out" ;; esac

# --- refusals ---
out=$("${C[@]}" --tlsv1.3 "https://$NAME:$PX/tls13" 2>&1)
case $out in *"alert protocol version"* | *"protocol version"*) ok "TLS-1.3-only curl gets protocol_version" ;;
*) bad "TLS-1.3-only curl gets protocol_version" "$out" ;; esac
sleep 0.3
has "TLS-1.3-only: reason logged" "$T/proxy-good.log" "only TLS 1.3"

out=$(curl -sS --max-time 20 --cacert "$T/up-ca.pem" --resolve "$NAME:$PX:127.0.0.1" "https://$NAME:$PX/x" 2>&1)
case $out in *"certificate"*) ok "client without the kbox CA refuses the connection" ;;
*) bad "client without the kbox CA refuses the connection" "$out" ;; esac
sleep 0.3
has "client without the kbox CA: reason logged" "$T/proxy-good.log" "does not trust the kbox CA"

start_proxy wrongname "$UPW"; PXW=$PORT
out=$(curl -sS --max-time 20 --cacert "$KCA" --resolve "$NAME:$PXW:127.0.0.1" "https://$NAME:$PXW/secret" 2>&1)
case $out in *"handshake failure"*) ok "upstream cert for another name: client handshake fails" ;;
*) bad "upstream cert for another name: client handshake fails" "$out" ;; esac
sleep 0.3
has "upstream cert for another name: reason logged" "$T/proxy-wrongname.log" "not valid for this name"
check "upstream cert for another name: upstream saw no request" "" "$(cat "$T/wrongname.log")"

start_proxy rogue "$UPR"; PXR=$PORT
out=$(timeout 30 python3 "$T/client.py" "$PXR" "$KCA" "$NAME" 2>&1)
case $out in *HANDSHAKE_FAILURE*|*"handshake failure"*) ok "upstream from an unknown CA: python3's handshake fails" ;;
*) bad "upstream from an unknown CA: python3's handshake fails" "$out" ;; esac
sleep 0.3
has "upstream from an unknown CA: reason logged" "$T/proxy-rogue.log" "not trusted"
check "upstream from an unknown CA: upstream saw no request" "" "$(cat "$T/rogue.log")"

start_proxy expired "$UPE"; PXE=$PORT
out=$(curl -sS --max-time 20 --cacert "$KCA" --resolve "$NAME:$PXE:127.0.0.1" "https://$NAME:$PXE/secret" 2>&1)
case $out in *"handshake failure"*) ok "expired upstream cert: client handshake fails" ;;
*) bad "expired upstream cert: client handshake fails" "$out" ;; esac
sleep 0.3
has "expired upstream cert: reason logged" "$T/proxy-expired.log" "expired"
check "expired upstream cert: upstream saw no request" "" "$(cat "$T/expired.log")"

out=$(curl -sS --max-time 10 --http2-prior-knowledge "http://127.0.0.1:$PX/" 2>&1)
sleep 0.3
has "HTTP/2 prior knowledge refused" "$T/proxy-good.log" "HTTP/2 prior knowledge"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
