#!/bin/sh
# The kbox CA and its leaf certificates, judged by real verifiers:
# `openssl verify -x509_strict -purpose sslserver`; Python's ssl with
# VERIFY_X509_STRICT (Python 3.13's default), Node, curl and git (libcurl
# over GnuTLS) in real TLS handshakes on 127.0.0.1 against a Python server
# and `openssl s_server` serving minted leaves; wrong names and a foreign
# CA must be refused.  Nothing leaves loopback and no name is resolved:
# clients dial 127.0.0.1 and give the name as SNI only.
# Usage: tests/tls/verify-certs.sh [path/to/kbox]   (exit 0 = all PASS)
set -u
KBOX=$(realpath "${1:-build/kbox}")
T=$(mktemp -d /tmp/kbox-tls-XXXXXX)
SERVER_PID=
cleanup() {
	[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT INT TERM
export KBOX_CA_DIR="$T/ca"
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { # check DESCRIPTION COMMAND...
	what=$1
	shift
	if "$@" >"$T/out" 2>&1; then pass "$what"; else fail "$what"; sed 's/^/    /' "$T/out"; fi
}
refuse() { # refuse DESCRIPTION PATTERN COMMAND...: must fail, saying PATTERN
	what=$1
	pat=$2
	shift 2
	if "$@" >"$T/out" 2>&1; then
		fail "$what (accepted)"
	elif grep -q "$pat" "$T/out"; then
		pass "$what"
	else
		fail "$what (failed for another reason)"
		sed 's/^/    /' "$T/out"
	fi
}

for tool in openssl python3; do
	command -v $tool >/dev/null || { echo "FAIL $tool is not installed"; exit 1; }
done
# The client: Python 3.13 if there is one (strict by default, which is
# the point), else python3 with the same flags set by hand.
PYC=python3
for p in python3.13 "$HOME"/.pyenv/versions/3.13*/bin/python3.13; do
	if "$p" -c 'import ssl' >/dev/null 2>&1; then PYC=$p; break; fi
done
echo "client: $($PYC -c 'import ssl,sys; print("Python", sys.version.split()[0], ssl.OPENSSL_VERSION)')"

check "kbox ca init creates the CA" "$KBOX" ca init
CA="$KBOX_CA_DIR/ca.pem"
check "ca.key is mode 0600, ca.pem 0644, directory 0700" sh -c \
	"[ \$(stat -c %a '$KBOX_CA_DIR/ca.key') = 600 ] && [ \$(stat -c %a '$CA') = 644 ] &&
	 [ \$(stat -c %a '$KBOX_CA_DIR') = 700 ]"
check "openssl reads ca.key as a valid P-256 key" openssl ec -in "$KBOX_CA_DIR/ca.key" -noout -check
check "the CA certificate verifies against itself (x509_strict)" \
	openssl verify -x509_strict -check_ss_sig -CAfile "$CA" "$CA"
check "kbox ca show prints the same certificate" sh -c "'$KBOX' ca show | cmp - '$CA'"

NAMES="example.com api.github.com registry.npmjs.org a-b.c_d.example.test"
LONG=$(python3 -c "print('.'.join(['l' * 60] * 4))")
i=0
for name in $NAMES 127.0.0.1 ::1 "$LONG"; do
	i=$((i + 1))
	"$KBOX" ca mint --key "$T/leaf$i.key" "$name" >"$T/chain$i.pem" || { fail "mint $name"; continue; }
	openssl x509 -in "$T/chain$i.pem" -out "$T/leaf$i.pem"
	case $name in
	*:* | [0-9]*.[0-9]*) hostarg="-verify_ip $name" ;;
	*) hostarg="-verify_hostname $name" ;;
	esac
	check "openssl verify -x509_strict -purpose sslserver: $(printf %.40s "$name")" \
		openssl verify -x509_strict -purpose sslserver $hostarg -CAfile "$CA" "$T/leaf$i.pem"
done
refuse "openssl verify rejects example.com's leaf for other.example" "hostname mismatch" \
	openssl verify -x509_strict -purpose sslserver -verify_hostname other.example \
	-CAfile "$CA" "$T/leaf1.pem"
openssl ecparam -name prime256v1 -genkey -noout -out "$T/other.key" 2>/dev/null
openssl req -x509 -new -key "$T/other.key" -subj "/CN=other CA" -days 2 -out "$T/other.pem" 2>/dev/null
refuse "openssl verify rejects our leaf under another CA" "unable to get local issuer" \
	openssl verify -x509_strict -purpose sslserver -CAfile "$T/other.pem" "$T/leaf1.pem"

# Python: a strict client against a server presenting [leaf, CA].
cat >"$T/client.py" <<'PY'
import socket, ssl, sys
port, name, ca = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
ctx.verify_flags |= ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN
with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
    with ctx.wrap_socket(s, server_hostname=name) as t:
        t.sendall(b"ping")
        assert t.recv(4) == b"pong", "no reply"
        print(t.version(), t.cipher()[0])
PY
cat >"$T/server.py" <<'PY'
import socket, ssl, sys, threading
# argv: portfile, then triples NAME chain.pem key.pem; SNI picks the
# triple; without SNI (clients send none for an IP address), 127.0.0.1.
ctxs = {}
pairs = sys.argv[2:]
for i in range(0, len(pairs), 3):
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    c.load_cert_chain(pairs[i + 1], pairs[i + 2])
    ctxs[pairs[i]] = c
default = next(iter(ctxs.values()))
def pick(sock, name, _):
    name = name or "127.0.0.1"
    if name in ctxs:
        sock.context = ctxs[name]
default.sni_callback = pick
ls = socket.create_server(("127.0.0.1", 0))
ls.settimeout(60)
open(sys.argv[1], "w").write(str(ls.getsockname()[1]))
def serve(c):
    try:
        with default.wrap_socket(c, server_side=True) as t:
            t.settimeout(10)
            if t.recv(4) == b"ping":
                t.sendall(b"pong")
    except (ssl.SSLError, OSError):
        pass
while True:
    try:
        c, _ = ls.accept()
    except (socket.timeout, OSError):
        break
    c.settimeout(10)
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
args=
i=0
for name in $NAMES 127.0.0.1 ::1 "$LONG"; do
	i=$((i + 1))
	args="$args $name $T/chain$i.pem $T/leaf$i.key"
done
python3 "$T/server.py" "$T/port" $args &
SERVER_PID=$!
for _ in $(seq 50); do [ -s "$T/port" ] && break; sleep 0.1; done
PORT=$(cat "$T/port" 2>/dev/null)
if [ -z "$PORT" ]; then
	fail "python TLS server did not start"
else
	for name in $NAMES 127.0.0.1 "$LONG"; do
		check "python ssl (VERIFY_X509_STRICT) handshake with $(printf %.40s "$name")" \
			timeout 20 "$PYC" "$T/client.py" "$PORT" "$name" "$CA"
	done
	if ! command -v node >/dev/null; then
		echo "SKIP node tls.connect: node is not installed"
	else
		check "node tls.connect (ca option) with registry.npmjs.org" timeout 20 node -e '
			const tls = require("tls"), fs = require("fs");
			const s = tls.connect({host: "127.0.0.1", port: +process.argv[1],
				servername: "registry.npmjs.org", ca: fs.readFileSync(process.argv[2])},
				() => s.write("ping"));
			s.on("data", d => { if (d.toString() !== "pong") process.exit(1); s.end(); });
			s.on("error", e => { console.error(e.message); process.exit(1); });
		' "$PORT" "$CA"
	fi
	refuse "python ssl rejects example.com's leaf for other.example" "Hostname mismatch" \
		timeout 20 "$PYC" "$T/client.py" "$PORT" other.example "$CA"
	refuse "python ssl rejects our leaves when trusting another CA" "CERTIFICATE_VERIFY_FAILED" \
		timeout 20 "$PYC" "$T/client.py" "$PORT" example.com "$T/other.pem"
fi
kill "$SERVER_PID" 2>/dev/null
wait "$SERVER_PID" 2>/dev/null
SERVER_PID=

# openssl s_server presenting the chain, TLS 1.2 as kbox's interception does.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
openssl s_server -quiet -tls1_2 -accept "127.0.0.1:$PORT" -cert "$T/leaf2.pem" \
	-cert_chain "$T/chain2.pem" -key "$T/leaf2.key" -www >/dev/null 2>&1 &
SERVER_PID=$!
for _ in $(seq 50); do
	python3 -c "import socket; socket.create_connection(('127.0.0.1',$PORT),1).close()" \
		2>/dev/null && break
	sleep 0.1
done
cat >"$T/client12.py" <<'PY'
import socket, ssl, sys
port, name, ca = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
ctx.verify_flags |= ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN
ctx.maximum_version = ssl.TLSVersion.TLSv1_2
with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
    with ctx.wrap_socket(s, server_hostname=name) as t:
        print(t.version(), t.cipher()[0])
PY
check "python ssl (strict) TLS 1.2 handshake with openssl s_server, SNI api.github.com" \
	timeout 20 "$PYC" "$T/client12.py" "$PORT" api.github.com "$CA"
if ! command -v curl >/dev/null; then
	echo "SKIP curl --cacert: curl is not installed"
else
	# --resolve: the name goes to 127.0.0.1 without any lookup
	check "curl --cacert (HTTPS GET from openssl s_server) for api.github.com" \
		timeout 20 curl -sS -o /dev/null --cacert "$CA" \
		--resolve "api.github.com:$PORT:127.0.0.1" "https://api.github.com:$PORT/"
fi

# git's HTTPS is libcurl over GnuTLS here: another verifier.  The server
# is no git server, so success is git complaining about the content.
git_remote() { # git_remote CAFILE
	GIT_SSL_CAINFO=$1 GIT_TERMINAL_PROMPT=0 timeout 20 git \
		-c http.curloptResolve="api.github.com:$PORT:127.0.0.1" \
		ls-remote "https://api.github.com:$PORT/x.git"
}
if ! command -v git >/dev/null; then
	echo "SKIP git: git is not installed"
else
	refuse "git (libcurl, GnuTLS) accepts the leaf: TLS done, the server is no git server" \
		"is this a git repository" git_remote "$CA"
	refuse "git (libcurl, GnuTLS) refuses the leaf when trusting another CA" \
		"certificate verification failed" git_remote "$T/other.pem"
fi
kill "$SERVER_PID" 2>/dev/null
wait "$SERVER_PID" 2>/dev/null
SERVER_PID=

# A reload keeps the same CA, and its leaves still verify.
"$KBOX" ca mint --key "$T/again.key" example.com >"$T/again.pem"
check "a second kbox process signs under the same CA" \
	openssl verify -x509_strict -purpose sslserver -CAfile "$CA" "$T/again.pem"

# A CA made by openssl (same file names, SEC1 key) is used as it is.
mkdir -m 700 "$T/ossl"
openssl ecparam -name prime256v1 -genkey -noout -out "$T/ossl/ca.key" 2>/dev/null
chmod 600 "$T/ossl/ca.key"
openssl req -x509 -new -key "$T/ossl/ca.key" -subj "/O=Example/CN=openssl-made CA" -days 30 \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
	-out "$T/ossl/ca.pem" 2>/dev/null
KBOX_CA_DIR="$T/ossl" "$KBOX" ca mint example.net >"$T/ossl-leaf.pem"
check "a CA made by openssl signs leaves that verify under it" \
	openssl verify -x509_strict -purpose sslserver -verify_hostname example.net \
	-CAfile "$T/ossl/ca.pem" "$T/ossl-leaf.pem"

if [ $fails -ne 0 ]; then
	echo "verify-certs: $fails FAILED"
	exit 1
fi
echo "verify-certs: all PASS"
