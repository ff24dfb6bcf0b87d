#!/bin/sh
# End-to-end tests of template snapshots (docs/snapshots.md): the first run
# of a boot layout boots cold and saves a template, later runs start from
# it.  The real kbox, kernel and guest-init, in a private template folder
# (KBOX_TEMPLATE_DIR) so nothing of the user's own cache is touched.
#
# What a restored sandbox must have of its own: fresh entropy (two
# sandboxes from one template never share /dev/urandom output), the host's
# wall clock (not the template's), working timers, its own run
# configuration (name, environment, shares, exit code), the vCPUs it asked
# for.  What kbox must do with a template it cannot use: one warning, the
# file removed, the run still done (cold).
#   tests/e2e/template.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
e2e_tmp

e2e_need_kvm "the boots"
unset KBOX_TEMPLATES
tpl="$tmp/templates"
export KBOX_TEMPLATE_DIR="$tpl"

# run NAME ARGS...: kbox ARGS with its output in $tmp/NAME.out and .err;
# its exit code in rc.
run() {
	_n=$1
	shift
	timeout "$boot_timeout" "$kbox" "$@" > "$tmp/$_n.out" 2> "$tmp/$_n.err" < /dev/null
	rc=$?
}
ntemplates() { e2e_templates "$tpl"; }
# What every run below prints: 32 bytes of the CRNG, a fresh UUID, the
# guest's wall clock, its uptime around a one-second sleep, the host name,
# an environment variable, the vCPUs online and a shared file.
probe='head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n"; echo
cat /proc/sys/kernel/random/uuid
date +%s
cut -d" " -f1 /proc/uptime; sleep 1; cut -d" " -f1 /proc/uptime
cat /proc/sys/kernel/hostname
echo "v=$V"
grep -c ^processor /proc/cpuinfo
cat /share/f 2>/dev/null || echo no-share
exit 7'
mkdir -p "$tmp/s1" "$tmp/s2"
echo one > "$tmp/s1/f"
echo two > "$tmp/s2/f"

# line N NAME: line N of $tmp/NAME.out
line() { sed -n "$1p" "$tmp/$2.out"; }
# probe_ok WHAT NAME HOST V SHARE CPUS T0 T1: the probe's lines are this
# run's own; the clock within [T0-1, T1+1], the sleep between 0.9 and 5 s.
probe_ok() {
	_w=$1 _n=$2
	_bad=
	[ "$rc" -eq 7 ] || _bad="exit $rc, want 7"
	[ "$(line 6 "$_n")" = "$3" ] || _bad="$_bad; host name '$(line 6 "$_n")', want '$3'"
	[ "$(line 7 "$_n")" = "v=$4" ] || _bad="$_bad; '$(line 7 "$_n")', want 'v=$4'"
	[ "$(line 8 "$_n")" = "$6" ] || _bad="$_bad; $(line 8 "$_n") vCPUs, want $6"
	[ "$(line 9 "$_n")" = "$5" ] || _bad="$_bad; share '$(line 9 "$_n")', want '$5'"
	_g=$(line 3 "$_n")
	case $_g in
	'' | *[!0-9]*) _bad="$_bad; clock '$_g'" ;;
	*) { [ "$_g" -ge $(($7 - 1)) ] && [ "$_g" -le $(($8 + 1)) ]; } ||
		_bad="$_bad; guest clock $_g, host $7..$8" ;;
	esac
	_s=$(awk -v a="$(line 4 "$_n")" -v b="$(line 5 "$_n")" 'BEGIN { d = b - a; print (d >= 0.9 && d < 5) ? "ok" : d }')
	[ "$_s" = ok ] || _bad="$_bad; sleep 1 took $_s s by the guest's uptime"
	if [ -z "$_bad" ]; then ok "$_w"
	else not_ok "$_w" "${_bad#; }
$(tail -3 "$tmp/$_n.err")"; fi
}

# run_probe NAME SANDBOX V SHARE_DIR [ARGS...]: kbox run the probe, the
# host's clock around it in t0 and t1.
run_probe() {
	_n=$1 _sb=$2 _v=$3 _sh=$4
	shift 4
	t0=$(date +%s)
	run "$_n" run --name "$_sb" -e "V=$_v" -v "$_sh:/share:ro" "$@" -- /bin/sh -c "$probe"
	t1=$(date +%s)
}

# --- the first run makes the template ---
# And lets go of templates no run used for 30 days (another kbox
# build's): two stand-ins for those, one unused for 40 days, one used 2
# days ago.
mkdir -m 700 "$tpl"
stale="$tpl/t-$(printf '%064d' 0 | tr 0 e).snap"
recent="$tpl/t-$(printf '%064d' 0 | tr 0 d).snap"
printf 'old' > "$stale" && printf 'recent' > "$recent" && chmod 600 "$stale" "$recent"
touch -d '40 days ago' "$stale"
touch -d '2 days ago' "$recent"
run_probe make tpl-make 0 "$tmp/s1"
probe_ok "first run: its own configuration, clock and timers" make tpl-make 0 one 1 "$t0" "$t1"
if [ ! -e "$stale" ] && [ -e "$recent" ]; then
	ok "making a template removed one unused for 40 days, kept one used 2 days ago"
else
	not_ok "making a template removed one unused for 40 days, kept one used 2 days ago" \
		"$(ls -la --time=atime "$tpl" 2>&1)"
fi
rm -f "$recent"
n=$(ntemplates)
if [ "$n" -eq 1 ]; then ok "first run saved one template"
else not_ok "first run saved one template ($n)" "$(ls -la "$tpl" 2>&1; tail -5 "$tmp/make.err")"; fi
f=$(find "$tpl" -maxdepth 1 -name 't-*.snap' | head -1)
if [ -n "$f" ] && [ "$(stat -c %a "$tpl")" = 700 ] && [ "$(stat -c %a "$f")" = 600 ] &&
	[ "$(stat -c %u "$f")" = "$(id -u)" ]; then
	ok "the folder is 0700, the template 0600 and the user's"
else
	not_ok "the folder is 0700, the template 0600 and the user's" "$(ls -la "$tpl" 2>&1)"
fi
# Its RAM is sparse: the file is the guest's RAM, the disk much less.
if [ -n "$f" ] && [ $(($(stat -c %b "$f") * $(stat -c %B "$f"))) -lt $(($(stat -c %s "$f") / 2)) ]; then
	ok "the template is sparse ($(du -k "$f" | cut -f1) KiB on disk of $(($(stat -c %s "$f") >> 20)) MiB)"
else
	not_ok "the template is sparse" "$(ls -ls "$f" 2>&1)"
fi
mtime=$(stat -c %Y "$f" 2>/dev/null)

# Age the template, so a clock left as it was saved would show.
sleep 3

# --- two runs restored from it, one after the other, other settings ---
# (--verbose would say "restored", but it is on the kernel's command line
# and so a layout of its own: a run that found its template and gave no
# warning started from it.)
run_probe r1 tpl-one 1 "$tmp/s1"
probe_ok "restored run 1: its own name, environment, share and exit code; host clock; timers" \
	r1 tpl-one 1 one 1 "$t0" "$t1"
run_probe r2 tpl-two 2 "$tmp/s2"
probe_ok "restored run 2: another name, environment and share" r2 tpl-two 2 two 1 "$t0" "$t1"
! grep -q "kbox: warning" "$tmp/r1.err" "$tmp/r2.err" && ok "no warnings from the restored runs" ||
	not_ok "no warnings from the restored runs" "$(grep -h kbox: "$tmp/r1.err" "$tmp/r2.err" | head -5)"
[ "$(ntemplates)" -eq 1 ] && [ "$(stat -c %Y "$f" 2>/dev/null)" = "$mtime" ] &&
	ok "restores leave the template as it was" || not_ok "restores leave the template as it was" "$(ls -la "$tpl")"

# Entropy: the CRNG's output and the UUIDs differ between the restores
# and from the run that made the template.
e0=$(line 1 make) e1=$(line 1 r1) e2=$(line 1 r2)
u0=$(line 2 make) u1=$(line 2 r1) u2=$(line 2 r2)
if [ ${#e1} -eq 64 ] && [ "$e1" != "$e2" ] && [ "$e1" != "$e0" ] && [ "$e2" != "$e0" ] &&
	[ -n "$u1" ] && [ "$u1" != "$u2" ] && [ "$u1" != "$u0" ]; then
	ok "two restores share no random bytes or UUIDs"
else
	not_ok "two restores share no random bytes or UUIDs" "make $e0 $u0
r1 $e1 $u1
r2 $e2 $u2"
fi

# --- two sandboxes from the template at once ---
pids=
for i in 1 2; do
	timeout "$boot_timeout" "$kbox" run --name "tpl-par$i" -- /bin/sh -c \
		'head -c 16 /dev/urandom | od -An -tx1 | tr -d " \n"; echo; sleep 2; echo done' \
		> "$tmp/par$i.out" 2> "$tmp/par$i.err" &
	pids="$pids $!"
done
prc=0
for p in $pids; do wait "$p" || prc=$?; done
if [ "$prc" -eq 0 ] && [ "$(line 2 par1)" = done ] && [ "$(line 2 par2)" = done ] &&
	[ "$(line 1 par1)" != "$(line 1 par2)" ]; then
	ok "two sandboxes restored from one template at once, each its own"
else
	not_ok "two sandboxes restored from one template at once (exit $prc)" \
		"$(cat "$tmp/par1.out" "$tmp/par2.out"; tail -3 "$tmp/par1.err" "$tmp/par2.err")"
fi

# --- exec into a restored sandbox, and its timers with the host's clock ---
sbx="tpl-d-$$"
if out=$(timeout "$boot_timeout" "$kbox" run -d --name "$sbx" -- sleep 100000 2>"$tmp/d.err") && [ "$out" = "$sbx" ]; then
	ok "a detached sandbox from the template"
	t0=$(date +%s)
	timeout 60 "$kbox" exec "$sbx" -- sleep 2 > /dev/null 2>&1
	erc=$? took=$(($(date +%s) - t0))
	t0=$(date +%s)
	if [ "$erc" -eq 0 ] && [ "$took" -ge 2 ] && [ "$took" -le 10 ]; then ok "exec sleep 2 took ${took}s"
	else not_ok "exec sleep 2 (exit $erc, ${took}s)"; fi
	timeout 60 "$kbox" exec "$sbx" -- sh -c 'timeout 1 sleep 30; echo $?' > "$tmp/to.out" 2>&1
	took=$(($(date +%s) - t0 - took))
	g=$(cat "$tmp/to.out")
	if [ -n "$g" ] && [ "$g" != 0 ] && [ "$took" -le 10 ]; then ok "a timeout fires (status $g)"
	else not_ok "a timeout fires" "'$g' after ${took}s"; fi
	"$kbox" stop -t 2 "$sbx" > /dev/null 2>&1
else
	not_ok "a detached sandbox from the template" "$out $(tail -3 "$tmp/d.err")"
fi

# --- --cpus 2: a template of its own, two vCPUs after the restore ---
n=$(ntemplates)
run_probe c2a tpl-c2 3 "$tmp/s1" --cpus 2
probe_ok "--cpus 2, first run: two vCPUs" c2a tpl-c2 3 one 2 "$t0" "$t1"
run_probe c2b tpl-c2 4 "$tmp/s2" --cpus 2
probe_ok "--cpus 2 restored: two vCPUs" c2b tpl-c2 4 two 2 "$t0" "$t1"
{ ! grep -q "kbox: warning" "$tmp/c2b.err" && [ "$(ntemplates)" -eq $((n + 1)) ]; } &&
	ok "--cpus 2 has a template of its own" ||
	not_ok "--cpus 2 has a template of its own ($n, then $(ntemplates))" "$(grep kbox: "$tmp/c2b.err" | head -3)"

# --- a clock that leaps forward, two vCPUs ---
# A guest's clock leaps when its kbox is stopped (SIGSTOP, a suspended
# laptop) and, on PVM, at every restore: its TSC is the host's and has moved
# on by the template's age (docs/snapshots.md).  With an RCU grace period in
# flight (the loop below keeps one: each close frees a file through RCU) the
# guest kernel's next tick reports a CPU stall, and a report about the other
# vCPU sends it an NMI.  On PVM that NMI used to end the run (an emulation
# failure on `lsl`, docs/pvm.md); kbox's PVM switches keep stall reports off
# there.  The stall timeout is cut to its floor, 3 s, so a 6 s stop passes it.
# The sandbox lives under a runtime folder of its own, so its info file
# (the pid kbox stop uses) is at a known path.
sbx="tpl-leap-$$"
rt="$tmp/rt"
mkdir -m 700 "$rt"
if out=$(XDG_RUNTIME_DIR=$rt timeout "$boot_timeout" "$kbox" run -d --name "$sbx" --cpus 2 \
	--kernel-log "$tmp/leap.klog" --append rcupdate.rcu_cpu_stall_timeout=3 \
	-- sh -c 'while :; do : < /proc/version; done' 2>"$tmp/leap.err") && [ "$out" = "$sbx" ]; then
	pid=$(sed -n 's/^pid=//p' "$rt/kbox/$sbx/info")
	sleep 2
	kill -STOP "$pid" && sleep 6 && kill -CONT "$pid"
	XDG_RUNTIME_DIR=$rt timeout 120 "$kbox" exec "$sbx" -- grep -c ^processor /proc/cpuinfo \
		> "$tmp/leap.out" 2>> "$tmp/leap.err"
	erc=$?
	XDG_RUNTIME_DIR=$rt "$kbox" ps > "$tmp/ps"
	XDG_RUNTIME_DIR=$rt "$kbox" stop -t 2 "$sbx" > /dev/null 2>&1
	stalls=$(grep -c "detected stall" "$tmp/leap.klog")
	if [ -z "$pid" ]; then
		not_ok "kbox stopped for 6 s: the sandbox goes on" "no pid in $rt/kbox/$sbx/info"
	elif [ "$erc" -eq 0 ] && [ "$(cat "$tmp/leap.out")" = 2 ] && grep -q "^$sbx  *running " "$tmp/ps"; then
		ok "kbox stopped for 6 s, a grace period in flight, 2 vCPUs: the sandbox goes on ($stalls stall reports)"
	else
		not_ok "kbox stopped for 6 s: the sandbox goes on (exec exit $erc)" \
			"$(cat "$tmp/leap.out"; tail -3 "$tmp/leap.err"; tail -5 "$tmp/leap.klog")"
	fi
	if e2e_pvm; then
		if [ "$stalls" -eq 0 ]; then ok "PVM: no RCU stall reports after the leap"
		else not_ok "PVM: no RCU stall reports after the leap ($stalls)" "$(grep rcu "$tmp/leap.klog" | head -5)"; fi
	fi
else
	not_ok "a detached 2-vCPU sandbox for the clock leap" "$out $(tail -3 "$tmp/leap.err")"
fi

# --- kbox snapshot ls and rm on real templates ---
"$kbox" snapshot ls > "$tmp/ls" 2>&1
lsrc=$?
nl=$(grep -c '^[0-9a-f]\{12,\} ' "$tmp/ls")
[ "$lsrc" -eq 0 ] && [ "$nl" -eq "$(ntemplates)" ] && ! grep -q damaged "$tmp/ls" &&
	grep -q '^[0-9a-f]\{12,\}  *2 ' "$tmp/ls" && ok "snapshot ls lists the $nl templates, one with 2 vCPUs" ||
	not_ok "snapshot ls lists the templates (exit $lsrc, $nl of $(ntemplates))" "$(cat "$tmp/ls")"
for k in $(sed -n 's/^\([0-9a-f]\{12,\}\) .*/\1/p' "$tmp/ls"); do
	"$kbox" snapshot rm "$k" > /dev/null 2>> "$tmp/rm.err" || echo "rm $k failed" >> "$tmp/rm.err"
done
"$kbox" snapshot ls > "$tmp/ls" 2>&1
[ "$(ntemplates)" -eq 0 ] && grep -q "no templates" "$tmp/ls" && ok "snapshot rm removes them by name" ||
	not_ok "snapshot rm removes them by name ($(ntemplates) left)" "$(cat "$tmp/rm.err" "$tmp/ls" 2>/dev/null)"

# --- --cold and KBOX_TEMPLATES=off: no template made or used ---
rm -f "$tpl"/t-*.snap
run cold run --cold -- true
[ "$rc" -eq 0 ] && [ "$(ntemplates)" -eq 0 ] && ! grep -q "template" "$tmp/cold.err" &&
	ok "--cold neither makes nor uses a template" ||
	not_ok "--cold neither makes nor uses a template (exit $rc, $(ntemplates))" "$(grep kbox: "$tmp/cold.err" | head -3)"
KBOX_TEMPLATES=off run off run -- true
[ "$rc" -eq 0 ] && [ "$(ntemplates)" -eq 0 ] && ok "KBOX_TEMPLATES=off makes none" ||
	not_ok "KBOX_TEMPLATES=off makes none (exit $rc, $(ntemplates))"

# --- templates kbox must not use ---
# bad NAME WHAT: after WHAT was done to the template, a run prints the
# probe's answer with one warning, the file is gone, and the next run
# makes a new template.
remake() { run remake run -- true; f=$(find "$tpl" -maxdepth 1 -name 't-*.snap' | head -1); }
bad() {
	run "$1" run -- /bin/sh -c 'echo still here; exit 3'
	w=$(grep -c "warning: the template .* does not load" "$tmp/$1.err")
	if [ "$rc" -eq 3 ] && [ "$(cat "$tmp/$1.out")" = "still here" ] && [ "$w" -eq 1 ] && [ ! -e "$f" ]; then
		ok "$2: one warning, removed, the run done cold"
	else
		not_ok "$2 (exit $rc, $w warnings)" "$(ls -la "$tpl"; tail -3 "$tmp/$1.err")"
	fi
	remake
	[ -n "$f" ] && [ "$(ntemplates)" -eq 1 ] || not_ok "$2: the next run made a new template"
}
remake
[ -n "$f" ] && ok "a new template after --cold" || not_ok "a new template after --cold" "$(tail -3 "$tmp/remake.err")"
# A flipped byte in the metadata: the checksum.
printf 'X' | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null
bad flip "a damaged template"
# Cut short: the RAM is missing.
truncate -s 1M "$f"
bad short "a truncated template"
# A template readable by others.
chmod 644 "$f"
bad mode "a template others can read"
# A symlink in its place, to a good copy.
cp --sparse=always "$f" "$tmp/copy.snap"
rm -f "$f"
ln -s "$tmp/copy.snap" "$f"
bad link "a symlink as the template"
# A hard link: someone else could change it through the other name.
ln "$f" "$tmp/hard.snap"
bad hard "a template with a second link"
rm -f "$tmp/hard.snap"
# Another layout's template under this layout's name.
cp --sparse=always "$f" "$tmp/one.snap"
run c2 run --cpus 2 -- true
f2=$(find "$tpl" -maxdepth 1 -name 't-*.snap' -newer "$tmp/one.snap" | head -1)
if [ -n "$f2" ]; then
	mv "$f2" "$tmp/two.snap"
	cp --sparse=always "$tmp/one.snap" "$f2"
	f=$f2
	run swap run --cpus 2 -- /bin/sh -c 'echo still here; exit 3'
	w=$(grep -c "warning: the template .* does not load" "$tmp/swap.err")
	[ "$rc" -eq 3 ] && [ "$w" -eq 1 ] && [ ! -e "$f2" ] &&
		ok "another layout's template under this name: one warning, removed, run done" ||
		not_ok "another layout's template under this name (exit $rc, $w warnings)" "$(tail -3 "$tmp/swap.err")"
else
	not_ok "--cpus 2 made a second template" "$(tail -3 "$tmp/c2.err")"
fi

# A folder others can enter: no template is made or used there, the run
# goes on (one warning at most).
rm -rf "$tpl"
mkdir -m 755 "$tpl"
run open run -- /bin/sh -c 'echo still here'
[ "$rc" -eq 0 ] && [ "$(cat "$tmp/open.out")" = "still here" ] && [ "$(ntemplates)" -eq 0 ] &&
	[ "$(grep -c warning "$tmp/open.err")" -le 1 ] &&
	ok "a template folder others can enter: no template, the run done" ||
	not_ok "a template folder others can enter (exit $rc, $(ntemplates))" "$(cat "$tmp/open.err")"
chmod 700 "$tpl"

e2e_finish
