# Shared by the end-to-end scripts of tests/e2e (POSIX sh).  A script
# sources it from its own folder, with its BUILD_DIR argument still in $1:
#   . "$(dirname "$0")/lib.sh"
# It sets build, kbox ($build/kbox; the script ends with exit 1 when it is
# missing), pass, fail and boot_timeout, and defines the checks below.
# Not a test itself: nothing runs it directly.
#
# Its functions keep their scratch variables under the _e2e_ prefix, so a
# script's own variables (a sandbox's name, an exit code) survive them;
# host_check alone sets `name`, as it always has.

build=${1:-build}
kbox="$build/kbox"
pass=0
fail=0
# A PVM boot takes up to ~2 minutes; anything beyond this is a hang.
boot_timeout=${KBOX_E2E_TIMEOUT:-600}

if [ ! -x "$kbox" ]; then
	echo "e2e: $kbox is missing; run make first" >&2
	exit 1
fi

# ok NAME / not_ok NAME [DETAIL]: one line per check; DETAIL's lines are
# shown indented under a failure.
ok() { pass=$((pass + 1)); echo "ok - $1"; }
not_ok() { fail=$((fail + 1)); echo "not ok - $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/#   /'; }
# host_check NAME COMMAND...: ok if COMMAND succeeds.
host_check() { name=$1; shift; if "$@"; then ok "$name"; else not_ok "$name"; fi; }

# e2e_tmp: a scratch folder in $tmp and an empty srv_pid, for a server the
# script starts in the background.  On exit the server is killed, the
# script's own e2e_on_exit is run when it defines one (more to stop) and
# $tmp is removed; INT, TERM and HUP exit 130 through the same path.  (A
# script that needs another order sets its own EXIT trap afterwards, which
# replaces this one.)
e2e_tmp() {
	tmp=$(mktemp -d)
	srv_pid=
	trap _e2e_cleanup EXIT
	trap 'exit 130' INT TERM HUP
}
_e2e_cleanup() {
	[ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null
	command -v e2e_on_exit >/dev/null 2>&1 && e2e_on_exit
	rm -rf "$tmp"
}

# e2e_finish: the summary line, then exit 0 if nothing failed, 1 if
# something did.
e2e_finish() {
	echo "$pass passed, $fail failed"
	[ "$fail" -eq 0 ]
	exit
}

# e2e_skip WHY: the whole script is skipped, before any check: say why and
# exit 0.
e2e_skip() {
	echo "skip - $1"
	echo "0 passed, 0 failed"
	exit 0
}

# e2e_need_kvm WHAT: without a usable /dev/kvm, say that WHAT ("the boot",
# "the boots") was skipped and finish with the checks done so far.
e2e_need_kvm() {
	if [ ! -c /dev/kvm ] || ! [ -r /dev/kvm ]; then
		echo "# skipped $1: /dev/kvm is not usable here"
		e2e_finish
	fi
}

# e2e_refuse NAME PATTERN ARGS...: `kbox run ARGS -- true` must exit 125,
# before any boot, with PATTERN (grep) in its message.  Uses $tmp/err.
e2e_refuse() {
	_e2e_name=$1 _e2e_pat=$2
	shift 2
	"$kbox" run "$@" -- true > /dev/null 2> "$tmp/err"
	_e2e_rc=$?
	if [ "$_e2e_rc" -eq 125 ] && grep -q -- "$_e2e_pat" "$tmp/err"; then
		ok "refused: $_e2e_name"
	else
		not_ok "refused: $_e2e_name (exit $_e2e_rc)" "$(head -3 "$tmp/err")"
	fi
}

# e2e_ran_to_end WHAT RC OUT ERR: a not_ok, with the tails of ERR and OUT,
# unless the guest script WHAT exited 0 (RC) and printed "done" to OUT.
e2e_ran_to_end() {
	if [ "$2" -ne 0 ] || ! grep -q '^done$' "$3"; then
		not_ok "$1 ran to the end (exit $2)" "$(tail -5 "$4"; tail -5 "$3")"
	fi
}

# e2e_guest_results PREFIX FILE: one ok or not_ok, named PREFIX NAME, per
# "ok NAME" or "not ok NAME" line a guest script wrote to FILE.
e2e_guest_results() {
	while IFS= read -r _e2e_line; do
		case $_e2e_line in
		"ok "*) ok "$1${_e2e_line#ok }" ;;
		"not ok "*) not_ok "$1${_e2e_line#not ok }" ;;
		esac
	done < "$2"
}

# e2e_wait_file FILE: wait up to 5 s for a server to write FILE (its port).
e2e_wait_file() {
	_e2e_i=0
	while [ ! -s "$1" ] && [ $_e2e_i -lt 50 ]; do sleep 0.1; _e2e_i=$((_e2e_i + 1)); done
}

# e2e_pvm: true on a PVM host, where the guest kernel runs emulated
# (docs/pvm.md).
e2e_pvm() { [ -e /sys/module/kvm_pvm ]; }

# e2e_mb VAR PVM_MB MB: the size in MiB of a suite's heavy transfer: $VAR
# when it is set, PVM_MB on PVM hosts (their guest kernel runs emulated,
# docs/pvm.md), else MB.
e2e_mb() {
	eval "_e2e_mb=\${$1:-}"
	if [ -n "$_e2e_mb" ]; then echo "$_e2e_mb"
	elif e2e_pvm; then echo "$2"; else echo "$3"; fi
}

# e2e_templates DIR: how many template files (t-*.snap) DIR holds.
e2e_templates() { find "$1" -maxdepth 1 -name 't-*.snap' 2>/dev/null | wc -l; }

# e2e_free_port: print a TCP port on 127.0.0.1 that was free a moment ago.
e2e_free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# e2e_test_ca CA_NAME: a test CA (CN=CA_NAME) in $tmp/upca.pem and .key,
# and a server certificate for host.kbox.internal from it in $tmp/srv.pem
# and $tmp/srv.key, for a TLS server on the host's loopback.
e2e_test_ca() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=$1" \
		-keyout "$tmp/upca.key" -out "$tmp/upca.pem" -addext basicConstraints=critical,CA:TRUE \
		-addext keyUsage=critical,keyCertSign >/dev/null 2>&1
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=host.kbox.internal" \
		-keyout "$tmp/srv.key" -out "$tmp/srv.csr" >/dev/null 2>&1
	printf 'subjectAltName=DNS:host.kbox.internal\nextendedKeyUsage=serverAuth\n' >"$tmp/ext"
	openssl x509 -req -in "$tmp/srv.csr" -CA "$tmp/upca.pem" -CAkey "$tmp/upca.key" -CAcreateserial -days 1 \
		-extfile "$tmp/ext" -out "$tmp/srv.pem" >/dev/null 2>&1
}

# The toolchain image's suites (workflow.sh, agents.sh, opencode.sh) and
# bench/agent share what follows.
#
# e2e_toolchain_image: sets image to KBOX_TOOLCHAIN_IMAGE (a name in the
# store or a root folder; default "toolchain"), or skips the whole script
# when it is not there (sudo make toolchain-image builds it).
e2e_toolchain_image() {
	image=${KBOX_TOOLCHAIN_IMAGE:-${KBOX_AGENT_IMAGE:-toolchain}}
	case $image in
	*/*) [ -d "$image/usr/bin" ] || e2e_skip "the image folder $image is not there" ;;
	*) "$kbox" image path "$image" >/dev/null 2>&1 ||
		e2e_skip "the $image image is not in the store; build it with: sudo make toolchain-image" ;;
	esac
}

# e2e_own_netns "$@": as root, run this script again (with its arguments)
# in a network namespace of its own, which has only a loopback, and bring
# that up; an ordinary user stays where it is (the tests' allowlists then
# keep everything on the loopback).
e2e_own_netns() {
	if [ "$(id -u)" = 0 ] && [ "${KBOX_E2E_IN_NETNS:-}" != 1 ] && command -v unshare >/dev/null 2>&1; then
		KBOX_E2E_IN_NETNS=1 exec unshare -n -- "$0" "$@"
	fi
	if [ "${KBOX_E2E_IN_NETNS:-}" = 1 ]; then
		ip link set lo up || { echo "e2e: no lo in the namespace" >&2; exit 1; }
	fi
}

# e2e_model_server: the test model server (tests/e2e/model_server.py) on
# 127.0.0.1:$port, TLS with a certificate for host.kbox.internal from a
# test CA ($tmp/upca.pem, e2e_test_ca), logging each request to
# $tmp/model.log (e2e_dir: the folder of model_server.py, default the
# script's own); sets port and srv_pid (the caller's EXIT trap kills it)
# and KBOX_CA_DIR=$tmp/ca, so kbox's own CA is this run's.
e2e_model_server() {
	export KBOX_CA_DIR="$tmp/ca"
	e2e_test_ca "kbox test model CA"
	port=$(e2e_free_port)
	python3 "${e2e_dir:-$(dirname "$0")}/model_server.py" 127.0.0.1 "$port" "$tmp/srv.pem" "$tmp/srv.key" \
		"$tmp/model.log" "Hi from the kbox test model." 2>"$tmp/server.err" &
	srv_pid=$!
	e2e_wait_port "$port"
}

# e2e_wait_port PORT: wait up to 10 s for a listener on 127.0.0.1:PORT.
e2e_wait_port() {
	python3 - "$1" <<'PY'
import socket, sys, time
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2).close()
        break
    except OSError:
        time.sleep(0.1)
PY
}

# e2e_agent_secrets DIR [KEY...]: DIR/secrets.yaml for the agents' keys
# (default all three: ANTHROPIC_API_KEY OPENAI_API_KEY OPENCODE_API_KEY),
# each allowed to host.kbox.internal only, in the header field its agent
# sends it in (x-api-key for Claude Code, authorization for the others;
# the values come from the environment the real keys are in).
e2e_agent_secrets() {
	_e2e_dir=$1
	shift
	[ $# -gt 0 ] || set -- ANTHROPIC_API_KEY OPENAI_API_KEY OPENCODE_API_KEY
	: >"$_e2e_dir/secrets.yaml"
	for _e2e_k; do
		case $_e2e_k in ANTHROPIC_API_KEY) _e2e_h=x-api-key ;; *) _e2e_h=authorization ;; esac
		# shellcheck disable=SC2016
		printf '%s:\n  value: "${%s}"\n  allow: ["host.kbox.internal"]\n  substitution:\n    header_fields: ["%s"]\n' \
			"$_e2e_k" "$_e2e_k" "$_e2e_h" >>"$_e2e_dir/secrets.yaml"
	done
}

# e2e_agent_project DIR: a project folder for the agents against the model
# server of e2e_model_server: the test CA (model-ca.pem, for tls.extra_ca),
# OpenCode's opencode.json and Codex's codex-home/config.toml naming the
# server as host.kbox.internal:$port, and a kbox.yaml trusted for this run
# (KBOX_TRUST_FILE in $tmp) made of the lines on stdin.
e2e_agent_project() {
	mkdir -p "$1/codex-home"
	cp "$tmp/upca.pem" "$1/model-ca.pem"
	cat >"$1/kbox.yaml"
	cat >"$1/opencode.json" <<EOJ
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "provider": {
    "kboxtest": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "kbox test model",
      "options": {
        "baseURL": "https://host.kbox.internal:$port/v1",
        "apiKey": "{env:OPENCODE_API_KEY}"
      },
      "models": { "kbox-test": { "name": "kbox test" } }
    }
  },
  "model": "kboxtest/kbox-test",
  "small_model": "kboxtest/kbox-test"
}
EOJ
	cat >"$1/codex-home/config.toml" <<EOT
model = "kbox-test"
model_provider = "kboxtest"

[model_providers.kboxtest]
name = "kbox test model"
base_url = "https://host.kbox.internal:$port/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
EOT
	export KBOX_TRUST_FILE="$tmp/trusted"
	(cd "$1" && "$kbox" trust >/dev/null) || echo "# kbox trust failed" >&2
}
