#!/bin/sh
# Build the lwIP kbox links: Debian's source package, kbox's own options.
#
#   deps/lwip/build.sh OUTDIR
#
# OUTDIR (the Makefile's $(BUILD)/lwip) gets liblwip.a and include/ (lwIP's
# headers, Debian's Unix port's arch/ headers and deps/lwip/lwipopts.h),
# copied from a cache under $KBOX_CACHE/lwip/<version>-<hash of the
# inputs>, so a clean checkout, CI included, compiles lwIP only when the
# package version, the options or this script changed.
#
# The source package is fetched once per version with apt, from the deb
# entries of this machine's own apt sources turned into deb-src entries, in
# a private apt state (the machine's apt configuration is neither read
# for anything else nor changed; no root needed), and kept in the cache:
# the signed archive index vouches for the .dsc, the .dsc for the
# tarballs, and dpkg-source -x (dpkg-dev, `make deps`) checks them and
# applies Debian's patches into OUTDIR/src.
#
# KBOX_LWIP_VERSION picks another version of Debian's "lwip" source
# package than the one this script was tested with.
set -eu

out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
cache=${KBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kbox}
version=${KBOX_LWIP_VERSION:-2.1.3+dfsg1-2}
cc=${CC:-cc}

# What is compiled: the core, IPv4, IPv6 (empty while the options leave
# it out), Ethernet, tcpip.c (lwIP's thread, the core lock) and the port.
srcs="src/core/init.c src/core/def.c src/core/inet_chksum.c src/core/ip.c
	src/core/mem.c src/core/memp.c src/core/netif.c src/core/pbuf.c
	src/core/stats.c src/core/sys.c src/core/tcp.c src/core/tcp_in.c
	src/core/tcp_out.c src/core/timeouts.c src/core/udp.c
	src/core/ipv4/etharp.c src/core/ipv4/icmp.c src/core/ipv4/ip4.c
	src/core/ipv4/ip4_addr.c src/core/ipv4/ip4_frag.c
	src/core/ipv6/ethip6.c src/core/ipv6/icmp6.c src/core/ipv6/inet6.c
	src/core/ipv6/ip6.c src/core/ipv6/ip6_addr.c src/core/ipv6/ip6_frag.c
	src/core/ipv6/mld6.c src/core/ipv6/nd6.c
	src/api/err.c src/api/tcpip.c src/netif/ethernet.c port/sys_arch.c"

key=$( { echo "$version"; cat "$here/build.sh" "$here/lwipopts.h"; } | sha256sum | cut -c1-16)
name=$version-$key
dest=$cache/lwip/$name
pkg=$cache/lwip/pkg-$version

if [ -f "$out/liblwip.a" ] && [ "$(cat "$out/key" 2>/dev/null)" = "$name" ]; then
	exit 0
fi

# deb-src entries for every deb entry of the machine's apt sources, both
# formats; what the machine's apt does not use (disabled entries, other
# file names) is left out as apt leaves it out.
src_entries() {
	eval "$(apt-config shell SL Dir::Etc::sourcelist/f SP Dir::Etc::sourceparts/d)"
	for f in "${SL:-/etc/apt/sources.list}" "${SP:-/etc/apt/sources.list.d/}"*.list; do
		[ -r "$f" ] || continue
		sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f"
	done >"$1/src.list"
	for f in "${SP:-/etc/apt/sources.list.d/}"*.sources; do
		[ -r "$f" ] || continue
		awk 'function flush() { if (keep && !off && n) { for (i = 0; i < n; i++) print l[i]; print "" } n = keep = off = 0 }
			/^#/ { next }
			/^[[:space:]]*$/ { flush(); next }
			tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") keep = 1; l[n++] = "Types: deb-src"; next }
			tolower($1) == "enabled:" && tolower($2) == "no" { off = 1 }
			{ l[n++] = $0 }
			END { flush() }' "$f"
	done >"$1/src.sources"
	if ! grep -q . "$1/src.list" && ! grep -q . "$1/src.sources"; then
		echo "lwip: no deb entry in this machine's apt sources ($SL, $SP)" >&2
		exit 1
	fi
}

fetch() {
	t=$(mktemp -d)
	trap 'rm -rf "$t"' EXIT
	# apt run as root downloads as its own unprivileged user: let it in.
	chmod 0755 "$t"
	mkdir -p "$t/parts" "$t/lists/partial" "$t/cache/archives/partial" "$t/dl"
	src_entries "$t/parts"
	[ "$(id -u)" = 0 ] && chown _apt "$t/dl" 2>/dev/null || true
	set -- -o Dir::Etc::SourceList="$t/parts/src.list" -o Dir::Etc::SourceParts="$t/parts" \
		-o Dir::State::Lists="$t/lists" -o Dir::Cache="$t/cache" -o Debug::NoLocking=1
	echo "lwip: fetching Debian's source package lwip $version"
	# An entry without source indexes (a third-party archive) makes update
	# complain; only the source package found or not decides.
	apt-get "$@" -q update >"$t/update.log" 2>&1 || true
	if ! (cd "$t/dl" && apt-get "$@" -q source --download-only "lwip=$version" >"$t/source.log" 2>&1); then
		cat "$t/update.log" "$t/source.log" >&2
		echo "lwip: could not fetch the source package lwip=$version through this machine's apt sources" >&2
		exit 1
	fi
	mkdir -p "$pkg.tmp"
	cp "$t/dl"/lwip_* "$pkg.tmp/"
	rm -rf "$pkg"
	mv "$pkg.tmp" "$pkg"
	rm -rf "$t"
	trap - EXIT
}

if [ ! -f "$dest/liblwip.a" ]; then
	if ! command -v dpkg-source >/dev/null; then
		echo "lwip: dpkg-source is missing; run 'sudo make deps' first" >&2
		exit 1
	fi
	ls "$pkg"/*.dsc >/dev/null 2>&1 || fetch
	echo "lwip: building $name in $out"
	rm -rf "$out/src" "$out/obj"
	mkdir -p "$out"
	dpkg-source -q --no-copy -x "$pkg"/lwip_*.dsc "$out/src" >"$out/unpack.log" 2>&1 || {
		cat "$out/unpack.log" >&2
		exit 1
	}
	# The package's own lwipopts.h (the GNU Hurd's) must never be seen:
	# ours comes first and is the only one in include/.
	inc="$out/obj/include"
	mkdir -p "$inc/arch"
	cp -R "$out/src/src/include/." "$inc/"
	cp "$out/src/port/include/arch/cc.h" "$out/src/port/include/arch/sys_arch.h" "$inc/arch/"
	cp "$here/lwipopts.h" "$inc/"
	objs=
	for s in $srcs; do
		o="$out/obj/$(echo "$s" | tr / _).o"
		# shellcheck disable=SC2086
		$cc -std=gnu11 -O2 -g -fno-strict-aliasing -Wall -Wno-address -Werror=overflow -I"$inc" -c -o "$o" "$out/src/$s"
		objs="$objs $o"
	done
	mkdir -p "$dest.tmp"
	rm -f "$dest.tmp/liblwip.a"
	# shellcheck disable=SC2086
	ar rcs "$dest.tmp/liblwip.a" $objs
	cp -R "$inc" "$dest.tmp/include"
	rm -rf "$dest"
	mv "$dest.tmp" "$dest"
	rm -rf "$out/obj"
fi

rm -rf "$out/include" "$out/liblwip.a"
mkdir -p "$out"
cp -R "$dest/include" "$out/include"
cp "$dest/liblwip.a" "$out/liblwip.a"
echo "$name" >"$out/key"
