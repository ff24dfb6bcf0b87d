#!/bin/sh
# End-to-end test of `kbox run -v`: host folders shared over virtio-fs with
# the real kernel and guest-init.  One boot (they are slow on PVM hosts)
# runs a script in the guest that prints "ok NAME" or "not ok NAME" for
# each check and facts for the host ("md5 ..."); the host then checks what
# landed in its folders.  The CLI's own refusals are tested without a boot.
# Takes a few minutes on a PVM host: every process the script starts costs
# ~0.4 s there, and guest kernel work (copies included) is emulated.
#   tests/e2e/fs.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
e2e_tmp

proj="$tmp/proj"
cfg="$tmp/cfg"
outside="$tmp/outside"
mkdir -p "$proj/sub" "$cfg" "$outside"
printf 'hello\n' > "$proj/readme"
printf 'SECRET=1\n' > "$proj/.env"
printf 'SECRET=2\n' > "$proj/.env.local"
printf 'SECRET=3\n' > "$proj/sub/secrets.env"
printf 'cpus: 1\n' > "$proj/kbox.yaml"
# Editor and backup copies and a case variant (issue 17): hidden too.
for n in .env~ '#secrets.env#' .secrets.env.swp secrets.env.bak .env.save .ENV; do
	printf 'SECRET=4\n' > "$proj/$n"
done
nenv=$(ls -A "$proj" | grep -ci env)
printf 'bye\n' > "$proj/gone"
head -c 1048576 /dev/urandom > "$proj/src"
printf 'setting=1\n' > "$cfg/conf"
chmod 644 "$cfg/conf"
printf 'not for the guest\n' > "$outside/kbox-e2e-marker"
# A third mount, from a sandbox.yaml: hidden_extra adds a path pattern and
# *.pem to the defaults.
px="$tmp/px"
mkdir -p "$px/config"
printf 'SECRET=5\n' > "$px/.env"
printf 'path-secret\n' > "$px/config/secret.json"
printf 'other\n' > "$px/config/other"
printf 'key\n' > "$px/key.pem"
printf 'mounts:\n  - source: ./px\n    target: /px\n    hidden_extra: ["config/secret.json", "*.pem"]\n' \
	> "$tmp/sandbox.yaml"

# --- refusals, no boot ---
e2e_refuse "missing host folder" "No such file" -v "$tmp/nope:/w"
e2e_refuse "host file, not folder" "not a directory" -v "$proj/readme:/w"
e2e_refuse "relative guest path" "must be absolute" -v "$proj:w"
e2e_refuse "guest path with .." "'..' component" -v "$proj:/a/../b"
e2e_refuse "guest path with a comma" "may not contain" -v "$proj:/a,b"
e2e_refuse "guest root" "root '/'" -v "$proj:/"
e2e_refuse "guest /proc" "belongs to the guest kernel" -v "$proj:/proc/x"
e2e_refuse "same guest path twice" "two mounts" -v "$proj:/w" -v "$cfg:/w/"
e2e_refuse "no GUEST" "HOST:GUEST" -v "$proj"
e2e_refuse "ninth mount" "too many -v" -v "$proj:/1" -v "$proj:/2" -v "$proj:/3" \
	-v "$proj:/4" -v "$proj:/5" -v "$proj:/6" -v "$proj:/7" -v "$proj:/8" -v "$proj:/9"
# kbox's own files and folders against a share (docs/security.md, "kbox's
# own files"): refused before any boot when hiding cannot cover them.
home="$tmp/home"
mkdir -p "$home"
: > "$tmp/linked.log"
ln "$tmp/linked.log" "$home/innocent.txt"
e2e_refuse "an audit log with a second name (hard link)" "2 names (hard links)" \
	-v "$home:/h" --audit-log "$tmp/linked.log"
e2e_refuse "a --learn file with a second name" "2 names (hard links)" \
	-v "$home:/h" --learn "$home/innocent.txt"
rm -f "$home/innocent.txt"
XDG_DATA_HOME="$home/.local/share" e2e_refuse "kbox's data folder inside a share" \
	"kbox's data folder .* is inside the shared folder $home (/h in the guest)" -v "$home:/h"
XDG_RUNTIME_DIR="$home/run" e2e_refuse "kbox's runtime folder inside a share" \
	"kbox's runtime folder" -v "$home:/h:ro"
KBOX_CA_DIR="$home/ca/inner" e2e_refuse "kbox's CA folder, not made yet, inside a share" \
	"kbox's CA folder" -v "$home:/h:ro"
mkdir -p "$tmp/data/kbox/ca"
XDG_DATA_HOME="$tmp/data" e2e_refuse "a share inside kbox's data folder" \
	"is inside kbox's data folder" -v "$tmp/data/kbox/ca:/ca:ro"

e2e_need_kvm "the boot"

# --- one boot, many checks ---
cat > "$proj/checks.sh" <<'EOF'
t() { name=$1; shift; if "$@" > /tmp/out 2>&1; then echo "ok $name"; else echo "not ok $name: $(head -c 200 /tmp/out)"; fi; }
f() { name=$1; shift; if "$@" > /tmp/out 2>&1; then echo "not ok $name (succeeded)"; else echo "ok $name"; fi; }
# f_err NAME PATTERN CMD...: must fail with PATTERN in its message.
f_err() { name=$1 pat=$2; shift 2; if "$@" > /tmp/out 2>&1; then echo "not ok $name (succeeded)"; elif grep -q "$pat" /tmp/out; then echo "ok $name"; else echo "not ok $name: $(head -c 200 /tmp/out)"; fi; }
w=/workspace
t "mounted rw" grep -q " $w virtiofs rw," /proc/mounts
t "mounted ro" grep -q " /cfg virtiofs ro," /proc/mounts
t "started in the workdir" [ "$(pwd)" = $w ]
t "read a host file" [ "$(cat $w/readme)" = hello ]
t "listing" [ "$(ls $w | tr '\n' ' ')" = "checks.sh gone readme src sub " ]
t "no hidden names in ls -a" sh -c "! ls -a $w $w/sub | grep -q -e env -e kbox.yaml"
# kbox's own files in the share: the audit log, the --learn file, the
# kernel log (issue 17: the guest emptied the log and replaced the file).
t "kbox's files are not listed" sh -c "! ls -a $w $w/sub | grep -q -e audit.log -e learned -e kernel.log"
f "audit log hidden" stat $w/audit.log
f "cannot empty the audit log" sh -c ": > $w/audit.log"
f "cannot replace the --learn file" sh -c "echo x > $w/tmpl && mv $w/tmpl $w/learned.yaml"
rm -f $w/tmpl
f "cannot write the --learn file" sh -c "echo x > $w/learned.yaml"
f "kernel log hidden" cat $w/sub/kernel.log
# A destination public mode blocks (nothing leaves the host): one audit
# line.  (busybox wget crashes in this guest: nc.)  And a line the kernel
# log must show, quiet or not.
f "a private address is blocked" sh -c "nc -w 3 10.9.9.9 80 < /dev/null"
t "a kernel log line" sh -c "echo '<2>kbox-e2e-klog' > /dev/kmsg"
f ".env hidden" cat $w/.env
f ".env.local hidden" cat $w/.env.local
f "secrets.env hidden below" cat $w/sub/secrets.env
f "kbox.yaml hidden" stat $w/kbox.yaml
for n in .env~ '#secrets.env#' .secrets.env.swp secrets.env.bak .env.save .ENV; do
	f "copy $n hidden" cat "$w/$n"
done
t "no copy in ls -a" sh -c "! ls -a $w | grep -qi env"
f "cannot create .env" sh -c "echo x > $w/.env"
f "cannot rename onto .env" sh -c "echo y > $w/tmpf && mv $w/tmpf $w/.env"
rm -f $w/tmpf
t "write a new file" sh -c "echo hi > $w/new"
t "read it back" [ "$(cat $w/new)" = hi ]
t "append" sh -c "echo again >> $w/new"
t "mkdir, write, rename" sh -c "mkdir $w/dir && echo x > $w/dir/f && mv $w/dir/f $w/dir/g"
t "symlink" sh -c "ln -s g $w/dir/link && [ \"\$(cat $w/dir/link)\" = x ]"
t "hard link" sh -c "ln $w/dir/g $w/dir/h && [ \"\$(stat -c %h $w/dir/g)\" = 2 ]"
t "unlink a host file" rm $w/gone
t "rmdir" sh -c "mkdir $w/empty && rmdir $w/empty"
t "chmod" sh -c "chmod 600 $w/new && [ \"\$(stat -c %a $w/new)\" = 600 ]"
t "truncate" sh -c "echo 123456 > $w/trunc && : > $w/trunc && [ ! -s $w/trunc ]"
rm -f $w/trunc
t "a FIFO in the workspace works" sh -c "mkfifo $w/fifo && { echo through > $w/fifo & } && [ \"\$(cat $w/fifo)\" = through ]"
f "no device nodes on the host" mknod $w/null c 1 3
# Guest root owns the workspace, whoever runs kbox on the host (the host
# checks the other side below).
t "the guest runs as root" [ "$(id -u):$(id -g)" = 0:0 ]
t "ls -ln shows the host user's files as root's" sh -c "[ \"\$(ls -ln $w/readme | awk '{ print \$3 \":\" \$4 }')\" = 0:0 ]"
t "the workspace itself is root's" [ "$(stat -c %u:%g $w)" = 0:0 ]
t "umask 0: mkdir 0777 stays 0777" sh -c "umask 0 && mkdir $w/um777 && [ \"\$(stat -c %a $w/um777)\" = 777 ]"
echo x > $w/chowned
chown 4242:4242 $w/chowned 2>/dev/null
echo "chown-rc $?"
t "a symlink out lands in the guest's own /etc" sh -c "ln -s /etc $w/esc && [ \"\$(wc -l < $w/esc/passwd)\" = 1 ]"
# 1 MiB of host random data (8 requests of max_write each way); made on
# the host because /dev/urandom in a PVM guest takes ~50 s a MiB.
echo "md5-src $(md5sum < $w/src | cut -d' ' -f1)"
t "1 MiB copy" cp $w/src $w/big
echo "md5 $(md5sum < $w/big | cut -d' ' -f1)"
t "drop caches" sh -c "sync && echo 3 > /proc/sys/vm/drop_caches"
echo "md5-reread $(md5sum < $w/big | cut -d' ' -f1)"
t "read with odd offsets" sh -c "[ \"\$(dd if=$w/big bs=1000 skip=1001 count=3 2>/dev/null | wc -c)\" = 3000 ]"
t "read the ro mount" [ "$(cat /cfg/conf)" = setting=1 ]
f_err "ro: create" "Read-only" touch /cfg/x
f_err "ro: write" "Read-only" sh -c "echo x >> /cfg/conf"
f_err "ro: mkdir" "Read-only" mkdir /cfg/d
f_err "ro: rm" "Read-only" rm /cfg/conf
f_err "ro: rename" "Read-only" mv /cfg/conf /cfg/conf2
f_err "ro: chmod" "Read-only" chmod 777 /cfg/conf
f_err "ro: symlink" "Read-only" ln -s x /cfg/l
f ".env hidden with hidden_extra (defaults kept)" cat /px/.env
f "hidden_extra: *.pem hidden" cat /px/key.pem
f "hidden_extra: config/secret.json hidden" cat /px/config/secret.json
t "hidden_extra: its sibling is not" [ "$(cat /px/config/other)" = other ]
f_err "mv config cfg refused (path pattern)" "Permission denied" mv /px/config /px/cfg
f "cfg/secret.json not reachable" cat /px/cfg/secret.json
t "a file moves out of config and back" sh -c "mv /px/config/other /px/o && mv /px/o /px/config/other"
t "host folders outside the mounts are invisible" sh -c "[ -z \"\$(find / -path /proc -prune -o -path /sys -prune -o -name kbox-e2e-marker -print)\" ]"
t "guest /root is the initramfs one" [ -z "$(ls -A /root)" ]
echo done
EOF

start=$(date +%s)
timeout "$boot_timeout" "$kbox" run --conf "$tmp/sandbox.yaml" -v "$proj:/workspace" \
	-v "$cfg:/cfg:ro" -w /workspace \
	--audit-log "$proj/audit.log" --learn "$proj/learned.yaml" --kernel-log "$proj/sub/kernel.log" \
	-- sh /workspace/checks.sh > "$tmp/out" 2> "$tmp/err"
rc=$?
took=$(( $(date +%s) - start ))
echo "# boot with two mounts and the checks: ${took}s"
e2e_ran_to_end "guest script" "$rc" "$tmp/out" "$tmp/err"
e2e_guest_results "guest: " "$tmp/out"

# --- what the host sees afterwards ---
host_check "host: new file has the guest's data" [ "$(cat "$proj/new" 2>/dev/null)" = "$(printf 'hi\nagain')" ]
host_check "host: renamed file" [ "$(cat "$proj/dir/g" 2>/dev/null)" = x ]
host_check "host: rename source gone" [ ! -e "$proj/dir/f" ]
host_check "host: symlink kept as a link" [ "$(readlink "$proj/dir/link")" = g ]
host_check "host: hard link" [ "$(stat -c %h "$proj/dir/g" 2>/dev/null)" = 2 ]
host_check "host: unlinked file gone" [ ! -e "$proj/gone" ]
host_check "host: mode set" [ "$(stat -c %a "$proj/new" 2>/dev/null)" = 600 ]
host_check "host: escape link points where the guest said, unfollowed" [ "$(readlink "$proj/esc")" = /etc ]
host_check "host: the guest's FIFO is a FIFO" [ -p "$proj/fifo" ]
me="$(id -u):$(id -g)"
host_check "host: what guest root made is the host user's ($me)" [ "$(stat -c %u:%g "$proj/new" "$proj/dir" | sort -u)" = "$me" ]
host_check "host: umask applied once (0777)" [ "$(stat -c %a "$proj/um777" 2>/dev/null)" = 777 ]
# kbox as root can give a file away; as a user, the chown is refused and
# changes nothing.
if [ "$(id -u)" = 0 ]; then
	host_check "host: chown by guest root as host root" [ "$(stat -c %u:%g "$proj/chowned")" = 4242:4242 ]
	host_check "guest: chown to another id worked (kbox as root)" grep -qx "chown-rc 0" "$tmp/out"
else
	host_check "host: a chown the user cannot give changed nothing" [ "$(stat -c %u:%g "$proj/chowned")" = "$me" ]
	host_check "guest: chown to another id refused (kbox as a user)" grep -qx "chown-rc 1" "$tmp/out"
fi
host_check "host: no device node" [ ! -e "$proj/null" ]
host_check "host: .env untouched" [ "$(cat "$proj/.env")" = SECRET=1 ]
host_check "host: nothing landed on hidden names" [ "$(ls -A "$proj" | grep -ci env)" = "$nenv" ]
host_md5=$(md5sum < "$proj/src" | cut -d' ' -f1)
host_check "host: guest read 1 MiB right" grep -qx "md5-src $host_md5" "$tmp/out"
host_check "host: 1 MiB file matches the guest's checksum" grep -qx "md5 $host_md5" "$tmp/out"
host_check "host: reread after drop_caches matches" grep -qx "md5-reread $host_md5" "$tmp/out"
host_check "host: 1 MiB exactly" [ "$(stat -c %s "$proj/big" 2>/dev/null)" = 1048576 ]
host_check "host: ro folder unchanged" [ "$(ls -A "$cfg")" = conf ]
host_check "host: ro file unchanged" [ "$(cat "$cfg/conf")" = setting=1 ]
host_check "host: the path-hidden file stayed where it was" \
	[ "$(cat "$px/config/secret.json")" = path-secret ]
host_check "host: no cfg folder" [ ! -e "$px/cfg" ]
host_check "host: ro file mode unchanged" [ "$(stat -c %a "$cfg/conf")" = 644 ]
host_check "host: the audit log holds kbox's line for the blocked address" \
	grep -q '"dst":"10.9.9.9' "$proj/audit.log"
host_check "host: the --learn file is kbox's" \
	sh -c "head -1 '$proj/learned.yaml' | grep -q '^# A suggested network allowlist'"
host_check "host: the kernel log was written" grep -q kbox-e2e-klog "$proj/sub/kernel.log"

# --- the same as an ordinary user, with git ---
# Run as root, one more boot as the user KBOX_E2E_USER (default kuser, when
# it exists; empty: skipped) over a folder that user owns, on an image made
# here by root (as one imported with sudo) from the host's static busybox
# and its git with the libraries it links: guest root owns the workspace,
# so git (>= 2.35 refuses a repository its user does not own) works in it,
# and the host user owns what the guest makes.  Run as a user, the boot
# above already was that user's (without git: the initramfs has none).
as_user=${KBOX_E2E_USER-kuser}
git=$(command -v git)
if [ "$(id -u)" = 0 ] && [ -n "$as_user" ] && id "$as_user" > /dev/null 2>&1 &&
	[ -n "$git" ] && [ -x /bin/busybox ] && ! ldd /bin/busybox > /dev/null 2>&1; then
	ubase=$(runuser -u "$as_user" -- mktemp -d)
	uproj=$ubase/proj img=$ubase/image
	runuser -u "$as_user" -- mkdir "$uproj"
	runuser -u "$as_user" -- sh -c "printf 'x\\n' > '$uproj/theirs'"
	mkdir -p "$img/bin" "$img/sbin" "$img/usr/bin" "$img/usr/sbin" "$img/etc" "$img/root"
	cp /bin/busybox "$img/bin/busybox"
	for app in $(/bin/busybox --list-full); do
		[ -e "$img/$app" ] || ln -s /bin/busybox "$img/$app"
	done
	cp "$git" "$img/usr/bin/git"
	for lib in $(ldd "$git" | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }'); do
		mkdir -p "$img$(dirname "$lib")"
		cp -L "$lib" "$img$lib"
	done
	echo 'root:x:0:0:root:/root:/bin/sh' > "$img/etc/passwd"
	echo 'root:x:0:' > "$img/etc/group"
	cat > "$uproj/checks.sh" <<'EOF'
t() { name=$1; shift; if "$@" > /tmp/out 2>&1; then echo "ok $name"; else echo "not ok $name: $(head -c 300 /tmp/out)"; fi; }
cd /workspace
t "the guest runs as root" [ "$(id -u):$(id -g)" = 0:0 ]
t "ls -ln shows the user's files as root's" sh -c "[ \"\$(ls -ln theirs | awk '{ print \$3 \":\" \$4 }')\" = 0:0 ]"
t "git init, add, commit" sh -c "git init -q && git add theirs checks.sh &&
	git -c user.name=t -c user.email=t@example.invalid commit -qm one"
t "git branch, status, diff, log" sh -c "git branch side && echo y >> theirs &&
	git status --porcelain | grep -qx ' M theirs' && git diff | grep -qx '+y' &&
	[ \"\$(git log --format=%s)\" = one ]"
umask 0
echo y > made
mkdir d
echo done
EOF
	chown "$as_user:" "$uproj/checks.sh"
	runuser -u "$as_user" -- env HOME="$(getent passwd "$as_user" | cut -d: -f6)" \
		timeout "$boot_timeout" "$kbox" run --image "$img" -v "$uproj:/workspace" -w /workspace \
		-- sh /workspace/checks.sh > "$tmp/uout" 2> "$tmp/uerr"
	rc=$?
	e2e_ran_to_end "guest as $as_user" "$rc" "$tmp/uout" "$tmp/uerr"
	e2e_guest_results "as $as_user: guest: " "$tmp/uout"
	uid=$(id -u "$as_user"); gid=$(id -g "$as_user")
	host_check "as $as_user: what the guest made is $uid:$gid on the host, modes unmasked" \
		[ "$(stat -c %u:%g:%a "$uproj/made" "$uproj/d" 2>/dev/null | tr '\n' ' ')" = "$uid:$gid:666 $uid:$gid:777 " ]
	host_check "as $as_user: the repository is $uid's on the host" [ -z "$(find "$uproj" ! -uid "$uid")" ]
	host_check "as $as_user: git on the host reads the guest's commit" \
		[ "$(runuser -u "$as_user" -- env HOME="$ubase" git -C "$uproj" log --format=%s 2>&1)" = one ]
	rm -rf "$ubase"
else
	echo "# skipped the boot as an ordinary user: needs root, the user ${as_user:-(KBOX_E2E_USER empty)}, git and a static /bin/busybox"
fi

e2e_finish
