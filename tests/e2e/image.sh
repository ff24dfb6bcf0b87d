#!/bin/sh
# End-to-end test of `kbox run --image DIR`: a root filesystem folder
# served read-only over virtio-fs under a tmpfs overlay in the guest.  The
# image is built here from the host's static busybox and a few files (no
# debootstrap offline).  Two sandboxes boot at once on the same image, each
# runs checks from the image itself and writes into its overlay; they meet
# through a shared -v folder so that they are known to overlap.  The host
# then checks that the image folder did not change by a byte.
#   tests/e2e/image.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
pids=
cleanup() {
	for p in $pids; do kill "$p" 2> /dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
busybox=${BUSYBOX:-/bin/busybox}
if [ ! -x "$busybox" ] || ldd "$busybox" > /dev/null 2>&1; then
	echo "e2e: $busybox is missing or not static (busybox-static)" >&2
	exit 1
fi

img="$tmp/image"
share="$tmp/share"
mkdir -p "$img/bin" "$img/sbin" "$img/usr/bin" "$img/usr/sbin" "$img/etc" "$img/root" \
	"$share"
cp "$busybox" "$img/bin/busybox"
for app in $("$busybox" --list-full); do
	[ -e "$img/$app" ] || ln -s /bin/busybox "$img/$app"
done
echo 'root:x:0:0:root:/root:/bin/sh' > "$img/etc/passwd"
echo 'root:x:0:' > "$img/etc/group"
printf 'kbox test image 1\n' > "$img/etc/image-release"
# Hidden names are a rule for user folders, not for an image.
printf 'IMAGE=1\n' > "$img/.env"

cat > "$img/checks.sh" <<'EOF'
me=$1 other=$2
t() { name=$1; shift; if "$@" > /tmp/out 2>&1; then echo "ok $me: $name"; else echo "not ok $me: $name: $(head -c 200 /tmp/out)"; fi; }
t "root is an overlay" sh -c "grep -q '^overlay / overlay' /proc/mounts"
t "image file readable" [ "$(cat /etc/image-release)" = "kbox test image 1" ]
t "nothing hidden in an image" [ "$(cat /.env)" = IMAGE=1 ]
t "new file in /etc" sh -c "echo $me > /etc/$me && [ \"\$(cat /etc/$me)\" = $me ]"
t "append to an image file" sh -c "echo $me >> /etc/image-release && [ \"\$(tail -1 /etc/image-release)\" = $me ]"
t "remove an image file" sh -c "rm /etc/group && [ ! -e /etc/group ]"
t "mkdir in the overlay" mkdir -p /opt/$me/sub
t "the -v share is there" sh -c "grep -q ' /share virtiofs rw,' /proc/mounts"
t "/proc, /sys, /dev, /tmp work" sh -c "[ -r /proc/self/status ] && [ -d /sys/kernel ] && [ -c /dev/null ] && echo x > /tmp/x"
# Wait (up to 240 s) for the other sandbox: then both are up at once.
echo up > /share/$me-up
i=0
while [ ! -e /share/$other-up ] && [ $i -lt 240 ]; do sleep 1; i=$((i + 1)); done
t "the other sandbox runs at the same time" [ -e /share/$other-up ]
t "the other's writes are not here" sh -c "[ ! -e /etc/$other ] && [ ! -e /opt/$other ]"
echo done > /share/$me-done
i=0
while [ ! -e /share/$other-done ] && [ $i -lt 240 ]; do sleep 1; i=$((i + 1)); done
t "the other's writes never showed up" sh -c "[ ! -e /etc/$other ] && [ \"\$(tail -1 /etc/image-release)\" = $me ]"
echo done
EOF
snapshot() {
	(cd "$img" && find . -printf '%p %y %m %s %T@ %l\n' | LC_ALL=C sort &&
		find . -type f -exec md5sum {} + | LC_ALL=C sort)
}
snapshot > "$tmp/before"

# --- refusals, no boot ---
e2e_refuse "missing image" "No such file" --image "$tmp/nope"
e2e_refuse "image that is a file" "not a directory" --image "$img/etc/passwd"
printf 'image: ./nope\n' > "$tmp/bad.yaml"
e2e_refuse "image: in sandbox.yaml that is missing" "cannot use the image $tmp/./nope" --conf "$tmp/bad.yaml"
e2e_refuse "image and eight mounts" "too many" --image "$img" -v "$share:/1" -v "$share:/2" \
	-v "$share:/3" -v "$share:/4" -v "$share:/5" -v "$share:/6" -v "$share:/7" -v "$share:/8"

e2e_need_kvm "the boots"

# --- two sandboxes on one image, one from --image, one from sandbox.yaml ---
printf 'image: ./image\n' > "$tmp/sandbox.yaml"
start=$(date +%s)
timeout "$boot_timeout" "$kbox" run --image "$img" -v "$share:/share" \
	-- /bin/sh /checks.sh a b > "$tmp/out-a" 2> "$tmp/err-a" &
pa=$!
timeout "$boot_timeout" "$kbox" run --conf "$tmp/sandbox.yaml" -v "$share:/share" \
	-- /bin/sh /checks.sh b a > "$tmp/out-b" 2> "$tmp/err-b" &
pb=$!
pids="$pa $pb"
wait "$pa"
rca=$?
wait "$pb"
rcb=$?
pids=
echo "# two boots on one image and the checks: $(( $(date +%s) - start ))s"
for s in a b; do
	eval rc=\$rc$s
	e2e_ran_to_end "sandbox $s" "$rc" "$tmp/out-$s" "$tmp/err-$s"
	e2e_guest_results "guest " "$tmp/out-$s"
done

# --- the host's view ---
snapshot > "$tmp/after"
host_check "host: the image folder is unchanged" cmp -s "$tmp/before" "$tmp/after"
host_check "host: the shared folder got both markers" \
	test -e "$share/a-up" -a -e "$share/b-up"

e2e_finish
