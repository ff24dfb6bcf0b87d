#!/bin/sh
# bench/agent: how long an agent takes to reach its model, in kbox and on
# the host.  For each agent of the toolchain image (images/toolchain/build.sh:
# Claude Code, Codex, OpenCode), the time from the start of `kbox run` to
# the first request the test model server (tests/e2e/model_server.py)
# receives from it, beside the same agent, from the same root folder,
# started directly on the host (chroot into the image's folder); then the
# ratio kbox / host.  The time to the agent's exit is shown too.
#
#   bench/agent/run.sh [ITERATIONS [BUILD_DIR]]    (default 1 and build)
#
# Needs root (the host's side chroots into the image's folder, with /tmp,
# /root, /proc and /dev mounted in a mount namespace of its own, so the
# image's folder is never written) and the toolchain image
# (KBOX_TOOLCHAIN_IMAGE, a store name or a folder; default toolchain).
# Everything runs in a network namespace of its own with only a loopback:
# the model server listens on its 127.0.0.1, reached as host.kbox.internal
# from both sides (kbox: an allowlist of that one destination, the server's
# test CA through tls.extra_ca and the real keys through secrets.yaml; the
# host: an /etc/hosts line and the test CA in the agents' CA variables).
#
# Environment: AGENTS (default "claude codex opencode"; commas work too), EMULATED=WHAT
# (this machine is itself emulated, e.g. tcg on the hardware-KVM lane; the
# output says so), KBOX_RUN_ARGS (extra `kbox run` options), OUT (the raw
# figures, default BUILD/bench/agent), LIMIT (s per run; default 600 times
# KBOX_TIMEOUT_MULT).
set -eu
cd "$(dirname "$0")/../.."
iters=${1:-1}
build=${2:-build}
set -- "$build"
e2e_dir=tests/e2e
# shellcheck source=tests/e2e/lib.sh
. tests/e2e/lib.sh
set +e
kbox="$(cd "$(dirname "$kbox")" && pwd)/$(basename "$kbox")"
agents=$(echo "${AGENTS:-claude codex opencode}" | tr , " ")
limit=${LIMIT:-$((600 * ${KBOX_TIMEOUT_MULT:-1}))}
out=${OUT:-$build/bench/agent}

[ "$(id -u)" = 0 ] || { echo "bench/agent: needs root (the host's side runs the agents in a chroot)" >&2; exit 2; }
for t in openssl python3 unshare chroot; do
	command -v "$t" >/dev/null 2>&1 || { echo "bench/agent: $t is missing" >&2; exit 2; }
done
e2e_toolchain_image
root=$image
case $root in */*) ;; *) root=$("$kbox" image path "$image") ;; esac
e2e_need_kvm "the benchmark"
e2e_own_netns "$iters" "$build"

e2e_tmp
mkdir -p "$out"

e2e_model_server
proj="$tmp/proj"
mkdir -p "$proj"
e2e_agent_secrets "$proj"
keys="ANTHROPIC_API_KEY=sk-ant-bench OPENAI_API_KEY=sk-oai-bench OPENCODE_API_KEY=sk-oc-bench"
# shellcheck disable=SC2086
printf '%s\n' $keys >"$proj/secrets.env"
chmod 600 "$proj/secrets.env"
# The agents' own switches, the same on both sides.
agent_env="ANTHROPIC_BASE_URL=https://host.kbox.internal:$port CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
DISABLE_AUTOUPDATER=1 OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1
OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1"
{
	echo "image: $image"
	echo "cpus: 2"
	echo "memory: 3G"
	echo "env:"
	for kv in $agent_env; do echo "  ${kv%%=*}: \"${kv#*=}\""; done
	cat <<EOF
network:
  policy: allowlist
  allow: ["host.kbox.internal:$port"]
tls:
  intercept: secrets
  extra_ca: model-ca.pem
secrets: secrets.yaml
EOF
} >"$tmp/kbox.yaml"
e2e_agent_project "$proj" <"$tmp/kbox.yaml"

# The command each agent runs (the same on both sides), from /workspace.
cmd_of() {
	case $1 in
	claude) echo 'claude -p "say hi"' ;;
	# Codex's native binary, as tests/e2e/agents.sh runs it.
	codex) echo 'mkdir -p /root/.codex && cp /workspace/codex-home/config.toml /root/.codex/ &&
		exec $(ls /usr/local/lib/node_modules/@openai/codex/node_modules/@openai/codex-linux-x64/vendor/*/bin/codex | head -1) exec --skip-git-repo-check "say hi"' ;;
	opencode) echo 'opencode run --model kboxtest/kbox-test "say hi"' ;;
	esac
}

# The host's side: the image's folder as the root, a private /tmp and
# /root, the project at /workspace, host.kbox.internal at 127.0.0.1 and the
# test CA added to what the agents trust.
cat "$root/etc/ssl/certs/ca-certificates.crt" "$tmp/upca.pem" >"$tmp/bundle.pem"
printf '127.0.0.1\tlocalhost\n127.0.0.1\thost.kbox.internal\n' >"$tmp/hosts"
cat >"$tmp/host-run.sh" <<'EOF'
set -e
r=$1 t=$2 p=$3
shift 3
mount -t tmpfs tmpfs "$r/tmp"
mount -t tmpfs tmpfs "$r/root"
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount --bind "$p" "$r/workspace"
mount --bind "$t/hosts" "$r/etc/hosts"
cp "$t/bundle.pem" "$t/upca.pem" "$r/tmp/"
exec chroot "$r" /bin/sh -c 'cd /workspace && exec "$@"' sh "$@"
EOF

# first_req LOG T0: ms from T0 (ns) to the first request in LOG ("-" if none).
first_req() {
	python3 - "$1" "$2" <<'PY'
import json, sys
try:
    t = min(json.loads(l)["t"] for l in open(sys.argv[1]) if l.strip())
    print("%.0f" % ((t - int(sys.argv[2]) / 1e9) * 1000))
except (OSError, ValueError, KeyError):
    print("-")
PY
}

# one SIDE AGENT I: one run, its first request and exit in ms to $out.
one() {
	_c=$(cmd_of "$2")
	mv -f "$tmp/model.log" "$tmp/model.log.old" 2>/dev/null
	_t0=$(date +%s%N)
	if [ "$1" = kbox ]; then
		# shellcheck disable=SC2086
		(cd "$proj" && timeout "$limit" "$kbox" run ${KBOX_RUN_ARGS:-} -- sh -c "$_c") </dev/null \
			>"$tmp/$1-$2.out" 2>"$tmp/$1-$2.err"
	else
		# shellcheck disable=SC2086
		timeout "$limit" unshare -m --propagation private sh "$tmp/host-run.sh" "$root" "$tmp" "$proj" \
			env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
			LANG=C.UTF-8 TERM=dumb $agent_env $keys SSL_CERT_FILE=/tmp/bundle.pem \
			CODEX_CA_CERTIFICATE=/tmp/bundle.pem NODE_EXTRA_CA_CERTS=/tmp/upca.pem sh -c "$_c" \
			</dev/null >"$tmp/$1-$2.out" 2>"$tmp/$1-$2.err"
	fi
	_rc=$?
	_t1=$(date +%s%N)
	_first=$(first_req "$tmp/model.log" "$_t0")
	_exit=$(((_t1 - _t0) / 1000000))
	_ok=ok
	grep -q 'Hi from the kbox test model' "$tmp/$1-$2.out" || _ok="no answer (exit $_rc)"
	echo "$1 $2 $3 first=$_first exit=$_exit $_ok" | tee -a "$out/runs.txt"
	if [ "$_ok" != ok ]; then
		# A run without the model's answer counts in neither median.
		tail -5 "$tmp/$1-$2.err" | sed 's/^/#   /'
		tail -3 "$tmp/$1-$2.out" | sed 's/^/#   /'
		_first=- _exit=-
	fi
	echo "$_first" >>"$tmp/first-$1-$2"
	echo "$_exit" >>"$tmp/exit-$1-$2"
}

med() { grep -v '^-$' "$1" 2>/dev/null | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f\n", a / b; else print "-" }'; }

: >"$out/runs.txt"
: >"$out/table.md"
echo "# bench/agent: $(date -u +%Y-%m-%dT%H:%MZ), $iters iteration(s), image $image, kbox $("$kbox" --version 2>&1 | head -1)"
[ -n "${EMULATED:-}" ] && echo "# this machine is emulated ($EMULATED): only the ratios mean something"
grep -qw hypervisor /proc/cpuinfo && echo "# a hypervisor CPU flag: the host is itself a VM"
# One agent at a time, its row as soon as it is measured (a run stopped
# by an outer bound keeps the rows before it).
echo "| agent | host: first request (ms) | kbox: first request (ms) | kbox/host | host: exit (ms) | kbox: exit (ms) | kbox/host |"
echo "|---|---|---|---|---|---|---|"
for a in $agents; do
	i=1
	while [ "$i" -le "$iters" ]; do
		one host "$a" "$i" | sed 's/^/# /'
		one kbox "$a" "$i" | sed 's/^/# /'
		i=$((i + 1))
	done
	hf=$(med "$tmp/first-host-$a") kf=$(med "$tmp/first-kbox-$a")
	he=$(med "$tmp/exit-host-$a") ke=$(med "$tmp/exit-kbox-$a")
	echo "| $a | $hf | $kf | $(ratio "$kf" "$hf") | $he | $ke | $(ratio "$ke" "$he") |" | tee -a "$out/table.md"
done
# A summary for the hardware-KVM lane's suite runner: a run that got the
# model's answer passes.
echo "bench-agent: $(grep -c ' ok$' "$out/runs.txt") passed, $(grep -vc ' ok$' "$out/runs.txt") failed"
