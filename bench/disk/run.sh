#!/bin/sh
# bench/disk: a kbox disk volume (virtio-blk on a sparse file, ext4 in the
# guest) against the same file used directly on the host.
#
#   bench/disk/run.sh [BUILD_DIR]
#
# Needs musl-gcc (make deps) for the static guest side of diskbench.c,
# /dev/kvm and a kernel from `make kernel`.  No network: the guest has no
# NIC (--network none).
#
# Environment: MB (MiB per sequential pass and the span of the random
# ones, default 256), OUT (where the raw figures go, default
# BUILD/bench), EMULATED=WHAT (the hardware-KVM lane sets EMULATED=tcg:
# the absolute figures are then emulated, only the ratios mean something).
#
# What runs (bench/disk/diskbench.c says what each figure is):
#   guest  one `kbox run --disk NAME:/data` (a new volume of 2*MB+512 MiB):
#          diskbench /data/f MB direct (O_DIRECT reads and random writes, so
#          the device, not the guest's page cache, answers), then dd of MB
#          MiB of zeros with conv=fsync and, after drop_caches, dd back.
#   host   diskbench on the volume file itself, through the page cache (where
#          the device's own preadv/pwritev land), then the same two dd.
# Prints a table: guest, host and guest/host (for rates: how much of the
# host's rate the guest gets); raw lines go to OUT/disk.txt.  The volume is
# removed at the end.
set -u
cd "$(dirname "$0")/../.."
B=${1:-${BUILD:-build}}
MB=${MB:-256}
OUT=${OUT:-$B/bench}
kbox=$B/kbox
vol=bench-disk-$$
mkdir -p "$OUT" || exit 1
if [ ! -c /dev/kvm ]; then echo "skip: no /dev/kvm"; exit 0; fi
# The tool in a folder of its own, shared read-only with the guest (the
# build folder may not be the user's to write).
tooldir=$(mktemp -d)
tool=$tooldir/diskbench
if command -v musl-gcc >/dev/null 2>&1; then
	musl-gcc -std=c11 -Wall -Wextra -Werror -O2 -static -o "$tool" bench/disk/diskbench.c || exit 1
else
	${CC:-cc} -std=c11 -Wall -Wextra -Werror -O2 -static -o "$tool" bench/disk/diskbench.c || exit 1
fi
data=${KBOX_DISK_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/kbox/disks}
img=$data/$vol.img
trap '"$kbox" disk rm "$vol" >/dev/null 2>&1; rm -rf "$tooldir"' EXIT

guest_script='
set -e
/b/diskbench /data/f '"$MB"' direct
t0=$(/b/diskbench now); dd if=/dev/zero of=/data/dd bs=1M count='"$MB"' conv=fsync 2>/dev/null; t1=$(/b/diskbench now)
echo "dd_write_mibs=$(awk -v t="$((t1 - t0))" "BEGIN { printf \"%.1f\", '"$MB"' / (t / 1e9) }")"
sync; echo 3 > /proc/sys/vm/drop_caches
t0=$(/b/diskbench now); dd if=/data/dd of=/dev/null bs=1M 2>/dev/null; t1=$(/b/diskbench now)
echo "dd_read_mibs=$(awk -v t="$((t1 - t0))" "BEGIN { printf \"%.1f\", '"$MB"' / (t / 1e9) }")"
echo "queue max_sectors_kb=$(cat /sys/block/vda/queue/max_sectors_kb) max_segments=$(cat /sys/block/vda/queue/max_segments) write_cache=$(cat /sys/block/vda/queue/write_cache)" >&2
'
"$kbox" run --network none --no-project --disk "$vol:/data:size=$((MB * 2 + 512))M" \
	-v "$tooldir:/b:ro" -- sh -c "$guest_script" >"$OUT/disk-guest.txt" 2>"$OUT/disk-guest.err"
rc=$?
if [ "$rc" -ne 0 ]; then
	echo "bench/disk: the guest run failed (exit $rc):" >&2
	tail -5 "$OUT/disk-guest.err" "$OUT/disk-guest.txt" >&2
	exit 1
fi

# The host on the very file the guest used (its ext4 is overwritten: the
# volume is removed afterwards anyway).
"$tool" "$img" "$MB" >"$OUT/disk-host.txt" || exit 1
t0=$(date +%s%N); dd if=/dev/zero of="$img" bs=1M count="$MB" conv=notrunc,fsync 2>/dev/null; t1=$(date +%s%N)
echo "dd_write_mibs=$(awk -v t="$((t1 - t0))" -v m="$MB" 'BEGIN { printf "%.1f", m / (t / 1e9) }')" >>"$OUT/disk-host.txt"
t0=$(date +%s%N); dd if="$img" of=/dev/null bs=1M count="$MB" 2>/dev/null; t1=$(date +%s%N)
echo "dd_read_mibs=$(awk -v t="$((t1 - t0))" -v m="$MB" 'BEGIN { printf "%.1f", m / (t / 1e9) }')" >>"$OUT/disk-host.txt"

{
	echo "# bench/disk $(date -u +%FT%TZ) MB=$MB ${EMULATED:+EMULATED=$EMULATED}"
	sed 's/^/guest /' "$OUT/disk-guest.txt"
	sed 's/^/host /' "$OUT/disk-host.txt"
	sed "s/^/guest-info /" "$OUT/disk-guest.err"
} >>"$OUT/disk.txt"

get() { grep "^$2=" "$1" | head -1 | cut -d= -f2; }
echo "bench/disk: $MB MiB${EMULATED:+ (emulated: $EMULATED; compare the ratios only)}"
grep "^queue" "$OUT/disk-guest.err"
printf '%-18s %12s %12s %10s\n' figure guest host guest/host
for f in seq_write_mibs seq_read_mibs dd_write_mibs dd_read_mibs rand_read_iops rand_write_iops fsync_per_s; do
	g=$(get "$OUT/disk-guest.txt" "$f")
	h=$(get "$OUT/disk-host.txt" "$f")
	r=$(awk -v a="${g:-0}" -v b="${h:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
	printf '%-18s %12s %12s %10s\n' "$f" "${g:--}" "${h:--}" "$r"
done
missing=0
for f in seq_write_mibs seq_read_mibs dd_write_mibs dd_read_mibs rand_read_iops rand_write_iops fsync_per_s; do
	[ -n "$(get "$OUT/disk-guest.txt" "$f")" ] && [ -n "$(get "$OUT/disk-host.txt" "$f")" ] || missing=1
done
if [ "$missing" = 0 ]; then
	echo "bench-disk: 1 passed, 0 failed"
else
	echo "bench-disk: a figure is missing:"; cat "$OUT/disk-guest.err"
	echo "bench-disk: 0 passed, 1 failed"
fi
