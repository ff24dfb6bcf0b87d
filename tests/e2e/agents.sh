#!/bin/sh
# End-to-end test of the three agents of the toolchain image
# (images/toolchain/build.sh): Claude Code (`claude -p`), Codex
# (`codex exec`) and OpenCode (`opencode run`), each completing one
# exchange in its one-shot mode, in one boot of a project with a kbox.yaml
# and a secrets.yaml, against a test model server (tests/e2e/model_server.py:
# Anthropic messages, OpenAI Responses and chat completions, TLS with a
# certificate for host.kbox.internal from a test CA given with
# tls.extra_ca) on the host's loopback.  The guest holds only the
# placeholders; the server must receive each real key in its header
# (x-api-key for Claude Code, Authorization for the others), and the real
# keys show nowhere else.
#
# Nothing leaves the machine: the policy is an allowlist of the model
# server alone (every other name is refused before resolving: Claude
# Code's and OpenCode's own fetches are switched off or refused), and as
# root the script also runs in a network namespace of its own
# (unshare -n).  The image: KBOX_TOOLCHAIN_IMAGE (a name in the store or a
# root folder; default "toolchain"); skips when it is not there.
#   tests/e2e/agents.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
# One bound around the whole boot (three agents, each a big binary).
run_timeout=${KBOX_E2E_AGENT_TIMEOUT:-2400}
kbox="$(cd "$(dirname "$kbox")" && pwd)/$(basename "$kbox")"

e2e_toolchain_image
for t in openssl python3; do
	command -v "$t" >/dev/null 2>&1 || e2e_skip "$t is missing"
done
e2e_need_kvm "the boot"
e2e_own_netns "$@"

e2e_tmp

key() { echo "sk-$1-real-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"; }
k_ant=$(key ant)
k_oai=$(key oai)
k_oc=$(key oc)

e2e_model_server
proj="$tmp/proj"
mkdir -p "$proj"
e2e_agent_secrets "$proj"
printf 'ANTHROPIC_API_KEY=%s\nOPENAI_API_KEY=%s\nOPENCODE_API_KEY=%s\n' "$k_ant" "$k_oai" "$k_oc" >"$proj/secrets.env"
chmod 600 "$proj/secrets.env"
# The project (with opencode.json and codex-home/config.toml from
# lib.sh), trusted once its secrets files are there.
e2e_agent_project "$proj" <<EOF
image: $image
cpus: 2
memory: 3G
env:
  # Claude Code: the model server, and none of its own traffic.
  ANTHROPIC_BASE_URL: "https://host.kbox.internal:$port"
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"
  DISABLE_AUTOUPDATER: "1"
  # OpenCode: no fetches of models.dev, updates or default plugins.
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
# HOME in the RAM layer: an image imported by root keeps /root 0700 on
# the host, which the kbox of an ordinary user cannot enter.
export HOME=/tmp/home CODEX_HOME=/tmp/home/.codex
mkdir -p "$CODEX_HOME" && cp /workspace/codex-home/config.toml "$CODEX_HOME/"
echo "env ANTHROPIC_API_KEY=$ANTHROPIC_API_KEY"
echo "env OPENAI_API_KEY=$OPENAI_API_KEY"
echo "env OPENCODE_API_KEY=$OPENCODE_API_KEY"
one() { # one NAME SECONDS COMMAND...: its report in /tmp/NAME.report
	n=$1 lim=$2; shift 2
	s=$(date +%s)
	timeout "$lim" "$@" </dev/null >/tmp/$n.out 2>/tmp/$n.err
	{
		echo "$n-rc $? $(($(date +%s) - s))s"
		sed "s/^/$n-out /" /tmp/$n.out | head -20
		{ head -5 /tmp/$n.err; echo ...; tail -10 /tmp/$n.err; } | sed "s/^/$n-err /"
	} >/tmp/$n.report
}
# OpenCode's 185 MB binary is the slowest to start under emulation (about
# as long as the other two together): it runs beside Claude Code and then
# Codex, which the guest's two CPUs allow.  Its exchange took 461-486 s in
# L1 beside the podman suite, and once more than 600 s (a busier run): its
# bound is twice the usual.
one opencode 1000 opencode run --model kboxtest/kbox-test "say hi" &
one claude 300 claude -p "say hi"
# Codex's native binary itself: the npm package's `codex` is a node
# wrapper around it, and Debian's node 18 died in its garbage collector
# (SIGTRAP) after a completed exchange once, under nested emulation.
cx=$(ls /usr/local/lib/node_modules/@openai/codex/node_modules/@openai/codex-linux-x64/vendor/*/bin/codex 2>/dev/null | head -1)
one codex 300 "${cx:-codex}" exec --skip-git-repo-check "say hi"
wait
cat /tmp/claude.report /tmp/codex.report /tmp/opencode.report
EOF

start=$(date +%s)
(cd "$proj" && timeout "$run_timeout" "$kbox" run -- /bin/sh /workspace/checks.sh) >"$tmp/out" 2>"$tmp/run.err"
rc=$?
secs=$(($(date +%s) - start))
[ "$rc" = 0 ] && ok "boot of the toolchain image with the three agents (${secs}s)" ||
	not_ok "boot (rc $rc after ${secs}s)" "$(tail -5 "$tmp/run.err"; tail -5 "$tmp/out")"
for v in ANTHROPIC_API_KEY OPENAI_API_KEY OPENCODE_API_KEY; do
	grep -qx "env $v=\\\$KBOX_$v" "$tmp/out" && ok "the guest's $v is the placeholder" ||
		not_ok "placeholder $v" "$(grep "^env $v" "$tmp/out" | sed 's/=sk-.*/=<a real key>/')"
done

# agent NAME PATH HEADER KEY: NAME answered with the model's text, and its
# requests to PATH carried KEY in HEADER (a field of the server's log).
agent() {
	t=$(sed -n "s/^$1-rc 0 \\(.*\\)/\\1/p" "$tmp/out")
	if [ -n "$t" ] && grep -q "^$1-out.*Hi from the kbox test model" "$tmp/out"; then
		ok "$1 completes an exchange with the test model ($t)"
	else
		not_ok "$1's exchange" "$(grep "^$1-" "$tmp/out" | tail -30)"
	fi
	if grep -F "$2" "$tmp/model.log" 2>/dev/null | grep -qF "\"$3\": \"$4\""; then
		ok "the model server received $1's real key in $3"
	else
		not_ok "$1's real key upstream" "$(sed "s/$k_ant/ANT/g; s/$k_oai/OAI/g; s/$k_oc/OC/g" "$tmp/model.log" 2>/dev/null | tail -8)"
	fi
}
agent claude "/v1/messages" x-api-key "$k_ant"
agent codex "POST /v1/responses" authorization "Bearer $k_oai"
agent opencode "/chat/completions" authorization "Bearer $k_oc"

if grep -qF 'KBOX_' "$tmp/model.log" 2>/dev/null; then
	not_ok "a placeholder reached the model server" "$(grep -F KBOX_ "$tmp/model.log" | head -3)"
else
	ok "no placeholder reached the model server"
fi
if grep -qF -e "$k_ant" -e "$k_oai" -e "$k_oc" "$tmp/out" "$tmp/run.err" "$proj/audit.jsonl" 2>/dev/null; then
	not_ok "a real key shows in the guest's output or kbox's logs"
else
	ok "the real keys are in neither the guest's output nor kbox's logs"
fi
# What else the agents tried (refused by the allowlist): for the record.
denied=$(grep '"decision":"deny"' "$proj/audit.jsonl" 2>/dev/null | sed -n 's/.*"name":"\([^"]*\)".*/\1/p' | sort -u | tr '\n' ' ')
echo "# refused destinations: ${denied:-none}"
echo "# requests at the model server: $(cut -d, -f1 "$tmp/model.log" 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
e2e_finish
