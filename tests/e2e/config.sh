#!/bin/sh
# End-to-end test of the project-local config: `kbox run` started in a
# folder with a kbox.yaml uses it, shares the folder at /workspace, starts
# there, applies env: (with ${VAR} from secrets.env) and workdir, and the
# guest can neither see nor change kbox.yaml or secrets.env, even through a
# second mount of the folder that says `hidden: []`.  Config mistakes are
# checked without a boot; one boot runs a script in the guest that prints
# "ok NAME" / "not ok NAME", and the host then checks its files.
#   tests/e2e/config.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
# kbox runs from project folders below: by its full path.
kbox=$(cd "$(dirname "$kbox")" && pwd)/kbox
e2e_tmp
unset KBOX_E2E_SECRET KBOX_E2E_UNSET
# Trust records of this run only (vmm/cmd/trust.h), not the user's.
export KBOX_TRUST_FILE="$tmp/trusted"

# --- mistakes, no boot: each names kbox.yaml, line, column and the fix ---
bad="$tmp/bad"
mkdir -p "$bad"
# refuse NAME PATTERN YAML [ARGS...]: kbox run in $bad with that kbox.yaml
# must exit 125 with PATTERN in its message.
refuse() {
	name=$1 pat=$2 yaml=$3
	shift 3
	printf '%s' "$yaml" > "$bad/kbox.yaml"
	(cd "$bad" && "$kbox" run "$@" -- true) > /dev/null 2> "$tmp/err"
	rc=$?
	if [ "$rc" -eq 125 ] && grep -qF -- "$pat" "$tmp/err"; then
		ok "refused: $name"
	else
		not_ok "refused: $name (exit $rc)" "$(head -3 "$tmp/err")"
	fi
}
refuse "unknown key" "kbox.yaml:2:1: unknown key 'netwrok'; did you mean 'network'?" \
	"cpus: 1
netwrok: {}
"
refuse "bad type" "kbox.yaml:1:6: env: got 'x'; expected a mapping" "env: x
"
refuse "bad CIDR" "kbox.yaml:3:7: network.allow[0]: bad prefix length" "network:
  allow:
    - 10.1.0.0/40
"
refuse "bad port" "kbox.yaml:1:9: ports[0]: 70000 is not a port number" "ports: [70000]
"
refuse "missing secret value" \
	"kbox.yaml:2:8: \${KBOX_E2E_UNSET} is not set; export KBOX_E2E_UNSET or add KBOX_E2E_UNSET=... to secrets.env" \
	"env:
  TOK: \${KBOX_E2E_UNSET}
"
refuse "network.dns: a name, not an address" \
	"kbox.yaml:2:9: network.dns[0]: 'dns.example' is not an IP address (a name server is given by address, not by name)" \
	"network:
  dns: [dns.example]
"
refuse "network.dns.servers: bad port" "kbox.yaml:3:15: network.dns.servers[0]: '10.0.0.53:99999': port 99999 is out of range" \
	"network:
  dns:
    servers: [\"10.0.0.53:99999\"]
"
refuse "network.dns.rate: out of range" "kbox.yaml:2:15: network.dns.rate: 0 is out of range; expected an integer from 1 to 10000" \
	"network:
  dns: {rate: 0}
"
refuse "network.dns: bad type" "kbox.yaml:2:8: network.dns: got 'yes'; expected a list of name server addresses" \
	"network:
  dns: yes
"
# Both forms load: the next error is the -v one, not the file's.
for form in 'network:
  dns: [127.0.0.1, "[::1]:5353"]
' 'network:
  dns:
    servers: ["127.0.0.1:5353"]
    rate: 20
'; do
	printf '%s' "$form" > "$tmp/dns.yaml"
	"$kbox" run --conf "$tmp/dns.yaml" -v "$tmp/nope:/w" -- true > /dev/null 2> "$tmp/err"
	if grep -q "nope" "$tmp/err" && ! grep -q "dns.yaml" "$tmp/err"; then
		ok "network.dns loads: $(echo "$form" | tr -s '\n ' '  ')"
	else
		not_ok "network.dns loads: $(echo "$form" | tr -s '\n ' '  ')" "$(head -3 "$tmp/err")"
	fi
done
ln -s nowhere "$bad/kbox.yaml.tmp" && mv -f "$bad/kbox.yaml.tmp" "$bad/kbox.yaml"
(cd "$bad" && "$kbox" run -- true) > /dev/null 2> "$tmp/err"
rc=$?
if [ "$rc" -eq 125 ] && grep -qF "kbox.yaml: cannot open: No such file or directory" "$tmp/err"; then
	ok "refused: unreadable kbox.yaml"
else
	not_ok "refused: unreadable kbox.yaml (exit $rc)" "$(head -3 "$tmp/err")"
fi
# --no-project ignores the broken file: the next error is the -v one.
(cd "$bad" && "$kbox" run --no-project -v "$tmp/nope:/w" -- true) > /dev/null 2> "$tmp/err"
if grep -q "nope" "$tmp/err" && ! grep -q "kbox.yaml" "$tmp/err"; then
	ok "--no-project skips kbox.yaml"
else
	not_ok "--no-project skips kbox.yaml" "$(head -3 "$tmp/err")"
fi


# --- trust: a found kbox.yaml runs only once its content is accepted ---
tp="$tmp/trustproj"
mkdir -p "$tp"
printf 'cpus: 1\nsecrets: secrets.yaml\n' > "$tp/kbox.yaml"
# Each refusal below happens before anything starts: no sandbox, no boot.
# run_tp: kbox run --network none -- true in $tp, stdin not a terminal
run_tp() { (cd "$tp" && "$kbox" run "$@" -- true) < /dev/null > /dev/null 2> "$tmp/err"; }
run_tp
rc=$?
if [ "$rc" -eq 125 ] && grep -qF "kbox.yaml: not trusted: it is new, or changed since it was trusted" "$tmp/err" &&
	grep -qF "run 'kbox trust kbox.yaml'" "$tmp/err"; then
	ok "trust: a new kbox.yaml is refused, with what to do"
else
	not_ok "trust: a new kbox.yaml is refused (exit $rc)" "$(head -3 "$tmp/err")"
fi
# A terminal and the answer "n": still refused, after showing what it asks.
if command -v script > /dev/null; then
	(cd "$tp" && echo n | script -qec "$kbox run -- true" /dev/null) > "$tmp/tty" 2>&1
	if grep -qF "Trust this file and go on? [y/N]" "$tmp/tty" &&
		grep -qF "$tp -> /workspace (read-write" "$tmp/tty" &&
		grep -qF "not trusted" "$tmp/tty" && [ ! -s "$tmp/trusted" ]; then
		ok "trust: on a terminal kbox shows the file's asks and 'n' refuses"
	else
		not_ok "trust: on a terminal, 'n' refuses" "$(tail -5 "$tmp/tty")"
	fi
fi
# "y" where the trust record cannot be written (it reads as missing, and
# nothing can be made in /proc, not even by root): trusted for this run,
# with a warning; the next error is the missing secrets file.
if command -v script > /dev/null; then
	(cd "$tp" && echo y | KBOX_TRUST_FILE=/proc/kbox-trusted script -qec "$kbox run -- true" \
		/dev/null) > "$tmp/tty" 2>&1
	if grep -qF "trusted for this run only" "$tmp/tty" && grep -qF "secrets.yaml" "$tmp/tty"; then
		ok "trust: 'y' with a trust record that cannot be written goes on, with a warning"
	else
		not_ok "trust: 'y' with an unwritable trust record goes on" "$(tail -5 "$tmp/tty")"
	fi
fi
(cd "$tp" && "$kbox" trust) > "$tmp/out" 2>&1
if [ "$?" -eq 0 ] && grep -qF "trusted: $(cd "$tp" && pwd -P)/kbox.yaml" "$tmp/out" &&
	grep -qF " $(cd "$tp" && pwd -P)/kbox.yaml" "$tmp/trusted"; then
	ok "trust: kbox trust records the file"
else
	not_ok "trust: kbox trust records the file" "$(cat "$tmp/out")"
fi
# Trusted, kbox gets past the check: the next error is the missing
# secrets file.
run_tp
if grep -qF "secrets.yaml" "$tmp/err" && ! grep -qF "not trusted" "$tmp/err"; then
	ok "trust: the trusted file is used"
else
	not_ok "trust: the trusted file is used" "$(head -3 "$tmp/err")"
fi
# A changed secrets file in the project counts as a change of the config.
printf '[unclosed\n' > "$tp/secrets.yaml"
run_tp
rc=$?
if [ "$rc" -eq 125 ] && grep -qF "not trusted" "$tmp/err"; then
	ok "trust: a new secrets file in the project needs trust again"
else
	not_ok "trust: a new secrets file needs trust again (exit $rc)" "$(head -3 "$tmp/err")"
fi
"$kbox" trust "$tp" > /dev/null 2>&1
printf 'cpus: 2\nsecrets: secrets.yaml\n' > "$tp/kbox.yaml"
run_tp
rc=$?
if [ "$rc" -eq 125 ] && grep -qF "not trusted" "$tmp/err" &&
	"$kbox" trust --list | grep -qx "changed  $(cd "$tp" && pwd -P)/kbox.yaml"; then
	ok "trust: an edited kbox.yaml needs trust again; --list says changed"
else
	not_ok "trust: an edited kbox.yaml needs trust again (exit $rc)" "$(head -3 "$tmp/err")"
fi
# --conf names the file on purpose: no trust asked.
run_tp --conf kbox.yaml
if ! grep -qF "not trusted" "$tmp/err"; then
	ok "trust: --conf kbox.yaml is used without it"
else
	not_ok "trust: --conf kbox.yaml is used without it" "$(head -3 "$tmp/err")"
fi
"$kbox" trust --remove "$tp" > /dev/null 2>&1
if ! grep -qF "$tp" "$tmp/trusted"; then
	ok "trust: --remove forgets the file"
else
	not_ok "trust: --remove forgets the file" "$(cat "$tmp/trusted")"
fi

e2e_need_kvm "the boot"

# --- one boot in a project folder ---
proj="$tmp/proj"
mkdir -p "$proj"
printf 'data\n' > "$proj/data.txt"
printf 'SECRET=env\n' > "$proj/.env"
cat > "$proj/kbox.yaml" <<'EOF'
# The project's sandbox.
env:
  FROM_FILE: hello
  FROM_SECRETS: ${KBOX_E2E_SECRET}
  OVERRIDDEN: file
  DOLLAR: "$$x"
mounts:
  # The same folder again, hiding nothing: kbox.yaml and secrets.env must
  # stay hidden all the same.
  - source: .
    target: /all
    hidden: []
EOF
printf '# not for the guest\nKBOX_E2E_SECRET="s3cret value"\n' > "$proj/secrets.env"
yaml_sum=$(md5sum < "$proj/kbox.yaml")
senv_sum=$(md5sum < "$proj/secrets.env")

cat > "$proj/checks.sh" <<'EOF'
t() { name=$1; shift; if "$@" > /tmp/out 2>&1; then echo "ok $name"; else echo "not ok $name: $(head -c 200 /tmp/out)"; fi; }
f() { name=$1; shift; if "$@" > /tmp/out 2>&1; then echo "not ok $name (succeeded)"; else echo "ok $name"; fi; }
t "started in /workspace" [ "$(pwd)" = /workspace ]
t "ls -a /workspace shows the project, not its config" \
	[ "$(ls -a /workspace | tr '\n' ' ')" = ". .. checks.sh data.txt " ]
t "read a project file" [ "$(cat /workspace/data.txt)" = data ]
f "kbox.yaml: no stat" stat /workspace/kbox.yaml
f "kbox.yaml: no read" cat /workspace/kbox.yaml
f "kbox.yaml: no overwrite" sh -c "echo 'cpus: 64' > /workspace/kbox.yaml"
f "kbox.yaml: no append" sh -c "echo 'x: 1' >> /workspace/kbox.yaml"
f "kbox.yaml: no rename onto" sh -c "echo 'cpus: 64' > /workspace/n && mv /workspace/n /workspace/kbox.yaml"
rm -f /workspace/n
f "kbox.yaml: no delete" rm /workspace/kbox.yaml
f "secrets.env: no read" cat /workspace/secrets.env
f "secrets.env: no overwrite" sh -c "echo X=1 > /workspace/secrets.env"
t "hidden: [] is honoured for other names" [ "$(cat /all/.env)" = SECRET=env ]
t "ls -a /all has no config either" \
	[ "$(ls -a /all | tr '\n' ' ')" = ". .. .env checks.sh data.txt " ]
f "/all/kbox.yaml: no read" cat /all/kbox.yaml
f "/all/kbox.yaml: no overwrite" sh -c "echo 'cpus: 64' > /all/kbox.yaml"
f "/all/secrets.env: no read" cat /all/secrets.env
t "env from the file" [ "$FROM_FILE" = hello ]
t "env from secrets.env" [ "$FROM_SECRETS" = "s3cret value" ]
t "-e beats the file" [ "$OVERRIDDEN" = cli ]
t "\$\$ is a dollar" [ "$DOLLAR" = '$x' ]
echo done
EOF

(cd "$proj" && "$kbox" trust > /dev/null) || not_ok "kbox trust in the project"
start=$(date +%s)
(cd "$proj" && timeout "$boot_timeout" "$kbox" run -e OVERRIDDEN=cli -- sh checks.sh) \
	> "$tmp/out" 2> "$tmp/err"
rc=$?
echo "# boot in the project and the checks: $(( $(date +%s) - start ))s"
e2e_ran_to_end "guest script" "$rc" "$tmp/out" "$tmp/err"
e2e_guest_results "guest: " "$tmp/out"

host_check "host: kbox.yaml unchanged" [ "$(md5sum < "$proj/kbox.yaml")" = "$yaml_sum" ]
host_check "host: secrets.env unchanged" [ "$(md5sum < "$proj/secrets.env")" = "$senv_sum" ]
host_check "host: nothing new in the project" \
	[ "$(ls -A "$proj" | tr '\n' ' ')" = ".env checks.sh data.txt kbox.yaml secrets.env " ]

e2e_finish
