#!/bin/sh
# End-to-end test of a developer's workflow in the toolchain image
# (images/toolchain/build.sh), run as whoever runs it (the hardware-KVM
# lane runs it as an ordinary user and as root): one detached boot with the
# project folder at /workspace and a port forwarded,
#   - git init, add, commit, branch, status, diff, log in /workspace (as
#     guest root, which the folder's owner is: devices/idmap.c), and on the
#     host the files belong to the user and `git log` shows the commits;
#   - python3 -m unittest of a small project;
#   - npm install of a package tarball served by a test server on the host's
#     loopback (host.kbox.internal:PORT, the only allowed destination),
#     then npm test;
#   - python3 -m http.server in the guest, fetched from the host through
#     -p 127.0.0.1:PORT:PORT.
#
# Nothing leaves the machine: the policy is an allowlist of the test
# server alone (every other name is refused before resolving); as root the
# whole script also runs in a network namespace of its own (unshare -n).
# The image: KBOX_TOOLCHAIN_IMAGE (a name in the store or a root folder;
# default "toolchain"); skips when it is not there
# (sudo make toolchain-image).
#   tests/e2e/workflow.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
kbox="$(cd "$(dirname "$kbox")" && pwd)/$(basename "$kbox")"
e2e_toolchain_image
for t in python3 git curl tar; do
	command -v "$t" >/dev/null 2>&1 || e2e_skip "$t is missing on the host"
done
e2e_need_kvm "the boot"

e2e_own_netns "$@"

e2e_tmp
sbx="kbox-e2e-workflow-$$"
# Run by e2e_tmp's exit path (after it kills $srv_pid, before $tmp goes).
e2e_on_exit() { "$kbox" stop -t 5 "$sbx" >/dev/null 2>&1; }
me=$(id -u)

# --- an npm package, as a tarball on a test server on the host's loopback ---
mkdir -p "$tmp/pkg/package" "$tmp/www"
cat >"$tmp/pkg/package/package.json" <<'EOF'
{ "name": "kbox-greet", "version": "1.0.0", "main": "index.js", "license": "MIT" }
EOF
echo 'module.exports = (n) => "hello, " + n;' >"$tmp/pkg/package/index.js"
tar -C "$tmp/pkg" -czf "$tmp/www/kbox-greet-1.0.0.tgz" package
npm_port=$(e2e_free_port)
(cd "$tmp/www" && exec python3 -m http.server --bind 127.0.0.1 "$npm_port") >"$tmp/www.log" 2>&1 &
srv_pid=$!

# --- the project: a python module with tests, a node app using the package ---
proj="$tmp/proj"
mkdir -p "$proj"
cat >"$proj/calc.py" <<'EOF'
def add(a, b):
    return a + b
EOF
cat >"$proj/test_calc.py" <<'EOF'
import unittest
import calc


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_add_strings(self):
        self.assertEqual(calc.add("a", "b"), "ab")


if __name__ == "__main__":
    unittest.main()
EOF
cat >"$proj/package.json" <<'EOF'
{ "name": "kbox-app", "version": "0.1.0", "private": true,
  "scripts": { "test": "node test.js" } }
EOF
cat >"$proj/test.js" <<'EOF'
const greet = require("kbox-greet");
const got = greet("kbox");
if (got !== "hello, kbox") { console.error("got " + got); process.exit(1); }
console.log("npm-test-passed");
EOF
echo '<h1>kbox web app</h1>' >"$proj/index.html"
printf 'node_modules/\n__pycache__/\n' >"$proj/.gitignore"
# The guest's part: one "ok NAME" / "not ok NAME" line per check.
mkdir -p "$tmp/ci"
cat >"$tmp/ci/checks.sh" <<EOF
cd /workspace || exit 1
export HOME=/tmp/home GIT_AUTHOR_NAME=Kbox GIT_AUTHOR_EMAIL=kbox@example.invalid
export GIT_COMMITTER_NAME=Kbox GIT_COMMITTER_EMAIL=kbox@example.invalid
mkdir -p "\$HOME"
t() { n=\$1; shift; if "\$@" >/tmp/t.out 2>&1; then echo "ok \$n"; else echo "not ok \$n"; sed 's/^/#   /' /tmp/t.out | tail -8; fi; }
echo "id \$(id -u):\$(id -g)"
ls /root >/dev/null 2>&1 && echo "# the image's /root can be listed" || echo "# the image's /root cannot be listed: \$(ls /root 2>&1 | head -1)"
t "git init" git init -q -b main
t "git add" git add .gitignore calc.py test_calc.py package.json test.js index.html
t "git commit" git commit -q -m "first commit"
t "git branch" git branch feature
t "git switch to the branch" git switch -q feature
echo '# a change' >>calc.py
t "git status shows the change" sh -c 'git status --porcelain | grep -qx " M calc.py"'
t "git diff shows the change" sh -c 'git diff | grep -qx "+# a change"'
t "git commit on the branch" git commit -q -am "second commit"
t "git log shows both commits" sh -c 'git log --format=%s | tr "\n" , | grep -qx "second commit,first commit,"'
t "python3 -m unittest" sh -c 'python3 -m unittest -v 2>&1 | tee /dev/stderr | grep -qx OK'
t "npm install of the tarball from the host" npm install --no-audit --no-fund --no-update-notifier \
	--registry http://host.kbox.internal:$npm_port/ http://host.kbox.internal:$npm_port/kbox-greet-1.0.0.tgz
t "npm test" sh -c 'npm test --no-update-notifier | grep -qx npm-test-passed'
t "git commit of the dependency" sh -c 'git add package.json package-lock.json && git commit -q -m "add kbox-greet"'
echo done
EOF

# --- one detached boot: the web app in the guest, the rest through exec ---
app_port=$(e2e_free_port)
start=$(date +%s)
timeout "$boot_timeout" "$kbox" run -d -n "$sbx" --image "$image" -m 1024 -c 2 --no-project \
	-v "$proj:/workspace" -v "$tmp/ci:/ci:ro" -w /workspace \
	--network allowlist --allow "host.kbox.internal:$npm_port" --audit-log "$tmp/audit" \
	-p "127.0.0.1:$app_port:$app_port" \
	-- python3 -m http.server --bind 0.0.0.0 --directory /workspace "$app_port" \
	>"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
host_check "kbox run -d of the toolchain image with -p starts (exit $rc)" [ "$rc" -eq 0 ]
# The workflow through kbox exec runs while the web app comes up (git, npm
# and python over virtio-fs are slow under emulation: the hardware-KVM
# lane took 356 s to 600 s here while other L1s ran).
wf_start=$(date +%s)
timeout "$((boot_timeout * ${KBOX_TIMEOUT_MULT:-1}))" "$kbox" exec "$sbx" -- sh /ci/checks.sh \
	>"$tmp/guest.out" 2>"$tmp/guest.err" &
wf_pid=$!
got=
i=0
while [ $i -lt 120 ] && [ "$rc" -eq 0 ]; do
	got=$(curl -sS --max-time 5 "http://127.0.0.1:$app_port/index.html" 2>/dev/null) && [ -n "$got" ] && break
	sleep 1
	i=$((i + 1))
done
echo "# the web app answered $(($(date +%s) - start))s after kbox run"
host_check "python3 -m http.server in the guest answers on the host's 127.0.0.1:$app_port" \
	[ "$got" = "<h1>kbox web app</h1>" ]

wait "$wf_pid"
rc=$?
start=$wf_start
echo "# the workflow in the guest took $(($(date +%s) - start))s"
e2e_ran_to_end "the guest's workflow" "$rc" "$tmp/guest.out" "$tmp/guest.err"
e2e_guest_results "guest: " "$tmp/guest.out"
grep '^#' "$tmp/guest.out" | head -40
host_check "the guest runs as root ($(sed -n 's/^id //p' "$tmp/guest.out"))" grep -qx 'id 0:0' "$tmp/guest.out"
"$kbox" stop -t 5 "$sbx" >/dev/null 2>&1

# --- what the host sees ---
owners=$(find "$proj" -path "$proj/node_modules" -prune -o -exec stat -c %u {} + | sort -u | tr '\n' ' ')
host_check "on the host every file of the project is the user's (uid $me; seen: $owners)" [ "$owners" = "$me " ]
host_check "on the host, node_modules is the user's" sh -c "[ \"\$(stat -c %u '$proj/node_modules/kbox-greet/index.js')\" = $me ]"
hlog=$(git -C "$proj" log --format=%s feature 2>&1 | tr '\n' ,)
host_check "git log on the host shows the guest's commits ($hlog)" [ "$hlog" = "add kbox-greet,second commit,first commit," ]
st=$(git -C "$proj" status --porcelain 2>&1)
host_check "git status on the host: the tree is clean${st:+ ($st)}" [ -z "$st" ]
host_check "the test server served the tarball" grep -q 'GET /kbox-greet-1.0.0.tgz' "$tmp/www.log"
host_check "audit: host.kbox.internal:$npm_port allowed" \
	grep -q "\"dst\":\"127.0.0.1:$npm_port\".*\"decision\":\"allow\"" "$tmp/audit"
if [ "$fail" -ne 0 ]; then
	echo "# kbox run: $(tail -5 "$tmp/run.err")"
	echo "# guest stderr:"; tail -20 "$tmp/guest.err" | sed 's/^/#   /'
	echo "# audit:"; tail -10 "$tmp/audit" 2>/dev/null | sed 's/^/#   /'
fi
e2e_finish
