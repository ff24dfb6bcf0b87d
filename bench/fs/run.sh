#!/bin/sh
# bench/fs: kbox's FUSE server (through /dev/fuse, tests/fuse/kbox-fuse-mount)
# against bindfs (a libfuse passthrough, Debian package "bindfs") and against
# the native filesystem, on the same tree and the same disk.
#
#   apt-get install -y --no-install-recommends bindfs     # once
#   bench/fs/run.sh [BUILD_DIR]                            # needs root, /dev/fuse
#
# Environment:
#   SUBSET   directories of linux-source-6.1 to use (default "fs kernel
#            include net lib mm": about 11,700 entries); SUBSET= (empty)
#            takes the whole tree (about 84,000 entries)
#   REPS     runs of each timed step, the median is reported (default 5)
#   BIG_MB   size of the sequential file in MiB (default 1024)
#   TARXZ    the tarball (default /usr/src/linux-source-6.1.tar.xz, Debian
#            package linux-source-6.1)
#   MAXTIME  seconds for the whole run before it gives up (default 1500)
#   THREADS  kbox-fuse-mount's request threads (default 4)
#   SINGLE   1 (default) also times the metadata steps with both servers
#            single-threaded (kbox -t 1, bindfs -s) on the same copies; 0 skips
#   PIN      a CPU list (e.g. 0): servers and timed commands all run there
#            (taskset), so that no request or reply crosses CPUs: much steadier
#            figures on a shared host, which measure the work per request
#            rather than the scheduler's placement
#
# Steps, each on a fresh mount (so FUSE's caches are cold; the host's page
# and dentry caches are warm for every contestant alike):
#   extract    tar -xf of the uncompressed tree (xz is taken out of the timing)
#   git status on the extracted tree, committed natively beforehand (git init,
#              add -A, commit, gc on the source directory, so the index
#              matches; gc packs the objects, as in a real clone)
#   find+stat  find -printf '%s %m %T@' over the tree (an lstat per entry)
#   write      dd of BIG_MB MiB of zeros, conv=fsync
#   read       dd of that file to /dev/null (host page cache warm)
# Both FUSE servers run multi-threaded as they are meant to (kbox-fuse-mount
# -t THREADS; bindfs -f, which libfuse 2 runs with a thread per concurrent
# request), with 1 s entry/attribute timeouts and the host's inode numbers
# (bindfs: -o use_ino).
#
# kbox's server remembers inodes without holding an fd for each (lookups are
# an fstatat; fds are opened on demand and the least recently used closed at
# its cap), so SUBSET= (the whole tree) works whatever RLIMIT_NOFILE is.
#
# Prints a table of medians with kbox/bindfs (bindfs time / kbox time: > 1
# means kbox is faster) and kbox/native (kbox time / native time: how many
# times slower than the native filesystem); raw runs go to
# BUILD_DIR/bench/fs.txt.  Unmounts and removes everything on exit.
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
BIN=$BUILD/fuse/kbox-fuse-mount
SUBSET=${SUBSET-fs kernel include net lib mm}
REPS=${REPS:-5}
BIG_MB=${BIG_MB:-1024}
TARXZ=${TARXZ:-/usr/src/linux-source-6.1.tar.xz}
MAXTIME=${MAXTIME:-1500}
THREADS=${THREADS:-4}
SINGLE=${SINGLE:-1}
ON=""
[ -n "${PIN:-}" ] && ON="taskset -c $PIN"
TOPDIR=linux-source-6.1

# The whole run is bounded: the script runs itself under timeout(1), whose
# TERM reaches the trap below, which unmounts and cleans up.
if [ -z "${KBOX_BENCH_FS_BOUNDED:-}" ]; then
	KBOX_BENCH_FS_BOUNDED=1 exec timeout -k 30 "$MAXTIME" "$0" "$@"
fi
if [ "$(id -u)" != 0 ]; then echo "skip: bench/fs needs root (mount)"; exit 0; fi
if [ ! -c /dev/fuse ]; then echo "skip: no /dev/fuse"; exit 0; fi
if [ ! -r "$TARXZ" ]; then
	echo "skip: $TARXZ missing (apt-get install linux-source-6.1)"; exit 0
fi
if [ ! -x "$BIN" ]; then
	(cd "$TOP" && make "${1:-build}/fuse/kbox-fuse-mount" >/dev/null) || exit 1
fi
FSES="native kbox"
if command -v bindfs >/dev/null; then
	FSES="native kbox bindfs"
else
	echo "# bindfs missing (apt-get install bindfs): its column is left out"
fi
# Single-threaded variants, for the metadata steps only, on the copies of
# their multi-threaded selves.
META_EXTRA=""
if [ "$SINGLE" = 1 ]; then
	META_EXTRA="kbox-1"
	case $FSES in *bindfs*) META_EXTRA="kbox-1 bindfs-s" ;; esac
fi

W=$(mktemp -d /var/tmp/kbox-bench-fs.XXXXXX)
mkdir -p "$BUILD/bench"
RAW=$BUILD/bench/fs.txt
: >"$RAW"
PID=""

cleanup() {
	for m in $(awk -v w="$W/" 'index($2, w) == 1 { print $2 }' /proc/self/mounts); do
		umount -l "$m" 2>/dev/null
	done
	[ -n "$PID" ] && kill "$PID" 2>/dev/null
	rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# fs_mount FS: serves $W/src.FS at $W/mnt.FS (native: the source itself).
fs_mount() {
	case $1 in
	native) return 0 ;;
	kbox) timeout "$MAXTIME" $ON "$BIN" -t "$THREADS" "$W/src.kbox" "$W/mnt.kbox" 2>>"$W/server.log" & ;;
	kbox-1) timeout "$MAXTIME" $ON "$BIN" -t 1 "$W/src.kbox" "$W/mnt.kbox-1" 2>>"$W/server.log" & ;;
	bindfs) timeout "$MAXTIME" $ON bindfs -f -o use_ino,entry_timeout=1,attr_timeout=1 \
		"$W/src.bindfs" "$W/mnt.bindfs" 2>>"$W/server.log" & ;;
	bindfs-s) timeout "$MAXTIME" $ON bindfs -f -s -o use_ino,entry_timeout=1,attr_timeout=1 \
		"$W/src.bindfs" "$W/mnt.bindfs-s" 2>>"$W/server.log" & ;;
	esac
	PID=$!
	i=0
	while ! mountpoint -q "$W/mnt.$1"; do
		i=$((i + 1))
		if [ $i -gt 100 ]; then echo "mount of $1 failed"; cat "$W/server.log"; exit 1; fi
		sleep 0.1
	done
}

fs_umount() {
	[ "$1" = native ] && return 0
	umount "$W/mnt.$1" || umount -l "$W/mnt.$1"
	wait "$PID" 2>/dev/null
	PID=""
}

dir_of() { if [ "$1" = native ]; then echo "$W/src.native"; else echo "$W/mnt.$1"; fi; }

# timed FS STEP CMD...: runs CMD on a fresh mount, appends "FS STEP ms".
timed() {
	fs=$1; step=$2; shift 2
	fs_mount "$fs"
	t0=$(now_ms)
	if ! timeout 900 $ON "$@" >"$W/out" 2>&1; then
		echo "$fs $step failed:"; grep -v '^[0-9]' "$W/out" | head -20; exit 1
	fi
	t1=$(now_ms)
	fs_umount "$fs"
	echo "$fs $step $((t1 - t0))" >>"$RAW"
}

median() { # median FS STEP
	awk -v f="$1" -v s="$2" '$1 == f && $2 == s { print $3 }' "$RAW" | sort -n |
		awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
}

echo "# preparing the tree from $TARXZ (${SUBSET:-whole tree})"
if [ -n "$SUBSET" ]; then
	mkdir "$W/stage"
	paths=""
	for d in $SUBSET; do paths="$paths $TOPDIR/$d"; done
	# shellcheck disable=SC2086
	xz -dc "$TARXZ" | tar -x -C "$W/stage" -f - $paths || exit 1
	tar -C "$W/stage" -cf "$W/tree.tar" "$TOPDIR" || exit 1
	rm -rf "$W/stage"
else
	xz -dc "$TARXZ" >"$W/tree.tar" || exit 1
fi
FILES=$(tar -tf "$W/tree.tar" | wc -l)
TREE_MB=$(($(stat -c %s "$W/tree.tar") / 1048576))
echo "# $FILES entries, $TREE_MB MiB; $REPS runs per step; file of $BIG_MB MiB"

# The contestants take turns within each run, so that a busy host slows
# them alike.
for fs in $FSES; do mkdir -p "$W/src.$fs" "$W/mnt.$fs"; done
for fs in $META_EXTRA; do mkdir -p "$W/mnt.$fs"; done
r=0
while [ $r -lt "$REPS" ]; do
	for fs in $FSES; do
		rm -rf "$W/src.$fs/$TOPDIR"
		timed "$fs" extract tar -xf "$W/tree.tar" -C "$(dir_of "$fs")"
	done
	r=$((r + 1))
done
echo "# extracted; committing natively"
for fs in $FSES; do
	# Debian's top-level .gitignore ignores everything but debian/ ("/*"):
	# drop that rule so that git sees the tree as a kernel clone would.
	(cd "$W/src.$fs/$TOPDIR" &&
		{ [ ! -f .gitignore ] || sed -i '\|^/\*$|d; \|^!/debian/$|d' .gitignore; } &&
		git init -q && git add -A &&
		git -c gc.auto=0 -c user.name=bench -c user.email=bench@example.invalid \
			commit -qm tree && git gc -q) || exit 1
done
r=0
while [ $r -lt "$REPS" ]; do
	for fs in $FSES $META_EXTRA; do
		d=$(dir_of "$fs")
		timed "$fs" git-status git -C "$d/$TOPDIR" status --porcelain
		test -s "$W/out" && { echo "$fs: git status not clean:"; head "$W/out"; exit 1; }
		timed "$fs" find-stat find "$d/$TOPDIR" -printf '%s %m %T@\n'
	done
	r=$((r + 1))
done
echo "# metadata steps done"
for fs in $FSES; do rm -rf "$W/src.$fs/$TOPDIR"; done
r=0
while [ $r -lt "$REPS" ]; do
	for fs in $FSES; do
		d=$(dir_of "$fs")
		rm -f "$W/src.$fs/big"
		timed "$fs" write dd if=/dev/zero of="$d/big" bs=1M count="$BIG_MB" conv=fsync status=none
		timed "$fs" read dd if="$d/big" of=/dev/null bs=1M status=none
	done
	r=$((r + 1))
done
for fs in $FSES; do rm -rf "$W/src.$fs"; done

ratio() { # ratio A B: A / B to two decimals, "-" if either is missing
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f\n", a / b }'
}
echo
printf '%-11s %10s %10s %10s %13s %12s\n' step native_ms kbox_ms bindfs_ms kbox/bindfs kbox/native
for step in extract git-status find-stat write read; do
	n=$(median native "$step"); k=$(median kbox "$step"); b=$(median bindfs "$step")
	printf '%-11s %10s %10s %10s %12sx %11sx\n' "$step" "$n" "$k" "$b" \
		"$(ratio "$b" "$k")" "$(ratio "$k" "$n")"
done
if [ -n "$META_EXTRA" ]; then
	echo
	echo "# single-threaded servers (kbox -t 1, bindfs -s), same copies:"
	printf '%-11s %10s %10s %10s %13s %12s\n' step native_ms kbox-1_ms bindfs-s_ms kbox-1/bindfs-s kbox-1/native
	for step in git-status find-stat; do
		n=$(median native "$step"); k=$(median kbox-1 "$step"); b=$(median bindfs-s "$step")
		printf '%-11s %10s %10s %10s %14sx %11sx\n' "$step" "$n" "$k" "$b" \
			"$(ratio "$b" "$k")" "$(ratio "$k" "$n")"
	done
	echo
fi
for fs in $FSES; do
	w=$(median "$fs" write); r=$(median "$fs" read)
	echo "# $fs: write $(ratio $((BIG_MB * 1000)) "$w") MiB/s, read $(ratio $((BIG_MB * 1000)) "$r") MiB/s"
done
echo "# kbox/bindfs = bindfs time / kbox time (target >= 1.5 for metadata steps);"
echo "# kbox/native = kbox time / native time (target <= 3). kbox: $THREADS threads.${PIN:+ Pinned to CPU $PIN.}"
echo "# Raw runs: $RAW"
