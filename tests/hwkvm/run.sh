#!/bin/sh
# The emulated hardware-KVM lane (docs/testing.md): boot an L1 Linux under
# QEMU's software emulation with AMD SVM and nested paging, load kvm_amd
# there, and run kbox's suites inside it on the kernel users boot
# (vmlinux-std).
#
#   tests/hwkvm/run.sh BUILD_DIR SUITE...
#
# SUITE names a suite of tests/hwkvm/inside.sh (smoke, kvm, lockdown,
# e2e-run, e2e-fs, ...; `tests/hwkvm/inside.sh --list` lists them); a suffix
# @root or @user picks who runs it (default: each e2e suite both ways).
#
# What it uses and where:
#   - L1's kernel and modules: Debian's linux-image-6.1.0-*-amd64 (the one
#     linux-image-amd64 depends on), fetched with `apt-get download` and
#     unpacked with `dpkg -x` into $KBOX_CACHE/hwkvm/VERSION (never
#     installed); KBOX_HWKVM_DEB=FILE.deb uses a package already at hand.
#   - L1's initramfs: static busybox, the modules to mount the host's tree
#     (9p), the scratch disk (virtio-blk, ext4) and the overlay, and kvm_amd
#     with its dependencies, resolved from modules.dep.  Cached beside the
#     kernel, keyed by its inputs.
#   - The host's / shared read-only over 9p (so L1 runs the checkout and
#     the host's tools in place), under an overlay whose writes land on a
#     sparse ext4 scratch disk that is removed afterwards.
#   - No network device at all.
# Exit status: 0 when every check passed; 1 when one failed or QEMU died;
# 2 when the lane cannot start here (the message says how to fix it).
#
# Environment: KBOX_HWKVM_NAME (the final line's name, hwkvm),
# KBOX_HWKVM_CPUS (1: with two, L1's kernel and its inner guests were
# corrupted now and then when both of QEMU's vCPU threads ran at once), KBOX_HWKVM_MEM (MiB, 6144),
# KBOX_IMAGE_DIR (the store L1 takes the toolchain image from, instead of
# root's default one), KBOX_HWKVM_TIMEOUT (s, whole run, 3600), KBOX_HWKVM_STALE (s of silence,
# heartbeat included, after which L1 counts as frozen: 240),
# KBOX_HWKVM_ATTEMPTS (L1 boots, the suites left after a freeze run again,
# in one lane, in
# a fresh one: 3), KBOX_HWKVM_SUITE_TIMEOUT (s per
# suite, 900), KBOX_HWKVM_CMD (what the suite cmd runs), KBOX_HWKVM_LOG (file for L1's whole console; default in
# BUILD_DIR/hwkvm/console.log), KBOX_TIMEOUT_MULT (stretches the harnesses'
# watchdogs inside L1; 4 by default).
set -u
build=${1:?usage: tests/hwkvm/run.sh BUILD_DIR SUITE...}
shift
[ $# -gt 0 ] || { echo "usage: tests/hwkvm/run.sh BUILD_DIR SUITE..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cache=${KBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kbox}/hwkvm
cpus=${KBOX_HWKVM_CPUS:-1}
mem=${KBOX_HWKVM_MEM:-6144}
total_timeout=${KBOX_HWKVM_TIMEOUT:-3600}
suite_timeout=${KBOX_HWKVM_SUITE_TIMEOUT:-900}
mult=${KBOX_TIMEOUT_MULT:-4}
jobs=${KBOX_HWKVM_JOBS:-1}
case $jobs in 1 | 2) ;; *) echo "hwkvm: KBOX_HWKVM_JOBS is 1 or 2, not '$jobs'" >&2; exit 2 ;; esac

# The final line's name (make hw-smoke: "hw-smoke").
label=${KBOX_HWKVM_NAME:-hwkvm}
cannot() {
	echo "hwkvm: cannot start: $1" >&2
	echo "$label: 0 passed, 1 failed"
	exit 2
}

case $build in /*) ;; *) build=$(cd "$build" 2>/dev/null && pwd) || cannot "no build folder; run make first" ;; esac
command -v qemu-system-x86_64 >/dev/null || cannot "qemu-system-x86_64 is missing: sudo apt-get install qemu-system-x86 (or sudo make deps)"
for t in cpio depmod mkfs.ext4 dpkg apt-get; do
	command -v "$t" >/dev/null || [ -x "/sbin/$t" ] || [ -x "/usr/sbin/$t" ] ||
		cannot "$t is missing: sudo make deps"
done
bb=/bin/busybox
[ -x "$bb" ] || cannot "$bb is missing: sudo apt-get install busybox-static (or sudo make deps)"
[ -x "$build/kbox" ] && [ -f "$build/initramfs.cpio" ] || cannot "$build/kbox is missing: run make"
[ -f "$build/kernel/vmlinux-std" ] || cannot "$build/kernel/vmlinux-std is missing: run make kernel"
PATH=$PATH:/sbin:/usr/sbin

# ---- L1's kernel package ------------------------------------------------
mkdir -p "$cache" || cannot "cannot make $cache"
if [ -n "${KBOX_HWKVM_DEB:-}" ]; then
	deb=$KBOX_HWKVM_DEB
	[ -f "$deb" ] || cannot "KBOX_HWKVM_DEB=$deb is not a file"
	pkg=$(dpkg-deb -f "$deb" Package) && ver=$(dpkg-deb -f "$deb" Version) ||
		cannot "$deb is not a Debian package"
else
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9.]*-[0-9]*-amd64\)$/\1/p' | head -1)
	[ -n "$pkg" ] || cannot "apt does not know linux-image-amd64's kernel package: run 'sudo apt-get update'"
	ver=$(apt-cache show "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | head -1)
	[ -n "$ver" ] || cannot "apt has no version of $pkg: run 'sudo apt-get update'"
	deb=
fi
kdir="$cache/$pkg-$ver"
kver=${pkg#linux-image-}
if [ ! -f "$kdir/ok" ]; then
	rm -rf "$kdir" "$kdir.tmp"
	mkdir -p "$kdir.tmp" || cannot "cannot make $kdir.tmp"
	if [ -z "$deb" ]; then
		echo "hwkvm: fetching $pkg $ver (apt-get download)"
		(cd "$kdir.tmp" && apt-get download -q "$pkg=$ver" >/dev/null 2>"$kdir.tmp/apt.err") || {
			cat "$kdir.tmp/apt.err" >&2
			rm -rf "$kdir.tmp"
			cannot "apt-get download $pkg=$ver failed (is Debian's archive reachable? sudo apt-get update)"
		}
		deb=$(ls "$kdir.tmp"/*.deb)
	fi
	dpkg -x "$deb" "$kdir.tmp/root" && depmod -b "$kdir.tmp/root" "$kver" || {
		rm -rf "$kdir.tmp"
		cannot "cannot unpack $deb"
	}
	rm -f "$kdir.tmp"/*.deb
	touch "$kdir.tmp/ok"
	mv "$kdir.tmp" "$kdir" || cannot "cannot move $kdir.tmp into place"
fi
kroot="$kdir/root"
moddir="$kroot/lib/modules/$kver"

# ---- L1's initramfs -------------------------------------------------------
# Stage 1 mounts what it needs and moves into the overlay; everything else
# (tun, veth, nf_tables...) the L1 kernel loads on demand from $moddir,
# which stage 2 links into place.
mods="virtio_pci virtio_blk crc32c_generic ext4 9pnet_virtio 9p overlay kvm_amd"
ikey=$( { echo "$kver $mods"; cat "$here/init.sh" "$0"; "$bb" 2>&1 | head -1; } | sha256sum | cut -c1-16)
initrd="$kdir/initrd-$ikey.cpio"
if [ ! -f "$initrd" ]; then
	w=$(mktemp -d) || cannot "no temporary folder"
	mkdir -p "$w/bin" "$w/dev" "$w/proc" "$w/sys" "$w/mnt" "$w/new" "$w/lib/modules"
	cp "$bb" "$w/bin/busybox"
	cp "$here/init.sh" "$w/init"
	chmod 755 "$w/init"
	# Every module with its dependencies, in load order (deepest first).
	# (A subshell each: sh has no local variables, and it recurses.)
	resolve() (
		f=$(sed -n "s@^\\(kernel/.*/$(echo "$1" | sed 's/[_-]/[_-]/g')\\.ko[.a-z]*\\):.*@\\1@p" "$moddir/modules.dep" | head -1)
		if [ -z "$f" ]; then
			grep -q "/$(echo "$1" | sed 's/[_-]/[_-]/g')\\.ko" "$moddir/modules.builtin" && return 0
			echo "hwkvm: module $1 is in neither modules.dep nor modules.builtin" >&2
			return 1
		fi
		for d in $(sed -n "s@^$f: *@@p" "$moddir/modules.dep"); do
			resolve "$(basename "$d" | sed 's/\.ko.*//')" || return 1
		done
		grep -qx "$f" "$w/order" 2>/dev/null || echo "$f" >>"$w/order"
	)
	: >"$w/order"
	for m in $mods; do resolve "$m" || { rm -rf "$w"; cannot "$pkg lacks a module L1 needs"; }; done
	while IFS= read -r f; do
		b=$(basename "$f")
		case $b in
		*.xz) xz -dc "$moddir/$f" >"$w/lib/modules/${b%.xz}" ;;
		*.zst) zstd -qdc "$moddir/$f" >"$w/lib/modules/${b%.zst}" ;;
		*) cp "$moddir/$f" "$w/lib/modules/$b" ;;
		esac
		echo "${b%.*z*}" | sed 's/\.ko$//' >>"$w/lib/modules/order"
	done <"$w/order"
	rm "$w/order"
	(cd "$w" && find . | cpio -o -H newc --quiet) >"$initrd.tmp" && mv "$initrd.tmp" "$initrd"
	rm -rf "$w"
	[ -f "$initrd" ] || cannot "cannot write $initrd"
	# Older initramfs builds of this kernel are of no use.
	for o in "$kdir"/initrd-*.cpio; do [ "$o" = "$initrd" ] || rm -f "$o"; done
fi

# ---- the run ------------------------------------------------------------
# A run killed outright (SIGKILL) takes QEMU with it (below), but leaves
# its folder: remove those whose QEMU is gone.
for old in "${TMPDIR:-/tmp}"/kbox-hwkvm.*; do
	[ -d "$old" ] && [ -O "$old" ] || continue
	op=$(cat "$old/qemu.pid" 2>/dev/null)
	[ -n "$op" ] && kill -0 "$op" 2>/dev/null && continue
	[ -n "$op" ] || [ -n "$(find "$old" -maxdepth 0 -mmin +60)" ] || continue
	rm -rf "$old"
done
run=$(mktemp -d "${TMPDIR:-/tmp}/kbox-hwkvm.XXXXXX") || cannot "no temporary folder"
log=${KBOX_HWKVM_LOG:-$build/hwkvm/console.log}
mkdir -p "$(dirname "$log")"
qpid=
cleanup() {
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
		kill "$qpid" 2>/dev/null
		sleep 1
		kill -9 "$qpid" 2>/dev/null
	fi
	rm -rf "$run"
}
trap cleanup EXIT
trap 'echo "hwkvm: interrupted" >&2; exit 1' INT TERM HUP

# Each suite pass by name (SUITE@user, SUITE@root), from inside.sh's own
# table, so that a retry (below) can run just what is left.
items=
for a in "$@"; do
	case $a in
	*@*) items="$items $a" ;;
	*)
		who=$(sh "$here/inside.sh" --list | sed -n "s/^$a (\([a-z]*\)):.*/\1/p")
		case $who in
		both) items="$items $a@user $a@root" ;;
		user | root) items="$items $a@$who" ;;
		*) items="$items $a" ;; # inside.sh says it is unknown
		esac
		;;
	esac
done

q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
cmdline="console=ttyS0 quiet loglevel=3 panic=-1 oops=panic"
# L1 prints a heartbeat every 20 s.  Silence for longer than this means L1
# itself froze (seen a few times under TCG with nested SVM on a loaded
# host: then not even a suite's own timeout fires), not that a test hung.
stale=${KBOX_HWKVM_STALE:-240}
attempts=${KBOX_HWKVM_ATTEMPTS:-3}
: >"$log"

# boot_l1 ITEMS...: one L1 for these suite passes; sets qrc, and leaves
# its console in $run/console.  Returns 0 when L1 reported a result, 1 when
# it ended without one, 2 when it froze, 3 when its kernel panicked.
boot_l1() {
	rm -f "$run/scratch.img" "$run/console"
	rm -rf "$run/seed"
	mkdir "$run/seed"
	{
		echo "kbox_top=$(q "$top")"
		echo "kbox_build=$(q "$build")"
		echo "kbox_suites=$(q "$*")"
		echo "kbox_suite_timeout=$(q "$suite_timeout")"
		echo "kbox_mult=$(q "$mult")"
		echo "kbox_kver=$(q "$kver")"
		echo "kbox_moddir=$(q "$moddir")"
		echo "KBOX_E2E_STDIN_MB=$(q "${KBOX_E2E_STDIN_MB:-}")"
		echo "kbox_cmd=$(q "${KBOX_HWKVM_CMD:-}")"
		echo "kbox_jobs=$(q "$jobs")"
		echo "kbox_image_dir=$(q "${KBOX_IMAGE_DIR:-}")"
	} >"$run/seed/job.env"
	# The job goes on the scratch disk, not on the kernel command line, so
	# that a path may hold any character; the disk is sparse.
	truncate -s 32G "$run/scratch.img" && mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1 \
		-O ^has_journal -d "$run/seed" "$run/scratch.img" >/dev/null || cannot "cannot make the scratch disk in $run"
	: >"$run/console"
	# --pdeathsig: QEMU ends with this script even when it is killed outright.
	setpriv --pdeathsig KILL -- qemu-system-x86_64 -accel tcg,thread=multi,tb-size=512 -M q35 -cpu EPYC,+svm,+npt \
		-smp "$cpus" -m "$mem" -nic none -nographic -no-reboot -nodefaults -serial stdio \
		-kernel "$kroot/boot/vmlinuz-$kver" -initrd "$initrd" -append "$cmdline" \
		-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
		-drive "file=$run/scratch.img,if=virtio,format=raw,cache=unsafe,discard=unmap" \
		</dev/null >"$run/console" 2>"$run/qemu.err" &
	qpid=$!
	echo "$qpid" >"$run/qemu.pid"
	# L1's console (the suites' output; the kernel is quiet) goes to our
	# output as it comes, and to $log; heartbeats only to $log.
	tail -n +1 -F --pid="$qpid" "$run/console" 2>/dev/null |
		sed -u 's/\r$//; s/\x1b\[[0-9;?]*[A-Za-z]//g; s/^\x1bc//' | tee -a "$log" |
		grep --line-buffered -v '^hwkvm-heartbeat' &
	_froze=0
	_seen=$(date +%s)
	_size=0
	while kill -0 "$qpid" 2>/dev/null; do
		_now=$(date +%s)
		if [ "$_now" -ge "$deadline" ]; then
			echo "hwkvm: L1 ran past ${total_timeout}s; stopping it" >&2
			kill "$qpid" 2>/dev/null
			break
		fi
		_n=$(stat -c %s "$run/console" 2>/dev/null || echo 0)
		if [ "$_n" != "$_size" ]; then
			_size=$_n _seen=$_now
		elif [ $((_now - _seen)) -ge "$stale" ]; then
			echo "hwkvm: L1 has printed nothing, not even its heartbeat, for ${stale}s: it froze; stopping it" >&2
			_froze=1
			kill "$qpid" 2>/dev/null
			break
		fi
		sleep 2
	done
	wait "$qpid" 2>/dev/null
	qrc=$?
	qpid=
	# tail ends by itself once QEMU has gone.
	wait
	[ "$_froze" = 1 ] && return 2
	# L1's kernel panicking (seen once, in a garbage guest of the KVM
	# harness under emulated SVM) is L1 failing, like a freeze.
	grep -q 'Kernel panic - not syncing' "$run/console" && return 3
	grep -q '^hwkvm-result: ' "$run/console" && return 0
	return 1
}

echo "hwkvm: L1 $pkg $ver, $cpus vCPUs, $mem MiB, TCG with AMD SVM+NPT; suites:$items"
echo "hwkvm: L1's console goes to $log"
t0=$(date +%s)
deadline=$((t0 + total_timeout))
todo=$items
P=0 F=0 n=0
while :; do
	n=$((n + 1))
	# shellcheck disable=SC2086
	boot_l1 $todo
	r=$?
	secs=$(($(date +%s) - t0))
	if [ $r = 0 ]; then
		res=$(sed -n 's/^hwkvm-result: //p' "$run/console" | tr -d '\r' | tail -1)
		P=$((P + ${res%% *}))
		F=$((F + $(echo "$res" | cut -d' ' -f2)))
		echo "hwkvm: L1 run took ${secs}s"
		break
	fi
	# What the suites that ended counted stays counted.
	done_items=$(sed -n 's/^hwkvm: \([^ ]*@[a-z]*\): [0-9]* passed, [0-9]* failed.*/\1/p' "$run/console" | tr -d '\r')
	P=$((P + $(sed -n 's/^hwkvm: [^ ]*: \([0-9]*\) passed, [0-9]* failed.*/\1/p' "$run/console" | awk '{ n += $1 } END { print n + 0 }')))
	F=$((F + $(sed -n 's/^hwkvm: [^ ]*: [0-9]* passed, \([0-9]*\) failed.*/\1/p' "$run/console" | awk '{ n += $1 } END { print n + 0 }')))
	left=
	for i in $todo; do
		echo "$done_items" | grep -qxF "$i" || left="$left $i"
	done
	if [ $r = 3 ]; then
		echo "hwkvm: L1's kernel panicked:"
		grep -A3 'Kernel panic - not syncing' "$run/console" | sed 's/^/hwkvm:   /'
	fi
	if [ $r -ge 2 ] && [ "$n" -lt "$attempts" ] && [ -n "$left" ] && [ "$(date +%s)" -lt "$deadline" ]; then
		echo "hwkvm: L1 $( [ $r = 2 ] && echo froze || echo panicked ) during $(echo $left | cut -d' ' -f1) (attempt $n of $attempts); the suites left run again in a fresh L1:$left"
		todo=$left
		# A frozen L1 was, each time it was looked at, a loaded one (two
		# lanes of heavy suites on its one emulated vCPU): the retry
		# runs one suite at a time.
		if [ $r = 2 ] && [ "$jobs" = 2 ]; then
			jobs=1
			echo "hwkvm: the retry runs in one lane"
		fi
		continue
	fi
	echo "hwkvm: L1 ended without a result (QEMU exit $qrc, ${secs}s); the console's last lines:" >&2
	grep -v '^hwkvm-heartbeat' "$run/console" | tail -30 | sed 's/^/hwkvm:   /' >&2
	grep -v "TCG doesn't support requested feature" "$run/qemu.err" | sed 's/^/hwkvm: qemu: /' >&2
	echo "not ok - L1 did not finish:$left"
	F=$((F + 1))
	echo "$label: $P passed, $F failed"
	exit 1
done
echo "$label: $P passed, $F failed"
[ "$F" -eq 0 ]
