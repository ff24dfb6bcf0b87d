#!/bin/sh
# End-to-end test of containers in the sandbox (docs/disks.md,
# "Containers"): podman as guest root in the toolchain image, its storage
# on a disk volume at /var/lib/containers.  One detached boot
#   - podman load of a docker-archive that this script builds on the host
#     (static busybox, a hand-written manifest.json and config), shared
#     read-only with -v; no registry, no network;
#   - podman run --rm of it;
#   - podman build of a two-stage Containerfile FROM it (a RUN step in the
#     first, the second stage copies from the first);
#   - podman run --rm printing a marker, and one with a memory limit that
#     the container sees in its cgroup v2;
#   - a container publishing a port (--network slirp4netns -p 8080:80)
#     that curl in the guest reaches, and that kbox forwards to the host
#     (-p 127.0.0.1:PORT:8080), reached by curl on the host;
# then a second `kbox run` with the same --disk lists the built image, the
# same image id, and runs it without building.
#
# The volume lives in this run's scratch folder (KBOX_DISK_DIR); the
# network is an allowlist of nothing (every outgoing connection refused),
# and as root the whole script runs in a network namespace of its own.
# The image: KBOX_TOOLCHAIN_IMAGE (a name in the store or a root folder;
# default "toolchain"), skipped when it is not there or has no podman.
#   tests/e2e/podman.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
kbox="$(cd "$(dirname "$kbox")" && pwd)/$(basename "$kbox")"
e2e_toolchain_image
case $image in
*/*) iroot=$image ;;
*) iroot=$("$kbox" image path "$image") ;;
esac
[ -x "$iroot/usr/bin/podman" ] ||
	e2e_skip "the $image image has no podman; rebuild it with: sudo FORCE=1 make toolchain-image"
busybox=${BUSYBOX:-/bin/busybox}
[ -x "$busybox" ] && ! ldd "$busybox" >/dev/null 2>&1 ||
	e2e_skip "$busybox is not a static busybox (apt-get install busybox-static)"
for t in curl tar sha256sum; do
	command -v "$t" >/dev/null 2>&1 || e2e_skip "$t is missing on the host"
done
e2e_need_kvm "the boots"

e2e_own_netns "$@"

e2e_tmp
sbx="kbox-e2e-podman-$$"
# Run by e2e_tmp's exit path before $tmp goes.
e2e_on_exit() {
	"$kbox" stop -t 5 "$sbx" >/dev/null 2>&1
	chmod -R u+rwX "$tmp" 2>/dev/null
}
export KBOX_DISK_DIR="$tmp/disks"
vol=containers
share="$tmp/share"
mkdir -p "$share/ctx"
t_mult=${KBOX_TIMEOUT_MULT:-1}

# --- the base image: a docker-archive of static busybox, by hand ---
b="$tmp/base"
mkdir -p "$b/rootfs/bin" "$b/rootfs/www" "$b/rootfs/tmp" "$b/rootfs/etc"
cp "$busybox" "$b/rootfs/bin/busybox"
for a in sh cat echo mkdir ls httpd; do ln -s busybox "$b/rootfs/bin/$a"; done
echo 'root:x:0:0:root:/:/bin/sh' >"$b/rootfs/etc/passwd"
echo 'root:x:0:' >"$b/rootfs/etc/group"
mkdir -p "$b/arch/layer"
tar -C "$b/rootfs" --numeric-owner --owner=0 --group=0 --mtime=@1700000000 --sort=name \
	-cf "$b/arch/layer/layer.tar" .
diff_id=$(sha256sum "$b/arch/layer/layer.tar" | cut -d' ' -f1)
# The history entry matters: buildah counts an image's layers by it (a
# base without one fails the second COPY of a build).
printf '{"architecture":"amd64","os":"linux","created":"2023-11-14T22:13:20Z",' >"$b/config.json"
printf '"config":{"Cmd":["/bin/sh"],"Env":["PATH=/bin"]},' >>"$b/config.json"
printf '"history":[{"created":"2023-11-14T22:13:20Z","created_by":"kbox test: static busybox"}],' >>"$b/config.json"
printf '"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$diff_id" >>"$b/config.json"
cfg_id=$(sha256sum "$b/config.json" | cut -d' ' -f1)
cp "$b/config.json" "$b/arch/$cfg_id.json"
printf '[{"Config":"%s.json","RepoTags":["localhost/kbox-base:1"],"Layers":["layer/layer.tar"]}]' \
	"$cfg_id" >"$b/arch/manifest.json"
tar -C "$b/arch" --numeric-owner --owner=0 --group=0 -cf "$share/base.tar" manifest.json "$cfg_id.json" layer
host_check "the base archive is built on the host" [ -s "$share/base.tar" ]

cat >"$share/ctx/Containerfile" <<'EOF'
FROM localhost/kbox-base:1 AS build
RUN mkdir -p /out && echo kbox-podman-marker > /out/marker && echo '<h1>kbox container</h1>' > /out/index.html
FROM localhost/kbox-base:1
COPY --from=build /out/marker /marker
COPY --from=build /out/index.html /www/index.html
CMD ["/bin/cat", "/marker"]
EOF

# g NAME COMMAND...: COMMAND through kbox exec in the sandbox; ok when it
# exits 0; its output in $tmp/g.out.
g() {
	_n=$1
	shift
	timeout "$((boot_timeout * t_mult))" "$kbox" exec "$sbx" -- "$@" >"$tmp/g.out" 2>"$tmp/g.err"
	_rc=$?
	if [ "$_rc" -eq 0 ]; then
		ok "$_n"
	else
		not_ok "$_n (exit $_rc)" "$(tail -8 "$tmp/g.err"; tail -4 "$tmp/g.out")"
	fi
	return "$_rc"
}

# --- the first boot: load, build, run, publish ---
hp=$(e2e_free_port)
start=$(date +%s)
timeout "$boot_timeout" "$kbox" run -d -n "$sbx" --image "$image" -m 1024 -c 2 --no-project \
	--disk "$vol:/var/lib/containers:size=2G" -v "$share:/share:ro" \
	--network allowlist -p "127.0.0.1:$hp:8080" \
	-- sleep 100000 >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
host_check "kbox run -d of the toolchain image with a disk starts (exit $rc)" [ "$rc" -eq 0 ]
if [ "$rc" -ne 0 ]; then
	sed 's/^/#   /' "$tmp/run.err" | tail -5
	e2e_finish
fi
echo "# booted in $(($(date +%s) - start))s"
host_check "the volume is in this run's disk folder" [ -f "$KBOX_DISK_DIR/$vol.img" ]

g "cgroup v2 is mounted in the guest" sh -c 'grep -qw memory /sys/fs/cgroup/cgroup.controllers'
g "podman info: cgroupfs, cgroup v2, overlay on the disk" sh -c \
	'podman info --format "{{.Host.CgroupManager}} {{.Host.CgroupsVersion}} {{.Store.GraphDriverName}} {{.Store.GraphRoot}}"' &&
	{ grep -qx 'cgroupfs v2 overlay /var/lib/containers/storage' "$tmp/g.out" && ok "podman info says so" ||
		not_ok "podman info says so" "$(cat "$tmp/g.out")"; }
s=$(date +%s)
g "podman load of the host's archive" podman load -i /share/base.tar &&
	{ grep -q 'localhost/kbox-base:1' "$tmp/g.out" && ok "podman load names it" ||
		not_ok "podman load names it" "$(cat "$tmp/g.out")"; }
echo "# podman load: $(($(date +%s) - s))s"
s=$(date +%s)
g "podman run --rm of the loaded image (crun, cgroup v2, seccomp)" podman run --rm --pull=never localhost/kbox-base:1 echo base-runs
host_check "the loaded image prints" grep -qx base-runs "$tmp/g.out"
echo "# podman run --rm: $(($(date +%s) - s))s"
s=$(date +%s)
g "podman build of a two-stage Containerfile" podman build -q -t localhost/kbox-built:1 /share/ctx
echo "# podman build: $(($(date +%s) - s))s"
g "podman inspect of the built image" podman image inspect --format '{{.Id}}' localhost/kbox-built:1
built_id=$(sed 's/^sha256://' "$tmp/g.out")
s=$(date +%s)
g "podman run --rm" podman run --rm --pull=never localhost/kbox-built:1
host_check "podman run --rm prints the marker the first stage wrote" grep -qx kbox-podman-marker "$tmp/g.out"
echo "# podman run --rm: $(($(date +%s) - s))s"
g "podman run --rm --memory 64m" podman run --rm --pull=never --memory 64m localhost/kbox-built:1 cat /sys/fs/cgroup/memory.max
host_check "the container's cgroup has the memory limit" grep -qx 67108864 "$tmp/g.out"
g "podman run -d --network slirp4netns -p 8080:80" podman run -d --pull=never --name web --network slirp4netns \
	-p 8080:80 localhost/kbox-built:1 httpd -f -p 80 -h /www
# curl in the guest, retried while httpd comes up.
g "curl in the guest reaches the container's published port" sh -c \
	'i=0; while [ $i -lt 30 ]; do curl -fsS --max-time 5 http://127.0.0.1:8080/index.html && exit 0; sleep 1; i=$((i+1)); done; exit 1'
host_check "the guest got the container's page" grep -qx '<h1>kbox container</h1>' "$tmp/g.out"
got=
i=0
while [ $i -lt 30 ]; do
	got=$(curl -sS --max-time 5 "http://127.0.0.1:$hp/index.html" 2>/dev/null) && [ -n "$got" ] && break
	sleep 1
	i=$((i + 1))
done
host_check "curl on the host reaches the container through kbox's -p 127.0.0.1:$hp:8080" \
	[ "$got" = "<h1>kbox container</h1>" ]
g "podman rm -f of the published container" podman rm -f web
"$kbox" stop -t 5 "$sbx" >/dev/null 2>&1

# --- the second boot on the same volume: the image is there ---
start=$(date +%s)
timeout "$((boot_timeout * t_mult))" "$kbox" run --image "$image" -m 1024 -c 2 --no-project \
	--disk "$vol:/var/lib/containers" --network none \
	-- sh -c 'podman images --no-trunc --format "{{.Repository}}:{{.Tag}} {{.ID}}" | sed "s/ sha256:/ /" &&
		podman run --rm --pull=never localhost/kbox-built:1' \
	>"$tmp/run2.out" 2>"$tmp/run2.err"
rc=$?
echo "# second run: $(($(date +%s) - start))s"
host_check "the second kbox run on the volume (exit $rc)" [ "$rc" -eq 0 ]
host_check "it lists the built image, same id, without building" \
	grep -qx "localhost/kbox-built:1 $built_id" "$tmp/run2.out"
host_check "it runs the built image" grep -qx kbox-podman-marker "$tmp/run2.out"
if [ "$fail" -ne 0 ]; then
	echo "# first run: $(tail -5 "$tmp/run.err")"
	echo "# second run:"
	tail -10 "$tmp/run2.err" | sed 's/^/#   /'
	tail -5 "$tmp/run2.out" | sed 's/^/#   /'
fi
e2e_finish
