#!/bin/sh
# End-to-end tests of kbox fork (docs/snapshots.md, "Fork"): a running
# sandbox is copied while it goes on.  The real kbox, kernel and
# guest-init; templates and the fork's file in a private folder
# (KBOX_TEMPLATE_DIR) so nothing of the user's own cache is touched.
#
# What the copy must have: the original's files (its RAM's tmpfs, the
# shared folder), its processes with their memory (a counter in a shell
# daemon), the shared folder's open files still open (the daemon's log
# opened before the fork) and its working folder known; its own name,
# clock and entropy.  What the original must keep: its own state, going
# on apart from the copy's, and its main command.  What kbox must refuse:
# a sandbox that is not running, a name that is taken, a read-write disk.
#   tests/e2e/fork.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
e2e_tmp

e2e_need_kvm "the boots"
export KBOX_TEMPLATE_DIR="$tmp/templates"
a=fk-a-$$ b=fk-b-$$ c=fk-c-$$
e2e_on_exit() {
	"$kbox" stop -t 5 "$a" "$b" "$c" >/dev/null 2>&1
}

# x NAME OUT CMD...: kbox exec NAME -- sh -c CMD, stdout in $tmp/OUT,
# stderr in $tmp/OUT.err, exit code in rc.
x() {
	_sb=$1 _o=$2
	shift 2
	timeout "$boot_timeout" "$kbox" exec "$_sb" -- /bin/sh -c "$*" > "$tmp/$_o" 2> "$tmp/$_o.err" < /dev/null
	rc=$?
}
# state NAME: the daemon's counter as the guest of NAME has it (the
# daemon rewrites /tmp/state each second), waited for up to 10 s to be
# WANT when given.
state() {
	_i=0
	while :; do
		x "$1" st 'cat /tmp/state 2>/dev/null'
		_v=$(cat "$tmp/st")
		[ -z "${2:-}" ] || [ "$_v" = "$2" ] || [ $_i -ge 10 ] || { sleep 1; _i=$((_i + 1)); continue; }
		echo "$_v"
		return
	done
}

mkdir -p "$tmp/proj/sub"
echo before > "$tmp/proj/f"

# --- the original: a main command, a daemon with a counter in memory
# that appends to a log in the shared folder through a descriptor it
# opened once, from a working folder in the share ---
timeout "$boot_timeout" "$kbox" run -d --name "$a" -v "$tmp/proj:/work" -- /bin/sh -c 'trap "" HUP; sleep 100000' \
	> "$tmp/a.out" 2> "$tmp/a.err" < /dev/null
rc=$?
if [ "$rc" -ne 0 ]; then
	not_ok "the original starts (exit $rc)" "$(tail -5 "$tmp/a.err")"
	e2e_finish
fi
ok "the original starts"
# The daemon: setsid, no exec session; USR1 adds one and logs it.
x "$a" d 'cd /work/sub && setsid /bin/sh -c '\''n=41; exec 3>>/work/log; trap "n=\$((n + 1)); echo \"n=\$n in \$(hostname)\" >&3" USR1; while :; do echo $n > /tmp/state.new; mv /tmp/state.new /tmp/state; sleep 1; done'\'' </dev/null >/dev/null 2>&1 &
echo $! > /tmp/daemon.pid; echo mem > /tmp/inram; echo done'
[ "$rc" -eq 0 ] && grep -q done "$tmp/d" && ok "the daemon started" || not_ok "the daemon started (exit $rc)" "$(cat "$tmp/d.err")"
x "$a" k 'kill -USR1 $(cat /tmp/daemon.pid)'
v=$(state "$a" 42)
[ "$v" = 42 ] && ok "the original's counter is 42" || not_ok "the original's counter is 42 ($v)"

# --- the fork ---
t0=$(date +%s)
timeout "$boot_timeout" "$kbox" fork --verbose "$a" "$b" > "$tmp/fork.out" 2> "$tmp/fork.err" < /dev/null
rc=$?
t1=$(date +%s)
if [ "$rc" -eq 0 ] && [ "$(cat "$tmp/fork.out")" = "$b" ]; then
	ok "kbox fork starts the copy and prints its name"
else
	not_ok "kbox fork starts the copy and prints its name (exit $rc)" "$(tail -5 "$tmp/fork.err"; cat "$tmp/fork.out")"
	e2e_finish
fi
pause=$(sed -n 's/.* paused \([0-9.]*\) ms.*/\1/p' "$tmp/fork.err" | head -1)
[ -n "$pause" ] && ok "kbox fork --verbose says how long the original was paused ($pause ms)" ||
	not_ok "kbox fork --verbose says how long the original was paused" "$(cat "$tmp/fork.err")"

# The copy's own name, clock and entropy; the original's files and
# memory.
x "$b" p 'hostname; grep -c "^127.0.1.1	'"$b"'\$" /etc/hosts; grep -c "'"$a"'" /etc/hosts; date +%s; cat /tmp/inram; cat /work/f; head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n"; echo'
x "$a" pa 'hostname; head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n"; echo'
l() { sed -n "$1p" "$tmp/$2"; }
[ "$(l 1 p)" = "$b" ] && [ "$(l 2 p)" = 1 ] && [ "$(l 3 p)" = 0 ] &&
	ok "the copy's host name is its own, in /etc/hosts instead of the original's" ||
	not_ok "the copy's host name is its own" "$(cat "$tmp/p" "$tmp/p.err")"
g=$(l 4 p)
case $g in
'' | *[!0-9]*) not_ok "the copy's clock is the host's" "'$g'" ;;
*) { [ "$g" -ge $((t0 - 1)) ] && [ "$g" -le $(($(date +%s) + 1)) ]; } && ok "the copy's clock is the host's" ||
	not_ok "the copy's clock is the host's" "guest $g, host $t0..$(date +%s)" ;;
esac
[ "$(l 5 p)" = mem ] && [ "$(l 6 p)" = before ] && ok "the copy has the original's files: RAM and shared folder" ||
	not_ok "the copy has the original's files" "$(cat "$tmp/p" "$tmp/p.err")"
[ "$(l 1 pa)" = "$a" ] && ok "the original keeps its name" || not_ok "the original keeps its name" "$(cat "$tmp/pa")"
e1=$(l 7 p) e2=$(l 2 pa)
[ ${#e1} -eq 64 ] && [ "$e1" != "$e2" ] && ok "the copy's random bytes are its own" ||
	not_ok "the copy's random bytes are its own" "copy $e1
original $e2"

# The daemon's memory went over, then each goes its own way.
v=$(state "$b" 42)
[ "$v" = 42 ] && ok "the daemon runs in the copy with the original's counter (42)" ||
	not_ok "the daemon runs in the copy with the original's counter" "'$v'"
x "$a" k 'kill -USR1 $(cat /tmp/daemon.pid); sleep 3; kill -USR1 $(cat /tmp/daemon.pid)'
x "$b" k 'kill -USR1 $(cat /tmp/daemon.pid)'
va=$(state "$a" 44) vb=$(state "$b" 43)
[ "$va" = 44 ] && [ "$vb" = 43 ] && ok "the counters go on apart: original 44, copy 43" ||
	not_ok "the counters go on apart" "original $va (want 44), copy $vb (want 43)"
# The log was opened before the fork: the copy's daemon wrote through
# the descriptor it inherited, in the copy's name.
sleep 1
grep -q "^n=43 in $b\$" "$tmp/proj/log" && ok "a file opened before the fork is still open in the copy" ||
	not_ok "a file opened before the fork is still open in the copy" "$(cat "$tmp/proj/log" 2>&1)"
grep -q "^n=44 in $a\$" "$tmp/proj/log" && ok "and in the original" ||
	not_ok "and in the original" "$(cat "$tmp/proj/log" 2>&1)"
# The daemon's working folder (an inode the guest knew) still serves.
x "$b" w 'cd /work/sub && pwd && echo x > here && ls'
[ "$rc" -eq 0 ] && [ -f "$tmp/proj/sub/here" ] && ok "a folder known before the fork serves the copy" ||
	not_ok "a folder known before the fork serves the copy" "$(cat "$tmp/w" "$tmp/w.err")"

# The original's main command goes on; the copy is listed.
"$kbox" ps > "$tmp/ps" 2>&1
grep -q "^$a  *running" "$tmp/ps" && grep -q "^$b  *running" "$tmp/ps" &&
	ok "kbox ps lists both running" || not_ok "kbox ps lists both running" "$(cat "$tmp/ps")"
x "$a" m 'ps | grep -q "[s]leep 100000" && echo alive'
grep -q alive "$tmp/m" && ok "the original's main command still runs" ||
	not_ok "the original's main command still runs" "$(cat "$tmp/m" "$tmp/m.err")"

# A fork of the fork.
timeout "$boot_timeout" "$kbox" fork "$b" "$c" > "$tmp/fork2.out" 2> "$tmp/fork2.err" < /dev/null
rc=$?
x "$c" c 'hostname; cat /tmp/state'
[ "$rc" -eq 0 ] && [ "$(l 1 c)" = "$c" ] && [ "$(l 2 c)" = 43 ] && ok "a copy can be forked again" ||
	not_ok "a copy can be forked again (exit $rc)" "$(tail -3 "$tmp/fork2.err"; cat "$tmp/c" "$tmp/c.err")"
"$kbox" stop "$c" >/dev/null 2>&1

# --- refusals ---
refuse() {
	_w=$1 _pat=$2
	shift 2
	"$kbox" fork "$@" > "$tmp/rf.out" 2> "$tmp/rf.err" < /dev/null
	_rc=$?
	if [ "$_rc" -eq 125 ] && grep -q -- "$_pat" "$tmp/rf.err" && [ ! -s "$tmp/rf.out" ]; then ok "refused: $_w"
	else not_ok "refused: $_w (exit $_rc)" "$(cat "$tmp/rf.err")"; fi
}
refuse "no such sandbox" "no sandbox named" "nosuch-$$" "fk-x-$$"
refuse "NEW taken" "already running" "$a" "$b"
refuse "NEW the same as NAME" "differ" "$a" "$a"
refuse "a bad NEW" "NEW takes" "$a" "bad/name"
refuse "one argument" "takes NAME and NEW" "$a"

# A read-write disk cannot be shared by two sandboxes.
export KBOX_DISK_DIR="$tmp/disks"
dk=fk-d-$$
timeout "$boot_timeout" "$kbox" run -d --name "$dk" --disk "d$$:/data:size=64M" -- sleep 100000 \
	> /dev/null 2> "$tmp/dk.err" < /dev/null
refuse "a sandbox with a read-write disk" "read-write" "$dk" "fk-e-$$"
"$kbox" stop "$dk" >/dev/null 2>&1
unset KBOX_DISK_DIR

# --- stopping the copy leaves the original ---
"$kbox" stop "$b" > /dev/null 2>&1
x "$a" s 'cat /tmp/state'
[ "$rc" -eq 0 ] && [ "$(cat "$tmp/s")" = 44 ] && ok "the original runs on after the copy stopped" ||
	not_ok "the original runs on after the copy stopped" "$(cat "$tmp/s" "$tmp/s.err")"
"$kbox" stop "$a" > /dev/null 2>&1
[ -z "$(find "$KBOX_TEMPLATE_DIR" -maxdepth 1 -name '*fork*' 2>/dev/null)" ] && ok "no fork file is left behind" ||
	not_ok "no fork file is left behind" "$(ls -la "$KBOX_TEMPLATE_DIR")"

e2e_finish
