#!/bin/sh
# End-to-end test of the agent: OpenCode from the toolchain image
# (images/toolchain/build.sh) in a project with a kbox.yaml.  One boot:
# the image's tools run (node, git, python3, opencode --version), the
# guest's OPENCODE_API_KEY is the placeholder, and a one-shot
# `opencode run "say hi"` talks to a test model server
# (tests/e2e/model_server.py, OpenAI-compatible, TLS with a certificate for
# host.kbox.internal from a test CA given with tls.extra_ca) on the host's
# loopback, allowed by an allowlist policy; the server must receive the
# real key, the guest never holds it.
#
# Nothing leaves the machine: as root, kbox and the model server run in a
# network namespace made here (unshare -n: only a loopback); the policy allows only
# host.kbox.internal:PORT (every other name is refused before resolving),
# and OpenCode is configured not to fetch models, updates or plugins.
# Skips when the toolchain image is not in the store
# (sudo make toolchain-image).
#   tests/e2e/opencode.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
# OpenCode under PVM is slow: a 185 MB Bun binary, started twice; the
# whole boot took ~740 s here (docs/agent.md).
run_timeout=${KBOX_E2E_AGENT_TIMEOUT:-2400}

# The sandbox is started from the project folder.
kbox="$(cd "$(dirname "$kbox")" && pwd)/$(basename "$kbox")"
e2e_toolchain_image
for t in openssl python3; do
	command -v "$t" >/dev/null 2>&1 || e2e_skip "$t is missing"
done
e2e_need_kvm "the boot"
e2e_own_netns "$@"

e2e_tmp
tui=
hold=
# shellcheck disable=SC2317 # called by lib.sh on exit
e2e_on_exit() {
	[ -n "$tui" ] && kill "$tui" 2>/dev/null && wait "$tui" 2>/dev/null
	[ -n "$hold" ] && kill "$hold" 2>/dev/null
}

real="sk-real-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"

# --- the model server: TLS for host.kbox.internal from a test CA ---
e2e_model_server

# --- the project ---
proj="$tmp/proj"
mkdir -p "$proj"
e2e_agent_secrets "$proj" OPENCODE_API_KEY
echo "OPENCODE_API_KEY=$real" >"$proj/secrets.env"
# The project's kbox.yaml, trusted once its secrets files are there;
# OpenCode's opencode.json (an OpenAI-compatible provider at the test
# server, its key from the placeholder variable) comes from lib.sh.
e2e_agent_project "$proj" <<EOF
image: $image
cpus: 2
memory: 2G
env:
  # No fetches of models.dev, updates or default plugins: the test
  # network has only the model server.
  OPENCODE_DISABLE_AUTOUPDATE: "1"
  OPENCODE_DISABLE_MODELS_FETCH: "1"
  OPENCODE_DISABLE_DEFAULT_PLUGINS: "1"
  OPENCODE_DISABLE_LSP_DOWNLOAD: "1"
network:
  policy: allowlist
  allow: ["host.kbox.internal:$port"]
  audit_log: audit.jsonl
tls:
  intercept: secrets
  extra_ca: model-ca.pem
secrets: secrets.yaml
EOF
cat >"$proj/checks.sh" <<'EOF'
echo "env OPENCODE_API_KEY=$OPENCODE_API_KEY"
echo "node $(node --version 2>&1)"
echo "$(git --version 2>&1)"
echo "$(python3 --version 2>&1)"
echo "opencode-version $(opencode --version 2>&1 | head -1)"
echo "run-start"
opencode run --model kboxtest/kbox-test "say hi" </dev/null >/tmp/run.out 2>/tmp/run.err
echo "run-rc $?"
sed 's/^/run-out /' /tmp/run.out | head -40
tail -20 /tmp/run.err | sed 's/^/run-err /'
EOF

# A slow first start of OpenCode must not be mistaken for a hang: one
# generous bound around the whole boot.
start=$(date +%s)
(cd "$proj" && timeout "$run_timeout" "$kbox" run -- /bin/sh /workspace/checks.sh) >"$tmp/out" 2>"$tmp/run.err"
rc=$?
secs=$(($(date +%s) - start))
out=$(cat "$tmp/out")

[ "$rc" = 0 ] && ok "boot of the toolchain image with the project's kbox.yaml (${secs}s)" ||
	not_ok "boot (rc $rc after ${secs}s)" "$(tail -5 "$tmp/run.err"; tail -5 "$tmp/out")"
printf '%s\n' "$out" | grep -q '^node v[0-9]' && printf '%s\n' "$out" | grep -q '^git version' &&
	printf '%s\n' "$out" | grep -q '^Python 3' && ok "node, git and python3 run in the image" ||
	not_ok "image tools" "$out"
v=$(printf '%s\n' "$out" | sed -n 's/^opencode-version //p')
printf '%s\n' "$v" | grep -Eq '^[0-9]+\.[0-9]+' && ok "opencode --version runs in the sandbox ($v)" ||
	not_ok "opencode --version" "$v"
printf '%s\n' "$out" | grep -qx 'env OPENCODE_API_KEY=\$KBOX_OPENCODE_API_KEY' &&
	ok "the guest's OPENCODE_API_KEY is the placeholder" || not_ok "placeholder" "$(printf '%s\n' "$out" | grep '^env')"
if printf '%s\n' "$out" | grep -qx 'run-rc 0' && printf '%s\n' "$out" | grep -q '^run-out.*Hi from the kbox test model'; then
	ok "opencode run \"say hi\" completes with the test model's answer"
else
	not_ok "opencode run" "$(printf '%s\n' "$out" | grep '^run-' | tail -30)"
fi
if grep -q '/chat/completions' "$tmp/model.log" 2>/dev/null &&
	grep '/chat/completions' "$tmp/model.log" | grep -qF "\"Bearer $real\""; then
	ok "the model server received the real key"
else
	not_ok "real key upstream" "$(cat "$tmp/model.log" 2>/dev/null | sed "s/$real/REAL/g" | tail -5)"
fi
if grep -qF 'KBOX_OPENCODE_API_KEY' "$tmp/model.log" 2>/dev/null; then
	not_ok "the placeholder reached the model server"
else
	ok "no placeholder reached the model server"
fi
if grep -qF "$real" "$tmp/out" "$tmp/run.err" "$proj/audit.jsonl" 2>/dev/null; then
	not_ok "the real key shows in the guest's output or kbox's logs"
else
	ok "the real key is in neither the guest's output nor kbox's logs"
fi

# --- the terminal UI (KBOX_E2E_TUI=1: another ~10 minutes here) ---
# `kbox run -t -- opencode` under script(1), which gives kbox a terminal;
# nobody answers OpenCode's terminal queries, so it draws once they time
# out.  Passes when its prompt and the workspace show on the screen.
if [ "${KBOX_E2E_TUI:-0}" = 1 ] && command -v script >/dev/null 2>&1; then
	tui_timeout=${KBOX_E2E_TUI_TIMEOUT:-1200}
	mkfifo "$tmp/tty-in"
	sleep "$tui_timeout" >"$tmp/tty-in" &
	hold=$!
	start=$(date +%s)
	(cd "$proj" && TERM=xterm-256color exec timeout "$tui_timeout" script -qfc "$kbox run -t -- opencode" \
		"$tmp/tui.log" <"$tmp/tty-in" >/dev/null 2>&1) &
	tui=$!
	tui_screen() { sed 's/\x1b\[[0-9;?<>=]*[a-zA-Z]//g' "$tmp/tui.log" 2>/dev/null | tr -s ' '; }
	while kill -0 "$tui" 2>/dev/null && ! tui_screen | grep -q 'Ask anything'; do sleep 5; done
	secs=$(($(date +%s) - start))
	# SIGTERM to timeout goes on to script, and kbox stops with its pty.
	kill "$tui" 2>/dev/null
	wait "$tui" 2>/dev/null
	kill "$hold" 2>/dev/null
	if tui_screen | grep -q 'Ask anything' && tui_screen | grep -q '/workspace'; then
		ok "kbox run -t -- opencode draws OpenCode's prompt in /workspace (${secs}s)"
	else
		not_ok "the terminal UI (${secs}s)" "$(tui_screen | tail -c 600)"
	fi
fi

e2e_finish
