#!/bin/bash
# bench/net/tls.sh: the cost of kbox's TLS interception path (the netstack
# through tests/net/harness on a TAP, --tls-intercept with a secret
# substituted into every request), this tree ("after") against another
# revision ("before", BEFORE=main by default, exported with git archive and
# built the same way), taking turns in one run.  Also "direct": the client
# in the host namespace on 127.0.0.1, the server's ceiling.
#
#   bench/net/tls.sh [BUILD_DIR]        # root and /dev/net/tun; ~3 min
#
# Namespaces made here (tests/net/lib.sh), nothing else touched: the
# "host" one runs a small threaded HTTPS server (python3 ssl, a test CA
# made here, trusted through --tls-extra-ca) on 127.0.0.1:8443 and the
# harnesses; the "guest" one the TAP and curl, trusting only kbox's CA.
#
# Measures, REPS times per contestant (medians):
#   down        curl GET of BULK_MB MiB of base64 text (every byte is one
#               the scrubber must look at twice: the worst case for it),
#               MiB/s, the real value's placeholder substituted on the way
#   keepalive   REQS GETs of 64 bytes on one connection: ms per request
#   connect     CONNS GETs of 64 bytes, a new connection each (two TLS
#               handshakes each through kbox): ms per request
# Environment: BULK_MB (64), REPS (3), REQS (300), CONNS (60), BEFORE (main).
set -u
cd "$(dirname "$0")/../.."
TOP=$(pwd)
BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
BULK_MB=${BULK_MB:-64}
REPS=${REPS:-3}
REQS=${REQS:-300}
CONNS=${CONNS:-60}
BEFORE=${BEFORE:-main}
# shellcheck source=tests/net/lib.sh
. tests/net/lib.sh
nl_require openssl curl python3 git
nl_namespaces kbox-bth kbox-btg kbbt
RAW=$BUILD/bench/tls.txt
mkdir -p "$BUILD/bench"
: >"$RAW"

NET_SAN=0 nl_build_harness "$BUILD/bench/tls-harness-after"
AFTER_BIN=$HARNESS_BIN
mkdir -p "$T/before"
git archive "$BEFORE" | tar -x -C "$T/before" || { bad "git archive $BEFORE"; finish; }
(cd "$T/before" && NET_SAN=0 nl_build_harness "$T/tls-harness-before" >/dev/null) || { bad "build $BEFORE"; finish; }
BEFORE_BIN=$T/tls-harness-before

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench CA" \
	-keyout "$T/ca.key" -out "$T/ca.pem" -addext basicConstraints=critical,CA:TRUE \
	-addext keyUsage=critical,keyCertSign >/dev/null 2>&1 &&
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=host.kbox.internal" \
		-keyout "$T/srv.key" -out "$T/srv.csr" >/dev/null 2>&1 &&
	openssl x509 -req -in "$T/srv.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" -CAcreateserial -days 1 \
		-extfile <(printf 'subjectAltName=DNS:host.kbox.internal,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n') \
		-out "$T/srv.pem" >/dev/null 2>&1 || { bad "certificates"; finish; }
cat >"$T/secrets.yaml" <<'EOF'
TOKEN:
  value: "${TOKEN}"
  allow: ["host.kbox.internal"]
  substitution: {headers: true, header_fields: ["authorization"]}
EOF

cat >"$T/srv.py" <<'EOF'
import base64, http.server, os, ssl, sys
bulk = base64.b64encode(os.urandom(3 << 20)).replace(b"\n", b"")
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def log_message(self, *a):
        pass
    def do_GET(self):
        if self.path.startswith("/bulk/"):
            n = int(self.path[6:])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            while n > 0:
                k = min(n, len(bulk))
                self.wfile.write(bulk[:k])
                n -= k
        else:
            self.send_response(200)
            self.send_header("Content-Length", "64")
            self.end_headers()
            self.wfile.write(b"x" * 63 + b"\n")
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
s = http.server.ThreadingHTTPServer(("127.0.0.1", 8443), H)
s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
EOF
ip netns exec "$HNS" python3 "$T/srv.py" "$T/srv.pem" "$T/srv.key" >/dev/null 2>"$T/srv.err" &
PIDS="$PIDS $!"
for _ in $(seq 50); do H curl -s -o /dev/null --cacert "$T/ca.pem" https://127.0.0.1:8443/x && break; sleep 0.1; done

BYTES=$((BULK_MB * 1048576))
measure() { # measure NAME URLBASE CURL_ARGS...: one rep into $RAW
	local p=$1 base=$2 out t0 t1 urls i
	shift 2
	out=$("$@" -sS -o /dev/null -w '%{size_download} %{speed_download}' -H 'Authorization: Bearer $KBOX_TOKEN' \
		"$base/bulk/$BYTES" 2>>"$T/curl.err")
	read -r sz sp <<<"$out"
	if [ "${sz:-0}" = "$BYTES" ]; then
		echo "$p down $(awk -v s="$sp" 'BEGIN { printf "%.1f", s / 1048576 }')" >>"$RAW"
	else
		echo "# $p: download got ${sz:-nothing} bytes" >&2
	fi
	urls=()
	for i in $(seq "$REQS"); do urls+=("$base/s$i"); done
	t0=$(date +%s%N)
	"$@" -sS -H 'Authorization: Bearer $KBOX_TOKEN' "${urls[@]}" >/dev/null 2>>"$T/curl.err"
	t1=$(date +%s%N)
	echo "$p keepalive $(awk -v d=$((t1 - t0)) -v n="$REQS" 'BEGIN { printf "%.3f", d / n / 1e6 }')" >>"$RAW"
	urls=()
	for i in $(seq "$CONNS"); do urls+=("$base/c$i"); done
	t0=$(date +%s%N)
	"$@" -sS -H 'Connection: close' -H 'Authorization: Bearer $KBOX_TOKEN' "${urls[@]}" >/dev/null 2>>"$T/curl.err"
	t1=$(date +%s%N)
	echo "$p connect $(awk -v d=$((t1 - t0)) -v n="$CONNS" 'BEGIN { printf "%.3f", d / n / 1e6 }')" >>"$RAW"
}

run_kbox() { # run_kbox NAME BIN
	HARNESS_BIN=$2
	NL_LIFETIME=600 TOKEN="real-bench-token-0123456789abcdef" start_harness "$T/$1.out" "$T/$1.err" \
		--audit /dev/null --allow host.kbox.internal:8443 --secret-conf "$T/secrets.yaml" \
		--tls-intercept secrets --tls-extra-ca "$T/ca.pem" --ca-dir "$T/kca"
	for _ in $(seq 50); do
		ip netns exec "$GNS" curl -s -o /dev/null --max-time 1 --cacert "$T/kca/ca.pem" \
			https://host.kbox.internal:8443/x && break
		sleep 0.1
	done
	measure "$1" https://host.kbox.internal:8443 ip netns exec "$GNS" timeout 300 curl --cacert "$T/kca/ca.pem"
	stop_harness
	grep -q "ERROR\|runtime error" "$T/$1.err" && cat "$T/$1.err" >&2
}

echo "# set-up done: before=$BEFORE, after=this tree; $BULK_MB MiB bulk, $REQS keep-alive and $CONNS new-connection requests, $REPS runs"
for r in $(seq "$REPS"); do
	measure direct https://127.0.0.1:8443 H timeout 300 curl --cacert "$T/ca.pem"
	run_kbox before "$BEFORE_BIN"
	run_kbox after "$AFTER_BIN"
	echo "# run $r of $REPS done"
done

median() {
	awk -v p="$1" -v m="$2" '$1 == p && $2 == m { print $3 }' "$RAW" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
}
printf '%-24s%10s%10s%10s%14s\n' metric direct before after after/before
for m in down keepalive connect; do
	case $m in down) l="down (MiB/s)" ;; keepalive) l="keepalive (ms/req)" ;; connect) l="connect (ms/req)" ;; esac
	b=$(median before $m) a=$(median after $m)
	printf '%-24s%10s%10s%10s%14s\n' "$l" "$(median direct $m)" "$b" "$a" \
		"$(awk -v a="$a" -v b="$b" 'BEGIN { if (b == "-" || a == "-" || b == 0) print "-"; else printf "%.2f", a / b }')"
done
[ -s "$T/curl.err" ] && { echo "# curl errors:"; sort "$T/curl.err" | uniq -c | head -5; }
echo "# raw runs: $RAW"
