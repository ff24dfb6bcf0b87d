#!/bin/sh
# Stage 2 of the hardware-KVM lane: PID 1 of L1, in the overlay of the
# host's tree (tests/hwkvm/init.sh hands over here).  Sets up what a Debian
# system would have (proc, sys, devpts, loopback, an ordinary user in the
# kvm group with a home directory), runs the suites named in kbox_suites,
# each under a timeout, prints their output with one summary per suite and
# a final "hwkvm-result: PASSED FAILED", then ends L1.
#
#   tests/hwkvm/inside.sh --list     the suites, and who runs them
#
# A suite SUITE runs as the ordinary user and as root (e2e, lockdown), or
# only as root (the KVM harness) or only as the user (smoke); SUITE@user
# or SUITE@root picks one.  The suite "cmd" runs KBOX_HWKVM_CMD (given to
# tests/hwkvm/run.sh) with sh -c, for a look at one thing in L1; it
# counts as passed when it prints its own "N passed, M failed" line.

# name:who:cost:command (BUILD is the build folder).  cost: a pass's
# rough seconds in L1 on a quiet host, used only to share the passes
# between two lanes (KBOX_HWKVM_JOBS=2).
suites_table() {
	cat <<'T'
smoke:user:60:tests/hwkvm/smoke.sh BUILD
kvm:root:150:tests/hwkvm/kvm.sh BUILD
lockdown:both:120:tests/lockdown/run.sh BUILD
e2e-run:both:180:tests/e2e/run.sh BUILD
e2e-fs:both:120:tests/e2e/fs.sh BUILD
e2e-net:both:90:tests/e2e/net.sh BUILD
e2e-config:both:70:tests/e2e/config.sh BUILD
e2e-image:both:140:tests/e2e/image.sh BUILD
e2e-image-store:both:110:tests/e2e/image-store.sh BUILD
e2e-secrets:both:60:tests/e2e/secrets.sh BUILD
e2e-disk:both:160:tests/e2e/disk.sh BUILD
e2e-template:both:90:tests/e2e/template.sh BUILD
e2e-fork:both:90:tests/e2e/fork.sh BUILD
bench-boot:user:300:env EMULATED=tcg OUT=/tmp/kbox-bench-boot bench/boot/run.sh 5 BUILD
bench-disk:user:300:env EMULATED=tcg OUT=/tmp/kbox-bench-disk bench/disk/run.sh BUILD
bench-start:user:240:env EMULATED=tcg OUT=/tmp/kbox-bench-start bench/start/run.sh 5 BUILD
bench-start-steps:user:60:bench/start/steps.sh 5 BUILD
e2e-workflow:both:300:tests/e2e/workflow.sh BUILD
e2e-agents:both:500:tests/e2e/agents.sh BUILD
e2e-podman:both:420:tests/e2e/podman.sh BUILD
bench-agent:root:250:env EMULATED=tcg AGENTS=claude,codex OUT=/tmp/kbox-bench-agent bench/agent/run.sh 1 BUILD
bench-agent-opencode:root:600:env EMULATED=tcg AGENTS=opencode OUT=/tmp/kbox-bench-agent bench/agent/run.sh 1 BUILD
cmd:user:0:CMD
T
}

if [ "${1:-}" = --list ]; then
	suites_table | sed 's/^\([^:]*\):\([^:]*\):[^:]*:\(.*\)/\1 (\2): \3/'
	exit 0
fi

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
user=kboxuser
uid=1500
pass=0
fail=0

finish() {
	echo "hwkvm: all suites: $pass passed, $fail failed"
	echo "hwkvm-result: $pass $fail"
	sync
	sleep 1
	echo b > /proc/sysrq-trigger
	sleep 30
}
setup_fail() {
	echo "not ok - L1 set-up: $*"
	fail=$((fail + 1))
	finish
}

mount -t proc proc /proc
mount -t sysfs sys /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts -o ptmxmode=0666,mode=0620,gid=5 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
for i in 0:stdin 1:stdout 2:stderr; do ln -sf "/proc/self/fd/${i%%:*}" "/dev/${i#*:}"; done
hostname kbox-l1
ip link set lo up || setup_fail "no loopback"
# The L1 kernel's modules, for what the suites load on demand.
mkdir -p /lib/modules
ln -sfn "$kbox_moddir" "/lib/modules/$kbox_kver"
[ -c /dev/kvm ] || setup_fail "kvm_amd is loaded but /dev/kvm is missing"

# The ordinary user, as a user's own machine has them: in the kvm group,
# with a home and a runtime folder of their own.
getent group kvm >/dev/null || groupadd -r kvm || setup_fail "groupadd kvm"
chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
if ! id "$user" >/dev/null 2>&1; then
	while getent passwd "$uid" >/dev/null; do uid=$((uid + 1)); done
	useradd -m -u "$uid" -G kvm -s /bin/sh "$user" || setup_fail "useradd $user"
fi
uid=$(id -u "$user")
# The user's own name must resolve for them, as on any Debian system (the
# host's account files may be private to root).
chmod 0644 /etc/passwd /etc/group
mkdir -p "/run/user/$uid" && chown "$user:" "/run/user/$uid" && chmod 700 "/run/user/$uid"
# The checkout may sit under a private folder (CI clones as root): let the
# user through to it, in L1's overlay only.
d=$kbox_top
while [ "$d" != / ] && [ -n "$d" ]; do
	chmod o+x "$d" 2>/dev/null
	d=$(dirname "$d")
done
chmod -R o+rX "$kbox_build" 2>/dev/null

echo "hwkvm: L1 up: $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { print int($2 / 1024) " MiB" }' /proc/meminfo);" \
	"kvm_amd nested=$(cat /sys/module/kvm_amd/parameters/nested) npt=$(cat /sys/module/kvm_amd/parameters/npt)"

# A heartbeat for the host (tests/hwkvm/run.sh): its silence means L1 froze.
(while sleep 20; do echo "hwkvm-heartbeat $(date +%s)"; done) &
# KBOX_E2E_STDIN_MB: e2e-run's stdin size in MiB when set (unset: 100,
# as off PVM; the sandbox died once during it in L1 on 2026-12-01, not
# seen since: docs/testing.md).
envs="PATH=$PATH LANG=C.UTF-8 TERM=dumb KBOX_E2E_USER=$user ${KBOX_E2E_STDIN_MB:+KBOX_E2E_STDIN_MB=$KBOX_E2E_STDIN_MB} KBOX_TIMEOUT_MULT=$kbox_mult CK_TIMEOUT_MULTIPLIER=$((4 * kbox_mult))"

# The toolchain image, when root on the host has it (make hw-prep builds
# it as root, as CI runs): root's store sits under root's 0700 home in a
# 0700 folder, so the user is let through to the image's folder, in L1's
# overlay only, and every suite gets it as KBOX_TOOLCHAIN_IMAGE (a folder
# works with --image for any user who can read it: docs/images.md).
# KBOX_IMAGE_DIR given to run.sh names another store.
if [ -n "${kbox_image_dir:-}" ]; then
	tc=$(HOME=/root KBOX_IMAGE_DIR=$kbox_image_dir "$kbox_build/kbox" image path toolchain 2>/dev/null)
else
	tc=$(HOME=/root "$kbox_build/kbox" image path toolchain 2>/dev/null)
fi
if [ -n "$tc" ] && [ -d "$tc" ]; then
	d=$tc
	while [ "$d" != / ] && [ -n "$d" ]; do
		chmod o+x "$d" 2>/dev/null
		d=$(dirname "$d")
	done
	envs="$envs KBOX_TOOLCHAIN_IMAGE=$tc"
	echo "hwkvm: the toolchain image: $tc"
else
	echo "hwkvm: no toolchain image in root's store (sudo make toolchain-image); its suites skip"
fi
# run_one NAME WHO COMMAND: COMMAND from the checkout's top as WHO, under
# the suite timeout; its output with a prefix; counts from its summary.
# A pass that failed where an inner guest triple-faulted runs once more
# (nested SVM under TCG corrupts a guest's state now and then: see
# docs/testing.md); only the second run counts, and both are in the log.
run_one() {
	_name=$1 _who=$2
	shift 2
	_out=/tmp/hwkvm-$_name@$_who.log
	# Its bound: the suite timeout, or three times the pass's cost in the
	# table when that is more (the agents' one boot runs three agents).
	_lim=$kbox_suite_timeout
	[ $((3 * ${_cost:-0})) -gt "$_lim" ] && _lim=$((3 * _cost))
	_t0=$(date +%s)
	echo "hwkvm: start $_name@$_who"
	# The output goes to $_out, and from there to the console as it comes
	# (prefixed; tail ends once the suite has, even if something it left
	# behind still holds the file).
	if [ "$_who" = user ]; then
		# shellcheck disable=SC2086
		(cd "$kbox_top" && exec timeout -k 20 "$_lim" runuser -u "$user" -- env -i $envs \
			HOME="/home/$user" USER="$user" LOGNAME="$user" XDG_RUNTIME_DIR="/run/user/$uid" \
			"$@") </dev/null >"$_out" 2>&1 &
	else
		# shellcheck disable=SC2086
		(cd "$kbox_top" && exec timeout -k 20 "$_lim" env -i $envs HOME=/root USER=root \
			LOGNAME=root "$@") </dev/null >"$_out" 2>&1 &
	fi
	_pid=$!
	tail -n +1 -F --pid="$_pid" "$_out" 2>/dev/null | sed -u "s/^/[$_name@$_who] /" &
	_tail=$!
	wait "$_pid"
	_rc=$?
	wait "$_tail"
	_secs=$(($(date +%s) - _t0))
	_sum=$(grep -E '^([a-z-]+: )?[0-9]+ passed, [0-9]+ failed' "$_out" | tail -1)
	_p=$(echo "$_sum" | sed -n 's/^\([a-z-]*: \)\{0,1\}\([0-9]*\) passed, \([0-9]*\) failed.*/\2/p')
	_f=$(echo "$_sum" | sed -n 's/^\([a-z-]*: \)\{0,1\}\([0-9]*\) passed, \([0-9]*\) failed.*/\3/p')
	if [ -z "$_p" ]; then
		_p=0 _f=1
		if [ "$_rc" -eq 124 ] || [ "$_rc" -eq 137 ]; then
			echo "not ok - $_name@$_who ran past ${_lim}s and was stopped"
		else
			echo "not ok - $_name@$_who ended (exit $_rc) without its summary"
		fi
	elif [ "$_rc" -ne 0 ] && [ "$_f" -eq 0 ]; then
		echo "not ok - $_name@$_who exited $_rc though it counted no failure"
		_f=1
	fi
	if [ "$_f" -gt 0 ] && [ -z "${_again:-}" ] && grep -q '(triple fault)' "$_out"; then
		echo "hwkvm: retry $_name@$_who after $_p passed, $_f failed (${_secs}s): an inner guest" \
			"triple-faulted, which nested SVM under TCG does now and then; the pass runs once more"
		mv "$_out" "$_out.first"
		_again=1
		run_one "$_name" "$_who" "$@"
		_again=
		return
	fi
	pass=$((pass + _p))
	fail=$((fail + _f))
	echo "hwkvm: $_name@$_who: $_p passed, $_f failed (${_secs}s)"
}

# The passes to run, one "NAME WHO COST" line each, in the order given.
: >/tmp/hwkvm-todo
for s in $kbox_suites; do
	name=${s%@*}
	only=
	[ "$name" != "$s" ] && only=${s#*@}
	line=$(suites_table | grep "^$name:")
	if [ -z "$line" ]; then
		echo "not ok - no suite named $name (tests/hwkvm/inside.sh --list)"
		fail=$((fail + 1))
		continue
	fi
	who=$(echo "$line" | cut -d: -f2)
	case $only:$who in
	:both) whos="user root" ;;
	:*) whos=$who ;;
	user:* | root:*) whos=$only ;;
	*) echo "not ok - $s: who is '$only'? (user or root)"; fail=$((fail + 1)); continue ;;
	esac
	cost=$(echo "$line" | cut -d: -f3)
	for w in $whos; do echo "$name $w $cost" >>/tmp/hwkvm-todo; done
done

# run_list FILE: the passes in FILE, one after the other; their sums go
# to FILE.sum.
run_list() {
	_list=$1
	while read -r name w _cost; do
		cmd=$(suites_table | grep "^$name:" | cut -d: -f4-)
		# The command's words, with the build folder as one word (its path
		# may hold spaces).
		set --
		for word in $cmd; do
			case $word in
			BUILD) set -- "$@" "$kbox_build" ;;
			CMD) set -- "$@" sh -c "${kbox_cmd:-echo 'hwkvm: cmd: KBOX_HWKVM_CMD is empty'; exit 1}" ;;
			*) set -- "$@" "$word" ;;
			esac
		done
		run_one "$name" "$w" "$@" </dev/null
	done <"$_list"
	echo "$pass $fail" >"$_list.sum"
}

# kbox_jobs=2 (KBOX_HWKVM_JOBS): two lanes side by side, so that one
# lane's waits are the other's time to run.  Each pass goes, in the order given, to the lane
# with less work so far (by the table's costs); each lane keeps the order.
# 1: all in one lane.
if [ "${kbox_jobs:-1}" = 2 ]; then
	awk '{ if (a <= b) { a += $3; print > "/tmp/hwkvm-lane1" } else { b += $3; print > "/tmp/hwkvm-lane2" } }
		END { printf "" >> "/tmp/hwkvm-lane1"; printf "" >> "/tmp/hwkvm-lane2" }' /tmp/hwkvm-todo
	echo "hwkvm: two lanes: $(awk '{ printf " %s@%s", $1, $2 }' /tmp/hwkvm-lane1) |$(awk '{ printf " %s@%s", $1, $2 }' /tmp/hwkvm-lane2)"
	p0=$pass f0=$fail
	pass=0 fail=0
	run_list /tmp/hwkvm-lane1 &
	l1=$!
	run_list /tmp/hwkvm-lane2 &
	l2=$!
	wait "$l1"
	wait "$l2"
	read -r p1 f1 </tmp/hwkvm-lane1.sum || { p1=0 f1=1; echo "not ok - lane 1 ended without its sums"; }
	read -r p2 f2 </tmp/hwkvm-lane2.sum || { p2=0 f2=1; echo "not ok - lane 2 ended without its sums"; }
	pass=$((p0 + p1 + p2))
	fail=$((f0 + f1 + f2))
else
	run_list /tmp/hwkvm-todo
fi
finish
