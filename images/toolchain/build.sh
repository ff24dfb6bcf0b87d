#!/bin/sh
# The toolchain image: a Debian bookworm root (minbase) with git, curl,
# ca-certificates, python3, node/npm, build-essential and podman (with
# crun and slirp4netns, set up for the guest: docs/disks.md), plus the three
# agents from npm (Claude Code, Codex, OpenCode: AGENTS), imported into
# kbox's store as NAME (default
# "toolchain").  Needs root (debootstrap and chroot) and the network, but
# only Debian's archive and the npm registry.  No Docker.
#
#   images/toolchain/build.sh BUILD_DIR
#
# Environment: FORCE=1 rebuilds even if the image is in the store;
# NAME=toolchain the image name; MIRROR the Debian mirror (default: the
# one this machine's apt uses for SUITE main); SUITE=bookworm;
# WORK=DIR where the root is built (default BUILD_DIR/toolchain-rootfs,
# removed after the import unless KEEP=1); NPM_REGISTRY the npm registry (default: the one
# this machine's npm is configured with);
# AGENTS the npm packages of the agents (pinned to the versions the tests
# were written against; "" for none).
set -eu

build=${1:-build}
name=${NAME:-toolchain}
suite=${SUITE:-bookworm}
# The machine's own mirror, as its apt knows it (either sources format).
mirror=${MIRROR:-$(apt-cache policy 2>/dev/null | awk -v s="$suite" '$3 == s "/main" && $2 ~ /^(https?|file):/ { print $2; exit }')}
registry=${NPM_REGISTRY:-$(npm config get registry 2>/dev/null)}
agents=${AGENTS-@anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 opencode-ai@1.18.33}
kbox="$build/kbox"
root=${WORK:-$build/toolchain-rootfs}
mounted=

die() { echo "toolchain-image: $*" >&2; exit 1; }
say() { echo "toolchain-image: $*"; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap and chroot); run: sudo make toolchain-image"
command -v debootstrap >/dev/null 2>&1 ||
	die "debootstrap is missing; install the Debian package: apt-get install debootstrap (or sudo make deps)"
[ -x "$kbox" ] || die "$kbox is missing; run make first"
[ -n "$registry" ] || [ -z "$agents" ] || die "no npm registry: this machine's npm has none configured (or no npm); set NPM_REGISTRY=URI"
[ -n "$mirror" ] || die "this machine's apt has no source for $suite main; set MIRROR=URI of a Debian mirror"

if [ "${FORCE:-0}" != 1 ] && "$kbox" image path "$name" >/dev/null 2>&1; then
	say "$name is already in the store ($("$kbox" image path "$name")); FORCE=1 rebuilds"
	exit 0
fi

# Unmount in reverse order whatever we mounted, on every exit path (an
# interrupted apt or npm must not leave /proc or /dev bound into the
# build folder, where a later rm -rf would reach the host's /dev).
cleanup() {
	rc=$?
	for m in $mounted; do
		umount -l "$root/$m" 2>/dev/null || true
	done
	mounted=
	[ $rc = 0 ] || say "failed (exit $rc); the partial root stays in $root for a look"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

bind() { # bind SRC DST-under-root [fstype]
	mkdir -p "$root/$2"
	if [ $# -gt 2 ]; then mount -t "$3" "$1" "$root/$2"; else mount --bind "$1" "$root/$2"; fi
	mounted="$2 $mounted"
}

# Mounts left by an earlier killed run would make rm -rf walk the host.
for m in dev/pts dev proc sys; do
	mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m"
done

start=$(date +%s)
rm -rf "$root"
mkdir -p "$root"
say "debootstrap $suite from $mirror into $root"
debootstrap --variant=minbase "$suite" "$root" "$mirror" || die "debootstrap failed (see above; $root/debootstrap/debootstrap.log)"
t_boot=$(($(date +%s) - start))

bind proc proc proc
bind sysfs sys sysfs
bind /dev dev
bind devpts dev/pts devpts
# The chroot resolves the mirror and the registry with the host's resolver.
cp -L /etc/resolv.conf "$root/etc/resolv.conf"

inchroot() {
	chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

echo "deb $mirror $suite main" >"$root/etc/apt/sources.list"
say "apt-get install git curl ca-certificates python3 nodejs npm build-essential podman crun slirp4netns"
inchroot apt-get update -q || die "apt-get update in the chroot failed"
inchroot apt-get install -y -q --no-install-recommends git curl ca-certificates python3 nodejs npm \
	build-essential less procps openssh-client podman crun slirp4netns ||
	die "apt-get install in the chroot failed"
t_apt=$(($(date +%s) - start))

# npm inside the chroot trusts what the host trusts (a host behind a
# TLS-inspecting proxy has its CA there), for this download only: the
# image keeps Debian's own bundle.
cafile=${NPM_CAFILE:-/etc/ssl/certs/ca-certificates.crt}
npmca=
if [ -r "$cafile" ]; then
	cp "$cafile" "$root/tmp/host-ca.crt"
	npmca="--cafile=/tmp/host-ca.crt"
fi
if [ -n "$agents" ]; then
	say "npm install -g $agents"
	# shellcheck disable=SC2086
	inchroot ${npmca:+NODE_EXTRA_CA_CERTS=/tmp/host-ca.crt} npm install -g --no-fund --no-audit \
		--registry "$registry" $npmca $agents || die "npm install -g $agents failed"
fi
rm -f "$root/tmp/host-ca.crt"
# npm installs every x64 build of OpenCode that fits the build host
# (~180 MiB each) and its postinstall picks one by the host's CPU.  The
# guest's CPU is not the host's (under PVM it shows no AVX at all), so the
# image runs the baseline build, which needs none, and keeps only it.
oc="$root/usr/local/lib/node_modules/opencode-ai"
base="$oc/node_modules/opencode-linux-x64-baseline/bin/opencode"
if [ -x "$base" ]; then
	ln -f "$base" "$oc/bin/opencode.exe"
	for d in "$oc"/node_modules/opencode-linux-*; do
		[ "$d" = "$oc/node_modules/opencode-linux-x64-baseline" ] || rm -rf "$d"
	done
fi
# Claude Code's wrapper likewise has both glibc and musl builds fetched;
# Debian is glibc.
rm -rf "$root/usr/local/lib/node_modules/@anthropic-ai/claude-code/node_modules/@anthropic-ai/claude-code-linux-x64-musl"
for a in $agents; do
	case $a in
	opencode-ai*) c=opencode ;;
	@anthropic-ai/claude-code*) c=claude ;;
	@openai/codex*) c=codex ;;
	*) continue ;;
	esac
	v=$(inchroot "$c" --version 2>&1 | head -1) || die "$c --version fails in the chroot: $v"
	say "$c --version: $v"
done
t_npm=$(($(date +%s) - start))

# What the sandbox needs of the root and debootstrap does not give:
# the guest's resolver is kbox's (guest-init writes resolv.conf in the
# RAM layer; this is the fallback for a read-only root), a hostname, and a
# home for the agent.
printf 'nameserver 10.0.2.2\n' >"$root/etc/resolv.conf"
echo kbox >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tkbox\n' >"$root/etc/hosts"
mkdir -p "$root/workspace" "$root/root/.config" "$root/root/.local/share" "$root/root/.cache"
# An ordinary user's kbox serves an image of root's store as that user
# (docs/images.md): a 0700 /root would be closed to guest root then, and
# podman, whose HOME it is, stops at its first look into ~/.config.
chmod 0755 "$root/root"

# podman as root in the guest (docs/disks.md, "Containers"): images and
# containers on the disk volume at /var/lib/containers (native overlay on
# ext4), its run state on guest-init's /run tmpfs; no systemd, so cgroups
# through cgroupfs and events in a file.  The guest kernel has TUN, not
# veth, bridge or netfilter: containers and build steps share the guest's
# network by default (netns host, under kbox's policy like any process),
# and a container that publishes ports gets --network slirp4netns -p.
# The CNI backend stays unused: it only keeps podman from looking for
# netavark, which is not installed.
mkdir -p "$root/etc/containers"
cat >"$root/etc/containers/storage.conf" <<'EOF'
# kbox: podman's storage on the disk volume (--disk NAME:/var/lib/containers).
[storage]
driver = "overlay"
graphroot = "/var/lib/containers/storage"
runroot = "/run/containers/storage"
EOF
cat >"$root/etc/containers/containers.conf" <<'EOF'
# kbox: podman in a sandbox without systemd (docs/disks.md).
[containers]
netns = "host"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "crun"
network_cmd_path = "/usr/bin/slirp4netns"
[network]
network_backend = "cni"
EOF

# Caches and lists that only take room in every sandbox's view.
inchroot apt-get clean
inchroot npm cache clean --force >/dev/null 2>&1 || true
rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin "$root/root/.npm" "$root/tmp/"* \
	"$root/var/log/"*.log "$root/var/log/apt/"*

for m in $mounted; do umount "$root/$m" || umount -l "$root/$m"; done
mounted=

size=$(du -sm "$root" | cut -f1)
say "importing $root (${size} MiB) as $name"
"$kbox" image import "$root" --name "$name" || die "kbox image import failed"
t_all=$(($(date +%s) - start))
say "done: debootstrap ${t_boot}s, +apt $((t_apt - t_boot))s, +npm $((t_npm - t_apt))s, total ${t_all}s, ${size} MiB"
[ "${KEEP:-0}" = 1 ] || rm -rf "$root"
