#!/bin/sh
# Build one variant of the kbox guest kernel from Debian's linux-source-6.1.
#
#   kernel-config/build.sh VARIANT OUTDIR
#
# VARIANT is "std" (hardware KVM: kbox.config and containers.config) or
# "pvm" (PVM hosts: those plus pvm.config and pvm-compat.patch).  The result (vmlinux, bzImage, config)
# is cached under $KBOX_CACHE/kernel/<hash of every input> so that a clean
# checkout, CI included, rebuilds only when an input changed; OUTDIR gets
# copies of the cached files.
set -eu

variant=${1:?usage: build.sh std|pvm OUTDIR}
outdir=${2:?usage: build.sh std|pvm OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
cache=${KBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kbox}
tarball=/usr/src/linux-source-6.1.tar.xz

case $variant in
std) fragments="$here/kbox.config $here/containers.config"; patches="" ;;
pvm) fragments="$here/kbox.config $here/containers.config $here/pvm.config"; patches="$here/pvm-compat.patch" ;;
*) echo "build.sh: unknown variant '$variant' (want std or pvm)" >&2; exit 2 ;;
esac

if [ ! -r "$tarball" ]; then
	echo "build.sh: $tarball is missing; run 'sudo make deps' first" >&2
	exit 1
fi

srcver=$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null || echo unknown)
key=$( { echo "$variant $srcver"; cat "$here/build.sh" $fragments $patches; } |
	sha256sum | cut -c1-16)
dest="$cache/kernel/$variant-$key"

# One build of a variant at a time per cache: another checkout building
# the same variant (another input set) would have its tree removed below.
# The lock is held until this script ends; a waiter then finds the kernel
# built, or builds its own.
mkdir -p "$cache/build"
exec 9>"$cache/build/$variant.lock"
if ! flock -n 9; then
	echo "kernel: waiting for another $variant build in $cache"
	flock 9
fi
if [ ! -f "$dest/vmlinux" ]; then
	work="$cache/build/$variant-$key"
	# A build of an older input set (or one that failed) is of no use.
	rm -rf "$cache/build/$variant"-*
	mkdir -p "$work"
	echo "kernel: building $variant ($key) in $work"
	tar -C "$work" -xf "$tarball"
	src="$work/linux-source-6.1"
	for p in $patches; do
		patch -d "$src" -p1 --quiet < "$p"
	done
	jobs=$(nproc)
	make -C "$src" -s ARCH=x86_64 tinyconfig
	# shellcheck disable=SC2086
	(cd "$src" && ./scripts/kconfig/merge_config.sh -m -O . .config $fragments >/dev/null)
	make -C "$src" -s ARCH=x86_64 olddefconfig
	# Every option our fragments ask for must have survived Kconfig's
	# dependency resolution; a silent drop would surface much later as a
	# guest that cannot mount or reach a device.
	# Later fragments override earlier ones, as merge_config.sh does.
	cat $fragments | grep -E '^CONFIG_[A-Z0-9_]+=' |
		awk -F= '{ v[$1] = $0; if (!($1 in o)) { o[$1] = n++; k[n-1] = $1 } }
			END { for (i = 0; i < n; i++) print v[k[i]] }' |
		while IFS= read -r line; do
			opt=${line%%=*}; val=${line#*=}
			if [ "$val" = n ]; then
				if grep -q "^$opt=[ym]" "$src/.config"; then
					echo "kernel: $opt is still set" >&2; echo x
				fi
			elif ! grep -qx "$line" "$src/.config"; then
				echo "kernel: $line did not survive olddefconfig" >&2; echo x
			fi
		done > "$work/missing"
	missing=$(wc -l < "$work/missing")
	if [ "$missing" -ne 0 ]; then
		echo "build.sh: $missing config option(s) were dropped; fix kernel-config/" >&2
		exit 1
	fi
	make -C "$src" -s ARCH=x86_64 -j"$jobs" vmlinux bzImage
	mkdir -p "$dest.tmp"
	cp "$src/vmlinux" "$dest.tmp/vmlinux"
	cp "$src/arch/x86/boot/bzImage" "$dest.tmp/bzImage"
	cp "$src/.config" "$dest.tmp/config"
	rm -rf "$dest"
	mv "$dest.tmp" "$dest"
	rm -rf "$work"
fi

mkdir -p "$outdir"
for f in vmlinux bzImage config; do
	cp "$dest/$f" "$outdir/$f-$variant"
done
echo "kernel: $outdir/vmlinux-$variant ($variant-$key)"
