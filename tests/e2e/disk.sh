#!/bin/sh
# End-to-end test of disk volumes through real `kbox run --disk`
# (docs/disks.md): bad specs refused before any boot; a new volume made
# sparse and private in the data folder; a pattern (KBOX_E2E_DISK_MB,
# default 256 MiB, 1 MiB on PVM hosts) written in the guest and found
# whole in the volume file on the host (debugfs reads the ext4 the guest
# wrote) and in a second run; a file put in by the host read back in
# the guest; a second sandbox on a volume in use refused, and `kbox disk
# rm` of it refused, while `kbox disk ls` says it is in use; a read-only
# disk refuses writes; a larger size= grows the filesystem; `kbox disk
# rm` removes it.
#   tests/e2e/disk.sh BUILD_DIR
# Talks to nothing: no network (--network none), files in a scratch folder
# and in the user's own kbox data folder (the volumes this script names,
# removed at the end).
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
vol="e2e-disk-$$"
vol2="e2e-disk2-$$"
cleanup() {
	"$kbox" stop -t 0 "dlock-$$" >/dev/null 2>&1
	"$kbox" disk rm "$vol" "$vol2" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
# On PVM the guest's kernel runs emulated (docs/pvm.md): /dev/urandom
# gives ~20 KiB/s there and a 4 MiB write through ext4 takes ~35 s, so
# the pattern is 1 MiB unless KBOX_E2E_DISK_MB says otherwise.
mb=$(e2e_mb KBOX_E2E_DISK_MB 1 256)
data=${XDG_DATA_HOME:-$HOME/.local/share}/kbox/disks
unset KBOX_DISK_DIR
# check NAME 'SHELL EXPRESSION': ok if it is true.
check() { if eval "$2"; then ok "$1"; else not_ok "$1"; fi; }
run() { "$kbox" run --network none --no-project "$@"; }
debugfs=
for p in debugfs /usr/sbin/debugfs /sbin/debugfs; do
	command -v "$p" >/dev/null 2>&1 && debugfs=$(command -v "$p") && break
done

# --- refused before any boot ---
e2e_refuse "no guest path" "NAME:GUEST_PATH" --disk "$vol"
e2e_refuse "a bad name" "volume name" --disk "../x:/data"
e2e_refuse "a name of 21 bytes" "volume name" --disk "abcdefghijklmnopqrstu:/data"
e2e_refuse "a relative guest path" "absolute" --disk "$vol:data"
e2e_refuse "the guest root" "root" --disk "$vol:/"
e2e_refuse "under /proc" "/proc" --disk "$vol:/proc/x"
e2e_refuse "a size too small" "out of range" --disk "$vol:/data:size=1M"
e2e_refuse "a size too large" "out of range" --disk "$vol:/data:size=2T"
e2e_refuse "a size without a number" "not a number" --disk "$vol:/data:size=G"
e2e_refuse "an unknown option" "not size=SIZE" --disk "$vol:/data:fast"
e2e_refuse "the same volume twice" "twice" --disk "$vol:/a" --disk "$vol:/b"
e2e_refuse "disks inside one another" "inside one another" --disk "$vol:/a" --disk "$vol2:/a/b"
e2e_refuse "five disks" "at most 4" --disk a:/a --disk b:/b --disk c:/c --disk d:/d --disk e:/e
mkdir -p "$tmp/share"
e2e_refuse "a disk inside a shared folder" "inside the shared folder" -v "$tmp/share:/s" --disk "$vol:/s/d"
e2e_refuse "a read-only disk that does not exist" "must exist" --disk "$vol:/data:ro"
printf 'disks:\n  - {name: "%s", target: /d, size: 3Q}\n' "$vol" >"$tmp/bad.yaml"
e2e_refuse "a bad disks: entry in --conf" "bad.yaml:2:.*disks\[0\].size" --conf "$tmp/bad.yaml"
check "nothing was made by the refusals" '[ ! -e "$data/$vol.img" ] && [ ! -e "$data/$vol2.img" ]'

e2e_need_kvm "the boots"

# --- a new volume, a pattern written in the guest ---
cat >"$tmp/write.sh" <<EOF
set -e
grep -q ' /data ext4 rw' /proc/mounts && echo "ok mounted ext4 read-write at /data" || echo "not ok mounted ext4 read-write at /data"
[ "\$(cat /sys/block/vda/serial)" = "$vol" ] && echo "ok the serial is the volume's name" || echo "not ok serial \$(cat /sys/block/vda/serial)"
dd if=/dev/urandom of=/data/pattern bs=1M count=$mb 2>/dev/null
sha256sum /data/pattern | cut -d' ' -f1 > /data/pattern.sum
cat /data/pattern.sum
echo done
EOF
run --disk "$vol:/data:size=1G" -- sh -c "$(cat "$tmp/write.sh")" >"$tmp/out" 2>"$tmp/err"
rc=$?
e2e_ran_to_end "first run" "$rc" "$tmp/out" "$tmp/err"
e2e_guest_results "first run: " "$tmp/out"
sum=$(grep -E '^[0-9a-f]{64}$' "$tmp/out" | head -1)
check "the guest wrote $mb MiB and its digest" '[ -n "$sum" ]'
img="$data/$vol.img"
check "the volume is $img, mode 0600" '[ -f "$img" ] && [ "$(stat -c %a "$img")" = 600 ]'
check "its folder is private (0700)" '[ "$(stat -c %a "$data")" = 700 ]'
check "it has the size asked for (1 GiB)" '[ "$(stat -c %s "$img")" = 1073741824 ]'
alloc=$(($(stat -c %b "$img") * $(stat -c %B "$img")))
check "it is sparse: $((alloc >> 20)) MiB allocated of 1024" '[ "$alloc" -gt $((mb << 20)) ] && [ "$alloc" -lt $(((mb + 160) << 20)) ]'

# --- the data on the host, from the volume file itself ---
if [ -n "$debugfs" ]; then
	# The agent emptied the journal before the command's exit: nothing
	# to replay, so what the host changes below stays.
	js=$("${debugfs%debugfs}dumpe2fs" -h "$img" 2>/dev/null | sed -n 's/^Journal start: *//p')
	check "the run left the journal empty (journal start ${js:-?})" '[ "$js" = 0 ]'

	"$debugfs" -R "dump /pattern $tmp/pattern" "$img" >/dev/null 2>&1
	host_sum=$(sha256sum "$tmp/pattern" 2>/dev/null | cut -d' ' -f1)
	check "the host finds the same $mb MiB in the volume file" '[ -n "$sum" ] && [ "$host_sum" = "$sum" ]'
	rm -f "$tmp/pattern"
	echo "from the host $$" >"$tmp/hostfile"
	"$debugfs" -w -R "write $tmp/hostfile /hostfile" "$img" >/dev/null 2>&1
else
	echo "# debugfs (e2fsprogs) not found: the host-side checks are skipped"
fi

# --- persistence: a second run sees it all ---
run --disk "$vol:/data" -- sh -c 'cat /data/hostfile 2>/dev/null; sha256sum /data/pattern | cut -d" " -f1; df -k /data | tail -1; echo done' >"$tmp/out" 2>"$tmp/err"
rc=$?
e2e_ran_to_end "second run" "$rc" "$tmp/out" "$tmp/err"
check "the pattern persists across runs" '[ -n "$sum" ] && grep -qx "$sum" "$tmp/out"'
if [ -n "$debugfs" ]; then
	check "the guest reads the file the host put in" 'grep -qx "from the host $$" "$tmp/out"'
fi

# --- the lock: one sandbox at a time ---
run -d --name "dlock-$$" --disk "$vol:/data" -- sleep 100000 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "a detached sandbox holds the volume" '[ "$rc" -eq 0 ]'
"$kbox" disk ls >"$tmp/ls" 2>&1
check "kbox disk ls says it is in use" 'grep -E "^$vol +1\.0G +[0-9.]+[KMG] +yes$" "$tmp/ls" >/dev/null'
run --disk "$vol:/data" -- true >"$tmp/out" 2>"$tmp/err"
rc=$?
check "a second sandbox on it is refused (exit $rc)" '[ "$rc" -eq 125 ] && grep -q "in use by another sandbox" "$tmp/err"'
run --disk "$vol:/data:ro" -- true >"$tmp/out" 2>"$tmp/err"
rc=$?
check "read-only too, while it is used read-write (exit $rc)" '[ "$rc" -eq 125 ] && grep -q "in use" "$tmp/err"'
"$kbox" disk rm "$vol" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "kbox disk rm refuses it (exit $rc)" '[ "$rc" -ne 0 ] && grep -q "in use by a running sandbox" "$tmp/err" && [ -f "$img" ]'
"$kbox" stop "dlock-$$" >/dev/null 2>&1
"$kbox" disk ls >"$tmp/ls" 2>&1
check "after kbox stop it is free" 'grep -E "^$vol .* no$" "$tmp/ls" >/dev/null'

# --- read-only ---
run --disk "$vol:/data:ro" -- sh -c 'grep " /data ext4 ro" /proc/mounts >/dev/null && echo mounted-ro; cat /data/pattern.sum; if touch /data/new 2>/dev/null; then echo WROTE; fi; echo done' >"$tmp/out" 2>"$tmp/err"
rc=$?
e2e_ran_to_end "read-only run" "$rc" "$tmp/out" "$tmp/err"
check "a read-only disk is mounted read-only and reads" 'grep -qx mounted-ro "$tmp/out" && grep -qx "$sum" "$tmp/out"'
check "a read-only disk refuses writes" '! grep -q WROTE "$tmp/out"'

# --- grow; shrinking is refused ---
run --disk "$vol:/data:size=512M" -- true >"$tmp/out" 2>"$tmp/err"
rc=$?
check "a smaller size= is refused (exit $rc)" '[ "$rc" -eq 125 ] && grep -q "cannot shrink" "$tmp/err"'
run --disk "$vol:/data:size=2G" -- sh -c 'df -k /data | tail -1; sha256sum /data/pattern | cut -d" " -f1; echo done' >"$tmp/out" 2>"$tmp/err"
rc=$?
e2e_ran_to_end "grow run" "$rc" "$tmp/out" "$tmp/err"
kb=$(awk 'NF >= 6 && $2 ~ /^[0-9]+$/ { print $2; exit }' "$tmp/out")
check "size=2G grows the file and the filesystem (${kb:-?} KiB)" '[ "$(stat -c %s "$img")" = 2147483648 ] && [ "${kb:-0}" -gt 1900000 ]'
check "the data survives the growth" 'grep -qx "$sum" "$tmp/out"'

# --- a disks: section, and kbox disk rm ---
printf 'disks:\n  - name: "%s"\n    target: /cfg\n    size: 64M\n' "$vol2" >"$tmp/kbox.yaml"
run --conf "$tmp/kbox.yaml" -- sh -c 'grep -q " /cfg ext4 " /proc/mounts && echo cfg-mounted; echo done' >"$tmp/out" 2>"$tmp/err"
rc=$?
e2e_ran_to_end "disks: run" "$rc" "$tmp/out" "$tmp/err"
check "a disks: entry in --conf is made and mounted" 'grep -qx cfg-mounted "$tmp/out" && [ "$(stat -c %s "$data/$vol2.img")" = 67108864 ]'
"$kbox" disk rm "$vol" "$vol2" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "kbox disk rm removes them" '[ "$rc" -eq 0 ] && [ ! -e "$img" ] && [ ! -e "$data/$vol2.img" ]'
"$kbox" disk ls >"$tmp/ls" 2>&1
check "kbox disk ls no longer lists them" '! grep -q "^$vol" "$tmp/ls"'
"$kbox" disk rm "$vol" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "kbox disk rm of a missing volume fails clearly" '[ "$rc" -ne 0 ] && grep -q "no volume" "$tmp/err"'
"$kbox" disk --help >"$tmp/out" 2>&1
check "kbox disk --help names ls and rm" 'grep -q "ls \[-b\]" "$tmp/out" && grep -q "rm NAME" "$tmp/out"'

e2e_finish
