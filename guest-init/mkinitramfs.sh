#!/bin/sh
# Build the default initramfs: guest-init as /init and Debian's static
# busybox for a shell and the usual tools.
#   mkinitramfs.sh GUEST_INIT OUTPUT
set -eu
init=${1:?usage: mkinitramfs.sh GUEST_INIT OUTPUT}
out=${2:?usage: mkinitramfs.sh GUEST_INIT OUTPUT}
busybox=${BUSYBOX:-/bin/busybox}
if [ ! -x "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
	echo "mkinitramfs: $busybox is missing or not static; run 'sudo make deps' (busybox-static)" >&2
	exit 1
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/sbin" "$stage/usr/bin" "$stage/usr/sbin" "$stage/etc" \
	"$stage/root" "$stage/dev" "$stage/proc" "$stage/sys" "$stage/tmp" "$stage/run" \
	"$stage/kbox"
cp "$init" "$stage/init"
cp "$busybox" "$stage/bin/busybox"
for app in $("$busybox" --list-full); do
	[ -e "$stage/$app" ] || ln -s /bin/busybox "$stage/$app"
done
echo 'root:x:0:0:root:/root:/bin/sh' > "$stage/etc/passwd"
echo 'root:x:0:' > "$stage/etc/group"
chmod 1777 "$stage/tmp"
(cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc --reproducible -R 0:0 --quiet) > "$out.tmp"
mv "$out.tmp" "$out"
